/* Planner: choices for canonical problems, plan text, launch grids and launch metadata round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "planner.h"
#include "planner_canon.h"
#include "planner_impl.h"

static nj_device_props dev90, dev80;

static int setup(void **state)
{
    (void)state;
    nj_device_props_default(90, &dev90);
    nj_device_props_default(80, &dev80);
    return 0;
}

/* Any forward plan (plan_fwd: one launch, no workspace). */
static nj_plan_params plan_fwd_any(const nj_canon *c)
{
    nj_plan_params pp;
    nj_status s = nj_plan_pass(c, NJ_PASS_FORWARD, &dev90, &pp);
    if (s != NJ_OK) fail_msg("plan failed: %s", nj_last_error());
    assert_int_equal(pp.pass, NJ_PASS_FORWARD);
    return pp;
}

static nj_plan_params plan_fwd(const nj_canon *c)
{
    nj_plan_params pp = plan_fwd_any(c);
    assert_int_equal(pp.nlaunch, 1);
    assert_int_equal(pp.launch[0].block[0], pp.block);
    assert_int_equal(pp.block % 32, 0);
    assert_int_equal(pp.workspace_fixed + pp.workspace_per_row, 0);
    return pp;
}

static void test_device_props(void **state)
{
    (void)state;
    nj_device_props p;
    nj_device_props_default(90, &p);
    assert_int_equal(p.arch, 90);
    assert_int_equal(p.sm_count, 132);
    assert_int_equal(p.max_threads_per_block, 1024);
    assert_int_equal(p.max_shared_per_block, 227 * 1024);
    nj_device_props_default(80, &p);
    assert_int_equal(p.sm_count, 108);
    assert_int_equal(p.max_shared_per_block, 163 * 1024);
    nj_device_props_default(75, &p);
    assert_int_equal(p.sm_count, 0);
    assert_int_equal(p.max_shared_per_block, 48 * 1024);
}

/* Short rows: a warp per row, four rows per 128-thread block, the row in registers. */
static void test_row_short(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 768, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    nj_plan_params pp = plan_fwd(&c);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_string_equal(pp.template_name, "fwd_row.cu");
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 128);
    assert_int_equal(pp.rows_per_block, 4);
    assert_int_equal(pp.regs_cache, 24); /* 192 float4 chunks over 32 lanes: 6 chunks of 4 */
    assert_int_equal(pp.split, 1);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_row");
    assert_int_equal(pp.launch[0].row_div, 4);
    /* Rows of few chunks: a group of lanes a row, several rows a warp. 100 f32 (25 float4 chunks): a
     * warp keeps 25 of 32 lanes busy, 4 lanes a row 25 of 28 chunk slots (7 chunks a lane). (Rows of
     * 400 bytes, not whole sectors, are the tile family's; the row family's under this switch.) */
    setenv("NORMJIT_PLAN_NO_TILE_WIDE", "1", 1);
    tc_row(&c, NJ_F32, 100, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    pp = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_TILE_WIDE");
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 128);
    assert_int_equal(pp.rows_per_block, 32);
    assert_int_equal(pp.regs_cache, 28);
    assert_int_equal(pp.launch[0].row_div, 32);
    tc_row(&c, NJ_BF16, 64, NJ_FLAG_CENTER); /* 8 chunks of 8: 8 lanes, every lane busy */
    pp = plan_fwd(&c);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.rows_per_block, 16);
    assert_int_equal(pp.regs_cache, 8);
    /* f16 without param: 8 halves make 16 bytes; an f32 gamma limits it to 4 */
    tc_row(&c, NJ_F16, 1024, NJ_FLAG_CENTER);
    assert_int_equal(plan_fwd(&c).vec, 8);
    assert_int_equal(plan_fwd(&c).regs_cache, 32);
    tc_row(&c, NJ_F16, 1024, NJ_FLAG_CENTER | NJ_FLAG_SCALE);
    assert_int_equal(plan_fwd(&c).vec, 4);
}

/* Odd lengths and strides narrow the vector width. */
static void test_row_vec_width(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 1001, NJ_FLAG_CENTER);
    assert_int_equal(plan_fwd(&c).vec, 1);
    assert_int_equal(plan_fwd(&c).regs_cache, 32);
    tc_row(&c, NJ_F32, 1002, NJ_FLAG_CENTER);
    assert_int_equal(plan_fwd(&c).vec, 2);
    tc_row(&c, NJ_BF16, 3000, NJ_FLAG_CENTER);
    assert_int_equal(plan_fwd(&c).vec, 8);
    /* a padded row pitch (kept axis stride 1001) that is not a multiple of 4 */
    tc_begin(&c, NJ_F32, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 8);
    tc_axis(&c, 16, false, false);
    tc_axis(&c, 1000, true, true);
    tc_finish(&c);
    assert_int_equal(plan_fwd(&c).vec, 4);
    c.axes[1].stride[NJ_OPD_X] = 1001;
    tc_kind(&c);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(plan_fwd(&c).vec, 1);
    /* y written with a non-unit stride along the row */
    tc_row(&c, NJ_F32, 1000, NJ_FLAG_CENTER);
    c.axes[1].stride[NJ_OPD_Y] = 2;
    assert_int_equal(plan_fwd(&c).vec, 1);
    /* gamma transposed against x (param stride along the row is not 1) */
    tc_row(&c, NJ_F32, 1000, NJ_FLAG_CENTER | NJ_FLAG_SCALE);
    c.axes[1].stride[NJ_OPD_PARAM] = 3;
    assert_int_equal(plan_fwd(&c).vec, 1);
}

/* Long rows: a block per row, in registers while a thread's share fits, else streamed. */
static void test_row_long(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 8192, NJ_FLAG_CENTER | NJ_FLAG_SCALE); /* 8 elements a thread */
    nj_plan_params pp = plan_fwd(&c);
    assert_int_equal(pp.rows_per_block, 1);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.regs_cache, 8);
    assert_int_equal(pp.launch[0].row_div, 1);
    tc_row(&c, NJ_F32, 16384, NJ_FLAG_CENTER); /* the block is full: 16 a thread */
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.regs_cache, 16);
    tc_row(&c, NJ_F32, 4097, NJ_FLAG_CENTER);
    pp = plan_fwd(&c);
    assert_int_equal(pp.vec, 1);
    assert_true(pp.regs_cache > 0 && pp.regs_cache <= 32);
    assert_true((int64_t)pp.regs_cache * pp.block >= 4097);
    /* too long for registers: streamed, still a block a row (sm_80: on sm_90 a cluster of 2 keeps it) */
    tc_row(&c, NJ_F32, 100000, 0);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev80, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.regs_cache, 0);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.rows_per_block, 1);
    assert_int_equal(pp.split, 1);
    /* 2^20 elements (4 MB of x and of y, under NJ_PIPE_BYTES): one pipelined launch after the zero launch,
       256 pieces of 512 threads x 4 x 2, the lag a row's pieces and half a wave of 132 x 4 blocks; per
       piece (sum, m2), per row (mean, rstd) and a counter in the workspace */
    tc_row(&c, NJ_F32, 1 << 20, 0);
    nj_status st = nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp);
    assert_int_equal(st, NJ_OK);
    assert_int_equal(pp.split, 256);
    assert_int_equal(pp.lag, 256 + 132 * 4 / 2);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_row_zero");
    assert_int_equal(pp.role[NJ_ROLE_ZERO], 1);
    assert_int_equal(pp.role[NJ_ROLE_PART], 0);
    assert_int_equal(pp.launch[1].row_mult, 2 * 256);
    assert_int_equal(pp.workspace_per_row, (256 * 2 + 3) * sizeof(float));
    assert_int_equal(pp.reverse, 0);
    /* the two launches without it; with the residual (x, the residual, y: 12 MB) still pipelined, not
       with 2^21 of them (24 MB) */
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    st = nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_int_equal(pp.lag, 0);
    assert_int_equal(st, NJ_OK);
    assert_int_equal(pp.regs_cache, 0);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.split, 32);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_row_part");
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_row");
    assert_int_equal(pp.launch[0].row_mult, 32);
    assert_int_equal(pp.launch[1].row_mult, 32);
    assert_int_equal(pp.workspace_per_row, 32 * 2 * sizeof(float));
    tc_row(&c, NJ_F32, 1 << 20, NJ_FLAG_RESIDUAL);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_true(pp.lag > 0);
    tc_row(&c, NJ_F32, 1 << 21, NJ_FLAG_RESIDUAL);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.lag, 0);
    assert_int_equal(pp.split, 64);
    tc_row(&c, NJ_F32, 1 << 20, 0);
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    st = nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_int_equal(st, NJ_OK);
    assert_int_equal(pp.regs_cache, 0);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.split, 32);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_row_part");
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_row");
    assert_int_equal(pp.launch[0].row_mult, 32);
    assert_int_equal(pp.launch[1].row_mult, 32);
    assert_int_equal(pp.workspace_per_row, 32 * 2 * sizeof(float));
    /* at most 256 pieces: 10^7 elements (nv_norms) take pieces of ~39K */
    tc_row(&c, NJ_F32, 10000000, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.split, 256);
    nj_plan_params up;
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &up), NJ_OK);
    assert_int_equal(up.vec, 1);
    assert_int_equal(up.split, 256);
    assert_int_equal(up.workspace_per_row, pp.workspace_per_row);
}

/* 16-bit rows of 4-element vectors past 1024 of them: blocks of two chunks a thread that fetch the next
 * row (bf16 4100: 1025 chunks, 544 threads; RMS f16 5124: 672), not f32 rows (512, no fetch), not under
 * NORMJIT_PLAN_NO_ROW_TWO_CHUNKS */
static void test_row_backward_two_chunks(void **state)
{
    (void)state;
    static const struct {
        int32_t dtype;
        int64_t n;
        uint32_t flags;
        int32_t block, persist;
    } want[] = {{NJ_BF16, 4100, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, 544, 1},
                {NJ_F16, 5124, NJ_FLAG_SCALE, 672, 1},
                {NJ_F32, 4100, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, 512, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_canon c;
        nj_plan_params pp;
        tc_row(&c, want[i].dtype, want[i].n, want[i].flags);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        assert_int_equal(pp.vec, 4);
        assert_int_equal(pp.block, want[i].block);
        assert_int_equal(pp.persist, want[i].persist);
        assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
        setenv("NORMJIT_PLAN_NO_ROW_TWO_CHUNKS", "1", 1);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        unsetenv("NORMJIT_PLAN_NO_ROW_TWO_CHUNKS");
        assert_int_equal(pp.block, 512);
        assert_int_equal(pp.persist, 0);
    }
}

/* Row groups of 96-224 threads and of 768-960 a block (16-bit rows of 768: 10 groups of 96; 3072: 2 of
 * 384), a slot an SM; not groups under 256 whose chunks do not fill them (rows of 1000: 125 of 128), not
 * under NORMJIT_PLAN_NO_ROW_GROUPS_WIDE */
static void test_row_backward_groups_wide(void **state)
{
    (void)state;
    static const struct {
        int64_t n;
        int32_t block, rpb;
    } want[] = {{768, 960, 10}, {1024, 1024, 8}, {1536, 960, 5}, {3072, 768, 2}, {1000, 128, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_canon c;
        nj_plan_params pp;
        tc_row(&c, NJ_BF16, want[i].n, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        assert_int_equal(pp.block, want[i].block);
        assert_int_equal(pp.rows_per_block, want[i].rpb);
        assert_int_equal(pp.launch[0].grid_x, want[i].rpb > 1 ? 132 : 1056);
        assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
        setenv("NORMJIT_PLAN_NO_ROW_GROUPS_WIDE", "1", 1);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        unsetenv("NORMJIT_PLAN_NO_ROW_GROUPS_WIDE");
        /* 1024 threads of groups of 128 are the wide rule's too (the classic rule wants 256 and more) */
        assert_int_equal(pp.rows_per_block, 1);
    }
}

/* Row backward with gamma: a fixed number of slots (two 512-thread blocks an SM where each thread owns one
 * vector chunk, one where it owns several), and the column sum's warps sized to the slots. */
static void test_row_backward_slots(void **state)
{
    (void)state;
    static const struct {
        int32_t dtype;
        int64_t n;
        int32_t block, rpb, slots, colsum_block;
        int32_t nb_block, nb_rpb, nb_slots; /* gamma alone */
    } want[] = {/* one chunk of 8 a thread: 2 blocks of 512 an SM; with f32 gamma (16 KiB staged) and the
                 * bias's sums (32 KiB) past the 44 KiB of a launch without opt-in: no row groups; gamma
                 * alone, 2 groups of 512 a block. One block an SM on sm_90: slot pairs, 66 parts, 9 warps
                 * of the column sum */
                {NJ_BF16, 4096, 512, 1, 264, 1024, 1024, 2, 132},
                {NJ_F32, 4096, 512, 1, 132, 288, 512, 1, 132},   /* two chunks of 4 a thread: a block an SM */
                {NJ_BF16, 8192, 1024, 1, 132, 288, 1024, 1, 132}, /* 1024 threads: 1 */
                {NJ_BF16, 2048, 1024, 4, 132, 288, 1024, 4, 132}, /* 4 groups of 256 a block */
                {NJ_F32, 512, 64, 1, 2112, 1024, 64, 1, 2112}};   /* 64 threads, 32 blocks an SM: no row groups */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_canon c;
        nj_plan_params pp;
        tc_row(&c, want[i].dtype, want[i].n, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        assert_int_equal(pp.nlaunch, 2);
        assert_int_equal(pp.block, want[i].block);
        assert_int_equal(pp.rows_per_block, want[i].rpb);
        assert_int_equal(pp.launch[0].grid_x, want[i].slots);
        assert_string_equal(pp.launch[1].kernel, "nj_lib_colsum");
        assert_int_equal(pp.launch[1].block[0], want[i].colsum_block);
        /* a block an SM: in clusters of two, a partial row a pair (plan_bwd_slot_pairs) */
        int32_t pair = want[i].slots == 132 ? 2 : 0, parts = pair ? want[i].slots / 2 : want[i].slots;
        assert_int_equal(pp.launch[0].cluster, pair);
        assert_int_equal(pp.pgrad_parts, parts);
        assert_int_equal(pp.launch[1].arg[NJ_COLSUM_NPARTS][0], parts);
        assert_int_equal(pp.workspace_fixed, (uint64_t)parts * want[i].n * 2 * sizeof(float));
        /* a block a row exchanges its registers' sums in shared memory after its staged table (f32
           gamma and beta of 4096 under no activation: gamma alone, 16 KiB): a float a thread, a column
           and a stream; row groups their shared partial row */
        uint32_t table = pp.stage == 1 ? (uint32_t)want[i].n * 4 : 0;
        assert_int_equal(pp.launch[0].shmem, table + (pair && want[i].rpb == 1 ? want[i].n * 2 * 4 : 0));
        /* sm_80 (no clusters), and NORMJIT_PLAN_NO_SLOT_PAIRS=1: a partial row a block */
        nj_plan_params p80;
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev80, &p80), NJ_OK);
        assert_int_equal(p80.launch[0].cluster, 0);
        assert_int_equal(p80.pgrad_parts, p80.launch[0].grid_x);
        setenv("NORMJIT_PLAN_NO_SLOT_PAIRS", "1", 1);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &p80), NJ_OK);
        unsetenv("NORMJIT_PLAN_NO_SLOT_PAIRS");
        assert_int_equal(p80.launch[0].cluster, 0);
        assert_int_equal(p80.pgrad_parts, want[i].slots);
        assert_int_equal(p80.workspace_fixed, (uint64_t)want[i].slots * want[i].n * 2 * sizeof(float));
        if (want[i].rpb > 1) assert_int_equal(pp.persist, 1); /* row groups still fetch the next rows */
        assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
        /* without a bias (RMSNorm, LayerNorm with gamma only) the slots hold no beta rows */
        tc_row(&c, want[i].dtype, want[i].n, NJ_FLAG_SCALE);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
        assert_int_equal(pp.block, want[i].nb_block);
        assert_int_equal(pp.rows_per_block, want[i].nb_rpb);
        assert_int_equal(pp.launch[0].grid_x, want[i].nb_slots);
        parts = want[i].nb_slots == 132 ? 66 : want[i].nb_slots;
        assert_int_equal(pp.workspace_fixed, (uint64_t)parts * want[i].n * sizeof(float));
    }
    /* not under GELU (registers): 2 and 4 blocks an SM of 512 and 256 threads, a slot each; and
     * NORMJIT_PLAN_NO_ROW_GROUPS=1 keeps the separate blocks */
    nj_canon gc;
    nj_plan_params gp;
    tc_row(&gc, NJ_BF16, 2048, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    gc.act = NJ_ACT_GELU_ERF;
    assert_int_equal(nj_plan_pass(&gc, NJ_PASS_BACKWARD, &dev90, &gp), NJ_OK);
    assert_int_equal(gp.block, 256);
    assert_int_equal(gp.launch[0].grid_x, 528);
    assert_int_equal(gp.workspace_fixed, (uint64_t)528 * 2048 * 2 * sizeof(float));
    tc_row(&gc, NJ_BF16, 4096, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    setenv("NORMJIT_PLAN_NO_ROW_GROUPS", "1", 1);
    assert_int_equal(nj_plan_pass(&gc, NJ_PASS_BACKWARD, &dev90, &gp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_ROW_GROUPS");
    assert_int_equal(gp.block, 512);
    assert_int_equal(gp.rows_per_block, 1);
    assert_int_equal(gp.launch[0].grid_x, 264);
    assert_int_equal(gp.persist, 2);
    /* short rows on the row family (NORMJIT_PLAN_NO_TILE=1: they are the tile family's, test_tile_plan):
     * 10 f32 (5 float2 chunks) take 2 lanes a row, 128 rows a 256-thread block; 100 f32 (25 float4
     * chunks) keep a warp (narrower groups would give a lane more than 8 elements) */
    nj_canon c;
    nj_plan_params pp;
    tc_row(&c, NJ_F32, 10, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    setenv("NORMJIT_PLAN_NO_TILE", "1", 1);
    nj_status st = nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp);
    unsetenv("NORMJIT_PLAN_NO_TILE");
    assert_int_equal(st, NJ_OK);
    assert_int_equal(pp.vec, 2);
    assert_int_equal(pp.block, 256);
    assert_int_equal(pp.rows_per_block, 128);
    assert_int_equal(pp.launch[0].grid_x, 528);
    tc_row(&c, NJ_F32, 100, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS);
    setenv("NORMJIT_PLAN_NO_TILE_WIDE", "1", 1); /* else the tile family's (test_tile_plan) */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_TILE_WIDE");
    assert_int_equal(pp.rows_per_block, 8);
}

/* Column problems with enough columns get coalesced column tiles; the rest the general family. */
/* The unaligned variant: the same launches with vec 1 where the main plan uses vectors; the main plan
 * itself (one signature) where it does not. align_opds names what the launch must check. */
static void test_unaligned_variant(void **state)
{
    (void)state;
    nj_canon c;
    nj_plan_params main, un;
    tc_row(&c, NJ_BF16, 4096, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT);
    main = plan_fwd(&c);
    assert_true(main.vec > 1);
    assert_int_equal(main.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_RES | 1u << NJ_OPD_RESOUT |
                                          1u << NJ_OPD_PARAM);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.vec, 1);
    assert_int_equal(un.regs_cache, 0);
    assert_int_equal(un.unaligned, 1);
    assert_int_equal(un.align_opds, 0);
    assert_int_equal(un.block, main.block);
    assert_int_equal(un.nlaunch, main.nlaunch);
    assert_memory_equal(un.launch, main.launch, sizeof main.launch);
    char *a = nj_plan_text(&main), *b = nj_plan_text(&un);
    assert_non_null(strstr(a, "variant=main"));
    assert_non_null(strstr(b, "variant=unaligned"));
    free(a);
    free(b);
    /* backward row: x, dy, dx and gamma/beta (vector loads too); the workspace the caller sized for
     * the main plan fits the variant */
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_BACKWARD, NJ_VARIANT_MAIN, &dev90, &main), NJ_OK);
    assert_int_equal(main.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX | 1u << NJ_OPD_PARAM);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_BACKWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.vec, 1);
    assert_int_equal(un.workspace_fixed, main.workspace_fixed);
    assert_int_equal(un.workspace_per_row, main.workspace_per_row);
    /* gamma constant along the row (GroupNorm-like) is loaded per chunk: not checked */
    tc_row(&c, NJ_F32, 1000, NJ_FLAG_CENTER | NJ_FLAG_SCALE);
    c.axes[1].stride[NJ_OPD_PARAM] = 0;
    assert_int_equal(plan_fwd(&c).align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y);
    /* vec 1: nothing to check, and the variant is the main plan */
    tc_row(&c, NJ_F32, 1001, NJ_FLAG_CENTER);
    main = plan_fwd(&c);
    assert_int_equal(main.align_opds, 0);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_memory_equal(&un, &main, sizeof un);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, (nj_variant)5, &dev90, &un), NJ_ERR_BAD_ARGUMENT);
}

static void test_column_general(void **state)
{
    (void)state;
    nj_canon c;
    /* BatchNorm channels-last: [N, HW, C], reduce N and HW, features C */
    tc_begin(&c, NJ_F16, NJ_F32, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_RELU, 1);
    tc_axis(&c, 32, true, false);
    tc_axis(&c, 3136, true, false);
    tc_axis(&c, 80, false, true);
    tc_finish(&c);
    assert_int_equal(c.kind, NJ_KIND_COLUMN);
    nj_plan_params pp = plan_fwd_any(&c);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    assert_string_equal(pp.template_name, "fwd_column.cu");
    /* 80 columns of f16: tiles of 32 keep 80 of 96 columns busy (3 tiles); of 64, 128 or 256, 80 of 128 or
     * 256. Each tile read 8 columns a lane (16 bytes), 4 lanes a row, 8 walk rows a warp (col_fwd_rows;
     * a row a warp would read 1 column a lane), loads 2 deep down the walk (32 bytes a thread); gamma
     * and beta as vectors too, so all three are checked for alignment */
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.rows_per_block, 8);
    assert_int_equal(pp.tile, 32);
    assert_int_equal(pp.unroll, 2);
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_PARAM);
    assert_int_equal(pp.block, 256);
    /* a walk of 100352 rows: 3 tiles of 32 columns would be 3 blocks; 256 pieces of 392 rows instead
     * (8 blocks an SM wanted; at most 256 pieces), partials, then statistics per tile, then the pieces */
    assert_int_equal(pp.split, 256);
    assert_int_equal(pp.nlaunch, 3);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_column_part");
    assert_string_equal(pp.launch[1].kernel, "nj_lib_merge");
    assert_string_equal(pp.launch[2].kernel, "nj_fwd_column");
    assert_int_equal(pp.launch[0].row_mult, 3 * 256);
    assert_int_equal(pp.launch[2].row_mult, 3 * 256);
    assert_int_equal(pp.workspace_per_row, 3 * 257 * 64 * 4);
    /* the library's merge: a tile column an item (32 a block), its 256 pieces' (sum, m2) in, (mean, rstd)
     * out after every piece of the batch's tiles, pieces of ceil(100352 / 256) = 392 rows */
    assert_int_equal(pp.launch[1].lib, NJ_LIB_MERGE);
    assert_int_equal(pp.launch[1].row_mult, 3 * 32);
    assert_int_equal(pp.launch[1].row_div, 32);
    int64_t la[NJ_LIB_NARGS];
    nj_launch_lib_args(&pp.launch[1], 2, la);
    assert_int_equal(la[NJ_MERGE_NITEMS], 2 * 3 * 32);
    assert_int_equal(la[NJ_MERGE_NPARTS], 256);
    assert_int_equal(la[NJ_MERGE_S_HI], 256 * 64);
    assert_int_equal(la[NJ_MERGE_OUT_BASE], 2 * 3 * 256 * 64);
    assert_int_equal(la[NJ_MERGE_MODE], NJ_MERGE_STATS);
    assert_int_equal(la[NJ_MERGE_N], 100352);
    assert_int_equal(la[NJ_MERGE_PLEN], 392);
    assert_int_equal(la[NJ_MERGE_CMUL], 1);
    /* 128 columns over a split walk: the pieces stop at 256, so the tile is the one with the most bytes
     * in flight (col_split_flight): 64 columns, 2 tiles x 256 pieces of 256 threads with 32 bytes of
     * loads each, ties 32 (4 tiles) and beats 128 (1 tile); read 8 columns a lane, 8 lanes a row, 4
     * walk rows a warp, loads 2 deep */
    tc_begin(&c, NJ_F16, NJ_F32, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_RELU, 1);
    tc_axis(&c, 32, true, false);
    tc_axis(&c, 3136, true, false);
    tc_axis(&c, 128, false, true);
    tc_finish(&c);
    pp = plan_fwd_any(&c);
    assert_true(pp.lag > 0); /* pipelined, half a line a tile (test_column_pipe); without the pipe: */
    assert_int_equal(pp.tile, 32);
    setenv("NORMJIT_PLAN_NO_COL_PIPE", "1", 1);
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.rows_per_block, 4);
    assert_int_equal(pp.tile, 64);
    assert_int_equal(pp.unroll, 2);
    /* gamma and beta, constant down the walk, read as vectors of the lane's columns too */
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_PARAM);
    assert_int_equal(pp.split, 256);
    assert_int_equal(pp.launch[0].row_mult, 2 * 256);
    assert_int_equal(pp.workspace_per_row, 2 * 257 * 128 * 4);
    assert_int_equal(pp.launch[1].row_mult, 2 * 64);
    nj_launch_lib_args(&pp.launch[1], 2, la);
    assert_int_equal(la[NJ_MERGE_NITEMS], 2 * 2 * 64);
    assert_int_equal(la[NJ_MERGE_RADIX], 64);
    assert_int_equal(la[NJ_MERGE_S_HI], 256 * 128);
    assert_int_equal(la[NJ_MERGE_S_PART], 128);
    assert_int_equal(la[NJ_MERGE_OFF_B], 64);
    assert_int_equal(la[NJ_MERGE_OUT_BASE], 2 * 2 * 256 * 128);
    assert_int_equal(la[NJ_MERGE_O_HI], 128);
    assert_int_equal(la[NJ_MERGE_O_B], 64);
    /* the unaligned variant keeps the tiles and launches, a column at a time, its walk rolled */
    nj_plan_params un;
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.vec, 1);
    assert_int_equal(un.tile, 64);
    assert_int_equal(un.unroll, 1);
    assert_int_equal(un.nlaunch, 3);
    assert_int_equal(un.launch[0].row_mult, 2 * 256);
    unsetenv("NORMJIT_PLAN_NO_COL_PIPE");
    /* the backward: pipelined (test_column_pipe), its tile of 32 columns 19 MB of x, dy and dx */
    nj_plan_params bp;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_true(bp.lag > 0);
    assert_int_equal(bp.tile, 32);
    /* without the pipe, the same vectors over x, dy and dx (at most 4 columns a lane); the merge takes a
     * tile's 2 x 64 items (centered: sum g, sum xhat | sum g * xhat), [tile][piece][256] in */
    setenv("NORMJIT_PLAN_NO_COL_PIPE", "1", 1);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.family, NJ_FAMILY_COLUMN);
    assert_int_equal(bp.vec, 2);
    assert_int_equal(bp.tile, 64);
    assert_int_equal(bp.unroll, 8);
    assert_int_equal(bp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX);
    assert_int_equal(bp.split, 256);
    assert_string_equal(bp.launch[0].kernel, "nj_bwd_column_part");
    assert_int_equal(bp.launch[0].row_mult, 2 * 256);
    assert_int_equal(bp.launch[1].lib, NJ_LIB_MERGE);
    nj_launch_lib_args(&bp.launch[1], 2, la);
    assert_int_equal(la[NJ_MERGE_NITEMS], 2 * 2 * 128);
    assert_int_equal(la[NJ_MERGE_RADIX], 128);
    assert_int_equal(la[NJ_MERGE_S_HI], 256 * 256);
    assert_int_equal(la[NJ_MERGE_S_PART], 256);
    assert_int_equal(la[NJ_MERGE_OFF_B], 128);
    assert_int_equal(la[NJ_MERGE_O_HI], 256);
    assert_int_equal(la[NJ_MERGE_O_B], 128);
    assert_int_equal(la[NJ_MERGE_MODE], NJ_MERGE_SUMS);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_BACKWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_COL_PIPE");
    assert_int_equal(un.vec, 1);
    assert_int_equal(un.tile, 64);
    /* a walk too short to split: the widest width keeping 90% of the lanes busy a row a warp, 4 (8 would
     * idle half), whose tile holds every column: so 8 elements a lane, 16 lanes a row, two walk rows a
     * warp (col_fwd_rows), loads 4 deep (a whole walk: 64 bytes of x a thread; 32 under the switch) */
    tc_begin(&c, NJ_F16, NJ_F32, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_NONE, 1);
    tc_axis(&c, 4095, true, false);
    tc_axis(&c, 128, false, true);
    tc_finish(&c);
    pp = plan_fwd(&c);
    assert_int_equal(pp.split, 1);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.rows_per_block, 2);
    assert_int_equal(pp.tile, 128);
    assert_int_equal(pp.unroll, 4);
    assert_int_equal(pp.launch[0].row_mult, 1);
    setenv("NORMJIT_PLAN_NO_COL_FLIGHT64", "1", 1);
    assert_int_equal(plan_fwd(&c).unroll, 2);
    unsetenv("NORMJIT_PLAN_NO_COL_FLIGHT64");
    /* the backward keeps a row a warp */
    nj_plan_params bq;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bq), NJ_OK);
    assert_int_equal(bq.rows_per_block, 1);
    assert_int_equal(bq.tile, 32 * bq.vec);
    /* a padded column stride (x rows of 130 elements) allows 2-element accesses only */
    c.axes[1].stride[NJ_OPD_X] = 130, c.axes[0].stride[NJ_OPD_X] = 4095 * 130;
    pp = plan_fwd(&c);
    assert_int_equal(pp.vec, 2);
    /* 10000 rows: pieces of at least 128 rows bound the split (not the 352 a tile that 8 blocks an SM want) */
    tc_begin(&c, NJ_F16, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 1);
    tc_axis(&c, 10000, true, false);
    tc_axis(&c, 80, false, false);
    tc_finish(&c);
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.split, 78); /* 78 pieces of 129 rows, the last of 67: none empty */
    /* a split walk keeps 32 bytes of x in flight a thread (its pieces fill the GPU many times over) */
    assert_int_equal(pp.unroll * pp.vec * 2, 32);
    /* a short walk: one block per tile (where no image family: it takes these 655 KB images in parts) */
    tc_begin(&c, NJ_F16, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 1);
    tc_axis(&c, 4095, true, false);
    tc_axis(&c, 80, false, false);
    tc_finish(&c);
    setenv("NORMJIT_PLAN_NO_IMAGE", "1", 1);
    pp = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_IMAGE");
    assert_int_equal(pp.split, 1);
    assert_int_equal(pp.nlaunch, 1);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_column");
    assert_int_equal(pp.launch[0].row_mult, 3); /* 80 columns: 3 tiles of 32 */
    assert_int_equal(pp.workspace_per_row, 0);
    /* 8 columns: mostly idle lanes in a tile, the general family (an item of 32 KB is the image
     * family's: test_image_plan; one of 3.2 MB does not fit shared memory) */
    tc_begin(&c, NJ_F32, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 4);
    tc_axis(&c, 100000, true, false);
    tc_axis(&c, 8, false, false);
    tc_finish(&c);
    assert_int_equal(c.kind, NJ_KIND_COLUMN);
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    /* reduce axes 1 and 3 of [B, 6, 5, 7] without centering (centered, the channels-last tiles:
     * test_channels_last) */
    tc_begin(&c, NJ_F32, NJ_F32, 0, NJ_ACT_NONE, 4);
    tc_axis(&c, 6, true, false);
    tc_axis(&c, 5, false, false);
    tc_axis(&c, 7, true, false);
    tc_finish(&c);
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    pp = plan_fwd(&c);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    assert_int_equal(pp.block, 32); /* 42 elements a statistic: one warp */
    c.axes[3].extent = 70, c.reduce_size = 6 * 70;
    assert_int_equal(plan_fwd(&c).block, 128);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_general");
    /* BatchNorm NCHW over 256 x 56 x 56 (802816 a channel): pipelined (6.4 MB of x and y a channel), 392
     * pieces of 512 x 4; without the pipe 25 pieces a channel, a block each */
    tc_begin(&c, NJ_F32, NJ_F32, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS, NJ_ACT_NONE, 1);
    tc_axis(&c, 256, true, false);
    tc_axis(&c, 64, false, true);
    tc_axis(&c, 3136, true, false);
    tc_finish(&c);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.split, 392);
    assert_true(pp.lag > pp.split);
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_general");
    assert_int_equal(pp.launch[1].row_mult, 64 * 392 * 2);
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    assert_int_equal(pp.split, 25);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_general_part");
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_general");
    assert_int_equal(pp.launch[0].row_mult, 64 * 25);
    assert_int_equal(pp.workspace_per_row, 64 * 25 * 2 * sizeof(float));
}

static void test_plan_fail(void **state)
{
    (void)state;
    nj_canon c;
    nj_plan_params pp;
    tc_row(&c, NJ_F32, 512, NJ_FLAG_CENTER);
    assert_int_equal(nj_plan_pass(NULL, NJ_PASS_FORWARD, &dev90, &pp), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_plan_pass(&c, (nj_pass)7, &dev90, &pp), NJ_ERR_BAD_ARGUMENT);
    c.kind = 9;
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_ERR_INTERNAL);
}

static void test_plan_text(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 768, NJ_FLAG_CENTER);
    nj_plan_params a = plan_fwd(&c), b = plan_fwd(&c);
    char *ta = nj_plan_text(&a), *tb = nj_plan_text(&b);
    assert_string_equal(ta, tb);
    assert_null(strchr(ta, '\n'));
    assert_non_null(strstr(ta, "family=row"));
    assert_non_null(strstr(ta, "vec=4"));
    assert_non_null(strstr(ta, "nj_fwd_row 128 1 1"));
    tc_row(&c, NJ_F32, 769, NJ_FLAG_CENTER);
    b = plan_fwd(&c);
    char *tc = nj_plan_text(&b);
    assert_string_not_equal(ta, tc);
    free(ta), free(tb), free(tc);
}

/* The compile is told how many kernels a source defines: a kernel launched twice counts once. */
static void test_kernel_count(void **state)
{
    nj_plan_params pp;
    memset(&pp, 0, sizeof pp);
    assert_int_equal(nj_plan_kernel_count(&pp), 0);
    nj_plan_add_launch(&pp, "nj_a", 256, 1, 1, 0);
    nj_plan_add_launch(&pp, "nj_b", 256, 1, 1, 0);
    nj_plan_add_launch(&pp, "nj_a", 128, 1, 1, 4);
    assert_int_equal(nj_plan_kernel_count(&pp), 2);
    nj_plan_add_launch(&pp, "nj_ab", 256, 1, 1, 0);
    assert_int_equal(nj_plan_kernel_count(&pp), 3);
}

static void test_launch_grid(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 768, NJ_FLAG_CENTER);
    nj_plan_params pp = plan_fwd(&c);
    uint32_t g[3];
    assert_int_equal(nj_launch_grid(&pp.launch[0], 1001, 0, g), NJ_OK);
    assert_int_equal(g[0], 251); /* ceil(1001 rows / 4 rows per block) */
    assert_int_equal(g[1], 1);
    assert_int_equal(g[2], 1);
    /* a block per item however many: no cap, no grid-stride loop in the kernels */
    assert_int_equal(nj_launch_grid(&pp.launch[0], 10000000, 0, g), NJ_OK);
    assert_int_equal(g[0], 2500000);
    assert_int_equal(g[1], 1);
    /* past 2^31 - 1 blocks the grid goes 2-D: x * y covers every block, x within CUDA's limit */
    assert_int_equal(nj_launch_grid(&pp.launch[0], 4LL * 3000000000LL + 1, 0, g), NJ_OK);
    assert_int_equal(g[1], 2);
    assert_int_equal(g[0], 1500000001u);
    assert_int_equal(g[2], 1);
    /* a narrow device limit (the emulator's NJ_CTX_EMU_SMALL_GRID): 251 blocks over rows of at most 7 */
    assert_int_equal(nj_launch_grid(&pp.launch[0], 1001, 7, g), NJ_OK);
    assert_int_equal(g[1], 36);
    assert_int_equal(g[0], 7);
    assert_true((uint64_t)g[0] * g[1] >= 251);
    /* more blocks than any grid holds, and rows * blocks-per-row past 64 bits: NJ_ERR_OVERFLOW */
    assert_int_equal(nj_launch_grid(&pp.launch[0], 4LL * 0x7fffffffLL * 65536, 0, g), NJ_ERR_OVERFLOW);
    nj_launch big = pp.launch[0];
    big.row_mult = 1LL << 40;
    assert_int_equal(nj_launch_grid(&big, 1LL << 30, 0, g), NJ_ERR_OVERFLOW);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 0, 0, g), NJ_OK);
    assert_int_equal(g[0], 1);
    /* tiny rows on the row family (10 elements: 5 float2 chunks, 2 lanes a row, 64 rows a block): two
     * waves of blocks loop over the rows. (Such rows are the tile family's, test_tile_plan; the row
     * family keeps them under NORMJIT_PLAN_NO_TILE=1.) */
    tc_row(&c, NJ_F32, 10, NJ_FLAG_CENTER);
    setenv("NORMJIT_PLAN_NO_TILE", "1", 1);
    nj_plan_params tiny = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_TILE");
    assert_int_equal(tiny.rows_per_block, 64);
    assert_int_equal(tiny.regs_cache, 6);
    assert_int_equal(tiny.grid_loop, 1);
    assert_true(tiny.launch[0].grid_x_cap >= 132 && tiny.launch[0].grid_x_cap <= 0x7fffffff);
    /* the row kernel's cap: 8 waves of 16 blocks of 128 an SM, 12.8 of the 10 its 43 registers allow */
    assert_int_equal(tiny.launch[0].grid_x_cap, 132 * 16 * 8);
    assert_int_equal(nj_launch_grid(&tiny.launch[0], 10000000, 0, g), NJ_OK);
    assert_int_equal(g[0], (uint32_t)tiny.launch[0].grid_x_cap);
    assert_int_equal(g[1], 1);
    assert_int_equal(nj_launch_grid(&tiny.launch[0], 130, 0, g), NJ_OK);
    assert_int_equal(g[0], 3); /* fewer rows than the cap: a block per 64 rows */
    char *text = nj_plan_text(&tiny); /* in the signature: the kernel's loop depends on it */
    assert_non_null(text);
    assert_non_null(strstr(text, " loop=1 "));
    free(text);
    assert_int_equal(pp.grid_loop, 0); /* 4 rows of 768 a block: 3072 elements */
    nj_launch fixed = pp.launch[0];
    fixed.grid_x = 7, fixed.grid_y = 3;
    assert_int_equal(nj_launch_grid(&fixed, 1000, 0, g), NJ_OK);
    assert_int_equal(g[0], 7);
    assert_int_equal(g[1], 3);
}

/* Persistent row forwards (P.persist): 16-bit rows of 2048-8192 and f32 rows of 4096 with gamma/beta, a
 * block a row before, become SMs x n blocks that walk the rows; rows too long for the registers, the
 * fused residual add, warp rows and the unaligned variant stay a block a row. */
/* A row problem whose gamma/beta have x's dtype (tc_row's are f32). */
static void row_same_params(nj_canon *c, nj_dtype dt, int64_t n, uint32_t flags)
{
    tc_begin(c, dt, dt, flags, NJ_ACT_NONE, 64);
    tc_axis(c, n, true, (flags & (NJ_FLAG_SCALE | NJ_FLAG_BIAS)) != 0);
    tc_finish(c);
}

static void test_row_persist(void **state)
{
    (void)state;
    const uint32_t ln = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    nj_canon c;
    row_same_params(&c, NJ_BF16, 4096, ln);
    nj_plan_params pp = plan_fwd(&c);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.persist, 3); /* 40 registers: 65536 / (40 x 512) */
    assert_int_equal(pp.stage, 1);   /* 16-bit gamma/beta staged as floats: held, ptxas spilled */
    assert_int_equal(pp.launch[0].shmem, 2 * 4096 * 4);
    assert_int_equal(pp.launch[0].grid_x_cap, 132 * 3);
    assert_int_equal(pp.grid_loop, 0);
    uint32_t g[3];
    assert_int_equal(pp.launch[0].even, 1);
    /* 4096 rows take 11 rounds of 396 blocks: 373 blocks walk 10 or 11 rows each (not 260 of 396 idle
     * in the last round) */
    assert_int_equal(nj_launch_grid(&pp.launch[0], 4096, 0, g), NJ_OK);
    assert_int_equal(g[0], 373);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 396 * 20, 0, g), NJ_OK);
    assert_int_equal(g[0], 396);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 397, 0, g), NJ_OK);
    assert_int_equal(g[0], 199);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 8, 0, g), NJ_OK); /* a decode step: a block a row */
    assert_int_equal(g[0], 8);
    char *text = nj_plan_text(&pp);
    assert_non_null(strstr(text, " persist=3 "));
    free(text);
    nj_plan_params un, bp;
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.persist, 0);
    assert_int_equal(un.launch[0].grid_x_cap, 0);
    assert_int_equal(un.launch[0].even, 0);
    assert_int_equal(nj_plan_check(&c, &un, &dev90), NJ_OK);
    setenv("NORMJIT_PLAN_NO_STAGE16", "1", 1);
    pp = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_STAGE16");
    assert_int_equal(pp.persist, 3);
    assert_int_equal(pp.stage, 0);
    assert_int_equal(pp.launch[0].shmem, 0);
    row_same_params(&c, NJ_F16, 2048, NJ_FLAG_SCALE);
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 256);
    assert_int_equal(pp.persist, 6);
    assert_int_equal(pp.launch[0].shmem, 2048 * 4);
    /* LayerNorm rows of 6144: 48 KiB staged is too much; one vector held at 768 threads spilled, so
     * two vectors of 384 threads, two blocks an SM */
    row_same_params(&c, NJ_F16, 6144, ln);
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 384);
    assert_int_equal(pp.regs_cache, 16);
    assert_int_equal(pp.persist, 2);
    assert_int_equal(pp.stage, 0);
    row_same_params(&c, NJ_BF16, 5120, ln); /* 640 threads, two an SM */
    assert_int_equal(plan_fwd(&c).persist, 2);
    /* rows of 8192: one vector a thread would take 1024 threads, one block an SM; two vectors a thread
     * of 512 threads persist two an SM (56 registers estimated, a 64-register budget) */
    row_same_params(&c, NJ_BF16, 8192, ln);
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.regs_cache, 16);
    assert_int_equal(pp.persist, 2);
    assert_int_equal(pp.launch[0].grid_x_cap, 132 * 2);
    assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
    setenv("NORMJIT_PLAN_NO_PERSIST_WIDE", "1", 1);
    pp = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_PERSIST_WIDE");
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.regs_cache, 8);
    assert_int_equal(pp.persist, 0);
    /* f32 x and gamma/beta of 4096: two vectors a thread of 512 (48 registers estimated): two an SM */
    row_same_params(&c, NJ_F32, 4096, ln);
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.persist, 2);
    /* f32 rows of 10000: three vectors a thread of 1024 (48 bytes of x in flight a thread): one block
     * an SM, gamma/beta staged (held, too many registers) */
    row_same_params(&c, NJ_F32, 10000, ln);
    pp = plan_fwd(&c);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.regs_cache, 12);
    assert_int_equal(pp.persist, 1);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.launch[0].shmem, 2 * 10000 * 4);
    assert_int_equal(pp.launch[0].grid_x_cap, 132);
    assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
    setenv("NORMJIT_PLAN_NO_PERSIST_ONE", "1", 1);
    pp = plan_fwd(&c);
    unsetenv("NORMJIT_PLAN_NO_PERSIST_ONE");
    assert_int_equal(pp.persist, 0);
    assert_int_equal(pp.launch[0].shmem, 0);
    /* 16-bit rows of 8192 hold 16 bytes a thread at 1024 threads: not one block an SM (the wide plan) */
    row_same_params(&c, NJ_BF16, 8192, NJ_FLAG_SCALE);
    assert_int_equal(plan_fwd(&c).block, 512);
    /* rows past 16 elements a thread are streamed: none of these */
    row_same_params(&c, NJ_F32, 20000, ln);
    assert_int_equal(plan_fwd(&c).persist, 0);
    /* bf16 x, f32 gamma/beta (44 registers held): staged in shared memory instead, x in 16-byte vectors
     * (8 elements; held, gamma/beta would have limited x to 4) */
    tc_row(&c, NJ_BF16, 4096, ln);
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.nlaunch, 1);
    assert_int_equal(pp.persist, 3);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.launch[0].shmem, 2 * 4096 * 4);
    assert_int_equal(pp.launch[0].even, 1);
    assert_int_not_equal(pp.align_opds & (1u << NJ_OPD_PARAM), 0); /* staged with vector loads */
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.stage, 0);
    assert_int_equal(un.persist, 0);
    assert_int_equal(un.launch[0].shmem, 0);
    assert_int_equal(nj_plan_check(&c, &un, &dev90), NJ_OK);
    /* its backward's slots stage f32 gamma too (beta only under an activation); beside the bias's column
     * sums that is too much shared memory for row groups: 2 blocks of 512 an SM */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.persist, 2);
    assert_int_equal(bp.rows_per_block, 1);
    assert_int_equal(bp.stage, 1);
    assert_int_equal(bp.launch[0].shmem, 4096 * 4);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_BACKWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.stage, 0);
    assert_int_equal(un.launch[0].shmem, 0);
    assert_int_equal(nj_plan_check(&c, &un, &dev90), NJ_OK);
    row_same_params(&c, NJ_BF16, 4096, ln); /* 16-bit gamma: loads, as measured */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.stage, 0);
    /* rows of 6144: 48 KiB of gamma/beta would leave no room for the kernel's static shared memory
     * within the 48 KiB a launch gets without opting in */
    tc_row(&c, NJ_BF16, 6144, ln);
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.stage, 0);
    assert_int_equal(pp.launch[0].shmem, 0);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    /* f32 gamma staged (24 KiB), then the slot pair's exchange: a float a thread and column, 2 streams */
    assert_int_equal(bp.stage, 1);
    assert_int_equal(bp.launch[0].cluster, 2);
    assert_int_equal(bp.launch[0].shmem, 6144 * 4 + 2 * 6144 * 4);
    tc_row(&c, NJ_BF16, 8192, ln); /* 1024 threads: a block a row, x in 8-byte vectors as before */
    pp = plan_fwd_any(&c);
    assert_int_equal(pp.persist, 0);
    assert_int_equal(pp.stage, 0);
    assert_int_equal(pp.vec, 4);
    row_same_params(&c, NJ_BF16, 4096, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT);
    assert_int_equal(plan_fwd(&c).persist, 0);
    row_same_params(&c, NJ_BF16, 1024, ln); /* a warp a row */
    assert_int_equal(plan_fwd(&c).persist, 0);
    /* backward slots: the next row fetched where a share is one vector; not under GELU erf in blocks
     * under 512 threads */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK); /* bf16 rows of 1024 */
    assert_int_equal(bp.block, 1024); /* 8 groups of 128 a block (test_row_backward_groups_wide) */
    assert_int_equal(bp.persist, 1);
    setenv("NORMJIT_PLAN_NO_ROW_GROUPS_WIDE", "1", 1);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_ROW_GROUPS_WIDE");
    assert_int_equal(bp.block, 128);
    assert_int_equal(bp.persist, 8); /* 8 blocks of 128 an SM, a vector a thread */
    row_same_params(&c, NJ_BF16, 4096, ln); /* row groups: one 1024-thread block an SM */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.persist, 1);
    assert_int_equal(bp.launch[0].grid_x, 132);
    row_same_params(&c, NJ_BF16, 5120, ln);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.block, 640);
    assert_int_equal(bp.persist, 1);
    row_same_params(&c, NJ_BF16, 8192, ln); /* 1024 threads fetch too (64 registers, no spill) */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.block, 1024);
    assert_int_equal(bp.persist, 1);
    row_same_params(&c, NJ_BF16, 7168, ln);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.block, 896);
    assert_int_equal(bp.persist, 1);
    setenv("NORMJIT_PLAN_NO_FETCH_WIDE", "1", 1); /* not past 768 threads, as before */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_FETCH_WIDE");
    assert_int_equal(bp.persist, 0);
    /* under GELU erf: 896 threads fetch (72 registers), 1024 do not (64: the saved statistics spilled) */
    static const int64_t gelu_n[2] = {7168, 8192};
    for (int i = 0; i < 2; i++) {
        tc_begin(&c, NJ_F16, NJ_F16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 64);
        tc_axis(&c, gelu_n[i], true, true);
        tc_finish(&c);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
        assert_int_equal(bp.persist, i == 0);
    }
    tc_begin(&c, NJ_BF16, NJ_BF16, ln, NJ_ACT_GELU_ERF, 64);
    tc_axis(&c, 2048, true, true);
    tc_finish(&c);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.block, 256);
    assert_int_equal(bp.persist, 0);
    /* the measuring switch: a block a row, no fetch-ahead */
    setenv("NORMJIT_PLAN_NO_PERSIST", "1", 1);
    row_same_params(&c, NJ_BF16, 4096, ln);
    assert_int_equal(plan_fwd(&c).persist, 0);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &bp), NJ_OK);
    assert_int_equal(bp.persist, 0);
    unsetenv("NORMJIT_PLAN_NO_PERSIST");
    /* a broken persist field is refused */
    row_same_params(&c, NJ_BF16, 4096, ln);
    pp = plan_fwd(&c);
    pp.persist = 5; /* 5 x 512 threads exceed an SM */
    assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_ERR_INTERNAL);
}

static void test_launches_round_trip(void **state)
{
    (void)state;
    nj_plan_params pp;
    memset(&pp, 0, sizeof pp);
    pp.nlaunch = 3;
    for (int i = 0; i < 3; i++) {
        nj_launch *l = &pp.launch[i];
        snprintf(l->kernel, sizeof l->kernel, "nj_kernel_%d", i);
        l->block[0] = 128 * (i + 1), l->block[1] = 1 + i, l->block[2] = 1;
        l->grid_x = i, l->grid_y = 2, l->grid_z = 1 + i;
        l->row_mult = (1LL << 40) + i, l->row_div = 4, l->grid_x_cap = 1000 * i, l->shmem = 4096u * i;
        l->even = i == 2; /* a persistent grid's even rounds */
        l->cluster = i == 1 ? 8 : 0; /* thread-block clusters */
    }
    char *t = nj_launches_to_text(&pp);
    assert_non_null(strstr(t, " 8192 even\n"));
    assert_non_null(strstr(t, " 4096 cluster 8\n"));
    assert_non_null(t);
    nj_plan_params back;
    memset(&back, 0xff, sizeof back);
    assert_int_equal(nj_launches_from_text(t, &back), NJ_OK);
    assert_int_equal(back.nlaunch, 3);
    assert_memory_equal(back.launch, pp.launch, sizeof pp.launch[0] * 3);
    char *t2 = nj_launches_to_text(&back);
    assert_string_equal(t, t2);
    free(t), free(t2);
    /* a library launch carries its kernel and run-time arguments */
    const int64_t arg[NJ_LIB_NARGS][2] = {[NJ_COLSUM_NCOLS] = {100, 0}, [NJ_COLSUM_NPARTS] = {3, 7},
                                         [NJ_COLSUM_BASE_B] = {-1, 1LL << 40}};
    nj_plan_add_colsum(&pp, arg);
    assert_int_equal(pp.launch[3].lib, NJ_LIB_COLSUM);
    /* parts that grow with the batch, 100 columns in 4 blocks: 8 columns a block (S_COL 0: a sector is
       8 of them), 13 blocks */
    assert_int_equal(pp.launch[3].arg[NJ_COLSUM_CW][0], 8);
    assert_int_equal(pp.launch[3].grid_x, 13);
    assert_int_equal(pp.launch[3].arg[NJ_COLSUM_INNER][0], 1); /* an inner count of 0 reads as 1 */
    assert_int_equal(nj_plan_kernel_count(&pp), 3);           /* not a kernel of the plan's source */
    t = nj_launches_to_text(&pp);
    memset(&back, 0xff, sizeof back);
    assert_int_equal(nj_launches_from_text(t, &back), NJ_OK);
    assert_int_equal(back.nlaunch, 4);
    assert_memory_equal(back.launch, pp.launch, sizeof pp.launch[0] * 4);
    int64_t la[NJ_LIB_NARGS];
    nj_launch_lib_args(&back.launch[3], 5, la);
    assert_int_equal(la[NJ_COLSUM_NPARTS], 3 + 35);
    assert_int_equal(la[NJ_COLSUM_CW], 8);
    /* columns a block: 32 where that makes 64 blocks or more, or the parts are few; else halved while
       the blocks stay under 64, down to a 32-byte sector of a part (8 floats; 4 pairs of floats);
       NORMJIT_PLAN_NO_COLSUM_NARROW=1 keeps 32 */
    assert_int_equal(nj_colsum_cw(4096, true, 1), 32);
    assert_int_equal(nj_colsum_cw(192, false, 2), 32);
    assert_int_equal(nj_colsum_cw(192, true, 2), 4);  /* 48 blocks */
    assert_int_equal(nj_colsum_cw(1280, true, 1), 16); /* 80 blocks */
    assert_int_equal(nj_colsum_cw(96, true, 1), 8);    /* 12 blocks, a sector a part */
    setenv("NORMJIT_PLAN_NO_COLSUM_NARROW", "1", 1);
    assert_int_equal(nj_colsum_cw(192, true, 2), 32);
    unsetenv("NORMJIT_PLAN_NO_COLSUM_NARROW");
    assert_int_equal(la[NJ_COLSUM_BASE_B], (5LL << 40) - 1);
    free(t);
}

static void test_launches_parse_fail(void **state)
{
    (void)state;
    nj_plan_params pp;
    memset(&pp, 0, sizeof pp);
    static const char *const bad[] = {
        "",
        "launches 5\n",
        "launches 1\n",
        "launches 1\nk 128 1 1 0 1 1 1 1 0\n",          /* a field short */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 9\n",      /* a field too many */
        "launches 1\nk-x 128 1 1 0 1 1 1 1 0 0\n",      /* bad name */
        "launches 1\nk 0 1 1 0 1 1 1 1 0 0\n",          /* zero block */
        "launches 1\nk 128 1 1 -1 1 1 1 1 0 0\n",       /* negative grid */
        "launches 1\nk 128 1 1 0 1 1 1 1 -4 0\n",       /* negative cap */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0\nextra\n", /* trailing text */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 lib 9 0:0 0:0 0:0 0:0 0:0 0:0 0:0 0:0\n", /* no such kernel */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 lib 1 0:0 0:0 0:0 0:0 0:0 0:0 0:0\n",     /* an argument short */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 lib 1 0:0 0:0 0:0 0:0 0:0 0:0 0:0 0\n",   /* half a pair */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 cluster 1\n",                             /* not a cluster */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 cluster 32\n",                            /* past CUDA's 16 */
        "launches 1\nk 128 1 1 0 1 1 1 1 0 0 cluster\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pp.nlaunch = 2;
        assert_int_equal(nj_launches_from_text(bad[i], &pp), NJ_ERR_PARSE);
        assert_int_equal(pp.nlaunch, 2); /* untouched on failure */
    }
    assert_int_equal(nj_launches_from_text("launches 1\nk 128 1 1 0 1 1 1 1 0 0\n", &pp), NJ_OK);
    assert_int_equal(pp.nlaunch, 1);
}

static nj_plan_params plan_desc(const nj_problem_desc *p, nj_canon *c)
{
    nj_status s = nj_canonicalize(p, c);
    if (s != NJ_OK) fail_msg("canonicalize: %s", nj_last_error());
    return plan_fwd(c);
}

/* The presets, through problem.c's canonical form. */
static void test_presets(void **state)
{
    (void)state;
    nj_problem_desc p;
    nj_canon c;
    const uint32_t aff = NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    int64_t llm[3] = {8, 128, 768};
    assert_int_equal(nj_preset_layernorm(&p, NJ_F32, 3, llm, 1, aff), NJ_OK);
    nj_plan_params pp = plan_desc(&p, &c);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.rows_per_block, 4);
    assert_int_equal(pp.launch[0].row_mult * c.axes[0].extent, 8 * 128); /* rows = batch * kept_inner */
    int64_t big[2] = {4, 12288};
    assert_int_equal(nj_preset_rmsnorm(&p, NJ_BF16, 2, big, 1, NJ_FLAG_SCALE), NJ_OK);
    pp = plan_desc(&p, &c);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.rows_per_block, 1);
    assert_true(pp.vec >= 4);
    assert_true(pp.regs_cache > 0);
    /* GroupNorm NCHW: (C/G, H, W) is one contiguous run of 4 * 256 elements, but C/G is a feature axis
     * and H*W is not, so the canonical form keeps two reduced axes (the general kind); it is row-like,
     * and gamma, constant along H*W, is one scalar per float4-wide chunk of x */
    int64_t img[4] = {2, 32, 16, 16};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, img, 8, 0, aff), NJ_OK);
    p.param_dtype = NJ_F32; /* float32 master weights: 16-byte vectors hold 4 of gamma */
    pp = plan_desc(&p, &c);
    assert_int_equal(c.kind, NJ_KIND_GENERAL);
    assert_int_equal(c.reduce_size, 1024);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.rows_per_block, 4);
    /* a spatial extent of 6 (not a multiple of 4 or 8): chunks may not straddle two channels */
    int64_t odd[4] = {2, 32, 2, 3};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, odd, 8, 0, aff), NJ_OK);
    pp = plan_desc(&p, &c);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.vec, 2);
    /* GroupNorm NHWC (the channels-last tiles: test_channels_last) without centering: the general
     * family; BatchNorm both layouts, InstanceNorm channels-last */
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, img, 8, 1, aff), NJ_OK);
    p.flags &= ~(uint32_t)NJ_FLAG_CENTER;
    pp = plan_desc(&p, &c);
    assert_int_not_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    int64_t bn[4] = {8, 64, 14, 14};
    for (int cl = 0; cl < 2; cl++) {
        assert_int_equal(nj_preset_batchnorm(&p, NJ_F32, 4, bn, cl, aff), NJ_OK);
        pp = plan_desc(&p, &c);
        assert_int_equal(pp.family, cl ? NJ_FAMILY_COLUMN : NJ_FAMILY_GENERAL);
        assert_int_equal(c.reduce_size, 8 * 14 * 14);
        assert_int_equal(pp.block, 256);
    }
    int64_t nhwc[4] = {8, 14, 14, 64}; /* channels-last InstanceNorm takes [N, spatial..., C] */
    assert_int_equal(nj_preset_instancenorm(&p, NJ_F32, 4, nhwc, 1, aff), NJ_OK);
    pp = plan_desc(&p, &c);
    assert_int_equal(c.kind, NJ_KIND_COLUMN);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    /* 64 float channels: one tile a batch row, every lane busy, 16-byte accesses: 4 elements a lane,
     * 16 lanes a row, two walk rows a warp (2 elements a lane and a row a warp without sub-rows) */
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.rows_per_block, 2);
    assert_int_equal(pp.tile, 64);
    assert_int_equal(pp.launch[0].row_mult, 1);
    setenv("NORMJIT_PLAN_NO_COL_ROWS", "1", 1);
    pp = plan_desc(&p, &c);
    unsetenv("NORMJIT_PLAN_NO_COL_ROWS");
    assert_int_equal(pp.vec, 2);
    assert_int_equal(pp.rows_per_block, 1);
    assert_int_equal(pp.tile, 64);
    assert_int_equal(nj_preset_instancenorm(&p, NJ_F32, 4, bn, 0, aff), NJ_OK);
    pp = plan_desc(&p, &c);
    assert_int_equal(c.kind, NJ_KIND_ROW);
    assert_int_equal(pp.vec, 4); /* gamma is per row (channel): it does not limit the width */
    /* 49 float4 chunks: a warp would keep 49 of 64 chunk slots busy, 8 lanes a row 49 of 56 (4 lanes
     * would keep 49 of 52, but 13 chunks a lane exceed the 32 registers of a share) */
    assert_int_equal(pp.rows_per_block, 16);
    assert_int_equal(pp.regs_cache, 28);
}

/* GroupNorm over channels-last images: tiles of whole rounds of the block's pixel rows, a vector of
 * channels a thread, three launches, the workspace of the tiles' partials; the unaligned variant keeps
 * the tiling and loads a channel at a time. */
static void test_channels_last(void **state)
{
    (void)state;
    nj_problem_desc p;
    nj_canon c;
    const uint32_t aff = NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    int64_t unet[4] = {2, 320, 64, 64};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, unet, 32, 1, aff), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_plan_params pp;
    /* pipelined (P.lag): the zero launch, then one launch of two blocks a tile; per image the tiles'
       pairs, the means and the counter (two floats' room) */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_zero");
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_cl_norm");
    assert_int_equal(pp.launch[1].row_mult, 2 * pp.split);
    assert_int_equal(pp.lag, pp.split + 132);
    assert_int_equal(pp.ws_stride, (pp.split + 1) * 32 * 2 + 2);
    assert_int_equal(pp.ws[NJ_WS_FLAGS].fixed, (pp.split + 1) * 32 * 2);
    assert_int_equal(pp.ws[NJ_WS_MEANS].fixed, pp.split * 32 * 2);
    setenv("NORMJIT_PLAN_NO_CL_PIPE", "1", 1); /* the three launches, to the unaligned variant's checks */
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.lag, 0);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.vec, 8); /* 16 bytes of f16 channels */
    assert_int_equal(pp.chans, 8);
    assert_int_equal(pp.rows_per_block, 12); /* 40 lanes of 8 channels, 12 pixels at once: 480 threads */
    assert_int_equal(pp.block, 480);
    assert_int_equal(pp.tile % pp.rows_per_block, 0);
    assert_true((int64_t)pp.split * pp.tile >= 64 * 64 && (int64_t)(pp.split - 1) * pp.tile < 64 * 64);
    assert_true(pp.split >= 32 && pp.split <= 256); /* a batch-2 image pair fills an H100/H200 */
    assert_int_equal(pp.nlaunch, 3);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_stats");
    assert_string_equal(pp.launch[1].kernel, "nj_lib_merge");
    assert_string_equal(pp.launch[2].kernel, "nj_fwd_cl_norm");
    /* the merge: an (image, group) an item, the image's tiles counting tile pixels x 10 channels */
    int64_t la[NJ_LIB_NARGS];
    nj_launch_lib_args(&pp.launch[1], 2, la);
    assert_int_equal(la[NJ_MERGE_NITEMS], 2 * 32);
    assert_int_equal(la[NJ_MERGE_RADIX], 32);
    assert_int_equal(la[NJ_MERGE_NPARTS], pp.split);
    assert_int_equal(la[NJ_MERGE_S_HI] * (int64_t)sizeof(float), (int64_t)pp.workspace_per_row);
    assert_int_equal(la[NJ_MERGE_OUT_BASE], pp.split * 32 * 2);
    assert_int_equal(la[NJ_MERGE_PLEN], pp.tile);
    assert_int_equal(la[NJ_MERGE_CMUL], 10);
    assert_int_equal(la[NJ_MERGE_N], 64 * 64 * 10);
    assert_int_equal(pp.launch[0].row_mult, pp.split);
    assert_int_equal(pp.launch[2].row_mult, pp.split);
    assert_int_equal(pp.workspace_per_row, (uint64_t)(pp.split + 1) * 32 * 2 * sizeof(float));
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_PARAM);
    char *text = nj_plan_text(&pp);
    assert_non_null(strstr(text, "family=channels_last"));
    assert_non_null(strstr(text, "chans=8 tile="));
    free(text);
    nj_plan_params up;
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &up), NJ_OK);
    assert_int_equal(up.vec, 1);
    assert_int_equal(up.chans, 8);
    assert_int_equal(up.tile, pp.tile);
    assert_int_equal(up.block, pp.block);
    assert_int_equal(up.workspace_per_row, pp.workspace_per_row);
    unsetenv("NORMJIT_PLAN_NO_CL_PIPE");
    /* Flux's GroupNorm(128, 32) on 256x256 f32 images: float4 channels, 512 threads, at most 256 tiles */
    int64_t flux[4] = {16, 128, 256, 256};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F32, 4, flux, 32, 1, aff), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.split, 256);
    /* odd channel counts load a channel at a time; more than 512 lanes would not fit a block */
    int64_t odd[4] = {2, 99, 5, 5};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_BF16, 4, odd, 3, 1, aff), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.vec, 1);
    assert_int_equal(pp.align_opds, 0);
    assert_int_equal(pp.rows_per_block, 5); /* 99 lanes, 5 pixels at once: 495 threads, 16 warps */
    assert_int_equal(pp.block, 512);
    int64_t wide[4] = {2, 1023, 4, 4};
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F32, 4, wide, 3, 1, aff), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    /* a fused residual (and its sum written out) takes the tiles too, checked for alignment */
    assert_int_equal(nj_preset_groupnorm(&p, NJ_BF16, 4, unet, 32, 1, aff | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT),
                     NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y | 1u << NJ_OPD_RES | 1u << NJ_OPD_RESOUT |
                                        1u << NJ_OPD_PARAM);
    /* without gamma/beta the canonical form marks no feature axis: still the channels-last tiles */
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, unet, 32, 1, 0), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_false(c.axes[2].feature);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_Y);
    /* the backward takes the same tiles with 8-byte vectors (f16: 4 channels), pipelined: the zero launch,
     * the tiles' (sums, then dx) and the dgamma/dbeta column sum; the counter after the partials */
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, unet, 32, 1, aff), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.nlaunch, 3);
    assert_string_equal(pp.launch[0].kernel, "nj_bwd_cl_zero");
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_cl_dx");
    assert_int_equal(pp.launch[1].row_mult, 2 * pp.split);
    assert_int_equal(pp.lag, pp.split + 66); /* 480 threads: one block an SM */
    assert_int_equal(pp.ws_stride, (pp.split + 1) * 32 * 4 + (int64_t)pp.split * 320 * 2 + 2);
    assert_int_equal(pp.ws[NJ_WS_FLAGS].fixed, pp.ws_stride - 2);
    /* and without it four launches; the dgamma/dbeta one has a grid fixed by the channels (a block per
     * 32), not by the batch */
    setenv("NORMJIT_PLAN_NO_CL_PIPE", "1", 1);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev90, &pp), NJ_OK);
    unsetenv("NORMJIT_PLAN_NO_CL_PIPE");
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_string_equal(pp.template_name, "bwd_channels_last.cu");
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 480); /* 80 lanes of 4 channels, 6 pixels at once */
    assert_int_equal(pp.nlaunch, 4);
    assert_string_equal(pp.launch[3].kernel, "nj_lib_colsum");
    /* 320 channels, 10 blocks of 32: 4 columns a block (a channel's pair of partials, 8 bytes apart
       from the next channel's), 80 blocks */
    assert_int_equal(pp.launch[3].arg[NJ_COLSUM_CW][0], 4);
    assert_int_equal(pp.launch[3].grid_x, 80);
    /* the library's column sum walks each image's tile partials: (image, tile) parts, pairs per channel
     * after the group sums and means of the image (two pairs a group: the saved mean's correction too) */
    nj_launch_lib_args(&pp.launch[3], 3, la);
    int64_t chans = (pp.split + 1) * 32 * 4, image = chans + (int64_t)pp.split * 320 * 2;
    assert_int_equal(la[NJ_COLSUM_NCOLS], 320);
    assert_int_equal(la[NJ_COLSUM_NPARTS], 3 * pp.split);
    assert_int_equal(la[NJ_COLSUM_INNER], pp.split);
    assert_int_equal(la[NJ_COLSUM_S_OUTER], image);
    assert_int_equal(la[NJ_COLSUM_S_INNER], 640);
    assert_int_equal(la[NJ_COLSUM_S_COL], 2);
    assert_int_equal(la[NJ_COLSUM_BASE_A], chans);
    assert_int_equal(la[NJ_COLSUM_BASE_B], chans + 1);
    assert_int_equal((uint64_t)image * sizeof(float), pp.workspace_per_row);
    assert_int_equal(pp.align_opds, 1u << NJ_OPD_X | 1u << NJ_OPD_DY | 1u << NJ_OPD_DX | 1u << NJ_OPD_PARAM);
    assert_int_equal(pp.workspace_per_row,
                     ((uint64_t)(pp.split + 1) * 32 * 4 + (uint64_t)pp.split * 320 * 2) * sizeof(float));
    /* a small image's backward, x and dy of 80 KB, staged in one block on sm_80 and sm_90 (no cluster):
     * one launch and the column sum, the workspace the tile's dgamma/dbeta pairs alone; its unaligned
     * variant reads the image again instead; 16 x 16 (320 KB) is a cluster of 2 on sm_90, not staged on
     * sm_80 */
    int64_t small[4] = {2, 320, 8, 8}, mid[4] = {2, 320, 16, 16};
    for (int a = 0; a < 2; a++) {
        assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, small, 32, 1, aff), NJ_OK);
        assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, a ? &dev90 : &dev80, &pp), NJ_OK);
        assert_int_equal(pp.nlaunch, 2);
        assert_string_equal(pp.launch[0].kernel, "nj_bwd_cl_cluster");
        assert_int_equal(pp.launch[0].cluster, 0);
        assert_int_equal(pp.split, 1);
        assert_int_equal(pp.stage, 1);
        assert_int_equal(pp.launch[0].shmem, 70 * 320 * 2 * 2); /* 10 rounds of 7 pixels (576 threads), x then dy */
        assert_int_equal(pp.workspace_per_row, 320 * 2 * sizeof(float));
        assert_int_equal(nj_plan_variant(&c, NJ_PASS_BACKWARD, NJ_VARIANT_UNALIGNED, a ? &dev90 : &dev80, &up),
                         NJ_OK);
        assert_int_equal(up.stage, 0);
        assert_int_equal(up.launch[0].shmem, 0);
        assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, mid, 32, 1, aff), NJ_OK);
        assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, a ? &dev90 : &dev80, &pp), NJ_OK);
        assert_int_equal(pp.launch[0].cluster, a ? 2 : 0);
        assert_int_equal(pp.stage, a ? 1 : 0);
    }
    /* RMS-style (no centering) group statistics: the general family */
    assert_int_equal(nj_preset_groupnorm(&p, NJ_F16, 4, unet, 32, 1, aff), NJ_OK);
    p.flags &= ~(uint32_t)NJ_FLAG_CENTER;
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev90, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
}

/* Plans one pass of a problem line on dev (the pass's canonical view in *view when not NULL). */
static nj_plan_params plan_line_v(const char *line, nj_pass pass, const nj_device_props *dev, nj_canon *view)
{
    nj_problem_desc p;
    nj_canon c, v;
    assert_int_equal(nj_problem_from_text(line, 4, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_canon_for_pass(&c, pass, &v);
    nj_plan_params pp;
    if (nj_plan_pass(&v, pass, dev, &pp) != NJ_OK) fail_msg("%s: %s", line, nj_last_error());
    if (view) *view = v;
    return pp;
}

static nj_plan_params plan_line(const char *line, nj_pass pass, const nj_device_props *dev)
{
    return plan_line_v(line, pass, dev, NULL);
}

/* The general family splits a statistic from 2^16 elements where a batch row's statistics are fewer than
 * the SMs (BatchNorm, a statistic a channel): 128 blocks of 100352 elements had left the f16 128 x 128 x
 * 28 x 28 forward at 18% of copy in the model. Pipelined both ways (4 pieces of 2^15 forward without
 * the pipe). 256 channels fill the SMs: no split. */
static void test_general_few(void **state)
{
    (void)state;
    nj_plan_params pp = plan_line("batchnorm f16 nchw 128x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    assert_int_equal(pp.split, 49); /* pipelined: pieces of 512 threads x 4 */
    assert_int_equal(pp.lag, 49 + 132 * 4 / 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_general_zero");
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    pp = plan_line("batchnorm f16 nchw 128x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    assert_int_equal(pp.split, 4); /* the part and main launches: pieces of 2^15 */
    assert_int_equal(pp.nlaunch, 2);
    pp = plan_line("batchnorm f16 nchw 128x128x28x28 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_true(pp.split > 1 && pp.lag > pp.split);
    /* past the few channels: split where the resident blocks' channels (x) outgrow the L2, 196 KB x 528
       blocks (and 127 KB, under the few channels' 2^16 elements), not 49 KB */
    pp = plan_line("batchnorm f16 nchw 128x256x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_true(pp.split > 1 && pp.lag > 0);
    pp = plan_line("batchnorm f16 nchw 83x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90); /* 65072 */
    assert_true(pp.split > 1);
    pp = plan_line("batchnorm f16 nchw 32x512x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.split, 1);
    setenv("NORMJIT_PLAN_NO_GENERAL_L2", "1", 1);
    pp = plan_line("batchnorm f16 nchw 128x256x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.split, 1);
    pp = plan_line("batchnorm f16 nchw 83x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.split, 1);
    unsetenv("NORMJIT_PLAN_NO_GENERAL_L2");
    /* 84 images (65856): pieces of 2^15 without the pipe (3), never one piece in a part launch */
    setenv("NORMJIT_PLAN_NO_SPLIT_PIPE", "1", 1);
    pp = plan_line("batchnorm f16 nchw 84x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.split, 3);
    pp = plan_line("batchnorm f16 nchw 84x128x28x28 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.split, 3);
    unsetenv("NORMJIT_PLAN_NO_SPLIT_PIPE");
    setenv("NORMJIT_PLAN_NO_GENERAL_FEW", "1", 1);
    setenv("NORMJIT_PLAN_NO_GENERAL_L2", "1", 1);
    pp = plan_line("batchnorm f16 nchw 128x128x28x28 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_GENERAL_FEW");
    unsetenv("NORMJIT_PLAN_NO_GENERAL_L2");
    assert_int_equal(pp.split, 1);
}

/* A split column walk whose tile's x and y fit NJ_PIPE_BYTES is pipelined (planner_column.c: col_fwd_pipe):
 * channels-last InstanceNorm of 32^3 voxels and 256 f32 channels takes tiles of one 128-byte line (32
 * columns, 4 a lane, 8 lanes a sub-row), pieces of 256 walk rows (32 KB of x), a zero launch and one
 * launch of two blocks a piece; 32 f16 channels (BatchNorm NHWC) half a line, and so do 128 whose line
 * would be too big. A tile of 64^3 voxels (32
 * MB of x) keeps three launches, and so does NORMJIT_PLAN_NO_COL_PIPE=1; the unaligned variant keeps
 * the pipe, a column at a time. */
static void test_column_pipe(void **state)
{
    (void)state;
    nj_plan_params pp = plan_line("instancenorm f32 ndhwc 4x32x32x32x256 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    assert_int_equal(pp.tile, 32);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.rows_per_block, 4);
    assert_int_equal(pp.split, 128);
    assert_int_equal(pp.lag, 128 + 132 * 4 / 2);
    assert_int_equal(pp.nlaunch, 2);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_column_zero");
    assert_int_equal(pp.launch[0].row_mult, 8); /* a counter a tile: 8 tiles an image */
    assert_string_equal(pp.launch[1].kernel, "nj_fwd_column");
    assert_int_equal(pp.launch[1].row_mult, 8 * 128 * 2);
    assert_int_equal(pp.role[NJ_ROLE_PART], 0);
    assert_int_equal(pp.reverse, 0);
    /* per image: 8 tiles x 128 pieces of 64 floats, 8 tiles' merged 64, a counter a tile */
    assert_int_equal(pp.workspace_per_row, (8 * 129 * 64 + 8) * 4);
    nj_plan_params un;
    nj_problem_desc p;
    nj_canon c;
    assert_int_equal(nj_problem_from_text("instancenorm f32 ndhwc 4x32x32x32x256 flags=scale,bias", 4, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_variant(&c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev90, &un), NJ_OK);
    assert_int_equal(un.vec, 1);
    assert_int_equal(un.lag, pp.lag);
    assert_int_equal(un.tile, 32);
    pp = plan_line("batchnorm f16 nhwc 4x32x32x64 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_true(pp.lag > 0);
    assert_int_equal(pp.tile, 32);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.rows_per_block, 8);
    /* 128 f16 channels over 32 x 56 x 56: a line's tile is 25.7 MB of x and y, half a line's 12.8 */
    pp = plan_line("batchnorm f16 nhwc 32x128x56x56 flags=scale,bias act=relu", NJ_PASS_FORWARD, &dev90);
    assert_true(pp.lag > 0);
    assert_int_equal(pp.tile, 32);
    pp = plan_line("instancenorm f32 ndhwc 2x64x64x64x64 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.lag, 0);
    assert_int_equal(pp.nlaunch, 3);
    setenv("NORMJIT_PLAN_NO_COL_PIPE", "1", 1);
    pp = plan_line("instancenorm f32 ndhwc 8x32x32x32x256 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_COL_PIPE");
    assert_int_equal(pp.lag, 0);
    assert_int_equal(pp.nlaunch, 3);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_column_part");
    /* the backward: tiles of 32 columns (a column a lane: 12.6 MB of x, dy and dx, where 2 made 25), 256
     * pieces of 128 walk rows (32 KB of x and dy), their sums merged 16 at a time, then the tile's 16
     * groups (a counter each and one for the tile: 17 a tile); the fused dgamma/dbeta rows' column sum
     * after */
    pp = plan_line("instancenorm f32 ndhwc 4x32x32x32x256 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    assert_int_equal(pp.vec, 1);
    assert_int_equal(pp.tile, 32);
    assert_int_equal(pp.split, 256);
    assert_int_equal(pp.pipe_group, 16);
    assert_int_equal(pp.lag, 256 + 132 * 4 / 2);
    assert_int_equal(pp.pgrad, NJ_PGRAD_FUSED);
    assert_int_equal(pp.nlaunch, 3);
    assert_string_equal(pp.launch[0].kernel, "nj_bwd_column_zero");
    assert_int_equal(pp.launch[0].row_mult, 8 * 17);
    assert_string_equal(pp.launch[1].kernel, "nj_bwd_column");
    assert_int_equal(pp.launch[1].row_mult, 8 * 256 * 2);
    assert_int_equal(pp.launch[2].lib, NJ_LIB_COLSUM);
    /* per image: the fused rows (2 x 256 pieces x 256 columns), 8 tiles x 256 pieces x 128 sums, the
     * means, 16 group sums a tile, 17 counters a tile */
    assert_int_equal(pp.workspace_per_row, (2 * 256 * 256 + 8 * (256 + 1 + 16) * 128 + 8 * 17) * 4);
    /* 40000 voxels: 313 pieces (more than the part launch's 256), 20 groups, the last of 9 */
    pp = plan_line("instancenorm f32 ndhwc 1x40x40x25x32 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.split, 313);
    assert_int_equal(pp.launch[0].row_mult, 1 * 21);
    /* the separate dgamma walks (gamma down the walk) keep four launches */
    pp = plan_line("rmsnorm bf16 2x8192x64 axes=1 flags=scale", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.lag, 0);
    pp = plan_line("rmsnorm bf16 2x8192x64 axes=1 flags=none", NJ_PASS_BACKWARD, &dev90);
    assert_true(pp.lag > 0);
    assert_int_equal(pp.pgrad, NJ_PGRAD_NONE);
}

/* P.reverse: every plan whose part launch reads the items before its main launch reads them again walks
 * the main launch backwards (planner.c: plan_reverse), whatever the family; a plan of one launch, or
 * one whose second launch is the library's (a fused channels-last forward, a staged channels-last
 * backward and its column sum), does not; NORMJIT_PLAN_NO_REVERSE=1 walks forwards. */
static void test_reverse(void **state)
{
    (void)state;
    const nj_device_props *dev = &dev90;
    static const struct {
        const char *line;
        nj_pass pass;
        int32_t reverse;
    } want[] = {
        {"layernorm f32 4x10000000 flags=scale,bias", NJ_PASS_FORWARD, 1},       /* row, split */
        {"layernorm f32 8x1000000 flags=scale,bias", NJ_PASS_FORWARD, 0},        /* pipelined */
        {"groupnorm f16 nhwc 2x320x64x64 groups=32 flags=scale,bias", NJ_PASS_FORWARD, 0},  /* pipelined */
        {"groupnorm f16 nhwc 2x320x64x64 groups=32 flags=scale,bias,residual", NJ_PASS_FORWARD, 1}, /* tiles */
        {"groupnorm f16 nhwc 2x320x64x64 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, 0}, /* pipelined */
        {"groupnorm f16 nhwc 2x640x128x128 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, 1}, /* tiles */
        {"groupnorm f16 nhwc 2x320x8x8 groups=32 flags=scale,bias", NJ_PASS_FORWARD, 0},    /* fused */
        {"groupnorm f16 nhwc 2x320x8x8 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, 0},   /* staged */
        {"groupnorm f32 nchw 2x64x128x128 groups=2 flags=scale,bias", NJ_PASS_BACKWARD, 1},  /* general */
        {"instancenorm f32 ncdhw 1x2x128x128x128 flags=scale,bias", NJ_PASS_BACKWARD, 0},   /* pipelined */
        {"instancenorm f32 ndhwc 2x64x64x64x64 flags=scale,bias", NJ_PASS_FORWARD, 1},      /* column */
        {"layernorm bf16 4096x4096 flags=scale,bias", NJ_PASS_FORWARD, 0},
        {"layernorm bf16 4096x4096 flags=scale,bias", NJ_PASS_BACKWARD, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_plan_params pp = plan_line(want[i].line, want[i].pass, dev);
        if (pp.reverse != want[i].reverse) fail_msg("%s: reverse=%d", want[i].line, pp.reverse);
        assert_int_equal(pp.role[NJ_ROLE_PART] != 0, want[i].reverse);
        char *t = nj_plan_text(&pp);
        assert_non_null(t);
        assert_int_equal(strstr(t, "reverse=1") != NULL, want[i].reverse);
        free(t);
        setenv("NORMJIT_PLAN_NO_REVERSE", "1", 1);
        pp = plan_line(want[i].line, want[i].pass, dev);
        unsetenv("NORMJIT_PLAN_NO_REVERSE");
        assert_int_equal(pp.reverse, 0);
    }
}

/* The cluster family (planner_cluster.c), forwards on sm_90: rows the row family would split (2^18
 * elements and more) or stream twice (x past the 200 KB it keeps in shared memory) whose x fits 8
 * blocks' shared memory (227 KB each, 4 KB kept for the kernel's arrays) take the fewest blocks that
 * hold it, a cluster a row (with gamma/beta along the row where they fit too: slots, test_cluster_fwd_slots);
 * not on sm_80, not with the residual,
 * not past 8 blocks; the backward where gamma is constant over each row (x staged alone);
 * NORMJIT_PLAN_NO_CLUSTER=1 splits them as before. The grid keeps
 * a cluster's blocks on one grid row however narrow the grid. */
static void test_cluster_plan(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int32_t k, vec;
        uint32_t shmem;
        int bwd;   /* the backward too (x staged alone): gamma constant over each row (1), each piece (2);
                    * gamma along the row (3: slots, test_cluster_bwd_slots) */
        int split; /* the row family splits it (2^18 elements), else streams it */
    } want[] = {
        {"instancenorm f32 ncdhw 2x4x64x64x64 flags=scale,bias", 8, 4, 131072, 1, 1},
        {"groupnorm f32 nchw 16x128x256x256 groups=32 flags=scale,bias", 8, 4, 131072, 2, 1},
        {"layernorm f16 2x262144 flags=scale,bias", 4, 8, 131072, 0, 1},
        {"layernorm f32 4x400001 flags=scale,bias", 8, 1, 200004, 0, 1},
        {"rmsnorm bf16 2x300000 flags=scale", 8, 8, 75008 + 150016, 3, 1}, /* slots: gamma staged too */
        {"layernorm f32 2x200000 flags=scale,bias", 4, 4, 200000, 0, 0},  /* 800 KB, under 2^18 */
        {"layernorm f32 1000x100000 flags=scale,bias", 8, 4, 50048 + 100096, 3, 0}, /* nv_norms: 400 KB rows */
        {"rmsnorm f16 3x102401 flags=scale", 4, 1, 51328 + 102656, 3, 0},   /* just past 200 KB */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_plan_params pp = plan_line(want[i].line, NJ_PASS_FORWARD, &dev90);
        if (pp.family != NJ_FAMILY_CLUSTER) fail_msg("%s: family %s", want[i].line, nj_family_name(pp.family));
        assert_int_equal(pp.nlaunch, 1);
        assert_int_equal(pp.split, want[i].k);
        assert_int_equal(pp.launch[0].cluster, want[i].k);
        assert_int_equal(pp.vec, want[i].vec);
        assert_int_equal(pp.block, 1024);
        assert_int_equal(pp.stage, 1);
        assert_int_equal(pp.launch[0].shmem, want[i].shmem);
        assert_true(pp.launch[0].shmem <= (uint32_t)dev90.max_shared_per_block - 4096);
        /* the copy's loads in flight: 64 bytes of x a thread, 4 to 16 loads (odd rows: 16 elements) */
        int64_t xb = (int64_t)pp.vec * (strstr(want[i].line, "f32") ? 4 : 2);
        assert_int_equal(pp.unroll, xb >= 16 ? 4 : 64 / xb > 16 ? 16 : 64 / xb);
        nj_plan_params bp = plan_line(want[i].line, NJ_PASS_BACKWARD, &dev90);
        assert_int_equal(bp.family == NJ_FAMILY_CLUSTER, want[i].bwd > 0);
        /* the backward copies x and dy: 32 bytes each, 4 to 8 loads */
        if (bp.family == NJ_FAMILY_CLUSTER) assert_int_equal(bp.unroll, xb >= 8 ? 4 : 32 / xb > 8 ? 8 : 32 / xb);
        if (want[i].bwd == 1 || want[i].bwd == 2) { /* the row's (the piece's) dgamma/dbeta pair */
            assert_int_equal(bp.pgrad, want[i].bwd == 1 ? NJ_PGRAD_SETS : NJ_PGRAD_PIECES);
            assert_int_equal(bp.nlaunch, 2);
            assert_int_equal(bp.launch[0].cluster, want[i].k);
            assert_int_equal(bp.launch[0].shmem, want[i].shmem);
        }
        assert_int_equal(plan_line(want[i].line, NJ_PASS_FORWARD, &dev80).family, NJ_FAMILY_ROW);
        setenv("NORMJIT_PLAN_NO_CLUSTER", "1", 1);
        pp = plan_line(want[i].line, NJ_PASS_FORWARD, &dev90);
        unsetenv("NORMJIT_PLAN_NO_CLUSTER");
        assert_int_equal(pp.family, NJ_FAMILY_ROW);
        assert_int_equal(pp.split > 1, want[i].split);
        assert_int_equal(pp.launch[0].cluster, 0);
    }
    static const char *const not[] = {
        "layernorm f32 10x1000000 flags=scale,bias",               /* 4 MB: past 8 blocks */
        "layernorm f32 2x262144 flags=scale,bias,residual,resout", /* the residual */
        "layernorm f32 2x51200 flags=scale,bias",                  /* 200 KB: one block keeps it */
        "layernorm f16 2x102400 flags=scale,bias",                 /* the same in f16 */
    };
    for (size_t i = 0; i < sizeof not / sizeof not[0]; i++)
        if (plan_line(not[i], NJ_PASS_FORWARD, &dev90).family == NJ_FAMILY_CLUSTER) fail_msg("%s: cluster", not[i]);
    /* 3 rows x 4 channels x 8 blocks: a grid row of at least one whole cluster */
    nj_plan_params pp = plan_line(want[0].line, NJ_PASS_FORWARD, &dev90);
    uint32_t g[3];
    assert_int_equal(nj_launch_grid(&pp.launch[0], 3, 7, g), NJ_OK);
    assert_int_equal(g[0], 8);
    assert_int_equal(g[1], 12);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 3, 20, g), NJ_OK);
    assert_int_equal(g[0], 16);
    assert_int_equal(g[1], 6);
    assert_int_equal(nj_launch_grid(&pp.launch[0], 3, 0, g), NJ_OK);
    assert_int_equal(g[0], 96);
    assert_int_equal(g[1], 1);
}

/* The backward plan of `line` on sm_90 (else sm_80): the cluster family exactly when k > 0, then k blocks
 * a row, in clusters of k past one block. */
static nj_plan_params cluster_bwd_on(const char *line, bool sm90, int32_t k)
{
    nj_plan_params pp = plan_line(line, NJ_PASS_BACKWARD, sm90 ? &dev90 : &dev80);
    if ((pp.family == NJ_FAMILY_CLUSTER) != (k > 0))
        fail_msg("%s sm_%d: family %s", line, sm90 ? 90 : 80, nj_family_name(pp.family));
    if (k) {
        assert_int_equal(pp.split, k);
        assert_int_equal(pp.launch[0].cluster, k > 1 ? k : 0);
    }
    return pp;
}

/* Under the planner switch `name` (NORMJIT_PLAN_NO_<name>=1), the backward of `line` on sm_90 is not the
 * cluster family's. */
static void cluster_bwd_off(const char *line, const char *name)
{
    char var[64];
    snprintf(var, sizeof var, "NORMJIT_PLAN_NO_%s", name);
    setenv(var, "1", 1);
    nj_plan_params pp = plan_line(line, NJ_PASS_BACKWARD, &dev90);
    unsetenv(var);
    assert_int_not_equal(pp.family, NJ_FAMILY_CLUSTER);
}

/* The cluster family's backward under 2^18 elements: rows whose x and dy come to 64 KB and more, gamma
 * constant over the row or absent (or over each of a cluster's pieces: GroupNorm NCHW), stage x in one
 * block where it fits an SM (split 1: no cluster, any architecture: the walks had read x and dy twice,
 * the second time from DRAM), in a cluster past it (sm_90); smaller rows, and rows with gamma by
 * element, stay where they were. */
static void test_cluster_bwd_block(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int32_t k80, k90; /* blocks a row on sm_80 and sm_90; 0: not the cluster family */
        uint32_t shmem;
    } want[] = {
        {"instancenorm f32 nchw 2x4x128x128 flags=scale,bias", 1, 1, 65536},
        {"instancenorm f16 nchw 2x4x128x128 flags=scale,bias act=silu", 1, 1, 32768},
        {"instancenorm bf16 ncdhw 2x4x32x32x32", 1, 1, 65536},
        {"rmsnorm f32 3x20000 flags=none", 1, 1, 80000},
        {"instancenorm f32 nchw 2x4x256x256 flags=scale,bias", 0, 2, 131072},
        {"instancenorm f32 nchw 2x4x64x64 flags=scale,bias", 0, 0, 0}, /* 32 KB: the second reads hit L2 */
        {"layernorm f32 3x10000 flags=scale,bias", 0, 0, 0}, /* gamma by element: the row family's slots */
        /* GroupNorm NCHW: gamma constant over each piece (a pair a piece), or pieces of whole channels (a
           pair a channel: a one-block row, or a cluster of 2 channels a block) */
        {"groupnorm bf16 nchw 2x8x256x256 groups=4 flags=scale,bias", 0, 2, 131072},
        {"groupnorm f32 nchw 2x8x64x64 groups=4 flags=scale,bias", 1, 1, 32768},
        {"groupnorm f32 nchw 2x16x128x128 groups=4 flags=scale,bias", 0, 2, 131072},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        for (int a = 0; a < 2; a++) {
            int32_t k = a ? want[i].k90 : want[i].k80;
            nj_plan_params pp = cluster_bwd_on(want[i].line, a, k);
            if (!k) continue;
            assert_int_equal(pp.launch[0].shmem, want[i].shmem);
            assert_int_equal(pp.block, want[i].shmem <= 32768 && strstr(want[i].line, "groupnorm") ? 256 : 1024);
            assert_int_equal(pp.stage, 1);
            if (strstr(want[i].line, "groupnorm")) assert_int_equal(pp.pgrad, NJ_PGRAD_PIECES);
        }
        if (want[i].k90) cluster_bwd_off(want[i].line, "CLUSTER");
    }
    /* the plan check: a cluster plan of several blocks a row needs its clusters; one block needs none */
    nj_canon v;
    nj_plan_params pp = plan_line_v(want[0].line, NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(nj_plan_check(&v, &pp, &dev80), NJ_OK);
    pp.split = 2;
    assert_int_equal(nj_plan_check(&v, &pp, &dev80), NJ_ERR_INTERNAL);
}

/* The cluster family's backward of rows past the row family's slots (16384 elements) with gamma along
 * the row: a fixed grid of slots, a cluster (or a block) each, walking rows c, c + slots, ...; a block's
 * shared memory holds its piece of x, then its piece's dgamma (and dbeta) partials; the library's column
 * sum adds the slots' partial rows. The fewest blocks a row whose pieces fit: none past 8 (sm_90) or 1
 * (sm_80); NORMJIT_PLAN_NO_CLUSTER_SLOTS=1 keeps the row family's. Where gamma (beta under an activation)
 * fits too, it is staged after the partials (P.stage 2; NORMJIT_PLAN_NO_CLUSTER_STAGE_G=1: not). */
static void test_cluster_bwd_slots(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int32_t k80, k90; /* blocks a row on sm_80 and sm_90; 0: not the cluster family */
        uint32_t shmem90;
        uint32_t gbytes; /* of it, gamma (beta under an activation) staged beside x and the partials */
    } want[] = {
        {"layernorm f32 1000x100000 flags=scale,bias", 0, 8, 50000 + 100000 + 50000, 50000}, /* 12500 a block */
        {"rmsnorm f16 3x102401 flags=scale", 0, 4, 51216 + 102404, 0},           /* no dbeta rows */
        {"layernorm f16 140x20000 flags=scale,bias act=gelu_erf", 0, 1, 40000 + 160000, 0},
        {"layernorm f32 30x80000 flags=scale,bias act=silu", 0, 8, 40000 + 80000 + 80000, 80000},
        {"rmsnorm f32 40x60000 flags=scale", 0, 4, 60000 + 60000 + 60000, 60000},
        {"layernorm f32 8x16000 flags=scale,bias", 0, 0, 0, 0},                  /* the row family's slots */
        {"layernorm f32 2x200000 flags=scale,bias", 0, 0, 0, 0},                 /* past 8 blocks */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        for (int a = 0; a < 2; a++) {
            int32_t k = a ? want[i].k90 : want[i].k80;
            nj_plan_params pp = cluster_bwd_on(want[i].line, a, k);
            if (!k) continue;
            /* all resident: clusters on GPCs counted 16 SMs each (8 of the 132 SMs), a block on any SM */
            int32_t slots = k == 1 ? 132 : 8 * (16 / k);
            assert_int_equal(pp.pgrad, NJ_PGRAD_SLOTS);
            assert_int_equal(pp.pgrad_parts, slots);
            assert_int_equal(pp.nlaunch, 2);
            assert_int_equal(pp.launch[0].grid_x, slots * k);
            assert_int_equal(pp.launch[0].shmem, want[i].shmem90);
            assert_int_equal(pp.stage, want[i].gbytes ? 2 : 1);
            assert_true(pp.launch[0].shmem <= (uint32_t)dev90.max_shared_per_block - 4096);
            assert_string_equal(pp.launch[1].kernel, "nj_lib_colsum");
            nj_canon v;
            pp = plan_line_v(want[i].line, NJ_PASS_BACKWARD, &dev90, &v);
            assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
            if (!want[i].gbytes) continue;
            setenv("NORMJIT_PLAN_NO_CLUSTER_STAGE_G", "1", 1);
            pp = plan_line(want[i].line, NJ_PASS_BACKWARD, &dev90);
            unsetenv("NORMJIT_PLAN_NO_CLUSTER_STAGE_G");
            assert_int_equal(pp.stage, 1);
            assert_int_equal(pp.launch[0].shmem, want[i].shmem90 - want[i].gbytes);
        }
        if (want[i].k90) cluster_bwd_off(want[i].line, "CLUSTER_SLOTS");
    }
}

/* The cluster forward's slots: gamma/beta along the row (one for all rows) whose pieces fit an SM's shared
 * memory beside x's, as floats: a fixed grid of resident clusters walking the rows, each block's piece
 * (whole 128-byte lines of x) of gamma/beta staged once; otherwise (16-bit rows of 300000: 375 KB a block of 8) a cluster a row, and
 * under NORMJIT_PLAN_NO_CLUSTER_FWD_SLOTS=1. */
static void test_cluster_fwd_slots(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int32_t k, grid; /* blocks a row, the fixed grid (0: a cluster a row) */
        uint32_t shmem;
    } want[] = {
        {"layernorm f32 1000x100000 flags=scale,bias", 8, 128, 50048 + 100096}, /* 12512 a block */
        {"layernorm f32 45x100000 flags=scale", 4, 128, 100096 + 100096},      /* 32 clusters, not 33 */
        {"rmsnorm f32 100x70001 flags=scale,stats", 4, 128, 70016 + 70016},     /* odd: vectors of 1 */
        {"layernorm bf16 37x300000 flags=scale,bias", 4, 0, 150000},           /* x alone, a cluster a row */
        {"instancenorm f32 ncdhw 1x2x64x64x64 flags=scale,bias", 8, 0, 131072}, /* gamma by row */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_canon c;
        nj_plan_params pp = plan_line_v(want[i].line, NJ_PASS_FORWARD, &dev90, &c);
        assert_int_equal(pp.family, NJ_FAMILY_CLUSTER);
        assert_int_equal(pp.split, want[i].k);
        assert_int_equal(pp.launch[0].grid_x, want[i].grid);
        assert_int_equal(pp.launch[0].cluster, want[i].k);
        assert_int_equal(pp.launch[0].shmem, want[i].shmem);
        assert_true(pp.launch[0].shmem <= (uint32_t)dev90.max_shared_per_block - 4096);
        assert_int_equal(nj_plan_check(&c, &pp, &dev90), NJ_OK);
        if (!want[i].grid) continue;
        setenv("NORMJIT_PLAN_NO_CLUSTER_FWD_SLOTS", "1", 1);
        pp = plan_line_v(want[i].line, NJ_PASS_FORWARD, &dev90, &c);
        unsetenv("NORMJIT_PLAN_NO_CLUSTER_FWD_SLOTS");
        assert_int_equal(pp.launch[0].grid_x, 0);
    }
}

/* The image family (planner_image.c): LayerNorm over the C of NCHW whose image fits shared memory with
 * its block's floats; the block sized for the blocks an SM that shared memory allows (64
 * registers a thread), the launch's shared memory the slab plus those floats; the backward where x and
 * dy both fit. Larger images and channel rows past 512 bytes stay the column family's; so does
 * everything under NORMJIT_PLAN_NO_IMAGE=1. */
static void test_image_plan(void **state)
{
    (void)state;
    nj_device_props d80;
    nj_device_props_default(80, &d80);
    /* f16 768x7x7: 75264 B of slab + 8704 of floats (gamma/beta 6144, 10 x 49 partials, 3 x 49): 2 an SM */
    nj_canon v;
    nj_plan_params pp = plan_line_v("layernorm f16 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.vec, 8);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.nlaunch, 1);
    assert_int_equal(pp.launch[0].shmem, 75264 + 8704);
    assert_true(2 * (pp.launch[0].shmem + 1024) <= (uint32_t)dev90.max_shared_per_block + 1024);
    assert_int_equal(pp.align_opds, (1u << NJ_OPD_X) | (1u << NJ_OPD_Y));
    assert_int_equal(pp.workspace_fixed + pp.workspace_per_row, 0);
    /* the unaligned variant: a scalar copy of the same slab */
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.vec, 1);
    assert_int_equal(uv.unroll, 1);
    assert_int_equal(uv.stage, 1);
    assert_int_equal(uv.launch[0].shmem, pp.launch[0].shmem);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* f32 and f16 14x14: 150528 B, one block of 1024 an SM, on sm_80 as well */
    pp = plan_line("layernorm f32 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.launch[0].shmem, 150528 + 10656);
    pp = plan_line("layernorm f16 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &d80);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_true(pp.launch[0].shmem <= (uint32_t)d80.max_shared_per_block);
    /* a small item: a thread for two vectors, 32 at least */
    pp = plan_line("layernorm f16 nchw *x16x4x4 axes=1 flags=scale", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.block, 32);
    /* the column family's: 1568-byte channel rows */
    assert_int_equal(plan_line("layernorm f16 nchw *x32x28x28 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90).family,
                     NJ_FAMILY_COLUMN);
    /* the backward stages x and dy: f16 7x7 on sm_90 (150528 B and the floats: gamma, 2 x 32 warps x 49
       partials, 5 x 49), its channels' pairs added by the column sum; not f16 14x14 */
    pp = plan_line_v("layernorm f16 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.launch[0].shmem, 150528 + (4 * (768 + 2 * 32 * 49 + 5 * 49) + 15) / 16 * 16);
    assert_int_equal(pp.unroll, 4); /* x, then dy: 4 vectors of each in flight */
    assert_int_equal(pp.nlaunch, 2);
    assert_int_equal(pp.pgrad, NJ_PGRAD_ROWS);
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    assert_int_equal(pp.workspace_per_row, 768 * 2 * sizeof(float));
    assert_int_equal(pp.align_opds, (1u << NJ_OPD_X) | (1u << NJ_OPD_DY) | (1u << NJ_OPD_DX));
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* x and dy would take 301 KB: x alone staged (P.stage 2), dy read twice, where an image is at most
       64 pixels (a lane's share of a channel row at most 2) */
    pp = plan_line_v("layernorm f32 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.stage, 2);
    assert_int_equal(pp.launch[0].shmem, 150528 + (4 * (768 + 2 * 32 * 49 + 5 * 49) + 15) / 16 * 16);
    assert_int_equal(pp.unroll, 4); /* x alone copied: 4 vectors in flight (NORMJIT_PLAN_NO_IMAGE_COPY4=1: 2) */
    setenv("NORMJIT_PLAN_NO_IMAGE_COPY4", "1", 1);
    assert_int_equal(plan_line("layernorm f32 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90).unroll, 2);
    unsetenv("NORMJIT_PLAN_NO_IMAGE_COPY4");
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.stage, 2);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* on sm_80 (163 KB) f16 7x7's x and dy do not fit together: x alone */
    pp = plan_line("layernorm f16 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &d80);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.stage, 2);
    setenv("NORMJIT_PLAN_NO_IMAGE", "1", 1);
    pp = plan_line("layernorm f16 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_IMAGE");
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
}

/* Images no block holds (planner_image.c), cut into parts of whole vectors, a block each: f32 14x14's x
 * (301 KB) in two, f16 14x14's x and dy in two, f32's x and dy in three (sm_90) or five (sm_80); odd
 * images with scalar copies. Their pixel rows stay under 1024 bytes; everything is the column family's
 * under NORMJIT_PLAN_NO_IMAGE_PARTS=1. */
/* The channels-last backward's clusters: the staged copy moves 16 bytes (P.copy_vec) beside its 8-byte
 * vectors where an image's channel rows are whole copy vectors; not where they are not (60 f16
 * channels), not in the unaligned variant, not under its switch; the check refuses a copy vector no
 * wider than vec or past 16 bytes, or without a stage. The cluster adds its tiles' dgamma/dbeta pairs:
 * one pair a channel an image for the column sum (8 tiles of a 16 x 16 image of 1280 channels), and its
 * blocks take pixel rows to 512 threads and more. */
/* The channels-last backward past 512 lanes (2560 f16 channels in 8-byte vectors: blocks of 640) and its
 * tiles widened to 24 pixels (12 of f32) where they leave dgamma/dbeta pairs; not without gamma/beta, not
 * for pipelined images past 24 MB, not under NORMJIT_PLAN_NO_CL_WIDE_TILES. */
/* GroupNorm NCHW's backward rows of runs (a channel's pixels, gamma constant over each): the cluster
 * family's, a block a row (256 threads where x is 32 KB and less), a cluster of any count to 8 whose
 * pieces are whole runs (sm_90), a pair a run for the column sum; NORMJIT_PLAN_NO_CLUSTER_RUNS=1 and runs
 * under 64 elements: the general family. */
static void test_cluster_bwd_runs(void **state)
{
    (void)state;
    nj_canon v;
    nj_plan_params pp = plan_line_v("groupnorm f16 nchw *x320x64x64 groups=32 act=silu flags=scale,bias",
                                    NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CLUSTER);
    assert_int_equal(pp.split, 1);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.pgrad, NJ_PGRAD_PIECES);
    /* a pair a channel a row: 32 rows (groups) of 10 a batch row, the column sum over the batch */
    assert_int_equal(pp.workspace_per_row, 320 * 2 * sizeof(float));
    const nj_launch *cs = &pp.launch[pp.nlaunch - 1];
    assert_int_equal(cs->lib, NJ_LIB_COLSUM);
    assert_int_equal(cs->arg[NJ_COLSUM_NCOLS][0], 320);
    assert_int_equal(cs->arg[NJ_COLSUM_INNER][0], 1);
    assert_int_equal(cs->arg[NJ_COLSUM_S_OUTER][0], 640);
    assert_int_equal(nj_plan_check(&v, &pp, &dev80), NJ_OK);
    pp = plan_line_v("groupnorm f16 nchw *x1280x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CLUSTER);
    assert_int_equal(pp.block, 256);
    pp = plan_line_v("groupnorm f32 nchw *x960x64x64 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CLUSTER);
    assert_int_equal(pp.split, 5);
    assert_int_equal(pp.launch[0].cluster, 5);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    pp = plan_line_v("groupnorm f32 nchw *x960x64x64 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL); /* 480 KB a row: no cluster on sm_80 */
    pp = plan_line_v("groupnorm f16 nchw *x60x6x6 groups=6 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL); /* runs of 36 */
    setenv("NORMJIT_PLAN_NO_CLUSTER_RUNS", "1", 1);
    pp = plan_line_v("groupnorm f16 nchw *x320x64x64 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    unsetenv("NORMJIT_PLAN_NO_CLUSTER_RUNS");
    assert_int_equal(pp.family, NJ_FAMILY_GENERAL);
    /* InstanceNorm's rows (gamma a row's) keep their 64 KB threshold */
    pp = plan_line_v("instancenorm f32 nchw *x64x32x32 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_not_equal(pp.family, NJ_FAMILY_CLUSTER);
}

static void test_cl_bwd_wide(void **state)
{
    (void)state;
    nj_canon v;
    const char *sdxl = "groupnorm f16 nhwc *x2560x32x32 groups=32 act=silu flags=scale,bias";
    nj_plan_params pp = plan_line_v(sdxl, NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.block, 640);
    assert_int_equal(pp.rows_per_block, 1);
    assert_int_equal(pp.vec, 4);
    assert_true(pp.lag > 0);
    assert_int_equal(pp.tile, 24);
    assert_int_equal(pp.split, 43); /* 1024 pixels in tiles of 24 */
    assert_int_equal(nj_plan_check(&v, &pp, &dev80), NJ_OK);
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.block, 640);
    assert_int_equal(nj_plan_check(&v, &uv, &dev80), NJ_OK);
    setenv("NORMJIT_PLAN_NO_CL_WIDE_TILES", "1", 1);
    pp = plan_line_v(sdxl, NJ_PASS_BACKWARD, &dev80, &v);
    unsetenv("NORMJIT_PLAN_NO_CL_WIDE_TILES");
    assert_int_equal(pp.tile, 7); /* NJ_CL_TILE: 16384 elements */
    pp = plan_line_v("groupnorm f16 nhwc *x2560x32x32 groups=32 act=silu flags=none", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.tile, 7); /* no pairs */
    pp = plan_line_v("groupnorm f32 nhwc *x1280x32x32 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.block, 640);
    assert_int_equal(pp.tile, 13); /* NJ_CL_TILE: 16384 elements are past 12 pixels of 1280 already */
    pp = plan_line_v("groupnorm f16 nhwc *x1280x64x64 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_true(pp.lag > 0);
    assert_int_equal(pp.tile, 16); /* a pipelined image of 31 MB keeps NJ_CL_TILE */
    pp = plan_line_v("groupnorm f16 nhwc *x2560x64x64 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.lag, 0); /* 63 MB an image: four launches, widened */
    assert_true(pp.tile >= 24);
    /* f32 past 1280 channels: two 8-byte vectors a thread (640 lanes of 2560); the forward keeps its 4 */
    pp = plan_line_v("groupnorm f32 nhwc *x2560x16x16 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.vec, 2);
    assert_int_equal(pp.chans, 4);
    assert_int_equal(pp.block, 640);
    assert_int_equal(nj_plan_check(&v, &pp, &dev80), NJ_OK);
    pp = plan_line_v("groupnorm f32 nhwc *x2560x16x16 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &dev80, &v);
    assert_int_not_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    /* nor f16 past 2560 (8 channels a thread spilled) */
    pp = plan_line_v("groupnorm f16 nhwc *x4096x8x8 groups=32 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_not_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    /* the forward keeps its 16-byte vectors and 512 threads */
    pp = plan_line_v(sdxl, NJ_PASS_FORWARD, &dev80, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.vec, 8);
    assert_true(pp.block <= 512);
}

static void test_cl_bwd_cluster(void **state)
{
    (void)state;
    nj_canon v;
    nj_plan_params pp = plan_line_v("groupnorm f16 nhwc *x320x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD,
                                    &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_CHANNELS_LAST);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.copy_vec, 8);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.copy_vec, 0);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    nj_plan_params bad = pp;
    bad.copy_vec = 4;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    bad.copy_vec = 16;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    bad = pp;
    bad.stage = 0;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    pp = plan_line_v("groupnorm f32 nhwc *x64x12x12 groups=8 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.vec, 2);
    assert_int_equal(pp.copy_vec, 4);
    pp = plan_line_v("groupnorm f16 nhwc *x60x16x16 groups=6 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.copy_vec, 0);
    setenv("NORMJIT_PLAN_NO_CL_COPY16", "1", 1);
    pp = plan_line_v("groupnorm f16 nhwc *x320x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    unsetenv("NORMJIT_PLAN_NO_CL_COPY16");
    assert_int_equal(pp.copy_vec, 0);
    pp = plan_line_v("groupnorm f16 nhwc *x1280x16x16 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.split, 8);
    assert_int_equal(pp.launch[0].cluster, 8);
    assert_int_equal(pp.workspace_per_row, 1280 * 2 * sizeof(float));
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    assert_int_equal(pp.launch[1].arg[NJ_COLSUM_NPARTS][0], 0);
    assert_int_equal(pp.launch[1].arg[NJ_COLSUM_NPARTS][1], 1);
    assert_int_equal(pp.launch[1].arg[NJ_COLSUM_INNER][0], 1);
    /* its pixel rows rounded up to 512 threads: 320 lanes of 1280 f16 channels, 2 rows (switched off: 1) */
    assert_int_equal(pp.block, 640);
    assert_int_equal(pp.rows_per_block, 2);
    setenv("NORMJIT_PLAN_NO_CL_ROWS_UP", "1", 1);
    pp = plan_line_v("groupnorm f16 nhwc *x1280x16x16 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    unsetenv("NORMJIT_PLAN_NO_CL_ROWS_UP");
    assert_int_equal(pp.block, 320);
    assert_int_equal(pp.rows_per_block, 1);
    /* not the forward's (two blocks an SM) */
    pp = plan_line_v("groupnorm f16 nhwc *x1280x16x16 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.block, 480);
    /* a small image's forward past 96 KB of x is a cluster of 2 on sm_90 (160 KB of f16), fused on sm_80
       and under NORMJIT_PLAN_NO_CL_SMALL_CLUSTER; 80 KB (f16 *x640x8x8) stays fused */
    pp = plan_line_v("groupnorm f16 nhwc *x1280x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_cluster");
    assert_int_equal(pp.launch[0].cluster, 2);
    assert_int_equal(pp.launch[0].shmem, 33 * 1280 * 2); /* 11 rounds of 3 pixels a tile */
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    nj_device_props d80;
    nj_device_props_default(80, &d80);
    pp = plan_line_v("groupnorm f16 nhwc *x1280x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &d80, &v);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_fused");
    setenv("NORMJIT_PLAN_NO_CL_SMALL_CLUSTER", "1", 1);
    pp = plan_line_v("groupnorm f16 nhwc *x1280x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    unsetenv("NORMJIT_PLAN_NO_CL_SMALL_CLUSTER");
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_fused");
    pp = plan_line_v("groupnorm f16 nhwc *x640x8x8 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_string_equal(pp.launch[0].kernel, "nj_fwd_cl_fused");
}

static void test_image_parts(void **state)
{
    (void)state;
    nj_device_props d80;
    nj_device_props_default(80, &d80);
    nj_canon v;
    /* f32 forward: parts of 100 and 96 pixels, 4 floats a vector (784-byte rows: 16-byte aligned);
       the floats: gamma/beta 768, 10 groups x 100 partials, 3 x 100 */
    nj_plan_params pp = plan_line_v("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.tile, 100);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.launch[0].row_mult, 2);
    assert_int_equal(pp.launch[0].shmem, 384 * 100 * 4 + 4 * (768 + 10 * 100 + 3 * 100));
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.vec, 1);
    assert_int_equal(uv.tile, 100);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* the check refuses parts of split vectors, a part as big as the image, a grid that misses parts */
    nj_plan_params bad = pp;
    bad.tile = 98;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    bad.tile = 196;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    bad = pp;
    bad.launch[0].row_mult = 1;
    assert_int_equal(nj_plan_check(&v, &bad, &dev90), NJ_ERR_INTERNAL);
    /* f16 backward: x and dy of 100 pixels (8-byte vectors: a channel row is 392 bytes), the floats
       gamma, 2 x 32 warps x 100 partials, 5 x 100; the parts' pairs [image][part][channel][2] */
    pp = plan_line_v("layernorm f16 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.tile, 100);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.launch[0].row_mult, 2);
    assert_int_equal(pp.launch[0].shmem, 2 * 384 * 100 * 2 + 4 * (384 + 2 * 32 * 100 + 5 * 100));
    assert_int_equal(pp.workspace_per_row, 2 * 384 * 2 * sizeof(float));
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    assert_int_equal(pp.launch[1].arg[NJ_COLSUM_NPARTS][1], 2);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    /* f32 backward: three parts of 68 (the last 60) on sm_90, five of 40 on sm_80 */
    pp = plan_line("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.tile, 68);
    assert_int_equal(pp.launch[0].row_mult, 3);
    assert_true(pp.launch[0].shmem <= (uint32_t)dev90.max_shared_per_block);
    pp = plan_line("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &d80);
    assert_int_equal(pp.tile, 40);
    assert_int_equal(pp.launch[0].row_mult, 5);
    assert_true(pp.launch[0].shmem <= (uint32_t)d80.max_shared_per_block);
    /* 195 pixels: f16 vectors would cross pixel rows, so a scalar copy; parts of 98 and 97 */
    pp = plan_line("layernorm f16 nchw *x400x13x15 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_IMAGE);
    assert_int_equal(pp.vec, 1);
    assert_int_equal(pp.tile, 98);
    /* the switch: the column family, as before */
    setenv("NORMJIT_PLAN_NO_IMAGE_PARTS", "1", 1);
    nj_family fam_f = plan_line("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_FORWARD, &dev90).family;
    nj_family fam_b = plan_line("layernorm f16 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90).family;
    unsetenv("NORMJIT_PLAN_NO_IMAGE_PARTS");
    assert_int_equal(fam_f, NJ_FAMILY_COLUMN);
    assert_int_equal(fam_b, NJ_FAMILY_COLUMN);
    /* whole images keep P.tile 0 */
    assert_int_equal(plan_line("layernorm f16 nchw *x768x7x7 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90).tile, 0);
}

/* A column backward whose staged tile of x and dy fits two blocks an SM but not three (f32 LayerNorm over
 * the C of NCHW 384x14x14: 384 x 32 x 8 = 98304 B) stages it in blocks of 512 threads; sm_80's shared
 * memory holds two such blocks only without the tile, so it keeps 256 threads and two reads of x and dy;
 * so does everything under NORMJIT_PLAN_NO_COL_WIDE=1. */
static void test_column_bwd_wide_stage(void **state)
{
    (void)state;
    /* these images are the image family's, in parts (test_image_parts) */
    setenv("NORMJIT_PLAN_NO_IMAGE_PARTS", "1", 1);
    nj_canon v;
    nj_plan_params pp = plan_line_v("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_COLUMN);
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.tile, 32);
    assert_int_equal(pp.launch[0].block[0], 512);
    assert_int_equal(pp.launch[0].shmem, 384 * 32 * 8);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    /* a tile that fits three blocks keeps 256 threads (f32 192x28x28: 49152 B) */
    pp = plan_line("layernorm f32 nchw *x192x28x28 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.block, 256);
    assert_int_equal(pp.stage, 1);
    nj_device_props d80;
    nj_device_props_default(80, &d80);
    pp = plan_line("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &d80);
    assert_int_equal(pp.block, 256);
    assert_int_equal(pp.stage, 0);
    /* the switch gpu-check's A/B step uses restores the unstaged plan */
    setenv("NORMJIT_PLAN_NO_COL_WIDE", "1", 1);
    pp = plan_line("layernorm f32 nchw *x384x14x14 axes=1 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_COL_WIDE");
    unsetenv("NORMJIT_PLAN_NO_IMAGE_PARTS");
    assert_int_equal(pp.block, 256);
    assert_int_equal(pp.stage, 0);
}

/* A slots backward that does not fetch ahead (f32 rows of 10000: 20 elements a thread) stages f32 gamma
 * too, once a block for its rows (its two walks read gamma twice a row); not below 256 threads, and not
 * under NORMJIT_PLAN_NO_ROW_STAGE=1. */
static void test_row_bwd_gamma_stage(void **state)
{
    (void)state;
    nj_canon v;
    nj_plan_params pp = plan_line_v("layernorm f32 *x10000 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.pgrad, NJ_PGRAD_SLOTS);
    assert_int_equal(pp.persist, 0);
    assert_int_equal(pp.stage, 1);
    /* gamma alone (beta only under an activation), then the slot pair's exchange: 2 streams of 5
       chunks of 4 floats a thread of 512 */
    assert_int_equal(pp.block, 512);
    assert_int_equal(pp.launch[0].cluster, 2);
    assert_int_equal(pp.launch[0].shmem, 10000 * 4 + 2 * 5 * 4 * 512 * 4);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    pp = plan_line_v("layernorm f32 *x10000 flags=scale,bias", NJ_PASS_BACKWARD, &dev80, &v);
    assert_int_equal(pp.launch[0].shmem, 10000 * 4);
    /* beta too under an activation: 80000 B, past the 44 KB a table may take */
    pp = plan_line("layernorm f32 *x10000 flags=scale,bias act=silu", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.stage, 0);
    pp = plan_line("layernorm f32 *x5000 flags=scale,bias act=silu", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.launch[0].shmem, 2 * 5000 * 4 + 2 * 3 * 4 * 512 * 4);
    pp = plan_line("layernorm f32 *x768 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.stage, 0);
    setenv("NORMJIT_PLAN_NO_ROW_STAGE", "1", 1);
    pp = plan_line("layernorm f32 *x10000 flags=scale,bias", NJ_PASS_BACKWARD, &dev90);
    unsetenv("NORMJIT_PLAN_NO_ROW_STAGE");
    assert_int_equal(pp.stage, 0);
    assert_int_equal(pp.launch[0].shmem, 2 * 5 * 4 * 512 * 4);
}

/* A streamed block-per-row forward keeps its row in shared memory where it fits (P.stage 2): 1024
 * threads, the row's bytes (floats with the residual); the unaligned variant streams it twice as
 * before; rows held in registers, and rows past 200 KB, are not staged. */
static void test_row_xstage(void **state)
{
    (void)state;
    nj_canon v;
    nj_plan_params pp = plan_line_v("instancenorm f32 ncdhw *x256x32x32x32 flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.stage, 2);
    assert_int_equal(pp.block, 1024);
    assert_int_equal(pp.regs_cache, 0);
    assert_int_equal(pp.launch[0].shmem, 32768 * 4);
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.stage, 0);
    assert_int_equal(uv.launch[0].shmem, 0);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    pp = plan_line("layernorm bf16 *x20000 flags=scale,bias,residual,resout", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.stage, 2);
    assert_int_equal(pp.launch[0].shmem, 20000 * 4);
    /* past 200 KB: streamed on sm_80, a cluster's on sm_90 (test_cluster_plan) */
    pp = plan_line("layernorm f32 *x100000 flags=scale,bias", NJ_PASS_FORWARD, &dev80);
    assert_int_equal(pp.family, NJ_FAMILY_ROW);
    assert_int_equal(pp.stage, 0);
    assert_int_equal(pp.launch[0].shmem, 0);
    pp = plan_line("layernorm bf16 *x4096 flags=scale,bias", NJ_PASS_FORWARD, &dev90);
    assert_int_not_equal(pp.stage, 2);
    /* a stage 2 the plan check refuses outside a streamed row */
    pp = plan_line_v("layernorm bf16 *x4096 flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    pp.stage = 2;
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_ERR_INTERNAL);
}

/* The tile family (planner_tile.c): rows of at most 64 bytes of x (or up to 512 that are not whole
 * sectors), a block per tile of 16 KB of them (at most 1024 rows) forward, a fixed grid walking tiles of
 * x and dy backward; other rows stay the row family's. */
static void test_tile_plan(void **state)
{
    (void)state;
    nj_canon v;
    nj_plan_params pp = plan_line_v("layernorm f32 *x10 flags=scale,bias,stats", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_TILE);
    assert_int_equal(pp.vec, 2);
    /* 16384 / 40 = 409 rows, down to 408: tiles of whole sectors (16320 bytes; 409 under the switch) */
    assert_int_equal(pp.rows_per_block, 408);
    assert_int_equal(pp.stage, 1);
    assert_int_equal(pp.launch[0].row_div, 408);
    assert_int_equal(pp.launch[0].shmem, (3 * 408 + 3) / 4 * 16 + 408 * 40);
    uint32_t g[3];
    assert_int_equal(nj_launch_grid(&pp.launch[0], 10000000, 0, g), NJ_OK);
    assert_int_equal((uint64_t)g[0] * g[1], (10000000 + 407) / 408);
    setenv("NORMJIT_PLAN_NO_TILE_SECTORS", "1", 1);
    assert_int_equal(plan_line("layernorm f32 *x10 flags=scale,bias,stats", NJ_PASS_FORWARD, &dev90).rows_per_block, 409);
    unsetenv("NORMJIT_PLAN_NO_TILE_SECTORS");
    /* f16 rows of 10 (20 bytes): 819 rows, down to 816 (8 rows make 5 sectors) */
    assert_int_equal(plan_line("rmsnorm f16 *x10 flags=scale", NJ_PASS_FORWARD, &dev90).rows_per_block, 816);
    nj_plan_params uv;
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(uv.vec, 1);
    assert_int_equal(uv.launch[0].shmem, pp.launch[0].shmem);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* rows of two elements: 1024 rows a tile, whose floats stay within 48 KB */
    pp = plan_line("rmsnorm f16 *x2 flags=scale", NJ_PASS_FORWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_TILE);
    assert_int_equal(pp.rows_per_block, 1024);
    assert_true(pp.launch[0].shmem <= 48 * 1024);
    /* 16-bit rows of 32 (64 bytes) are tiles; of 48 (whole sectors), rows; up to 512 bytes that are not
       whole sectors tiles again (f32 rows of 100: 40 rows a tile; bf16 of 33), not past 512 (f32 of
       129) nor under NORMJIT_PLAN_NO_TILE_WIDE=1 */
    assert_int_equal(plan_line("rmsnorm bf16 *x32 flags=scale", NJ_PASS_FORWARD, &dev90).family, NJ_FAMILY_TILE);
    assert_int_equal(plan_line("rmsnorm bf16 *x48 flags=scale", NJ_PASS_FORWARD, &dev90).family, NJ_FAMILY_ROW);
    assert_int_equal(plan_line("rmsnorm bf16 *x33 flags=scale", NJ_PASS_FORWARD, &dev90).family, NJ_FAMILY_TILE);
    pp = plan_line_v("layernorm f32 *x100 flags=scale,bias", NJ_PASS_FORWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_TILE);
    assert_int_equal(pp.vec, 4);
    assert_int_equal(pp.rows_per_block, 40);
    assert_int_equal(nj_plan_check(&v, &pp, &dev90), NJ_OK);
    assert_int_equal(plan_line("layernorm f32 *x100 flags=scale,bias", NJ_PASS_BACKWARD, &dev90).family, NJ_FAMILY_TILE);
    assert_int_equal(plan_line("layernorm f32 *x128 flags=scale,bias", NJ_PASS_FORWARD, &dev90).family, NJ_FAMILY_ROW);
    assert_int_equal(plan_line("layernorm f32 *x129 flags=scale,bias", NJ_PASS_FORWARD, &dev90).family, NJ_FAMILY_ROW);
    setenv("NORMJIT_PLAN_NO_TILE_WIDE", "1", 1);
    nj_family narrow = plan_line("layernorm f32 *x100 flags=scale,bias", NJ_PASS_FORWARD, &dev90).family;
    unsetenv("NORMJIT_PLAN_NO_TILE_WIDE");
    assert_int_equal(narrow, NJ_FAMILY_ROW);
    /* the backward: a fixed grid of 4 blocks an SM walks the tiles (x and dy staged), a partial row of
       dgamma/dbeta a block added by the column sum */
    pp = plan_line_v("layernorm f32 *x10 flags=scale,bias", NJ_PASS_BACKWARD, &dev90, &v);
    assert_int_equal(pp.family, NJ_FAMILY_TILE);
    assert_int_equal(pp.rows_per_block, 204); /* 16384 / (10 x 8) */
    assert_int_equal(pp.launch[0].grid_x, 132 * 4);
    assert_int_equal(pp.pgrad, NJ_PGRAD_SLOTS);
    assert_int_equal(pp.pgrad_parts, 132 * 4);
    assert_int_equal(pp.launch[1].lib, NJ_LIB_COLSUM);
    assert_int_equal(pp.workspace_fixed, 132 * 4 * 10 * 2 * sizeof(float));
    assert_int_equal(plan_line("rmsnorm f32 *x10 flags=scale", NJ_PASS_BACKWARD, &dev90).workspace_fixed,
                     132 * 4 * 10 * sizeof(float)); /* no beta rows without a bias */
    assert_int_equal(pp.align_opds, (1u << NJ_OPD_X) | (1u << NJ_OPD_DY) | (1u << NJ_OPD_DX));
    assert_true(4 * (pp.launch[0].shmem + 1024) <= (uint32_t)dev90.max_shared_per_block + 1024);
    nj_plan_unaligned(&pp, &uv);
    assert_int_equal(nj_plan_check(&v, &uv, &dev90), NJ_OK);
    /* without gamma/beta: no slots to add */
    pp = plan_line("rmsnorm f16 *x12 flags=none", NJ_PASS_BACKWARD, &dev90);
    assert_int_equal(pp.family, NJ_FAMILY_TILE);
    assert_int_equal(pp.nlaunch, 1);
    assert_int_equal(pp.pgrad, NJ_PGRAD_NONE);
}

/* The family registry: every planned family has a name, both planners and a template for each pass its
 * test accepts (the image family plans forwards only), names are distinct, the library family is never
 * picked, and a problem's plan names the family the registry picked for it (the first whose test
 * applies: GENERAL last, accepting everything). */
static void test_family_registry(void **state)
{
    (void)state;
    int planned = 0;
    for (int32_t id = 1; id < NJ_FAMILY_COUNT; id++) {
        const nj_family_info *f = nj_family_get(id);
        assert_non_null(f);
        assert_int_equal(f->id, id);
        for (int32_t j = 1; j < id; j++) assert_string_not_equal(f->name, nj_family_name(j));
        if (!nj_family_planned(id)) {
            assert_int_equal(id, NJ_FAMILY_LIBRARY);
            continue;
        }
        planned++;
        /* a family may plan one pass only (the cluster family: forwards): it names no template for the
         * other, and its test refuses that pass (checked below) */
        assert_true(f->template_name[0] || f->template_name[1]);
        assert_non_null(f->plan[0]);
        assert_non_null(f->plan[1]);
    }
    assert_int_equal(planned, NJ_FAMILY_COUNT - 2); /* all but NONE and LIBRARY */
    assert_null(nj_family_get(0));
    assert_null(nj_family_get(NJ_FAMILY_COUNT));
    assert_string_equal(nj_family_name(NJ_FAMILY_COUNT), "unknown");
    static const char *const lines[] = {"layernorm f16 8x4096 flags=scale,bias", "batchnorm f32 nhwc 4x64x32x32 flags=scale,bias",
                                        "groupnorm f16 nhwc 2x64x16x16 groups=8 flags=scale,bias",
                                        "layernorm f32 2x6x5x4 axes=0,2",
                                        "layernorm f16 nchw 8x768x7x7 axes=1 flags=scale,bias",
                                        "instancenorm f32 ncdhw 2x4x64x64x64 flags=scale,bias"};
    static const int32_t want[][2] = {{NJ_FAMILY_ROW, NJ_FAMILY_ROW},
                                      {NJ_FAMILY_COLUMN, NJ_FAMILY_COLUMN},
                                      {NJ_FAMILY_CHANNELS_LAST, NJ_FAMILY_CHANNELS_LAST},
                                      {NJ_FAMILY_GENERAL, NJ_FAMILY_GENERAL},
                                      {NJ_FAMILY_IMAGE, NJ_FAMILY_IMAGE},
                                      {NJ_FAMILY_CLUSTER, NJ_FAMILY_CLUSTER}};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
        nj_problem_desc p;
        nj_canon c, v;
        assert_int_equal(nj_problem_from_text(lines[i], 4, &p), NJ_OK);
        assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
        for (int pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
            nj_canon_for_pass(&c, (nj_pass)pass, &v);
            const nj_family_info *f = nj_family_pick(&v, (nj_pass)pass, &dev90);
            assert_non_null(f);
            assert_int_equal(f->id, want[i][pass == NJ_PASS_BACKWARD]);
            assert_non_null(f->template_name[pass == NJ_PASS_BACKWARD]);
            nj_plan_params pp;
            assert_int_equal(nj_plan_pass(&v, (nj_pass)pass, &dev90, &pp), NJ_OK);
            assert_int_equal(pp.family, f->id);
            assert_string_equal(pp.template_name, f->template_name[pass == NJ_PASS_BACKWARD]);
        }
    }
}

/* nj_pass_plan_make: the pass's view planned once, the unaligned variant derived from the main plan as
 * nj_plan_variant plans it, and a pass that cannot be planned kept with its reason. */
static void test_pass_plan(void **state)
{
    (void)state;
    nj_problem_desc p;
    nj_canon c, v;
    assert_int_equal(nj_problem_from_text("layernorm f16 8x4096 flags=scale,bias,residual,resout act=silu", 4, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    nj_pass_plan *pl = malloc(sizeof *pl);
    assert_non_null(pl);
    for (int pass = NJ_PASS_FORWARD; pass <= NJ_PASS_BACKWARD; pass <<= 1) {
        assert_int_equal(nj_pass_plan_make(&c, (nj_pass)pass, &dev90, pl), NJ_OK);
        nj_canon_for_pass(&c, (nj_pass)pass, &v);
        assert_memory_equal(&pl->view, &v, sizeof v);
        for (int var = 0; var < NJ_VARIANT_COUNT; var++) {
            nj_plan_params want;
            assert_int_equal(nj_plan_variant(&v, (nj_pass)pass, (nj_variant)var, &dev90, &want), NJ_OK);
            nj_plan_params got;
            nj_pass_plan_variant(pl, (nj_variant)var, &got);
            assert_memory_equal(&got, &want, sizeof want);
        }
        assert_true(pl->main.align_opds != 0); /* a vectorized row: the variants differ */
        nj_plan_params un;
        nj_pass_plan_variant(pl, NJ_VARIANT_UNALIGNED, &un);
        assert_int_equal(un.vec, 1);
        assert_int_equal(nj_pass_plan_status(pl), NJ_OK);
    }
    /* gamma over more than 2^31 - 1 elements: the backward is refused, the forward is not */
    assert_int_equal(nj_problem_from_text("layernorm f32 2x2200000000 flags=scale", 4, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_pass_plan_make(&c, NJ_PASS_FORWARD, &dev90, pl), NJ_OK);
    assert_int_equal(nj_pass_plan_make(&c, NJ_PASS_BACKWARD, &dev90, pl), NJ_ERR_UNSUPPORTED);
    assert_int_equal(pl->status, NJ_ERR_UNSUPPORTED);
    nj_error_clear();
    assert_int_equal(nj_pass_plan_status(pl), NJ_ERR_UNSUPPORTED);
    assert_non_null(strstr(nj_last_error(), "gamma elements"));
    free(pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_props),      cmocka_unit_test(test_row_short),
        cmocka_unit_test(test_row_vec_width), cmocka_unit_test(test_unaligned_variant),     cmocka_unit_test(test_row_long),
        cmocka_unit_test(test_column_general),    cmocka_unit_test(test_plan_fail),
        cmocka_unit_test(test_plan_text),         cmocka_unit_test(test_launch_grid), cmocka_unit_test(test_row_persist), cmocka_unit_test(test_image_plan), cmocka_unit_test(test_image_parts), cmocka_unit_test(test_cl_bwd_cluster), cmocka_unit_test(test_cl_bwd_wide), cmocka_unit_test(test_cluster_bwd_runs), cmocka_unit_test(test_row_backward_two_chunks), cmocka_unit_test(test_row_backward_groups_wide), cmocka_unit_test(test_reverse), cmocka_unit_test(test_general_few), cmocka_unit_test(test_column_pipe),
        cmocka_unit_test(test_cluster_plan),
        cmocka_unit_test(test_cluster_bwd_block), cmocka_unit_test(test_cluster_bwd_slots),
        cmocka_unit_test(test_cluster_fwd_slots),
        cmocka_unit_test(test_column_bwd_wide_stage), cmocka_unit_test(test_row_bwd_gamma_stage), cmocka_unit_test(test_row_xstage), cmocka_unit_test(test_tile_plan), cmocka_unit_test(test_kernel_count),
        cmocka_unit_test(test_launches_round_trip), cmocka_unit_test(test_launches_parse_fail), cmocka_unit_test(test_presets),
        cmocka_unit_test(test_channels_last),     cmocka_unit_test(test_row_backward_slots), cmocka_unit_test(test_family_registry), cmocka_unit_test(test_pass_plan),
    };
    return cmocka_run_group_tests_name("planner", tests, setup, NULL);
}
