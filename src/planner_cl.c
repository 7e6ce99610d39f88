/* Forward planner of the CHANNELS_LAST family (fwd_channels_last.cu): GroupNorm over channels-last
 * images, the diffusion UNet's and Flux's layer. Its canonical form is
 *   [batch | HW pixels: reduced | G groups: kept, feature | C/G channels: reduced, feature, stride 1],
 * the C = G * C/G channels of a pixel contiguous. The general family walks such a group with scalar
 * loads 2 bytes out of every C/G * 2 used, a block per (image, group): 32 blocks for a batch-1 image.
 * Here an image is cut into tiles of pixels, a block per (image, tile), and a thread owns `chans`
 * neighbouring channels of every R-th pixel of its tile, loaded as one vector across channels:
 *   launch 1 (nj_fwd_cl_stats): each tile's per-group count-weighted sum and squared deviations from
 *            the tile mean (Welford per thread, exact combination per block) into the workspace;
 *   launch 2 (nj_fwd_cl_final): a warp per (image, group) combines the image's tiles in a fixed order
 *            into mean and rstd (and the saved statistics);
 *   launch 3 (nj_fwd_cl_norm): the block normalizes its tile with vector loads and stores.
 * The tiling is a function of the problem alone: the same work split and rounding on every run. */
#include "planner.h"

#include <stdio.h>

#define NJ_CL_THREADS 512    /* threads of a block, at most */
#define NJ_CL_TILE 16384     /* elements a tile aims at: ~80 tiles for a 320-channel 64x64 UNet image */
#define NJ_CL_MAX_TILES 256  /* tiles of an image at most: a warp combines them per group */
#define NJ_CL_FINAL_BLOCK 256 /* threads of the combining launch: a warp per (image, group) */
#define NJ_CL_MAX_CHANNELS 4096

static int64_t cl_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static bool cl_operand_dense(const nj_canon *c, nj_operand o)
{
    return c->axes[3].stride[o] == 1 && c->axes[2].stride[o] == c->axes[3].extent;
}

/* Widest vector across channels: within 16 bytes for x and y, a divisor of C and of the pixel strides
 * (pointers and batch strides are checked at launch: align_opds). */
static int32_t cl_vec(const nj_canon *c, int64_t channels)
{
    int32_t maxb = 1;
    for (int o = NJ_OPD_X; o <= NJ_OPD_Y; o++) {
        int32_t b = (int32_t)nj_dtype_size((nj_dtype)c->dtype[o]);
        if (b > maxb) maxb = b;
    }
    for (int32_t v = 8; v > 1; v /= 2)
        if (v * maxb <= 16 && channels % v == 0 && c->axes[1].stride[NJ_OPD_X] % v == 0 &&
            c->axes[1].stride[NJ_OPD_Y] % v == 0)
            return v;
    return 1;
}

bool nj_plan_cl_ok(const nj_canon *c)
{
    if (c->rank != 4 || !(c->flags & NJ_FLAG_CENTER)) return false;
    if (c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT)) return false;
    const nj_canon_axis *px = &c->axes[1], *gr = &c->axes[2], *ch = &c->axes[3];
    if (!px->reduce || gr->reduce || !ch->reduce) return false;
    /* without gamma/beta the canonical form marks no feature axis; with them, the channels are */
    bool params = (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0;
    if (params && (px->feature || !gr->feature || !ch->feature)) return false;
    int64_t channels = gr->extent * ch->extent;
    if (channels > NJ_CL_MAX_CHANNELS || c->reduce_size >= INT32_MAX || px->extent >= INT32_MAX / 2) return false;
    if (!cl_operand_dense(c, NJ_OPD_X) || !cl_operand_dense(c, NJ_OPD_Y)) return false;
    if (params && (!cl_operand_dense(c, NJ_OPD_PARAM) || px->stride[NJ_OPD_PARAM]))
        return false;
    return channels / cl_vec(c, channels) <= NJ_CL_THREADS;
}

nj_status nj_plan_fwd_channels_last(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_RETURN_IF(!nj_plan_cl_ok(c), NJ_ERR_INTERNAL, "planner: not a channels-last group problem");
    int64_t hw = c->axes[1].extent, groups = c->axes[2].extent, channels = groups * c->axes[3].extent;
    int32_t v = cl_vec(c, channels);
    int64_t lanes = channels / v;
    int64_t rows = NJ_CL_THREADS / lanes; /* pixels a block works on at once */
    if (rows > hw) rows = hw;
    int64_t tiles = cl_ceil_div(hw * channels, NJ_CL_TILE);
    if (tiles > NJ_CL_MAX_TILES) tiles = NJ_CL_MAX_TILES;
    if (tiles > cl_ceil_div(hw, rows)) tiles = cl_ceil_div(hw, rows);
    if (tiles < 1) tiles = 1;
    /* whole rounds of the block's pixel rows, then as few tiles as that allows */
    int64_t tile = cl_ceil_div(cl_ceil_div(hw, tiles), rows) * rows;
    tiles = cl_ceil_div(hw, tile);
    pp->family = NJ_FAMILY_CHANNELS_LAST;
    pp->template_name = "fwd_channels_last.cu";
    pp->vec = v;
    pp->chans = v;
    pp->tile = (int32_t)tile;
    pp->rows_per_block = (int32_t)rows;
    pp->split = (int32_t)tiles;
    pp->block = (int32_t)cl_ceil_div(lanes * rows, 32) * 32; /* whole warps: the reductions shuffle */
    if (v > 1) {
        pp->align_opds = 1u << NJ_OPD_X | 1u << NJ_OPD_Y;
        if (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) pp->align_opds |= 1u << NJ_OPD_PARAM;
    }
    nj_plan_add_launch(pp, "nj_fwd_cl_stats", pp->block, tiles, 1, 0, dev);
    nj_plan_add_launch(pp, "nj_fwd_cl_final", NJ_CL_FINAL_BLOCK, groups, NJ_CL_FINAL_BLOCK / 32, 0, dev);
    nj_plan_add_launch(pp, "nj_fwd_cl_norm", pp->block, tiles, 1, 0, dev);
    /* per image: each tile's (sum, m2) per group, then the image's (mean, rstd) per group */
    pp->workspace_per_row = (uint64_t)(tiles + 1) * (uint64_t)groups * 2u * sizeof(float);
    return NJ_OK;
}
