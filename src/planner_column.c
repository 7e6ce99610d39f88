/* COLUMN family (fwd_column.cu, bwd_column.cu): the COLUMN kind with at least NJ_COLUMN_MIN
 * contiguous kept columns: a block per tile of 32 x vec columns (a lane owns vec adjacent columns, one
 * vector access a walk step), 8 warps walking the reduction (coalesced), unroll loads deep.
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

bool nj_column_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    (void)dev; /* the test does not depend on the device */
    (void)pass; /* the same test for both passes */
    return c->kind == NJ_KIND_COLUMN && c->axes[c->rank - 1].extent >= NJ_COLUMN_MIN;
}

/* Operands the column kernels access vec columns at a time: the activations (gamma and beta are loaded
 * a column at a time: constant down a BatchNorm column, cached). */
static bool col_vector_opd(const nj_canon *c, nj_pass pass, int o)
{
    switch (o) {
    case NJ_OPD_X: return true;
    case NJ_OPD_Y: return pass == NJ_PASS_FORWARD;
    case NJ_OPD_RES: return pass == NJ_PASS_FORWARD && (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return pass == NJ_PASS_FORWARD && (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    case NJ_OPD_DY:
    case NJ_OPD_DX: return pass == NJ_PASS_BACKWARD;
    default: return false;
    }
}

/* Vector width v is valid when a lane's v columns are one aligned access of at most 16 bytes in every
 * vector operand: v divides the columns, the columns have unit stride and every other kept or reduced
 * stride is a multiple of v (base pointers and batch strides are checked at launch: align_opds). */
static bool col_vec_fits(const nj_canon *c, nj_pass pass, int32_t v)
{
    int cax = c->rank - 1;
    if (c->axes[cax].extent % v != 0) return false;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++) {
        if (!col_vector_opd(c, pass, o)) continue;
        if ((int64_t)v * (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]) > 16) return false;
        if (c->axes[cax].stride[o] != 1) return false;
        for (int a = 1; a < cax; a++)
            if (c->axes[a].stride[o] % v != 0) return false;
    }
    return true;
}

static uint32_t col_align_opds(const nj_canon *c, nj_pass pass)
{
    uint32_t m = 0;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (col_vector_opd(c, pass, o)) m |= 1u << o;
    return m;
}

/* Independent loads a thread has in flight down its columns (the walk unrolled that far): about 32
 * bytes of x a thread, 2 to 8 loads; 64 in a whole (unsplit) walk. The kernels hold 64 to 80
 * registers, so an SM keeps 768 to 1024 of their threads, not 2048: at 32 bytes a thread (16-byte
 * vectors unrolled 2) a whole walk had 24-32 KB an SM in flight, about what Little's law asks on an
 * H200 (~4.1 TB/s over 132 SMs at ~650 ns: 20 KB), and LayerNorm f16 over the C of NCHW 56 x 56
 * forward waited on its loads in its last wave (79.8% of copy in the model, 86.6 at 64 bytes; f32's
 * backward 85.6 -> 88.8). A split walk (its pieces fill the GPU many times over) gains nothing from
 * more: InstanceNorm NDHWC moved by -1 to +2 points for 15-20 ms more compile a kernel.
 * NORMJIT_PLAN_NO_COL_FLIGHT64=1: 32 bytes everywhere, as before. */
#define NJ_COL_FLIGHT_BYTES 32
static int32_t col_unroll(const nj_canon *c, int32_t vec, bool whole)
{
    int64_t b = (int64_t)vec * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    bool deep = whole && !nj_plan_switched_off("COL_FLIGHT64");
    int64_t u = (deep ? 2 * NJ_COL_FLIGHT_BYTES : NJ_COL_FLIGHT_BYTES) / b;
    return (int32_t)(u < 2 ? 2 : u > 8 ? 8 : u);
}

/* Bytes of x in flight for one batch row of a split walk at width v: its blocks (tiles x pieces, as many
 * as the GPU holds at NJ_COL_BLOCKS_SM an SM) x 256 threads x a thread's loads in flight. */
static int64_t col_split_flight(const nj_canon *c, const nj_device_props *dev, int32_t v)
{
    int64_t ec = c->axes[c->rank - 1].extent, sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t blocks = c->kept_inner / ec * nj_ceil_div64(ec, 32 * v) * nj_plan_column_split(c, dev, 32 * v);
    if (blocks > sms * NJ_COL_BLOCKS_SM) blocks = sms * NJ_COL_BLOCKS_SM;
    return blocks * 256 * col_unroll(c, v, false) * v * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
}

/* Columns a lane owns (one vector access each walk step), among the widths that fit: those keeping at
 * least NJ_COL_LANES_PCT% of the tiles' lanes on columns (a tile's tail past the last column idles), or
 * where none does, the one with the most lanes busy (the narrower on a tie). A wider vector makes fewer,
 * larger accesses but fewer tiles, so fewer blocks: ConvNeXt's LayerNorm over C of 14 x 14 pixels
 * keeps 7 tiles of 32 (88% busy) rather than 2 of 128 (77%). Of those kept, the widest; for split walks
 * (whose pieces stop at NJ_COL_SPLIT_MAX) the widest within 1/8 of the most bytes in flight
 * (col_split_flight): BatchNorm NHWC f16 over 256 channels takes 2 columns a lane on 1024 blocks rather
 * than 8 on 256 (the batch of channels-last InstanceNorm, a run-time extent, is taken as 1). With 1-element accesses a warp moved 64 (f16) or 128 (f32) bytes a load: BatchNorm NHWC f16
 * ran at 20-60% of copy. */
#define NJ_COL_LANES_PCT 90
static int32_t col_vec(const nj_canon *c, const nj_device_props *dev, nj_pass pass, int32_t vmax)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int32_t best = 1;
    int64_t best_busy = 0; /* per mille of lanes on columns */
    bool split = c->reduce_size >= NJ_COL_SPLIT_MIN;
    for (int32_t v = 1; v <= vmax; v *= 2) {
        if (v > 1 && !col_vec_fits(c, pass, v)) continue;
        int64_t busy = 1000 * ec / (nj_ceil_div64(ec, 32 * v) * 32 * v);
        bool full = busy >= 10 * NJ_COL_LANES_PCT, best_full = best_busy >= 10 * NJ_COL_LANES_PCT;
        if (full && best_full && split && col_split_flight(c, dev, v) * 9 < col_split_flight(c, dev, best) * 8) continue;
        if (full || (!best_full && busy > best_busy)) {
            best = v;
            best_busy = busy;
        }
    }
    return best;
}

/* A whole walk's tile kept in shared memory between the statistics and the normalizing walk (P.stage,
 * fwd_column.cu): its bytes, or 0 where it is not worth it. The normalizing walk otherwise reads the tile
 * again from L1 or L2, and misses where the tiles of the resident blocks outgrow the caches. A tile of
 * NJ_COL_STAGE_MAX bytes leaves 8 blocks an SM (2048 threads); a larger one, up to NJ_COL_STAGE_WIDE,
 * halves them, which pays for 4-byte elements only (model, H200: LayerNorm over the C of NCHW f32
 * *x96x56x56 53.5 -> 84.6% of copy, *x192x28x28 54.7 -> 87.0, *x384x14x14 46.6 -> 77.9; but f16
 * *x96x56x56, whose tile of 48 KB already mostly hit, 79.8 -> 62.8). */
#define NJ_COL_STAGE_MIN (8 * 1024)
#define NJ_COL_STAGE_MAX (24 * 1024)
#define NJ_COL_STAGE_WIDE (48 * 1024)
/* The bytes of a whole walk's tile of `elem` bytes an element when staged, or 0: below NJ_COL_STAGE_MIN,
 * above max, or where `blocks` blocks, each with `reserve` bytes of its own shared arrays beside the tile,
 * would not fit an SM. */
static uint32_t col_stage_fit(const nj_canon *c, const nj_device_props *dev, int32_t tile, int64_t elem, int64_t max,
                              int64_t blocks, int64_t reserve)
{
    int64_t b = c->reduce_size * tile * elem;
    if (b < NJ_COL_STAGE_MIN || b > max || blocks * (b + reserve) > (int64_t)dev->max_shared_per_block) return 0;
    return (uint32_t)b;
}

/* The forward's staged tile: x (x + the residual as floats); four blocks an SM, 8 KB each beside the
 * tile (the statistics' shared arrays and the gamma/beta table). */
static uint32_t col_stage_bytes(const nj_canon *c, const nj_device_props *dev, int32_t tile)
{
    int64_t es = (c->flags & NJ_FLAG_RESIDUAL) ? 4 : nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    return col_stage_fit(c, dev, tile, es, es == 4 ? NJ_COL_STAGE_WIDE : NJ_COL_STAGE_MAX, 4, 8192);
}

/* The plan's last launch (its main one) stages its tile of `bytes` (none when 0). */
static void col_stage_set(nj_plan_params *pp, uint32_t bytes)
{
    if (bytes == 0) return;
    pp->stage = 1;
    pp->launch[pp->nlaunch - 1].shmem = bytes;
}

/* Sub-rows a warp takes in the forward (P.rows_per_block, fwd_column.cu): col_vec's tile of 32 x *vec
 * columns (its tiles and blocks, hence its split, unchanged) read with the widest vector that leaves at
 * least 4 lanes a row, 32 / RW lanes a sub-row, RW walk rows a warp at once. Channels-last InstanceNorm
 * of 32 f32 channels took 4-byte loads (a lane a channel, a row a warp), now 16 (4 channels a lane, 8
 * lanes a row, 4 rows a warp); LayerNorm over the C of NCHW f16 28 x 28, 2 pixels a lane on 13 tiles of
 * 64, now 8 (8 lanes a row). *vec: col_vec's, widened. The backward keeps a row a warp (bwd_column.cu). */
static int32_t col_fwd_rows(const nj_canon *c, int32_t *vec)
{
    if (nj_plan_switched_off("COL_ROWS")) return 1; /* NORMJIT_PLAN_NO_COL_ROWS=1: a row a warp, as before */
    int32_t v0 = *vec, tc = 32 * v0;
    for (int32_t v = 8; v > v0; v /= 2) {
        if (tc % v != 0 || tc / v < 4 || !col_vec_fits(c, NJ_PASS_FORWARD, v)) continue;
        *vec = v;
        return v / v0;
    }
    return 1;
}

/* gamma/beta read as vectors of the lane's columns (fwd_column.cu's PREG): constant down the walk,
 * contiguous along the columns, every kept stride a multiple of v; their alignment joins the launch's
 * check (align_opds) */
static bool col_param_vec(const nj_canon *c, int32_t v)
{
    if (!(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->axes[c->rank - 1].stride[NJ_OPD_PARAM] != 1) return false;
    for (int a = 0; a < c->rank - 1; a++) {
        int64_t st = c->axes[a].stride[NJ_OPD_PARAM];
        if (c->axes[a].reduce ? st != 0 : st % v != 0) return false;
    }
    return true;
}

/* A split walk pipelined in one launch (P.lag; docs/architecture.md "Pipelined split passes"): a zero
 * launch clears a counter a tile, then blocks alternate a piece's partial sums and, lag pieces behind, a
 * piece's normalization; the block of a tile's last piece merges the pieces (fwd_column.cu:
 * nj_col_merge). Where a tile's x (with the residual) and y fit NJ_PIPE_BYTES, x's second read comes
 * from L2: channels-last InstanceNorm of 32^3 volumes and 256 channels read x twice from DRAM (model,
 * H200: 62.7% of copy). Its tiles are one 128-byte line a walk row (32 f32 columns, 64 16-bit: 4
 * sub-rows a warp of 16-byte vectors), its pieces ~32 KB of x (half a wave of them in flight stays well
 * inside the L2), and so a tile's S pieces leave S x tile pairs to merge, read as 16-byte vectors, about
 * one L2 round trip a thread. NORMJIT_PLAN_NO_COL_PIPE=1: three launches. */
#define NJ_COL_PIPE_LINE 128
#define NJ_COL_PIPE_PIECE (32 * 1024)
static bool col_fwd_pipe(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent, n = c->reduce_size;
    int64_t ex = (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    int64_t cols = NJ_PIPE_BYTES / nj_plan_elem_bytes(c, NJ_PASS_FORWARD); /* walk rows x columns a tile */
    int32_t tc = (int32_t)(NJ_COL_PIPE_LINE / ex), v = (int32_t)(16 / ex);
    /* half a line (4 lanes a sub-row) where the columns are fewer (BatchNorm NHWC of 32 f16 channels) or a
     * whole line's tile is too big */
    if (ec % tc != 0 || n * tc > cols) tc /= 2;
    if (nj_plan_switched_off("COL_PIPE") || ec % tc != 0 || !col_vec_fits(c, NJ_PASS_FORWARD, v) || n * tc > cols)
        return false;
    int64_t s = nj_ceil_div64(n, NJ_COL_PIPE_PIECE / NJ_COL_PIPE_LINE);
    if (s > NJ_COL_SPLIT_MAX) s = NJ_COL_SPLIT_MAX;
    s = nj_ceil_div64(n, nj_ceil_div64(n, s)); /* pieces of ceil(n / s): none empty */
    if (s < 2) return false;
    int64_t tiles = c->kept_inner / ec * (ec / tc), q = 2 * (int64_t)tc;
    pp->vec = v;
    pp->rows_per_block = 32 * v / tc; /* 8 lanes a sub-row (4 for half a line) */
    pp->tile = tc;
    pp->split = (int32_t)s;
    pp->unroll = col_unroll(c, v, false);
    pp->block = 256;
    pp->align_opds = col_align_opds(c, NJ_PASS_FORWARD);
    if (col_param_vec(c, v)) pp->align_opds |= 1u << NJ_OPD_PARAM;
    /* four blocks an SM: the normalizing walk's ~56 registers */
    nj_plan_pipe(dev, s, 4, "nj_fwd_column_zero", tiles, "nj_fwd_column", tiles * s * 2, pp);
    /* per batch row: [tile][piece][sum, m2][tc] partials, [tile][2][tc] merged moments, a counter a tile */
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    nj_plan_ws(pp, NJ_WS_MEANS, 0, tiles * s * q);
    nj_plan_ws(pp, NJ_WS_FLAGS, 0, tiles * (s + 1) * q);
    pp->workspace_per_row = (uint64_t)(tiles * ((s + 1) * q + 1)) * sizeof(float);
    return true;
}

nj_status nj_plan_fwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    pp->vec = col_vec(c, dev, NJ_PASS_FORWARD, 8);
    pp->rows_per_block = col_fwd_rows(c, &pp->vec);
    pp->tile = 32 / pp->rows_per_block * pp->vec;
    if (pp->vec > 1) pp->align_opds = col_align_opds(c, NJ_PASS_FORWARD);
    if (pp->vec > 1 && col_param_vec(c, pp->vec)) pp->align_opds |= 1u << NJ_OPD_PARAM;
    int64_t tc = pp->tile, tiles = c->kept_inner / ec * nj_ceil_div64(ec, tc);
    pp->split = nj_plan_column_split(c, dev, pp->tile);
    if (pp->split > 1 && col_fwd_pipe(c, dev, pp)) return NJ_OK;
    pp->unroll = col_unroll(c, pp->vec, pp->split == 1);
    pp->block = 256;
    if (pp->split == 1) {
        nj_plan_add_launch(pp, "nj_fwd_column", pp->block, tiles, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        col_stage_set(pp, col_stage_bytes(c, dev, pp->tile));
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

/* The backward's staged tile (bwd_column.cu): x and dy of a whole walk, kept by the sums walk for the
 * dx walk, as the forward's (col_stage_bytes); 0 where not worth it. */
#define NJ_COL_STAGE_BWD_MAX (48 * 1024)
static uint32_t col_stage_bwd_bytes(const nj_canon *c, const nj_device_props *dev, int32_t tile)
{
    /* three blocks an SM, 12 KB each beside the tile: the sums' shared arrays, the row pairs and the
     * gamma/beta table */
    int64_t es = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) + nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]);
    return col_stage_fit(c, dev, tile, es, NJ_COL_STAGE_BWD_MAX, 3, 12288);
}

/* A staged backward tile too big for three blocks an SM, up to NJ_COL_STAGE_BWD_WIDE, fits two: those
 * take 512 threads each (16 KB beside the tile: the sums' shared arrays grow with the block), so the SM
 * keeps 1024 threads' loads in flight. Unstaged, such a walk read x and dy twice (f32 LayerNorm over the
 * C of NCHW *x384x14x14: 1.81x the ideal bytes, 37.6% of copy in the model). */
#define NJ_COL_STAGE_BWD_WIDE (100 * 1024)
#define NJ_COL_WIDE_BLOCK 512
static uint32_t col_stage_bwd_wide(const nj_canon *c, const nj_device_props *dev, int32_t tile)
{
    /* NORMJIT_PLAN_NO_COL_WIDE=1: such a tile is not staged, as before */
    if (nj_plan_switched_off("COL_WIDE")) return 0;
    if (dev->max_threads_per_block > 0 && dev->max_threads_per_block < NJ_COL_WIDE_BLOCK) return 0;
    int64_t es = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) + nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]);
    return col_stage_fit(c, dev, tile, es, NJ_COL_STAGE_BWD_WIDE, 2, 16384);
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

/* dgamma/dbeta fused into the dx walk when the walk's rows are gamma's elements (LayerNorm over the C of
 * NCHW: no kept axis a feature, every reduced axis one, gamma's strides row-major over them, so gamma's
 * index is the walk index): each warp adds its row's dz*xhat and dz over the tile's columns (a warp sum a
 * row) and writes the tile's pair; the library's column sum adds the tiles' pairs of each element. The
 * separate dgamma walk read x and dy again (103 of the 217 MB of ConvNeXt's f16 *x96x56x56). Whole walks
 * only, of at most 2048 rows (a split one, past 4096, keeps the separate walk). */
static bool bwd_column_rows_fused(const nj_canon *c)
{
    /* the tile's pairs are staged in shared memory (2 floats a walk row, at most 16 KB) */
    if (c->param_size <= 0 || c->param_size != c->reduce_size || c->reduce_size > 2048 || c->axes[0].feature)
        return false;
    int64_t expect = 1;
    for (int a = c->rank - 1; a >= 1; a--) {
        const nj_canon_axis *ax = &c->axes[a];
        if (ax->reduce != ax->feature) return false;
        if (!ax->reduce) continue;
        if (ax->stride[NJ_OPD_PARAM] != expect) return false;
        expect *= ax->extent;
    }
    return expect == c->param_size;
}

/* The split backward's layout, both ways (pipelined or not): floats a piece leaves a tile of tc columns
 * (a sum of g and of g * xhat a column; centered, of xhat too, beside an unused one: the merge's
 * [a | b] items), and the fused dgamma/dbeta partial rows before them (2 x ec a row, outer index and
 * piece; none unfused). */
static int64_t col_bwd_piece_floats(const nj_canon *c, int64_t tc) { return (c->flags & NJ_FLAG_CENTER) ? 4 * tc : 2 * tc; }
static int64_t col_bwd_fused_sums(const nj_canon *c, int64_t s, bool fused)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    return fused ? 2 * (c->kept_inner / ec) * s * ec : 0;
}

/* The backward's split walk pipelined (col_fwd_pipe's scheme): a tile's x, dy and dx within
 * NJ_PIPE_BWD_BYTES, pieces of ~32 KB of x and dy (up to 512 of them: at 25 MB a tile, pieces of 64 KB
 * gave 68.2% of copy, of 32 KB 78.7; model, H200). A tile's pieces leave Q floats each (the sums of g, g * xhat
 * and xhat a column), too many for one block to add while the tile's dx blocks wait (256 pieces of 32
 * columns: 128 KB), so they merge in two levels: the block that
 * completes a group of NJ_COL_PIPE_GROUP pieces adds the group's, and the one that completes the tile's
 * groups adds theirs into the means (col_lib.cuh: nj_col_sum_rows, which the forward's merge uses too). Only where
 * dgamma/dbeta are the fused partial rows or absent (the separate dgamma walks keep four launches). */
#define NJ_COL_PIPE_GROUP 16
static bool col_bwd_pipe(const nj_canon *c, const nj_device_props *dev, bool fused, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent, n = c->reduce_size, eb = nj_plan_elem_bytes(c, NJ_PASS_BACKWARD);
    if (nj_plan_switched_off("COL_PIPE") || (!fused && (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS))) || ec % 32 != 0)
        return false;
    /* the widest vector whose tile keeps within half the limit: there the second reads hit (InstanceNorm
     * 4 x 32^3 x 256 f32 at 2 columns a lane, 25 MB a tile, moved 1.14x the ideal bytes, 68.2% of copy;
     * at 1, 12.6 MB, 1.03x and 90.8%; model, H200) */
    int32_t v = pp->vec;
    while (v > 1 && (ec % (32 * v) != 0 || n * 32 * v > NJ_PIPE_BWD_BYTES / 2 / eb)) v /= 2;
    int64_t tc = 32 * (int64_t)v;
    if (n * tc > NJ_PIPE_BWD_BYTES / eb) return false;
    int64_t xd = (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) + (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]);
    int64_t s = nj_ceil_div64(n, nj_ceil_div64(NJ_COL_PIPE_PIECE, tc * xd));
    if (s > 2 * NJ_COL_SPLIT_MAX) s = 2 * NJ_COL_SPLIT_MAX; /* the merge takes them in groups */
    s = nj_ceil_div64(n, nj_ceil_div64(n, s)); /* pieces of ceil(n / s): none empty */
    if (s < 2) return false;
    int64_t ng = nj_ceil_div64(s, NJ_COL_PIPE_GROUP), tiles = c->kept_inner / ec * (ec / tc);
    int64_t q = col_bwd_piece_floats(c, tc), sums = col_bwd_fused_sums(c, s, fused);
    pp->vec = v;
    pp->tile = (int32_t)tc;
    pp->split = (int32_t)s;
    pp->pipe_group = NJ_COL_PIPE_GROUP;
    pp->unroll = col_unroll(c, v, false);
    pp->align_opds = v > 1 ? col_align_opds(c, NJ_PASS_BACKWARD) : 0;
    nj_plan_pipe(dev, s, 4, "nj_bwd_column_zero", tiles * (ng + 1), "nj_bwd_column", tiles * s * 2, pp);
    /* per batch row: the fused partial rows, [tile][piece][q] sums, [tile][q] means then [tile][group][q]
     * group sums, [tile][group + 1] counters */
    nj_plan_ws(pp, NJ_WS_PARTS, 0, sums);
    nj_plan_ws(pp, NJ_WS_MEANS, 0, sums + tiles * s * q);
    nj_plan_ws(pp, NJ_WS_FLAGS, 0, sums + tiles * (s + 1 + ng) * q);
    pp->workspace_per_row = (uint64_t)(tiles * ((s + 1 + ng) * q + ng + 1)) * sizeof(float);
    return true;
}

/* COLUMN family (bwd_column.cu): the COLUMN kind with at least NJ_COLUMN_MIN neighbouring kept columns:
 * a block per tile of 32 x vec columns, 8 warps walking the reduction (coalesced), unroll loads deep. Long walks are split as the
 * forward's are (nj_plan_column_split): a piece's sums, a tile's means, a piece's dx, or pipelined (col_bwd_pipe). */
nj_status nj_plan_bwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    /* at most 4 columns a lane: each carries mean, rstd, two sums, two means (and dgamma/dbeta terms) in
     * registers, and 8 would spill */
    pp->vec = col_vec(c, dev, NJ_PASS_BACKWARD, 4);
    /* a whole walk whose tile of x and dy fits shared memory at a narrower vector stages it (the dx walk
     * then reads no global x or dy): f32 LayerNorm over the C of NCHW *x96x56x56 and *x192x28x28, 41.7
     * and 40.3 -> 67.0 and 66.5% of copy (model, H200). The forward gains nothing so: f16 *x96x56x56,
     * staged at 4 columns a lane rather than not at 8, 79.8 -> 61.1. */
    while (pp->vec > 1 && c->reduce_size < NJ_COL_SPLIT_MIN && !col_stage_bwd_bytes(c, dev, 32 * pp->vec) &&
           col_stage_bwd_bytes(c, dev, 16 * pp->vec))
        pp->vec /= 2;
    pp->tile = 32 * pp->vec;
    if (pp->vec > 1) pp->align_opds = col_align_opds(c, NJ_PASS_BACKWARD);
    int64_t tc = pp->tile, tiles = c->kept_inner / ec * nj_ceil_div64(ec, tc);
    pp->rows_per_block = 1;
    pp->split = nj_plan_column_split(c, dev, pp->tile);
    pp->unroll = col_unroll(c, pp->vec, pp->split == 1);
    pp->block = 256;
    uint64_t s = (uint64_t)pp->split;
    bool fused = bwd_column_fused(c);
    if (s == 1) {
        uint32_t staged = col_stage_bwd_bytes(c, dev, pp->tile);
        if (!staged && (staged = col_stage_bwd_wide(c, dev, pp->tile)) != 0) pp->block = NJ_COL_WIDE_BLOCK;
        nj_plan_add_launch(pp, "nj_bwd_column", pp->block, tiles, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        col_stage_set(pp, staged);
    } else if (col_bwd_pipe(c, dev, fused, pp)) {
        tiles = c->kept_inner / ec * (ec / pp->tile);
        s = (uint64_t)pp->split;
    } else {
        /* a piece's two sums per column, then a tile's two means: [tile][piece][2][tc], [tile][2][tc] over
         * the batch, after the fused partial rows (2 x ec a row, outer index and piece) when fused, and
         * after the fixed region of the dgamma/dbeta launches (added below, once those are planned).
         * Centered, a piece also sums (x - mean) * rstd (the saved mean's correction, bwd_lib.cuh): the
         * merge then takes 2 tc items a tile, [a: sum g | sum xhat][b: sum g * xhat | unused] a piece. */
        int64_t q = col_bwd_piece_floats(c, tc), ipt = q / 2; /* floats a piece, items a tile */
        int64_t si = (int64_t)s, n = c->reduce_size, sums = col_bwd_fused_sums(c, si, fused);
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
    if (s == 1 && bwd_column_rows_fused(c)) {
        /* [tiles a batch row x rows][n][2]: a tile's pair for each walk row (gamma element) */
        nj_plan_pgrad_rows(pp, c->reduce_size, tiles);
        return NJ_OK;
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
    if (pp->ws_used & (1u << NJ_WS_FLAGS)) pp->ws[NJ_WS_FLAGS].fixed += after;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        if (pp->launch[i].lib != NJ_LIB_MERGE) continue;
        pp->launch[i].arg[NJ_MERGE_IN_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
        pp->launch[i].arg[NJ_MERGE_OUT_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
    }
    return NJ_OK;
}
