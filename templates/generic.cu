{# The generic kernels (src/generic.c): one module per (pass, x dtype, gamma dtype) that serves every
   valid problem of those dtypes, compiled once per cache like the library modules. Nothing of the
   problem is baked in: extents, strides, reduce and feature axes, flags, the activation and the other
   operands' dtypes come in a descriptor (nj_gdesc, the layout of src/generic.h) whose device address
   is A.lib[P.desc]; the batch axis, as everywhere, from A.rows and A.bstride. They run while a problem's own
   kernels compile (NJ_CTX_ASYNC_COMPILE), or instead of them in a context that never compiles. Simple,
   not fast: a block per reduction set, every index split over the axes at run time.
   P: pass ("fwd" | "bwd"), block, desc (the descriptor's slot in A.lib), ctype.x, ctype.param,
   dt (dtype codes), fl (flag bits), act (codes), kernel.main and kernel.pgrad (names). #}
{% include("prelude.cuh") %}
{% local B = P.block %}
typedef {{ P.ctype.x }} nj_tx;
typedef {{ P.ctype.param }} nj_tparam;
#define NJ_GB {{ B }}
#define NJ_GNW {{ B // 32 }}

/* src/generic.h: nj_gdesc (test_generic checks that both agree) */
struct nj_gdesc {
    nj_i64 rank, flags, act, nred, nkept, nfeat, nother, reduce_size, kept_inner, param_size;
    nj_i64 dtype[8];
    nj_i64 kept[9], red[9], feat[9], other[9]; /* axis lists, outermost first; batch axis 0 kept, other */
    nj_i64 extent[9];
    nj_i64 stride[9][8];
};
#define NJ_GDESC_WORDS ((int)(sizeof(nj_gdesc) / 8))

/* The descriptor into shared memory, with the batch axis of this launch patched in. */
NJ_DEVICE void nj_gdesc_load(nj_gdesc *G, const nj_kargs &A)
{
    const nj_i64 *src = (const nj_i64 *)A.lib[{{ P.desc }}];
    nj_i64 *dst = (nj_i64 *)G;
    for (int i = threadIdx.x; i < NJ_GDESC_WORDS; i += blockDim.x) dst[i] = src[i];
    __syncthreads();
    if (threadIdx.x == 0) {
        G->extent[0] = A.rows;
        for (int o = 0; o < 8; o++)
            if (o != NJ_OPD_PARAM) G->stride[0][o] = A.bstride[o];
    }
    __syncthreads();
}

/* an operand of run-time dtype d ({{ P.dt.f32 }} f32, {{ P.dt.f16 }} f16, else bf16) */
NJ_DEVICE float nj_gload(const void *p, nj_i64 i, nj_i64 d)
{
    if (d == {{ P.dt.f32 }}) return ((const float *)p)[i];
    if (d == {{ P.dt.f16 }}) return nj_to_f32(((const nj_f16 *)p)[i]);
    return nj_to_f32(((const nj_bf16 *)p)[i]);
}
NJ_DEVICE void nj_gstore(void *p, nj_i64 i, nj_i64 d, float v)
{
    if (d == {{ P.dt.f32 }}) ((float *)p)[i] = v;
    else if (d == {{ P.dt.f16 }}) ((nj_f16 *)p)[i] = nj_from_f32<nj_f16>(v);
    else ((nj_bf16 *)p)[i] = nj_from_f32<nj_bf16>(v);
}

NJ_DEVICE float nj_gact(nj_i64 a, float u)
{
    switch (a) {
    case {{ P.act.relu }}: return nj_act_relu(u);
    case {{ P.act.silu }}: return nj_act_silu(u);
    case {{ P.act.gelu_tanh }}: return nj_act_gelu_tanh(u);
    case {{ P.act.gelu_erf }}: return nj_act_gelu_erf(u);
    case {{ P.act.sigmoid }}: return nj_act_sigmoid(u);
    default: return u;
    }
}
NJ_DEVICE float nj_gdact(nj_i64 a, float u)
{
    switch (a) {
    case {{ P.act.relu }}: return nj_dact_relu(u);
    case {{ P.act.silu }}: return nj_dact_silu(u);
    case {{ P.act.gelu_tanh }}: return nj_dact_gelu_tanh(u);
    case {{ P.act.gelu_erf }}: return nj_dact_gelu_erf(u);
    case {{ P.act.sigmoid }}: return nj_dact_sigmoid(u);
    default: return 1.0f;
    }
}

/* Splits idx over the n axes of list ax (the innermost fastest, the outermost takes the rest) and
 * adds each operand's offset into off[0..7]. */
NJ_DEVICE void nj_gsplit(const nj_gdesc *G, const nj_i64 *ax, nj_i64 n, nj_i64 idx, nj_i64 *off)
{
    for (nj_i64 k = n - 1; k >= 0; k--) {
        const nj_i64 a = ax[k];
        nj_i64 i = idx;
        if (k > 0) {
            i = idx % G->extent[a];
            idx /= G->extent[a];
        }
        for (int o = 0; o < 8; o++) off[o] += i * G->stride[a][o];
    }
}

{% if P.pass == "fwd" then %}
/* Forward: block per statistic st of rows * kept_inner. The set's statistics on the shifted, scaled
 * values (prelude: nj_shift) by Welford, then a second walk writes y (and residual_out). */
NJ_KERNEL({{ P.kernel.main }}, NJ_GB)
{
    nj_grid_enter();
    NJ_SHARED(nj_gdesc, G, 1);
    NJ_SHARED(nj_welford, nj_wscratch, NJ_GNW);
    nj_gdesc_load(G, A);
    const nj_i64 st = nj_block_item();
    if (st >= A.rows * G->kept_inner) return;
    const nj_i64 fl = G->flags, N = G->reduce_size;
    const bool center = fl & {{ P.fl.center }}, res = fl & {{ P.fl.residual }}, resout = fl & {{ P.fl.resout }};
    const bool scale = fl & {{ P.fl.scale }}, bias = fl & {{ P.fl.bias }}, stats = fl & {{ P.fl.stats }};
    nj_i64 base[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    nj_gsplit(G, G->kept, G->nkept, st, base);
    const nj_tx *X = (const nj_tx *)A.x;
    const nj_i64 dres = G->dtype[NJ_OPD_RES];
    const nj_shift sh = nj_shift_of(nj_load_f32(X, base[NJ_OPD_X]) + (res ? nj_gload(A.res, base[NJ_OPD_RES], dres) : 0.0f),
                                    center);
    nj_welford w = nj_welford_init();
    float sq = 0.0f; /* RMS: the sum of squares */
#pragma unroll 1
    for (nj_i64 i = threadIdx.x; i < N; i += NJ_GB) {
        nj_i64 off[8];
        for (int o = 0; o < 8; o++) off[o] = base[o];
        nj_gsplit(G, G->red, G->nred, i, off);
        float v = nj_load_f32(X, off[NJ_OPD_X]);
        if (res) v += nj_gload(A.res, off[NJ_OPD_RES], dres);
        if (center) nj_welford_add(w, (v - sh.k) * sh.inv);
        else sq += nj_sq(v * sh.inv);
    }
    float mean_s, var_s;
    if (center) {
        w = nj_block_welford<NJ_GNW>(w, nj_wscratch);
        mean_s = w.mean;
        var_s = w.m2 * (1.0f / (float)N);
    } else {
        mean_s = 0.0f;
        var_s = nj_block_sum<NJ_GNW>(sq, (float *)nj_wscratch) * (1.0f / (float)N);
    }
    const float md = mean_s * sh.s;
    const float rstd = nj_rstd_scaled(var_s, sh, A.eps);
    if (stats && threadIdx.x == 0) {
        if (center) A.mean[base[NJ_OPD_STATS]] = sh.k + md;
        A.rstd[base[NJ_OPD_STATS]] = rstd;
    }
    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma, *BETA = (const nj_tparam *)A.beta;
#pragma unroll 1
    for (nj_i64 i = threadIdx.x; i < N; i += NJ_GB) {
        nj_i64 off[8];
        for (int o = 0; o < 8; o++) off[o] = base[o];
        nj_gsplit(G, G->red, G->nred, i, off);
        float v = nj_load_f32(X, off[NJ_OPD_X]);
        if (res) v += nj_gload(A.res, off[NJ_OPD_RES], dres);
        if (resout) nj_gstore(A.res_out, off[NJ_OPD_RESOUT], G->dtype[NJ_OPD_RESOUT], v);
        float u = (center ? ((v - sh.k) - md) : v) * rstd;
        if (scale) u *= nj_load_f32(GAMMA, off[NJ_OPD_PARAM]);
        if (bias) u += nj_load_f32(BETA, off[NJ_OPD_PARAM]);
        nj_gstore(A.y, off[NJ_OPD_Y], G->dtype[NJ_OPD_Y], nj_gact(G->act, u));
    }
}
{% else %}
/* x^ of one element: ((x - saved mean) - the set's correction) * rstd. The correction is the mean of
 * x - saved mean over the set: the float32 saved mean's rounding (|mean| * 2^-25) would otherwise move
 * x^ by |mean| * rstd * 2^-25, which a large offset makes visible. */
NJ_DEVICE float nj_gxhat(float x, float m, float c, float rstd) { return ((x - m) - c) * rstd; }

/* Backward dx: block per statistic. Walks: the correction (centered problems), the sums of
 * g = dy * act'(u) * gamma and g * x^, then dx = rstd * (g - mean(g) - x^ * mean(g * x^)) (no mean(g)
 * under RMS). The correction goes to the workspace at the statistic's offset for the dgamma kernel. */
NJ_KERNEL({{ P.kernel.main }}, NJ_GB)
{
    nj_grid_enter();
    NJ_SHARED(nj_gdesc, G, 1);
    NJ_SHARED(float, nj_scratch, 2 * NJ_GNW);
    nj_gdesc_load(G, A);
    const nj_i64 st = nj_block_item();
    if (st >= A.rows * G->kept_inner) return;
    const nj_i64 fl = G->flags, N = G->reduce_size, ddy = G->dtype[NJ_OPD_DY], act = G->act;
    const bool center = fl & {{ P.fl.center }}, scale = fl & {{ P.fl.scale }};
    const bool bias = (fl & {{ P.fl.bias }}) && A.beta; /* beta is optional without an activation */
    nj_i64 base[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    nj_gsplit(G, G->kept, G->nkept, st, base);
    const nj_tx *X = (const nj_tx *)A.x;
    const nj_tparam *GAMMA = (const nj_tparam *)A.gamma, *BETA = (const nj_tparam *)A.beta;
    const float rstd = A.rstd[base[NJ_OPD_STATS]], m = center ? A.mean[base[NJ_OPD_STATS]] : 0.0f;
    const float inv_n = 1.0f / (float)N;
    float c = 0.0f;
    if (center) {
        float s = 0.0f;
#pragma unroll 1
        for (nj_i64 i = threadIdx.x; i < N; i += NJ_GB) {
            nj_i64 off[8];
            for (int o = 0; o < 8; o++) off[o] = base[o];
            nj_gsplit(G, G->red, G->nred, i, off);
            s += nj_load_f32(X, off[NJ_OPD_X]) - m;
        }
        c = nj_block_sum<NJ_GNW>(s, nj_scratch) * inv_n;
        if (threadIdx.x == 0 && A.workspace) ((float *)A.workspace)[base[NJ_OPD_STATS]] = c;
    }
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll 1
    for (nj_i64 i = threadIdx.x; i < N; i += NJ_GB) {
        nj_i64 off[8];
        for (int o = 0; o < 8; o++) off[o] = base[o];
        nj_gsplit(G, G->red, G->nred, i, off);
        const float xh = nj_gxhat(nj_load_f32(X, off[NJ_OPD_X]), m, c, rstd);
        const float ga = scale ? nj_load_f32(GAMMA, off[NJ_OPD_PARAM]) : 1.0f;
        const float be = bias ? nj_load_f32(BETA, off[NJ_OPD_PARAM]) : 0.0f;
        const float g = nj_gload(A.dy, off[NJ_OPD_DY], ddy) * nj_gdact(act, xh * ga + be) * ga;
        s1 += g;
        s2 += g * xh;
    }
    nj_block_sum2<NJ_GNW>(s1, s2, nj_scratch);
    const float mg = center ? s1 * inv_n : 0.0f, mgx = s2 * inv_n;
    const bool degenerate = N <= (center ? 2 : 1);
#pragma unroll 1
    for (nj_i64 i = threadIdx.x; i < N; i += NJ_GB) {
        nj_i64 off[8];
        for (int o = 0; o < 8; o++) off[o] = base[o];
        nj_gsplit(G, G->red, G->nred, i, off);
        const float xh = nj_gxhat(nj_load_f32(X, off[NJ_OPD_X]), m, c, rstd);
        const float ga = scale ? nj_load_f32(GAMMA, off[NJ_OPD_PARAM]) : 1.0f;
        const float be = bias ? nj_load_f32(BETA, off[NJ_OPD_PARAM]) : 0.0f;
        const float g = nj_gload(A.dy, off[NJ_OPD_DY], ddy) * nj_gdact(act, xh * ga + be) * ga;
        /* a set with no direction besides its mean and x^: the exact form (bwd_lib.cuh: bwd_dx_expr) */
        const float dx = degenerate && A.eps >= 0.0f ? rstd * (g - mg) * (A.eps > 0.0f ? A.eps * rstd * rstd : 0.0f)
                                                     : rstd * (g - mg - xh * mgx);
        nj_gstore(A.dx, off[NJ_OPD_DX], G->dtype[NJ_OPD_DX], dx);
    }
}

/* dgamma, dbeta: block per gamma element j (a fixed grid of param_size blocks), walking every element
 * of x with that feature index (the axes that are not feature axes, batch included) in a fixed order,
 * then a fixed block reduction: deterministic without atomics. Runs after the dx kernel, whose
 * corrections it reads. */
NJ_KERNEL({{ P.kernel.pgrad }}, NJ_GB)
{
    nj_grid_enter();
    NJ_SHARED(nj_gdesc, G, 1);
    NJ_SHARED(float, nj_scratch, 2 * NJ_GNW);
    if (!A.dgamma && !A.dbeta) return; /* uniform across the grid */
    nj_gdesc_load(G, A);
    const nj_i64 j = nj_block_item();
    if (j >= G->param_size) return;
    const nj_i64 fl = G->flags, ddy = G->dtype[NJ_OPD_DY], act = G->act;
    const bool center = fl & {{ P.fl.center }}, scale = fl & {{ P.fl.scale }};
    const bool bias = (fl & {{ P.fl.bias }}) && A.beta; /* beta is optional without an activation */
    nj_i64 base[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    nj_gsplit(G, G->feat, G->nfeat, j, base);
    const nj_tx *X = (const nj_tx *)A.x;
    const float ga = scale ? nj_load_f32((const nj_tparam *)A.gamma, base[NJ_OPD_PARAM]) : 1.0f;
    const float be = bias ? nj_load_f32((const nj_tparam *)A.beta, base[NJ_OPD_PARAM]) : 0.0f;
    nj_i64 M = A.rows;
    for (nj_i64 k = 1; k < G->nother; k++) M *= G->extent[G->other[k]];
    const float *C = (const float *)A.workspace;
    float sg = 0.0f, sb = 0.0f;
#pragma unroll 1
    for (nj_i64 i = threadIdx.x; i < M; i += NJ_GB) {
        nj_i64 off[8];
        for (int o = 0; o < 8; o++) off[o] = base[o];
        nj_gsplit(G, G->other, G->nother, i, off);
        const nj_i64 os = off[NJ_OPD_STATS];
        const float m = center ? A.mean[os] : 0.0f, c = center && C ? C[os] : 0.0f;
        const float xh = nj_gxhat(nj_load_f32(X, off[NJ_OPD_X]), m, c, A.rstd[os]);
        const float dz = nj_gload(A.dy, off[NJ_OPD_DY], ddy) * nj_gdact(act, xh * ga + be);
        sg += dz * xh;
        sb += dz;
    }
    nj_block_sum2<NJ_GNW>(sg, sb, nj_scratch);
    if (threadIdx.x == 0) {
        if (A.dgamma) nj_store_f32((nj_tparam *)A.dgamma, base[NJ_OPD_PARAM], sg);
        if (A.dbeta) nj_store_f32((nj_tparam *)A.dbeta, base[NJ_OPD_PARAM], sb);
    }
}
{% end %}
