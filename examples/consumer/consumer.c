/* A program outside the normjit tree, built against an installed normjit (examples/consumer/CMakeLists.txt
 * finds it with find_package or pkg-config): it checks that the header it compiled against and the library
 * it runs with are the same version, then runs one LayerNorm forward pass on the emulator backend (no GPU
 * needed) and compares y, mean and rstd with a plain double-precision computation on the host.
 * Exit status 0 when everything agrees, 1 with a message otherwise. */
#include <normjit.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define COLS 1000
#define STR_(x) #x
#define STR(x) STR_(x)

static int fail(const char *what, nj_status s)
{
    fprintf(stderr, "consumer: %s: %s (%s)\n", what, nj_status_name(s), nj_last_error());
    return 1;
}

/* The header's macros, the library's nj_version() and the package's version (given by the build system
 * as NJ_EXPECT_VERSION, from find_package's normjit_VERSION or pkg-config's Version) must agree. */
static int check_version(void)
{
    const char *header = STR(NJ_VERSION_MAJOR) "." STR(NJ_VERSION_MINOR) "." STR(NJ_VERSION_PATCH);
    int bad = 0;
    if (strcmp(nj_version(), header) != 0) {
        fprintf(stderr, "consumer: library version %s, header %s\n", nj_version(), header);
        bad = 1;
    }
    if (nj_version_number() != NJ_VERSION_NUMBER) {
        fprintf(stderr, "consumer: nj_version_number() %u, header NJ_VERSION_NUMBER %d\n",
                (unsigned)nj_version_number(), NJ_VERSION_NUMBER);
        bad = 1;
    }
#ifdef NJ_EXPECT_VERSION
    if (strcmp(NJ_EXPECT_VERSION, header) != 0) {
        fprintf(stderr, "consumer: package version %s, header %s\n", NJ_EXPECT_VERSION, header);
        bad = 1;
    }
#endif
    return bad;
}

/* Deterministic inputs with a mean offset per row, so a wrong mean shows. */
static void fill(float *x, float *gamma, float *beta)
{
    unsigned s = 12345u;
    for (int i = 0; i < ROWS * COLS; i++) {
        s = s * 1103515245u + 12345u;
        x[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f + (float)(i / COLS);
    }
    for (int j = 0; j < COLS; j++) {
        gamma[j] = 0.5f + (float)(j % 7) * 0.25f;
        beta[j] = (float)(j % 5) * 0.1f - 0.2f;
    }
}

/* Host LayerNorm in double; returns the number of values off by more than the float32 tolerance. */
static int compare(const float *x, const float *gamma, const float *beta, float eps, const float *y,
                   const float *mean, const float *rstd)
{
    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *xr = x + (size_t)r * COLS;
        double m = 0, v = 0;
        for (int j = 0; j < COLS; j++) m += xr[j];
        m /= COLS;
        for (int j = 0; j < COLS; j++) v += (xr[j] - m) * (xr[j] - m);
        double rs = 1.0 / sqrt(v / COLS + eps);
        if (fabs(mean[r] - m) > 1e-5 * (1 + fabs(m)) || fabs(rstd[r] - rs) > 1e-5 * rs) {
            fprintf(stderr, "consumer: row %d mean %g rstd %g, want %g %g\n", r, mean[r], rstd[r], m, rs);
            bad++;
        }
        for (int j = 0; j < COLS; j++) {
            double want = (xr[j] - m) * rs * gamma[j] + beta[j];
            double got = y[(size_t)r * COLS + j];
            if (fabs(got - want) > 1e-4 + 1e-4 * fabs(want)) {
                if (bad < 5) fprintf(stderr, "consumer: y[%d][%d] = %g, want %g\n", r, j, got, want);
                bad++;
            }
        }
    }
    return bad;
}

static nj_status to_device(nj_context *ctx, const void *host, size_t bytes, void **dev)
{
    nj_status s = nj_mem_alloc(ctx, bytes, dev);
    if (s == NJ_OK && host) s = nj_mem_upload(ctx, *dev, host, bytes);
    return s;
}

int main(void)
{
    if (check_version()) return 1;
    static float x[ROWS * COLS], y[ROWS * COLS], gamma[COLS], beta[COLS], mean[ROWS], rstd[ROWS];
    fill(x, gamma, beta);

    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR; /* the cache root is NORMJIT_CACHE_DIR or the user's default */
    nj_context *ctx = NULL;
    nj_status s = nj_context_create(&o, &ctx);
    if (s != NJ_OK) return fail("nj_context_create", s);

    nj_problem_desc p;
    const int64_t shape[2] = {ROWS, COLS};
    s = nj_preset_layernorm(&p, NJ_F32, 2, shape, 1, NJ_FLAG_SCALE | NJ_FLAG_BIAS | NJ_FLAG_SAVE_STATS);
    nj_plan *plan = NULL;
    if (s == NJ_OK) s = nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan);
    if (s != NJ_OK) {
        nj_context_destroy(ctx);
        return fail("plan", s);
    }

    void *dx = NULL, *dg = NULL, *db = NULL, *dy = NULL, *dm = NULL, *dr = NULL, *ws = NULL;
    size_t ws_bytes = nj_plan_workspace_size(plan, NJ_PASS_FORWARD);
    s = to_device(ctx, x, sizeof x, &dx);
    if (s == NJ_OK) s = to_device(ctx, gamma, sizeof gamma, &dg);
    if (s == NJ_OK) s = to_device(ctx, beta, sizeof beta, &db);
    if (s == NJ_OK) s = to_device(ctx, NULL, sizeof y, &dy);
    if (s == NJ_OK) s = to_device(ctx, NULL, sizeof mean, &dm);
    if (s == NJ_OK) s = to_device(ctx, NULL, sizeof rstd, &dr);
    if (s == NJ_OK && ws_bytes) s = to_device(ctx, NULL, ws_bytes, &ws);
    const float eps = 1e-5f;
    if (s == NJ_OK) {
        nj_forward_args a = {.struct_size = sizeof a, .eps = eps, .x = dx, .gamma = dg, .beta = db, .y = dy,
                             .mean = dm, .rstd = dr, .workspace = ws, .workspace_size = ws_bytes};
        s = nj_forward(plan, &a);
    }
    if (s == NJ_OK) s = nj_synchronize(ctx, NULL);
    if (s == NJ_OK) s = nj_mem_download(ctx, y, dy, sizeof y);
    if (s == NJ_OK) s = nj_mem_download(ctx, mean, dm, sizeof mean);
    if (s == NJ_OK) s = nj_mem_download(ctx, rstd, dr, sizeof rstd);
    int rc = s != NJ_OK ? fail("forward", s) : compare(x, gamma, beta, eps, y, mean, rstd) != 0;

    void *bufs[] = {dx, dg, db, dy, dm, dr, ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) nj_mem_free(ctx, bufs[i]);
    nj_context_destroy(ctx);
    if (rc == 0) printf("consumer: normjit %s, %dx%d LayerNorm on the emulator matches the host\n", nj_version(), ROWS, COLS);
    return rc;
}
