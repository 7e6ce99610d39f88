/* Tests for the double-precision reference (src/reference.c): hand-computed values, invariants of the
 * normalized output, backward against central finite differences of the whole forward, a large mean
 * offset, size-1 and zero-size cases, half-precision inputs, residuals, strided operands, bad input.
 * Expected values come from arithmetic written out here, never from the code under test.
 * Also tests the shared helpers in tests/support/ (nj_testutil, ref_harness) that other suites use. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nj_testutil.h"
#include "ref_harness.h"
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The buffers-plus-reference harness lives in tests/support/ref_harness.c so kernel suites can reuse it;
 * these wrappers turn its statuses into test failures. */
typedef nj_refh run;

static double *dalloc(int64_t n)
{
    double *d = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(d);
    return d;
}

static void run_init(run *r, const nj_problem_desc *p) { assert_int_equal(nj_refh_init(r, p), NJ_OK); }

static void run_fwd(run *r)
{
    nj_status s = nj_refh_forward(r);
    if (s != NJ_OK) fail_msg("forward: %s: %s", nj_status_name(s), nj_last_error());
}

static void run_bwd(run *r)
{
    nj_status s = nj_refh_backward(r);
    if (s != NJ_OK) fail_msg("backward: %s: %s", nj_status_name(s), nj_last_error());
}

static void assert_close(const char *what, double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol)) fail_msg("%s: got %.17g want %.17g (tol %g)", what, got, want, tol);
}

static void assert_dense_close(const char *what, const double *got, const double *want, int64_t n, double atol,
                               double rtol)
{
    nj_tu_cmp c = nj_tu_compare_dense(what, got, want, n, atol, rtol, 5);
    if (c.mismatches) fail_msg("%s: %lld mismatches", what, (long long)c.mismatches);
}

/* ---- hand-computed values ---- */

/* Rows [1,2,3,4] (mean 2.5, var 1.25) and [0,0,0,8] (mean 2, var (4+4+4+36)/4 = 12). */
static const float hand_x[8] = {1, 2, 3, 4, 0, 0, 0, 8};
static const double hand_dev[8] = {-1.5, -0.5, 0.5, 1.5, -2, -2, -2, 6};
static const double hand_mean[2] = {2.5, 2.0}, hand_var[2] = {1.25, 12.0};

static void test_hand_layernorm(void **state)
{
    (void)state;
    int64_t ext[2] = {2, 4};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SAVE_STATS, NJ_ACT_NONE);
    run r;
    run_init(&r, &p);
    memcpy(r.x, hand_x, sizeof hand_x);
    run_fwd(&r);
    for (int i = 0; i < 8; i++) assert_close("y", r.y[i], hand_dev[i] / sqrt(hand_var[i / 4] + 1e-5), 1e-14);
    for (int k = 0; k < 2; k++) {
        assert_close("mean", r.mean[k], hand_mean[k], 1e-15);
        assert_close("rstd", r.rstd[k], 1 / sqrt(hand_var[k] + 1e-5), 1e-15);
    }
    /* Affine: gamma {2, 2, 0.5, 1}, beta {0, 1, 0, -1}. */
    r.p.flags |= NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    const float g[4] = {2, 2, 0.5f, 1}, b[4] = {0, 1, 0, -1};
    memcpy(r.gamma, g, sizeof g);
    memcpy(r.beta, b, sizeof b);
    run_fwd(&r);
    for (int i = 0; i < 8; i++)
        assert_close("affine y", r.y[i], hand_dev[i] / sqrt(hand_var[i / 4] + 1e-5) * g[i % 4] + b[i % 4], 1e-14);
    nj_refh_free(&r);
}

/* The same two sets stored as columns of a [4, 2] tensor: a reduction over the outer axis. */
static void test_hand_layernorm_columns(void **state)
{
    (void)state;
    int64_t ext[2] = {4, 2};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 1u, 0u, NJ_FLAG_CENTER, NJ_ACT_NONE);
    run r;
    run_init(&r, &p);
    r.eps = 0;
    float *x = r.x;
    for (int i = 0; i < 4; i++) {
        x[2 * i] = hand_x[i];
        x[2 * i + 1] = hand_x[4 + i];
    }
    run_fwd(&r);
    for (int i = 0; i < 4; i++) {
        assert_close("col 0", r.y[2 * i], hand_dev[i] / sqrt(1.25), 1e-14);
        assert_close("col 1", r.y[2 * i + 1], hand_dev[4 + i] / sqrt(12.0), 1e-14);
        assert_close("mean", r.mean[i % 2], hand_mean[i % 2], 1e-15);
    }
    nj_refh_free(&r);
}

static void test_hand_rmsnorm(void **state)
{
    (void)state;
    int64_t ext[1] = {4};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 1, ext, 1u, 1u, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS, NJ_ACT_NONE);
    run r;
    run_init(&r, &p);
    memcpy(r.x, hand_x, 4 * sizeof(float));
    const float g[4] = {1, 0.5f, 2, -1};
    memcpy(r.gamma, g, sizeof g);
    run_fwd(&r);
    double ms = (1 + 4 + 9 + 16) / 4.0; /* 7.5 */
    for (int i = 0; i < 4; i++) assert_close("rms y", r.y[i], hand_x[i] * g[i] / sqrt(ms + 1e-5), 1e-14);
    assert_close("rms mean", r.mean[0], 0, 0);
    assert_close("rms rstd", r.rstd[0], 1 / sqrt(ms + 1e-5), 1e-15);
    nj_refh_free(&r);
}

/* x = [-1, 1] normalizes to exactly [-1, 1] with eps = 0; each activation's value there, from libm. */
static void test_hand_activations(void **state)
{
    (void)state;
    const double e = exp(1.0), phi1 = 0.5 * (1 + erf(1 / sqrt(2.0)));
    const double t1 = tanh(sqrt(2 / M_PI) * (1 + 0.044715));
    const struct {
        int act;
        double at_m1, at_p1;
    } cases[] = {
        {NJ_ACT_NONE, -1, 1},
        {NJ_ACT_RELU, 0, 1},
        {NJ_ACT_SILU, -1 / (1 + e), 1 / (1 + 1 / e)},
        {NJ_ACT_GELU_TANH, -0.5 * (1 - t1), 0.5 * (1 + t1)},
        {NJ_ACT_GELU_ERF, -(1 - phi1), phi1},
        {NJ_ACT_SIGMOID, 1 / (1 + e), 1 / (1 + 1 / e)},
    };
    int64_t ext[1] = {2};
    for (size_t c = 0; c < NJ_ARRAY_LEN(cases); c++) {
        nj_problem_desc p = nj_refh_desc(NJ_F32, 1, ext, 1u, 1u, NJ_FLAG_CENTER, cases[c].act);
        run r;
        run_init(&r, &p);
        r.eps = 0;
        ((float *)r.x)[0] = -1;
        ((float *)r.x)[1] = 1;
        run_fwd(&r);
        assert_close("act(-1)", r.y[0], cases[c].at_m1, 1e-15);
        assert_close("act(+1)", r.y[1], cases[c].at_p1, 1e-15);
        nj_refh_free(&r);
    }
    /* Published constants as a cross-check of the formulas above: GELU(1) = 0.8413447 (erf), 0.8411920 (tanh). */
    assert_close("gelu_erf(1)", phi1, 0.8413447460685429, 1e-15);
    assert_close("gelu_tanh(1)", 0.5 * (1 + t1), 0.8411919906082768, 1e-12);
}

/* ---- invariants ---- */

/* Per statistic: u = (y - beta) / gamma has mean 0 and variance 1 (with eps = 0). */
static void check_normalized(const run *r, double tol)
{
    const nj_problem_desc *p = &r->p;
    double *s1 = dalloc(r->k), *s2 = dalloc(r->k), *cnt = dalloc(r->k), g = 1, b = 0;
    for (int64_t i = 0; i < r->n; i++) {
        int64_t k, f;
        nj_refh_split_index(p, i, &k, &f);
        if (p->flags & NJ_FLAG_SCALE) g = nj_load_as_double(r->gamma, f, (nj_dtype)r->pt.dtype);
        if (p->flags & NJ_FLAG_BIAS) b = nj_load_as_double(r->beta, f, (nj_dtype)r->pt.dtype);
        double u = (r->y[i] - b) / g;
        s1[k] += u;
        s2[k] += u * u;
        cnt[k] += 1;
    }
    for (int64_t k = 0; k < r->k; k++) {
        double m = s1[k] / cnt[k];
        assert_close("normalized mean", m, 0, tol);
        assert_close("normalized variance", s2[k] / cnt[k] - m * m, 1, tol);
    }
    free(s1);
    free(s2);
    free(cnt);
}

/* LayerNorm over C of NCHW: a reduction over a strided middle axis, with and without affine. */
static void test_invariants_channel_axis(void **state)
{
    (void)state;
    int64_t ext[4] = {2, 5, 3, 4};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 4, ext, 1u << 1, 1u << 1, NJ_FLAG_CENTER, NJ_ACT_NONE);
    for (int affine = 0; affine < 2; affine++) {
        if (affine) p.flags |= NJ_FLAG_SCALE | NJ_FLAG_BIAS;
        run r;
        run_init(&r, &p);
        r.eps = 0;
        nj_refh_fill(&r, 11, -3, 3, 0);
        run_fwd(&r);
        assert_int_equal(r.k, 2 * 3 * 4);
        check_normalized(&r, 1e-12);
        nj_refh_free(&r);
    }
}

/* The same memory described as a permuted view [N, H, W, C] (strides 60, 4, 1, 12) reducing over axis 3
 * must give the NCHW result with its elements permuted. */
static void test_permuted_view_matches(void **state)
{
    (void)state;
    int64_t ext[4] = {2, 5, 3, 4};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 4, ext, 1u << 1, 1u << 1, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS,
                                  NJ_ACT_GELU_ERF);
    run a, b;
    run_init(&a, &p);
    nj_refh_fill(&a, 12, -2, 2, 0);
    run_fwd(&a);
    nj_problem_desc q = p;
    int64_t qe[4] = {2, 3, 4, 5}, qs[4] = {60, 4, 1, 12};
    memcpy(q.x.extents, qe, sizeof qe);
    memcpy(q.x.strides, qs, sizeof qs);
    q.reduce_axes = q.feature_axes = 1u << 3;
    run_init(&b, &q);
    memcpy(b.x, a.x, 120 * sizeof(float));
    memcpy(b.gamma, a.gamma, 5 * sizeof(float));
    memcpy(b.beta, a.beta, 5 * sizeof(float));
    run_fwd(&b);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 5; c++)
            for (int h = 0; h < 3; h++)
                for (int w = 0; w < 4; w++) {
                    double want = a.y[((n * 5 + c) * 3 + h) * 4 + w], got = b.y[((n * 3 + h) * 4 + w) * 5 + c];
                    assert_close("permuted", got, want, 1e-13);
                }
    /* Statistics: NCHW keeps (n, h, w), the view keeps (n, h, w) too, in the same order. */
    assert_dense_close("permuted mean", b.mean, a.mean, 24, 1e-14, 0);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

/* GroupNorm: [N, C, H*W] = [2, 6, 6] viewed as [N, G, C/G, HW] = [2, 3, 2, 6]; R = {C/G, HW}, F = {G, C/G}.
 * NCHW and NHWC layouts of the same logical values must agree, and the output is normalized per group. */
static void test_groupnorm_layouts(void **state)
{
    (void)state;
    int64_t ext[4] = {2, 3, 2, 6};
    uint32_t flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS;
    nj_problem_desc p = nj_refh_desc(NJ_F32, 4, ext, (1u << 2) | (1u << 3), (1u << 1) | (1u << 2), flags, NJ_ACT_NONE);
    run a, b;
    run_init(&a, &p);
    a.eps = 0;
    nj_refh_fill(&a, 21, -1, 4, 0);
    run_fwd(&a);
    assert_int_equal(a.k, 6);
    assert_int_equal(a.f, 6);
    check_normalized(&a, 1e-12);

    nj_problem_desc q = p;
    int64_t nhwc[4] = {36, 2, 1, 6}; /* memory [N, HW, C], C = g * 2 + cg */
    memcpy(q.x.strides, nhwc, sizeof nhwc);
    run_init(&b, &q);
    b.eps = 0;
    double *dense = dalloc(a.n);
    nj_tu_gather(a.x, &a.xt, dense);
    nj_tu_scatter(b.x, &b.xt, dense);
    memcpy(b.gamma, a.gamma, 6 * sizeof(float));
    memcpy(b.beta, a.beta, 6 * sizeof(float));
    run_fwd(&b);
    assert_dense_close("nhwc y", b.y, a.y, a.n, 1e-14, 0);
    assert_dense_close("nhwc mean", b.mean, a.mean, 6, 1e-14, 0);
    /* Spot check by hand: group (n=1, g=2) holds dense elements 60..71. */
    double m = 0;
    for (int i = 60; i < 72; i++) m += dense[i];
    assert_close("group mean", a.mean[5], m / 12, 1e-13);
    free(dense);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

/* BatchNorm: [N, C, HW] = [4, 3, 5], R = {N, HW}, F = {C}: per channel, mean(y) = beta, var(y) = gamma^2. */
static void test_batchnorm_invariants(void **state)
{
    (void)state;
    int64_t ext[3] = {4, 3, 5};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 3, ext, 1u | 4u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS,
                                  NJ_ACT_NONE);
    run r;
    run_init(&r, &p);
    r.eps = 0;
    nj_refh_fill(&r, 31, 0, 10, 0);
    run_fwd(&r);
    const float *g = r.gamma, *b = r.beta;
    for (int c = 0; c < 3; c++) {
        double s1 = 0, s2 = 0;
        for (int n = 0; n < 4; n++)
            for (int s = 0; s < 5; s++) {
                double v = r.y[(n * 3 + c) * 5 + s];
                s1 += v;
                s2 += v * v;
            }
        double m = s1 / 20;
        assert_close("bn mean = beta", m, b[c], 1e-12);
        assert_close("bn var = gamma^2", s2 / 20 - m * m, (double)g[c] * g[c], 1e-12);
    }
    check_normalized(&r, 1e-12);
    nj_refh_free(&r);
}

/* x = 1e4 + noise must normalize like the noise alone: shifting by 1e4 is exact in f32 here (Sterbenz). */
static void test_large_offset(void **state)
{
    (void)state;
    int64_t ext[2] = {8, 64};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 0u, NJ_FLAG_CENTER, NJ_ACT_NONE);
    run a, b;
    run_init(&a, &p);
    run_init(&b, &p);
    a.eps = b.eps = 0;
    nj_rng g;
    nj_rng_seed(&g, 41);
    float *xa = a.x, *xb = b.x;
    for (int i = 0; i < 512; i++) {
        xa[i] = (float)(1e4 + nj_rng_range(&g, -0.5, 0.5));
        xb[i] = xa[i] - 1e4f;
        assert_true((double)xb[i] == (double)xa[i] - 1e4); /* the shift really is exact */
    }
    run_fwd(&a);
    run_fwd(&b);
    /* A one-pass E[x^2] - E[x]^2 in double would be off by ~1e-7 relative here. */
    assert_dense_close("offset y", a.y, b.y, 512, 1e-10, 1e-10);
    for (int k = 0; k < 8; k++) assert_close("offset mean", a.mean[k] - 1e4, b.mean[k], 1e-11);
    check_normalized(&a, 1e-11);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

/* ---- size-1 and zero-size ---- */

static void test_size_one_reduction(void **state)
{
    (void)state;
    int64_t ext[2] = {3, 1};
    const float xs[3] = {2, -3, 0.5f};
    /* LayerNorm: var = 0, y = beta, rstd = 1/sqrt(eps), dx = 0. */
    uint32_t flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, flags, NJ_ACT_NONE);
    run r;
    run_init(&r, &p);
    r.eps = 1e-2;
    memcpy(r.x, xs, sizeof xs);
    *(float *)r.gamma = 2;
    *(float *)r.beta = 0.25f;
    run_fwd(&r);
    run_bwd(&r);
    for (int i = 0; i < 3; i++) {
        assert_close("size-1 y", r.y[i], 0.25, 0);
        assert_close("size-1 mean", r.mean[i], xs[i], 0);
        assert_close("size-1 rstd", r.rstd[i], 1 / sqrt(1e-2), 1e-14);
        assert_close("size-1 dx", r.dx[i], 0, 1e-15);
    }
    nj_refh_free(&r);
    /* RMS: y = g x / sqrt(x^2 + eps), dy/dx = g eps / (x^2 + eps)^1.5. */
    p.flags = NJ_FLAG_SCALE;
    run_init(&r, &p);
    r.eps = 1e-2;
    memcpy(r.x, xs, sizeof xs);
    *(float *)r.gamma = 2;
    float *dy = r.dy;
    dy[0] = 1, dy[1] = -0.5f, dy[2] = 3;
    run_fwd(&r);
    run_bwd(&r);
    for (int i = 0; i < 3; i++) {
        double d = (double)xs[i] * xs[i] + 1e-2;
        assert_close("rms size-1 y", r.y[i], 2 * xs[i] / sqrt(d), 1e-14);
        assert_close("rms size-1 dx", r.dx[i], dy[i] * 2 * 1e-2 / pow(d, 1.5), 1e-13);
    }
    assert_close("rms size-1 dgamma", r.dgamma[0], 2 / sqrt(4.01) - 0.5 * -3 / sqrt(9.01) + 3 * 0.5 / sqrt(0.26),
                 1e-13);
    nj_refh_free(&r);
}

/* A size-1 axis in the middle changes nothing: [2, 1, 4] over {1, 2} equals [2, 4] over {1}. */
static void test_size_one_axis(void **state)
{
    (void)state;
    int64_t e3[3] = {2, 1, 4}, e2[2] = {2, 4};
    nj_problem_desc p3 = nj_refh_desc(NJ_F32, 3, e3, 6u, 6u, NJ_FLAG_CENTER | NJ_FLAG_SCALE, NJ_ACT_SILU);
    nj_problem_desc p2 = nj_refh_desc(NJ_F32, 2, e2, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE, NJ_ACT_SILU);
    p3.x.strides[1] = 1000; /* a size-1 axis's stride is never used */
    run a, b;
    run_init(&a, &p3);
    run_init(&b, &p2);
    nj_refh_fill(&b, 51, -1, 1, 0);
    float *xa = a.x, *xb = b.x;
    for (int n = 0; n < 2; n++)
        for (int i = 0; i < 4; i++) xa[n * 4 + i] = xb[n * 4 + i];
    memcpy(a.gamma, b.gamma, 4 * sizeof(float));
    run_fwd(&a);
    run_fwd(&b);
    assert_dense_close("size-1 axis", a.y, b.y, 8, 0, 0);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

static void test_zero_size(void **state)
{
    (void)state;
    /* No rows: nothing written except the parameter gradients, which are empty sums. */
    int64_t e1[2] = {0, 4};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, e1, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_RELU);
    double y = 7, dg[4] = {9, 9, 9, 9}, db[4] = {9, 9, 9, 9};
    float x = 0, g[4] = {1, 1, 1, 1};
    nj_ref_inputs in = {.x = &x, .gamma = g, .beta = g, .dy = &x, .eps = 1e-5};
    nj_ref_outputs out = {.y = &y};
    assert_int_equal(nj_ref_forward(&p, &in, &out), NJ_OK);
    assert_true(y == 7);
    nj_ref_outputs bout = {.dx = &y, .dgamma = dg, .dbeta = db};
    assert_int_equal(nj_ref_backward(&p, &in, &bout), NJ_OK);
    assert_true(y == 7);
    for (int i = 0; i < 4; i++) assert_true(dg[i] == 0 && db[i] == 0);
    /* Empty reductions: statistics with no data behind them are left alone. */
    int64_t e2[2] = {3, 0};
    p = nj_refh_desc(NJ_F32, 2, e2, 2u, 0u, NJ_FLAG_CENTER, NJ_ACT_NONE);
    double mean[3] = {5, 5, 5};
    nj_ref_outputs sout = {.y = &y, .mean = mean};
    assert_int_equal(nj_ref_forward(&p, &in, &sout), NJ_OK);
    assert_true(mean[0] == 5 && mean[2] == 5 && y == 7);
    int64_t n, k, f;
    nj_ref_sizes(&p, &n, &k, &f);
    assert_int_equal(n, 0);
    assert_int_equal(k, 3);
    assert_int_equal(f, 1);
}

/* ---- dtypes ---- */

static void test_load_store(void **state)
{
    (void)state;
    const uint16_t h[4] = {0x3C00, 0xC000, 0x3555, 0x0001}; /* 1, -2, 0.333251953125, 2^-24 */
    assert_true(nj_load_as_double(h, 0, NJ_F16) == 1.0);
    assert_true(nj_load_as_double(h, 1, NJ_F16) == -2.0);
    assert_true(nj_load_as_double(h, 2, NJ_F16) == 0.333251953125);
    assert_true(nj_load_as_double(h, 3, NJ_F16) == ldexp(1, -24));
    const uint16_t b[2] = {0x3F80, 0x4049}; /* 1, 3.140625 */
    assert_true(nj_load_as_double(b, 0, NJ_BF16) == 1.0);
    assert_true(nj_load_as_double(b, 1, NJ_BF16) == 3.140625);
    uint16_t o[2];
    nj_store_from_double(o, 1, NJ_F16, -2.0);
    assert_int_equal(o[1], 0xC000);
    nj_store_from_double(o, 0, NJ_BF16, 1.0);
    assert_int_equal(o[0], 0x3F80);
    float f[1];
    nj_store_from_double(f, 0, NJ_F32, 0.1);
    assert_true(f[0] == 0.1f);
    assert_true(isnan(nj_load_as_double(f, 0, NJ_DTYPE_NONE)));
}

/* f16/bf16 inputs (and params) give exactly the result of f32 inputs holding the same values. */
static void test_half_inputs(void **state)
{
    (void)state;
    const nj_dtype dts[2] = {NJ_F16, NJ_BF16};
    int64_t ext[3] = {3, 4, 10};
    uint32_t flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_RESIDUAL;
    for (int d = 0; d < 2; d++) {
        nj_problem_desc ph = nj_refh_desc(dts[d], 3, ext, 4u, 4u, flags, NJ_ACT_GELU_TANH);
        ph.param_dtype = dts[d];
        nj_problem_desc pf = nj_refh_desc(NJ_F32, 3, ext, 4u, 4u, flags, NJ_ACT_GELU_TANH);
        run h, f;
        run_init(&h, &ph);
        run_init(&f, &pf);
        nj_refh_fill(&h, 61 + (uint64_t)d, -3, 3, 0);
        double *tmp = dalloc(h.n);
        nj_tu_gather(h.x, &h.xt, tmp);
        nj_tu_scatter(f.x, &f.xt, tmp);
        nj_tu_gather(h.res, &h.rt, tmp);
        nj_tu_scatter(f.res, &f.rt, tmp);
        nj_tu_gather(h.dy, &h.dyt, tmp);
        nj_tu_scatter(f.dy, &f.dyt, tmp);
        nj_tu_gather(h.gamma, &h.pt, tmp);
        nj_tu_scatter(f.gamma, &f.pt, tmp);
        nj_tu_gather(h.beta, &h.pt, tmp);
        nj_tu_scatter(f.beta, &f.pt, tmp);
        /* The converted values must be the half values (no rounding on the way to f32). */
        nj_tu_gather(f.beta, &f.pt, tmp + h.f);
        assert_dense_close("param copy", tmp + h.f, tmp, h.f, 0, 0);
        run_fwd(&h);
        run_fwd(&f);
        assert_dense_close("half y", h.y, f.y, h.n, 0, 0);
        assert_dense_close("half residual_out", h.resout, f.resout, h.n, 0, 0);
        run_bwd(&h);
        run_bwd(&f);
        assert_dense_close("half dx", h.dx, f.dx, h.n, 0, 0);
        assert_dense_close("half dgamma", h.dgamma, f.dgamma, h.f, 0, 0);
        free(tmp);
        nj_refh_free(&h);
        nj_refh_free(&f);
    }
}

/* ---- residual and strided operands ---- */

/* x + residual (exact on a 1/64 grid) normalizes like the pre-summed input; residual_out is the sum.
 * The residual here is bf16 and stored transposed. */
static void test_residual(void **state)
{
    (void)state;
    int64_t ext[2] = {5, 12};
    uint32_t flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT;
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, flags, NJ_ACT_NONE);
    p.residual.dtype = NJ_BF16;
    p.residual.rank = 2;
    p.residual.extents[0] = 5, p.residual.extents[1] = 12;
    p.residual.strides[0] = 1, p.residual.strides[1] = 5;
    run a, b;
    run_init(&a, &p);
    assert_int_equal(a.rt.dtype, NJ_BF16);
    nj_refh_fill(&a, 71, -4, 4, 1.0 / 64);
    nj_rng rg;
    nj_rng_seed(&rg, 72);
    nj_tu_fill_uniform(a.res, &a.rt, &rg, -4, 4, 1.0 / 16); /* exact in bf16 */
    run_fwd(&a);
    nj_problem_desc q = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE, NJ_ACT_NONE);
    run_init(&b, &q);
    double *xd = dalloc(60), *rd = dalloc(60), *sum = dalloc(60);
    nj_tu_gather(a.x, &a.xt, xd);
    nj_tu_gather(a.res, &a.rt, rd);
    int nonzero = 0;
    for (int i = 0; i < 60; i++) {
        sum[i] = xd[i] + rd[i];
        nonzero += rd[i] != 0;
    }
    assert_true(nonzero > 40);
    nj_tu_scatter(b.x, &b.xt, sum);
    memcpy(b.gamma, a.gamma, 12 * sizeof(float));
    run_fwd(&b);
    assert_dense_close("residual_out", a.resout, sum, 60, 0, 0);
    assert_dense_close("residual y", a.y, b.y, 60, 0, 0);
    free(xd);
    free(rd);
    free(sum);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

/* Padded x, y and dy strides: the reference reads x and dy through their strides and writes dense
 * outputs whatever y's strides are; the test helpers then scatter into a padded y buffer. */
static void test_strided_operands(void **state)
{
    (void)state;
    int64_t ext[2] = {3, 5};
    uint32_t flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    nj_problem_desc pc = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, flags, NJ_ACT_SIGMOID);
    nj_problem_desc ps = pc;
    ps.x.strides[0] = 7, ps.x.strides[1] = 1;
    ps.y = ps.x;
    ps.y.strides[0] = 1, ps.y.strides[1] = 4; /* column-major y with a padded column */
    ps.dy = ps.x;
    ps.dy.strides[0] = 2, ps.dy.strides[1] = 6;
    run a, b;
    run_init(&a, &pc);
    run_init(&b, &ps);
    nj_refh_fill(&a, 81, -2, 2, 0);
    double *tmp = dalloc(15);
    nj_tu_gather(a.x, &a.xt, tmp);
    nj_tu_scatter(b.x, &b.xt, tmp);
    nj_tu_gather(a.dy, &a.dyt, tmp);
    nj_tu_scatter(b.dy, &b.dyt, tmp);
    memcpy(b.gamma, a.gamma, 5 * sizeof(float));
    memcpy(b.beta, a.beta, 5 * sizeof(float));
    run_fwd(&a);
    run_fwd(&b);
    run_bwd(&a);
    run_bwd(&b);
    assert_dense_close("strided y", b.y, a.y, 15, 0, 0);
    assert_dense_close("strided dx", b.dx, a.dx, 15, 0, 0);
    assert_dense_close("strided dbeta", b.dbeta, a.dbeta, 5, 0, 0);
    /* Round trip through a padded f32 y buffer; the padding keeps its sentinel. */
    nj_tensor_desc yt = ps.y;
    float ybuf[4 * 5];
    for (int i = 0; i < 20; i++) ybuf[i] = -99;
    assert_int_equal(nj_tu_span(&yt), 19);
    nj_tu_scatter(ybuf, &yt, b.y);
    nj_tu_cmp c = nj_tu_compare_strided("padded y", ybuf, &yt, a.y, 1e-7, 1e-7, 5);
    assert_int_equal(c.mismatches, 0);
    assert_int_equal(c.count, 15);
    assert_true(ybuf[3] == -99 && ybuf[7] == -99 && ybuf[19] == -99);
    ybuf[4 * 2 + 1] += 0.01f; /* and the comparer does notice a wrong element: (1, 2) -> dense 7 */
    c = nj_tu_compare_strided("padded y (expected mismatch)", ybuf, &yt, a.y, 1e-7, 1e-7, 0);
    assert_int_equal(c.mismatches, 1);
    assert_int_equal(c.worst_index, 7);
    free(tmp);
    nj_refh_free(&a);
    nj_refh_free(&b);
}

/* ---- backward against central finite differences of the whole forward ---- */

#define FD_H (1.0 / 16384) /* 2^-14: data sit on a 2^-12 grid within [-2, 2], so x +- h is exact in f32 */

/* L = sum_i dy_i * y_i, with dy fixed: dL/dx is exactly what backward returns. */
static double fd_loss(run *r, const double *dyd)
{
    run_fwd(r);
    double l = 0;
    for (int64_t i = 0; i < r->n; i++) l += dyd[i] * r->y[i];
    return l;
}

static double fd_at(run *r, float *buf, int64_t off, const double *dyd)
{
    float v = buf[off];
    buf[off] = (float)(v + FD_H);
    assert_true((double)buf[off] == (double)v + FD_H);
    double lp = fd_loss(r, dyd);
    buf[off] = (float)(v - FD_H);
    assert_true((double)buf[off] == (double)v - FD_H);
    double lm = fd_loss(r, dyd);
    buf[off] = v;
    return (lp - lm) / (2 * FD_H);
}

static void offsets_visit(int64_t lin, int64_t off, void *user) { ((int64_t *)user)[lin] = off; }

/* ReLU's kink: finite differences are only meaningful if no z sits within reach of 0. */
static void assert_z_away_from_zero(const run *r)
{
    run z;
    nj_problem_desc q = r->p;
    q.activation = NJ_ACT_NONE;
    run_init(&z, &q);
    memcpy(z.x, r->x, nj_tu_bytes(&r->xt));
    memcpy(z.gamma, r->gamma, nj_tu_bytes(&r->pt));
    memcpy(z.beta, r->beta, nj_tu_bytes(&r->pt));
    run_fwd(&z);
    for (int64_t i = 0; i < z.n; i++)
        if (fabs(z.y[i]) < 1e-3) fail_msg("test setup: z[%lld] = %g too close to the ReLU kink", (long long)i, z.y[i]);
    nj_refh_free(&z);
}

static void grad_check(const nj_problem_desc *p, uint64_t seed)
{
    run r;
    run_init(&r, p);
    nj_refh_fill(&r, seed, -2, 2, 1.0 / 4096);
    if (p->activation == NJ_ACT_RELU) assert_z_away_from_zero(&r);
    run_bwd(&r);
    double *dyd = dalloc(r.n), maxdx = 0;
    int64_t *offs = calloc((size_t)r.n, sizeof(int64_t));
    assert_non_null(offs);
    nj_tu_gather(r.dy, &r.dyt, dyd);
    nj_tu_for_each(&r.xt, offsets_visit, offs);
    for (int64_t i = 0; i < r.n; i++) {
        double fd = fd_at(&r, r.x, offs[i], dyd);
        if (!(fabs(fd - r.dx[i]) <= 1e-7 + 1e-6 * fabs(fd)))
            fail_msg("act %d dx[%lld]: backward %.12g, finite difference %.12g", p->activation, (long long)i,
                     r.dx[i], fd);
        maxdx = fmax(maxdx, fabs(r.dx[i]));
    }
    assert_true(maxdx > 1e-3); /* a gradient that is all zero would pass too easily */
    for (int64_t f = 0; f < r.f; f++) {
        if (p->flags & NJ_FLAG_SCALE) assert_close("dgamma", r.dgamma[f], fd_at(&r, r.gamma, f, dyd), 1e-7);
        if (p->flags & NJ_FLAG_BIAS) assert_close("dbeta", r.dbeta[f], fd_at(&r, r.beta, f, dyd), 1e-7);
    }
    free(offs);
    free(dyd);
    nj_refh_free(&r);
}

static void test_grad_layernorm_activations(void **state)
{
    (void)state;
    int64_t ext[2] = {3, 8};
    for (int act = NJ_ACT_NONE; act <= NJ_ACT_SIGMOID; act++) {
        nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, act);
        grad_check(&p, 100 + (uint64_t)act);
    }
}

static void test_grad_rmsnorm(void **state)
{
    (void)state;
    int64_t ext[2] = {3, 8};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, NJ_FLAG_SCALE, NJ_ACT_NONE);
    grad_check(&p, 201);
    p.activation = NJ_ACT_SILU;
    p.flags |= NJ_FLAG_BIAS;
    grad_check(&p, 202);
}

static void test_grad_groupnorm_batchnorm(void **state)
{
    (void)state;
    uint32_t affine = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    int64_t eg[4] = {2, 2, 2, 3};
    nj_problem_desc g = nj_refh_desc(NJ_F32, 4, eg, (1u << 2) | (1u << 3), (1u << 1) | (1u << 2), affine,
                                  NJ_ACT_GELU_TANH);
    grad_check(&g, 301);
    int64_t eb[3] = {3, 2, 4};
    nj_problem_desc b = nj_refh_desc(NJ_F32, 3, eb, 1u | 4u, 2u, affine, NJ_ACT_SIGMOID);
    grad_check(&b, 302);
}

/* Reduction over a strided middle axis, with x and dy stored channels-last underneath. */
static void test_grad_strided(void **state)
{
    (void)state;
    int64_t ext[3] = {2, 4, 3};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 3, ext, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS,
                                  NJ_ACT_GELU_ERF);
    p.x.strides[0] = 12, p.x.strides[1] = 1, p.x.strides[2] = 4;
    p.dy = p.x;
    p.dy.strides[0] = 1, p.dy.strides[1] = 2, p.dy.strides[2] = 8;
    grad_check(&p, 401);
}

/* Keras-style axis sets: two non-adjacent reduced axes, and F overlapping R only partly. */
static void test_grad_axis_sets(void **state)
{
    (void)state;
    uint32_t affine = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    int64_t ext[3] = {3, 4, 5};
    nj_problem_desc a = nj_refh_desc(NJ_F32, 3, ext, 1u | 4u, 1u | 4u, affine, NJ_ACT_RELU);
    grad_check(&a, 501);
    nj_problem_desc b = nj_refh_desc(NJ_F32, 3, ext, 2u | 4u, 1u | 4u, affine, NJ_ACT_SILU);
    grad_check(&b, 502);
}

/* Without affine and with eps = 0, LayerNorm's dx sums to 0 over each set and is orthogonal to xhat
 * (with eps > 0 the second sum is scaled by 1 - var / (var + eps) instead). */
static void test_grad_projection(void **state)
{
    (void)state;
    int64_t ext[2] = {4, 6};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 2, ext, 2u, 0u, NJ_FLAG_CENTER, NJ_ACT_NONE);
    grad_check(&p, 601);
    run r;
    run_init(&r, &p);
    r.eps = 0;
    nj_refh_fill(&r, 602, -2, 2, 0);
    run_fwd(&r);
    run_bwd(&r);
    for (int k = 0; k < 4; k++) {
        double s = 0, sx = 0;
        for (int i = 0; i < 6; i++) {
            s += r.dx[k * 6 + i];
            sx += r.dx[k * 6 + i] * r.y[k * 6 + i];
        }
        assert_close("sum dx", s, 0, 1e-13);
        assert_close("sum dx*xhat", sx, 0, 1e-13);
    }
    nj_refh_free(&r);
}

/* ---- bad input ---- */

static void expect_fail(const nj_problem_desc *p, const nj_ref_inputs *in, nj_status want, bool backward)
{
    double y[4] = {-7, -7, -7, -7};
    nj_ref_outputs out = {.y = y, .dx = y};
    nj_error_clear();
    nj_status s = backward ? nj_ref_backward(p, in, &out) : nj_ref_forward(p, in, &out);
    if (s != want)
        fail_msg("expected %s, got %s (%s)", nj_status_name(want), nj_status_name(s), nj_last_error());
    assert_true(nj_last_error()[0] != '\0');
    for (int i = 0; i < 4; i++) assert_true(y[i] == -7);
}

static void test_reference_fail(void **state)
{
    (void)state;
    int64_t ext[2] = {2, 2};
    float x[4] = {1, 2, 3, 4};
    const nj_problem_desc good = nj_refh_desc(NJ_F32, 2, ext, 2u, 2u, NJ_FLAG_CENTER | NJ_FLAG_SCALE, NJ_ACT_NONE);
    nj_ref_inputs in = {.x = x, .gamma = x, .dy = x, .eps = 1e-5};
    nj_ref_outputs out = {0};
    assert_int_equal(nj_ref_forward(NULL, &in, &out), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_ref_forward(&good, NULL, &out), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_ref_forward(&good, &in, NULL), NJ_ERR_NULL_POINTER);
    nj_problem_desc p;
#define BAD(stmt, status, bwd) \
    do {                       \
        p = good;              \
        stmt;                  \
        expect_fail(&p, &in, status, bwd); \
    } while (0)
    BAD(p.struct_size = 8, NJ_ERR_BAD_STRUCT_SIZE, false);
    BAD(p.x.rank = 0, NJ_ERR_BAD_RANK, false);
    BAD(p.x.rank = 9, NJ_ERR_BAD_RANK, true);
    BAD(p.x.extents[0] = -1, NJ_ERR_BAD_EXTENT, false);
    BAD(p.x.strides[1] = -1, NJ_ERR_BAD_STRIDE, false);
    BAD((p.x.extents[0] = INT64_C(1) << 40, p.x.extents[1] = INT64_C(1) << 40), NJ_ERR_OVERFLOW, false);
    BAD((p.x.strides[0] = INT64_MAX, p.x.strides[1] = INT64_MAX), NJ_ERR_OVERFLOW, false);
    BAD(p.x.dtype = 7, NJ_ERR_BAD_DTYPE, false);
    BAD(p.param_dtype = 9, NJ_ERR_BAD_DTYPE, false);
    BAD(p.y.dtype = 4, NJ_ERR_BAD_DTYPE, false);
    BAD(p.reduce_axes = 0, NJ_ERR_EMPTY_REDUCTION, false);
    BAD(p.reduce_axes = 1u << 5, NJ_ERR_BAD_AXIS, false);
    BAD(p.feature_axes = 4u, NJ_ERR_BAD_AXIS, true);
    BAD(p.activation = 6, NJ_ERR_BAD_ACTIVATION, false);
    BAD(p.activation = -1, NJ_ERR_BAD_ACTIVATION, true);
    BAD(p.flags |= 1u << 6, NJ_ERR_BAD_FLAGS, false);
    BAD(p.flags |= NJ_FLAG_RESIDUAL_OUT, NJ_ERR_BAD_FLAGS, false);
    BAD(p.flags |= NJ_FLAG_RESIDUAL, NJ_ERR_NULL_POINTER, false); /* residual pointer missing */
    BAD(p.flags |= NJ_FLAG_BIAS, NJ_ERR_NULL_POINTER, false);     /* beta missing */
    BAD((p.y = p.x, p.y.extents[1] = 3), NJ_ERR_SHAPE_MISMATCH, false);
    BAD((p.y = p.x, p.y.rank = 1), NJ_ERR_SHAPE_MISMATCH, false);
    BAD((p.dy = p.x, p.dy.strides[0] = -2), NJ_ERR_BAD_STRIDE, true);
    BAD((p.dx = p.x, p.dx.extents[0] = 1), NJ_ERR_SHAPE_MISMATCH, true);
#undef BAD
    nj_ref_inputs no = in;
    no.gamma = NULL;
    expect_fail(&good, &no, NJ_ERR_NULL_POINTER, false);
    no = in;
    no.dy = NULL;
    expect_fail(&good, &no, NJ_ERR_NULL_POINTER, true);
    no = in;
    no.x = NULL;
    expect_fail(&good, &no, NJ_ERR_NULL_POINTER, false);
    /* The good descriptor does run, so the failures above are about the one field each changed. */
    double y[4];
    out.y = y;
    assert_int_equal(nj_ref_forward(&good, &in, &out), NJ_OK);
    assert_int_equal(nj_ref_backward(&good, &in, &out), NJ_OK);
}

static void test_sizes(void **state)
{
    (void)state;
    int64_t ext[4] = {2, 3, 2, 6};
    nj_problem_desc p = nj_refh_desc(NJ_F32, 4, ext, (1u << 2) | (1u << 3), (1u << 1) | (1u << 2), 0, 0);
    int64_t n, k, f;
    nj_ref_sizes(&p, &n, &k, &f);
    assert_int_equal(n, 72);
    assert_int_equal(k, 6);
    assert_int_equal(f, 6);
    p.feature_axes = 0;
    nj_ref_sizes(&p, NULL, NULL, &f);
    assert_int_equal(f, 1); /* no feature axes: one scalar gamma */
    nj_ref_sizes(NULL, &n, &k, &f);
    assert_int_equal(n, 0);
}

/* ---- the shared helpers in tests/support/nj_testutil.c (other suites rely on them) ---- */

static void test_testutil_rng(void **state)
{
    (void)state;
    nj_rng a, b, c;
    nj_rng_seed(&a, 7);
    nj_rng_seed(&b, 7);
    nj_rng_seed(&c, 8);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t va = nj_rng_u64(&a);
        assert_true(va == nj_rng_u64(&b));
        same_c += va == nj_rng_u64(&c);
    }
    assert_int_equal(same_c, 0);
    nj_rng_seed(&a, 0); /* seed 0 must not get stuck at 0 */
    assert_true(nj_rng_u64(&a) != 0 || nj_rng_u64(&a) != 0);
    double s = 0, s2 = 0;
    for (int i = 0; i < 20000; i++) {
        double u = nj_rng_uniform(&a), n = nj_rng_normal(&a);
        assert_true(u >= 0 && u < 1);
        int64_t k = nj_rng_int(&a, -3, 3);
        assert_true(k >= -3 && k <= 3);
        s += n;
        s2 += n * n;
    }
    assert_close("normal mean", s / 20000, 0, 0.05);
    assert_close("normal variance", s2 / 20000, 1, 0.05);
}

static void test_testutil_tensors(void **state)
{
    (void)state;
    int64_t ext[2] = {3, 4};
    nj_tensor_desc t = nj_tu_contiguous(NJ_F16, 2, ext);
    assert_int_equal(t.strides[0], 4);
    assert_int_equal(t.strides[1], 1);
    t.strides[0] = 1, t.strides[1] = 5; /* column-major with padding */
    assert_int_equal(nj_tu_numel(&t), 12);
    assert_int_equal(nj_tu_span(&t), 18);
    assert_int_equal(nj_tu_bytes(&t), 36);
    uint16_t *buf = nj_tu_alloc(&t);
    assert_non_null(buf);
    nj_rng g;
    nj_rng_seed(&g, 9);
    nj_tu_fill_uniform(buf, &t, &g, -2, 2, 0.25);
    double d[12], back[12];
    nj_tu_gather(buf, &t, d);
    for (int i = 0; i < 12; i++) {
        assert_true(d[i] >= -2 && d[i] < 2);
        assert_true(d[i] * 4 == floor(d[i] * 4)); /* on the 0.25 grid */
    }
    assert_int_equal(buf[3], 0); /* offset 3 is padding (elements sit at i + 5 j): untouched */
    nj_tu_fill_const(buf, &t, 1.5);
    nj_tu_gather(buf, &t, back);
    for (int i = 0; i < 12; i++) assert_true(back[i] == 1.5);
    nj_tu_scatter(buf, &t, d);
    nj_tu_gather(buf, &t, back);
    assert_dense_close("scatter/gather", back, d, 12, 0, 0);
    nj_tensor_desc none;
    memset(&none, 0, sizeof none);
    nj_tensor_desc r = nj_tu_resolve(&none, &t);
    assert_int_equal(r.rank, 2);
    assert_int_equal(r.dtype, NJ_F16);
    assert_int_equal(r.strides[1], 5);
    double atol, rtol;
    nj_tu_default_tol(NJ_BF16, &atol, &rtol);
    assert_true(atol > 0 && rtol > 0);
    double want[2] = {1, NAN}, got[2] = {1, NAN};
    assert_int_equal(nj_tu_compare_dense("nan", got, want, 2, 0, 0, 0).mismatches, 0);
    got[1] = 0;
    assert_int_equal(nj_tu_compare_dense("nan (expected mismatch)", got, want, 2, 0, 0, 0).mismatches, 1);
    free(buf);
}

static void test_testutil_dirs(void **state)
{
    (void)state;
    char dir[512], outside[512], path[1024];
    assert_true(nj_tu_make_temp_dir("reftest", dir, sizeof dir));
    assert_true(nj_tu_make_temp_dir("reftest-outside", outside, sizeof outside));
    snprintf(path, sizeof path, "%s/keep", outside);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/a/b", dir);
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/a", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/a/b/file", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/a/link", dir); /* a link out of the tree must not be followed */
    assert_int_equal(symlink(outside, path), 0);
    assert_int_equal(nj_tu_remove_tree(dir), 0);
    struct stat st;
    assert_int_not_equal(lstat(dir, &st), 0);
    snprintf(path, sizeof path, "%s/keep", outside);
    assert_int_equal(lstat(path, &st), 0);
    assert_int_equal(nj_tu_remove_tree(outside), 0);
    assert_int_equal(nj_tu_remove_tree(outside), 0); /* already gone: fine */
    char tiny[8];
    assert_false(nj_tu_make_temp_dir("much-too-long-for-the-buffer", tiny, sizeof tiny));
    assert_int_equal(tiny[0], '\0');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_layernorm),
        cmocka_unit_test(test_hand_layernorm_columns),
        cmocka_unit_test(test_hand_rmsnorm),
        cmocka_unit_test(test_hand_activations),
        cmocka_unit_test(test_invariants_channel_axis),
        cmocka_unit_test(test_permuted_view_matches),
        cmocka_unit_test(test_groupnorm_layouts),
        cmocka_unit_test(test_batchnorm_invariants),
        cmocka_unit_test(test_large_offset),
        cmocka_unit_test(test_size_one_reduction),
        cmocka_unit_test(test_size_one_axis),
        cmocka_unit_test(test_zero_size),
        cmocka_unit_test(test_load_store),
        cmocka_unit_test(test_half_inputs),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_strided_operands),
        cmocka_unit_test(test_grad_layernorm_activations),
        cmocka_unit_test(test_grad_rmsnorm),
        cmocka_unit_test(test_grad_groupnorm_batchnorm),
        cmocka_unit_test(test_grad_strided),
        cmocka_unit_test(test_grad_axis_sets),
        cmocka_unit_test(test_grad_projection),
        cmocka_unit_test(test_reference_fail),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_testutil_rng),
        cmocka_unit_test(test_testutil_tensors),
        cmocka_unit_test(test_testutil_dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
