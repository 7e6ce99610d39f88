{# Backward, ROW kind whose only feature axis (if any) is the row itself (LayerNorm, RMSNorm over the
   last axes). Launch 1 (nj_bwd_row): a warp or a group of lanes (rows_per_block > 1), or a block, per
   row of the A.rows * kept_inner rows, the plan's NSLOT blocks striding over them. A thread owns the same columns
   (chunks of V at lane, lane + TPR, ...) in every row it visits, so it keeps its columns' sums of
   dz*xhat and dz in registers across rows; the warps of a block then add theirs in warp order in shared
   memory, and the block writes one partial row per block to the workspace (slot = blockIdx.x; the grid
   is fixed by the plan: NSLOT blocks).
   Launch 2, the library's column sum (lib_colsum.cu, compiled once for every plan): a block per 32
   columns adds the slots in a fixed order. Fixed work split and fixed order everywhere: deterministic.
   Rows above 16384 elements (too many column sums for registers) get a block per row for dx only, and
   dgamma/dbeta come from bwd_pgrad_col.cuh's column tiles.
   Vector width P.vec assumes aligned base pointers and batch strides: the launch checks them (the
   plan's align_opds, gamma and beta included: they are loaded a vector a chunk too) and runs the
   unaligned variant (P.vec = 1) otherwise. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
if #red ~= 1 or red[1] ~= P.rank then error("bwd_row needs one innermost reduced axis") end
local F = P.flags
-- PGRAD: the column sums of dgamma/dbeta ride along in registers (the library's column sum adds the
-- blocks'); rows too long for that leave them to the column-tiled launches of bwd_pgrad_col.cuh
local PGRAD = P.pgrad == "slots"
local B, RPB = P.block, P.rows_per_block
local TPR = B // RPB
local NW = B // 32
-- GROUPS: a group of TPR < 32 lanes a row, several rows a warp (lib_index.cuh: row_group_fns,
-- row_of_group)
local GROUPS = TPR < 32
-- GW (P.rows_per_block > 1 with TPR a multiple of 32 above it: planner_row.c, plan_bwd_row_groups): a
-- group of TPR / 32 warps a row, NJ_RPB rows a 1024-thread block, so that a block (a slot) stands for
-- what were NJ_RPB blocks: a quarter or half the slot rows. Its row reductions take the block's barriers
-- (every group the same number of rounds: a group past the last row is not live), and a row needing
-- dl makes the whole block take that path (__syncthreads_or)
local GW = RPB > 1 and TPR > 32
if GW and (TPR % 32 ~= 0 or P.pgrad ~= "slots") then error("bwd_row: warp groups need whole warps and slots") end
local WSUM, WSUM2 = GROUPS and "nj_group_sum" or "nj_warp_sum", GROUPS and "nj_group_sum2" or "nj_warp_sum2"
-- a chunk of the row the thread loads and stores; a group past the last row (live false) neither loads
-- nor stores (dx may be dy) nor adds to the column sums, it only takes part in the shuffles
local CHUNK_OK = (GROUPS or GW) and "live && (NCH % NJ_TPR == 0 || ch < NCH)" or "NCH % NJ_TPR == 0 || ch < NCH"
-- ACC_OK: a chunk the sums take. Fetching row groups zero a row past the end (words, mean and rstd: every
-- term it adds is 0), so their sums need no live test, only their stores: with it, the 1024-thread
-- LayerNorm kernels spilled 40-64 B (the predicate kept per chunk through the unrolled sums)
local ACC_OK = (GW and P.persist > 0) and "NCH % NJ_TPR == 0 || ch < NCH" or CHUNK_OK
local N = P.reduce_size
local NSLOT = PGRAD and P.pgrad_parts or 0
-- PB: the slots carry dbeta's partials (dz sums) only under a bias (nj_plan_pgrad_slots: RMSNorm's
-- workspace holds no beta rows); without one the sums and their registers go
local PB = PGRAD and F.bias
-- PAIR (the main launch in thread-block clusters of two: planner_row.c, plan_bwd_slot_pairs): the second
-- block of a pair hands its partial row to the first through distributed shared memory, and the first
-- writes the pair's sum (its own + the second's, in that order) as slot blockIdx.x / 2: half the slot
-- rows, NSLOT of them
local PAIR = PGRAD and P.role.main.cluster == 2
if PAIR and GROUPS then error("bwd_row: slot pairs need a warp or more a row") end
-- the slot rows stored as float vectors: V floats at a multiple of V from the (16-byte aligned)
-- workspace, whose pgrad region starts at a multiple of 4 floats
local SLOT_VEC = PGRAD and P.vec > 1 and P.ws.pgrad and P.ws.pgrad.fixed % 4 == 0 and P.ws.pgrad.per_row % 4 == 0
-- full unrolling keeps the column sums in registers; without them a huge row must not unroll its chunks
local CUNROLL = (PGRAD or ceil_div(N, TPR) <= 64) and "#pragma unroll" or "#pragma unroll 4"
if PGRAD and (P.param_size ~= N or P.axes[P.rank].stride.param ~= 1) then error("bwd_row: params must span the row") end
-- Up to 16 values a thread, the first pass keeps xhat and g for the second (no re-read of x, dy and
-- gamma, no recomputation): 32 more registers beside the 32 column sums at most.
local CACHE = ceil_div(N // P.vec, TPR) * P.vec <= 16
-- PF (P.persist, the planner's choice: plan_bwd_fetch in planner_row.c says where and why): the row loop
-- fetches the next row while it works on this one, a thread's share of a row at most 8 elements
local SHARE = ceil_div(N // P.vec, TPR) * P.vec
local PF = P.persist > 0
if PF and (GROUPS or not PGRAD or not CACHE or SHARE > 8) then
  error("bwd_row: persist needs the slots' column sums and a share of at most 8 elements, a warp or more a row")
end
if PF and bwd_dl_store() then error("bwd_row: the prefetching loop has no stats offset for dl") end
-- PDX (P.pgrad "tiles_dx", planner_common.c: nj_plan_pgrad_dx): the row's walk stops after its sums and
-- leaves the two means in the workspace, a pair a row; the column tiles' walk (bwd_pgrad_col.cuh), which
-- reads x and dy anyway, writes dx from them
local PDX = P.pgrad == "tiles_dx"
if PDX and (PF or CACHE or GROUPS or RPB ~= 1 or P.kept_inner ~= 1) then error("bwd_row: tiles_dx needs a block a row") end
%}
{{ bwd_typedefs() }}

#define NJ_TPR {{ TPR }}
#define NJ_RPB {{ RPB }}
#define NJ_N {{ N }}
{% if PDX then %}
/* a row's two means (of g and g * xhat) for the column tiles' dx (bwd_pgrad_col.cuh) */
#define NJ_WS_SETS ((float *)A.workspace{{ ws_plus("sets") }})
{% end %}
{% if GROUPS then %}
{% row_group_fns() %}
{% end %}
{% if GW then %}
/* The two sums of each row group (WPG consecutive warps) of the block, added in warp order: every thread
 * of the block calls it (two barriers), each gets its group's. */
template <int NW, int WPG> NJ_DEVICE void nj_rgroup_sum2(float &a, float &b, float *scratch)
{
    nj_warp_sum2(a, b);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, first = warp / WPG * WPG;
    if (lane == 0) {
        scratch[warp] = a;
        scratch[NW + warp] = b;
    }
    __syncthreads();
    a = lane < WPG ? scratch[first + lane] : 0.0f;
    b = lane < WPG ? scratch[NW + first + lane] : 0.0f;
    nj_warp_sum2(a, b);
    __syncthreads();
}
{% end %}
{% if PGRAD then %}
#define NJ_NSLOT {{ NSLOT }}
{% end %}

{% local BETA_USED = F.bias and P.act ~= "none" %}
{% BWD_DL = "dl" %}
{% local function element(c, k) %}
{{ bwd_element("xv_[k]", "dv_[k]", {g = "gv_[k]", b = "bv_[k]"}, "                    ") }}
{% end %}
{# PSTAGE (P.stage on a fetching plan, or a slots plan of a block a row): gamma (and beta under an activation) copied once a block into
   dynamic shared memory as floats, [gamma][beta]: f32 gamma/beta re-read each row made the walk
   L2-bound (LayerNorm bf16 rows of 4096 with f32 gamma/beta: 36.6 us of L2 traffic for 26.7 of DRAM) #}
{% local PSTAGE = P.stage == 1 %}
{% if PSTAGE and not ((PF or (PGRAD and (RPB == 1 or GW))) and (F.scale or BETA_USED)) then error("bwd_row: stage needs a fetching plan, or slots of a block a row, with gamma or beta") end %}
{% local function load_params() %}
{%   if F.scale and PSTAGE then %}
                float gv_[V];
#pragma unroll
                for (int k = 0; k < V; k++) gv_[k] = {{ ptab_at(F.scale, false, "j + k") }};
{%   elseif F.scale then %}
                float gv_[V];
                nj_load_vec<V>(GAMMA, j, gv_);
{%   end %}
{%   if BETA_USED and PSTAGE then %}
                float bv_[V];
#pragma unroll
                for (int k = 0; k < V; k++) bv_[k] = {{ ptab_at(F.scale, true, "j + k") }};
{%   elseif BETA_USED then %}
                float bv_[V];
                nj_load_vec<V>(BETA, j, bv_);
{%   end %}
{% end %}
/* One thread's share of the rows: chunks of V elements at chunk index lane, lane + TPR, ... */
template <int V>
NJ_DEVICE void nj_bwd_row_body(const nj_kargs &A, float *scratch, float *pshared)
{
    constexpr int NCH = NJ_N / V;
    constexpr int CPT = (NCH + NJ_TPR - 1) / NJ_TPR;
    const int lane = threadIdx.x % NJ_TPR;
    const nj_i64 nrows = A.rows * {{ P.kept_inner }}LL;
{{ bwd_pointers() }}
{% if PSTAGE then %}
{% param_table(F.scale, BETA_USED, true) %}
{% end %}
{% if PGRAD then %}
    const bool want_p = A.dgamma || A.dbeta;
    float pg[CPT][V]{{ PB and ", pb[CPT][V]" or "" }};
#pragma unroll
    for (int c = 0; c < CPT; c++)
#pragma unroll
        for (int k = 0; k < V; k++) pg[c][k] = {{ PB and "pb[c][k] = " or "" }}0.0f;
{% end %}
{% if PF then %}
    /* Row r + 1's x, dy, mean and rstd are fetched (as raw words) before row r's reduction, so the
     * block keeps loads in flight through its barriers and arithmetic: with one row's loads at a time
     * the H200 ran these kernels at ~1.5 TB/s. */
    typedef nj_vec_io<V, nj_tx> nj_iox;
    typedef nj_vec_io<V, nj_tdy> nj_iody;
    unsigned xw_[CPT][nj_iox::W], dw_[CPT][nj_iody::W];
    float mean_n = 0.0f, rstd_n = 0.0f;
    const nj_i64 rstep = (nj_i64)gridDim.x * NJ_RPB;
    nj_i64 row = (nj_i64)blockIdx.x * NJ_RPB + threadIdx.x / NJ_TPR;
{%   if GW then %}
    nj_i64 base = (nj_i64)blockIdx.x * NJ_RPB; /* the block's rounds: the same count for every group */
{%   end %}
{%   function bwd_row_fetch(var, pre) %}
        {
        {{ split_index(var, kept, pre) }}
        const nj_i64 fx = {{ offset("x", kept, pre) }};
        const nj_i64 fdy = {{ offset("dy", kept, pre) }};
        const nj_i64 fs = {{ offset("stats", kept, pre) }};
{%     if F.center then %}
        mean_n = A.mean[fs];
{%     end %}
        rstd_n = A.rstd[fs];
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const int ch = lane + c * NJ_TPR;
            if (NCH % NJ_TPR == 0 || ch < NCH) {
                nj_iox::fetch(X, fx + ch * V, xw_[c]);
                nj_iody::fetch(DY, fdy + ch * V, dw_[c]);
            }
        }
        }
{%   end %}
{%   function bwd_row_zero() %}
        else { /* a group's row past the end: zeros, which add nothing to the sums (ACC_OK) */
            mean_n = rstd_n = 0.0f;
#pragma unroll
            for (int c = 0; c < CPT; c++) {
#pragma unroll
                for (int k = 0; k < nj_iox::W; k++) xw_[c][k] = 0u;
#pragma unroll
                for (int k = 0; k < nj_iody::W; k++) dw_[c][k] = 0u;
            }
        }
{%   end %}
    if (row < nrows)
{%   bwd_row_fetch("row", "q") %}
{%   if GW then bwd_row_zero() end %}
{%   if GW then %}
    for (; base < nrows; base += rstep, row += rstep) {
        const bool live = row < nrows; /* a row past the end: zeros (bwd_row_zero); only dx tests it */
{%   else %}
    for (; row < nrows; row += rstep) {
{%   end %}
        unsigned xc_[CPT][nj_iox::W], dc_[CPT][nj_iody::W];
#pragma unroll
        for (int c = 0; c < CPT; c++) {
#pragma unroll
            for (int k = 0; k < nj_iox::W; k++) xc_[c][k] = xw_[c][k];
#pragma unroll
            for (int k = 0; k < nj_iody::W; k++) dc_[c][k] = dw_[c][k];
        }
        const float mean = mean_n, rstd = rstd_n;
        const nj_i64 nrow = row + rstep;
        if (nrow < nrows)
{%   bwd_row_fetch("nrow", "q") %}
{%   if GW then bwd_row_zero() end %}
        {{ split_index("row", kept, "k") }}
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% else %}
{% if PGRAD and GROUPS then %}
    /* the plan's NSLOT blocks stride over the rows, each summing its rows' dgamma/dbeta terms; wrow:
     * the warp's first row */
    for (nj_i64 wrow = (nj_i64)blockIdx.x * NJ_RPB + threadIdx.x / 32 * NJ_GPW; wrow < nrows;
         wrow += (nj_i64)gridDim.x * NJ_RPB) {
        const nj_i64 grow = wrow + threadIdx.x % 32 / NJ_TPR, row = {{ row_of_group("grow") }};
        const bool live = grow < nrows;
{% elseif PGRAD and GW then %}
    /* the plan's NSLOT blocks stride over the rows, NJ_RPB at a time, every group every round */
    for (nj_i64 base = (nj_i64)blockIdx.x * NJ_RPB; base < nrows; base += (nj_i64)gridDim.x * NJ_RPB) {
        const nj_i64 grow = base + threadIdx.x / NJ_TPR, row = {{ row_of_group("grow") }};
        const bool live = grow < nrows;
{% elseif PGRAD then %}
    /* the plan's NSLOT blocks stride over the rows, each summing its rows' dgamma/dbeta terms */
    for (nj_i64 row = (nj_i64)blockIdx.x * NJ_RPB + threadIdx.x / NJ_TPR; row < nrows;
         row += (nj_i64)gridDim.x * NJ_RPB) {
{% elseif GROUPS then %}
    {{ block_item("wrow", "(nrows + NJ_GPW - 1) / NJ_GPW", NW, "threadIdx.x / 32") }}
        const nj_i64 grow = wrow * NJ_GPW + threadIdx.x % 32 / NJ_TPR, row = {{ row_of_group("grow") }};
        const bool live = grow < nrows;
{% else %}
    {{ block_item("row", "nrows", "NJ_RPB", "threadIdx.x / NJ_TPR") }}
{% end %}
        {{ split_index("row", kept, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
        const float rstd = A.rstd[os];
{% end %}
        float dl = 0.0f;
{% if F.center then %}
{% if GROUPS then %}
        /* a warp's groups shuffle together, so the whole warp enters when one of its rows needs dl
           (bwd_lib.cuh: BWD_DL); the others sum and drop it */
        const bool fix_ = live && fabsf(mean) * rstd > NJ_FIX_RATIO;
        if (nj_warp_any(fix_)) {
{% elseif GW then %}
        /* the groups reduce with the block's barriers: the block enters when one of its rows needs dl */
        const bool fix_ = live && fabsf(mean) * rstd > NJ_FIX_RATIO;
        if (__syncthreads_or(fix_)) {
{% else %}
        if (fabsf(mean) * rstd > NJ_FIX_RATIO) { /* uniform over the row (bwd_lib.cuh: BWD_DL) */
{% end %}
            float c_ = 0.0f;
{% if PF then %}
{{ CUNROLL }} /* the row's words are in registers: unrolled, no loads */
{% else %}
#pragma unroll 1 /* rolled: a rare path, one copy of the loads (compile time) */
{% end %}
            for (int c = 0; c < CPT; c++) {
                const int ch = lane + c * NJ_TPR;
                if ({{ ACC_OK }}) {
                    float xv_[V];
{% if PF then %}
                    nj_row_convert<V>(xc_[c], xv_, (const nj_tx *)0);
{% else %}
                    nj_load_vec<V>(X, ox + ch * V, xv_);
{% end %}
#pragma unroll
                    for (int k = 0; k < V; k++) c_ += (xv_[k] - mean) * rstd;
                }
            }
{% if GROUPS then %}
            const float dl_ = {{ WSUM }}(c_) * (1.0f / (float)NJ_N); /* every lane: a shuffle */
            dl = fix_ ? dl_ : 0.0f;
{% elseif GW then %}
            float z_ = 0.0f;
            nj_rgroup_sum2<{{ NW }}, NJ_TPR / 32>(c_, z_, scratch);
            dl = fix_ ? c_ * (1.0f / (float)NJ_N) : 0.0f;
{% elseif RPB > 1 then %}
            dl = {{ WSUM }}(c_) * (1.0f / (float)NJ_N);
{% else %}
            float z_ = 0.0f; /* inlined, not nj_block_sum's call: values live across a call spilled */
            nj_block_sum2<{{ NW }}>(c_, z_, scratch);
            dl = c_ * (1.0f / (float)NJ_N);
{% end %}
{% if bwd_dl_store() then %}
            /* for the dgamma/dbeta walks */
            if ({{ (GROUPS or GW) and "lane == 0 && fix_" or "lane == 0" }}) {{ bwd_dl_base() }}[os] = dl;
{% end %}
        }
{% end %}
        float s1 = 0.0f, s2 = 0.0f;
{% if CACHE then %}
        float xs_[CPT][V], gs_[CPT][V];
{% end %}
{{ CUNROLL }}
        for (int c = 0; c < CPT; c++) {
            const int ch = lane + c * NJ_TPR;
            if ({{ ACC_OK }}) {
                const int j = ch * V;
                float xv_[V], dv_[V];
{% if PF then %}
                nj_row_convert<V>(xc_[c], xv_, (const nj_tx *)0);
                nj_row_convert<V>(dc_[c], dv_, (const nj_tdy *)0);
{% else %}
                nj_load_vec<V>(X, ox + j, xv_);
                nj_load_vec<V>(DY, ody + j, dv_);
{% end %}
{% load_params() %}
#pragma unroll
                for (int k = 0; k < V; k++) {
{% element() %}
                    s1 += g;
                    s2 += g * xh;
{% if CACHE then %}
                    xs_[c][k] = xh;
                    gs_[c][k] = g;
{% end %}
{% if PGRAD then %}
                    pg[c][k] += dz * xh;
{% if PB then %}
                    pb[c][k] += dz;
{% end %}
{% end %}
                }
            }
        }
{% if GW then %}
        nj_rgroup_sum2<{{ NW }}, NJ_TPR / 32>(s1, s2, scratch);
{% elseif RPB > 1 then %}
        {{ WSUM2 }}(s1, s2);
{% else %}
        nj_block_sum2<{{ NW }}>(s1, s2, scratch);
{% end %}
{% if F.center then %}
        const float m1 = s1 * (1.0f / (float)NJ_N);
{% end %}
        const float m2 = s2 * (1.0f / (float)NJ_N);
{% if PDX then %}
        (void)odx;
        if (threadIdx.x == 0) {
            NJ_WS_SETS[row * 2] = {{ F.center and "m1" or "0.0f" }};
            NJ_WS_SETS[row * 2 + 1] = m2;
        }
{% else %}
{{ CUNROLL }}
        for (int c = 0; c < CPT; c++) {
            const int ch = lane + c * NJ_TPR;
            if ({{ CHUNK_OK }}) {
                const int j = ch * V;
{% if CACHE then %}
                float o_[V];
#pragma unroll
                for (int k = 0; k < V; k++) o_[k] = {{ bwd_dx_expr("gs_[c][k]", "xs_[c][k]", "m1", "m2") }};
{% else %}
                float xv_[V], dv_[V], o_[V];
                nj_load_vec<V>(X, ox + j, xv_);
                nj_load_vec<V>(DY, ody + j, dv_);
{% load_params() %}
#pragma unroll
                for (int k = 0; k < V; k++) {
{% element() %}
                    o_[k] = {{ bwd_dx_expr("g", "xh", "m1", "m2") }};
                }
{% end %}
                nj_store_vec<V>(DX, odx + j, o_);
            }
        }
{% end %}
    }
{% if PGRAD then %}
    if (!want_p) return; /* uniform: the same for every thread */
    float *WS = (float *)A.workspace{{ ws_plus("pgrad") }} + (nj_i64){{ PAIR and "(blockIdx.x / 2u)" or "blockIdx.x" }} * NJ_N;
{% if RPB > 1 then %}
{% if GROUPS then %}
    /* the groups of a warp add their columns (butterflies across the groups: a fixed order); the
     * first group's lanes hold the warp's */
#pragma unroll
    for (int c = 0; c < CPT; c++)
#pragma unroll
        for (int k = 0; k < V; k++)
#pragma unroll
            for (int m = NJ_TPR; m < 32; m <<= 1) {
                pg[c][k] += nj_shfl_xor(pg[c][k], m);
{% if PB then %}
                pb[c][k] += nj_shfl_xor(pb[c][k], m);
{% end %}
            }
{% end %}
    /* the warps of the block add their columns in warp order (fixed), then the block writes its slot */
#pragma unroll 1
    for (int w = 0; w < {{ GROUPS and NW or "NJ_RPB" }}; w++) {
        if ({{ GROUPS and "(int)threadIdx.x / 32 == w && threadIdx.x % 32 < NJ_TPR" or "(int)threadIdx.x / NJ_TPR == w" }}) {
#pragma unroll
            for (int c = 0; c < CPT; c++) {
                const int ch = lane + c * NJ_TPR;
                if (NCH % NJ_TPR == 0 || ch < NCH) {
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        const int j = ch * V + k;
                        pshared[j] = w ? pshared[j] + pg[c][k] : pg[c][k];
{% if PB then %}
                        pshared[NJ_N + j] = w ? pshared[NJ_N + j] + pb[c][k] : pb[c][k];
{% end %}
                    }
                }
            }
        }
        __syncthreads();
    }
{% if PAIR then %}
    /* both blocks' partial rows are complete (the barrier above); the first adds the second's */
    nj_cluster_sync();
    if (nj_cluster_rank() == 0u) {
        const float *peer = nj_cluster_map(pshared, 1u);
#pragma unroll 1
        for (int j = threadIdx.x; j < NJ_N; j += {{ B }}) {
            WS[j] = pshared[j] + peer[j];
{% if PB then %}
            WS[(nj_i64)NJ_NSLOT * NJ_N + j] = pshared[NJ_N + j] + peer[NJ_N + j];
{% end %}
        }
    }
    nj_cluster_sync(); /* the second block's shared memory lives until the first has read it */
{% else %}
#pragma unroll 1
    for (int j = threadIdx.x; j < NJ_N; j += {{ B }}) {
        WS[j] = pshared[j];
{% if PB then %}
        WS[(nj_i64)NJ_NSLOT * NJ_N + j] = pshared[NJ_N + j];
{% end %}
    }
{% end %}
{% else %}
{% if PAIR then %}
    /* the second block's column sums go to its shared memory after the staged table, a float a thread
       and column ([stream][c][k][thread]: each warp's stores and loads one row of banks); the first
       block adds them to its own, then stores as an unpaired block does */
    NJ_DYN_SHARED(float, nj_pair_dyn);
    float *const pbuf = nj_pair_dyn + {{ PSTAGE and ((F.scale and 1 or 0) + (BETA_USED and 1 or 0)) * N or 0 }};
    if (nj_cluster_rank() == 1u) {
#pragma unroll
        for (int c = 0; c < CPT; c++)
#pragma unroll
            for (int k = 0; k < V; k++) {
                pbuf[(c * V + k) * {{ B }} + threadIdx.x] = pg[c][k];
{% if PB then %}
                pbuf[((CPT + c) * V + k) * {{ B }} + threadIdx.x] = pb[c][k];
{% end %}
            }
    }
    nj_cluster_sync();
    if (nj_cluster_rank() == 0u) {
        const float *peer = nj_cluster_map(pbuf, 1u);
#pragma unroll
        for (int c = 0; c < CPT; c++)
#pragma unroll
            for (int k = 0; k < V; k++) {
                pg[c][k] += peer[(c * V + k) * {{ B }} + threadIdx.x];
{% if PB then %}
                pb[c][k] += peer[((CPT + c) * V + k) * {{ B }} + threadIdx.x];
{% end %}
            }
{% end %}
    /* a lane's V columns as float vectors (16-byte pieces): one float a store put 32 lanes' stores of
       one element in 32 sectors, the slot rows' L2 traffic four times their bytes (LLM rows) */
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        const int ch = lane + c * NJ_TPR;
        if (NCH % NJ_TPR == 0 || ch < NCH) {
{% if SLOT_VEC then %}
            nj_store_vec<V>(WS, ch * V, pg[c]);
{% if PB then %}
            nj_store_vec<V>(WS, (nj_i64)NJ_NSLOT * NJ_N + ch * V, pb[c]);
{% end %}
{% else %}
#pragma unroll
            for (int k = 0; k < V; k++) {
                WS[ch * V + k] = pg[c][k];
{% if PB then %}
                WS[(nj_i64)NJ_NSLOT * NJ_N + ch * V + k] = pb[c][k];
{% end %}
            }
{% end %}
        }
    }
{% if PAIR then %}
    }
    nj_cluster_sync(); /* the second block's shared memory lives until the first has read it */
{% end %}
{% end %}
{% end %}
}

{# 512-thread slots walks without a bias (dgamma sums only: 16-32 a thread on f32 rows) sat at the edge
   of sm_80 ptxas's 64-register default and spilled 8-32 bytes (LayerNorm f32 rows of 16384, SiLU);
   with the beta sums they took 128, as these now may #}
{% if PAIR then %}
NJ_CLUSTER_KERNEL({{ P.role.main.kernel }}, {{ B }}, 2, 1, 1)
{% elseif PGRAD and not PB and B == 512 then %}
NJ_KERNEL_REGS({{ P.role.main.kernel }}, {{ B }})
{% else %}
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{% end %}
{
    nj_grid_enter();
{% if RPB == 1 or GW then %}
    NJ_SHARED(float, nj_scratch, {{ 2 * NW }});
{% else %}
    float *const nj_scratch = 0; /* a warp or a group of lanes per row: shuffles only */
{% end %}
{% if PGRAD and RPB > 1 then %}
    NJ_SHARED(float, nj_pshared, {{ (PB and 2 or 1) * N }});
{% else %}
    float *const nj_pshared = 0;
{% end %}
    nj_bwd_row_body<{{ P.vec }}>(A, nj_scratch, nj_pshared);
}
{% if P.pgrad == "tiles" or PDX then %}
{% include("bwd_pgrad_col.cuh") %}
{% elseif P.pgrad == "walk" then %}
{% include("bwd_pgrad.cuh") %}
{% end %}
