/* Tests for the cache's maintenance (src/cache_maint.c): least-recently-used eviction under the size
 * bound, listing and verifying every entry, usage and clear. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- eviction ---- */

static void set_entry_mtime(const char *root, const char *sig, time_t when)
{
    char path[PATH_MAX];
    tc_entry_path(root, sig, TC_EXT, path);
    struct timespec ts[2] = {{when, 0}, {when, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_eviction_order(void **state)
{
    tc_fixture *f = *state;
    /* Four equal entries; the bound holds three. */
    const char *sigs[] = {"evict-A", "evict-B", "evict-C", "evict-D"};
    char path[PATH_MAX];
    struct stat st;
    nj_cache *c = NULL;
    tc_put_sig(f->c, sigs[0], 1000);
    tc_entry_path(f->root, sigs[0], TC_EXT, path);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(nj_cache_open(f->root, 3 * (uint64_t)st.st_size + 10, &c), NJ_OK);
    tc_put_sig(c, sigs[1], 1000);
    tc_put_sig(c, sigs[2], 1000);
    time_t now = time(NULL);
    set_entry_mtime(f->root, sigs[0], now - 300); /* oldest by creation ... */
    set_entry_mtime(f->root, sigs[1], now - 200);
    set_entry_mtime(f->root, sigs[2], now - 100);
    assert_true(tc_get_matches(c, sigs[0], 1000)); /* ... but a hit makes A the most recently used */
    tc_put_sig(c, sigs[3], 1000);
    nj_cache_counters k;
    nj_cache_counters_get(c, &k);
    assert_int_equal(k.evictions, 1);
    tc_entry_path(f->root, sigs[1], TC_EXT, path);
    assert_false(tc_exists(path)); /* B: least recently used */
    assert_true(tc_get_matches(c, sigs[0], 1000));
    assert_true(tc_get_matches(c, sigs[2], 1000));
    assert_true(tc_get_matches(c, sigs[3], 1000));
    /* gc to a smaller bound removes in LRU order: C (touched before A and D by the gets above? no: all
     * three were just read, so give them explicit ages). */
    set_entry_mtime(f->root, sigs[0], now - 30);
    set_entry_mtime(f->root, sigs[2], now - 10);
    set_entry_mtime(f->root, sigs[3], now - 20);
    uint64_t ev = 0;
    assert_int_equal(nj_cache_gc(c, 2 * (uint64_t)st.st_size, &ev), NJ_OK);
    assert_int_equal(ev, 1);
    tc_entry_path(f->root, sigs[0], TC_EXT, path);
    assert_false(tc_exists(path));
    assert_int_equal(nj_cache_gc(c, 0, &ev), NJ_OK);
    assert_int_equal(ev, 2);
    uint64_t bytes = 1, entries = 1;
    assert_int_equal(nj_cache_usage(c, &bytes, &entries), NJ_OK);
    assert_int_equal(bytes, 0);
    assert_int_equal(entries, 0);
    nj_cache_close(c);
}

static void test_bound_keeps_newest(void **state)
{
    tc_fixture *f = *state;
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(f->root, 20000, &c), NJ_OK);
    char sig[32];
    for (int i = 0; i < 30; i++) {
        snprintf(sig, sizeof sig, "bounded %d", i);
        tc_put_sig(c, sig, 3000);
        uint64_t bytes = 0;
        assert_int_equal(nj_cache_usage(c, &bytes, NULL), NJ_OK);
        assert_true(bytes <= 20000);
        assert_true(tc_get_matches(c, sig, 3000)); /* the entry just stored survives its own eviction pass */
    }
    /* An entry bigger than the whole bound is still kept right after its put. */
    tc_put_sig(c, "huge", 30000);
    assert_true(tc_get_matches(c, "huge", 30000));
    nj_cache_close(c);
}

/* ---- maintenance ---- */

static void test_scan_verify_removes_bad(void **state)
{
    tc_fixture *f = *state;
    char sig[32], path[PATH_MAX], other[PATH_MAX], dir[PATH_MAX];
    for (int i = 0; i < 5; i++) {
        snprintf(sig, sizeof sig, "scan %d", i);
        tc_put_sig(f->c, sig, 500);
    }
    tc_entry_path(f->root, "scan 1", TC_EXT, path);
    assert_int_equal(truncate(path, 60), 0);
    /* scan 2's valid entry copied under a name it does not hash to. */
    tc_entry_path(f->root, "scan 2", TC_EXT, path);
    tc_entry_path(f->root, "never stored", TC_EXT, other);
    tc_parent_dir(other, dir);
    mkdir(dir, 0700);
    size_t n = 0;
    uint8_t *img = tc_read_file(path, &n);
    tc_write_file(other, img, n);
    free(img);
    tc_tally t = {0, 0};
    assert_int_equal(nj_cache_scan(f->c, 0, tc_tally_visit, &t), NJ_OK); /* listing: header-level only */
    assert_int_equal(t.ok, 5);  /* the misnamed copy has a good header */
    assert_int_equal(t.bad, 1); /* the truncated one does not */
    t.ok = t.bad = 0;
    assert_int_equal(nj_cache_scan(f->c, 1, tc_tally_visit, &t), NJ_OK);
    assert_int_equal(t.ok, 4);
    assert_int_equal(t.bad, 2);
    assert_false(tc_exists(other));
    assert_int_equal(tc_corrupt_count(f->c), 2);
    t.ok = t.bad = 0;
    assert_int_equal(nj_cache_scan(f->c, 1, tc_tally_visit, &t), NJ_OK);
    assert_int_equal(t.ok, 4);
    assert_int_equal(t.bad, 0);
}

static void add_size(const char *root, const char *sig, uint64_t *sum)
{
    char path[PATH_MAX];
    struct stat st;
    tc_entry_path(root, sig, TC_EXT, path);
    assert_int_equal(stat(path, &st), 0);
    *sum += (uint64_t)st.st_size;
}

static void test_usage_and_clear(void **state)
{
    tc_fixture *f = *state;
    uint64_t sum = 0, bytes = 0, entries = 0;
    char sig[32];
    for (int i = 0; i < 7; i++) {
        snprintf(sig, sizeof sig, "usage %d", i);
        tc_put_sig(f->c, sig, 100 * (size_t)i);
        add_size(f->root, sig, &sum);
    }
    assert_int_equal(nj_cache_usage(f->c, &bytes, &entries), NJ_OK);
    assert_int_equal(entries, 7);
    assert_int_equal(bytes, sum);
    assert_int_equal(nj_cache_clear(f->c), NJ_OK);
    assert_int_equal(nj_cache_usage(f->c, &bytes, &entries), NJ_OK);
    assert_int_equal(entries, 0);
    assert_int_equal(bytes, 0);
    assert_false(tc_get_matches(f->c, "usage 3", 300));
    tc_put_sig(f->c, "usage 3", 300); /* still usable after a clear */
    assert_true(tc_get_matches(f->c, "usage 3", 300));
}

/* ---- symlinks below the root ---- */

/* A shard directory replaced by a symlink to a directory outside the root, holding a valid-looking
 * entry and a bystander file: lookups never read through the link, clear and gc never delete there,
 * and a put replaces the link with a real directory instead of writing through it. */
static void test_symlinked_shard(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "shard link";
    char entry[PATH_MAX], shard[PATH_MAX], outside[PATH_MAX], planted[PATH_MAX], bystander[PATH_MAX];
    tc_put_sig(f->c, sig, 400);
    tc_entry_path(f->root, sig, TC_EXT, entry);
    tc_parent_dir(entry, shard);
    tc_pathf(outside, "%s/outside", f->dir);
    assert_int_equal(rename(shard, outside), 0); /* the real entry now lies outside the root */
    assert_int_equal(symlink(outside, shard), 0);
    tc_pathf(planted, "%s/%s", outside, strrchr(entry, '/') + 1);
    tc_pathf(bystander, "%s/bystander", outside);
    tc_write_file(bystander, "keep me", 7);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(f->c, sig, TC_EXT, &e), NJ_ERR_NOT_CACHED);
    assert_true(tc_exists(planted)); /* judged without following, deleted nowhere */
    tc_tally t = {0, 0};
    assert_int_equal(nj_cache_scan(f->c, 1, tc_tally_visit, &t), NJ_OK);
    assert_int_equal(t.ok + t.bad, 0); /* the walk does not enter the link */
    uint64_t evicted = 9;
    assert_int_equal(nj_cache_gc(f->c, 0, &evicted), NJ_OK);
    assert_int_equal(evicted, 0);
    assert_int_equal(nj_cache_clear(f->c), NJ_OK);
    assert_true(tc_exists(planted));
    assert_true(tc_exists(bystander));
    /* the writable walk removed the link itself; a put makes a real shard */
    assert_int_equal(symlink(outside, shard), 0);
    tc_put_sig(f->c, sig, 400);
    struct stat st;
    assert_int_equal(lstat(shard, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_true(tc_get_matches(f->c, sig, 400));
    assert_int_equal(tc_count_prefixed(outside, ""), 4); /* ., .., the planted entry, the bystander */
}

/* The version directory itself a symlink: the cache refuses to walk it (and so to clear through it). */
static void test_symlinked_version_dir_fail(void **state)
{
    tc_fixture *f = *state;
    tc_put_sig(f->c, "vdir link", 300);
    char vdir[PATH_MAX], outside[PATH_MAX];
    tc_pathf(vdir, "%s/v%d", f->root, NJ_CACHE_FORMAT);
    tc_pathf(outside, "%s/outside-v", f->dir);
    assert_int_equal(rename(vdir, outside), 0);
    assert_int_equal(symlink(outside, vdir), 0);
    assert_int_equal(nj_cache_clear(f->c), NJ_ERR_CACHE_UNSAFE);
    assert_false(tc_get_matches(f->c, "vdir link", 300));
    char moved[PATH_MAX], hash[33];
    nj_hash_hex("vdir link", 9, hash);
    tc_pathf(moved, "%s/%.2s/%s.%s", outside, hash, hash, TC_EXT);
    assert_true(tc_exists(moved));
    nj_cache *c2 = NULL;
    assert_int_equal(nj_cache_open(f->root, 0, &c2), NJ_ERR_CACHE_UNSAFE);
}

/* verify on a read-only handle reports the bad entry as not removed, and leaves it. */
typedef struct removed_tally {
    int bad, removed;
} removed_tally;

static void removed_visit(void *user, const char *path, const char *sig, uint64_t bytes, int64_t mtime, nj_status s,
                          int removed)
{
    (void)path, (void)sig, (void)bytes, (void)mtime;
    removed_tally *t = user;
    t->bad += s != NJ_OK;
    t->removed += removed;
}

static void test_verify_read_only_leaves_bad(void **state)
{
    tc_fixture *f = *state;
    char entry[PATH_MAX];
    tc_put_sig(f->c, "bad on ro", 300);
    tc_entry_path(f->root, "bad on ro", TC_EXT, entry);
    size_t n = 0;
    uint8_t *img = tc_read_file(entry, &n);
    img[n - 1] ^= 1;
    tc_write_file(entry, img, n);
    free(img);
    nj_cache *ro = NULL;
    assert_int_equal(nj_cache_open_ex(f->root, 0, NJ_CACHE_OPEN_READ_ONLY, &ro), NJ_OK);
    removed_tally t = {0, 0};
    assert_int_equal(nj_cache_scan(ro, 1, removed_visit, &t), NJ_OK);
    assert_int_equal(t.bad, 1);
    assert_int_equal(t.removed, 0);
    assert_true(tc_exists(entry));
    nj_cache_close(ro);
    t = (removed_tally){0, 0};
    assert_int_equal(nj_cache_scan(f->c, 1, removed_visit, &t), NJ_OK);
    assert_int_equal(t.bad, 1);
    assert_int_equal(t.removed, 1);
    assert_false(tc_exists(entry));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_eviction_order),
        T(test_bound_keeps_newest),
        T(test_scan_verify_removes_bad),
        T(test_usage_and_clear),
        T(test_symlinked_shard),
        T(test_symlinked_version_dir_fail),
        T(test_verify_read_only_leaves_bad),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
