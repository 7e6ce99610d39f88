/* Concurrency (issue 14, run under ThreadSanitizer in CI as well as in every build): many threads
 * getting plans and launching on one context, over shared and distinct problems; and a disk cache whose
 * bound evicts entries while other threads read them. Every thread checks its own results, so a race
 * shows as a wrong value here even where the sanitizer is not running. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "nj_testutil.h"

#define NJ_CC_THREADS 8

static char g_dir[512];

static int group_setup(void **state)
{
    (void)state;
    return nj_tu_make_temp_dir("concurrency", g_dir, sizeof g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nj_tu_remove_tree(g_dir);
}

typedef struct launch_job {
    nj_context *ctx;
    int id;
    int errors;
    char detail[256];
} launch_job;

/* RMSNorm without gamma of rows that are 1, 2, ..., n times a constant: y is known exactly. Threads with
 * an even id share one problem, odd ones each have their own row length. */
static void *launch_body(void *arg)
{
    launch_job *j = arg;
    int64_t n = (j->id % 2) ? 32 + j->id : 64, rows = 3 + j->id % 3;
    int64_t e[2] = {rows, n};
    nj_problem_desc p;
    nj_plan *plan;
    nj_status s = nj_preset_rmsnorm(&p, NJ_F32, 2, e, 1, NJ_FLAG_SAVE_STATS);
    if (s == NJ_OK) s = nj_plan_get(j->ctx, &p, NJ_PASS_FORWARD, &plan);
    if (s != NJ_OK) {
        snprintf(j->detail, sizeof j->detail, "%s: %s", nj_status_name(s), nj_last_error());
        j->errors++;
        return NULL;
    }
    float *x = malloc(sizeof(float) * (size_t)(rows * n)), *y = malloc(sizeof(float) * (size_t)(rows * n));
    float *rstd = malloc(sizeof(float) * (size_t)rows);
    for (int it = 0; it < 4; it++) {
        for (int64_t i = 0; i < rows * n; i++) x[i] = (float)(1 + it + j->id), y[i] = NAN;
        nj_forward_args a = {.struct_size = sizeof a, .eps = 0.0f, .x = x, .y = y, .rstd = rstd};
        s = nj_forward(plan, &a);
        if (s != NJ_OK) {
            snprintf(j->detail, sizeof j->detail, "forward: %s: %s", nj_status_name(s), nj_last_error());
            j->errors++;
            break;
        }
        for (int64_t i = 0; i < rows * n; i++) j->errors += fabsf(y[i] - 1.0f) > 1e-6f; /* x / rms(x) */
        for (int64_t r = 0; r < rows; r++) j->errors += fabsf(rstd[r] * (float)(1 + it + j->id) - 1.0f) > 1e-6f;
    }
    free(x), free(y), free(rstd);
    return NULL;
}

static void test_threads_plan_and_launch(void **state)
{
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/launch", g_dir);
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.cache_dir = dir;
    nj_context *ctx;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    for (int round = 0; round < 2; round++) { /* first compiles (single flight), then table hits */
        pthread_t t[NJ_CC_THREADS];
        launch_job jobs[NJ_CC_THREADS];
        for (int i = 0; i < NJ_CC_THREADS; i++) {
            jobs[i] = (launch_job){ctx, i, 0, ""};
            assert_int_equal(pthread_create(&t[i], NULL, launch_body, &jobs[i]), 0);
        }
        for (int i = 0; i < NJ_CC_THREADS; i++) {
            pthread_join(t[i], NULL);
            if (jobs[i].errors) fail_msg("round %d thread %d: %d errors %s", round, i, jobs[i].errors, jobs[i].detail);
        }
    }
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    /* 5 distinct problems (one shared, four odd row lengths): each compiled or loaded once */
    assert_true(st.compiles + st.hits_disk <= 5 * 2);
    assert_true(st.hits_memory > 0);
    nj_context_destroy(ctx);
}

/* Entries of ~6 KiB under a 24 KiB bound: puts evict, while readers get the same keys. A read
 * returns the whole entry it asked for or a miss, never another key's bytes or a torn one. */
typedef struct cache_job {
    nj_cache *c;
    int id, writer;
    int errors, hits;
    int *writers_left; /* readers read until the writers are done */
} cache_job;

static void entry_bytes(int key, uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)(key * 31 + (int)i * 7);
}

static void *cache_body(void *arg)
{
    cache_job *j = arg;
    enum { N = 6000 };
    uint8_t *want = malloc(N);
    for (int it = 0; j->writer ? it < 100 : __atomic_load_n(j->writers_left, __ATOMIC_ACQUIRE) > 0; it++) {
        int key = (it + j->id) % 6;
        char sig[64];
        snprintf(sig, sizeof sig, "concurrency test signature %d", key);
        entry_bytes(key, want, N);
        if (j->writer) {
            char meta[32];
            snprintf(meta, sizeof meta, "key %d", key);
            j->errors += nj_cache_put(j->c, sig, "so", meta, want, N) != NJ_OK;
            continue;
        }
        nj_cache_entry e;
        memset(&e, 0, sizeof e);
        nj_status s = nj_cache_get(j->c, sig, "so", &e);
        if (s == NJ_OK) {
            j->hits++;
            j->errors += e.payload_size != N || memcmp(e.payload, want, N) != 0 || strcmp(e.signature, sig) != 0;
        } else {
            j->errors += s != NJ_ERR_NOT_CACHED;
        }
        nj_cache_entry_free(&e);
    }
    free(want);
    if (j->writer) __atomic_fetch_sub(j->writers_left, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_eviction_while_reading(void **state)
{
    (void)state;
    char root[600];
    snprintf(root, sizeof root, "%s/evict", g_dir);
    nj_cache *c;
    assert_int_equal(nj_cache_open(root, 24 * 1024, &c), NJ_OK);
    pthread_t t[NJ_CC_THREADS];
    cache_job jobs[NJ_CC_THREADS];
    int writers_left = NJ_CC_THREADS / 2;
    for (int i = 0; i < NJ_CC_THREADS; i++) {
        jobs[i] = (cache_job){c, i, i % 2, 0, 0, &writers_left};
        assert_int_equal(pthread_create(&t[i], NULL, cache_body, &jobs[i]), 0);
    }
    int hits = 0;
    for (int i = 0; i < NJ_CC_THREADS; i++) {
        pthread_join(t[i], NULL);
        if (jobs[i].errors) fail_msg("thread %d (%s): %d errors", i, jobs[i].writer ? "writer" : "reader", jobs[i].errors);
        hits += jobs[i].hits;
    }
    nj_cache_counters cc;
    nj_cache_counters_get(c, &cc);
    assert_true(cc.evictions > 0); /* the bound was really hit while the readers ran */
    fprintf(stderr, "concurrency: %d reads hit, %llu evictions, %llu corrupt\n", hits,
            (unsigned long long)cc.evictions, (unsigned long long)cc.corrupt);
    assert_int_equal(cc.corrupt, 0);
    assert_true(hits > 0); /* the readers ran while entries came and went */
    nj_cache_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_plan_and_launch),
        cmocka_unit_test(test_eviction_while_reading),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
