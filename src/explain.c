/* Text views of plans for `normjit plan`, logs and nj_plan_describe. */
#include "codegen.h"
#include "context_impl.h"

#include <stdlib.h>
#include <string.h>

void nj_pass_info_free(nj_pass_info *pi)
{
    if (!pi) return;
    free(pi->canon_text);
    free(pi->plan_text);
    free(pi->signature);
    free(pi->source);
    free(pi->libraries);
    memset(pi, 0, sizeof *pi);
}

static bool nj_cached(nj_context *ctx, const char *sig)
{
    nj_cache_entry e;
    memset(&e, 0, sizeof e);
    bool hit = ctx->cache && nj_cache_get(ctx->cache, sig, nj_binary_ext(ctx), &e) == NJ_OK;
    nj_cache_entry_free(&e);
    return hit;
}

/* The library modules a pass launches besides its own: their entries are needed too (warmup makes them). */
static char *nj_explain_libraries(nj_context *ctx, const nj_canon *c, const nj_plan_params *pp)
{
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_append(&b, "", 0);
    int32_t libs[NJ_MAX_LAUNCHES], n = nj_plan_libs(pp, libs);
    for (int32_t k = 0; k < n; k++) {
        int32_t lib = libs[k], dt = nj_lib_dtype(lib, c->dtype[NJ_OPD_PARAM]);
        nj_plan_params lp;
        char *sig = nj_lib_signature_text(ctx, lib, dt, &lp);
        if (!sig) {
            b.failed = true;
            break;
        }
        char hash[33];
        nj_hash_hex(sig, strlen(sig), hash);
        if (dt != NJ_DTYPE_NONE) nj_buf_printf(&b, "%s param=%s ", nj_lib_name(lib), nj_dtype_name((nj_dtype)dt));
        else nj_buf_printf(&b, "%s ", nj_lib_name(lib)); /* one module for every gamma dtype */
        nj_buf_printf(&b, "%s %s\n", hash, nj_cached(ctx, sig) ? "cached" : "not cached");
        free(sig);
    }
    return nj_buf_take(&b);
}

nj_status nj_context_explain(nj_context *ctx, const nj_problem_desc *p, nj_pass pass, int with_source,
                             nj_pass_info *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p || !out, NJ_ERR_NULL_POINTER, "nj_context_explain: NULL argument");
    memset(out, 0, sizeof *out);
    nj_canon full;
    NJ_TRY(nj_canonicalize(p, &full));
    nj_pass_plan *pl = malloc(sizeof *pl); /* a few kB: off the caller's stack */
    NJ_RETURN_IF(!pl, NJ_ERR_OUT_OF_MEMORY, "explain: plan");
    nj_status ps = nj_pass_plan_make(&full, pass, &ctx->backend->props, pl);
    if (ps != NJ_OK) {
        free(pl);
        return ps;
    }
    const nj_canon *c = &pl->view; /* as nj_kernels_for: the same signature and source */
    out->params = pl->main;
    out->canon_text = nj_canon_text(c);
    out->plan_text = nj_plan_text(&out->params);
    out->signature = nj_signature_text(ctx, c, &out->params);
    out->libraries = nj_explain_libraries(ctx, c, &out->params);
    if (!out->canon_text || !out->plan_text || !out->signature || !out->libraries) {
        free(pl);
        nj_pass_info_free(out);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "plan text");
    }
    nj_hash_hex(out->signature, strlen(out->signature), out->hash);
    out->cached = nj_cached(ctx, out->signature);
    nj_status s = with_source ? nj_codegen(c, &out->params, &out->source) : NJ_OK;
    free(pl);
    if (s != NJ_OK) nj_pass_info_free(out);
    return s;
}

nj_status nj_plan_describe(const nj_plan *plan, char *buf, size_t cap, size_t *len)
{
    nj_error_clear();
    NJ_RETURN_IF(!plan, NJ_ERR_NULL_POINTER, "nj_plan_describe: plan is NULL");
    nj_buf b;
    nj_buf_init(&b);
    char *canon = nj_canon_text(&plan->canon);
    nj_buf_printf(&b, "problem %s\nrows %lld\n", canon ? canon : "?", (long long)plan->rows);
    free(canon);
    for (int pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        const nj_pass_plan *pl = nj_plan_pass_plan(plan, (nj_pass)pass);
        if (pl->status != NJ_OK) continue;
        const nj_plan_params *pp = &pl->main;
        char *text = nj_plan_text(pp);
        nj_kernelset *ks = atomic_load(&((nj_plan *)plan)->pass[pass == NJ_PASS_BACKWARD][NJ_VARIANT_MAIN]);
        nj_buf_printf(&b, "%s %s [%s]\n", pass == NJ_PASS_FORWARD ? "fwd" : "bwd", text ? text : "?",
                      ks ? ks->hash : "not loaded");
        free(text);
        for (int32_t i = 0; i < pp->nlaunch; i++) {
            /* 0,0,0: no CUDA grid holds this many rows (launching fails with NJ_ERR_OVERFLOW) */
            uint32_t g[3] = {0, 0, 0};
            (void)nj_launch_grid(&pp->launch[i], plan->rows, plan->ctx->backend->props.max_grid_x, g);
            nj_buf_printf(&b, "  launch %s%s grid %u,%u,%u block %d,%d,%d shmem %u\n", pp->launch[i].kernel,
                          pp->launch[i].lib != NJ_LIB_NONE ? " (library)" : "", g[0], g[1], g[2], pp->launch[i].block[0],
                          pp->launch[i].block[1], pp->launch[i].block[2], pp->launch[i].shmem);
        }
    }
    char *text = nj_buf_take(&b);
    NJ_RETURN_IF(!text, NJ_ERR_OUT_OF_MEMORY, "plan description");
    nj_status s = nj_copy_out(text, buf, cap, len);
    free(text);
    return s;
}
