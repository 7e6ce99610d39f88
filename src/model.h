/* The performance model (docs/model.md): for every launch of every pass of a problem, what a perfect kernel
 * moves, what the plan moves (from the generated kernel's own accesses, counted by the emulator), how
 * those accesses coalesce, the occupancy ptxas allows, and an estimated time on a named device.
 *   model_devices.c  the device tables and every constant of the model, with their sources
 *   model_trace.c    access counting: the emulator's accesses grouped per warp request, sectors, DRAM bytes
 *   model.c          a problem's passes: plan, ptxas report, traced run, the time estimate
 *   model_report.c   the text report and the baseline lines
 *   model_goals.c    each pass against issue 17's goals (bytes, sectors, widths, loads in flight, ...)
 * The tool (tools/cmd_model.c) and the tests use this header; it is not public API. */
#ifndef NJ_MODEL_H
#define NJ_MODEL_H

#include "internal.h"
#include "planner.h"

/* ---- devices and constants (model_devices.c) ---- */
typedef struct nj_model_device {
    const char *name;      /* "H200" */
    int32_t arch;          /* 90 */
    int32_t sms;
    double peak_bw;        /* DRAM bytes/s, data sheet */
    double copy_bw;        /* bytes/s a large device-to-device copy reaches (the 100% of "% of copy") */
    double l1_bytes;       /* L1 data cache an SM left beside shared memory (global loads cache there) */
    double l2_bytes;       /* last-level cache */
    double l2_bw;          /* bytes/s of L2 sector traffic the SMs can draw */
    double latency_s;      /* DRAM load latency under load (Little's law) */
    double l2_latency_s;   /* load latency of an L2 hit under load */
    double launch_s;       /* fixed cost a kernel adds in a stream of launches (launch, ramp, drain) */
    double launch_dep_s;   /* the same for a dependent launch (a pass's later kernels on sm_90: the launch
                              overlaps the kernel before it; the ramp after its wait stays) */
    double row_sync_s;     /* a block-per-row kernel's reduction and barriers a row, beyond the load latency */
    int32_t threads_sm, blocks_sm, regs_sm, smem_sm; /* occupancy limits an SM */
    const char *source;    /* where the figures come from */
} nj_model_device;

/* NULL when unknown (case-insensitive name). */
NJ_HIDDEN const nj_model_device *nj_model_device_find(const char *name);
NJ_HIDDEN const nj_model_device *nj_model_device_at(int32_t i); /* NULL past the last */

/* Fraction of a re-touched sector that misses the L2: 0 while the bytes touched since its last use stay
 * under NJ_MODEL_L2_HIT of the cache, 1 past NJ_MODEL_L2_MISS, linear between (a streaming LRU-like cache). */
#define NJ_MODEL_L2_HIT 0.5
#define NJ_MODEL_L2_MISS 1.5
NJ_HIDDEN double nj_model_l2_miss(double distance, double l2_bytes);

/* Tail efficiency (what a launch's bound term is divided by) of w waves (or persistent rounds) whose
 * whole-launch terms are t_dram, t_l2, t_lat and t_rows: the last, partial wave moves its share of the
 * bytes, but waits a full wave's latency (Little's law over its share of the loads in flight). */
NJ_HIDDEN double nj_model_last_wave(double t_dram, double t_l2, double t_lat, double t_rows, double w);

/* ---- access counting (model_trace.c) ---- */
enum { NJ_TRACE_LD = 0, NJ_TRACE_ST = 1, NJ_TRACE_WIDTHS = 5 }; /* widths 1, 2, 4, 8, 16 bytes */

typedef struct nj_trace_launch {
    char kernel[48];
    uint32_t grid[3], block[3], shmem;
    uint64_t clusters, run;   /* clusters of the grid, clusters emulated (figures below: of those run;
                                 nj_trace_scaled multiplies them by clusters / run) */
    double req[2];            /* warp-level requests, loads and stores */
    double lanes[2];          /* lane accesses */
    double bytes[2];          /* bytes the lanes asked for */
    double sectors[2];        /* 32-byte sectors the requests touched (sum over requests) */
    double width[2][NJ_TRACE_WIDTHS]; /* lane accesses by width */
    double dram_read, dram_write;     /* DRAM bytes under the L2 model */
    double l1_hit;            /* load bytes a block reads again while its SM's L1 still holds them */
    double unique_bytes;      /* distinct sectors touched this launch, in bytes */
    double dram_read_once, dram_write_once, unique_once; /* of sectors several clusters share: not scaled */
    /* first reads of the parameters (buffers added as shared): scaled, then capped at the parameters'
     * bytes where those fit in half the L2 (every block reads the same gamma, so the grid fetches each
     * sector once, whichever traced blocks saw it first) */
    double dram_read_param, param_cap;
    int32_t load_sites;       /* distinct load instructions that reached global memory */
    /* a grid-stride walk over work_total items (nj_trace_kernel.items): items the traced clusters took;
     * nj_trace_scaled then scales by work_total / work_run, not by clusters (the clusters of an even
     * persistent grid take one item more or fewer) */
    double work_run, work_total;
    /* a grid in runs of `period` clusters whose last does period_share of a full one's work
     * (nj_trace_kernel.period): work_total and work_run count that share */
    uint64_t period;
    double period_share;
    /* the share of a full cluster's work that the grid's last cluster does (nj_trace_kernel; 1:
     * a whole one), and whether it ran: nj_trace_scaled then counts it as that share of a cluster */
    double last_share;
    int32_t last_run;
} nj_trace_launch;

#define NJ_TRACE_MAX_LAUNCHES 16
typedef struct nj_trace nj_trace;
/* A collector: sample = clusters emulated a launch at most (evenly spaced, first and last included);
 * l2_bytes for the DRAM model. It becomes the emulator's counter until destroyed. */
NJ_HIDDEN nj_status nj_trace_create(uint32_t sample, double l1_bytes, double l2_bytes, nj_trace **out);
NJ_HIDDEN void nj_trace_destroy(nj_trace *t);
/* Only accesses inside registered buffers count (the tensors and the workspace). */
NJ_HIDDEN void nj_trace_add_buffer(nj_trace *t, const void *p, size_t bytes, bool param);
/* A buffer a pass's launches store to and later launches read (the workspace, the statistics): a first
 * read of one of its sectors in a later launch takes the L2 miss of the nearest sector a traced block
 * stored (model_trace.c: tr_carried), not a DRAM first touch. */
NJ_HIDDEN void nj_trace_add_scratch(nj_trace *t, const void *p, size_t bytes);
/* What the model knows of a kernel that its trace cannot see, set before each launch (model.c). */
typedef struct nj_trace_kernel {
    double resident, per_sm; /* blocks resident on the whole device and on one SM at once (reuse
                                distances in a block) */
    double items;            /* work items its clusters walk with a grid stride (item c, c + clusters,
                                ...); 0: none */
    bool reverse;            /* takes its items last first (P.reverse): traces the mirror images */
    /* its blocks that read one slice of the parameters run side by side (the split rows' normalizing
     * launch, piece-major): however big, the parameters come from DRAM once */
    bool param_once;
    /* runs of this many neighbouring clusters share sectors (an image's parts: every channel row's
     * parts meet in a sector) and run side by side: traced a whole run at a time (1: none) */
    uint32_t group;
    /* the share (0 to 1) of a full cluster's work the grid's last cluster does (a block of rows whose
     * last block has fewer): the sample, which always runs it, counts it as that share */
    double last_share;
    /* the grid's clusters come in runs of `period` whose last does period_share (0 to 1) of a full
     * cluster's work (a batch row's tiles, the last short: the column family's columns, a channels-last
     * image's pixels): the sample counts each traced cluster as its share, so that a golden-ratio pick
     * that catches more or fewer short ones than their proportion does not skew the scaled figures
     * (LayerNorm f16 over the C of NCHW 56 x 56: 13 tiles a row, the last of 64 of 256 columns; 9 of 728
     * blocks traced had made the pass 0.97x the bytes it must move). 0: none */
    uint64_t period;
    double period_share;
    /* a pipelined launch (P.lag, fwd_row.cu): pipe_total pieces, each a block that sums it and, pipe_lag
     * pieces later in the grid, a block that normalizes it (its twin, nj_pipe_twin). The sample traces
     * twins together, and a twin's second read of the piece finds it as far back as the grid's bytes
     * between them. 0: none */
    uint64_t pipe_total, pipe_lag;
} nj_trace_kernel;
/* The block of a pipelined launch that handles the same piece as block b in the other role (pipe_item's
 * block order), or UINT64_MAX when b is past the grid. */
NJ_HIDDEN uint64_t nj_pipe_twin(uint64_t b, uint64_t total, uint64_t lag);
NJ_HIDDEN void nj_trace_set_kernel(nj_trace *t, const char *kernel, const nj_trace_kernel *k);
/* Starts a pass: forgets launches and the sector history (a pass starts with a cold L2). */
NJ_HIDDEN void nj_trace_reset(nj_trace *t);
/* The launches recorded since the reset; *n their count. */
NJ_HIDDEN const nj_trace_launch *nj_trace_launches(const nj_trace *t, int32_t *n);
/* l with its figures scaled from the clusters run to the whole grid. */
NJ_HIDDEN nj_trace_launch nj_trace_scaled(const nj_trace_launch *l);
/* Failure inside the counter (out of memory): reported once the pass ends. */
NJ_HIDDEN nj_status nj_trace_status(const nj_trace *t);

/* ---- a problem's figures (model.c) ---- */
typedef struct nj_model_opts {
    const nj_model_device *dev;
    int32_t ptxas;          /* 1: compile with NVRTC for the ptxas report (registers, shared memory) */
    uint32_t sample;        /* clusters traced a launch (0: default 32) */
    uint32_t passes;        /* nj_pass bits */
} nj_model_opts;

typedef struct nj_model_launch {
    nj_trace_launch t;       /* dynamic figures (t.kernel empty: the launch did not run) */
    int32_t lib;             /* nj_lib_kernel */
    int32_t family, vec, regs_cache, chans, split, unroll; /* the pass's plan, for the in-flight estimate */
    int32_t regs, smem_static, spills; /* ptxas (-1: not compiled) */
    int32_t ptx_ld[NJ_TRACE_WIDTHS], ptx_st[NJ_TRACE_WIDTHS]; /* global ld/st instructions of the kernel's PTX
                                                               by width (static counts; 16: 16 bytes or more) */
    int32_t has_ptx;
    int32_t threads;
    double blocks;           /* grid blocks */
    int32_t blocks_sm;       /* resident blocks an SM */
    const char *limit;       /* what bounds blocks_sm: "threads", "regs", "smem", "blocks", "grid" */
    double waves, tail;      /* grid / resident blocks of the device; nj_model_last_wave */
    double inflight_sm;      /* bytes of loads in flight an SM (requests * ILP * request bytes) */
    double ilp;              /* independent loads a thread has in flight (plan, trace and load sites) */
    double t_dram, t_l2, t_lat, t_rows, time; /* seconds */
    double rows;             /* rows of a row-family kernel (block-per-row ones walk theirs in turn) */
    int32_t rows_per_block, row_sync; /* rows a block holds at once; 1: a block reduction each row */
    int32_t row_fetch;                /* 1: the next row's loads are in flight during this row (P.persist) */
    int32_t dependent;                /* 1: launched dependent on the kernel before it (launch_dep_s) */
    const char *bound;       /* "dram", "latency", "l2", "rows", "launch" */
} nj_model_launch;

typedef struct nj_model_pass {
    int32_t pass;            /* nj_pass */
    int32_t family;
    char plan_text[512];
    double ideal_bytes;      /* a perfect kernel: every input read once, every output written once */
    double dram_bytes;       /* the plan's DRAM estimate */
    double time;             /* seconds */
    double pct_copy;         /* ideal_bytes / time / copy_bw * 100 */
    /* a copy of the ideal bytes, one launch at copy bandwidth, over time * 100: what pct_copy would be were the
     * launch cost free; the ceiling of pct_copy at this size is pct_copy / pct_same * 100 */
    double pct_same;
    int32_t nlaunch;
    nj_model_launch launch[NJ_MAX_LAUNCHES];
    /* for the goals (model_goals.c): the ideal bytes with x and the residual (forward) or x and dy
     * (backward) read once more, the floor of a pass whose sets cannot stay in an SM's shared memory
     * (two_read 1); vec16 1 where x's contiguous innermost run is a whole number of 16-byte vectors */
    double two_read_bytes;
    int32_t two_read, vec16;
} nj_model_pass;

typedef struct nj_model_result {
    int64_t numel;
    int32_t npass;
    nj_model_pass pass[2];
} nj_model_result;

/* The model of problem p (its batch as given) on opts->dev. ctx: an emulator context created while
 * nj_emu_count_build(true) held, for the device's arch (nj_model_context makes one). */
NJ_HIDDEN nj_status nj_model_problem(nj_context *ctx, const nj_problem_desc *p, const nj_model_opts *opts,
                                     nj_model_result *out);
/* An emulator context whose kernels count their accesses, planning for arch. */
NJ_HIDDEN nj_status nj_model_context(int32_t arch, const char *cache_dir, nj_context **out);

/* ---- text (model_report.c) ---- */
/* The full report of one problem into b. */
NJ_HIDDEN void nj_model_report(nj_buf *b, const char *text, const nj_model_result *r, const nj_model_device *dev);
/* One line a pass for --brief and the baseline: problem | pass | launches | ideal MB | dram MB | sector eff |
 * lanes | % of copy. */
NJ_HIDDEN void nj_model_brief(nj_buf *b, const char *text, const nj_model_result *r);
/* Compares a brief line with its baseline line: returns 0 when no figure regresses beyond tolerance,
 * else 1 with the reason in why. Lines are matched by problem and pass by the caller. */
NJ_HIDDEN int nj_model_compare(const char *base, const char *now, char *why, size_t cap);
/* Sector efficiency and active lanes of a whole pass (every launch's requests together). */
NJ_HIDDEN void nj_model_pass_eff(const nj_model_pass *ps, double *eff, double *lanes);

/* ---- issue 17's goals (model_goals.c) ---- */
/* One line a pass: each goal's figure, then "unmet:" and the names of those it misses (pct, bytes,
 * sectors, 16B, inflight, lanes, wave), or "all goals met". */
NJ_HIDDEN void nj_model_goals(nj_buf *b, const char *text, const nj_model_result *r, const nj_model_device *dev);

#endif
