/* NVRTC compilation (src/compile_nvrtc.c). NVRTC is loaded with dlopen (libnvrtc.so.13, .so.12, .so,
 * then $CUDA_HOME/lib64), never linked, so a machine without it gets NJ_ERR_NVRTC_MISSING. */
#ifndef NJ_COMPILE_H
#define NJ_COMPILE_H

#include "internal.h"

typedef struct nj_binary {
    void *data;   /* malloc'd; caller frees with nj_binary_free */
    size_t size;
    int32_t is_ptx; /* 1 when PTX text (target newer than NVRTC supports), 0 for a cubin */
} nj_binary;
NJ_HIDDEN void nj_binary_free(nj_binary *b);

/* Resource report parsed from ptxas -v output in the NVRTC log, per kernel. */
typedef struct nj_kernel_resources {
    char kernel[64];
    int32_t registers, spill_stores, spill_loads, stack_bytes, shared_bytes, barriers;
} nj_kernel_resources;

typedef struct nj_compile_result {
    nj_binary bin;
    int32_t nkernels;
    nj_kernel_resources kernels[8];
    double millis; /* wall time of the compile, not counting the wait for a compile slot */
} nj_compile_result;

/* "nvrtc-13.0" (loads NVRTC on first call). Static storage. */
NJ_HIDDEN nj_status nj_nvrtc_version_string(const char **out);
/* Highest SM NVRTC can emit SASS for (e.g. 121). */
NJ_HIDDEN nj_status nj_nvrtc_max_arch(int32_t *out);

/* Compiles CUDA source for sm_<arch> into a cubin (PTX for compute_<max> when arch is above what NVRTC
 * supports; then nkernels is 0 since ptxas did not run). An arch below the newest NVRTC supports but not in its
 * list is NJ_ERR_UNSUPPORTED; arch <= 0 is NJ_ERR_BAD_ARGUMENT. Options: -default-device --std=c++17
 * -DNJ_CUDA=1 --ptxas-options=-v, -minimal when accepted, -lineinfo when NORMJIT_NVRTC_LINEINFO=1, and for a
 * source of several kernels (kernels > 1) --split-compile over the cores no other compile holds (up to one a
 * kernel, at most 4). NVRTC is found through NORMJIT_LIBNVRTC (only that path when set),
 * libnvrtc.so.13/.12/.so, then $CUDA_HOME/lib64 (default: the build's CUDA_HOME). On NJ_ERR_COMPILE the NVRTC
 * log is in nj_last_error(). Thread-safe; the cores compiles use at once are bounded by
 * nj_nvrtc_set_parallelism (default: number of cores). */
NJ_HIDDEN nj_status nj_nvrtc_compile(const char *source, const char *name, int32_t arch, int32_t kernels,
                                     nj_compile_result *out);
NJ_HIDDEN void nj_nvrtc_set_parallelism(int32_t n);
/* Most cores held by compiles at once since the last reset (tests check the bound); reset sets it to the
 * number running now. */
NJ_HIDDEN int32_t nj_nvrtc_peak_parallelism(bool reset);
/* Parses a ptxas -v log into per-kernel resources (exposed for tests). Returns the number stored (<= cap). */
NJ_HIDDEN int32_t nj_parse_ptxas_log(const char *log, nj_kernel_resources *out, int32_t cap);

#endif
