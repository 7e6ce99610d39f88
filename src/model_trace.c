/* Access counting for the performance model: the emulator's counter (emu_fibers.h). Kernels built for
 * counting report every access a lane makes; the ones inside registered buffers (global memory) are kept
 * for the cluster being run, then grouped into warp-level requests as the hardware would issue them: the
 * k-th access a lane makes at one instruction belongs with the k-th access of every other lane of its warp
 * at that instruction (fibers of a warp do not run in lockstep here, so program order is rebuilt per
 * instruction). A request touches a set of 32-byte sectors; the sectors feed a small L2 model: the first
 * touch of a sector is DRAM traffic, a later touch misses with nj_model_l2_miss of the bytes touched since
 * (inside one block: that block's bytes times the blocks resident at once; across blocks: the grid's,
 * scaled from the sample to the whole grid). */
#include "emu_fibers.h"
#include "model.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TR_MAX_SITES 128
#define TR_MAX_BUFS 16
#define TR_MAX_KERNELS 16
/* lane accesses traced a launch, about: the sample shrinks when the first cluster shows blocks this big
 * (CPU time: each costs a call and a record, ~50 ns) */
#define TR_BUDGET (1u << 20)

typedef struct tr_entry {
    uint64_t key;  /* warp << 50 | site << 43 | occurrence */
    uint64_t addr;
    uint32_t seq;
    uint8_t lane, bytes, store, pad;
} tr_entry;

typedef struct tr_sector {
    uint64_t sector; /* address / 32 + 1 (0: empty slot) */
    double at_global; /* traced bytes counter at the last touch */
    double at_clock;  /* the grid's bytes at the last touch (nj_trace.closed) */
    double at_block;  /* that block's bytes counter at the last touch */
    uint64_t cluster; /* cluster of the last touch, and its launch */
    int32_t launch;
    int32_t first_launch; /* launch of the first touch; -1 once another cluster of it touched the sector */
    int32_t first_store;
    uint64_t run_at; /* traced clusters of its launch when last touched (this one included) */
} tr_sector;

typedef struct tr_occ {
    uint32_t epoch, count;
} tr_occ;

struct nj_trace {
    nj_emu_counter counter;
    uint32_t sample;
    double l1_bytes, l2_bytes;
    nj_status status;
    struct {
        uintptr_t lo, hi;
        bool param, scratch;
    } buf[TR_MAX_BUFS];
    /* sectors of scratch buffers the traced clusters stored to this pass: [0, nwrote_sorted) from the
     * launches before this one, sorted; the running launch's appended after (tr_carried) */
    uint64_t *wrote;
    size_t nwrote, nwrote_sorted, wrotecap;
    double param_bytes; /* of the buffers added as parameters */
    int32_t nbuf;
    struct tr_res {
        char name[48];
        nj_trace_kernel k;
    } res[TR_MAX_KERNELS];
    int32_t nres;
    /* the launch being run */
    const nj_emu_launch *l;
    uint32_t nthr, nwarps;
    nj_trace_kernel k; /* its kernel's (nj_trace_set_kernel), per cluster where clusters hold several blocks */
    double scale;
    uint64_t first_accesses; /* global accesses of the launch's first traced cluster */
    uint64_t load_site_seen[TR_MAX_SITES / 64];
    uint64_t *pick;       /* clusters to trace after the first, ascending */
    size_t npick, pos;
    struct {
        const void *site;
        int32_t id;
    } site_slot[512]; /* instruction -> id, open addressing (fewer than TR_MAX_SITES in use) */
    int32_t nsite;
    tr_occ *occ; /* threads of a cluster * TR_MAX_SITES */
    size_t occ_cap;
    uint32_t epoch;
    tr_entry *e;
    size_t ne, ecap;
    /* sectors (open addressing) and the byte counters of the pass */
    tr_sector *sec;
    size_t nsec, seccap;
    double global_bytes, block_bytes;
    /* the grid's bytes brought into the L2, estimated: the finished launches' (each its traced bytes
     * times the clusters a traced cluster stands for), and the running launch's traced bytes */
    double closed, launch_fresh;
    nj_trace_launch launch[NJ_TRACE_MAX_LAUNCHES];
    int32_t nlaunch;
    /* each launch's clock at its start and end, whether its clusters were all resident at once, and its
     * traced clusters' mean new bytes (tr_carried) */
    struct tr_span {
        double start, end, cluster_bytes, global_at_start;
        bool one_wave;
    } span[NJ_TRACE_MAX_LAUNCHES];
};

static nj_trace_launch *tr_cur(nj_trace *t) { return t->nlaunch ? &t->launch[t->nlaunch - 1] : NULL; }

static void tr_fail(nj_trace *t)
{
    if (t->status == NJ_OK) t->status = NJ_ERR_OUT_OF_MEMORY;
}

static int tr_cmp_u64(const void *x, const void *y);

/* The stores of the launch before join the sorted sectors tr_carried searches. */
static void tr_wrote_close(nj_trace *t)
{
    if (t->nwrote == t->nwrote_sorted) return;
    qsort(t->wrote, t->nwrote, sizeof *t->wrote, tr_cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < t->nwrote; i++)
        if (u == 0 || t->wrote[u - 1] != t->wrote[i]) t->wrote[u++] = t->wrote[i];
    t->nwrote = t->nwrote_sorted = u;
}

/* Room for one more element in the growable array *p of *cap elements of elem bytes holding n (doubled,
 * from `first`); false, the trace failed, out of memory. */
static bool tr_room(nj_trace *t, void **p, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap) return true;
    size_t c = *cap ? 2 * *cap : first;
    void *q = realloc(*p, c * elem);
    if (!q) {
        tr_fail(t);
        return false;
    }
    *p = q;
    *cap = c;
    return true;
}

static void tr_launch(void *u, const nj_emu_launch *l)
{
    nj_trace *t = u;
    if (t->nlaunch) { /* the launch before, with its final scale */
        t->closed += t->launch_fresh * t->scale;
        struct tr_span *sp = &t->span[t->nlaunch - 1];
        const nj_trace_launch *prev = &t->launch[t->nlaunch - 1];
        sp->end = t->closed;
        sp->cluster_bytes = prev->run ? (t->global_bytes - sp->global_at_start) / (double)prev->run : 0;
    }
    tr_wrote_close(t);
    t->launch_fresh = 0;
    t->l = l;
    t->nthr = l->block[0] * l->block[1] * l->block[2];
    t->nwarps = (t->nthr + 31) / 32;
    t->nsite = 0;
    t->first_accesses = 0;
    free(t->pick);
    t->pick = NULL;
    memset(t->site_slot, 0, sizeof t->site_slot);
    memset(t->load_site_seen, 0, sizeof t->load_site_seen);
    t->k = (nj_trace_kernel){.resident = 1, .per_sm = 1, .group = 1, .last_share = 1};
    for (int32_t i = 0; i < t->nres; i++)
        if (strcmp(t->res[i].name, l->name) == 0) t->k = t->res[i].k;
    if (t->k.group < 1) t->k.group = 1;
    if (!(t->k.last_share > 0 && t->k.last_share < 1)) t->k.last_share = 1;
    size_t threads = (size_t)t->nthr * l->cluster[0] * l->cluster[1] * l->cluster[2];
    /* the traced unit is a cluster, its bytes those of all its blocks (one an SM where clusters hold a
     * row): the units resident at once are the blocks over the cluster's size, and an SM's L1 sees its
     * block's share of the unit's bytes. Counted a block at a time, the cluster family's dy, read again
     * by the block that read it, was 8 x 132 blocks' bytes away: a DRAM miss it is not. */
    double csize = (double)l->cluster[0] * l->cluster[1] * l->cluster[2];
    if (csize > 1) t->k.resident /= csize, t->k.per_sm /= csize;
    if (threads * TR_MAX_SITES > t->occ_cap) {
        free(t->occ);
        t->occ = calloc(threads * TR_MAX_SITES, sizeof *t->occ);
        t->occ_cap = t->occ ? threads * TR_MAX_SITES : 0;
        t->epoch = 0;
        if (!t->occ) tr_fail(t);
    }
    if (t->nlaunch == NJ_TRACE_MAX_LAUNCHES) {
        tr_fail(t);
        t->l = NULL;
        return;
    }
    nj_trace_launch *r = &t->launch[t->nlaunch++];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", l->name);
    memcpy(r->grid, l->grid, sizeof r->grid);
    memcpy(r->block, l->block, sizeof r->block);
    r->shmem = l->shmem;
    r->clusters = (uint64_t)(l->grid[0] / l->cluster[0]) * (l->grid[1] / l->cluster[1]) * (l->grid[2] / l->cluster[2]);
    /* the parameters come from DRAM at most once where they fit the L2's hit range, or where the blocks
     * that share a slice of them run side by side (nj_trace_kernel.param_once) */
    r->param_cap = t->k.param_once || t->param_bytes <= NJ_MODEL_L2_HIT * t->l2_bytes ? t->param_bytes : 0;
    r->work_total = t->k.items;
    r->last_share = t->k.last_share;
    if (t->k.period > 1 && t->k.period_share > 0 && t->k.period_share < 1 && t->k.items <= 0) {
        uint64_t runs = r->clusters / t->k.period, rest = r->clusters % t->k.period;
        r->period = t->k.period;
        r->period_share = t->k.period_share;
        r->work_total = (double)runs * ((double)t->k.period - 1 + t->k.period_share) + (double)rest;
    }
    t->scale = 1;
    t->span[t->nlaunch - 1] = (struct tr_span){.start = t->closed, .end = t->closed, .global_at_start = t->global_bytes,
                                               .one_wave = (double)r->clusters <= t->k.resident};
}

/* Block b's piece of a pipelined launch, and (norm, where not NULL) whether b normalizes it (b < 2 * total). */
static uint64_t pipe_piece(uint64_t b, uint64_t total, uint64_t lag, bool *norm)
{
    if (lag > total) lag = total;
    /* block b: the sums of piece b (b < lag); then, alternately, piece m / 2's normalization and piece
       lag + m / 2's sums (m = b - lag); the last lag blocks normalize the last lag pieces */
    if (norm) *norm = b >= lag && (b >= 2 * total - lag || (b - lag) % 2 == 0);
    uint64_t m = b - lag;
    return b < lag ? b : b >= 2 * total - lag ? b - total : m % 2 == 0 ? m / 2 : lag + m / 2;
}

uint64_t nj_pipe_twin(uint64_t b, uint64_t total, uint64_t lag)
{
    if (b >= 2 * total) return UINT64_MAX;
    bool norm;
    uint64_t q = pipe_piece(b, total, lag, &norm);
    if (lag > total) lag = total;
    if (norm) return q < lag ? q : 2 * q - lag + 1;
    return q < total - lag ? lag + 2 * q : q + total;
}

static bool tr_twins(const nj_trace *t, uint64_t a, uint64_t b)
{
    return t->k.pipe_total && a != b && nj_pipe_twin(a, t->k.pipe_total, t->k.pipe_lag) == b;
}

/* Appends group c's clusters (cluster 0 runs anyway, unless mirrored). */
static void tr_pick_group(nj_trace *t, uint64_t c, uint64_t g, uint64_t n)
{
    for (uint64_t u = c * g; u < c * g + g && u < n; u++)
        if (u > 0 || t->k.reverse) t->pick[t->npick++] = u;
}

/* The clusters to trace: the first, the last, and points of the golden-ratio sequence in between (evenly
 * spread like a regular stride, but without aliasing with the periodic structure of a grid: a stride that
 * is a multiple of the tiles an image would trace the same tile every time). A launch that takes its
 * items last first (P.reverse: cluster c, item n - 1 - c) traces the mirror images n - 1 - c, so that it
 * traces the items the launch before it traced, and the L2 model sees how recently that one touched
 * them. A launch whose neighbouring clusters share sectors (an image's parts: nj_trace_kernel.group) traces
 * whole groups of them, so that a shared sector counts once, as the L2 serves the second reader that
 * runs beside the first. Chosen after the first cluster ran, when its size tells how many the access
 * budget allows. */
static void tr_pick(nj_trace *t, uint64_t n)
{
    uint64_t want = t->sample, g = t->k.group > 1 && t->k.group < n ? t->k.group : 1, ng = (n + g - 1) / g;
    if (t->first_accesses > 0) {
        uint64_t fit = TR_BUDGET / t->first_accesses;
        if (fit < 2 * g) fit = 2 * g;
        if (fit < want) want = fit;
    }
    want = want / g < 2 ? 2 : want / g; /* groups */
    free(t->pick);
    t->pick = malloc(2 * (((size_t)want + 1) * g + 1) * sizeof *t->pick); /* room for pipe twins */
    t->npick = t->pos = 0;
    if (!t->pick) {
        tr_fail(t);
        return;
    }
    if (g > 1) tr_pick_group(t, 0, g, n); /* the rest of the first group */
    tr_pick_group(t, ng - 1, g, n);
    double x = 0.5;
    for (uint64_t k = 0, got = 1; got < want && k < 4 * want; k++) {
        x += 0.6180339887498949;
        x -= (double)(uint64_t)x;
        uint64_t c = 1 + (uint64_t)(x * (double)(ng - 2));
        if (c >= ng - 1) continue;
        tr_pick_group(t, c, g, n);
        got++;
    }
    if (t->k.reverse) { /* the mirror images (the last mirrors the first cluster, traced before the picks) */
        for (size_t i = 0; i < t->npick; i++) t->pick[i] = n - 1 - t->pick[i];
        t->pick[t->npick++] = n - 1;
    }
    if (t->k.pipe_total) { /* a pipelined launch: each traced block's twin, cluster 0's included */
        size_t np = t->npick;
        t->pick[t->npick++] = nj_pipe_twin(0, t->k.pipe_total, t->k.pipe_lag);
        for (size_t i = 0; i < np; i++) {
            uint64_t w = nj_pipe_twin(t->pick[i], t->k.pipe_total, t->k.pipe_lag);
            if (w < n) t->pick[t->npick++] = w;
        }
    }
    qsort(t->pick, (size_t)t->npick, sizeof *t->pick, tr_cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < t->npick; i++)
        if (u == 0 || t->pick[u - 1] != t->pick[i]) t->pick[u++] = t->pick[i];
    t->npick = u;
}

static bool tr_want(void *u, uint64_t c, uint64_t n)
{
    nj_trace *t = u;
    if (!t->l) return false;
    t->epoch++;
    t->ne = 0;
    t->block_bytes = 0;
    if (c == 0) return true;
    if (n <= t->sample && (t->first_accesses == 0 || n * t->first_accesses <= TR_BUDGET)) return true;
    if (c == 1 || !t->pick) tr_pick(t, n);
    while (t->pos < t->npick && t->pick[t->pos] < c) t->pos++;
    return t->pos < t->npick && t->pick[t->pos] == c;
}

static int32_t tr_site(nj_trace *t, const void *site)
{
    size_t h = ((uintptr_t)site * 0x9E3779B97F4A7C15ull) >> 55; /* 512 slots */
    for (;; h = (h + 1) & 511) {
        if (t->site_slot[h].site == site) return t->site_slot[h].id;
        if (!t->site_slot[h].site) break;
    }
    int32_t id = t->nsite < TR_MAX_SITES ? t->nsite++ : TR_MAX_SITES - 1; /* past the ids: share the last */
    t->site_slot[h].site = site;
    t->site_slot[h].id = id;
    return id;
}

static void tr_access(void *u, uint32_t thread, const void *p, unsigned bytes, int store, const void *site)
{
    nj_trace *t = u;
    uintptr_t a = (uintptr_t)p;
    int32_t i = 0;
    while (i < t->nbuf && !(a >= t->buf[i].lo && a < t->buf[i].hi)) i++;
    if (i == t->nbuf || !t->l || !t->occ) return;
    if (!tr_room(t, (void **)&t->e, &t->ecap, t->ne, sizeof *t->e, 1u << 16)) return;
    int32_t s = tr_site(t, site);
    tr_occ *o = &t->occ[(size_t)thread * TR_MAX_SITES + (size_t)s];
    if (o->epoch != t->epoch) o->epoch = t->epoch, o->count = 0;
    uint32_t in_block = thread % t->nthr;
    uint64_t warp = (uint64_t)(thread / t->nthr) * t->nwarps + in_block / 32;
    tr_entry *e = &t->e[t->ne];
    e->key = warp << 50 | (uint64_t)s << 43 | (o->count++ & ((1ull << 43) - 1));
    e->addr = a;
    e->seq = (uint32_t)t->ne++;
    e->lane = (uint8_t)(in_block % 32);
    e->bytes = (uint8_t)(bytes > 255 ? 255 : bytes);
    e->store = (uint8_t)(store != 0);
}

static int tr_cmp_entry(const void *x, const void *y)
{
    const tr_entry *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static int tr_cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* ---- the sector table ---- */

static uint64_t tr_hash(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static bool tr_sec_grow(nj_trace *t)
{
    size_t cap = t->seccap ? 2 * t->seccap : 1u << 16;
    tr_sector *n = calloc(cap, sizeof *n);
    if (!n) return false;
    for (size_t i = 0; i < t->seccap; i++) {
        if (!t->sec[i].sector) continue;
        size_t j = tr_hash(t->sec[i].sector) & (cap - 1);
        while (n[j].sector) j = (j + 1) & (cap - 1);
        n[j] = t->sec[i];
    }
    free(t->sec);
    t->sec = n;
    t->seccap = cap;
    return true;
}

/* Where sector s is in the table, or the empty slot it would take. */
static size_t tr_slot(const nj_trace *t, uint64_t s)
{
    size_t j = tr_hash(s + 1) & (t->seccap - 1);
    while (t->sec[j].sector && t->sec[j].sector != s + 1) j = (j + 1) & (t->seccap - 1);
    return j;
}

/* Sector s's entry, NULL when it is not in the table (never inserts, never grows it). */
static const tr_sector *tr_sec_find(const nj_trace *t, uint64_t s)
{
    if (!t->seccap) return NULL;
    const tr_sector *x = &t->sec[tr_slot(t, s)];
    return x->sector ? x : NULL;
}

/* The slot of sector s; *fresh when it was not there (then inserted). NULL out of memory. */
static tr_sector *tr_sec(nj_trace *t, uint64_t s, bool *fresh)
{
    if (2 * (t->nsec + 1) > t->seccap && !tr_sec_grow(t)) return NULL;
    size_t j = tr_slot(t, s);
    *fresh = !t->sec[j].sector;
    if (*fresh) {
        t->sec[j].sector = s + 1;
        t->nsec++;
    }
    return &t->sec[j];
}

/* The grid's bytes brought into the L2 so far (the clock of reuse distances across launches: an LRU
 * cache's stack distance counts the distinct bytes touched since, and a sector touched again since
 * counts where it had to be fetched again): the running launch's traced bytes times the clusters each
 * traced one stands for, planned once the picks are known (the scale seen so far is the grid over one
 * cluster at the first). */
static double tr_clock(const nj_trace *t, const nj_trace_launch *r)
{
    /* traced: cluster 0, always, and the picks (a reversed launch's include 0) */
    double traced = t->pick ? (double)t->npick + (t->npick > 0 && t->pick[0] == 0 ? 0 : 1) : 0;
    double n = (double)r->clusters, rep = t->pick ? n / traced : n <= t->sample ? 1 : n / (t->sample + 1);
    return t->closed + t->launch_fresh * (rep > 1 ? rep : 1);
}

/* Whether a sector lies in a parameter buffer. */
static bool tr_param(const nj_trace *t, uint64_t sector)
{
    uintptr_t a = (uintptr_t)sector * 32;
    for (int32_t i = 0; i < t->nbuf; i++)
        if (t->buf[i].param && a + 32 > t->buf[i].lo && a < t->buf[i].hi) return true;
    return false;
}

/* The scratch buffer holding sector s, or -1. */
static int32_t tr_scratch(const nj_trace *t, uint64_t sector)
{
    uintptr_t a = (uintptr_t)sector * 32;
    for (int32_t i = 0; i < t->nbuf; i++)
        if (t->buf[i].scratch && a >= t->buf[i].lo && a < t->buf[i].hi) return i;
    return -1;
}

static void tr_wrote_add(nj_trace *t, uint64_t sector)
{
    if (tr_room(t, (void **)&t->wrote, &t->wrotecap, t->nwrote, sizeof *t->wrote, 1u << 12))
        t->wrote[t->nwrote++] = sector;
}

/* A first load of a scratch sector (the workspace, the statistics) in a launch after the first reads what
 * an earlier launch of the pass stored there, mostly blocks the sample did not run: its miss is that of
 * the nearest sector of the buffer a traced block stored in an earlier launch, by the bytes brought in
 * since (the row backward's slots store their partial rows last, and the column sum finds them in the
 * L2; tiles store theirs as the launch goes). Before, every such read was a first touch: DRAM. -1: no
 * such store (an input, as the backward's statistics: DRAM). */
static double tr_carried(nj_trace *t, const nj_trace_launch *r, uint64_t sector)
{
    int32_t b = tr_scratch(t, sector);
    if (b < 0 || t->nwrote_sorted == 0) return -1;
    size_t lo = 0, hi = t->nwrote_sorted; /* first index with wrote[i] >= sector */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->wrote[mid] < sector) lo = mid + 1;
        else hi = mid;
    }
    /* the neighbours below and above it, of the same buffer; the nearer */
    bool below = lo > 0 && tr_scratch(t, t->wrote[lo - 1]) == b;
    bool above = lo < t->nwrote_sorted && tr_scratch(t, t->wrote[lo]) == b;
    if (!below && !above) return -1;
    uint64_t best = !above || (below && sector - t->wrote[lo - 1] <= t->wrote[lo] - sector) ? t->wrote[lo - 1] : t->wrote[lo];
    const tr_sector *y = tr_sec_find(t, best);
    if (!y) return -1; /* stored sectors are in the table: not reached */
    /* the trace runs a launch's clusters one after another, as waves do; but where they were all resident
     * at once (the backward's slots) they went side by side: a store a block made at its end happened
     * at the launch's end, not at the traced block's place in the grid */
    double at = y->at_clock;
    const struct tr_span *sp = y->launch >= 0 && y->launch < t->nlaunch - 1 ? &t->span[y->launch] : NULL;
    if (sp && sp->one_wave && sp->cluster_bytes > 0) {
        double f = y->at_block / sp->cluster_bytes;
        at = sp->start + (f < 1 ? f : 1) * (sp->end - sp->start);
    }
    return nj_model_l2_miss(tr_clock(t, r) - at, t->l2_bytes);
}

/* One request's sectors through the L2 model. */
static void tr_sectors(nj_trace *t, nj_trace_launch *r, uint64_t cluster, const uint64_t *s, int32_t n, int store)
{
    for (int32_t i = 0; i < n; i++) {
        bool fresh;
        tr_sector *x = tr_sec(t, s[i], &fresh);
        if (!x) {
            tr_fail(t);
            return;
        }
        double miss = 1, l1 = 0;
        bool carried = false;
        if (fresh) {
            double cm = store || t->nlaunch < 2 ? -1 : tr_carried(t, r, s[i]);
            carried = cm >= 0;
            if (carried) miss = cm;
            t->global_bytes += 32;
            t->launch_fresh += 32 * miss;
            t->block_bytes += 32;
            r->unique_bytes += 32;
            /* a carried sector's first touch was a store of the launch before, not once this launch */
            x->first_launch = carried ? -1 : t->nlaunch - 1;
            x->first_store = store;
        } else {
            /* shared by the clusters of a launch (the parameters): its first touch happened once in the
             * grid, not once a traced cluster, so it leaves the part that scales with the sample; one
             * that neighbours of a traced group share (nj_trace_kernel.group) is a sector of every group */
            bool group = (t->k.group > 1 && x->cluster / t->k.group == cluster / t->k.group) ||
                         tr_twins(t, cluster, x->cluster);
            if (x->first_launch == t->nlaunch - 1 && x->cluster != cluster && !group) {
                if (x->first_store) r->dram_write -= 32, r->dram_write_once += 32;
                else if (tr_param(t, s[i])) r->dram_read_param -= 32, r->dram_read_once += 32;
                else r->dram_read -= 32, r->dram_read_once += 32;
                r->unique_bytes -= 32, r->unique_once += 32;
                x->first_launch = -1;
            }
            /* the same block: its own bytes since, times the blocks resident with it. Another block of the
             * same launch: a sector several traced blocks share (a parameter, a statistic) is touched by
             * every resident block in turn, so the bytes between two touches are about one block's new
             * bytes. A later launch: the grid's new bytes since, scaled from the sample. */
            bool this_launch = x->launch == t->nlaunch - 1, same = this_launch && x->cluster == cluster;
            double d;
            if (same && !store) { /* a load the block makes again: its SM's L1 first */
                double hit = 1 - nj_model_l2_miss((t->block_bytes - x->at_block) * t->k.per_sm, t->l1_bytes);
                r->l1_hit += 32 * hit;
                l1 = hit;
            }
            if (same) d = (t->block_bytes - x->at_block) * t->k.resident;
            else if (this_launch && tr_twins(t, cluster, x->cluster)) /* the grid's blocks between the twins */
                d = t->launch_fresh / (double)(r->run > 0 ? r->run : 1) * (double)(cluster - x->cluster);
            else if (this_launch)
                d = (t->global_bytes - x->at_global) / (double)(r->run > x->run_at ? r->run - x->run_at : 1);
            else d = tr_clock(t, r) - x->at_clock;
            miss = nj_model_l2_miss(d, t->l2_bytes);
        }
        /* what the access brings into the L2 (all of it on a miss) moves the clock of reuse distances:
         * a re-read that hits adds no new bytes, one that misses does */
        if (!fresh) t->launch_fresh += 32 * miss * (store ? 1 : 1 - l1);
        if (store) r->dram_write += 32 * miss;
        else if (fresh && !carried && tr_param(t, s[i])) r->dram_read_param += 32;
        else r->dram_read += 32 * miss * (1 - l1);
        if (store && fresh && tr_scratch(t, s[i]) >= 0) tr_wrote_add(t, s[i]);
        x->at_global = t->global_bytes;
        x->at_clock = tr_clock(t, r);
        x->at_block = t->block_bytes;
        x->cluster = cluster;
        x->launch = t->nlaunch - 1;
        x->run_at = r->run;
    }
}

static int32_t tr_width_index(unsigned bytes)
{
    return bytes >= 16 ? 4 : bytes >= 8 ? 3 : bytes >= 4 ? 2 : bytes >= 2 ? 1 : 0;
}

/* Bytes the lanes of a request asked for, each byte once (lanes reading one address share it). */
static double tr_distinct_bytes(const tr_entry *e, uint32_t n)
{
    uint64_t span[64][2];
    uint32_t m = n < 64 ? n : 64;
    for (uint32_t j = 0; j < m; j++) span[j][0] = e[j].addr, span[j][1] = e[j].addr + e[j].bytes;
    for (uint32_t j = 1; j < m; j++) /* insertion sort by start: at most 64 lanes */
        for (uint32_t k = j; k > 0 && span[k][0] < span[k - 1][0]; k--) {
            uint64_t a = span[k][0], b = span[k][1];
            span[k][0] = span[k - 1][0], span[k][1] = span[k - 1][1];
            span[k - 1][0] = a, span[k - 1][1] = b;
        }
    double total = 0;
    uint64_t end = 0;
    for (uint32_t j = 0; j < m; j++) {
        uint64_t lo = span[j][0] > end ? span[j][0] : end;
        if (span[j][1] > lo) total += (double)(span[j][1] - lo);
        if (span[j][1] > end) end = span[j][1];
    }
    return total;
}

typedef struct tr_req {
    uint32_t first, n; /* entries [first, first + n) */
    uint32_t seq;      /* issue order: the first lane's */
} tr_req;

static int tr_cmp_req(const void *x, const void *y)
{
    const tr_req *a = x, *b = y;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Groups the cluster's entries into requests (sorted by instruction and occurrence), then plays the
 * requests in issue order through the sector model. */
static void tr_cluster_done(void *u, uint64_t cluster)
{
    nj_trace *t = u;
    nj_trace_launch *r = tr_cur(t);
    if (!r || !t->l) return;
    r->run++;
    if (cluster + 1 == r->clusters) r->last_run = 1;
    if (r->run == 1) t->first_accesses = t->ne ? t->ne : 1;
    t->scale = r->run ? (double)r->clusters / (double)r->run : 1;
    if (r->period > 1) { /* runs of period clusters, the last of each short (a reversed walk: its mirror) */
        uint64_t item = t->k.reverse ? r->clusters - 1 - cluster : cluster;
        if (t->k.pipe_total) item = pipe_piece(cluster, t->k.pipe_total, t->k.pipe_lag, NULL); /* its tile */
        bool short_one = item % r->period == r->period - 1 && item / r->period < r->clusters / r->period;
        r->work_run += short_one ? r->period_share : 1;
        t->scale = r->work_total / r->work_run;
    } else if (r->work_total > 0) { /* a grid-stride walk: cluster c takes items c, c + clusters, ... */
        double c = (double)cluster, n = (double)r->clusters;
        r->work_run += c < r->work_total ? ceil((r->work_total - c) / n) : 0;
        if (r->work_run > 0) t->scale = r->work_total / r->work_run;
    }
    if (t->ne == 0) return;
    qsort(t->e, t->ne, sizeof *t->e, tr_cmp_entry);
    size_t nreq = 0;
    for (size_t i = 0; i < t->ne; i++)
        if (i == 0 || t->e[i].key != t->e[i - 1].key) nreq++;
    tr_req *q = malloc(nreq * sizeof *q);
    if (!q) {
        tr_fail(t);
        return;
    }
    nreq = 0;
    for (size_t i = 0; i < t->ne; i++) {
        if (i == 0 || t->e[i].key != t->e[i - 1].key) q[nreq++] = (tr_req){(uint32_t)i, 0, t->e[i].seq};
        q[nreq - 1].n++;
    }
    qsort(q, nreq, sizeof *q, tr_cmp_req);
    uint64_t s[128];
    for (size_t k = 0; k < nreq; k++) {
        const tr_entry *e = &t->e[q[k].first];
        int store = e->store;
        int32_t ns = 0;
        for (uint32_t j = 0; j < q[k].n; j++) {
            r->width[store][tr_width_index(e[j].bytes)] += 1;
            for (uint64_t a = e[j].addr / 32; a <= (e[j].addr + e[j].bytes - 1) / 32 && ns < 128; a++) s[ns++] = a;
        }
        r->bytes[store] += tr_distinct_bytes(e, q[k].n);
        qsort(s, (size_t)ns, sizeof s[0], tr_cmp_u64);
        int32_t nu = 0;
        for (int32_t j = 0; j < ns; j++)
            if (nu == 0 || s[nu - 1] != s[j]) s[nu++] = s[j];
        if (!store) {
            uint32_t site = (uint32_t)(e->key >> 43 & 127);
            if (!(t->load_site_seen[site / 64] >> (site % 64) & 1)) r->load_sites++;
            t->load_site_seen[site / 64] |= 1ull << (site % 64);
        }
        r->req[store] += 1;
        r->lanes[store] += q[k].n;
        r->sectors[store] += nu;
        tr_sectors(t, r, cluster, s, nu, store);
    }
    free(q);
}

/* ---- public side ---- */

nj_status nj_trace_create(uint32_t sample, double l1_bytes, double l2_bytes, nj_trace **out)
{
    *out = NULL;
    nj_trace *t = calloc(1, sizeof *t);
    NJ_RETURN_IF(!t, NJ_ERR_OUT_OF_MEMORY, "model trace");
    t->sample = sample ? sample : 32;
    t->l2_bytes = l2_bytes;
    t->l1_bytes = l1_bytes;
    t->counter = (nj_emu_counter){t, tr_launch, tr_want, tr_access, tr_cluster_done};
    nj_emu_set_counter(&t->counter);
    *out = t;
    return NJ_OK;
}

void nj_trace_destroy(nj_trace *t)
{
    if (!t) return;
    nj_emu_set_counter(NULL);
    free(t->occ);
    free(t->e);
    free(t->sec);
    free(t->pick);
    free(t->wrote);
    free(t);
}

void nj_trace_add_buffer(nj_trace *t, const void *p, size_t bytes, bool param)
{
    if (!p || !bytes || t->nbuf == TR_MAX_BUFS) return;
    t->buf[t->nbuf].lo = (uintptr_t)p;
    t->buf[t->nbuf].hi = (uintptr_t)p + bytes;
    t->buf[t->nbuf].param = param;
    t->buf[t->nbuf].scratch = false;
    if (param) t->param_bytes += (double)bytes;
    t->nbuf++;
}

void nj_trace_add_scratch(nj_trace *t, const void *p, size_t bytes)
{
    nj_trace_add_buffer(t, p, bytes, false);
    if (t->nbuf > 0 && t->buf[t->nbuf - 1].lo == (uintptr_t)p) t->buf[t->nbuf - 1].scratch = true;
}

/* The kernel's entry of res[], added with the defaults (NULL when the table is full). */
void nj_trace_set_kernel(nj_trace *t, const char *kernel, const nj_trace_kernel *k)
{
    int32_t i = 0;
    while (i < t->nres && strcmp(t->res[i].name, kernel) != 0) i++;
    if (i == TR_MAX_KERNELS) return;
    if (i == t->nres) snprintf(t->res[t->nres++].name, sizeof t->res[0].name, "%s", kernel);
    t->res[i].k = *k;
}

void nj_trace_reset(nj_trace *t)
{
    t->nlaunch = 0;
    t->nsec = 0;
    if (t->sec) memset(t->sec, 0, t->seccap * sizeof *t->sec);
    t->global_bytes = t->block_bytes = 0;
    t->closed = t->launch_fresh = 0;
    t->nwrote = t->nwrote_sorted = 0;
    t->l = NULL;
}

const nj_trace_launch *nj_trace_launches(const nj_trace *t, int32_t *n)
{
    *n = t->nlaunch;
    return t->launch;
}

nj_status nj_trace_status(const nj_trace *t)
{
    return t->status == NJ_OK ? NJ_OK : nj_fail(t->status, "model trace: out of memory counting accesses");
}

nj_trace_launch nj_trace_scaled(const nj_trace_launch *l)
{
    nj_trace_launch r = *l;
    double f = l->run ? (double)l->clusters / (double)l->run : 0;
    /* a last cluster that does part of a full one's work (it always runs) counts as that part */
    if (l->run && l->last_run && l->last_share < 1)
        f = ((double)l->clusters - 1 + l->last_share) / ((double)l->run - 1 + l->last_share);
    if (l->work_total > 0) f = l->work_run > 0 ? l->work_total / l->work_run : 0;
    for (int d = 0; d < 2; d++) {
        r.req[d] *= f, r.lanes[d] *= f, r.bytes[d] *= f, r.sectors[d] *= f;
        for (int w = 0; w < NJ_TRACE_WIDTHS; w++) r.width[d][w] *= f;
    }
    r.l1_hit *= f;
    double param = r.dram_read_param * f;
    if (r.param_cap > 0 && param > r.param_cap) param = r.param_cap;
    r.dram_read = r.dram_read * f + r.dram_read_once + param, r.dram_write = r.dram_write * f + r.dram_write_once;
    r.dram_read_param = 0;
    r.unique_bytes = r.unique_bytes * f + r.unique_once;
    r.dram_read_once = r.dram_write_once = r.unique_once = 0;
    return r;
}
