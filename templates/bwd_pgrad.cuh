{# dgamma/dbeta for any canonical problem: a block per feature element (looping over them past two waves)
   walks the non-feature index space (batch axis outermost) in a fixed order, recomputing xhat from x,
   mean and rstd, and reduces dz*xhat and dz with a fixed block tree. Included by the bwd_ templates
   when the plan's dgamma/dbeta strategy (P.pgrad) is "walk". With few feature elements each walk is split
   (SP pieces, the partials summed in order by the library's column sum, lib_colsum.cu). #}
{%
-- walks across sets: each set's correction comes from the dx kernel through the workspace (bwd_lib.cuh)
BWD_DL = bwd_dl_store() and "dl" or nil
local F = P.flags
local feat, nonfeat, nonfeat_inner = bwd_feature_axes()
-- offset of operand opd with feature axes indexed by f<a> and the others by n<a>
local function off2(opd, only_kept)
  local fa, na = {}, {}
  for _, a in ipairs(feat) do if not only_kept or not P.axes[a].reduce then fa[#fa + 1] = a end end
  for _, a in ipairs(nonfeat) do if not only_kept or not P.axes[a].reduce then na[#na + 1] = a end end
  return "(" .. offset(opd, fa, "f") .. ") + (" .. offset(opd, na, "n") .. ")"
end
local PL = P.role.pgrad -- this file's launch
local PB = PL.block
local nf_in = {}
for k = 2, #nonfeat do nf_in[#nf_in + 1] = nonfeat[k] end
local fkept = {}
for _, a in ipairs(feat) do if not P.axes[a].reduce then fkept[#fkept + 1] = a end end
local nkept = {1}
for _, a in ipairs(nf_in) do if not P.axes[a].reduce then nkept[#nkept + 1] = a end end
if nonfeat_inner >= 2147483647 or P.param_size >= 2147483647 then error("bwd_pgrad: 32-bit walk indices") end
-- split walks (few feature elements): NJ_PS pieces of each walk, a block each, partial sums into the
-- workspace ([piece][feature] pairs), added in piece order by the launch after this one
local SP = P.pgrad_parts
local NF = nonfeat_inner
%}

/* The walk of one feature element: batch index n1 (run-time extent) outside, r over the other
 * non-feature axes inside, advanced by PB without any 64-bit division. */
NJ_KERNEL({{ PL.kernel }}, {{ PB }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_pscratch, {{ 2 * (PB // 32) }});
    if (!A.dgamma && !A.dbeta) return; /* both skipped: uniform across the grid */
{{ bwd_pointers() }}
{% if F.scale and SP == 1 then %}
    nj_tparam *DGAMMA = (nj_tparam *)A.dgamma;
{% end %}
{% if F.bias and SP == 1 then %}
    nj_tparam *DBETA = (nj_tparam *)A.dbeta;
{% end %}
{% if SP > 1 then %}
    const nj_i64 total = A.rows * {{ NF }}LL, plen = (total + {{ SP }} - 1) / {{ SP }};
    {{ block_item("w", P.param_size * SP .. "LL") }}
        const unsigned fi = (unsigned)(w / {{ SP }}), piece = (unsigned)(w % {{ SP }});
{% elseif PL.grid_x < P.param_size then %}
    for (unsigned fi = blockIdx.x; fi < {{ P.param_size }}u; fi += gridDim.x) { /* capped grid: loop */
{% else %}
    {
        const unsigned fi = blockIdx.x; /* the plan's grid: param_size blocks */
{% end %}
        {{ split_index("fi", feat, "f", "unsigned") }}
        const nj_i64 op = {{ offset("param", feat, "f") }};
        const nj_i64 fx = {{ offset("x", feat, "f") }}, fdy = {{ offset("dy", feat, "f") }};
        const nj_i64 fs = {{ offset("stats", fkept, "f") }};
        float s1 = 0.0f, s2 = 0.0f;
{% if SP > 1 then %}
        const nj_i64 lo = piece * plen, hi = lo + plen < total ? lo + plen : total;
        nj_i64 l = lo + threadIdx.x;
        nj_i64 n1 = l / {{ NF }}LL;
        unsigned r = (unsigned)(l % {{ NF }}LL);
{{ walk_unroll(2) }}
        while (l < hi) {
{% else %}
        nj_i64 n1 = threadIdx.x / {{ nonfeat_inner }}u;
        unsigned r = threadIdx.x % {{ nonfeat_inner }}u;
{{ walk_unroll(2) }}
        while (n1 < A.rows) {
{% end %}
            {{ split_index("r", nf_in, "n", "unsigned") }}
            const nj_i64 os = fs + {{ offset("stats", nkept, "n") }};
            const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
            const float rstd = A.rstd[os];
{% if BWD_DL then %}
            const float dl = fabsf(mean) * rstd > NJ_FIX_RATIO ? {{ bwd_dl_base() }}[os] : 0.0f;
{% end %}
{{ bwd_element("X[fx + " .. offset("x", nonfeat, "n") .. "]", "DY[fdy + " .. offset("dy", nonfeat, "n") .. "]",
               "op", "            ", true) }}
            s1 += dz * xh;
            s2 += dz;
{% if SP > 1 then %}
            l += {{ PB }};
{% end %}
            r += {{ PB % nonfeat_inner }}u;
            n1 += {{ PB // nonfeat_inner }};
            if (r >= {{ nonfeat_inner }}u) {
                r -= {{ nonfeat_inner }}u;
                n1++;
            }
        }
        nj_block_sum2<{{ PB // 32 }}>(s1, s2, nj_pscratch);
{% if SP > 1 then %}
        if (threadIdx.x == 0) {
            /* at the element's own gamma offset: the library's column sum writes dgamma[op] from it */
            float *WS = (float *)A.workspace{{ ws_plus("pgrad") }} + ((nj_i64)piece * {{ P.param_size }} + op) * 2;
            WS[0] = s1;
            WS[1] = s2;
        }
    }
}
{% else %}
        if (threadIdx.x == 0) {
{% if F.scale then %}
            if (DGAMMA) nj_store_f32(DGAMMA, op, s1);
{% end %}
{% if F.bias then %}
            if (DBETA) nj_store_f32(DBETA, op, s2);
{% end %}
        }
    }
}
{% end %}
