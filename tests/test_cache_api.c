/* The public cache administration API (src/cache_api.c, nj_cachedir_* in include/normjit.h), used only
 * through the public header: entries a context wrote are listed, measured, verified (a damaged one is found
 * and removed), trimmed, exported to a signed archive and imported elsewhere, and cleared. */
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
#include <sys/stat.h>

#define KEY "cache api test key 0123456789abcdef"

typedef struct fx {
    char dir[PATH_MAX - 64], root[PATH_MAX], other[PATH_MAX];
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_true(nj_tu_make_temp_dir("cache_api", f->dir, sizeof f->dir));
    snprintf(f->root, sizeof f->root, "%s/root", f->dir);
    snprintf(f->other, sizeof f->other, "%s/other", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    nj_tu_remove_tree(f->dir);
    free(f);
    return 0;
}

static nj_context *emu_context(const char *root)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = root;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    return ctx;
}

/* Fills a root with the entries of one problem's forward pass, through a context as a user would. */
static void populate(const char *root)
{
    nj_context *ctx = emu_context(root);
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 *x256 flags=scale", 1, &d), NJ_OK);
    nj_plan *plan = NULL;
    assert_int_equal(nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan), NJ_OK);
    nj_context_destroy(ctx);
}

typedef struct tally {
    int n, bad, removed, hashes_ok, with_sig;
    uint64_t bytes;
    char first_path[PATH_MAX];
} tally;

static int count_entry(void *user, const nj_cachedir_entry *e)
{
    tally *t = user;
    if (!t->n) snprintf(t->first_path, sizeof t->first_path, "%s", e->path);
    t->n++;
    t->bytes += e->bytes;
    t->bad += e->status != NJ_OK;
    t->removed += e->removed != 0;
    t->with_sig += e->signature && strstr(e->signature, "kind=row") != NULL;
    size_t h = strspn(e->hash, "0123456789abcdef");
    t->hashes_ok += h == 32 && e->hash[h] == '\0' && strstr(e->path, e->hash) && e->kind[0];
    struct stat st;
    if (stat(e->path, &st) != 0 || (uint64_t)st.st_size != e->bytes) t->hashes_ok = -1000; /* size is the file's */
    return 0;
}

static int stop_at_first(void *user, const nj_cachedir_entry *e)
{
    (void)e;
    ++*(int *)user;
    return 1;
}

static void test_list_stats_agree(void **state)
{
    fx *f = *state;
    populate(f->root);
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    assert_string_equal(nj_cachedir_root(d), f->root);
    tally t = {0};
    assert_int_equal(nj_cachedir_list(d, count_entry, &t), NJ_OK);
    assert_true(t.n >= 1);
    assert_int_equal(t.hashes_ok, t.n);
    assert_true(t.with_sig >= 1); /* the problem's own entry names it; library modules need not */
    nj_cachedir_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_OK);
    assert_int_equal(st.entries, (uint64_t)t.n);
    assert_int_equal(st.bytes, t.bytes);
    assert_true(st.oldest > 0 && st.oldest <= st.newest);
    assert_int_equal(st.read_only, 0);
    int seen = 0;
    assert_int_equal(nj_cachedir_list(d, stop_at_first, &seen), NJ_OK);
    assert_int_equal(seen, 1);
    nj_cachedir_close(d);
}

/* A byte flipped in the middle of an entry: verify reports exactly that one and removes it; a read-only
 * handle reports it and leaves it. */
static void test_verify_finds_damage(void **state)
{
    fx *f = *state;
    populate(f->root);
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    tally t = {0};
    assert_int_equal(nj_cachedir_list(d, count_entry, &t), NJ_OK);
    FILE *fp = fopen(t.first_path, "r+b");
    assert_non_null(fp);
    struct stat st;
    assert_int_equal(stat(t.first_path, &st), 0);
    assert_int_equal(fseek(fp, st.st_size / 2, SEEK_SET), 0);
    int c = fgetc(fp);
    assert_int_equal(fseek(fp, st.st_size / 2, SEEK_SET), 0);
    fputc(c ^ 0x5a, fp);
    fclose(fp);

    nj_cachedir *ro = NULL;
    assert_int_equal(nj_cachedir_open(f->root, NJ_CACHEDIR_READ_ONLY, &ro), NJ_OK);
    uint64_t checked = 0, bad = 0;
    tally r = {0};
    assert_int_equal(nj_cachedir_verify(ro, count_entry, &r, &checked, &bad), NJ_OK);
    assert_int_equal(bad, 1);
    assert_int_equal(r.removed, 0);
    assert_int_equal(stat(t.first_path, &st), 0);
    nj_cachedir_close(ro);

    tally v = {0};
    assert_int_equal(nj_cachedir_verify(d, count_entry, &v, &checked, &bad), NJ_OK);
    assert_int_equal(checked, (uint64_t)t.n);
    assert_int_equal(bad, 1);
    assert_int_equal(v.bad, 1);
    assert_int_equal(v.removed, 1);
    assert_int_not_equal(stat(t.first_path, &st), 0);
    assert_int_equal(nj_cachedir_verify(d, NULL, NULL, &checked, &bad), NJ_OK);
    assert_int_equal(checked, (uint64_t)t.n - 1);
    assert_int_equal(bad, 0);
    nj_cachedir_close(d);
}

static void test_trim_and_clear(void **state)
{
    fx *f = *state;
    populate(f->root);
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    nj_cachedir_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_OK);
    uint64_t evicted = 99;
    assert_int_equal(nj_cachedir_trim(d, st.bytes, &evicted), NJ_OK); /* at the bound already */
    assert_int_equal(evicted, 0);
    assert_int_equal(nj_cachedir_trim(d, st.bytes - 1, &evicted), NJ_OK);
    assert_true(evicted >= 1);
    nj_cachedir_stats after = {.struct_size = sizeof after};
    assert_int_equal(nj_cachedir_stats_get(d, &after), NJ_OK);
    assert_int_equal(after.entries, st.entries - evicted);
    assert_true(after.bytes <= st.bytes - 1);
    assert_int_equal(after.evictions, evicted);
    assert_int_equal(nj_cachedir_clear(d), NJ_OK);
    assert_int_equal(nj_cachedir_stats_get(d, &after), NJ_OK);
    assert_int_equal(after.entries, 0);
    assert_int_equal(after.bytes, 0);
    nj_cachedir_close(d);
}

static void test_export_import(void **state)
{
    fx *f = *state;
    populate(f->root);
    char archive[PATH_MAX + 16];
    snprintf(archive, sizeof archive, "%s/all.njar", f->dir);
    nj_cachedir *d = NULL, *o = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    nj_cachedir_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_OK);
    uint64_t n = 0, m = 7, rej = 7;
    unsetenv("NORMJIT_CACHE_KEY");
    unsetenv("NORMJIT_CACHE_KEY_FILE");
    assert_int_equal(nj_cachedir_export(d, archive, &n), NJ_ERR_CACHE_UNTRUSTED); /* no key: refused */
    assert_int_equal(nj_cachedir_set_key(d, "short", 5), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cachedir_set_key(d, KEY, strlen(KEY)), NJ_OK);
    assert_int_equal(nj_cachedir_export(d, archive, &n), NJ_OK);
    assert_int_equal(n, st.entries);

    assert_int_equal(nj_cachedir_open(f->other, 0, &o), NJ_OK);
    assert_int_equal(nj_cachedir_set_key(o, "another key, not the exporter's", 31), NJ_OK);
    assert_int_equal(nj_cachedir_import(o, archive, &m, &rej), NJ_ERR_CACHE_UNTRUSTED);
    assert_int_equal(m, 0); /* another key: the whole archive is refused at its header */
    assert_non_null(strstr(nj_last_error(), "another key"));
    nj_cachedir_stats ost = {.struct_size = sizeof ost};
    assert_int_equal(nj_cachedir_stats_get(o, &ost), NJ_OK);
    assert_int_equal(ost.entries, 0);
    assert_int_equal(nj_cachedir_set_key(o, KEY, strlen(KEY)), NJ_OK);
    assert_int_equal(nj_cachedir_import(o, archive, &m, &rej), NJ_OK);
    assert_int_equal(m, n);
    assert_int_equal(rej, 0);
    assert_int_equal(nj_cachedir_stats_get(o, &ost), NJ_OK);
    assert_int_equal(ost.entries, st.entries);
    assert_int_equal(ost.bytes, st.bytes);
    nj_cachedir_close(o);
    nj_cachedir_close(d);

    /* the imported root serves a context that never compiles */
    nj_context_options opt;
    nj_context_options_init(&opt);
    opt.backend = NJ_BACKEND_EMULATOR;
    opt.cache_dir = f->other;
    opt.flags = NJ_CTX_NO_COMPILE;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&opt, &ctx), NJ_OK);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 *x256 flags=scale", 1, &p), NJ_OK);
    nj_plan *plan = NULL;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    nj_context_destroy(ctx);
}

/* A handle borrowed from a context sees the context's root and its counters. */
static void test_from_context(void **state)
{
    fx *f = *state;
    nj_context *ctx = emu_context(f->root);
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_from_context(ctx, &d), NJ_OK);
    assert_string_equal(nj_cachedir_root(d), nj_context_cache_dir(ctx));
    nj_cachedir_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_OK);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.stores, 0);
    nj_problem_desc p;
    assert_int_equal(nj_problem_from_text("rmsnorm f32 *x256 flags=scale", 1, &p), NJ_OK);
    nj_plan *plan = NULL;
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_OK);
    assert_true(st.entries >= 1);
    assert_int_equal(st.stores, st.entries); /* this context stored every entry */
    nj_cachedir_close(d); /* the context's cache stays open */
    assert_int_equal(nj_plan_get(ctx, &p, NJ_PASS_FORWARD, &plan), NJ_OK);
    nj_context_destroy(ctx);

    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.flags = NJ_CTX_NO_DISK_CACHE;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    d = (nj_cachedir *)&o;
    assert_int_equal(nj_cachedir_from_context(ctx, &d), NJ_ERR_CACHE_IO);
    assert_null(d);
    nj_context_destroy(ctx);
}

static void test_bad_arguments(void **state)
{
    fx *f = *state;
    nj_cachedir *d = NULL;
    assert_int_equal(nj_cachedir_open(f->root, 0x80, &d), NJ_ERR_BAD_FLAGS);
    assert_null(d);
    assert_int_equal(nj_cachedir_open(f->root, 0, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_from_context(NULL, &d), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_list(NULL, count_entry, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_trim(NULL, 0, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_clear(NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_export(NULL, "x", NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cachedir_import(NULL, "x", NULL, NULL), NJ_ERR_NULL_POINTER);
    assert_string_equal(nj_cachedir_root(NULL), "");
    nj_cachedir_close(NULL);
    /* a root open to others is refused with its reason */
    char open_root[PATH_MAX + 8];
    snprintf(open_root, sizeof open_root, "%s/open", f->dir);
    assert_int_equal(mkdir(open_root, 0777), 0);
    assert_int_equal(chmod(open_root, 0777), 0);
    assert_int_equal(nj_cachedir_open(open_root, 0, &d), NJ_ERR_CACHE_UNSAFE);
    assert_non_null(strstr(nj_last_error(), open_root));
    assert_int_equal(nj_cachedir_open(f->root, 0, &d), NJ_OK);
    nj_cachedir_stats st = {.struct_size = 8};
    assert_int_equal(nj_cachedir_stats_get(d, &st), NJ_ERR_BAD_STRUCT_SIZE);
    assert_int_equal(nj_cachedir_import(d, "/nonexistent/archive", NULL, NULL) != NJ_OK, 1);
    nj_cachedir_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list_stats_agree, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_finds_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_and_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_from_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
