/* On-disk kernel cache (src/cache.c): signature -> entry file, as in docs/design.md "Signature and cache".
 * Entry: <root>/v<NJ_CACHE_FORMAT>/<2 hex>/<hash>.<ext>, hash = nj_hash_hex(signature).
 * Holds header (magic, format, lengths, checksums), the signature text, metadata text (launches), binary.
 * Publish: temp file in the same directory, fsync, rename. Read: verify everything; a bad entry is a
 * miss and is removed. Cross-process: per-key lock file (flock) with a timeout; look again after taking it.
 * Bounded: total size limit with LRU eviction (entry mtime is touched on hit). Root safety: dirs 0700,
 * files 0600; a root owned by another user, writable by group/others, or a symlink is refused
 * (NJ_ERR_CACHE_UNSAFE) and the caller carries on in memory. A read-only root serves hits. Below the
 * root nothing is reached through a symlink (openat + O_NOFOLLOW at every level). Locks: cache_lock.c;
 * maintenance: cache_maint.c; signed archives: cache_archive.c. */
#ifndef NJ_CACHE_H
#define NJ_CACHE_H

#include "internal.h"

#define NJ_CACHE_FORMAT 1

typedef struct nj_cache nj_cache;

typedef struct nj_cache_entry {
    char *signature; /* malloc'd */
    char *meta;      /* malloc'd, NUL-terminated */
    void *payload;   /* malloc'd */
    size_t payload_size;
} nj_cache_entry;
NJ_HIDDEN void nj_cache_entry_free(nj_cache_entry *e);

/* store_*: entries that could not be stored, by reason (no space or quota; a read-only root or file
 * system; anything else). lock_fallbacks: lock waits given up (timeout, or a stopped holder), after
 * which the caller compiles without the lock. untrusted: archive entries refused by authentication. */
typedef struct nj_cache_counters {
    uint64_t hits, misses, stores, evictions, corrupt;
    uint64_t store_nospace, store_read_only, store_other, lock_fallbacks, untrusted;
} nj_cache_counters;

/* Opens (creating with 0700) root. NJ_ERR_CACHE_UNSAFE / NJ_ERR_CACHE_IO with the path in the detail.
 * max_bytes 0 means the default bound (NJ_CACHE_DEFAULT_MAX_BYTES). Caller closes. */
NJ_HIDDEN nj_status nj_cache_open(const char *root, uint64_t max_bytes, nj_cache **out);
#define NJ_CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30)
/* Flags for nj_cache_open_ex. READ_ONLY: never write to the root (a shipped image, `normjit cache ls`);
 * a root that has no write permission or sits on a read-only file system is read-only anyway. */
#define NJ_CACHE_OPEN_READ_ONLY 1u
NJ_HIDDEN nj_status nj_cache_open_ex(const char *root, uint64_t max_bytes, uint32_t flags, nj_cache **out);
NJ_HIDDEN void nj_cache_close(nj_cache *c);
NJ_HIDDEN const char *nj_cache_root(const nj_cache *c);
NJ_HIDDEN int nj_cache_read_only(const nj_cache *c);

/* Root from the rules: explicit, else NORMJIT_CACHE_DIR, else $XDG_CACHE_HOME/normjit, else
 * $HOME/.cache/normjit. Caller frees. */
NJ_HIDDEN char *nj_cache_default_root(const char *explicit_root);

/* Looks up; NJ_ERR_NOT_CACHED on a miss (including an entry that failed verification, which is removed
 * and counted as corrupt). ext names the binary kind ("cubin", "ptx", "so"). */
NJ_HIDDEN nj_status nj_cache_get(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out);
/* Publishes atomically, then evicts least recently used entries beyond the size bound. */
NJ_HIDDEN nj_status nj_cache_put(nj_cache *c, const char *signature, const char *ext, const char *meta,
                                 const void *payload, size_t payload_size);

/* Removes the entry of signature/ext (one that verified but failed at use: a loader refused it), so the
 * next lookup misses and the kernel is rebuilt instead of served again. */
NJ_HIDDEN nj_status nj_cache_drop(nj_cache *c, const char *signature, const char *ext);

/* Cross-process per-key lock (blocking up to timeout_ms, negative = no limit; NJ_ERR_LOCK_TIMEOUT).
 * The holder writes its pid and start time into the lock file; a waiter gives up at once when that
 * holder is stopped (SIGSTOP, a debugger), as it does at the timeout, and counts a lock fallback. A dead
 * holder releases its flock with its last fd. A lock file unlinked by gc/clear while being waited on is
 * noticed after taking it (inode check) and opened again.
 * Pass the fd to unlock. On a read-only root where no lock file exists, *lock_fd is -1 (nothing to
 * take: this process cannot publish anyway) and unlock(-1) does nothing. */
NJ_HIDDEN nj_status nj_cache_lock(nj_cache *c, const char *signature, int32_t timeout_ms, int *lock_fd);
NJ_HIDDEN void nj_cache_unlock(nj_cache *c, int lock_fd);
/* The lock wait bound: NORMJIT_CACHE_LOCK_TIMEOUT_MS when set (0 and up), else 30 s. */
#define NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS 30000
NJ_HIDDEN int32_t nj_cache_lock_timeout_ms(void);

NJ_HIDDEN void nj_cache_counters_get(nj_cache *c, nj_cache_counters *out);

/* Test hook (tests only; NULL in normal use): put calls it once with the temp file's path after half of
 * the entry bytes are written, so a test can kill the writer mid-publish. */
NJ_HIDDEN extern void (*nj_cache_test_mid_write_hook)(const char *temp_path);

/* Maintenance (used by the tool). Stale temp files (older than a minute) are removed on the way.
 * visit gets path and signature (NULL when unreadable) valid during the call; mtime in seconds;
 * removed: a bad entry was actually deleted (0 on a read-only root, or when the removal failed). */
typedef void (*nj_cache_visit_fn)(void *user, const char *path, const char *signature, uint64_t bytes,
                                  int64_t mtime, nj_status verify_status, int removed);
/* Visits every entry; with verify, fully verifies each and removes bad ones (reported to visit). */
NJ_HIDDEN nj_status nj_cache_scan(nj_cache *c, int verify, nj_cache_visit_fn visit, void *user);
NJ_HIDDEN nj_status nj_cache_gc(nj_cache *c, uint64_t max_bytes, uint64_t *evicted);
NJ_HIDDEN nj_status nj_cache_clear(nj_cache *c);
NJ_HIDDEN nj_status nj_cache_usage(nj_cache *c, uint64_t *bytes, uint64_t *entries);
/* One-file archive of every valid entry, each entry signed with HMAC-SHA256 under the cache key, and its
 * import: each entry's tag checked against the key before anything else, then re-verified. Both need a
 * key (nj_cache_set_key, else nj_cache_key_from_env): without one, NJ_ERR_CACHE_UNTRUSTED. Import goes
 * on past a bad entry; it returns NJ_ERR_CACHE_UNTRUSTED when any entry was forged (tag mismatch),
 * NJ_ERR_CACHE_IO when any authentic entry could not be stored (counted by reason in the counters),
 * NJ_ERR_CACHE_CORRUPT for a damaged archive. *rejected counts forged and damaged entries. */
NJ_HIDDEN nj_status nj_cache_export(nj_cache *c, const char *file, uint64_t *count);
NJ_HIDDEN nj_status nj_cache_import(nj_cache *c, const char *file, uint64_t *count, uint64_t *rejected);
/* The archive key: 16 to 4096 bytes, copied. */
#define NJ_CACHE_KEY_MIN 16u
#define NJ_CACHE_KEY_MAX 4096u
NJ_HIDDEN nj_status nj_cache_set_key(nj_cache *c, const void *key, size_t n);
/* Loads the key from NORMJIT_CACHE_KEY_FILE (a file of this user, not readable by group or others; its
 * bytes are the key) or else NORMJIT_CACHE_KEY (the string's bytes). NJ_ERR_CACHE_UNTRUSTED when
 * neither is set, NJ_ERR_CACHE_UNSAFE for a key file others can read. */
NJ_HIDDEN nj_status nj_cache_key_from_env(nj_cache *c);

#endif
