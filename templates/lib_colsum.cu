{# Library kernel NJ_LIB_COLSUM (src/planner.h): dgamma/dbeta as column sums of the partial rows a
   backward pass left in the workspace. One module per gamma dtype serves every plan: the extents and
   the layout come at run time in A.lib (launch.c), so no problem is baked in, and a pass's own source
   is a kernel smaller. P: the library environment (codegen_env.c: nj_codegen_push_lib_env).
   A block per CW columns (A.lib's cw: 32, 16, 8 or 4, nj_plan_add_colsum): lane l owns column
   CW * blockIdx.x + l % CW and, with the other lanes of its column, PW = 32 / CW parts at a time: warp w
   of the block's NW adds parts w * PW + l / CW, then NW * PW parts on, ...; the lanes of a column then
   add theirs (butterflies), and warp 0 the NW warp sums, in that order: a fixed split and order,
   deterministic without atomics. NW comes with the launch (blockDim.x / 32, at most the library table's
   block / 32): the plan sizes it to its parts, since each thread's chain of dependent loads is
   parts / (NW * PW) long; narrow blocks (CW < 32) spread few columns over more SMs. #}
{% include("prelude.cuh") %}
{% local B = P.block %}
typedef {{ need(P.ctype.param, "a gamma dtype") }} nj_tparam;

/* the next part a warp adds: nw parts on, `wrap` carrying the inner index over into the outer one */
#define NJ_COLSUM_STEP()                                                                                   \
    do {                                                                                                   \
        off += step;                                                                                       \
        s += step_s;                                                                                       \
        if (s >= inner) {                                                                                  \
            s -= inner;                                                                                    \
            off += wrap;                                                                                   \
        }                                                                                                  \
    } while (0)

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_red, {{ 2 * B }});
    const bool wa = A.dgamma != 0, wb = A.dbeta != 0; /* uniform across the grid */
    if (!wa && !wb) return;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    /* cw a power of two, 4 to 32: shifts and masks, not divisions (each cost NVRTC a few ms) */
    const int cw = (int)A.lib[{{ P.colsum.cw }}], lg = __ffs(cw) - 1, lc = lane & (cw - 1);
    const nj_i64 col = (nj_i64)blockIdx.x * cw + lc, ncols = A.lib[{{ P.colsum.ncols }}], nparts = A.lib[{{ P.colsum.nparts }}], inner = A.lib[{{ P.colsum.inner }}];
    const nj_i64 so = A.lib[{{ P.colsum.s_outer }}], si = A.lib[{{ P.colsum.s_inner }}]; /* strides of the outer and inner part index */
    const float *WS = (const float *)A.workspace + col * A.lib[{{ P.colsum.s_col }}];
    const float *PA = WS + A.lib[{{ P.colsum.base_a }}], *PB = WS + A.lib[{{ P.colsum.base_b }}];
    float a = 0.0f, b = 0.0f;
    if (col < ncols) {
        /* part i = (i / inner, i % inner) at (i / inner) * so + (i % inner) * si, advanced `stride`
         * parts a step by additions: `wrap` carries the inner index over into the outer one */
        const unsigned first = (unsigned)((wp << (5 - lg)) + (lane >> lg)), stride = (unsigned)(nw << (5 - lg));
        /* 32-bit divisions (a 64-bit one cost NVRTC ~15 ms): first and stride stay below 1024, so an
           inner count past 2^31 divides them as 2^31 - 1 does */
        const unsigned in32 = inner > 0x7fffffff ? 0x7fffffffu : (unsigned)inner;
        nj_i64 s = first % in32, off = (nj_i64)(first / in32) * so + s * si;
        const nj_i64 step_s = stride % in32, step = (nj_i64)(stride / in32) * so + step_s * si;
        const nj_i64 wrap = so - inner * si;
        nj_i64 i = first;
        /* four parts a step, eight loads: issued together (few columns, LayerNorm over C, make chains of
           hundreds of parts a warp), then added in part order: the order, and the bits, of one at a time.
           Eight parts spilled on sm_80 (32 registers at 1024 threads) */
#pragma unroll 1
        for (; i + 3 * stride < nparts; i += 4 * stride) {
{% for u = 0, 3 do %}
            const float a{{ u }} = wa ? PA[off] : 0.0f, b{{ u }} = wb ? PB[off] : 0.0f;
            NJ_COLSUM_STEP();
{% end %}
{% for u = 0, 3 do %}
            a += a{{ u }};
            b += b{{ u }};
{% end %}
        }
#pragma unroll 1
        for (; i < nparts; i += stride) {
            /* a stream only when asked for: a producer without a bias (RMSNorm slots) writes no B */
            if (wa) a += PA[off];
            if (wb) b += PB[off];
            NJ_COLSUM_STEP();
        }
    }
    /* the lanes of a column add their parts: butterflies over the part groups, every lane */
#pragma unroll 1
    for (int m = cw; m < 32; m <<= 1) {
        a += nj_shfl_xor(a, m);
        b += nj_shfl_xor(b, m);
    }
    nj_red[threadIdx.x] = a;
    nj_red[{{ B }} + threadIdx.x] = b;
    __syncthreads();
    if (wp == 0 && lane < cw && col < ncols) {
#pragma unroll 1
        for (int v = 1; v < nw; v++) {
            a += nj_red[v * 32 + lane];
            b += nj_red[{{ B }} + v * 32 + lane];
        }
        if (wa) nj_store_f32((nj_tparam *)A.dgamma, col, a);
        if (wb) nj_store_f32((nj_tparam *)A.dbeta, col, b);
    }
}
