/* The vocabulary tables (vocab.h): dtypes, operands, flags, activations. Each table is the one place its
 * words, sizes and conversions are written; the static asserts below tie the tables to their enums. */
#include "vocab.h"

#include "kernel_abi.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- host conversions of the 16-bit dtypes */

static uint32_t nj_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float nj_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float nj_bf16_to_float(uint16_t h) { return nj_u2f((uint32_t)h << 16); }

uint16_t nj_float_to_bf16(float f)
{
    uint32_t u = nj_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float nj_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return nj_u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 5.9604644775390625e-8f; /* 2^-24 */
        return sign ? -v : v;
    }
    return nj_u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t nj_float_to_half(float f)
{
    uint32_t u = nj_f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {                                   /* subnormal or zero in half */
        float v = nj_u2f(a) * 16777216.0f;                    /* scale by 2^24, round to nearest even */
        uint32_t m = (uint32_t)v;
        float r = v - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((a >> 23) - 112u) << 10, m = (a >> 13) & 0x3ffu, rest = a & 0x1fffu;
    uint32_t h = e | m;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static double load_f32(const void *b, int64_t i) { return (double)((const float *)b)[i]; }
static double load_f16(const void *b, int64_t i) { return (double)nj_half_to_float(((const uint16_t *)b)[i]); }
static double load_bf16(const void *b, int64_t i) { return (double)nj_bf16_to_float(((const uint16_t *)b)[i]); }
static void store_f32(void *b, int64_t i, double v) { ((float *)b)[i] = (float)v; }
static void store_f16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = nj_float_to_half((float)v); }
static void store_bf16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = nj_float_to_bf16((float)v); }

/* ---------------------------------------------------------------- dtypes */

/* Tolerances: outputs are rounded once to their dtype on top of float32 arithmetic; out_tol leaves about
 * 10x headroom over that unit roundoff (tools/tolerance.h explains the check they feed). */
static const nj_dtype_info nj_dtypes[] = {
    [NJ_F32] = {NJ_F32, "f32", 4, "float", load_f32, store_f32, 0x1p-24, 1e-5},
    [NJ_F16] = {NJ_F16, "f16", 2, "nj_f16", load_f16, store_f16, 0x1p-11, 1e-2},
    [NJ_BF16] = {NJ_BF16, "bf16", 2, "nj_bf16", load_bf16, store_bf16, 0x1p-8, 4e-2},
};
_Static_assert(NJ_DTYPE_NONE == 0, "row 0 of nj_dtypes is the absent dtype");

const nj_dtype_info *nj_dtype_find(int32_t d)
{
    if (d <= NJ_DTYPE_NONE || d >= (int32_t)NJ_ARRAY_LEN(nj_dtypes) || !nj_dtypes[d].name) return NULL;
    return &nj_dtypes[d];
}

const nj_dtype_info *nj_dtype_by_name(const char *name)
{
    for (size_t i = 0; name && i < NJ_ARRAY_LEN(nj_dtypes); i++)
        if (nj_dtypes[i].name && strcmp(nj_dtypes[i].name, name) == 0) return &nj_dtypes[i];
    return NULL;
}

size_t nj_dtype_count(void) { return NJ_ARRAY_LEN(nj_dtypes) - 1; } /* row 0 is NJ_DTYPE_NONE's, empty */

const nj_dtype_info *nj_dtype_at(size_t i) { return nj_dtype_find((int32_t)(i + 1)); }

size_t nj_dtype_size(nj_dtype d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->size : 0;
}

const char *nj_dtype_name(nj_dtype d)
{
    const nj_dtype_info *t = nj_dtype_find(d);
    return t ? t->name : "none";
}

/* "a, b, c" of a table's names, built once (the tables are constant). */
typedef struct vocab_list {
    pthread_once_t once;
    char text[128];
} vocab_list;

static void vocab_list_add(vocab_list *l, const char *name)
{
    size_t n = strlen(l->text);
    snprintf(l->text + n, sizeof l->text - n, "%s%s", n ? ", " : "", name);
}

static vocab_list nj_dtype_names = {PTHREAD_ONCE_INIT, ""};
static void dtype_list_init(void)
{
    for (size_t i = 0; i < NJ_ARRAY_LEN(nj_dtypes); i++)
        if (nj_dtypes[i].name) vocab_list_add(&nj_dtype_names, nj_dtypes[i].name);
}

const char *nj_dtype_list(void)
{
    pthread_once(&nj_dtype_names.once, dtype_list_init);
    return nj_dtype_names.text;
}

/* ---------------------------------------------------------------- operands */

#define OPD_DESC(field) (int32_t) offsetof(nj_problem_desc, field)
static const nj_operand_info nj_operands[] = {
    [NJ_OPD_X] = {NJ_OPD_X, "x", "x", OPD_DESC(x), 0, false},
    [NJ_OPD_Y] = {NJ_OPD_Y, "y", "y", OPD_DESC(y), 0, true},
    [NJ_OPD_RES] = {NJ_OPD_RES, "res", "residual", OPD_DESC(residual), NJ_FLAG_RESIDUAL, false},
    [NJ_OPD_RESOUT] = {NJ_OPD_RESOUT, "resout", "residual_out", OPD_DESC(residual_out), NJ_FLAG_RESIDUAL_OUT, true},
    [NJ_OPD_DY] = {NJ_OPD_DY, "dy", "dy", OPD_DESC(dy), 0, false},
    [NJ_OPD_DX] = {NJ_OPD_DX, "dx", "dx", OPD_DESC(dx), 0, true},
    [NJ_OPD_PARAM] = {NJ_OPD_PARAM, "param", "param", -1, 0, false},
    [NJ_OPD_STATS] = {NJ_OPD_STATS, "stats", "stats", -1, 0, false},
};
#undef OPD_DESC
_Static_assert(NJ_ARRAY_LEN(nj_operands) == NJ_OPD_COUNT, "nj_operands: one row per nj_operand");

const nj_operand_info *nj_operand_row(int32_t o)
{
    return o >= 0 && o < NJ_OPD_COUNT ? &nj_operands[o] : NULL;
}

const char *nj_operand_key(int32_t o)
{
    const nj_operand_info *r = nj_operand_row(o);
    return r ? r->key : "?";
}

const nj_tensor_desc *nj_operand_desc(const nj_problem_desc *p, int32_t o)
{
    const nj_operand_info *r = nj_operand_row(o);
    if (!r || r->desc_offset < 0) return NULL;
    return (const nj_tensor_desc *)((const char *)p + r->desc_offset);
}

bool nj_operand_used(const nj_problem_desc *p, int32_t o)
{
    const nj_operand_info *r = nj_operand_row(o);
    if (!r || r->desc_offset < 0) return false;
    return !r->needs_flag || (p->flags & r->needs_flag) != 0;
}

/* ---------------------------------------------------------------- flags */

static const nj_flag_info nj_flags_table[] = {
    {NJ_FLAG_CENTER, "center"},     {NJ_FLAG_SCALE, "scale"},   {NJ_FLAG_BIAS, "bias"},
    {NJ_FLAG_RESIDUAL, "residual"}, {NJ_FLAG_RESIDUAL_OUT, "resout"}, {NJ_FLAG_SAVE_STATS, "stats"},
};
_Static_assert(NJ_ARRAY_LEN(nj_flags_table) == __builtin_popcount(NJ_FLAGS_ALL), "nj_flags_table: one row per flag");

size_t nj_flag_count(void) { return NJ_ARRAY_LEN(nj_flags_table); }

const nj_flag_info *nj_flag_row(size_t i) { return i < NJ_ARRAY_LEN(nj_flags_table) ? &nj_flags_table[i] : NULL; }

const nj_flag_info *nj_flag_by_name(const char *name)
{
    for (size_t i = 0; name && i < NJ_ARRAY_LEN(nj_flags_table); i++)
        if (strcmp(nj_flags_table[i].name, name) == 0) return &nj_flags_table[i];
    return NULL;
}

static vocab_list nj_flag_names = {PTHREAD_ONCE_INIT, ""};
static void flag_list_init(void)
{
    for (size_t i = 0; i < NJ_ARRAY_LEN(nj_flags_table); i++) vocab_list_add(&nj_flag_names, nj_flags_table[i].name);
}

const char *nj_flag_list(void)
{
    pthread_once(&nj_flag_names.once, flag_list_init);
    return nj_flag_names.text;
}

/* ---------------------------------------------------------------- activations */

static const nj_act_info nj_acts[] = {
    [NJ_ACT_NONE] = {NJ_ACT_NONE, "none"},
    [NJ_ACT_RELU] = {NJ_ACT_RELU, "relu"},
    [NJ_ACT_SILU] = {NJ_ACT_SILU, "silu"},
    [NJ_ACT_GELU_TANH] = {NJ_ACT_GELU_TANH, "gelu_tanh"},
    [NJ_ACT_GELU_ERF] = {NJ_ACT_GELU_ERF, "gelu_erf"},
    [NJ_ACT_SIGMOID] = {NJ_ACT_SIGMOID, "sigmoid"},
};

const nj_act_info *nj_act_find(int32_t a)
{
    if (a < 0 || a >= (int32_t)NJ_ARRAY_LEN(nj_acts) || !nj_acts[a].name) return NULL;
    return &nj_acts[a];
}

const nj_act_info *nj_act_by_name(const char *name)
{
    for (size_t i = 0; name && i < NJ_ARRAY_LEN(nj_acts); i++)
        if (nj_acts[i].name && strcmp(nj_acts[i].name, name) == 0) return &nj_acts[i];
    return NULL;
}

static vocab_list nj_act_names = {PTHREAD_ONCE_INIT, ""};
static void act_list_init(void)
{
    for (size_t i = 0; i < NJ_ARRAY_LEN(nj_acts); i++)
        if (nj_acts[i].name) vocab_list_add(&nj_act_names, nj_acts[i].name);
}

const char *nj_act_list(void)
{
    pthread_once(&nj_act_names.once, act_list_init);
    return nj_act_names.text;
}

/* The kernel argument struct (kernel_abi.h) holds one batch stride per operand. */
_Static_assert(NJ_KARGS_NSTRIDE == NJ_OPD_COUNT, "nj_kargs.bstride: one stride per nj_operand");
