/* Cache maintenance: walking the entry tree, scan/verify, LRU eviction, clear, usage. */
#include "cache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t nj_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}


/* A temp file this old belongs to a writer that died (readers never open temp names). */
static void nj_cache_drop_stale_temp(nj_cache *c, int dfd, const char *name, int64_t now_ns)
{
    struct stat st;
    if (c->read_only || strncmp(name, NJ_CACHE_TEMP_PREFIX, strlen(NJ_CACHE_TEMP_PREFIX)) != 0) return;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (now_ns - nj_mtime_ns(&st) > (int64_t)NJ_CACHE_STALE_TEMP_NS) unlinkat(dfd, name, 0);
}

static int nj_cache_walk_sub(nj_cache *c, int dfd, const char *dir, nj_cache_walk_fn fn, void *user, int64_t now_ns)
{
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return 0;
    }
    int stop = 0;
    struct dirent *ent;
    while (!stop && (ent = readdir(d)) != NULL) {
        const char *name = ent->d_name, *ext = NULL;
        if (name[0] == '.') {
            nj_cache_drop_stale_temp(c, dfd, name, now_ns);
            continue;
        }
        struct stat st;
        char path[PATH_MAX];
        if (!nj_cache_entry_name(name, &ext) || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (nj_cache_pathf(path, "%s/%s", dir, name) != 0) continue;
        stop = fn(user, dfd, name, path, path + strlen(dir) + 34, &st);
    }
    closedir(d);
    return stop;
}

static int nj_is_hex2(const char *s)
{
    for (int i = 0; i < 2; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return s[2] == '\0';
}

/* Opens shard `name` below vfd; a symlink or file in a shard's place is never entered, and is unlinked
 * (the link, not its target) when the root is writable. -1 when there is nothing to walk. */
static int nj_cache_walk_shard_fd(nj_cache *c, int vfd, const char *name)
{
    int fd = openat(vfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR) && !c->read_only) (void)nj_cache_remove_at(vfd, name);
    return fd;
}

nj_status nj_cache_walk(nj_cache *c, nj_cache_walk_fn fn, void *user)
{
    int vfd = nj_cache_vdir_fd(c);
    if (vfd < 0) {
        if (errno == ENOENT) return NJ_OK;
        return nj_fail(errno == ELOOP || errno == ENOTDIR ? NJ_ERR_CACHE_UNSAFE : NJ_ERR_CACHE_IO,
                       "cache directory %s: %s", c->vdir, strerror(errno));
    }
    int top_fd = dup(vfd);
    DIR *top = top_fd >= 0 ? fdopendir(top_fd) : NULL;
    if (!top) {
        int e = errno;
        if (top_fd >= 0) close(top_fd);
        close(vfd);
        return nj_fail(NJ_ERR_CACHE_IO, "cache directory %s: %s", c->vdir, strerror(e));
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    struct dirent *ent;
    int stop = 0;
    while (!stop && (ent = readdir(top)) != NULL) {
        if (!nj_is_hex2(ent->d_name)) continue;
        int dfd = nj_cache_walk_shard_fd(c, vfd, ent->d_name);
        if (dfd < 0) continue;
        char dir[PATH_MAX];
        nj_cache_pathf(dir, "%s/%s", c->vdir, ent->d_name);
        stop = nj_cache_walk_sub(c, dfd, dir, fn, user, now_ns);
        close(dfd);
    }
    closedir(top);
    close(vfd);
    return NJ_OK;
}

/* ---- usage ---- */

typedef struct nj_usage_acc {
    uint64_t bytes, entries;
} nj_usage_acc;

static int nj_usage_cb(void *user, int dfd, const char *name, const char *path, const char *ext,
                       const struct stat *st)
{
    nj_usage_acc *a = user;
    if (S_ISREG(st->st_mode)) {
        a->bytes += (uint64_t)st->st_size;
        a->entries++;
    }
    return 0;
}

nj_status nj_cache_usage(nj_cache *c, uint64_t *bytes, uint64_t *entries)
{
    NJ_RETURN_IF(!c, NJ_ERR_NULL_POINTER, "nj_cache_usage: NULL cache");
    nj_usage_acc a = {0, 0};
    NJ_TRY(nj_cache_walk(c, nj_usage_cb, &a));
    nj_cache_total_set(c, a.bytes); /* a full count corrects the running estimate */
    if (bytes) *bytes = a.bytes;
    if (entries) *entries = a.entries;
    return NJ_OK;
}

/* ---- eviction ---- */

typedef struct nj_lru_item {
    char *path; /* for `keep`; removal goes by shard and name */
    char shard[3], name[64];
    uint64_t bytes;
    int64_t mtime_ns;
} nj_lru_item;

typedef struct nj_lru_list {
    nj_lru_item *items;
    size_t n, cap;
    uint64_t total;
    int failed;
} nj_lru_list;

static int nj_lru_cb(void *user, int dfd, const char *name, const char *path, const char *ext,
                     const struct stat *st)
{
    nj_lru_list *l = user;
    if (!S_ISREG(st->st_mode)) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        nj_lru_item *items = realloc(l->items, cap * sizeof *items);
        if (!items) return l->failed = 1;
        l->items = items;
        l->cap = cap;
    }
    char *p = strdup(path);
    if (!p) return l->failed = 1;
    nj_lru_item *it = &l->items[l->n++];
    *it = (nj_lru_item){.path = p, .bytes = (uint64_t)st->st_size, .mtime_ns = nj_mtime_ns(st)};
    memcpy(it->shard, name, 2);
    snprintf(it->name, sizeof it->name, "%s", name);
    l->total += (uint64_t)st->st_size;
    return 0;
}

static int nj_lru_cmp(const void *a, const void *b)
{
    const nj_lru_item *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns) return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return strcmp(x->path, y->path); /* a stable order for equal times */
}

static void nj_lru_free(nj_lru_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->items[i].path);
    free(l->items);
}

/* Removes the oldest entries; one that was touched since the listing (a hit in another process) stays. */
static uint64_t nj_lru_trim(nj_cache *c, nj_lru_list *l, uint64_t bound, const char *keep)
{
    uint64_t evicted = 0;
    for (size_t i = 0; i < l->n && l->total > bound; i++) {
        nj_lru_item *it = &l->items[i];
        struct stat st;
        if (keep && strcmp(it->path, keep) == 0) continue;
        int dfd = nj_cache_sub_fd(c, it->shard, 0);
        if (dfd < 0 || fstatat(dfd, it->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (dfd >= 0) close(dfd);
            l->total -= it->bytes; /* gone already */
            continue;
        }
        int gone = nj_mtime_ns(&st) == it->mtime_ns && unlinkat(dfd, it->name, 0) == 0;
        close(dfd);
        if (!gone) continue;
        nj_cache_drop_lock(c, it->name);
        l->total -= it->bytes;
        evicted++;
    }
    return evicted;
}

nj_status nj_cache_evict(nj_cache *c, uint64_t bound, const char *keep, uint64_t *evicted)
{
    *evicted = 0;
    NJ_RETURN_IF(c->read_only, NJ_ERR_CACHE_IO, "cache root %s is read-only; nothing evicted", c->root);
    pthread_mutex_lock(&c->gc_mu);
    nj_lru_list l = {0};
    nj_status s = nj_cache_walk(c, nj_lru_cb, &l);
    if (s == NJ_OK && l.failed) s = nj_fail(NJ_ERR_OUT_OF_MEMORY, "cache: out of memory listing entries");
    if (s == NJ_OK) {
        if (l.n) qsort(l.items, l.n, sizeof *l.items, nj_lru_cmp); /* qsort(NULL, 0) is undefined */
        *evicted = nj_lru_trim(c, &l, bound, keep);
        nj_cache_total_set(c, l.total);
        nj_cache_count(c, NJ_CC_EVICTIONS, *evicted);
    }
    nj_lru_free(&l);
    pthread_mutex_unlock(&c->gc_mu);
    return s;
}

nj_status nj_cache_gc(nj_cache *c, uint64_t max_bytes, uint64_t *evicted)
{
    NJ_RETURN_IF(!c, NJ_ERR_NULL_POINTER, "nj_cache_gc: NULL cache");
    uint64_t n = 0, locks = 0;
    nj_status s = nj_cache_evict(c, max_bytes, NULL, &n);
    if (evicted) *evicted = n;
    if (s == NJ_OK) nj_cache_sweep_locks(c, &locks); /* a lock file is cheap to recreate: none is kept idle */
    return s;
}

/* ---- scan ---- */

typedef struct nj_scan_ctx {
    nj_cache *c;
    int verify;
    nj_cache_visit_fn visit;
    void *user;
    uint64_t total;
} nj_scan_ctx;

/* Full check of one entry file, including that its name is the hash of the signature it holds. */
static const char *nj_scan_verify(int fd, const struct stat *st, const char *ext, char **sig_out)
{
    const char *why = NULL;
    uint8_t *buf = nj_cache_read_fd(fd, st, &why);
    if (!buf) return why;
    nj_cache_view v;
    why = nj_cache_check_image(buf, (size_t)st->st_size, NULL, &v);
    if (!why) {
        char hash[33];
        nj_hash_hex(v.sig, v.sig_len, hash);
        if (memcmp(hash, ext - 33, 32) != 0) why = "signature does not hash to the entry's name";
    }
    if (!why) *sig_out = strndup(v.sig, v.sig_len);
    free(buf);
    return why;
}

/* Header and signature only: cheap enough for `normjit cache ls` over a big cache. */
static const char *nj_scan_peek(int fd, const struct stat *st, char **sig_out)
{
    uint8_t hdr[NJ_CACHE_HEADER_SIZE];
    nj_cache_view v;
    if (!S_ISREG(st->st_mode)) return "not a regular file";
    if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr) return "shorter than the entry header";
    const char *why = nj_cache_check_header(hdr, (uint64_t)st->st_size, &v);
    if (why) return why;
    char *sig = malloc((size_t)v.sig_len + 1);
    if (!sig) return "out of memory";
    if (pread(fd, sig, v.sig_len, NJ_CACHE_HEADER_SIZE) != (ssize_t)v.sig_len) {
        free(sig);
        return "file shrank while reading";
    }
    sig[v.sig_len] = '\0';
    *sig_out = sig;
    return NULL;
}

static int nj_scan_cb(void *user, int dfd, const char *name, const char *path, const char *ext,
                      const struct stat *st)
{
    nj_scan_ctx *x = user;
    char *sig = NULL;
    const char *why = "not a regular file";
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat fst = *st;
    if (fd >= 0 && fstat(fd, &fst) == 0)
        why = x->verify ? nj_scan_verify(fd, &fst, ext, &sig) : nj_scan_peek(fd, &fst, &sig);
    if (fd >= 0) close(fd);
    nj_status vs = why ? NJ_ERR_CACHE_CORRUPT : NJ_OK;
    int removed = 0;
    if (why && x->verify) {
        nj_cache_count(x->c, NJ_CC_CORRUPT, 1);
        removed = !x->c->read_only && nj_cache_remove_at(dfd, name) == 0;
        if (removed) nj_cache_drop_lock(x->c, name);
    }
    if (!removed && S_ISREG(fst.st_mode)) x->total += (uint64_t)fst.st_size;
    if (x->visit) x->visit(x->user, path, sig, (uint64_t)fst.st_size, (int64_t)fst.st_mtim.tv_sec, vs, removed);
    free(sig);
    return 0;
}

nj_status nj_cache_scan(nj_cache *c, int verify, nj_cache_visit_fn visit, void *user)
{
    NJ_RETURN_IF(!c, NJ_ERR_NULL_POINTER, "nj_cache_scan: NULL cache");
    nj_scan_ctx x = {c, verify, visit, user, 0};
    NJ_TRY(nj_cache_walk(c, nj_scan_cb, &x));
    nj_cache_total_set(c, x.total);
    return NJ_OK;
}

/* ---- clear ---- */

static int nj_clear_cb(void *user, int dfd, const char *name, const char *path, const char *ext,
                       const struct stat *st)
{
    int *failed = user;
    if (nj_cache_remove_at(dfd, name) != 0) *failed = 1;
    return 0;
}

nj_status nj_cache_clear(nj_cache *c)
{
    NJ_RETURN_IF(!c, NJ_ERR_NULL_POINTER, "nj_cache_clear: NULL cache");
    NJ_RETURN_IF(c->read_only, NJ_ERR_CACHE_IO, "cache root %s is read-only; not cleared", c->root);
    int failed = 0;
    NJ_TRY(nj_cache_walk(c, nj_clear_cb, &failed));
    uint64_t bytes = 0, entries = 0, locks = 0;
    nj_cache_sweep_locks(c, &locks);
    NJ_TRY(nj_cache_usage(c, &bytes, &entries));
    NJ_RETURN_IF(failed, NJ_ERR_CACHE_IO, "cache: some entries under %s could not be removed", c->vdir);
    return NJ_OK;
}
