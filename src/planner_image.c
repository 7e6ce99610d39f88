/* IMAGE family (fwd_image.cu, bwd_image.cu): a block per batch item whose whole slab is a few tens of
 * KB, held in shared memory. LayerNorm over the C of NCHW at 7x7 and 14x14 pixels is the case: the
 * column family cut each image into tiles of 32 pixels, and a channel's 49 pixels (98 bytes of f16)
 * straddle two tiles and four sectors, so the tiles shared sectors and read x three times (f16
 * *x768x7x7: 2.53x the ideal bytes, 37% of copy in the model). An image is contiguous: here a block
 * copies it into shared memory with 16-byte vectors, works there, and writes its output with 16-byte
 * vectors: every input read once, every output written once, every sector whole.
 *
 * The backward stages x and dy where both fit (f16 7x7 on sm_90), else, for images of at most 64
 * pixels, x alone, and reads dy twice, the second time from the L2 (f32 7x7).
 *
 * Where no block holds the image (f32 14x14's x, f16 14x14's x and dy: 301 KB), its pixels are cut into
 * parts (P.tile: pixels a part), a block each: a pixel's set is its channels, so the parts share
 * nothing but the sectors where a channel row's parts meet, read by neighbouring blocks at the same
 * time (from the L2). A part's channel rows are runs of P.tile pixels, P.vec of them an access, so the
 * vector divides the image's row as well as the part; the last part may be shorter. */
#include "planner_impl.h"


/* The largest channel row (the kept inner extent times x's element) for which the family applies: past
 * 16 sectors a row, the column family's tiles of 32 x vec pixels cover whole sectors (f16 96x56x56:
 * 80% of copy there), and such slabs rarely fit shared memory anyway. Images cut into parts, up to 32
 * sectors: f32 14x14 (784 bytes) read 1.17x its bytes as the column family's tiles (88% of sectors). */
#define NJ_IMAGE_ROW_BYTES_MAX 512
#define NJ_IMAGE_PART_ROW_BYTES_MAX 1024
/* at most this many parts an image (8: f32 x and dy of 14x14 images of 768 channels) */
#define NJ_IMAGE_PARTS_MAX 8
/* gamma/beta by channel are a table of floats in shared memory */
#define NJ_IMAGE_CHANNELS_MAX 4096
/* at most this many pixels (a thread at least for each) */
#define NJ_IMAGE_PIXELS_MAX 1024

static bool image_bwd(nj_pass pass) { return pass == NJ_PASS_BACKWARD; }

/* Operands a pass reads or writes image by image (with x's layout). */
static bool image_opd(const nj_canon *c, nj_pass pass, int o)
{
    switch (o) {
    case NJ_OPD_X: return true;
    case NJ_OPD_Y: return !image_bwd(pass);
    case NJ_OPD_RES: return !image_bwd(pass) && (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return !image_bwd(pass) && (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    case NJ_OPD_DY:
    case NJ_OPD_DX: return image_bwd(pass);
    default: return false;
    }
}

static int64_t image_size(const nj_canon *c, int o) { return (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]); }

/* Bytes of the staged slab of kp pixels a channel: forward x (floats where the residual is added in);
 * backward x, then (stage 1) dy from a 16-byte boundary, or (stage 2) x alone, dy read twice from global
 * memory. */
static int64_t image_slab(const nj_canon *c, nj_pass pass, int32_t stage, int64_t kp)
{
    int64_t ne = c->reduce_size * kp;
    if (image_bwd(pass) && stage == 2) return ne * image_size(c, NJ_OPD_X);
    if (image_bwd(pass)) return (ne * image_size(c, NJ_OPD_X) + 15) / 16 * 16 + ne * image_size(c, NJ_OPD_DY);
    return ne * ((c->flags & NJ_FLAG_RESIDUAL) ? 4 : image_size(c, NJ_OPD_X));
}

/* The block's own floats, before the slab in its dynamic shared memory, rounded up to 16 bytes.
 * Forward: the gamma/beta table, a partial a statistics thread (block / pixels groups of a thread a
 * pixel), three floats a pixel. Backward: the gamma table (and beta's under an activation), two
 * partials (one under RMS) a warp and pixel, five floats a pixel. All of it is dynamic so that the
 * launch states the block's whole shared memory (the model's occupancy without a ptxas report reads
 * it there). */
static int64_t image_floats_bytes(const nj_canon *c, nj_pass pass, int32_t block, int64_t kp)
{
    int64_t n;
    if (image_bwd(pass)) {
        bool act_beta = (c->flags & NJ_FLAG_BIAS) && c->act != NJ_ACT_NONE;
        int64_t np = ((c->flags & NJ_FLAG_SCALE) ? 1 : 0) + (act_beta ? 1 : 0);
        n = np * c->reduce_size + ((c->flags & NJ_FLAG_CENTER) ? 2 : 1) * (block / 32) * kp + 5 * kp;
    } else {
        int64_t np = ((c->flags & NJ_FLAG_SCALE) ? 1 : 0) + ((c->flags & NJ_FLAG_BIAS) ? 1 : 0);
        n = np * c->reduce_size + (block / kp) * kp + 3 * kp;
    }
    return (4 * n + 15) / 16 * 16;
}

/* The launch's dynamic shared memory: the block's floats and the slab. */
static int64_t image_shmem(const nj_canon *c, nj_pass pass, int32_t block, int32_t stage, int64_t kp)
{
    return image_floats_bytes(c, pass, block, kp) + image_slab(c, pass, stage, kp);
}

/* Blocks of `block` threads an SM holds, by shared memory (an SM offers the opt-in maximum of one block
 * and the 1 KiB the driver reserves beside it: 228 KiB on sm_90, 164 KiB on sm_80): 0 when one does not
 * fit. */
static int32_t image_fit(const nj_canon *c, nj_pass pass, const nj_device_props *dev, int32_t block, int32_t stage,
                         int64_t kp)
{
    int64_t need = image_shmem(c, pass, block, stage, kp);
    if (need > dev->max_shared_per_block) return 0;
    return (int32_t)(((int64_t)dev->max_shared_per_block + 1024) / (need + 1024));
}

/* Elements a vector access moves: 16 bytes of the widest image operand, dividing the slab (a whole
 * image: its flat run; parts: each channel row, so that every part, starting at a multiple of the
 * vector, is whole vectors too). */
static int32_t image_vec(const nj_canon *c, nj_pass pass, bool parts)
{
    int64_t wide = 1, narrow = 16;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++) {
        if (!image_opd(c, pass, o)) continue;
        if (image_size(c, o) > wide) wide = image_size(c, o);
        if (image_size(c, o) < narrow) narrow = image_size(c, o);
    }
    int32_t v = (int32_t)(16 / wide);
    int64_t ki = c->axes[2].extent, n = parts ? ki : c->reduce_size * ki;
    while (v > 1 && n % v != 0) v /= 2;
    /* the staged copies move words: a vector of a 16-bit operand is at least 2 elements */
    if (v * narrow < 4) v = 1;
    return v;
}

/* A block of 1024 / n threads for n resident blocks an SM, so that each thread may hold 64 registers
 * (the templates' __launch_bounds__(block, 1024 / block)), n what shared memory allows, at most 4;
 * fewer threads for a small slab (two vectors a thread), and never fewer than a thread a pixel (the
 * forward's statistics) or a warp. 0: no block fits. */
static int32_t image_block(const nj_canon *c, nj_pass pass, const nj_device_props *dev, int32_t stage, int64_t kp)
{
    int64_t nv = c->reduce_size * kp / image_vec(c, pass, kp < c->axes[2].extent);
    int64_t want = nj_ceil_div64(nv, 2);
    if (want < kp) want = kp;
    want = nj_ceil_div64(want, 32) * 32;
    for (int32_t n = 4; n >= 1; n--) {
        int32_t b = 1024 / n / 32 * 32;
        if (b < kp) continue;
        if (want < b) b = (int32_t)want;
        if (image_fit(c, pass, dev, b, stage, kp) >= n) return b;
    }
    return 0;
}

/* What a block of the pass stages (P.stage, 0: nothing fits) and of how many pixels (kp). */
typedef struct {
    int32_t stage;
    int64_t kp;
} image_cut;

/* Pixels a part of an image cut in `parts`: whole vectors (image_vec), the last part the rest. */
static int64_t image_part_pixels(const nj_canon *c, nj_pass pass, int64_t parts)
{
    int64_t ki = c->axes[2].extent;
    int32_t v = image_vec(c, pass, true);
    return nj_ceil_div64(nj_ceil_div64(ki, parts), v) * v;
}

/* How the pass stages a block's pixels: what (stage: 1, forward x, backward x and dy; or, for a
 * backward whose x and dy do not both fit, 2: x alone: f32 7x7 of ConvNeXt, 150 KB, whose x and dy took
 * 301 KB, where a lane owns at most NJ_IMAGE_DY_PIXELS pixels of a channel row (its sums then read dy 2
 * or 4 bytes a lane; at 14x14, 7 pixels a lane, the 1024-thread block spilled at its 64 registers and
 * kept 11 KB of loads in flight an SM: 43% of copy in the model, the column family 50%)) and how many
 * pixels (kp: the image's, else the fewest parts whose stage 1 fits: f16 14x14's x and dy read once
 * instead of dy twice). stage 0: nothing fits. NORMJIT_PLAN_NO_IMAGE_PARTS=1: whole images only. */
#define NJ_IMAGE_DY_PIXELS 64
static image_cut image_stage(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    int64_t ki = c->axes[2].extent;
    if (ki * image_size(c, NJ_OPD_X) <= NJ_IMAGE_ROW_BYTES_MAX) {
        if (image_block(c, pass, dev, 1, ki) > 0) return (image_cut){1, ki};
        if (image_bwd(pass) && ki <= NJ_IMAGE_DY_PIXELS && image_block(c, pass, dev, 2, ki) > 0)
            return (image_cut){2, ki};
    }
    if (nj_plan_switched_off("IMAGE_PARTS") || ki * image_size(c, NJ_OPD_X) > NJ_IMAGE_PART_ROW_BYTES_MAX)
        return (image_cut){0, 0};
    for (int64_t parts = 2; parts <= NJ_IMAGE_PARTS_MAX && parts <= ki; parts++) {
        int64_t kp = image_part_pixels(c, pass, parts);
        /* every part has pixels (a vector's rounding may leave the last none) */
        if (nj_ceil_div64(ki, kp) != parts) continue;
        if (image_block(c, pass, dev, 1, kp) > 0) return (image_cut){1, kp};
    }
    return (image_cut){0, 0};
}

/* The backward's dgamma/dbeta: a pair a channel an image, which the library's column sum adds over the
 * images in order; so gamma's element is the channel (contiguous, one a channel). */
static bool image_bwd_params_ok(const nj_canon *c)
{
    if (!(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->param_size == 0) return true;
    return c->axes[1].feature && c->axes[1].stride[NJ_OPD_PARAM] == 1 && c->param_size == c->reduce_size;
}

bool nj_image_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    /* NORMJIT_PLAN_NO_IMAGE=1: the column family plans these images, as before the family */
    if (nj_plan_switched_off("IMAGE") || c->kind != NJ_KIND_COLUMN || c->rank != 3) return false;
    const nj_canon_axis *ch = &c->axes[1], *px = &c->axes[2];
    if (!ch->reduce || px->reduce || px->extent > NJ_IMAGE_PIXELS_MAX || ch->extent > NJ_IMAGE_CHANNELS_MAX) return false;
    /* every image operand packed as x is: the slab is one contiguous run, walked by flat index */
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (image_opd(c, pass, o) && (px->stride[o] != 1 || ch->stride[o] != px->extent)) return false;
    /* gamma/beta by channel only (a table by channel index) */
    if ((c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && px->stride[NJ_OPD_PARAM] != 0) return false;
    if (image_bwd(pass) && !image_bwd_params_ok(c)) return false;
    /* the slab and the block's own floats in the device's shared memory */
    return image_stage(c, pass, dev).stage > 0;
}

/* Vector loads a thread issues before storing them to shared memory: 4 16-byte ones (64 KB in flight
 * an SM at 1024 threads, what Little's law asks on an H200), no more than a thread's share; 2 where the
 * forward adds the residual to x as floats (two streams loaded together). The backward copies x, then
 * dy, each stream alone (image_lib.cuh: image_copy): 4 too (at 2, LayerNorm f32 over the C of NCHW 7 x 7,
 * x alone staged, had 15 KB in flight an SM, latency-bound in the model: 67% of copy, now 84%; f16, x
 * and dy staged, 79.4 -> 80.5%; 63 registers, no spill, NVRTC 13 sm_90). NORMJIT_PLAN_NO_IMAGE_COPY4=1:
 * 2 in the backward, as before. */
static int32_t image_unroll(const nj_canon *c, nj_pass pass, int64_t kp, int32_t vec, int32_t block)
{
    int64_t per = nj_ceil_div64(c->reduce_size * kp / vec, block);
    bool two = image_bwd(pass) ? nj_plan_switched_off("IMAGE_COPY4") : (c->flags & NJ_FLAG_RESIDUAL) != 0;
    int64_t u = two ? 2 : 4;
    return (int32_t)(per < u ? (per < 1 ? 1 : per) : u);
}

/* The one launch both passes share: its block, vector, copies in flight, the staged slab; a block an
 * image, or an image's parts (P.tile pixels a part, a block each, image-major). */
static nj_status image_main(const nj_canon *c, nj_pass pass, const nj_device_props *dev, const char *kernel,
                            nj_plan_params *pp)
{
    image_cut cut = image_stage(c, pass, dev);
    int32_t b = cut.stage ? image_block(c, pass, dev, cut.stage, cut.kp) : 0;
    NJ_RETURN_IF(b == 0, NJ_ERR_INTERNAL, "planner: an image of %lld elements does not fit shared memory",
                 (long long)(c->reduce_size * c->axes[2].extent));
    int64_t ki = c->axes[2].extent, parts = nj_ceil_div64(ki, cut.kp);
    pp->block = b;
    pp->vec = image_vec(c, pass, cut.kp < ki);
    pp->unroll = image_unroll(c, pass, cut.kp, pp->vec, b);
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->stage = cut.stage;
    pp->tile = cut.kp < ki ? (int32_t)cut.kp : 0;
    if (pp->vec > 1)
        for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
            if (image_opd(c, pass, o)) pp->align_opds |= 1u << o;
    nj_plan_add_launch(pp, kernel, b, parts, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    pp->launch[0].shmem = (uint32_t)image_shmem(c, pass, b, cut.stage, cut.kp);
    return NJ_OK;
}

nj_status nj_plan_fwd_image(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    return image_main(c, NJ_PASS_FORWARD, dev, "nj_fwd_image", pp);
}

/* The backward: one block an image (part) writes dx and its channels' (dz * xhat, dz) pairs,
 * [image][part][channel][2] in the pgrad region ("rows": the part is a tile of its walk rows, the
 * channels); the library's column sum adds the parts' pairs of each channel in order. */
nj_status nj_plan_bwd_image(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_TRY(image_main(c, NJ_PASS_BACKWARD, dev, "nj_bwd_image", pp));
    if (!(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->param_size == 0) return NJ_OK;
    nj_plan_pgrad_rows(pp, c->reduce_size, pp->launch[0].row_mult);
    return NJ_OK;
}
