/* Context lifecycle, backend and cache selection, the plan table (lock-free reads), plan queries. */
#include "codegen.h"
#include "cache_remote.h"
#include "context_impl.h"
#include "async.h" /* serve hooks */
#include "generic.h" /* serve hooks */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void nj_context_options_init(nj_context_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

static nj_status nj_backend_pick(const nj_context_options *o, nj_backend_kind *kind)
{
    *kind = (nj_backend_kind)o->backend;
    if (*kind != NJ_BACKEND_AUTO) return NJ_OK;
    const char *env = getenv("NORMJIT_BACKEND");
    *kind = NJ_BACKEND_CUDA;
    if (!env || !*env || strcasecmp(env, "cuda") == 0) return NJ_OK;
    if (strcasecmp(env, "emulator") == 0 || strcasecmp(env, "emu") == 0) *kind = NJ_BACKEND_EMULATOR;
    else if (strcasecmp(env, "compile-only") == 0) *kind = NJ_BACKEND_COMPILE_ONLY;
    else return nj_fail(NJ_ERR_BAD_ARGUMENT, "NORMJIT_BACKEND=%s: expected cuda, emulator or compile-only", env);
    return NJ_OK;
}

static nj_status nj_backend_open(nj_context *ctx)
{
    nj_backend_kind kind;
    NJ_TRY(nj_backend_pick(&ctx->opts, &kind));
    nj_backend_config cfg = {ctx->opts.device, ctx->opts.arch, ctx->opts.flags, ctx->opts.seed};
    switch (kind) {
    case NJ_BACKEND_CUDA: return nj_backend_cuda_create(&cfg, &ctx->backend);
    case NJ_BACKEND_EMULATOR: return nj_backend_emu_create(&cfg, &ctx->backend);
    case NJ_BACKEND_COMPILE_ONLY:
        NJ_RETURN_IF(cfg.arch <= 0, NJ_ERR_BAD_ARGUMENT, "the compile-only backend needs options.arch (e.g. 90)");
        return nj_backend_compile_only_create(&cfg, &ctx->backend);
    default: return nj_fail(NJ_ERR_BAD_ARGUMENT, "options.backend = %d is not a backend", (int)kind);
    }
}

/* A refused or broken cache root is not fatal: the context carries on in memory and says why. */
static void nj_cache_setup(nj_context *ctx)
{
    if (ctx->opts.flags & NJ_CTX_NO_DISK_CACHE) return;
    char *root = nj_cache_default_root(ctx->opts.cache_dir);
    if (!root) {
        snprintf(ctx->cache_note, sizeof ctx->cache_note, "no cache root (HOME unset)");
        nj_log(&ctx->log, NJ_LOG_WARN, "disk cache off, working in memory: %s", ctx->cache_note);
        ctx->cache_status = NJ_ERR_CACHE_IO;
        return;
    }
    nj_status s = nj_cache_open(root, ctx->opts.cache_max_bytes, &ctx->cache);
    if (s != NJ_OK) {
        snprintf(ctx->cache_note, sizeof ctx->cache_note, "%s: %s", nj_status_name(s), nj_last_error());
        nj_log(&ctx->log, NJ_LOG_WARN, "disk cache off, working in memory: %s", ctx->cache_note);
        ctx->cache = NULL;
        ctx->cache_status = s;
        nj_error_clear();
    }
    nj_cache_remote_setup(ctx->cache, ctx->opts.remote_cache, &ctx->log); /* NULL cache: no tier */
    ctx->opts.remote_cache = NULL; /* copied: the caller's string may go */
    free(root);
}

static nj_plan_table *nj_table_new(size_t cap)
{
    nj_plan_table *t = calloc(1, sizeof *t);
    if (t) t->slots = calloc(cap, sizeof *t->slots);
    if (!t || !t->slots) {
        free(t);
        return NULL;
    }
    t->cap = cap;
    return t;
}

#define NJ_CTX_FLAGS_ALL                                                                                   \
    (NJ_CTX_NO_COMPILE | NJ_CTX_NO_DISK_CACHE | NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON | NJ_CTX_EMU_SMALL_GRID | \
     NJ_CTX_ASYNC_COMPILE)

/* Out-of-range options are caller bugs (an uninitialized field, a negative count): refused by name rather
 * than read as something else. */
static nj_status nj_options_check(const nj_context_options *o)
{
    NJ_RETURN_IF(o->struct_size != sizeof *o && o->struct_size != NJ_CONTEXT_OPTIONS_SIZE_V1 &&
                     o->struct_size != NJ_CONTEXT_OPTIONS_SIZE_V2,
                 NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_context_options.struct_size is %u, expected %zu (or %zu, before remote_cache, or %zu, before "
                 "max_background_compiles)",
                 o->struct_size, sizeof *o, (size_t)NJ_CONTEXT_OPTIONS_SIZE_V1, (size_t)NJ_CONTEXT_OPTIONS_SIZE_V2);
    /* serve hook: the pool's bound, read only where the caller's struct has it */
    int32_t bg = o->struct_size == sizeof *o ? o->max_background_compiles : 0;
    NJ_RETURN_IF(bg < 0 || bg > 64, NJ_ERR_BAD_ARGUMENT,
                 "nj_context_options.max_background_compiles = %d: 1 to 64, or 0 (one thread)", bg);
    NJ_RETURN_IF(o->flags & ~(uint32_t)NJ_CTX_FLAGS_ALL, NJ_ERR_BAD_FLAGS,
                 "nj_context_options.flags = 0x%x has unknown bits 0x%x", o->flags, o->flags & ~(uint32_t)NJ_CTX_FLAGS_ALL);
    NJ_RETURN_IF(o->backend < NJ_BACKEND_AUTO || o->backend > NJ_BACKEND_COMPILE_ONLY, NJ_ERR_BAD_ARGUMENT,
                 "nj_context_options.backend = %d is not an nj_backend_kind", o->backend);
    NJ_RETURN_IF(o->arch < 0 || o->arch > 1000, NJ_ERR_BAD_ARGUMENT,
                 "nj_context_options.arch = %d: an SM number such as 80 or 90, or 0", o->arch);
    NJ_RETURN_IF(o->device < 0, NJ_ERR_BAD_ARGUMENT, "nj_context_options.device = %d is negative", o->device);
    NJ_RETURN_IF(o->max_parallel_compiles < 0, NJ_ERR_BAD_ARGUMENT,
                 "nj_context_options.max_parallel_compiles = %d is negative (0 = number of cores)",
                 o->max_parallel_compiles);
    NJ_RETURN_IF(o->log_level < NJ_LOG_OFF || o->log_level > NJ_LOG_DEBUG, NJ_ERR_BAD_ARGUMENT,
                 "nj_context_options.log_level = %d is not an nj_log_level", o->log_level);
    return NJ_OK;
}

nj_status nj_context_create(const nj_context_options *opts, nj_context **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "nj_context_create: out is NULL");
    *out = NULL;
    if (opts) NJ_TRY(nj_options_check(opts));
    nj_context *ctx = calloc(1, sizeof *ctx);
    NJ_RETURN_IF(!ctx, NJ_ERR_OUT_OF_MEMORY, "context");
    nj_context_options_init(&ctx->opts);
    if (opts) memcpy(&ctx->opts, opts, opts->struct_size); /* an older, shorter struct: the rest as init'd */
    ctx->opts.struct_size = sizeof ctx->opts;
    ctx->opts.cache_dir = NULL;
    if (opts && opts->cache_dir) ctx->opts.cache_dir = ctx->cache_dir_copy = strdup(opts->cache_dir);
    ctx->log = (nj_logger){(nj_log_level)ctx->opts.log_level, ctx->opts.log_fn, ctx->opts.log_user};
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_cond_init(&ctx->built, NULL);
    atomic_init(&ctx->table, nj_table_new(64));
    const char *rec = getenv("NORMJIT_RECORD");
    if (rec && *rec) ctx->record_path = strdup(rec);
    nj_status s = atomic_load(&ctx->table) ? nj_backend_open(ctx) : nj_fail(NJ_ERR_OUT_OF_MEMORY, "plan table");
    if (s == NJ_OK) s = nj_serve_create(ctx); /* serve hook */
    if (s != NJ_OK) {
        nj_context_destroy(ctx);
        return s;
    }
    if (ctx->opts.max_parallel_compiles > 0) nj_nvrtc_set_parallelism(ctx->opts.max_parallel_compiles);
    ctx->dependent_launches = nj_dependent_launches(ctx->backend->props.arch);
    nj_cache_setup(ctx);
    *out = ctx;
    return NJ_OK;
}

static void nj_table_free(nj_plan_table *t, int free_plans)
{
    while (t) {
        nj_plan_table *older = t->retired;
        for (size_t i = 0; free_plans && i < t->cap; i++) free(atomic_load(&t->slots[i]));
        free(t->slots);
        free(t);
        t = older;
        free_plans = 0; /* retired tables hold the same plans */
    }
}

void nj_context_destroy(nj_context *ctx)
{
    if (!ctx) return;
    nj_serve_destroy(ctx); /* serve hook: drains the background pool, frees the generic sets */
    if (ctx->backend) nj_kernelsets_free(ctx);
    nj_table_free(atomic_load(&ctx->table), 1);
    if (ctx->backend) ctx->backend->ops->destroy(ctx->backend);
    nj_cache_close(ctx->cache);
    pthread_mutex_destroy(&ctx->lock);
    pthread_cond_destroy(&ctx->built);
    free(ctx->record_path);
    free(ctx->cache_dir_copy);
    free(ctx);
}

nj_backend_kind nj_context_backend(const nj_context *ctx)
{
    if (!ctx) return NJ_BACKEND_AUTO;
    return ctx->backend->ops->kind;
}

int32_t nj_context_arch(const nj_context *ctx) { return ctx ? ctx->backend->props.arch : 0; }
const char *nj_context_cache_dir(const nj_context *ctx) { return ctx && ctx->cache ? nj_cache_root(ctx->cache) : ""; }
nj_cache *nj_context_disk_cache(nj_context *ctx) { return ctx->cache; }

static nj_status context_cache_stats(nj_context *ctx, nj_cache_stats *out);

nj_status nj_context_cache_stats(nj_context *ctx, nj_cache_stats *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !out, NJ_ERR_NULL_POINTER, "nj_context_cache_stats: NULL argument");
    /* the first version with struct_size ends at disk_status; later fields are written only if they fit */
    size_t want = out->struct_size;
    NJ_RETURN_IF(want < offsetof(nj_cache_stats, disk_status) + sizeof(int32_t), NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_context_cache_stats: struct_size %zu (set it to sizeof(nj_cache_stats))", want);
    nj_cache_stats st;
    nj_status s = context_cache_stats(ctx, &st);
    memcpy(out, &st, want < sizeof st ? want : sizeof st);
    out->struct_size = (uint32_t)want;
    return s;
}

static nj_status context_cache_stats(nj_context *ctx, nj_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    out->hits_memory = atomic_load(&ctx->hits_memory);
    out->hits_disk = atomic_load(&ctx->hits_disk);
    out->misses = atomic_load(&ctx->misses);
    out->compiles = atomic_load(&ctx->compiles);
    out->compile_failures = atomic_load(&ctx->compile_failures);
    out->disk_status = ctx->cache_status;
    if (ctx->cache) {
        nj_cache_counters cc;
        nj_cache_counters_get(ctx->cache, &cc);
        out->evictions = cc.evictions;
        out->corrupt_entries = cc.corrupt;
        out->store_failures = cc.store_nospace + cc.store_read_only + cc.store_other;
        out->lock_fallbacks = cc.lock_fallbacks;
        return nj_cache_usage(ctx->cache, &out->disk_bytes, &out->disk_entries);
    }
    return NJ_OK;
}

/* ---- plan table ---- */

static nj_plan *nj_table_find(nj_plan_table *t, const void *key, uint32_t keylen, uint64_t h)
{
    for (size_t i = h & (t->cap - 1), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
        nj_plan *p = atomic_load_explicit(&t->slots[i], memory_order_acquire);
        if (!p) return NULL;
        if (p->keyhash == h && p->keylen == keylen && memcmp(p->key, key, keylen) == 0) return p;
    }
    return NULL;
}

static void nj_table_put(nj_plan_table *t, nj_plan *p)
{
    size_t i = p->keyhash & (t->cap - 1);
    while (atomic_load_explicit(&t->slots[i], memory_order_relaxed)) i = (i + 1) & (t->cap - 1);
    atomic_store_explicit(&t->slots[i], p, memory_order_release);
    t->count++;
}

/* Called with ctx->lock held. Grows at half full; the old table stays readable until destroy. */
static nj_status nj_table_insert(nj_context *ctx, nj_plan *p)
{
    nj_plan_table *t = atomic_load(&ctx->table);
    if ((t->count + 1) * 2 > t->cap) {
        nj_plan_table *bigger = nj_table_new(t->cap * 2);
        NJ_RETURN_IF(!bigger, NJ_ERR_OUT_OF_MEMORY, "plan table");
        for (size_t i = 0; i < t->cap; i++) {
            nj_plan *q = atomic_load(&t->slots[i]);
            if (q) nj_table_put(bigger, q);
        }
        bigger->retired = t;
        atomic_store_explicit(&ctx->table, bigger, memory_order_release);
        t = bigger;
    }
    nj_table_put(t, p);
    return NJ_OK;
}

/* NORMJIT_RECORD: one line per newly seen problem, appended with a single write so concurrent
 * processes interleave whole lines. */
static void nj_record(nj_context *ctx, const nj_problem_desc *p)
{
    char line[2048];
    size_t n = 0;
    if (nj_problem_to_text(p, line, sizeof line - 1, &n) != NJ_OK) return;
    line[n++] = '\n';
    int fd = open(ctx->record_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        nj_log(&ctx->log, NJ_LOG_WARN, "NORMJIT_RECORD: cannot open %s", ctx->record_path);
        return;
    }
    if (write(fd, line, n) != (ssize_t)n) nj_log(&ctx->log, NJ_LOG_WARN, "NORMJIT_RECORD: short write");
    close(fd);
}

static nj_status nj_plan_new(nj_context *ctx, const nj_problem_desc *p, const void *key, uint32_t keylen, uint64_t h, nj_plan **out)
{
    nj_plan *pl = calloc(1, sizeof *pl + keylen);
    NJ_RETURN_IF(!pl, NJ_ERR_OUT_OF_MEMORY, "plan");
    nj_status s = nj_canonicalize(p, &pl->canon);
    if (s != NJ_OK) {
        free(pl);
        return s;
    }
    pl->desc = *p;
    nj_canon_batch(&pl->canon, &pl->rows, pl->bstride);
    /* both passes now, read by everything after; a pass that cannot be planned fails only when asked for */
    for (int i = 0; i < 2; i++)
        (void)nj_pass_plan_make(&pl->canon, i ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD, &ctx->backend->props, &pl->plans[i]);
    nj_error_clear();
    pl->numel = 1;
    for (int32_t i = 0; i < p->x.rank; i++) pl->numel *= p->x.extents[i];
    pl->keylen = keylen;
    pl->keyhash = h;
    memcpy(pl->key, key, keylen);
    *out = pl;
    return NJ_OK;
}

/* Finds or inserts the plan object for a problem (no kernels yet). */
static nj_status nj_plan_lookup(nj_context *ctx, const nj_problem_desc *p, nj_plan **out)
{
    unsigned char key[NJ_PROBLEM_KEY_MAX];
    size_t keylen = nj_problem_key(p, key, sizeof key);
    NJ_RETURN_IF(keylen == 0 || keylen > sizeof key, NJ_ERR_INTERNAL, "problem key of %zu bytes", keylen);
    uint64_t h = nj_hash64(key, keylen);
    *out = nj_table_find(atomic_load_explicit(&ctx->table, memory_order_acquire), key, (uint32_t)keylen, h);
    if (*out) return NJ_OK;

    nj_plan *fresh = NULL;
    NJ_TRY(nj_plan_new(ctx, p, key, (uint32_t)keylen, h, &fresh));
    fresh->ctx = ctx;
    pthread_mutex_lock(&ctx->lock);
    nj_plan *raced = nj_table_find(atomic_load(&ctx->table), key, (uint32_t)keylen, h);
    nj_status s = raced ? NJ_OK : nj_table_insert(ctx, fresh);
    pthread_mutex_unlock(&ctx->lock);
    if (raced || s != NJ_OK) {
        free(fresh);
        *out = raced;
        return s;
    }
    if (ctx->record_path) nj_record(ctx, p);
    *out = fresh;
    return NJ_OK;
}

/* Kernels of a pass, built on first use (compile or disk). */
nj_status nj_plan_ensure(nj_plan *plan, nj_pass pass, nj_variant v, nj_kernelset **out)
{
    _Atomic(nj_kernelset *) *slot = &plan->pass[pass == NJ_PASS_BACKWARD][v];
    nj_kernelset *ks = atomic_load_explicit(slot, memory_order_acquire);
    if (!ks) {
        /* serve hook: async and no-compile contexts never compile here (they run the generic kernels) */
        if (nj_serve_active(plan->ctx)) return nj_serve_ensure(plan, pass, v, out);
        NJ_TRY(nj_kernels_for(plan->ctx, nj_plan_pass_plan(plan, pass), v, 1, &ks, NULL));
        atomic_store_explicit(slot, ks, memory_order_release);
    }
    *out = ks;
    return NJ_OK;
}

/* A context that never compiles serves requests that may be captured in a CUDA graph, where loading a
 * module is best avoided: it loads the unaligned variant now when the cache has it (warmup puts it
 * there). Missing, it is only reported if a misaligned call ever needs it. */
static void nj_plan_preload_unaligned(nj_plan *plan, nj_pass pass, const nj_kernelset *main)
{
    nj_kernelset *ks;
    if (!(plan->ctx->opts.flags & NJ_CTX_NO_COMPILE) || main->params.align_opds == 0) return;
    if (nj_plan_ensure(plan, pass, NJ_VARIANT_UNALIGNED, &ks) != NJ_OK) nj_error_clear();
}

static nj_status nj_warm_plans(nj_context *ctx, const nj_pass_plan plans[2], uint32_t passes, int32_t *compiled,
                               int32_t *cached);

nj_status nj_plan_get(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, nj_plan **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p || !out, NJ_ERR_NULL_POINTER, "nj_plan_get: ctx, problem and out are required");
    NJ_RETURN_IF(passes == 0 || passes & ~(uint32_t)(NJ_PASS_FORWARD | NJ_PASS_BACKWARD), NJ_ERR_BAD_ARGUMENT,
                 "passes = 0x%x: NJ_PASS_FORWARD, NJ_PASS_BACKWARD or both", passes);
    NJ_RETURN_IF(p->struct_size != sizeof *p, NJ_ERR_BAD_STRUCT_SIZE, "nj_problem_desc.struct_size is %u, expected %zu",
                 p->struct_size, sizeof *p);
    nj_plan *plan;
    NJ_TRY(nj_plan_lookup(ctx, p, &plan));
    if (nj_context_backend(ctx) == NJ_BACKEND_COMPILE_ONLY) {
        NJ_TRY(nj_warm_plans(ctx, plan->plans, passes, NULL, NULL));
        *out = plan;
        return NJ_OK;
    }
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        if (!(passes & pass)) continue;
        nj_kernelset *ks;
        NJ_TRY(nj_plan_ensure(plan, (nj_pass)pass, NJ_VARIANT_MAIN, &ks));
        nj_plan_preload_unaligned(plan, (nj_pass)pass, ks);
    }
    *out = plan;
    return NJ_OK;
}

/* Warms one variant of a planned pass; *done counts a compile, *total a kernel set that is distinct (a
 * library module counts where it is compiled: it is no problem's, and shared by most backward passes). */
static nj_status nj_warm_variant(nj_context *ctx, const nj_pass_plan *pl, nj_variant v, int32_t *done, int32_t *total)
{
    NJ_TRY(nj_pass_plan_status(pl));
    if (v == NJ_VARIANT_UNALIGNED && pl->main.align_opds == 0)
        return NJ_OK; /* the main kernels serve every argument */
    nj_kernelset *ks;
    nj_build_stats st = {0, 0};
    NJ_TRY(nj_kernels_for(ctx, pl, v, 0, &ks, &st));
    *done += st.compiled + st.lib_compiled;
    *total += 1 + st.lib_compiled;
    return NJ_OK;
}

/* nj_context_warm over the passes planned already (plans[0] forward, plans[1] backward). */
static nj_status nj_warm_plans(nj_context *ctx, const nj_pass_plan plans[2], uint32_t passes, int32_t *compiled,
                               int32_t *cached)
{
    uint32_t which = passes & (NJ_WARM_MAIN | NJ_WARM_UNALIGNED);
    if (!which) which = NJ_WARM_MAIN | NJ_WARM_UNALIGNED;
    int32_t done = 0, total = 0;
    for (int i = 0; i < 2; i++) {
        if (!(passes & (uint32_t)(i ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD))) continue;
        if (which & NJ_WARM_MAIN) NJ_TRY(nj_warm_variant(ctx, &plans[i], NJ_VARIANT_MAIN, &done, &total));
        if (which & NJ_WARM_UNALIGNED) NJ_TRY(nj_warm_variant(ctx, &plans[i], NJ_VARIANT_UNALIGNED, &done, &total));
    }
    if (compiled) *compiled = done;
    if (cached) *cached = total - done;
    return NJ_OK;
}

nj_status nj_context_warm(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, int32_t *compiled,
                          int32_t *cached)
{
    nj_canon c;
    NJ_TRY(nj_canonicalize(p, &c));
    nj_pass_plan *plans = calloc(2, sizeof *plans); /* a few kB each: off the caller's (thread's) stack */
    NJ_RETURN_IF(!plans, NJ_ERR_OUT_OF_MEMORY, "warm: plans");
    for (int i = 0; i < 2; i++)
        if (passes & (uint32_t)(i ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD))
            (void)nj_pass_plan_make(&c, i ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD, &ctx->backend->props, &plans[i]);
    nj_status s = nj_warm_plans(ctx, plans, passes, compiled, cached);
    free(plans);
    return s;
}

size_t nj_plan_workspace_size(const nj_plan *plan, nj_pass pass)
{
    if (!plan || (pass != NJ_PASS_FORWARD && pass != NJ_PASS_BACKWARD)) return 0;
    const nj_pass_plan *pl = nj_plan_pass_plan(plan, pass);
    if (pl->status != NJ_OK) return 0;
    /* the unaligned variant shares the main plan's workspace; within 64 bits: nj_plan_check */
    size_t ws = nj_plan_params_workspace(&pl->main, plan->rows);
    /* serve hook: a pass that may run the generic kernels needs their workspace too */
    size_t gws = nj_serve_active(plan->ctx) ? nj_generic_workspace(plan, pass) : 0;
    return ws > gws ? ws : gws;
}
