/* normjit bench --dump / --ab: compile-time comparisons that survive this machine's drift. The speed of
 * a shared machine moves by ~10% over hours, so the cold-compile figures of two commits measured at
 * different times say little; compiling both commits' sources alternately, kernel by kernel, does.
 * --dump writes each problem's main kernel sources (file NNN_<pass>.cu: problem NNN of the manifests, in
 * order, so that two commits' dumps pair by name), under a first line saying how many kernels the source
 * defines, which the library's compile is told; --ab compiles two such folders alternately. */
#include "tool.h"

#define NJ_OPERATOR_API
#include "normjit_ops.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int njt_ab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void njt_bench_row(const char *what, const double *v, int n, double unit, const char *uname)
{
    double *s = n ? malloc((size_t)n * sizeof *s) : NULL;
    if (!s) {
        printf("%-46s %6d %12s %12s\n", what, 0, "-", "-");
        return;
    }
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, njt_ab_cmp);
    double med = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    printf("%-46s %6d %9.3f %-2s %9.3f %-2s\n", what, n, med * unit, uname, s[n - 1] * unit, uname);
    free(s);
}

#define NJT_AB_KERNELS "// normjit bench: kernels="

static int njt_ab_write(const char *path, const char *text, int32_t kernels)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fprintf(f, NJT_AB_KERNELS "%d\n", (int)kernels) > 0 && fwrite(text, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes lib_<kernel>_<dtype>.cu for every library module (what backward passes launch besides their
 * own sources); returns the files written, -1 on a failure. */
static int njt_bench_dump_libs(const char *dir)
{
    int32_t n = nj_ops_library_module_count();
    for (int32_t i = 0; i < n; i++) {
        char *name = NULL, *src = NULL, path[4096];
        nj_status s = nj_ops_library_module(i, &name, &src);
        if (s != NJ_OK) njt_tool_error(s, "library module %d", (int)i);
        else snprintf(path, sizeof path, "%s/lib_%s.cu", dir, name);
        int ok = s == NJ_OK && njt_ab_write(path, src, 1) == 0;
        free(name);
        free(src);
        if (!ok) return -1;
    }
    return (int)n;
}

int njt_bench_dump(const char *dir, const nj_problem_desc *pr, int np, uint32_t passes, int32_t arch)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "normjit bench: cannot create %s: %s\n", dir, strerror(errno));
        return NJT_EXIT_FAIL;
    }
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_COMPILE_ONLY;
    o.arch = arch;
    o.flags = NJ_CTX_NO_DISK_CACHE; /* nothing is compiled: no cache to touch */
    nj_context *ctx = NULL;
    nj_status s = nj_context_create(&o, &ctx);
    if (s != NJ_OK) {
        njt_tool_error(s, "cannot create a compile-only context for sm_%d", (int)arch);
        return NJT_EXIT_FAIL;
    }
    int written = 0, failed = 0;
    for (int i = 0; i < np; i++) {
        for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
            if (!(passes & pass)) continue;
            nj_ops_pass_info pi;
            s = nj_ops_explain(ctx, &pr[i], (nj_pass)pass, 1, &pi);
            char path[4096];
            snprintf(path, sizeof path, "%s/%03d_%s.cu", dir, i, pass == NJ_PASS_FORWARD ? "fwd" : "bwd");
            if (s != NJ_OK) {
                njt_tool_error(s, "source of %s", njt_tool_problem_text(&pr[i]));
                failed++;
            } else if (njt_ab_write(path, pi.source, pi.kernels) != 0) {
                fprintf(stderr, "normjit bench: cannot write %s: %s\n", path, strerror(errno));
                failed++;
            } else {
                written++;
            }
            nj_ops_pass_info_free(&pi);
        }
    }
    nj_context_destroy(ctx);
    int libs = njt_bench_dump_libs(dir);
    if (libs < 0) failed++;
    else written += libs;
    printf("normjit bench: %d kernel source(s) written to %s%s\n", written, dir, failed ? " (some failed)" : "");
    return failed ? NJT_EXIT_FAIL : NJT_EXIT_OK;
}

static char *njt_ab_read(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    fclose(f);
    return buf;
}

static int njt_ab_is_cu(const struct dirent *e)
{
    size_t n = strlen(e->d_name);
    return n > 3 && strcmp(e->d_name + n - 3, ".cu") == 0;
}

/* NVRTC milliseconds of one compile of src (the library's options), or a negative value on failure. */
static double njt_ab_compile(const char *src, const char *name, int32_t arch)
{
    int kernels = 1; /* a dump written before the line existed: compiled as the library then did */
    if (strncmp(src, NJT_AB_KERNELS, strlen(NJT_AB_KERNELS)) == 0) kernels = atoi(src + strlen(NJT_AB_KERNELS));
    double ms = 0.0;
    nj_status s = nj_ops_nvrtc_compile(src, name, arch, kernels, &ms);
    if (s != NJ_OK) {
        njt_tool_error(s, "compile of %s", name);
        return -1.0;
    }
    return ms;
}

int njt_bench_libs(int32_t arch, double *sec, int cap)
{
    int n = 0;
    for (int32_t i = 0; i < nj_ops_library_module_count() && n < cap; i++) {
        char *name = NULL, *src = NULL;
        nj_status s = nj_ops_library_module(i, &name, &src);
        if (s != NJ_OK) njt_tool_error(s, "library module %d", (int)i);
        double ms = s == NJ_OK ? njt_ab_compile(src, "lib.cu", arch) : -1.0;
        free(name);
        free(src);
        if (ms >= 0) sec[n++] = ms * 1e-3;
    }
    return n;
}

int njt_bench_ab(const char *dir_a, const char *dir_b, int32_t arch, int rounds)
{
    struct dirent **list = NULL;
    int nl = scandir(dir_a, &list, njt_ab_is_cu, alphasort);
    if (nl < 0) {
        fprintf(stderr, "normjit bench: cannot list %s: %s\n", dir_a, strerror(errno));
        return NJT_EXIT_FAIL;
    }
    double *ta = calloc((size_t)nl + 1, sizeof *ta), *tb = calloc((size_t)nl + 1, sizeof *tb);
    double *dif = calloc((size_t)nl + 1, sizeof *dif);
    int n = 0, rc = ta && tb && dif ? NJT_EXIT_OK : NJT_EXIT_FAIL;
    /* untimed: the process's first compile also loads and initializes NVRTC (~20 ms more) */
    char *first = nl > 0 ? njt_ab_read(dir_a, list[0]->d_name) : NULL;
    if (first && njt_ab_compile(first, list[0]->d_name, arch) < 0) rc = NJT_EXIT_FAIL;
    free(first);
    for (int i = 0; i < nl && rc == NJT_EXIT_OK; i++) {
        char *a = njt_ab_read(dir_a, list[i]->d_name), *b = njt_ab_read(dir_b, list[i]->d_name);
        if (a && b) {
            double best_a = -1.0, best_b = -1.0;
            for (int r = 0; r < rounds && rc == NJT_EXIT_OK; r++) {
                double x = njt_ab_compile(a, list[i]->d_name, arch), y = njt_ab_compile(b, list[i]->d_name, arch);
                if (x < 0 || y < 0) rc = NJT_EXIT_FAIL;
                if (best_a < 0 || x < best_a) best_a = x;
                if (best_b < 0 || y < best_b) best_b = y;
            }
            ta[n] = best_a * 1e-3, tb[n] = best_b * 1e-3, dif[n] = (best_b - best_a) * 1e-3;
            n++;
        }
        free(a);
        free(b);
    }
    for (int i = 0; i < nl; i++) free(list[i]);
    free(list);
    if (rc == NJT_EXIT_OK && n == 0) {
        fprintf(stderr, "normjit bench: no kernel source named alike in %s and %s\n", dir_a, dir_b);
        rc = NJT_EXIT_FAIL;
    }
    if (rc == NJT_EXIT_OK) {
        printf("normjit bench: %d kernel(s) in both folders, NVRTC for sm_%d, A then B, best of %d\n", n, (int)arch,
               rounds);
        printf("%-46s %6s %12s %12s\n", "figure", "n", "median", "max");
        njt_bench_row("A: NVRTC per kernel", ta, n, 1e3, "ms");
        njt_bench_row("B: NVRTC per kernel", tb, n, 1e3, "ms");
        njt_bench_row("B - A per kernel (max: the worst growth)", dif, n, 1e3, "ms");
    }
    free(ta);
    free(tb);
    free(dif);
    return rc;
}
