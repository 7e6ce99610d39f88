/* Tests of the normjit tool under faults (a full disk, a read-only root, forged or unkeyed archives, a
 * NUL byte in a manifest): what it counts, reports and exits with. Faults come from an LD_PRELOAD shim
 * (tests/shim/fault_shim.c) or, for a read-only root when not running as root, from chmod. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "normjit.h"
#include "tool_run.h"

static char nj_fault_env[4][600];

/* The next runs go through the fault shim (tests/shim/fault_shim.c): mode "enospc" (after budget bytes)
 * or "erofs", for every path below dir. The sanitizers' runtime must then accept a library ahead of it. */
static void nj_fault(const char *mode, const char *dir, long long budget)
{
    snprintf(nj_fault_env[0], sizeof nj_fault_env[0], "LD_PRELOAD=%s", NJ_FAULT_SHIM);
    snprintf(nj_fault_env[1], sizeof nj_fault_env[1], "NJ_FAULT_MODE=%s", mode);
    snprintf(nj_fault_env[2], sizeof nj_fault_env[2], "NJ_FAULT_PATH=%s", dir);
    snprintf(nj_fault_env[3], sizeof nj_fault_env[3], "NJ_FAULT_BUDGET=%lld", budget);
    for (int i = 0; i < 4; i++) nj_child_extra[i] = nj_fault_env[i];
    const char *asan = getenv("ASAN_OPTIONS");
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%sverify_asan_link_order=0", asan ? asan : "", asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", buf, 1);
}

static void nj_no_fault(void) { memset(nj_child_extra, 0, sizeof nj_child_extra); }

/* Makes root read-only for the tool: chmod where that stops writes; as root (CI), where chmod stops
 * nothing, the shim's EROFS instead. Says which, so a log shows what was exercised. */
static void nj_read_only_root(const char *root)
{
    if (geteuid() != 0) {
        assert_int_equal(chmod(root, 0500), 0);
        print_message("read-only root: chmod 0500\n");
    } else {
        nj_fault("erofs", root, 0);
        print_message("read-only root: running as root, EROFS through the fault shim\n");
    }
}

/* Bytes under dir's regular files, lock files aside. */
static long long nj_du(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && strcmp(e->d_name, "locks") != 0) total += nj_du(p);
        else if (S_ISREG(st.st_mode)) total += st.st_size;
    }
    closedir(d);
    return total;
}

static const char *const nj_three[] = {"rmsnorm f32 *x256 flags=scale", "layernorm f16 *x512 flags=scale,bias",
                                       "rmsnorm bf16 *x1024 flags=scale"};

/* What a deployment does: a context that never compiles, on that cache, asks for the problem. */
static nj_status nj_no_compile_plan(const char *cache, const char *text)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_COMPILE_ONLY;
    o.arch = 90;
    o.cache_dir = cache;
    o.flags = NJ_CTX_NO_COMPILE;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    assert_string_equal(nj_context_cache_dir(ctx), cache);
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(text, 1, &d), NJ_OK);
    nj_plan *plan = NULL;
    nj_status s = nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan);
    nj_context_destroy(ctx);
    return s;
}

/* A disk that fills up after the first problem: the warmup says how many kernels were not stored and
 * why, fails, names exactly the problems a NO_COMPILE context cannot serve, and serves the one it did
 * not name. */
static void test_warmup_full_disk_fail(void **state)
{
    (void)state;
    char ref[512], cache[512], man1[512], man[512], text[512];
    nj_path(ref, sizeof ref, "ref");
    nj_path(cache, sizeof cache, "cache");
    nj_path(man1, sizeof man1, "one.txt");
    nj_path(man, sizeof man, "three.txt");
    snprintf(text, sizeof text, "%s\n", nj_three[0]);
    nj_write_file(man1, text);
    snprintf(text, sizeof text, "%s\n%s\n%s\n", nj_three[0], nj_three[1], nj_three[2]);
    nj_write_file(man, text);
    /* the disk holds exactly the first problem's entries */
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--jobs", "1", "--passes", "fwd", "--cache", ref, man1);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    long long budget = nj_du(ref);
    assert_true(budget > 0);
    nj_fault("enospc", cache, budget);
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--jobs", "1", "--passes", "fwd", "--cache", cache, man);
    nj_no_fault();
    assert_int_equal(r.status, 1);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 6);
    assert_int_equal(nj_field(r.out, "failed"), 0);
    assert_int_equal(nj_field(r.out, "not stored"), 4);
    assert_int_equal(nj_field(r.out, "(no space"), 4);
    assert_int_equal(nj_field(r.out, "missing after"), 2);
    assert_null(strstr(r.err, ":1: rmsnorm f32"));
    assert_non_null(strstr(r.err, ":2: layernorm f16 *x512 flags=scale,bias: not in the cache after the warmup"));
    assert_non_null(strstr(r.err, ":3: rmsnorm bf16 *x1024 flags=scale: not in the cache after the warmup"));
    nj_run_free(&r);
    assert_int_equal(nj_no_compile_plan(cache, nj_three[0]), NJ_OK);
    assert_int_equal(nj_no_compile_plan(cache, nj_three[1]), NJ_ERR_NOT_CACHED);
    assert_int_equal(nj_no_compile_plan(cache, nj_three[2]), NJ_ERR_NOT_CACHED);
    /* with room again, a second warmup compiles only what is missing and succeeds */
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--passes", "fwd", "--cache", cache, man);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 4);
    assert_int_equal(nj_field(r.out, "missing after"), 0);
    nj_run_free(&r);
    for (int i = 0; i < 3; i++) assert_int_equal(nj_no_compile_plan(cache, nj_three[i]), NJ_OK);
}

/* A read-only root stores nothing: every compiled kernel is counted as not stored (read-only) and the
 * warmup fails instead of reporting success. */
static void test_warmup_read_only_root_fail(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, nj_small_manifest);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", cache, "stats"); /* creates the root, empty */
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    nj_read_only_root(cache);
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--passes", "fwd", "--cache", cache, man);
    nj_no_fault();
    chmod(cache, 0700);
    assert_int_equal(r.status, 1);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 4);
    assert_int_equal(nj_field(r.out, "not stored"), 4);
    assert_int_equal(nj_field(r.out, "read-only"), 4);
    assert_int_equal(nj_field(r.out, "missing after"), 2);
    nj_run_free(&r);
}

/* verify on a read-only root reports a bad entry as left in place, not removed, and it is still there. */
static void test_cache_verify_read_only_root(void **state)
{
    (void)state;
    char cache[512], entry[1024];
    nj_path(cache, sizeof cache, "cache");
    nj_warm_small(cache);
    assert_true(nj_find_entry(cache, entry, sizeof entry));
    FILE *f = fopen(entry, "r+b");
    assert_non_null(f);
    fseek(f, -16, SEEK_END);
    int c = fgetc(f);
    fseek(f, -16, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
    nj_read_only_root(cache);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", cache, "verify");
    nj_no_fault();
    chmod(cache, 0700);
    assert_int_equal(r.status, 1);
    assert_null(strstr(r.out, "bad entry removed"));
    assert_non_null(strstr(r.out, "bad entry left in place"));
    assert_non_null(strstr(r.out, "0 removed, 1 left in place"));
    nj_run_free(&r);
    assert_int_equal(access(entry, F_OK), 0);
}

/* An archive entry changed after signing (another kernel's bytes with fixed-up checksums, or any flip)
 * is refused by its tag; an archive under another key or with no key configured is refused whole. */
static void test_cache_import_forged_fail(void **state)
{
    (void)state;
    char a[512], b[512], file[512];
    nj_path(a, sizeof a, "cache-a");
    nj_path(b, sizeof b, "cache-b");
    nj_path(file, sizeof file, "kernels.njc");
    nj_warm_small(a);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", a, "export", file);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    /* flip a byte of the last entry's binary (before its 32-byte tag) */
    FILE *f = fopen(file, "r+b");
    assert_non_null(f);
    fseek(f, -48, SEEK_END);
    int c = fgetc(f);
    fseek(f, -48, SEEK_END);
    fputc(c ^ 0x20, f);
    fclose(f);
    r = NJ_TOOL(NULL, "cache", "--cache", b, "import", file);
    assert_int_equal(r.status, 1);
    assert_int_equal(nj_field(r.out, "imported"), 3);
    assert_non_null(strstr(r.out, "1 rejected (1 failed authentication)"));
    assert_non_null(strstr(r.err, "NJ_ERR_CACHE_UNTRUSTED"));
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", b, "verify");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "3 entries verified, 0 bad"));
    nj_run_free(&r);
    /* no key: nothing happens */
    nj_child_no_key = 1;
    r = NJ_TOOL(NULL, "cache", "--cache", b, "import", file);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "NJ_ERR_CACHE_UNTRUSTED"));
    assert_non_null(strstr(r.err, "NORMJIT_CACHE_KEY"));
    nj_run_free(&r);
    /* another key: refused whole */
    static char other[] = "NORMJIT_CACHE_KEY=some other key, 32 bytes long....";
    nj_child_extra[0] = other;
    r = NJ_TOOL(NULL, "cache", "--cache", b, "clear");
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", b, "import", file);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "another key"));
    assert_int_equal(nj_field(r.out, "imported"), 0);
    nj_run_free(&r);
}

/* An import onto a full disk counts each entry not stored and fails. */
static void test_cache_import_full_disk_fail(void **state)
{
    (void)state;
    char a[512], b[512], file[512];
    nj_path(a, sizeof a, "cache-a");
    nj_path(b, sizeof b, "cache-b");
    nj_path(file, sizeof file, "kernels.njc");
    nj_warm_small(a);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", a, "export", file);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    nj_fault("enospc", b, 1);
    r = NJ_TOOL(NULL, "cache", "--cache", b, "import", file);
    nj_no_fault();
    assert_int_equal(r.status, 1);
    assert_int_equal(nj_field(r.out, "imported"), 0);
    assert_non_null(strstr(r.out, "4 not stored (no space 4, read-only 0, other 0)"));
    nj_run_free(&r);
}

/* A NUL byte inside a manifest line is an error of that line, not a silent cut at the NUL. */
static void test_warmup_nul_in_manifest_fail(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "nul.txt");
    static const char text[] = "rmsnorm f32 *x256\0 flags=scale\n";
    FILE *f = fopen(man, "wb");
    assert_non_null(f);
    fwrite(text, 1, sizeof text - 1, f);
    fclose(f);
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, man);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, ":1: a NUL byte inside the line"));
    assert_null(strstr(r.out, "kernels compiled"));
    nj_run_free(&r);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, nj_setup, nj_teardown)
    const struct CMUnitTest tests[] = {
        T(test_warmup_full_disk_fail),
        T(test_warmup_read_only_root_fail),
        T(test_cache_verify_read_only_root),
        T(test_cache_import_forged_fail),
        T(test_cache_import_full_disk_fail),
        T(test_warmup_nul_in_manifest_fail),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
