/* normjit operator API: what only operators and the normjit tool need (the Redis tier's push and pull, plan
 * explanations, compile timings, the double-precision reference), beside the public API of normjit.h.
 *
 * Like zstd's advanced API, it is opt-in and not part of the stable ABI: define NJ_OPERATOR_API before
 * including this header, and link the static library (libnormjit.a). The shared library does not export
 * these names (cmake/check_exports.cmake checks that it exports exactly normjit.h's NJ_API functions), and
 * they may change in any release. */
#ifndef NORMJIT_OPS_H
#define NORMJIT_OPS_H

#ifndef NJ_OPERATOR_API
#error "normjit_ops.h is the operator API: define NJ_OPERATOR_API and link libnormjit.a (not in the stable ABI)"
#endif

#include "normjit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hidden in the shared library (it is built with -fvisibility=hidden): the names exist in the archive only. */
#define NJ_OPS

/* ---- The Redis tier of a cache root (README "Fleet cache (Redis)") ---- */

/* Attaches a tier to a handle opened with nj_cachedir_open: redis://[:password@]host:port[/db][?prefix=..].
 * NJ_ERR_UNSUPPORTED when built without hiredis, NJ_ERR_BAD_ARGUMENT for a bad URL. */
NJ_OPS nj_status nj_ops_cachedir_attach_remote(nj_cachedir *d, const char *url);
/* Where the attached tier is and this handle's counters of it. status: NJ_OK, or NJ_ERR_CACHE_IO while
 * it is unreachable; values: values under the prefix (counted now; 0 when unreachable). */
typedef struct nj_ops_remote_info {
    char host[256], prefix[128];
    int32_t port, db;
    nj_status status;
    uint64_t values;
    nj_remote_cache_stats counters; /* enabled, status, hits, ... as for a context */
} nj_ops_remote_info;
/* NJ_ERR_UNSUPPORTED when no tier is attached; otherwise NJ_OK, with an unreachable tier in status (and
 * its detail in nj_last_error()). */
NJ_OPS nj_status nj_ops_cachedir_remote_info(nj_cachedir *d, nj_ops_remote_info *out);
/* Every valid local entry to the tier (set-if-absent); every value of the tier, verified, to the disk
 * (*rejected counts values refused by verification). Both authenticate values with the cache key. */
NJ_OPS nj_status nj_ops_cachedir_push(nj_cachedir *d, uint64_t *pushed);
NJ_OPS nj_status nj_ops_cachedir_pull(nj_cachedir *d, uint64_t *pulled, uint64_t *rejected);
/* Loads the key from NORMJIT_CACHE_KEY_FILE or NORMJIT_CACHE_KEY now (export and import do it on demand). */
NJ_OPS nj_status nj_ops_cachedir_key_from_env(nj_cachedir *d);

#ifdef __cplusplus
}
#endif
#endif
