/* Numerical tolerances of normjit's checks, in ONE place (the `check` subcommand and the numerics
 * matrix test both use these). An element passes when
 *     |got - ref| <= atol * scale + rtol * |ref| + quantum (the dtype's smallest subnormal)
 * i.e. its error  e = |got - ref| / (atol * scale + rtol * |ref|)  is at most 1. `scale` is the typical
 * magnitude of the output (its RMS over all elements, floor 1e-30; for the mean, the RMS of the normalized
 * input, since the mean's error comes from the input's magnitude), so atol means "relative to an output of
 * unit scale" and sums such as dgamma over many rows are judged against their own size.
 * Why these numbers: outputs are rounded once to their dtype (unit roundoff f16 4.9e-4, bf16 3.9e-3) on top
 * of float32 arithmetic (6e-8 per operation, amplified by reductions); the tolerances leave about 10x
 * headroom over that so a pass is meaningful and a wrong index or missed term (errors of order 1) fails. */
#ifndef NJT_TOLERANCE_H
#define NJT_TOLERANCE_H

#ifndef NJ_OPERATOR_API
#define NJ_OPERATOR_API
#endif
#include "normjit_ops.h"

#include <math.h>

typedef struct njt_tolerance {
    double atol; /* relative to the output's scale */
    double rtol; /* relative to |ref| */
} njt_tolerance;

/* Unit roundoff of a storage dtype (half an ulp at 1): the library's dtype table. */
static inline double njt_tol_unit_roundoff(nj_dtype d)
{
    return nj_ops_dtype_unit_roundoff(d);
}

/* The smallest positive value of dtype d (a subnormal): near zero no output can be closer to the truth
 * than about this, whatever the relative tolerance says. Found through the dtype table's store/load. */
static inline double njt_tol_quantum(nj_dtype d)
{
    double v = 1.0, last = 1.0;
    unsigned char buf[8];
    for (int i = 0; i < 1100; i++, v *= 0.5) {
        nj_ops_dtype_store(d, buf, 0, v);
        if (nj_ops_dtype_load(d, buf, 0) != v) break;
        last = v;
    }
    return last;
}

/* Forward outputs in dtype d (y, residual_out): the dtype table's out_tol (src/vocab.c says why). */
static inline njt_tolerance njt_tol_output(nj_dtype d)
{
    double t = nj_ops_dtype_out_tol(d);
    return (njt_tolerance){t, t};
}

/* Statistics (float32 mean, rstd) of an input of dtype d: float32-level, widened by the input dtype's
 * quantization because a residual sum may be rounded to that dtype before the statistics are taken. */
static inline njt_tolerance njt_tol_stats(nj_dtype input)
{
    double q = input == NJ_F32 ? 0.0 : 2.0 * njt_tol_unit_roundoff(input);
    return (njt_tolerance){1e-5 + q, 1e-5 + q};
}

/* Backward outputs (dx in its dtype, dgamma/dbeta in the param dtype): one more reduction than the
 * forward pass and a subtraction of two means, so float32 gets 10x the forward tolerance. */
static inline njt_tolerance njt_tol_grad(nj_dtype d)
{
    if (d == NJ_F32 || d == NJ_DTYPE_NONE) return (njt_tolerance){1e-4, 1e-4};
    return njt_tol_output(d);
}

/* A fused residual add rounds x + residual to float32 before the statistics (as residual_out stores it):
 * with an offset (mean far from zero) that costs |offset| / std * 2^-24 per element (inputs have std
 * ~0.58); the forward's tolerance is widened for it. The statistics themselves are shifted sums, exact to
 * float32 at any offset, so nothing else is widened. */
static inline njt_tolerance njt_tol_widen_offset(njt_tolerance t, double offset)
{
    double w = fabs(offset) * 32.0 * 0x1p-24;
    t.atol += w;
    t.rtol += w;
    return t;
}

#endif
