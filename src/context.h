/* Context internals shared with the command-line tool and the tests (src/context.c ties the pipeline
 * together: problem -> planner -> codegen -> backend compile -> cache -> backend load/launch). */
#ifndef NJ_CONTEXT_H
#define NJ_CONTEXT_H

#include "backend.h"
#include "cache.h"
#include "planner.h"
#include "problem.h"

/* Everything about one pass of one problem, for `normjit plan` and logs. Strings are malloc'd. */
typedef struct nj_pass_info {
    char *canon_text; /* nj_canon_text */
    char *plan_text;  /* nj_plan_text */
    char *signature;  /* full signature text */
    char *source;     /* rendered CUDA source (only when asked) */
    char *libraries;  /* a line per library module the launches use: "colsum param=f32 <hash> cached|not cached"
                         ("merge <hash> ...": a module for every gamma dtype) */
    char hash[33];    /* cache key: nj_hash_hex(signature) */
    int32_t cached;   /* 1 when the disk cache holds a valid entry */
    nj_plan_params params;
} nj_pass_info;
NJ_HIDDEN void nj_pass_info_free(nj_pass_info *pi);

/* Plans and describes one pass without compiling (renders the source only if with_source). */
NJ_HIDDEN nj_status nj_context_explain(nj_context *ctx, const nj_problem_desc *p, nj_pass pass, int with_source,
                                       nj_pass_info *out);

/* Makes sure the kernels of `passes` are in the cache (compiling what is missing) without loading them:
 * works with the compile-only backend. Both variants of each pass (nj_plan_variant) unless `passes` also
 * holds one of the NJ_WARM_* bits. *compiled (optional) gets the number of kernel sets compiled now,
 * *cached the number found already cached (a pass whose unaligned variant is its main kernels counts
 * once). Thread-safe; used by `normjit warmup --jobs N`. */
#define NJ_WARM_MAIN 0x100u      /* only the main variant */
#define NJ_WARM_UNALIGNED 0x200u /* only the unaligned variant, where it differs from the main one */
NJ_HIDDEN nj_status nj_context_warm(nj_context *ctx, const nj_problem_desc *p, uint32_t passes, int32_t *compiled,
                                    int32_t *cached);

/* The disk cache (NULL when running in memory only). Owned by the context. */
NJ_HIDDEN nj_cache *nj_context_disk_cache(nj_context *ctx);

/* Time spent in the last compile of this thread (ms), for benchmarks. */
NJ_HIDDEN double nj_context_last_compile_ms(void);

#endif
