/* Serving without compiling on the request path (src/async.c): the generic kernels stand in for a pass
 * whose own kernels are not ready; in an NJ_CTX_ASYNC_COMPILE context those compile on a background pool
 * and replace them atomically. The hooks in context.c and launch.c call these. */
#ifndef NJ_ASYNC_H
#define NJ_ASYNC_H

#include "context_impl.h"

typedef struct nj_serve nj_serve;

/* The context's serve state (ctx->serve); destroy drains and joins the pool first. */
NJ_HIDDEN nj_status nj_serve_create(nj_context *ctx);
NJ_HIDDEN void nj_serve_destroy(nj_context *ctx);
/* Whether a pass that is not ready goes through nj_serve_ensure (async or no-compile contexts). */
NJ_HIDDEN int nj_serve_active(const nj_context *ctx);
/* nj_plan_ensure's miss in such a context: the plan's own kernels if memory or disk has them, else the
 * generic ones (and, async, the background build queued). */
NJ_HIDDEN nj_status nj_serve_ensure(nj_plan *plan, nj_pass pass, nj_variant v, nj_kernelset **out);
/* Counts a launch of ks when it is a generic set. */
NJ_HIDDEN void nj_serve_note_launch(nj_context *ctx, const nj_kernelset *ks);
/* Tests: every pass of every new plan runs the generic kernels (no probe, no background build). */
NJ_HIDDEN void nj_serve_force_generic(nj_context *ctx, int on);
/* Tests: the pool takes no job while held (queued ones wait; wait_background and destroy release it). */
NJ_HIDDEN void nj_serve_hold(nj_context *ctx, int on);

#endif
