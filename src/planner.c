/* Planner driver (planner.h): canonical problem + device properties -> plan for one pass. The family
 * registry (family.c, family_list.h) picks the first family that applies, its planner (planner_<family>.c)
 * fills the launches, and the driver checks the result (planner_check.c). Everything in a plan is a
 * function of (canonical problem, pass, device props) and goes into nj_plan_text. Launches whose grid
 * follows the batch have a block (or warp) per work item and no loop, except where a block's item is tiny
 * (nj_plan_grid_loop). Every backward choice is deterministic in its reduction order: no floating-point
 * atomics, so the same inputs give the same bits on every run. */
#include "family.h"
#include "planner_impl.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* The set corrections dl (templates/bwd_lib.cuh: the saved float32 mean's rounding) that a dx kernel
 * leaves for the separate dgamma/dbeta walks: a float a statistic after everything else, written
 * and read only for sets whose |mean| * rstd exceeds NJ_FIX_RATIO (none for ordinary data). */
static void bwd_reserve_dl(const nj_canon *c, nj_plan_params *pp)
{
    if (!(c->flags & NJ_FLAG_CENTER) || (pp->pgrad != NJ_PGRAD_WALK && pp->pgrad != NJ_PGRAD_TILES && pp->pgrad != NJ_PGRAD_TILES_DX))
        return;
    nj_plan_ws(pp, NJ_WS_DL, (int64_t)(pp->workspace_fixed / sizeof(float)),
               (int64_t)(pp->workspace_per_row / sizeof(float)));
    pp->workspace_per_row += (uint64_t)c->kept_inner * sizeof(float);
}

/* What the backward planners assume of every problem: gamma elements and the parameter-gradient walks'
 * index space within 32 bits. */
static nj_status plan_bwd_supported(const nj_canon *c)
{
    NJ_RETURN_IF(c->param_size < 0 || c->param_size > INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "planner: %lld gamma elements", (long long)c->param_size);
    int64_t nonfeat = 1; /* the parameter-gradient walks index the non-batch, non-feature space in 32 bits */
    for (int a = 1; a < c->rank; a++)
        if (!c->axes[a].feature) nonfeat = nonfeat > INT32_MAX / c->axes[a].extent ? INT32_MAX : nonfeat * c->axes[a].extent;
    NJ_RETURN_IF(c->param_size > 0 && nonfeat >= INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "planner: backward with scale/bias over more than 2^31 - 1 elements per batch row and feature");
    return NJ_OK;
}

/* A plan whose part launch reads the items before its main launch reads them again (every split or
 * tiled family: fwd_row, column, general, channels_last) walks the main launch backwards: blocks start in
 * about their index order, so the part launch's last items are the freshest in L2 and the reversed walk
 * meets them first. What the second read finds in L2 is then about the cache's size, not what survives a
 * whole pass (nothing, past ~75 MB on an H200). NORMJIT_PLAN_NO_REVERSE=1: both walk forwards, as before. */
static void plan_reverse(nj_plan_params *pp)
{
    if (pp->role[NJ_ROLE_PART] && pp->role[NJ_ROLE_MAIN] && !pp->grid_loop && !nj_plan_switched_off("REVERSE"))
        pp->reverse = 1;
}

static nj_status plan_family(const nj_canon *c, nj_pass pass, const nj_device_props *dev, nj_plan_params *out)
{
    bool bwd = pass == NJ_PASS_BACKWARD;
    if (bwd) NJ_TRY(plan_bwd_supported(c));
    const nj_family_info *f = nj_family_pick(c, pass, dev);
    NJ_RETURN_IF(!f, NJ_ERR_INTERNAL, "planner: no family applies"); /* GENERAL applies to every problem */
    out->family = f->id;
    out->template_name = f->template_name[bwd];
    NJ_TRY(f->plan[bwd](c, dev, out));
    if (bwd) bwd_reserve_dl(c, out);
    plan_reverse(out);
    return NJ_OK;
}

nj_status nj_plan_pass(const nj_canon *c, nj_pass pass, const nj_device_props *dev, nj_plan_params *out)
{
    NJ_RETURN_IF(!c || !dev || !out, NJ_ERR_NULL_POINTER, "planner: NULL argument");
    memset(out, 0, sizeof *out);
    NJ_RETURN_IF(c->rank < 2 || c->rank > NJ_CANON_MAX_AXES, NJ_ERR_INTERNAL, "planner: canonical rank %d", c->rank);
    NJ_RETURN_IF(c->reduce_size < 1 || c->kept_inner < 1, NJ_ERR_INTERNAL, "planner: reduce size %lld, kept %lld",
                 (long long)c->reduce_size, (long long)c->kept_inner);
    NJ_RETURN_IF(c->kind < NJ_KIND_ROW || c->kind > NJ_KIND_GENERAL, NJ_ERR_INTERNAL, "planner: unknown canonical kind %d",
                 c->kind);
    NJ_RETURN_IF(pass != NJ_PASS_FORWARD && pass != NJ_PASS_BACKWARD, NJ_ERR_BAD_ARGUMENT, "planner: unknown pass %d",
                 (int)pass);
    out->pass = pass;
    nj_status s = plan_family(c, pass, dev, out);
    if (s == NJ_OK) s = nj_plan_check(c, out, dev);
    /* a broken invariant is a planner bug: debug builds stop at it, release builds return the status */
    assert(s != NJ_ERR_INTERNAL && "planner invariant broken (nj_last_error names it)");
    return s;
}

void nj_plan_unaligned(const nj_plan_params *main, nj_plan_params *out)
{
    *out = *main;
    if (main->align_opds == 0) return;
    out->vec = 1;
    out->copy_vec = 0;
    out->regs_cache = 0;
    if (out->unroll > 1) out->unroll = 1; /* a rare path that only has to be right: walks rolled */
    if (out->persist && out->pass == NJ_PASS_FORWARD) { /* streamed rows: a block a row again */
        nj_launch *m = &out->launch[out->role[NJ_ROLE_MAIN] - 1];
        m->grid_x_cap = 0;
        m->even = 0;
        if (out->stage) m->shmem = 0; /* gamma/beta read where used */
        out->stage = 0;
    }
    /* the backward's slots walk their rows without fetching ahead: a thread's vec-1 share holds more
     * registers (f16 rows of 1024, f32 gamma: 70 at sm_80, past the 64 its 8 slots an SM allow) */
    if (out->persist && out->pass == NJ_PASS_BACKWARD && out->stage) {
        out->launch[out->role[NJ_ROLE_MAIN] - 1].shmem = 0;
        out->stage = 0;
    }
    /* a channels-last cluster's tiles: the unaligned variant reads them again rather than staging them */
    if (out->stage && out->family == NJ_FAMILY_CHANNELS_LAST) {
        out->launch[out->role[NJ_ROLE_MAIN] - 1].shmem = 0;
        out->stage = 0;
    }
    /* a staged streamed row (P.stage 2): the unaligned walks re-read x, as they always did */
    if (out->stage == 2 && out->family == NJ_FAMILY_ROW) {
        out->launch[out->role[NJ_ROLE_MAIN] - 1].shmem = 0;
        out->stage = 0;
    }
    out->persist = 0;
    out->unaligned = 1;
    out->align_opds = 0;
}

nj_status nj_plan_variant(const nj_canon *c, nj_pass pass, nj_variant v, const nj_device_props *dev,
                          nj_plan_params *out)
{
    NJ_RETURN_IF(v != NJ_VARIANT_MAIN && v != NJ_VARIANT_UNALIGNED, NJ_ERR_BAD_ARGUMENT, "planner: variant %d", (int)v);
    NJ_TRY(nj_plan_pass(c, pass, dev, out));
    if (v == NJ_VARIANT_UNALIGNED) nj_plan_unaligned(out, out);
    return NJ_OK;
}

nj_status nj_pass_plan_make(const nj_canon *full, nj_pass pass, const nj_device_props *dev, nj_pass_plan *out)
{
    NJ_RETURN_IF(!full || !dev || !out, NJ_ERR_NULL_POINTER, "planner: NULL argument");
    memset(out, 0, sizeof *out);
    out->pass = pass;
    nj_canon_for_pass(full, pass, &out->view);
    out->status = nj_plan_pass(&out->view, pass, dev, &out->main);
    if (out->status != NJ_OK) {
        snprintf(out->detail, sizeof out->detail, "%s", nj_last_error());
        return out->status;
    }
    return NJ_OK;
}

void nj_pass_plan_variant(const nj_pass_plan *pl, nj_variant v, nj_plan_params *out)
{
    if (v == NJ_VARIANT_UNALIGNED) nj_plan_unaligned(&pl->main, out);
    else *out = pl->main;
}

nj_status nj_pass_plan_status(const nj_pass_plan *pl)
{
    if (pl->status == NJ_OK) return NJ_OK;
    return nj_fail(pl->status, "%s", pl->detail);
}
