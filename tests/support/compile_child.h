/* Runs this test program again as a fresh child process (fork + exec of /proc/self/exe) with one
 * environment variable set, so a case that needs NVRTC or libcuda loaded from another path starts with
 * nothing loaded: the library loads each of them once per process. */
#ifndef NJ_TEST_COMPILE_CHILD_H
#define NJ_TEST_COMPILE_CHILD_H

/* The child runs `argv[0] <mode>`; its main dispatches on the mode. Returns the child's exit code, or -1
 * when it could not be started or died from a signal. env_value NULL unsets env_name in the child. */
int nj_test_run_child(const char *mode, const char *env_name, const char *env_value);

#endif
