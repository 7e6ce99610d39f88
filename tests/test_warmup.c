/* The public warmup (src/warmup.c, nj_warmup* in include/normjit.h), through the public header only: a list
 * of descriptors and manifests are warmed in parallel into a cache that a context that never compiles then
 * serves; bad lines are failed results of their own; progress comes once per problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "normjit.h"
#include "nj_testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const probs[] = {"rmsnorm f32 *x256 flags=scale", "layernorm f32 *x128 flags=scale,bias"};

typedef struct fx {
    char dir[PATH_MAX - 64], root[PATH_MAX];
    nj_context *ctx;
} fx;

static nj_context *emu_context(const char *root, uint32_t flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = root;
    o.flags = flags;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    return ctx;
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_true(nj_tu_make_temp_dir("warmup", f->dir, sizeof f->dir));
    snprintf(f->root, sizeof f->root, "%s/root", f->dir);
    f->ctx = emu_context(f->root, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    nj_context_destroy(f->ctx);
    nj_tu_remove_tree(f->dir);
    free(f);
    return 0;
}

typedef struct seen {
    int calls, last_done, total, order_ok, first_line;
} seen;

static void on_progress(void *user, const nj_warmup_result *r, int32_t done, int32_t total)
{
    seen *s = user;
    if (!s->calls) s->first_line = r->line;
    s->calls++;
    s->order_ok += done == s->last_done + 1;
    s->last_done = done;
    s->total = total;
}

static void no_compile_serves(const char *root, const char *text, uint32_t passes)
{
    nj_context *v = emu_context(root, NJ_CTX_NO_COMPILE);
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(text, 4, &d), NJ_OK);
    nj_plan *plan = NULL;
    assert_int_equal(nj_plan_get(v, &d, passes, &plan), NJ_OK);
    nj_context_destroy(v);
}

static void test_list_then_served(void **state)
{
    fx *f = *state;
    nj_problem_desc d[2];
    for (int i = 0; i < 2; i++) assert_int_equal(nj_problem_from_text(probs[i], 1, &d[i]), NJ_OK);
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    o.passes = NJ_PASS_FORWARD;
    o.jobs = 2;
    o.flags = NJ_WARMUP_VERIFY;
    seen s = {0};
    o.progress = on_progress;
    o.progress_user = &s;
    nj_warmup_result r[2];
    assert_int_equal(nj_warmup(f->ctx, d, 2, &o, r), NJ_OK);
    assert_int_equal(s.calls, 2);
    assert_int_equal(s.order_ok, 2);
    assert_int_equal(s.total, 2);
    int compiled = 0;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].index, i);
        assert_int_equal(r[i].line, 0);
        assert_int_equal(r[i].status, NJ_OK);
        assert_int_equal(r[i].verify_status, NJ_OK);
        assert_true(r[i].compiled >= 1);
        assert_string_equal(r[i].message, "");
        compiled += r[i].compiled;
    }
    /* every kernel set compiled is an entry of the cache */
    nj_cachedir *cd = NULL;
    assert_int_equal(nj_cachedir_from_context(f->ctx, &cd), NJ_OK);
    nj_cachedir_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_cachedir_stats_get(cd, &st), NJ_OK);
    assert_int_equal(st.entries, (uint64_t)compiled);
    nj_cachedir_close(cd);
    for (int i = 0; i < 2; i++) no_compile_serves(f->root, probs[i], NJ_PASS_FORWARD);
    /* again: nothing left to compile */
    o.progress = NULL;
    assert_int_equal(nj_warmup(f->ctx, d, 2, &o, r), NJ_OK);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r[i].compiled, 0);
        assert_true(r[i].cached >= 1);
    }
    /* results may be NULL */
    assert_int_equal(nj_warmup(f->ctx, d, 2, &o, NULL), NJ_OK);
    assert_int_equal(nj_warmup(f->ctx, d, 0, &o, NULL), NJ_OK);
}

static nj_status plan_status(const char *root, const char *text)
{
    nj_context *v = emu_context(root, NJ_CTX_NO_COMPILE);
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(text, 3, &d), NJ_OK);
    nj_plan *plan = NULL;
    nj_status s = nj_plan_get(v, &d, NJ_PASS_FORWARD, &plan);
    nj_context_destroy(v);
    return s;
}

static int32_t warm_one(nj_context *ctx, const char *text, uint32_t flags)
{
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(text, 1, &d), NJ_OK);
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    o.passes = NJ_PASS_FORWARD;
    o.flags = NJ_WARMUP_VERIFY | flags;
    nj_warmup_result r;
    assert_int_equal(nj_warmup(ctx, &d, 1, &o, &r), NJ_OK);
    return r.compiled;
}

/* A warmup includes the generic modules of the problem's dtypes by default, so a no-compile context
 * serves an unseen problem of those dtypes (on the generic kernels); NJ_WARMUP_NO_GENERIC leaves them
 * out. The module is shared: the second problem of the same dtypes compiles its own kernels only. */
static void test_generic_included(void **state)
{
    fx *f = *state;
    const char *unseen_f16 = "layernorm f16 3x200 flags=scale", *unseen_bf16 = "layernorm bf16 3x200 flags=scale";
    assert_int_equal(plan_status(f->root, unseen_f16), NJ_ERR_NOT_CACHED);
    int32_t first = warm_one(f->ctx, "layernorm f16 *x64 flags=scale", 0);
    int32_t second = warm_one(f->ctx, "layernorm f16 *x96 flags=scale", 0);
    assert_int_equal(first, second + 1);
    assert_int_equal(plan_status(f->root, unseen_f16), NJ_OK);
    assert_int_equal(warm_one(f->ctx, "layernorm bf16 *x64 flags=scale", NJ_WARMUP_NO_GENERIC), second);
    assert_int_equal(plan_status(f->root, unseen_bf16), NJ_ERR_NOT_CACHED);
}

static void test_manifest_lines(void **state)
{
    fx *f = *state;
    static const char text[] = "# serving set\n"
                               "rmsnorm f32 *x256 flags=scale   # comment after\n"
                               "\n"
                               "frobnorm f32 *x256\n"
                               "rmsnorm f32 *x2\0 56\n"
                               "  \t\r\n"
                               "layernorm f32 *x128 flags=scale,bias\r\n";
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    o.passes = NJ_PASS_FORWARD;
    o.flags = NJ_WARMUP_VERIFY;
    seen s = {0};
    o.progress = on_progress;
    o.progress_user = &s;
    nj_warmup_result *r = NULL;
    int32_t n = 0;
    nj_status st = nj_warmup_manifest(f->ctx, text, sizeof text - 1, &o, &r, &n);
    assert_int_not_equal(st, NJ_OK);
    assert_non_null(strstr(nj_last_error(), "line 4"));
    assert_int_equal(n, 4);
    assert_int_equal(s.calls, 4);
    assert_int_equal(s.first_line, 4); /* bad lines are reported before anything compiles */
    static const int lines[] = {2, 4, 5, 7};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r[i].index, i);
        assert_int_equal(r[i].line, lines[i]);
    }
    assert_int_equal(r[0].status, NJ_OK);
    assert_int_equal(r[1].status, st);
    assert_int_equal(r[1].compiled + r[1].cached, 0);
    assert_int_not_equal(r[2].status, NJ_OK);
    assert_non_null(strstr(r[2].message, "NUL"));
    assert_int_equal(r[3].status, NJ_OK);
    assert_true(r[3].compiled >= 1);
    nj_warmup_results_free(r);
    no_compile_serves(f->root, probs[1], NJ_PASS_FORWARD);
}

static void test_manifest_file(void **state)
{
    fx *f = *state;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/m.txt", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fprintf(fp, "%s\n", probs[0]);
    fclose(fp);
    nj_warmup_result *r = NULL;
    int32_t n = 0;
    assert_int_equal(nj_warmup_manifest_file(f->ctx, path, NULL, &r, &n), NJ_OK); /* NULL: both passes */
    assert_int_equal(n, 1);
    assert_int_equal(r[0].line, 1);
    assert_true(r[0].compiled >= 2); /* forward and backward kernels */
    nj_warmup_results_free(r);
    no_compile_serves(f->root, probs[0], NJ_PASS_FORWARD | NJ_PASS_BACKWARD);
    snprintf(path, sizeof path, "%s/absent.txt", f->dir);
    assert_int_equal(nj_warmup_manifest_file(f->ctx, path, NULL, &r, &n), NJ_ERR_BAD_ARGUMENT);
    assert_non_null(strstr(nj_last_error(), "absent.txt"));
    assert_null(r);
    assert_int_equal(n, 0);
}

static void test_bad_arguments(void **state)
{
    fx *f = *state;
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(probs[0], 1, &d), NJ_OK);
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    assert_int_equal(nj_warmup(NULL, &d, 1, &o, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_warmup(f->ctx, NULL, 1, &o, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_warmup(f->ctx, &d, -1, &o, NULL), NJ_ERR_BAD_ARGUMENT);
    o.struct_size = 4;
    assert_int_equal(nj_warmup(f->ctx, &d, 1, &o, NULL), NJ_ERR_BAD_STRUCT_SIZE);
    nj_warmup_options_init(&o);
    o.flags = 0x40;
    assert_int_equal(nj_warmup(f->ctx, &d, 1, &o, NULL), NJ_ERR_BAD_FLAGS);
    nj_warmup_options_init(&o);
    o.passes = 0x8;
    assert_int_equal(nj_warmup(f->ctx, &d, 1, &o, NULL), NJ_ERR_BAD_ARGUMENT);
    nj_warmup_options_init(&o);
    o.jobs = -2;
    assert_int_equal(nj_warmup(f->ctx, &d, 1, &o, NULL), NJ_ERR_BAD_ARGUMENT);
    nj_warmup_result *r = (nj_warmup_result *)&o;
    int32_t n = 5;
    assert_int_equal(nj_warmup_manifest(f->ctx, NULL, 3, NULL, &r, &n), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_warmup_manifest(f->ctx, "", 0, NULL, &r, &n), NJ_OK);
    assert_int_equal(n, 0);
    nj_warmup_results_free(r);
    /* verification needs a disk cache: a memory-only context cannot promise anything persisted */
    nj_context *mem = emu_context(NULL, NJ_CTX_NO_DISK_CACHE);
    nj_warmup_options_init(&o);
    o.flags = NJ_WARMUP_VERIFY;
    assert_int_equal(nj_warmup(mem, &d, 1, &o, NULL), NJ_ERR_CACHE_IO);
    o.flags = 0;
    o.passes = NJ_PASS_FORWARD;
    nj_warmup_result one;
    assert_int_equal(nj_warmup(mem, &d, 1, &o, &one), NJ_OK); /* warms the memory cache */
    assert_true(one.compiled >= 1);
    nj_context_destroy(mem);
}

/* A context that never compiles cannot warm: each problem fails with NJ_ERR_NOT_CACHED, reported per pass. */
static void test_failure_is_per_problem(void **state)
{
    fx *f = *state;
    nj_context *v = emu_context(f->root, NJ_CTX_NO_COMPILE);
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(probs[1], 1, &d), NJ_OK);
    nj_warmup_result r;
    nj_warmup_options o;
    nj_warmup_options_init(&o);
    assert_int_equal(nj_warmup(v, &d, 1, &o, &r), NJ_ERR_NOT_CACHED);
    assert_int_equal(r.status, NJ_ERR_NOT_CACHED);
    assert_non_null(strstr(r.message, "fwd pass: NJ_ERR_NOT_CACHED"));
    assert_non_null(strstr(r.message, "bwd pass: NJ_ERR_NOT_CACHED"));
    nj_context_destroy(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list_then_served, setup, teardown),
        cmocka_unit_test_setup_teardown(test_generic_included, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_is_per_problem, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
