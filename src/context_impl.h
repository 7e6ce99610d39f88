/* Private layout of the context and plans, shared by context.c (lifecycle, plan table), kernels.c
 * (signature -> loaded kernels, single flight) and launch.c (forward/backward argument checks). */
#ifndef NJ_CONTEXT_IMPL_H
#define NJ_CONTEXT_IMPL_H

#include "context.h"
#include "kernel_abi.h"

#include <pthread.h>
#include <stdatomic.h>

/* The loaded kernels of one signature; shared by every plan whose pass has that signature (problems that
 * differ only in batch). params: the plan (nj_pass_plan's variant) the kernels were built from, which
 * the launch reads. Owned by the context's module list. */
typedef struct nj_kernelset {
    char hash[33];
    nj_plan_params params;
    void *module;
    void *fn[NJ_MAX_LAUNCHES];
    int32_t state;      /* 0 = being built (single flight), 1 = ready, 2 = failed */
    nj_status error;    /* when failed: what the builder got */
    char *error_detail; /* when failed: its detail, replayed to waiters */
    struct nj_kernelset *next;
} nj_kernelset;

struct nj_plan {
    nj_context *ctx;
    nj_problem_desc desc;
    nj_canon canon;
    int64_t rows;
    int64_t bstride[NJ_OPD_COUNT];
    int64_t numel;
    /* [0] forward, [1] backward: each pass planned once, when the plan object is made; the kernel sets,
     * the workspace size and describe all read these */
    nj_pass_plan plans[2];
    /* [0] forward, [1] backward; [nj_variant]; NULL until built */
    _Atomic(nj_kernelset *) pass[2][NJ_VARIANT_COUNT];
    uint32_t keylen;
    uint64_t keyhash;
    unsigned char key[]; /* nj_problem_key bytes */
};

/* Open-addressing table of plans: readers probe without a lock (slots are published with release
 * stores and never removed); writers hold ctx->lock. A full table is replaced by a bigger one and
 * the old one is kept until the context goes, so a concurrent reader never sees freed memory. */
typedef struct nj_plan_table {
    size_t cap; /* power of two */
    size_t count;
    _Atomic(nj_plan *) *slots;
    struct nj_plan_table *retired;
} nj_plan_table;

struct nj_context {
    nj_context_options opts;
    char *cache_dir_copy;
    nj_logger log;
    nj_backend *backend;
    nj_cache *cache;
    char cache_note[512]; /* why the disk cache is off, when it is */
    nj_status cache_status; /* NJ_OK, or why the disk cache is off (nj_cache_stats.disk_status) */
    pthread_mutex_t lock;
    pthread_cond_t built; /* signalled when a kernelset leaves state 0 */
    _Atomic(nj_plan_table *) table;
    nj_kernelset *sets;
    char *record_path; /* NORMJIT_RECORD */
    atomic_uint_fast64_t hits_memory, hits_disk, misses, compiles, compile_failures;
    struct nj_serve *serve; /* serve hook: generic kernels and background compiles (src/async.c) */
    bool dependent_launches; /* a pass's later kernels launch dependent (nj_dependent_launches) */
};

/* launch.c */
/* Whether a pass's kernels after its first launch dependent (NJ_LAUNCH_DEPENDENT) on arch: sm_90 and
 * later, unless NORMJIT_NO_PDL=1 (the A/B of tools/gpu-check). The model asks the same. */
NJ_HIDDEN bool nj_dependent_launches(int32_t arch);

/* context.c */
NJ_HIDDEN nj_status nj_plan_ensure(nj_plan *plan, nj_pass pass, nj_variant v, nj_kernelset **out);
/* The plan of a pass of a plan object (made with it: nj_pass_plan). */
static inline const nj_pass_plan *nj_plan_pass_plan(const nj_plan *plan, nj_pass pass)
{
    return &plan->plans[pass == NJ_PASS_BACKWARD];
}

/* kernels.c */
/* What building kernel sets did: modules of passes compiled, library modules compiled beside them. */
typedef struct nj_build_stats {
    int32_t compiled, lib_compiled;
} nj_build_stats;
/* The kernels of variant v of a planned pass (loaded when load): its own module and the library modules
 * its launches name (planner.h: nj_lib_kernel). st (may be NULL) counts the compiles this call made. */
NJ_HIDDEN nj_status nj_kernels_for(nj_context *ctx, const nj_pass_plan *pl, nj_variant v, int load,
                                   nj_kernelset **out, nj_build_stats *st);
NJ_HIDDEN char *nj_signature_text(nj_context *ctx, const nj_canon *c, const nj_plan_params *pp);
/* The signature of library module lib for dtype (nj_lib_dtype's), and its plan into *pp (nj_plan_library).
 * Caller frees; NULL for an unknown kernel or out of memory. */
NJ_HIDDEN char *nj_lib_signature_text(nj_context *ctx, int32_t lib, int32_t dtype, nj_plan_params *pp);
NJ_HIDDEN const char *nj_binary_ext(nj_context *ctx);
NJ_HIDDEN void nj_kernelsets_free(nj_context *ctx);
/* serve hook (src/generic.c): the kernel set of a module whose source render() makes, under the
 * signature head + the usual tail; *compiled (may be NULL) gets 1 when it was compiled now. */
typedef nj_status (*nj_kernels_render_fn)(const void *ud, char **source);
NJ_HIDDEN nj_status nj_kernels_custom(nj_context *ctx, const char *head, const nj_plan_params *pp,
                                      nj_kernels_render_fn render, const void *ud, int load, nj_kernelset **out,
                                      int32_t *compiled);

/* async.c (serve hooks): what the calling thread may do in kernels.c. */
NJ_HIDDEN int nj_serve_compile_refused(const nj_context *ctx); /* NJ_CTX_NO_COMPILE, or a request's probe */
NJ_HIDDEN int nj_serve_no_wait(void);     /* a request's probe: a build in flight is a miss, not a wait */
NJ_HIDDEN int nj_serve_thread_mode(void); /* a probe or a background compile: library jobs run inline */

#endif
