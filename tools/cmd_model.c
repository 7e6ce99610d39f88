/* normjit model: the performance model of problems on a named device, without a GPU (docs/model.md).
 * Each pass runs once on the emulator with its accesses counted (a sample of blocks), beside the ptxas
 * report of the CUDA source; --brief prints a line a pass, and --baseline-check compares those lines with a
 * committed baseline (tests/model_baseline.txt) so a plan that moves more bytes, coalesces worse or launches
 * more kernels fails a test. */
#include "model.h"
#include "tool.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define NJ_MODEL_REGEN                                                                                   \
    "build/normjit model --brief --no-ptxas --sample 8 --baseline-write tests/model_baseline.txt (in the source tree)"

static void m_help(FILE *f)
{
    fprintf(f,
            "usage: normjit model [options] [PROBLEM...]\n"
            "\n"
            "Models the forward and backward passes of each problem on a device: the bytes a perfect kernel\n"
            "moves, the bytes the plan moves (DRAM, with an L2 model), warp requests, 32-byte sectors, active\n"
            "lanes and access widths (the real generated kernels run on the emulator with their accesses\n"
            "counted, on a sample of blocks), occupancy from the ptxas report, waves, and an estimated time\n"
            "and %% of copy bandwidth. Constants and sources: docs/model.md.\n"
            "A '*' batch takes --batch, or the smallest batch with at least 2^24 elements (as normjit perf).\n"
            "\n"
            "options:\n"
            "  --manifest F         problems from a manifest (repeatable; default: the four example manifests)\n"
            "  --batch N            extent of a '*' batch axis\n"
            "  --device D           H200, H100 or A100 (default: H200, or A100 for --arch sm_80)\n"
            "  --arch A             sm_80 or sm_90: the architecture planned for (default: the device's)\n"
            "  --passes P           fwd, bwd or fwd,bwd (default fwd,bwd)\n"
            "  --sample N           blocks traced a launch (default 32; fewer for big blocks)\n"
            "  --no-ptxas           skip the NVRTC compile (no registers: occupancy from threads and shared)\n"
            "  --brief              one line a pass\n"
            "  --baseline-write F   write the brief lines to F\n"
            "  --baseline-check F   compare with F; exit 1 on a regression (fewer bytes, better sectors pass)\n"
            "  --cache DIR          cache root\n"
            "  -h, --help           this text\n");
}

typedef struct m_args {
    char **files, **words;
    int nfiles, nwords, brief, ptxas;
    long batch, sample;
    int32_t arch;
    uint32_t passes;
    const char *device, *write, *check, *cache;
} m_args;

static int m_parse(int argc, char **argv, m_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r;
        if (nj_tool_is_help(argv[i])) {
            m_help(stdout);
            return -1;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--manifest", &v))) {
            if (r < 0) return nj_tool_usage_error("model", "--manifest needs a file");
            a->files[a->nfiles++] = (char *)v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--batch", &v))) {
            if (r < 0 || nj_tool_parse_int(v, 1, 1L << 30, &a->batch))
                return nj_tool_usage_error("model", "--batch takes a positive number");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--sample", &v))) {
            if (r < 0 || nj_tool_parse_int(v, 1, 1L << 20, &a->sample))
                return nj_tool_usage_error("model", "--sample takes a positive number");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--device", &v))) {
            if (r < 0 || !nj_model_device_find(v))
                return nj_tool_usage_error("model", "--device takes H200, H100 or A100");
            a->device = v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || nj_tool_parse_arch(v, &a->arch) || (a->arch != 80 && a->arch != 90))
                return nj_tool_usage_error("model", "--arch takes sm_80 or sm_90");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || nj_tool_parse_passes(v, &a->passes))
                return nj_tool_usage_error("model", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = nj_tool_opt(argc, argv, &i, "--baseline-write", &v))) {
            if (r < 0) return nj_tool_usage_error("model", "--baseline-write needs a file");
            a->write = v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--baseline-check", &v))) {
            if (r < 0) return nj_tool_usage_error("model", "--baseline-check needs a file");
            a->check = v;
        } else if ((r = nj_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return nj_tool_usage_error("model", "--cache needs a directory");
            a->cache = v;
        } else if (!strcmp(argv[i], "--no-ptxas")) {
            a->ptxas = 0;
        } else if (!strcmp(argv[i], "--brief")) {
            a->brief = 1;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return nj_tool_usage_error("model", "unknown option '%s'", argv[i]);
        } else {
            a->words[a->nwords++] = argv[i];
        }
    }
    return 0;
}

static int64_t m_numel(const nj_problem_desc *p)
{
    int64_t n = 1;
    for (int i = 0; i < p->x.rank; i++) n *= p->x.extents[i];
    return n;
}

/* The problem at the batch asked for, else the least batch giving 2^24 elements (normjit perf's rule). */
static nj_status m_problem(const char *text, long batch, nj_problem_desc *p)
{
    nj_status s = nj_problem_from_text(text, 2, p);
    if (s != NJ_OK) return s;
    int64_t two = m_numel(p);
    if ((s = nj_problem_from_text(text, 1, p)) != NJ_OK) return s;
    int64_t one = m_numel(p);
    if (one == two) return NJ_OK;
    long b = batch;
    if (b <= 0) {
        b = one > 0 ? (long)(((int64_t)1 << 24) + one - 1) / one : 1;
        if (b > 65536) b = 65536;
    }
    return b > 1 ? nj_problem_from_text(text, b, p) : NJ_OK;
}

static int m_texts(m_args *a, char ***texts)
{
    if (a->nwords) return nj_tool_group_problems(a->nwords, a->words, texts);
    static char *defaults[] = {"manifests/llm.txt", "manifests/unet.txt", "manifests/convnext.txt",
                               "manifests/seeds.txt"};
    char **files = a->nfiles ? a->files : defaults;
    int nfiles = a->nfiles ? a->nfiles : 4, n = 0, cap = 0, total = 0;
    nj_manifest_line *lines = NULL;
    for (int i = 0; i < nfiles; i++)
        if (nj_tool_read_manifest(files[i], &lines, &n, &cap) != 0) {
            fprintf(stderr, "normjit model: cannot read %s\n", files[i]);
            nj_tool_free_manifest(lines, n);
            return -1;
        }
    *texts = calloc((size_t)(n ? n : 1), sizeof **texts);
    for (int i = 0; *texts && i < n; i++) (*texts)[total++] = strdup(lines[i].text);
    nj_tool_free_manifest(lines, n);
    return *texts ? total : -1;
}

/* "problem | pass" of a brief line into key. */
static void m_key(const char *line, char *key, size_t cap)
{
    const char *p = strstr(line, " | ");
    const char *q = p ? strstr(p + 3, " | ") : NULL;
    size_t n = q ? (size_t)(q - line) : strlen(line);
    snprintf(key, cap, "%.*s", (int)n, line);
}

/* Compares the brief lines with the baseline file; prints each regression. Returns the count (-1: no file). */
static int m_check(const char *path, const char *lines)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "normjit model: cannot read the baseline %s\n", path);
        return -1;
    }
    int bad = 0, compared = 0;
    char base[1024], key[600], nkey[600];
    while (fgets(base, sizeof base, f)) {
        if (base[0] == '#' || base[0] == '\n') continue;
        base[strcspn(base, "\n")] = '\0';
        m_key(base, key, sizeof key);
        const char *found = NULL;
        for (const char *l = lines; *l && !found;) {
            size_t n = strcspn(l, "\n");
            char one[1024];
            snprintf(one, sizeof one, "%.*s", (int)n, l);
            m_key(one, nkey, sizeof nkey);
            if (!strcmp(key, nkey)) {
                found = l;
                char why[256];
                compared++;
                if (nj_model_compare(base, one, why, sizeof why)) {
                    printf("REGRESSION %s: %s\n", key, why);
                    bad++;
                }
            }
            l += n + (l[n] == '\n');
        }
        /* a problem this run did not model (another manifest) is not compared; a pass of one it did is */
        char prob[600];
        snprintf(prob, sizeof prob, "%.*s | ", (int)(strstr(key, " | ") ? strstr(key, " | ") - key : 0), key);
        if (!found && strstr(lines, prob)) {
            printf("MISSING %s: in the baseline, not modelled now\n", key);
            bad++;
        }
    }
    fclose(f);
    if (compared == 0) {
        printf("baseline %s: no pass of these problems in it\n", path);
        bad++;
    }
    printf("baseline %s: %d pass(es) compared, %d regression(s)\n", path, compared, bad);
    if (bad)
        printf("If the change is intended (a plan now moves more on purpose, or the model's constants changed),\n"
               "regenerate the baseline with: " NJ_MODEL_REGEN "\n");
    return bad;
}

static int m_write(const char *path, const char *lines, const m_args *a, const nj_model_device *dev)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "normjit model: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "# Baseline of the performance model on %s (docs/model.md), %ld blocks traced a launch.\n"
               "# A test (ctest -L model) fails when a pass moves more DRAM bytes, coalesces worse, keeps fewer\n"
               "# lanes busy, launches more kernels or loses %% of copy. Regenerate after an intended change:\n"
               "#   " NJ_MODEL_REGEN "\n",
            dev->name, a->sample ? a->sample : 32);
    fputs(lines, f);
    return fclose(f) ? 1 : 0;
}

static int m_run(m_args *a, char **texts, int n)
{
    const nj_model_device *dev = nj_model_device_find(a->device ? a->device : a->arch == 80 ? "A100" : "H200");
    int32_t arch = a->arch ? a->arch : dev->arch;
    nj_context *ctx = NULL;
    nj_status s = nj_model_context(arch, nj_tool_cache_root(a->cache), &ctx);
    if (s != NJ_OK) {
        nj_tool_error(s, "model: cannot create the emulator context");
        return NJ_EXIT_FAIL;
    }
    nj_model_opts o = {dev, a->ptxas, (uint32_t)a->sample, a->passes};
    nj_buf brief;
    nj_buf_init(&brief);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        nj_problem_desc p;
        nj_model_result r;
        s = m_problem(texts[i], a->batch, &p);
        if (s == NJ_OK) s = nj_model_problem(ctx, &p, &o, &r);
        if (s != NJ_OK) {
            nj_tool_error(s, "model of '%s'", texts[i]);
            failed++;
            continue;
        }
        nj_buf one;
        nj_buf_init(&one);
        nj_model_brief(&brief, texts[i], &r);
        if (a->brief) nj_model_brief(&one, texts[i], &r);
        else nj_model_report(&one, texts[i], &r, dev);
        if (one.data) fputs(one.data, stdout);
        fflush(stdout);
        nj_buf_free(&one);
    }
    nj_context_destroy(ctx);
    const char *lines = brief.data ? brief.data : "";
    if (a->write && m_write(a->write, lines, a, dev)) failed++;
    if (a->check && m_check(a->check, lines) != 0) failed++;
    nj_buf_free(&brief);
    return failed ? NJ_EXIT_FAIL : NJ_EXIT_OK;
}

int nj_cmd_model(int argc, char **argv)
{
    m_args a;
    memset(&a, 0, sizeof a);
    a.ptxas = 1;
    a.passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    a.files = calloc((size_t)argc, sizeof(char *));
    a.words = calloc((size_t)argc, sizeof(char *));
    int rc = (a.files && a.words) ? m_parse(argc, argv, &a) : NJ_EXIT_FAIL;
    char **texts = NULL;
    int n = rc ? 0 : m_texts(&a, &texts);
    if (!rc && n < 0) rc = NJ_EXIT_FAIL;
    if (!rc) rc = m_run(&a, texts, n);
    if (texts) nj_tool_free_strings(texts, n > 0 ? n : 0);
    free(a.files);
    free(a.words);
    return rc < 0 ? NJ_EXIT_OK : rc;
}
