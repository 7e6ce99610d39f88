/* Template engine, template sets, the codegen environment, and rendered forward kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include "codegen.h"
#include "compile.h"
#include "kernel_abi.h"
#include "planner_canon.h"
#include "problem_gen.h"

/* The device side declares the same struct (templates/prelude.cuh, with its own static_asserts). */
_Static_assert(sizeof(nj_kargs) == 312, "nj_kargs size changed: update templates/prelude.cuh");
_Static_assert(offsetof(nj_kargs, workspace) == 96, "nj_kargs.workspace offset");
_Static_assert(offsetof(nj_kargs, rows) == 104, "nj_kargs.rows offset");
_Static_assert(offsetof(nj_kargs, bstride) == 112, "nj_kargs.bstride offset");
_Static_assert(offsetof(nj_kargs, eps) == 176, "nj_kargs.eps offset");
_Static_assert(offsetof(nj_kargs, lib) == 184, "nj_kargs.lib offset");

static char *render_ok(const char *tpl, const char *env)
{
    char *out = NULL;
    nj_status s = nj_render_string("t.cu", tpl, env, &out);
    if (s != NJ_OK) fprintf(stderr, "render failed: %s\n", nj_last_error());
    assert_int_equal(s, NJ_OK);
    assert_non_null(out);
    return out;
}

static void expect_render(const char *tpl, const char *env, const char *want)
{
    char *out = render_ok(tpl, env);
    assert_string_equal(out, want);
    free(out);
}

/* Renders a failing template; the detail must start with `prefix` and contain `part`. */
static void expect_fail(const char *tpl, const char *env, const char *prefix, const char *part)
{
    char *out = (char *)1;
    nj_status s = nj_render_string("t.cu", tpl, env, &out);
    assert_int_equal(s, NJ_ERR_TEMPLATE);
    assert_null(out);
    const char *e = nj_last_error();
    if (strncmp(e, prefix, strlen(prefix)) != 0 || !strstr(e, part)) fprintf(stderr, "detail: %s\n", e);
    assert_int_equal(strncmp(e, prefix, strlen(prefix)), 0);
    assert_non_null(strstr(e, part));
}

static void test_expressions(void **state)
{
    (void)state;
    expect_render("a{{ 1 + 2 }}b", NULL, "a3b");
    expect_render("{{ P.n * 2 }} {{ P.n / 2 }} {{ P.n / 4 }}", "{n = 3}", "6 1.5 0.75");
    expect_render("{{ 2.0 }} {{ 4 // 2 }} {{ -7 }} {{ 1e20 }}", NULL, "2 2 -7 1e+20");
    expect_render("{{ 0.1 }} {{ 1/3 }}", NULL, "0.1 0.3333333333333333");
    expect_render("{{ 'x' .. P.s }} {{ true }}", "{s = 'yz'}", "xyz true");
    expect_render("{{ f32(1.5) }} {{ f32(2) }} {{ f32(-0.25) }} {{ f32(1e-8) }}", NULL, "1.5f 2.0f -0.25f 1e-08f");
    expect_render("{{ ceil_div(10, 4) }} {{ join({1, 2, 3}) }}", NULL, "3 1, 2, 3");
    expect_render("quote \" back \\ tab\there", NULL, "quote \" back \\ tab\there");
}

static void test_statements_and_lines(void **state)
{
    (void)state;
    /* tag-only lines leave nothing behind; inline tags keep their line */
    expect_render("a\n{% for i = 1, 3 do %}\n  v{{ i }};\n{% end %}\nb\n", NULL, "a\n  v1;\n  v2;\n  v3;\nb\n");
    expect_render("  {# a comment #}  \nx {# inline #}y\n", NULL, "x y\n");
    expect_render("{% if P.on then %}on{% else %}off{% end %}\n", "{on = false}", "off\n");
    expect_render("{%\n local k = 5\n%}\n{{ k }}", NULL, "5");
    expect_render("no newline at end {% local z = 1 %}", NULL, "no newline at end ");
    expect_render("", NULL, "");
}

static void test_errors_fail(void **state)
{
    (void)state;
    /* a missing P field used as a number, on line 3 */
    expect_fail("line1\nline2\nx = {{ P.missing * 4 }};\n", "{}", "t.cu:3:", "nil");
    /* a Lua syntax error inside a statement on line 2 */
    expect_fail("ok\n{% if then %}\n", NULL, "t.cu:2:", "");
    /* a runtime error() raised by the template on line 4 */
    expect_fail("1\n2\n3\n{% error('boom') %}\n", NULL, "t.cu:4:", "boom");
    /* outputting nil, an unterminated tag, f32 of a non-number */
    expect_fail("\n{{ P.nothing }}", "{}", "t.cu:2:", "nil");
    expect_fail("a\nb {{ 1 + \n", NULL, "t.cu:2:", "unterminated");
    expect_fail("{{ f32('x') }}", NULL, "t.cu:1:", "f32");
    /* a bad environment and a missing include */
    expect_fail("x", "{ = }", "env:", "");
    expect_fail("x", "42", "env", "not a table");
    expect_fail("\n{% include('no_such_template.cu') %}", NULL, "t.cu:2:", "no_such_template.cu");
}

static void test_sandbox(void **state)
{
    (void)state;
    expect_render("{{ tostring(io) }} {{ tostring(os) }} {{ tostring(require) }} {{ tostring(load) }}", NULL,
                  "nil nil nil nil");
    expect_render("{{ tostring(loadfile) }} {{ tostring(dofile) }} {{ tostring(collectgarbage) }}", NULL,
                  "nil nil nil");
    expect_render("{{ tostring(debug) }} {{ tostring(print) }} {{ tostring(string.dump) }} {{ tostring(package) }}",
                  NULL, "nil nil nil nil");
    expect_render("{{ type(string.format) }} {{ type(table.concat) }} {{ math.floor(2.5) }}", NULL,
                  "function function 2");
    /* runaway templates end with an error instead of hanging or eating memory */
    expect_fail("\n{% while true do end %}", NULL, "t.cu:2:", "too long");
    expect_fail("{% local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end %}", NULL, "", "memory");
}

/* ---- template sets: embedded and NORMJIT_TEMPLATE_DIR */

static void write_file(const char *dir, const char *name, const char *text, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *slash = strrchr(path, '/');
    if (slash && slash > path + strlen(dir)) {
        *slash = 0;
        mkdir(path, 0700);
        *slash = '/';
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

static char tmpdir[256];

static int make_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nj_test_codegen_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    unsetenv("NORMJIT_TEMPLATE_DIR");
    return system(cmd) == 0 ? 0 : -1;
}

static void test_embedded_set(void **state)
{
    (void)state;
    unsetenv("NORMJIT_TEMPLATE_DIR");
    assert_true(nj_embedded_template_count >= 3);
    const char *text;
    size_t len;
    assert_int_equal(nj_template_get("prelude.cuh", &text, &len), NJ_OK);
    assert_int_equal(len, strlen(text));
    assert_non_null(strstr(text, "nj_kargs"));
    assert_int_equal(nj_template_get("missing.cu", &text, &len), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "missing.cu"));
    const char *h = nj_template_set_hash();
    assert_int_equal(strlen(h), 32);
    assert_ptr_equal(h, nj_template_set_hash()); /* computed once */
}

static void test_template_dir(void **state)
{
    (void)state;
    unsetenv("NORMJIT_TEMPLATE_DIR");
    char embedded_hash[33];
    snprintf(embedded_hash, sizeof embedded_hash, "%s", nj_template_set_hash());
    /* a copy of the embedded set, read from a folder, hashes the same */
    for (size_t i = 0; i < nj_embedded_template_count; i++)
        write_file(tmpdir, nj_embedded_templates[i].name, nj_embedded_templates[i].text, nj_embedded_templates[i].len);
    setenv("NORMJIT_TEMPLATE_DIR", tmpdir, 1);
    assert_string_equal(nj_template_set_hash(), embedded_hash);
    /* an edit changes the hash and what nj_template_get returns */
    const char *marker = "/* edited */\n";
    write_file(tmpdir, "prelude.cuh", marker, strlen(marker));
    char edited_hash[33];
    snprintf(edited_hash, sizeof edited_hash, "%s", nj_template_set_hash());
    assert_string_not_equal(edited_hash, embedded_hash);
    const char *text;
    size_t len;
    assert_int_equal(nj_template_get("prelude.cuh", &text, &len), NJ_OK);
    assert_int_equal(len, strlen(marker));
    assert_memory_equal(text, marker, len);
    /* a renamed file with the same content changes the hash too */
    write_file(tmpdir, "zz_extra.cu", "", 0);
    assert_string_not_equal(nj_template_set_hash(), edited_hash);
    /* includes are resolved in the folder, errors name the included file and its line */
    const char *inc = "inc {{ P.v }}\n{{ P.v + nil }}\n";
    write_file(tmpdir, "inc.cuh", inc, strlen(inc));
    char *out = NULL;
    assert_int_equal(nj_render_string("main.cu", "{% include('inc.cuh') %}", "{v = 1}", &out), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "inc.cuh:2:"));
    write_file(tmpdir, "inc.cuh", "inc {{ P.v }}\n", 14);
    out = render_ok("<{% include('inc.cuh') %}>\n{% include('inc.cuh') %}\nend", "{v = 7}");
    assert_string_equal(out, "<inc 7\n>\ninc 7\nend");
    free(out);
    assert_int_equal(nj_template_get("../etc/passwd", &text, &len), NJ_ERR_TEMPLATE);
    /* an include cycle is an error, not a crash */
    write_file(tmpdir, "loop.cuh", "{% include('loop.cuh') %}", 25);
    assert_int_equal(nj_render_string("main.cu", "{% include('loop.cuh') %}", NULL, &out), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "nesting"));
    unsetenv("NORMJIT_TEMPLATE_DIR");
    assert_string_equal(nj_template_set_hash(), embedded_hash);
}


/* ---- forward kernels rendered from plans */

/* A canonical problem under a name, for the render matrix. */
typedef struct fwd_case {
    const char *name;
    nj_canon c;
} fwd_case;

static int nfwd;
static fwd_case fwd[48];

static nj_canon *add_case(const char *name)
{
    fwd[nfwd].name = name;
    return &fwd[nfwd++].c;
}

static void build_cases(void)
{
    const uint32_t ln = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS;
    nfwd = 0;
    tc_row(add_case("row_warp_f32_vec4"), NJ_F32, 768, ln);
    tc_row(add_case("row_warp_f16_rms_f32_gamma"), NJ_F16, 1024, NJ_FLAG_SCALE);
    tc_row(add_case("row_warp_bf16_odd"), NJ_BF16, 333, ln | NJ_FLAG_SAVE_STATS);
    nj_canon *c = add_case("row_warp_res_resout_stats_gelu");
    tc_begin(c, NJ_F16, NJ_F16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS,
             NJ_ACT_GELU_TANH, 64);
    tc_axis(c, 512, true, true);
    tc_finish(c);
    tc_row(add_case("row_group2_f32_10_stats"), NJ_F32, 10, ln | NJ_FLAG_SAVE_STATS); /* now a tile of rows */
    /* the tile family: rows of at most 64 bytes, the residual staged as floats; an odd row copied an
       element at a time */
    c = add_case("tile_bf16_24_res_resout_gelu");
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_TANH, 64);
    tc_axis(c, 24, true, true);
    tc_finish(c);
    tc_row(add_case("tile_rms_f16_7"), NJ_F16, 7, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS);
    tc_row(add_case("row_group8_f32_96"), NJ_F32, 96, ln); /* 8 lanes a row (rows of 100, not whole sectors: tiles) */
    c = add_case("row_group8_bf16_res_resout_gelu"); /* 64 bf16: 8 lanes a row, 16 rows a block */
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT, NJ_ACT_GELU_TANH, 64);
    tc_axis(c, 64, true, true);
    tc_finish(c);
    tc_row(add_case("row_block_f32_cached"), NJ_F32, 8192, ln | NJ_FLAG_SAVE_STATS);
    tc_row(add_case("row_block_f16_cached_1024"), NJ_F16, 16384, ln);
    /* 1024 threads of 8 elements: gamma's and beta's lines prefetched before the reduction */
    tc_row(add_case("row_block_bf16_params_prefetch_1024"), NJ_BF16, 8192, ln | NJ_FLAG_SAVE_STATS);
    tc_row(add_case("row_block_odd_cached"), NJ_F32, 4097, NJ_FLAG_CENTER);
    /* persistent blocks (P.persist): the next row's words fetched, gamma/beta held as words */
    c = add_case("row_persist_bf16_4096_stats");
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_NONE, 64);
    tc_axis(c, 4096, true, true);
    tc_finish(c);
    c = add_case("row_persist_bf16_5120_640"); /* 640 threads, two blocks an SM: 48 registers */
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 64);
    tc_axis(c, 5120, true, true);
    tc_finish(c);
    /* f32 gamma/beta beside bf16 x: staged in shared memory (P.stage) */
    tc_row(add_case("row_persist_bf16_4096_f32_params_staged"), NJ_BF16, 4096, ln | NJ_FLAG_SAVE_STATS);
    c = add_case("row_persist_f16_rms_3000_partial"); /* 375 vectors over 384 threads */
    tc_begin(c, NJ_F16, NJ_F16, NJ_FLAG_SCALE, NJ_ACT_NONE, 64);
    tc_axis(c, 3000, true, true);
    tc_finish(c);
    c = add_case("row_persist_f16_2048_gelu_erf_stats");
    tc_begin(c, NJ_F16, NJ_F16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 64);
    tc_axis(c, 2048, true, true);
    tc_finish(c);
    /* two vectors a thread: 16-bit rows of 8192 at 512 threads (a 64-register budget), f32 rows */
    c = add_case("row_persist_wide_f16_8192_gelu_erf_stats");
    tc_begin(c, NJ_F16, NJ_F16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 64);
    tc_axis(c, 8192, true, true);
    tc_finish(c);
    c = add_case("row_persist_wide_bf16_6144_384"); /* 384 threads of two vectors, 85 registers */
    tc_begin(c, NJ_BF16, NJ_BF16, ln, NJ_ACT_NONE, 64);
    tc_axis(c, 6144, true, true);
    tc_finish(c);
    tc_row(add_case("row_persist_f32_4096_stats"), NJ_F32, 4096, ln | NJ_FLAG_SAVE_STATS);
    c = add_case("row_persist_one_f32_10000_gelu_stats"); /* one block an SM, gamma/beta staged */
    tc_begin(c, NJ_F32, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 64);
    tc_axis(c, 10000, true, true);
    tc_finish(c);
    c = add_case("row_persist_f32_2048_gelu_tanh");
    tc_begin(c, NJ_F32, NJ_F32, ln, NJ_ACT_GELU_TANH, 64);
    tc_axis(c, 2048, true, true);
    tc_finish(c);
    tc_row(add_case("row_stream_f32"), NJ_F32, 1 << 20, ln | NJ_FLAG_SAVE_STATS);
    /* streamed rows kept in shared memory (P.stage 2): 1024 threads */
    tc_row(add_case("row_stream_staged_f32_20000"), NJ_F32, 20000, ln | NJ_FLAG_SAVE_STATS);
    c = add_case("row_stream_staged_bf16_res_gelu");
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT, NJ_ACT_GELU_ERF, 4);
    tc_axis(c, 40000, true, true);
    tc_finish(c);
    tc_row(add_case("row_stream_rms_bf16"), NJ_BF16, 100003, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS);
    c = add_case("row_kept_axis_silu_scalar_gamma");
    tc_begin(c, NJ_F32, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_SILU, 8); /* features on the kept axis */
    tc_axis(c, 12, false, true);
    tc_axis(c, 256, true, false);
    tc_finish(c);
    c = add_case("rowlike_gn_nchw_chunk_gamma"); /* GroupNorm NCHW: (C/G, HW) reduced, gamma per channel */
    tc_begin(c, NJ_F16, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_SILU, 2);
    tc_axis(c, 8, false, true);
    tc_axis(c, 4, true, true);
    tc_axis(c, 256, true, false);
    tc_finish(c);
    c = add_case("rowlike_padded_gamma_vec"); /* two reduced feature axes, x rows padded (vec 2) */
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL, NJ_ACT_NONE, 3);
    tc_axis(c, 5, false, false);
    tc_axis(c, 6, true, true);
    tc_axis(c, 10, true, true);
    tc_finish(c);
    c->axes[2].stride[NJ_OPD_X] = 12, c->axes[1].stride[NJ_OPD_X] = 6 * 12, c->axes[0].stride[NJ_OPD_X] = 5 * 6 * 12;
    c = add_case("column_bn_nhwc_relu");
    tc_begin(c, NJ_F16, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_RELU, 1);
    tc_axis(c, 32, true, false);
    tc_axis(c, 3136, true, false);
    tc_axis(c, 64, false, true);
    tc_finish(c);
    c = add_case("column_in_nhwc_40ch_rms_res"); /* InstanceNorm NHWC, 40 channels: a partial tile */
    tc_begin(c, NJ_F32, NJ_F32, NJ_FLAG_SCALE | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS,
             NJ_ACT_GELU_TANH, 3);
    tc_axis(c, 7, true, false);
    tc_axis(c, 9, true, false);
    tc_axis(c, 40, false, true);
    tc_finish(c);
    c = add_case("column_split_rms_res"); /* a 4900-row walk split into pieces, residual fused, no centering */
    tc_begin(c, NJ_BF16, NJ_F32, NJ_FLAG_SCALE | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS,
             NJ_ACT_NONE, 3);
    tc_axis(c, 70, true, false);
    tc_axis(c, 70, true, false);
    tc_axis(c, 48, false, true);
    tc_finish(c);
    c = add_case("column_vec8_res"); /* 256 f16 channels: 8-element vectors (4 backward), residual */
    tc_begin(c, NJ_F16, NJ_F32, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS, NJ_ACT_SILU, 3);
    tc_axis(c, 40, true, false);
    tc_axis(c, 80, true, false);
    tc_axis(c, 256, false, true);
    tc_finish(c);
    /* the image family: ConvNeXt's LayerNorm over C at 7x7 (512 threads, f16 vectors) and 14x14, the
     * residual staged as floats, an odd image copied an element at a time (RMS, GELU) */
    c = add_case("image_ln_f16_768x7x7_stats");
    tc_begin(c, NJ_F16, NJ_F16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_NONE, 4);
    tc_axis(c, 768, true, true);
    tc_axis(c, 49, false, false);
    tc_finish(c);
    c = add_case("image_ln_f32_384x14x14_gelu"); /* 150528 B: one block of 1024 an SM */
    tc_begin(c, NJ_F16, NJ_F32, ln, NJ_ACT_GELU_ERF, 4);
    tc_axis(c, 384, true, true);
    tc_axis(c, 196, false, false);
    tc_finish(c);
    c = add_case("image_bf16_res_resout_silu");
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS, NJ_ACT_SILU, 4);
    tc_axis(c, 96, true, true);
    tc_axis(c, 196, false, false);
    tc_finish(c);
    c = add_case("image_f32_768x7x7_gelu_erf"); /* backward: x alone staged (P.stage 2), dy read twice */
    tc_begin(c, NJ_F32, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 4);
    tc_axis(c, 768, true, true);
    tc_axis(c, 49, false, false);
    tc_finish(c);
    c = add_case("image_parts_f32_384x14x14"); /* 301 KB of x: two parts forward, three backward */
    tc_begin(c, NJ_F32, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_SILU, 4);
    tc_axis(c, 384, true, true);
    tc_axis(c, 196, false, false);
    tc_finish(c);
    c = add_case("image_rms_f16_odd_gelu_tanh");
    tc_begin(c, NJ_F16, NJ_F16, NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_TANH, 4);
    tc_axis(c, 33, true, true);
    tc_axis(c, 49, false, false);
    tc_finish(c);
    c = add_case("column_small_general"); /* 6 columns: the general family */
    tc_begin(c, NJ_F16, NJ_F16, ln, NJ_ACT_NONE, 5);
    tc_axis(c, 300, true, false);
    tc_axis(c, 6, false, true);
    tc_finish(c);
    c = add_case("cl_gn_nhwc_res_sigmoid"); /* channels-last tiles with the residual fused */
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_RESIDUAL | NJ_FLAG_RESIDUAL_OUT | NJ_FLAG_SAVE_STATS,
             NJ_ACT_SIGMOID, 2);
    tc_axis(c, 1024, true, false); /* HW */
    tc_axis(c, 8, false, true);    /* G */
    tc_axis(c, 4, true, true);     /* C/G */
    tc_finish(c);
    c = add_case("cl_gn_nhwc_f16_silu"); /* the UNet's GroupNorm: channels-last tiles, 8-channel vectors */
    tc_begin(c, NJ_F16, NJ_F32, ln, NJ_ACT_SILU, 2);
    tc_axis(c, 4096, true, false); /* HW */
    tc_axis(c, 32, false, true);   /* G */
    tc_axis(c, 10, true, true);    /* C/G */
    tc_finish(c);
    c = add_case("cl_gn_nhwc_f16_silu_8x8"); /* the UNet's 8x8 images: one launch, stats and normalize */
    tc_begin(c, NJ_F16, NJ_F32, ln, NJ_ACT_SILU, 2);
    tc_axis(c, 64, true, false);
    tc_axis(c, 32, false, true);
    tc_axis(c, 20, true, true);
    tc_finish(c);
    c = add_case("cl_gn_nhwc_bf16_stats_gelu");
    tc_begin(c, NJ_BF16, NJ_BF16, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_GELU_ERF, 3);
    tc_axis(c, 64, true, false);
    tc_axis(c, 8, false, true);
    tc_axis(c, 16, true, true);
    tc_finish(c);
    c = add_case("cl_gn_nhwc_f32_99ch"); /* odd channel count: a channel at a time, 99 lanes */
    tc_begin(c, NJ_F32, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 2);
    tc_axis(c, 25, true, false);
    tc_axis(c, 3, false, true);
    tc_axis(c, 33, true, true);
    tc_finish(c);
    c = add_case("general_bn_nchw_split"); /* BatchNorm over 64 x 4096: 2^18 a channel, split walks */
    tc_begin(c, NJ_F16, NJ_F32, ln | NJ_FLAG_SAVE_STATS, NJ_ACT_RELU, 1);
    tc_axis(c, 64, true, false);
    tc_axis(c, 8, false, true);
    tc_axis(c, 4096, true, false);
    tc_finish(c);
    c = add_case("general_rms_gelu_erf");
    tc_begin(c, NJ_F32, NJ_F32, NJ_FLAG_SCALE, NJ_ACT_GELU_ERF, 4);
    tc_axis(c, 6, true, true);
    tc_axis(c, 5, false, false);
    tc_axis(c, 7, true, true);
    tc_finish(c);
}

/* NJ_DUMP_DIR=<dir>: writes each rendered source and a description of its problem and launch, for
 * manual checks (nvcc -Xptxas -v resource reports, host runs against a reference). */
static void dump_source(const char *name, const char *src, const nj_canon *c, const nj_plan_params *pp)
{
    const char *dir = getenv("NJ_DUMP_DIR");
    if (!dir) return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cu", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(src, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    if (!(f = fopen(path, "w"))) return;
    uint32_t grid[3] = {0, 0, 0};
    (void)nj_launch_grid(&pp->launch[0], c->axes[0].extent, 0, grid);
    fprintf(f, "%d %u %d %s %d %u\n", c->rank, c->flags, c->act, pp->launch[0].kernel, pp->block, grid[0]);
    for (int o = 0; o < NJ_OPD_COUNT; o++) fprintf(f, "%d ", c->dtype[o]);
    fprintf(f, "\n");
    for (int i = 0; i < c->rank; i++) {
        fprintf(f, "%lld %d %d", (long long)c->axes[i].extent, c->axes[i].reduce, c->axes[i].feature);
        for (int o = 0; o < NJ_OPD_COUNT; o++) fprintf(f, " %lld", (long long)c->axes[i].stride[o]);
        fprintf(f, "\n");
    }
    fclose(f);
}

static void test_forward_variants(void **state)
{
    (void)state;
    unsetenv("NORMJIT_TEMPLATE_DIR");
    build_cases();
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    int families[NJ_FAMILY_COUNT] = {0};
    for (int i = 0; i < nfwd; i++) {
        nj_plan_params pp;
        assert_int_equal(nj_plan_pass(&fwd[i].c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
        families[pp.family]++;
        char *src = NULL;
        nj_status s = nj_codegen(&fwd[i].c, &pp, &src);
        if (s != NJ_OK) fail_msg("%s: %s", fwd[i].name, nj_last_error());
        dump_source(fwd[i].name, src, &fwd[i].c, &pp);
        assert_null(strstr(src, "{{"));
        assert_null(strstr(src, "{%"));
        assert_null(strstr(src, "{#"));
        assert_non_null(strstr(src, "struct nj_kargs"));
        char want[128];
        char regs[128]; /* the kernel macro: NJ_KERNEL, or NJ_KERNEL_REGS where registers matter more */
        /* the main kernel (a pipelined split's first launch is the zero launch's 256 threads) */
        const char *mk = pp.launch[pp.role[NJ_ROLE_MAIN] - 1].kernel;
        snprintf(want, sizeof want, "NJ_KERNEL(%s, %d)", mk, pp.block);
        snprintf(regs, sizeof regs, "NJ_KERNEL_REGS(%s, %d)", mk, pp.block);
        if (pp.persist) snprintf(want, sizeof want, "NJ_KERNEL_OCC(%s, %d, %d)", mk, pp.block,
                                 pp.persist);
        /* an image block is held to 64 registers a thread (the blocks an SM its shared memory allows) */
        if (pp.family == NJ_FAMILY_IMAGE)
            snprintf(want, sizeof want, "NJ_KERNEL_OCC(%s, %d, %d)", mk, pp.block, 1024 / pp.block);
        /* a channels-last main kernel of at most 512 threads is held to two blocks an SM (a fused image's
           of at most 96 KB) */
        int64_t image = fwd[i].c.reduce_size * fwd[i].c.axes[2].extent * (int64_t)nj_dtype_size((nj_dtype)fwd[i].c.dtype[NJ_OPD_X]);
        bool cl2 = pp.family == NJ_FAMILY_CHANNELS_LAST && pp.block <= 512 && pp.launch[pp.nlaunch - 1].cluster < 2 &&
                   (pp.nlaunch > 1 || image <= 96 * 1024);
        if (cl2) snprintf(want, sizeof want, "NJ_KERNEL_OCC(%s, %d, 2)", pp.launch[pp.nlaunch - 1].kernel, pp.block);
        assert_true(strstr(src, want) || (!pp.persist && pp.family != NJ_FAMILY_IMAGE && !cl2 && strstr(src, regs)));
        snprintf(want, sizeof want, "#define NJ_N %lldLL", (long long)fwd[i].c.reduce_size);
        assert_non_null(strstr(src, want));
        static const char *const acts[] = {"none", "relu", "silu", "gelu_tanh", "gelu_erf", "sigmoid"};
        snprintf(want, sizeof want, "= nj_act_%s(", acts[fwd[i].c.act]);
        if (pp.family != NJ_FAMILY_ROW) snprintf(want, sizeof want, "nj_act_%s(u)", acts[fwd[i].c.act]);
        assert_non_null(strstr(src, want));
        if (pp.family == NJ_FAMILY_CHANNELS_LAST) {
            /* vectors across channels; the unaligned variant keeps the tiling, a channel at a time */
            snprintf(want, sizeof want, "nj_load_vec<%d>(X", pp.vec);
            assert_non_null(strstr(src, want));
            nj_plan_params up;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &up), NJ_OK);
            assert_int_equal(up.vec, 1);
            assert_int_equal(up.chans, pp.chans);
            assert_int_equal(up.tile, pp.tile);
            assert_int_equal(up.block, pp.block);
            char *usrc = NULL;
            assert_int_equal(nj_codegen(&fwd[i].c, &up, &usrc), NJ_OK);
            assert_non_null(strstr(usrc, "nj_load_vec<1>(X"));
            assert_null(strstr(usrc, "nj_load_vec<8>") || strstr(usrc, "nj_load_vec<4>") ? usrc : NULL);
            free(usrc);
        } else if (pp.family == NJ_FAMILY_COLUMN && pp.vec > 1) {
            /* vectors across a lane's columns; the unaligned variant keeps the tiles, a column at a time,
               its walks rolled */
            snprintf(want, sizeof want, "nj_load_vec<%d>(X", pp.vec);
            assert_non_null(strstr(src, want));
            assert_int_equal(pp.tile, 32 / pp.rows_per_block * pp.vec); /* sub-rows of 32 / rows_per_block lanes */
            assert_true(pp.align_opds & (1u << NJ_OPD_X));
            nj_plan_params up;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &up), NJ_OK);
            assert_int_equal(up.vec, 1);
            assert_int_equal(up.tile, pp.tile);
            assert_int_equal(up.unroll, 1);
            assert_int_equal(up.nlaunch, pp.nlaunch);
            char *usrc = NULL;
            assert_int_equal(nj_codegen(&fwd[i].c, &up, &usrc), NJ_OK);
            /* no vector access of an operand; the workspace's statistics (aligned by the library) may */
            for (const char *v = strstr(usrc, "nj_load_vec<"); v; v = strstr(v + 1, "nj_load_vec<"))
                if (!strstr(v, ">(ST") || strstr(v, ">(ST") != v + strcspn(v, ">")) fail_msg("%s: %.40s", fwd[i].name, v);
            assert_null(strstr(usrc, "nj_store_vec<"));
            assert_non_null(strstr(usrc, "[c] = nj_load_f32(X, "));
            free(usrc);
        } else if (pp.family == NJ_FAMILY_TILE && pp.vec > 1) {
            /* a tile's rows copied a vector at a time; the unaligned variant an element at a time, into
               the same shared memory */
            snprintf(want, sizeof want, "#define NJ_VW %d\n", pp.vec);
            assert_non_null(strstr(src, want));
            nj_plan_params up;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &up), NJ_OK);
            assert_int_equal(up.vec, 1);
            assert_int_equal(up.rows_per_block, pp.rows_per_block);
            assert_int_equal(up.launch[0].shmem, pp.launch[0].shmem);
            char *usrc = NULL;
            assert_int_equal(nj_codegen(&fwd[i].c, &up, &usrc), NJ_OK);
            assert_non_null(strstr(usrc, "#define NJ_VW 1\n"));
            free(usrc);
        } else if (pp.family == NJ_FAMILY_IMAGE && pp.vec > 1) {
            /* the slab copied a vector at a time; the unaligned variant copies the same slab an element at
               a time, into the same shared memory */
            snprintf(want, sizeof want, "#define NJ_VW %d\n", pp.vec);
            assert_non_null(strstr(src, want));
            assert_true(strstr(src, "nj_vec_io<NJ_VW, nj_tx>::fetch(X") || strstr(src, "nj_load_vec<NJ_VW>(X"));
            assert_true(pp.align_opds & (1u << NJ_OPD_X));
            /* an image in parts (P.tile pixels a block): a block an image part, its offsets by channel row */
            snprintf(want, sizeof want, "#define NJ_KP %du\n#define NJ_PARTS %d\n", pp.tile, (int)pp.launch[0].row_mult);
            assert_int_equal(strstr(src, want) != NULL, pp.tile > 0);
            assert_int_equal(strstr(src, "A.rows * NJ_PARTS") != NULL, pp.tile > 0);
            nj_plan_params up;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &up), NJ_OK);
            assert_int_equal(up.vec, 1);
            assert_int_equal(up.block, pp.block);
            assert_int_equal(up.launch[0].shmem, pp.launch[0].shmem);
            char *usrc = NULL;
            assert_int_equal(nj_codegen(&fwd[i].c, &up, &usrc), NJ_OK);
            assert_non_null(strstr(usrc, "#define NJ_VW 1\n"));
            assert_null(strstr(usrc, "nj_vec_io<NJ_VW, nj_tx>::fetch"));
            free(usrc);
        } else if (pp.vec > 1) {
            /* vec-wide accesses only; misaligned arguments get the unaligned variant: one element at a
               time, same blocks and launches, rolled loops */
            assert_true(pp.align_opds & (1u << NJ_OPD_X));
            /* unrolled main loops (split rows roll only the loop over the row's pieces; a streamed walk of
               x and the residual, two loads an iteration, rolls: lib_index.cuh's walk_unroll) */
            bool two_streams = pp.regs_cache == 0 && (fwd[i].c.flags & NJ_FLAG_RESIDUAL);
            if (pp.split == 1 && !two_streams) assert_null(strstr(src, "#pragma unroll 1"));
            nj_plan_params up;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &up), NJ_OK);
            assert_int_equal(up.vec, 1);
            assert_int_equal(up.unaligned, 1);
            assert_int_equal(up.align_opds, 0);
            assert_int_equal(up.block, pp.block);
            assert_int_equal(up.rows_per_block, pp.rows_per_block);
            assert_int_equal(up.nlaunch, pp.nlaunch);
            char *usrc = NULL;
            assert_int_equal(nj_codegen(&fwd[i].c, &up, &usrc), NJ_OK);
            assert_non_null(strstr(usrc, "constexpr int V = 1;"));
            assert_non_null(strstr(usrc, "#pragma unroll 1"));
            assert_null(strstr(usrc, "= nj_welford_init();")); /* two-pass sums, not Welford */
            free(usrc);
        } else {
            nj_plan_params same;
            assert_int_equal(nj_plan_variant(&fwd[i].c, NJ_PASS_FORWARD, NJ_VARIANT_UNALIGNED, &dev, &same), NJ_OK);
            assert_int_equal(same.unaligned, 0); /* its own unaligned variant: one signature */
            assert_int_equal(memcmp(&same, &pp, sizeof pp), 0);
        }
        bool stats = fwd[i].c.flags & NJ_FLAG_SAVE_STATS, center = fwd[i].c.flags & NJ_FLAG_CENTER;
        assert_int_equal(strstr(src, "A.rstd[") != NULL, stats);
        assert_int_equal(strstr(src, "A.mean[") != NULL, stats && center);
        assert_int_equal(strstr(src, "A.res_out") != NULL, (fwd[i].c.flags & NJ_FLAG_RESIDUAL_OUT) != 0);
        free(src);
    }
    assert_true(families[NJ_FAMILY_ROW] >= 8);
    assert_true(families[NJ_FAMILY_GENERAL] >= 2);
    assert_true(families[NJ_FAMILY_COLUMN] >= 2);
    assert_int_equal(families[NJ_FAMILY_IMAGE], 6);
    assert_int_equal(families[NJ_FAMILY_TILE], 3);
    assert_int_equal(families[NJ_FAMILY_CHANNELS_LAST], 5);
}

/* The source of a problem line's pass as planned for dev (the plan in *pp). */
static char *render_line(const char *line, nj_pass pass, const nj_device_props *dev, nj_plan_params *pp)
{
    nj_problem_desc p;
    nj_canon c;
    char *src = NULL;
    assert_int_equal(nj_problem_from_text(line, 4, &p), NJ_OK);
    assert_int_equal(nj_canonicalize(&p, &c), NJ_OK);
    assert_int_equal(nj_plan_pass(&c, pass, dev, pp), NJ_OK);
    assert_int_equal(nj_codegen(&c, pp, &src), NJ_OK);
    return src;
}

/* The general template is a correct fallback for ROW problems too. */
static void test_general_renders_row(void **state)
{
    (void)state;
    nj_canon c;
    tc_row(&c, NJ_F32, 1000, NJ_FLAG_CENTER);
    nj_plan_params pp;
    nj_device_props dev;
    nj_device_props_default(80, &dev);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
    pp.template_name = "fwd_general.cu";
    snprintf(pp.launch[0].kernel, sizeof pp.launch[0].kernel, "nj_fwd_general");
    char *src = NULL;
    assert_int_equal(nj_codegen(&c, &pp, &src), NJ_OK);
    dump_source("row_via_general", src, &c, &pp);
    assert_non_null(strstr(src, "NJ_KERNEL(nj_fwd_general"));
    free(src);
}

/* BatchNorm's gamma/beta are constant over the statistic: the general forward loads them once a block,
 * not once an element (y may alias them, so the compiler kept such loads in the walk); LayerNorm over
 * axes 0 and 2 (gamma along the reduction) loads them where used. */
static void test_general_param_once(void **state)
{
    (void)state;
    static const struct { const char *line; int once; } want[] = {
        {"batchnorm f16 nchw 128x128x28x28 flags=scale,bias", 1},
        {"layernorm f32 2x6x5x4 axes=0,2 flags=scale,bias", 0},
    };
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_plan_params pp;
        char *src = render_line(want[i].line, NJ_PASS_FORWARD, &dev, &pp);
        assert_string_equal(pp.template_name, "fwd_general.cu");
        assert_int_equal(strstr(src, "const float g_set = nj_load_f32(GAMMA, op);") != NULL, want[i].once);
        assert_int_equal(strstr(src, "nj_load_f32(GAMMA, opi)") == NULL, want[i].once);
        free(src);
    }
}

/* A pipelined tile's sums are stored by many threads (channels-last: a group or a channel each; column
 * walks: warp 0's lanes, a column each): a barrier must order them before thread 0's fence and add
 * publish the piece (cl_lib.cuh: cl_pipe_merge), or the merging block could read a store still in
 * flight. The emulator runs blocks one after another and cannot see that race, so the rendered source
 * is checked. */
static void test_pipe_publish(void **state)
{
    (void)state;
    static const struct {
        const char *line;
        int pass;
        const char *publish;
    } want[] = {
        {"groupnorm f16 nhwc 2x640x32x32 groups=32 act=silu flags=scale,bias", NJ_PASS_FORWARD,
         "        __syncthreads();\n        if (__syncthreads_or(t == 0 && nj_pipe_arrive(FLAG)"},
        {"groupnorm f16 nhwc 2x640x32x32 groups=32 act=silu flags=scale,bias", NJ_PASS_BACKWARD,
         "        __syncthreads();\n        if (__syncthreads_or(t == 0 && nj_pipe_arrive(FLAG)"},
        {"instancenorm f32 ndhwc 2x16x16x16x64 flags=scale,bias", NJ_PASS_FORWARD,
         "        __syncthreads();\n        if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FLAG)"},
        {"instancenorm f32 ndhwc 2x16x16x16x64 flags=scale,bias", NJ_PASS_BACKWARD,
         "            __syncthreads();\n            if (__syncthreads_or(threadIdx.x == 0 && nj_pipe_arrive(FL + grp)"},
    };
    nj_device_props dev;
    nj_device_props_default(80, &dev);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        nj_plan_params pp;
        char *src = render_line(want[i].line, (nj_pass)want[i].pass, &dev, &pp);
        assert_true(pp.lag > 0);
        if (!strstr(src, want[i].publish)) fail_msg("%s: no barrier before the publishing add", want[i].line);
        free(src);
    }
}

/* The cluster backward's slots store their partial rows a float a lane in turn, elements other threads
 * accumulated: a barrier comes first (the matrix's sm_90 slots lines fail without it; this names the
 * cause). */
static void test_slot_rows_barrier(void **state)
{
    (void)state;
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    nj_plan_params pp;
    char *src = render_line("rmsnorm bf16 2x32768 flags=scale", NJ_PASS_BACKWARD, &dev, &pp);
    assert_int_equal(pp.pgrad, NJ_PGRAD_SLOTS);
    const char *store = strstr(src, "PG[slot * NJ_N + lo + e] = nj_ag[e];");
    assert_non_null(store);
    const char *bar = strstr(src, "    __syncthreads();\n    {\n        float *const PG =");
    if (!bar || bar > store) fail_msg("no barrier before the slots' partial rows");
    free(src);
}

static void test_codegen_fail(void **state)
{
    (void)state;
    nj_canon c;
    nj_plan_params pp;
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    char *src = NULL;
    /* the row template given a problem with a kept axis inside the reduced one stops with its own
     * error and line */
    tc_begin(&c, NJ_F32, NJ_F32, NJ_FLAG_CENTER, NJ_ACT_NONE, 4);
    tc_axis(&c, 6, true, false);
    tc_axis(&c, 7, false, false);
    tc_finish(&c);
    tc_row(&fwd[0].c, NJ_F32, 40, NJ_FLAG_CENTER); /* 160 bytes, whole sectors: the row family's */
    assert_int_equal(nj_plan_pass(&fwd[0].c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
    assert_int_equal(nj_codegen(&c, &pp, &src), NJ_ERR_TEMPLATE);
    assert_null(src);
    assert_int_equal(strncmp(nj_last_error(), "fwd_row.cu:", 11), 0);
    assert_non_null(strstr(nj_last_error(), "every reduced axis inside the kept ones"));
    /* a template that does not exist */
    pp.template_name = "fwd_nothing.cu";
    assert_int_equal(nj_codegen(&fwd[0].c, &pp, &src), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "fwd_nothing.cu"));
    /* an environment the templates cannot describe */
    assert_int_equal(nj_plan_pass(&fwd[0].c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
    fwd[0].c.act = 99;
    assert_int_equal(nj_codegen(&fwd[0].c, &pp, &src), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "activation"));
    assert_int_equal(nj_codegen(NULL, &pp, &src), NJ_ERR_NULL_POINTER);
}

/* A library module renders from its kernel and gamma dtype alone: no problem is baked in. */
static void test_library_render(void **state)
{
    (void)state;
    static const struct {
        nj_dtype d;
        const char *typedef_line;
    } want[] = {{NJ_F32, "typedef float nj_tparam;"}, {NJ_F16, "typedef nj_f16 nj_tparam;"},
                {NJ_BF16, "typedef nj_bf16 nj_tparam;"}};
    nj_plan_params pp;
    assert_int_equal(nj_plan_library(NJ_LIB_COLSUM, &pp), NJ_OK);
    assert_int_equal(pp.family, NJ_FAMILY_LIBRARY);
    assert_int_equal(nj_plan_kernel_count(&pp), 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char *src = NULL;
        assert_int_equal(nj_codegen_library(&pp, want[i].d, &src), NJ_OK);
        assert_non_null(strstr(src, want[i].typedef_line));
        assert_non_null(strstr(src, "NJ_KERNEL(nj_lib_colsum, 1024)")); /* launches pick 8 to 32 warps */
        assert_non_null(strstr(src, "A.lib[7]"));
        assert_null(strstr(src, "#define NJ_N")); /* extents come at run time */
        free(src);
    }
    char *src = NULL;
    assert_int_equal(nj_codegen_library(&pp, NJ_DTYPE_NONE, &src), NJ_ERR_TEMPLATE); /* dgamma needs one */
    assert_null(src);
    assert_non_null(strstr(nj_last_error(), "a gamma dtype"));
    assert_int_equal(nj_codegen_library(&pp, 77, &src), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "library dtype"));
    /* the merge touches no gamma: one module, whatever the plan's */
    assert_int_equal(nj_lib_dtype(NJ_LIB_MERGE, NJ_BF16), NJ_DTYPE_NONE);
    assert_int_equal(nj_lib_dtype(NJ_LIB_COLSUM, NJ_BF16), NJ_BF16);
    assert_int_equal(nj_plan_library(NJ_LIB_MERGE, &pp), NJ_OK);
    assert_int_equal(nj_codegen_library(&pp, NJ_DTYPE_NONE, &src), NJ_OK);
    assert_non_null(strstr(src, "NJ_KERNEL(nj_lib_merge, 1024)"));
    assert_non_null(strstr(src, "if (mode == 1)")); /* NJ_MERGE_STATS, from the environment */
    assert_null(strstr(src, "nj_tparam"));
    free(src);
    assert_int_equal(nj_plan_library(NJ_LIB_COUNT, &pp), NJ_ERR_INTERNAL);
    assert_int_equal(nj_plan_library(NJ_LIB_NONE, &pp), NJ_ERR_INTERNAL);
}

/* What ptxas reported of a plan's kernels for sm_<arch>: no spills, a stack frame of at most 8 bytes,
 * the registers the plan's blocks an SM count on. */
static void check_resources(const char *name, const nj_plan_params *pp, const nj_compile_result *r, int32_t arch)
{
    assert_int_equal(r->nkernels, nj_plan_kernel_count(pp));
    for (int j = 0; j < r->nkernels; j++) {
        const nj_kernel_resources *k = &r->kernels[j];
        if (k->spill_stores || k->spill_loads || k->stack_bytes > 8)
            fail_msg("%s %s sm_%d: %d spill stores, %d spill loads, %d stack bytes", name, k->kernel, arch,
                     k->spill_stores, k->spill_loads, k->stack_bytes);
        assert_true(k->registers > 0 && (int64_t)k->registers * pp->block <= 65536);
        /* a persistent plan's grid counts on pp->persist blocks an SM (registers allocated 8 at a time) */
        if (pp->persist && j == 0 && (int64_t)(k->registers + 7) / 8 * 8 * pp->block * pp->persist > 65536)
            fail_msg("%s sm_%d: %d registers, %d threads: fewer than %d blocks an SM", name, arch, k->registers,
                     pp->block, pp->persist);
        /* an image plan sized its block for 64 registers a thread */
        if (pp->family == NJ_FAMILY_IMAGE && k->registers > 64)
            fail_msg("%s sm_%d: %d registers for an image block", name, arch, k->registers);
        if (getenv("NJ_DUMP_DIR"))
            fprintf(stderr, "sm_%d %-32s %-14s block %4d vec %d regs_cache %2d%s: %3d registers, %5d B smem, "
                    "%.0f ms\n", arch, name, k->kernel, pp->block, pp->vec, pp->regs_cache,
                    pp->unaligned ? " unaligned" : "", k->registers, k->shared_bytes, r->millis);
    }
}

/* Every forward variant, and the backward of the same problems, compiles with NVRTC for sm_80 and sm_90 with no spills (the ptxas report): a
 * spill in these memory-bound kernels costs more than any tuning gains. A stack frame above 8 bytes
 * fails too (local arrays indexed at run time); ptxas 13.0 reserves an 8-byte frame without any spill
 * traffic for one sm_80 variant (row_warp_f32_vec4), which is tolerated. */
static void test_forward_compile_nvrtc(void **state)
{
    (void)state;
    const char *v;
    if (nj_nvrtc_version_string(&v) != NJ_OK) {
        fprintf(stderr, "NVRTC not available (%s): compile check skipped\n", nj_last_error());
        skip();
    }
    unsetenv("NORMJIT_TEMPLATE_DIR");
    build_cases();
    static const int32_t archs[] = {80, 90};
    /* arch x pass x variant; an unaligned variant only where it differs from the main kernels */
    for (size_t a = 0; a < 8; a++) {
        nj_device_props dev;
        nj_device_props_default(archs[a % 2], &dev);
        nj_pass pass = a % 4 < 2 ? NJ_PASS_FORWARD : NJ_PASS_BACKWARD;
        nj_variant variant = a < 4 ? NJ_VARIANT_MAIN : NJ_VARIANT_UNALIGNED;
        for (int i = 0; i < nfwd; i++) {
            nj_plan_params pp;
            char *src = NULL;
            assert_int_equal(nj_plan_pass(&fwd[i].c, pass, &dev, &pp), NJ_OK);
            if (variant == NJ_VARIANT_UNALIGNED && pp.align_opds == 0) continue;
            assert_int_equal(nj_plan_variant(&fwd[i].c, pass, variant, &dev, &pp), NJ_OK);
            if (nj_codegen(&fwd[i].c, &pp, &src) != NJ_OK) fail_msg("%s: %s", fwd[i].name, nj_last_error());
            nj_compile_result r;
            memset(&r, 0, sizeof r);
            int32_t arch = archs[a % 2];
            nj_status s = nj_nvrtc_compile(src, fwd[i].name, arch, nj_plan_kernel_count(&pp), &r);
            if (s != NJ_OK) fail_msg("%s sm_%d: %s", fwd[i].name, arch, nj_last_error());
            check_resources(fwd[i].name, &pp, &r, arch);
            nj_binary_free(&r.bin);
            free(src);
        }
    }
}

/* The main kernels of every problem of the example manifests (what users run, and what the model's
 * figures are of), both passes, compile for sm_80 and sm_90 as check_resources asks: the persistent row
 * forwards of LayerNorm bf16 rows of 2048 and 4096 had spilled 24 bytes a thread (no case above had
 * their flags) until 16-bit gamma/beta were staged. */
static void test_manifest_compile_nvrtc(void **state)
{
    (void)state;
    const char *v;
    if (nj_nvrtc_version_string(&v) != NJ_OK) skip();
    unsetenv("NORMJIT_TEMPLATE_DIR");
    static const char *const manifests[] = {"llm", "unet", "convnext", "seeds"};
    int checked = 0;
    for (size_t m = 0; m < sizeof manifests / sizeof manifests[0]; m++) {
        char path[1024], line[1024];
        snprintf(path, sizeof path, "%s/manifests/%s.txt", NJ_SOURCE_DIR, manifests[m]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (line[0] == 0 || line[0] == '#') continue;
            nj_problem_desc p;
            nj_canon c;
            if (nj_problem_from_text(line, 1, &p) != NJ_OK || nj_canonicalize(&p, &c) != NJ_OK)
                fail_msg("%s: %s", line, nj_last_error());
            for (int a = 0; a < 4; a++) {
                int32_t arch = a % 2 ? 90 : 80;
                nj_device_props dev;
                nj_device_props_default(arch, &dev);
                nj_plan_params pp;
                char *src = NULL;
                assert_int_equal(nj_plan_pass(&c, a < 2 ? NJ_PASS_FORWARD : NJ_PASS_BACKWARD, &dev, &pp), NJ_OK);
                if (nj_codegen(&c, &pp, &src) != NJ_OK) fail_msg("%s: %s", line, nj_last_error());
                nj_compile_result r;
                memset(&r, 0, sizeof r);
                if (nj_nvrtc_compile(src, "manifest", arch, nj_plan_kernel_count(&pp), &r) != NJ_OK)
                    fail_msg("%s sm_%d: %s", line, arch, nj_last_error());
                check_resources(line, &pp, &r, arch);
                nj_binary_free(&r.bin);
                free(src);
                checked++;
            }
        }
        fclose(f);
    }
    assert_true(checked >= 4 * 80); /* the four manifests' 82 problems */
}

/* The row backward's slots (one partial dgamma/dbeta row a block) are as many as the plan counts
 * resident blocks on the device; a kernel whose registers hold fewer runs them in a second, partial
 * wave. NVRTC's register count (allocated 8 at a time) must let the plan's blocks an SM fit. */
static void test_row_backward_occupancy(void **state)
{
    (void)state;
    const char *v;
    if (nj_nvrtc_version_string(&v) != NJ_OK) skip();
    unsetenv("NORMJIT_TEMPLATE_DIR");
    enum { LN = NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_BIAS };
    static const struct {
        const char *name;
        nj_dtype dt;
        int64_t n;
        uint32_t flags;
        nj_activation act;
    } cases[] = {
        {"bwd_bf16_2048_rms", NJ_BF16, 2048, NJ_FLAG_SCALE, NJ_ACT_NONE}, /* 256 threads, 4 an SM */
        {"bwd_bf16_4096_ln", NJ_BF16, 4096, LN, NJ_ACT_NONE},              /* 512, 2 */
        {"bwd_bf16_5120_gelu_erf", NJ_BF16, 5120, LN, NJ_ACT_GELU_ERF},    /* 640, 1, the next row fetched */
        {"bwd_f32_1000_ln", NJ_F32, 1000, LN, NJ_ACT_NONE},                /* 128, 8 */
        {"bwd_f32_2048_ln", NJ_F32, 2048, LN, NJ_ACT_NONE},                /* 256, 4 */
        {"bwd_f32_10_tiles", NJ_F32, 10, LN, NJ_ACT_NONE},                 /* tiles: 256, 4 */
        {"bwd_bf16_2048_gelu_erf", NJ_BF16, 2048, LN, NJ_ACT_GELU_ERF},    /* 256, 4 */
    };
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nj_canon c;
        nj_plan_params pp;
        char *src = NULL;
        tc_begin(&c, cases[i].dt, NJ_F32, cases[i].flags, cases[i].act, 64);
        tc_axis(&c, cases[i].n, true, true);
        tc_finish(&c);
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_BACKWARD, &dev, &pp), NJ_OK);
        assert_int_equal(pp.pgrad, NJ_PGRAD_SLOTS);
        assert_int_equal(pp.launch[0].grid_x % dev.sm_count, 0);
        int64_t per_sm = pp.launch[0].grid_x / dev.sm_count;
        if (nj_codegen(&c, &pp, &src) != NJ_OK) fail_msg("%s: %s", cases[i].name, nj_last_error());
        nj_compile_result r;
        memset(&r, 0, sizeof r);
        if (nj_nvrtc_compile(src, cases[i].name, 90, nj_plan_kernel_count(&pp), &r) != NJ_OK)
            fail_msg("%s: %s", cases[i].name, nj_last_error());
        assert_int_equal(r.nkernels, 1);
        int64_t regs = (r.kernels[0].registers + 7) / 8 * 8;
        if (regs * pp.block * per_sm > 65536)
            fail_msg("%s: %d registers, %d threads: fewer than the plan's %lld blocks an SM fit", cases[i].name,
                     r.kernels[0].registers, pp.block, (long long)per_sm);
        nj_binary_free(&r.bin);
        free(src);
    }
}

/* Random valid problems (every shape class, strided, padded, broadcast inputs, mixed dtypes): each one
 * plans and renders, and a sample compiles with NVRTC without spills. */
static void test_random_problems(void **state)
{
    (void)state;
    unsetenv("NORMJIT_TEMPLATE_DIR");
    const char *v;
    bool nvrtc = nj_nvrtc_version_string(&v) == NJ_OK;
    nj_pg_rng rng = {0x5eed};
    nj_pg_opts opts = {.max_rank = 5, .max_extent = 6, .allow_pad = 1, .allow_broadcast = 1};
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    int kinds[4] = {0}, compiled = 0;
    for (int i = 0; i < 400; i++) {
        nj_problem_desc p;
        nj_canon c;
        nj_plan_params pp;
        char *src = NULL;
        nj_pg_problem(&rng, &opts, &p);
        if (nj_canonicalize(&p, &c) != NJ_OK) fail_msg("problem %d: %s", i, nj_last_error());
        kinds[c.kind]++;
        assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
        nj_status s = nj_codegen(&c, &pp, &src);
        if (s != NJ_OK) fail_msg("problem %d: %s", i, nj_last_error());
        assert_null(strstr(src, "{{"));
        char name[32];
        snprintf(name, sizeof name, "random_%03d", i);
        if (i % 8 == 0) dump_source(name, src, &c, &pp);
        if (nvrtc && i % 20 == 0) {
            nj_compile_result r;
            memset(&r, 0, sizeof r);
            if (nj_nvrtc_compile(src, name, 90, nj_plan_kernel_count(&pp), &r) != NJ_OK) fail_msg("%s: %s", name, nj_last_error());
            assert_int_equal(r.nkernels, 1);
            assert_int_equal(r.kernels[0].spill_stores + r.kernels[0].spill_loads, 0);
            nj_binary_free(&r.bin);
            compiled++;
        }
        free(src);
    }
    assert_true(kinds[NJ_KIND_ROW] > 20 && kinds[NJ_KIND_COLUMN] > 20 && kinds[NJ_KIND_GENERAL] > 20);
    assert_true(!nvrtc || compiled == 20);
}

/* Renders from several threads at once give the bytes a single thread gets (each render has its own
 * Lua state; the set hash is computed once). */
typedef struct render_job {
    const nj_canon *c;
    const nj_plan_params *pp;
    const char *want;
    const char *hash;
    int mismatches;
} render_job;

static void *render_worker(void *arg)
{
    render_job *j = arg;
    for (int i = 0; i < 10; i++) {
        char *src = NULL;
        if (nj_codegen(j->c, j->pp, &src) != NJ_OK || strcmp(src, j->want) != 0) j->mismatches++;
        if (strcmp(nj_template_set_hash(), j->hash) != 0) j->mismatches++;
        free(src);
    }
    return NULL;
}

static void test_render_threads(void **state)
{
    (void)state;
    unsetenv("NORMJIT_TEMPLATE_DIR");
    nj_canon c;
    nj_plan_params pp;
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    tc_row(&c, NJ_BF16, 2048, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS);
    assert_int_equal(nj_plan_pass(&c, NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
    char *want = NULL;
    assert_int_equal(nj_codegen(&c, &pp, &want), NJ_OK);
    char hash[33];
    snprintf(hash, sizeof hash, "%s", nj_template_set_hash());
    pthread_t t[4];
    render_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (render_job){&c, &pp, want, hash, 0};
        assert_int_equal(pthread_create(&t[i], NULL, render_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].mismatches, 0);
    }
    free(want);
}

/* The plan/template contract (src/codegen_env.c): templates read the planner's decisions by name
 * (P.role, P.pgrad, P.pgrad_parts, P.ws, P.colsum, P.merge), never from a kernel name, a launch position
 * or a workspace size. Checked on the embedded set's text, so a template that went back to guessing
 * fails here rather than renders a wrong layout for some plan. A library module's single launch is its
 * own kernel, not a decision. */
static void test_template_contract(void **state)
{
    (void)state;
    static const char *const banned[] = {"workspace_fixed", "workspace_per_row", ".kernel ==", ".kernel ~=",
                                         "A.lib[0", "A.lib[1", "A.lib[2", "A.lib[3", "A.lib[4", "A.lib[5",
                                         "A.lib[6", "A.lib[7", "A.lib[8", "A.lib[9", "PGRAD_LAUNCH"};
    int checked = 0;
    for (size_t i = 0; i < nj_embedded_template_count; i++) {
        const nj_embedded_file *f = &nj_embedded_templates[i];
        if (strncmp(f->name, "emu/", 4) == 0) continue;
        checked++;
        for (size_t b = 0; b < sizeof banned / sizeof *banned; b++)
            if (strstr(f->text, banned[b])) fail_msg("%s reads \"%s\"", f->name, banned[b]);
        const char *p = f->text;
        while ((p = strstr(p, "P.launch[")) != NULL) {
            if (strncmp(f->name, "lib_", 4) != 0 || strncmp(p, "P.launch[1].kernel", 18) != 0)
                fail_msg("%s reads a launch by position: %.24s", f->name, p);
            p++;
        }
    }
    assert_true(checked >= 10);
}

/* Programmatic dependent launch (launch.c, prelude's nj_grid_enter): a kernel that may start while the
 * one before it drains waits for it before any global access. In every template, each kernel's body
 * opens with nj_grid_enter(); (the heads under one {% if %} share a body). */
static void test_grid_enter_templates(void **state)
{
    (void)state;
    static const char *const heads[] = {"NJ_KERNEL(", "NJ_KERNEL_REGS(", "NJ_KERNEL_OCC(", "NJ_CL_PART_KERNEL(",
                                        "NJ_CLUSTER_KERNEL(", "{{ cluster_kernel("};
    int kernels = 0;
    for (size_t i = 0; i < nj_embedded_template_count; i++) {
        const nj_embedded_file *f = &nj_embedded_templates[i];
        if (strncmp(f->name, "emu/", 4) == 0) continue;
        for (const char *l = f->text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            bool head = false;
            for (size_t h = 0; h < sizeof heads / sizeof *heads; h++) head |= !strncmp(l, heads[h], strlen(heads[h]));
            if (!head) continue;
            kernels++;
            const char *b = l; /* skip this and sibling heads and directives to the body's brace */
            while ((b = strchr(b, '\n')) != NULL && strncmp(++b, "{\n", 2) != 0)
                if (*b != '{' && strncmp(b, "NJ_", 3) != 0) fail_msg("%s: a kernel head without a body: %.40s", f->name, l);
            if (!b || strncmp(b, "{\n    nj_grid_enter();\n", 22) != 0)
                fail_msg("%s: the kernel at \"%.48s\" does not open with nj_grid_enter()", f->name, l);
        }
    }
    assert_true(kernels >= 26);
}

/* Each kernel of the compiled PTX (the newest virtual arch: sm_90 and later) waits (griddepcontrol.wait)
 * before its first global access or call, and triggers its dependents; the cases of every family, both
 * passes, and the library modules. */
/* NULL when every entry of ptx waits first; else what is wrong (a static buffer). */
static const char *ptx_entry_fault(const char *ptx)
{
    static char why[128];
    int entries = 0;
    for (const char *e = strstr(ptx, ".entry "); e; e = strstr(e + 1, ".entry ")) {
        entries++;
        const char *next = strstr(e + 1, ".entry "), *wait = strstr(e, "griddepcontrol.wait");
        const char *trig = strstr(e, "griddepcontrol.launch_dependents");
        if (!wait || (next && wait > next) || !trig || (next && trig > next) || trig < wait) {
            snprintf(why, sizeof why, "an entry without griddepcontrol.wait then launch_dependents: %.60s", e);
            return why;
        }
        for (const char *l = strchr(e, '\n'); l && l < wait; l = strchr(l + 1, '\n')) {
            const char *p = l + 1 + strspn(l + 1, " \t");
            if (*p == '@') p += strcspn(p, " \t"), p += strspn(p, " \t");
            bool mem = (!strncmp(p, "ld.", 3) && strncmp(p, "ld.param", 8) != 0) || !strncmp(p, "st.", 3) ||
                       !strncmp(p, "atom.", 5) || !strncmp(p, "red.", 4) || !strncmp(p, "call", 4) ||
                       !strncmp(p, "cp.async", 8);
            if (mem) {
                snprintf(why, sizeof why, "%.40s before griddepcontrol.wait", p);
                return why;
            }
        }
    }
    return entries ? NULL : "no entry";
}

static void ptx_check_source(const char *src, const char *name, int32_t kernels)
{
    int32_t maxa = 0;
    assert_int_equal(nj_nvrtc_max_arch(&maxa), NJ_OK);
    nj_compile_result r;
    memset(&r, 0, sizeof r);
    if (nj_nvrtc_compile(src, name, maxa + 1, kernels, &r) != NJ_OK) fail_msg("%s: %s", name, nj_last_error());
    assert_true(r.bin.is_ptx);
    char *ptx = strndup(r.bin.data, r.bin.size);
    const char *why = ptx_entry_fault(ptx);
    if (why) fail_msg("%s: %s", name, why);
    free(ptx);
    nj_binary_free(&r.bin);
}

static void test_grid_enter_ptx(void **state)
{
    (void)state;
    const char *v;
    if (nj_nvrtc_version_string(&v) != NJ_OK) {
        fprintf(stderr, "NVRTC not available (%s): PTX check skipped\n", nj_last_error());
        skip();
    }
    unsetenv("NORMJIT_TEMPLATE_DIR");
    build_cases();
    nj_device_props dev;
    nj_device_props_default(90, &dev);
    int families = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nfwd; i++) {
            nj_plan_params pp;
            char *src = NULL;
            assert_int_equal(nj_plan_pass(&fwd[i].c, pass ? NJ_PASS_BACKWARD : NJ_PASS_FORWARD, &dev, &pp), NJ_OK);
            if (nj_codegen(&fwd[i].c, &pp, &src) != NJ_OK) fail_msg("%s: %s", fwd[i].name, nj_last_error());
            families |= 1 << pp.family;
            ptx_check_source(src, fwd[i].name, nj_plan_kernel_count(&pp));
            free(src);
        }
    assert_true(__builtin_popcount((unsigned)families) >= 5);
    static const int32_t libs[] = {NJ_LIB_COLSUM, NJ_LIB_MERGE};
    for (size_t i = 0; i < 2; i++) {
        nj_plan_params lp;
        char *src = NULL;
        assert_int_equal(nj_plan_library(libs[i], &lp), NJ_OK);
        assert_int_equal(nj_codegen_library(&lp, nj_lib_dtype(libs[i], NJ_F32), &src), NJ_OK);
        ptx_check_source(src, lp.launch[0].kernel, 1);
        free(src);
    }
    /* the check itself: a load ahead of the wait, an entry without it */
    assert_non_null(ptx_entry_fault(".entry k(\n ld.global.f32 %f1, [%rd1];\n griddepcontrol.wait;\n "
                                    "griddepcontrol.launch_dependents;\n"));
    assert_non_null(ptx_entry_fault(".entry k(\n ld.param.u64 %rd1, [A];\n ret;\n"));
    assert_null(ptx_entry_fault(".entry k(\n ld.param.u64 %rd1, [A];\n griddepcontrol.wait;\n "
                                "griddepcontrol.launch_dependents;\n ld.global.f32 %f1, [%rd1];\n"));
}

int main(void)
{
    const struct CMUnitTest engine[] = {
        cmocka_unit_test(test_expressions),
        cmocka_unit_test(test_statements_and_lines),
        cmocka_unit_test(test_errors_fail),
        cmocka_unit_test(test_sandbox),
    };
    const struct CMUnitTest sets[] = {
        cmocka_unit_test(test_embedded_set),
        cmocka_unit_test(test_template_dir),
    };
    const struct CMUnitTest kernels[] = {
        cmocka_unit_test(test_forward_variants),
        cmocka_unit_test(test_general_renders_row), cmocka_unit_test(test_general_param_once),
        cmocka_unit_test(test_pipe_publish), cmocka_unit_test(test_slot_rows_barrier),
        cmocka_unit_test(test_codegen_fail),
        cmocka_unit_test(test_library_render),
        cmocka_unit_test(test_template_contract),
        cmocka_unit_test(test_grid_enter_templates),
        cmocka_unit_test(test_grid_enter_ptx),
        cmocka_unit_test(test_forward_compile_nvrtc),
        cmocka_unit_test(test_manifest_compile_nvrtc),
        cmocka_unit_test(test_row_backward_occupancy),
        cmocka_unit_test(test_random_problems),
        cmocka_unit_test(test_render_threads),
    };
    int fails = cmocka_run_group_tests_name("engine", engine, NULL, NULL);
    fails += cmocka_run_group_tests_name("kernels", kernels, NULL, NULL);
    fails += cmocka_run_group_tests_name("template_sets", sets, make_tmpdir, remove_tmpdir);
    return fails;
}
