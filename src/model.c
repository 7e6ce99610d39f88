/* The model of one problem (model.h): for each pass, the plan and its launches (static), the ptxas report
 * of the rendered source (registers, shared memory), one traced run of the real generated kernels on the
 * emulator (dynamic: requests, sectors, DRAM bytes), then occupancy, waves and the time estimate on the
 * device (constants: model_devices.c; method: docs/model.md). */
#include "codegen.h"
#include "compile.h"
#include "context.h"
#include "context_impl.h"
#include "emu_fibers.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

nj_status nj_model_context(int32_t arch, const char *cache_dir, nj_context **out)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = arch;
    o.cache_dir = cache_dir;
    nj_emu_count_build(true);
    nj_status s = nj_context_create(&o, out);
    nj_emu_count_build(false);
    return s;
}

/* ---- buffers: zero pages, 256-byte aligned as cudaMalloc's; only the traced blocks touch theirs ---- */

enum { MB_X, MB_Y, MB_RES, MB_RESOUT, MB_DY, MB_DX, MB_GAMMA, MB_BETA, MB_DGAMMA, MB_DBETA, MB_MEAN, MB_RSTD, MB_WS,
       MB_N };

typedef struct mbufs {
    void *raw[MB_N], *p[MB_N];
    size_t bytes[MB_N];
} mbufs;

static int64_t m_span(const nj_tensor_desc *t, const nj_tensor_desc *x)
{
    if (t->rank == 0) t = x;
    int64_t span = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->extents[i] == 0) return 0;
        span += (t->extents[i] - 1) * t->strides[i];
    }
    return span;
}

static int64_t m_count(const nj_tensor_desc *x, uint32_t mask)
{
    int64_t n = 1;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) n *= x->extents[i];
    return n;
}

static size_t m_es(const nj_tensor_desc *t, const nj_tensor_desc *x)
{
    return nj_dtype_size((nj_dtype)(t->dtype != NJ_DTYPE_NONE ? t->dtype : x->dtype));
}

static nj_status m_alloc(mbufs *b, int slot, size_t bytes)
{
    if (!bytes) return NJ_OK;
    b->raw[slot] = calloc(1, bytes + 256);
    NJ_RETURN_IF(!b->raw[slot], NJ_ERR_OUT_OF_MEMORY, "model: %zu bytes for an operand", bytes);
    b->p[slot] = (void *)(((uintptr_t)b->raw[slot] + 255) & ~(uintptr_t)255);
    b->bytes[slot] = bytes;
    return NJ_OK;
}

static void m_free(mbufs *b)
{
    for (int i = 0; i < MB_N; i++) free(b->raw[i]);
    memset(b, 0, sizeof *b);
}

static nj_status m_alloc_all(const nj_problem_desc *p, size_t ws, mbufs *b)
{
    const nj_tensor_desc *x = &p->x;
    uint32_t f = p->flags;
    size_t ps = nj_dtype_size(p->param_dtype != NJ_DTYPE_NONE ? (nj_dtype)p->param_dtype : NJ_F32);
    int64_t nparam = m_count(x, p->feature_axes), nstat = m_count(x, ~p->reduce_axes);
    const struct {
        int slot;
        const nj_tensor_desc *t;
        int used;
    } act[] = {{MB_X, x, 1},
               {MB_Y, &p->y, 1},
               {MB_RES, &p->residual, (f & NJ_FLAG_RESIDUAL) != 0},
               {MB_RESOUT, &p->residual_out, (f & NJ_FLAG_RESIDUAL_OUT) != 0},
               {MB_DY, &p->dy, 1},
               {MB_DX, &p->dx, 1}};
    for (size_t i = 0; i < NJ_ARRAY_LEN(act); i++)
        if (act[i].used) NJ_TRY(m_alloc(b, act[i].slot, (size_t)m_span(act[i].t, x) * m_es(act[i].t, x)));
    if (f & NJ_FLAG_SCALE) NJ_TRY(m_alloc(b, MB_GAMMA, (size_t)nparam * ps));
    if (f & NJ_FLAG_SCALE) NJ_TRY(m_alloc(b, MB_DGAMMA, (size_t)nparam * ps));
    if (f & NJ_FLAG_BIAS) NJ_TRY(m_alloc(b, MB_BETA, (size_t)nparam * ps));
    if (f & NJ_FLAG_BIAS) NJ_TRY(m_alloc(b, MB_DBETA, (size_t)nparam * ps));
    NJ_TRY(m_alloc(b, MB_MEAN, (size_t)nstat * 4));
    NJ_TRY(m_alloc(b, MB_RSTD, (size_t)nstat * 4));
    /* rstd of zero inputs would be 1/sqrt(eps): harmless, but keep the statistics plausible */
    for (int64_t i = 0; b->p[MB_RSTD] && i < nstat && i < (1 << 20); i++) ((float *)b->p[MB_RSTD])[i] = 1.0f;
    return m_alloc(b, MB_WS, ws);
}

/* Bytes a perfect pass moves: every input read once, every output written once (as normjit perf counts). */
static double m_ideal(const nj_problem_desc *p, nj_pass pass)
{
    const nj_tensor_desc *x = &p->x;
    uint32_t f = p->flags;
    double numel = (double)m_count(x, ~0u), es = (double)nj_dtype_size((nj_dtype)x->dtype);
    double ps = (double)nj_dtype_size(p->param_dtype != NJ_DTYPE_NONE ? (nj_dtype)p->param_dtype : NJ_F32);
    double nparam = (f & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) ? (double)m_count(x, p->feature_axes) : 0;
    double nstat = (double)m_count(x, ~p->reduce_axes), statb = (f & NJ_FLAG_CENTER) ? 8.0 : 4.0;
    if (pass == NJ_PASS_FORWARD) {
        double res = numel * es * (((f & NJ_FLAG_RESIDUAL) != 0) + ((f & NJ_FLAG_RESIDUAL_OUT) != 0));
        double params = nparam * ps * (((f & NJ_FLAG_SCALE) != 0) + ((f & NJ_FLAG_BIAS) != 0));
        return numel * es * 2 + res + params + ((f & NJ_FLAG_SAVE_STATS) ? nstat * statb : 0);
    }
    double bparams = nparam * ps * (((f & NJ_FLAG_SCALE) != 0) * 2 + ((f & NJ_FLAG_BIAS) != 0) *
                                                                      (1 + (p->activation != NJ_ACT_NONE)));
    return numel * es * 3 + bparams + nstat * statb;
}

/* A pass's floor where a set cannot stay on chip, and whether x's contiguous run takes whole 16-byte
 * vectors. The smallest piece of x holding whole sets spans every axis from the outermost reduced one in
 * (a channels-last group interleaves with the others: the image); two_read where that piece of x, and of
 * the residual (forward) or dy (backward), outgrows an SM's shared memory: the pass then reads them twice. The run: the innermost axes of x laid end to end. */
static void m_floor(const nj_canon *c, const nj_problem_desc *p, nj_pass pass, const nj_model_device *d,
                    nj_model_pass *out)
{
    double es = (double)nj_dtype_size((nj_dtype)p->x.dtype), numel = (double)m_count(&p->x, ~0u);
    /* the bytes an element of the walked inputs: x and the residual forward, x and dy backward */
    double esd = c->dtype[NJ_OPD_DY] != NJ_DTYPE_NONE ? (double)nj_dtype_size((nj_dtype)c->dtype[NJ_OPD_DY]) : es;
    double inputs = pass == NJ_PASS_FORWARD ? 1.0 + ((p->flags & NJ_FLAG_RESIDUAL) != 0) : 1.0 + esd / es;
    out->two_read_bytes = out->ideal_bytes + numel * es * inputs;
    int32_t a0 = 1;
    while (a0 < c->rank && !c->axes[a0].reduce) a0++;
    double piece = 1;
    for (int32_t a = a0; a < c->rank; a++) piece *= (double)c->axes[a].extent;
    /* on chip: one SM's shared memory, or on sm_90 and later a cluster's (8 SMs, CUDA's portable size) */
    out->two_read = piece * es * inputs > (double)d->smem_sm * (d->arch >= 90 ? 8 : 1);
    int64_t run = 1;
    for (int32_t a = c->rank - 1; a >= 1 && c->axes[a].stride[NJ_OPD_X] == run; a--) run *= c->axes[a].extent;
    out->vec16 = run > 1 && (int64_t)((double)run * es) % 16 == 0;
}

static nj_status m_call(nj_plan *plan, const nj_problem_desc *p, nj_pass pass, mbufs *b)
{
    void *const *v = b->p;
    uint32_t f = p->flags;
    if (pass == NJ_PASS_FORWARD) {
        nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = v[MB_X], .residual = v[MB_RES],
                             .gamma = v[MB_GAMMA], .beta = v[MB_BETA], .y = v[MB_Y], .residual_out = v[MB_RESOUT],
                             .workspace = v[MB_WS], .workspace_size = b->bytes[MB_WS]};
        if (f & NJ_FLAG_SAVE_STATS) {
            a.rstd = v[MB_RSTD];
            if (f & NJ_FLAG_CENTER) a.mean = v[MB_MEAN];
        }
        return nj_forward(plan, &a);
    }
    nj_backward_args a = {.struct_size = sizeof a, .dy = v[MB_DY], .x = v[MB_X], .gamma = v[MB_GAMMA],
                          .beta = v[MB_BETA], .rstd = v[MB_RSTD], .dx = v[MB_DX], .dgamma = v[MB_DGAMMA],
                          .dbeta = v[MB_DBETA], .workspace = v[MB_WS], .workspace_size = b->bytes[MB_WS],
                          .eps = 1e-5f};
    if (f & NJ_FLAG_CENTER) a.mean = v[MB_MEAN];
    return nj_backward(plan, &a);
}

/* ---- static figures: ptxas report ---- */

typedef struct m_res {
    char kernel[64];
    int32_t regs, smem, spills;
    int32_t has_ptx, ld[NJ_TRACE_WIDTHS], st[NJ_TRACE_WIDTHS];
} m_res;

static int32_t m_width_index(int32_t bytes)
{
    return bytes >= 16 ? 4 : bytes >= 8 ? 3 : bytes >= 4 ? 2 : bytes >= 2 ? 1 : 0;
}

/* Bytes of a PTX ld/st from its suffixes ("ld.global.nc.v4.u32": 16), 0 when no type is found. */
static int32_t m_ptx_bytes(const char *op, size_t len)
{
    int32_t vec = 1, bits = 0;
    for (size_t i = 0; i < len; i++) {
        if (op[i] != '.') continue;
        const char *q = op + i + 1;
        if (q[0] == 'v' && (q[1] == '2' || q[1] == '4' || q[1] == '8')) vec = q[1] - '0';
        else if (strchr("busf", q[0]) && q[1] >= '0' && q[1] <= '9') bits = atoi(q + 1);
    }
    return vec * bits / 8;
}

/* Counts the global loads and stores of each .entry of a PTX text into out (matched by kernel name). */
static void m_ptx_widths(const char *ptx, m_res *out, int32_t n)
{
    m_res *cur = NULL;
    for (const char *l = ptx; l && *l;) {
        size_t len = strcspn(l, "\n");
        const char *e = strstr(l, ".entry ");
        if (e && e < l + len) {
            e += 7;
            size_t k = strcspn(e, "( \n");
            cur = NULL;
            for (int32_t i = 0; i < n; i++)
                if (strlen(out[i].kernel) == k && !strncmp(out[i].kernel, e, k)) cur = &out[i];
            if (cur) cur->has_ptx = 1;
        } else if (cur) {
            const char *p = l + strspn(l, " \t");
            if (*p == '@') p += strcspn(p, " \t"), p += strspn(p, " \t");
            int st = !strncmp(p, "st.global", 9);
            if (st || !strncmp(p, "ld.global", 9)) {
                size_t opl = strcspn(p, " \t");
                int32_t b = m_ptx_bytes(p, opl);
                if (b > 0) (st ? cur->st : cur->ld)[m_width_index(b)]++;
            }
        }
        l += len + (l[len] == '\n');
    }
}

/* PTX of source (NVRTC's newest virtual arch: the access widths do not depend on the SM) into out. */
static void m_ptx(const char *source, int32_t kernels, m_res *out, int32_t n)
{
    int32_t maxa = 0;
    if (nj_nvrtc_max_arch(&maxa) != NJ_OK) return;
    nj_compile_result cr;
    memset(&cr, 0, sizeof cr);
    if (nj_nvrtc_compile(source, "model_ptx", maxa + 1, kernels, &cr) == NJ_OK && cr.bin.is_ptx && cr.bin.data) {
        char *text = malloc(cr.bin.size + 1);
        if (text) {
            memcpy(text, cr.bin.data, cr.bin.size);
            text[cr.bin.size] = '\0';
            m_ptx_widths(text, out, n);
            free(text);
        }
    }
    nj_binary_free(&cr.bin);
}

/* The ptxas report of the pass's own source and of the library modules it launches. */
static int32_t m_ptxas(nj_context *ctx, const nj_pass_info *pi, int32_t arch, int32_t param_dtype, m_res *out,
                       int32_t cap)
{
    int32_t n = 0;
    nj_compile_result cr;
    memset(&cr, 0, sizeof cr);
    if (nj_nvrtc_compile(pi->source, "model", arch, nj_plan_kernel_count(&pi->params), &cr) == NJ_OK)
        for (int32_t k = 0; k < cr.nkernels && n < cap; k++, n++) {
            snprintf(out[n].kernel, sizeof out[n].kernel, "%s", cr.kernels[k].kernel);
            out[n].regs = cr.kernels[k].registers;
            out[n].smem = cr.kernels[k].shared_bytes;
            out[n].spills = cr.kernels[k].spill_stores + cr.kernels[k].spill_loads;
        }
    nj_binary_free(&cr.bin);
    m_ptx(pi->source, nj_plan_kernel_count(&pi->params), out, n);
    int32_t libs[NJ_MAX_LAUNCHES], nl = nj_plan_libs(&pi->params, libs);
    for (int32_t i = 0; i < nl && n < cap; i++) {
        nj_plan_params lp;
        int32_t dt = nj_lib_dtype(libs[i], param_dtype);
        char *sig = nj_lib_signature_text(ctx, libs[i], dt, &lp), *src = NULL;
        free(sig);
        if (!sig || nj_codegen_library(&lp, dt, &src) != NJ_OK) continue;
        memset(&cr, 0, sizeof cr);
        if (nj_nvrtc_compile(src, "model_lib", arch, 1, &cr) == NJ_OK && cr.nkernels > 0) {
            snprintf(out[n].kernel, sizeof out[n].kernel, "%s", lp.launch[0].kernel);
            out[n].regs = cr.kernels[0].registers;
            out[n].smem = cr.kernels[0].shared_bytes;
            out[n].spills = cr.kernels[0].spill_stores + cr.kernels[0].spill_loads;
            m_ptx(src, 1, &out[n], 1);
            n++;
        }
        nj_binary_free(&cr.bin);
        free(src);
    }
    nj_error_clear();
    return n;
}

/* ---- occupancy, in-flight bytes, time ---- */

static void m_occupancy(nj_model_launch *m, const nj_model_device *d, uint32_t dyn_smem)
{
    int32_t warps = (m->threads + 31) / 32, best = d->blocks_sm;
    m->limit = "blocks";
    int32_t by_thr = d->threads_sm / (warps * 32);
    if (by_thr < best) best = by_thr, m->limit = "threads";
    if (m->regs > 0) {
        int32_t per_warp = ((m->regs * 32 + 255) / 256) * 256;
        int32_t by_regs = (d->regs_sm / per_warp) / warps;
        if (by_regs < best) best = by_regs, m->limit = "regs";
    }
    int32_t smem = (m->smem_static > 0 ? m->smem_static : 0) + (int32_t)dyn_smem;
    if (smem > 0) {
        int32_t by_smem = d->smem_sm / (smem + 1024); /* 1 KiB a block reserved by the driver */
        if (by_smem < best) best = by_smem, m->limit = "smem";
    }
    m->blocks_sm = best > 0 ? best : 1;
}

/* Loads a thread has in flight. The row family: a row kept in registers is loaded all at once (its vector
 * accesses), a streamed row one at a time, since a block reduction drains the loads of each row. Other
 * kernels walk loops whose loads of one iteration are independent: one in flight per load instruction
 * the trace saw (the column walk the plan's unroll: its walk issues that many loads, then sums; a
 * channels-last thread at least its channel vectors; a row split over blocks streams its piece as other
 * walks do). At most 8. A plan-and-trace estimate, not a count of the SASS (ptxas unrolls more). */
static int32_t m_ilp(const nj_plan_params *pp, const char *kernel, int32_t lib, int32_t load_sites)
{
    int32_t vec = pp->vec > 0 ? pp->vec : 1, n = load_sites;
    if (lib == NJ_LIB_NONE && pp->family == NJ_FAMILY_ROW && pp->split <= 1)
        n = pp->regs_cache > 0 ? pp->regs_cache / vec : 1;
    else if (lib == NJ_LIB_NONE && strstr(kernel, "_column")) /* the loads its walk issues as a group */
        n = pp->unroll > 0 ? pp->unroll : 2;
    else if (lib == NJ_LIB_NONE && pp->family == NJ_FAMILY_CHANNELS_LAST && pp->chans / vec > n) n = pp->chans / vec;
    /* a staged channels-last cluster (the only channels-last plan with P.unroll) copies its tile first:
     * P.unroll vectors of each operand in flight */
    if (lib == NJ_LIB_NONE && pp->family == NJ_FAMILY_CHANNELS_LAST && pp->unroll > 0) {
        int32_t copy = pp->unroll * (pp->pass == NJ_PASS_BACKWARD ? 2 : 1);
        if (copy > n) n = copy;
    }
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

/* Tail efficiency of a grid of equal blocks past a whole number of waves. The last wave holds a fraction
 * fr of a full wave's blocks: fr of its DRAM and L2 traffic, and fr of its loads in flight, so its
 * latency term (Little's law: the wait over the loads in flight) is a full wave's. A launch bound by
 * DRAM or the L2 with loads in flight to spare runs its last wave at the machine's bandwidth; one bound
 * by latency (or by its rows' chain) runs it at a full wave's pace: waves / ceil(waves), the rule before
 * 2026-12-07, which charged a whole wave's time for the remainder of every DRAM-bound grid (LLM rows with
 * the residual, 7.76 waves: 3% of their time). A persistent walk's waves are its rounds of rows (w: the
 * rounds over the resident blocks). Returns the factor body is divided by. */
double nj_model_last_wave(double t_dram, double t_l2, double t_lat, double t_rows, double w)
{
    double body = fmax(fmax(t_dram, t_l2), fmax(t_lat, t_rows)), whole = floor(w), fr = w - whole;
    if (w < 1 || fr <= 0 || body <= 0) return 1;
    double full = body / w, last = fmax(fmax(fr * t_dram, fr * t_l2), fmax(t_lat, t_rows)) / w;
    if (last > full) last = full;
    return body / (whole * full + last);
}

static void m_time(nj_model_launch *m, const nj_model_device *d)
{
    const nj_trace_launch *t = &m->t;
    double per_sm_slots = (double)m->blocks_sm * d->sms;
    m->waves = m->blocks / per_sm_slots;
    double active_sms = m->blocks < d->sms ? m->blocks : d->sms;
    double blocks_per_sm = m->blocks / d->sms < m->blocks_sm ? m->blocks / d->sms : m->blocks_sm;
    if (blocks_per_sm < 1) blocks_per_sm = 1;
    double req_bytes = t->req[NJ_TRACE_LD] > 0 ? t->sectors[NJ_TRACE_LD] * 32 / t->req[NJ_TRACE_LD] : 0;
    m->inflight_sm = blocks_per_sm * ((m->threads + 31) / 32) * req_bytes * m->ilp;
    /* Little's law: each load sector waits a DRAM latency when it misses the L2, an L2 latency when it hits */
    /* L1 hits wait an L2 latency here too: counted free, they made the fit to the H200 worse (geometric
     * mean 0.82, channels-last 0.60): that wait stands in for what the model lacks (issue, dependent
     * chains). They are reported, and they still spare DRAM. */
    double load_bytes = t->sectors[NJ_TRACE_LD] * 32;
    double hits = load_bytes > t->dram_read ? load_bytes - t->dram_read : 0;
    double wait = t->dram_read * d->latency_s + hits * d->l2_latency_s, inflight = active_sms * m->inflight_sm;
    double dram = t->dram_read + t->dram_write;
    m->t_dram = dram / d->copy_bw;
    m->t_lat = inflight > 0 ? wait / inflight : 0;
    /* the L2 serves what the L1 does not: a load that hits its SM's L1 never reaches it (LayerNorm f32
       100000 x 1000 forward, x read twice a row and gamma/beta every row: charged to the L2, 232 us and
       l2-bound in the model; 197 us measured on the H200 on 2026-12-04, its DRAM time) */
    double l2_bytes = (t->sectors[0] + t->sectors[1]) * 32 - t->l1_hit;
    m->t_l2 = (l2_bytes > 0 ? l2_bytes : 0) / d->l2_bw;
    /* a block that walks rows one after another waits a load latency and a reduction each row: the rows
     * of one resident block do not overlap (only the blocks resident beside it do). One that fetches the
     * next row before this row's reduction waits the longer of the two a row, and one latency first. */
    double resident = m->blocks < per_sm_slots ? m->blocks : per_sm_slots;
    double rounds = m->rows / (m->rows_per_block > 1 ? m->rows_per_block : 1); /* a block's rows at a time */
    /* a persistent grid's rounds are its waves: the last round is as full as the rows' remainder */
    bool rounds_tail = m->row_fetch && m->row_sync && resident > 0 && rounds > resident;
    double per_row = m->row_fetch ? fmax(d->latency_s, d->row_sync_s) : d->latency_s + d->row_sync_s;
    double first = m->row_fetch ? d->latency_s : 0;
    m->t_rows = m->row_sync && resident > 0 ? ceil(rounds / resident) * per_row + first : 0;
    double body = m->t_dram;
    m->bound = "dram";
    if (m->t_lat > body) body = m->t_lat, m->bound = "latency";
    if (m->t_rows > body) body = m->t_rows, m->bound = "rows";
    if (m->t_l2 > body) body = m->t_l2, m->bound = "l2";
    m->tail = nj_model_last_wave(m->t_dram, m->t_l2, m->t_lat, m->t_rows, rounds_tail ? rounds / resident : m->waves);
    body /= m->tail;
    double launch = m->dependent ? d->launch_dep_s : d->launch_s;
    if (body < launch) m->bound = "launch";
    m->time = launch + body;
}

/* ---- a pass ---- */

/* Runs of blocks whose last is short (nj_trace_kernel.period): a whole column walk's tiles of a batch
 * row (planner_column.c: ceil(ec / tile) a contiguous run of ec columns, the last one's columns what is
 * left), a channels-last image's tiles in the launches that walk them a block each (the cluster's tiles
 * are one traced unit). */
static void m_period(const nj_canon *c, const nj_plan_params *pp, const nj_launch *l, nj_trace_kernel *k)
{
    int64_t per = 0, full = 0, last = 0;
    if (pp->family == NJ_FAMILY_COLUMN && pp->split == 1 && l->lib == NJ_LIB_NONE && pp->tile > 0) {
        int64_t ec = c->axes[c->rank - 1].extent;
        per = (ec + pp->tile - 1) / pp->tile, full = pp->tile, last = ec - (per - 1) * pp->tile;
    } else if (pp->family == NJ_FAMILY_CHANNELS_LAST && l->lib == NJ_LIB_NONE && l->cluster <= 1 && pp->split > 1 &&
               c->rank == 4) {
        int64_t hw = c->axes[1].extent;
        per = pp->split, full = pp->tile, last = hw - (per - 1) * pp->tile;
    }
    /* a pipelined launch: two blocks a tile (its sums, its y), the tile pipe_piece finds (model_trace.c) */
    int64_t blocks = per * (pp->lag > 0 ? 2 : 1);
    if (per > 1 && full > 0 && last > 0 && last < full && l->row_mult == blocks && l->row_div == 1 && l->grid_x == 0) {
        k->period = (uint64_t)per;
        k->period_share = (double)last / (double)full;
    }
}

static nj_status m_pass(nj_context *ctx, nj_plan *plan, const nj_problem_desc *p, nj_pass pass,
                        const nj_model_opts *o, nj_trace *tr, mbufs *b, nj_model_pass *out)
{
    const nj_model_device *d = o->dev;
    nj_pass_info pi;
    NJ_TRY(nj_context_explain(ctx, p, pass, o->ptxas, &pi));
    const nj_plan_params *pp = &pi.params;
    out->pass = pass;
    out->family = pp->family;
    snprintf(out->plan_text, sizeof out->plan_text, "%s", pi.plan_text);
    out->ideal_bytes = m_ideal(p, pass);
    m_floor(&plan->canon, p, pass, d, out);
    m_res res[16];
    memset(res, 0, sizeof res);
    int32_t nres = o->ptxas ? m_ptxas(ctx, &pi, d->arch, plan->canon.dtype[NJ_OPD_PARAM], res, 16) : 0;
    out->nlaunch = pp->nlaunch;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        const nj_launch *l = &pp->launch[i];
        nj_model_launch *m = &out->launch[i];
        memset(m, 0, sizeof *m);
        m->lib = l->lib;
        m->regs = m->smem_static = m->spills = -1;
        for (int32_t k = 0; k < nres; k++)
            if (strcmp(res[k].kernel, l->kernel) == 0) {
                m->regs = res[k].regs, m->smem_static = res[k].smem, m->spills = res[k].spills;
                m->has_ptx = res[k].has_ptx;
                memcpy(m->ptx_ld, res[k].ld, sizeof m->ptx_ld);
                memcpy(m->ptx_st, res[k].st, sizeof m->ptx_st);
            }
        m->threads = l->block[0] * l->block[1] * l->block[2];
        uint32_t g[3] = {0, 0, 0};
        (void)nj_launch_grid(l, plan->rows, 0, g);
        m->blocks = (double)g[0] * g[1] * g[2];
        m_occupancy(m, d, l->shmem);
        m->family = pp->family;
        /* row-family kernels that hold whole rows: a block-per-row one pays a block reduction each row;
           so does a block per image (its barriers between the copy, the statistics and y), and a block
           of a cluster (its piece of a row) */
        bool staged = l->lib == NJ_LIB_NONE &&
                      (pp->family == NJ_FAMILY_IMAGE || pp->family == NJ_FAMILY_TILE || pp->family == NJ_FAMILY_CLUSTER);
        if (staged) { /* a block per image or tile of rows: its item is the "row" (a fixed grid walks
                         the tiles in turn: the tile backward's slots) */
            m->rows = l->grid_x > 0 && pp->rows_per_block > 0 ? ceil((double)plan->rows / pp->rows_per_block) : m->blocks;
            m->rows_per_block = 1;
            m->row_sync = 1;
        } else if (l->lib == NJ_LIB_NONE && pp->family == NJ_FAMILY_ROW && pp->split <= 1) {
            m->rows = (double)plan->rows;
            m->rows_per_block = pp->rows_per_block > 1 ? pp->rows_per_block : 1;
            /* a block a row, or row groups of whole warps (the backward's slots): the block's barriers
               each round of rows_per_block rows */
            m->row_sync = pp->rows_per_block <= 1 || l->block[0] / pp->rows_per_block > 32;
            m->row_fetch = pp->persist > 0;
        }
        m->regs_cache = pp->regs_cache, m->vec = pp->vec, m->chans = pp->chans, m->split = pp->split;
        m->unroll = pp->unroll;
        double resident = m->blocks < (double)m->blocks_sm * d->sms ? m->blocks : (double)m->blocks_sm * d->sms;
        bool main_launch = pp->role[NJ_ROLE_MAIN] - 1 == i;
        nj_trace_kernel k = {.resident = resident, .per_sm = resident / d->sms > 1 ? resident / d->sms : 1,
                             .reverse = pp->reverse && main_launch, .group = 1, .last_share = 1};
        if (m->row_fetch) { /* a persistent row walk: block c takes rows c, c + blocks, ... (a fixed grid:
                                rows_per_block at a time) */
            double steps = (double)plan->rows * (double)l->row_mult;
            k.items = ceil(steps / (double)(l->grid_x > 0 ? m->rows_per_block : l->row_div));
        }
        /* a grid of blocks of row_div rows (a tile of rows, row groups): the last block's share of them
           (a reversed walk gives the first block the last item: left whole) */
        if (l->grid_x == 0 && l->row_div > 1 && l->cluster <= 1 && !k.reverse) {
            double units = (double)plan->rows * (double)l->row_mult, nb = ceil(units / (double)l->row_div);
            if (nb == m->blocks) k.last_share = (units - (nb - 1) * (double)l->row_div) / (double)l->row_div;
        }
        m_period(&plan->canon, pp, l, &k);
        /* an image's parts, a block each, image-major (planner_image.c) */
        if (pp->family == NJ_FAMILY_IMAGE && main_launch && l->row_mult > 1) k.group = (uint32_t)l->row_mult;
        /* a split row's blocks going piece-major, the rows of a piece together: fwd_row.cu's normalizing
           launch, bwd_general.cu's sums launch when the column tiles' walk writes dx */
        bool fwd_pm = pp->family == NJ_FAMILY_ROW && pp->pass == NJ_PASS_FORWARD && pp->split > 1 && main_launch &&
                      pp->lag == 0;
        if (pp->lag > 0 && main_launch) { /* the pipelined split: twins traced together */
            k.pipe_total = (uint64_t)(m->blocks / 2); /* two blocks a piece (a split row's, an image's tile) */
            k.pipe_lag = (uint64_t)pp->lag;
        }
        bool bwd_pm = pp->family == NJ_FAMILY_GENERAL && pp->pass == NJ_PASS_BACKWARD && pp->split > 1 &&
                      pp->pgrad == NJ_PGRAD_TILES_DX && pp->role[NJ_ROLE_PART] - 1 == i;
        k.param_once = fwd_pm || bwd_pm;
        nj_trace_set_kernel(tr, l->kernel, &k);
        snprintf(m->t.kernel, sizeof m->t.kernel, "%s", l->kernel);
    }
    nj_pass_info_free(&pi);
    nj_trace_reset(tr);
    NJ_TRY(m_call(plan, p, pass, b));
    NJ_TRY(nj_trace_status(tr));
    int32_t nt;
    const nj_trace_launch *tl = nj_trace_launches(tr, &nt);
    /* launches ran in plan order, those of an empty grid skipped: match them by name in order */
    int32_t j = 0, ran = 0;
    for (int32_t i = 0; i < out->nlaunch; i++) {
        nj_model_launch *m = &out->launch[i];
        if (j < nt && strcmp(tl[j].kernel, m->t.kernel) == 0) m->t = nj_trace_scaled(&tl[j++]);
        else m->t.run = 0;
        nj_plan_params ilp_pp = {.family = m->family, .vec = m->vec, .regs_cache = m->regs_cache, .chans = m->chans,
                                 .split = m->split, .unroll = m->unroll, .pass = out->pass};
        m->ilp = m_ilp(&ilp_pp, m->t.kernel, m->lib, m->t.load_sites);
        if (m->rows > 0 && m->threads > 0) { /* the loads a thread issues for one row, all before its reduction */
            double n = m->t.lanes[NJ_TRACE_LD] / ((double)m->threads / m->rows_per_block * m->rows);
            m->ilp = n < 1 ? 1 : n > 8 ? 8 : n;
            /* an image's copy issues its loads in groups of the plan's unroll, each stored before the next */
            if ((m->family == NJ_FAMILY_IMAGE || m->family == NJ_FAMILY_TILE || m->family == NJ_FAMILY_CLUSTER) && m->unroll > 0 &&
                m->ilp > m->unroll)
                m->ilp = m->unroll;
        }
        /* the first launch of the pass waits for the stream; the later ones launch dependent (launch.c) */
        m->dependent = ran > 0 && ctx->dependent_launches && d->arch >= 90;
        if (m->blocks > 0) m_time(m, d), ran++;
        out->dram_bytes += m->t.dram_read + m->t.dram_write;
        out->time += m->time;
    }
    out->pct_copy = out->time > 0 ? out->ideal_bytes / out->time / d->copy_bw * 100 : 0;
    out->pct_same = out->time > 0 ? (d->launch_s + out->ideal_bytes / d->copy_bw) / out->time * 100 : 0;
    return NJ_OK;
}

nj_status nj_model_problem(nj_context *ctx, const nj_problem_desc *p, const nj_model_opts *o, nj_model_result *out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !p || !o || !o->dev || !out, NJ_ERR_NULL_POINTER, "nj_model_problem: NULL argument");
    NJ_RETURN_IF(nj_context_backend(ctx) != NJ_BACKEND_EMULATOR ||
                     !strstr(ctx->backend->ops->target(ctx->backend), "-count"),
                 NJ_ERR_BAD_ARGUMENT, "the model needs an emulator context whose kernels count (nj_model_context)");
    memset(out, 0, sizeof *out);
    uint32_t passes = o->passes ? o->passes : NJ_PASS_FORWARD | NJ_PASS_BACKWARD;
    nj_plan *plan;
    NJ_TRY(nj_plan_get(ctx, p, passes, &plan));
    out->numel = plan->numel;
    size_t ws = 0;
    for (uint32_t pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        size_t w = (passes & pass) ? nj_plan_workspace_size(plan, (nj_pass)pass) : 0;
        if (w > ws) ws = w;
    }
    mbufs b;
    memset(&b, 0, sizeof b);
    nj_trace *tr = NULL;
    nj_status s = m_alloc_all(p, ws, &b);
    if (s == NJ_OK) s = nj_trace_create(o->sample, o->dev->l1_bytes, o->dev->l2_bytes, &tr);
    /* the workspace and the statistics: what one launch stores there, a later one reads */
    for (int i = 0; s == NJ_OK && i < MB_N; i++)
        if (i == MB_WS || i == MB_MEAN || i == MB_RSTD) nj_trace_add_scratch(tr, b.p[i], b.bytes[i]);
        else if (i != MB_GAMMA && i != MB_BETA && i != MB_DGAMMA && i != MB_DBETA) nj_trace_add_buffer(tr, b.p[i], b.bytes[i], false);
    /* the parameters too: their reads are part of what a kernel moves */
    for (int i = MB_GAMMA; s == NJ_OK && i <= MB_DBETA; i++)
        nj_trace_add_buffer(tr, b.p[i], b.bytes[i], i == MB_GAMMA || i == MB_BETA);
    for (uint32_t pass = NJ_PASS_FORWARD; s == NJ_OK && pass <= NJ_PASS_BACKWARD; pass <<= 1)
        if (passes & pass) s = m_pass(ctx, plan, p, (nj_pass)pass, o, tr, &b, &out->pass[out->npass++]);
    nj_trace_destroy(tr);
    m_free(&b);
    return s;
}
