/* Shared cache tier on Redis behind the disk cache (src/cache_remote.c; README "Fleet cache (Redis)").
 * Values are whole entry images (the disk format of cache_impl.h) under "<prefix><hash>.<ext>"; a value read
 * back is untrusted and goes through the disk cache's own verifier (full signature compared, checksums, size
 * bound) before it is published to the local disk and used. Fail-open and bounded: every Redis command runs
 * under a timeout (connect and reply, 50 ms by default); after a failure the connection is dropped and not
 * tried again until a backoff passes (doubling up to a bound), so a Redis that is down, slow or silent costs
 * a call at most about one timeout per backoff period and never fails it. Errors are counted, logged once per
 * outage through the context's logger. Single flight across hosts: a lock key "<prefix>lock:<hash>" taken
 * with SET NX PX; the others wait (bounded) for the value and then fall back to compiling.
 *
 * URL: redis://[:password@]host:port[/db][?prefix=P&ttl=S&max_bytes=N&timeout_ms=T&lock_ms=L&wait_ms=W
 *      &backoff_ms=B] — ttl 0 (default) keeps values forever; max_bytes bounds a value (default 8 MiB). */
#ifndef NJ_CACHE_REMOTE_H
#define NJ_CACHE_REMOTE_H

#include "cache.h"

typedef struct nj_remote nj_remote;

typedef struct nj_remote_config {
    char host[256];
    char password[256];
    char prefix[128];
    int32_t port, db;
    int64_t ttl_s;
    uint64_t max_bytes;
    int32_t timeout_ms, lock_ms, wait_ms, backoff_ms;
} nj_remote_config;
#define NJ_REMOTE_DEFAULT_TIMEOUT_MS 50
#define NJ_REMOTE_DEFAULT_MAX_BYTES ((uint64_t)8 << 20)

/* hits: values fetched and verified; misses: absent; rejected: refused by verification (wrong signature,
 * bad checksum, truncated) or over max_bytes; errors: failed commands and connects; skipped: operations not
 * tried while backed off; lock_waits: waits for another host's compile; lock_fallbacks: waits given up. */
typedef struct nj_remote_counters {
    uint64_t hits, misses, rejected, stores, errors, skipped, lock_waits, lock_fallbacks;
} nj_remote_counters;

/* Parses a redis:// URL; NJ_ERR_BAD_ARGUMENT with the reason. */
NJ_HIDDEN nj_status nj_remote_parse(const char *url, nj_remote_config *cfg);
/* Opens the tier (no connection yet: the first use connects). NJ_ERR_UNSUPPORTED when built without hiredis.
 * log may be NULL (nothing logged). */
NJ_HIDDEN nj_status nj_remote_open(const char *url, const nj_logger *log, nj_remote **out);
NJ_HIDDEN void nj_remote_close(nj_remote *r);
NJ_HIDDEN void nj_remote_counters_get(nj_remote *r, nj_remote_counters *out);
/* Status of the last operation that talked to Redis (NJ_OK, or NJ_ERR_CACHE_IO while it is unreachable). */
NJ_HIDDEN nj_status nj_remote_status(nj_remote *r);
NJ_HIDDEN const nj_remote_config *nj_remote_config_of(const nj_remote *r);

/* The cache owns an attached tier (closed with it). From then on a local miss of nj_cache_get asks Redis
 * and nj_cache_put publishes there too. */
NJ_HIDDEN void nj_cache_attach_remote(nj_cache *c, nj_remote *r);
NJ_HIDDEN nj_remote *nj_cache_remote(nj_cache *c);
/* Called by nj_cache_get on a local miss: fetch, verify, publish to the disk, fill out. NJ_ERR_NOT_CACHED
 * on any failure (counted). */
NJ_HIDDEN nj_status nj_cache_remote_get(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out);
/* Called by nj_cache_put with the entry image in parts: SET NX (with the TTL). Never fails the caller. */
NJ_HIDDEN void nj_cache_remote_put(nj_cache *c, const char *hash, const char *ext, const void *hdr, size_t hdr_len,
                                   const char *sig, size_t sig_len, const char *meta, size_t meta_len,
                                   const void *payload, size_t payload_len);
/* Single flight across hosts, around a compile. Returns 1 when the caller should look up again before
 * compiling (another host published meanwhile, or this process now holds the lock and another may have
 * published before it); 0 when Redis is not in use. Pair with nj_cache_fleet_unlock (safe either way). */
NJ_HIDDEN int nj_cache_fleet_lock(nj_cache *c, const char *signature, const char *ext);
/* how: what nj_cache_fleet_lock returned; releases the lock only when this process holds it. */
NJ_HIDDEN void nj_cache_fleet_unlock(nj_cache *c, const char *signature, int how);

/* Context set-up: url (options.remote_cache) or else NORMJIT_REMOTE_CACHE; nothing when neither is set. A
 * bad URL or a build without hiredis is logged and kept as the tier's status (nj_context_remote_cache_stats);
 * the context works on without it. */
NJ_HIDDEN void nj_cache_remote_setup(nj_cache *c, const char *url, const nj_logger *log);

/* `normjit cache push` / `pull`: every valid local entry to Redis (SET NX); every value under the prefix
 * from Redis, verified, to the disk. *rejected counts values refused by verification. */
NJ_HIDDEN nj_status nj_cache_remote_push(nj_cache *c, uint64_t *pushed);
NJ_HIDDEN nj_status nj_cache_remote_pull(nj_cache *c, uint64_t *pulled, uint64_t *rejected);
/* Values under the prefix (SCAN), for `normjit cache stats`. */
NJ_HIDDEN nj_status nj_cache_remote_usage(nj_cache *c, uint64_t *values);

#endif
