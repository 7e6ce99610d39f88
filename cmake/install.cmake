# Install rules (GNUInstallDirs layout), the CMake package, normjit.pc, and the tests that check what a
# user of the installed library sees: its exported symbols, its soname, and a program built against it.
# scripts/check-install.sh installs into a temporary prefix and builds examples/consumer against it.
include(CMakePackageConfigHelpers)
set(NJ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/normjit)

install(TARGETS normjit normjit_static EXPORT normjitTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/normjit.h ${CMAKE_SOURCE_DIR}/include/normjit_ops.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET normjit_tool)
  install(TARGETS normjit_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/manifests/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/manifests)
install(FILES ${CMAKE_SOURCE_DIR}/examples/consumer/consumer.c ${CMAKE_SOURCE_DIR}/examples/consumer/CMakeLists.txt
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/consumer)

install(EXPORT normjitTargets NAMESPACE normjit:: DESTINATION ${NJ_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/normjitConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/normjitConfig.cmake INSTALL_DESTINATION ${NJ_CMAKE_DIR})
# The soname changes with the major version only, so any 0.x.y or 1.x.y of the same major satisfies a
# request for an older minor of that major.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/normjitConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/normjitConfig.cmake ${CMAKE_BINARY_DIR}/normjitConfigVersion.cmake
        DESTINATION ${NJ_CMAKE_DIR})

# normjit.pc finds its prefix from its own location (${pcfiledir}), so a moved prefix still works.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(NJ_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(NJ_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH nj_up /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" nj_up "${nj_up}")
  set(NJ_PC_PREFIX "\${pcfiledir}/${nj_up}")
  set(NJ_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(NJ_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(NJ_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What libnormjit.a needs: hiredis (when built with the Redis tier), Lua and xxhash as pkg-config found
# them (their -L when not in a standard place), then libcrypto (OpenSSL: archive signatures), dl,
# pthread, m.
set(NJ_PC_LIBS_PRIVATE "")
foreach(flag ${HIREDIS_LDFLAGS} ${LUA_LDFLAGS} ${XXHASH_LDFLAGS})
  if(flag MATCHES "^-L(.*)" AND CMAKE_MATCH_1 IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
    continue() # the linker searches it anyway
  endif()
  list(APPEND NJ_PC_LIBS_PRIVATE ${flag})
endforeach()
foreach(lib crypto ${CMAKE_DL_LIBS} pthread m)
  list(APPEND NJ_PC_LIBS_PRIVATE -l${lib})
endforeach()
list(REMOVE_DUPLICATES NJ_PC_LIBS_PRIVATE)
list(JOIN NJ_PC_LIBS_PRIVATE " " NJ_PC_LIBS_PRIVATE)
configure_file(${CMAKE_SOURCE_DIR}/cmake/normjit.pc.in ${CMAKE_BINARY_DIR}/normjit.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/normjit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The shared library exports exactly the NJ_API functions of the header (none of the operator header's),
# under the soname of the ABI version, with no run path.
add_test(NAME abi_exports COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:normjit> -DHEADER=${CMAKE_SOURCE_DIR}/include/normjit.h
         -DSONAME=libnormjit.so.${PROJECT_VERSION_MAJOR} -DNM=${CMAKE_NM} -DREADELF=${CMAKE_READELF}
         -DOPS_HEADER=${CMAKE_SOURCE_DIR}/include/normjit_ops.h -P ${CMAKE_SOURCE_DIR}/cmake/check_exports.cmake)
# The consumer example built in this tree against the shared library: the header's version macros, the
# library's nj_version() and the project's version agree, and a forward pass on the emulator is right.
add_executable(consumer_shared ${CMAKE_SOURCE_DIR}/examples/consumer/consumer.c)
target_compile_definitions(consumer_shared PRIVATE NJ_EXPECT_VERSION="${PROJECT_VERSION}")
target_compile_options(consumer_shared PRIVATE ${NJ_WARNINGS})
target_link_libraries(consumer_shared PRIVATE normjit m)
add_test(NAME consumer_shared COMMAND consumer_shared)
set_tests_properties(consumer_shared PROPERTIES ENVIRONMENT "NORMJIT_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache/consumer_shared")
