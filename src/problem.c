/* Problem model: validation, canonical form and keys (problem.h). Presets live in presets.c and the text
 * form in problem_text.c.
 *
 * Canonical ordering rule: after size-1 axes are dropped, axes are sorted by x stride, largest first; the
 * sort is stable, so equal x strides (broadcast axes with stride 0, or overlapping input views) keep x's
 * axis order, and broadcast axes end up innermost. Neighbours then merge when they play the same role
 * and are contiguous with each other in every operand (absent operands have stride 0 everywhere, which
 * never blocks a merge).
 */
#include "problem.h"
#include "vocab.h"

#include <string.h>

static const nj_tensor_desc *opd_desc(const nj_problem_desc *p, int o) { return nj_operand_desc(p, o); }

/* x, y, dy and dx always take part (any problem can run backward); residual operands follow the flags. */
static bool opd_used(const nj_problem_desc *p, int o) { return nj_operand_used(p, o); }

static bool opd_is_output(int o) { return nj_operand_row(o)->output; }

static bool dtype_valid(int32_t d) { return nj_dtype_find(d) != NULL; }

static bool has_param(const nj_problem_desc *p) { return (p->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0; }

/* Effective dtype and strides of an activation operand: rank 0 means x's layout, NONE x's dtype. */
static int32_t opd_dtype(const nj_problem_desc *p, int o)
{
    const nj_tensor_desc *t = opd_desc(p, o);
    return t->dtype == NJ_DTYPE_NONE ? p->x.dtype : t->dtype;
}

static const int64_t *opd_strides(const nj_problem_desc *p, int o)
{
    const nj_tensor_desc *t = opd_desc(p, o);
    return t->rank == 0 ? p->x.strides : t->strides;
}

static int32_t param_dtype(const nj_problem_desc *p)
{
    return p->param_dtype == NJ_DTYPE_NONE ? NJ_F32 : p->param_dtype;
}

/* ---- Validation ---- */

/* Largest element offset an operand may reach: byte offsets (up to 8 bytes an element, plus a vector's
 * reach) then stay far inside int64, in the kernels and in the launch code's alignment checks. The
 * element-count limit, NJ_MAX_ELEMENTS, keeps every product the planner forms (grids, workspace, rows x
 * blocks) inside 64 bits; nj_plan_check verifies the results for the problem's batch. */
#define NJ_MAX_SPAN (INT64_C(1) << 60)

/* Largest element offset, sum of (extent-1)*stride; 0 for a zero-size tensor. False on overflow. */
static bool offset_span(int32_t rank, const int64_t *ext, const int64_t *str, int64_t *span)
{
    *span = 0;
    for (int i = 0; i < rank; i++)
        if (ext[i] == 0) return true;
    for (int i = 0; i < rank; i++) {
        int64_t term;
        if (__builtin_mul_overflow(ext[i] - 1, str[i], &term)) return false;
        if (__builtin_add_overflow(*span, term, span)) return false;
    }
    return true;
}

/* Sufficient test for distinct offsets: with axes sorted by stride, each stride must step past everything
 * the inner axes reach. Strides are non-negative and the span does not overflow when this runs. */
static bool overlaps(int32_t rank, const int64_t *ext, const int64_t *str)
{
    int idx[NJ_MAX_RANK], n = 0;
    for (int i = 0; i < rank; i++) {
        if (ext[i] == 0) return false;
        if (ext[i] > 1) idx[n++] = i;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && str[idx[j - 1]] > str[idx[j]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    int64_t reach = 0;
    for (int k = 0; k < n; k++) {
        if (str[idx[k]] <= reach) return true;
        reach += str[idx[k]] * (ext[idx[k]] - 1);
    }
    return false;
}

static nj_status check_header(const nj_problem_desc *p)
{
    NJ_RETURN_IF(p->struct_size != sizeof(nj_problem_desc), NJ_ERR_BAD_STRUCT_SIZE,
                 "struct_size = %u, expected sizeof(nj_problem_desc) = %zu", p->struct_size,
                 sizeof(nj_problem_desc));
    NJ_RETURN_IF(p->flags & ~NJ_FLAGS_ALL, NJ_ERR_BAD_FLAGS, "flags = 0x%x has unknown bits 0x%x", p->flags,
                 p->flags & ~NJ_FLAGS_ALL);
    NJ_RETURN_IF((p->flags & NJ_FLAG_RESIDUAL_OUT) && !(p->flags & NJ_FLAG_RESIDUAL), NJ_ERR_BAD_FLAGS,
                 "flags: NJ_FLAG_RESIDUAL_OUT needs NJ_FLAG_RESIDUAL");
    NJ_RETURN_IF(!nj_act_find(p->activation), NJ_ERR_BAD_ACTIVATION,
                 "activation = %d is not an nj_activation", p->activation);
    NJ_RETURN_IF(p->preset < NJ_PRESET_GENERAL || p->preset > NJ_PRESET_BATCHNORM, NJ_ERR_BAD_ARGUMENT,
                 "preset = %d is not an nj_preset", p->preset);
    NJ_RETURN_IF(p->groups < 0, NJ_ERR_BAD_GROUPS, "groups = %d is negative", p->groups);
    return NJ_OK;
}

static nj_status check_x(const nj_problem_desc *p)
{
    const nj_tensor_desc *x = &p->x;
    NJ_RETURN_IF(!dtype_valid(x->dtype), NJ_ERR_BAD_DTYPE, "x.dtype = %d: x must be one of %s", x->dtype,
                 nj_dtype_list());
    NJ_RETURN_IF(x->rank < 1 || x->rank > NJ_MAX_RANK, NJ_ERR_BAD_RANK, "x.rank = %d is outside 1..%d", x->rank,
                 NJ_MAX_RANK);
    int64_t prod = 1;
    for (int i = 0; i < x->rank; i++) {
        NJ_RETURN_IF(x->extents[i] < 0, NJ_ERR_BAD_EXTENT, "x.extents[%d] = %lld is negative", i,
                     (long long)x->extents[i]);
        /* Zero-size tensors are valid, but their other extents still size loops and statistics. */
        int64_t e = x->extents[i] ? x->extents[i] : 1;
        NJ_RETURN_IF(__builtin_mul_overflow(prod, e, &prod) || prod > NJ_MAX_ELEMENTS, NJ_ERR_OVERFLOW,
                     "x.extents: more than 2^48 elements (NJ_MAX_ELEMENTS) at axis %d", i);
    }
    for (int i = 0; i < x->rank; i++)
        NJ_RETURN_IF(x->strides[i] < 0, NJ_ERR_BAD_STRIDE, "x.strides[%d] = %lld is negative", i,
                     (long long)x->strides[i]);
    int64_t span;
    NJ_RETURN_IF(!offset_span(x->rank, x->extents, x->strides, &span) || span > NJ_MAX_SPAN, NJ_ERR_OVERFLOW,
                 "x.strides: element offsets reach past 2^60 (byte offsets would overflow 64 bits)");
    return NJ_OK;
}

/* GroupNorm's label must describe the shape: its G axis is a kept feature axis of extent `groups`. */
static nj_status check_groups_label(const nj_problem_desc *p)
{
    if (p->preset != NJ_PRESET_GROUPNORM) return NJ_OK;
    NJ_RETURN_IF(p->groups < 1, NJ_ERR_BAD_GROUPS, "groups = %d: a GroupNorm problem needs groups >= 1",
                 p->groups);
    uint32_t g_axes = p->feature_axes & ~p->reduce_axes;
    for (int i = 0; i < p->x.rank; i++)
        if ((g_axes >> i & 1u) && p->x.extents[i] == p->groups) return NJ_OK;
    return nj_fail(NJ_ERR_BAD_GROUPS, "groups = %d matches no kept feature axis of x", p->groups);
}

static nj_status check_axes(const nj_problem_desc *p)
{
    uint32_t all = p->x.rank >= 32 ? 0xffffffffu : (1u << p->x.rank) - 1u;
    NJ_RETURN_IF(p->reduce_axes & ~all, NJ_ERR_BAD_AXIS, "reduce_axes = 0x%x names an axis >= x.rank = %d",
                 p->reduce_axes, p->x.rank);
    NJ_RETURN_IF(p->feature_axes & ~all, NJ_ERR_BAD_AXIS, "feature_axes = 0x%x names an axis >= x.rank = %d",
                 p->feature_axes, p->x.rank);
    NJ_RETURN_IF(p->reduce_axes == 0, NJ_ERR_EMPTY_REDUCTION, "reduce_axes is empty");
    return check_groups_label(p);
}

static nj_status check_param(const nj_problem_desc *p)
{
    int32_t d = p->param_dtype;
    NJ_RETURN_IF(d != NJ_DTYPE_NONE && d != NJ_F32 && d != p->x.dtype, NJ_ERR_BAD_DTYPE,
                 "param_dtype = %d: gamma/beta must be f32 or x's dtype (%s)", d, nj_dtype_name(p->x.dtype));
    return NJ_OK;
}

static nj_status check_operand(const nj_problem_desc *p, int o)
{
    const nj_tensor_desc *t = opd_desc(p, o), *x = &p->x;
    const char *name = nj_operand_row(o)->name;
    NJ_RETURN_IF(t->dtype != NJ_DTYPE_NONE && !dtype_valid(t->dtype), NJ_ERR_BAD_DTYPE,
                 "%s.dtype = %d: must be one of %s or NONE (x's)", name, t->dtype, nj_dtype_list());
    NJ_RETURN_IF(o == NJ_OPD_RES && opd_dtype(p, o) != x->dtype, NJ_ERR_BAD_DTYPE,
                 "residual.dtype = %s differs from x.dtype = %s", nj_dtype_name(opd_dtype(p, o)),
                 nj_dtype_name(x->dtype));
    if (t->rank != 0) {
        NJ_RETURN_IF(t->rank < 0 || t->rank > NJ_MAX_RANK, NJ_ERR_BAD_RANK, "%s.rank = %d is outside 0..%d", name,
                     t->rank, NJ_MAX_RANK);
        NJ_RETURN_IF(t->rank != x->rank, NJ_ERR_SHAPE_MISMATCH, "%s.rank = %d differs from x.rank = %d", name,
                     t->rank, x->rank);
        for (int i = 0; i < t->rank; i++) {
            NJ_RETURN_IF(t->extents[i] != x->extents[i], NJ_ERR_SHAPE_MISMATCH,
                         "%s.extents[%d] = %lld differs from x.extents[%d] = %lld", name, i,
                         (long long)t->extents[i], i, (long long)x->extents[i]);
            NJ_RETURN_IF(t->strides[i] < 0, NJ_ERR_BAD_STRIDE, "%s.strides[%d] = %lld is negative", name, i,
                         (long long)t->strides[i]);
        }
        int64_t span;
        NJ_RETURN_IF(!offset_span(x->rank, x->extents, t->strides, &span) || span > NJ_MAX_SPAN, NJ_ERR_OVERFLOW,
                     "%s.strides: element offsets reach past 2^60 (byte offsets would overflow 64 bits)", name);
    }
    if (opd_is_output(o))
        NJ_RETURN_IF(overlaps(x->rank, x->extents, opd_strides(p, o)), NJ_ERR_OVERLAP,
                     "%s.strides%s map two elements to one offset", name, t->rank ? "" : " (x's)");
    return NJ_OK;
}

static nj_status validate(const nj_problem_desc *p)
{
    NJ_RETURN_IF(!p, NJ_ERR_NULL_POINTER, "problem descriptor is NULL");
    NJ_TRY(check_header(p));
    NJ_TRY(check_x(p));
    NJ_TRY(check_axes(p));
    NJ_TRY(check_param(p));
    for (int o = NJ_OPD_Y; o <= NJ_OPD_DX; o++)
        if (opd_used(p, o)) NJ_TRY(check_operand(p, o));
    return NJ_OK;
}

nj_status nj_problem_validate(const nj_problem_desc *p)
{
    nj_error_clear();
    return validate(p);
}

/* ---- Canonical form ---- */

/* One canonical axis per x axis, in x's order, with every operand's stride. Zero extents read as 1:
 * a zero-size problem is then a well-formed shape that runs with rows = 0 (see nj_canonicalize). */
static void raw_axes(const nj_problem_desc *p, const nj_canon *c, nj_canon_axis *ax)
{
    int32_t rank = p->x.rank;
    bool param = (c->present >> NJ_OPD_PARAM) & 1u;
    int64_t pstride = 1, sstride = 1;
    for (int i = rank - 1; i >= 0; i--) {
        nj_canon_axis *a = &ax[i];
        memset(a, 0, sizeof *a);
        a->extent = p->x.extents[i] ? p->x.extents[i] : 1;
        a->reduce = (p->reduce_axes >> i) & 1u;
        a->feature = param && ((p->feature_axes >> i) & 1u);
        for (int o = NJ_OPD_X; o <= NJ_OPD_DX; o++)
            if ((c->present >> o) & 1u) a->stride[o] = opd_strides(p, o)[i];
        if (a->feature) {
            a->stride[NJ_OPD_PARAM] = pstride;
            pstride *= a->extent;
        }
        if (!a->reduce) {
            a->stride[NJ_OPD_STATS] = sstride;
            sstride *= a->extent;
        }
    }
}

static bool can_merge(const nj_canon_axis *outer, const nj_canon_axis *inner)
{
    if (outer->reduce != inner->reduce || outer->feature != inner->feature) return false;
    for (int o = 0; o < NJ_OPD_COUNT; o++) {
        /* a zero-size problem's strides are not bounded by any span (fuzz_plan found the overflow) */
        int64_t reach;
        if (__builtin_mul_overflow(inner->stride[o], inner->extent, &reach) || outer->stride[o] != reach) return false;
    }
    return true;
}

/* Drops size-1 axes, orders by x stride (stable, largest first) and merges neighbours. Returns the count. */
static int simplify_axes(nj_canon_axis *ax, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (ax[i].extent != 1) ax[m++] = ax[i];
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && ax[j - 1].stride[NJ_OPD_X] < ax[j].stride[NJ_OPD_X]; j--) {
            nj_canon_axis t = ax[j];
            ax[j] = ax[j - 1];
            ax[j - 1] = t;
        }
    int k = 0;
    for (int i = 0; i < m; i++) {
        if (k > 0 && can_merge(&ax[k - 1], &ax[i])) {
            ax[k - 1].extent *= ax[i].extent;
            for (int o = 0; o < NJ_OPD_COUNT; o++) ax[k - 1].stride[o] = ax[i].stride[o];
        } else {
            ax[k++] = ax[i];
        }
    }
    return k;
}

static void set_operands(const nj_problem_desc *p, nj_canon *c)
{
    c->present = 0;
    for (int o = NJ_OPD_X; o <= NJ_OPD_DX; o++)
        if (opd_used(p, o)) {
            c->present |= 1u << o;
            c->dtype[o] = opd_dtype(p, o);
        }
    if (has_param(p)) {
        c->present |= 1u << NJ_OPD_PARAM;
        c->dtype[NJ_OPD_PARAM] = param_dtype(p);
    }
    c->present |= 1u << NJ_OPD_STATS;
    c->dtype[NJ_OPD_STATS] = NJ_F32;
}

/* ROW: exactly one reduced axis, innermost, stride 1 in every activation operand present (x, y, res,
 * resout, dy, dx), so a row is one flat run. Reduced axes that stay apart because their param role
 * differs (GroupNorm NCHW with an affine: C/G is a feature axis, spatial is not) make a GENERAL problem;
 * the row kernels index gamma with one stride. */
static bool is_row(const nj_canon *c)
{
    const nj_canon_axis *inner = &c->axes[c->rank - 1];
    if (!inner->reduce) return false;
    for (int i = 1; i < c->rank - 1; i++)
        if (c->axes[i].reduce) return false;
    for (int o = NJ_OPD_X; o <= NJ_OPD_DX; o++)
        if (((c->present >> o) & 1u) && inner->stride[o] != 1) return false;
    return true;
}

static void classify(nj_canon *c)
{
    const nj_canon_axis *inner = &c->axes[c->rank - 1];
    if (is_row(c))
        c->kind = NJ_KIND_ROW;
    else if (!inner->reduce && inner->stride[NJ_OPD_X] == 1)
        c->kind = NJ_KIND_COLUMN;
    else
        c->kind = NJ_KIND_GENERAL;
    c->reduce_size = 1;
    c->kept_inner = 1;
    c->param_size = 1;
    for (int i = 0; i < c->rank; i++) {
        const nj_canon_axis *a = &c->axes[i];
        if (a->reduce) c->reduce_size *= a->extent;
        else if (i > 0) c->kept_inner *= a->extent;
        if (a->feature) c->param_size *= a->extent;
    }
    if (!((c->present >> NJ_OPD_PARAM) & 1u)) c->param_size = 0;
}

nj_status nj_canonicalize(const nj_problem_desc *p, nj_canon *out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "canonical form output is NULL");
    NJ_TRY(validate(p));
    nj_canon c;
    memset(&c, 0, sizeof c);
    c.flags = p->flags;
    c.act = p->activation;
    set_operands(p, &c);
    nj_canon_axis ax[NJ_CANON_MAX_AXES];
    raw_axes(p, &c, ax);
    int n = simplify_axes(ax, p->x.rank);
    bool has_reduce = false;
    for (int i = 0; i < n; i++) has_reduce |= ax[i].reduce != 0;
    if (!has_reduce) { /* every reduced axis had extent 1: keep one, a flat row of one element */
        memset(&ax[n], 0, sizeof ax[n]);
        ax[n].extent = 1;
        ax[n].reduce = 1;
        for (int o = NJ_OPD_X; o <= NJ_OPD_DX; o++) ax[n].stride[o] = (c.present >> o) & 1u;
        n++;
    }
    int first = 0;
    if (ax[0].reduce || ax[0].feature) { /* no batch axis: a synthetic one of extent 1, strides 0 */
        memset(&c.axes[0], 0, sizeof c.axes[0]);
        c.axes[0].extent = 1;
        first = 1;
    }
    memcpy(&c.axes[first], ax, (size_t)n * sizeof ax[0]);
    c.rank = n + first;
    classify(&c);
    for (int i = 0; i < p->x.rank; i++)
        if (p->x.extents[i] == 0) c.axes[0].extent = 0; /* nothing to compute: no rows */
    *out = c;
    return NJ_OK;
}

void nj_canon_batch(const nj_canon *c, int64_t *rows, int64_t bstride[NJ_OPD_COUNT])
{
    if (rows) *rows = c->axes[0].extent;
    if (bstride)
        for (int o = 0; o < NJ_OPD_COUNT; o++) bstride[o] = c->axes[0].stride[o];
}

/* ---- Keys: packed field by field, so struct padding never enters ---- */

typedef struct nj_packer {
    uint8_t *out;
    size_t cap, len;
} nj_packer;

static void pack(nj_packer *k, const void *v, size_t n)
{
    if (k->out && k->len + n <= k->cap) memcpy(k->out + k->len, v, n);
    k->len += n;
}
static void pack32(nj_packer *k, int64_t v)
{
    int32_t w = (int32_t)v;
    pack(k, &w, sizeof w);
}
static void pack64(nj_packer *k, int64_t v) { pack(k, &v, sizeof v); }

size_t nj_canon_key(const nj_canon *c, void *out, size_t cap)
{
    nj_packer k = {out, cap, 0};
    pack32(&k, c->rank);
    pack32(&k, c->kind);
    pack32(&k, (int32_t)c->flags);
    pack32(&k, c->act);
    for (int o = 0; o < NJ_OPD_COUNT; o++) pack32(&k, c->dtype[o]);
    pack32(&k, (int32_t)c->present);
    pack64(&k, c->reduce_size);
    pack64(&k, c->kept_inner);
    pack64(&k, c->param_size);
    for (int i = 0; i < c->rank && i < NJ_CANON_MAX_AXES; i++) {
        const nj_canon_axis *a = &c->axes[i];
        pack64(&k, i == 0 ? 0 : a->extent); /* the batch is a run-time value */
        pack32(&k, a->reduce);
        pack32(&k, a->feature);
        for (int o = 0; o < NJ_OPD_COUNT; o++) pack64(&k, i == 0 ? 0 : a->stride[o]);
    }
    return k.len;
}

static void pack_tensor(nj_packer *k, int32_t dtype, int32_t rank, const int64_t *ext, const int64_t *str)
{
    pack32(k, dtype);
    pack32(k, rank); /* the rank says how many entries follow, so nothing past it is packed */
    for (int i = 0; i < rank; i++) {
        pack64(k, ext[i]);
        pack64(k, str[i]);
    }
}

/* Optional operands are packed as resolved (rank 0 -> x's layout, NONE -> x's dtype) and unused ones as
 * zeros, so descriptors that mean the same problem share a key. Never reads past NJ_MAX_RANK. */
size_t nj_problem_key(const nj_problem_desc *p, void *out, size_t cap)
{
    nj_packer k = {out, cap, 0};
    int32_t xr = p->x.rank < 0 ? 0 : p->x.rank > NJ_MAX_RANK ? NJ_MAX_RANK : p->x.rank;
    pack32(&k, p->struct_size);
    pack32(&k, (int32_t)p->flags);
    pack32(&k, p->activation);
    pack32(&k, has_param(p) ? param_dtype(p) : 0);
    pack32(&k, (int32_t)p->reduce_axes);
    pack32(&k, has_param(p) ? (int32_t)p->feature_axes : 0);
    pack32(&k, p->preset);
    pack32(&k, p->groups);
    pack_tensor(&k, p->x.dtype, xr, p->x.extents, p->x.strides);
    for (int o = NJ_OPD_Y; o <= NJ_OPD_DX; o++) {
        const nj_tensor_desc *t = opd_desc(p, o);
        if (!opd_used(p, o)) {
            pack_tensor(&k, 0, 0, NULL, NULL);
            continue;
        }
        int32_t r = t->rank == 0 ? xr : t->rank < 0 ? 0 : t->rank > NJ_MAX_RANK ? NJ_MAX_RANK : t->rank;
        pack_tensor(&k, opd_dtype(p, o), r, t->rank == 0 ? p->x.extents : t->extents, opd_strides(p, o));
    }
    return k.len;
}

static void drop_operand(nj_canon *c, int o)
{
    c->dtype[o] = NJ_DTYPE_NONE;
    c->present &= ~(1u << o);
    for (int i = 0; i < c->rank; i++) c->axes[i].stride[o] = 0;
}

void nj_canon_for_pass(const nj_canon *c, nj_pass pass, nj_canon *out)
{
    if (out != c) *out = *c;
    if (pass == NJ_PASS_BACKWARD) {
        out->flags &= ~(uint32_t)(NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS);
        drop_operand(out, NJ_OPD_Y);
        drop_operand(out, NJ_OPD_RES);
        drop_operand(out, NJ_OPD_RESOUT);
    } else {
        drop_operand(out, NJ_OPD_DY);
        drop_operand(out, NJ_OPD_DX);
    }
}

/* ---- Canonical text ---- */

static const char *kind_name(int32_t k)
{
    return k == NJ_KIND_ROW ? "row" : k == NJ_KIND_COLUMN ? "column" : "general";
}

static const char *short_dtype(int32_t d) { return d == NJ_DTYPE_NONE ? "-" : nj_dtype_name((nj_dtype)d); }

static void text_flags(nj_buf *b, uint32_t flags)
{
    bool first = true;
    for (size_t i = 0; i < nj_flag_count(); i++)
        if (flags & nj_flag_row(i)->bit) {
            nj_buf_printf(b, "%s%s", first ? "" : ",", nj_flag_row(i)->name);
            first = false;
        }
    if (first) nj_buf_printf(b, "none");
}

static const char *act_name(int32_t a)
{
    const nj_act_info *r = nj_act_find(a);
    return r ? r->name : "?";
}

/* e.g. "kind=row dt=bf16/bf16/-/-/bf16/bf16/f32/f32 flags=center,scale,bias act=none rs=4096 ki=1
 * ps=4096 axes=[*:k|4096:rf:1,1,0,0,1,1,1,0]": per axis extent, role (r/k, f = feature) and the strides of
 * x,y,res,resout,dy,dx,param,stats; the batch axis shows only its role. */
char *nj_canon_text(const nj_canon *c)
{
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "kind=%s dt=", kind_name(c->kind));
    for (int o = 0; o < NJ_OPD_COUNT; o++) nj_buf_printf(&b, "%s%s", o ? "/" : "", short_dtype(c->dtype[o]));
    nj_buf_printf(&b, " flags=");
    text_flags(&b, c->flags);
    nj_buf_printf(&b, " act=%s rs=%lld ki=%lld ps=%lld axes=[", act_name(c->act), (long long)c->reduce_size,
                  (long long)c->kept_inner, (long long)c->param_size);
    for (int i = 0; i < c->rank; i++) {
        const nj_canon_axis *a = &c->axes[i];
        const char *role = a->reduce ? (a->feature ? "rf" : "r") : (a->feature ? "kf" : "k");
        if (i == 0) {
            nj_buf_printf(&b, "*:%s", role);
            continue;
        }
        nj_buf_printf(&b, "|%lld:%s:", (long long)a->extent, role);
        for (int o = 0; o < NJ_OPD_COUNT; o++) nj_buf_printf(&b, "%s%lld", o ? "," : "", (long long)a->stride[o]);
    }
    nj_buf_printf(&b, "]");
    return nj_buf_take(&b);
}

/* ---- Sizes of the small operands (normjit.h: layouts) ---- */

nj_status nj_problem_stat_count(const nj_problem_desc *p, int64_t *count)
{
    nj_error_clear();
    NJ_RETURN_IF(!count, NJ_ERR_NULL_POINTER, "nj_problem_stat_count: count is NULL");
    NJ_TRY(validate(p));
    int64_t n = 1; /* within NJ_MAX_ELEMENTS: validated */
    for (int i = 0; i < p->x.rank; i++)
        if (!(p->reduce_axes >> i & 1u)) n *= p->x.extents[i];
    *count = n;
    return NJ_OK;
}

nj_status nj_problem_param_extents(const nj_problem_desc *p, int32_t *rank, int64_t extents[NJ_MAX_RANK],
                                   int64_t *count)
{
    nj_error_clear();
    NJ_RETURN_IF(!rank || !extents || !count, NJ_ERR_NULL_POINTER, "nj_problem_param_extents: NULL output");
    NJ_TRY(validate(p));
    int32_t r = 0;
    int64_t n = 1;
    for (int i = 0; has_param(p) && i < p->x.rank; i++)
        if (p->feature_axes >> i & 1u) {
            extents[r++] = p->x.extents[i];
            n *= p->x.extents[i];
        }
    *rank = r;
    *count = has_param(p) ? n : 0; /* no feature axis: one scalar gamma */
    return NJ_OK;
}
