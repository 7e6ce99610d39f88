/* NVRTC compilation: cubins and PTX, the resource report, error logs, the concurrency bound, a missing NVRTC. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <unistd.h>

#include "compile.h"
#include "compile_child.h"

/* 256 floats of static shared memory and one barrier: the report must say 1024 bytes smem, 1 barrier. */
static const char k_small[] =
    "struct A { const float *x; float *y; long long n; float eps; int r; };\n"
    "extern \"C\" __global__ void __launch_bounds__(256) k_small(const A a)\n"
    "{\n"
    "    __shared__ float s[256];\n"
    "    long long i = (long long)blockIdx.x * 256 + threadIdx.x;\n"
    "    s[threadIdx.x] = i < a.n ? a.x[i] : 0.f;\n"
    "    __syncthreads();\n"
    "    if (i < a.n) a.y[i] = s[255 - threadIdx.x] * 2.f + a.eps;\n"
    "}\n";

/* A 64-float local array indexed by a run-time value under a 32-register cap (1024 threads, 2 blocks/SM)
 * cannot live in registers: ptxas puts it on the stack and spills. */
static const char k_spill[] =
    "struct A { const float *x; float *y; long long n; float eps; int r; };\n"
    "extern \"C\" __global__ void __launch_bounds__(1024, 2) k_spill(const A a)\n"
    "{\n"
    "    float loc[64];\n"
    "    int t = threadIdx.x;\n"
    "    for (int j = 0; j < 64; j++) loc[j] = a.x[t * 64 + j];\n"
    "    float acc = 0.f;\n"
    "    for (int j = 0; j < 64; j++) acc += loc[(j * a.r) & 63] * loc[j];\n"
    "    a.y[t] = acc;\n"
    "}\n";

/* Two kernels in one program: compiled with --split-compile when a core is idle. */
static const char k_pair[] =
    "struct A { const float *x; float *y; long long n; float eps; int r; };\n"
    "extern \"C\" __global__ void __launch_bounds__(256) k_scale(const A a)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * 256 + threadIdx.x;\n"
    "    if (i < a.n) a.y[i] = a.x[i] * a.eps;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) k_sum(const A a)\n"
    "{\n"
    "    __shared__ float s[128];\n"
    "    s[threadIdx.x] = threadIdx.x < a.n ? a.x[threadIdx.x] : 0.f;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) { float t = 0.f; for (int j = 0; j < 128; j++) t += s[j]; a.y[0] = t; }\n"
    "}\n";

static const char k_syntax[] =
    "extern \"C\" __global__ void k_bad(float *y)\n"
    "{\n"
    "    y[threadIdx.x] = undeclared_thing + 1.f;\n"
    "}\n";

static const nj_kernel_resources *find_kernel(const nj_compile_result *r, const char *name)
{
    for (int32_t i = 0; i < r->nkernels; i++)
        if (strcmp(r->kernels[i].kernel, name) == 0) return &r->kernels[i];
    return NULL;
}

static void check_cubin(int32_t arch)
{
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", arch, 1, &r), NJ_OK);
    assert_int_equal(r.bin.is_ptx, 0);
    assert_true(r.bin.size > 64);
    assert_memory_equal(r.bin.data, "\x7f" "ELF", 4);
    assert_true(r.millis > 0.0);
    assert_int_equal(r.nkernels, 1);
    const nj_kernel_resources *k = find_kernel(&r, "k_small");
    assert_non_null(k);
    assert_true(k->registers > 0 && k->registers <= 255);
    assert_int_equal(k->spill_stores, 0);
    assert_int_equal(k->spill_loads, 0);
    assert_int_equal(k->stack_bytes, 0);
    assert_int_equal(k->shared_bytes, 256 * 4);
    assert_int_equal(k->barriers, 1);
    nj_binary_free(&r.bin);
    assert_null(r.bin.data);
}

static void test_cubin_sm80(void **state) { check_cubin(80); }
static void test_cubin_sm90(void **state) { check_cubin(90); }

static void test_version(void **state)
{
    const char *v = NULL;
    int major = 0, minor = -1;
    char rest = 0;
    assert_int_equal(nj_nvrtc_version_string(&v), NJ_OK);
    assert_int_equal(sscanf(v, "nvrtc-%d.%d%c", &major, &minor, &rest), 2);
    assert_true(major >= 12 && minor >= 0);
    int32_t maxa = 0;
    assert_int_equal(nj_nvrtc_max_arch(&maxa), NJ_OK);
    assert_true(maxa >= 90);
}

/* A GPU newer than NVRTC gets PTX for the newest virtual arch NVRTC knows, NUL-terminated for the driver. */
static void test_ptx_fallback(void **state)
{
    int32_t maxa = 0;
    assert_int_equal(nj_nvrtc_max_arch(&maxa), NJ_OK);
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", 200, 1, &r), NJ_OK);
    assert_int_equal(r.bin.is_ptx, 1);
    const char *ptx = r.bin.data;
    assert_int_equal(ptx[r.bin.size - 1], '\0');
    assert_int_equal(strlen(ptx), r.bin.size - 1);
    char target[32];
    snprintf(target, sizeof target, ".target sm_%d", (int)maxa);
    assert_non_null(strstr(ptx, target));
    assert_non_null(strstr(ptx, ".entry k_small"));
    assert_int_equal(r.nkernels, 0); /* no ptxas, no report */
    nj_binary_free(&r.bin);
}

static void test_bad_arch_fail(void **state)
{
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", 0, 1, &r), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", -90, 1, &r), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", 70, 1, &r), NJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(nj_last_error(), "sm_70"));
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", 85, 1, &r), NJ_ERR_UNSUPPORTED);
    assert_null(r.bin.data);
    assert_int_equal(nj_nvrtc_compile(NULL, "x.cu", 90, 1, &r), NJ_ERR_NULL_POINTER);
}

static void test_spill_report(void **state)
{
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_spill, "spill.cu", 90, 1, &r), NJ_OK);
    const nj_kernel_resources *k = find_kernel(&r, "k_spill");
    assert_non_null(k);
    assert_true(k->registers > 0 && k->registers <= 32); /* 65536 regs / (2 * 1024 threads) */
    assert_true(k->stack_bytes >= 64 * 4);
    assert_true(k->spill_stores > 0 || k->spill_loads > 0);
    assert_int_equal(k->barriers, 0);
    nj_binary_free(&r.bin);
}

/* Text as NVRTC 13.0 prints it: sm_90 form, sm_80 form with cmem, and a non-inlined device function whose
 * frame line must not land on a kernel. */
static const char real_log[] =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'k2' for 'sm_80'\n"
    "ptxas info    : Function properties for k2\n"
    "ptxas         .     960 bytes stack frame, 724 bytes spill stores, 764 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 0 barriers, 960 bytes cumulative stack size, 384 bytes cmem[0]\n"
    "ptxas info    : Compile time = 27.421 ms\n"
    "ptxas info    : Function properties for _Z6helperPf\n"
    "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
    "ptxas info    : Compiling entry function 'k1' for 'sm_90'\n"
    "ptxas info    : Function properties for k1\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem\n"
    "ptxas info    : Compile time = 3.772 ms\n";

static void test_parse_log(void **state)
{
    nj_kernel_resources k[4];
    assert_int_equal(nj_parse_ptxas_log(real_log, k, 4), 2);
    assert_string_equal(k[0].kernel, "k2");
    assert_int_equal(k[0].registers, 32);
    assert_int_equal(k[0].stack_bytes, 960);
    assert_int_equal(k[0].spill_stores, 724);
    assert_int_equal(k[0].spill_loads, 764);
    assert_int_equal(k[0].barriers, 0);
    assert_int_equal(k[0].shared_bytes, 0);
    assert_string_equal(k[1].kernel, "k1");
    assert_int_equal(k[1].registers, 10);
    assert_int_equal(k[1].barriers, 1);
    assert_int_equal(k[1].shared_bytes, 1024);
    assert_int_equal(k[1].stack_bytes, 0);
    assert_int_equal(k[1].spill_stores, 0);
    /* Capacity is respected; empty and NULL logs find nothing. */
    assert_int_equal(nj_parse_ptxas_log(real_log, k, 1), 1);
    assert_string_equal(k[0].kernel, "k2");
    assert_int_equal(nj_parse_ptxas_log("", k, 4), 0);
    assert_int_equal(nj_parse_ptxas_log(NULL, k, 4), 0);
    assert_int_equal(nj_parse_ptxas_log("ptxas info    : Compiling entry function 'unterminated", k, 4), 1);
}

static void test_syntax_error_fail(void **state)
{
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_syntax, "bad.cu", 90, 1, &r), NJ_ERR_COMPILE);
    const char *e = nj_last_error();
    assert_non_null(strstr(e, "bad.cu(3)"));
    assert_non_null(strstr(e, "undeclared_thing"));
    assert_null(r.bin.data);
    assert_int_equal(r.bin.size, 0);
}

/* Hundreds of errors: the detail keeps the head of the log and says it was cut. */
static void test_long_log_truncated_fail(void **state)
{
    size_t cap = 64 * 1024, len = 0;
    char *src = malloc(cap);
    assert_non_null(src);
    len += (size_t)snprintf(src + len, cap - len, "__global__ void k(float *y) {\n");
    for (int i = 0; i < 300; i++) len += (size_t)snprintf(src + len, cap - len, "y[%d] = missing_%d;\n", i, i);
    snprintf(src + len, cap - len, "}\n");
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(src, "many.cu", 90, 1, &r), NJ_ERR_COMPILE);
    const char *e = nj_last_error();
    assert_non_null(strstr(e, "missing_0"));
    assert_non_null(strstr(e, "[log truncated]"));
    free(src);
}

static int has_debug_line(const nj_binary *b) { return memmem(b->data, b->size, ".debug_line", 11) != NULL; }

/* NORMJIT_NVRTC_LINEINFO=1 adds line tables (for compute-sanitizer reports) and nothing else. */
static void test_lineinfo(void **state)
{
    nj_compile_result plain, lined;
    unsetenv("NORMJIT_NVRTC_LINEINFO");
    assert_int_equal(nj_nvrtc_compile(k_small, "small.cu", 90, 1, &plain), NJ_OK);
    setenv("NORMJIT_NVRTC_LINEINFO", "1", 1);
    nj_status s = nj_nvrtc_compile(k_small, "small.cu", 90, 1, &lined);
    unsetenv("NORMJIT_NVRTC_LINEINFO");
    assert_int_equal(s, NJ_OK);
    assert_false(has_debug_line(&plain.bin));
    assert_true(has_debug_line(&lined.bin));
    assert_int_equal(plain.kernels[0].registers, lined.kernels[0].registers);
    nj_binary_free(&plain.bin);
    nj_binary_free(&lined.bin);
}

typedef struct compile_job {
    pthread_t th;
    nj_status status;
    int32_t nkernels;
    int ptx, pair;
} compile_job;

/* Odd jobs compile two kernels and may take idle cores for the second: the bound counts cores, not jobs. */
static void *compile_thread(void *arg)
{
    compile_job *j = arg;
    nj_compile_result r;
    if (j->pair) /* ~50 ms of ptxas: the threads overlap */
        j->status = nj_nvrtc_compile(k_pair, "pair.cu", 90, 4, &r);
    else
        j->status = nj_nvrtc_compile(k_spill, "spill.cu", 90, 1, &r);
    j->nkernels = r.nkernels;
    j->ptx = r.bin.is_ptx;
    nj_binary_free(&r.bin);
    return NULL;
}

static void test_concurrent_bounded(void **state)
{
    nj_nvrtc_set_parallelism(3);
    nj_nvrtc_peak_parallelism(true);
    compile_job jobs[8];
    for (int i = 0; i < 8; i++) {
        jobs[i].pair = i % 2;
        assert_int_equal(pthread_create(&jobs[i].th, NULL, compile_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) assert_int_equal(pthread_join(jobs[i].th, NULL), 0);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(jobs[i].status, NJ_OK);
        assert_int_equal(jobs[i].nkernels, 1 + jobs[i].pair);
        assert_int_equal(jobs[i].ptx, 0);
    }
    int32_t peak = nj_nvrtc_peak_parallelism(true);
    assert_true(peak >= 2);
    assert_true(peak <= 3);
    nj_nvrtc_set_parallelism(0); /* back to the default */
}

/* A program of two kernels alone: one core for it and one idle taken for the second kernel (the peak says
 * how many were held), none when no core is idle; both kernels are reported either way. */
static void check_pair(int32_t limit, int32_t want_peak)
{
    nj_nvrtc_set_parallelism(limit);
    nj_nvrtc_peak_parallelism(true);
    nj_compile_result r;
    assert_int_equal(nj_nvrtc_compile(k_pair, "pair.cu", 90, 2, &r), NJ_OK);
    assert_int_equal(nj_nvrtc_peak_parallelism(true), want_peak);
    assert_int_equal(r.nkernels, 2);
    const nj_kernel_resources *a = find_kernel(&r, "k_scale"), *b = find_kernel(&r, "k_sum");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(b->shared_bytes, 512);
    assert_int_equal(a->spill_stores + b->spill_stores, 0);
    assert_memory_equal(r.bin.data, "\x7f" "ELF", 4);
    nj_binary_free(&r.bin);
}

static void test_split_kernels(void **state)
{
    check_pair(3, 2);
    check_pair(1, 1);
    nj_nvrtc_set_parallelism(0);
}

/* Child mode: NVRTC pointed at a path that does not exist. */
static int child_nvrtc_missing(void)
{
    nj_compile_result r;
    const char *v = NULL;
    if (nj_nvrtc_compile(k_small, "small.cu", 90, 1, &r) != NJ_ERR_NVRTC_MISSING) return 1;
    if (!strstr(nj_last_error(), "/nonexistent/libnvrtc.so.99")) return 2;
    if (nj_nvrtc_version_string(&v) != NJ_ERR_NVRTC_MISSING) return 3; /* stays missing, no crash */
    if (!strstr(nj_last_error(), "/nonexistent/libnvrtc.so.99")) return 4;
    return 0;
}

/* Child mode: the override names a real library that is not NVRTC (libc): it loads but lacks the symbols. */
static int child_nvrtc_not_nvrtc(void)
{
    nj_compile_result r;
    if (nj_nvrtc_compile(k_small, "small.cu", 90, 1, &r) != NJ_ERR_NVRTC_MISSING) return 1;
    if (!strstr(nj_last_error(), "libc.so.6 is not a usable NVRTC: it lacks nvrtc")) return 2;
    return 0;
}

static void test_nvrtc_missing_fail(void **state)
{
    assert_int_equal(nj_test_run_child("nvrtc-missing", "NORMJIT_LIBNVRTC", "/nonexistent/libnvrtc.so.99"), 0);
    assert_int_equal(nj_test_run_child("nvrtc-not-nvrtc", "NORMJIT_LIBNVRTC", "libc.so.6"), 0);
}

/* ---- against a fake, older NVRTC (tests/support/compile_fake_nvrtc.c) ---- */

static char fake_nvrtc[512];

static int build_fake_nvrtc(void **state)
{
    return nj_test_build_shared(NJ_SOURCE_DIR, "tests/support/compile_fake_nvrtc.c", "NJ_FAKE_LIBNVRTC",
                                "libnvrtc.so.12", fake_nvrtc, sizeof fake_nvrtc);
}

static int remove_fake_nvrtc(void **state)
{
    nj_test_remove_shared(fake_nvrtc);
    return 0;
}

#define CHILD_CHECK(cond, code)                                                                 \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "child check %d failed: %s (%s)\n", code, #cond, nj_last_error()); \
            return code;                                                                        \
        }                                                                                       \
    } while (0)

/* The fake rejects -minimal and --split-compile: the first compile that sends one retries without it on a
 * fresh program, later ones never send it. */
static int child_fake_nvrtc(void)
{
    void (*counts)(int *, int *, int *, int *, int *) = NULL;
    int c, d, m, k, sp;
    const char *v = NULL;
    int32_t maxa = 0;
    nj_compile_result r;
    CHILD_CHECK(nj_nvrtc_version_string(&v) == NJ_OK && strcmp(v, "nvrtc-12.0") == 0, 1);
    CHILD_CHECK(nj_nvrtc_max_arch(&maxa) == NJ_OK && maxa == 90, 2);
    void *h = dlopen(getenv("NORMJIT_LIBNVRTC"), RTLD_NOW | RTLD_NOLOAD);
    CHILD_CHECK(h && (*(void **)&counts = dlsym(h, "fake_nvrtc_counts")), 3);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 90, 1, &r) == NJ_OK, 4);
    CHILD_CHECK(r.bin.size == 16 && memcmp(r.bin.data, "\x7f" "ELF", 4) == 0 && !r.bin.is_ptx, 5);
    CHILD_CHECK(r.nkernels == 1 && strcmp(r.kernels[0].kernel, "k_small") == 0 && r.kernels[0].registers == 7, 6);
    nj_binary_free(&r.bin);
    counts(&c, &d, &m, &k, &sp);
    CHILD_CHECK(c == 2 && d == 2 && m == 1 && k == 2, 7);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 80, 1, &r) == NJ_OK && r.bin.size == 16, 8);
    nj_binary_free(&r.bin);
    counts(&c, &d, &m, &k, &sp);
    CHILD_CHECK(c == 3 && d == 3 && m == 1 && k == 3, 9);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 100, 1, &r) == NJ_OK && r.bin.is_ptx, 10);
    CHILD_CHECK(strstr(r.bin.data, ".target") && r.nkernels == 0, 11);
    nj_binary_free(&r.bin);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 86, 1, &r) == NJ_ERR_UNSUPPORTED, 12);
    CHILD_CHECK(strstr(nj_last_error(), "supported: 75 80 90"), 13);
    /* two kernels with idle cores: --split-compile is rejected once, then never sent again */
    nj_nvrtc_set_parallelism(4);
    counts(&c, &d, &m, &k, &sp);
    CHILD_CHECK(sp == 0, 14);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 90, 2, &r) == NJ_OK && r.bin.size == 16, 15);
    nj_binary_free(&r.bin);
    CHILD_CHECK(nj_nvrtc_compile(k_small, "small.cu", 90, 2, &r) == NJ_OK && r.bin.size == 16, 16);
    nj_binary_free(&r.bin);
    int k0 = k;
    counts(&c, &d, &m, &k, &sp);
    CHILD_CHECK(sp == 1 && m == 1 && k == k0 + 3 && c == d, 17);
    return 0;
}

static void test_old_nvrtc_options(void **state)
{
    assert_int_equal(nj_test_run_child("fake-nvrtc", "NORMJIT_LIBNVRTC", fake_nvrtc), 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "nvrtc-missing") == 0) return child_nvrtc_missing();
    if (argc > 1 && strcmp(argv[1], "nvrtc-not-nvrtc") == 0) return child_nvrtc_not_nvrtc();
    if (argc > 1 && strcmp(argv[1], "fake-nvrtc") == 0) return child_fake_nvrtc();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_cubin_sm80),
        cmocka_unit_test(test_cubin_sm90),
        cmocka_unit_test(test_ptx_fallback),
        cmocka_unit_test(test_bad_arch_fail),
        cmocka_unit_test(test_spill_report),
        cmocka_unit_test(test_parse_log),
        cmocka_unit_test(test_syntax_error_fail),
        cmocka_unit_test(test_long_log_truncated_fail),
        cmocka_unit_test(test_lineinfo),
        cmocka_unit_test(test_concurrent_bounded),
        cmocka_unit_test(test_split_kernels),
        cmocka_unit_test(test_nvrtc_missing_fail),
        cmocka_unit_test(test_old_nvrtc_options),
    };
    return cmocka_run_group_tests(tests, build_fake_nvrtc, remove_fake_nvrtc);
}
