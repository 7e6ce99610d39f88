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
 * Templates and the device prelude are embedded at build time (embedded_templates.c, generated);
 * NORMJIT_TEMPLATE_DIR points at a folder used instead (development), and its hash replaces the set hash. */
#ifndef NJ_CODEGEN_H
#define NJ_CODEGEN_H

#include "planner.h"

typedef struct nj_embedded_file {
    const char *name; /* path relative to templates/, e.g. "prelude.cuh", "emu/emu.h" */
    const char *text;
    size_t len;
} nj_embedded_file;
extern NJ_HIDDEN const nj_embedded_file nj_embedded_templates[];
extern NJ_HIDDEN const size_t nj_embedded_template_count;

/* Looks up a template by name in the active set (NORMJIT_TEMPLATE_DIR or embedded). The text is owned
 * by the library (process lifetime). NJ_ERR_TEMPLATE if missing. */
NJ_HIDDEN nj_status nj_template_get(const char *name, const char **text, size_t *len);

/* Hex hash of the active template set (all files, names and contents). Process lifetime. */
NJ_HIDDEN const char *nj_template_set_hash(void);

/* Renders the plan's template for canonical problem c into CUDA source (caller frees *source).
 * A render error is NJ_ERR_TEMPLATE with "template:line: message" in the detail. */
NJ_HIDDEN nj_status nj_codegen(const nj_canon *c, const nj_plan_params *pp, char **source);

/* Renders a library module (nj_plan_library's plan) for gamma dtype param_dtype (caller frees *source). */
NJ_HIDDEN nj_status nj_codegen_library(const nj_plan_params *pp, int32_t param_dtype, char **source);

/* Renders an arbitrary template with a Lua table given as source text (tests, planted kernels). */
NJ_HIDDEN nj_status nj_render_string(const char *name, const char *template_text, const char *env_lua,
                                     char **out);

#endif
