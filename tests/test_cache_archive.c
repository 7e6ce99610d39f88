/* Tests for moving a warmed cache between machines as one file (src/cache_archive.c): export, import
 * with every entry verified, corrupt archives refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"
#include "cache_impl.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* ---- authentication ---- */

#define ATTACKER_KEY "not the operator's key, but long"

/* Exports the five entries under the fixture's key and returns the archive's bytes. */
static uint8_t *signed_archive(tc_fixture *f, const char *archive, size_t *n)
{
    uint64_t count = 0;
    fill_five(f->c);
    assert_int_equal(nj_cache_export(f->c, archive, &count), NJ_OK);
    assert_int_equal(count, 5);
    return tc_read_file(archive, n);
}

/* Someone without the key builds an archive of entries that pass every checksum, and even copies the
 * key id of a genuine archive into its header: every entry is refused, nothing is stored. */
static void test_forged_archive_fail(void **state)
{
    tc_fixture *f = *state;
    char genuine[PATH_MAX], forged[PATH_MAX], root2[PATH_MAX];
    tc_pathf(genuine, "%s/genuine.njar", f->dir);
    tc_pathf(forged, "%s/forged.njar", f->dir);
    tc_pathf(root2, "%s/root2", f->dir);
    size_t gn = 0, fn = 0;
    uint8_t *g = signed_archive(f, genuine, &gn);
    assert_int_equal(nj_cache_set_key(f->c, ATTACKER_KEY, strlen(ATTACKER_KEY)), NJ_OK);
    uint64_t count = 0, rejected = 0;
    assert_int_equal(nj_cache_export(f->c, forged, &count), NJ_OK);
    uint8_t *fg = tc_read_file(forged, &fn);
    assert_int_equal(fn, gn);
    assert_memory_not_equal(fg + 24, g + 24, 16); /* the key ids differ */
    memcpy(fg + 24, g + 24, 16);
    tc_write_file(forged, fg, fn);
    nj_cache *c2 = NULL;
    assert_int_equal(nj_cache_open(root2, 0, &c2), NJ_OK);
    tc_set_key(c2);
    assert_int_equal(nj_cache_import(c2, forged, &count, &rejected), NJ_ERR_CACHE_UNTRUSTED);
    assert_int_equal(count, 0);
    assert_int_equal(rejected, 5);
    nj_cache_counters k;
    nj_cache_counters_get(c2, &k);
    assert_int_equal(k.untrusted, 5);
    assert_int_equal(k.stores, 0);
    assert_int_equal(count_export_hits(c2), 0);
    /* as exported under the attacker's key (its own key id): refused whole */
    assert_int_equal(nj_cache_export(f->c, forged, &count), NJ_OK);
    assert_int_equal(nj_cache_import(c2, forged, &count, &rejected), NJ_ERR_CACHE_UNTRUSTED);
    assert_non_null(strstr(nj_last_error(), "another key"));
    assert_int_equal(count_export_hits(c2), 0);
    /* the control: the genuine archive imports whole */
    assert_int_equal(nj_cache_import(c2, genuine, &count, &rejected), NJ_OK);
    assert_int_equal(count, 5);
    free(g);
    free(fg);
    nj_cache_close(c2);
}

/* Without a key neither export nor import does anything; an unsigned (format 1) archive is refused. */
static void test_no_key_fail(void **state)
{
    tc_fixture *f = *state;
    char archive[PATH_MAX], root2[PATH_MAX];
    tc_pathf(archive, "%s/cache.njar", f->dir);
    tc_pathf(root2, "%s/root2", f->dir);
    size_t n = 0;
    uint8_t *img = signed_archive(f, archive, &n);
    unsetenv("NORMJIT_CACHE_KEY");
    unsetenv("NORMJIT_CACHE_KEY_FILE");
    nj_cache *c2 = NULL;
    uint64_t count = 9, rejected = 9;
    assert_int_equal(nj_cache_open(root2, 0, &c2), NJ_OK);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_UNTRUSTED);
    assert_int_equal(count, 0);
    assert_non_null(strstr(nj_last_error(), "NORMJIT_CACHE_KEY_FILE"));
    assert_int_equal(nj_cache_export(c2, archive, &count), NJ_ERR_CACHE_UNTRUSTED);
    /* a key from the environment: a key file open to others is refused, a private one works */
    char keyfile[PATH_MAX];
    tc_pathf(keyfile, "%s/key", f->dir);
    tc_write_file(keyfile, TC_KEY, strlen(TC_KEY));
    assert_int_equal(chmod(keyfile, 0644), 0);
    setenv("NORMJIT_CACHE_KEY_FILE", keyfile, 1);
    assert_int_equal(nj_cache_key_from_env(c2), NJ_ERR_CACHE_UNSAFE);
    assert_int_equal(chmod(keyfile, 0600), 0);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_OK);
    assert_int_equal(count, 5);
    unsetenv("NORMJIT_CACHE_KEY_FILE");
    assert_int_equal(nj_cache_set_key(c2, "short", 5), NJ_ERR_BAD_ARGUMENT);
    /* format 1 (unsigned) */
    nj_cache_put_u32(img + 8, 1);
    tc_write_file(archive, img, n);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_UNTRUSTED);
    assert_non_null(strstr(nj_last_error(), "unsigned"));
    free(img);
    nj_cache_close(c2);
}

/* ---- bounds ---- */

static long max_rss_kib(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

/* A frame claiming 1.5 GiB in a sparse file of that size: refused from its length field alone, without
 * allocating or reading it (this used to take 1.5 GB of memory and seconds). */
static void test_huge_frame_fail(void **state)
{
    tc_fixture *f = *state;
    char archive[PATH_MAX], root2[PATH_MAX];
    tc_pathf(archive, "%s/cache.njar", f->dir);
    tc_pathf(root2, "%s/root2", f->dir);
    size_t n = 0;
    uint8_t *img = signed_archive(f, archive, &n);
    const uint64_t huge = 3ull << 29; /* 1.5 GiB */
    uint8_t head[40 + 4 + 5 + 8];
    memcpy(head, img, 40);
    nj_cache_put_u64(head + 16, 1);
    nj_cache_put_u32(head + 40, 5);
    memcpy(head + 44, "cubin", 5);
    nj_cache_put_u64(head + 49, huge);
    tc_write_file(archive, head, sizeof head);
    assert_int_equal(truncate(archive, (off_t)(sizeof head + huge + 32)), 0);
    nj_cache *c2 = NULL;
    assert_int_equal(nj_cache_open(root2, 0, &c2), NJ_OK);
    tc_set_key(c2);
    long before = max_rss_kib();
    uint64_t count = 0, rejected = 0;
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_CORRUPT);
    assert_int_equal(count, 0);
    assert_int_equal(rejected, 1);
    assert_true(max_rss_kib() - before < 16 * 1024); /* the peak grew by less than 16 MiB */
    /* at the bound itself, still refused before anything is read: the file is shorter than claimed */
    nj_cache_put_u64(head + 49, NJ_CACHE_ENTRY_MAX);
    tc_write_file(archive, head, sizeof head);
    assert_int_equal(nj_cache_import(c2, archive, &count, &rejected), NJ_ERR_CACHE_CORRUPT);
    free(img);
    nj_cache_close(c2);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_export_import_roundtrip),
        T(test_import_corrupt_archive_fail),
        T(test_forged_archive_fail),
        T(test_no_key_fail),
        T(test_huge_frame_fail),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
