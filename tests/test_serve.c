/* Serving without compiling on the request path (src/async.c): a no-compile context falls back to the
 * cached generic kernels; an async context answers at once on the generic kernels, builds the plan's own
 * in the background and switches to them; the options and counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "nj_testutil.h"
#include "check_lib.h"

static char dir[512];

static nj_context *emu(uint32_t flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.flags = flags;
    o.cache_dir = dir;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    return ctx;
}

static int check_fwd(nj_context *ctx, const char *line)
{
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(line, 3, &p), NJ_OK);
    njt_check_options o;
    njt_check_options_init(&o);
    o.passes = NJ_PASS_FORWARD;
    njt_check_report rep;
    memset(&rep, 0, sizeof rep);
    nj_status s = njt_check_problem(ctx, &p, &o, &rep);
    if (s != NJ_OK) fail_msg("%s: %s: %s", line, nj_status_name(s), nj_last_error());
    return rep.pass;
}

static nj_serve_stats stats(nj_context *ctx)
{
    nj_serve_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_serve_stats(ctx, &st), NJ_OK);
    return st;
}

static void test_no_compile_fallback(void **state)
{
    (void)state;
    nj_context *warm = emu(0);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("layernorm f32 4x40 flags=scale,bias", 1, &p), NJ_OK);
    assert_int_equal(nj_context_warm_generic(warm, &p, NJ_PASS_FORWARD, NULL), NJ_OK);
    nj_context_destroy(warm);
    nj_context *ctx = emu(NJ_CTX_NO_COMPILE);
    assert_true(check_fwd(ctx, "layernorm f32 5x33 flags=scale,bias act=silu")); /* never warmed */
    nj_serve_stats st = stats(ctx);
    assert_int_equal(st.generic_passes, 1);
    assert_true(st.generic_launches >= 1);
    assert_int_equal(st.background_jobs, 0);
    nj_cache_stats cs = {.struct_size = sizeof cs};
    assert_int_equal(nj_context_cache_stats(ctx, &cs), NJ_OK);
    assert_int_equal(cs.compiles, 0);
    /* a dtype whose generic module is not cached still fails as before */
    nj_plan *plan;
    assert_int_equal(nj_problem_from_text("layernorm bf16 5x33 flags=scale", 3, &p), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_ERR_NOT_CACHED);
    nj_context_destroy(ctx);
}

static void test_async_switch(void **state)
{
    (void)state;
    nj_context *ctx = emu(NJ_CTX_ASYNC_COMPILE | NJ_CTX_NO_COMPILE);
    nj_serve_hold(ctx, 1); /* the pool waits: the first calls run generic, deterministically */
    const char *line = "rmsnorm f32 3x48 flags=scale";
    assert_true(check_fwd(ctx, line));
    nj_serve_stats st = stats(ctx);
    assert_int_equal(st.generic_passes, 1);
    assert_int_equal(st.background_pending, 1);
    uint64_t launches = st.generic_launches;
    assert_true(launches >= 1);
    assert_int_equal(nj_context_wait_background(ctx), NJ_OK);
    st = stats(ctx);
    assert_int_equal(st.background_jobs, 1);
    assert_int_equal(st.background_failures, 0);
    assert_int_equal(st.switches, 1);
    assert_int_equal(st.background_pending, 0);
    assert_true(check_fwd(ctx, line)); /* now the plan's own kernels */
    assert_int_equal(stats(ctx).generic_launches, launches);
    nj_context_destroy(ctx);
}

static void plan_fwd(nj_context *ctx, const char *line)
{
    nj_problem_desc p;
    nj_plan *plan;
    assert_int_equal(nj_problem_from_text(line, 3, &p), NJ_OK);
    nj_status s = nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan);
    if (s != NJ_OK) fail_msg("%s: %s: %s", line, nj_status_name(s), nj_last_error());
}

/* Destroying a context with background compiles queued and running finishes them: a later context
 * that never compiles finds every pass's own kernels on disk. (ASan's leak check covers "leaks
 * nothing": CI runs this file under it, and under TSan.) */
static void test_shutdown_in_flight(void **state)
{
    (void)state;
    static const char *const lines[] = {"layernorm f32 7x56 flags=scale", "rmsnorm f32 9x20",
                                        "layernorm f32 4x88 flags=scale,bias"};
    nj_context *ctx = emu(NJ_CTX_ASYNC_COMPILE | NJ_CTX_NO_COMPILE);
    nj_serve_hold(ctx, 1);
    for (int i = 0; i < 3; i++) plan_fwd(ctx, lines[i]);
    nj_serve_stats st = stats(ctx);
    assert_int_equal(st.generic_passes, 3);
    assert_int_equal(st.background_pending, 3); /* none of them was on disk */
    nj_serve_hold(ctx, 0); /* the pool starts; destroy meets compiles running and queued */
    nj_context_destroy(ctx);

    /* (its plans may still go generic for the unaligned variant, which nothing compiled: not launched) */
    nj_context *cold = emu(NJ_CTX_NO_COMPILE);
    for (int i = 0; i < 3; i++) assert_true(check_fwd(cold, lines[i]));
    assert_int_equal(stats(cold).generic_launches, 0);
    nj_cache_stats cs = {.struct_size = sizeof cs};
    assert_int_equal(nj_context_cache_stats(cold, &cs), NJ_OK);
    assert_int_equal(cs.compiles, 0);
    nj_context_destroy(cold);
}

/* Requests from several threads on one async context. cmocka's asserts are for the main thread: the
 * workers count failures and keep the first message. */
enum { REQ_THREADS = 4, REQ_CALLS = 6, REQ_LINES = 3 };
static const char *const req_lines[REQ_LINES] = {"layernorm f32 6x40 flags=scale,bias", "rmsnorm f16 5x24 flags=scale",
                                                 "layernorm bf16 3x72 flags=scale,bias act=silu"};
typedef struct {
    nj_context *ctx;
    int first, bad;
    char why[256];
} req_arg;

static void *req_thread(void *arg)
{
    req_arg *a = arg;
    for (int i = 0; i < REQ_CALLS; i++) {
        const char *line = req_lines[(a->first + i) % REQ_LINES];
        nj_problem_desc p;
        njt_check_options o;
        njt_check_options_init(&o);
        o.passes = NJ_PASS_FORWARD;
        njt_check_report rep;
        memset(&rep, 0, sizeof rep);
        nj_status s = nj_problem_from_text(line, 3, &p);
        if (s == NJ_OK) s = njt_check_problem(a->ctx, &p, &o, &rep);
        if (s == NJ_OK && rep.pass) continue;
        if (!a->bad++) snprintf(a->why, sizeof a->why, "%s: %s %s", line, nj_status_name(s), nj_last_error());
    }
    return NULL;
}

/* Each unseen pass goes generic exactly once however many threads ask (the pool is held, so no
 * thread can find the plan's own kernels yet), every answer is right on the generic kernels and again
 * after the switch, and each pass switches once. */
static void test_concurrent_requests(void **state)
{
    (void)state;
    nj_context *warm = emu(0);
    for (int i = 0; i < REQ_LINES; i++) {
        nj_problem_desc p;
        assert_int_equal(nj_problem_from_text(req_lines[i], 3, &p), NJ_OK);
        assert_int_equal(nj_context_warm_generic(warm, &p, NJ_PASS_FORWARD, NULL), NJ_OK);
    }
    nj_context_destroy(warm);
    nj_context *ctx = emu(NJ_CTX_ASYNC_COMPILE | NJ_CTX_NO_COMPILE);
    nj_serve_hold(ctx, 1);
    for (int round = 0; round < 2; round++) {
        pthread_t t[REQ_THREADS];
        req_arg a[REQ_THREADS];
        for (int i = 0; i < REQ_THREADS; i++) {
            a[i] = (req_arg){.ctx = ctx, .first = i};
            assert_int_equal(pthread_create(&t[i], NULL, req_thread, &a[i]), 0);
        }
        for (int i = 0; i < REQ_THREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < REQ_THREADS; i++)
            if (a[i].bad) fail_msg("round %d, thread %d: %d bad answers; %s", round, i, a[i].bad, a[i].why);
        if (round == 0) {
            nj_serve_stats st = stats(ctx);
            assert_int_equal(st.generic_passes, REQ_LINES);
            assert_int_equal(st.background_pending, REQ_LINES);
            assert_int_equal(st.generic_launches, REQ_THREADS * REQ_CALLS);
            nj_serve_hold(ctx, 0);
        }
        assert_int_equal(nj_context_wait_background(ctx), NJ_OK);
    }
    /* The second round ran the plans' own kernels only. Its plan_get calls may have sent the unaligned
     * variants generic and to the pool (a no-compile context preloads them): each slot that went generic
     * switched once. */
    nj_serve_stats st = stats(ctx);
    assert_int_equal(st.generic_launches, REQ_THREADS * REQ_CALLS);
    assert_true(st.generic_passes >= REQ_LINES);
    assert_int_equal(st.switches, st.generic_passes);
    assert_int_equal(st.background_failures, 0);
    assert_int_equal(st.background_pending, 0);
    nj_context_destroy(ctx);
}

static void test_options(void **state)
{
    (void)state;
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.max_background_compiles = 65;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT);
    o.max_background_compiles = -1;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT);
    o.struct_size = NJ_CONTEXT_OPTIONS_SIZE_V2; /* an older caller: the field is not read */
    o.cache_dir = dir;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    nj_context_destroy(ctx);
    nj_serve_stats st = {.struct_size = 4};
    assert_int_equal(nj_context_serve_stats(NULL, &st), NJ_ERR_NULL_POINTER);
}

int main(void)
{
    if (!nj_tu_make_temp_dir("serve", dir, sizeof dir)) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_options), cmocka_unit_test(test_no_compile_fallback),
                                       cmocka_unit_test(test_async_switch), cmocka_unit_test(test_shutdown_in_flight),
                                       cmocka_unit_test(test_concurrent_requests)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    nj_tu_remove_tree(dir);
    return rc;
}
