/* Shared by the tool suites (test_tool.c, test_tool_faults.c): runs the built normjit binary as a child
 * process (fork/exec) with an explicit environment, a temporary HOME and cache roots, and captures its
 * exit status and output. Header-only (static helpers): each suite is one program. Include after
 * cmocka.h; the including file is compiled with NJ_BINARY_DIR. */
#ifndef NJ_TOOL_RUN_H
#define NJ_TOOL_RUN_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NJ_UNUSED __attribute__((unused))

#define NJ_TOOL_PATH NJ_BINARY_DIR "/normjit"

NJ_UNUSED static char nj_tmp[256];          /* per-test temporary directory */
NJ_UNUSED static const char *nj_child_cwd;  /* working directory of the next runs (NULL = inherited) */
/* Extra NAME=VALUE settings of the next runs (NULL-terminated; the fault shim's), and the archive key
 * every run gets. */
NJ_UNUSED static const char *nj_child_extra[8];
NJ_UNUSED static int nj_child_no_key; /* the next runs get no NORMJIT_CACHE_KEY */
#define NJ_TEST_KEY "normjit tool test key 0123456789"

typedef struct nj_run {
    int status; /* exit code, or 128 + signal */
    char *out, *err;
} nj_run;

NJ_UNUSED static void nj_run_free(nj_run *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

NJ_UNUSED static char *nj_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

/* The child's whole environment: nothing inherited but PATH and sanitizer/CUDA settings. */
NJ_UNUSED static void nj_child_env(char **env, size_t cap, char *store, size_t store_cap, const char *backend)
{
    static const char *const pass[] = {"PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "CUDA_HOME",
                                       "LD_LIBRARY_PATH"};
    size_t n = 0, used = 0;
    for (size_t i = 0; i < sizeof pass / sizeof pass[0] && n + 5 < cap; i++) {
        const char *v = getenv(pass[i]);
        if (!v) continue;
        int w = snprintf(store + used, store_cap - used, "%s=%s", pass[i], v);
        env[n++] = store + used;
        used += (size_t)w + 1;
    }
    int w = snprintf(store + used, store_cap - used, "HOME=%s/home", nj_tmp);
    env[n++] = store + used;
    used += (size_t)w + 1;
    w = snprintf(store + used, store_cap - used, "XDG_CACHE_HOME=%s/xdg", nj_tmp);
    env[n++] = store + used;
    used += (size_t)w + 1;
    if (!nj_child_no_key) {
        w = snprintf(store + used, store_cap - used, "NORMJIT_CACHE_KEY=%s", NJ_TEST_KEY);
        env[n++] = store + used;
        used += (size_t)w + 1;
    }
    for (int i = 0; nj_child_extra[i] && n + 2 < cap; i++) env[n++] = (char *)nj_child_extra[i];
    if (backend) {
        snprintf(store + used, store_cap - used, "NORMJIT_BACKEND=%s", backend);
        env[n++] = store + used;
    }
    env[n] = NULL;
}

/* Runs the tool with the given arguments (NULL-terminated), stdout/stderr captured to files. */
NJ_UNUSED static nj_run nj_tool_v(const char *backend, const char *const *args)
{
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)NJ_TOOL_PATH;
    for (; args[argc - 1] && argc < 63; argc++) argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    char outp[512], errp[512], store[8192];
    char *env[32];
    snprintf(outp, sizeof outp, "%s/stdout", nj_tmp);
    snprintf(errp, sizeof errp, "%s/stderr", nj_tmp);
    nj_child_env(env, 32, store, sizeof store, backend);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int o = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600), e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        if (nj_child_cwd && chdir(nj_child_cwd) != 0) _exit(125);
        execve(argv[0], argv, env);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    nj_run r;
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = nj_slurp(outp);
    r.err = nj_slurp(errp);
    if (getenv("NJ_TEST_VERBOSE")) fprintf(stderr, "--- exit %d\n%s%s", r.status, r.out, r.err);
    return r;
}

#define NJ_TOOL(backend, ...) nj_tool_v((backend), (const char *const[]){__VA_ARGS__, NULL})

NJ_UNUSED static void nj_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The number after `label` in the tool's output (e.g. "kernels compiled   4"); -1 if absent. */
NJ_UNUSED static long nj_field(const char *out, const char *label)
{
    const char *p = strstr(out, label);
    if (!p) return -1;
    return strtol(p + strlen(label), NULL, 10);
}

NJ_UNUSED static int nj_rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

NJ_UNUSED static int nj_setup(void **state)
{
    (void)state;
    snprintf(nj_tmp, sizeof nj_tmp, "/tmp/nj-test-tool-XXXXXX");
    if (!mkdtemp(nj_tmp)) return -1;
    char p[512];
    snprintf(p, sizeof p, "%s/home", nj_tmp);
    mkdir(p, 0700);
    return 0;
}

NJ_UNUSED static int nj_teardown(void **state)
{
    (void)state;
    nj_child_cwd = NULL;
    memset(nj_child_extra, 0, sizeof nj_child_extra);
    nj_child_no_key = 0;
    if (!getenv("NJ_TEST_KEEP")) nftw(nj_tmp, nj_rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

NJ_UNUSED static void nj_path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", nj_tmp, name); }

/* Two small, distinct problems (forward and backward each): cheap to compile. */
NJ_UNUSED static const char nj_small_manifest[] = "# two small problems\n"
                                        "rmsnorm f32 *x256 flags=scale\n"
                                        "\n"
                                        "layernorm f16 *x512 flags=scale,bias param=f32   # trailing comment\n";

/* Warms the forward kernels of the small manifest into cache dir `cache` (two entries). */
NJ_UNUSED static void nj_warm_small(const char *cache)
{
    char man[512];
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, nj_small_manifest);
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
}

/* First regular entry file under dir (recursively), skipping lock files. */
NJ_UNUSED static int nj_find_entry(const char *dir, char *out, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) found = nj_find_entry(p, out, cap);
        else if (S_ISREG(st.st_mode) && !strstr(e->d_name, ".lock") && !strstr(e->d_name, "tmp")) {
            snprintf(out, cap, "%s", p);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

#endif
