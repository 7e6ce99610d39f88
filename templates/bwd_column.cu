{# Backward, COLUMN kind (the innermost axis is kept with stride 1 in x: channels-last InstanceNorm and
   BatchNorm, LayerNorm over C of NCHW). Launch 1 (nj_bwd_column): a block per tile of 32 neighbouring
   statistics (columns) of one outer kept index; lane tx owns column tile * 32 + tx and warp ty walks the
   reduction at ty, ty + BY, ... so every warp reads 32 neighbouring elements (coalesced). The BY warp
   sums of g and g*xhat meet in shared memory and warp 0 adds them in warp order (deterministic); a
   second walk writes dx. dgamma/dbeta: when the columns are the only feature axis (FUSED: the plan's
   second launch is nj_bwd_column_pgrad), the first walk also sums dz*xhat and dz, warp 0 writes the
   tile's partial for its outer index o (workspace: [2][rows * KO][EC]) and nj_bwd_column_pgrad adds the
   partials of each column in order; else bwd_pgrad_col.cuh or bwd_pgrad.cuh, as the second launch says. #}
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
local FUSED = #P.launch >= 2 and P.launch[2].kernel == "nj_bwd_column_pgrad"
local KO = P.kept_inner // EC -- outer indices per batch row
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL
#define NJ_NT {{ NT }}LL
#define NJ_BY {{ BY }}

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    NJ_SHARED(float, nj_part, {{ (FUSED and 4 or 2) * B }});
    NJ_SHARED(float, nj_m, 64); /* the tile's means of g and g*xhat */
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const nj_i64 ntask = A.rows * {{ P.kept_inner // EC }}LL * NJ_NT;
{{ bwd_pointers() }}
    {{ block_item("task", "ntask") }}
        const nj_i64 o = task / NJ_NT;
        const nj_i64 k{{ cax }} = (task % NJ_NT) * 32 + tx;
        const bool col_ok = k{{ cax }} < {{ EC }};
        {{ split_index("o", outer, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% if F.scale or F.bias then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = col_ok ? {{ F.center and "A.mean[os]" or "0.0f" }} : 0.0f;
        const float rstd = col_ok ? A.rstd[os] : 0.0f;
        float s1 = 0.0f, s2 = 0.0f;
{% if FUSED then %}
        float p1 = 0.0f, p2 = 0.0f; /* dgamma, dbeta terms down this column */
{% end %}
        if (col_ok) {
{{ walk_unroll(2) }}
            for ({{ IT }} i = ty; i < ({{ IT }})NJ_N; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "                ") }}
                s1 += g;
                s2 += g * xh;
{% if FUSED then %}
                p1 += dz * xh;
                p2 += dz;
{% end %}
            }
        }
        nj_part[threadIdx.x] = s1;
        nj_part[{{ B }} + threadIdx.x] = s2;
{% if FUSED then %}
        nj_part[{{ 2 * B }} + threadIdx.x] = p1;
        nj_part[{{ 3 * B }} + threadIdx.x] = p2;
{% end %}
        __syncthreads();
        if (ty == 0) {
#pragma unroll 1
            for (int k = 1; k < NJ_BY; k++) {
                s1 += nj_part[k * 32 + tx];
                s2 += nj_part[{{ B }} + k * 32 + tx];
{% if FUSED then %}
                p1 += nj_part[{{ 2 * B }} + k * 32 + tx];
                p2 += nj_part[{{ 3 * B }} + k * 32 + tx];
{% end %}
            }
            nj_m[tx] = s1 * (1.0f / (float)NJ_N);
            nj_m[32 + tx] = s2 * (1.0f / (float)NJ_N);
{% if FUSED then %}
            if (col_ok) { /* this tile's partial of outer index o */
                float *WS = (float *)A.workspace;
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
        if (col_ok) {
{{ walk_unroll(2) }}
            for ({{ IT }} i = ty; i < ({{ IT }})NJ_N; i += NJ_BY) {
                {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "                ") }}
                nj_store_f32(DX, odx + {{ offset("dx", red, "r") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
            }
        }
    }
}
{% PGRAD_LAUNCH = 2 %}
{% if FUSED then %}
{% bwd_column_sums(P.launch[2].kernel, P.launch[2].block, EC, "A.rows * " .. KO .. "LL",
                   "WS[i * " .. EC .. " + col]", "WS[(A.rows * " .. KO .. "LL + i) * " .. EC .. " + col]") %}
{% elseif #P.launch >= 2 and P.launch[2].kernel == "nj_bwd_pgrad_col" then %}
{% include("bwd_pgrad_col.cuh") %}
{% elseif #P.launch >= 2 then %}
{% include("bwd_pgrad.cuh") %}
{% end %}
