/* Template engine: templates -> Lua chunks -> rendered text (spec in codegen.h).
 *
 * A template is translated into a Lua chunk that calls _o(value) for every literal run and {{ }}
 * expression, with {% %} statements copied verbatim. The translation keeps every template newline as
 * exactly one newline of the chunk (literal newlines become "\n" escapes plus a real newline in the
 * code), so the chunk's line numbers are the template's and a Lua error reads "name:line: message"
 * with no separate line map. Each render runs in its own lua_State (thread-safe by construction),
 * sandboxed: only base functions that cannot reach the system, plus string, table and math. */
#include "codegen.h"
#include "codegen_env.h"
#include "templates.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NJ_TPL_MAX_DEPTH 16               /* include nesting: catches include cycles */
#define NJ_TPL_MAX_STEPS (100LL * 1000000) /* VM instructions per render: catches runaway loops */
#define NJ_TPL_MAX_MEM ((size_t)256 << 20) /* bytes a render's Lua state may hold */

/* ---------------------------------------------------------------- translation to Lua */

static void tpl_emit_string(nj_buf *lua, const char *s, size_t n)
{
    nj_buf_append(lua, "_o(\"", 4);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\\' || ch == '"') {
            char esc[2] = {'\\', (char)ch};
            nj_buf_append(lua, esc, 2);
        } else if (ch == '\n') {
            nj_buf_append(lua, "\\n", 2);
        } else if (ch < 32 || ch == 127) {
            nj_buf_printf(lua, "\\%03u", ch);
        } else {
            nj_buf_append(lua, s + i, 1);
        }
    }
    nj_buf_append(lua, "\");", 3);
}

/* Literal text: one _o call per line, each followed by a real newline so chunk lines = template lines. */
static void tpl_emit_literal(nj_buf *lua, const char *s, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\n') continue;
        tpl_emit_string(lua, s + start, i + 1 - start);
        nj_buf_append(lua, "\n", 1);
        start = i + 1;
    }
    if (start < n) tpl_emit_string(lua, s + start, n - start);
}

static bool tpl_blank(const char *s, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

static int tpl_line_of(const char *s, size_t pos)
{
    int line = 1;
    for (size_t i = 0; i < pos; i++) line += s[i] == '\n';
    return line;
}

/* Translates template text into a Lua chunk (see the file comment). On failure writes
 * "name:line: message" into err and returns false. */
static bool tpl_translate(const char *name, const char *s, size_t n, nj_buf *lua, char *err, size_t errcap)
{
    nj_buf_append(lua, "local _o = ...; ", 16);
    size_t cur = 0;
    for (;;) {
        const char *open = NULL;
        for (size_t i = cur; i + 1 < n; i++) {
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
                open = s + i;
                break;
            }
        }
        if (!open) {
            tpl_emit_literal(lua, s + cur, n - cur);
            return !lua->failed;
        }
        size_t p = (size_t)(open - s);
        char kind = open[1];
        char close[3] = {kind == '{' ? '}' : kind, '}', 0};
        const char *end = NULL;
        for (size_t i = p + 2; i + 1 < n; i++) {
            if (s[i] == close[0] && s[i + 1] == '}') {
                end = s + i;
                break;
            }
        }
        if (!end) {
            snprintf(err, errcap, "%s:%d: unterminated '{%c' tag", name, tpl_line_of(s, p), kind);
            return false;
        }
        size_t body = p + 2, body_end = (size_t)(end - s), after = body_end + 2;
        /* A line holding only a {% %} or {# #} tag leaves nothing behind, not even its newline. */
        size_t line_start = p;
        while (line_start > 0 && s[line_start - 1] != '\n') line_start--;
        size_t eol = after;
        while (eol < n && s[eol] != '\n') eol++;
        bool alone = kind != '{' && line_start >= cur && tpl_blank(s, line_start, p) && tpl_blank(s, after, eol);
        tpl_emit_literal(lua, s + cur, (alone ? line_start : p) - cur);
        if (kind == '{') {
            nj_buf_append(lua, "_o(", 3);
            nj_buf_append(lua, s + body, body_end - body);
            nj_buf_append(lua, ");", 2);
        } else if (kind == '%') {
            nj_buf_append(lua, " ", 1);
            nj_buf_append(lua, s + body, body_end - body);
            nj_buf_append(lua, " ;", 2);
        } else {
            for (size_t i = body; i < body_end; i++)
                if (s[i] == '\n') nj_buf_append(lua, "\n", 1);
        }
        cur = after;
        if (alone) {
            cur = eol < n ? eol + 1 : n;
            if (eol < n) nj_buf_append(lua, "\n", 1);
        }
    }
}

/* ---------------------------------------------------------------- render state and sandbox */

typedef struct tpl_render {
    nj_buf out;
    int depth;
    long long steps;
    size_t mem;
} tpl_render;

static const char TPL_ENV_KEY = 'e'; /* registry key (its address) of the sandbox environment */

static void *tpl_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    tpl_render *r = ud;
    if (ptr == NULL) osize = 0;
    if (nsize == 0) {
        free(ptr);
        r->mem -= osize;
        return NULL;
    }
    if (nsize > osize && r->mem + (nsize - osize) > NJ_TPL_MAX_MEM) return NULL;
    void *q = realloc(ptr, nsize);
    if (q) r->mem = r->mem - osize + nsize;
    return q;
}

static void tpl_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    tpl_render *r;
    lua_getallocf(L, (void **)&r);
    r->steps += 1000;
    if (r->steps > NJ_TPL_MAX_STEPS) {
        luaL_where(L, 0); /* inside a hook, level 0 is the template line that was running */
        lua_pushstring(L, "template ran too long (endless loop?)");
        lua_concat(L, 2);
        lua_error(L);
    }
}

/* Appends a value as C source text: integral numbers without ".0", floats so that they read back equal. */
static int tpl_out(lua_State *L)
{
    tpl_render *r = lua_touserdata(L, lua_upvalueindex(1));
    char num[64];
    switch (lua_type(L, 1)) {
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, 1, &n);
        nj_buf_append(&r->out, s, n);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, 1)) {
            snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, 1));
        } else {
            double d = lua_tonumber(L, 1);
            if (d != d || d - d != 0) return luaL_error(L, "cannot output a non-finite number");
            if (d == (double)(long long)d && d > -9.2e18 && d < 9.2e18) {
                snprintf(num, sizeof num, "%lld", (long long)d);
            } else {
                for (int prec = 15; prec <= 17; prec++) {
                    snprintf(num, sizeof num, "%.*g", prec, d);
                    if (strtod(num, NULL) == d) break;
                }
            }
        }
        nj_buf_append(&r->out, num, strlen(num));
        break;
    case LUA_TBOOLEAN:
        nj_buf_printf(&r->out, "%s", lua_toboolean(L, 1) ? "true" : "false");
        break;
    default:
        return luaL_error(L, "cannot output a %s value", luaL_typename(L, 1));
    }
    if (r->out.failed) return luaL_error(L, "out of memory");
    return 0;
}

/* Loads template `name` as a chunk whose _ENV is the sandbox; pushes the function. */
static int tpl_load(lua_State *L, const char *name, const char *text, size_t len)
{
    nj_buf lua;
    char err[512];
    nj_buf_init(&lua);
    if (!tpl_translate(name, text, len, &lua, err, sizeof err)) {
        lua_pushstring(L, lua.failed ? "out of memory" : err);
        nj_buf_free(&lua);
        return LUA_ERRSYNTAX;
    }
    char chunkname[300];
    snprintf(chunkname, sizeof chunkname, "=%s", name);
    int rc = luaL_loadbuffer(L, lua.data, lua.len, chunkname);
    nj_buf_free(&lua);
    if (rc != LUA_OK) return rc;
    lua_rawgetp(L, LUA_REGISTRYINDEX, &TPL_ENV_KEY);
    if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1); /* first upvalue of a main chunk is _ENV */
    return LUA_OK;
}

/* include("name"): renders another template in place, with the same environment and output. */
static int tpl_include(lua_State *L)
{
    tpl_render *r = lua_touserdata(L, lua_upvalueindex(1));
    const char *name = luaL_checkstring(L, 1);
    if (r->depth >= NJ_TPL_MAX_DEPTH) return luaL_error(L, "include nesting deeper than %d", NJ_TPL_MAX_DEPTH);
    const char *text;
    size_t len;
    if (nj_template_get(name, &text, &len) != NJ_OK) return luaL_error(L, "include: no template '%s'", name);
    if (tpl_load(L, name, text, len) != LUA_OK) return lua_error(L);
    lua_pushvalue(L, lua_upvalueindex(2)); /* _o */
    r->depth++;
    lua_call(L, 1, 0);
    r->depth--;
    return 0;
}

/* Helpers available to every template, written in Lua against the sandbox. */
static const char tpl_helpers[] =
    "function f32(x)\n"
    "  if type(x) ~= 'number' then error('f32: number expected, got ' .. type(x), 2) end\n"
    "  if x ~= x or x == math.huge or x == -math.huge then error('f32: non-finite value', 2) end\n"
    "  local s = string.format('%.9g', x)\n"
    "  if not s:find('[%.eE]') then s = s .. '.0' end\n"
    "  return s .. 'f'\n"
    "end\n"
    "function ceil_div(a, b) return (a + b - 1) // b end\n"
    "function join(list, sep) return table.concat(list, sep or ', ') end\n"
    "function need(v, what) if v == nil then error('missing ' .. tostring(what), 2) end return v end\n";

static void tpl_copy_global(lua_State *L, int env, const char *name)
{
    lua_getglobal(L, name);
    lua_setfield(L, env, name);
}

/* Builds the sandbox table: safe base functions, string, table, math, include, helpers. */
static int tpl_sandbox(lua_State *L)
{
    tpl_render *r = lua_touserdata(L, 1);
    luaL_requiref(L, LUA_GNAME, luaopen_base, 1);
    luaL_requiref(L, LUA_STRLIBNAME, luaopen_string, 1);
    luaL_requiref(L, LUA_TABLIBNAME, luaopen_table, 1);
    luaL_requiref(L, LUA_MATHLIBNAME, luaopen_math, 1);
    lua_pop(L, 4);
    lua_newtable(L);
    int env = lua_gettop(L);
    static const char *const safe[] = {"assert", "error", "ipairs", "next", "pairs", "pcall", "select",
                                       "tonumber", "tostring", "type", "xpcall", "rawequal", "rawget",
                                       "rawlen", "rawset", "setmetatable", "getmetatable", "math", "table"};
    for (size_t i = 0; i < NJ_ARRAY_LEN(safe); i++) tpl_copy_global(L, env, safe[i]);
    /* string without dump (bytecode is useless without load, but leaves nothing to reach for) */
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_setfield(L, env, "string");
    lua_pushvalue(L, env);
    lua_setfield(L, env, "_G");
    lua_pushvalue(L, env);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &TPL_ENV_KEY);
    lua_pushlightuserdata(L, r);
    lua_pushcclosure(L, tpl_out, 1);
    lua_pushlightuserdata(L, r);
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, tpl_include, 2);
    lua_setfield(L, env, "include");
    lua_setfield(L, LUA_REGISTRYINDEX, "nj_out");
    if (luaL_loadbuffer(L, tpl_helpers, sizeof tpl_helpers - 1, "=helpers") != LUA_OK) return lua_error(L);
    lua_pushvalue(L, env);
    lua_setupvalue(L, -2, 1);
    lua_call(L, 0, 0);
    return 0;
}

/* The one checker every lua_pcall result goes through: any failure is NJ_ERR_TEMPLATE with the
 * message Lua produced ("template:line: message" for errors raised inside a template). */
static nj_status tpl_check(lua_State *L, int rc, const char *what)
{
    if (rc == LUA_OK) return NJ_OK;
    const char *msg = lua_tostring(L, -1);
    if (rc == LUA_ERRMEM) msg = "out of memory in the template interpreter";
    return nj_fail(NJ_ERR_TEMPLATE, "%s", msg ? msg : what);
}

/* Runs on the Lua stack: (render, name, text, len, push_env, ud) via tpl_render_main. */
typedef struct tpl_job {
    tpl_render *r;
    const char *name, *text;
    size_t len;
    nj_status (*push_env)(lua_State *L, const void *ud); /* pushes the table that becomes P */
    const void *ud;
} tpl_job;

static int tpl_render_main(lua_State *L)
{
    tpl_job *job = lua_touserdata(L, 1);
    lua_settop(L, 0);
    lua_pushlightuserdata(L, job->r);
    lua_pushcfunction(L, tpl_sandbox);
    lua_insert(L, 1);
    lua_call(L, 1, 0);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &TPL_ENV_KEY);
    if (job->push_env(L, job->ud) != NJ_OK) return luaL_error(L, "%s", nj_last_error());
    lua_setfield(L, -2, "P");
    lua_pop(L, 1);
    if (tpl_load(L, job->name, job->text, job->len) != LUA_OK) return lua_error(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "nj_out");
    lua_call(L, 1, 0);
    return 0;
}

static nj_status tpl_render_text(const char *name, const char *text, size_t len,
                                 nj_status (*push_env)(lua_State *L, const void *ud), const void *ud, char **out)
{
    NJ_RETURN_IF(!name || !text || !out, NJ_ERR_NULL_POINTER, "render: NULL template name, text or output");
    *out = NULL;
    tpl_render r;
    memset(&r, 0, sizeof r);
    nj_buf_init(&r.out);
    lua_State *L = lua_newstate(tpl_alloc, &r);
    NJ_RETURN_IF(!L, NJ_ERR_OUT_OF_MEMORY, "cannot create a Lua state for template %s", name);
    lua_sethook(L, tpl_hook, LUA_MASKCOUNT, 1000);
    tpl_job job = {&r, name, text, len, push_env, ud};
    lua_pushcfunction(L, tpl_render_main);
    lua_pushlightuserdata(L, &job);
    nj_status s = tpl_check(L, lua_pcall(L, 1, 0, 0), "template render failed");
    lua_close(L);
    if (s == NJ_OK) {
        *out = nj_buf_take(&r.out);
        if (!*out) s = nj_fail(NJ_ERR_OUT_OF_MEMORY, "rendering %s: out of memory", name);
    }
    nj_buf_free(&r.out);
    return s;
}

/* P from Lua source text: evaluated in an empty environment, so it can only build data. */
static nj_status tpl_push_env_lua(lua_State *L, const void *ud)
{
    const char *src = ud;
    nj_buf code;
    nj_buf_init(&code);
    nj_buf_printf(&code, "return %s", src && *src ? src : "{}");
    int rc = code.failed ? LUA_ERRMEM : luaL_loadbuffer(L, code.data, code.len, "=env");
    nj_buf_free(&code);
    if (rc == LUA_OK) {
        lua_newtable(L);
        lua_setupvalue(L, -2, 1);
        rc = lua_pcall(L, 0, 1, 0);
    }
    NJ_TRY(tpl_check(L, rc, "environment failed"));
    if (!lua_istable(L, -1)) return nj_fail(NJ_ERR_TEMPLATE, "env: the environment is not a table");
    return NJ_OK;
}

nj_status nj_render_string(const char *name, const char *template_text, const char *env_lua, char **out)
{
    NJ_RETURN_IF(!template_text, NJ_ERR_NULL_POINTER, "render: NULL template text");
    return tpl_render_text(name ? name : "string", template_text, strlen(template_text), tpl_push_env_lua,
                           env_lua, out);
}

typedef struct tpl_codegen_ud {
    const nj_canon *c;
    const nj_plan_params *pp;
} tpl_codegen_ud;

static nj_status tpl_push_env_plan(lua_State *L, const void *ud)
{
    const tpl_codegen_ud *u = ud;
    return nj_codegen_push_env(L, u->c, u->pp);
}

/* The plan's template from the active set, rendered with the environment push(ud) makes. */
static nj_status tpl_render_plan(const nj_plan_params *pp, nj_status (*push)(lua_State *, const void *),
                                 const void *ud, char **source)
{
    NJ_RETURN_IF(!pp->template_name, NJ_ERR_INTERNAL, "codegen: plan has no template");
    const char *text;
    size_t len;
    NJ_TRY(nj_template_get(pp->template_name, &text, &len));
    return tpl_render_text(pp->template_name, text, len, push, ud, source);
}

nj_status nj_codegen(const nj_canon *c, const nj_plan_params *pp, char **source)
{
    NJ_RETURN_IF(!c || !pp || !source, NJ_ERR_NULL_POINTER, "codegen: NULL argument");
    tpl_codegen_ud u = {c, pp};
    return tpl_render_plan(pp, tpl_push_env_plan, &u, source);
}

typedef struct tpl_lib_ud {
    const nj_plan_params *pp;
    int32_t dtype;
} tpl_lib_ud;

static nj_status tpl_push_env_lib(lua_State *L, const void *ud)
{
    const tpl_lib_ud *u = ud;
    return nj_codegen_push_lib_env(L, u->pp, u->dtype);
}

nj_status nj_codegen_library(const nj_plan_params *pp, int32_t param_dtype, char **source)
{
    NJ_RETURN_IF(!pp || !source, NJ_ERR_NULL_POINTER, "codegen: NULL argument");
    tpl_lib_ud u = {pp, param_dtype};
    return tpl_render_plan(pp, tpl_push_env_lib, &u, source);
}
