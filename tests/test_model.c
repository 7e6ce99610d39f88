/* The performance model (src/model*.c): access counting on the emulator, the L2 model's ramp, the device
 * table, the baseline comparison, and a whole pass on small problems whose figures follow by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "emu_fibers.h"
#include "model.h"

static nj_context *g_ctx; /* counting emulator context, sm_90 */

static int group_setup(void **state)
{
    (void)state;
    return nj_model_context(90, NULL, &g_ctx) == NJ_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    nj_context_destroy(g_ctx);
    return 0;
}

static nj_model_result model_of(const char *text, uint32_t passes, uint32_t sample)
{
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(text, 1, &p), NJ_OK);
    nj_model_opts o = {nj_model_device_find("H200"), 0, sample, passes};
    nj_model_result r;
    nj_status s = nj_model_problem(g_ctx, &p, &o, &r);
    if (s != NJ_OK) fail_msg("model of %s: %s", text, nj_last_error());
    return r;
}

static double sum_dir(const nj_model_pass *ps, int d, int what)
{
    double v = 0;
    for (int32_t i = 0; i < ps->nlaunch; i++) {
        const nj_trace_launch *t = &ps->launch[i].t;
        v += what == 0 ? t->bytes[d] : what == 1 ? t->sectors[d] * 32 : what == 2 ? t->lanes[d] : t->req[d];
    }
    return v;
}

/* LayerNorm f32 over rows of 1024 (64 rows, every block traced): a perfect forward reads x, gamma and beta
 * and writes y once; the row kernel's accesses are whole 32-byte sectors, so the counts equal those bytes. */
static void test_row_f32_forward(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 64x1024 flags=scale,bias", NJ_PASS_FORWARD, 1000);
    assert_int_equal(r.npass, 1);
    const nj_model_pass *ps = &r.pass[0];
    double x = 64.0 * 1024 * 4, param = 1024.0 * 4;
    assert_true(ps->ideal_bytes == 2 * x + 2 * param);
    /* every block ran */
    for (int32_t i = 0; i < ps->nlaunch; i++) assert_true(ps->launch[i].t.run == ps->launch[i].t.clusters);
    /* stores: y once, each byte once, fully used sectors, 32 lanes a request */
    assert_true(sum_dir(ps, NJ_TRACE_ST, 0) == x);
    assert_true(sum_dir(ps, NJ_TRACE_ST, 1) == x);
    assert_true(sum_dir(ps, NJ_TRACE_ST, 2) == 32 * sum_dir(ps, NJ_TRACE_ST, 3));
    /* DRAM: x, gamma and beta read once (the cache holds the parameters for every row), y written once */
    double rd = 0, wr = 0;
    for (int32_t i = 0; i < ps->nlaunch; i++) rd += ps->launch[i].t.dram_read, wr += ps->launch[i].t.dram_write;
    assert_true(rd == x + 2 * param);
    assert_true(wr == x);
    assert_true(ps->dram_bytes == ps->ideal_bytes);
    assert_true(ps->time > 0 && ps->pct_copy > 0 && ps->pct_copy < 100);
}

/* Sampling: tracing 4 of 64 blocks scales the counts back to the grid (the same figures for a row problem,
 * whose blocks are alike, up to the first-touch of the shared parameters). */
static void test_sample_scales(void **state)
{
    (void)state;
    nj_model_result all = model_of("rmsnorm f32 64x1024 flags=scale", NJ_PASS_FORWARD, 1000);
    nj_model_result some = model_of("rmsnorm f32 64x1024 flags=scale", NJ_PASS_FORWARD, 4);
    const nj_model_launch *a = &all.pass[0].launch[0], *s = &some.pass[0].launch[0];
    assert_true(s->t.run < s->t.clusters);
    assert_true(s->t.bytes[NJ_TRACE_ST] == a->t.bytes[NJ_TRACE_ST]);
    assert_true(s->t.req[NJ_TRACE_LD] == a->t.req[NJ_TRACE_LD]);
    double x = 64.0 * 1024 * 4;
    assert_true(s->t.dram_write == x);
}

/* The backward of the same problem moves x, dy, dx, the statistics and the parameter gradients at least;
 * its dgamma/dbeta go through a workspace, so the plan moves more than a perfect kernel. */
static void test_row_backward(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 64x1024 flags=scale,bias", NJ_PASS_BACKWARD, 1000);
    const nj_model_pass *ps = &r.pass[0];
    double x = 64.0 * 1024 * 4, param = 1024.0 * 4, stats = 64.0 * 8;
    assert_true(ps->ideal_bytes == 3 * x + 3 * param + stats);
    assert_true(ps->dram_bytes >= 3 * x);
    assert_true(sum_dir(ps, NJ_TRACE_ST, 0) >= x + 2 * param);
}

/* Long rows split over blocks, 8 of 248 traced: every block of a row's pieces reads its piece of gamma
 * and beta, the same 8 MB for all 8 rows, which stay in L2. The normalizing launch reads much of x once
 * more (the statistics launch read it first; walking back over the pieces, it finds the last of them in
 * L2: test_reverse_meets_l2) but the parameters from DRAM at most once: counted per traced block and
 * scaled to the grid, they had made it 2.1x x. */
static void test_param_reads_capped(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 8x1000000 flags=scale,bias", NJ_PASS_FORWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    double x = 8.0 * 1e6 * 4, param = 2 * 1e6 * 4;
    assert_true(ps->nlaunch >= 2);
    const nj_model_launch *norm = &ps->launch[ps->nlaunch - 1];
    assert_true(norm->t.run < norm->t.clusters); /* a sample, scaled */
    assert_true(norm->t.dram_read <= x + 1.5 * param); /* scaled per block: about x + 8 param */
    assert_true(norm->t.dram_read >= 0.5 * x);
}

/* Rows of 10^7 (nv_norms' 10 x 10^7): gamma and beta are 80 MB, past the L2, but the normalizing launch
 * runs piece-major (fwd_row.cu), the rows' blocks of one piece side by side, so each slice of them comes
 * from DRAM once, not once a row: counted per traced block and scaled, they had been 720 MB more. The
 * backward's sums launch (bwd_general.cu) goes piece-major too. */
static void test_param_once_piece_major(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 3x10000000 flags=scale,bias", NJ_PASS_FORWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    double x = 3.0 * 1e7 * 4, param = 2 * 1e7 * 4;
    assert_true(ps->nlaunch >= 2);
    const nj_model_launch *norm = &ps->launch[ps->nlaunch - 1];
    assert_true(norm->t.dram_read <= x + 1.05 * param);
    assert_true(norm->t.dram_read >= param);
    /* the backward's sums launch alike (bwd_general.cu, split rows whose column tiles write dx): x, dy and
     * gamma once */
    r = model_of("layernorm f32 3x10000000 flags=scale,bias", NJ_PASS_BACKWARD, 8);
    ps = &r.pass[0];
    assert_true(strstr(ps->plan_text, "pgrad=tiles_dx") != NULL);
    const nj_model_launch *part = &ps->launch[0];
    assert_string_equal(part->t.kernel, "nj_bwd_dx_part");
    /* (capped at all the parameters' bytes, though it reads gamma alone: half of them) */
    assert_true(part->t.dram_read <= 2 * x + 1.1 * param);
    assert_true(part->t.dram_read >= 2 * x);
}

static double norm_dram_read(const char *text, bool reverse)
{
    if (!reverse) setenv("NORMJIT_PLAN_NO_REVERSE", "1", 1);
    nj_model_result r = model_of(text, NJ_PASS_FORWARD, 8);
    unsetenv("NORMJIT_PLAN_NO_REVERSE");
    const nj_model_pass *ps = &r.pass[0];
    assert_int_equal(ps->nlaunch, 2);
    assert_int_equal(strstr(ps->plan_text, "reverse=1") != NULL, reverse);
    return ps->launch[1].t.dram_read;
}

/* The same split rows (x 32 MB, under the L2's 50): walked forwards, the normalizing launch's reads of x
 * find the statistics launch's last pieces long evicted by the pieces after them and by its own y, so
 * nearly all of x comes from DRAM again; walked backwards (P.reverse), its first pieces are those the
 * statistics launch read last. The model sees that only if the reversed launch traces the blocks that
 * read what the first launch's traced blocks read (their mirror images), and counts the bytes brought
 * back into L2 as the cache's clock. */
static void test_reverse_meets_l2(void **state)
{
    (void)state;
    /* a context keeps the plan it made first for a problem, whatever the switches say later: a problem
       of its own for each plan (gamma alone, beta alone: x and y as before) */
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1); /* the two launches (else one pipelined: test_pipe_twins) */
    double x = 8.0 * 1e6 * 4, fwd = norm_dram_read("layernorm f32 8x1000000 flags=scale", false),
           rev = norm_dram_read("layernorm f32 8x1000000 flags=bias", true);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_true(fwd >= 0.9 * x);
    assert_true(rev <= fwd - 0.25 * x);
}

/* The pipelined split (P.lag): block b's twin handles the same piece in the other role, every block has
   one, the sums' block comes first and the normalizing one at most lag + the piece's row away. The model
   traces twins together and finds the second read of a piece as far back as the grid's bytes between
   them: InstanceNorm f32 over 128^3 voxels (8 MB a statistic) reads x once from DRAM, as its two launches
   read it twice (the second launch's reversed walk finds ~50 MB of it in L2). */
static void test_pipe_twins(void **state)
{
    (void)state;
    for (uint64_t total = 1; total < 40; total += 3)
        for (uint64_t lag = 1; lag < 50; lag += 7) {
            uint64_t sums = 0, l = lag < total ? lag : total;
            for (uint64_t b = 0; b < 2 * total; b++) {
                uint64_t w = nj_pipe_twin(b, total, lag);
                assert_true(w < 2 * total && w != b);
                assert_int_equal(nj_pipe_twin(w, total, lag), b);
                if (b < w) sums++, assert_true(w - b <= 2 * l);
            }
            assert_int_equal(sums, total);
            assert_int_equal(nj_pipe_twin(2 * total, total, lag), UINT64_MAX);
        }
    const char *text = "instancenorm f32 ncdhw 2x32x128x128x128 flags=scale,bias";
    double x = 2.0 * 32 * (1 << 21) * 4;
    nj_model_result r = model_of(text, NJ_PASS_FORWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    assert_non_null(strstr(ps->plan_text, "lag="));
    assert_int_equal(ps->nlaunch, 2);
    assert_true(ps->launch[1].t.run < ps->launch[1].t.clusters);
    assert_true(ps->launch[1].t.dram_read <= 1.03 * x && ps->launch[1].t.dram_read >= 0.97 * x);
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1); /* another problem: the context keeps its first plan */
    r = model_of("instancenorm f32 ncdhw 2x32x128x128x128 flags=scale", NJ_PASS_FORWARD, 8);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    ps = &r.pass[0];
    assert_null(strstr(ps->plan_text, "lag="));
    assert_true(ps->launch[0].t.dram_read + ps->launch[1].t.dram_read >= 1.8 * x);
}

/* InstanceNorm f32 over 64^3 voxels backward (sm_90): a cluster of 8 blocks a row, each staging its
 * piece of x and reading its piece of dy twice (the sums, then dx). Between the two reads an SM brings
 * in about its 128 KB of dy, 132 SMs 17 MB: under half the L2, so the second read hits. The trace runs a
 * cluster as its unit: counted as one block's bytes times the blocks resident, the distance had been 8
 * times that and the second read all DRAM (1.5x x and dy). */
static void test_cluster_rereads_l2(void **state)
{
    (void)state;
    nj_model_result r = model_of("instancenorm f32 ncdhw 4x64x64x64x64 flags=scale,bias", NJ_PASS_BACKWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    double x = 4.0 * 64 * 262144 * 4;
    assert_string_equal(ps->launch[0].t.kernel, "nj_bwd_cluster");
    const nj_trace_launch *t = &ps->launch[0].t;
    assert_true(t->run < t->clusters);                 /* a sample, scaled */
    assert_true(t->bytes[NJ_TRACE_LD] >= 0.95 * 3 * x); /* x once, dy twice */
    assert_true(t->dram_read <= 1.1 * 2 * x);
    assert_true(t->dram_read >= 0.95 * 2 * x);
}

/* LayerNorm f16 over the C of NCHW 14x14, backward (sm_90): x and dy of an image take 301 KB, so each
 * image is two parts of 100 and 96 pixels, a block each, whose channel rows meet inside a sector (a row
 * is 392 bytes). The two blocks run side by side, so a shared sector is one DRAM read. The trace runs
 * an image's parts together (nj_trace_kernel.group): sampled alone, each part counted the shared sectors
 * (1.13x x and dy); counted once for the whole grid, as a parameter is, they vanished (0.90x). */
static void test_image_parts_grouped(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f16 nchw 64x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, 8);
    const nj_model_launch *m = &r.pass[0].launch[0];
    assert_string_equal(m->t.kernel, "nj_bwd_image");
    assert_true(m->blocks == 128);
    assert_true(m->t.run < m->t.clusters);
    double x = 64.0 * 384 * 196 * 2; /* each of x, dy, dx */
    assert_true(m->t.dram_read >= 0.99 * 2 * x);
    assert_true(m->t.dram_read <= 1.04 * 2 * x);
    assert_true(m->t.dram_write >= 0.99 * x);
    assert_true(m->t.dram_write <= 1.04 * x + 2.0 * 128 * 384 * 4 * 1.1); /* dx and the parts' pairs */
}

/* LayerNorm f32 over rows of 1000 forward (nv_norms' 100000 rows): a block of 4 rows reads its rows'
 * x twice (the registers keep 32 of a row's elements) and gamma/beta every row, mostly from its SM's L1
 * (600 of its 1400 MB of loads). Those never reach the L2: charged to its bandwidth they made the launch
 * l2-bound at 232 us, where the H200 measured 197 (2026-12-04), its DRAM time. */
static void test_l1_hits_spare_l2(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 100000x1000 flags=scale,bias", NJ_PASS_FORWARD, 8);
    const nj_model_launch *m = &r.pass[0].launch[0];
    const nj_model_device *d = nj_model_device_find("H200");
    assert_true(m->t.l1_hit >= 0.3 * m->t.sectors[NJ_TRACE_LD] * 32);
    assert_string_equal(m->bound, "dram");
    double ideal = 100000.0 * 1000 * 4 * 2;
    assert_true(r.pass[0].time <= 1.02 * (d->launch_s + ideal / d->copy_bw));
}

/* nv_norms' LayerNorm f32 10^7 x 10 forward: tiles of 408 rows, the last of the 24510 with 328. The
 * sample always runs the last block; counted as a whole one it put the launch at 0.98x the bytes it
 * must move (782 of 800 MB: "100.6% of copy"). */
static void test_partial_last_block(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm f32 10000000x10 flags=scale,bias", NJ_PASS_FORWARD, 8);
    const nj_model_launch *m = &r.pass[0].launch[0];
    assert_string_equal(m->t.kernel, "nj_fwd_tile");
    assert_true(m->t.run < m->t.clusters);
    double x = 1e7 * 10 * 4;
    assert_true(m->t.dram_read >= 0.999 * x && m->t.dram_read <= 1.001 * x);
    assert_true(m->t.dram_write >= 0.999 * x && m->t.dram_write <= 1.001 * x);
}

/* A grid in runs of tiles whose last is short (nj_trace_kernel.period): LayerNorm f16 over the C of NCHW
 * 56 x 56 takes 13 tiles a batch row, the last 64 of 256 columns. Counted as a full block each, the
 * 9-block sample (with the grid's last block, a short one) put the pass's DRAM bytes under those it must
 * move; as their shares, at least them (x read, y written), and 8 and 64 traced blocks agree. */
static void test_short_tile_runs(void **state)
{
    (void)state;
    const char *text = "layernorm f16 nchw 40x96x56x56 axes=1 flags=scale,bias";
    nj_model_result a = model_of(text, NJ_PASS_FORWARD, 8), b = model_of(text, NJ_PASS_FORWARD, 64);
    const nj_model_launch *m = &a.pass[0].launch[0];
    assert_string_equal(m->t.kernel, "nj_fwd_column");
    assert_int_equal(m->t.period, 13);
    assert_true(m->t.run < m->t.clusters);
    double x = 40.0 * 96 * 56 * 56 * 2;
    assert_true(m->t.dram_read >= 0.999 * x);
    assert_true(m->t.dram_write >= 0.999 * x && m->t.dram_write <= 1.01 * x);
    double da = a.pass[0].dram_bytes, db = b.pass[0].dram_bytes;
    assert_true(da >= 0.99 * db && da <= 1.01 * db);
}

/* A kernel built without counting has no hook: a counter sees its launch but no access. */
static void test_counting_off(void **state)
{
    (void)state;
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.arch = 90;
    nj_context *ctx;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 4x256 flags=scale", 1, &p), NJ_OK);
    nj_plan *plan;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    float *x = calloc(1024, 4), *y = calloc(1024, 4), *rstd = calloc(4 + 256, 4);
    nj_trace *t;
    assert_int_equal(nj_trace_create(8, 1e5, 1e6, &t), NJ_OK);
    nj_trace_add_buffer(t, x, 4096, false);
    nj_trace_add_buffer(t, y, 4096, false);
    nj_forward_args a = {.struct_size = sizeof a, .eps = 1e-5f, .x = x, .y = y};
    if (p.flags & NJ_FLAG_SAVE_STATS) a.rstd = rstd;
    if (p.flags & NJ_FLAG_SCALE) a.gamma = rstd + 4; /* 256 floats of zeros past the statistics */
    nj_status s = nj_forward(plan, &a);
    if (s != NJ_OK) fail_msg("forward: %s", nj_last_error());
    int32_t n;
    const nj_trace_launch *l = nj_trace_launches(t, &n);
    assert_true(n >= 1);
    assert_true(l[0].run > 0);
    assert_true(l[0].req[0] == 0 && l[0].req[1] == 0);
    nj_trace_destroy(t);
    /* the model refuses a context whose kernels do not count (its figures would be zeros) */
    nj_model_opts mo = {nj_model_device_find("H200"), 0, 8, NJ_PASS_FORWARD};
    nj_model_result mr;
    assert_int_equal(nj_model_problem(ctx, &p, &mo, &mr), NJ_ERR_BAD_ARGUMENT);
    free(x);
    free(y);
    free(rstd);
    nj_context_destroy(ctx);
}

/* A launch that reads what an earlier launch of the pass stored in the workspace (the row backward's
 * slots store their dgamma/dbeta partial rows last, the column sum adds them) finds it in the L2: the
 * slots ran side by side, so their stores came at the launch's end, whatever block the trace ran when.
 * Counted as first touches, the column sum read all 8.6 MB of partials (4.3 since slot pairs) from DRAM;
 * placed at the traced blocks' places in the grid, a third. */
static void test_carried_scratch(void **state)
{
    (void)state;
    nj_model_result r = model_of("layernorm bf16 2048x8192 flags=scale,bias", NJ_PASS_BACKWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    const nj_model_launch *sum = NULL, *main = &ps->launch[0];
    for (int32_t i = 0; i < ps->nlaunch; i++)
        if (ps->launch[i].lib == NJ_LIB_COLSUM) sum = &ps->launch[i];
    assert_non_null(sum);
    double partials = 66.0 * 8192 * 2 * 4; /* 132 blocks in clusters of two: a partial row a pair */
    assert_true(sum->t.unique_bytes > 0.9 * partials);
    assert_true(sum->t.dram_read < 0.05 * partials);
    double x = 2048.0 * 8192 * 2; /* x and dy, stored by no launch of the pass: from DRAM */
    assert_true(main->t.dram_read > 1.95 * x);
}

/* Dependent launches (launch.c): on sm_90 a pass's kernels after its first cost launch_dep_s, not
 * launch_s; NORMJIT_NO_PDL=1 when the context is made, or sm_80, launches them all plainly. The row
 * backward's dgamma sum is such a second launch. */
static void test_dependent_launch_cost(void **state)
{
    (void)state;
    const char *text = "layernorm f32 64x1024 flags=scale,bias";
    nj_model_result r = model_of(text, NJ_PASS_BACKWARD, 8);
    const nj_model_pass *ps = &r.pass[0];
    assert_true(ps->nlaunch >= 2);
    assert_int_equal(ps->launch[0].dependent, 0);
    for (int32_t i = 1; i < ps->nlaunch; i++) assert_int_equal(ps->launch[i].dependent, 1);
    setenv("NORMJIT_NO_PDL", "1", 1);
    nj_context *plain = NULL;
    nj_status s = nj_model_context(90, NULL, &plain);
    unsetenv("NORMJIT_NO_PDL");
    assert_int_equal(s, NJ_OK);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text(text, 1, &p), NJ_OK);
    const nj_model_device *h = nj_model_device_find("H200");
    nj_model_opts o = {h, 0, 8, NJ_PASS_BACKWARD};
    nj_model_result rp;
    assert_int_equal(nj_model_problem(plain, &p, &o, &rp), NJ_OK);
    nj_context_destroy(plain);
    for (int32_t i = 0; i < rp.pass[0].nlaunch; i++) assert_int_equal(rp.pass[0].launch[i].dependent, 0);
    double saved = (ps->nlaunch - 1) * (h->launch_s - h->launch_dep_s);
    assert_true(h->launch_dep_s < h->launch_s);
    assert_true(fabs(rp.pass[0].time - ps->time - saved) < 1e-9);
    /* sm_80 has no dependent launches, and the A100 row of the table no cheaper cost */
    const nj_model_device *a = nj_model_device_find("A100");
    assert_true(a->launch_dep_s == a->launch_s);
}

/* The last, partial wave: figures by hand from the rule's terms (docs/model.md, "The time"). w = 2.5. */
static void test_last_wave(void **state)
{
    (void)state;
    /* DRAM-bound with loads to spare (latency 1 of 8): the half wave moves half a wave's bytes at full
       bandwidth, 2 x 3.2 + max(0.5 x 8, 1) / 2.5 = 8: no loss */
    assert_true(fabs(nj_model_last_wave(8, 0, 1, 0, 2.5) - 1) < 1e-12);
    /* latency-bound (8 of 2): the half wave waits a full wave's latency, 3 waves of 3.2 = 9.6: 2.5 / 3 */
    assert_true(fabs(nj_model_last_wave(2, 0, 8, 0, 2.5) - 2.5 / 3) < 1e-12);
    /* the rows' chain (a row after another) likewise */
    assert_true(fabs(nj_model_last_wave(2, 0, 0, 8, 2.5) - 2.5 / 3) < 1e-12);
    /* between: DRAM 8, latency 6: 6.4 + max(4, 6) / 2.5 = 8.8 */
    assert_true(fabs(nj_model_last_wave(8, 0, 6, 0, 2.5) - 8 / 8.8) < 1e-12);
    /* L2-bound like DRAM-bound; whole waves and less than one have no tail */
    assert_true(fabs(nj_model_last_wave(1, 8, 1, 0, 2.5) - 1) < 1e-12);
    assert_true(nj_model_last_wave(2, 0, 8, 0, 3) == 1 && nj_model_last_wave(2, 0, 8, 0, 0.5) == 1);
    /* a launch: LLM rows with the residual, 16-bit x of 4096, 4096 blocks in 7.76 waves, DRAM-bound with
       loads to spare: the launch cost and the DRAM time, not the 8 waves of the rule before */
    nj_model_result r = model_of("layernorm bf16 4096x4096 flags=scale,bias,residual,resout", NJ_PASS_FORWARD, 8);
    const nj_model_launch *m = &r.pass[0].launch[0];
    assert_true(m->waves > 7 && m->waves < 8 && m->t_dram > 2 * m->t_lat);
    assert_true(m->tail > m->waves / 8 + 0.01);
    const nj_model_device *h = nj_model_device_find("H200");
    assert_true(fabs(m->time - (h->launch_s + m->t_dram)) < 1e-3 * m->time);
}

static void test_l2_ramp(void **state)
{
    (void)state;
    double l2 = 1000;
    assert_true(nj_model_l2_miss(0, l2) == 0);
    assert_true(nj_model_l2_miss(NJ_MODEL_L2_HIT * l2, l2) == 0);
    assert_true(nj_model_l2_miss(NJ_MODEL_L2_MISS * l2, l2) == 1);
    assert_true(nj_model_l2_miss(1e12, l2) == 1);
    double mid = nj_model_l2_miss((NJ_MODEL_L2_HIT + NJ_MODEL_L2_MISS) / 2 * l2, l2);
    assert_true(mid > 0.49 && mid < 0.51);
}

static void test_devices(void **state)
{
    (void)state;
    const nj_model_device *h = nj_model_device_find("h200");
    assert_non_null(h);
    assert_int_equal(h->sms, 132);
    assert_true(h->copy_bw < h->peak_bw);
    assert_non_null(nj_model_device_find("A100"));
    assert_non_null(nj_model_device_find("H100"));
    assert_null(nj_model_device_find("V100"));
    for (int32_t i = 0; nj_model_device_at(i); i++) assert_true(strlen(nj_model_device_at(i)->source) > 20);
}

static void test_compare(void **state)
{
    (void)state;
    const char *base = "p | fwd | launches 1 | ideal_mb 10.000 | dram_mb 10.000 | sector_eff 1.000 | lanes 32.00 | "
                       "pct_copy 80.0 | us 3.00";
    char why[128];
    assert_int_equal(nj_model_compare(base, base, why, sizeof why), 0);
    const char *better = "p | fwd | launches 1 | ideal_mb 10.000 | dram_mb 9.000 | sector_eff 1.000 | lanes 32.00 | "
                         "pct_copy 85.0 | us 2.00";
    assert_int_equal(nj_model_compare(base, better, why, sizeof why), 0);
    const char *more = "p | fwd | launches 2 | ideal_mb 10.000 | dram_mb 10.000 | sector_eff 1.000 | lanes 32.00 | "
                       "pct_copy 80.0 | us 3.00";
    assert_int_equal(nj_model_compare(base, more, why, sizeof why), 1);
    assert_non_null(strstr(why, "launches"));
    const char *bytes = "p | fwd | launches 1 | ideal_mb 10.000 | dram_mb 10.500 | sector_eff 1.000 | lanes 32.00 | "
                        "pct_copy 80.0 | us 3.00";
    assert_int_equal(nj_model_compare(base, bytes, why, sizeof why), 1);
    assert_non_null(strstr(why, "dram_mb"));
    const char *eff = "p | fwd | launches 1 | ideal_mb 10.000 | dram_mb 10.000 | sector_eff 0.900 | lanes 32.00 | "
                      "pct_copy 80.0 | us 3.00";
    assert_int_equal(nj_model_compare(base, eff, why, sizeof why), 1);
}

/* A synthetic forward pass that meets every goal on the H200 (figures chosen by hand, not by the model):
 * one launch of 264 blocks, 1.02x the ideal bytes, whole sectors in 16-byte accesses, 32 KB in flight. */
static nj_model_result goal_pass(void)
{
    nj_model_result r;
    memset(&r, 0, sizeof r);
    r.npass = 1;
    nj_model_pass *ps = &r.pass[0];
    ps->pass = NJ_PASS_FORWARD;
    ps->ideal_bytes = 100e6;
    ps->dram_bytes = 102e6;
    ps->two_read_bytes = 150e6;
    ps->vec16 = 1;
    ps->pct_copy = 92.0;
    ps->pct_same = 95.0;
    ps->nlaunch = 1;
    nj_model_launch *m = &ps->launch[0];
    m->blocks = 264;
    m->inflight_sm = 32 * 1024;
    m->t.dram_read = 51e6, m->t.dram_write = 51e6;
    for (int d = 0; d < 2; d++) {
        m->t.req[d] = 1000, m->t.lanes[d] = 32000, m->t.bytes[d] = 512000, m->t.sectors[d] = 16000;
        m->t.width[d][4] = 32000; /* 16-byte lane accesses */
    }
    return r;
}

static char *goals_of(const nj_model_result *r)
{
    nj_buf b;
    nj_buf_init(&b);
    nj_model_goals(&b, "p", r, nj_model_device_find("H200"));
    return nj_buf_take(&b);
}

static void expect_unmet(const nj_model_result *r, const char *goal)
{
    char *line = goals_of(r);
    assert_non_null(line);
    char want[64];
    snprintf(want, sizeof want, "unmet: %s\n", goal);
    if (!strstr(line, want)) fail_msg("expected only '%s' unmet: %s", goal, line);
    free(line);
}

/* Each of issue 17's goals (model_goals.c) fails alone when its own figure misses it. */
static void test_goals(void **state)
{
    (void)state;
    nj_model_result r = goal_pass();
    char *line = goals_of(&r);
    assert_int_equal(strncmp(line, "p | fwd | pct 92.0 (ceiling 96.8) | bytes 1.02x", 46), 0);
    assert_non_null(strstr(line, "all goals met"));
    free(line);
    r = goal_pass(), r.pass[0].pct_copy = 89.0;
    expect_unmet(&r, "pct");
    r = goal_pass(), r.pass[0].dram_bytes = 106e6;
    expect_unmet(&r, "bytes");
    r = goal_pass(), r.pass[0].dram_bytes = 150e6, r.pass[0].two_read = 1; /* within the two-read floor */
    line = goals_of(&r);
    assert_non_null(strstr(line, "all goals met"));
    assert_non_null(strstr(line, "two-read floor"));
    free(line);
    r = goal_pass(), r.pass[0].launch[0].t.sectors[0] = 20000;
    expect_unmet(&r, "sectors");
    r = goal_pass(), r.pass[0].launch[0].t.width[0][4] = 0, r.pass[0].launch[0].t.width[0][2] = 128000;
    expect_unmet(&r, "16B");
    r.pass[0].vec16 = 0; /* x's run is not whole 16-byte vectors: narrower accesses are all it allows */
    line = goals_of(&r);
    assert_non_null(strstr(line, "all goals met"));
    free(line);
    r = goal_pass(), r.pass[0].launch[0].inflight_sm = 8 * 1024; /* 4.1 TB/s x 650 ns / 132 SMs = 19.7 KB */
    expect_unmet(&r, "inflight");
    r = goal_pass(), r.pass[0].launch[0].t.lanes[0] = 16000, r.pass[0].launch[0].t.lanes[1] = 16000;
    expect_unmet(&r, "lanes");
    r = goal_pass(), r.pass[0].launch[0].blocks = 100;
    expect_unmet(&r, "wave");
    /* the backward: 80% of copy and 1.3x the ideal bytes, nothing else */
    r = goal_pass(), r.pass[0].pass = NJ_PASS_BACKWARD, r.pass[0].pct_copy = 81.0, r.pass[0].dram_bytes = 129e6;
    r.pass[0].launch[0].blocks = 1;
    line = goals_of(&r);
    assert_non_null(strstr(line, "all goals met"));
    free(line);
    r.pass[0].dram_bytes = 131e6;
    expect_unmet(&r, "bytes");
    /* sets past shared memory: x and dy read twice, 1.05x that floor */
    r.pass[0].two_read = 1, r.pass[0].two_read_bytes = 166e6, r.pass[0].dram_bytes = 170e6;
    line = goals_of(&r);
    assert_non_null(strstr(line, "all goals met"));
    free(line);
    r.pass[0].dram_bytes = 175e6;
    expect_unmet(&r, "bytes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_f32_forward), cmocka_unit_test(test_sample_scales),
        cmocka_unit_test(test_row_backward),    cmocka_unit_test(test_counting_off),
        cmocka_unit_test(test_param_reads_capped), cmocka_unit_test(test_reverse_meets_l2),
        cmocka_unit_test(test_pipe_twins),
        cmocka_unit_test(test_cluster_rereads_l2), cmocka_unit_test(test_image_parts_grouped), cmocka_unit_test(test_l1_hits_spare_l2), cmocka_unit_test(test_partial_last_block), cmocka_unit_test(test_short_tile_runs), cmocka_unit_test(test_param_once_piece_major),
        cmocka_unit_test(test_l2_ramp),         cmocka_unit_test(test_last_wave),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_compare),         cmocka_unit_test(test_goals),
        cmocka_unit_test(test_dependent_launch_cost), cmocka_unit_test(test_carried_scratch),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
