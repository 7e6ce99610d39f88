{# The image family's shared pieces (fwd_image.cu, bwd_image.cu): the copy of a slab into shared
   memory and a staged vector read back as floats (Lua functions; they read P.vec: elements an access,
   1 an element at a time in the unaligned variant; P.unroll: vectors a thread loads before it stores
   them; and P.block; the kernel defines NJ_VW (P.vec) and NJ_NV (vectors of the slab) and has its
   thread number in t), and the pixels' merge of partials (C, rendered here). #}
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
                if (i < NJ_NV) nj_vec_io<NJ_VW, {{ T }}>::fetch({{ ptr }}, {{ off }} + (nj_i64)i * NJ_VW, w[q]);
            }
#pragma unroll
            for (int q = 0; q < {{ P.unroll }}; q++) {
                const unsigned i = i0 + q * {{ P.block }}u;
                if (i < NJ_NV) nj_words<nj_vec_io<NJ_VW, {{ T }}>::W>::store({{ S }} + i * NJ_VW, w[q]);
            }
{% else %}
#pragma unroll
            for (int q = 0; q < {{ P.unroll }}; q++) {
                const unsigned i = i0 + q * {{ P.block }}u;
                if (i < NJ_NV) {{ S }}[i] = {{ ptr }}[{{ off }} + i];
            }
{% end %}
        }
{% end %}
