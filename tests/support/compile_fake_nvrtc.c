/* A fake libnvrtc for test_compile: an older NVRTC (12.0) that rejects -minimal and --split-compile and, like
 * the real one, yields no
 * binary for a program compiled a second time. Lets the test reach the paths the installed NVRTC never takes.
 * The test builds it with cc -shared -DNJ_FAKE_LIBNVRTC at run time; in the support library it is empty. */
#ifdef NJ_FAKE_LIBNVRTC

#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvrtcResult;
enum { SUCCESS = 0, INVALID_INPUT = 3, INVALID_PROGRAM = 4, INVALID_OPTION = 5, COMPILATION = 6 };

typedef struct fake_prog {
    int compiled, ok, ptx;
    char kernel[64];
} fake_prog;

static int creates, destroys, minimal_seen, split_seen, compiles;

EXPORT const char *nvrtcGetErrorString(nvrtcResult r)
{
    return r == INVALID_OPTION ? "NVRTC_ERROR_INVALID_OPTION" : r ? "NVRTC_ERROR_OTHER" : "NVRTC_SUCCESS";
}
EXPORT nvrtcResult nvrtcVersion(int *major, int *minor)
{
    *major = 12;
    *minor = 0;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetNumSupportedArchs(int *n)
{
    *n = 3;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetSupportedArchs(int *a)
{
    a[0] = 75, a[1] = 80, a[2] = 90;
    return SUCCESS;
}
/* The kernel name is taken from the source's first "void [__launch_bounds__(..)] NAME(". */
EXPORT nvrtcResult nvrtcCreateProgram(void **p, const char *src, const char *name, int nh, const char *const *h,
                                      const char *const *hn)
{
    fake_prog *fp = calloc(1, sizeof *fp);
    const char *v = strstr(src, "void ");
    size_t n = 0;
    if (v) {
        v += 5;
        if (strncmp(v, "__launch_bounds__(", 18) == 0) v = strchr(v, ')') + 2;
        for (; v[n] && v[n] != '(' && n < sizeof fp->kernel - 1; n++) fp->kernel[n] = v[n];
    }
    creates++;
    *p = fp;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcDestroyProgram(void **p)
{
    free(*p);
    *p = NULL;
    destroys++;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcCompileProgram(void *p, int n, const char *const *opts)
{
    fake_prog *fp = p;
    compiles++;
    for (int i = 0; i < n; i++) {
        if (strcmp(opts[i], "-minimal") == 0) {
            minimal_seen++;
            fp->compiled = 1;
            return INVALID_OPTION;
        }
        if (strncmp(opts[i], "--split-compile=", 16) == 0) {
            split_seen++;
            fp->compiled = 1;
            return INVALID_OPTION;
        }
        if (strncmp(opts[i], "--gpu-architecture=compute_", 27) == 0) fp->ptx = 1;
    }
    fp->ok = !fp->compiled; /* a second compile of the same program yields nothing */
    fp->compiled = 1;
    return SUCCESS;
}
static size_t log_text(const fake_prog *fp, char *out)
{
    char buf[512];
    size_t n = 0;
    if (fp->ok && !fp->ptx) {
        strcpy(buf, "ptxas info    : Compiling entry function '");
        strcat(buf, fp->kernel);
        strcat(buf, "' for 'sm_90'\nptxas info    : Function properties for ");
        strcat(buf, fp->kernel);
        strcat(buf, "\nptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
                    "ptxas info    : Used 7 registers, used 0 barriers\n");
        n = strlen(buf);
    }
    if (out) memcpy(out, buf, n), out[n] = '\0';
    return n + 1;
}
EXPORT nvrtcResult nvrtcGetProgramLogSize(void *p, size_t *n)
{
    *n = log_text(p, NULL);
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetProgramLog(void *p, char *log)
{
    log_text(p, log);
    return SUCCESS;
}
static const char cubin[16] = "\x7f" "ELFfakecubin";
static const char ptx[] = ".version 8.0\n.target sm_90\n";
EXPORT nvrtcResult nvrtcGetCUBINSize(void *p, size_t *n)
{
    fake_prog *fp = p;
    *n = fp->ok && !fp->ptx ? sizeof cubin : 0;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetCUBIN(void *p, char *out)
{
    memcpy(out, cubin, sizeof cubin);
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetPTXSize(void *p, size_t *n)
{
    fake_prog *fp = p;
    *n = fp->ok && fp->ptx ? sizeof ptx : 0;
    return SUCCESS;
}
EXPORT nvrtcResult nvrtcGetPTX(void *p, char *out)
{
    memcpy(out, ptx, sizeof ptx);
    return SUCCESS;
}

/* For the test, found with dlsym on the same handle. */
EXPORT void fake_nvrtc_counts(int *c, int *d, int *m, int *k, int *s)
{
    *c = creates, *d = destroys, *m = minimal_seen, *k = compiles, *s = split_seen;
}

#else
typedef int nj_fake_libnvrtc_not_built; /* ISO C wants a translation unit to declare something */
#endif
