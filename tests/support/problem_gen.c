/* Random problem descriptors for tests; see problem_gen.h. */
#include "problem_gen.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"

uint64_t nj_pg_next(nj_pg_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int64_t nj_pg_int(nj_pg_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(nj_pg_next(r) % (uint64_t)(hi - lo + 1));
}

/* Strides for a random memory order of ext; pads between axes when asked. */
static void random_layout(nj_pg_rng *r, int rank, const int64_t *ext, int pad, int64_t *strides)
{
    int order[NJ_MAX_RANK];
    for (int i = 0; i < rank; i++) order[i] = i;
    for (int i = rank - 1; i > 0; i--) {
        int j = (int)nj_pg_int(r, 0, i), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int64_t s = pad ? nj_pg_int(r, 1, 2) : 1;
    for (int k = rank - 1; k >= 0; k--) { /* order[rank-1] is innermost */
        strides[order[k]] = s;
        s *= ext[order[k]];
        if (pad && nj_pg_int(r, 0, 3) == 0) s += nj_pg_int(r, 1, 3);
    }
}

static void random_operand(nj_pg_rng *r, const nj_problem_desc *p, int pad, nj_tensor_desc *t, int force)
{
    memset(t, 0, sizeof *t);
    if (nj_pg_int(r, 0, 2) == 0) t->dtype = (int32_t)nj_pg_int(r, 1, 3);
    if (!force && nj_pg_int(r, 0, 1) == 0) return; /* like x */
    t->rank = p->x.rank;
    memcpy(t->extents, p->x.extents, sizeof t->extents);
    random_layout(r, t->rank, t->extents, pad, t->strides);
}

/* Extents of planner-scale problems: 1 and sizes each family's thresholds sit between (warp rows up to
 * 1024, register rows, 16K, split from 2^18 and 4096-row column walks), primes around them. */
static const int64_t nj_pg_wide_ext[] = {1,    1,    1,     2,     3,     5,     7,      8,      13,     16,
                                         31,   32,   33,    64,    97,    127,   128,    255,    257,    1000,
                                         1024, 1031, 4093,  4096,  8191,  16384, 16411,  65536,  131071, 262144,
                                         262147, 1000003};

static void wide_extents(nj_pg_rng *r, int64_t max_elems, nj_problem_desc *p)
{
    int n = (int)NJ_ARRAY_LEN(nj_pg_wide_ext);
    for (int i = 0; i < p->x.rank; i++) p->x.extents[i] = nj_pg_wide_ext[nj_pg_int(r, 0, n - 1)];
    for (;;) { /* shrink the largest extent until the product fits */
        int64_t prod = 1;
        int big = 0;
        for (int i = 0; i < p->x.rank; i++) {
            prod = prod > max_elems ? prod : prod * p->x.extents[i];
            if (p->x.extents[i] > p->x.extents[big]) big = i;
        }
        if (prod <= max_elems) break;
        p->x.extents[big] = nj_pg_wide_ext[nj_pg_int(r, 0, 12)];
    }
    if (nj_pg_int(r, 0, 63) == 0) p->x.extents[nj_pg_int(r, 0, p->x.rank - 1)] = 0;
}

void nj_pg_problem(nj_pg_rng *r, const nj_pg_opts *opts, nj_problem_desc *p)
{
    int max_rank = opts && opts->max_rank ? opts->max_rank : 5;
    int64_t max_ext = opts && opts->max_extent ? opts->max_extent : 4;
    int pad = opts ? opts->allow_pad : 1, bcast = opts ? opts->allow_broadcast : 1;
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->x.dtype = (int32_t)nj_pg_int(r, 1, 3);
    p->x.rank = (int32_t)nj_pg_int(r, 1, max_rank);
    if (opts && opts->wide)
        wide_extents(r, opts->max_elems > 0 ? opts->max_elems : INT64_C(1) << 36, p);
    else
        for (int i = 0; i < p->x.rank; i++) p->x.extents[i] = nj_pg_int(r, 0, 2) == 0 ? 1 : nj_pg_int(r, 1, max_ext);
    random_layout(r, p->x.rank, p->x.extents, pad, p->x.strides);
    int broadcast = bcast && nj_pg_int(r, 0, 5) == 0;
    if (broadcast) p->x.strides[nj_pg_int(r, 0, p->x.rank - 1)] = 0;
    uint32_t all = (1u << p->x.rank) - 1u;
    p->reduce_axes = (uint32_t)nj_pg_int(r, 1, all);
    switch (nj_pg_int(r, 0, 2)) {
    case 0: p->feature_axes = p->reduce_axes; break;
    case 1: p->feature_axes = all & ~p->reduce_axes; break;
    default: p->feature_axes = (uint32_t)nj_pg_int(r, 0, all); break;
    }
    p->flags = (uint32_t)nj_pg_int(r, 0, NJ_FLAGS_ALL);
    if (!(p->flags & NJ_FLAG_RESIDUAL)) p->flags &= ~(uint32_t)NJ_FLAG_RESIDUAL_OUT;
    p->activation = (int32_t)nj_pg_int(r, 0, NJ_ACT_SIGMOID);
    p->param_dtype = nj_pg_int(r, 0, 1) ? 0 : nj_pg_int(r, 0, 1) ? NJ_F32 : p->x.dtype;
    /* outputs must not overlap, so a broadcast x forces them to have their own layout */
    random_operand(r, p, pad, &p->y, broadcast);
    random_operand(r, p, pad, &p->dy, 0);
    random_operand(r, p, pad, &p->dx, broadcast);
    if (p->flags & NJ_FLAG_RESIDUAL) {
        random_operand(r, p, pad, &p->residual, 0);
        p->residual.dtype = 0; /* residual must be x's dtype */
    }
    if (p->flags & NJ_FLAG_RESIDUAL_OUT) random_operand(r, p, pad, &p->residual_out, broadcast);
}

static int cmp_offsets(const void *a, const void *b)
{
    const nj_pg_offsets *x = a, *y = b;
    for (int o = 0; o < NJ_OPD_COUNT; o++)
        if (x->v[o] != y->v[o]) return x->v[o] < y->v[o] ? -1 : 1;
    return 0;
}

void nj_pg_sort_offsets(nj_pg_offsets *v, int64_t n) { qsort(v, (size_t)n, sizeof v[0], cmp_offsets); }

int64_t nj_pg_desc_offsets(const nj_problem_desc *p, nj_pg_offsets *out)
{
    const nj_tensor_desc *t[6] = {&p->x, &p->y, &p->residual, &p->residual_out, &p->dy, &p->dx};
    bool used[6] = {true, true, p->flags & NJ_FLAG_RESIDUAL, p->flags & NJ_FLAG_RESIDUAL_OUT, true, true};
    bool param = p->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    int64_t idx[NJ_MAX_RANK] = {0}, n = 0;
    for (int i = 0; i < p->x.rank; i++)
        if (p->x.extents[i] == 0) return 0;
    for (;;) {
        nj_pg_offsets *e = &out[n++];
        memset(e, 0, sizeof *e);
        for (int o = 0; o < 6; o++)
            for (int i = 0; used[o] && i < p->x.rank; i++)
                e->v[o] += idx[i] * (t[o]->rank ? t[o]->strides[i] : p->x.strides[i]);
        for (int i = 0; i < p->x.rank; i++) {
            if (param && (p->feature_axes >> i & 1u))
                e->v[NJ_OPD_PARAM] = e->v[NJ_OPD_PARAM] * p->x.extents[i] + idx[i];
            if (!(p->reduce_axes >> i & 1u)) e->v[NJ_OPD_STATS] = e->v[NJ_OPD_STATS] * p->x.extents[i] + idx[i];
        }
        int i = p->x.rank - 1;
        while (i >= 0 && ++idx[i] == p->x.extents[i]) idx[i--] = 0;
        if (i < 0) return n;
    }
}

int64_t nj_pg_canon_offsets(const struct nj_canon *c, nj_pg_offsets *out)
{
    int64_t idx[NJ_CANON_MAX_AXES] = {0}, n = 0;
    for (int i = 0; i < c->rank; i++)
        if (c->axes[i].extent == 0) return 0;
    for (;;) {
        nj_pg_offsets *e = &out[n++];
        memset(e, 0, sizeof *e);
        for (int i = 0; i < c->rank; i++)
            for (int o = 0; o < NJ_OPD_COUNT; o++) e->v[o] += idx[i] * c->axes[i].stride[o];
        int i = c->rank - 1;
        while (i >= 0 && ++idx[i] == c->axes[i].extent) idx[i--] = 0;
        if (i < 0) return n;
    }
}
