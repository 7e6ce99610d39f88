/* The internal backend interface: compile source, load a binary, find a function, launch, and memory.
 * Three backends implement it: cuda (src/backend_cuda.c, Driver API via dlopen), emulator
 * (src/backend_emu.c, host C++ + fibers) and compile-only (cuda's compile step, nothing to run). */
#ifndef NJ_BACKEND_H
#define NJ_BACKEND_H

#include "compile.h"
#include "device.h"

typedef struct nj_backend nj_backend;

/* Launch flags. DEPENDENT: the kernel may start while the kernel before it in the stream still runs
 * (programmatic dependent launch, sm_90 and later); it must wait for it before any global access, as
 * every generated kernel does (prelude: nj_grid_enter). A backend without it launches as usual. */
enum { NJ_LAUNCH_PLAIN = 0u, NJ_LAUNCH_DEPENDENT = 1u };

typedef struct nj_backend_ops {
    const char *name;         /* "cuda", "emulator", "compile-only": messages and logs only */
    nj_backend_kind kind;     /* what callers branch on (never the name) */
    /* Target id that goes into signatures and cache file names, e.g. "sm_90", "emu-x86_64-g++12". */
    const char *(*target)(nj_backend *b);
    /* Compiler id + version for the signature, e.g. "nvrtc-13.0", "g++-12.2.0". */
    const char *(*compiler)(nj_backend *b);
    /* Source -> loadable binary (cubin/PTX or shared object bytes); kernels: how many it defines. */
    nj_status (*compile)(nj_backend *b, const char *source, const char *name, int32_t kernels,
                         nj_compile_result *out);
    /* Binary -> module handle. NJ_ERR_UNSUPPORTED for compile-only. */
    nj_status (*load)(nj_backend *b, const void *bin, size_t size, void **module);
    nj_status (*function)(nj_backend *b, void *module, const char *name, void **fn);
    /* args points to one nj_kargs, passed by value as the kernel's single parameter; flags: NJ_LAUNCH_*. */
    nj_status (*launch)(nj_backend *b, void *fn, const uint32_t grid[3], const int32_t block[3], uint32_t shmem,
                        void *stream, uint32_t flags, const void *args, size_t args_size);
    void (*unload)(nj_backend *b, void *module);
    nj_status (*mem_alloc)(nj_backend *b, size_t bytes, void **out);
    void (*mem_free)(nj_backend *b, void *p);
    nj_status (*upload)(nj_backend *b, void *dst, const void *src, size_t bytes);
    nj_status (*download)(nj_backend *b, void *dst, const void *src, size_t bytes);
    nj_status (*synchronize)(nj_backend *b, void *stream);
    void (*destroy)(nj_backend *b);
} nj_backend_ops;

struct nj_backend {
    const nj_backend_ops *ops;
    nj_device_props props;
};

typedef struct nj_backend_config {
    int32_t device;   /* CUDA ordinal */
    int32_t arch;     /* 0 = device's; required for compile-only */
    uint32_t flags;   /* nj_context_flags (emulator options) */
    uint64_t seed;    /* emulator shuffle seed */
} nj_backend_config;

/* CUDA: NJ_ERR_NO_DRIVER when libcuda.so.1 is missing or is the toolkit stub; NJ_ERR_NO_DEVICE when
 * there is no device. Never crashes or hangs on a machine without a GPU. */
NJ_HIDDEN nj_status nj_backend_cuda_create(const nj_backend_config *cfg, nj_backend **out);
NJ_HIDDEN nj_status nj_backend_compile_only_create(const nj_backend_config *cfg, nj_backend **out);
NJ_HIDDEN nj_status nj_backend_emu_create(const nj_backend_config *cfg, nj_backend **out);

#endif
