/* NVRTC compilation: source -> cubin (or PTX for a GPU newer than this NVRTC) plus the ptxas resource report.
 * NVRTC is loaded with dlopen on first use and never linked, so the library still loads on a machine without
 * the toolkit and reports NJ_ERR_NVRTC_MISSING there. */
#include "compile.h"

#include <nvrtc.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef NJ_CUDA_HOME
#define NJ_CUDA_HOME "/usr/local/cuda"
#endif

/* Every NVRTC function used, one line each: name, return type, parameters. */
#define NJ_NVRTC_FUNCS(X)                                                                         \
    X(nvrtcGetErrorString, const char *, (nvrtcResult r))                                         \
    X(nvrtcVersion, nvrtcResult, (int *major, int *minor))                                        \
    X(nvrtcGetNumSupportedArchs, nvrtcResult, (int *n))                                           \
    X(nvrtcGetSupportedArchs, nvrtcResult, (int *archs))                                          \
    X(nvrtcCreateProgram, nvrtcResult,                                                            \
      (nvrtcProgram * p, const char *src, const char *name, int nh, const char *const *h,         \
       const char *const *hn))                                                                    \
    X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram * p))                                       \
    X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram p, int nopt, const char *const *opts))      \
    X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram p, size_t *n))                           \
    X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram p, char *log))                               \
    X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram p, size_t *n))                                \
    X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram p, char *cubin))                                  \
    X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram p, size_t *n))                                  \
    X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram p, char *ptx))

typedef struct nj_nvrtc_api {
#define NJ_NVRTC_FIELD_(name, ret, args) ret(*name) args;
    NJ_NVRTC_FUNCS(NJ_NVRTC_FIELD_)
#undef NJ_NVRTC_FIELD_
} nj_nvrtc_api;

#define NJ_MAX_ARCHS 64

/* Loaded once per process; what the load found (or why it failed) is kept for every later caller. */
static struct {
    pthread_once_t once;
    nj_status status;
    char error[2048];
    char path[1024]; /* the library that opened */
    nj_nvrtc_api api;
    char version[32];
    int narchs;
    int archs[NJ_MAX_ARCHS];
} nj_nv = {.once = PTHREAD_ONCE_INIT};

/* Bounds the cores compiles use: each NVRTC compile holds a few hundred MB at peak and a core, and one of
 * several kernels takes what is idle for its others (nj_sem_extra). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t limit, active, peak;
} nj_sem = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* -minimal skips the runtime headers NVRTC implicitly includes (measured: ~10% faster); an NVRTC that
 * rejects it makes us drop it for the rest of the process. */
static atomic_int nj_use_minimal = 1;
/* --split-compile (NVRTC 12.1 on): NVVM and ptxas work on a program's kernels on that many threads. A
 * channels-last GroupNorm forward (three kernels) takes 120 ms instead of 157 on two idle cores; a lone
 * kernel gains nothing and loses ~3 ms, so only programs of several kernels ask for it. */
static atomic_int nj_use_split = 1;

/* The one checker for nvrtc* results. */
static nj_status nj_nvrtc_check(nvrtcResult r, const char *call, const char *what)
{
    if (r == NVRTC_SUCCESS) return NJ_OK;
    const char *msg = nj_nv.api.nvrtcGetErrorString ? nj_nv.api.nvrtcGetErrorString(r) : "?";
    return nj_fail(NJ_ERR_COMPILE, "%s failed (%s, code %d) while compiling %s", call, msg, (int)r, what);
}
#define NJ_NVRTC_CHECK(fn, what, ...) NJ_TRY(nj_nvrtc_check(nj_nv.api.fn(__VA_ARGS__), #fn, what))

/* Lists each failed path for the error message and remembers the one that opened. */
static void *nj_nvrtc_try_open(const char *path, nj_buf *tried)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h)
        snprintf(nj_nv.path, sizeof nj_nv.path, "%s", path);
    else
        nj_buf_printf(tried, "%s%s", tried->len ? ", " : "", path);
    return h;
}

/* $CUDA_HOME/lib64: for installs that are not on the loader's search path. */
static void *nj_nvrtc_open_cuda_home(nj_buf *tried)
{
    const char *home = getenv("CUDA_HOME");
    if (!home || !home[0]) home = NJ_CUDA_HOME;
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    char path[1024];
    for (size_t i = 0; i < NJ_ARRAY_LEN(names); i++) {
        snprintf(path, sizeof path, "%s/lib64/%s", home, names[i]);
        void *h = nj_nvrtc_try_open(path, tried);
        if (h) return h;
    }
    return NULL;
}

static void *nj_nvrtc_open(nj_buf *tried)
{
    const char *forced = getenv("NORMJIT_LIBNVRTC"); /* tests and unusual installs */
    if (forced && forced[0]) return nj_nvrtc_try_open(forced, tried);
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (size_t i = 0; i < NJ_ARRAY_LEN(names); i++) {
        void *h = nj_nvrtc_try_open(names[i], tried);
        if (h) return h;
    }
    return nj_nvrtc_open_cuda_home(tried);
}

static nj_status nj_nvrtc_resolve(void *h, const char *path)
{
#define NJ_NVRTC_SYM_(name, ret, args)                                                             \
    *(void **)&nj_nv.api.name = dlsym(h, #name);                                                   \
    if (!nj_nv.api.name)                                                                           \
        return nj_fail(NJ_ERR_NVRTC_MISSING, "%s is not a usable NVRTC: it lacks %s", path, #name);
    NJ_NVRTC_FUNCS(NJ_NVRTC_SYM_)
#undef NJ_NVRTC_SYM_
    return NJ_OK;
}

static nj_status nj_nvrtc_query(void)
{
    int major = 0, minor = 0, n = 0;
    NJ_NVRTC_CHECK(nvrtcVersion, "(version query)", &major, &minor);
    snprintf(nj_nv.version, sizeof nj_nv.version, "nvrtc-%d.%d", major, minor);
    NJ_NVRTC_CHECK(nvrtcGetNumSupportedArchs, "(arch query)", &n);
    NJ_RETURN_IF(n <= 0 || n > NJ_MAX_ARCHS, NJ_ERR_NVRTC_MISSING, "NVRTC reports %d supported archs", n);
    NJ_NVRTC_CHECK(nvrtcGetSupportedArchs, "(arch query)", nj_nv.archs);
    nj_nv.narchs = n;
    return NJ_OK;
}

static void nj_nvrtc_load_once(void)
{
    nj_buf tried;
    nj_buf_init(&tried);
    void *h = nj_nvrtc_open(&tried);
    if (!h)
        nj_nv.status = nj_fail(NJ_ERR_NVRTC_MISSING, "NVRTC not found; tried: %s (set CUDA_HOME or NORMJIT_LIBNVRTC)",
                               tried.data ? tried.data : "");
    else if ((nj_nv.status = nj_nvrtc_resolve(h, nj_nv.path)) == NJ_OK)
        nj_nv.status = nj_nvrtc_query();
    if (nj_nv.status != NJ_OK) snprintf(nj_nv.error, sizeof nj_nv.error, "%s", nj_last_error());
    nj_buf_free(&tried);
    /* The handle stays open for the life of the process: function pointers into it are kept. */
}

static nj_status nj_nvrtc_load(void)
{
    pthread_once(&nj_nv.once, nj_nvrtc_load_once);
    if (nj_nv.status != NJ_OK) return nj_fail(nj_nv.status, "%s", nj_nv.error);
    return NJ_OK;
}

void nj_binary_free(nj_binary *b)
{
    if (!b) return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

nj_status nj_nvrtc_version_string(const char **out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "nj_nvrtc_version_string: out is NULL");
    NJ_TRY(nj_nvrtc_load());
    *out = nj_nv.version;
    return NJ_OK;
}

nj_status nj_nvrtc_max_arch(int32_t *out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "nj_nvrtc_max_arch: out is NULL");
    NJ_TRY(nj_nvrtc_load());
    int32_t m = 0;
    for (int i = 0; i < nj_nv.narchs; i++)
        if (nj_nv.archs[i] > m) m = nj_nv.archs[i];
    *out = m;
    return NJ_OK;
}

/* ---- concurrency bound ---- */

static int32_t nj_default_parallelism(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int32_t)n : 1;
}

void nj_nvrtc_set_parallelism(int32_t n)
{
    pthread_mutex_lock(&nj_sem.mu);
    nj_sem.limit = n > 0 ? n : nj_default_parallelism();
    pthread_cond_broadcast(&nj_sem.cv); /* a raised limit lets waiters in */
    pthread_mutex_unlock(&nj_sem.mu);
}

int32_t nj_nvrtc_peak_parallelism(bool reset)
{
    pthread_mutex_lock(&nj_sem.mu);
    int32_t p = nj_sem.peak;
    if (reset) nj_sem.peak = nj_sem.active;
    pthread_mutex_unlock(&nj_sem.mu);
    return p;
}

static void nj_sem_acquire(void)
{
    pthread_mutex_lock(&nj_sem.mu);
    if (nj_sem.limit <= 0) nj_sem.limit = nj_default_parallelism();
    while (nj_sem.active >= nj_sem.limit) pthread_cond_wait(&nj_sem.cv, &nj_sem.mu);
    nj_sem.active++;
    if (nj_sem.active > nj_sem.peak) nj_sem.peak = nj_sem.active;
    pthread_mutex_unlock(&nj_sem.mu);
}

/* Up to want more slots, without waiting: only cores no other compile holds. Returns how many. */
static int32_t nj_sem_extra(int32_t want)
{
    pthread_mutex_lock(&nj_sem.mu);
    int32_t got = nj_sem.limit - nj_sem.active;
    if (got > want) got = want;
    if (got < 0) got = 0;
    nj_sem.active += got;
    if (nj_sem.active > nj_sem.peak) nj_sem.peak = nj_sem.active;
    pthread_mutex_unlock(&nj_sem.mu);
    return got;
}

static void nj_sem_release(int32_t n)
{
    pthread_mutex_lock(&nj_sem.mu);
    nj_sem.active -= n;
    pthread_cond_broadcast(&nj_sem.cv);
    pthread_mutex_unlock(&nj_sem.mu);
}

/* ---- target selection ---- */

typedef struct nj_target {
    char option[48]; /* --gpu-architecture=sm_90 or =compute_121 */
    int ptx;
} nj_target;

/* A supported arch gets a cubin. An arch above every supported one (a GPU newer than this NVRTC) gets PTX for
 * the highest supported virtual arch, which the driver JIT-compiles forward. Anything else is refused. */
static nj_status nj_pick_target(int32_t arch, nj_target *t)
{
    NJ_RETURN_IF(arch <= 0, NJ_ERR_BAD_ARGUMENT, "compile target sm_%d is not a valid architecture", (int)arch);
    int32_t maxa = 0;
    for (int i = 0; i < nj_nv.narchs; i++) {
        if (nj_nv.archs[i] == arch) {
            snprintf(t->option, sizeof t->option, "--gpu-architecture=sm_%d", (int)arch);
            t->ptx = 0;
            return NJ_OK;
        }
        if (nj_nv.archs[i] > maxa) maxa = nj_nv.archs[i];
    }
    if (arch < maxa) {
        char list[NJ_MAX_ARCHS * 5] = "";
        for (int i = 0; i < nj_nv.narchs; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? " " : "", nj_nv.archs[i]);
        return nj_fail(NJ_ERR_UNSUPPORTED, "sm_%d is not a target %s compiles for (supported: %s)", (int)arch,
                       nj_nv.version, list);
    }
    snprintf(t->option, sizeof t->option, "--gpu-architecture=compute_%d", (int)maxa);
    t->ptx = 1;
    return NJ_OK;
}

/* ---- the resource report ----
 * NVRTC 13 prints, per entry function (sm_80 adds ", N bytes cmem[0]"; device functions that were not inlined
 * get a "Function properties" block of their own, without "Compiling entry function" or "Used"):
 *   ptxas info    : Compiling entry function 'k' for 'sm_90'
 *   ptxas info    : Function properties for k
 *   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
 */

static nj_kernel_resources *nj_find_kernel(nj_kernel_resources *k, int32_t n, const char *name, size_t len)
{
    if (len > sizeof k->kernel - 1) len = sizeof k->kernel - 1; /* names were stored truncated */
    for (int32_t i = 0; i < n; i++)
        if (strlen(k[i].kernel) == len && memcmp(k[i].kernel, name, len) == 0) return &k[i];
    return NULL;
}

/* "Used 10 registers, used 1 barriers, 1024 bytes smem, 384 bytes cmem[0]": each comma piece on its own. */
static void nj_parse_used(const char *line, nj_kernel_resources *k)
{
    const char *p = line;
    while (p && *p) {
        int v = 0;
        char unit[32] = "";
        while (*p == ' ' || *p == ',') p++;
        if (sscanf(p, "Used %d register%31[a-z]", &v, unit) == 2)
            k->registers = v;
        else if (sscanf(p, "used %d barrier%31[a-z]", &v, unit) == 2)
            k->barriers = v;
        else if (sscanf(p, "%d bytes %31[a-z]", &v, unit) == 2 && strcmp(unit, "smem") == 0)
            k->shared_bytes = v;
        p = strchr(p, ',');
    }
}

static void nj_parse_frame(const char *line, nj_kernel_resources *k)
{
    int stack = 0, st = 0, ld = 0;
    if (k && sscanf(line, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stack, &st, &ld) == 3) {
        k->stack_bytes = stack;
        k->spill_stores = st;
        k->spill_loads = ld;
    }
}

/* Name between the quotes of "... entry function 'k' for ..." or after "Function properties for ". */
static const char *nj_log_name(const char *p, char stop, size_t *len)
{
    size_t n = 0;
    while (p[n] && p[n] != stop && p[n] != '\n') n++;
    *len = n;
    return p;
}

static void nj_parse_line(const char *line, nj_kernel_resources *out, int32_t cap, int32_t *n,
                          nj_kernel_resources **cur, nj_kernel_resources **framed)
{
    static const char entry[] = "Compiling entry function '", props[] = "Function properties for ";
    const char *p;
    size_t len;
    if ((p = strstr(line, entry))) {
        const char *name = nj_log_name(p + sizeof entry - 1, '\'', &len);
        *cur = NULL;
        if (*n < cap) {
            *cur = &out[(*n)++];
            memset(*cur, 0, sizeof **cur);
            snprintf((*cur)->kernel, sizeof (*cur)->kernel, "%.*s", (int)len, name);
        }
    } else if ((p = strstr(line, props))) {
        const char *name = nj_log_name(p + sizeof props - 1, ' ', &len);
        *framed = nj_find_kernel(out, *n, name, len); /* NULL for a device function */
    } else if ((p = strstr(line, "bytes stack frame"))) {
        while (p > line && p[-1] != '.') p--; /* back to the first number after "ptxas  ." */
        nj_parse_frame(p, *framed);
        *framed = NULL;
    } else if ((p = strstr(line, "Used ")) && *cur) {
        nj_parse_used(p, *cur);
    }
}

int32_t nj_parse_ptxas_log(const char *log, nj_kernel_resources *out, int32_t cap)
{
    int32_t n = 0;
    nj_kernel_resources *cur = NULL, *framed = NULL;
    char line[512];
    while (log && *log) {
        size_t len = strcspn(log, "\n");
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), log);
        nj_parse_line(line, out, cap, &n, &cur, &framed);
        log += len;
        if (*log) log++;
    }
    return n;
}

/* ---- the compile ---- */

/* Best effort, outside the checker: the log only adds detail to a status decided elsewhere. */
static char *nj_program_log(nvrtcProgram p)
{
    size_t n = 0;
    if (nj_nv.api.nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS) return NULL;
    char *log = calloc(n + 1, 1);
    if (log && n && nj_nv.api.nvrtcGetProgramLog(p, log) != NVRTC_SUCCESS) log[0] = '\0';
    return log;
}

/* The log can exceed the per-thread detail buffer; its head holds the first errors, which matter most. */
static nj_status nj_fail_with_log(const char *name, const char *opt, const char *log)
{
    enum { KEEP = 6000 };
    size_t n = log ? strlen(log) : 0;
    int keep = n > KEEP ? KEEP : (int)n;
    return nj_fail(NJ_ERR_COMPILE, "NVRTC failed to compile %s (%s):\n%.*s%s", name, opt, keep, log ? log : "",
                   n > KEEP ? "\n[log truncated]" : "");
}

static nj_status nj_extract_binary(nvrtcProgram p, int ptx, const char *name, nj_binary *bin)
{
    size_t n = 0;
    if (ptx)
        NJ_NVRTC_CHECK(nvrtcGetPTXSize, name, p, &n);
    else
        NJ_NVRTC_CHECK(nvrtcGetCUBINSize, name, p, &n);
    NJ_RETURN_IF(n == 0, NJ_ERR_COMPILE, "NVRTC produced an empty binary for %s", name);
    char *data = malloc(n);
    NJ_RETURN_IF(!data, NJ_ERR_OUT_OF_MEMORY, "allocating %zu bytes for the binary of %s", n, name);
    nvrtcResult r = ptx ? nj_nv.api.nvrtcGetPTX(p, data) : nj_nv.api.nvrtcGetCUBIN(p, data);
    nj_status s = nj_nvrtc_check(r, ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN", name);
    if (s != NJ_OK) {
        free(data);
        return s;
    }
    /* PTX size includes the terminating NUL, so the text can be handed to cuModuleLoadData as is. */
    bin->data = data;
    bin->size = n;
    bin->is_ptx = ptx;
    return NJ_OK;
}

/* What one attempt asks of NVRTC beyond the fixed options; dropped one by one when NVRTC rejects them. */
typedef struct nj_attempt {
    int minimal;
    int32_t threads; /* > 1: --split-compile */
} nj_attempt;

static nvrtcResult nj_run_compile(nvrtcProgram p, const char *target_opt, const nj_attempt *a)
{
    const char *opts[10];
    char split[32];
    int n = 0;
    opts[n++] = target_opt;
    opts[n++] = "-default-device";
    opts[n++] = "--std=c++17";
    opts[n++] = "--ptxas-options=-v";
    opts[n++] = "-DNJ_CUDA=1";
    /* Source lines for compute-sanitizer and profilers; the code itself is unchanged, so the cache key is too. */
    const char *li = getenv("NORMJIT_NVRTC_LINEINFO");
    if (li && li[0] == '1') opts[n++] = "-lineinfo";
    if (a->minimal) opts[n++] = "-minimal";
    if (a->threads > 1) {
        snprintf(split, sizeof split, "--split-compile=%d", (int)a->threads);
        opts[n++] = split;
    }
    return nj_nv.api.nvrtcCompileProgram(p, n, opts);
}

/* One program from creation to destruction (NVRTC yields no binary when a program is compiled twice).
 * *retry is set when this NVRTC rejected an option of a: the caller drops one and compiles again. */
static nj_status nj_compile_once(const char *source, const char *name, const nj_target *t, const nj_attempt *a,
                                 nj_compile_result *out, bool *retry)
{
    nvrtcProgram p = NULL;
    NJ_TRY(nj_nvrtc_check(nj_nv.api.nvrtcCreateProgram(&p, source, name, 0, NULL, NULL), "nvrtcCreateProgram",
                          name));
    nvrtcResult r = nj_run_compile(p, t->option, a);
    char *log = nj_program_log(p);
    nj_status s;
    *retry = r == NVRTC_ERROR_INVALID_OPTION && (a->minimal || a->threads > 1);
    if (*retry)
        s = NJ_ERR_COMPILE; /* not a failure the caller sees: no detail recorded */
    else if (r == NVRTC_ERROR_COMPILATION)
        s = nj_fail_with_log(name, t->option, log);
    else if ((s = nj_nvrtc_check(r, "nvrtcCompileProgram", name)) == NJ_OK)
        s = nj_extract_binary(p, t->ptx, name, &out->bin);
    if (s == NJ_OK && log) /* PTX has no ptxas step, hence no report: nkernels stays 0 */
        out->nkernels = nj_parse_ptxas_log(log, out->kernels, (int32_t)NJ_ARRAY_LEN(out->kernels));
    free(log);
    nj_nv.api.nvrtcDestroyProgram(&p);
    return s;
}

/* An NVRTC that rejects --split-compile (before 12.1) or -minimal loses it for the rest of the process:
 * split first, being the newer. */
static nj_status nj_compile_slot(const char *source, const char *name, const nj_target *t, int32_t threads,
                                 nj_compile_result *out)
{
    nj_attempt a = {atomic_load(&nj_use_minimal), atomic_load(&nj_use_split) ? threads : 1};
    bool retry = false;
    nj_status s = nj_compile_once(source, name, t, &a, out, &retry);
    while (retry) {
        if (a.threads > 1) {
            atomic_store(&nj_use_split, 0);
            a.threads = 1;
        } else {
            atomic_store(&nj_use_minimal, 0);
            a.minimal = 0;
        }
        s = nj_compile_once(source, name, t, &a, out, &retry);
    }
    return s;
}

nj_status nj_nvrtc_compile(const char *source, const char *name, int32_t arch, int32_t kernels,
                           nj_compile_result *out)
{
    NJ_RETURN_IF(!source || !out, NJ_ERR_NULL_POINTER, "nj_nvrtc_compile: source or out is NULL");
    memset(out, 0, sizeof *out);
    if (!name || !name[0]) name = "normjit.cu";
    NJ_TRY(nj_nvrtc_load());
    nj_target t;
    NJ_TRY(nj_pick_target(arch, &t));

    nj_sem_acquire();
    int32_t threads = 1 + (kernels > 1 ? nj_sem_extra((kernels < 4 ? kernels : 4) - 1) : 0);
    /* millis is the compile itself, not the wait for a slot: it is what a cache hit saves. */
    uint64_t t0 = nj_now_ns();
    nj_status s = nj_compile_slot(source, name, &t, threads, out);
    out->millis = (double)(nj_now_ns() - t0) / 1e6;
    nj_sem_release(threads);
    if (s != NJ_OK) nj_binary_free(&out->bin);
    return s;
}
