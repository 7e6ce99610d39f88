/* normjit cache: maintenance of the on-disk kernel cache without a context (the public nj_cachedir_* calls,
 * plus the operator header for the Redis tier), so that it works on any machine: list, usage, verify (removing bad entries), gc to a bound, clear, and moving a
 * warmed cache between machines as one file. */
#include "tool.h"

#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void njt_cache_help(FILE *f)
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

/* Value of the signature line starting with `key ` ("" if none). */
static void njt_cache_sig_field(const char *sig, const char *key, char *out, size_t cap)
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
 * library module shared by many problems' passes, "generic pass target x=dtype param=dtype" for a
 * generic module (or its first line if unrecognized). */
static void njt_cache_sig_head(const char *sig, char *out, size_t cap)
{
    if (!sig) {
        snprintf(out, cap, "(unreadable)");
        return;
    }
    char prob[384], pass[16], target[48], lib[32], param[16], generic[16], x[16];
    njt_cache_sig_field(sig, "problem", prob, sizeof prob);
    njt_cache_sig_field(sig, "pass", pass, sizeof pass);
    njt_cache_sig_field(sig, "target", target, sizeof target);
    njt_cache_sig_field(sig, "library", lib, sizeof lib);
    njt_cache_sig_field(sig, "param", param, sizeof param);
    njt_cache_sig_field(sig, "generic", generic, sizeof generic);
    njt_cache_sig_field(sig, "x", x, sizeof x);
    if (generic[0]) snprintf(out, cap, "gen %-8s %s x=%s param=%s", target, generic, x, param);
    else if (prob[0]) snprintf(out, cap, "%-3s %-8s %s", pass, target, prob);
    else if (lib[0] && strcmp(param, "none") != 0) snprintf(out, cap, "lib %-8s %s param=%s", target, lib, param);
    else if (lib[0]) snprintf(out, cap, "lib %-8s %s", target, lib); /* one module for every gamma dtype */
    else snprintf(out, cap, "%.*s", (int)strcspn(sig, "\n"), sig);
}

static void njt_cache_age(int64_t mtime, char *out, size_t cap)
{
    int64_t age = (int64_t)time(NULL) - mtime;
    if (age < 0) age = 0;
    if (age < 120) snprintf(out, cap, "%llds", (long long)age);
    else if (age < 7200) snprintf(out, cap, "%lldm", (long long)(age / 60));
    else if (age < 172800) snprintf(out, cap, "%lldh", (long long)(age / 3600));
    else snprintf(out, cap, "%lldd", (long long)(age / 86400));
}

typedef struct njt_cache_walk {
    uint64_t count, bytes, bad, removed;
    /* stats: per-kind summary */
    char ext[8][16];
    uint64_t ext_count[8], ext_bytes[8];
    int next;
} njt_cache_walk;

static int njt_cache_visit_ls(void *user, const nj_cachedir_entry *e)
{
    njt_cache_walk *w = user;
    char age[32], head[600], size[32];
    njt_cache_age(e->mtime, age, sizeof age);
    njt_cache_sig_head(e->signature, head, sizeof head);
    printf("%-32s %10s %6s  %-5s %s\n", e->hash, njt_tool_bytes(e->bytes, size, sizeof size), age, e->kind, head);
    w->count++;
    w->bytes += e->bytes;
    return 0;
}

static int njt_cache_visit_stats(void *user, const nj_cachedir_entry *e)
{
    njt_cache_walk *w = user;
    int k = 0;
    while (k < w->next && strcmp(w->ext[k], e->kind)) k++;
    if (k == w->next && w->next < 8) snprintf(w->ext[w->next++], sizeof w->ext[0], "%s", e->kind);
    if (k < 8) {
        w->ext_count[k]++;
        w->ext_bytes[k] += e->bytes;
    }
    return 0;
}

static int njt_cache_visit_verify(void *user, const nj_cachedir_entry *e)
{
    njt_cache_walk *w = user;
    if (e->status == NJ_OK) return 0;
    w->removed += (uint64_t)(e->removed != 0);
    if (e->removed) printf("bad entry removed: %s: %s\n", e->path, nj_status_name(e->status));
    else printf("bad entry left in place (it could not be removed): %s: %s\n", e->path, nj_status_name(e->status));
    return 0;
}

static int njt_cache_do_stats(nj_cachedir *d)
{
    nj_cachedir_stats st = {.struct_size = sizeof st};
    njt_cache_walk w;
    memset(&w, 0, sizeof w);
    nj_status s = nj_cachedir_stats_get(d, &st);
    if (s == NJ_OK) s = nj_cachedir_list(d, njt_cache_visit_stats, &w);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot scan %s", nj_cachedir_root(d));
        return NJT_EXIT_FAIL;
    }
    char b[32], age[32];
    printf("root        %s%s\n", nj_cachedir_root(d), st.read_only ? " (read-only)" : "");
    printf("format      v%d\n", (int)st.format);
    printf("entries     %llu\n", (unsigned long long)st.entries);
    printf("size        %s (%llu bytes)\n", njt_tool_bytes(st.bytes, b, sizeof b), (unsigned long long)st.bytes);
    for (int k = 0; k < w.next; k++)
        printf("  %-9s %llu entries, %s\n", w.ext[k], (unsigned long long)w.ext_count[k],
               njt_tool_bytes(w.ext_bytes[k], b, sizeof b));
    if (st.entries) {
        njt_cache_age(st.oldest, age, sizeof age);
        printf("oldest      %s ago\n", age);
        njt_cache_age(st.newest, age, sizeof age);
        printf("newest      %s ago\n", age);
    }
    printf("this run    hits %llu, misses %llu, stores %llu, evictions %llu, corrupt %llu\n",
           (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.stores,
           (unsigned long long)st.evictions, (unsigned long long)st.corrupt);
    return NJT_EXIT_OK;
}

/* The Redis tier, when one is configured: where, reachable, values under the prefix, this run's counters. */
static int njt_cache_remote_stats(nj_cachedir *d)
{
    nj_ops_remote_info ri;
    if (nj_ops_cachedir_remote_info(d, &ri) != NJ_OK) return NJT_EXIT_OK; /* no tier */
    const nj_remote_cache_stats *k = &ri.counters;
    printf("remote      redis://%s:%d/%d prefix \"%s\"%s\n", ri.host, (int)ri.port, (int)ri.db, ri.prefix,
           ri.status == NJ_OK ? "" : " (unreachable)");
    if (ri.status == NJ_OK) printf("  values    %llu\n", (unsigned long long)ri.values);
    printf("  this run  hits %llu, misses %llu, rejected %llu, stores %llu, errors %llu\n",
           (unsigned long long)k->hits, (unsigned long long)k->misses, (unsigned long long)k->rejected,
           (unsigned long long)k->stores, (unsigned long long)k->errors);
    if (ri.status != NJ_OK) njt_tool_error(ri.status, "remote cache");
    return ri.status == NJ_OK ? NJT_EXIT_OK : NJT_EXIT_FAIL;
}

static int njt_cache_do_remote(nj_cachedir *d, const char *action)
{
    uint64_t n = 0, bad = 0;
    nj_status s = !strcmp(action, "push") ? nj_ops_cachedir_push(d, &n) : nj_ops_cachedir_pull(d, &n, &bad);
    if (!strcmp(action, "push")) printf("pushed %llu entries (already there: left as they were)\n", (unsigned long long)n);
    else printf("pulled %llu entries, %llu refused by verification\n", (unsigned long long)n, (unsigned long long)bad);
    if (s != NJ_OK) {
        njt_tool_error(s, "cache %s failed", action);
        return NJT_EXIT_FAIL;
    }
    return bad ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

static int njt_cache_do_walk(nj_cachedir *d, int verify)
{
    njt_cache_walk w;
    memset(&w, 0, sizeof w);
    uint64_t count = 0, bad = 0;
    nj_status s = verify ? nj_cachedir_verify(d, njt_cache_visit_verify, &w, &count, &bad)
                         : nj_cachedir_list(d, njt_cache_visit_ls, &w);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot scan %s", nj_cachedir_root(d));
        return NJT_EXIT_FAIL;
    }
    char b[32];
    if (verify && w.removed == bad)
        printf("%llu entries verified, %llu bad (removed), %llu good\n", (unsigned long long)count,
               (unsigned long long)bad, (unsigned long long)(count - bad));
    else if (verify) {
        nj_cachedir_stats st = {.struct_size = sizeof st};
        int ro = nj_cachedir_stats_get(d, &st) == NJ_OK && st.read_only;
        printf("%llu entries verified, %llu bad (%llu removed, %llu left in place%s), %llu good\n",
               (unsigned long long)count, (unsigned long long)bad, (unsigned long long)w.removed,
               (unsigned long long)(bad - w.removed), ro ? ": the root is read-only" : "",
               (unsigned long long)(count - bad));
    } else printf("%llu entries, %s\n", (unsigned long long)w.count, njt_tool_bytes(w.bytes, b, sizeof b));
    return bad ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

/* Import: every entry not stored is counted with its reason; any (or any rejected) fails the command. */
static int njt_cache_do_import(nj_cachedir *d, const char *file)
{
    uint64_t n = 0, m = 0;
    nj_status s = nj_cachedir_import(d, file, &n, &m);
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", nj_last_error()); /* the stats call below clears it */
    nj_cachedir_stats k = {.struct_size = sizeof k};
    nj_cachedir_stats_get(d, &k);
    uint64_t not_stored = k.not_stored_nospace + k.not_stored_read_only + k.not_stored_other;
    printf("imported %llu entries from %s, %llu rejected (%llu failed authentication), %llu not stored "
           "(no space %llu, read-only %llu, other %llu)\n",
           (unsigned long long)n, file, (unsigned long long)m, (unsigned long long)k.untrusted,
           (unsigned long long)not_stored, (unsigned long long)k.not_stored_nospace,
           (unsigned long long)k.not_stored_read_only, (unsigned long long)k.not_stored_other);
    if (s != NJ_OK) {
        fprintf(stderr, "normjit: cache import failed: %s: %s\n", nj_status_name(s),
                detail[0] ? detail : nj_status_string(s));
        return NJT_EXIT_FAIL;
    }
    return m || not_stored ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

static int njt_cache_do_action(nj_cachedir *d, const char *action, const char *arg, uint64_t max_bytes)
{
    nj_status s;
    uint64_t n = 0;
    if (!strcmp(action, "ls")) return njt_cache_do_walk(d, 0);
    if (!strcmp(action, "verify")) return njt_cache_do_walk(d, 1);
    if (!strcmp(action, "stats")) {
        int rc = njt_cache_do_stats(d);
        int rrc = njt_cache_remote_stats(d);
        return rc != NJT_EXIT_OK ? rc : rrc;
    }
    if (!strcmp(action, "push") || !strcmp(action, "pull")) return njt_cache_do_remote(d, action);
    if (!strcmp(action, "gc")) {
        if ((s = nj_cachedir_trim(d, max_bytes, &n)) == NJ_OK)
            printf("evicted %llu entries (bound %llu bytes)\n", (unsigned long long)n, (unsigned long long)max_bytes);
    } else if (!strcmp(action, "clear")) {
        if ((s = nj_cachedir_clear(d)) == NJ_OK) printf("cleared %s\n", nj_cachedir_root(d));
    } else if (!strcmp(action, "export")) {
        if ((s = nj_cachedir_export(d, arg, &n)) == NJ_OK) printf("exported %llu entries to %s\n", (unsigned long long)n, arg);
    } else {
        return njt_cache_do_import(d, arg);
    }
    if (s != NJ_OK) {
        njt_tool_error(s, "cache %s failed", action);
        return NJT_EXIT_FAIL;
    }
    return NJT_EXIT_OK;
}

/* push and pull need a Redis tier; stats shows one when configured. Errors go to stderr (the tool prints). */
static int njt_cache_attach_tool_remote(nj_cachedir *d, const char *action, const char *url)
{
    int needs = !strcmp(action, "push") || !strcmp(action, "pull");
    if (!url || !*url) url = getenv("NORMJIT_REMOTE_CACHE");
    if (!url || !*url) {
        if (needs) fprintf(stderr, "normjit cache %s: no Redis tier (set --remote or NORMJIT_REMOTE_CACHE)\n", action);
        return needs ? NJT_EXIT_USAGE : NJT_EXIT_OK;
    }
    if (!needs && strcmp(action, "stats") != 0) return NJT_EXIT_OK;
    nj_status s = nj_ops_cachedir_attach_remote(d, url);
    if (s != NJ_OK) {
        njt_tool_error(s, "remote cache");
        return NJT_EXIT_FAIL;
    }
    /* values are authenticated with the cache key, as archives are */
    if (needs && (s = nj_ops_cachedir_key_from_env(d)) != NJ_OK) { /* stats reads no value */
        njt_tool_error(s, "the Redis tier needs the cache key (NORMJIT_CACHE_KEY_FILE or NORMJIT_CACHE_KEY)");
        return NJT_EXIT_FAIL;
    }
    return NJT_EXIT_OK;
}

int njt_cmd_cache(int argc, char **argv)
{
    const char *dir = NULL, *action = NULL, *arg = NULL, *remote = NULL;
    uint64_t max_bytes = 1ull << 30;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (njt_tool_is_help(argv[i])) {
            njt_cache_help(stdout);
            return NJT_EXIT_OK;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return njt_tool_usage_error("cache", "--cache needs a directory");
            dir = v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--remote", &v))) {
            if (r < 0) return njt_tool_usage_error("cache", "--remote needs a redis:// URL");
            remote = v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--max-bytes", &v))) {
            if (r < 0 || njt_tool_parse_u64(v, &max_bytes))
                return njt_tool_usage_error("cache", "--max-bytes takes a size like 500M");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return njt_tool_usage_error("cache", "unknown option '%s'", argv[i]);
        } else if (!action) {
            action = argv[i];
        } else if (!arg) {
            arg = argv[i];
        } else {
            return njt_tool_usage_error("cache", "unexpected argument '%s'", argv[i]);
        }
    }
    static const char *const actions[] = {"ls", "stats", "verify", "gc", "clear", "export", "import", "push", "pull"};
    int known = 0, needs_file = action && (!strcmp(action, "export") || !strcmp(action, "import"));
    for (size_t k = 0; action && k < sizeof actions / sizeof actions[0]; k++) known |= !strcmp(action, actions[k]);
    if (!action) return njt_tool_usage_error("cache", "no action given");
    if (!known) return njt_tool_usage_error("cache", "unknown action '%s'", action);
    if (needs_file && !arg) return njt_tool_usage_error("cache", "%s needs a FILE", action);
    if (!needs_file && arg) return njt_tool_usage_error("cache", "unexpected argument '%s'", arg);
    nj_cachedir *d = NULL;
    const char *root = njt_tool_cache_root(dir);
    nj_status s = nj_cachedir_open(root, 0, &d);
    int rc = NJT_EXIT_FAIL;
    if (s != NJ_OK && s == NJ_ERR_CACHE_IO && !root && !getenv("NORMJIT_CACHE_DIR") && !getenv("HOME"))
        fprintf(stderr, "normjit cache: no cache root (set --cache, NORMJIT_CACHE_DIR or HOME)\n");
    else if (s != NJ_OK) njt_tool_error(s, "cannot open the cache at %s", root ? root : "the default root");
    else rc = njt_cache_attach_tool_remote(d, action, remote);
    if (rc == NJT_EXIT_OK) rc = njt_cache_do_action(d, action, arg, max_bytes);
    nj_cachedir_close(d);
    return rc;
}
