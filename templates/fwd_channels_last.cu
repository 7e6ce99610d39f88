{# Forward, CHANNELS_LAST family (src/planner_cl.c): GroupNorm over channels-last images. Canonical
   axes [batch | HW pixels: reduced | G groups: kept | C/G channels: reduced, stride 1]. An image is cut
   into S tiles of TP pixels; a block per (image, tile). Thread t < LT * R owns the CH
   channels c0 .. c0 + CH - 1 (c0 = (t % LT) * CH) of pixels t / LT, + R, ... of the tile, loaded
   P.vec at a time (CH in the main kernels, 1 in the unaligned variant). Threads past LT * R (the block
   rounded to whole warps) only join the reductions.
   Workspace per image: S tiles x G groups x (sum, m2), then G x (mean, rstd).
   nj_fwd_cl_stats: Welford per thread and channel (one reciprocal a pixel for all CH channels); the
     block combines (pixel row, channel) states into groups with the exact identity
     m2 = sum(m2_i + n_i * (mean_i - mean)^2) (nothing cancels), in a fixed order.
   Then the library's merge (lib_merge.cu) combines the S tiles of each (image, group) the same way.
   nj_fwd_cl_norm: y = act((x - mean) * rstd * gamma + beta), vector loads and stores; the image's first
     tile writes the saved statistics.
   One launch instead (no part role): nj_fwd_cl_fused, an image of one tile (S 1), its statistics in the
   block; nj_fwd_cl_cluster (sm_90), a thread-block cluster of the image's S tiles, each block staging its
   tile's x in shared memory as the statistics walk reads it, the tiles' group sums combined through
   distributed shared memory in tile order (as the library's merge would), then y from the staged tile.
   Pipelined (P.lag > 0; docs/architecture.md): nj_fwd_cl_zero clears a counter an image, then one launch
   nj_fwd_cl_norm whose blocks alternate a tile's statistics (as nj_fwd_cl_stats) and, P.lag tiles
   behind, a tile's y; the block of an image's last tile merges its tiles (nj_cl_merge, as the library's
   merge) into the means, and the normalizing blocks wait for it: x's second read finds it in L2. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{% include("cl_lib.cuh") %}
{%
local F = P.flags
cl_setup("fwd_channels_last")
-- one launch (the planner's choice for an image of one tile, no residual): the stats in the normalizing
-- kernel, which then reads its tile again (an L1 or L2 hit), not the image's x a second time from DRAM;
-- or a cluster of the image's tiles (CLUSTER), each staging its tile (STAGE; the unaligned variant, a
-- vector of one, reads its tile again instead)
local PIPE = P.lag > 0
local ONE = P.role.part == nil and not PIPE
FUSED = ONE and S == 1
CLUSTER = ONE and S > 1
STAGE = CLUSTER and P.stage == 1
-- the staged walks read the tile from shared memory: rolled (bwd_channels_last.cu: the other warps'
-- arithmetic hides those loads); unrolled twice, NVRTC took 1.2x as long (UNet's 4: 209 -> 174 ms)
if STAGE then PIXEL_UNROLL = "#pragma unroll 1" end
if ONE and (F.residual or F.resout) then error("fwd_channels_last: one launch, no residual") end
if CLUSTER and (S > 8 or (STAGE and VV < 2)) then error("fwd_channels_last: a cluster of 2 to 8 tiles, staged by vectors") end
if STAGE and (P.axes[2].stride.x ~= C or (P.unroll or 0) < 1) then error("fwd_channels_last: a staged tile needs dense pixels") end
local PSX, PSY = P.axes[2].stride.x, P.axes[2].stride.y
local PSR = F.residual and P.axes[2].stride.res or 0
local PSRO = F.resout and P.axes[2].stride.resout or 0
-- x (+ the residual) of pixel p into dst[q .. q + VV - 1]
local function load_x(dst, p)
  local t = {string.format("nj_load_vec<%d>(X, ox + (nj_i64)%s * %d + c0 + q, &%s[q]);", VV, p, PSX, dst)}
  if F.residual then
    t[#t + 1] = string.format("{ float r_[%d]; nj_load_vec<%d>(RES, ores + (nj_i64)%s * %d + c0 + q, r_); " ..
                              "for (int k = 0; k < %d; k++) %s[q + k] += r_[k]; }", VV, VV, p, PSR, VV, dst)
  end
  return table.concat(t, "\n                    ")
end
%}
{% fwd_typedefs() %}

{% cl_defines() %}
#define NJ_WS_IMAGE {{ P.ws_stride }} /* workspace floats per image: each tile's (sum, m2) per group, then the means */


/* part[R][C] (one value per pixel row and channel) -> out[G]: per channel over the rows, then per group
 * over its channels, in a fixed order. Starts and ends with a barrier, so callers reuse part and read
 * out at once. Called, not inlined: the stats kernel sums twice. */
NJ_DEVICE_CALL void nj_cl_group_sums(const float *part, float *chan, float *out)
{
    __syncthreads();
#pragma unroll 1
    for (int c = threadIdx.x; c < NJ_C; c += {{ B }}) {
        float s = 0.0f;
#pragma unroll 1
        for (int r = 0; r < NJ_R; r++) s += part[r * NJ_C + c];
        chan[c] = s;
    }
    __syncthreads();
#pragma unroll 1
    for (int g = threadIdx.x; g < NJ_G; g += {{ B }}) {
        float s = 0.0f;
#pragma unroll 1
        for (int j = 0; j < NJ_CG; j++) s += chan[g * NJ_CG + j];
        out[g] = s;
    }
    __syncthreads();
}

{# The tile statistics both the stats kernel and the fused kernel (a one-tile image) compute: the
   tile's per-group count-weighted sums and squared deviations into nj_gsum and nj_gm2 (the shared
   arrays stats_shared() declares), the pixels' shifts into nj_gk and nj_ginv. Needs X (and RES,
   RESOUT), t, r, c0, active, k1, tile and npx. #}
{% local function stats_shared() %}
    NJ_SHARED(float, nj_part, {{ R * C }});
    NJ_SHARED(float, nj_chan, {{ C }});
    NJ_SHARED(float, nj_gsum, {{ G }});
    NJ_SHARED(float, nj_gm2, {{ G }});
    NJ_SHARED(float, nj_gk, {{ G }});   /* each group's shift and 1 / scale, loaded once a block */
    NJ_SHARED(float, nj_ginv, {{ G }});
{% end %}
{% local function tile_stats() %}
        {{ cl_tile_offsets({"x", F.residual and "res" or nil, F.resout and "resout" or nil}) }}
{% if STAGE then %}
        /* the tile into the stage first: x's tile is one contiguous run (dense pixels), copied as vectors
           of P.vec, P.unroll of them in flight a thread, before any arithmetic waits on them */
        {
            const int nel = npx * NJ_C;
#pragma unroll 1
            for (int e0 = t * {{ VV }}; e0 < nel; e0 += {{ P.unroll * B * VV }}) {
                unsigned w_[{{ P.unroll }}][nj_vec_io<{{ VV }}, nj_tx>::W];
#pragma unroll
                for (int q = 0; q < {{ P.unroll }}; q++) {
                    const int e = e0 + q * {{ B * VV }};
                    if (e < nel) nj_vec_io<{{ VV }}, nj_tx>::fetch(X, ox + e, w_[q]);
                }
#pragma unroll
                for (int q = 0; q < {{ P.unroll }}; q++) {
                    const int e = e0 + q * {{ B * VV }};
                    if (e < nel) nj_words<nj_vec_io<{{ VV }}, nj_tx>::W>::store(nj_stage + e, w_[q]);
                }
            }
        }
        __syncthreads();
{% end %}
        /* shifts (prelude: nj_shift): each channel's pixel 0 (one vector, a line the image's first tile
           reads), one scale a thread from the largest; the group's own shift and scale at the combine */
        float n = 0.0f, mean[NJ_CH], m2[NJ_CH], kc[NJ_CH];
        const nj_i64 oimg = {{ offset("x", {1}, "k") }};
{% if F.residual then %}
        const nj_i64 rimg = {{ offset("res", {1}, "k") }};
{% end %}
        if (active) {
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {
                nj_load_vec<{{ VV }}>(X, oimg + c0 + q, &kc[q]);
{% if F.residual then %}
                float r_[{{ VV }}];
                nj_load_vec<{{ VV }}>(RES, rimg + c0 + q, r_);
#pragma unroll
                for (int k = 0; k < {{ VV }}; k++) kc[q + k] += r_[k];
{% end %}
            }
        } else {
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) kc[k] = 0.0f;
        }
        float kmax = 0.0f;
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) {
            mean[k] = m2[k] = 0.0f;
            kmax = fmaxf(kmax, fabsf(kc[k]));
        }
        const nj_shift st = nj_shift_of(kmax, false);
        /* the previous item's readers of nj_gk and nj_ginv passed nj_cl_group_sums' barriers */
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) {
            const nj_shift sg = nj_shift_of(nj_load_f32(X, oimg + g * NJ_CG){{ F.residual and " + nj_load_f32(RES, rimg + g * NJ_CG)" or "" }}, true);
            nj_gk[g] = sg.k;
            nj_ginv[g] = sg.inv;
        }
{{ PIXEL_UNROLL }}
        for (int p = active ? r : npx; p < npx; p += NJ_R) {
            float v[NJ_CH];
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {
{% if STAGE then %}
                unsigned w_[nj_vec_io<{{ VV }}, nj_tx>::W]; /* from the stage (the copy above) */
                nj_words<nj_vec_io<{{ VV }}, nj_tx>::W>::load(nj_stage + p * NJ_C + c0 + q, w_);
                nj_vec_io<{{ VV }}, nj_tx>::convert(w_, &v[q]);
{% else %}
                {{ load_x("v", "p") }}
{% fwd_resout("                ", "(nj_i64)p * " .. PSRO .. " + c0 + q", "&v[q]", VV) %}
{% end %}
            }
            n += 1.0f;
            const float inv = __fdividef(1.0f, n);
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
                const float vs = (v[k] - kc[k]) * st.inv;
                const float d = vs - mean[k];
                mean[k] += d * inv;
                m2[k] += d * (vs - mean[k]);
            }
        }
        __syncthreads(); /* nj_gk, nj_ginv */
        if (active) {
            /* into the group's units: shift k_g (its first channel at pixel 0), scale s_g */
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
                const int g = (c0 + k) / NJ_CG;
                const float gk = nj_gk[g], ginv = nj_ginv[g];
                const float f = st.s * ginv;
                mean[k] = (kc[k] - gk) * ginv + mean[k] * f;
                m2[k] *= f * f;
                nj_part[r * NJ_C + c0 + k] = n * mean[k];
            }
        }
        nj_cl_group_sums(nj_part, nj_chan, nj_gsum);
        const float inv = __fdividef(1.0f, (float)(npx * NJ_CG));
        if (active) {
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
                const float d = mean[k] - nj_gsum[(c0 + k) / NJ_CG] * inv;
                nj_part[r * NJ_C + c0 + k] = m2[k] + n * d * d;
            }
        }
        nj_cl_group_sums(nj_part, nj_chan, nj_gm2);
{% end %}
{% local function stats_write() %}
        float *WS = (float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("parts") }} + tile * (2 * NJ_G);
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) {
            WS[2 * g] = nj_gsum[g];
            WS[2 * g + 1] = nj_gm2[g];
        }
{% end %}
{% if P.role.part then %}
/* plain launch bounds: at most 64 registers on sm_80 leave room for two ~512-thread blocks an SM (no
 * spills: it holds two Welford values a channel, not the normalize's constants and activation) */
NJ_KERNEL({{ P.role.part.kernel }}, {{ B }})
{
    nj_grid_enter();
{% stats_shared() %}
    const nj_tx *X = (const nj_tx *)A.x;
{% if F.residual then %}
    const nj_tres *RES = (const nj_tres *)A.res;
{% end %}
{% if F.resout then %}
    nj_tresout *RESOUT = (nj_tresout *)A.res_out;
{% end %}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
    {{ block_item("w", "A.rows * NJ_S") }}
        {{ cl_tile_item() }}
{% tile_stats() %}
{% stats_write() %}
    }
}

{% end %}
/* NJ_KERNEL_REGS: the per-channel constants and the activation spilled at sm_80's default 64 registers
   (a cluster kernel: one block an SM as well). Blocks of at most 512 threads are held to two an SM
   (64 registers at 480 threads): at 66 one fit, and a GroupNorm NHWC f16 640 x 8 x 8 forward (a block an
   image) was latency-bound in its last wave (72.8% of copy in the model, 84.5 at two); NVRTC 13 spills
   none of the manifests' kernels at sm_80 or sm_90 so (test_codegen). Not a fused image past 96 KB: its
   second read of the image hits the L2 while the blocks resident read no more than half of it between
   (320 x 16 x 16 f16 at two: 1.07x the ideal DRAM bytes in the model) */
{%
local TWO = B <= 512 and not CLUSTER and (not FUSED or HW * C * (P.dtype.x == "f32" and 4 or 2) <= 96 * 1024)
%}
{% local function norm_item() %}
        {{ cl_tile_item() }}
{% if ONE then %}
        /* the image is this tile (or, CLUSTER, this cluster's tiles): its statistics here, finished as the
           library's merge finishes its parts */
        __syncthreads(); /* the previous item's readers are done with nj_gk */
        {
{% tile_stats() %}
        }
        const float inv_n = 1.0f / (float)NJ_N;
{% if CLUSTER then %}
        /* every tile's (sum, m2) about its own mean, in the groups' units: m2 = sum(m2_t + n_t * d_t^2),
           tile order, the same in every block of the cluster */
        nj_cluster_sync();
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) {
            float sum = 0.0f;
#pragma unroll 1
            for (int r = 0; r < NJ_S; r++) sum += nj_cluster_map(nj_gsum, (unsigned)r)[g];
            const float mean = sum * inv_n;
            float m2 = 0.0f;
#pragma unroll 1
            for (int r = 0; r < NJ_S; r++) {
                const int np_ = nj_cl_tile_pixels(r);
                if (np_ <= 0) continue;
                const float nr = (float)(np_ * NJ_CG), d = __fdividef(nj_cluster_map(nj_gsum, (unsigned)r)[g], nr) - mean;
                m2 += nj_cluster_map(nj_gm2, (unsigned)r)[g] + nr * d * d;
            }
            nj_csum[g] = sum;
            nj_cm2[g] = m2;
        }
        nj_cluster_sync(); /* the tiles' sums are read: blocks may exit; nj_csum and nj_cm2 are set */
{% end %}
{% else %}
        const float *ST = (const float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("means") }};
{% if PIPE then %}
        /* the image's merged moments, once the block of its last tile has written them */
        if (t == 0) nj_pipe_wait((const int *)((const float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("flags") }}), NJ_S + 1);
{% end %}
{% end %}
        /* the group's shift and scale (its first channel at pixel 0) finish the merged moments */
        const nj_i64 oimg = {{ offset("x", {1}, "k") }};
{% if F.residual then %}
        const nj_i64 rimg = {{ offset("res", {1}, "k") }};
{% end %}
        __syncthreads(); /* the previous item's readers are done with nj_gk .. nj_gr */
#pragma unroll 1
        for (int k3 = t; k3 < NJ_G; k3 += {{ B }}) {
            const nj_shift sh = nj_shift_of(nj_load_f32(X, oimg + k3 * NJ_CG){{ F.residual and " + nj_load_f32(RES, rimg + k3 * NJ_CG)" or "" }}, true);
{% if ONE then %}
{% local GS, GM = CLUSTER and "nj_csum" or "nj_gsum", CLUSTER and "nj_cm2" or "nj_gm2" %}
            const float gmean = {{ GS }}[k3] * inv_n, gd = __fdividef({{ GS }}[k3], (float)NJ_N) - gmean;
{% fwd_finish("gmean", "(" .. GM .. "[k3] + (float)NJ_N * gd * gd) * inv_n") %}
{% else %}
{% if PIPE then %}
            float2 st2; /* stored by another SM's block in this launch: from L2 */
            st2.x = nj_load_cg(ST + 2 * k3);
            st2.y = nj_load_cg(ST + 2 * k3 + 1);
{% else %}
            const float2 st2 = *(const float2 *)(ST + 2 * k3); /* one 8-byte load: whole sectors a warp */
{% end %}
{% fwd_finish("st2.x", "st2.y") %}
{% end %}
            nj_gk[k3] = sh.k;
            nj_gm[k3] = md;
            nj_gr[k3] = rstd;
{% if F.stats then %}
            if (tile == 0) { /* the image's first tile writes its saved statistics */
                const nj_i64 os = {{ offset("stats", {1, 3}, "k") }};
                A.mean[os] = sh.k + md;
                A.rstd[os] = rstd;
            }
{% end %}
        }
        __syncthreads();
        /* this thread's channels: shift, mean of x - shift, rstd * gamma and beta (gamma and beta: L1 hits
           after the first tile) */
        float kk[NJ_CH], mk[NJ_CH], sk[NJ_CH];
{% if F.scale then %}
#pragma unroll
        for (int q = 0; q < NJ_CH; q += {{ VV }}) nj_load_vec<{{ VV }}>(GAMMA, c0 + q, &sk[q]);
{% end %}
{% if F.bias then %}
        float bk[NJ_CH];
#pragma unroll
        for (int q = 0; q < NJ_CH; q += {{ VV }}) nj_load_vec<{{ VV }}>(BETA, c0 + q, &bk[q]);
{% end %}
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) {
            const int g = (c0 + k) / NJ_CG;
            kk[k] = nj_gk[g];
            mk[k] = nj_gm[g];
            sk[k] = nj_gr[g]{{ F.scale and " * sk[k]" or "" }};
        }
        {{ cl_tile_offsets({"x", "y", F.residual and "res" or nil}) }}
{{ PIXEL_UNROLL }}
        for (int p = active ? r : npx; p < npx; p += NJ_R) {
{% local function affine(o, k) %}
                float u = ((o_[{{ o }}] - kk[{{ k }}]) - mk[{{ k }}]) * sk[{{ k }}];
{% fwd_epilogue("                ", nil, F.bias and ("bk[" .. k .. "]"), {to = "o_[" .. o .. "]"}) %}
{% end %}
{% if VV > 1 then %}
            float o_[NJ_CH];
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {
{% if STAGE then %}
                unsigned w_[nj_vec_io<{{ VV }}, nj_tx>::W];
                nj_words<nj_vec_io<{{ VV }}, nj_tx>::W>::load(nj_stage + p * NJ_C + c0 + q, w_);
                nj_vec_io<{{ VV }}, nj_tx>::convert(w_, &o_[q]);
{% else %}
                {{ load_x("o_", "p") }}
{% end %}
            }
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
{% affine("k", "k") %}
            }
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {{ fwd_out("(nj_i64)p * " .. PSY .. " + c0 + q", "&o_[q]", VV) }}
{% else %}
            /* a channel at a time (unaligned variant): no vector of values held across the activations */
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
                float o_[1] = {nj_load_f32(X, ox + (nj_i64)p * {{ PSX }} + c0 + k){{ F.residual and (" + nj_load_f32(RES, ores + (nj_i64)p * " .. PSR .. " + c0 + k)") or "" }}};
{% affine(0, "k") %}
                {{ fwd_out("(nj_i64)p * " .. PSY .. " + c0 + k", "o_[0]") }}
            }
{% end %}
        }
{% end %}
{% if PIPE then %}
/* The image's tiles' (sum, m2) per group combined into its (mean, m2 / n) per group, in the library
   merge's order (lib_merge.cu): lane l of each warp owns group g0 + l, warp w adds tiles w, w + NW, ...,
   warp 0 then the warps' sums; written in O's [group][2]. W: tile t's pairs at t * 2G, read from L2 (the
   other tiles' blocks stored them in this launch). red: B + 32 floats of shared memory. */
NJ_DEVICE_CALL void nj_cl_merge(const float *W, float *O, float *red)
{
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    constexpr int NWP = {{ B // 32 }};
    const float inv_n = 1.0f / (float)NJ_N;
#pragma unroll 1
    for (int g0 = 0; g0 < NJ_G; g0 += 32) {
        const int g = g0 + lane;
        const bool ok = g < NJ_G;
        float a = 0.0f;
        if (ok) {
#pragma unroll 4
            for (int q = wp; q < NJ_S; q += NWP) a += nj_load_cg(W + q * (2 * NJ_G) + 2 * g);
        }
        red[threadIdx.x] = a;
        __syncthreads();
        if (wp == 0) {
#pragma unroll 1
            for (int v = 1; v < NWP; v++) a += red[v * 32 + lane];
            red[{{ B }} + lane] = a * inv_n;
        }
        __syncthreads();
        const float mean = red[{{ B }} + lane];
        float m2 = 0.0f;
        if (ok) {
#pragma unroll 1
            for (int q = wp; q < NJ_S; q += NWP) {
                const float nq = (float)(nj_cl_tile_pixels(q) * NJ_CG);
                const float d = __fdividef(nj_load_cg(W + q * (2 * NJ_G) + 2 * g), nq) - mean;
                m2 += nj_load_cg(W + q * (2 * NJ_G) + 2 * g + 1) + nq * d * d;
            }
        }
        __syncthreads(); /* warp 0 read the sums */
        red[threadIdx.x] = m2;
        __syncthreads();
        if (wp == 0) {
#pragma unroll 1
            for (int v = 1; v < NWP; v++) m2 += red[v * 32 + lane];
            if (ok) {
                O[2 * g] = mean;
                O[2 * g + 1] = m2 * inv_n;
            }
        }
        __syncthreads();
    }
}

{{ pipe_zero_kernel("A.rows", "(float *)A.workspace + i * NJ_WS_IMAGE" .. ws_plus("flags")) }}

/* Tiles' statistics and tiles' y in pipe_item's order (lib_index.cuh) */
{% if TWO then %}
NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, 2)
{% else %}
NJ_KERNEL_REGS({{ P.role.main.kernel }}, {{ B }})
{% end %}
{
    nj_grid_enter();
{% stats_shared() %}
    NJ_SHARED(float, nj_gm, {{ G }});
    NJ_SHARED(float, nj_gr, {{ G }});
    NJ_SHARED(float, nj_red, {{ B + 32 }});
{% fwd_pointers() %}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
    {{ pipe_item("A.rows * NJ_S", "w", "norm") }}
    if (!norm) {
        {{ cl_tile_item() }}
        {
{% tile_stats() %}
        }
{% stats_write() %}
{% cl_pipe_merge("nj_cl_merge((const float *)A.workspace + k1 * NJ_WS_IMAGE" .. ws_plus("parts") ..
                  ", (float *)A.workspace + k1 * NJ_WS_IMAGE" .. ws_plus("means") .. ", nj_red)") %}
    } else {
{% norm_item() %}
    }
}
{% else %}
{% if CLUSTER then %}
NJ_CLUSTER_KERNEL({{ P.role.main.kernel }}, {{ B }}, {{ S }}, 1, 1)
{% elseif TWO then %}
NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, 2)
{% else %}
NJ_KERNEL_REGS({{ P.role.main.kernel }}, {{ B }})
{% end %}
{
    nj_grid_enter();
    /* each group's shift, mean of x - shift and rstd, finished once a block: a thread's CH channels
       read them from shared memory, not CH shift loads and 2 * CH workspace loads of their own */
{% if ONE then %}
{% stats_shared() %}
{% else %}
    NJ_SHARED(float, nj_gk, {{ G }});
{% end %}
{% if CLUSTER then %}
    NJ_SHARED(float, nj_csum, {{ G }}); /* the image's group sums, combined from the cluster's tiles */
    NJ_SHARED(float, nj_cm2, {{ G }});
{% end %}
{% if STAGE then %}
    NJ_DYN_SHARED(nj_tx, nj_stage); /* the tile's x, [pixel][channel] */
{% end %}
    NJ_SHARED(float, nj_gm, {{ G }});
    NJ_SHARED(float, nj_gr, {{ G }});
{% fwd_pointers() %}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
    {{ main_item("w", "A.rows * NJ_S") }}
{% norm_item() %}
    }
}
{% end %}
