/* Each modelled pass against issue 17's goals, as `normjit model --goals` prints them. Forward: at least 90%
 * of copy; at most 1.05x the ideal DRAM bytes (or 1.05x the two-read floor where the sets cannot stay in
 * an SM's shared memory: model.c, m_floor); sector efficiency at least 95%; at least 90% of the bytes in 16-byte accesses
 * where x's contiguous run allows them; the loads in flight an SM that Little's law asks for copy speed
 * (copy bandwidth x DRAM latency / SMs); at least 90% of lanes active; a block on every SM. Backward: at
 * least 80% of copy, at most 1.3x the ideal bytes (or 1.05x the floor of x and dy read twice, as above).
 * The launch that moves the most DRAM bytes stands for the pass in the per-launch goals (widths, loads in
 * flight, blocks). */
#include "model.h"

#include <stdio.h>
#include <string.h>

/* The launch that moves the most DRAM bytes (-1: none ran). */
static int32_t g_main(const nj_model_pass *ps)
{
    int32_t best = -1;
    double most = -1;
    for (int32_t i = 0; i < ps->nlaunch; i++) {
        double b = ps->launch[i].t.dram_read + ps->launch[i].t.dram_write;
        if (ps->launch[i].blocks > 0 && b > most) most = b, best = i;
    }
    return best;
}

/* Share of a launch's lane-access bytes (loads and stores) moved by accesses of 16 bytes. */
static double g_share16(const nj_model_launch *m)
{
    static const double width[NJ_TRACE_WIDTHS] = {1, 2, 4, 8, 16};
    double all = 0, wide = 0;
    for (int d = 0; d < 2; d++)
        for (int w = 0; w < NJ_TRACE_WIDTHS; w++) {
            all += m->t.width[d][w] * width[w];
            if (w == NJ_TRACE_WIDTHS - 1) wide += m->t.width[d][w] * width[w];
        }
    return all > 0 ? wide / all : 0;
}

/* Appends " name" to the unmet list when !ok. */
static void g_check(char *unmet, size_t cap, bool ok, const char *name)
{
    size_t n = strlen(unmet);
    if (!ok && n + strlen(name) + 2 < cap) snprintf(unmet + n, cap - n, " %s", name);
}

static void g_pass(nj_buf *b, const char *text, const nj_model_pass *ps, const nj_model_device *dev)
{
    bool fwd = ps->pass == NJ_PASS_FORWARD;
    char unmet[128] = "";
    double floor = ps->two_read ? ps->two_read_bytes : ps->ideal_bytes;
    double ratio = floor > 0 ? ps->dram_bytes / floor : 0;
    g_check(unmet, sizeof unmet, ps->pct_copy >= (fwd ? 90.0 : 80.0), "pct");
    double limit = fwd ? 1.05 * ps->ideal_bytes : 1.3 * ps->ideal_bytes;
    if (ps->two_read && 1.05 * floor > limit) limit = 1.05 * floor;
    g_check(unmet, sizeof unmet, ps->dram_bytes <= limit, "bytes");
    /* ceiling: what a copy of the ideal bytes would reach at this size, one launch's cost included */
    double ceiling = ps->pct_same > 0 ? ps->pct_copy / ps->pct_same * 100 : 0;
    nj_buf_printf(b, "%s | %s | pct %.1f (ceiling %.1f) | bytes %.2fx%s", text, fwd ? "fwd" : "bwd", ps->pct_copy,
                  ceiling, ratio, ps->two_read ? " of the two-read floor" : "");
    int32_t k = g_main(ps);
    if (fwd && k >= 0) {
        const nj_model_launch *m = &ps->launch[k];
        double eff, lanes, share = g_share16(m), need = dev->copy_bw * dev->latency_s / dev->sms;
        nj_model_pass_eff(ps, &eff, &lanes);
        g_check(unmet, sizeof unmet, eff >= 0.95, "sectors");
        g_check(unmet, sizeof unmet, !ps->vec16 || share >= 0.9, "16B");
        g_check(unmet, sizeof unmet, m->inflight_sm >= need, "inflight");
        g_check(unmet, sizeof unmet, lanes >= 0.9 * 32, "lanes");
        g_check(unmet, sizeof unmet, m->blocks >= dev->sms, "wave");
        nj_buf_printf(b, " | sectors %.0f%% | 16B %.0f%%%s | inflight %.1f/%.1f KB | lanes %.1f | blocks %.0f",
                      100 * eff, 100 * share, ps->vec16 ? "" : " (n/a)", m->inflight_sm / 1024, need / 1024, lanes,
                      m->blocks);
    }
    nj_buf_printf(b, " | %s%s\n", unmet[0] ? "unmet:" : "all goals met", unmet);
}

void nj_model_goals(nj_buf *b, const char *text, const nj_model_result *r, const nj_model_device *dev)
{
    for (int32_t k = 0; k < r->npass; k++) g_pass(b, text, &r->pass[k], dev);
}
