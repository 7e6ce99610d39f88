{# Backward, COLUMN kind (the innermost axis is kept with stride 1 in x: channels-last InstanceNorm and
   BatchNorm, LayerNorm over C of NCHW). Launch 1 (nj_bwd_column): a block per tile of 32 neighbouring
   statistics (columns) of one outer kept index; lane tx owns column tile * 32 + tx and warp ty walks the
   reduction at ty, ty + BY, ... so every warp reads 32 neighbouring elements (coalesced). The BY warp sums
   of g and g*xhat meet in shared memory and warp 0 adds them in warp order (deterministic); a second walk
   writes dx. dgamma/dbeta: when the columns are the only feature axis (FUSED: the plan's P.pgrad is "fused",
   its column sum the library's, lib_colsum.cu), the first walk also sums dz*xhat and dz, warp 0
   writes the tile's partial for its outer index o (workspace: [2][rows * KO][EC]) and the column sum adds
   the partials of each column in order; else bwd_pgrad_col.cuh or bwd_pgrad.cuh, as P.pgrad says ("tiles",
   "walk"). Long walks (P.split > 1, as in fwd_column.cu) take three launches before the dgamma/dbeta
   ones: nj_bwd_column_part sums a piece's g and g*xhat per column (and with FUSED its dz*xhat and dz, a
   partial row per (outer index, piece)), the library's merge (lib_merge.cu) adds a tile's pieces in order
   into the two means, nj_bwd_column writes a piece's dx. Workspace, after the dgamma/dbeta launches' fixed
   region: with FUSED [2][rows * KO * NJ_SPLIT][EC] partial rows, then [tile][piece][2][32] sums, then
   [tile][2][32] means, tiles over the whole batch (the planner gives the merge the same layout). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
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
local NT = ceil_div(EC, 32)
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
local SPLIT = P.split
local FUSED = P.pgrad == "fused"
local KO = P.kept_inner // EC -- outer indices per batch row
local NTASK = KO * NT -- tiles per batch row
local LO = SPLIT > 1 and "(" .. IT .. ")lo + ty" or "ty"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
-- split walks, centered: a piece also sums (x - mean) * rstd for the saved mean's correction (bwd_lib.cuh),
-- so a (tile, piece) holds Q floats, [a: sum g | sum xhat][b: sum g * xhat | unused], and the merge
-- takes IPT items a tile (planner_column.c)
local Q = F.center and 128 or 64
local IPT = Q // 2
-- the workspace regions (the planner's P.ws): with FUSED the partial rows (pgrad: [2][PROWS][EC]), and
-- for split walks the pieces' sums (parts) and the tiles' means (means)
local PROWS = "A.rows * " .. (KO * SPLIT) .. "LL" -- fused partial rows
-- The block's BY warp values of each of vars meet in nj_part and warp 0 adds them in warp order into
-- its own; leaves warp 0's block open (the caller writes the totals and closes it).
local function combine(vars)
  local t = {}
  for q, v in ipairs(vars) do t[#t + 1] = string.format("        nj_part[%d + threadIdx.x] = %s;", (q - 1) * B, v) end
  t[#t + 1] = "        __syncthreads();\n        if (ty == 0) {\n#pragma unroll 1\n            for (int k = 1; k < NJ_BY; k++) {"
  for q, v in ipairs(vars) do
    t[#t + 1] = string.format("                %s += nj_part[%d + k * 32 + tx];", v, (q - 1) * B)
  end
  t[#t + 1] = "            }"
  return table.concat(t, "\n")
end
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL
#define NJ_NT {{ NT }}LL
#define NJ_BY {{ BY }}
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
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
NJ_KERNEL({{ name }}, {{ B }})
{
{% if mode ~= "dx" then %}
    NJ_SHARED(float, nj_part, {{ ((FUSED and 4 or 2) + (S3 and 1 or 0)) * B }});
{% end %}
{% if mode == "full" or PRE then %}
    NJ_SHARED(float, nj_m, 64); /* the tile's means of g and g*xhat; first, its columns' dl */
{% end %}
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const nj_i64 ntask = A.rows * {{ NTASK }}LL;
{{ bwd_pointers() }}
{% if SPLIT > 1 then %}
    {{ block_item("wi", "ntask * NJ_SPLIT") }}
        const nj_i64 task = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
        const nj_i64 lo = piece * NJ_PIECE, hi = lo + NJ_PIECE < NJ_N ? lo + NJ_PIECE : NJ_N;
{% else %}
    {{ block_item("task", "ntask") }}
{% end %}
        const nj_i64 o = task / NJ_NT;
        const nj_i64 k{{ cax }} = (task % NJ_NT) * 32 + tx;
        const bool col_ok = k{{ cax }} < {{ EC }};
        {{ split_index("o", outer, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
{% if mode ~= "part" then %}
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% end %}
{% if F.scale or F.bias then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = col_ok ? {{ F.center and "A.mean[os]" or "0.0f" }} : 0.0f;
        const float rstd = col_ok ? A.rstd[os] : 0.0f;
{% if mode == "dx" then %}
        const float *M = (const float *)A.workspace{{ ws_plus("means") }} + task * {{ Q }};
{% if F.center then %}
        /* the pieces' mean of (x - mean) * rstd corrects xhat, and the mean of g * xhat by dl * mean(g)
           (exact without an activation, to first order in dl with one) */
        const float m1 = M[tx], dl = M[32 + tx];
        const float m2 = M[{{ IPT }} + tx] - dl * m1;
        if (ty == 0 && col_ok && fabsf(mean) * rstd > NJ_FIX_RATIO) {
{% if FUSED then %}
            /* this piece's partial row of dgamma: sum dz * (xhat - dl) (its dbeta row holds sum dz) */
            float *PR = (float *)A.workspace{{ ws_plus("pgrad") }};
            PR[(o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}] -= dl * PR[({{ PROWS }} + o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}];
{% end %}
{% if bwd_dl_store() then %}
            if (piece == 0) {{ bwd_dl_base() }}[os] = dl; /* for the dgamma walks */
{% end %}
        }
{% else %}
        const float m2 = M[{{ IPT }} + tx];
{% end %}
{% else %}
{% if PRE then %}
        /* each column's correction where it needs one (over the whole column); the tile's warps add
           theirs in order */
        float dl = 0.0f;
        if (col_ok && fabsf(mean) * rstd > NJ_FIX_RATIO) {
#pragma unroll 1
            for ({{ IT }} i = ty; i < ({{ IT }})NJ_N; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
                dl += (nj_to_f32(X[ox + {{ offset("x", red, "r") }}]) - mean) * rstd;
            }
        }
        nj_part[threadIdx.x] = dl;
        __syncthreads();
        if (ty == 0) {
#pragma unroll 1
            for (int k = 1; k < NJ_BY; k++) dl += nj_part[k * 32 + tx];
            nj_m[tx] = dl * (1.0f / (float)NJ_N); /* rewritten only after the combine's barrier below */
{% if mode == "full" and bwd_dl_store() then %}
            if (col_ok && fabsf(mean) * rstd > NJ_FIX_RATIO) {{ bwd_dl_base() }}[os] = nj_m[tx];
{% end %}
        }
        __syncthreads();
        dl = nj_m[tx];
{% end %}
        float s1 = 0.0f, s2 = 0.0f;
{% if S3 then %}
        float s3 = 0.0f; /* sum of (x - mean) * rstd: the saved mean's correction */
{% end %}
{% if FUSED then %}
        float p1 = 0.0f, p2 = 0.0f; /* dgamma, dbeta terms down this column */
{% end %}
        if (col_ok) {
{{ walk_unroll(2) }}
            for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "                ") }}
                s1 += g;
                s2 += g * {{ XU }};
{% if S3 then %}
                s3 += {{ XU }};
{% end %}
{% if FUSED then %}
                p1 += dz * {{ XU }};
                p2 += dz;
{% end %}
            }
        }
{% local cv = FUSED and {"s1", "s2", "p1", "p2"} or {"s1", "s2"} %}
{% if S3 then cv[#cv + 1] = "s3" end %}
{{ combine(cv) }}
{% if mode == "part" then %}
            float *WS = (float *)A.workspace{{ ws_plus("parts") }} + wi * {{ Q }};
            WS[tx] = s1;
            WS[{{ IPT }} + tx] = s2;
{% if S3 then %}
            WS[32 + tx] = s3;
            WS[{{ IPT }} + 32 + tx] = 0.0f; /* merged, unused */
{% end %}
{% if FUSED then %}
            if (col_ok) { /* this piece's partial row of outer index o */
                float *PR = (float *)A.workspace{{ ws_plus("pgrad") }};
                PR[(o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}] = p1;
                PR[({{ PROWS }} + o * NJ_SPLIT + piece) * {{ EC }} + k{{ cax }}] = p2;
            }
{% end %}
        }
    }
}
{% do return end %}
{% end %}
            nj_m[tx] = s1 * (1.0f / (float)NJ_N);
            nj_m[32 + tx] = s2 * (1.0f / (float)NJ_N);
{% if FUSED then %}
            if (col_ok) { /* this tile's partial of outer index o */
                float *WS = (float *)A.workspace{{ ws_plus("pgrad") }};
                WS[o * {{ EC }} + k{{ cax }}] = p1;
                WS[(A.rows * {{ KO }}LL + o) * {{ EC }} + k{{ cax }}] = p2;
            }
{% end %}
        }
        __syncthreads();
{% if F.center then %}
        const float m1 = nj_m[tx];
{% end %}
        const float m2 = nj_m[32 + tx];
{% end %}
        if (col_ok) {
{{ walk_unroll(2) }}
            for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "                ") }}
                nj_store_f32(DX, odx + {{ offset("dx", red, "r") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
            }
        }
    }
}
{% end %}
{% if SPLIT > 1 then %}
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
