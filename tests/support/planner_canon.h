/* Hand-built canonical problems for the planner and codegen suites (no dependency on problem.c). */
#ifndef NJ_TEST_PLANNER_CANON_H
#define NJ_TEST_PLANNER_CANON_H

#include "problem.h"

/* Starts a canonical problem: x/y/dy/dx (and residual, residual_out, param, stats as the flags say) of dtype
 * dt, param of dtype pdt, activation act. Axis 0 (the batch) is added with extent `batch`. */
void tc_begin(nj_canon *c, nj_dtype dt, nj_dtype pdt, uint32_t flags, int32_t act, int64_t batch);
/* Appends an axis (outermost first) after the batch axis. */
void tc_axis(nj_canon *c, int64_t extent, bool reduce, bool feature);
/* Fills row-major strides over the axes for the activations, contiguous param/stats strides, sizes
 * and the kind (ROW / COLUMN / GENERAL, by the rules of problem.h). */
void tc_finish(nj_canon *c);
/* Re-derives the kind after strides were edited by hand. */
void tc_kind(nj_canon *c);

/* Common shapes: LayerNorm-like row problem [batch, n] with scale+bias, and friends. */
void tc_row(nj_canon *c, nj_dtype dt, int64_t n, uint32_t flags);

#endif
