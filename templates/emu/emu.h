/* Emulation header: the device dialect of docs/dialect.md for the host C++ compiler. The emulator backend
 * (src/backend_emu.c) prepends this file to a kernel's source, defines NJ_EMU=1 and builds a shared object.
 * Everything that needs state (thread indices, barriers, warp exchanges, shared memory) goes through one
 * runtime table the library binds at load time, so the heavy logic is compiled once, not per kernel.
 * Deliberately includes no header: every system header costs compile time in each of hundreds of kernels. */
#ifndef NJ_EMU_H
#define NJ_EMU_H

#define NJ_EMU_ABI 5 /* bump with any change to nj_emu_runtime (src/emu_fibers.c keeps a twin) */

typedef __SIZE_TYPE__ nj_emu_size;

struct uint3 { unsigned x, y, z; };
typedef uint3 dim3;

/* The fiber state a kernel sees; first member of the library's fiber record. */
struct nj_emu_thread {
    uint3 tid, bid;
    unsigned crank; /* rank of the block in its cluster */
    void *dyn;      /* the block's dynamic shared memory */
};

struct nj_emu_runtime {
    unsigned abi, struct_size;
    nj_emu_thread *cur; /* the fiber running now */
    uint3 bdim, gdim, cdim;
    void (*sync)(int line);
    void *(*shared)(const void *key, nj_emu_size bytes, nj_emu_size align, int line);
    unsigned long long (*warp)(int kind, unsigned mask, unsigned long long v, int arg, int width, int line);
    void (*csync)(int line);
    void *(*cmap)(const void *p, unsigned rank, int line);
    void (*misaligned)(const void *p, unsigned bytes, int line); /* ends the launch, as a GPU would */
    /* a memory access of a kernel built for counting (below); site: the instruction's return address */
    void (*access)(const void *p, unsigned bytes, int store, const void *site);
    /* nj_pipe_wait found the counter short: ends the launch (a GPU would hang), unless blocks are skipped */
    void (*unmet)(const int *p, int want, int line);
};

static const nj_emu_runtime *nj_emu_rt_;

extern "C" __attribute__((visibility("default"))) int nj_emu_bind(const nj_emu_runtime *rt, unsigned abi,
                                                                   unsigned size)
{
    if (abi != NJ_EMU_ABI || size != sizeof(nj_emu_runtime)) return -1;
    nj_emu_rt_ = rt;
    return 0;
}

/* Access counting (the performance model, src/model_trace.c): a kernel built with NJ_EMU_COUNT and GCC's
 * -fsanitize=kernel-address with every check outlined reports each load and store it makes, stack and shared
 * ones too (the library keeps the global ones). A kernel built without it has no hook and pays nothing. */
#ifdef NJ_EMU_COUNT
#define NJ_EMU_HOOK_(kind, n, store)                                                                  \
    extern "C" __attribute__((no_sanitize_address, noinline)) void __asan_##kind##n##_noabort(nj_emu_size a) \
    { nj_emu_rt_->access((const void *)a, n, store, __builtin_return_address(0)); }
NJ_EMU_HOOK_(load, 1, 0) NJ_EMU_HOOK_(load, 2, 0) NJ_EMU_HOOK_(load, 4, 0) NJ_EMU_HOOK_(load, 8, 0)
NJ_EMU_HOOK_(load, 16, 0) NJ_EMU_HOOK_(store, 1, 1) NJ_EMU_HOOK_(store, 2, 1) NJ_EMU_HOOK_(store, 4, 1)
NJ_EMU_HOOK_(store, 8, 1) NJ_EMU_HOOK_(store, 16, 1)
extern "C" __attribute__((no_sanitize_address, noinline)) void __asan_loadN_noabort(nj_emu_size a, nj_emu_size n)
{ nj_emu_rt_->access((const void *)a, (unsigned)n, 0, __builtin_return_address(0)); }
extern "C" __attribute__((no_sanitize_address, noinline)) void __asan_storeN_noabort(nj_emu_size a, nj_emu_size n)
{ nj_emu_rt_->access((const void *)a, (unsigned)n, 1, __builtin_return_address(0)); }
extern "C" __attribute__((no_sanitize_address)) void __asan_handle_no_return(void) {}
#endif

#define threadIdx (nj_emu_rt_->cur->tid)
#define blockIdx (nj_emu_rt_->cur->bid)
#define blockDim (nj_emu_rt_->bdim)
#define gridDim (nj_emu_rt_->gdim)
#define warpSize 32

#define NJ_DEVICE static inline
#define NJ_DEVICE_CALL static __attribute__((noinline))
#define NJ_KERNEL(name, max_threads)                                                        \
    extern "C" __attribute__((visibility("default"))) const int nj_emu_bound_##name = (max_threads); \
    extern "C" __attribute__((visibility("default"))) void name(const nj_kargs A)
#define NJ_KERNEL_REGS(name, max_threads) NJ_KERNEL(name, max_threads)
#define NJ_KERNEL_OCC(name, max_threads, n) NJ_KERNEL(name, max_threads)
/* A kernel whose blocks run in clusters of cx*cy*cz (CUDA: __cluster_dims__); the grid must be a multiple. */
#define NJ_CLUSTER_KERNEL(name, max_threads, cx, cy, cz)                                     \
    extern "C" __attribute__((visibility("default"))) const int nj_emu_cluster_##name[3] = {cx, cy, cz}; \
    NJ_KERNEL(name, max_threads)
#define NJ_EMU_CAT2_(a, b) a##b
#define NJ_EMU_CAT_(a, b) NJ_EMU_CAT2_(a, b)
/* A static object's address identifies the declaration, so every thread of a block gets the same array. */
#define NJ_EMU_SHARED_(type, name, count, site)                                              \
    static char site;                                                                        \
    type *name = (type *)nj_emu_rt_->shared(&site, sizeof(type) * (nj_emu_size)(count),     \
                                            alignof(type), __LINE__)
#define NJ_SHARED(type, name, count) NJ_EMU_SHARED_(type, name, count, NJ_EMU_CAT_(nj_emu_site_, __COUNTER__))
#define NJ_DYN_SHARED(type, name) type *name = (type *)nj_emu_rt_->cur->dyn

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

/* A vector access the GPU would refuse (address not a multiple of its size) fails the launch here too:
 * x86 would quietly do it, and a host-side routing mistake would go unseen. */
#define NJ_CHECK_ALIGN(p, bytes)                                                              \
    do {                                                                                      \
        if ((nj_emu_size)(p) % (bytes)) nj_emu_rt_->misaligned((p), (bytes), __LINE__);       \
    } while (0)

/* ---- barriers and warp operations (the runtime switches fibers inside these calls) ---- */
static inline void __syncthreads(int line = __builtin_LINE()) { nj_emu_rt_->sync(line); }
/* A barrier that also ORs a predicate over the block, as the GPU's bar.red.or: one shared flag a block,
 * cleared, set and read between three barriers (the next call's first barrier keeps a fast thread from
 * clearing it before every thread has read it). */
static inline int __syncthreads_or(int p, int line = __builtin_LINE())
{
    NJ_SHARED(int, nj_emu_or_, 1);
    const bool first = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
    nj_emu_rt_->sync(line);
    if (first) *nj_emu_or_ = 0;
    nj_emu_rt_->sync(line);
    if (p) *nj_emu_or_ = 1;
    nj_emu_rt_->sync(line);
    return *nj_emu_or_;
}
static inline void __threadfence(void) { __asm__ __volatile__("" ::: "memory"); }
static inline void __threadfence_block(void) { __asm__ __volatile__("" ::: "memory"); }

/* ---- a pipelined launch's counters (prelude: nj_pipe_arrive, nj_pipe_wait, nj_load_cg). Blocks run in
 * order, one after another: a counter a block waits on was raised by blocks before it, or never will be. */
static inline void nj_fence_gpu(void) { __asm__ __volatile__("" ::: "memory"); }
static inline int nj_pipe_arrive(int *p)
{
    int o = *p; /* fibers never run at the same time */
    *p = o + 1;
    return o;
}
static inline void nj_pipe_wait(const int *p, int want, int line = __builtin_LINE())
{
    if (*(volatile const int *)p < want) nj_emu_rt_->unmet(p, want, line);
}
static inline float nj_load_cg(const float *p) { return *p; }

/* ---- launches: one at a time, each finished before the next starts (prelude: nj_grid_enter) ---- */
static inline void nj_grid_enter(void) {}

/* ---- clusters: the blocks of a cluster run together ---- */
static inline unsigned nj_cluster_rank(void) { return nj_emu_rt_->cur->crank; }
static inline unsigned nj_cluster_size(void)
{ return nj_emu_rt_->cdim.x * nj_emu_rt_->cdim.y * nj_emu_rt_->cdim.z; }
static inline void nj_cluster_sync(int line = __builtin_LINE()) { nj_emu_rt_->csync(line); }
/* The same shared-memory location in block `rank` of the cluster (distributed shared memory). */
template <class T> static inline T *nj_cluster_map(T *p, unsigned rank, int line = __builtin_LINE())
{ return (T *)nj_emu_rt_->cmap((const void *)p, rank, line); }

enum { NJ_EMU_W_SYNC = 0, NJ_EMU_W_IDX, NJ_EMU_W_XOR, NJ_EMU_W_DOWN, NJ_EMU_W_UP, NJ_EMU_W_BALLOT,
       NJ_EMU_W_ANY, NJ_EMU_W_ALL };

template <class T> static inline unsigned long long nj_emu_bits_(T v)
{
    static_assert(sizeof(T) <= 8, "warp operations move at most 8 bytes");
    unsigned long long u = 0;
    __builtin_memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T nj_emu_unbits_(unsigned long long u)
{
    T v;
    __builtin_memcpy(&v, &u, sizeof v);
    return v;
}
template <class T> static inline T nj_emu_shfl_(int kind, unsigned mask, T v, int arg, int width, int line)
{
    return nj_emu_unbits_<T>(nj_emu_rt_->warp(kind, mask, nj_emu_bits_(v), arg, width, line));
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, int line = __builtin_LINE())
{ return nj_emu_shfl_(NJ_EMU_W_IDX, mask, v, src, width, line); }
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, int line = __builtin_LINE())
{ return nj_emu_shfl_(NJ_EMU_W_XOR, mask, v, lane_mask, width, line); }
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE())
{ return nj_emu_shfl_(NJ_EMU_W_DOWN, mask, v, (int)delta, width, line); }
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, int line = __builtin_LINE())
{ return nj_emu_shfl_(NJ_EMU_W_UP, mask, v, (int)delta, width, line); }
static inline void __syncwarp(unsigned mask = 0xffffffffu, int line = __builtin_LINE())
{ nj_emu_rt_->warp(NJ_EMU_W_SYNC, mask, 0, 0, 32, line); }
static inline unsigned __ballot_sync(unsigned mask, int pred, int line = __builtin_LINE())
{ return (unsigned)nj_emu_rt_->warp(NJ_EMU_W_BALLOT, mask, pred != 0, 0, 32, line); }
static inline int __any_sync(unsigned mask, int pred, int line = __builtin_LINE())
{ return (int)nj_emu_rt_->warp(NJ_EMU_W_ANY, mask, pred != 0, 0, 32, line); }
static inline int __all_sync(unsigned mask, int pred, int line = __builtin_LINE())
{ return (int)nj_emu_rt_->warp(NJ_EMU_W_ALL, mask, pred != 0, 0, 32, line); }

/* ---- atomics: fibers never run at the same time, so a plain read-modify-write is atomic ---- */
template <class T> static inline T nj_emu_add_(T *p, T v) { T o = *p; *p = o + v; return o; }
static inline int atomicAdd(int *p, int v) { return nj_emu_add_(p, v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return nj_emu_add_(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return nj_emu_add_(p, v); }
static inline float atomicAdd(float *p, float v) { return nj_emu_add_(p, v); }
static inline double atomicAdd(double *p, double v) { return nj_emu_add_(p, v); }
static inline int atomicSub(int *p, int v) { return nj_emu_add_(p, -v); }
static inline unsigned atomicSub(unsigned *p, unsigned v) { return nj_emu_add_(p, 0u - v); }
template <class T> static inline T nj_emu_cas_(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
static inline int atomicCAS(int *p, int c, int v) { return nj_emu_cas_(p, c, v); }
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { return nj_emu_cas_(p, c, v); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v)
{ return nj_emu_cas_(p, c, v); }
template <class T> static inline T nj_emu_exch_(T *p, T v) { T o = *p; *p = v; return o; }
static inline int atomicExch(int *p, int v) { return nj_emu_exch_(p, v); }
static inline unsigned atomicExch(unsigned *p, unsigned v) { return nj_emu_exch_(p, v); }
static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v) { return nj_emu_exch_(p, v); }
static inline float atomicExch(float *p, float v) { return nj_emu_exch_(p, v); }
template <class T> static inline T nj_emu_max_(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }
template <class T> static inline T nj_emu_min_(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }
static inline int atomicMax(int *p, int v) { return nj_emu_max_(p, v); }
static inline unsigned atomicMax(unsigned *p, unsigned v) { return nj_emu_max_(p, v); }
static inline int atomicMin(int *p, int v) { return nj_emu_min_(p, v); }
static inline unsigned atomicMin(unsigned *p, unsigned v) { return nj_emu_min_(p, v); }
static inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
static inline unsigned atomicAnd(unsigned *p, unsigned v) { unsigned o = *p; *p = o & v; return o; }

/* ---- math: declared, not included (libm is loaded by the library); the compiler knows the builtins ---- */
extern "C" {
float sqrtf(float) noexcept; float expf(float) noexcept; float logf(float) noexcept; float tanhf(float) noexcept;
float erff(float) noexcept; float fabsf(float) noexcept; float fmaxf(float, float) noexcept;
float fminf(float, float) noexcept; float fmaf(float, float, float) noexcept; float floorf(float) noexcept;
float ceilf(float) noexcept; float truncf(float) noexcept; float roundf(float) noexcept;
float powf(float, float) noexcept;
float exp2f(float) noexcept; float log2f(float) noexcept; float log1pf(float) noexcept; float expm1f(float) noexcept;
float erfcf(float) noexcept; float sinf(float) noexcept; float cosf(float) noexcept;
float copysignf(float, float) noexcept;
double sqrt(double) noexcept; double exp(double) noexcept; double log(double) noexcept; double fabs(double) noexcept;
double fma(double, double, double) noexcept; double floor(double) noexcept; double fmax(double, double) noexcept;
double fmin(double, double) noexcept; double tanh(double) noexcept; double erf(double) noexcept;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
/* as the GPU computes it: the product by log2(e) rounded to float, then 2^t (ex2.approx: ~2 ulp) */
static inline float __expf(float x) { return exp2f(x * 1.44269504088896341f); }
static inline float __logf(float x) { return logf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
/* Correctly rounded operations CUDA offers to keep the compiler from contracting into FMAs (x86-64 without
 * -mfma never contracts, so these are the plain operators). */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline int __float2int_rn(float x) { return (int)__builtin_rintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __int2float_rn(int x) { return (float)x; }
static inline bool isnan(float x) { return __builtin_isnan(x); }
static inline bool isnan(double x) { return __builtin_isnan(x); }
static inline bool isinf(float x) { return __builtin_isinf(x); }
static inline bool isinf(double x) { return __builtin_isinf(x); }
static inline bool isfinite(float x) { return __builtin_isfinite(x); }
static inline bool isfinite(double x) { return __builtin_isfinite(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

/* ---- bits ---- */
static inline unsigned __float_as_uint(float x) { unsigned u; __builtin_memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned u) { float x; __builtin_memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; __builtin_memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; __builtin_memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) { long long u; __builtin_memcpy(&u, &x, 8); return u; }
static inline double __longlong_as_double(long long u) { double x; __builtin_memcpy(&x, &u, 8); return x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- vector types: CUDA's sizes and alignments ---- */
#define NJ_EMU_VEC2_(T, N, A)                                                                 \
    struct __attribute__((aligned(A))) N { T x, y; };                                         \
    static inline N make_##N(T x, T y) { N v; v.x = x; v.y = y; return v; }
#define NJ_EMU_VEC4_(T, N, A)                                                                 \
    struct __attribute__((aligned(A))) N { T x, y, z, w; };                                   \
    static inline N make_##N(T x, T y, T z, T w) { N v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
NJ_EMU_VEC2_(float, float2, 8)
NJ_EMU_VEC4_(float, float4, 16)
NJ_EMU_VEC2_(int, int2, 8)
NJ_EMU_VEC4_(int, int4, 16)
NJ_EMU_VEC2_(unsigned, uint2, 8)
NJ_EMU_VEC4_(unsigned, uint4, 16)
/* prelude's nj_load_cg4: one 16-byte load, aligned as the GPU's must be */
static inline void nj_load_cg4(const float *p, float *o)
{
    NJ_CHECK_ALIGN(p, 16);
    const float4 v = *(const float4 *)p;
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
NJ_EMU_VEC2_(unsigned short, ushort2, 4)
NJ_EMU_VEC4_(unsigned short, ushort4, 8)
NJ_EMU_VEC2_(double, double2, 16)
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { uint3 v; v.x = x; v.y = y; v.z = z; return v; }

#endif /* NJ_EMU_H */
