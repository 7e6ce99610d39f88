/* The emulator backend: generated CUDA source -> host shared object (the host C++ compiler with
 * templates/emu/emu.h prepended) -> dlopen -> run on the CPU by src/emu_fibers.c. The .so bytes are the
 * "binary" the context caches like a cubin, under target() which names the compiler and the emulator ABI. */
#include "backend.h"
#include "emu_fibers.h"
#include "kernel_abi.h"
#include "templates.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* In a library built with AddressSanitizer the kernels are built with it too, so the sanitizer suites
 * check every kernel's global and shared memory accesses (the runtime is in the process already).
 * NORMJIT_EMU_CXXFLAGS=-fno-sanitize=address turns it off. */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#define EMU_ASAN_TAG "-asan"
#else
#define EMU_ASAN_TAG ""
#endif

#if defined(__x86_64__)
#define EMU_MACHINE "x86_64"
#elif defined(__aarch64__)
#define EMU_MACHINE "aarch64"
#else
#define EMU_MACHINE "host"
#endif

#define EMU_MAX_ARGV 32
/* Access counting for the model (gcc): ASan's kernel mode with every check a call, no stack or global
 * redzones; emu.h supplies the calls. */
#define EMU_COUNT_FLAGS                                                                                  \
    " -DNJ_EMU_COUNT=1 -fno-sanitize=address -fsanitize=kernel-address"                                   \
    " --param=asan-instrumentation-with-call-threshold=0 --param=asan-stack=0 --param=asan-globals=0"
#define EMU_LOG_MAX 16384

/* Compile time dominates emulated test runs (hundreds of kernels on 2 cores), so the level is the cheapest
 * that still runs well. Measured CPU time for a generated fwd_row kernel (~620 lines with the prelude):
 * -O0 40 ms, -Og 46 ms, -O1 58 ms, -O2 73 ms; running a 2048x1024 LayerNorm: -O0 109 ms, -Og 64 ms,
 * -O1 59 ms, -O2 52 ms. -nostdlib skips the C++ runtime at link time (a third of a small kernel's time);
 * -lm keeps libm a dependency so math resolves even when the library itself was dlopen'ed local. */
static const char *const emu_flags[] = {"-std=c++17",      "-Og",       "-fPIC",    "-shared",
                                        "-pipe",           "-w",        "-fno-exceptions", "-fno-rtti",
                                        "-fvisibility=hidden", "-nostdlib"};

typedef struct emu_backend {
    nj_backend base;
    uint32_t flags;
    uint64_t seed;
    char *cxx_words;            /* $CXX (or "c++") split in place into cxx_argv */
    char *cxx_argv[EMU_MAX_ARGV];
    int32_t cxx_argc;
    char *extra_words;          /* NORMJIT_EMU_CXXFLAGS, split the same way */
    char *extra_argv[EMU_MAX_ARGV];
    int32_t extra_argc;
    char compiler_id[64];       /* "gcc-12.2.0"; "none" when the compiler could not be run */
    char target_id[128];
} emu_backend;

typedef struct emu_func {
    struct emu_func *next;
    nj_emu_kernel_fn fn;
    uint32_t max_threads;
    uint32_t cluster[3]; /* NJ_CLUSTER_KERNEL dimensions, {1,1,1} otherwise */
    char name[64];
} emu_func;

typedef struct emu_module {
    void *dl;
    int fd;          /* the image's memfd (or temp file), open while loaded: see open_image */
    char *tmp_path;  /* fallback temp file, removed at unload */
    emu_func *funcs;
} emu_module;

/* ---------------------------------------------------------------- running the compiler */

static int32_t split_words(char *s, char **argv, int32_t cap)
{
    int32_t n = 0;
    for (char *save = NULL, *w = strtok_r(s, " \t\n", &save); w && n < cap; w = strtok_r(NULL, " \t\n", &save))
        argv[n++] = w;
    return n;
}

/* Runs argv with stdout+stderr into out_path (or /dev/null); *exit_code gets the exit status or -1. */
static nj_status run_process(char *const argv[], const char *out_path, int *exit_code)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    NJ_RETURN_IF(rc != 0, NJ_ERR_HOST_COMPILER, "cannot run the host C++ compiler '%s': %s (set CXX)", argv[0],
                 strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        NJ_RETURN_IF(errno != EINTR, NJ_ERR_HOST_COMPILER, "waitpid for '%s': %s", argv[0], strerror(errno));
    }
    *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return NJ_OK;
}

/* Reads a whole file (at most max bytes, 0 = no limit); *out is NUL-terminated, caller frees. */
static nj_status read_file(const char *path, size_t max, char **out, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    NJ_RETURN_IF(!fp, NJ_ERR_HOST_COMPILER, "cannot open %s: %s", path, strerror(errno));
    nj_buf b;
    nj_buf_init(&b);
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0 && (max == 0 || b.len < max))
        nj_buf_append(&b, chunk, max && n > max - b.len ? max - b.len : n);
    fclose(fp);
    *len = b.len;
    *out = nj_buf_take(&b);
    NJ_RETURN_IF(!*out, NJ_ERR_OUT_OF_MEMORY, "reading %s", path);
    return NJ_OK;
}

static nj_status write_file(const char *path, const char *a, size_t alen, const char *b, size_t blen)
{
    FILE *fp = fopen(path, "wb");
    NJ_RETURN_IF(!fp, NJ_ERR_HOST_COMPILER, "cannot create %s: %s", path, strerror(errno));
    bool ok = fwrite(a, 1, alen, fp) == alen && fwrite(b, 1, blen, fp) == blen;
    ok = (fclose(fp) == 0) && ok;
    NJ_RETURN_IF(!ok, NJ_ERR_HOST_COMPILER, "cannot write %s", path);
    return NJ_OK;
}

/* "gcc-12.2.0" from "c++ (Debian 12.2.0-14+deb12u1) 12.2.0" or "g++ (GCC) 13.2.1 20230801";
 * "clang-14.0.6" from "Debian clang version 14.0.6". */
static void parse_version(char *first_line, char *out, size_t cap)
{
    char *eol = strchr(first_line, '\n');
    if (eol) *eol = '\0';
    bool clang = strstr(first_line, "clang") != NULL;
    const char *v = strstr(first_line, "version ");
    const char *paren = strrchr(first_line, ')');
    if (!clang && paren) v = paren + 1;
    else if (v) v += 8;
    else v = first_line;
    v += strcspn(v, "0123456789");
    size_t n = strspn(v, "0123456789.");
    snprintf(out, cap, "%s-%.*s", clang ? "clang" : "gcc", (int)(n > 0 && n < 40 ? n : 7), n ? v : "unknown");
}

/* Asks the compiler for its version once per process and compiler command (a spawn costs ~10 ms, and
 * contexts are created often); "none" when it cannot be run (compile() reports why). */
static void probe_compiler(emu_backend *e, const char *cxx)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char cached_cxx[256], cached_id[64];
    snprintf(e->compiler_id, sizeof e->compiler_id, "none");
    pthread_mutex_lock(&lock);
    bool hit = cached_id[0] && strcmp(cached_cxx, cxx) == 0;
    if (hit) snprintf(e->compiler_id, sizeof e->compiler_id, "%s", cached_id);
    pthread_mutex_unlock(&lock);
    if (hit) return;
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/nj-emu-version-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return;
    close(fd);
    char *argv[EMU_MAX_ARGV + 2];
    int32_t n = 0;
    for (int32_t i = 0; i < e->cxx_argc; i++) argv[n++] = e->cxx_argv[i];
    argv[n++] = "--version";
    argv[n] = NULL;
    int code = -1;
    char *text = NULL;
    size_t len = 0;
    if (run_process(argv, path, &code) == NJ_OK && code == 0 && read_file(path, 4096, &text, &len) == NJ_OK) {
        parse_version(text, e->compiler_id, sizeof e->compiler_id);
        pthread_mutex_lock(&lock);
        snprintf(cached_cxx, sizeof cached_cxx, "%s", cxx);
        snprintf(cached_id, sizeof cached_id, "%s", e->compiler_id);
        pthread_mutex_unlock(&lock);
    }
    free(text);
    unlink(path);
    nj_error_clear();
}

/* From the active set, so that NORMJIT_TEMPLATE_DIR's emu/emu.h is the one compiled (templates.h). */
static nj_status emu_header(const char **text, size_t *len) { return nj_template_get("emu/emu.h", text, len); }

/* Runs the compiler in dir on k.cc -> k.so; the log goes to dir/log.txt. */
static nj_status compile_in(emu_backend *e, const char *dir, const char *name)
{
    char src[4200], so[4200], logp[4200];
    snprintf(src, sizeof src, "%s/k.cc", dir);
    snprintf(so, sizeof so, "%s/k.so", dir);
    snprintf(logp, sizeof logp, "%s/log.txt", dir);
    char *argv[2 * EMU_MAX_ARGV + NJ_ARRAY_LEN(emu_flags) + 16]; /* + gnu-unique, asan, -o out src -lm */
    int32_t n = 0;
    for (int32_t i = 0; i < e->cxx_argc; i++) argv[n++] = e->cxx_argv[i];
    for (size_t i = 0; i < NJ_ARRAY_LEN(emu_flags); i++) argv[n++] = (char *)emu_flags[i];
    /* STB_GNU_UNIQUE symbols would make dlclose keep the object loaded forever */
    if (strncmp(e->compiler_id, "gcc", 3) == 0) argv[n++] = "-fno-gnu-unique";
#ifdef EMU_ASAN
    argv[n++] = "-fsanitize=address";
    argv[n++] = "-fno-omit-frame-pointer";
#endif
    for (int32_t i = 0; i < e->extra_argc; i++) argv[n++] = e->extra_argv[i];
    argv[n++] = "-o";
    argv[n++] = so;
    argv[n++] = src;
    argv[n++] = "-lm";
    argv[n] = NULL;
    int code = -1;
    NJ_TRY(run_process(argv, logp, &code));
    if (code != 0) {
        char *log = NULL;
        size_t len = 0;
        if (read_file(logp, EMU_LOG_MAX, &log, &len) != NJ_OK) log = NULL;
        nj_status st = nj_fail(NJ_ERR_HOST_COMPILER, "%s failed (exit %d) compiling %s:\n%s", argv[0], code, name,
                               log ? log : "(no output)");
        free(log);
        return st;
    }
    return NJ_OK;
}

static nj_status emu_compile(nj_backend *b, const char *source, const char *name, int32_t kernels,
                             nj_compile_result *out)
{
    (void)kernels; /* one host compiler run, whatever the source holds */
    emu_backend *e = (emu_backend *)b;
    NJ_RETURN_IF(!source || !out, NJ_ERR_NULL_POINTER, "emulator compile: source and result are required");
    NJ_RETURN_IF(e->cxx_argc == 0, NJ_ERR_HOST_COMPILER, "no host C++ compiler configured (CXX is empty)");
    memset(out, 0, sizeof *out);
    uint64_t t0 = nj_now_ns();
    const char *hdr = NULL;
    size_t hlen = 0;
    NJ_TRY(emu_header(&hdr, &hlen));
    /* #line makes compiler messages and barrier call sites refer to lines of the kernel source */
    char file[80];
    snprintf(file, sizeof file, "%s", name && *name ? name : "kernel");
    for (char *p = file; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 32) *p = '_';
    nj_buf pre;
    nj_buf_init(&pre);
    nj_buf_printf(&pre, "#define NJ_EMU 1\n%.*s\n#line 1 \"%s.cu\"\n", (int)hlen, hdr, file);
    NJ_RETURN_IF(pre.failed, NJ_ERR_OUT_OF_MEMORY, "emulator compile");
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/nj-emu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    nj_status st = NJ_OK;
    if (!mkdtemp(dir)) st = nj_fail(NJ_ERR_HOST_COMPILER, "cannot create a temp dir %s: %s", dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/k.cc", dir);
    if (st == NJ_OK) st = write_file(path, pre.data, pre.len, source, strlen(source));
    nj_buf_free(&pre);
    if (st == NJ_OK) st = compile_in(e, dir, file);
    if (st == NJ_OK) {
        char *bin = NULL;
        size_t len = 0;
        snprintf(path, sizeof path, "%s/k.so", dir);
        st = read_file(path, 0, &bin, &len);
        out->bin.data = bin;
        out->bin.size = len;
    }
    static const char *const names[] = {"k.cc", "k.so", "log.txt"};
    for (size_t i = 0; i < NJ_ARRAY_LEN(names); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    out->millis = (double)(nj_now_ns() - t0) / 1e6;
    return st;
}

/* ---------------------------------------------------------------- loading */

/* dlopen finds an already loaded object by its path name first, so an image must never be opened under
 * the name of one still loaded: the memfd (and its /proc/self/fd/N name) stays open while the module is
 * loaded, and if an unloaded object lingers under that name (dlclose may keep it) the fd is moved to a
 * fresh number. The fallback temp file keeps its unique name until unload. */
static nj_status image_fd(emu_module *m, char *path, size_t cap)
{
    m->fd = memfd_create("normjit-emu-kernel", MFD_CLOEXEC);
    if (m->fd < 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, cap, "%s/nj-emu-XXXXXX.so", tmp && *tmp ? tmp : "/tmp");
        m->fd = mkstemps(path, 3);
        NJ_RETURN_IF(m->fd < 0, NJ_ERR_EMULATOR, "cannot create a file for the kernel image: %s", strerror(errno));
        m->tmp_path = strdup(path);
        NJ_RETURN_IF(!m->tmp_path, NJ_ERR_OUT_OF_MEMORY, "emulator load");
        return NJ_OK;
    }
    int spare[8], nspare = 0;
    for (;;) {
        snprintf(path, cap, "/proc/self/fd/%d", m->fd);
        void *old = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        if (!old) break;
        dlclose(old);
        int nfd = nspare < 8 ? fcntl(m->fd, F_DUPFD_CLOEXEC, m->fd + 1) : -1;
        if (nfd < 0) {
            while (nspare > 0) close(spare[--nspare]);
            return nj_fail(NJ_ERR_EMULATOR, "no free name to load the kernel image under (%s is taken)", path);
        }
        spare[nspare++] = m->fd;
        m->fd = nfd;
    }
    while (nspare > 0) close(spare[--nspare]);
    return NJ_OK;
}

static nj_status open_image(const void *bin, size_t size, emu_module *m)
{
    char path[4096];
    NJ_TRY(image_fd(m, path, sizeof path));
    const char *p = bin;
    size_t left = size;
    while (left > 0) {
        ssize_t w = write(m->fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        left -= (size_t)w;
    }
    if (left == 0) m->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (m->dl) return NJ_OK;
    return nj_fail(NJ_ERR_EMULATOR, "cannot load the kernel image: %s", left ? "short write" : dlerror());
}

static void close_image(emu_module *m)
{
    if (m->dl) dlclose(m->dl);
    if (m->fd >= 0) close(m->fd);
    if (m->tmp_path) unlink(m->tmp_path);
    free(m->tmp_path);
    free(m);
}

static nj_status emu_load(nj_backend *b, const void *bin, size_t size, void **module)
{
    NJ_RETURN_IF(!bin || !module, NJ_ERR_NULL_POINTER, "emulator load: binary and module are required");
    NJ_RETURN_IF(size < 64 || memcmp(bin, "\177ELF", 4) != 0, NJ_ERR_EMULATOR,
                 "emulator load: the binary (%zu bytes) is not a shared object", size);
    emu_module *m = calloc(1, sizeof *m);
    NJ_RETURN_IF(!m, NJ_ERR_OUT_OF_MEMORY, "emulator load");
    m->fd = -1;
    nj_status st = open_image(bin, size, m);
    if (st != NJ_OK) {
        close_image(m);
        return st;
    }
    int (*bind)(const void *, unsigned, unsigned);
    *(void **)&bind = dlsym(m->dl, "nj_emu_bind");
    int rc = bind ? bind(nj_emu_runtime_table(), NJ_EMU_ABI_VERSION, nj_emu_runtime_size()) : -2;
    if (rc != 0) {
        close_image(m);
        NJ_RETURN_IF(rc == -2, NJ_ERR_EMULATOR, "emulator load: the image has no nj_emu_bind (not built with emu.h)");
        return nj_fail(NJ_ERR_EMULATOR, "emulator load: emu.h ABI differs from the library's (v%d)",
                       NJ_EMU_ABI_VERSION);
    }
    *module = m;
    return NJ_OK;
}

static nj_status emu_function(nj_backend *b, void *module, const char *name, void **fn)
{
    emu_module *m = module;
    NJ_RETURN_IF(!m || !name || !fn, NJ_ERR_NULL_POINTER, "emulator function: module, name and fn are required");
    NJ_RETURN_IF(strlen(name) >= sizeof(((emu_func *)0)->name), NJ_ERR_BAD_ARGUMENT, "kernel name too long: %s",
                 name);
    for (emu_func *f = m->funcs; f; f = f->next) {
        if (strcmp(f->name, name) == 0) {
            *fn = f;
            return NJ_OK;
        }
    }
    void *sym = dlsym(m->dl, name);
    NJ_RETURN_IF(!sym, NJ_ERR_EMULATOR, "kernel %s not found in the emulated module", name);
    char bound[96];
    snprintf(bound, sizeof bound, "nj_emu_bound_%s", name);
    const int *mt = dlsym(m->dl, bound);
    emu_func *f = calloc(1, sizeof *f);
    NJ_RETURN_IF(!f, NJ_ERR_OUT_OF_MEMORY, "emulator function");
    *(void **)&f->fn = sym;
    f->max_threads = mt && *mt > 0 && *mt <= 1024 ? (uint32_t)*mt : 1024;
    snprintf(bound, sizeof bound, "nj_emu_cluster_%s", name);
    const int *cd = dlsym(m->dl, bound);
    for (int i = 0; i < 3; i++) f->cluster[i] = cd && cd[i] > 0 ? (uint32_t)cd[i] : 1;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->next = m->funcs;
    m->funcs = f;
    *fn = f;
    return NJ_OK;
}

static void emu_unload(nj_backend *b, void *module)
{
    emu_module *m = module;
    if (!m) return;
    while (m->funcs) {
        emu_func *n = m->funcs->next;
        free(m->funcs);
        m->funcs = n;
    }
    close_image(m);
}

/* ---------------------------------------------------------------- launching */

/* flags: a dependent launch runs as any other (launches run one after another, each to its end) */
static nj_status emu_launch(nj_backend *b, void *fn, const uint32_t grid[3], const int32_t block[3], uint32_t shmem,
                            void *stream, uint32_t flags, const void *args, size_t args_size)
{
    emu_backend *e = (emu_backend *)b;
    const emu_func *f = fn;
    NJ_RETURN_IF(!f || !grid || !block || !args, NJ_ERR_NULL_POINTER, "emulator launch: missing argument");
    NJ_RETURN_IF(args_size != sizeof(nj_kargs), NJ_ERR_BAD_ARGUMENT, "kernel arguments of %zu bytes, expected %zu",
                 args_size, sizeof(nj_kargs));
    NJ_RETURN_IF(grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || grid[0] > 0x7fffffffu || grid[1] > 65535 ||
                     grid[2] > 65535,
                 NJ_ERR_BAD_ARGUMENT, "kernel %s: invalid grid (%u,%u,%u)", f->name, grid[0], grid[1], grid[2]);
    NJ_RETURN_IF(block[0] < 1 || block[1] < 1 || block[2] < 1 || block[0] > 1024 || block[1] > 1024 ||
                     block[2] > 64,
                 NJ_ERR_EMULATOR, "kernel %s: invalid block (%d,%d,%d)", f->name, block[0], block[1], block[2]);
    int64_t n = (int64_t)block[0] * block[1] * block[2];
    NJ_RETURN_IF(n > 1024, NJ_ERR_EMULATOR, "kernel %s: block of %lld threads (more than 1024)", f->name,
                 (long long)n);
    NJ_RETURN_IF(n > f->max_threads, NJ_ERR_EMULATOR, "kernel %s: block of %lld threads exceeds its launch bound %u",
                 f->name, (long long)n, f->max_threads);
    NJ_RETURN_IF(shmem > (uint32_t)b->props.max_shared_per_block, NJ_ERR_EMULATOR,
                 "kernel %s: %u bytes of dynamic shared memory exceed the limit of %d", f->name, shmem,
                 b->props.max_shared_per_block);
    nj_emu_launch l = {f->fn, f->name, {grid[0], grid[1], grid[2]},
                       {(uint32_t)block[0], (uint32_t)block[1], (uint32_t)block[2]},
                       {f->cluster[0], f->cluster[1], f->cluster[2]}, shmem,
                       (uint32_t)b->props.max_shared_per_block, e->flags, e->seed, args};
    return nj_emu_run(&l);
}

/* ---------------------------------------------------------------- memory (host pointers) */

static nj_status emu_mem_alloc(nj_backend *b, size_t bytes, void **out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "emulator mem_alloc: out is NULL");
    size_t n = bytes ? (bytes + 255) & ~(size_t)255 : 256; /* cudaMalloc's alignment */
    NJ_RETURN_IF(n < bytes, NJ_ERR_OUT_OF_MEMORY, "emulator mem_alloc: %zu bytes", bytes);
    *out = aligned_alloc(256, n);
    NJ_RETURN_IF(!*out, NJ_ERR_OUT_OF_MEMORY, "emulator mem_alloc: %zu bytes", bytes);
    return NJ_OK;
}

static void emu_mem_free(nj_backend *b, void *p) { free(p); }

static nj_status emu_copy(nj_backend *b, void *dst, const void *src, size_t bytes)
{
    NJ_RETURN_IF(bytes && (!dst || !src), NJ_ERR_NULL_POINTER, "emulator copy: NULL pointer");
    if (bytes) memmove(dst, src, bytes);
    return NJ_OK;
}

static nj_status emu_synchronize(nj_backend *b, void *stream) { return NJ_OK; }

static const char *emu_target(nj_backend *b) { return ((emu_backend *)b)->target_id; }
static const char *emu_compiler(nj_backend *b) { return ((emu_backend *)b)->compiler_id; }

static void emu_destroy(nj_backend *b)
{
    emu_backend *e = (emu_backend *)b;
    if (!e) return;
    free(e->cxx_words);
    free(e->extra_words);
    free(e);
    nj_emu_release();
}

static const nj_backend_ops emu_ops = {
    "emulator",  NJ_BACKEND_EMULATOR, emu_target,    emu_compiler, emu_compile, emu_load, emu_function, emu_launch, emu_unload,
    emu_mem_alloc, emu_mem_free, emu_copy,    emu_copy,    emu_synchronize, emu_destroy,
};

/* Properties of the architecture the emulator stands in for (the planner sizes blocks and shared memory
 * from them). Clusters are not emulated, so the default is sm_80. */
static void emu_props(int32_t arch, uint32_t flags, nj_device_props *p)
{
    memset(p, 0, sizeof *p);
    p->arch = arch > 0 ? arch : 80;
    p->sm_count = p->arch >= 90 ? 132 : 108;
    p->max_threads_per_block = 1024;
    p->max_shared_per_block = p->arch >= 90 ? 232448 : p->arch >= 80 ? 166912 : 65536;
    p->regs_per_sm = 65536;
    p->max_grid_x = (flags & NJ_CTX_EMU_SMALL_GRID) ? 7 : 0x7fffffff;
}

/* $CXX when set (it may carry arguments, e.g. "ccache g++"); else the first of c++, g++, clang++ that runs. */
static nj_status choose_compiler(emu_backend *e)
{
    static const char *const candidates[] = {"c++", "g++", "clang++"};
    const char *cxx = getenv("CXX");
    size_t n = cxx && *cxx ? 1 : NJ_ARRAY_LEN(candidates);
    for (size_t i = 0; i < n; i++) {
        const char *c = cxx && *cxx ? cxx : candidates[i];
        free(e->cxx_words);
        e->cxx_words = strdup(c);
        if (!e->cxx_words) return NJ_ERR_OUT_OF_MEMORY;
        e->cxx_argc = split_words(e->cxx_words, e->cxx_argv, EMU_MAX_ARGV);
        if (e->cxx_argc == 0) return NJ_OK; /* compile() reports the empty CXX */
        probe_compiler(e, c);
        if (strcmp(e->compiler_id, "none") != 0) return NJ_OK;
    }
    /* none runs: keep the first, so that compile() names it in its error */
    free(e->cxx_words);
    e->cxx_words = strdup(cxx && *cxx ? cxx : candidates[0]);
    if (!e->cxx_words) return NJ_ERR_OUT_OF_MEMORY;
    e->cxx_argc = split_words(e->cxx_words, e->cxx_argv, EMU_MAX_ARGV);
    return NJ_OK;
}

nj_status nj_backend_emu_create(const nj_backend_config *cfg, nj_backend **out)
{
    NJ_RETURN_IF(!out, NJ_ERR_NULL_POINTER, "emulator backend: out is NULL");
    *out = NULL;
    emu_backend *e = calloc(1, sizeof *e);
    NJ_RETURN_IF(!e, NJ_ERR_OUT_OF_MEMORY, "emulator backend");
    e->base.ops = &emu_ops;
    emu_props(cfg ? cfg->arch : 0, cfg ? cfg->flags : 0, &e->base.props);
    e->flags = cfg ? cfg->flags : 0;
    e->seed = cfg ? cfg->seed : 0;
    const char *extra = getenv("NORMJIT_EMU_CXXFLAGS");
    /* model hook (emu_fibers.h): every access outlined into emu.h's counting calls; its own target */
    bool count = nj_emu_count_building();
    char *words = NULL;
    if (asprintf(&words, "%s%s", extra ? extra : "", count ? EMU_COUNT_FLAGS : "") < 0) words = NULL;
    e->extra_words = words;
    nj_status st = e->extra_words ? choose_compiler(e) : NJ_ERR_OUT_OF_MEMORY;
    if (st != NJ_OK) {
        free(e->cxx_words);
        free(e->extra_words);
        free(e);
        return nj_fail(NJ_ERR_OUT_OF_MEMORY, "emulator backend");
    }
    e->extra_argc = split_words(e->extra_words, e->extra_argv, EMU_MAX_ARGV);
    char xh[33] = "";
    if (extra && *extra) nj_hash_hex(extra, strlen(extra), xh);
    /* extra flags change the code, so they change the target (and thus every signature) */
    snprintf(e->target_id, sizeof e->target_id, "emu-%s-%s-v%d%s%s%.8s%s", EMU_MACHINE, e->compiler_id,
             NJ_EMU_ABI_VERSION, EMU_ASAN_TAG, xh[0] ? "-x" : "", xh, count ? "-count" : "");
    nj_emu_retain();
    *out = &e->base;
    return NJ_OK;
}
