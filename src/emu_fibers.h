/* Emulator core (src/emu_fibers.c): runs a kernel's blocks on the calling thread, each block's threads as
 * fibers with CUDA barrier and warp semantics, and the runtime table the kernel shared objects bind to.
 * src/backend_emu.c (compile, load, the backend ops) is the only user. */
#ifndef NJ_EMU_FIBERS_H
#define NJ_EMU_FIBERS_H

#include "internal.h"
#include "kernel_abi.h"

/* Version of the runtime table; templates/emu/emu.h carries the same number (NJ_EMU_ABI) and refuses to
 * bind to another. Part of the emulator's target name, so cached kernels of another ABI are never loaded. */
#define NJ_EMU_ABI_VERSION 5

typedef void (*nj_emu_kernel_fn)(nj_kargs);

typedef struct nj_emu_launch {
    nj_emu_kernel_fn fn;
    const char *name;      /* kernel name, for messages */
    uint32_t grid[3];
    uint32_t block[3];     /* validated by the caller: product 1..1024 */
    uint32_t cluster[3];   /* blocks per cluster ({1,1,1}: none); the grid is a multiple of it */
    uint32_t shmem;        /* dynamic shared memory bytes */
    uint32_t max_shared;   /* static + dynamic limit, bytes */
    uint32_t flags;        /* NJ_CTX_EMU_SHUFFLE, NJ_CTX_EMU_POISON */
    uint64_t seed;
    const nj_kargs *args;
} nj_emu_launch;

/* The table a kernel .so receives through nj_emu_bind (process lifetime), its size and ABI version. */
NJ_HIDDEN const void *nj_emu_runtime_table(void);
NJ_HIDDEN unsigned nj_emu_runtime_size(void);

/* Runs every block of the grid, a cluster's blocks together; launches are serialized process-wide (the
 * runtime table is global).
 * NJ_ERR_EMULATOR on barrier divergence, deadlock or a shared-memory/warp-operation misuse. */
NJ_HIDDEN nj_status nj_emu_run(const nj_emu_launch *l);

/* Access counting, for the performance model (src/model_trace.c). Kernels compiled by emulator backends
 * created while nj_emu_count_build(true) holds report every memory access they make (a separate build
 * and target, "-count": other kernels have no hook and pay nothing). While a counter is set, each launch
 * asks it which clusters to run (a sample; the others are skipped) and hands it the accesses of the
 * fibers: `thread` is the fiber's index in the cluster (block-in-cluster * threads + thread). */
typedef struct nj_emu_counter {
    void *user;
    void (*launch)(void *user, const nj_emu_launch *l);
    bool (*want)(void *user, uint64_t cluster, uint64_t clusters);
    void (*access)(void *user, uint32_t thread, const void *p, unsigned bytes, int store, const void *site);
    void (*cluster_done)(void *user, uint64_t cluster);
} nj_emu_counter;
NJ_HIDDEN void nj_emu_count_build(bool on);
NJ_HIDDEN bool nj_emu_count_building(void);
/* c (NULL: none) receives the launches that follow; it must outlive them. Process-wide, like launches. */
NJ_HIDDEN void nj_emu_set_counter(const nj_emu_counter *c);

/* Fiber switches made so far (for measuring the switch rate). */
NJ_HIDDEN uint64_t nj_emu_switch_count(void);

/* Reference counting of emulator backends: the last release frees the stack pool and shared arena. */
NJ_HIDDEN void nj_emu_retain(void);
NJ_HIDDEN void nj_emu_release(void);

#endif
