/* Kernel-vs-reference checks (see check_lib.h). Inputs are generated on the host in storage order,
 * quantized to their dtype, and the reference reads the very same quantized buffers, so the only
 * differences measured are the kernels' arithmetic and output rounding. */
#include "check_lib.h"

#define NJ_OPERATOR_API
#include "normjit_ops.h"

/* forwards a failure (its detail already recorded by the library) */
#define CHK_TRY(expr)                       \
    do {                                    \
        nj_status chk_try_s_ = (expr);      \
        if (chk_try_s_ != NJ_OK) return chk_try_s_; \
    } while (0)

#include <math.h>
#include <stdlib.h>
#include <string.h>

void njt_check_options_init(njt_check_options *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->scale = 1.0;
    o->eps = 1e-5;
    o->passes = NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
}

/* ---- element access ---- */

static double njt_chk_load(const void *b, int64_t i, nj_dtype d)
{
    return nj_ops_dtype_load(d, b, i);
}

static void njt_chk_store(void *b, int64_t i, nj_dtype d, double v)
{
    nj_ops_dtype_store(d, b, i, v);
}

/* An operand's effective layout: rank 0 means x's extents and strides, dtype NONE means x's dtype. */
static nj_tensor_desc njt_chk_layout(const nj_problem_desc *p, const nj_tensor_desc *t)
{
    nj_tensor_desc r = t->rank ? *t : p->x;
    r.dtype = t->dtype ? t->dtype : p->x.dtype;
    return r;
}

/* Elements of storage a strided tensor spans (largest offset + 1). */
static int64_t njt_chk_storage(const nj_tensor_desc *t)
{
    int64_t last = 0;
    for (int k = 0; k < t->rank; k++) {
        if (t->extents[k] == 0) return 0;
        last += (t->extents[k] - 1) * (t->strides[k] < 0 ? -t->strides[k] : t->strides[k]);
    }
    return last + 1;
}

/* Walks logical (row-major over extents) indices; njt_chk_step returns the next offset under `t`. */
typedef struct njt_chk_iter {
    int64_t idx[NJ_MAX_RANK];
} njt_chk_iter;

static int64_t njt_chk_offset(const nj_tensor_desc *t, const njt_chk_iter *it)
{
    int64_t off = 0;
    for (int k = 0; k < t->rank; k++) off += it->idx[k] * t->strides[k];
    return off;
}

static void njt_chk_next(const nj_tensor_desc *shape, njt_chk_iter *it)
{
    for (int k = shape->rank - 1; k >= 0; k--) {
        if (++it->idx[k] < shape->extents[k]) return;
        it->idx[k] = 0;
    }
}

/* ---- random data ---- */

static double njt_chk_uniform(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    uint64_t r = x * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
}

static void njt_chk_fill(void *b, nj_dtype d, int64_t n, uint64_t *s, double center, double spread)
{
    for (int64_t i = 0; i < n; i++) njt_chk_store(b, i, d, center + spread * njt_chk_uniform(s));
}

/* x's logical element `want` (row-major over its extents) set to NaN. */
static void njt_chk_put_nan(void *b, const nj_tensor_desc *t, int64_t want)
{
    njt_chk_iter it;
    memset(&it, 0, sizeof it);
    for (int64_t i = 0; i < want; i++) njt_chk_next(t, &it);
    njt_chk_store(b, njt_chk_offset(t, &it), (nj_dtype)t->dtype, NAN);
}

static void njt_chk_fill_nan(void *b, nj_dtype d, int64_t n)
{
    for (int64_t i = 0; i < n; i++) njt_chk_store(b, i, d, NAN);
}

/* ---- comparison ---- */

static double njt_chk_rms(const double *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i])) s += v[i] * v[i];
    return n ? sqrt(s / (double)n) : 0.0;
}

static void njt_chk_account(njt_check_result *r, int64_t i, double got, double ref)
{
    double err, diff = fabs(got - ref);
    if (!isfinite(ref)) {
        err = (isnan(ref) && isnan(got)) || got == ref ? 0.0 : INFINITY;
    } else if (!isfinite(got)) {
        r->nonfinite++;
        err = INFINITY;
    } else {
        /* plus one step of the dtype's subnormals: a correctly rounded tiny result may miss by half that */
        err = diff / (r->tol.atol * r->scale + r->tol.rtol * fabs(ref) + r->quantum);
        if (diff > r->max_abs) r->max_abs = diff;
        if (fabs(ref) >= 1e-3 * r->scale && diff / fabs(ref) > r->max_rel) r->max_rel = diff / fabs(ref);
    }
    if (err > r->max_err || r->worst_index < 0) {
        r->max_err = err;
        r->worst_index = i;
        r->worst_got = got;
        r->worst_ref = ref;
    }
}

void njt_check_compare(const char *name, const void *got, nj_dtype d, const nj_tensor_desc *layout,
                      const double *ref, int64_t n, double scale_floor, njt_tolerance tol, njt_check_result *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->dtype = d;
    out->count = n;
    out->tol = tol;
    out->quantum = njt_tol_quantum(d);
    out->worst_index = -1;
    out->scale = fmax(njt_chk_rms(ref, n), scale_floor);
    if (!(out->scale > 1e-30)) out->scale = 1e-30;
    njt_chk_iter it;
    memset(&it, 0, sizeof it);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = layout ? njt_chk_offset(layout, &it) : i;
        njt_chk_account(out, i, njt_chk_load(got, off, d), ref[i]);
        if (layout) njt_chk_next(layout, &it);
    }
    out->pass = out->max_err <= 1.0;
}

void njt_check_report_print(FILE *f, const njt_check_report *rep)
{
    for (int i = 0; i < rep->count; i++) {
        const njt_check_result *r = &rep->out[i];
        fprintf(f, "  %-12s %-4s %10lld  max_abs %9.3e  max_rel %9.3e  err %8.3g  tol %.1e*%.3g+%.1e*|ref|  %s\n",
                r->name, nj_dtype_name(r->dtype), (long long)r->count, r->max_abs, r->max_rel, r->max_err, r->tol.atol,
                r->scale, r->tol.rtol, r->pass ? "PASS" : "FAIL");
        if (!r->pass)
            fprintf(f, "  %-12s worst at index %lld: got %.9g, expected %.9g%s\n", "", (long long)r->worst_index,
                    r->worst_got, r->worst_ref, r->nonfinite ? " (NaN/Inf present: unwritten or overflowed)" : "");
    }
}

/* ---- buffers ---- */

/* One operand: a host copy and a backend copy (device memory, or host memory under the emulator). */
typedef struct njt_chk_buf {
    nj_tensor_desc t; /* layout (dense 1-D for stats and params) */
    int64_t elems;    /* storage elements */
    void *host;
    void *dev;
    void *base;   /* the backend allocation dev lies shift bytes into (NULL: dev itself) */
    size_t shift;
} njt_chk_buf;

typedef struct njt_chk_run {
    nj_context *ctx;
    const nj_problem_desc *p;
    njt_check_options o;
    int64_t numel, kept, feature;
    nj_dtype pdt; /* param dtype */
    njt_chk_buf x, res, gamma, beta, dy;
    double *ref_mean, *ref_rstd; /* of the normalized input (x + residual) */
    njt_chk_buf h;                /* the normalized input in x's layout, for backward */
    njt_check_report *rep;
} njt_chk_run;

static void njt_chk_dense(njt_chk_buf *b, nj_dtype d, int64_t n)
{
    memset(&b->t, 0, sizeof b->t);
    b->t.dtype = d;
    b->t.rank = 1;
    b->t.extents[0] = n;
    b->t.strides[0] = 1;
}

static nj_status njt_chk_host(njt_chk_buf *b)
{
    b->elems = njt_chk_storage(&b->t);
    size_t bytes = (size_t)(b->elems ? b->elems : 1) * nj_dtype_size((nj_dtype)b->t.dtype);
    b->host = calloc(1, bytes);
    if (!b->host) return NJ_ERR_OUT_OF_MEMORY;
    return NJ_OK;
}

static size_t njt_chk_bytes(const njt_chk_buf *b)
{
    return (size_t)(b->elems ? b->elems : 1) * nj_dtype_size((nj_dtype)b->t.dtype);
}

/* Copies the host buffer to the backend (allocating there first, b->shift bytes more). */
static nj_status njt_chk_upload(nj_context *ctx, njt_chk_buf *b)
{
    if (!b->dev) {
        CHK_TRY(nj_mem_alloc(ctx, njt_chk_bytes(b) + b->shift, &b->base));
        b->dev = (unsigned char *)b->base + b->shift;
    }
    return nj_mem_upload(ctx, b->dev, b->host, njt_chk_bytes(b));
}

/* Sets the operand's shift (--shift) where its element size divides it: a pointer misaligned for its
 * own dtype is the caller's error, not a case the kernels serve. */
static void njt_chk_shift(const njt_chk_run *r, njt_chk_buf *b)
{
    size_t es = nj_dtype_size((nj_dtype)b->t.dtype);
    b->shift = r->o.shift > 0 && es && (size_t)r->o.shift % es == 0 ? (size_t)r->o.shift : 0;
}

static nj_status njt_chk_download(nj_context *ctx, njt_chk_buf *b)
{
    return nj_mem_download(ctx, b->host, b->dev, njt_chk_bytes(b));
}

/* An output: host and backend copies filled with NaN so that elements the kernel skips stand out. */
static nj_status njt_chk_output(nj_context *ctx, njt_chk_buf *b)
{
    CHK_TRY(njt_chk_host(b));
    njt_chk_fill_nan(b->host, (nj_dtype)b->t.dtype, b->elems);
    return njt_chk_upload(ctx, b);
}

static void njt_chk_free(nj_context *ctx, njt_chk_buf *b)
{
    if (b->base || b->dev) nj_mem_free(ctx, b->base ? b->base : b->dev);
    free(b->host);
    memset(b, 0, sizeof *b);
}

static void njt_chk_add(njt_check_report *rep, const njt_check_result *r)
{
    if (rep->count >= NJT_CHECK_MAX_OUTPUTS) return;
    rep->out[rep->count++] = *r;
    if (!r->pass) rep->pass = 0;
}

/* The problem as backward sees it: x is the residual-summed input, so the residual flags go. */
static nj_problem_desc njt_chk_backward_problem(const nj_problem_desc *p)
{
    nj_problem_desc b = *p;
    b.flags &= ~(uint32_t)(NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT);
    memset(&b.residual, 0, sizeof b.residual);
    memset(&b.residual_out, 0, sizeof b.residual_out);
    return b;
}

/* h = x (+ residual, rounded to x's dtype as a stored residual_out would be), in x's layout. */
static nj_status njt_chk_summed_input(njt_chk_run *r)
{
    const nj_problem_desc *p = r->p;
    r->h.t = r->x.t;
    CHK_TRY(njt_chk_host(&r->h));
    memcpy(r->h.host, r->x.host, njt_chk_bytes(&r->x));
    if (!(p->flags & NJ_FLAG_RESIDUAL)) return NJ_OK;
    njt_chk_iter it;
    memset(&it, 0, sizeof it);
    nj_dtype xd = (nj_dtype)r->x.t.dtype, rd = (nj_dtype)r->res.t.dtype;
    for (int64_t i = 0; i < r->numel; i++) {
        int64_t xo = njt_chk_offset(&r->x.t, &it), ro = njt_chk_offset(&r->res.t, &it);
        njt_chk_store(r->h.host, xo, xd, (double)(float)(njt_chk_load(r->x.host, xo, xd) + njt_chk_load(r->res.host, ro, rd)));
        njt_chk_next(&r->x.t, &it);
    }
    return NJ_OK;
}

/* Random inputs, and the reference statistics of the summed input for backward. */
static nj_status njt_chk_inputs(njt_chk_run *r)
{
    const nj_problem_desc *p = r->p;
    uint64_t s = r->o.seed ? r->o.seed : 0x9E3779B97F4A7C15ull;
    r->x.t = njt_chk_layout(p, &p->x);
    CHK_TRY(njt_chk_host(&r->x));
    const double mag = r->o.scale != 0.0 ? r->o.scale : 1.0;
    njt_chk_fill(r->x.host, (nj_dtype)r->x.t.dtype, r->x.elems, &s, mag * r->o.offset, mag);
    if (r->o.nan && r->numel) njt_chk_put_nan(r->x.host, &r->x.t, r->numel / 2);
    if (p->flags & NJ_FLAG_RESIDUAL) {
        r->res.t = njt_chk_layout(p, &p->residual);
        CHK_TRY(njt_chk_host(&r->res));
        njt_chk_fill(r->res.host, (nj_dtype)r->res.t.dtype, r->res.elems, &s, 0.0, mag);
    }
    if (p->flags & NJ_FLAG_SCALE) {
        njt_chk_dense(&r->gamma, r->pdt, r->feature);
        CHK_TRY(njt_chk_host(&r->gamma));
        njt_chk_fill(r->gamma.host, r->pdt, r->gamma.elems, &s, 1.0, 0.25);
    }
    if (p->flags & NJ_FLAG_BIAS) {
        njt_chk_dense(&r->beta, r->pdt, r->feature);
        CHK_TRY(njt_chk_host(&r->beta));
        njt_chk_fill(r->beta.host, r->pdt, r->beta.elems, &s, 0.0, 0.1);
    }
    if (r->o.passes & NJ_PASS_BACKWARD) {
        r->dy.t = njt_chk_layout(p, &p->dy);
        CHK_TRY(njt_chk_host(&r->dy));
        njt_chk_fill(r->dy.host, (nj_dtype)r->dy.t.dtype, r->dy.elems, &s, 0.0, 1.0);
    }
    CHK_TRY(njt_chk_summed_input(r));
    r->ref_mean = calloc((size_t)(r->kept ? r->kept : 1), sizeof(double));
    r->ref_rstd = calloc((size_t)(r->kept ? r->kept : 1), sizeof(double));
    if (!r->ref_mean || !r->ref_rstd) return NJ_ERR_OUT_OF_MEMORY;
    nj_problem_desc bp = njt_chk_backward_problem(p);
    nj_ops_ref_inputs in = {.x = r->h.host, .gamma = r->gamma.host, .beta = r->beta.host, .eps = r->o.eps};
    nj_ops_ref_outputs out = {.mean = r->ref_mean, .rstd = r->ref_rstd};
    return nj_ops_ref_forward(&bp, &in, &out);
}

static nj_status njt_chk_upload_inputs(njt_chk_run *r)
{
    njt_chk_buf *in[] = {&r->x, &r->res, &r->gamma, &r->beta, &r->dy, &r->h};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (!in[i]->host) continue;
        njt_chk_shift(r, in[i]);
        CHK_TRY(njt_chk_upload(r->ctx, in[i]));
    }
    return NJ_OK;
}

/* RMS of the normalized input: the scale of the mean's error. */
static double njt_chk_input_rms(const njt_chk_run *r)
{
    njt_chk_iter it;
    memset(&it, 0, sizeof it);
    double s = 0;
    for (int64_t i = 0; i < r->numel; i++) {
        double v = njt_chk_load(r->h.host, njt_chk_offset(&r->h.t, &it), (nj_dtype)r->h.t.dtype);
        if (isfinite(v)) s += v * v; /* a NaN (--nan) marks its own set, not the others' scale */
        njt_chk_next(&r->h.t, &it);
    }
    return r->numel ? sqrt(s / (double)r->numel) : 0.0;
}

/* Forward outputs and their reference, laid out as the descriptor says. */
typedef struct njt_chk_fwd {
    njt_chk_buf y, ro, mean, rstd, ws;
    double *ry, *rro, *rmean, *rrstd;
} njt_chk_fwd;

static nj_status njt_chk_fwd_alloc(njt_chk_run *r, nj_plan *plan, njt_chk_fwd *f)
{
    const nj_problem_desc *p = r->p;
    size_t n = (size_t)(r->numel ? r->numel : 1), k = (size_t)(r->kept ? r->kept : 1);
    f->y.t = njt_chk_layout(p, &p->y);
    njt_chk_shift(r, &f->y);
    CHK_TRY(njt_chk_output(r->ctx, &f->y));
    f->ry = calloc(n, sizeof(double));
    if (p->flags & NJ_FLAG_RESIDUAL_OUT) {
        f->ro.t = njt_chk_layout(p, &p->residual_out);
        njt_chk_shift(r, &f->ro);
        CHK_TRY(njt_chk_output(r->ctx, &f->ro));
        f->rro = calloc(n, sizeof(double));
    }
    if (p->flags & NJ_FLAG_SAVE_STATS) {
        if (p->flags & NJ_FLAG_CENTER) {
            njt_chk_dense(&f->mean, NJ_F32, r->kept);
            CHK_TRY(njt_chk_output(r->ctx, &f->mean));
            f->rmean = calloc(k, sizeof(double));
        }
        njt_chk_dense(&f->rstd, NJ_F32, r->kept);
        CHK_TRY(njt_chk_output(r->ctx, &f->rstd));
        f->rrstd = calloc(k, sizeof(double));
    }
    size_t ws = nj_plan_workspace_size(plan, NJ_PASS_FORWARD);
    if (ws) CHK_TRY(nj_mem_alloc(r->ctx, ws, &f->ws.dev));
    f->ws.elems = (int64_t)ws; /* bytes */
    if (!f->ry || (f->ro.t.rank && !f->rro) || (f->mean.t.rank && !f->rmean) || (f->rstd.t.rank && !f->rrstd))
        return NJ_ERR_OUT_OF_MEMORY;
    return NJ_OK;
}

static void njt_chk_fwd_free(nj_context *ctx, njt_chk_fwd *f)
{
    njt_chk_free(ctx, &f->y);
    njt_chk_free(ctx, &f->ro);
    njt_chk_free(ctx, &f->mean);
    njt_chk_free(ctx, &f->rstd);
    njt_chk_free(ctx, &f->ws);
    free(f->ry);
    free(f->rro);
    free(f->rmean);
    free(f->rrstd);
}

static void njt_chk_fwd_compare(njt_chk_run *r, njt_chk_fwd *f)
{
    njt_check_result res;
    /* the statistics are exact to float32 whatever the offset (shifted sums); only a fused residual's sum,
     * rounded to float32 before the statistics (as residual_out stores it), loses offset * 2^-24 */
    double off = (r->p->flags & NJ_FLAG_RESIDUAL) ? r->o.offset : 0.0;
    nj_dtype xd = (nj_dtype)r->x.t.dtype;
    njt_check_compare("y", f->y.host, (nj_dtype)f->y.t.dtype, &f->y.t, f->ry, r->numel, 0.0,
                     njt_tol_widen_offset(njt_tol_output((nj_dtype)f->y.t.dtype), off), &res);
    njt_chk_add(r->rep, &res);
    if (f->ro.host) {
        njt_check_compare("residual_out", f->ro.host, (nj_dtype)f->ro.t.dtype, &f->ro.t, f->rro, r->numel, 0.0,
                         njt_tol_output((nj_dtype)f->ro.t.dtype), &res);
        njt_chk_add(r->rep, &res);
    }
    if (f->mean.host) {
        njt_check_compare("mean", f->mean.host, NJ_F32, NULL, f->rmean, r->kept, njt_chk_input_rms(r),
                         njt_tol_stats(xd), &res);
        njt_chk_add(r->rep, &res);
    }
    if (f->rstd.host) {
        njt_check_compare("rstd", f->rstd.host, NJ_F32, NULL, f->rrstd, r->kept, 0.0,
                         njt_tol_widen_offset(njt_tol_stats(xd), off), &res);
        njt_chk_add(r->rep, &res);
    }
}

static nj_status njt_chk_forward(njt_chk_run *r, nj_plan *plan)
{
    njt_chk_fwd f;
    memset(&f, 0, sizeof f);
    nj_status s = njt_chk_fwd_alloc(r, plan, &f);
    nj_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.eps = (float)r->o.eps;
    a.x = r->x.dev;
    a.residual = r->res.dev;
    a.gamma = r->gamma.dev;
    a.beta = r->beta.dev;
    a.y = f.y.dev;
    a.residual_out = f.ro.dev;
    a.mean = f.mean.dev;
    a.rstd = f.rstd.dev;
    a.workspace = f.ws.dev;
    a.workspace_size = (size_t)f.ws.elems;
    if (s == NJ_OK) s = nj_forward(plan, &a);
    if (s == NJ_OK) s = nj_synchronize(r->ctx, NULL);
    njt_chk_buf *outs[] = {&f.y, &f.ro, &f.mean, &f.rstd};
    for (size_t i = 0; s == NJ_OK && i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i]->dev) s = njt_chk_download(r->ctx, outs[i]);
    nj_ops_ref_inputs in = {.x = r->x.host, .residual = r->res.host, .gamma = r->gamma.host, .beta = r->beta.host,
                        .eps = r->o.eps};
    nj_ops_ref_outputs out = {.y = f.ry, .residual_out = f.rro, .mean = f.rmean, .rstd = f.rrstd};
    if (s == NJ_OK) s = nj_ops_ref_forward(r->p, &in, &out);
    if (s == NJ_OK) njt_chk_fwd_compare(r, &f);
    njt_chk_fwd_free(r->ctx, &f);
    return s;
}

/* Backward outputs, the saved statistics fed to the kernel, and the reference. */
typedef struct njt_chk_bwd {
    njt_chk_buf dx, dgamma, dbeta, mean, rstd, ws;
    double *rdx, *rdgamma, *rdbeta;
} njt_chk_bwd;

/* Statistics as float32, as a forward pass would have saved them. */
static nj_status njt_chk_stats_input(njt_chk_run *r, njt_chk_buf *b, const double *v)
{
    njt_chk_dense(b, NJ_F32, r->kept);
    CHK_TRY(njt_chk_host(b));
    for (int64_t i = 0; i < r->kept; i++) ((float *)b->host)[i] = (float)v[i];
    return njt_chk_upload(r->ctx, b);
}

static nj_status njt_chk_bwd_alloc(njt_chk_run *r, nj_plan *plan, njt_chk_bwd *b)
{
    const nj_problem_desc *p = r->p;
    size_t n = (size_t)(r->numel ? r->numel : 1), fe = (size_t)(r->feature ? r->feature : 1);
    b->dx.t = njt_chk_layout(p, &p->dx);
    njt_chk_shift(r, &b->dx);
    CHK_TRY(njt_chk_output(r->ctx, &b->dx));
    b->rdx = calloc(n, sizeof(double));
    if (p->flags & NJ_FLAG_SCALE) {
        njt_chk_dense(&b->dgamma, r->pdt, r->feature);
        njt_chk_shift(r, &b->dgamma);
        CHK_TRY(njt_chk_output(r->ctx, &b->dgamma));
        b->rdgamma = calloc(fe, sizeof(double));
    }
    if (p->flags & NJ_FLAG_BIAS) {
        njt_chk_dense(&b->dbeta, r->pdt, r->feature);
        njt_chk_shift(r, &b->dbeta);
        CHK_TRY(njt_chk_output(r->ctx, &b->dbeta));
        b->rdbeta = calloc(fe, sizeof(double));
    }
    if (p->flags & NJ_FLAG_CENTER) CHK_TRY(njt_chk_stats_input(r, &b->mean, r->ref_mean));
    CHK_TRY(njt_chk_stats_input(r, &b->rstd, r->ref_rstd));
    size_t ws = nj_plan_workspace_size(plan, NJ_PASS_BACKWARD);
    if (ws) CHK_TRY(nj_mem_alloc(r->ctx, ws, &b->ws.dev));
    b->ws.elems = (int64_t)ws; /* bytes */
    if (!b->rdx || (b->dgamma.t.rank && !b->rdgamma) || (b->dbeta.t.rank && !b->rdbeta)) return NJ_ERR_OUT_OF_MEMORY;
    return NJ_OK;
}

static void njt_chk_bwd_free(nj_context *ctx, njt_chk_bwd *b)
{
    njt_chk_buf *bufs[] = {&b->dx, &b->dgamma, &b->dbeta, &b->mean, &b->rstd, &b->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) njt_chk_free(ctx, bufs[i]);
    free(b->rdx);
    free(b->rdgamma);
    free(b->rdbeta);
}

static void njt_chk_bwd_compare(njt_chk_run *r, njt_chk_bwd *b)
{
    njt_check_result res;
    njt_check_compare("dx", b->dx.host, (nj_dtype)b->dx.t.dtype, &b->dx.t, b->rdx, r->numel, 0.0,
                     njt_tol_grad((nj_dtype)b->dx.t.dtype), &res);
    njt_chk_add(r->rep, &res);
    if (b->dgamma.host) {
        njt_check_compare("dgamma", b->dgamma.host, r->pdt, NULL, b->rdgamma, r->feature, 0.0,
                         njt_tol_grad(r->pdt), &res);
        njt_chk_add(r->rep, &res);
    }
    if (b->dbeta.host) {
        njt_check_compare("dbeta", b->dbeta.host, r->pdt, NULL, b->rdbeta, r->feature, 0.0, njt_tol_grad(r->pdt), &res);
        njt_chk_add(r->rep, &res);
    }
}

static nj_status njt_chk_backward(njt_chk_run *r, nj_plan *plan)
{
    njt_chk_bwd b;
    memset(&b, 0, sizeof b);
    nj_status s = njt_chk_bwd_alloc(r, plan, &b);
    nj_backward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.dy = r->dy.dev;
    a.x = r->h.dev;
    a.gamma = r->gamma.dev;
    a.beta = r->p->activation != NJ_ACT_NONE ? r->beta.dev : NULL; /* only to recompute an activation's input */
    a.mean = b.mean.dev;
    a.rstd = b.rstd.dev;
    a.dx = b.dx.dev;
    a.dgamma = b.dgamma.dev;
    a.dbeta = b.dbeta.dev;
    a.workspace = b.ws.dev;
    a.eps = (float)r->o.eps; /* what the forward used: sets of one or two elements read it */
    a.workspace_size = (size_t)b.ws.elems;
    if (s == NJ_OK) s = nj_backward(plan, &a);
    if (s == NJ_OK) s = nj_synchronize(r->ctx, NULL);
    njt_chk_buf *outs[] = {&b.dx, &b.dgamma, &b.dbeta};
    for (size_t i = 0; s == NJ_OK && i < sizeof outs / sizeof outs[0]; i++)
        if (outs[i]->dev) s = njt_chk_download(r->ctx, outs[i]);
    nj_problem_desc bp = njt_chk_backward_problem(r->p);
    nj_ops_ref_inputs in = {.x = r->h.host, .gamma = r->gamma.host, .beta = r->beta.host, .dy = r->dy.host,
                        .eps = r->o.eps};
    nj_ops_ref_outputs out = {.dx = b.rdx, .dgamma = b.rdgamma, .dbeta = b.rdbeta};
    if (s == NJ_OK) s = nj_ops_ref_backward(&bp, &in, &out);
    if (s == NJ_OK) njt_chk_bwd_compare(r, &b);
    njt_chk_bwd_free(r->ctx, &b);
    return s;
}

static void njt_chk_run_free(njt_chk_run *r)
{
    njt_chk_buf *bufs[] = {&r->x, &r->res, &r->gamma, &r->beta, &r->dy, &r->h};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) njt_chk_free(r->ctx, bufs[i]);
    free(r->ref_mean);
    free(r->ref_rstd);
}

nj_status njt_check_problem(nj_context *ctx, const nj_problem_desc *p, const njt_check_options *o,
                           njt_check_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->pass = 1;
    if (!ctx || !p) return NJ_ERR_NULL_POINTER;
    njt_chk_run r;
    memset(&r, 0, sizeof r);
    r.ctx = ctx;
    r.p = p;
    r.rep = rep;
    if (o) r.o = *o;
    else njt_check_options_init(&r.o);
    r.pdt = p->param_dtype ? (nj_dtype)p->param_dtype : NJ_F32;
    nj_plan *plan = NULL;
    nj_status s = nj_plan_get(ctx, p, r.o.passes, &plan); /* validates p before the sizes are trusted */
    if (s == NJ_OK) nj_ops_ref_sizes(p, &r.numel, &r.kept, &r.feature);
    if (s == NJ_OK) s = njt_chk_inputs(&r);
    if (s == NJ_OK) s = njt_chk_upload_inputs(&r);
    if (s == NJ_OK && (r.o.passes & NJ_PASS_FORWARD)) s = njt_chk_forward(&r, plan);
    if (s == NJ_OK && (r.o.passes & NJ_PASS_BACKWARD)) s = njt_chk_backward(&r, plan);
    njt_chk_run_free(&r);
    if (s != NJ_OK) rep->pass = 0;
    return s;
}
