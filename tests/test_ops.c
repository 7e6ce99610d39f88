/* The operator API (src/ops.c, include/normjit_ops.h), through that header and the public one only: plans
 * explained (hash, cache state, kernel count), variant-selective warming, library modules and their NVRTC
 * compile, the double-precision reference, and the Redis-tier calls' refusals without a tier. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define NJ_OPERATOR_API
#include "normjit_ops.h"
#include "nj_testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBLEM "rmsnorm f32 *x256 flags=scale"

typedef struct fx {
    char dir[PATH_MAX - 64], root[PATH_MAX];
    nj_context *ctx;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_true(nj_tu_make_temp_dir("ops", f->dir, sizeof f->dir));
    snprintf(f->root, sizeof f->root, "%s/root", f->dir);
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = f->root;
    assert_int_equal(nj_context_create(&o, &f->ctx), NJ_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    nj_context_destroy(f->ctx);
    nj_tu_remove_tree(f->dir);
    free(f);
    return 0;
}

typedef struct find_hash {
    const char *hash;
    int found;
} find_hash;

static int look_for(void *user, const nj_cachedir_entry *e)
{
    find_hash *h = user;
    h->found += !strcmp(e->hash, h->hash);
    return 0;
}

/* The explained hash is the cache key of the entry the pass's warmup writes, and cached follows it. */
static void test_explain_tracks_cache(void **state)
{
    fx *f = *state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(PROBLEM, 1, &p), NJ_OK);
    nj_ops_pass_info pi;
    assert_int_equal(nj_ops_explain(f->ctx, &p, NJ_PASS_FORWARD, 1, &pi), NJ_OK);
    assert_int_equal(pi.cached, 0);
    assert_int_equal((int)strspn(pi.hash, "0123456789abcdef"), 32);
    assert_true(pi.kernels >= 1);
    assert_non_null(pi.source);
    assert_non_null(strstr(pi.source, "__global__"));
    assert_non_null(pi.signature);
    assert_non_null(pi.plan_text);
    char hash[33];
    memcpy(hash, pi.hash, sizeof hash);
    nj_ops_pass_info_free(&pi);
    assert_null(pi.source);

    int32_t compiled = 0, cached = 0;
    assert_int_equal(nj_ops_warm(f->ctx, &p, NJ_PASS_FORWARD | NJ_OPS_WARM_MAIN, &compiled, &cached), NJ_OK);
    assert_int_equal(compiled, 1);
    assert_int_equal(cached, 0);
    assert_int_equal(nj_ops_explain(f->ctx, &p, NJ_PASS_FORWARD, 0, &pi), NJ_OK);
    assert_int_equal(pi.cached, 1);
    assert_string_equal(pi.hash, hash);
    assert_null(pi.source);
    nj_ops_pass_info_free(&pi);
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_from_context(f->ctx, &d), NJ_OK);
    find_hash h = {hash, 0};
    assert_int_equal(nj_cachedir_list(d, look_for, &h), NJ_OK);
    assert_int_equal(h.found, 1);
    nj_cachedir_close(d);
    /* the main variant again: cached; the whole pass: at most the unaligned variant is new */
    assert_int_equal(nj_ops_warm(f->ctx, &p, NJ_PASS_FORWARD | NJ_OPS_WARM_MAIN, &compiled, &cached), NJ_OK);
    assert_int_equal(compiled, 0);
    assert_int_equal(cached, 1);
    assert_int_equal(nj_ops_warm(f->ctx, &p, NJ_PASS_FORWARD, &compiled, &cached), NJ_OK);
    assert_true(compiled <= 1);
    assert_true(cached >= 1);

    assert_int_equal(nj_ops_explain(f->ctx, &p, (nj_pass)3, 0, &pi), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_ops_explain(NULL, &p, NJ_PASS_FORWARD, 0, &pi), NJ_ERR_NULL_POINTER);
}

static void test_library_modules(void **state)
{
    (void)state;
    int32_t n = nj_ops_library_module_count();
    assert_true(n >= 1);
    char *first_name = NULL;
    for (int32_t i = 0; i < n; i++) {
        char *name = NULL, *src = NULL;
        assert_int_equal(nj_ops_library_module(i, &name, &src), NJ_OK);
        assert_non_null(strchr(name, '_'));
        assert_non_null(strstr(src, "__global__"));
        if (first_name) assert_string_not_equal(first_name, name); /* modules are distinct */
        if (!i) first_name = name;
        else free(name);
        if (i == 0) {
            double ms = -1.0;
            nj_status s = nj_ops_nvrtc_compile(src, "lib.cu", 90, 1, &ms);
            assert_int_equal(s, NJ_OK);
            assert_true(ms > 0.0);
            assert_true(nj_ops_last_compile_ms() >= 0.0);
        }
        free(src);
    }
    free(first_name);
    char *name = (char *)"x", *src = (char *)"y";
    assert_int_equal(nj_ops_library_module(n, &name, &src), NJ_ERR_BAD_ARGUMENT);
    assert_null(name);
    assert_null(src);
    assert_int_equal(nj_ops_library_module(-1, &name, &src), NJ_ERR_BAD_ARGUMENT);
}

/* RMSNorm over 4 values with a scale, against the formula written out here. */
static void test_reference(void **state)
{
    (void)state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 2x4 flags=scale", 1, &p), NJ_OK);
    int64_t numel = 0, kept = 0, feature = 0;
    nj_ops_ref_sizes(&p, &numel, &kept, &feature);
    assert_int_equal(numel, 8);
    assert_int_equal(kept, 2);
    assert_int_equal(feature, 4);
    const float x[8] = {1, 2, 3, 4, -2, 0, 2, 4}, g[4] = {1, 0.5f, 2, -1};
    double y[8], rstd[2], mean[2];
    nj_ops_ref_inputs in = {.x = x, .gamma = g, .eps = 1e-5};
    nj_ops_ref_outputs out = {.y = y, .rstd = rstd, .mean = mean};
    assert_int_equal(nj_ops_ref_forward(&p, &in, &out), NJ_OK);
    for (int r = 0; r < 2; r++) {
        double ss = 0;
        for (int k = 0; k < 4; k++) ss += (double)x[r * 4 + k] * x[r * 4 + k];
        double want_rstd = 1.0 / sqrt(ss / 4 + 1e-5);
        assert_true(fabs(rstd[r] - want_rstd) < 1e-12);
        for (int k = 0; k < 4; k++) assert_true(fabs(y[r * 4 + k] - x[r * 4 + k] * want_rstd * g[k]) < 1e-12);
    }
    const float dy[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    double dx[8], dg[4];
    nj_ops_ref_inputs bin = {.x = x, .gamma = g, .dy = dy, .eps = 1e-5};
    nj_ops_ref_outputs bout = {.dx = dx, .dgamma = dg};
    assert_int_equal(nj_ops_ref_backward(&p, &bin, &bout), NJ_OK);
    for (int k = 0; k < 4; k++) assert_true(fabs(dg[k] - y[k] / g[k]) < 1e-12); /* dy = 1 on row 0 only */
    for (int k = 4; k < 8; k++) assert_true(fabs(dx[k]) < 1e-15);
    assert_int_equal(nj_ops_ref_forward(NULL, &in, &out), NJ_ERR_NULL_POINTER);
}

static void test_remote_without_tier(void **state)
{
    fx *f = *state;
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    nj_ops_remote_info ri;
    assert_int_equal(nj_ops_cachedir_remote_info(d, &ri), NJ_ERR_UNSUPPORTED);
    nj_status s = nj_ops_cachedir_attach_remote(d, "http://not-redis");
    assert_true(s == NJ_ERR_BAD_ARGUMENT || s == NJ_ERR_UNSUPPORTED); /* a bad URL, or built without hiredis */
    assert_int_not_equal(nj_ops_cachedir_push(d, NULL), NJ_OK);
    assert_int_equal(nj_ops_cachedir_push(NULL, NULL), NJ_ERR_NULL_POINTER);
    nj_cachedir_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_explain_tracks_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_modules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_without_tier, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
