/* A fake libcuda for test_backend_cuda: enough of the Driver API, on host memory, to drive the CUDA backend
 * on a machine without a GPU. It checks what a real driver checks where the backend could get it wrong (a
 * context must be current, big dynamic shared memory needs the opt-in attribute, block size limits) and
 * records launches for the test to read back.
 * The test builds this file as a shared library (cc -shared -DNJ_FAKE_LIBCUDA) at run time; in the test
 * support library it compiles to nothing. */
#ifdef NJ_FAKE_LIBCUDA

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
enum {
    OK = 0,
    INVALID_VALUE = 1,
    NO_DEVICE = 100,
    INVALID_DEVICE = 101,
    INVALID_IMAGE = 200,
    INVALID_CONTEXT = 201,
    NOT_FOUND = 500
};

/* One primary context per device (FAKE_CUDA_DEVICES of them, at most 8): modules remember the device they
 * were loaded under and a launch of their function with another device's context current fails, as it
 * does on a real driver. */
static int fake_ctx_token[8];
#define FAKE_CTX_OF(dev) ((void *)&fake_ctx_token[dev])
static _Thread_local void *ctx_stack[16];
static _Thread_local int ctx_depth;
static int ctx_refs, dyn_shared_attr = -1; /* -1: not set, the default limit of 48 KiB less the static size */
static int static_shared; /* every function's static shared memory (fake_set_static_shared) */

typedef struct fake_module fake_module;
typedef struct fake_function {
    fake_module *module;
    const char *name;
} fake_function;

struct fake_module {
    char *image;
    size_t size;
    int elf;
    int dev; /* device whose context was current at load */
    fake_function fns[16]; /* handed out by cuModuleGetFunction, freed with the module */
    int nfns;
};

/* Calls by entry point, so a test can assert which driver calls a path makes (fake_calls). */
#define FAKE_MAX_NAMES 64
static const char *call_names[FAKE_MAX_NAMES];
static long call_counts[FAKE_MAX_NAMES];
static void note_call(const char *name)
{
    for (int i = 0; i < FAKE_MAX_NAMES; i++) {
        if (!call_names[i]) call_names[i] = name;
        if (call_names[i] == name) {
            call_counts[i]++;
            return;
        }
    }
}

/* What the last launch saw, for the test. */
static unsigned last_grid[3], last_block[3], last_shmem;
static unsigned char last_args[320];
static int launches, last_launch_dev = -1;

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && v[0] ? atoi(v) : dflt;
}

/* Device of the current context, -1 when none of the fake's is current. */
static int current_dev(void)
{
    if (ctx_depth <= 0) return -1;
    for (int d = 0; d < 8; d++)
        if (ctx_stack[ctx_depth - 1] == FAKE_CTX_OF(d)) return d;
    return -1;
}
static int have_ctx(void) { return current_dev() >= 0; }

EXPORT CUresult cuGetErrorName(CUresult r, const char **s)
{
    note_call(__func__);
    switch (r) {
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
    default: *s = NULL; return INVALID_VALUE;
    }
}
EXPORT CUresult cuGetErrorString(CUresult r, const char **s)
{
    note_call(__func__);
    *s = "fake driver error";
    return OK;
}
EXPORT CUresult cuInit(unsigned flags)
{
    note_call(__func__);
    return env_int("FAKE_CUDA_INIT", OK);
}
EXPORT CUresult cuDriverGetVersion(int *v)
{
    note_call(__func__);
    *v = 13000;
    return OK;
}
EXPORT CUresult cuDeviceGetCount(int *n)
{
    note_call(__func__);
    *n = env_int("FAKE_CUDA_DEVICES", 1);
    return OK;
}
EXPORT CUresult cuDeviceGet(int *d, int ordinal)
{
    note_call(__func__);
    if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1)) return INVALID_DEVICE;
    *d = ordinal;
    return OK;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
    note_call(__func__);
    switch (attr) {
    case 75: *v = 9; return OK;       /* compute capability major */
    case 76: *v = 0; return OK;       /* minor */
    case 16: *v = 132; return OK;     /* multiprocessors */
    case 1: *v = 1024; return OK;     /* max threads per block */
    case 97: *v = 232448; return OK;  /* opt-in shared memory per block */
    case 82: *v = 65536; return OK;   /* registers per multiprocessor */
    case 5: *v = 2147483647; return OK; /* max grid x */
    default: return INVALID_VALUE;
    }
}
EXPORT CUresult cuDevicePrimaryCtxRetain(void **c, int dev)
{
    note_call(__func__);
    if (dev < 0 || dev >= 8) return INVALID_DEVICE;
    ctx_refs++;
    *c = FAKE_CTX_OF(dev);
    return OK;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
    note_call(__func__);
    ctx_refs--;
    return OK;
}
EXPORT CUresult cuCtxGetCurrent(void **c)
{
    note_call(__func__);
    *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return OK;
}
EXPORT CUresult cuCtxPushCurrent_v2(void *c)
{
    note_call(__func__);
    if (ctx_depth == 16) return INVALID_VALUE;
    ctx_stack[ctx_depth++] = c;
    return OK;
}
EXPORT CUresult cuCtxPopCurrent_v2(void **c)
{
    note_call(__func__);
    if (ctx_depth == 0) return INVALID_CONTEXT;
    *c = ctx_stack[--ctx_depth];
    return OK;
}
EXPORT CUresult cuCtxSynchronize(void)
{
    note_call(__func__);
    return have_ctx() ? OK : INVALID_CONTEXT;
}
EXPORT CUresult cuStreamSynchronize(void *s)
{
    note_call(__func__);
    return have_ctx() ? OK : INVALID_CONTEXT;
}

/* A 64-bit ELF ends with its section header table: e_shoff + e_shnum * e_shentsize. */
static size_t elf_size(const unsigned char *p)
{
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    return (size_t)(shoff + (uint64_t)shnum * shentsize);
}

EXPORT CUresult cuModuleLoadData(void **m, const void *image)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    const char *p = image;
    int elf = memcmp(p, "\x7f" "ELF", 4) == 0;
    if (!elf && !(strstr(p, ".version") && strstr(p, ".target"))) return INVALID_IMAGE;
    fake_module *fm = calloc(1, sizeof *fm);
    fm->size = elf ? elf_size(image) : strlen(p);
    fm->image = malloc(fm->size);
    memcpy(fm->image, p, fm->size); /* a real driver copies too: the caller may free the image */
    fm->elf = elf;
    fm->dev = current_dev();
    *m = fm;
    return OK;
}
EXPORT CUresult cuModuleUnload(void *m)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    free(((fake_module *)m)->image);
    free(m);
    return OK;
}
/* A cubin's string table holds "name\0"; PTX declares ".entry name(". */
EXPORT CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    note_call(__func__);
    fake_module *fm = m;
    size_t n = strlen(name);
    for (size_t i = 0; i + n + 1 <= fm->size; i++) {
        if (memcmp(fm->image + i, name, n) != 0) continue;
        if (fm->elf ? fm->image[i + n] == '\0' && (i == 0 || fm->image[i - 1] == '\0')
                    : fm->image[i + n] == '(' && i >= 7 && memcmp(fm->image + i - 7, ".entry ", 7) == 0) {
            int k = 0;
            while (k < fm->nfns && fm->fns[k].name != fm->image + i) k++;
            if (k == 16) return INVALID_VALUE;
            if (k == fm->nfns) fm->fns[fm->nfns++] = (fake_function){fm, fm->image + i};
            *f = &fm->fns[k];
            return OK;
        }
    }
    return NOT_FOUND;
}
EXPORT CUresult cuFuncGetAttribute(int *v, int attr, void *f)
{
    note_call(__func__);
    if (!v || !f) return INVALID_VALUE;
    if (attr != 1) return INVALID_VALUE; /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
    *v = static_shared;
    return OK;
}
EXPORT CUresult cuFuncSetAttribute(void *f, int attr, int v)
{
    note_call(__func__);
    if (attr != 8 || v > 232448) return INVALID_VALUE;
    dyn_shared_attr = v;
    return OK;
}
static CUresult fake_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void **params, void **extra)
{
    if (!have_ctx() || ((fake_function *)f)->module->dev != current_dev()) return INVALID_CONTEXT;
    if ((uint64_t)bx * by * bz > 1024 || !params || extra) return INVALID_VALUE;
    /* as the GPU: dynamic memory up to the function's limit, by default 48 KiB less its static arrays */
    int limit = dyn_shared_attr >= 0 ? dyn_shared_attr : 48 * 1024 - static_shared;
    if ((int)shmem > limit) return INVALID_VALUE;
    last_grid[0] = gx, last_grid[1] = gy, last_grid[2] = gz;
    last_block[0] = bx, last_block[1] = by, last_block[2] = bz;
    last_shmem = shmem;
    memcpy(last_args, params[0], sizeof last_args < 312 ? sizeof last_args : 312); /* sizeof(nj_kargs) */
    launches++;
    last_launch_dev = current_dev();
    return OK;
}
EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, void *stream, void **params, void **extra)
{
    note_call(__func__);
    return fake_launch(f, gx, gy, gz, bx, by, bz, shmem, params, extra);
}
/* cuda.h's CUlaunchConfig and CUlaunchAttribute, as laid out there */
typedef struct fake_attr {
    int id;
    char pad[4];
    union {
        char bytes[64];
        int flag; /* programmaticStreamSerializationAllowed, cooperative, ... */
    } value;
} fake_attr;
typedef struct fake_config {
    unsigned grid[3], block[3], shmem;
    void *stream;
    fake_attr *attrs;
    unsigned nattrs;
} fake_config;
static int dependent_launches;

/* Launches with attributes: the one the backend sets (6, programmatic stream serialization) is counted;
 * FAKE_CUDA_EX_FAIL=N makes a driver that refuses it with CUresult N. */
EXPORT CUresult cuLaunchKernelEx(const fake_config *cfg, void *f, void **params, void **extra)
{
    note_call(__func__);
    int dependent = 0;
    for (unsigned i = 0; i < cfg->nattrs; i++) {
        if (cfg->attrs[i].id != 6) return INVALID_VALUE;
        dependent = cfg->attrs[i].value.flag != 0;
    }
    if (dependent && env_int("FAKE_CUDA_EX_FAIL", 0)) return env_int("FAKE_CUDA_EX_FAIL", 0);
    CUresult r = fake_launch(f, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1],
                             cfg->block[2], cfg->shmem, params, extra);
    if (r == OK) dependent_launches += dependent;
    return r;
}

EXPORT CUresult cuMemAlloc_v2(uint64_t *p, size_t n)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    if (n == 0) return INVALID_VALUE;
    *p = (uint64_t)(uintptr_t)malloc(n);
    return OK;
}
EXPORT CUresult cuMemFree_v2(uint64_t p)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    free((void *)(uintptr_t)p);
    return OK;
}
EXPORT CUresult cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t n)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t n)
{
    note_call(__func__);
    if (!have_ctx()) return INVALID_CONTEXT;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}

/* For the test, found with dlsym on the same handle. */
EXPORT int fake_ctx_refs(void) { return ctx_refs; }
EXPORT int fake_ctx_depth(void) { return ctx_depth; }
EXPORT int fake_launches(void) { return launches; }
EXPORT int fake_dependent_launches(void) { return dependent_launches; }
/* every function's static shared memory from now on, and the dynamic limit back to its default */
EXPORT void fake_set_static_shared(int bytes) { static_shared = bytes, dyn_shared_attr = -1; }
EXPORT int fake_last_launch_device(void) { return last_launch_dev; }
/* Calls of entry point `name` so far; NULL: of every entry point. */
EXPORT long fake_calls(const char *name)
{
    long n = 0;
    for (int i = 0; i < FAKE_MAX_NAMES && call_names[i]; i++)
        if (!name || !strcmp(call_names[i], name)) n += call_counts[i];
    return n;
}
EXPORT void fake_last_launch(unsigned grid[3], unsigned block[3], unsigned *shmem, void *args, size_t n)
{
    memcpy(grid, last_grid, sizeof last_grid);
    memcpy(block, last_block, sizeof last_block);
    *shmem = last_shmem;
    memcpy(args, last_args, n < sizeof last_args ? n : sizeof last_args);
}

#else
typedef int nj_fake_libcuda_not_built; /* ISO C wants a translation unit to declare something */
#endif
