{# Library kernel NJ_LIB_MERGE (src/planner.h): the pieces of split walks combined item by item, the
   split column walks' tiles and the channels-last images' groups, forward (the mean and variance of the
   scaled shifted values from each piece's (sum, m2); the normalizing kernel finishes them) and backward (the means of g and g * xhat from each piece's sums). One module a
   gamma dtype (it touches no gamma) serves every plan: the layout and extents come in A.lib.
   A block per 32 items: lane l owns item 32 * block + l, warp w adds parts w, w + 8, ... and warp 0 then
   the 8 warp sums, in that order: a fixed split and order, deterministic. P.mode: the modes' numbers. #}
{% include("prelude.cuh") %}
{% local B = P.block %}
{% local NW = B // 32 %}

NJ_KERNEL({{ P.launch[1].kernel }}, {{ B }})
{
    NJ_SHARED(float, nj_red, {{ 2 * B }});
    NJ_SHARED(float, nj_mean, 32);
    const nj_i64 nitems = A.lib[{{ P.merge.nitems }}], first = nj_block_item() * 32;
    if (first >= nitems) return; /* a surplus block of a 2-D grid, whole: before any barrier */
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, mode = (int)A.lib[{{ P.merge.mode }}];
    const nj_i64 item = first + lane, nparts = A.lib[{{ P.merge.nparts }}], radix = A.lib[{{ P.merge.radix }}];
    const bool ok = item < nitems;
    const nj_i64 hi = item / radix, lo = item - hi * radix;
    const float *W = (const float *)A.workspace + A.lib[{{ P.merge.in_base }}] + hi * A.lib[{{ P.merge.s_hi }}] + lo * A.lib[{{ P.merge.s_lo }}];
    const nj_i64 sp = A.lib[{{ P.merge.s_part }}], ob = A.lib[{{ P.merge.off_b }}];
    const float inv_n = 1.0f / (float)A.lib[{{ P.merge.n }}];
    float a = 0.0f, b = 0.0f;
    if (ok) {
#pragma unroll 1
        for (nj_i64 q = wp; q < nparts; q += {{ NW }}) {
            a += W[q * sp];
            b += W[q * sp + ob]; /* the forward's m2 sum is not used: the deviations are summed below */
        }
    }
    nj_red[threadIdx.x] = a;
    nj_red[{{ B }} + threadIdx.x] = b;
    __syncthreads();
    if (wp == 0) {
#pragma unroll 1
        for (int v = 1; v < {{ NW }}; v++) {
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
        if (ok) {
#pragma unroll 1
            for (nj_i64 q = wp; q < nparts; q += {{ NW }}) {
                const nj_i64 left = total - q * plen;
                const float nq = (float)((left < plen ? left : plen) * cmul); /* the planner leaves no part empty */
                const float d = __fdividef(W[q * sp], nq) - mean;
                m2 += W[q * sp + ob] + nq * d * d;
            }
        }
        nj_red[threadIdx.x] = m2; /* warp 0 read the sums before the barrier above */
        __syncthreads();
        if (wp == 0) {
#pragma unroll 1
            for (int v = 1; v < {{ NW }}; v++) m2 += nj_red[v * 32 + lane];
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
