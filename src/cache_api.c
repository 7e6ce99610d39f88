/* Public cache administration (nj_cachedir_*, include/normjit.h): a thin, checked layer over the disk cache
 * (cache.h, cache_maint.c, cache_archive.c) so that servers and the CLI administer a root without reaching
 * into the library's internals. */
#include "cache_api.h"

#include "context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct nj_cachedir {
    nj_cache *cache;
    int owned; /* opened here (closed with the handle), else borrowed from a context */
};

nj_status nj_cachedir_open(const char *root, uint32_t flags, nj_cachedir **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "nj_cachedir_open: NULL out");
    *out = NULL;
    NJ_RETURN_IF(flags & ~NJ_CACHEDIR_READ_ONLY, NJ_ERR_BAD_FLAGS, "nj_cachedir_open: unknown flags 0x%x",
                 (unsigned)(flags & ~NJ_CACHEDIR_READ_ONLY));
    char *path = nj_cache_default_root(root);
    NJ_RETURN_IF(!path, NJ_ERR_CACHE_IO, "no cache root: pass one, or set NORMJIT_CACHE_DIR or HOME");
    nj_cachedir *d = calloc(1, sizeof *d);
    if (!d) {
        free(path);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "nj_cachedir_open");
    }
    uint32_t of = (flags & NJ_CACHEDIR_READ_ONLY) ? NJ_CACHE_OPEN_READ_ONLY : 0;
    /* no size bound: administration must not evict as a side effect (trim does that on request) */
    nj_status s = nj_cache_open_ex(path, UINT64_MAX, of, &d->cache);
    free(path);
    if (s != NJ_OK) {
        free(d);
        return s;
    }
    d->owned = 1;
    *out = d;
    return NJ_OK;
}

nj_status nj_cachedir_from_context(nj_context *ctx, nj_cachedir **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !out, NJ_ERR_NULL_POINTER, "nj_cachedir_from_context: NULL argument");
    *out = NULL;
    nj_cache *c = nj_context_disk_cache(ctx);
    NJ_RETURN_IF(!c, NJ_ERR_CACHE_IO, "the context has no disk cache (it works in memory only)");
    nj_cachedir *d = calloc(1, sizeof *d);
    NJ_RETURN_IF(!d, NJ_ERR_OUT_OF_MEMORY, "nj_cachedir_from_context");
    d->cache = c;
    *out = d;
    return NJ_OK;
}

void nj_cachedir_close(nj_cachedir *d)
{
    if (!d) return;
    if (d->owned) nj_cache_close(d->cache);
    free(d);
}

const char *nj_cachedir_root(const nj_cachedir *d) { return d ? nj_cache_root(d->cache) : ""; }

nj_cache *nj_cachedir_cache(nj_cachedir *d) { return d ? d->cache : NULL; }

/* ---- stats ---- */

static void nj_cachedir_age_cb(void *user, const char *path, const char *signature, uint64_t bytes, int64_t mtime,
                               nj_status vs, int removed)
{
    nj_cachedir_stats *st = user;
    if (!st->entries || mtime < st->oldest) st->oldest = mtime;
    if (!st->entries || mtime > st->newest) st->newest = mtime;
    st->entries++;
    st->bytes += bytes;
}

nj_status nj_cachedir_stats_get(nj_cachedir *d, nj_cachedir_stats *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !out, NJ_ERR_NULL_POINTER, "nj_cachedir_stats_get: NULL argument");
    size_t want = out->struct_size;
    NJ_RETURN_IF(want < offsetof(nj_cachedir_stats, untrusted) + sizeof(uint64_t), NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_cachedir_stats_get: struct_size %zu (set it to sizeof(nj_cachedir_stats))", want);
    nj_cachedir_stats st;
    memset(&st, 0, sizeof st);
    /* the scan visits what nj_cache_usage counts, and gives the ages with it */
    NJ_TRY(nj_cache_scan(d->cache, 0, nj_cachedir_age_cb, &st));
    st.read_only = nj_cache_read_only(d->cache);
    st.format = NJ_CACHE_FORMAT;
    nj_cache_counters k;
    nj_cache_counters_get(d->cache, &k);
    st.hits = k.hits;
    st.misses = k.misses;
    st.stores = k.stores;
    st.evictions = k.evictions;
    st.corrupt = k.corrupt;
    st.not_stored_nospace = k.store_nospace;
    st.not_stored_read_only = k.store_read_only;
    st.not_stored_other = k.store_other;
    st.lock_fallbacks = k.lock_fallbacks;
    st.untrusted = k.untrusted;
    memcpy(out, &st, want < sizeof st ? want : sizeof st);
    out->struct_size = (uint32_t)want;
    return NJ_OK;
}

/* ---- list and verify ---- */

typedef struct nj_cachedir_walk {
    nj_cachedir_visit_fn visit;
    void *user;
    int stopped;
    uint64_t checked, bad;
} nj_cachedir_walk;

/* The hash is the file name without its directory and extension; the kind is the extension. */
static void nj_cachedir_name_parts(const char *path, char *hash, size_t cap, const char **kind)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strcspn(b, ".");
    snprintf(hash, cap, "%.*s", (int)n, b);
    *kind = b[n] ? b + n + 1 : "";
}

static void nj_cachedir_visit_cb(void *user, const char *path, const char *signature, uint64_t bytes, int64_t mtime,
                                 nj_status vs, int removed)
{
    nj_cachedir_walk *w = user;
    w->checked++;
    w->bad += vs != NJ_OK;
    if (!w->visit || w->stopped) return;
    char hash[80];
    nj_cachedir_entry e = {.path = path, .hash = hash, .signature = signature, .bytes = bytes, .mtime = mtime,
                           .status = vs, .removed = removed};
    nj_cachedir_name_parts(path, hash, sizeof hash, &e.kind);
    w->stopped = w->visit(w->user, &e) != 0;
}

nj_status nj_cachedir_list(nj_cachedir *d, nj_cachedir_visit_fn visit, void *user)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !visit, NJ_ERR_NULL_POINTER, "nj_cachedir_list: NULL argument");
    nj_cachedir_walk w = {visit, user, 0, 0, 0};
    return nj_cache_scan(d->cache, 0, nj_cachedir_visit_cb, &w);
}

nj_status nj_cachedir_verify(nj_cachedir *d, nj_cachedir_visit_fn visit, void *user, uint64_t *checked,
                             uint64_t *bad)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_cachedir_verify: NULL handle");
    nj_cachedir_walk w = {visit, user, 0, 0, 0};
    nj_status s = nj_cache_scan(d->cache, 1, nj_cachedir_visit_cb, &w);
    if (checked) *checked = w.checked;
    if (bad) *bad = w.bad;
    return s;
}

/* ---- trim, clear, archives ---- */

nj_status nj_cachedir_trim(nj_cachedir *d, uint64_t max_bytes, uint64_t *evicted)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_cachedir_trim: NULL handle");
    uint64_t n = 0;
    nj_status s = nj_cache_gc(d->cache, max_bytes, &n);
    if (evicted) *evicted = n;
    return s;
}

nj_status nj_cachedir_clear(nj_cachedir *d)
{
    nj_error_clear();
    NJ_RETURN_IF(!d, NJ_ERR_NULL_POINTER, "nj_cachedir_clear: NULL handle");
    return nj_cache_clear(d->cache);
}

nj_status nj_cachedir_set_key(nj_cachedir *d, const void *key, size_t bytes)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !key, NJ_ERR_NULL_POINTER, "nj_cachedir_set_key: NULL argument");
    return nj_cache_set_key(d->cache, key, bytes);
}

nj_status nj_cachedir_export(nj_cachedir *d, const char *file, uint64_t *count)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !file, NJ_ERR_NULL_POINTER, "nj_cachedir_export: NULL argument");
    uint64_t n = 0;
    nj_status s = nj_cache_export(d->cache, file, &n);
    if (count) *count = n;
    return s;
}

nj_status nj_cachedir_import(nj_cachedir *d, const char *file, uint64_t *count, uint64_t *rejected)
{
    nj_error_clear();
    NJ_RETURN_IF(!d || !file, NJ_ERR_NULL_POINTER, "nj_cachedir_import: NULL argument");
    uint64_t n = 0, m = 0;
    nj_status s = nj_cache_import(d->cache, file, &n, &m);
    if (count) *count = n;
    if (rejected) *rejected = m;
    return s;
}
