{# Backward, IMAGE family (planner_image.c): a block per batch item, axes [batch, channels (reduced),
   pixels (kept)], the slab of channels x pixels contiguous in x, dy and dx, or per part of an image's
   pixels (P.tile; image_lib.cuh: image_cut), every channel of KP pixels. Phases, a barrier between
   each:
   0. copy: x and dy into dynamic shared memory (nj_sx, nj_sdy), P.vec elements an access, P.unroll
      loads of each a thread issued before their stores; each pixel's saved mean and rstd. With
      P.stage 2 (x and dy would not both fit) x alone: the sums read dy from global memory (a warp a
      channel row, coalesced) and dx reads it again in vectors, from the L2 where the block's image
      stayed there.
   1. (centered) the pixel's correction dl = mean((x - mean) * rstd) over the staged x (bwd_lib.cuh:
      the saved float32 mean's rounding), exact, applied where |mean| * rstd > NJ_FIX_RATIO.
   2. sums: warp w walks channels w, w + W, ...; lane l owns pixels l, l + 32, ... Each lane adds g and
      g * xhat of its pixels; each channel's dz * xhat and dz over the image are warp sums, which lane
      0 writes to the pgrad region ([image][part][channel][2]: P.pgrad "rows", the library's column sum
      adds the parts in order). The pixels' warp partials meet in shared memory and the pixel's thread adds
      them in warp order: means m1 (of g) and m2 (of g * xhat).
   3. dx: vector i of the slab, its channel and pixel from the flat index, stored as one vector.
   Held to 1024 / block resident blocks an SM (64 registers a thread), as fwd_image.cu. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("bwd_lib.cuh") %}
{% include("image_lib.cuh") %}
{%
if P.rank ~= 3 or not P.axes[2].reduce or P.axes[3].reduce then error("bwd_image needs [batch, channels, pixels]") end
if P.stage ~= 1 and P.stage ~= 2 then error("bwd_image: the slabs are staged (P.stage 1: x and dy, 2: x)") end
-- DYS: dy staged beside x (P.stage 1); else (2) read from global memory by the sums and again by dx
local DYS = P.stage == 1
local F = P.flags
local KI, KP = image_cut()
if not DYS and IMG.parts > 1 then error("bwd_image: parts stage x and dy") end
local NE = P.reduce_size * KP
local B = P.block
local W = B // 32
local VW = P.vec
local U = P.unroll
if NE % VW ~= 0 or B % 32 ~= 0 then error("bwd_image: block " .. B .. ", vec " .. VW) end
local NV = NE // VW
local J = ceil_div(KP, 32) -- pixels a lane owns in the sums
local ROWS = P.pgrad == "rows"
if P.pgrad ~= "none" and not ROWS then error("bwd_image: dgamma/dbeta as rows only") end
-- gamma (and beta, which only an activation reads) by channel, a table in shared memory
local PG, PB = F.scale, F.bias and P.act ~= "none"
local NPAR = ((PG and 1 or 0) + (PB and 1 or 0)) * P.reduce_size
local PARAM = {g = PG and ptab_at(PG, false, "ch") or nil, b = PB and ptab_at(PG, true, "ch") or nil}
local NPART = (F.center and 2 or 1) * W * KP
local NFL = (NPAR + NPART + 5 * KP + 3) // 4 * 4
BWD_DL = F.center and "dl" or nil
%}
{{ bwd_typedefs() }}

#define NJ_N {{ P.reduce_size }}LL
{{ image_defines() }}
#define NJ_W {{ W }}u
#define NJ_VW {{ VW }}
#define NJ_NV {{ NV }}u

NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, {{ 1024 // B }})
{
    nj_grid_enter();
    /* dynamic shared memory (planner_image.c: image_shmem): the block's floats, then x, then dy */
    NJ_DYN_SHARED(float, nj_ptab);                 /* gamma (then beta) by channel */
    float *const nj_part = nj_ptab + {{ NPAR }};   /* warp partials, [sum][warp][pixel] */
    float *const nj_pm = nj_part + {{ NPART }};    /* a pixel's saved mean */
    float *const nj_pr = nj_pm + {{ KP }};         /* its rstd */
    float *const nj_pdl = nj_pr + {{ KP }};        /* its correction dl */
    float *const nj_pm1 = nj_pdl + {{ KP }};       /* its mean of g */
    float *const nj_pm2 = nj_pm1 + {{ KP }};       /* its mean of g * xhat */
    nj_tx *const nj_sx = (nj_tx *)(nj_ptab + {{ NFL }});
{% if DYS then %}
    nj_tdy *const nj_sdy = (nj_tdy *)((unsigned char *)nj_sx + ({{ NE }}u * sizeof(nj_tx) + 15u) / 16u * 16u);
{% end %}
    (void)nj_pdl;
    const unsigned t = threadIdx.x, lane = t & 31u, wp = t >> 5;
{{ bwd_pointers() }}
{% if PG or PB then %}
{% param_table(PG, PB, "given") %}
{% end %}
    {{ image_item() }}
        const nj_i64 ox = {{ offset("x", {1}, "k") }};
        const nj_i64 ody = {{ offset("dy", {1}, "k") }};
        const nj_i64 odx = {{ offset("dx", {1}, "k") }};
        /* 0. copy x and dy; the pixels' saved statistics */
{% image_copy("nj_sx", "nj_tx", "X", "ox") %}
{% if DYS then %}
{% image_copy("nj_sdy", "nj_tdy", "DY", "ody") %}
{% end %}
        if (t < np) {
            const nj_i64 k3 = p0 + t;
            (void)k3;
            const nj_i64 os = {{ offset("stats", kept_axes(), "k") }};
            nj_pm[t] = {{ F.center and "A.mean[os]" or "0.0f" }};
            nj_pr[t] = A.rstd[os];
        }
        __syncthreads();
{% if F.center then %}
        /* 1. each pixel's dl, over the staged x */
#pragma unroll
        for (unsigned j = 0; j < {{ J }}u; j++) {
            const unsigned p = lane + 32u * j;
            if (p < np) {
                const float mean = nj_pm[p], rstd = nj_pr[p];
                float s = 0.0f;
#pragma unroll 1
                for (unsigned ch = wp; ch < (unsigned)NJ_N; ch += NJ_W) s += (nj_to_f32(nj_sx[ch * NJ_KP + p]) - mean) * rstd;
                nj_part[wp * NJ_KP + p] = s;
            }
        }
        __syncthreads();
        /* applied only where the saved mean's rounding matters (as every family: for ordinary data xhat
           stays (x - mean) * rstd, exactly 0 at the mean, where an activation's derivative has its kink) */
        if (t < np)
            nj_pdl[t] = fabsf(nj_pm[t]) * nj_pr[t] > NJ_FIX_RATIO ? nj_pixel_total(nj_part, NJ_W, NJ_KP, t) * (1.0f / (float)NJ_N) : 0.0f;
        __syncthreads();
{% end %}
        /* 2. sums: a lane's pixels' g and g * xhat, each channel's dz * xhat and dz over the image */
        float sa[{{ J }}], sb[{{ J }}];
#pragma unroll
        for (unsigned j = 0; j < {{ J }}u; j++) sa[j] = sb[j] = 0.0f;
{% if ROWS then %}
        float *const PR = (float *)A.workspace{{ ws_plus("pgrad") }} + kb * (2 * NJ_N);
{% end %}
{# dy from global memory: two channels' loads a lane in flight #}
#pragma unroll {{ DYS and 1 or 2 }}
        for (unsigned ch = wp; ch < (unsigned)NJ_N; ch += NJ_W) {
            float cg = 0.0f, cb = 0.0f;
#pragma unroll
            for (unsigned j = 0; j < {{ J }}u; j++) {
                const unsigned p = lane + 32u * j;
                if (p < np) {
                    const unsigned e = ch * NJ_KP + p;
                    const float mean = nj_pm[p], rstd = nj_pr[p];
                    (void)mean;
{% if F.center then %}
                    const float dl = nj_pdl[p];
{% end %}
{{ bwd_element("nj_sx[e]", DYS and "nj_sdy[e]" or "DY[ody + e]", PARAM, "                    ") }}
                    sa[j] += g;
                    sb[j] += g * xh;
                    cg += dz * xh;
                    cb += dz;
                }
            }
{% if ROWS then %}
            cg = nj_warp_sum(cg);
            cb = nj_warp_sum(cb);
            if (lane == 0) {
                PR[2 * ch] = cg;
                PR[2 * ch + 1] = cb;
            }
{% else %}
            (void)cg;
            (void)cb;
{% end %}
        }
#pragma unroll
        for (unsigned j = 0; j < {{ J }}u; j++) {
            const unsigned p = lane + 32u * j;
            if (p < np) {
{% if F.center then %}
                nj_part[wp * NJ_KP + p] = sa[j];
                nj_part[{{ W * KP }}u + wp * NJ_KP + p] = sb[j];
{% else %}
                (void)sa[j];
                nj_part[wp * NJ_KP + p] = sb[j];
{% end %}
            }
        }
        __syncthreads();
        if (t < np) {
{% if F.center then %}
            nj_pm1[t] = nj_pixel_total(nj_part, NJ_W, NJ_KP, t) * (1.0f / (float)NJ_N);
            nj_pm2[t] = nj_pixel_total(nj_part + {{ W * KP }}u, NJ_W, NJ_KP, t) * (1.0f / (float)NJ_N);
{% else %}
            nj_pm1[t] = 0.0f;
            nj_pm2[t] = nj_pixel_total(nj_part, NJ_W, NJ_KP, t) * (1.0f / (float)NJ_N);
{% end %}
        }
        __syncthreads();
        /* 3. dx, a vector at a time: its first element's channel and pixel, then along */
#pragma unroll 1
        for (unsigned i = t; i < NJ_NV; i += {{ B }}u) {
            const unsigned e0 = i * NJ_VW;
            unsigned ch = e0 / NJ_KP, px = e0 - ch * NJ_KP;
{{ image_vec_offset() }}
            float xv[NJ_VW], dv[NJ_VW], out[NJ_VW];
{% image_staged_vec("nj_sx", "nj_tx", "xv") %}
{% if DYS then %}
{% image_staged_vec("nj_sdy", "nj_tdy", "dv") %}
{% elseif VW > 1 then %}
            nj_load_vec<NJ_VW>(DY, ody + e0, dv);
{% else %}
            dv[0] = nj_load_f32(DY, ody + e0);
{% end %}
#pragma unroll
            for (int j = 0; j < NJ_VW; j++) {
                const float mean = nj_pm[px], rstd = nj_pr[px], m1 = nj_pm1[px], m2 = nj_pm2[px];
                (void)mean;
                (void)m1;
{% if F.center then %}
                const float dl = nj_pdl[px];
{% end %}
{{ bwd_element("xv[j]", "dv[j]", PARAM, "                ") }}
                out[j] = {{ bwd_dx_expr("g", "xh", "m1", "m2") }};
                if (++px == NJ_KP) px = 0, ch++;
            }
{% if VW > 1 then %}
            nj_store_vec<NJ_VW>(DX, odx + eo, out);
{% else %}
            nj_store_f32(DX, odx + eo, out[0]);
{% end %}
        }
    }
}
