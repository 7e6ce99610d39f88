/* Planner of the CHANNELS_LAST family (fwd_channels_last.cu, bwd_channels_last.cu): GroupNorm over
 * channels-last images, the diffusion UNet's layer, with or without a fused residual. Its canonical form is
 *   [batch | HW pixels: reduced | G groups: kept, feature | C/G channels: reduced, feature, stride 1],
 * the C = G * C/G channels of a pixel contiguous. The general family walks such a group with scalar
 * loads 2 bytes out of every C/G * 2 used, a block per (image, group): 32 blocks for a batch-1 image.
 * Here an image is cut into tiles of pixels, a block per (image, tile), and a thread owns `chans`
 * neighbouring channels of every R-th pixel of its tile, loaded as one vector across channels:
 *   launch 1 (nj_fwd_cl_stats): each tile's per-group count-weighted sum and squared deviations from
 *            the tile mean (Welford per thread, exact combination per block) into the workspace;
 *   launch 2, the library's merge (NJ_LIB_MERGE): the image's tiles combined per group in a fixed
 *            order into mean and rstd;
 *   launch 3 (nj_fwd_cl_norm): the block normalizes its tile with vector loads and stores (the tile-0
 *            block writes the image's saved statistics).
 * A small image (NJ_CL_FUSE) is one tile; without a residual its forward is one launch
 * (nj_fwd_cl_fused): launch 1's statistics, finished in the block, then launch 3's normalize.
 * On sm_90 a larger image whose x fits 2 to 8 SMs' shared memory is one launch too (nj_fwd_cl_cluster):
 * a thread-block cluster an image, a tile a block, staged in shared memory by launch 1's walk; the blocks
 * exchange their tiles' group sums through distributed shared memory and normalize their staged tiles
 * (x read once, not twice; no merge launch).
 * A small image's backward whose x and dy fit one block is one launch (and the column sum) on any
 * architecture: nj_bwd_cl_cluster with one tile, the image staged in the block, no cluster (sm_90: a
 * cluster of 2 to 8 where one block is too small). Its two launches read x and dy twice (UNet f16
 * *x320x8x8: 1.41x the ideal bytes, 44% of copy in the model; staged: 1.04x, 59.5%).
 * Backward (bwd_channels_last.cu), the same tiles:
 *   nj_bwd_cl_part: each tile's per-group sums of g = dz * gamma and g * xhat, and per-channel sums of
 *            dz * xhat and dz (the dgamma/dbeta partials);
 *   the library's merge: an (image, group)'s tile sums added in order into the two means;
 *   nj_bwd_cl_dx: dx of the tile, vector loads and stores;
 *   with gamma/beta, the library's column sum (NJ_LIB_COLSUM): a block per 32 channels adds every
 *            (image, tile) partial in a fixed order (its warps over the partials, then warp 0 over the warps).
 * The tiling is a function of the problem alone: the same work split and rounding on every run. */
#include "planner_impl.h"


#define NJ_CL_THREADS 512    /* threads of a block, at most (but see NJ_CL_STAGED_THREADS) */
#define NJ_CL_STAGED_THREADS 640 /* the staged backward's, at most: whole pixel rows to 512 threads and more */
#define NJ_CL_TILE 16384     /* elements a tile aims at: ~80 tiles for a 320-channel 64x64 UNet image */
#define NJ_CL_MAX_TILES 256  /* tiles of an image at most: a warp combines them per group */
#define NJ_CL_MAX_CHANNELS 4096
#define NJ_CL_FUSE 131072    /* elements of a small image: one tile, and the forward one launch */
#define NJ_CL_FUSE_STAGE (96 * 1024) /* bytes of x past which a small image's forward is staged (sm_90) */

static int64_t cl_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The activation operands of a pass: what the tiles read and write with vectors across channels. The
 * backward reads the forward's input sum (x): a residual changes nothing there. */
static const nj_operand cl_fwd_opds[] = {NJ_OPD_X, NJ_OPD_Y};
static const nj_operand cl_bwd_opds[] = {NJ_OPD_X, NJ_OPD_DY, NJ_OPD_DX};
static const nj_operand cl_fwd_res_opds[] = {NJ_OPD_X, NJ_OPD_Y, NJ_OPD_RES};
static const nj_operand cl_fwd_resout_opds[] = {NJ_OPD_X, NJ_OPD_Y, NJ_OPD_RES, NJ_OPD_RESOUT};

static void cl_opds(const nj_canon *c, nj_pass pass, const nj_operand **opds, size_t *n)
{
    if (pass == NJ_PASS_BACKWARD) {
        *opds = cl_bwd_opds, *n = NJ_ARRAY_LEN(cl_bwd_opds);
    } else if (c->flags & NJ_FLAG_RESIDUAL_OUT) {
        *opds = cl_fwd_resout_opds, *n = NJ_ARRAY_LEN(cl_fwd_resout_opds);
    } else if (c->flags & NJ_FLAG_RESIDUAL) {
        *opds = cl_fwd_res_opds, *n = NJ_ARRAY_LEN(cl_fwd_res_opds);
    } else {
        *opds = cl_fwd_opds, *n = NJ_ARRAY_LEN(cl_fwd_opds);
    }
}

static bool cl_operand_dense(const nj_canon *c, nj_operand o)
{
    return c->axes[3].stride[o] == 1 && c->axes[2].stride[o] == c->axes[3].extent;
}

/* Widest vector across channels: within 16 bytes for every activation operand (8 in the backward,
 * whose six per-channel constants and activation derivative spilled at 16 on sm_80), a divisor of C and
 * of the pixel strides (pointers and batch strides are checked at launch: align_opds). */
static int32_t cl_vec(const nj_canon *c, nj_pass pass, int64_t channels)
{
    const nj_operand *opds;
    size_t n;
    cl_opds(c, pass, &opds, &n);
    int32_t maxb = 1;
    for (size_t i = 0; i < n; i++) {
        int32_t b = (int32_t)nj_dtype_size((nj_dtype)c->dtype[opds[i]]);
        if (b > maxb) maxb = b;
    }
    int32_t bytes = pass == NJ_PASS_BACKWARD ? 8 : 16;
    for (int32_t v = 8; v > 1; v /= 2) {
        bool ok = v * maxb <= bytes && channels % v == 0;
        for (size_t i = 0; i < n && ok; i++) ok = c->axes[1].stride[opds[i]] % v == 0;
        if (ok) return v;
    }
    return 1;
}

/* Threads a block may take: the backward's up to 640 (its vectors are 8 bytes: 2560 channels of f16,
 * SDXL's concatenated skips, are 640 lanes; outside the family they went to the general walks: model,
 * H200, *x2560x32x32 26.9% of copy), as the staged backward's. */
static int64_t cl_max_threads(nj_pass pass) { return pass == NJ_PASS_BACKWARD ? NJ_CL_STAGED_THREADS : NJ_CL_THREADS; }

/* Channels a thread owns: a vector's, or in the backward two where a vector a lane would take more
 * threads than a block has and two are no more channels than f16's 4 (f32 past 1280 channels: model,
 * H200, *x1920x32x32 37.6 -> 68.8% of copy, *x2560x16x16 43.5 -> 68.3; f16 past 2560 spilled). Not the
 * forward: f32 *x2560x16x16 took 8 channels a thread to 69.2% from the general family's 79.7. */
static int32_t cl_chans(const nj_canon *c, nj_pass pass, int64_t channels)
{
    int32_t v = cl_vec(c, pass, channels);
    if (pass == NJ_PASS_BACKWARD && channels / v > cl_max_threads(pass) && 2 * v <= 4 && channels % (2 * v) == 0)
        return 2 * v;
    return v;
}

bool nj_cl_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    (void)dev; /* the test does not depend on the device */
    if (c->rank != 4 || !(c->flags & NJ_FLAG_CENTER)) return false;
    const nj_canon_axis *px = &c->axes[1], *gr = &c->axes[2], *ch = &c->axes[3];
    if (!px->reduce || gr->reduce || !ch->reduce) return false;
    /* without gamma/beta the canonical form marks no feature axis; with them, the channels are */
    bool params = (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0;
    if (params && (px->feature || !gr->feature || !ch->feature)) return false;
    int64_t channels = gr->extent * ch->extent;
    if (channels > NJ_CL_MAX_CHANNELS || c->reduce_size >= INT32_MAX || px->extent >= INT32_MAX / 2) return false;
    const nj_operand *opds;
    size_t n;
    cl_opds(c, pass, &opds, &n);
    for (size_t i = 0; i < n; i++)
        if (!cl_operand_dense(c, opds[i])) return false;
    if (params && (!cl_operand_dense(c, NJ_OPD_PARAM) || px->stride[NJ_OPD_PARAM])) return false;
    return channels / cl_chans(c, pass, channels) <= cl_max_threads(pass);
}

/* A small image is one tile (a block an image): small images come in large batches (820 8x8 UNet
 * images of 320 channels for 2^24 elements), which fill the device anyway, and each tile is one more
 * partial for the merge and the dgamma/dbeta column sum to add. */
static bool cl_small(const nj_canon *c)
{
    return c->axes[1].extent * c->axes[2].extent * c->axes[3].extent <= NJ_CL_FUSE;
}

/* A forward without a residual over small images is one launch: the block computes its image's
 * statistics, then normalizes it again from the caches (three launches re-read x from DRAM). */
static bool cl_fused(const nj_canon *c, nj_pass pass)
{
    return pass == NJ_PASS_FORWARD && !(c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT)) && cl_small(c);
}

/* Bytes a pixel of a cluster tile stages: x (forward), x and dy (backward). */
static int64_t cl_stage_pixel(const nj_canon *c, nj_pass pass)
{
    int64_t channels = c->axes[2].extent * c->axes[3].extent, e = (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    if (pass == NJ_PASS_BACKWARD) e += (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]);
    return channels * e;
}

/* A cluster pass's tiles (a power of two, 2 to 8: CUDA's portable cluster) whose staged x (and dy), beside
 * the kernel's static arrays (the pixel rows' partials, a channel row, 10 floats a group) and 16 bytes
 * between x and dy, fits a block's shared memory; 0 where none does or the plan is not one (sm_80, the
 * residual, a one-tile image, a vector of one: the unaligned variant re-reads its tile instead).
 * NORMJIT_PLAN_NO_CLUSTER=1: none. */
static int64_t cl_cluster_tiles(const nj_canon *c, nj_pass pass, const nj_device_props *dev, int64_t rows, int32_t v)
{
    /* the backward of a small image: one block (no cluster, any architecture) where its x and dy fit */
    bool one = pass == NJ_PASS_BACKWARD && cl_small(c);
    /* A small image's forward past NJ_CL_FUSE_STAGE bytes of x: a cluster of 2 or more staging it, not
     * the fused block that reads it twice, the second time from the L2 (model, H200: UNet f16 *x1280x8x8
     * 1.07x the ideal bytes, and a block an image left 205 blocks for 264 slots: 79.8% of copy; *x320x16x16
     * one block an SM at 66 registers, 79.5; clusters of 2: 84.5 both, the launch-bound ceiling).
     * NORMJIT_PLAN_NO_CL_SMALL_CLUSTER=1: fused, as before. */
    bool fwd_small = pass == NJ_PASS_FORWARD && cl_small(c) && !nj_plan_switched_off("CL_SMALL_CLUSTER") &&
                     c->axes[1].extent * cl_stage_pixel(c, pass) > NJ_CL_FUSE_STAGE;
    if ((!one && (dev->arch < 90 || (cl_small(c) && !fwd_small))) || v < 2 || nj_plan_switched_off("CLUSTER") ||
        (pass == NJ_PASS_FORWARD && (c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT))))
        return 0;
    int64_t hw = c->axes[1].extent, groups = c->axes[2].extent, channels = groups * c->axes[3].extent;
    /* a tile of x (and dy) one contiguous run: the stage is copied flat */
    if (c->axes[1].stride[NJ_OPD_X] != channels || (pass == NJ_PASS_BACKWARD && c->axes[1].stride[NJ_OPD_DY] != channels))
        return 0;
    /* with gamma/beta the backward keeps the tile's dgamma/dbeta pair a channel for the cluster too */
    bool pairs = pass == NJ_PASS_BACKWARD && (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS));
    int64_t fixed = 4 * (rows * channels + channels + 10 * groups + (pairs ? 2 * channels : 0)) + 1024 + 16;
    for (int64_t k = one ? 1 : 2; k <= (dev->arch < 90 ? 1 : 8); k *= 2) {
        int64_t tile = cl_ceil_div(cl_ceil_div(hw, k), rows) * rows;
        if (cl_ceil_div(hw, tile) == k && tile * cl_stage_pixel(c, pass) + fixed <= dev->max_shared_per_block) return k;
    }
    return 0;
}

/* The tiling both passes share: vector width, pixel rows a block works on at once, tile (NJ_CL_TILE
 * elements, or min_px pixels where more), tiles. Returns the cluster's tiles (cl_cluster_tiles at the
 * rows chosen), 0 for no cluster plan. */
static int64_t cl_tiling(const nj_canon *c, nj_pass pass, const nj_device_props *dev, int64_t min_px, nj_plan_params *pp)
{
    int64_t hw = c->axes[1].extent, channels = c->axes[2].extent * c->axes[3].extent;
    int32_t v = cl_vec(c, pass, channels), ch = cl_chans(c, pass, channels);
    int64_t lanes = channels / ch;
    int64_t rows = lanes < NJ_CL_THREADS ? NJ_CL_THREADS / lanes : 1;
    if (rows > hw) rows = hw;
    int64_t target = min_px * channels > NJ_CL_TILE ? min_px * channels : NJ_CL_TILE;
    int64_t tiles = cl_ceil_div(hw * channels, target);
    if (tiles > NJ_CL_MAX_TILES) tiles = NJ_CL_MAX_TILES;
    if (tiles > cl_ceil_div(hw, rows)) tiles = cl_ceil_div(hw, rows);
    if (tiles < 1 || cl_small(c)) tiles = 1;
    int64_t k = cl_cluster_tiles(c, pass, dev, rows, v);
    /* A staged backward holds an SM's shared memory alone, so its block is all the SM's threads: 1280
     * channels of f16 (320 lanes) made a block of 320, whose loads in flight left the last of 3.1 waves
     * waiting on latency (model, H200, UNet *x1280x8x8: 77.4% of copy; 2 rows, 640 threads: 80.7).
     * Pixel rows rounded up to 512 threads where that stays within NJ_CL_STAGED_THREADS (~100 registers
     * a thread fit); the forward's and the tile launches' blocks (two an SM) keep theirs.
     * NORMJIT_PLAN_NO_CL_ROWS_UP=1: rounded down, as before. */
    int64_t up = (NJ_CL_THREADS + lanes - 1) / lanes;
    if (k > 0 && pass == NJ_PASS_BACKWARD && up > rows && up <= hw && lanes * up <= NJ_CL_STAGED_THREADS &&
        !nj_plan_switched_off("CL_ROWS_UP")) {
        int64_t ku = cl_cluster_tiles(c, pass, dev, up, v);
        if (ku > 0) rows = up, k = ku;
    }
    if (k > 0) tiles = k;
    /* whole rounds of the block's pixel rows, then as few tiles as that allows */
    int64_t tile = cl_ceil_div(cl_ceil_div(hw, tiles), rows) * rows;
    pp->vec = v;
    pp->chans = ch;
    pp->tile = (int32_t)tile;
    pp->rows_per_block = (int32_t)rows;
    pp->split = (int32_t)cl_ceil_div(hw, tile);
    pp->block = (int32_t)cl_ceil_div(lanes * rows, 32) * 32; /* whole warps: the reductions shuffle */
    if (v > 1) {
        const nj_operand *opds;
        size_t n;
        cl_opds(c, pass, &opds, &n);
        for (size_t i = 0; i < n; i++) pp->align_opds |= 1u << opds[i];
        if (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) pp->align_opds |= 1u << NJ_OPD_PARAM;
    }
    return k;
}

/* The forward of an image of several tiles, pipelined in one launch (P.lag; docs/architecture.md, as a split
 * row's): a zero launch clears a counter an image, then the tiles' blocks alternate a tile's group sums
 * and, lag tiles behind, a tile's y; the block of an image's last tile merges its tiles' sums (as the
 * library's merge would) and the normalizing blocks wait for it. The lag is an image's tiles and half a
 * wave of resident blocks (two an SM where blocks of up to 512 threads are held to two), images of at most
 * 24 MB of x and y (UNet f16 64 x 64 x 1280: 21 MB; model, H200: 60.2 -> 80.5% of copy, 1.02x the ideal
 * bytes: a tile's second read an image and half a wave after its first, past half the L2 a little). Per image: each tile's (sum, m2) per group, the image's (mean, rstd) per group, its
 * counter (two floats' room: the means stay 8-byte aligned). NORMJIT_PLAN_NO_CL_PIPE=1: three launches. */
#define NJ_PIPE_CL_BYTES (24 << 20)
static bool cl_fwd_pipe(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    /* not with the residual: its loads beside the statistics' code spilled 56-88 B at the 64 registers of
     * two blocks an SM (bf16 2 x 96 x 40 x 40, GELU erf, the residual written) */
    if (nj_plan_switched_off("CL_PIPE") || (c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT)) ||
        c->reduce_size * c->axes[2].extent > NJ_PIPE_CL_BYTES / nj_plan_elem_bytes(c, NJ_PASS_FORWARD))
        return false;
    int64_t groups = c->axes[2].extent, tiles = pp->split, image = (tiles + 1) * groups * 2 + 2;
    nj_plan_pipe(dev, tiles, pp->block <= 512 ? 2 : 1, "nj_fwd_cl_zero", 1, "nj_fwd_cl_norm", 2 * tiles, pp);
    pp->ws_stride = image;
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    nj_plan_ws(pp, NJ_WS_MEANS, tiles * groups * 2, 0);
    nj_plan_ws(pp, NJ_WS_FLAGS, (tiles + 1) * groups * 2, 0);
    pp->workspace_per_row = (uint64_t)image * sizeof(float);
    return true;
}

nj_status nj_plan_fwd_channels_last(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_RETURN_IF(!nj_cl_applies(c, NJ_PASS_FORWARD, dev), NJ_ERR_INTERNAL, "planner: not a channels-last group problem");
    int64_t k = cl_tiling(c, NJ_PASS_FORWARD, dev, 0, pp);
    if (k > 0) {
        nj_plan_add_launch(pp, "nj_fwd_cl_cluster", pp->block, pp->split, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        nj_launch *l = &pp->launch[pp->nlaunch - 1];
        l->cluster = (int32_t)k;
        l->shmem = (uint32_t)((int64_t)pp->tile * cl_stage_pixel(c, NJ_PASS_FORWARD));
        pp->stage = 1;
        pp->unroll = 4; /* the flat copy into the stage: vectors a thread has in flight */
        return NJ_OK;
    }
    if (cl_fused(c, NJ_PASS_FORWARD)) {
        nj_plan_add_launch(pp, "nj_fwd_cl_fused", pp->block, 1, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        return NJ_OK;
    }
    int64_t groups = c->axes[2].extent, tiles = pp->split, image = (tiles + 1) * groups * 2;
    if (cl_fwd_pipe(c, dev, pp)) return NJ_OK;
    nj_plan_add_launch(pp, "nj_fwd_cl_stats", pp->block, pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_PART);
    /* per image: each tile's (sum, m2) per group, then the image's (mean, rstd) per group; tile t counts
     * min(tile, HW - t * tile) pixels of C/G channels */
    const int64_t arg[NJ_LIB_NARGS][2] = {
        [NJ_MERGE_NITEMS] = {0, groups},  [NJ_MERGE_NPARTS] = {tiles, 0},         [NJ_MERGE_RADIX] = {groups, 0},
        [NJ_MERGE_S_HI] = {image, 0},     [NJ_MERGE_S_LO] = {2, 0},               [NJ_MERGE_S_PART] = {2 * groups, 0},
        [NJ_MERGE_OFF_B] = {1, 0},        [NJ_MERGE_OUT_BASE] = {tiles * groups * 2, 0},
        [NJ_MERGE_O_HI] = {image, 0},     [NJ_MERGE_O_LO] = {2, 0},               [NJ_MERGE_O_B] = {1, 0},
        [NJ_MERGE_MODE] = {NJ_MERGE_STATS, 0}, [NJ_MERGE_N] = {c->reduce_size, 0}, [NJ_MERGE_PLEN] = {pp->tile, 0},
        [NJ_MERGE_CMUL] = {c->axes[3].extent, 0}};
    nj_plan_add_merge(pp, arg);
    nj_plan_add_launch(pp, "nj_fwd_cl_norm", pp->block, pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    pp->ws_stride = image;
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    nj_plan_ws(pp, NJ_WS_MEANS, tiles * groups * 2, 0);
    pp->workspace_per_row = (uint64_t)image * sizeof(float);
    return NJ_OK;
}

/* The backward's tile launches: the tiles' sums, the library's merge (past one tile), dx. */
static void cl_bwd_tiles(const nj_canon *c, int64_t means, int64_t image, nj_plan_params *pp)
{
    int64_t groups = c->axes[2].extent, tiles = pp->split;
    nj_plan_add_launch(pp, "nj_bwd_cl_part", pp->block, pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_PART);
    const int64_t marg[NJ_LIB_NARGS][2] = {
        [NJ_MERGE_NITEMS] = {0, 2 * groups}, [NJ_MERGE_NPARTS] = {tiles, 0}, [NJ_MERGE_RADIX] = {2 * groups, 0},
        [NJ_MERGE_S_HI] = {image, 0},    [NJ_MERGE_S_LO] = {2, 0},        [NJ_MERGE_S_PART] = {4 * groups, 0},
        [NJ_MERGE_OFF_B] = {1, 0},       [NJ_MERGE_OUT_BASE] = {means, 0}, [NJ_MERGE_O_HI] = {image, 0},
        [NJ_MERGE_O_LO] = {2, 0},        [NJ_MERGE_O_B] = {1, 0},         [NJ_MERGE_MODE] = {NJ_MERGE_SUMS, 0},
        [NJ_MERGE_N] = {c->reduce_size, 0}};
    if (tiles > 1) nj_plan_add_merge(pp, marg); /* one tile: the dx kernel scales its sums itself */
    nj_plan_add_launch(pp, "nj_bwd_cl_dx", pp->block, pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    nj_plan_ws(pp, NJ_WS_MEANS, means, 0);
}

/* The backward in one launch: a cluster of an image's k tiles, x and dy staged (x, then dy from a 16-byte
 * boundary). */
static void cl_bwd_cluster(const nj_canon *c, int64_t k, nj_plan_params *pp)
{
    int64_t channels = c->axes[2].extent * c->axes[3].extent;
    nj_plan_add_launch(pp, "nj_bwd_cl_cluster", pp->block, pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    nj_launch *l = &pp->launch[pp->nlaunch - 1];
    l->cluster = k > 1 ? (int32_t)k : 0; /* one tile: a block, no cluster */
    l->shmem = (uint32_t)((pp->tile * channels * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) + 15) / 16 * 16 +
                          pp->tile * channels * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]));
    pp->stage = 1;
    pp->unroll = 4; /* the flat copy into the stage: vectors of x and of dy a thread has in flight */
    /* The copy needs none of the per-channel constants that hold the backward's vectors to 8 bytes: it
     * moves 16 (f16 UNet *x640x16x16: 8-byte loads kept 30 KB in flight an SM at one block an SM, and the
     * last of 3.1 waves waited on latency; model, H200: 75.8 -> 79.9% of copy; *x1280x8x8 70.0 -> 75.5).
     * The image's channel rows must be whole copy vectors (a tile starts at a multiple of C elements).
     * NORMJIT_PLAN_NO_CL_COPY16=1: the copy moves vec elements, as before. */
    int64_t wide = (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    if ((int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]) > wide) wide = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]);
    int32_t cv = (int32_t)(16 / wide);
    if (cv > pp->vec && channels % cv == 0 && !nj_plan_switched_off("CL_COPY16")) pp->copy_vec = cv;
}

/* A pipelined backward's images: at most this many bytes of x, dy and dx. Past half the L2, some of the
 * second reads miss, and at worst the pipe moves what the four launches do (they read x and dy twice
 * anyway) with one launch and one merge fewer: UNet f16 64 x 64 x 1280 (31 MB an image; model, H200:
 * 48.9 -> 62.1% of copy, 1.38x the ideal bytes). */
#define NJ_PIPE_CL_BWD_BYTES (32 << 20)

/* A tile's dgamma/dbeta pair a channel (8 bytes) against its pixels' x, dy and dx: tiles of NJ_CL_TILE
 * elements are 6-13 pixels of 1280-2560 channels, whose pairs were 10-19% of the bytes the pass moves
 * (UNet f16 *x1280x32x32: 10.5 of 122.6 MB). Tiles of at least NJ_CL_PAIR_SHARE x 8 bytes of x, dy and
 * dx a channel (24 pixels of f16) hold the pairs to 1/18 of them. Not for pipelined images past
 * NJ_PIPE_CL_WIDE_BYTES: their second reads already reach past half the L2, and a wider tile's half wave
 * of blocks reaches further (f16 *x1280x64x64, 31 MB an image: 62.1 -> 59.3% of copy). Model, H200, f16
 * with SiLU, before -> after: *x1280x32x32 69.4 -> 71.6%, *x1920x32x32 66.5 -> 73.1, *x2560x32x32 63.1 ->
 * 71.2, *x960x32x32 72.5 -> 74.4, *x2560x64x64 (four launches) 51.9 -> 55.0; 640 channels and fewer
 * unchanged (their tiles were 26 pixels and more). NORMJIT_PLAN_NO_CL_WIDE_TILES=1: NJ_CL_TILE alone. */
#define NJ_CL_PAIR_SHARE 18
#define NJ_PIPE_CL_WIDE_BYTES (24 << 20)

/* An image's x, dy and dx bytes (the backward's pipe and wide-tile tests) */
static int64_t cl_bwd_image_bytes(const nj_canon *c)
{
    return c->reduce_size * c->axes[2].extent * nj_plan_elem_bytes(c, NJ_PASS_BACKWARD);
}

/* The backward's tiling: cl_tiling's, widened (NJ_CL_PAIR_SHARE) where the tiles leave dgamma/dbeta pairs
 * and no cluster takes the image. Returns the cluster's tiles, as cl_tiling. */
static int64_t cl_bwd_tiling(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t k = cl_tiling(c, NJ_PASS_BACKWARD, dev, 0, pp), image = cl_bwd_image_bytes(c);
    if (k > 0 || pp->split < 2 || !(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) ||
        (image <= NJ_PIPE_CL_BWD_BYTES && image > NJ_PIPE_CL_WIDE_BYTES) || nj_plan_switched_off("CL_WIDE_TILES"))
        return k;
    return cl_tiling(c, NJ_PASS_BACKWARD, dev, nj_ceil_div64(NJ_CL_PAIR_SHARE * 8, nj_plan_elem_bytes(c, NJ_PASS_BACKWARD)), pp);
}

nj_status nj_plan_bwd_channels_last(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_RETURN_IF(!nj_cl_applies(c, NJ_PASS_BACKWARD, dev), NJ_ERR_INTERNAL, "planner: not a channels-last group problem");
    int64_t k = cl_bwd_tiling(c, dev, pp);
    int64_t groups = c->axes[2].extent, channels = groups * c->axes[3].extent, tiles = pp->split;
    bool params = (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0;
    /* per image (floats): each tile's pairs (sum g, sum g * xhat) per group, then (sum (x - mean) * rstd,
     * unused) per group (the saved mean's correction, templates/bwd_lib.cuh), the image's pairs of means
     * likewise (from `means` on), and with gamma/beta each tile's (sum dz * xhat, sum dz) per channel
     * (from `chans` on). The merge takes 2 * groups items an image. */
    int64_t means = tiles * groups * 4, chans = means + groups * 4, image = chans + (params ? tiles * channels * 2 : 0);
    int64_t parts = tiles;
    if (k == 0 && tiles > 1 && cl_bwd_image_bytes(c) <= NJ_PIPE_CL_BWD_BYTES && !nj_plan_switched_off("CL_PIPE")) {
        /* pipelined (cl_fwd_pipe's scheme): the dx blocks wait for the image's merged means; its counter
           after the partials (two floats' room). The lag an image's tiles and half a wave: one block an
           SM past ~340 threads (the dx kernel's ~90-100 registers), two under it (88 at 320) */
        image += 2;
        nj_plan_pipe(dev, tiles, pp->block <= 340 ? 2 : 1, "nj_bwd_cl_zero", 1, "nj_bwd_cl_dx", 2 * tiles, pp);
        nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
        nj_plan_ws(pp, NJ_WS_MEANS, means, 0);
        nj_plan_ws(pp, NJ_WS_FLAGS, image - 2, 0);
    } else if (k > 0) { /* one launch: the tiles' group sums through the cluster, not the workspace and a merge */
        /* and their dgamma/dbeta pairs added there too: one pair a channel an image for the column sum
           (UNet f16 *x1280x16x16: 8 tiles' pairs were 80 KB an image beside its 1.97 MB, and the column
           sum read them all) */
        means = chans = 0;
        parts = 1;
        image = params ? channels * 2 : 0;
        cl_bwd_cluster(c, k, pp);
    } else {
        cl_bwd_tiles(c, means, image, pp);
    }
    pp->ws_stride = image;
    if (params) {
        /* image k's tile t partial pair of channel j at k * image + chans + (t * channels + j) * 2 (a
         * cluster's: one part an image) */
        const int64_t arg[NJ_LIB_NARGS][2] = {
            [NJ_COLSUM_NCOLS] = {channels, 0}, [NJ_COLSUM_NPARTS] = {0, parts}, [NJ_COLSUM_INNER] = {parts, 0},
            [NJ_COLSUM_S_OUTER] = {image, 0},  [NJ_COLSUM_S_INNER] = {2 * channels, 0},
            [NJ_COLSUM_S_COL] = {2, 0},        [NJ_COLSUM_BASE_A] = {chans, 0},
            [NJ_COLSUM_BASE_B] = {chans + 1, 0}};
        nj_plan_add_colsum(pp, arg);
        /* its 32 warps: the partials are tiles x images, and small images come in large batches (820
         * 8x8 images of 320 channels are 1640 partials a channel: at 8 warps a chain of 205 dependent
         * loads, the pass's longest launch). At most 128 blocks of channels, so the wide block costs
         * nothing in occupancy. */
        pp->launch[pp->nlaunch - 1].block[0] = 1024;
        pp->pgrad = NJ_PGRAD_FUSED;
        nj_plan_ws(pp, NJ_WS_PGRAD, chans, 0);
    }
    pp->workspace_per_row = (uint64_t)image * sizeof(float);
    return NJ_OK;
}
