{# The image family's shared pieces (fwd_image.cu, bwd_image.cu): the image's cut into parts, the copy
   of a slab into shared memory and a staged vector read back as floats (Lua functions; they read
   P.vec: elements an access, 1 an element at a time in the unaligned variant; P.unroll: vectors a
   thread loads before it stores them; P.tile: pixels a part, 0 for whole images; and P.block; the
   kernel defines NJ_VW (P.vec) and NJ_NV (vectors of the slab) and has its thread number in t), and
   the pixels' merge of partials (C, rendered here). #}
{%
-- The cut (planner_image.c): KI pixels an image, KP of them a block stages (P.tile, or the whole
-- image), PARTS blocks an image (image-major), the last part's pixels the rest. A part's staged slab
-- is [channel][KP]; a whole image's is walked by flat index (its vector may cross channel rows), a
-- part's by channel row (whole vectors: the planner made P.vec divide KI and KP).
function image_cut()
  local ki = P.axes[3].extent
  local kp = P.tile > 0 and P.tile or ki
  local parts = ceil_div(ki, kp)
  if parts > 1 and (ki % P.vec ~= 0 or kp % P.vec ~= 0 or kp >= ki) then
    error("image: parts of " .. kp .. " of " .. ki .. " pixels, vec " .. P.vec)
  end
  IMG = {ki = ki, kp = kp, parts = parts}
  return ki, kp, parts
end
function image_defines()
  local s = string.format("#define NJ_KI %du\n#define NJ_KP %du", IMG.ki, IMG.kp)
  if IMG.parts > 1 then
    s = s .. string.format("\n#define NJ_PARTS %d\n#define NJ_KPV %du", IMG.parts, IMG.kp // P.vec)
  end
  return s
end
-- The block's item kb: image k1, its part's first pixel p0 and pixels np (a whole image: kb, 0 and NJ_KP).
function image_item()
  if IMG.parts == 1 then
    return block_item("kb", "A.rows") .. "\n        const nj_i64 k1 = kb;\n        const unsigned p0 = 0u, np = NJ_KP;\n        (void)p0;"
  end
  return block_item("kb", "A.rows * NJ_PARTS") .. "\n        const nj_i64 k1 = kb / NJ_PARTS;" ..
    "\n        const unsigned p0 = (unsigned)(kb - k1 * NJ_PARTS) * NJ_KP, np = p0 + NJ_KP > NJ_KI ? NJ_KI - p0 : NJ_KP;"
end
-- The image offset of the block's staged vector i (a C expression).
function image_goff(i)
  if IMG.parts == 1 then return "(nj_i64)" .. i .. " * NJ_VW" end
  return string.format("((nj_i64)(%s / NJ_KPV) * NJ_KI + p0 + (%s %% NJ_KPV) * NJ_VW)", i, i)
end
-- " && the part has staged vector i" (only a shorter last part lacks some); nothing for whole images.
function image_in(i)
  if IMG.parts == 1 then return "" end
  return string.format(" && (%s %% NJ_KPV) * NJ_VW < np", i)
end
-- The image offset eo of the vector staged at e0, channel ch, pixel px (in scope); a shorter last
-- part skips the vectors it lacks.
function image_vec_offset()
  if IMG.parts == 1 then return "            const nj_i64 eo = e0;" end
  return "            if (px >= np) continue; /* a shorter last part */\n" ..
    "            const nj_i64 eo = (nj_i64)ch * NJ_KI + p0 + px;"
end
%}
/* Pixel p's total of a [group][pixel] table of partials (ki pixels), added in group order: the
   statistics' fixed order, whatever order the threads wrote in. */
NJ_DEVICE float nj_pixel_total(const float *part, unsigned groups, unsigned ki, unsigned p)
{
    float s = 0.0f;
#pragma unroll 1
    for (unsigned q = 0; q < groups; q++) s += part[q * ki + p];
    return s;
}
{# the slab's vector i of a staged stream (elements of type T at pointer S) as floats #}
{% function image_staged_vec(S, T, dst) %}
{% if P.vec > 1 then %}
            {
                unsigned w[nj_vec_io<NJ_VW, {{ T }}>::W];
                nj_words<nj_vec_io<NJ_VW, {{ T }}>::W>::load({{ S }} + e0, w);
                nj_vec_io<NJ_VW, {{ T }}>::convert(w, {{ dst }});
            }
{% else %}
            {{ dst }}[0] = nj_to_f32({{ S }}[e0]);
{% end %}
{% end %}
{# the copy of one stream: P.unroll vectors of each thread loaded, then stored #}
{% function image_copy(S, T, ptr, off) %}
#pragma unroll 1
        for (unsigned i0 = t; i0 < NJ_NV; i0 += {{ P.unroll * P.block }}u) {
{% if P.vec > 1 then %}
            unsigned w[{{ P.unroll }}][nj_vec_io<NJ_VW, {{ T }}>::W];
#pragma unroll
            for (int q = 0; q < {{ P.unroll }}; q++) {
                const unsigned i = i0 + q * {{ P.block }}u;
                if (i < NJ_NV{{ image_in("i") }}) nj_vec_io<NJ_VW, {{ T }}>::fetch({{ ptr }}, {{ off }} + {{ image_goff("i") }}, w[q]);
            }
#pragma unroll
            for (int q = 0; q < {{ P.unroll }}; q++) {
                const unsigned i = i0 + q * {{ P.block }}u;
                if (i < NJ_NV{{ image_in("i") }}) nj_words<nj_vec_io<NJ_VW, {{ T }}>::W>::store({{ S }} + i * NJ_VW, w[q]);
            }
{% else %}
#pragma unroll
            for (int q = 0; q < {{ P.unroll }}; q++) {
                const unsigned i = i0 + q * {{ P.block }}u;
                if (i < NJ_NV{{ image_in("i") }}) {{ S }}[i] = {{ ptr }}[{{ off }} + {{ image_goff("i") }}];
            }
{% end %}
        }
{% end %}
