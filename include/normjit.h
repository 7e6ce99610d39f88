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
 * Owned by the library; valid until the next normjit call on this thread. Every function returning an
 * nj_status clears it on entry, so after a call that returned NJ_OK it is the empty string; functions
 * returning something else (nj_status_name, nj_context_arch, nj_plan_workspace_size, ...) leave it alone.
 *
 * Contract of every public function: a NULL where a pointer is required is NJ_ERR_NULL_POINTER (the
 * accessors that return a value give a neutral one: NJ_BACKEND_AUTO, 0, "", 0 bytes); unknown flag bits are
 * NJ_ERR_BAD_FLAGS; out-of-range options and counts are NJ_ERR_BAD_ARGUMENT (or the axis/rank status),
 * checked before any array is read; nothing is written through an output pointer on failure. */
NJ_API const char *nj_last_error(void);

/* ---- Tensors ---- */
typedef enum nj_dtype { NJ_DTYPE_NONE = 0, NJ_F32 = 1, NJ_F16 = 2, NJ_BF16 = 3 } nj_dtype;

#define NJ_MAX_RANK 8
/* Most elements a tensor may have (2^48, far beyond any device's memory), and element offsets reach at
 * most 2^60: larger problems are refused by validation with NJ_ERR_OVERFLOW, so that no product the
 * planner forms (grids, workspace sizes, offsets) can overflow 64 bits. */
#define NJ_MAX_ELEMENTS (INT64_C(1) << 48)

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

/* The general problem (docs/design.md, Semantics): normalize x over reduce_axes; gamma/beta span feature_axes.
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

/* Layouts of the small operands (all contiguous, row-major, dense):
 * - gamma, beta, dgamma, dbeta: x restricted to feature_axes, in x's axis order: element (i_a, i_b, ...)
 *   over the feature axes a < b < ... sits at the row-major index over their extents. Their dtype is
 *   param_dtype (NJ_DTYPE_NONE = float32; the presets set it to x's dtype).
 * - mean, rstd: float32, x restricted to the kept axes (every axis not in reduce_axes), in x's axis order,
 *   row-major. Under RMS normalization (no NJ_FLAG_CENTER) mean is neither written nor read.
 * Training: the forward pass must have NJ_FLAG_SAVE_STATS to write mean and rstd; the backward pass reads
 * exactly those (with the same x, gamma and beta) and does not recompute them. Without SAVE_STATS the
 * forward is inference only. */
/* Number of mean (and of rstd) values a problem has: the product of x's kept extents. */
NJ_API nj_status nj_problem_stat_count(const nj_problem_desc *p, int64_t *count);
/* Extents of gamma/beta (x's feature extents in axis order) into extents[0 .. *rank - 1], and their
 * element count; rank 0 and count 0 when the problem has no scale or bias (rank 0, count 1: one scalar
 * gamma when it has no feature axis). extents holds NJ_MAX_RANK. */
NJ_API nj_status nj_problem_param_extents(const nj_problem_desc *p, int32_t *rank, int64_t extents[NJ_MAX_RANK],
                                          int64_t *count);

/* Presets. Each zero-fills *p first. `flags` are nj_flags (NJ_FLAG_CENTER is set or cleared by the preset);
 * dtype is x's dtype, used for every activation tensor AND for gamma/beta (param_dtype = dtype, as a
 * framework module's weights): for float32 weights with half-precision activations set
 * p->param_dtype = NJ_F32 after the call. channels_last is 0 or 1 (else NJ_ERR_BAD_ARGUMENT). */
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
 * *len (if not NULL) gets the length needed. NJ_ERR_BAD_ARGUMENT if cap is too small. A batch axis is
 * printed as `*` with `batch=N` beside it: nj_problem_from_text gives back an equal problem (same
 * nj_problem_validate result, same kernels, same batch). */
NJ_API nj_status nj_problem_to_text(const nj_problem_desc *p, char *buf, size_t cap, size_t *len);
/* Parses one line. A `*` batch extent is read as `batch=` when the line has one, else `batch_default`. */
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
    NJ_CTX_EMU_SMALL_GRID = 1u << 4,  /* emulator: grids at most 7 blocks wide (more go along y), which checks
                                         the kernels' block numbering of grids past 2^31 - 1 blocks */
    /* A pass whose kernels are neither in memory nor on disk runs the generic kernels at once (one module
     * per pass, x dtype and gamma dtype, for every problem: nj_context_warm_generic) while its own kernels
     * compile on a background pool (max_background_compiles threads); the plan switches to them, atomically,
     * once they are loaded. With NJ_CTX_NO_COMPILE too, the pool still compiles: the request path never
     * does. NJ_CTX_NO_COMPILE alone: such a pass stays on the generic kernels when those are cached (else
     * NJ_ERR_NOT_CACHED). nj_plan_workspace_size covers both kernel sets in these contexts. */
    NJ_CTX_ASYNC_COMPILE = 1u << 5
};

typedef struct nj_context_options {
    uint32_t struct_size;
    int32_t backend;          /* nj_backend_kind */
    int32_t arch;             /* target SM, e.g. 80 or 90; 0 = the device's (required for compile-only) */
    int32_t device;           /* CUDA device ordinal */
    uint32_t flags;           /* nj_context_flags */
    int32_t max_parallel_compiles; /* cores NVRTC compiles use at once, process-wide (a source of several
                                      kernels takes idle ones); 0 = number of cores; negative: refused */
    uint64_t cache_max_bytes; /* 0 = 1 GiB */
    const char *cache_dir;    /* NULL = NORMJIT_CACHE_DIR, $XDG_CACHE_HOME/normjit, ~/.cache/normjit; copied */
    uint64_t seed;            /* emulator shuffle seed */
    int32_t log_level;        /* nj_log_level; messages go to log_fn only */
    nj_log_fn log_fn;
    void *log_user;
    /* Shared cache tier behind the disk cache: redis://[:password@]host:port[/db][?prefix=..&ttl=..]; NULL =
     * NORMJIT_REMOTE_CACHE, else none. Copied. README "Fleet cache (Redis)". */
    const char *remote_cache;
    /* NJ_CTX_ASYNC_COMPILE: background compile threads, 1 to 64; 0 = 1. */
    int32_t max_background_compiles;
} nj_context_options;
/* The struct before remote_cache: still accepted as struct_size, the missing field taken as NULL. */
#define NJ_CONTEXT_OPTIONS_SIZE_V1 offsetof(nj_context_options, remote_cache)
/* The struct before max_background_compiles (taken as 0). */
#define NJ_CONTEXT_OPTIONS_SIZE_V2 offsetof(nj_context_options, max_background_compiles)

/* Fills defaults (struct_size set, everything else automatic). */
NJ_API void nj_context_options_init(nj_context_options *o);
/* Creates a context; opts may be NULL. The caller destroys it. Unknown flag bits are NJ_ERR_BAD_FLAGS;
 * a backend, log level, arch, device or max_parallel_compiles out of range is NJ_ERR_BAD_ARGUMENT. */
NJ_API nj_status nj_context_create(const nj_context_options *opts, nj_context **out);
/* Destroys the context and every plan it owns. NULL is a no-op. */
NJ_API void nj_context_destroy(nj_context *ctx);

/* Set struct_size = sizeof(nj_cache_stats) before the call: the library fills the fields that fit in it, so
 * a caller built against an older header (fewer fields at the end) keeps working. */
typedef struct nj_cache_stats {
    uint32_t struct_size;
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
/* Backend actually in use, target arch, and the cache root ("" when memory only). Owned by the context.
 * A NULL context gives NJ_BACKEND_AUTO, 0 and "". */
NJ_API nj_backend_kind nj_context_backend(const nj_context *ctx);
NJ_API int32_t nj_context_arch(const nj_context *ctx);
NJ_API const char *nj_context_cache_dir(const nj_context *ctx);

/* ---- Serving: generic kernels and background compiles (NJ_CTX_ASYNC_COMPILE, NJ_CTX_NO_COMPILE) ---- */
/* Set struct_size = sizeof(nj_serve_stats) first (fields that fit are filled, as nj_cache_stats).
 * generic_launches: launches of passes that ran the generic kernels; generic_passes: plan passes (and
 * variants) that went generic; background_jobs: builds the pool finished, background_compiles: the
 * compiles they made, background_failures: builds that failed (the pass stays generic, logged);
 * switches: passes moved from the generic kernels to their own; background_pending: queued or running. */
typedef struct nj_serve_stats {
    uint32_t struct_size;
    uint64_t generic_launches, generic_passes, background_jobs, background_compiles, background_failures, switches;
    uint64_t background_pending;
} nj_serve_stats;
NJ_API nj_status nj_context_serve_stats(nj_context *ctx, nj_serve_stats *out);
/* Returns once the background pool has nothing queued or running (tests, shutdown, benchmarks).
 * nj_context_destroy does the same before it frees anything: a compile in flight still reaches the cache. */
NJ_API nj_status nj_context_wait_background(nj_context *ctx);
/* Compiles (or loads) the generic modules a problem's passes would use (its x and gamma dtypes), so that
 * an async or no-compile context can serve problems it has never seen; also loads them in a context that
 * launches. *compiled (optional) gets the number compiled now. */
NJ_API nj_status nj_context_warm_generic(nj_context *ctx, const nj_problem_desc *p, uint32_t passes,
                                         int32_t *compiled);

/* ---- Plans ---- */
typedef enum nj_pass { NJ_PASS_FORWARD = 1, NJ_PASS_BACKWARD = 2 } nj_pass;

/* Looks up or builds the plan for a problem, with the kernels of `passes` (nj_pass bits, at least one)
 * compiled or loaded from the disk cache. The context owns the plan. A later call with an equal problem is a
 * lock-free-read table hit: no allocation, no compile. The backward pass of a problem with scale or bias
 * is NJ_ERR_UNSUPPORTED past 2^31 - 1 gamma elements, or past 2^31 - 1 elements per batch row and gamma
 * element (its deterministic column sums index in 32 bits). */
NJ_API nj_status nj_plan_get(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, nj_plan **out);
/* Describes the plan (family, block, vector width, launches, signatures) in text. Same buffer rules as
 * nj_problem_to_text. */
NJ_API nj_status nj_plan_describe(const nj_plan *plan, char *buf, size_t cap, size_t *len);
/* Bytes of device workspace a pass needs for the plan's batch (0 when none, and 0 for a NULL plan); pass
 * it 16-byte aligned (cudaMalloc's are) with its size in the args' workspace_size. */
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
    size_t workspace_size; /* bytes at `workspace`: less than nj_plan_workspace_size is refused before any
                              launch (NJ_ERR_BAD_ARGUMENT). Added in 0.1 revision 2: a struct_size of
                              NJ_FORWARD_ARGS_SIZE_V1 (without it) is still accepted, unchecked. */
} nj_forward_args;
#define NJ_FORWARD_ARGS_SIZE_V1 offsetof(nj_forward_args, workspace_size)

typedef struct nj_backward_args {
    uint32_t struct_size;
    const void *dy, *x, *gamma, *beta; /* beta is needed only to recompute an activation's input */
    const float *mean, *rstd;          /* saved by the forward pass (mean NULL under RMS) */
    void *dx;
    void *dgamma, *dbeta; /* in param dtype; NULL to skip */
    void *workspace;
    void *stream;
    size_t workspace_size; /* as in nj_forward_args; NJ_BACKWARD_ARGS_SIZE_V1 structs lack it */
    float eps;             /* the forward's eps (>= 0). Read only by sets of one element (two when centred),
                              whose dx is eps * rstd^3 * (g - mean(g)) exactly, where the general form is a
                              difference of near-equal terms (up to 3% off). Added in 0.1 revision 3:
                              NJ_BACKWARD_ARGS_SIZE_V2 structs (without it) get the general form there. */
} nj_backward_args;
#define NJ_BACKWARD_ARGS_SIZE_V1 offsetof(nj_backward_args, workspace_size)
#define NJ_BACKWARD_ARGS_SIZE_V2 offsetof(nj_backward_args, eps)

NJ_API nj_status nj_forward(nj_plan *plan, const nj_forward_args *args);
NJ_API nj_status nj_backward(nj_plan *plan, const nj_backward_args *args);

/* Memory helpers for the context's backend (device memory under cuda, host memory under the emulator),
 * so tools and tests can drive any backend. */
NJ_API nj_status nj_mem_alloc(nj_context *ctx, size_t bytes, void **out);
NJ_API void nj_mem_free(nj_context *ctx, void *p);
NJ_API nj_status nj_mem_upload(nj_context *ctx, void *dst, const void *host_src, size_t bytes);
NJ_API nj_status nj_mem_download(nj_context *ctx, void *host_dst, const void *src, size_t bytes);
NJ_API nj_status nj_synchronize(nj_context *ctx, void *stream);

/* ---- Warmup: compile problems into the cache ahead of serving (the CLI's `normjit warmup` is a client) ----
 * Each problem's passes get their main kernels and, where they use vector accesses, the unaligned variant
 * (what a call with misaligned pointers runs), so that a context created with NJ_CTX_NO_COMPILE on the same
 * cache serves every call. Works with every backend, compile-only included; nothing is launched. */
#define NJ_WARMUP_VERIFY 1u /* afterwards, look every warmed problem up again through a context that never
                               compiles, on the same cache (what a request path would meet) */
/* By default each problem's generic modules (its passes, x dtype and gamma dtype: nj_context_warm_generic)
 * are warmed too, so that an async or no-compile context on this cache serves unseen problems of those
 * dtypes at once; they are shared, so a manifest compiles each once (counted in `compiled` where it is).
 * This flag leaves them out. */
#define NJ_WARMUP_NO_GENERIC 2u

/* One problem's outcome. The layout is fixed within an ABI version (results are arrays). */
typedef struct nj_warmup_result {
    int32_t index;           /* position in the list, or among the manifest's problem lines */
    int32_t line;            /* manifest line number (1-based); 0 for a descriptor list */
    nj_status status;        /* NJ_OK, or the failure (a bad manifest line: its parse status) */
    nj_status verify_status; /* NJ_WARMUP_VERIFY: NJ_OK, or why a context that never compiles missed a
                                kernel (NJ_ERR_NOT_CACHED when one was not stored); otherwise NJ_OK */
    int32_t compiled, cached; /* kernel sets compiled now, found already cached */
    double seconds;          /* wall time of this problem's warmup */
    char message[1024];      /* failure detail: "fwd pass: NJ_ERR_X: ..." per failing pass, or the parse or
                                verify detail; "" when all is well */
} nj_warmup_result;

/* Called once per problem as it finishes (a bad manifest line first, before any compile), from a worker
 * thread, one call at a time; done counts finished problems out of total. */
typedef void (*nj_warmup_progress_fn)(void *user, const nj_warmup_result *result, int32_t done, int32_t total);

typedef struct nj_warmup_options {
    uint32_t struct_size;
    uint32_t passes; /* nj_pass bits; 0 = forward and backward */
    int32_t jobs;    /* worker threads; 0 = the number of cores (never more than the problems) */
    uint32_t flags;  /* NJ_WARMUP_* */
    nj_warmup_progress_fn progress;
    void *progress_user;
} nj_warmup_options;
NJ_API void nj_warmup_options_init(nj_warmup_options *o);

/* Warms count problems in parallel; results (may be NULL) gets count entries. Returns NJ_OK when every
 * problem was warmed (and verified, with NJ_WARMUP_VERIFY), else the status of the first problem in list
 * order that was not (results say which and why), or why the verification could not run. Bad arguments
 * fail before anything is compiled; NJ_WARMUP_VERIFY on a context without a disk cache is NJ_ERR_CACHE_IO
 * (nothing would persist). */
NJ_API nj_status nj_warmup(nj_context *ctx, const nj_problem_desc *problems, int32_t count,
                           const nj_warmup_options *o, nj_warmup_result *results);
/* A manifest: one problem per line in the text form, '#' starts a comment, blank lines are skipped, a
 * '*' batch extent is read as 1. A line that does not parse (or holds a NUL byte, or is longer than 4096
 * bytes) is a failed result of its own; the others are warmed all the same. *results (free with
 * nj_warmup_results_free) and *count get one result per problem line. */
NJ_API nj_status nj_warmup_manifest(nj_context *ctx, const char *text, size_t len, const nj_warmup_options *o,
                                    nj_warmup_result **results, int32_t *count);
/* The same, reading the manifest from a file (at most 64 MiB). */
NJ_API nj_status nj_warmup_manifest_file(nj_context *ctx, const char *path, const nj_warmup_options *o,
                                         nj_warmup_result **results, int32_t *count);
NJ_API void nj_warmup_results_free(nj_warmup_result *results);

/* ---- Cache administration (the CLI's `normjit cache` is a client of these) ----
 * A handle on a cache root, opened on its own (no context needed: build machines, admin scripts) or
 * borrowed from a context (same root, same counters; the context must outlive the handle). Opened on its
 * own, a root is never trimmed as a side effect: only nj_cachedir_trim evicts. Every call is safe beside
 * contexts and other processes using the same root (entries are published and removed atomically). */
typedef struct nj_cachedir nj_cachedir;
#define NJ_CACHEDIR_READ_ONLY 1u /* never write to the root (list, stats and verify without removing) */

/* root NULL: the default rules (NORMJIT_CACHE_DIR, $XDG_CACHE_HOME/normjit, ~/.cache/normjit). A root
 * another user owns, open to group/others or a symlink is NJ_ERR_CACHE_UNSAFE; unknown flags NJ_ERR_BAD_FLAGS. */
NJ_API nj_status nj_cachedir_open(const char *root, uint32_t flags, nj_cachedir **out);
/* The context's disk cache; NJ_ERR_CACHE_IO when the context works in memory only. */
NJ_API nj_status nj_cachedir_from_context(nj_context *ctx, nj_cachedir **out);
/* Closes the handle (a borrowed context cache stays open with its context). NULL is a no-op. */
NJ_API void nj_cachedir_close(nj_cachedir *d);
/* The root path; "" for NULL. Owned by the handle. */
NJ_API const char *nj_cachedir_root(const nj_cachedir *d);

/* Set struct_size = sizeof(nj_cachedir_stats). entries/bytes: measured now; oldest/newest: entry mtimes in
 * seconds since the epoch (0 when empty); the counters: this handle's cache object since it was opened
 * (a borrowed one: since its context was created); not_stored_*: entries that could not be stored, by
 * reason; untrusted: archive entries refused by authentication. */
typedef struct nj_cachedir_stats {
    uint32_t struct_size;
    int32_t read_only, format;
    uint64_t entries, bytes;
    int64_t oldest, newest;
    uint64_t hits, misses, stores, evictions, corrupt;
    uint64_t not_stored_nospace, not_stored_read_only, not_stored_other, lock_fallbacks, untrusted;
} nj_cachedir_stats;
NJ_API nj_status nj_cachedir_stats_get(nj_cachedir *d, nj_cachedir_stats *out);

/* One entry as listed or verified; every pointer is valid during the callback only. */
typedef struct nj_cachedir_entry {
    const char *path;      /* file of the entry */
    const char *hash;      /* its cache key (32 hex characters) */
    const char *kind;      /* binary kind: "cubin", "ptx", "so", ... */
    const char *signature; /* full signature text; NULL when unreadable */
    uint64_t bytes;
    int64_t mtime;         /* seconds since the epoch (last use) */
    nj_status status;      /* verify: NJ_OK or why the entry is bad; list: NJ_OK */
    int32_t removed;       /* verify: a bad entry was deleted (0 on a read-only root) */
} nj_cachedir_entry;
/* Return nonzero to see no further entries (the call then returns NJ_OK). */
typedef int (*nj_cachedir_visit_fn)(void *user, const nj_cachedir_entry *entry);
NJ_API nj_status nj_cachedir_list(nj_cachedir *d, nj_cachedir_visit_fn visit, void *user);
/* Fully verifies every entry and removes bad ones; visit (may be NULL) sees each entry with its status.
 * *checked and *bad (optional) count them; a bad entry makes the call return NJ_OK all the same. */
NJ_API nj_status nj_cachedir_verify(nj_cachedir *d, nj_cachedir_visit_fn visit, void *user, uint64_t *checked,
                                    uint64_t *bad);
/* Evicts least recently used entries until the root holds at most max_bytes; *evicted (optional). */
NJ_API nj_status nj_cachedir_trim(nj_cachedir *d, uint64_t max_bytes, uint64_t *evicted);
/* Removes every entry. */
NJ_API nj_status nj_cachedir_clear(nj_cachedir *d);
/* The key (16 to 4096 bytes, copied) that signs exported entries and authenticates imported ones. Without
 * one, export and import load it from NORMJIT_CACHE_KEY_FILE, else NORMJIT_CACHE_KEY, else refuse
 * (NJ_ERR_CACHE_UNTRUSTED). */
NJ_API nj_status nj_cachedir_set_key(nj_cachedir *d, const void *key, size_t bytes);
/* One archive file of every valid entry, each signed with HMAC-SHA256 under the key. */
NJ_API nj_status nj_cachedir_export(nj_cachedir *d, const char *file, uint64_t *count);
/* Adds an archive's entries, each authenticated then verified; goes on past a bad one. NJ_ERR_CACHE_UNTRUSTED
 * when any entry was forged, NJ_ERR_CACHE_IO when an authentic one could not be stored (the stats count
 * why), NJ_ERR_CACHE_CORRUPT for a damaged archive. *rejected counts forged and damaged entries. */
NJ_API nj_status nj_cachedir_import(nj_cachedir *d, const char *file, uint64_t *count, uint64_t *rejected);

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
