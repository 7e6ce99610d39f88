/* COLUMN family (fwd_column.cu, bwd_column.cu): the COLUMN kind with at least NJ_COLUMN_MIN
 * contiguous kept columns: a block per tile of 32 columns, 8 warps walking the reduction (coalesced).
 * Long walks are cut into pieces, a block each (nj_plan_column_split), forward and backward alike. */
#include "planner_impl.h"


/* Column problems with at least NJ_COLUMN_MIN contiguous kept columns: tiles of 32 columns, 8 warps
 * walking the reduction. Fewer columns would leave most lanes idle: the general family does better. */
#define NJ_COLUMN_MIN 16

/* Long column walks (BatchNorm NHWC over N x H x W, channels-last InstanceNorm of volumes) left most SMs
 * idle at a block per tile: 2 x 128^3 x 64 ran on 4 blocks. From NJ_COL_SPLIT_MIN walk rows on, each
 * walk is cut into pieces, a block each, aiming at NJ_COL_BLOCKS_SM blocks an SM for one batch row (the
 * batch is a run-time extent), with pieces of at least NJ_COL_PIECE_MIN walk rows (16 steps of each
 * warp) and none empty. tile: the columns of a block's tile. */
#define NJ_COL_SPLIT_MIN 4096
#define NJ_COL_BLOCKS_SM 8
#define NJ_COL_PIECE_MIN 128
#define NJ_COL_SPLIT_MAX 256
int32_t nj_plan_column_split(const nj_canon *c, const nj_device_props *dev, int32_t tile)
{
    int64_t n = c->reduce_size, ec = c->axes[c->rank - 1].extent;
    if (n < NJ_COL_SPLIT_MIN) return 1;
    int64_t tiles = c->kept_inner / ec * nj_ceil_div64(ec, tile);
    int64_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t s = nj_ceil_div64(sms * NJ_COL_BLOCKS_SM, tiles);
    if (s > n / NJ_COL_PIECE_MIN) s = n / NJ_COL_PIECE_MIN;
    if (s > NJ_COL_SPLIT_MAX) s = NJ_COL_SPLIT_MAX;
    if (s < 2) return 1;
    return (int32_t)nj_ceil_div64(n, nj_ceil_div64(n, s)); /* pieces of ceil(n / s): none empty */
}

bool nj_column_applies(const nj_canon *c, nj_pass pass)
{
    (void)pass; /* the same test for both passes */
    return c->kind == NJ_KIND_COLUMN && c->axes[c->rank - 1].extent >= NJ_COLUMN_MIN;
}

/* Operands the forward column kernels access vec columns at a time: the activations (gamma and beta
 * are loaded a column at a time: constant down a BatchNorm column, cached). */
static bool col_fwd_vector_opd(const nj_canon *c, int o)
{
    switch (o) {
    case NJ_OPD_X:
    case NJ_OPD_Y: return true;
    case NJ_OPD_RES: return (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    default: return false;
    }
}

/* Vector width v is valid when a lane's v columns are one aligned access of at most 16 bytes in every
 * vector operand: v divides the columns, the columns have unit stride and every other kept or reduced
 * stride is a multiple of v (base pointers and batch strides are checked at launch: align_opds). */
static bool col_fwd_vec_fits(const nj_canon *c, int32_t v)
{
    int cax = c->rank - 1;
    if (c->axes[cax].extent % v != 0) return false;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++) {
        if (!col_fwd_vector_opd(c, o)) continue;
        if ((int64_t)v * (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]) > 16) return false;
        if (c->axes[cax].stride[o] != 1) return false;
        for (int a = 1; a < cax; a++)
            if (c->axes[a].stride[o] % v != 0) return false;
    }
    return true;
}

/* Columns a lane owns (one vector access each walk step): of the widths that fit, the one that makes
 * the fewest tiles, i.e. the most useful bytes an access instruction moves (a warp moves 32 x v columns
 * minus its tile's idle tail); on a tie the narrower (more lanes busy, fewer registers). With 1-element
 * accesses a warp moved 64 (f16) or 128 (f32) bytes a load: BatchNorm NHWC f16 ran at 20-60% of copy. */
static int32_t col_fwd_vec(const nj_canon *c)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int32_t best = 1;
    for (int32_t v = 2; v <= 8; v *= 2)
        if (col_fwd_vec_fits(c, v) && nj_ceil_div64(ec, 32 * v) < nj_ceil_div64(ec, 32 * best)) best = v;
    return best;
}

/* Independent loads a thread has in flight down its columns (the walk unrolled that far): about 32
 * bytes of x a thread, 2 to 8 loads. A full SM (2048 threads) then has ~64 KB of x in flight, what
 * Little's law asks on an H200 (~4.1 TB/s over 132 SMs at ~600-700 ns latency: 40-64 KB an SM); with 2
 * single-element loads it had 8 (f16) to 16 KB. */
#define NJ_COL_FLIGHT_BYTES 32
static int32_t col_unroll(const nj_canon *c, int32_t vec)
{
    int64_t b = (int64_t)vec * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    int64_t u = NJ_COL_FLIGHT_BYTES / b;
    return (int32_t)(u < 2 ? 2 : u > 4 ? 4 : u);
}

nj_status nj_plan_fwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    pp->vec = col_fwd_vec(c);
    pp->tile = 32 * pp->vec;
    pp->unroll = col_unroll(c, pp->vec);
    if (pp->vec > 1)
        for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
            if (col_fwd_vector_opd(c, o)) pp->align_opds |= 1u << o;
    int64_t tc = pp->tile, tiles = c->kept_inner / ec * nj_ceil_div64(ec, tc);
    pp->rows_per_block = 1;
    pp->split = nj_plan_column_split(c, dev, pp->tile);
    pp->block = 256;
    if (pp->split == 1) {
        nj_plan_add_launch(pp, "nj_fwd_column", pp->block, tiles, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        return NJ_OK;
    }
    /* partials per (tile, piece), statistics per tile, then the pieces normalized (fwd_column.cu); the
     * workspace holds [tile][piece][sum, m2][tc] partials, then [tile][mean, rstd][tc], over the batch */
    int64_t s = pp->split, n = c->reduce_size, q = 2 * tc;
    nj_plan_add_launch(pp, "nj_fwd_column_part", pp->block, tiles * pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_PART);
    const int64_t arg[NJ_LIB_NARGS][2] = {
        [NJ_MERGE_NITEMS] = {0, tiles * tc},    [NJ_MERGE_NPARTS] = {s, 0},      [NJ_MERGE_RADIX] = {tc, 0},
        [NJ_MERGE_S_HI] = {s * q, 0},           [NJ_MERGE_S_LO] = {1, 0},        [NJ_MERGE_S_PART] = {q, 0},
        [NJ_MERGE_OFF_B] = {tc, 0},             [NJ_MERGE_OUT_BASE] = {0, tiles * s * q},
        [NJ_MERGE_O_HI] = {q, 0},               [NJ_MERGE_O_LO] = {1, 0},        [NJ_MERGE_O_B] = {tc, 0},
        [NJ_MERGE_MODE] = {(c->flags & NJ_FLAG_CENTER) ? NJ_MERGE_STATS : NJ_MERGE_RMS, 0},
        [NJ_MERGE_N] = {n, 0},                  [NJ_MERGE_PLEN] = {nj_ceil_div64(n, s), 0}, [NJ_MERGE_CMUL] = {1, 0}};
    nj_plan_add_merge(pp, arg);
    nj_plan_add_launch(pp, "nj_fwd_column", pp->block, tiles * pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    nj_plan_ws(pp, NJ_WS_MEANS, 0, tiles * s * q);
    pp->workspace_per_row = (uint64_t)tiles * (uint64_t)(pp->split + 1) * (uint64_t)q * sizeof(float);
    return NJ_OK;
}

/* dgamma/dbeta fused into the column walk when the tile's columns are the only feature axis (channels-last
 * InstanceNorm and BatchNorm): each thread adds dz*xhat and dz down its column in the walk that sums g
 * and g*xhat anyway, the block's warps add theirs in order, and one partial row per outer index goes to
 * the workspace; the library's column sum (NJ_LIB_COLSUM) adds them per column in order. A separate
 * dgamma walk would read x and dy a second time and cost ~26 ms of NVRTC. */
static bool bwd_column_fused(const nj_canon *c)
{
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    return c->param_size > 0 && in->feature && in->stride[NJ_OPD_PARAM] == 1 && c->param_size == in->extent;
}

/* COLUMN family (bwd_column.cu): the COLUMN kind with at least NJ_BWD_COL_MIN neighbouring kept columns:
 * a block per tile of 32 columns, 8 warps walking the reduction (coalesced). Long walks are split as the
 * forward's are (nj_plan_column_split): a piece's sums, a tile's means, a piece's dx. */
nj_status nj_plan_bwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int64_t tiles = c->kept_inner / ec * ((ec + 31) / 32);
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = nj_plan_column_split(c, dev, 32);
    pp->block = 256;
    uint64_t s = (uint64_t)pp->split;
    bool fused = bwd_column_fused(c);
    if (s == 1) {
        nj_plan_add_launch(pp, "nj_bwd_column", pp->block, tiles, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
    } else {
        /* a piece's two sums per column, then a tile's two means: [tile][piece][2][32], [tile][2][32] over
         * the batch, after the fused partial rows (2 x ec a row, outer index and piece) when fused, and
         * after the fixed region of the dgamma/dbeta launches (added below, once those are planned).
         * Centered, a piece also sums (x - mean) * rstd (the saved mean's correction, bwd_lib.cuh): the
         * merge then takes 64 items a tile, [a: sum g | sum xhat][b: sum g * xhat | unused] a piece. */
        int64_t ipt = (c->flags & NJ_FLAG_CENTER) ? 64 : 32, q = 2 * ipt; /* items a tile, floats a piece */
        int64_t si = (int64_t)s, n = c->reduce_size, sums = fused ? 2 * (c->kept_inner / ec) * si * ec : 0;
        nj_plan_add_launch(pp, "nj_bwd_column_part", pp->block, tiles * pp->split, 1, 0);
        nj_plan_role(pp, NJ_ROLE_PART);
        const int64_t arg[NJ_LIB_NARGS][2] = {
            [NJ_MERGE_NITEMS] = {0, tiles * ipt}, [NJ_MERGE_NPARTS] = {si, 0},  [NJ_MERGE_RADIX] = {ipt, 0},
            [NJ_MERGE_IN_BASE] = {0, sums},       [NJ_MERGE_S_HI] = {si * q, 0}, [NJ_MERGE_S_LO] = {1, 0},
            [NJ_MERGE_S_PART] = {q, 0},           [NJ_MERGE_OFF_B] = {ipt, 0},
            [NJ_MERGE_OUT_BASE] = {0, sums + tiles * si * q},                   [NJ_MERGE_O_HI] = {q, 0},
            [NJ_MERGE_O_LO] = {1, 0},             [NJ_MERGE_O_B] = {ipt, 0},    [NJ_MERGE_MODE] = {NJ_MERGE_SUMS, 0},
            [NJ_MERGE_N] = {n, 0}};
        nj_plan_add_merge(pp, arg);
        nj_plan_add_launch(pp, "nj_bwd_column", pp->block, tiles * pp->split, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        nj_plan_ws(pp, NJ_WS_PARTS, 0, sums);
        nj_plan_ws(pp, NJ_WS_MEANS, 0, sums + tiles * si * q);
        pp->workspace_per_row = (uint64_t)tiles * (s + 1) * (uint64_t)q * sizeof(float);
    }
    if (fused) {
        /* [2][rows * ko * split][ec]: a partial row per outer index (kept_inner / ec a row) and piece */
        int64_t parts = c->kept_inner / ec * pp->split;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ec, 0}, [NJ_COLSUM_NPARTS] = {0, parts},
                                             [NJ_COLSUM_S_OUTER] = {ec, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                             [NJ_COLSUM_BASE_B] = {0, parts * ec}};
        nj_plan_add_colsum(pp, arg);
        pp->pgrad = NJ_PGRAD_FUSED;
        nj_plan_ws(pp, NJ_WS_PGRAD, 0, 0);
        pp->workspace_per_row += (uint64_t)c->kept_inner * s * 2u * sizeof(float);
        return NJ_OK;
    }
    nj_plan_pgrad(c, dev, pp);
    int64_t after = (int64_t)(pp->workspace_fixed / sizeof(float)); /* the split's regions follow that one */
    pp->ws[NJ_WS_PARTS].fixed += after;
    pp->ws[NJ_WS_MEANS].fixed += after;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        if (pp->launch[i].lib != NJ_LIB_MERGE) continue;
        pp->launch[i].arg[NJ_MERGE_IN_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
        pp->launch[i].arg[NJ_MERGE_OUT_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
    }
    return NJ_OK;
}
