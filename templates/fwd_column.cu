{# Forward, COLUMN kind: the innermost axis is kept and contiguous in x (channels-last InstanceNorm,
   BatchNorm NHWC, ...). A block takes a tile of P.tile neighbouring columns of one outer kept index:
   a warp's lanes make RW = P.rows_per_block sub-rows of LPR = 32 / RW lanes (RW > 1 where the columns
   are a narrow run: 32 f32 channels, 4 a lane, 8 lanes a row); lane lx of a sub-row owns the CPL =
   P.tile / LPR columns from tile * P.tile + lx * CPL on, loaded as one vector of P.vec = CPL elements
   (the unaligned variant: P.vec = 1, a column at a time), and sub-row sr of warp ty walks the
   reduction index space from ty * RW + sr with stride RW * block/32, so every warp reads RW x P.tile
   consecutive elements (coalesced). Each walk issues P.unroll independent loads a thread before it uses them (the statistics
   still add in walk order, a column at a time). Partial statistics meet in shared memory; warp 0 merges
   them per column. Long walks (P.split > 1: BatchNorm NHWC over N x H x W, volumes) are cut into NJ_SPLIT
   pieces of contiguous walk indices, a block per (tile, piece), in three launches: nj_fwd_column_part
   writes each piece's (sum, squared deviations from the piece mean) per column, the library's merge
   (lib_merge.cu) combines a tile's pieces in a fixed order (m2 = sum(m2_q + n_q * (mean_q - mean)^2):
   nothing cancels) into its (mean, rstd), and nj_fwd_column normalizes each piece (piece 0 writes the
   saved statistics). Workspace: [tile][piece][2][P.tile] partials, then [tile][2][P.tile] statistics,
   tiles over the whole batch, a tile's columns in order. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{% include("col_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
local cax = P.rank
if P.axes[cax].reduce or P.axes[cax].stride.x ~= 1 then error("fwd_column needs a kept innermost axis of stride 1") end
if #red == 0 then error("fwd_column: no reduced axis") end
local EC = P.axes[cax].extent
local outer = {}
for _, a in ipairs(kept) do if a ~= cax then outer[#outer + 1] = a end end
local F = P.flags
local has_param = F.scale or F.bias
local B = P.block
local BY = B // 32
local TC = P.tile
local RW = P.rows_per_block
local LPR = 32 // RW
local CPL = TC // LPR
local VW = P.vec
if LPR * RW ~= 32 or TC % LPR ~= 0 or (VW ~= CPL and VW ~= 1) or EC % CPL ~= 0 then
  error("fwd_column: tile " .. TC .. ", vec " .. VW .. ", " .. RW .. " rows a warp") end
local U = P.unroll
local NT = ceil_div(EC, TC)
-- the tile's x (x + the residual, as a float, with one) kept in dynamic shared memory by the statistics
-- walk, [walk index][column of the tile], for the normalizing walk: where the tiles of all resident
-- blocks outgrow the caches, the second walk read x from DRAM again (LayerNorm over the C of NCHW,
-- f16 *x768x7x7: 105 MB read for 34 MB of x)
local STAGE = P.stage == 1
if STAGE and P.split > 1 then error("fwd_column: a staged tile needs a whole walk") end
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
local SPLIT = P.split
-- PIPE (P.lag > 0; planner_column.c: col_fwd_pipe): one launch whose blocks alternate a piece's partials
-- (the part kernel's) and, P.lag pieces behind, a piece's normalization (the main kernel's); the block of
-- a tile's last piece merges its pieces (nj_col_merge), the normalizing blocks wait for it
local PIPE = P.lag > 0
if PIPE and (SPLIT < 2 or CPL % 4 ~= 0 or B % (TC // 4) ~= 0) then
  error("fwd_column: a pipe needs split walks and whole 4-column vectors a lane") end
-- the walk indices a block covers: the whole reduction, or its piece
-- the sub-row's first walk index (ty itself with one sub-row: sr is 0)
local LO = (SPLIT > 1 and "(" .. IT .. ")lo + " or "") .. "(ty * NJ_RW + sr)"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
local NTASK = P.kept_inner // EC * NT -- tiles per batch row
-- gamma/beta vary down the walk only (LayerNorm over the C of NCHW: features among the reduced axes,
-- none kept): a table of the walk's values in shared memory, filled once a block, so the normalizing
-- walk issues its x loads only (a scalar global load of each parameter a walk step had cut the bytes
-- a load request moves, and with them the bytes in flight, to a fifth)
local PTAB = false
if has_param and P.reduce_size <= 2048 then
  PTAB = true
  for _, a in ipairs(kept) do if P.axes[a].stride.param ~= 0 then PTAB = false end end
end
-- gamma/beta constant down the walk (channels-last InstanceNorm, BatchNorm NHWC: the features are kept
-- axes): a lane's columns' values loaded once into registers (a load of each a walk step, hits in L1,
-- had made the normalizing walk L2-bound: 582 MB of hits for 137 MB of x, InstanceNorm NDHWC 256 ch)
local PREG = has_param
for _, a in ipairs(red) do if P.axes[a].stride.param ~= 0 then PREG = false end end
-- column c's offset from a lane's first column in operand opd
local function colx(opd)
  if CPL == 1 then return "" end
  local s = P.axes[cax].stride[opd]
  if s == 0 then return "" end
  return " + c" .. (s == 1 and "" or (" * " .. s))
end
-- a lane's CPL columns of operand opd (pointer ptr) at base offset off into float array dst
local function load_cols(ptr, opd, off, dst)
  if VW > 1 then return string.format("nj_load_vec<%d>(%s, %s, %s);", VW, ptr, off, dst) end
  if CPL == 1 then return string.format("%s[0] = nj_load_f32(%s, %s);", dst, ptr, off) end
  return string.format("for (int c = 0; c < NJ_CPL; c++) %s[c] = nj_load_f32(%s, %s%s);", dst, ptr, off, colx(opd))
end
-- a column's shift from its first element (first_cols)
local function shift_of(first)
  return "nj_shift_of(" .. first .. ", " .. (F.center and "true" or "false") .. ")"
end
%}
{# The lane's columns' first elements, x (+ the residual), into float fc[NJ_CPL]: one vector load as the
   walk's (a load a column had made the 2-byte loads 29% of the requests of LayerNorm over the C of NCHW
   f16, at 12% sector efficiency); 0 past the tile's end. #}
{% local function first_cols() %}
        float fc[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) fc[c] = 0.0f;
        if (col_ok) {
            {{ load_cols("X", "x", "ox", "fc") }}
{% if F.residual then %}
            float fr[NJ_CPL];
            {{ load_cols("RES", "res", "ores", "fr") }}
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) fc[c] += fr[c];
{% end %}
        }
{% end %}

{% fwd_typedefs() %}

#define NJ_N {{ P.reduce_size }}LL
#define NJ_EC {{ EC }}LL
#define NJ_NT {{ NT }}LL
#define NJ_NW {{ BY }} /* warps */
#define NJ_BY {{ BY * RW }} /* the walk's stride: warps x sub-rows */
#define NJ_RW {{ RW }} /* sub-rows a warp */
#define NJ_LPR {{ LPR }} /* lanes a sub-row */
#define NJ_CPL {{ CPL }}
#define NJ_TC {{ TC }}
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
{% end %}

{# A walk down the lane's columns over [LO, HI) with step NJ_BY, n walk steps a group: the group's
   offsets and loads first (v[q][c]: x, plus the residual), then use(q) on each in walk order. #}
{# stage: nil, "fill" (the loads also go to the staged tile, after the group's loads are issued) or
   "read" (the values come from the staged tile). guard: the walk's end where the group's steps past it
   are skipped (sub-row plans: one loop, no one-step tail loop whose CPL-wide body, activations
   included, cost ~25 ms of NVRTC a kernel) #}
{% local function walk_group(n, ind, offs, use, stage, guard) %}
{{ ind }}float v[{{ n }}][NJ_CPL];
{% for _, e in ipairs(offs) do %}
{{ ind }}nj_i64 e{{ e }}[{{ n }}];
{% end %}
#pragma unroll
{{ ind }}for (int q = 0; q < {{ n }}; q++) {
{{ ind }}    const {{ IT }} iq = i + ({{ IT }})q * NJ_BY;
{% if guard then %}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++) v[q][c] = 0.0f;
{{ ind }}    if (iq >= {{ guard }}) continue;
{% end %}
{{ ind }}    {{ split_index("iq", red, "r", IT) }}
{% for _, e in ipairs(offs) do %}
{{ ind }}    e{{ e }}[q] = {{ e == "p" and (PTAB and "iq" or offset("param", red, "r")) or offset(e, red, "r") }};
{% end %}
{% if stage == "read" then %}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++) v[q][c] = nj_to_f32(nj_stage[iq * NJ_TC + lx * NJ_CPL + c]);
{% else %}
{{ ind }}    {{ load_cols("X", "x", "ox + " .. offset("x", red, "r"), "v[q]") }}
{% if F.residual then %}
{{ ind }}    float rv[NJ_CPL];
{{ ind }}    {{ load_cols("RES", "res", "ores + " .. offset("res", red, "r"), "rv") }}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++) v[q][c] += rv[c];
{% end %}
{% end %}
{{ ind }}}
#pragma unroll
{{ ind }}for (int q = 0; q < {{ n }}; q++) {
{% if guard then %}
{{ ind }}    if (i + ({{ IT }})q * NJ_BY >= {{ guard }}) break;
{% end %}
{% if stage == "fill" then %}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++)
{{ ind }}        nj_stage[(i + ({{ IT }})q * NJ_BY) * NJ_TC + lx * NJ_CPL + c] = nj_from_f32<nj_tstage>(v[q][c]);
{% end %}
{% use(ind .. "    ") %}
{{ ind }}}
{% end %}
{% local function walk(offs, use, stage) %}
            {{ IT }} i = {{ LO }};
{# a walk over the staged tile reads shared memory: no loads to keep in flight, so no unrolled groups
   (their code cost NVRTC 10-45 ms a kernel) #}
{% if U > 1 and stage ~= "read" and RW > 1 then %}
#pragma unroll 1
            for (; i < {{ HI }}; i += {{ U }}u * NJ_BY) {
{% walk_group(U, "                ", offs, use, stage, HI) %}
            }
{% do return end %}
{% end %}
{% if U > 1 and stage ~= "read" then %}
#pragma unroll 1
            for (; i + ({{ U - 1 }}u * NJ_BY) < {{ HI }}; i += {{ U }}u * NJ_BY) {
{% walk_group(U, "                ", offs, use, stage) %}
            }
{% end %}
#pragma unroll 1
            for (; i < {{ HI }}; i += NJ_BY) {
{% walk_group(1, "                ", offs, use, stage) %}
            }
{% end %}
{# the statistics walk's use of a group's step q: the residual sum's store, then each column's sums #}
{% local function use_stats(ind) %}
{% if F.resout then %}
{% if VW > 1 then %}
{% fwd_resout(ind, "eresout[q]", "v[q]", VW) %}
{% else %}
#pragma unroll
{{ ind }}for (int c = 0; c < NJ_CPL; c++) {
{% fwd_resout(ind .. "    ", "eresout[q]" .. colx("resout"), "v[q][c]") %}
{{ ind }}}
{% end %}
{% end %}
#pragma unroll
{{ ind }}for (int c = 0; c < NJ_CPL; c++) {
{{ ind }}    const nj_shift sh = shc[c];
{% if F.center then %}
{{ ind }}    nj_welford_add(wc[c], (v[q][c] - sh.k) * sh.inv);
{% else %}
{{ ind }}    sc[c] += nj_sq(v[q][c] * sh.inv);
{% end %}
{{ ind }}}
{% end %}
{# the normalizing walk's use of step q: each column's y, stored as one vector where P.vec allows #}
{% local function use_norm(ind) %}
{% if VW > 1 then %}
{{ ind }}float yv[NJ_CPL];
{% end %}
#pragma unroll
{{ ind }}for (int c = 0; c < NJ_CPL; c++) {
{{ ind }}    const nj_shift sh = shc[c];
{{ ind }}    const float md = mdc[c], rstd = rstdc[c];
{{ ind }}    (void)md;
{{ ind }}    float u = {{ fwd_centered("v[q][c]") }} * rstd;
{% local ge, be %}
{% if PREG then %}
{%   ge, be = F.scale and "gcol[c]", F.bias and "bcol[c]" %}
{% elseif PTAB then %}
{%   ge, be = F.scale and ptab_at(F.scale, false, "ep[q]"), F.bias and ptab_at(F.scale, true, "ep[q]") %}
{% elseif has_param then %}
{{ ind }}    const nj_i64 opi = op + ep[q]{{ colx("param") }};
{%   ge, be = F.scale and "nj_load_f32(GAMMA, opi)", F.bias and "nj_load_f32(BETA, opi)" %}
{% end %}
{% if VW > 1 then %}
{% fwd_epilogue(ind .. "    ", ge, be, {to = "yv[c]"}) %}
{% else %}
{% fwd_epilogue(ind .. "    ", ge, be, {y = "ey[q]" .. colx("y")}) %}
{% end %}
{{ ind }}}
{% if VW > 1 then %}
{{ ind }}{{ fwd_out("ey[q]", "yv", VW) }}
{% end %}
{% end %}
{# mode: "full" (statistics and normalization), "part" (a piece's partials per column) or "norm" (a piece
   normalized with its tile's statistics) #}
{% local function col_kernel(name, mode) %}
{% if PIPE then %}
/* block wi_'s piece (the pipelined kernel's order): its partials, or its normalization */
NJ_DEVICE void {{ name }}_body(const nj_kargs &A, {{ F.center and "nj_welford" or "float" }} *nj_part, float *nj_first, float *nj_red, nj_i64 wi_)
{
    (void)nj_part;
    (void)nj_first;
    (void)nj_red;
{% else %}
NJ_KERNEL({{ name }}, {{ B }})
{
    nj_grid_enter();
{% if mode == "norm" then %}
{% elseif F.center then %}
    NJ_SHARED(nj_welford, nj_part, {{ B * CPL }}); /* [warp][column][lane] */
{% else %}
    NJ_SHARED(float, nj_part, {{ B * CPL }});
{% end %}
{% if mode == "full" then %}
    NJ_SHARED(float, nj_stat, {{ 2 * TC }}); /* md[column][lane], rstd[column][lane] of the tile's columns */
{% end %}
{% if mode ~= "norm" then %}
    NJ_SHARED(float, nj_first, {{ TC }}); /* warp 0's columns' first elements, [column][lane] */
{% end %}
{% end %}
{% if STAGE then %}
    typedef {{ F.residual and "float" or "nj_tx" }} nj_tstage;
    NJ_DYN_SHARED(nj_tstage, nj_stage); /* the tile's values, [walk index][column] (STAGE above) */
{% end %}
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int lx = tx % NJ_LPR, sr = tx / NJ_LPR; /* lane of the sub-row, sub-row of the warp */
{% if not PIPE then %}
    const nj_i64 ntask = A.rows * {{ NTASK }}LL;
{% end %}
{% fwd_pointers() %}
{% if PTAB and mode ~= "part" then %}
{% param_table(F.scale, F.bias) %}
{% end %}
{% if SPLIT > 1 then %}
{% if PIPE then %}
    {
        const nj_i64 wi = wi_;
{% else %}
    {{ block_item("wi", "ntask * NJ_SPLIT", nil, nil, mode ~= "part" and P.reverse == 1) }}
{% end %}
        const nj_i64 task = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
        const nj_i64 lo = piece * NJ_PIECE, hi = lo + NJ_PIECE < NJ_N ? lo + NJ_PIECE : NJ_N;
{% else %}
    {{ block_item("task", "ntask") }}
{% end %}
        const nj_i64 o = task / NJ_NT;
        const nj_i64 kb = (task % NJ_NT) * NJ_TC + lx * NJ_CPL; /* the lane's first column */
        const nj_i64 k{{ cax }} = kb;
        const bool col_ok = kb < NJ_EC; /* all of the lane's columns, or none (NJ_CPL divides NJ_EC) */
        {{ split_index("o", outer, "k") }}
{% fwd_offsets(kept, "k") %}
        /* each column's shift, its first element (a lane past the tile's end shifts by 0) */
{% first_cols() %}
        nj_shift shc[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) shc[c] = {{ shift_of("fc[c]") }};
{% if mode ~= "norm" then %}
        if (ty == 0 && sr == 0) { /* for warp 0's rolled merge below (its own writes: no barrier) */
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) nj_first[c * NJ_LPR + tx] = fc[c];
        }
{% end %}
        float mdc[NJ_CPL], rstdc[NJ_CPL];
{% if mode == "norm" then %}
        /* the tile's merged moments of the scaled values (lib_merge.cu) */
        const float *ST = (const float *)A.workspace{{ ws_plus("means") }} + task * {{ 2 * TC }};
{% if PIPE then %}
        /* ... once the block of the tile's last piece has stored them (another SM's block: from L2) */
        if (threadIdx.x == 0) nj_pipe_wait((const int *)((const float *)A.workspace{{ ws_plus("flags") }}) + task, NJ_SPLIT + 1);
        __syncthreads();
        float stm[NJ_CPL], stv[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c += 4) {
            nj_load_cg4(ST + lx * NJ_CPL + c, &stm[c]);
            nj_load_cg4(ST + NJ_TC + lx * NJ_CPL + c, &stv[c]);
        }
{% else %}
{% local MV = P.ws.means.fixed % CPL == 0 and P.ws.means.per_row % CPL == 0 and CPL or 1 %}
        /* the lane's columns' pairs, a vector each where the region keeps them aligned (a scalar load a
           column, 2 * NJ_CPL floats apart, used half of each sector) */
        float stm[NJ_CPL], stv[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c += {{ MV }}) {
            nj_load_vec<{{ MV }}>(ST, lx * NJ_CPL + c, &stm[c]);
            nj_load_vec<{{ MV }}>(ST + NJ_TC, lx * NJ_CPL + c, &stv[c]);
        }
{% end %}
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            const nj_shift sh = shc[c];
            const nj_i64 k{{ cax }} = kb + c;
            (void)k{{ cax }};
{% fwd_finish("stm[c]", "stv[c]") %}
            mdc[c] = md;
            rstdc[c] = rstd;
{% fwd_save_stats("col_ok && piece == 0 && ty == 0 && sr == 0", kept) %}
        }
{% else %}
{% if F.center then %}
        nj_welford wc[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) wc[c] = nj_welford_init();
{% else %}
        float sc[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) sc[c] = 0.0f;
{% end %}
        if (col_ok) {
{% walk(F.resout and {"resout"} or {}, use_stats, STAGE and "fill" or nil) %}
        }
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) nj_part[(ty * NJ_CPL + c) * 32 + tx] = {{ F.center and "wc[c]" or "sc[c]" }};
        __syncthreads();
        /* warp 0 (its first sub-row) merges a column at a time (a rolled loop: the column's first element
           comes from shared memory, where an unrolled one would cost NVRTC time for nothing) */
        if (ty == 0 && sr == 0) {
#pragma unroll 1
            for (int c = 0; c < NJ_CPL; c++) {
{% if F.center then %}
                /* count and sum give the mean, then the deviations the m2 (nj_block_welford's identity):
                   cheaper to compile than NJ_BY - 1 unrolled pairwise merges */
                float n = 0.0f, sum = 0.0f, m2 = 0.0f;
#pragma unroll 1
                for (int k = 0; k < NJ_NW; k++) {
#pragma unroll
                    for (int r = 0; r < NJ_RW; r++) {
                        const nj_welford p = nj_part[(k * NJ_CPL + c) * 32 + r * NJ_LPR + tx];
                        n += p.n;
                        sum += p.n * p.mean;
                    }
                }
                const float mean_s = nj_welford_from_sums(n, sum).mean;
#pragma unroll 1
                for (int k = 0; k < NJ_NW; k++) {
#pragma unroll
                    for (int r = 0; r < NJ_RW; r++) m2 += nj_welford_dev(nj_part[(k * NJ_CPL + c) * 32 + r * NJ_LPR + tx], mean_s);
                }
{% else %}
                float s = 0.0f;
#pragma unroll 1
                for (int k = 0; k < NJ_NW; k++) {
#pragma unroll
                    for (int r = 0; r < NJ_RW; r++) s += nj_part[(k * NJ_CPL + c) * 32 + r * NJ_LPR + tx];
                }
{% end %}
{% if mode == "part" then %}
                float *WS = (float *)A.workspace{{ ws_plus("parts") }} + wi * {{ 2 * TC }};
                WS[tx * NJ_CPL + c] = {{ F.center and "sum" or "s" }};
                WS[NJ_TC + tx * NJ_CPL + c] = {{ F.center and "m2" or "0.0f" }};
            }
        }
{% if PIPE then %}
        /* warp 0 stored the piece's partials: a barrier before thread 0 publishes them (cl_lib.cuh:
           cl_pipe_merge); the block whose add completes the tile's count merges its pieces and adds one
           more for the normalizing blocks */
        int *const FLAG = (int *)((float *)A.workspace{{ ws_plus("flags") }}) + task;
        __syncthreads();
        if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FLAG) == NJ_SPLIT - 1)) {
            nj_fence_gpu();
            nj_col_merge((const float *)A.workspace{{ ws_plus("parts") }} + task * (NJ_SPLIT * 2 * NJ_TC),
                         (float *)A.workspace{{ ws_plus("means") }} + task * (2 * NJ_TC), nj_red);
            if (threadIdx.x == 0) nj_pipe_arrive(FLAG);
        }
{% end %}
    }
}
{% do return end %}
{% end %}
{% if F.center then %}
                const float var_s = m2 * (1.0f / (float)NJ_N);
{% else %}
                const float mean_s = 0.0f, var_s = s * (1.0f / (float)NJ_N);
{% end %}
                const nj_i64 k{{ cax }} = kb + c;
                (void)k{{ cax }};
                const nj_shift sh = {{ shift_of("nj_first[c * NJ_LPR + tx]") }};
{% fwd_finish("mean_s", "var_s") %}
                nj_stat[c * NJ_LPR + tx] = md;
                nj_stat[NJ_TC + c * NJ_LPR + tx] = rstd;
{% fwd_save_stats("col_ok", kept) %}
            }
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            mdc[c] = nj_stat[c * NJ_LPR + lx];
            rstdc[c] = nj_stat[NJ_TC + c * NJ_LPR + lx];
        }
{% end %}
{% if PREG then %}
        /* the lane's columns' gamma and beta (PREG above) */
        float gcol[NJ_CPL], bcol[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) gcol[c] = bcol[c] = 0.0f;
{% if VW > 1 and P.axes[cax].stride.param == 1 then %}
        /* one vector each, as x (the plan checks their alignment: a scalar a column, CPL apart, read
           a quarter of each sector with 4 columns a lane) */
        if (col_ok) {
{% if F.scale then %}
            {{ load_cols("GAMMA", "param", "op", "gcol") }}
{% end %}
{% if F.bias then %}
            {{ load_cols("BETA", "param", "op", "bcol") }}
{% end %}
        }
{% else %}
        if (col_ok) {
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) {
{% if F.scale then %}
                gcol[c] = nj_load_f32(GAMMA, op{{ colx("param") }});
{% end %}
{% if F.bias then %}
                bcol[c] = nj_load_f32(BETA, op{{ colx("param") }});
{% end %}
            }
        }
{% end %}
        (void)gcol;
        (void)bcol;
{% end %}
        if (col_ok) {
{% local offs = {"y"} %}
{% if has_param and not PREG then offs[#offs + 1] = "p" end %}
{% walk(offs, use_norm, STAGE and "read" or nil) %}
        }
    }
}
{% end %}
{% if PIPE then %}
/* A tile's pieces combined a column at a time into what the library's merge would store (lib_merge.cu:
   the moments of the scaled shifted values, O[c] and O[NJ_TC + c]): the pieces' sums first, in piece
   order, into each column's mean (O[c]), then m2 = sum(m2_q + n_q * (mean_q - mean)^2) the same way
   (nothing cancels; the library merge's formula), thread t the 4 columns of quad t % NQ over the pieces
   t / NQ, t / NQ + NPL, ... (16-byte L2 loads, 2 pieces' in flight). W: the tile's pieces' pairs,
   stored by other SMs' blocks in this launch. Ends with a barrier: the caller publishes O. Plain adds
   and constant piece lengths keep it cheap to compile (Chan's combination a piece and a column,
   unrolled, cost NVRTC ~40 ms). */
NJ_DEVICE void nj_col_merge(const float *W, float *O, float *red)
{
    nj_col_sum_rows<NJ_TC>(W, NJ_SPLIT, 2 * NJ_TC, O, 1.0f / (float)NJ_N, red);
{% if F.center then %}
    constexpr int NQ = NJ_TC / 4, NPL = {{ B }} / NQ;
    const int j = threadIdx.x % NQ, pl = threadIdx.x / NQ;
    float mean[4], m2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 4; k++) mean[k] = O[4 * j + k]; /* this block's stores, before the barrier */
    /* every piece counts NJ_PIECE walk rows but the last, which holds the rest */
    const float nf = (float)NJ_PIECE, nl = (float)(NJ_N - (NJ_SPLIT - 1) * NJ_PIECE);
#pragma unroll 1
    for (int q0 = pl; q0 < NJ_SPLIT; q0 += 2 * NPL) {
        float v[2][4], w[2][4];
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (q0 + u * NPL < NJ_SPLIT) {
                nj_load_cg4(W + (q0 + u * NPL) * (2 * NJ_TC) + 4 * j, v[u]);
                nj_load_cg4(W + (q0 + u * NPL) * (2 * NJ_TC) + NJ_TC + 4 * j, w[u]);
            }
#pragma unroll
        for (int u = 0; u < 2; u++)
            if (q0 + u * NPL < NJ_SPLIT) {
                const float nq = q0 + u * NPL == NJ_SPLIT - 1 ? nl : nf;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float d = __fdividef(v[u][k], nq) - mean[k];
                    m2[k] += w[u][k] + nq * d * d;
                }
            }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) red[pl * NJ_TC + 4 * j + k] = m2[k];
    __syncthreads();
#pragma unroll 1
    for (int c = threadIdx.x; c < NJ_TC; c += {{ B }}) {
        float s = 0.0f;
#pragma unroll 1
        for (int v = 0; v < NPL; v++) s += red[v * NJ_TC + c];
        O[NJ_TC + c] = s * (1.0f / (float)NJ_N);
    }
{% else %}
    /* the pieces' sums of squares (their m2 slots hold 0): O[c] holds the mean of the squares */
#pragma unroll 1
    for (int c = threadIdx.x; c < NJ_TC; c += {{ B }}) {
        O[NJ_TC + c] = O[c];
        O[c] = 0.0f;
    }
{% end %}
    __syncthreads();
}

{% col_kernel(P.role.main.kernel .. "_part", "part") %}

{% col_kernel(P.role.main.kernel .. "_norm", "norm") %}

{{ pipe_zero_kernel("A.rows * " .. NTASK .. "LL", "(float *)A.workspace" .. ws_plus("flags") .. " + i") }}

/* Pieces' partials and pieces' normalization in pipe_item's order (lib_index.cuh) */
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED({{ F.center and "nj_welford" or "float" }}, nj_part, {{ B * CPL }}); /* [warp][column][lane] */
    NJ_SHARED(float, nj_first, {{ TC }});
    NJ_SHARED(float, nj_red, {{ 4 * B }}); /* the merge's sums: [piece lane][column] */
    {{ pipe_item("A.rows * " .. NTASK .. "LL * NJ_SPLIT", "wi", "norm") }}
    if (norm)
        {{ P.role.main.kernel }}_norm_body(A, nj_part, nj_first, nj_red, wi);
    else
        {{ P.role.main.kernel }}_part_body(A, nj_part, nj_first, nj_red, wi);
}
{% elseif SPLIT > 1 then %}
{% col_kernel(P.role.part.kernel, "part") %}

{% col_kernel(P.role.main.kernel, "norm") %}
{% else %}
{% col_kernel(P.role.main.kernel, "full") %}
{% end %}
