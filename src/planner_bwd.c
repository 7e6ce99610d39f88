/* Backward planner (planner_bwd.h).
 *
 * GENERAL family (bwd_general.cu), valid for every canonical problem:
 *  - nj_bwd_dx: a block per statistic walking the reduction twice (two block sums, then dx);
 *  - nj_bwd_pgrad (with scale or bias): a block per feature element walking the non-feature index space
 *    in a fixed order. Its grid is fixed (not a function of the batch), so the split of work between
 *    threads, and with it the rounding, is the same on every run: deterministic without atomics.
 * Everything here is a function of (canonical problem, device props) and goes into nj_plan_text. */
#include "planner_bwd.h"

#include <stdio.h>
#include <string.h>

static void bwd_launch(nj_plan_params *pp, const char *kernel, int32_t block, int64_t row_mult, int32_t grid_x,
                       const nj_device_props *dev)
{
    nj_launch *l = &pp->launch[pp->nlaunch++];
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel);
    l->block[0] = block;
    l->block[1] = l->block[2] = 1;
    l->grid_x = grid_x;
    l->grid_y = l->grid_z = 1;
    l->row_mult = row_mult;
    l->row_div = 1;
    /* two waves of resident blocks; more statistics loop inside the kernel */
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t per_sm = 2048 / block > 0 ? 2048 / block : 1;
    l->grid_x_cap = grid_x > 0 ? 0 : (int64_t)sms * per_sm * 2;
}

/* Threads for a block that walks n elements: one warp for tiny walks, up to 512 for long ones. */
static int32_t bwd_walk_block(int64_t n) { return n >= 8192 ? 512 : n >= 1024 ? 256 : n > 64 ? 128 : 32; }

/* Blocks of the parameter-gradient launch: one per feature element, at most two waves. */
static int32_t bwd_pgrad_grid(const nj_canon *c, const nj_device_props *dev, int32_t block)
{
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t cap = (int64_t)sms * (2048 / block) * 2;
    return (int32_t)(c->param_size < cap ? c->param_size : cap);
}

static nj_status plan_bwd_general(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    pp->family = NJ_FAMILY_GENERAL;
    pp->template_name = "bwd_general.cu";
    pp->vec = 1;
    pp->rows_per_block = 1;
    pp->split = 1;
    pp->regs_cache = 0;
    pp->block = bwd_walk_block(c->reduce_size);
    bwd_launch(pp, "nj_bwd_dx", pp->block, c->kept_inner, 0, dev);
    if (c->param_size > 0) {
        /* the walk per feature element is batch-dependent (run-time): a mid-size block covers both */
        int32_t pb = 256;
        bwd_launch(pp, "nj_bwd_pgrad", pb, 1, bwd_pgrad_grid(c, dev, pb), dev);
    }
    return NJ_OK;
}

nj_status nj_plan_backward(const nj_canon *c, const nj_device_props *dev, nj_plan_params *out)
{
    NJ_RETURN_IF(!c || !dev || !out, NJ_ERR_NULL_POINTER, "planner: NULL argument");
    memset(out, 0, sizeof *out);
    NJ_RETURN_IF(c->rank < 2 || c->rank > NJ_CANON_MAX_AXES, NJ_ERR_INTERNAL, "planner: canonical rank %d", c->rank);
    NJ_RETURN_IF(c->reduce_size < 1 || c->kept_inner < 1, NJ_ERR_INTERNAL, "planner: reduce size %lld, kept %lld",
                 (long long)c->reduce_size, (long long)c->kept_inner);
    NJ_RETURN_IF(c->param_size < 0 || c->param_size > INT32_MAX, NJ_ERR_UNSUPPORTED,
                 "planner: %lld gamma elements", (long long)c->param_size);
    out->pass = NJ_PASS_BACKWARD;
    return plan_bwd_general(c, dev, out);
}
