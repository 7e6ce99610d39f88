/* The family registry (family.h): family_list.h's rows as a table indexed by nj_family. */
#include "family.h"
#include "planner_impl.h"

static const nj_family_info nj_families[NJ_FAMILY_COUNT] = {
#define NJ_FAMILY_X(ID, nm, fwd_tpl, bwd_tpl, ok, plan_fwd, plan_bwd)                                            \
    [NJ_FAMILY_##ID] = {NJ_FAMILY_##ID, nm, {fwd_tpl, bwd_tpl}, ok, {plan_fwd, plan_bwd}},
#define NJ_FAMILY_LIB_X(ID, nm) [NJ_FAMILY_##ID] = {NJ_FAMILY_##ID, nm, {NULL, NULL}, NULL, {NULL, NULL}},
#include "family_list.h"
#undef NJ_FAMILY_X
#undef NJ_FAMILY_LIB_X
};

const nj_family_info *nj_family_get(int32_t id)
{
    return id > 0 && id < NJ_FAMILY_COUNT ? &nj_families[id] : NULL;
}

const char *nj_family_name(int32_t id)
{
    const nj_family_info *f = nj_family_get(id);
    return f ? f->name : "unknown";
}

bool nj_family_planned(int32_t id)
{
    const nj_family_info *f = nj_family_get(id);
    return f && f->applies;
}

const nj_family_info *nj_family_pick(const nj_canon *c, nj_pass pass, const nj_device_props *dev)
{
    for (int32_t id = 1; id < NJ_FAMILY_COUNT; id++)
        if (nj_families[id].applies && nj_families[id].applies(c, pass, dev)) return &nj_families[id];
    return NULL;
}
