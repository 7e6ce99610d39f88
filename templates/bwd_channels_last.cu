{# Backward, CHANNELS_LAST family (src/planner_cl.c): GroupNorm over channels-last images, the tiles of
   fwd_channels_last.cu (S tiles of TP pixels an image; thread t < LT * R owns channels c0 .. c0 + CH - 1
   of pixels t / LT, + R, ... of its tile, loaded P.vec at a time). Per element (bwd_lib.cuh):
   xhat = (x - mean) * rstd, dz = dy * act'(z), g = dz * gamma; dx = rstd * (g - mean(g) - xhat *
   mean(g * xhat)) over the group; dgamma = sum(dz * xhat), dbeta = sum(dz) over images and pixels.
   Workspace per image: S x G x (sum g, sum g * xhat), G x (their means), then with gamma/beta
   S x C x (sum dz * xhat, sum dz); the cluster kernel's: C x (sum dz * xhat, sum dz), its tiles' added.
   nj_bwd_cl_part: the tile's sums, thread -> smem (pixel row, channel) -> channel (-> group), in order.
   The library's merge (lib_merge.cu) adds each (image, group)'s tile sums in order into its means.
   nj_bwd_cl_dx: dx of the tile.
   With gamma/beta, the library's column sum (lib_colsum.cu) adds every (image, tile) partial of a
   channel in a fixed order: deterministic without atomics.
   Pipelined (P.lag > 0): nj_bwd_cl_zero, then nj_bwd_cl_dx alone does both kernels' work, a tile's sums
   and another's dx, the merge in the block of an image's last tile (nj_cl_merge_sums). #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{% include("cl_lib.cuh") %}
{% include("cluster_lib.cuh") %}
{%
local F = P.flags
cl_setup("bwd_channels_last")
local PARAMS = P.pgrad == "fused" -- the tiles' dgamma/dbeta partials, added by the column sum
-- one launch (no part role): a thread-block cluster of the image's S tiles (sm_90), each block staging
-- its tile's x and dy (STAGE; the unaligned variant reads them again), the tiles' group sums combined
-- through distributed shared memory instead of the workspace and the library's merge; S = 1: an image
-- whose x and dy fit one block, no cluster (any architecture)
-- pipelined (P.lag > 0; docs/architecture.md): one launch whose blocks alternate a tile's sums (the
-- part kernel's) and, P.lag tiles behind, a tile's dx; the image's last tile's block merges its tiles
-- (nj_cl_merge_sums, as the library's merge in SUMS mode) and the dx blocks wait for it
PIPE = P.lag > 0
CLUSTER = P.role.part == nil and not PIPE
STAGE = CLUSTER and P.stage == 1
-- The staged walks read the tile from shared memory: rolled, their loads wait ~30 cycles, which the
-- other warps' arithmetic (an activation's derivative over CH channels a pixel) hides; unrolled twice
-- (cl_setup's rule, for global loads) NVRTC took 1.24x as long (UNet's 7 staged backwards: 173 -> 140 ms)
if STAGE then PIXEL_UNROLL = "#pragma unroll 1" end
if CLUSTER and (S < 1 or S > 8 or (STAGE and VV < 2)) then error("bwd_channels_last: a cluster of 1 to 8 tiles, staged by vectors") end
if STAGE and (P.axes[2].stride.x ~= P.axes[3].extent * P.axes[4].extent or P.axes[2].stride.dy ~= P.axes[3].extent * P.axes[4].extent) then
  error("bwd_channels_last: a staged tile needs dense pixels") end
local BETA_USED = F.bias and P.act ~= "none"
local PS = {x = P.axes[2].stride.x, dy = P.axes[2].stride.dy, dx = P.axes[2].stride.dx}
%}
{{ bwd_typedefs() }}

{% cl_defines() %}
/* an image's tile t: pairs (sum g, sum g * xhat) of its groups at 4G t, then (sum (x - mean) * rstd,
   unused) at 4G t + 2G (the saved mean's correction, bwd_lib.cuh); the means' pairs alike */
{% if not CLUSTER then %}
#define NJ_WS_MEANS {{ P.ws.means.fixed }} /* workspace floats of an image before the group means */
{% end %}
{% if PARAMS then %}
#define NJ_WS_CHANS {{ P.ws.pgrad.fixed }} /* ... before the per-channel partials */
{% end %}
#define NJ_WS_IMAGE {{ P.ws_stride }}
{% if CLUSTER then %}
#define NJ_CPR {{ (C + S - 1) // S }} /* channels whose pairs a tile adds over the cluster */
{% end %}

/* part[R][C] -> chan[C]: per channel over the pixel rows, in order. Barriers on both sides: callers
 * rewrite part and read chan at once. Called, not inlined: the part kernel sums four times. */
NJ_DEVICE_CALL void nj_cl_rows(const float *part, float *chan)
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
}

{% local function load_params() %}
{% if F.scale then %}
    float gk[NJ_CH];
#pragma unroll
    for (int q = 0; q < NJ_CH; q += {{ VV }}) nj_load_vec<{{ VV }}>(GAMMA, c0 + q, &gk[q]);
{% end %}
{% if BETA_USED then %}
    float bk[NJ_CH];
#pragma unroll
    for (int q = 0; q < NJ_CH; q += {{ VV }}) nj_load_vec<{{ VV }}>(BETA, c0 + q, &bk[q]);
{% end %}
{% end %}
{% local function load_stats(guard) %}
        /* the forward's statistics of the image's groups, loaded once a block into nj_gmean and nj_grstd
           (declared by the kernel), then this thread's channels' from there. The first barrier: the
           previous item's readers are done. */
        __syncthreads();
#pragma unroll 1
        for (int k3 = t; k3 < NJ_G; k3 += {{ B }}) {
            const nj_i64 os = {{ offset("stats", {1, 3}, "k") }};
            nj_gmean[k3] = A.mean[os];
            nj_grstd[k3] = A.rstd[os];
{% if guard then %}
{{ guard }}
{% end %}
        }
        __syncthreads();
        float mk[NJ_CH], rk[NJ_CH];
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) {
            mk[k] = nj_gmean[(c0 + k) / NJ_CG];
            rk[k] = nj_grstd[(c0 + k) / NJ_CG];
        }
{% end %}
{% local function load_xdy() %}
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {
                nj_load_vec<{{ VV }}>(X, ox + (nj_i64)p * {{ PS.x }} + c0 + q, &xv_[q]);
                nj_load_vec<{{ VV }}>(DY, ody + (nj_i64)p * {{ PS.dy }} + c0 + q, &dv_[q]);
            }
{% end %}
{% local function element(xe, de, k, ind) %}
{% BWD_DL = DLK and ("dlk[" .. k .. "]") or nil %}
{{ ind }}const float mean = mk[{{ k }}], rstd = rk[{{ k }}];
{{ bwd_element(xe, de, {g = "gk[" .. k .. "]", b = "bk[" .. k .. "]"}, ind) }}
{% end %}
{% local function exact_dl() %}
        /* With an activation, dz depends on xhat itself, so the first-order correction of the saved mean
           (the dx kernel's) is not enough past |mean| / std ~ 1e3: where a group of this image needs it
           (bwd_lib.cuh: NJ_FIX_RATIO, a test uniform over the block), the block sums (x - mean) * rstd
           over the whole image first, reading the image's x once per tile: a rare regime's cost, none
           for ordinary data. Its dl corrects this tile's xhat; the sums below add it back, so that the
           merge and the dx kernel read what they read without it. */
        bool fix = false;
#pragma unroll 1
        for (int g = 0; g < NJ_G; g++) fix = fix || fabsf(nj_gmean[g]) * nj_grstd[g] > NJ_FIX_RATIO;
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) dlk[k] = 0.0f;
        if (fix) {
            float d[NJ_CH];
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) d[k] = 0.0f;
            const nj_i64 oi = {{ offset("x", {1}, "k") }};
#pragma unroll 1
            for (int tl = 0; tl < NJ_S; tl++) {
                const int np = nj_cl_tile_pixels(tl);
#pragma unroll 1
                for (int p = active ? r : np; p < np; p += NJ_R) {
#pragma unroll /* d[] stays in registers only with k known at compile time */
                    for (int k = 0; k < NJ_CH; k++)
                        d[k] += (nj_load_f32(X, oi + ((nj_i64)tl * NJ_TP + p) * {{ PS.x }} + c0 + k) - mk[k]) * rk[k];
                }
            }
            if (active) {
#pragma unroll
                for (int k = 0; k < NJ_CH; k++) nj_part[r * NJ_C + c0 + k] = d[k];
            }
            nj_cl_rows(nj_part, nj_chan);
#pragma unroll 1
            for (int g = t; g < NJ_G; g += {{ B }}) {
                float s = 0.0f;
#pragma unroll 1
                for (int j = 0; j < NJ_CG; j++) s += nj_chan[g * NJ_CG + j];
                nj_part[g] = s * (1.0f / (float)NJ_N);
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < NJ_CH; k++)
                if (fabsf(mk[k]) * rk[k] > NJ_FIX_RATIO) dlk[k] = nj_part[(c0 + k) / NJ_CG];
            __syncthreads(); /* nj_part is rewritten below */
        }
{% end %}
{#- x, dy of pixel p into xv_, dv_ from the stage #}
{% local CU = P.unroll %}
{#- the copy's vectors: P.copy_vec (16 bytes) where the planner widened them past the compute's #}
{% local CV = P.copy_vec > 0 and P.copy_vec or VV %}
{% if CLUSTER and CV ~= VV and C % CV ~= 0 then error("bwd_channels_last: channel rows of whole copy vectors") end %}
{% local function stage_xdy() %}
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) {
                unsigned wx_[nj_vec_io<{{ VV }}, nj_tx>::W], wd_[nj_vec_io<{{ VV }}, nj_tdy>::W];
                nj_words<nj_vec_io<{{ VV }}, nj_tx>::W>::load(nj_sx + p * NJ_C + c0 + q, wx_);
                nj_words<nj_vec_io<{{ VV }}, nj_tdy>::W>::load(nj_sd + p * NJ_C + c0 + q, wd_);
                nj_vec_io<{{ VV }}, nj_tx>::convert(wx_, &xv_[q]);
                nj_vec_io<{{ VV }}, nj_tdy>::convert(wd_, &dv_[q]);
            }
{% end %}
{# dx of the block's tile: x and dy from the stage (STAGE) or global memory; m1k, m2k, dlk in scope #}
{% local function dx_walk() %}
{{ PIXEL_UNROLL }}
        for (int p = active ? r : npx; p < npx; p += NJ_R) {
{% if VV > 1 then %}
            float xv_[NJ_CH], dv_[NJ_CH], o_[NJ_CH];
{% if STAGE then %}
{% stage_xdy() %}
{% else %}
{% load_xdy() %}
{% end %}
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
{% element("xv_[k]", "dv_[k]", "k", "                ") %}
                o_[k] = {{ bwd_dx_expr("g", "xh", "m1k[k]", "m2k[k]") }};
            }
#pragma unroll
            for (int q = 0; q < NJ_CH; q += {{ VV }}) nj_store_vec<{{ VV }}>(DX, odx + (nj_i64)p * {{ PS.dx }} + c0 + q, &o_[q]);
{% else %}
            /* a channel at a time (unaligned variant): no vectors held across the activations */
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
                const float xs = nj_load_f32(X, ox + (nj_i64)p * {{ PS.x }} + c0 + k);
                const float ds = nj_load_f32(DY, ody + (nj_i64)p * {{ PS.dy }} + c0 + k);
{% element("xs", "ds", "k", "                ") %}
                nj_store_f32(DX, odx + (nj_i64)p * {{ PS.dx }} + c0 + k, {{ bwd_dx_expr("g", "xh", "m1k[k]", "m2k[k]") }});
            }
{% end %}
        }
{% end %}
{# A thread's per-channel sums arr[] (its pixel rows and channels) -> per group (to_groups: into dst, a C
   lvalue of g) or per channel (to_channels below: the tile's dgamma/dbeta partial pairs; to_pairs:
   the cluster kernel's, into nj_pc for the cluster's combination). chan_sums: arr[] over the pixel rows
   into nj_chan. #}
{% local function chan_sums(arr) %}
        if (active) {
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) nj_part[r * NJ_C + c0 + k] = {{ arr }}[k];
        }
        nj_cl_rows(nj_part, nj_chan);
{% end %}
{% local function to_groups(arr, dst) %}
{% chan_sums(arr) %}
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) {
            float s = 0.0f;
#pragma unroll 1
            for (int j = 0; j < NJ_CG; j++) s += nj_chan[g * NJ_CG + j];
            {{ dst }} = s;
        }
{% end %}
{% local function to_pairs(arr, slot) %}
{% chan_sums(arr) %}
#pragma unroll 1
        for (int c = t; c < NJ_C; c += {{ B }}) nj_pc[2 * c + {{ slot }}] = nj_chan[c];
{% end %}
{# the tile's dgamma/dbeta partial pair a channel from p1[], p2[]: p1's over the pixel rows into nj_chan,
   p2's added where the pair is stored, one 8-byte store a channel (two 4-byte passes a pair apart wrote
   each sector twice, half of it each time) #}
{% local function to_channels() %}
{% chan_sums("p1") %}
        if (active) {
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) nj_part[r * NJ_C + c0 + k] = p2[k];
        }
        __syncthreads();
#pragma unroll 1
        for (int c = t; c < NJ_C; c += {{ B }}) {
            float s = 0.0f;
#pragma unroll 1
            for (int r2 = 0; r2 < NJ_R; r2++) s += nj_part[r2 * NJ_C + c];
            ((float2 *)(WS + NJ_WS_CHANS))[tile * NJ_C + c] = make_float2(nj_chan[c], s);
        }
{% end %}
{% if not CLUSTER then %}
{% DLK = P.act ~= "none" %}
/* two resident blocks an SM on sm_90 and later with a cheap activation derivative: at one (ptxas took
   ~88 registers) the kernel was latency-bound; sm_80's ptxas, and sm_90's with gelu, spill at 64 */
{% local TWO = (P.act == "none" or P.act == "relu" or P.act == "silu") and B <= 512 %}
#if defined(NJ_EMU) || __CUDA_ARCH__ < 900 || !{{ TWO and 1 or 0 }}
#define NJ_CL_PART_KERNEL(name, b) NJ_KERNEL_REGS(name, b)
#else
#define NJ_CL_PART_KERNEL(name, b) extern "C" __global__ void __launch_bounds__(b, 2) name(const nj_kargs A)
#endif
{% end %}
{% local function part_item() %}
{% DLK = P.act ~= "none" %}
        {{ cl_tile_item() }}
        {{ cl_tile_offsets({"x", "dy"}) }}
{% load_stats() %}
{% if DLK then %}
        float dlk[NJ_CH];
{% exact_dl() %}
{% end %}
        float a1[NJ_CH], a2[NJ_CH], a3[NJ_CH]{{ PARAMS and ", p1[NJ_CH], p2[NJ_CH]" or "" }};
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) a1[k] = a2[k] = a3[k] = {{ PARAMS and "p1[k] = p2[k] = " or "" }}0.0f;
{{ PIXEL_UNROLL }}
        for (int p = active ? r : npx; p < npx; p += NJ_R) {
            float xv_[NJ_CH], dv_[NJ_CH];
{% load_xdy() %}
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
{% element("xv_[k]", "dv_[k]", "k", "                ") %}
{% local XU = DLK and "(xh + dlk[k])" or "xh" %}
                a1[k] += g;
                a2[k] += g * {{ XU }};
                a3[k] += {{ XU }};
{% if PARAMS then %}
                p1[k] += dz * {{ XU }};
                p2[k] += dz;
{% end %}
            }
        }
        float *WS = (float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("parts") }};
{% to_groups("a1", "WS[tile * 4 * NJ_G + 2 * g]") %}
{% to_groups("a2", "WS[tile * 4 * NJ_G + 2 * g + 1]") %}
{% to_groups("a3", "WS[tile * 4 * NJ_G + 2 * (NJ_G + g)]") %}
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) WS[tile * 4 * NJ_G + 2 * (NJ_G + g) + 1] = 0.0f; /* merged, unused */
{% if PARAMS then %}
{% to_channels() %}
{% end %}
{% end %}
{% local function dx_item() %}
{% DLK = true %}
        {{ cl_tile_item() }}
        {{ cl_tile_offsets({"x", "dy", "dx"}) }}
{% if PIPE then %}
        const float *MS = (const float *)A.workspace + k1 * NJ_WS_IMAGE + NJ_WS_MEANS;
        /* the image's merged means, once the block of its last tile has written them */
        if (t == 0) nj_pipe_wait((const int *)((const float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("flags") }}), NJ_S + 1);
{% elseif P.role.merge then %}
        const float *MS = (const float *)A.workspace + k1 * NJ_WS_IMAGE + NJ_WS_MEANS;
{% else %}
        /* one tile an image, no merge launch: its sums, scaled as the library's merge scales one part */
        const float *MS = (const float *)A.workspace + k1 * NJ_WS_IMAGE{{ ws_plus("parts") }};
        const float inv_n = 1.0f / (float)NJ_N;
{% end %}
{% local SC = (P.role.merge or PIPE) and "" or " * inv_n" %}
        /* the tiles' mean of (x - mean) * rstd corrects xhat, and the mean of g * xhat by dl * mean(g)
           (exact without an activation, to first order in dl with one) */
{% if PIPE then %}
{% load_stats([[
            /* stored by another SM's block in this launch: from L2 */
            const float m1_ = nj_load_cg(MS + 2 * k3), m2_ = nj_load_cg(MS + 2 * k3 + 1);
            const float dl_ = nj_load_cg(MS + 2 * (NJ_G + k3));
            nj_gm1[k3] = m1_;
            nj_gdl[k3] = dl_;
            nj_gm2[k3] = m2_ - dl_ * m1_;]]) %}
{% else %}
{% load_stats([[
            const float2 m_ = *(const float2 *)(MS + 2 * k3); /* 8-byte loads: whole sectors a warp */
            const float m1_ = m_.x]] .. SC .. [[, m2_ = m_.y]] .. SC .. [[;
            const float dl_ = (*(const float2 *)(MS + 2 * (NJ_G + k3))).x]] .. SC .. [[;
            nj_gm1[k3] = m1_;
            nj_gdl[k3] = dl_;
            nj_gm2[k3] = m2_ - dl_ * m1_;]]) %}
{% end %}
        float m1k[NJ_CH], m2k[NJ_CH], dlk[NJ_CH];
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) {
            const int g = (c0 + k) / NJ_CG;
            m1k[k] = nj_gm1[g];
            dlk[k] = nj_gdl[g];
            m2k[k] = nj_gm2[g];
        }
{% if PARAMS then %}
        /* this tile's dgamma partials: sum dz * (xhat - dl), where the correction matters */
        float *PW = (float *)A.workspace + k1 * NJ_WS_IMAGE + NJ_WS_CHANS + (nj_i64)tile * NJ_C * 2;
#pragma unroll 1
        for (int c = t; c < NJ_C; c += {{ B }}) {
            const int k3 = c / NJ_CG;
{% if PIPE then %}
            /* the pair another SM's block stored in this launch: from L2 */
            if (fabsf(nj_gmean[k3]) * nj_grstd[k3] > NJ_FIX_RATIO) PW[2 * c] = nj_load_cg(PW + 2 * c) - nj_gdl[k3] * nj_load_cg(PW + 2 * c + 1);
{% else %}
            if (fabsf(nj_gmean[k3]) * nj_grstd[k3] > NJ_FIX_RATIO) PW[2 * c] -= nj_gdl[k3] * PW[2 * c + 1];
{% end %}
        }
{% end %}
{% dx_walk() %}
{% end %}
{% if not CLUSTER and not PIPE then %}
NJ_CL_PART_KERNEL({{ P.role.part.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_part, {{ R * C }});
    NJ_SHARED(float, nj_chan, {{ C }});
    NJ_SHARED(float, nj_gmean, {{ G }});
    NJ_SHARED(float, nj_grstd, {{ G }});
{{ bwd_pointers() }}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
{% load_params() %}
    {{ block_item("w", "A.rows * NJ_S") }}
{% part_item() %}
    }
}

NJ_KERNEL_REGS({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_gmean, {{ G }});
    NJ_SHARED(float, nj_grstd, {{ G }});
    /* each group's mean of g, mean of g * xhat less dl * mean(g), and dl (the tiles' mean of xhat) */
    NJ_SHARED(float, nj_gm1, {{ G }});
    NJ_SHARED(float, nj_gm2, {{ G }});
    NJ_SHARED(float, nj_gdl, {{ G }});
{{ bwd_pointers() }}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
{% load_params() %}
    {{ main_item("w", "A.rows * NJ_S") }}
{% dx_item() %}
    }
}
{% end %}
{% if PIPE then %}
/* An image's tiles' pairs combined into its pairs of means (the library's merge in SUMS mode, lib_merge.cu,
   its order): 2G items (g's (sum g, sum g * xhat), then G + g's (sum (x - mean) * rstd, 0)), lane l of
   each warp item i0 + l, warp w adding tiles w, w + NW, ..., warp 0 then the warps' sums; into O's
   [item][2]. W: tile t's at t * 4G, from L2 (other SMs' blocks stored them in this launch). */
NJ_DEVICE_CALL void nj_cl_merge_sums(const float *W, float *O, float *red)
{
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    constexpr int NWP = {{ B // 32 }};
    const float inv_n = 1.0f / (float)NJ_N;
#pragma unroll 1
    for (int i0 = 0; i0 < 2 * NJ_G; i0 += 32) {
        const int i = i0 + lane;
        float a = 0.0f, b = 0.0f;
        if (i < 2 * NJ_G) {
#pragma unroll 4
            for (int q = wp; q < NJ_S; q += NWP) {
                a += nj_load_cg(W + q * (4 * NJ_G) + 2 * i);
                b += nj_load_cg(W + q * (4 * NJ_G) + 2 * i + 1);
            }
        }
        red[threadIdx.x] = a;
        red[{{ B }} + threadIdx.x] = b;
        __syncthreads();
        if (wp == 0) {
#pragma unroll 1
            for (int v = 1; v < NWP; v++) {
                a += red[v * 32 + lane];
                b += red[{{ B }} + v * 32 + lane];
            }
            if (i < 2 * NJ_G) {
                O[2 * i] = a * inv_n;
                O[2 * i + 1] = b * inv_n;
            }
        }
        __syncthreads();
    }
}

{{ pipe_zero_kernel("A.rows", "(float *)A.workspace + i * NJ_WS_IMAGE" .. ws_plus("flags")) }}

/* Tiles' sums and tiles' dx in pipe_item's order (lib_index.cuh); one block an SM: the dx kernel's registers */
NJ_KERNEL_REGS({{ P.role.main.kernel }}, {{ B }})
{
    nj_grid_enter();
    NJ_SHARED(float, nj_part, {{ R * C }});
    NJ_SHARED(float, nj_chan, {{ C }});
    NJ_SHARED(float, nj_gmean, {{ G }});
    NJ_SHARED(float, nj_grstd, {{ G }});
    NJ_SHARED(float, nj_gm1, {{ G }});
    NJ_SHARED(float, nj_gm2, {{ G }});
    NJ_SHARED(float, nj_gdl, {{ G }});
    NJ_SHARED(float, nj_red, {{ 2 * B }});
{{ bwd_pointers() }}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
{% load_params() %}
    {{ pipe_item("A.rows * NJ_S", "w", "dx") }}
    if (!dx) {
{% part_item() %}
{% cl_pipe_merge("nj_cl_merge_sums((const float *)A.workspace + k1 * NJ_WS_IMAGE" .. ws_plus("parts") ..
                  ", (float *)A.workspace + k1 * NJ_WS_IMAGE + NJ_WS_MEANS, nj_red)") %}
    } else {
{% dx_item() %}
    }
}
{% end %}
{% if CLUSTER then %}
/* The whole backward of an image in one cluster: the part kernel's walk (staging x and dy), its group sums
   into shared memory, combined over the cluster's tiles in tile order (the library's merge, in SUMS mode,
   scales the sums to means the same way), then the dx kernel's walk over the stage. */
{{ cluster_kernel(P.role.main.kernel, B, S) }}
{
    nj_grid_enter();
    NJ_SHARED(float, nj_part, {{ R * C }});
    NJ_SHARED(float, nj_chan, {{ C }});
    NJ_SHARED(float, nj_gmean, {{ G }});
    NJ_SHARED(float, nj_grstd, {{ G }});
    NJ_SHARED(float, nj_gs, {{ 3 * G }}); /* the tile's sums of g, g * xhat, xhat: read by the cluster */
    NJ_SHARED(float, nj_gm1, {{ G }});
    NJ_SHARED(float, nj_gm2, {{ G }});
    NJ_SHARED(float, nj_gdl, {{ G }});
{% if PARAMS then %}
    NJ_SHARED(float, nj_pc, {{ 2 * C }}); /* the tile's dgamma/dbeta pair a channel: read by the cluster */
{% end %}
{% if STAGE then %}
    NJ_DYN_SHARED(nj_tx, nj_sx); /* the tile's x, [pixel][channel], then dy from a 16-byte boundary */
    nj_tdy *const nj_sd = (nj_tdy *)((unsigned char *)nj_sx + ({{ TP * C }}u * sizeof(nj_tx) + 15u) / 16u * 16u);
{% end %}
{{ bwd_pointers() }}
    const int t = threadIdx.x, r = t / NJ_LT, c0 = (t % NJ_LT) * NJ_CH;
    const bool active = t < NJ_LT * NJ_R;
{% load_params() %}
    {{ block_item("w", "A.rows * NJ_S") }}
        {{ cl_tile_item() }}
        {{ cl_tile_offsets({"x", "dy", "dx"}) }}
{% if PARAMS then %}
        float *WS = (float *)A.workspace + k1 * NJ_WS_IMAGE;
{% end %}
{% if STAGE then %}
        /* the tile into the stage first: its x and dy are contiguous runs (dense pixels), copied as
           vectors of {{ CV }} elements, {{ CU }} of each in flight a thread, before any arithmetic waits on them */
        {
            const int nel = npx * NJ_C;
#pragma unroll 1
            for (int e0 = t * {{ CV }}; e0 < nel; e0 += {{ CU * B * CV }}) {
                unsigned wx_[{{ CU }}][nj_vec_io<{{ CV }}, nj_tx>::W], wd_[{{ CU }}][nj_vec_io<{{ CV }}, nj_tdy>::W];
#pragma unroll
                for (int q = 0; q < {{ CU }}; q++) {
                    const int e = e0 + q * {{ B * CV }};
                    if (e < nel) {
                        nj_vec_io<{{ CV }}, nj_tx>::fetch(X, ox + e, wx_[q]);
                        nj_vec_io<{{ CV }}, nj_tdy>::fetch(DY, ody + e, wd_[q]);
                    }
                }
#pragma unroll
                for (int q = 0; q < {{ CU }}; q++) {
                    const int e = e0 + q * {{ B * CV }};
                    if (e < nel) {
                        nj_words<nj_vec_io<{{ CV }}, nj_tx>::W>::store(nj_sx + e, wx_[q]);
                        nj_words<nj_vec_io<{{ CV }}, nj_tdy>::W>::store(nj_sd + e, wd_[q]);
                    }
                }
            }
        }
{% end %}
{% load_stats() %}
        {
{% DLK = P.act ~= "none" %}
{% if DLK then %}
        float dlk[NJ_CH];
{% exact_dl() %}
{% end %}
        float a1[NJ_CH], a2[NJ_CH], a3[NJ_CH]{{ PARAMS and ", p1[NJ_CH], p2[NJ_CH]" or "" }};
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) a1[k] = a2[k] = a3[k] = {{ PARAMS and "p1[k] = p2[k] = " or "" }}0.0f;
{{ PIXEL_UNROLL }}
        for (int p = active ? r : npx; p < npx; p += NJ_R) {
            float xv_[NJ_CH], dv_[NJ_CH];
{% if STAGE then %}
{% stage_xdy() %}
{% else %}
{% load_xdy() %}
{% end %}
#pragma unroll
            for (int k = 0; k < NJ_CH; k++) {
{% element("xv_[k]", "dv_[k]", "k", "                ") %}
{% local XU = DLK and "(xh + dlk[k])" or "xh" %}
                a1[k] += g;
                a2[k] += g * {{ XU }};
                a3[k] += {{ XU }};
{% if PARAMS then %}
                p1[k] += dz * {{ XU }};
                p2[k] += dz;
{% end %}
            }
        }
{% to_groups("a1", "nj_gs[g]") %}
{% to_groups("a2", "nj_gs[NJ_G + g]") %}
{% to_groups("a3", "nj_gs[2 * NJ_G + g]") %}
{% if PARAMS then %}
{% to_pairs("p1", 0) %}
{% to_pairs("p2", 1) %}
{% end %}
        }
        /* the image's means from the cluster's tiles, in tile order */
        {{ cluster_sync() }};
        const float inv_n = 1.0f / (float)NJ_N;
#pragma unroll 1
        for (int g = t; g < NJ_G; g += {{ B }}) {
            float s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll 1
            for (int q = 0; q < NJ_S; q++) {
                const float *gs = {{ cluster_map("nj_gs", "(unsigned)q") }};
                s1 += gs[g];
                s2 += gs[NJ_G + g];
                s3 += gs[2 * NJ_G + g];
            }
            const float m1_ = s1 * inv_n, dl_ = s3 * inv_n;
            nj_gm1[g] = m1_;
            nj_gdl[g] = dl_;
            nj_gm2[g] = s2 * inv_n - dl_ * m1_;
        }
{% if PARAMS then %}
        /* the image's dgamma/dbeta pair a channel, its tiles' added in tile order (one pair an image for
           the column sum, not one a tile), tile q the channels q * NJ_CPR ..: sum dz * (xhat - dl) where
           the correction matters. The barrier: the means' dl. */
        __syncthreads();
        {
            float2 *const PW = (float2 *)(WS + NJ_WS_CHANS);
            const int cend = min(NJ_C, (tile + 1) * NJ_CPR);
#pragma unroll 1
            for (int c = tile * NJ_CPR + t; c < cend; c += {{ B }}) {
                float a = 0.0f, b = 0.0f;
#pragma unroll 1
                for (int q = 0; q < NJ_S; q++) {
                    const float *pc = {{ cluster_map("nj_pc", "(unsigned)q") }};
                    a += pc[2 * c];
                    b += pc[2 * c + 1];
                }
                const int k3 = c / NJ_CG;
                if (fabsf(nj_gmean[k3]) * nj_grstd[k3] > NJ_FIX_RATIO) a -= nj_gdl[k3] * b;
                PW[c] = make_float2(a, b);
            }
        }
{% end %}
        {{ cluster_sync() }}; /* the tiles' sums are read: blocks may exit; the means are set */
{% DLK = true %}
        float m1k[NJ_CH], m2k[NJ_CH], dlk[NJ_CH];
#pragma unroll
        for (int k = 0; k < NJ_CH; k++) {
            const int g = (c0 + k) / NJ_CG;
            m1k[k] = nj_gm1[g];
            dlk[k] = nj_gdl[g];
            m2k[k] = nj_gm2[g];
        }
{% dx_walk() %}
    }
}
{% end %}
