/* normjit check: run problems through a backend on seeded random data and compare every output with
 * the double-precision reference (tools/check_lib.c, tolerances in tools/tolerance.h). */
#include "tool.h"

#include "check_lib.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

static void njt_check_help(FILE *f)
{
    fprintf(f,
            "usage: normjit check PROBLEM... [options]\n"
            "\n"
            "Runs each problem on random inputs (uniform in [-1, 1] plus --offset; gamma around 1, beta small),\n"
            "with outputs pre-filled with NaN, and compares y, residual_out, mean, rstd (forward) and dx, dgamma,\n"
            "dbeta (backward), as the problem's flags ask, with a double-precision reference. Prints per output\n"
            "the worst absolute and relative error, the normalized error |got-ref|/(atol*scale+rtol*|ref|), the\n"
            "tolerance and PASS/FAIL. A PROBLEM is the text form, quoted or as several words.\n"
            "\n"
            "options:\n"
            "  --backend B         emulator | cuda (default: NORMJIT_BACKEND, else cuda, else the emulator)\n"
            "  --arch sm_XX        emulator: the architecture it stands in for, whose plans it runs (default sm_80;\n"
            "                      sm_90 reaches the thread-block cluster plans)\n"
            "  --batch N           extent of a '*' batch axis (default 4: several rows, so row indexing is tested)\n"
            "  --seed S            random seed (default 1)\n"
            "  --offset V          added to every x value (tests stability against a large mean; default 0)\n"
            "  --scale S           x = S * (offset + uniform[-1, 1]), the residual S * uniform (magnitudes such\n"
            "                      as 1e30 or 1e-30; default 1)\n"
            "  --nan               one NaN in x (its middle element): its set's outputs must be NaN, every\n"
            "                      other set's right\n"
            "  --eps E             epsilon (default 1e-5)\n"
            "  --pass P            fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --shift N           place x, the residual, dy, the outputs, gamma/beta and their gradients N\n"
            "                      bytes past an aligned address (each whose element size divides N): the\n"
            "                      launch must pick the kernels that alignment allows (default 0)\n"
            "  --shuffle           emulator: shuffle thread order between barriers, poison shared memory, and\n"
            "                      lay grids out 7 blocks wide (2-D, surplus blocks that must skip)\n"
            "                      (exposes races and reads of uninitialized shared memory)\n"
            "  --max-elements N    skip (and list as skipped) problems of more than N elements: the\n"
            "                      double-precision reference is single-threaded (default: no limit)\n"
            "  --cache DIR         cache root (default as for warmup)\n"
            "  -h, --help          this text\n"
            "\n"
            "exit status: 0 when every problem checked passes, 1 on any FAIL or error, 2 on a usage error.\n");
}

typedef struct njt_check_args {
    njt_tool_target t;
    njt_check_options o;
    long batch;
    long max_elements; /* 0: no limit */
    int nwords;
    char **words;
} njt_check_args;

static int njt_check_parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end) return -1;
    *out = v;
    return 0;
}

/* Returns 0 to go on, -1 after --help, or an exit code. */
static int njt_check_parse_args(int argc, char **argv, njt_check_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (njt_tool_is_help(argv[i])) {
            njt_check_help(stdout);
            return -1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0 || njt_tool_parse_backend(v, &a->t.backend) || a->t.backend == NJ_BACKEND_COMPILE_ONLY)
                return njt_tool_usage_error("check", "--backend takes emulator or cuda");
            a->t.backend_given = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || njt_tool_parse_arch(v, &a->t.arch)) return njt_tool_usage_error("check", "--arch takes sm_XX");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--batch", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1L << 30, &a->batch))
                return njt_tool_usage_error("check", "--batch takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--max-elements", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, LONG_MAX, &a->max_elements))
                return njt_tool_usage_error("check", "--max-elements takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--seed", &v))) {
            if (r < 0 || njt_tool_parse_u64(v, &a->o.seed)) return njt_tool_usage_error("check", "--seed takes a number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--offset", &v))) {
            if (r < 0 || njt_check_parse_double(v, &a->o.offset))
                return njt_tool_usage_error("check", "--offset takes a number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--scale", &v))) {
            if (r < 0 || njt_check_parse_double(v, &a->o.scale) || !(a->o.scale > 0.0))
                return njt_tool_usage_error("check", "--scale takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--shift", &v))) {
            long sh = 0;
            if (r < 0 || njt_tool_parse_int(v, 0, 4096, &sh)) return njt_tool_usage_error("check", "--shift takes 0 to 4096 bytes");
            a->o.shift = (int)sh;
        } else if (!strcmp(argv[i], "--nan")) {
            a->o.nan = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--eps", &v))) {
            if (r < 0 || njt_check_parse_double(v, &a->o.eps) || !(a->o.eps >= 0))
                return njt_tool_usage_error("check", "--eps takes a non-negative number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--pass", &v)) || (r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &a->o.passes))
                return njt_tool_usage_error("check", "--pass takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return njt_tool_usage_error("check", "--cache needs a directory");
            a->t.cache_dir = v;
        } else if (!strcmp(argv[i], "--shuffle")) {
            a->t.ctx_flags |= NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON | NJ_CTX_EMU_SMALL_GRID;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return njt_tool_usage_error("check", "unknown option '%s'", argv[i]);
        } else {
            a->words[a->nwords++] = argv[i];
        }
    }
    if (!a->nwords) return njt_tool_usage_error("check", "no problem given");
    return 0;
}

/* Logical elements of x (saturating). */
static long njt_check_elements(const nj_problem_desc *p)
{
    long n = 1;
    for (int i = 0; i < p->x.rank; i++) {
        if (p->x.extents[i] > 0 && n > LONG_MAX / p->x.extents[i]) return LONG_MAX;
        n *= (long)p->x.extents[i];
    }
    return n;
}

#define NJT_CHECK_SKIPPED 100 /* njt_check_one: not run (over --max-elements) */

static int njt_check_one(nj_context *ctx, const char *text, const njt_check_args *a)
{
    nj_problem_desc p;
    nj_status s = nj_problem_from_text(text, a->batch, &p);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot parse '%s'", text);
        return NJT_EXIT_FAIL;
    }
    printf("%s\n  as %s\n", text, njt_tool_problem_text(&p));
    long n = njt_check_elements(&p);
    if (a->max_elements > 0 && n > a->max_elements) {
        printf("  => SKIPPED (%ld elements > --max-elements %ld)\n", n, a->max_elements);
        return NJT_CHECK_SKIPPED;
    }
    const njt_check_options *o = &a->o;
    njt_check_report rep;
    double t = njt_tool_now();
    s = njt_check_problem(ctx, &p, o, &rep);
    njt_check_report_print(stdout, &rep);
    if (s != NJ_OK) {
        fflush(stdout);
        njt_tool_error(s, "check of '%s' did not run", text);
        return NJT_EXIT_FAIL;
    }
    printf("  => %s (%.2f s)\n", rep.pass ? "PASS" : "FAIL", njt_tool_now() - t);
    return rep.pass ? NJT_EXIT_OK : NJT_EXIT_FAIL;
}

int njt_cmd_check(int argc, char **argv)
{
    njt_check_args a;
    memset(&a, 0, sizeof a);
    njt_check_options_init(&a.o);
    a.batch = 4;
    a.words = calloc((size_t)argc, sizeof(char *));
    if (!a.words) return NJT_EXIT_FAIL;
    int rc = njt_check_parse_args(argc, argv, &a);
    if (rc) {
        free(a.words);
        return rc < 0 ? NJT_EXIT_OK : rc;
    }
    char **probs = NULL;
    int np = njt_tool_group_problems(a.nwords, a.words, &probs), failed = 0;
    nj_context *ctx = NULL;
    if (njt_tool_open_context(&a.t, NJT_TOOL_FALLBACK_EMULATOR, &ctx) != NJ_OK) {
        rc = NJT_EXIT_FAIL;
    } else {
        printf("backend %s, seed %llu, offset %g, scale %g%s, eps %g, '*' batch %ld\n",
               njt_tool_backend_name(nj_context_backend(ctx)), (unsigned long long)a.o.seed, a.o.offset, a.o.scale,
               a.o.nan ? ", a NaN" : "", a.o.eps, a.batch);
        int skipped = 0;
        for (int i = 0; i < np; i++) {
            int r = njt_check_one(ctx, probs[i], &a);
            skipped += r == NJT_CHECK_SKIPPED;
            failed += r != NJT_EXIT_OK && r != NJT_CHECK_SKIPPED;
        }
        printf("%d problem(s), %d passed, %d failed, %d skipped\n", np, np - failed - skipped, failed, skipped);
        rc = failed ? NJT_EXIT_FAIL : NJT_EXIT_OK;
    }
    nj_context_destroy(ctx);
    njt_tool_free_strings(probs, np);
    free(a.words);
    return rc;
}
