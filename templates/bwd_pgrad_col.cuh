{# dgamma/dbeta when the innermost canonical axis is a feature axis of stride 1 in x and dy (channels-last
   InstanceNorm/BatchNorm/GroupNorm, very long LayerNorm rows). Included by the backward templates when P.pgrad is "tiles".
   nj_bwd_pgrad_col: a block per (tile of 32 neighbouring feature columns, split s of NJ_S): lane tx owns
   one column, warp ty walks the non-feature index space at s * BY + ty, stepping NJ_S * BY (32 reads of
   neighbouring elements per warp: coalesced); warp 0 adds the BY warp sums in order. With NJ_S > 1 each
   split writes a partial row to the workspace and the library's column sum (lib_colsum.cu) adds the
   NJ_S partials of a feature element in split order. Fixed split, fixed order: deterministic.
   DX (P.pgrad "tiles_dx": rows, one statistic a batch row): the dx launch left each row's two means of g
   and g * xhat in NJ_WS_SETS (a pair a row); this walk, which reads x and dy anyway, writes dx from them,
   so x and dy are read twice in all. #}
{%
-- walks across sets: each set's correction comes from the dx kernel through the workspace (bwd_lib.cuh)
BWD_DL = bwd_dl_store() and "dl" or nil
local feat, nonfeat, nonfeat_inner = bwd_feature_axes()
local cax = P.rank
local EC = P.axes[cax].extent
local PL = P.role.pgrad -- this file's launch
local PB = PL.block
local BY = PB // 32
local NT = ceil_div(EC, 32)
local PS = P.param_size
local S = P.pgrad_parts
if not P.axes[cax].feature or P.axes[cax].stride.x ~= 1 then error("bwd_pgrad_col: innermost axis") end
local fouter = {}
for _, a in ipairs(feat) do if a ~= cax then fouter[#fouter + 1] = a end end
local nf_in = {}
for k = 2, #nonfeat do nf_in[#nf_in + 1] = nonfeat[k] end
local fkept, nkept = {}, {1}
for _, a in ipairs(feat) do if not P.axes[a].reduce then fkept[#fkept + 1] = a end end
for _, a in ipairs(nf_in) do if not P.axes[a].reduce then nkept[#nkept + 1] = a end end
local STEP = S * BY
local DX = P.pgrad == "tiles_dx"
if DX and (nonfeat_inner ~= 1 or #nonfeat ~= 1) then error("bwd_pgrad_col: dx needs a statistic a batch row") end
%}

#define NJ_S {{ S }}

NJ_KERNEL({{ PL.kernel }}, {{ PB }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_part, {{ 2 * PB }});
{% if not DX then %}
    if (!A.dgamma && !A.dbeta) return; /* both skipped: uniform across the grid */
{% end %}
{{ bwd_pointers() }}
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
{% local NTASK = PS // EC * NT * S %}
{% if PL.grid_x < NTASK then %}
    for (unsigned task = blockIdx.x; task < {{ NTASK }}u; task += gridDim.x) { /* capped grid: loop */
{% else %}
    {
        const unsigned task = blockIdx.x; /* the plan's grid: a block per (tile, split) */
{% end %}
        const unsigned s = task % NJ_S, tile = task / NJ_S;
        const unsigned fo = tile / {{ NT }}u;
        (void)fo;
        const unsigned f{{ cax }} = (tile % {{ NT }}u) * 32u + tx;
        const bool col_ok = f{{ cax }} < {{ EC }}u;
        {{ split_index("fo", fouter, "f", "unsigned") }}
        const nj_i64 op = {{ offset("param", feat, "f") }};
        const nj_i64 fx = {{ offset("x", feat, "f") }}, fdy = {{ offset("dy", feat, "f") }};
{% if DX then %}
        const nj_i64 fdx = {{ offset("dx", feat, "f") }};
{% end %}
        const nj_i64 fs = {{ offset("stats", fkept, "f") }};
        float s1 = 0.0f, s2 = 0.0f;
        if (col_ok) {
            const unsigned i0 = s * {{ BY }}u + ty;
            nj_i64 n1 = i0 / {{ nonfeat_inner }}u;
            unsigned r = i0 % {{ nonfeat_inner }}u;
{{ walk_unroll(2) }}
            while (n1 < A.rows) {
                {{ split_index("r", nf_in, "n", "unsigned") }}
                const nj_i64 os = fs + {{ offset("stats", nkept, "n") }};
                const float mean = {{ P.flags.center and "A.mean[os]" or "0.0f" }};
                const float rstd = A.rstd[os];
{% if BWD_DL then %}
                const float dl = fabsf(mean) * rstd > NJ_FIX_RATIO ? {{ bwd_dl_base() }}[os] : 0.0f;
{% end %}
{{ bwd_element("X[fx + " .. offset("x", nonfeat, "n") .. "]", "DY[fdy + " .. offset("dy", nonfeat, "n") .. "]",
               "op", "                ", not DX) }}
{% if DX then %}
                /* row n1's means (the dx launch's), then dx as that launch would write it */
                const float2 mm_ = make_float2(NJ_WS_SETS[n1 * 2], NJ_WS_SETS[n1 * 2 + 1]);
                const float m1 = mm_.x, m2 = mm_.y;
                (void)m1;
                nj_store_f32(DX, fdx + {{ offset("dx", nonfeat, "n") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
{% end %}
                s1 += dz * xh;
                s2 += dz;
                r += {{ STEP % nonfeat_inner }}u;
                n1 += {{ STEP // nonfeat_inner }};
                if (r >= {{ nonfeat_inner }}u) {
                    r -= {{ nonfeat_inner }}u;
                    n1++;
                }
            }
        }
        nj_part[threadIdx.x] = s1;
        nj_part[{{ PB }} + threadIdx.x] = s2;
        __syncthreads();
        if (ty == 0 && col_ok) {
#pragma unroll 1
            for (int k = 1; k < {{ BY }}; k++) {
                s1 += nj_part[k * 32 + tx];
                s2 += nj_part[{{ PB }} + k * 32 + tx];
            }
{% if S > 1 then %}
            /* partial of split s at the element's gamma offset (the library's column sum adds them) */
            float *WS = (float *)A.workspace{{ ws_plus("pgrad") }};
            WS[(nj_i64)s * {{ PS }} + op] = s1;
            WS[(nj_i64)(NJ_S + s) * {{ PS }} + op] = s2;
{% else %}
{% if P.flags.scale then %}
            if (A.dgamma) nj_store_f32((nj_tparam *)A.dgamma, op, s1);
{% end %}
{% if P.flags.bias then %}
            if (A.dbeta) nj_store_f32((nj_tparam *)A.dbeta, op, s2);
{% end %}
{% end %}
        }
{% if PL.grid_x < NTASK then %}
        __syncthreads(); /* nj_part is rewritten by the next task */
{% end %}
    }
}
