/* normjit cache: maintenance of the on-disk kernel cache (src/cache.h) without a context, so that it
 * works on any machine: list, usage, verify (removing bad entries), gc to a bound, clear, and moving a
 * warmed cache between machines as one file. */
#include "tool.h"

#include "cache.h"
#include "cache_remote.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void nj_cache_help(FILE *f)
{
    fprintf(f,
            "usage: normjit cache [--cache DIR] ACTION [ARG]\n"
            "\n"
            "actions:\n"
            "  ls                  list entries: hash, size, age, and the problem/pass from the signature\n"
            "  stats               usage (bytes, entries) and a summary by kind of binary\n"
            "  verify              verify every entry; bad ones are reported and removed (exit 1 if any)\n"
            "  gc [--max-bytes N]  evict least recently used entries down to N bytes (K/M/G suffixes;\n"
            "                      default 1G)\n"
            "  clear               remove every entry\n"
            "  export FILE         write every valid entry into one archive file, each entry signed with the\n"
            "                      cache key (HMAC-SHA256)\n"
            "  import FILE         add the entries of an archive: each one's signature is checked with the\n"
            "                      cache key, then the entry verified; forged, damaged and unstored entries\n"
            "                      are counted and fail the command (exit 1)\n"
            "  push                copy every valid entry to the Redis tier (set-if-absent)\n"
            "  pull                copy every value of the Redis tier into this cache, each one verified\n"
            "                      like a local entry (refused ones are counted and fail the command)\n"
            "\n"
            "options:\n"
            "  --cache DIR         cache root (default: NORMJIT_CACHE_DIR, else ./cache in a normjit source tree,\n"
            "                      else $XDG_CACHE_HOME/normjit, else ~/.cache/normjit)\n"
            "  --remote URL        Redis tier for push, pull and stats (default: NORMJIT_REMOTE_CACHE),\n"
            "                      redis://[:password@]host:port[/db][?prefix=P&ttl=S&timeout_ms=T]\n"
            "  -h, --help          this text\n"
            "\n"
            "The cache key (export, import, push, pull): NORMJIT_CACHE_KEY_FILE, a file of this user not open\n"
            "to group or others whose bytes (16 to 4096) are the key, else NORMJIT_CACHE_KEY. Use the same key\n"
            "on every machine that shares entries; without one, these actions refuse.\n");
}

/* Hash of an entry from its path: the file name without directory and extension. */
static void nj_cache_hash_of(const char *path, char *out, size_t cap)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strcspn(b, ".");
    snprintf(out, cap, "%.*s", (int)n, b);
}

static const char *nj_cache_ext_of(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    const char *d = strchr(b, '.');
    return d ? d + 1 : "";
}

/* Value of the signature line starting with `key ` ("" if none). */
static void nj_cache_sig_field(const char *sig, const char *key, char *out, size_t cap)
{
    size_t k = strlen(key);
    out[0] = '\0';
    for (const char *p = sig; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, key, k) && p[k] == ' ') {
            snprintf(out, cap, "%.*s", (int)strcspn(p + k + 1, "\n"), p + k + 1);
            return;
        }
    }
}

/* What an entry holds, from its signature: "pass target problem", "lib target kernel param=dtype" for a
 * library module shared by many problems' passes (or its first line if unrecognized). */
static void nj_cache_sig_head(const char *sig, char *out, size_t cap)
{
    if (!sig) {
        snprintf(out, cap, "(unreadable)");
        return;
    }
    char prob[384], pass[16], target[48], lib[32], param[16];
    nj_cache_sig_field(sig, "problem", prob, sizeof prob);
    nj_cache_sig_field(sig, "pass", pass, sizeof pass);
    nj_cache_sig_field(sig, "target", target, sizeof target);
    nj_cache_sig_field(sig, "library", lib, sizeof lib);
    nj_cache_sig_field(sig, "param", param, sizeof param);
    if (prob[0]) snprintf(out, cap, "%-3s %-8s %s", pass, target, prob);
    else if (lib[0] && strcmp(param, "none") != 0) snprintf(out, cap, "lib %-8s %s param=%s", target, lib, param);
    else if (lib[0]) snprintf(out, cap, "lib %-8s %s", target, lib); /* one module for every gamma dtype */
    else snprintf(out, cap, "%.*s", (int)strcspn(sig, "\n"), sig);
}

static void nj_cache_age(int64_t mtime, char *out, size_t cap)
{
    int64_t age = (int64_t)time(NULL) - mtime;
    if (age < 0) age = 0;
    if (age < 120) snprintf(out, cap, "%llds", (long long)age);
    else if (age < 7200) snprintf(out, cap, "%lldm", (long long)(age / 60));
    else if (age < 172800) snprintf(out, cap, "%lldh", (long long)(age / 3600));
    else snprintf(out, cap, "%lldd", (long long)(age / 86400));
}

typedef struct nj_cache_walk {
    uint64_t count, bytes, bad, removed;
    int verbose;
    /* stats: per-extension summary */
    char ext[8][16];
    uint64_t ext_count[8], ext_bytes[8];
    int next;
    int64_t oldest, newest;
} nj_cache_walk;

static void nj_cache_visit_ls(void *user, const char *path, const char *signature, uint64_t bytes, int64_t mtime,
                              nj_status vs, int removed)
{
    nj_cache_walk *w = user;
    char hash[64], age[32], head[600], size[32];
    nj_cache_hash_of(path, hash, sizeof hash);
    nj_cache_age(mtime, age, sizeof age);
    nj_cache_sig_head(signature, head, sizeof head);
    printf("%-32s %10s %6s  %-5s %s\n", hash, nj_tool_bytes(bytes, size, sizeof size), age, nj_cache_ext_of(path),
           head);
    w->count++;
    w->bytes += bytes;
    (void)vs;
    (void)removed;
}

static void nj_cache_visit_stats(void *user, const char *path, const char *signature, uint64_t bytes, int64_t mtime,
                                 nj_status vs, int removed)
{
    nj_cache_walk *w = user;
    const char *ext = nj_cache_ext_of(path);
    int k = 0;
    while (k < w->next && strcmp(w->ext[k], ext)) k++;
    if (k == w->next && w->next < 8) snprintf(w->ext[w->next++], sizeof w->ext[0], "%s", ext);
    if (k < 8) {
        w->ext_count[k]++;
        w->ext_bytes[k] += bytes;
    }
    if (!w->count || mtime < w->oldest) w->oldest = mtime;
    if (!w->count || mtime > w->newest) w->newest = mtime;
    w->count++;
    w->bytes += bytes;
    (void)signature;
    (void)vs;
    (void)removed;
}

static void nj_cache_visit_verify(void *user, const char *path, const char *signature, uint64_t bytes, int64_t mtime,
                                  nj_status vs, int removed)
{
    nj_cache_walk *w = user;
    w->count++;
    w->bytes += bytes;
    if (vs == NJ_OK) return;
    w->bad++;
    w->removed += (uint64_t)(removed != 0);
    if (removed) printf("bad entry removed: %s: %s\n", path, nj_status_name(vs));
    else printf("bad entry left in place (it could not be removed): %s: %s\n", path, nj_status_name(vs));
    (void)signature;
    (void)mtime;
}

static int nj_cache_do_stats(nj_cache *c)
{
    uint64_t bytes = 0, entries = 0;
    nj_status s = nj_cache_usage(c, &bytes, &entries);
    if (s != NJ_OK) {
        nj_tool_error(s, "cannot measure %s", nj_cache_root(c));
        return NJ_EXIT_FAIL;
    }
    nj_cache_walk w;
    memset(&w, 0, sizeof w);
    s = nj_cache_scan(c, 0, nj_cache_visit_stats, &w);
    if (s != NJ_OK) {
        nj_tool_error(s, "cannot scan %s", nj_cache_root(c));
        return NJ_EXIT_FAIL;
    }
    char b[32], age[32];
    printf("root        %s%s\n", nj_cache_root(c), nj_cache_read_only(c) ? " (read-only)" : "");
    printf("format      v%d\n", NJ_CACHE_FORMAT);
    printf("entries     %llu\n", (unsigned long long)entries);
    printf("size        %s (%llu bytes)\n", nj_tool_bytes(bytes, b, sizeof b), (unsigned long long)bytes);
    for (int k = 0; k < w.next; k++)
        printf("  %-9s %llu entries, %s\n", w.ext[k], (unsigned long long)w.ext_count[k],
               nj_tool_bytes(w.ext_bytes[k], b, sizeof b));
    if (w.count) {
        nj_cache_age(w.oldest, age, sizeof age);
        printf("oldest      %s ago\n", age);
        nj_cache_age(w.newest, age, sizeof age);
        printf("newest      %s ago\n", age);
    }
    nj_cache_counters k;
    nj_cache_counters_get(c, &k);
    printf("this run    hits %llu, misses %llu, stores %llu, evictions %llu, corrupt %llu\n",
           (unsigned long long)k.hits, (unsigned long long)k.misses, (unsigned long long)k.stores,
           (unsigned long long)k.evictions, (unsigned long long)k.corrupt);
    return NJ_EXIT_OK;
}

/* The Redis tier, when one is configured: where, reachable, values under the prefix, this run's counters. */
static int nj_cache_remote_stats(nj_cache *c)
{
    nj_remote *r = nj_cache_remote(c);
    if (!r) return NJ_EXIT_OK;
    const nj_remote_config *cfg = nj_remote_config_of(r);
    uint64_t values = 0;
    nj_status s = nj_cache_remote_usage(c, &values);
    nj_remote_counters k;
    nj_remote_counters_get(r, &k);
    printf("remote      redis://%s:%d/%d prefix \"%s\"%s\n", cfg->host, cfg->port, cfg->db, cfg->prefix,
           s == NJ_OK ? "" : " (unreachable)");
    if (s == NJ_OK) printf("  values    %llu\n", (unsigned long long)values);
    printf("  this run  hits %llu, misses %llu, rejected %llu, stores %llu, errors %llu\n",
           (unsigned long long)k.hits, (unsigned long long)k.misses, (unsigned long long)k.rejected,
           (unsigned long long)k.stores, (unsigned long long)k.errors);
    if (s != NJ_OK) nj_tool_error(s, "remote cache");
    return s == NJ_OK ? NJ_EXIT_OK : NJ_EXIT_FAIL;
}

static int nj_cache_do_remote(nj_cache *c, const char *action)
{
    uint64_t n = 0, bad = 0;
    nj_status s = !strcmp(action, "push") ? nj_cache_remote_push(c, &n) : nj_cache_remote_pull(c, &n, &bad);
    nj_remote_counters k;
    nj_remote_counters_get(nj_cache_remote(c), &k);
    if (!strcmp(action, "push")) printf("pushed %llu entries (already there: left as they were)\n", (unsigned long long)n);
    else printf("pulled %llu entries, %llu refused by verification\n", (unsigned long long)n, (unsigned long long)bad);
    if (s != NJ_OK) {
        nj_tool_error(s, "cache %s failed", action);
        return NJ_EXIT_FAIL;
    }
    return bad ? NJ_EXIT_FAIL : NJ_EXIT_OK;
}

static int nj_cache_do_walk(nj_cache *c, int verify)
{
    nj_cache_walk w;
    memset(&w, 0, sizeof w);
    nj_status s = nj_cache_scan(c, verify, verify ? nj_cache_visit_verify : nj_cache_visit_ls, &w);
    if (s != NJ_OK) {
        nj_tool_error(s, "cannot scan %s", nj_cache_root(c));
        return NJ_EXIT_FAIL;
    }
    char b[32];
    if (verify && w.removed == w.bad)
        printf("%llu entries verified, %llu bad (removed), %llu good\n", (unsigned long long)w.count,
               (unsigned long long)w.bad, (unsigned long long)(w.count - w.bad));
    else if (verify)
        printf("%llu entries verified, %llu bad (%llu removed, %llu left in place%s), %llu good\n",
               (unsigned long long)w.count, (unsigned long long)w.bad, (unsigned long long)w.removed,
               (unsigned long long)(w.bad - w.removed), nj_cache_read_only(c) ? ": the root is read-only" : "",
               (unsigned long long)(w.count - w.bad));
    else printf("%llu entries, %s\n", (unsigned long long)w.count, nj_tool_bytes(w.bytes, b, sizeof b));
    return w.bad ? NJ_EXIT_FAIL : NJ_EXIT_OK;
}

/* Import: every entry not stored is counted with its reason; any (or any rejected) fails the command. */
static int nj_cache_do_import(nj_cache *c, const char *file)
{
    uint64_t n = 0, m = 0;
    nj_status s = nj_cache_import(c, file, &n, &m);
    nj_cache_counters k;
    nj_cache_counters_get(c, &k);
    uint64_t not_stored = k.store_nospace + k.store_read_only + k.store_other;
    printf("imported %llu entries from %s, %llu rejected (%llu failed authentication), %llu not stored "
           "(no space %llu, read-only %llu, other %llu)\n",
           (unsigned long long)n, file, (unsigned long long)m, (unsigned long long)k.untrusted,
           (unsigned long long)not_stored, (unsigned long long)k.store_nospace, (unsigned long long)k.store_read_only,
           (unsigned long long)k.store_other);
    if (s != NJ_OK) {
        nj_tool_error(s, "cache import failed");
        return NJ_EXIT_FAIL;
    }
    return m || not_stored ? NJ_EXIT_FAIL : NJ_EXIT_OK;
}

static int nj_cache_do_action(nj_cache *c, const char *action, const char *arg, uint64_t max_bytes)
{
    nj_status s;
    uint64_t n = 0;
    if (!strcmp(action, "ls")) return nj_cache_do_walk(c, 0);
    if (!strcmp(action, "verify")) return nj_cache_do_walk(c, 1);
    if (!strcmp(action, "stats")) {
        int rc = nj_cache_do_stats(c);
        int rrc = nj_cache_remote_stats(c);
        return rc != NJ_EXIT_OK ? rc : rrc;
    }
    if (!strcmp(action, "push") || !strcmp(action, "pull")) return nj_cache_do_remote(c, action);
    if (!strcmp(action, "gc")) {
        if ((s = nj_cache_gc(c, max_bytes, &n)) == NJ_OK)
            printf("evicted %llu entries (bound %llu bytes)\n", (unsigned long long)n, (unsigned long long)max_bytes);
    } else if (!strcmp(action, "clear")) {
        if ((s = nj_cache_clear(c)) == NJ_OK) printf("cleared %s\n", nj_cache_root(c));
    } else if (!strcmp(action, "export")) {
        if ((s = nj_cache_export(c, arg, &n)) == NJ_OK) printf("exported %llu entries to %s\n", (unsigned long long)n, arg);
    } else {
        return nj_cache_do_import(c, arg);
    }
    if (s != NJ_OK) {
        nj_tool_error(s, "cache %s failed", action);
        return NJ_EXIT_FAIL;
    }
    return NJ_EXIT_OK;
}

/* push and pull need a Redis tier; stats shows one when configured. Errors go to stderr (the tool prints). */
static int nj_cache_attach_tool_remote(nj_cache *c, const char *action, const char *url)
{
    int needs = !strcmp(action, "push") || !strcmp(action, "pull");
    if (!url || !*url) url = getenv("NORMJIT_REMOTE_CACHE");
    if (!url || !*url) {
        if (needs) fprintf(stderr, "normjit cache %s: no Redis tier (set --remote or NORMJIT_REMOTE_CACHE)\n", action);
        return needs ? NJ_EXIT_USAGE : NJ_EXIT_OK;
    }
    if (!needs && strcmp(action, "stats") != 0) return NJ_EXIT_OK;
    nj_remote *r = NULL;
    nj_status s = nj_remote_open(url, NULL, &r);
    if (s != NJ_OK) {
        nj_tool_error(s, "remote cache");
        return NJ_EXIT_FAIL;
    }
    nj_cache_attach_remote(c, r);
    /* values are authenticated with the cache key, as archives are */
    if (needs && (s = nj_cache_key_from_env(c)) != NJ_OK) { /* stats reads no value */
        nj_tool_error(s, "the Redis tier needs the cache key (NORMJIT_CACHE_KEY_FILE or NORMJIT_CACHE_KEY)");
        return NJ_EXIT_FAIL;
    }
    return NJ_EXIT_OK;
}

int nj_cmd_cache(int argc, char **argv)
{
    const char *dir = NULL, *action = NULL, *arg = NULL, *remote = NULL;
    uint64_t max_bytes = 1ull << 30;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (nj_tool_is_help(argv[i])) {
            nj_cache_help(stdout);
            return NJ_EXIT_OK;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return nj_tool_usage_error("cache", "--cache needs a directory");
            dir = v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--remote", &v))) {
            if (r < 0) return nj_tool_usage_error("cache", "--remote needs a redis:// URL");
            remote = v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--max-bytes", &v))) {
            if (r < 0 || nj_tool_parse_u64(v, &max_bytes))
                return nj_tool_usage_error("cache", "--max-bytes takes a size like 500M");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return nj_tool_usage_error("cache", "unknown option '%s'", argv[i]);
        } else if (!action) {
            action = argv[i];
        } else if (!arg) {
            arg = argv[i];
        } else {
            return nj_tool_usage_error("cache", "unexpected argument '%s'", argv[i]);
        }
    }
    static const char *const actions[] = {"ls", "stats", "verify", "gc", "clear", "export", "import", "push", "pull"};
    int known = 0, needs_file = action && (!strcmp(action, "export") || !strcmp(action, "import"));
    for (size_t k = 0; action && k < sizeof actions / sizeof actions[0]; k++) known |= !strcmp(action, actions[k]);
    if (!action) return nj_tool_usage_error("cache", "no action given");
    if (!known) return nj_tool_usage_error("cache", "unknown action '%s'", action);
    if (needs_file && !arg) return nj_tool_usage_error("cache", "%s needs a FILE", action);
    if (!needs_file && arg) return nj_tool_usage_error("cache", "unexpected argument '%s'", arg);
    char *root = nj_cache_default_root(nj_tool_cache_root(dir));
    if (!root) {
        fprintf(stderr, "normjit cache: no cache root (set --cache, NORMJIT_CACHE_DIR or HOME)\n");
        return NJ_EXIT_FAIL;
    }
    nj_cache *c = NULL;
    /* Opening with no size bound: maintenance must not evict as a side effect (gc does that on request). */
    nj_status s = nj_cache_open(root, UINT64_MAX, &c);
    int rc = NJ_EXIT_FAIL;
    if (s != NJ_OK) nj_tool_error(s, "cannot open the cache at %s", root);
    else rc = nj_cache_attach_tool_remote(c, action, remote);
    if (rc == NJ_EXIT_OK) rc = nj_cache_do_action(c, action, arg, max_bytes);
    if (c) nj_cache_close(c);
    free(root);
    return rc;
}
