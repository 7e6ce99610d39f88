/* The environment P that nj_codegen hands to templates (src/codegen_env.c). Private to codegen. */
#ifndef NJ_CODEGEN_ENV_H
#define NJ_CODEGEN_ENV_H

#include "planner.h"

#include <lua.h>

/* Pushes the table P for canonical problem c and plan pp (field list in codegen_env.c). */
NJ_HIDDEN nj_status nj_codegen_push_env(lua_State *L, const nj_canon *c, const nj_plan_params *pp);
/* Pushes the table P of a library module (nj_plan_library) for gamma dtype param_dtype. */
NJ_HIDDEN nj_status nj_codegen_push_lib_env(lua_State *L, const nj_plan_params *pp, int32_t param_dtype);

#endif
