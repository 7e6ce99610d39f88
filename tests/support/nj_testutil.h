/* Shared test helpers (tests/support/nj_testutil.c): a seeded RNG, strided-buffer fill/gather/scatter in
 * any nj_dtype, a tolerance comparer against dense double references, and temp-dir helpers.
 * Strided buffers follow nj_tensor_desc: extents and strides in elements, logical index row-major.
 * Nothing here allocates behind the caller's back except where a function says "caller frees". */
#ifndef NJ_TESTUTIL_H
#define NJ_TESTUTIL_H

#include "normjit.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- xorshift64* RNG: deterministic for a seed, same sequence on every platform ---- */
typedef struct nj_rng {
    uint64_t s;
} nj_rng;

void nj_rng_seed(nj_rng *r, uint64_t seed); /* any seed, including 0, is valid */
uint64_t nj_rng_u64(nj_rng *r);
double nj_rng_uniform(nj_rng *r);                     /* [0, 1) with 53 random bits */
double nj_rng_range(nj_rng *r, double lo, double hi); /* [lo, hi) */
double nj_rng_normal(nj_rng *r);                      /* standard normal (Box-Muller) */
int64_t nj_rng_int(nj_rng *r, int64_t lo, int64_t hi); /* [lo, hi], inclusive */

/* ---- strided tensors ---- */
/* Number of elements in t's logical shape (0 if any extent is 0). */
int64_t nj_tu_numel(const nj_tensor_desc *t);
/* Elements a buffer must hold for t: max offset + 1 (0 for an empty tensor). */
int64_t nj_tu_span(const nj_tensor_desc *t);
/* Byte-size of t's buffer in its dtype. */
size_t nj_tu_bytes(const nj_tensor_desc *t);
/* Zeroed buffer for t (at least 1 byte so an empty tensor still gets a valid pointer). Caller frees. */
void *nj_tu_alloc(const nj_tensor_desc *t);
/* Resolves an optional operand like the library does: rank 0 -> x's extents/strides, dtype NONE -> x's. */
nj_tensor_desc nj_tu_resolve(const nj_tensor_desc *t, const nj_tensor_desc *x);
/* Row-major contiguous description (does not need the library's nj_tensor_contiguous). */
nj_tensor_desc nj_tu_contiguous(nj_dtype dtype, int32_t rank, const int64_t *extents);

/* Visits every logical element in row-major order: fn(lin, offset, user). */
typedef void (*nj_tu_visit_fn)(int64_t lin, int64_t offset, void *user);
void nj_tu_for_each(const nj_tensor_desc *t, nj_tu_visit_fn fn, void *user);

/* Fills the logical elements of a strided buffer with uniform values in [lo, hi) (rounded to the dtype).
 * If quantum > 0 the values are multiples of quantum (exact small grids for finite differences). */
void nj_tu_fill_uniform(void *buf, const nj_tensor_desc *t, nj_rng *r, double lo, double hi, double quantum);
/* Fills with a constant. */
void nj_tu_fill_const(void *buf, const nj_tensor_desc *t, double v);
/* Strided buffer -> dense doubles in logical row-major order (numel entries). */
void nj_tu_gather(const void *buf, const nj_tensor_desc *t, double *dense);
/* Dense doubles -> strided buffer (rounded to t's dtype). */
void nj_tu_scatter(void *buf, const nj_tensor_desc *t, const double *dense);

/* ---- comparison ---- */
typedef struct nj_tu_cmp {
    int64_t count;       /* elements compared */
    int64_t mismatches;  /* elements with |got - want| > atol + rtol * |want| (or NaN disagreement) */
    int64_t worst_index; /* logical index of the largest excess over the tolerance, -1 if none */
    double worst_got, worst_want;
    double max_abs_err, max_rel_err; /* over all elements (rel uses max(|want|, 1e-30)) */
} nj_tu_cmp;

/* Compares dense arrays; prints up to `max_report` mismatches to stderr with `label`. */
nj_tu_cmp nj_tu_compare_dense(const char *label, const double *got, const double *want, int64_t n, double atol,
                              double rtol, int max_report);
/* Compares a strided buffer of any dtype against a dense double reference of its logical shape. */
nj_tu_cmp nj_tu_compare_strided(const char *label, const void *buf, const nj_tensor_desc *t, const double *want,
                                double atol, double rtol, int max_report);
/* Default tolerances for comparing a kernel's output in dtype d against a double reference. */
void nj_tu_default_tol(nj_dtype d, double *atol, double *rtol);

/* ---- files ---- */
/* Creates a fresh private directory under $TMPDIR (or /tmp) named normjit-<tag>-XXXXXX; writes its path to
 * out. Returns false (and leaves out empty) on failure. */
bool nj_tu_make_temp_dir(const char *tag, char *out, size_t cap);
/* Removes a directory tree (files, links, subdirectories; never follows links). Returns 0 on success or
 * if the path does not exist, -1 otherwise. */
int nj_tu_remove_tree(const char *path);

#endif
