/* What the planner needs to know about a device, filled by the backend that drives it (backend.h) and
 * read by the planner (planner.h): kept apart so that a backend does not depend on the planner. */
#ifndef NJ_DEVICE_H
#define NJ_DEVICE_H

#include "internal.h"

typedef struct nj_device_props {
    int32_t arch;               /* 80, 90, ... */
    int32_t sm_count;           /* 0 when unknown (compile-only): planner uses a default of 132 */
    int32_t max_threads_per_block;
    int32_t max_shared_per_block; /* bytes, opt-in maximum */
    int32_t regs_per_sm;
    int32_t max_grid_x;         /* blocks along grid x; 0 = CUDA's 2^31 - 1 (launch layout only, not planning) */
} nj_device_props;

#endif
