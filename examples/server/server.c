/* A normjit embedding as an inference server would do it: warm at start (the generic modules and the
 * shapes it knows), then serve from an async + no-compile context: a request never compiles; a shape it
 * has never seen runs the generic kernels at once while its own compile in the background. Prints the
 * host-path latency (nj_plan_get + nj_forward; under the emulator the kernels run inside nj_forward) of
 * the first call of an unseen shape, the time until its own kernels take over, and p50/p99 over a loop
 * of requests of varying batch. Usage: nj_server [cache_dir] (NORMJIT_BACKEND picks the backend). */
#include "normjit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(e)                                                                                    \
    do {                                                                                           \
        nj_status s_ = (e);                                                                        \
        if (s_ != NJ_OK) {                                                                         \
            fprintf(stderr, "%s: %s: %s\n", #e, nj_status_name(s_), nj_last_error());              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* The library is silent unless given a log function: a server wants its warnings (a background build
 * that failed leaves a shape on the generic kernels), so it prints them. */
static void print_log(void *user, nj_log_level level, const char *message)
{
    (void)user;
    fprintf(stderr, "normjit %s: %s\n", level <= NJ_LOG_ERROR ? "error" : "warning", message);
}

/* One request: plan (a table hit after the first) and forward, timed. */
static double request(nj_context *ctx, int64_t batch, int64_t hidden, float *x, float *y, float *g, float *b)
{
    nj_problem_desc p;
    int64_t ext[2] = {batch, hidden};
    CHECK(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    p.param_dtype = NJ_F32;
    double t0 = now_ms();
    nj_plan *plan;
    CHECK(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan));
    nj_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.eps = 1e-5f;
    a.x = x;
    a.y = y;
    a.gamma = g;
    a.beta = b;
    CHECK(nj_forward(plan, &a));
    CHECK(nj_synchronize(ctx, NULL));
    return now_ms() - t0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : NULL;
    enum { MAXB = 16, HID = 512, N = 200 };
    nj_context_options o;
    nj_context_options_init(&o);
    o.cache_dir = dir;
    nj_context *warm;
    CHECK(nj_context_create(&o, &warm));
    nj_problem_desc p;
    int64_t ext[2] = {8, 256};
    CHECK(nj_preset_layernorm(&p, NJ_F32, 2, ext, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    p.param_dtype = NJ_F32;
    /* the known shape, and (by default) the generic modules of its dtypes, verified as a request sees them */
    nj_warmup_options wo;
    nj_warmup_options_init(&wo);
    wo.passes = NJ_PASS_FORWARD;
    wo.flags = NJ_WARMUP_VERIFY;
    CHECK(nj_warmup(warm, &p, 1, &wo, NULL));
    nj_context_destroy(warm);

    o.flags = NJ_CTX_ASYNC_COMPILE | NJ_CTX_NO_COMPILE;
    o.max_background_compiles = 1;
    o.log_level = NJ_LOG_WARN;
    o.log_fn = print_log;
    nj_context *ctx;
    CHECK(nj_context_create(&o, &ctx));
    float *x, *y, *g, *b;
    CHECK(nj_mem_alloc(ctx, sizeof(float) * MAXB * HID, (void **)&x));
    CHECK(nj_mem_alloc(ctx, sizeof(float) * MAXB * HID, (void **)&y));
    CHECK(nj_mem_alloc(ctx, sizeof(float) * HID, (void **)&g));
    CHECK(nj_mem_alloc(ctx, sizeof(float) * HID, (void **)&b));
    float *h = malloc(sizeof(float) * MAXB * HID);
    for (int i = 0; i < MAXB * HID; i++) h[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    CHECK(nj_mem_upload(ctx, x, h, sizeof(float) * MAXB * HID));
    CHECK(nj_mem_upload(ctx, g, h, sizeof(float) * HID));
    CHECK(nj_mem_upload(ctx, b, h + HID, sizeof(float) * HID));

    /* the unseen shape: hidden 512 was never warmed */
    double t_first0 = now_ms();
    double first = request(ctx, 4, HID, x, y, g, b);
    nj_serve_stats st = {.struct_size = sizeof st};
    double lat[N];
    double switched = -1;
    for (int i = 0; i < N; i++) {
        int64_t batch = 1 + (i * 5) % MAXB;
        lat[i] = request(ctx, batch, (i % 2) ? HID : 256, x, y, g, b);
        CHECK(nj_context_serve_stats(ctx, &st));
        if (switched < 0 && st.switches > 0) switched = now_ms() - t_first0;
    }
    CHECK(nj_context_wait_background(ctx));
    if (switched < 0) switched = now_ms() - t_first0; /* done while waiting */
    CHECK(nj_context_serve_stats(ctx, &st));
    qsort(lat, N, sizeof lat[0], cmp);
    printf("first call of an unseen shape: %.3f ms (generic kernels)\n", first);
    printf("own kernels took over after: %.1f ms\n", switched);
    printf("%d requests: p50 %.3f ms, p99 %.3f ms\n", N, lat[N / 2], lat[N * 99 / 100]);
    printf("generic launches %llu, background compiles %llu, switches %llu, failures %llu\n",
           (unsigned long long)st.generic_launches, (unsigned long long)st.background_compiles,
           (unsigned long long)st.switches, (unsigned long long)st.background_failures);
    free(h);
    nj_mem_free(ctx, x);
    nj_mem_free(ctx, y);
    nj_mem_free(ctx, g);
    nj_mem_free(ctx, b);
    nj_context_destroy(ctx);
    return st.background_failures != 0;
}
