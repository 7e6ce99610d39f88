/* Shared by the cache suites (test_cache.c, test_cache_maint.c, test_cache_archive.c). Include after
 * cmocka.h. */
#ifndef NJ_CACHE_FIXTURE_H
#define NJ_CACHE_FIXTURE_H

#include "cache.h"

#include <limits.h>
#include <stdint.h>
#include <time.h>

#define TC_EXT "cubin"
/* The archive key tc_setup gives its cache (nj_cache_set_key); a second cache that imports needs it too. */
#define TC_KEY "normjit test key 0123456789abcdef"
void tc_set_key(nj_cache *c);

typedef struct tc_fixture {
    char dir[PATH_MAX];  /* mkdtemp directory, removed afterwards */
    char root[PATH_MAX]; /* dir/root: the cache root */
    nj_cache *c;
} tc_fixture;

/* cmocka setup/teardown: a fresh tc_fixture with an open cache at dir/root. */
int tc_setup(void **state);
int tc_teardown(void **state);

void tc_pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tc_rm_rf(const char *path);
/* Entry path from the documented layout, not through the cache's own helper. */
void tc_entry_path(const char *root, const char *sig, const char *ext, char out[PATH_MAX]);
/* Deterministic payload bytes of a signature (malloc'd). */
uint8_t *tc_payload_for(const char *sig, size_t n);
void tc_put_sig(nj_cache *c, const char *sig, size_t n);
/* 1 when the entry is a hit with exactly the payload tc_put_sig stored. */
int tc_get_matches(nj_cache *c, const char *sig, size_t n);
uint8_t *tc_read_file(const char *path, size_t *n);
void tc_write_file(const char *path, const void *data, size_t n);
int tc_exists(const char *path);
uint64_t tc_corrupt_count(nj_cache *c);
/* Names starting with prefix in dir. */
int tc_count_prefixed(const char *dir, const char *prefix);
void tc_parent_dir(const char *path, char out[PATH_MAX]);
void tc_set_mtime_ago(const char *path, int seconds);
/* A corrupt-entry miss: NOT_CACHED, corrupt counter +1, the file gone. */
void tc_expect_corrupt_miss(nj_cache *c, const char *sig, const char *path);

/* nj_cache_scan visitor counting good and bad entries. */
typedef struct tc_tally {
    int ok, bad;
} tc_tally;
void tc_tally_visit(void *user, const char *path, const char *sig, uint64_t bytes, int64_t mtime, nj_status s,
                    int removed);

#endif
