/* Planner: canonical problem + device properties -> launches and template parameters (planner.h).
 *
 * Forward:
 *  - ROW kind and other row-like problems (plan_rowlike) -> fwd_row.cu. Rows of up to 1024 elements
 *    get a warp each (4 rows per 128-thread block), longer rows a block each; the row stays in registers
 *    when a thread's share fits (regs_cache), else the kernel streams x twice; rows of 2^18 elements and
 *    more are split over several blocks (split), their statistics combined through the workspace. The
 *    vector width is the widest of 8/4/2 that divides the row, keeps every access within 16 bytes and
 *    matches the layout of every operand (unit stride along the row, kept strides multiples of it). Base
 *    pointers and batch strides are run-time values: the plan names the operands that need them aligned
 *    (align_opds) and the launch runs the unaligned variant (nj_plan_variant) when they are not.
 *  - COLUMN kind with at least 16 contiguous kept columns -> fwd_column.cu: coalesced tiles of 32 columns
 *    (long walks split into pieces, a block each: nj_plan_column_split).
 *  - GroupNorm over channels-last images -> fwd_channels_last.cu: pixel tiles, vectors across channels
 *    (planner_cl.c).
 *  - everything else -> fwd_general.cu: a block per statistic walking the reduction (split over blocks
 *    from 2^18 elements, as rows are).
 * Launches whose grid follows the batch have a block (or warp) per work item and no loop, except where a
 * block's item is tiny (nj_plan_grid_loop). Everything here is a function of (canonical problem, pass, device props) and goes into nj_plan_text. */
#include "planner.h"
#include "planner_bwd.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NJ_WARP_ROW_MAX 1024     /* rows up to this length get a warp each */
/* Elements per thread a block-per-row plan aims for: 8 (one 16-byte vector of a 16-bit row, 256 threads
 * for 2048, 1024 for 8192, as Triton-generated kernels run them). 16 halved the threads and doubled each
 * thread's unrolled code: NVRTC took 3 to 6 ms more a kernel (the LLM manifest's median, 8% of it). */
#define NJ_ROW_ELEMS_TARGET 8
/* Rows of at least NJ_SPLIT_MIN elements are cut into pieces of about NJ_SPLIT_PIECE, a block each (at
 * most NJ_SPLIT_MAX a row): a block per row would leave most SMs idle for the few long rows of e.g.
 * nv_norms' 10 x 10^7 LayerNorm, and the batch is only known at launch, so the cut depends on the row. */
#define NJ_SPLIT_MIN (1 << 18)
#define NJ_SPLIT_PIECE (1 << 15)
#define NJ_SPLIT_MAX 256

void nj_device_props_default(int32_t arch, nj_device_props *out)
{
    memset(out, 0, sizeof *out);
    out->arch = arch;
    out->max_threads_per_block = 1024;
    out->regs_per_sm = 65536;
    if (arch >= 90) {
        out->sm_count = 132; /* H100 SXM */
        out->max_shared_per_block = 227 * 1024;
    } else if (arch == 80) {
        out->sm_count = 108; /* A100 */
        out->max_shared_per_block = 163 * 1024;
    } else if (arch >= 86) {
        out->sm_count = 0; /* many parts: unknown */
        out->max_shared_per_block = 99 * 1024;
    } else {
        out->max_shared_per_block = 48 * 1024;
    }
}

static int64_t plan_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Largest bytes of one element among the operands a forward row kernel touches with vector accesses. */
static int32_t plan_max_elem_bytes(const nj_canon *c)
{
    static const nj_operand opds[] = {NJ_OPD_X, NJ_OPD_Y, NJ_OPD_RES, NJ_OPD_RESOUT, NJ_OPD_PARAM};
    int32_t m = 1;
    for (size_t i = 0; i < NJ_ARRAY_LEN(opds); i++) {
        int32_t b = (int32_t)nj_dtype_size((nj_dtype)c->dtype[opds[i]]);
        if (b > m) m = b;
    }
    return m;
}

/* Operands the forward kernels read or write with the row's layout, given the flags. */
static bool plan_fwd_uses(const nj_canon *c, nj_operand o)
{
    switch (o) {
    case NJ_OPD_X:
    case NJ_OPD_Y: return true;
    case NJ_OPD_RES: return (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    case NJ_OPD_PARAM: return (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0;
    default: return false;
    }
}

/* Row-like: every reduced axis lies inside every kept axis, and x has stride 1 on the innermost one. The
 * ROW kind is one; so is GroupNorm NCHW, whose reduction (C/G, HW) stays two axes because only C/G is a
 * feature. The row kernel decomposes an element's offset over the reduced axes. Returns the outermost
 * reduced axis, or -1. */
static int plan_rowlike(const nj_canon *c)
{
    int first = -1;
    for (int a = 1; a < c->rank; a++) {
        if (c->axes[a].reduce && first < 0) first = a;
        if (!c->axes[a].reduce && first >= 0) return -1; /* a kept axis inside a reduced one */
    }
    if (first < 0 || c->axes[c->rank - 1].stride[NJ_OPD_X] != 1) return -1;
    return first;
}

/* Widest vector width valid for every row of a row-like problem: a chunk of v elements stays within
 * one run of the innermost axis, has unit stride in every activation operand, and starts aligned
 * (every other stride a multiple of v). gamma/beta constant along the innermost axis are loaded once a
 * chunk and do not limit v. Batch strides and pointers are checked by the kernel at run time. */
static int32_t plan_row_vec(const nj_canon *c)
{
    int in = c->rank - 1;
    int32_t maxb = plan_max_elem_bytes(c);
    for (int32_t v = 8; v > 1; v /= 2) {
        if (v * maxb > 16 || c->axes[in].extent % v != 0) continue;
        bool ok = true;
        for (int o = NJ_OPD_X; o <= NJ_OPD_PARAM && ok; o++) {
            if (!plan_fwd_uses(c, (nj_operand)o)) continue;
            int64_t rs = c->axes[in].stride[o];
            if (o == NJ_OPD_PARAM && rs == 0) continue; /* one gamma per chunk: a scalar load */
            if (rs != 1) ok = false;
            for (int a = 1; a < in && ok; a++)
                if (c->axes[a].stride[o] % v != 0) ok = false;
        }
        if (ok) return v;
    }
    return 1;
}

static int32_t plan_round32(int64_t n) { return (int32_t)(plan_ceil_div(n, 32) * 32); }

void nj_plan_add_launch(nj_plan_params *pp, const char *kernel, int32_t block, int64_t row_mult, int64_t row_div,
                        int32_t grid_x)
{
    /* the library kernels' callers write through launch[nlaunch - 1]: on overflow that stays the last
     * real launch (a plan that nj_plan_check refuses anyway), never a slot past the array */
    if (pp->nlaunch >= NJ_MAX_LAUNCHES) {
        pp->overflow = 1;
        return;
    }
    nj_launch *l = &pp->launch[pp->nlaunch++];
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel);
    l->block[0] = block;
    l->block[1] = l->block[2] = 1;
    l->grid_x = grid_x;
    l->grid_y = l->grid_z = 1;
    l->row_mult = row_mult;
    l->row_div = row_div;
}

int32_t nj_plan_kernel_count(const nj_plan_params *pp)
{
    int32_t n = 0;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        int32_t j = 0;
        while (j < i && strcmp(pp->launch[j].kernel, pp->launch[i].kernel) != 0) j++;
        n += j == i && pp->launch[i].lib == NJ_LIB_NONE;
    }
    return n;
}

/* The library kernels (nj_lib_kernel order): name, template, kernel, threads a block, and whether a
 * module is built per gamma dtype (the kernel writes dgamma/dbeta) or once (it touches no gamma). */
static const struct {
    const char *name, *template_name, *kernel;
    int32_t block;
    bool typed;
} nj_libs[NJ_LIB_COUNT] = {{NULL, NULL, NULL, 0, false},
                           {"colsum", "lib_colsum.cu", "nj_lib_colsum", 1024, true},
                           {"merge", "lib_merge.cu", "nj_lib_merge", 256, false}};

const char *nj_lib_name(int32_t lib) { return lib > 0 && lib < NJ_LIB_COUNT ? nj_libs[lib].name : NULL; }

int32_t nj_lib_dtype(int32_t lib, int32_t param_dtype)
{
    return lib > 0 && lib < NJ_LIB_COUNT && nj_libs[lib].typed ? param_dtype : NJ_DTYPE_NONE;
}

int32_t nj_plan_libs(const nj_plan_params *pp, int32_t libs[NJ_MAX_LAUNCHES])
{
    int32_t n = 0;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        int32_t lib = pp->launch[i].lib, k = 0;
        while (k < n && libs[k] != lib) k++;
        if (lib != NJ_LIB_NONE && k == n) libs[n++] = lib;
    }
    return n;
}

/* Appends a launch of library kernel lib (grid as nj_plan_add_launch's) with its run-time arguments. */
static nj_launch *plan_add_lib(nj_plan_params *pp, int32_t lib, int64_t row_mult, int64_t row_div, int32_t grid_x,
                               const int64_t arg[NJ_LIB_NARGS][2])
{
    nj_plan_add_launch(pp, nj_libs[lib].kernel, nj_libs[lib].block, row_mult, row_div, grid_x);
    nj_launch *l = &pp->launch[pp->nlaunch - 1];
    l->lib = lib;
    memcpy(l->arg, arg, sizeof l->arg);
    return l;
}

void nj_plan_add_colsum(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2])
{
    /* A block per 32 columns, its warps over the parts: a thread's chain of dependent loads is parts /
     * warps long, so about 8 parts a warp, 8 to 32 warps (parts that grow with the batch: 8 batch rows
     * assumed). H200, 264 parts of 4096 columns: 15 us with 8 warps, 9.6 us with 32. */
    int64_t parts = arg[NJ_COLSUM_NPARTS][0] + 8 * arg[NJ_COLSUM_NPARTS][1];
    int64_t warps = (parts + 7) / 8 < 8 ? 8 : (parts + 7) / 8 > 32 ? 32 : (parts + 7) / 8;
    nj_launch *l = plan_add_lib(pp, NJ_LIB_COLSUM, 1, 1, (int32_t)((arg[NJ_COLSUM_NCOLS][0] + 31) / 32), arg);
    l->block[0] = (int32_t)warps * 32;
    if (l->arg[NJ_COLSUM_INNER][0] == 0 && l->arg[NJ_COLSUM_INNER][1] == 0) l->arg[NJ_COLSUM_INNER][0] = 1;
}

void nj_plan_add_merge(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2])
{
    /* a block per 32 items (its 8 warps over the parts), items a batch row times the rows */
    plan_add_lib(pp, NJ_LIB_MERGE, arg[NJ_MERGE_NITEMS][1], 32, 0, arg);
}

nj_status nj_plan_library(int32_t lib, nj_plan_params *out)
{
    NJ_RETURN_IF(!nj_lib_name(lib), NJ_ERR_INTERNAL, "planner: library kernel %d", (int)lib);
    memset(out, 0, sizeof *out);
    out->family = NJ_FAMILY_LIBRARY;
    out->template_name = nj_libs[lib].template_name;
    out->block = nj_libs[lib].block;
    out->vec = out->rows_per_block = out->split = 1;
    nj_plan_add_launch(out, nj_libs[lib].kernel, out->block, 1, 1, 1);
    return NJ_OK;
}

void nj_plan_grid_loop(nj_plan_params *pp, int64_t elems, const nj_device_props *dev)
{
    pp->grid_loop = elems < NJ_LOOP_ELEMS;
    if (!pp->grid_loop) return;
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        nj_launch *l = &pp->launch[i];
        int64_t per_sm = 2048 / l->block[0] > 0 ? 2048 / l->block[0] : 1;
        if (l->grid_x <= 0 && l->lib == NJ_LIB_NONE) l->grid_x_cap = (int64_t)sms * per_sm * 2; /* libraries: no loop */
    }
}

/* One warp for tiny walks (a block's worth of idle threads per statistic would cost occupancy), up to
 * 512 threads for long ones. */
int32_t nj_plan_walk_block(int64_t n) { return n >= 8192 ? 512 : n >= 1024 ? 256 : n > 64 ? 128 : 32; }

/* Operands fwd_row.cu reads or writes vec elements at a time: the activations, and gamma/beta when they
 * run along the row (not when constant along it: then one value is loaded per chunk). */
static uint32_t plan_fwd_row_align(const nj_canon *c)
{
    uint32_t m = 1u << NJ_OPD_X | 1u << NJ_OPD_Y;
    if (c->flags & NJ_FLAG_RESIDUAL) m |= 1u << NJ_OPD_RES;
    if (c->flags & NJ_FLAG_RESIDUAL_OUT) m |= 1u << NJ_OPD_RESOUT;
    if ((c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->axes[c->rank - 1].stride[NJ_OPD_PARAM] != 0)
        m |= 1u << NJ_OPD_PARAM;
    return m;
}

/* A split walk (pp->block set): NJ_SPLIT_PIECE-long pieces of each statistic, a block each, `part`
 * writing each piece's (sum, m2) to the workspace, `main` combining a statistic's pieces in order and
 * normalizing its piece. */
static void plan_split(const nj_canon *c, const char *part, const char *main_kernel, const nj_device_props *dev,
                       nj_plan_params *pp)
{
    int64_t pieces = plan_ceil_div(c->reduce_size, NJ_SPLIT_PIECE);
    pp->split = (int32_t)(pieces < NJ_SPLIT_MAX ? pieces : NJ_SPLIT_MAX);
    nj_plan_add_launch(pp, part, pp->block, c->kept_inner * pp->split, 1, 0);
    nj_plan_add_launch(pp, main_kernel, pp->block, c->kept_inner * pp->split, 1, 0);
    pp->workspace_per_row = (uint64_t)c->kept_inner * (uint64_t)pp->split * 2u * sizeof(float);
}

static nj_status plan_fwd_row(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t n = c->reduce_size;
    int32_t vec = plan_row_vec(c);
    int64_t nch = n / vec;
    pp->family = NJ_FAMILY_ROW;
    pp->template_name = "fwd_row.cu";
    pp->vec = vec;
    pp->split = 1;
    int32_t maxt = dev->max_threads_per_block > 0 ? dev->max_threads_per_block : 1024;
    if (n <= NJ_WARP_ROW_MAX) {
        pp->block = 128;
        pp->rows_per_block = pp->block / 32;
        pp->regs_cache = (int32_t)(plan_ceil_div(nch, 32) * vec);
    } else {
        int32_t t = plan_round32(plan_ceil_div(n, NJ_ROW_ELEMS_TARGET));
        if (t < 128) t = 128;
        if (t > maxt) t = maxt;
        int64_t elems = plan_ceil_div(nch, t) * vec;
        /* __launch_bounds__(t) leaves 65536 / t registers a thread: 64 at 1024 threads */
        int64_t cap = t > 512 ? 16 : 32;
        pp->rows_per_block = 1;
        if (elems <= cap) {
            pp->block = t;
            pp->regs_cache = (int32_t)elems;
        } else {
            pp->block = maxt < 512 ? maxt : 512;
            pp->regs_cache = 0;
        }
    }
    if (vec > 1) pp->align_opds = plan_fwd_row_align(c);
    if (pp->regs_cache == 0 && n >= NJ_SPLIT_MIN) {
        /* x is read twice, as a streamed row is anyway */
        plan_split(c, "nj_fwd_row_part", "nj_fwd_row", dev, pp);
        return NJ_OK;
    }
    nj_plan_add_launch(pp, "nj_fwd_row", pp->block, c->kept_inner, pp->rows_per_block, 0);
    nj_plan_grid_loop(pp, (int64_t)pp->rows_per_block * n, dev);
    return NJ_OK;
}

static nj_status plan_fwd_general(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    pp->family = NJ_FAMILY_GENERAL;
    pp->template_name = "fwd_general.cu";
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->regs_cache = 0;
    int64_t n = c->reduce_size;
    pp->block = nj_plan_walk_block(n);
    if (n >= NJ_SPLIT_MIN) {
        /* BatchNorm over N x H x W: a block per channel left most SMs idle */
        plan_split(c, "nj_fwd_general_part", "nj_fwd_general", dev, pp);
        return NJ_OK;
    }
    nj_plan_add_launch(pp, "nj_fwd_general", pp->block, c->kept_inner, 1, 0);
    nj_plan_grid_loop(pp, n, dev);
    return NJ_OK;
}

/* Column problems with at least NJ_COLUMN_MIN contiguous kept columns: tiles of 32 columns, 8 warps
 * walking the reduction. Fewer columns would leave most lanes idle: the general family does better. */
#define NJ_COLUMN_MIN 16

/* Long column walks (BatchNorm NHWC over N x H x W, channels-last InstanceNorm of volumes) left most SMs
 * idle at a block per tile: 2 x 128^3 x 64 ran on 4 blocks. From NJ_COL_SPLIT_MIN walk rows on, each
 * walk is cut into pieces, a block each, aiming at NJ_COL_BLOCKS_SM blocks an SM for one batch row (the
 * batch is a run-time extent), with pieces of at least NJ_COL_PIECE_MIN walk rows (16 steps of each
 * warp) and none empty. */
#define NJ_COL_SPLIT_MIN 4096
#define NJ_COL_BLOCKS_SM 8
#define NJ_COL_PIECE_MIN 128
#define NJ_COL_SPLIT_MAX 256
int32_t nj_plan_column_split(const nj_canon *c, const nj_device_props *dev)
{
    int64_t n = c->reduce_size, ec = c->axes[c->rank - 1].extent;
    if (n < NJ_COL_SPLIT_MIN) return 1;
    int64_t tiles = c->kept_inner / ec * plan_ceil_div(ec, 32);
    int64_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t s = plan_ceil_div(sms * NJ_COL_BLOCKS_SM, tiles);
    if (s > n / NJ_COL_PIECE_MIN) s = n / NJ_COL_PIECE_MIN;
    if (s > NJ_COL_SPLIT_MAX) s = NJ_COL_SPLIT_MAX;
    if (s < 2) return 1;
    return (int32_t)plan_ceil_div(n, plan_ceil_div(n, s)); /* pieces of ceil(n / s): none empty */
}

static nj_status plan_fwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int64_t tiles = c->kept_inner / ec * plan_ceil_div(ec, 32);
    pp->family = NJ_FAMILY_COLUMN;
    pp->template_name = "fwd_column.cu";
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = nj_plan_column_split(c, dev);
    pp->block = 256;
    if (pp->split == 1) {
        nj_plan_add_launch(pp, "nj_fwd_column", pp->block, tiles, 1, 0);
        return NJ_OK;
    }
    /* partials per (tile, piece), statistics per tile, then the pieces normalized (fwd_column.cu); the
     * workspace holds [tile][piece][sum, m2][32] partials, then [tile][mean, rstd][32], over the batch */
    int64_t s = pp->split, n = c->reduce_size;
    nj_plan_add_launch(pp, "nj_fwd_column_part", pp->block, tiles * pp->split, 1, 0);
    const int64_t arg[NJ_LIB_NARGS][2] = {
        [NJ_MERGE_NITEMS] = {0, tiles * 32},    [NJ_MERGE_NPARTS] = {s, 0},      [NJ_MERGE_RADIX] = {32, 0},
        [NJ_MERGE_S_HI] = {s * 64, 0},          [NJ_MERGE_S_LO] = {1, 0},        [NJ_MERGE_S_PART] = {64, 0},
        [NJ_MERGE_OFF_B] = {32, 0},             [NJ_MERGE_OUT_BASE] = {0, tiles * s * 64},
        [NJ_MERGE_O_HI] = {64, 0},              [NJ_MERGE_O_LO] = {1, 0},        [NJ_MERGE_O_B] = {32, 0},
        [NJ_MERGE_MODE] = {(c->flags & NJ_FLAG_CENTER) ? NJ_MERGE_STATS : NJ_MERGE_RMS, 0},
        [NJ_MERGE_N] = {n, 0},                  [NJ_MERGE_PLEN] = {plan_ceil_div(n, s), 0}, [NJ_MERGE_CMUL] = {1, 0}};
    nj_plan_add_merge(pp, arg);
    nj_plan_add_launch(pp, "nj_fwd_column", pp->block, tiles * pp->split, 1, 0);
    pp->workspace_per_row = (uint64_t)tiles * (uint64_t)(pp->split + 1) * 64u * sizeof(float);
    return NJ_OK;
}

static nj_status plan_forward(const nj_canon *c, const nj_device_props *dev, nj_plan_params *out)
{
    if (c->kind == NJ_KIND_ROW || plan_rowlike(c) > 0) return plan_fwd_row(c, dev, out);
    if (c->kind == NJ_KIND_COLUMN && c->axes[c->rank - 1].extent >= NJ_COLUMN_MIN) return plan_fwd_column(c, dev, out);
    if (nj_plan_cl_ok(c, NJ_PASS_FORWARD)) return nj_plan_fwd_channels_last(c, dev, out);
    return plan_fwd_general(c, dev, out);
}

nj_status nj_plan_pass(const nj_canon *c, nj_pass pass, const nj_device_props *dev, nj_plan_params *out)
{
    NJ_RETURN_IF(!c || !dev || !out, NJ_ERR_NULL_POINTER, "planner: NULL argument");
    memset(out, 0, sizeof *out);
    NJ_RETURN_IF(c->rank < 2 || c->rank > NJ_CANON_MAX_AXES, NJ_ERR_INTERNAL, "planner: canonical rank %d", c->rank);
    NJ_RETURN_IF(c->reduce_size < 1 || c->kept_inner < 1, NJ_ERR_INTERNAL, "planner: reduce size %lld, kept %lld",
                 (long long)c->reduce_size, (long long)c->kept_inner);
    NJ_RETURN_IF(c->kind < NJ_KIND_ROW || c->kind > NJ_KIND_GENERAL, NJ_ERR_INTERNAL, "planner: unknown canonical kind %d",
                 c->kind);
    out->pass = pass;
    nj_status s;
    switch (pass) {
    case NJ_PASS_FORWARD: s = plan_forward(c, dev, out); break;
    case NJ_PASS_BACKWARD: s = nj_plan_backward(c, dev, out); break;
    default: return nj_fail(NJ_ERR_BAD_ARGUMENT, "planner: unknown pass %d", (int)pass);
    }
    if (s == NJ_OK) s = nj_plan_check(c, out, dev);
    /* a broken invariant is a planner bug: debug builds stop at it, release builds return the status */
    assert(s != NJ_ERR_INTERNAL && "planner invariant broken (nj_last_error names it)");
    return s;
}

nj_status nj_plan_variant(const nj_canon *c, nj_pass pass, nj_variant v, const nj_device_props *dev,
                          nj_plan_params *out)
{
    NJ_RETURN_IF(v != NJ_VARIANT_MAIN && v != NJ_VARIANT_UNALIGNED, NJ_ERR_BAD_ARGUMENT, "planner: variant %d", (int)v);
    NJ_TRY(nj_plan_pass(c, pass, dev, out));
    if (v == NJ_VARIANT_MAIN || out->align_opds == 0) return NJ_OK;
    /* Same blocks, launches and workspace (the caller sized it for the main plan); scalar accesses. */
    out->vec = 1;
    out->regs_cache = 0;
    out->unaligned = 1;
    out->align_opds = 0;
    return NJ_OK;
}

#define NJ_GRID_X_MAX 0x7fffffffLL
#define NJ_GRID_Y_MAX 65535LL

nj_status nj_launch_grid(const nj_launch *l, int64_t rows, int32_t max_x, uint32_t grid[3])
{
    if (l->grid_x > 0) {
        grid[0] = (uint32_t)l->grid_x;
        grid[1] = (uint32_t)(l->grid_y > 0 ? l->grid_y : 1);
        grid[2] = (uint32_t)(l->grid_z > 0 ? l->grid_z : 1);
        return NJ_OK;
    }
    int64_t div = l->row_div > 0 ? l->row_div : 1;
    int64_t mult = l->row_mult > 0 ? l->row_mult : 1;
    NJ_RETURN_IF(rows > INT64_MAX / mult, NJ_ERR_OVERFLOW, "%s: %lld rows x %lld blocks overflow", l->kernel,
                 (long long)rows, (long long)mult);
    int64_t need = rows <= 0 ? 0 : rows * mult;
    int64_t n = need / div + (need % div != 0);
    if (l->grid_x_cap > 0 && n > l->grid_x_cap) n = l->grid_x_cap; /* the kernel loops over the rest */
    if (n < 1) n = 1; /* an empty batch still launches (every block skips), never a zero grid */
    int64_t wide = max_x > 0 ? max_x : NJ_GRID_X_MAX;
    int64_t gy = (n + wide - 1) / wide;
    NJ_RETURN_IF(gy > NJ_GRID_Y_MAX, NJ_ERR_OVERFLOW, "%s: %lld blocks exceed a CUDA grid", l->kernel, (long long)n);
    grid[0] = (uint32_t)((n + gy - 1) / gy);
    grid[1] = (uint32_t)gy;
    grid[2] = 1;
    return NJ_OK;
}

void nj_launch_lib_args(const nj_launch *l, int64_t rows, int64_t out[NJ_LIB_NARGS])
{
    for (int k = 0; k < NJ_LIB_NARGS; k++) out[k] = l->arg[k][0] + l->arg[k][1] * rows;
}

static const char *plan_family_name(int32_t f)
{
    switch (f) {
    case NJ_FAMILY_ROW: return "row";
    case NJ_FAMILY_GENERAL: return "general";
    case NJ_FAMILY_PARAM_GRAD: return "param_grad";
    case NJ_FAMILY_COLUMN: return "column";
    case NJ_FAMILY_CHANNELS_LAST: return "channels_last";
    case NJ_FAMILY_LIBRARY: return "library";
    default: return "unknown";
    }
}

static void plan_launch_text(nj_buf *b, const nj_launch *l)
{
    nj_buf_printf(b, "%s %d %d %d %d %d %d %lld %lld %lld %u", l->kernel, l->block[0], l->block[1], l->block[2],
                  l->grid_x, l->grid_y, l->grid_z, (long long)l->row_mult, (long long)l->row_div,
                  (long long)l->grid_x_cap, l->shmem);
    if (l->lib == NJ_LIB_NONE) return;
    nj_buf_printf(b, " lib %d", (int)l->lib);
    for (int k = 0; k < NJ_LIB_NARGS; k++)
        nj_buf_printf(b, " %lld:%lld", (long long)l->arg[k][0], (long long)l->arg[k][1]);
}

/* The " lib N c:r ..." tail of a library launch's line (plan_launch_text); *used: characters read. */
static bool plan_parse_lib(const char *p, nj_launch *l, int *used)
{
    int lib = 0, k = 0;
    if (sscanf(p, " lib %d%n", &lib, &k) != 1 || !nj_lib_name(lib)) return false;
    int at = k;
    for (int i = 0; i < NJ_LIB_NARGS; i++) {
        long long c, r;
        if (sscanf(p + at, " %lld:%lld%n", &c, &r, &k) != 2) return false;
        l->arg[i][0] = c, l->arg[i][1] = r;
        at += k;
    }
    l->lib = lib;
    *used = at;
    return true;
}

char *nj_plan_text(const nj_plan_params *pp)
{
    if (!pp) return NULL;
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "pass=%s family=%s template=%s block=%d vec=%d rows_per_block=%d split=%d regs_cache=%d "
                  "loop=%d ",
                  pp->pass == NJ_PASS_BACKWARD ? "bwd" : "fwd", plan_family_name(pp->family),
                  pp->template_name ? pp->template_name : "-", pp->block, pp->vec, pp->rows_per_block, pp->split,
                  pp->regs_cache, pp->grid_loop);
    if (pp->chans) nj_buf_printf(&b, "chans=%d tile=%d ", pp->chans, pp->tile); /* channels-last family only */
    nj_buf_printf(&b, "variant=%s align=0x%x workspace=%llu+%llu*rows launches=%d", pp->unaligned ? "unaligned" : "main",
                  pp->align_opds, (unsigned long long)pp->workspace_fixed, (unsigned long long)pp->workspace_per_row,
                  pp->nlaunch);
    for (int i = 0; i < pp->nlaunch && i < NJ_MAX_LAUNCHES; i++) {
        nj_buf_append(&b, " [", 2);
        plan_launch_text(&b, &pp->launch[i]);
        nj_buf_append(&b, "]", 1);
    }
    return nj_buf_take(&b);
}

char *nj_launches_to_text(const nj_plan_params *pp)
{
    if (!pp) return NULL;
    nj_buf b;
    nj_buf_init(&b);
    nj_buf_printf(&b, "launches %d\n", pp->nlaunch);
    for (int i = 0; i < pp->nlaunch && i < NJ_MAX_LAUNCHES; i++) {
        plan_launch_text(&b, &pp->launch[i]);
        nj_buf_append(&b, "\n", 1);
    }
    return nj_buf_take(&b);
}

static bool plan_kernel_name_ok(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

/* Parses nj_launches_to_text output into pp->launch / pp->nlaunch (other fields untouched). */
nj_status nj_launches_from_text(const char *text, nj_plan_params *pp)
{
    NJ_RETURN_IF(!text || !pp, NJ_ERR_NULL_POINTER, "launches: NULL argument");
    int n = -1, used = 0;
    NJ_RETURN_IF(sscanf(text, "launches %d\n%n", &n, &used) != 1 || used == 0 || n < 0 || n > NJ_MAX_LAUNCHES,
                 NJ_ERR_PARSE, "launches: bad header");
    const char *p = text + used;
    nj_launch ls[NJ_MAX_LAUNCHES];
    memset(ls, 0, sizeof ls);
    for (int i = 0; i < n; i++) {
        nj_launch *l = &ls[i];
        char name[64];
        long long rm, rd, cap;
        unsigned shmem;
        int k = 0;
        int got = sscanf(p, "%63s %d %d %d %d %d %d %lld %lld %lld %u%n", name, &l->block[0], &l->block[1],
                         &l->block[2], &l->grid_x, &l->grid_y, &l->grid_z, &rm, &rd, &cap, &shmem, &k);
        int tail = 0;
        if (got == 11 && k > 0 && p[k] == ' ' && !plan_parse_lib(p + k, l, &tail))
            return nj_fail(NJ_ERR_PARSE, "launches: bad library arguments on line %d", i + 1);
        k += tail;
        NJ_RETURN_IF(got != 11 || k == 0 || p[k] != '\n', NJ_ERR_PARSE, "launches: bad launch line %d", i + 1);
        NJ_RETURN_IF(!plan_kernel_name_ok(name) || strlen(name) >= sizeof l->kernel, NJ_ERR_PARSE,
                     "launches: bad kernel name on line %d", i + 1);
        for (int d = 0; d < 3; d++)
            NJ_RETURN_IF(l->block[d] < 1 || l->block[d] > 1024, NJ_ERR_PARSE, "launches: bad block on line %d", i + 1);
        NJ_RETURN_IF(l->grid_x < 0 || l->grid_y < 0 || l->grid_z < 0 || rm < 0 || rd < 0 || cap < 0 || cap > 0x7fffffff,
                     NJ_ERR_PARSE, "launches: negative grid or bad cap on line %d", i + 1);
        memcpy(l->kernel, name, strlen(name) + 1); /* length checked above */
        l->row_mult = rm, l->row_div = rd, l->grid_x_cap = cap, l->shmem = shmem;
        p += k + 1;
    }
    NJ_RETURN_IF(*p != '\0', NJ_ERR_PARSE, "launches: trailing text");
    memcpy(pp->launch, ls, sizeof ls);
    pp->nlaunch = n;
    return NJ_OK;
}
