{# Pieces the column templates share (fwd_column.cu, bwd_column.cu; planner: src/planner_column.c),
   rendered for a pipelined plan (P.lag) only. Included after lib_index.cuh. #}
{% if (P.lag or 0) > 0 then %}
/* O[i] = scale * (W[i] + W[stride + i] + ..., n rows) for i < WIDTH (a multiple of 4; W, stride and O
   16-byte aligned), in row order: thread t takes the 4 floats of quad t % NQ over the rows t / NQ,
   t / NQ + NPL, ... (16-byte L2 loads, 4 rows' in flight), then a thread a float adds the threads' in
   order: a fixed order. W: stored by other SMs' blocks in this launch. red: the block's threads x 4
   floats. Ends with a barrier: the caller may read O back, or publish it. */
template <int WIDTH>
NJ_DEVICE void nj_col_sum_rows(const float *W, int n, int stride, float *O, float scale, float *red)
{
    constexpr int NQ = WIDTH / 4, NPL = {{ P.block }} / NQ;
    const int j = threadIdx.x % NQ, pl = threadIdx.x / NQ;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1
    for (int r0 = pl; r0 < n; r0 += 4 * NPL) {
        float v[4][4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (r0 + u * NPL < n) nj_load_cg4(W + (r0 + u * NPL) * stride + 4 * j, v[u]);
#pragma unroll
        for (int u = 0; u < 4; u++)
            if (r0 + u * NPL < n) {
#pragma unroll
                for (int k = 0; k < 4; k++) a[k] += v[u][k];
            }
    }
#pragma unroll
    for (int k = 0; k < 4; k++) red[pl * WIDTH + 4 * j + k] = a[k];
    __syncthreads();
#pragma unroll 1
    for (int i = threadIdx.x; i < WIDTH; i += {{ P.block }}) {
        float s = 0.0f;
#pragma unroll 1
        for (int v = 0; v < NPL; v++) s += red[v * WIDTH + i];
        O[i] = s * scale;
    }
    __syncthreads();
}
{% end %}
