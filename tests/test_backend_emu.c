/* Emulator backend: kernels written in the device dialect, compiled with the host compiler and run as
 * fibers. Expected values come from independent host computations (exact integer sums, double references,
 * CUDA's documented shuffle rules), never from the emulator itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "emu_test_kernels.h"
#include "emu_fibers.h"
#include "kernel_abi.h"

/* The kernel side of nj_kargs (templates/prelude.cuh declares the same struct for generated kernels). */
#define KARGS                                                                                             \
    "struct nj_kargs { const void *x, *res, *gamma, *beta, *dy; void *y, *res_out, *dx, *dgamma, *dbeta; " \
    "float *mean, *rstd; void *workspace; long long rows; long long bstride[8]; float eps; int reserved; long long lib[16]; };\n"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* ---------------------------------------------------------------- helpers */

static nj_backend *mk(uint32_t flags, uint64_t seed)
{
    nj_backend_config cfg = {0, 0, flags, seed};
    nj_backend *b = NULL;
    assert_int_equal(nj_backend_emu_create(&cfg, &b), NJ_OK);
    assert_non_null(b);
    assert_int_equal(b->ops->kind, NJ_BACKEND_EMULATOR);
    return b;
}

typedef struct built {
    nj_backend *b;
    void *mod, *fn;
    double compile_ms;
} built;

/* Compiles src (KARGS prepended) and resolves kernel `name`. */
static built build(uint32_t flags, uint64_t seed, const char *src, const char *name)
{
    built k = {mk(flags, seed), NULL, NULL, 0};
    size_t n = strlen(KARGS) + strlen(src) + 1;
    char *full = malloc(n);
    assert_non_null(full);
    snprintf(full, n, "%s%s", KARGS, src);
    nj_compile_result r;
    nj_status st = k.b->ops->compile(k.b, full, name, 1, &r);
    if (st != NJ_OK) fprintf(stderr, "compile failed: %s\n", nj_last_error());
    assert_int_equal(st, NJ_OK);
    free(full);
    k.compile_ms = r.millis;
    assert_int_equal(k.b->ops->load(k.b, r.bin.data, r.bin.size, &k.mod), NJ_OK);
    free(r.bin.data);
    assert_int_equal(k.b->ops->function(k.b, k.mod, name, &k.fn), NJ_OK);
    return k;
}

/* Same binary, another backend configuration (flags/seed) for the launch. */
static built rebind(built *k, uint32_t flags, uint64_t seed)
{
    built o = *k;
    o.b = mk(flags, seed);
    return o;
}

static void drop(built *k, bool owns_module)
{
    if (owns_module) k->b->ops->unload(k->b, k->mod);
    k->b->ops->destroy(k->b);
}

static nj_status go(built *k, uint32_t gx, uint32_t gy, uint32_t gz, int32_t bx, int32_t by, int32_t bz,
                    uint32_t shmem, const nj_kargs *a)
{
    uint32_t grid[3] = {gx, gy, gz};
    int32_t block[3] = {bx, by, bz};
    return k->b->ops->launch(k->b, k->fn, grid, block, shmem, NULL, NJ_LAUNCH_PLAIN, a, sizeof *a);
}

/* 1-based line of the line holding `marker` in the kernel source as compiled (KARGS is line 1). */
static int line_of(const char *src, const char *marker)
{
    const char *p = strstr(src, marker);
    assert_non_null(p);
    int line = 2;
    for (const char *q = src; q < p; q++) line += *q == '\n';
    return line;
}

static float *poisoned(size_t n)
{
    float *p = malloc(n * sizeof *p + 1);
    assert_non_null(p);
    memset(p, 0xFF, n * sizeof *p);
    return p;
}

static bool is_poison(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u == 0xFFFFFFFFu;
}

/* ---------------------------------------------------------------- block reduction */

/* Number of wrong results of the reduction (-1: the launch failed). No cmocka asserts: worker threads
 * call it too. */
static int reduce_errors(built *k, const int32_t shape[3], int64_t n)
{
    const uint32_t grid = 3;
    float *x = malloc(sizeof(float) * (size_t)(n * grid));
    float *y = malloc(sizeof(float) * 2 * grid);
    if (!x || !y) return -1;
    memset(y, 0xFF, sizeof(float) * 2 * grid);
    int64_t want[3] = {0, 0, 0};
    for (int64_t i = 0; i < n * grid; i++) {
        int v = (int)((i * 7 + 3) % 13) - 6; /* small integers: float sums stay exact */
        x[i] = (float)v;
        want[i / n] += v;
    }
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.rows = n;
    int bad = go(k, grid, 1, 1, shape[0], shape[1], shape[2], 0, &a) == NJ_OK ? 0 : -1;
    int nt = shape[0] * shape[1] * shape[2];
    for (uint32_t b = 0; b < grid && bad >= 0; b++) bad += (y[b] != (float)want[b]) + (y[grid + b] != (float)nt);
    free(x);
    free(y);
    return bad;
}

static void check_reduce(built *k, const int32_t shape[3], int64_t n)
{
    int bad = reduce_errors(k, shape, n);
    if (bad) fail_msg("block (%d,%d,%d), n=%lld: %d wrong (%s)", shape[0], shape[1], shape[2], (long long)n, bad,
                      bad < 0 ? nj_last_error() : "");
}

static void test_block_reduce(void **state)
{
    static const int32_t shapes[][3] = {{32, 1, 1}, {64, 1, 1}, {96, 1, 1}, {1024, 1, 1},
                                        {16, 4, 1}, {32, 8, 1}, {8, 8, 4}, {32, 32, 1}};
    static const int64_t sizes[] = {1, 31, 1000, 4097, 100003};
    built k = build(0, 0, emu_reduce_src, "reduce");
    built sh = rebind(&k, NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, 7);
    for (size_t s = 0; s < NJ_ARRAY_LEN(shapes); s++) {
        for (size_t i = 0; i < NJ_ARRAY_LEN(sizes); i++) {
            check_reduce(&k, shapes[s], sizes[i]);
            check_reduce(&sh, shapes[s], sizes[i]);
        }
    }
    drop(&sh, false);
    drop(&k, true);
}

/* Launches from several host threads at once (each its own backend and module) stay correct. */
static void *reduce_worker(void *arg)
{
    built *k = arg;
    static const int32_t shape[3] = {64, 2, 1};
    intptr_t bad = 0;
    for (int i = 0; i < 20; i++) bad += reduce_errors(k, shape, 1000 + i) != 0;
    return (void *)bad;
}

static void test_concurrent_launches(void **state)
{
    built k[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) k[i] = build(i ? NJ_CTX_EMU_SHUFFLE : 0, (uint64_t)i, emu_reduce_src, "reduce");
    for (int i = 0; i < 3; i++) assert_int_equal(pthread_create(&th[i], NULL, reduce_worker, &k[i]), 0);
    for (int i = 0; i < 3; i++) {
        void *bad = NULL;
        assert_int_equal(pthread_join(th[i], &bad), 0);
        assert_null(bad);
    }
    for (int i = 0; i < 3; i++) drop(&k[i], true);
}

/* ---------------------------------------------------------------- grid-stride loops, indices */

static const char *grid_src =
    "NJ_KERNEL(affine, 256) {\n"
    "    const long long n = A.rows;\n"
    "    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "    const unsigned nb = gridDim.x * gridDim.y * gridDim.z;\n"
    "    const float *x = (const float *)A.x;\n"
    "    float *y = (float *)A.y;\n"
    "    for (long long i = (long long)bid * blockDim.x + threadIdx.x; i < n; i += (long long)nb * blockDim.x)\n"
    "        y[i] = fmaf(2.0f, x[i], 1.0f);\n"
    "    if (threadIdx.x == 0) {\n"
    "        int *ids = (int *)A.workspace;\n"
    "        ids[3 * bid] = blockIdx.x; ids[3 * bid + 1] = blockIdx.y; ids[3 * bid + 2] = blockIdx.z;\n"
    "    }\n"
    "}\n";

static void test_grid_stride(void **state)
{
    built k = build(0, 0, grid_src, "affine");
    const int64_t n = 100001;
    float *x = malloc(sizeof(float) * n), *y = poisoned(n);
    int ids[3 * 30];
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % 1000) * 0.5f;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.workspace = ids;
    a.rows = n;
    memset(ids, 0xFF, sizeof ids);
    assert_int_equal(go(&k, 5, 3, 2, 128, 1, 1, 0, &a), NJ_OK);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 2.0f * x[i] + 1.0f);
    for (int z = 0, b = 0; z < 2; z++)
        for (int yy = 0; yy < 3; yy++)
            for (int xx = 0; xx < 5; xx++, b++) {
                assert_int_equal(ids[3 * b], xx);
                assert_int_equal(ids[3 * b + 1], yy);
                assert_int_equal(ids[3 * b + 2], z);
            }
    /* many blocks of one warp each */
    memset(y, 0xFF, sizeof(float) * n);
    int big_ids[3 * 3200];
    a.workspace = big_ids;
    assert_int_equal(go(&k, 3125, 1, 1, 32, 1, 1, 0, &a), NJ_OK);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 2.0f * x[i] + 1.0f);
    free(x);
    free(y);
    drop(&k, true);
}

/* ---------------------------------------------------------------- shared memory */

static void test_dynamic_shared(void **state)
{
    built k = build(0, 0, emu_shared_src, "rev");
    const int n = 192, grid = 4;
    float *x = malloc(sizeof(float) * n * grid), *y = poisoned(n * grid);
    assert_non_null(x);
    for (int i = 0; i < n * grid; i++) x[i] = (float)(i * 3 % 101);
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    assert_int_equal(go(&k, grid, 1, 1, n, 1, 1, 2 * n * sizeof(float), &a), NJ_OK);
    for (int b = 0; b < grid; b++)
        for (int t = 0; t < n; t++) assert_true(y[b * n + t] == 3.0f * x[b * n + n - 1 - t] + 42.0f);
    /* dynamic shared memory over the architecture's limit */
    assert_int_equal(go(&k, 1, 1, 1, n, 1, 1, 10u << 20, &a), NJ_ERR_EMULATOR);
    free(x);
    free(y);
    drop(&k, true);
}

static void test_shared_poison(void **state)
{
    built k = build(NJ_CTX_EMU_POISON, 0, emu_shared_src, "peek");
    built plain = rebind(&k, 0, 0);
    unsigned out[2 * 256];
    nj_kargs a = {0};
    a.y = out;
    memset(out, 0, sizeof out);
    assert_int_equal(go(&k, 2, 1, 1, 256, 1, 1, 0, &a), NJ_OK);
    for (int i = 0; i < 512; i++) assert_int_equal(out[i], 0xFFFFFFFFu);
    /* without poisoning shared memory still never reads as zero */
    memset(out, 0, sizeof out);
    assert_int_equal(go(&plain, 2, 1, 1, 256, 1, 1, 0, &a), NJ_OK);
    for (int i = 0; i < 512; i++) assert_int_not_equal(out[i], 0u);
    drop(&plain, false);
    drop(&k, true);
}

static void test_static_shared_limit_fail(void **state)
{
    built k = build(0, 0, emu_shared_src, "too_big");
    nj_kargs a = {0};
    assert_int_equal(go(&k, 1, 1, 1, 64, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    assert_non_null(strstr(nj_last_error(), "48 KiB"));
    /* the emulator stays usable after an aborted launch */
    drop(&k, true);
    test_dynamic_shared(state);
}

/* ---------------------------------------------------------------- atomics */

static void test_atomics(void **state)
{
    built k = build(NJ_CTX_EMU_SHUFFLE, 3, emu_atomic_src, "atom");
    int c[10];
    memset(c, 0, sizeof c);
    float zero = 0.0f;
    memcpy(&c[1], &zero, 4);
    unsigned hits[6];
    nj_kargs a = {0};
    a.workspace = c;
    a.y = hits;
    assert_int_equal(go(&k, 6, 1, 1, 160, 1, 1, 0, &a), NJ_OK);
    const int total = 6 * 160;
    float f;
    memcpy(&f, &c[1], 4);
    unsigned long long u;
    memcpy(&u, &c[6], 8);
    assert_int_equal(c[0], total);
    assert_true(f == 0.5f * total);
    assert_int_equal(c[2], total - 1);
    assert_int_equal(c[3], -(total - 1));
    assert_int_equal(c[4], 2 * total);
    assert_int_equal(u, 3ull * total);
    assert_int_equal(c[8], 1234);
    for (int b = 0; b < 6; b++) assert_int_equal(hits[b], 160);
    drop(&k, true);
}

/* ---------------------------------------------------------------- warp operations */

static void test_warp_ops(void **state)
{
    built k = build(NJ_CTX_EMU_SHUFFLE, 11, emu_warp_src, "warps");
    enum { N = 128 };
    int x[N], y[8 * N];
    for (int i = 0; i < N; i++) x[i] = (i * 37 + 5) % 64;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    assert_int_equal(go(&k, 1, 1, 1, N, 1, 1, 0, &a), NJ_OK);
    for (int t = 0; t < N; t++) {
        int base = t & ~31, lane = t & 31;
        unsigned ballot = 0;
        int any = 0, all = 1;
        for (int j = 0; j < 32; j++) {
            ballot |= (unsigned)(x[base + j] % 3 == 0) << j;
            any |= x[base + j] == 7;
            all &= x[base + j] >= 0;
        }
        assert_int_equal(y[8 * t + 0], x[base + 3]);
        assert_int_equal(y[8 * t + 1], lane + 5 < 32 ? x[t + 5] : x[t]);
        assert_int_equal(y[8 * t + 2], lane >= 2 ? x[t - 2] : x[t]);
        int xs = lane ^ 9; /* width 16: a partner in a later 16-lane group returns the own value */
        assert_int_equal(y[8 * t + 3], xs < (lane & ~15) + 16 ? x[base + xs] : x[t]);
        assert_int_equal((unsigned)y[8 * t + 4], ballot);
        assert_int_equal(y[8 * t + 5], any + 2 * all);
        assert_int_equal(y[8 * t + 6], x[base + (lane & ~7) + (((lane + 1) & 31) & 7)]);
        assert_int_equal(y[8 * t + 7], x[base + (lane ^ 31)]);
    }
    drop(&k, true);
}

/* ---------------------------------------------------------------- the rest of the dialect */

static const char *dialect_src =
    "static_assert(alignof(float2) == 8 && alignof(float4) == 16 && alignof(int2) == 8 && alignof(int4) == 16 &&\n"
    "              alignof(uint2) == 8 && alignof(uint4) == 16 && alignof(ushort2) == 4 &&\n"
    "              alignof(ushort4) == 8 && sizeof(float4) == 16 && sizeof(ushort4) == 8, \"CUDA layout\");\n"
    "NJ_KERNEL(dialect, 64) {\n"
    "    const float x = ((const float *)A.x)[threadIdx.x];\n"
    "    float *y = (float *)A.y + 16 * threadIdx.x;\n"
    "    y[0] = sqrtf(x); y[1] = rsqrtf(x); y[2] = expf(-x); y[3] = logf(x); y[4] = tanhf(x - 1.0f);\n"
    "    y[5] = erff(x - 1.0f); y[6] = fabsf(1.0f - x); y[7] = fmaxf(x, 1.0f); y[8] = fminf(x, 1.0f);\n"
    "    y[9] = fmaf(x, x, 0.5f); y[10] = floorf(x * 3.0f); y[11] = __expf(x) * __fdividef(1.0f, x);\n"
    "    y[12] = __uint_as_float(__float_as_uint(x) + 1u) + __int_as_float(__float_as_int(x));\n"
    "    float4 v = make_float4(x, 2.0f * x, 3.0f, 4.0f); ushort2 h = make_ushort2(7, 9);\n"
    "    int4 i4 = make_int4(1, 2, 3, (int)threadIdx.x); uint2 u2 = make_uint2(5u, 6u);\n"
    "    y[13] = v.x + v.y + v.z + v.w + (float)(h.x * h.y) + (float)(i4.w + (int)u2.y);\n"
    "    y[14] = (float)(isfinite(x) + 2 * isnan(x / 0.0f - x / 0.0f) + 4 * isinf(1.0f / (x - x)));\n"
    "    y[15] = (float)(min(3, (int)threadIdx.x) + max(2u, threadIdx.x));\n"
    "}\n";

static void test_dialect_math(void **state)
{
    built k = build(0, 0, dialect_src, "dialect");
    enum { N = 64 };
    float x[N], y[16 * N];
    for (int t = 0; t < N; t++) x[t] = 0.05f + 0.07f * (float)t;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    assert_int_equal(go(&k, 1, 1, 1, N, 1, 1, 0, &a), NJ_OK);
    for (int t = 0; t < N; t++) {
        const float v = x[t], *r = y + 16 * t;
        uint32_t u;
        memcpy(&u, &v, 4);
        u++;
        float next;
        memcpy(&next, &u, 4);
        const double want[16] = {sqrt(v), 1.0 / sqrt(v), exp(-v), log(v), tanh(v - 1.0), erf(v - 1.0),
                                 fabs(1.0 - v), v > 1 ? v : 1, v < 1 ? v : 1, (double)v * v + 0.5,
                                 floor((double)(v * 3.0f)), exp(v) / v, (double)next + v,
                                 3.0 * v + 7 + 63 + t + 6, 7, (t < 3 ? t : 3) + (t > 2 ? t : 2)};
        for (int j = 0; j < 16; j++)
            if (fabs(r[j] - want[j]) > 2e-6 * (1.0 + fabs(want[j])))
                fail_msg("thread %d, result %d: %.9g, expected %.9g", t, j, r[j], want[j]);
    }
    drop(&k, true);
}

/* ---------------------------------------------------------------- planted bugs */

/* Thread t reads what thread t-1 wrote without a barrier: invisible in thread order, where t-1 has
 * finished before t starts, and caught when the order is shuffled. */
static const char *race_src =
    "NJ_KERNEL(race, 1024) {\n"
    "    NJ_SHARED(float, s, 1024);\n"
    "    const unsigned t = threadIdx.x;\n"
    "    const float *x = (const float *)A.x;\n"
    "    s[t] = x[t] * 2.0f;\n"
    "    if (A.reserved) __syncthreads();\n"
    "    ((float *)A.y)[t] = t ? s[t - 1] : s[0];\n"
    "}\n";

static bool race_ok(built *k, int sync)
{
    enum { N = 256 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)i;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.reserved = sync;
    assert_int_equal(go(k, 1, 1, 1, N, 1, 1, 0, &a), NJ_OK);
    for (int t = 0; t < N; t++)
        if (y[t] != 2.0f * x[t ? t - 1 : 0]) return false;
    return true;
}

static void test_missing_sync_fail(void **state)
{
    built k = build(NJ_CTX_EMU_POISON, 0, race_src, "race");
    assert_true(race_ok(&k, 0)); /* thread order hides the race */
    int caught = 0, first = 0;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        built s = rebind(&k, NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, seed);
        if (!race_ok(&s, 0)) {
            caught++;
            if (!first) first = (int)seed;
        }
        assert_true(race_ok(&s, 1)); /* with the barrier every order is right */
        drop(&s, false);
    }
    print_message("missing __syncthreads caught by %d of 4 seeds (first: seed %d)\n", caught, first);
    assert_true(caught > 0);
    drop(&k, true);
}

static const char *diverge_src =
    "NJ_KERNEL(diverge, 1024) {\n"
    "    float *y = (float *)A.y;\n"
    "    if (threadIdx.x < 32) {\n"
    "        __syncthreads(); /*B1*/\n"
    "    }\n"
    "    y[threadIdx.x] = 1.0f;\n"
    "    if (A.reserved) return;\n"
    "    __syncthreads(); /*B2*/\n"
    "}\n";

static void test_divergent_barrier_fail(void **state)
{
    built k = build(0, 0, diverge_src, "diverge");
    float y[128];
    nj_kargs a = {0};
    a.y = y;
    char b1[64], b2[64];
    snprintf(b1, sizeof b1, "__syncthreads line %d", line_of(diverge_src, "/*B1*/"));
    snprintf(b2, sizeof b2, "__syncthreads line %d", line_of(diverge_src, "/*B2*/"));
    assert_int_equal(go(&k, 2, 1, 1, 128, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    const char *msg = nj_last_error();
    print_message("%s\n", msg);
    assert_non_null(strstr(msg, "barrier divergence"));
    assert_non_null(strstr(msg, "diverge"));
    assert_non_null(strstr(msg, b1));
    assert_non_null(strstr(msg, b2));
    assert_non_null(strstr(msg, "block (0,0,0)"));
    /* the other threads exit instead of reaching a barrier */
    a.reserved = 1;
    assert_int_equal(go(&k, 2, 1, 1, 128, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    msg = nj_last_error();
    assert_non_null(strstr(msg, b1));
    assert_non_null(strstr(msg, "exited"));
    drop(&k, true);
}

static const char *unwritten_src =
    "NJ_KERNEL(copy, 256) {\n"
    "    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < A.rows && i != A.reserved) ((float *)A.y)[i] = ((const float *)A.x)[i];\n"
    "}\n";

/* Returns the number of output elements still holding the poison pattern. */
static int unwritten(built *k, int skip, int *first)
{
    enum { N = 1000 };
    float x[N], *y = poisoned(N);
    for (int i = 0; i < N; i++) x[i] = (float)i;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.rows = N;
    a.reserved = skip;
    assert_int_equal(go(k, (N + 255) / 256, 1, 1, 256, 1, 1, 0, &a), NJ_OK);
    int bad = 0;
    *first = -1;
    for (int i = 0; i < N; i++) {
        if (is_poison(y[i])) {
            if (*first < 0) *first = i;
            bad++;
        } else {
            assert_true(y[i] == x[i]);
        }
    }
    free(y);
    return bad;
}

static void test_unwritten_output_fail(void **state)
{
    built k = build(0, 0, unwritten_src, "copy");
    int first;
    assert_int_equal(unwritten(&k, -1, &first), 0);
    assert_int_equal(unwritten(&k, 777, &first), 1);
    assert_int_equal(first, 777);
    drop(&k, true);
}

static const char *half_warp_src =
    "NJ_KERNEL(half, 1024) {\n"
    "    float v = (float)threadIdx.x;\n"
    "    if ((threadIdx.x & 31) < 16) {\n"
    "        v = __shfl_xor_sync(0xffffffffu, v, 1); /*S1*/\n"
    "    } else if (A.reserved) {\n"
    "        __syncthreads(); /*B1*/\n"
    "    }\n"
    "    ((float *)A.y)[threadIdx.x] = v;\n"
    "}\n";

static void test_warp_deadlock_fail(void **state)
{
    built k = build(0, 0, half_warp_src, "half");
    float y[64];
    nj_kargs a = {0};
    a.y = y;
    char s1[64], b1[64];
    snprintf(s1, sizeof s1, "__shfl_xor_sync line %d", line_of(half_warp_src, "/*S1*/"));
    snprintf(b1, sizeof b1, "__syncthreads line %d", line_of(half_warp_src, "/*B1*/"));
    /* the other half of the warp exits */
    assert_int_equal(go(&k, 1, 1, 1, 64, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    const char *msg = nj_last_error();
    print_message("%s\n", msg);
    assert_non_null(strstr(msg, "deadlock"));
    assert_non_null(strstr(msg, s1));
    assert_non_null(strstr(msg, "exited"));
    /* the other half waits at a barrier: a real deadlock on a GPU */
    a.reserved = 1;
    assert_int_equal(go(&k, 1, 1, 1, 64, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    msg = nj_last_error();
    print_message("%s\n", msg);
    assert_non_null(strstr(msg, s1));
    assert_non_null(strstr(msg, b1));
    drop(&k, true);
}

/* The prelude's vector loads and stores check their address with NJ_CHECK_ALIGN (a GPU faults on a
 * misaligned vector access; x86 would not), so a wrongly routed launch fails here as it would there. */
static const char *vec_src =
    "NJ_KERNEL(vcopy, 256) {\n"
    "    const char *p = (const char *)A.x + 16 * threadIdx.x;\n"
    "    NJ_CHECK_ALIGN(p, 16); /*V1*/\n"
    "    ((float *)A.y)[threadIdx.x] = *(const float *)p;\n"
    "}\n";

static void test_misaligned_vector_fail(void **state)
{
    built k = build(0, 0, vec_src, "vcopy");
    static float x[4 * 32 + 4] __attribute__((aligned(16)));
    float y[32];
    for (int i = 0; i < 4 * 32 + 4; i++) x[i] = (float)i;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    assert_int_equal(go(&k, 1, 1, 1, 32, 1, 1, 0, &a), NJ_OK);
    for (int i = 0; i < 32; i++) assert_true(y[i] == (float)(4 * i));
    a.x = x + 1;
    assert_int_equal(go(&k, 1, 1, 1, 32, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    const char *msg = nj_last_error();
    print_message("%s\n", msg);
    assert_non_null(strstr(msg, "misaligned 16-byte vector access"));
    assert_non_null(strstr(msg, "vcopy"));
    char l1[32];
    snprintf(l1, sizeof l1, "line %d", line_of(vec_src, "/*V1*/"));
    assert_non_null(strstr(msg, l1));
    drop(&k, true);
}

static const char *bad_mask_src =
    "NJ_KERNEL(mask, 1024) {\n"
    "    float v = __shfl_xor_sync(0x0000ffffu, (float)threadIdx.x, 1);\n"
    "    ((float *)A.y)[threadIdx.x] = v;\n"
    "}\n"
    "NJ_KERNEL(partial, 1024) {\n"
    "    float v = __shfl_down_sync(0xffffffffu, (float)threadIdx.x, 8);\n"
    "    ((float *)A.y)[threadIdx.x] = v;\n"
    "}\n";

static void test_partial_mask_fail(void **state)
{
    built k = build(0, 0, bad_mask_src, "mask");
    float y[64];
    nj_kargs a = {0};
    a.y = y;
    assert_int_equal(go(&k, 1, 1, 1, 32, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    assert_non_null(strstr(nj_last_error(), "mask"));
    drop(&k, true);
    /* a block of 48 threads: lanes 8..15 of the second warp read lanes that do not exist */
    k = build(0, 0, bad_mask_src, "partial");
    assert_int_equal(go(&k, 1, 1, 1, 32, 1, 1, 0, &a), NJ_OK);
    assert_int_equal(go(&k, 1, 1, 1, 48, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    assert_non_null(strstr(nj_last_error(), "does not exist"));
    drop(&k, true);
}

/* ---------------------------------------------------------------- sanitized kernels */

static const char *oob_src =
    "NJ_KERNEL(oob_global, 64) { ((float *)A.y)[threadIdx.x + 1] = 1.0f; }\n"
    "NJ_KERNEL(oob_shared, 64) {\n"
    "    NJ_SHARED(float, s, 64);\n"
    "    NJ_SHARED(float, t, 64);\n"
    "    s[threadIdx.x] = 1.0f; t[threadIdx.x] = 2.0f;\n"
    "    __syncthreads();\n"
    "    ((float *)A.y)[threadIdx.x] = s[threadIdx.x + 1];\n"
    "}\n";

/* Runs fn(arg) in a child process (a sanitizer report ends the process); returns the child's stderr
 * (caller frees) and whether it failed. */
static char *run_in_child(int (*fn)(const void *), const void *arg, bool *failed)
{
    char path[] = "/tmp/nj-emu-child-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        _exit(fn(arg));
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    *failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *text = calloc(1, 65536);
    assert_non_null(text);
    size_t n = fread(text, 1, 65535, fp);
    text[n] = '\0';
    fclose(fp);
    close(fd);
    unlink(path);
    return text;
}

static int run_oob(const void *name)
{
    built k = build(0, 0, oob_src, name);
    float *y = malloc(64 * sizeof(float));
    nj_kargs a = {0};
    a.y = y;
    return go(&k, 1, 1, 1, 64, 1, 1, 0, &a) == NJ_OK ? 0 : 3;
}

/* In a sanitized build kernels are compiled with AddressSanitizer: out-of-bounds global and shared
 * accesses stop the process (so the check runs in a child). */
static void test_sanitized_kernel_oob_fail(void **state)
{
    if (!SANITIZED) skip(); /* needs the ASan runtime in the process; covered by the NJ_SANITIZE build */
    bool failed = false;
    char *err = run_in_child(run_oob, "oob_global", &failed);
    assert_true(failed);
    assert_non_null(strstr(err, "heap-buffer-overflow"));
    free(err);
    err = run_in_child(run_oob, "oob_shared", &failed);
    assert_true(failed);
    assert_non_null(strstr(err, "use-after-poison"));
    free(err);
}

/* ---------------------------------------------------------------- clusters */

/* Cluster sums where blocks leave without waiting for rank 0 to read their shared memory; returns the
 * number of shuffle seeds (of 8) that expose it. */
static int run_cluster_race(const void *arg)
{
    built k = build(0, 0, emu_cluster_src, "csum");
    enum { G = 2, NT = 64 };
    float x[G * G * NT], y[G * G];
    int rank[G * G], caught = 0;
    for (int i = 0; i < G * G * NT; i++) x[i] = 1.0f;
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.workspace = rank;
    a.reserved = 3;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        built sh = rebind(&k, NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, seed);
        if (go(&sh, G, G, 1, NT, 1, 1, 0, &a) != NJ_OK || y[0] != (float)(G * G * NT)) caught++;
        drop(&sh, false);
    }
    drop(&k, true);
    return caught;
}

static void test_clusters(void **state)
{
    built k = build(0, 0, emu_cluster_src, "csum");
    built sh = rebind(&k, NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, 9);
    enum { GX = 4, GY = 4, NT = 64 };
    float x[GX * GY * NT], y[GX * GY];
    int rank[GX * GY];
    for (int i = 0; i < GX * GY * NT; i++) x[i] = (float)(i % 17);
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.workspace = rank;
    for (int pass = 0; pass < 2; pass++) {
        memset(y, 0xFF, sizeof y);
        assert_int_equal(go(pass ? &sh : &k, GX, GY, 1, NT, 1, 1, 0, &a), NJ_OK);
        for (int by = 0; by < GY; by++)
            for (int bx = 0; bx < GX; bx++) {
                int b = bx + GX * by;
                assert_int_equal(rank[b], bx % 2 + 2 * (by % 2));
                if (rank[b] != 0) continue;
                float want = 0; /* the cluster's four blocks: (bx,by) (bx+1,by) (bx,by+1) (bx+1,by+1) */
                for (int j = 0; j < 4; j++) {
                    int ob = (bx + j % 2) + GX * (by + j / 2);
                    for (int t = 0; t < NT; t++) want += x[ob * NT + t];
                }
                assert_true(y[b] == want);
            }
    }
    /* a grid that is not a multiple of the cluster */
    assert_int_equal(go(&k, 3, 2, 1, NT, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    /* one block leaves while the others wait at the cluster barrier */
    char c2[64];
    snprintf(c2, sizeof c2, "nj_cluster_sync line %d", line_of(emu_cluster_src, "/*C2*/"));
    a.reserved = 1;
    assert_int_equal(go(&k, GX, GY, 1, NT, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    print_message("%s\n", nj_last_error());
    assert_non_null(strstr(nj_last_error(), "cluster barrier divergence"));
    assert_non_null(strstr(nj_last_error(), c2));
    assert_non_null(strstr(nj_last_error(), "exited"));
    /* a rank outside the cluster */
    a.reserved = 2;
    assert_int_equal(go(&k, GX, GY, 1, NT, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    assert_non_null(strstr(nj_last_error(), "rank 4"));
    /* reading the shared memory of a block that has left the cluster */
    if (SANITIZED) {
        bool failed = false;
        char *err = run_in_child(run_cluster_race, NULL, &failed);
        assert_true(failed);
        assert_non_null(strstr(err, "use-after-poison"));
        free(err);
    } else {
        int caught = run_cluster_race(NULL);
        print_message("reads of departed cluster blocks caught by %d of 8 seeds\n", caught);
        assert_true(caught > 0);
    }
    drop(&sh, false);
    drop(&k, true);
}

/* ---------------------------------------------------------------- launch validation, loading */

static void test_launch_limits_fail(void **state)
{
    static const char *src = "NJ_KERNEL(small, 128) { ((int *)A.y)[threadIdx.x] = 1; }\n";
    built k = build(0, 0, src, "small");
    int y[1024];
    nj_kargs a = {0};
    a.y = y;
    assert_int_equal(go(&k, 1, 1, 1, 128, 1, 1, 0, &a), NJ_OK);
    assert_int_equal(go(&k, 1, 1, 1, 256, 1, 1, 0, &a), NJ_ERR_EMULATOR); /* launch bound */
    assert_non_null(strstr(nj_last_error(), "launch bound"));
    assert_int_equal(go(&k, 1, 1, 1, 1025, 1, 1, 0, &a), NJ_ERR_EMULATOR);
    assert_int_equal(go(&k, 1, 1, 1, 64, 32, 1, 0, &a), NJ_ERR_EMULATOR); /* 2048 threads */
    assert_int_equal(go(&k, 0, 1, 1, 32, 1, 1, 0, &a), NJ_ERR_BAD_ARGUMENT);
    uint32_t grid[3] = {1, 1, 1};
    int32_t block[3] = {32, 1, 1};
    assert_int_equal(k.b->ops->launch(k.b, k.fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a - 4), NJ_ERR_BAD_ARGUMENT);
    void *fn = NULL;
    assert_int_equal(k.b->ops->function(k.b, k.mod, "no_such_kernel", &fn), NJ_ERR_EMULATOR);
    drop(&k, true);
}

/* Each module is its own object even when kernels share a name, also after an unload frees its slot. */
static void test_modules_with_same_kernel_name(void **state)
{
    char src[3][128];
    built k[3];
    int y = 0;
    nj_kargs a = {0};
    a.y = &y;
    for (int i = 0; i < 3; i++) {
        snprintf(src[i], sizeof src[i], "NJ_KERNEL(same, 32) { if (threadIdx.x == 0) *(int *)A.y = %d; }\n",
                 100 + i);
        if (i < 2) k[i] = build(0, 0, src[i], "same");
    }
    for (int i = 0; i < 2; i++) {
        assert_int_equal(go(&k[i], 1, 1, 1, 32, 1, 1, 0, &a), NJ_OK);
        assert_int_equal(y, 100 + i);
    }
    drop(&k[0], true);
    k[2] = build(0, 0, src[2], "same");
    for (int i = 1; i < 3; i++) {
        assert_int_equal(go(&k[i], 1, 1, 1, 32, 1, 1, 0, &a), NJ_OK);
        assert_int_equal(y, 100 + i);
    }
    drop(&k[1], true);
    drop(&k[2], true);
}

static void test_bad_image_fail(void **state)
{
    nj_backend *b = mk(0, 0);
    char junk[256];
    memset(junk, 0x5A, sizeof junk);
    void *mod = NULL;
    assert_int_equal(b->ops->load(b, junk, sizeof junk, &mod), NJ_ERR_EMULATOR);
    memcpy(junk, "\177ELF", 4);
    assert_int_equal(b->ops->load(b, junk, sizeof junk, &mod), NJ_ERR_EMULATOR);
    assert_null(mod);
    b->ops->destroy(b);
}

static void test_compile_error_fail(void **state)
{
    nj_backend *b = mk(0, 0);
    const char *src = KARGS "NJ_KERNEL(broken, 256) {\n    int x = undeclared_thing + 1;\n}\n";
    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, src, "broken_kernel", 1, &r), NJ_ERR_HOST_COMPILER);
    const char *msg = nj_last_error();
    print_message("%.200s\n", msg);
    assert_non_null(strstr(msg, "undeclared_thing"));
    assert_non_null(strstr(msg, "broken_kernel.cu:3")); /* lines of the kernel source, not of emu.h */
    assert_null(r.bin.data);
    b->ops->destroy(b);
}

static void test_missing_compiler_fail(void **state)
{
    const char *old = getenv("CXX");
    char *saved = old ? strdup(old) : NULL;
    setenv("CXX", "/nonexistent/dir/c++", 1);
    nj_backend *b = mk(0, 0);
    if (saved) setenv("CXX", saved, 1);
    else unsetenv("CXX");
    free(saved);
    assert_string_equal(b->ops->compiler(b), "none");
    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, KARGS "NJ_KERNEL(k, 32) {}\n", "k", 1, &r), NJ_ERR_HOST_COMPILER);
    assert_non_null(strstr(nj_last_error(), "/nonexistent/dir/c++"));
    b->ops->destroy(b);
}

static void test_identity_and_memory(void **state)
{
    nj_backend *b = mk(0, 0);
    const char *target = b->ops->target(b), *comp = b->ops->compiler(b);
    print_message("target %s, compiler %s\n", target, comp);
    assert_string_equal(b->ops->name, "emulator");
    assert_true(strncmp(target, "emu-", 4) == 0);
    assert_non_null(strstr(target, comp));
    char abi[16];
    snprintf(abi, sizeof abi, "-v%d", NJ_EMU_ABI_VERSION);
    assert_non_null(strstr(target, abi));
    assert_string_not_equal(comp, "none");
    assert_true(b->props.max_threads_per_block == 1024 && b->props.max_shared_per_block >= 48 * 1024);
    void *p = NULL;
    char in[1000], out[1000];
    for (int i = 0; i < 1000; i++) in[i] = (char)(i * 7);
    assert_int_equal(b->ops->mem_alloc(b, sizeof in, &p), NJ_OK);
    assert_true(((uintptr_t)p & 255) == 0);
    assert_int_equal(b->ops->upload(b, p, in, sizeof in), NJ_OK);
    assert_int_equal(b->ops->download(b, out, p, sizeof out), NJ_OK);
    assert_memory_equal(in, out, sizeof in);
    assert_int_equal(b->ops->synchronize(b, NULL), NJ_OK);
    b->ops->mem_free(b, p);
    b->ops->destroy(b);
}

/* ---------------------------------------------------------------- a typical kernel, and measurements */

static void test_layernorm_and_compile_time(void **state)
{
    built k = build(NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, 5, emu_layernorm_src, "layernorm_fwd");
    double best = k.compile_ms;
    for (int i = 0; i < 2; i++) {
        built again = build(0, 0, emu_layernorm_src, "layernorm_fwd");
        if (again.compile_ms < best) best = again.compile_ms;
        drop(&again, true);
    }
    print_message("compile time of a typical kernel .so: %.1f ms (best of 3)\n", best);
    enum { R = 12, N = 1000 };
    float *x = malloc(sizeof(float) * R * N), *y = poisoned(R * N), g[N], bb[N], mean[R], rstd[R];
    assert_non_null(x);
    for (int i = 0; i < R * N; i++) x[i] = 100.0f + (float)sin(i * 0.37) * 3.0f;
    for (int i = 0; i < N; i++) {
        g[i] = 1.0f + 0.001f * (float)i;
        bb[i] = (float)(i % 5) * 0.1f;
    }
    nj_kargs a = {0};
    a.x = x;
    a.y = y;
    a.gamma = g;
    a.beta = bb;
    a.mean = mean;
    a.rstd = rstd;
    a.rows = R;
    a.eps = 1e-5f;
    uint64_t t0 = nj_now_ns();
    assert_int_equal(go(&k, R, 1, 1, 256, 1, 1, 0, &a), NJ_OK);
    print_message("layernorm %dx%d, 256 threads: %.2f ms emulated\n", R, N, (double)(nj_now_ns() - t0) / 1e6);
    for (int r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < N; i++) m += x[r * N + i];
        m /= N;
        for (int i = 0; i < N; i++) v += (x[r * N + i] - m) * (x[r * N + i] - m);
        double rs = 1.0 / sqrt(v / N + 1e-5);
        assert_true(fabs(mean[r] - m) < 1e-4 * fabs(m));
        assert_true(fabs(rstd[r] - rs) < 1e-4 * rs);
        for (int i = 0; i < N; i++) {
            double want = (x[r * N + i] - m) * rs * g[i] + bb[i];
            assert_true(fabs(y[r * N + i] - want) < 1e-3);
        }
    }
    free(x);
    free(y);
    drop(&k, true);
}

static const char *switch_src =
    "NJ_KERNEL(spin, 1024) {\n"
    "    int acc = 0;\n"
    "    for (int i = 0; i < A.rows; i++) {\n"
    "        acc += __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);\n"
    "        if ((i & 15) == 0) __syncthreads();\n"
    "    }\n"
    "    ((int *)A.y)[threadIdx.x] = acc;\n"
    "}\n";

static void test_switch_rate(void **state)
{
    built k = build(0, 0, switch_src, "spin");
    int y[1024];
    nj_kargs a = {0};
    a.y = y;
    a.rows = 200;
    uint64_t s0 = nj_emu_switch_count(), t0 = nj_now_ns();
    assert_int_equal(go(&k, 4, 1, 1, 1024, 1, 1, 0, &a), NJ_OK);
    uint64_t dt = nj_now_ns() - t0, sw = nj_emu_switch_count() - s0;
    double rate = (double)sw / ((double)dt / 1e9);
    print_message("fiber switches: %llu in %.1f ms = %.1f M switches/s\n", (unsigned long long)sw,
                  (double)dt / 1e6, rate / 1e6);
    for (int t = 0; t < 1024; t++) assert_int_equal(y[t], 200 * (t ^ 1));
    /* every lane but the last of each warp blocks at each shuffle: two switches each */
    assert_true(sw >= 4ull * 200 * 1024);
    if (!SANITIZED) assert_true(rate > 1e6);
    drop(&k, true);
}

int main(void)
{
    alarm(600); /* a hang is a failure, not a stuck CI job */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_and_memory),
        cmocka_unit_test(test_block_reduce),
        cmocka_unit_test(test_concurrent_launches),
        cmocka_unit_test(test_grid_stride),
        cmocka_unit_test(test_dynamic_shared),
        cmocka_unit_test(test_shared_poison),
        cmocka_unit_test(test_static_shared_limit_fail),
        cmocka_unit_test(test_atomics),
        cmocka_unit_test(test_warp_ops),
        cmocka_unit_test(test_dialect_math),
        cmocka_unit_test(test_missing_sync_fail),
        cmocka_unit_test(test_divergent_barrier_fail),
        cmocka_unit_test(test_unwritten_output_fail),
        cmocka_unit_test(test_warp_deadlock_fail),
        cmocka_unit_test(test_partial_mask_fail),
        cmocka_unit_test(test_misaligned_vector_fail),
        cmocka_unit_test(test_clusters),
        cmocka_unit_test(test_sanitized_kernel_oob_fail),
        cmocka_unit_test(test_launch_limits_fail),
        cmocka_unit_test(test_modules_with_same_kernel_name),
        cmocka_unit_test(test_bad_image_fail),
        cmocka_unit_test(test_compile_error_fail),
        cmocka_unit_test(test_missing_compiler_fail),
        cmocka_unit_test(test_layernorm_and_compile_time),
        cmocka_unit_test(test_switch_rate),
    };
    if (getenv("NJ_TEST_FILTER")) cmocka_set_test_filter(getenv("NJ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
