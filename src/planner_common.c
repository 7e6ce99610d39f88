/* What every family's planner shares (planner_impl.h, planner.h): device defaults, appending launches
 * (the library kernels' among them), grid loops, split walks, the separate dgamma/dbeta launches, and
 * the grid of a launch for a batch. */
#include "planner_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nj_device_props_default(int32_t arch, nj_device_props *out)
{
    memset(out, 0, sizeof *out);
    out->arch = arch;
    out->max_threads_per_block = 1024;
    out->regs_per_sm = 65536;
    if (arch >= 90) {
        out->sm_count = 132; /* H100 SXM */
        out->max_shared_per_block = 227 * 1024;
    } else if (arch == 80) {
        out->sm_count = 108; /* A100 */
        out->max_shared_per_block = 163 * 1024;
    } else if (arch >= 86) {
        out->sm_count = 0; /* many parts: unknown */
        out->max_shared_per_block = 99 * 1024;
    } else {
        out->max_shared_per_block = 48 * 1024;
    }
}

void nj_plan_add_launch(nj_plan_params *pp, const char *kernel, int32_t block, int64_t row_mult, int64_t row_div,
                        int32_t grid_x)
{
    /* the library kernels' callers write through launch[nlaunch - 1]: on overflow that stays the last
     * real launch (a plan that nj_plan_check refuses anyway), never a slot past the array */
    if (pp->nlaunch >= NJ_MAX_LAUNCHES) {
        pp->overflow = 1;
        return;
    }
    nj_launch *l = &pp->launch[pp->nlaunch++];
    memset(l, 0, sizeof *l);
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel);
    l->block[0] = block;
    l->block[1] = l->block[2] = 1;
    l->grid_x = grid_x;
    l->grid_y = l->grid_z = 1;
    l->row_mult = row_mult;
    l->row_div = row_div;
}

void nj_plan_role(nj_plan_params *pp, nj_role role)
{
    if (pp->nlaunch > 0 && !pp->overflow) pp->role[role] = (int8_t)pp->nlaunch;
}

void nj_plan_ws(nj_plan_params *pp, nj_ws_name name, int64_t fixed, int64_t per_row)
{
    pp->ws_used |= 1u << name;
    pp->ws[name] = (nj_ws_region){fixed, per_row};
}

const char *nj_role_name(int32_t role)
{
    static const char *const names[NJ_ROLE_COUNT] = {"part", "main", "pgrad", "merge", "colsum", "zero"};
    return role >= 0 && role < NJ_ROLE_COUNT ? names[role] : NULL;
}

const char *nj_pgrad_name(int32_t pgrad)
{
    static const char *const names[NJ_PGRAD_COUNT] = {"none", "slots", "fused", "walk", "tiles", "sets", "rows",
                                                              "pieces", "tiles_dx"};
    return pgrad >= 0 && pgrad < NJ_PGRAD_COUNT ? names[pgrad] : NULL;
}

const char *nj_ws_name_text(int32_t name)
{
    static const char *const names[NJ_WS_COUNT] = {"pgrad", "parts", "means", "dl", "sets", "flags"};
    return name >= 0 && name < NJ_WS_COUNT ? names[name] : NULL;
}

int32_t nj_plan_kernel_count(const nj_plan_params *pp)
{
    int32_t n = 0;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        int32_t j = 0;
        while (j < i && strcmp(pp->launch[j].kernel, pp->launch[i].kernel) != 0) j++;
        n += j == i && pp->launch[i].lib == NJ_LIB_NONE;
    }
    return n;
}

/* The library kernels (nj_lib_kernel order): name, template, kernel, threads a block, and whether a
 * module is built per gamma dtype (the kernel writes dgamma/dbeta) or once (it touches no gamma). */
static const struct {
    const char *name, *template_name, *kernel;
    int32_t block;
    bool typed;
} nj_libs[NJ_LIB_COUNT] = {{NULL, NULL, NULL, 0, false},
                           {"colsum", "lib_colsum.cu", "nj_lib_colsum", 1024, true},
                           {"merge", "lib_merge.cu", "nj_lib_merge", 1024, false}};

const char *nj_lib_name(int32_t lib) { return lib > 0 && lib < NJ_LIB_COUNT ? nj_libs[lib].name : NULL; }

int32_t nj_lib_dtype(int32_t lib, int32_t param_dtype)
{
    return lib > 0 && lib < NJ_LIB_COUNT && nj_libs[lib].typed ? param_dtype : NJ_DTYPE_NONE;
}

int32_t nj_plan_libs(const nj_plan_params *pp, int32_t libs[NJ_MAX_LAUNCHES])
{
    int32_t n = 0;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        int32_t lib = pp->launch[i].lib, k = 0;
        while (k < n && libs[k] != lib) k++;
        if (lib != NJ_LIB_NONE && k == n) libs[n++] = lib;
    }
    return n;
}

/* Appends a launch of library kernel lib (grid as nj_plan_add_launch's) with its run-time arguments. */
static nj_launch *plan_add_lib(nj_plan_params *pp, int32_t lib, int64_t row_mult, int64_t row_div, int32_t grid_x,
                               const int64_t arg[NJ_LIB_NARGS][2])
{
    nj_plan_add_launch(pp, nj_libs[lib].kernel, nj_libs[lib].block, row_mult, row_div, grid_x);
    nj_launch *l = &pp->launch[pp->nlaunch - 1];
    l->lib = lib;
    memcpy(l->arg, arg, sizeof l->arg);
    return l;
}

int32_t nj_plan_nparam(const nj_canon *c) { return !!(c->flags & NJ_FLAG_SCALE) + !!(c->flags & NJ_FLAG_BIAS); }

int32_t nj_plan_bwd_nparam(const nj_canon *c)
{
    return !!(c->flags & NJ_FLAG_SCALE) + ((c->flags & NJ_FLAG_BIAS) && c->act != NJ_ACT_NONE);
}

/* Columns a column-sum block: 32 (a lane a column), or where that leaves fewer than NJ_COLSUM_GRID
 * blocks and the parts are many (LayerNorm over the C of NCHW: 96-768 columns, 3-24 blocks, each thread
 * of them adding hundreds of parts one dependent L2 load after another: 5-10 us in the model, most of it
 * latency), 16, 8 or 4 with a warp's lanes over 2-8 parts at a time: more blocks, shorter chains. Not
 * below a 32-byte sector a part a block (CW x S_COL floats). Many: 128 parts or more, or parts that
 * grow with the batch. */
#define NJ_COLSUM_GRID 64
int64_t nj_colsum_cw(int64_t ncols, bool many, int64_t s_col)
{
    int64_t cw = 32, min_cw = s_col >= 2 ? 4 : 8;
    if (!many || nj_plan_switched_off("COLSUM_NARROW")) return cw;
    while (cw > min_cw && (ncols + cw - 1) / cw < NJ_COLSUM_GRID) cw /= 2;
    return cw;
}

void nj_plan_add_colsum(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2])
{
    /* A block per 32 columns, its warps over the parts: a thread's chain of dependent loads is parts /
     * warps long, so about 8 parts a warp, 8 to 32 warps; 32 where the parts grow with the batch (the
     * batch is a run-time extent): ConvNeXt's 768 channels are 24 blocks, and at 446 images their 892
     * parts a column made 8 warps wait 111 loads each (model, H200: 16.2 -> 6.3 us; LayerNorm f16
     * *x384x14x14 backward 36.9 -> 49.8% of copy). H200, 264 parts of 4096 columns: 15 us with 8
     * warps, 9.6 us with 32. */
    int64_t parts = arg[NJ_COLSUM_NPARTS][0] + 8 * arg[NJ_COLSUM_NPARTS][1];
    int64_t warps = (parts + 7) / 8 < 8 ? 8 : (parts + 7) / 8 > 32 ? 32 : (parts + 7) / 8;
    if (arg[NJ_COLSUM_NPARTS][1] > 0) warps = 32;
    int64_t ncols = arg[NJ_COLSUM_NCOLS][0];
    int64_t cw = nj_colsum_cw(ncols, parts >= 128 || arg[NJ_COLSUM_NPARTS][1] > 0, arg[NJ_COLSUM_S_COL][0]);
    nj_launch *l = plan_add_lib(pp, NJ_LIB_COLSUM, 1, 1, (int32_t)((ncols + cw - 1) / cw), arg);
    l->block[0] = (int32_t)warps * 32;
    l->arg[NJ_COLSUM_CW][0] = cw;
    l->arg[NJ_COLSUM_CW][1] = 0;
    if (l->arg[NJ_COLSUM_INNER][0] == 0 && l->arg[NJ_COLSUM_INNER][1] == 0) l->arg[NJ_COLSUM_INNER][0] = 1;
    nj_plan_role(pp, NJ_ROLE_COLSUM);
}

bool nj_plan_switched_off(const char *what)
{
    char name[64];
    snprintf(name, sizeof name, "NORMJIT_PLAN_NO_%s", what);
    const char *e = getenv(name);
    return e && e[0] == '1';
}

void nj_plan_pgrad_rows(nj_plan_params *pp, int64_t n, int64_t tiles)
{
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {n, 0},      [NJ_COLSUM_NPARTS] = {0, tiles},
                                         [NJ_COLSUM_S_OUTER] = {2 * n, 0}, [NJ_COLSUM_S_COL] = {2, 0},
                                         [NJ_COLSUM_BASE_B] = {1, 0}};
    nj_plan_add_colsum(pp, arg);
    pp->pgrad = NJ_PGRAD_ROWS;
    pp->pgrad_parts = 1;
    nj_plan_ws(pp, NJ_WS_PGRAD, 0, 0);
    pp->workspace_per_row += (uint64_t)tiles * (uint64_t)n * 2u * sizeof(float);
}

void nj_plan_pgrad_slots(nj_plan_params *pp, int64_t n, int32_t nslot, int bias)
{
    pp->pgrad = NJ_PGRAD_SLOTS;
    pp->pgrad_parts = nslot;
    nj_plan_ws(pp, NJ_WS_PGRAD, 0, 0);
    /* slot k's partial row of gamma at [k][n], of beta at [nslot + k][n]; without a bias (RMSNorm) no
     * beta rows: the producers skip them and the column sum reads B only for a dbeta, which launch.c
     * refuses without a bias (LLM RMSNorm rows: 8.65 of the 17.3 MB of slot traffic) */
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {n, 0}, [NJ_COLSUM_NPARTS] = {nslot, 0},
                                         [NJ_COLSUM_S_OUTER] = {n, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                         [NJ_COLSUM_BASE_B] = {(int64_t)nslot * n, 0}};
    nj_plan_add_colsum(pp, arg);
    pp->workspace_fixed = (uint64_t)nslot * (uint64_t)n * (bias ? 2u : 1u) * sizeof(float);
}

void nj_plan_add_merge(nj_plan_params *pp, const int64_t arg[NJ_LIB_NARGS][2])
{
    /* a block per 32 items, items a batch row times the rows; its warps over the parts, as the column
     * sum's: about 16 parts a warp (4 loads in flight a thread, lib_merge.cu), 8 to 32 warps */
    int64_t parts = arg[NJ_MERGE_NPARTS][0] + 8 * arg[NJ_MERGE_NPARTS][1];
    int64_t warps = (parts + 15) / 16 < 8 ? 8 : (parts + 15) / 16 > 32 ? 32 : (parts + 15) / 16;
    nj_launch *l = plan_add_lib(pp, NJ_LIB_MERGE, arg[NJ_MERGE_NITEMS][1], 32, 0, arg);
    l->block[0] = (int32_t)warps * 32;
    nj_plan_role(pp, NJ_ROLE_MERGE);
}

nj_status nj_plan_library(int32_t lib, nj_plan_params *out)
{
    NJ_RETURN_IF(!nj_lib_name(lib), NJ_ERR_INTERNAL, "planner: library kernel %d", (int)lib);
    memset(out, 0, sizeof *out);
    out->family = NJ_FAMILY_LIBRARY;
    out->template_name = nj_libs[lib].template_name;
    out->block = nj_libs[lib].block;
    out->vec = out->rows_per_block = out->split = 1;
    nj_plan_add_launch(out, nj_libs[lib].kernel, out->block, 1, 1, 1);
    return NJ_OK;
}

void nj_plan_pipe(const nj_device_props *dev, int64_t pieces, int64_t per_sm, const char *zero,
                  int64_t zero_mult, const char *main_kernel, int64_t main_mult, nj_plan_params *pp)
{
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    pp->lag = (int32_t)(pieces + (int64_t)sms * per_sm / 2);
    nj_plan_add_launch(pp, zero, 256, zero_mult, 256, 0);
    nj_plan_role(pp, NJ_ROLE_ZERO);
    nj_plan_add_launch(pp, main_kernel, pp->block, main_mult, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
}

int64_t nj_plan_elem_bytes(const nj_canon *c, nj_pass pass)
{
    static const nj_operand fwd[] = {NJ_OPD_X, NJ_OPD_Y, NJ_OPD_RES, NJ_OPD_RESOUT};
    static const nj_operand bwd[] = {NJ_OPD_X, NJ_OPD_DY, NJ_OPD_DX};
    bool b = pass == NJ_PASS_BACKWARD;
    int64_t es = 0;
    for (size_t i = 0; i < (b ? NJ_ARRAY_LEN(bwd) : NJ_ARRAY_LEN(fwd)); i++) {
        nj_operand o = b ? bwd[i] : fwd[i];
        if ((o == NJ_OPD_RES && !(c->flags & NJ_FLAG_RESIDUAL)) || (o == NJ_OPD_RESOUT && !(c->flags & NJ_FLAG_RESIDUAL_OUT)))
            continue;
        es += (int64_t)nj_dtype_size((nj_dtype)c->dtype[o]);
    }
    return es;
}

void nj_plan_split_pipe(const nj_canon *c, const nj_device_props *dev, int64_t piece, int32_t pq, int32_t mq,
                        const char *zero, const char *main_kernel, nj_plan_params *pp)
{
    int64_t split = nj_ceil_div64(c->reduce_size, piece), per = c->kept_inner;
    pp->split = (int32_t)split;
    nj_plan_pipe(dev, split, 2048 / pp->block, zero, per, main_kernel, per * split * 2, pp);
    int64_t base = (int64_t)(pp->workspace_per_row / sizeof(float));
    nj_plan_ws(pp, NJ_WS_PARTS, 0, base);
    nj_plan_ws(pp, NJ_WS_MEANS, 0, base + per * split * pq);
    nj_plan_ws(pp, NJ_WS_FLAGS, 0, base + per * split * pq + per * mq);
    pp->workspace_per_row += (uint64_t)(per * split * pq + per * mq + per) * sizeof(float);
}

void nj_plan_grid_loop(nj_plan_params *pp, int64_t elems, const nj_device_props *dev)
{
    pp->grid_loop = elems < NJ_LOOP_ELEMS;
    if (!pp->grid_loop) return;
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    for (int32_t i = 0; i < pp->nlaunch; i++) {
        nj_launch *l = &pp->launch[i];
        int64_t per_sm = 2048 / l->block[0] > 0 ? 2048 / l->block[0] : 1;
        if (l->grid_x <= 0 && l->lib == NJ_LIB_NONE) l->grid_x_cap = (int64_t)sms * per_sm * 2; /* libraries: no loop */
    }
}


/* One warp for tiny walks (a block's worth of idle threads per statistic would cost occupancy), up to
 * 512 threads for long ones. */
int32_t nj_plan_walk_block(int64_t n) { return n >= 8192 ? 512 : n >= 1024 ? 256 : n > 64 ? 128 : 32; }

int32_t nj_plan_split_pieces(int64_t n, int64_t stats)
{
    if (n < 2 * NJ_SPLIT_PIECE_MIN) return 1; /* callers split from NJ_SPLIT_MIN, or fewer statistics earlier */
    int64_t pieces = nj_ceil_div64(n, NJ_SPLIT_PIECE);
    /* under half NJ_SPLIT_FEW blocks a batch row: NJ_SPLIT_FEW, pieces of NJ_SPLIT_PIECE_MIN and more */
    int64_t few = nj_ceil_div64(NJ_SPLIT_FEW, stats > 0 ? stats : 1);
    if (few > n / NJ_SPLIT_PIECE_MIN) few = n / NJ_SPLIT_PIECE_MIN;
    if (pieces * (stats > 0 ? stats : 1) < NJ_SPLIT_FEW / 2 && pieces < few) pieces = few;
    return (int32_t)(pieces < NJ_SPLIT_MAX ? pieces : NJ_SPLIT_MAX);
}

void nj_plan_fwd_split(const nj_canon *c, const char *part, const char *main_kernel, nj_plan_params *pp)
{
    pp->split = nj_plan_split_pieces(c->reduce_size, c->kept_inner);
    nj_plan_add_launch(pp, part, pp->block, c->kept_inner * pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_PART);
    nj_plan_add_launch(pp, main_kernel, pp->block, c->kept_inner * pp->split, 1, 0);
    nj_plan_role(pp, NJ_ROLE_MAIN);
    /* [statistic][piece][sum, m2] */
    nj_plan_ws(pp, NJ_WS_PARTS, 0, 0);
    pp->workspace_per_row = (uint64_t)c->kept_inner * (uint64_t)pp->split * 2u * sizeof(float);
}



/* Column-tiled dgamma/dbeta (bwd_pgrad_col.cuh) when the innermost axis is a feature axis of stride 1 in
 * x and dy with at least NJ_BWD_COL_MIN columns: a block per 32 columns walks the non-feature space
 * with coalesced reads, split NJ_S ways (fixed by the plan) so that few columns still fill the GPU. */
#define NJ_BWD_COL_MIN 16
#define NJ_BWD_MAX_SPLIT 128

static bool bwd_pgrad_col_ok(const nj_canon *c)
{
    const nj_canon_axis *in = &c->axes[c->rank - 1];
    return c->param_size > 0 && in->feature && in->extent >= NJ_BWD_COL_MIN && in->stride[NJ_OPD_X] == 1 &&
           in->stride[NJ_OPD_DY] == 1;
}

static void plan_pgrad_col(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    int64_t ec = c->axes[c->rank - 1].extent;
    int64_t tiles = c->param_size / ec * ((ec + 31) / 32);
    int32_t sms = dev->sm_count > 0 ? dev->sm_count : 132;
    int64_t want = (int64_t)sms * 8; /* 256-thread blocks: 8 fill an SM */
    int64_t split = want / tiles;
    if (split < 1) split = 1;
    if (split > NJ_BWD_MAX_SPLIT) split = NJ_BWD_MAX_SPLIT;
    /* a block per (tile, piece) up to four waves, a thread per column of the sums: fixed grids. Past four
     * waves (many narrow tiles, e.g. 10 rows of 10^7 columns: walks of 10 x 32 elements) the blocks loop
     * over the tiles (the kernel sees grid_x < its tasks); else no loop (it costs NVRTC 7-14 ms). */
    int64_t tasks = tiles * split;
    nj_plan_add_launch(pp, "nj_bwd_pgrad_col", 256, 1, 1, (int32_t)(tasks < want * 4 ? tasks : want * 4));
    nj_plan_role(pp, NJ_ROLE_PGRAD);
    pp->pgrad = NJ_PGRAD_TILES;
    pp->pgrad_parts = (int32_t)split;
    if (split > 1) {
        nj_plan_ws(pp, NJ_WS_PGRAD, 0, 0);
        /* split s's partial of gamma element j at [s][j], of beta at [split + s][j] */
        int64_t ps = c->param_size;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0}, [NJ_COLSUM_NPARTS] = {split, 0},
                                             [NJ_COLSUM_S_OUTER] = {ps, 0}, [NJ_COLSUM_S_COL] = {1, 0},
                                             [NJ_COLSUM_BASE_B] = {split * ps, 0}};
        nj_plan_add_colsum(pp, arg);
        pp->workspace_fixed = (uint64_t)split * (uint64_t)c->param_size * 2u * sizeof(float);
    }
}

/* Rows whose dgamma/dbeta come from column tiles (NJ_PGRAD_TILES) read x and dy three times: the sums
 * walk, the dx walk, the tiles' walk. Under NJ_PGRAD_TILES_DX the dx launch stops after the sums, leaving
 * each row's two means (of g and g * xhat) in the workspace (NJ_WS_SETS: a pair a row, after the plan's
 * regions so far), and the tiles' walk, which reads x and dy anyway, writes dx from them: x and dy read
 * twice (LayerNorm f32 1000 x 100000: 2.69x -> ~1.67x the ideal bytes in the model). Row problems only
 * (one statistic a batch row, gamma along it); NORMJIT_PLAN_NO_PGRAD_DX=1 keeps the three walks. */
void nj_plan_pgrad_dx(const nj_canon *c, nj_plan_params *pp)
{
    if (pp->pgrad != NJ_PGRAD_TILES || c->rank != 2 || c->kept_inner != 1 || nj_plan_switched_off("PGRAD_DX")) return;
    pp->pgrad = NJ_PGRAD_TILES_DX;
    nj_plan_ws(pp, NJ_WS_SETS, (int64_t)(pp->workspace_fixed / sizeof(float)),
               (int64_t)(pp->workspace_per_row / sizeof(float)));
    pp->workspace_per_row += 2u * sizeof(float);
}

/* The dgamma/dbeta launches of the general and column families (none without scale/bias). */
void nj_plan_pgrad(const nj_canon *c, const nj_device_props *dev, nj_plan_params *pp)
{
    if (bwd_pgrad_col_ok(c)) {
        plan_pgrad_col(c, dev, pp);
    } else if (c->param_size > 0) {
        /* the walk per feature element is batch-dependent (run-time): a mid-size block covers both */
        int32_t pb = 256, sms = dev->sm_count > 0 ? dev->sm_count : 132;
        /* Few feature elements (BatchNorm's channels: 64 blocks for a 132-SM GPU): each walk is cut into
         * NJ_S pieces, a block each (about 4 blocks of 256 an SM in all), whose sums the second launch
         * adds in piece order per feature element. */
        int64_t split = (4 * (int64_t)sms + c->param_size - 1) / c->param_size;
        if (split > NJ_BWD_MAX_SPLIT) split = NJ_BWD_MAX_SPLIT;
        /* a block per (feature element, piece): split > 1 only below 4 * sms elements; past two waves of
         * feature elements the blocks loop over them (the kernel sees grid_x < param_size) */
        if (split <= 1) {
            int64_t cap = (int64_t)sms * (2048 / pb) * 2;
            nj_plan_add_launch(pp, "nj_bwd_pgrad", pb, 1, 1, (int32_t)(c->param_size < cap ? c->param_size : cap));
            nj_plan_role(pp, NJ_ROLE_PGRAD);
            pp->pgrad = NJ_PGRAD_WALK;
            pp->pgrad_parts = 1;
            return;
        }
        nj_plan_add_launch(pp, "nj_bwd_pgrad", pb, 1, 1, (int32_t)(c->param_size * split));
        nj_plan_role(pp, NJ_ROLE_PGRAD);
        pp->pgrad = NJ_PGRAD_WALK;
        pp->pgrad_parts = (int32_t)split;
        nj_plan_ws(pp, NJ_WS_PGRAD, 0, 0);
        /* piece q's pair (gamma, beta) of element j at [q][j][2] */
        int64_t ps = c->param_size;
        const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0}, [NJ_COLSUM_NPARTS] = {split, 0},
                                             [NJ_COLSUM_S_OUTER] = {2 * ps, 0}, [NJ_COLSUM_S_COL] = {2, 0},
                                             [NJ_COLSUM_BASE_B] = {1, 0}};
        nj_plan_add_colsum(pp, arg);
        pp->workspace_fixed = (uint64_t)split * (uint64_t)c->param_size * 2u * sizeof(float);
    }
}

/* Whether gamma is constant over each set and a statistic's kept index ends in gamma's index: no
 * feature axis is reduced, the batch axis is none, the feature axes are the innermost kept axes and
 * gamma's strides over them are row-major. Then statistic st = outer * param_size + gamma element. */
bool nj_pgrad_sets_ok(const nj_canon *c)
{
    if (c->param_size <= 0 || c->axes[0].feature) return false;
    int64_t expect = 1; /* gamma's stride of the next feature axis outward */
    bool outer = false; /* a kept non-feature axis seen: no feature axis may follow it outward */
    for (int a = c->rank - 1; a >= 1; a--) {
        const nj_canon_axis *ax = &c->axes[a];
        if (ax->reduce) {
            if (ax->feature) return false;
        } else if (!ax->feature) {
            outer = true;
        } else {
            if (outer || ax->stride[NJ_OPD_PARAM] != expect) return false;
            expect *= ax->extent;
        }
    }
    return expect == c->param_size;
}

/* dgamma/dbeta under NJ_PGRAD_SETS: a pair a statistic after the workspace the plan has so far (its
 * per-row part), column-summed over the statistics sharing a gamma element. No walk over x and dy. */
void nj_plan_pgrad_sets(const nj_canon *c, nj_plan_params *pp)
{
    int64_t ps = c->param_size, outer = c->kept_inner / ps, base = (int64_t)(pp->workspace_per_row / sizeof(float));
    nj_plan_ws(pp, NJ_WS_SETS, 0, base);
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0},      [NJ_COLSUM_NPARTS] = {0, outer},
                                         [NJ_COLSUM_S_OUTER] = {2 * ps, 0}, [NJ_COLSUM_S_COL] = {2, 0},
                                         [NJ_COLSUM_BASE_A] = {0, base},    [NJ_COLSUM_BASE_B] = {1, base}};
    nj_plan_add_colsum(pp, arg);
    pp->pgrad = NJ_PGRAD_SETS;
    pp->pgrad_parts = 1;
    pp->workspace_per_row += (uint64_t)c->kept_inner * 2u * sizeof(float);
}

/* NJ_PGRAD_PIECES: a split walk (split pieces of each set) whose pieces each lie where gamma is
 * constant (GroupNorm of NCHW: a set of several channels, a piece within one channel), or whose pieces
 * are whole runs of it (the cluster backward's). Axes, innermost first: reduced non-feature axes (their
 * product: the run of one gamma element), then reduced feature axes, then kept feature axes, gamma
 * row-major over the features; the batch axis no feature. Returns the run, or 0 where gamma does not
 * lie so. */
int64_t nj_pgrad_chunk_run(const nj_canon *c)
{
    if (c->param_size <= 0 || c->axes[0].feature) return 0;
    int64_t run = 1, expect = 1;
    int stage = 0; /* 0: reduced non-feature, 1: reduced feature, 2: kept feature */
    for (int a = c->rank - 1; a >= 1; a--) {
        const nj_canon_axis *ax = &c->axes[a];
        int k = ax->reduce ? (ax->feature ? 1 : 0) : (ax->feature ? 2 : 3);
        if (k == 3 || k < stage) return 0;
        stage = k;
        if (k == 0) {
            run *= ax->extent;
            continue;
        }
        if (ax->stride[NJ_OPD_PARAM] != expect) return 0;
        expect *= ax->extent;
    }
    return expect == c->param_size && stage >= 1 ? run : 0;
}

/* The run when each of split pieces of a set lies within one (a piece divides it), else 0. */
int64_t nj_pgrad_pieces_run(const nj_canon *c, int32_t split)
{
    if (split < 2 || c->reduce_size % split != 0) return 0;
    int64_t run = nj_pgrad_chunk_run(c), piece = c->reduce_size / split;
    return run > 0 && run % piece == 0 ? run : 0;
}

/* dgamma/dbeta under NJ_PGRAD_PIECES: the dx launch leaves a (sum dz * xhat, sum dz) pair a unit, the
 * piece or, where pieces are whole runs, the run (U units a set), after the workspace the plan has so
 * far (its per-row part): statistic st's unit q at pair st * U + q. Gamma element col = kept feature
 * index * RF + the unit's reduced feature index (RF: their count), so its pairs are those of units
 * col * PPC + j (PPC = run / unit, j < PPC) of each batch row: the column sum's parts, PPC inner ones a
 * row. */
void nj_plan_pgrad_pieces(const nj_canon *c, int64_t run, nj_plan_params *pp)
{
    int64_t ps = c->param_size, piece = c->reduce_size / pp->split, unit = piece < run ? piece : run;
    int64_t units = c->reduce_size / unit, ppc = run / unit;
    int64_t base = (int64_t)(pp->workspace_per_row / sizeof(float)), row = c->kept_inner * units;
    nj_plan_ws(pp, NJ_WS_SETS, 0, base);
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {ps, 0},       [NJ_COLSUM_NPARTS] = {0, ppc},
                                         [NJ_COLSUM_INNER] = {ppc, 0},      [NJ_COLSUM_S_OUTER] = {2 * row, 0},
                                         [NJ_COLSUM_S_INNER] = {2, 0},      [NJ_COLSUM_S_COL] = {2 * ppc, 0},
                                         [NJ_COLSUM_BASE_A] = {0, base},    [NJ_COLSUM_BASE_B] = {1, base}};
    nj_plan_add_colsum(pp, arg);
    pp->pgrad = NJ_PGRAD_PIECES;
    pp->pgrad_parts = 1;
    pp->workspace_per_row += (uint64_t)row * 2u * sizeof(float);
}

#define NJ_GRID_X_MAX 0x7fffffffLL
#define NJ_GRID_Y_MAX 65535LL

nj_status nj_launch_grid(const nj_launch *l, int64_t rows, int32_t max_x, uint32_t grid[3])
{
    if (l->grid_x > 0) {
        grid[0] = (uint32_t)l->grid_x;
        grid[1] = (uint32_t)(l->grid_y > 0 ? l->grid_y : 1);
        grid[2] = (uint32_t)(l->grid_z > 0 ? l->grid_z : 1);
        return NJ_OK;
    }
    int64_t div = l->row_div > 0 ? l->row_div : 1;
    int64_t mult = l->row_mult > 0 ? l->row_mult : 1;
    NJ_RETURN_IF(rows > INT64_MAX / mult, NJ_ERR_OVERFLOW, "%s: %lld rows x %lld blocks overflow", l->kernel,
                 (long long)rows, (long long)mult);
    int64_t need = rows <= 0 ? 0 : rows * mult;
    int64_t n = need / div + (need % div != 0);
    if (l->grid_x_cap > 0 && n > l->grid_x_cap) { /* the kernel loops over the rest */
        int64_t rounds = (n + l->grid_x_cap - 1) / l->grid_x_cap;
        n = l->even ? (n + rounds - 1) / rounds : l->grid_x_cap;
    }
    if (n < 1) n = 1; /* an empty batch still launches (every block skips), never a zero grid */
    int64_t wide = max_x > 0 ? max_x : NJ_GRID_X_MAX, cl = l->cluster > 1 ? l->cluster : 1;
    /* a cluster's blocks stay on one row of the grid, and in one work item (a grid row of one cluster
     * at least: only the emulator's narrow test grids are narrower than a cluster) */
    wide = wide < cl ? cl : wide - wide % cl;
    int64_t gy = (n + wide - 1) / wide;
    NJ_RETURN_IF(gy > NJ_GRID_Y_MAX, NJ_ERR_OVERFLOW, "%s: %lld blocks exceed a CUDA grid", l->kernel, (long long)n);
    grid[0] = (uint32_t)(((n + gy - 1) / gy + cl - 1) / cl * cl);
    grid[1] = (uint32_t)gy;
    grid[2] = 1;
    return NJ_OK;
}

void nj_launch_lib_args(const nj_launch *l, int64_t rows, int64_t out[NJ_LIB_NARGS])
{
    for (int k = 0; k < NJ_LIB_NARGS; k++) out[k] = l->arg[k][0] + l->arg[k][1] * rows;
}
