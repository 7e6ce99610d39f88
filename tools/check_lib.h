/* Checking normjit's kernels against the double-precision reference (src/reference.h): random inputs,
 * outputs pre-filled with NaN (so unwritten elements are caught), per-output error statistics judged
 * by the tolerances of tools/tolerance.h. Used by `normjit check` and by the numerics matrix test. */
#ifndef NJT_CHECK_LIB_H
#define NJT_CHECK_LIB_H

#include "normjit.h"
#include "tolerance.h"

#include <stdint.h>
#include <stdio.h>

typedef struct njt_check_options {
    uint64_t seed;   /* xorshift seed (0 is replaced by a fixed non-zero value) */
    double offset;   /* added to every x value: x = scale * (offset + uniform[-1, 1]) */
    double scale;    /* magnitude of x (and of the residual); 0 means 1 */
    int nan;         /* one NaN in x, at the logical element numel / 2: its set's outputs must be NaN,
                        every other set's right */
    double eps;      /* epsilon passed to the kernels and the reference */
    uint32_t passes; /* nj_pass bits to check */
    int shift;       /* bytes by which the activations, gamma/beta and their gradients lie past their
                        allocations' start (each operand whose element size divides it): misaligned
                        pointers must take the unaligned variants and give the same answers */
} njt_check_options;

/* seed 1, offset 0, scale 1, no NaN, eps 1e-5, forward and backward. */
void njt_check_options_init(njt_check_options *o);

#define NJT_CHECK_MAX_OUTPUTS 8

typedef struct njt_check_result {
    char name[16];       /* y, residual_out, mean, rstd, dx, dgamma, dbeta */
    nj_dtype dtype;      /* storage dtype of the output */
    int64_t count;       /* elements compared */
    double max_abs;      /* worst |got - ref| */
    double max_rel;      /* worst |got - ref| / |ref| over elements with |ref| >= 1e-3 * scale */
    double max_err;      /* worst |got - ref| / (atol * scale + rtol * |ref| + quantum); pass when <= 1 */
    int64_t worst_index; /* logical (row-major, dense) index of the worst element */
    double worst_got, worst_ref;
    int64_t nonfinite;   /* elements where got is NaN/Inf but ref is finite (e.g. never written) */
    double scale;        /* output scale used for atol */
    njt_tolerance tol;
    double quantum;      /* the dtype's smallest step (njt_tol_quantum), added to the denominator */
    int pass;
} njt_check_result;

typedef struct njt_check_report {
    int count;
    njt_check_result out[NJT_CHECK_MAX_OUTPUTS];
    int pass; /* every output passed */
} njt_check_report;

/* Compares n outputs. got is a host buffer of dtype d laid out by `layout` (its extents give the logical
 * row-major order; NULL = dense), ref holds n doubles in logical order. scale_floor raises the scale used
 * for atol (0 = the RMS of ref alone). */
void njt_check_compare(const char *name, const void *got, nj_dtype d, const nj_tensor_desc *layout,
                      const double *ref, int64_t n, double scale_floor, njt_tolerance tol, njt_check_result *out);

/* Runs the problem's passes through ctx (a cuda or emulator context) on seeded random inputs and
 * compares every output the flags ask for with the reference. Returns NJ_OK when everything ran (the
 * verdict is in rep->pass); a failure to plan, allocate or launch is returned as the status. */
nj_status njt_check_problem(nj_context *ctx, const nj_problem_desc *p, const njt_check_options *o,
                           njt_check_report *rep);

/* One line per output: name, dtype, count, worst abs/rel error, normalized error, tolerance, PASS/FAIL. */
void njt_check_report_print(FILE *f, const njt_check_report *rep);

#endif
