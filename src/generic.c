/* Generic kernels: the modules (rendered from templates/generic.cu, keyed and cached like the library
 * modules: one per pass, x dtype and gamma dtype, never per problem), a problem's descriptor, and the
 * per-plan kernel sets that launch them. src/async.c decides when they run. */
#include "generic.h"

#include "codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(nj_gdesc) == 1080, "nj_gdesc differs from templates/generic.cu");

static const char *const nj_generic_kernels[2][2] = {{"nj_generic_fwd", NULL},
                                                     {"nj_generic_bwd_dx", "nj_generic_bwd_pgrad"}};

void nj_generic_desc(const nj_canon *c, nj_gdesc *d)
{
    memset(d, 0, sizeof *d);
    d->rank = c->rank;
    d->flags = c->flags;
    d->act = c->act;
    d->reduce_size = c->reduce_size;
    d->kept_inner = c->kept_inner;
    d->param_size = c->param_size;
    for (int o = 0; o < NJ_OPD_COUNT; o++) d->dtype[o] = c->dtype[o];
    for (int a = 0; a < c->rank; a++) {
        const nj_canon_axis *x = &c->axes[a];
        d->extent[a] = x->extent;
        for (int o = 0; o < NJ_OPD_COUNT; o++) d->stride[a][o] = x->stride[o];
        if (x->reduce) d->red[d->nred++] = a;
        else d->kept[d->nkept++] = a;
        if (x->feature) d->feat[d->nfeat++] = a;
        else d->other[d->nother++] = a;
    }
}

/* The module's own plan: its kernels as launches (grids come from each plan's set, not from here). */
static void nj_generic_params(nj_pass pass, nj_plan_params *pp)
{
    memset(pp, 0, sizeof *pp);
    pp->pass = pass;
    pp->family = NJ_FAMILY_GENERAL;
    pp->template_name = "generic.cu";
    pp->block = NJ_GENERIC_BLOCK;
    pp->vec = 1;
    pp->split = 1;
    pp->rows_per_block = 1;
    int b = pass == NJ_PASS_BACKWARD;
    for (int i = 0; i < 2 && nj_generic_kernels[b][i]; i++)
        nj_plan_add_launch(pp, nj_generic_kernels[b][i], NJ_GENERIC_BLOCK, 1, 1, 1);
}

typedef struct nj_generic_key {
    nj_pass pass;
    int32_t xdt, pdt;
} nj_generic_key;

static const char *nj_ctype_of(int32_t d) { return d == NJ_F16 ? "nj_f16" : d == NJ_BF16 ? "nj_bf16" : "float"; }

static nj_status nj_generic_render(const void *ud, char **source)
{
    const nj_generic_key *k = ud;
    const char *text;
    size_t len;
    NJ_TRY(nj_template_get("generic.cu", &text, &len));
    int b = k->pass == NJ_PASS_BACKWARD;
    char env[1024];
    int n = snprintf(env, sizeof env,
                     "{pass = '%s', block = %d, desc = %d, ctype = {x = '%s', param = '%s'},"
                     " dt = {f32 = %d, f16 = %d, bf16 = %d},"
                     " fl = {center = %u, scale = %u, bias = %u, residual = %u, resout = %u, stats = %u},"
                     " act = {relu = %d, silu = %d, gelu_tanh = %d, gelu_erf = %d, sigmoid = %d},"
                     " kernel = {main = '%s', pgrad = '%s'}}",
                     b ? "bwd" : "fwd", NJ_GENERIC_BLOCK, NJ_GDESC_LIB_SLOT, nj_ctype_of(k->xdt), nj_ctype_of(k->pdt), NJ_F32, NJ_F16,
                     NJ_BF16, NJ_FLAG_CENTER, NJ_FLAG_SCALE, NJ_FLAG_BIAS, NJ_FLAG_RESIDUAL, NJ_FLAG_RESIDUAL_OUT,
                     NJ_FLAG_SAVE_STATS, NJ_ACT_RELU, NJ_ACT_SILU, NJ_ACT_GELU_TANH, NJ_ACT_GELU_ERF, NJ_ACT_SIGMOID,
                     nj_generic_kernels[b][0], b ? nj_generic_kernels[b][1] : "");
    NJ_RETURN_IF(n < 0 || (size_t)n >= sizeof env, NJ_ERR_INTERNAL, "generic: environment text too long");
    return nj_render_string("generic.cu", text, env, source);
}

nj_status nj_generic_module(nj_context *ctx, nj_pass pass, int32_t xdt, int32_t pdt, int load, nj_kernelset **out,
                            int32_t *compiled)
{
    /* a problem without gamma takes the float32 module: it never reads one */
    nj_generic_key k = {pass, xdt, pdt == NJ_DTYPE_NONE ? NJ_F32 : pdt};
    NJ_RETURN_IF(nj_dtype_size((nj_dtype)xdt) == 0 || nj_dtype_size((nj_dtype)k.pdt) == 0, NJ_ERR_BAD_DTYPE,
                 "generic kernels: x dtype %d, gamma dtype %d", (int)xdt, (int)pdt);
    nj_plan_params pp;
    nj_generic_params(pass, &pp);
    char head[256];
    snprintf(head, sizeof head, "normjit-signature\ngeneric %s\nx %s\nparam %s\nblock %d\n",
             pass == NJ_PASS_BACKWARD ? "bwd" : "fwd", nj_dtype_name((nj_dtype)xdt), nj_dtype_name((nj_dtype)k.pdt),
             NJ_GENERIC_BLOCK);
    return nj_kernels_custom(ctx, head, &pp, nj_generic_render, &k, load, out, compiled);
}

size_t nj_generic_workspace(const nj_plan *plan, nj_pass pass)
{
    const nj_canon *c = &plan->canon;
    if (pass != NJ_PASS_BACKWARD || !(c->flags & NJ_FLAG_CENTER) || c->param_size == 0) return 0;
    return (size_t)plan->rows * (size_t)c->kept_inner * sizeof(float); /* within 2^48 elements */
}

/* A launch of generic kernel i of pass: a block per statistic, or (dgamma) per gamma element. */
static void nj_generic_launch(nj_launch *l, const nj_canon *c, nj_pass pass, int i, void *fn_desc)
{
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s", nj_generic_kernels[pass == NJ_PASS_BACKWARD][i]);
    l->lib = NJ_GENERIC_LAUNCH;
    l->arg[0][NJ_GDESC_LIB_SLOT] = (int64_t)(intptr_t)fn_desc;
    l->block[0] = NJ_GENERIC_BLOCK;
    l->block[1] = l->block[2] = 1;
    if (i == 0) {
        l->row_mult = c->kept_inner;
        l->row_div = 1;
    } else {
        l->grid_x = (int32_t)c->param_size;
    }
}

nj_status nj_generic_set_create(nj_plan *plan, nj_pass pass, nj_kernelset **out)
{
    nj_context *ctx = plan->ctx;
    nj_canon view;
    nj_canon_for_pass(&plan->canon, pass, &view);
    int has_pgrad = pass == NJ_PASS_BACKWARD && view.param_size > 0;
    NJ_RETURN_IF(has_pgrad && view.param_size > INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "generic backward: %lld gamma elements (at most 2^31 - 1)", (long long)view.param_size);
    nj_kernelset *mod;
    NJ_TRY(nj_generic_module(ctx, pass, view.dtype[NJ_OPD_X], view.dtype[NJ_OPD_PARAM], 1, &mod, NULL));
    nj_gdesc d;
    nj_generic_desc(&view, &d);
    nj_backend *b = ctx->backend;
    void *dev = NULL;
    NJ_TRY(b->ops->mem_alloc(b, sizeof d, &dev));
    nj_status s = b->ops->upload(b, dev, &d, sizeof d);
    nj_kernelset *ks = s == NJ_OK ? calloc(1, sizeof *ks) : NULL;
    if (!ks) {
        b->ops->mem_free(b, dev);
        return s != NJ_OK ? s : nj_fail(NJ_ERR_OUT_OF_MEMORY, "generic kernel set");
    }
    snprintf(ks->hash, sizeof ks->hash, "generic");
    nj_generic_params(pass, &ks->params);
    ks->params.nlaunch = 1 + has_pgrad;
    for (int i = 0; i < ks->params.nlaunch; i++) {
        nj_generic_launch(&ks->params.launch[i], &view, pass, i, dev);
        ks->fn[i] = mod->fn[i];
    }
    /* the dx kernel's corrections, read by the dgamma kernel: a float a statistic */
    if (has_pgrad && (view.flags & NJ_FLAG_CENTER)) ks->params.workspace_per_row = (uint64_t)view.kept_inner * 4u;
    ks->state = NJ_KERNELSET_GENERIC;
    *out = ks;
    return NJ_OK;
}

void nj_generic_set_free(nj_context *ctx, nj_kernelset *ks)
{
    if (!ks) return;
    void *dev = (void *)(intptr_t)ks->params.launch[0].arg[0][NJ_GDESC_LIB_SLOT];
    if (dev) ctx->backend->ops->mem_free(ctx->backend, dev);
    free(ks);
}
