/* The operator API (include/normjit_ops.h): the few internals that only operators and the tool need, behind
 * one header and in this one file, so that internal renames are adapted here and nowhere else. Not exported
 * by the shared library (no NJ_API: -fvisibility=hidden keeps these names in the static archive only). */
#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include "cache_api.h"
#include "cache_remote.h"
#include "codegen.h"
#include "compile.h"
#include "context.h"
#include "planner.h"
#include "reference.h"
#include "vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Redis tier of a cache root ---- */

nj_status nj_ops_cachedir_attach_remote(nj_cachedir *d, const char *url)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !url, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_attach_remote: NULL argument");
    nj_cache *c = nj_cachedir_cache(d);
    NJ_RETURN_IF(nj_cache_remote(c), NJ_ERR_BAD_ARGUMENT, "a Redis tier is attached already");
    nj_remote *r = NULL;
    NJ_TRY(nj_remote_open(url, NULL, &r));
    nj_cache_attach_remote(c, r);
    return NJ_OK;
}

nj_status nj_ops_cachedir_remote_info(nj_cachedir *d, nj_ops_remote_info *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !out, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_remote_info: NULL argument");
    memset(out, 0, sizeof *out);
    nj_cache *c = nj_cachedir_cache(d);
    nj_remote *r = nj_cache_remote(c);
    NJ_RETURN_IF(!r, NJ_ERR_UNSUPPORTED, "no Redis tier attached");
    const nj_remote_config *cfg = nj_remote_config_of(r);
    snprintf(out->host, sizeof out->host, "%s", cfg->host);
    snprintf(out->prefix, sizeof out->prefix, "%s", cfg->prefix);
    out->port = cfg->port;
    out->db = cfg->db;
    nj_remote_counters k; /* before the count below, whose own commands would show in them */
    nj_remote_counters_get(r, &k);
    out->status = nj_cache_remote_usage(c, &out->values); /* leaves its detail in nj_last_error() */
    nj_remote_cache_stats *st = &out->counters;
    st->struct_size = sizeof *st;
    st->enabled = 1;
    st->status = nj_remote_status(r);
    st->hits = k.hits;
    st->misses = k.misses;
    st->rejected = k.rejected;
    st->stores = k.stores;
    st->errors = k.errors;
    st->skipped = k.skipped;
    st->lock_waits = k.lock_waits;
    st->lock_fallbacks = k.lock_fallbacks;
    return NJ_OK;
}

nj_status nj_ops_cachedir_push(nj_cachedir *d, uint64_t *pushed)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_push: NULL handle");
    uint64_t n = 0;
    nj_status s = nj_cache_remote_push(nj_cachedir_cache(d), &n);
    if (pushed) *pushed = n;
    return s;
}

nj_status nj_ops_cachedir_pull(nj_cachedir *d, uint64_t *pulled, uint64_t *rejected)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_pull: NULL handle");
    uint64_t n = 0, bad = 0;
    nj_status s = nj_cache_remote_pull(nj_cachedir_cache(d), &n, &bad);
    if (pulled) *pulled = n;
    if (rejected) *rejected = bad;
    return s;
}

nj_status nj_ops_cachedir_lookup(nj_cachedir *d, const char *signature, const char *kind)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !signature || !kind, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_lookup: NULL argument");
    nj_cache_entry e;
    memset(&e, 0, sizeof e);
    nj_status s = nj_cache_get(nj_cachedir_cache(d), signature, kind, &e);
    if (s == NJ_OK) nj_cache_entry_free(&e);
    return s;
}

nj_status nj_ops_cachedir_key_from_env(nj_cachedir *d)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_key_from_env: NULL handle");
    return nj_cache_key_from_env(nj_cachedir_cache(d));
}

/* ---- plans explained ---- */

nj_status nj_ops_explain(nj_context *ctx, const nj_problem_desc *p, nj_pass pass, int with_source,
                         nj_ops_pass_info *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p || !out, NJ_ERR_NULL_POINTER, "nj_ops_explain: NULL argument");
    memset(out, 0, sizeof *out);
    NJ_RETURN_IF(pass != NJ_PASS_FORWARD && pass != NJ_PASS_BACKWARD, NJ_ERR_BAD_ARGUMENT,
                 "nj_ops_explain: pass %d: one of NJ_PASS_FORWARD, NJ_PASS_BACKWARD", (int)pass);
    nj_pass_info pi;
    memset(&pi, 0, sizeof pi);
    NJ_TRY(nj_context_explain(ctx, p, pass, with_source, &pi));
    /* the strings change hands; the plan parameters stay inside */
    out->canon_text = pi.canon_text;
    out->plan_text = pi.plan_text;
    out->signature = pi.signature;
    out->source = pi.source;
    out->libraries = pi.libraries;
    memcpy(out->hash, pi.hash, sizeof out->hash);
    out->cached = pi.cached;
    out->kernels = nj_plan_kernel_count(&pi.params);
    return NJ_OK;
}

void nj_ops_pass_info_free(nj_ops_pass_info *pi)
{
    if (!pi) return;
    free(pi->canon_text);
    free(pi->plan_text);
    free(pi->signature);
    free(pi->source);
    free(pi->libraries);
    memset(pi, 0, sizeof *pi);
}

/* ---- compile timings ---- */

nj_status nj_ops_warm(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, int32_t *compiled, int32_t *cached)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p, NJ_ERR_NULL_POINTER, "nj_ops_warm: NULL argument");
    _Static_assert(NJ_OPS_WARM_MAIN == NJ_WARM_MAIN && NJ_OPS_WARM_UNALIGNED == NJ_WARM_UNALIGNED,
                   "operator warm bits are the context's");
    return nj_context_warm(ctx, p, passes, compiled, cached);
}

double nj_ops_last_compile_ms(void) { return nj_context_last_compile_ms(); }

/* Module i as (kernel, gamma dtype): kernels one a gamma dtype, or one in all. */
static int nj_ops_lib_at(int32_t i, int32_t *lib, int32_t *dtype)
{
    for (int32_t l = NJ_LIB_NONE + 1; l < NJ_LIB_COUNT; l++) {
        int32_t n = nj_lib_dtype(l, NJ_F32) == NJ_DTYPE_NONE ? 1 : (int32_t)nj_dtype_count(); /* vocab.c's dtypes */
        if (i < n) {
            *lib = l;
            *dtype = nj_lib_dtype(l, nj_dtype_at((size_t)i)->id);
            return 0;
        }
        i -= n;
    }
    return -1;
}

int32_t nj_ops_library_module_count(void)
{
    int32_t n = 0, lib, dt;
    while (nj_ops_lib_at(n, &lib, &dt) == 0) n++;
    return n;
}

nj_status nj_ops_library_module(int32_t i, char **name, char **source)
{
    nj_error_clear();
    NJ_RETURN_IF(!name || !source, NJ_ERR_NULL_POINTER, "nj_ops_library_module: NULL argument");
    *name = *source = NULL;
    int32_t lib = 0, dt = 0;
    NJ_RETURN_IF(i < 0 || nj_ops_lib_at(i, &lib, &dt) != 0, NJ_ERR_BAD_ARGUMENT,
                 "nj_ops_library_module: no module %d (there are %d)", (int)i, (int)nj_ops_library_module_count());
    nj_plan_params pp;
    NJ_TRY(nj_plan_library(lib, &pp));
    NJ_TRY(nj_codegen_library(&pp, dt, source));
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "%s_%s", nj_lib_name(lib), nj_dtype_name((nj_dtype)dt));
    *name = nj_buf_take(&b);
    if (!*name) {
        free(*source);
        *source = NULL;
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "nj_ops_library_module");
    }
    return NJ_OK;
}

nj_status nj_ops_nvrtc_compile(const char *source, const char *name, int32_t arch, int32_t kernels, double *millis)
{
    nj_error_clear();
    NJ_RETURN_IF(!source || !name, NJ_ERR_NULL_POINTER, "nj_ops_nvrtc_compile: NULL argument");
    nj_compile_result r;
    memset(&r, 0, sizeof r);
    nj_status s = nj_nvrtc_compile(source, name, arch, kernels, &r);
    nj_binary_free(&r.bin);
    if (millis) *millis = s == NJ_OK ? r.millis : 0.0;
    return s;
}

/* ---- double-precision reference ---- */

void nj_ops_ref_sizes(const nj_problem_desc *p, int64_t *numel, int64_t *kept, int64_t *feature)
{
    nj_ref_sizes(p, numel, kept, feature);
}

static void nj_ops_ref_convert(const nj_ops_ref_inputs *in, nj_ops_ref_outputs *out, nj_ref_inputs *ri,
                               nj_ref_outputs *ro)
{
    *ri = (nj_ref_inputs){.x = in->x, .residual = in->residual, .gamma = in->gamma, .beta = in->beta,
                          .dy = in->dy, .eps = in->eps};
    *ro = (nj_ref_outputs){.y = out->y, .residual_out = out->residual_out, .mean = out->mean, .rstd = out->rstd,
                           .dx = out->dx, .dgamma = out->dgamma, .dbeta = out->dbeta};
}

nj_status nj_ops_ref_forward(const nj_problem_desc *p, const nj_ops_ref_inputs *in, nj_ops_ref_outputs *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!p || !in || !out, NJ_ERR_NULL_POINTER, "nj_ops_ref_forward: NULL argument");
    nj_ref_inputs ri;
    nj_ref_outputs ro;
    nj_ops_ref_convert(in, out, &ri, &ro);
    return nj_ref_forward(p, &ri, &ro);
}

nj_status nj_ops_ref_backward(const nj_problem_desc *p, const nj_ops_ref_inputs *in, nj_ops_ref_outputs *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!p || !in || !out, NJ_ERR_NULL_POINTER, "nj_ops_ref_backward: NULL argument");
    nj_ref_inputs ri;
    nj_ref_outputs ro;
    nj_ops_ref_convert(in, out, &ri, &ro);
    return nj_ref_backward(p, &ri, &ro);
}

/* ---- dtypes ---- */

double nj_ops_dtype_load(nj_dtype d, const void *base, int64_t i)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t && base ? t->load(base, i) : 0.0;
}

void nj_ops_dtype_store(nj_dtype d, void *base, int64_t i, double v)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    if (t && base) t->store(base, i, v);
}

double nj_ops_dtype_unit_roundoff(nj_dtype d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->unit_roundoff : 0.0;
}

double nj_ops_dtype_out_tol(nj_dtype d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->out_tol : 0.0;
}
