{# Backward, any canonical problem (the fallback for every kind, and the only family for GENERAL).
   Launch 1 (nj_bwd_dx): a block per statistic (kept index) of the A.rows * kept_inner. The
   threads walk the reduction twice: first the two block sums of g = dz*gamma and g*xhat, then dx.
   With scale or bias constant over each set (P.pgrad "sets"), launch 1 also leaves each statistic's
   sums of dz and dz*xhat in the workspace, and the library's column sum (lib_colsum.cu) adds them over
   the statistics of each gamma element: dgamma and dbeta without another walk over x and dy.
   Otherwise launch 2 (only with scale or bias): bwd_pgrad.cuh, a block per feature element (looping over them
   past two waves) walks the non-feature index space (batch axis outermost) in a fixed order, recomputing
   xhat from x, mean and rstd, and reduces dz*xhat and dz with a fixed block tree. When the innermost axis
   is a feature axis, bwd_pgrad_col.cuh's column-tiled kernels replace it (coalesced walks). Fixed work
   per thread and a fixed reduction order: the same bits on every run, no atomics.
   Split statistics (P.split > 1: long rows): the reduction is cut into NJ_SPLIT pieces of contiguous
   walk indices, a block per (statistic, piece). nj_bwd_dx_part writes each piece's two sums to the
   workspace (after the parameter-gradient launches' fixed region); nj_bwd_dx's warp 0 adds the
   statistic's pieces in order, then the block writes dx over its piece. Pipelined (P.lag > 0, as
   fwd_row.cu's): one launch after a zero launch; the block of a statistic's last piece merges its
   pieces' sums into the workspace's means region, and the blocks that write dx, P.lag pieces behind,
   wait for them: x and dy come from L2 the second time. #}
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
local SPLIT = P.split
local PIPE = P.lag > 0
if PIPE and (SPLIT < 2 or not (P.pgrad == "none" or P.pgrad == "sets")) then error("bwd_general: a pipe needs split sets") end
-- the correction of the saved mean (bwd_lib.cuh): where a block walks its whole set, or (split) from
-- the pieces' sums of the uncorrected xhat, a third partial a piece (WQ floats a piece)
local WQ = F.center and 3 or 2
-- the walk indices a block covers: the whole reduction, or its piece
local LO = SPLIT > 1 and "(" .. IT .. ")lo + threadIdx.x" or "threadIdx.x"
local HI = SPLIT > 1 and "(" .. IT .. ")hi" or "(" .. IT .. ")NJ_N"
-- dgamma/dbeta from these walks (P.pgrad "sets": gamma constant over each set): the walks sum dz and
-- dz * xhat, the set's shares of dbeta and dgamma, and gamma (gs_) scales the dx formula's two means
local SETS = P.pgrad == "sets"
-- dgamma/dbeta from the dx launch's walk (P.pgrad "pieces": split sets, each piece within one gamma
-- element, GroupNorm of NCHW): it sums dz * xhat and dz over its piece and writes the pair, statistic
-- st's piece q at pair st * NJ_SPLIT + q, which the column sum adds per gamma element
local PIECES = P.pgrad == "pieces"
if PIECES and SPLIT < 2 then error("bwd_general: pieces need a split walk") end
-- dx from the column tiles' walk (P.pgrad "tiles_dx", planner_common.c: nj_plan_pgrad_dx): the dx
-- launch only merges its row's pieces and leaves the two means, a pair a row, in the workspace
local PDX = P.pgrad == "tiles_dx"
if PDX and (SPLIT < 2 or P.kept_inner ~= 1) then error("bwd_general: tiles_dx needs split rows") end
local SG = SETS and "dz" or "g"
local GS = (SETS and F.scale) and "gs_ * " or ""
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL
{% if SPLIT > 1 then %}
#define NJ_SPLIT {{ SPLIT }}
#define NJ_PIECE ((NJ_N + NJ_SPLIT - 1) / NJ_SPLIT)
/* the pieces' sums, after the fixed region of the dgamma/dbeta launches */
#define NJ_WS_DX ((float *)A.workspace{{ ws_plus("parts") }})
#define NJ_WQ {{ WQ }}
{% end %}
{% if SETS or PIECES or PDX then %}
/* a statistic's (or piece's) (sum dz * xhat, sum dz): its shares of dgamma and dbeta, for the column sum;
   tiles_dx: a row's two means, for the column tiles' dx */
#define NJ_WS_SETS ((float *)A.workspace{{ ws_plus("sets") }})
{% end %}

{# The statistic's sums from its pieces' (nj_bwd_dx_part's), warp 0, a fixed order: s1, s2 (and dl) in the
   block's registers. pipe: stored by other SMs' blocks during this launch (read from L2) #}
{% function merge_pieces(pipe) %}
{% local function W(i) return pipe and ("nj_load_cg(NJ_WS_DX + " .. i .. ")") or ("NJ_WS_DX[" .. i .. "]") end %}
        /* the statistic's two sums from its pieces' (nj_bwd_dx_part), warp 0, a fixed order */
        __syncthreads(); /* nj_scratch: the previous piece's readers are done */
        if (threadIdx.x < 32) {
            float t1 = 0.0f, t2 = 0.0f;
#pragma unroll 1
            for (int q = threadIdx.x; q < NJ_SPLIT; q += 32) {
                t1 += {{ W("(st * NJ_SPLIT + q) * NJ_WQ") }};
                t2 += {{ W("(st * NJ_SPLIT + q) * NJ_WQ + 1") }};
            }
            nj_warp_sum2(t1, t2);
{% if F.center then %}
            /* the pieces summed (x - mean) * rstd: its mean dl corrects xhat (bwd_lib.cuh), and
               sum(g * xhat) = sum(g * (x - mean) * rstd) - dl * sum(g) (exact without an activation,
               to first order in dl with one) */
            float t3 = 0.0f;
#pragma unroll 1
            for (int q = threadIdx.x; q < NJ_SPLIT; q += 32) t3 += {{ W("(st * NJ_SPLIT + q) * NJ_WQ + 2") }};
            const float dl = nj_warp_sum(t3) * (1.0f / (float)NJ_N);
            t2 -= dl * t1;
            if (threadIdx.x == 0) {
                nj_scratch[2] = dl;
{% if bwd_dl_store() and not pipe then %}
                if (piece == 0 && fabsf(mean) * rstd > NJ_FIX_RATIO) {{ bwd_dl_base() }}[os] = dl; /* for the dgamma walks */
{% end %}
            }
{% end %}
            if (threadIdx.x == 0) nj_scratch[0] = t1, nj_scratch[1] = t2;
        }
        __syncthreads();
        const float s1 = nj_scratch[0], s2 = nj_scratch[1];
{% if F.center then %}
        const float dl = nj_scratch[2];
{% end %}
{% end %}

{% local function dx_kernel(name, mode) %}
{# With an activation, dz depends on xhat itself: a piece of a split walk corrects its xhat exactly too
   (the dx launch's correction is first order in dl), from a walk over the whole statistic where it needs
   one (NJ_FIX_RATIO: x read once more per piece, a rare regime's cost), and adds dl back into its sums so
   that the dx launch reads what it reads without it. #}
{% local PRE = F.center and (SPLIT == 1 or (mode == "part" and P.act ~= "none")) %}
{% local XU = (mode == "part" and PRE) and "(xh + dl)" or "xh" %}
{% BWD_DL = (mode ~= "part" or PRE) and "dl" or nil %}
{% if PIPE then %}
/* block wi_'s piece (the kernel's pipe order) */
NJ_DEVICE void {{ name }}_body(const nj_kargs &A, float *nj_scratch, nj_i64 wi_)
{
{% else %}
NJ_KERNEL({{ name }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, {{ math.max(2 * NW, 4) }});
{% end %}
    const nj_i64 nstat = A.rows * {{ P.kept_inner }}LL;
{{ bwd_pointers() }}
{% if SPLIT > 1 then %}
{% if PIPE then %}
    {
        const nj_i64 wi = wi_;
{% else %}
    {{ block_item("wi", "nstat * NJ_SPLIT", nil, nil, mode ~= "part" and P.reverse == 1) }}
{% end %}
{% if PDX and mode == "part" then %}
        /* piece-major: the rows' blocks of one piece side by side, so the piece's gamma (beta) come from
           DRAM once, not once a row (LayerNorm f32 10 x 10^7: 400 of the 1216 MB this launch read); the
           dx launch only merges, and the column tiles' walk reads x again column-wise anyway */
        const nj_i64 piece = wi / nstat, st = wi % nstat;
{% else %}
        const nj_i64 st = wi / NJ_SPLIT, piece = wi % NJ_SPLIT;
{% end %}
        const nj_i64 lo = piece * NJ_PIECE, hi = lo + NJ_PIECE < NJ_N ? lo + NJ_PIECE : NJ_N;
{% if PIPE then %}
        int *const FLAG = (int *)((float *)A.workspace{{ ws_plus("flags") }}) + st;
        float *const MEANS = (float *)A.workspace{{ ws_plus("means") }} + 3 * st;
{% end %}
{% else %}
    {{ block_item("st", "nstat") }}
{% end %}
        {{ split_index("st", kept, "k") }}
        const nj_i64 ox = {{ offset("x", kept, "k") }};
        const nj_i64 ody = {{ offset("dy", kept, "k") }};
{% if mode ~= "part" then %}
        const nj_i64 odx = {{ offset("dx", kept, "k") }};
{% end %}
{% if F.scale or F.bias then %}
        const nj_i64 op = {{ offset("param", kept, "k") }};
{% end %}
        const nj_i64 os = {{ offset("stats", kept, "k") }};
        const float mean = {{ F.center and "A.mean[os]" or "0.0f" }};
        const float rstd = A.rstd[os];
{% if PRE then %}
        float dl = 0.0f;
        if (fabsf(mean) * rstd > NJ_FIX_RATIO) { /* uniform over the block (bwd_lib.cuh: BWD_DL) */
            float c_ = 0.0f;
#pragma unroll 1
            for ({{ IT }} i = threadIdx.x; i < ({{ IT }})NJ_N; i += {{ B }}) {
                {{ split_index("i", red, "r", IT) }}
                c_ += (nj_to_f32(X[ox + {{ offset("x", red, "r") }}]) - mean) * rstd;
            }
            float z_ = 0.0f; /* inlined, not nj_block_sum's call: values live across a call spilled */
            nj_block_sum2<{{ NW }}>(c_, z_, nj_scratch);
            dl = c_ * (1.0f / (float)NJ_N);
{% if mode == "full" and bwd_dl_store() then %}
            if (threadIdx.x == 0) {{ bwd_dl_base() }}[os] = dl; /* for the dgamma/dbeta walks */
{% end %}
        }
{% end %}
{% if mode == "dx" and PIPE then %}
        /* the statistic's sums, once the block of its last piece has merged them */
        if (threadIdx.x == 0) nj_pipe_wait(FLAG, NJ_SPLIT + 1);
        __syncthreads();
        const float s1 = nj_load_cg(MEANS), s2 = nj_load_cg(MEANS + 1);
{% if F.center then %}
        const float dl = nj_load_cg(MEANS + 2);
{% if bwd_dl_store() then %}
        if (threadIdx.x == 0 && piece == 0 && fabsf(mean) * rstd > NJ_FIX_RATIO) {{ bwd_dl_base() }}[os] = dl; /* for the dgamma walks */
{% end %}
{% end %}
{% elseif mode == "dx" then %}
{% merge_pieces(false) %}
{% else %}
        float s1 = 0.0f, s2 = 0.0f;
{% if mode == "part" and F.center then %}
        float s3 = 0.0f; /* sum of (x - mean) * rstd: the correction's (bwd_lib.cuh) */
{% end %}
{{ walk_unroll(2) }}
        for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += {{ B }}) {
            {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "            ") }}
            s1 += {{ SG }};
            s2 += {{ SG }} * {{ XU }};
{% if mode == "part" and F.center then %}
            s3 += {{ XU }};
{% end %}
        }
        nj_block_sum2<{{ NW }}>(s1, s2, nj_scratch);
{% if mode == "part" and F.center then %}
        float z_ = 0.0f;
        nj_block_sum2<{{ NW }}>(s3, z_, nj_scratch);
{% end %}
{% end %}
{% if mode == "part" then %}
        if (threadIdx.x == 0) { /* statistic st's piece at st * NJ_SPLIT + piece, whatever the block order */
            const nj_i64 wq = (st * NJ_SPLIT + piece) * NJ_WQ;
            NJ_WS_DX[wq] = s1;
            NJ_WS_DX[wq + 1] = s2;
{% if F.center then %}
            NJ_WS_DX[wq + 2] = s3;
{% end %}
        }
{% if PIPE then %}
        /* the block whose add completes the count merges the statistic's pieces */
        if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FLAG) == NJ_SPLIT - 1)) {
            nj_fence_gpu();
{% merge_pieces(true) %}
            if (threadIdx.x == 0) {
                MEANS[0] = s1;
                MEANS[1] = s2;
{% if F.center then %}
                MEANS[2] = dl;
{% end %}
                nj_pipe_arrive(FLAG);
            }
        }
{% end %}
    }
}
{% do return end %}
{% end %}
{% if SETS then %}
        if (threadIdx.x == 0{{ SPLIT > 1 and " && piece == 0" or "" }}) {
            NJ_WS_SETS[st * 2] = s2;
            NJ_WS_SETS[st * 2 + 1] = s1;
        }
{% if F.scale then %}
        const float gs_ = nj_load_f32(GAMMA, op); /* the set's one gamma */
{% end %}
{% end %}
{% if F.center then %}
        const float m1 = {{ GS }}s1 * (1.0f / (float)NJ_N);
{% end %}
        const float m2 = {{ GS }}s2 * (1.0f / (float)NJ_N);
{% if PDX then %}
        (void)odx;
        if (threadIdx.x == 0 && piece == 0) {
            NJ_WS_SETS[st * 2] = {{ F.center and "m1" or "0.0f" }};
            NJ_WS_SETS[st * 2 + 1] = m2;
        }
{% else %}
{% if PIECES then %}
        float p1 = 0.0f, p2 = 0.0f; /* the piece's sums of dz * xhat and dz */
{% end %}
{{ walk_unroll(2) }}
        for ({{ IT }} i = {{ LO }}; i < {{ HI }}; i += {{ B }}) {
            {{ split_index("i", red, "r", IT) }}
{{ bwd_element("X[ox + " .. offset("x", red, "r") .. "]", "DY[ody + " .. offset("dy", red, "r") .. "]",
               "op + " .. offset("param", red, "r"), "            ") }}
            nj_store_f32(DX, odx + {{ offset("dx", red, "r") }}, {{ bwd_dx_expr("g", "xh", "m1", "m2") }});
{% if PIECES then %}
            p1 += dz * xh;
            p2 += dz;
{% end %}
        }
{% if PIECES then %}
        __syncthreads(); /* nj_scratch: the statistic's sums above are read */
        nj_block_sum2<{{ NW }}>(p1, p2, nj_scratch);
        if (threadIdx.x == 0) {
            NJ_WS_SETS[wi * 2] = p1;
            NJ_WS_SETS[wi * 2 + 1] = p2;
        }
{% end %}
{% end %}
    }
}
{% end %}

{% if PIPE then %}
{% dx_kernel("nj_bwd_dx_part", "part") %}

{% dx_kernel("nj_bwd_dx", "dx") %}

{{ pipe_zero_kernel("A.rows * " .. P.kept_inner .. "LL", "(float *)A.workspace" .. ws_plus("flags") .. " + i") }}

/* Pieces' sums and pieces' dx in pipe_item's order (lib_index.cuh) */
NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_scratch, {{ math.max(2 * NW, 4) }});
    {{ pipe_item("A.rows * " .. P.kept_inner .. "LL * NJ_SPLIT", "wi", "dx") }}
    if (dx) nj_bwd_dx_body(A, nj_scratch, wi);
    else nj_bwd_dx_part_body(A, nj_scratch, wi);
}
{% elseif SPLIT > 1 then %}
{% dx_kernel(P.role.part.kernel, "part") %}

{% dx_kernel(P.role.main.kernel, "dx") %}
{% else %}
{% dx_kernel(P.role.main.kernel, "full") %}
{% end %}
{% if P.pgrad == "tiles" or PDX then %}
{% include("bwd_pgrad_col.cuh") %}
{% elseif P.pgrad == "walk" then %}
{% include("bwd_pgrad.cuh") %}
{% end %}
