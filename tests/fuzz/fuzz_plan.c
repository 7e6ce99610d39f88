/* Fuzz target: descriptor validation plus planning. The input is decoded into a descriptor (mode byte 0:
 * the raw struct bytes; else a structured decoding that reaches valid problems: extents, strides, axis
 * masks, flags, dtypes), then validated; a valid one is canonicalized and planned for both passes and
 * variants on three devices. Planning never crashes and returns a status; a plan passes nj_plan_check,
 * its launch metadata round-trips, both variants agree on workspace, and its text round-trips. */
#include "fuzz.h"

#include <string.h>

#include "planner.h"
#include "problem.h"

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint64_t take(reader *r, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        v = v << 8 | (r->n ? *r->p : 0);
        if (r->n) r->p++, r->n--;
    }
    return v;
}

/* Mostly small extents and strides (deep paths), sometimes huge ones (overflow checks). */
static int64_t take_dim(reader *r)
{
    uint8_t kind = (uint8_t)take(r, 1);
    if (kind < 200) return kind % 40;
    if (kind < 250) return (int64_t)take(r, 3);
    return (int64_t)take(r, 8);
}

static void decode(reader *r, nj_problem_desc *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->x.dtype = (int32_t)(take(r, 1) % 4);
    p->x.rank = (int32_t)(take(r, 1) % 10);
    int32_t rank = p->x.rank > NJ_MAX_RANK ? NJ_MAX_RANK : p->x.rank;
    for (int i = 0; i < rank; i++) p->x.extents[i] = take_dim(r);
    int contiguous = (int)(take(r, 1) % 2);
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; i--) {
        p->x.strides[i] = contiguous ? s : take_dim(r);
        s *= p->x.extents[i] > 0 && p->x.extents[i] < 1000 ? p->x.extents[i] : 1;
    }
    p->reduce_axes = (uint32_t)take(r, 2) & 0x1FF;
    p->feature_axes = (uint32_t)take(r, 2) & 0x1FF;
    p->flags = (uint32_t)take(r, 1);
    p->activation = (int32_t)(take(r, 1) % 7);
    p->param_dtype = (int32_t)(take(r, 1) % 4);
    uint8_t opd = (uint8_t)take(r, 1);
    nj_tensor_desc *t[3] = {&p->y, &p->dy, &p->dx};
    for (int k = 0; k < 3; k++) {
        t[k]->dtype = (int32_t)((opd >> (2 * k)) & 3);
        if (!(take(r, 1) & 1)) continue;
        t[k]->rank = p->x.rank;
        memcpy(t[k]->extents, p->x.extents, sizeof t[k]->extents);
        for (int i = 0; i < rank; i++) t[k]->strides[i] = take_dim(r);
    }
}

static void plan_all(const nj_canon *c)
{
    static const int32_t archs[3] = {90, 80, 86};
    for (int d = 0; d < 3; d++) {
        nj_device_props dev;
        nj_device_props_default(archs[d], &dev);
        for (int pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
            nj_canon v;
            nj_canon_for_pass(c, (nj_pass)pass, &v);
            nj_plan_params m, u;
            nj_status s = nj_plan_variant(&v, (nj_pass)pass, NJ_VARIANT_MAIN, &dev, &m);
            NJ_FUZZ_CHECK(s != NJ_ERR_INTERNAL);
            if (s != NJ_OK) continue;
            NJ_FUZZ_CHECK(nj_plan_check(&v, &m, &dev) == NJ_OK);
            NJ_FUZZ_CHECK(nj_plan_variant(&v, (nj_pass)pass, NJ_VARIANT_UNALIGNED, &dev, &u) == NJ_OK);
            NJ_FUZZ_CHECK(u.workspace_fixed == m.workspace_fixed && u.workspace_per_row == m.workspace_per_row);
            char *lt = nj_launches_to_text(&m);
            nj_plan_params back;
            memset(&back, 0, sizeof back);
            NJ_FUZZ_CHECK(lt && nj_launches_from_text(lt, &back) == NJ_OK && back.nlaunch == m.nlaunch);
            NJ_FUZZ_CHECK(memcmp(back.launch, m.launch, sizeof(nj_launch) * (size_t)m.nlaunch) == 0);
            free(lt);
            char *pt = nj_plan_text(&m);
            NJ_FUZZ_CHECK(pt != NULL);
            free(pt);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nj_problem_desc p;
    if (size > 0 && data[0] == 0) {
        memset(&p, 0, sizeof p);
        memcpy(&p, data + 1, size - 1 < sizeof p ? size - 1 : sizeof p);
    } else {
        reader r = {size ? data + 1 : data, size ? size - 1 : 0};
        decode(&r, &p);
    }
    if (nj_problem_validate(&p) != NJ_OK) return 0;
    nj_canon c;
    NJ_FUZZ_CHECK(nj_canonicalize(&p, &c) == NJ_OK);
    plan_all(&c);
    char text[4096];
    NJ_FUZZ_CHECK(nj_problem_to_text(&p, text, sizeof text, NULL) == NJ_OK);
    nj_problem_desc q;
    NJ_FUZZ_CHECK(nj_problem_from_text(text, 1, &q) == NJ_OK);
    unsigned char ka[NJ_PROBLEM_KEY_MAX], kb[NJ_PROBLEM_KEY_MAX];
    size_t la = nj_problem_key(&p, ka, sizeof ka), lb = nj_problem_key(&q, kb, sizeof kb);
    NJ_FUZZ_CHECK(la == lb && memcmp(ka, kb, la) == 0);
    return 0;
}
