#include "compile_child.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int nj_test_run_child(const char *mode, const char *env_name, const char *env_value)
{
    fflush(NULL); /* buffered output would be printed twice */
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (env_value)
            setenv(env_name, env_value, 1);
        else
            unsetenv(env_name);
        execl("/proc/self/exe", "child", mode, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    if (WIFSIGNALED(st)) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
