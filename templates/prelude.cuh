{# The device prelude: every generated kernel source starts with include("prelude.cuh").
   It defines the device dialect of docs/dialect.md for CUDA (the emulator defines the same names in
   templates/emu/emu.h and sets NJ_EMU), the kernel argument struct (kargs.cuh: generated at build time
   from src/kernel_abi.h by cmake/gen_abi.c), dtype storage and conversions,
   vector access, warp/block reductions, Welford statistics and the activations with their derivatives.
   No includes: cuda_fp16.h alone would double the compile time. #}
/* ---- normjit device prelude (generated source: do not edit) ---- */
#ifndef NJ_EMU
#define NJ_KERNEL(name, max_threads) \
    extern "C" __global__ void __launch_bounds__(max_threads) name(const nj_kargs A)
/* one resident block an SM is enough: ptxas may use every register the block size allows (without it,
 * sm_80 ptxas held 512-thread kernels to 64 registers and spilled) */
#define NJ_KERNEL_REGS(name, max_threads) \
    extern "C" __global__ void __launch_bounds__(max_threads, 1) name(const nj_kargs A)
/* n blocks an SM must fit: ptxas holds the kernel to 65536 / (max_threads * n) registers (row forward,
 * P.persist: the plan's grid counts on them being resident) */
#define NJ_KERNEL_OCC(name, max_threads, n) \
    extern "C" __global__ void __launch_bounds__(max_threads, n) name(const nj_kargs A)
#define NJ_DEVICE static __device__ __forceinline__
/* called, not inlined: one copy of a helper a kernel uses at several places (compile time; the call
 * costs a few cycles per row) */
#define NJ_DEVICE_CALL static __device__ __noinline__
#define NJ_SHARED(type, name, count) __shared__ type name[count]
/* helpers a kernel does not use are normal here: no "declared but never referenced" noise */
#pragma nv_diag_suppress 177
#define NJ_DYN_SHARED(type, name)                        \
    extern __shared__ __align__(16) unsigned char nj_dyn_smem_[]; \
    type *name = reinterpret_cast<type *>(nj_dyn_smem_)
#define NJ_CHECK_ALIGN(p, bytes) ((void)0) /* the hardware checks (emu.h: the emulator does) */
/* Clusters (sm_90 and later; docs/dialect.md): blocks of cx*cy*cz that run at once on one GPC and read
 * each other's shared memory. Inline PTX, not cooperative_groups (no includes: see above). One resident
 * block an SM: a cluster kernel stages its item in most of an SM's shared memory. */
#define NJ_CLUSTER_KERNEL(name, max_threads, cx, cy, cz) \
    extern "C" __global__ void __cluster_dims__(cx, cy, cz) __launch_bounds__(max_threads, 1) name(const nj_kargs A)
#if __CUDA_ARCH__ >= 900
static __device__ __forceinline__ unsigned nj_cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ unsigned nj_cluster_size()
{
    unsigned n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    return n;
}
/* every thread of the cluster; release/acquire order the shared-memory writes before it with the
 * other blocks' reads after it */
static __device__ __forceinline__ void nj_cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* the same shared-memory location in block `rank` of the cluster, as a generic address */
template <class T> static __device__ __forceinline__ T *nj_cluster_map(T *p, unsigned rank)
{
    unsigned long long d;
    asm volatile("mapa.u64 %0, %1, %2;" : "=l"(d) : "l"((unsigned long long)p), "r"(rank));
    return (T *)d;
}
#endif
/* Programmatic dependent launch (sm_90 and later; docs/architecture.md "Launches"): the host may start a
 * pass's later kernels while the kernel before them drains. Every kernel calls this first, before any
 * global access: griddepcontrol.wait returns once the kernels before it in the stream have finished and
 * their writes are visible (at once for a kernel launched the ordinary way); launch_dependents then lets
 * the next kernel's blocks be scheduled as this grid's last blocks run. The trigger comes after the wait,
 * so a kernel that starts early has every kernel before its predecessor finished. */
#if __CUDA_ARCH__ >= 900
static __device__ __forceinline__ void nj_grid_enter()
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#else
static __device__ __forceinline__ void nj_grid_enter() {}
#endif
{% if (P.lag or 0) > 0 then %}
/* A pipelined launch's counters (P.lag: only its sources carry them; fwd_row.cu): blocks announce a piece's partial sums with an add to
 * their statistic's counter, and the blocks that need the statistic whole wait on it. Inline PTX (no
 * includes). Waiting blocks rely on the hardware dispatching a grid's blocks in index order, as
 * single-pass scans do: the plan puts every block a counter waits on well before its waiters. */
static __device__ __forceinline__ void nj_fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
/* the count before this block's add: this block's stores (the partial sums) ordered before it */
static __device__ __forceinline__ int nj_pipe_arrive(int *p)
{
    int old;
    nj_fence_gpu();
    asm volatile("atom.add.gpu.global.s32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
}
static __device__ __forceinline__ void nj_pipe_wait(const int *p, int want)
{
    int v;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        if (v >= want) break;
        asm volatile("nanosleep.u32 64;");
    }
}
/* a value another SM's block stored during this launch: from L2 (an L1 line of a neighbour's could be old) */
static __device__ __forceinline__ float nj_load_cg(const float *p)
{
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
/* four such values, 16-byte aligned, in one load */
static __device__ __forceinline__ void nj_load_cg4(const float *p, float *o)
{
    asm volatile("ld.global.cg.v4.f32 { %0, %1, %2, %3 }, [%4];"
                 : "=f"(o[0]), "=f"(o[1]), "=f"(o[2]), "=f"(o[3]) : "l"(p) : "memory");
}
{% end %}
#endif

typedef long long nj_i64;
typedef unsigned nj_u32;
typedef unsigned long long nj_u64;

/* Identical to src/kernel_abi.h (test_codegen asserts the same size and offsets on the host side). */
{% include("kargs.cuh") %}

/* ---- 16-bit storage types: bits only, arithmetic is always float ---- */
struct alignas(2) nj_f16 { unsigned short bits; };
struct alignas(2) nj_bf16 { unsigned short bits; };

NJ_DEVICE float nj_to_f32(float v) { return v; }
NJ_DEVICE float nj_to_f32(nj_bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
NJ_DEVICE float nj_to_f32(nj_f16 v)
{
#ifndef NJ_EMU
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
#else
    unsigned h = v.bits, sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero or subnormal: man * 2^-24, exact in float */
        float m = (float)man * 5.9604644775390625e-8f;
        return sign ? -m : m;
    }
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
#endif
}

/* float -> storage, round to nearest even (the conversion a GPU's cvt.rn does). Class templates,
 * because an explicit function specialization may not be static (NJ_DEVICE is). */
template <typename T> struct nj_conv;
template <> struct nj_conv<float> {
    NJ_DEVICE float from(float f) { return f; }
};
template <> struct nj_conv<nj_bf16> {
    NJ_DEVICE nj_bf16 from(float f)
{
#if !defined(NJ_EMU) && __CUDA_ARCH__ >= 800
    nj_bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
    return r;
#else
    unsigned u = __float_as_uint(f);
    nj_bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.bits = (unsigned short)((u >> 16) | 0x40u); /* NaN stays a (quiet) NaN */
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.bits = (unsigned short)(u >> 16);
    return r;
#endif
}
};
template <> struct nj_conv<nj_f16> {
    NJ_DEVICE nj_f16 from(float f)
{
    nj_f16 r;
#ifndef NJ_EMU
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(f));
#else
    unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        r.bits = (unsigned short)(sign | 0x7e00u);
    } else if (a >= 0x477ff000u) { /* rounds to 65520 or more: infinity */
        r.bits = (unsigned short)(sign | 0x7c00u);
    } else if (a < 0x38800000u) { /* half subnormal: round a * 2^24 to an integer, ties to even */
        float s = __uint_as_float(a) * 16777216.0f;
        unsigned m = (unsigned)s;
        float rest = s - (float)m;
        if (rest > 0.5f || (rest == 0.5f && (m & 1u))) m++;
        r.bits = (unsigned short)(sign | m);
    } else {
        unsigned h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu), rest = a & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
        r.bits = (unsigned short)(sign | h);
    }
#endif
    return r;
}
};
template <typename T> NJ_DEVICE T nj_from_f32(float f) { return nj_conv<T>::from(f); }

template <typename T> NJ_DEVICE float nj_load_f32(const T *p, nj_i64 i) { return nj_to_f32(p[i]); }
template <typename T> NJ_DEVICE void nj_store_f32(T *p, nj_i64 i, float v) { p[i] = nj_from_f32<T>(v); }

/* ---- vector access: N consecutive elements as one 32/64/128-bit access (p + i aligned to N elements) ----
 * Elements move through 32-bit words with shifts, not through a union: ptxas keeps those in registers
 * (a union of uint4 and float[4] cost a stack frame on sm_80). Little-endian: element 0 is the low half. */
template <int W> struct nj_words;
template <> struct nj_words<1> {
    NJ_DEVICE void load(const void *p, unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 4);
        w[0] = *reinterpret_cast<const unsigned *>(p);
    }
    NJ_DEVICE void store(void *p, const unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 4);
        *reinterpret_cast<unsigned *>(p) = w[0];
    }
};
template <> struct nj_words<2> {
    NJ_DEVICE void load(const void *p, unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 8);
        uint2 v = *reinterpret_cast<const uint2 *>(p);
        w[0] = v.x, w[1] = v.y;
    }
    NJ_DEVICE void store(void *p, const unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 8);
        *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
    }
};
template <> struct nj_words<4> {
    NJ_DEVICE void load(const void *p, unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 16);
        uint4 v = *reinterpret_cast<const uint4 *>(p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    }
    NJ_DEVICE void store(void *p, const unsigned *w)
    {
        NJ_CHECK_ALIGN(p, 16);
        *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    }
};
/* Two 16-bit elements <-> one 32-bit word, element 0 in the low half. On sm_80+ one cvt packs a pair
 * (round to nearest even); the software conversions stay for older targets and the emulator. */
NJ_DEVICE void nj_unpack2(unsigned w, float &lo, float &hi, const nj_bf16 *)
{
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}
NJ_DEVICE void nj_unpack2(unsigned w, float &lo, float &hi, const nj_f16 *)
{
    nj_f16 a, b;
    a.bits = (unsigned short)w;
    b.bits = (unsigned short)(w >> 16);
    lo = nj_to_f32(a);
    hi = nj_to_f32(b);
}
template <typename T16> NJ_DEVICE unsigned nj_pack2(float lo, float hi, const T16 *)
{
    return (unsigned)nj_from_f32<T16>(lo).bits | ((unsigned)nj_from_f32<T16>(hi).bits << 16);
}
#if !defined(NJ_EMU) && __CUDA_ARCH__ >= 800
NJ_DEVICE unsigned nj_pack2(float lo, float hi, const nj_bf16 *)
{
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
NJ_DEVICE unsigned nj_pack2(float lo, float hi, const nj_f16 *)
{
    unsigned w;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    return w;
}
#endif

/* N consecutive elements as W 32-bit words: two 16-bit elements per word, or one float */
/* fetch/convert split a load in two, so a loop can have the next item's words in flight (W registers,
 * not N) while it works on this one. */
template <int N, typename T> struct nj_vec_io {
    enum { W = N * (int)sizeof(T) / 4 };
    NJ_DEVICE void fetch(const T *p, nj_i64 i, unsigned *w) { nj_words<W>::load(p + i, w); }
    NJ_DEVICE void convert(const unsigned *w, float *out)
    {
#pragma unroll
        for (int k = 0; k < W; k++) nj_unpack2(w[k], out[2 * k], out[2 * k + 1], (const T *)0);
    }
    NJ_DEVICE void load(const T *p, nj_i64 i, float *out)
    {
        unsigned w[W];
        fetch(p, i, w);
        convert(w, out);
    }
    NJ_DEVICE void store(T *p, nj_i64 i, const float *in)
    {
        unsigned w[W];
#pragma unroll
        for (int k = 0; k < W; k++) w[k] = nj_pack2(in[2 * k], in[2 * k + 1], (const T *)0);
        nj_words<W>::store(p + i, w);
    }
};
/* floats: 16-byte pieces (eight floats are two accesses; each needs 16-byte alignment) */
template <int N> struct nj_vec_io<N, float> {
    enum { P = N < 4 ? N : 4, W = N }; /* P: words an access */
    NJ_DEVICE void fetch(const float *p, nj_i64 i, unsigned *w)
    {
#pragma unroll
        for (int h = 0; h < N; h += P) nj_words<P>::load(p + i + h, w + h);
    }
    NJ_DEVICE void convert(const unsigned *w, float *out)
    {
#pragma unroll
        for (int k = 0; k < N; k++) out[k] = __uint_as_float(w[k]);
    }
    NJ_DEVICE void load(const float *p, nj_i64 i, float *out)
    {
#pragma unroll
        for (int h = 0; h < N; h += P) {
            unsigned w[P];
            nj_words<P>::load(p + i + h, w);
#pragma unroll
            for (int k = 0; k < P; k++) out[h + k] = __uint_as_float(w[k]);
        }
    }
    NJ_DEVICE void store(float *p, nj_i64 i, const float *in)
    {
#pragma unroll
        for (int h = 0; h < N; h += P) {
            unsigned w[P];
#pragma unroll
            for (int k = 0; k < P; k++) w[k] = __float_as_uint(in[h + k]);
            nj_words<P>::store(p + i + h, w);
        }
    }
};
template <> struct nj_vec_io<1, float> {
    enum { W = 1 };
    NJ_DEVICE void fetch(const float *p, nj_i64 i, unsigned *w) { w[0] = __float_as_uint(p[i]); }
    NJ_DEVICE void convert(const unsigned *w, float *out) { out[0] = __uint_as_float(w[0]); }
    NJ_DEVICE void load(const float *p, nj_i64 i, float *out) { out[0] = p[i]; }
    NJ_DEVICE void store(float *p, nj_i64 i, const float *in) { p[i] = in[0]; }
};
template <typename T> struct nj_vec_io<1, T> {
    enum { W = 1 };
    NJ_DEVICE void fetch(const T *p, nj_i64 i, unsigned *w) { w[0] = p[i].bits; }
    NJ_DEVICE void convert(const unsigned *w, float *out)
    {
        T t;
        t.bits = (unsigned short)w[0];
        out[0] = nj_to_f32(t);
    }
    NJ_DEVICE void load(const T *p, nj_i64 i, float *out) { out[0] = nj_to_f32(p[i]); }
    NJ_DEVICE void store(T *p, nj_i64 i, const float *in) { p[i] = nj_from_f32<T>(in[0]); }
};
/* Fetched words as floats (nj_vec_io::convert), bf16 with the shift and the mask in asm: written in C,
 * the compiler unpacked a next row's words where they were fetched and carried 8 floats instead of 4
 * words across the row (row backward, bf16 rows of 2048 and 4096: 75-77 registers, with this 64, as
 * f16 rows take; 256- and 512-thread blocks: 3 -> 4 and 1 -> 2 resident an SM, the plan's slots). */
template <int V, typename T> NJ_DEVICE void nj_row_convert(const unsigned *w, float *out, const T *)
{
    nj_vec_io<V, T>::convert(w, out);
}
template <int V> NJ_DEVICE void nj_row_convert(const unsigned *w, float *out, const nj_bf16 *)
{
#ifndef NJ_EMU
    if (V == 1) {
        asm("shl.b32 %0, %1, 16;" : "=f"(out[0]) : "r"(w[0]));
        return;
    }
#pragma unroll
    for (int k = 0; k < V / 2; k++) {
        asm("shl.b32 %0, %1, 16;" : "=f"(out[2 * k]) : "r"(w[k]));
        asm("and.b32 %0, %1, 0xffff0000;" : "=f"(out[2 * k + 1]) : "r"(w[k]));
    }
#else
    nj_vec_io<V, nj_bf16>::convert(w, out);
#endif
}
/* Words held across a loop (a persistent row forward's gamma/beta: P.persist), converted where they are
 * used, each time: in volatile asm the conversion of 16-bit words cannot be hoisted out of the loop, where
 * the compiler would carry 8 floats for 4 words. Floats are their words. */
template <int V, typename T> NJ_DEVICE void nj_held_convert(const unsigned *w, float *out, const T *)
{
    nj_vec_io<V, T>::convert(w, out);
}
#ifndef NJ_EMU
template <int V> NJ_DEVICE void nj_held_convert(const unsigned *w, float *out, const nj_bf16 *)
{
#pragma unroll
    for (int k = 0; k < (V + 1) / 2; k++) {
        asm volatile("shl.b32 %0, %1, 16;" : "=f"(out[2 * k]) : "r"(w[k]));
        if (2 * k + 1 < V) asm volatile("and.b32 %0, %1, 0xffff0000;" : "=f"(out[2 * k + 1]) : "r"(w[k]));
    }
}
template <int V> NJ_DEVICE void nj_held_convert(const unsigned *w, float *out, const nj_f16 *)
{
#pragma unroll
    for (int k = 0; k < (V + 1) / 2; k++) {
        float hi;
        asm volatile("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
                     : "=f"(out[2 * k]), "=f"(hi) : "r"(w[k]));
        if (2 * k + 1 < V) out[2 * k + 1] = hi;
    }
}
#endif
template <int N, typename T> NJ_DEVICE void nj_load_vec(const T *p, nj_i64 i, float *out)
{
    nj_vec_io<N, T>::load(p, i, out);
}
template <int N, typename T> NJ_DEVICE void nj_store_vec(T *p, nj_i64 i, const float *in)
{
    nj_vec_io<N, T>::store(p, i, in);
}

/* The block's linear number: launches with more than 2^31 - 1 blocks use grid.y too (nj_launch_grid). */
NJ_DEVICE nj_i64 nj_block_item() { return (nj_i64)blockIdx.y * gridDim.x + blockIdx.x; }

/* ---- reductions: every lane of the warp (and every thread of the block) takes part ---- */
#define NJ_FULL_MASK 0xffffffffu

/* Lane ^ m's value, the whole warp taking part: the instruction __shfl_xor_sync(NJ_FULL_MASK, v, m)
 * compiles to (clamp 0x1f: one 32-lane segment), without its header wrappers (~1 ms of NVRTC a kernel). */
NJ_DEVICE float nj_shfl_xor(float v, int m)
{
#ifndef NJ_EMU
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
    return r;
#else
    return __shfl_xor_sync(NJ_FULL_MASK, v, m);
#endif
}
/* 1 when p holds on any lane of the warp, the whole warp taking part (vote.sync.any, as nj_shfl_xor:
 * without the header wrappers). A branch around group shuffles must be uniform over the warp. */
NJ_DEVICE bool nj_warp_any(bool p)
{
#ifndef NJ_EMU
    int r;
    asm volatile("{ .reg .pred a, b; setp.ne.s32 a, %1, 0; vote.sync.any.pred b, a, 0xffffffff; selp.s32 %0, 1, 0, b; }"
                 : "=r"(r)
                 : "r"((int)p));
    return r != 0;
#else
    return __any_sync(NJ_FULL_MASK, p) != 0;
#endif
}
NJ_DEVICE float nj_warp_sum(float v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += nj_shfl_xor(v, m);
    return v;
}
NJ_DEVICE void nj_warp_sum2(float &a, float &b)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        a += nj_shfl_xor(a, m);
        b += nj_shfl_xor(b, m);
    }
}

/* Block sum over NW warps; scratch holds NW floats (NJ_SHARED). Every thread gets the total. The
 * closing barrier lets the caller reuse scratch at once. Called, not inlined: row kernels sum twice
 * (mean, then variance), and one copy saves ~3.5 ms of NVRTC time with no spill or stack frame. */
template <int NW> NJ_DEVICE_CALL float nj_block_sum(float v, float *scratch)
{
    v = nj_warp_sum(v);
    if (NW == 1) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < NW ? scratch[lane] : 0.0f;
    v = nj_warp_sum(v);
    __syncthreads();
    return v;
}
/* Two block sums at once (backward: sum(dy*g) and sum(dy*g*xhat)); scratch holds 2*NW floats. */
template <int NW> NJ_DEVICE void nj_block_sum2(float &a, float &b, float *scratch)
{
    nj_warp_sum2(a, b);
    if (NW == 1) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        scratch[warp] = a;
        scratch[NW + warp] = b;
    }
    __syncthreads();
    a = lane < NW ? scratch[lane] : 0.0f;
    b = lane < NW ? scratch[NW + lane] : 0.0f;
    nj_warp_sum2(a, b);
    __syncthreads();
}

/* ---- Welford statistics: count, mean, sum of squared deviations (m2) ---- */
struct nj_welford {
    float n, mean, m2;
};
NJ_DEVICE nj_welford nj_welford_init()
{
    nj_welford w;
    w.n = 0.0f;
    w.mean = 0.0f;
    w.m2 = 0.0f;
    return w;
}
NJ_DEVICE void nj_welford_add(nj_welford &w, float x)
{
    w.n += 1.0f;
    float d = x - w.mean;
    w.mean += __fdividef(d, w.n); /* IEEE division calls a subroutine: register spills around it */
    w.m2 += d * (x - w.mean);
}
/* Chan et al.'s parallel combination; either side may be empty. */
NJ_DEVICE nj_welford nj_welford_merge(nj_welford a, nj_welford b)
{
    float n = a.n + b.n;
    if (n == 0.0f) return a;
    float d = b.mean - a.mean, fb = __fdividef(b.n, n);
    nj_welford r;
    r.n = n;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * a.n * fb;
    return r;
}
/* Combining the threads' states: not by pairwise Chan merges (a division and a branch per merge, ten
 * of them unrolled per block reduce: measured ~19 ms of NVRTC time per kernel) but with the sums the
 * kernel already has: the total count and sum give the mean, then
 *   m2 = sum_i (m2_i + n_i * (mean_i - mean)^2),
 * the exact parallel-variance identity; every term is non-negative, so nothing cancels. */
NJ_DEVICE nj_welford nj_welford_from_sums(float n, float s)
{
    nj_welford r;
    r.n = n;
    r.mean = n > 0.0f ? __fdividef(s, n) : 0.0f;
    r.m2 = 0.0f;
    return r;
}
NJ_DEVICE float nj_welford_dev(nj_welford w, float mean)
{
    const float d = w.mean - mean;
    return w.m2 + w.n * d * d;
}
NJ_DEVICE nj_welford nj_warp_welford(nj_welford w)
{
    float n = w.n, s = w.n * w.mean;
    nj_warp_sum2(n, s);
    nj_welford r = nj_welford_from_sums(n, s);
    r.m2 = nj_warp_sum(nj_welford_dev(w, r.mean));
    return r;
}
/* Block Welford over NW warps; scratch holds NW states (used as 3 * NW floats). Every thread gets the
 * result. */
template <int NW> NJ_DEVICE nj_welford nj_block_welford(nj_welford w, nj_welford *scratch)
{
    float *const f = reinterpret_cast<float *>(scratch);
    float n = w.n, s = w.n * w.mean;
    nj_block_sum2<NW>(n, s, f);
    nj_welford r = nj_welford_from_sums(n, s);
    r.m2 = nj_block_sum<NW>(nj_welford_dev(w, r.mean), f);
    return r;
}

/* ---- shifted, scaled statistics ----
 * Every reduction set's statistics are accumulated on d = (x - k) * inv, where k is the set's first
 * element (loaded first by every thread: one address, a line the walk reads anyway) and inv = 1/s, s the
 * power of two at or below |k|. The difference of two close floats is exact, so a mean far from zero
 * costs no precision (y = ((x - k) - md) * rstd, md the mean of x - k: the rounding of the f32 mean is
 * never multiplied by rstd), and squares of sets of magnitude 1e30 or 1e-30 neither overflow nor
 * underflow. Every piece of a split walk uses the same (k, s), so merging pieces stays exact. The scale
 * from one element is a heuristic: a set whose elements exceed |k| by 2^60 and more (k = 0 in a set of
 * 1e30s) can still overflow; k = 0, subnormal or not finite gives s = 1. RMS sets keep k = 0. */
NJ_DEVICE float nj_sq(float v) { return v * v; }
struct nj_shift {
    float k, s, inv;
};
NJ_DEVICE nj_shift nj_shift_of(float first, bool center)
{
    unsigned e = (__float_as_uint(first) >> 23) & 0xffu;
    if (e == 0u || e == 0xffu) e = 127u;
    e = e > 253u ? 253u : e; /* 1/s stays normal */
    nj_shift r;
    r.k = center ? first : 0.0f;
    r.s = __uint_as_float(e << 23);
    r.inv = __uint_as_float((254u - e) << 23);
    return r;
}
/* rstd = 1 / sqrt(var + eps) from the scaled variance var_s = var / s^2: rsqrt(var_s + eps / s^2) / s;
 * rsqrt(eps) where eps / s^2 overflows (var is then below eps * 2^-126: nothing next to eps), or where
 * both terms vanish (a constant set of 1e30s: eps / s^2 underflows, and var is 0 next to eps). */
NJ_DEVICE float nj_rstd_scaled(float var_s, nj_shift sh, float eps)
{
    const float es = eps * sh.inv * sh.inv;
    return es > 3.402823466e38f || var_s + es == 0.0f ? rsqrtf(eps) : rsqrtf(var_s + es) * sh.inv; /* NaN stays */
}

/* Backward (bwd_lib.cuh): above this |mean| * rstd the saved float32 mean's rounding (|mean| * 2^-25)
 * moves xhat by more than 1e-6, and a set's correction is summed first. */
#define NJ_FIX_RATIO 16.0f

/* ---- activations (applied after the affine) and their derivatives d act(u) / du ---- */
#define NJ_SQRT_2_OVER_PI 0.7978845608028654f
#define NJ_INV_SQRT_2 0.7071067811865476f
#define NJ_INV_SQRT_2PI 0.3989422804014327f
#define NJ_GELU_C 0.044715f

/* __fdividef: IEEE division calls a subroutine (spills around the call); for a huge denominator it
 * returns 0, the right limit here. __expf (one ex2.approx after a multiply by log2(e)): relative error
 * (2 + 1.2 |u|) ulp, ~1.5e-6 at |u| = 20, where the accurate expf is ~10 instructions an element and cost
 * the channels-last SiLU kernels 20 ms of NVRTC time each (emu.h rounds the same product). */
NJ_DEVICE float nj_sigmoid(float u) { return __fdividef(1.0f, 1.0f + __expf(-u)); }

/* tanh from __expf: CUDA's tanhf takes a slow path through a subroutine call (spills in the backward
 * kernels). Absolute error ~1e-7, which is what GELU needs (it uses 1 + tanh). */
NJ_DEVICE float nj_tanh(float k) { return 1.0f - __fdividef(2.0f, __expf(2.0f * k) + 1.0f); }

NJ_DEVICE float nj_act_none(float u) { return u; }
NJ_DEVICE float nj_act_relu(float u) { return u > 0.0f ? u : 0.0f; }
NJ_DEVICE float nj_act_silu(float u) { return u * nj_sigmoid(u); }
NJ_DEVICE float nj_act_sigmoid(float u) { return nj_sigmoid(u); }
NJ_DEVICE float nj_act_gelu_erf(float u) { return 0.5f * u * (1.0f + erff(u * NJ_INV_SQRT_2)); }
NJ_DEVICE float nj_act_gelu_tanh(float u)
{
    return 0.5f * u * (1.0f + nj_tanh(NJ_SQRT_2_OVER_PI * (u + NJ_GELU_C * u * u * u)));
}

NJ_DEVICE float nj_dact_none(float u) { return 1.0f; }
NJ_DEVICE float nj_dact_relu(float u) { return u > 0.0f ? 1.0f : 0.0f; }
NJ_DEVICE float nj_dact_sigmoid(float u)
{
    float s = nj_sigmoid(u);
    return s * (1.0f - s);
}
NJ_DEVICE float nj_dact_silu(float u)
{
    float s = nj_sigmoid(u);
    return s * (1.0f + u * (1.0f - s));
}
NJ_DEVICE float nj_dact_gelu_erf(float u)
{
    return 0.5f * (1.0f + erff(u * NJ_INV_SQRT_2)) + u * NJ_INV_SQRT_2PI * expf(-0.5f * u * u);
}
NJ_DEVICE float nj_dact_gelu_tanh(float u)
{
    float k = NJ_SQRT_2_OVER_PI * (u + NJ_GELU_C * u * u * u);
    float t = nj_tanh(k);
    return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * NJ_SQRT_2_OVER_PI * (1.0f + 3.0f * NJ_GELU_C * u * u);
}
/* ---- end of prelude ---- */
