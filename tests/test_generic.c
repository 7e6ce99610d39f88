/* The generic kernels (src/generic.c, templates/generic.cu): one module per pass, x dtype and gamma
 * dtype that must be right for every valid problem. A context forced onto them runs random problems of
 * rank up to 8 in padded, permuted (odd-stride) and broadcast layouts, every dtype, flag set and
 * activation, forward and backward, against the double-precision reference through the tool's checker
 * and tolerances; then fixed hard cases (rank 8, large offsets, empty batch), the module count, the
 * descriptor and the launch counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "generic.h"
#include "nj_testutil.h"
#include "problem_gen.h"
#include "check_lib.h"

typedef struct fixture {
    char dir[512];
    nj_context *ctx;
} fixture;

static nj_context *generic_context(const char *dir)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.flags = NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON | NJ_CTX_EMU_SMALL_GRID;
    o.seed = 5;
    o.cache_dir = dir;
    nj_context *ctx = NULL;
    if (nj_context_create(&o, &ctx) != NJ_OK) return NULL;
    nj_serve_force_generic(ctx, 1);
    return ctx;
}

static int setup(void **state)
{
    static fixture f;
    if (!nj_tu_make_temp_dir("generic", f.dir, sizeof f.dir)) return -1;
    /* NJ_GENERIC_CACHE: a cache kept between runs while iterating (the modules take minutes to build) */
    f.ctx = generic_context(getenv("NJ_GENERIC_CACHE") ? getenv("NJ_GENERIC_CACHE") : f.dir);
    if (!f.ctx) return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    nj_context_destroy(f->ctx);
    nj_tu_remove_tree(f->dir);
    return 0;
}

/* 1 when the problem passed; prints its report otherwise. */
static int check(nj_context *ctx, const nj_problem_desc *p, double offset, uint64_t seed)
{
    njt_check_options o;
    njt_check_options_init(&o);
    o.seed = seed;
    o.offset = offset;
    njt_check_report rep;
    memset(&rep, 0, sizeof rep);
    if (getenv("NJ_GENERIC_TRACE")) signal(SIGSEGV, SIG_DFL); /* a core to read, not cmocka's report */
    nj_status s = njt_check_problem(ctx, p, &o, &rep);
    if (s == NJ_OK && rep.pass) return 1;
    char text[2048];
    if (nj_problem_to_text(p, text, sizeof text, NULL) != NJ_OK) snprintf(text, sizeof text, "(no text)");
    fprintf(stderr, "FAIL %s (offset %g, seed %llu)\n", text, offset, (unsigned long long)seed);
    if (s != NJ_OK) fprintf(stderr, "  %s: %s\n", nj_status_name(s), nj_last_error());
    else njt_check_report_print(stderr, &rep);
    return 0;
}

/* Random valid problems, rank 1 to 8: every x dtype and rank must come up, and all must pass. */
static void test_random_problems(void **state)
{
    fixture *f = *state;
    if (getenv("NJ_GENERIC_ONE")) { /* debugging: one problem line, NJ_GENERIC_PASSES (1 fwd, 2 bwd, 3) */
        nj_problem_desc p;
        assert_int_equal(nj_problem_from_text(getenv("NJ_GENERIC_ONE"), 3, &p), NJ_OK);
        njt_check_options o;
        njt_check_options_init(&o);
        o.passes = (uint32_t)atoi(getenv("NJ_GENERIC_PASSES") ? getenv("NJ_GENERIC_PASSES") : "3");
        njt_check_report rep;
        memset(&rep, 0, sizeof rep);
        signal(SIGSEGV, SIG_DFL);
        fprintf(stderr, "status %d\n", njt_check_problem(f->ctx, &p, &o, &rep));
        njt_check_report_print(stderr, &rep);
        return;
    }
    nj_pg_rng r = {2026};
    nj_pg_opts o = {8, 3, 1, 1, 0, 0};
    int failed = 0, ran = 0, tiny = 0, dtypes = 0, ranks = 0, acts = 0, bwd_param = 0;
    for (int i = 0; i < 90; i++) {
        nj_problem_desc p;
        nj_pg_problem(&r, &o, &p);
        if (nj_problem_validate(&p) != NJ_OK) continue;
        int64_t numel = 1;
        for (int a = 0; a < p.x.rank; a++) numel *= p.x.extents[a];
        if (numel > 1500) continue; /* the emulator runs a block's threads one by one */
        int64_t set = 1;
        for (int k = 0; k < p.x.rank; k++)
            if (p.reduce_axes >> k & 1u) set *= p.x.extents[k];
        /* sets of 1 or 2 elements included: their dx is the exact eps * rstd^3 form (bwd_lib.cuh) */
        tiny += set < 3;
        ran++;
        if (getenv("NJ_GENERIC_TRACE")) {
            char t[2048];
            if (nj_problem_to_text(&p, t, sizeof t, NULL) == NJ_OK) fprintf(stderr, "problem %d: %s\n", i, t);
        }
        failed += !check(f->ctx, &p, 0.0, 100 + (uint64_t)i);
        dtypes |= 1 << p.x.dtype;
        ranks |= 1 << p.x.rank;
        acts |= 1 << p.activation;
        bwd_param |= (p.flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0;
    }
    fprintf(stderr, "generic: %d random problems, %d failed; %d with sets of 1 or 2 elements\n", ran, failed,
            tiny);
    assert_int_equal(failed, 0);
    assert_true(ran >= 30);
    assert_true(tiny >= 5); /* the degenerate sets' exact form is exercised */
    assert_int_equal(dtypes, (1 << NJ_F32) | (1 << NJ_F16) | (1 << NJ_BF16));
    assert_true(ranks & (1 << 8));
    assert_int_equal(acts, 0x3f);
    assert_true(bwd_param);
}

/* x of rank 8, axes permuted in memory and padded (odd strides), y and dy in their own layouts. */
static void rank8_problem(nj_problem_desc *p, nj_dtype dt, uint32_t reduce, uint32_t feature, uint32_t flags, int act)
{
    static const int64_t ext[8] = {2, 3, 1, 2, 3, 2, 1, 3};
    static const int order[8] = {3, 0, 6, 1, 7, 2, 5, 4}; /* memory order, innermost last */
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->x.dtype = dt;
    p->x.rank = 8;
    int64_t s = 1;
    for (int k = 7; k >= 0; k--) {
        p->x.extents[order[k]] = ext[order[k]];
        p->x.strides[order[k]] = s;
        s = s * ext[order[k]] + 1; /* a gap after every axis */
    }
    p->y = p->x;
    p->dy = p->x;
    p->y = nj_tu_contiguous(dt, 8, ext); /* y and dx dense, x and dy padded and permuted */
    p->dx = p->y;
    p->dy.dtype = dt == NJ_F32 ? NJ_BF16 : NJ_F32; /* another dtype than x's: read at run time */
    p->reduce_axes = reduce;
    p->feature_axes = feature;
    p->flags = flags;
    p->activation = act;
    p->param_dtype = dt;
}

static void test_rank8_strided(void **state)
{
    fixture *f = *state;
    static const struct {
        uint32_t reduce, feature, flags;
        int act;
    } cases[] = {
        {0xF0, 0xF0, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS, NJ_ACT_NONE},
        {0x55, 0x0A, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_SILU}, /* F outside R */
        {0x3C, 0x24, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF},        /* RMS, F partly in R */
        {0x81, 0x00, NJ_FLAG_CENTER | NJ_FLAG_SAVE_STATS, NJ_ACT_RELU},
    };
    static const nj_dtype dts[3] = {NJ_F32, NJ_F16, NJ_BF16};
    int failed = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 3; d++) {
            nj_problem_desc p;
            rank8_problem(&p, dts[d], cases[c].reduce, cases[c].feature, cases[c].flags, cases[c].act);
            if (nj_problem_validate(&p) != NJ_OK) fail_msg("case %zu: %s", c, nj_last_error());
            failed += !check(f->ctx, &p, 0.0, 7 + c * 3 + (uint64_t)d);
        }
    assert_int_equal(failed, 0);
}

/* Offsets far above the spread: shifted statistics forward, the saved mean's correction backward. */
static void test_offsets_and_edges(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *line;
        double offset;
    } cases[] = {
        {"layernorm f32 3x300 flags=scale,bias,stats", 1e4},
        {"norm f32 shape=4x6x5 reduce=0,2 feature=1 flags=center,scale,bias,stats act=silu", 1e4},
        {"batchnorm f32 nhwc 2x5x4x3 flags=scale,bias,stats", 1e6},
        {"groupnorm bf16 nhwc 2x12x5x5 groups=3 flags=scale,bias,stats", 1e2},
        {"layernorm f16 3x64 flags=scale,bias,residual,resout act=gelu_tanh", 0.0},
        {"layernorm f32 0x64 flags=scale,bias,stats", 0.0}, /* empty batch: dgamma = dbeta = 0 */
        {"layernorm bf16 3x1 flags=scale,bias", 0.0},       /* a set of one: y = beta */
        {"rmsnorm f16 2x4100 flags=scale,stats", 0.0},      /* sets longer than a block */
    };
    int failed = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nj_problem_desc p;
        if (nj_problem_from_text(cases[c].line, 3, &p) != NJ_OK) fail_msg("%s: %s", cases[c].line, nj_last_error());
        failed += !check(f->ctx, &p, cases[c].offset, 50 + (uint64_t)c);
    }
    assert_int_equal(failed, 0);
}

/* One module per pass and dtype pair, whatever the problem; counted generic launches. */
static void test_modules_and_counters(void **state)
{
    char dir[512];
    assert_true(nj_tu_make_temp_dir("generic-mod", dir, sizeof dir));
    nj_context *ctx = generic_context(dir);
    assert_non_null(ctx);
    static const char *const lines[] = {"layernorm f32 4x33 flags=scale,bias", "rmsnorm f32 2x7x5 last=2 flags=scale",
                                        "instancenorm f32 nhwc 2x3x3x4 flags=scale,bias,stats"};
    for (int i = 0; i < 3; i++) {
        nj_problem_desc p;
        assert_int_equal(nj_problem_from_text(lines[i], 2, &p), NJ_OK);
        assert_true(check(ctx, &p, 0.0, 3));
    }
    nj_cache_stats cs = {.struct_size = sizeof cs};
    assert_int_equal(nj_context_cache_stats(ctx, &cs), NJ_OK);
    assert_int_equal(cs.compiles, 2); /* f32/f32 forward and backward, for all three */
    nj_serve_stats ss = {.struct_size = sizeof ss};
    assert_int_equal(nj_context_serve_stats(ctx, &ss), NJ_OK);
    assert_int_equal(ss.generic_passes, 6);
    assert_int_equal(ss.generic_launches, 6); /* a forward and a backward each */
    assert_int_equal(ss.background_jobs, 0);
    nj_context_destroy(ctx);
    nj_tu_remove_tree(dir);
}

/* The descriptor lists every axis once, in its role. */
static void test_descriptor(void **state)
{
    (void)state;
    nj_problem_desc p;
    rank8_problem(&p, NJ_F32, 0x55, 0x0A, NJ_FLAG_CENTER | NJ_FLAG_SCALE, NJ_ACT_NONE);
    nj_canon c;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_gdesc d;
    nj_generic_desc(&c, &d);
    assert_int_equal(d.rank, c.rank);
    assert_int_equal(d.nred + d.nkept, c.rank);
    assert_int_equal(d.nfeat + d.nother, c.rank);
    assert_int_equal(d.kept[0], 0);
    assert_int_equal(d.other[0], 0);
    int64_t red = 1, feat = 1;
    for (int i = 0; i < d.nred; i++) red *= d.extent[d.red[i]];
    for (int i = 0; i < d.nfeat; i++) feat *= d.extent[d.feat[i]];
    assert_int_equal(red, c.reduce_size);
    assert_int_equal(feat, c.param_size);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor),
        cmocka_unit_test(test_random_problems),
        cmocka_unit_test(test_rank8_strided),
        cmocka_unit_test(test_offsets_and_edges),
        cmocka_unit_test(test_modules_and_counters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
