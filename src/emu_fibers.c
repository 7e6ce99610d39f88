/* Emulator core: each block's threads run as fibers on the launching thread. A fiber runs until it
 * blocks (barrier, warp operation) or returns; the scheduler then picks the next runnable fiber, in
 * thread order or, with NJ_CTX_EMU_SHUFFLE, in a seeded random order (see rq_uniform). When nothing is
 * runnable the scheduler either releases a barrier every thread has reached or reports divergence/deadlock.
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
#define EMU_MAX_SITES 64
#define EMU_STATIC_LIMIT (48u * 1024u) /* CUDA's limit on static __shared__ */
#define EMU_MAX_CLUSTER 16           /* blocks per cluster (CUDA: 8 portable, 16 non-portable) */

/* Twin of nj_emu_runtime in templates/emu/emu.h (checked by size and NJ_EMU_ABI_VERSION at bind). */
typedef struct emu_u3 {
    uint32_t x, y, z;
} emu_u3;
typedef struct emu_thread_pub {
    emu_u3 tid, bid;
    uint32_t crank; /* rank of the block in its cluster */
    void *dyn;      /* the block's dynamic shared memory */
} emu_thread_pub;
typedef struct nj_emu_runtime {
    unsigned abi, struct_size;
    emu_thread_pub *cur;
    emu_u3 bdim, gdim, cdim;
    void (*sync)(int line);
    void *(*shared)(const void *key, size_t bytes, size_t align, int line);
    unsigned long long (*warp)(int kind, unsigned mask, unsigned long long v, int arg, int width, int line);
    void (*csync)(int line);
    void *(*cmap)(const void *p, unsigned rank, int line);
    void (*misaligned)(const void *p, unsigned bytes, int line);
    void (*access)(const void *p, unsigned bytes, int store, const void *site);
    void (*unmet)(const int *p, int want, int line);
} nj_emu_runtime;

/* Warp operation kinds, as in emu.h. */
enum { W_SYNC = 0, W_IDX, W_XOR, W_DOWN, W_UP, W_BALLOT, W_ANY, W_ALL };
static const char *const w_names[] = {"__syncwarp",       "__shfl_sync",   "__shfl_xor_sync",
                                      "__shfl_down_sync", "__shfl_up_sync", "__ballot_sync",
                                      "__any_sync",       "__all_sync"};

/* F_BAR: at __syncthreads; F_CBAR: at nj_cluster_sync; F_WARP: at a warp operation. */
enum { F_RUNNABLE = 0, F_BAR, F_CBAR, F_WARP, F_DONE, F_DEAD };

typedef struct emu_fiber {
    emu_thread_pub pub;
    uint32_t linear; /* thread index in its block */
    int32_t block;   /* block index in the cluster (== crank) */
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

/* One block of the cluster being run: its shared memory and static allocations. */
typedef struct emu_block {
    char *arena;
    size_t shared_top, static_used;
    int32_t nsites, ndone;
    emu_site sites[EMU_MAX_SITES];
} emu_block;

/* All launch state lives here; g_lock serializes launches because kernels reach it through g_rt.
 * The fibers of one cluster (one block when there are no clusters) run together: fiber i is thread
 * i % nthr of block i / nthr. */
typedef struct emu_sched {
    const nj_emu_launch *l;
    int32_t nthr, nwarps, nblocks, nfib, ndone;
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
    size_t arena_per; /* bytes of arena per block */
    int32_t *runq;    /* nfib entries */
    emu_warp *warps;  /* nblocks * nwarps */
    emu_fiber *fib;   /* nfib */
    emu_block blocks[EMU_MAX_CLUSTER];
} emu_sched;

static emu_sched g_s;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_switches;
static int32_t g_refs;

/* Fiber records, stacks (guard page below each) and shared arenas, kept across launches. */
static int32_t g_fib_cap;
static char *g_pool;
static size_t g_pool_per;
static int32_t g_pool_count;
static bool g_pool_dirty; /* an aborted launch left frames (and ASan redzones) on the stacks */
static char *g_arena;
static size_t g_arena_size;

static void rt_sync(int line);
static void *rt_shared(const void *key, size_t bytes, size_t align, int line);
static unsigned long long rt_warp(int kind, unsigned mask, unsigned long long v, int arg, int width, int line);
static void rt_csync(int line);
static void *rt_cmap(const void *p, unsigned rank, int line);
static void rt_misaligned(const void *p, unsigned bytes, int line);
static void rt_access(const void *p, unsigned bytes, int store, const void *site);
static void rt_unmet(const int *p, int want, int line);

static nj_emu_runtime g_rt = {NJ_EMU_ABI_VERSION, sizeof(nj_emu_runtime), NULL, {0, 0, 0}, {0, 0, 0}, {1, 1, 1},
                              rt_sync, rt_shared, rt_warp, rt_csync, rt_cmap, rt_misaligned, rt_access, rt_unmet};

/* Access counting (emu_fibers.h): only kernels built for it call rt_access. */
static bool g_count_build; /* read when an emulator backend is created */
static const nj_emu_counter *g_counter;

void nj_emu_count_build(bool on) { g_count_build = on; }
bool nj_emu_count_building(void) { return g_count_build; }
void nj_emu_set_counter(const nj_emu_counter *c)
{
    pthread_mutex_lock(&g_lock);
    g_counter = c;
    pthread_mutex_unlock(&g_lock);
}

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
    emu_block *bk = &s->blocks[f->block];
    if (++bk->ndone == s->nthr && s->nblocks > 1) {
        /* a block's shared memory ends with it: other blocks of the cluster must not map it any more */
        ARENA_UNPOISON(bk->arena, bk->shared_top);
        if (s->l->flags & NJ_CTX_EMU_POISON) memset(bk->arena, 0xFF, bk->shared_top);
        ARENA_POISON(bk->arena, s->arena_per);
    }
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
    s->runq[(s->rq_head + s->rq_len) % s->nfib] = i;
    s->rq_len++;
    s->fib[i].state = F_RUNNABLE;
}

/* Shuffling has two strategies, chosen per launch by the seed: picking any runnable fiber uniformly
 * (good at thread-level races), or releasing fibers in a random order of blocks, then warps, then lanes,
 * and running them in that order (good at races between whole warps or blocks, which a uniform pick
 * almost never orders completely). */
static bool rq_uniform(const emu_sched *s) { return (s->l->flags & NJ_CTX_EMU_SHUFFLE) && (s->l->seed & 1) == 0; }
static bool rq_grouped(const emu_sched *s) { return (s->l->flags & NJ_CTX_EMU_SHUFFLE) && (s->l->seed & 1) == 1; }

static void shuffle_ints(emu_sched *s, int32_t *v, int32_t n)
{
    for (int32_t i = 0; i < n; i++) v[i] = i;
    if (!rq_grouped(s)) return;
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)(rng_next(&s->rng) % (uint64_t)(i + 1)), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* Makes the waiting lanes of a warp (first fiber `first`) runnable. */
static void release_warp(emu_sched *s, int32_t first, int32_t nlanes)
{
    int32_t lanes[32];
    shuffle_ints(s, lanes, nlanes);
    for (int32_t j = 0; j < nlanes; j++)
        if (s->fib[first + lanes[j]].state == F_WARP) rq_push(s, first + lanes[j]);
}

/* Makes blocks [b0, b0 + nb) of the cluster runnable, in order or grouped-random. */
static void release_blocks(emu_sched *s, int32_t b0, int32_t nb)
{
    int32_t bo[EMU_MAX_CLUSTER], wo[EMU_MAX_THREADS / 32], lo[32];
    shuffle_ints(s, bo, nb);
    for (int32_t bi = 0; bi < nb; bi++) {
        int32_t base = (b0 + bo[bi]) * s->nthr;
        shuffle_ints(s, wo, s->nwarps);
        for (int32_t wi = 0; wi < s->nwarps; wi++) {
            int32_t first = base + wo[wi] * 32, nl = s->warps[(b0 + bo[bi]) * s->nwarps + wo[wi]].nlanes;
            shuffle_ints(s, lo, nl);
            for (int32_t j = 0; j < nl; j++) rq_push(s, first + lo[j]);
        }
    }
}

static emu_fiber *rq_pop(emu_sched *s)
{
    if (rq_uniform(s)) {
        int32_t k = (int32_t)(rng_next(&s->rng) % (uint64_t)s->rq_len);
        int32_t a = s->rq_head, b = (s->rq_head + k) % s->nfib, t = s->runq[a];
        s->runq[a] = s->runq[b];
        s->runq[b] = t;
    }
    int32_t i = s->runq[s->rq_head];
    s->rq_head = (s->rq_head + 1) % s->nfib;
    s->rq_len--;
    return &s->fib[i];
}

/* ---------------------------------------------------------------- messages */

static emu_warp *warp_of(emu_sched *s, const emu_fiber *f)
{
    return &s->warps[f->block * s->nwarps + (int32_t)(f->linear / 32)];
}

static const char *thread_name(const emu_fiber *f, char *buf, size_t cap)
{
    snprintf(buf, cap, "thread (%u,%u,%u) of block (%u,%u,%u)", f->pub.tid.x, f->pub.tid.y, f->pub.tid.z,
             f->pub.bid.x, f->pub.bid.y, f->pub.bid.z);
    return buf;
}

static const char *where(emu_sched *s, const emu_fiber *f, char *buf, size_t cap)
{
    switch (f->state) {
    case F_BAR: snprintf(buf, cap, "at __syncthreads line %d", f->line); break;
    case F_CBAR: snprintf(buf, cap, "at nj_cluster_sync line %d", f->line); break;
    case F_WARP: snprintf(buf, cap, "at %s line %d", w_names[warp_of(s, f)->kind], f->line); break;
    case F_DONE: snprintf(buf, cap, "exited"); break;
    default: snprintf(buf, cap, "running"); break;
    }
    return buf;
}

/* "<what> in kernel K: thread A of block B <where A> while thread C of block D <where C>" */
static nj_status report_pair(emu_sched *s, const char *what, const emu_fiber *a, const emu_fiber *c)
{
    char na[80], wa[64], nc[80], wc[64];
    return nj_fail(NJ_ERR_EMULATOR, "%s in kernel %s: %s %s while %s %s", what, s->l->name,
                   thread_name(a, na, sizeof na), where(s, a, wa, sizeof wa), thread_name(c, nc, sizeof nc),
                   where(s, c, wc, sizeof wc));
}

/* ---------------------------------------------------------------- barriers */

static void wait_here(emu_sched *s, int state, int line)
{
    emu_fiber *f = s->cur;
    f->state = state;
    f->line = line;
    to_sched(s, f, false);
}

static void rt_sync(int line) { wait_here(&g_s, F_BAR, line); }
static void rt_csync(int line) { wait_here(&g_s, F_CBAR, line); }

/* A warp with a waiting lane and nothing runnable can never complete: name a lane that is elsewhere. */
static nj_status report_warp(emu_sched *s, emu_fiber *f)
{
    emu_fiber *lanes = f - (f->linear & 31u);
    for (int32_t j = 0; j < warp_of(s, f)->nlanes; j++)
        if (lanes[j].state != F_WARP) return report_pair(s, "warp operation deadlock", f, &lanes[j]);
    return nj_fail(NJ_ERR_INTERNAL, "emulator: complete warp left waiting");
}

/* Block b's threads when none is runnable: all at one __syncthreads -> released (*released = 1). A block
 * barrier that some thread of the block misses (another barrier, exited, at the cluster barrier) is an
 * error: CUDA requires __syncthreads to be reached by the whole block. */
static nj_status resolve_block(emu_sched *s, int32_t b, bool *released)
{
    emu_fiber *fb = s->fib + (size_t)b * (size_t)s->nthr, *bar = NULL, *other = NULL;
    for (int32_t i = 0; i < s->nthr; i++) {
        if (fb[i].state == F_BAR && !bar) bar = &fb[i];
        else if (!other && (fb[i].state != F_BAR || (bar && fb[i].line != bar->line))) other = &fb[i];
    }
    if (!bar) return NJ_OK;
    if (!other) {
        release_blocks(s, b, 1);
        *released = true;
        return NJ_OK;
    }
    return report_pair(s, "barrier divergence", bar, other);
}

/* Nothing is runnable: release a barrier that all its threads reached, or report why none can be. */
static nj_status resolve_stall(emu_sched *s)
{
    for (int32_t i = 0; i < s->nfib; i++)
        if (s->fib[i].state == F_WARP) return report_warp(s, &s->fib[i]);
    bool released = false;
    for (int32_t b = 0; b < s->nblocks; b++) NJ_TRY(resolve_block(s, b, &released));
    if (released) return NJ_OK;
    /* only cluster barriers and exited threads are left: every thread of the cluster must be at one */
    emu_fiber *cb = NULL, *other = NULL;
    for (int32_t i = 0; i < s->nfib; i++) {
        if (s->fib[i].state == F_CBAR && !cb) cb = &s->fib[i];
        else if (!other && (s->fib[i].state != F_CBAR || (cb && s->fib[i].line != cb->line))) other = &s->fib[i];
    }
    NJ_RETURN_IF(!cb, NJ_ERR_INTERNAL, "emulator: no runnable thread and none waiting");
    if (other) return report_pair(s, "cluster barrier divergence", cb, other);
    release_blocks(s, 0, s->nblocks);
    return NJ_OK;
}

/* ---------------------------------------------------------------- warp operations */

static nj_status warp_compute(emu_sched *s, emu_warp *w, const emu_fiber *f)
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
            char n[80];
            return nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s at %s line %d reads lane %d, which does not exist "
                           "(the warp has %d lanes)", s->l->name, thread_name(f, n, sizeof n), w_names[w->kind],
                           w->line, src, w->nlanes);
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
    char n[80], no[80];
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
    emu_fiber *lanes = f - (f->linear & 31u);
    for (int32_t j = 0; j < w->nlanes; j++) {
        if (lanes[j].state == F_WARP)
            return nj_fail(NJ_ERR_EMULATOR, "warp divergence in kernel %s: %s at %s line %d (width %d) while %s "
                           "at %s line %d (width %d)", s->l->name, thread_name(f, n, sizeof n), w_names[kind], line,
                           width, thread_name(&lanes[j], no, sizeof no), w_names[w->kind], w->line, w->width);
    }
    return nj_fail(NJ_ERR_INTERNAL, "emulator: warp arrivals without a waiting lane");
}

/* The lane deposits its value; the last lane to arrive computes every lane's result and wakes the others.
 * A lane reads its result before it can arrive at the next operation, so one buffer per warp suffices. */
static unsigned long long rt_warp(int kind, unsigned mask, unsigned long long v, int arg, int width, int line)
{
    emu_sched *s = &g_s;
    emu_fiber *f = s->cur;
    emu_warp *w = warp_of(s, f);
    uint32_t lane = f->linear & 31;
    if (kind < W_SYNC || kind > W_ALL) fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "unknown warp operation %d", kind));
    nj_status st = warp_check(s, f, w, kind, mask, width, line);
    if (st != NJ_OK) fiber_abort(s, st);
    w->val[lane] = v;
    w->arg[lane] = arg;
    if (++w->arrived < w->nlanes) {
        wait_here(s, F_WARP, line);
        return w->out[lane];
    }
    st = warp_compute(s, w, f);
    if (st != NJ_OK) fiber_abort(s, st);
    w->arrived = 0;
    release_warp(s, (int32_t)(f - s->fib) - (int32_t)lane, w->nlanes);
    return w->out[lane];
}

/* ---------------------------------------------------------------- shared memory */

/* Static shared arrays: the first thread of a block to reach a declaration allocates it; the others get
 * the same array (the key is the address of a static object at the declaration). */
static void *rt_shared(const void *key, size_t bytes, size_t align, int line)
{
    emu_sched *s = &g_s;
    emu_block *bk = &s->blocks[s->cur->block];
    for (int32_t i = 0; i < bk->nsites; i++) {
        if (bk->sites[i].key != key) continue;
        if (bk->sites[i].bytes != bytes)
            fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: NJ_SHARED at line %d asked for %zu bytes, "
                                   "then %zu (the count must be a constant)", s->l->name, line,
                                   bk->sites[i].bytes, bytes));
        return bk->arena + bk->sites[i].off;
    }
    if (align < 16) align = 16;
    if (align & (align - 1)) fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "NJ_SHARED: bad alignment %zu", align));
    size_t off = (bk->shared_top + SITE_GAP + align - 1) & ~(align - 1);
    if (bk->nsites == EMU_MAX_SITES)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: more than %d NJ_SHARED arrays", s->l->name,
                               EMU_MAX_SITES));
    if (bytes > EMU_STATIC_LIMIT || bk->static_used + bytes > EMU_STATIC_LIMIT)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: static shared memory exceeds 48 KiB at NJ_SHARED "
                               "line %d (%zu bytes already, %zu more)", s->l->name, line, bk->static_used, bytes));
    if (s->l->shmem + bk->static_used + bytes > s->l->max_shared || off + bytes > s->arena_per)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: shared memory exceeds the block limit of %u bytes at "
                               "NJ_SHARED line %d (%u dynamic, %zu static)", s->l->name, s->l->max_shared, line,
                               s->l->shmem, bk->static_used + bytes));
    bk->sites[bk->nsites++] = (emu_site){key, off, bytes};
    bk->static_used += bytes;
    bk->shared_top = off + bytes;
    ARENA_UNPOISON(bk->arena + off, bytes);
    if (s->l->flags & NJ_CTX_EMU_POISON) memset(bk->arena + off, 0xFF, bytes);
    return bk->arena + off;
}

/* nj_cluster_map: the same shared-memory location in block `rank` of the cluster. */
static void *rt_cmap(const void *p, unsigned rank, int line)
{
    emu_sched *s = &g_s;
    emu_fiber *f = s->cur;
    const char *base = s->blocks[f->block].arena;
    char n[80];
    if (rank >= (unsigned)s->nblocks)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s maps to cluster rank %u at line %d (the cluster "
                               "has %d blocks)", s->l->name, thread_name(f, n, sizeof n), rank, line, s->nblocks));
    if ((const char *)p < base || (const char *)p >= base + s->arena_per)
        fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s passes a pointer outside its block's shared "
                               "memory to nj_cluster_map at line %d", s->l->name, thread_name(f, n, sizeof n), line));
    return s->blocks[rank].arena + ((const char *)p - base);
}

/* A vector access at an address that is not a multiple of its size: a GPU stops the kernel with
 * "misaligned address"; so does the emulator. */
static void rt_misaligned(const void *p, unsigned bytes, int line)
{
    emu_sched *s = &g_s;
    char n[80];
    fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s makes a misaligned %u-byte vector access at %p (line %d)",
                           s->l->name, thread_name(s->cur, n, sizeof n), bytes, p, line));
}

/* A pipelined launch's block waits on a counter no block before it raised far enough: on a GPU it would
 * spin for ever (or on blocks the hardware dispatched later: a planner or template bug either way). The
 * model's counting runs skip the blocks that raise counters: there the wait passes. */
static void rt_unmet(const int *p, int want, int line)
{
    emu_sched *s = &g_s;
    if (g_counter) return;
    char n[80];
    fiber_abort(s, nj_fail(NJ_ERR_EMULATOR, "kernel %s: %s waits at line %d for the counter at %p to reach %d (it "
                           "holds %d, and no earlier block will raise it: a GPU would hang)",
                           s->l->name, thread_name(s->cur, n, sizeof n), line, (const void *)p, want, *p));
}

/* ---------------------------------------------------------------- pools */

static emu_fiber *g_fibs;
static int32_t *g_runq;
static emu_warp *g_warps;

static void fibers_free(void)
{
    free(g_fibs);
    free(g_runq);
    free(g_warps);
    g_fibs = NULL;
    g_runq = NULL;
    g_warps = NULL;
    g_fib_cap = 0;
}

static nj_status fibers_ensure(int32_t n)
{
    if (g_fib_cap >= n) return NJ_OK;
    fibers_free();
    g_fibs = calloc((size_t)n, sizeof *g_fibs);
    g_runq = calloc((size_t)n, sizeof *g_runq);
    g_warps = calloc((size_t)(n / 32 + EMU_MAX_CLUSTER), sizeof *g_warps); /* each block's last warp may be partial */
    if (!g_fibs || !g_runq || !g_warps) {
        fibers_free();
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "emulator: cannot allocate %d fibers", n);
    }
    g_fib_cap = n;
    return NJ_OK;
}

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
        fibers_free();
        g_pool = NULL;
        g_pool_count = 0;
        g_arena = NULL;
        g_arena_size = 0;
    }
    pthread_mutex_unlock(&g_lock);
}

static void rt_access(const void *p, unsigned bytes, int store, const void *site)
{
    const nj_emu_counter *k = g_counter;
    const emu_fiber *f = g_s.cur;
    /* the fiber's own stack (its locals, the kernel arguments) and shared memory are not global memory */
    if (!k || !f || ((const char *)p >= f->stack_lo && (const char *)p < f->stack_lo + NJ_EMU_STACK) ||
        ((const char *)p >= g_arena && (const char *)p < g_arena + g_arena_size))
        return;
    k->access(k->user, (uint32_t)(f->block * g_s.nthr) + f->linear, p, bytes, store, site);
}

/* ---------------------------------------------------------------- launch */

static void setup_fibers(emu_sched *s)
{
    const nj_emu_launch *l = s->l;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int32_t i = 0; i < s->nfib; i++) {
        emu_fiber *f = &s->fib[i];
        uint32_t u = (uint32_t)(i % s->nthr);
        f->linear = u;
        f->block = i / s->nthr;
        f->pub.tid = (emu_u3){u % l->block[0], u / l->block[0] % l->block[1], u / (l->block[0] * l->block[1])};
        f->pub.crank = (uint32_t)f->block;
        f->stack_lo = g_pool + g_pool_per * (size_t)i + page;
        f->asan_fake = NULL;
    }
    for (int32_t b = 0; b < s->nblocks; b++)
        for (int32_t w = 0; w < s->nwarps; w++)
            s->warps[b * s->nwarps + w].nlanes = (w + 1) * 32 <= s->nthr ? 32 : s->nthr - w * 32;
}

/* Places the cluster's blocks (grid coordinates, shared memory) for cluster c. */
static void place_blocks(emu_sched *s, const uint32_t c[3])
{
    const nj_emu_launch *l = s->l;
    for (int32_t b = 0; b < s->nblocks; b++) {
        uint32_t u = (uint32_t)b;
        emu_u3 bid = {c[0] * l->cluster[0] + u % l->cluster[0],
                      c[1] * l->cluster[1] + u / l->cluster[0] % l->cluster[1],
                      c[2] * l->cluster[2] + u / (l->cluster[0] * l->cluster[1])};
        emu_block *bk = &s->blocks[b];
        bk->arena = g_arena + s->arena_per * (size_t)b;
        bk->nsites = bk->ndone = 0;
        bk->static_used = 0;
        bk->shared_top = ((size_t)l->shmem + 15) & ~(size_t)15;
        ARENA_POISON(bk->arena, s->arena_per);
        ARENA_UNPOISON(bk->arena, l->shmem);
        if (l->flags & NJ_CTX_EMU_POISON) memset(bk->arena, 0xFF, l->shmem);
        emu_fiber *fb = s->fib + (size_t)b * (size_t)s->nthr;
        for (int32_t i = 0; i < s->nthr; i++) {
            fb[i].pub.bid = bid;
            fb[i].pub.dyn = bk->arena;
        }
    }
}

static nj_status run_cluster(emu_sched *s, const uint32_t c[3])
{
    const nj_emu_launch *l = s->l;
    place_blocks(s, c);
    uint64_t nx = l->grid[0] / l->cluster[0], ny = l->grid[1] / l->cluster[1];
    uint64_t lin = c[0] + nx * (c[1] + ny * c[2]);
    s->rng = l->seed ^ (lin * 0xD1B54A32D192ED03ull);
    s->ndone = 0;
    s->rq_head = s->rq_len = 0;
    for (int32_t w = 0; w < s->nblocks * s->nwarps; w++) s->warps[w].arrived = 0;
    for (int32_t i = 0; i < s->nfib; i++) ctx_init(&s->fib[i]);
    release_blocks(s, 0, s->nblocks);
    for (;;) {
        while (s->rq_len > 0) {
            to_fiber(s, rq_pop(s));
            if (s->err != NJ_OK) return s->err;
        }
        if (s->ndone == s->nfib) return NJ_OK;
        NJ_TRY(resolve_stall(s));
    }
}

static nj_status run_grid(emu_sched *s)
{
    const nj_emu_launch *l = s->l;
    const nj_emu_counter *k = g_counter;
    uint32_t n[3] = {l->grid[0] / l->cluster[0], l->grid[1] / l->cluster[1], l->grid[2] / l->cluster[2]}, c[3];
    uint64_t lin = 0, total = (uint64_t)n[0] * n[1] * n[2];
    if (k) k->launch(k->user, l);
    for (c[2] = 0; c[2] < n[2]; c[2]++)
        for (c[1] = 0; c[1] < n[1]; c[1]++)
            for (c[0] = 0; c[0] < n[0]; c[0]++, lin++) {
                if (k && !k->want(k->user, lin, total)) continue;
                NJ_TRY(run_cluster(s, c));
                if (k) k->cluster_done(k->user, lin);
            }
    return NJ_OK;
}

nj_status nj_emu_run(const nj_emu_launch *l)
{
    uint32_t n = l->block[0] * l->block[1] * l->block[2], nc = l->cluster[0] * l->cluster[1] * l->cluster[2];
    NJ_RETURN_IF(n == 0 || n > EMU_MAX_THREADS, NJ_ERR_EMULATOR, "emulator: %u threads per block", n);
    NJ_RETURN_IF(nc == 0 || nc > EMU_MAX_CLUSTER, NJ_ERR_EMULATOR, "kernel %s: cluster of %u blocks (at most %d)",
                 l->name, nc, EMU_MAX_CLUSTER);
    NJ_RETURN_IF(l->grid[0] % l->cluster[0] || l->grid[1] % l->cluster[1] || l->grid[2] % l->cluster[2],
                 NJ_ERR_EMULATOR, "kernel %s: grid (%u,%u,%u) is not a multiple of the cluster (%u,%u,%u)", l->name,
                 l->grid[0], l->grid[1], l->grid[2], l->cluster[0], l->cluster[1], l->cluster[2]);
    size_t per = ((size_t)l->max_shared + EMU_MAX_SITES * (SITE_GAP + 16u) + 4095) & ~(size_t)4095;
    pthread_mutex_lock(&g_lock);
    emu_sched *s = &g_s;
    int32_t nfib = (int32_t)(n * nc);
    nj_status st = fibers_ensure(nfib);
    if (st == NJ_OK) st = pool_ensure(nfib);
    if (st == NJ_OK) st = arena_ensure(per * nc);
    if (st == NJ_OK && g_pool_dirty) pool_clean();
    if (st == NJ_OK) {
        memset(s, 0, sizeof *s); /* not a compound literal: it would be a large temporary on the caller's stack */
        s->l = l;
        s->nthr = (int32_t)n;
        s->nwarps = (int32_t)(n + 31) / 32;
        s->nblocks = (int32_t)nc;
        s->nfib = nfib;
        s->arena_per = per;
        s->runq = g_runq;
        s->warps = g_warps;
        s->fib = g_fibs;
        setup_fibers(s);
        g_rt.bdim = (emu_u3){l->block[0], l->block[1], l->block[2]};
        g_rt.gdim = (emu_u3){l->grid[0], l->grid[1], l->grid[2]};
        g_rt.cdim = (emu_u3){l->cluster[0], l->cluster[1], l->cluster[2]};
        st = run_grid(s);
        if (st != NJ_OK) g_pool_dirty = true;
        ARENA_UNPOISON(g_arena, g_arena_size);
        g_rt.cur = NULL;
        s->l = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return st;
}
