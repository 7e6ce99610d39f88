/* ROW family (fwd_row.cu, bwd_row.cu): a warp or a block per row.
 *
 * Forward: the ROW kind and other row-like problems (plan_rowlike). Rows of up to NJ_WARP_ROW_MAX
 * elements get a warp each (4 rows per 128-thread block), or a group of 2 to 16 lanes when that keeps
 * more lanes busy (plan_row_lanes: several rows a warp), longer rows a block each; the row stays in
 * registers when a thread's share fits (regs_cache), else the kernel streams x twice; rows of
 * NJ_SPLIT_MIN elements and more are split over several blocks (split), their statistics combined
 * through the workspace. The vector width is the widest of 8/4/2 that divides the row, keeps every
 * access within 16 bytes and matches the layout of every operand (unit stride along the row, kept
 * strides multiples of it). Base pointers and batch strides are run-time values: the plan names the
 * operands that need them aligned (align_opds) and the launch runs the unaligned variant
 * (nj_plan_variant) when they are not.
 *
 * Backward: see nj_plan_bwd_row. */
#include "planner_impl.h"

#include <stdlib.h>

#define NJ_WARP_ROW_MAX 1024     /* rows up to this length get a warp (or a group of lanes) each */
/* Elements per thread a block-per-row plan aims for: 8 (one 16-byte vector of a 16-bit row, 256 threads
 * for 2048, 1024 for 8192, as Triton-generated kernels run them). 16 halved the threads and doubled each
 * thread's unrolled code: NVRTC took 3 to 6 ms more a kernel (the LLM manifest's median, 8% of it). */
#define NJ_ROW_ELEMS_TARGET 8

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

/* plan_row_vec for x and y alone (gamma/beta staged in shared memory, copied a float at a time). */
static int32_t plan_row_vec_acts(const nj_canon *c)
{
    nj_canon a = *c;
    a.flags &= ~(uint32_t)(NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    a.dtype[NJ_OPD_PARAM] = NJ_DTYPE_NONE;
    return plan_row_vec(&a);
}

static int32_t plan_round32(int64_t n) { return (int32_t)(nj_ceil_div64(n, 32) * 32); }

/* Lanes a short row gets (a warp, or a group of 16/8/4/2 lanes, several rows a warp): of nch chunks, a
 * group of t lanes walks ceil(nch / t) chunk slots a lane, nch of t * ceil(nch / t) of them busy. A
 * warp per row of 10 f32 (5 float2 chunks) kept 5 of 32 lanes busy; 2 lanes a row keep 5 of 6 chunk
 * slots busy. Narrower groups only when they keep clearly more lanes busy (2 points: the accesses of
 * a narrower group spread over more rows an instruction) and a lane's share stays within max_elems
 * elements (its registers). */
static int32_t plan_row_lanes(int64_t nch, int32_t vec, int64_t max_elems)
{
    int32_t best = 32;
    double best_busy = (double)nch / (double)(32 * nj_ceil_div64(nch, 32));
    for (int32_t t = 16; t >= 2; t /= 2) {
        int64_t slots = nj_ceil_div64(nch, t);
        double busy = (double)nch / (double)(t * slots);
        if (slots * vec > max_elems) break;
        if (busy > best_busy + 0.02) {
            best = t;
            best_busy = busy;
        }
    }
    return best;
}

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

/* Resident blocks an SM of a persistent block-per-row forward (P.persist), or 0 for a block a row.
 * A block a row re-read gamma and beta from L2 for every row (LayerNorm bf16 rows of 4096: 100 MB of L2
 * reads for 67 MB of DRAM traffic, the model's bound) and waited for each row's loads after the last
 * row's reduction. A persistent block loads its share of gamma/beta once and fetches the next row's x
 * while it reduces this one (as the row backward does: on the H200 that took its LayerNorm bf16 32768 x
 * 4096 from 2.18 to 3.11 TB/s). A share of one vector (8 elements of 16-bit x) gets NJ_PERSIST_REGS
 * registers a thread; one of several vectors (f32 rows, 16-bit rows of 8192) the budget of the most
 * blocks an SM that leave NJ_PERSIST_WIDE_SLACK over the estimate. Where the row, the fetched words and
 * gamma/beta fit, __launch_bounds__(block, persist) holds the kernel to that budget, so the grid the
 * plan counts on is resident (ptxas, NVRTC 13 sm_90 and sm_80: f32 rows of 2048-4096 63 registers,
 * 16-bit rows of 8192 56-64, no spills). Where that leaves one block an SM, and with the fused residual
 * add, which already runs near copy speed (89.8% of copy, H200, 2026-12-04), it stays a block a row. */
#define NJ_PERSIST_REGS 40
/* registers over the estimate a share of several vectors needs: held to 40 for two vectors (bf16 rows of
 * 1100, vec 4; f32 rows), ptxas gave the reduction's call a 16-byte stack frame */
#define NJ_PERSIST_WIDE_SLACK 8
/* staged gamma/beta: at most this many bytes a block (without an opt-in, a block's static and dynamic
 * shared memory together stay within 48 KiB: 4 KiB left for the kernel's own arrays, up to 2 KiB of
 * column sums in warp-row backwards), and a block's share of an SM's shared memory */
#define NJ_PERSIST_STAGE_MAX (44 * 1024)
#define NJ_PERSIST_STAGE_SM (200 * 1024)

/* NORMJIT_PLAN_NO_PERSIST=1: every row walk a block a row and without fetch-ahead, as before P.persist */
static bool plan_persist_off(void) { return nj_plan_switched_off("PERSIST"); }

/* What a persistent row walk needs of the problem and the shape: a block a row held in registers, no
 * residual, one contiguous reduced axis, one gamma/beta along it for every row. */
static bool plan_fwd_persist_ok(const nj_canon *c, const nj_plan_params *pp)
{
    if (plan_persist_off()) return false;
    if (pp->rows_per_block != 1 || pp->regs_cache <= 0 || pp->regs_cache % pp->vec != 0 || pp->block > 1024 ||
        (c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT)) || c->kind != NJ_KIND_ROW)
        return false;
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    if (!in->reduce || in->stride[NJ_OPD_X] != 1 || in->stride[NJ_OPD_Y] != 1) return false;
    for (int a = 1; a < c->rank - 1; a++)
        if (c->axes[a].reduce) return false; /* one reduced axis: a row is contiguous */
    if (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) {
        if (in->stride[NJ_OPD_PARAM] != 1) return false;
        for (int a = 0; a < c->rank - 1; a++)
            if (c->axes[a].stride[NJ_OPD_PARAM] != 0) return false; /* one gamma/beta for every row */
    }
    return true;
}

/* Registers a persistent thread holds: the share (floats), its fetched words, gamma's and beta's held
 * words (none where they are staged), and 16 more (indices, statistics, epilogue). NVRTC sm_90: 36
 * estimated, 39-40 taken (16-bit x and gamma/beta, 256 and 512 threads, with stats and GELU); 44 and 48
 * (f32 gamma/beta or x) spilled 32-56 bytes at 40: those stay a block a row. */
static int32_t plan_fwd_persist_regs(const nj_canon *c, const nj_plan_params *pp, bool staged)
{
    int32_t share = pp->regs_cache, xb = (int32_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    int32_t pb = (int32_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_PARAM]);
    return share + share * xb / 4 + (staged ? 0 : nj_plan_nparam(c) * share * pb / 4) + 16;
}

static int32_t plan_fwd_persist(const nj_canon *c, const nj_plan_params *pp, bool staged)
{
    if (!plan_fwd_persist_ok(c, pp)) return 0;
    int32_t share = pp->regs_cache, regs = plan_fwd_persist_regs(c, pp, staged);
    int32_t by_threads = 2048 / pp->block, n;
    if (share == pp->vec) {
        if (regs > NJ_PERSIST_REGS) return 0;
        int32_t by_regs = 65536 / (NJ_PERSIST_REGS * pp->block);
        n = by_threads < by_regs ? by_threads : by_regs;
    } else { /* two vectors a thread of 4 or more elements (narrower or more, the chunks' index arithmetic
                spilled: f32 rows of 4097, eight 1-element chunks a thread, 8 bytes at sm_80): the most
                blocks whose register budget leaves the slack */
        if (pp->vec < 4 || share > 2 * pp->vec) return 0;
        for (n = by_threads; n >= 2 && 65536 / (pp->block * n) < regs + NJ_PERSIST_WIDE_SLACK; n--) {}
    }
    /* one block an SM (1024 threads) would wait on its own barriers with only the next row in flight */
    return n < 2 ? 0 : n > 32 ? 32 : n;
}

/* Block, rows a block and the share a thread keeps in registers, for vector width vec. */
static void plan_fwd_row_shape(const nj_canon *c, const nj_device_props *dev, int32_t vec, nj_plan_params *pp)
{
    int64_t n = c->reduce_size, nch = n / vec;
    pp->vec = vec;
    pp->split = 1;
    int32_t maxt = dev->max_threads_per_block > 0 ? dev->max_threads_per_block : 1024;
    if (n <= NJ_WARP_ROW_MAX) {
        /* a share of at most 32 elements (a warp's of 1024 f32), or the warp's when larger */
        int64_t warp_elems = nj_ceil_div64(nch, 32) * vec;
        int32_t tpr = plan_row_lanes(nch, vec, warp_elems > 32 ? warp_elems : 32);
        pp->block = 128;
        pp->rows_per_block = pp->block / tpr;
        pp->regs_cache = (int32_t)(nj_ceil_div64(nch, tpr) * vec);
    } else {
        int32_t t = plan_round32(nj_ceil_div64(n, NJ_ROW_ELEMS_TARGET));
        if (t < 128) t = 128;
        if (t > maxt) t = maxt;
        int64_t elems = nj_ceil_div64(nch, t) * vec;
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
}

/* A persistent plan of 16-bit x with gamma/beta: each block copies them once into dynamic shared memory
 * (P.stage = 1, as floats) rather than holding their words. f32 gamma/beta (mixed precision) would hold
 * 16 registers a thread and limit x to 8-byte vectors (LayerNorm bf16 rows of 4096 with f32 gamma/beta,
 * a block a row: 49.7% of copy in the model, L2-bound on 134 MB of gamma/beta reads); 16-bit ones held
 * 8, and at the 40 registers the plan's blocks an SM allow ptxas spilled 24-32 bytes a thread (NVRTC
 * 13, sm_80 and sm_90: LayerNorm bf16 rows of 1536-4096, the LLM manifest's 2048 and 4096 among them;
 * staged, none). NORMJIT_PLAN_NO_STAGE16=1 holds 16-bit gamma/beta as words again.
 * Returns the staged bytes, with pp's shape, persist, stage and alignment set, or 0 (pp untouched). */
static uint32_t plan_fwd_row_staged(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t pb = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_PARAM]);
    if (nj_plan_nparam(c) == 0 || (pb != 4 && (pb != 2 || nj_plan_switched_off("STAGE16"))) ||
        nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) != 2 || nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_Y]) != 2)
        return 0;
    nj_plan_params q = *pp;
    plan_fwd_row_shape(c, dev, plan_row_vec_acts(c), &q);
    int32_t n = plan_fwd_persist(c, &q, true);
    int64_t bytes = nj_plan_nparam(c) * c->reduce_size * 4;
    if (n == 0 || bytes > (int64_t)dev->max_shared_per_block || bytes > NJ_PERSIST_STAGE_MAX) return 0;
    if ((int64_t)n * (bytes + 1024) > NJ_PERSIST_STAGE_SM) n = (int32_t)(NJ_PERSIST_STAGE_SM / (bytes + 1024));
    if (n < 2) return 0;
    *pp = q;
    pp->persist = n;
    pp->stage = 1;
    pp->align_opds = plan_fwd_row_align(c); /* gamma/beta staged with vector loads too */
    return (uint32_t)bytes;
}

/* A row whose share keeps 1024 threads, one block an SM, at NJ_PERSIST_ONE_FLIGHT bytes of x or more a
 * thread (f32 rows of 8192-16384, 16-bit rows of 16384): too few blocks for the persistent plans above,
 * but its next row's fetched words alone are 32 KB or more an SM in flight, what Little's law asks
 * (docs/model.md). A block a row re-read gamma and beta from L2 every row (LayerNorm f32 10000 x 10000:
 * 80 KB of them for 40 KB of x, L2-bound in the model, 83.5% of copy). Persistent with one block an SM,
 * gamma/beta staged once as floats (P.stage 1). NORMJIT_PLAN_NO_PERSIST_ONE=1: a block a row. */
#define NJ_PERSIST_ONE_FLIGHT 32
static uint32_t plan_fwd_row_staged_one(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t xb = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]), bytes = nj_plan_nparam(c) * c->reduce_size * 4;
    if (nj_plan_nparam(c) == 0 || nj_plan_switched_off("PERSIST_ONE") || pp->block != 1024 ||
        !plan_fwd_persist_ok(c, pp) || pp->regs_cache * xb < NJ_PERSIST_ONE_FLIGHT ||
        bytes + 4096 > (int64_t)dev->max_shared_per_block)
        return 0;
    /* within the 64 registers a 1024-thread block has, with the slack of a wide share */
    if (plan_fwd_persist_regs(c, pp, true) + NJ_PERSIST_WIDE_SLACK > 64) return 0;
    pp->persist = 1;
    pp->stage = 1;
    pp->align_opds = plan_fwd_row_align(c); /* gamma/beta staged with vector loads too */
    return (uint32_t)bytes;
}

/* A streamed block-per-row forward reads x twice, the second time from DRAM where the rows of the
 * resident blocks outgrow the L2 (InstanceNorm f32 NCDHW of 32^3 volumes: rows of 128 KB, 1.41x the
 * ideal bytes, 67% of copy in the model). A row that fits shared memory is kept there instead
 * (P.stage = 2): the statistics walk stores its x (x + the residual, as floats, with one) and the
 * normalizing walk reads it back, each thread its own chunks. 1024 threads, since at most one or two
 * such blocks fit an SM and their walks must keep enough loads in flight. Returns the staged bytes
 * (pp's stage, block and shared memory set), or 0. Not past NJ_ROW_XSTAGE_MAX: a row that long is
 * split over blocks (nj_plan_fwd_split) before it fills an SM's shared memory anyway. */
static uint32_t plan_fwd_row_xstage(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    if (nj_plan_switched_off("ROW_STAGE")) return 0; /* streamed twice, as before */
    int64_t es = (c->flags & NJ_FLAG_RESIDUAL) ? 4 : nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]);
    int64_t bytes = c->reduce_size * es;
    int32_t maxt = dev->max_threads_per_block > 0 ? dev->max_threads_per_block : 1024;
    if (pp->regs_cache != 0 || pp->rows_per_block != 1 || pp->persist || c->reduce_size >= NJ_SPLIT_MIN ||
        bytes > NJ_ROW_XSTAGE_MAX || bytes > (int64_t)dev->max_shared_per_block || maxt < 1024)
        return 0;
    pp->stage = 2;
    pp->block = 1024;
    return (uint32_t)bytes;
}

/* A row of one vector a thread that takes 1024 threads (16-bit rows of 8192) cannot persist: one block
 * an SM would wait on its own barriers with only its next row in flight, so each block re-read gamma and
 * beta from L2 for every row (LayerNorm f16 rows of 8192: L2-bound in the model, 70.9% of copy; 52.5%
 * measured on the H200 on 2026-12-04). From NJ_PERSIST_WIDE_FROM threads (rows of 6144 and up, whose
 * gamma/beta outgrow the staging of plan_fwd_row_staged) the one-vector persistent plan, held to 40
 * registers, spilled 32 bytes (6144) or did not fit two blocks (6656-7680). Half the threads with two
 * vectors each persist two blocks an SM where the registers allow. NORMJIT_PLAN_NO_PERSIST_WIDE=1 keeps
 * the one-vector plan. */
#define NJ_PERSIST_WIDE_FROM 768
static void plan_fwd_row_wide(const nj_canon *c, nj_plan_params *pp)
{
    if (nj_plan_switched_off("PERSIST_WIDE") || pp->block < NJ_PERSIST_WIDE_FROM || pp->rows_per_block != 1 ||
        pp->regs_cache != pp->vec)
        return;
    nj_plan_params q = *pp;
    q.block = plan_round32(pp->block / 2);
    q.regs_cache = (int32_t)(nj_ceil_div64(c->reduce_size / pp->vec, q.block) * pp->vec);
    if (plan_fwd_persist(c, &q, false) >= 2) *pp = q;
}

/* A split forward pipelined in one launch (P.lag, nj_plan_split_pipe): pieces of NJ_PIPE_ITERS vectors
 * a thread, statistics of at most NJ_PIPE_BYTES of x, the residual and y (docs/architecture.md). Rows
 * longer than that (nv_norms' 10 x 10^7: 80 MB) keep the two launches and read x twice. */
#define NJ_PIPE_ITERS 2
static bool plan_fwd_pipe(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    if (nj_plan_switched_off("SPLIT_PIPE") || c->reduce_size > NJ_PIPE_BYTES / nj_plan_elem_bytes(c, NJ_PASS_FORWARD))
        return false;
    /* [statistic][piece][sum, m2], [statistic][shifted mean, rstd] */
    nj_plan_split_pipe(c, dev, (int64_t)pp->block * pp->vec * NJ_PIPE_ITERS, 2, 2, "nj_fwd_row_zero", "nj_fwd_row", pp);
    return true;
}

nj_status nj_plan_fwd_row(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t n = c->reduce_size;
    uint32_t staged = plan_fwd_row_staged(c, dev, pp);
    if (!staged) {
        int32_t vec = plan_row_vec(c);
        plan_fwd_row_shape(c, dev, vec, pp);
        if (vec > 1) pp->align_opds = plan_fwd_row_align(c);
    }
    if (pp->regs_cache == 0 && n >= NJ_SPLIT_MIN) {
        /* x is read twice, as a streamed row is anyway: from L2 when pipelined */
        if (!plan_fwd_pipe(c, dev, pp)) nj_plan_fwd_split(c, "nj_fwd_row_part", "nj_fwd_row", pp);
        return NJ_OK;
    }
    if (!staged) staged = plan_fwd_row_xstage(c, dev, pp);
    if (!staged) staged = plan_fwd_row_staged_one(c, dev, pp);
    if (!staged) plan_fwd_row_wide(c, pp);
    nj_plan_add_launch(pp, "nj_fwd_row", pp->block, c->kept_inner, pp->rows_per_block, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    if (!staged) pp->persist = plan_fwd_persist(c, pp, false);
    pp->launch[0].shmem = staged;
    if (pp->persist) {
        int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
        pp->launch[0].grid_x_cap = (int64_t)sms * pp->persist;
        pp->launch[0].even = 1;
        return NJ_OK;
    }
    nj_plan_grid_loop(pp, (int64_t)pp->rows_per_block * n, dev);
    /* The loop's cap is two waves of 16 blocks of 128 threads an SM (32 registers a thread); the row
     * kernels that loop take 40-56 (NVRTC sm_90: f32 rows of 10, 43; of 100, 56), 9-10 blocks an SM:
     * 4224 blocks of equal work were 3.2 waves on an H200, the last round a fifth full (a fifth of the
     * machine's time idle). Four times the blocks: 12.8 waves, the partial last round about 2%. */
    if (pp->grid_loop) pp->launch[0].grid_x_cap *= 4;
    return NJ_OK;
}


/* ROW family (bwd_row.cu): the ROW kind whose only feature axis, if any, is the row (LayerNorm and
 * RMSNorm over the last axes). Rows up to NJ_BWD_WARP_ROW get a warp (or a group of lanes) each;
 * longer ones a block sized for about NJ_BWD_ELEMS elements a thread, whose column sums stay in
 * registers across rows up to NJ_BWD_ROW_MAX (beyond, they would need more: see NJ_BWD_ROW_LONG). */
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

/* Whether the slots' row loop fetches the next row's x, dy, mean and rstd (raw words) while it works on
 * this one (P.persist on a backward plan). On the H200 that took the LayerNorm bf16 32768 x 4096
 * backward from 2.18 to 3.11 TB/s. Where a thread's share of a row is at most 8 elements (16 registers
 * of fetched words at most) and a warp or more takes a row, with these exceptions (NVRTC 13.0, sm_80 and
 * sm_90):
 * - blocks of 800-1024 threads (16-bit rows of 6400-8192, one block an SM) fetch too since 2026-12-07,
 *   the asm unpacking of the fetched words (bwd_row.cu) leaving them 62-72 registers, except 1024-thread
 *   blocks (64 registers) under GELU erf: with the saved statistics they spilled 24-64 B (f16 and bf16
 *   rows of 8192, sm_80 and sm_90; 896 threads under GELU erf take 72, no spill). Without the fetch
 *   their slots walked rows-bound (model, H200, LayerNorm bf16 *x7168: 78.8% of copy -> 81.0; *x6656
 *   72.1 -> 78.6; *x8192 80.0 -> 80.2); NORMJIT_PLAN_NO_FETCH_WIDE=1: not past 768, as before;
 * - groups of lanes: f32 rows of 10 took 66 registers with it (51 without), so 3 of the plan's 4 blocks of
 *   256 threads an SM were resident; their lanes keep the chunks of 16 rows a warp in flight without it;
 * - blocks under 512 threads (the plan counts on 1024 threads an SM: 64 registers) whose fetched words
 *   exceed 8 (f32 rows of 512 to 2048: 72-80 registers with it, 48-64 without, and 64 KB an SM in flight
 *   anyway), or under GELU erf (bf16 rows of 2048: 80 registers with it, 64 without). */
static bool plan_bwd_fetch(const nj_canon *c, const nj_plan_params *pp)
{
    if (plan_persist_off()) return false;
    int64_t tpr = pp->block / pp->rows_per_block, nch = c->reduce_size / pp->vec;
    int64_t share = (nch + tpr - 1) / tpr * pp->vec;
    if (tpr < 32 || share > 8 || pp->block > (nj_plan_switched_off("FETCH_WIDE") ? 768 : 1024)) return false;
    if (pp->block > 896 && c->act == NJ_ACT_GELU_ERF) return false;
    int64_t words = share * (nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) + nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY])) / 4;
    return pp->block >= 512 || (words <= 8 && c->act != NJ_ACT_GELU_ERF && c->act != NJ_ACT_GELU_TANH);
}

/* Bytes of the f32 table a slots walk may stage (P.stage 1): gamma, and beta where an activation reads it. */
static int64_t bwd_table_bytes(const nj_canon *c) { return nj_plan_bwd_nparam(c) * c->reduce_size * 4; }

/* Slots are blocks: each writes a partial row of dgamma (and dbeta) that the column sum reads back, so
 * 2 or 4 blocks an SM write 2 or 4 times the partial rows one would (LayerNorm 16-bit rows of 2048: 528
 * blocks of 256 threads, 8.65 MB written and read, 17% of the pass's DRAM bytes in the model). Where
 * those blocks are 256 or 512 threads that each own one vector chunk (16-bit rows of 2048 and 4096:
 * 53-60 registers, NVRTC sm_80/sm_90), they become row groups of one 1024-thread block: rows_per_block
 * 2 or 4, a slot an SM (2.16 MB for the rows of 2048), the row reductions over the block's barriers
 * (bwd_row.cu: GW). 1024 threads cap a thread at 64 registers: not under GELU, nor where a thread owns
 * several chunks (f32 rows of 1000: 80 registers). RMSNorm and LayerNorm, 16-bit rows of 2048 and 4096,
 * with or without bias, residual, saved statistics, f32 gamma/beta, ReLU, SiLU or sigmoid: 63-64
 * registers and no spill (NVRTC 13.0, sm_80 and sm_90; the separate blocks took 53-64). A row group
 * past the last row fetches zeros (its sums add nothing): testing it at each chunk of the sums spilled
 * 40-64 B with the dbeta sums. NORMJIT_PLAN_NO_ROW_GROUPS=1: the separate blocks, as before.
 * Groups of 96-224 threads, and blocks an SM that come to 768-960 threads (16-bit rows of 768, 1024,
 * 1536, 2560, 3072: 10, 8, 5, 3 and 2 groups), group the same way (bwd_row_groups_wide): their 264-1056
 * slots wrote 6.5-8.7 MB of partial rows (model, H200, LayerNorm bf16 backward: 75.3-77.6% of copy;
 * grouped 82.2-82.8). A group under 256 threads only where each thread owns exactly one chunk: rows of
 * 1000 (125 chunks in groups of 128) spilled 68-104 B at 1024 threads. Past 768 threads (64 registers
 * a thread) only without an activation: SiLU and sigmoid spilled 16-28 B at 960 (rows of 768-2560). */
static bool bwd_row_groups_wide(const nj_canon *c, int64_t nch, const nj_plan_params *pp, int32_t per_sm)
{
    int64_t total = (int64_t)pp->block * per_sm;
    if (nj_plan_switched_off("ROW_GROUPS_WIDE") || pp->block % 32 != 0 || total < 768 || total > 1024 ||
        (total > 768 && c->act != NJ_ACT_NONE))
        return false;
    return pp->block >= 256 || (pp->block >= 96 && nch == pp->block);
}

static bool plan_bwd_row_groups(const nj_canon *c, nj_plan_params *pp, int64_t one_chunk, int32_t per_sm,
                                int32_t maxt)
{
    bool classic = pp->block >= 256 && pp->block * per_sm == 1024;
    if (per_sm < 2 || !(classic || bwd_row_groups_wide(c, c->reduce_size / pp->vec, pp, per_sm)) || maxt < 1024 ||
        one_chunk > pp->block || pp->rows_per_block != 1 || c->act == NJ_ACT_GELU_ERF ||
        c->act == NJ_ACT_GELU_TANH || nj_plan_switched_off("ROW_GROUPS"))
        return false;
    /* The groups add their column sums in a static array of n floats a stream (bwd_row.cu), beside the
     * f32 gamma/beta a slots walk may stage: both within NJ_PERSIST_STAGE_MAX, the row plans' budget for
     * launching within 48 KiB without an opt-in. LayerNorm bf16 rows of 4096 with f32 gamma/beta (32 KiB
     * of sums and 16-32 of table) keeps the separate blocks. */
    int64_t streams = (c->flags & NJ_FLAG_BIAS) ? 2 : 1;
    int64_t table = nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_PARAM]) == 4 ? bwd_table_bytes(c) : 0;
    if (streams * c->reduce_size * 4 + table > NJ_PERSIST_STAGE_MAX) return false;
    pp->rows_per_block = per_sm;
    pp->block *= per_sm;
    return true;
}

/* Slot pairs (sm_90): a slots walk of one block an SM writes a partial row of n floats (two with a bias)
 * a block, which the column sum reads back: LayerNorm 16-bit rows of 8192, 8.65 of the pass's 109 MB of
 * DRAM in the model, and 2.7 us of its 32.3 in the column sum. In thread-block clusters of two, the
 * second block of a pair hands its partial row to the first through distributed shared memory and the
 * first writes their sum: half the rows. Not for several blocks an SM (their kernels' registers are held
 * to the blocks an SM: __cluster_dims__ kernels take one) nor an odd slot count. A block a row exchanges
 * its registers' sums through dynamic shared memory after the staged table (*bytes); row groups
 * through their shared partial row. NORMJIT_PLAN_NO_SLOT_PAIRS=1: a partial row a block. */
static bool plan_bwd_slot_pairs(const nj_canon *c, const nj_device_props *dev, const nj_plan_params *pp,
                                int32_t per_sm, int32_t nslot, uint32_t *bytes)
{
    if (dev->arch < 90 || per_sm != 1 || nslot % 2 != 0 || pp->block < 512 || nj_plan_switched_off("SLOT_PAIRS"))
        return false;
    int64_t tpr = pp->block / pp->rows_per_block, nch = c->reduce_size / pp->vec;
    int64_t streams = (c->flags & NJ_FLAG_BIAS) ? 2 : 1;
    /* row groups hand over their shared partial row (no more shared memory); a block a row the
     * registers of its CPT chunks of vec columns, a float a thread and column */
    int64_t b = pp->rows_per_block > 1 ? 0 : streams * nj_ceil_div64(nch, tpr) * pp->vec * pp->block * 4;
    if (b + pp->launch[0].shmem > (int64_t)dev->max_shared_per_block) return false; /* after the table */
    *bytes = (uint32_t)b;
    return true;
}

/* 16-bit rows whose vectors are shorter than 8 (rows of 4100, 5124: n % 8 != 0) past 1024 chunks took
 * blocks of 512 threads, three chunks a thread for some: one block an SM that walked its slot's rows
 * without fetching the next (plan_bwd_fetch wants at most 8 elements a thread), each row a load latency
 * and two reductions (model, H200: LayerNorm bf16 *x4100 backward rows-bound, 47.7% of copy; RMSNorm f16
 * *x5124 59.6). Blocks of 544-768 threads give each thread two chunks (8 elements of vec 4) and fetch:
 * 76.4 and 82.2. Where a 512-thread block was the plan (t at least 512: smaller blocks are several an
 * SM already); not f32 rows, whose twice the bytes a row keep them DRAM-bound either way.
 * NORMJIT_PLAN_NO_ROW_TWO_CHUNKS=1: 512, as before. */
static void bwd_row_two_chunks(const nj_canon *c, int32_t vec, int32_t maxt, int64_t *t, int64_t *cap)
{
    int64_t two = (nj_ceil_div64(c->reduce_size / vec, 2) + 31) / 32 * 32;
    if (*cap == 512 && *t >= 512 && vec * 2 <= NJ_BWD_ELEMS && two > 512 && two <= 768 && two <= maxt &&
        nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) == 2 && !nj_plan_switched_off("ROW_TWO_CHUNKS"))
        *t = *cap = two;
}

nj_status nj_plan_bwd_row(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t n = c->reduce_size;
    int32_t maxt = dev->max_threads_per_block >= 64 ? dev->max_threads_per_block : 1024;
    pp->vec = bwd_row_vec(c);
    if (pp->vec > 1) pp->align_opds = 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX;
    /* gamma (and beta under an activation) load a vector a chunk, along the row like x */
    if (pp->vec > 1 && c->param_size > 0) pp->align_opds |= 1u << NJ_OPD_PARAM;
    pp->split = 1;
    pp->regs_cache = 0;
    if (n <= NJ_BWD_WARP_ROW) {
        /* a group of lanes a row when that keeps more lanes busy (plan_row_lanes), a share of at most 8
         * elements or the warp's when larger: a lane keeps its share's column sums of dgamma and dbeta
         * and the row's values between the passes in registers (4 x 8 at 8 elements) */
        int64_t nch = n / pp->vec, warp_elems = nj_ceil_div64(nch, 32) * pp->vec;
        pp->block = 256;
        pp->rows_per_block = pp->block / plan_row_lanes(nch, pp->vec, warp_elems > 8 ? warp_elems : 8);
    } else {
        int64_t t = (n / NJ_BWD_ELEMS + 31) / 32 * 32;
        /* Up to 1024 threads when each then owns one vector chunk (its column sums: 2 x vec registers,
         * 51-56 at 1024 threads for 16-bit rows of 5120 and 8192, one unrolled chunk instead of two:
         * ~10 ms less NVRTC); else at most 512: __launch_bounds__(512) leaves 128 registers a thread
         * for the column sums of several chunks (10000 f32 rows spilled at 1024). */
        int64_t one_chunk = (n / pp->vec + 31) / 32 * 32;
        int64_t cap = one_chunk <= maxt ? 1024 : 512;
        if (cap > maxt) cap = maxt;
        bwd_row_two_chunks(c, pp->vec, maxt, &t, &cap);
        pp->block = (int32_t)(t < 64 ? 64 : t > cap ? cap : t);
        pp->rows_per_block = 1;
    }
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    if (c->param_size == 0 || n > NJ_BWD_ROW_MAX) {
        nj_plan_add_launch(pp, "nj_bwd_row", pp->block, c->kept_inner, 1, 0);
        nj_plan_role(pp, NJ_ROLE_MAIN);
        pp->launch[0].row_div = pp->rows_per_block;
        nj_plan_grid_loop(pp, (int64_t)pp->rows_per_block * n, dev);
        nj_plan_pgrad(c, dev, pp); /* none without gamma/beta */
        nj_plan_pgrad_dx(c, pp);
        return NJ_OK;
    }
    /* A fixed number of blocks (one partial row each), 1024 threads an SM. A 512-thread block whose
     * threads own one vector chunk each was meant to fit twice (56-64 registers a thread); one that owns
     * several chunks holds up to 128 registers a thread: one block an SM. On the H200, two 512-thread
     * blocks an SM took the bf16 RMSNorm backward of 32768 x 4096 from 2.26 to 3.09 TB/s. The saved-mean
     * correction (numerics) took bf16 kernels to 75-77 registers (one block an SM resident, the slots
     * in two waves: LayerNorm bf16 32768 x 4096, 222 -> 263 us; __launch_bounds__(512, 2) spilled):
     * the compiler had unpacked the next row's prefetched bf16 words into floats. bwd_row.cu unpacks
     * them in asm: 64 registers (NVRTC sm_90, bf16 rows of 2048 and 4096, as f16 rows), the blocks
     * assumed here resident again (to be measured on an H200). Rows above 256 elements in blocks of
     * fewer than 512 threads can still exceed 64: f32 rows of 1000 take 80 (6 of 8 blocks of 128
     * threads resident), of 768 72 (9 of 10 blocks of 96). */
    int64_t one_chunk = (n / pp->vec + 31) / 32 * 32;
    int32_t per_sm = pp->block < 512 ? 1024 / pp->block : pp->block == 512 && one_chunk <= 512 ? 2 : 1;
    bool fetch = plan_bwd_fetch(c, pp);
    if (plan_bwd_row_groups(c, pp, one_chunk, per_sm, maxt)) per_sm = 1;
    int32_t nslot = sms * per_sm;
    nj_plan_add_launch(pp, "nj_bwd_row", pp->block, 1, 1, nslot);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    if (fetch) pp->persist = per_sm;
    /* f32 gamma (and beta under an activation) in shared memory, copied once a block (the slots' blocks
     * walk many rows): re-read each row, they made the walk L2-bound (LayerNorm bf16 rows of 4096: 36.6 us
     * of L2 traffic, 26.7 of DRAM, in the model; f32 rows of 10000, not fetching ahead, whose two walks
     * read gamma twice a row: 402 us of L2 traffic, 295 of DRAM). 16-bit ones stay loads (measured on the
     * H200 as they are). NORMJIT_PLAN_NO_ROW_STAGE=1: only fetching walks stage them, as before. */
    int64_t bytes = bwd_table_bytes(c);
    /* (not for blocks under 256 threads: f32 rows of 768, 96 threads, spilled on sm_90 with the table) */
    if ((fetch || (pp->block / pp->rows_per_block >= 256 && !nj_plan_switched_off("ROW_STAGE"))) && nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_PARAM]) == 4 &&
        bytes > 0 && bytes <= NJ_PERSIST_STAGE_MAX && bytes <= (int64_t)dev->max_shared_per_block &&
        per_sm * (bytes + 4096) <= NJ_PERSIST_STAGE_SM) {
        pp->stage = 1;
        pp->launch[0].shmem = (uint32_t)bytes;
    }
    uint32_t pair_bytes = 0;
    bool pair = plan_bwd_slot_pairs(c, dev, pp, per_sm, nslot, &pair_bytes);
    if (pair) {
        pp->launch[0].cluster = 2;
        pp->launch[0].shmem += pair_bytes;
    }
    nj_plan_pgrad_slots(pp, n, pair ? nslot / 2 : nslot, !!(c->flags & NJ_FLAG_BIAS));
    return NJ_OK;
}

bool nj_row_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    (void)dev; /* the test does not depend on the device */
    if (pass == NJ_PASS_BACKWARD) return bwd_row_ok(c);
    return c->kind == NJ_KIND_ROW || plan_rowlike(c) > 0;
}
