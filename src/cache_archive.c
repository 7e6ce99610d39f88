/* Cache export/import: one archive file holding raw entry files.
 * Archive: "NJCARCH1", u32 archive format, u32 cache format, u64 count, then per entry
 * u32 ext length, ext, u64 entry length, the entry file's bytes. Little-endian. Entries carry their own
 * checksums, so the archive needs none: import re-verifies each entry before publishing it. */
#include "cache_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NJ_ARCHIVE_MAGIC "NJCARCH1"
#define NJ_ARCHIVE_FORMAT 1u
#define NJ_ARCHIVE_HEADER_SIZE 24u

typedef struct nj_export_ctx {
    int fd;
    uint64_t count;
    int err; /* errno of a failed write, 0 if none */
} nj_export_ctx;

/* Reads and fully verifies one entry file; returns the image or NULL (bad or unreadable: not exported). */
static uint8_t *nj_export_load(const char *path, const char *ext, size_t *n)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return NULL;
    struct stat st;
    const char *why = NULL;
    uint8_t *buf = fstat(fd, &st) == 0 ? nj_cache_read_fd(fd, &st, &why) : NULL;
    close(fd);
    nj_cache_view v;
    if (!buf || nj_cache_check_image(buf, (size_t)st.st_size, NULL, &v) != NULL) {
        free(buf);
        return NULL;
    }
    char hash[33];
    nj_hash_hex(v.sig, v.sig_len, hash);
    if (memcmp(hash, ext - 33, 32) != 0) {
        free(buf);
        return NULL;
    }
    *n = (size_t)st.st_size;
    return buf;
}

static int nj_export_cb(void *user, const char *path, const char *ext, const struct stat *st)
{
    nj_export_ctx *x = user;
    size_t n = 0;
    uint8_t *img = nj_export_load(path, ext, &n);
    if (!img) return 0;
    uint8_t frame[4 + NJ_CACHE_EXT_MAX + 8];
    size_t elen = strlen(ext), flen = 4 + elen + 8;
    nj_cache_put_u32(frame, (uint32_t)elen);
    memcpy(frame + 4, ext, elen);
    nj_cache_put_u64(frame + 4 + elen, n);
    if (nj_cache_write_all(x->fd, frame, flen) != 0 || nj_cache_write_all(x->fd, img, n) != 0) x->err = errno;
    free(img);
    if (x->err) return 1;
    x->count++;
    return 0;
}

static int nj_export_finish(nj_export_ctx *x)
{
    uint8_t cnt[8];
    nj_cache_put_u64(cnt, x->count);
    if (pwrite(x->fd, cnt, 8, 16) != 8) return errno ? errno : EIO;
    if (fsync(x->fd) != 0) return errno;
    return 0;
}

static void nj_dir_of(const char *file, char dir[PATH_MAX])
{
    const char *slash = strrchr(file, '/');
    if (!slash)
        nj_cache_pathf(dir, ".");
    else if (slash == file)
        nj_cache_pathf(dir, "/");
    else
        nj_cache_pathf(dir, "%.*s", (int)(slash - file), file);
}

nj_status nj_cache_export(nj_cache *c, const char *file, uint64_t *count)
{
    NJ_RETURN_IF(!c || !file, NJ_ERR_NULL_POINTER, "nj_cache_export: NULL argument");
    if (count) *count = 0;
    char tmp[PATH_MAX], dir[PATH_MAX];
    NJ_RETURN_IF(nj_cache_pathf(tmp, "%s" NJ_CACHE_TEMP_PREFIX "XXXXXX", file) != 0,
                 NJ_ERR_BAD_ARGUMENT, "nj_cache_export: path too long");
    nj_export_ctx x = {mkostemp(tmp, O_CLOEXEC), 0, 0};
    NJ_RETURN_IF(x.fd < 0, NJ_ERR_CACHE_IO, "cache export: cannot create a temp file next to %s: %s", file,
                 strerror(errno));
    uint8_t hdr[NJ_ARCHIVE_HEADER_SIZE];
    memcpy(hdr, NJ_ARCHIVE_MAGIC, 8);
    nj_cache_put_u32(hdr + 8, NJ_ARCHIVE_FORMAT);
    nj_cache_put_u32(hdr + 12, NJ_CACHE_FORMAT);
    nj_cache_put_u64(hdr + 16, 0); /* the count is filled in at the end */
    if (fchmod(x.fd, 0600) != 0 || nj_cache_write_all(x.fd, hdr, sizeof hdr) != 0) x.err = errno;
    nj_status s = NJ_OK;
    if (!x.err) s = nj_cache_walk(c, nj_export_cb, &x);
    if (s == NJ_OK && !x.err) x.err = nj_export_finish(&x);
    if (close(x.fd) != 0 && !x.err) x.err = errno;
    if (s == NJ_OK && !x.err && rename(tmp, file) != 0) x.err = errno;
    if (s != NJ_OK || x.err) {
        unlink(tmp);
        if (s != NJ_OK) return s;
        return nj_fail(NJ_ERR_CACHE_IO, "cache export to %s failed: %s", file, strerror(x.err));
    }
    nj_dir_of(file, dir);
    (void)nj_cache_fsync_dir(dir);
    if (count) *count = x.count;
    return NJ_OK;
}

/* ---- import ---- */

static int nj_read_exact(FILE *f, void *buf, size_t n) { return n == 0 || fread(buf, 1, n, f) == n; }

/* Reads one frame; 0 with *img set, or -1 when the framing itself is broken (the rest is unreadable). */
static int nj_import_frame(FILE *f, uint64_t *left, char ext[NJ_CACHE_EXT_MAX + 1], uint8_t **img, size_t *n)
{
    uint8_t b[8];
    if (*left < 12 || !nj_read_exact(f, b, 4)) return -1;
    uint32_t elen = nj_cache_get_u32(b);
    if (elen == 0 || elen > NJ_CACHE_EXT_MAX || *left < 12 + (uint64_t)elen) return -1;
    if (!nj_read_exact(f, ext, elen) || !nj_read_exact(f, b, 8)) return -1;
    ext[elen] = '\0';
    *left -= 12 + elen;
    uint64_t len = nj_cache_get_u64(b);
    if (len > *left || len > NJ_CACHE_ENTRY_MAX) return -1;
    *img = malloc(len ? (size_t)len : 1);
    if (!*img || !nj_read_exact(f, *img, (size_t)len)) {
        free(*img);
        *img = NULL;
        return -1;
    }
    *left -= len;
    *n = (size_t)len;
    return 0;
}

/* Verifies one imported image and publishes it under the hash of the signature it holds. */
static nj_status nj_import_one(nj_cache *c, const char *ext, const uint8_t *img, size_t n, int *rejected)
{
    nj_cache_view v;
    *rejected = 1;
    if (!nj_cache_ext_ok(ext) || nj_cache_check_image(img, n, NULL, &v) != NULL) return NJ_OK;
    char hash[33];
    nj_hash_hex(v.sig, v.sig_len, hash);
    int64_t added = 0;
    NJ_TRY(nj_cache_publish_image(c, hash, ext, img, n, &added));
    nj_cache_total_add(c, added);
    nj_cache_count(c, NJ_CC_STORES, 1);
    *rejected = 0;
    return NJ_OK;
}

static nj_status nj_import_header(FILE *f, const char *file, uint64_t size, uint64_t *n)
{
    uint8_t hdr[NJ_ARCHIVE_HEADER_SIZE];
    if (size < sizeof hdr || !nj_read_exact(f, hdr, sizeof hdr) || memcmp(hdr, NJ_ARCHIVE_MAGIC, 8) != 0)
        return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s is not a normjit cache archive", file);
    if (nj_cache_get_u32(hdr + 8) != NJ_ARCHIVE_FORMAT || nj_cache_get_u32(hdr + 12) != NJ_CACHE_FORMAT)
        return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s has archive format %u / cache format %u, expected %u / %u",
                       file, nj_cache_get_u32(hdr + 8), nj_cache_get_u32(hdr + 12), NJ_ARCHIVE_FORMAT,
                       (unsigned)NJ_CACHE_FORMAT);
    *n = nj_cache_get_u64(hdr + 16);
    return NJ_OK;
}

static nj_status nj_import_entries(nj_cache *c, FILE *f, const char *file, uint64_t left, uint64_t n,
                                   uint64_t *ok, uint64_t *bad)
{
    for (uint64_t i = 0; i < n; i++) {
        char ext[NJ_CACHE_EXT_MAX + 1];
        uint8_t *img = NULL;
        size_t len = 0;
        if (nj_import_frame(f, &left, ext, &img, &len) != 0) {
            *bad += 1; /* the damaged frame; a damaged count field makes n - i meaningless */
            return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s is truncated or damaged at entry %llu of %llu",
                           file, (unsigned long long)i + 1, (unsigned long long)n);
        }
        int rejected = 0;
        nj_status s = nj_import_one(c, ext, img, len, &rejected);
        free(img);
        NJ_TRY(s);
        *bad += (uint64_t)rejected;
        *ok += (uint64_t)!rejected;
    }
    return NJ_OK;
}

nj_status nj_cache_import(nj_cache *c, const char *file, uint64_t *count, uint64_t *rejected)
{
    NJ_RETURN_IF(!c || !file, NJ_ERR_NULL_POINTER, "nj_cache_import: NULL argument");
    uint64_t ok = 0, bad = 0;
    if (count) *count = 0;
    if (rejected) *rejected = 0;
    NJ_RETURN_IF(c->read_only, NJ_ERR_CACHE_IO, "cache root %s is read-only; nothing imported", c->root);
    FILE *f = fopen(file, "rbe");
    NJ_RETURN_IF(!f, NJ_ERR_CACHE_IO, "cache import: cannot open %s: %s", file, strerror(errno));
    struct stat st;
    uint64_t n = 0;
    nj_status s = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)
                      ? nj_import_header(f, file, (uint64_t)st.st_size, &n)
                      : nj_fail(NJ_ERR_CACHE_IO, "cache import: %s is not a readable file", file);
    if (s == NJ_OK) s = nj_import_entries(c, f, file, (uint64_t)st.st_size - NJ_ARCHIVE_HEADER_SIZE, n, &ok, &bad);
    fclose(f);
    if (count) *count = ok;
    if (rejected) *rejected = bad;
    uint64_t evicted = 0;
    if (ok) (void)nj_cache_evict(c, c->max_bytes, NULL, &evicted);
    return s;
}
