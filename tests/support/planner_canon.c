/* Hand-built canonical problems (see planner_canon.h). */
#include "planner_canon.h"

#include <string.h>

void tc_begin(nj_canon *c, nj_dtype dt, nj_dtype pdt, uint32_t flags, int32_t act, int64_t batch)
{
    memset(c, 0, sizeof *c);
    c->flags = flags;
    c->act = act;
    c->rank = 1;
    c->axes[0].extent = batch;
    c->dtype[NJ_OPD_X] = c->dtype[NJ_OPD_Y] = c->dtype[NJ_OPD_DY] = c->dtype[NJ_OPD_DX] = dt;
    c->present = 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX;
    if (flags & NJ_FLAG_RESIDUAL) c->dtype[NJ_OPD_RES] = dt, c->present |= 1u << NJ_OPD_RES;
    if (flags & NJ_FLAG_RESIDUAL_OUT) c->dtype[NJ_OPD_RESOUT] = dt, c->present |= 1u << NJ_OPD_RESOUT;
    if (flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) c->dtype[NJ_OPD_PARAM] = pdt, c->present |= 1u << NJ_OPD_PARAM;
    c->dtype[NJ_OPD_STATS] = NJ_F32;
    if (flags & NJ_FLAG_SAVE_STATS) c->present |= 1u << NJ_OPD_STATS;
}

void tc_axis(nj_canon *c, int64_t extent, bool reduce, bool feature)
{
    nj_canon_axis *a = &c->axes[c->rank++];
    memset(a, 0, sizeof *a);
    a->extent = extent;
    a->reduce = reduce;
    a->feature = feature;
}

void tc_kind(nj_canon *c)
{
    int nred = 0;
    for (int i = 1; i < c->rank; i++) nred += c->axes[i].reduce;
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    if (nred == 1 && in->reduce && in->stride[NJ_OPD_X] == 1)
        c->kind = NJ_KIND_ROW;
    else if (!in->reduce && in->stride[NJ_OPD_X] == 1)
        c->kind = NJ_KIND_COLUMN;
    else
        c->kind = NJ_KIND_GENERAL;
}

void tc_finish(nj_canon *c)
{
    int64_t act = 1, param = 1, stats = 1;
    c->reduce_size = 1, c->kept_inner = 1;
    for (int i = c->rank - 1; i >= 0; i--) {
        nj_canon_axis *a = &c->axes[i];
        for (int o = NJ_OPD_X; o <= NJ_OPD_DX; o++) a->stride[o] = (c->present >> o) & 1u ? act : 0;
        act *= a->extent;
        bool has_param = (c->present >> NJ_OPD_PARAM) & 1u;
        a->stride[NJ_OPD_PARAM] = has_param && a->feature ? param : 0;
        if (has_param && a->feature) param *= a->extent;
        a->stride[NJ_OPD_STATS] = !a->reduce ? stats : 0;
        if (!a->reduce) stats *= a->extent;
        if (a->reduce) c->reduce_size *= a->extent;
        else if (i > 0) c->kept_inner *= a->extent;
    }
    c->param_size = (c->present >> NJ_OPD_PARAM) & 1u ? param : 0;
    tc_kind(c);
}

void tc_row(nj_canon *c, nj_dtype dt, int64_t n, uint32_t flags)
{
    tc_begin(c, dt, NJ_F32, flags, NJ_ACT_NONE, 64);
    tc_axis(c, n, true, (flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0);
    tc_finish(c);
}
