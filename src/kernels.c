/* Signature -> ready kernels: memory table, then disk cache, then compile (single flight in the process,
 * a per-key file lock across processes), then load through the backend. */
#include "codegen.h"
#include "context_impl.h"

#include <stdlib.h>
#include <string.h>

#define NJ_LOCK_TIMEOUT_MS 120000

static _Thread_local double nj_last_compile_ms;
double nj_context_last_compile_ms(void) { return nj_last_compile_ms; }

const char *nj_binary_ext(nj_context *ctx)
{
    if (strcmp(ctx->backend->ops->name, "emulator") == 0) return "so";
    int32_t max_arch = 0;
    if (nj_nvrtc_max_arch(&max_arch) == NJ_OK && ctx->backend->props.arch > max_arch) return "ptx";
    return "cubin";
}

char *nj_signature_text(nj_context *ctx, const nj_canon *c, const nj_plan_params *pp)
{
    char *canon = nj_canon_text(c), *plan = nj_plan_text(pp);
    nj_buf b;
    nj_buf_init(&b);
    if (canon && plan) {
        nj_buf_printf(&b, "normjit-signature\nproblem %s\npass %s\nplan %s\n", canon,
                      pp->pass == NJ_PASS_BACKWARD ? "bwd" : "fwd", plan);
        nj_buf_printf(&b, "templates %s\ncompiler %s\ntarget %s\nformat %d\n", nj_template_set_hash(),
                      ctx->backend->ops->compiler(ctx->backend), ctx->backend->ops->target(ctx->backend),
                      NJ_CACHE_FORMAT);
    } else {
        b.failed = true;
    }
    free(canon);
    free(plan);
    return nj_buf_take(&b);
}

/* Loads a binary and resolves every launch's kernel into ks. */
static nj_status nj_kernels_load(nj_context *ctx, nj_kernelset *ks, const void *bin, size_t size)
{
    nj_backend *b = ctx->backend;
    NJ_TRY(b->ops->load(b, bin, size, &ks->module));
    for (int32_t i = 0; i < ks->params.nlaunch; i++) {
        nj_status s = b->ops->function(b, ks->module, ks->params.launch[i].kernel, &ks->fn[i]);
        if (s != NJ_OK) {
            b->ops->unload(b, ks->module);
            ks->module = NULL;
            return s;
        }
    }
    return NJ_OK;
}

/* Renders and compiles; the binary goes to the disk cache (best effort: a full disk only loses the entry). */
static nj_status nj_kernels_compile(nj_context *ctx, const nj_canon *c, const char *sig, nj_kernelset *ks,
                                    nj_compile_result *res)
{
    char *src = NULL;
    NJ_TRY(nj_codegen(c, &ks->params, &src));
    nj_status s = ctx->backend->ops->compile(ctx->backend, src, ks->params.launch[0].kernel,
                                             nj_plan_kernel_count(&ks->params), res);
    free(src);
    if (s != NJ_OK) {
        atomic_fetch_add(&ctx->compile_failures, 1);
        return nj_fail_context(s, "compiling %s", ks->hash);
    }
    atomic_fetch_add(&ctx->compiles, 1);
    nj_last_compile_ms = res->millis;
    nj_log(&ctx->log, NJ_LOG_INFO, "compiled %s in %.1f ms", ks->hash, res->millis);
    if (ctx->cache && !nj_cache_read_only(ctx->cache)) {
        char *meta = nj_launches_to_text(&ks->params);
        nj_status ps = meta ? nj_cache_put(ctx->cache, sig, nj_binary_ext(ctx), meta, res->bin.data, res->bin.size)
                            : NJ_ERR_OUT_OF_MEMORY;
        if (ps != NJ_OK) nj_log(&ctx->log, NJ_LOG_WARN, "cache store failed: %s", nj_last_error());
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

/* Builds ks (state 0, owned by the calling thread). */
static nj_status nj_kernels_build(nj_context *ctx, const nj_canon *c, const char *sig, nj_kernelset *ks, int load,
                                  int32_t *compiled)
{
    nj_cache_entry e;
    memset(&e, 0, sizeof e);
    int lock_fd = -1;
    nj_status s = NJ_OK;
    if (!nj_kernels_from_disk(ctx, sig, ks, &e)) {
        NJ_RETURN_IF(ctx->opts.flags & NJ_CTX_NO_COMPILE, NJ_ERR_NOT_CACHED,
                     "kernel %s is not in the cache (%s) and this context never compiles; run `normjit warmup`",
                     ks->hash, ctx->cache ? nj_cache_root(ctx->cache) : "memory only");
        /* Another process may be compiling the same key: wait for its lock, then look again. */
        if (ctx->cache && !nj_cache_read_only(ctx->cache) &&
            nj_cache_lock(ctx->cache, sig, NJ_LOCK_TIMEOUT_MS, &lock_fd) != NJ_OK) {
            nj_log(&ctx->log, NJ_LOG_WARN, "cache lock: %s; compiling anyway", nj_last_error());
            lock_fd = -1;
        }
        if (lock_fd >= 0 && nj_kernels_from_disk(ctx, sig, ks, &e)) {
            atomic_fetch_add(&ctx->hits_disk, 1);
        } else {
            atomic_fetch_add(&ctx->misses, 1);
            nj_compile_result res;
            memset(&res, 0, sizeof res);
            s = nj_kernels_compile(ctx, c, sig, ks, &res);
            if (lock_fd >= 0) nj_cache_unlock(ctx->cache, lock_fd);
            if (s == NJ_OK && compiled) (*compiled)++;
            if (s == NJ_OK && load) s = nj_kernels_load(ctx, ks, res.bin.data, res.bin.size);
            nj_binary_free(&res.bin);
            return s;
        }
        if (lock_fd >= 0) nj_cache_unlock(ctx->cache, lock_fd);
    } else {
        atomic_fetch_add(&ctx->hits_disk, 1);
    }
    if (load) s = nj_kernels_load(ctx, ks, e.payload, e.payload_size);
    nj_cache_entry_free(&e);
    return s;
}

static nj_kernelset *nj_kernelset_find(nj_context *ctx, const char *hash, int load)
{
    for (nj_kernelset *k = ctx->sets; k; k = k->next)
        if (strcmp(k->hash, hash) == 0 && (k->module || !load || k->state != 1)) return k;
    return NULL;
}

/* Waits for another thread's build of the same signature; replays its failure if it failed. */
static nj_status nj_kernelset_wait(nj_context *ctx, nj_kernelset *ks)
{
    while (ks->state == 0) pthread_cond_wait(&ctx->built, &ctx->lock);
    if (ks->state == 1) return NJ_OK;
    return nj_fail(ks->error, "%s", ks->error_detail ? ks->error_detail : "kernel build failed");
}

nj_status nj_kernels_for(nj_context *ctx, const nj_canon *full, nj_pass pass, nj_variant v, int load,
                         nj_kernelset **out, int32_t *compiled)
{
    nj_canon view; /* what this pass's kernels depend on: the signature, plan and source come from it */
    nj_canon_for_pass(full, pass, &view);
    const nj_canon *c = &view;
    nj_plan_params pp;
    NJ_TRY(nj_plan_variant(c, pass, v, &ctx->backend->props, &pp));
    char *sig = nj_signature_text(ctx, c, &pp);
    NJ_RETURN_IF(!sig, NJ_ERR_OUT_OF_MEMORY, "signature text");
    char hash[33];
    nj_hash_hex(sig, strlen(sig), hash);

    pthread_mutex_lock(&ctx->lock);
    nj_kernelset *ks = nj_kernelset_find(ctx, hash, load);
    if (ks && ks->state != 2) {
        nj_status s = nj_kernelset_wait(ctx, ks);
        pthread_mutex_unlock(&ctx->lock);
        free(sig);
        if (s == NJ_OK) atomic_fetch_add(&ctx->hits_memory, 1);
        *out = ks;
        return s;
    }
    ks = calloc(1, sizeof *ks);
    if (!ks) {
        pthread_mutex_unlock(&ctx->lock);
        free(sig);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "kernel set");
    }
    memcpy(ks->hash, hash, sizeof hash);
    ks->params = pp;
    ks->next = ctx->sets;
    ctx->sets = ks; /* visible as "being built": other threads wait instead of compiling again */
    pthread_mutex_unlock(&ctx->lock);

    nj_status s = nj_kernels_build(ctx, c, sig, ks, load, compiled);
    free(sig);

    pthread_mutex_lock(&ctx->lock);
    ks->error = s;
    if (s != NJ_OK) ks->error_detail = strdup(nj_last_error());
    ks->state = s == NJ_OK ? 1 : 2;
    pthread_cond_broadcast(&ctx->built);
    pthread_mutex_unlock(&ctx->lock);
    *out = ks;
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
