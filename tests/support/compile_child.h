/* Runs this test program again as a fresh child process (fork + exec of /proc/self/exe) with one
 * environment variable set, so a case that needs NVRTC or libcuda loaded from another path starts with
 * nothing loaded: the library loads each of them once per process. */
#ifndef NJ_TEST_COMPILE_CHILD_H
#define NJ_TEST_COMPILE_CHILD_H

#include <stddef.h>

/* The child runs `argv[0] <mode>`; its main dispatches on the mode. Returns the child's exit code, or -1
 * when it could not be started or died from a signal. env_value NULL unsets env_name in the child. */
int nj_test_run_child(const char *mode, const char *env_name, const char *env_value);

/* Builds <source_dir>/<rel_source> with `cc -shared -fPIC -D<define>` into a new temp directory as <lib_name>;
 * the path goes to out. Returns 0 on success. nj_test_remove_shared removes the file and its directory. */
int nj_test_build_shared(const char *source_dir, const char *rel_source, const char *define, const char *lib_name,
                         char *out, size_t cap);
void nj_test_remove_shared(const char *path);

#endif
