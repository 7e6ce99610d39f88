/* Shared by the cache suites (test_cache*.c): a fresh cache root per test, entries written and read back
 * through the documented layout, corruption and timing helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* snprintf into a PATH_MAX buffer (vsnprintf: the paths here are short, no truncation analysis needed). */
void tc_pathf(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && n < PATH_MAX);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void tc_rm_rf(const char *path) { nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

void tc_set_key(nj_cache *c) { assert_int_equal(nj_cache_set_key(c, TC_KEY, strlen(TC_KEY)), NJ_OK); }

int tc_setup(void **state)
{
    tc_fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    tc_pathf(f->dir, "/tmp/njcache-test-XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    tc_pathf(f->root, "%s/root", f->dir);
    if (nj_cache_open(f->root, 0, &f->c) != NJ_OK) return -1;
    tc_set_key(f->c);
    *state = f;
    return 0;
}

int tc_teardown(void **state)
{
    tc_fixture *f = *state;
    nj_cache_close(f->c);
    tc_rm_rf(f->dir);
    free(f);
    return 0;
}

/* The test computes entry paths itself from the documented layout, not through the cache's own helper. */
void tc_entry_path(const char *root, const char *sig, const char *ext, char out[PATH_MAX])
{
    char hash[33];
    nj_hash_hex(sig, strlen(sig), hash);
    tc_pathf(out, "%s/v%d/%.2s/%s.%s", root, NJ_CACHE_FORMAT, hash, hash, ext);
}

/* Deterministic payload bytes for a signature (xorshift seeded by its hash). */
uint8_t *tc_payload_for(const char *sig, size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    uint64_t x = nj_hash64(sig, strlen(sig)) | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
    return p;
}

void tc_put_sig(nj_cache *c, const char *sig, size_t n)
{
    uint8_t *p = tc_payload_for(sig, n);
    char meta[128];
    snprintf(meta, sizeof meta, "launches=1 sig_len=%zu", strlen(sig));
    assert_int_equal(nj_cache_put(c, sig, TC_EXT, meta, p, n), NJ_OK);
    free(p);
}

/* 1 when the entry is a hit with exactly the payload tc_put_sig stored. */
int tc_get_matches(nj_cache *c, const char *sig, size_t n)
{
    nj_cache_entry e;
    if (nj_cache_get(c, sig, TC_EXT, &e) != NJ_OK) return 0;
    uint8_t *p = tc_payload_for(sig, n);
    int ok = e.payload_size == n && memcmp(e.payload, p, n) == 0 && strcmp(e.signature, sig) == 0;
    free(p);
    nj_cache_entry_free(&e);
    return ok;
}

uint8_t *tc_read_file(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    return buf;
}

void tc_write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, n), (ssize_t)n);
    close(fd);
}

int tc_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

uint64_t tc_corrupt_count(nj_cache *c)
{
    nj_cache_counters k;
    nj_cache_counters_get(c, &k);
    return k.corrupt;
}

/* Counts names starting with prefix in dir. */
int tc_count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

void tc_parent_dir(const char *path, char out[PATH_MAX])
{
    tc_pathf(out, "%s", path);
    *strrchr(out, '/') = '\0';
}

void tc_set_mtime_ago(const char *path, int seconds)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= seconds;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

/* Expects a corrupt-entry miss: NOT_CACHED, corrupt counter +1, and the file gone. */
void tc_expect_corrupt_miss(nj_cache *c, const char *sig, const char *path)
{
    uint64_t before = tc_corrupt_count(c);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(c, sig, TC_EXT, &e), NJ_ERR_NOT_CACHED);
    assert_null(e.payload);
    assert_int_equal(tc_corrupt_count(c), before + 1);
    assert_false(tc_exists(path));
}

void tc_tally_visit(void *user, const char *path, const char *sig, uint64_t bytes, int64_t mtime, nj_status s,
                    int removed)
{
    (void)path, (void)bytes, (void)mtime, (void)removed;
    tc_tally *t = user;
    if (s == NJ_OK && sig != NULL)
        t->ok++;
    else
        t->bad++;
}
