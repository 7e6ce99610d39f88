/* Private to src/cache*.c: the nj_cache struct, the entry file format, and the helpers the
 * maintenance and archive files share with the lookup path. Not an interface for other modules.
 * Layers, each calling only those below it: cache_file.c (format, paths, counters, directories) <-
 * cache_lock.c <- cache_maint.c (walk, usage, eviction) <- cache.c (open, get, put) <- cache_archive.c,
 * cache_remote.c. */
#ifndef NJ_CACHE_IMPL_H
#define NJ_CACHE_IMPL_H

#include "cache.h"

#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

/* Entry file header, little-endian, explicitly serialized:
 *   0 magic "NJCACHE1"   8 format u32   12 header size u32   16 signature length u32
 *  20 meta length u32   24 payload length u64   32 body checksum u64 (nj_hash64 of signature|meta|payload)
 *  40 header checksum u64 (nj_hash64 of bytes 0..39) */
#define NJ_CACHE_MAGIC "NJCACHE1"
#define NJ_CACHE_HEADER_SIZE 48u
#define NJ_CACHE_EXT_MAX 15u
/* Files larger than this are never read into memory, nor archive frames claiming more allocated: every
 * size read from a cache file or an archive is checked against it first, so memory stays bounded
 * whatever the input. The largest real entry (an emulator .so of a backward pass) is ~100 KiB. */
#define NJ_CACHE_ENTRY_MAX ((uint64_t)64 << 20)
/* A temp file older than this belongs to a writer that died; younger ones may still be in flight. */
#define NJ_CACHE_STALE_TEMP_NS (60ull * 1000000000ull)
#define NJ_CACHE_TEMP_PREFIX ".tmp-"

struct nj_cache {
    char root[PATH_MAX];
    char vdir[PATH_MAX]; /* root/v<format> */
    int read_only;
    uint64_t max_bytes;
    pthread_mutex_t mu; /* counters and the size estimate */
    pthread_mutex_t gc_mu; /* one eviction pass at a time per handle */
    nj_cache_counters counters;
    uint64_t total; /* running estimate of the bytes of all entries */
    size_t key_len; /* archive key (nj_cache_set_key); 0 = none */
    uint8_t key[NJ_CACHE_KEY_MAX];
    struct nj_remote *remote; /* shared tier behind this cache (cache_remote.c); NULL = none */
    nj_status remote_status;  /* why no tier when one was asked for */
};

/* A parsed entry image; pointers into the checked buffer. */
typedef struct nj_cache_view {
    const char *sig;
    uint32_t sig_len;
    const char *meta;
    uint32_t meta_len;
    const uint8_t *payload;
    uint64_t payload_len;
} nj_cache_view;

typedef enum nj_cache_counter {
    NJ_CC_HITS,
    NJ_CC_MISSES,
    NJ_CC_STORES,
    NJ_CC_EVICTIONS,
    NJ_CC_CORRUPT,
    NJ_CC_STORE_NOSPACE,
    NJ_CC_STORE_READ_ONLY,
    NJ_CC_STORE_OTHER,
    NJ_CC_LOCK_FALLBACKS,
    NJ_CC_UNTRUSTED
} nj_cache_counter;
NJ_HIDDEN void nj_cache_count(nj_cache *c, nj_cache_counter which, uint64_t n);
/* Adds delta (may be negative) to the size estimate, clamping at zero. */
NJ_HIDDEN void nj_cache_total_add(nj_cache *c, int64_t delta);
NJ_HIDDEN void nj_cache_total_set(nj_cache *c, uint64_t total);
NJ_HIDDEN uint64_t nj_cache_total_get(nj_cache *c);
/* Creates path and missing parents with mode 0700 (path is modified in place and restored). */
NJ_HIDDEN nj_status nj_cache_mkdirs(char *path);

/* Full verification of an entry image of n bytes. expect_sig NULL skips the signature comparison (the
 * caller then compares the name instead). NULL when valid, else a static reason. */
NJ_HIDDEN const char *nj_cache_check_image(const uint8_t *buf, size_t n, const char *expect_sig,
                                           nj_cache_view *v);
/* Header fields only (magic, format, sizes, header checksum) against a file of file_size bytes. */
NJ_HIDDEN const char *nj_cache_check_header(const uint8_t *hdr, uint64_t file_size, nj_cache_view *v);
NJ_HIDDEN int nj_cache_ext_ok(const char *ext);
/* "<hash>.<ext>" is an entry name: 32 lowercase hex, a dot, a valid ext. Writes the ext start. */
NJ_HIDDEN int nj_cache_entry_name(const char *name, const char **ext);
/* snprintf into a PATH_MAX buffer; -1 when the path does not fit. */
NJ_HIDDEN int nj_cache_pathf(char out[PATH_MAX], const char *fmt, ...) NJ_PRINTF(2, 3);
/* Entry path for a hash; 0 on success. */
NJ_HIDDEN int nj_cache_entry_path(const nj_cache *c, const char *hash, const char *ext, char out[PATH_MAX]);

/* Copies a verified view out; after a store, evicts beyond the bound (never the entry just stored). */
NJ_HIDDEN nj_status nj_cache_fill_entry(const nj_cache_view *v, nj_cache_entry *out);
NJ_HIDDEN void nj_cache_after_store(nj_cache *c, const char *hash, const char *ext);

/* Counts a store that failed with errno e (0: the root is read-only) under its reason. */
NJ_HIDDEN void nj_cache_count_store_failure(nj_cache *c, int e);

/* Directories below the root are only ever reached through these: the version directory opened with
 * O_NOFOLLOW, and each directory below it ("ab" shards, "locks") opened with openat + O_NOFOLLOW |
 * O_DIRECTORY. With create (writable root), a missing one is made, and a symlink or file in its place
 * is removed first (the link itself: nothing it points to is touched). -1 with errno on failure. */
NJ_HIDDEN int nj_cache_vdir_fd(const nj_cache *c);
NJ_HIDDEN int nj_cache_sub_fd(nj_cache *c, const char *name, int create);
/* Removes name below dfd: a file, or a directory tree (never following a symlink). 0 on success. */
NJ_HIDDEN int nj_cache_remove_at(int dfd, const char *name);
/* Removes the lock file of hash when no process holds it (after its entry went). */
NJ_HIDDEN void nj_cache_drop_lock(nj_cache *c, const char *hash);
/* Removes every lock file no process holds (gc, clear); *removed counts them. */
NJ_HIDDEN void nj_cache_sweep_locks(nj_cache *c, uint64_t *removed);

/* Reads a whole regular file opened as fd (st from fstat) into a malloc'd buffer; NULL with a reason. */
NJ_HIDDEN uint8_t *nj_cache_read_fd(int fd, const struct stat *st, const char **why);
/* Publishes an already-valid entry image atomically under hash/ext. *added gets the change in total bytes;
 * a failure is counted by reason (nj_cache_count_store_failure). */
NJ_HIDDEN nj_status nj_cache_publish_image(nj_cache *c, const char *hash, const char *ext, const uint8_t *img,
                                           size_t n, int64_t *added);
/* Writes an archive or a temp file completely; 0 on success, errno kept. */
NJ_HIDDEN int nj_cache_write_all(int fd, const void *data, size_t n);
NJ_HIDDEN int nj_cache_fsync_dir(const char *dir);

/* Directory walk over <vdir>/<2 hex>/: calls fn for every entry-named item (regular or not) with its shard
 * directory's fd and name (use openat/unlinkat on them; path is for messages), removing stale temp files
 * on the way when the root is writable. A shard that is a symlink is never entered (and is unlinked when
 * the root is writable). fn returns nonzero to stop. */
typedef int (*nj_cache_walk_fn)(void *user, int dfd, const char *name, const char *path, const char *ext,
                                const struct stat *st);
NJ_HIDDEN nj_status nj_cache_walk(nj_cache *c, nj_cache_walk_fn fn, void *user);
/* Evicts oldest entries until the total is <= bound, never touching keep (may be NULL). */
NJ_HIDDEN nj_status nj_cache_evict(nj_cache *c, uint64_t bound, const char *keep, uint64_t *evicted);

NJ_HIDDEN void nj_cache_put_u32(uint8_t *p, uint32_t v);
NJ_HIDDEN void nj_cache_put_u64(uint8_t *p, uint64_t v);
NJ_HIDDEN uint32_t nj_cache_get_u32(const uint8_t *p);
NJ_HIDDEN uint64_t nj_cache_get_u64(const uint8_t *p);

#endif
