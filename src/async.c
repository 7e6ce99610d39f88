/* Serving without compiling on the request path. A pass whose kernels are not in memory or on disk runs
 * the generic kernels (src/generic.c) at once: in a context with NJ_CTX_ASYNC_COMPILE its own kernels
 * compile meanwhile on a bounded pool of background threads, and the plan's slot switches to them with
 * one atomic store once they are loaded (launch.c reads the slot with one acquire load: no lock on the
 * hot path); in a context with NJ_CTX_NO_COMPILE alone the pass stays generic. */
#include "async.h"

#include "generic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the calling thread is doing, for kernels.c's hooks: a request's probe may neither compile nor
 * wait for another thread's build; a background worker may compile even under NJ_CTX_NO_COMPILE (the
 * flag keeps compiles off the request path, which the pool is not on). */
enum { NJ_MODE_NONE = 0, NJ_MODE_PROBE = 1, NJ_MODE_BACKGROUND = 2 };
static _Thread_local int nj_serve_mode;

int nj_serve_compile_refused(const nj_context *ctx)
{
    if (nj_serve_mode == NJ_MODE_PROBE) return 1;
    if (nj_serve_mode == NJ_MODE_BACKGROUND) return 0;
    return (ctx->opts.flags & NJ_CTX_NO_COMPILE) != 0;
}
int nj_serve_no_wait(void) { return nj_serve_mode == NJ_MODE_PROBE; }
int nj_serve_thread_mode(void) { return nj_serve_mode != NJ_MODE_NONE; }

/* One pass of one plan that went generic: its generic set and its background jobs. */
typedef struct nj_serve_rec {
    nj_plan *plan;
    nj_pass pass;
    nj_kernelset *generic;
    int pending[NJ_VARIANT_COUNT];
    struct nj_serve_rec *next;
} nj_serve_rec;

typedef struct nj_serve_job {
    nj_serve_rec *rec;
    nj_variant v;
    struct nj_serve_job *next;
} nj_serve_job;

#define NJ_SERVE_MAX_THREADS 64

struct nj_serve {
    nj_context *ctx;
    pthread_mutex_t lock; /* the queue, the records, the threads; never taken on a launch */
    pthread_cond_t work, idle;
    nj_serve_job *head, *tail;
    int32_t nthreads, max_threads, busy, stopping;
    pthread_t threads[NJ_SERVE_MAX_THREADS];
    nj_serve_rec *recs;
    int force_generic, hold;
    atomic_uint_fast64_t generic_launches, generic_passes, bg_jobs, bg_compiles, bg_failures, switches;
};

nj_status nj_serve_create(nj_context *ctx)
{
    nj_serve *S = calloc(1, sizeof *S);
    NJ_RETURN_IF(!S, NJ_ERR_OUT_OF_MEMORY, "serve state");
    S->ctx = ctx;
    pthread_mutex_init(&S->lock, NULL);
    pthread_cond_init(&S->work, NULL);
    pthread_cond_init(&S->idle, NULL);
    int32_t n = ctx->opts.max_background_compiles;
    S->max_threads = n <= 0 ? 1 : n > NJ_SERVE_MAX_THREADS ? NJ_SERVE_MAX_THREADS : n;
    ctx->serve = S;
    return NJ_OK;
}

/* Drains the queue (a compile in flight or queued finishes and reaches the cache: nothing is lost),
 * joins the pool, frees the generic sets. Before the context's kernel sets and backend go. */
void nj_serve_destroy(nj_context *ctx)
{
    nj_serve *S = ctx->serve;
    if (!S) return;
    pthread_mutex_lock(&S->lock);
    S->stopping = 1;
    S->hold = 0;
    pthread_cond_broadcast(&S->work);
    pthread_mutex_unlock(&S->lock);
    for (int32_t i = 0; i < S->nthreads; i++) pthread_join(S->threads[i], NULL);
    while (S->recs) {
        nj_serve_rec *next = S->recs->next;
        nj_generic_set_free(ctx, S->recs->generic);
        free(S->recs);
        S->recs = next;
    }
    pthread_mutex_destroy(&S->lock);
    pthread_cond_destroy(&S->work);
    pthread_cond_destroy(&S->idle);
    free(S);
    ctx->serve = NULL;
}

int nj_serve_active(const nj_context *ctx)
{
    return ctx->serve && (ctx->serve->force_generic || (ctx->opts.flags & (NJ_CTX_NO_COMPILE | NJ_CTX_ASYNC_COMPILE)));
}

void nj_serve_force_generic(nj_context *ctx, int on) { ctx->serve->force_generic = on; }

void nj_serve_hold(nj_context *ctx, int on)
{
    pthread_mutex_lock(&ctx->serve->lock);
    ctx->serve->hold = on;
    pthread_cond_broadcast(&ctx->serve->work);
    pthread_mutex_unlock(&ctx->serve->lock);
}

void nj_serve_note_launch(nj_context *ctx, const nj_kernelset *ks)
{
    if (ks->state == NJ_KERNELSET_GENERIC) atomic_fetch_add_explicit(&ctx->serve->generic_launches, 1, memory_order_relaxed);
}

static _Atomic(nj_kernelset *) *nj_serve_slot(nj_plan *plan, nj_pass pass, nj_variant v)
{
    return &plan->pass[pass == NJ_PASS_BACKWARD][v];
}

/* ---- the background pool ---- */

static void nj_serve_run_job(nj_serve *S, nj_serve_job *job)
{
    nj_plan *plan = job->rec->plan;
    nj_pass pass = job->rec->pass;
    nj_kernelset *ks;
    nj_build_stats st = {0, 0};
    nj_serve_mode = NJ_MODE_BACKGROUND;
    nj_status s = nj_kernels_for(S->ctx, nj_plan_pass_plan(plan, pass), job->v, 1, &ks, &st);
    nj_serve_mode = NJ_MODE_NONE;
    atomic_fetch_add(&S->bg_jobs, 1);
    atomic_fetch_add(&S->bg_compiles, (uint64_t)(st.compiled + st.lib_compiled));
    if (s != NJ_OK) {
        /* the pass stays generic: correct, and a retry would fail the same way */
        atomic_fetch_add(&S->bg_failures, 1);
        nj_log(&S->ctx->log, NJ_LOG_WARN, "background build failed, the plan stays on the generic kernels: %s: %s",
               nj_status_name(s), nj_last_error());
        nj_error_clear();
        return;
    }
    nj_kernelset *prev = atomic_exchange_explicit(nj_serve_slot(plan, pass, job->v), ks, memory_order_acq_rel);
    if (prev && prev->state == NJ_KERNELSET_GENERIC) atomic_fetch_add(&S->switches, 1);
}

static void *nj_serve_worker(void *arg)
{
    nj_serve *S = arg;
    pthread_mutex_lock(&S->lock);
    for (;;) {
        while ((!S->head || S->hold) && !S->stopping) pthread_cond_wait(&S->work, &S->lock);
        nj_serve_job *job = S->head;
        if (!job) break; /* stopping, and nothing left */
        S->head = job->next;
        if (!S->head) S->tail = NULL;
        S->busy++;
        pthread_mutex_unlock(&S->lock);
        nj_serve_run_job(S, job);
        pthread_mutex_lock(&S->lock);
        job->rec->pending[job->v] = 0;
        free(job);
        S->busy--;
        if (!S->head && !S->busy) pthread_cond_broadcast(&S->idle);
    }
    pthread_mutex_unlock(&S->lock);
    return NULL;
}

/* With S->lock held. A failed thread start is not fatal while one worker runs; with none the job runs
 * here, synchronously (rare: the process is out of threads). */
static nj_status nj_serve_enqueue(nj_serve *S, nj_serve_rec *rec, nj_variant v)
{
    if (rec->pending[v]) return NJ_OK;
    nj_serve_job *job = calloc(1, sizeof *job);
    NJ_RETURN_IF(!job, NJ_ERR_OUT_OF_MEMORY, "background job");
    job->rec = rec;
    job->v = v;
    rec->pending[v] = 1;
    if (S->tail) S->tail->next = job;
    else S->head = job;
    S->tail = job;
    if (S->nthreads < S->max_threads && pthread_create(&S->threads[S->nthreads], NULL, nj_serve_worker, S) == 0)
        S->nthreads++;
    if (S->nthreads == 0) {
        S->head = S->tail = NULL;
        S->busy++;
        pthread_mutex_unlock(&S->lock);
        nj_serve_run_job(S, job);
        pthread_mutex_lock(&S->lock);
        S->busy--;
        rec->pending[v] = 0;
        free(job);
        return NJ_OK;
    }
    pthread_cond_signal(&S->work);
    return NJ_OK;
}

/* ---- the request path ---- */

static nj_serve_rec *nj_serve_rec_get(nj_serve *S, nj_plan *plan, nj_pass pass)
{
    for (nj_serve_rec *r = S->recs; r; r = r->next)
        if (r->plan == plan && r->pass == pass) return r;
    nj_serve_rec *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->plan = plan;
    r->pass = pass;
    r->next = S->recs;
    S->recs = r;
    return r;
}

/* The generic set for the pass (made on first need) into the slot, unless the plan's own kernels got
 * there first; in an async context with the background build queued. */
static nj_status nj_serve_go_generic(nj_plan *plan, nj_pass pass, nj_variant v, nj_kernelset **out)
{
    nj_context *ctx = plan->ctx;
    nj_serve *S = ctx->serve;
    int async = (ctx->opts.flags & NJ_CTX_ASYNC_COMPILE) && !S->force_generic;
    pthread_mutex_lock(&S->lock);
    nj_serve_rec *rec = nj_serve_rec_get(S, plan, pass);
    nj_status s = rec ? NJ_OK : nj_fail(NJ_ERR_OUT_OF_MEMORY, "serve record");
    if (s == NJ_OK && async) s = nj_serve_enqueue(S, rec, v);
    if (s == NJ_OK && !rec->generic) s = nj_generic_set_create(plan, pass, &rec->generic);
    nj_kernelset *gen = rec ? rec->generic : NULL;
    pthread_mutex_unlock(&S->lock);
    NJ_TRY(s);
    nj_kernelset *cur = NULL;
    if (atomic_compare_exchange_strong_explicit(nj_serve_slot(plan, pass, v), &cur, gen, memory_order_acq_rel,
                                                memory_order_acquire)) {
        atomic_fetch_add(&S->generic_passes, 1);
        cur = gen;
    }
    *out = cur;
    return NJ_OK;
}

nj_status nj_serve_ensure(nj_plan *plan, nj_pass pass, nj_variant v, nj_kernelset **out)
{
    nj_context *ctx = plan->ctx;
    nj_serve *S = ctx->serve;
    if (!S->force_generic) {
        /* the plan's own kernels when memory or the disk has them: a request never compiles, never waits */
        nj_kernelset *ks;
        int saved = nj_serve_mode;
        if (ctx->opts.flags & NJ_CTX_ASYNC_COMPILE) nj_serve_mode = NJ_MODE_PROBE;
        nj_status s = nj_kernels_for(ctx, nj_plan_pass_plan(plan, pass), v, 1, &ks, NULL);
        nj_serve_mode = saved;
        if (s == NJ_OK) {
            nj_kernelset *cur = NULL;
            if (!atomic_compare_exchange_strong_explicit(nj_serve_slot(plan, pass, v), &cur, ks, memory_order_acq_rel,
                                                         memory_order_acquire))
                ks = cur;
            *out = ks;
            return NJ_OK;
        }
        if (s != NJ_ERR_NOT_CACHED) return s;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", nj_last_error());
    nj_status s = nj_serve_go_generic(plan, pass, v, out);
    if (s == NJ_OK) nj_error_clear();
    else if (s == NJ_ERR_NOT_CACHED) s = nj_fail(s, "%s (nor are the generic kernels: warm them with the problem)", why);
    return s;
}

/* ---- public calls ---- */

nj_status nj_context_wait_background(nj_context *ctx)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx, NJ_ERR_NULL_POINTER, "nj_context_wait_background: ctx is NULL");
    nj_serve *S = ctx->serve;
    pthread_mutex_lock(&S->lock);
    S->hold = 0; /* a held pool would never be done */
    pthread_cond_broadcast(&S->work);
    while (S->head || S->busy) pthread_cond_wait(&S->idle, &S->lock);
    pthread_mutex_unlock(&S->lock);
    return NJ_OK;
}

nj_status nj_context_serve_stats(nj_context *ctx, nj_serve_stats *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !out, NJ_ERR_NULL_POINTER, "nj_context_serve_stats: NULL argument");
    size_t want = out->struct_size;
    NJ_RETURN_IF(want < offsetof(nj_serve_stats, background_pending) + sizeof(uint64_t), NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_context_serve_stats: struct_size %zu (set it to sizeof(nj_serve_stats))", want);
    nj_serve *S = ctx->serve;
    nj_serve_stats st;
    memset(&st, 0, sizeof st);
    st.generic_launches = atomic_load(&S->generic_launches);
    st.generic_passes = atomic_load(&S->generic_passes);
    st.background_jobs = atomic_load(&S->bg_jobs);
    st.background_compiles = atomic_load(&S->bg_compiles);
    st.background_failures = atomic_load(&S->bg_failures);
    st.switches = atomic_load(&S->switches);
    pthread_mutex_lock(&S->lock);
    for (nj_serve_job *j = S->head; j; j = j->next) st.background_pending++;
    st.background_pending += (uint64_t)S->busy;
    pthread_mutex_unlock(&S->lock);
    memcpy(out, &st, want < sizeof st ? want : sizeof st);
    out->struct_size = (uint32_t)want;
    return NJ_OK;
}

nj_status nj_context_warm_generic(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, int32_t *compiled)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p, NJ_ERR_NULL_POINTER, "nj_context_warm_generic: ctx and problem are required");
    NJ_RETURN_IF(passes == 0 || passes & ~(uint32_t)(NJ_PASS_FORWARD | NJ_PASS_BACKWARD), NJ_ERR_BAD_ARGUMENT,
                 "passes = 0x%x: NJ_PASS_FORWARD, NJ_PASS_BACKWARD or both", passes);
    NJ_RETURN_IF(p->struct_size != sizeof *p, NJ_ERR_BAD_STRUCT_SIZE, "nj_problem_desc.struct_size is %u, expected %zu",
                 p->struct_size, sizeof *p);
    nj_canon c;
    NJ_TRY(nj_canonicalize(p, &c));
    int32_t done = 0;
    /* a context that can launch loads them too: its first generic launch then costs no module load */
    int load = nj_context_backend(ctx) != NJ_BACKEND_COMPILE_ONLY;
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        if (!(passes & pass)) continue;
        nj_canon view;
        nj_canon_for_pass(&c, (nj_pass)pass, &view);
        nj_kernelset *ks;
        int32_t one = 0;
        NJ_TRY(nj_generic_module(ctx, (nj_pass)pass, view.dtype[NJ_OPD_X], view.dtype[NJ_OPD_PARAM], load, &ks, &one));
        done += one;
    }
    if (compiled) *compiled = done;
    return NJ_OK;
}
