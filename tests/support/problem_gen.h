/* Random problem descriptors for tests (tests/support/problem_gen.c): small strided problems of every
 * shape class, for property tests of canonicalization and for kernel test matrices.
 * Deterministic for a seed; no allocation. */
#ifndef NJ_PROBLEM_GEN_H
#define NJ_PROBLEM_GEN_H

#include "normjit.h"

#include <stdint.h>

typedef struct nj_pg_rng {
    uint64_t s;
} nj_pg_rng;

/* splitmix64 step; any seed is valid. */
uint64_t nj_pg_next(nj_pg_rng *r);
/* Uniform integer in [lo, hi]. */
int64_t nj_pg_int(nj_pg_rng *r, int64_t lo, int64_t hi);

typedef struct nj_pg_opts {
    int32_t max_rank;    /* 1..NJ_MAX_RANK; 0 = 5 */
    int64_t max_extent;  /* per axis, >= 1; 0 = 4 */
    int32_t allow_pad;   /* gaps between axes in memory */
    int32_t allow_broadcast; /* x (and input operands) may have a stride-0 axis */
    /* Planner-scale problems (property tests, never allocated): extents drawn from a list of 1, small and
     * large primes and powers of two (up to ~10^6), a zero extent one problem in 64, and the largest
     * extents shrunk until x has at most max_elems elements (0 = 2^36). max_extent is then ignored. */
    int32_t wide;
    int64_t max_elems;
} nj_pg_opts;

/* A valid random problem (nj_problem_validate accepts it): x in a random memory order (optionally padded, optionally with a broadcast
 * axis), random reduce/feature sets, flags, activation and dtypes, and y/residual/residual_out/dy/dx either
 * "like x" or with their own random non-overlapping layouts. opts may be NULL. */
void nj_pg_problem(nj_pg_rng *r, const nj_pg_opts *opts, nj_problem_desc *p);

/* Element-by-element view of a problem: for each element of x, the offset of every operand in nj_operand
 * order (x, y, residual, residual_out, dy, dx by their strides, 0 for an unused operand; gamma and the
 * statistics as row-major indices over the feature / kept axes in x's order, gamma 0 without scale/bias).
 * nj_pg_desc_offsets reads the descriptor directly; nj_pg_canon_offsets walks a canonical form. Two
 * sorted lists are equal exactly when the canonical form addresses the same elements the same way.
 * `out` holds numel(x) entries; both return the count written. */
typedef struct nj_pg_offsets {
    int64_t v[8];
} nj_pg_offsets;
struct nj_canon;
int64_t nj_pg_desc_offsets(const nj_problem_desc *p, nj_pg_offsets *out);
int64_t nj_pg_canon_offsets(const struct nj_canon *c, nj_pg_offsets *out);
void nj_pg_sort_offsets(nj_pg_offsets *v, int64_t n);

#endif
