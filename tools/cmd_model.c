/* normjit model: the performance model of problems on a named device, without a GPU (docs/model.md).
 * Each pass runs once on the emulator with its accesses counted (a sample of blocks), beside the ptxas
 * report of the CUDA source; --brief prints a line a pass, and --baseline-check compares those lines with a
 * committed baseline (tests/model_baseline.txt) so a plan that moves more bytes, coalesces worse or launches
 * more kernels fails a test. */
#define NJ_OPERATOR_API
#include "normjit_ops.h"
#include "tool.h"

#include <stdio.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NJT_MODEL_REGEN                                                                                   \
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
            "  --goals              one line a pass against issue 17's goals (forward: >= 90%% of copy, <= 1.05x\n"
            "                       the ideal bytes or the two-read floor, sectors >= 95%%, 16-byte accesses,\n"
            "                       loads in flight for copy speed, lanes >= 90%%, a block every SM; backward:\n"
            "                       >= 80%% of copy, <= 1.3x the ideal bytes), then how many passes miss each\n"
            "  --baseline-write F   write the brief lines to F\n"
            "  --baseline-check F   compare with F; exit 1 on a regression (fewer bytes, better sectors pass)\n"
            "  --cache DIR          cache root\n"
            "  -h, --help           this text\n");
}

typedef struct m_args {
    char **files, **words;
    int nfiles, nwords, brief, ptxas, goals;
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
        if (njt_tool_is_help(argv[i])) {
            m_help(stdout);
            return -1;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--manifest", &v))) {
            if (r < 0) return njt_tool_usage_error("model", "--manifest needs a file");
            a->files[a->nfiles++] = (char *)v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--batch", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1L << 30, &a->batch))
                return njt_tool_usage_error("model", "--batch takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--sample", &v))) {
            if (r < 0 || njt_tool_parse_int(v, 1, 1L << 20, &a->sample))
                return njt_tool_usage_error("model", "--sample takes a positive number");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--device", &v))) {
            if (r < 0 || (strcasecmp(v, "H200") && strcasecmp(v, "H100") && strcasecmp(v, "A100")))
                return njt_tool_usage_error("model", "--device takes H200, H100 or A100");
            a->device = v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--arch", &v))) {
            if (r < 0 || njt_tool_parse_arch(v, &a->arch) || (a->arch != 80 && a->arch != 90))
                return njt_tool_usage_error("model", "--arch takes sm_80 or sm_90");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--passes", &v))) {
            if (r < 0 || njt_tool_parse_passes(v, &a->passes))
                return njt_tool_usage_error("model", "--passes takes fwd, bwd or fwd,bwd");
        } else if ((r = njt_tool_opt(argc, argv, &i, "--baseline-write", &v))) {
            if (r < 0) return njt_tool_usage_error("model", "--baseline-write needs a file");
            a->write = v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--baseline-check", &v))) {
            if (r < 0) return njt_tool_usage_error("model", "--baseline-check needs a file");
            a->check = v;
        } else if ((r = njt_tool_opt(argc, argv, &i, "--cache", &v))) {
            if (r < 0) return njt_tool_usage_error("model", "--cache needs a directory");
            a->cache = v;
        } else if (!strcmp(argv[i], "--no-ptxas")) {
            a->ptxas = 0;
        } else if (!strcmp(argv[i], "--brief")) {
            a->brief = 1;
        } else if (!strcmp(argv[i], "--goals")) {
            a->goals = 1;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            return njt_tool_usage_error("model", "unknown option '%s'", argv[i]);
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
    if (a->nwords) return njt_tool_group_problems(a->nwords, a->words, texts);
    static char *defaults[] = {"manifests/llm.txt", "manifests/unet.txt", "manifests/convnext.txt",
                               "manifests/seeds.txt"};
    char **files = a->nfiles ? a->files : defaults;
    int nfiles = a->nfiles ? a->nfiles : 4, n = 0, cap = 0, total = 0;
    njt_manifest_line *lines = NULL;
    for (int i = 0; i < nfiles; i++)
        if (njt_tool_read_manifest(files[i], &lines, &n, &cap) != 0) {
            fprintf(stderr, "normjit model: cannot read %s\n", files[i]);
            njt_tool_free_manifest(lines, n);
            return -1;
        }
    *texts = calloc((size_t)(n ? n : 1), sizeof **texts);
    for (int i = 0; *texts && i < n; i++) (*texts)[total++] = strdup(lines[i].text);
    njt_tool_free_manifest(lines, n);
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
                if (nj_ops_model_compare(base, one, why, sizeof why)) {
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
               "regenerate the baseline with: " NJT_MODEL_REGEN "\n");
    return bad;
}

static int m_write(const char *path, const char *lines, const m_args *a, const char *device)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "normjit model: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "# Baseline of the performance model on %s (docs/model.md), %ld blocks traced a launch.\n"
               "# A test (ctest -L model) fails when a pass moves more DRAM bytes, coalesces worse, keeps fewer\n"
               "# lanes busy, launches more kernels or loses %% of copy. Regenerate after an intended change:\n"
               "#   " NJT_MODEL_REGEN "\n",
            device, a->sample ? a->sample : 32);
    fputs(lines, f);
    return fclose(f) ? 1 : 0;
}

/* Appends text to the malloc'd *all (the brief lines of every problem); 0, or -1 out of memory. */
static int m_append(char **all, size_t *len, const char *text)
{
    size_t n = strlen(text);
    char *t = realloc(*all, *len + n + 1);
    if (!t) return -1;
    memcpy(t + *len, text, n + 1);
    *all = t;
    *len += n;
    return 0;
}

/* The goals' names (src/model_goals.c) and, per pass kind, how many lines miss each. */
static const char *const m_goal_names[] = {"pct", "bytes", "sectors", "16B", "inflight", "lanes", "wave"};
#define M_GOALS (sizeof m_goal_names / sizeof m_goal_names[0])
typedef struct m_tally {
    int passes[2], met[2], miss[2][M_GOALS];
} m_tally;

static void m_tally_lines(m_tally *t, const char *lines)
{
    for (const char *l = lines; *l;) {
        size_t n = strcspn(l, "\n");
        char one[1024];
        snprintf(one, sizeof one, "%.*s", (int)n, l);
        int k = strstr(one, " | bwd | ") ? 1 : 0;
        const char *u = strstr(one, "unmet:");
        t->passes[k]++;
        t->met[k] += u == NULL;
        for (size_t g = 0; u && g < M_GOALS; g++) {
            char word[32];
            snprintf(word, sizeof word, " %s", m_goal_names[g]);
            for (const char *w = strstr(u, word); w; w = strstr(w + 1, word))
                if (w[strlen(word)] == ' ' || w[strlen(word)] == '\0') {
                    t->miss[k][g]++;
                    break;
                }
        }
        l += n + (l[n] == '\n');
    }
}

static void m_tally_print(const m_tally *t)
{
    for (int k = 0; k < 2; k++) {
        if (!t->passes[k]) continue;
        printf("goals, %s: %d of %d passes meet every goal; missed:", k ? "backward" : "forward", t->met[k],
               t->passes[k]);
        for (size_t g = 0; g < M_GOALS; g++)
            if (t->miss[k][g]) printf(" %s %d", m_goal_names[g], t->miss[k][g]);
        printf("\n");
    }
}

static int m_run(m_args *a, char **texts, int n)
{
    nj_ops_model_opts o = {sizeof o, a->device, a->arch, a->ptxas, (uint32_t)a->sample, a->passes,
                           njt_tool_cache_root(a->cache)};
    nj_ops_model *m = NULL;
    nj_status s = nj_ops_model_create(&o, &m);
    if (s != NJ_OK) {
        njt_tool_error(s, "model: cannot create the emulator context");
        return NJT_EXIT_FAIL;
    }
    char *lines = NULL;
    size_t len = 0;
    int failed = m_append(&lines, &len, "") ? 1 : 0;
    m_tally tally;
    memset(&tally, 0, sizeof tally);
    for (int i = 0; i < n; i++) {
        nj_problem_desc p;
        char *report = NULL, *brief = NULL, *goals = NULL;
        s = m_problem(texts[i], a->batch, &p);
        if (s == NJ_OK)
            s = nj_ops_model_run_goals(m, texts[i], &p, a->brief || a->goals ? NULL : &report, &brief,
                                       a->goals ? &goals : NULL);
        if (s != NJ_OK) {
            njt_tool_error(s, "model of '%s'", texts[i]);
            failed++;
            continue;
        }
        fputs(a->goals ? goals : a->brief ? brief : report, stdout);
        fflush(stdout);
        if (goals) m_tally_lines(&tally, goals);
        if (m_append(&lines, &len, brief)) failed++;
        free(report);
        free(brief);
        free(goals);
    }
    if (a->goals) m_tally_print(&tally);
    if (!failed && a->write && m_write(a->write, lines, a, nj_ops_model_device(m))) failed++;
    if (!failed && a->check && m_check(a->check, lines) != 0) failed++;
    nj_ops_model_destroy(m);
    free(lines);
    return failed ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

int njt_cmd_model(int argc, char **argv)
{
    m_args a;
    memset(&a, 0, sizeof a);
    a.ptxas = 1;
    a.passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    a.files = calloc((size_t)argc, sizeof(char *));
    a.words = calloc((size_t)argc, sizeof(char *));
    int rc = (a.files && a.words) ? m_parse(argc, argv, &a) : NJT_EXIT_FAIL;
    char **texts = NULL;
    int n = rc ? 0 : m_texts(&a, &texts);
    if (!rc && n < 0) rc = NJT_EXIT_FAIL;
    if (!rc) rc = m_run(&a, texts, n);
    if (texts) njt_tool_free_strings(texts, n > 0 ? n : 0);
    free(a.files);
    free(a.words);
    return rc < 0 ? NJT_EXIT_OK : rc;
}
