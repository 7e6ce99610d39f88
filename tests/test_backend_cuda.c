/* The CUDA backend without a GPU (no driver, the toolkit stub, a library that is not libcuda) and the
 * compile-only backend. Cases that load libcuda from another path run in a fresh child process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "compile_child.h"

static const char k_src[] =
    "extern \"C\" __global__ void k_add(float *y, float v) { y[threadIdx.x] += v; }\n";

static const char *stub_path(void)
{
    static char path[1024];
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/lib64/stubs/libcuda.so", home && home[0] ? home : "/usr/local/cuda");
    return path;
}

/* Child modes return 0 when the backend refused as expected; the exit code says which check failed. */
static int child_expect(nj_status want, const char *needle)
{
    nj_backend_config cfg = {0};
    for (int round = 0; round < 2; round++) { /* the second call reports the same, from the cached load */
        nj_backend *b = (nj_backend *)1;
        nj_status s = nj_backend_cuda_create(&cfg, &b);
        if (s != want) return 10 + round;
        if (b != NULL) return 20 + round;
        if (!strstr(nj_last_error(), needle)) return 30 + round;
    }
    return 0;
}

static void test_no_libcuda_fail(void **state)
{
    assert_int_equal(nj_test_run_child("no-driver", "NORMJIT_LIBCUDA", "/nonexistent/libcuda.so.1"), 0);
}

static void test_stub_is_no_driver_fail(void **state)
{
    const char *stub = stub_path();
    assert_int_equal(access(stub, R_OK), 0); /* the toolkit this builds against ships the stub */
    assert_int_equal(nj_test_run_child("stub", "NORMJIT_LIBCUDA", stub), 0);
}

static void test_not_libcuda_fail(void **state)
{
    assert_int_equal(nj_test_run_child("not-libcuda", "NORMJIT_LIBCUDA", "libc.so.6"), 0);
}

/* Whatever this machine has, the default load answers with a status and never crashes. */
static void test_default_driver_answers(void **state)
{
    nj_backend_config cfg = {0};
    nj_backend *b = NULL;
    nj_status s = nj_backend_cuda_create(&cfg, &b);
    assert_true(s == NJ_OK || s == NJ_ERR_NO_DRIVER || s == NJ_ERR_NO_DEVICE);
    if (s == NJ_OK) {
        assert_non_null(b);
        assert_string_equal(b->ops->name, "cuda");
        assert_true(b->props.arch >= 50);
        b->ops->destroy(b);
    } else {
        assert_null(b);
        assert_true(strlen(nj_last_error()) > 0);
    }
    assert_int_equal(nj_backend_cuda_create(NULL, &b), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_backend_cuda_create(&cfg, NULL), NJ_ERR_NULL_POINTER);
}

static void test_compile_only_needs_arch_fail(void **state)
{
    nj_backend_config cfg = {0};
    nj_backend *b = (nj_backend *)1;
    assert_int_equal(nj_backend_compile_only_create(&cfg, &b), NJ_ERR_BAD_ARGUMENT);
    assert_null(b);
    assert_non_null(strstr(nj_last_error(), "architecture"));
    cfg.arch = -5;
    assert_int_equal(nj_backend_compile_only_create(&cfg, &b), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_backend_compile_only_create(NULL, &b), NJ_ERR_NULL_POINTER);
}

static void test_compile_only_compiles(void **state)
{
    nj_backend_config cfg = {.arch = 90};
    nj_backend *b = NULL;
    assert_int_equal(nj_backend_compile_only_create(&cfg, &b), NJ_OK);
    assert_string_equal(b->ops->name, "compile-only");
    assert_string_equal(b->ops->target(b), "sm_90");
    const char *v = NULL;
    assert_int_equal(nj_nvrtc_version_string(&v), NJ_OK);
    assert_string_equal(b->ops->compiler(b), v);
    assert_int_equal(b->props.arch, 90);
    assert_int_equal(b->props.max_threads_per_block, 1024);
    assert_true(b->props.max_shared_per_block >= 48 * 1024);
    assert_true(b->props.regs_per_sm >= 32768);

    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", &r), NJ_OK);
    assert_int_equal(r.bin.is_ptx, 0);
    assert_memory_equal(r.bin.data, "\x7f" "ELF", 4);
    assert_int_equal(r.nkernels, 1);
    assert_string_equal(r.kernels[0].kernel, "k_add");
    nj_binary_free(&r.bin);
    b->ops->destroy(b);
}

static void test_compile_only_refuses_to_run_fail(void **state)
{
    nj_backend_config cfg = {.arch = 80};
    nj_backend *b = NULL;
    assert_int_equal(nj_backend_compile_only_create(&cfg, &b), NJ_OK);
    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", &r), NJ_OK);
    void *module = (void *)1, *fn = (void *)1, *mem = (void *)1;
    assert_int_equal(b->ops->load(b, r.bin.data, r.bin.size, &module), NJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(nj_last_error(), "compile-only"));
    assert_int_equal(b->ops->function(b, module, "k_add", &fn), NJ_ERR_UNSUPPORTED);
    uint32_t grid[3] = {1, 1, 1};
    int32_t block[3] = {32, 1, 1};
    char args[16] = {0};
    assert_int_equal(b->ops->launch(b, fn, grid, block, 0, NULL, args, sizeof args), NJ_ERR_UNSUPPORTED);
    assert_int_equal(b->ops->mem_alloc(b, 64, &mem), NJ_ERR_UNSUPPORTED);
    assert_null(mem);
    assert_int_equal(b->ops->upload(b, args, args, 4), NJ_ERR_UNSUPPORTED);
    assert_int_equal(b->ops->download(b, args, args, 4), NJ_ERR_UNSUPPORTED);
    assert_int_equal(b->ops->synchronize(b, NULL), NJ_ERR_UNSUPPORTED);
    b->ops->unload(b, NULL);
    b->ops->mem_free(b, NULL);
    nj_binary_free(&r.bin);
    b->ops->destroy(b);
}

/* A target newer than NVRTC: the compile-only backend still names it, and produces PTX. */
static void test_compile_only_future_arch(void **state)
{
    nj_backend_config cfg = {.arch = 200};
    nj_backend *b = NULL;
    assert_int_equal(nj_backend_compile_only_create(&cfg, &b), NJ_OK);
    assert_string_equal(b->ops->target(b), "sm_200");
    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", &r), NJ_OK);
    assert_int_equal(r.bin.is_ptx, 1);
    assert_non_null(strstr((const char *)r.bin.data, ".entry k_add"));
    nj_binary_free(&r.bin);
    b->ops->destroy(b);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "no-driver") == 0) return child_expect(NJ_ERR_NO_DRIVER, "/nonexistent/libcuda.so.1");
    if (argc > 1 && strcmp(argv[1], "stub") == 0) return child_expect(NJ_ERR_NO_DRIVER, "stub");
    if (argc > 1 && strcmp(argv[1], "not-libcuda") == 0) return child_expect(NJ_ERR_NO_DRIVER, "lacks cu");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_libcuda_fail),
        cmocka_unit_test(test_stub_is_no_driver_fail),
        cmocka_unit_test(test_not_libcuda_fail),
        cmocka_unit_test(test_default_driver_answers),
        cmocka_unit_test(test_compile_only_needs_arch_fail),
        cmocka_unit_test(test_compile_only_compiles),
        cmocka_unit_test(test_compile_only_refuses_to_run_fail),
        cmocka_unit_test(test_compile_only_future_arch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
