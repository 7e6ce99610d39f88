/* Vocabularies (src/vocab.c): one table per set of words the library, the text form and the templates
 * share -- dtypes, operands, flags, activations -- in the style of the status table (src/status.c).
 * Every switch or name list that used to restate one of them reads its table instead, so adding a row
 * here is what adding a dtype (or an activation, ...) means on the host side. Kernel families are the
 * planner's registry (family.h), not a vocabulary of this file. */
#ifndef NJ_VOCAB_H
#define NJ_VOCAB_H

#include "problem.h"

/* ---- dtypes ---- */
typedef struct nj_dtype_info {
    nj_dtype id;
    const char *name;  /* "bf16": text form, signatures, P.dtype, messages */
    size_t size;       /* bytes per element */
    const char *ctype; /* the device storage type templates/prelude.cuh defines (P.ctype) */
    /* Host conversions: element i of base <-> double, float-to-storage rounding to nearest even. */
    double (*load)(const void *base, int64_t i);
    void (*store)(void *base, int64_t i, double v);
    double unit_roundoff; /* half an ulp at 1 */
    double out_tol;       /* atol and rtol of outputs stored in this dtype (tools/tolerance.h) */
} nj_dtype_info;
/* The row of a storage dtype; NULL for NJ_DTYPE_NONE and for values that are not an nj_dtype. */
NJ_HIDDEN const nj_dtype_info *nj_dtype_find(int32_t d);
/* The row named name ("f32"), NULL when none is. */
NJ_HIDDEN const nj_dtype_info *nj_dtype_by_name(const char *name);
/* The storage dtypes in enum order: i in 0..nj_dtype_count()-1 (NULL past the end). */
NJ_HIDDEN size_t nj_dtype_count(void);
NJ_HIDDEN const nj_dtype_info *nj_dtype_at(size_t i);
/* "f32, f16, bf16": the names for messages. */
NJ_HIDDEN const char *nj_dtype_list(void);

/* ---- operands (nj_operand, problem.h) ---- */
typedef struct nj_operand_info {
    nj_operand id;
    const char *key;     /* "res": P.* tables, the text form's OP.* keys, canonical text order */
    const char *name;    /* "residual": the nj_problem_desc field, messages */
    int32_t desc_offset; /* offsetof(nj_problem_desc, <name>), -1 for operands without a descriptor */
    uint32_t needs_flag; /* used only when this flag is set (0: whenever it has a descriptor) */
    bool output;         /* written by a kernel: must not overlap itself */
} nj_operand_info;
NJ_HIDDEN const nj_operand_info *nj_operand_row(int32_t o); /* NULL outside 0..NJ_OPD_COUNT-1 */
NJ_HIDDEN const char *nj_operand_key(int32_t o);            /* "?" outside the table */
/* The operand's descriptor inside p, NULL for param and stats (no descriptor of their own). */
NJ_HIDDEN const nj_tensor_desc *nj_operand_desc(const nj_problem_desc *p, int32_t o);
/* Whether problem p uses operand o (x, y, dy, dx always; residual operands by flag; param, stats never:
 * they have no descriptor). */
NJ_HIDDEN bool nj_operand_used(const nj_problem_desc *p, int32_t o);

/* ---- flags (nj_flags, normjit.h) ---- */
typedef struct nj_flag_info {
    uint32_t bit;
    const char *name; /* "resout": text form, canonical text, P.flags keys */
} nj_flag_info;
NJ_HIDDEN size_t nj_flag_count(void);
NJ_HIDDEN const nj_flag_info *nj_flag_row(size_t i); /* rows in bit order; NULL past the end */
NJ_HIDDEN const nj_flag_info *nj_flag_by_name(const char *name);
NJ_HIDDEN const char *nj_flag_list(void); /* "center, scale, ...": the names for messages */

/* ---- activations (nj_activation, normjit.h) ---- */
typedef struct nj_act_info {
    nj_activation id;
    const char *name; /* "gelu_tanh": text form, canonical text, P.act */
} nj_act_info;
NJ_HIDDEN const nj_act_info *nj_act_find(int32_t a); /* NULL when a is not an nj_activation */
NJ_HIDDEN const nj_act_info *nj_act_by_name(const char *name);
NJ_HIDDEN const char *nj_act_list(void); /* "none, relu, ...": the names for messages */

#endif
