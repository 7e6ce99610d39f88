{# Forward, TILE family (planner_tile.c): rows of at most 64 bytes of x (or of up to 512 that are not
   whole sectors), axes [batch (kept), row (reduced)], a block per tile of P.rows_per_block
   consecutive rows, staged in dynamic shared memory.
   1. copy: the tile's vectors, vector i of row i / NVR (NVR vectors a row), P.vec elements each, P.unroll
      loads a thread issued before their stores: a warp reads consecutive vectors, so a packed batch is
      one run; with the residual, x + res as floats (and the sum's store, flag resout).
   2. statistics: a thread a row, two exact passes over its staged values shifted by its first element
      (prelude: nj_shift); the row's shift k, md and rstd to shared arrays; the saved statistics.
   3. normalize: the copy's vectors again, y stored a vector at a time.
   Shared memory: 3 floats a row (to a 16-byte boundary), then the rows. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{%
if P.rank ~= 2 or not P.axes[2].reduce then error("fwd_tile needs [batch, row]") end
if P.stage ~= 1 then error("fwd_tile: the tile is always staged (P.stage 1)") end
local F = P.flags
local has_param = F.scale or F.bias
local N = P.reduce_size
local R = P.rows_per_block
local B = P.block
local VW = P.vec
local U = P.unroll
if N % VW ~= 0 then error("fwd_tile: vec " .. VW .. " of rows of " .. N) end
local NVR = N // VW
local RAW = not F.residual
local NFL = (3 * R + 3) // 4 * 4
%}

{% fwd_typedefs() %}

#define NJ_N {{ N }}LL
#define NJ_R {{ R }}u
#define NJ_NVR {{ NVR }}u
#define NJ_VW {{ VW }}
typedef {{ RAW and "nj_tx" or "float" }} nj_tstage;

NJ_KERNEL({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_DYN_SHARED(float, nj_rk);                    /* a row's shift k */
    float *const nj_rmd = nj_rk + NJ_R;             /* its md */
    float *const nj_rrs = nj_rmd + NJ_R;            /* its rstd */
    nj_tstage *const nj_stage = (nj_tstage *)(nj_rk + {{ NFL }}); /* the rows, [row][element] */
    const unsigned t = threadIdx.x;
{% fwd_pointers() %}
{% if has_param then %}
{% param_table(F.scale, F.bias) %}
{% end %}
    const nj_i64 nrows = A.rows;
    {{ block_item("tile", "(nrows + NJ_R - 1) / NJ_R") }}
        const nj_i64 r0 = tile * NJ_R;
        const unsigned nr = nrows - r0 < (nj_i64)NJ_R ? (unsigned)(nrows - r0) : NJ_R;
        const unsigned nv = nr * NJ_NVR;
        /* 1. copy: P.unroll loads in flight, then their stores */
#pragma unroll 1
        for (unsigned i0 = t; i0 < nv; i0 += {{ U * B }}u) {
{% if RAW and VW > 1 then %}
            unsigned w[{{ U }}][nj_vec_io<NJ_VW, nj_tx>::W];
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const nj_i64 k1 = r0 + i / NJ_NVR;
                    nj_vec_io<NJ_VW, nj_tx>::fetch(X, {{ offset("x", {1}, "k") }} + (nj_i64)(i % NJ_NVR) * NJ_VW, w[q]);
                }
            }
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) nj_words<nj_vec_io<NJ_VW, nj_tx>::W>::store(nj_stage + (i / NJ_NVR) * NJ_N + (i % NJ_NVR) * NJ_VW, w[q]);
            }
{% else %}
            float v[{{ U }}][NJ_VW];
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const nj_i64 k1 = r0 + i / NJ_NVR;
                    const nj_i64 e = (nj_i64)(i % NJ_NVR) * NJ_VW;
                    nj_load_vec<NJ_VW>(X, {{ offset("x", {1}, "k") }} + e, v[q]);
{% if F.residual then %}
                    float rv[NJ_VW];
                    nj_load_vec<NJ_VW>(RES, {{ offset("res", {1}, "k") }} + e, rv);
#pragma unroll
                    for (int j = 0; j < NJ_VW; j++) v[q][j] += rv[j];
{% end %}
                }
            }
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < nv) {
                    const nj_i64 k1 = r0 + i / NJ_NVR;
                    const nj_i64 e = (nj_i64)(i % NJ_NVR) * NJ_VW;
                    (void)k1;
{% if F.resout then %}
                    const nj_i64 oresout = {{ offset("resout", {1}, "k") }};
{% fwd_resout("                    ", "e", VW > 1 and "v[q]" or "v[q][0]", VW > 1 and VW or nil) %}
{% end %}
                    nj_store_vec<NJ_VW>(nj_stage, (nj_i64)(i / NJ_NVR) * NJ_N + e, v[q]);
                }
            }
{% end %}
        }
        __syncthreads();
        /* 2. statistics: a thread a row */
#pragma unroll 1
        for (unsigned r = t; r < nr; r += {{ B }}u) {
            const nj_tstage *xr = nj_stage + r * NJ_N;
            const nj_shift sh = nj_shift_of(nj_to_f32(xr[0]), {{ F.center and "true" or "false" }});
{% if F.center then %}
            float s = 0.0f;
#pragma unroll 1
            for (unsigned e = 0; e < (unsigned)NJ_N; e++) s += (nj_to_f32(xr[e]) - sh.k) * sh.inv;
            const float mean_s = s * (1.0f / (float)NJ_N);
{% else %}
            const float mean_s = 0.0f;
{% end %}
            float s2 = 0.0f;
#pragma unroll 1
            for (unsigned e = 0; e < (unsigned)NJ_N; e++) s2 += nj_sq((nj_to_f32(xr[e]) - sh.k) * sh.inv - mean_s);
            const nj_i64 k1 = r0 + r;
            (void)k1;
{% fwd_finish("mean_s", "s2 * (1.0f / (float)NJ_N)") %}
{% fwd_save_stats("true", kept_axes()) %}
            nj_rk[r] = sh.k;
            nj_rmd[r] = md;
            nj_rrs[r] = rstd;
        }
        __syncthreads();
        /* 3. normalize, the copy's vectors again */
#pragma unroll 1
        for (unsigned i = t; i < nv; i += {{ B }}u) {
            const unsigned r = i / NJ_NVR, e0 = (i % NJ_NVR) * NJ_VW;
            const nj_i64 k1 = r0 + r;
            const nj_i64 oy = {{ offset("y", {1}, "k") }};
            float xv[NJ_VW], yv[NJ_VW];
{% if RAW and VW > 1 then %}
            {
                unsigned w[nj_vec_io<NJ_VW, nj_tx>::W];
                nj_words<nj_vec_io<NJ_VW, nj_tx>::W>::load(nj_stage + r * NJ_N + e0, w);
                nj_vec_io<NJ_VW, nj_tx>::convert(w, xv);
            }
{% else %}
            nj_load_vec<NJ_VW>(nj_stage, (nj_i64)r * NJ_N + e0, xv);
{% end %}
            nj_shift sh;
            sh.k = nj_rk[r];
            const float md = nj_rmd[r], rstd = nj_rrs[r];
            (void)sh;
            (void)md;
#pragma unroll
            for (int j = 0; j < NJ_VW; j++) {
                float u = {{ fwd_centered("xv[j]") }} * rstd;
{% fwd_epilogue("                ", F.scale and ptab_at(F.scale, false, "e0 + j"), F.bias and ptab_at(F.scale, true, "e0 + j"), {to = "yv[j]"}) %}
            }
            {{ fwd_out("(nj_i64)e0", "yv", VW) }}
        }
    }
}
