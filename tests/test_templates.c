/* The template set (src/templates.c): embedded lookup, the NORMJIT_TEMPLATE_DIR folder replacing it
 * file by file and in the hash, and names that would leave the folder. test_codegen renders through it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernel_abi.h"
#include "problem.h"
#include "templates.h"

static char tmpdir[256];

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    mkdir(path, 0755); /* one level (emu/) is all these tests need */
    *slash = '/';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nj_test_templates_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    unsetenv(NJ_TPL_DIR_ENV);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_embedded_lookup(void **state)
{
    (void)state;
    unsetenv(NJ_TPL_DIR_ENV);
    const char *text = NULL;
    size_t len = 0;
    assert_int_equal(nj_template_get("emu/emu.h", &text, &len), NJ_OK);
    assert_int_equal(len, strlen(text));
    assert_non_null(strstr(text, "NJ_KERNEL"));
    /* every listed file is found under its own name with its own bytes */
    for (size_t i = 0; i < nj_embedded_template_count; i++) {
        assert_int_equal(nj_template_get(nj_embedded_templates[i].name, &text, &len), NJ_OK);
        assert_ptr_equal(text, nj_embedded_templates[i].text);
        assert_int_equal(len, nj_embedded_templates[i].len);
    }
    assert_null(nj_embedded_templates[nj_embedded_template_count].name); /* the list's terminator */
    assert_int_equal(nj_template_get("nope.cu", &text, &len), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "nope.cu"));
    assert_int_equal(nj_template_get(NULL, &text, &len), NJ_ERR_NULL_POINTER);
}

static void test_folder_override(void **state)
{
    (void)state;
    unsetenv(NJ_TPL_DIR_ENV);
    char embedded[33];
    snprintf(embedded, sizeof embedded, "%s", nj_template_set_hash());
    put("emu/emu.h", "/* folder emu.h */\n");
    setenv(NJ_TPL_DIR_ENV, tmpdir, 1);
    const char *text;
    size_t len;
    /* the backends' header comes from the folder too (the emulator reads emu/emu.h through here) */
    assert_int_equal(nj_template_get("emu/emu.h", &text, &len), NJ_OK);
    assert_string_equal(text, "/* folder emu.h */\n");
    char one[33];
    snprintf(one, sizeof one, "%s", nj_template_set_hash());
    assert_string_not_equal(one, embedded);
    put("emu/emu.h", "/* folder emu.h, edited */\n");
    assert_string_not_equal(nj_template_set_hash(), one);
    assert_int_equal(nj_template_get("emu/../../etc/passwd", &text, &len), NJ_ERR_TEMPLATE);
    assert_non_null(strstr(nj_last_error(), "leaves the folder"));
    assert_int_equal(nj_template_get("/etc/passwd", &text, &len), NJ_ERR_TEMPLATE);
    unsetenv(NJ_TPL_DIR_ENV);
    assert_string_equal(nj_template_set_hash(), embedded);
}

/* kargs.cuh is generated from kernel_abi.h and problem.h: its size, offsets and operand numbers are the
 * host's, and the prelude includes it. */
static void test_generated_abi(void **state)
{
    (void)state;
    unsetenv(NJ_TPL_DIR_ENV);
    const char *text, *prelude;
    size_t len;
    assert_int_equal(nj_template_get("kargs.cuh", &text, &len), NJ_OK);
    size_t i = 0;
    while (i < nj_embedded_template_count && strcmp(nj_embedded_templates[i].name, "kargs.cuh") != 0) i++;
    assert_true(i < nj_embedded_template_count);
    assert_true(nj_embedded_templates[i].generated);
    char want[160];
    snprintf(want, sizeof want, "static_assert(sizeof(nj_kargs) == %zu,", sizeof(nj_kargs));
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "__builtin_offsetof(nj_kargs, lib) == %zu,", offsetof(nj_kargs, lib));
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "long long bstride[%d];", NJ_OPD_COUNT);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "#define NJ_OPD_STATS %d\n", NJ_OPD_STATS);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "#define NJ_OPD_RESOUT %d\n", NJ_OPD_RESOUT);
    assert_non_null(strstr(text, want));
    assert_null(strstr(text, "{{")); /* it is rendered as a template: nothing to expand */
    assert_int_equal(nj_template_get("prelude.cuh", &prelude, &len), NJ_OK);
    assert_non_null(strstr(prelude, "include(\"kargs.cuh\")"));
    assert_null(strstr(prelude, "struct nj_kargs {")); /* no second, hand-kept copy */
}

/* A folder without kargs.cuh still renders (the embedded one is taken, and hashed with the folder); a
 * folder's own kargs.cuh is ignored: the ABI is the binary's. */
static void test_generated_beside_folder(void **state)
{
    (void)state;
    unsetenv(NJ_TPL_DIR_ENV);
    const char *embedded_text, *text;
    size_t len;
    assert_int_equal(nj_template_get("kargs.cuh", &embedded_text, &len), NJ_OK);
    put("only.cu", "x\n");
    setenv(NJ_TPL_DIR_ENV, tmpdir, 1);
    assert_int_equal(nj_template_get("kargs.cuh", &text, &len), NJ_OK);
    assert_ptr_equal(text, embedded_text);
    char without[33];
    snprintf(without, sizeof without, "%s", nj_template_set_hash());
    put("kargs.cuh", "struct nj_kargs { int tampered; };\n");
    assert_int_equal(nj_template_get("kargs.cuh", &text, &len), NJ_OK);
    assert_ptr_equal(text, embedded_text);
    assert_string_equal(nj_template_set_hash(), without);
    unsetenv(NJ_TPL_DIR_ENV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_lookup),
        cmocka_unit_test(test_folder_override),
        cmocka_unit_test(test_generated_abi),
        cmocka_unit_test(test_generated_beside_folder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
