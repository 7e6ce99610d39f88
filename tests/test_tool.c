/* Tests of the normjit command-line tool: the built binary is run as a child process (fork/exec) with
 * an explicit environment, a temporary HOME and cache roots, and its exit status and output checked. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "check_lib.h"

#include "tool_run.h"

/* ---- help and usage ---- */

static void test_help_every_subcommand(void **state)
{
    (void)state;
    static const char *const cmds[] = {"warmup", "plan", "cache", "check", "bench"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        nj_run r = NJ_TOOL(NULL, cmds[i], "--help");
        assert_int_equal(r.status, 0);
        char want[64];
        snprintf(want, sizeof want, "usage: normjit %s", cmds[i]);
        assert_non_null(strstr(r.out, want));
        nj_run_free(&r);
    }
    nj_run r = NJ_TOOL(NULL, "--help");
    assert_int_equal(r.status, 0);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) assert_non_null(strstr(r.out, cmds[i]));
    nj_run_free(&r);
}

static void test_usage_errors_fail(void **state)
{
    (void)state;
    nj_run r = NJ_TOOL(NULL, "frobnicate");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "unknown command"));
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "warmup");
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.err, "no manifest"));
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--jobs", "zero", "m.txt");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "defrag");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "export");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "check", "--backend", "compile-only", "rmsnorm f32 *x64");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "plan", "--arch", "sm_90");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
}

static void test_warmup_missing_manifest_fail(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "does-not-exist.txt");
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, man);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "does-not-exist.txt"));
    nj_run_free(&r);
}

/* ---- warmup ---- */

static void test_warmup_malformed_line_fail(void **state)
{
    (void)state;
    char cache[512], man[512], where[600];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "bad.txt");
    nj_write_file(man, "rmsnorm f32 *x256 flags=scale\n"
                       "# a comment\n"
                       "frobnorm f32 *x256 flags=scale\n"
                       "layernorm f16 *x512 flags=scale,bias\n");
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, "--jobs", "2", "--passes", "fwd", man);
    assert_int_equal(r.status, 1);
    snprintf(where, sizeof where, "%s:3:", man);
    assert_non_null(strstr(r.err, where));          /* file:line of the bad line */
    {
        char line1[600];
        snprintf(line1, sizeof line1, "%s:1:", man);
        assert_null(strstr(r.err, line1)); /* good lines are not reported */
    }
    assert_int_equal(nj_field(r.out, "problems"), 3);
    assert_int_equal(nj_field(r.out, "failed"), 1);
    /* both good problems: main kernels and the unaligned variant (both plans use vec 4) */
    assert_int_equal(nj_field(r.out, "kernels compiled"), 4);
    nj_run_free(&r);
}

static void test_warmup_twice_compiles_once(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, nj_small_manifest);
    nj_run r = NJ_TOOL(NULL, "warmup", "--arch", "sm_90", "--cache", cache, man);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "problems"), 2);
    /* 2 problems x 2 passes x 2 variants, the library module their backward passes share (both with
     * f32 gamma), and the generic modules of each pass and x dtype (f32 and f16, both with f32 gamma):
     * shared modules are counted where they are compiled, never as "already cached" */
    assert_int_equal(nj_field(r.out, "kernels compiled"), 13);
    assert_int_equal(nj_field(r.out, "already cached"), 0);
    assert_int_equal(nj_field(r.out, "failed"), 0);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "warmup", "--arch", "sm_90", "--cache", cache, "--passes", "fwd,bwd", man);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 0);
    assert_int_equal(nj_field(r.out, "already cached"), 8);
    nj_run_free(&r);
    /* the library module is an entry of its own, listed by kernel and gamma dtype */
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "ls");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "13 entries"));
    assert_non_null(strstr(r.out, "lib sm_90    colsum param=f32\n"));
    assert_non_null(strstr(r.out, "gen sm_90    bwd x=f16 param=f32\n"));
    nj_run_free(&r);
}

/* Without --arch and without a driver, the default backend falls back to compile-only for sm_90. */
static void test_warmup_default_backend_falls_back(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, "rmsnorm f32 *x256 flags=scale\n");
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--cache", cache, "--passes", "fwd", man);
    if (strstr(r.out, "backend            cuda")) {
        nj_run_free(&r);
        skip(); /* a real GPU here: no fallback to observe */
    }
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.err, "note:"));
    assert_non_null(strstr(r.out, "compile-only (sm_90)"));
    assert_int_equal(nj_field(r.out, "kernels compiled"), 2); /* main and unaligned */
    nj_run_free(&r);
}

/* A cache root writable by others is refused: warming into memory would persist nothing, so it fails. */
static void test_warmup_unsafe_cache_fail(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "open-cache");
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, "rmsnorm f32 *x256 flags=scale\n");
    assert_int_equal(mkdir(cache, 0700), 0);
    assert_int_equal(chmod(cache, 0777), 0);
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, man);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "NJ_ERR_CACHE_UNSAFE"));
    nj_run_free(&r);
}

/* Without --cache: XDG_CACHE_HOME/normjit, or the tree's cache/ when run from a normjit source tree. */
static void test_warmup_default_cache_roots(void **state)
{
    (void)state;
    char man[512], tree[512], p[600], want[700];
    nj_path(man, sizeof man, "small.txt");
    nj_write_file(man, "rmsnorm f32 *x256 flags=scale\n");
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    snprintf(want, sizeof want, "cache              %s/xdg/normjit\n", nj_tmp);
    assert_non_null(strstr(r.out, want));
    nj_run_free(&r);
    nj_path(tree, sizeof tree, "tree");
    assert_int_equal(mkdir(tree, 0700), 0);
    snprintf(p, sizeof p, "%s/include", tree);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/include/normjit.h", tree);
    nj_write_file(p, "");
    snprintf(p, sizeof p, "%s/cache", tree);
    assert_int_equal(mkdir(p, 0700), 0);
    snprintf(p, sizeof p, "%s/cache/.gitkeep", tree);
    nj_write_file(p, "");
    nj_child_cwd = tree;
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    snprintf(want, sizeof want, "cache              %s/cache\n", tree);
    assert_non_null(strstr(r.out, want));
    assert_int_equal(nj_field(r.out, "kernels compiled"), 2); /* a different root: compiled again */
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "ls");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "2 entries"));
    nj_run_free(&r);
}

/* The merge of split walks is one library module for every gamma dtype: listed without one. */
static void test_cache_ls_merge_module(void **state)
{
    (void)state;
    char cache[512], man[512];
    nj_path(cache, sizeof cache, "cache-merge");
    nj_path(man, sizeof man, "merge.txt");
    /* several tiles (past NJ_CL_FUSE), and past what a cluster of 8 SMs stages (sm_90: one launch); the
       residual: three launches, not one pipelined (which merges in its own kernel) */
    nj_write_file(man, "groupnorm f32 nhwc *x64x128x128 groups=4 flags=residual\n");
    nj_run r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 3); /* main, unaligned, the merge */
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "ls");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "lib sm_90    merge\n"));
    assert_null(strstr(r.out, "param=none"));
    nj_run_free(&r);
}

/* ---- plan ---- */

/* The 32-hex hash printed after "hash:" for the first pass. */
static void nj_plan_hash(const char *out, char hash[33])
{
    const char *p = strstr(out, "hash:");
    assert_non_null(p);
    p += 5;
    while (*p == ' ') p++;
    size_t n = strspn(p, "0123456789abcdef");
    assert_int_equal(n, 32);
    memcpy(hash, p, 32);
    hash[32] = '\0';
}

static void test_plan_prints_signature(void **state)
{
    (void)state;
    char cache[512], man[512], h1[33], h2[33];
    nj_path(cache, sizeof cache, "cache");
    nj_path(man, sizeof man, "one.txt");
    /* Several argv words make one problem; the batch extent does not change the signature. */
    nj_run r = NJ_TOOL(NULL, "plan", "--arch", "sm_90", "--cache", cache, "--pass", "fwd", "rmsnorm", "f32", "*x1024",
                       "flags=scale");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "signature:"));
    assert_non_null(strstr(r.out, "canonical:"));
    assert_non_null(strstr(r.out, "cached:    no"));
    nj_plan_hash(r.out, h1);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "plan", "--arch", "sm_90", "--cache", cache, "--pass", "fwd", "rmsnorm f32 64x1024 flags=scale");
    assert_int_equal(r.status, 0);
    nj_plan_hash(r.out, h2);
    assert_string_equal(h1, h2);
    nj_run_free(&r);
    /* After a warmup the same plan reports cached. */
    nj_write_file(man, "rmsnorm f32 *x1024 flags=scale\n");
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", cache, "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "plan", "--arch", "sm_90", "--cache", cache, "--pass", "fwd", "rmsnorm f32 *x1024 flags=scale");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "cached:    yes"));
    assert_null(strstr(r.out, "source:"));
    assert_null(strstr(r.out, "library:")); /* the forward launches none */
    nj_run_free(&r);
    /* --source adds the generated CUDA source. */
    r = NJ_TOOL(NULL, "plan", "--arch", "sm_90", "--cache", cache, "--pass", "bwd", "--source", "rmsnorm f32 *x1024 flags=scale");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "pass bwd"));
    assert_null(strstr(r.out, "pass fwd"));
    assert_non_null(strstr(r.out, "source:"));
    assert_non_null(strstr(r.out, "__global__"));
    /* its dgamma column sum is the library's: an entry of its own, not warmed by the forward above */
    assert_non_null(strstr(r.out, "library:   colsum param=f32 "));
    assert_non_null(strstr(r.out, " not cached\n"));
    assert_null(strstr(r.out, "nj_lib_colsum(")); /* not in the pass's source */
    nj_run_free(&r);
}

static void test_plan_bad_problem_fail(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_run r = NJ_TOOL(NULL, "plan", "--arch", "sm_90", "--cache", cache, "rmsnorm f32 *x1024 flags=scale",
                       "rmsnorm f32 *xbanana");
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "signature:")); /* the good problem is still planned */
    assert_non_null(strstr(r.err, "banana"));
    nj_run_free(&r);
}

/* ---- cache maintenance ---- */

static int nj_cmp_hash(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* Hash column of `cache ls` lines (32 hex chars at the start of a line), sorted, one per line. */
static char *nj_ls_hashes(const char *out)
{
    char *list = calloc(1, strlen(out) + 1);
    char lines[64][33];
    int n = 0;
    for (const char *p = out; *p && n < 64;) {
        if (strspn(p, "0123456789abcdef") == 32 && p[32] == ' ') {
            memcpy(lines[n], p, 32);
            lines[n++][32] = '\0';
        }
        p = strchr(p, '\n');
        if (!p) break;
        p++;
    }
    qsort(lines, (size_t)n, sizeof lines[0], nj_cmp_hash);
    for (int i = 0; i < n; i++) {
        strcat(list, lines[i]);
        strcat(list, "\n");
    }
    return list;
}

static void test_cache_verify_corrupt_entry_fail(void **state)
{
    (void)state;
    char cache[512], entry[1024];
    nj_path(cache, sizeof cache, "cache");
    nj_warm_small(cache);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", cache, "verify");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "0 bad"));
    nj_run_free(&r);
    assert_true(nj_find_entry(cache, entry, sizeof entry));
    /* Flip a byte in the last part of the file (the binary payload), which only the checksum catches. */
    FILE *f = fopen(entry, "r+b");
    assert_non_null(f);
    fseek(f, -16, SEEK_END);
    int c = fgetc(f);
    fseek(f, -16, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
    r = NJ_TOOL(NULL, "cache", "verify", "--cache", cache);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.out, "bad entry removed"));
    assert_non_null(strstr(r.out, strrchr(entry, '/') + 1));
    assert_non_null(strstr(r.out, "1 bad"));
    nj_run_free(&r);
    assert_int_equal(access(entry, F_OK), -1);
    r = NJ_TOOL(NULL, "cache", "verify", "--cache", cache);
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
}

static void test_cache_export_import_round_trip(void **state)
{
    (void)state;
    char a[512], b[512], file[512], man[512];
    nj_path(a, sizeof a, "cache-a");
    nj_path(b, sizeof b, "cache-b");
    nj_path(file, sizeof file, "kernels.njc");
    nj_path(man, sizeof man, "small.txt");
    nj_warm_small(a);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", a, "export", file);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "exported"), 4); /* 2 problems x (main, unaligned) */
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", b, "import", file);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "imported"), 4);
    assert_non_null(strstr(r.out, "0 rejected"));
    nj_run_free(&r);
    nj_run la = NJ_TOOL(NULL, "cache", "--cache", a, "ls");
    nj_run lb = NJ_TOOL(NULL, "cache", "--cache", b, "ls");
    assert_int_equal(la.status, 0);
    assert_int_equal(lb.status, 0);
    char *ha = nj_ls_hashes(la.out), *hb = nj_ls_hashes(lb.out);
    assert_int_equal(strlen(ha), 4 * 33);
    assert_string_equal(ha, hb);
    free(ha);
    free(hb);
    nj_run_free(&la);
    nj_run_free(&lb);
    /* The imported cache serves a warmup without compiling. */
    r = NJ_TOOL(NULL, "warmup", "--no-generic", "--arch", "sm_90", "--cache", b, "--passes", "fwd", man);
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "kernels compiled"), 0);
    assert_int_equal(nj_field(r.out, "already cached"), 4);
    nj_run_free(&r);
}

static void test_cache_import_garbage_fail(void **state)
{
    (void)state;
    char cache[512], file[512];
    nj_path(cache, sizeof cache, "cache");
    nj_path(file, sizeof file, "garbage.njc");
    nj_write_file(file, "this is not a normjit cache archive\n");
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", cache, "import", file);
    assert_int_equal(r.status, 1);
    nj_run_free(&r);
}

static void test_cache_gc_and_clear(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_warm_small(cache);
    nj_run r = NJ_TOOL(NULL, "cache", "--cache", cache, "stats");
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "entries"), 4);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "gc", "--max-bytes", "0");
    assert_int_equal(r.status, 0);
    assert_int_equal(nj_field(r.out, "evicted"), 4);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "ls");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "0 entries"));
    nj_run_free(&r);
    nj_warm_small(cache);
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "clear");
    assert_int_equal(r.status, 0);
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "cache", "--cache", cache, "stats");
    assert_int_equal(nj_field(r.out, "entries"), 0);
    nj_run_free(&r);
}


/* ---- check ---- */

/* njt_check_compare in-process: the verdicts below follow from how the inputs were built. */
static void test_compare_within_tolerance(void **state)
{
    (void)state;
    float got[6];
    double ref[6];
    for (int i = 0; i < 6; i++) {
        ref[i] = 1.0 + 0.25 * i;
        got[i] = (float)(ref[i] * (1.0 + 0.5e-5)); /* half the f32 rtol */
    }
    njt_check_result r;
    njt_check_compare("y", got, NJ_F32, NULL, ref, 6, 0.0, njt_tol_output(NJ_F32), &r);
    assert_true(r.pass);
    assert_int_equal(r.count, 6);
    assert_true(r.max_err > 0.0 && r.max_err < 1.0);
    assert_int_equal(r.nonfinite, 0);
}

static void test_compare_error_beyond_tolerance_fail(void **state)
{
    (void)state;
    float got[6];
    double ref[6];
    for (int i = 0; i < 6; i++) got[i] = (float)(ref[i] = 0.5 - 0.125 * i);
    got[4] += 1e-3f; /* 100x the f32 tolerance at unit scale */
    njt_check_result r;
    njt_check_compare("y", got, NJ_F32, NULL, ref, 6, 0.0, njt_tol_output(NJ_F32), &r);
    assert_false(r.pass);
    assert_int_equal(r.worst_index, 4);
    assert_true(r.max_abs > 0.9e-3 && r.max_abs < 1.1e-3);
    assert_true(r.max_err > 10.0);
}

static void test_compare_unwritten_nan_fail(void **state)
{
    (void)state;
    uint16_t got[4];
    double ref[4] = {0.5, -0.25, 1.0, 2.0};
    for (int i = 0; i < 4; i++) got[i] = nj_float_to_half((float)ref[i]);
    got[2] = nj_float_to_half(NAN);
    njt_check_result r;
    njt_check_compare("dx", got, NJ_F16, NULL, ref, 4, 0.0, njt_tol_output(NJ_F16), &r);
    assert_false(r.pass);
    assert_int_equal(r.nonfinite, 1);
    assert_int_equal(r.worst_index, 2);
}

/* A strided output: gaps hold NaN and are never read; logical order follows the layout's extents. */
static void test_compare_strided_layout(void **state)
{
    (void)state;
    nj_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.dtype = NJ_BF16;
    t.rank = 2;
    t.extents[0] = 2;
    t.extents[1] = 3;
    t.strides[0] = 1; /* column-major storage of a 2x3 logical tensor, with a gap */
    t.strides[1] = 3;
    uint16_t got[9];
    double ref[6];
    for (int i = 0; i < 9; i++) got[i] = nj_float_to_bf16(NAN);
    for (int r0 = 0; r0 < 2; r0++)
        for (int c = 0; c < 3; c++) {
            ref[r0 * 3 + c] = r0 - c * 0.5;
            got[r0 + 3 * c] = nj_float_to_bf16((float)ref[r0 * 3 + c]);
        }
    njt_check_result r;
    njt_check_compare("y", got, NJ_BF16, &t, ref, 6, 0.0, njt_tol_output(NJ_BF16), &r);
    assert_true(r.pass);
    assert_int_equal(r.nonfinite, 0);
    got[1 + 3 * 2] = nj_float_to_bf16(5.0f); /* logical [1][2] */
    njt_check_compare("y", got, NJ_BF16, &t, ref, 6, 0.0, njt_tol_output(NJ_BF16), &r);
    assert_false(r.pass);
    assert_int_equal(r.worst_index, 5);
}

static void test_check_emulator_forward_pass(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_run r = NJ_TOOL("emulator", "check", "--cache", cache, "--pass", "fwd", "--offset", "3", "--shuffle",
                       "layernorm bf16 5x300 flags=scale,bias,stats,residual,resout", "rmsnorm f16 2x64 flags=scale,stats",
                       "batchnorm f32 nchw 3x4x5x5 flags=scale,bias");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "3 problem(s), 3 passed, 0 failed, 0 skipped"));
    assert_null(strstr(r.out, "FAIL"));
    static const char *const outputs[] = {"  y ", "  residual_out ", "  mean ", "  rstd "};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) assert_non_null(strstr(r.out, outputs[i]));
    assert_null(strstr(r.out, "  dx ")); /* no backward asked for */
    nj_run_free(&r);
}

/* Forward and backward of every kind of output. */
static void test_check_emulator_pass(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_run r = NJ_TOOL("emulator", "check", "--cache", cache, "--seed", "7", "rmsnorm f32 3x256 flags=scale",
                       "layernorm", "f16", "2x100", "flags=scale,bias,residual,resout", "groupnorm f32 nhwc 2x8x4x4 groups=2 act=silu flags=scale,bias");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "backend emulator"));
    assert_non_null(strstr(r.out, "3 problem(s), 3 passed, 0 failed, 0 skipped"));
    assert_null(strstr(r.out, "FAIL"));
    /* Every output the flags ask for was compared. */
    static const char *const outputs[] = {"  y ", "  residual_out ", "  dx ", "  dgamma ", "  dbeta "};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) assert_non_null(strstr(r.out, outputs[i]));
    nj_run_free(&r);
}

/* --max-elements: a problem over the limit is listed as skipped, never run and never counted as passed. */
static void test_check_max_elements(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_run r = NJ_TOOL("emulator", "check", "--cache", cache, "--pass", "fwd", "--max-elements", "600",
                       "rmsnorm f32 3x200 flags=scale", "rmsnorm f32 *x256 flags=scale");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "SKIPPED (1024 elements > --max-elements 600)"));
    assert_non_null(strstr(r.out, "2 problem(s), 1 passed, 0 failed, 1 skipped"));
    nj_run_free(&r);
    r = NJ_TOOL("emulator", "check", "--max-elements", "0", "rmsnorm f32 3x200");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
}

static int count_substr(const char *s, const char *sub)
{
    int n = 0;
    for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) n++;
    return n;
}

/* perf on the emulator (a dry run: CPU times): a line per pass with time, bytes and bandwidth; the
 * batch a '*' takes, "fixed" otherwise; skipped problems listed; bad options are usage errors. */
static void test_perf_emulator(void **state)
{
    (void)state;
    char cache[512];
    nj_path(cache, sizeof cache, "cache");
    nj_run r = NJ_TOOL("emulator", "perf", "--cache", cache, "--iterations", "2", "--batch", "3",
                       "rmsnorm f32 *x256 flags=scale", "layernorm f16 2x64 flags=scale,bias");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "GB/s"));
    assert_int_equal(count_substr(r.out, " fwd "), 2);
    assert_int_equal(count_substr(r.out, " bwd "), 2);
    assert_non_null(strstr(r.out, "fwd      3"));
    assert_non_null(strstr(r.out, "fwd  fixed"));
    assert_non_null(strstr(r.out, "  row\n")); /* the plan's family, a column of its own */
    /* rmsnorm f32 3x256 forward moves x and y (4 bytes each) and gamma: 0.01 MB */
    assert_non_null(strstr(r.out, "rmsnorm f32 *x256 flags=scale"));
    nj_run_free(&r);
    r = NJ_TOOL("emulator", "perf", "--cache", cache, "--max-elements", "100", "--passes", "fwd", "rmsnorm f32 *x256");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "skipped (65536 elements > --max-elements 100)"));
    nj_run_free(&r);
    r = NJ_TOOL("emulator", "perf", "--iterations", "0", "rmsnorm f32 *x256");
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
}

/* bench --dump writes each problem's main kernel sources, named by problem index and pass, and the
 * library modules; --ab compiles two dumps alternately (here the same one twice: both medians present). */
static void test_bench_dump_and_ab(void **state)
{
    (void)state;
    char man[512], dir[512], path[600];
    nj_path(man, sizeof man, "ab.txt");
    nj_write_file(man, "rmsnorm f32 *x256 flags=scale\nlayernorm f16 *x64 flags=scale,bias\n");
    nj_path(dir, sizeof dir, "dump");
    nj_run r = NJ_TOOL(NULL, "bench", "--dump", dir, "--passes", "fwd", "--manifest", man);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "6 kernel source(s) written")); /* and the 4 library modules */
    nj_run_free(&r);
    struct stat st;
    snprintf(path, sizeof path, "%s/001_fwd.cu", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 1000);
    snprintf(path, sizeof path, "%s/lib_colsum_bf16.cu", dir);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/lib_merge_none.cu", dir);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof path, "%s/000_bwd.cu", dir);
    assert_int_not_equal(stat(path, &st), 0); /* --passes fwd */
    r = NJ_TOOL(NULL, "bench", "--ab", dir, dir, "--arch", "sm_80");
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "6 kernel(s) in both folders, NVRTC for sm_80"));
    assert_non_null(strstr(r.out, "A: NVRTC per kernel"));
    assert_non_null(strstr(r.out, "B - A per kernel"));
    nj_run_free(&r);
    r = NJ_TOOL(NULL, "bench", "--ab", dir);
    assert_int_equal(r.status, 2);
    nj_run_free(&r);
    snprintf(path, sizeof path, "%s/none", dir);
    r = NJ_TOOL(NULL, "bench", "--ab", dir, path);
    assert_int_equal(r.status, 1);
    assert_non_null(strstr(r.err, "no kernel source named alike"));
    nj_run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_help_every_subcommand, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_bench_dump_and_ab, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_missing_manifest_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_malformed_line_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_twice_compiles_once, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_default_backend_falls_back, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_unsafe_cache_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_warmup_default_cache_roots, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_cache_ls_merge_module, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_plan_prints_signature, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_plan_bad_problem_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_cache_verify_corrupt_entry_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_cache_export_import_round_trip, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_cache_import_garbage_fail, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_cache_gc_and_clear, nj_setup, nj_teardown),
        cmocka_unit_test(test_compare_within_tolerance),
        cmocka_unit_test(test_compare_error_beyond_tolerance_fail),
        cmocka_unit_test(test_compare_unwritten_nan_fail),
        cmocka_unit_test(test_compare_strided_layout),
        cmocka_unit_test_setup_teardown(test_check_emulator_forward_pass, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_check_emulator_pass, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_check_max_elements, nj_setup, nj_teardown),
        cmocka_unit_test_setup_teardown(test_perf_emulator, nj_setup, nj_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
