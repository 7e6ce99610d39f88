/* On-disk kernel cache: opening a root safely, lookup with full verification, atomic publish,
 * per-key cross-process locks. Maintenance is in cache_maint.c, archives in cache_archive.c. */
#include "cache_impl.h"
#include "cache_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

void (*nj_cache_test_mid_write_hook)(const char *temp_path) = NULL;

/* ---- opening a root ---- */


/* The root must be a real directory of ours that nobody else can write into. */
static nj_status nj_cache_check_root(const char *root)
{
    struct stat st;
    if (lstat(root, &st) != 0)
        return nj_fail(NJ_ERR_CACHE_IO, "cache root %s: %s", root, strerror(errno));
    if (S_ISLNK(st.st_mode))
        return nj_fail(NJ_ERR_CACHE_UNSAFE, "cache root %s refused: it is a symbolic link", root);
    if (!S_ISDIR(st.st_mode))
        return nj_fail(NJ_ERR_CACHE_IO, "cache root %s: not a directory", root);
    if (st.st_uid != geteuid())
        return nj_fail(NJ_ERR_CACHE_UNSAFE, "cache root %s refused: owned by uid %u, not by this user (uid %u)",
                       root, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return nj_fail(NJ_ERR_CACHE_UNSAFE, "cache root %s refused: writable by group or others (mode %03o)", root,
                       (unsigned)(st.st_mode & 0777));
    return NJ_OK;
}

static int nj_cache_dir_writable(const char *dir)
{
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) return 0;
    return access(dir, W_OK) == 0;
}

/* Creates (when writable) and checks <root>/v<format> and its locks/ directory. */
static nj_status nj_cache_open_vdir(nj_cache *c)
{
    char locks[PATH_MAX];
    nj_cache_pathf(locks, "%s/locks", c->vdir);
    if (!c->read_only) {
        NJ_TRY(nj_cache_mkdirs(c->vdir));
        NJ_TRY(nj_cache_mkdirs(locks));
    }
    struct stat st;
    if (lstat(c->vdir, &st) != 0) {
        if (errno == ENOENT && c->read_only) return NJ_OK; /* an empty read-only cache: every get misses */
        return nj_fail(NJ_ERR_CACHE_IO, "cache directory %s: %s", c->vdir, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
        return nj_fail(NJ_ERR_CACHE_UNSAFE,
                       "cache directory %s refused: not a private directory of this user (symlink, file, "
                       "foreign owner or shared write permission)",
                       c->vdir);
    if (!c->read_only && !nj_cache_dir_writable(c->vdir)) c->read_only = 1;
    return NJ_OK;
}

static nj_status nj_cache_init_paths(nj_cache *c, const char *root)
{
    size_t n = strlen(root);
    while (n > 1 && root[n - 1] == '/') n--; /* "dir/" would make lstat follow a symlink */
    NJ_RETURN_IF(n + 64 >= PATH_MAX, NJ_ERR_BAD_ARGUMENT, "cache root path too long (%zu bytes)", n);
    memcpy(c->root, root, n);
    c->root[n] = '\0';
    nj_cache_pathf(c->vdir, "%s/v%d", c->root, NJ_CACHE_FORMAT);
    return NJ_OK;
}

static nj_status nj_cache_open_checked(nj_cache *c, uint32_t flags)
{
    struct stat st;
    if (lstat(c->root, &st) != 0) {
        NJ_RETURN_IF(errno != ENOENT, NJ_ERR_CACHE_IO, "cache root %s: %s", c->root, strerror(errno));
        NJ_RETURN_IF(flags & NJ_CACHE_OPEN_READ_ONLY, NJ_ERR_CACHE_IO,
                     "cache root %s does not exist (opened read-only)", c->root);
        NJ_TRY(nj_cache_mkdirs(c->root));
    }
    NJ_TRY(nj_cache_check_root(c->root));
    c->read_only = (flags & NJ_CACHE_OPEN_READ_ONLY) || !nj_cache_dir_writable(c->root);
    NJ_TRY(nj_cache_open_vdir(c));
    uint64_t bytes = 0, entries = 0;
    NJ_TRY(nj_cache_usage(c, &bytes, &entries)); /* sets the running estimate */
    return NJ_OK;
}

nj_status nj_cache_open_ex(const char *root, uint64_t max_bytes, uint32_t flags, nj_cache **out)
{
    NJ_RETURN_IF(!root || !out, NJ_ERR_NULL_POINTER, "nj_cache_open: root and out are required");
    *out = NULL;
    NJ_RETURN_IF(!root[0], NJ_ERR_BAD_ARGUMENT, "nj_cache_open: empty root path");
    NJ_RETURN_IF(flags & ~NJ_CACHE_OPEN_READ_ONLY, NJ_ERR_BAD_FLAGS, "nj_cache_open: unknown flags 0x%x", flags);
    nj_cache *c = calloc(1, sizeof *c);
    NJ_RETURN_IF(!c, NJ_ERR_OUT_OF_MEMORY, "nj_cache_open: out of memory");
    c->max_bytes = max_bytes ? max_bytes : NJ_CACHE_DEFAULT_MAX_BYTES;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->gc_mu, NULL);
    nj_status s = nj_cache_init_paths(c, root);
    if (s == NJ_OK) s = nj_cache_open_checked(c, flags);
    if (s != NJ_OK) {
        nj_cache_close(c);
        return s;
    }
    *out = c;
    return NJ_OK;
}

nj_status nj_cache_open(const char *root, uint64_t max_bytes, nj_cache **out)
{
    return nj_cache_open_ex(root, max_bytes, 0, out);
}

void nj_cache_close(nj_cache *c)
{
    if (!c) return;
    nj_remote_close(c->remote);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->gc_mu);
    free(c);
}

const char *nj_cache_root(const nj_cache *c) { return c ? c->root : NULL; }

int nj_cache_read_only(const nj_cache *c) { return c ? c->read_only : 1; }

static char *nj_join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = malloc(na + nb + 1);
    if (!s) return NULL;
    memcpy(s, a, na);
    memcpy(s + na, b, nb + 1);
    return s;
}

char *nj_cache_default_root(const char *explicit_root)
{
    if (explicit_root && explicit_root[0]) return nj_join(explicit_root, "");
    const char *env = getenv("NORMJIT_CACHE_DIR");
    if (env && env[0]) return nj_join(env, "");
    env = getenv("XDG_CACHE_HOME");
    if (env && env[0] == '/') return nj_join(env, "/normjit"); /* the XDG spec says relative values are ignored */
    env = getenv("HOME");
    if (env && env[0]) return nj_join(env, "/.cache/normjit");
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir && res->pw_dir[0])
        return nj_join(res->pw_dir, "/.cache/normjit");
    return NULL;
}

/* ---- lookup ---- */

void nj_cache_entry_free(nj_cache_entry *e)
{
    if (!e) return;
    free(e->signature);
    free(e->meta);
    free(e->payload);
    memset(e, 0, sizeof *e);
}

/* Where an entry lives: shard "ab", file "<hash>.<ext>", and the full path for messages. */
typedef struct nj_cache_key {
    char hash[33], shard[3], name[64];
    char path[PATH_MAX];
} nj_cache_key;

static nj_status nj_cache_key_of(const nj_cache *c, const char *signature, const char *ext, nj_cache_key *k)
{
    NJ_RETURN_IF(!nj_cache_ext_ok(ext), NJ_ERR_BAD_ARGUMENT, "cache: bad entry extension \"%s\"", ext ? ext : "");
    size_t n = strlen(signature);
    NJ_RETURN_IF(n == 0 || n > UINT32_MAX, NJ_ERR_BAD_ARGUMENT, "cache: signature length %zu out of range", n);
    nj_hash_hex(signature, n, k->hash);
    memcpy(k->shard, k->hash, 2);
    k->shard[2] = '\0';
    snprintf(k->name, sizeof k->name, "%s.%s", k->hash, ext);
    NJ_RETURN_IF(nj_cache_entry_path(c, k->hash, ext, k->path) != 0, NJ_ERR_BAD_ARGUMENT,
                 "cache: entry path too long");
    return NJ_OK;
}

/* Removes an entry name below dfd, but only if it still names the file judged (another process may have
 * renamed a good entry over it meanwhile), and its lock file with it. 1 when removed. */
static int nj_cache_remove_judged(nj_cache *c, int dfd, const char *name, const struct stat *judged)
{
    struct stat now;
    if (c->read_only || fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) return 0;
    if (judged && (now.st_dev != judged->st_dev || now.st_ino != judged->st_ino)) return 0;
    if (nj_cache_remove_at(dfd, name) != 0) return 0;
    nj_cache_total_add(c, -(int64_t)now.st_size);
    char hash[33];
    memcpy(hash, name, 32);
    hash[32] = '\0';
    nj_cache_drop_lock(c, hash);
    return 1;
}

/* A bad entry is removed so the next put replaces it. */
static nj_status nj_cache_drop_bad(nj_cache *c, int dfd, const nj_cache_key *k, const struct stat *judged,
                                   const char *why)
{
    nj_cache_count(c, NJ_CC_CORRUPT, 1);
    nj_cache_count(c, NJ_CC_MISSES, 1);
    int removed = dfd >= 0 && nj_cache_remove_judged(c, dfd, k->name, judged);
    return nj_fail(NJ_ERR_NOT_CACHED, "cache entry %s failed verification (%s)%s", k->path, why,
                   removed ? "; removed" : c->read_only ? "; left in place on a read-only root" : "; not removed");
}

nj_status nj_cache_fill_entry(const nj_cache_view *v, nj_cache_entry *out)
{
    out->signature = malloc((size_t)v->sig_len + 1);
    out->meta = malloc((size_t)v->meta_len + 1);
    out->payload = malloc(v->payload_len ? (size_t)v->payload_len : 1);
    if (!out->signature || !out->meta || !out->payload) {
        nj_cache_entry_free(out);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "cache: out of memory reading an entry");
    }
    memcpy(out->signature, v->sig, v->sig_len);
    out->signature[v->sig_len] = '\0';
    memcpy(out->meta, v->meta, v->meta_len);
    out->meta[v->meta_len] = '\0';
    memcpy(out->payload, v->payload, (size_t)v->payload_len);
    out->payload_size = (size_t)v->payload_len;
    return NJ_OK;
}

static nj_status nj_cache_miss(nj_cache *c, const nj_cache_key *k, const char *what, int e)
{
    nj_cache_count(c, NJ_CC_MISSES, 1);
    return nj_fail(NJ_ERR_NOT_CACHED, "no cache entry %s (%s%s%s)", k->path, what, e ? ": " : "", e ? strerror(e) : "");
}

/* Reads, verifies and copies out the entry open as fd. */
static nj_status nj_cache_get_fd(nj_cache *c, int dfd, int fd, const char *signature, const nj_cache_key *k,
                                 nj_cache_entry *out)
{
    struct stat st;
    if (fstat(fd, &st) != 0) return nj_cache_miss(c, k, "fstat", errno);
    const char *why = NULL;
    uint8_t *buf = nj_cache_read_fd(fd, &st, &why);
    nj_cache_view v;
    if (buf) why = nj_cache_check_image(buf, (size_t)st.st_size, signature, &v);
    if (why) {
        free(buf);
        if (strcmp(why, "out of memory") == 0) return nj_fail(NJ_ERR_OUT_OF_MEMORY, "cache: out of memory");
        return nj_cache_drop_bad(c, dfd, k, &st, why);
    }
    nj_status s = nj_cache_fill_entry(&v, out);
    free(buf);
    if (s == NJ_OK && !c->read_only) (void)futimens(fd, NULL); /* LRU: a hit makes the entry young */
    if (s == NJ_OK) nj_cache_count(c, NJ_CC_HITS, 1);
    return s;
}

static nj_status nj_cache_get_local(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out)
{
    NJ_RETURN_IF(!c || !signature || !ext || !out, NJ_ERR_NULL_POINTER, "nj_cache_get: NULL argument");
    memset(out, 0, sizeof *out);
    nj_cache_key k;
    NJ_TRY(nj_cache_key_of(c, signature, ext, &k));
    int dfd = nj_cache_sub_fd(c, k.shard, 0);
    if (dfd < 0) {
        if (errno == ELOOP || errno == ENOTDIR) return nj_cache_drop_bad(c, -1, &k, NULL, "its shard is not a directory");
        return nj_cache_miss(c, &k, "shard", errno);
    }
    int fd = openat(dfd, k.name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    nj_status s;
    if (fd < 0)
        s = errno == ELOOP ? nj_cache_drop_bad(c, dfd, &k, NULL, "a symbolic link") : nj_cache_miss(c, &k, "open", errno);
    else
        s = nj_cache_get_fd(c, dfd, fd, signature, &k, out);
    if (fd >= 0) close(fd);
    close(dfd);
    return s;
}

nj_status nj_cache_get(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out)
{
    nj_status s = nj_cache_get_local(c, signature, ext, out);
    if (s == NJ_ERR_NOT_CACHED && c->remote) s = nj_cache_remote_get(c, signature, ext, out); /* shared tier */
    return s;
}

nj_status nj_cache_drop(nj_cache *c, const char *signature, const char *ext)
{
    NJ_RETURN_IF(!c || !signature || !ext, NJ_ERR_NULL_POINTER, "nj_cache_drop: NULL argument");
    nj_cache_key k;
    NJ_TRY(nj_cache_key_of(c, signature, ext, &k));
    NJ_RETURN_IF(c->read_only, NJ_ERR_CACHE_IO, "cache root %s is read-only; %s left in place", c->root, k.path);
    int dfd = nj_cache_sub_fd(c, k.shard, 0);
    if (dfd < 0) return NJ_OK;
    int removed = nj_cache_remove_judged(c, dfd, k.name, NULL);
    close(dfd);
    if (removed) nj_cache_count(c, NJ_CC_CORRUPT, 1);
    return NJ_OK;
}

/* ---- publish ---- */

typedef struct nj_cache_part {
    const void *data;
    size_t len;
} nj_cache_part;

/* Writes the parts in order; the test hook fires once, after half of all bytes. */
static int nj_cache_write_parts(int fd, const nj_cache_part *parts, int nparts, const char *tmp)
{
    size_t total = 0, done = 0, half;
    for (int i = 0; i < nparts; i++) total += parts[i].len;
    half = total / 2;
    int hooked = nj_cache_test_mid_write_hook == NULL;
    for (int i = 0; i < nparts; i++) {
        const uint8_t *p = parts[i].data;
        size_t left = parts[i].len;
        while (left > 0) {
            size_t n = left;
            if (!hooked && done < half && done + n > half) n = half - done;
            if (nj_cache_write_all(fd, p, n) != 0) return -1;
            p += n;
            left -= n;
            done += n;
            if (!hooked && done >= half) {
                hooked = 1;
                nj_cache_test_mid_write_hook(tmp);
            }
        }
    }
    return 0;
}

/* A new temp file below dfd (O_EXCL, never through a link); -1 with errno. */
static int nj_cache_temp_at(int dfd, char name[64])
{
    static atomic_uint seq;
    for (int i = 0; i < 64; i++) {
        snprintf(name, 64, NJ_CACHE_TEMP_PREFIX "%d-%llx-%u", (int)getpid(), (unsigned long long)nj_now_ns(),
                 atomic_fetch_add(&seq, 1));
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Writes parts into the open temp file tmp below dfd and renames it over name; errno on failure. */
static int nj_cache_fill_temp(int dfd, int fd, const char *tmp, const char *tmp_path, const char *name,
                              const nj_cache_part *parts, int nparts, const char **step)
{
    *step = "fchmod";
    int rc = fchmod(fd, 0600);
    if (rc == 0) *step = "write", rc = nj_cache_write_parts(fd, parts, nparts, tmp_path);
    if (rc == 0) *step = "fsync", rc = fsync(fd);
    int e = rc ? errno : 0;
    if (close(fd) != 0 && rc == 0) *step = "close", rc = -1, e = errno;
    struct stat old;
    if (rc == 0 && fstatat(dfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(old.st_mode))
        nj_cache_remove_at(dfd, name); /* a directory or link where the file should be */
    if (rc == 0) *step = "rename", rc = renameat(dfd, tmp, dfd, name), e = rc ? errno : 0;
    return rc == 0 ? 0 : (e ? e : EIO);
}

/* Temp file, write, fsync (a reader never sees data that is not on disk), rename over the final name.
 * *err gets the errno of a failure (0 for a read-only root). */
static nj_status nj_cache_publish_parts(nj_cache *c, const char *hash, const char *ext, const nj_cache_part *parts,
                                        int nparts, int64_t *added, int *err)
{
    *err = 0;
    NJ_RETURN_IF(c->read_only, NJ_ERR_CACHE_IO, "cache root %s is read-only; entry not stored", c->root);
    char shard[3] = {hash[0], hash[1], '\0'}, name[64], tmp[64], final[PATH_MAX], tmp_path[PATH_MAX];
    snprintf(name, sizeof name, "%s.%s", hash, ext);
    NJ_RETURN_IF(nj_cache_entry_path(c, hash, ext, final) != 0, NJ_ERR_BAD_ARGUMENT, "cache: path too long");
    int dfd = nj_cache_sub_fd(c, shard, 1);
    if (dfd < 0) {
        *err = errno;
        return nj_fail(NJ_ERR_CACHE_IO, "cache: cannot open the directory of %s: %s", final, strerror(*err));
    }
    int fd = nj_cache_temp_at(dfd, tmp);
    if (fd < 0) {
        *err = errno;
        close(dfd);
        return nj_fail(NJ_ERR_CACHE_IO, "cache: cannot create a temp file for %s: %s", final, strerror(*err));
    }
    nj_cache_pathf(tmp_path, "%s/%s/%s", c->vdir, shard, tmp);
    struct stat old, fresh;
    int had_old = fstatat(dfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode);
    const char *step = "write";
    *err = nj_cache_fill_temp(dfd, fd, tmp, tmp_path, name, parts, nparts, &step);
    if (*err) {
        unlinkat(dfd, tmp, 0);
        close(dfd);
        return nj_fail(NJ_ERR_CACHE_IO, "cache: %s of %s failed: %s", step, final, strerror(*err));
    }
    /* No fsync of the directory: it would make the rename itself survive a power loss, which a cache does
     * not need (a lost entry is a miss), and it cost ~0.7 ms of every cold compile here. */
    int64_t size = fstatat(dfd, name, &fresh, AT_SYMLINK_NOFOLLOW) == 0 ? (int64_t)fresh.st_size : 0;
    close(dfd);
    *added = size - (had_old ? (int64_t)old.st_size : 0);
    return NJ_OK;
}

nj_status nj_cache_publish_image(nj_cache *c, const char *hash, const char *ext, const uint8_t *img, size_t n,
                                 int64_t *added)
{
    nj_cache_part part = {img, n};
    int err = 0;
    nj_status s = nj_cache_publish_parts(c, hash, ext, &part, 1, added, &err);
    if (s == NJ_ERR_CACHE_IO) nj_cache_count_store_failure(c, err);
    return s;
}

static void nj_cache_encode_header(uint8_t *h, uint32_t sig_len, uint32_t meta_len, uint64_t payload_len,
                                   uint64_t body_sum)
{
    memcpy(h, NJ_CACHE_MAGIC, 8);
    nj_cache_put_u32(h + 8, NJ_CACHE_FORMAT);
    nj_cache_put_u32(h + 12, NJ_CACHE_HEADER_SIZE);
    nj_cache_put_u32(h + 16, sig_len);
    nj_cache_put_u32(h + 20, meta_len);
    nj_cache_put_u64(h + 24, payload_len);
    nj_cache_put_u64(h + 32, body_sum);
    nj_cache_put_u64(h + 40, nj_hash64(h, 40));
}

/* Over the bound after a store: evict, but never the entry just stored. */
void nj_cache_after_store(nj_cache *c, const char *hash, const char *ext)
{
    if (nj_cache_total_get(c) <= c->max_bytes) return;
    char keep[PATH_MAX];
    if (nj_cache_entry_path(c, hash, ext, keep) != 0) return;
    uint64_t evicted = 0;
    (void)nj_cache_evict(c, c->max_bytes, keep, &evicted); /* the store itself succeeded */
}

nj_status nj_cache_put(nj_cache *c, const char *signature, const char *ext, const char *meta, const void *payload,
                       size_t payload_size)
{
    NJ_RETURN_IF(!c || !signature || !ext, NJ_ERR_NULL_POINTER, "nj_cache_put: NULL argument");
    NJ_RETURN_IF(!payload && payload_size, NJ_ERR_NULL_POINTER, "nj_cache_put: NULL payload");
    nj_cache_key k;
    NJ_TRY(nj_cache_key_of(c, signature, ext, &k));
    if (c->read_only) {
        nj_cache_count_store_failure(c, 0);
        return nj_fail(NJ_ERR_CACHE_IO, "cache root %s is read-only; entry not stored", c->root);
    }
    if (!meta) meta = "";
    size_t sig_len = strlen(signature), meta_len = strlen(meta);
    NJ_RETURN_IF(meta_len > UINT32_MAX, NJ_ERR_BAD_ARGUMENT, "nj_cache_put: meta too long");
    NJ_RETURN_IF((uint64_t)payload_size + sig_len + meta_len + NJ_CACHE_HEADER_SIZE > NJ_CACHE_ENTRY_MAX,
                 NJ_ERR_BAD_ARGUMENT, "nj_cache_put: entry of %zu bytes too large", payload_size);
    XXH3_state_t *st = XXH3_createState();
    NJ_RETURN_IF(!st, NJ_ERR_OUT_OF_MEMORY, "nj_cache_put: out of memory");
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, signature, sig_len);
    XXH3_64bits_update(st, meta, meta_len);
    XXH3_64bits_update(st, payload ? payload : "", payload_size);
    uint64_t body_sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    uint8_t hdr[NJ_CACHE_HEADER_SIZE];
    nj_cache_encode_header(hdr, (uint32_t)sig_len, (uint32_t)meta_len, payload_size, body_sum);
    nj_cache_part parts[4] = {{hdr, sizeof hdr}, {signature, sig_len}, {meta, meta_len}, {payload, payload_size}};
    if (c->remote) nj_cache_remote_put(c, k.hash, ext, hdr, sizeof hdr, signature, sig_len, meta, meta_len, payload,
                                       payload_size);
    int64_t added = 0;
    int err = 0;
    nj_status s = nj_cache_publish_parts(c, k.hash, ext, parts, 4, &added, &err);
    if (s == NJ_ERR_CACHE_IO) nj_cache_count_store_failure(c, err);
    NJ_TRY(s);
    nj_cache_count(c, NJ_CC_STORES, 1);
    nj_cache_total_add(c, added);
    nj_cache_after_store(c, k.hash, ext);
    return NJ_OK;
}
