/* normjit plan: what the library would do for a problem, without compiling it: the canonical problem,
 * the plan, the signature, the cache key and whether the cache already holds the kernels. */
#include "tool.h"

#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include <stdlib.h>
#include <string.h>

static void njt_plan_help(FILE *f)
{
    fprintf(f,
            "usage: normjit plan [options] PROBLEM...\n"
            "\n"
            "Shows, for each problem and pass, the canonical problem, the plan, the signature, the cache hash and\n"
            "whether the kernels are cached. A PROBLEM is the text form, as one quoted argument or as several\n"
            "words: 'normjit plan rmsnorm bf16 *x4096' (a word naming a kind, such as layernorm, starts the next\n"
            "problem). Nothing is compiled.\n"
            "\n"
            "options:\n"
            "  --arch sm_XX        target architecture (implies --backend compile-only unless --backend is given)\n"
            "  --backend B         cuda | emulator | compile-only (default as for warmup)\n"
            "  --pass P            fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --source            print the generated CUDA source too\n"
            "  --cache DIR         cache root to look in (default as for warmup)\n"
            "  -h, --help          this text\n");
}

static void njt_plan_print_block(const char *label, const char *text)
{
    printf("  %s:\n", label);
    const char *p = text ? text : "";
    while (*p) {
        size_t n = strcspn(p, "\n");
        printf("    %.*s\n", (int)n, p);
        p += n;
        if (*p) p++;
    }
}

static int njt_plan_one(nj_context *ctx, const char *text, uint32_t passes, int source)
{
    nj_problem_desc p;
    nj_status s = nj_problem_from_text(text, 1, &p);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot parse '%s'", text);
        return NJT_EXIT_FAIL;
    }
    printf("problem: %s\n", njt_tool_problem_text(&p));
    int rc = NJT_EXIT_OK;
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        if (!(passes & pass)) continue;
        nj_ops_pass_info pi;
        s = nj_ops_explain(ctx, &p, (nj_pass)pass, source, &pi);
        const char *pname = pass == NJ_PASS_FORWARD ? "fwd" : "bwd";
        if (s != NJ_OK) {
            njt_tool_error(s, "cannot plan the %s pass of '%s'", pname, text);
            rc = NJT_EXIT_FAIL;
            continue;
        }
        printf("pass %s\n", pname);
        printf("  canonical: %s\n", pi.canon_text ? pi.canon_text : "");
        printf("  plan:      %s\n", pi.plan_text ? pi.plan_text : "");
        printf("  hash:      %s\n", pi.hash);
        printf("  cached:    %s\n", pi.cached ? "yes" : "no");
        /* library modules: entries of their own, shared by many passes, which a pass needs too */
        for (const char *l = pi.libraries; l && *l; l += strcspn(l, "\n") + 1)
            printf("  library:   %.*s\n", (int)strcspn(l, "\n"), l);
        njt_plan_print_block("signature", pi.signature);
        if (source) njt_plan_print_block("source", pi.source);
        nj_ops_pass_info_free(&pi);
    }
    printf("\n");
    return rc;
}

int njt_cmd_plan(int argc, char **argv)
{
    njt_tool_target t;
    memset(&t, 0, sizeof t);
    uint32_t passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    int source = 0, nwords = 0;
    char **words = calloc((size_t)argc, sizeof(char *));
    if (!words) return NJT_EXIT_FAIL;
    int rc = NJT_EXIT_OK;
    for (int i = 1; i < argc && rc == NJT_EXIT_OK; i++) {
        const char *v = NULL;
        int r;
        if (njt_tool_is_help(argv[i])) {
            njt_plan_help(stdout);
            free(words);
            return NJT_EXIT_OK;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || njt_tool_parse_arch(v, &t.arch))
                rc = njt_tool_usage_error("plan", "--arch needs an architecture like sm_90");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--backend", &v))) {
            if (r < 0 || njt_tool_parse_backend(v, &t.backend))
                rc = njt_tool_usage_error("plan", "--backend takes cuda, emulator or compile-only");
            t.backend_given = 1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--pass", &v)) || (r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &passes))
                rc = njt_tool_usage_error("plan", "--pass takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) rc = njt_tool_usage_error("plan", "--cache needs a directory");
            t.cache_dir = v;
        } else if (!strcmp(argv[i], "--source")) {
            source = 1;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            rc = njt_tool_usage_error("plan", "unknown option '%s'", argv[i]);
        } else {
            words[nwords++] = argv[i];
        }
    }
    if (rc == NJT_EXIT_OK && !nwords) rc = njt_tool_usage_error("plan", "no problem given");
    if (rc != NJT_EXIT_OK) {
        free(words);
        return rc;
    }
    char **probs = NULL;
    int np = njt_tool_group_problems(nwords, words, &probs);
    nj_context *ctx = NULL;
    if (njt_tool_open_context(&t, NJT_TOOL_FALLBACK_COMPILE_ONLY, &ctx) != NJ_OK) rc = NJT_EXIT_FAIL;
    for (int i = 0; ctx && i < np; i++)
        if (njt_plan_one(ctx, probs[i], passes, source) != NJT_EXIT_OK) rc = NJT_EXIT_FAIL;
    nj_context_destroy(ctx);
    njt_tool_free_strings(probs, np);
    free(words);
    return rc;
}
