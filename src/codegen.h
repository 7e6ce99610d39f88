/* Code generation (src/codegen.c): plan -> CUDA source, by rendering templates/ with embedded Lua 5.4.
 *
 * Template syntax (templates/NAME.cu, NAME.cuh):
 *   {{ expr }}        the value of a Lua expression (numbers printed as integers when integral)
 *   {% stmt %}        Lua statements (loops, ifs: {% for i = 0, P.rank-1 do %} ... {% end %})
 *   {# comment #}     dropped
 *   {% include("prelude.cuh") %} renders another template in place, with the same environment
 * A line whose only content is a {% %} or {# #} tag leaves no empty line behind.
 * The environment is a sandbox (no io, os, require, load, dofile): P holds the canonical problem and plan
 * parameters (field list: src/codegen_env.c) and helper functions: f32(x) -> "1.5f",
 * ceil_div(a, b), join(list, sep), need(v, what).
 * The template set (embedded, or NORMJIT_TEMPLATE_DIR's folder) and its hash: templates.h. */
#ifndef NJ_CODEGEN_H
#define NJ_CODEGEN_H

#include "planner.h"
#include "templates.h" /* the set it renders from (and nj_template_set_hash for signatures) */

/* Renders the plan's template for canonical problem c into CUDA source (caller frees *source).
 * A render error is NJ_ERR_TEMPLATE with "template:line: message" in the detail. */
NJ_HIDDEN nj_status nj_codegen(const nj_canon *c, const nj_plan_params *pp, char **source);

/* Renders a library module (nj_plan_library's plan) for gamma dtype param_dtype (caller frees *source). */
NJ_HIDDEN nj_status nj_codegen_library(const nj_plan_params *pp, int32_t param_dtype, char **source);

/* Renders an arbitrary template with a Lua table given as source text (tests, planted kernels). */
NJ_HIDDEN nj_status nj_render_string(const char *name, const char *template_text, const char *env_lua,
                                     char **out);

#endif
