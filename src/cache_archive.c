/* Cache export/import: one archive file holding raw entry files, each signed with the cache key.
 * Archive (format 2): "NJCARCH1", u32 archive format, u32 cache format, u64 count, 16-byte key id, then
 * per entry u32 ext length, ext, u64 entry length, the entry file's bytes, and a 32-byte tag:
 * HMAC-SHA256(key, "normjit-archive-entry" NUL, ext length, ext, entry length, entry). Little-endian.
 * Why a keyed tag: the entries' own checksums catch damage, not tampering; an archive comes from outside
 * this cache (another machine, a bucket, an image layer), and an entry that passes is loaded as code
 * (dlopen'd by the emulator, a cubin under CUDA). Only a holder of the key can make a tag that verifies,
 * so import refuses anything the operator's own builders did not sign. The tag covers each entry whole,
 * so it is checked with the entry in memory (bounded by NJ_CACHE_ENTRY_MAX) before anything is trusted
 * or written; dropping or reordering entries only loses cache hits. */
#include "cache_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NJ_ARCHIVE_MAGIC "NJCARCH1"
#define NJ_ARCHIVE_FORMAT 2u
#define NJ_ARCHIVE_HEADER_SIZE 40u
#define NJ_ARCHIVE_TAG_SIZE 32u
#define NJ_ARCHIVE_KEY_ID_SIZE 16u
#define NJ_ARCHIVE_DOMAIN "normjit-archive-entry"

/* ---- the key ---- */

nj_status nj_cache_set_key(nj_cache *c, const void *key, size_t n)
{
    NJ_RETURN_IF(!c || !key, NJ_ERR_NULL_POINTER, "nj_cache_set_key: NULL argument");
    NJ_RETURN_IF(n < NJ_CACHE_KEY_MIN || n > NJ_CACHE_KEY_MAX, NJ_ERR_BAD_ARGUMENT,
                 "cache key of %zu bytes: it must have %u to %u", n, NJ_CACHE_KEY_MIN, NJ_CACHE_KEY_MAX);
    memcpy(c->key, key, n);
    c->key_len = n;
    return NJ_OK;
}

static nj_status nj_cache_key_file(nj_cache *c, const char *file)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    NJ_RETURN_IF(fd < 0, NJ_ERR_CACHE_IO, "cache key file %s: %s", file, strerror(errno));
    struct stat st;
    uint8_t buf[NJ_CACHE_KEY_MAX + 1];
    nj_status s = NJ_OK;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = nj_fail(NJ_ERR_CACHE_IO, "cache key file %s is not a regular file", file);
    else if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 077))
        s = nj_fail(NJ_ERR_CACHE_UNSAFE, "cache key file %s refused: owned by uid %u with mode %03o (it must be "
                    "this user's or root's, and not open to group or others)", file, (unsigned)st.st_uid,
                    (unsigned)(st.st_mode & 0777));
    ssize_t n = s == NJ_OK ? pread(fd, buf, sizeof buf, 0) : 0;
    close(fd);
    NJ_TRY(s);
    NJ_RETURN_IF(n < 0, NJ_ERR_CACHE_IO, "cache key file %s: %s", file, strerror(errno));
    s = nj_cache_set_key(c, buf, (size_t)n);
    memset(buf, 0, sizeof buf);
    return s;
}

nj_status nj_cache_key_from_env(nj_cache *c)
{
    NJ_RETURN_IF(!c, NJ_ERR_NULL_POINTER, "nj_cache_key_from_env: NULL cache");
    const char *file = getenv("NORMJIT_CACHE_KEY_FILE"), *key = getenv("NORMJIT_CACHE_KEY");
    if (file && *file) return nj_cache_key_file(c, file);
    if (key && *key) return nj_cache_set_key(c, key, strlen(key));
    return nj_fail(NJ_ERR_CACHE_UNTRUSTED, "no cache key: set NORMJIT_CACHE_KEY_FILE (a private file of at least %u "
                   "bytes) or NORMJIT_CACHE_KEY, the same on the machines that export and import", NJ_CACHE_KEY_MIN);
}

static nj_status nj_cache_need_key(nj_cache *c)
{
    return c->key_len ? NJ_OK : nj_cache_key_from_env(c);
}

/* HMAC-SHA256 over the parts; 0 on success. */
static int nj_hmac(const nj_cache *c, const void *const *parts, const size_t *lens, int nparts,
                   uint8_t tag[NJ_ARCHIVE_TAG_SIZE])
{
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0), OSSL_PARAM_END};
    int ok = ctx && EVP_MAC_init(ctx, c->key, c->key_len, params);
    for (int i = 0; ok && i < nparts; i++) ok = EVP_MAC_update(ctx, parts[i], lens[i]);
    size_t out = 0;
    ok = ok && EVP_MAC_final(ctx, tag, &out, NJ_ARCHIVE_TAG_SIZE) && out == NJ_ARCHIVE_TAG_SIZE;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? 0 : -1;
}

/* The tag of one entry: frame is the u32 ext length, ext, u64 entry length as written. */
static int nj_entry_tag(const nj_cache *c, const uint8_t *frame, size_t flen, const uint8_t *img, size_t n,
                        uint8_t tag[NJ_ARCHIVE_TAG_SIZE])
{
    const void *parts[3] = {NJ_ARCHIVE_DOMAIN, frame, img};
    size_t lens[3] = {sizeof NJ_ARCHIVE_DOMAIN, flen, n};
    return nj_hmac(c, parts, lens, 3, tag);
}

/* Names the key without revealing it, so that an archive signed with another key is told apart. */
static int nj_key_id(const nj_cache *c, uint8_t id[NJ_ARCHIVE_KEY_ID_SIZE])
{
    static const char label[] = "normjit-cache-key-id";
    const void *parts[1] = {label};
    size_t lens[1] = {sizeof label};
    uint8_t full[NJ_ARCHIVE_TAG_SIZE];
    if (nj_hmac(c, parts, lens, 1, full) != 0) return -1;
    memcpy(id, full, NJ_ARCHIVE_KEY_ID_SIZE);
    return 0;
}

/* ---- export ---- */

typedef struct nj_export_ctx {
    nj_cache *c;
    int fd;
    uint64_t count;
    int err; /* errno of a failed write, 0 if none */
} nj_export_ctx;

/* Reads and fully verifies one entry file; returns the image or NULL (bad or unreadable: not exported). */
static uint8_t *nj_export_load(int dfd, const char *name, const char *ext, size_t *n)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
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

static int nj_export_cb(void *user, int dfd, const char *name, const char *path, const char *ext,
                        const struct stat *st)
{
    nj_export_ctx *x = user;
    size_t n = 0;
    uint8_t *img = nj_export_load(dfd, name, ext, &n);
    if (!img) return 0;
    uint8_t frame[4 + NJ_CACHE_EXT_MAX + 8], tag[NJ_ARCHIVE_TAG_SIZE];
    size_t elen = strlen(ext), flen = 4 + elen + 8;
    nj_cache_put_u32(frame, (uint32_t)elen);
    memcpy(frame + 4, ext, elen);
    nj_cache_put_u64(frame + 4 + elen, n);
    if (nj_entry_tag(x->c, frame, flen, img, n, tag) != 0) x->err = ENOMEM;
    else if (nj_cache_write_all(x->fd, frame, flen) != 0 || nj_cache_write_all(x->fd, img, n) != 0 ||
             nj_cache_write_all(x->fd, tag, sizeof tag) != 0)
        x->err = errno;
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

static int nj_export_header(nj_export_ctx *x)
{
    uint8_t hdr[NJ_ARCHIVE_HEADER_SIZE];
    memcpy(hdr, NJ_ARCHIVE_MAGIC, 8);
    nj_cache_put_u32(hdr + 8, NJ_ARCHIVE_FORMAT);
    nj_cache_put_u32(hdr + 12, NJ_CACHE_FORMAT);
    nj_cache_put_u64(hdr + 16, 0); /* the count is filled in at the end */
    if (nj_key_id(x->c, hdr + 24) != 0) return ENOMEM;
    if (fchmod(x->fd, 0600) != 0 || nj_cache_write_all(x->fd, hdr, sizeof hdr) != 0) return errno;
    return 0;
}

nj_status nj_cache_export(nj_cache *c, const char *file, uint64_t *count)
{
    NJ_RETURN_IF(!c || !file, NJ_ERR_NULL_POINTER, "nj_cache_export: NULL argument");
    if (count) *count = 0;
    NJ_TRY(nj_cache_need_key(c));
    char tmp[PATH_MAX], dir[PATH_MAX];
    NJ_RETURN_IF(nj_cache_pathf(tmp, "%s" NJ_CACHE_TEMP_PREFIX "XXXXXX", file) != 0,
                 NJ_ERR_BAD_ARGUMENT, "nj_cache_export: path too long");
    nj_export_ctx x = {c, mkostemp(tmp, O_CLOEXEC), 0, 0};
    NJ_RETURN_IF(x.fd < 0, NJ_ERR_CACHE_IO, "cache export: cannot create a temp file next to %s: %s", file,
                 strerror(errno));
    x.err = nj_export_header(&x);
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

typedef struct nj_import_tally {
    uint64_t ok, forged, damaged, not_stored;
} nj_import_tally;

static int nj_read_exact(FILE *f, void *buf, size_t n) { return n == 0 || fread(buf, 1, n, f) == n; }

/* One frame as read: ext, the frame bytes the tag covers, the image and its tag. */
typedef struct nj_frame {
    char ext[NJ_CACHE_EXT_MAX + 1];
    uint8_t head[4 + NJ_CACHE_EXT_MAX + 8];
    size_t head_len;
    uint8_t *img;
    size_t n;
    uint8_t tag[NJ_ARCHIVE_TAG_SIZE];
} nj_frame;

/* Reads one frame; 0 with fr->img set, or -1 when the framing itself is broken (the rest is unreadable).
 * Every length is checked against what is left of the file and against NJ_CACHE_ENTRY_MAX before any
 * allocation: a frame claiming gigabytes costs nothing. */
static int nj_import_frame(FILE *f, uint64_t *left, nj_frame *fr)
{
    uint8_t *b = fr->head;
    if (*left < 12 + NJ_ARCHIVE_TAG_SIZE || !nj_read_exact(f, b, 4)) return -1;
    uint32_t elen = nj_cache_get_u32(b);
    if (elen == 0 || elen > NJ_CACHE_EXT_MAX || *left < 12 + (uint64_t)elen + NJ_ARCHIVE_TAG_SIZE) return -1;
    if (!nj_read_exact(f, b + 4, elen + 8)) return -1;
    memcpy(fr->ext, b + 4, elen);
    fr->ext[elen] = '\0';
    fr->head_len = 12 + elen;
    *left -= 12 + elen;
    uint64_t len = nj_cache_get_u64(b + 4 + elen);
    if (len > *left - NJ_ARCHIVE_TAG_SIZE || len > NJ_CACHE_ENTRY_MAX) return -1;
    fr->img = malloc(len ? (size_t)len : 1);
    if (!fr->img || !nj_read_exact(f, fr->img, (size_t)len) || !nj_read_exact(f, fr->tag, sizeof fr->tag)) {
        free(fr->img);
        fr->img = NULL;
        return -1;
    }
    *left -= len + NJ_ARCHIVE_TAG_SIZE;
    fr->n = (size_t)len;
    return 0;
}

/* Authenticates one imported image, verifies it and publishes it under the hash of its signature. */
static void nj_import_one(nj_cache *c, const nj_frame *fr, nj_import_tally *t)
{
    uint8_t want[NJ_ARCHIVE_TAG_SIZE];
    if (nj_entry_tag(c, fr->head, fr->head_len, fr->img, fr->n, want) != 0 ||
        CRYPTO_memcmp(want, fr->tag, sizeof want) != 0) {
        t->forged++;
        nj_cache_count(c, NJ_CC_UNTRUSTED, 1);
        return;
    }
    nj_cache_view v;
    if (!nj_cache_ext_ok(fr->ext) || nj_cache_check_image(fr->img, fr->n, NULL, &v) != NULL) {
        t->damaged++; /* signed, yet not an entry: a builder with the key signed something odd */
        return;
    }
    char hash[33];
    nj_hash_hex(v.sig, v.sig_len, hash);
    int64_t added = 0;
    if (nj_cache_publish_image(c, hash, fr->ext, fr->img, fr->n, &added) != NJ_OK) { /* counted by reason */
        t->not_stored++;
        return;
    }
    nj_cache_total_add(c, added);
    nj_cache_count(c, NJ_CC_STORES, 1);
    t->ok++;
}

static nj_status nj_import_header(nj_cache *c, FILE *f, const char *file, uint64_t size, uint64_t *n)
{
    uint8_t hdr[NJ_ARCHIVE_HEADER_SIZE], id[NJ_ARCHIVE_KEY_ID_SIZE];
    if (size < 16 || !nj_read_exact(f, hdr, 16) || memcmp(hdr, NJ_ARCHIVE_MAGIC, 8) != 0)
        return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s is not a normjit cache archive", file);
    uint32_t af = nj_cache_get_u32(hdr + 8), cf = nj_cache_get_u32(hdr + 12);
    if (af == 1)
        return nj_fail(NJ_ERR_CACHE_UNTRUSTED, "cache import: %s is an unsigned archive (format 1): refused; export "
                       "it again with a cache key", file);
    if (af != NJ_ARCHIVE_FORMAT || cf != NJ_CACHE_FORMAT)
        return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s has archive format %u / cache format %u, expected %u / %u",
                       file, af, cf, NJ_ARCHIVE_FORMAT, (unsigned)NJ_CACHE_FORMAT);
    if (size < sizeof hdr || !nj_read_exact(f, hdr + 16, sizeof hdr - 16))
        return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s is truncated in its header", file);
    NJ_RETURN_IF(nj_key_id(c, id) != 0, NJ_ERR_OUT_OF_MEMORY, "cache import: HMAC failed");
    if (CRYPTO_memcmp(id, hdr + 24, sizeof id) != 0)
        return nj_fail(NJ_ERR_CACHE_UNTRUSTED, "cache import: %s was signed with another key than this cache's: "
                       "nothing imported", file);
    *n = nj_cache_get_u64(hdr + 16);
    return NJ_OK;
}

static nj_status nj_import_entries(nj_cache *c, FILE *f, const char *file, uint64_t left, uint64_t n,
                                   nj_import_tally *t)
{
    for (uint64_t i = 0; i < n; i++) {
        nj_frame fr;
        fr.img = NULL;
        if (nj_import_frame(f, &left, &fr) != 0) {
            t->damaged += 1; /* the damaged frame; a damaged count field makes n - i meaningless */
            return nj_fail(NJ_ERR_CACHE_CORRUPT, "cache import: %s is truncated or damaged at entry %llu of %llu",
                           file, (unsigned long long)i + 1, (unsigned long long)n);
        }
        nj_import_one(c, &fr, t);
        free(fr.img);
    }
    return NJ_OK;
}

/* The verdict once every frame was read. */
static nj_status nj_import_verdict(nj_cache *c, const char *file, const nj_import_tally *t)
{
    if (t->forged)
        return nj_fail(NJ_ERR_CACHE_UNTRUSTED, "cache import: %llu entries of %s failed authentication (forged, "
                       "or signed with another key) and were refused", (unsigned long long)t->forged, file);
    if (t->not_stored) {
        nj_cache_counters k;
        nj_cache_counters_get(c, &k);
        return nj_fail(NJ_ERR_CACHE_IO, "cache import: %llu entries of %s could not be stored in %s (no space %llu, "
                       "read-only %llu, other %llu)", (unsigned long long)t->not_stored, file, c->root,
                       (unsigned long long)k.store_nospace, (unsigned long long)k.store_read_only,
                       (unsigned long long)k.store_other);
    }
    return NJ_OK;
}

nj_status nj_cache_import(nj_cache *c, const char *file, uint64_t *count, uint64_t *rejected)
{
    NJ_RETURN_IF(!c || !file, NJ_ERR_NULL_POINTER, "nj_cache_import: NULL argument");
    nj_import_tally t = {0, 0, 0, 0};
    if (count) *count = 0;
    if (rejected) *rejected = 0;
    if (c->read_only) {
        nj_cache_count_store_failure(c, 0);
        return nj_fail(NJ_ERR_CACHE_IO, "cache root %s is read-only; nothing imported", c->root);
    }
    NJ_TRY(nj_cache_need_key(c));
    FILE *f = fopen(file, "rbe");
    NJ_RETURN_IF(!f, NJ_ERR_CACHE_IO, "cache import: cannot open %s: %s", file, strerror(errno));
    struct stat st;
    uint64_t n = 0;
    nj_status s = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)
                      ? nj_import_header(c, f, file, (uint64_t)st.st_size, &n)
                      : nj_fail(NJ_ERR_CACHE_IO, "cache import: %s is not a readable file", file);
    if (s == NJ_OK) s = nj_import_entries(c, f, file, (uint64_t)st.st_size - NJ_ARCHIVE_HEADER_SIZE, n, &t);
    fclose(f);
    if (s == NJ_OK) s = nj_import_verdict(c, file, &t);
    if (count) *count = t.ok;
    if (rejected) *rejected = t.forged + t.damaged;
    uint64_t evicted = 0;
    if (t.ok) (void)nj_cache_evict(c, c->max_bytes, NULL, &evicted);
    return s;
}
