/* Vocabulary tables (src/vocab.c): every public enum value has its row, the rows agree with the enums,
 * the text form and the device prelude, and the host conversions round as the storage formats do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codegen.h"
#include "tolerance.h"
#include "vocab.h"

static const nj_dtype all_dtypes[] = {NJ_F32, NJ_F16, NJ_BF16};

static void test_dtype_rows(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++) {
        const nj_dtype_info *t = nj_dtype_find(all_dtypes[i]);
        assert_non_null(t);
        assert_int_equal(t->id, all_dtypes[i]);
        assert_ptr_equal(nj_dtype_by_name(t->name), t);
        assert_string_equal(nj_dtype_name(all_dtypes[i]), t->name);
        assert_int_equal(nj_dtype_size(all_dtypes[i]), t->size);
        assert_true(t->unit_roundoff > 0 && t->out_tol > t->unit_roundoff);
    }
    /* The tools read the table through the operator header: half an ulp at 1 of each format's mantissa, and
       rounding to nearest even (1 + 2^-8 is halfway between bf16's 1 and 1 + 2^-7; 1 + 3 * 2^-8 between
       1 + 2^-7 and 1 + 2^-6, whose mantissa is even). */
    assert_true(nj_ops_dtype_unit_roundoff(NJ_F32) == 0x1p-24);
    assert_true(nj_ops_dtype_unit_roundoff(NJ_F16) == 0x1p-11);
    assert_true(nj_ops_dtype_unit_roundoff(NJ_BF16) == 0x1p-8);
    assert_true(nj_ops_dtype_unit_roundoff(NJ_DTYPE_NONE) == 0.0);
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++) {
        assert_true(njt_tol_output(all_dtypes[i]).atol == nj_dtype_find(all_dtypes[i])->out_tol);
        assert_true(njt_tol_unit_roundoff(all_dtypes[i]) == nj_dtype_find(all_dtypes[i])->unit_roundoff);
    }
    /* the checks' floor near zero: each format's smallest subnormal, found through store/load */
    assert_true(njt_tol_quantum(NJ_F32) == 0x1p-149);
    assert_true(njt_tol_quantum(NJ_F16) == 0x1p-24);
    assert_true(njt_tol_quantum(NJ_BF16) == 0x1p-133);
    uint16_t h[2];
    nj_ops_dtype_store(NJ_BF16, h, 0, 1.0 + 0x1p-8);
    nj_ops_dtype_store(NJ_BF16, h, 1, 1.0 + 3 * 0x1p-8);
    assert_true(nj_ops_dtype_load(NJ_BF16, h, 0) == 1.0);
    assert_true(nj_ops_dtype_load(NJ_BF16, h, 1) == 1.0 + 0x1p-6);
    nj_ops_dtype_store(NJ_F16, h, 0, 65504.0);
    assert_true(nj_ops_dtype_load(NJ_F16, h, 0) == 65504.0);
    assert_int_equal(nj_dtype_find(NJ_F32)->size, sizeof(float));
    assert_int_equal(nj_dtype_find(NJ_BF16)->size, sizeof(uint16_t));
    assert_null(nj_dtype_find(NJ_DTYPE_NONE));
    assert_null(nj_dtype_find(-1));
    assert_null(nj_dtype_find(99));
    assert_null(nj_dtype_by_name("f64"));
    assert_null(nj_dtype_by_name(NULL));
    assert_string_equal(nj_dtype_name(NJ_DTYPE_NONE), "none");
    assert_int_equal(nj_dtype_size((nj_dtype)42), 0);
    assert_string_equal(nj_dtype_list(), "f32, f16, bf16");
    /* nj_dtype_at walks exactly the public dtypes, in enum order, with no gap */
    assert_int_equal(nj_dtype_count(), sizeof all_dtypes / sizeof all_dtypes[0]);
    for (size_t i = 0; i < nj_dtype_count(); i++) assert_int_equal(nj_dtype_at(i)->id, all_dtypes[i]);
    assert_null(nj_dtype_at(nj_dtype_count()));
}

/* 1 + u is a tie between 1 and the next value (rounds to even: 1); 1 + 1.5u rounds up to 1 + 2u. The
 * table's unit roundoff is thereby checked against the conversions, not restated. */
static void test_dtype_conversions(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++) {
        const nj_dtype_info *t = nj_dtype_find(all_dtypes[i]);
        unsigned char buf[16];
        memset(buf, 0, sizeof buf);
        double u = t->unit_roundoff;
        t->store(buf, 1, -2.75);
        assert_true(t->load(buf, 1) == -2.75);
        t->store(buf, 0, 1.0 + u);
        assert_true(t->load(buf, 0) == 1.0);
        t->store(buf, 0, 1.0 + 1.5 * u);
        assert_true(t->load(buf, 0) == 1.0 + 2.0 * u);
        assert_true(t->load(buf, 1) == -2.75); /* element 0's store left element 1 alone */
        t->store(buf, 2, NAN);
        assert_true(isnan(t->load(buf, 2)));
    }
}

static void test_dtype_ctypes_in_prelude(void **state)
{
    (void)state;
    const char *text;
    size_t len;
    assert_int_equal(nj_template_get("prelude.cuh", &text, &len), NJ_OK);
    for (size_t i = 0; i < sizeof all_dtypes / sizeof all_dtypes[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "struct nj_conv<%s>", nj_dtype_find(all_dtypes[i])->ctype);
        if (!strstr(text, want)) fail_msg("prelude.cuh has no %s", want);
    }
}

static void test_operand_rows(void **state)
{
    (void)state;
    nj_problem_desc p;
    memset(&p, 0, sizeof p);
    for (int o = 0; o < NJ_OPD_COUNT; o++) {
        assert_int_equal(nj_operand_row(o)->id, o);
        for (int q = 0; q < o; q++) assert_string_not_equal(nj_operand_key(o), nj_operand_key(q));
    }
    assert_null(nj_operand_row(NJ_OPD_COUNT));
    assert_null(nj_operand_row(-1));
    assert_string_equal(nj_operand_key(99), "?");
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_X), &p.x);
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_Y), &p.y);
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_RES), &p.residual);
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_RESOUT), &p.residual_out);
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_DY), &p.dy);
    assert_ptr_equal(nj_operand_desc(&p, NJ_OPD_DX), &p.dx);
    assert_null(nj_operand_desc(&p, NJ_OPD_PARAM));
    assert_null(nj_operand_desc(&p, NJ_OPD_STATS));
    assert_true(nj_operand_used(&p, NJ_OPD_X) && nj_operand_used(&p, NJ_OPD_DX));
    assert_false(nj_operand_used(&p, NJ_OPD_RES) || nj_operand_used(&p, NJ_OPD_RESOUT));
    assert_false(nj_operand_used(&p, NJ_OPD_PARAM) || nj_operand_used(&p, NJ_OPD_STATS));
    p.flags = NJ_FLAG_RESIDUAL;
    assert_true(nj_operand_used(&p, NJ_OPD_RES));
    assert_false(nj_operand_used(&p, NJ_OPD_RESOUT));
    p.flags |= NJ_FLAG_RESIDUAL_OUT;
    assert_true(nj_operand_used(&p, NJ_OPD_RESOUT));
    assert_true(nj_operand_row(NJ_OPD_Y)->output && nj_operand_row(NJ_OPD_RESOUT)->output &&
                nj_operand_row(NJ_OPD_DX)->output);
    assert_false(nj_operand_row(NJ_OPD_X)->output || nj_operand_row(NJ_OPD_DY)->output);
}

static void test_flag_rows(void **state)
{
    (void)state;
    uint32_t all = 0;
    for (size_t i = 0; i < nj_flag_count(); i++) {
        const nj_flag_info *f = nj_flag_row(i);
        assert_int_equal(__builtin_popcount(f->bit), 1);
        assert_int_equal(all & f->bit, 0);
        if (i > 0) assert_true(f->bit > nj_flag_row(i - 1)->bit); /* bit order: the text form prints so */
        all |= f->bit;
        assert_ptr_equal(nj_flag_by_name(f->name), f);
    }
    assert_int_equal(all, NJ_FLAGS_ALL);
    assert_null(nj_flag_row(nj_flag_count()));
    assert_null(nj_flag_by_name("none"));
    assert_int_equal(nj_flag_by_name("resout")->bit, NJ_FLAG_RESIDUAL_OUT);
    assert_string_equal(nj_flag_list(), "center, scale, bias, residual, resout, stats");
}

static void test_act_rows(void **state)
{
    (void)state;
    static const nj_activation acts[] = {NJ_ACT_NONE,      NJ_ACT_RELU,     NJ_ACT_SILU,
                                         NJ_ACT_GELU_TANH, NJ_ACT_GELU_ERF, NJ_ACT_SIGMOID};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        const nj_act_info *a = nj_act_find(acts[i]);
        assert_non_null(a);
        assert_int_equal(a->id, acts[i]);
        assert_ptr_equal(nj_act_by_name(a->name), a);
    }
    assert_null(nj_act_find(-1));
    assert_null(nj_act_find(NJ_ACT_SIGMOID + 1));
    assert_null(nj_act_by_name("tanh"));
    assert_string_equal(nj_act_list(), "none, relu, silu, gelu_tanh, gelu_erf, sigmoid");
}

/* The text form reads its words from the tables: each table name parses to its row. */
static void test_text_form_uses_tables(void **state)
{
    (void)state;
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("layernorm bf16 4x64 act=gelu_erf flags=center,scale,stats", 1, &p), NJ_OK);
    assert_int_equal(p.x.dtype, NJ_BF16);
    assert_int_equal(p.activation, NJ_ACT_GELU_ERF);
    assert_int_equal(p.flags, NJ_FLAG_CENTER | NJ_FLAG_SCALE | NJ_FLAG_SAVE_STATS);
    assert_int_equal(nj_problem_from_text("layernorm f32 4x64 dtype=f64", 1, &p), NJ_ERR_PARSE);
    assert_non_null(strstr(nj_last_error(), "unknown dtype (f32, f16, bf16)"));
    assert_int_equal(nj_problem_from_text("layernorm f32 4x64 act=tanh", 1, &p), NJ_ERR_PARSE);
    assert_non_null(strstr(nj_last_error(), "gelu_tanh"));
    assert_int_equal(nj_problem_from_text("layernorm f32 4x64 flags=center,mean", 1, &p), NJ_ERR_PARSE);
    assert_non_null(strstr(nj_last_error(), "unknown flag (center, scale, bias, residual, resout, stats, none)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_rows),        cmocka_unit_test(test_dtype_conversions),
        cmocka_unit_test(test_dtype_ctypes_in_prelude), cmocka_unit_test(test_operand_rows),
        cmocka_unit_test(test_flag_rows),         cmocka_unit_test(test_act_rows),
        cmocka_unit_test(test_text_form_uses_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
