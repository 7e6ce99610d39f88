{# Forward, any canonical problem (COLUMN and GENERAL kinds; also a correct fallback for ROW).
   One block per statistic (kept index) of the A.rows * kept_inner statistics. The
   threads walk the reduction index space, decomposed over the reduced axes with the extents and
   strides baked in: Welford (or a sum of squares under RMS), a block reduction, then a second walk
   that re-reads x and writes y. gamma/beta offsets come from the PARAM strides of every axis.
   Split statistics (P.split > 1: 2^18 elements and more, e.g. BatchNorm over N x H x W): the walk is
   cut into NJ_SPLIT pieces of contiguous walk indices, a block per (statistic, piece).
   nj_fwd_general_part writes each piece's (sum, squared deviations from the piece mean) to the
   workspace; nj_fwd_general's warp 0 combines the statistic's pieces in order (m2 = sum(m2_q + n_q *
   (mean_q - mean)^2): nothing cancels), then the block normalizes its piece. Pipelined (P.lag > 0, as
   fwd_row.cu's): one launch after a zero launch, its blocks alternating a piece's sums and, P.lag pieces
   behind, a piece's normalization; the block of a statistic's last piece merges it into the means
   region, and the normalizing blocks wait for it: x comes from L2 the second time. #}
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
local SPLIT = P.split
local PIPE = P.lag > 0
if PIPE and SPLIT < 2 then error("fwd_general: a pipe needs split statistics") end
-- the walk indices a block covers: the whole reduction, or its piece
local LO = SPLIT > 1 and "(" .. IT .. ")lo + threadIdx.x" or "threadIdx.x"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
%}

{% fwd_typedefs() %}

#define NJ_N {{ P.reduce_size }}LL
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
{% end %}

{% local function load_x(dst) %}
            {{ split_index("i", red, "r", IT) }}
            float {{ dst }} = nj_load_f32(X, ox + {{ offset("x", red, "r") }});
{% if F.residual then %}
            {{ dst }} += nj_load_f32(RES, ores + {{ offset("res", red, "r") }});
{% end %}
{% end %}
{# mode: "full" (statistics and normalization), "part" (a piece's partial statistics) or "norm" (the
   statistic from its pieces', then normalization of the piece) #}
{% local function stat_kernel(name, mode) %}
{% if PIPE then %}
/* block wi_'s piece (the kernel's pipe order) */
NJ_DEVICE void {{ name }}_body(const nj_kargs &A, float *nj_scratch, nj_welford *nj_wscratch, nj_i64 wi_)
{
{% else %}
NJ_KERNEL({{ name }}, {{ B }})
{
    nj_grid_enter();
{% if mode == "norm" then %}
    NJ_SHARED(float, nj_scratch, 2);
{% elseif F.center then %}
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
{% else %}
    NJ_SHARED(float, nj_scratch, {{ NW }});
{% end %}
{% end %}
    const nj_i64 nstat = A.rows * {{ P.kept_inner }}LL;
{% fwd_pointers() %}
{% if SPLIT > 1 then %}
{% if PIPE then %}
    {
        const nj_i64 wi = wi_;
{% else %}
    {{ block_item("wi", "nstat * NJ_SPLIT", nil, nil, mode ~= "part" and P.reverse == 1) }}
{% end %}
        const nj_i64 st = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
        const nj_i64 lo = piece * NJ_PIECE, hi = lo + NJ_PIECE < NJ_N ? lo + NJ_PIECE : NJ_N;
{% if PIPE then %}
        int *const FLAG = (int *)((float *)A.workspace{{ ws_plus("flags") }}) + st;
        float *const MEANS = (float *)A.workspace{{ ws_plus("means") }} + 2 * st;
{% end %}
{% else %}
    {{ block_item("st", "nstat") }}
{% end %}
        {{ split_index("st", kept, "k") }}
{% fwd_offsets(kept, "k") %}
{% fwd_shift() %}
{% if mode == "norm" and PIPE then %}
        /* the statistic's shifted mean and rstd, once the block of its last piece has merged them */
        if (threadIdx.x == 0) nj_pipe_wait(FLAG, NJ_SPLIT + 1);
        __syncthreads();
        const float md = nj_load_cg(MEANS), rstd = nj_load_cg(MEANS + 1);
{% elseif mode == "norm" then %}
        /* the statistic from its pieces' (nj_fwd_general_part) */
{% fwd_split_stats("(const float *)A.workspace" .. ws_plus("parts") .. " + st * (2 * NJ_SPLIT)", "NJ_PIECE", "NJ_N", "1", "nj_scratch", kept) %}
{% else %}
{% if F.center then %}
        nj_welford w = nj_welford_init();
{% else %}
        float s = 0.0f;
{% end %}
{{ walk_unroll(F.residual and 2 or 1) }}
        for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += {{ B }}) {
{% load_x("v") %}
{% fwd_resout("            ", offset("resout", red, "r"), "v") %}
{% if F.center then %}
            nj_welford_add(w, (v - sh.k) * sh.inv);
{% else %}
            s += nj_sq(v * sh.inv);
{% end %}
        }
{% if F.center then %}
        w = nj_block_welford<{{ NW }}>(w, nj_wscratch);
{% end %}
{% if mode == "part" then %}
{% if not F.center then %}
        s = nj_block_sum<{{ NW }}>(s, nj_scratch);
{% end %}
        if (threadIdx.x == 0) {
            float *WS = (float *)A.workspace{{ ws_plus("parts") }} + wi * 2;
            WS[0] = {{ F.center and "w.n * w.mean" or "s" }};
            WS[1] = {{ F.center and "w.m2" or "0.0f" }};
        }
{% if PIPE then %}
{% fwd_pipe_merge("(const float *)A.workspace" .. ws_plus("parts") .. " + st * (2 * NJ_SPLIT)", "NJ_PIECE", "NJ_N", "1", "nj_scratch", kept) %}
{% end %}
    }
}
{% do return end %}
{% end %}
{% if F.center then %}
        const float mean_s = w.mean;
        const float var_s = w.m2 * (1.0f / (float)NJ_N);
{% else %}
        const float mean_s = 0.0f;
        const float var_s = nj_block_sum<{{ NW }}>(s, nj_scratch) * (1.0f / (float)NJ_N);
{% end %}
{% fwd_finish("mean_s", "var_s") %}
{% fwd_save_stats("threadIdx.x == 0", kept) %}
{% end %}
{# gamma/beta constant over the statistic (BatchNorm's channel): loaded once, not an element at a time (y
   may alias them, so the compiler kept the loads in the walk: two one-sector requests beside each of
   x's, BatchNorm f16 NCHW 128 x 128 x 28 x 28 at 69% sector efficiency in the model) #}
{% local PSET = has_param and offset("param", red, "r") == "0" %}
{% if PSET then %}
{% if F.scale then %}
        const float g_set = nj_load_f32(GAMMA, op);
{% end %}
{% if F.bias then %}
        const float b_set = nj_load_f32(BETA, op);
{% end %}
{% end %}
{{ walk_unroll(F.residual and 2 or 1) }}
        for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += {{ B }}) {
{% load_x("v") %}
            float u = {{ fwd_centered("v") }} * rstd;
{% if PSET then %}
{% fwd_epilogue("            ", F.scale and "g_set", F.bias and "b_set", {y = offset("y", red, "r")}) %}
{% else %}
{% if has_param then %}
            const nj_i64 opi = op + {{ offset("param", red, "r") }};
{% end %}
{% fwd_epilogue("            ", F.scale and "nj_load_f32(GAMMA, opi)", F.bias and "nj_load_f32(BETA, opi)", {y = offset("y", red, "r")}) %}
{% end %}
        }
    }
}
{% end %}
{% if PIPE then %}
{% stat_kernel("nj_fwd_general_part", "part") %}

{% stat_kernel("nj_fwd_general", "norm") %}

{{ pipe_zero_kernel("A.rows * " .. P.kept_inner .. "LL", "(float *)A.workspace" .. ws_plus("flags") .. " + i") }}

/* Pieces' sums and pieces' normalization in pipe_item's order (lib_index.cuh) */
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, {{ math.max(NW, 2) }});
    NJ_SHARED(nj_welford, nj_wscratch, {{ NW }});
    {{ pipe_item("A.rows * " .. P.kept_inner .. "LL * NJ_SPLIT", "wi", "norm") }}
    if (norm) nj_fwd_general_body(A, nj_scratch, nj_wscratch, wi);
    else nj_fwd_general_part_body(A, nj_scratch, nj_wscratch, wi);
}
{% elseif SPLIT > 1 then %}
{% stat_kernel(P.role.part.kernel, "part") %}

{% stat_kernel(P.role.main.kernel, "norm") %}
{% else %}
{% stat_kernel(P.role.main.kernel, "full") %}
{% end %}
