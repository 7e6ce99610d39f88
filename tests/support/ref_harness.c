/* Reference harness for tests; see ref_harness.h. */
#include "ref_harness.h"

#include <stdlib.h>
#include <string.h>

nj_problem_desc nj_refh_desc(nj_dtype dt, int rank, const int64_t *ext, uint32_t reduce, uint32_t feature,
                             uint32_t flags, int act)
{
    nj_problem_desc p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.flags = flags;
    p.activation = act;
    p.reduce_axes = reduce;
    p.feature_axes = feature;
    p.x = nj_tu_contiguous(dt, rank, ext);
    return p;
}

void nj_refh_split_index(const nj_problem_desc *p, int64_t lin, int64_t *kept, int64_t *feat)
{
    int64_t k = 0, f = 0, kmul = 1, fmul = 1;
    for (int a = p->x.rank - 1; a >= 0; a--) {
        int64_t i = lin % p->x.extents[a];
        lin /= p->x.extents[a];
        if (!((p->reduce_axes >> a) & 1u)) {
            k += i * kmul;
            kmul *= p->x.extents[a];
        }
        if ((p->feature_axes >> a) & 1u) {
            f += i * fmul;
            fmul *= p->x.extents[a];
        }
    }
    *kept = k;
    *feat = f;
}

static double *refh_dalloc(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

nj_status nj_refh_init(nj_refh *r, const nj_problem_desc *p)
{
    memset(r, 0, sizeof *r);
    r->p = *p;
    r->eps = 1e-5;
    nj_ref_sizes(p, &r->n, &r->k, &r->f);
    r->xt = p->x;
    r->rt = nj_tu_resolve(&p->residual, &p->x);
    r->dyt = nj_tu_resolve(&p->dy, &p->x);
    int64_t fe = r->f;
    r->pt = nj_tu_contiguous(p->param_dtype ? (nj_dtype)p->param_dtype : NJ_F32, 1, &fe);
    r->x = nj_tu_alloc(&r->xt);
    r->res = nj_tu_alloc(&r->rt);
    r->dy = nj_tu_alloc(&r->dyt);
    r->gamma = nj_tu_alloc(&r->pt);
    r->beta = nj_tu_alloc(&r->pt);
    r->y = refh_dalloc(r->n);
    r->resout = refh_dalloc(r->n);
    r->dx = refh_dalloc(r->n);
    r->mean = refh_dalloc(r->k);
    r->rstd = refh_dalloc(r->k);
    r->dgamma = refh_dalloc(r->f);
    r->dbeta = refh_dalloc(r->f);
    if (!r->x || !r->res || !r->dy || !r->gamma || !r->beta || !r->y || !r->resout || !r->dx || !r->mean ||
        !r->rstd || !r->dgamma || !r->dbeta) {
        nj_refh_free(r);
        return NJ_ERR_OUT_OF_MEMORY;
    }
    return NJ_OK;
}

void nj_refh_free(nj_refh *r)
{
    void *bufs[] = {r->x,      r->res, r->dy,   r->gamma, r->beta,   r->y,
                    r->resout, r->dx,  r->mean, r->rstd,  r->dgamma, r->dbeta};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(r, 0, sizeof *r);
}

void nj_refh_fill(nj_refh *r, uint64_t seed, double lo, double hi, double quantum)
{
    nj_rng g;
    nj_rng_seed(&g, seed);
    nj_tu_fill_uniform(r->x, &r->xt, &g, lo, hi, quantum);
    nj_tu_fill_uniform(r->res, &r->rt, &g, -1, 1, quantum);
    nj_tu_fill_uniform(r->dy, &r->dyt, &g, -1, 1, 0);
    nj_tu_fill_uniform(r->gamma, &r->pt, &g, 0.5, 1.5, quantum);
    nj_tu_fill_uniform(r->beta, &r->pt, &g, -0.5, 0.5, quantum);
}

nj_ref_inputs nj_refh_inputs(const nj_refh *r)
{
    nj_ref_inputs in = {.x = r->x, .dy = r->dy, .eps = r->eps};
    if (r->p.flags & NJ_FLAG_RESIDUAL) in.residual = r->res;
    if (r->p.flags & NJ_FLAG_SCALE) in.gamma = r->gamma;
    if (r->p.flags & NJ_FLAG_BIAS) in.beta = r->beta;
    return in;
}

nj_status nj_refh_forward(nj_refh *r)
{
    nj_ref_inputs in = nj_refh_inputs(r);
    nj_ref_outputs out = {.y = r->y, .residual_out = r->resout, .mean = r->mean, .rstd = r->rstd};
    return nj_ref_forward(&r->p, &in, &out);
}

nj_status nj_refh_backward(nj_refh *r)
{
    nj_ref_inputs in = nj_refh_inputs(r);
    nj_ref_outputs out = {.dx = r->dx, .dgamma = r->dgamma, .dbeta = r->dbeta, .mean = r->mean, .rstd = r->rstd};
    return nj_ref_backward(&r->p, &in, &out);
}
