/* normjit bench: the JIT pipeline's figures. Cold compile per kernel (fresh temporary cache, compile-only
 * for sm_90, one source at a time so each is timed alone, its kernels on the idle cores), warm load of a cached plan by a new context, and
 * the hot lookup of a loaded plan (nj_plan_get on the same context, ns per call). A benchmark, not a test. */
#include "tool.h"

#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>

static void njt_bench_help(FILE *f)
{
    fprintf(f,
            "usage: normjit bench [options]\n"
            "\n"
            "Measures, over the problems of the manifests: the cold compile time per kernel (median, max) into a\n"
            "fresh temporary cache with the compile-only backend for sm_90, one source at a time (a source\n"
            "of several kernels uses the idle cores, as a first call does), for the main kernels (what a first\n"
            "call waits for; with both passes, also the forward and the backward ones apart; a backward that\n"
            "is another problem's too, e.g. the same with a fused residual add, is compiled and counted once;\n"
            "a library module that passes share is compiled beside the first one, on its own thread, and is\n"
            "also timed alone), and apart for the unaligned variants (a first call with misaligned pointers,\n"
            "or warmup, compiles those); the warm load of cached plans by a new context (median per problem); and\n"
            "the hot lookup of an already loaded plan (nj_plan_get on the same context, ns per call), which\n"
            "needs a backend that can load kernels: cuda, else the emulator.\n"
            "\n"
            "options:\n"
            "  --manifest F        a manifest to take problems from (repeatable; default: manifests/llm.txt,\n"
            "                      manifests/unet.txt, manifests/convnext.txt, manifests/seeds.txt)\n"
            "  --arch sm_XX        target of the cold compiles (default sm_90)\n"
            "  --passes P          fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --hot-backend B     cuda | emulator for the load and lookup figures (default: cuda, else emulator)\n"
            "  --iterations N      lookups timed for the hot figure (default 1000000)\n"
            "  --keep              keep the temporary cache (its path is printed)\n"
            "  --each              also print each cold compile as it ends (ms, pass, variant, problem)\n"
            "  --dump DIR          write the main kernels' sources instead (DIR/NNN_fwd.cu, NNN_bwd.cu: problem\n"
            "                      NNN of the manifests; lib_*.cu: the library modules passes share),\n"
            "                      compiling nothing\n"
            "  --ab DIR_A DIR_B    compile the like-named sources of two dumps alternately (A, B, A, ...) and\n"
            "                      print both medians and the per-kernel difference: this machine's speed drifts\n"
            "                      by ~10%% over hours, so compare two commits in one sitting\n"
            "  --rounds N          --ab: best of N compiles of each source (default 1)\n"
            "  -h, --help          this text\n");
}

typedef struct njt_bench_args {
    char **files;
    int nfiles;
    int32_t arch;
    uint32_t passes;
    int hot_given;
    nj_backend_kind hot;
    long iterations;
    int keep;
    int each;              /* --each: a line per cold compile */
    const char *dump;      /* --dump DIR */
    const char *ab[2];     /* --ab DIR_A DIR_B */
    long rounds;           /* --rounds N (--ab) */
} njt_bench_args;

static int njt_bench_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static nj_status njt_bench_ctx(nj_backend_kind kind, int32_t arch, const char *dir, nj_context **out)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = kind;
    o.arch = arch;
    o.cache_dir = dir;
    /* the loops compile one source at a time; one of several kernels takes the idle cores, as a first call's */
    o.max_parallel_compiles = 0;
    return nj_context_create(&o, out);
}

/* Cold: every kernel of one variant (NJ_OPS_WARM_MAIN: what a first call waits for; NJ_OPS_WARM_UNALIGNED: what
 * a first misaligned call waits for) compiled into the cache, one at a time. Seconds per kernel into
 * total/nvrtc, and into bwd whether it was a backward pass's. */
static int njt_bench_cold(const njt_bench_args *a, const char *dir, uint32_t variant, nj_problem_desc *pr, int np,
                         double *total, double *nvrtc, unsigned char *bwd, int *nk)
{
    nj_context *ctx = NULL;
    nj_status s = njt_bench_ctx(NJ_BACKEND_COMPILE_ONLY, a->arch, dir, &ctx);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot create a compile-only context for sm_%d", (int)a->arch);
        return -1;
    }
    for (int i = 0; i < np; i++) {
        for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
            if (!(a->passes & pass)) continue;
            int32_t compiled = 0, cached = 0;
            double t = njt_tool_now();
            s = nj_ops_warm(ctx, &pr[i], pass | variant, &compiled, &cached);
            t = njt_tool_now() - t;
            if (s != NJ_OK) njt_tool_error(s, "compile of %s", njt_tool_problem_text(&pr[i]));
            else if (compiled) {
                total[*nk] = t;
                nvrtc[*nk] = nj_ops_last_compile_ms() * 1e-3;
                bwd[*nk] = pass == NJ_PASS_BACKWARD;
                (*nk)++;
                if (a->each)
                    printf("compile %9.3f ms  %s %s  %s\n", t * 1e3, pass == NJ_PASS_BACKWARD ? "bwd" : "fwd",
                           variant == NJ_OPS_WARM_UNALIGNED ? "unaligned" : "main", njt_tool_problem_text(&pr[i]));
            }
        }
    }
    nj_context_destroy(ctx);
    return 0;
}

/* Warm: a new context over the same cache finds every problem's kernels on disk. */
static void njt_bench_warm(const njt_bench_args *a, const char *dir, nj_problem_desc *pr, int np, double *v, int *n)
{
    nj_context *ctx = NULL;
    nj_status s = njt_bench_ctx(NJ_BACKEND_COMPILE_ONLY, a->arch, dir, &ctx);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot create a compile-only context");
        return;
    }
    for (int i = 0; i < np; i++) {
        int32_t compiled = 0, cached = 0;
        double t = njt_tool_now();
        s = nj_ops_warm(ctx, &pr[i], a->passes, &compiled, &cached);
        t = njt_tool_now() - t;
        if (s == NJ_OK && !compiled && cached) v[(*n)++] = t;
    }
    nj_context_destroy(ctx);
}

/* A context of a backend that can load kernels: the one asked for, else cuda, else the emulator. */
static nj_context *njt_bench_loadable(const njt_bench_args *a, const char *dir)
{
    nj_context *ctx = NULL;
    nj_backend_kind kind = a->hot_given ? a->hot : NJ_BACKEND_CUDA;
    nj_status s = njt_bench_ctx(kind, 0, dir, &ctx);
    if (s != NJ_OK && !a->hot_given) {
        static int noted;
        if (!noted++) printf("note: cuda unavailable (%s); load and lookup figures use the emulator\n", nj_status_name(s));
        kind = NJ_BACKEND_EMULATOR;
        s = njt_bench_ctx(kind, 0, dir, &ctx);
    }
    if (s != NJ_OK) njt_tool_error(s, "cannot create a %s context", njt_tool_backend_name(kind));
    return s == NJ_OK ? ctx : NULL;
}

/* Loads the first few problems' forward plans through a loadable backend: cold (compile + load), then
 * warm from disk in a new context, then the hot lookup loop on that context. */
static void njt_bench_hot(const njt_bench_args *a, const char *dir, nj_problem_desc *pr, int np)
{
    int k = np < 3 ? np : 3;
    double cold[3], warm[3];
    int nc = 0, nw = 0;
    nj_context *ctx = njt_bench_loadable(a, dir);
    if (!ctx) return;
    const char *bname = njt_tool_backend_name(nj_context_backend(ctx));
    for (int i = 0; i < k; i++) {
        nj_plan *plan;
        double t = njt_tool_now();
        nj_status s = nj_plan_get(ctx, &pr[i], NJ_PASS_FORWARD, &plan);
        if (s == NJ_OK) cold[nc++] = njt_tool_now() - t;
        else njt_tool_error(s, "%s plan of %s", bname, njt_tool_problem_text(&pr[i]));
    }
    nj_context_destroy(ctx);
    if (!nc || !(ctx = njt_bench_loadable(a, dir))) return;
    nj_plan *plan = NULL;
    for (int i = 0; i < k; i++) {
        double t = njt_tool_now();
        if (nj_plan_get(ctx, &pr[i], NJ_PASS_FORWARD, &plan) == NJ_OK) warm[nw++] = njt_tool_now() - t;
    }
    char label[96];
    snprintf(label, sizeof label, "cold plan_get, fwd (%s, compile+load)", bname);
    njt_bench_row(label, cold, nc, 1e3, "ms");
    snprintf(label, sizeof label, "warm load from disk, fwd plan_get (%s)", bname);
    njt_bench_row(label, warm, nw, 1e3, "ms");
    if (nw) {
        double t = njt_tool_now();
        long fails = 0;
        for (long it = 0; it < a->iterations; it++) fails += nj_plan_get(ctx, &pr[it % nw], NJ_PASS_FORWARD, &plan) != NJ_OK;
        t = njt_tool_now() - t;
        printf("%-46s %6ld %9.1f ns/call%s\n", "hot lookup, nj_plan_get on a loaded plan", a->iterations,
               t * 1e9 / (double)a->iterations, fails ? " (some lookups failed)" : "");
    }
    nj_context_destroy(ctx);
}

static int njt_bench_parse_args(int argc, char **argv, njt_bench_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (njt_tool_is_help(argv[i])) {
            njt_bench_help(stdout);
            return -1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--manifest", &v))) {
            if (r < 0) return njt_tool_usage_error("bench", "--manifest needs a file");
            a->files[a->nfiles++] = (char *)v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || njt_tool_parse_arch(v, &a->arch)) return njt_tool_usage_error("bench", "--arch takes sm_XX");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &a->passes))
                return njt_tool_usage_error("bench", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--hot-backend", &v))) {
            if (r < 0 || njt_tool_parse_backend(v, &a->hot) || a->hot == NJ_BACKEND_COMPILE_ONLY)
                return njt_tool_usage_error("bench", "--hot-backend takes cuda or emulator");
            a->hot_given = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--iterations", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1000000000L, &a->iterations))
                return njt_tool_usage_error("bench", "--iterations takes a positive number");
        } else if (!strcmp(argv[i], "--keep")) {
            a->keep = 1;
        } else if (!strcmp(argv[i], "--each")) {
            a->each = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--dump", &v))) {
            if (r < 0) return njt_tool_usage_error("bench", "--dump needs a folder");
            a->dump = v;
        } else if (!strcmp(argv[i], "--ab")) {
            if (i + 2 >= argc) return njt_tool_usage_error("bench", "--ab needs two folders");
            a->ab[0] = argv[++i];
            a->ab[1] = argv[++i];
        } else if ((r = njt_tool_opt(argc, argv, &i, "--rounds", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 100, &a->rounds))
                return njt_tool_usage_error("bench", "--rounds takes 1 to 100");
        } else {
            return njt_tool_usage_error("bench", "unexpected argument '%s'", argv[i]);
        }
    }
    return 0;
}

static nj_problem_desc *njt_bench_problems(const njt_bench_args *a, int *np)
{
    njt_manifest_line *lines = NULL;
    int n = 0, cap = 0;
    for (int f = 0; f < a->nfiles; f++)
        if (njt_tool_read_manifest(a->files[f], &lines, &n, &cap) != 0)
            fprintf(stderr, "normjit bench: cannot read %s: %s\n", a->files[f], strerror(errno));
    nj_problem_desc *pr = calloc((size_t)(n ? n : 1), sizeof *pr);
    *np = 0;
    for (int i = 0; pr && i < n; i++) {
        nj_status s = nj_problem_from_text(lines[i].text, 1, &pr[*np]);
        if (s == NJ_OK) (*np)++;
        else fprintf(stderr, "%s:%d: %s: %s\n", lines[i].file, lines[i].line, nj_status_name(s), nj_last_error());
    }
    njt_tool_free_manifest(lines, n);
    return pr;
}

/* The end-to-end times of one pass's kernels (total[i] where bwd[i] == want), median and max. */
static void njt_bench_pass_row(const char *what, const double *total, const unsigned char *bwd, int n, int want)
{
    double *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    int m = 0;
    for (int i = 0; v && i < n; i++)
        if (bwd[i] == want) v[m++] = total[i];
    if (v) njt_bench_row(what, v, m, 1e3, "ms");
    free(v);
}

int njt_cmd_bench(int argc, char **argv)
{
    static char *defaults[] = {"manifests/llm.txt", "manifests/unet.txt", "manifests/convnext.txt",
                               "manifests/seeds.txt"};
    njt_bench_args a = {.arch = 90, .passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD, .iterations = 1000000, .rounds = 1};
    a.files = calloc((size_t)argc + 4, sizeof(char *));
    if (!a.files) return NJT_EXIT_FAIL;
    int rc = njt_bench_parse_args(argc, argv, &a);
    if (rc) {
        free(a.files);
        return rc < 0 ? NJT_EXIT_OK : rc;
    }
    if (a.ab[0]) {
        rc = njt_bench_ab(a.ab[0], a.ab[1], a.arch, (int)a.rounds);
        free(a.files);
        return rc;
    }
    if (!a.nfiles)
        for (int i = 0; i < 4; i++) a.files[a.nfiles++] = defaults[i];
    int np = 0;
    nj_problem_desc *pr = njt_bench_problems(&a, &np);
    if (a.dump) {
        rc = pr && np ? njt_bench_dump(a.dump, pr, np, a.passes, a.arch) : NJT_EXIT_FAIL;
        free(pr);
        free(a.files);
        return rc;
    }
    char dir[] = "/tmp/normjit-bench-XXXXXX";
    if (!pr || !np || !mkdtemp(dir)) {
        fprintf(stderr, "normjit bench: %s\n", !np ? "no problems to measure" : "cannot create a temporary cache");
        free(pr);
        free(a.files);
        return NJT_EXIT_FAIL;
    }
    size_t nv = (size_t)np * 2; /* kernels of one variant: at most a forward and a backward per problem */
    double *total = calloc(nv * 2, sizeof(double)), *nvrtc = calloc(nv * 2, sizeof(double));
    double *warm = calloc((size_t)np, sizeof(double));
    unsigned char *bwd = calloc(nv * 2, 1);
    int nk = 0, nu = 0, nw = 0;
    rc = NJT_EXIT_FAIL;
    printf("normjit bench: %d problems, temporary cache %s\n", np, dir);
    if (total && nvrtc && warm && bwd && njt_bench_cold(&a, dir, NJ_OPS_WARM_MAIN, pr, np, total, nvrtc, bwd, &nk) == 0 &&
        njt_bench_cold(&a, dir, NJ_OPS_WARM_UNALIGNED, pr, np, total + nv, nvrtc + nv, bwd + nv, &nu) == 0) {
        njt_bench_warm(&a, dir, pr, np, warm, &nw);
        printf("%-46s %6s %12s %12s\n", "figure", "n", "median", "max");
        char label[96];
        snprintf(label, sizeof label, "cold compile per kernel (sm_%d, end to end)", (int)a.arch);
        njt_bench_row(label, total, nk, 1e3, "ms");
        njt_bench_row("  of which NVRTC", nvrtc, nk, 1e3, "ms");
        if ((a.passes & NJ_PASS_FORWARD) && (a.passes & NJ_PASS_BACKWARD)) {
            njt_bench_pass_row("  forward kernels (end to end)", total, bwd, nk, 0);
            njt_bench_pass_row("  backward kernels (end to end)", total, bwd, nk, 1);
        }
        /* shared by the passes that launch them: compiled once a cache, beside the first such pass
         * (counted with it above when it compiled longer) */
        double lib[16];
        njt_bench_row("library modules, each alone (once a cache)", lib, njt_bench_libs(a.arch, lib, 16), 1e3, "ms");
        njt_bench_row("unaligned variants (first misaligned call)", total + nv, nu, 1e3, "ms");
        njt_bench_row("warm hit per problem (new context, warm)", warm, nw, 1e3, "ms");
        njt_bench_hot(&a, dir, pr, np);
        rc = NJT_EXIT_OK;
    }
    if (a.keep) printf("cache kept at %s\n", dir);
    else nftw(dir, njt_bench_rm, 16, FTW_DEPTH | FTW_PHYS);
    free(total);
    free(nvrtc);
    free(warm);
    free(bwd);
    free(pr);
    free(a.files);
    return rc;
}
