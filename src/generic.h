/* Generic kernels (src/generic.c, templates/generic.cu): one module per (pass, x dtype, gamma dtype)
 * that serves every valid problem of those dtypes, the problem coming at run time in a descriptor. They
 * stand in for a problem's own kernels while those compile in the background (NJ_CTX_ASYNC_COMPILE), or
 * for good in a context that never compiles (NJ_CTX_NO_COMPILE) when the module is cached. */
#ifndef NJ_GENERIC_H
#define NJ_GENERIC_H

#include "context_impl.h"

/* The problem as the generic kernels read it (templates/generic.cu declares the same struct): the
 * canonical form of one pass, axis lists outermost first. Axis 0 is the batch axis, its extent and
 * strides taken from nj_kargs at each launch. */
typedef struct nj_gdesc {
    int64_t rank, flags, act, nred, nkept, nfeat, nother, reduce_size, kept_inner, param_size;
    int64_t dtype[NJ_OPD_COUNT];
    /* kept (batch first), reduced, feature axes, and "other": those not feature (batch first) */
    int64_t kept[NJ_CANON_MAX_AXES], red[NJ_CANON_MAX_AXES], feat[NJ_CANON_MAX_AXES], other[NJ_CANON_MAX_AXES];
    int64_t extent[NJ_CANON_MAX_AXES];
    int64_t stride[NJ_CANON_MAX_AXES][NJ_OPD_COUNT];
} nj_gdesc;

#define NJ_GENERIC_BLOCK 256
/* nj_kernelset.state of a plan's generic set: such a set is owned by src/async.c, never in ctx->sets. */
#define NJ_KERNELSET_GENERIC 3
/* nj_launch.lib of a generic launch: not a library kernel, but non-zero, so that launch.c fills
 * nj_kargs.lib from the launch's arguments (lib[0]: the descriptor's device address). */
#define NJ_GENERIC_LAUNCH 0x67
/* Where in nj_kargs.lib the descriptor's device address arrives (P.desc in templates/generic.cu). */
#define NJ_GDESC_LIB_SLOT 0

/* The descriptor of the canonical form c (one pass's view: nj_canon_for_pass). */
NJ_HIDDEN void nj_generic_desc(const nj_canon *c, nj_gdesc *d);

/* The generic module of pass for x dtype xdt and gamma dtype pdt (NJ_DTYPE_NONE: no gamma): from
 * memory, the disk cache, or compiled (where this thread may compile). load 0: made, not loaded (warm).
 * *compiled (may be NULL) gets 1 when it was compiled now. */
NJ_HIDDEN nj_status nj_generic_module(nj_context *ctx, nj_pass pass, int32_t xdt, int32_t pdt, int load,
                                      nj_kernelset **out, int32_t *compiled);

/* A kernel set of the generic module's kernels for plan's pass: launches sized for the plan, the
 * descriptor uploaded to the device. The caller owns it (nj_generic_set_free). */
NJ_HIDDEN nj_status nj_generic_set_create(nj_plan *plan, nj_pass pass, nj_kernelset **out);
NJ_HIDDEN void nj_generic_set_free(nj_context *ctx, nj_kernelset *ks);

/* Workspace bytes the generic kernels of plan's pass need (backward: a float a statistic). */
NJ_HIDDEN size_t nj_generic_workspace(const nj_plan *plan, nj_pass pass);

#endif
