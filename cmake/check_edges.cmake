# ctest module_edges: cmake -DSRC=<repo>/src -P check_edges.cmake
# Fails when a module reaches back up past the edges docs/architecture.md draws: the lower cache
# files calling the lookup path, the backends or the template set depending on the planner or on codegen,
# a backend told apart by its name string, or a weak symbol standing in for a module.
if(NOT SRC)
  message(FATAL_ERROR "check_edges: -DSRC= is required")
endif()
set(problems "")

# Non-static functions a file defines: lines starting with a return type and a name followed by '('.
function(defined_functions file out)
  file(STRINGS ${file} lines REGEX "^[a-z][a-z0-9_ *]* \\**nj_[a-z0-9_]+\\(")
  set(names "")
  foreach(l IN LISTS lines)
    if(l MATCHES "^static ")
      continue()
    endif()
    string(REGEX MATCH "nj_[a-z0-9_]+\\(" n "${l}")
    string(REPLACE "(" "" n "${n}")
    list(APPEND names ${n})
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

# No file in `callers` calls a function that `callee` defines.
function(no_calls callee callers)
  defined_functions(${SRC}/${callee} names)
  set(found "${problems}")
  foreach(c IN LISTS callers)
    file(READ ${SRC}/${c} text)
    foreach(n IN LISTS names)
      if(text MATCHES "[^a-z0-9_]${n}\\(")
        string(APPEND found "  ${c} calls ${n} (${callee}): a lower layer calling up\n")
      endif()
    endforeach()
  endforeach()
  set(problems "${found}" PARENT_SCOPE)
endfunction()

# Cache layers: cache_file <- cache_lock <- cache_maint <- cache.
no_calls(cache.c "cache_file.c;cache_lock.c;cache_maint.c")
no_calls(cache_maint.c "cache_file.c;cache_lock.c")
no_calls(cache_lock.c "cache_file.c")

# Backends and the template set sit below the planner and codegen.
foreach(f backend.h backend_cuda.c backend_emu.c device.h templates.h templates.c)
  file(STRINGS ${SRC}/${f} incs REGEX "^#include \"(planner|codegen|codegen_env)\\.h\"")
  if(incs)
    set(problems "${problems}  ${f}: ${incs} (backends and templates must not depend on the planner or codegen)\n")
  endif()
endforeach()

file(GLOB sources ${SRC}/*.c ${SRC}/*.h)
foreach(f IN LISTS sources)
  file(READ ${f} text)
  get_filename_component(name ${f} NAME)
  if(text MATCHES "strn?cmp\\([^;]*ops->name")
    set(problems "${problems}  ${name}: compares a backend's name (use ops->kind)\n")
  endif()
  if(text MATCHES "#pragma weak")
    set(problems "${problems}  ${name}: #pragma weak (depend on the module instead)\n")
  endif()
endforeach()

if(problems)
  message(FATAL_ERROR "check_edges:\n${problems}")
endif()
message(STATUS "check_edges: module edges hold")
