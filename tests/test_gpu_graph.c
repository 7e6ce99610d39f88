/* CUDA graph capture of normjit launches on a real GPU (the launch contract of README "Serving"): a
 * plan's forward and backward are captured on a stream in the global capture mode, where any call that is
 * unsafe during capture (an allocation, a synchronizing copy, a module load) invalidates the capture;
 * the graph is instantiated and replayed with new input between replays, and each replay's outputs equal
 * a direct launch's, bit for bit. A second test captures a plan of an async context while it runs the
 * generic kernels, lets the plan switch to its own, and replays: the graph keeps the generic launches it
 * captured, which stay valid (the generic sets live as long as the context).
 * Without a driver or a device the suite exits 77 (ctest: skipped), saying why; gpu-check runs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h" /* nj_serve_hold: the pool waits while the plan runs generic */
#include "nj_testutil.h"

/* The few Driver API entry points the test calls itself, with the types they need (no cuda.h). */
typedef int CUresult;
typedef void *CUstream, *CUgraph, *CUgraphExec, *CUcontext;
static struct {
    void *lib;
    CUresult (*init)(unsigned);
    CUresult (*device_get)(int *, int);
    CUresult (*primary_retain)(CUcontext *, int);
    CUresult (*primary_release)(int);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*begin_capture)(CUstream, int);
    CUresult (*end_capture)(CUstream, CUgraph *);
    CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
    CUresult (*exec_destroy)(CUgraphExec);
    CUresult (*graph_destroy)(CUgraph);
} cu;

enum { CAPTURE_MODE_GLOBAL = 0, STREAM_NON_BLOCKING = 1 };

static char dir[512];
static char why[256];
static int cu_dev;
static CUcontext cu_ctx;
static CUstream stream;

static int load_driver(void)
{
    cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) return snprintf(why, sizeof why, "no libcuda.so.1"), 0;
#define SYM(f, n) \
    if (!(*(void **)&cu.f = dlsym(cu.lib, n))) return snprintf(why, sizeof why, "libcuda lacks %s", n), 0
    SYM(init, "cuInit");
    SYM(device_get, "cuDeviceGet");
    SYM(primary_retain, "cuDevicePrimaryCtxRetain");
    SYM(primary_release, "cuDevicePrimaryCtxRelease_v2");
    SYM(ctx_push, "cuCtxPushCurrent_v2");
    SYM(ctx_pop, "cuCtxPopCurrent_v2");
    SYM(ctx_sync, "cuCtxSynchronize");
    SYM(stream_create, "cuStreamCreate");
    SYM(stream_destroy, "cuStreamDestroy_v2");
    SYM(stream_sync, "cuStreamSynchronize");
    SYM(begin_capture, "cuStreamBeginCapture_v2");
    SYM(end_capture, "cuStreamEndCapture");
    SYM(instantiate, "cuGraphInstantiateWithFlags");
    SYM(graph_launch, "cuGraphLaunch");
    SYM(exec_destroy, "cuGraphExecDestroy");
    SYM(graph_destroy, "cuGraphDestroy");
#undef SYM
    int r = cu.init(0);
    if (r == 0) r = cu.device_get(&cu_dev, 0);
    if (r != 0) return snprintf(why, sizeof why, "cuInit/cuDeviceGet: CUresult %d", r), 0;
    /* the primary context: the one normjit's cuda backend retains for device 0 */
    if (cu.primary_retain(&cu_ctx, cu_dev) || cu.ctx_push(cu_ctx) || cu.stream_create(&stream, STREAM_NON_BLOCKING))
        return snprintf(why, sizeof why, "primary context or stream"), 0;
    return 1;
}

static int group_setup(void **state)
{
    (void)state;
    return nj_tu_make_temp_dir("gpu_graph", dir, sizeof dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    if (cu.lib) {
        cu.stream_destroy(stream);
        CUcontext c;
        cu.ctx_pop(&c);
        cu.primary_release(cu_dev);
    }
    nj_tu_remove_tree(dir);
    return 0;
}

static nj_context *need_gpu(uint32_t flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_CUDA;
    o.flags = flags;
    o.cache_dir = dir;
    nj_context *ctx = NULL;
    nj_status s = nj_context_create(&o, &ctx);
    if (s != NJ_OK) fail_msg("context: %s: %s", nj_status_name(s), nj_last_error());
    return ctx;
}

/* LayerNorm f32 over rows of 768 with scale, bias and saved statistics: forward and backward. */
enum { ROWS = 96, COLS = 768, N = ROWS * COLS };
typedef struct {
    nj_context *ctx;
    nj_plan *plan;
    float *x, *gamma, *beta, *y, *mean, *rstd, *dy, *dx, *dgamma, *dbeta;
    void *ws;
    size_t ws_size;
} bufs;
#define OUTPUTS(b) {(b)->y, (b)->mean, (b)->rstd, (b)->dx, (b)->dgamma, (b)->dbeta}
static const size_t out_count[6] = {N, ROWS, ROWS, N, COLS, COLS};

static void *dev(nj_context *ctx, size_t bytes)
{
    void *p = NULL;
    assert_int_equal(nj_mem_alloc(ctx, bytes, &p), NJ_OK);
    return p;
}

static void fill(nj_context *ctx, float *d, size_t n, unsigned seed, float offset)
{
    float *h = malloc(n * sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = offset + (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    assert_int_equal(nj_mem_upload(ctx, d, h, n * sizeof *h), NJ_OK);
    /* a pageable copy may return before its DMA ends, and the test's stream does not wait for it */
    assert_int_equal(cu.ctx_sync(), 0);
    free(h);
}

static void setup_bufs(bufs *b, nj_context *ctx)
{
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("layernorm f32 96x768 flags=scale,bias,stats", 1, &p), NJ_OK);
    nj_status s = nj_plan_get(ctx, &p, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, &b->plan);
    if (s != NJ_OK) fail_msg("plan: %s: %s", nj_status_name(s), nj_last_error());
    float **all[] = {&b->x, &b->y, &b->dy, &b->dx};
    for (int i = 0; i < 4; i++) *all[i] = dev(ctx, N * sizeof(float));
    float **small[] = {&b->gamma, &b->beta, &b->dgamma, &b->dbeta, &b->mean, &b->rstd};
    for (int i = 0; i < 6; i++) *small[i] = dev(ctx, (i < 4 ? COLS : ROWS) * sizeof(float));
    size_t wf = nj_plan_workspace_size(b->plan, NJ_PASS_FORWARD), wb = nj_plan_workspace_size(b->plan, NJ_PASS_BACKWARD);
    b->ws_size = wf > wb ? wf : wb;
    b->ws = b->ws_size ? dev(ctx, b->ws_size) : NULL;
    fill(ctx, b->gamma, COLS, 7, 1.0f);
    fill(ctx, b->beta, COLS, 8, 0.0f);
    fill(ctx, b->dy, N, 9, 0.0f);
}

static void free_bufs(bufs *b)
{
    float *all[] = {b->x, b->y, b->dy, b->dx, b->gamma, b->beta, b->dgamma, b->dbeta, b->mean, b->rstd};
    for (int i = 0; i < 10; i++) nj_mem_free(b->ctx, all[i]);
    nj_mem_free(b->ctx, b->ws);
}

/* Enqueues forward then backward on the test's stream; no synchronization. */
static void enqueue(bufs *b)
{
    nj_forward_args f = {.struct_size = sizeof f, .eps = 1e-5f, .x = b->x, .gamma = b->gamma, .beta = b->beta,
                         .y = b->y, .mean = b->mean, .rstd = b->rstd, .workspace = b->ws, .stream = stream,
                         .workspace_size = b->ws_size};
    nj_status s = nj_forward(b->plan, &f);
    if (s != NJ_OK) fail_msg("forward: %s: %s", nj_status_name(s), nj_last_error());
    nj_backward_args g = {.struct_size = sizeof g, .dy = b->dy, .x = b->x, .gamma = b->gamma, .beta = b->beta,
                          .mean = b->mean, .rstd = b->rstd, .dx = b->dx, .dgamma = b->dgamma, .dbeta = b->dbeta,
                          .workspace = b->ws, .stream = stream, .workspace_size = b->ws_size, .eps = 1e-5f};
    s = nj_backward(b->plan, &g);
    if (s != NJ_OK) fail_msg("backward: %s: %s", nj_status_name(s), nj_last_error());
}

/* The six outputs, downloaded one after another into one host array; the device copies are then zeroed
 * so that a replay that wrote nothing cannot pass. */
static float *take_outputs(bufs *b)
{
    assert_int_equal(cu.stream_sync(stream), 0);
    float *outs[6] = OUTPUTS(b);
    size_t total = 0;
    for (int i = 0; i < 6; i++) total += out_count[i];
    float *h = calloc(total, sizeof *h), *zero = calloc(N, sizeof *zero);
    assert_true(h && zero);
    for (size_t i = 0, at = 0; i < 6; at += out_count[i], i++) {
        assert_int_equal(nj_mem_download(b->ctx, h + at, outs[i], out_count[i] * sizeof *h), NJ_OK);
        assert_int_equal(nj_mem_upload(b->ctx, outs[i], zero, out_count[i] * sizeof *h), NJ_OK);
    }
    free(zero);
    assert_int_equal(cu.ctx_sync(), 0);
    return h;
}

static size_t outputs_total(void) { return 2 * (size_t)N + 2 * ROWS + 2 * COLS; }

static CUgraphExec capture(bufs *b, CUgraph *graph)
{
    assert_int_equal(cu.begin_capture(stream, CAPTURE_MODE_GLOBAL), 0);
    enqueue(b);
    int r = cu.end_capture(stream, graph);
    if (r != 0) fail_msg("cuStreamEndCapture: CUresult %d (a call in the launch path broke the capture)", r);
    CUgraphExec exec = NULL;
    assert_int_equal(cu.instantiate(&exec, *graph, 0), 0);
    return exec;
}

static void test_capture_replay(void **state)
{
    (void)state;
    nj_context *ctx = need_gpu(0);
    bufs b;
    setup_bufs(&b, ctx);
    CUgraph graph;
    fill(ctx, b.x, N, 1, 3.0f);
    CUgraphExec exec = capture(&b, &graph); /* captured, not run: the outputs stay as they were */
    for (int round = 0; round < 2; round++) {
        fill(ctx, b.x, N, 100u + (unsigned)round, round ? 1e4f : 3.0f);
        enqueue(&b);
        float *direct = take_outputs(&b);
        assert_int_equal(cu.graph_launch(exec, stream), 0);
        float *replay = take_outputs(&b);
        if (memcmp(direct, replay, outputs_total() * sizeof(float)) != 0)
            fail_msg("round %d: the replay's outputs differ from a direct launch's", round);
        free(direct);
        free(replay);
    }
    cu.exec_destroy(exec);
    cu.graph_destroy(graph);
    free_bufs(&b);
    nj_context_destroy(ctx);
}

static void test_capture_generic_then_switch(void **state)
{
    (void)state;
    nj_context *ctx = need_gpu(NJ_CTX_ASYNC_COMPILE);
    nj_serve_hold(ctx, 1); /* the plan stays on the generic kernels until the capture is made */
    bufs b;
    setup_bufs(&b, ctx);
    nj_serve_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_serve_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.generic_passes, 2);
    CUgraph graph;
    CUgraphExec exec = capture(&b, &graph);
    nj_serve_hold(ctx, 0);
    assert_int_equal(nj_context_wait_background(ctx), NJ_OK);
    assert_int_equal(nj_context_serve_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.switches, 2);
    fill(ctx, b.x, N, 5, 2.0f);
    enqueue(&b); /* the plan's own kernels now */
    float *own = take_outputs(&b);
    assert_int_equal(cu.graph_launch(exec, stream), 0); /* the generic kernels it captured */
    float *gen = take_outputs(&b);
    /* two summation orders: equal within float32 rounding of unit-scale outputs */
    double worst = 0;
    for (size_t i = 0; i < outputs_total(); i++) {
        double e = fabs((double)own[i] - gen[i]) / (1.0 + fabs((double)own[i]));
        if (!(e <= worst)) worst = e; /* NaN counts as worst */
    }
    if (!(worst < 1e-4)) fail_msg("generic replay vs own kernels: worst relative difference %g", worst);
    free(own);
    free(gen);
    cu.exec_destroy(exec);
    cu.graph_destroy(graph);
    free_bufs(&b);
    nj_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_capture_replay),
                                       cmocka_unit_test(test_capture_generic_then_switch)};
    /* Without a driver or device the suite is skipped and says so to ctest (exit 77), never passed. */
    if (!load_driver()) {
        fprintf(stderr, "SKIP: no usable CUDA driver/device (%s)\n", why);
        return 77;
    }
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
