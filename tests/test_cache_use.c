/* The disk cache as a context uses it (src/kernels.c): an entry that verifies but fails at use is evicted
 * and rebuilt, never served again; a refused cache root is visible to the caller, not only in a log. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"
#include "normjit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROBLEM "rmsnorm f32 *x256 flags=scale"

static nj_context *emu_context(const char *root, uint32_t flags)
{
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = root;
    o.flags = flags;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    assert_string_equal(nj_context_cache_dir(ctx), root);
    return ctx;
}

static nj_status plan_fwd(nj_context *ctx)
{
    nj_problem_desc d;
    assert_int_equal(nj_problem_from_text(PROBLEM, 1, &d), NJ_OK);
    nj_plan *plan = NULL;
    return nj_plan_get(ctx, &d, NJ_PASS_FORWARD, &plan);
}

typedef struct sig_list {
    char *sig[16];
    int n;
} sig_list;

static void collect_sig(void *user, const char *path, const char *sig, uint64_t bytes, int64_t mtime, nj_status s,
                        int removed)
{
    (void)path, (void)bytes, (void)mtime, (void)removed;
    sig_list *l = user;
    if (s == NJ_OK && sig && l->n < 16) l->sig[l->n++] = strdup(sig);
}

static const char garbage[] = "not a shared object: another kernel's bytes would do as well";

/* Every entry rewritten with good checksums around a binary that cannot load (what a forged or
 * mismatched entry looks like once it passed verification). */
static int poison_entries(nj_cache *c)
{
    sig_list l = {{NULL}, 0};
    assert_int_equal(nj_cache_scan(c, 1, collect_sig, &l), NJ_OK);
    for (int i = 0; i < l.n; i++) {
        nj_cache_entry e;
        assert_int_equal(nj_cache_get(c, l.sig[i], "so", &e), NJ_OK);
        assert_int_equal(nj_cache_put(c, l.sig[i], "so", e.meta, garbage, sizeof garbage), NJ_OK);
        nj_cache_entry_free(&e);
        free(l.sig[i]);
    }
    return l.n;
}

static int count_poisoned(nj_cache *c)
{
    sig_list l = {{NULL}, 0};
    assert_int_equal(nj_cache_scan(c, 1, collect_sig, &l), NJ_OK);
    int bad = 0;
    for (int i = 0; i < l.n; i++) {
        nj_cache_entry e;
        assert_int_equal(nj_cache_get(c, l.sig[i], "so", &e), NJ_OK);
        bad += e.payload_size == sizeof garbage && memcmp(e.payload, garbage, sizeof garbage) == 0;
        nj_cache_entry_free(&e);
        free(l.sig[i]);
    }
    return bad;
}

static void test_entry_failing_at_use_rebuilt(void **state)
{
    tc_fixture *f = *state;
    nj_context *ctx = emu_context(f->root, 0);
    assert_int_equal(plan_fwd(ctx), NJ_OK);
    nj_context_destroy(ctx);
    int n = poison_entries(f->c);
    assert_true(n >= 1);
    assert_int_equal(count_poisoned(f->c), n);
    /* a context that never compiles cannot rebuild: it fails, and leaves the entry for one that can */
    ctx = emu_context(f->root, NJ_CTX_NO_COMPILE);
    assert_int_not_equal(plan_fwd(ctx), NJ_OK);
    nj_context_destroy(ctx);
    ctx = emu_context(f->root, 0);
    assert_int_equal(plan_fwd(ctx), NJ_OK);
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.compiles, 1); /* the main kernel, rebuilt */
    assert_int_equal(st.corrupt_entries, 1);
    nj_context_destroy(ctx);
    assert_int_equal(count_poisoned(f->c), n - 1); /* the rebuilt entry replaced the poisoned one */
    /* and it serves a context that never compiles */
    ctx = emu_context(f->root, NJ_CTX_NO_COMPILE);
    assert_int_equal(plan_fwd(ctx), NJ_OK);
    nj_context_destroy(ctx);
}

typedef struct log_seen {
    int warns;
    char last[512];
} log_seen;

static void log_cb(void *user, nj_log_level level, const char *message)
{
    log_seen *s = user;
    if (level != NJ_LOG_WARN) return;
    s->warns++;
    snprintf(s->last, sizeof s->last, "%s", message);
}

static void test_refused_root_visible(void **state)
{
    tc_fixture *f = *state;
    char open_root[PATH_MAX];
    tc_pathf(open_root, "%s/open", f->dir);
    assert_int_equal(mkdir(open_root, 0700), 0);
    assert_int_equal(chmod(open_root, 0777), 0);
    log_seen seen = {0, ""};
    nj_context_options o;
    nj_context_options_init(&o);
    o.backend = NJ_BACKEND_EMULATOR;
    o.cache_dir = open_root;
    o.log_level = NJ_LOG_WARN;
    o.log_fn = log_cb;
    o.log_user = &seen;
    nj_context *ctx = NULL;
    assert_int_equal(nj_context_create(&o, &ctx), NJ_OK);
    assert_string_equal(nj_context_cache_dir(ctx), "");
    nj_cache_stats st = {.struct_size = sizeof st};
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.disk_status, NJ_ERR_CACHE_UNSAFE);
    assert_int_equal(seen.warns, 1);
    assert_non_null(strstr(seen.last, "writable by group or others"));
    nj_context_destroy(ctx);
    ctx = emu_context(f->root, 0);
    assert_int_equal(nj_context_cache_stats(ctx, &st), NJ_OK);
    assert_int_equal(st.disk_status, NJ_OK);
    nj_context_destroy(ctx);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_entry_failing_at_use_rebuilt),
        T(test_refused_root_visible),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
