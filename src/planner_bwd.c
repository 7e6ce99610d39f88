/* Backward planner (planner_bwd.h).
 *
 * GENERAL family (bwd_general.cu), valid for every canonical problem:
 *  - nj_bwd_dx: a block per statistic walking the reduction twice (two block sums, then dx);
 *  - nj_bwd_pgrad (with scale or bias): a block per feature element walking the non-feature index space
 *    in a fixed order. Its grid is fixed (not a function of the batch), so the split of work between
 *    threads, and with it the rounding, is the same on every run: deterministic without atomics.
 * ROW family (bwd_row.cu): see plan_bwd_row. COLUMN family (bwd_column.cu): see plan_bwd_column.
 * Everything here is a function of (canonical problem, device props) and goes into nj_plan_text. */
#include "planner_bwd.h"

#include <stdio.h>
#include <string.h>


/* Column-tiled dgamma/dbeta (bwd_pgrad_col.cuh) when the innermost axis is a feature axis of stride 1 in
 * x and dy with at least NJ_BWD_COL_MIN columns: a block per 32 columns walks the non-feature space
 * with coalesced reads, split NJ_S ways (fixed by the plan) so that few columns still fill the GPU. */
#define NJ_BWD_COL_MIN 16
#define NJ_BWD_MAX_SPLIT 128

static bool bwd_pgrad_col_ok(const nj_canon *c)
{
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    return c->param_size > 0 && in->feature && in->extent >= NJ_BWD_COL_MIN && in->stride[NJ_OPD_X] == 1 &&
           in->stride[NJ_OPD_DY] == 1;
}

static void plan_pgrad_col(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int64_t tiles = c->param_size / ec * ((ec + 31) / 32);
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t want = (int64_t)sms * 8; /* 256-thread blocks: 8 fill an SM */
    int64_t split = want / tiles;
    if (split < 1) split = 1;
    if (split > NJ_BWD_MAX_SPLIT) split = NJ_BWD_MAX_SPLIT;
    /* a block per (tile, piece) up to four waves, a thread per column of the sums: fixed grids. Past four
     * waves (many narrow tiles, e.g. 10 rows of 10^7 columns: walks of 10 x 32 elements) the blocks loop
     * over the tiles (the kernel sees grid_x < its tasks); else no loop (it costs NVRTC 7-14 ms). */
    int64_t tasks = tiles * split;
    nj_plan_add_launch(pp, "nj_bwd_pgrad_col", 256, 1, 1, (int32_t)(tasks < want * 4 ? tasks : want * 4));
    if (split > 1) {
        /* split s's partial of gamma element j at [s][j], of beta at [split + s][j] */
        int64_t ps = c->param_size;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0}, [NJ_COLSUM_NPARTS] = {split, 0},
                                             [NJ_COLSUM_S_OUTER] = {ps, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                             [NJ_COLSUM_BASE_B] = {split * ps, 0}};
        nj_plan_add_colsum(pp, arg);
        pp->workspace_fixed = (uint64_t)split * (uint64_t)c->param_size * 2u * sizeof(float);
    }
}

/* The dgamma/dbeta launches of the general and column families (none without scale/bias). */
static void bwd_plan_pgrad(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    if (bwd_pgrad_col_ok(c)) {
        plan_pgrad_col(c, dev, pp);
    } else if (c->param_size > 0) {
        /* the walk per feature element is batch-dependent (run-time): a mid-size block covers both */
        int32_t pb = 256, sms = dev->sm_count > 0 ? dev->sm_count : 132;
        /* Few feature elements (BatchNorm's channels: 64 blocks for a 132-SM GPU): each walk is cut into
         * NJ_S pieces, a block each (about 4 blocks of 256 an SM in all), whose sums the second launch
         * adds in piece order per feature element. */
        int64_t split = (4 * (int64_t)sms + c->param_size - 1) / c->param_size;
        if (split > NJ_BWD_MAX_SPLIT) split = NJ_BWD_MAX_SPLIT;
        /* a block per (feature element, piece): split > 1 only below 4 * sms elements; past two waves of
         * feature elements the blocks loop over them (the kernel sees grid_x < param_size) */
        if (split <= 1) {
            int64_t cap = (int64_t)sms * (2048 / pb) * 2;
            nj_plan_add_launch(pp, "nj_bwd_pgrad", pb, 1, 1, (int32_t)(c->param_size < cap ? c->param_size : cap));
            return;
        }
        nj_plan_add_launch(pp, "nj_bwd_pgrad", pb, 1, 1, (int32_t)(c->param_size * split));
        /* piece q's pair (gamma, beta) of element j at [q][j][2] */
        int64_t ps = c->param_size;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0}, [NJ_COLSUM_NPARTS] = {split, 0},
                                             [NJ_COLSUM_S_OUTER] = {2 * ps, 0}, [NJ_COLSUM_S_COL] = {2, 0},
                                             [NJ_COLSUM_BASE_B] = {1, 0}};
        nj_plan_add_colsum(pp, arg);
        pp->workspace_fixed = (uint64_t)split * (uint64_t)c->param_size * 2u * sizeof(float);
    }
}

/* Statistics of 2^18 elements and more are cut into pieces of about 2^15, a block each (at most 256 a
 * statistic), as in the forward row plan: a block per statistic would leave most SMs idle for a few long
 * rows (nv_norms' 10 x 10^7 LayerNorm). The pieces' sums go through the workspace, after the fixed
 * region of the parameter-gradient launches. */
#define NJ_BWD_SPLIT_MIN (1 << 18)
#define NJ_BWD_SPLIT_PIECE (1 << 15)
#define NJ_BWD_SPLIT_MAX 256

static nj_status plan_bwd_general(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    pp->family = NJ_FAMILY_GENERAL;
    pp->template_name = "bwd_general.cu";
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->regs_cache = 0;
    pp->block = nj_plan_walk_block(c->reduce_size);
    if (c->reduce_size >= NJ_BWD_SPLIT_MIN) {
        int64_t pieces = (c->reduce_size + NJ_BWD_SPLIT_PIECE - 1) / NJ_BWD_SPLIT_PIECE;
        pp->split = (int32_t)(pieces < NJ_BWD_SPLIT_MAX ? pieces : NJ_BWD_SPLIT_MAX);
        nj_plan_add_launch(pp, "nj_bwd_dx_part", pp->block, c->kept_inner * pp->split, 1, 0);
        nj_plan_add_launch(pp, "nj_bwd_dx", pp->block, c->kept_inner * pp->split, 1, 0);
        /* (sum g, sum g * xhat) a piece, and centered sum (x - mean) * rstd: the saved mean's correction */
        uint64_t per_piece = (c->flags & NJ_FLAG_CENTER) ? 3u : 2u;
        pp->workspace_per_row = (uint64_t)c->kept_inner * (uint64_t)pp->split * per_piece * sizeof(float);
    } else {
        nj_plan_add_launch(pp, "nj_bwd_dx", pp->block, c->kept_inner, 1, 0);
        nj_plan_grid_loop(pp, c->reduce_size, dev);
    }
    bwd_plan_pgrad(c, dev, pp);
    return NJ_OK;
}

/* ROW family (bwd_row.cu): the ROW kind whose only feature axis, if any, is the row (LayerNorm and
 * RMSNorm over the last axes). Rows up to NJ_BWD_WARP_ROW get a warp each; longer ones a block sized for
 * about NJ_BWD_ELEMS elements a thread, whose column sums stay in registers across rows up to
 * NJ_BWD_ROW_MAX (beyond, they would need more: see NJ_BWD_ROW_LONG). */
#define NJ_BWD_WARP_ROW 256
#define NJ_BWD_ELEMS 8
#define NJ_BWD_ROW_MAX 16384
/* Longer rows with gamma/beta: the row kernel writes dx only and the column-tiled dgamma/dbeta
 * launches (bwd_pgrad_col.cuh) re-read x and dy; from NJ_BWD_ROW_LONG on, the general family splits
 * each row over blocks instead. */
#define NJ_BWD_ROW_LONG (1 << 18)

static bool bwd_row_ok(const nj_canon *c)
{
    if (c->kind != NJ_KIND_ROW || c->reduce_size > INT32_MAX / 2) return false;
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    if (!in->reduce || in->stride[NJ_OPD_X] != 1 || in->stride[NJ_OPD_DY] != 1 || in->stride[NJ_OPD_DX] != 1)
        return false;
    if (c->param_size == 0) return true;
    return c->reduce_size < NJ_BWD_ROW_LONG && c->param_size == c->reduce_size && in->feature &&
           in->stride[NJ_OPD_PARAM] == 1;
}

/* Widest vector width for x, dy, dx along the row: a chunk stays in the row, within 16 bytes, and
 * starts aligned (kept strides multiples of it). Pointers and batch strides are checked at launch
 * (align_opds; nj_plan_variant). */
static int32_t bwd_row_vec(const nj_canon *c)
{
    static const nj_operand opds[] = {NJ_OPD_X, NJ_OPD_DY, NJ_OPD_DX};
    int32_t maxb = 1;
    for (size_t i = 0; i < NJ_ARRAY_LEN(opds); i++) {
        int32_t b = (int32_t)nj_dtype_size((nj_dtype)c->dtype[opds[i]]);
        if (b > maxb) maxb = b;
    }
    for (int32_t v = 8; v > 1; v /= 2) {
        if (v * maxb > 16 || c->reduce_size % v != 0) continue;
        bool ok = true;
        for (size_t i = 0; i < NJ_ARRAY_LEN(opds) && ok; i++)
            for (int a = 1; a < c->rank - 1 && ok; a++)
                if (c->axes[a].stride[opds[i]] % v != 0) ok = false;
        if (ok) return v;
    }
    return 1;
}

static nj_status plan_bwd_row(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t n = c->reduce_size;
    int32_t maxt = dev->max_threads_per_block >= 64 ? dev->max_threads_per_block : 1024;
    pp->family = NJ_FAMILY_ROW;
    pp->template_name = "bwd_row.cu";
    pp->vec = bwd_row_vec(c);
    if (pp->vec > 1) pp->align_opds = 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX;
    /* gamma (and beta under an activation) load a vector a chunk, along the row like x */
    if (pp->vec > 1 && c->param_size > 0) pp->align_opds |= 1u << NJ_OPD_PARAM;
    pp->split = 1;
    pp->regs_cache = 0;
    if (n <= NJ_BWD_WARP_ROW) {
        pp->block = 256;
        pp->rows_per_block = pp->block / 32;
    } else {
        int64_t t = (n / NJ_BWD_ELEMS + 31) / 32 * 32;
        /* Up to 1024 threads when each then owns one vector chunk (its column sums: 2 x vec registers,
         * 51-56 at 1024 threads for 16-bit rows of 5120 and 8192, one unrolled chunk instead of two:
         * ~10 ms less NVRTC); else at most 512: __launch_bounds__(512) leaves 128 registers a thread
         * for the column sums of several chunks (10000 f32 rows spilled at 1024). */
        int64_t one_chunk = (n / pp->vec + 31) / 32 * 32;
        int64_t cap = one_chunk <= maxt ? 1024 : 512;
        if (cap > maxt) cap = maxt;
        pp->block = (int32_t)(t < 64 ? 64 : t > cap ? cap : t);
        pp->rows_per_block = 1;
    }
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    if (c->param_size == 0 || n > NJ_BWD_ROW_MAX) {
        nj_plan_add_launch(pp, "nj_bwd_row", pp->block, c->kept_inner, 1, 0);
        pp->launch[0].row_div = pp->rows_per_block;
        nj_plan_grid_loop(pp, (int64_t)pp->rows_per_block * n, dev);
        bwd_plan_pgrad(c, dev, pp); /* none without gamma/beta */
        return NJ_OK;
    }
    /* A fixed number of blocks (one partial row each), 1024 threads an SM. A 512-thread block whose
     * threads own one vector chunk each was meant to fit twice (56-64 registers a thread); one that owns
     * several chunks holds up to 128 registers a thread: one block an SM. On the H200, two 512-thread
     * blocks an SM took the bf16 RMSNorm backward of 32768 x 4096 from 2.26 to 3.09 TB/s. The saved-mean
     * correction (numerics) has since taken that kernel to 75-76 registers: one block an SM is resident
     * and the slots run in two waves (LayerNorm bf16 32768 x 4096: 222 -> 263 us); __launch_bounds__
     * (512, 2) spilled. Getting the 64 registers back is open work. */
    int64_t one_chunk = (n / pp->vec + 31) / 32 * 32;
    int32_t per_sm = pp->block < 512 ? 1024 / pp->block : pp->block == 512 && one_chunk <= 512 ? 2 : 1;
    int32_t nslot = sms * per_sm;
    nj_plan_add_launch(pp, "nj_bwd_row", pp->block, 1, 1, nslot);
    /* slot k's partial row of gamma at [k][n], of beta at [nslot + k][n] */
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {n, 0}, [NJ_COLSUM_NPARTS] = {nslot, 0},
                                         [NJ_COLSUM_S_OUTER] = {n, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                         [NJ_COLSUM_BASE_B] = {(int64_t)nslot * n, 0}};
    nj_plan_add_colsum(pp, arg);
    pp->workspace_fixed = (uint64_t)nslot * (uint64_t)n * 2u * sizeof(float);
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
static nj_status plan_bwd_column(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int64_t tiles = c->kept_inner / ec * ((ec + 31) / 32);
    pp->family = NJ_FAMILY_COLUMN;
    pp->template_name = "bwd_column.cu";
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = nj_plan_column_split(c, dev);
    pp->block = 256;
    uint64_t s = (uint64_t)pp->split;
    bool fused = bwd_column_fused(c);
    if (s == 1) {
        nj_plan_add_launch(pp, "nj_bwd_column", pp->block, tiles, 1, 0);
    } else {
        /* a piece's two sums per column, then a tile's two means: [tile][piece][2][32], [tile][2][32] over
         * the batch, after the fused partial rows (2 x ec a row, outer index and piece) when fused, and
         * after the fixed region of the dgamma/dbeta launches (added below, once those are planned).
         * Centered, a piece also sums (x - mean) * rstd (the saved mean's correction, bwd_lib.cuh): the
         * merge then takes 64 items a tile, [a: sum g | sum xhat][b: sum g * xhat | unused] a piece. */
        int64_t ipt = (c->flags & NJ_FLAG_CENTER) ? 64 : 32, q = 2 * ipt; /* items a tile, floats a piece */
        int64_t si = (int64_t)s, n = c->reduce_size, sums = fused ? 2 * (c->kept_inner / ec) * si * ec : 0;
        nj_plan_add_launch(pp, "nj_bwd_column_part", pp->block, tiles * pp->split, 1, 0);
        const int64_t arg[NJ_LIB_NARGS][2] = {
            [NJ_MERGE_NITEMS] = {0, tiles * ipt}, [NJ_MERGE_NPARTS] = {si, 0},  [NJ_MERGE_RADIX] = {ipt, 0},
            [NJ_MERGE_IN_BASE] = {0, sums},       [NJ_MERGE_S_HI] = {si * q, 0}, [NJ_MERGE_S_LO] = {1, 0},
            [NJ_MERGE_S_PART] = {q, 0},           [NJ_MERGE_OFF_B] = {ipt, 0},
            [NJ_MERGE_OUT_BASE] = {0, sums + tiles * si * q},                   [NJ_MERGE_O_HI] = {q, 0},
            [NJ_MERGE_O_LO] = {1, 0},             [NJ_MERGE_O_B] = {ipt, 0},    [NJ_MERGE_MODE] = {NJ_MERGE_SUMS, 0},
            [NJ_MERGE_N] = {n, 0}};
        nj_plan_add_merge(pp, arg);
        nj_plan_add_launch(pp, "nj_bwd_column", pp->block, tiles * pp->split, 1, 0);
        pp->workspace_per_row = (uint64_t)tiles * (s + 1) * (uint64_t)q * sizeof(float);
    }
    if (fused) {
        /* [2][rows * ko * split][ec]: a partial row per outer index (kept_inner / ec a row) and piece */
        int64_t parts = c->kept_inner / ec * pp->split;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ec, 0}, [NJ_COLSUM_NPARTS] = {0, parts},
                                             [NJ_COLSUM_S_OUTER] = {ec, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                             [NJ_COLSUM_BASE_B] = {0, parts * ec}};
        nj_plan_add_colsum(pp, arg);
        pp->workspace_per_row += (uint64_t)c->kept_inner * s * 2u * sizeof(float);
        return NJ_OK;
    }
    bwd_plan_pgrad(c, dev, pp);
    for (int32_t i = 0; i < pp->nlaunch; i++) { /* the split's region follows the dgamma/dbeta launches' fixed one */
        if (pp->launch[i].lib != NJ_LIB_MERGE) continue;
        pp->launch[i].arg[NJ_MERGE_IN_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
        pp->launch[i].arg[NJ_MERGE_OUT_BASE][0] += (int64_t)(pp->workspace_fixed / sizeof(float));
    }
    return NJ_OK;
}

/* The set corrections dl (templates/bwd_lib.cuh: the saved float32 mean's rounding) that a dx kernel
 * leaves for the separate dgamma/dbeta walks: a float a statistic after everything else, written
 * and read only for sets whose |mean| * rstd exceeds NJ_FIX_RATIO (none for ordinary data). */
static void bwd_reserve_dl(const nj_canon *c, nj_plan_params *pp)
{
    if (!(c->flags & NJ_FLAG_CENTER)) return;
    for (int32_t i = 0; i < pp->nlaunch; i++)
        if (!strcmp(pp->launch[i].kernel, "nj_bwd_pgrad") || !strcmp(pp->launch[i].kernel, "nj_bwd_pgrad_col")) {
            pp->workspace_per_row += (uint64_t)c->kept_inner * sizeof(float);
            return;
        }
}

static nj_status plan_bwd_family(const nj_canon *c, const nj_device_props *dev, nj_plan_params *out)
{
    if (bwd_row_ok(c)) return plan_bwd_row(c, dev, out);
    if (c->kind == NJ_KIND_COLUMN && c->axes[c->rank - 1].extent >= NJ_BWD_COL_MIN) return plan_bwd_column(c, dev, out);
    if (nj_plan_cl_ok(c, NJ_PASS_BACKWARD)) return nj_plan_bwd_channels_last(c, dev, out);
    return plan_bwd_general(c, dev, out);
}

nj_status nj_plan_backward(const nj_canon *c, const nj_device_props *dev, nj_plan_params *out)
{
    NJ_RETURN_IF(!c || !dev || !out, NJ_ERR_NULL_POINTER, "planner: NULL argument");
    memset(out, 0, sizeof *out);
    NJ_RETURN_IF(c->rank < 2 || c->rank > NJ_CANON_MAX_AXES, NJ_ERR_INTERNAL, "planner: canonical rank %d", c->rank);
    NJ_RETURN_IF(c->reduce_size < 1 || c->kept_inner < 1, NJ_ERR_INTERNAL, "planner: reduce size %lld, kept %lld",
                 (long long)c->reduce_size, (long long)c->kept_inner);
    NJ_RETURN_IF(c->param_size < 0 || c->param_size > INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "planner: %lld gamma elements", (long long)c->param_size);
    int64_t nonfeat = 1; /* the parameter-gradient walks index the non-batch, non-feature space in 32 bits */
    for (int a = 1; a < c->rank; a++)
        if (!c->axes[a].feature) nonfeat = nonfeat > INT32_MAX / c->axes[a].extent ? INT32_MAX : nonfeat * c->axes[a].extent;
    NJ_RETURN_IF(c->param_size > 0 && nonfeat >= INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "planner: backward with scale/bias over more than 2^31 - 1 elements per batch row and feature");
    out->pass = NJ_PASS_BACKWARD;
    NJ_TRY(plan_bwd_family(c, dev, out));
    bwd_reserve_dl(c, out);
    return NJ_OK;
}
