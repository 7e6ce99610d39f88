/* Backward planning (src/planner_bwd.c): canonical problem + device properties -> plan for the backward
 * pass (dx, and dgamma/dbeta when the problem has scale/bias). Every choice is deterministic in its
 * reduction order: no floating-point atomics, so the same inputs give the same bits on every run. */
#ifndef NJ_PLANNER_BWD_H
#define NJ_PLANNER_BWD_H

#include "planner.h"

/* Fills *out (zeroed first) with the backward plan for c: template, launches, workspace. nj_plan_pass
 * calls it for NJ_PASS_BACKWARD. */
NJ_HIDDEN nj_status nj_plan_backward(const nj_canon *c, const nj_device_props *dev, nj_plan_params *out);

#endif
