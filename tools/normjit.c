/* normjit command-line tool: dispatch to the subcommands and the helpers they share (option parsing,
 * backend selection, problem grouping, manifests). Each subcommand lives in tools/cmd_<name>.c. */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct nj_tool_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} nj_tool_cmd;

int nj_cmd_model(int argc, char **argv); /* tools/cmd_model.c */

static const nj_tool_cmd nj_cmds[] = {
    {"warmup", nj_cmd_warmup, "compile every problem of manifests into the cache"},
    {"plan", nj_cmd_plan, "show the plan, signature and cache state of problems"},
    {"cache", nj_cmd_cache, "list, verify, trim, export and import the kernel cache"},
    {"check", nj_cmd_check, "run problems on random data and compare with the double reference"},
    {"bench", nj_cmd_bench, "measure cold compile, warm load and hot lookup times"},
    {"perf", nj_cmd_perf, "time the kernels of problems on the device: us per call, GB/s"},
    {"model", nj_cmd_model, "performance model of problems on a named device, without a GPU"},
};

static void nj_tool_main_help(FILE *f)
{
    fprintf(f, "usage: normjit <command> [options] ...\n\ncommands:\n");
    for (size_t i = 0; i < sizeof nj_cmds / sizeof nj_cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", nj_cmds[i].name, nj_cmds[i].summary);
    fprintf(f, "\n'normjit <command> --help' describes a command. normjit %s\n", nj_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        nj_tool_main_help(stderr);
        return NJ_EXIT_USAGE;
    }
    if (nj_tool_is_help(argv[1])) {
        nj_tool_main_help(stdout);
        return NJ_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("normjit %s\n", nj_version());
        return NJ_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof nj_cmds / sizeof nj_cmds[0]; i++)
        if (!strcmp(argv[1], nj_cmds[i].name)) return nj_cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "normjit: unknown command '%s'\n", argv[1]);
    nj_tool_main_help(stderr);
    return NJ_EXIT_USAGE;
}

/* ---- messages ---- */

void nj_tool_error(nj_status s, const char *fmt, ...)
{
    /* Copy the detail first: formatting arguments may call into the library and replace it. */
    char detail[4096];
    snprintf(detail, sizeof detail, "%s", nj_last_error());
    fprintf(stderr, "normjit: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s: %s\n", nj_status_name(s), detail[0] ? detail : nj_status_string(s));
}

int nj_tool_usage_error(const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "normjit %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'normjit %s --help'.\n", cmd);
    return NJ_EXIT_USAGE;
}

/* ---- options and values ---- */

int nj_tool_is_help(const char *arg) { return !strcmp(arg, "--help") || !strcmp(arg, "-h"); }

int nj_tool_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
    return 1;
}

int nj_tool_parse_backend(const char *s, nj_backend_kind *out)
{
    if (!strcasecmp(s, "cuda") || !strcasecmp(s, "gpu")) *out = NJ_BACKEND_CUDA;
    else if (!strcasecmp(s, "emulator") || !strcasecmp(s, "emu")) *out = NJ_BACKEND_EMULATOR;
    else if (!strcasecmp(s, "compile-only") || !strcasecmp(s, "compile_only")) *out = NJ_BACKEND_COMPILE_ONLY;
    else return -1;
    return 0;
}

const char *nj_tool_backend_name(nj_backend_kind k)
{
    switch (k) {
    case NJ_BACKEND_CUDA: return "cuda";
    case NJ_BACKEND_EMULATOR: return "emulator";
    case NJ_BACKEND_COMPILE_ONLY: return "compile-only";
    default: return "auto";
    }
}

int nj_tool_parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int nj_tool_parse_arch(const char *s, int32_t *out)
{
    if (!strncasecmp(s, "sm_", 3)) s += 3;
    else if (!strncasecmp(s, "compute_", 8)) s += 8;
    long v;
    if (nj_tool_parse_int(s, 50, 1000, &v)) return -1;
    *out = (int32_t)v;
    return 0;
}

int nj_tool_parse_passes(const char *s, uint32_t *out)
{
    uint32_t m = 0;
    const char *p = s;
    while (*p) {
        size_t n = strcspn(p, ",+");
        if ((n == 3 && !strncasecmp(p, "fwd", 3)) || (n == 7 && !strncasecmp(p, "forward", 7))) m |= NJ_PASS_FORWARD;
        else if ((n == 3 && !strncasecmp(p, "bwd", 3)) || (n == 8 && !strncasecmp(p, "backward", 8)))
            m |= NJ_PASS_BACKWARD;
        else if ((n == 4 && !strncasecmp(p, "both", 4)) || (n == 3 && !strncasecmp(p, "all", 3)))
            m |= NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
        else return -1;
        p += n;
        if (*p) p++;
    }
    if (!m) return -1;
    *out = m;
    return 0;
}

int nj_tool_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return -1;
    }
    if (*end) {
        end++;
        if (toupper((unsigned char)*end) == 'I') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
        if (*end) return -1;
    }
    if (shift && v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* ---- context ---- */

static nj_status nj_tool_try_context(const nj_tool_target *t, nj_backend_kind kind, int32_t arch, nj_context **out)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = kind;
    o.arch = arch;
    o.cache_dir = nj_tool_cache_root(t->cache_dir);
    o.max_parallel_compiles = t->jobs;
    o.flags = t->ctx_flags;
    return nj_context_create(&o, out);
}

nj_status nj_tool_open_context(const nj_tool_target *t, nj_tool_fallback fb, nj_context **out)
{
    nj_backend_kind kind = NJ_BACKEND_CUDA;
    int chosen = 1; /* the user named the backend: no fallback */
    const char *env = getenv("NORMJIT_BACKEND");
    if (t->backend_given) kind = t->backend;
    else if (t->arch && fb == NJ_TOOL_FALLBACK_COMPILE_ONLY) kind = NJ_BACKEND_COMPILE_ONLY;
    else if (env && *env && nj_tool_parse_backend(env, &kind) != 0) {
        fprintf(stderr, "normjit: NORMJIT_BACKEND=%s is not a backend (cuda, emulator, compile-only)\n", env);
        return NJ_ERR_BAD_ARGUMENT;
    } else chosen = env && *env;
    if (kind == NJ_BACKEND_COMPILE_ONLY && fb == NJ_TOOL_FALLBACK_EMULATOR) {
        fprintf(stderr, "normjit: the compile-only backend cannot run kernels; use --backend emulator|cuda\n");
        return NJ_ERR_UNSUPPORTED;
    }
    int32_t arch = t->arch;
    if (kind == NJ_BACKEND_COMPILE_ONLY && !arch) arch = 90;
    nj_status s = nj_tool_try_context(t, kind, arch, out);
    if (s == NJ_OK) return s;
    int no_gpu = s == NJ_ERR_NO_DRIVER || s == NJ_ERR_NO_DEVICE;
    if (!no_gpu || chosen || kind != NJ_BACKEND_CUDA || fb == NJ_TOOL_FALLBACK_NONE) {
        nj_tool_error(s, "cannot create a %s context", nj_tool_backend_name(kind));
        return s;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", nj_last_error());
    nj_backend_kind alt = fb == NJ_TOOL_FALLBACK_COMPILE_ONLY ? NJ_BACKEND_COMPILE_ONLY : NJ_BACKEND_EMULATOR;
    int32_t alt_arch = alt == NJ_BACKEND_COMPILE_ONLY ? (arch ? arch : 90) : arch;
    fprintf(stderr, "normjit: note: %s (%s); using the %s backend", nj_status_string(s), why[0] ? why : "cuda",
            nj_tool_backend_name(alt));
    if (alt == NJ_BACKEND_COMPILE_ONLY) fprintf(stderr, " for sm_%d", (int)alt_arch);
    fprintf(stderr, "\n");
    s = nj_tool_try_context(t, alt, alt_arch, out);
    if (s != NJ_OK) nj_tool_error(s, "cannot create a %s context", nj_tool_backend_name(alt));
    return s;
}

const char *nj_tool_cache_root(const char *given)
{
    static char tree[4096];
    const char *env = getenv("NORMJIT_CACHE_DIR");
    if (given || (env && *env)) return given;
    if (access("cache/.gitkeep", F_OK) != 0 || access("include/normjit.h", F_OK) != 0) return NULL;
    return realpath("cache", tree) ? tree : NULL;
}

/* ---- problems from argv ---- */

static int nj_tool_is_kind_word(const char *w)
{
    static const char *const kinds[] = {"layernorm", "rmsnorm", "instancenorm", "groupnorm",
                                        "batchnorm", "norm",    "general"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (!strcasecmp(w, kinds[i])) return 1;
    return 0;
}

static char *nj_tool_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int nj_tool_push(char ***list, int *n, char *s)
{
    char **l = realloc(*list, sizeof(char *) * (size_t)(*n + 1));
    if (!l || !s) {
        free(s);
        if (l) *list = l;
        return -1;
    }
    *list = l;
    l[(*n)++] = s;
    return 0;
}

int nj_tool_group_problems(int nwords, char **words, char ***out)
{
    char **list = NULL;
    int n = 0;
    char *cur = NULL;
    for (int i = 0; i <= nwords; i++) {
        const char *w = i < nwords ? words[i] : NULL;
        int alone = w && strchr(w, ' ');
        if (cur && (!w || alone || nj_tool_is_kind_word(w))) {
            nj_tool_push(&list, &n, cur);
            cur = NULL;
        }
        if (!w) break;
        if (alone) {
            nj_tool_push(&list, &n, nj_tool_strdup(w));
        } else if (!cur) {
            cur = nj_tool_strdup(w);
        } else {
            size_t a = strlen(cur), b = strlen(w);
            char *c = realloc(cur, a + b + 2);
            if (!c) continue;
            cur = c;
            cur[a] = ' ';
            memcpy(cur + a + 1, w, b + 1);
        }
    }
    *out = list;
    return n;
}

void nj_tool_free_strings(char **s, int n)
{
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

/* ---- manifests ---- */

static char *nj_tool_trim(char *s)
{
    char *hash = strchr(s, '#');
    if (hash) *hash = '\0';
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Reads one line of at most NJ_TOOL_LINE_MAX bytes into buf (NUL-terminated, newline dropped): 1 read,
 * 0 at the end, -1 at an error. A NUL byte or an overlong line is an error of the manifest, reported as
 * file:line (a NUL would otherwise cut the line short silently, and an endless line cost memory). */
#define NJ_TOOL_LINE_MAX 4096
static int nj_tool_manifest_line(FILE *f, const char *path, int lineno, char buf[NJ_TOOL_LINE_MAX + 1])
{
    size_t n = 0;
    int ch, bad = 0;
    while ((ch = getc(f)) != EOF && ch != '\n') {
        if (ch == '\0' && !bad) bad = 1;
        if (n == NJ_TOOL_LINE_MAX && !bad) bad = 2;
        if (n < NJ_TOOL_LINE_MAX) buf[n++] = (char)ch;
    }
    buf[n] = '\0';
    if (ferror(f)) return -1;
    if (bad) {
        fprintf(stderr, "normjit: %s:%d: %s\n", path, lineno,
                bad == 1 ? "a NUL byte inside the line (a manifest is text): line refused"
                         : "line longer than 4096 bytes: refused");
        errno = EINVAL;
        return -1;
    }
    return ch == EOF && n == 0 ? 0 : 1;
}

int nj_tool_read_manifest(const char *path, nj_manifest_line **lines, int *count, int *cap)
{
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "r");
    if (!f) return -1;
    char buf[NJ_TOOL_LINE_MAX + 1];
    int lineno = 0, rc = 0, got;
    while ((got = nj_tool_manifest_line(f, path, ++lineno, buf)) > 0) {
        char *t = nj_tool_trim(buf);
        if (!*t) continue;
        if (*count == *cap) {
            int ncap = *cap ? *cap * 2 : 64;
            nj_manifest_line *l = realloc(*lines, sizeof *l * (size_t)ncap);
            if (!l) {
                errno = ENOMEM;
                rc = -1;
                break;
            }
            *lines = l;
            *cap = ncap;
        }
        nj_manifest_line *ml = &(*lines)[*count];
        ml->file = path;
        ml->line = lineno;
        ml->text = nj_tool_strdup(t);
        if (!ml->text) {
            errno = ENOMEM;
            rc = -1;
            break;
        }
        (*count)++;
    }
    if (got < 0) rc = -1;
    if (f != stdin) fclose(f);
    return rc;
}

void nj_tool_free_manifest(nj_manifest_line *lines, int count)
{
    for (int i = 0; i < count; i++) free(lines[i].text);
    free(lines);
}

/* ---- small things ---- */

double nj_tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *nj_tool_bytes(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

const char *nj_tool_problem_text(const nj_problem_desc *p)
{
    static _Thread_local char text[1024];
    if (nj_problem_to_text(p, text, sizeof text, NULL) != NJ_OK) snprintf(text, sizeof text, "(unprintable problem)");
    return text;
}
