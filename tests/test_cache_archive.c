/* Tests for moving a warmed cache between machines as one file (src/cache_archive.c): export, import
 * with every entry verified, corrupt archives refused. */
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

/* ---- export / import ---- */

static void fill_five(nj_cache *c)
{
    char sig[32];
    for (int i = 0; i < 5; i++) {
        snprintf(sig, sizeof sig, "export %d", i);
        tc_put_sig(c, sig, 1000 + 100 * (size_t)i);
    }
}

static int count_export_hits(nj_cache *c)
{
    char sig[32];
    int hits = 0;
    for (int i = 0; i < 5; i++) {
        snprintf(sig, sizeof sig, "export %d", i);
        hits += tc_get_matches(c, sig, 1000 + 100 * (size_t)i);
    }
    return hits;
}

static void test_export_import_roundtrip(void **state)
{
    tc_fixture *f = *state;
    fill_five(f->c);
    char archive[PATH_MAX], root2[PATH_MAX];
    tc_pathf(archive, "%s/cache.njar", f->dir);
    tc_pathf(root2, "%s/root2", f->dir);
    uint64_t count = 0, rejected = 9;
    assert_int_equal(nj_cache_export(f->c, archive, &count), NJ_OK);
    assert_int_equal(count, 5);
    struct stat st;
    assert_int_equal(stat(archive, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(tc_count_prefixed(f->dir, "cache.njar.tmp-"), 0);
    nj_cache *c2 = NULL;
    assert_int_equal(nj_cache_open(root2, 0, &c2), NJ_OK);
    tc_set_key(c2);
    assert_int_equal(count_export_hits(c2), 0);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_OK);
    assert_int_equal(count, 5);
    assert_int_equal(rejected, 0);
    assert_int_equal(count_export_hits(c2), 5);
    nj_cache_close(c2);
}

static void test_import_corrupt_archive_fail(void **state)
{
    tc_fixture *f = *state;
    fill_five(f->c);
    char archive[PATH_MAX], root2[PATH_MAX];
    tc_pathf(archive, "%s/cache.njar", f->dir);
    tc_pathf(root2, "%s/root2", f->dir);
    uint64_t count = 0, rejected = 0;
    assert_int_equal(nj_cache_export(f->c, archive, &count), NJ_OK);
    size_t n = 0;
    uint8_t *img = tc_read_file(archive, &n);
    nj_cache *c2 = NULL;
    assert_int_equal(nj_cache_open(root2, 0, &c2), NJ_OK);
    tc_set_key(c2);
    /* A flipped bit in the last entry's payload: its tag no longer verifies, so that entry is refused as
     * untrusted; the others arrive. */
    img[n - 40] ^= 0x40;
    tc_write_file(archive, img, n);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_UNTRUSTED);
    assert_int_equal(count, 4);
    assert_int_equal(rejected, 1);
    assert_int_equal(count_export_hits(c2), 4);
    assert_int_equal(nj_cache_clear(c2), NJ_OK);
    /* Truncated in the middle of an entry: what came before is imported, the status says damaged. */
    img[n - 40] ^= 0x40;
    tc_write_file(archive, img, n - 500);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_CORRUPT);
    assert_int_equal(count, 4);
    assert_int_equal(rejected, 1);
    assert_int_equal(count_export_hits(c2), 4);
    assert_int_equal(nj_cache_clear(c2), NJ_OK);
    /* Not an archive at all. */
    img[0] ^= 1;
    tc_write_file(archive, img, n);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_CORRUPT);
    assert_int_equal(count, 0);
    assert_int_equal(count_export_hits(c2), 0);
    /* Random damage to the framing never crashes and never publishes a bad entry. */
    img[0] ^= 1;
    uint64_t x = 88172645463325252ull;
    for (int it = 0; it < 200; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint8_t saved = img[x % n];
        img[x % n] ^= (uint8_t)(1u << (x >> 40) % 8);
        tc_write_file(archive, img, n);
        nj_cache_import(c2, archive, &count, &rejected);
        img[x % n] = saved;
    }
    tc_tally t = {0, 0};
    assert_int_equal(nj_cache_scan(c2, 1, tc_tally_visit, &t), NJ_OK);
    assert_int_equal(t.bad, 0);
    assert_true(t.ok <= 5);
    free(img);
    nj_cache_close(c2);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_export_import_roundtrip),
        T(test_import_corrupt_archive_fail),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
