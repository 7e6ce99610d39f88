/* Kernels in the device dialect used by tests/test_backend_emu.c (the larger ones, kept apart so the
 * suite stays readable). Each expects the kernel-side nj_kargs (KARGS in the suite) in front of it. */
#ifndef NJ_EMU_TEST_KERNELS_H
#define NJ_EMU_TEST_KERNELS_H

/* reduce: block sums with shuffles and shared memory: y[b] = sum of x[b*rows ..], y[grid+b] = threads. */
extern const char *const emu_reduce_src;
/* rev (dynamic + static shared), peek (reads unwritten shared memory), too_big (static over 48 KiB). */
extern const char *const emu_shared_src;
/* atom: global and shared atomics. */
extern const char *const emu_atomic_src;
/* warps: every warp operation, with int, double and long long values and partial widths. */
extern const char *const emu_warp_src;
/* csum: clusters of 2x2 blocks summing through distributed shared memory; A.reserved plants bugs. */
extern const char *const emu_cluster_src;
/* layernorm_fwd: a typical block-per-row LayerNorm forward, rows of 1000. */
extern const char *const emu_layernorm_src;

#endif
