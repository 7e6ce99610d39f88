#include "compile_child.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int nj_test_build_shared(const char *source_dir, const char *rel_source, const char *define, const char *lib_name,
                         char *out, size_t cap)
{
    char dir[] = "/tmp/nj_fakelib_XXXXXX";
    if (!mkdtemp(dir)) return -1;
    snprintf(out, cap, "%s/%s", dir, lib_name);
    const char *cc = getenv("CC");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -shared -fPIC -O1 -D%s -o '%s' '%s/%s'", cc && cc[0] ? cc : "cc", define, out,
             source_dir, rel_source);
    fflush(NULL);
    return system(cmd) == 0 ? 0 : -1;
}

void nj_test_remove_shared(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    unlink(path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(dir);
    }
}
