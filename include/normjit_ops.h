/* normjit operator API: what only operators and the normjit tool need (the Redis tier's push and pull, plan
 * explanations, compile timings, the double-precision reference, the performance model), beside the
 * public API of normjit.h.
 *
 * Like zstd's advanced API, it is opt-in and not part of the stable ABI: define NJ_OPERATOR_API before
 * including this header, and link the static library (libnormjit.a). The shared library does not export
 * these names (cmake/check_exports.cmake checks that it exports exactly normjit.h's NJ_API functions), and
 * they may change in any release. */
#ifndef NORMJIT_OPS_H
#define NORMJIT_OPS_H

#ifndef NJ_OPERATOR_API
#error "normjit_ops.h is the operator API: define NJ_OPERATOR_API and link libnormjit.a (not in the stable ABI)"
#endif

#include "normjit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Hidden in the shared library (it is built with -fvisibility=hidden): the names exist in the archive only. */
#define NJ_OPS

/* ---- The Redis tier of a cache root (README "Fleet cache (Redis)") ---- */

/* Attaches a tier to a handle opened with nj_cachedir_open: redis://[:password@]host:port[/db][?prefix=..].
 * NJ_ERR_UNSUPPORTED when built without hiredis, NJ_ERR_BAD_ARGUMENT for a bad URL. */
NJ_OPS nj_status nj_ops_cachedir_attach_remote(nj_cachedir *d, const char *url);
/* Where the attached tier is and this handle's counters of it. status: NJ_OK, or NJ_ERR_CACHE_IO while
 * it is unreachable; values: values under the prefix (counted now; 0 when unreachable). */
typedef struct nj_ops_remote_info {
    char host[256], prefix[128];
    int32_t port, db;
    nj_status status;
    uint64_t values;
    nj_remote_cache_stats counters; /* enabled, status, hits, ... as for a context */
} nj_ops_remote_info;
/* NJ_ERR_UNSUPPORTED when no tier is attached; otherwise NJ_OK, with an unreachable tier in status (and
 * its detail in nj_last_error()). */
NJ_OPS nj_status nj_ops_cachedir_remote_info(nj_cachedir *d, nj_ops_remote_info *out);
/* Every valid local entry to the tier (set-if-absent); every value of the tier, verified, to the disk
 * (*rejected counts values refused by verification). Both authenticate values with the cache key. */
NJ_OPS nj_status nj_ops_cachedir_push(nj_cachedir *d, uint64_t *pushed);
NJ_OPS nj_status nj_ops_cachedir_pull(nj_cachedir *d, uint64_t *pulled, uint64_t *rejected);
/* Looks an entry up as a context does (the disk, then the attached tier): NJ_OK on a hit, NJ_ERR_NOT_CACHED
 * on a miss. kind: "cubin", "ptx", "so". For measuring the tier's miss latency (tools/bench/bench_remote). */
NJ_OPS nj_status nj_ops_cachedir_lookup(nj_cachedir *d, const char *signature, const char *kind);
/* Loads the key from NORMJIT_CACHE_KEY_FILE or NORMJIT_CACHE_KEY now (export and import do it on demand). */
NJ_OPS nj_status nj_ops_cachedir_key_from_env(nj_cachedir *d);

/* ---- Plans explained (`normjit plan`, `normjit bench --dump`) ---- */

/* One pass of one problem, planned but not compiled. Strings are malloc'd (nj_ops_pass_info_free). */
typedef struct nj_ops_pass_info {
    char *canon_text; /* the canonical problem */
    char *plan_text;  /* the plan: family, block, vector width, launches */
    char *signature;  /* full signature text (the cache key is its hash) */
    char *source;     /* rendered CUDA source (only when asked) */
    char *libraries;  /* a line per library module the launches use: "colsum param=f32 <hash> cached|not cached" */
    char hash[33];    /* cache key */
    int32_t cached;   /* 1 when the disk cache holds a valid entry */
    int32_t kernels;  /* kernels the source defines (what its compile is told) */
} nj_ops_pass_info;
NJ_OPS nj_status nj_ops_explain(nj_context *ctx, const nj_problem_desc *p, nj_pass pass, int with_source,
                                nj_ops_pass_info *out);
NJ_OPS void nj_ops_pass_info_free(nj_ops_pass_info *pi);

/* ---- Compile timings (`normjit bench`) ---- */

/* nj_warmup's work for one problem with a choice of variants: passes (nj_pass bits) plus NJ_OPS_WARM_MAIN
 * and/or NJ_OPS_WARM_UNALIGNED (neither: both). *compiled and *cached (optional) count kernel sets. */
#define NJ_OPS_WARM_MAIN 0x100u      /* the main kernels only */
#define NJ_OPS_WARM_UNALIGNED 0x200u /* the unaligned variant only, where it differs from the main one */
NJ_OPS nj_status nj_ops_warm(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, int32_t *compiled,
                             int32_t *cached);
/* Wall milliseconds of this thread's last NVRTC compile (not counting the wait for a compile slot). */
NJ_OPS double nj_ops_last_compile_ms(void);
/* Library modules (kernels shared by many problems' backward passes, one per gamma dtype or one in all):
 * how many, and module i's name ("<kernel>_<dtype>") and source, both malloc'd (free()). */
NJ_OPS int32_t nj_ops_library_module_count(void);
NJ_OPS nj_status nj_ops_library_module(int32_t i, char **name, char **source);
/* One NVRTC compile of source with the library's options, for sm_arch; kernels: how many it defines.
 * *millis (optional): the compile's wall time. The binary is dropped. */
NJ_OPS nj_status nj_ops_nvrtc_compile(const char *source, const char *name, int32_t arch, int32_t kernels,
                                      double *millis);

/* ---- Double-precision reference (`normjit check` and the tests) ---- */

/* Host buffers laid out exactly as the descriptor says; outputs in double, dense, in x's logical order
 * (stats row-major over the kept axes, params over the feature axes). Any output may be NULL to skip it.
 * The backward pass recomputes the statistics from x (already residual-summed). */
typedef struct nj_ops_ref_inputs {
    const void *x, *residual, *gamma, *beta, *dy;
    double eps;
} nj_ops_ref_inputs;
typedef struct nj_ops_ref_outputs {
    double *y, *residual_out, *mean, *rstd, *dx, *dgamma, *dbeta;
} nj_ops_ref_outputs;
/* Element counts of x, of the statistics (kept axes) and of gamma (feature axes). */
NJ_OPS void nj_ops_ref_sizes(const nj_problem_desc *p, int64_t *numel, int64_t *kept, int64_t *feature);
NJ_OPS nj_status nj_ops_ref_forward(const nj_problem_desc *p, const nj_ops_ref_inputs *in, nj_ops_ref_outputs *out);
NJ_OPS nj_status nj_ops_ref_backward(const nj_problem_desc *p, const nj_ops_ref_inputs *in, nj_ops_ref_outputs *out);

/* ---- Dtypes: the library's one table (src/vocab.c), so that the tools keep no switch of their own ---- */

/* Element i of base, stored as d, as a double; v stored as d (rounded to nearest even). d must be a
 * storage dtype (NJ_F32, NJ_F16, NJ_BF16): anything else loads 0 and stores nothing. */
NJ_OPS double nj_ops_dtype_load(nj_dtype d, const void *base, int64_t i);
NJ_OPS void nj_ops_dtype_store(nj_dtype d, void *base, int64_t i, double v);
/* Half an ulp at 1 of d, and the atol and rtol of outputs stored in d (0 for a value that is no dtype). */
NJ_OPS double nj_ops_dtype_unit_roundoff(nj_dtype d);
NJ_OPS double nj_ops_dtype_out_tol(nj_dtype d);

/* ---- The performance model (`normjit model`, docs/model.md) ---- */

/* An emulator context whose kernels count their global accesses, and the device the figures are for. */
typedef struct nj_ops_model nj_ops_model;
typedef struct nj_ops_model_opts {
    size_t struct_size;    /* sizeof(nj_ops_model_opts) */
    const char *device;    /* "H200", "H100", "A100" (case-insensitive); NULL: H200, or A100 for arch 80 */
    int32_t arch;          /* architecture planned for (0: the device's) */
    int32_t ptxas;         /* 1: compile each source with NVRTC for the ptxas report (registers, shared) */
    uint32_t sample;       /* blocks traced a launch (0: 32) */
    uint32_t passes;       /* nj_pass bits (0: both) */
    const char *cache_dir; /* cache root (NULL: the default) */
} nj_ops_model_opts;
/* NJ_ERR_BAD_ARGUMENT for an unknown device. */
NJ_OPS nj_status nj_ops_model_create(const nj_ops_model_opts *o, nj_ops_model **out);
NJ_OPS void nj_ops_model_destroy(nj_ops_model *m);
/* The device's name as its table spells it ("H200"). */
NJ_OPS const char *nj_ops_model_device(const nj_ops_model *m);
/* Models problem p (its batch as given; text names it in the output): *report (optional) the full text,
 * *brief (optional) one line a pass (the baseline's form). Both malloc'd (free()). */
NJ_OPS nj_status nj_ops_model_run(nj_ops_model *m, const char *text, const nj_problem_desc *p, char **report,
                                  char **brief);
/* As nj_ops_model_run, with *goals (optional) one line a pass against issue 17's goals (src/model_goals.c):
 * the figures, then "unmet:" and the goals missed, or "all goals met". */
NJ_OPS nj_status nj_ops_model_run_goals(nj_ops_model *m, const char *text, const nj_problem_desc *p, char **report,
                                        char **brief, char **goals);
/* Compares a brief line with its baseline line (matched by problem and pass by the caller): 0 when no
 * figure regresses beyond tolerance, else 1 with the reason in why. */
NJ_OPS int nj_ops_model_compare(const char *base, const char *now, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
