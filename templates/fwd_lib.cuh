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
