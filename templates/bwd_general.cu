{# Backward, any canonical problem (a first, general version; row-specialized kernels can follow).
   nj_bwd_dx: a block per statistic. With xhat = (x - mean) * rstd, u = xhat * gamma + beta and
   g = dy * act'(u) * gamma (the gradient reaching xhat):
       dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (RMS: without the mean(g) term)
   nj_bwd_param: a block per gamma element, summing dy * act'(u) * xhat (dgamma) and dy * act'(u) (dbeta)
   over every non-feature position in a fixed order with a fixed reduction tree: the same bits on every
   run, no atomics, no workspace. dgamma/dbeta may be NULL (skipped). Saved mean/rstd come from forward. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{%
local kept, red = kept_axes(), reduced_axes()
if #red == 0 then error("bwd_general: no reduced axis") end
local F = P.flags
local has_param = F.scale or F.bias
local act = P.act ~= "none"
local B = P.block
local NW = B // 32
local IT = P.reduce_size < 2147483647 and "unsigned" or "nj_i64"
-- the param kernel's spaces: feature axes, and the non-feature axes (batch first)
local feat, nonfeat = {}, {}
for a = 1, P.rank do
  if P.axes[a].feature then feat[#feat + 1] = a else nonfeat[#nonfeat + 1] = a end
end
local all = {}
for a = 1, P.rank do all[a] = a end
local nf_inner = 1
for k = 2, #nonfeat do nf_inner = nf_inner * P.axes[nonfeat[k]].extent end
%}

typedef {{ P.ctype.x }} nj_tx;
typedef {{ P.ctype.dy }} nj_tdy;
typedef {{ P.ctype.dx }} nj_tdx;
{% if has_param then %}
typedef {{ P.ctype.param }} nj_tparam;
{% end %}

#define NJ_N {{ P.reduce_size }}LL

/* Gradient reaching xhat (g) from one element, and the activation-scaled dy (for dgamma/dbeta). */
NJ_DEVICE void nj_bwd_elem(float x, float dy, float gam, float bet, float mean, float rstd, float &xhat,
                           float &dyu)
{
    xhat = (x - mean) * rstd;
{% if act then %}
    dyu = dy * nj_dact_{{ P.act }}(xhat * gam + bet);
{% else %}
    dyu = dy;
{% end %}
}

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    NJ_SHARED(float, nj_scratch, {{ 2 * NW }});
    const nj_i64 nstat = A.rows * {{ P.kept_inner }}LL;
    const nj_tx *X = (const nj_tx *)A.x;
    const nj_tdy *DY = (const nj_tdy *)A.dy;
    nj_tdx *DX = (nj_tdx *)A.dx;
{% if F.scale then %}
    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma;
{% end %}
{% if F.bias and act then %}
    const nj_tparam *BETA = (const nj_tparam *)A.beta;
{% end %}
    for (nj_i64 st = blockIdx.x; st < nstat; st += gridDim.x) {
        {{ split_index("st", kept, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% if has_param then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
        const float rstd = A.rstd[os];
{% for pass = 1, 2 do %}
{% if pass == 1 then %}
        float sg = 0.0f, sgx = 0.0f;
{% else %}
        nj_block_sum2<{{ NW }}>(sg, sgx, nj_scratch);
        const float mg = sg * (1.0f / (float)NJ_N), mgx = sgx * (1.0f / (float)NJ_N);
{% end %}
        for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
            {{ split_index("i", red, "r", IT) }}
{% if has_param then %}
            const nj_i64 opi = op + {{ offset("param", red, "r") }};
{% end %}
            const float gam = {{ F.scale and "nj_load_f32(GAMMA, opi)" or "1.0f" }};
            const float bet = {{ (F.bias and act) and "nj_load_f32(BETA, opi)" or "0.0f" }};
            float xhat, dyu;
            nj_bwd_elem(nj_load_f32(X, ox + {{ offset("x", red, "r") }}),
                        nj_load_f32(DY, ody + {{ offset("dy", red, "r") }}), gam, bet, mean, rstd, xhat, dyu);
            const float g = dyu * gam;
{% if pass == 1 then %}
            sg += g;
            sgx += g * xhat;
{% else %}
            nj_store_f32(DX, odx + {{ offset("dx", red, "r") }}, rstd * (g - {{ F.center and "mg" or "0.0f" }} - xhat * mgx));
{% end %}
        }
{% end %}
    }
}
{% if has_param then %}

NJ_KERNEL({{ P.launch[2].kernel }}, {{ P.launch[2].block }})
{
    NJ_SHARED(float, nj_scratch, {{ 2 * (P.launch[2].block // 32) }});
    const nj_tx *X = (const nj_tx *)A.x;
    const nj_tdy *DY = (const nj_tdy *)A.dy;
    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma;
    const nj_tparam *BETA = (const nj_tparam *)A.beta;
    nj_tparam *DGAMMA = (nj_tparam *)A.dgamma;
    nj_tparam *DBETA = (nj_tparam *)A.dbeta;
    const nj_i64 ntotal = A.rows * {{ nf_inner }}LL;
    for (nj_i64 q = blockIdx.x; q < {{ P.param_size }}LL; q += gridDim.x) {
        {{ split_index("q", feat, "k") }}
        const nj_i64 op = {{ offset("param", feat, "k") }};
        const float gam = {{ F.scale and "nj_load_f32(GAMMA, op)" or "1.0f" }};
        const float bet = {{ (F.bias and act) and "nj_load_f32(BETA, op)" or "0.0f" }};
        const nj_i64 fx = {{ offset("x", feat, "k") }}, fdy = {{ offset("dy", feat, "k") }},
                     fs = {{ offset("stats", feat, "k") }};
        float sdg = 0.0f, sdb = 0.0f;
        for (nj_i64 t = threadIdx.x; t < ntotal; t += {{ P.launch[2].block }}) {
            {{ split_index("t", nonfeat, "k") }}
            const nj_i64 os = fs + {{ offset("stats", nonfeat, "k") }};
            const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
            float xhat, dyu;
            nj_bwd_elem(nj_load_f32(X, fx + {{ offset("x", nonfeat, "k") }}),
                        nj_load_f32(DY, fdy + {{ offset("dy", nonfeat, "k") }}), gam, bet, mean, A.rstd[os], xhat,
                        dyu);
            sdg += dyu * xhat;
            sdb += dyu;
        }
        nj_block_sum2<{{ P.launch[2].block // 32 }}>(sdg, sdb, nj_scratch);
        if (threadIdx.x == 0) {
            if (DGAMMA) nj_store_f32(DGAMMA, op, sdg);
            if (DBETA) nj_store_f32(DBETA, op, sdb);
        }
    }
}
{% end %}
