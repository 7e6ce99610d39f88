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

#include <dlfcn.h>

#include "backend.h"
#include "compile_child.h"
#include "kernel_abi.h"

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
        assert_int_equal(b->ops->kind, NJ_BACKEND_CUDA);
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
    assert_int_equal(b->ops->kind, NJ_BACKEND_COMPILE_ONLY);
    assert_string_equal(b->ops->target(b), "sm_90");
    const char *v = NULL;
    assert_int_equal(nj_nvrtc_version_string(&v), NJ_OK);
    assert_string_equal(b->ops->compiler(b), v);
    assert_int_equal(b->props.arch, 90);
    assert_int_equal(b->props.max_threads_per_block, 1024);
    assert_true(b->props.max_shared_per_block >= 48 * 1024);
    assert_true(b->props.regs_per_sm >= 32768);

    nj_compile_result r;
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", 1, &r), NJ_OK);
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
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", 1, &r), NJ_OK);
    void *module = (void *)1, *fn = (void *)1, *mem = (void *)1;
    assert_int_equal(b->ops->load(b, r.bin.data, r.bin.size, &module), NJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(nj_last_error(), "compile-only"));
    assert_int_equal(b->ops->function(b, module, "k_add", &fn), NJ_ERR_UNSUPPORTED);
    uint32_t grid[3] = {1, 1, 1};
    int32_t block[3] = {32, 1, 1};
    char args[16] = {0};
    assert_int_equal(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, args, sizeof args), NJ_ERR_UNSUPPORTED);
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
    assert_int_equal(b->ops->compile(b, k_src, "add.cu", 1, &r), NJ_OK);
    assert_int_equal(r.bin.is_ptx, 1);
    assert_non_null(strstr((const char *)r.bin.data, ".entry k_add"));
    nj_binary_free(&r.bin);
    b->ops->destroy(b);
}

/* ---- the CUDA backend against a fake driver (tests/support/backend_cuda_fake_driver.c) ---- */

static char fake_lib[512];

static int build_fake_driver(void **state)
{
    return nj_test_build_shared(NJ_SOURCE_DIR, "tests/support/backend_cuda_fake_driver.c", "NJ_FAKE_LIBCUDA",
                                "libcuda.so.1", fake_lib, sizeof fake_lib);
}

static int remove_fake_driver(void **state)
{
    nj_test_remove_shared(fake_lib);
    return 0;
}

typedef struct fake_api {
    int (*refs)(void);
    int (*depth)(void);
    int (*launches)(void);
    void (*last)(unsigned grid[3], unsigned block[3], unsigned *shmem, void *args, size_t n);
    int (*push)(void *ctx);
    int (*pop)(void **ctx);
    void (*set_static)(int bytes);
    int (*dependent)(void);
    long (*calls)(const char *name);
} fake_api;

/* The fake is already loaded by the backend; dlopen hands back the same handle. */
static int fake_bind(fake_api *f)
{
    void *h = dlopen(getenv("NORMJIT_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);
    if (!h) return -1;
    *(void **)&f->refs = dlsym(h, "fake_ctx_refs");
    *(void **)&f->depth = dlsym(h, "fake_ctx_depth");
    *(void **)&f->launches = dlsym(h, "fake_launches");
    *(void **)&f->last = dlsym(h, "fake_last_launch");
    *(void **)&f->push = dlsym(h, "cuCtxPushCurrent_v2");
    *(void **)&f->pop = dlsym(h, "cuCtxPopCurrent_v2");
    *(void **)&f->set_static = dlsym(h, "fake_set_static_shared");
    *(void **)&f->dependent = dlsym(h, "fake_dependent_launches");
    *(void **)&f->calls = dlsym(h, "fake_calls");
    return f->refs && f->depth && f->launches && f->last && f->push && f->pop && f->set_static && f->dependent &&
                   f->calls
               ? 0
               : -1;
}

#define CHILD_CHECK(cond, code) \
    do {                        \
        if (!(cond)) {          \
            fprintf(stderr, "child check %d failed: %s (%s)\n", code, #cond, nj_last_error()); \
            return code;        \
        }                       \
    } while (0)

/* A dependent launch goes through cuLaunchKernelEx with the programmatic-serialization attribute; under a
 * driver that refuses it (FAKE_CUDA_EX_FAIL, the "fake-ex-refused" child) the kernel launches plainly,
 * and from then on every launch is plain. */
static int fake_dependent_checks(nj_backend *b, const fake_api *f, void *fn, const nj_kargs *a)
{
    uint32_t grid[3] = {3, 2, 1};
    int32_t block[3] = {128, 1, 1};
    unsigned g[3], bl[3], sh = 1;
    nj_kargs seen;
    bool refused = getenv("FAKE_CUDA_EX_FAIL") != NULL;
    long ex0 = f->calls("cuLaunchKernelEx"), plain0 = f->calls("cuLaunchKernel");
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_DEPENDENT, a, sizeof *a) == NJ_OK, 53);
    f->last(g, bl, &sh, &seen, sizeof seen);
    CHILD_CHECK(g[0] == 3 && g[1] == 2 && bl[0] == 128 && memcmp(&seen, a, sizeof *a) == 0, 54);
    CHILD_CHECK(f->launches() == 4 && f->calls("cuLaunchKernelEx") == ex0 + 1, 55);
    CHILD_CHECK(f->dependent() == (refused ? 0 : 1), 56);
    CHILD_CHECK(f->calls("cuLaunchKernel") == plain0 + (refused ? 1 : 0), 57);
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_DEPENDENT, a, sizeof *a) == NJ_OK, 58);
    CHILD_CHECK(f->calls("cuLaunchKernelEx") == ex0 + (refused ? 1 : 2), 59); /* not asked again */
    CHILD_CHECK(f->dependent() == (refused ? 0 : 2) && f->launches() == 5, 67);
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, a, sizeof *a) == NJ_OK, 68);
    CHILD_CHECK(f->calls("cuLaunchKernelEx") == ex0 + (refused ? 1 : 2) && f->launches() == 6, 69);
    return 0;
}

static int fake_launch_checks(nj_backend *b, const fake_api *f, void *fn)
{
    nj_kargs a, seen;
    memset(&a, 0, sizeof a);
    a.x = (void *)0x1000;
    a.rows = 77;
    a.bstride[7] = -5;
    a.eps = 1e-5f;
    a.reserved = 9;
    uint32_t grid[3] = {3, 2, 1};
    int32_t block[3] = {128, 1, 1};
    unsigned g[3], bl[3], sh = 1;
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_OK, 40);
    f->last(g, bl, &sh, &seen, sizeof seen);
    CHILD_CHECK(g[0] == 3 && g[1] == 2 && g[2] == 1 && bl[0] == 128 && bl[1] == 1 && sh == 0, 41);
    CHILD_CHECK(memcmp(&seen, &a, sizeof a) == 0, 42); /* the whole struct, by value */
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 100 * 1024, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_OK, 43);
    f->last(g, bl, &sh, &seen, sizeof seen);
    CHILD_CHECK(sh == 100 * 1024, 44);
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 300000, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_ERR_CUDA, 45);
    CHILD_CHECK(strstr(nj_last_error(), "cuFuncSetAttribute"), 46);
    /* 48 KiB of dynamic memory beside 12 KiB of static arrays: past the default limit, so the backend
     * opts in (the column tiles' 49152 B launches beside their own arrays failed on a GPU without it) */
    f->set_static(12 * 1024);
    CHILD_CHECK(b->ops->launch(b, fn, grid, block, 48 * 1024, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_OK, 51);
    f->last(g, bl, &sh, &seen, sizeof seen);
    CHILD_CHECK(sh == 48 * 1024, 52);
    f->set_static(0);
    int32_t big[3] = {2048, 1, 1};
    CHILD_CHECK(b->ops->launch(b, fn, grid, big, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_ERR_CUDA, 47);
    CHILD_CHECK(strstr(nj_last_error(), "cuLaunchKernel") && strstr(nj_last_error(), "CUDA_ERROR_INVALID_VALUE"), 48);
    int32_t zero[3] = {0, 1, 1};
    CHILD_CHECK(b->ops->launch(b, fn, grid, zero, 0, NULL, NJ_LAUNCH_PLAIN, &a, sizeof a) == NJ_ERR_BAD_ARGUMENT, 49);
    CHILD_CHECK(f->launches() == 3 && f->depth() == 0, 50);
    return fake_dependent_checks(b, f, fn, &a);
}

static int fake_memory_checks(nj_backend *b, const fake_api *f)
{
    void *d = NULL;
    char in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (char)(i * 7);
    CHILD_CHECK(b->ops->mem_alloc(b, sizeof in, &d) == NJ_OK && d, 60);
    CHILD_CHECK(b->ops->upload(b, d, in, sizeof in) == NJ_OK, 61);
    memset(out, 0, sizeof out);
    CHILD_CHECK(b->ops->download(b, out, d, sizeof out) == NJ_OK && memcmp(in, out, sizeof in) == 0, 62);
    CHILD_CHECK(b->ops->synchronize(b, NULL) == NJ_OK && b->ops->synchronize(b, (void *)0x10) == NJ_OK, 63);
    b->ops->mem_free(b, d);
    CHILD_CHECK(f->depth() == 0, 64);
    /* A caller with another context current keeps it: the backend pushes its own and pops it again. */
    int other;
    f->push(&other);
    CHILD_CHECK(b->ops->mem_alloc(b, 16, &d) == NJ_OK, 65);
    b->ops->mem_free(b, d);
    void *top = NULL;
    CHILD_CHECK(f->depth() == 1 && f->pop(&top) == 0 && top == &other, 66);
    return 0;
}

static int fake_module_checks(nj_backend *b, const fake_api *f)
{
    nj_compile_result r;
    void *module = NULL, *fn = NULL;
    CHILD_CHECK(b->ops->compile(b, k_src, "add.cu", 1, &r) == NJ_OK && !r.bin.is_ptx, 30);
    CHILD_CHECK(b->ops->load(b, r.bin.data, r.bin.size, &module) == NJ_OK && module, 31);
    nj_binary_free(&r.bin); /* the driver copied it */
    CHILD_CHECK(b->ops->function(b, module, "k_nope", &fn) == NJ_ERR_CUDA, 32);
    CHILD_CHECK(strstr(nj_last_error(), "CUDA_ERROR_NOT_FOUND") && strstr(nj_last_error(), "k_nope"), 33);
    CHILD_CHECK(b->ops->function(b, module, "k_add", &fn) == NJ_OK && fn, 34);
    int rc = fake_launch_checks(b, f, fn);
    if (rc) return rc;
    CHILD_CHECK(b->ops->load(b, "garbage", 8, &module) == NJ_ERR_CUDA, 35);
    CHILD_CHECK(strstr(nj_last_error(), "cuModuleLoadData"), 36);
    b->ops->unload(b, module);
    return 0;
}

static int child_fake(void)
{
    nj_backend_config cfg = {0};
    nj_backend *b = NULL;
    fake_api f;
    CHILD_CHECK(nj_backend_cuda_create(&cfg, &b) == NJ_OK, 1);
    CHILD_CHECK(fake_bind(&f) == 0, 2);
    CHILD_CHECK(strcmp(b->ops->name, "cuda") == 0 && strcmp(b->ops->target(b), "sm_90") == 0, 3);
    CHILD_CHECK(b->props.arch == 90 && b->props.sm_count == 132 && b->props.max_threads_per_block == 1024, 4);
    CHILD_CHECK(b->props.max_shared_per_block == 232448 && b->props.regs_per_sm == 65536, 5);
    CHILD_CHECK(f.refs() == 1 && f.depth() == 0, 6);
    int rc = fake_module_checks(b, &f);
    if (rc == 0) rc = fake_memory_checks(b, &f);
    if (rc) return rc;
    b->ops->destroy(b);
    CHILD_CHECK(f.refs() == 0 && f.depth() == 0, 7);
    /* An arch the device cannot run, a device that is not there. */
    cfg.arch = 80;
    CHILD_CHECK(nj_backend_cuda_create(&cfg, &b) == NJ_ERR_BAD_ARGUMENT && !b, 8);
    cfg.arch = 0;
    cfg.device = 1;
    CHILD_CHECK(nj_backend_cuda_create(&cfg, &b) == NJ_ERR_NO_DEVICE && !b, 9);
    CHILD_CHECK(f.refs() == 0, 10);
    return 0;
}

static void test_fake_driver(void **state)
{
    assert_int_equal(sizeof(nj_kargs), 312); /* the fake driver copies this many argument bytes */
    assert_int_equal(nj_test_run_child("fake", "NORMJIT_LIBCUDA", fake_lib), 0);
}

static void test_fake_driver_refuses_dependent(void **state)
{
    setenv("FAKE_CUDA_EX_FAIL", "801", 1); /* CUDA_ERROR_NOT_SUPPORTED */
    int rc = nj_test_run_child("fake", "NORMJIT_LIBCUDA", fake_lib);
    unsetenv("FAKE_CUDA_EX_FAIL");
    assert_int_equal(rc, 0);
}

static void test_fake_driver_no_device_fail(void **state)
{
    setenv("FAKE_CUDA_DEVICES", "0", 1);
    int rc = nj_test_run_child("fake-no-device", "NORMJIT_LIBCUDA", fake_lib);
    unsetenv("FAKE_CUDA_DEVICES");
    assert_int_equal(rc, 0);
    setenv("FAKE_CUDA_INIT", "100", 1); /* CUDA_ERROR_NO_DEVICE from cuInit */
    rc = nj_test_run_child("fake-no-device", "NORMJIT_LIBCUDA", fake_lib);
    unsetenv("FAKE_CUDA_INIT");
    assert_int_equal(rc, 0);
    setenv("FAKE_CUDA_INIT", "35", 1); /* CUDA_ERROR_INSUFFICIENT_DRIVER */
    rc = nj_test_run_child("fake-old-driver", "NORMJIT_LIBCUDA", fake_lib);
    unsetenv("FAKE_CUDA_INIT");
    assert_int_equal(rc, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "no-driver") == 0)
        return child_expect(NJ_ERR_NO_DRIVER, "/nonexistent/libcuda.so.1");
    if (argc > 1 && strcmp(argv[1], "stub") == 0) return child_expect(NJ_ERR_NO_DRIVER, "stub");
    if (argc > 1 && strcmp(argv[1], "not-libcuda") == 0) return child_expect(NJ_ERR_NO_DRIVER, "lacks cu");
    if (argc > 1 && strcmp(argv[1], "fake") == 0) return child_fake();
    if (argc > 1 && strcmp(argv[1], "fake-no-device") == 0) return child_expect(NJ_ERR_NO_DEVICE, "no ");
    if (argc > 1 && strcmp(argv[1], "fake-old-driver") == 0)
        return child_expect(NJ_ERR_NO_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_libcuda_fail),
        cmocka_unit_test(test_stub_is_no_driver_fail),
        cmocka_unit_test(test_not_libcuda_fail),
        cmocka_unit_test(test_default_driver_answers),
        cmocka_unit_test(test_compile_only_needs_arch_fail),
        cmocka_unit_test(test_compile_only_compiles),
        cmocka_unit_test(test_compile_only_refuses_to_run_fail),
        cmocka_unit_test(test_compile_only_future_arch),
        cmocka_unit_test(test_fake_driver),
        cmocka_unit_test(test_fake_driver_refuses_dependent),
        cmocka_unit_test(test_fake_driver_no_device_fail),
    };
    return cmocka_run_group_tests(tests, build_fake_driver, remove_fake_driver);
}
