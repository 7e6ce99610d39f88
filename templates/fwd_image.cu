{# Forward, IMAGE family (planner_image.c): a block per batch item (an image of LayerNorm over the C of
   NCHW), whose axes are [batch, channels (reduced), pixels (kept)] and whose slab of channels x pixels
   is contiguous in every image operand, or per part of an image's pixels (P.tile; image_lib.cuh:
   image_cut): every channel of KP pixels. Three phases, a barrier between each:
   1. copy: the block copies the slab into dynamic shared memory (nj_stage), P.vec elements an access
      (16 bytes), P.unroll loads a thread issued before their stores; with the residual, x + res as
      floats (and the sum's store, flag resout).
   2. statistics: thread t < G * KP takes pixel p = t % KP and channels t / KP, + G, ... (G = block /
      KP groups a pixel), shifted by the pixel's first channel (prelude: nj_shift). Two passes over the
      staged values, each a partial per thread that the pixel's thread adds in group order: the mean,
      then the squared deviations from it (exact: nothing cancels). The pixel's shift k, md and rstd go
      to shared arrays; the saved statistics are written here.
   3. normalize: vector i of the slab (elements i * P.vec ...), its channel and pixel from the flat
      index, gamma/beta from the channel table (lib_index.cuh: param_table), y stored as one vector.
   The block is held to 1024 / block resident blocks an SM (64 registers a thread): the planner sized
   the block for what shared memory holds. #}
{% include("prelude.cuh") %}
{% include("lib_index.cuh") %}
{% include("fwd_lib.cuh") %}
{% include("image_lib.cuh") %}
{%
if P.rank ~= 3 or not P.axes[2].reduce or P.axes[3].reduce then error("fwd_image needs [batch, channels, pixels]") end
if P.stage ~= 1 then error("fwd_image: the slab is always staged (P.stage 1)") end
local F = P.flags
local has_param = F.scale or F.bias
local KI, KP = image_cut()
local NE = P.reduce_size * KP
local B = P.block
local VW = P.vec
local U = P.unroll
local G = B // KP
if G < 1 or NE % VW ~= 0 or B % 32 ~= 0 then error("fwd_image: block " .. B .. ", vec " .. VW .. ", pixels " .. KP) end
local NV = NE // VW
-- the staged copy is x's own elements moved as words, or floats where the residual is added in
local RAW = not F.residual
-- floats before the slab: the gamma/beta table, the partials, 3 a pixel; the slab starts 16-byte aligned
local NPAR = ((F.scale and 1 or 0) + (F.bias and 1 or 0)) * P.reduce_size
local NFL = (NPAR + G * KP + 3 * KP + 3) // 4 * 4
%}

{% fwd_typedefs() %}

#define NJ_N {{ P.reduce_size }}LL
{{ image_defines() }}
#define NJ_G {{ G }}u
#define NJ_VW {{ VW }}
#define NJ_NV {{ NV }}u
typedef {{ RAW and "nj_tx" or "float" }} nj_tstage;

NJ_KERNEL_OCC({{ P.role.main.kernel }}, {{ B }}, {{ 1024 // B }})
{
    nj_grid_enter();
    /* dynamic shared memory (planner_image.c: image_shmem): the block's floats, then the slab */
    NJ_DYN_SHARED(float, nj_ptab);                  /* gamma, then beta, by channel */
    float *const nj_part = nj_ptab + {{ NPAR }};    /* a partial a thread, [group][pixel] */
    float *const nj_pk = nj_part + {{ G * KP }};    /* a pixel's shift k */
    float *const nj_pmd = nj_pk + {{ KP }};         /* its mean: of the scaled values, then md */
    float *const nj_prs = nj_pmd + {{ KP }};        /* its rstd */
    nj_tstage *const nj_stage = (nj_tstage *)(nj_ptab + {{ NFL }}); /* the image, [channel][pixel] */
    const unsigned t = threadIdx.x;
{% fwd_pointers() %}
{% if has_param then %}
{% param_table(F.scale, F.bias, "given") %}
{% end %}
    {{ image_item() }}
{% fwd_offsets({1}, "k") %}
        /* 1. copy: P.unroll loads in flight, then their stores */
{% if RAW then %}
{% image_copy("nj_stage", "nj_tx", "X", "ox") %}
{% else %}
#pragma unroll 1
        for (unsigned i0 = t; i0 < NJ_NV; i0 += {{ U * B }}u) {
            float v[{{ U }}][NJ_VW], rv[{{ U }}][NJ_VW];
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < NJ_NV{{ image_in("i") }}) {
                    nj_load_vec<NJ_VW>(X, ox + {{ image_goff("i") }}, v[q]);
                    nj_load_vec<NJ_VW>(RES, ores + {{ image_goff("i") }}, rv[q]);
                }
            }
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned i = i0 + q * {{ B }}u;
                if (i < NJ_NV{{ image_in("i") }}) {
#pragma unroll
                    for (int j = 0; j < NJ_VW; j++) v[q][j] += rv[q][j];
{% fwd_resout("                    ", image_goff("i"), VW > 1 and "v[q]" or "v[q][0]", VW > 1 and VW or nil) %}
{% if VW > 1 then %}
                    nj_store_vec<NJ_VW>(nj_stage, (nj_i64)i * NJ_VW, v[q]);
{% else %}
                    nj_stage[i] = v[q][0];
{% end %}
                }
            }
        }
{% end %}
        __syncthreads();
        /* 2. statistics of pixel p over channels g, g + G, ... */
        const unsigned p = t % NJ_KP, g = t / NJ_KP;
        const bool walker = g < NJ_G && p < np;
        const nj_shift shp = nj_shift_of(nj_to_f32(nj_stage[p < np ? p : 0u]), {{ F.center and "true" or "false" }});
{% if F.center then %}
        if (walker) {
            float s = 0.0f;
#pragma unroll 4
            for (unsigned ch = g; ch < (unsigned)NJ_N; ch += NJ_G) s += (nj_to_f32(nj_stage[ch * NJ_KP + p]) - shp.k) * shp.inv;
            nj_part[g * NJ_KP + p] = s;
        }
        __syncthreads();
        if (t < np) nj_pmd[t] = nj_pixel_total(nj_part, NJ_G, NJ_KP, t) * (1.0f / (float)NJ_N);
        __syncthreads();
{% end %}
        if (walker) {
{% if F.center then %}
            const float m = nj_pmd[p];
{% else %}
            const float m = 0.0f;
{% end %}
            float s = 0.0f;
#pragma unroll 4
            for (unsigned ch = g; ch < (unsigned)NJ_N; ch += NJ_G) s += nj_sq((nj_to_f32(nj_stage[ch * NJ_KP + p]) - shp.k) * shp.inv - m);
            nj_part[g * NJ_KP + p] = s;
        }
        __syncthreads();
        if (t < np) {
            const float s = nj_pixel_total(nj_part, NJ_G, NJ_KP, t);
            const nj_shift sh = shp;
            const nj_i64 k3 = p0 + t;
            (void)k3;
{% fwd_finish(F.center and "nj_pmd[t]" or "0.0f", "s * (1.0f / (float)NJ_N)") %}
{% fwd_save_stats("true", kept_axes()) %}
            nj_pk[t] = sh.k;
            nj_pmd[t] = md;
            nj_prs[t] = rstd;
        }
        __syncthreads();
        /* 3. normalize, a vector at a time: its first element's channel and pixel, then along */
#pragma unroll 1
        for (unsigned i = t; i < NJ_NV; i += {{ B }}u) {
            const unsigned e0 = i * NJ_VW;
            unsigned ch = e0 / NJ_KP, px = e0 - ch * NJ_KP;
{{ image_vec_offset() }}
            float xv[NJ_VW], yv[NJ_VW];
{% if RAW then %}
{% image_staged_vec("nj_stage", "nj_tx", "xv") %}
{% elseif VW > 1 then %}
            nj_load_vec<NJ_VW>(nj_stage, e0, xv);
{% else %}
            xv[0] = nj_stage[e0];
{% end %}
#pragma unroll
            for (int j = 0; j < NJ_VW; j++) {
                nj_shift sh;
                sh.k = nj_pk[px];
                const float md = nj_pmd[px], rstd = nj_prs[px];
                (void)sh;
                (void)md;
                float u = {{ fwd_centered("xv[j]") }} * rstd;
{% fwd_epilogue("                ", F.scale and ptab_at(F.scale, false, "ch"), F.bias and ptab_at(F.scale, true, "ch"), {to = "yv[j]"}) %}
                if (++px == NJ_KP) px = 0, ch++;
            }
{% if VW > 1 then %}
            {{ fwd_out("eo", "yv", VW) }}
{% else %}
            {{ fwd_out("eo", "yv[0]") }}
{% end %}
        }
    }
}
