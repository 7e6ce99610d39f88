/* The CUDA backend on a real GPU: compile, load, launch kernels that take one nj_kargs by value, check the
 * results on the host. Every test skips (with a message saying why) when there is no driver or device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kernel_abi.h"

/* The device side declares nj_kargs field for field as src/kernel_abi.h does (LP64 on both sides). */
static const char k_src[] =
    "struct nj_kargs {\n"
    "    const void *x, *res, *gamma, *beta, *dy;\n"
    "    void *y, *res_out, *dx, *dgamma, *dbeta;\n"
    "    float *mean, *rstd;\n"
    "    void *workspace;\n"
    "    long long rows;\n"
    "    long long bstride[8];\n"
    "    float eps;\n"
    "    int reserved;\n"
    "};\n"
    "extern \"C\" __global__ void k_affine(const nj_kargs A)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < A.rows) ((float *)A.y)[i] = ((const float *)A.x)[i] * (float)A.bstride[7] + A.eps;\n"
    "    if (i == 0) A.mean[0] = (float)A.reserved;\n"
    "}\n"
    "extern \"C\" __global__ void k_dynshared(const nj_kargs A)\n"
    "{\n"
    "    extern __shared__ float s[];\n"
    "    int n = (int)A.rows;\n"
    "    for (int j = threadIdx.x; j < n; j += blockDim.x) s[j] = (float)j;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) {\n"
    "        float ones = 0.f;\n"
    "        for (int j = 0; j < n; j++) ones += s[j] == (float)j ? 1.f : 0.f;\n"
    "        ((float *)A.y)[2 * blockIdx.x] = ones;\n"
    "        ((float *)A.y)[2 * blockIdx.x + 1] = s[n - 1];\n"
    "    }\n"
    "}\n";

typedef struct gpu_state {
    nj_backend *b;
    void *module;
    char why[512]; /* why there is no backend */
} gpu_state;

static int group_setup(void **state)
{
    gpu_state *g = calloc(1, sizeof *g);
    if (!g) return -1;
    nj_backend_config cfg = {0};
    nj_status s = nj_backend_cuda_create(&cfg, &g->b);
    if (s != NJ_OK) {
        snprintf(g->why, sizeof g->why, "%s: %s", nj_status_name(s), nj_last_error());
        /* Only a missing driver or device may skip; any other failure with a driver present is a failure. */
        if (s != NJ_ERR_NO_DRIVER && s != NJ_ERR_NO_DEVICE) {
            fprintf(stderr, "CUDA backend failed with a driver present: %s\n", g->why);
            free(g);
            return -1;
        }
    }
    *state = g;
    return 0;
}

static int group_teardown(void **state)
{
    gpu_state *g = *state;
    if (g->b) {
        if (g->module) g->b->ops->unload(g->b, g->module);
        g->b->ops->destroy(g->b);
    }
    free(g);
    return 0;
}

static nj_backend *need_gpu(void **state)
{
    gpu_state *g = *state;
    if (!g->b) {
        static int said;
        if (!said++) fprintf(stderr, "SKIP: no usable CUDA driver/device (%s)\n", g->why);
        skip();
    }
    return g->b;
}

static void *need_module(void **state)
{
    gpu_state *g = *state;
    nj_backend *b = need_gpu(state);
    if (g->module) return g->module;
    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, k_src, "gpu_backend.cu", 1, &r), NJ_OK);
    nj_status s = b->ops->load(b, r.bin.data, r.bin.size, &g->module);
    if (s != NJ_OK) fprintf(stderr, "load: %s\n", nj_last_error());
    assert_int_equal(s, NJ_OK);
    nj_binary_free(&r.bin);
    return g->module;
}

static void test_device_props(void **state)
{
    nj_backend *b = need_gpu(state);
    assert_string_equal(b->ops->name, "cuda");
    assert_true(b->props.arch >= 50);
    assert_true(b->props.sm_count > 0);
    assert_true(b->props.max_threads_per_block >= 1024);
    assert_true(b->props.max_shared_per_block >= 48 * 1024);
    assert_true(b->props.regs_per_sm >= 32768);
    char want[16];
    snprintf(want, sizeof want, "sm_%d", (int)b->props.arch);
    assert_string_equal(b->ops->target(b), want);
    const char *v = NULL;
    assert_int_equal(nj_nvrtc_version_string(&v), NJ_OK);
    assert_string_equal(b->ops->compiler(b), v);
}

static void test_memory_roundtrip(void **state)
{
    nj_backend *b = need_gpu(state);
    enum { N = 4096 };
    uint32_t in[N], out[N];
    for (uint32_t i = 0; i < N; i++) in[i] = i * 2654435761u;
    void *d = NULL;
    assert_int_equal(b->ops->mem_alloc(b, sizeof in, &d), NJ_OK);
    assert_non_null(d);
    assert_int_equal(b->ops->upload(b, d, in, sizeof in), NJ_OK);
    memset(out, 0, sizeof out);
    assert_int_equal(b->ops->download(b, out, d, sizeof out), NJ_OK);
    assert_memory_equal(in, out, sizeof in);
    b->ops->mem_free(b, d);
    void *z = (void *)1;
    assert_int_equal(b->ops->mem_alloc(b, 0, &z), NJ_OK);
    assert_null(z);
}

static void test_launch_kargs(void **state)
{
    nj_backend *b = need_gpu(state);
    void *module = need_module(state);
    void *fn = NULL;
    assert_int_equal(b->ops->function(b, module, "k_affine", &fn), NJ_OK);
    enum { N = 1000 };
    float x[N], y[N], mean = 0.f;
    for (int i = 0; i < N; i++) x[i] = (float)i - 300.f;
    void *dx = NULL, *dy = NULL, *dmean = NULL;
    assert_int_equal(b->ops->mem_alloc(b, sizeof x, &dx), NJ_OK);
    assert_int_equal(b->ops->mem_alloc(b, sizeof y, &dy), NJ_OK);
    assert_int_equal(b->ops->mem_alloc(b, sizeof mean, &dmean), NJ_OK);
    assert_int_equal(b->ops->upload(b, dx, x, sizeof x), NJ_OK);
    nj_kargs a;
    memset(&a, 0, sizeof a);
    a.x = dx;
    a.y = dy;
    a.mean = dmean;
    a.rows = N;
    a.bstride[7] = 3; /* the last stride and the fields after it prove the whole struct arrived */
    a.eps = 0.5f;
    a.reserved = 42;
    uint32_t grid[3] = {(N + 127) / 128, 1, 1};
    int32_t block[3] = {128, 1, 1};
    assert_int_equal(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a), NJ_OK);
    assert_int_equal(b->ops->synchronize(b, NULL), NJ_OK);
    assert_int_equal(b->ops->download(b, y, dy, sizeof y), NJ_OK);
    assert_int_equal(b->ops->download(b, &mean, dmean, sizeof mean), NJ_OK);
    for (int i = 0; i < N; i++) assert_true(y[i] == x[i] * 3.f + 0.5f);
    assert_true(mean == 42.f);
    b->ops->mem_free(b, dx);
    b->ops->mem_free(b, dy);
    b->ops->mem_free(b, dmean);
}

/* Dynamic shared memory above 48 KiB needs the opt-in attribute the backend sets. */
static void test_launch_big_shared(void **state)
{
    nj_backend *b = need_gpu(state);
    void *module = need_module(state);
    uint32_t shmem = 96u * 1024u;
    if ((int64_t)shmem > b->props.max_shared_per_block) shmem = (uint32_t)b->props.max_shared_per_block;
    assert_true(shmem > 48u * 1024u);
    void *fn = NULL;
    assert_int_equal(b->ops->function(b, module, "k_dynshared", &fn), NJ_OK);
    enum { BLOCKS = 4 };
    float y[2 * BLOCKS];
    void *dy = NULL;
    assert_int_equal(b->ops->mem_alloc(b, sizeof y, &dy), NJ_OK);
    nj_kargs a;
    memset(&a, 0, sizeof a);
    a.y = dy;
    a.rows = shmem / 4;
    uint32_t grid[3] = {BLOCKS, 1, 1};
    int32_t block[3] = {256, 1, 1};
    nj_status s = b->ops->launch(b, fn, grid, block, shmem, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a);
    if (s != NJ_OK) fprintf(stderr, "launch: %s\n", nj_last_error());
    assert_int_equal(s, NJ_OK);
    assert_int_equal(b->ops->synchronize(b, NULL), NJ_OK);
    assert_int_equal(b->ops->download(b, y, dy, sizeof y), NJ_OK);
    for (int i = 0; i < BLOCKS; i++) {
        assert_true(y[2 * i] == (float)(shmem / 4));
        assert_true(y[2 * i + 1] == (float)(shmem / 4 - 1));
    }
    b->ops->mem_free(b, dy);
}

static void test_bad_launch_fail(void **state)
{
    nj_backend *b = need_gpu(state);
    void *module = need_module(state);
    void *fn = NULL;
    assert_int_equal(b->ops->function(b, module, "no_such_kernel", &fn), NJ_ERR_CUDA);
    assert_non_null(strstr(nj_last_error(), "no_such_kernel"));
    assert_non_null(strstr(nj_last_error(), "cuModuleGetFunction"));
    assert_int_equal(b->ops->function(b, module, "k_affine", &fn), NJ_OK);
    nj_kargs a;
    memset(&a, 0, sizeof a);
    uint32_t grid[3] = {1, 1, 1};
    int32_t block[3] = {4096, 1, 1}; /* above every device's limit */
    assert_int_equal(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a), NJ_ERR_CUDA);
    assert_non_null(strstr(nj_last_error(), "cuLaunchKernel"));
    assert_non_null(strstr(nj_last_error(), "CUDA_ERROR_"));
    /* The context survives a refused launch. */
    assert_int_equal(b->ops->synchronize(b, NULL), NJ_OK);
    assert_int_equal(b->ops->load(b, "not a module", 13, &fn), NJ_ERR_CUDA);
    assert_non_null(strstr(nj_last_error(), "cuModuleLoadData"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_props),
        cmocka_unit_test(test_memory_roundtrip),
        cmocka_unit_test(test_launch_kargs),
        cmocka_unit_test(test_launch_big_shared),
        cmocka_unit_test(test_bad_launch_fail),
    };
    /* Without a driver the whole suite is skipped, and says so to ctest (exit 77 = SKIP_RETURN_CODE),
     * so a machine without a GPU never reports these checks as passed. */
    nj_backend_config cfg = {0};
    nj_backend *probe = NULL;
    nj_status s = nj_backend_cuda_create(&cfg, &probe);
    if (s == NJ_ERR_NO_DRIVER || s == NJ_ERR_NO_DEVICE) {
        fprintf(stderr, "SKIP: no usable CUDA driver/device (%s: %s)\n", nj_status_name(s), nj_last_error());
        return 77;
    }
    if (probe) probe->ops->destroy(probe);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
