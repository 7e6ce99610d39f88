/* Problem model: validation classes, presets, canonical forms of every preset, keys, text form.
 * Expected canonical strides are worked out here from the layouts by hand, not taken from the code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"
#include "problem_gen.h"

#define DEF_FLAGS (NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS)

/* ---- helpers ---- */

static void expect_status(nj_status got, nj_status want, const char *needle)
{
    if (got != want)
        fail_msg("got %s (%s), want %s", nj_status_name(got), nj_last_error(), nj_status_name(want));
    if (needle && !strstr(nj_last_error(), needle))
        fail_msg("detail `%s` does not name `%s`", nj_last_error(), needle);
}

static void ok(nj_status s) { expect_status(s, NJ_OK, NULL); }

typedef struct key {
    uint8_t b[NJ_PROBLEM_KEY_MAX];
    size_t n;
} key;

static key problem_key(const nj_problem_desc *p)
{
    key k;
    memset(&k, 0, sizeof k);
    k.n = nj_problem_key(p, k.b, sizeof k.b);
    assert_true(k.n > 0 && k.n <= sizeof k.b);
    return k;
}

static key canon_key(const nj_problem_desc *p, nj_canon *c)
{
    nj_canon local;
    if (!c) c = &local;
    ok(nj_canonicalize(p, c));
    key k;
    memset(&k, 0, sizeof k);
    k.n = nj_canon_key(c, k.b, sizeof k.b);
    assert_true(k.n > 0 && k.n <= sizeof k.b);
    return k;
}

static bool key_eq(const key *a, const key *b) { return a->n == b->n && memcmp(a->b, b->b, a->n) == 0; }

/* Asserts one canonical axis: extent, role and the x / param / stats strides. */
static void expect_axis(const nj_canon *c, int i, int64_t extent, int reduce, int feature, int64_t xs, int64_t ps,
                        int64_t ss)
{
    const nj_canon_axis *a = &c->axes[i];
    if (a->extent != extent || a->reduce != reduce || a->feature != feature || a->stride[NJ_OPD_X] != xs ||
        a->stride[NJ_OPD_PARAM] != ps || a->stride[NJ_OPD_STATS] != ss)
        fail_msg("axis %d: got extent %lld r%d f%d x%lld p%lld s%lld, want %lld r%d f%d x%lld p%lld s%lld", i,
                 (long long)a->extent, a->reduce, a->feature, (long long)a->stride[NJ_OPD_X],
                 (long long)a->stride[NJ_OPD_PARAM], (long long)a->stride[NJ_OPD_STATS], (long long)extent, reduce,
                 feature, (long long)xs, (long long)ps, (long long)ss);
    /* y, dy, dx default to x's layout */
    assert_int_equal(a->stride[NJ_OPD_Y], a->stride[NJ_OPD_X]);
    assert_int_equal(a->stride[NJ_OPD_DX], a->stride[NJ_OPD_X]);
}

static nj_problem_desc layernorm(int64_t b, int64_t t, int64_t h, uint32_t flags)
{
    nj_problem_desc p;
    int64_t e[3] = {b, t, h};
    ok(nj_preset_layernorm(&p, NJ_BF16, 3, e, 1, flags));
    return p;
}

/* ---- tensors and presets ---- */

static void test_tensor_contiguous(void **state)
{
    nj_tensor_desc t;
    int64_t e[3] = {2, 3, 4};
    ok(nj_tensor_contiguous(&t, NJ_F16, 3, e));
    assert_int_equal(t.rank, 3);
    assert_int_equal(t.dtype, NJ_F16);
    assert_int_equal(t.strides[0], 12);
    assert_int_equal(t.strides[1], 4);
    assert_int_equal(t.strides[2], 1);
    assert_int_equal(t.extents[3], 0);
    int64_t z[2] = {0, 5}; /* zero-size tensors are valid */
    ok(nj_tensor_contiguous(&t, NJ_F32, 2, z));
    assert_int_equal(t.strides[0], 5);
}

static void test_tensor_contiguous_fail(void **state)
{
    nj_tensor_desc t;
    int64_t e[3] = {2, -3, 4}, big[3] = {1ll << 40, 1ll << 30, 1ll << 10};
    expect_status(nj_tensor_contiguous(NULL, NJ_F32, 3, e), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_tensor_contiguous(&t, NJ_F32, 3, NULL), NJ_ERR_NULL_POINTER, "extents");
    expect_status(nj_tensor_contiguous(&t, NJ_F32, 0, e), NJ_ERR_BAD_RANK, "rank");
    expect_status(nj_tensor_contiguous(&t, NJ_F32, 9, e), NJ_ERR_BAD_RANK, "rank");
    expect_status(nj_tensor_contiguous(&t, NJ_F32, 3, e), NJ_ERR_BAD_EXTENT, "extents[1]");
    expect_status(nj_tensor_contiguous(&t, NJ_F32, 3, big), NJ_ERR_OVERFLOW, "extents");
    expect_status(nj_tensor_contiguous(&t, (nj_dtype)9, 3, e), NJ_ERR_BAD_DTYPE, "dtype");
}

static void test_presets_fields(void **state)
{
    nj_problem_desc p;
    int64_t e[4] = {2, 64, 8, 8};
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 16, 0, NJ_FLAG_SCALE));
    assert_int_equal(p.x.rank, 5);
    int64_t want_ext[5] = {2, 16, 4, 8, 8}, want_str[5] = {64 * 64, 4 * 64, 64, 8, 1};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(p.x.extents[i], want_ext[i]);
        assert_int_equal(p.x.strides[i], want_str[i]);
    }
    assert_int_equal(p.reduce_axes, 0x1C);
    assert_int_equal(p.feature_axes, 0x6);
    assert_int_equal(p.flags, NJ_FLAG_SCALE | NJ_FLAG_CENTER);
    assert_int_equal(p.groups, 16);
    assert_int_equal(p.preset, NJ_PRESET_GROUPNORM);
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 16, 1, 0)); /* NHWC memory: [N, H, W, C] */
    int64_t nhwc[5] = {64 * 64, 4, 1, 8 * 64, 64};
    for (int i = 0; i < 5; i++) assert_int_equal(p.x.strides[i], nhwc[i]);
    ok(nj_preset_batchnorm(&p, NJ_F32, 4, e, 1, 0));
    int64_t bn[4] = {64 * 64, 1, 8 * 64, 64};
    for (int i = 0; i < 4; i++) assert_int_equal(p.x.strides[i], bn[i]);
    assert_int_equal(p.reduce_axes, 0xD);
    assert_int_equal(p.feature_axes, 0x2);
    ok(nj_preset_rmsnorm(&p, NJ_BF16, 4, e, 2, DEF_FLAGS));
    assert_int_equal(p.flags, NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    assert_int_equal(p.reduce_axes, 0xC);
    assert_int_equal(p.feature_axes, 0xC);
    int64_t in5[5] = {2, 4, 6, 8, 3};
    ok(nj_preset_instancenorm(&p, NJ_F32, 5, in5, 1, 0));
    assert_int_equal(p.reduce_axes, 0xE);
    assert_int_equal(p.feature_axes, 0x10);
    int32_t axes[2] = {-1, 1};
    nj_tensor_desc x;
    ok(nj_tensor_contiguous(&x, NJ_F32, 4, e));
    ok(nj_preset_layernorm_axes(&p, &x, axes, 2, 0));
    assert_int_equal(p.reduce_axes, 0xA);
    assert_int_equal(p.feature_axes, 0xA);
    assert_int_equal(p.flags, NJ_FLAG_CENTER);
}

/* ---- validation: every error class, each naming its field ---- */

static void test_validate_ok_cases(void **state)
{
    nj_problem_desc p = layernorm(4, 8, 16, DEF_FLAGS);
    ok(nj_problem_validate(&p));
    p.x.extents[0] = 0; /* zero-size */
    ok(nj_problem_validate(&p));
    p = layernorm(4, 8, 16, DEF_FLAGS);
    p.x.strides[1] = 0; /* broadcast input, explicit non-overlapping output */
    p.y.rank = 3;
    memcpy(p.y.extents, p.x.extents, sizeof p.x.extents);
    int64_t ys[3] = {8 * 16, 16, 1};
    memcpy(p.y.strides, ys, sizeof ys);
    p.dx = p.y;
    ok(nj_problem_validate(&p));
    int64_t tr[3] = {1, 4, 32}; /* a transposed output: distinct offsets */
    memcpy(p.dx.strides, tr, sizeof tr);
    ok(nj_problem_validate(&p));
    nj_problem_desc q = layernorm(1, 8, 16, DEF_FLAGS);
    q.y.rank = 3;
    memcpy(q.y.extents, q.x.extents, sizeof q.x.extents);
    int64_t s1[3] = {0, 16, 1}; /* size-1 axes may carry any stride */
    memcpy(q.y.strides, s1, sizeof s1);
    ok(nj_problem_validate(&q));
    q.param_dtype = NJ_BF16; /* param may be x's dtype */
    ok(nj_problem_validate(&q));
}

typedef void (*mutate_fn)(nj_problem_desc *p);
typedef struct bad_case {
    const char *name;
    mutate_fn mutate;
    nj_status want;
    const char *field;
} bad_case;

static void m_size(nj_problem_desc *p) { p->struct_size -= 8; }
static void m_flags(nj_problem_desc *p) { p->flags |= 1u << 9; }
static void m_resout(nj_problem_desc *p) { p->flags |= NJ_FLAG_RESIDUAL_OUT; }
static void m_act(nj_problem_desc *p) { p->activation = 42; }
static void m_rank0(nj_problem_desc *p) { p->x.rank = 0; }
static void m_rank9(nj_problem_desc *p) { p->x.rank = 9; }
static void m_extent(nj_problem_desc *p) { p->x.extents[1] = -2; }
static void m_product(nj_problem_desc *p)
{
    p->x.extents[0] = 1ll << 40;
    p->x.extents[1] = 1ll << 30;
}
static void m_xstride(nj_problem_desc *p) { p->x.strides[0] = -1; }
static void m_span(nj_problem_desc *p) { p->x.strides[0] = 1ll << 62; }
static void m_reduce_bit(nj_problem_desc *p) { p->reduce_axes |= 1u << 3; }
static void m_feature_bit(nj_problem_desc *p) { p->feature_axes |= 1u << 5; }
static void m_empty(nj_problem_desc *p) { p->reduce_axes = 0; }
static void m_xdtype(nj_problem_desc *p) { p->x.dtype = 0; }
static void m_ydtype(nj_problem_desc *p) { p->y.dtype = 7; }
static void m_param(nj_problem_desc *p) { p->param_dtype = NJ_F16; } /* x is bf16 */
static void m_res_dtype(nj_problem_desc *p)
{
    p->flags |= NJ_FLAG_RESIDUAL;
    p->residual.dtype = NJ_F32;
}
static void like_x(nj_tensor_desc *t, const nj_tensor_desc *x)
{
    *t = *x;
    t->dtype = 0;
}
static void m_yrank(nj_problem_desc *p)
{
    like_x(&p->y, &p->x);
    p->y.rank = 2;
}
static void m_yextent(nj_problem_desc *p)
{
    like_x(&p->y, &p->x);
    p->y.extents[1] += 1;
}
static void m_ystride(nj_problem_desc *p)
{
    like_x(&p->y, &p->x);
    p->y.strides[2] = -1;
}
static void m_yoverlap(nj_problem_desc *p)
{
    like_x(&p->y, &p->x);
    p->y.strides[1] = 8; /* [4, 8, 16] with strides [128, 8, 1]: rows of 16 overlap by half */
}
static void m_broadcast_out(nj_problem_desc *p) { p->x.strides[0] = 0; } /* y, dx take x's strides */
static void m_resout_overlap(nj_problem_desc *p)
{
    p->flags |= NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT;
    like_x(&p->residual_out, &p->x);
    p->residual_out.strides[0] = 0;
}
static void m_dx_overlap(nj_problem_desc *p)
{
    like_x(&p->dx, &p->x);
    p->dx.strides[0] = 16 * 8 - 1;
}
static void m_preset(nj_problem_desc *p) { p->preset = 17; }
static void m_groups(nj_problem_desc *p) { p->groups = -4; }
static void m_gn_label(nj_problem_desc *p) { p->preset = NJ_PRESET_GROUPNORM; p->groups = 3; }

static const bad_case bad_cases[] = {
    {"struct_size", m_size, NJ_ERR_BAD_STRUCT_SIZE, "struct_size"},
    {"unknown flag", m_flags, NJ_ERR_BAD_FLAGS, "flags"},
    {"resout without residual", m_resout, NJ_ERR_BAD_FLAGS, "RESIDUAL_OUT"},
    {"activation", m_act, NJ_ERR_BAD_ACTIVATION, "activation"},
    {"rank 0", m_rank0, NJ_ERR_BAD_RANK, "x.rank"},
    {"rank 9", m_rank9, NJ_ERR_BAD_RANK, "x.rank"},
    {"negative extent", m_extent, NJ_ERR_BAD_EXTENT, "x.extents[1]"},
    {"extent product", m_product, NJ_ERR_OVERFLOW, "x.extents"},
    {"negative x stride", m_xstride, NJ_ERR_BAD_STRIDE, "x.strides[0]"},
    {"offset overflow", m_span, NJ_ERR_OVERFLOW, "x.strides"},
    {"reduce axis", m_reduce_bit, NJ_ERR_BAD_AXIS, "reduce_axes"},
    {"feature axis", m_feature_bit, NJ_ERR_BAD_AXIS, "feature_axes"},
    {"empty reduction", m_empty, NJ_ERR_EMPTY_REDUCTION, "reduce_axes"},
    {"x dtype", m_xdtype, NJ_ERR_BAD_DTYPE, "x.dtype"},
    {"y dtype", m_ydtype, NJ_ERR_BAD_DTYPE, "y.dtype"},
    {"param dtype", m_param, NJ_ERR_BAD_DTYPE, "param_dtype"},
    {"residual dtype", m_res_dtype, NJ_ERR_BAD_DTYPE, "residual.dtype"},
    {"y rank", m_yrank, NJ_ERR_SHAPE_MISMATCH, "y.rank"},
    {"y extent", m_yextent, NJ_ERR_SHAPE_MISMATCH, "y.extents[1]"},
    {"y stride", m_ystride, NJ_ERR_BAD_STRIDE, "y.strides[2]"},
    {"y overlap", m_yoverlap, NJ_ERR_OVERLAP, "y.strides"},
    {"broadcast output", m_broadcast_out, NJ_ERR_OVERLAP, "y.strides (x's)"},
    {"residual_out overlap", m_resout_overlap, NJ_ERR_OVERLAP, "residual_out.strides"},
    {"dx overlap", m_dx_overlap, NJ_ERR_OVERLAP, "dx.strides"},
    {"preset", m_preset, NJ_ERR_BAD_ARGUMENT, "preset"},
    {"groups", m_groups, NJ_ERR_BAD_GROUPS, "groups"},
    {"groupnorm label", m_gn_label, NJ_ERR_BAD_GROUPS, "groups = 3"},
};

static void test_validate_fail(void **state)
{
    expect_status(nj_problem_validate(NULL), NJ_ERR_NULL_POINTER, "NULL");
    for (size_t i = 0; i < NJ_ARRAY_LEN(bad_cases); i++) {
        nj_problem_desc p = layernorm(4, 8, 16, DEF_FLAGS);
        bad_cases[i].mutate(&p);
        nj_status s = nj_problem_validate(&p);
        if (s != bad_cases[i].want || !strstr(nj_last_error(), bad_cases[i].field))
            fail_msg("case `%s`: got %s `%s`, want %s naming `%s`", bad_cases[i].name, nj_status_name(s),
                     nj_last_error(), nj_status_name(bad_cases[i].want), bad_cases[i].field);
        nj_canon c;
        assert_int_equal(nj_canonicalize(&p, &c), bad_cases[i].want);
    }
}

static void test_presets_fail(void **state)
{
    nj_problem_desc p;
    int64_t e[4] = {2, 30, 8, 8};
    expect_status(nj_preset_groupnorm(&p, NJ_F16, 4, e, 4, 0, 0), NJ_ERR_BAD_GROUPS, "not divisible");
    expect_status(nj_preset_groupnorm(&p, NJ_F16, 4, e, 0, 0, 0), NJ_ERR_BAD_GROUPS, "groups");
    expect_status(nj_preset_groupnorm(&p, NJ_F16, 8, e, 2, 0, 0), NJ_ERR_BAD_RANK, "rank");
    expect_status(nj_preset_layernorm(NULL, NJ_F16, 4, e, 1, 0), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_preset_layernorm(&p, NJ_F16, 4, NULL, 1, 0), NJ_ERR_NULL_POINTER, "extents");
    expect_status(nj_preset_layernorm(&p, NJ_F16, 4, e, 0, 0), NJ_ERR_EMPTY_REDUCTION, "last_k");
    expect_status(nj_preset_layernorm(&p, NJ_F16, 4, e, 5, 0), NJ_ERR_BAD_AXIS, "last_k");
    expect_status(nj_preset_rmsnorm(&p, NJ_DTYPE_NONE, 4, e, 1, 0), NJ_ERR_BAD_DTYPE, "x.dtype");
    expect_status(nj_preset_layernorm(&p, NJ_F16, 4, e, 1, NJ_FLAG_RESIDUAL_OUT), NJ_ERR_BAD_FLAGS, "flags");
    expect_status(nj_preset_instancenorm(&p, NJ_F16, 2, e, 0, 0), NJ_ERR_BAD_RANK, "rank");
    expect_status(nj_preset_batchnorm(&p, NJ_F16, 1, e, 0, 0), NJ_ERR_BAD_RANK, "rank");
    nj_tensor_desc x;
    ok(nj_tensor_contiguous(&x, NJ_F32, 4, e));
    int32_t dup[3] = {1, 3, -3}, out[2] = {1, 4};
    expect_status(nj_preset_layernorm_axes(&p, &x, dup, 3, 0), NJ_ERR_DUPLICATE_AXIS, "axes[2]");
    expect_status(nj_preset_layernorm_axes(&p, &x, out, 2, 0), NJ_ERR_BAD_AXIS, "axes[1]");
    expect_status(nj_preset_layernorm_axes(&p, &x, dup, 0, 0), NJ_ERR_EMPTY_REDUCTION, "naxes");
    expect_status(nj_preset_layernorm_axes(&p, &x, NULL, 2, 0), NJ_ERR_NULL_POINTER, "axes");
    expect_status(nj_preset_layernorm_axes(&p, NULL, dup, 2, 0), NJ_ERR_NULL_POINTER, "x");
    x.strides[1] = -4;
    expect_status(nj_preset_layernorm_axes(&p, &x, out, 1, 0), NJ_ERR_BAD_STRIDE, "x.strides[1]");
}

/* ---- canonical forms ---- */

static void test_canon_layernorm_llm(void **state)
{
    nj_problem_desc a = layernorm(8, 100, 4096, DEF_FLAGS), b = layernorm(2, 37, 4096, DEF_FLAGS),
                    c1 = layernorm(1, 1, 4096, DEF_FLAGS);
    nj_canon c;
    key ka = canon_key(&a, &c), kb = canon_key(&b, NULL), kc = canon_key(&c1, NULL);
    assert_true(key_eq(&ka, &kb));
    assert_true(key_eq(&ka, &kc));
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.rank, 2);
    expect_axis(&c, 0, 800, 0, 0, 4096, 0, 1); /* B and T merged into the batch */
    expect_axis(&c, 1, 4096, 1, 1, 1, 1, 0);
    assert_int_equal(c.reduce_size, 4096);
    assert_int_equal(c.kept_inner, 1);
    assert_int_equal(c.param_size, 4096);
    int64_t rows, bs[NJ_OPD_COUNT];
    nj_canon_batch(&c, &rows, bs);
    assert_int_equal(rows, 800);
    assert_int_equal(bs[NJ_OPD_X], 4096);
    assert_int_equal(bs[NJ_OPD_STATS], 1);
    assert_int_equal(bs[NJ_OPD_PARAM], 0);
    ok(nj_canonicalize(&c1, &c));
    nj_canon_batch(&c, &rows, bs);
    assert_int_equal(rows, 1);
    assert_int_equal(bs[NJ_OPD_X], 0);
    /* problem keys do see the batch */
    key pa = problem_key(&a), pb = problem_key(&b);
    assert_false(key_eq(&pa, &pb));
    /* a different row length or dtype or flag changes the canonical key */
    nj_problem_desc d = layernorm(8, 100, 4095, DEF_FLAGS), e = layernorm(8, 100, 4096, NJ_FLAG_SCALE);
    key kd = canon_key(&d, NULL), ke = canon_key(&e, NULL);
    assert_false(key_eq(&ka, &kd));
    assert_false(key_eq(&ka, &ke));
    assert_int_equal(c.dtype[NJ_OPD_X], NJ_BF16);
    assert_int_equal(c.dtype[NJ_OPD_PARAM], NJ_BF16); /* presets: gamma/beta in x's dtype */
    assert_int_equal(c.dtype[NJ_OPD_STATS], NJ_F32);
    assert_int_equal(c.dtype[NJ_OPD_RES], NJ_DTYPE_NONE);
    nj_problem_desc r;
    int64_t re[3] = {8, 100, 4096};
    ok(nj_preset_rmsnorm(&r, NJ_BF16, 3, re, 1, DEF_FLAGS));
    nj_canon cr;
    key kr = canon_key(&r, &cr);
    assert_false(key_eq(&ka, &kr)); /* RMS differs from LayerNorm only by the center flag */
    assert_int_equal(cr.kind, NJ_KIND_ROW);
    assert_int_equal(cr.flags, NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    assert_int_equal(c.present, (1u << NJ_OPD_X) | (1u << NJ_OPD_Y) | (1u << NJ_OPD_DY) | (1u << NJ_OPD_DX) |
                                    (1u << NJ_OPD_PARAM) | (1u << NJ_OPD_STATS));
}

static void test_canon_batch_1_vs_8(void **state)
{
    int64_t e1[4] = {1, 64, 32, 32}, e8[4] = {8, 64, 32, 32};
    for (int layout = 0; layout < 2; layout++) {
        nj_problem_desc p1, p8;
        ok(nj_preset_groupnorm(&p1, NJ_F16, 4, e1, 8, layout, DEF_FLAGS));
        ok(nj_preset_groupnorm(&p8, NJ_F16, 4, e8, 8, layout, DEF_FLAGS));
        key k1 = canon_key(&p1, NULL), k8 = canon_key(&p8, NULL);
        assert_true(key_eq(&k1, &k8));
        ok(nj_preset_instancenorm(&p1, NJ_F32, 4, e1, layout, DEF_FLAGS));
        ok(nj_preset_instancenorm(&p8, NJ_F32, 4, e8, layout, DEF_FLAGS));
        k1 = canon_key(&p1, NULL);
        k8 = canon_key(&p8, NULL);
        assert_true(key_eq(&k1, &k8));
    }
}

static void test_canon_groupnorm_nchw(void **state)
{
    int64_t e[4] = {2, 128, 16, 16}; /* G = 32, C/G = 4, HW = 256 */
    nj_problem_desc p;
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 32, 0, DEF_FLAGS | NJ_FLAG_SAVE_STATS));
    nj_canon c;
    ok(nj_canonicalize(&p, &c));
    /* C/G (a feature axis) and HW (not) stay two reduced axes: the row is flat in x, but gamma varies
     * along it, so the one-reduced-axis ROW kind does not apply */
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.rank, 4);
    expect_axis(&c, 0, 2, 0, 0, 128 * 256, 0, 32);
    expect_axis(&c, 1, 32, 0, 1, 4 * 256, 4, 1);
    expect_axis(&c, 2, 4, 1, 1, 256, 1, 0);
    expect_axis(&c, 3, 256, 1, 0, 1, 0, 0);
    assert_int_equal(c.reduce_size, 1024);
    assert_int_equal(c.kept_inner, 32);
    assert_int_equal(c.param_size, 128);
    /* without scale and bias G is just more batch and the row is one flat axis */
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 32, 0, 0));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.rank, 2);
    expect_axis(&c, 0, 64, 0, 0, 1024, 0, 1);
    expect_axis(&c, 1, 1024, 1, 0, 1, 0, 0);
    assert_int_equal(c.param_size, 0);
    assert_int_equal(c.dtype[NJ_OPD_PARAM], NJ_DTYPE_NONE);
}

static void test_canon_groupnorm_nhwc(void **state)
{
    int64_t e[4] = {2, 128, 16, 16};
    nj_problem_desc p;
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 32, 1, DEF_FLAGS));
    nj_canon c;
    ok(nj_canonicalize(&p, &c));
    /* memory [N, HW, G, C/G]: spatial reduced outside the kept G axis */
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.rank, 4);
    expect_axis(&c, 0, 2, 0, 0, 256 * 128, 0, 32);
    expect_axis(&c, 1, 256, 1, 0, 128, 0, 0);
    expect_axis(&c, 2, 32, 0, 1, 4, 4, 1);
    expect_axis(&c, 3, 4, 1, 1, 1, 1, 0);
    /* GroupNorm on [N, C] (no spatial axes): one reduced axis, C/G, so a ROW even with an affine */
    int64_t nc[2] = {6, 64};
    ok(nj_preset_groupnorm(&p, NJ_F16, 2, nc, 8, 1, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.rank, 3);
    expect_axis(&c, 0, 6, 0, 0, 64, 0, 8);
    expect_axis(&c, 1, 8, 0, 1, 8, 8, 1);
    expect_axis(&c, 2, 8, 1, 1, 1, 1, 0);
}

static void test_canon_convnext_layernorm(void **state)
{
    int64_t e[4] = {4, 96, 56, 56};
    nj_tensor_desc x;
    ok(nj_tensor_contiguous(&x, NJ_F32, 4, e));
    int32_t axes[1] = {1};
    nj_problem_desc p;
    ok(nj_preset_layernorm_axes(&p, &x, axes, 1, DEF_FLAGS));
    nj_canon c;
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_COLUMN);
    assert_int_equal(c.rank, 3);
    expect_axis(&c, 0, 4, 0, 0, 96 * 3136, 0, 3136);
    expect_axis(&c, 1, 96, 1, 1, 3136, 1, 0);
    expect_axis(&c, 2, 3136, 0, 0, 1, 0, 1);
    assert_int_equal(c.reduce_size, 96);
    assert_int_equal(c.kept_inner, 3136);
}

static void test_canon_instancenorm(void **state)
{
    int64_t cf[4] = {2, 64, 10, 12}, cl[4] = {2, 10, 12, 64};
    nj_problem_desc p;
    nj_canon c;
    ok(nj_preset_instancenorm(&p, NJ_F16, 4, cf, 0, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.rank, 3);
    expect_axis(&c, 0, 2, 0, 0, 64 * 120, 0, 64);
    expect_axis(&c, 1, 64, 0, 1, 120, 1, 1);
    expect_axis(&c, 2, 120, 1, 0, 1, 0, 0);
    ok(nj_preset_instancenorm(&p, NJ_F16, 4, cl, 1, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_COLUMN);
    expect_axis(&c, 0, 2, 0, 0, 64 * 120, 0, 64);
    expect_axis(&c, 1, 120, 1, 0, 64, 0, 0);
    expect_axis(&c, 2, 64, 0, 1, 1, 1, 1);
}

static void test_canon_batchnorm(void **state)
{
    int64_t e[4] = {8, 64, 14, 14};
    nj_problem_desc p;
    nj_canon c;
    ok(nj_preset_batchnorm(&p, NJ_F16, 4, e, 0, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    /* reduced N outside the kept C, reduced HW inside: neither a row nor a column */
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.rank, 4);
    expect_axis(&c, 0, 1, 0, 0, 0, 0, 0); /* synthetic batch */
    expect_axis(&c, 1, 8, 1, 0, 64 * 196, 0, 0);
    expect_axis(&c, 2, 64, 0, 1, 196, 1, 1);
    expect_axis(&c, 3, 196, 1, 0, 1, 0, 0);
    assert_int_equal(c.reduce_size, 8 * 196);
    assert_int_equal(c.kept_inner, 64);
    ok(nj_preset_batchnorm(&p, NJ_F16, 4, e, 1, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_COLUMN); /* N, H, W merge into one reduced axis */
    assert_int_equal(c.rank, 3);
    expect_axis(&c, 1, 8 * 196, 1, 0, 64, 0, 0);
    expect_axis(&c, 2, 64, 0, 1, 1, 1, 1);
}

static void test_canon_special_axes(void **state)
{
    /* every reduced axis of size 1: one reduced axis of extent 1 is kept, innermost */
    int64_t e[3] = {6, 5, 1};
    nj_problem_desc p;
    nj_canon c;
    ok(nj_preset_layernorm(&p, NJ_F32, 3, e, 1, DEF_FLAGS));
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.rank, 2);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.axes[0].extent, 30);
    assert_int_equal(c.axes[1].extent, 1);
    assert_int_equal(c.axes[1].reduce, 1);
    assert_int_equal(c.reduce_size, 1);
    /* a broadcast x axis (stride 0) sorts innermost and the row is no longer contiguous */
    int64_t e2[2] = {4, 16};
    ok(nj_preset_layernorm(&p, NJ_F32, 2, e2, 1, 0));
    like_x(&p.y, &p.x);
    p.dy = p.dx = p.y;
    p.x.strides[1] = 0;
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.axes[c.rank - 1].stride[NJ_OPD_X], 0);
    assert_int_equal(c.axes[c.rank - 1].stride[NJ_OPD_Y], 1);
    /* a y that differs from x blocks merging: B, T stay apart when y pads T */
    nj_problem_desc q = layernorm(4, 6, 32, DEF_FLAGS);
    like_x(&q.y, &q.x);
    q.y.strides[0] = 6 * 40 + 8;
    q.y.strides[1] = 40;
    ok(nj_canonicalize(&q, &c));
    assert_int_equal(c.rank, 3);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(c.axes[0].extent, 4);
    assert_int_equal(c.axes[0].stride[NJ_OPD_Y], 248);
    assert_int_equal(c.axes[1].extent, 6);
    assert_int_equal(c.axes[1].stride[NJ_OPD_Y], 40);
    assert_int_equal(c.axes[1].stride[NJ_OPD_X], 32);
}

static void test_canon_row_rules(void **state)
{
    nj_canon c;
    /* a row that is contiguous in x but strided in y (or dx) is not ROW; the innermost axis is reduced,
     * so not COLUMN either */
    nj_problem_desc p = layernorm(4, 6, 32, DEF_FLAGS);
    like_x(&p.y, &p.x);
    int64_t ys[3] = {6 * 64, 64, 2};
    memcpy(p.y.strides, ys, sizeof ys);
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    p = layernorm(4, 6, 32, DEF_FLAGS);
    like_x(&p.dx, &p.x);
    memcpy(p.dx.strides, ys, sizeof ys);
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    /* a residual laid out differently only matters under NJ_FLAG_RESIDUAL */
    p = layernorm(4, 6, 32, DEF_FLAGS);
    like_x(&p.residual, &p.x);
    memcpy(p.residual.strides, ys, sizeof ys);
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_ROW);
    key k1 = canon_key(&p, NULL);
    p.flags |= NJ_FLAG_RESIDUAL;
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.dtype[NJ_OPD_RES], NJ_BF16);
    key k2 = canon_key(&p, NULL);
    assert_false(key_eq(&k1, &k2));
}

static void test_canon_zero_size(void **state)
{
    nj_canon c, full;
    nj_problem_desc p = layernorm(0, 5, 4096, DEF_FLAGS), q = layernorm(3, 5, 4096, DEF_FLAGS);
    key kp = canon_key(&p, &c), kq = canon_key(&q, &full);
    assert_true(key_eq(&kp, &kq)); /* an empty batch is just batch 0 */
    assert_int_equal(c.axes[0].extent, 0);
    p = layernorm(4, 5, 0, DEF_FLAGS); /* empty rows: nothing runs, every other extent stays >= 1 */
    ok(nj_canonicalize(&p, &c));
    assert_int_equal(c.axes[0].extent, 0);
    for (int i = 1; i < c.rank; i++) assert_true(c.axes[i].extent >= 1);
    assert_true(c.reduce_size >= 1);
    assert_true(c.kept_inner >= 1);
}

static void test_canon_key_garbage(void **state)
{
    nj_problem_desc clean = layernorm(8, 3, 512, DEF_FLAGS | NJ_FLAG_SAVE_STATS);
    clean.activation = NJ_ACT_SILU;
    nj_problem_desc dirty;
    memset(&dirty, 0xAB, sizeof dirty);
    dirty.struct_size = sizeof dirty;
    dirty.flags = clean.flags;
    dirty.activation = NJ_ACT_SILU;
    dirty.param_dtype = clean.param_dtype;
    dirty.reduce_axes = clean.reduce_axes;
    dirty.feature_axes = clean.feature_axes;
    dirty.preset = NJ_PRESET_LAYERNORM;
    dirty.groups = 0;
    dirty.x.dtype = NJ_BF16;
    dirty.x.rank = 3;
    for (int i = 0; i < 3; i++) {
        dirty.x.extents[i] = clean.x.extents[i];
        dirty.x.strides[i] = clean.x.strides[i];
    }
    nj_tensor_desc *opt[3] = {&dirty.y, &dirty.dy, &dirty.dx};
    for (int i = 0; i < 3; i++) {
        opt[i]->dtype = 0;
        opt[i]->rank = 0; /* the rest of these stays garbage, as does the unused residual */
    }
    key a = problem_key(&clean), b = problem_key(&dirty);
    assert_true(key_eq(&a, &b));
    key ca = canon_key(&clean, NULL), cb = canon_key(&dirty, NULL);
    assert_true(key_eq(&ca, &cb));
    /* explicit operands equal to x's layout mean the same problem */
    like_x(&dirty.y, &dirty.x);
    dirty.y.dtype = NJ_BF16;
    b = problem_key(&dirty);
    assert_true(key_eq(&a, &b));
    dirty.y.dtype = NJ_F32;
    b = problem_key(&dirty);
    assert_false(key_eq(&a, &b));
    /* a short buffer gets a prefix, the length is still reported */
    uint8_t small[8];
    assert_int_equal(nj_problem_key(&clean, small, sizeof small), a.n);
    assert_memory_equal(small, a.b, sizeof small);
}

static void test_canon_text(void **state)
{
    nj_problem_desc a = layernorm(37, 3, 4096, DEF_FLAGS), b = layernorm(5, 1, 4096, DEF_FLAGS);
    nj_canon ca, cb;
    ok(nj_canonicalize(&a, &ca));
    ok(nj_canonicalize(&b, &cb));
    char *ta = nj_canon_text(&ca), *tb = nj_canon_text(&cb);
    assert_non_null(ta);
    assert_string_equal(ta, tb);
    assert_non_null(strstr(ta, "kind=row"));
    assert_non_null(strstr(ta, "*"));
    assert_null(strstr(ta, "111")); /* batch 37*3 never appears */
    assert_non_null(strstr(ta, "4096"));
    assert_null(strchr(ta, '\n'));
    assert_string_equal(ta, "kind=row dt=bf16/bf16/-/-/bf16/bf16/bf16/f32 flags=center,scale,bias act=none "
                            "rs=4096 ki=1 ps=4096 axes=[*:k|4096:rf:1,1,0,0,1,1,1,0]");
    free(ta);
    free(tb);
    nj_problem_desc c = layernorm(5, 1, 4096, NJ_FLAG_SCALE);
    nj_canon cc;
    ok(nj_canonicalize(&c, &cc));
    ta = nj_canon_text(&ca);
    tb = nj_canon_text(&cc);
    assert_string_not_equal(ta, tb);
    free(ta);
    free(tb);
}

/* Each pass sees only its operands: the backward of a block with the fused residual add (and saved
 * statistics) is the backward without them; the forward ignores dy/dx. */
static void test_canon_for_pass(void **state)
{
    (void)state;
    nj_problem_desc plain, fused;
    ok(nj_problem_from_text("rmsnorm bf16 *x2048 flags=scale", 4, &plain));
    ok(nj_problem_from_text("rmsnorm bf16 *x2048 flags=scale,residual,resout,stats", 4, &fused));
    nj_canon cp, cf, vp, vf;
    ok(nj_canonicalize(&plain, &cp));
    ok(nj_canonicalize(&fused, &cf));
    nj_canon_for_pass(&cp, NJ_PASS_BACKWARD, &vp);
    nj_canon_for_pass(&cf, NJ_PASS_BACKWARD, &vf);
    char *a = nj_canon_text(&vp), *b = nj_canon_text(&vf);
    assert_string_equal(a, b);
    assert_string_equal(a, "kind=row dt=bf16/-/-/-/bf16/bf16/bf16/f32 flags=scale act=none rs=2048 ki=1 ps=2048 "
                           "axes=[*:k|2048:rf:1,0,0,0,1,1,1,0]");
    free(a), free(b);
    assert_int_equal(vf.present & (1u << NJ_OPD_Y | 1u << NJ_OPD_RES | 1u << NJ_OPD_RESOUT), 0);
    assert_int_equal(vf.present & (1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX), 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX);
    /* the forward keeps the residual operands apart, and loses dy/dx */
    nj_canon_for_pass(&cp, NJ_PASS_FORWARD, &vp);
    nj_canon_for_pass(&cf, NJ_PASS_FORWARD, &vf);
    a = nj_canon_text(&vp), b = nj_canon_text(&vf);
    assert_string_not_equal(a, b);
    assert_string_equal(a, "kind=row dt=bf16/bf16/-/-/-/-/bf16/f32 flags=scale act=none rs=2048 ki=1 ps=2048 "
                           "axes=[*:k|2048:rf:1,1,0,0,0,0,1,0]");
    free(a), free(b);
    assert_int_equal(vf.dtype[NJ_OPD_RES], NJ_BF16);
    assert_int_equal(vf.axes[1].stride[NJ_OPD_RESOUT], 1);
    /* in place (out == c), and a view of a view is the view */
    nj_canon twice = cf;
    nj_canon_for_pass(&twice, NJ_PASS_BACKWARD, &twice);
    nj_canon_for_pass(&twice, NJ_PASS_BACKWARD, &twice);
    nj_canon_for_pass(&cf, NJ_PASS_BACKWARD, &vf);
    assert_memory_equal(&twice, &vf, sizeof twice);
}

/* ---- text form ---- */

static void round_trip(const nj_problem_desc *p, int64_t batch)
{
    char buf[1024];
    size_t len = 0;
    ok(nj_problem_to_text(p, buf, sizeof buf, &len));
    assert_int_equal(len, strlen(buf));
    nj_problem_desc q;
    nj_status s = nj_problem_from_text(buf, batch, &q);
    if (s != NJ_OK) fail_msg("`%s` does not parse: %s %s", buf, nj_status_name(s), nj_last_error());
    key a = problem_key(p), b = problem_key(&q);
    if (!key_eq(&a, &b)) fail_msg("`%s` parses to a different problem", buf);
    key ca = canon_key(p, NULL), cb = canon_key(&q, NULL);
    assert_true(key_eq(&ca, &cb));
}

static void test_text_round_trip_all(void **state)
{
    int64_t nchw[4] = {3, 32, 5, 7}, llm[3] = {2, 9, 64}, in5[5] = {2, 3, 4, 5, 8};
    int count = 0;
    for (uint32_t flags = 0; flags <= NJ_FLAGS_ALL; flags++) {
        if ((flags & NJ_FLAG_RESIDUAL_OUT) && !(flags & NJ_FLAG_RESIDUAL)) continue;
        for (int act = NJ_ACT_NONE; act <= NJ_ACT_SIGMOID; act++) {
            nj_problem_desc ps[9];
            ok(nj_preset_layernorm(&ps[0], NJ_BF16, 3, llm, 1, flags));
            ok(nj_preset_rmsnorm(&ps[1], NJ_F16, 3, llm, 2, flags));
            ok(nj_preset_instancenorm(&ps[2], NJ_F32, 4, nchw, 0, flags));
            ok(nj_preset_instancenorm(&ps[3], NJ_F32, 5, in5, 1, flags));
            ok(nj_preset_groupnorm(&ps[4], NJ_F16, 4, nchw, 8, 0, flags));
            ok(nj_preset_groupnorm(&ps[5], NJ_BF16, 4, nchw, 4, 1, flags));
            ok(nj_preset_batchnorm(&ps[6], NJ_F16, 4, nchw, 0, flags));
            ok(nj_preset_batchnorm(&ps[7], NJ_F32, 4, nchw, 1, flags));
            nj_tensor_desc x;
            ok(nj_tensor_contiguous(&x, NJ_F32, 4, nchw));
            int32_t axes[2] = {1, 3};
            ok(nj_preset_layernorm_axes(&ps[8], &x, axes, 2, flags));
            for (int i = 0; i < 9; i++) {
                ps[i].activation = act;
                if (i == 1 && (flags & NJ_FLAG_SCALE)) ps[i].param_dtype = NJ_F16;
                round_trip(&ps[i], ps[i].x.extents[0]);
                count++;
            }
        }
    }
    assert_int_equal(count, 48 * 6 * 9);
}

static void test_text_operands_round_trip(void **state)
{
    nj_problem_desc p = layernorm(4, 8, 16, DEF_FLAGS | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT);
    like_x(&p.y, &p.x);
    p.y.dtype = NJ_F32;
    int64_t tr[3] = {1, 4, 32};
    memcpy(p.y.strides, tr, sizeof tr);
    p.residual_out = p.y;
    p.x.strides[0] = 0; /* broadcast x is fine: the outputs have their own layout */
    like_x(&p.dx, &p.y);
    p.dx.dtype = NJ_F16;
    round_trip(&p, 4);
    char buf[512];
    ok(nj_problem_to_text(&p, buf, sizeof buf, NULL));
    assert_non_null(strstr(buf, "y.dtype=f32"));
    assert_non_null(strstr(buf, "y.strides=1,4,32"));
    assert_non_null(strstr(buf, "resout.strides=1,4,32"));
    assert_null(strstr(buf, "dy."));
    /* a general problem with '*' only where axis 0 is a kept non-feature axis */
    nj_problem_desc g;
    memset(&g, 0, sizeof g);
    g.struct_size = sizeof g;
    int64_t e[3] = {6, 5, 4};
    ok(nj_tensor_contiguous(&g.x, NJ_F32, 3, e));
    g.reduce_axes = 0x5;
    g.feature_axes = 0x2;
    g.flags = NJ_FLAG_SCALE;
    round_trip(&g, 6);
    ok(nj_problem_to_text(&g, buf, sizeof buf, NULL));
    assert_string_equal(buf, "norm dtype=f32 shape=6x5x4 strides=20,4,1 reduce=0,2 feature=1 param=f32 "
                             "flags=scale act=none");
}

static void test_text_exact_print(void **state)
{
    int64_t e[4] = {16, 128, 64, 64};
    nj_problem_desc p;
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, e, 32, 0, DEF_FLAGS));
    p.activation = NJ_ACT_SILU;
    char buf[512];
    size_t len;
    ok(nj_problem_to_text(&p, buf, sizeof buf, &len));
    const char *want = "groupnorm dtype=f16 shape=*x32x4x64x64 batch=16 strides=524288,16384,4096,64,1 "
                       "reduce=2,3,4 feature=1,2 groups=32 param=f16 flags=center,scale,bias act=silu";
    assert_string_equal(buf, want);
    /* buffer rules: too small fails and reports the length; exact fit works */
    char small[16];
    size_t need = 0;
    expect_status(nj_problem_to_text(&p, small, sizeof small, &need), NJ_ERR_BAD_ARGUMENT, NULL);
    assert_int_equal(need, strlen(want));
    char *exact = malloc(need + 1);
    ok(nj_problem_to_text(&p, exact, need + 1, NULL));
    assert_string_equal(exact, want);
    free(exact);
    nj_problem_desc q;
    ok(nj_problem_from_text(want, 5, &q));
    assert_int_equal(q.x.extents[0], 16); /* batch= wins over the default: print -> parse is exact */
    assert_int_equal(q.groups, 32);
    assert_int_equal(q.activation, NJ_ACT_SILU);
    ok(nj_problem_from_text("groupnorm dtype=f16 shape=*x32x4x64x64 reduce=2,3,4 feature=1,2 groups=32", 5, &q));
    assert_int_equal(q.x.extents[0], 5); /* a bare '*' reads as batch_default */
    p.struct_size = 0;
    expect_status(nj_problem_to_text(&p, buf, sizeof buf, NULL), NJ_ERR_BAD_STRUCT_SIZE, "struct_size");
}

static void short_form(const char *text, int64_t batch, const nj_problem_desc *want)
{
    nj_problem_desc got;
    nj_status s = nj_problem_from_text(text, batch, &got);
    if (s != NJ_OK) fail_msg("`%s`: %s %s", text, nj_status_name(s), nj_last_error());
    key a = problem_key(&got), b = problem_key(want);
    if (!key_eq(&a, &b)) fail_msg("`%s` differs from its preset", text);
}

static void test_text_short_forms(void **state)
{
    nj_problem_desc p;
    int64_t ln[2] = {7, 4096};
    ok(nj_preset_layernorm(&p, NJ_BF16, 2, ln, 1,
                           NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT));
    short_form("layernorm bf16 *x4096 flags=scale,bias,residual,resout", 7, &p);
    int64_t rms[2] = {3, 8192};
    ok(nj_preset_rmsnorm(&p, NJ_BF16, 2, rms, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    short_form("rmsnorm bf16 *x8192", 3, &p);
    short_form("  rmsnorm   shape=3x8192 dtype=bf16 ", 99, &p);
    int64_t gn[4] = {2, 128, 64, 64};
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, gn, 32, 1, DEF_FLAGS));
    p.activation = NJ_ACT_SILU;
    short_form("groupnorm f16 nhwc *x128x64x64 groups=32 act=silu", 2, &p);
    int64_t in[5] = {2, 128, 128, 128, 32};
    ok(nj_preset_instancenorm(&p, NJ_F32, 5, in, 1, DEF_FLAGS));
    short_form("instancenorm f32 ndhwc 2x128x128x128x32", 9, &p);
    int64_t bn[4] = {32, 64, 56, 56};
    ok(nj_preset_batchnorm(&p, NJ_F16, 4, bn, 0, DEF_FLAGS));
    short_form("batchnorm f16 nchw *x64x56x56", 32, &p);
    short_form("batchnorm f16 32x64x56x56", 1, &p); /* channels first by default */
    int64_t cn[4] = {4, 96, 56, 56};
    nj_tensor_desc x;
    ok(nj_tensor_contiguous(&x, NJ_F32, 4, cn));
    int32_t axes[1] = {1};
    ok(nj_preset_layernorm_axes(&p, &x, axes, 1, DEF_FLAGS));
    short_form("layernorm f32 nchw *x96x56x56 axes=1", 4, &p);
    ok(nj_preset_layernorm(&p, NJ_F16, 4, cn, 3, NJ_FLAG_SAVE_STATS));
    p.param_dtype = NJ_F16;
    short_form("layernorm f16 4x96x56x56 last=3 flags=stats param=f16", 1, &p);
    /* manifest lines as the tool writes them; kind words in any case, `general` for `norm` */
    ok(nj_preset_layernorm_axes(&p, &x, axes, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    short_form("LayerNorm f32 nchw *x96x56x56 axes=1 flags=scale,bias", 4, &p);
    int64_t sd[4] = {2, 320, 64, 64};
    ok(nj_preset_groupnorm(&p, NJ_F16, 4, sd, 32, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    p.activation = NJ_ACT_SILU;
    short_form("groupnorm f16 nhwc *x320x64x64 groups=32 act=silu flags=scale,bias", 2, &p);
    int64_t g[2] = {4, 8};
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.flags = DEF_FLAGS;
    p.reduce_axes = 2;
    ok(nj_tensor_contiguous(&p.x, NJ_F32, 2, g));
    short_form("general dtype=f32 shape=4x8 reduce=1", 1, &p);
    short_form("norm dtype=f32 shape=*x8 reduce=1", 4, &p);
}

typedef struct bad_text {
    const char *text;
    nj_status want;
    const char *token;
} bad_text;

static const bad_text bad_texts[] = {
    {"", NJ_ERR_PARSE, "empty"},
    {"   ", NJ_ERR_PARSE, "empty"},
    {"batchnorn f16 *x8", NJ_ERR_PARSE, "batchnorn"},
    {"layernorm f99 *x8", NJ_ERR_PARSE, "f99"},
    {"layernorm f32", NJ_ERR_PARSE, "no shape"},
    {"layernorm *x8", NJ_ERR_PARSE, "no dtype"},
    {"layernorm f32 8xx8", NJ_ERR_PARSE, "8xx8"},
    {"layernorm f32 8x", NJ_ERR_PARSE, "8x"},
    {"layernorm f32 8x*", NJ_ERR_PARSE, "8x*"},
    {"layernorm f32 8xq", NJ_ERR_PARSE, "8xq"},
    {"layernorm f32 1x1x1x1x1x1x1x1x1", NJ_ERR_PARSE, "1x1x1"},
    {"layernorm f32 *x8 flags=scale,bogus", NJ_ERR_PARSE, "flags=scale,bogus"},
    {"layernorm f32 *x8 act=swish", NJ_ERR_PARSE, "act=swish"},
    {"layernorm f32 *x8 colour=red", NJ_ERR_PARSE, "colour=red"},
    {"layernorm f32 *x8 z.dtype=f32", NJ_ERR_PARSE, "z.dtype"},
    {"layernorm f32 *x8 y.shape=2x8", NJ_ERR_PARSE, "y.shape"},
    {"layernorm f32 *x8 y.strides=1", NJ_ERR_PARSE, "y"},
    {"layernorm f32 *x8 groups=2", NJ_ERR_PARSE, "groups="},
    {"layernorm f32 *x8 last=1 axes=1", NJ_ERR_PARSE, "axes="},
    {"layernorm f32 nhwc 2x3x4x5", NJ_ERR_PARSE, "layout"},
    {"instancenorm f32 nchw 2x3x4", NJ_ERR_PARSE, "layout"},
    {"groupnorm f16 nchw 2x64x8x8", NJ_ERR_PARSE, "groups="},
    {"groupnorm f16 nchw 2x64x8x8 groups=x", NJ_ERR_PARSE, "groups=x"},
    {"batchnorm f16 2x64x8x8 axes=1", NJ_ERR_PARSE, "axes="},
    {"norm f32 4x8", NJ_ERR_PARSE, "reduce="},
    {"norm dtype=f32 shape=4x8 strides=8 reduce=1", NJ_ERR_PARSE, "strides="},
    {"norm dtype=f32 shape=4x8 reduce=1,x", NJ_ERR_PARSE, "reduce=1,x"},
    {"norm dtype=f32 shape=4x8 reduce=1,", NJ_ERR_PARSE, "reduce=1,"},
    {"norm dtype=f32 shape=4x8 reduce=1 last=1", NJ_ERR_PARSE, "last="},
    {"norm dtype=f32 nc 4x8 reduce=1", NJ_ERR_PARSE, "layout"},
    {"layernorm f32 4x8 strides=8,1", NJ_ERR_PARSE, "strides="},
    {"layernorm f32 4x8 feature=1", NJ_ERR_PARSE, "feature="},
    {"layernorm f32 4x8 bananas", NJ_ERR_PARSE, "bananas"},
    {"layernorm f32 4x8 =f32", NJ_ERR_PARSE, "=f32"},
    /* well-formed lines with invalid problems get the validation status */
    {"groupnorm f16 nchw 2x30x8x8 groups=4", NJ_ERR_BAD_GROUPS, "divisible"},
    {"norm dtype=f32 shape=4x8 reduce=1,1", NJ_ERR_DUPLICATE_AXIS, "reduce"},
    {"norm dtype=f32 shape=4x8 reduce=2", NJ_ERR_BAD_AXIS, "reduce_axes"},
    {"norm dtype=f32 shape=4x8 reduce=1 y.strides=1,1", NJ_ERR_OVERLAP, "y.strides"},
    {"layernorm f32 4x-8", NJ_ERR_BAD_EXTENT, "extents[1]"},
    {"layernorm f32 4x8 flags=resout", NJ_ERR_BAD_FLAGS, "RESIDUAL_OUT"},
    {"layernorm bf16 4x8 param=f16", NJ_ERR_BAD_DTYPE, "param_dtype"},
    {"layernorm f32 4x8 axes=1,-1", NJ_ERR_DUPLICATE_AXIS, "axes[1]"},
};

static void test_text_malformed_fail(void **state)
{
    for (size_t i = 0; i < NJ_ARRAY_LEN(bad_texts); i++) {
        nj_problem_desc p;
        memset(&p, 0x5A, sizeof p);
        nj_status s = nj_problem_from_text(bad_texts[i].text, 4, &p);
        if (s != bad_texts[i].want || !strstr(nj_last_error(), bad_texts[i].token))
            fail_msg("`%s`: got %s `%s`, want %s naming `%s`", bad_texts[i].text, nj_status_name(s), nj_last_error(),
                     nj_status_name(bad_texts[i].want), bad_texts[i].token);
    }
    nj_problem_desc p;
    expect_status(nj_problem_from_text(NULL, 1, &p), NJ_ERR_NULL_POINTER, "text");
    expect_status(nj_problem_from_text("rmsnorm f32 *x8", 1, NULL), NJ_ERR_NULL_POINTER, "descriptor");
    expect_status(nj_problem_from_text("rmsnorm f32 *x8", -1, &p), NJ_ERR_BAD_ARGUMENT, "batch_default");
    char longtok[700];
    memset(longtok, '1', sizeof longtok - 1);
    longtok[sizeof longtok - 1] = '\0';
    char line[800];
    snprintf(line, sizeof line, "rmsnorm f32 %s", longtok);
    expect_status(nj_problem_from_text(line, 1, &p), NJ_ERR_PARSE, "too long");
}

/* ---- properties over random strided problems ---- */

#define NJ_PT_MAX 4096

static bool mergeable(const nj_canon_axis *a, const nj_canon_axis *b)
{
    if (a->reduce != b->reduce || a->feature != b->feature) return false;
    for (int o = 0; o < NJ_OPD_COUNT; o++)
        if (a->stride[o] != b->stride[o] * b->extent) return false;
    return true;
}

/* Structure promised by problem.h, checked from the outside. */
static void check_canon_shape(const nj_canon *c, int64_t numel)
{
    assert_true(c->rank >= 2 && c->rank <= NJ_CANON_MAX_AXES);
    assert_false(c->axes[0].reduce || c->axes[0].feature);
    assert_int_equal(c->axes[0].extent * c->kept_inner * c->reduce_size, numel);
    int nred = 0;
    for (int i = 1; i < c->rank; i++) {
        const nj_canon_axis *a = &c->axes[i];
        nred += a->reduce;
        assert_true(a->extent > 1 || (a->reduce && c->reduce_size == 1 && i == c->rank - 1));
        if (i + 1 < c->rank) { /* sorted, except that a kept extent-1 reduced axis may carry any stride */
            assert_true(a->stride[NJ_OPD_X] >= c->axes[i + 1].stride[NJ_OPD_X] || c->axes[i + 1].extent == 1);
            assert_false(mergeable(a, &c->axes[i + 1]));
        }
    }
    assert_true(nred >= 1);
    if (c->axes[0].extent > 1) assert_false(mergeable(&c->axes[0], &c->axes[1]));
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    if (c->kind == NJ_KIND_ROW) {
        assert_true(nred == 1 && in->reduce);
        assert_true(in->stride[NJ_OPD_X] == 1 && in->stride[NJ_OPD_Y] == 1 && in->stride[NJ_OPD_DX] == 1);
    } else if (c->kind == NJ_KIND_COLUMN) {
        assert_true(!in->reduce && in->stride[NJ_OPD_X] == 1);
    } else {
        assert_int_equal(c->kind, NJ_KIND_GENERAL);
    }
}

/* The same problem with a size-1 axis inserted at `pos` (any stride, any role): the canonical key is
 * unchanged. */
static void insert_unit_axis(nj_problem_desc *p, nj_pg_rng *r)
{
    int pos = (int)nj_pg_int(r, 0, p->x.rank);
    nj_tensor_desc *t[6] = {&p->x, &p->y, &p->residual, &p->residual_out, &p->dy, &p->dx};
    for (int o = 0; o < 6; o++) {
        if (t[o]->rank == 0) continue;
        for (int i = t[o]->rank; i > pos; i--) {
            t[o]->extents[i] = t[o]->extents[i - 1];
            t[o]->strides[i] = t[o]->strides[i - 1];
        }
        t[o]->extents[pos] = 1;
        t[o]->strides[pos] = nj_pg_int(r, 0, 100);
        t[o]->rank++;
    }
    uint32_t low = (1u << pos) - 1u;
    p->reduce_axes = (p->reduce_axes & low) | (p->reduce_axes & ~low) << 1 | (uint32_t)nj_pg_int(r, 0, 1) << pos;
    p->feature_axes = (p->feature_axes & low) | (p->feature_axes & ~low) << 1 | (uint32_t)nj_pg_int(r, 0, 1) << pos;
}

static void test_canon_properties_random(void **state)
{
    static nj_pg_offsets a[NJ_PT_MAX], b[NJ_PT_MAX];
    nj_pg_rng r = {12345};
    int kinds[4] = {0};
    for (int iter = 0; iter < 3000; iter++) {
        nj_problem_desc p;
        nj_pg_problem(&r, NULL, &p);
        nj_status s = nj_problem_validate(&p);
        if (s != NJ_OK) fail_msg("iteration %d: generated problem invalid: %s", iter, nj_last_error());
        nj_canon c;
        key k1 = canon_key(&p, &c);
        kinds[c.kind]++;
        int64_t n = nj_pg_desc_offsets(&p, a), m = nj_pg_canon_offsets(&c, b);
        check_canon_shape(&c, n);
        assert_int_equal(n, m);
        nj_pg_sort_offsets(a, n);
        nj_pg_sort_offsets(b, m);
        if (memcmp(a, b, (size_t)n * sizeof a[0]) != 0) {
            char *t = nj_canon_text(&c);
            fail_msg("iteration %d: canonical offsets differ from the descriptor's: %s", iter, t);
        }
        round_trip(&p, p.x.extents[0]);
        if (p.x.rank < NJ_MAX_RANK) {
            insert_unit_axis(&p, &r);
            key k2 = canon_key(&p, NULL);
            if (!key_eq(&k1, &k2)) fail_msg("iteration %d: a size-1 axis changed the canonical key", iter);
        }
    }
    /* the generator reaches every kind */
    assert_true(kinds[NJ_KIND_ROW] > 50 && kinds[NJ_KIND_COLUMN] > 50 && kinds[NJ_KIND_GENERAL] > 50);
}

/* Random bytes and random text never crash; failures always say why. */
static void test_fuzz_fail(void **state)
{
    nj_pg_rng r = {777};
    for (int iter = 0; iter < 20000; iter++) {
        nj_problem_desc p;
        uint8_t *bytes = (uint8_t *)&p;
        for (size_t i = 0; i < sizeof p; i++) bytes[i] = (uint8_t)nj_pg_next(&r);
        if (iter % 2) { /* mostly sane headers so the deeper checks are reached */
            nj_pg_problem(&r, NULL, &p);
            int64_t *f = (int64_t *)&p.x + nj_pg_int(&r, 0, sizeof(nj_tensor_desc) * 6 / 8 - 1);
            *f = nj_pg_int(&r, -3, 3) * ((int64_t)1 << nj_pg_int(&r, 0, 61));
        }
        nj_status s = nj_problem_validate(&p);
        if (s != NJ_OK) assert_true(nj_last_error()[0] != '\0');
        nj_canon c;
        assert_int_equal(nj_canonicalize(&p, &c), s);
        uint8_t k[NJ_PROBLEM_KEY_MAX];
        assert_true(nj_problem_key(&p, k, sizeof k) <= sizeof k);
    }
    static const char alphabet[] = "layernorm rmsgroup*x0123456789,=.-f16bf32nchwdtypshaeflgs ";
    for (int iter = 0; iter < 20000; iter++) {
        char line[64];
        int len = (int)nj_pg_int(&r, 0, sizeof line - 1);
        for (int i = 0; i < len; i++) line[i] = alphabet[nj_pg_int(&r, 0, sizeof alphabet - 2)];
        line[len] = '\0';
        nj_problem_desc p;
        nj_status s = nj_problem_from_text(line, 3, &p);
        if (s != NJ_OK) assert_true(nj_last_error()[0] != '\0');
        else ok(nj_problem_validate(&p));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_contiguous),
        cmocka_unit_test(test_tensor_contiguous_fail),
        cmocka_unit_test(test_presets_fields),
        cmocka_unit_test(test_validate_ok_cases),
        cmocka_unit_test(test_validate_fail),
        cmocka_unit_test(test_presets_fail),
        cmocka_unit_test(test_canon_layernorm_llm),
        cmocka_unit_test(test_canon_batch_1_vs_8),
        cmocka_unit_test(test_canon_groupnorm_nchw),
        cmocka_unit_test(test_canon_groupnorm_nhwc),
        cmocka_unit_test(test_canon_convnext_layernorm),
        cmocka_unit_test(test_canon_instancenorm),
        cmocka_unit_test(test_canon_batchnorm),
        cmocka_unit_test(test_canon_special_axes),
        cmocka_unit_test(test_canon_row_rules),
        cmocka_unit_test(test_canon_zero_size),
        cmocka_unit_test(test_canon_key_garbage),
        cmocka_unit_test(test_canon_text),
        cmocka_unit_test(test_text_round_trip_all),
        cmocka_unit_test(test_text_operands_round_trip),
        cmocka_unit_test(test_canon_for_pass),
        cmocka_unit_test(test_text_exact_print),
        cmocka_unit_test(test_text_short_forms),
        cmocka_unit_test(test_text_malformed_fail),
        cmocka_unit_test(test_canon_properties_random),
        cmocka_unit_test(test_fuzz_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
