/* The one argument every generated kernel takes, by value. templates/prelude.cuh declares the same
 * struct for the device side; test_codegen checks that both layouts agree (size and offsets). */
#ifndef NJ_KERNEL_ABI_H
#define NJ_KERNEL_ABI_H

#include <stdint.h>

#define NJ_KARGS_NSTRIDE 8 /* == NJ_OPD_COUNT, in nj_operand order */
#define NJ_LIB_NARGS 16    /* run-time arguments of a library kernel (planner.h: nj_lib_kernel) */

typedef struct nj_kargs {
    const void *x, *res, *gamma, *beta, *dy;
    void *y, *res_out, *dx, *dgamma, *dbeta;
    float *mean, *rstd; /* written by forward, read by backward */
    void *workspace;
    int64_t rows;                        /* batch extent (canonical axis 0), run-time */
    int64_t bstride[NJ_KARGS_NSTRIDE];   /* batch-axis stride of each operand, elements */
    float eps;
    int32_t reserved;
    /* A library kernel's extents and workspace layout (launch.c fills them from its launch before each
     * library launch; other kernels ignore them): what a problem's own kernels have baked in. */
    int64_t lib[NJ_LIB_NARGS];
} nj_kargs;

#endif
