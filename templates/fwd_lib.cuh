{# Pieces every forward template shares (renders no text itself): element typedefs, the operand
   pointers taken from the kernel argument, and each operand's base offset for one statistic.
   Included after lib_index.cuh. #}
{% function fwd_typedefs() %}
typedef {{ P.ctype.x }} nj_tx;
typedef {{ P.ctype.y }} nj_ty;
{% if P.flags.residual then %}
typedef {{ P.ctype.res }} nj_tres;
{% end %}
{% if P.flags.resout then %}
typedef {{ P.ctype.resout }} nj_tresout;
{% end %}
{% if P.flags.scale or P.flags.bias then %}
typedef {{ P.ctype.param }} nj_tparam;
{% end %}
{% end %}
{% function fwd_pointers() %}
    const nj_tx *X = (const nj_tx *)A.x;
    nj_ty *Y = (nj_ty *)A.y;
{% if P.flags.residual then %}
    const nj_tres *RES = (const nj_tres *)A.res;
{% end %}
{% if P.flags.resout then %}
    nj_tresout *RESOUT = (nj_tresout *)A.res_out;
{% end %}
{% if P.flags.scale then %}
    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma;
{% end %}
{% if P.flags.bias then %}
    const nj_tparam *BETA = (const nj_tparam *)A.beta;
{% end %}
{% end %}
{# Base offsets ox, oy, ores, oresout, op from the index variables <prefix><axis> of `axes`. #}
{% function fwd_offsets(axes, prefix) %}
        const nj_i64 ox = {{ offset("x", axes, prefix) }};
        const nj_i64 oy = {{ offset("y", axes, prefix) }};
{% if P.flags.residual then %}
        const nj_i64 ores = {{ offset("res", axes, prefix) }};
{% end %}
{% if P.flags.resout then %}
        const nj_i64 oresout = {{ offset("resout", axes, prefix) }};
{% end %}
{% if P.flags.scale or P.flags.bias then %}
        const nj_i64 op = {{ offset("param", axes, prefix) }};
{% end %}
{% end %}
{# The shift and scale of the set's statistics (prelude: nj_shift): its first element, x (+ the
   residual) at the base offsets ox (, ores). Every thread loads it: one address, a line the walk reads. #}
{% function fwd_shift() %}
        const nj_shift sh = nj_shift_of(nj_load_f32(X, ox){{ P.flags.residual and " + nj_load_f32(RES, ores)" or "" }}, {{ P.flags.center and "true" or "false" }});
{% end %}
{# x (a C expression) centered: (x - k) - md, the set's mean as shift k plus md (exact for close
   values); x itself under RMS. #}
{%
function fwd_centered(v)
  if P.flags.center then return "((" .. v .. " - sh.k) - md)" end
  return v
end
%}
{# mean and var of the scaled values (mean_s, var_s: prelude nj_shift) -> md (the mean of x - k) and
   rstd #}
{% function fwd_finish(mean_s, var_s) %}
        const float md = {{ mean_s }} * sh.s;
        const float rstd = nj_rstd_scaled({{ var_s }}, sh, A.eps);
{% end %}
{# The saved statistics (flag stats) of the kept index k<axis>, written where `guard` holds: sh, md
   (when centered) and rstd must be in scope. #}
{% function fwd_save_stats(guard, kept) %}
{% if P.flags.stats then %}
        if ({{ guard }}) {
            const nj_i64 os = {{ offset("stats", kept, "k") }};
{% if P.flags.center then %}
            A.mean[os] = sh.k + md;
{% end %}
            A.rstd[os] = rstd;
        }
{% end %}
{% end %}
{# The forward epilogue, shared by every forward template and the one place an output type or an output
   operand goes: what happens to a normalized value u (a float variable, x centered times rstd) on its
   way out. fwd_epilogue: gamma and beta (C expressions g and b; nil: none, or folded in already), the
   activation, then dst: {y = offset} stores to y at oy + offset, {to = "name"} assigns a variable the
   caller stores with fwd_out. ind: the lines' indentation. #}
{% function fwd_epilogue(ind, g, b, dst) %}
{% if g then %}
{{ ind }}u *= {{ g }};
{% end %}
{% if b then %}
{{ ind }}u += {{ b }};
{% end %}
{% if dst.y then %}
{{ ind }}{{ fwd_out(dst.y, fwd_act("u")) }}
{% else %}
{{ ind }}{{ dst.to }} = {{ fwd_act("u") }};
{% end %}
{% end %}
{%
-- The activation of a float expression.
function fwd_act(u)
  return "nj_act_" .. P.act .. "(" .. u .. ")"
end
-- The store of y at oy + off: value, a float expression, or with vec (a width, "V" or a number) a pointer
-- to that many floats stored as one vector. A statement, without indentation.
function fwd_out(off, value, vec)
  if vec then return "nj_store_vec<" .. vec .. ">(Y, oy + " .. off .. ", " .. value .. ");" end
  return "nj_store_f32(Y, oy + " .. off .. ", " .. value .. ");"
end
%}
{# The residual sum's output (flag resout): value v (x plus the residual, as loaded) at oresout + off,
   a float, or with vec a vector of that many floats at pointer v. Nothing without the flag. #}
{% function fwd_resout(ind, off, v, vec) %}
{% if P.flags.resout then %}
{{ ind }}{{ vec and ("nj_store_vec<" .. vec .. ">") or "nj_store_f32" }}(RESOUT, oresout + {{ off }}, {{ v }});
{% end %}
{% end %}
{# Split walks (fwd_row.cu, fwd_general.cu): the statistic from its pieces' (sum, m2), warp 0 adding them
   in a fixed order (m2 = sum(m2_q + n_q * (mean_q - mean)^2): nothing cancels), shared with the block
   through scratch[0..1]; piece 0 writes the saved statistics. ws: the statistic's partials; plen, total:
   a piece's and the walk's length in units of `unit` elements. The partials are of the scaled shifted
   values (sh in scope, the same for every piece). Leaves md and rstd in scope. #}
{# A pipelined forward's sums block, once its piece's sums are stored (fwd_row.cu, fwd_general.cu): adds one
   to its statistic's counter (FLAG), and the block whose add completes the count merges the pieces
   (fwd_split_stats' arguments) into MEANS (md, rstd), then adds one more for the normalizing blocks.
   The piece's sums must have been stored by thread 0 itself: its fence orders only its own stores (and
   what a barrier showed it); stores of other threads need a barrier first (cl_lib.cuh: cl_pipe_merge) #}
{% function fwd_pipe_merge(ws, plen, total, unit, scratch, kept) %}
        if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FLAG) == NJ_SPLIT - 1)) {
            nj_fence_gpu();
{% fwd_split_stats(ws, plen, total, unit, scratch, kept, true) %}
            if (threadIdx.x == 0) {
                MEANS[0] = md;
                MEANS[1] = rstd;
                nj_pipe_arrive(FLAG);
            }
        }
{% end %}
{# pipe (P.lag): the pieces' sums were stored by other SMs' blocks during this launch (read from L2), and
   this block, whichever piece it holds, saves the statistics #}
{% function fwd_split_stats(ws, plen, total, unit, scratch, kept, pipe) %}
{% local function W(i) return pipe and ("nj_load_cg(WS + " .. i .. ")") or ("WS[" .. i .. "]") end %}
        __syncthreads(); /* {{ scratch }}: the previous piece's readers are done */
        if (threadIdx.x < 32) {
            const float *WS = {{ ws }};
            float s = 0.0f;
#pragma unroll 1
            for (int q = threadIdx.x; q < NJ_SPLIT; q += 32) s += {{ W("2 * q") }};
{% if P.flags.center then %}
            const float mean_s = nj_warp_sum(s) * (1.0f / (float)NJ_N);
            float m2 = 0.0f;
#pragma unroll 1
            for (int q = threadIdx.x; q < NJ_SPLIT; q += 32) {
                const nj_i64 plo = q * {{ plen }}, phi = plo + {{ plen }} < {{ total }} ? plo + {{ plen }} : {{ total }};
                if (phi > plo) {
                    const float nq = (float)((phi - plo) * {{ unit }});
                    const float d = __fdividef({{ W("2 * q") }}, nq) - mean_s;
                    m2 += {{ W("2 * q + 1") }} + nq * d * d;
                }
            }
            const float var_s = nj_warp_sum(m2) * (1.0f / (float)NJ_N);
{% else %}
            const float mean_s = 0.0f;
            const float var_s = nj_warp_sum(s) * (1.0f / (float)NJ_N);
{% end %}
            if (threadIdx.x == 0) {
{% fwd_finish("mean_s", "var_s") %}
                {{ scratch }}[0] = md;
                {{ scratch }}[1] = rstd;
{% if P.flags.stats then %}
                if ({{ pipe and "true" or "piece == 0" }}) {
                    const nj_i64 os = {{ offset("stats", kept, "k") }};
{% if P.flags.center then %}
                    A.mean[os] = sh.k + md;
{% end %}
                    A.rstd[os] = rstd;
                }
{% end %}
            }
        }
        __syncthreads();
        const float md = {{ scratch }}[0], rstd = {{ scratch }}[1];
{% end %}
