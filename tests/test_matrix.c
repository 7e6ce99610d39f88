/* The numerics matrix: every preset in its layouts x dtypes x param dtypes x flags x activations x sizes
 * that reach every kernel variant the planner chooses, run forward and backward on the emulator (with
 * thread-order shuffling and poisoned shared memory and outputs) and compared with the double-precision
 * reference through the same checker and tolerances as `normjit check` (tools/check_lib.c, tolerance.h).
 * A failure prints the problem and its per-output report; each family asserts zero failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "nj_testutil.h"
#include "check_lib.h"

static const char *const dtypes[] = {"f32", "f16", "bf16"};
static const char *const acts[] = {"none", "relu", "silu", "gelu_tanh", "gelu_erf", "sigmoid"};
/* Presets add or clear `center` themselves; the general form (`norm`) takes flags literally, so there
 * "scale" alone is an RMS problem. */
static const char *const combos[] = {"none", "scale", "scale,bias", "scale,bias,stats", "scale,bias,residual,resout",
                                     "bias,residual,stats"};
#define NCOMBO (sizeof combos / sizeof combos[0])
#define NACT (sizeof acts / sizeof acts[0])

typedef struct matrix_state {
    nj_context *ctx;
    char dir[512];
    int run, failed;
} matrix_state;

static int group_setup(void **state)
{
    static matrix_state m;
    if (!nj_tu_make_temp_dir("matrix", m.dir, sizeof m.dir)) return -1;
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    /* grids at most 7 blocks wide: every kernel numbers its blocks over 2-D grids and skips the surplus ones
     * (test_context and test_backward's first runs cover the 1-D layout) */
    o.flags = NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON | NJ_CTX_EMU_SMALL_GRID;
    o.seed = 7;
    o.cache_dir = getenv("NJ_MATRIX_CACHE") ? getenv("NJ_MATRIX_CACHE") : m.dir;
    if (nj_context_create(&o, &m.ctx) != NJ_OK) {
        fprintf(stderr, "matrix: no emulator context: %s\n", nj_last_error());
        return -1;
    }
    *state = &m;
    return 0;
}

static int group_teardown(void **state)
{
    matrix_state *m = *state;
    nj_context_destroy(m->ctx);
    nj_tu_remove_tree(m->dir);
    fprintf(stderr, "matrix: %d problems checked, %d failed\n", m->run, m->failed);
    return 0;
}

/* One numerical regime of the generated inputs (tools/check_lib.h). */
typedef struct regime {
    const char *name;
    double offset, scale, eps;
    int nan;
    uint32_t passes;
    int shift; /* bytes the operands lie past an aligned address (njt_check_options.shift) */
} regime;

static int check_regime(matrix_state *m, const char *line, const regime *g, uint64_t seed);

/* Checks one problem line; returns 1 when it passed. */
static int check_line(matrix_state *m, const char *line, double offset, uint64_t seed)
{
    regime g = {"", offset, 1.0, 1e-5, 0, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, 0};
    return check_regime(m, line, &g, seed);
}

static int check_regime(matrix_state *m, const char *line, const regime *g, uint64_t seed)
{
    nj_problem_desc p;
    nj_status s = nj_problem_from_text(line, 3, &p);
    if (s != NJ_OK) fail_msg("matrix line does not parse: %s: %s", line, nj_last_error());
    njt_check_options o;
    njt_check_options_init(&o);
    o.seed = seed;
    o.offset = g->offset;
    o.scale = g->scale;
    o.eps = g->eps;
    o.nan = g->nan;
    o.passes = g->passes;
    o.shift = g->shift;
    njt_check_report rep;
    memset(&rep, 0, sizeof rep);
    s = njt_check_problem(m->ctx, &p, &o, &rep);
    m->run++;
    if (s == NJ_OK && rep.pass) return 1;
    m->failed++;
    fprintf(stderr, "FAIL %s (regime %s: offset %g, scale %g, eps %g%s, shift %d; seed %llu)\n", line, g->name,
            g->offset, g->scale, g->eps, g->nan ? ", a NaN" : "", g->shift, (unsigned long long)seed);
    if (s != NJ_OK) fprintf(stderr, "  %s: %s\n", nj_status_name(s), nj_last_error());
    else njt_check_report_print(stderr, &rep);
    return 0;
}

/* Runs each base shape in every dtype; flags, activation and param dtype rotate with the index so that
 * every combination appears across a family without the full cross product. */
static void run_family(matrix_state *m, const char *const *bases, size_t nbases)
{
    int before = m->failed;
    for (size_t b = 0; b < nbases; b++) {
        for (size_t d = 0; d < 3; d++) {
            size_t k = b * 3 + d;
            char base[256], line[512];
            snprintf(base, sizeof base, bases[b], dtypes[d]);
            snprintf(line, sizeof line, "%s flags=%s act=%s%s%s", base, combos[k % NCOMBO], acts[(k / 2 + b) % NACT],
                     (k % 2) ? " param=" : "", (k % 2) ? dtypes[d] : "");
            check_line(m, line, 0.0, 1 + k);
        }
    }
    assert_int_equal(m->failed - before, 0);
}

static void test_layernorm(void **state)
{
    static const char *const bases[] = {
        "layernorm %s 3x1",         /* size-1 reduction: y = beta */
        "layernorm %s 5x7",         /* odd row, vector width 1 */
        "layernorm %s 4x31",        /* prime */
        "layernorm %s 3x64",        /* warp per row */
        "layernorm %s 6x1000",      /* block per row, cached in registers */
        "layernorm %s 2x4096",      /* vectorized */
        "layernorm %s 2x12289",     /* long prime row: re-read pass */
        "layernorm %s 1x70001",     /* row above 2^16 */
        "layernorm %s 3x20480",     /* backward: slots of clusters (sm_80: column-tiled dgamma and dx) */
        "layernorm %s 2x262144",    /* a cluster a row; backward split: 32 pieces a row, sums in the workspace */
        "layernorm %s 66000x8",     /* rows above 2^16 */
        "layernorm %s 0x256",       /* zero-size batch */
        "layernorm %s 2x3x5x6 last=2",
        "layernorm %s nchw 2x24x7x5 axes=1", /* ConvNeXt: the channel of NCHW */
        "layernorm %s nchw 2x24x16x16 axes=1", /* 256 pixels: 16-byte column vectors, the tile staged */
        "layernorm %s nchw 2x200x7x5 axes=1",  /* a staged tile of 32 columns, the second one 3 wide */
        "layernorm %s nchw 2x64x16x16 axes=1", /* f32 backward: 2 columns a lane, so that x and dy stage */
        "layernorm %s 2x6x5x4 axes=0,2",     /* Keras: non-adjacent axes */
    };
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
}

static void test_rmsnorm(void **state)
{
    static const char *const bases[] = {"rmsnorm %s 4x96", "rmsnorm %s 3x8192", "rmsnorm %s 2x129", "rmsnorm %s 7x2",
                                        "rmsnorm %s 2x300001" /* split, odd: vec 1, a short last piece */};
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
    /* More rows than the backward's slots (264 for bf16 4096, 132 for f32): each block fetches its next
     * row while it works on one; with an offset, the saved mean's correction reads the fetched words. */
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "rmsnorm bf16 600x4096 flags=scale", 0.0, 41);
    check_line(m, "layernorm f32 300x4096 flags=scale,bias", 0.0, 42);
    check_line(m, "layernorm f32 300x4096 flags=scale,bias", 1e5, 43);
    /* 16-bit rows of 2048 and 4096 are row groups of a 1024-thread block (4 and 2 rows a round, 132
     * slots): rounds whose last groups are past the end, which fetch zeros (stale words there add a row
     * twice to dbeta: 530x2048 and 267x4096 fail), offsets that take the block into the saved mean's
     * correction (16-bit: 1e2-1e3, beyond which f16 x loses the data), an activation, the residual.
     * 600x4096 and 1700x2048 above and in test_row_persist are such plans too. */
    check_line(m, "layernorm f16 1061x2048 flags=scale", 1e3, 44);
    check_line(m, "layernorm f16 267x4096 flags=scale act=silu", 1e2, 45);
    check_line(m, "rmsnorm bf16 531x2048 flags=scale,residual,resout", 0.0, 46);
    check_line(m, "layernorm bf16 530x2048 flags=scale,bias act=relu", 0.0, 47);
    check_line(m, "layernorm f16 267x4096 flags=scale,bias", 1e3, 48);
    assert_int_equal(m->failed - before, 0);
}

/* Persistent row forwards (P.persist): more rows than the plan's resident blocks (396 of 512 threads,
 * 792 of 256, 264 of 384 for 132 SMs), so each block walks several rows with the next one's words
 * fetched; gamma/beta held as words across them; an offset takes the shift from the fetched first
 * element (1e3 for f16, 1e2 for bf16: at 1e4 both round x to one value a row, the mean test empty);
 * stats and GELU share the epilogue. */
static void test_row_persist(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "layernorm bf16 900x4096 flags=scale,bias,stats", 0.0, 51);
    check_line(m, "layernorm f16 900x4096 flags=scale,bias act=gelu_erf", 1e3, 52);
    check_line(m, "rmsnorm f16 1700x2048 flags=scale,stats", 0.0, 53);
    check_line(m, "layernorm bf16 450x3000", 1e2, 54); /* 375 vectors over 384 threads */
    /* f32 gamma/beta beside 16-bit x: copied once a block into shared memory */
    check_line(m, "layernorm bf16 900x4096 flags=scale,bias,stats param=f32", 1e2, 56);
    check_line(m, "rmsnorm f16 1700x2048 flags=scale param=f32", 0.0, 57);
    /* the backward stages gamma and, under an activation, beta (264 slots) */
    check_line(m, "layernorm bf16 400x4096 flags=scale,bias param=f32 act=silu", 1e3, 58);
    /* streamed rows kept in shared memory (P.stage 2): x, x + the residual as floats, a partial vector */
    regime fwd = {"fwd", 1e4, 1.0, 1e-5, 0, NJ_PASS_FORWARD, 0};
    check_regime(m, "layernorm f32 3x20000 flags=scale,bias,residual,resout,stats", &fwd, 59);
    check_regime(m, "instancenorm f32 ncdhw 1x3x32x32x32 flags=scale,bias act=silu", &fwd, 60);
    fwd.offset = 0.0;
    check_regime(m, "rmsnorm f16 2x30001 flags=scale,stats", &fwd, 61);
    check_regime(m, "layernorm bf16 2x65536 flags=scale,bias act=gelu_erf", &fwd, 62);
    /* the backward's slots fetch the next row in 640-thread blocks too (132 of them here) */
    check_line(m, "layernorm f16 300x5120 flags=scale,bias", 1e3, 55); /* 1e5 overflowed f16 x */
    /* several vectors a thread (plan_fwd_row_wide and f32 rows): 16-bit rows of 8192 at 512 threads, 264
     * blocks (300 rows: 150 blocks of two rows each); 8000, whose second vector is past the row for 24
     * threads; f32 rows of 4096 (two blocks an SM), of 2048 with GELU (four), of 3000 (a partial vector) */
    check_line(m, "layernorm f16 300x8192 flags=scale,bias", 1e3, 108);
    check_line(m, "rmsnorm bf16 600x8000 flags=scale,stats", 1e2, 109);
    check_line(m, "layernorm f32 300x4096 flags=scale,bias,stats", 1e5, 110);
    check_line(m, "layernorm f32 900x2048 flags=scale,bias act=gelu_tanh", 0.0, 111);
    check_line(m, "rmsnorm f32 500x3000 flags=scale", 1e3, 112);
    /* 16-bit rows of 6144-7680: two vectors a thread of 384-480 threads; 16-bit gamma/beta held as
     * words rather than staged (NORMJIT_PLAN_NO_STAGE16) */
    check_line(m, "layernorm bf16 300x7000 flags=scale,bias act=silu", 1e2, 113);
    /* one block an SM of 1024 threads, 32 bytes of x a thread or more, gamma/beta staged: f32 rows of
     * 10000 (three vectors, 300 rows over 132 blocks) at an offset, bf16 rows of 16384 with the saved
     * statistics, f16 RMS rows of 12000 (a partial last vector round) */
    check_line(m, "layernorm f32 300x10000 flags=scale,bias", 1e5, 121);
    check_line(m, "layernorm bf16 200x16384 flags=scale,bias,stats act=gelu_tanh", 1e2, 122);
    check_line(m, "rmsnorm f16 300x12000 flags=scale", 0.0, 123);
    /* the backward's slots in clusters of two (plan_bwd_slot_pairs): f32 rows of 5000 under SiLU (a
     * block a row: gamma and beta staged, the registers' sums after them), bf16 rows of 2048 with f32
     * gamma/beta (row groups' shared partial rows), f16 RMS rows of 8192 with fewer rows than blocks */
    check_line(m, "layernorm f32 300x5000 flags=scale,bias act=silu", 1e3, 124);
    check_line(m, "layernorm bf16 1000x2048 flags=scale,bias param=f32", 1e2, 125);
    check_line(m, "rmsnorm f16 40x8192 flags=scale", 0.0, 126);
    /* 16-bit rows of 4-element vectors past 1024 of them (bwd_row_two_chunks): 544 threads, two chunks
     * each and the last one's second past the row, fetching the next row (300 rows over 132 slots), at
     * an offset, with the residual under GELU; RMS rows of 5124 (672 threads) */
    check_line(m, "layernorm bf16 300x4100 flags=scale,bias act=silu", 1e3, 142);
    check_line(m, "layernorm f16 300x4100 flags=scale,bias,residual,resout act=gelu_tanh", 0.0, 143);
    check_line(m, "rmsnorm f16 300x5124 flags=scale", 1e2, 144);
    /* row groups of 96 threads (10 a block: 301 rows over 132 slots, the last groups past the rows), of
     * 192 (5) with the residual, of 384 (2) under ReLU with f32 gamma/beta, at offsets */
    check_line(m, "layernorm bf16 301x768 flags=scale,bias", 1e3, 145);
    check_line(m, "layernorm f16 300x1536 flags=scale,bias,residual,resout,stats", 0.0, 146);
    check_line(m, "layernorm bf16 300x3072 flags=scale,bias param=f32 act=relu", 1e2, 147);
    /* 832-1024-thread blocks fetching the next row: GELU erf at an offset, the residual, RMS */
    check_line(m, "layernorm bf16 290x7168 flags=scale,bias act=gelu_erf", 1e2, 148);
    check_line(m, "layernorm f16 290x6656 flags=scale,bias,residual,resout,stats param=f32", 0.0, 149);
    check_line(m, "rmsnorm bf16 290x8192 flags=scale act=gelu_tanh", 1e3, 150);
    setenv("NORMJIT_PLAN_NO_STAGE16", "1", 1);
    check_line(m, "layernorm f16 700x2560 flags=scale,bias,stats", 1e3, 114);
    unsetenv("NORMJIT_PLAN_NO_STAGE16");
    assert_int_equal(m->failed - before, 0);
}

/* The cluster family (fwd_cluster.cu, sm_90): rows of 2^18 elements and more, or past the 200 KB one
 * block keeps, a cluster of 2 to 8 blocks a row, each staging its piece and reading the others' (sum,
 * m2) from their shared memory. gamma/beta constant along the row (InstanceNorm), a channel a vector
 * with pieces that straddle channels (GroupNorm(1) over 64 channels of 64 x 64), along the row as
 * vectors (LayerNorm in test_layernorm) or by element (the odd RMSNorm row in test_rmsnorm); 200 KB
 * pieces (f32 rows of 400001: the last piece short); offsets, saved statistics, activations, a NaN;
 * narrow 2-D grids (--shuffle) keep clusters on one grid row. The backward where gamma is constant
 * over the row (InstanceNorm) or each piece (GroupNorm NCHW), and rows whose x and dy come to 64 KB, x
 * staged in one block where it fits; with gamma along the row, slots of clusters walking the rows.
 * Channels-last GroupNorm images past one tile whose x fits 8 SMs are such clusters too
 * (fwd_channels_last.cu: nj_fwd_cl_cluster), and a small image's backward one block. */
static void test_cluster(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    regime fwd = {"fwd", 1e3, 1.0, 1e-5, 0, NJ_PASS_FORWARD, 0};
    check_regime(m, "instancenorm f32 ncdhw 1x2x64x64x64 flags=scale,bias,stats act=silu", &fwd, 71);
    check_regime(m, "groupnorm f16 nchw 1x64x64x64 groups=1 flags=scale,bias act=gelu_erf", &fwd, 72);
    fwd.offset = 1e2;
    check_regime(m, "groupnorm bf16 nchw 2x64x64x64 groups=1 flags=scale,bias,stats", &fwd, 73);
    fwd.offset = 0.0;
    check_regime(m, "layernorm f32 3x400001 flags=scale,bias,stats", &fwd, 74);
    check_regime(m, "rmsnorm bf16 2x524288 flags=scale act=relu", &fwd, 75);
    /* rows under 2^18 past what one block keeps (200 KB): clusters of 2, vectors of 4 with the saved
       statistics at an offset, an odd f16 row element by element */
    fwd.offset = 1e2;
    check_regime(m, "layernorm f32 3x100000 flags=scale,bias,stats act=gelu_tanh", &fwd, 88);
    fwd.offset = 0.0;
    check_regime(m, "rmsnorm f16 2x102401 flags=scale", &fwd, 89);
    /* slots (gamma/beta along the row, staged once a block): more rows than slots (16 clusters of 8,
       32 of 4), beta alone, an odd row element by element */
    fwd.offset = 1e3;
    check_regime(m, "layernorm f32 40x100000 flags=scale,bias", &fwd, 115);
    check_regime(m, "layernorm f32 50x100000 flags=bias act=silu", &fwd, 116);
    fwd.offset = 0.0;
    check_regime(m, "rmsnorm f32 100x70001 flags=scale,stats", &fwd, 117);
    /* channels-last GroupNorm: a cluster an image, a tile a block staged (8, 4 and 8 tiles) */
    fwd.offset = 1e3;
    check_regime(m, "groupnorm f32 nhwc 2x64x64x64 groups=8 flags=scale,bias,stats", &fwd, 77);
    fwd.offset = 0.0;
    check_regime(m, "groupnorm f16 nhwc 2x640x32x32 groups=32 act=silu flags=scale,bias", &fwd, 78);
    check_regime(m, "groupnorm bf16 nhwc 3x1280x16x16 groups=32 act=gelu_erf flags=scale,bias", &fwd, 79);
    /* and their backward when x and dy fit the cluster: an activation, no gamma/beta, the saved mean's
       correction of the dgamma partials (f32 at an offset of 3e4) */
    check_line(m, "groupnorm f16 nhwc 2x320x32x32 groups=32 act=silu flags=scale,bias", 0.0, 81);
    check_line(m, "groupnorm bf16 nhwc 2x640x16x16 groups=32 act=gelu_erf flags=scale,bias", 0.0, 82);
    check_line(m, "groupnorm f16 nhwc 3x320x32x32 groups=32", 0.0, 83);
    regime bwd = {"bwd", 3e4, 1.0, 1e-5, 0, NJ_PASS_BACKWARD, 0};
    check_regime(m, "groupnorm f32 nhwc 2x64x48x48 groups=8 flags=scale,bias", &bwd, 84);
    /* the backward of one-tile images: staged in one block (8 x 8), or a cluster of 2 (16 x 16) */
    check_line(m, "groupnorm f16 nhwc 3x320x8x8 groups=32 act=silu flags=scale,bias", 0.0, 97);
    check_line(m, "groupnorm bf16 nhwc 2x320x16x16 groups=32 flags=scale act=gelu_erf", 0.0, 98);
    check_regime(m, "groupnorm f32 nhwc 2x64x12x12 groups=8 flags=scale,bias", &bwd, 99);
    /* their copies move 16 bytes (P.copy_vec) beside 8-byte vectors: x, dy and dx 8 bytes past 16-byte
       alignment must take the unaligned variant (the emulator faults on a misaligned vector), f32 4 past */
    regime shifted = {"shift", 0.0, 1.0, 1e-5, 0, NJ_PASS_BACKWARD, 8};
    check_regime(m, "groupnorm f16 nhwc 3x320x8x8 groups=32 act=silu flags=scale,bias", &shifted, 137);
    check_regime(m, "groupnorm bf16 nhwc 2x640x16x16 groups=32 flags=scale,bias", &shifted, 138);
    shifted.shift = 4;
    check_regime(m, "groupnorm f32 nhwc 2x64x12x12 groups=8 flags=scale,bias", &shifted, 139);
    /* pixel rows rounded up to 512 threads: 1280 f16 channels in 2 rows (640 threads, a cluster of 2),
       1200 in 2 (608), 320 in 7 (576: the 64 pixels in one partial round) */
    check_line(m, "groupnorm f16 nhwc 2x1280x8x8 groups=32 act=silu flags=scale,bias", 0.0, 140);
    check_line(m, "groupnorm bf16 nhwc 2x1200x8x8 groups=30 act=gelu_erf flags=scale,bias", 1e2, 141);
    /* small images' forwards past 96 KB staged in clusters of 2: f16 8 x 8 of 1280 channels, f32 12 x 12
       of 320 with the saved statistics at an offset, 1000 channels (vectors of 8, 512 threads) */
    regime small = {"fwd", 1e2, 1.0, 1e-5, 0, NJ_PASS_FORWARD, 0};
    check_regime(m, "groupnorm f16 nhwc 3x1280x8x8 groups=32 act=silu flags=scale,bias", &small, 151);
    check_regime(m, "groupnorm f32 nhwc 2x320x12x12 groups=32 flags=scale,bias,stats", &small, 152);
    check_regime(m, "groupnorm f16 nhwc 2x1000x9x9 groups=20 flags=bias", &small, 153);
    /* the row cluster's backward (gamma constant over each row): both passes, an activation, no gamma,
       the saved mean's correction (f32 at 1e5) */
    check_line(m, "instancenorm f32 ncdhw 2x2x64x64x64 flags=scale,bias act=silu", 0.0, 85);
    check_line(m, "instancenorm bf16 ncdhw 1x3x64x64x64", 0.0, 86);
    bwd.offset = 1e5;
    check_regime(m, "instancenorm f32 ncdhw 1x3x64x64x64 flags=scale,bias", &bwd, 87);
    /* the slots' backward with gamma (and under an activation beta) staged beside x and the partials
       (P.stage 2): beta's floats after gamma's, no dbeta rows (RMS), an odd row element by element */
    bwd.offset = 1e2;
    check_regime(m, "layernorm f32 30x80000 flags=scale,bias act=silu", &bwd, 118);
    check_regime(m, "rmsnorm f32 40x60000 flags=scale", &bwd, 119);
    check_regime(m, "layernorm f32 20x99999 flags=scale,bias", &bwd, 120);
    /* the backward's rows that fit one block (x and dy of 64 KB and more): x staged, no cluster */
    check_line(m, "instancenorm f32 nchw 2x3x128x128 flags=scale,bias act=silu", 0.0, 90);
    check_line(m, "rmsnorm bf16 3x20000 flags=none", 0.0, 91);
    check_line(m, "layernorm f16 2x20001 flags=none act=gelu_tanh", 0.0, 92);
    bwd.offset = 3e4;
    check_regime(m, "instancenorm f32 ncdhw 2x3x32x32x32 flags=scale,bias", &bwd, 93);
    /* rows past 16384 with gamma along the row: slots of clusters (8, 2 blocks) or blocks walking the rows,
       each block's dgamma/dbeta partials in shared memory; the saved mean's correction at 1e5 */
    check_line(m, "layernorm f32 20x100000 flags=scale,bias", 0.0, 100);
    check_line(m, "rmsnorm bf16 3x40000 flags=scale act=silu", 0.0, 101);
    check_line(m, "layernorm f16 140x20000 flags=scale,bias act=gelu_erf", 0.0, 102);
    bwd.offset = 1e5;
    check_regime(m, "layernorm f32 5x30001 flags=scale,bias", &bwd, 103);
    /* GroupNorm NCHW in clusters: each piece within one channel, its own gamma and dgamma/dbeta pair */
    check_line(m, "groupnorm f32 nchw 2x8x256x256 groups=4 flags=scale,bias act=silu", 0.0, 94);
    check_line(m, "groupnorm bf16 nchw 2x8x256x256 groups=4 flags=scale,bias", 1e2, 95);
    check_line(m, "groupnorm f16 nchw 1x12x256x256 groups=3 flags=scale act=gelu_tanh", 0.0, 96);
    fwd.nan = 1;
    check_regime(m, "instancenorm f16 ncdhw 1x3x64x64x64 flags=scale,bias", &fwd, 76);
    check_regime(m, "groupnorm f16 nhwc 2x320x32x32 groups=32 flags=scale,bias", &fwd, 80);
    assert_int_equal(m->failed - before, 0);
}

/* The image family (fwd_image.cu): a block per image of LayerNorm over the C of NCHW, staged in shared
 * memory. 16-byte copies at 512 threads (f16 7x7, 2 blocks an SM) and 1024 (f32), offsets (each pixel
 * shifted by its first channel), saved statistics and GELU; the residual summed into floats;
 * 4-element vectors where 8 do not divide the image (RMS), a scalar copy for an odd image, a vector
 * spanning three channels of 3 pixels, a wider y, and a NaN that must stay in its pixel; backward
 * passes alike (check_line runs both). */
/* Split rows and channels-last images pipelined in one launch (P.lag, fwd_row.cu, bwd_general.cu,
   fwd_channels_last.cu): statistics past what a cluster keeps (sm_90),
   more pieces than the lag (blocks alternate sums and normalization), the saved statistics and an
   activation at an offset, gamma/beta a channel within the row, the residual, and its unaligned variant
   (2 bytes off: vec 1). The emulator stops a launch whose block waits on a counter no earlier block
   raised. */
static void test_pipe(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    regime fwd = {"fwd", 1e3, 1.0, 1e-5, 0, NJ_PASS_FORWARD, 0};
    check_regime(m, "instancenorm f32 ncdhw 2x3x64x64x128 flags=scale,bias,stats act=silu", &fwd, 154);
    fwd.offset = 0.0;
    check_regime(m, "groupnorm f32 nchw 2x64x128x128 groups=2 flags=scale,bias", &fwd, 155);
    check_regime(m, "layernorm f16 6x300000 flags=scale,bias,residual,resout", &fwd, 156);
    fwd.shift = 2;
    check_regime(m, "layernorm f16 6x300000 flags=scale,bias,residual,resout", &fwd, 157);
    /* the backward (bwd_general.cu, gamma/beta a set's: their sums from the pipe's merged sums): an
       activation and the saved mean's correction at an offset, none without gamma/beta */
    /* channels-last images of several tiles past a cluster (fwd_channels_last.cu: the last tile's block
       merges the image's tiles): an offset, the saved statistics, the unaligned variant */
    fwd.shift = 0;
    fwd.offset = 1e2;
    check_regime(m, "groupnorm f16 nhwc 2x320x64x64 groups=32 act=silu flags=scale,bias", &fwd, 160);
    fwd.offset = 0.0;
    check_regime(m, "groupnorm f16 nhwc 1x1280x64x64 groups=32 act=gelu_erf flags=scale,bias,stats", &fwd, 161);
    fwd.shift = 2;
    check_regime(m, "groupnorm f16 nhwc 2x320x64x64 groups=32 act=silu flags=scale,bias", &fwd, 162);
    regime bwd = {"bwd", 1e3, 1.0, 1e-5, 0, NJ_PASS_BACKWARD, 0};
    check_regime(m, "instancenorm f32 ncdhw 2x3x64x64x128 flags=scale,bias,stats act=silu", &bwd, 158);
    bwd.offset = 0.0;
    check_regime(m, "instancenorm bf16 ncdhw 2x3x64x64x128", &bwd, 159);
    /* channels-last backward (bwd_channels_last.cu): the saved mean's correction of the dgamma partials
       at an offset (f32), an activation, none without gamma/beta, the unaligned variant */
    bwd.offset = 3e4;
    check_regime(m, "groupnorm f32 nhwc 2x64x64x64 groups=8 flags=scale,bias", &bwd, 163);
    bwd.offset = 0.0;
    check_regime(m, "groupnorm f16 nhwc 2x320x64x64 groups=32 act=silu flags=scale,bias", &bwd, 164);
    check_regime(m, "groupnorm bf16 nhwc 2x640x32x32 groups=32 act=gelu_erf", &bwd, 165);
    bwd.shift = 2;
    check_regime(m, "groupnorm f16 nhwc 2x320x64x64 groups=32 act=silu flags=scale,bias", &bwd, 166);
    /* 640 lanes a pixel row (2560 f16 channels, 1280 f32: blocks of 640 threads), tiles widened to 24
       pixels (12 of f32) for their dgamma/dbeta pairs: the saved mean's correction at an offset, an
       activation, the unaligned variant of the pipe and of a cluster of 8; 1280 f16 channels in tiles
       of 24 pixels */
    bwd.shift = 0;
    bwd.offset = 1e2;
    check_regime(m, "groupnorm f16 nhwc 2x2560x16x16 groups=32 act=silu flags=scale,bias", &bwd, 179);
    bwd.offset = 3e4;
    check_regime(m, "groupnorm f32 nhwc 2x1280x20x20 groups=32 act=gelu_tanh flags=scale,bias", &bwd, 180);
    bwd.offset = 0.0;
    bwd.shift = 2;
    check_regime(m, "groupnorm bf16 nhwc 2x2560x16x16 groups=32 flags=scale,bias", &bwd, 181);
    check_regime(m, "groupnorm bf16 nhwc 2x2560x12x12 groups=32 flags=scale,bias", &bwd, 183);
    /* GroupNorm NCHW's rows of runs (bwd_cluster.cu RUNS: a pair a channel, sums weighted by each
       channel's gamma): a block a row (1024 threads; 256 for short rows), an activation, the saved mean's
       correction at an offset, beta alone under an activation, the unaligned variant, a cluster of 5 (f32,
       30 channels a row: 6 a block) */
    bwd.shift = 0;
    bwd.offset = 1e2;
    check_regime(m, "groupnorm f16 nchw 2x320x64x64 groups=32 act=silu flags=scale,bias", &bwd, 186);
    bwd.offset = 3e4;
    check_regime(m, "groupnorm f32 nchw 2x128x16x16 groups=32 act=gelu_erf flags=scale,bias", &bwd, 187);
    bwd.offset = 0.0;
    check_regime(m, "groupnorm f16 nchw 3x1280x8x8 groups=32 flags=bias act=sigmoid", &bwd, 188);
    bwd.shift = 2;
    check_regime(m, "groupnorm bf16 nchw 2x320x16x16 groups=32 act=silu flags=scale,bias", &bwd, 189);
    bwd.shift = 0;
    check_regime(m, "groupnorm f32 nchw 1x960x64x64 groups=32 act=silu flags=scale,bias", &bwd, 190);
    /* BatchNorm NCHW whose channels outgrow the L2 a resident block each (general_split): pipelined
       forward and backward, an activation, the saved statistics at an offset, the unaligned variant */
    fwd.shift = 0;
    fwd.offset = 1e2;
    check_regime(m, "batchnorm f32 nchw 32x4x28x28 flags=scale,bias,stats act=relu", &fwd, 191);
    fwd.offset = 0.0;
    fwd.shift = 2;
    check_regime(m, "batchnorm bf16 nchw 64x3x28x28 flags=scale,bias act=silu", &fwd, 192);
    fwd.shift = 0;
    bwd.shift = 0;
    bwd.offset = 3e4;
    check_regime(m, "batchnorm f32 nchw 32x4x28x28 flags=scale,bias", &bwd, 193);
    bwd.offset = 0.0;
    check_regime(m, "batchnorm f16 nchw 64x4x28x28 flags=scale,bias act=relu", &bwd, 194);
    /* f32 past 1280 channels: two 8-byte vectors a thread (P.chans 4, P.vec 2), 640 lanes; unaligned: 4
       channels one at a time */
    bwd.shift = 4;
    check_regime(m, "groupnorm f32 nhwc 2x2560x16x16 groups=32 act=gelu_erf flags=scale,bias", &bwd, 184);
    bwd.shift = 0;
    bwd.offset = 3e4;
    check_regime(m, "groupnorm f32 nhwc 2x2560x16x16 groups=32 act=silu flags=scale,bias", &bwd, 185);
    bwd.offset = 0.0;
    bwd.shift = 0;
    check_regime(m, "groupnorm f16 nhwc 2x1280x24x24 groups=32 act=silu flags=scale,bias", &bwd, 182);
    /* BatchNorm of few channels, split below 2^18 (planner_general.c): forward part and main launches,
       the backward pipelined */
    check_line(m, "batchnorm f16 nchw 48x64x28x28 flags=scale,bias", 1e2, 167);
    /* split column walks (fwd_column.cu: the block of a tile's last piece merges its pieces, 16-byte
       loads of their pairs): an offset and an activation, the residual through the unaligned variant,
       RMS, BatchNorm NHWC's half-line tiles, a short last piece */
    fwd.shift = 0;
    fwd.offset = 1e3;
    check_regime(m, "instancenorm f32 ndhwc 2x16x16x16x64 flags=scale,bias,stats act=silu", &fwd, 168);
    fwd.offset = 0.0;
    fwd.shift = 2;
    check_regime(m, "instancenorm f16 ndhwc 2x16x16x16x128 flags=scale,bias,residual,resout", &fwd, 169);
    fwd.shift = 0;
    check_regime(m, "rmsnorm bf16 2x8192x64 axes=1 flags=scale", &fwd, 170);
    check_regime(m, "batchnorm f16 nhwc 4x32x32x64 flags=scale,bias,stats", &fwd, 171);
    fwd.offset = 1e2; /* 19 pieces of 244 walk rows, the last of 232: the merge's piece lengths */
    check_regime(m, "instancenorm f32 ndhwc 1x17x16x17x32 flags=scale,bias", &fwd, 172);
    /* 128 bf16 channels whose line's tile would be 18 MB: half-line tiles, 4 a walk row */
    check_regime(m, "batchnorm bf16 nhwc 72x128x32x32 flags=scale,bias,stats act=relu", &fwd, 178);
    /* their backward (bwd_column.cu: two-level merges of the pieces' sums): the saved mean's correction
       of the fused dgamma rows at an offset, an activation's exact correction, 313 pieces (a short last
       group), no gamma/beta, 16-bit through the unaligned variant */
    bwd.shift = 0;
    bwd.offset = 3e4;
    check_regime(m, "instancenorm f32 ndhwc 2x16x16x16x64 flags=scale,bias", &bwd, 173);
    bwd.offset = 1e3;
    check_regime(m, "instancenorm f32 ndhwc 2x16x16x16x64 flags=scale,bias,stats act=silu", &bwd, 174);
    bwd.offset = 0.0;
    check_regime(m, "instancenorm f32 ndhwc 1x40x40x25x32 flags=scale,bias", &bwd, 175);
    check_regime(m, "rmsnorm bf16 2x8192x64 axes=1 flags=none", &bwd, 176);
    bwd.shift = 2;
    check_regime(m, "instancenorm f16 ndhwc 2x16x16x16x128 flags=scale,bias act=gelu_erf", &bwd, 177);
    assert_int_equal(m->failed - before, 0);
}

static void test_image(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    /* f16 holds 1e2 + [-1, 1] in steps of 1/16 (at 1e4, in steps of 8: a constant image) */
    regime fwd = {"offset", 1e2, 1.0, 1e-5, 0, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, 0};
    check_regime(m, "layernorm f16 nchw 5x768x7x7 axes=1 flags=scale,bias", &fwd, 61);
    fwd.offset = 1e4;
    check_regime(m, "layernorm f32 nchw 3x768x7x7 axes=1 flags=scale,bias,stats act=gelu_erf", &fwd, 62);
    check_line(m, "layernorm bf16 nchw 3x96x14x14 axes=1 flags=scale,bias,residual,resout,stats", 1e3, 63);
    check_line(m, "rmsnorm f16 nchw 4x100x7x7 axes=1 flags=scale,stats", 0.0, 64);
    check_line(m, "layernorm f16 nchw 3x33x7x7 axes=1 flags=bias,stats", 0.0, 65);
    check_line(m, "layernorm f16 nchw 3x64x1x3 axes=1 flags=scale,bias,stats", 1e2, 66);
    check_line(m, "layernorm f16 nchw 3x96x7x7 axes=1 flags=scale,bias y.dtype=f32", 0.0, 67);
    regime nan = {"nan", 0.0, 1.0, 1e-5, 1, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, 0};
    check_regime(m, "layernorm f16 nchw 3x96x7x7 axes=1 flags=scale,bias,stats", &nan, 68);
    /* the backward: x and dy staged, the pixels' dl at a 1e6 offset, each channel's pair an image */
    check_line(m, "layernorm f32 nchw 3x96x7x7 axes=1 flags=scale,bias act=gelu_tanh", 1e6, 69);
    check_line(m, "rmsnorm bf16 nchw 4x64x5x5 axes=1 flags=scale,bias act=silu", 0.0, 70);
    check_line(m, "layernorm f16 nchw 3x40x7x7 axes=1 flags=bias dx.dtype=f32", 1e2, 71);
    /* x alone staged (P.stage 2: f32 768x7x7's x and dy take 301 KB), dy read twice */
    check_line(m, "layernorm f32 nchw 2x768x7x7 axes=1 flags=scale,bias act=silu", 1e6, 72);
    check_line(m, "rmsnorm f32 nchw 2x1000x6x6 axes=1 flags=scale", 0.0, 73);
    /* column backward, x and dy staged in blocks of 512 (tiles of 98 and 77 KB: two blocks an SM); the
     * saved mean's correction at the offset; 143 pixels, the last tile 15 columns wide (images that the
     * image family now takes in parts) */
    setenv("NORMJIT_PLAN_NO_IMAGE_PARTS", "1", 1);
    check_line(m, "layernorm f32 nchw 2x384x14x14 axes=1 flags=scale,bias", 1e6, 74);
    check_line(m, "layernorm f32 nchw 3x300x11x13 axes=1 flags=scale,bias act=gelu_tanh", 0.0, 75);
    unsetenv("NORMJIT_PLAN_NO_IMAGE_PARTS");
    /* images in parts (planner_image.c): f32 14x14 (forward two parts of 100 and 96 pixels, backward
     * three of 68, the last 60) at an offset with the saved statistics; f16's backward in two with the
     * beta table of an activation; the residual's floats in two parts; 195 pixels a scalar copy (parts
     * of 98 and 97); 143 pixels under GELU; an odd batch stride (the unaligned variant's parts) */
    check_line(m, "layernorm f32 nchw 2x384x14x14 axes=1 flags=scale,bias,stats", 1e6, 127);
    check_line(m, "layernorm f16 nchw 3x384x14x14 axes=1 flags=scale,bias act=silu", 0.0, 128);
    check_line(m, "layernorm bf16 nchw 2x300x14x14 axes=1 flags=scale,bias,residual,resout,stats", 1e2, 129);
    check_line(m, "rmsnorm f16 nchw 2x400x13x15 axes=1 flags=scale", 0.0, 130);
    check_line(m, "layernorm f32 nchw 3x300x11x13 axes=1 flags=scale,bias act=gelu_tanh", 0.0, 131);
    check_line(m, "norm f32 shape=2x384x196 strides=75265,196,1 reduce=1 feature=1 flags=center,scale,bias", 1e2, 132);
    /* slots backwards with f32 gamma (and beta under an activation) staged once a block: rows of 10000
     * (not fetching ahead), of 5000 with silu, an RMSNorm of 9000 with relu (gamma alone) */
    check_line(m, "layernorm f32 3x10000 flags=scale,bias", 1e6, 76);
    check_line(m, "layernorm f32 3x5000 flags=scale,bias act=silu", 0.0, 77);
    check_line(m, "rmsnorm f32 2x9000 flags=scale act=relu", 0.0, 78);
    assert_int_equal(m->failed - before, 0);
}

/* The tile family (fwd_tile.cu, bwd_tile.cu): short rows, tiles staged in shared memory. nv_norms'
 * rows of 10 over several tiles and a partial last one; the residual as floats; an odd 16-bit row (an
 * element at a time); a padded batch stride (12) and an unaligned one (11: the unaligned variant); a
 * NaN that must stay in its row; both passes. */
static void test_tile(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    regime fwd = {"offset", 1e3, 1.0, 1e-5, 0, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, 0};
    check_regime(m, "layernorm f32 1000x10 flags=scale,bias,stats", &fwd, 81);
    check_regime(m, "layernorm bf16 900x24 flags=scale,bias,residual,resout,stats act=silu", &fwd, 82);
    fwd.offset = 0.0;
    check_regime(m, "rmsnorm f16 3000x7 flags=scale,stats", &fwd, 83);
    check_regime(m, "norm f32 shape=1000x10 strides=12,1 reduce=1 feature=1 flags=center,scale,bias,stats", &fwd, 84);
    check_regime(m, "norm f32 shape=1000x10 strides=11,1 reduce=1 feature=1 flags=center,scale", &fwd, 85);
    regime nan = {"nan", 0.0, 1.0, 1e-5, 1, NJ_PASS_FORWARD | NJ_PASS_BACKWARD, 0};
    check_regime(m, "layernorm f16 500x16 flags=scale,bias,stats", &nan, 86);
    /* the backward's slots: more tiles than slots (528 of 204 rows), dl at a 1e6 offset, GELU */
    regime big = {"offset", 1e6, 1.0, 1e-5, 0, NJ_PASS_BACKWARD, 0};
    check_regime(m, "layernorm f32 250000x10 flags=scale,bias act=gelu_erf", &big, 87);
    /* rows of 65-512 bytes that are not whole sectors (nv_norms' f32 rows of 100; bf16 rows of 250 with
     * the residual's floats: 16 rows a tile; f16 RMS rows of 36) and an odd batch stride */
    check_line(m, "layernorm f32 300x100 flags=scale,bias,stats", 1e3, 133);
    check_line(m, "layernorm bf16 70x250 flags=scale,bias,residual,resout act=silu", 1e2, 134);
    check_line(m, "rmsnorm f16 999x36 flags=scale", 0.0, 135);
    check_regime(m, "norm f32 shape=300x100 strides=101,1 reduce=1 feature=1 flags=center,scale,bias", &fwd, 136);
    assert_int_equal(m->failed - before, 0);
}

static void test_instancenorm(void **state)
{
    static const char *const bases[] = {"instancenorm %s nchw 2x6x9x7", "instancenorm %s nhwc 2x9x7x6",
                                        "instancenorm %s ncl 2x5x33", "instancenorm %s ndhwc 1x4x5x3x8",
                                        "instancenorm %s nchw 3x2x1x1",
                                        "instancenorm %s nhwc 3x5x7x40", /* column family, dgamma fused */
                                        "instancenorm %s ndhwc 2x40x16x16x18", /* 10240-row walks: split */
                                        "instancenorm %s ndhwc 2x16x16x16x128" /* split, 16-bit columns 2 a lane */};
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "instancenorm f32 ndhwc 2x3x4x5x33 flags=scale,bias,stats act=gelu_tanh", 0.0, 23);
    check_line(m, "instancenorm bf16 nhwc 4x3x3x64 flags=scale,bias", 0.0, 24);
    /* split column walks with saved statistics: the library's merge, piece 0 writing them */
    check_line(m, "instancenorm bf16 ndhwc 2x40x16x16x18 flags=scale,bias,stats act=silu", 0.0, 25);
    check_line(m, "rmsnorm f32 nchw 1x4500x2x17 axes=1 flags=scale,stats", 0.0, 26); /* the merge's RMS mode */
    /* column vectors with the residual fused: split (2 f16 columns a lane) and whole walks (4 bf16) */
    check_line(m, "instancenorm f16 ndhwc 2x16x16x16x256 flags=scale,bias,residual,resout,stats act=silu", 0.0, 28);
    check_line(m, "rmsnorm bf16 nchw 3x40x8x16 axes=1 flags=scale,residual,resout,stats", 0.0, 29);
    /* a staged tile of x + residual, kept as floats */
    check_line(m, "layernorm f16 nchw 2x128x7x5 axes=1 flags=scale,bias,residual,resout,stats", 1e3, 30);
    /* 8 f16 columns a lane, each shifted by its first element (one vector load), warp 0's merge by the
       same (shared memory): saved means at an offset show a column merged with another's shift */
    check_line(m, "layernorm f16 nchw 2x96x32x32 axes=1 flags=scale,bias,stats", 1e2, 103);
    /* sub-rows of a warp (P.rows_per_block): 32 f32 channels 4 a lane, 8 lanes a row, whole walks with
       saved statistics and an activation; RMS walks (the merge's sum of squares) whole and split; a
       staged tile of x + residual over 8 sub-rows of 4 lanes */
    check_line(m, "instancenorm f32 ndhwc 2x12x10x10x32 flags=scale,bias,stats act=silu", 1e2, 104);
    check_line(m, "rmsnorm f32 2x3000x32 axes=1 flags=scale,stats", 0.0, 105);
    check_line(m, "rmsnorm f32 2x5000x32 axes=1 flags=scale,stats", 0.0, 106);
    check_line(m, "instancenorm f16 nhwc 2x16x8x32 flags=scale,bias,residual,resout,stats", 1e2, 107);
    assert_int_equal(m->failed - before, 0);
}

static void test_groupnorm(void **state)
{
    static const char *const bases[] = {"groupnorm %s nchw 2x12x5x5 groups=4", "groupnorm %s nhwc 2x12x5x5 groups=3",
                                        "groupnorm %s nhwc 1x64x8x8 groups=32", "groupnorm %s nchw 2x6x1x1 groups=6",
                                        "groupnorm %s nchw 1x32x16x16 groups=32",
                                        "groupnorm %s nhwc 1x320x16x16 groups=32", /* the UNet's, 8-channel vectors */
                                        "groupnorm %s nhwc 2x64x50x50 groups=8" /* 10 tiles, the last one short */};
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
    /* split sets of 4 channels, each piece within one channel: dgamma/dbeta from the dx launch's pieces
     * (pgrad "pieces"), the column sum adding 2 pieces of each of 2 images a channel */
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "groupnorm f32 nchw 2x8x256x256 groups=2 flags=scale,bias", 0.0, 44);
    check_line(m, "groupnorm bf16 nchw 2x8x256x256 groups=2 flags=scale,bias,stats act=silu", 1e3, 45);
    check_line(m, "groupnorm f16 nchw 2x8x256x256 groups=2 flags=scale", 0.0, 46);
    assert_int_equal(m->failed - before, 0);
}

static void test_batchnorm(void **state)
{
    static const char *const bases[] = {"batchnorm %s nchw 3x5x4x4", "batchnorm %s nhwc 3x5x4x4",
                                        "batchnorm %s ncl 2x3x17",
                                        "batchnorm %s nchw 4x2x256x256", /* 2^18 a channel: split walks */
                                        "batchnorm %s nhwc 2x48x48x48", /* 48 columns, 4608-row walks: split */
                                        "batchnorm %s nhwc 2x64x48x48" /* 64 columns, split: 16-bit ones 2 a lane */};
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
    /* more channels than two waves of dgamma/dbeta blocks: those blocks loop over the channels, and the
     * dx blocks (18 elements a statistic) loop over theirs */
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "batchnorm f32 nchw 2x2200x3x3 flags=scale,bias", 0.0, 21);
    check_line(m, "batchnorm bf16 nchw 2x2200x3x3 flags=scale,bias act=relu", 0.0, 22);
    check_line(m, "batchnorm f32 nhwc 2x48x48x48 flags=scale,bias,stats", 0.0, 27); /* split walks, saved stats */
    assert_int_equal(m->failed - before, 0);
}

static void test_general(void **state)
{
    static const char *const bases[] = {
        "norm %s shape=4x6x5x3 reduce=0,2 feature=1",
        "norm %s shape=3x5x7 strides=70,1,10 reduce=1 feature=1", /* permuted, padded view */
        "norm %s shape=4x8x6 reduce=1,2 feature=2",                /* F partly inside R */
        "norm %s shape=5x9 reduce=0 feature=none",
    };
    run_family(*state, bases, sizeof bases / sizeof bases[0]);
}

/* Every flag set with every activation, on a row, a channels-last group and a general problem. */
static void test_flags_by_activation(void **state)
{
    matrix_state *m = *state;
    static const char *const bases[] = {"layernorm f32 3x64", "groupnorm bf16 nhwc 2x8x3x3 groups=2",
                                        "norm f16 shape=4x6x5 reduce=0,2 feature=1"};
    int before = m->failed;
    for (size_t b = 0; b < 3; b++)
        for (size_t c = 0; c < NCOMBO; c++)
            for (size_t a = 0; a < NACT; a++) {
                char line[512];
                snprintf(line, sizeof line, "%s flags=%s act=%s", bases[b], combos[c], acts[a]);
                check_line(m, line, 0.0, 100 + c * NACT + a);
            }
    assert_int_equal(m->failed - before, 0);
}

/* A large mean offset must not cancel (stable statistics), and half-precision inputs near the f16 limit
 * must not overflow (arithmetic in float32). */
static void test_special_values(void **state)
{
    matrix_state *m = *state;
    int before = m->failed;
    check_line(m, "layernorm f32 4x1000 flags=scale,bias,stats", 1e4, 11);
    check_line(m, "instancenorm f32 nchw 2x3x16x16 flags=scale,bias,stats", 1e4, 12);
    check_line(m, "norm f32 shape=4x6x5 reduce=0,2 feature=1 flags=center,scale,bias,stats", 1e4, 13);
    check_line(m, "layernorm f16 3x256 flags=scale,bias", 6.0e4, 14);
    check_line(m, "groupnorm f16 nhwc 2x8x4x4 groups=2 flags=scale,bias act=silu", 6.0e4, 15);
    check_line(m, "rmsnorm f16 3x512 flags=scale", 6.0e4, 16);
    check_line(m, "layernorm bf16 3x4096 flags=scale,bias,residual,resout", 1e3, 17);
    assert_int_equal(m->failed - before, 0);
}

/* Offsets (|mean| / std of 1e2, 1e4, 1e6), magnitudes (1e30, 1e-30 with eps 0: a unit-variance output)
 * and a NaN in one set, on every family and dtype, forward and backward, judged by the ordinary
 * tolerances (tools/tolerance.h: f32 y 1e-5, dx 1e-4): the statistics are shifted and scaled sums
 * (templates/prelude.cuh, nj_shift). f16 holds neither offsets past ~6e4 nor magnitudes past 6.5e4 or
 * below 6e-8, and bf16 resolves a 1e6 offset to a constant set: their regimes are the ones they can
 * represent (a constant set must give exactly beta). */
static const regime regimes_f32[] = {
    {"offset 1e2", 1e2, 1.0, 1e-5, 0, 3, 0}, {"offset 1e4", 1e4, 1.0, 1e-5, 0, 3, 0},
    {"offset 1e6", 1e6, 1.0, 1e-5, 0, 3, 0}, {"magnitude 1e30", 0.0, 1e30, 1e-5, 0, 3, 0},
    {"magnitude 1e-30", 0.0, 1e-30, 0.0, 0, 3, 0}, {"a NaN", 0.0, 1.0, 1e-5, 1, 3, 0},
};
static const regime regimes_f16[] = {
    {"offset 1e2", 1e2, 1.0, 1e-5, 0, 3, 0}, {"offset 1e4", 1e4, 1.0, 1e-5, 0, 3, 0},
    {"magnitude 1e4", 0.0, 1e4, 1e-5, 0, 3, 0}, {"magnitude 1e-3", 0.0, 1e-3, 0.0, 0, 3, 0},
    {"a NaN", 0.0, 1.0, 1e-5, 1, 3, 0},
};
static const regime regimes_bf16[] = {
    {"offset 1e2", 1e2, 1.0, 1e-5, 0, 3, 0}, {"offset 1e6 (constant sets)", 1e6, 1.0, 1e-5, 0, 3, 0},
    {"magnitude 1e30", 0.0, 1e30, 1e-5, 0, 3, 0}, {"magnitude 1e-30", 0.0, 1e-30, 0.0, 0, 3, 0},
    {"a NaN", 0.0, 1.0, 1e-5, 1, 3, 0},
};

static void test_regimes(void **state)
{
    matrix_state *m = *state;
    /* a family each: warp rows, register rows, streamed rows (column-tiled dgamma), RMS rows, general
     * (dgamma walk), column (fused dgamma), channels-last (library merge), split column walks (merge) */
    static const char *const probs[] = {
        "layernorm %s 3x64 flags=scale,bias,stats act=silu",
        /* short rows, several a warp: rows of one warp differ in whether they need dl, and the branch
           around the group's shuffles must still be taken by the whole warp (a deadlock before) */
        "layernorm %s 64x2 flags=scale,bias,stats",
        "layernorm %s 300x4 flags=scale,bias act=silu",
        "layernorm %s 2x1000 flags=scale,bias,stats",
        "layernorm %s 2x12289 flags=scale,bias",
        "rmsnorm %s 3x129 flags=scale,stats",
        "norm %s shape=4x6x5 reduce=0,2 feature=1 flags=center,scale,bias,stats", /* dgamma walk: dl handed on */
        "instancenorm %s nhwc 2x5x7x40 flags=scale,bias,stats",
        "groupnorm %s nhwc 2x12x5x5 groups=3 flags=scale,bias,stats",
        "batchnorm %s nhwc 2x10x64x64 flags=scale,bias,stats",
        "batchnorm %s nhwc 2x48x48x48 flags=scale,bias", /* split column walks: the merge's third sum */
        /* with an activation, dz depends on xhat: the pieces and tiles correct it exactly (a walk over
           the whole set where the saved mean needs it); first order only missed dgamma by 3-5x at 1e4
           and 60-280x at 1e6 */
        "groupnorm %s nhwc 2x12x5x5 groups=3 flags=scale,bias act=silu",
        "batchnorm %s nhwc 2x16x48x48 flags=scale,bias act=silu", /* split column walks */
        "norm %s shape=2x2x131072 reduce=0,2 feature=1 flags=center,scale,bias act=gelu_erf", /* split general */
    };
    const struct {
        const char *dt;
        const regime *g;
        size_t n;
    } sets[] = {{"f32", regimes_f32, sizeof regimes_f32 / sizeof regimes_f32[0]},
                {"f16", regimes_f16, sizeof regimes_f16 / sizeof regimes_f16[0]},
                {"bf16", regimes_bf16, sizeof regimes_bf16 / sizeof regimes_bf16[0]}};
    int before = m->failed;
    for (size_t d = 0; d < 3; d++)
        for (size_t p = 0; p < sizeof probs / sizeof probs[0]; p++)
            for (size_t r = 0; r < sets[d].n; r++) {
                char line[512];
                snprintf(line, sizeof line, probs[p], sets[d].dt);
                check_regime(m, line, &sets[d].g[r], 300 + d * 100 + p * 10 + r);
            }
    assert_int_equal(m->failed - before, 0);
}

/* y of `line` (batch 3) with x's values placed `shift` bytes into a buffer (the rest aligned). */
static void run_at(matrix_state *m, const char *line, size_t shift, const void *xh, size_t xbytes, void *yh,
                   size_t ybytes)
{
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(line, 3, &p), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(m->ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    void *x, *y, *g;
    assert_int_equal(nj_mem_alloc(m->ctx, xbytes + 256, &x), NJ_OK);
    assert_int_equal(nj_mem_alloc(m->ctx, ybytes, &y), NJ_OK);
    static float gh[12289]; /* gamma of the longest row below */
    for (int i = 0; i < 12289; i++) gh[i] = 1.0f + (float)i * 0x1p-14f;
    assert_int_equal(nj_mem_alloc(m->ctx, sizeof gh, &g), NJ_OK);
    assert_int_equal(nj_mem_upload(m->ctx, g, gh, sizeof gh), NJ_OK);
    assert_int_equal(nj_mem_upload(m->ctx, (char *)x + shift, xh, xbytes), NJ_OK);
    size_t wsb = nj_plan_workspace_size(plan, NJ_PASS_FORWARD);
    void *ws = NULL;
    if (wsb) assert_int_equal(nj_mem_alloc(m->ctx, wsb, &ws), NJ_OK);
    nj_forward_args a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof a;
    a.eps = 1e-5f;
    a.x = (char *)x + shift;
    a.gamma = g;
    a.y = y;
    a.workspace = ws;
    a.workspace_size = wsb;
    nj_status st = nj_forward(plan, &a);
    if (st != NJ_OK) fail_msg("%s: %s: %s", line, nj_status_name(st), nj_last_error());
    assert_int_equal(nj_synchronize(m->ctx, NULL), NJ_OK);
    assert_int_equal(nj_mem_download(m->ctx, yh, y, ybytes), NJ_OK);
    if (ws) nj_mem_free(m->ctx, ws);
    nj_mem_free(m->ctx, x);
    nj_mem_free(m->ctx, y);
    nj_mem_free(m->ctx, g);
}

/* What the README promises about alignment: the variant a launch runs (vector or unaligned, its own
 * summation order) follows the operands' alignment, so one input gives the same bits at every address
 * of one alignment class (0 and 64 bytes; 2 and 66, or 4 and 68 for f32); across classes the bits may
 * differ in the last place (printed, not asserted). */
static void test_alignment_bits(void **state)
{
    matrix_state *m = *state;
    static const struct {
        const char *line;
        size_t esize, n;
    } cases[] = {{"layernorm bf16 *x4096 flags=scale", 2, 3 * 4096}, {"layernorm f32 *x1000 flags=scale", 4, 3 * 1000},
                 {"rmsnorm f16 *x12289 flags=scale", 2, 3 * 12289},
                 {"layernorm f32 *x96 flags=scale", 4, 3 * 96}, /* 8 lanes a row, 3 of a warp's 4 rows */
                 {"layernorm f32 *x100 flags=scale", 4, 3 * 100}, /* a tile: rows not whole sectors */
                 /* column tiles: 8-element vectors of 256 channels, 4 of 128 pixels (gamma down the walk) */
                 {"instancenorm f16 nhwc *x3x3x256 flags=scale", 2, 3 * 9 * 256},
                 {"rmsnorm f32 nchw *x5x4x32 axes=1 flags=scale", 4, 3 * 5 * 128},
                 /* thread-block clusters (sm_90): rows of 2^18, a channels-last image of 8 tiles (the
                    unaligned variants read their pieces and tiles again instead of staging them) */
                 {"instancenorm bf16 ncdhw *x1x64x64x64 flags=scale", 2, 3 * 262144},
                 {"groupnorm f16 nhwc *x640x32x32 groups=32 flags=scale", 2, 3 * 640 * 1024}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t bytes = cases[c].esize * cases[c].n;
        unsigned char *xh = malloc(bytes), *y[4];
        assert_non_null(xh);
        uint64_t st = 99 + c;
        for (size_t i = 0; i < bytes; i += 2) { /* 16-bit patterns of finite values near 1e3 in every dtype */
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            uint16_t h = (uint16_t)(0x4400u + ((st >> 40) & 0x3ffu));
            if (cases[c].esize == 4 && (i & 2) == 0) h = (uint16_t)(st >> 48);
            memcpy(xh + i, &h, 2);
        }
        const size_t shifts[4] = {0, 64, cases[c].esize, 64 + cases[c].esize};
        for (int k = 0; k < 4; k++) {
            y[k] = malloc(bytes);
            assert_non_null(y[k]);
            run_at(m, cases[c].line, shifts[k], xh, bytes, y[k], bytes);
        }
        assert_memory_equal(y[0], y[1], bytes); /* aligned, two addresses */
        assert_memory_equal(y[2], y[3], bytes); /* unaligned, two addresses */
        fprintf(stderr, "alignment: %s: aligned and unaligned bits %s\n", cases[c].line,
                memcmp(y[0], y[2], bytes) ? "differ (another summation order)" : "agree");
        for (int k = 0; k < 4; k++) free(y[k]);
        free(xh);
    }
}

/* A constant set normalizes to exactly 0 (x - k is 0 for every element), at any offset and magnitude:
 * y = 0 * rstd * gamma, bit for bit, on rows (registers, streamed), columns and channels-last groups. */
static void test_constant_sets(void **state)
{
    matrix_state *m = *state;
    static const struct {
        const char *line;
        size_t n; /* elements of x at batch 3 */
    } cases[] = {{"layernorm f32 *x1000 flags=scale", 3000}, {"layernorm f32 *x12289 flags=scale", 3 * 12289},
                 {"instancenorm f32 nhwc *x5x7x40 flags=scale", 3 * 5 * 7 * 40},
                 {"groupnorm f32 nhwc *x12x5x5 groups=3 flags=scale", 3 * 12 * 25},
                 {"layernorm f32 nchw *x24x7x5 axes=1 flags=scale", 3 * 24 * 35}};
    static const float values[] = {40000.5f, 1e30f, -3e-30f, 1e6f + 0.0625f};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            size_t bytes = cases[c].n * sizeof(float);
            float *xh = malloc(bytes), *y = malloc(bytes);
            assert_non_null(xh);
            assert_non_null(y);
            for (size_t i = 0; i < cases[c].n; i++) xh[i] = values[v];
            run_at(m, cases[c].line, 0, xh, bytes, y, bytes);
            for (size_t i = 0; i < cases[c].n; i++)
                if (y[i] != 0.0f) fail_msg("%s, x = %g: y[%zu] = %g, not 0", cases[c].line, values[v], i, y[i]);
            free(xh);
            free(y);
        }
    }
}

/* The generic kernels (src/generic.c), which stand in for any problem's own while those compile: a
 * context forced onto them runs a problem of each family in each dtype, with the matrix's checker. */
static void test_generic_kernels(void **state)
{
    matrix_state *m = *state;
    matrix_state g = *m;
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    o.flags = NJ_CTX_EMU_SHUFFLE | NJ_CTX_EMU_POISON | NJ_CTX_EMU_SMALL_GRID;
    o.seed = 9;
    o.cache_dir = m->dir;
    assert_int_equal(nj_context_create(&o, &g.ctx), NJ_OK);
    nj_serve_force_generic(g.ctx, 1);
    static const char *const bases[] = {"layernorm %s 5x70", "groupnorm %s nhwc 2x12x5x5 groups=3",
                                        "batchnorm %s nchw 3x5x4x4", "norm %s shape=4x6x5 reduce=0,2 feature=1"};
    int before = g.failed;
    run_family(&g, bases, sizeof bases / sizeof bases[0]);
    m->run += g.run;
    m->failed += g.failed - before;
    nj_context_destroy(g.ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),   cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_row_persist),
        cmocka_unit_test(test_image), cmocka_unit_test(test_tile), cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_pipe),
        cmocka_unit_test(test_instancenorm), cmocka_unit_test(test_groupnorm),
        cmocka_unit_test(test_batchnorm),   cmocka_unit_test(test_general),
        cmocka_unit_test(test_flags_by_activation), cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_regimes),     cmocka_unit_test(test_alignment_bits),
        cmocka_unit_test(test_constant_sets), cmocka_unit_test(test_generic_kernels),
    };
    /* NJ_MATRIX_FILTER=test_regimes (a cmocka pattern) runs part of the matrix while iterating */
    if (getenv("NJ_MATRIX_FILTER")) cmocka_set_test_filter(getenv("NJ_MATRIX_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
