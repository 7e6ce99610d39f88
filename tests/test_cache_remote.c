/* The shared Redis tier (src/cache_remote.c) against a real redis-server this suite starts on loopback, on a
 * free port, in a temp dir: hosts (separate processes, separate cache roots) share kernels through it, cold
 * hosts compile each kernel once between them, a Redis killed and restarted mid-run is survived and used
 * again, poisoned values are refused, a server that never answers costs no more than the timeout. The
 * emulator backend compiles, so no GPU is needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_remote.h"
#include "normjit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const problems[] = {"rmsnorm f32 *x256 flags=scale", "layernorm f32 *x160 flags=scale,bias"};
#define NPROB 2

static char tmp_root[256];

static void rootf(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmp_root, name);
}

typedef struct host_result {
    int ok;
    uint64_t compiles, hits_disk, disk_entries;
    nj_remote_cache_stats remote;
    int remote_warnings;
} host_result;

static int count_warnings;

static void log_cb(void *user, nj_log_level level, const char *msg)
{
    (void)user;
    if (level == NJ_LOG_WARN && strstr(msg, "remote cache")) count_warnings++;
}

static nj_context *host_context(const char *root, const char *url)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = root;
    o.remote_cache = url;
    o.log_level = NJ_LOG_WARN;
    o.log_fn = log_cb;
    nj_context *ctx = NULL;
    return nj_context_create(&o, &ctx) == NJ_OK ? ctx : NULL;
}

/* One host: plans every problem, reports what it did. */
static host_result host_run(const char *root, const char *url)
{
    host_result r;
    memset(&r, 0, sizeof r);
    count_warnings = 0;
    nj_context *ctx = host_context(root, url);
    if (!ctx) return r;
    r.ok = 1;
    for (int i = 0; i < NPROB; i++) {
        nj_problem_desc d;
        nj_plan *plan = NULL;
        if (nj_problem_from_text(problems[i], 1, &d) != NJ_OK || nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan) != NJ_OK)
            r.ok = 0;
    }
    nj_cache_stats st = {.struct_size = sizeof st};
    if (nj_context_cache_stats(ctx, &st) != NJ_OK) r.ok = 0;
    r.compiles = st.compiles;
    r.hits_disk = st.hits_disk;
    r.disk_entries = st.disk_entries;
    r.remote.struct_size = sizeof r.remote;
    if (nj_context_remote_cache_stats(ctx, &r.remote) != NJ_OK) r.ok = 0;
    r.remote_warnings = count_warnings;
    nj_context_destroy(ctx);
    return r;
}

/* host_run in a child process (a separate host); the result comes back through a pipe. */
static pid_t host_spawn(const char *root, const char *url, int *rfd)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        host_result r = host_run(root, url);
        ssize_t w = write(p[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(p[1]);
    *rfd = p[0];
    return pid;
}

static host_result host_join(pid_t pid, int rfd)
{
    host_result r;
    memset(&r, 0, sizeof r);
    ssize_t n = read(rfd, &r, sizeof r);
    close(rfd);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(n, (ssize_t)sizeof r);
    assert_true(r.ok);
    return r;
}

static host_result host_in_child(const char *root, const char *url)
{
    int fd;
    pid_t pid = host_spawn(root, url, &fd);
    return host_join(pid, fd);
}

#ifdef NJ_HAVE_HIREDIS
#include <hiredis.h>

/* ---- a redis-server of our own ---- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}


static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    return ntohs(a.sin_port);
}

static redisContext *admin(int port)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static pid_t redis_start_args(int port, const char *extra_name, const char *extra_value);
static pid_t redis_start(int port) { return redis_start_args(port, NULL, NULL); }

/* Starts redis-server on loopback with one extra option (e.g. --requirepass PW), waits until it answers. */
static pid_t redis_start_args(int port, const char *extra_name, const char *extra_value)
{
    char dir[300], p[16];
    snprintf(dir, sizeof dir, "%s/redis", tmp_root);
    mkdir(dir, 0700);
    snprintf(p, sizeof p, "%d", port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", dir, extra_name, extra_value, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) { /* up to 5 s for it to listen */
        redisContext *c = admin(port);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && (r->type == REDIS_REPLY_STATUS || (extra_name && r->type == REDIS_REPLY_ERROR)); /* NOAUTH */
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return pid;
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) fail_msg("redis-server exited (status %d): is it installed?", st);
        usleep(10000);
    }
    fail_msg("redis-server did not answer on port %d", port);
    return -1;
}

static void redis_stop(pid_t pid, int sig)
{
    kill(pid, sig);
    int st;
    waitpid(pid, &st, 0);
}

static int srv_port;
static pid_t srv_pid;

static int setup_all(void **state)
{
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/nj-remote-XXXXXX");
    if (!mkdtemp(tmp_root)) return -1;
    signal(SIGPIPE, SIG_DFL); /* the library must survive a dead peer without any help */
    unsetenv("NORMJIT_REMOTE_CACHE");
    unsetenv("NORMJIT_CACHE_KEY_FILE");
    setenv("NORMJIT_CACHE_KEY", "fleet key: sixteen bytes or more", 1); /* every host and the tool */
    srv_port = free_port();
    srv_pid = redis_start(srv_port);
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    if (srv_pid > 0) redis_stop(srv_pid, SIGTERM);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    return system(cmd) == 0 ? 0 : -1;
}

static void url_for(char *out, size_t cap, int port, const char *prefix, const char *extra)
{
    snprintf(out, cap, "redis://127.0.0.1:%d/0?prefix=%s%s%s", port, prefix, extra ? "&" : "", extra ? extra : "");
}

/* Keys under a prefix, entries only (not locks). */
static int value_keys(int port, const char *prefix, char keys[][128], int max)
{
    redisContext *c = admin(port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "KEYS %s*", prefix);
    assert_non_null(r);
    int n = 0;
    for (size_t i = 0; i < r->elements; i++)
        if (!strstr(r->element[i]->str, "lock:") && n < max) snprintf(keys[n++], 128, "%s", r->element[i]->str);
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* Host A compiles and publishes; host B (another process, empty root) gets every kernel from Redis,
 * compiles nothing, and keeps them on its own disk: a third run of B hits its disk with Redis gone. */
static void test_two_hosts_share(void **state)
{
    (void)state;
    char url[256], a[300], b[300];
    url_for(url, sizeof url, srv_port, "share:", NULL);
    rootf(a, sizeof a, "share-a");
    rootf(b, sizeof b, "share-b");
    host_result ra = host_in_child(a, url);
    assert_true(ra.compiles >= NPROB);
    assert_int_equal(ra.remote.enabled, 1);
    assert_int_equal(ra.remote.status, NJ_OK);
    assert_int_equal(ra.remote.stores, ra.compiles);
    char keys[16][128];
    assert_int_equal(value_keys(srv_port, "share:", keys, 16), (int)ra.compiles);

    host_result rb = host_in_child(b, url);
    assert_int_equal(rb.compiles, 0);
    assert_int_equal(rb.remote.hits, ra.compiles);
    assert_int_equal(rb.remote.rejected, 0);
    assert_int_equal(rb.disk_entries, ra.compiles); /* published to B's disk */

    char gone[256];
    url_for(gone, sizeof gone, free_port(), "share:", NULL); /* nothing listens there */
    host_result rb2 = host_in_child(b, gone);
    assert_int_equal(rb2.compiles, 0);
    assert_int_equal(rb2.hits_disk, ra.compiles);
    assert_int_equal(rb2.remote.hits, 0);
}

/* 8 cold hosts at once, one Redis: each kernel compiled once across all of them. */
static void test_eight_cold_hosts_compile_once(void **state)
{
    (void)state;
    char url[256], solo[300];
    url_for(url, sizeof url, srv_port, "solo:", NULL);
    rootf(solo, sizeof solo, "solo");
    uint64_t kernels = host_in_child(solo, url).compiles; /* how many kernels the problems need */
    assert_true(kernels >= NPROB);

    url_for(url, sizeof url, srv_port, "fleet:", NULL);
    pid_t pid[8];
    int fd[8];
    for (int i = 0; i < 8; i++) {
        char root[300], name[32];
        snprintf(name, sizeof name, "fleet-%d", i);
        rootf(root, sizeof root, name);
        pid[i] = host_spawn(root, url, &fd[i]);
    }
    uint64_t compiles = 0, hits = 0, waits = 0;
    for (int i = 0; i < 8; i++) {
        host_result r = host_join(pid[i], fd[i]);
        compiles += r.compiles;
        hits += r.remote.hits;
        waits += r.remote.lock_waits;
        assert_int_equal(r.remote.lock_fallbacks, 0);
    }
    print_message("8 cold hosts: %llu compiles for %llu kernels, %llu fetched from Redis, %llu lock waits\n",
                  (unsigned long long)compiles, (unsigned long long)kernels, (unsigned long long)hits,
                  (unsigned long long)waits);
    assert_int_equal(compiles, kernels);
    assert_int_equal(hits, 7 * kernels);
}

/* Redis killed mid-run: calls keep working (compiled locally), the outage is counted and logged once;
 * restarted on the same port: the host uses it again after the backoff. */
static void test_redis_killed_and_restarted(void **state)
{
    (void)state;
    int port = free_port();
    pid_t pid = redis_start(port);
    char url[256], root[300];
    url_for(url, sizeof url, port, "restart:", "backoff_ms=100");
    rootf(root, sizeof root, "restart");
    count_warnings = 0;
    nj_context *ctx = host_context(root, url);
    assert_non_null(ctx);
    nj_remote_cache_stats rs = {.struct_size = sizeof rs};
    nj_problem_desc d;
    nj_plan *plan;
    const char *texts[3] = {"rmsnorm f32 *x96 flags=scale", "rmsnorm f32 *x1024 flags=scale", "rmsnorm f32 *x8"};

    assert_int_equal(nj_problem_from_text(texts[0], 1, &d), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_context_remote_cache_stats(ctx, &rs), NJ_OK);
    uint64_t stored_before = rs.stores;
    assert_true(stored_before >= 1);
    assert_int_equal(rs.errors, 0);

    redis_stop(pid, SIGKILL);
    assert_int_equal(nj_problem_from_text(texts[1], 1, &d), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_context_remote_cache_stats(ctx, &rs), NJ_OK);
    assert_true(rs.errors >= 1);
    assert_int_equal(rs.status, NJ_ERR_CACHE_IO);
    assert_int_equal(rs.stores, stored_before);
    assert_int_equal(count_warnings, 1); /* logged once for the outage */

    pid = redis_start(port);
    usleep(250 * 1000); /* past the backoff (100 ms at most here) */
    assert_int_equal(nj_problem_from_text(texts[2], 1, &d), NJ_OK);
    assert_int_equal(nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_context_remote_cache_stats(ctx, &rs), NJ_OK);
    assert_int_equal(rs.status, NJ_OK);
    assert_true(rs.stores > stored_before);
    char keys[16][128];
    assert_int_equal(value_keys(port, "restart:", keys, 16), (int)(rs.stores - stored_before));
    nj_context_destroy(ctx);
    redis_stop(pid, SIGTERM);
}

static void redis_set(int port, const char *key, const void *v, size_t n)
{
    redisContext *c = admin(port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "SET %s %b", key, v, n);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
}

static size_t redis_get(int port, const char *key, uint8_t **out)
{
    redisContext *c = admin(port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "GET %s", key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    *out = malloc(r->len + 1);
    memcpy(*out, r->str, r->len);
    size_t n = r->len;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* Poisoned values (a flipped payload byte, truncated, another kernel's value under this key, oversized, a
 * valid entry image with a forged tag, a host with another key): each one refused and counted, never
 * loaded; the host compiles instead. */
static void test_poisoned_values_refused(void **state)
{
    (void)state;
    char url[256], root[300];
    url_for(url, sizeof url, srv_port, "poison:", NULL);
    rootf(root, sizeof root, "poison-src");
    uint64_t kernels = host_in_child(root, url).compiles;
    char keys[16][128];
    int nk = value_keys(srv_port, "poison:", keys, 16);
    assert_int_equal(nk, (int)kernels);
    assert_true(nk >= 2);
    uint8_t *good[16];
    size_t len[16];
    for (int i = 0; i < nk; i++) len[i] = redis_get(srv_port, keys[i], &good[i]);

    for (int variant = 0; variant < 6; variant++) {
        char small[256];
        for (int i = 0; i < nk; i++) {
            uint8_t *v = malloc(len[i] + 4096);
            size_t n = len[i];
            memcpy(v, good[i], n);
            if (variant == 0) v[n - 33] ^= 0x5a;         /* last payload byte flipped (before the tag) */
            if (variant == 1) n = n / 2;                 /* truncated */
            if (variant == 2 || variant == 5) {          /* another kernel's value; intact */
                free(v);
                int j = variant == 2 ? (i + 1) % nk : i;
                v = malloc(len[j]);
                n = len[j];
                memcpy(v, good[j], n);
            }
            if (variant == 3) memset(v + n, 0, 4096), n += 4096; /* over max_bytes below */
            if (variant == 4) memset(v + n - 32, 0xab, 32);     /* checksums fine, tag forged */
            redis_set(srv_port, keys[i], v, n);
            free(v);
        }
        size_t biggest = 0;
        for (int i = 0; i < nk; i++) biggest = len[i] > biggest ? len[i] : biggest;
        char extra[64];
        snprintf(extra, sizeof extra, "max_bytes=%zu", biggest + 1024);
        url_for(small, sizeof small, srv_port, "poison:", variant == 3 ? extra : NULL);
        char name[32], r2[300];
        snprintf(name, sizeof name, "poison-%d", variant);
        rootf(r2, sizeof r2, name);
        if (variant == 5) setenv("NORMJIT_CACHE_KEY", "another fleet's key, just as long", 1);
        host_result r = host_in_child(r2, small);
        setenv("NORMJIT_CACHE_KEY", "fleet key: sixteen bytes or more", 1);
        assert_int_equal(r.remote.hits, 0);
        assert_int_equal(r.remote.rejected, r.compiles * 2); /* looked up before and after the locks */
        assert_int_equal(r.compiles, kernels);
    }
    for (int i = 0; i < nk; i++) free(good[i]);
}

/* A server that accepts connections and never answers: a lookup costs about the timeout, then the tier is
 * backed off (skipped, no wait) and every plan still builds. */
static void test_silent_server_bounded(void **state)
{
    (void)state;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 64), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &alen), 0);
    char url[256], root[300];
    url_for(url, sizeof url, ntohs(a.sin_port), "silent:", NULL); /* default timeout: 50 ms */

    rootf(root, sizeof root, "silent-cache");
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(root, 0, &c), NJ_OK);
    assert_int_equal(nj_cache_key_from_env(c), NJ_OK);
    nj_remote *r = NULL;
    assert_int_equal(nj_remote_open(url, NULL, &r), NJ_OK);
    nj_cache_attach_remote(c, r);
    nj_cache_entry e;
    uint64_t t0 = now_ms();
    assert_int_equal(nj_cache_get(c, "no such signature", "so", &e), NJ_ERR_NOT_CACHED);
    uint64_t first = now_ms() - t0;
    t0 = now_ms();
    assert_int_equal(nj_cache_get(c, "no such signature either", "so", &e), NJ_ERR_NOT_CACHED);
    uint64_t second = now_ms() - t0;
    nj_remote_counters k;
    nj_remote_counters_get(r, &k);
    print_message("silent server: first miss %llu ms, second %llu ms\n", (unsigned long long)first,
                  (unsigned long long)second);
    assert_true(first >= 40);   /* it did wait for an answer... */
    assert_true(first < 1000);  /* ...bounded by the 50 ms timeout (generous slack for a loaded machine) */
    assert_int_equal(k.errors, 1);
    assert_int_equal(k.skipped, 1); /* the second did not try: backed off */
    assert_int_equal(nj_remote_status(r), NJ_ERR_CACHE_IO);
    nj_cache_close(c);

    rootf(root, sizeof root, "silent-host");
    host_result h = host_in_child(root, url);
    assert_true(h.compiles >= NPROB);
    assert_int_equal(h.remote.status, NJ_ERR_CACHE_IO);
    assert_true(h.remote.errors >= 1);
    assert_int_equal(h.remote_warnings, 1);
    close(s);
}

/* push from a warmed cache, pull into an empty one: every entry arrives, verified. */
static void test_push_pull(void **state)
{
    (void)state;
    char url[256], a[300], b[300];
    url_for(url, sizeof url, srv_port, "pp:", NULL);
    rootf(a, sizeof a, "pp-a");
    host_result ra = host_in_child(a, NULL); /* warmed without Redis */
    nj_cache *c = NULL;
    nj_remote *r = NULL;
    assert_int_equal(nj_cache_open(a, 0, &c), NJ_OK);
    assert_int_equal(nj_cache_key_from_env(c), NJ_OK);
    assert_int_equal(nj_remote_open(url, NULL, &r), NJ_OK);
    nj_cache_attach_remote(c, r);
    uint64_t n = 0, bad = 0;
    assert_int_equal(nj_cache_remote_push(c, &n), NJ_OK);
    assert_int_equal(n, ra.compiles);
    nj_cache_close(c);
    /* plant a forged value under an entry-shaped name: pull refuses it */
    char forged[128];
    snprintf(forged, sizeof forged, "pp:%032d.so", 0);
    redis_set(srv_port, forged, "NJCACHE1 not really", 19);

    rootf(b, sizeof b, "pp-b");
    assert_int_equal(nj_cache_open(b, 0, &c), NJ_OK);
    assert_int_equal(nj_cache_key_from_env(c), NJ_OK);
    assert_int_equal(nj_remote_open(url, NULL, &r), NJ_OK);
    nj_cache_attach_remote(c, r);
    assert_int_equal(nj_cache_remote_pull(c, &n, &bad), NJ_OK);
    assert_int_equal(n, ra.compiles);
    assert_int_equal(bad, 1);
    uint64_t bytes = 0, entries = 0;
    assert_int_equal(nj_cache_usage(c, &bytes, &entries), NJ_OK);
    assert_int_equal(entries, ra.compiles);
    nj_cache_close(c);
    host_result rb = host_in_child(b, NULL); /* no Redis: all from the pulled disk */
    assert_int_equal(rb.compiles, 0);
}

/* The tool: runs `normjit cache ARGS` (stderr folded in), returns the exit status and the output. */
static int tool(char *out, size_t cap, const char *fmt, ...)
{
    char args[1024], cmd[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s/normjit' cache %s 2>&1", NJ_BINARY_DIR, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `normjit cache push / pull / stats` against the same server; usage and unreachable errors. */
static void test_tool_push_pull_stats(void **state)
{
    (void)state;
    char url[256], a[300], b[300], out[4096], want[300];
    url_for(url, sizeof url, srv_port, "tool:", NULL);
    rootf(a, sizeof a, "tool-a");
    rootf(b, sizeof b, "tool-b");
    host_result ra = host_in_child(a, NULL);
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' push", a, url), 0);
    snprintf(want, sizeof want, "pushed %llu entries", (unsigned long long)ra.compiles);
    assert_non_null(strstr(out, want));
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' pull", b, url), 0);
    snprintf(want, sizeof want, "pulled %llu entries, 0 refused", (unsigned long long)ra.compiles);
    assert_non_null(strstr(out, want));
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' stats", b, url), 0);
    snprintf(want, sizeof want, "remote      redis://127.0.0.1:%d/0 prefix \"tool:\"", srv_port);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "values    %llu\n", (unsigned long long)ra.compiles);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "entries     %llu\n", (unsigned long long)ra.compiles);
    assert_non_null(strstr(out, want));

    unsetenv("NORMJIT_CACHE_KEY"); /* push and pull need the key; stats does not */
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' push", a, url), 1);
    assert_non_null(strstr(out, "NJ_ERR_CACHE_UNTRUSTED"));
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' stats", b, url), 0);
    setenv("NORMJIT_CACHE_KEY", "fleet key: sixteen bytes or more", 1);
    assert_int_equal(tool(out, sizeof out, "--cache '%s' pull", b), 2); /* no tier named */
    assert_non_null(strstr(out, "NORMJIT_REMOTE_CACHE"));
    char gone[256];
    url_for(gone, sizeof gone, free_port(), "tool:", NULL);
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' stats", b, gone), 1);
    assert_non_null(strstr(out, "(unreachable)"));
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' push", a, gone), 1);
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote 'redis://nowhere' push", a), 1);
    assert_non_null(strstr(out, "NJ_ERR_BAD_ARGUMENT"));

    char forged[128];
    snprintf(forged, sizeof forged, "tool:%032d.so", 7);
    redis_set(srv_port, forged, "garbage", 7);
    assert_int_equal(tool(out, sizeof out, "--cache '%s' --remote '%s' pull", b, url), 1);
    assert_non_null(strstr(out, "1 refused by verification"));
}

/* A password-protected Redis on database 2: the right password serves, a wrong one fails open. */
static void test_password_and_db(void **state)
{
    (void)state;
    int port = free_port();
    pid_t pid = redis_start_args(port, "--requirepass", "s3cret");
    char url[256], root[300];
    snprintf(url, sizeof url, "redis://:s3cret@127.0.0.1:%d/2?prefix=pw:", port);
    rootf(root, sizeof root, "pw-a");
    host_result a = host_in_child(root, url);
    assert_int_equal(a.remote.status, NJ_OK);
    assert_int_equal(a.remote.errors, 0);
    assert_int_equal(a.remote.stores, a.compiles);
    redisContext *c = admin(port);
    assert_non_null(c);
    redisReply *r = redisCommand(c, "AUTH s3cret");
    freeReplyObject(r);
    r = redisCommand(c, "SELECT 2");
    freeReplyObject(r);
    r = redisCommand(c, "DBSIZE");
    assert_int_equal(r->integer, (long long)a.compiles); /* in database 2 */
    freeReplyObject(r);
    redisFree(c);

    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d/2?prefix=pw:", port);
    rootf(root, sizeof root, "pw-b");
    host_result b = host_in_child(root, url);
    assert_int_equal(b.remote.status, NJ_ERR_CACHE_IO);
    assert_true(b.remote.errors >= 1);
    assert_int_equal(b.remote.hits, 0);
    assert_int_equal(b.compiles, a.compiles);
    assert_int_equal(b.remote_warnings, 1);
    redis_stop(pid, SIGTERM);
}

/* Without the cache key no tier is attached (values are loaded as code): the host says why and compiles. */
static void test_no_key_no_tier(void **state)
{
    (void)state;
    char url[256], root[300];
    url_for(url, sizeof url, srv_port, "nokey:", NULL);
    rootf(root, sizeof root, "nokey");
    unsetenv("NORMJIT_CACHE_KEY");
    host_result r = host_in_child(root, url);
    setenv("NORMJIT_CACHE_KEY", "fleet key: sixteen bytes or more", 1);
    assert_int_equal(r.remote.enabled, 0);
    assert_int_equal(r.remote.status, NJ_ERR_CACHE_UNTRUSTED);
    assert_true(r.compiles >= NPROB);
    assert_int_equal(r.remote_warnings, 1);
    char keys[4][128];
    assert_int_equal(value_keys(srv_port, "nokey:", keys, 4), 0);
}

static void test_bad_urls(void **state)
{
    (void)state;
    nj_remote_config cfg;
    assert_int_equal(nj_remote_parse("redis://:pw@10.0.0.1:6380/3?prefix=x:&ttl=60&timeout_ms=20", &cfg), NJ_OK);
    assert_string_equal(cfg.host, "10.0.0.1");
    assert_string_equal(cfg.password, "pw");
    assert_string_equal(cfg.prefix, "x:");
    assert_int_equal(cfg.port, 6380);
    assert_int_equal(cfg.db, 3);
    assert_int_equal(cfg.ttl_s, 60);
    assert_int_equal(cfg.timeout_ms, 20);
    const char *bad[] = {"http://h:1", "redis://h", "redis://h:0", "redis://h:70000", "redis://h:1/x",
                         "redis://h:1?ttl=-1", "redis://h:1?nope=1", "redis://pw@h:1", "redis://h:1?max_bytes=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(nj_remote_parse(bad[i], &cfg), NJ_ERR_BAD_ARGUMENT);
    /* a context with a bad URL works without the tier and says why */
    char root[300];
    rootf(root, sizeof root, "bad-url");
    nj_context *ctx = host_context(root, "redis://nowhere");
    assert_non_null(ctx);
    nj_remote_cache_stats rs = {.struct_size = sizeof rs};
    assert_int_equal(nj_context_remote_cache_stats(ctx, &rs), NJ_OK);
    assert_int_equal(rs.enabled, 0);
    assert_int_equal(rs.status, NJ_ERR_BAD_ARGUMENT);
    nj_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_no_key_no_tier),
        cmocka_unit_test(test_password_and_db),
        cmocka_unit_test(test_two_hosts_share),
        cmocka_unit_test(test_eight_cold_hosts_compile_once),
        cmocka_unit_test(test_redis_killed_and_restarted),
        cmocka_unit_test(test_poisoned_values_refused),
        cmocka_unit_test(test_silent_server_bounded),
        cmocka_unit_test(test_push_pull),
        cmocka_unit_test(test_tool_push_pull_stats),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}

#else /* built without hiredis: the tier says so and the context works without it */

static void test_unsupported(void **state)
{
    (void)state;
    snprintf(tmp_root, sizeof tmp_root, "/tmp/nj-remote-XXXXXX");
    assert_non_null(mkdtemp(tmp_root));
    char root[300];
    rootf(root, sizeof root, "c");
    nj_context *ctx = host_context(root, "redis://127.0.0.1:6379");
    assert_non_null(ctx);
    nj_remote_cache_stats rs = {.struct_size = sizeof rs};
    assert_int_equal(nj_context_remote_cache_stats(ctx, &rs), NJ_OK);
    assert_int_equal(rs.enabled, 0);
    assert_int_equal(rs.status, NJ_ERR_UNSUPPORTED);
    nj_context_destroy(ctx);
    host_result r = host_in_child(root, "redis://127.0.0.1:6379");
    assert_true(r.compiles >= NPROB);
    assert_int_equal(r.remote.status, NJ_ERR_UNSUPPORTED);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_unsupported)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
