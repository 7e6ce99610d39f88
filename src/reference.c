/* Double-precision CPU reference for the general normalization problem (docs/design.md, Semantics).
 *
 * It deliberately works from the raw descriptor (x's axes in the caller's order, bit masks, strides)
 * rather than from the canonical form, so that comparing kernels against it also checks
 * canonicalization. Everything is computed in double with a two-pass (mean, then centred squares)
 * compensated summation, so the reference stays exact enough to judge float32 kernels even for a
 * large mean offset. Speed does not matter here; clarity and independence do. */
#include "reference.h"
#include "vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- element access ---- */

double nj_load_as_double(const void *base, int64_t offset, nj_dtype d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->load(base, offset) : NAN;
}

void nj_store_from_double(void *base, int64_t offset, nj_dtype d, double v)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    if (t) t->store(base, offset, v);
}

/* ---- the resolved problem ---- */

/* Strided operands read by the walker, plus the two dense index spaces (stats, params). */
enum { W_X, W_RES, W_DY, W_KEPT, W_FEAT, W_COUNT };

typedef struct ref_prob {
    int rank;
    int64_t ext[NJ_MAX_RANK];
    int64_t stride[W_COUNT][NJ_MAX_RANK]; /* 0 for an operand the pass does not read */
    nj_dtype dt[W_COUNT];                 /* dtype of X, RES, DY */
    nj_dtype pdt;                         /* gamma/beta dtype */
    int64_t numel, kept, feature, nred;
    uint32_t flags;
    int act;
} ref_prob;

static bool ref_dtype_ok(int32_t d) { return nj_dtype_find(d) != NULL; }

/* Checks one optional operand against x; rank 0 means "x's extents and strides", dtype NONE "x's dtype". */
static nj_status ref_operand(const char *name, const nj_tensor_desc *t, const nj_tensor_desc *x,
                             int64_t strides[NJ_MAX_RANK], nj_dtype *dt)
{
    *dt = t->dtype == NJ_DTYPE_NONE ? (nj_dtype)x->dtype : (nj_dtype)t->dtype;
    NJ_RETURN_IF(!ref_dtype_ok(*dt), NJ_ERR_BAD_DTYPE, "%s.dtype = %d is not one of %s", name, (int)t->dtype,
                 nj_dtype_list());
    if (t->rank == 0) {
        memcpy(strides, x->strides, sizeof(int64_t) * (size_t)x->rank);
        return NJ_OK;
    }
    NJ_RETURN_IF(t->rank != x->rank, NJ_ERR_SHAPE_MISMATCH, "%s.rank = %d but x.rank = %d", name, (int)t->rank,
                 (int)x->rank);
    for (int a = 0; a < x->rank; a++) {
        NJ_RETURN_IF(t->extents[a] != x->extents[a], NJ_ERR_SHAPE_MISMATCH, "%s.extents[%d] = %lld but x has %lld",
                     name, a, (long long)t->extents[a], (long long)x->extents[a]);
        NJ_RETURN_IF(t->strides[a] < 0, NJ_ERR_BAD_STRIDE, "%s.strides[%d] = %lld is negative", name, a,
                     (long long)t->strides[a]);
        strides[a] = t->strides[a];
    }
    return NJ_OK;
}

/* x itself: rank, extents, strides, dtype, and that every offset fits in int64. */
static nj_status ref_check_x(const nj_tensor_desc *x, int64_t *numel)
{
    NJ_RETURN_IF(x->rank < 1 || x->rank > NJ_MAX_RANK, NJ_ERR_BAD_RANK, "x.rank = %d", (int)x->rank);
    NJ_RETURN_IF(!ref_dtype_ok(x->dtype), NJ_ERR_BAD_DTYPE, "x.dtype = %d is not one of %s", (int)x->dtype,
                 nj_dtype_list());
    int64_t n = 1, span = 0;
    for (int a = 0; a < x->rank; a++) {
        int64_t e = x->extents[a], s = x->strides[a], part;
        NJ_RETURN_IF(e < 0, NJ_ERR_BAD_EXTENT, "x.extents[%d] = %lld", a, (long long)e);
        NJ_RETURN_IF(s < 0, NJ_ERR_BAD_STRIDE, "x.strides[%d] = %lld is negative", a, (long long)s);
        NJ_RETURN_IF(__builtin_mul_overflow(n, e, &n), NJ_ERR_OVERFLOW, "x has more than 2^63 elements");
        NJ_RETURN_IF(e > 0 && (__builtin_mul_overflow(e - 1, s, &part) || __builtin_add_overflow(span, part, &span)),
                     NJ_ERR_OVERFLOW, "x's offsets overflow 64 bits at axis %d", a);
    }
    /* The reference holds a few dense double copies of x. */
    NJ_RETURN_IF((uint64_t)n > SIZE_MAX / (4 * sizeof(double)), NJ_ERR_OVERFLOW, "x too large for the reference");
    *numel = n;
    return NJ_OK;
}

/* Dense row-major strides over the axes in `mask` (0 on the others); returns the product of their extents. */
static int64_t ref_dense_strides(const ref_prob *rp, uint32_t mask, int64_t out[NJ_MAX_RANK])
{
    int64_t n = 1;
    for (int a = rp->rank - 1; a >= 0; a--) {
        out[a] = (mask >> a) & 1u ? n : 0;
        if ((mask >> a) & 1u) n *= rp->ext[a];
    }
    return n;
}

static nj_status ref_check_desc(const nj_problem_desc *p, int64_t *numel)
{
    NJ_RETURN_IF(p->struct_size != sizeof(nj_problem_desc), NJ_ERR_BAD_STRUCT_SIZE,
                 "problem.struct_size = %u, expected %zu", p->struct_size, sizeof(nj_problem_desc));
    NJ_TRY(ref_check_x(&p->x, numel));
    NJ_RETURN_IF(p->flags & ~NJ_FLAGS_ALL, NJ_ERR_BAD_FLAGS, "unknown flag bits 0x%x", p->flags & ~NJ_FLAGS_ALL);
    NJ_RETURN_IF((p->flags & NJ_FLAG_RESIDUAL_OUT) && !(p->flags & NJ_FLAG_RESIDUAL), NJ_ERR_BAD_FLAGS,
                 "NJ_FLAG_RESIDUAL_OUT needs NJ_FLAG_RESIDUAL");
    NJ_RETURN_IF(!nj_act_find(p->activation), NJ_ERR_BAD_ACTIVATION,
                 "activation = %d", (int)p->activation);
    uint32_t all = (1u << p->x.rank) - 1u; /* rank is 1..NJ_MAX_RANK here */
    NJ_RETURN_IF(p->reduce_axes == 0, NJ_ERR_EMPTY_REDUCTION, "reduce_axes is empty");
    NJ_RETURN_IF(p->reduce_axes & ~all, NJ_ERR_BAD_AXIS, "reduce_axes 0x%x names an axis >= x.rank %d",
                 p->reduce_axes, (int)p->x.rank);
    NJ_RETURN_IF(p->feature_axes & ~all, NJ_ERR_BAD_AXIS, "feature_axes 0x%x names an axis >= x.rank %d",
                 p->feature_axes, (int)p->x.rank);
    int32_t pd = p->param_dtype == NJ_DTYPE_NONE ? NJ_F32 : p->param_dtype;
    NJ_RETURN_IF(!ref_dtype_ok(pd), NJ_ERR_BAD_DTYPE, "param_dtype = %d", (int)p->param_dtype);
    return NJ_OK;
}

/* Validates what `pass` needs and resolves it into rp. */
static nj_status ref_setup(const nj_problem_desc *p, const nj_ref_inputs *in, const nj_ref_outputs *out,
                           nj_pass pass, ref_prob *rp)
{
    NJ_RETURN_IF(!p || !in || !out, NJ_ERR_NULL_POINTER, "reference: problem, inputs or outputs is NULL");
    memset(rp, 0, sizeof *rp);
    NJ_TRY(ref_check_desc(p, &rp->numel));
    rp->rank = p->x.rank;
    rp->flags = p->flags;
    rp->act = p->activation;
    rp->pdt = p->param_dtype == NJ_DTYPE_NONE ? NJ_F32 : (nj_dtype)p->param_dtype;
    memcpy(rp->ext, p->x.extents, sizeof(int64_t) * (size_t)rp->rank);
    memcpy(rp->stride[W_X], p->x.strides, sizeof(int64_t) * (size_t)rp->rank);
    rp->dt[W_X] = (nj_dtype)p->x.dtype;
    int64_t unused[NJ_MAX_RANK];
    nj_dtype udt;
    NJ_RETURN_IF(!in->x, NJ_ERR_NULL_POINTER, "reference: x is NULL");
    NJ_RETURN_IF((p->flags & NJ_FLAG_SCALE) && !in->gamma, NJ_ERR_NULL_POINTER, "NJ_FLAG_SCALE but gamma is NULL");
    if (pass == NJ_PASS_FORWARD) {
        NJ_RETURN_IF((p->flags & NJ_FLAG_BIAS) && !in->beta, NJ_ERR_NULL_POINTER, "NJ_FLAG_BIAS but beta is NULL");
        NJ_TRY(ref_operand("y", &p->y, &p->x, unused, &udt));
        if (p->flags & NJ_FLAG_RESIDUAL) {
            NJ_RETURN_IF(!in->residual, NJ_ERR_NULL_POINTER, "NJ_FLAG_RESIDUAL but residual is NULL");
            NJ_TRY(ref_operand("residual", &p->residual, &p->x, rp->stride[W_RES], &rp->dt[W_RES]));
        }
        if (p->flags & NJ_FLAG_RESIDUAL_OUT)
            NJ_TRY(ref_operand("residual_out", &p->residual_out, &p->x, unused, &udt));
    } else {
        /* beta only matters to recompute an activation's input. */
        NJ_RETURN_IF((p->flags & NJ_FLAG_BIAS) && p->activation != NJ_ACT_NONE && !in->beta, NJ_ERR_NULL_POINTER,
                     "NJ_FLAG_BIAS with an activation but beta is NULL");
        NJ_RETURN_IF(!in->dy, NJ_ERR_NULL_POINTER, "reference backward: dy is NULL");
        NJ_TRY(ref_operand("dy", &p->dy, &p->x, rp->stride[W_DY], &rp->dt[W_DY]));
        NJ_TRY(ref_operand("dx", &p->dx, &p->x, unused, &udt));
    }
    rp->nred = ref_dense_strides(rp, p->reduce_axes, unused);
    rp->kept = ref_dense_strides(rp, ~p->reduce_axes & ((1u << rp->rank) - 1u), rp->stride[W_KEPT]);
    rp->feature = ref_dense_strides(rp, p->feature_axes, rp->stride[W_FEAT]);
    return NJ_OK;
}

void nj_ref_sizes(const nj_problem_desc *p, int64_t *numel, int64_t *kept, int64_t *feature)
{
    int64_t n = 1, k = 1, f = 1;
    int rank = p ? p->x.rank : 0;
    if (rank < 1 || rank > NJ_MAX_RANK) { /* not a problem: nothing to size */
        n = k = f = 0;
        rank = 0;
    }
    for (int a = 0; a < rank; a++) {
        int64_t e = p->x.extents[a] > 0 ? p->x.extents[a] : 0;
        /* Saturate rather than overflow: the caller validates before allocating anything this big. */
        if (__builtin_mul_overflow(n, e, &n)) n = INT64_MAX;
        if (!((p->reduce_axes >> a) & 1u) && __builtin_mul_overflow(k, e, &k)) k = INT64_MAX;
        if (((p->feature_axes >> a) & 1u) && __builtin_mul_overflow(f, e, &f)) f = INT64_MAX;
    }
    if (numel) *numel = n;
    if (kept) *kept = k;
    if (feature) *feature = f;
}

/* ---- odometer over x's logical index, row-major ---- */

typedef struct ref_walk {
    const ref_prob *rp;
    int64_t idx[NJ_MAX_RANK];
    int64_t off[W_COUNT];
    int64_t lin; /* dense row-major index into x's extents */
} ref_walk;

static void walk_init(ref_walk *w, const ref_prob *rp)
{
    memset(w, 0, sizeof *w);
    w->rp = rp;
}

/* Steps to the next element; the innermost axis moves fastest. Needs numel > 0. */
static void walk_next(ref_walk *w)
{
    const ref_prob *rp = w->rp;
    w->lin++;
    for (int a = rp->rank - 1; a >= 0; a--) {
        for (int o = 0; o < W_COUNT; o++) w->off[o] += rp->stride[o][a];
        if (++w->idx[a] < rp->ext[a]) return;
        for (int o = 0; o < W_COUNT; o++) w->off[o] -= rp->ext[a] * rp->stride[o][a];
        w->idx[a] = 0;
    }
}

#define REF_FOR_EACH(w, rp) for (walk_init(&(w), (rp)); (w).lin < (rp)->numel; walk_next(&(w)))

/* ---- activations ---- */

static double ref_sigmoid(double z)
{
    if (z >= 0) return 1.0 / (1.0 + exp(-z));
    double e = exp(z);
    return e / (1.0 + e);
}

#define REF_GELU_C 0.7978845608028654 /* sqrt(2/pi) */
#define REF_GELU_K 0.044715
#define REF_INV_SQRT_2PI 0.3989422804014327 /* 1/sqrt(2 pi) */

static double ref_act(int act, double z)
{
    switch (act) {
    case NJ_ACT_RELU: return z > 0 ? z : 0.0;
    case NJ_ACT_SILU: return z * ref_sigmoid(z);
    case NJ_ACT_GELU_TANH: return 0.5 * z * (1.0 + tanh(REF_GELU_C * (z + REF_GELU_K * z * z * z)));
    case NJ_ACT_GELU_ERF: return 0.5 * z * (1.0 + erf(z / sqrt(2.0)));
    case NJ_ACT_SIGMOID: return ref_sigmoid(z);
    default: return z;
    }
}

/* d act / d z. ReLU's derivative at exactly 0 is taken as 0 (the usual convention). */
static double ref_act_grad(int act, double z)
{
    switch (act) {
    case NJ_ACT_RELU: return z > 0 ? 1.0 : 0.0;
    case NJ_ACT_SILU: {
        double s = ref_sigmoid(z);
        return s + z * s * (1.0 - s);
    }
    case NJ_ACT_GELU_TANH: {
        double t = tanh(REF_GELU_C * (z + REF_GELU_K * z * z * z));
        return 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * REF_GELU_C * (1.0 + 3.0 * REF_GELU_K * z * z);
    }
    case NJ_ACT_GELU_ERF:
        return 0.5 * (1.0 + erf(z / sqrt(2.0))) + z * exp(-0.5 * z * z) * REF_INV_SQRT_2PI;
    case NJ_ACT_SIGMOID: {
        double s = ref_sigmoid(z);
        return s * (1.0 - s);
    }
    default: return 1.0;
    }
}

/* ---- shared steps ---- */

/* Scratch: dense x (residual added), per-statistic mean/rstd and a compensation term, params. */
typedef struct ref_work {
    double *xs, *aux; /* numel */
    double *mean, *rstd, *comp; /* kept */
    double *gamma, *beta;       /* feature */
} ref_work;

static void ref_work_free(ref_work *wk)
{
    free(wk->xs);
    free(wk->aux);
    free(wk->mean);
    free(wk->rstd);
    free(wk->comp);
    free(wk->gamma);
    free(wk->beta);
    memset(wk, 0, sizeof *wk);
}

static nj_status ref_work_alloc(ref_work *wk, const ref_prob *rp, bool need_aux)
{
    memset(wk, 0, sizeof *wk);
    size_t n = (size_t)rp->numel, k = (size_t)rp->kept, f = (size_t)rp->feature;
    wk->xs = malloc(n * sizeof(double));
    wk->aux = need_aux ? malloc(n * sizeof(double)) : NULL;
    wk->mean = malloc(k * sizeof(double));
    wk->rstd = malloc(k * sizeof(double));
    wk->comp = malloc(k * sizeof(double));
    wk->gamma = malloc(f * sizeof(double));
    wk->beta = malloc(f * sizeof(double));
    if (!wk->xs || (need_aux && !wk->aux) || !wk->mean || !wk->rstd || !wk->comp || !wk->gamma || !wk->beta) {
        ref_work_free(wk);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "reference: cannot allocate scratch for %lld elements",
                       (long long)rp->numel);
    }
    return NJ_OK;
}

/* Neumaier-compensated accumulation: the reference should not be the least accurate party. */
static void ref_acc(double *sum, double *comp, double v)
{
    double t = *sum + v;
    *comp += fabs(*sum) >= fabs(v) ? (*sum - t) + v : (v - t) + *sum;
    *sum = t;
}

static void ref_load(const ref_prob *rp, const nj_ref_inputs *in, ref_work *wk)
{
    ref_walk w;
    bool res = (rp->flags & NJ_FLAG_RESIDUAL) && in->residual;
    REF_FOR_EACH(w, rp) {
        double v = nj_load_as_double(in->x, w.off[W_X], rp->dt[W_X]);
        if (res) v += nj_load_as_double(in->residual, w.off[W_RES], rp->dt[W_RES]);
        wk->xs[w.lin] = v;
    }
    bool scale = (rp->flags & NJ_FLAG_SCALE) && in->gamma, bias = (rp->flags & NJ_FLAG_BIAS) && in->beta;
    for (int64_t f = 0; f < rp->feature; f++) {
        wk->gamma[f] = scale ? nj_load_as_double(in->gamma, f, rp->pdt) : 1.0;
        wk->beta[f] = bias ? nj_load_as_double(in->beta, f, rp->pdt) : 0.0;
    }
}

/* Two passes over the dense x: mean (0 under RMS), then the mean of centred squares. */
static void ref_stats(const ref_prob *rp, ref_work *wk, double eps)
{
    ref_walk w;
    size_t kb = (size_t)rp->kept * sizeof(double);
    double inv_n = 1.0 / (double)rp->nred;
    memset(wk->mean, 0, kb);
    memset(wk->comp, 0, kb);
    if (rp->flags & NJ_FLAG_CENTER) {
        REF_FOR_EACH(w, rp) ref_acc(&wk->mean[w.off[W_KEPT]], &wk->comp[w.off[W_KEPT]], wk->xs[w.lin]);
        for (int64_t k = 0; k < rp->kept; k++) wk->mean[k] = (wk->mean[k] + wk->comp[k]) * inv_n;
    }
    memset(wk->rstd, 0, kb);
    memset(wk->comp, 0, kb);
    REF_FOR_EACH(w, rp) {
        int64_t k = w.off[W_KEPT];
        double d = wk->xs[w.lin] - wk->mean[k];
        ref_acc(&wk->rstd[k], &wk->comp[k], d * d);
    }
    for (int64_t k = 0; k < rp->kept; k++) wk->rstd[k] = 1.0 / sqrt((wk->rstd[k] + wk->comp[k]) * inv_n + eps);
}

/* ---- forward ---- */

nj_status nj_ref_forward(const nj_problem_desc *p, const nj_ref_inputs *in, nj_ref_outputs *out)
{
    ref_prob rp;
    NJ_TRY(ref_setup(p, in, out, NJ_PASS_FORWARD, &rp));
    if (rp.numel == 0) return NJ_OK; /* no element, no statistic with any data behind it */
    ref_work wk;
    NJ_TRY(ref_work_alloc(&wk, &rp, false));
    ref_load(&rp, in, &wk);
    ref_stats(&rp, &wk, in->eps);
    if (out->y) {
        ref_walk w;
        REF_FOR_EACH(w, &rp) {
            int64_t k = w.off[W_KEPT], f = w.off[W_FEAT];
            double z = (wk.xs[w.lin] - wk.mean[k]) * wk.rstd[k] * wk.gamma[f] + wk.beta[f];
            out->y[w.lin] = ref_act(rp.act, z);
        }
    }
    if (out->residual_out) memcpy(out->residual_out, wk.xs, (size_t)rp.numel * sizeof(double));
    if (out->mean) memcpy(out->mean, wk.mean, (size_t)rp.kept * sizeof(double));
    if (out->rstd) memcpy(out->rstd, wk.rstd, (size_t)rp.kept * sizeof(double));
    ref_work_free(&wk);
    return NJ_OK;
}

/* ---- backward ---- */

/* First pass: dz = dy * act'(z); keeps dxhat = dz * gamma in aux, and accumulates the per-statistic
 * sums of dxhat (sum1) and dxhat * xhat (sum2) and the parameter gradients. */
static void ref_bwd_sums(const ref_prob *rp, const nj_ref_inputs *in, ref_work *wk, double *sum1, double *sum2,
                         double *dgamma, double *dbeta)
{
    ref_walk w;
    REF_FOR_EACH(w, rp) {
        int64_t k = w.off[W_KEPT], f = w.off[W_FEAT];
        double xhat = (wk->xs[w.lin] - wk->mean[k]) * wk->rstd[k];
        double z = xhat * wk->gamma[f] + wk->beta[f];
        double dz = nj_load_as_double(in->dy, w.off[W_DY], rp->dt[W_DY]) * ref_act_grad(rp->act, z);
        double dxhat = dz * wk->gamma[f];
        wk->aux[w.lin] = dxhat;
        sum1[k] += dxhat;
        sum2[k] += dxhat * xhat;
        if (dgamma) dgamma[f] += dz * xhat;
        if (dbeta) dbeta[f] += dz;
    }
}

nj_status nj_ref_backward(const nj_problem_desc *p, const nj_ref_inputs *in, nj_ref_outputs *out)
{
    ref_prob rp;
    NJ_TRY(ref_setup(p, in, out, NJ_PASS_BACKWARD, &rp));
    size_t fb = (size_t)rp.feature * sizeof(double);
    if (out->dgamma) memset(out->dgamma, 0, fb);
    if (out->dbeta) memset(out->dbeta, 0, fb);
    if (rp.numel == 0) return NJ_OK; /* the parameter gradients are empty sums: zero */
    ref_work wk;
    NJ_TRY(ref_work_alloc(&wk, &rp, true));
    double *sums = calloc(2 * (size_t)rp.kept, sizeof(double));
    if (!sums) {
        ref_work_free(&wk);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "reference: cannot allocate backward sums");
    }
    double *sum1 = sums, *sum2 = sums + rp.kept;
    ref_load(&rp, in, &wk);
    ref_stats(&rp, &wk, in->eps);
    ref_bwd_sums(&rp, in, &wk, sum1, sum2, out->dgamma, out->dbeta);
    /* The mean's gradient term exists only when the mean was subtracted. */
    double inv_n = 1.0 / (double)rp.nred, center = (rp.flags & NJ_FLAG_CENTER) ? 1.0 : 0.0;
    /* A set of one element (two when centred) has xhat^2 = 1 - eps * rstd^2 exactly, so dx is
     * rstd * (dxhat - mean) * eps * rstd^2; the general form reaches it as a difference whose double
     * rounding, times rstd, is 1e15 at magnitude 1e-30 with eps 0 (where the exact dx is 0). */
    int degenerate = rp.nred <= (center != 0.0 ? 2 : 1);
    if (out->dx) {
        ref_walk w;
        REF_FOR_EACH(w, &rp) {
            int64_t k = w.off[W_KEPT];
            double xhat = (wk.xs[w.lin] - wk.mean[k]) * wk.rstd[k], r = wk.rstd[k];
            double gc = wk.aux[w.lin] - center * sum1[k] * inv_n;
            out->dx[w.lin] = degenerate ? r * gc * (in->eps * r * r) : r * (gc - xhat * sum2[k] * inv_n);
        }
    }
    if (out->mean) memcpy(out->mean, wk.mean, (size_t)rp.kept * sizeof(double));
    if (out->rstd) memcpy(out->rstd, wk.rstd, (size_t)rp.kept * sizeof(double));
    free(sums);
    ref_work_free(&wk);
    return NJ_OK;
}
