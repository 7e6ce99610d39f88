{# Library kernel NJ_LIB_MERGE (src/planner.h): the pieces of split walks combined item by item, the
   split column walks' tiles and the channels-last images' groups, forward (the mean and variance of the
   scaled shifted values from each piece's (sum, m2); the normalizing kernel finishes them) and backward (the means of g and g * xhat from each piece's sums). One module a
   gamma dtype (it touches no gamma) serves every plan: the layout and extents come in A.lib.
   A block per 32 items: lane l owns item 32 * block + l, warp w of the block's NW adds parts w, w + NW,
   ... and warp 0 then the NW warp sums, in that order: a fixed split and order, deterministic. NW comes
   with the launch (blockDim.x / 32, at most the library table's block / 32), sized by the plan to the
   parts; a thread issues NJ_MU parts' loads before adding them in the sums' loop (the forward's deviations
   loop takes a part at a time: unrolled, it cost NVRTC 18 ms and the model no time). P.mode: the modes' numbers. #}
{% include("prelude.cuh") %}
{% local B = P.block %}

/* parts a thread loads before it adds them: with 8 warps and one part at a time, a thread's chain of
   dependent L2 loads was parts / 8 long (GroupNorm NHWC f16 4x1280x64x64: 228 tiles an image, a
   forward merge of ~11 us, most of it latency; the backward's 15) */
{% local MU = 4 %}
#define NJ_MU {{ MU }}
{# the NJ_MU parts' loads from part q on, written out (not a loop: the emulator's host compiler, whose
   code the performance model traces, then issues them as the GPU does) #}
{% local function load_parts(ind) %}
{{ ind }}const float *w = W + q * sp;
{% for u = 0, MU - 1 do %}
{{ ind }}va[{{ u }}] = w[0];
{{ ind }}vb[{{ u }}] = w[ob];
{% if u < MU - 1 then %}
{{ ind }}w += nws;
{% end %}
{% end %}
{% end %}

/* part q's term of m2: m2_q + n_q * (mean_q - mean)^2, n_q its element count (the planner leaves no
   part empty) */
NJ_DEVICE float nj_merge_dev(float sum, float m2, float nq, float mean)
{
    const float d = __fdividef(sum, nq) - mean;
    return m2 + nq * d * d;
}

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_red, {{ 2 * B }});
    NJ_SHARED(float, nj_mean, 32);
    const nj_i64 nitems = A.lib[{{ P.merge.nitems }}], first = nj_block_item() * 32;
    if (first >= nitems) return; /* a surplus block of a 2-D grid, whole: before any barrier */
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5, mode = (int)A.lib[{{ P.merge.mode }}];
    const nj_i64 item = first + lane, nparts = A.lib[{{ P.merge.nparts }}], radix = A.lib[{{ P.merge.radix }}];
    const int np = (int)nparts; /* at most NJ_SPLIT_MAX pieces or an image's tiles: well within an int */
    const bool ok = item < nitems;
    const nj_i64 hi = item / radix, lo = item - hi * radix;
    const float *W = (const float *)A.workspace + A.lib[{{ P.merge.in_base }}] + hi * A.lib[{{ P.merge.s_hi }}] + lo * A.lib[{{ P.merge.s_lo }}];
    const nj_i64 sp = A.lib[{{ P.merge.s_part }}], ob = A.lib[{{ P.merge.off_b }}], nws = nw * sp;
    const float inv_n = 1.0f / (float)A.lib[{{ P.merge.n }}];
    float a = 0.0f, b = 0.0f;
    if (ok) {
        /* the forward's m2 sum (b) is not used: the deviations are summed below */
        int q = wp;
#pragma unroll 1
        for (; q + (NJ_MU - 1) * nw < np; q += NJ_MU * nw) {
            float va[NJ_MU], vb[NJ_MU];
{% load_parts("            ") %}
#pragma unroll
            for (int u = 0; u < NJ_MU; u++) {
                a += va[u];
                b += vb[u];
            }
        }
#pragma unroll 1
        for (; q < np; q += nw) {
            a += W[q * sp];
            b += W[q * sp + ob];
        }
    }
    nj_red[threadIdx.x] = a;
    nj_red[{{ B }} + threadIdx.x] = b;
    __syncthreads();
    if (wp == 0) {
#pragma unroll 1
        for (int v = 1; v < nw; v++) {
            a += nj_red[v * 32 + lane];
            b += nj_red[{{ B }} + v * 32 + lane];
        }
        nj_mean[lane] = a * inv_n;
    }
    __syncthreads();
    float m2 = 0.0f;
    if (mode == {{ P.mode.stats }}) { /* uniform: the same for the whole grid */
        /* m2 = sum over the parts of m2_q + n_q * (mean_q - mean)^2: every term >= 0, nothing cancels */
        const float mean = nj_mean[lane];
        const nj_i64 plen = A.lib[{{ P.merge.plen }}], cmul = A.lib[{{ P.merge.cmul }}], total = A.lib[{{ P.merge.n }}] / cmul;
        /* every part counts plen * cmul elements but the last, which holds the rest */
        const float nq_full = (float)(plen * cmul), nq_last = (float)((total - (nparts - 1) * plen) * cmul);
        if (ok) {
            int q = wp;
#pragma unroll 1
            for (; q < np; q += nw) m2 += nj_merge_dev(W[q * sp], W[q * sp + ob], q == np - 1 ? nq_last : nq_full, mean);
        }
        nj_red[threadIdx.x] = m2; /* warp 0 read the sums before the barrier above */
        __syncthreads();
        if (wp == 0) {
#pragma unroll 1
            for (int v = 1; v < nw; v++) m2 += nj_red[v * 32 + lane];
        }
    }
    if (wp == 0 && ok) {
        float *O = (float *)A.workspace + A.lib[{{ P.merge.out_base }}] + hi * A.lib[{{ P.merge.o_hi }}] + lo * A.lib[{{ P.merge.o_lo }}];
        if (mode == {{ P.mode.sums }}) {
            O[0] = a * inv_n;
            O[A.lib[{{ P.merge.o_b }}]] = b * inv_n;
        } else {
            /* the moments of the scaled shifted values (prelude: nj_shift): the normalizing kernel, which
               knows the set's shift and scale, finishes mean and rstd */
            const bool c = mode == {{ P.mode.stats }};
            O[0] = c ? nj_mean[lane] : 0.0f;
            O[A.lib[{{ P.merge.o_b }}]] = (c ? m2 : a) * inv_n;
        }
    }
}
