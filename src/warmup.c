/* Public warmup (nj_warmup*, include/normjit.h): compiles problems into the cache with worker threads that
 * share one context (nj_context_warm is thread-safe and single-flight), parses manifests, and optionally
 * looks each problem up again through a context that never compiles. */
#include "context.h"
#include "context_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NJ_MANIFEST_LINE_MAX 4096
#define NJ_MANIFEST_FILE_MAX ((size_t)64 << 20)

void nj_warmup_options_init(nj_warmup_options *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
}

typedef struct nj_warm_job {
    nj_context *ctx;
    const nj_problem_desc *problems; /* NULL entries of `skip` are not run */
    const unsigned char *skip;       /* 1: already failed (a bad manifest line) */
    nj_warmup_result *res;
    int32_t count, next, done, total;
    uint32_t passes;
    const nj_warmup_options *o;
    pthread_mutex_t lock;
} nj_warm_job;

static void nj_warm_report(nj_warm_job *j, const nj_warmup_result *r)
{
    /* under the lock: callbacks come one at a time */
    j->done++;
    if (j->o->progress) j->o->progress(j->o->progress_user, r, j->done, j->total);
}

static void nj_warm_fail(nj_warmup_result *r, uint32_t pass, const char *what, nj_status s)
{
    if (r->status == NJ_OK) r->status = s;
    size_t used = strlen(r->message);
    const char *detail = nj_last_error()[0] ? nj_last_error() : nj_status_string(s);
    snprintf(r->message + used, sizeof r->message - used, "%s%s %s: %s: %s", used ? "; " : "",
             pass == NJ_PASS_FORWARD ? "fwd" : "bwd", what, nj_status_name(s), detail);
}

/* One problem, pass by pass (a failing pass does not hide the other's kernels). */
static void nj_warm_problem(nj_warm_job *j, int32_t i)
{
    nj_warmup_result *r = &j->res[i];
    uint64_t t0 = nj_now_ns();
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        if (!(j->passes & pass)) continue;
        int32_t c = 0, h = 0;
        nj_status s = nj_context_warm(j->ctx, &j->problems[i], pass, &c, &h);
        r->compiled += c;
        r->cached += h;
        if (s != NJ_OK) {
            nj_warm_fail(r, pass, "pass", s);
            continue;
        }
        if (j->o->flags & NJ_WARMUP_NO_GENERIC) continue;
        /* shared by every problem of its dtypes: counted where compiled, like a library module */
        s = nj_context_warm_generic(j->ctx, &j->problems[i], pass, &c);
        r->compiled += s == NJ_OK ? c : 0;
        if (s != NJ_OK) nj_warm_fail(r, pass, "generic module", s);
    }
    r->seconds = (double)(nj_now_ns() - t0) * 1e-9;
}

static void *nj_warm_worker(void *arg)
{
    nj_warm_job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        int32_t i = j->next < j->count ? j->next++ : -1;
        pthread_mutex_unlock(&j->lock);
        if (i < 0) return NULL;
        if (j->skip && j->skip[i]) continue;
        nj_warm_problem(j, i);
        pthread_mutex_lock(&j->lock);
        nj_warm_report(j, &j->res[i]);
        pthread_mutex_unlock(&j->lock);
    }
}

static int32_t nj_warm_jobs(const nj_warmup_options *o, int32_t count)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t jobs = o->jobs > 0 ? o->jobs : (int32_t)(cores > 0 ? cores : 1);
    if (jobs > count) jobs = count;
    return jobs > 0 ? jobs : 1;
}

static void nj_warm_run(nj_warm_job *j)
{
    int32_t jobs = nj_warm_jobs(j->o, j->count);
    pthread_t *th = calloc((size_t)jobs, sizeof *th);
    int32_t started = 0;
    for (int32_t i = 0; th && i < jobs; i++)
        if (pthread_create(&th[i], NULL, nj_warm_worker, j) == 0) started++;
    if (!started) nj_warm_worker(j); /* no threads to be had: do the work here */
    for (int32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
}

/* Each warmed problem again through a context that never compiles, on the same root. */
static nj_status nj_warm_verify(nj_warm_job *j)
{
    nj_context_options vo = j->ctx->opts;
    vo.struct_size = sizeof vo;
    vo.cache_dir = nj_context_cache_dir(j->ctx);
    vo.arch = nj_context_arch(j->ctx);
    vo.backend = nj_context_backend(j->ctx);
    vo.flags = (vo.flags | NJ_CTX_NO_COMPILE) & ~(uint32_t)NJ_CTX_NO_DISK_CACHE;
    nj_context *v = NULL;
    NJ_TRY(nj_context_create(&vo, &v));
    if (!nj_context_cache_dir(v)[0]) {
        nj_context_destroy(v);
        return nj_fail(NJ_ERR_CACHE_IO, "the cache %s cannot be opened again to verify the warmup", vo.cache_dir);
    }
    for (int32_t i = 0; i < j->count; i++) {
        nj_warmup_result *r = &j->res[i];
        if ((j->skip && j->skip[i]) || r->status != NJ_OK) continue;
        nj_status s = nj_context_warm(v, &j->problems[i], j->passes, NULL, NULL);
        if (s == NJ_OK && !(j->o->flags & NJ_WARMUP_NO_GENERIC))
            s = nj_context_warm_generic(v, &j->problems[i], j->passes, NULL);
        if (s == NJ_OK) continue;
        r->verify_status = s;
        snprintf(r->message, sizeof r->message, "%s: %s", nj_status_name(s),
                 nj_last_error()[0] ? nj_last_error() : nj_status_string(s));
    }
    nj_context_destroy(v);
    return NJ_OK;
}

static nj_status nj_warm_check(nj_context *ctx, const nj_warmup_options *o, uint32_t *passes)
{
    NJ_RETURN_IF(!ctx, NJ_ERR_NULL_POINTER, "nj_warmup: NULL context");
    NJ_RETURN_IF(o && o->struct_size != sizeof *o, NJ_ERR_BAD_STRUCT_SIZE,
                 "nj_warmup: options struct_size %u (set it with nj_warmup_options_init)", o ? o->struct_size : 0);
    uint32_t p = o && o->passes ? o->passes : NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    NJ_RETURN_IF(p & ~(uint32_t)(NJ_PASS_FORWARD | NJ_PASS_BACKWARD), NJ_ERR_BAD_ARGUMENT,
                 "nj_warmup: passes 0x%x: only NJ_PASS_FORWARD and NJ_PASS_BACKWARD", (unsigned)p);
    const uint32_t known = NJ_WARMUP_VERIFY | NJ_WARMUP_NO_GENERIC;
    NJ_RETURN_IF(o && (o->flags & ~known), NJ_ERR_BAD_FLAGS, "nj_warmup: unknown flags 0x%x",
                 (unsigned)(o->flags & ~known));
    NJ_RETURN_IF(o && o->jobs < 0, NJ_ERR_BAD_ARGUMENT, "nj_warmup: negative jobs");
    NJ_RETURN_IF(o && (o->flags & NJ_WARMUP_VERIFY) && !nj_context_disk_cache(ctx), NJ_ERR_CACHE_IO,
                 "nj_warmup: the context has no disk cache: nothing would persist to verify");
    *passes = p;
    return NJ_OK;
}

/* Runs prepared results (status already set for skipped ones) and picks the call's status. */
static nj_status nj_warm_go(nj_context *ctx, const nj_problem_desc *problems, const unsigned char *skip,
                            int32_t count, const nj_warmup_options *o, uint32_t passes, nj_warmup_result *res)
{
    nj_warmup_options defaults;
    nj_warmup_options_init(&defaults);
    nj_warm_job j = {.ctx = ctx, .problems = problems, .skip = skip, .res = res, .count = count,
                     .total = count, .passes = passes, .o = o ? o : &defaults};
    pthread_mutex_init(&j.lock, NULL);
    for (int32_t i = 0; skip && i < count; i++) /* bad lines are reported first */
        if (skip[i]) nj_warm_report(&j, &res[i]);
    if (count) nj_warm_run(&j);
    pthread_mutex_destroy(&j.lock);
    /* a verification that could not run says why itself (its detail is the last error) */
    if (j.o->flags & NJ_WARMUP_VERIFY) NJ_TRY(nj_warm_verify(&j));
    nj_error_clear();
    for (int32_t i = 0; i < count; i++) {
        nj_status s = res[i].status != NJ_OK ? res[i].status : res[i].verify_status;
        if (s != NJ_OK)
            return nj_fail(s, "%s %d: %s", res[i].line ? "manifest line" : "problem",
                           (int)(res[i].line ? res[i].line : res[i].index), res[i].message);
    }
    return NJ_OK;
}

nj_status nj_warmup(nj_context *ctx, const nj_problem_desc *problems, int32_t count, const nj_warmup_options *o,
                    nj_warmup_result *results)
{
    nj_error_clear();
    uint32_t passes = 0;
    NJ_TRY(nj_warm_check(ctx, o, &passes));
    NJ_RETURN_IF(count < 0, NJ_ERR_BAD_ARGUMENT, "nj_warmup: negative count");
    NJ_RETURN_IF(count && !problems, NJ_ERR_NULL_POINTER, "nj_warmup: NULL problems");
    nj_warmup_result *res = results ? results : calloc((size_t)(count ? count : 1), sizeof *res);
    NJ_RETURN_IF(!res, NJ_ERR_OUT_OF_MEMORY, "nj_warmup: %d results", (int)count);
    memset(res, 0, sizeof *res * (size_t)count);
    for (int32_t i = 0; i < count; i++) res[i].index = i;
    nj_status s = nj_warm_go(ctx, problems, NULL, count, o, passes, res);
    if (res != results) free(res);
    return s;
}

/* ---- manifests ---- */

typedef struct nj_manifest {
    nj_problem_desc *problems;
    unsigned char *skip;
    nj_warmup_result *res;
    int32_t count, cap;
} nj_manifest;

static int nj_manifest_push(nj_manifest *m)
{
    if (m->count == m->cap) {
        int32_t cap = m->cap ? m->cap * 2 : 32;
        nj_problem_desc *p = realloc(m->problems, sizeof *p * (size_t)cap);
        if (p) m->problems = p;
        unsigned char *k = realloc(m->skip, (size_t)cap);
        if (k) m->skip = k;
        nj_warmup_result *r = realloc(m->res, sizeof *r * (size_t)cap);
        if (r) m->res = r;
        if (!p || !k || !r) return -1;
        m->cap = cap;
    }
    memset(&m->res[m->count], 0, sizeof m->res[0]);
    memset(&m->problems[m->count], 0, sizeof m->problems[0]);
    m->skip[m->count] = 0;
    m->res[m->count].index = m->count;
    return 0;
}

static void nj_manifest_bad(nj_manifest *m, nj_status s, const char *why)
{
    nj_warmup_result *r = &m->res[m->count];
    r->status = s;
    snprintf(r->message, sizeof r->message, "%s", why);
    m->skip[m->count] = 1;
}

/* One line (its bytes, without the newline); blank and comment-only lines add nothing. */
static int nj_manifest_line(nj_manifest *m, const char *p, size_t n, int32_t lineno)
{
    int has_nul = memchr(p, '\0', n) != NULL;
    char buf[NJ_MANIFEST_LINE_MAX + 1];
    size_t k = n < NJ_MANIFEST_LINE_MAX ? n : NJ_MANIFEST_LINE_MAX;
    memcpy(buf, p, k);
    buf[k] = '\0';
    if (!has_nul) {
        char *hash = strchr(buf, '#');
        if (hash) *hash = '\0';
        if (n <= NJ_MANIFEST_LINE_MAX && !buf[strspn(buf, " \t\r\f\v")]) return 0;
    }
    if (nj_manifest_push(m) != 0) return -1;
    m->res[m->count].line = lineno;
    char *t = buf + strspn(buf, " \t\r\f\v");
    size_t tn = strlen(t);
    while (tn && strchr(" \t\r\f\v", t[tn - 1])) t[--tn] = '\0';
    if (has_nul) nj_manifest_bad(m, NJ_ERR_PARSE, "a NUL byte inside the line (a manifest is text): line refused");
    else if (n > NJ_MANIFEST_LINE_MAX) nj_manifest_bad(m, NJ_ERR_PARSE, "line longer than 4096 bytes: refused");
    else {
        nj_status s = nj_problem_from_text(t, 1, &m->problems[m->count]);
        if (s != NJ_OK) nj_manifest_bad(m, s, nj_last_error()[0] ? nj_last_error() : nj_status_string(s));
    }
    m->count++;
    return 0;
}

static void nj_manifest_free(nj_manifest *m)
{
    free(m->problems);
    free(m->skip);
    free(m->res);
}

nj_status nj_warmup_manifest(nj_context *ctx, const char *text, size_t len, const nj_warmup_options *o,
                             nj_warmup_result **results, int32_t *count)
{
    nj_error_clear();
    NJ_RETURN_IF(!results || !count || (!text && len), NJ_ERR_NULL_POINTER, "nj_warmup_manifest: NULL argument");
    *results = NULL;
    *count = 0;
    uint32_t passes = 0;
    NJ_TRY(nj_warm_check(ctx, o, &passes));
    nj_manifest m = {0};
    int32_t lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        if (lineno == INT32_MAX || nj_manifest_line(&m, text + at, n, ++lineno) != 0) {
            nj_manifest_free(&m);
            return nj_fail(NJ_ERR_OUT_OF_MEMORY, "nj_warmup_manifest: line %d", (int)lineno);
        }
        at += n + (nl != NULL);
    }
    nj_status s = nj_warm_go(ctx, m.problems, m.skip, m.count, o, passes, m.res);
    free(m.problems);
    free(m.skip);
    *results = m.res;
    *count = m.count;
    return s;
}

nj_status nj_warmup_manifest_file(nj_context *ctx, const char *path, const nj_warmup_options *o,
                                  nj_warmup_result **results, int32_t *count)
{
    nj_error_clear();
    NJ_RETURN_IF(!path || !results || !count, NJ_ERR_NULL_POINTER, "nj_warmup_manifest_file: NULL argument");
    *results = NULL;
    *count = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    NJ_RETURN_IF(fd < 0, NJ_ERR_BAD_ARGUMENT, "cannot read the manifest %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > NJ_MANIFEST_FILE_MAX) {
        close(fd);
        return nj_fail(NJ_ERR_BAD_ARGUMENT, "the manifest %s is not a regular file of at most 64 MiB", path);
    }
    size_t n = (size_t)st.st_size, got = 0;
    char *buf = malloc(n ? n : 1);
    if (!buf) {
        close(fd);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "manifest %s", path);
    }
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    nj_status s = got == n ? nj_warmup_manifest(ctx, buf, n, o, results, count)
                           : nj_fail(NJ_ERR_BAD_ARGUMENT, "cannot read the manifest %s", path);
    free(buf);
    return s;
}

void nj_warmup_results_free(nj_warmup_result *results) { free(results); }
