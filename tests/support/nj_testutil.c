/* Shared test helpers; see nj_testutil.h. Element conversion goes through the library's converters
 * (nj_load_as_double / nj_store_from_double in src/reference.c) so every suite rounds the same way. */
#include "nj_testutil.h"
#include "tolerance.h"

#include "reference.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- RNG ---- */

void nj_rng_seed(nj_rng *r, uint64_t seed)
{
    /* splitmix64 step so nearby seeds give unrelated streams and 0 is not a fixed point. */
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    r->s = z ? z : 0x2545f4914f6cdd1dull;
}

uint64_t nj_rng_u64(nj_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

double nj_rng_uniform(nj_rng *r) { return (double)(nj_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double nj_rng_range(nj_rng *r, double lo, double hi) { return lo + (hi - lo) * nj_rng_uniform(r); }

double nj_rng_normal(nj_rng *r)
{
    double u1 = 1.0 - nj_rng_uniform(r), u2 = nj_rng_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t nj_rng_int(nj_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1u;
    return span == 0 ? (int64_t)nj_rng_u64(r) : lo + (int64_t)(nj_rng_u64(r) % span);
}

/* ---- strided tensors ---- */

int64_t nj_tu_numel(const nj_tensor_desc *t)
{
    int64_t n = 1;
    for (int a = 0; a < t->rank; a++) n *= t->extents[a];
    return n;
}

int64_t nj_tu_span(const nj_tensor_desc *t)
{
    if (nj_tu_numel(t) == 0) return 0;
    int64_t last = 0;
    for (int a = 0; a < t->rank; a++) last += (t->extents[a] - 1) * t->strides[a];
    return last + 1;
}

size_t nj_tu_bytes(const nj_tensor_desc *t) { return (size_t)nj_tu_span(t) * nj_dtype_size((nj_dtype)t->dtype); }

void *nj_tu_alloc(const nj_tensor_desc *t)
{
    size_t b = nj_tu_bytes(t);
    return calloc(b ? b : 1, 1);
}

nj_tensor_desc nj_tu_resolve(const nj_tensor_desc *t, const nj_tensor_desc *x)
{
    nj_tensor_desc r = *t;
    if (r.rank == 0) {
        r.rank = x->rank;
        memcpy(r.extents, x->extents, sizeof r.extents);
        memcpy(r.strides, x->strides, sizeof r.strides);
    }
    if (r.dtype == NJ_DTYPE_NONE) r.dtype = x->dtype;
    return r;
}

nj_tensor_desc nj_tu_contiguous(nj_dtype dtype, int32_t rank, const int64_t *extents)
{
    nj_tensor_desc t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = rank;
    int64_t s = 1;
    for (int a = rank - 1; a >= 0; a--) {
        t.extents[a] = extents[a];
        t.strides[a] = s;
        s *= extents[a] > 0 ? extents[a] : 1;
    }
    return t;
}

void nj_tu_for_each(const nj_tensor_desc *t, nj_tu_visit_fn fn, void *user)
{
    int64_t n = nj_tu_numel(t), idx[NJ_MAX_RANK] = {0}, off = 0;
    for (int64_t lin = 0; lin < n; lin++) {
        fn(lin, off, user);
        for (int a = t->rank - 1; a >= 0; a--) {
            off += t->strides[a];
            if (++idx[a] < t->extents[a]) break;
            off -= t->extents[a] * t->strides[a];
            idx[a] = 0;
        }
    }
}

typedef struct tu_fill_ctx {
    void *buf;
    nj_dtype dt;
    nj_rng *r;
    double lo, hi, quantum;
    const double *src;
    double *dst;
    const void *cbuf;
} tu_fill_ctx;

static void tu_fill_one(int64_t lin, int64_t off, void *user)
{
    tu_fill_ctx *c = user;
    double v = c->r ? nj_rng_range(c->r, c->lo, c->hi) : c->lo;
    if (c->quantum > 0) v = floor(v / c->quantum) * c->quantum;
    nj_store_from_double(c->buf, off, c->dt, v);
}

void nj_tu_fill_uniform(void *buf, const nj_tensor_desc *t, nj_rng *r, double lo, double hi, double quantum)
{
    tu_fill_ctx c = {.buf = buf, .dt = (nj_dtype)t->dtype, .r = r, .lo = lo, .hi = hi, .quantum = quantum};
    nj_tu_for_each(t, tu_fill_one, &c);
}

void nj_tu_fill_const(void *buf, const nj_tensor_desc *t, double v)
{
    tu_fill_ctx c = {.buf = buf, .dt = (nj_dtype)t->dtype, .lo = v};
    nj_tu_for_each(t, tu_fill_one, &c);
}

static void tu_gather_one(int64_t lin, int64_t off, void *user)
{
    tu_fill_ctx *c = user;
    c->dst[lin] = nj_load_as_double(c->cbuf, off, c->dt);
}

void nj_tu_gather(const void *buf, const nj_tensor_desc *t, double *dense)
{
    tu_fill_ctx c = {.cbuf = buf, .dt = (nj_dtype)t->dtype, .dst = dense};
    nj_tu_for_each(t, tu_gather_one, &c);
}

static void tu_scatter_one(int64_t lin, int64_t off, void *user)
{
    tu_fill_ctx *c = user;
    nj_store_from_double(c->buf, off, c->dt, c->src[lin]);
}

void nj_tu_scatter(void *buf, const nj_tensor_desc *t, const double *dense)
{
    tu_fill_ctx c = {.buf = buf, .dt = (nj_dtype)t->dtype, .src = dense};
    nj_tu_for_each(t, tu_scatter_one, &c);
}

/* ---- comparison ---- */

nj_tu_cmp nj_tu_compare_dense(const char *label, const double *got, const double *want, int64_t n, double atol,
                              double rtol, int max_report)
{
    nj_tu_cmp c = {.count = n, .worst_index = -1};
    double worst_excess = 0;
    int reported = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], err = fabs(g - w), tol = atol + rtol * fabs(w);
        bool bad;
        if (isnan(w) || isnan(g)) {
            bad = isnan(w) != isnan(g);
            err = bad ? INFINITY : 0;
        } else if (isinf(w) || isinf(g)) {
            bad = g != w;
            err = bad ? INFINITY : 0;
        } else {
            bad = !(err <= tol);
        }
        if (err > c.max_abs_err) c.max_abs_err = err;
        double rel = err / fmax(fabs(w), 1e-30);
        if (rel > c.max_rel_err) c.max_rel_err = rel;
        if (!bad) continue;
        c.mismatches++;
        if (err - tol > worst_excess || c.worst_index < 0) {
            worst_excess = err - tol;
            c.worst_index = i;
            c.worst_got = g;
            c.worst_want = w;
        }
        if (reported++ < max_report)
            fprintf(stderr, "%s[%lld]: got %.10g want %.10g (|err| %.3g > tol %.3g)\n", label ? label : "cmp",
                    (long long)i, g, w, err, tol);
    }
    if (c.mismatches && max_report > 0)
        fprintf(stderr, "%s: %lld of %lld elements out of tolerance (atol %g, rtol %g), max abs err %.3g\n",
                label ? label : "cmp", (long long)c.mismatches, (long long)n, atol, rtol, c.max_abs_err);
    return c;
}

nj_tu_cmp nj_tu_compare_strided(const char *label, const void *buf, const nj_tensor_desc *t, const double *want,
                                double atol, double rtol, int max_report)
{
    int64_t n = nj_tu_numel(t);
    double *got = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!got) {
        nj_tu_cmp fail = {.count = n, .mismatches = n > 0 ? n : 1, .worst_index = -1};
        return fail;
    }
    nj_tu_gather(buf, t, got);
    nj_tu_cmp c = nj_tu_compare_dense(label, got, want, n, atol, rtol, max_report);
    free(got);
    return c;
}

void nj_tu_default_tol(nj_dtype d, double *atol, double *rtol)
{
    /* The one table of tolerances lives in tools/tolerance.h (shared with `normjit check`). */
    njt_tolerance t = njt_tol_output(d);
    *atol = t.atol;
    *rtol = t.rtol;
}

/* ---- files ---- */

bool nj_tu_make_temp_dir(const char *tag, char *out, size_t cap)
{
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    int n = snprintf(out, cap, "%s/normjit-%s-XXXXXX", base, tag ? tag : "test");
    if (n < 0 || (size_t)n >= cap || !mkdtemp(out)) {
        if (cap) out[0] = '\0';
        return false;
    }
    return true;
}

static int tu_remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : -1;
}

int nj_tu_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 ? 0 : -1;
    return nftw(path, tu_remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}
