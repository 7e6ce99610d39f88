/* IMAGE family (fwd_image.cu): a block per batch item whose whole slab is a few tens of KB, held in
 * shared memory. LayerNorm over the C of NCHW at 7x7 and 14x14 pixels is the case: the column family cut
 * each image into tiles of 32 pixels, and a channel's 49 pixels (98 bytes of f16) straddle two tiles
 * and four sectors, so the tiles shared sectors and read x three times (f16 *x768x7x7: 2.53x the ideal
 * bytes, 37% of copy in the model). An image is contiguous: here a block copies it into shared memory
 * with 16-byte vectors, computes each pixel's statistics there (two exact passes over the staged
 * values) and writes y with 16-byte vectors: x read once, y written once, every sector whole.
 *
 * Forward only: the backward would stage x and dy, twice the bytes, and only f16 7x7 would fit; the
 * column family plans it. */
#include "planner_impl.h"

#include <stdlib.h>

/* The largest channel row (the kept inner extent times x's element) for which the family applies: past
 * 16 sectors a row, the column family's tiles of 32 x vec pixels cover whole sectors (f16 96x56x56:
 * 80% of copy there), and such slabs rarely fit shared memory anyway. */
#define NJ_IMAGE_ROW_BYTES_MAX 512
/* gamma/beta by channel are a table in static shared memory: 2 floats a channel */
#define NJ_IMAGE_CHANNELS_MAX 4096
/* at most this many pixels (a thread at least for each) */
#define NJ_IMAGE_PIXELS_MAX 1024

/* Bytes of an element of the staged slab: x's, or a float where the residual is added in. */
static int64_t image_elem(const nj_canon *c)
{
    return (c->flags & NJ_FLAG_RESIDUAL) ? 4 : nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
}

/* Operands the forward reads or writes image by image (with x's layout). */
static bool image_opd(const nj_canon *c, int o)
{
    switch (o) {
    case NJ_OPD_X:
    case NJ_OPD_Y: return true;
    case NJ_OPD_RES: return (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    default: return false;
    }
}

/* The block's own floats, before the slab in its dynamic shared memory (fwd_image.cu): the gamma/beta
 * table, a partial a statistics thread (block / pixels groups of a thread a pixel) and three floats a
 * pixel, rounded up to 16 bytes. All of it is dynamic so that the launch states the block's whole
 * shared memory (the model's occupancy without a ptxas report reads it there). */
static int64_t image_floats_bytes(const nj_canon *c, int32_t block)
{
    int64_t np = ((c->flags & NJ_FLAG_SCALE) ? 1 : 0) + ((c->flags & NJ_FLAG_BIAS) ? 1 : 0);
    int64_t px = c->axes[2].extent;
    return (4 * (np * c->reduce_size + (block / px) * px + 3 * px) + 15) / 16 * 16;
}

/* The launch's dynamic shared memory: the block's floats and the slab. */
static int64_t image_shmem(const nj_canon *c, int32_t block)
{
    return image_floats_bytes(c, block) + c->reduce_size * c->axes[2].extent * image_elem(c);
}

/* Shared memory an SM offers the blocks of a launch: the opt-in maximum of one block and the 1 KiB the
 * driver reserves beside it (228 KiB on sm_90, 164 KiB on sm_80). */
static int64_t image_smem_sm(const nj_device_props *dev)
{
    return (int64_t)dev->max_shared_per_block + 1024;
}

/* Blocks of `block` threads an SM holds, by shared memory: 0 when one does not fit. */
static int32_t image_fit(const nj_canon *c, const nj_device_props *dev, int32_t block)
{
    int64_t need = image_shmem(c, block);
    if (need > dev->max_shared_per_block) return 0;
    return (int32_t)(image_smem_sm(dev) / (need + 1024));
}


/* Elements a vector access moves: 16 bytes of the widest image operand, dividing the slab. */
static int32_t image_vec(const nj_canon *c)
{
    int64_t wide = 1;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (image_opd(c, o) && (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]) > wide) wide = (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]);
    int32_t v = (int32_t)(16 / wide);
    int64_t n = c->reduce_size * c->axes[2].extent;
    while (v > 1 && n % v != 0) v /= 2;
    /* the staged copy moves words: a vector of 16-bit x is at least 2 elements */
    if (v * nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) < 4) v = 1;
    return v;
}

/* A block of 1024 / n threads for n resident blocks an SM, so that each thread may hold 64 registers
 * (fwd_image.cu: __launch_bounds__(block, 1024 / block)), n what shared memory allows, at most 4; fewer
 * threads for a small slab (two vectors a thread), and never fewer than a thread a pixel. 0: no block
 * fits. */
static int32_t image_block(const nj_canon *c, const nj_device_props *dev)
{
    int64_t px = c->axes[2].extent;
    int64_t nv = c->reduce_size * px / image_vec(c);
    int64_t want = nj_ceil_div64(nv, 2);
    if (want < px) want = px;
    want = nj_ceil_div64(want, 32) * 32;
    for (int32_t n = 4; n >= 1; n--) {
        int32_t b = 1024 / n / 32 * 32;
        if (b < px) continue;
        if (want < b) b = (int32_t)want;
        if (image_fit(c, dev, b) >= n) return b;
    }
    return 0;
}

/* NORMJIT_PLAN_NO_IMAGE=1: the column family plans these images, as before the family (to measure the
 * two side by side: the plan text differs, so both sets of kernels sit in the cache). */
static bool image_off(void)
{
    const char *e = getenv("NORMJIT_PLAN_NO_IMAGE");
    return e && e[0] == '1';
}

bool nj_image_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    if (image_off() || pass != NJ_PASS_FORWARD || c->kind != NJ_KIND_COLUMN || c->rank != 3) return false;
    const nj_canon_axis *ch = &c->axes[1], *px = &c->axes[2];
    if (!ch->reduce || px->reduce || px->extent > NJ_IMAGE_PIXELS_MAX || ch->extent > NJ_IMAGE_CHANNELS_MAX) return false;
    if (px->extent * nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) > NJ_IMAGE_ROW_BYTES_MAX) return false;
    /* every image operand packed as x is: the slab is one contiguous run, walked by flat index */
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (image_opd(c, o) && (px->stride[o] != 1 || ch->stride[o] != px->extent)) return false;
    /* gamma/beta by channel only (a table by channel index) */
    if ((c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && px->stride[NJ_OPD_PARAM] != 0) return false;
    /* the slab and the block's own arrays in the device's shared memory */
    return image_block(c, dev) > 0;
}

/* Vector loads a thread issues before storing them to shared memory: 4 16-byte ones (64 KB in flight
 * an SM at 1024 threads, what Little's law asks on an H200), 2 where they are added to the residual as
 * floats, no more than a thread's share of the slab. */
static int32_t image_unroll(const nj_canon *c, int32_t vec, int32_t block)
{
    int64_t per = nj_ceil_div64(c->reduce_size * c->axes[2].extent / vec, block);
    int64_t u = (c->flags & NJ_FLAG_RESIDUAL) ? 2 : 4;
    return (int32_t)(per < u ? (per < 1 ? 1 : per) : u);
}

nj_status nj_plan_fwd_image(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int32_t b = image_block(c, dev);
    NJ_RETURN_IF(b == 0, NJ_ERR_INTERNAL, "planner: an image of %lld elements does not fit shared memory",
                 (long long)(c->reduce_size * c->axes[2].extent));
    pp->block = b;
    pp->vec = image_vec(c);
    pp->unroll = image_unroll(c, pp->vec, b);
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->stage = 1;
    if (pp->vec > 1)
        for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
            if (image_opd(c, o)) pp->align_opds |= 1u << o;
    nj_plan_add_launch(pp, "nj_fwd_image", b, 1, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    pp->launch[0].shmem = (uint32_t)image_shmem(c, b);
    return NJ_OK;
}

nj_status nj_plan_bwd_image(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    (void)c, (void)dev, (void)pp;
    return nj_fail(NJ_ERR_INTERNAL, "planner: the image family plans no backward (nj_image_applies)");
}
