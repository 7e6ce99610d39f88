/* Shared cache tier on Redis (hiredis): URL parsing, a bounded fail-open connection, verified fetch and
 * publish of entry images, the cross-host compile lock, push/pull. See cache_remote.h for the contract. */
#include "cache_remote.h"

#include "cache_impl.h"
#include "context.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- URL ---- */

static int nj_remote_num(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out)
{
    if (n == 0 || n > 19) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static nj_status nj_remote_param(nj_remote_config *cfg, const char *p, size_t n)
{
    const char *eq = memchr(p, '=', n);
    NJ_RETURN_IF(!eq, NJ_ERR_BAD_ARGUMENT, "remote cache URL: parameter '%.*s' has no value", (int)n, p);
    size_t kn = (size_t)(eq - p), vn = n - kn - 1;
    const char *v = eq + 1;
    int64_t x = 0;
    int bad = 0;
#define NJ_KEY(name) (kn == sizeof(name) - 1 && memcmp(p, name, kn) == 0)
    if (NJ_KEY("prefix")) {
        bad = vn >= sizeof cfg->prefix;
        if (!bad) memcpy(cfg->prefix, v, vn), cfg->prefix[vn] = '\0';
    } else if (NJ_KEY("ttl")) {
        if (!(bad = nj_remote_num(v, vn, 0, INT32_MAX, &x))) cfg->ttl_s = x;
    } else if (NJ_KEY("max_bytes")) {
        if (!(bad = nj_remote_num(v, vn, NJ_CACHE_HEADER_SIZE, (int64_t)NJ_CACHE_ENTRY_MAX, &x)))
            cfg->max_bytes = (uint64_t)x;
    } else if (NJ_KEY("timeout_ms")) {
        if (!(bad = nj_remote_num(v, vn, 1, 60000, &x))) cfg->timeout_ms = (int32_t)x;
    } else if (NJ_KEY("lock_ms")) {
        if (!(bad = nj_remote_num(v, vn, 1, 3600000, &x))) cfg->lock_ms = (int32_t)x;
    } else if (NJ_KEY("wait_ms")) {
        if (!(bad = nj_remote_num(v, vn, 0, 3600000, &x))) cfg->wait_ms = (int32_t)x;
    } else if (NJ_KEY("backoff_ms")) {
        if (!(bad = nj_remote_num(v, vn, 1, 3600000, &x))) cfg->backoff_ms = (int32_t)x;
    } else {
        return nj_fail(NJ_ERR_BAD_ARGUMENT, "remote cache URL: unknown parameter '%.*s'", (int)kn, p);
    }
#undef NJ_KEY
    NJ_RETURN_IF(bad, NJ_ERR_BAD_ARGUMENT, "remote cache URL: bad value in '%.*s'", (int)n, p);
    return NJ_OK;
}

/* redis://[:password@]host:port[/db][?k=v&...] */
nj_status nj_remote_parse(const char *url, nj_remote_config *cfg)
{
    NJ_RETURN_IF(!url || !cfg, NJ_ERR_NULL_POINTER, "nj_remote_parse: NULL argument");
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->prefix, sizeof cfg->prefix, "normjit:v%d:", NJ_CACHE_FORMAT);
    cfg->max_bytes = NJ_REMOTE_DEFAULT_MAX_BYTES;
    cfg->timeout_ms = NJ_REMOTE_DEFAULT_TIMEOUT_MS;
    cfg->lock_ms = 30000;
    cfg->wait_ms = 30000;
    cfg->backoff_ms = 5000;
    NJ_RETURN_IF(strncmp(url, "redis://", 8) != 0, NJ_ERR_BAD_ARGUMENT,
                 "remote cache URL '%s': only redis://[:password@]host:port[/db] is supported", url);
    const char *p = url + 8, *q = strchr(p, '?');
    size_t auth_end = strcspn(p, "@/?");
    if (p[auth_end] == '@') {
        NJ_RETURN_IF(p[0] != ':' || auth_end - 1 >= sizeof cfg->password, NJ_ERR_BAD_ARGUMENT,
                     "remote cache URL: the password goes as :password@ (at most %zu bytes)",
                     sizeof cfg->password - 1);
        memcpy(cfg->password, p + 1, auth_end - 1);
        p += auth_end + 1;
    }
    size_t hp = strcspn(p, "/?");
    const char *colon = memchr(p, ':', hp);
    NJ_RETURN_IF(!colon || colon == p || (size_t)(colon - p) >= sizeof cfg->host, NJ_ERR_BAD_ARGUMENT,
                 "remote cache URL '%s': host:port expected", url);
    memcpy(cfg->host, p, (size_t)(colon - p));
    int64_t x;
    NJ_RETURN_IF(nj_remote_num(colon + 1, hp - (size_t)(colon - p) - 1, 1, 65535, &x), NJ_ERR_BAD_ARGUMENT,
                 "remote cache URL '%s': bad port", url);
    cfg->port = (int32_t)x;
    p += hp;
    if (*p == '/') {
        size_t dn = strcspn(p + 1, "?");
        if (dn) {
            NJ_RETURN_IF(nj_remote_num(p + 1, dn, 0, 1 << 20, &x), NJ_ERR_BAD_ARGUMENT,
                         "remote cache URL '%s': bad database number", url);
            cfg->db = (int32_t)x;
        }
    }
    for (const char *s = q ? q + 1 : NULL; s && *s;) {
        size_t n = strcspn(s, "&");
        if (n) NJ_TRY(nj_remote_param(cfg, s, n));
        s += n + (s[n] == '&');
    }
    return NJ_OK;
}

#ifdef NJ_HAVE_HIREDIS
#include <hiredis.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>

struct nj_remote {
    nj_remote_config cfg;
    nj_logger log;
    pthread_mutex_t mu; /* the connection, counters, backoff */
    redisContext *rc;
    uint64_t retry_at_ns;
    int32_t backoff_cur_ms;
    int logged; /* this outage was logged */
    nj_status status;
    nj_remote_counters n;
    char token[33]; /* lock value: who holds a fleet lock */
};

static struct timeval nj_tv(int32_t ms) { return (struct timeval){ms / 1000, (ms % 1000) * 1000}; }

/* Drops the connection and backs off; the first failure of an outage is logged. Mutex held. */
static void nj_remote_fail(nj_remote *r, const char *what, const char *why)
{
    r->n.errors++;
    if (r->rc) redisFree(r->rc);
    r->rc = NULL;
    r->backoff_cur_ms = r->backoff_cur_ms ? r->backoff_cur_ms * 2 : 100;
    if (r->backoff_cur_ms > r->cfg.backoff_ms) r->backoff_cur_ms = r->cfg.backoff_ms;
    r->retry_at_ns = nj_now_ns() + (uint64_t)r->backoff_cur_ms * 1000000ull;
    r->status = NJ_ERR_CACHE_IO;
    if (!r->logged)
        nj_log(&r->log, NJ_LOG_WARN, "remote cache %s:%d: %s failed (%s); carrying on without it, retrying with backoff",
               r->cfg.host, r->cfg.port, what, why);
    r->logged = 1;
}

/* hiredis writes with write(2): a peer that went away would raise SIGPIPE and kill the host process. */
static redisReply *nj_remote_argv(redisContext *rc, int argc, const char **argv, const size_t *lens)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    redisReply *rep = redisCommandArgv(rc, argc, argv, lens);
    if (!was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        (void)sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rep;
}

static redisReply *nj_remote_cmd_locked(nj_remote *r, int argc, const char **argv, const size_t *lens);

/* The connection, made when needed and not before the backoff passed. Mutex held. */
static redisContext *nj_remote_conn(nj_remote *r)
{
    if (r->rc) return r->rc;
    if (nj_now_ns() < r->retry_at_ns) {
        r->n.skipped++;
        return NULL;
    }
    redisContext *rc = redisConnectWithTimeout(r->cfg.host, r->cfg.port, nj_tv(r->cfg.timeout_ms));
    if (!rc || rc->err) {
        char why[128];
        snprintf(why, sizeof why, "%s", rc ? rc->errstr : "out of memory");
        if (rc) redisFree(rc);
        nj_remote_fail(r, "connect", why);
        return NULL;
    }
    if (redisSetTimeout(rc, nj_tv(r->cfg.timeout_ms)) != REDIS_OK) {
        redisFree(rc);
        nj_remote_fail(r, "connect", "cannot set the socket timeout");
        return NULL;
    }
    r->rc = rc;
    char db[16];
    snprintf(db, sizeof db, "%d", r->cfg.db);
    const char *auth[2] = {"AUTH", r->cfg.password}, *sel[2] = {"SELECT", db};
    for (int step = 0; step < 2; step++) { /* a failure drops the connection (r->rc NULL) */
        const char **argv = step == 0 ? auth : sel;
        if (step == 0 ? !r->cfg.password[0] : !r->cfg.db) continue;
        redisReply *rep = nj_remote_cmd_locked(r, 2, argv, NULL);
        if (!rep) return NULL;
        freeReplyObject(rep);
    }
    return r->rc;
}

/* One command; NULL on any failure (counted, connection dropped, backed off). Mutex held. */
static redisReply *nj_remote_cmd_locked(nj_remote *r, int argc, const char **argv, const size_t *lens)
{
    redisContext *rc = nj_remote_conn(r);
    if (!rc) return NULL;
    redisReply *rep = nj_remote_argv(rc, argc, argv, lens);
    if (!rep) {
        char why[128];
        snprintf(why, sizeof why, "%s", rc->errstr[0] ? rc->errstr : "no reply");
        nj_remote_fail(r, argv[0], why);
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        char why[128];
        snprintf(why, sizeof why, "%.*s", (int)(rep->len < 120 ? rep->len : 120), rep->str ? rep->str : "");
        freeReplyObject(rep);
        nj_remote_fail(r, argv[0], why);
        return NULL;
    }
    if (r->logged) nj_log(&r->log, NJ_LOG_INFO, "remote cache %s:%d reachable again", r->cfg.host, r->cfg.port);
    r->logged = 0;
    r->backoff_cur_ms = 0;
    r->status = NJ_OK;
    return rep;
}

static redisReply *nj_remote_cmd(nj_remote *r, int argc, const char **argv, const size_t *lens)
{
    pthread_mutex_lock(&r->mu);
    redisReply *rep = nj_remote_cmd_locked(r, argc, argv, lens);
    pthread_mutex_unlock(&r->mu);
    return rep;
}

static void nj_remote_count(nj_remote *r, uint64_t *field)
{
    pthread_mutex_lock(&r->mu);
    (*field)++;
    pthread_mutex_unlock(&r->mu);
}

nj_status nj_remote_open(const char *url, const nj_logger *log, nj_remote **out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "nj_remote_open: NULL argument");
    *out = NULL;
    nj_remote_config cfg;
    NJ_TRY(nj_remote_parse(url, &cfg));
    nj_remote *r = calloc(1, sizeof *r);
    NJ_RETURN_IF(!r, NJ_ERR_OUT_OF_MEMORY, "remote cache: out of memory");
    r->cfg = cfg;
    if (log) r->log = *log;
    else r->log.level = NJ_LOG_OFF;
    pthread_mutex_init(&r->mu, NULL);
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        uint64_t t = nj_now_ns() ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, 8);
        memcpy(rnd + 8, &r, sizeof r < 8 ? sizeof r : 8);
    }
    for (int i = 0; i < 16; i++) snprintf(r->token + 2 * i, 3, "%02x", rnd[i]);
    *out = r;
    return NJ_OK;
}

void nj_remote_close(nj_remote *r)
{
    if (!r) return;
    if (r->rc) redisFree(r->rc);
    pthread_mutex_destroy(&r->mu);
    memset(r->cfg.password, 0, sizeof r->cfg.password);
    free(r);
}

void nj_remote_counters_get(nj_remote *r, nj_remote_counters *out)
{
    if (!r || !out) return;
    pthread_mutex_lock(&r->mu);
    *out = r->n;
    pthread_mutex_unlock(&r->mu);
}

nj_status nj_remote_status(nj_remote *r)
{
    if (!r) return NJ_ERR_UNSUPPORTED;
    pthread_mutex_lock(&r->mu);
    nj_status s = r->status;
    pthread_mutex_unlock(&r->mu);
    return s;
}

const nj_remote_config *nj_remote_config_of(const nj_remote *r) { return r ? &r->cfg : NULL; }

/* ---- values ---- */

static void nj_remote_key(const nj_remote *r, const char *hash, const char *ext, char *out, size_t cap)
{
    if (ext) snprintf(out, cap, "%s%s.%s", r->cfg.prefix, hash, ext);
    else snprintf(out, cap, "%slock:%s", r->cfg.prefix, hash);
}

/* The value under key, at most max_bytes (GETRANGE: a bigger one is never transferred whole). 1 with a
 * malloc'd copy; 0 absent; -1 failed or refused (counted). */
static int nj_remote_fetch_key(nj_remote *r, const char *key, uint8_t **img, size_t *n)
{
    char end[24];
    snprintf(end, sizeof end, "%llu", (unsigned long long)r->cfg.max_bytes); /* one byte past the bound */
    const char *argv[4] = {"GETRANGE", key, "0", end};
    redisReply *rep = nj_remote_cmd(r, 4, argv, NULL);
    if (!rep) return -1;
    int got = 0;
    if (rep->type != REDIS_REPLY_STRING || rep->len == 0) {
        got = 0; /* GETRANGE of a missing key is "" */
    } else if ((uint64_t)rep->len > r->cfg.max_bytes) {
        got = -2;
    } else if ((*img = malloc(rep->len)) != NULL) {
        memcpy(*img, rep->str, rep->len);
        *n = rep->len;
        got = 1;
    } else {
        got = -1;
    }
    freeReplyObject(rep);
    if (got == 0) nj_remote_count(r, &r->n.misses);
    if (got == -2) nj_remote_count(r, &r->n.rejected);
    return got < 0 ? -1 : got;
}

/* Values are authenticated, not only checksummed: image || HMAC-SHA256(cache key, domain NUL name NUL image),
 * name = "<hash>.<ext>". Redis is outside this machine (anyone who can write to it could otherwise plant a
 * binary with fixed-up checksums, and entries are loaded as code); the tag binds the value to its name, so a
 * valid entry moved under another key is refused too. Same key and threat model as signed archives. */
#define NJ_REMOTE_TAG_SIZE 32u
#define NJ_REMOTE_DOMAIN "normjit-redis-entry"

static int nj_remote_tag(const nj_cache *c, const char *name, const uint8_t *img, size_t n,
                         uint8_t tag[NJ_REMOTE_TAG_SIZE])
{
    if (!c->key_len) return 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    size_t out = 0;
    int ok = ctx && EVP_MAC_init(ctx, c->key, c->key_len, params) &&
             EVP_MAC_update(ctx, (const uint8_t *)NJ_REMOTE_DOMAIN, sizeof NJ_REMOTE_DOMAIN) &&
             EVP_MAC_update(ctx, (const uint8_t *)name, strlen(name) + 1) && EVP_MAC_update(ctx, img, n) &&
             EVP_MAC_final(ctx, tag, &out, NJ_REMOTE_TAG_SIZE) && out == NJ_REMOTE_TAG_SIZE;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok;
}

/* Checks a value fetched under name: tag first, then the entry image (expect_sig NULL: the caller compares
 * the signature's hash with the name). NULL when valid, else why; *n_img gets the image's length. */
static const char *nj_remote_check(const nj_cache *c, const char *name, const uint8_t *val, size_t n,
                                   const char *expect_sig, nj_cache_view *v, size_t *n_img)
{
    uint8_t tag[NJ_REMOTE_TAG_SIZE];
    if (n < NJ_CACHE_HEADER_SIZE + NJ_REMOTE_TAG_SIZE) return "truncated (shorter than a header and a tag)";
    *n_img = n - NJ_REMOTE_TAG_SIZE;
    if (!nj_remote_tag(c, name, val, *n_img, tag)) return "no cache key to authenticate it";
    if (CRYPTO_memcmp(tag, val + *n_img, NJ_REMOTE_TAG_SIZE) != 0)
        return "authentication failed (forged, damaged, another key, or another entry's value)";
    return nj_cache_check_image(val, *n_img, expect_sig, v);
}

/* SET NX (EX ttl) of image || tag under name. 1 when stored. */
static int nj_remote_store(nj_cache *c, const char *name, const uint8_t *img, size_t n)
{
    nj_remote *r = c->remote;
    if (n + NJ_REMOTE_TAG_SIZE > r->cfg.max_bytes) return 0;
    uint8_t *val = malloc(n + NJ_REMOTE_TAG_SIZE);
    if (!val) return 0;
    memcpy(val, img, n);
    if (!nj_remote_tag(c, name, img, n, val + n)) {
        free(val);
        return 0;
    }
    char key[256], ttl[24];
    snprintf(key, sizeof key, "%s%s", r->cfg.prefix, name);
    snprintf(ttl, sizeof ttl, "%lld", (long long)r->cfg.ttl_s);
    const char *argv[6] = {"SET", key, (const char *)val, "NX", "EX", ttl};
    size_t lens[6] = {3, strlen(key), n + NJ_REMOTE_TAG_SIZE, 2, 2, strlen(ttl)};
    redisReply *rep = nj_remote_cmd(r, r->cfg.ttl_s > 0 ? 6 : 4, argv, lens);
    free(val);
    if (!rep) return 0;
    int stored = rep->type == REDIS_REPLY_STATUS;
    freeReplyObject(rep);
    if (stored) nj_remote_count(r, &r->n.stores);
    return stored;
}

/* ---- the cache's side ---- */

void nj_cache_attach_remote(nj_cache *c, nj_remote *r)
{
    if (!c) return;
    nj_remote_close(c->remote);
    c->remote = r;
}

nj_remote *nj_cache_remote(nj_cache *c) { return c ? c->remote : NULL; }

/* A verified image goes to the local disk (when writable) like any store. */
static void nj_cache_remote_publish(nj_cache *c, const char *hash, const char *ext, const uint8_t *img, size_t n)
{
    if (c->read_only) return;
    int64_t added = 0;
    if (nj_cache_publish_image(c, hash, ext, img, n, &added) != NJ_OK) {
        nj_error_clear(); /* counted by reason; the entry still serves from memory */
        return;
    }
    nj_cache_count(c, NJ_CC_STORES, 1);
    nj_cache_total_add(c, added);
    nj_cache_after_store(c, hash, ext);
}

nj_status nj_cache_remote_get(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out)
{
    nj_remote *r = c ? c->remote : NULL;
    if (!r || !nj_cache_ext_ok(ext)) return NJ_ERR_NOT_CACHED;
    char hash[33], name[64], key[256];
    nj_hash_hex(signature, strlen(signature), hash);
    snprintf(name, sizeof name, "%s.%s", hash, ext);
    snprintf(key, sizeof key, "%s%s", r->cfg.prefix, name);
    uint8_t *val = NULL;
    size_t n = 0, n_img = 0;
    if (nj_remote_fetch_key(r, key, &val, &n) != 1) return NJ_ERR_NOT_CACHED;
    nj_cache_view v;
    const char *why = nj_remote_check(c, name, val, n, signature, &v, &n_img);
    nj_status s = NJ_ERR_NOT_CACHED;
    if (why) {
        nj_remote_count(r, &r->n.rejected);
        nj_log(&r->log, NJ_LOG_WARN, "remote cache value %s refused: %s", key, why);
    } else if ((s = nj_cache_fill_entry(&v, out)) == NJ_OK) {
        nj_remote_count(r, &r->n.hits);
        nj_cache_remote_publish(c, hash, ext, val, n_img);
    }
    free(val);
    return s == NJ_OK ? NJ_OK : NJ_ERR_NOT_CACHED;
}

void nj_cache_remote_put(nj_cache *c, const char *hash, const char *ext, const void *hdr, size_t hdr_len,
                         const char *sig, size_t sig_len, const char *meta, size_t meta_len, const void *payload,
                         size_t payload_len)
{
    nj_remote *r = c ? c->remote : NULL;
    size_t n = hdr_len + sig_len + meta_len + payload_len;
    if (!r || n + NJ_REMOTE_TAG_SIZE > r->cfg.max_bytes) return;
    uint8_t *img = malloc(n);
    if (!img) return;
    memcpy(img, hdr, hdr_len);
    memcpy(img + hdr_len, sig, sig_len);
    memcpy(img + hdr_len + sig_len, meta, meta_len);
    if (payload_len) memcpy(img + hdr_len + sig_len + meta_len, payload, payload_len);
    char name[64];
    snprintf(name, sizeof name, "%s.%s", hash, ext);
    nj_remote_store(c, name, img, n);
    free(img);
}

/* ---- single flight across hosts ---- */

#define NJ_FLEET_LOOK 1
#define NJ_FLEET_HELD 2

int nj_cache_fleet_lock(nj_cache *c, const char *signature, const char *ext)
{
    nj_remote *r = c ? c->remote : NULL;
    if (!r || !signature || !nj_cache_ext_ok(ext)) return 0;
    char hash[33], lock[256], key[256], px[24];
    nj_hash_hex(signature, strlen(signature), hash);
    nj_remote_key(r, hash, NULL, lock, sizeof lock);
    nj_remote_key(r, hash, ext, key, sizeof key);
    snprintf(px, sizeof px, "%d", r->cfg.lock_ms);
    const char *set[6] = {"SET", lock, r->token, "NX", "PX", px}, *exists[2] = {"EXISTS", key};
    uint64_t deadline = nj_now_ns() + (uint64_t)r->cfg.wait_ms * 1000000ull;
    long poll_ms = 5; /* doubling to 50 ms: prompt for short compiles, light on Redis for long ones */
    for (int waited = 0;; waited = 1) {
        redisReply *rep = nj_remote_cmd(r, 6, set, NULL);
        if (!rep) return NJ_FLEET_LOOK;
        int held = rep->type == REDIS_REPLY_STATUS;
        freeReplyObject(rep);
        if (held) return NJ_FLEET_HELD;
        if (!waited) nj_remote_count(r, &r->n.lock_waits);
        /* Another host compiles it: its value appears, or its lock is released or expires. */
        rep = nj_remote_cmd(r, 2, exists, NULL);
        if (!rep) return NJ_FLEET_LOOK;
        int there = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0;
        freeReplyObject(rep);
        if (there) return NJ_FLEET_LOOK;
        if (nj_now_ns() >= deadline) {
            nj_remote_count(r, &r->n.lock_fallbacks);
            nj_log(&r->log, NJ_LOG_WARN, "remote cache: gave up waiting %d ms for another host's compile of %s",
                   r->cfg.wait_ms, hash);
            return NJ_FLEET_LOOK;
        }
        poll_ms = poll_ms * 2 > 50 ? 50 : poll_ms * 2;
        struct timespec ts = {0, poll_ms * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void nj_cache_fleet_unlock(nj_cache *c, const char *signature, int how)
{
    nj_remote *r = c ? c->remote : NULL;
    if (!r || !signature || how != NJ_FLEET_HELD) return;
    char hash[33], lock[256];
    nj_hash_hex(signature, strlen(signature), hash);
    nj_remote_key(r, hash, NULL, lock, sizeof lock);
    /* Only our own lock: one that expired and was taken by another host stays. */
    const char *argv[5] = {"EVAL",
                           "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
                           "return 0",
                           "1", lock, r->token};
    redisReply *rep = nj_remote_cmd(r, 5, argv, NULL);
    if (rep) freeReplyObject(rep);
}

/* ---- push / pull ---- */

typedef struct nj_push_state {
    nj_cache *c;
    uint64_t pushed;
} nj_push_state;

static int nj_push_one(void *user, int dfd, const char *name, const char *path, const char *ext, const struct stat *st)
{
    nj_push_state *ps = user;
    if (!S_ISREG(st->st_mode)) return 0;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat fst;
    const char *why = NULL;
    uint8_t *img = fstat(fd, &fst) == 0 ? nj_cache_read_fd(fd, &fst, &why) : NULL;
    close(fd);
    nj_cache_view v;
    char hash[33];
    if (img && !nj_cache_check_image(img, (size_t)fst.st_size, NULL, &v)) {
        nj_hash_hex(v.sig, v.sig_len, hash);
        if (memcmp(hash, name, 32) == 0) ps->pushed += (uint64_t)nj_remote_store(ps->c, name, img, (size_t)fst.st_size);
    }
    free(img);
    return 0;
}

nj_status nj_cache_remote_push(nj_cache *c, uint64_t *pushed)
{
    NJ_RETURN_IF(!c || !c->remote, NJ_ERR_UNSUPPORTED, "cache push: no remote cache configured");
    nj_push_state ps = {c, 0};
    NJ_TRY(nj_cache_walk(c, nj_push_one, &ps));
    if (pushed) *pushed = ps.pushed;
    nj_remote_counters k = {0};
    nj_remote_counters_get(c->remote, &k);
    NJ_RETURN_IF(nj_remote_status(c->remote) != NJ_OK, NJ_ERR_CACHE_IO,
                 "cache push: Redis at %s:%d failed (%llu errors)", c->remote->cfg.host, c->remote->cfg.port,
                 (unsigned long long)k.errors);
    return NJ_OK;
}

/* A pulled value: its name must be an entry name, its image must verify and hash to that name. */
static int nj_pull_one(nj_cache *c, const char *key, size_t plen)
{
    const char *name = key + plen, *ext = NULL;
    if (strlen(name) >= 64 || !nj_cache_entry_name(name, &ext)) return 0;
    uint8_t *val = NULL;
    size_t n = 0, n_img = 0;
    if (nj_remote_fetch_key(c->remote, key, &val, &n) != 1) return 0;
    nj_cache_view v;
    char hash[33];
    const char *why = nj_remote_check(c, name, val, n, NULL, &v, &n_img);
    if (!why) nj_hash_hex(v.sig, v.sig_len, hash);
    if (!why && memcmp(hash, name, 32) != 0) why = "its signature does not hash to its name";
    if (!why) nj_cache_remote_publish(c, hash, ext, val, n_img);
    else nj_remote_count(c->remote, &c->remote->n.rejected);
    if (why) nj_log(&c->remote->log, NJ_LOG_WARN, "remote cache value %s refused: %s", key, why);
    free(val);
    return why ? -1 : 1;
}

/* Every key under the prefix (SCAN, so Redis is never blocked), the entry-named ones passed to fn with the
 * name after the prefix; fn returns 1 for a value taken, -1 for one refused. */
typedef int (*nj_remote_scan_fn)(nj_cache *c, const char *key, size_t plen);

static nj_status nj_remote_scan(nj_cache *c, nj_remote_scan_fn fn, uint64_t *got, uint64_t *bad)
{
    nj_remote *r = c->remote;
    char match[300], cursor[32] = "0";
    size_t plen = strlen(r->cfg.prefix), m = 0;
    for (size_t i = 0; i < plen && m + 3 < sizeof match; i++) { /* the prefix matched literally */
        if (strchr("*?[]\\", r->cfg.prefix[i])) match[m++] = '\\';
        match[m++] = r->cfg.prefix[i];
    }
    snprintf(match + m, sizeof match - m, "*");
    do {
        const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", "200"};
        redisReply *rep = nj_remote_cmd(r, 6, argv, NULL);
        NJ_RETURN_IF(!rep, NJ_ERR_CACHE_IO, "Redis at %s:%d failed", r->cfg.host, r->cfg.port);
        int shape = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
                    rep->element[1]->type == REDIS_REPLY_ARRAY;
        if (shape) {
            snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
            for (size_t i = 0; i < rep->element[1]->elements; i++) {
                redisReply *k = rep->element[1]->element[i];
                if (k->type != REDIS_REPLY_STRING || k->len <= plen || memchr(k->str, 0, k->len)) continue;
                const char *name = k->str + plen;
                if (strlen(name) >= 64 || !nj_cache_entry_name(name, NULL)) continue; /* locks, strangers */
                int one = fn(c, k->str, plen);
                *got += one > 0;
                *bad += one < 0;
            }
        }
        freeReplyObject(rep);
        NJ_RETURN_IF(!shape, NJ_ERR_CACHE_IO, "unexpected SCAN reply from Redis");
    } while (strcmp(cursor, "0") != 0);
    return NJ_OK;
}

nj_status nj_cache_remote_pull(nj_cache *c, uint64_t *pulled, uint64_t *rejected)
{
    NJ_RETURN_IF(!c || !c->remote, NJ_ERR_UNSUPPORTED, "cache pull: no remote cache configured");
    uint64_t got = 0, bad = 0;
    nj_status s = nj_remote_scan(c, nj_pull_one, &got, &bad);
    if (pulled) *pulled = got;
    if (rejected) *rejected = bad;
    return s;
}

static int nj_count_one(nj_cache *c, const char *key, size_t plen) { return 1; }

nj_status nj_cache_remote_usage(nj_cache *c, uint64_t *values)
{
    NJ_RETURN_IF(!c || !c->remote, NJ_ERR_UNSUPPORTED, "no remote cache configured");
    uint64_t got = 0, bad = 0;
    nj_status s = nj_remote_scan(c, nj_count_one, &got, &bad);
    if (values) *values = got;
    return s;
}

#else /* built without hiredis */

struct nj_remote {
    int unused;
};

nj_status nj_remote_open(const char *url, const nj_logger *log, nj_remote **out)
{
    if (out) *out = NULL;
    return nj_fail(NJ_ERR_UNSUPPORTED, "this normjit was built without hiredis (libhiredis-dev): the Redis cache "
                                       "tier is unavailable");
}
void nj_remote_close(nj_remote *r) { free(r); }
void nj_remote_counters_get(nj_remote *r, nj_remote_counters *out)
{
    if (out) memset(out, 0, sizeof *out);
}
nj_status nj_remote_status(nj_remote *r) { return NJ_ERR_UNSUPPORTED; }
const nj_remote_config *nj_remote_config_of(const nj_remote *r) { return NULL; }
void nj_cache_attach_remote(nj_cache *c, nj_remote *r) { nj_remote_close(r); }
nj_remote *nj_cache_remote(nj_cache *c) { return NULL; }
nj_status nj_cache_remote_get(nj_cache *c, const char *signature, const char *ext, nj_cache_entry *out)
{
    return NJ_ERR_NOT_CACHED;
}
void nj_cache_remote_put(nj_cache *c, const char *hash, const char *ext, const void *hdr, size_t hdr_len,
                         const char *sig, size_t sig_len, const char *meta, size_t meta_len, const void *payload,
                         size_t payload_len)
{
}
int nj_cache_fleet_lock(nj_cache *c, const char *signature, const char *ext) { return 0; }
void nj_cache_fleet_unlock(nj_cache *c, const char *signature, int how) {}
nj_status nj_cache_remote_push(nj_cache *c, uint64_t *pushed)
{
    return nj_fail(NJ_ERR_UNSUPPORTED, "this normjit was built without hiredis: no Redis cache tier");
}
nj_status nj_cache_remote_pull(nj_cache *c, uint64_t *pulled, uint64_t *rejected)
{
    return nj_fail(NJ_ERR_UNSUPPORTED, "this normjit was built without hiredis: no Redis cache tier");
}
nj_status nj_cache_remote_usage(nj_cache *c, uint64_t *values)
{
    return nj_fail(NJ_ERR_UNSUPPORTED, "this normjit was built without hiredis: no Redis cache tier");
}

#endif

/* ---- configuration and statistics (both builds) ---- */

void nj_cache_remote_setup(nj_cache *c, const char *url, const nj_logger *log)
{
    if (!url || !*url) url = getenv("NORMJIT_REMOTE_CACHE");
    if (!c || !url || !*url) return;
    nj_remote *r = NULL;
    nj_status s = nj_remote_open(url, log, &r);
    c->remote_status = s;
    if (s != NJ_OK) {
        nj_log(log, NJ_LOG_WARN, "remote cache off: %s: %s", nj_status_name(s), nj_last_error());
        nj_error_clear();
        return;
    }
    /* Values from Redis are loaded as code: no tier without the key that authenticates them. */
    if (!c->key_len && (s = nj_cache_key_from_env(c)) != NJ_OK) {
        c->remote_status = s;
        nj_log(log, NJ_LOG_WARN, "remote cache off: %s (the Redis tier needs the cache key: NORMJIT_CACHE_KEY_FILE "
               "or NORMJIT_CACHE_KEY)", nj_last_error());
        nj_error_clear();
        nj_remote_close(r);
        return;
    }
    nj_cache_attach_remote(c, r);
}

nj_status nj_context_remote_cache_stats(nj_context *ctx, nj_remote_cache_stats *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !out, NJ_ERR_NULL_POINTER, "nj_context_remote_cache_stats: NULL argument");
    NJ_RETURN_IF(out->struct_size != sizeof *out, NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_remote_cache_stats.struct_size is %u, expected %zu", out->struct_size, sizeof *out);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    nj_cache *c = nj_context_disk_cache(ctx);
    nj_remote *r = nj_cache_remote(c);
    out->status = c ? (int32_t)c->remote_status : NJ_ERR_UNSUPPORTED;
    if (!r) return NJ_OK;
    out->enabled = 1;
    out->status = (int32_t)nj_remote_status(r);
    nj_remote_counters k;
    nj_remote_counters_get(r, &k);
    out->hits = k.hits;
    out->misses = k.misses;
    out->rejected = k.rejected;
    out->stores = k.stores;
    out->errors = k.errors;
    out->skipped = k.skipped;
    out->lock_waits = k.lock_waits;
    out->lock_fallbacks = k.lock_fallbacks;
    return NJ_OK;
}
