/* The kernel family registry (src/family.c): one row a family in family_list.h, read by the planner
 * driver (which family plans a pass), the plan text and codegen (a family's name). Adding a family is a
 * row there, a planner file and its two templates (docs/architecture.md: "add a kernel family"). */
#ifndef NJ_FAMILY_H
#define NJ_FAMILY_H

#include "planner.h"

typedef struct nj_family_info {
    int32_t id;                   /* nj_family */
    const char *name;             /* plan text and P.family */
    const char *template_name[2]; /* [0] forward, [1] backward; NULL for the library family */
    bool (*applies)(const nj_canon *c, nj_pass pass, const nj_device_props *dev);
    nj_status (*plan[2])(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp);
} nj_family_info;

/* The family of id, or NULL for an id that names none. */
NJ_HIDDEN const nj_family_info *nj_family_get(int32_t id);
/* The family's name, "unknown" for an id that names none. */
NJ_HIDDEN const char *nj_family_name(int32_t id);
/* The first family (family_list.h order) that plans a pass of c; NULL only if none applies (a bug:
 * GENERAL applies to every problem). */
NJ_HIDDEN const nj_family_info *nj_family_pick(const nj_canon *c, nj_pass pass, const nj_device_props *dev);
/* Whether id is a family with planners (every one but the library's). */
NJ_HIDDEN bool nj_family_planned(int32_t id);

#endif
