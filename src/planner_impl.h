/* Private to the planner's files (planner_*.c, family.c): the family planners that the registry
 * (family_list.h) names, and the helpers they share (planner_common.c). Nothing outside the planner
 * includes it: codegen, kernels and launch see nj_plan_params only. */
#ifndef NJ_PLANNER_IMPL_H
#define NJ_PLANNER_IMPL_H

#include "planner.h"

static inline int64_t nj_ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Statistics of at least NJ_SPLIT_MIN elements are cut into pieces of about NJ_SPLIT_PIECE, a block each
 * (at most NJ_SPLIT_MAX a statistic), forward and backward: a block per statistic would leave most SMs
 * idle for the few long rows of e.g. nv_norms' 10 x 10^7 LayerNorm, and the batch is only known at
 * launch, so the cut depends on the statistic. */
#define NJ_SPLIT_MIN (1 << 18)
/* Bytes of x a block-per-row forward may keep in shared memory (planner_row.c, P.stage 2); a longer
 * row is streamed twice, or on sm_90 spread over a cluster (planner_cluster.c). */
#define NJ_ROW_XSTAGE_MAX (200 * 1024)
#define NJ_SPLIT_PIECE (1 << 15)
#define NJ_SPLIT_MAX 256
/* A batch row of fewer than NJ_SPLIT_FEW / 2 blocks (a statistic of 2^18 to 2^19 elements: LayerNorm f32
 * 4 x 400001, 13 pieces, 52 blocks; model, H200: 17.0% of copy backward, 25.1 at 32 pieces) takes
 * NJ_SPLIT_FEW, pieces of NJ_SPLIT_PIECE_MIN or more: such rows come few to a batch. (Not past that: 31
 * pieces of LayerNorm f32 100 x 10^6 made 32 moved its 3100 blocks from 5.9 waves to 6.1.) */
#define NJ_SPLIT_FEW 32
#define NJ_SPLIT_PIECE_MIN 8192
/* Pieces of a statistic of n elements under the rules above (1 below NJ_SPLIT_MIN), `stats` statistics a
 * batch row. */
NJ_HIDDEN int32_t nj_plan_split_pieces(int64_t n, int64_t stats);

/* A forward split walk (pp->block set): pieces of each statistic (nj_plan_split_pieces), a block each,
 * `part` writing each piece's (sum, m2) to the workspace, `main_kernel` combining a statistic's pieces
 * in order and normalizing its piece. */
NJ_HIDDEN void nj_plan_fwd_split(const nj_canon *c, const char *part, const char *main_kernel, nj_plan_params *pp);

/* A split pass pipelined in one launch (P.lag: fwd_row.cu, bwd_general.cu): pieces of `piece` elements,
 * a block each, lag pieces between a piece's two reads (the statistic's pieces and half a wave of
 * resident blocks), so that the second finds x (and dy) in L2: by then the statistic is whole (its last
 * piece's block is done) and what came between, under half the L2 for statistics of at most
 * NJ_PIPE_BYTES of the tensors a piece reads and writes. Launches: `zero` (a thread a statistic's counter:
 * the workspace is the caller's, its contents unknown), then `main_kernel`, 2 blocks a piece. Workspace,
 * from pp->workspace_per_row on: PARTS [statistic][piece][pq floats], MEANS [statistic][mq floats], FLAGS
 * [statistic] ints. NORMJIT_PLAN_NO_SPLIT_PIPE=1: the part and main launches. */
#define NJ_PIPE_BYTES (16 << 20)
/* ... and a backward's statistic: x, dy and dx (planner_general.c, planner_column.c) */
#define NJ_PIPE_BWD_BYTES (24 << 20)
NJ_HIDDEN void nj_plan_split_pipe(const nj_canon *c, const nj_device_props *dev, int64_t piece, int32_t pq, int32_t mq,
                                  const char *zero, const char *main_kernel, nj_plan_params *pp);
/* The launches every pipelined pass has (nj_plan_split_pipe, the channels-last pipes): P.lag = `pieces` of a
 * statistic plus half a wave of `per_sm` resident blocks an SM; `zero` (256 threads, a grid of rows *
 * zero_mult / 256 blocks) and `main_kernel` (rows * main_mult blocks: two a piece), their roles marked. */
NJ_HIDDEN void nj_plan_pipe(const nj_device_props *dev, int64_t pieces, int64_t per_sm, const char *zero,
                            int64_t zero_mult, const char *main_kernel, int64_t main_mult, nj_plan_params *pp);
/* Bytes of one element of the tensors a pass reads and writes along its statistics: forward x, y and (with
 * the flags) the residual and its sum written out; backward x, dy and dx. A pipe's limits are in these. */
NJ_HIDDEN int64_t nj_plan_elem_bytes(const nj_canon *c, nj_pass pass);

/* Sets pp->grid_loop when a block's work item covers fewer than NJ_LOOP_ELEMS elements (elems), and then
 * caps the grids of its launches that scale with the batch at two waves of resident blocks. */
#define NJ_LOOP_ELEMS 2048
NJ_HIDDEN void nj_plan_grid_loop(nj_plan_params *pp, int64_t elems, const nj_device_props *dev);
/* Threads of a block that walks n elements of one statistic. */
NJ_HIDDEN int32_t nj_plan_walk_block(int64_t n);

/* Pieces of each walk of the column family (1: none), forward and backward alike. */
NJ_HIDDEN int32_t nj_plan_column_split(const nj_canon *c, const nj_device_props *dev, int32_t tile);

/* The planner switches that restore a plan a newer one replaced, so that tools/gpu-check can time both
 * on one GPU (the plan text, hence the signature, says which): whether NORMJIT_PLAN_NO_<what> is "1"
 * (what: PERSIST, IMAGE, ROW_STAGE, TILE). */
NJ_HIDDEN bool nj_plan_switched_off(const char *what);
/* gamma and beta: how many of the two the problem has (a forward reads both) */
NJ_HIDDEN int32_t nj_plan_nparam(const nj_canon *c);
/* gamma and beta a backward reads along its rows: gamma, and beta where an activation reads it (the
 * f32 tables the row and cluster slots stage) */
NJ_HIDDEN int32_t nj_plan_bwd_nparam(const nj_canon *c);
/* NJ_COLSUM_CW for a column sum of ncols columns (S_COL s_col floats apart), over many parts or not */
NJ_HIDDEN int64_t nj_colsum_cw(int64_t ncols, bool many, int64_t s_col);

/* dgamma/dbeta as a pair (dz * xhat, dz) of each of n gamma elements a work item, added by the library's
 * column sum: "rows" (tiles items a batch row, [row][tile][n][2] in the pgrad region, per row) or
 * "slots" (nslot fixed blocks, [slot][n] dgamma then [nslot + slot][n] dbeta, the fixed region). */
NJ_HIDDEN void nj_plan_pgrad_rows(nj_plan_params *pp, int64_t n, int64_t tiles);
NJ_HIDDEN void nj_plan_pgrad_slots(nj_plan_params *pp, int64_t n, int32_t nslot, int bias);

/* The separate dgamma/dbeta launches (bwd_pgrad.cuh, bwd_pgrad_col.cuh) of the backward families that
 * do not fuse them into their own walk: none without scale/bias. Appended after pp's launches, their
 * partials in the workspace's fixed region. */
NJ_HIDDEN void nj_plan_pgrad(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp);
/* After nj_plan_pgrad: the column tiles' walk writes dx too where it can (NJ_PGRAD_TILES_DX). */
NJ_HIDDEN void nj_plan_pgrad_dx(const nj_canon *c, nj_plan_params *pp);
NJ_HIDDEN bool nj_pgrad_sets_ok(const nj_canon *c);
NJ_HIDDEN void nj_plan_pgrad_sets(const nj_canon *c, nj_plan_params *pp);
NJ_HIDDEN int64_t nj_pgrad_chunk_run(const nj_canon *c);
NJ_HIDDEN int64_t nj_pgrad_pieces_run(const nj_canon *c, int32_t split);
NJ_HIDDEN void nj_plan_pgrad_pieces(const nj_canon *c, int64_t run, nj_plan_params *pp);

/* The families (family_list.h): whether one applies to a pass of c, and its planners. A planner fills
 * blocks, launches and workspace; the driver (planner.c) has set pass, family and template. */
#define NJ_FAMILY_X(ID, name, fwd_tpl, bwd_tpl, applies, plan_fwd, plan_bwd)                                  \
    NJ_HIDDEN bool applies(const nj_canon *c, nj_pass pass, const nj_device_props *dev);                                                   \
    NJ_HIDDEN nj_status plan_fwd(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp);            \
    NJ_HIDDEN nj_status plan_bwd(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp);
#define NJ_FAMILY_LIB_X(ID, name)
#include "family_list.h"
#undef NJ_FAMILY_X
#undef NJ_FAMILY_LIB_X

#endif
