/* normjit perf: how long the kernels of a problem take, and what bandwidth that is. Each pass is run
 * twice to warm up, then --iterations calls are timed together on the host clock (launches queue back to
 * back; one synchronize at the end), so the figure is the time a call costs in a stream of calls. The
 * bytes a pass must move at least (every input read once, every output written once) over that time
 * gives the bandwidth to compare with the device's. A benchmark, not a test: on the emulator its
 * figures are CPU times, useful only to try the command. */
#define NJ_OPERATOR_API
#include "normjit_ops.h"
#include "tool.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define NJT_PERF_TRY(e)                      \
    do {                                    \
        nj_status njt_perf_s_ = (e);         \
        if (njt_perf_s_ != NJ_OK) return njt_perf_s_; \
    } while (0)

static void njt_perf_help(FILE *f)
{
    fprintf(f,
            "usage: normjit perf [options] [PROBLEM...]\n"
            "\n"
            "Times the forward and backward kernels of each problem on random inputs: two warm-up calls, then\n"
            "--iterations calls back to back and one synchronize. Prints per pass the time per call, the bytes\n"
            "the pass moves at least (inputs read once, outputs written once), that over the time (GB/s) and\n"
            "the kernel family the planner chose.\n"
            "A '*' batch takes --batch, or by default the smallest batch with at least 2^24 elements (enough\n"
            "data to measure bandwidth rather than launch latency; 2^16 on the emulator, a dry run).\n"
            "\n"
            "options:\n"
            "  --manifest F        problems from a manifest (repeatable; with no PROBLEM and no manifest: the\n"
            "                      four example manifests)\n"
            "  --backend B         cuda | emulator (default: cuda, else the emulator with a note)\n"
            "  --batch N           extent of a '*' batch axis (default: see above)\n"
            "  --iterations N      timed calls a pass (default 20)\n"
            "  --passes P          fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --max-elements N    skip (and list) problems of more than N elements (default 2^28; 2^22 on the\n"
            "                      emulator)\n"
            "  --cache DIR         cache root (default as for warmup)\n"
            "  -h, --help          this text\n");
}

typedef struct njt_perf_args {
    njt_tool_target t;
    char **files, **words;
    int nfiles, nwords;
    long batch, iterations, max_elements;
    uint32_t passes;
} njt_perf_args;

static int njt_perf_parse_args(int argc, char **argv, njt_perf_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (njt_tool_is_help(argv[i])) {
            njt_perf_help(stdout);
            return -1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--manifest", &v))) {
            if (r < 0) return njt_tool_usage_error("perf", "--manifest needs a file");
            a->files[a->nfiles++] = (char *)v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0 || njt_tool_parse_backend(v, &a->t.backend) || a->t.backend == NJ_BACKEND_COMPILE_ONLY)
                return njt_tool_usage_error("perf", "--backend takes cuda or emulator");
            a->t.backend_given = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--batch", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1L << 30, &a->batch))
                return njt_tool_usage_error("perf", "--batch takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--iterations", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1L << 24, &a->iterations))
                return njt_tool_usage_error("perf", "--iterations takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &a->passes))
                return njt_tool_usage_error("perf", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--max-elements", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, LONG_MAX, &a->max_elements))
                return njt_tool_usage_error("perf", "--max-elements takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return njt_tool_usage_error("perf", "--cache needs a directory");
            a->t.cache_dir = v;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return njt_tool_usage_error("perf", "unknown option '%s'", argv[i]);
        } else {
            a->words[a->nwords++] = argv[i];
        }
    }
    return 0;
}

/* ---- buffers ---- */

/* Elements a strided tensor spans (1 + the largest offset); a rank-0 optional operand is like x. */
static int64_t njt_perf_span(const nj_tensor_desc *t, const nj_tensor_desc *x)
{
    if (t->rank == 0) t = x;
    int64_t span = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->extents[i] == 0) return 0;
        span += (t->extents[i] - 1) * t->strides[i];
    }
    return span;
}

static int64_t njt_perf_numel(const nj_tensor_desc *x)
{
    int64_t n = 1;
    for (int i = 0; i < x->rank; i++) n *= x->extents[i];
    return n;
}

/* Product of x's extents over the axes of mask (gamma: the feature axes; the statistics: the kept ones). */
static int64_t njt_perf_count(const nj_tensor_desc *x, uint32_t mask)
{
    int64_t n = 1;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) n *= x->extents[i];
    return n;
}

static nj_dtype njt_perf_dtype(const nj_tensor_desc *t, const nj_tensor_desc *x)
{
    return (nj_dtype)(t->dtype != NJ_DTYPE_NONE ? t->dtype : x->dtype);
}

/* A device buffer of n elements of d, filled with values in [lo, hi] (a fixed xorshift stream). */
static nj_status njt_perf_buffer(nj_context *ctx, nj_dtype d, int64_t n, float lo, float hi, void **out)
{
    *out = NULL;
    if (n <= 0) return NJ_OK;
    size_t es = nj_dtype_size(d), bytes = (size_t)n * es;
    unsigned char *host = malloc(bytes);
    if (!host) return NJ_ERR_OUT_OF_MEMORY;
    uint64_t s = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = lo + (hi - lo) * (float)(s >> 40) * (1.0f / 16777216.0f);
        nj_ops_dtype_store(d, host, i, v);
    }
    nj_status st = nj_mem_alloc(ctx, bytes, out);
    if (st == NJ_OK) st = nj_mem_upload(ctx, *out, host, bytes);
    free(host);
    return st;
}

enum { NJT_PERF_X, NJT_PERF_Y, NJT_PERF_RES, NJT_PERF_RESOUT, NJT_PERF_DY, NJT_PERF_DX, NJT_PERF_GAMMA, NJT_PERF_BETA,
       NJT_PERF_DGAMMA, NJT_PERF_DBETA, NJT_PERF_MEAN, NJT_PERF_RSTD, NJT_PERF_WS, NJT_PERF_NBUF };

typedef struct njt_perf_run {
    nj_context *ctx;
    const nj_problem_desc *p;
    nj_plan *plan;
    void *buf[NJT_PERF_NBUF];
    size_t ws_bytes; /* bytes at buf[NJT_PERF_WS] */
    double bytes[2]; /* least bytes moved: forward, backward */
} njt_perf_run;

/* Allocates every operand the problem uses and adds up what each pass must move. */
static nj_status njt_perf_alloc(njt_perf_run *r, uint32_t passes)
{
    const nj_problem_desc *p = r->p;
    const nj_tensor_desc *x = &p->x;
    uint32_t f = p->flags;
    int64_t numel = njt_perf_numel(x), nparam = (f & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) ? njt_perf_count(x, p->feature_axes) : 0;
    int64_t nstat = njt_perf_count(x, ~p->reduce_axes);
    nj_dtype pd = p->param_dtype != NJ_DTYPE_NONE ? (nj_dtype)p->param_dtype : NJ_F32;
    double es_x = (double)nj_dtype_size((nj_dtype)x->dtype), ps = (double)nj_dtype_size(pd);
    const struct {
        int slot;
        const nj_tensor_desc *t;
        int used;
    } act[] = {{NJT_PERF_X, x, 1},
               {NJT_PERF_Y, &p->y, (passes & NJ_PASS_FORWARD) != 0},
               {NJT_PERF_RES, &p->residual, (f & NJ_FLAG_RESIDUAL) && (passes & NJ_PASS_FORWARD)},
               {NJT_PERF_RESOUT, &p->residual_out, (f & NJ_FLAG_RESIDUAL_OUT) && (passes & NJ_PASS_FORWARD)},
               {NJT_PERF_DY, &p->dy, (passes & NJ_PASS_BACKWARD) != 0},
               {NJT_PERF_DX, &p->dx, (passes & NJ_PASS_BACKWARD) != 0}};
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++) {
        if (!act[i].used) continue;
        nj_dtype d = njt_perf_dtype(act[i].t, x);
        NJT_PERF_TRY(njt_perf_buffer(r->ctx, d, njt_perf_span(act[i].t, x), -1.0f, 1.0f, &r->buf[act[i].slot]));
    }
    if (f & NJ_FLAG_SCALE) NJT_PERF_TRY(njt_perf_buffer(r->ctx, pd, nparam, 0.5f, 1.5f, &r->buf[NJT_PERF_GAMMA]));
    if (f & NJ_FLAG_BIAS) NJT_PERF_TRY(njt_perf_buffer(r->ctx, pd, nparam, -0.1f, 0.1f, &r->buf[NJT_PERF_BETA]));
    /* statistics: written by a forward with NJ_FLAG_SAVE_STATS, read by the backward */
    NJT_PERF_TRY(njt_perf_buffer(r->ctx, NJ_F32, nstat, -0.1f, 0.1f, &r->buf[NJT_PERF_MEAN]));
    NJT_PERF_TRY(njt_perf_buffer(r->ctx, NJ_F32, nstat, 0.9f, 1.1f, &r->buf[NJT_PERF_RSTD]));
    if (passes & NJ_PASS_BACKWARD) {
        if (f & NJ_FLAG_SCALE) NJT_PERF_TRY(njt_perf_buffer(r->ctx, pd, nparam, 0.0f, 0.0f, &r->buf[NJT_PERF_DGAMMA]));
        if (f & NJ_FLAG_BIAS) NJT_PERF_TRY(njt_perf_buffer(r->ctx, pd, nparam, 0.0f, 0.0f, &r->buf[NJT_PERF_DBETA]));
    }
    size_t ws = 0;
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        size_t w = (passes & pass) ? nj_plan_workspace_size(r->plan, (nj_pass)pass) : 0;
        if (w > ws) ws = w;
    }
    if (ws) NJT_PERF_TRY(nj_mem_alloc(r->ctx, ws, &r->buf[NJT_PERF_WS]));
    r->ws_bytes = ws;
    double stats = (f & NJ_FLAG_SAVE_STATS) ? (double)nstat * ((f & NJ_FLAG_CENTER) ? 8.0 : 4.0) : 0.0;
    double params = (double)nparam * ps * (((f & NJ_FLAG_SCALE) != 0) + ((f & NJ_FLAG_BIAS) != 0));
    double residual = (double)numel * es_x * (((f & NJ_FLAG_RESIDUAL) != 0) + ((f & NJ_FLAG_RESIDUAL_OUT) != 0));
    r->bytes[0] = (double)numel * es_x * 2.0 + residual + params + stats;
    /* x, dy, dx; gamma (and beta under an activation) read, dgamma/dbeta written; the statistics read */
    double bparams = (double)nparam * ps * (((f & NJ_FLAG_SCALE) != 0) * 2 + ((f & NJ_FLAG_BIAS) != 0) *
                                                                              (1 + (p->activation != NJ_ACT_NONE)));
    r->bytes[1] = (double)numel * es_x * 3.0 + bparams + (double)nstat * ((f & NJ_FLAG_CENTER) ? 8.0 : 4.0);
    return NJ_OK;
}

static void njt_perf_free(njt_perf_run *r)
{
    for (int i = 0; i < NJT_PERF_NBUF; i++)
        if (r->buf[i]) nj_mem_free(r->ctx, r->buf[i]);
}

static nj_status njt_perf_call(njt_perf_run *r, nj_pass pass)
{
    void *const *b = r->buf;
    uint32_t f = r->p->flags;
    if (pass == NJ_PASS_FORWARD) {
        nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = b[NJT_PERF_X], .residual = b[NJT_PERF_RES],
                             .gamma = b[NJT_PERF_GAMMA], .beta = b[NJT_PERF_BETA], .y = b[NJT_PERF_Y],
                             .residual_out = b[NJT_PERF_RESOUT], .workspace = b[NJT_PERF_WS],
                             .workspace_size = r->ws_bytes};
        if (f & NJ_FLAG_SAVE_STATS) {
            a.rstd = b[NJT_PERF_RSTD];
            if (f & NJ_FLAG_CENTER) a.mean = b[NJT_PERF_MEAN];
        }
        return nj_forward(r->plan, &a);
    }
    nj_backward_args a = {.struct_size = sizeof a, .dy = b[NJT_PERF_DY], .x = b[NJT_PERF_X], .gamma = b[NJT_PERF_GAMMA],
                          .beta = b[NJT_PERF_BETA], .rstd = b[NJT_PERF_RSTD], .dx = b[NJT_PERF_DX],
                          .dgamma = b[NJT_PERF_DGAMMA], .dbeta = b[NJT_PERF_DBETA], .workspace = b[NJT_PERF_WS],
                          .workspace_size = r->ws_bytes, .eps = 1e-5f};
    if (f & NJ_FLAG_CENTER) a.mean = b[NJT_PERF_MEAN];
    return nj_backward(r->plan, &a);
}

/* Seconds per call of one pass: two warm-up calls, then `iters` calls and one synchronize. */
static nj_status njt_perf_time(njt_perf_run *r, nj_pass pass, long iters, double *sec)
{
    for (int i = 0; i < 2; i++) NJT_PERF_TRY(njt_perf_call(r, pass));
    NJT_PERF_TRY(nj_synchronize(r->ctx, NULL));
    double t0 = njt_tool_now();
    for (long i = 0; i < iters; i++) NJT_PERF_TRY(njt_perf_call(r, pass));
    NJT_PERF_TRY(nj_synchronize(r->ctx, NULL));
    *sec = (njt_tool_now() - t0) / (double)iters;
    return NJ_OK;
}

/* Parses text with the batch the options ask for: --batch, else the least giving `target` elements.
 * *used is the batch, or 0 when the text has no '*' batch (its extents are all fixed). */
static nj_status njt_perf_problem(const char *text, long batch, int64_t target, nj_problem_desc *p, long *used)
{
    NJT_PERF_TRY(nj_problem_from_text(text, 2, p));
    int64_t two = njt_perf_numel(&p->x);
    NJT_PERF_TRY(nj_problem_from_text(text, 1, p));
    int64_t one = njt_perf_numel(&p->x);
    if (one == two) {
        *used = 0;
        return NJ_OK;
    }
    long b = batch;
    if (b <= 0) {
        b = one > 0 ? (long)((target + one - 1) / one) : 1;
        if (b > 65536) b = 65536;
    }
    *used = b;
    return b > 1 ? nj_problem_from_text(text, b, p) : NJ_OK;
}

/* The family of a pass from the plan's description ("pass=fwd family=row ..."), into buf. */
static const char *njt_perf_family(const nj_plan *plan, nj_pass pass, char *buf, size_t cap)
{
    char text[8192];
    size_t len = 0;
    snprintf(buf, cap, "?");
    if (nj_plan_describe(plan, text, sizeof text, &len) != NJ_OK) return buf;
    const char *p = strstr(text, pass == NJ_PASS_FORWARD ? "pass=fwd family=" : "pass=bwd family=");
    if (!p) return buf;
    p += strlen("pass=fwd family=");
    size_t n = strcspn(p, " \n");
    snprintf(buf, cap, "%.*s", (int)(n < cap - 1 ? n : cap - 1), p);
    return buf;
}

/* The batch column: the '*' extent used, or "fixed". */
static const char *njt_perf_batch(long batch)
{
    static char buf[24];
    if (!batch) return "fixed";
    snprintf(buf, sizeof buf, "%ld", batch);
    return buf;
}

/* One problem: a line per pass. Returns 0, or 1 when it could not run. */
static int njt_perf_one(nj_context *ctx, const char *text, const njt_perf_args *a, long max_elements, int64_t target)
{
    nj_problem_desc p;
    long batch;
    nj_status s = njt_perf_problem(text, a->batch, target, &p, &batch);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot parse '%s'", text);
        return 1;
    }
    int64_t numel = njt_perf_numel(&p.x);
    if (numel > max_elements) {
        printf("%-58.58s %-3s %6s   skipped (%lld elements > --max-elements %ld)\n", text, "-", njt_perf_batch(batch),
               (long long)numel, max_elements);
        return 0;
    }
    njt_perf_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.p = &p;
    s = nj_plan_get(ctx, &p, a->passes, &r.plan);
    if (s == NJ_OK) s = njt_perf_alloc(&r, a->passes);
    for (uint32_t pass = NJ_PASS_FORWARD; s == NJ_OK && pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        if (!(a->passes & pass)) continue;
        double sec;
        s = njt_perf_time(&r, (nj_pass)pass, a->iterations, &sec);
        if (s != NJ_OK) break;
        double bytes = r.bytes[pass == NJ_PASS_BACKWARD];
        char fam[32];
        printf("%-58.58s %-3s %6s %10.2f %10.2f %9.1f  %s\n", text, pass == NJ_PASS_FORWARD ? "fwd" : "bwd",
               njt_perf_batch(batch), sec * 1e6, bytes / 1e6, bytes / sec / 1e9,
               njt_perf_family(r.plan, (nj_pass)pass, fam, sizeof fam));
    }
    njt_perf_free(&r);
    if (s != NJ_OK) {
        njt_tool_error(s, "perf of '%s'", text);
        return 1;
    }
    return 0;
}

/* The problem texts: the command line's, else the manifests' (the four examples by default). */
static int njt_perf_texts(njt_perf_args *a, char ***texts)
{
    if (a->nwords) return njt_tool_group_problems(a->nwords, a->words, texts);
    static char *defaults[] = {"manifests/llm.txt", "manifests/unet.txt", "manifests/convnext.txt",
                               "manifests/seeds.txt"};
    char **files = a->nfiles ? a->files : defaults;
    int nfiles = a->nfiles ? a->nfiles : 4, n = 0, cap = 0, total = 0;
    njt_manifest_line *lines = NULL;
    for (int i = 0; i < nfiles; i++)
        if (njt_tool_read_manifest(files[i], &lines, &n, &cap) != 0) {
            fprintf(stderr, "normjit perf: cannot read %s\n", files[i]);
            njt_tool_free_manifest(lines, n);
            return -1;
        }
    *texts = calloc((size_t)(n ? n : 1), sizeof **texts);
    for (int i = 0; *texts && i < n; i++) (*texts)[total++] = strdup(lines[i].text);
    njt_tool_free_manifest(lines, n);
    return *texts ? total : -1;
}

int njt_cmd_perf(int argc, char **argv)
{
    njt_perf_args a;
    memset(&a, 0, sizeof a);
    a.iterations = 20;
    a.passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    a.files = calloc((size_t)argc, sizeof(char *));
    a.words = calloc((size_t)argc, sizeof(char *));
    int rc = (a.files && a.words) ? njt_perf_parse_args(argc, argv, &a) : NJT_EXIT_FAIL;
    char **texts = NULL;
    int n = rc ? 0 : njt_perf_texts(&a, &texts);
    nj_context *ctx = NULL;
    if (!rc && n < 0) rc = NJT_EXIT_FAIL;
    if (!rc && njt_tool_open_context(&a.t, NJT_TOOL_FALLBACK_EMULATOR, &ctx) != NJ_OK) rc = NJT_EXIT_FAIL;
    if (!rc) {
        int emu = nj_context_backend(ctx) == NJ_BACKEND_EMULATOR;
        long max_el = a.max_elements ? a.max_elements : emu ? 1L << 22 : 1L << 28;
        int64_t target = emu ? (int64_t)1 << 16 : (int64_t)1 << 24; /* the emulator: a dry run */
        printf("backend %s, %ld timed calls a pass%s\n", njt_tool_backend_name(nj_context_backend(ctx)), a.iterations,
               emu ? " (emulator: CPU times)" : "");
        printf("%-58s %-3s %6s %10s %10s %9s  %s\n", "problem", "", "batch", "us/call", "MB moved", "GB/s", "family");
        int failed = 0;
        for (int i = 0; i < n; i++) failed += njt_perf_one(ctx, texts[i], &a, max_el, target);
        rc = failed ? NJT_EXIT_FAIL : NJT_EXIT_OK;
    }
    nj_context_destroy(ctx);
    if (texts) njt_tool_free_strings(texts, n > 0 ? n : 0);
    free(a.files);
    free(a.words);
    return rc < 0 ? NJT_EXIT_OK : rc;
}
