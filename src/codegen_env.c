/* The environment P that templates see (nj_codegen). Everything the generated code depends on comes
 * from the canonical problem and the plan, both of which are in the signature.
 *
 *   P.pass            "fwd" | "bwd"
 *   P.kind            "row" | "column" | "general"
 *   P.family          a family's name (family_list.h): "row" | "column" | "channels_last" | "general"
 *   P.block, P.vec, P.rows_per_block, P.split, P.regs_cache, P.chans, P.tile, P.unroll, P.stage, P.persist,
 *   P.copy_vec, P.reverse, P.lag, P.pipe_group, P.grid_loop   plan
 *                     parameters
 *   P.unaligned       true for the unaligned variant (vec 1; the launch picked it for misaligned arguments)
 *   P.rank            number of canonical axes, batch axis included
 *   P.axes[1..rank]   {extent=, reduce=bool, feature=bool, runtime=bool,
 *                      stride={x=,y=,res=,resout=,dy=,dx=,param=,stats=}}   (elements)
 *                     axis 1 is the batch axis: runtime=true, extent = "A.rows" and its strides are the
 *                     C expressions "A.bstride[<operand>]" (kernels read them from nj_kargs), except
 *                     param, which is 0 (the batch axis is never a feature); every other axis has
 *                     integer extent and strides baked in.
 *   P.flags           {center=,scale=,bias=,residual=,resout=,stats=} booleans
 *   P.act             "none" | "relu" | "silu" | "gelu_tanh" | "gelu_erf" | "sigmoid"
 *   P.dtype           per operand {x=,y=,res=,resout=,dy=,dx=,param=,stats=}: "f32" | "f16" | "bf16" | "none"
 *   P.ctype           per operand: "float" | "nj_f16" | "nj_bf16" (nil for an absent operand)
 *   P.present         per operand: true when the problem uses it
 *   P.reduce_size     elements per statistic; P.kept_inner: kept elements per batch row (batch excluded)
 *   P.param_size      gamma elements (0 without scale/bias)
 *   P.launch[1..n]    {kernel=, block=, grid_x=, cluster=} (block = threads in x; grid_x: the fixed grid,
 *                     0 when it follows the batch; cluster: blocks of its thread-block clusters, 1 without),
 *                     in launch order
 *   P.role            the launch of each role the plan has (planner.h: nj_role), as in P.launch:
 *                     P.role.part, .main, .pgrad, .merge, .colsum (nil when the plan has none)
 *   P.pgrad           how dgamma/dbeta are made (nj_pgrad): "none" | "slots" | "fused" | "walk" | "tiles" |
 *                     "sets" | "rows" | "pieces" | "tiles_dx"; P.pgrad_parts: partials of each element the column sum adds (slots, walk, tiles)
 *   P.ws              named workspace regions {fixed=, per_row=} in floats: P.ws.pgrad, .parts, .means, .dl, .sets
 *                     (nil when unused); P.ws_stride: floats a batch row when the regions repeat per row
 *                     (the offsets are then within a row's), else 0
 * Templates read decisions from these names only: never from a kernel name, a launch position or a
 * workspace size (the workspace size is not in P).
 *
 * A library module (templates/lib_*.cu, nj_codegen_library) sees only P.pass = "lib", P.family =
 * "library", P.block, P.launch, P.dtype.param / P.ctype.param (none and nil for a module that is not
 * built per gamma dtype), P.mode (NJ_LIB_MERGE's modes: {sums=, stats=, rms=}) and the positions of the
 * library kernels' arguments in A.lib, P.colsum.<name> and P.merge.<name> (planner.h's NJ_COLSUM_* and
 * NJ_MERGE_*, lower case without the prefix): its kernels take no problem.
 */
#include "codegen_env.h"
#include "family.h"
#include "vocab.h"

#include <stdio.h>

static const char *env_dtype(int32_t d) { return nj_dtype_name((nj_dtype)d); } /* "none" when absent */

static const char *env_ctype(int32_t d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->ctype : NULL;
}

static const char *env_act(int32_t a)
{
    const nj_act_info *r = nj_act_find(a);
    return r ? r->name : NULL;
}

static void env_int(lua_State *L, const char *k, long long v)
{
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static void env_bool(lua_State *L, const char *k, bool v)
{
    lua_pushboolean(L, v);
    lua_setfield(L, -2, k);
}

static void env_str(lua_State *L, const char *k, const char *v)
{
    lua_pushstring(L, v);
    lua_setfield(L, -2, k);
}

static void env_axis(lua_State *L, const nj_canon *c, int i)
{
    const nj_canon_axis *a = &c->axes[i];
    bool batch = i == 0;
    lua_createtable(L, 0, 5);
    if (batch)
        env_str(L, "extent", "A.rows");
    else
        env_int(L, "extent", a->extent);
    env_bool(L, "reduce", a->reduce != 0);
    env_bool(L, "feature", a->feature != 0);
    env_bool(L, "runtime", batch);
    lua_createtable(L, 0, NJ_OPD_COUNT);
    for (int o = 0; o < NJ_OPD_COUNT; o++) {
        if (batch && o == NJ_OPD_PARAM) {
            env_int(L, nj_operand_key(o), 0); /* the batch axis is never a feature axis */
        } else if (batch) {
            char expr[32];
            snprintf(expr, sizeof expr, "A.bstride[%d]", o);
            env_str(L, nj_operand_key(o), expr);
        } else {
            env_int(L, nj_operand_key(o), a->stride[o]);
        }
    }
    lua_setfield(L, -2, "stride");
}

static void env_operands(lua_State *L, const nj_canon *c)
{
    lua_createtable(L, 0, NJ_OPD_COUNT);
    for (int o = 0; o < NJ_OPD_COUNT; o++) env_str(L, nj_operand_key(o), env_dtype(c->dtype[o]));
    lua_setfield(L, -2, "dtype");
    lua_createtable(L, 0, NJ_OPD_COUNT);
    for (int o = 0; o < NJ_OPD_COUNT; o++) {
        const char *t = env_ctype(c->dtype[o]);
        if (t) env_str(L, nj_operand_key(o), t);
    }
    lua_setfield(L, -2, "ctype");
    lua_createtable(L, 0, NJ_OPD_COUNT);
    for (int o = 0; o < NJ_OPD_COUNT; o++) env_bool(L, nj_operand_key(o), (c->present >> o) & 1u);
    lua_setfield(L, -2, "present");
}

static void env_flags(lua_State *L, uint32_t f)
{
    lua_createtable(L, 0, (int)nj_flag_count());
    for (size_t i = 0; i < nj_flag_count(); i++) env_bool(L, nj_flag_row(i)->name, (f & nj_flag_row(i)->bit) != 0);
    lua_setfield(L, -2, "flags");
}

static void env_launch(lua_State *L, const nj_launch *l)
{
    lua_createtable(L, 0, 4);
    env_str(L, "kernel", l->kernel);
    env_int(L, "block", l->block[0]);
    env_int(L, "grid_x", l->grid_x);
    env_int(L, "cluster", l->cluster > 1 ? l->cluster : 1);
}

static void env_launches(lua_State *L, const nj_plan_params *pp)
{
    lua_createtable(L, pp->nlaunch, 0);
    for (int i = 0; i < pp->nlaunch; i++) {
        env_launch(L, &pp->launch[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "launch");
}

/* The planner's decisions by name (planner.h): P.role, P.pgrad, P.pgrad_parts, P.ws, P.ws_stride. */
static void env_named(lua_State *L, const nj_plan_params *pp)
{
    lua_createtable(L, 0, NJ_ROLE_COUNT);
    for (int r = 0; r < NJ_ROLE_COUNT; r++) {
        if (!pp->role[r]) continue;
        env_launch(L, &pp->launch[pp->role[r] - 1]);
        lua_setfield(L, -2, nj_role_name(r));
    }
    lua_setfield(L, -2, "role");
    env_str(L, "pgrad", nj_pgrad_name(pp->pgrad));
    env_int(L, "pgrad_parts", pp->pgrad_parts);
    lua_createtable(L, 0, NJ_WS_COUNT);
    for (int w = 0; w < NJ_WS_COUNT; w++) {
        if (!(pp->ws_used & (1u << w))) continue;
        lua_createtable(L, 0, 2);
        env_int(L, "fixed", pp->ws[w].fixed);
        env_int(L, "per_row", pp->ws[w].per_row);
        lua_setfield(L, -2, nj_ws_name_text(w));
    }
    lua_setfield(L, -2, "ws");
    env_int(L, "ws_stride", pp->ws_stride);
}

/* The library kernels' argument positions in nj_kargs.lib (planner.h), by name: P.colsum.ncols, ... */
static void env_lib_args(lua_State *L)
{
    static const char *const colsum[] = {"ncols", "nparts", "inner", "s_outer", "s_inner", "s_col", "base_a", "base_b",
                                         "cw"};
    static const char *const merge[] = {"nitems", "nparts", "radix", "in_base", "s_hi", "s_lo", "s_part", "off_b",
                                        "out_base", "o_hi", "o_lo", "o_b", "mode", "n", "plen", "cmul"};
    _Static_assert(sizeof colsum / sizeof *colsum == NJ_COLSUM_CW + 1, "a name per colsum argument");
    _Static_assert(sizeof merge / sizeof *merge == NJ_MERGE_CMUL + 1, "a name per merge argument");
    lua_createtable(L, 0, 8);
    for (int k = 0; k <= NJ_COLSUM_CW; k++) env_int(L, colsum[k], k);
    lua_setfield(L, -2, "colsum");
    lua_createtable(L, 0, 16);
    for (int k = 0; k <= NJ_MERGE_CMUL; k++) env_int(L, merge[k], k);
    lua_setfield(L, -2, "merge");
}

nj_status nj_codegen_push_lib_env(lua_State *L, const nj_plan_params *pp, int32_t param_dtype)
{
    NJ_RETURN_IF(param_dtype != NJ_DTYPE_NONE && !env_ctype(param_dtype), NJ_ERR_INTERNAL, "codegen: library dtype %d",
                 (int)param_dtype);
    NJ_RETURN_IF(pp->family != NJ_FAMILY_LIBRARY || pp->nlaunch != 1, NJ_ERR_INTERNAL, "codegen: not a library plan");
    lua_createtable(L, 0, 7);
    env_str(L, "pass", "lib");
    env_str(L, "family", nj_family_name(NJ_FAMILY_LIBRARY));
    env_int(L, "block", pp->block);
    lua_createtable(L, 0, 1);
    env_str(L, "param", env_dtype(param_dtype));
    lua_setfield(L, -2, "dtype");
    lua_createtable(L, 0, 1);
    if (env_ctype(param_dtype)) env_str(L, "param", env_ctype(param_dtype)); /* none: the kernel takes no gamma */
    lua_setfield(L, -2, "ctype");
    lua_createtable(L, 0, 3);
    env_int(L, "sums", NJ_MERGE_SUMS);
    env_int(L, "stats", NJ_MERGE_STATS);
    env_int(L, "rms", NJ_MERGE_RMS);
    lua_setfield(L, -2, "mode");
    env_lib_args(L);
    env_launches(L, pp);
    return NJ_OK;
}

nj_status nj_codegen_push_env(lua_State *L, const nj_canon *c, const nj_plan_params *pp)
{
    static const char *const kinds[] = {NULL, "row", "column", "general"};
    NJ_RETURN_IF(c->rank < 1 || c->rank > NJ_CANON_MAX_AXES, NJ_ERR_INTERNAL, "codegen: canonical rank %d", c->rank);
    NJ_RETURN_IF(c->kind < 1 || c->kind > 3, NJ_ERR_INTERNAL, "codegen: canonical kind %d", c->kind);
    NJ_RETURN_IF(!nj_family_planned(pp->family), NJ_ERR_INTERNAL, "codegen: plan family %d", pp->family);
    NJ_RETURN_IF(!env_act(c->act), NJ_ERR_INTERNAL, "codegen: activation %d", c->act);
    NJ_RETURN_IF(pp->nlaunch < 0 || pp->nlaunch > NJ_MAX_LAUNCHES, NJ_ERR_INTERNAL, "codegen: %d launches",
                 pp->nlaunch);
    lua_createtable(L, 0, 24);
    env_str(L, "pass", pp->pass == NJ_PASS_BACKWARD ? "bwd" : "fwd");
    env_str(L, "kind", kinds[c->kind]);
    env_str(L, "family", nj_family_name(pp->family));
    env_int(L, "block", pp->block);
    env_int(L, "vec", pp->vec);
    env_int(L, "rows_per_block", pp->rows_per_block);
    env_int(L, "split", pp->split);
    env_int(L, "regs_cache", pp->regs_cache);
    env_int(L, "grid_loop", pp->grid_loop);
    env_int(L, "chans", pp->chans);
    env_int(L, "tile", pp->tile);
    env_int(L, "unroll", pp->unroll);
    env_int(L, "stage", pp->stage);
    env_int(L, "copy_vec", pp->copy_vec);
    env_int(L, "persist", pp->persist);
    env_int(L, "reverse", pp->reverse);
    env_int(L, "lag", pp->lag);
    env_int(L, "pipe_group", pp->pipe_group);
    lua_pushboolean(L, pp->unaligned != 0);
    lua_setfield(L, -2, "unaligned");
    env_int(L, "rank", c->rank);
    lua_createtable(L, c->rank, 0);
    for (int i = 0; i < c->rank; i++) {
        env_axis(L, c, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "axes");
    env_flags(L, c->flags);
    env_str(L, "act", env_act(c->act));
    env_operands(L, c);
    env_int(L, "reduce_size", c->reduce_size);
    env_int(L, "kept_inner", c->kept_inner);
    env_int(L, "param_size", c->param_size);
    env_launches(L, pp);
    env_named(L, pp);
    return NJ_OK;
}
