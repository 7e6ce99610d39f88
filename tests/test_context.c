/* Context: backend selection, plan table, single flight, disk reuse, argument checks, end-to-end runs
 * on the emulator backend compared with the double-precision reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "context.h"
#include "context_impl.h"
#include "reference.h"

/* This program is linked with -Wl,--wrap=malloc,calloc,realloc (tests/CMakeLists.txt), so every
 * allocation made by the library's code is counted here and a test can prove a path allocates nothing. */
static _Atomic long allocations;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n)
{
    allocations++;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m)
{
    allocations++;
    return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n)
{
    allocations++;
    return __real_realloc(p, n);
}

typedef struct fixture {
    char dir[256];
} fixture;

static int rm_tree(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    return system(cmd);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/nj-ctx-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    rm_tree(f->dir);
    free(f);
    return 0;
}

static nj_context *emu_context(const char *dir, uint32_t flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.flags = flags;
    o.cache_dir = dir;
    nj_context *ctx = NULL;
    nj_status s = nj_context_create(&o, &ctx);
    if (s != NJ_OK) fail_msg("context: %s %s", nj_status_name(s), nj_last_error());
    return ctx;
}

static uint64_t rng_state = 88172645463325252ull;
static double rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Runs a LayerNorm forward (f32, scale+bias, stats) of rows x n on the emulator and returns the worst
 * relative error against the reference. x and y start `shift` (< 4) elements past their allocation. */
static double run_layernorm_at(nj_context *ctx, int64_t rows, int64_t n, int shift)
{
    nj_problem_desc p;
    int64_t ext[2] = {rows, n};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS),
                     NJ_OK);
    nj_plan *plan;
    nj_status s = nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan);
    if (s != NJ_OK) fail_msg("plan: %s %s", nj_status_name(s), nj_last_error());
    size_t numel = (size_t)(rows * n);
    float *xa = malloc((numel + 4) * 4), *ya = malloc((numel + 4) * 4), *x = xa + shift, *y = ya + shift;
    float *g = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
    float *mean = malloc((size_t)rows * 4), *rstd = malloc((size_t)rows * 4);
    size_t ws = nj_plan_workspace_size(plan, NJ_PASS_FORWARD); /* split rows need one */
    void *work = ws ? malloc(ws) : NULL;
    /* a ramp along the row: a split row's pieces differ in mean, so their combine needs its n * d^2 */
    for (size_t i = 0; i < numel; i++)
        x[i] = (float)(rnd() + 3.0 + 4.0 * (double)(i % (size_t)n) / (double)n), y[i] = NAN;
    for (int64_t i = 0; i < n; i++) g[i] = (float)(1.0 + 0.5 * rnd()), b[i] = (float)(0.1 * rnd());
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = x, .gamma = g, .beta = b, .y = y,
                         .mean = mean, .rstd = rstd, .workspace = work, .workspace_size = ws};
    s = nj_forward(plan, &a);
    if (s != NJ_OK) fail_msg("forward: %s %s", nj_status_name(s), nj_last_error());
    double *ry = malloc(numel * sizeof(double)), *rm = malloc((size_t)rows * 8), *rr = malloc((size_t)rows * 8);
    nj_ref_inputs in = {.x = x, .gamma = g, .beta = b, .eps = 1e-5};
    nj_ref_outputs out = {.y = ry, .mean = rm, .rstd = rr};
    assert_int_equal(nj_ref_forward(&p, &in, &out), NJ_OK);
    double worst = 0;
    /* Error in units of the f32 tolerance (outputs are of unit scale). */
    for (size_t i = 0; i < numel; i++) worst = fmax(worst, fabs(y[i] - ry[i]) / (1e-5 + 1e-5 * fabs(ry[i])));
    for (int64_t i = 0; i < rows; i++) worst = fmax(worst, fabs(mean[i] - rm[i]) / (1e-5 + 1e-5 * fabs(rm[i])));
    for (int64_t i = 0; i < rows; i++) worst = fmax(worst, fabs(rstd[i] - rr[i]) / (1e-5 + 1e-5 * fabs(rr[i])));
    if (isnan(worst)) worst = INFINITY; /* an unwritten element */
    free(xa), free(ya), free(g), free(b), free(mean), free(rstd), free(ry), free(rm), free(rr), free(work);
    return worst;
}

static double run_layernorm(nj_context *ctx, int64_t rows, int64_t n) { return run_layernorm_at(ctx, rows, n, 0); }

/* GroupNorm over NHWC f32 images ([2, 16, 96, 96], 4 groups: the channels-last family, 3 launches and a
 * workspace; an image of 147456 elements is past NJ_CL_FUSE, under which one block takes it in one launch;
 * on sm_90, these contexts, a cluster of its tiles takes it in one launch without a workspace unless
 * NORMJIT_PLAN_NO_CLUSTER=1) with x and y shifted by `shift` floats; error in units of the f32 tolerance. */
static double run_groupnorm_nhwc_at(nj_context *ctx, int shift)
{
    nj_problem_desc p;
    int64_t ext[4] = {2, 16, 96, 96};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F32, 4, ext, 4, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS),
                     NJ_OK);
    nj_plan *plan;
    nj_status s = nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan);
    if (s != NJ_OK) fail_msg("plan: %s %s", nj_status_name(s), nj_last_error());
    const size_t numel = 2 * 16 * 96 * 96, stats = 2 * 4;
    size_t ws = nj_plan_workspace_size(plan, NJ_PASS_FORWARD);
    const char *nc = getenv("NORMJIT_PLAN_NO_CLUSTER");
    assert_int_equal(ws > 0, nc && nc[0] == '1');
    float *xa = malloc((numel + 4) * 4), *ya = malloc((numel + 4) * 4), *x = xa + shift, *y = ya + shift;
    float *g = malloc(16 * 4), *b = malloc(16 * 4), *mean = malloc(stats * 4), *rstd = malloc(stats * 4);
    void *work = malloc(ws);
    for (size_t i = 0; i < numel; i++) x[i] = (float)(rnd() + 3.0), y[i] = NAN;
    for (int i = 0; i < 16; i++) g[i] = (float)(1.0 + 0.5 * rnd()), b[i] = (float)(0.1 * rnd());
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = x, .gamma = g, .beta = b, .y = y,
                         .mean = mean, .rstd = rstd, .workspace = work, .workspace_size = ws};
    s = nj_forward(plan, &a);
    if (s != NJ_OK) fail_msg("forward: %s %s", nj_status_name(s), nj_last_error());
    double *ry = malloc(numel * sizeof(double)), rm[8], rr[8];
    nj_ref_inputs in = {.x = x, .gamma = g, .beta = b, .eps = 1e-5};
    nj_ref_outputs out = {.y = ry, .mean = rm, .rstd = rr};
    assert_int_equal(nj_ref_forward(&p, &in, &out), NJ_OK);
    double worst = 0;
    for (size_t i = 0; i < numel; i++) { /* the reference is in logical order; y in NHWC memory */
        size_t rem = i, off = 0;
        for (int ax = p.x.rank - 1; ax >= 0; ax--) {
            off += rem % (size_t)p.x.extents[ax] * (size_t)p.x.strides[ax];
            rem /= (size_t)p.x.extents[ax];
        }
        worst = fmax(worst, fabs(y[off] - ry[i]) / (1e-5 + 1e-5 * fabs(ry[i])));
    }
    for (size_t i = 0; i < stats; i++) worst = fmax(worst, fabs(mean[i] - rm[i]) / (1e-5 + 1e-5 * fabs(rm[i])));
    for (size_t i = 0; i < stats; i++) worst = fmax(worst, fabs(rstd[i] - rr[i]) / (1e-5 + 1e-5 * fabs(rr[i])));
    if (isnan(worst)) worst = INFINITY;
    free(xa), free(ya), free(g), free(b), free(mean), free(rstd), free(work), free(ry);
    return worst;
}

static void test_forward_matches_reference(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, NJ_CTX_EMU_POISON);
    assert_true(run_layernorm(ctx, 5, 37) < 1.0);
    assert_true(run_layernorm(ctx, 3, 1024) < 1.0);
    nj_context_destroy(ctx);
}

static void test_disk_reuse_and_batch(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    assert_true(run_layernorm(ctx, 8, 64) < 1.0);
    assert_true(run_layernorm(ctx, 3, 64) < 1.0); /* other batch: same kernels */
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 1);
    assert_true(st.disk_entries >= 1);
    nj_context_destroy(ctx);

    ctx = emu_context(f->dir, NJ_CTX_NO_COMPILE); /* a server process: loads from disk, never compiles */
    assert_true(run_layernorm(ctx, 11, 64) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 0);
    assert_int_equal(st.hits_disk, 1);
    nj_context_destroy(ctx);
}

/* x and y one element off their 16-byte alignment: the main kernels (vec 4) would fault (the emulator
 * checks vector alignment as a GPU does), so nj_forward runs the unaligned variant, compiled on first
 * need only. A context that never compiles loads it with the plan once the cache has it. */
static void test_misaligned_runs_unaligned_variant(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, NJ_CTX_EMU_POISON);
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_true(run_layernorm(ctx, 6, 256) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 1); /* the main kernels only */
    assert_true(run_layernorm_at(ctx, 6, 256, 1) < 1.0);
    assert_true(run_layernorm_at(ctx, 5, 256, 3) < 1.0);
    assert_true(run_layernorm(ctx, 2, 256) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 2); /* + the unaligned variant, once */
    nj_context_destroy(ctx);

    ctx = emu_context(f->dir, NJ_CTX_NO_COMPILE);
    nj_problem_desc p;
    int64_t ext[2] = {6, 256};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS),
                     NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.hits_disk, 2); /* both variants loaded by nj_plan_get */
    assert_true(run_layernorm_at(ctx, 6, 256, 1) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 0);
    assert_int_equal(st.hits_disk, 2);
    nj_context_destroy(ctx);
}

/* The channels-last GroupNorm kernels load 4 channels at a time: a shifted x/y takes their unaligned
 * variant (same tiles and workspace, a channel at a time), and a missing workspace is an error. */
static void test_channels_last_variants(void **state)
{
    fixture *f = *state;
    /* the cluster plan: one launch, staged tiles; shifted, the unaligned variant reads its tiles again */
    nj_context *cc = emu_context(f->dir, NJ_CTX_EMU_POISON | NJ_CTX_EMU_SHUFFLE);
    assert_true(run_groupnorm_nhwc_at(cc, 0) < 1.0);
    assert_true(run_groupnorm_nhwc_at(cc, 1) < 1.0);
    nj_context_destroy(cc);
    /* pipelined: one source (the zero launch and the tiles' launch), no library merge; shifted, its
       unaligned variant */
    setenv("NORMJIT_PLAN_NO_CLUSTER", "1", 1);
    nj_context *pc = emu_context(f->dir, NJ_CTX_EMU_POISON | NJ_CTX_EMU_SHUFFLE);
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_true(run_groupnorm_nhwc_at(pc, 0) < 1.0);
    assert_int_equal(nj_context_cache_stats(pc, &st), NJ_OK);
    assert_int_equal(st.compiles, 1);
    assert_true(run_groupnorm_nhwc_at(pc, 1) < 1.0);
    nj_context_destroy(pc);
    /* the three launches and their workspace */
    setenv("NORMJIT_PLAN_NO_CL_PIPE", "1", 1);
    nj_context *ctx = emu_context(f->dir, NJ_CTX_EMU_POISON | NJ_CTX_EMU_SHUFFLE);
    assert_true(run_groupnorm_nhwc_at(ctx, 0) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 2); /* the pass's source and the library's merge */
    assert_true(run_groupnorm_nhwc_at(ctx, 1) < 1.0);
    assert_true(run_groupnorm_nhwc_at(ctx, 2) < 1.0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 3);
    nj_problem_desc p;
    int64_t ext[4] = {2, 16, 96, 96};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F32, 4, ext, 4, 1, 0), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    float *x = calloc(2 * 16 * 96 * 96, 4), *y = calloc(2 * 16 * 96 * 96, 4);
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = x, .y = y};
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_NULL_POINTER);
    assert_non_null(strstr(nj_last_error(), "workspace"));
    char *work = malloc(nj_plan_workspace_size(plan, NJ_PASS_FORWARD) + 16);
    a.workspace = work + 4; /* a misaligned workspace is refused, not launched */
    a.workspace_size = nj_plan_workspace_size(plan, NJ_PASS_FORWARD);
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_BAD_ARGUMENT);
    assert_non_null(strstr(nj_last_error(), "16-byte aligned"));
    free(work), free(x), free(y);
    nj_context_destroy(ctx);
    unsetenv("NORMJIT_PLAN_NO_CLUSTER");
    unsetenv("NORMJIT_PLAN_NO_CL_PIPE");
}

/* Rows of 2^18 elements and more are split over blocks (two launches, the pieces' statistics in the
 * workspace; rows past 200 KB are streamed twice), or on sm_90 (these contexts) taken by a thread-block
 * cluster a row (one launch, the pieces' statistics in the cluster's shared memory: no workspace); a
 * shifted x takes the unaligned variant. */
static void split_rows(const char *dir, size_t ws_want)
{
    nj_context *ctx = emu_context(dir, NJ_CTX_EMU_POISON | NJ_CTX_EMU_SHUFFLE);
    assert_true(run_layernorm(ctx, 3, 1 << 18) < 1.0);
    assert_true(run_layernorm_at(ctx, 2, 1 << 18, 1) < 1.0);
    assert_true(run_layernorm(ctx, 2, 300001) < 1.0); /* odd: vec 1, a short last piece */
    assert_true(run_layernorm(ctx, 3, 100000) < 1.0); /* under 2^18, past 200 KB: a cluster of 2 on sm_90 */
    nj_problem_desc p;
    int64_t ext[2] = {3, 1 << 18};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS),
                     NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_plan_workspace_size(plan, NJ_PASS_FORWARD), ws_want);
    nj_context_destroy(ctx);
}

static void test_split_rows(void **state)
{
    fixture *f = *state;
    split_rows(f->dir, 0);
    setenv("NORMJIT_PLAN_NO_CLUSTER", "1", 1);
    /* pipelined (P.lag): 64 pieces of 512 x 4 x 2 a row, (sum, m2) each, a row's (mean, rstd) and counter */
    split_rows(f->dir, 3 * (64 * 2 + 3) * sizeof(float));
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    split_rows(f->dir, 3 * 32 * 2 * sizeof(float)); /* two launches: 32 pieces of 2^13 a row: (sum, m2) each */
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    unsetenv("NORMJIT_PLAN_NO_CLUSTER");
}

static void test_no_compile_miss_fail(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, NJ_CTX_NO_COMPILE);
    nj_problem_desc p;
    int64_t ext[2] = {4, 96};
    assert_int_equal(nj_preset_rmsnorm(&p, NJ_BF16, 2, ext, 1, NJ_FLAG_SCALE), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_ERR_NOT_CACHED);
    assert_non_null(strstr(nj_last_error(), "warmup"));
    /* asked again and again, the context keeps one failed kernel set for the signature, not one a miss */
    int before = 0, after = 0;
    for (nj_kernelset *k = ctx->sets; k; k = k->next) before++;
    for (int i = 0; i < 100; i++) assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_ERR_NOT_CACHED);
    for (nj_kernelset *k = ctx->sets; k; k = k->next) after++;
    assert_int_equal(after, before);
    assert_non_null(strstr(nj_last_error(), "warmup")); /* the detail of the latest miss */
    nj_context_destroy(ctx);
}

static void test_hot_lookup_same_plan(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    nj_problem_desc p, q;
    int64_t ext[3] = {2, 7, 256};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 3, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    memset(&q, 0x5A, sizeof q); /* garbage in unused fields must not matter */
    assert_int_equal(nj_preset_layernorm(&q, NJ_F16, 3, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    nj_plan *a, *b;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &a), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &q, NJ_PASS_FORWARD, &b), NJ_OK);
    assert_ptr_equal(a, b);
    /* The request path: a loaded plan is found again without a lock, a compile or an allocation. */
    long before = allocations;
    for (int i = 0; i < 1000; i++) assert_int_equal(nj_plan_get(ctx, &q, NJ_PASS_FORWARD, &b), NJ_OK);
    assert_int_equal(allocations - before, 0);
    assert_ptr_equal(a, b);
    before = allocations; /* the probe itself must see allocations, or the zero above proves nothing */
    void *volatile probe = malloc(16); /* volatile: gcc may drop a malloc/free pair */
    free(probe);
    assert_int_equal(allocations - before, 1);
    char text[4096];
    size_t len = 0;
    assert_int_equal(nj_plan_describe(a, text, sizeof text, &len), NJ_OK);
    assert_non_null(strstr(text, "launch"));
    assert_int_equal(nj_plan_describe(a, text, 4, &len), NJ_ERR_BAD_ARGUMENT);
    assert_true(len > 4);
    nj_context_destroy(ctx);
}

/* A thread's first call: the same forward problem for every thread (problem < 0), or the backward of
 * LayerNorm problem number `problem` (each thread its own). */
typedef struct race_arg {
    nj_context *ctx;
    int problem;
    nj_plan *plan;
    nj_status s;
} race_arg;

static void *race_body(void *v)
{
    race_arg *r = v;
    nj_problem_desc p;
    char text[64];
    snprintf(text, sizeof text, "layernorm f32 *x%d flags=scale%s", r->problem < 0 ? 333 : 64 + 32 * r->problem,
             r->problem < 0 ? "" : ",bias");
    r->s = nj_problem_from_text(text, 16, &p);
    if (r->s == NJ_OK) r->s = nj_plan_get(r->ctx, &p, r->problem < 0 ? NJ_PASS_FORWARD : NJ_PASS_BACKWARD, &r->plan);
    return NULL;
}

/* Eight threads at once, thread i with problem i (or all with the shared one); every call succeeds. */
static void race(nj_context *ctx, bool shared, race_arg r[8])
{
    pthread_t t[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (race_arg){ctx, shared ? -1 : i, NULL, NJ_ERR_INTERNAL};
        assert_int_equal(pthread_create(&t[i], NULL, race_body, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) assert_int_equal(r[i].s, NJ_OK);
}

static void test_single_flight_threads(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    race_arg r[8];
    race(ctx, true, r);
    for (int i = 0; i < 8; i++) assert_ptr_equal(r[i].plan, r[0].plan);
    nj_cache_stats st = {.struct_size = sizeof st};
    nj_context_cache_stats(ctx, &st);
    assert_int_equal(st.compiles, 1);
    nj_context_destroy(ctx);
}

static void test_argument_checks_fail(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    nj_problem_desc p;
    int64_t ext[2] = {2, 32};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    float x[64], y[64], g[32], b[32], r[64];
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = x, .gamma = g, .beta = b, .y = y};
    a.gamma = NULL;
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_NULL_POINTER);
    assert_non_null(strstr(nj_last_error(), "gamma"));
    a.gamma = g;
    a.residual = r;
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_BAD_ARGUMENT);
    a.residual = NULL;
    a.eps = -1.0f;
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_BAD_ARGUMENT);
    a.eps = 1e-5f;
    a.struct_size = 3;
    assert_int_equal(nj_forward(plan, &a), NJ_ERR_BAD_STRUCT_SIZE);
    p.struct_size = 7;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_ERR_BAD_STRUCT_SIZE);
    assert_int_equal(nj_plan_get(ctx, NULL, NJ_PASS_FORWARD, &plan), NJ_ERR_NULL_POINTER);
    nj_context_destroy(ctx);
}

static void test_zero_size_launches_nothing(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    nj_problem_desc p;
    int64_t ext[2] = {0, 128};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f};
    assert_int_equal(nj_forward(plan, &a), NJ_OK);
    /* whatever an empty tensor's pointers hold (here misaligned), no variant is compiled for it */
    a.x = (const void *)(uintptr_t)0x1003;
    a.y = (void *)(uintptr_t)0x2005;
    a.gamma = (const void *)(uintptr_t)0x3007;
    assert_int_equal(nj_forward(plan, &a), NJ_OK);
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 1);
    nj_context_destroy(ctx);
}

static void test_backend_selection_fail(void **state)
{
    (void)state;
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_CUDA;
    nj_context *ctx = (nj_context *)1;
    nj_status s = nj_context_create(&o, &ctx); /* no libcuda.so.1 on these machines */
    assert_true(s == NJ_ERR_NO_DRIVER || s == NJ_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_true(strlen(nj_last_error()) > 0);
    o.backend = NJ_BACKEND_COMPILE_ONLY;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT);
    o.struct_size = 1;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_ERR_BAD_STRUCT_SIZE);
    nj_context_destroy(NULL);
}

/* The backward of a block with the fused residual add is the backward without it: one compile. */
static void test_backward_shared_across_forward_flags(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    nj_problem_desc plain, fused;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 *x96 flags=scale", 4, &plain), NJ_OK);
    assert_int_equal(nj_problem_from_text("rmsnorm f32 *x96 flags=scale,residual,resout", 4, &fused), NJ_OK);
    int32_t compiled = 0, cached = 0;
    assert_int_equal(nj_context_warm(ctx, &plain, NJ_PASS_FORWARD | NJ_PASS_BACKWARD | NJ_WARM_MAIN, &compiled, &cached),
                     NJ_OK);
    assert_int_equal(compiled, 3); /* forward, backward, the library module of dgamma's column sum */
    compiled = cached = 0;
    assert_int_equal(nj_context_warm(ctx, &fused, NJ_PASS_FORWARD | NJ_PASS_BACKWARD | NJ_WARM_MAIN, &compiled, &cached),
                     NJ_OK);
    assert_int_equal(compiled, 1); /* its forward */
    assert_int_equal(cached, 1);   /* the plain problem's backward */
    nj_context_destroy(ctx);
}

static int32_t warm_bwd(nj_context *ctx, const char *text)
{
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(text, 4, &p), NJ_OK);
    int32_t compiled = 0, cached = 0;
    nj_status s = nj_context_warm(ctx, &p, NJ_PASS_BACKWARD | NJ_WARM_MAIN, &compiled, &cached);
    if (s != NJ_OK) fail_msg("warm %s: %s", text, nj_last_error());
    return compiled;
}

/* dgamma's column sum is one library module per gamma dtype, the merge of split walks one module:
 * compiled with the first pass that launches it, then shared by every other one, in this process and
 * (through the cache) the next. */
static void test_library_module_shared(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    assert_int_equal(warm_bwd(ctx, "rmsnorm f32 *x96 flags=scale"), 2); /* its own module and the library's */
    assert_int_equal(warm_bwd(ctx, "layernorm f32 *x160 flags=scale,bias"), 1);
    /* channels-last GroupNorm of images in several tiles (past NJ_CL_FUSE, past the x and dy a cluster
       of 8 SMs stages: one launch on sm_90, and past the 24 MB of x, dy and dx a pipelined launch merges
       itself) also launches the library's merge of its tiles: one module for all */
    assert_int_equal(warm_bwd(ctx, "groupnorm f32 nhwc *x64x384x384 groups=8 flags=scale,bias"), 2);
    assert_int_equal(warm_bwd(ctx, "groupnorm f16 nhwc *x32x512x512 groups=4 param=f32"), 1);
    assert_int_equal(warm_bwd(ctx, "rmsnorm bf16 *x96 flags=scale param=bf16"), 2); /* another gamma dtype */
    assert_int_equal(warm_bwd(ctx, "rmsnorm f32 *x96"), 1); /* no dgamma: no library module */
    nj_context_destroy(ctx);
    /* a server process loads both from disk and compiles nothing */
    ctx = emu_context(f->dir, NJ_CTX_NO_COMPILE);
    nj_problem_desc p;
    nj_plan *plan;
    assert_int_equal(nj_problem_from_text("layernorm f32 *x160 flags=scale,bias", 4, &p), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_BACKWARD, &plan), NJ_OK);
    nj_cache_stats st = {.struct_size = sizeof st};
    nj_context_cache_stats(ctx, &st);
    assert_int_equal(st.compiles, 0);
    assert_int_equal(st.hits_disk, 2);
    nj_context_destroy(ctx);
}

/* Eight first backward calls of eight problems at once: the library module they share is built once. */
static void test_library_single_flight_threads(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    race_arg r[8];
    race(ctx, false, r);
    nj_cache_stats st = {.struct_size = sizeof st};
    nj_context_cache_stats(ctx, &st);
    assert_int_equal(st.compiles, 8 + 1);
    nj_context_destroy(ctx);
}

/* A context that never compiles and finds a pass's own entry but not the library module it launches:
 * NJ_ERR_NOT_CACHED naming the library, and the plan is not half loaded. */
static void test_no_compile_missing_library_fail(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    static const char text[] = "rmsnorm f32 *x96 flags=scale";
    assert_int_equal(warm_bwd(ctx, text), 2);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(text, 4, &p), NJ_OK);
    nj_pass_info pi;
    assert_int_equal(nj_context_explain(ctx, &p, NJ_PASS_BACKWARD, 0, &pi), NJ_OK);
    char hash[33], path[600];
    assert_int_equal(sscanf(pi.libraries, "colsum param=f32 %32s cached\n", hash), 1);
    nj_pass_info_free(&pi);
    nj_context_destroy(ctx);
    snprintf(path, sizeof path, "%s/v%d/%.2s/%s.so", f->dir, NJ_CACHE_FORMAT, hash, hash);
    assert_int_equal(unlink(path), 0);
    ctx = emu_context(f->dir, NJ_CTX_NO_COMPILE);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_BACKWARD, &plan), NJ_ERR_NOT_CACHED);
    assert_non_null(strstr(nj_last_error(), "library kernel colsum"));
    assert_non_null(strstr(nj_last_error(), "warmup"));
    /* asked again, it fails the same way (nothing was published half built) */
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_BACKWARD, &plan), NJ_ERR_NOT_CACHED);
    nj_context_destroy(ctx);
}

static void test_unsafe_root_falls_back_to_memory(void **state)
{
    fixture *f = *state;
    char root[400];
    snprintf(root, sizeof root, "%s/open", f->dir);
    assert_int_equal(mkdir(root, 0777), 0);
    assert_int_equal(chmod(root, 0777), 0); /* writable by others: refused */
    nj_context *ctx = emu_context(root, 0);
    assert_string_equal(nj_context_cache_dir(ctx), "");
    assert_true(run_layernorm(ctx, 2, 48) < 1.0);
    nj_context_destroy(ctx);
}

static void test_record_manifest(void **state)
{
    fixture *f = *state;
    char rec[400], line[1024];
    snprintf(rec, sizeof rec, "%s/seen.txt", f->dir);
    setenv("NORMJIT_RECORD", rec, 1);
    nj_context *ctx = emu_context(f->dir, 0);
    unsetenv("NORMJIT_RECORD");
    assert_true(run_layernorm(ctx, 2, 40) < 1.0);
    nj_context_destroy(ctx);
    FILE *fp = fopen(rec, "r");
    assert_non_null(fp);
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    nj_problem_desc back;
    line[strcspn(line, "\n")] = 0;
    assert_int_equal(nj_problem_from_text(line, 2, &back), NJ_OK);
    assert_int_equal(back.x.extents[1], 40);
}

/* A pass is planned once, with the plan object: the kernel set it loads, the workspace size, describe
 * and explain all read that plan (the pass's view of the problem, not the full one: the residual flags
 * below are the forward's alone). */
static void test_one_plan_per_pass(void **state)
{
    fixture *f = *state;
    nj_context *ctx = emu_context(f->dir, 0);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("layernorm f32 *x2048 flags=scale,bias,residual,resout", 6, &p), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, &plan), NJ_OK);
    char text[8192];
    size_t len = 0;
    assert_int_equal(nj_plan_describe(plan, text, sizeof text, &len), NJ_OK);
    for (int i = 0; i < 2; i++) {
        nj_pass pass = i ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD;
        const nj_pass_plan *pl = nj_plan_pass_plan(plan, pass);
        assert_int_equal(pl->status, NJ_OK);
        nj_kernelset *ks = atomic_load(&plan->pass[i][NJ_VARIANT_MAIN]);
        assert_non_null(ks);
        assert_memory_equal(&ks->params, &pl->main, sizeof ks->params);
        assert_int_equal(nj_plan_workspace_size(plan, pass), nj_plan_params_workspace(&ks->params, plan->rows));
        nj_pass_info pi;
        assert_int_equal(nj_context_explain(ctx, &p, pass, 0, &pi), NJ_OK);
        assert_string_equal(pi.hash, ks->hash);
        char line[4096];
        snprintf(line, sizeof line, "%s %s [%s]\n", i ? "bwd" : "fwd", pi.plan_text, ks->hash);
        assert_non_null(strstr(text, line));
        nj_pass_info_free(&pi);
    }
    assert_true(nj_plan_workspace_size(plan, NJ_PASS_BACKWARD) > 0); /* dgamma's slots: the check reads something */
    assert_int_equal(nj_plan_workspace_size(plan, (nj_pass)3), 0);
    nj_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forward_matches_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_reuse_and_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misaligned_runs_unaligned_variant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channels_last_variants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_compile_miss_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hot_lookup_same_plan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_flight_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_argument_checks_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_size_launches_nothing, setup, teardown),
        cmocka_unit_test(test_backend_selection_fail),
        cmocka_unit_test_setup_teardown(test_unsafe_root_falls_back_to_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_manifest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backward_shared_across_forward_flags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_module_shared, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_single_flight_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_compile_missing_library_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_plan_per_pass, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
