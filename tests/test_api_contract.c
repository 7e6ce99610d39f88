/* The public API's contract on bad input (normjit.h, nj_last_error): NULLs, unknown flags, out-of-range
 * options and counts, sizes whose plan arithmetic would overflow, a workspace smaller than the plan's, and
 * the layouts and helpers the header documents. One regression test per defect of issues 14, 19 and 21;
 * each asserts the named status and the detail naming the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nj_testutil.h"
#include "planner.h"
#include "problem.h"

static char g_dir[512];

static int group_setup(void **state)
{
    (void)state;
    return nj_tu_make_temp_dir("api", g_dir, sizeof g_dir) ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    return nj_tu_remove_tree(g_dir);
}

static void expect_impl(nj_status got, nj_status want, const char *needle, const char *call)
{
    if (got != want)
        fail_msg("%s: got %s (%s), want %s", call, nj_status_name(got), nj_last_error(), nj_status_name(want));
    if (needle && !strstr(nj_last_error(), needle))
        fail_msg("%s: detail '%s' lacks '%s'", call, nj_last_error(), needle);
}
#define expect_status(call, want, needle) expect_impl((call), (want), (needle), #call)

static nj_context *emu_context(void)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.cache_dir = g_dir;
    nj_context *ctx = NULL;
    nj_status s = nj_context_create(&o, &ctx);
    if (s != NJ_OK) fail_msg("context: %s %s", nj_status_name(s), nj_last_error());
    return ctx;
}

/* nj_cache_stats grew fields (store_failures, lock_fallbacks, disk_status): a caller's struct_size bounds
 * what is written, so an older, shorter struct is never written past; an unset size is refused. */
static void test_cache_stats_size(void **state)
{
    (void)state;
    nj_context *ctx = emu_context();
    unsigned char buf[sizeof(nj_cache_stats) + 16];
    memset(buf, 0xA5, sizeof buf);
    nj_cache_stats *st = (nj_cache_stats *)buf;
    st->struct_size = 0;
    expect_status(nj_context_cache_stats(ctx, st), NJ_ERR_BAD_STRUCT_SIZE, "struct_size");
    size_t v1 = offsetof(nj_cache_stats, disk_status) + sizeof(int32_t);
    st->struct_size = (uint32_t)v1;
    expect_status(nj_context_cache_stats(ctx, st), NJ_OK, NULL);
    assert_int_equal(st->struct_size, v1);
    assert_int_equal(st->disk_status, NJ_OK);
    for (size_t i = v1; i < sizeof buf; i++) assert_int_equal(buf[i], 0xA5); /* nothing past it */
    nj_cache_stats full = {.struct_size = sizeof full};
    expect_status(nj_context_cache_stats(ctx, &full), NJ_OK, NULL);
    assert_int_equal(full.struct_size, sizeof full);
    nj_context_destroy(ctx);
}

/* nj_context_options grew remote_cache: a caller built before it passes the shorter struct, which is
 * read no further than its struct_size (a heap block of exactly that size: ASan sees any over-read). */
static void test_context_options_v1(void **state)
{
    (void)state;
    nj_context_options full;
    nj_context_options_init(&full);
    full.backend = NJ_BACKEND_EMULATOR;
    full.arch = 90;
    full.cache_dir = g_dir;
    full.struct_size = (uint32_t)NJ_CONTEXT_OPTIONS_SIZE_V1;
    void *v1 = malloc(NJ_CONTEXT_OPTIONS_SIZE_V1);
    assert_non_null(v1);
    memcpy(v1, &full, NJ_CONTEXT_OPTIONS_SIZE_V1);
    nj_context *ctx = NULL;
    expect_status(nj_context_create(v1, &ctx), NJ_OK, NULL);
    assert_int_equal(nj_context_backend(ctx), NJ_BACKEND_EMULATOR);
    assert_string_equal(nj_context_cache_dir(ctx), g_dir);
    nj_context_destroy(ctx);
    uint32_t short_size = (uint32_t)NJ_CONTEXT_OPTIONS_SIZE_V1 - 8; /* through memcpy: v1 is a short block */
    memcpy(v1, &short_size, sizeof short_size);
    expect_status(nj_context_create(v1, &ctx), NJ_ERR_BAD_STRUCT_SIZE, "struct_size");
    free(v1);
}

/* Issue 19 item 5: the accessors crashed on NULL. */
static void test_null_accessors(void **state)
{
    (void)state;
    assert_int_equal(nj_context_backend(NULL), NJ_BACKEND_AUTO);
    assert_int_equal(nj_context_arch(NULL), 0);
    assert_string_equal(nj_context_cache_dir(NULL), "");
    assert_int_equal(nj_plan_workspace_size(NULL, NJ_PASS_FORWARD), 0);
    nj_cache_stats st = {.struct_size = sizeof st};
    expect_status(nj_context_cache_stats(NULL, &st), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_context_create(NULL, NULL), NJ_ERR_NULL_POINTER, "out");
    expect_status(nj_plan_get(NULL, NULL, NJ_PASS_FORWARD, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_plan_describe(NULL, NULL, 0, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_forward(NULL, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_backward(NULL, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_problem_validate(NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_problem_to_text(NULL, NULL, 0, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_problem_from_text(NULL, 1, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_preset_layernorm_axes(NULL, NULL, NULL, 0, 0), NJ_ERR_NULL_POINTER, NULL);
    int64_t c;
    int32_t r;
    int64_t e[NJ_MAX_RANK];
    expect_status(nj_problem_stat_count(NULL, &c), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_problem_param_extents(NULL, &r, e, &c), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_mem_alloc(NULL, 4, NULL), NJ_ERR_NULL_POINTER, NULL);
    expect_status(nj_synchronize(NULL, NULL), NJ_ERR_NULL_POINTER, NULL);
    nj_context_destroy(NULL);
    nj_mem_free(NULL, NULL);
    nj_context_options_init(NULL);
}

/* Issues 19 and 21: unknown context flags and out-of-range options were accepted silently. */
static void test_context_options_fail(void **state)
{
    (void)state;
    nj_context *ctx = (nj_context *)&ctx; /* must come back NULL */
    nj_context_options o;
    nj_context_options_init(&o);
    o.flags = 0xFFFF0000u;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_FLAGS, "flags");
    assert_null(ctx);
    nj_context_options_init(&o);
    o.max_parallel_compiles = -7;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT, "max_parallel_compiles");
    nj_context_options_init(&o);
    o.backend = 9;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT, "backend");
    nj_context_options_init(&o);
    o.log_level = 17;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT, "log_level");
    nj_context_options_init(&o);
    o.arch = -90;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT, "arch");
    nj_context_options_init(&o);
    o.device = -1;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_ARGUMENT, "device");
    nj_context_options_init(&o);
    o.struct_size = 12;
    expect_status(nj_context_create(&o, &ctx), NJ_ERR_BAD_STRUCT_SIZE, "struct_size");
    assert_null(ctx);
}

/* Issue 19 item 5: passes = 0 was accepted; unknown pass bits too. */
static void test_plan_passes_fail(void **state)
{
    (void)state;
    nj_context *ctx = emu_context();
    nj_problem_desc p;
    int64_t e[2] = {4, 64};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, e, 1, NJ_FLAG_SCALE), NJ_OK);
    nj_plan *plan = NULL;
    expect_status(nj_plan_get(ctx, &p, 0, &plan), NJ_ERR_BAD_ARGUMENT, "passes");
    expect_status(nj_plan_get(ctx, &p, 4, &plan), NJ_ERR_BAD_ARGUMENT, "passes");
    assert_null(plan);
    nj_context_destroy(ctx);
}

/* Issue 21: nj_preset_layernorm_axes read naxes entries whatever the rank (ASan: past the array). The
 * array here is exactly x's rank long; naxes = 5 must be refused before axes[3] is read. */
static void test_preset_counts_fail(void **state)
{
    (void)state;
    nj_problem_desc p;
    int64_t e[3] = {2, 3, 4};
    nj_tensor_desc x;
    assert_int_equal(nj_tensor_contiguous(&x, NJ_F32, 3, e), NJ_OK);
    int32_t *axes = malloc(3 * sizeof *axes); /* heap: ASan sees a read past it */
    axes[0] = 1, axes[1] = 2, axes[2] = -3;
    expect_status(nj_preset_layernorm_axes(&p, &x, axes, 5, 0), NJ_ERR_BAD_AXIS, "naxes");
    expect_status(nj_preset_layernorm_axes(&p, &x, axes, 3, 0), NJ_OK, NULL);
    expect_status(nj_preset_layernorm_axes(&p, &x, axes, -1, 0), NJ_ERR_EMPTY_REDUCTION, "naxes");
    free(axes);
    int64_t img[4] = {2, 8, 5, 5};
    expect_status(nj_preset_instancenorm(&p, NJ_F16, 4, img, 5, 0), NJ_ERR_BAD_ARGUMENT, "channels_last");
    expect_status(nj_preset_groupnorm(&p, NJ_F16, 4, img, 2, 5, 0), NJ_ERR_BAD_ARGUMENT, "channels_last");
    expect_status(nj_preset_batchnorm(&p, NJ_F16, 4, img, -1, 0), NJ_ERR_BAD_ARGUMENT, "channels_last");
    expect_status(nj_preset_batchnorm(&p, NJ_F16, 4, img, 1, 1u << 12), NJ_ERR_BAD_FLAGS, "flags");
}

/* Issue 19 item 4: `normjit plan 'layernorm f16 *x9223372036854775807'` overflowed in the planner. */
static void test_overflow_refused(void **state)
{
    (void)state;
    nj_problem_desc p;
    expect_status(nj_problem_from_text("layernorm f16 *x9223372036854775807", 1, &p), NJ_ERR_OVERFLOW, "x.extents");
    expect_status(nj_problem_from_text("layernorm f16 *x9223372036854775807", 0, &p), NJ_ERR_OVERFLOW, "x.extents");
    /* exactly NJ_MAX_ELEMENTS is fine, one row more is not */
    expect_status(nj_problem_from_text("layernorm f16 65536x65536x65536", 1, &p), NJ_OK, NULL);
    expect_status(nj_problem_from_text("layernorm f16 65536x65537x65536", 1, &p), NJ_ERR_OVERFLOW, "2^48");
    int64_t ok_e[2] = {INT64_C(1) << 24, INT64_C(1) << 24};
    assert_int_equal(nj_preset_rmsnorm(&p, NJ_F32, 2, ok_e, 1, 0), NJ_OK);
    nj_canon c;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    nj_plan_params pp;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev, &pp), NJ_OK);
    /* a stride that sends offsets past 2^60 */
    int64_t e[2] = {4, 8};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 2, e, 1, 0), NJ_OK);
    p.x.strides[0] = INT64_C(1) << 59;
    expect_status(nj_problem_validate(&p), NJ_ERR_OVERFLOW, "x.strides");
    p.x.strides[0] = 8;
    p.dx.rank = 2;
    memcpy(p.dx.extents, p.x.extents, sizeof p.dx.extents);
    p.dx.strides[0] = INT64_C(1) << 62, p.dx.strides[1] = 1;
    expect_status(nj_problem_validate(&p), NJ_ERR_OVERFLOW, "dx.strides");
}

/* Issue 14: a split column backward without fused dgamma/dbeta needs five launches, and the fixed array
 * of four overflowed (SIGSEGV). It plans now, within the array. */
static void test_five_launch_plan(void **state)
{
    (void)state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("norm f32 shape=8192x4x32 strides=160,40,1 reduce=0 feature=1,2", 1, &p),
                     NJ_OK);
    nj_canon c;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    nj_plan_params pp;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev, &pp), NJ_OK);
    assert_int_equal(pp.nlaunch, 5);
    assert_int_equal(pp.overflow, 0);
    char *t = nj_launches_to_text(&pp);
    nj_plan_params back;
    memset(&back, 0, sizeof back);
    assert_int_equal(nj_launches_from_text(t, &back), NJ_OK);
    assert_int_equal(back.nlaunch, 5);
    free(t);
}

/* The launch array's bound: appending past it sets the overflow mark and writes nothing outside, and the
 * check turns it into NJ_ERR_INTERNAL naming the count (a planner bug, never a crash). */
static void test_launch_bound_fail(void **state)
{
    (void)state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("layernorm f32 4x64", 1, &p), NJ_OK);
    nj_canon c;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    struct {
        nj_plan_params pp;
        uint64_t guard;
    } g;
    memset(&g, 0, sizeof g);
    g.guard = 0x5A5A5A5A5A5A5A5Aull;
    g.pp.template_name = "fwd_row.cu";
    g.pp.vec = g.pp.split = g.pp.rows_per_block = 1;
    for (int i = 0; i < NJ_MAX_LAUNCHES; i++) nj_plan_add_launch(&g.pp, "nj_k", 128, 1, 1, 0);
    assert_int_equal(g.pp.overflow, 0);
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "no main launch"); /* templates need one */
    g.pp.role[NJ_ROLE_MAIN] = 1;
    assert_int_equal(nj_plan_check(&c, &g.pp, &dev), NJ_OK);
    g.pp.role[NJ_ROLE_COLSUM] = 2; /* a role that names a launch of the wrong kind */
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "role colsum on nj_k");
    g.pp.role[NJ_ROLE_COLSUM] = 0;
    g.pp.pgrad = NJ_PGRAD_WALK; /* a dgamma/dbeta strategy in a forward plan */
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "dgamma/dbeta strategy");
    g.pp.pgrad = NJ_PGRAD_NONE;
    nj_plan_add_launch(&g.pp, "nj_k", 128, 1, 1, 0);
    assert_int_equal(g.pp.nlaunch, NJ_MAX_LAUNCHES);
    assert_int_equal(g.pp.overflow, 1);
    assert_true(g.guard == 0x5A5A5A5A5A5A5A5Aull);
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "launches");
    /* other invariants the check names */
    g.pp.overflow = 0;
    g.pp.launch[1].block[0] = 100;
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "block");
    g.pp.launch[1].block[0] = 128;
    g.pp.launch[2].row_mult = 0;
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "blocks per");
    g.pp.launch[2].row_mult = 1;
    g.pp.vec = 3;
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_INTERNAL, "vector width");
    g.pp.vec = 1;
    g.pp.workspace_fixed = UINT64_MAX - 2;
    g.pp.workspace_per_row = 8;
    expect_status(nj_plan_check(&c, &g.pp, &dev), NJ_ERR_OVERFLOW, "workspace");
}

/* Issue 21: a workspace smaller than nj_plan_workspace_size was written past (3.5 MB past half a
 * workspace). The args carry its size; the old struct size (without it) is still accepted. */
static void test_workspace_size_fail(void **state)
{
    (void)state;
    nj_context *ctx = emu_context();
    nj_problem_desc p;
    int64_t e[2] = {6, 96};
    assert_int_equal(nj_preset_rmsnorm(&p, NJ_F32, 2, e, 1, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, &plan), NJ_OK);
    size_t ws = nj_plan_workspace_size(plan, NJ_PASS_BACKWARD);
    assert_true(ws > 0); /* the column sum's partials */
    float x[6 * 96], dy[6 * 96], dx[6 * 96], g[96], dg[96], y[6 * 96], rstd[6];
    for (int i = 0; i < 6 * 96; i++) x[i] = (float)(i % 7) - 3.0f, dy[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 96; i++) g[i] = 1.0f + (float)i / 96.0f;
    nj_forward_args fa = {.struct_size = sizeof fa, .eps = 1e-5f, .x = x, .gamma = g, .y = y, .rstd = rstd};
    expect_status(nj_forward(plan, &fa), NJ_OK, NULL);
    assert_string_equal(nj_last_error(), ""); /* cleared by a call that succeeded */
    /* the guard words after the short workspace must stay untouched */
    float *work = malloc(ws + 64);
    memset(work, 0x7F, ws + 64);
    nj_backward_args a = {.struct_size = sizeof a, .dy = dy, .x = x, .gamma = g, .rstd = rstd, .dx = dx,
                          .dgamma = dg, .workspace = work, .workspace_size = ws / 2};
    expect_status(nj_backward(plan, &a), NJ_ERR_BAD_ARGUMENT, "workspace_size");
    a.workspace_size = 0;
    expect_status(nj_backward(plan, &a), NJ_ERR_BAD_ARGUMENT, "workspace_size");
    unsigned char *tail = (unsigned char *)work + ws;
    for (int i = 0; i < 64; i++) assert_int_equal(tail[i], 0x7F);
    a.workspace_size = ws;
    expect_status(nj_backward(plan, &a), NJ_OK, NULL);
    float dg_new[96];
    memcpy(dg_new, dg, sizeof dg);
    /* the version-1 struct (without workspace_size) is still accepted, unchecked, with the same result */
    memset(dg, 0, sizeof dg);
    a.struct_size = (uint32_t)NJ_BACKWARD_ARGS_SIZE_V1;
    a.workspace_size = 1; /* past a V1 struct: never read */
    expect_status(nj_backward(plan, &a), NJ_OK, NULL);
    assert_memory_equal(dg, dg_new, sizeof dg);
    /* so is revision 2's (workspace_size, no eps): the general form everywhere, here the same result */
    memset(dg, 0, sizeof dg);
    a.struct_size = (uint32_t)NJ_BACKWARD_ARGS_SIZE_V2;
    a.workspace_size = ws;
    a.eps = -5.0f; /* past a V2 struct: never read */
    expect_status(nj_backward(plan, &a), NJ_OK, NULL);
    assert_memory_equal(dg, dg_new, sizeof dg);
    a.struct_size = sizeof a; /* with the field, a negative eps is refused */
    expect_status(nj_backward(plan, &a), NJ_ERR_BAD_ARGUMENT, "eps");
    a.eps = 0.0f;
    a.struct_size = (uint32_t)NJ_BACKWARD_ARGS_SIZE_V1 + 4;
    expect_status(nj_backward(plan, &a), NJ_ERR_BAD_STRUCT_SIZE, "struct_size");
    fa.struct_size = (uint32_t)NJ_FORWARD_ARGS_SIZE_V1;
    expect_status(nj_forward(plan, &fa), NJ_OK, NULL);
    free(work);
    nj_context_destroy(ctx);
}

/* Issue 19 item 6: nj_last_error() kept an old message after a call that succeeded. */
static void test_last_error_cleared(void **state)
{
    (void)state;
    nj_problem_desc p;
    expect_status(nj_problem_from_text("layernorm f99 4x4", 1, &p), NJ_ERR_PARSE, "f99");
    assert_true(nj_last_error()[0] != '\0');
    assert_int_equal(nj_problem_from_text("layernorm f32 4x4", 1, &p), NJ_OK);
    assert_string_equal(nj_last_error(), "");
    expect_status(nj_problem_validate(NULL), NJ_ERR_NULL_POINTER, NULL);
    int64_t n;
    assert_int_equal(nj_problem_stat_count(&p, &n), NJ_OK);
    assert_string_equal(nj_last_error(), "");
}

/* Issue 14: presets read half-precision gamma as float32. Now gamma/beta follow x's dtype. */
static void test_preset_param_dtype(void **state)
{
    (void)state;
    nj_problem_desc p;
    int64_t e[2] = {4, 64}, img[4] = {2, 8, 5, 5};
    const nj_dtype dts[3] = {NJ_F32, NJ_F16, NJ_BF16};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(nj_preset_layernorm(&p, dts[i], 2, e, 1, NJ_FLAG_SCALE), NJ_OK);
        assert_int_equal(p.param_dtype, dts[i]);
        assert_int_equal(nj_preset_rmsnorm(&p, dts[i], 2, e, 1, NJ_FLAG_SCALE), NJ_OK);
        assert_int_equal(p.param_dtype, dts[i]);
        assert_int_equal(nj_preset_groupnorm(&p, dts[i], 4, img, 4, 1, NJ_FLAG_SCALE), NJ_OK);
        assert_int_equal(p.param_dtype, dts[i]);
        assert_int_equal(nj_preset_instancenorm(&p, dts[i], 4, img, 0, NJ_FLAG_SCALE), NJ_OK);
        assert_int_equal(p.param_dtype, dts[i]);
        assert_int_equal(nj_preset_batchnorm(&p, dts[i], 4, img, 0, NJ_FLAG_SCALE), NJ_OK);
        assert_int_equal(p.param_dtype, dts[i]);
        nj_canon c;
        assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
        assert_int_equal(c.dtype[NJ_OPD_PARAM], dts[i]);
    }
    /* float32 master weights stay one field away, and in the text form */
    assert_int_equal(nj_problem_from_text("rmsnorm bf16 *x64 flags=scale param=f32", 3, &p), NJ_OK);
    assert_int_equal(p.param_dtype, NJ_F32);
    assert_int_equal(nj_problem_from_text("rmsnorm bf16 *x64 flags=scale", 3, &p), NJ_OK);
    assert_int_equal(p.param_dtype, NJ_BF16);
}

/* The header's layouts: statistics over the kept axes, gamma over the feature axes, in x's order. */
static void test_layout_helpers(void **state)
{
    (void)state;
    nj_problem_desc p;
    int64_t n, pe[NJ_MAX_RANK], pc;
    int32_t pr;
    /* GroupNorm NHWC [N=2, C=8, 5, 5], 4 groups: x is (N, G, C/G, H, W) viewed; kept N, G */
    int64_t img[4] = {2, 8, 5, 5};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, img, 4, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS), NJ_OK);
    assert_int_equal(nj_problem_stat_count(&p, &n), NJ_OK);
    assert_int_equal(n, 2 * 4);
    assert_int_equal(nj_problem_param_extents(&p, &pr, pe, &pc), NJ_OK);
    assert_int_equal(pr, 2);
    assert_int_equal(pe[0], 4);
    assert_int_equal(pe[1], 2);
    assert_int_equal(pc, 8);
    /* BatchNorm [16, 3, 7, 7]: statistics and gamma per channel */
    int64_t bn[4] = {16, 3, 7, 7};
    assert_int_equal(nj_preset_batchnorm(&p, NJ_F32, 4, bn, 0, NJ_FLAG_SCALE), NJ_OK);
    assert_int_equal(nj_problem_stat_count(&p, &n), NJ_OK);
    assert_int_equal(n, 3);
    assert_int_equal(nj_problem_param_extents(&p, &pr, pe, &pc), NJ_OK);
    assert_int_equal(pr, 1);
    assert_int_equal(pc, 3);
    /* no scale or bias: no gamma */
    int64_t e[3] = {5, 6, 7};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 3, e, 2, 0), NJ_OK);
    assert_int_equal(nj_problem_param_extents(&p, &pr, pe, &pc), NJ_OK);
    assert_int_equal(pr, 0);
    assert_int_equal(pc, 0);
    assert_int_equal(nj_problem_stat_count(&p, &n), NJ_OK);
    assert_int_equal(n, 5);
    /* scale without feature axes: one scalar */
    p.flags |= NJ_FLAG_SCALE;
    p.feature_axes = 0;
    assert_int_equal(nj_problem_param_extents(&p, &pr, pe, &pc), NJ_OK);
    assert_int_equal(pr, 0);
    assert_int_equal(pc, 1);
    p.reduce_axes = 0;
    expect_status(nj_problem_stat_count(&p, &n), NJ_ERR_EMPTY_REDUCTION, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_accessors),     cmocka_unit_test(test_context_options_fail),
        cmocka_unit_test(test_plan_passes_fail),   cmocka_unit_test(test_preset_counts_fail),
        cmocka_unit_test(test_overflow_refused),   cmocka_unit_test(test_five_launch_plan),
        cmocka_unit_test(test_launch_bound_fail),  cmocka_unit_test(test_workspace_size_fail),
        cmocka_unit_test(test_last_error_cleared), cmocka_unit_test(test_preset_param_dtype),
        cmocka_unit_test(test_layout_helpers),     cmocka_unit_test(test_cache_stats_size),
        cmocka_unit_test(test_context_options_v1),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
