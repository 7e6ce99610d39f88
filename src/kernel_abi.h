/* The one argument every generated kernel takes, by value. This is its only definition: the device
 * copy (struct nj_kargs in the embedded template kargs.cuh, with its size and offset checks and the
 * operand numbers) is printed from it at build time by cmake/gen_abi.c, so the two cannot drift apart. */
#ifndef NJ_KERNEL_ABI_H
#define NJ_KERNEL_ABI_H

#include <stdint.h>

#define NJ_KARGS_NSTRIDE 8 /* == NJ_OPD_COUNT, in nj_operand order (static assert: src/vocab.c) */
#define NJ_LIB_NARGS 16    /* run-time arguments of a library kernel (planner.h: nj_lib_kernel) */

/* X(shape, host type, device type, name, count, offset checked on the device, device comment), in layout
 * order. shape P: a pointer `<type> *name` (consecutive pointers of one type share a declaration in the
 * device copy), S: a scalar, A: an array of count elements.
 *   x .. dbeta        the operands (gamma/beta: scale/bias, dgamma/dbeta their gradients)
 *   mean, rstd        written by forward, read by backward
 *   rows, bstride     the batch extent (canonical axis 0) and each operand's batch stride, elements
 *   lib               a library kernel's extents and workspace layout (launch.c fills them before each
 *                     library launch; other kernels ignore them): what a problem's kernels have baked in */
#define NJ_KARGS_FIELDS(X)                                                                             \
    X(P, const void, const void, x, 0, 0, NULL)                                                          \
    X(P, const void, const void, res, 0, 0, NULL)                                                        \
    X(P, const void, const void, gamma, 0, 0, NULL)                                                      \
    X(P, const void, const void, beta, 0, 0, NULL)                                                       \
    X(P, const void, const void, dy, 0, 0, NULL)                                                         \
    X(P, void, void, y, 0, 0, NULL)                                                                      \
    X(P, void, void, res_out, 0, 0, NULL)                                                                \
    X(P, void, void, dx, 0, 0, NULL)                                                                     \
    X(P, void, void, dgamma, 0, 0, NULL)                                                                 \
    X(P, void, void, dbeta, 0, 0, NULL)                                                                  \
    X(P, float, float, mean, 0, 0, NULL)                                                                 \
    X(P, float, float, rstd, 0, 0, NULL)                                                                 \
    X(P, void, void, workspace, 0, 1, NULL)                                                              \
    X(S, int64_t, long long, rows, 0, 1, NULL)                                                           \
    X(A, int64_t, long long, bstride, NJ_KARGS_NSTRIDE, 1, NULL)                                         \
    X(S, float, float, eps, 0, 1, NULL)                                                                  \
    X(S, int32_t, int, reserved, 0, 0, NULL)                                                             \
    X(A, int64_t, long long, lib, NJ_LIB_NARGS, 1, "a library kernel's run-time extents (templates/lib_*.cu)")

#define NJ_KARGS_FIELD_P(htype, name, count) htype *name;
#define NJ_KARGS_FIELD_S(htype, name, count) htype name;
#define NJ_KARGS_FIELD_A(htype, name, count) htype name[count];
#define NJ_KARGS_FIELD_(shape, htype, dtype, name, count, check, comment) NJ_KARGS_FIELD_##shape(htype, name, count)
typedef struct nj_kargs {
    NJ_KARGS_FIELDS(NJ_KARGS_FIELD_)
} nj_kargs;

#endif
