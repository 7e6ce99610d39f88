{# Forward, any canonical problem (COLUMN and GENERAL kinds; also a correct fallback for ROW).
   One block per statistic (kept index), grid-stride over the A.rows * kept_inner statistics. The
   threads walk the reduction index space, decomposed over the reduced axes with the extents and
   strides baked in: Welford (or a sum of squares under RMS), a block reduction, then a second walk
   that re-reads x and writes y. gamma/beta offsets come from the PARAM strides of every axis. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
if #red == 0 then error("fwd_general: no reduced axis") end
local F = P.flags
local has_param = F.scale or F.bias
local B = P.block
local NW = B // 32
-- 32-bit walk indices when the reduction fits: 64-bit division by a constant costs several times more
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
%}

{% fwd_typedefs() %}

#define NJ_N {{ P.reduce_size }}LL

{% local function load_x(dst) %}
            {{ split_index("i", red, "r", IT) }}
            float {{ dst }} = nj_load_f32(X, ox + {{ offset("x", red, "r") }});
{% if F.residual then %}
            {{ dst }} += nj_load_f32(RES, ores + {{ offset("res", red, "r") }});
{% end %}
{% end %}
NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
{% if F.center then %}
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
{% else %}
    NJ_SHARED(float, nj_scratch, {{ NW }});
{% end %}
    const nj_i64 nstat = A.rows * {{ P.kept_inner }}LL;
{% fwd_pointers() %}
    for (nj_i64 st = blockIdx.x; st < nstat; st += gridDim.x) {
        {{ split_index("st", kept, "k") }}
{% fwd_offsets(kept, "k") %}
{% if F.center then %}
        nj_welford w = nj_welford_init();
{% else %}
        float s = 0.0f;
{% end %}
        for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
{% load_x("v") %}
{% if F.resout then %}
            nj_store_f32(RESOUT, oresout + {{ offset("resout", red, "r") }}, v);
{% end %}
{% if F.center then %}
            nj_welford_add(w, v);
{% else %}
            s += v * v;
{% end %}
        }
{% if F.center then %}
        w = nj_block_welford<{{ NW }}>(w, nj_wscratch);
        const float mean = w.mean;
        const float var = w.m2 * (1.0f / (float)NJ_N);
{% else %}
        const float mean = 0.0f;
        const float var = nj_block_sum<{{ NW }}>(s, nj_scratch) * (1.0f / (float)NJ_N);
{% end %}
        const float rstd = rsqrtf(var + A.eps); /* IEEE sqrt + divide would call slow-path subroutines (spills) */
{% if F.stats then %}
        if (threadIdx.x == 0) {
            const nj_i64 os = {{ offset("stats", kept, "k") }};
{% if F.center then %}
            A.mean[os] = mean;
{% end %}
            A.rstd[os] = rstd;
        }
{% end %}
        for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
{% load_x("v") %}
            float u = (v - mean) * rstd;
{% if has_param then %}
            const nj_i64 opi = op + {{ offset("param", red, "r") }};
{% end %}
{% if F.scale then %}
            u *= nj_load_f32(GAMMA, opi);
{% end %}
{% if F.bias then %}
            u += nj_load_f32(BETA, opi);
{% end %}
            nj_store_f32(Y, oy + {{ offset("y", red, "r") }}, nj_act_{{ P.act }}(u));
        }
    }
}
