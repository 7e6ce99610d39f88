{# What the row-cluster templates share (fwd_cluster.cu, bwd_cluster.cu): a block's piece of a row staged
   in shared memory, P.vec elements of x (nj_tx) at a time. Needs t (the thread), np (the piece's
   elements) and the piece's first element lo. #}
{# A "cluster" of one block (the backward's rows that fit one SM: planner_cluster.c) is a plain kernel on
   any architecture: rank 0, the cluster barrier a block barrier, the mapped pair the block's own. #}
{%
function cluster_kernel(name, b, k)
  if k > 1 then return "NJ_CLUSTER_KERNEL(" .. name .. ", " .. b .. ", " .. k .. ", 1, 1)" end
  return "NJ_KERNEL_REGS(" .. name .. ", " .. b .. ")"
end
function cluster_rank() return P.split > 1 and "nj_cluster_rank()" or "0u" end
function cluster_sync() return P.split > 1 and "nj_cluster_sync()" or "__syncthreads()" end
function cluster_map(p, r) return P.split > 1 and ("nj_cluster_map(" .. p .. ", " .. r .. ")") or p end
-- the block's piece of the row: its first element lo and its np elements (the last piece what is left)
function piece_range()
  return "const nj_i64 lo = (nj_i64)rank * NJ_PC;\n" ..
         "        const unsigned np = lo >= NJ_N ? 0u : NJ_N - lo < (nj_i64)NJ_PC ? (unsigned)(NJ_N - lo) : NJ_PC;"
end
%}
{# The copy of piece src[base + lo ..] into dst: P.unroll vectors a thread in flight, then their stores.
   A vector of one (the unaligned variant) moves an element as itself: a 16-bit element's 4-byte word
   would straddle its neighbour. #}
{% function stage_piece(src, base, dst) %}
{% local U, B, VW = P.unroll, P.block, P.vec %}
#pragma unroll 1
        for (unsigned e0 = t * NJ_VW; e0 < np; e0 += {{ U * B * VW }}u) {
{% if VW > 1 then %}
            unsigned v[{{ U }}][nj_vec_io<NJ_VW, nj_tx>::W];
{% else %}
            nj_tx v[{{ U }}];
{% end %}
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned e = e0 + q * {{ B * VW }}u;
{% if VW > 1 then %}
                if (e < np) nj_vec_io<NJ_VW, nj_tx>::fetch({{ src }}, {{ base }} + lo + e, v[q]);
{% else %}
                if (e < np) v[q] = {{ src }}[{{ base }} + lo + e];
{% end %}
            }
#pragma unroll
            for (int q = 0; q < {{ U }}; q++) {
                const unsigned e = e0 + q * {{ B * VW }}u;
{% if VW > 1 then %}
                if (e < np) nj_words<nj_vec_io<NJ_VW, nj_tx>::W>::store({{ dst }} + e, v[q]);
{% else %}
                if (e < np) {{ dst }}[e] = v[q];
{% end %}
            }
        }
{% end %}
{# floats out[NJ_VW] from the stage src at element e (a vector of one: the element itself) #}
{% function staged_vec(out, src, e) %}
{% if P.vec > 1 then %}
            {
                unsigned v[nj_vec_io<NJ_VW, nj_tx>::W];
                nj_words<nj_vec_io<NJ_VW, nj_tx>::W>::load({{ src }} + {{ e }}, v);
                nj_vec_io<NJ_VW, nj_tx>::convert(v, {{ out }});
            }
{% else %}
            {{ out }}[0] = nj_to_f32({{ src }}[{{ e }}]);
{% end %}
{% end %}
