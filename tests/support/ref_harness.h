/* Reference harness for tests (tests/support/ref_harness.c): host buffers laid out exactly as a problem
 * descriptor says, random data, and the double-precision reference's dense outputs for them. A kernel
 * test can feed the same buffers (x, residual, gamma, beta, dy) to a plan and compare its outputs with
 * y / dx / dgamma / dbeta here, e.g. through nj_tu_compare_strided. */
#ifndef NJ_REF_HARNESS_H
#define NJ_REF_HARNESS_H

#include "nj_testutil.h"
#include "reference.h"

typedef struct nj_refh {
    nj_problem_desc p;
    nj_tensor_desc xt, rt, dyt, pt; /* resolved x, residual, dy, and the 1-D contiguous param tensor */
    void *x, *res, *gamma, *beta, *dy; /* inputs in their dtypes and strides (zeroed until filled) */
    double *y, *resout, *mean, *rstd, *dx, *dgamma, *dbeta; /* dense reference outputs */
    int64_t n, k, f;                                      /* numel, kept (statistics), feature (params) */
    double eps;                                           /* 1e-5 unless changed */
} nj_refh;

/* A descriptor with contiguous x and every optional operand "like x" (rank 0, dtype NONE). */
nj_problem_desc nj_refh_desc(nj_dtype dt, int rank, const int64_t *ext, uint32_t reduce, uint32_t feature,
                             uint32_t flags, int act);
/* Statistic and parameter index of dense element `lin` (by division, independent of the reference). */
void nj_refh_split_index(const nj_problem_desc *p, int64_t lin, int64_t *kept, int64_t *feat);

/* Allocates every buffer for p (p is copied). NJ_ERR_OUT_OF_MEMORY leaves r freed. */
nj_status nj_refh_init(nj_refh *r, const nj_problem_desc *p);
void nj_refh_free(nj_refh *r);
/* Random data from `seed`: x in [lo, hi), residual and dy in [-1, 1), gamma in [0.5, 1.5), beta in
 * [-0.5, 0.5); all but dy on a grid of `quantum` when quantum > 0. */
void nj_refh_fill(nj_refh *r, uint64_t seed, double lo, double hi, double quantum);
/* Inputs as the problem's flags use them (residual/gamma/beta NULL when their flag is off). */
nj_ref_inputs nj_refh_inputs(const nj_refh *r);
/* Run the reference into r's dense outputs. */
nj_status nj_refh_forward(nj_refh *r);
nj_status nj_refh_backward(nj_refh *r);

#endif
