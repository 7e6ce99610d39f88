/* Signature -> ready kernels: memory table, then disk cache, then compile (single flight in the process,
 * a per-key file lock across processes), then load through the backend. A pass's kernel set also points
 * its library launches at the library modules (planner.h: nj_lib_kernel), fetched the same way. */
#include "codegen.h"
#include "cache_remote.h"
#include "context_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a kernel set's source is rendered from: a pass's canonical problem c, or (c NULL) library kernel
 * lib. dtype: the gamma dtype, which a library module is built for. reserve: library modules compiling
 * beside this one on threads of their own, whose cores its --split-compile must leave to them. */
typedef struct nj_unit {
    const nj_canon *c;
    int32_t lib, dtype, reserve;
    nj_kernels_render_fn render; /* serve hook: a generic module's source (src/generic.c), c NULL */
    const void *render_ud;
} nj_unit;

static _Thread_local double nj_last_compile_ms;
double nj_context_last_compile_ms(void) { return nj_last_compile_ms; }

const char *nj_binary_ext(nj_context *ctx)
{
    if (ctx->backend->ops->kind == NJ_BACKEND_EMULATOR) return "so";
    int32_t max_arch = 0;
    if (nj_nvrtc_max_arch(&max_arch) == NJ_OK && ctx->backend->props.arch > max_arch) return "ptx";
    return "cubin";
}

/* The lines every signature ends with: what the binary depends on besides the problem and plan. */
static void nj_signature_tail(nj_context *ctx, nj_buf *b)
{
    nj_buf_printf(b, "templates %s\ncompiler %s\ntarget %s\nformat %d\n", nj_template_set_hash(),
                  ctx->backend->ops->compiler(ctx->backend), ctx->backend->ops->target(ctx->backend),
                  NJ_CACHE_FORMAT);
}

char *nj_signature_text(nj_context *ctx, const nj_canon *c, const nj_plan_params *pp)
{
    char *canon = nj_canon_text(c), *plan = nj_plan_text(pp);
    nj_buf b;
    nj_buf_init(&b);
    if (canon && plan) {
        nj_buf_printf(&b, "normjit-signature\nproblem %s\npass %s\nplan %s\n", canon,
                      pp->pass == NJ_PASS_BACKWARD ? "bwd" : "fwd", plan);
        nj_signature_tail(ctx, &b);
    } else {
        b.failed = true;
    }
    free(canon);
    free(plan);
    return nj_buf_take(&b);
}

char *nj_lib_signature_text(nj_context *ctx, int32_t lib, int32_t dtype, nj_plan_params *pp)
{
    if (nj_plan_library(lib, pp) != NJ_OK) return NULL;
    char *plan = nj_plan_text(pp);
    nj_buf b;
    nj_buf_init(&b);
    if (plan) {
        nj_buf_printf(&b, "normjit-signature\nlibrary %s\nparam %s\nplan %s\n", nj_lib_name(lib),
                      nj_dtype_name((nj_dtype)dtype), plan);
        nj_signature_tail(ctx, &b);
    } else {
        b.failed = true;
    }
    free(plan);
    return nj_buf_take(&b);
}

/* Loads a binary and resolves the kernels of every launch of its own into ks. */
static nj_status nj_kernels_load(nj_context *ctx, nj_kernelset *ks, const void *bin, size_t size)
{
    nj_backend *b = ctx->backend;
    NJ_TRY(b->ops->load(b, bin, size, &ks->module));
    for (int32_t i = 0; i < ks->params.nlaunch; i++) {
        if (ks->params.launch[i].lib != NJ_LIB_NONE) continue; /* in a library module: nj_libs_finish */
        nj_status s = b->ops->function(b, ks->module, ks->params.launch[i].kernel, &ks->fn[i]);
        if (s != NJ_OK) {
            b->ops->unload(b, ks->module);
            ks->module = NULL;
            return s;
        }
    }
    return NJ_OK;
}

/* Renders and compiles; the binary goes to the disk cache. A store that fails (full disk, read-only root)
 * does not fail the call: the kernel serves from memory, and the cache counts the failure by reason
 * (nj_cache_counters), which `normjit warmup` reports and fails on. */
static nj_status nj_kernels_compile(nj_context *ctx, const nj_unit *u, const char *sig, nj_kernelset *ks,
                                    nj_compile_result *res)
{
    char *src = NULL;
    NJ_TRY(u->render ? u->render(u->render_ud, &src) /* serve hook */
                     : u->c ? nj_codegen(u->c, &ks->params, &src) : nj_codegen_library(&ks->params, u->dtype, &src));
    /* the kernel count sizes --split-compile over idle cores: none taken from a library compile */
    int32_t kernels = nj_plan_kernel_count(&ks->params) - u->reserve;
    nj_status s = ctx->backend->ops->compile(ctx->backend, src, ks->params.launch[0].kernel, kernels > 1 ? kernels : 1,
                                             res);
    free(src);
    if (s != NJ_OK) {
        atomic_fetch_add(&ctx->compile_failures, 1);
        return nj_fail_context(s, "compiling %s", ks->hash);
    }
    atomic_fetch_add(&ctx->compiles, 1);
    nj_last_compile_ms = res->millis;
    nj_log(&ctx->log, NJ_LOG_INFO, "compiled %s in %.1f ms", ks->hash, res->millis);
    if (ctx->cache) {
        char *meta = nj_launches_to_text(&ks->params);
        nj_status ps = meta ? nj_cache_put(ctx->cache, sig, nj_binary_ext(ctx), meta, res->bin.data, res->bin.size)
                            : NJ_ERR_OUT_OF_MEMORY;
        if (ps != NJ_OK) nj_log(&ctx->log, NJ_LOG_WARN, "cache store of %s failed: %s", ks->hash, nj_last_error());
        free(meta);
    }
    return NJ_OK;
}

/* Disk lookup; on a hit the launches stored with the entry must match the plan we made. */
static int nj_kernels_from_disk(nj_context *ctx, const char *sig, nj_kernelset *ks, nj_cache_entry *e)
{
    if (!ctx->cache || nj_cache_get(ctx->cache, sig, nj_binary_ext(ctx), e) != NJ_OK) return 0;
    nj_plan_params stored = ks->params;
    if (nj_launches_from_text(e->meta, &stored) != NJ_OK || stored.nlaunch != ks->params.nlaunch) {
        nj_cache_entry_free(e);
        return 0;
    }
    return 1;
}

/* An entry that verified but that the loader refused (a binary for another kernel, a cubin the driver
 * rejects) is removed, so that it is rebuilt now and never served again. 1 when a rebuild may help. */
static int nj_kernels_evict(nj_context *ctx, const char *sig, const nj_kernelset *ks)
{
    char why[512];
    snprintf(why, sizeof why, "%s", nj_last_error());
    if (!ctx->cache || nj_cache_read_only(ctx->cache) || (ctx->opts.flags & NJ_CTX_NO_COMPILE)) return 0;
    nj_log(&ctx->log, NJ_LOG_WARN, "cached kernel %s failed to load (%s); evicted, rebuilding", ks->hash, why);
    return nj_cache_drop(ctx->cache, sig, nj_binary_ext(ctx)) == NJ_OK;
}

/* Compiles and loads ks after its cache entry was evicted. */
static nj_status nj_kernels_rebuild(nj_context *ctx, const nj_unit *u, const char *sig, nj_kernelset *ks,
                                    int32_t *compiled)
{
    atomic_fetch_add(&ctx->misses, 1);
    nj_compile_result res;
    memset(&res, 0, sizeof res);
    nj_status s = nj_kernels_compile(ctx, u, sig, ks, &res);
    if (s == NJ_OK) (*compiled)++;
    if (s == NJ_OK) s = nj_kernels_load(ctx, ks, res.bin.data, res.bin.size);
    nj_binary_free(&res.bin);
    return s;
}

/* Builds ks (state 0, owned by the calling thread). */
static nj_status nj_kernels_build(nj_context *ctx, const nj_unit *u, const char *sig, nj_kernelset *ks, int load,
                                  int32_t *compiled)
{
    nj_cache_entry e;
    memset(&e, 0, sizeof e);
    int lock_fd = -1;
    nj_status s = NJ_OK;
    if (!nj_kernels_from_disk(ctx, sig, ks, &e)) {
        NJ_RETURN_IF(nj_serve_compile_refused(ctx), NJ_ERR_NOT_CACHED, /* serve hook: NJ_CTX_NO_COMPILE, async */
                     "kernel %s is not in the cache (%s) and this context never compiles; run `normjit warmup`",
                     ks->hash, ctx->cache ? nj_cache_root(ctx->cache) : "memory only");
        /* Another process may be compiling the same key: wait for its lock, then look again. */
        if (ctx->cache && !nj_cache_read_only(ctx->cache) &&
            nj_cache_lock(ctx->cache, sig, nj_cache_lock_timeout_ms(), &lock_fd) != NJ_OK) {
            /* counted by the cache (lock_fallbacks); the store after the compile is still atomic */
            nj_log(&ctx->log, NJ_LOG_WARN, "cache lock: %s; compiling without it", nj_last_error());
            lock_fd = -1;
        }
        /* Other hosts too (the Redis tier): wait for one that compiles it, or hold its fleet lock. */
        int fleet = nj_cache_fleet_lock(ctx->cache, sig, nj_binary_ext(ctx));
        if ((lock_fd >= 0 || fleet) && nj_kernels_from_disk(ctx, sig, ks, &e)) {
            atomic_fetch_add(&ctx->hits_disk, 1);
        } else {
            atomic_fetch_add(&ctx->misses, 1);
            nj_compile_result res;
            memset(&res, 0, sizeof res);
            s = nj_kernels_compile(ctx, u, sig, ks, &res);
            nj_cache_fleet_unlock(ctx->cache, sig, fleet);
            if (lock_fd >= 0) nj_cache_unlock(ctx->cache, lock_fd);
            if (s == NJ_OK) (*compiled)++;
            if (s == NJ_OK && load) s = nj_kernels_load(ctx, ks, res.bin.data, res.bin.size);
            nj_binary_free(&res.bin);
            return s;
        }
        nj_cache_fleet_unlock(ctx->cache, sig, fleet);
        if (lock_fd >= 0) nj_cache_unlock(ctx->cache, lock_fd);
    } else {
        atomic_fetch_add(&ctx->hits_disk, 1);
    }
    if (load) s = nj_kernels_load(ctx, ks, e.payload, e.payload_size);
    nj_cache_entry_free(&e);
    if (s != NJ_OK && load && nj_kernels_evict(ctx, sig, ks)) return nj_kernels_rebuild(ctx, u, sig, ks, compiled);
    return s;
}

static nj_kernelset *nj_kernelset_find(nj_context *ctx, const char *hash, int load)
{
    for (nj_kernelset *k = ctx->sets; k; k = k->next)
        /* state first: a set being built (state 0) gets its module written by the builder without the
         * lock; it is read only once state 1 (set under the lock, after the load) says it is final */
        if (strcmp(k->hash, hash) == 0 && (k->state != 1 || !load || k->module)) return k;
    return NULL;
}

/* Waits for another thread's build of the same signature; replays its failure if it failed. */
static nj_status nj_kernelset_wait(nj_context *ctx, nj_kernelset *ks)
{
    while (ks->state == 0) pthread_cond_wait(&ctx->built, &ctx->lock);
    if (ks->state == 1) return NJ_OK;
    return nj_fail(ks->error, "%s", ks->error_detail ? ks->error_detail : "kernel build failed");
}

static nj_status nj_kernelset_get(nj_context *ctx, const nj_unit *u, const nj_plan_params *pp, const char *sig,
                                  int load, nj_kernelset **out, nj_build_stats *st);

/* A library module that a new kernel set of a pass launches. One not yet in memory is fetched (from
 * disk, or compiled) on a thread of its own while the pass's module is built, so that a first call in
 * an empty cache waits for the longer of the two compiles, not their sum. */
typedef struct nj_lib_job {
    nj_context *ctx;
    nj_unit unit;
    int load;
    nj_plan_params pp;
    char *sig;
    nj_kernelset *ks;
    nj_build_stats st;
    nj_status s;
    char *detail; /* the failure's detail, read on the job's thread */
    pthread_t thread;
    bool threaded;
} nj_lib_job;

static void *nj_lib_job_run(void *arg)
{
    nj_lib_job *j = arg;
    j->s = nj_kernelset_get(j->ctx, &j->unit, &j->pp, j->sig, j->load, &j->ks, &j->st);
    if (j->s != NJ_OK) j->detail = strdup(nj_last_error());
    return NULL;
}

/* A loaded (or, without load, built) set of this hash, or NULL: the common case needs no thread. */
static nj_kernelset *nj_kernelset_ready(nj_context *ctx, const char *sig, int load)
{
    char hash[33];
    nj_hash_hex(sig, strlen(sig), hash);
    pthread_mutex_lock(&ctx->lock);
    nj_kernelset *ks = nj_kernelset_find(ctx, hash, load);
    if (ks && ks->state != 1) ks = NULL;
    pthread_mutex_unlock(&ctx->lock);
    if (ks) atomic_fetch_add(&ctx->hits_memory, 1);
    return ks;
}

static void nj_lib_job_start(nj_lib_job *j)
{
    if (!(j->sig = nj_lib_signature_text(j->ctx, j->unit.lib, j->unit.dtype, &j->pp))) {
        j->s = nj_fail(NJ_ERR_OUT_OF_MEMORY, "library %s: signature text", nj_lib_name(j->unit.lib));
        j->detail = strdup(nj_last_error());
        return;
    }
    if ((j->ks = nj_kernelset_ready(j->ctx, j->sig, j->load))) return;
    /* serve hook: on a request's probe or a background compile the thread's mode must hold for the job */
    j->threaded = !nj_serve_thread_mode() && pthread_create(&j->thread, NULL, nj_lib_job_run, j) == 0;
    if (!j->threaded) nj_lib_job_run(j); /* no thread to be had: one after the other */
}

/* Starts a job per distinct library kernel among pp's launches; returns how many. */
static int32_t nj_libs_start(nj_context *ctx, const nj_plan_params *pp, int32_t dtype, int load,
                             nj_lib_job jobs[NJ_MAX_LAUNCHES])
{
    int32_t libs[NJ_MAX_LAUNCHES], n = nj_plan_libs(pp, libs);
    for (int32_t k = 0; k < n; k++) {
        memset(&jobs[k], 0, sizeof jobs[k]);
        jobs[k].ctx = ctx;
        jobs[k].unit = (nj_unit){NULL, libs[k], nj_lib_dtype(libs[k], dtype), 0, NULL, NULL};
        jobs[k].load = load;
        nj_lib_job_start(&jobs[k]);
    }
    return n;
}

/* Waits for the jobs, points ks's library launches at their kernels and replays the first failure. */
static nj_status nj_libs_finish(nj_lib_job *jobs, int32_t n, nj_kernelset *ks, int load, nj_build_stats *st)
{
    nj_status s = NJ_OK;
    for (int32_t k = 0; k < n; k++) {
        nj_lib_job *j = &jobs[k];
        if (j->threaded) pthread_join(j->thread, NULL);
        st->lib_compiled += j->st.lib_compiled;
        if (j->s != NJ_OK && s == NJ_OK) s = nj_fail(j->s, "library kernel %s: %s", nj_lib_name(j->unit.lib),
                                                     j->detail ? j->detail : "build failed");
        for (int32_t i = 0; j->s == NJ_OK && load && i < ks->params.nlaunch; i++)
            if (ks->params.launch[i].lib == j->unit.lib) ks->fn[i] = j->ks->fn[0];
        free(j->detail);
        free(j->sig);
    }
    return s;
}

/* Builds a new kernel set of a pass: its own module and, beside it, the library modules it launches. */
static nj_status nj_kernels_build_pass(nj_context *ctx, const nj_unit *u, const char *sig, nj_kernelset *ks,
                                       int load, nj_build_stats *st)
{
    nj_lib_job jobs[NJ_MAX_LAUNCHES];
    int32_t nj = nj_libs_start(ctx, &ks->params, u->dtype, load, jobs);
    nj_unit own = *u;
    for (int32_t k = 0; k < nj; k++) own.reserve += jobs[k].threaded;
    nj_status s = nj_kernels_build(ctx, &own, sig, ks, load, &st->compiled);
    nj_status ls = nj_libs_finish(jobs, nj, ks, load, st);
    if (s == NJ_OK && ls != NJ_OK && ks->module) { /* a failed set holds nothing: a retry loads anew */
        ctx->backend->ops->unload(ctx->backend, ks->module);
        ks->module = NULL;
    }
    return s != NJ_OK ? s : ls;
}

/* The kernel set of a signature: in memory (waiting for a build in flight), else built by this thread. */
static nj_status nj_kernelset_get(nj_context *ctx, const nj_unit *u, const nj_plan_params *pp, const char *sig,
                                  int load, nj_kernelset **out, nj_build_stats *st)
{
    char hash[33];
    nj_hash_hex(sig, strlen(sig), hash);
    pthread_mutex_lock(&ctx->lock);
    nj_kernelset *ks = nj_kernelset_find(ctx, hash, load);
    if (ks && ks->state == 0 && nj_serve_no_wait()) { /* serve hook: a request never waits for a build */
        pthread_mutex_unlock(&ctx->lock);
        return nj_fail(NJ_ERR_NOT_CACHED, "kernel %s is being built on another thread", hash);
    }
    if (ks && ks->state != 2) {
        nj_status s = nj_kernelset_wait(ctx, ks);
        /* The build waited for was a request's probe or a no-compile lookup, refused for want of a cached
         * binary (NJ_ERR_NOT_CACHED): a thread that may compile (a background worker) builds it anew
         * rather than inherit the refusal, which had left a pass on the generic kernels for good. */
        bool rebuild = s == NJ_ERR_NOT_CACHED && !nj_serve_compile_refused(ctx);
        if (rebuild) nj_error_clear();
        else if (s != NJ_OK || !load || ks->module) { /* else a warmup built it without loading: load one */
            pthread_mutex_unlock(&ctx->lock);
            if (s == NJ_OK) atomic_fetch_add(&ctx->hits_memory, 1);
            *out = ks;
            return s;
        }
    }
    if (ks && ks->state == 2) {
        /* A failed set of this signature (it holds no module) is built again in place: a context that
         * never compiles, asked again and again for a kernel it lacks, had added a set a miss, so its
         * memory and every lookup's walk of the list grew without bound. */
        free(ks->error_detail);
        ks->error_detail = NULL;
        ks->error = NJ_OK;
        memset(ks->fn, 0, sizeof ks->fn);
        ks->params = *pp;
        ks->state = 0; /* being built again: other threads wait */
    } else {
        ks = calloc(1, sizeof *ks);
        if (!ks) {
            pthread_mutex_unlock(&ctx->lock);
            return nj_fail(NJ_ERR_OUT_OF_MEMORY, "kernel set");
        }
        memcpy(ks->hash, hash, sizeof hash);
        ks->params = *pp;
        ks->next = ctx->sets;
        ctx->sets = ks; /* visible as "being built": other threads wait instead of compiling again */
    }
    pthread_mutex_unlock(&ctx->lock);

    nj_status s = u->c ? nj_kernels_build_pass(ctx, u, sig, ks, load, st)
                       : nj_kernels_build(ctx, u, sig, ks, load, &st->lib_compiled);

    pthread_mutex_lock(&ctx->lock);
    ks->error = s;
    if (s != NJ_OK) ks->error_detail = strdup(nj_last_error());
    ks->state = s == NJ_OK ? 1 : 2;
    pthread_cond_broadcast(&ctx->built);
    pthread_mutex_unlock(&ctx->lock);
    *out = ks;
    return s;
}

nj_status nj_kernels_for(nj_context *ctx, const nj_pass_plan *pl, nj_variant v, int load, nj_kernelset **out,
                         nj_build_stats *st)
{
    NJ_TRY(nj_pass_plan_status(pl));
    NJ_RETURN_IF(v != NJ_VARIANT_MAIN && v != NJ_VARIANT_UNALIGNED, NJ_ERR_BAD_ARGUMENT, "kernels: variant %d", (int)v);
    nj_plan_params vp;
    nj_pass_plan_variant(pl, v, &vp);
    const nj_plan_params *pp = &vp;
    char *sig = nj_signature_text(ctx, &pl->view, pp);
    NJ_RETURN_IF(!sig, NJ_ERR_OUT_OF_MEMORY, "signature text");
    nj_build_stats none = {0, 0};
    nj_unit u = {&pl->view, NJ_LIB_NONE, pl->view.dtype[NJ_OPD_PARAM], 0, NULL, NULL};
    nj_status s = nj_kernelset_get(ctx, &u, pp, sig, load, out, st ? st : &none);
    free(sig);
    return s;
}

/* serve hook: a module rendered by `render` (src/generic.c), keyed by head + the signature tail. */
nj_status nj_kernels_custom(nj_context *ctx, const char *head, const nj_plan_params *pp, nj_kernels_render_fn render,
                            const void *ud, int load, nj_kernelset **out, int32_t *compiled)
{
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "%s", head);
    nj_signature_tail(ctx, &b);
    char *sig = nj_buf_take(&b);
    NJ_RETURN_IF(!sig, NJ_ERR_OUT_OF_MEMORY, "signature text");
    nj_build_stats st = {0, 0};
    nj_unit u = {NULL, NJ_LIB_NONE, NJ_DTYPE_NONE, 0, render, ud};
    nj_status s = nj_kernelset_get(ctx, &u, pp, sig, load, out, &st);
    if (compiled) *compiled = st.lib_compiled;
    free(sig);
    return s;
}

void nj_kernelsets_free(nj_context *ctx)
{
    nj_kernelset *k = ctx->sets;
    while (k) {
        nj_kernelset *next = k->next;
        if (k->module) ctx->backend->ops->unload(ctx->backend, k->module);
        free(k->error_detail);
        free(k);
        k = next;
    }
    ctx->sets = NULL;
}
