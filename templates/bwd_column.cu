{# Backward, COLUMN kind (the innermost axis is kept with stride 1 in x: channels-last InstanceNorm and
   BatchNorm, LayerNorm over C of NCHW). Launch 1 (nj_bwd_column): a block per tile of P.tile neighbouring
   statistics (columns) of one outer kept index; lane tx owns the CPL = P.tile / 32 columns from
   tile * P.tile + tx * CPL on, loaded as one vector of P.vec = CPL elements of x, dy and dx (the unaligned
   variant: P.vec = 1, a column at a time), and warp ty walks the reduction at ty, ty + BY, ... so every
   warp reads P.tile neighbouring elements (coalesced). Each walk issues P.unroll independent loads of x
   and dy a thread before it uses them (sums still added per column in walk order). The BY warp sums of g
   and g*xhat meet in shared memory and warp 0 adds them in warp order (deterministic); a second walk
   writes dx. dgamma/dbeta: when the columns are the only feature axis (FUSED: the plan's P.pgrad is
   "fused", its column sum the library's, lib_colsum.cu), the first walk also sums dz*xhat and dz, warp 0
   writes the tile's partial for its outer index o (workspace: [2][rows * KO][EC]) and the column sum adds
   the partials of each column in order; else bwd_pgrad_col.cuh or bwd_pgrad.cuh, as P.pgrad says ("tiles",
   "walk"). Long walks (P.split > 1, as in fwd_column.cu) take three launches before the dgamma/dbeta
   ones: nj_bwd_column_part sums a piece's g and g*xhat per column (and with FUSED its dz*xhat and dz, a
   partial row per (outer index, piece)), the library's merge (lib_merge.cu) adds a tile's pieces in order
   into the two means, nj_bwd_column writes a piece's dx. Workspace, after the dgamma/dbeta launches' fixed
   region: with FUSED [2][rows * KO * NJ_SPLIT][EC] partial rows, then [tile][piece][Q] sums, then
   [tile][Q] means, tiles over the whole batch (the planner gives the merge the same layout; Q below). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{% include("col_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
local cax = P.rank
if P.axes[cax].reduce or P.axes[cax].stride.x ~= 1 then error("bwd_column needs a kept innermost axis of stride 1") end
if #red == 0 then error("bwd_column: no reduced axis") end
local EC = P.axes[cax].extent
local outer = {}
for _, a in ipairs(kept) do if a ~= cax then outer[#outer + 1] = a end end
local F = P.flags
local B = P.block
local BY = B // 32
local TC = P.tile
local CPL = TC // 32
local VW = P.vec
if TC % 32 ~= 0 or (VW ~= CPL and VW ~= 1) or EC % CPL ~= 0 then error("bwd_column: tile " .. TC .. ", vec " .. VW) end
local U = P.unroll
local NT = ceil_div(EC, TC)
-- the tile's x and dy kept in dynamic shared memory by the sums walk, [walk index][column of the tile]
-- each (x first, then dy), for the dx walk (as fwd_column.cu's STAGE)
local STAGE = P.stage == 1
if STAGE and P.split > 1 then error("bwd_column: a staged tile needs a whole walk") end
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
local SPLIT = P.split
local FUSED = P.pgrad == "fused"
-- PIPE (P.lag > 0; planner_column.c: col_bwd_pipe): one launch whose blocks alternate a piece's sums (the
-- part kernel's) and, P.lag pieces behind, a piece's dx; the pieces' sums merge in two levels: the block
-- that completes a group of GRP pieces adds the group's (nj_col_sum_rows), the one that completes the
-- tile's NG groups adds theirs into the means, and the dx blocks wait for that
local PIPE = P.lag > 0
local GRP = P.pipe_group
if PIPE and (SPLIT < 2 or GRP < 1 or not (FUSED or P.pgrad == "none")) then
  error("bwd_column: a pipe needs split walks, merge groups and fused or no dgamma/dbeta") end
local NG = PIPE and ceil_div(SPLIT, GRP) or 0
-- dgamma/dbeta of the walk's rows (P.pgrad "rows": gamma's index is the walk index): the dx walk sums
-- each row's dz*xhat and dz over the warp's lanes and lane 0 writes the tile's pair, [task][row][2] in
-- the pgrad region; the whole warp takes part, so a lane past the tile's end walks a valid column of
-- its own (column 0) with its contributions and stores masked
local ROWS = P.pgrad == "rows"
if ROWS and SPLIT > 1 then error("bwd_column: fused row sums need a whole walk") end
local KO = P.kept_inner // EC -- outer indices per batch row
local NTASK = KO * NT -- tiles per batch row
local LO = SPLIT > 1 and "(" .. IT .. ")lo + ty" or "ty"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
-- split walks, centered: a piece also sums (x - mean) * rstd for the saved mean's correction (bwd_lib.cuh),
-- so a (tile, piece) holds Q floats, [a: sum g | sum xhat][b: sum g * xhat | unused] (TC columns each),
-- and the merge takes IPT items a tile (planner_column.c); a column's place in its tile is tx * CPL + c
local IPT = F.center and 2 * TC or TC
local Q = 2 * IPT
if PIPE and B % (Q // 4) ~= 0 then error("bwd_column: a piece's sums in whole 16-byte quads a block") end
-- the dx kernel's read of its tile's means: another SM's block stored them in a pipelined launch (L2)
local function MLD(i) return PIPE and ("nj_load_cg(M + " .. i .. ")") or ("M[" .. i .. "]") end
-- the workspace regions (the planner's P.ws): with FUSED the partial rows (pgrad: [2][PROWS][EC]), and
-- for split walks the pieces' sums (parts) and the tiles' means (means)
local PROWS = "A.rows * " .. (KO * SPLIT) .. "LL" -- fused partial rows
-- gamma (and beta, which only an activation reads) vary down the walk only (LayerNorm over the C of
-- NCHW): a table of the walk's values in shared memory, filled once a block, as fwd_column.cu's PTAB
local PG, PB = F.scale, F.bias and P.act ~= "none"
local PTAB = (PG or PB) and P.reduce_size <= 2048
for _, a in ipairs(kept) do if P.axes[a].stride.param ~= 0 then PTAB = false end end
local PARAM = PTAB and {g = PG and ptab_at(PG, false, "ep[q]") or nil, b = PB and ptab_at(PG, true, "ep[q]") or nil}
-- gamma/beta constant down the walk (channels-last InstanceNorm, BatchNorm NHWC): a lane's columns'
-- values in registers, loaded once (as fwd_column.cu's PREG)
local PREG = PG or PB
for _, a in ipairs(red) do if P.axes[a].stride.param ~= 0 then PREG = false end end
if PREG then PARAM = {g = PG and "gcol[c]" or nil, b = PB and "bcol[c]" or nil} end
local POFF = (F.scale or F.bias) and not PREG -- the walks index gamma/beta (offs "p")
-- column c's offset from a lane's first column in operand opd
local function colx(opd)
  if CPL == 1 then return "" end
  local st = P.axes[cax].stride[opd]
  if st == 0 then return "" end
  return " + c" .. (st == 1 and "" or (" * " .. st))
end
-- a lane's CPL columns of operand opd (pointer ptr) at base offset off into float array dst
local function load_cols(ptr, opd, off, dst)
  if VW > 1 then return string.format("nj_load_vec<%d>(%s, %s, %s);", VW, ptr, off, dst) end
  if CPL == 1 then return string.format("%s[0] = nj_load_f32(%s, %s);", dst, ptr, off) end
  return string.format("for (int c = 0; c < NJ_CPL; c++) %s[c] = nj_load_f32(%s, %s%s);", dst, ptr, off, colx(opd))
end
-- The block's BY warp values of each of vars (arrays of the lane's CPL columns) meet in nj_part
-- ([var][warp][column][lane]) and warp 0 adds them in warp order into its own; leaves warp 0's block
-- open (the caller writes the totals and closes it).
local function combine(vars)
  local t = {"#pragma unroll", "        for (int c = 0; c < NJ_CPL; c++) {"}
  for q, v in ipairs(vars) do
    t[#t + 1] = string.format("            nj_part[%d + (ty * NJ_CPL + c) * 32 + tx] = %s[c];", (q - 1) * B * CPL, v)
  end
  t[#t + 1] = "        }\n        __syncthreads();\n        if (ty == 0) {\n#pragma unroll\n            for (int c = 0; c < NJ_CPL; c++) {\n#pragma unroll 1\n                for (int k = 1; k < NJ_BY; k++) {"
  for q, v in ipairs(vars) do
    t[#t + 1] = string.format("                    %s[c] += nj_part[%d + (k * NJ_CPL + c) * 32 + tx];", v, (q - 1) * B * CPL)
  end
  t[#t + 1] = "                }\n            }"
  return table.concat(t, "\n")
end
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL
#define NJ_NT {{ NT }}LL
#define NJ_BY {{ BY }}
#define NJ_CPL {{ CPL }}
#define NJ_TC {{ TC }}
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
{% end %}

{# A walk down the lane's columns over [LO, HI) with step NJ_BY, n walk steps a group: the group's
   offsets and loads of x and dy first (xv[q][c], dv[q][c]), then use(q) on each in walk order. #}
{# stage: nil, "fill" (the loads also go to the staged tile, after the group's loads are issued) or
   "read" (the values come from the staged tile; a lane past the tile's end, which a ROWS walk keeps,
   reads zeros) #}
{% local function walk_group(n, ind, offs, use, stage) %}
{{ ind }}float xv[{{ n }}][NJ_CPL], dv[{{ n }}][NJ_CPL];
{% for _, e in ipairs(offs) do %}
{{ ind }}nj_i64 e{{ e }}[{{ n }}];
{% end %}
#pragma unroll
{{ ind }}for (int q = 0; q < {{ n }}; q++) {
{{ ind }}    const {{ IT }} iq = i + ({{ IT }})q * NJ_BY;
{{ ind }}    {{ split_index("iq", red, "r", IT) }}
{% for _, e in ipairs(offs) do %}
{{ ind }}    e{{ e }}[q] = {{ e == "w" and "iq" or e == "p" and (PTAB and "iq" or offset("param", red, "r")) or offset(e, red, "r") }};
{% end %}
{% if stage == "read" then %}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++) {
{{ ind }}        const unsigned si = (unsigned)iq * NJ_TC + tx * NJ_CPL + c;
{{ ind }}        xv[q][c] = {{ ROWS and "col_ok ? " or "" }}nj_to_f32(nj_sx[si]){{ ROWS and " : 0.0f" or "" }};
{{ ind }}        dv[q][c] = {{ ROWS and "col_ok ? " or "" }}nj_to_f32(nj_sdy[si]){{ ROWS and " : 0.0f" or "" }};
{{ ind }}    }
{% else %}
{{ ind }}    {{ load_cols("X", "x", "ox + " .. offset("x", red, "r"), "xv[q]") }}
{{ ind }}    {{ load_cols("DY", "dy", "ody + " .. offset("dy", red, "r"), "dv[q]") }}
{% end %}
{{ ind }}}
#pragma unroll
{{ ind }}for (int q = 0; q < {{ n }}; q++) {
{% if stage == "fill" then %}
#pragma unroll
{{ ind }}    for (int c = 0; c < NJ_CPL; c++) {
{{ ind }}        const unsigned si = (unsigned)(i + ({{ IT }})q * NJ_BY) * NJ_TC + tx * NJ_CPL + c;
{{ ind }}        nj_sx[si] = nj_from_f32<nj_tx>(xv[q][c]);
{{ ind }}        nj_sdy[si] = nj_from_f32<nj_tdy>(dv[q][c]);
{{ ind }}    }
{% end %}
{% use(ind .. "    ") %}
{{ ind }}}
{% end %}
{% local function walk(offs, use, stage) %}
            {{ IT }} i = {{ LO }};
{# a walk over the staged tile reads shared memory: no loads to keep in flight, so no unrolled groups
   (their code cost NVRTC 10-45 ms a kernel) #}
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
{# the per-column scope of a use: the column's mean, rstd (and dl) under the names bwd_element reads #}
{% local function col_scope(ind) %}
{{ ind }}    const float mean = meanc[c], rstd = rstdc[c];
{{ ind }}    (void)mean;
{% if BWD_DL and F.center then %}
{{ ind }}    const float dl = dlc[c];
{% end %}
{% end %}
{# mode: "full" (sums and dx), "part" (a piece's sums per column) or "dx" (a piece's dx with its tile's
   means, which the library's merge added from the pieces') #}
{% local function col_kernel(name, mode) %}
{% local S3 = mode == "part" and F.center %}
{# With an activation, dz depends on xhat itself, so a piece corrects its xhat exactly too: the dx launch's
   first-order correction is not enough past |mean| / std ~ 1e3. Where a column needs it (NJ_FIX_RATIO),
   the piece walks the whole column first (its x read once per piece: a rare regime's cost, none for
   ordinary data) and adds dl back into its sums, so that the merge and the dx launch read what they read
   without it. #}
{% local PRE = F.center and (mode == "full" or (mode == "part" and P.act ~= "none")) %}
{% local XU = (mode == "part" and PRE) and "(xh + dl)" or "xh" %}
{% BWD_DL = (mode ~= "part" or PRE) and "dl" or nil %}
{% if PIPE then %}
/* block wi_'s piece (the pipelined kernel's order): its sums, or its dx */
NJ_DEVICE void {{ name }}_body(const nj_kargs &A, float *nj_part, float *nj_m, float *nj_red, nj_i64 wi_)
{
    (void)nj_part;
    (void)nj_m;
    (void)nj_red;
{% else %}
NJ_KERNEL({{ name }}, {{ B }})
{
    nj_grid_enter();
{% if mode ~= "dx" then %}
    NJ_SHARED(float, nj_part, {{ ((FUSED and 4 or 2) + (S3 and 1 or 0)) * B * CPL }});
{% end %}
{% if ROWS then %}
    NJ_SHARED(float, nj_rows, 2 * NJ_N); /* the tile's (dz*xhat, dz) a walk row */
{% end %}
{% if STAGE then %}
    /* the tile's x, then its dy, [walk index][column] each (STAGE above) */
    NJ_DYN_SHARED(nj_tx, nj_sx);
    nj_tdy *nj_sdy = reinterpret_cast<nj_tdy *>(nj_sx + NJ_N * NJ_TC);
{% end %}
{% if mode == "full" or PRE then %}
    NJ_SHARED(float, nj_m, {{ 2 * TC }}); /* the tile's means of g and g*xhat ([column][lane]); first, its columns' dl */
{% end %}
{% end %}
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
{% if not PIPE then %}
    const nj_i64 ntask = A.rows * {{ NTASK }}LL;
{% end %}
{{ bwd_pointers() }}
{% if PTAB then %}
{% param_table(PG, PB) %}
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
        const nj_i64 kb = (task % NJ_NT) * NJ_TC + tx * NJ_CPL; /* the lane's first column */
        const bool col_ok = kb < {{ EC }}; /* all of the lane's columns, or none (NJ_CPL divides EC) */
        const nj_i64 k{{ cax }} = {{ ROWS and "col_ok ? kb : 0" or "kb" }};
        {{ split_index("o", outer, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
{% if mode ~= "part" then %}
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% end %}
{% if F.scale or F.bias then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os0 = {{ offset("stats", kept, "k") }};
{% if PREG then %}
        /* the lane's columns' gamma and beta (PREG above) */
        float gcol[NJ_CPL], bcol[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            gcol[c] = {{ PG and ("col_ok ? nj_load_f32(GAMMA, op" .. colx("param") .. ") : 0.0f") or "0.0f" }};
            bcol[c] = {{ PB and ("col_ok ? nj_load_f32(BETA, op" .. colx("param") .. ") : 0.0f") or "0.0f" }};
        }
        (void)gcol;
        (void)bcol;
{% end %}
        float meanc[NJ_CPL], rstdc[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            const nj_i64 os = os0{{ colx("stats") }};
            meanc[c] = col_ok ? {{ F.center and "A.mean[os]" or "0.0f" }} : 0.0f;
            rstdc[c] = col_ok ? A.rstd[os] : 0.0f;
            (void)os;
        }
{% if mode == "dx" then %}
        const float *M = (const float *)A.workspace{{ ws_plus("means") }} + task * {{ Q }};
{% if PIPE then %}
        /* ... once the block that completes the tile's groups has added them */
        if (threadIdx.x == 0)
            nj_pipe_wait((const int *)((const float *)A.workspace{{ ws_plus("flags") }}) + task * {{ NG + 1 }} + {{ NG }}, {{ NG + 1 }});
        __syncthreads();
{% end %}
        float m1c[NJ_CPL], m2c[NJ_CPL]{{ F.center and ", dlc[NJ_CPL]" or "" }};
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            const int pc = tx * NJ_CPL + c; /* the column's place in its tile */
{% if F.center then %}
            /* the pieces' mean of (x - mean) * rstd corrects xhat, and the mean of g * xhat by dl * mean(g)
               (exact without an activation, to first order in dl with one) */
            const float m1 = {{ MLD("pc") }}, dl = {{ MLD("NJ_TC + pc") }};
            const float m2 = {{ MLD(IPT .. " + pc") }} - dl * m1;
            m1c[c] = m1;
            m2c[c] = m2;
            dlc[c] = dl;
            const float mean = meanc[c], rstd = rstdc[c];
            if (ty == 0 && col_ok && fabsf(mean) * rstd > NJ_FIX_RATIO) {
                const nj_i64 k{{ cax }} = kb + c;
                const nj_i64 os = os0{{ colx("stats") }};
                (void)k{{ cax }};
                (void)os;
{% if FUSED then %}
                /* this piece's partial row of dgamma: sum dz * (xhat - dl) (its dbeta row holds sum dz) */
                float *PR = (float *)A.workspace{{ ws_plus("pgrad") }};
{% if PIPE then %}
                /* stored by the piece's sums block (another SM's) in this launch: from L2 */
                const nj_i64 ia = (o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}, ib = ({{ PROWS }} + o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }};
                PR[ia] = nj_load_cg(PR + ia) - dl * nj_load_cg(PR + ib);
{% else %}
                PR[(o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}] -= dl * PR[({{ PROWS }} + o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}];
{% end %}
{% end %}
{% if bwd_dl_store() then %}
                if (piece == 0) {{ bwd_dl_base() }}[os] = dl; /* for the dgamma walks */
{% end %}
            }
{% else %}
            m1c[c] = 0.0f;
            m2c[c] = {{ MLD(IPT .. " + pc") }};
{% end %}
        }
{% else %}
{% if PRE then %}
        /* each column's correction where it needs one (over the whole column); the tile's warps add
           theirs in order */
        float dlc[NJ_CPL];
        bool fix = false;
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            dlc[c] = 0.0f;
            fix = fix || (col_ok && fabsf(meanc[c]) * rstdc[c] > NJ_FIX_RATIO);
        }
        if (fix) {
#pragma unroll 1
            for ({{ IT }} i = ty; i < ({{ IT }})NJ_N; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
#pragma unroll
                for (int c = 0; c < NJ_CPL; c++)
                    if (fabsf(meanc[c]) * rstdc[c] > NJ_FIX_RATIO)
                        dlc[c] += (nj_to_f32(X[ox + {{ offset("x", red, "r") }}{{ colx("x") }}]) - meanc[c]) * rstdc[c];
            }
        }
{{ combine({"dlc"}) }}
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) {
                nj_m[c * 32 + tx] = dlc[c] * (1.0f / (float)NJ_N); /* rewritten only after the combine's barrier below */
{% if mode == "full" and bwd_dl_store() then %}
                const nj_i64 os = os0{{ colx("stats") }};
                if (col_ok && fabsf(meanc[c]) * rstdc[c] > NJ_FIX_RATIO) {{ bwd_dl_base() }}[os] = nj_m[c * 32 + tx];
{% end %}
            }
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) dlc[c] = nj_m[c * 32 + tx];
{% end %}
        float s1c[NJ_CPL], s2c[NJ_CPL];
{% if S3 then %}
        float s3c[NJ_CPL]; /* sums of (x - mean) * rstd: the saved mean's correction */
{% end %}
{% if FUSED then %}
        float p1c[NJ_CPL], p2c[NJ_CPL]; /* dgamma, dbeta terms down each column */
{% end %}
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            s1c[c] = 0.0f;
            s2c[c] = 0.0f;
{% if S3 then %}
            s3c[c] = 0.0f;
{% end %}
{% if FUSED then %}
            p1c[c] = 0.0f;
            p2c[c] = 0.0f;
{% end %}
        }
        if (col_ok) {
{% local offs = {} %}
{% if POFF then offs[#offs + 1] = "p" end %}
{% walk(offs, function(ind) %}
#pragma unroll
{{ ind }}for (int c = 0; c < NJ_CPL; c++) {
{% col_scope(ind) %}
{{ bwd_element("xv[q][c]", "dv[q][c]", PARAM or ("op + ep[q]" .. colx("param")), ind .. "    ") }}
{{ ind }}    s1c[c] += g;
{{ ind }}    s2c[c] += g * {{ XU }};
{% if S3 then %}
{{ ind }}    s3c[c] += {{ XU }};
{% end %}
{% if FUSED then %}
{{ ind }}    p1c[c] += dz * {{ XU }};
{{ ind }}    p2c[c] += dz;
{% end %}
{{ ind }}}
{% end, STAGE and "fill" or nil) %}
        }
{% local cv = FUSED and {"s1c", "s2c", "p1c", "p2c"} or {"s1c", "s2c"} %}
{% if S3 then cv[#cv + 1] = "s3c" end %}
{{ combine(cv) }}
{% if mode == "part" then %}
            float *WS = (float *)A.workspace{{ ws_plus("parts") }} + wi * {{ Q }};
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) {
                const int pc = tx * NJ_CPL + c;
                WS[pc] = s1c[c];
                WS[{{ IPT }} + pc] = s2c[c];
{% if S3 then %}
                WS[NJ_TC + pc] = s3c[c];
                WS[{{ IPT }} + NJ_TC + pc] = 0.0f; /* merged, unused */
{% end %}
{% if FUSED then %}
                if (col_ok) { /* this piece's partial row of outer index o */
                    float *PR = (float *)A.workspace{{ ws_plus("pgrad") }};
                    PR[(o * NJ_SPLIT + piece) * {{ EC }} + kb + c] = p1c[c];
                    PR[({{ PROWS }} + o * NJ_SPLIT + piece) * {{ EC }} + kb + c] = p2c[c];
                }
{% end %}
            }
        }
{% if PIPE then %}
        /* warp 0 stored the piece's sums (and partial rows): a barrier before thread 0 publishes them
           (cl_lib.cuh: cl_pipe_merge). The block that completes the piece's group adds the group's sums;
           the one of those that completes the tile's groups adds theirs into the means (scaled) and adds
           one more for the dx blocks. */
        {
            int *const FL = (int *)((float *)A.workspace{{ ws_plus("flags") }}) + task * {{ NG + 1 }};
            float *const MB = (float *)A.workspace{{ ws_plus("means") }};
            float *const GB = MB + A.rows * {{ NTASK * Q }}LL + task * {{ NG * Q }}; /* the tile's group sums */
            const int grp = (int)(piece / {{ GRP }}), gn = min({{ GRP }}, NJ_SPLIT - grp * {{ GRP }});
            __syncthreads();
            if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FL + grp) == gn - 1)) {
                nj_fence_gpu();
                nj_col_sum_rows<{{ Q }}>((const float *)A.workspace{{ ws_plus("parts") }} + (task * NJ_SPLIT + grp * {{ GRP }}) * {{ Q }},
                                         gn, {{ Q }}, GB + grp * {{ Q }}, 1.0f, nj_red);
                if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FL + {{ NG }}) == {{ NG - 1 }})) {
                    nj_fence_gpu();
                    nj_col_sum_rows<{{ Q }}>(GB, {{ NG }}, {{ Q }}, MB + task * {{ Q }}, 1.0f / (float)NJ_N, nj_red);
                    if (threadIdx.x == 0) nj_pipe_arrive(FL + {{ NG }});
                }
            }
        }
{% end %}
    }
}
{% do return end %}
{% end %}
#pragma unroll
            for (int c = 0; c < NJ_CPL; c++) {
                nj_m[c * 32 + tx] = s1c[c] * (1.0f / (float)NJ_N);
                nj_m[NJ_TC + c * 32 + tx] = s2c[c] * (1.0f / (float)NJ_N);
{% if FUSED then %}
                if (col_ok) { /* this tile's partial of outer index o */
                    float *WS = (float *)A.workspace{{ ws_plus("pgrad") }};
                    WS[o * {{ EC }} + kb + c] = p1c[c];
                    WS[(A.rows * {{ KO }}LL + o) * {{ EC }} + kb + c] = p2c[c];
                }
{% end %}
            }
        }
        __syncthreads();
        float m1c[NJ_CPL], m2c[NJ_CPL];
#pragma unroll
        for (int c = 0; c < NJ_CPL; c++) {
            m1c[c] = {{ F.center and "nj_m[c * 32 + tx]" or "0.0f" }};
            m2c[c] = nj_m[NJ_TC + c * 32 + tx];
        }
{% end %}
        if ({{ ROWS and "true" or "col_ok" }}) {
{% local offs = {"dx"} %}
{% if POFF then offs[#offs + 1] = "p" end %}
{% if ROWS then offs[#offs + 1] = "w" end %}
{% local SK = ROWS and "if (col_ok) " or "" %}
{% walk(offs, function(ind) %}
{% if VW > 1 then %}
{{ ind }}float dxv[NJ_CPL];
{% end %}
{% if ROWS then %}
{{ ind }}float r1 = 0.0f, r2 = 0.0f; /* the row's dz*xhat and dz over the lane's columns */
{% end %}
#pragma unroll
{{ ind }}for (int c = 0; c < NJ_CPL; c++) {
{% col_scope(ind) %}
{{ ind }}    const float m1 = m1c[c], m2 = m2c[c];
{{ ind }}    (void)m1;
{{ bwd_element("xv[q][c]", "dv[q][c]", PARAM or ("op + ep[q]" .. colx("param")), ind .. "    ") }}
{% if ROWS then %}
{{ ind }}    r1 += col_ok ? dz * xh : 0.0f;
{{ ind }}    r2 += col_ok ? dz : 0.0f;
{% end %}
{% if VW > 1 then %}
{{ ind }}    dxv[c] = {{ bwd_dx_expr("g", "xh", "m1", "m2") }};
{% else %}
{{ ind }}    {{ SK }}nj_store_f32(DX, odx + edx[q]{{ colx("dx") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
{% end %}
{{ ind }}}
{% if VW > 1 then %}
{{ ind }}{{ SK }}nj_store_vec<{{ VW }}>(DX, odx + edx[q], dxv);
{% end %}
{% if ROWS then %}
{{ ind }}nj_warp_sum2(r1, r2);
{{ ind }}if (tx == 0) {
{{ ind }}    nj_rows[ew[q] * 2] = r1;
{{ ind }}    nj_rows[ew[q] * 2 + 1] = r2;
{{ ind }}}
{% end %}
{% end, STAGE and "read" or nil) %}
        }
{% if ROWS then %}
        /* the tile's pairs, stored as whole lines */
        __syncthreads();
        float *PR = (float *)A.workspace{{ ws_plus("pgrad") }} + task * (2 * NJ_N);
        for (int j = threadIdx.x; j < 2 * (int)NJ_N; j += {{ B }}) PR[j] = nj_rows[j];
        __syncthreads(); /* nj_rows: the next task's writers wait for these readers */
{% end %}
    }
}
{% end %}
{% if PIPE then %}
{% col_kernel(P.role.main.kernel .. "_part", "part") %}

{% col_kernel(P.role.main.kernel .. "_dx", "dx") %}

{{ pipe_zero_kernel("A.rows * " .. (NTASK * (NG + 1)) .. "LL", "(float *)A.workspace" .. ws_plus("flags") .. " + i") }}

/* Pieces' sums and pieces' dx in pipe_item's order (lib_index.cuh) */
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_part, {{ ((FUSED and 4 or 2) + (F.center and 1 or 0)) * B * CPL }});
    NJ_SHARED(float, nj_m, {{ 2 * TC }});
    NJ_SHARED(float, nj_red, {{ 4 * B }}); /* the merges' sums: [row lane][float] */
    {{ pipe_item("A.rows * " .. NTASK .. "LL * NJ_SPLIT", "wi", "dx") }}
    if (dx)
        {{ P.role.main.kernel }}_dx_body(A, nj_part, nj_m, nj_red, wi);
    else
        {{ P.role.main.kernel }}_part_body(A, nj_part, nj_m, nj_red, wi);
}
{% elseif SPLIT > 1 then %}
{% col_kernel(P.role.part.kernel, "part") %}

{% col_kernel(P.role.main.kernel, "dx") %}
{% else %}
{% col_kernel(P.role.main.kernel, "full") %}
{% end %}
{% if P.pgrad == "tiles" then %}
{% include("bwd_pgrad_col.cuh") %}
{% elseif P.pgrad == "walk" then %}
{% include("bwd_pgrad.cuh") %}
{% end %}
