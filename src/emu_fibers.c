/* Emulator core: each block's threads run as fibers on the launching thread. A fiber runs until it
 * blocks (barrier, warp operation) or returns; the scheduler then picks the next runnable fiber, in
 * thread order or, with NJ_CTX_EMU_SHUFFLE, in a seeded random order. When nothing is runnable the
 * scheduler either releases a barrier every thread has reached or reports divergence/deadlock.
 * Switching is a few instructions of assembly on x86-64 (swapcontext costs a sigprocmask syscall per
 * switch); other machines fall back to ucontext. */
#include "emu_fibers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define NJ_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NJ_EMU_ASAN 1
#endif
#endif
#ifdef NJ_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define NJ_EMU_STACK (256u * 1024u) /* instrumented runtime frames are larger */
/* Shared memory outside the block's arrays is poisoned, so a kernel built with -fsanitize=address
 * (automatic when the library is: see backend_emu.c) stops at an out-of-bounds shared access. */
#define ARENA_POISON(p, n) __asan_poison_memory_region((p), (n))
#define ARENA_UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#define SITE_GAP 32u
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#define SITE_GAP 0u
#define NJ_EMU_STACK (64u * 1024u)
#endif

#if !defined(__x86_64__) || defined(NJ_EMU_UCONTEXT)
#define NJ_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

#define EMU_MAX_THREADS 1024
#define EMU_MAX_WARPS (EMU_MAX_THREADS / 32)
#define EMU_MAX_SITES 64
#define EMU_STATIC_LIMIT (48u * 1024u) /* CUDA's limit on static __shared__ */

/* Twin of nj_emu_runtime in templates/emu/emu.h (checked by size and NJ_EMU_ABI_VERSION at bind). */
typedef struct emu_u3 {
    uint32_t x, y, z;
} emu_u3;
typedef struct emu_thread_pub {
    emu_u3 tid;
} emu_thread_pub;
typedef struct nj_emu_runtime {
    unsigned abi, struct_size;
    emu_thread_pub *cur;
    emu_u3 bid, bdim, gdim;
    void *dyn_shared;
    void (*sync)(int line);
    void *(*shared)(const void *key, size_t bytes, size_t align, int line);
    unsigned long long (*warp)(int kind, unsigned mask, unsigned long long v, int arg, int width, int line);
} nj_emu_runtime;

/* Warp operation kinds, as in emu.h. */
enum { W_SYNC = 0, W_IDX, W_XOR, W_DOWN, W_UP, W_BALLOT, W_ANY, W_ALL };
static const char *const w_names[] = {"__syncwarp",       "__shfl_sync",   "__shfl_xor_sync",
                                      "__shfl_down_sync", "__shfl_up_sync", "__ballot_sync",
                                      "__any_sync",       "__all_sync"};

enum { F_RUNNABLE = 0, F_BAR, F_WARP, F_DONE, F_DEAD };

typedef struct emu_fiber {
    emu_thread_pub pub;
    uint32_t linear;
    int32_t state, line;
    void *sp;
    char *stack_lo;
    void *asan_fake;
#ifdef NJ_EMU_USE_UCONTEXT
    ucontext_t uc;
#endif
} emu_fiber;

typedef struct emu_warp {
    int32_t nlanes, arrived, kind, line, width;
    uint64_t val[32], out[32];
    int32_t arg[32];
} emu_warp;

typedef struct emu_site {
    const void *key;
    size_t off, bytes;
} emu_site;

/* All launch state lives here; g_lock serializes launches because kernels reach it through g_rt. */
typedef struct emu_sched {
    const nj_emu_launch *l;
    int32_t nthr, nwarps, ndone, nbar;
    int32_t rq_head, rq_len;
    emu_fiber *cur;
    void *sched_sp;
#ifdef NJ_EMU_USE_UCONTEXT
    ucontext_t sched_uc;
#endif
    void *sched_fake;
    const void *main_lo;
    size_t main_size;
    uint64_t rng;
    nj_status err;
    size_t shared_top, static_used;
    int32_t nsites;
    emu_site sites[EMU_MAX_SITES];
    int32_t runq[EMU_MAX_THREADS];
    emu_warp warps[EMU_MAX_WARPS];
    emu_fiber fib[EMU_MAX_THREADS];
} emu_sched;

static emu_sched g_s;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_switches;
static int32_t g_refs;

/* Stack pool (guard page below each stack) and shared arena, kept across launches. */
static char *g_pool;
static size_t g_pool_per;
static int32_t g_pool_count;
static bool g_pool_dirty; /* an aborted launch left frames (and ASan redzones) on the stacks */
static char *g_arena;
static size_t g_arena_size;

static void rt_sync(int line);
static void *rt_shared(const void *key, size_t bytes, size_t align, int line);
static unsigned long long rt_warp(int kind, unsigned mask, unsigned long long v, int arg, int width, int line);

static nj_emu_runtime g_rt = {NJ_EMU_ABI_VERSION, sizeof(nj_emu_runtime), NULL, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
                              NULL, rt_sync, rt_shared, rt_warp};

const void *nj_emu_runtime_table(void) { return &g_rt; }
unsigned nj_emu_runtime_size(void) { return (unsigned)sizeof(nj_emu_runtime); }
uint64_t nj_emu_switch_count(void) { return __atomic_load_n(&g_switches, __ATOMIC_RELAXED); }

/* ---------------------------------------------------------------- context switching */

static void fiber_main(emu_fiber *f);

#ifndef NJ_EMU_USE_UCONTEXT
/* nj_emu_switch_(save, to): pushes the callee-saved registers, stores rsp in *save, loads `to`, pops.
 * nj_emu_entry_: first "return" of a new fiber; rbx holds the fiber, r12 the function. */
NJ_HIDDEN void nj_emu_switch_(void **save, void *to);
NJ_HIDDEN void nj_emu_entry_(void);
__asm__(".text\n"
        ".p2align 4\n"
        ".globl nj_emu_switch_\n"
        ".hidden nj_emu_switch_\n"
        ".type nj_emu_switch_,@function\n"
        "nj_emu_switch_:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size nj_emu_switch_, .-nj_emu_switch_\n"
        ".p2align 4\n"
        ".globl nj_emu_entry_\n"
        ".hidden nj_emu_entry_\n"
        ".type nj_emu_entry_,@function\n"
        "nj_emu_entry_:\n"
        "  movq %rbx, %rdi\n"
        "  andq $-16, %rsp\n"
        "  callq *%r12\n"
        "  ud2\n"
        ".size nj_emu_entry_, .-nj_emu_entry_\n");

static void ctx_init(emu_fiber *f)
{
    uintptr_t top = ((uintptr_t)f->stack_lo + NJ_EMU_STACK) & ~(uintptr_t)15;
    void **sp = (void **)(top - 8 * sizeof(void *));
    /* popped in order r15 r14 r13 r12 rbx rbp, then ret */
    sp[0] = sp[1] = sp[2] = NULL;
    sp[3] = (void *)(uintptr_t)fiber_main;
    sp[4] = f;
    sp[5] = NULL;
    sp[6] = (void *)(uintptr_t)nj_emu_entry_;
    sp[7] = NULL;
    f->sp = sp;
}
#define CTX_TO_FIBER(s, f) nj_emu_switch_(&(s)->sched_sp, (f)->sp)
#define CTX_TO_SCHED(s, f) nj_emu_switch_(&(f)->sp, (s)->sched_sp)
#else
static void fiber_main_uc(void) { fiber_main(g_s.cur); }
static void ctx_init(emu_fiber *f)
{
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = NJ_EMU_STACK;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_main_uc, 0);
}
#define CTX_TO_FIBER(s, f) swapcontext(&(s)->sched_uc, &(f)->uc)
#define CTX_TO_SCHED(s, f) swapcontext(&(f)->uc, &(s)->sched_uc)
#endif

static void to_fiber(emu_sched *s, emu_fiber *f)
{
    s->cur = f;
    g_rt.cur = &f->pub;
    g_switches++;
#ifdef NJ_EMU_ASAN
    __sanitizer_start_switch_fiber(&s->sched_fake, f->stack_lo, NJ_EMU_STACK);
#endif
    CTX_TO_FIBER(s, f);
#ifdef NJ_EMU_ASAN
    __sanitizer_finish_switch_fiber(s->sched_fake, NULL, NULL);
#endif
}

/* Back to the scheduler; `final` when this fiber is never resumed (its ASan fake stack is dropped). */
static void to_sched(emu_sched *s, emu_fiber *f, bool final)
{
    g_switches++;
#ifdef NJ_EMU_ASAN
    __sanitizer_start_switch_fiber(final ? NULL : &f->asan_fake, s->main_lo, s->main_size);
#else
    (void)final;
#endif
    CTX_TO_SCHED(s, f);
#ifdef NJ_EMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, NULL, NULL);
#endif
}

static void fiber_main(emu_fiber *f)
{
    emu_sched *s = &g_s;
#ifdef NJ_EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &s->main_lo, &s->main_size);
#endif
    s->l->fn(*s->l->args);
    f->state = F_DONE;
    s->ndone++;
    to_sched(s, f, true);
    abort(); /* a finished fiber is never resumed */
}

/* Ends the current fiber after a failure (nj_fail already recorded the detail). */
static void fiber_abort(emu_sched *s, nj_status st)
{
    emu_fiber *f = s->cur;
    s->err = st;
    f->state = F_DEAD;
    g_pool_dirty = true;
    to_sched(s, f, true);
    abort();
}

/* ---------------------------------------------------------------- run queue */

static uint64_t rng_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rq_push(emu_sched *s, int32_t i)
{
    s->runq[(s->rq_head + s->rq_len) % s->nthr] = i;
    s->rq_len++;
    s->fib[i].state = F_RUNNABLE;
}

static emu_fiber *rq_pop(emu_sched *s)
{
    if (s->l->flags & NJ_CTX_EMU_SHUFFLE) {
        int32_t k = (int32_t)(rng_next(&s->rng) % (uint64_t)s->rq_len);
        int32_t a = s->rq_head, b = (s->rq_head + k) % s->nthr, t = s->runq[a];
        s->runq[a] = s->runq[b];
        s->runq[b] = t;
    }
    int32_t i = s->runq[s->rq_head];
    s->rq_head = (s->rq_head + 1) % s->nthr;
    s->rq_len--;
    return &s->fib[i];
}

/* ---------------------------------------------------------------- messages */

static const char *thread_name(const emu_fiber *f, char *buf, size_t cap)
{
    snprintf(buf, cap, "thread (%u,%u,%u)", f->pub.tid.x, f->pub.tid.y, f->pub.tid.z);
    return buf;
}

static const char *where(const emu_fiber *f, char *buf, size_t cap)
{
    switch (f->state) {
    case F_BAR: snprintf(buf, cap, "at __syncthreads line %d", f->line); break;
    case F_WARP: snprintf(buf, cap, "at %s line %d", w_names[g_s.warps[f->linear / 32].kind], f->line); break;
    case F_DONE: snprintf(buf, cap, "exited"); break;
    default: snprintf(buf, cap, "running"); break;
    }
    return buf;
}

/* "<what> in kernel K: thread A of block B <where A> while thread C <where C>" */
static nj_status report_pair(emu_sched *s, const char *what, const emu_fiber *a, const emu_fiber *c)
{
    char na[48], wa[64], nc[48], wc[64];
    return nj_fail(NJ_ERR_EMULATOR, "%s in kernel %s: %s of block (%u,%u,%u) %s while %s %s", what, s->l->name,
                   thread_name(a, na, sizeof na), g_rt.bid.x, g_rt.bid.y, g_rt.bid.z, where(a, wa, sizeof wa),
                   thread_name(c, nc, sizeof nc), where(c, wc, sizeof wc));
}

/* ---------------------------------------------------------------- barriers */

static void rt_sync(int line)
{
    emu_sched *s = &g_s;
    emu_fiber *f = s->cur;
    f->state = F_BAR;
    f->line = line;
    s->nbar++;
    to_sched(s, f, false);
}

/* Nothing is runnable: release a barrier that every thread reached, or report why not. */
static nj_status resolve_stall(emu_sched *s)
{
    emu_fiber *bar = NULL, *bar2 = NULL, *done = NULL;
    for (int32_t i = 0; i < s->nthr; i++) {
        emu_fiber *f = &s->fib[i];
        if (f->state == F_WARP) {
            emu_warp *w = &s->warps[f->linear / 32];
            for (int32_t j = 0; j < w->nlanes; j++) {
                emu_fiber *o = &s->fib[(f->linear & ~31u) + (uint32_t)j];
                if (o->state != F_WARP) return report_pair(s, "warp operation deadlock", f, o);
            }
            return nj_fail(NJ_ERR_INTERNAL, "emulator: complete warp left waiting");
        }
        if (f->state == F_BAR) {
            if (!bar) bar = f;
            else if (!bar2 && f->line != bar->line) bar2 = f;
        }
        if (f->state == F_DONE && !done) done = f;
    }
    NJ_RETURN_IF(!bar, NJ_ERR_INTERNAL, "emulator: no runnable thread and none waiting");
    if (bar2) return report_pair(s, "barrier divergence", bar, bar2);
    /* every barrier must be reached by every thread of the block (CUDA: the condition around
       __syncthreads must be uniform); an exited thread never reaches it */
    if (done) return report_pair(s, "barrier divergence", bar, done);
    s->nbar = 0;
    for (int32_t i = 0; i < s->nthr; i++) rq_push(s, i);
    return NJ_OK;
}

/* ---------------------------------------------------------------- warp operations */

static nj_status warp_compute(emu_sched *s, emu_warp *w, const emu_fiber *first)
{
    uint64_t bits = 0;
    for (int32_t i = 0; i < w->nlanes; i++) bits |= (uint64_t)(w->val[i] != 0) << i;
    uint64_t all = w->nlanes == 32 ? 0xffffffffull : ((1ull << w->nlanes) - 1);
    int32_t width = w->width;
    for (int32_t lane = 0; lane < w->nlanes; lane++) {
        int32_t seg = lane & ~(width - 1), in = lane & (width - 1), a = w->arg[lane], src = lane;
        switch (w->kind) {
        case W_IDX: src = seg + (a & (width - 1)); break;
        case W_XOR: src = lane ^ a; if (src >= seg + width) src = lane; break;
        case W_DOWN: src = (a >= 0 && in + a < width) ? lane + a : lane; break;
        case W_UP: src = (a >= 0 && in >= a) ? lane - a : lane; break;
        default: break;
        }
        if (src < 0 || src >= w->nlanes) {
            char n[48];
            return nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s of block (%u,%u,%u) at %s line %d reads lane %d, which "
                           "does not exist (the warp has %d lanes)", s->l->name, thread_name(first, n, sizeof n),
                           g_rt.bid.x, g_rt.bid.y, g_rt.bid.z, w_names[w->kind], w->line, src, w->nlanes);
        }
        switch (w->kind) {
        case W_BALLOT: w->out[lane] = bits; break;
        case W_ANY: w->out[lane] = bits != 0; break;
        case W_ALL: w->out[lane] = bits == all; break;
        case W_SYNC: w->out[lane] = 0; break;
        default: w->out[lane] = w->val[src]; break;
        }
    }
    return NJ_OK;
}

static nj_status warp_check(emu_sched *s, emu_fiber *f, emu_warp *w, int kind, unsigned mask, int width, int line)
{
    uint32_t need = w->nlanes == 32 ? 0xffffffffu : ((1u << w->nlanes) - 1);
    char n[48];
    if (width < 1 || width > 32 || (width & (width - 1)))
        return nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s at %s line %d: width %d is not a power of two up to 32",
                       s->l->name, thread_name(f, n, sizeof n), w_names[kind], line, width);
    if ((mask & need) != need)
        return nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s at %s line %d: mask 0x%08x leaves out lanes of the warp "
                       "(the whole warp must take part)", s->l->name, thread_name(f, n, sizeof n), w_names[kind],
                       line, mask);
    if (w->arrived == 0) {
        w->kind = kind;
        w->line = line;
        w->width = width;
        return NJ_OK;
    }
    if (w->kind == kind && w->line == line && w->width == width) return NJ_OK;
    for (int32_t j = 0; j < w->nlanes; j++) {
        emu_fiber *o = &s->fib[(f->linear & ~31u) + (uint32_t)j];
        if (o->state == F_WARP) {
            int32_t k = w->kind;
            char na[48], no[48];
            return nj_fail(NJ_ERR_EMULATOR, "warp divergence in kernel %s: %s of block (%u,%u,%u) at %s "
                                   "line %d (width %d) while %s of its warp at %s line %d (width %d)",
                                   s->l->name, thread_name(f, na, sizeof na), g_rt.bid.x, g_rt.bid.y, g_rt.bid.z,
                                   w_names[kind], line, width, thread_name(o, no, sizeof no), w_names[k], w->line,
                                   w->width);
        }
    }
    return nj_fail(NJ_ERR_INTERNAL, "emulator: warp arrivals without a waiting lane");
}

static unsigned long long rt_warp(int kind, unsigned mask, unsigned long long v, int arg, int width, int line)
{
    emu_sched *s = &g_s;
    emu_fiber *f = s->cur;
    emu_warp *w = &s->warps[f->linear / 32];
    uint32_t lane = f->linear & 31;
    if (kind < W_SYNC || kind > W_ALL) fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "unknown warp operation %d", kind));
    nj_status st = warp_check(s, f, w, kind, mask, width, line);
    if (st != NJ_OK) fiber_abort(s, st);
    w->val[lane] = v;
    w->arg[lane] = arg;
    if (++w->arrived < w->nlanes) {
        f->state = F_WARP;
        f->line = line;
        to_sched(s, f, false);
        return w->out[lane];
    }
    st = warp_compute(s, w, f);
    if (st != NJ_OK) fiber_abort(s, st);
    w->arrived = 0;
    for (int32_t j = 0; j < w->nlanes; j++) {
        int32_t i = (int32_t)(f->linear & ~31u) + j;
        if (s->fib[i].state == F_WARP) rq_push(s, i);
    }
    return w->out[lane];
}

/* ---------------------------------------------------------------- shared memory */

static void *rt_shared(const void *key, size_t bytes, size_t align, int line)
{
    emu_sched *s = &g_s;
    for (int32_t i = 0; i < s->nsites; i++) {
        if (s->sites[i].key != key) continue;
        if (s->sites[i].bytes != bytes)
            fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: NJ_SHARED at line %d asked for %zu bytes, "
                                   "then %zu (the count must be a constant)", s->l->name, line,
                                   s->sites[i].bytes, bytes));
        return g_arena + s->sites[i].off;
    }
    if (align < 16) align = 16;
    if (align & (align - 1)) fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "NJ_SHARED: bad alignment %zu", align));
    size_t off = (s->shared_top + SITE_GAP + align - 1) & ~(align - 1);
    if (s->nsites == EMU_MAX_SITES)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: more than %d NJ_SHARED arrays", s->l->name,
                               EMU_MAX_SITES));
    if (bytes > EMU_STATIC_LIMIT || s->static_used + bytes > EMU_STATIC_LIMIT)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: static shared memory exceeds 48 KiB at NJ_SHARED "
                               "line %d (%zu bytes already, %zu more)", s->l->name, line, s->static_used, bytes));
    if (s->l->shmem + s->static_used + bytes > s->l->max_shared || off + bytes > g_arena_size)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: shared memory exceeds the block limit of %u bytes at "
                               "NJ_SHARED line %d (%u dynamic, %zu static)", s->l->name, s->l->max_shared, line,
                               s->l->shmem, s->static_used + bytes));
    s->sites[s->nsites++] = (emu_site){key, off, bytes};
    s->static_used += bytes;
    s->shared_top = off + bytes;
    ARENA_UNPOISON(g_arena + off, bytes);
    if (s->l->flags & NJ_CTX_EMU_POISON) memset(g_arena + off, 0xFF, bytes);
    return g_arena + off;
}

/* ---------------------------------------------------------------- pools */

static nj_status pool_ensure(int32_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (g_pool && g_pool_count >= n) return NJ_OK;
    if (g_pool) munmap(g_pool, g_pool_per * (size_t)g_pool_count);
    g_pool = NULL;
    g_pool_count = 0;
    size_t per = NJ_EMU_STACK + page;
    void *p = mmap(NULL, per * (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    NJ_RETURN_IF(p == MAP_FAILED, NJ_ERR_OUT_OF_MEMORY, "emulator: cannot map %d fiber stacks", n);
    for (int32_t i = 0; i < n; i++) {
        if (mprotect((char *)p + per * (size_t)i, page, PROT_NONE) != 0) {
            munmap(p, per * (size_t)n);
            return nj_fail(NJ_ERR_OUT_OF_MEMORY, "emulator: cannot protect a stack guard page");
        }
    }
    g_pool = p;
    g_pool_per = per;
    g_pool_count = n;
#ifdef NJ_EMU_ASAN
    g_pool_dirty = true; /* ASan keeps the shadow of unmapped memory: a reused range may hold old redzones */
#else
    g_pool_dirty = false;
#endif
    return NJ_OK;
}

static void pool_clean(void)
{
#ifdef NJ_EMU_ASAN
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int32_t i = 0; i < g_pool_count; i++)
        __asan_unpoison_memory_region(g_pool + g_pool_per * (size_t)i + page, NJ_EMU_STACK);
#endif
    g_pool_dirty = false;
}

static nj_status arena_ensure(size_t bytes)
{
    bytes = (bytes + 4095) & ~(size_t)4095;
    if (bytes == 0) bytes = 4096;
    if (g_arena && g_arena_size >= bytes) return NJ_OK;
    free(g_arena);
    g_arena = aligned_alloc(4096, bytes);
    g_arena_size = g_arena ? bytes : 0;
    NJ_RETURN_IF(!g_arena, NJ_ERR_OUT_OF_MEMORY, "emulator: cannot allocate %zu bytes of shared memory", bytes);
    /* never zero: a kernel that relies on zero-initialized shared memory is wrong on a GPU too */
    memset(g_arena, 0xA5, bytes);
    return NJ_OK;
}

void nj_emu_retain(void)
{
    pthread_mutex_lock(&g_lock);
    g_refs++;
    pthread_mutex_unlock(&g_lock);
}

void nj_emu_release(void)
{
    pthread_mutex_lock(&g_lock);
    if (--g_refs == 0) {
        if (g_pool) munmap(g_pool, g_pool_per * (size_t)g_pool_count);
        free(g_arena);
        g_pool = NULL;
        g_pool_count = 0;
        g_arena = NULL;
        g_arena_size = 0;
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------- launch */

static void setup_threads(emu_sched *s)
{
    const nj_emu_launch *l = s->l;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    s->nthr = (int32_t)(l->block[0] * l->block[1] * l->block[2]);
    s->nwarps = (s->nthr + 31) / 32;
    for (int32_t i = 0; i < s->nthr; i++) {
        emu_fiber *f = &s->fib[i];
        uint32_t u = (uint32_t)i;
        f->linear = u;
        f->pub.tid.x = u % l->block[0];
        f->pub.tid.y = u / l->block[0] % l->block[1];
        f->pub.tid.z = u / (l->block[0] * l->block[1]);
        f->stack_lo = g_pool + g_pool_per * (size_t)i + page;
        f->asan_fake = NULL;
    }
    for (int32_t w = 0; w < s->nwarps; w++) {
        s->warps[w].nlanes = (w + 1) * 32 <= s->nthr ? 32 : s->nthr - w * 32;
    }
}

static nj_status run_block(emu_sched *s, uint32_t bx, uint32_t by, uint32_t bz)
{
    const nj_emu_launch *l = s->l;
    g_rt.bid = (emu_u3){bx, by, bz};
    s->ndone = s->nbar = 0;
    s->rq_head = s->rq_len = 0;
    s->nsites = 0;
    s->static_used = 0;
    s->shared_top = ((size_t)l->shmem + 15) & ~(size_t)15;
    ARENA_POISON(g_arena, g_arena_size);
    ARENA_UNPOISON(g_arena, l->shmem);
    if (l->flags & NJ_CTX_EMU_POISON) memset(g_arena, 0xFF, l->shmem);
    uint64_t lin = bx + (uint64_t)l->grid[0] * (by + (uint64_t)l->grid[1] * bz);
    s->rng = l->seed ^ (lin * 0xD1B54A32D192ED03ull);
    for (int32_t w = 0; w < s->nwarps; w++) s->warps[w].arrived = 0;
    for (int32_t i = 0; i < s->nthr; i++) {
        ctx_init(&s->fib[i]);
        rq_push(s, i);
    }
    for (;;) {
        while (s->rq_len > 0) {
            to_fiber(s, rq_pop(s));
            if (s->err != NJ_OK) return s->err;
        }
        if (s->ndone == s->nthr) return NJ_OK;
        NJ_TRY(resolve_stall(s));
    }
}

nj_status nj_emu_run(const nj_emu_launch *l)
{
    uint32_t n = l->block[0] * l->block[1] * l->block[2];
    NJ_RETURN_IF(n == 0 || n > EMU_MAX_THREADS, NJ_ERR_EMULATOR, "emulator: %u threads per block", n);
    pthread_mutex_lock(&g_lock);
    emu_sched *s = &g_s;
    nj_status st = pool_ensure((int32_t)n);
    if (st == NJ_OK) st = arena_ensure((size_t)l->max_shared + EMU_MAX_SITES * (SITE_GAP + 16u));
    if (st == NJ_OK && g_pool_dirty) pool_clean();
    if (st == NJ_OK) {
        s->l = l;
        s->err = NJ_OK;
        setup_threads(s);
        g_rt.bdim = (emu_u3){l->block[0], l->block[1], l->block[2]};
        g_rt.gdim = (emu_u3){l->grid[0], l->grid[1], l->grid[2]};
        g_rt.dyn_shared = g_arena;
        for (uint32_t z = 0; z < l->grid[2] && st == NJ_OK; z++)
            for (uint32_t y = 0; y < l->grid[1] && st == NJ_OK; y++)
                for (uint32_t x = 0; x < l->grid[0] && st == NJ_OK; x++) st = run_block(s, x, y, z);
        if (st != NJ_OK) g_pool_dirty = true;
        ARENA_UNPOISON(g_arena, g_arena_size);
        g_rt.cur = NULL;
        s->l = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}
