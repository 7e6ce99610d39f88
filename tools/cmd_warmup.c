/* normjit warmup: compile every problem of one or more manifests into the cache (the public nj_warmup_manifest,
 * N worker threads sharing one context), so that a deployment never compiles on its request path. */
#include "tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void njt_warmup_help(FILE *f)
{
    fprintf(f,
            "usage: normjit warmup [options] MANIFEST...\n"
            "\n"
            "Compiles every problem listed in the manifests into the kernel cache. A manifest holds one\n"
            "problem per line in the text form (e.g. 'rmsnorm bf16 *x4096 flags=scale'); '#' starts a comment,\n"
            "blank lines are ignored, and a '*' batch extent is read as 1 (kernels do not depend on the batch).\n"
            "'-' reads a manifest from standard input. Each pass gets its main kernels and, where they use\n"
            "vector accesses, its unaligned variant (what a call with misaligned pointers runs), so a context\n"
            "that never compiles serves every call. The generic modules of each problem's dtypes are warmed\n"
            "too (what an async or no-compile context runs for a problem it has not seen; shared, compiled once).\n"
            "\n"
            "options:\n"
            "  --arch sm_XX        target architecture (implies --backend compile-only unless --backend is given)\n"
            "  --backend B         cuda | emulator | compile-only (default: NORMJIT_BACKEND, else cuda; without\n"
            "                      a driver, compile-only for sm_90)\n"
            "  --jobs N            worker threads (default: number of cores)\n"
            "  --passes P          fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --cache DIR         cache root (default: NORMJIT_CACHE_DIR, else ./cache in a normjit source tree,\n"
            "                      else $XDG_CACHE_HOME/normjit, else ~/.cache/normjit)\n"
            "  --no-generic        leave out the generic modules\n"
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

typedef struct njt_warm_state {
    const njt_manifest_line *lines;
    int count;
    int compiled, cached, failed; /* kernels compiled, kernels already cached, problems failed */
    int tty, quiet;
    double t0;
} njt_warm_state;

static void njt_warm_bar(njt_warm_state *st, int done)
{
    if (st->quiet || !st->tty) return;
    const int width = 30;
    int fill = st->count ? done * width / st->count : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %d/%d  compiled %d  cached %d  failed %d  %.1fs ", bar, done, st->count, st->compiled,
            st->cached, st->failed, njt_tool_now() - st->t0);
    fflush(stderr);
}

/* Progress from the library (one call at a time): a line per failure, per problem when not on a terminal. */
static void njt_warm_progress(void *user, const nj_warmup_result *r, int32_t done, int32_t total)
{
    njt_warm_state *st = user;
    const njt_manifest_line *src = &st->lines[r->index];
    st->compiled += r->compiled;
    st->cached += r->cached;
    if (r->status != NJ_OK) {
        st->failed++;
        if (st->tty && !st->quiet) fprintf(stderr, "\r\033[K");
        /* a failing pass says "fwd pass: NJ_ERR_X: ..."; a line that did not parse gives the parser's detail */
        int ran = !strncmp(r->message, "fwd pass: ", 10) || !strncmp(r->message, "bwd pass: ", 10);
        if (ran) fprintf(stderr, "%s:%d: %s: %s\n", src->file, src->line, src->text, r->message);
        else fprintf(stderr, "%s:%d: %s: %s\n", src->file, src->line, nj_status_name(r->status), r->message);
    } else if (!st->tty && !st->quiet) {
        fprintf(stderr, "[%d/%d] %s: %s (%.0f ms)\n", (int)done, (int)total, src->text,
                r->compiled ? "compiled" : "cached", r->seconds * 1e3);
    }
    njt_warm_bar(st, done);
}

static void njt_warm_table(const njt_warm_state *st, nj_context *ctx, int missing, double secs)
{
    nj_cachedir_stats k = {.struct_size = sizeof k};
    nj_cachedir *d = NULL;
    if (nj_cachedir_from_context(ctx, &d) != NJ_OK || nj_cachedir_stats_get(d, &k) != NJ_OK)
        memset(&k, 0, sizeof k);
    nj_cachedir_close(d);
    printf("backend            %s (%s%d)\n", njt_tool_backend_name(nj_context_backend(ctx)), "sm_",
           (int)nj_context_arch(ctx));
    printf("cache              %s\n", nj_context_cache_dir(ctx)[0] ? nj_context_cache_dir(ctx) : "(memory only)");
    printf("problems           %d\n", st->count);
    printf("kernels compiled   %d\n", st->compiled);
    printf("already cached     %d\n", st->cached);
    printf("failed             %d\n", st->failed);
    printf("not stored         %llu (no space %llu, read-only %llu, other %llu)\n",
           (unsigned long long)(k.not_stored_nospace + k.not_stored_read_only + k.not_stored_other),
           (unsigned long long)k.not_stored_nospace, (unsigned long long)k.not_stored_read_only,
           (unsigned long long)k.not_stored_other);
    printf("missing after      %d\n", missing);
    printf("time               %.2f s\n", secs);
}

/* The context works in memory when the cache root is refused; a warmup would then persist nothing, so
 * say why (by opening the root once more for its message) and fail. Returns 1 to stop. */
static int njt_warm_explain_no_cache(const char *dir)
{
    nj_cachedir *d = NULL;
    const char *root = njt_tool_cache_root(dir);
    nj_status s = nj_cachedir_open(root, 0, &d);
    if (s != NJ_OK) njt_tool_error(s, "cannot use the cache root %s", root ? root : "(the default)");
    else fprintf(stderr, "normjit warmup: the context has no disk cache; nothing would be persisted\n");
    nj_cachedir_close(d);
    return 1;
}

/* The manifests' problem lines as one manifest text for the library: line i + 1 is lines[i]. */
static char *njt_warm_text(const njt_manifest_line *lines, int n, size_t *len)
{
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(lines[i].text) + 1;
    char *text = malloc(total), *p = text;
    if (!text) return NULL;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(lines[i].text);
        memcpy(p, lines[i].text, k);
        p[k] = '\n';
        p += k + 1;
    }
    *p = '\0';
    *len = (size_t)(p - text);
    return text;
}

typedef struct njt_warm_args {
    njt_tool_target target;
    uint32_t passes;
    int quiet, no_generic;
    int nfiles;
    char **files;
} njt_warm_args;

/* Warms every line and reports problems not found again by a context that never compiles. */
static int njt_warm_all(nj_context *ctx, const njt_manifest_line *lines, int n, const njt_warm_args *a)
{
    uint32_t passes = a->passes;
    int jobs = a->target.jobs, quiet = a->quiet;
    njt_warm_state st = {.lines = lines, .count = n, .quiet = quiet, .tty = isatty(STDERR_FILENO), .t0 = njt_tool_now()};
    size_t len = 0;
    char *text = njt_warm_text(lines, n, &len);
    if (!text) {
        fprintf(stderr, "normjit warmup: out of memory\n");
        return NJT_EXIT_FAIL;
    }
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    o.passes = passes;
    o.jobs = jobs;
    o.flags = NJ_WARMUP_VERIFY | (a->no_generic ? NJ_WARMUP_NO_GENERIC : 0u);
    o.progress = njt_warm_progress;
    o.progress_user = &st;
    nj_warmup_result *res = NULL;
    int32_t count = 0;
    nj_status s = nj_warmup_manifest(ctx, text, len, &o, &res, &count);
    free(text);
    if (st.tty && !st.quiet) fprintf(stderr, "\n");
    int missing = 0, accounted = 0;
    for (int32_t i = 0; i < count && i < n; i++) {
        accounted |= res[i].status != NJ_OK;
        if (res[i].status != NJ_OK || res[i].verify_status == NJ_OK) continue;
        missing++;
        fprintf(stderr, "%s:%d: %s: not in the cache after the warmup: %s\n", lines[i].file, lines[i].line,
                lines[i].text, res[i].message);
    }
    if (s != NJ_OK && !accounted && !missing) {
        njt_tool_error(s, "cannot check the cache after the warmup");
        accounted = 1;
    }
    if (count == n) njt_warm_table(&st, ctx, missing, njt_tool_now() - st.t0);
    nj_warmup_results_free(res);
    return s != NJ_OK || accounted || missing || count != n ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

static int njt_warm_parse_args(int argc, char **argv, njt_warm_args *a)
{
    memset(a, 0, sizeof *a);
    a->passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    a->files = calloc((size_t)argc, sizeof(char *));
    if (!a->files) return NJT_EXIT_FAIL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        long n;
        if (njt_tool_is_help(argv[i])) {
            njt_warmup_help(stdout);
            return -1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || njt_tool_parse_arch(v, &a->target.arch))
                return njt_tool_usage_error("warmup", "--arch needs an architecture like sm_90");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0 || njt_tool_parse_backend(v, &a->target.backend))
                return njt_tool_usage_error("warmup", "--backend takes cuda, emulator or compile-only");
            a->target.backend_given = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--jobs", &v)) || (r = njt_tool_opt(argc, argv, &i, "-j", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1024, &n))
                return njt_tool_usage_error("warmup", "--jobs takes a number from 1 to 1024");
            a->target.jobs = (int32_t)n;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &a->passes))
                return njt_tool_usage_error("warmup", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return njt_tool_usage_error("warmup", "--cache needs a directory");
            a->target.cache_dir = v;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            a->quiet = 1;
        } else if (!strcmp(argv[i], "--no-generic")) {
            a->no_generic = 1;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return njt_tool_usage_error("warmup", "unknown option '%s'", argv[i]);
        } else {
            a->files[a->nfiles++] = argv[i];
        }
    }
    if (!a->nfiles) return njt_tool_usage_error("warmup", "no manifest given");
    return NJT_EXIT_OK;
}

static int njt_warm_load(const njt_warm_args *a, njt_manifest_line **lines, int *n)
{
    int cap = 0;
    for (int f = 0; f < a->nfiles; f++) {
        if (njt_tool_read_manifest(a->files[f], lines, n, &cap) != 0) {
            fprintf(stderr, "normjit warmup: cannot read %s: %s\n", a->files[f], strerror(errno));
            return -1;
        }
    }
    return 0;
}

int njt_cmd_warmup(int argc, char **argv)
{
    njt_warm_args a;
    int rc = njt_warm_parse_args(argc, argv, &a);
    if (rc) {
        free(a.files);
        return rc < 0 ? NJT_EXIT_OK : rc;
    }
    njt_manifest_line *lines = NULL;
    int n = 0;
    nj_context *ctx = NULL;
    rc = NJT_EXIT_FAIL;
    if (njt_warm_load(&a, &lines, &n) == 0 && njt_tool_open_context(&a.target, NJT_TOOL_FALLBACK_COMPILE_ONLY, &ctx) == NJ_OK &&
        (nj_context_cache_dir(ctx)[0] || !njt_warm_explain_no_cache(a.target.cache_dir)))
        rc = njt_warm_all(ctx, lines, n, &a);
    nj_context_destroy(ctx);
    njt_tool_free_manifest(lines, n);
    free(a.files);
    return rc;
}
