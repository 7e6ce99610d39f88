/* GENERAL family (fwd_general.cu, bwd_general.cu), valid for every canonical problem: a block per
 * statistic walking the reduction with strided loads, split over blocks from NJ_SPLIT_MIN elements.
 *
 * Backward:
 *  - nj_bwd_dx: a block per statistic walking the reduction twice (two block sums, then dx);
 *  - with scale or bias constant over each set (InstanceNorm's, BatchNorm's channel: nj_pgrad_sets_ok),
 *    dgamma/dbeta from the dx walk's own sums, a pair a statistic, and the library's column sum;
 *  - split sets whose pieces each lie where gamma is constant (GroupNorm of NCHW: nj_pgrad_pieces_run),
 *    the same from the dx launch's walk, a pair a piece;
 *  - with other scale or bias, the separate dgamma/dbeta launches (nj_plan_pgrad): a block per feature
 *    element walking the non-feature index space in a fixed order. Its grid is fixed (not a function of
 *    the batch), so the split of work between threads, and with it the rounding, is the same on every
 *    run: deterministic without atomics. */
#include "planner_impl.h"

/* Pipelined split walks (nj_plan_split_pipe), forward, and backward where gamma/beta are absent or
 * constant over each set (InstanceNorm's 128^3 voxels): pieces of NJ_PIPE_GENERAL_ITERS elements a thread
 * (the walks are scalar); backward statistics of at most NJ_PIPE_BWD_BYTES of x, dy and dx. Their second
 * read of x and dy is that far back, plus the blocks in flight: InstanceNorm f32 (24 MB) past half the L2
 * of an H200, some of it misses. */
#define NJ_PIPE_GENERAL_ITERS 4

/* Whether the walks split: from NJ_SPLIT_MIN elements a statistic, or from NJ_GENERAL_SPLIT_FEW where the
 * statistics a batch row are fewer than the SMs (BatchNorm: a statistic a channel, N x H x W elements
 * each; f16 128 x 128 x 28 x 28 forward had 128 blocks of 100352 elements on 132 SMs, 18% of copy in the
 * model). Two pieces of NJ_SPLIT_PIECE at least, so that the part and main launches (without the pipe)
 * have pieces to split. */
#define NJ_GENERAL_SPLIT_FEW (2 * NJ_SPLIT_PIECE)
/* And from NJ_SPLIT_PIECE_MIN elements where a block a statistic would read x twice from DRAM: the
 * statistics of the blocks resident at once, x of each, past an H200's L2 (BatchNorm NCHW, a channel's
 * N x H x W: f16 256 x 512 x 28 x 28 is 401 KB a channel, 211 MB for 528 resident blocks; model, H200:
 * 65.4 -> 94.1% of copy forward, 58.9 -> 94.6 backward, pipelined). Not nearer the L2's size: 26 MB
 * (f16 32 x 512 x 28 x 28) lost more to the pipe's launches and merge than its second reads had (80.7 ->
 * 71.5). NORMJIT_PLAN_NO_GENERAL_L2=1: as before. */
#define NJ_GENERAL_L2_BYTES (50LL << 20)
static bool general_split(const nj_canon *c, const nj_device_props *dev)
{
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    if (c->reduce_size >= NJ_SPLIT_MIN) return true;
    int64_t resident = (int64_t)sms * (2048 / nj_plan_walk_block(c->reduce_size));
    if (c->reduce_size >= NJ_SPLIT_PIECE_MIN && !nj_plan_switched_off("GENERAL_L2") &&
        c->reduce_size * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) * resident > NJ_GENERAL_L2_BYTES)
        return true;
    return c->reduce_size >= NJ_GENERAL_SPLIT_FEW && c->kept_inner < sms && !nj_plan_switched_off("GENERAL_FEW");
}

bool nj_general_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    (void)dev; /* the test does not depend on the device */
    (void)c, (void)pass;
    return true;
}

nj_status nj_plan_fwd_general(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->regs_cache = 0;
    int64_t n = c->reduce_size;
    pp->block = nj_plan_walk_block(n);
    if (general_split(c, dev)) {
        /* BatchNorm over N x H x W: a block per channel left most SMs idle. Pipelined (nj_plan_split_pipe)
           where a statistic's x, residual and y fit NJ_PIPE_BYTES: [statistic][piece][sum, m2], then
           [statistic][shifted mean, rstd] */
        if (n <= NJ_PIPE_BYTES / nj_plan_elem_bytes(c, NJ_PASS_FORWARD) && !nj_plan_switched_off("SPLIT_PIPE"))
            nj_plan_split_pipe(c, dev, (int64_t)pp->block * NJ_PIPE_GENERAL_ITERS, 2, 2, "nj_fwd_general_zero",
                               "nj_fwd_general", pp);
        else nj_plan_fwd_split(c, "nj_fwd_general_part", "nj_fwd_general", pp);
        return NJ_OK;
    }
    nj_plan_add_launch(pp, "nj_fwd_general", pp->block, c->kept_inner, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    nj_plan_grid_loop(pp, n, dev);
    return NJ_OK;
}

nj_status nj_plan_bwd_general(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->regs_cache = 0;
    pp->block = nj_plan_walk_block(c->reduce_size);
    bool params = (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size > 0;
    bool split = general_split(c, dev);
    if (split && (!params || nj_pgrad_sets_ok(c)) &&
        c->reduce_size <= NJ_PIPE_BWD_BYTES / nj_plan_elem_bytes(c, NJ_PASS_BACKWARD) &&
        !nj_plan_switched_off("SPLIT_PIPE")) {
        /* pipelined (nj_plan_split_pipe): [statistic][piece][WQ] sums, [statistic][s1, s2, dl] */
        int32_t wq = (c->flags & NJ_FLAG_CENTER) ? 3 : 2;
        nj_plan_split_pipe(c, dev, (int64_t)pp->block * NJ_PIPE_GENERAL_ITERS, wq, 3, "nj_bwd_dx_zero", "nj_bwd_dx", pp);
    } else if (split) {
        pp->split = nj_plan_split_pieces(c->reduce_size, c->kept_inner);
        nj_plan_add_launch(pp, "nj_bwd_dx_part", pp->block, c->kept_inner * pp->split, 1, 0);
        nj_plan_role(pp, NJ_ROLE_PART);
        nj_plan_add_launch(pp, "nj_bwd_dx", pp->block, c->kept_inner * pp->split, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        /* (sum g, sum g * xhat) a piece, and centered sum (x - mean) * rstd: the saved mean's correction */
        uint64_t per_piece = (c->flags & NJ_FLAG_CENTER) ? 3u : 2u;
        pp->workspace_per_row = (uint64_t)c->kept_inner * (uint64_t)pp->split * per_piece * sizeof(float);
    } else {
        nj_plan_add_launch(pp, "nj_bwd_dx", pp->block, c->kept_inner, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        nj_plan_grid_loop(pp, c->reduce_size, dev);
    }
    int64_t run = 0;
    if (nj_pgrad_sets_ok(c)) nj_plan_pgrad_sets(c, pp); /* after the parts: the pairs' base follows them */
    else if ((run = nj_pgrad_pieces_run(c, pp->split)) > 0) nj_plan_pgrad_pieces(c, run, pp);
    else nj_plan_pgrad(c, dev, pp);
    /* [statistic][piece][WQ] sums, after the fixed region of the dgamma/dbeta launches */
    if (pp->split > 1 && !pp->lag) nj_plan_ws(pp, NJ_WS_PARTS, (int64_t)(pp->workspace_fixed / sizeof(float)), 0);
    if (pp->split > 1 && !pp->lag) nj_plan_pgrad_dx(c, pp); /* the pieces' dx launch then only merges their sums */
    return NJ_OK;
}
