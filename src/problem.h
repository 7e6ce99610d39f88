/* Problem model: validation, canonical form, keys and text form (src/problem.c).
 *
 * The canonical form is what kernels are generated from. Axes are listed outermost first (descending x
 * stride). Axis 0 is always the batch axis: a kept (not reduced), non-feature axis whose extent and strides
 * are run-time values (nj_kargs.rows / bstride). It is synthesized with extent 1 and zero strides when
 * the problem has none, so a problem differing only in batch gets the same canonical key.
 * Size-1 axes are dropped, and neighbours merge when they play the same role and are contiguous with
 * each other in every operand present (x, y, residual, residual_out, dy, dx, param, stats).
 * Ordering: descending x stride, stable (equal x strides keep x's axis order, so broadcast x axes with
 * stride 0 go innermost). Without scale/bias no axis is a feature axis (there is no param operand).
 * When every reduced axis has extent 1, one reduced axis of extent 1 (activation strides 1) is kept
 * innermost, so rank >= 2 always: the batch axis and at least one reduced axis.
 * A zero-size x (some extent 0) canonicalizes as if its zero extents were 1, with batch extent 0: no
 * kernel has work (statistics of an empty reduction are not written), and every non-batch extent >= 1.
 */
#ifndef NJ_PROBLEM_H
#define NJ_PROBLEM_H

#include "internal.h"

/* Operands whose element offsets the kernels compute from per-axis strides, in index order (the device
 * copy of these numbers is generated from this list: cmake/gen_abi.c).
 *   PARAM  gamma, beta, dgamma, dbeta: x restricted to feature axes, contiguous; 0 elsewhere
 *   STATS  mean, rstd: x restricted to kept axes, contiguous; 0 on reduced axes */
#define NJ_OPERAND_LIST(OPD) OPD(X) OPD(Y) OPD(RES) OPD(RESOUT) OPD(DY) OPD(DX) OPD(PARAM) OPD(STATS)
typedef enum nj_operand {
#define NJ_OPERAND_ENUM_(name) NJ_OPD_##name,
    NJ_OPERAND_LIST(NJ_OPERAND_ENUM_)
#undef NJ_OPERAND_ENUM_
    NJ_OPD_COUNT
} nj_operand;

typedef enum nj_kind {
    NJ_KIND_ROW = 1,     /* exactly one reduced axis, innermost, stride 1 in x, y, res, resout, dy, dx
                          * (those present). GroupNorm NCHW with an affine keeps C/G (feature) and
                          * spatial (not) as two reduced axes, so it is GENERAL; without one it is ROW. */
    NJ_KIND_COLUMN = 2,  /* not ROW; innermost axis kept with x stride 1, reduction outside it */
    NJ_KIND_GENERAL = 3  /* anything else */
} nj_kind;

#define NJ_CANON_MAX_AXES (NJ_MAX_RANK + 1)

typedef struct nj_canon_axis {
    int64_t extent;
    int32_t reduce;  /* 1 = reduced axis (in R), 0 = kept */
    int32_t feature; /* 1 = in F (param stride may still be 0 only if extent is 1, which is dropped) */
    int64_t stride[NJ_OPD_COUNT]; /* elements; 0 for an absent operand */
} nj_canon_axis;

typedef struct nj_canon {
    int32_t rank;  /* number of axes including the batch axis 0 */
    int32_t kind;  /* nj_kind */
    uint32_t flags;
    int32_t act;
    int32_t dtype[NJ_OPD_COUNT]; /* dtype per operand; NJ_DTYPE_NONE when absent (STATS is NJ_F32) */
    uint32_t present;            /* bit per nj_operand: operand used by forward or backward */
    int64_t reduce_size;         /* product of reduced extents (elements per statistic) */
    int64_t kept_inner;          /* product of kept extents other than the batch axis */
    int64_t param_size;          /* product of feature extents (gamma elements); 0 without scale/bias */
    nj_canon_axis axes[NJ_CANON_MAX_AXES];
} nj_canon;

/* Validates p (see nj_problem_validate) and fills its canonical form. Pure function of the problem. */
NJ_HIDDEN nj_status nj_canonicalize(const nj_problem_desc *p, nj_canon *out);

/* The canonical form as one pass's kernels see it: the operands and flags the other pass alone uses are
 * dropped (backward: y, residual, residual_out, saving statistics; forward: dy, dx), so that problems
 * differing only there share the pass's kernels, signature included (an LLM block's backward is the
 * same with and without the fused residual add). out may be c. */
NJ_HIDDEN void nj_canon_for_pass(const nj_canon *c, nj_pass pass, nj_canon *out);

/* Bytes that identify a canonical form with the batch extent and batch strides left out: equal
 * problems (up to batch) give equal bytes, whatever padding or axis order the caller used.
 * Writes at most cap bytes; returns the number of bytes of the key. */
NJ_HIDDEN size_t nj_canon_key(const nj_canon *c, void *out, size_t cap);

/* Canonical text (goes into signatures): one line, batch extent printed as '*'. Caller frees. */
NJ_HIDDEN char *nj_canon_text(const nj_canon *c);

/* Packs a descriptor into a key with every padding byte and unused field zeroed, so that equal problems
 * compare equal byte for byte (the in-memory plan table key). Includes batch. Returns bytes written. */
NJ_HIDDEN size_t nj_problem_key(const nj_problem_desc *p, void *out, size_t cap);
#define NJ_PROBLEM_KEY_MAX 1024

/* Batch extent and per-operand batch strides of the problem (the run-time part of the canonical form). */
NJ_HIDDEN void nj_canon_batch(const nj_canon *c, int64_t *rows, int64_t bstride[NJ_OPD_COUNT]);

#endif
