/* Text form of a problem: one line, printed by nj_problem_to_text and read by nj_problem_from_text.
 *
 * Grammar (tokens are separated by blanks; keys and words are lower case):
 *   line    := preset token*
 *   preset  := layernorm | rmsnorm | instancenorm | groupnorm | batchnorm | norm | general
 *              (any case; norm and general name the general problem, printed as norm)
 *   token   := dtype | layout | shape | key '=' value
 *   dtype   := f32 | f16 | bf16
 *   layout  := 'n' 'c' [dhwl]*  (channels first)  |  'n' [dhwl]+ 'c'  (channels last); one letter per axis
 *   shape   := dim ('x' dim)*   with dim := integer | '*'   ('*' only for axis 0: reads as batch=, else
 *              batch_default)
 *   list    := integer (',' integer)*
 *   keys    := dtype=dtype shape=shape batch=integer strides=list reduce=list feature=list|none groups=integer
 *              param=dtype flags=(center|scale|bias|residual|resout|stats),...|none
 *              act=none|relu|silu|gelu_tanh|gelu_erf|sigmoid  axes=list  last=integer
 *              OP.dtype=dtype OP.strides=list   with OP := y | res | resout | dy | dx
 * Two forms share the grammar:
 *   general form (chosen by `reduce=`, required for `norm`): x has `shape` and `strides` (default
 *     contiguous), R = reduce, F = feature, flags exactly as given; the preset word is only a label.
 *     nj_problem_to_text always prints this form, so print -> parse is exact.
 *   short form (no `reduce=`): the preset constructor builds the problem from dtype, layout and shape:
 *     layernorm/rmsnorm: shape is the contiguous memory order, normalize over the `last=` k axes (default
 *       1) or, with `axes=`, Keras-style over that axis list (negative counts from the end); only
 *       channels-first layout words are accepted since they change nothing.
 *     instancenorm: shape in layout order ([N, C, sp...] or [N, sp..., C]); groupnorm/batchnorm: shape is
 *       always [N, C, sp...] and the layout word picks the memory order. groupnorm needs groups=.
 *   In both forms omitted flags mean center,scale,bias (presets then set or clear center themselves),
 *   and act, param and OP.* tokens apply on top.
 * Malformed text is NJ_ERR_PARSE with the offending token in the detail; a well-formed line describing an
 * invalid problem gets the validation status.
 */
#include "vocab.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The text form's OP.* operands: y, res, resout, dy, dx (the operand table's keys, from y on); index i is
 * operand NJ_OPD_Y + i. */
#define NJ_TEXT_OPDS (NJ_OPD_DX - NJ_OPD_Y + 1)
static const char *const preset_names[] = {"norm", "layernorm", "rmsnorm", "instancenorm", "groupnorm", "batchnorm"};

static const char *opd_key(int i) { return nj_operand_key(NJ_OPD_Y + i); }

static const nj_tensor_desc *opd_cdesc(const nj_problem_desc *p, int i) { return nj_operand_desc(p, NJ_OPD_Y + i); }

static nj_tensor_desc *opd_desc(nj_problem_desc *p, int i) { return (nj_tensor_desc *)nj_operand_desc(p, NJ_OPD_Y + i); }

static bool opd_used(const nj_problem_desc *p, int i) { return nj_operand_used(p, NJ_OPD_Y + i); }

/* ---- Printing ---- */

static void print_list(nj_buf *b, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++) nj_buf_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
}

static void print_mask(nj_buf *b, uint32_t mask)
{
    bool first = true;
    for (int i = 0; i < 32; i++)
        if (mask >> i & 1u) {
            nj_buf_printf(b, "%s%d", first ? "" : ",", i);
            first = false;
        }
}

static void print_flags(nj_buf *b, uint32_t flags)
{
    nj_buf_printf(b, " flags=");
    if (!flags) nj_buf_printf(b, "none");
    bool first = true;
    for (size_t i = 0; i < nj_flag_count(); i++)
        if (flags & nj_flag_row(i)->bit) {
            nj_buf_printf(b, "%s%s", first ? "" : ",", nj_flag_row(i)->name);
            first = false;
        }
}

/* Optional operands appear only where they differ from x (dtype NONE and rank 0 mean "like x"). */
static void print_operands(nj_buf *b, const nj_problem_desc *p)
{
    for (int i = 0; i < NJ_TEXT_OPDS; i++) {
        const nj_tensor_desc *t = opd_cdesc(p, i);
        if (!opd_used(p, i)) continue;
        if (t->dtype != NJ_DTYPE_NONE && t->dtype != p->x.dtype)
            nj_buf_printf(b, " %s.dtype=%s", opd_key(i), nj_dtype_name((nj_dtype)t->dtype));
        if (t->rank != 0 && memcmp(t->strides, p->x.strides, (size_t)p->x.rank * sizeof(int64_t)) != 0) {
            nj_buf_printf(b, " %s.strides=", opd_key(i));
            print_list(b, t->strides, p->x.rank);
        }
    }
}

static char *problem_text(const nj_problem_desc *p)
{
    nj_buf b;
    nj_buf_init(&b);
    const nj_tensor_desc *x = &p->x;
    nj_buf_printf(&b, "%s dtype=%s shape=", preset_names[p->preset], nj_dtype_name((nj_dtype)x->dtype));
    bool star = !((p->reduce_axes | p->feature_axes) & 1u); /* axis 0 is a batch axis */
    for (int i = 0; i < x->rank; i++) {
        if (i == 0 && star) nj_buf_printf(&b, "*");
        else nj_buf_printf(&b, "%s%lld", i ? "x" : "", (long long)x->extents[i]);
    }
    /* '*' keeps the batch a run-time extent (a manifest line serves every batch); batch= says which one
     * this problem had, so that print -> parse is exact */
    if (star) nj_buf_printf(&b, " batch=%lld", (long long)x->extents[0]);
    nj_buf_printf(&b, " strides=");
    print_list(&b, x->strides, x->rank);
    nj_buf_printf(&b, " reduce=");
    print_mask(&b, p->reduce_axes);
    if (p->feature_axes) {
        nj_buf_printf(&b, " feature=");
        print_mask(&b, p->feature_axes);
    }
    if (p->groups) nj_buf_printf(&b, " groups=%d", p->groups);
    if (p->flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS))
        nj_buf_printf(&b, " param=%s", nj_dtype_name(p->param_dtype ? (nj_dtype)p->param_dtype : NJ_F32));
    print_flags(&b, p->flags);
    nj_buf_printf(&b, " act=%s", nj_act_find(p->activation)->name);
    print_operands(&b, p);
    return nj_buf_take(&b);
}

nj_status nj_problem_to_text(const nj_problem_desc *p, char *buf, size_t cap, size_t *len)
{
    NJ_TRY(nj_problem_validate(p)); /* clears the error detail too */
    char *text = problem_text(p);
    NJ_RETURN_IF(!text, NJ_ERR_OUT_OF_MEMORY, "problem text: out of memory");
    nj_status s = nj_copy_out(text, buf, cap, len);
    free(text);
    return s;
}

/* ---- Parsing ---- */

#define NJ_MAX_LIST 16

typedef struct nj_text_opd {
    int32_t dtype;
    int32_t nstrides; /* -1 = not given */
    int64_t strides[NJ_MAX_RANK];
} nj_text_opd;

/* Everything a line said, before the problem is built. Counts are -1 when a token was absent. */
typedef struct nj_parsed {
    int32_t preset;
    int32_t dtype, param, act, groups, last_k;
    int32_t channels_last, layout_rank; /* layout_rank -1: no layout word */
    int32_t rank, nstrides, nreduce, nfeature, naxes;
    bool star, have_flags;
    uint32_t flags;
    int64_t batch; /* batch=N: the extent a '*' stands for (-1: batch_default) */
    int64_t extents[NJ_MAX_RANK], strides[NJ_MAX_RANK];
    int64_t reduce[NJ_MAX_LIST], feature[NJ_MAX_LIST], axes[NJ_MAX_LIST];
    nj_text_opd opd[NJ_TEXT_OPDS];
} nj_parsed;

static int find_preset(const char *s)
{
    if (strcasecmp(s, "general") == 0) return NJ_PRESET_GENERAL;
    for (size_t i = 0; i < NJ_ARRAY_LEN(preset_names); i++)
        if (strcasecmp(s, preset_names[i]) == 0) return (int)i;
    return -1;
}

static int32_t dtype_of(const char *s)
{
    const nj_dtype_info *t = nj_dtype_by_name(s);
    return t ? (int32_t)t->id : -1;
}

/* "unknown <what> (<the table's names>)" */
static nj_status bad_word(const char *tok, const char *what, const char *names)
{
    return nj_fail(NJ_ERR_PARSE, "problem text: `%s`: unknown %s (%s)", tok, what, names);
}

static bool parse_int(const char *s, int64_t *v)
{
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    long long r = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *v = r;
    return true;
}

/* Comma-separated integers into v; the count, or -1 when malformed or too long. */
static int parse_list(const char *s, int64_t *v, int cap)
{
    char tmp[256];
    if (strlen(s) >= sizeof tmp) return -1;
    strcpy(tmp, s);
    int n = 0;
    char *save = NULL;
    if (!*tmp || tmp[strlen(tmp) - 1] == ',' || tmp[0] == ',' || strstr(tmp, ",,")) return -1;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == cap || !parse_int(t, &v[n])) return -1;
        n++;
    }
    return n;
}

static nj_status bad(const char *tok, const char *why)
{
    return nj_fail(NJ_ERR_PARSE, "problem text: `%s`: %s", tok, why);
}

static nj_status parse_shape(nj_parsed *r, const char *tok, const char *s)
{
    char tmp[256];
    if (strlen(s) >= sizeof tmp || !*s) return bad(tok, "malformed shape");
    strcpy(tmp, s);
    if (tmp[strlen(tmp) - 1] == 'x' || strstr(tmp, "xx")) return bad(tok, "malformed shape");
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(tmp, "x", &save); t; t = strtok_r(NULL, "x", &save)) {
        if (n == NJ_MAX_RANK) return bad(tok, "more than 8 axes");
        if (strcmp(t, "*") == 0) {
            if (n != 0) return bad(tok, "'*' (the batch) may only be axis 0");
            r->star = true;
            r->extents[n++] = 0;
        } else if (!parse_int(t, &r->extents[n++])) {
            return bad(tok, "shape extents must be integers or '*'");
        }
    }
    r->rank = n;
    return NJ_OK;
}

static nj_status parse_flags(nj_parsed *r, const char *tok, const char *s)
{
    char tmp[256];
    if (strlen(s) >= sizeof tmp || !*s) return bad(tok, "malformed flags");
    strcpy(tmp, s);
    r->have_flags = true;
    r->flags = 0;
    if (strcmp(tmp, "none") == 0) return NJ_OK;
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const nj_flag_info *f = nj_flag_by_name(t);
        if (!f) return nj_fail(NJ_ERR_PARSE, "problem text: `%s`: unknown flag (%s, none)", tok, nj_flag_list());
        r->flags |= f->bit;
    }
    return NJ_OK;
}

/* A layout word: 'n' first, 'c' second (channels first) or last (channels last), else d/h/w/l. */
static bool parse_layout(nj_parsed *r, const char *s)
{
    size_t n = strlen(s);
    if (n < 2 || s[0] != 'n' || strspn(s, "ncdhwl") != n) return false;
    const char *c = strchr(s + 1, 'c');
    if (!c || strchr(c + 1, 'c') || strchr(s + 1, 'n')) return false;
    if (c != s + 1 && c != s + n - 1) return false;
    r->channels_last = c != s + 1;
    r->layout_rank = (int32_t)n;
    return true;
}

static nj_status parse_operand_key(nj_parsed *r, const char *tok, const char *key, const char *val)
{
    const char *dot = strchr(key, '.');
    char name[16];
    size_t n = (size_t)(dot - key);
    if (n >= sizeof name) return bad(tok, "unknown key");
    memcpy(name, key, n);
    name[n] = '\0';
    int i = 0;
    while (i < NJ_TEXT_OPDS && strcmp(name, opd_key(i)) != 0) i++;
    if (i == NJ_TEXT_OPDS) return bad(tok, "unknown operand (y, res, resout, dy, dx)");
    nj_text_opd *o = &r->opd[i];
    if (strcmp(dot + 1, "dtype") == 0) {
        if ((o->dtype = dtype_of(val)) < 0) return bad_word(tok, "dtype", nj_dtype_list());
    } else if (strcmp(dot + 1, "strides") == 0) {
        if ((o->nstrides = parse_list(val, o->strides, NJ_MAX_RANK)) < 0) return bad(tok, "malformed stride list");
    } else {
        return bad(tok, "unknown operand key (dtype, strides)");
    }
    return NJ_OK;
}

static nj_status parse_int_key(const char *tok, const char *val, int32_t lo, int32_t *out)
{
    int64_t v;
    if (!parse_int(val, &v) || v < lo || v > INT32_MAX) return bad(tok, "expected a non-negative integer");
    *out = (int32_t)v;
    return NJ_OK;
}

static nj_status parse_key(nj_parsed *r, const char *tok)
{
    char key[32];
    const char *eq = strchr(tok, '=');
    size_t n = (size_t)(eq - tok);
    if (n == 0 || n >= sizeof key) return bad(tok, "unknown key");
    memcpy(key, tok, n);
    key[n] = '\0';
    const char *val = eq + 1;
    if (strchr(key, '.')) return parse_operand_key(r, tok, key, val);
    if (strcmp(key, "dtype") == 0 || strcmp(key, "param") == 0) {
        int32_t d = dtype_of(val);
        if (d < 0) return bad_word(tok, "dtype", nj_dtype_list());
        *(key[0] == 'd' ? &r->dtype : &r->param) = d;
    } else if (strcmp(key, "shape") == 0) {
        return parse_shape(r, tok, val);
    } else if (strcmp(key, "strides") == 0) {
        if ((r->nstrides = parse_list(val, r->strides, NJ_MAX_RANK)) < 0) return bad(tok, "malformed stride list");
    } else if (strcmp(key, "reduce") == 0) {
        if ((r->nreduce = parse_list(val, r->reduce, NJ_MAX_LIST)) < 0) return bad(tok, "malformed axis list");
    } else if (strcmp(key, "feature") == 0) {
        r->nfeature = strcmp(val, "none") == 0 ? 0 : parse_list(val, r->feature, NJ_MAX_LIST);
        if (r->nfeature < 0) return bad(tok, "malformed axis list");
    } else if (strcmp(key, "axes") == 0) {
        if ((r->naxes = parse_list(val, r->axes, NJ_MAX_LIST)) < 0) return bad(tok, "malformed axis list");
    } else if (strcmp(key, "batch") == 0) {
        if (!parse_int(val, &r->batch) || r->batch < 0) return bad(tok, "expected a non-negative integer");
    } else if (strcmp(key, "groups") == 0) {
        return parse_int_key(tok, val, 0, &r->groups);
    } else if (strcmp(key, "last") == 0) {
        return parse_int_key(tok, val, 0, &r->last_k);
    } else if (strcmp(key, "flags") == 0) {
        return parse_flags(r, tok, val);
    } else if (strcmp(key, "act") == 0) {
        const nj_act_info *a = nj_act_by_name(val);
        if (!a) return bad_word(tok, "activation", nj_act_list());
        r->act = (int32_t)a->id;
    } else {
        return bad(tok, "unknown key");
    }
    return NJ_OK;
}

static nj_status parse_token(nj_parsed *r, const char *tok)
{
    if (strchr(tok, '=')) return parse_key(r, tok);
    int32_t d = dtype_of(tok);
    if (d > 0) {
        r->dtype = d;
        return NJ_OK;
    }
    if (parse_layout(r, tok)) return NJ_OK;
    if (isdigit((unsigned char)tok[0]) || tok[0] == '*' || tok[0] == '-') return parse_shape(r, tok, tok);
    return bad(tok, "expected a dtype, a layout, a shape or key=value");
}

static nj_status tokenize(const char *text, nj_parsed *r)
{
    char tok[512];
    const char *s = text;
    bool first = true;
    while (*s) {
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s) break;
        size_t n = 0;
        while (s[n] && !isspace((unsigned char)s[n])) n++;
        if (n >= sizeof tok) return nj_fail(NJ_ERR_PARSE, "problem text: a token of %zu characters is too long", n);
        memcpy(tok, s, n);
        tok[n] = '\0';
        s += n;
        if (first) {
            r->preset = find_preset(tok);
            if (r->preset < 0)
                return bad(tok, "unknown problem kind (layernorm, rmsnorm, instancenorm, groupnorm, batchnorm, norm)");
            first = false;
            continue;
        }
        NJ_TRY(parse_token(r, tok));
    }
    if (first) return nj_fail(NJ_ERR_PARSE, "problem text is empty");
    return NJ_OK;
}

static void parsed_init(nj_parsed *r)
{
    memset(r, 0, sizeof *r);
    r->last_k = -1;
    r->groups = -1;
    r->batch = -1;
    r->layout_rank = -1;
    r->nstrides = r->nreduce = r->nfeature = r->naxes = -1;
    r->flags = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    for (int i = 0; i < NJ_TEXT_OPDS; i++) r->opd[i].nstrides = -1;
}

/* ---- Building the problem from what the line said ---- */

static nj_status axis_mask(const int64_t *v, int n, const char *key, uint32_t *mask)
{
    *mask = 0;
    for (int i = 0; i < n; i++) {
        NJ_RETURN_IF(v[i] < 0 || v[i] >= NJ_MAX_RANK, NJ_ERR_BAD_AXIS, "problem text: %s= lists axis %lld", key,
                     (long long)v[i]);
        NJ_RETURN_IF(*mask >> v[i] & 1u, NJ_ERR_DUPLICATE_AXIS, "problem text: %s= lists axis %lld twice", key,
                     (long long)v[i]);
        *mask |= 1u << v[i];
    }
    return NJ_OK;
}

static nj_status build_general(const nj_parsed *r, nj_problem_desc *d)
{
    if (r->naxes >= 0 || r->last_k >= 0) return bad(r->naxes >= 0 ? "axes=" : "last=", "not allowed with reduce=");
    if (r->layout_rank >= 0) return bad("layout", "a layout word belongs to the short form (without reduce=)");
    d->preset = r->preset;
    d->flags = r->flags;
    d->groups = r->groups < 0 ? 0 : r->groups;
    if (r->nstrides >= 0) {
        if (r->nstrides != r->rank) return bad("strides=", "needs one stride per shape axis");
        d->x.dtype = r->dtype;
        d->x.rank = r->rank;
        memcpy(d->x.extents, r->extents, sizeof r->extents);
        memcpy(d->x.strides, r->strides, sizeof r->strides);
    } else {
        NJ_TRY(nj_tensor_contiguous(&d->x, (nj_dtype)r->dtype, r->rank, r->extents));
    }
    NJ_TRY(axis_mask(r->reduce, r->nreduce, "reduce", &d->reduce_axes));
    if (r->nfeature > 0) NJ_TRY(axis_mask(r->feature, r->nfeature, "feature", &d->feature_axes));
    return NJ_OK;
}

static nj_status build_layernorm(const nj_parsed *r, nj_problem_desc *d)
{
    if (r->channels_last) return bad("layout", "layernorm/rmsnorm shapes are the memory order (channels first)");
    if (r->naxes >= 0 && r->last_k >= 0) return bad("axes=", "give axes= or last=, not both");
    nj_dtype dt = (nj_dtype)r->dtype;
    if (r->naxes < 0) {
        int32_t k = r->last_k < 0 ? 1 : r->last_k;
        if (r->preset == NJ_PRESET_RMSNORM) return nj_preset_rmsnorm(d, dt, r->rank, r->extents, k, r->flags);
        return nj_preset_layernorm(d, dt, r->rank, r->extents, k, r->flags);
    }
    nj_tensor_desc x;
    int32_t axes[NJ_MAX_LIST];
    for (int i = 0; i < r->naxes; i++) {
        NJ_RETURN_IF(r->axes[i] < -NJ_MAX_RANK || r->axes[i] >= NJ_MAX_RANK, NJ_ERR_BAD_AXIS,
                     "problem text: axes= lists axis %lld", (long long)r->axes[i]);
        axes[i] = (int32_t)r->axes[i];
    }
    NJ_TRY(nj_tensor_contiguous(&x, dt, r->rank, r->extents));
    NJ_TRY(nj_preset_layernorm_axes(d, &x, axes, r->naxes, r->flags));
    if (r->preset == NJ_PRESET_RMSNORM) {
        d->preset = NJ_PRESET_RMSNORM;
        d->flags &= ~(uint32_t)NJ_FLAG_CENTER;
    }
    return NJ_OK;
}

static nj_status build_short(const nj_parsed *r, nj_problem_desc *d)
{
    if (r->nstrides >= 0) return bad("strides=", "x strides need the general form (with reduce=)");
    if (r->nfeature >= 0) return bad("feature=", "feature axes need the general form (with reduce=)");
    if (r->layout_rank >= 0 && r->layout_rank != r->rank) return bad("layout", "needs one letter per shape axis");
    if (r->preset != NJ_PRESET_GROUPNORM && r->groups >= 0) return bad("groups=", "only groupnorm has groups");
    bool ln = r->preset == NJ_PRESET_LAYERNORM || r->preset == NJ_PRESET_RMSNORM;
    if (!ln && (r->naxes >= 0 || r->last_k >= 0))
        return bad(r->naxes >= 0 ? "axes=" : "last=", "only layernorm/rmsnorm take an axis choice");
    nj_dtype dt = (nj_dtype)r->dtype;
    switch (r->preset) {
    case NJ_PRESET_LAYERNORM:
    case NJ_PRESET_RMSNORM: return build_layernorm(r, d);
    case NJ_PRESET_INSTANCENORM:
        return nj_preset_instancenorm(d, dt, r->rank, r->extents, r->channels_last, r->flags);
    case NJ_PRESET_GROUPNORM:
        if (r->groups < 0) return bad("groupnorm", "needs groups=");
        return nj_preset_groupnorm(d, dt, r->rank, r->extents, r->groups, r->channels_last, r->flags);
    case NJ_PRESET_BATCHNORM: return nj_preset_batchnorm(d, dt, r->rank, r->extents, r->channels_last, r->flags);
    default: return bad("norm", "the general form needs reduce=");
    }
}

/* act, param and per-operand dtype/strides apply on top of either form. */
static nj_status apply_common(const nj_parsed *r, nj_problem_desc *d)
{
    d->activation = r->act;
    if (r->param) d->param_dtype = r->param;
    for (int i = 0; i < NJ_TEXT_OPDS; i++) {
        const nj_text_opd *o = &r->opd[i];
        nj_tensor_desc *t = opd_desc(d, i);
        if (o->dtype > 0) t->dtype = o->dtype;
        if (o->nstrides < 0) continue;
        if (o->nstrides != d->x.rank) return bad(opd_key(i), "OP.strides= needs one stride per x axis");
        t->rank = d->x.rank;
        memcpy(t->extents, d->x.extents, sizeof t->extents);
        memcpy(t->strides, o->strides, sizeof t->strides);
    }
    return NJ_OK;
}

static nj_status build_problem(const nj_parsed *r, nj_problem_desc *d)
{
    if (r->rank <= 0) return nj_fail(NJ_ERR_PARSE, "problem text: no shape");
    if (r->dtype <= 0) return nj_fail(NJ_ERR_PARSE, "problem text: no dtype (%s)", nj_dtype_list());
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    if (r->nreduce >= 0) NJ_TRY(build_general(r, d));
    else NJ_TRY(build_short(r, d));
    NJ_TRY(apply_common(r, d));
    return nj_problem_validate(d);
}

nj_status nj_problem_from_text(const char *text, int64_t batch_default, nj_problem_desc *p)
{
    nj_error_clear();
    NJ_RETURN_IF(!text, NJ_ERR_NULL_POINTER, "problem text is NULL");
    NJ_RETURN_IF(!p, NJ_ERR_NULL_POINTER, "problem descriptor is NULL");
    NJ_RETURN_IF(batch_default < 0, NJ_ERR_BAD_ARGUMENT, "batch_default = %lld is negative",
                 (long long)batch_default);
    nj_parsed r;
    parsed_init(&r);
    NJ_TRY(tokenize(text, &r));
    NJ_RETURN_IF(r.batch >= 0 && !r.star, NJ_ERR_PARSE, "problem text: batch= needs a '*' as the shape's first extent");
    if (r.star) r.extents[0] = r.batch >= 0 ? r.batch : batch_default;
    nj_problem_desc d;
    NJ_TRY(build_problem(&r, &d));
    *p = d;
    return NJ_OK;
}
