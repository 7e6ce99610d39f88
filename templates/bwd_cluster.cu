{# Backward, CLUSTER family (planner_cluster.c, sm_90 and later): a row of P.reduce_size elements (the
   reduced axes, contiguous in x, dy and dx) in a thread-block cluster of P.split = K blocks; block r (its
   rank) owns piece r, PC elements (the last piece what is left); K = 1: a block a row, no cluster (rows
   whose x fits one SM but whose x and dy its walks would read twice), any architecture. gamma/beta are
   constant over the row (P.pgrad "sets": InstanceNorm), over each piece (P.pgrad "pieces": GroupNorm
   NCHW, a piece within one channel; or a piece of whole channels, RUNS: a pair a channel, its sums
   weighted by each channel's gamma) or absent. Per element (bwd_lib.cuh): xhat = (x - mean) * rstd - dl,
   dz = dy * act'(z), g = dz * gamma; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
   1. copy: the piece's x into dynamic shared memory, P.unroll vectors a thread in flight;
   2. the saved mean's correction dl = mean((x - mean) * rstd) (bwd_lib.cuh: taken where |mean| * rstd >
      NJ_FIX_RATIO), its pieces' sums combined through the cluster in rank order;
   3. the sums of g and g * xhat over the piece (dy read from global memory), combined alike; with "sets",
      rank 0 leaves the row's (sum dz * xhat, sum dz) for the library's column sum (dgamma, dbeta), with
      "pieces" every rank its piece's;
   4. dx over the piece: x from shared memory, dy again (the block read it moments ago: L2); with
      "slots" (gamma along the row) each thread adds its elements' dz * xhat and dz to the slot's partials
      in shared memory, a fixed grid of slots walking the rows, and the slots' partial rows go to the
      library's column sum.
   Three cluster barriers: the pieces' dl sums, their g sums, and the last (no block exits while another
   reads its shared memory). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{% include("cluster_lib.cuh") %}
{%
local F = P.flags
-- P.stage 2 (slots): gamma, and beta under an activation, staged too, as floats after the partials
if P.stage ~= 1 and not (P.stage == 2 and P.pgrad == "slots") then
  error("bwd_cluster: the piece is always staged (P.stage 1; 2: slots with gamma)")
end
for _, o in ipairs({"x", "dy", "dx"}) do
  if row_offset(o, "j") ~= "j" then error("bwd_cluster: " .. o .. " contiguous along the row") end
end
local N, K, B, VW, U = P.reduce_size, P.split, P.block, P.vec, P.unroll
if N % VW ~= 0 or K < 1 then error("bwd_cluster: rows of " .. N .. ", vec " .. VW .. ", " .. K .. " blocks") end
local NW = B // 32
local PC = ((N + K - 1) // K + VW - 1) // VW * VW
local kept = kept_axes()
local SETS = P.pgrad == "sets"
-- "pieces" (GroupNorm NCHW: a row of several channels, each piece within one): the piece's own gamma;
-- its pair goes to the workspace, and its sums go to the cluster weighted by that gamma
local PIECES = P.pgrad == "pieces"
-- "slots" (LayerNorm: gamma along the row, an element each): a fixed grid of G = P.pgrad_parts clusters
-- (slots) walks the rows c, c + G, ...; each block keeps its piece's dgamma (dbeta) partials in shared
-- memory after the staged x and writes them, one partial row a slot, for the library's column sum
local SLOTS = P.pgrad == "slots"
local G = P.pgrad_parts
local PARAM = (F.scale or F.bias) and P.param_size > 0
if PARAM and not (SETS or PIECES or SLOTS) then error("bwd_cluster: gamma/beta constant over each row or piece, or slots") end
if SLOTS and row_offset("param", "j") ~= "j" then error("bwd_cluster: slots need gamma along the row") end
local GSTAGE = SLOTS and P.stage == 2
local GSB = GSTAGE and F.bias and P.act ~= "none" -- beta staged beside gamma
-- the staged floats of each, their offset into nj_sg
local GSTAGED = {{F.scale, "GAMMA", "gv", ""}, {GSB, "BETA", "bv", F.scale and "NJ_PC + " or ""}}
if GSTAGE then
  for _, a in ipairs(kept) do
    if P.axes[a].stride.param ~= 0 then error("bwd_cluster: staged gamma needs one gamma for all rows") end
  end
end
-- RUNS: pieces of M whole runs of CL elements over which gamma is constant (the innermost reduced axes
-- that gamma does not follow): a pair a run, NP a row, gamma and beta loaded a vector (a vector within a run)
local CL, red = 1, reduced_axes()
for i = #red, 1, -1 do
  if P.axes[red[i]].stride.param ~= 0 then break end
  CL = CL * P.axes[red[i]].extent
end
local RUNS = PIECES and PC > CL
local M, NP = RUNS and PC // CL or 1, N // math.min(PC, CL)
if PIECES and (K < 1 or PC * K ~= N or (not RUNS and K < 2) or (RUNS and (PC % CL ~= 0 or CL % VW ~= 0))) then
  error("bwd_cluster: pieces of " .. PC .. " for rows of " .. N .. " in runs of " .. CL) end
-- the sums: of dz (gamma constant over the row or the piece: it scales the means or the pieces' sums)
-- or of g
local SG = (SETS or PIECES) and "dz" or "g"
local GS = (SETS and F.scale) and "gs_ * " or ""
local GW = (PIECES and F.scale and not RUNS) and "gs_ * " or ""
local PV = SLOTS and {g = "gv[q]", b = "bv[q]"} or {g = "gs_", b = "bs_"}
%}
{{ bwd_typedefs() }}

#define NJ_N {{ N }}LL
#define NJ_PC {{ PC }}u
#define NJ_VW {{ VW }}
{% if SETS or PIECES then %}
/* a row's (a piece's) (sum dz * xhat, sum dz): its shares of dgamma and dbeta, for the column sum */
#define NJ_WS_SETS ((float *)A.workspace{{ ws_plus("sets") }})
{% end %}

{% if SLOTS then %}
#define NJ_STAGE_BYTES (({{ PC }}u * (unsigned)sizeof(nj_tx) + 15u) / 16u * 16u)
{% end %}

{# x of elements e0 .. e0 + VW - 1 from the stage, dy from global memory (slots: gamma and beta too) #}
{% local function load_xdy() %}
{% staged_vec("xv", "nj_sx", "e0") %}
            nj_load_vec<NJ_VW>(DY, ody + lo + e0, dv);
{% if RUNS and F.scale then %}
            const float gs_ = nj_load_f32(GAMMA, op + {{ row_offset("param", "(lo + e0)") }}); /* the vector's run's */
{% end %}
{% if RUNS and F.bias and P.act ~= "none" then %}
            const float bs_ = nj_load_f32(BETA, op + {{ row_offset("param", "(lo + e0)") }});
{% end %}
{% if GSTAGE then %}
{% for _, gs in ipairs(GSTAGED) do %}
{%   if gs[1] then %}
            float {{ gs[3] }}[NJ_VW];
#pragma unroll
            for (int q = 0; q < NJ_VW; q++) {{ gs[3] }}[q] = nj_sg[{{ gs[4] }}e0 + q];
{%   end %}
{% end %}
{% else %}
{% if SLOTS and F.scale then %}
            float gv[NJ_VW];
            nj_load_vec<NJ_VW>(GAMMA, op + lo + e0, gv);
{% end %}
{% if SLOTS and F.bias and P.act ~= "none" then %}
            float bv[NJ_VW];
            nj_load_vec<NJ_VW>(BETA, op + lo + e0, bv);
{% end %}
{% end %}
{% end %}
{{ cluster_kernel(P.role.main.kernel, B, K) }}
{
    nj_grid_enter();
    NJ_DYN_SHARED(nj_tx, nj_sx); /* the block's piece of x */
    NJ_SHARED(float, nj_scratch, {{ math.max(2 * NW, 4) }});
    NJ_SHARED(float, nj_pair, 3); /* the piece's sums: of (x - mean) * rstd, of g, of g * xhat (read by the cluster) */
    NJ_SHARED(float, nj_tot, 3);  /* the row's: dl, the two sums (thread 0 combines, the block reads) */
    const unsigned t = threadIdx.x;
{{ bwd_pointers() }}
{% if SLOTS then %}
    const unsigned rank = {{ cluster_rank() }};
    const nj_i64 slot = (nj_i64)blockIdx.x / {{ K }};
    /* the slot's partial sums over the piece: dz * xhat, then dz (each thread its own elements) */
    float *const nj_ag = (float *)((unsigned char *)nj_sx + NJ_STAGE_BYTES);
    float *const nj_ab = nj_ag + NJ_PC;
    (void)nj_ab;
    for (unsigned e0 = t * NJ_VW; e0 < NJ_PC; e0 += {{ B * VW }}u) {
#pragma unroll
        for (int q = 0; q < NJ_VW; q++) {
            nj_ag[e0 + q] = 0.0f;
{% if F.bias then %}
            nj_ab[e0 + q] = 0.0f;
{% end %}
        }
    }
{% if GSTAGE then %}
    /* the piece's gamma (then beta), as floats after the partials, once: a thread stages the vectors
       it reads (the walks' own e0) */
    float *const nj_sg = nj_ag + {{ F.bias and 2 or 1 }}u * NJ_PC;
    {
        {{ piece_range() }}
        for (unsigned e0 = t * NJ_VW; e0 < np; e0 += {{ B * VW }}u) {
            float v_[NJ_VW];
{% for _, gs in ipairs(GSTAGED) do %}
{%   if gs[1] then %}
            nj_load_vec<NJ_VW>({{ gs[2] }}, lo + e0, v_);
#pragma unroll
            for (int q = 0; q < NJ_VW; q++) nj_sg[{{ gs[4] }}e0 + q] = v_[q];
{%   end %}
{% end %}
        }
    }
{% end %}
#pragma unroll 1
    for (nj_i64 row = slot; row < A.rows * {{ P.kept_inner }}LL; row += {{ G }}) {
{% else %}
    {{ block_item("w", "A.rows * " .. P.kept_inner .. "LL * " .. K) }}
        const nj_i64 row = w / {{ K }};
        const unsigned rank = {{ cluster_rank() }}; /* w % K: a cluster is K consecutive blocks */
{% end %}
        {{ split_index("row", kept, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }}, ody = {{ offset("dy", kept, "k") }};
        const nj_i64 odx = {{ offset("dx", kept, "k") }}, os = {{ offset("stats", kept, "k") }};
        const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
        const float rstd = A.rstd[os];
{% if PARAM then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        {{ piece_range() }}
{% local pq = PIECES and ("op + " .. row_offset("param", "lo")) or "op" %}
{% if PARAM and F.scale and not RUNS then %}
        const float gs_ = nj_load_f32(GAMMA, {{ pq }}); /* the row's (the piece's) one gamma, and beta */
{% end %}
{% if PARAM and F.bias and P.act ~= "none" and not RUNS then %}
        const float bs_ = nj_load_f32(BETA, {{ pq }});
{% end %}
        /* 1. copy */
{% stage_piece("X", "ox", "nj_sx") %}
        __syncthreads();
        /* 2. the saved mean's correction, where the row needs it (uniform over the cluster: one row) */
        float c_ = 0.0f;
{% if F.center then %}
#pragma unroll 4
        for (unsigned e = t; e < np; e += {{ B }}u) c_ += (nj_to_f32(nj_sx[e]) - mean) * rstd;
{% end %}
        float z_ = 0.0f;
        nj_block_sum2<{{ NW }}>(c_, z_, nj_scratch);
        if (t == 0) nj_pair[0] = c_;
        {{ cluster_sync() }};
        if (t == 0) {
            float s = 0.0f;
#pragma unroll 1
            for (unsigned r = 0; r < {{ K }}u; r++) s += {{ cluster_map("nj_pair", "r") }}[0];
            nj_tot[0] = fabsf(mean) * rstd > NJ_FIX_RATIO ? s * (1.0f / (float)NJ_N) : 0.0f;
        }
        __syncthreads();
        const float dl = nj_tot[0];
{% BWD_DL = F.center and "dl" or nil %}
        (void)dl;
        /* 3. the sums of g and g * xhat */
        float s1 = 0.0f, s2 = 0.0f;
{% if RUNS then %}
        /* a run at a time: its (sum dz * xhat, sum dz) pair, then weighted by its gamma into the piece's */
#pragma unroll 1
        for (unsigned run = 0; run < {{ M }}u; run++) {
            float r1 = 0.0f, r2 = 0.0f;
#pragma unroll 1
            for (unsigned e0 = run * {{ CL }}u + t * NJ_VW; e0 < (run + 1u) * {{ CL }}u; e0 += {{ B * VW }}u) {
                float xv[NJ_VW], dv[NJ_VW];
{% load_xdy() %}
#pragma unroll
                for (int q = 0; q < NJ_VW; q++) {
{{ bwd_element("xv[q]", "dv[q]", PV, "                    ") }}
                    r1 += dz;
                    r2 += dz * xh;
                }
            }
            nj_block_sum2<{{ NW }}>(r1, r2, nj_scratch);
            if (t == 0) {
                const nj_i64 u = row * {{ NP }} + lo / {{ CL }}u + run; /* the run's pair */
                NJ_WS_SETS[u * 2] = r2;
                NJ_WS_SETS[u * 2 + 1] = r1;
{% if F.scale then %}
                const float gr = nj_load_f32(GAMMA, op + {{ row_offset("param", "(lo + run * " .. CL .. "u)") }});
                s1 += gr * r1;
                s2 += gr * r2;
{% else %}
                s1 += r1;
                s2 += r2;
{% end %}
            }
        }
        if (t == 0) {
{% else %}
#pragma unroll 1
        for (unsigned e0 = t * NJ_VW; e0 < np; e0 += {{ B * VW }}u) {
            float xv[NJ_VW], dv[NJ_VW];
{% load_xdy() %}
#pragma unroll
            for (int q = 0; q < NJ_VW; q++) {
{{ bwd_element("xv[q]", "dv[q]", PV, "                ") }}
                s1 += {{ SG }};
                s2 += {{ SG }} * xh;
            }
        }
        nj_block_sum2<{{ NW }}>(s1, s2, nj_scratch);
        if (t == 0) {
{% end %}
            nj_pair[1] = {{ GW }}s1;
            nj_pair[2] = {{ GW }}s2;
{% if PIECES and not RUNS then %}
            NJ_WS_SETS[(row * {{ K }} + rank) * 2] = s2; /* the piece's (sum dz * xhat, sum dz) */
            NJ_WS_SETS[(row * {{ K }} + rank) * 2 + 1] = s1;
{% end %}
        }
        {{ cluster_sync() }};
        if (t == 0) {
            float t1 = 0.0f, t2 = 0.0f;
#pragma unroll 1
            for (unsigned r = 0; r < {{ K }}u; r++) {
                const float *pr = {{ cluster_map("nj_pair", "r") }};
                t1 += pr[1];
                t2 += pr[2];
            }
            nj_tot[1] = t1;
            nj_tot[2] = t2;
{% if SETS then %}
            if (rank == 0) {
                NJ_WS_SETS[row * 2] = t2;
                NJ_WS_SETS[row * 2 + 1] = t1;
            }
{% end %}
        }
        {{ cluster_sync() }}; /* the pieces' sums are read: blocks may exit; nj_tot is set */
{% if F.center then %}
        const float m1 = {{ GS }}nj_tot[1] * (1.0f / (float)NJ_N);
{% end %}
        const float m2 = {{ GS }}nj_tot[2] * (1.0f / (float)NJ_N);
        /* 4. dx over the piece */
#pragma unroll 1
        for (unsigned e0 = t * NJ_VW; e0 < np; e0 += {{ B * VW }}u) {
            float xv[NJ_VW], dv[NJ_VW], o[NJ_VW];
{% load_xdy() %}
#pragma unroll
            for (int q = 0; q < NJ_VW; q++) {
{{ bwd_element("xv[q]", "dv[q]", PV, "                ") }}
                o[q] = {{ bwd_dx_expr("g", "xh", "m1", "m2") }};
{% if SLOTS then %}
                nj_ag[e0 + q] += dz * xh;
{% if F.bias then %}
                nj_ab[e0 + q] += dz;
{% end %}
{% end %}
            }
            nj_store_vec<NJ_VW>(DX, odx + lo + e0, o);
        }
{# slots: no barrier before the next row's copy: a thread copies the elements it read here (the same
   e0), and the copy's barrier comes before the dl walk reads the others' #}
    }
{% if SLOTS then %}
    /* the slot's partial rows over the piece: dgamma's at [slot][n], dbeta's at [G + slot][n], a float a
       lane in turn, after a barrier (the elements are other threads'): each thread storing its own VW
       floats left a warp's 4-byte stores VW floats apart, 29% of their sectors' bytes used (RMSNorm bf16
       rows of 32768) */
    __syncthreads();
    {
        float *const PG = (float *)A.workspace{{ ws_plus("pgrad") }};
        {{ piece_range() }}
        for (unsigned e = t; e < np; e += {{ B }}u) {
            PG[slot * NJ_N + lo + e] = nj_ag[e];
{% if F.bias then %}
            PG[({{ G }} + slot) * NJ_N + lo + e] = nj_ab[e];
{% end %}
        }
    }
{% end %}
}
