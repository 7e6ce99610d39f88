/* normjit: run-time generated CUDA kernels for normalization layers.
 *
 * A caller describes a problem (nj_problem_desc), gets a plan from a context (nj_plan_get), and launches
 * it (nj_forward / nj_backward). Kernels are rendered from templates, compiled with NVRTC, cached on disk
 * under a signature and loaded through the CUDA Driver API (or run on the CPU by the emulator backend).
 * Ownership: `get` = the library owns it until its context is destroyed; `create` = the caller destroys it.
 * Every function returns an nj_status; nj_last_error() gives the detail of the last failure on this thread.
 */
#ifndef NORMJIT_H
#define NORMJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NJ_BUILDING_LIBRARY)
#define NJ_API __attribute__((visibility("default")))
#else
#define NJ_API
#endif

#define NJ_VERSION_MAJOR 0
#define NJ_VERSION_MINOR 1
#define NJ_VERSION_PATCH 0
#define NJ_VERSION_NUMBER (NJ_VERSION_MAJOR * 10000 + NJ_VERSION_MINOR * 100 + NJ_VERSION_PATCH)

/* "MAJOR.MINOR.PATCH" of the library actually loaded (may differ from the header's macros). */
NJ_API const char *nj_version(void);
NJ_API uint32_t nj_version_number(void);

/* ---- Status codes: one table; codes are never renumbered, new ones go at the end. ---- */
#define NJ_STATUS_TABLE(X)                                                                   \
    X(NJ_OK, 0, "success")                                                                   \
    X(NJ_ERR_NULL_POINTER, 1, "a required pointer is NULL")                                  \
    X(NJ_ERR_BAD_STRUCT_SIZE, 2, "struct_size does not match a known version of the struct") \
    X(NJ_ERR_BAD_RANK, 3, "tensor rank out of range (1 to 8)")                               \
    X(NJ_ERR_BAD_EXTENT, 4, "negative extent")                                               \
    X(NJ_ERR_OVERFLOW, 5, "extents or strides overflow 64-bit element offsets")              \
    X(NJ_ERR_BAD_STRIDE, 6, "negative or invalid stride")                                    \
    X(NJ_ERR_OVERLAP, 7, "an output tensor's elements overlap")                              \
    X(NJ_ERR_BAD_AXIS, 8, "axis out of range")                                               \
    X(NJ_ERR_DUPLICATE_AXIS, 9, "axis listed twice")                                         \
    X(NJ_ERR_EMPTY_REDUCTION, 10, "no axis to normalize over")                               \
    X(NJ_ERR_SHAPE_MISMATCH, 11, "tensor shapes do not match")                               \
    X(NJ_ERR_BAD_GROUPS, 12, "channels not divisible by groups")                             \
    X(NJ_ERR_BAD_DTYPE, 13, "unsupported dtype or dtype pairing")                            \
    X(NJ_ERR_BAD_FLAGS, 14, "unknown or contradictory flags")                                \
    X(NJ_ERR_BAD_ACTIVATION, 15, "unknown activation")                                       \
    X(NJ_ERR_PARSE, 16, "malformed problem text")                                            \
    X(NJ_ERR_OUT_OF_MEMORY, 17, "out of host memory")                                        \
    X(NJ_ERR_TEMPLATE, 18, "kernel template failed to render")                               \
    X(NJ_ERR_NVRTC_MISSING, 19, "NVRTC library not found")                                   \
    X(NJ_ERR_COMPILE, 20, "kernel compilation failed")                                       \
    X(NJ_ERR_NO_DRIVER, 21, "no CUDA driver on this machine")                                \
    X(NJ_ERR_NO_DEVICE, 22, "no CUDA device available")                                      \
    X(NJ_ERR_CUDA, 23, "CUDA driver call failed")                                            \
    X(NJ_ERR_CACHE_IO, 24, "cache file I/O failed")                                          \
    X(NJ_ERR_CACHE_UNSAFE, 25, "cache root refused as unsafe")                               \
    X(NJ_ERR_CACHE_CORRUPT, 26, "cache entry failed verification")                           \
    X(NJ_ERR_LOCK_TIMEOUT, 27, "timed out waiting for a cache lock")                         \
    X(NJ_ERR_NOT_CACHED, 28, "kernel not in cache and compilation is disabled")              \
    X(NJ_ERR_UNSUPPORTED, 29, "not supported")                                               \
    X(NJ_ERR_EMULATOR, 30, "emulated kernel failed (barrier divergence, deadlock, fault)")   \
    X(NJ_ERR_HOST_COMPILER, 31, "host C++ compiler for the emulator failed or is missing")   \
    X(NJ_ERR_BAD_ARGUMENT, 32, "invalid argument")                                           \
    X(NJ_ERR_INTERNAL, 33, "internal error")                                                 \
    X(NJ_ERR_CACHE_UNTRUSTED, 34, "cache data not authenticated (no key, another key, or forged)")

typedef enum nj_status {
#define NJ_STATUS_ENUM_(name, code, text) name = code,
    NJ_STATUS_TABLE(NJ_STATUS_ENUM_)
#undef NJ_STATUS_ENUM_
} nj_status;

/* "NJ_ERR_BAD_AXIS"; "NJ_UNKNOWN_STATUS" for a code not in the table. Static storage. */
NJ_API const char *nj_status_name(nj_status s);
/* One-line description of the code. Static storage. */
NJ_API const char *nj_status_string(nj_status s);
/* Detail of the last failure on the calling thread (field name, NVRTC log, path, CUresult name...).
 * Owned by the library; valid until the next normjit call on this thread. Empty string if none. */
NJ_API const char *nj_last_error(void);

/* ---- Tensors ---- */
typedef enum nj_dtype { NJ_DTYPE_NONE = 0, NJ_F32 = 1, NJ_F16 = 2, NJ_BF16 = 3 } nj_dtype;

#define NJ_MAX_RANK 8

/* A strided tensor: extents and strides in elements (not bytes), outermost axis first by convention. */
typedef struct nj_tensor_desc {
    int32_t dtype; /* nj_dtype; NJ_DTYPE_NONE in an optional operand means "like x" */
    int32_t rank;  /* 1..NJ_MAX_RANK; 0 in an optional operand means "same extents and strides as x" */
    int64_t extents[NJ_MAX_RANK];
    int64_t strides[NJ_MAX_RANK];
} nj_tensor_desc;

/* Fills a row-major contiguous description. */
NJ_API nj_status nj_tensor_contiguous(nj_tensor_desc *t, nj_dtype dtype, int32_t rank, const int64_t *extents);

/* ---- Problem ---- */
typedef enum nj_activation {
    NJ_ACT_NONE = 0,
    NJ_ACT_RELU = 1,
    NJ_ACT_SILU = 2,
    NJ_ACT_GELU_TANH = 3,
    NJ_ACT_GELU_ERF = 4,
    NJ_ACT_SIGMOID = 5
} nj_activation;

enum nj_flags {
    NJ_FLAG_CENTER = 1u << 0,       /* subtract the mean; off = RMS normalization */
    NJ_FLAG_SCALE = 1u << 1,        /* multiply by gamma */
    NJ_FLAG_BIAS = 1u << 2,         /* add beta */
    NJ_FLAG_RESIDUAL = 1u << 3,     /* x := x + residual before normalizing */
    NJ_FLAG_RESIDUAL_OUT = 1u << 4, /* write x + residual out (needs NJ_FLAG_RESIDUAL) */
    NJ_FLAG_SAVE_STATS = 1u << 5    /* write float32 mean and rstd (rstd only under RMS) */
};
#define NJ_FLAGS_ALL 0x3Fu

/* Which preset built the descriptor: a label for the text form, it never changes the kernels. */
typedef enum nj_preset {
    NJ_PRESET_GENERAL = 0,
    NJ_PRESET_LAYERNORM = 1,
    NJ_PRESET_RMSNORM = 2,
    NJ_PRESET_INSTANCENORM = 3,
    NJ_PRESET_GROUPNORM = 4,
    NJ_PRESET_BATCHNORM = 5
} nj_preset;

/* The general problem (DESIGN.md, Semantics): normalize x over reduce_axes; gamma/beta span feature_axes.
 * Axis sets are bit masks over x's axes (bit i = axis i), so listing order cannot matter.
 * Zero the whole struct before filling it (or use a preset), and set struct_size = sizeof(nj_problem_desc). */
typedef struct nj_problem_desc {
    uint32_t struct_size;
    uint32_t flags;        /* nj_flags */
    int32_t activation;    /* nj_activation, applied after the affine */
    int32_t param_dtype;   /* gamma/beta dtype: NJ_F32 or x's dtype; NJ_DTYPE_NONE = NJ_F32 */
    uint32_t reduce_axes;  /* bit mask over x's axes */
    uint32_t feature_axes; /* bit mask over x's axes; gamma/beta are x restricted to these, contiguous */
    int32_t preset;        /* nj_preset, label only */
    int32_t groups;        /* GroupNorm label only (the split is in x's shape); 0 otherwise */
    nj_tensor_desc x;            /* input; in backward the (residual-summed) input that was normalized */
    nj_tensor_desc y;            /* output */
    nj_tensor_desc residual;     /* NJ_FLAG_RESIDUAL */
    nj_tensor_desc residual_out; /* NJ_FLAG_RESIDUAL_OUT */
    nj_tensor_desc dy;           /* backward: gradient of y */
    nj_tensor_desc dx;           /* backward: gradient of x (also the gradient of residual) */
} nj_problem_desc;

/* Checks a descriptor; on failure the status names the class and nj_last_error() names the field. */
NJ_API nj_status nj_problem_validate(const nj_problem_desc *p);

/* Presets. Each zero-fills *p first. `flags` are nj_flags (NJ_FLAG_CENTER is set or cleared by the preset);
 * dtype is x's dtype, used for every activation tensor. */
/* PyTorch LayerNorm: normalize (and scale) over the last `last_k` axes of a contiguous tensor. */
NJ_API nj_status nj_preset_layernorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                     int32_t last_k, uint32_t flags);
/* Keras LayerNorm: any axis list over any strided x; affine over the same axes. */
NJ_API nj_status nj_preset_layernorm_axes(nj_problem_desc *p, const nj_tensor_desc *x, const int32_t *axes,
                                          int32_t naxes, uint32_t flags);
/* RMSNorm over the last `last_k` axes of a contiguous tensor. */
NJ_API nj_status nj_preset_rmsnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                   int32_t last_k, uint32_t flags);
/* InstanceNorm: x is [N, C, spatial...] (channels_last=0) or [N, spatial..., C] (channels_last=1), given in
 * that logical order with 1 to 3 spatial axes; normalize over spatial, affine per channel. */
NJ_API nj_status nj_preset_instancenorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                        int32_t channels_last, uint32_t flags);
/* GroupNorm: logical extents [N, C, spatial...] (always given in this order); memory layout NCHW
 * (channels_last=0) or NHWC (channels_last=1). C is viewed as (G, C/G) through strides, no copy. */
NJ_API nj_status nj_preset_groupnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                     int32_t groups, int32_t channels_last, uint32_t flags);
/* BatchNorm with batch statistics: logical extents [N, C, spatial...]; normalize over N and spatial. */
NJ_API nj_status nj_preset_batchnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                     int32_t channels_last, uint32_t flags);

/* Text form, one line (used by manifests, logs and the tool). Writes at most cap bytes incl. the NUL;
 * *len (if not NULL) gets the length needed. NJ_ERR_BAD_ARGUMENT if cap is too small. */
NJ_API nj_status nj_problem_to_text(const nj_problem_desc *p, char *buf, size_t cap, size_t *len);
/* Parses one line. A `*` batch extent is read as `batch_default`. */
NJ_API nj_status nj_problem_from_text(const char *text, int64_t batch_default, nj_problem_desc *p);

/* ---- Context ---- */
typedef struct nj_context nj_context;
typedef struct nj_plan nj_plan;

typedef enum nj_backend_kind {
    NJ_BACKEND_AUTO = 0,        /* NORMJIT_BACKEND, else cuda */
    NJ_BACKEND_CUDA = 1,        /* real GPU through the Driver API */
    NJ_BACKEND_EMULATOR = 2,    /* generated kernels on the CPU; pointers are host pointers */
    NJ_BACKEND_COMPILE_ONLY = 3 /* compile and cache, never launch (build machines) */
} nj_backend_kind;

typedef enum nj_log_level { NJ_LOG_OFF = 0, NJ_LOG_ERROR = 1, NJ_LOG_WARN = 2, NJ_LOG_INFO = 3, NJ_LOG_DEBUG = 4 } nj_log_level;
typedef void (*nj_log_fn)(void *user, nj_log_level level, const char *message);

enum nj_context_flags {
    NJ_CTX_NO_COMPILE = 1u << 0,      /* never compile: a cache miss is NJ_ERR_NOT_CACHED (request paths) */
    NJ_CTX_NO_DISK_CACHE = 1u << 1,   /* keep compiled kernels in memory only */
    NJ_CTX_EMU_SHUFFLE = 1u << 2,     /* emulator: shuffle thread order between barriers */
    NJ_CTX_EMU_POISON = 1u << 3,      /* emulator: poison shared memory before each launch */
    NJ_CTX_EMU_SMALL_GRID = 1u << 4   /* emulator: grids at most 7 blocks wide (more go along y), which checks
                                         the kernels' block numbering of grids past 2^31 - 1 blocks */
};

typedef struct nj_context_options {
    uint32_t struct_size;
    int32_t backend;          /* nj_backend_kind */
    int32_t arch;             /* target SM, e.g. 80 or 90; 0 = the device's (required for compile-only) */
    int32_t device;           /* CUDA device ordinal */
    uint32_t flags;           /* nj_context_flags */
    int32_t max_parallel_compiles; /* cores NVRTC compiles use at once, process-wide (a source of several
                                      kernels takes idle ones); 0 = number of cores */
    uint64_t cache_max_bytes; /* 0 = 1 GiB */
    const char *cache_dir;    /* NULL = NORMJIT_CACHE_DIR, $XDG_CACHE_HOME/normjit, ~/.cache/normjit; copied */
    uint64_t seed;            /* emulator shuffle seed */
    int32_t log_level;        /* nj_log_level; messages go to log_fn only */
    nj_log_fn log_fn;
    void *log_user;
    /* Shared cache tier behind the disk cache: redis://[:password@]host:port[/db][?prefix=..&ttl=..]; NULL =
     * NORMJIT_REMOTE_CACHE, else none. Copied. README "Fleet cache (Redis)". */
    const char *remote_cache;
} nj_context_options;

/* Fills defaults (struct_size set, everything else automatic). */
NJ_API void nj_context_options_init(nj_context_options *o);
/* Creates a context; opts may be NULL. The caller destroys it. */
NJ_API nj_status nj_context_create(const nj_context_options *opts, nj_context **out);
/* Destroys the context and every plan it owns. NULL is a no-op. */
NJ_API void nj_context_destroy(nj_context *ctx);

typedef struct nj_cache_stats {
    uint64_t hits_memory, hits_disk, misses, compiles, compile_failures, evictions, corrupt_entries;
    uint64_t disk_bytes, disk_entries;
    /* Kernels compiled but not stored (no space, read-only root, I/O error); lock waits given up (a
     * stopped holder, or the NORMJIT_CACHE_LOCK_TIMEOUT_MS bound), after which the kernel was compiled
     * without the lock. */
    uint64_t store_failures, lock_fallbacks;
    /* NJ_OK when the disk cache is in use, else why the context works in memory only (e.g.
     * NJ_ERR_CACHE_UNSAFE for a refused root; also logged at NJ_LOG_WARN when the context is created). */
    int32_t disk_status;
} nj_cache_stats;
NJ_API nj_status nj_context_cache_stats(nj_context *ctx, nj_cache_stats *out);
/* The shared Redis tier. Set struct_size first. enabled: a tier is attached; status: NJ_OK, else why it is
 * off (NJ_ERR_UNSUPPORTED: built without hiredis, or no disk cache; NJ_ERR_BAD_ARGUMENT: bad URL) or
 * failing (NJ_ERR_CACHE_IO: the last command or connect failed; calls carry on without it). rejected:
 * values refused by verification or the size bound; errors: failed connects and commands; skipped: uses
 * not tried while backed off; lock_waits / lock_fallbacks: waits for another host's compile, given up. */
typedef struct nj_remote_cache_stats {
    uint32_t struct_size;
    int32_t enabled, status;
    uint64_t hits, misses, rejected, stores, errors, skipped, lock_waits, lock_fallbacks;
} nj_remote_cache_stats;
NJ_API nj_status nj_context_remote_cache_stats(nj_context *ctx, nj_remote_cache_stats *out);
/* Backend actually in use, target arch, and the cache root ("" when memory only). Owned by the context. */
NJ_API nj_backend_kind nj_context_backend(const nj_context *ctx);
NJ_API int32_t nj_context_arch(const nj_context *ctx);
NJ_API const char *nj_context_cache_dir(const nj_context *ctx);

/* ---- Plans ---- */
typedef enum nj_pass { NJ_PASS_FORWARD = 1, NJ_PASS_BACKWARD = 2 } nj_pass;

/* Looks up or builds the plan for a problem, with the kernels of `passes` (nj_pass bits) compiled or
 * loaded from the disk cache. The context owns the plan. A later call with an equal problem is a
 * lock-free-read table hit: no allocation, no compile. */
NJ_API nj_status nj_plan_get(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, nj_plan **out);
/* Describes the plan (family, block, vector width, launches, signatures) in text. Same buffer rules as
 * nj_problem_to_text. */
NJ_API nj_status nj_plan_describe(const nj_plan *plan, char *buf, size_t cap, size_t *len);
/* Bytes of device workspace a pass needs (0 when none); pass it 16-byte aligned (cudaMalloc's are). */
NJ_API size_t nj_plan_workspace_size(const nj_plan *plan, nj_pass pass);

/* Arguments: device pointers (host pointers under the emulator) laid out as the descriptor says.
 * Pointers not used by the problem's flags must be NULL. `stream` is a CUstream (NULL = default). */
typedef struct nj_forward_args {
    uint32_t struct_size;
    float eps;
    const void *x, *residual, *gamma, *beta;
    void *y, *residual_out;
    float *mean, *rstd; /* NJ_FLAG_SAVE_STATS; mean is NULL under RMS */
    void *workspace;
    void *stream;
} nj_forward_args;

typedef struct nj_backward_args {
    uint32_t struct_size;
    const void *dy, *x, *gamma, *beta; /* beta is needed only to recompute an activation's input */
    const float *mean, *rstd;          /* saved by the forward pass (mean NULL under RMS) */
    void *dx;
    void *dgamma, *dbeta; /* in param dtype; NULL to skip */
    void *workspace;
    void *stream;
} nj_backward_args;

NJ_API nj_status nj_forward(nj_plan *plan, const nj_forward_args *args);
NJ_API nj_status nj_backward(nj_plan *plan, const nj_backward_args *args);

/* Memory helpers for the context's backend (device memory under cuda, host memory under the emulator),
 * so tools and tests can drive any backend. */
NJ_API nj_status nj_mem_alloc(nj_context *ctx, size_t bytes, void **out);
NJ_API void nj_mem_free(nj_context *ctx, void *p);
NJ_API nj_status nj_mem_upload(nj_context *ctx, void *dst, const void *host_src, size_t bytes);
NJ_API nj_status nj_mem_download(nj_context *ctx, void *host_dst, const void *src, size_t bytes);
NJ_API nj_status nj_synchronize(nj_context *ctx, void *stream);

/* ---- Host helpers ---- */
NJ_API size_t nj_dtype_size(nj_dtype d);
NJ_API const char *nj_dtype_name(nj_dtype d);
NJ_API float nj_half_to_float(uint16_t h);
NJ_API uint16_t nj_float_to_half(float f);
NJ_API float nj_bf16_to_float(uint16_t h);
NJ_API uint16_t nj_float_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif
