{# Forward, row-like problems: the reduced axes are the innermost axes (every kept axis outside them)
   and x has stride 1 on the innermost one: the ROW kind, and also e.g. GroupNorm NCHW, whose (C/G, HW)
   reduction keeps two axes because only C/G is a feature. An element's offset within its row is
   decomposed over the reduced axes (extents and strides baked in; a plain j when contiguous).
   A block (rows_per_block == 1) or a warp (rows_per_block == block / 32) per row of the
   rows = A.rows * kept_inner. With regs_cache > 0 the row stays in registers (x read once, two-pass
   statistics from registers); otherwise Welford over the row and a second pass that re-reads x.
   Vector width P.vec assumes base pointers and batch strides that are multiples of vec elements: the
   launch checks them (the plan's align_opds) and runs the unaligned variant (P.unaligned: vec 1, the
   row streamed with rolled loops) when they are not.
   Split rows (P.split > 1, streamed, a block per piece of a row): nj_fwd_row_part writes each piece's
   (sum, squared deviations from the piece mean) to the workspace; nj_fwd_row's warp 0 combines the
   row's pieces in a fixed order (m2 = sum(m2_q + n_q * (mean_q - mean)^2): nothing cancels), then the
   block normalizes its piece. Pipelined (P.lag > 0): one launch, after a zero launch that clears a counter
   a statistic. Its blocks alternate a piece's partial sums and, P.lag pieces behind, a piece's
   normalization (nj_fwd_row's pipe_item); a piece's block adds one to its statistic's counter, the one
   that completes it merges the pieces (fwd_split_stats) into the workspace's means region and adds one
   more; a normalizing block waits for that. The lag puts a statistic's whole x (and half a wave of
   blocks) between a piece's two reads: x is read again from L2, not DRAM. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{%
local red = reduced_axes()
local kept = kept_axes()
if #red == 0 then error("fwd_row: no reduced axis") end
if kept[#kept] > red[1] then error("fwd_row needs every reduced axis inside the kept ones") end
local inner = red[#red]
local RS = P.axes[inner].stride
-- offset within the row of element j for operand opd (j counts elements along the row)
function roff(opd) return row_offset(opd, "j") end
local F = P.flags
local has_param = F.scale or F.bias
-- gamma/beta along the row: constant (param_row), one value per vector chunk (innermost stride 0), or a
-- vector like x (param_vec)
local param_row, param_vec = true, false
if has_param then
  for _, a in ipairs(red) do param_row = param_row and P.axes[a].stride.param == 0 end
  param_vec = not param_row and RS.param ~= 0
end
local B, RPB = P.block, P.rows_per_block
local TPR = B // RPB
local NW = B // 32
-- GROUPS: a group of TPR < 32 lanes a row, several rows a warp (lib_index.cuh: row_group_fns)
local GROUPS = TPR < 32
-- gamma/beta of a row kept in registers do not depend on its statistics: loaded after the reduction,
-- their latency (DRAM when cold, as in a decode step) followed the reduction's. PEARLY: rows of a warp
-- or a group load them with x, into registers, where they fit beside the row's (48 floats at most).
-- PPREF: rows of a block (gamma/beta contiguous along the row) have their lines prefetched into L1, a
-- line a thread, before x's loads, and load them after the reduction: registers held across it cost
-- resident blocks (LayerNorm bf16 rows of 4096, 512 threads: 32 -> 39-40 registers, 4 -> 3 blocks an
-- SM; so did a prefetch at each chunk's address, which stayed live).
local n_pvec = (F.scale and not param_row and 1 or 0) + (F.bias and not param_row and 1 or 0)
local PEARLY = P.regs_cache > 0 and P.split == 1 and n_pvec > 0 and RPB > 1 and P.regs_cache * (1 + n_pvec) <= 48
local PPREF = P.regs_cache > 0 and P.split == 1 and param_vec and RPB == 1 and roff("param") == "j"
local SPLIT = P.split
-- PERSIST (P.persist): the plan's grid of resident blocks walks the rows in turn. A block loads its
-- threads' gamma/beta once, and fetches row r + 1's x (as raw words) and first element before row r's
-- reduction, so its loads stay in flight through the barriers; the planner (plan_fwd_persist) keeps it
-- to contiguous rows without the residual add, whose gamma/beta serve every row.
local PERSIST = P.persist > 0
-- PSTAGE (P.stage on a persistent plan): gamma/beta copied once a block into dynamic shared memory as
-- floats (16-bit x: held words took registers ptxas spilled), [gamma][beta], NJ_N each, with vector loads
local PSTAGE = PERSIST and P.stage == 1
if P.stage == 1 and not (PERSIST and has_param) then error("fwd_row: stage needs a persistent plan with gamma/beta") end
-- XSTAGE (P.stage 2): a streamed row's x (x + the residual, as floats) kept in dynamic shared memory by
-- the statistics walk, [element of the row], each thread's chunks read back by the same thread in the
-- normalizing walk (no barrier between): where the rows of the resident blocks outgrow the L2, the
-- second walk re-read x from DRAM
local XSTAGE = P.stage == 2
if XSTAGE and (PERSIST or P.split > 1 or P.regs_cache > 0 or RPB ~= 1 or P.unaligned) then
  error("fwd_row: a staged row is a streamed block-per-row walk")
end
if PERSIST then
  if RPB ~= 1 or SPLIT ~= 1 or P.regs_cache == 0 or F.residual or F.resout or roff("x") ~= "j" or
     roff("y") ~= "j" or (has_param and not param_vec) or (has_param and roff("param") ~= "j") then
    error("fwd_row: persist needs contiguous rows held in registers, gamma/beta along them, no residual")
  end
  for _, a in ipairs(kept) do
    if has_param and P.axes[a].stride.param ~= 0 then error("fwd_row: persist needs one gamma/beta for all rows") end
  end
end
local PIPE = P.lag > 0
-- PIPE: scratch's floats from PS on hold what thread 0 loads for the block (pipe_head); below PS the block
-- sums' (NW) and the merge's (2)
local PS = math.max(B // 32, 2)
if SPLIT > 1 and (P.regs_cache > 0 or RPB ~= 1 or not (P.role.part or PIPE)) then error("fwd_row: split rows are streamed, a block a piece") end
-- the chunk range a thread streams: the whole row, or its piece of a split row
local LO = SPLIT > 1 and "ch_lo + lane" or "lane"
local HI = SPLIT > 1 and "ch_hi" or GROUPS and "(live ? NCH : 0)" or "NCH"
-- a chunk the thread loads and stores: within the row, and (GROUPS) of a row of the group's own; a
-- group past the last row (live false) neither loads nor stores (y may be x), it only takes part in
-- the shuffles
local CHUNK_OK = GROUPS and "live && (NCH % NJ_TPR == 0 || ch < NCH)" or "NCH % NJ_TPR == 0 || ch < NCH"
%}

{% fwd_typedefs() %}

#define NJ_TPR {{ TPR }}
#define NJ_RPB {{ RPB }}
#define NJ_N {{ P.reduce_size }}LL
{% if GROUPS then %}
{% row_group_fns() %}
{% end %}
{% if PPREF then %}
/* The line holding p into L1 (and L2), no register held: the emulator has no caches. */
NJ_DEVICE void nj_prefetch_l1(const void *p)
{
#ifndef NJ_EMU
    asm volatile("prefetch.global.L1 [%0];" : : "l"(p));
#else
    (void)p;
#endif
}
{% end %}
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
{% end %}

{# PERSIST: the loop over the rows a block walks, its gamma/beta's words loaded before it (gw_, bw_),
   row r + 1's words (xw_) and first element (k_n) fetched before row r's work; opens the loop's body. #}
{% function persist_head() %}
    typedef nj_vec_io<V, nj_tx> nj_iox;
    constexpr int CPT = (int)((NCH + NJ_TPR - 1) / NJ_TPR);
{% if PSTAGE then %}
    /* gamma, then beta, as floats (ptab_at's layout), a thread the chunks it reads: vector loads, gamma
       and beta being among the plan's aligned operands */
    NJ_DYN_SHARED(float, nj_ptab);
    for (nj_i64 ch = lane; ch < NCH; ch += NJ_TPR) {
        float pv_[V];
{% for _, pr in ipairs({{F.scale, "GAMMA", false}, {F.bias, "BETA", true}}) do %}
{%   if pr[1] then %}
        nj_load_vec<V>({{ pr[2] }}, ch * V, pv_);
#pragma unroll
        for (int k = 0; k < V; k++) {{ ptab_at(F.scale, pr[3], "ch * V + k") }} = pv_[k];
{%   end %}
{% end %}
    }
    __syncthreads();
{% elseif has_param then %}
    typedef nj_vec_io<V, nj_tparam> nj_iop;
{% end %}
{% for _, pr in ipairs(PSTAGE and {} or {{F.scale, "gw_", "GAMMA"}, {F.bias, "bw_", "BETA"}}) do %}
{%   if pr[1] then %}
    unsigned {{ pr[2] }}[CPT][nj_iop::W];
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        const nj_i64 ch = lane + (nj_i64)c * NJ_TPR;
        if (NCH % NJ_TPR == 0 || ch < NCH) nj_iop::fetch({{ pr[3] }}, ch * V, {{ pr[2] }}[c]);
    }
{%   end %}
{% end %}
    unsigned xw_[CPT][nj_iox::W];
    float k_n = 0.0f;
    const nj_i64 rstep = (nj_i64)gridDim.x * gridDim.y; /* a grid laid out in 2-D: nj_launch_grid */
    nj_i64 row = nj_block_item();
{% local function fetch(var) %}
        {
        {{ split_index(var, kept, "q") }}
        const nj_i64 fx = {{ offset("x", kept, "q") }};
        k_n = nj_load_f32(X, fx);
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const nj_i64 ch = lane + (nj_i64)c * NJ_TPR;
            if (NCH % NJ_TPR == 0 || ch < NCH) nj_iox::fetch(X, fx + ch * V, xw_[c]);
        }
        }
{% end %}
    if (row < nrows)
{% fetch("row") %}
    for (; row < nrows; row += rstep) {
        unsigned xc_[CPT][nj_iox::W];
#pragma unroll
        for (int c = 0; c < CPT; c++)
#pragma unroll
            for (int k = 0; k < nj_iox::W; k++) xc_[c][k] = xw_[c][k];
        const float kx_ = k_n;
        const nj_i64 nrow = row + rstep;
        if (nrow < nrows)
{% fetch("nrow") %}
{% end %}
{# PIPE: the row's first element (the shift), and for a normalizing block its statistic's merged (md, rstd)
   and gamma/beta where constant over the row, loaded once a block by thread 0 into scratch[PS ..], not
   once a warp: the pieces are short (2 vectors a thread), and a warp's broadcast loads were 1 in 6 of a
   block's requests (InstanceNorm f32 over 128^3: 95% sector efficiency, 80% of the lanes' bytes in 16-byte
   accesses) #}
{% function pipe_head(mode) %}
        if (threadIdx.x == 0) {
{% if mode == "norm" then %}
            nj_pipe_wait(FLAG, NJ_SPLIT + 1); /* the block of the statistic's last piece has merged it */
            scratch[{{ PS + 3 }}] = nj_load_cg(MEANS);
            scratch[{{ PS + 4 }}] = nj_load_cg(MEANS + 1);
{% if F.scale and param_row then %}
            scratch[{{ PS + 1 }}] = nj_load_f32(GAMMA, op);
{% end %}
{% if F.bias and param_row then %}
            scratch[{{ PS + 2 }}] = nj_load_f32(BETA, op);
{% end %}
{% end %}
            scratch[{{ PS }}] = nj_load_f32(X, ox){{ F.residual and " + nj_load_f32(RES, ores)" or "" }};
        }
        __syncthreads();
        const nj_shift sh = nj_shift_of(scratch[{{ PS }}], {{ F.center and "true" or "false" }});
{% if mode == "norm" and F.scale and param_row then %}
        const float g_row = scratch[{{ PS + 1 }}];
{% end %}
{% if mode == "norm" and F.bias and param_row then %}
        const float b_row = scratch[{{ PS + 2 }}];
{% end %}
{% end %}
{# mode: nil (statistics and normalization), "part" (split rows: a piece's partial statistics) or
   "norm" (split rows: the row's statistics from the pieces', then normalization) #}
{% local function row_body(name, V, cache, mode) %}
{# Streaming loops: walk_unroll() (lib_index.cuh). #}
{% local compact = P.unaligned %}
{% local stream_unroll = walk_unroll(F.residual and 2 or 1) .. "\n        " %}
/* One thread's share of the row: chunks of V elements at chunk index lane, lane + TPR, ... */
NJ_DEVICE void {{ name }}(const nj_kargs &A, float *scratch, nj_welford *wscratch{{ PIPE and ", nj_i64 wi_" or "" }})
{
    constexpr int V = {{ V }};
    constexpr nj_i64 NCH = NJ_N / V;
    const int lane = threadIdx.x % NJ_TPR;
    const nj_i64 nrows = A.rows * {{ P.kept_inner }}LL;
{% fwd_pointers() %}
{% if PERSIST then %}
{% persist_head() %}
{% elseif SPLIT > 1 then %}
    constexpr nj_i64 CPS = (NCH + NJ_SPLIT - 1) / NJ_SPLIT; /* chunks a piece */
{% if PIPE then %}
    {
        const nj_i64 wi = wi_; /* the kernel's pipe_item: pieces in row order */
        const nj_i64 row = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
        int *const FLAG = (int *)((float *)A.workspace{{ ws_plus("flags") }}) + row;
        float *const MEANS = (float *)A.workspace{{ ws_plus("means") }} + 2 * row;
{% else %}
    {{ block_item("wi", "nrows * NJ_SPLIT", nil, nil, mode == "norm" and P.reverse == 1) }}
{% end %}
{% if PIPE then %}
{% elseif mode == "norm" or P.reverse == 1 then %}
        /* piece-major: the blocks of one piece of every row run side by side, so the piece's gamma/beta
           come from DRAM once, not once a row (LayerNorm f32 10 x 10^7: 800 of the 2000 MB read); the
           part kernel alike when the normalizing one walks back over its pieces (P.reverse) */
        const nj_i64 piece = wi / nrows, row = wi % nrows;
{% else %}
        const nj_i64 row = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
{% end %}
        const nj_i64 ch_lo = piece * CPS, ch_hi = ch_lo + CPS < NCH ? ch_lo + CPS : NCH;
{% elseif GROUPS then %}
    {{ block_item("wrow", "(nrows + NJ_GPW - 1) / NJ_GPW", NW, "threadIdx.x / 32") }}
        const nj_i64 grow = wrow * NJ_GPW + threadIdx.x % 32 / NJ_TPR, row = {{ row_of_group("grow") }};
        const bool live = grow < nrows;
{% else %}
    {{ block_item("row", "nrows", "NJ_RPB", "threadIdx.x / NJ_TPR") }}
{% end %}
        {{ split_index("row", kept, "k") }}
{% fwd_offsets(kept, "k") %}
{% if PERSIST then %}
        const nj_shift sh = nj_shift_of(kx_, {{ F.center and "true" or "false" }});
{% elseif PIPE then %}
{% pipe_head(mode) %}
{% else %}
{% fwd_shift() %}
{% end %}
{% if F.scale and param_row and not PIPE then %}
        const float g_row = nj_load_f32(GAMMA, op);
{% end %}
{% if F.bias and param_row and not PIPE then %}
        const float b_row = nj_load_f32(BETA, op);
{% end %}
{#------------------------------------------------ first pass: x (+ residual), statistics #}
{# gamma/beta of chunk c (PEARLY) into gp_[c], bp_[c] (vectors, or one value a chunk) #}
{% local function param_loads(ind) %}
{% if F.scale and param_vec then %}
{{ ind }}nj_load_vec<V>(GAMMA, op + {{ roff("param") }}, gp_[c]);
{% elseif F.scale and not param_row then %}
{{ ind }}gp_[c] = nj_load_f32(GAMMA, op + {{ roff("param") }});
{% end %}
{% if F.bias and param_vec then %}
{{ ind }}nj_load_vec<V>(BETA, op + {{ roff("param") }}, bp_[c]);
{% elseif F.bias and not param_row then %}
{{ ind }}bp_[c] = nj_load_f32(BETA, op + {{ roff("param") }});
{% end %}
{% end %}
{% local function load_x(dst) %}
            nj_load_vec<V>(X, ox + {{ roff("x") }}, {{ dst }});
{% if F.residual then %}
            {
                float r_[V];
                nj_load_vec<V>(RES, ores + {{ roff("res") }}, r_);
#pragma unroll
                for (int k = 0; k < V; k++) {{ dst }}[k] += r_[k];
            }
{% end %}
{% end %}
{% if mode == "norm" and PIPE then %}
        const float md = scratch[{{ PS + 3 }}], rstd = scratch[{{ PS + 4 }}]; /* pipe_head's */
{% elseif mode == "norm" then %}
        /* the row's statistics from its pieces' (nj_fwd_row_part) */
{% fwd_split_stats("(const float *)A.workspace" .. ws_plus("parts") .. " + row * (2 * NJ_SPLIT)", "CPS", "NCH", "V", "scratch", kept) %}
{% elseif cache then %}
{% if PPREF then %}
        if (threadIdx.x * 128 < NJ_N * sizeof(nj_tparam)) { /* a 128-byte line of gamma (beta) a thread */
{%   if F.scale then %}
            nj_prefetch_l1((const char *)(GAMMA + op) + threadIdx.x * 128);
{%   end %}
{%   if F.bias then %}
            nj_prefetch_l1((const char *)(BETA + op) + threadIdx.x * 128);
{%   end %}
        }
{% end %}
{% if not PERSIST then %}
        constexpr int CPT = (int)((NCH + NJ_TPR - 1) / NJ_TPR);
{% end %}
        float v[CPT][V];
{% if PEARLY and not PERSIST then %}
{% if F.scale then %}
        float gp_[CPT]{{ param_vec and "[V]" or "" }};
{% end %}
{% if F.bias then %}
        float bp_[CPT]{{ param_vec and "[V]" or "" }};
{% end %}
{% end %}
        float s = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const nj_i64 ch = lane + (nj_i64)c * NJ_TPR;
            if ({{ CHUNK_OK }}) {
{% if PERSIST then %}
                nj_row_convert<V>(xc_[c], v[c], (const nj_tx *)0);
{% else %}
                const nj_i64 j = ch * V;
{% load_x("v[c]") %}
{% end %}
{% if PEARLY and not PERSIST then %}
{% param_loads("                ") %}
{% end %}
{% fwd_resout("                ", roff("resout"), "v[c]", "V") %}
#pragma unroll
                for (int k = 0; k < V; k++) s += {{ F.center and "(v[c][k] - sh.k) * sh.inv" or "nj_sq(v[c][k] * sh.inv)" }};
            } else {
#pragma unroll
                for (int k = 0; k < V; k++) v[c][k] = 0.0f;
            }
        }
{% if F.center then %}
        const float mean_s = {{ row_sum("s", "scratch") }} * (1.0f / (float)NJ_N);
        float s2 = 0.0f;
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const nj_i64 ch = lane + (nj_i64)c * NJ_TPR;
            if ({{ CHUNK_OK }}) {
#pragma unroll
                for (int k = 0; k < V; k++) s2 += nj_sq((v[c][k] - sh.k) * sh.inv - mean_s);
            }
        }
        const float var_s = {{ row_sum("s2", "scratch") }} * (1.0f / (float)NJ_N);
{% else %}
        const float mean_s = 0.0f;
        const float var_s = {{ row_sum("s", "scratch") }} * (1.0f / (float)NJ_N);
{% end %}
{% elseif compact then %}
{#  the unaligned variant: sums re-reading x (two passes when centered), not Welford (measured: a
    Welford reduction cost more compile time than the rest of the kernel) #}
        float s = 0.0f;
        {{ stream_unroll }}for (nj_i64 ch = {{ LO }}; ch < {{ HI }}; ch += NJ_TPR) {
            const nj_i64 j = ch * V;
            float xv[V];
{% load_x("xv") %}
{% fwd_resout("            ", roff("resout"), "xv", "V") %}
            s += {{ F.center and "(xv[0] - sh.k) * sh.inv" or "nj_sq(xv[0] * sh.inv)" }};
        }
{% if F.center then %}
{% if mode == "part" then %}
        const float p_sum = {{ row_sum("s", "scratch") }};
        const float mean_s = p_sum * __fdividef(1.0f, (float)((ch_hi > ch_lo ? ch_hi - ch_lo : 1) * V));
{% else %}
        const float mean_s = {{ row_sum("s", "scratch") }} * (1.0f / (float)NJ_N);
{% end %}
        float s2 = 0.0f;
        {{ stream_unroll }}for (nj_i64 ch = {{ LO }}; ch < {{ HI }}; ch += NJ_TPR) {
            const nj_i64 j = ch * V;
            float xv[V];
{% load_x("xv") %}
            s2 += nj_sq((xv[0] - sh.k) * sh.inv - mean_s);
        }
{% if mode == "part" then %}
        const float p_m2 = {{ row_sum("s2", "scratch") }};
{% else %}
        const float var_s = {{ row_sum("s2", "scratch") }} * (1.0f / (float)NJ_N);
{% end %}
{% elseif mode == "part" then %}
        const float p_sum = {{ row_sum("s", "scratch") }}, p_m2 = 0.0f;
{% else %}
        const float mean_s = 0.0f;
        const float var_s = {{ row_sum("s", "scratch") }} * (1.0f / (float)NJ_N);
{% end %}
{% else %}
{% if F.center then %}
        nj_welford w = nj_welford_init();
{% else %}
        float s = 0.0f;
{% end %}
{% if XSTAGE then %}
        NJ_DYN_SHARED({{ F.residual and "float" or "nj_tx" }}, nj_xs); /* the row (XSTAGE) */
{% end %}
        {{ stream_unroll }}for (nj_i64 ch = {{ LO }}; ch < {{ HI }}; ch += NJ_TPR) {
            const nj_i64 j = ch * V;
            float xv[V];
{% load_x("xv") %}
{% fwd_resout("            ", roff("resout"), "xv", "V") %}
{% if XSTAGE then %}
            nj_store_vec<V>(nj_xs, j, xv);
{% end %}
#pragma unroll
            for (int k = 0; k < V; k++) {{ F.center and "nj_welford_add(w, (xv[k] - sh.k) * sh.inv)" or "s += nj_sq(xv[k] * sh.inv)" }};
        }
{% if F.center then %}
        w = {{ row_welford("w", "wscratch") }};
{% if mode == "part" then %}
        const float p_sum = w.n * w.mean, p_m2 = w.m2;
{% else %}
        const float mean_s = w.mean;
        const float var_s = w.m2 * (1.0f / (float)NJ_N);
{% end %}
{% elseif mode == "part" then %}
        const float p_sum = {{ row_sum("s", "scratch") }}, p_m2 = 0.0f;
{% else %}
        const float mean_s = 0.0f;
        const float var_s = {{ row_sum("s", "scratch") }} * (1.0f / (float)NJ_N);
{% end %}
{% end %}
{% if mode == "part" then %}
        if (threadIdx.x == 0) {
            float *WS = (float *)A.workspace{{ ws_plus("parts") }} + row * (2 * NJ_SPLIT) + 2 * piece;
            WS[0] = p_sum;
            WS[1] = p_m2;
        }
{% if PIPE then %}
{% fwd_pipe_merge("(const float *)A.workspace" .. ws_plus("parts") .. " + row * (2 * NJ_SPLIT)", "CPS", "NCH", "V", "scratch", kept) %}
{% end %}
    }
}
{% do return end %}
{% end %}
{% if mode ~= "norm" then %}
{% fwd_finish("mean_s", "var_s") %}
{% end %}
{% if mode ~= "norm" then %}
{% fwd_save_stats(GROUPS and "lane == 0 && live" or "lane == 0", kept) %}
{% end %}
{#------------------------------------------------ second pass: normalize, affine, activation #}
{% local function normalize(src, early) %}
            float o_[V];
{% if PSTAGE then %}
{%   if F.scale then %}
            float gh_[V];
#pragma unroll
            for (int k = 0; k < V; k++) gh_[k] = {{ ptab_at(F.scale, false, "ch * V + k") }};
{%   end %}
{%   if F.bias then %}
            float bh_[V];
#pragma unroll
            for (int k = 0; k < V; k++) bh_[k] = {{ ptab_at(F.scale, true, "ch * V + k") }};
{%   end %}
{% else %}
{%   if PERSIST and F.scale then %}
            float gh_[V];
            nj_held_convert<V>(gw_[c], gh_, (const nj_tparam *)0);
{%   end %}
{%   if PERSIST and F.bias then %}
            float bh_[V];
            nj_held_convert<V>(bw_[c], bh_, (const nj_tparam *)0);
{%   end %}
{% end %}
{% if early then %}
{% elseif F.scale and param_vec then %}
            float g_[V];
            nj_load_vec<V>(GAMMA, op + {{ roff("param") }}, g_);
{% elseif F.scale and not param_row then %}
            const float g_chunk = nj_load_f32(GAMMA, op + {{ roff("param") }});
{% end %}
{% if early then %}
{% elseif F.bias and param_vec then %}
            float b_[V];
            nj_load_vec<V>(BETA, op + {{ roff("param") }}, b_);
{% elseif F.bias and not param_row then %}
            const float b_chunk = nj_load_f32(BETA, op + {{ roff("param") }});
{% end %}
#pragma unroll
            for (int k = 0; k < V; k++) {
                float u = {{ fwd_centered(src .. "[k]") }} * rstd;
{% if early then %}
{% fwd_epilogue("                ", F.scale and (PERSIST and "gh_[k]" or param_vec and "gp_[c][k]" or param_row and "g_row" or "gp_[c]"),
                F.bias and (PERSIST and "bh_[k]" or param_vec and "bp_[c][k]" or param_row and "b_row" or "bp_[c]"), {to = "o_[k]"}) %}
{% else %}
{% fwd_epilogue("                ", F.scale and (param_vec and "g_[k]" or param_row and "g_row" or "g_chunk"),
                F.bias and (param_vec and "b_[k]" or param_row and "b_row" or "b_chunk"), {to = "o_[k]"}) %}
{% end %}
            }
            {{ fwd_out(roff("y"), "o_", "V") }}
{% end %}
{% if cache then %}
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            const nj_i64 ch = lane + (nj_i64)c * NJ_TPR;
            if ({{ CHUNK_OK }}) {
                const nj_i64 j = ch * V;
{% normalize("v[c]", PEARLY or PERSIST) %}
            }
        }
{% else %}
        {{ stream_unroll }}for (nj_i64 ch = {{ LO }}; ch < {{ HI }}; ch += NJ_TPR) {
            const nj_i64 j = ch * V;
            float xv[V];
{% if XSTAGE then %}
            nj_load_vec<V>(nj_xs, j, xv);
{% else %}
{% load_x("xv") %}
{% end %}
{% normalize("xv") %}
        }
{% end %}
    }
}
{% end %}
{% if SPLIT > 1 then %}
{% row_body("nj_fwd_row_part_body", P.vec, false, "part") %}
{% row_body("nj_fwd_row_body", P.vec, false, "norm") %}

{% if PIPE then %}
{{ pipe_zero_kernel("A.rows * " .. P.kept_inner .. "LL", "(float *)A.workspace" .. ws_plus("flags") .. " + i") }}

/* Pieces' sums and pieces' normalization in pipe_item's order (lib_index.cuh) */
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, {{ PS + 5 }});
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
    {{ pipe_item("A.rows * " .. P.kept_inner .. "LL * NJ_SPLIT", "wi", "norm") }}
    if (norm) nj_fwd_row_body(A, nj_scratch, 0, wi);
    else nj_fwd_row_part_body(A, nj_scratch, nj_wscratch, wi);
}
{% else %}
NJ_KERNEL({{ P.role.part.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, {{ NW }});
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
    nj_fwd_row_part_body(A, nj_scratch, nj_wscratch);
}

NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, 2);
    nj_fwd_row_body(A, nj_scratch, 0);
}
{% end %}
{% else %}
{% row_body("nj_fwd_row_body", P.vec, P.regs_cache > 0) %}

{% if PERSIST then %}
NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, {{ P.persist }})
{% else %}
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{% end %}
{
    nj_grid_enter();
{% if RPB == 1 then %}
    NJ_SHARED(float, nj_scratch, {{ NW }});
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
{% else %}
    /* a warp or a group of lanes per row: shuffles only, no shared scratch */
    float *const nj_scratch = 0;
    nj_welford *const nj_wscratch = 0;
{% end %}
    nj_fwd_row_body(A, nj_scratch, nj_wscratch);
}
{% end %}
