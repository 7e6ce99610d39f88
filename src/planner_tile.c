/* TILE family (fwd_tile.cu): a block per tile of short rows, staged in shared memory. nv_norms'
 * LayerNorm of 10^7 rows of 10: the row family gives a row 2 lanes of a warp (16 rows a warp), whose
 * 8-byte accesses land 40 bytes apart, so a warp's request touched 10 sectors for 128 bytes of loads,
 * and its stores wrote 25 partial sectors a request (model, H200: 38% of copy, bound by L2 traffic of
 * sectors 4 times the bytes). Here the lanes of a block take consecutive vectors of its rows (row i /
 * vectors a row, vector i % vectors a row): a packed batch is read and written as one run, every sector
 * whole. The statistics are a thread a row over the staged values.
 *
 * The backward stages x and dy the same way (nj_plan_bwd_tile). */
#include "planner_impl.h"


/* Rows of at most this many bytes of x (two sectors): from 64 bytes on, the row family's lane groups
 * move whole 16-byte vectors of whole rows (f32 rows of 16 reach a same-size copy in the model). */
#define NJ_TILE_ROW_BYTES_MAX 64
/* And rows up to 512 bytes that are not whole sectors: a lane group reads its row from the row's start,
 * so every row after the first starts inside a sector and each group's chunk of a request straddles
 * one more (LayerNorm f32 rows of 100: 75% sector efficiency, 28.7 lanes a request; 87% of copy
 * measured on the H200 on 2026-12-04 where the model says 98.5; staged here, 99.9% and 30.6).
 * NORMJIT_PLAN_NO_TILE_WIDE=1: 64 bytes only, as before. */
#define NJ_TILE_ODD_ROW_BYTES_MAX 512
/* x (floats with the residual) a tile stages: 16 KB, so that 8 blocks of 256 threads fit an SM */
#define NJ_TILE_STAGE_BYTES 16384
#define NJ_TILE_BLOCK 256
/* rows a tile at most: 3 floats a row beside the rows (rows of 16-bit pairs: 12 KB beside 4 KB) */
#define NJ_TILE_ROWS_MAX 1024

static int64_t tile_size(const nj_canon *c, int o) { return (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]); }

/* Operands a pass reads or writes by rows (x's layout along the row). */
static bool tile_opd(const nj_canon *c, nj_pass pass, int o)
{
    bool bwd = pass == NJ_PASS_BACKWARD;
    switch (o) {
    case NJ_OPD_X: return true;
    case NJ_OPD_Y: return !bwd;
    case NJ_OPD_RES: return !bwd && (c->flags & NJ_FLAG_RESIDUAL) != 0;
    case NJ_OPD_RESOUT: return !bwd && (c->flags & NJ_FLAG_RESIDUAL_OUT) != 0;
    case NJ_OPD_DY:
    case NJ_OPD_DX: return bwd;
    default: return false;
    }
}

bool nj_tile_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    (void)dev; /* a tile's 16 KB (and the backward's floats) fit every device's shared memory */
    /* NORMJIT_PLAN_NO_TILE=1: the row family plans these rows, as before the family */
    if (nj_plan_switched_off("TILE") || c->kind != NJ_KIND_ROW || c->rank != 2) return false;
    const nj_canon_axis *r = &c->axes[1];
    int64_t rb = r->extent * tile_size(c, NJ_OPD_X);
    bool odd = rb % 32 != 0 && rb <= NJ_TILE_ODD_ROW_BYTES_MAX && !nj_plan_switched_off("TILE_WIDE");
    if (!r->reduce || (rb > NJ_TILE_ROW_BYTES_MAX && !odd)) return false;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (tile_opd(c, pass, o) && r->stride[o] != 1) return false;
    /* gamma/beta along the row, one element each (a table by element; the backward's column sums) */
    if ((c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size > 0 &&
        (r->stride[NJ_OPD_PARAM] != 1 || c->param_size != r->extent))
        return false;
    return true;
}

/* Elements a vector moves: at most 16 bytes of the widest row operand, dividing the row (each row's
 * vectors stay within it: the batch stride is a run-time value). */
static int32_t tile_vec(const nj_canon *c, nj_pass pass)
{
    int64_t wide = 1;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (tile_opd(c, pass, o) && tile_size(c, o) > wide) wide = tile_size(c, o);
    int32_t v = (int32_t)(16 / wide);
    while (v > 1 && c->axes[1].extent % v != 0) v /= 2;
    return v;
}

/* Rows a tile may hold: a multiple of the rows that make whole 32-byte sectors of every row operand (of
 * its narrowest element), so that a packed batch's tiles start where its sectors do and a warp's
 * request of consecutive vectors touches whole sectors. At 409 rows of 10 f32 (16360 bytes) every tile
 * after the first started 8, 16 or 24 bytes into a sector and each request touched one more: 92%
 * sector efficiency (model, nv_norms' 10^7 x 10); at 408, 100%. NORMJIT_PLAN_NO_TILE_SECTORS=1: any
 * count, as before. */
static int64_t tile_rows_whole_sectors(const nj_canon *c, nj_pass pass, int64_t rows)
{
    int64_t e = 16;
    for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
        if (tile_opd(c, pass, o) && tile_size(c, o) < e) e = tile_size(c, o);
    int64_t b = c->axes[1].extent * e, g = 32;
    while (b % g != 0) g /= 2; /* gcd(b, 32) */
    int64_t m = 32 / g;
    return rows >= m && !nj_plan_switched_off("TILE_SECTORS") ? rows / m * m : rows;
}

/* Shape both passes share: block, vector, rows a tile (the staged bytes of a row: rb), copies in flight. */
static int64_t tile_shape(const nj_canon *c, nj_pass pass, int64_t rb, nj_plan_params *pp)
{
    int64_t rows = NJ_TILE_STAGE_BYTES / rb;
    if (rows > NJ_TILE_ROWS_MAX) rows = NJ_TILE_ROWS_MAX;
    rows = tile_rows_whole_sectors(c, pass, rows);
    pp->block = NJ_TILE_BLOCK;
    pp->vec = tile_vec(c, pass);
    pp->rows_per_block = (int32_t)rows;
    pp->split = 1;
    /* vector loads a thread issues before their stores (as the image family's copy); the backward's of
     * x and of dy together, 2 of each where they are 16 bytes (4 of x and dy in words spilled at the
     * 64 registers of its 4 blocks an SM: bf16 rows of 24 under GELU, sm_80) */
    bool wide = pp->vec * (tile_size(c, NJ_OPD_X) > tile_size(c, NJ_OPD_DY) ? tile_size(c, NJ_OPD_X) : tile_size(c, NJ_OPD_DY)) >= 16;
    if (pass == NJ_PASS_BACKWARD) pp->unroll = wide ? 2 : 4;
    else pp->unroll = (c->flags & NJ_FLAG_RESIDUAL) ? 2 : 4;
    pp->stage = 1;
    if (pp->vec > 1)
        for (int o = NJ_OPD_X; o < NJ_OPD_COUNT; o++)
            if (tile_opd(c, pass, o)) pp->align_opds |= 1u << o;
    return rows;
}

nj_status nj_plan_fwd_tile(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    (void)dev;
    int64_t n = c->axes[1].extent, es = (c->flags & NJ_FLAG_RESIDUAL) ? 4 : tile_size(c, NJ_OPD_X);
    int64_t rows = tile_shape(c, NJ_PASS_FORWARD, n * es, pp);
    nj_plan_add_launch(pp, "nj_fwd_tile", pp->block, 1, rows, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    /* 3 floats a row (shift, md, rstd), to a 16-byte boundary, then the tile's rows */
    pp->launch[0].shmem = (uint32_t)((3 * rows + 3) / 4 * 16 + rows * n * es);
    return NJ_OK;
}

/* The backward: a fixed grid of 1024 / block blocks an SM (bwd_tile.cu holds the kernel to them:
 * __launch_bounds__(block, 1024 / block), 64 registers a thread) walks the tiles in turn (x and dy staged,
 * a thread a row for the row sums, dx by vectors), each thread of a column group adding one column's
 * dz * xhat and dz over the block's rows; a block's partial row of dgamma/dbeta goes to its slot
 * (P.pgrad "slots", as the row backward's), which the library's column sum adds in slot order. */
nj_status nj_plan_bwd_tile(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t n = c->axes[1].extent;
    int64_t xb = tile_size(c, NJ_OPD_X), db = tile_size(c, NJ_OPD_DY);
    int64_t rows = tile_shape(c, NJ_PASS_BACKWARD, n * (xb + db), pp);
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132, nslot = sms * (1024 / pp->block);
    nj_plan_add_launch(pp, "nj_bwd_tile", pp->block, 1, 1, nslot);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    /* 5 floats a row and two partials a thread, to a 16-byte boundary; x, then dy from a 16-byte one */
    pp->launch[0].shmem = (uint32_t)((5 * rows + 2 * NJ_TILE_BLOCK + 3) / 4 * 16 + (rows * n * xb + 15) / 16 * 16 +
                                     rows * n * db);
    if (!(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->param_size == 0) return NJ_OK;
    nj_plan_pgrad_slots(pp, n, nslot, !!(c->flags & NJ_FLAG_BIAS));
    return NJ_OK;
}
