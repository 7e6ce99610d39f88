{# Backward, TILE family (planner_tile.c): rows of at most 64 bytes of x (or of up to 512 that are not
   whole sectors), axes [batch (kept), row (reduced)]. A fixed grid of blocks (1024 / block an SM: the
   kernel is held to them) walks the tiles of P.rows_per_block rows in turn; for each tile:
   1. copy: x and dy into dynamic shared memory, vector i of row i / NVR (as fwd_tile.cu), P.unroll
      vectors of each a thread loaded (all issued) before their stores.
   2. rows: a thread a row reads its saved statistics, computes its correction dl (centered, where
      |mean| * rstd > NJ_FIX_RATIO: the saved float32 mean's rounding, bwd_lib.cuh) and the means m1 (of
      g) and m2 (of g * xhat) over its staged values, into shared arrays.
   3. columns (P.pgrad "slots"): thread t owns column t % N of the rows t / N, t / N + G, ... (G = block
      / N groups) and adds their dz * xhat and dz across every tile the block walks.
   4. dx: the copy's vectors again, a vector stored at a time.
   At the end, the groups' partials of each column are added in group order into the block's slot
   ([slot][N] dgamma, then [slots + slot][N] dbeta in the pgrad region), which the library's column sum
   adds in slot order. Shared memory: 5 floats a row and 2 a thread (to a 16-byte boundary), x, then
   dy (from a 16-byte boundary). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{%
if P.rank ~= 2 or not P.axes[2].reduce then error("bwd_tile needs [batch, row]") end
if P.stage ~= 1 then error("bwd_tile: the tile is always staged (P.stage 1)") end
local F = P.flags
local N = P.reduce_size
local R = P.rows_per_block
local B = P.block
local VW = P.vec
local U = P.unroll
if N % VW ~= 0 then error("bwd_tile: vec " .. VW .. " of rows of " .. N) end
local NVR = N // VW
local G = B // N
local SLOTS = P.pgrad == "slots"
if P.pgrad ~= "none" and not SLOTS then error("bwd_tile: dgamma/dbeta in slots only") end
local PG, PB = F.scale, F.bias and P.act ~= "none"
local PARAM = {g = PG and ptab_at(PG, false, "e") or nil, b = PB and ptab_at(PG, true, "e") or nil}
local NFL = (5 * R + 2 * B + 3) // 4 * 4
BWD_DL = F.center and "dl" or nil
%}
{{ bwd_typedefs() }}

#define NJ_N {{ N }}LL
#define NJ_R {{ R }}u
#define NJ_NVR {{ NVR }}u
#define NJ_VW {{ VW }}
#define NJ_G {{ G }}u

{# the copy of x and dy: P.unroll vectors of each a thread loaded, then stored #}
{% local function copy() %}
#pragma unroll 1
        for (unsigned i0 = t; i0 < nv; i0 += {{ U * B }}u) {
{% if VW > 1 then %}
            unsigned wx[{{ U }}][nj_vec_io<NJ_VW, nj_tx>::W], wd[{{ U }}][nj_vec_io<NJ_VW, nj_tdy>::W];
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const nj_i64 k1 = r0 + i / NJ_NVR, e = (nj_i64)(i % NJ_NVR) * NJ_VW;
                    nj_vec_io<NJ_VW, nj_tx>::fetch(X, {{ offset("x", {1}, "k") }} + e, wx[q]);
                    nj_vec_io<NJ_VW, nj_tdy>::fetch(DY, {{ offset("dy", {1}, "k") }} + e, wd[q]);
                }
            }
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const unsigned si = (i / NJ_NVR) * NJ_N + (i % NJ_NVR) * NJ_VW;
                    nj_words<nj_vec_io<NJ_VW, nj_tx>::W>::store(nj_sx + si, wx[q]);
                    nj_words<nj_vec_io<NJ_VW, nj_tdy>::W>::store(nj_sdy + si, wd[q]);
                }
            }
{% else %}
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const nj_i64 k1 = r0 + i / NJ_NVR;
                    nj_sx[i] = X[{{ offset("x", {1}, "k") }} + i % NJ_NVR];
                    nj_sdy[i] = DY[{{ offset("dy", {1}, "k") }} + i % NJ_NVR];
                }
            }
{% end %}
        }
{% end %}
NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, {{ 1024 // B }})
{
    nj_grid_enter();
    NJ_DYN_SHARED(float, nj_rm);                    /* a row's saved mean */
    float *const nj_rr = nj_rm + NJ_R;              /* its rstd */
    float *const nj_rdl = nj_rr + NJ_R;             /* its correction dl */
    float *const nj_rm1 = nj_rdl + NJ_R;            /* its mean of g */
    float *const nj_rm2 = nj_rm1 + NJ_R;            /* its mean of g * xhat */
    float *const nj_cpart = nj_rm2 + NJ_R;          /* the column groups' partials, [sum][group][column] */
    nj_tx *const nj_sx = (nj_tx *)(nj_rm + {{ NFL }});
    nj_tdy *const nj_sdy = (nj_tdy *)((unsigned char *)nj_sx + ({{ R * N }}u * sizeof(nj_tx) + 15u) / 16u * 16u);
    (void)nj_rdl;
    (void)nj_cpart;
    const unsigned t = threadIdx.x;
{{ bwd_pointers() }}
{% if PG or PB then %}
{% param_table(PG, PB) %}
{% end %}
    const unsigned ce = t % (unsigned)NJ_N, cg = t / (unsigned)NJ_N; /* the column a thread sums, its group */
    float acc_g = 0.0f, acc_b = 0.0f;
    const nj_i64 nrows = A.rows, ntiles = (nrows + NJ_R - 1) / NJ_R;
#pragma unroll 1
    for (nj_i64 tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const nj_i64 r0 = tile * NJ_R;
        const unsigned nr = nrows - r0 < (nj_i64)NJ_R ? (unsigned)(nrows - r0) : NJ_R;
        const unsigned nv = nr * NJ_NVR;
        __syncthreads(); /* the previous tile's readers are done */
        /* 1. copy x and dy */
{% copy() %}
        __syncthreads();
        /* 2. a thread a row: its statistics, dl and the two means */
#pragma unroll 1
        for (unsigned r = t; r < nr; r += {{ B }}u) {
            const nj_i64 k1 = r0 + r;
            const nj_i64 os = {{ offset("stats", {1}, "k") }};
            const float mean = {{ F.center and "A.mean[os]" or "0.0f" }}, rstd = A.rstd[os];
            (void)mean;
{% if F.center then %}
            float s = 0.0f;
#pragma unroll 1
            for (unsigned e = 0; e < (unsigned)NJ_N; e++) s += (nj_to_f32(nj_sx[r * NJ_N + e]) - mean) * rstd;
            /* only where the saved mean's rounding matters (as every family: for ordinary data xhat stays
               (x - mean) * rstd, exactly 0 at the mean, where an activation's derivative has its kink) */
            const float dl = fabsf(mean) * rstd > NJ_FIX_RATIO ? s * (1.0f / (float)NJ_N) : 0.0f;
            nj_rdl[r] = dl;
{% end %}
            float sa = 0.0f, sb = 0.0f;
#pragma unroll 1
            for (unsigned e = 0; e < (unsigned)NJ_N; e++) {
{{ bwd_element("nj_sx[r * NJ_N + e]", "nj_sdy[r * NJ_N + e]", PARAM, "                ") }}
                (void)dz;
                sa += g;
                sb += g * xh;
            }
            nj_rm[r] = mean;
            nj_rr[r] = rstd;
            nj_rm1[r] = sa * (1.0f / (float)NJ_N);
            nj_rm2[r] = sb * (1.0f / (float)NJ_N);
        }
        __syncthreads();
{% if SLOTS then %}
        /* 3. the thread's column over its group's rows */
        if (cg < NJ_G) {
            const unsigned e = ce;
#pragma unroll 1
            for (unsigned r = cg; r < nr; r += NJ_G) {
                const float mean = nj_rm[r], rstd = nj_rr[r];
                (void)mean;
{% if F.center then %}
                const float dl = nj_rdl[r];
{% end %}
{{ bwd_element("nj_sx[r * NJ_N + e]", "nj_sdy[r * NJ_N + e]", PARAM, "                ", true) }}
                acc_g += dz * xh;
                acc_b += dz;
            }
        }
{% end %}
        /* 4. dx, the copy's vectors again */
#pragma unroll 1
        for (unsigned i = t; i < nv; i += {{ B }}u) {
            const unsigned r = i / NJ_NVR, e0 = (i % NJ_NVR) * NJ_VW;
            const nj_i64 k1 = r0 + r;
            const nj_i64 odx = {{ offset("dx", {1}, "k") }};
            const float mean = nj_rm[r], rstd = nj_rr[r], m1 = nj_rm1[r], m2 = nj_rm2[r];
            (void)mean;
            (void)m1;
{% if F.center then %}
            const float dl = nj_rdl[r];
{% end %}
            float out[NJ_VW];
#pragma unroll
            for (int j = 0; j < NJ_VW; j++) {
                const unsigned e = e0 + j;
{{ bwd_element("nj_sx[r * NJ_N + e]", "nj_sdy[r * NJ_N + e]", PARAM, "                ") }}
                out[j] = {{ bwd_dx_expr("g", "xh", "m1", "m2") }};
            }
            nj_store_vec<NJ_VW>(DX, odx + e0, out);
        }
    }
{% if SLOTS then %}
    /* the block's slot: each column's group partials added in group order */
    if (cg < NJ_G) {
        nj_cpart[cg * (unsigned)NJ_N + ce] = acc_g;
        nj_cpart[{{ G * N }}u + cg * (unsigned)NJ_N + ce] = acc_b;
    }
    __syncthreads();
    if (t < (unsigned)NJ_N) {
        float a = 0.0f, b = 0.0f;
#pragma unroll 1
        for (unsigned q = 0; q < NJ_G; q++) {
            a += nj_cpart[q * (unsigned)NJ_N + t];
            b += nj_cpart[{{ G * N }}u + q * (unsigned)NJ_N + t];
        }
        float *const WS = (float *)A.workspace{{ ws_plus("pgrad") }};
        WS[(nj_i64)blockIdx.x * NJ_N + t] = a;
{% if P.flags.bias then %}
        WS[((nj_i64)gridDim.x + blockIdx.x) * NJ_N + t] = b;
{% else %}
        (void)b; /* no beta rows without a bias (nj_plan_pgrad_slots) */
{% end %}
    }
{% else %}
    (void)acc_g;
    (void)acc_b;
    (void)ce;
    (void)cg;
{% end %}
}
