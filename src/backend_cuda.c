/* The CUDA backend (Driver API) and the compile-only backend (NVRTC without a device).
 * libcuda is opened with dlopen and never linked: a machine without the driver loads the library and gets
 * NJ_ERR_NO_DRIVER from nj_backend_cuda_create instead of a loader error. */
#include "backend.h"

#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every Driver API function used, one line each: the exported symbol and its parameters (all return CUresult).
 * The _v2 names are spelled out because cuda.h maps the plain names to them only for linked callers. */
#define NJ_CU_FUNCS(X)                                                                                     \
    X(cuGetErrorName, (CUresult r, const char **s))                                                        \
    X(cuGetErrorString, (CUresult r, const char **s))                                                      \
    X(cuInit, (unsigned int flags))                                                                        \
    X(cuDriverGetVersion, (int *v))                                                                        \
    X(cuDeviceGetCount, (int *n))                                                                          \
    X(cuDeviceGet, (CUdevice * d, int ordinal))                                                            \
    X(cuDeviceGetAttribute, (int *v, CUdevice_attribute a, CUdevice d))                                    \
    X(cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d))                                               \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice d))                                                          \
    X(cuCtxGetCurrent, (CUcontext * c))                                                                    \
    X(cuCtxPushCurrent_v2, (CUcontext c))                                                                  \
    X(cuCtxPopCurrent_v2, (CUcontext * c))                                                                 \
    X(cuCtxSynchronize, (void))                                                                            \
    X(cuModuleLoadData, (CUmodule * m, const void *image))                                                 \
    X(cuModuleUnload, (CUmodule m))                                                                        \
    X(cuModuleGetFunction, (CUfunction * f, CUmodule m, const char *name))                                 \
    X(cuFuncGetAttribute, (int *v, CUfunction_attribute a, CUfunction f))                                  \
    X(cuFuncSetAttribute, (CUfunction f, CUfunction_attribute a, int v))                                   \
    X(cuLaunchKernel, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,      \
                       unsigned bz, unsigned shmem, CUstream s, void **params, void **extra))              \
    X(cuMemAlloc_v2, (CUdeviceptr * p, size_t n))                                                          \
    X(cuMemFree_v2, (CUdeviceptr p))                                                                       \
    X(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n))                                       \
    X(cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n))                                             \
    X(cuStreamSynchronize, (CUstream s))

typedef struct nj_cu_api {
#define NJ_CU_FIELD_(name, args) CUresult(*name) args;
    NJ_CU_FUNCS(NJ_CU_FIELD_)
#undef NJ_CU_FIELD_
    /* optional (CUDA 12.0 drivers and later): dependent launches; NULL launches every kernel plainly */
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **params, void **extra);
} nj_cu_api;

/* Loaded and initialized once per process (cuInit's answer does not change within a process). */
static struct {
    pthread_once_t once;
    nj_status status;
    char error[1024];
    nj_cu_api api;
} nj_cu = {.once = PTHREAD_ONCE_INIT};

/* Names for the codes that matter when the driver cannot name them itself (the stub, a broken install). */
static const char *nj_cu_fallback_name(CUresult r)
{
    switch ((int)r) {
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    default: return "CUDA_ERROR_UNKNOWN_CODE";
    }
}

static const char *nj_cu_name(CUresult r)
{
    const char *s = NULL;
    if (nj_cu.api.cuGetErrorName && nj_cu.api.cuGetErrorName(r, &s) == CUDA_SUCCESS && s) return s;
    return nj_cu_fallback_name(r);
}

static const char *nj_cu_string(CUresult r)
{
    const char *s = NULL;
    if (nj_cu.api.cuGetErrorString && nj_cu.api.cuGetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "no description";
}

/* The one checker for cu* results: the CUresult name and the call go into the detail. */
static nj_status nj_cu_check(CUresult r, const char *call)
{
    if (r == CUDA_SUCCESS) return NJ_OK;
    return nj_fail(NJ_ERR_CUDA, "%s failed: %s (%d: %s)", call, nj_cu_name(r), (int)r, nj_cu_string(r));
}
/* NJ_CU(cuFoo, args...): calls through the table and names the function in any failure. */
#define NJ_CU(fn, ...) nj_cu_check(nj_cu.api.fn(__VA_ARGS__), #fn)

static nj_status nj_cu_resolve(void *h, const char *lib)
{
#define NJ_CU_SYM_(name, args)                                                                             \
    *(void **)&nj_cu.api.name = dlsym(h, #name);                                                           \
    if (!nj_cu.api.name)                                                                                   \
        return nj_fail(NJ_ERR_NO_DRIVER, "%s lacks %s: the CUDA driver is too old or broken", lib, #name);
    NJ_CU_FUNCS(NJ_CU_SYM_)
#undef NJ_CU_SYM_
    *(void **)&nj_cu.api.cuLaunchKernelEx = dlsym(h, "cuLaunchKernelEx");
    return NJ_OK;
}

static nj_status nj_cu_init(const char *lib)
{
    CUresult r = nj_cu.api.cuInit(0);
    if (r == CUDA_SUCCESS) return NJ_OK;
    if (r == CUDA_ERROR_STUB_LIBRARY)
        return nj_fail(NJ_ERR_NO_DRIVER,
                       "%s is the CUDA toolkit's stub library (cuInit: CUDA_ERROR_STUB_LIBRARY), not a driver: "
                       "no NVIDIA driver is installed",
                       lib);
    if (r == CUDA_ERROR_NO_DEVICE)
        return nj_fail(NJ_ERR_NO_DEVICE, "cuInit: CUDA_ERROR_NO_DEVICE: the driver (%s) sees no CUDA device", lib);
    return nj_fail(NJ_ERR_NO_DRIVER, "cuInit failed: %s (%d: %s) with %s", nj_cu_name(r), (int)r, nj_cu_string(r),
                   lib);
}

static void nj_cu_load_once(void)
{
    const char *lib = getenv("NORMJIT_LIBCUDA"); /* tests point this at the toolkit stub */
    if (!lib || !lib[0]) lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        nj_cu.status = nj_fail(NJ_ERR_NO_DRIVER, "cannot load %s (%s): no NVIDIA driver installed", lib,
                               why ? why : "dlopen failed");
    } else if ((nj_cu.status = nj_cu_resolve(h, lib)) == NJ_OK) {
        nj_cu.status = nj_cu_init(lib);
    }
    if (nj_cu.status != NJ_OK) snprintf(nj_cu.error, sizeof nj_cu.error, "%s", nj_last_error());
    /* The handle stays open for the process: the function pointers point into it. */
}

static nj_status nj_cu_load(void)
{
    pthread_once(&nj_cu.once, nj_cu_load_once);
    if (nj_cu.status != NJ_OK) return nj_fail(nj_cu.status, "%s", nj_cu.error);
    return NJ_OK;
}

/* ---- shared by both backends ---- */

typedef struct nj_cuda_backend {
    nj_backend base;
    CUdevice dev;
    CUcontext ctx; /* the device's primary context, retained while the backend lives */
    char target[16];
    char compiler[32];
} nj_cuda_backend;

static nj_cuda_backend *nj_cb(nj_backend *b) { return (nj_cuda_backend *)b; }

static const char *nj_cb_target(nj_backend *b) { return nj_cb(b)->target; }
static const char *nj_cb_compiler(nj_backend *b) { return nj_cb(b)->compiler; }

static nj_status nj_cb_compile(nj_backend *b, const char *source, const char *name, int32_t kernels,
                               nj_compile_result *out)
{
    return nj_nvrtc_compile(source, name, b->props.arch, kernels, out);
}

/* The compiler id goes into cache signatures; without NVRTC nothing can be compiled, but cached binaries
 * built elsewhere are keyed by the real version, so a placeholder simply never matches. */
static void nj_cb_names(nj_cuda_backend *cb, int32_t arch)
{
    const char *v = NULL;
    snprintf(cb->target, sizeof cb->target, "sm_%d", (int)arch);
    snprintf(cb->compiler, sizeof cb->compiler, "%s", nj_nvrtc_version_string(&v) == NJ_OK ? v : "nvrtc-missing");
    nj_error_clear();
}

/* ---- CUDA backend ---- */

/* Makes the backend's context current for the duration of a call, unless it already is (the usual case:
 * the caller's runtime API uses the same primary context), so the caller's context stack is left as found. */
static nj_status nj_ctx_enter(nj_cuda_backend *cb, bool *pushed)
{
    CUcontext cur = NULL;
    *pushed = false;
    NJ_TRY(NJ_CU(cuCtxGetCurrent, &cur));
    if (cur == cb->ctx) return NJ_OK;
    NJ_TRY(NJ_CU(cuCtxPushCurrent_v2, cb->ctx));
    *pushed = true;
    return NJ_OK;
}

/* Results of pop, unload, free and release are not checked: the ops that call them return void, and a
 * failure there can only leak what was being let go. */
static void nj_ctx_leave(bool pushed)
{
    CUcontext c;
    if (pushed) nj_cu.api.cuCtxPopCurrent_v2(&c);
}

/* Runs `expr` (a nj_status expression) with the backend's context current. */
#define NJ_IN_CTX(cb, expr)                                   \
    do {                                                      \
        bool nj_pushed_;                                      \
        NJ_TRY(nj_ctx_enter((cb), &nj_pushed_));              \
        nj_status nj_in_ctx_s_ = (expr);                      \
        nj_ctx_leave(nj_pushed_);                             \
        return nj_in_ctx_s_;                                  \
    } while (0)

static nj_status nj_cuda_load_in_ctx(const void *bin, void **module)
{
    CUmodule m = NULL;
    /* cuModuleLoadData takes a cubin or NUL-terminated PTX alike (the PTX from nj_nvrtc_compile ends in NUL). */
    NJ_TRY(NJ_CU(cuModuleLoadData, &m, bin));
    *module = m;
    return NJ_OK;
}

static nj_status nj_cuda_load(nj_backend *b, const void *bin, size_t size, void **module)
{
    NJ_RETURN_IF(!bin || !size || !module, NJ_ERR_NULL_POINTER, "cuda load: empty binary or NULL module");
    NJ_IN_CTX(nj_cb(b), nj_cuda_load_in_ctx(bin, module));
}

static nj_status nj_cuda_function(nj_backend *b, void *module, const char *name, void **fn)
{
    NJ_RETURN_IF(!module || !name || !fn, NJ_ERR_NULL_POINTER, "cuda function: NULL module, name or output");
    CUfunction f = NULL;
    nj_status s = NJ_CU(cuModuleGetFunction, &f, (CUmodule)module, name);
    if (s != NJ_OK) return nj_fail_context(s, "looking up kernel %s", name);
    *fn = f;
    return NJ_OK;
}

/* Set once a driver refused a dependent launch that it then took plainly: every later launch is plain. */
static atomic_bool nj_cu_no_dependent;

/* A programmatic dependent launch: 1 when the driver took it, 0 when not tried (no cuLaunchKernelEx, or
 * turned off), -1 when the driver refused it. */
static int nj_cuda_dependent(void *fn, const uint32_t grid[3], const int32_t block[3], uint32_t shmem, void *stream,
                              void **params)
{
    if (!nj_cu.api.cuLaunchKernelEx || atomic_load(&nj_cu_no_dependent)) return 0;
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0], cfg.gridDimY = grid[1], cfg.gridDimZ = grid[2];
    cfg.blockDimX = (unsigned)block[0], cfg.blockDimY = (unsigned)block[1], cfg.blockDimZ = (unsigned)block[2];
    cfg.sharedMemBytes = shmem;
    cfg.hStream = (CUstream)stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return nj_cu.api.cuLaunchKernelEx(&cfg, (CUfunction)fn, params, NULL) == CUDA_SUCCESS ? 1 : -1;
}

static nj_status nj_cuda_launch_in_ctx(void *fn, const uint32_t grid[3], const int32_t block[3], uint32_t shmem,
                                       void *stream, uint32_t flags, const void *args)
{
    /* A kernel may use 48 KiB of static and dynamic shared memory together without opting in (its default
     * dynamic limit is 48 KiB less its static arrays); past that it must opt in to its dynamic size. Only
     * launches with dynamic memory ask for the static size (a driver-side lookup). */
    if (shmem > 0) {
        int st = 0;
        NJ_TRY(NJ_CU(cuFuncGetAttribute, &st, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, (CUfunction)fn));
        if ((uint64_t)shmem + (uint64_t)(st > 0 ? st : 0) > 48u * 1024u)
            NJ_TRY(NJ_CU(cuFuncSetAttribute, (CUfunction)fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                         (int)shmem));
    }
    void *params[1] = {(void *)args}; /* the one nj_kargs parameter, copied by value by the driver */
    int dep = flags & NJ_LAUNCH_DEPENDENT ? nj_cuda_dependent(fn, grid, block, shmem, stream, params) : 0;
    if (dep > 0) return NJ_OK;
    nj_status s = NJ_CU(cuLaunchKernel, (CUfunction)fn, grid[0], grid[1], grid[2], (unsigned)block[0],
                        (unsigned)block[1], (unsigned)block[2], shmem, (CUstream)stream, params, NULL);
    /* refused dependent, taken plain: the driver lacks the feature (a bad launch fails both ways) */
    if (dep < 0 && s == NJ_OK) atomic_store(&nj_cu_no_dependent, true);
    return s;
}

static nj_status nj_cuda_launch(nj_backend *b, void *fn, const uint32_t grid[3], const int32_t block[3],
                                uint32_t shmem, void *stream, uint32_t flags, const void *args, size_t args_size)
{
    NJ_RETURN_IF(!fn || !grid || !block || !args || !args_size, NJ_ERR_NULL_POINTER, "cuda launch: NULL argument");
    for (int i = 0; i < 3; i++)
        NJ_RETURN_IF(grid[i] == 0 || block[i] <= 0, NJ_ERR_BAD_ARGUMENT, "cuda launch: empty grid or block dimension");
    NJ_IN_CTX(nj_cb(b), nj_cuda_launch_in_ctx(fn, grid, block, shmem, stream, flags, args));
}

static void nj_cuda_unload(nj_backend *b, void *module)
{
    bool pushed;
    if (!module || nj_ctx_enter(nj_cb(b), &pushed) != NJ_OK) return;
    nj_cu.api.cuModuleUnload((CUmodule)module);
    nj_ctx_leave(pushed);
}

static nj_status nj_cuda_mem_alloc_in_ctx(size_t bytes, void **out)
{
    CUdeviceptr p = 0;
    NJ_TRY(NJ_CU(cuMemAlloc_v2, &p, bytes));
    *out = (void *)(uintptr_t)p;
    return NJ_OK;
}

static nj_status nj_cuda_mem_alloc(nj_backend *b, size_t bytes, void **out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "cuda mem_alloc: out is NULL");
    *out = NULL;
    if (bytes == 0) return NJ_OK; /* the driver refuses 0 bytes; nothing to hold */
    NJ_IN_CTX(nj_cb(b), nj_cuda_mem_alloc_in_ctx(bytes, out));
}

static void nj_cuda_mem_free(nj_backend *b, void *p)
{
    bool pushed;
    if (!p || nj_ctx_enter(nj_cb(b), &pushed) != NJ_OK) return;
    nj_cu.api.cuMemFree_v2((CUdeviceptr)(uintptr_t)p);
    nj_ctx_leave(pushed);
}

static nj_status nj_cuda_upload(nj_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return NJ_OK;
    NJ_RETURN_IF(!dst || !src, NJ_ERR_NULL_POINTER, "cuda upload: NULL pointer");
    NJ_IN_CTX(nj_cb(b), NJ_CU(cuMemcpyHtoD_v2, (CUdeviceptr)(uintptr_t)dst, src, bytes));
}

static nj_status nj_cuda_download(nj_backend *b, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return NJ_OK;
    NJ_RETURN_IF(!dst || !src, NJ_ERR_NULL_POINTER, "cuda download: NULL pointer");
    NJ_IN_CTX(nj_cb(b), NJ_CU(cuMemcpyDtoH_v2, dst, (CUdeviceptr)(uintptr_t)src, bytes));
}

static nj_status nj_cuda_synchronize(nj_backend *b, void *stream)
{
    /* No stream means "everything this backend launched": the whole context. */
    NJ_IN_CTX(nj_cb(b), stream ? NJ_CU(cuStreamSynchronize, (CUstream)stream)
                               : nj_cu_check(nj_cu.api.cuCtxSynchronize(), "cuCtxSynchronize"));
}

static void nj_cuda_destroy(nj_backend *b)
{
    if (!b) return;
    nj_cuda_backend *cb = nj_cb(b);
    if (cb->ctx) nj_cu.api.cuDevicePrimaryCtxRelease_v2(cb->dev);
    free(cb);
}

static const nj_backend_ops nj_cuda_ops = {
    .name = "cuda",
    .kind = NJ_BACKEND_CUDA,
    .target = nj_cb_target,
    .compiler = nj_cb_compiler,
    .compile = nj_cb_compile,
    .load = nj_cuda_load,
    .function = nj_cuda_function,
    .launch = nj_cuda_launch,
    .unload = nj_cuda_unload,
    .mem_alloc = nj_cuda_mem_alloc,
    .mem_free = nj_cuda_mem_free,
    .upload = nj_cuda_upload,
    .download = nj_cuda_download,
    .synchronize = nj_cuda_synchronize,
    .destroy = nj_cuda_destroy,
};

static nj_status nj_cuda_attr(CUdevice dev, CUdevice_attribute a, int32_t *out)
{
    int v = 0;
    NJ_TRY(NJ_CU(cuDeviceGetAttribute, &v, a, dev));
    *out = v;
    return NJ_OK;
}

static nj_status nj_cuda_props(CUdevice dev, nj_device_props *p)
{
    int32_t major = 0, minor = 0;
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major));
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor));
    p->arch = major * 10 + minor;
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &p->sm_count));
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &p->max_threads_per_block));
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &p->max_shared_per_block));
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &p->regs_per_sm));
    NJ_TRY(nj_cuda_attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &p->max_grid_x));
    return NJ_OK;
}

/* A cubin runs only on its own major architecture with an equal or higher minor, so an explicit arch must
 * be one the device can run. */
static nj_status nj_cuda_pick_arch(const nj_backend_config *cfg, nj_device_props *p)
{
    int32_t want = cfg->arch;
    if (want == 0 || want == p->arch) return NJ_OK;
    NJ_RETURN_IF(want / 10 != p->arch / 10 || want > p->arch, NJ_ERR_BAD_ARGUMENT,
                 "arch sm_%d cannot run on device %d (sm_%d)", (int)want, (int)cfg->device, (int)p->arch);
    p->arch = want;
    return NJ_OK;
}

static nj_status nj_cuda_open_device(const nj_backend_config *cfg, nj_cuda_backend *cb)
{
    int count = 0;
    NJ_TRY(NJ_CU(cuDeviceGetCount, &count));
    NJ_RETURN_IF(count == 0, NJ_ERR_NO_DEVICE, "the CUDA driver reports no device");
    NJ_RETURN_IF(cfg->device < 0 || cfg->device >= count, NJ_ERR_NO_DEVICE, "CUDA device %d requested; %d present",
                 (int)cfg->device, count);
    NJ_TRY(NJ_CU(cuDeviceGet, &cb->dev, cfg->device));
    NJ_TRY(nj_cuda_props(cb->dev, &cb->base.props));
    NJ_TRY(nj_cuda_pick_arch(cfg, &cb->base.props));
    NJ_TRY(NJ_CU(cuDevicePrimaryCtxRetain, &cb->ctx, cb->dev));
    return NJ_OK;
}

nj_status nj_backend_cuda_create(const nj_backend_config *cfg, nj_backend **out)
{
    NJ_RETURN_IF(!cfg || !out, NJ_ERR_NULL_POINTER, "nj_backend_cuda_create: cfg or out is NULL");
    *out = NULL;
    NJ_TRY(nj_cu_load());
    nj_cuda_backend *cb = calloc(1, sizeof *cb);
    NJ_RETURN_IF(!cb, NJ_ERR_OUT_OF_MEMORY, "allocating the CUDA backend");
    cb->base.ops = &nj_cuda_ops;
    nj_status s = nj_cuda_open_device(cfg, cb);
    if (s != NJ_OK) {
        nj_cuda_destroy(&cb->base);
        return s;
    }
    nj_cb_names(cb, cb->base.props.arch);
    *out = &cb->base;
    return NJ_OK;
}

/* ---- compile-only backend ---- */

static nj_status nj_co_unsupported(const char *what)
{
    return nj_fail(NJ_ERR_UNSUPPORTED, "the compile-only backend cannot %s: it has no device (use the cuda backend)",
                   what);
}

static nj_status nj_co_load(nj_backend *b, const void *bin, size_t size, void **module)
{
    return nj_co_unsupported("load a module");
}
static nj_status nj_co_function(nj_backend *b, void *module, const char *name, void **fn)
{
    return nj_co_unsupported("look up a kernel");
}
static nj_status nj_co_launch(nj_backend *b, void *fn, const uint32_t grid[3], const int32_t block[3], uint32_t shmem,
                              void *stream, uint32_t flags, const void *args, size_t args_size)
{
    return nj_co_unsupported("launch a kernel");
}
static void nj_co_unload(nj_backend *b, void *module) {}
static nj_status nj_co_mem_alloc(nj_backend *b, size_t bytes, void **out)
{
    if (out) *out = NULL;
    return nj_co_unsupported("allocate device memory");
}
static void nj_co_mem_free(nj_backend *b, void *p) {}
static nj_status nj_co_upload(nj_backend *b, void *dst, const void *src, size_t bytes)
{
    return nj_co_unsupported("copy memory");
}
static nj_status nj_co_download(nj_backend *b, void *dst, const void *src, size_t bytes)
{
    return nj_co_unsupported("copy memory");
}
static nj_status nj_co_synchronize(nj_backend *b, void *stream) { return nj_co_unsupported("synchronize"); }
static void nj_co_destroy(nj_backend *b) { free(b); }

static const nj_backend_ops nj_compile_only_ops = {
    .name = "compile-only",
    .kind = NJ_BACKEND_COMPILE_ONLY,
    .target = nj_cb_target,
    .compiler = nj_cb_compiler,
    .compile = nj_cb_compile,
    .load = nj_co_load,
    .function = nj_co_function,
    .launch = nj_co_launch,
    .unload = nj_co_unload,
    .mem_alloc = nj_co_mem_alloc,
    .mem_free = nj_co_mem_free,
    .upload = nj_co_upload,
    .download = nj_co_download,
    .synchronize = nj_co_synchronize,
    .destroy = nj_co_destroy,
};

/* Conservative properties of an architecture nobody can query here. Stands in for the planner's
 * nj_device_props_default until that is merged. sm_count 0 tells the planner to assume its default. */
static void nj_co_props(int32_t arch, nj_device_props *p)
{
    memset(p, 0, sizeof *p);
    p->arch = arch;
    p->max_threads_per_block = 1024;
    p->regs_per_sm = 65536;
    if (arch == 80 || arch == 87)
        p->max_shared_per_block = 166912; /* 163 KiB */
    else if (arch >= 90 && arch < 110)
        p->max_shared_per_block = 232448; /* 227 KiB */
    else if (arch >= 86)
        p->max_shared_per_block = 101376; /* 99 KiB: sm_86, 89, 110+ consumer parts */
    else
        p->max_shared_per_block = 65536;
}

nj_status nj_backend_compile_only_create(const nj_backend_config *cfg, nj_backend **out)
{
    NJ_RETURN_IF(!cfg || !out, NJ_ERR_NULL_POINTER, "nj_backend_compile_only_create: cfg or out is NULL");
    *out = NULL;
    NJ_RETURN_IF(cfg->arch <= 0, NJ_ERR_BAD_ARGUMENT,
                 "the compile-only backend needs a target architecture (e.g. --arch sm_90); got %d", (int)cfg->arch);
    nj_cuda_backend *cb = calloc(1, sizeof *cb);
    NJ_RETURN_IF(!cb, NJ_ERR_OUT_OF_MEMORY, "allocating the compile-only backend");
    cb->base.ops = &nj_compile_only_ops;
    nj_co_props(cfg->arch, &cb->base.props);
    nj_cb_names(cb, cfg->arch);
    *out = &cb->base;
    return NJ_OK;
}
