/* The lowest layer of the on-disk cache: the entry format, names and paths, counters and the size
 * estimate, whole-file reads and writes, and the directories below the root (made, opened and removed
 * without following links). The lookup path (cache.c), maintenance (cache_maint.c), locks and archives
 * all build on it; it calls none of them, so the cache files form no circle. */
#include "cache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- little-endian fields ---- */

void nj_cache_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void nj_cache_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t nj_cache_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

uint64_t nj_cache_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int nj_cache_pathf(char out[PATH_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    return (n < 0 || n >= PATH_MAX) ? -1 : 0;
}

/* ---- counters and the size estimate ---- */

void nj_cache_count(nj_cache *c, nj_cache_counter which, uint64_t n)
{
    pthread_mutex_lock(&c->mu);
    switch (which) {
    case NJ_CC_HITS: c->counters.hits += n; break;
    case NJ_CC_MISSES: c->counters.misses += n; break;
    case NJ_CC_STORES: c->counters.stores += n; break;
    case NJ_CC_EVICTIONS: c->counters.evictions += n; break;
    case NJ_CC_CORRUPT: c->counters.corrupt += n; break;
    case NJ_CC_STORE_NOSPACE: c->counters.store_nospace += n; break;
    case NJ_CC_STORE_READ_ONLY: c->counters.store_read_only += n; break;
    case NJ_CC_STORE_OTHER: c->counters.store_other += n; break;
    case NJ_CC_LOCK_FALLBACKS: c->counters.lock_fallbacks += n; break;
    case NJ_CC_UNTRUSTED: c->counters.untrusted += n; break;
    }
    pthread_mutex_unlock(&c->mu);
}

void nj_cache_count_store_failure(nj_cache *c, int e)
{
    if (e == ENOSPC || e == EDQUOT || e == EFBIG) nj_cache_count(c, NJ_CC_STORE_NOSPACE, 1);
    else if (e == 0 || e == EROFS || e == EACCES || e == EPERM) nj_cache_count(c, NJ_CC_STORE_READ_ONLY, 1);
    else nj_cache_count(c, NJ_CC_STORE_OTHER, 1);
}

void nj_cache_total_add(nj_cache *c, int64_t delta)
{
    pthread_mutex_lock(&c->mu);
    if (delta < 0 && (uint64_t)-delta > c->total)
        c->total = 0;
    else
        c->total += (uint64_t)delta;
    pthread_mutex_unlock(&c->mu);
}

void nj_cache_total_set(nj_cache *c, uint64_t total)
{
    pthread_mutex_lock(&c->mu);
    c->total = total;
    pthread_mutex_unlock(&c->mu);
}

uint64_t nj_cache_total_get(nj_cache *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t t = c->total;
    pthread_mutex_unlock(&c->mu);
    return t;
}

void nj_cache_counters_get(nj_cache *c, nj_cache_counters *out)
{
    if (!c || !out) return;
    pthread_mutex_lock(&c->mu);
    *out = c->counters;
    pthread_mutex_unlock(&c->mu);
}

/* ---- names and the entry format ---- */

int nj_cache_ext_ok(const char *ext)
{
    size_t n = ext ? strlen(ext) : 0;
    if (n == 0 || n > NJ_CACHE_EXT_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = ext[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return 0;
    }
    return 1;
}

static int nj_is_lower_hex(char ch) { return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'); }

int nj_cache_entry_name(const char *name, const char **ext)
{
    for (int i = 0; i < 32; i++)
        if (!nj_is_lower_hex(name[i])) return 0;
    if (name[32] != '.' || !nj_cache_ext_ok(name + 33)) return 0;
    if (ext) *ext = name + 33;
    return 1;
}

int nj_cache_entry_path(const nj_cache *c, const char *hash, const char *ext, char out[PATH_MAX])
{
    return nj_cache_pathf(out, "%s/%.2s/%s.%s", c->vdir, hash, hash, ext);
}

const char *nj_cache_check_header(const uint8_t *hdr, uint64_t file_size, nj_cache_view *v)
{
    if (file_size < NJ_CACHE_HEADER_SIZE) return "shorter than the entry header";
    if (memcmp(hdr, NJ_CACHE_MAGIC, 8) != 0) return "bad magic";
    if (nj_cache_get_u32(hdr + 8) != NJ_CACHE_FORMAT) return "unknown format version";
    if (nj_cache_get_u32(hdr + 12) != NJ_CACHE_HEADER_SIZE) return "unexpected header size";
    if (nj_cache_get_u64(hdr + 40) != nj_hash64(hdr, 40)) return "header checksum mismatch";
    uint64_t sig = nj_cache_get_u32(hdr + 16), meta = nj_cache_get_u32(hdr + 20);
    uint64_t payload = nj_cache_get_u64(hdr + 24);
    uint64_t room = file_size - NJ_CACHE_HEADER_SIZE;
    /* Compare step by step so a huge payload length cannot wrap the sum. */
    if (payload > room || sig + meta != room - payload) return "lengths disagree with the file size";
    if (sig == 0) return "empty signature";
    v->sig_len = (uint32_t)sig;
    v->meta_len = (uint32_t)meta;
    v->payload_len = payload;
    return NULL;
}

const char *nj_cache_check_image(const uint8_t *buf, size_t n, const char *expect_sig, nj_cache_view *v)
{
    const char *why = nj_cache_check_header(buf, n, v);
    if (why) return why;
    const uint8_t *body = buf + NJ_CACHE_HEADER_SIZE;
    v->sig = (const char *)body;
    v->meta = v->sig + v->sig_len;
    v->payload = (const uint8_t *)v->meta + v->meta_len;
    if (expect_sig && (strlen(expect_sig) != v->sig_len || memcmp(expect_sig, v->sig, v->sig_len) != 0))
        return "stored signature differs from the one asked for (hash collision)";
    if (nj_cache_get_u64(buf + 32) != nj_hash64(body, n - NJ_CACHE_HEADER_SIZE)) return "payload checksum mismatch";
    if (memchr(v->sig, 0, v->sig_len) || memchr(v->meta, 0, v->meta_len)) return "NUL inside signature or meta";
    return NULL;
}

/* ---- file helpers ---- */

int nj_cache_write_all(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int nj_cache_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

uint8_t *nj_cache_read_fd(int fd, const struct stat *st, const char **why)
{
    if (!S_ISREG(st->st_mode)) {
        *why = "not a regular file";
        return NULL;
    }
    if (st->st_size < (off_t)NJ_CACHE_HEADER_SIZE) {
        *why = "shorter than the entry header";
        return NULL;
    }
    if ((uint64_t)st->st_size > NJ_CACHE_ENTRY_MAX) {
        *why = "larger than any entry";
        return NULL;
    }
    size_t n = (size_t)st->st_size, got = 0;
    uint8_t *buf = malloc(n);
    if (!buf) {
        *why = "out of memory";
        return NULL;
    }
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            *why = r == 0 ? "file shrank while reading" : "read failed";
            return NULL;
        }
        got += (size_t)r;
    }
    return buf;
}

/* ---- making directories ---- */

/* Creates path and missing parents with 0700 (chmod after mkdir: the umask may have taken bits away). */
nj_status nj_cache_mkdirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0700) == 0) {
            if (chmod(path, 0700) != 0) {
                *p = saved;
                return nj_fail(NJ_ERR_CACHE_IO, "cache: cannot set mode 0700 on %s: %s", path, strerror(errno));
            }
        } else if (errno != EEXIST) {
            nj_status s = nj_fail(NJ_ERR_CACHE_IO, "cache root %s: cannot create %s: %s", path, path, strerror(errno));
            *p = saved;
            return s;
        }
        *p = saved;
        if (saved == '\0') return NJ_OK;
    }
}

/* ---- directories below the root ---- */

int nj_cache_vdir_fd(const nj_cache *c) { return open(c->vdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

static int nj_cache_subdir_at(nj_cache *c, int vfd, const char *name, int create)
{
    int fd = openat(vfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 || !create || c->read_only) return fd;
    if (errno == ELOOP || errno == ENOTDIR) {
        if (nj_cache_remove_at(vfd, name) != 0) return -1; /* a link or file squatting the name */
    } else if (errno != ENOENT) {
        return -1;
    }
    if (mkdirat(vfd, name, 0700) != 0 && errno != EEXIST) return -1;
    fd = openat(vfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) (void)fchmod(fd, 0700); /* the umask may have taken bits away */
    return fd;
}

int nj_cache_sub_fd(nj_cache *c, const char *name, int create)
{
    int vfd = nj_cache_vdir_fd(c);
    if (vfd < 0 && errno == ENOENT && create && !c->read_only) {
        /* The version directory went away (cleared by hand): recreate it. */
        char tmp[PATH_MAX];
        nj_cache_pathf(tmp, "%s", c->vdir);
        if (nj_cache_mkdirs(tmp) != NJ_OK) return -1;
        vfd = nj_cache_vdir_fd(c);
    }
    if (vfd < 0) return -1;
    int fd = nj_cache_subdir_at(c, vfd, name, create);
    int e = errno;
    close(vfd);
    errno = e;
    return fd;
}

/* ---- removing below a directory ---- */

/* Depth bound of a directory tree found where an entry should be: no cache layout nests deeper. */
#define NJ_CACHE_REMOVE_DEPTH 16

static int nj_cache_remove_depth(int dfd, const char *name, int depth)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlinkat(dfd, name, 0);
    if (depth >= NJ_CACHE_REMOVE_DEPTH) return -1;
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0) return -1;
    DIR *d = fdopendir(sub);
    if (!d) {
        close(sub);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (nj_cache_remove_depth(dirfd(d), e->d_name, depth + 1) != 0) rc = -1;
    }
    closedir(d);
    return rc == 0 ? unlinkat(dfd, name, AT_REMOVEDIR) : rc;
}

int nj_cache_remove_at(int dfd, const char *name) { return nj_cache_remove_depth(dfd, name, 0); }
