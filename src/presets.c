/* Contiguous tensor helper and the preset constructors (LayerNorm, RMSNorm, InstanceNorm, GroupNorm,
 * BatchNorm). Each preset fills a zeroed descriptor and then runs the full validation, so a preset never
 * hands back a problem that nj_problem_validate would refuse. */
#include "vocab.h"

#include <string.h>

static bool dtype_known(int32_t d) { return d == NJ_DTYPE_NONE || nj_dtype_find(d); }

/* Row-major strides for extents; fails on a bad rank, a negative extent or an overflowing product. */
static nj_status fill_contiguous(nj_tensor_desc *t, int32_t rank, const int64_t *ext)
{
    NJ_RETURN_IF(rank < 1 || rank > NJ_MAX_RANK, NJ_ERR_BAD_RANK, "rank = %d is outside 1..%d", rank, NJ_MAX_RANK);
    NJ_RETURN_IF(!ext, NJ_ERR_NULL_POINTER, "extents is NULL");
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; i--) {
        NJ_RETURN_IF(ext[i] < 0, NJ_ERR_BAD_EXTENT, "extents[%d] = %lld is negative", i, (long long)ext[i]);
        t->extents[i] = ext[i];
        t->strides[i] = stride;
        NJ_RETURN_IF(__builtin_mul_overflow(stride, ext[i] ? ext[i] : 1, &stride), NJ_ERR_OVERFLOW,
                     "extents: the product overflows 64 bits at axis %d", i);
    }
    t->rank = rank;
    return NJ_OK;
}

nj_status nj_tensor_contiguous(nj_tensor_desc *t, nj_dtype dtype, int32_t rank, const int64_t *extents)
{
    nj_error_clear();
    NJ_RETURN_IF(!t, NJ_ERR_NULL_POINTER, "tensor descriptor is NULL");
    NJ_RETURN_IF(!dtype_known(dtype), NJ_ERR_BAD_DTYPE, "dtype = %d is not an nj_dtype", (int)dtype);
    nj_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dtype;
    NJ_TRY(fill_contiguous(&d, rank, extents));
    *t = d;
    return NJ_OK;
}

/* gamma/beta take x's dtype, as a framework's module weights do (PyTorch's LayerNorm(..., dtype=bf16)):
 * a half-precision gamma passed to a preset-built problem must never be read as float32. A caller keeping
 * float32 master weights sets p->param_dtype = NJ_F32 after the preset (or `param=f32` in the text). */
static void desc_init(nj_problem_desc *p, nj_preset preset, uint32_t flags, int32_t dtype)
{
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->flags = flags;
    p->preset = preset;
    p->param_dtype = dtype;
}

/* 0 or 1: anything else is a caller bug (a bool passed through a wider int), refused rather than read
 * as channels-last. */
static nj_status check_channels_last(int32_t channels_last)
{
    NJ_RETURN_IF(channels_last != 0 && channels_last != 1, NJ_ERR_BAD_ARGUMENT,
                 "channels_last = %d: must be 0 (channels first) or 1 (channels last)", channels_last);
    return NJ_OK;
}

static nj_status check_common(const nj_problem_desc *p, nj_dtype dtype)
{
    NJ_RETURN_IF(!p, NJ_ERR_NULL_POINTER, "problem descriptor is NULL");
    NJ_RETURN_IF(!dtype_known(dtype), NJ_ERR_BAD_DTYPE, "dtype = %d is not an nj_dtype", (int)dtype);
    return NJ_OK;
}

/* Normalize over the last `last_k` axes of a contiguous tensor; the affine spans the same axes. */
static nj_status last_axes(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents, int32_t last_k)
{
    NJ_TRY(fill_contiguous(&p->x, rank, extents));
    p->x.dtype = dtype;
    NJ_RETURN_IF(last_k == 0, NJ_ERR_EMPTY_REDUCTION, "last_k = 0: no axis to normalize over");
    NJ_RETURN_IF(last_k < 0 || last_k > rank, NJ_ERR_BAD_AXIS, "last_k = %d is outside 1..rank (%d)", last_k, rank);
    uint32_t all = (1u << rank) - 1u;
    p->reduce_axes = all & ~((1u << (rank - last_k)) - 1u);
    p->feature_axes = p->reduce_axes;
    return NJ_OK;
}

nj_status nj_preset_layernorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                              int32_t last_k, uint32_t flags)
{
    nj_error_clear();
    NJ_TRY(check_common(p, dtype));
    desc_init(p, NJ_PRESET_LAYERNORM, flags | NJ_FLAG_CENTER, dtype);
    NJ_TRY(last_axes(p, dtype, rank, extents, last_k));
    return nj_problem_validate(p);
}

nj_status nj_preset_rmsnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                            int32_t last_k, uint32_t flags)
{
    nj_error_clear();
    NJ_TRY(check_common(p, dtype));
    desc_init(p, NJ_PRESET_RMSNORM, flags & ~(uint32_t)NJ_FLAG_CENTER, dtype);
    NJ_TRY(last_axes(p, dtype, rank, extents, last_k));
    return nj_problem_validate(p);
}

/* Keras axis lists may count from the end (-1 is the last axis), as Keras allows. */
nj_status nj_preset_layernorm_axes(nj_problem_desc *p, const nj_tensor_desc *x, const int32_t *axes, int32_t naxes,
                                   uint32_t flags)
{
    nj_error_clear();
    NJ_RETURN_IF(!p, NJ_ERR_NULL_POINTER, "problem descriptor is NULL");
    NJ_RETURN_IF(!x, NJ_ERR_NULL_POINTER, "x descriptor is NULL");
    NJ_RETURN_IF(naxes > 0 && !axes, NJ_ERR_NULL_POINTER, "axes is NULL with naxes = %d", naxes);
    desc_init(p, NJ_PRESET_LAYERNORM, flags | NJ_FLAG_CENTER, x->dtype);
    p->x = *x;
    NJ_RETURN_IF(x->rank < 1 || x->rank > NJ_MAX_RANK, NJ_ERR_BAD_RANK, "x.rank = %d is outside 1..%d", x->rank,
                 NJ_MAX_RANK);
    NJ_RETURN_IF(naxes <= 0, NJ_ERR_EMPTY_REDUCTION, "naxes = %d: no axis to normalize over", naxes);
    /* counted before the array is read: an axis list longer than the rank lists one twice or reads past
     * what the caller passed */
    NJ_RETURN_IF(naxes > x->rank, NJ_ERR_BAD_AXIS, "naxes = %d exceeds x.rank = %d", naxes, x->rank);
    for (int i = 0; i < naxes; i++) {
        int32_t a = axes[i] < 0 ? axes[i] + x->rank : axes[i];
        NJ_RETURN_IF(a < 0 || a >= x->rank, NJ_ERR_BAD_AXIS, "axes[%d] = %d is outside x's rank %d", i, axes[i],
                     x->rank);
        NJ_RETURN_IF(p->reduce_axes >> a & 1u, NJ_ERR_DUPLICATE_AXIS, "axes[%d] = %d: axis %d is listed twice", i,
                     axes[i], a);
        p->reduce_axes |= 1u << a;
    }
    p->feature_axes = p->reduce_axes;
    return nj_problem_validate(p);
}

/* Spatial axes: 1 to 3 for InstanceNorm; GroupNorm/BatchNorm accept 0 to NJ_MAX_RANK-2 (e.g. [N, C]). */
static nj_status check_nc_rank(int32_t rank, int32_t min, int32_t max)
{
    NJ_RETURN_IF(rank < min || rank > max, NJ_ERR_BAD_RANK, "rank = %d is outside %d..%d ([N, C, spatial...])", rank,
                 min, max);
    return NJ_OK;
}

nj_status nj_preset_instancenorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                                 int32_t channels_last, uint32_t flags)
{
    nj_error_clear();
    NJ_TRY(check_common(p, dtype));
    desc_init(p, NJ_PRESET_INSTANCENORM, flags | NJ_FLAG_CENTER, dtype);
    NJ_TRY(check_channels_last(channels_last));
    NJ_TRY(check_nc_rank(rank, 3, 5));
    NJ_TRY(fill_contiguous(&p->x, rank, extents));
    p->x.dtype = dtype;
    int32_t c_axis = channels_last ? rank - 1 : 1;
    uint32_t all = (1u << rank) - 1u;
    p->feature_axes = 1u << c_axis;
    p->reduce_axes = all & ~1u & ~p->feature_axes;
    return nj_problem_validate(p);
}

/* x for [N, C, spatial...] given logically in that order with memory NCHW or NHWC. The channel axis may be
 * split into (G, C/G) (split = G) so GroupNorm views its groups through strides without a copy. */
static nj_status nc_view(nj_tensor_desc *x, int32_t rank, const int64_t *ext, int32_t channels_last, int32_t split)
{
    int64_t mem_ext[NJ_MAX_RANK]; /* memory order: N, C, spatial or N, spatial, C */
    int32_t sp = rank - 2;
    nj_tensor_desc m;
    memset(&m, 0, sizeof m);
    mem_ext[0] = ext[0];
    for (int i = 0; i < sp; i++) mem_ext[channels_last ? 1 + i : 2 + i] = ext[2 + i];
    mem_ext[channels_last ? rank - 1 : 1] = ext[1];
    NJ_TRY(fill_contiguous(&m, rank, mem_ext));
    int64_t c_stride = m.strides[channels_last ? rank - 1 : 1];
    int32_t k = 0;
    x->extents[k] = ext[0];
    x->strides[k++] = m.strides[0];
    if (split) {
        x->extents[k] = split;
        x->strides[k++] = c_stride * (ext[1] / split);
        x->extents[k] = ext[1] / split;
    } else {
        x->extents[k] = ext[1];
    }
    x->strides[k++] = c_stride;
    for (int i = 0; i < sp; i++) {
        x->extents[k] = ext[2 + i];
        x->strides[k++] = m.strides[channels_last ? 1 + i : 2 + i];
    }
    x->rank = k;
    return NJ_OK;
}

nj_status nj_preset_groupnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                              int32_t groups, int32_t channels_last, uint32_t flags)
{
    nj_error_clear();
    NJ_TRY(check_common(p, dtype));
    desc_init(p, NJ_PRESET_GROUPNORM, flags | NJ_FLAG_CENTER, dtype);
    NJ_TRY(check_channels_last(channels_last));
    NJ_TRY(check_nc_rank(rank, 2, NJ_MAX_RANK - 1)); /* one more axis after the split */
    NJ_RETURN_IF(!extents, NJ_ERR_NULL_POINTER, "extents is NULL");
    NJ_RETURN_IF(extents[1] < 0, NJ_ERR_BAD_EXTENT, "extents[1] (C) = %lld is negative", (long long)extents[1]);
    NJ_RETURN_IF(groups < 1, NJ_ERR_BAD_GROUPS, "groups = %d must be at least 1", groups);
    NJ_RETURN_IF(extents[1] % groups != 0, NJ_ERR_BAD_GROUPS, "channels C = %lld are not divisible by groups = %d",
                 (long long)extents[1], groups);
    NJ_TRY(nc_view(&p->x, rank, extents, channels_last, groups));
    p->x.dtype = dtype;
    p->groups = groups;
    uint32_t all = (1u << (rank + 1)) - 1u;
    p->feature_axes = 0x6u;      /* G and C/G */
    p->reduce_axes = all & ~0x3u; /* C/G and spatial */
    return nj_problem_validate(p);
}

nj_status nj_preset_batchnorm(nj_problem_desc *p, nj_dtype dtype, int32_t rank, const int64_t *extents,
                              int32_t channels_last, uint32_t flags)
{
    nj_error_clear();
    NJ_TRY(check_common(p, dtype));
    desc_init(p, NJ_PRESET_BATCHNORM, flags | NJ_FLAG_CENTER, dtype);
    NJ_TRY(check_channels_last(channels_last));
    NJ_TRY(check_nc_rank(rank, 2, NJ_MAX_RANK));
    NJ_RETURN_IF(!extents, NJ_ERR_NULL_POINTER, "extents is NULL");
    NJ_TRY(nc_view(&p->x, rank, extents, channels_last, 0));
    p->x.dtype = dtype;
    uint32_t all = (1u << rank) - 1u;
    p->feature_axes = 0x2u;
    p->reduce_axes = all & ~0x2u;
    return nj_problem_validate(p);
}
