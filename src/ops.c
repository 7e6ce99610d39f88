/* The operator API (include/normjit_ops.h): the few internals that only operators and the tool need, behind
 * one header and in this one file, so that internal renames are adapted here and nowhere else. Not exported
 * by the shared library (no NJ_API: -fvisibility=hidden keeps these names in the static archive only). */
#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include "cache_api.h"
#include "cache_remote.h"
#include "context.h"

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
    out->status = nj_cache_remote_usage(c, &out->values); /* leaves its detail in nj_last_error() */
    nj_remote_counters k;
    nj_remote_counters_get(r, &k);
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

nj_status nj_ops_cachedir_key_from_env(nj_cachedir *d)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_ops_cachedir_key_from_env: NULL handle");
    return nj_cache_key_from_env(nj_cachedir_cache(d));
}
