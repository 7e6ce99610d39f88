/* Backward pass: nj_plan_pass -> nj_codegen -> emulator backend, against the double-precision
 * reference (nj_ref_backward) for every preset and layout, f32/f16/bf16, with and without scale/bias and
 * with activations. dx/dgamma/dbeta are poisoned (all-ones bytes: NaN in every dtype) before each run so
 * an unwritten element fails, and every problem runs twice (shuffled thread order) and must give the
 * same bytes (determinism). Every variant is also compiled by NVRTC for sm_80 and sm_90 and must not
 * spill. Driven directly (not through nj_plan_get) so this suite needs only this module's planner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "codegen.h"
#include "compile.h"
#include "kernel_abi.h"
#include "planner.h"
#include "ref_harness.h"

typedef struct bwd_state {
    nj_backend *emu, *emu2; /* same emulator, another thread-order seed (second run of each problem) */
    nj_device_props dev;
    int nvrtc_ok; /* 1 when NVRTC loads; the spill test needs it */
    int max_regs[2];
    struct {
        char name[64];
        int regs[2];
    } kregs[16]; /* most registers per kernel name and arch (report) */
    int nkregs;
    int shift;  /* elements by which x, dy and dx are moved off their allocation's alignment */
    int spills; /* kernels with spill stores or loads (all are reported before the test fails) */
    void *libmod[NJ_LIB_COUNT][4], *libfn[NJ_LIB_COUNT][4]; /* library modules by kernel and gamma dtype */
} bwd_state;

static int group_setup(void **state)
{
    static bwd_state s;
    /* the emulator of sm_90 (227 KB of shared memory a block), as the plans below (s.dev) */
    nj_backend_config cfg = {0, 90, NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON, 11};
    nj_backend_config cfg2 = cfg;
    cfg2.seed = 12345;
    cfg2.flags |= NJ_CTX_EMU_SMALL_GRID; /* the second run: blocks numbered over 2-D grids, surplus ones skip */
    if (nj_backend_emu_create(&cfg, &s.emu) != NJ_OK || nj_backend_emu_create(&cfg2, &s.emu2) != NJ_OK) {
        fprintf(stderr, "backward: no emulator: %s\n", nj_last_error());
        return -1;
    }
    nj_device_props_default(90, &s.dev);
    const char *v = NULL;
    s.nvrtc_ok = nj_nvrtc_version_string(&v) == NJ_OK;
    *state = &s;
    return 0;
}

static int group_teardown(void **state)
{
    bwd_state *ls = *state;
    for (int l = 0; l < NJ_LIB_COUNT; l++)
        for (int d = 0; d < 4; d++)
            if (ls->libmod[l][d]) ls->emu->ops->unload(ls->emu, ls->libmod[l][d]);
    bwd_state *s = *state;
    s->emu->ops->destroy(s->emu);
    s->emu2->ops->destroy(s->emu2);
    return 0;
}

/* ---------------------------------------------------------------- one problem on the emulator */

typedef struct bwd_kernels {
    nj_canon c;
    nj_plan_params pp;
    char *src;
    void *mod, *fn[NJ_MAX_LAUNCHES];
} bwd_kernels;

/* The kernel of library module lib for gamma dtype dtype, compiled on the emulator on first use. */
static void *bwd_lib_fn(bwd_state *s, int32_t lib, int32_t dtype)
{
    if (s->libfn[lib][dtype]) return s->libfn[lib][dtype];
    nj_plan_params pp;
    char *src = NULL;
    assert_int_equal(nj_plan_library(lib, &pp), NJ_OK);
    if (nj_codegen_library(&pp, dtype, &src) != NJ_OK) fail_msg("library codegen: %s", nj_last_error());
    nj_compile_result r;
    memset(&r, 0, sizeof r);
    if (s->emu->ops->compile(s->emu, src, pp.template_name, 1, &r) != NJ_OK)
        fail_msg("library compile: %s\n%s", nj_last_error(), src);
    free(src);
    assert_int_equal(s->emu->ops->load(s->emu, r.bin.data, r.bin.size, &s->libmod[lib][dtype]), NJ_OK);
    nj_binary_free(&r.bin);
    assert_int_equal(s->emu->ops->function(s->emu, s->libmod[lib][dtype], pp.launch[0].kernel, &s->libfn[lib][dtype]),
                     NJ_OK);
    return s->libfn[lib][dtype];
}

static void bwd_build(bwd_state *s, const nj_problem_desc *p, bwd_kernels *k)
{
    memset(k, 0, sizeof *k);
    nj_status st = nj_canonicalize(p, &k->c);
    if (st != NJ_OK) fail_msg("canonicalize: %s", nj_last_error());
    /* shifted pointers get what nj_backward would pick for them: the unaligned variant */
    st = nj_plan_variant(&k->c, NJ_PASS_BACKWARD, s->shift ? NJ_VARIANT_UNALIGNED : NJ_VARIANT_MAIN, &s->dev, &k->pp);
    if (st != NJ_OK) fail_msg("plan: %s", nj_last_error());
    st = nj_codegen(&k->c, &k->pp, &k->src);
    if (st != NJ_OK) fail_msg("codegen: %s", nj_last_error());
    nj_compile_result r;
    memset(&r, 0, sizeof r);
    st = s->emu->ops->compile(s->emu, k->src, k->pp.template_name, nj_plan_kernel_count(&k->pp), &r);
    if (st != NJ_OK) fail_msg("emulator compile: %s\n%s", nj_last_error(), k->src);
    st = s->emu->ops->load(s->emu, r.bin.data, r.bin.size, &k->mod);
    nj_binary_free(&r.bin);
    assert_int_equal(st, NJ_OK);
    for (int i = 0; i < k->pp.nlaunch; i++) {
        if (k->pp.launch[i].lib != NJ_LIB_NONE)
            k->fn[i] = bwd_lib_fn(s, k->pp.launch[i].lib, k->c.dtype[NJ_OPD_PARAM]);
        else
            assert_int_equal(s->emu->ops->function(s->emu, k->mod, k->pp.launch[i].kernel, &k->fn[i]), NJ_OK);
    }
}

static void bwd_drop(bwd_state *s, bwd_kernels *k)
{
    s->emu->ops->unload(s->emu, k->mod);
    free(k->src);
}

/* Output buffers of one run, poisoned first. */
typedef struct bwd_out {
    void *dx_base, *dx, *dgamma, *dbeta;
    size_t dx_bytes, p_bytes;
} bwd_out;

static void bwd_out_alloc(bwd_out *o, const nj_tensor_desc *dxt, const nj_tensor_desc *pt, bool dg, bool db,
                          int shift)
{
    size_t sh = (size_t)shift * nj_dtype_size((nj_dtype)dxt->dtype);
    o->dx_bytes = nj_tu_bytes(dxt);
    o->p_bytes = nj_tu_bytes(pt);
    o->dx_base = malloc(o->dx_bytes + 1 + sh);
    o->dx = o->dx_base ? (char *)o->dx_base + sh : NULL;
    o->dgamma = dg ? malloc(o->p_bytes + 1) : NULL;
    o->dbeta = db ? malloc(o->p_bytes + 1) : NULL;
    assert_non_null(o->dx);
    memset(o->dx, 0xff, o->dx_bytes + 1);
    if (dg) memset(o->dgamma, 0xff, o->p_bytes + 1);
    if (db) memset(o->dbeta, 0xff, o->p_bytes + 1);
}

static void bwd_out_free(bwd_out *o)
{
    free(o->dx_base);
    free(o->dgamma);
    free(o->dbeta);
}

/* Launches every kernel of the plan on r's inputs. */
static void bwd_launch(bwd_state *s, bwd_kernels *k, const nj_refh *r, const float *mean, const float *rstd,
                       bwd_out *o, void *ws, nj_backend *b)
{
    nj_kargs a;
    memset(&a, 0, sizeof a);
    a.x = r->x;
    a.dy = r->dy;
    void *xs = NULL, *dys = NULL;
    if (s->shift) { /* copies of x and dy that start `shift` elements past an aligned address */
        size_t xb = nj_tu_bytes(&r->xt), db = nj_tu_bytes(&r->dyt);
        size_t xsh = (size_t)s->shift * nj_dtype_size((nj_dtype)r->xt.dtype);
        size_t dsh = (size_t)s->shift * nj_dtype_size((nj_dtype)r->dyt.dtype);
        xs = malloc(xb + xsh);
        dys = malloc(db + dsh);
        assert_true(xs && dys);
        memcpy((char *)xs + xsh, r->x, xb);
        memcpy((char *)dys + dsh, r->dy, db);
        a.x = (char *)xs + xsh;
        a.dy = (char *)dys + dsh;
    }
    a.gamma = (r->p.flags & NJ_FLAG_SCALE) ? r->gamma : NULL;
    a.beta = (r->p.flags & NJ_FLAG_BIAS) ? r->beta : NULL;
    a.mean = (r->p.flags & NJ_FLAG_CENTER) ? (float *)mean : NULL;
    a.rstd = (float *)rstd;
    a.dx = o->dx;
    a.dgamma = o->dgamma;
    a.dbeta = o->dbeta;
    a.workspace = ws;
    nj_canon_batch(&k->c, &a.rows, a.bstride);
    for (int i = 0; i < k->pp.nlaunch; i++) {
        uint32_t grid[3];
        assert_int_equal(nj_launch_grid(&k->pp.launch[i], a.rows, b->props.max_grid_x, grid), NJ_OK);
        nj_launch_lib_args(&k->pp.launch[i], a.rows, a.lib);
        nj_status st = b->ops->launch(b, k->fn[i], grid, k->pp.launch[i].block, k->pp.launch[i].shmem,
                                           NULL, NJ_LAUNCH_PLAIN, &a, sizeof a);
        if (st != NJ_OK) fail_msg("launch %s: %s", k->pp.launch[i].kernel, nj_last_error());
    }
    free(xs);
    free(dys);
}

static void bwd_tol(nj_dtype d, double *atol, double *rtol)
{
    nj_tu_default_tol(d, atol, rtol);
    /* dx subtracts two row means from g: a few float roundings of O(1) terms */
    if (*atol < 1e-4) *atol = 1e-4;
    if (*rtol < 1e-4) *rtol = 1e-4;
}

/* Checks one problem; dg/db say whether dgamma/dbeta pointers are passed (when the flags allow). */
static void check_problem_at(bwd_state *s, const char *label, nj_problem_desc p, uint64_t seed, bool dg, bool db,
                             double xoff)
{
    p.struct_size = sizeof p;
    nj_refh r;
    assert_int_equal(nj_refh_init(&r, &p), NJ_OK);
    nj_refh_fill(&r, seed, xoff - 2.0, xoff + 2.0, 0.0);
    if (nj_refh_backward(&r) != NJ_OK) fail_msg("%s: reference: %s", label, nj_last_error());
    float *mean = calloc((size_t)(r.k > 0 ? r.k : 1), sizeof(float));
    float *rstd = calloc((size_t)(r.k > 0 ? r.k : 1), sizeof(float));
    assert_true(mean && rstd);
    for (int64_t i = 0; i < r.k; i++) mean[i] = (float)r.mean[i], rstd[i] = (float)r.rstd[i];

    bwd_kernels k;
    bwd_build(s, &p, &k);
    dg = dg && (p.flags & NJ_FLAG_SCALE);
    db = db && (p.flags & NJ_FLAG_BIAS);
    nj_tensor_desc dxt = nj_tu_resolve(&p.dx, &p.x);
    bwd_out o[2];
    size_t wsb = (size_t)(k.pp.workspace_fixed + k.pp.workspace_per_row * (uint64_t)k.c.axes[0].extent);
    void *ws = wsb ? malloc(wsb) : NULL;
    for (int run = 0; run < 2; run++) {
        bwd_out_alloc(&o[run], &dxt, &r.pt, dg, db, s->shift);
        if (ws) memset(ws, 0xff, wsb);
        bwd_launch(s, &k, &r, mean, rstd, &o[run], ws, run ? s->emu2 : s->emu);
    }
    double atol, rtol;
    bwd_tol((nj_dtype)dxt.dtype, &atol, &rtol);
    int64_t bad = nj_tu_compare_strided("dx", o[0].dx, &dxt, r.dx, atol, rtol, 4).mismatches;
    bwd_tol((nj_dtype)r.pt.dtype, &atol, &rtol);
    if (dg) bad += nj_tu_compare_strided("dgamma", o[0].dgamma, &r.pt, r.dgamma, atol, rtol, 4).mismatches;
    if (db) bad += nj_tu_compare_strided("dbeta", o[0].dbeta, &r.pt, r.dbeta, atol, rtol, 4).mismatches;
    if (bad) {
        char *plan = nj_plan_text(&k.pp);
        fprintf(stderr, "FAIL %s: %lld mismatches; plan %s\n", label, (long long)bad, plan);
        free(plan);
    }
    assert_int_equal(bad, 0);
    /* determinism: the second run (another thread order, another grid layout) gives the same bytes, guard
     * byte included */
    assert_memory_equal(o[0].dx, o[1].dx, o[0].dx_bytes + 1);
    if (dg) assert_memory_equal(o[0].dgamma, o[1].dgamma, o[0].p_bytes + 1);
    if (db) assert_memory_equal(o[0].dbeta, o[1].dbeta, o[0].p_bytes + 1);
    for (int run = 0; run < 2; run++) bwd_out_free(&o[run]);
    free(ws);
    bwd_drop(s, &k);
    free(mean);
    free(rstd);
    nj_refh_free(&r);
}

static void check_problem(bwd_state *s, const char *label, nj_problem_desc p, uint64_t seed, bool dg, bool db)
{
    check_problem_at(s, label, p, seed, dg, db, 0.0);
}

/* ---------------------------------------------------------------- problems */

static const nj_dtype dts[] = {NJ_F32, NJ_F16, NJ_BF16};
/* flag/activation variants rotated over the problems: none, scale, scale+bias, with activations */
typedef struct variant {
    uint32_t flags;
    int act;
} variant;
static const variant variants[] = {
    {0, NJ_ACT_NONE},
    {NJ_FLAG_SCALE, NJ_ACT_NONE},
    {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_NONE},
    {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_SILU},
    {NJ_FLAG_BIAS, NJ_ACT_GELU_TANH},
    {NJ_FLAG_SCALE, NJ_ACT_RELU},
    {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_GELU_ERF},
    {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_SIGMOID},
};
#define NVARIANT (sizeof variants / sizeof variants[0])

typedef nj_status (*make_fn)(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                             int32_t arg);

static nj_status mk_layernorm(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                              int32_t last_k)
{
    return nj_preset_layernorm(p, dt, rank, ext, last_k, flags);
}
static nj_status mk_rmsnorm(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                            int32_t last_k)
{
    return nj_preset_rmsnorm(p, dt, rank, ext, last_k, flags);
}
/* LayerNorm over C of NCHW (the channel axis of a contiguous tensor): a COLUMN problem */
static nj_status mk_ln_channel(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                               int32_t axis)
{
    nj_tensor_desc x;
    nj_tensor_contiguous(&x, dt, rank, ext);
    return nj_preset_layernorm_axes(p, &x, &axis, 1, flags);
}
static nj_status mk_groupnorm(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                              int32_t groups_cl)
{
    return nj_preset_groupnorm(p, dt, rank, ext, groups_cl / 2, groups_cl % 2, flags);
}
static nj_status mk_instancenorm(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                                 int32_t cl)
{
    return nj_preset_instancenorm(p, dt, rank, ext, cl, flags);
}
static nj_status mk_batchnorm(nj_problem_desc *p, nj_dtype dt, uint32_t flags, const int64_t *ext, int rank,
                              int32_t cl)
{
    return nj_preset_batchnorm(p, dt, rank, ext, cl, flags);
}

/* Runs a shape in every dtype, rotating flags/activation and the param dtype (f32 or x's). */
static void run_shape(bwd_state *s, const char *name, make_fn mk, const int64_t *ext, int rank, int32_t arg,
                      size_t vstart)
{
    for (size_t d = 0; d < 3; d++) {
        for (size_t j = 0; j < 2; j++) {
            const variant *v = &variants[(vstart + d * 2 + j) % NVARIANT];
            nj_problem_desc p;
            assert_int_equal(mk(&p, dts[d], v->flags, ext, rank, arg), NJ_OK);
            p.activation = v->act;
            if ((d + j) % 2 && (p.flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS))) p.param_dtype = dts[d];
            char label[160];
            snprintf(label, sizeof label, "%s %s flags=0x%x act=%d param=%d", name, nj_dtype_name(dts[d]), p.flags,
                     p.activation, p.param_dtype);
            check_problem(s, label, p, 1 + vstart * 7 + d * 2 + j, true, true);
        }
    }
}

static void test_layernorm_row(void **state)
{
    static const int64_t a[] = {5, 37}, b[] = {3, 1000}, c[] = {2, 3, 4, 6};
    run_shape(*state, "layernorm 5x37", mk_layernorm, a, 2, 1, 0);
    run_shape(*state, "layernorm 3x1000", mk_layernorm, b, 2, 1, 3);
    run_shape(*state, "layernorm 2x3x4x6 last=2", mk_layernorm, c, 4, 2, 5);
}

static void test_rmsnorm(void **state)
{
    static const int64_t a[] = {4, 96}, b[] = {3, 7};
    run_shape(*state, "rmsnorm 4x96", mk_rmsnorm, a, 2, 1, 1);
    run_shape(*state, "rmsnorm 3x7", mk_rmsnorm, b, 2, 1, 4);
}

static void test_layernorm_channel(void **state)
{
    static const int64_t a[] = {2, 24, 3, 5}, b[] = {2, 8, 5, 7};
    run_shape(*state, "layernorm nchw axes=1", mk_ln_channel, a, 4, 1, 2);
    run_shape(*state, "layernorm nchw axes=1 HW=35", mk_ln_channel, b, 4, 1, 5); /* column tiles */
}

static void test_groupnorm(void **state)
{
    static const int64_t a[] = {2, 12, 5, 5}, b[] = {1, 8, 3, 3};
    run_shape(*state, "groupnorm nchw g=4", mk_groupnorm, a, 4, 4 * 2 + 0, 0);
    run_shape(*state, "groupnorm nhwc g=3", mk_groupnorm, a, 4, 3 * 2 + 1, 3);
    run_shape(*state, "groupnorm nhwc g=2", mk_groupnorm, b, 4, 2 * 2 + 1, 6);
    /* 12 tiles an image, 3 images: the library column sum's 32 warps step 32 of the 36 (image, tile)
     * parts, carrying the tile index over into the image's (the tiles' launches: on sm_90 x and dy of
     * these images fit a cluster of 8 SMs, one launch, test_matrix's test_cluster) */
    setenv("NORMJIT_PLAN_NO_CLUSTER", "1", 1);
    bwd_state *s = *state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("groupnorm f32 nhwc 3x32x80x72 groups=8 flags=scale,bias", 4, &p), NJ_OK);
    nj_canon c;
    nj_plan_params pp;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.split, 12);
    check_problem(s, "groupnorm nhwc, 12 tiles an image", p, 76, true, true);
    unsetenv("NORMJIT_PLAN_NO_CLUSTER");
}

static void test_instancenorm(void **state)
{
    static const int64_t a[] = {2, 6, 9, 7}, b[] = {2, 9, 7, 6};
    run_shape(*state, "instancenorm nchw", mk_instancenorm, a, 4, 0, 1);
    run_shape(*state, "instancenorm nhwc", mk_instancenorm, b, 4, 1, 5);
    /* channels last with 16 channels or more: the column family, dgamma/dbeta summed in its walk (a tile
     * of 32 columns and a short one; one partial row per image, added per channel in order) */
    bwd_state *s = *state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("instancenorm f32 nhwc 3x5x7x40 flags=scale,bias act=silu", 3, &p), NJ_OK);
    check_problem(s, "instancenorm nhwc, 40 channels", p, 71, true, true);
    assert_int_equal(nj_problem_from_text("instancenorm bf16 ndhwc 2x3x4x5x33 flags=scale,bias", 2, &p), NJ_OK);
    check_problem(s, "instancenorm ndhwc, 33 channels", p, 72, true, true);
    assert_int_equal(nj_problem_from_text("instancenorm f16 nhwc 2x5x7x40 flags=scale", 2, &p), NJ_OK);
    check_problem(s, "instancenorm nhwc, 40 channels, scale only", p, 73, true, false);
    /* walks of 4608, 9216 and 9000 rows: split into pieces (sums, means, dx); dgamma/dbeta fused with a
     * partial row per (image, piece), or walked by nj_bwd_pgrad when gamma spans the walk */
    assert_int_equal(nj_problem_from_text("instancenorm f32 ndhwc 2x16x16x18x40 flags=scale,bias act=silu", 2, &p),
                     NJ_OK);
    check_problem(s, "instancenorm ndhwc, split walks", p, 74, true, true);
    assert_int_equal(nj_problem_from_text("batchnorm bf16 nhwc 8x48x24x24 flags=scale", 8, &p), NJ_OK);
    check_problem(s, "batchnorm nhwc, split walks, scale only", p, 75, true, false);
    assert_int_equal(nj_problem_from_text("layernorm f16 2x9000x48 axes=1 flags=scale,bias act=relu", 2, &p), NJ_OK);
    check_problem(s, "layernorm over axis 1, split walks", p, 76, true, true);
}

static void test_batchnorm(void **state)
{
    static const int64_t a[] = {3, 5, 4, 4}, b[] = {2, 3, 17};
    run_shape(*state, "batchnorm nchw", mk_batchnorm, a, 4, 0, 2);
    run_shape(*state, "batchnorm nhwc", mk_batchnorm, a, 4, 1, 7);
    run_shape(*state, "batchnorm ncl", mk_batchnorm, b, 3, 0, 4);
}

/* Channels-last problems with 16+ channels: column-tiled dgamma/dbeta, split with partials. */
static void test_channels_last_wide(void **state)
{
    static const int64_t in[] = {2, 5, 3, 32}, bn[] = {3, 40, 4, 4}, gn[] = {2, 64, 3, 3}, ln[] = {2, 20000};
    run_shape(*state, "instancenorm nhwc C=32", mk_instancenorm, in, 4, 1, 2);
    run_shape(*state, "batchnorm nhwc C=40", mk_batchnorm, bn, 4, 1, 1);
    run_shape(*state, "groupnorm nhwc C=64 g=2", mk_groupnorm, gn, 4, 2 * 2 + 1, 2);
    run_shape(*state, "groupnorm nhwc C=64 g=4", mk_groupnorm, gn, 4, 4 * 2 + 1, 5);
    run_shape(*state, "layernorm 2x20000", mk_layernorm, ln, 2, 1, 2);
}

/* dgamma alone, dbeta alone (the other pointer NULL: skipped), and a zero batch: dx untouched, params 0. */
static void test_partial_outputs_and_empty(void **state)
{
    bwd_state *s = *state;
    static const int64_t a[] = {6, 40}, z[] = {0, 64};
    nj_problem_desc p;
    uint32_t sb = NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, a, 1, sb), NJ_OK);
    check_problem(s, "layernorm dgamma only", p, 41, true, false);
    check_problem(s, "layernorm dbeta only", p, 42, false, true);
    check_problem(s, "layernorm neither", p, 43, false, false);
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 2, z, 1, sb), NJ_OK);
    check_problem(s, "layernorm zero batch", p, 44, true, true);
    static const int64_t g[] = {0, 8, 3, 3};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_BF16, 4, g, 2, 1, sb), NJ_OK);
    check_problem(s, "groupnorm zero batch", p, 45, true, true);
}

/* A large mean offset: xhat must come from (x - mean) * rstd, not cancel. */
static void test_offset(void **state)
{
    bwd_state *s = *state;
    static const int64_t a[] = {4, 300};
    nj_problem_desc p;
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, a, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    check_problem_at(s, "layernorm 4x300 offset 1e3", p, 51, true, true, 1e3);
    static const int64_t b[] = {2, 4, 6, 6};
    assert_int_equal(nj_preset_instancenorm(&p, NJ_F32, 4, b, 0, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    check_problem_at(s, "instancenorm nchw offset 1e3", p, 52, true, true, 1e3);
}

/* Row family: more rows than partial slots (few SMs), so each warp/block carries its column sums across
 * several rows; and x, dy, dx off their vector alignment, run by the unaligned variant. */
static void test_row_grid_stride_and_misaligned(void **state)
{
    bwd_state *s = *state;
    static const int64_t warp[] = {300, 40}, block[] = {50, 600}, big[] = {6, 12288};
    uint32_t sb = NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    nj_problem_desc p;
    int32_t sms = s->dev.sm_count;
    s->dev.sm_count = 1;
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 2, warp, 1, sb), NJ_OK);
    check_problem(s, "layernorm 300x40, 1 SM", p, 61, true, true);
    assert_int_equal(nj_preset_rmsnorm(&p, NJ_BF16, 2, block, 1, NJ_FLAG_SCALE), NJ_OK);
    p.activation = NJ_ACT_SILU;
    check_problem(s, "rmsnorm 50x600 silu, 1 SM", p, 62, true, true);
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, big, 1, sb), NJ_OK);
    check_problem(s, "layernorm 6x12288, 1 SM", p, 63, true, true);
    /* row groups (4 rows of 2048 a 1024-thread block): one block walks 37 rows, its last round one row
     * and three groups past the end */
    static const int64_t grp[] = {37, 2048};
    assert_int_equal(nj_preset_layernorm(&p, NJ_BF16, 2, grp, 1, sb), NJ_OK);
    check_problem(s, "layernorm bf16 37x2048 row groups, 1 SM", p, 70, true, true);
    /* slot pairs (sm_90, planner_row.c: plan_bwd_slot_pairs): 2 SMs, one cluster whose blocks walk 37
       rows of 5120 each (a block a row: the second hands its registers' sums over shared memory) */
    s->dev.sm_count = 2;
    static const int64_t pair_rows[] = {37, 5120};
    assert_int_equal(nj_preset_layernorm(&p, NJ_BF16, 2, pair_rows, 1, sb), NJ_OK);
    check_problem(s, "layernorm bf16 37x5120 slot pair, 2 SMs", p, 92, true, true);
    s->dev.sm_count = sms;
    s->shift = 1;
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 2, block, 1, sb), NJ_OK);
    check_problem(s, "layernorm 50x600 misaligned", p, 64, true, true);
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, warp, 1, sb), NJ_OK);
    check_problem(s, "layernorm 300x40 misaligned", p, 65, true, true);
    /* the row groups' unaligned variant: a chunk of one element, 8 chunks a thread */
    static const int64_t grp_u[] = {70, 2048};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 2, grp_u, 1, sb), NJ_OK);
    check_problem(s, "layernorm f16 70x2048 row groups misaligned", p, 72, true, true);
    /* slot pairs of a block a row, unaligned: 40 chunks of one element a thread of 640 (66 pairs, 30
       rows: most blocks none) */
    static const int64_t pair_u[] = {30, 5120};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F16, 2, pair_u, 1, sb), NJ_OK);
    p.activation = NJ_ACT_SILU;
    check_problem(s, "layernorm f16 30x5120 slot pairs misaligned", p, 93, true, true);
    /* channels-last GroupNorm tiles: 4 f16 channels a load, a channel at a time when shifted */
    static const int64_t img[] = {2, 64, 12, 12};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, img, 8, 1, sb), NJ_OK);
    p.activation = NJ_ACT_SILU;
    check_problem(s, "groupnorm nhwc 2x64x12x12 silu misaligned", p, 66, true, true);
    /* thread-block clusters (sm_90): a row's piece of 16-bit x staged an element at a time; a
     * channels-last image's tiles read again, not staged */
    static const int64_t vol[] = {1, 2, 64, 64, 64}, cl_img[] = {2, 640, 16, 16};
    assert_int_equal(nj_preset_instancenorm(&p, NJ_F16, 5, vol, 0, sb), NJ_OK);
    check_problem(s, "instancenorm f16 ncdhw 1x2x64x64x64 cluster misaligned", p, 88, true, true);
    assert_int_equal(nj_preset_groupnorm(&p, NJ_BF16, 4, cl_img, 32, 1, sb), NJ_OK);
    p.activation = NJ_ACT_SILU;
    check_problem(s, "groupnorm nhwc bf16 2x640x16x16 cluster misaligned", p, 89, true, true);
    /* a backward row of one block (x and dy of 64 KB): bf16 x staged an element at a time when shifted */
    static const int64_t in_img[] = {1, 3, 128, 128};
    assert_int_equal(nj_preset_instancenorm(&p, NJ_BF16, 4, in_img, 0, sb), NJ_OK);
    check_problem(s, "instancenorm bf16 nchw 1x3x128x128 block misaligned", p, 90, true, true);
    /* the slots' rows (gamma along the row): bf16 x, dy and gamma an element at a time when shifted */
    static const int64_t slot_rows[] = {3, 40000};
    assert_int_equal(nj_preset_layernorm(&p, NJ_BF16, 2, slot_rows, 1, sb), NJ_OK);
    check_problem(s, "layernorm bf16 3x40000 slots misaligned", p, 91, true, true);
    /* column tiles (BatchNorm NHWC): 4 f16 columns a lane (one walk), 2 a lane (split walks), a column
     * at a time when shifted */
    static const int64_t bn[] = {2, 128, 8, 8}, bns[] = {4, 64, 40, 40};
    assert_int_equal(nj_preset_batchnorm(&p, NJ_F16, 4, bn, 1, sb), NJ_OK);
    check_problem(s, "batchnorm nhwc 2x128x8x8 misaligned", p, 68, true, true);
    assert_int_equal(nj_preset_batchnorm(&p, NJ_F16, 4, bns, 1, sb), NJ_OK);
    p.activation = NJ_ACT_RELU;
    check_problem(s, "batchnorm nhwc 4x64x40x40 relu misaligned", p, 69, true, true);
    s->shift = 0;
    check_problem(s, "groupnorm nhwc 2x64x12x12 silu", p, 67, true, true);
}

/* The plan itself: launches, fixed param-gradient grid, names the template renders. */
static void test_plan_shape(void **state)
{
    bwd_state *s = *state;
    static const int64_t a[] = {8, 512};
    nj_problem_desc p;
    nj_canon c;
    nj_plan_params pp;
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, a, 1, NJ_FLAG_SCALE), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.pass, NJ_PASS_BACKWARD);
    assert_true(pp.nlaunch >= 2);
    for (int i = 0; i < pp.nlaunch; i++) assert_int_equal(pp.launch[i].block[0] % 32, 0);
    /* the launch writing dgamma has a grid that does not depend on the batch */
    const nj_launch *last = &pp.launch[pp.nlaunch - 1];
    uint32_t g1[3], g2[3];
    assert_int_equal(nj_launch_grid(last, 1, 0, g1), NJ_OK);
    assert_int_equal(nj_launch_grid(last, 1 << 20, 0, g2), NJ_OK);
    assert_int_equal(g1[0], g2[0]);
    /* without scale/bias there is nothing to reduce over the batch */
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, a, 1, 0), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    for (int i = 0; i < pp.nlaunch; i++) assert_null(strstr(pp.launch[i].kernel, "pgrad"));
    /* a block of up to 1024 threads when each then owns one vector chunk (16-bit rows of 8192), else at
     * most 512 (f32 rows of 8192: four chunks a thread) */
    static const int64_t wide[] = {4, 8192};
    assert_int_equal(nj_preset_layernorm(&p, NJ_BF16, 2, wide, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, wide, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 512);
    /* channels-last InstanceNorm: dgamma/dbeta in the column walk, a partial row (2 x C floats) an image */
    assert_int_equal(nj_problem_from_text("instancenorm f32 nhwc *x5x7x40 flags=scale,bias", 1, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    assert_int_equal(pp.nlaunch, 2);
    /* the library's column sum over one partial row an image: rows parts, dbeta's after dgamma's */
    assert_string_equal(pp.launch[1].kernel, "nj_lib_colsum");
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    /* parts growing with the batch over 40 columns: 8 columns a block (nj_colsum_cw), 5 blocks */
    assert_int_equal(pp.launch[1].arg[NJ_COLSUM_CW][0], 8);
    assert_int_equal(pp.launch[1].grid_x, 5);
    int64_t la[NJ_LIB_NARGS];
    nj_launch_lib_args(&pp.launch[1], 6, la);
    assert_int_equal(la[NJ_COLSUM_NCOLS], 40);
    assert_int_equal(la[NJ_COLSUM_NPARTS], 6);
    assert_int_equal(la[NJ_COLSUM_BASE_B], 6 * 40);
    assert_int_equal(la[NJ_COLSUM_S_OUTER], 40);
    assert_int_equal(la[NJ_COLSUM_INNER], 1);
    assert_int_equal(pp.workspace_per_row, 40 * 2 * sizeof(float));
    assert_int_equal(pp.workspace_fixed, 0);
    /* rows past the register column sums (16384): row dx, column-tiled dgamma/dbeta (sm_80: on sm_90 a
     * block's shared memory holds the row and its dgamma/dbeta partials, the cluster family's slots) */
    static const int64_t mid[] = {2, 20480};
    assert_int_equal(nj_preset_layernorm(&p, NJ_BF16, 2, mid, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_device_props dev80;
    nj_device_props_default(80, &dev80);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev80, &pp), NJ_OK);
    assert_string_equal(pp.template_name, "bwd_row.cu");
    assert_int_equal(pp.vec, 8);
    assert_string_equal(pp.launch[0].kernel, "nj_bwd_row");
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_pgrad_col");
    /* the row launch stops at its sums: the tiles' walk writes dx from the row's two means (a pair a row,
     * NJ_PGRAD_TILES_DX), beside the float a row of the saved mean's correction (bwd_reserve_dl) */
    assert_int_equal(pp.pgrad, NJ_PGRAD_TILES_DX);
    assert_int_equal(pp.ws[NJ_WS_SETS].per_row, 0);
    assert_int_equal(pp.ws[NJ_WS_DL].per_row, 2);
    assert_int_equal(pp.workspace_per_row, 3 * sizeof(float));
    /* NORMJIT_PLAN_NO_PGRAD_DX=1: the row launch writes dx, the tiles' walk dgamma/dbeta only */
    setenv("NORMJIT_PLAN_NO_PGRAD_DX", "1", 1);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev80, &pp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_PGRAD_DX");
    assert_int_equal(pp.pgrad, NJ_PGRAD_TILES);
    assert_int_equal(pp.workspace_per_row, sizeof(float));
    /* long rows: the dx walk is split over blocks (pieces of 2^15), the pieces' sums in the workspace
     * after the dgamma/dbeta launches' fixed region; dgamma's grid still ignores the batch */
    static const int64_t lng[] = {2, 1 << 20};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, lng, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.split, 32);
    assert_string_equal(pp.launch[0].kernel, "nj_bwd_dx_part");
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_dx");
    assert_int_equal(pp.launch[0].row_mult, 32);
    assert_non_null(strstr(pp.launch[2].kernel, "pgrad"));
    /* three floats a piece (the third: the saved mean's correction), the row's two means for the tiles'
     * dx (NJ_PGRAD_TILES_DX: the pieces' dx launch only merges), and the float a row that hands the
     * correction to the dgamma walk */
    assert_int_equal(pp.pgrad, NJ_PGRAD_TILES_DX);
    assert_int_equal(pp.ws[NJ_WS_SETS].per_row, 32 * 3);
    assert_int_equal(pp.workspace_per_row, (32 * 3 + 2 + 1) * sizeof(float));
    assert_int_equal(nj_launch_grid(&pp.launch[pp.nlaunch - 1], 1, 0, g1), NJ_OK);
    assert_int_equal(nj_launch_grid(&pp.launch[pp.nlaunch - 1], 1 << 20, 0, g2), NJ_OK);
    assert_int_equal(g1[0], g2[0]);
    /* BatchNorm NCHW: gamma is constant over each channel's set, so the split dx walk's own sums are
     * dgamma/dbeta (a pair a channel after the pieces' sums), added by a column sum with a fixed grid:
     * no walk over x and dy of their own */
    static const int64_t bn[] = {256, 64, 56, 56};
    assert_int_equal(nj_preset_batchnorm(&p, NJ_F32, 4, bn, 0, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_equal(pp.nlaunch, 3);
    assert_int_equal(pp.pgrad, NJ_PGRAD_SETS);
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_dx");
    assert_int_equal(pp.launch[2].lib, NJ_LIB_COLSUM);
    assert_true(pp.split >= 2);
    assert_int_equal(pp.workspace_fixed, 0);
    /* pipelined (x, dy and dx of a channel: 9.6 MB): the zero launch first, then the pieces' sums, a
     * channel's merged three and its counter before the pairs */
    assert_true(pp.lag > 0);
    assert_string_equal(pp.launch[0].kernel, "nj_bwd_dx_zero");
    assert_int_equal(pp.workspace_per_row, 64 * ((uint64_t)pp.split * 3 + 3 + 1 + 2) * sizeof(float));
    assert_int_equal(pp.ws[NJ_WS_SETS].per_row, 64 * (pp.split * 3 + 3 + 1));
    assert_int_equal(pp.ws[NJ_WS_FLAGS].per_row, 64 * (pp.split * 3 + 3));
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1); /* the part and dx launches */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_int_equal(pp.lag, 0);
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_dx");
    assert_int_equal(pp.workspace_per_row, 64 * ((uint64_t)pp.split * 3 + 2) * sizeof(float));
    assert_int_equal(pp.ws[NJ_WS_SETS].per_row, 64 * pp.split * 3);
    assert_int_equal(nj_launch_grid(&pp.launch[2], 1, 0, g1), NJ_OK);
    assert_int_equal(nj_launch_grid(&pp.launch[2], 1 << 20, 0, g2), NJ_OK);
    assert_int_equal(g1[0], g2[0]);
    /* LayerNorm over the C of NCHW: gamma's index is the column walk's row, so the dx walk sums each
     * row's pair over its tile (a pair a row and tile) and a column sum adds the tiles: two launches
     * (images of channel rows up to 1 KB are the image family's, whole or in parts: test_planner) */
    static const int64_t cimg[] = {4, 192, 28, 28};
    assert_int_equal(mk_ln_channel(&p, NJ_F16, NJ_FLAG_SCALE | NJ_FLAG_BIAS, cimg, 4, 1), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_string_equal(pp.template_name, "bwd_column.cu");
    assert_int_equal(pp.pgrad, NJ_PGRAD_ROWS);
    assert_int_equal(pp.nlaunch, 2);
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    uint64_t ctiles = (uint64_t)(784 + pp.tile - 1) / (uint64_t)pp.tile;
    assert_int_equal(pp.workspace_per_row, ctiles * 192 * 2 * sizeof(float));
    /* a gamma that varies within the set (LayerNorm's) never takes the set sums */
    static const int64_t lc[] = {2, 64, 128, 128};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 4, lc, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_OK);
    assert_int_not_equal(pp.pgrad, NJ_PGRAD_SETS);
    /* channels-last InstanceNorm of 4608-pixel images: 36 pieces of 128 pixels a tile of 32 channels
     * (two tiles), dgamma/dbeta from a partial row per (image, piece) */
    assert_int_equal(nj_problem_from_text("instancenorm f32 ndhwc 2x16x16x18x40 flags=scale,bias", 2, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_device_props d132;
    nj_device_props_default(90, &d132);
    d132.sm_count = 132;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &d132, &pp), NJ_OK);
    assert_int_equal(pp.split, 36);
    assert_int_equal(pp.nlaunch, 4);
    static const char *const names[] = {"nj_bwd_column_part", "nj_lib_merge", "nj_bwd_column",
                                        "nj_lib_colsum"};
    static const int64_t mult[] = {72, 2 * 64, 72, 1}; /* 64 merge items a tile: the correction's sums too */
    for (int i = 0; i < 4; i++) {
        assert_string_equal(pp.launch[i].kernel, names[i]);
        assert_int_equal(pp.launch[i].row_mult, mult[i]);
    }
    assert_int_equal(pp.launch[3].grid_x, 5); /* 40 columns, 8 a block: the parts grow with the batch */
    assert_int_equal(pp.workspace_fixed, 0);
    assert_int_equal(pp.workspace_per_row, 2 * 37 * 128 * 4 + 40 * 36 * 2 * 4);
    assert_int_equal(nj_plan_pass(NULL, NJ_PASS_BACKWARD, &s->dev, &pp), NJ_ERR_NULL_POINTER);
}

/* ---------------------------------------------------------------- NVRTC: every variant, no spills */

static const int32_t arches[2] = {80, 90};

/* Compiles src (pp's kernels) for arches[ai]; asserts 0 spill stores/loads and records registers. */
static void nvrtc_check_source(bwd_state *s, const char *label, int ai, const nj_plan_params *pp, char *src)
{
    nj_compile_result r;
    memset(&r, 0, sizeof r);
    nj_status st = nj_nvrtc_compile(src, pp->template_name, arches[ai], nj_plan_kernel_count(pp), &r);
    if (st != NJ_OK) fail_msg("%s sm_%d: %s\n%s", label, arches[ai], nj_last_error(), src);
    assert_int_equal(r.bin.is_ptx, 0);
    assert_int_equal(r.nkernels, nj_plan_kernel_count(pp));
    for (int i = 0; i < r.nkernels; i++) {
        const nj_kernel_resources *k = &r.kernels[i];
        if (k->spill_stores || k->spill_loads || k->stack_bytes)
            fprintf(stderr, "SPILL %s sm_%d %s: %d regs, %d/%d spill bytes, %d stack\n", label, arches[ai],
                    k->kernel, k->registers, k->spill_stores, k->spill_loads, k->stack_bytes);
        s->spills += (k->spill_stores || k->spill_loads);
        if ((k->spill_stores || k->spill_loads) && getenv("NJ_BWD_DUMP")) {
            char path[256];
            snprintf(path, sizeof path, "%s/spill_%d_%s.cu", getenv("NJ_BWD_DUMP"), s->spills, k->kernel);
            FILE *fp = fopen(path, "w");
            if (fp) fputs(src, fp), fclose(fp);
        }
        if (k->registers > s->max_regs[ai]) s->max_regs[ai] = k->registers;
        int j = 0;
        while (j < s->nkregs && strcmp(s->kregs[j].name, k->kernel) != 0) j++;
        if (j == s->nkregs && j < 16) snprintf(s->kregs[s->nkregs++].name, sizeof s->kregs[0].name, "%s", k->kernel);
        if (j < 16 && k->registers > s->kregs[j].regs[ai]) s->kregs[j].regs[ai] = k->registers;
        if (getenv("NJ_BWD_VERBOSE"))
            fprintf(stderr, "%s sm_%d %s: %d regs, %d B shared\n", label, arches[ai], k->kernel, k->registers,
                    k->shared_bytes);
    }
    nj_binary_free(&r.bin);
    free(src);
}

/* Renders p's backward source and checks it for sm_80 and sm_90. */
static void nvrtc_check(bwd_state *s, const char *label, const nj_problem_desc *p)
{
    for (int ai = 0; ai < 2; ai++) {
        nj_device_props dev;
        nj_device_props_default(arches[ai], &dev);
        nj_canon c;
        nj_plan_params pp;
        char *src = NULL;
        assert_int_equal(nj_canonicalize(p, &c), NJ_OK);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev, &pp), NJ_OK);
        if (nj_codegen(&c, &pp, &src) != NJ_OK) fail_msg("%s: codegen: %s", label, nj_last_error());
        nvrtc_check_source(s, label, ai, &pp, src);
    }
}

/* The library modules the backward plans launch, for every gamma dtype. */
static void nvrtc_check_libs(bwd_state *s)
{
    for (int32_t lib = NJ_LIB_NONE + 1; lib < NJ_LIB_COUNT; lib++) {
        for (size_t d = 0; d < 3; d++) {
            for (int ai = 0; ai < 2; ai++) {
                nj_plan_params pp;
                char *src = NULL, label[64];
                assert_int_equal(nj_plan_library(lib, &pp), NJ_OK);
                assert_int_equal(nj_codegen_library(&pp, dts[d], &src), NJ_OK);
                snprintf(label, sizeof label, "library %s %s", nj_lib_name(lib), nj_dtype_name(dts[d]));
                nvrtc_check_source(s, label, ai, &pp, src);
            }
        }
    }
}

static void test_nvrtc_no_spills(void **state)
{
    bwd_state *s = *state;
    if (!s->nvrtc_ok) {
        fprintf(stderr, "backward: NVRTC not available, spill check not run\n");
        skip();
    }
    static const int64_t ln[] = {64, 768}, ln_big[] = {8, 16384}, huge[] = {2, 1 << 20}, ln_odd[] = {8, 37}, img[] = {4, 32, 14, 14};
    static const int64_t ln_long[] = {4, 20480}; /* row dx, column-tiled dgamma/dbeta */
    static const int64_t ln_wide[] = {16, 8192}; /* 16-bit: 1024 threads of one vector chunk each */
    static const int64_t ln_mid[] = {16, 5120};  /* 16-bit: 640 threads, the next row fetched (persist) */
    static const int64_t grp2[] = {16, 2048}, grp4[] = {16, 4096}; /* 16-bit, no bias: row groups (64 registers) */
    static const int64_t ncl[] = {4, 16, 100};
    static const int64_t img_long[] = {2, 48, 64, 80}; /* channels last, 5120 pixels an image: split walks */
    static const int64_t staged[] = {2, 96, 7, 5};      /* LayerNorm over C: x and dy staged in shared memory */
    static const int64_t gn_split[] = {2, 8, 256, 256}; /* GroupNorm NCHW, split sets: dgamma from the pieces */
    static const int64_t gn_cluster[] = {2, 320, 32, 32}; /* channels last, 16-bit: a cluster an image (sm_90) */
    static const int64_t in_cluster[] = {2, 2, 64, 64, 64}; /* InstanceNorm over 64^3: a cluster a row (sm_90) */
    static const int64_t in_block[] = {2, 4, 128, 128}; /* InstanceNorm over 128 x 128: x staged, a block a row */
    static const int64_t ln_slots[] = {4, 40000}; /* gamma along the row: slots of clusters of 2 (sm_90) */
    /* 16-bit slots: 8 row groups of 128 (1024 threads), 3 of 320 (960: without an activation), two
       chunks of 4 a thread fetching (544 threads), 896 threads fetching */
    static const int64_t ln_g128[] = {16, 1024}, ln_g320[] = {16, 2560}, ln_two[] = {16, 4100}, ln_f896[] = {16, 7168};
    static const variant vs[] = {{0, NJ_ACT_NONE},
                                 {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_NONE},
                                 {NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_GELU_ERF},
                                 {NJ_FLAG_SCALE, NJ_ACT_SILU}};
    for (size_t d = 0; d < 3; d++) {
        for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
            uint32_t f = vs[v].flags;
            nj_problem_desc ps[30];
            int n = 0;
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln, 1, f), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_big, 1, f), NJ_OK);
            assert_int_equal(nj_preset_rmsnorm(&ps[n++], dts[d], 2, ln_odd, 1, f), NJ_OK);
            assert_int_equal(mk_ln_channel(&ps[n++], dts[d], f, img, 4, 1), NJ_OK);
            assert_int_equal(nj_preset_groupnorm(&ps[n++], dts[d], 4, img, 8, 0, f), NJ_OK);
            assert_int_equal(nj_preset_groupnorm(&ps[n++], dts[d], 4, img, 8, 1, f), NJ_OK);
            assert_int_equal(nj_preset_instancenorm(&ps[n++], dts[d], 4, img, 0, f), NJ_OK);
            assert_int_equal(nj_preset_instancenorm(&ps[n++], dts[d], 4, img, 1, f), NJ_OK);
            assert_int_equal(nj_preset_batchnorm(&ps[n++], dts[d], 4, img, 0, f), NJ_OK);
            assert_int_equal(nj_preset_batchnorm(&ps[n++], dts[d], 3, ncl, 1, f), NJ_OK);
            assert_int_equal(nj_preset_rmsnorm(&ps[n++], dts[d], 2, huge, 1, f & ~(uint32_t)NJ_FLAG_BIAS), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_long, 1, f), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_wide, 1, f), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_mid, 1, f), NJ_OK);
            assert_int_equal(nj_preset_instancenorm(&ps[n++], dts[d], 4, img_long, 1, f), NJ_OK);
            assert_int_equal(nj_preset_batchnorm(&ps[n++], dts[d], 4, img_long, 1, f), NJ_OK);
            assert_int_equal(mk_ln_channel(&ps[n++], dts[d], f, staged, 4, 1), NJ_OK);
            assert_int_equal(nj_preset_groupnorm(&ps[n++], dts[d], 4, gn_split, 2, 0, f), NJ_OK);
            assert_int_equal(nj_preset_rmsnorm(&ps[n++], dts[d], 2, grp2, 1, f & ~(uint32_t)NJ_FLAG_BIAS), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, grp4, 1, f & ~(uint32_t)NJ_FLAG_BIAS), NJ_OK);
            assert_int_equal(nj_preset_groupnorm(&ps[n++], dts[d], 4, gn_cluster, 32, 1, f), NJ_OK);
            assert_int_equal(nj_preset_instancenorm(&ps[n++], dts[d], 5, in_cluster, 0, f), NJ_OK);
            assert_int_equal(nj_preset_instancenorm(&ps[n++], dts[d], 4, in_block, 0, f), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_slots, 1, f), NJ_OK);
            /* with a bias wherever gamma is there: SiLU's LayerNorm rows of 2560 spilled so at 960 threads */
            uint32_t fb = (f & NJ_FLAG_SCALE) ? f | NJ_FLAG_BIAS : f;
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_g128, 1, fb), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_g320, 1, fb), NJ_OK);
            assert_int_equal(nj_preset_layernorm(&ps[n++], dts[d], 2, ln_two, 1, fb), NJ_OK);
            assert_int_equal(nj_preset_rmsnorm(&ps[n++], dts[d], 2, ln_f896, 1, f & ~(uint32_t)NJ_FLAG_BIAS), NJ_OK);
            for (int i = 0; i < n; i++) {
                ps[i].activation = vs[v].act;
                if (d > 0 && v % 2) ps[i].param_dtype = dts[d];
                char label[96];
                snprintf(label, sizeof label, "%s case %d flags 0x%x act %d", nj_dtype_name(dts[d]), i, ps[i].flags,
                         ps[i].activation);
                nvrtc_check(s, label, &ps[i]);
            }
        }
    }
    nvrtc_check_libs(s);
    fprintf(stderr, "backward: most registers of any kernel: sm_80 %d, sm_90 %d\n", s->max_regs[0], s->max_regs[1]);
    for (int j = 0; j < s->nkregs; j++)
        fprintf(stderr, "backward:   %-22s sm_80 %3d  sm_90 %3d registers (most over the variants)\n", s->kregs[j].name,
                s->kregs[j].regs[0], s->kregs[j].regs[1]);
    assert_int_equal(s->spills, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_shape),        cmocka_unit_test(test_layernorm_row),
        cmocka_unit_test(test_rmsnorm),           cmocka_unit_test(test_layernorm_channel),
        cmocka_unit_test(test_groupnorm),         cmocka_unit_test(test_instancenorm),
        cmocka_unit_test(test_batchnorm),         cmocka_unit_test(test_partial_outputs_and_empty),
        cmocka_unit_test(test_offset),            cmocka_unit_test(test_nvrtc_no_spills),
        cmocka_unit_test(test_row_grid_stride_and_misaligned), cmocka_unit_test(test_channels_last_wide),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
