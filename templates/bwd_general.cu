{# Backward, any canonical problem (the fallback for every kind, and the only family for GENERAL).
   Launch 1 (nj_bwd_dx): a block per statistic (kept index), grid-stride over A.rows * kept_inner. The
   threads walk the reduction twice: first the two block sums of g = dz*gamma and g*xhat, then dx.
   Launch 2 (only with scale or bias): bwd_pgrad.cuh, a block per feature element (grid-stride over
   param_size) walks the non-feature index space (batch axis outermost) in a fixed order, recomputing
   xhat from x, mean and rstd, and reduces dz*xhat and dz with a fixed block tree. When the innermost axis
   is a feature axis, bwd_pgrad_col.cuh's column-tiled kernels replace it (coalesced walks). Fixed work
   per thread and a fixed reduction order: the same bits on every run, no atomics. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
if #red == 0 then error("bwd_general: no reduced axis") end
local F = P.flags
local B = P.block
local NW = B // 32
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    NJ_SHARED(float, nj_scratch, {{ 2 * NW }});
    const nj_i64 nstat = A.rows * {{ P.kept_inner }}LL;
{{ bwd_pointers() }}
    for (nj_i64 st = blockIdx.x; st < nstat; st += gridDim.x) {
        {{ split_index("st", kept, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% if F.scale or F.bias then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
        const float rstd = A.rstd[os];
        float s1 = 0.0f, s2 = 0.0f;
        for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
            {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "            ") }}
            s1 += g;
            s2 += g * xh;
        }
        nj_block_sum2<{{ NW }}>(s1, s2, nj_scratch);
{% if F.center then %}
        const float m1 = s1 * (1.0f / (float)NJ_N);
{% end %}
        const float m2 = s2 * (1.0f / (float)NJ_N);
        for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
            {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "            ") }}
            nj_store_f32(DX, odx + {{ offset("dx", red, "r") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
        }
    }
}
{% if #P.launch >= 2 and P.launch[2].kernel == "nj_bwd_pgrad_col" then %}
{% include("bwd_pgrad_col.cuh") %}
{% elseif #P.launch >= 2 then %}
{% include("bwd_pgrad.cuh") %}
{% end %}
