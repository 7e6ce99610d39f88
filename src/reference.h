/* Double-precision CPU reference for the general problem (src/reference.c), forward and backward.
 * Works directly from the descriptor (not the canonical form), so it checks canonicalization too.
 * Buffers are host memory laid out exactly as the descriptor says (strides in elements, dtype per
 * tensor); outputs are written in double, densely, in x's logical index order (row-major over x's
 * extents), stats in row-major order over the kept axes, params row-major over the feature axes. */
#ifndef NJ_REFERENCE_H
#define NJ_REFERENCE_H

#include "internal.h"

typedef struct nj_ref_inputs {
    const void *x, *residual, *gamma, *beta, *dy; /* as described; gamma/beta in param dtype */
    double eps;
} nj_ref_inputs;

typedef struct nj_ref_outputs {
    double *y;            /* numel(x) */
    double *residual_out; /* numel(x), NJ_FLAG_RESIDUAL_OUT */
    double *mean, *rstd;  /* numel(kept) */
    double *dx;           /* numel(x), backward */
    double *dgamma, *dbeta; /* numel(feature), backward */
} nj_ref_outputs;

/* Element counts: x, kept (statistics), feature (gamma). */
NJ_HIDDEN void nj_ref_sizes(const nj_problem_desc *p, int64_t *numel, int64_t *kept, int64_t *feature);

/* Any output pointer may be NULL to skip it. Backward needs dy and recomputes stats from x (x being the
 * already residual-summed input); it also fills mean/rstd when given. Details: mean is 0 under RMS;
 * residual_out, when given, gets x + residual (x alone without NJ_FLAG_RESIDUAL); y's, residual_out's and
 * dx's strides are checked against x but never used (outputs are dense); zero-size x writes nothing except
 * dgamma/dbeta, which are zeroed (empty sums). Optional operands: rank 0 = x's extents and strides, dtype
 * NONE = x's dtype; param_dtype NONE = f32. Bad descriptors fail with nj_fail and write nothing. */
NJ_HIDDEN nj_status nj_ref_forward(const nj_problem_desc *p, const nj_ref_inputs *in, nj_ref_outputs *out);
NJ_HIDDEN nj_status nj_ref_backward(const nj_problem_desc *p, const nj_ref_inputs *in, nj_ref_outputs *out);

/* Reads element i (offset in elements) of a buffer of dtype d as double. */
NJ_HIDDEN double nj_load_as_double(const void *base, int64_t offset, nj_dtype d);
NJ_HIDDEN void nj_store_from_double(void *base, int64_t offset, nj_dtype d, double v);

#endif
