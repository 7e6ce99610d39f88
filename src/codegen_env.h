/* The environment P that nj_codegen hands to templates (src/codegen_env.c). Private to codegen. */
#ifndef NJ_CODEGEN_ENV_H
#define NJ_CODEGEN_ENV_H

#include "planner.h"

#include <lua.h>

/* Pushes the table P for canonical problem c and plan pp (field list in codegen_env.c). */
NJ_HIDDEN nj_status nj_codegen_push_env(lua_State *L, const nj_canon *c, const nj_plan_params *pp);

#endif
