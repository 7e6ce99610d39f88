/* Planner invariants (planner.h: nj_plan_check): what codegen, the cache metadata and the launch code
 * assume of every plan, checked once on each finished plan rather than trusted. A broken invariant is a
 * planner bug (NJ_ERR_INTERNAL, naming it); a grid or workspace that the problem's own batch would
 * overflow is the caller's input (NJ_ERR_OVERFLOW). */
#include "family.h"
#include "planner.h"

#define NJ_CHECK_GRID_YZ_MAX 65535

static nj_status check_launch(const nj_plan_params *pp, int32_t i, int32_t maxt, int32_t max_shared)
{
    const nj_launch *l = &pp->launch[i];
    NJ_RETURN_IF(!l->kernel[0], NJ_ERR_INTERNAL, "planner: launch %d has no kernel", (int)i);
    NJ_RETURN_IF(l->lib < NJ_LIB_NONE || l->lib >= NJ_LIB_COUNT, NJ_ERR_INTERNAL, "planner: launch %d: library %d",
                 (int)i, (int)l->lib);
    NJ_RETURN_IF(l->block[0] < 32 || l->block[0] > maxt || l->block[0] % 32 != 0 || l->block[1] != 1 ||
                     l->block[2] != 1,
                 NJ_ERR_INTERNAL, "planner: %s: block %dx%dx%d (1-D, whole warps, at most %d threads)", l->kernel,
                 l->block[0], l->block[1], l->block[2], (int)maxt);
    NJ_RETURN_IF(l->even && (l->even != 1 || l->grid_x > 0 || l->grid_x_cap == 0), NJ_ERR_INTERNAL,
                 "planner: %s: even rounds without a capped grid", l->kernel);
    if (l->grid_x > 0) {
        NJ_RETURN_IF(l->grid_y < 1 || l->grid_y > NJ_CHECK_GRID_YZ_MAX || l->grid_z < 1 ||
                         l->grid_z > NJ_CHECK_GRID_YZ_MAX,
                     NJ_ERR_INTERNAL, "planner: %s: fixed grid %dx%dx%d", l->kernel, l->grid_x, l->grid_y, l->grid_z);
    } else {
        NJ_RETURN_IF(l->grid_x < 0 || l->row_mult < 1 || l->row_div < 1 || l->grid_x_cap < 0 ||
                         l->grid_x_cap > 0x7fffffffLL,
                     NJ_ERR_INTERNAL, "planner: %s: grid %d, %lld blocks per %lld rows, cap %lld", l->kernel,
                     l->grid_x, (long long)l->row_mult, (long long)l->row_div, (long long)l->grid_x_cap);
    }
    NJ_RETURN_IF(l->shmem > (uint32_t)max_shared, NJ_ERR_INTERNAL,
                 "planner: %s: %u bytes of dynamic shared memory, at most %d", l->kernel, l->shmem, (int)max_shared);
    return NJ_OK;
}

/* The named fields templates read (planner.h: roles, dgamma/dbeta strategy, workspace regions): a main
 * launch, roles naming launches of the right kind, a strategy exactly when a backward has gamma/beta. */
static nj_status check_named(const nj_canon *c, const nj_plan_params *pp)
{
    NJ_RETURN_IF(pp->family != NJ_FAMILY_LIBRARY && !pp->role[NJ_ROLE_MAIN], NJ_ERR_INTERNAL, "planner: no main launch");
    for (int r = 0; r < NJ_ROLE_COUNT; r++) {
        if (!pp->role[r]) continue;
        NJ_RETURN_IF(pp->role[r] < 1 || pp->role[r] > pp->nlaunch, NJ_ERR_INTERNAL, "planner: role %s: launch %d",
                     nj_role_name(r), (int)pp->role[r]);
        int32_t lib = pp->launch[pp->role[r] - 1].lib;
        int32_t want = r == NJ_ROLE_MERGE ? NJ_LIB_MERGE : r == NJ_ROLE_COLSUM ? NJ_LIB_COLSUM : NJ_LIB_NONE;
        NJ_RETURN_IF(lib != want, NJ_ERR_INTERNAL, "planner: role %s on %s", nj_role_name(r),
                     pp->launch[pp->role[r] - 1].kernel);
    }
    bool params = pp->pass == NJ_PASS_BACKWARD && (c->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) && c->param_size > 0;
    NJ_RETURN_IF(pp->pgrad < NJ_PGRAD_NONE || pp->pgrad >= NJ_PGRAD_COUNT || params != (pp->pgrad != NJ_PGRAD_NONE),
                 NJ_ERR_INTERNAL, "planner: dgamma/dbeta strategy %d", (int)pp->pgrad);
    bool sums = pp->pgrad == NJ_PGRAD_FUSED || pp->pgrad == NJ_PGRAD_SLOTS || pp->pgrad == NJ_PGRAD_SETS ||
                pp->pgrad == NJ_PGRAD_ROWS || pp->pgrad == NJ_PGRAD_PIECES || pp->pgrad_parts > 1;
    NJ_RETURN_IF(pp->pgrad != NJ_PGRAD_NONE && sums != (pp->role[NJ_ROLE_COLSUM] != 0), NJ_ERR_INTERNAL,
                 "planner: dgamma/dbeta %s with%s a column sum", nj_pgrad_name(pp->pgrad),
                 pp->role[NJ_ROLE_COLSUM] ? "" : "out");
    for (int w = 0; w < NJ_WS_COUNT; w++)
        NJ_RETURN_IF((pp->ws_used & (1u << w)) && (pp->ws[w].fixed < 0 || pp->ws[w].per_row < 0), NJ_ERR_INTERNAL,
                     "planner: workspace region %s", nj_ws_name_text(w));
    return NJ_OK;
}

nj_status nj_plan_check(const nj_canon *c, const nj_plan_params *pp, const nj_device_props *dev)
{
    NJ_RETURN_IF(!c || !pp || !dev, NJ_ERR_NULL_POINTER, "planner check: NULL argument");
    NJ_RETURN_IF(pp->overflow, NJ_ERR_INTERNAL, "planner: a %s plan needs more than %d launches",
                 pp->pass == NJ_PASS_BACKWARD ? "backward" : "forward", NJ_MAX_LAUNCHES);
    NJ_RETURN_IF(pp->nlaunch < 1 || pp->nlaunch > NJ_MAX_LAUNCHES, NJ_ERR_INTERNAL, "planner: %d launches",
                 (int)pp->nlaunch);
    NJ_RETURN_IF(!pp->template_name, NJ_ERR_INTERNAL, "planner: no template");
    NJ_RETURN_IF(pp->vec != 1 && pp->vec != 2 && pp->vec != 4 && pp->vec != 8, NJ_ERR_INTERNAL,
                 "planner: vector width %d", (int)pp->vec);
    /* a wider copy: a multiple of the vector, 16 bytes at most (nj_vec_io), only where something is staged */
    NJ_RETURN_IF(pp->copy_vec && (pp->copy_vec <= pp->vec || pp->copy_vec % pp->vec != 0 ||
                                  pp->copy_vec * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_X]) > 16 ||
                                  pp->copy_vec * (int64_t)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]) > 16 ||
                                  !pp->stage || pp->unaligned),
                 NJ_ERR_INTERNAL, "planner: copy vector %d beside vector %d", (int)pp->copy_vec, (int)pp->vec);
    /* a pipelined split (P.lag): the families that have one, a zero launch that clears its counters, a
     * region for them and for the merged statistics */
    bool pipe_ok = pp->split > 1 &&
                   ((pp->pass == NJ_PASS_FORWARD &&
                     (pp->family == NJ_FAMILY_ROW || pp->family == NJ_FAMILY_CHANNELS_LAST ||
                      pp->family == NJ_FAMILY_GENERAL || pp->family == NJ_FAMILY_COLUMN)) ||
                    (pp->pass == NJ_PASS_BACKWARD && pp->family == NJ_FAMILY_GENERAL &&
                     (pp->pgrad == NJ_PGRAD_NONE || pp->pgrad == NJ_PGRAD_SETS)) ||
                    (pp->pass == NJ_PASS_BACKWARD && pp->family == NJ_FAMILY_CHANNELS_LAST) ||
                    (pp->pass == NJ_PASS_BACKWARD && pp->family == NJ_FAMILY_COLUMN &&
                     (pp->pgrad == NJ_PGRAD_NONE || pp->pgrad == NJ_PGRAD_FUSED) && pp->pipe_group > 0)) &&
                   pp->role[NJ_ROLE_ZERO] && !pp->role[NJ_ROLE_PART] && (pp->ws_used & (1u << NJ_WS_FLAGS)) &&
                   (pp->ws_used & (1u << NJ_WS_MEANS));
    NJ_RETURN_IF(pp->pipe_group < 0 || (pp->pipe_group > 0 && (pp->lag == 0 || pp->family != NJ_FAMILY_COLUMN)),
                 NJ_ERR_INTERNAL, "planner: merge groups of %d pieces", (int)pp->pipe_group);
    NJ_RETURN_IF(pp->lag < 0 || (pp->lag > 0 && !pipe_ok) || (pp->lag == 0 && pp->role[NJ_ROLE_ZERO]), NJ_ERR_INTERNAL,
                 "planner: lag %d (split %d)", (int)pp->lag, (int)pp->split);
    NJ_RETURN_IF(pp->split < 1 || pp->rows_per_block < 1 || pp->regs_cache < 0, NJ_ERR_INTERNAL,
                 "planner: split %d, rows per block %d, registers %d", (int)pp->split, (int)pp->rows_per_block,
                 (int)pp->regs_cache);
    int32_t maxt = dev->max_threads_per_block > 0 ? dev->max_threads_per_block : 1024;
    int32_t maxs = dev->max_shared_per_block > 0xC000 ? dev->max_shared_per_block : 0xC000;
    for (int32_t i = 0; i < pp->nlaunch; i++) NJ_TRY(check_launch(pp, i, maxt, maxs));
    /* what a plan keeps in its main launch's shared memory (P.stage): image and tile plans always
     * something; 1: a whole column walk's tile, a persistent row forward's gamma/beta, an image's slab
     * (backward: x and dy) or a tile of rows; 2: a streamed row forward's x, an image backward's x
     * alone, or a cluster backward's slots' x and gamma (beta) */
    bool row_stage = pp->family == NJ_FAMILY_ROW && (pp->persist > 0 || (pp->pass == NJ_PASS_BACKWARD &&
                                                    pp->pgrad == NJ_PGRAD_SLOTS && pp->rows_per_block == 1));
    bool row_x = pp->family == NJ_FAMILY_ROW && pp->pass == NJ_PASS_FORWARD && pp->persist == 0 &&
                 pp->regs_cache == 0 && pp->rows_per_block == 1 && pp->split == 1;
    bool always = pp->family == NJ_FAMILY_IMAGE || pp->family == NJ_FAMILY_TILE || pp->family == NJ_FAMILY_CLUSTER;
    /* a plan in thread-block clusters (the cluster family; channels-last images): its blocks stage pieces */
    bool cluster = pp->role[NJ_ROLE_MAIN] && pp->launch[pp->role[NJ_ROLE_MAIN] - 1].cluster > 1;
    /* a channels-last backward of one-tile images in one launch: the image staged in one block */
    bool cl_one = pp->family == NJ_FAMILY_CHANNELS_LAST && pp->pass == NJ_PASS_BACKWARD && pp->split == 1 &&
                  !pp->role[NJ_ROLE_PART];
    bool image_x = pp->family == NJ_FAMILY_IMAGE && pp->pass == NJ_PASS_BACKWARD;
    bool slots_g = pp->family == NJ_FAMILY_CLUSTER && pp->pass == NJ_PASS_BACKWARD && pp->pgrad == NJ_PGRAD_SLOTS;
    bool ok = pp->stage == 0 ? !always
              : pp->stage == 1 ? pp->family == NJ_FAMILY_COLUMN || always || row_stage || cluster || cl_one
              : pp->stage == 2 ? row_x || image_x || slots_g : false;
    bool held = pp->stage == 0 || ((pp->split == 1 || cluster) && pp->role[NJ_ROLE_MAIN] &&
                                   pp->launch[pp->role[NJ_ROLE_MAIN] - 1].shmem != 0);
    NJ_RETURN_IF(!ok || !held,
                 NJ_ERR_INTERNAL, "planner: stage %d on a %s plan", (int)pp->stage, nj_family_name(pp->family));
    /* thread-block clusters: sm_90 and later, the main launch of a cluster plan (always the cluster family's;
     * a channels-last pass's) in clusters of its split (at most CUDA's portable 8), or of two (slot pairs),
     * no other launch */
    NJ_RETURN_IF(pp->family == NJ_FAMILY_CLUSTER && !cluster && pp->split != 1, NJ_ERR_INTERNAL,
                 "planner: a cluster plan of %d blocks a row without clusters", (int)pp->split);
    bool may = pp->family == NJ_FAMILY_CLUSTER || pp->family == NJ_FAMILY_CHANNELS_LAST;
    /* or a row backward's slots in pairs (planner_row.c: plan_bwd_slot_pairs) */
    bool pairs = pp->family == NJ_FAMILY_ROW && pp->pass == NJ_PASS_BACKWARD && pp->pgrad == NJ_PGRAD_SLOTS;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        int32_t want = !cluster || i != pp->role[NJ_ROLE_MAIN] - 1 ? 0 : may ? pp->split : pairs ? 2 : 0;
        NJ_RETURN_IF(pp->launch[i].cluster != want || (want && (want < 2 || want > 8 || dev->arch < 90)),
                     NJ_ERR_INTERNAL, "planner: launch %d in clusters of %d on a %s plan (sm_%d)", (int)i,
                     (int)pp->launch[i].cluster, nj_family_name(pp->family), (int)dev->arch);
    }
    /* an image in parts (P.tile pixels a part): whole vectors of every channel row, every part some pixels,
     * a block each, x and dy staged (the templates index the part by channel row) */
    if (pp->family == NJ_FAMILY_IMAGE && pp->tile != 0) {
        int64_t ki = c->rank == 3 ? c->axes[2].extent : 0, kp = pp->tile;
        NJ_RETURN_IF(kp < 1 || kp >= ki || ki % pp->vec != 0 || kp % pp->vec != 0 || pp->stage != 1 ||
                         pp->launch[0].row_mult != (ki + kp - 1) / kp,
                     NJ_ERR_INTERNAL, "planner: image parts of %d of %lld pixels, vector %d, %lld blocks an image",
                     (int)kp, (long long)ki, (int)pp->vec, (long long)pp->launch[0].row_mult);
    }
    /* a persistent row walk (P.persist): blocks an SM that a device can hold; forward: a block a row held
     * in registers; backward: the slots' walk */
    bool fwd_ok = pp->pass == NJ_PASS_FORWARD && pp->rows_per_block == 1 && pp->regs_cache > 0 && !pp->unaligned;
    bool bwd_ok = pp->pass == NJ_PASS_BACKWARD && pp->pgrad == NJ_PGRAD_SLOTS;
    NJ_RETURN_IF(pp->persist != 0 && (pp->persist < 0 || pp->persist > 32 || pp->family != NJ_FAMILY_ROW ||
                                      !(fwd_ok || bwd_ok) || pp->split != 1 ||
                                      (int64_t)pp->persist * pp->block > 2048),
                 NJ_ERR_INTERNAL, "planner: persist %d on a %s plan", (int)pp->persist, nj_family_name(pp->family));
    NJ_TRY(check_named(c, pp));
    /* The problem's own batch: every grid within CUDA's limits, the workspace within 64 bits. */
    int64_t rows = c->axes[0].extent;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        uint32_t grid[3];
        NJ_TRY(nj_launch_grid(&pp->launch[i], rows, 0, grid));
    }
    uint64_t per = 0, ws = 0;
    NJ_RETURN_IF(rows < 0 || __builtin_mul_overflow((uint64_t)rows, pp->workspace_per_row, &per) ||
                     __builtin_add_overflow(per, pp->workspace_fixed, &ws) || ws > (uint64_t)INT64_MAX,
                 NJ_ERR_OVERFLOW, "planner: workspace of %llu + %lld x %llu bytes overflows",
                 (unsigned long long)pp->workspace_fixed, (long long)rows, (unsigned long long)pp->workspace_per_row);
    return NJ_OK;
}
