/* normjit warmup: compile every problem of one or more manifests into the cache with N worker threads
 * sharing one context (nj_context_warm is thread-safe and single-flight), so that a deployment never
 * compiles on its request path. */
#include "tool.h"

#include "context.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void nj_warmup_help(FILE *f)
{
    fprintf(f,
            "usage: normjit warmup [options] MANIFEST...\n"
            "\n"
            "Compiles every problem listed in the manifests into the kernel cache. A manifest holds one\n"
            "problem per line in the text form (e.g. 'rmsnorm bf16 *x4096 flags=scale'); '#' starts a comment,\n"
            "blank lines are ignored, and a '*' batch extent is read as 1 (kernels do not depend on the batch).\n"
            "'-' reads a manifest from standard input. Each pass gets its main kernels and, where they use\n"
            "vector accesses, its unaligned variant (what a call with misaligned pointers runs), so a context\n"
            "that never compiles serves every call.\n"
            "\n"
            "options:\n"
            "  --arch sm_XX        target architecture (implies --backend compile-only unless --backend is given)\n"
            "  --backend B         cuda | emulator | compile-only (default: NORMJIT_BACKEND, else cuda; without\n"
            "                      a driver, compile-only for sm_90)\n"
            "  --jobs N            worker threads (default: number of cores)\n"
            "  --passes P          fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --cache DIR         cache root (default: NORMJIT_CACHE_DIR, else ./cache in a normjit source tree,\n"
            "                      else $XDG_CACHE_HOME/normjit, else ~/.cache/normjit)\n"
            "  --quiet             no progress output\n"
            "  -h, --help          this text\n"
            "\n"
            "After the run, every problem is looked up again by a context that never compiles (what a\n"
            "deployment with NJ_CTX_NO_COMPILE does): one whose kernels are not all in the cache is reported,\n"
            "with the kernels that could not be stored and why (no space, read-only root, other).\n"
            "\n"
            "exit status: 0 when every problem is cached, 1 when any line failed or any problem is not in the\n"
            "cache afterwards, 2 on a usage error.\n");
}

typedef struct nj_warm_item {
    const nj_manifest_line *src;
    nj_problem_desc desc;
    int parsed;
    int failed; /* a pass failed during the run (already reported) */
} nj_warm_item;

typedef struct nj_warm_state {
    nj_context *ctx;
    nj_warm_item *items;
    int count;
    uint32_t passes;
    int next;          /* next item to take */
    int done;          /* items finished (any outcome) */
    int compiled, cached, failed; /* kernels compiled, kernels already cached, problems failed */
    int missing;                  /* problems not all in the cache after the run */
    int tty, quiet;
    double t0;
    pthread_mutex_t lock;
} nj_warm_state;

static void nj_warm_progress(nj_warm_state *st)
{
    if (st->quiet || !st->tty) return;
    const int width = 30;
    int fill = st->count ? st->done * width / st->count : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %d/%d  compiled %d  cached %d  failed %d  %.1fs ", bar, st->done, st->count,
            st->compiled, st->cached, st->failed, nj_tool_now() - st->t0);
    fflush(stderr);
}

/* Warms one pass; on failure copies the detail (per thread) into err. */
static nj_status nj_warm_pass(nj_warm_state *st, nj_warm_item *it, uint32_t pass, int32_t *compiled,
                              int32_t *cached, char *err, size_t cap)
{
    int32_t c = 0, h = 0;
    nj_status s = nj_context_warm(st->ctx, &it->desc, pass, &c, &h);
    if (s == NJ_OK) {
        *compiled += c;
        *cached += h;
        return s;
    }
    size_t used = strlen(err);
    snprintf(err + used, cap - used, "%s%s pass: %s: %s", used ? "; " : "", pass == NJ_PASS_FORWARD ? "fwd" : "bwd",
             nj_status_name(s), nj_last_error()[0] ? nj_last_error() : nj_status_string(s));
    return s;
}

/* Runs one item pass by pass (a failing pass does not hide the other's kernels); called without the
 * lock. Messages are printed under the lock so lines do not mix. */
static void nj_warm_one(nj_warm_state *st, nj_warm_item *it)
{
    int32_t compiled = 0, cached = 0;
    int failed = 0;
    char err[4096] = "";
    double t = nj_tool_now();
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1)
        if ((st->passes & pass) && nj_warm_pass(st, it, pass, &compiled, &cached, err, sizeof err) != NJ_OK) failed = 1;
    double ms = (nj_tool_now() - t) * 1e3;
    pthread_mutex_lock(&st->lock);
    st->done++;
    st->compiled += compiled;
    st->cached += cached;
    if (failed) {
        it->failed = 1;
        st->failed++;
        if (st->tty && !st->quiet) fprintf(stderr, "\r\033[K");
        fprintf(stderr, "%s:%d: %s: %s\n", it->src->file, it->src->line, it->src->text, err);
    } else if (!st->tty && !st->quiet) {
        fprintf(stderr, "[%d/%d] %s: %s (%.0f ms)\n", st->done, st->count, it->src->text,
                compiled ? "compiled" : "cached", ms);
    }
    nj_warm_progress(st);
    pthread_mutex_unlock(&st->lock);
}

static void *nj_warm_worker(void *arg)
{
    nj_warm_state *st = arg;
    for (;;) {
        pthread_mutex_lock(&st->lock);
        int i = st->next < st->count ? st->next++ : -1;
        pthread_mutex_unlock(&st->lock);
        if (i < 0) return NULL;
        if (st->items[i].parsed) nj_warm_one(st, &st->items[i]);
    }
}

static void nj_warm_run(nj_warm_state *st, int jobs)
{
    pthread_t *th = calloc((size_t)jobs, sizeof *th);
    int started = 0;
    for (int i = 0; th && i < jobs; i++)
        if (pthread_create(&th[i], NULL, nj_warm_worker, st) == 0) started++;
    if (!started) nj_warm_worker(st); /* no threads to be had: do the work here */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
}

/* Parses every line; malformed lines are reported as file:line and counted as failed problems. */
static nj_warm_item *nj_warm_parse(nj_manifest_line *lines, int n, int *failed, int *done)
{
    nj_warm_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    if (!items) return NULL;
    for (int i = 0; i < n; i++) {
        items[i].src = &lines[i];
        nj_status s = nj_problem_from_text(lines[i].text, 1, &items[i].desc);
        if (s == NJ_OK) {
            items[i].parsed = 1;
            continue;
        }
        fprintf(stderr, "%s:%d: %s: %s\n", lines[i].file, lines[i].line, nj_status_name(s),
                nj_last_error()[0] ? nj_last_error() : nj_status_string(s));
        (*failed)++;
        (*done)++;
    }
    return items;
}

/* Looks every problem up again through a context that never compiles, on the same cache: what a
 * deployment with NJ_CTX_NO_COMPILE would fail on at request time. Returns -1 when that context cannot
 * be made (the failure printed). */
static int nj_warm_verify(nj_warm_state *st, uint32_t ctx_flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = nj_context_backend(st->ctx);
    o.arch = nj_context_arch(st->ctx);
    o.cache_dir = nj_context_cache_dir(st->ctx);
    o.flags = ctx_flags | NJ_CTX_NO_COMPILE;
    nj_context *v = NULL;
    nj_status s = nj_context_create(&o, &v);
    if (s == NJ_OK && !nj_context_cache_dir(v)[0])
        s = nj_fail(NJ_ERR_CACHE_IO, "the cache %s cannot be opened again", o.cache_dir);
    if (s != NJ_OK) {
        nj_tool_error(s, "cannot check the cache after the warmup");
        nj_context_destroy(v);
        return -1;
    }
    for (int i = 0; i < st->count; i++) {
        nj_warm_item *it = &st->items[i];
        if (!it->parsed || it->failed) continue;
        s = nj_context_warm(v, &it->desc, st->passes, NULL, NULL);
        if (s == NJ_OK) continue;
        st->missing++;
        fprintf(stderr, "%s:%d: %s: not in the cache after the warmup: %s: %s\n", it->src->file, it->src->line,
                it->src->text, nj_status_name(s), nj_last_error()[0] ? nj_last_error() : nj_status_string(s));
    }
    nj_context_destroy(v);
    return 0;
}

static void nj_warm_table(const nj_warm_state *st, nj_context *ctx, double secs)
{
    nj_cache_counters k;
    memset(&k, 0, sizeof k);
    if (nj_context_disk_cache(ctx)) nj_cache_counters_get(nj_context_disk_cache(ctx), &k);
    printf("backend            %s (%s%d)\n", nj_tool_backend_name(nj_context_backend(ctx)), "sm_",
           (int)nj_context_arch(ctx));
    printf("cache              %s\n", nj_context_cache_dir(ctx)[0] ? nj_context_cache_dir(ctx) : "(memory only)");
    printf("problems           %d\n", st->count);
    printf("kernels compiled   %d\n", st->compiled);
    printf("already cached     %d\n", st->cached);
    printf("failed             %d\n", st->failed);
    printf("not stored         %llu (no space %llu, read-only %llu, other %llu)\n",
           (unsigned long long)(k.store_nospace + k.store_read_only + k.store_other),
           (unsigned long long)k.store_nospace, (unsigned long long)k.store_read_only,
           (unsigned long long)k.store_other);
    printf("missing after      %d\n", st->missing);
    printf("time               %.2f s\n", secs);
}

/* The context works in memory when the cache root is refused; a warmup would then persist nothing, so
 * say why (by opening the root once more for its message) and fail. Returns 1 to stop. */
static int nj_warm_explain_no_cache(const char *dir)
{
    char *root = nj_cache_default_root(nj_tool_cache_root(dir));
    nj_cache *c = NULL;
    nj_status s = root ? nj_cache_open(root, 0, &c) : NJ_ERR_CACHE_IO;
    if (s != NJ_OK) nj_tool_error(s, "cannot use the cache root %s", root ? root : "(none: HOME unset)");
    else fprintf(stderr, "normjit warmup: the context has no disk cache; nothing would be persisted\n");
    if (c) nj_cache_close(c);
    free(root);
    return 1;
}

typedef struct nj_warm_args {
    nj_tool_target target;
    uint32_t passes;
    int quiet;
    int nfiles;
    char **files;
} nj_warm_args;

static int nj_warm_parse_args(int argc, char **argv, nj_warm_args *a)
{
    memset(a, 0, sizeof *a);
    a->passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    a->files = calloc((size_t)argc, sizeof(char *));
    if (!a->files) return NJ_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        long n;
        if (nj_tool_is_help(argv[i])) {
            nj_warmup_help(stdout);
            return -1;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || nj_tool_parse_arch(v, &a->target.arch))
                return nj_tool_usage_error("warmup", "--arch needs an architecture like sm_90");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0 || nj_tool_parse_backend(v, &a->target.backend))
                return nj_tool_usage_error("warmup", "--backend takes cuda, emulator or compile-only");
            a->target.backend_given = 1;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--jobs", &v)) || (r = nj_tool_opt(argc, argv, &i, "-j", &v))) {
            if (r < 0 || nj_tool_parse_int(v, 1, 1024, &n))
                return nj_tool_usage_error("warmup", "--jobs takes a number from 1 to 1024");
            a->target.jobs = (int32_t)n;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || nj_tool_parse_passes(v, &a->passes))
                return nj_tool_usage_error("warmup", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return nj_tool_usage_error("warmup", "--cache needs a directory");
            a->target.cache_dir = v;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            a->quiet = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return nj_tool_usage_error("warmup", "unknown option '%s'", argv[i]);
        } else {
            a->files[a->nfiles++] = argv[i];
        }
    }
    if (!a->nfiles) return nj_tool_usage_error("warmup", "no manifest given");
    return NJ_EXIT_OK;
}

static int nj_warm_load(const nj_warm_args *a, nj_manifest_line **lines, int *n)
{
    int cap = 0;
    for (int f = 0; f < a->nfiles; f++) {
        if (nj_tool_read_manifest(a->files[f], lines, n, &cap) != 0) {
            fprintf(stderr, "normjit warmup: cannot read %s: %s\n", a->files[f], strerror(errno));
            return -1;
        }
    }
    return 0;
}

int nj_cmd_warmup(int argc, char **argv)
{
    nj_warm_args a;
    int rc = nj_warm_parse_args(argc, argv, &a);
    if (rc) {
        free(a.files);
        return rc < 0 ? NJ_EXIT_OK : rc;
    }
    nj_manifest_line *lines = NULL;
    int n = 0;
    nj_context *ctx = NULL;
    nj_warm_state st;
    memset(&st, 0, sizeof st);
    rc = NJ_EXIT_FAIL;
    if (nj_warm_load(&a, &lines, &n) != 0) goto out;
    if (nj_tool_open_context(&a.target, NJ_TOOL_FALLBACK_COMPILE_ONLY, &ctx) != NJ_OK) goto out;
    if (!nj_context_cache_dir(ctx)[0] && nj_warm_explain_no_cache(a.target.cache_dir)) goto out;
    st.ctx = ctx;
    st.count = n;
    st.passes = a.passes;
    st.quiet = a.quiet;
    st.tty = isatty(STDERR_FILENO);
    st.t0 = nj_tool_now();
    pthread_mutex_init(&st.lock, NULL);
    st.items = nj_warm_parse(lines, n, &st.failed, &st.done);
    if (!st.items) {
        fprintf(stderr, "normjit warmup: out of memory\n");
        goto out;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int jobs = a.target.jobs ? a.target.jobs : (int)(cores > 0 ? cores : 1);
    nj_warm_run(&st, jobs < n ? jobs : (n ? n : 1));
    if (st.tty && !st.quiet) fprintf(stderr, "\n");
    int checked = nj_warm_verify(&st, a.target.ctx_flags);
    nj_warm_table(&st, ctx, nj_tool_now() - st.t0);
    rc = st.failed || st.missing || checked < 0 ? NJ_EXIT_FAIL : NJ_EXIT_OK;
    pthread_mutex_destroy(&st.lock);
out:
    free(st.items);
    nj_context_destroy(ctx);
    nj_tool_free_manifest(lines, n);
    free(a.files);
    return rc;
}
