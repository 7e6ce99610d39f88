/* Text of the model (model.h): the full report of a problem, its one-line form a pass (`--brief`, the
 * baseline file tests/model_baseline.txt) and the comparison of a line with its baseline. */
#include "family.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double r_ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* "16B:100%" pieces of the widths that occur, largest first */
static void r_widths(nj_buf *b, const double w[NJ_TRACE_WIDTHS])
{
    static const int bytes[] = {1, 2, 4, 8, 16};
    double all = 0;
    for (int i = 0; i < NJ_TRACE_WIDTHS; i++) all += w[i];
    if (all <= 0) {
        nj_buf_printf(b, "-");
        return;
    }
    const char *sep = "";
    for (int i = NJ_TRACE_WIDTHS - 1; i >= 0; i--)
        if (w[i] > 0) {
            nj_buf_printf(b, "%s%dB:%.0f%%", sep, bytes[i], 100 * w[i] / all);
            sep = ",";
        }
}

static void r_dir(nj_buf *b, const nj_trace_launch *t, int d, const char *name)
{
    nj_buf_printf(b, "      %s  %.3g requests, %.1f lanes, %.2f sectors/request, sector efficiency %.0f%%, widths ",
                  name, t->req[d], r_ratio(t->lanes[d], t->req[d]), r_ratio(t->sectors[d], t->req[d]),
                  100 * r_ratio(t->bytes[d], t->sectors[d] * 32));
    r_widths(b, t->width[d]);
    nj_buf_printf(b, "\n");
}

static void r_launch(nj_buf *b, const nj_model_launch *m)
{
    const nj_trace_launch *t = &m->t;
    nj_buf_printf(b, "    launch %s%s%s: %.0f blocks of %d threads", t->kernel, m->lib ? " (library)" : "",
                  m->dependent ? " (dependent)" : "", m->blocks, m->threads);
    if (m->blocks <= 0) {
        nj_buf_printf(b, ", empty grid: not launched\n");
        return;
    }
    if (m->regs >= 0)
        nj_buf_printf(b, ", %d registers, %d B static + %u B dynamic shared, %d B spilled", m->regs, m->smem_static,
                      t->shmem, m->spills);
    else nj_buf_printf(b, ", %u B dynamic shared (no ptxas report)", t->shmem);
    nj_buf_printf(b, "\n      occupancy %d blocks/SM (bound by %s), %.2f waves, tail efficiency %.0f%%, traced %llu of "
                     "%llu blocks\n",
                  m->blocks_sm, m->limit, m->waves, 100 * m->tail, (unsigned long long)t->run,
                  (unsigned long long)t->clusters);
    if (m->has_ptx) {
        static const int bytes[] = {1, 2, 4, 8, 16};
        nj_buf_printf(b, "      PTX global instructions: loads");
        for (int i = NJ_TRACE_WIDTHS - 1; i >= 0; i--)
            if (m->ptx_ld[i]) nj_buf_printf(b, " %dB x%d", bytes[i], m->ptx_ld[i]);
        nj_buf_printf(b, "; stores");
        for (int i = NJ_TRACE_WIDTHS - 1; i >= 0; i--)
            if (m->ptx_st[i]) nj_buf_printf(b, " %dB x%d", bytes[i], m->ptx_st[i]);
        nj_buf_printf(b, "\n");
    }
    r_dir(b, t, NJ_TRACE_LD, "loads ");
    r_dir(b, t, NJ_TRACE_ST, "stores");
    nj_buf_printf(b, "      DRAM %.2f MB read + %.2f MB written (%.2f MB distinct, %.2f MB of loads hit L1); %.1f KB "
                     "loads in flight an SM (%.1f a thread)\n",
                  t->dram_read / 1e6, t->dram_write / 1e6, t->unique_bytes / 1e6, t->l1_hit / 1e6,
                  m->inflight_sm / 1024, m->ilp);
    nj_buf_printf(b, "      time %.2f us = launch + max(dram %.2f, latency %.2f, L2 %.2f, rows %.2f) / tail: %s-bound\n",
                  m->time * 1e6, m->t_dram * 1e6, m->t_lat * 1e6, m->t_l2 * 1e6, m->t_rows * 1e6, m->bound);
}

void nj_model_pass_eff(const nj_model_pass *ps, double *eff, double *lanes)
{
    double bytes = 0, sectors = 0, l = 0, req = 0;
    for (int32_t i = 0; i < ps->nlaunch; i++)
        for (int d = 0; d < 2; d++) {
            bytes += ps->launch[i].t.bytes[d];
            sectors += ps->launch[i].t.sectors[d];
            l += ps->launch[i].t.lanes[d];
            req += ps->launch[i].t.req[d];
        }
    *eff = r_ratio(bytes, sectors * 32);
    *lanes = r_ratio(l, req);
}

static int32_t r_launches(const nj_model_pass *ps)
{
    int32_t n = 0;
    for (int32_t i = 0; i < ps->nlaunch; i++) n += ps->launch[i].blocks > 0;
    return n;
}

void nj_model_report(nj_buf *b, const char *text, const nj_model_result *r, const nj_model_device *dev)
{
    nj_buf_printf(b, "%s\n  %lld elements, on %s (copy %.2f TB/s)\n", text, (long long)r->numel, dev->name,
                  dev->copy_bw / 1e12);
    for (int32_t k = 0; k < r->npass; k++) {
        const nj_model_pass *ps = &r->pass[k];
        double eff, lanes;
        nj_model_pass_eff(ps, &eff, &lanes);
        nj_buf_printf(b, "  %s family=%s, %d launches: %s\n", ps->pass == NJ_PASS_FORWARD ? "fwd" : "bwd",
                      nj_family_name(ps->family), r_launches(ps), ps->plan_text);
        nj_buf_printf(b, "    ideal %.2f MB, plan %.2f MB DRAM (%.2fx), sector efficiency %.0f%%, %.1f lanes a "
                         "request; %.2f us, %.1f%% of copy (%.1f%% of a copy of these bytes, launch included)\n",
                      ps->ideal_bytes / 1e6, ps->dram_bytes / 1e6, r_ratio(ps->dram_bytes, ps->ideal_bytes), 100 * eff,
                      lanes, ps->time * 1e6, ps->pct_copy, ps->pct_same);
        for (int32_t i = 0; i < ps->nlaunch; i++) r_launch(b, &ps->launch[i]);
    }
}

void nj_model_brief(nj_buf *b, const char *text, const nj_model_result *r)
{
    for (int32_t k = 0; k < r->npass; k++) {
        const nj_model_pass *ps = &r->pass[k];
        double eff, lanes;
        nj_model_pass_eff(ps, &eff, &lanes);
        nj_buf_printf(b, "%s | %s | launches %d | ideal_mb %.3f | dram_mb %.3f | sector_eff %.3f | lanes %.2f | "
                         "pct_copy %.1f | us %.2f | pct_same %.1f\n",
                      text, ps->pass == NJ_PASS_FORWARD ? "fwd" : "bwd", r_launches(ps), ps->ideal_bytes / 1e6,
                      ps->dram_bytes / 1e6, eff, lanes, ps->pct_copy, ps->time * 1e6, ps->pct_same);
    }
}

/* The value after "| name " in a brief line; -1 when absent. */
static double r_field(const char *line, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, "| %s ", name);
    const char *p = strstr(line, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

int nj_model_compare(const char *base, const char *now, char *why, size_t cap)
{
    /* what may not get worse, and by how much (relative, or absolute for the ratios) */
    static const struct {
        const char *name;
        int higher_is_worse;
        double tol_rel, tol_abs;
    } f[] = {{"launches", 1, 0, 0}, {"dram_mb", 1, 0.02, 0.01}, {"sector_eff", 0, 0, 0.02},
             {"lanes", 0, 0, 0.5},  {"pct_copy", 0, 0.03, 0.5}};
    for (size_t i = 0; i < NJ_ARRAY_LEN(f); i++) {
        double a = r_field(base, f[i].name), n = r_field(now, f[i].name);
        if (a < 0 || n < 0) continue;
        double tol = a * f[i].tol_rel + f[i].tol_abs;
        bool worse = f[i].higher_is_worse ? n > a + tol : n < a - tol;
        if (worse) {
            snprintf(why, cap, "%s %g -> %g", f[i].name, a, n);
            return 1;
        }
    }
    return 0;
}
