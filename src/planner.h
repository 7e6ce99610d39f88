/* Planner (src/planner.c, the driver; a file per family, planner_<family>.c): canonical problem + device
 * properties -> plan for one pass.
 * A plan is a list of launches of kernels that one rendered source defines, plus the template
 * parameters codegen needs. Everything in it is a function of (canonical problem, pass, device props),
 * and all of it goes into the signature (nj_plan_text). */
#ifndef NJ_PLANNER_H
#define NJ_PLANNER_H

#include "device.h"
#include "kernel_abi.h"
#include "problem.h"

/* Fills conservative properties for an architecture (compile-only targets, emulator). */
NJ_HIDDEN void nj_device_props_default(int32_t arch, nj_device_props *out);

/* Kernel families, numbered in the order of their rows in family_list.h (the registry: family.h). */
typedef enum nj_family {
    NJ_FAMILY_NONE = 0,
#define NJ_FAMILY_X(ID, name, fwd_tpl, bwd_tpl, applies, plan_fwd, plan_bwd) NJ_FAMILY_##ID,
#define NJ_FAMILY_LIB_X(ID, name) NJ_FAMILY_##ID,
#include "family_list.h"
#undef NJ_FAMILY_X
#undef NJ_FAMILY_LIB_X
    NJ_FAMILY_COUNT
} nj_family;

/* Library kernels: problem-independent steps (adding workspace partials into dgamma/dbeta, merging the
 * pieces of split walks) that every plan launching them shares: one module per kernel (and gamma dtype,
 * for a kernel that writes dgamma: nj_lib_dtype), compiled once per cache, its extents read from
 * nj_kargs.lib at run time. A pass's own source is smaller by a kernel, and a kernel costs NVRTC ~10 ms
 * wherever it sits (README: what NVRTC costs). */
typedef enum nj_lib_kernel {
    NJ_LIB_NONE = 0,
    /* out_a[col], out_b[col] (dgamma, dbeta; col < lib[0]) = the sums over the parts i < lib[1] of
     * WS[lib[6 or 7] + (i / lib[2]) * lib[3] + (i % lib[2]) * lib[4] + col * lib[5]] (floats): warp w of
     * a block of 32 columns and NW warps (the launch's, 8 to 32) adds parts w, w + NW, ..., warp 0 the NW
     * warp sums, in that order */
    NJ_LIB_COLSUM = 1,
    /* A statistic's (or two sums') pieces combined, item by item: for item i < NITEMS (hi = i / RADIX,
     * lo = i % RADIX), part q < NPARTS holds a at WS[IN_BASE + hi * S_HI + lo * S_LO + q * S_PART] and b
     * at OFF_B past it; the results go to WS[OUT_BASE + hi * O_HI + lo * O_LO] and O_B past it. MODE
     * NJ_MERGE_SUMS: sum(a) / N, sum(b) / N (the backward's means of g and g * xhat). NJ_MERGE_STATS:
     * mean and rstd from each part's (sum, m2), part q counting min(PLEN, N / CMUL - q * PLEN) * CMUL
     * elements (m2 = sum(m2_q + n_q * (mean_q - mean)^2): nothing cancels). NJ_MERGE_RMS: 0 and
     * rstd from sum(a) / N, the mean square. A block per 32 items and NW warps (the launch's, 8 to 32),
     * warp w adding parts w, w + NW, ..., warp 0 the NW warp sums, in that order */
    NJ_LIB_MERGE = 2
} nj_lib_kernel;
#define NJ_LIB_COUNT 3
/* NJ_LIB_COLSUM's arguments (nj_kargs.lib), in order */
enum {
    NJ_COLSUM_NCOLS, NJ_COLSUM_NPARTS, NJ_COLSUM_INNER, NJ_COLSUM_S_OUTER, NJ_COLSUM_S_INNER, NJ_COLSUM_S_COL,
    NJ_COLSUM_BASE_A, NJ_COLSUM_BASE_B,
    NJ_COLSUM_CW /* columns a block (32, 16, 8 or 4; nj_plan_add_colsum sets it): a warp's lanes over CW
                    columns and 32 / CW parts at a time */
};
/* NJ_LIB_MERGE's arguments, in order, and its modes */
enum {
    NJ_MERGE_NITEMS, NJ_MERGE_NPARTS, NJ_MERGE_RADIX, NJ_MERGE_IN_BASE, NJ_MERGE_S_HI, NJ_MERGE_S_LO,
    NJ_MERGE_S_PART, NJ_MERGE_OFF_B, NJ_MERGE_OUT_BASE, NJ_MERGE_O_HI, NJ_MERGE_O_LO, NJ_MERGE_O_B, NJ_MERGE_MODE,
    NJ_MERGE_N, NJ_MERGE_PLEN, NJ_MERGE_CMUL
};
enum { NJ_MERGE_SUMS = 0, NJ_MERGE_STATS = 1, NJ_MERGE_RMS = 2 };

/* Launches a pass may hold. The longest plans today take 5 (a split column backward whose dgamma/dbeta go
 * through the general walk and its column sum: part, merge, dx, pgrad, colsum); nj_plan_add_launch refuses
 * to write past the array (the plan becomes NJ_ERR_INTERNAL, never an overflow). Part of the launch
 * metadata format (nj_launches_from_text accepts up to this many). */
#define NJ_MAX_LAUNCHES 8

/* grid_x > 0: the grid is (grid_x, grid_y, grid_z). Else ceil(rows * row_mult / row_div) blocks, a block per
 * work item, at most grid_x_cap when that is set (the plan's grid_loop: the kernel loops over the items),
 * laid out by nj_launch_grid. */
typedef struct nj_launch {
    char kernel[48];    /* extern "C" name in the rendered source, or the library kernel's */
    int32_t lib;        /* nj_lib_kernel: NJ_LIB_NONE for a kernel of the plan's own source */
    int64_t arg[NJ_LIB_NARGS][2]; /* library launches: nj_kargs.lib[k] = arg[k][0] + arg[k][1] * rows */
    int32_t block[3];
    int32_t grid_x, grid_y, grid_z;
    int64_t row_mult, row_div, grid_x_cap;
    uint32_t shmem;     /* dynamic shared memory bytes */
    int32_t even;       /* 1 (with grid_x_cap): as few blocks as keep the rounds of the capped grid, so that
                           every block walks the same number of rows, or one fewer (P.persist) */
    int32_t cluster;    /* > 1: blocks of the kernel's thread-block clusters (__cluster_dims__, sm_90): the
                           grid's x a multiple of it, a cluster consecutive blocks of one work item */
} nj_launch;

/* What the templates read by name (codegen_env.c: P.role, P.pgrad, P.ws), so that none infers a decision
 * from a kernel name, a launch position or a workspace size.
 * Roles of a plan's launches: PART, the first walk of a split pass (pieces' partial sums); MAIN, the
 * kernel that writes y (forward) or dx (backward); PGRAD, the separate dgamma/dbeta walk; MERGE and
 * COLSUM, the library launches; ZERO, the launch that clears a pipelined pass's counters (P.lag). */
typedef enum nj_role {
    NJ_ROLE_PART, NJ_ROLE_MAIN, NJ_ROLE_PGRAD, NJ_ROLE_MERGE, NJ_ROLE_COLSUM, NJ_ROLE_ZERO, NJ_ROLE_COUNT
} nj_role;
/* How a backward plan makes dgamma/dbeta. SLOTS: the row kernel keeps column sums in registers across
 * rows, a partial row per block (pgrad_parts blocks) added by the column sum. FUSED: the dx walk also
 * sums them, a partial per (work item) added by the column sum (partials follow the batch). WALK: a
 * separate walk a feature element (bwd_pgrad.cuh), pgrad_parts pieces each (1: no column sum). TILES:
 * a separate column-tiled walk (bwd_pgrad_col.cuh), pgrad_parts pieces each (1: no column sum). SETS:
 * gamma is constant over each set, so the dx walk's own sums of dz and dz * xhat are the set's share
 * of dgamma and dbeta: one pair a statistic (region SETS), added by the column sum over the statistics
 * of each gamma element. ROWS: the column walk's rows are gamma's elements (LayerNorm over the C of
 * NCHW): the dx walk reduces each row's dz * xhat and dz over its tile (region PGRAD: [tile][row][2]),
 * added by the column sum over the tiles. */
typedef enum nj_pgrad {
    NJ_PGRAD_NONE, NJ_PGRAD_SLOTS, NJ_PGRAD_FUSED, NJ_PGRAD_WALK, NJ_PGRAD_TILES, NJ_PGRAD_SETS, NJ_PGRAD_ROWS,
    NJ_PGRAD_PIECES, NJ_PGRAD_TILES_DX, NJ_PGRAD_COUNT
} nj_pgrad;
/* Named workspace regions. PGRAD: the dgamma/dbeta partials ([2][parts][param] floats: gamma's, then
 * beta's, except WALK's [parts][param][2] pairs and the layouts the FUSED families document). PARTS:
 * the pieces' partial sums of a split pass. MEANS: the statistics (forward) or means (backward) the merge
 * writes. DL: the saved-mean corrections a dx kernel leaves for a separate dgamma/dbeta walk. SETS:
 * a statistic's (sum dz * xhat, sum dz) pair under NJ_PGRAD_SETS, a piece's under NJ_PGRAD_PIECES, a
 * row's two means (of g and g * xhat) under NJ_PGRAD_TILES_DX. FLAGS: a pipelined pass's counters (P.lag),
 * one int a statistic. */
typedef enum nj_ws_name {
    NJ_WS_PGRAD, NJ_WS_PARTS, NJ_WS_MEANS, NJ_WS_DL, NJ_WS_SETS, NJ_WS_FLAGS, NJ_WS_COUNT
} nj_ws_name;
/* A region starts fixed + per_row * rows floats into the workspace (rows: the batch's), or, in a plan
 * with ws_stride, that far into each batch row's ws_stride floats. */
typedef struct nj_ws_region {
    int64_t fixed, per_row;
} nj_ws_region;

typedef struct nj_plan_params {
    int32_t pass;        /* nj_pass */
    int32_t family;      /* nj_family of the main kernel */
    const char *template_name; /* e.g. "fwd_row.cu": the template rendered for this pass */
    int32_t block;       /* threads per block of the main kernel */
    int32_t vec;         /* elements per vector access (1, 2, 4, 8) */
    int32_t rows_per_block; /* rows handled by one block (warp-per-row variants > 1) */
    int32_t split;       /* blocks cooperating on one row (1 = none) */
    int32_t regs_cache;  /* elements per thread kept in registers (0 = re-read x) */
    int32_t chans;       /* channels-last family: channels a thread owns (loaded vec at a time); else 0 */
    int32_t tile;        /* channels-last family: pixels of an image tile (a block's work item); column
                            family: columns of a block's tile (32 x the columns a lane owns); else 0 */
    int32_t unroll;      /* column family: independent loads a thread issues per walk step group (its walks
                            unrolled that far); else 0 */
    int32_t stage;       /* dynamic shared memory the main launch holds (its shmem): column family, whole
                            walks: 1 = the first walk keeps the tile's x (backward: and dy), the second reads
                            it there; image family: always 1 (the slab); row family: 1 = a persistent
                            forward's gamma/beta, or a slots backward's f32 gamma (and beta under an
                            activation), copied once a block, 2 = a streamed forward row's x, kept by the
                            statistics walk for the normalizing one */
    int32_t copy_vec;    /* elements of the vectors of a flat copy of x (and dy) into the stage where wider
                            than vec (channels-last backward clusters: 16 bytes, the compute's vec held to 8
                            by its registers); 0 = vec. x's and dy's alignment check demands it */
    int32_t persist;     /* row family forward: n > 0 = n blocks an SM held resident (__launch_bounds__(block,
                            n)), the grid at most SMs x n blocks that walk the rows in turn, each holding
                            gamma/beta from its first row and fetching the next row while it reduces this
                            one; 0 = a block a row */
    int32_t unaligned;   /* 1: the variant for arguments the main plan's vector width does not fit */
    int32_t grid_loop;   /* 1: a block's work item is tiny (a few hundred elements): the launches that scale
                            with the batch get at most two waves of blocks, each looping over items, where
                            a block an item would leave the GPU scheduling blocks rather than moving data.
                            0: a block an item and no loop (it costs NVRTC 7-14 ms a kernel) */
    int32_t reverse;     /* 1: the main launch takes its work items last first, the part launch before it in
                            order: a second walk over what the part launch just read meets the part of it
                            still in L2 first (the part's last items) rather than the part evicted first */
    int32_t lag;         /* split row forward, split general backward: n > 0 = one launch pipelines the
                            pieces (the ZERO launch before it clears the counters): its blocks alternate a
                            piece's partial sums and, n pieces behind, a piece's normalization (dx), which
                            waits on its statistic's counter (the last piece's block merges the statistic).
                            x (and dy) is read again from L2, not DRAM: n pieces stand between the two
                            reads. 0 = the part and main launches */
    int32_t pipe_group;  /* a pipelined split column backward: pieces a first-level merge adds (two-level
                            merge, bwd_column.cu); 0 = one merge of all the pieces */
    uint32_t align_opds; /* bits (1 << nj_operand): operands whose base address must be a multiple of vec
                            elements, and whose batch stride a multiple of vec (PARAM has none), for the
                            launch to use these kernels; else the unaligned variant runs */
    int32_t nlaunch;
    int32_t overflow;    /* nj_plan_add_launch was asked for more than NJ_MAX_LAUNCHES launches (a bug):
                            nj_plan_pass turns it into NJ_ERR_INTERNAL */
    nj_launch launch[NJ_MAX_LAUNCHES];
    uint64_t workspace_per_row; /* workspace bytes = workspace_fixed + rows * workspace_per_row */
    uint64_t workspace_fixed;
    int8_t role[NJ_ROLE_COUNT]; /* 1 + the index of the launch playing each role, 0 for none */
    int32_t pgrad;              /* nj_pgrad */
    int32_t pgrad_parts;        /* SLOTS, WALK, TILES: partials of each dgamma/dbeta element (1: none) */
    uint32_t ws_used;           /* bits (1 << nj_ws_name) of the regions the plan uses */
    nj_ws_region ws[NJ_WS_COUNT];
    int64_t ws_stride;          /* floats of a batch row's workspace when its regions repeat per row, else 0 */
} nj_plan_params;

/* Marks the last launch added as the one playing role. */
NJ_HIDDEN void nj_plan_role(nj_plan_params *pp, nj_role role);
/* Names a workspace region (offsets in floats). */
NJ_HIDDEN void nj_plan_ws(nj_plan_params *pp, nj_ws_name name, int64_t fixed, int64_t per_row);
/* Names of roles, dgamma/dbeta strategies and regions (plan text, P.role, P.pgrad, P.ws). */
NJ_HIDDEN const char *nj_role_name(int32_t role);
NJ_HIDDEN const char *nj_pgrad_name(int32_t pgrad);
NJ_HIDDEN const char *nj_ws_name_text(int32_t name);

/* The invariants later stages rely on, checked on a finished plan: launch count within the array (no
 * overflow), blocks of 1 to the device's threads in multiples of 32, fixed grids within CUDA's limits,
 * positive row multipliers, library arguments in range, vector width 1/2/4/8, split >= 1, workspace sizes
 * that cannot overflow for any batch the problem validated. NJ_ERR_INTERNAL with the broken invariant
 * named (and an assert in debug builds: a violation is a planner bug, never the caller's input). */
NJ_HIDDEN nj_status nj_plan_check(const nj_canon *c, const nj_plan_params *pp, const nj_device_props *dev);

NJ_HIDDEN nj_status nj_plan_pass(const nj_canon *c, nj_pass pass, const nj_device_props *dev, nj_plan_params *out);

/* Kernel variants of one pass. MAIN assumes the alignment its align_opds name (vector accesses); the
 * launch checks the caller's pointers and batch strides and runs UNALIGNED otherwise: vec 1, the row
 * streamed with rolled loops. Keeping the rare case out of the main kernel halves its compile time; it
 * is compiled on first need, and by warmup. A plan with vec 1 is its own unaligned variant (same
 * signature). */
typedef enum nj_variant { NJ_VARIANT_MAIN = 0, NJ_VARIANT_UNALIGNED = 1 } nj_variant;
#define NJ_VARIANT_COUNT 2
NJ_HIDDEN nj_status nj_plan_variant(const nj_canon *c, nj_pass pass, nj_variant v, const nj_device_props *dev,
                                    nj_plan_params *out);
/* The unaligned variant of a main plan (nj_plan_variant without planning again): same blocks, launches
 * and workspace (the caller sized it for the main plan), scalar accesses; main itself when it has no
 * alignment to lose. */
NJ_HIDDEN void nj_plan_unaligned(const nj_plan_params *main, nj_plan_params *out);

/* One pass of one problem, planned once (nj_pass_plan_make) and read by everything after it: the
 * kernels' signature, source and launches (kernels.c), the workspace size and describe (context.c,
 * explain.c), explain and warmup. view: the canonical problem as the pass's kernels see it
 * (nj_canon_for_pass), which the signature, plan and source come from. main: the main variant's plan;
 * the unaligned variant's is derived from it (nj_pass_plan_variant), not stored: a plan object exists per
 * distinct batch, and this keeps it to one plan a pass.
 * status: NJ_OK, or why the pass cannot be planned (an unsupported backward), with nj_last_error's
 * detail kept, so that a problem is refused a pass only when that pass is asked for. */
typedef struct nj_pass_plan {
    nj_status status;
    char detail[240];
    nj_pass pass;
    nj_canon view;
    nj_plan_params main;
} nj_pass_plan;
/* Variant v of a planned pass into *out (nj_plan_unaligned for the unaligned one). */
NJ_HIDDEN void nj_pass_plan_variant(const nj_pass_plan *pl, nj_variant v, nj_plan_params *out);
/* Plans pass of the full canonical problem into *out; returns out->status (its detail in nj_last_error). */
NJ_HIDDEN nj_status nj_pass_plan_make(const nj_canon *full, nj_pass pass, const nj_device_props *dev,
                                      nj_pass_plan *out);
/* out->status, with its detail replayed into nj_last_error when it is a failure. */
NJ_HIDDEN nj_status nj_pass_plan_status(const nj_pass_plan *pl);

/* Appends a launch with 1-D blocks: grid_x fixed when > 0, else ceil(rows * row_mult / row_div) blocks.
 * Shared by the forward and backward planners. Past NJ_MAX_LAUNCHES it appends nothing and sets
 * pp->overflow (checked by nj_plan_check). */
NJ_HIDDEN void nj_plan_add_launch(nj_plan_params *pp, const char *kernel, int32_t block, int64_t row_mult,
                                  int64_t row_div, int32_t grid_x);
/* Appends a launch of library kernel NJ_LIB_COLSUM (a fixed grid: NJ_COLSUM_CW of the NJ_COLSUM_NCOLS
 * columns a block, which must not depend on the batch); arg: each NJ_COLSUM_* argument as a {constant, per
 * batch row} pair, an inner count of 0 read as 1. */
NJ_HIDDEN void nj_plan_add_colsum(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2]);
/* Appends a launch of library kernel NJ_LIB_MERGE over NJ_MERGE_NITEMS = {0, items a batch row} items, a
 * block per 32 (the grid follows the batch); arg as for nj_plan_add_colsum. */
NJ_HIDDEN void nj_plan_add_merge(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2]);
/* The one launch of a library module (kernel lib; its dtype comes with the module's signature). */
NJ_HIDDEN nj_status nj_plan_library(int32_t lib, nj_plan_params *out);
/* Name of a library kernel ("colsum"), NULL if lib is none. */
NJ_HIDDEN const char *nj_lib_name(int32_t lib);
/* The dtype a module of library kernel lib is built for, for a plan of gamma dtype param_dtype:
 * param_dtype for a kernel that writes dgamma/dbeta, NJ_DTYPE_NONE (one module) for the others. */
NJ_HIDDEN int32_t nj_lib_dtype(int32_t lib, int32_t param_dtype);
/* The distinct library kernels pp's launches name, into libs; returns how many. */
NJ_HIDDEN int32_t nj_plan_libs(const nj_plan_params *pp, int32_t libs[NJ_MAX_LAUNCHES]);
/* Distinct kernels of the plan's own source among the launches (library launches not counted). */
NJ_HIDDEN int32_t nj_plan_kernel_count(const nj_plan_params *pp);

/* Workspace bytes of a plan for `rows` batch rows (nj_plan_check has verified it fits in 64 bits for the
 * problem's batch). */
static inline size_t nj_plan_params_workspace(const nj_plan_params *pp, int64_t rows)
{
    return (size_t)(pp->workspace_fixed + (uint64_t)rows * pp->workspace_per_row);
}

/* Grid of a launch for `rows` batch rows: (n, 1, 1) for n blocks up to max_x (0: 2^31 - 1), else (x, y, 1)
 * with x * y >= n (the kernels number blocks with nj_block_item and skip those past n). NJ_ERR_OVERFLOW
 * past 65535 rows of blocks, which no device's memory can fill at CUDA's width. */
NJ_HIDDEN nj_status nj_launch_grid(const nj_launch *l, int64_t rows, int32_t max_x, uint32_t grid[3]);

/* A library launch's nj_kargs.lib for `rows` batch rows (planner.h: nj_launch.arg). */
NJ_HIDDEN void nj_launch_lib_args(const nj_launch *l, int64_t rows, int64_t out[NJ_LIB_NARGS]);

/* One-line text of the plan parameters (goes into the signature and `normjit plan`). Caller frees. */
NJ_HIDDEN char *nj_plan_text(const nj_plan_params *pp);

/* Serializes the launches (cache entry metadata) and parses them back. */
NJ_HIDDEN char *nj_launches_to_text(const nj_plan_params *pp);
NJ_HIDDEN nj_status nj_launches_from_text(const char *text, nj_plan_params *pp);

#endif
