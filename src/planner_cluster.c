/* CLUSTER family (fwd_cluster.cu, bwd_cluster.cu): a row too long for one block's shared memory but not
 * for a thread-block cluster's (sm_90 and later: up to 8 blocks, one an SM, that read each other's
 * shared memory). InstanceNorm over 64^3 voxels and GroupNorm(32) over 128 x 256 x 256 are rows of
 * 2^18 floats: the row family split them over blocks that read x twice from DRAM (once for the pieces'
 * statistics, once to normalize; model, H200: 62-64% of copy, the two-read floor). Rows under 2^18 past
 * the 200 KB one block keeps (NJ_ROW_XSTAGE_MAX) the row family streamed twice, a block a row (nv_norms'
 * LayerNorm f32 1000 x 100000: 1.50x the ideal bytes, 62.6%; a cluster of 2: 1.00x, 79.8%, L2-bound by
 * the per-element gamma and beta every row reads again). Here block r of a
 * row's cluster stages piece r of the row, the blocks exchange their pieces' (sum, squared deviations)
 * through distributed shared memory, and each normalizes its piece from shared memory: x is read once.
 * The backward (bwd_cluster.cu) stages x alone, the same pieces, where gamma/beta are constant over each
 * row (InstanceNorm: P.pgrad "sets") or absent: its three sums (the saved mean's correction, then g and
 * g * xhat) go through the cluster, and dy is read again by the block that read it last (an L2 hit): the
 * general family's split walk read x and dy twice from DRAM. Shorter backward rows whose x and dy come to
 * 64 KB take the same kernel with one block a row (split 1, no cluster, any architecture) where x fits an
 * SM: the general and row families' walks read x and dy twice, the second time from DRAM once their
 * blocks' rows outgrew the L2 (InstanceNorm f32 over 32^3 voxels: 1.66x the ideal bytes, 56-57% of copy;
 * staged: 1.00x, 91-94%). GroupNorm NCHW's rows in clusters too where each piece lies within one channel
 * (gamma constant over it): every piece's (sum dz * xhat, sum dz) pair for the column sum (P.pgrad
 * "pieces", as the general family's split walk), its sums weighted by its gamma in the cluster's (16 x 128
 * x 256 x 256 f32: 1.67x the ideal bytes, 57.4% of copy -> 1.00x, 95.5%). Rows with gamma along the row
 * (LayerNorm) past the row family's register column sums (16384 elements) take a fixed grid of slots, a
 * cluster (or a block) each, walking rows c, c + slots, ...: each block keeps its piece of x and its
 * piece's dgamma/dbeta partials in shared memory, and the library's column sum adds the slots' partial
 * rows (P.pgrad "slots"). The row family read x and dy twice (nv_norms' 1000 x 100000: 1.76x the ideal
 * bytes, 54.4% of copy; slots of 8-block clusters: 1.02x, 78.2%, L2-bound by gamma read twice a row).
 * The forward of such rows takes slots too where a block's piece of gamma and beta fits beside its
 * piece of x (copied once, as floats): a cluster a row re-read them from L2 every row (1000 x 100000:
 * 79.8% of copy, L2-bound; slots of 8: 97.8%); the backward's slots stage gamma likewise where it fits
 * (78.6 -> 95.7%). Slot grids count on GPCs of 16 SMs (cluster_slots). */
#include "planner_impl.h"


#define NJ_CLUSTER_MAX 8        /* blocks a cluster: CUDA's portable maximum */
#define NJ_CLUSTER_BLOCK 1024
#define NJ_CLUSTER_GPC_SMS 16   /* SMs a GPC counted on (cluster_slots) */
#define NJ_CLUSTER_RESERVE 4096 /* of an SM's shared memory for the kernel's static arrays */
/* x and dy bytes a row from which the backward stages x: below, the walks' second reads of x and dy
 * hit L2 (InstanceNorm f32 over 64 x 64 pixels: 32 KB a row, 1.00x the ideal bytes); at 128 x 128
 * (128 KB) the general family's blocks an SM outgrew it (1.31x). */
#define NJ_CLUSTER_BWD_MIN (64 * 1024)

static int64_t cl_es(const nj_canon *c, int o) { return (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]); }

/* Elements of a block's piece of a row in k pieces, rounded up to whole multiples of `unit` (vectors,
 * or the forward slots' 128-byte lines: fwd_cluster.cu's PC), the last piece what is left. */
static int64_t cl_piece(const nj_canon *c, int32_t k, int64_t unit)
{
    return nj_ceil_div64(nj_ceil_div64(c->reduce_size, k), unit) * unit;
}

/* Bytes of a staged piece of x, to the 16 bytes after which the templates place their floats */
static int64_t cl_stage_bytes(const nj_canon *c, int64_t piece) { return (piece * cl_es(c, NJ_OPD_X) + 15) / 16 * 16; }

/* The forward slots' pieces: whole 128-byte lines of x */
static int64_t cl_line(const nj_canon *c) { return 128 / cl_es(c, NJ_OPD_X); }

/* Whether operand o's reduced axes are laid out as one contiguous run (element j of the row at j). */
static bool cluster_contiguous(const nj_canon *c, int o)
{
    int64_t want = 1;
    for (int a = c->rank - 1; a >= 1; a--) {
        if (!c->axes[a].reduce) continue;
        if (c->axes[a].stride[o] != want) return false;
        want *= c->axes[a].extent;
    }
    return true;
}

/* GroupNorm NCHW's backward: gamma/beta constant over runs of a row's elements (a channel's pixels),
 * not over the row, runs of 64 elements and more. The general family took these rows whatever their
 * length, and its separate dgamma walk re-read x and dy with scalar loads (model, H200, f16 *x320x64x64
 * 26.7% of copy); the cluster backward (bwd_cluster.cu RUNS) takes them from any length, a pair a run.
 * NORMJIT_PLAN_NO_CLUSTER_RUNS=1: the general family again. */
#define NJ_CLUSTER_RUN_MIN 64
#define NJ_CLUSTER_RUNS_SHORT (32 * 1024) /* bytes of x a row up to which a row's block is 256 threads */
static bool cluster_runs_only(const nj_canon *c)
{
    int64_t run = nj_pgrad_chunk_run(c);
    return (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size > 0 && c->param_size != c->reduce_size &&
           !nj_pgrad_sets_ok(c) && run >= NJ_CLUSTER_RUN_MIN && !nj_plan_switched_off("CLUSTER_RUNS");
}

/* Blocks a row's cluster: the fewest (a power of two, from `least`) whose pieces fit an SM's shared
 * memory; 0 where even NJ_CLUSTER_MAX do not. */
static int32_t cluster_size(const nj_canon *c, const nj_device_props *dev, int32_t least)
{
    int64_t cap = (int64_t)dev->max_shared_per_block - NJ_CLUSTER_RESERVE, bytes = c->reduce_size * cl_es(c, NJ_OPD_X);
    for (int32_t k = least; k <= NJ_CLUSTER_MAX; k *= 2)
        if (cap > 0 && nj_ceil_div64(bytes, k) + 16 <= cap) return k;
    return 0;
}

/* Floats a row element's slot partials take beside its staged x (P.pgrad "slots"): dgamma's, dbeta's. */
static int64_t cluster_slot_floats(const nj_canon *c) { return (c->flags & NJ_FLAG_BIAS) ? 2 : 1; }

/* The blocks a row of the slots backward takes: the fewest whose pieces of x and of the partials fit an
 * SM's shared memory (1 on any architecture, more on sm_90), or 0. */
static int32_t cluster_slot_size(const nj_canon *c, const nj_device_props *dev)
{
    int64_t cap = (int64_t)dev->max_shared_per_block - NJ_CLUSTER_RESERVE;
    int64_t per = cl_es(c, NJ_OPD_X) + 4 * cluster_slot_floats(c);
    for (int32_t k = 1; k <= (dev->arch >= 90 ? NJ_CLUSTER_MAX : 1); k *= 2)
        if (cap > 0 && nj_ceil_div64(c->reduce_size, k) * per + 32 <= cap) return k;
    return 0;
}

/* Elements a vector moves: 16 bytes of the widest of the operands `opds` (bits 1 << nj_operand),
 * dividing the row. */
static int32_t cluster_vec(const nj_canon *c, uint32_t opds)
{
    int64_t wide = 1;
    for (int o = 0; o < NJ_OPD_COUNT; o++)
        if ((opds >> o & 1u) && cl_es(c, o) > wide) wide = cl_es(c, o);
    int32_t v = (int32_t)(16 / wide);
    while (v > 1 && c->reduce_size % v != 0) v /= 2;
    return v;
}

/* What both passes' plans share: the cluster of 1024-thread blocks a row, vectors over the row operands
 * `opds` (their alignment checked at launch), P.unroll copies in flight, the piece staged, one launch. */
static void cluster_shape(const nj_canon *c, const nj_device_props *dev, uint32_t opds, const char *kernel,
                          int32_t k, int32_t grid_x, nj_plan_params *pp)
{
    pp->block = NJ_CLUSTER_BLOCK;
    /* a short row of runs (cluster_runs_only) a block of 256: at 1024 threads most of them waited on each
     * run's sums (model, H200, GroupNorm NCHW f16 *x1280x8x8: 59.6 -> 76.0% of copy) */
    if (k == 1 && cluster_runs_only(c) && c->reduce_size * cl_es(c, NJ_OPD_X) <= NJ_CLUSTER_RUNS_SHORT)
        pp->block = NJ_CLUSTER_BLOCK / 4;
    pp->vec = cluster_vec(c, opds);
    pp->rows_per_block = 1;
    pp->split = k;
    /* loads a thread issues before their stores: 64 bytes of x a thread (64 KB an SM), 4 vectors of 16
     * bytes; rows that take no vectors (odd lengths: LayerNorm f32 4 x 400001) 16 elements, not 4 (16 KB
     * an SM: latency-bound). The backward copies x and dy: at most 8 each (16 took bf16 rows to the
     * 64 registers of a 1024-thread block at sm_80) */
    bool bwd = pp->pass == NJ_PASS_BACKWARD;
    int64_t vb = (int64_t)pp->vec * cl_es(c, NJ_OPD_X), u = (bwd ? 32 : 64) / (vb > 0 ? vb : 4), most = bwd ? 8 : 16;
    pp->unroll = (int32_t)(u < 4 ? 4 : u > most ? most : u);
    pp->stage = 1;
    if (pp->vec > 1) pp->align_opds = opds;
    nj_plan_add_launch(pp, kernel, pp->block, grid_x ? 1 : c->kept_inner * k, 1, grid_x);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    nj_launch *l = &pp->launch[0];
    l->cluster = k > 1 ? k : 0; /* one block: no cluster */
    /* the block's piece: whole vectors, the last piece what is left */
    l->shmem = (uint32_t)(cl_piece(c, k, pp->vec) * cl_es(c, NJ_OPD_X));
}

/* Whether gamma/beta are constant over each of the k pieces of a row (GroupNorm NCHW: a piece within
 * one channel), or the pieces are whole runs of one gamma element each, whole vectors (a piece of several
 * channels: k = 1, a block a row, or 2 to 8 of 2k channels), the pieces exactly n / k elements, whole
 * vectors: their gradients a pair a piece or a run (P.pgrad "pieces", nj_plan_pgrad_pieces). */
static bool cluster_pieces_ok(const nj_canon *c, int32_t k, uint32_t opds)
{
    if (k < 1 || c->reduce_size % k != 0 || (c->reduce_size / k) % cluster_vec(c, opds) != 0) return false;
    int64_t run = nj_pgrad_chunk_run(c), piece = c->reduce_size / k;
    return run > 0 && ((k >= 2 && run % piece == 0) ||
                       (piece % run == 0 && run % cluster_vec(c, opds) == 0 && cluster_runs_only(c)));
}

#define NJ_CLUSTER_BWD_OPDS ((1u << NJ_OPD_X) | (1u << NJ_OPD_DY) | (1u << NJ_OPD_DX))

/* The backward's rows: every reduced axis inside the kept ones, x, dy and dx contiguous along the row,
 * gamma/beta absent or constant over each row (their gradients a pair a row: P.pgrad "sets"), or over
 * each piece (checked with the cluster's size: cluster_pieces_ok). */
static bool cluster_bwd_rows(const nj_canon *c)
{
    bool red = false;
    for (int a = 1; a < c->rank; a++) {
        if (red && !c->axes[a].reduce) return false;
        red = red || c->axes[a].reduce;
    }
    if (!cluster_contiguous(c, NJ_OPD_X) || !cluster_contiguous(c, NJ_OPD_DY) || !cluster_contiguous(c, NJ_OPD_DX))
        return false;
    return true;
}

/* gamma/beta along the row, an element each (LayerNorm), contiguous like x, on rows longer than the row
 * family keeps its column sums for (NJ_BWD_ROW_MAX): its backward read x and dy twice (the row sums,
 * then a column-tiled walk for dx and dgamma: nv_norms' 1000 x 100000, 1.76x the ideal bytes). */
#define NJ_CLUSTER_SLOT_MIN 16385
static bool cluster_param_elems(const nj_canon *c)
{
    return (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size == c->reduce_size &&
           c->reduce_size >= NJ_CLUSTER_SLOT_MIN && cluster_contiguous(c, NJ_OPD_PARAM) &&
           !nj_plan_switched_off("CLUSTER_SLOTS");
}

/* gamma/beta absent, or constant over each row */
static bool cluster_param_rows(const nj_canon *c)
{
    return !(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->param_size == 0 || nj_pgrad_sets_ok(c);
}

/* Blocks a row the backward takes (1: a block a row, no cluster), 0 where it does not apply: rows of
 * 2^18 elements and more, or whose x and dy come to NJ_CLUSTER_BWD_MIN bytes, or rows of runs
 * (cluster_runs_only) of any length, in clusters (sm_90) or one block where x fits one SM. Rows of runs
 * take the fewest blocks, up to 8 and not only powers of two, whose pieces are whole runs (f32 GroupNorm
 * NCHW *x960x64x64: 30 channels a row, 5 blocks of 6). */
static int32_t cluster_bwd_size(const nj_canon *c, const nj_device_props *dev)
{
    int64_t bytes = c->reduce_size * (cl_es(c, NJ_OPD_X) + cl_es(c, NJ_OPD_DY));
    if ((c->reduce_size < NJ_SPLIT_MIN && bytes < NJ_CLUSTER_BWD_MIN && !cluster_runs_only(c)) ||
        c->reduce_size >= INT32_MAX || !cluster_bwd_rows(c))
        return 0;
    if (cluster_param_elems(c)) return cluster_slot_size(c, dev);
    int32_t k = cluster_size(c, dev, 1);
    if (k > 1 && dev->arch < 90) return 0;
    if (cluster_param_rows(c) || cluster_pieces_ok(c, k, NJ_CLUSTER_BWD_OPDS)) return k;
    for (int32_t j = k + 1; k > 0 && cluster_runs_only(c) && j <= (dev->arch >= 90 ? NJ_CLUSTER_MAX : 1); j++)
        if (cluster_pieces_ok(c, j, NJ_CLUSTER_BWD_OPDS)) return j;
    return 0;
}

bool nj_cluster_applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    /* NORMJIT_PLAN_NO_CLUSTER=1: the row (general) family takes these rows, as before the family */
    if (nj_plan_switched_off("CLUSTER")) return false;
    if (pass == NJ_PASS_BACKWARD) return cluster_bwd_size(c, dev) > 0;
    if (dev->arch < 90 || (c->flags & (NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT))) return false;
    /* rows the row family would split or stream twice, x past what one block keeps in shared memory
     * (kept axes outside the reduced ones: GroupNorm NCHW's (C/G, HW) too) */
    bool long_row = c->reduce_size >= NJ_SPLIT_MIN || c->reduce_size * cl_es(c, NJ_OPD_X) > NJ_ROW_XSTAGE_MAX;
    if (!long_row || c->reduce_size >= INT32_MAX || !nj_row_applies(c, pass, dev)) return false;
    if (!cluster_contiguous(c, NJ_OPD_X) || !cluster_contiguous(c, NJ_OPD_Y)) return false;
    return cluster_size(c, dev, 2) > 0;
}

/* Slots (clusters of k blocks, one an SM) that can all be resident: a cluster's blocks share a GPC, and
 * H100/H200 GPCs hold 16-18 of their 132 SMs, so count 16 a GPC (k = 8: 16 clusters, 128 SMs; k = 4:
 * 32, not 33). A slot that is not resident starts when another ends: a second round for its rows. */
static int32_t cluster_slots(const nj_device_props *dev, int32_t k)
{
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    if (k <= 1) return sms;
    int32_t n = sms / NJ_CLUSTER_GPC_SMS * (NJ_CLUSTER_GPC_SMS / k);
    return n > 0 ? n : 1;
}

/* Blocks a row of the forward's slots (fwd_cluster.cu: a fixed grid of clusters walking the rows, each
 * block's piece of gamma and beta copied once as floats beside its staged x), or 0: gamma/beta along
 * the row, contiguous, one for all rows, and x's piece with them fitting an SM's shared memory
 * (nv_norms' LayerNorm f32 1000 x 100000: 8 blocks a row, 150 KB a block). A cluster a row read every
 * row's gamma and beta from L2 again (800 MB for 400 MB of x: L2-bound, 79.8% of copy in the model).
 * NORMJIT_PLAN_NO_CLUSTER_FWD_SLOTS=1: a cluster a row. */
static int32_t cluster_fwd_slot_size(const nj_canon *c, const nj_device_props *dev)
{
    int64_t np = nj_plan_nparam(c);
    if (np == 0 || c->param_size != c->reduce_size || !cluster_contiguous(c, NJ_OPD_PARAM) ||
        nj_plan_switched_off("CLUSTER_FWD_SLOTS"))
        return 0;
    for (int a = 0; a < c->rank; a++)
        if (!c->axes[a].reduce && c->axes[a].stride[NJ_OPD_PARAM] != 0) return 0;
    int64_t cap = (int64_t)dev->max_shared_per_block - NJ_CLUSTER_RESERVE, per = cl_es(c, NJ_OPD_X) + 4 * np;
    for (int32_t k = 2; k <= NJ_CLUSTER_MAX; k *= 2)
        if (cap > 0 && cl_piece(c, k, cl_line(c)) * per + 32 <= cap) return k;
    return 0;
}

nj_status nj_plan_fwd_cluster(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_RETURN_IF(!nj_cluster_applies(c, NJ_PASS_FORWARD, dev), NJ_ERR_INTERNAL, "planner: not a cluster row problem");
    int32_t ks = cluster_fwd_slot_size(c, dev);
    if (ks > 0) {
        int32_t slots = cluster_slots(dev, ks);
        cluster_shape(c, dev, (1u << NJ_OPD_X) | (1u << NJ_OPD_Y), "nj_fwd_cluster", ks, slots * ks, pp);
        int64_t piece = cl_piece(c, ks, cl_line(c));
        pp->launch[0].shmem = (uint32_t)(cl_stage_bytes(c, piece) + piece * 4 * nj_plan_nparam(c));
        return NJ_OK;
    }
    cluster_shape(c, dev, (1u << NJ_OPD_X) | (1u << NJ_OPD_Y), "nj_fwd_cluster", cluster_size(c, dev, 2), 0, pp);
    /* gamma/beta along the row, like x: loaded as vectors too */
    if (pp->vec > 1 && (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size > 0 &&
        cluster_contiguous(c, NJ_OPD_PARAM))
        pp->align_opds |= 1u << NJ_OPD_PARAM;
    return NJ_OK;
}

nj_status nj_plan_bwd_cluster(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    NJ_RETURN_IF(!nj_cluster_applies(c, NJ_PASS_BACKWARD, dev), NJ_ERR_INTERNAL, "planner: not a cluster row problem");
    int32_t k = cluster_bwd_size(c, dev);
    if (cluster_param_elems(c)) {
        /* a fixed grid of slots, a cluster each, one an SM's block: its rows c, c + slots, ... */
        int32_t slots = cluster_slots(dev, k);
        cluster_shape(c, dev, NJ_CLUSTER_BWD_OPDS, "nj_bwd_cluster", k, slots * k, pp);
        if (pp->vec > 1) pp->align_opds |= 1u << NJ_OPD_PARAM;
        int64_t piece = cl_piece(c, k, pp->vec);
        nj_launch *l = &pp->launch[0];
        int64_t bytes = cl_stage_bytes(c, piece) + piece * 4 * cluster_slot_floats(c);
        /* gamma, and beta where an activation reads it, staged too (P.stage 2): read twice a row from L2
         * otherwise (nv_norms' LayerNorm f32 1000 x 100000: 800 MB, the model's bound, 78.6% of copy).
         * NORMJIT_PLAN_NO_CLUSTER_STAGE_G=1: read from global memory, as before. */
        int64_t gbytes = piece * 4 * nj_plan_bwd_nparam(c);
        if (!nj_plan_switched_off("CLUSTER_STAGE_G") &&
            bytes + gbytes + 32 <= (int64_t)dev->max_shared_per_block - NJ_CLUSTER_RESERVE) {
            pp->stage = 2; /* gamma (beta) staged too: bwd_cluster.cu */
            bytes += gbytes;
        }
        l->shmem = (uint32_t)bytes;
        nj_plan_pgrad_slots(pp, c->reduce_size, slots, (c->flags & NJ_FLAG_BIAS) != 0);
        return NJ_OK;
    }
    cluster_shape(c, dev, NJ_CLUSTER_BWD_OPDS, "nj_bwd_cluster", k, 0, pp);
    if (!(c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) || c->param_size == 0) return NJ_OK;
    if (nj_pgrad_sets_ok(c)) nj_plan_pgrad_sets(c, pp);
    else nj_plan_pgrad_pieces(c, nj_pgrad_chunk_run(c), pp); /* a pair a piece, or a run */
    return NJ_OK;
}
