/* nj_forward / nj_backward: check the caller's pointers against the problem's flags, fill the kernel
 * argument block, pick the kernel variant the pointers' alignment allows and launch each kernel of the
 * pass. Nothing here allocates or compiles once a plan's kernels are loaded (the unaligned variant is
 * loaded by the first misaligned call, or with the plan by a context that never compiles), so launches
 * are safe to capture in CUDA graphs. */
#include "context_impl.h"
#include "async.h" /* serve hook */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A pointer the flags require must be given, one they exclude must be NULL (a mismatch is almost
 * always a caller bug that would otherwise read or write memory nobody meant). Zero-size problems skip
 * these checks: frameworks pass whatever their empty tensors hold. */
static nj_status nj_want(const void *ptr, uint32_t needed, const char *name)
{
    NJ_RETURN_IF(needed && !ptr, NJ_ERR_NULL_POINTER, "%s is required by the problem's flags", name);
    NJ_RETURN_IF(!needed && ptr, NJ_ERR_BAD_ARGUMENT, "%s is given but the problem's flags do not use it", name);
    return NJ_OK;
}

static bool nj_addr_fits(const void *p, int64_t bytes) { return ((uintptr_t)p % (uintptr_t)bytes) == 0; }

/* True when every operand the kernels access vec elements at a time has an address aligned to that
 * access (vec elements, at most 16 bytes) and a batch stride that is a multiple of vec elements (the
 * plan's align_opds). NULL pointers (an unused optional operand) do not count. */
static bool nj_args_fit(const nj_plan *plan, const nj_plan_params *pp, const nj_kargs *ka)
{
    const void *ptr[NJ_OPD_COUNT] = {ka->x, ka->y, ka->res, ka->res_out, ka->dy, ka->dx, ka->gamma, NULL};
    for (int o = 0; o < NJ_OPD_COUNT; o++) {
        if (!(pp->align_opds & (1u << o))) continue;
        /* a stage's flat copy may move x and dy in wider vectors than the kernel's other accesses */
        int64_t v = (o == NJ_OPD_X || o == NJ_OPD_DY) && pp->copy_vec > pp->vec ? pp->copy_vec : pp->vec;
        int64_t bytes = v * (int64_t)nj_dtype_size((nj_dtype)plan->canon.dtype[o]);
        if (bytes > 16) bytes = 16; /* wider vectors move as 16-byte pieces (prelude: nj_vec_io) */
        if (bytes <= 1) continue;
        if (!nj_addr_fits(ptr[o], bytes)) return false;
        if (o == NJ_OPD_PARAM && !nj_addr_fits(ka->beta, bytes)) return false;
        if (o != NJ_OPD_PARAM && plan->bstride[o] % v != 0) return false;
    }
    return true;
}

bool nj_dependent_launches(int32_t arch)
{
    const char *off = getenv("NORMJIT_NO_PDL");
    return arch >= 90 && !(off && off[0] == '1');
}

/* ws_cap: the caller's workspace_size, or SIZE_MAX for an old struct version that does not carry it. */
static nj_status nj_run(nj_plan *plan, nj_pass pass, nj_kargs *ka, void *stream, size_t ws_cap)
{
    nj_kernelset *ks;
    NJ_TRY(nj_plan_ensure(plan, pass, NJ_VARIANT_MAIN, &ks));
    /* an empty problem touches no element: whatever its pointers hold, the main kernels serve it */
    if (ks->params.align_opds && plan->numel > 0 && !nj_args_fit(plan, &ks->params, ka))
        NJ_TRY(nj_plan_ensure(plan, pass, NJ_VARIANT_UNALIGNED, &ks));
    ka->rows = plan->rows;
    memcpy(ka->bstride, plan->bstride, sizeof ka->bstride);
    nj_serve_note_launch(plan->ctx, ks); /* serve hook: counts generic launches */
    /* A zero batch leaves only fixed-grid launches (e.g. zeroing dgamma/dbeta, the sum over nothing). */
    size_t ws = nj_plan_params_workspace(&ks->params, plan->rows);
    NJ_RETURN_IF(ws && !ka->workspace, NJ_ERR_NULL_POINTER, "this plan needs %zu bytes of workspace", ws);
    NJ_RETURN_IF(ws && ws_cap < ws, NJ_ERR_BAD_ARGUMENT,
                 "workspace_size = %zu bytes is less than the %zu bytes this plan needs (nj_plan_workspace_size)",
                 ws_cap, ws);
    NJ_RETURN_IF(ws && !nj_addr_fits(ka->workspace, 16), NJ_ERR_BAD_ARGUMENT,
                 "the workspace must be 16-byte aligned (got %p)", ka->workspace);
    nj_backend *b = plan->ctx->backend;
    /* the pass's first kernel waits for the stream as any kernel does; the ones after it may start as the
       one before them drains (they wait for it before touching memory: prelude's nj_grid_enter) */
    uint32_t flags = NJ_LAUNCH_PLAIN;
    for (int32_t i = 0; i < ks->params.nlaunch; i++) {
        const nj_launch *l = &ks->params.launch[i];
        uint32_t grid[3];
        NJ_TRY(nj_launch_grid(l, plan->rows, b->props.max_grid_x, grid));
        if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) continue;
        if (l->lib != NJ_LIB_NONE) nj_launch_lib_args(l, plan->rows, ka->lib);
        nj_status s = b->ops->launch(b, ks->fn[i], grid, l->block, l->shmem, stream, flags, ka, sizeof *ka);
        if (s != NJ_OK) return nj_fail_context(s, "launching %s", l->kernel);
        if (plan->ctx->dependent_launches) flags = NJ_LAUNCH_DEPENDENT;
    }
    return NJ_OK;
}

static nj_status nj_forward_check(const nj_plan *plan, const nj_forward_args *a)
{
    uint32_t f = plan->desc.flags;
    if (plan->numel == 0) return NJ_OK;
    NJ_TRY(nj_want(a->x, 1, "x"));
    NJ_TRY(nj_want(a->y, 1, "y"));
    NJ_TRY(nj_want(a->residual, f & NJ_FLAG_RESIDUAL, "residual"));
    NJ_TRY(nj_want(a->residual_out, f & NJ_FLAG_RESIDUAL_OUT, "residual_out"));
    NJ_TRY(nj_want(a->gamma, f & NJ_FLAG_SCALE, "gamma"));
    NJ_TRY(nj_want(a->beta, f & NJ_FLAG_BIAS, "beta"));
    NJ_TRY(nj_want(a->mean, (f & NJ_FLAG_SAVE_STATS) && (f & NJ_FLAG_CENTER), "mean"));
    return nj_want(a->rstd, f & NJ_FLAG_SAVE_STATS, "rstd");
}

/* The caller's args copied into a full-size struct: an older struct version (shorter: v1 without
 * workspace_size, v2 (0: none) without what came after it) is read only up to its own size. *ws_cap:
 * workspace_size, SIZE_MAX when absent. */
static nj_status nj_args_in(const void *args, uint32_t size, size_t v1, size_t v2, size_t full, size_t ws_off,
                            void *out, size_t *ws_cap, const char *name)
{
    NJ_RETURN_IF(size != full && size != v1 && (v2 == 0 || size != v2), NJ_ERR_BAD_STRUCT_SIZE,
                 "%s.struct_size is %u, expected %zu (or an older %zu%s)", name, size, full, v1,
                 v2 ? " or revision 2's" : "");
    memset(out, 0, full);
    memcpy(out, args, size);
    if (size == v1) *ws_cap = SIZE_MAX;
    else memcpy(ws_cap, (const char *)out + ws_off, sizeof *ws_cap);
    return NJ_OK;
}

nj_status nj_forward(nj_plan *plan, const nj_forward_args *args)
{
    nj_error_clear();
    NJ_RETURN_IF(!plan || !args, NJ_ERR_NULL_POINTER, "nj_forward: plan and args are required");
    nj_forward_args full, *a = &full;
    size_t ws_cap = SIZE_MAX;
    NJ_TRY(nj_args_in(args, args->struct_size, NJ_FORWARD_ARGS_SIZE_V1, 0, sizeof full,
                      offsetof(nj_forward_args, workspace_size), &full, &ws_cap, "nj_forward_args"));
    NJ_RETURN_IF(!(a->eps >= 0.0f), NJ_ERR_BAD_ARGUMENT, "eps must be >= 0 (got %g)", (double)a->eps);
    NJ_TRY(nj_forward_check(plan, a));
    nj_kargs ka;
    memset(&ka, 0, sizeof ka);
    ka.x = a->x;
    ka.res = a->residual;
    ka.gamma = a->gamma;
    ka.beta = a->beta;
    ka.y = a->y;
    ka.res_out = a->residual_out;
    ka.mean = a->mean;
    ka.rstd = a->rstd;
    ka.workspace = a->workspace;
    ka.eps = a->eps;
    return nj_run(plan, NJ_PASS_FORWARD, &ka, a->stream, ws_cap);
}

static nj_status nj_backward_check(const nj_plan *plan, const nj_backward_args *a)
{
    uint32_t f = plan->desc.flags;
    NJ_RETURN_IF(a->dgamma && !(f & NJ_FLAG_SCALE), NJ_ERR_BAD_ARGUMENT, "dgamma is given but the problem has no scale");
    NJ_RETURN_IF(a->dbeta && !(f & NJ_FLAG_BIAS), NJ_ERR_BAD_ARGUMENT, "dbeta is given but the problem has no bias");
    if (plan->numel == 0) return NJ_OK;
    NJ_TRY(nj_want(a->dy, 1, "dy"));
    NJ_TRY(nj_want(a->x, 1, "x"));
    NJ_TRY(nj_want(a->dx, 1, "dx"));
    NJ_TRY(nj_want(a->rstd, 1, "rstd"));
    NJ_TRY(nj_want(a->mean, f & NJ_FLAG_CENTER, "mean"));
    NJ_TRY(nj_want(a->gamma, f & NJ_FLAG_SCALE, "gamma"));
    /* beta is read only to recompute an activation's input; without an activation it may be passed or not. */
    if ((f & NJ_FLAG_BIAS) && plan->desc.activation == NJ_ACT_NONE) return NJ_OK;
    return nj_want(a->beta, f & NJ_FLAG_BIAS, "beta (needed to recompute the activation input)");
}

nj_status nj_backward(nj_plan *plan, const nj_backward_args *args)
{
    nj_error_clear();
    NJ_RETURN_IF(!plan || !args, NJ_ERR_NULL_POINTER, "nj_backward: plan and args are required");
    nj_backward_args full, *a = &full;
    size_t ws_cap = SIZE_MAX;
    NJ_TRY(nj_args_in(args, args->struct_size, NJ_BACKWARD_ARGS_SIZE_V1, NJ_BACKWARD_ARGS_SIZE_V2, sizeof full,
                      offsetof(nj_backward_args, workspace_size), &full, &ws_cap, "nj_backward_args"));
    /* an older struct has no eps: -1 tells the kernels to keep the general form (bwd_lib.cuh) */
    if (args->struct_size < sizeof full) full.eps = -1.0f;
    else NJ_RETURN_IF(!(a->eps >= 0.0f), NJ_ERR_BAD_ARGUMENT, "eps must be >= 0 (got %g)", (double)a->eps);
    NJ_TRY(nj_backward_check(plan, a));
    nj_kargs ka;
    memset(&ka, 0, sizeof ka);
    ka.dy = a->dy;
    ka.x = a->x;
    ka.gamma = a->gamma;
    ka.beta = a->beta;
    ka.mean = (float *)a->mean; /* the kernels only read them in backward */
    ka.rstd = (float *)a->rstd;
    ka.dx = a->dx;
    ka.dgamma = a->dgamma;
    ka.dbeta = a->dbeta;
    ka.workspace = a->workspace;
    ka.eps = a->eps;
    return nj_run(plan, NJ_PASS_BACKWARD, &ka, a->stream, ws_cap);
}

/* ---- memory helpers: forwarded to the context's backend ---- */

nj_status nj_mem_alloc(nj_context *ctx, size_t bytes, void **out)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || !out, NJ_ERR_NULL_POINTER, "nj_mem_alloc: ctx and out are required");
    return ctx->backend->ops->mem_alloc(ctx->backend, bytes, out);
}

void nj_mem_free(nj_context *ctx, void *p)
{
    if (ctx && p) ctx->backend->ops->mem_free(ctx->backend, p);
}

nj_status nj_mem_upload(nj_context *ctx, void *dst, const void *src, size_t bytes)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || ((!dst || !src) && bytes), NJ_ERR_NULL_POINTER, "nj_mem_upload: NULL argument");
    return bytes ? ctx->backend->ops->upload(ctx->backend, dst, src, bytes) : NJ_OK;
}

nj_status nj_mem_download(nj_context *ctx, void *dst, const void *src, size_t bytes)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx || ((!dst || !src) && bytes), NJ_ERR_NULL_POINTER, "nj_mem_download: NULL argument");
    return bytes ? ctx->backend->ops->download(ctx->backend, dst, src, bytes) : NJ_OK;
}

nj_status nj_synchronize(nj_context *ctx, void *stream)
{
    nj_error_clear();
    NJ_RETURN_IF(!ctx, NJ_ERR_NULL_POINTER, "nj_synchronize: ctx is NULL");
    return ctx->backend->ops->synchronize(ctx->backend, stream);
}
