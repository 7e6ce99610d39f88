{# Forward, CLUSTER family (planner_cluster.c, sm_90 and later): a row (the reduced axes, contiguous in x
   and y) too long for one block's shared memory, a thread-block cluster of P.split = K blocks a row.
   Block r of the cluster (its rank) owns piece r of the row, PC elements (the last piece what is left):
   1. copy: the piece's vectors (P.vec elements) into dynamic shared memory, P.unroll loads a thread in
      flight before their stores;
   2. the piece's statistics over the staged values, shifted by the row's first element (prelude:
      nj_shift, every block the same shift): its sum, block-reduced, then the squared deviations from
      its own mean (exact: nothing cancels), into nj_pair;
   3. cluster barrier; thread 0 of every block reads the K pairs from the cluster's blocks (distributed
      shared memory) and combines them in rank order (m2 = sum(m2_r + n_r * (mean_r - mean)^2)), so every
      block gets the same md and rstd; rank 0 writes the saved statistics; a second cluster barrier
      (no block may exit while another reads its shared memory);
   4. normalize the staged piece, y stored a vector at a time.
   x is read from DRAM once: the row family's split read it twice.
   Slots (a fixed grid, P.role.main.grid_x: LayerNorm's gamma/beta along long rows): G clusters walk the
   rows c, c + G, ...; each block copies its piece of gamma and beta once, as floats, after the staged x,
   and reads them there every row (a cluster a row re-read them from L2 every row: nv_norms' LayerNorm
   f32 1000 x 100000 read 800 MB of gamma/beta for 400 MB of x). No barrier between a row's normalize
   and the next row's copy: a thread copies the vectors it normalized (the same e0). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{% include("cluster_lib.cuh") %}
{%
local F = P.flags
if F.residual or F.resout then error("fwd_cluster: no residual") end
if P.stage ~= 1 then error("fwd_cluster: the piece is always staged (P.stage 1)") end
if row_offset("x", "j") ~= "j" or row_offset("y", "j") ~= "j" then error("fwd_cluster: x and y contiguous along the row") end
local N, K, B, VW, U = P.reduce_size, P.split, P.block, P.vec, P.unroll
if N % VW ~= 0 or K < 2 then error("fwd_cluster: rows of " .. N .. ", vec " .. VW .. ", " .. K .. " blocks") end
local NW = B // 32
local SLOTS = P.role.main.grid_x > 0
-- pieces of whole vectors; the slots' of whole 128-byte lines (a piece's stores then start a sector:
-- 8 f32 pieces of 12500 stored 17 sectors a warp request; the planner's shmem counts the same)
local PA = SLOTS and 128 // (P.dtype.x == "f32" and 4 or 2) or VW
local PC = ((N + K - 1) // K + PA - 1) // PA * PA
local kept = kept_axes()
local has_param = F.scale or F.bias
-- gamma/beta along the row: constant (PROW), contiguous like x (PVEC, vector loads), constant over each
-- vector (PCHUNK: GroupNorm NCHW, a channel's pixels), or by element
local PROW = has_param and row_offset("param", "j") == "0"
local PVEC = has_param and not PROW and row_offset("param", "j") == "j" and VW > 1
local red = reduced_axes()
local inner = P.axes[red[#red]]
local PCHUNK = has_param and not PROW and not PVEC and inner.stride.param == 0 and inner.extent % VW == 0
-- ... and a piece within one chunk (its length divides the chunk's: GroupNorm NCHW's pieces of half a
-- channel): gamma/beta once a block, not a scalar load of each a vector (68% of the load requests)
local PPIECE = PCHUNK and inner.extent % PC == 0
local G = SLOTS and P.role.main.grid_x // K or 0
if SLOTS then
  if not has_param or PROW or row_offset("param", "j") ~= "j" or G * K ~= P.role.main.grid_x then
    error("fwd_cluster: slots need gamma/beta along the row, a grid of whole clusters")
  end
  for _, a in ipairs(kept) do
    if P.axes[a].stride.param ~= 0 then error("fwd_cluster: slots need one gamma/beta for all rows") end
  end
  PVEC, PCHUNK, PPIECE = false, false, false
end
-- slots: beta's staged floats after gamma's
local PBO = F.scale and "NJ_PC + " or ""

%}
{% fwd_typedefs() %}

#define NJ_N {{ N }}LL
#define NJ_PC {{ PC }}u
#define NJ_VW {{ VW }}
{% if SLOTS then %}
#define NJ_STAGE_BYTES ((NJ_PC * (unsigned)sizeof(nj_tx) + 15u) / 16u * 16u)
{% end %}

NJ_CLUSTER_KERNEL({{ P.role.main.kernel }}, {{ B }}, {{ K }}, 1, 1)
{
    nj_grid_enter();
    NJ_DYN_SHARED(nj_tx, nj_stage); /* the block's piece of the row */
    NJ_SHARED(float, nj_scratch, {{ NW }});
    NJ_SHARED(float, nj_pair, 2); /* the piece's sum and squared deviations (scaled shifted values) */
    NJ_SHARED(float, nj_stat, 2); /* the row's md and rstd, from thread 0 */
    const unsigned t = threadIdx.x;
{% fwd_pointers() %}
{% if SLOTS then %}
    const unsigned rank = nj_cluster_rank();
    const nj_i64 slot = (nj_i64)blockIdx.x / {{ K }};
    /* the piece's gamma, then beta, as floats after the staged x (read after the first copy's barrier) */
    float *const nj_pg = (float *)((unsigned char *)nj_stage + NJ_STAGE_BYTES);
    {
        {{ piece_range() }}
        for (unsigned e = t; e < np; e += {{ B }}u) {
{% if F.scale then %}
            nj_pg[e] = nj_load_f32(GAMMA, lo + e);
{% end %}
{% if F.bias then %}
            nj_pg[{{ PBO }}e] = nj_load_f32(BETA, lo + e);
{% end %}
        }
    }
#pragma unroll 1
    for (nj_i64 row = slot; row < A.rows * {{ P.kept_inner }}LL; row += {{ G }}) {
{% else %}
    {{ block_item("w", "A.rows * " .. P.kept_inner .. "LL * " .. K) }}
        const nj_i64 row = w / {{ K }};
        const unsigned rank = nj_cluster_rank(); /* w % K: a cluster is K consecutive blocks */
{% end %}
        {{ split_index("row", kept, "k") }}
{% fwd_offsets(kept, "k") %}
        {{ piece_range() }}
{% if SLOTS then %}
        (void)op; /* 0: one gamma/beta for all rows */
{% end %}
        /* 1. copy */
{% stage_piece("X", "ox", "nj_stage") %}
{% fwd_shift() %}
        __syncthreads();
        /* 2. the piece's statistics (unrolled: the sums are chains of adds, the loads then overlap) */
{% if F.center then %}
        float s = 0.0f;
#pragma unroll 4
        for (unsigned e = t; e < np; e += {{ B }}u) s += (nj_to_f32(nj_stage[e]) - sh.k) * sh.inv;
        s = nj_block_sum<{{ NW }}>(s, nj_scratch);
        const float pm = np ? s / (float)np : 0.0f;
{% else %}
        const float s = 0.0f, pm = 0.0f;
{% end %}
        float s2 = 0.0f;
#pragma unroll 4
        for (unsigned e = t; e < np; e += {{ B }}u) s2 += nj_sq((nj_to_f32(nj_stage[e]) - sh.k) * sh.inv - pm);
        s2 = nj_block_sum<{{ NW }}>(s2, nj_scratch);
        if (t == 0) {
            nj_pair[0] = s;
            nj_pair[1] = s2;
        }
        /* 3. the row's statistics from the cluster's pieces, in rank order */
        nj_cluster_sync();
        if (t == 0) {
            float sum = 0.0f;
#pragma unroll
            for (unsigned r = 0; r < {{ K }}u; r++) sum += nj_cluster_map(nj_pair, r)[0];
            const float mean_s = {{ F.center and "sum * (1.0f / (float)NJ_N)" or "0.0f" }};
            float m2 = 0.0f;
#pragma unroll
            for (unsigned r = 0; r < {{ K }}u; r++) {
                const float *pr = nj_cluster_map(nj_pair, r);
                const nj_i64 rlo = (nj_i64)r * NJ_PC;
                const float nr = rlo >= NJ_N ? 0.0f : (float)(NJ_N - rlo < (nj_i64)NJ_PC ? NJ_N - rlo : (nj_i64)NJ_PC);
                const float d = nr > 0.0f ? pr[0] / nr - mean_s : 0.0f;
                m2 += pr[1] + nr * d * d;
            }
{% fwd_finish("mean_s", "m2 * (1.0f / (float)NJ_N)") %}
            nj_stat[0] = md;
            nj_stat[1] = rstd;
{% fwd_save_stats("rank == 0", kept) %}
        }
        nj_cluster_sync(); /* the pairs are read: blocks may exit; nj_stat is set */
        const float md = nj_stat[0], rstd = nj_stat[1];
        (void)md;
{% if PROW and F.scale then %}
        const float g_row = nj_load_f32(GAMMA, op);
{% end %}
{% if PROW and F.bias then %}
        const float b_row = nj_load_f32(BETA, op);
{% end %}
{% if PPIECE then %}
        const nj_i64 pq = op + {{ row_offset("param", "lo") }}; /* the piece's channel (np = 0: none) */
{% if F.scale then %}
        const float gq = np > 0u ? nj_load_f32(GAMMA, pq) : 0.0f;
{% end %}
{% if F.bias then %}
        const float bq = np > 0u ? nj_load_f32(BETA, pq) : 0.0f;
{% end %}
{% end %}
        /* 4. normalize the staged piece (rolled: its stores do not wait, and the 32 warps an SM hide the
           shared-memory loads; unrolled, it cost NVRTC ~5 ms) */
#pragma unroll 1
        for (unsigned e = t * NJ_VW; e < np; e += {{ B * VW }}u) {
            float xv[NJ_VW], yv[NJ_VW];
{% staged_vec("xv", "nj_stage", "e") %}
{% if PVEC then %}
{% if F.scale then %}
            float gv[NJ_VW];
            nj_load_vec<NJ_VW>(GAMMA, op + lo + e, gv);
{% end %}
{% if F.bias then %}
            float bv[NJ_VW];
            nj_load_vec<NJ_VW>(BETA, op + lo + e, bv);
{% end %}
{% end %}
{% if PCHUNK and not PPIECE then %}
            const nj_i64 pq = op + {{ row_offset("param", "(lo + e)") }};
{% if F.scale then %}
            const float gq = nj_load_f32(GAMMA, pq);
{% end %}
{% if F.bias then %}
            const float bq = nj_load_f32(BETA, pq);
{% end %}
{% end %}
#pragma unroll
            for (int q = 0; q < NJ_VW; q++) {
                float u = {{ fwd_centered("xv[q]") }} * rstd;
{%
local g, b
if PROW then g, b = F.scale and "g_row", F.bias and "b_row"
elseif SLOTS then g, b = F.scale and "nj_pg[e + q]", F.bias and ("nj_pg[" .. PBO .. "e + q]")
elseif PVEC then g, b = F.scale and "gv[q]", F.bias and "bv[q]"
elseif PCHUNK then g, b = F.scale and "gq", F.bias and "bq"
elseif has_param then
  local po = row_offset("param", "(lo + e + q)")
  g = F.scale and ("nj_load_f32(GAMMA, op + " .. po .. ")")
  b = F.bias and ("nj_load_f32(BETA, op + " .. po .. ")")
end
%}
{% fwd_epilogue("                ", g, b, {to = "yv[q]"}) %}
            }
            {{ fwd_out("lo + e", "yv", VW) }}
        }
    }
}
