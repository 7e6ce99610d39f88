/* Tests for the on-disk cache's entries (src/cache.c): format verification, corruption handling, root
 * safety, atomic publish under concurrency and crashes, locks, threads. Eviction and maintenance:
 * test_cache_maint.c; export/import: test_cache_archive.c.
 * Multi-process tests fork inside this program; children report through their exit status. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- basic behaviour ---- */

static void test_put_get_roundtrip(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "layernorm f32 rows=? n=4096 | block=256 vec=4 | tmpl=abc | nvrtc 13.0 | sm_90 | fmt 1";
    uint8_t *p = tc_payload_for(sig, 5000);
    assert_int_equal(nj_cache_put(f->c, sig, TC_EXT, "launch grid=1,1,1", p, 5000), NJ_OK);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(f->c, sig, TC_EXT, &e), NJ_OK);
    assert_string_equal(e.signature, sig);
    assert_string_equal(e.meta, "launch grid=1,1,1");
    assert_int_equal(e.payload_size, 5000);
    assert_memory_equal(e.payload, p, 5000);
    nj_cache_entry_free(&e);
    assert_null(e.payload);
    /* Another ext or signature is a plain miss, not corruption. */
    assert_int_equal(nj_cache_get(f->c, sig, "ptx", &e), NJ_ERR_NOT_CACHED);
    assert_int_equal(nj_cache_get(f->c, "other", TC_EXT, &e), NJ_ERR_NOT_CACHED);
    nj_cache_counters k;
    nj_cache_counters_get(f->c, &k);
    assert_int_equal(k.hits, 1);
    assert_int_equal(k.misses, 2);
    assert_int_equal(k.stores, 1);
    assert_int_equal(k.corrupt, 0);
    /* Layout and modes: <root>/v<format>/<2 hex>/<hash>.cubin, files 0600, dirs 0700. */
    char path[PATH_MAX], dir[PATH_MAX];
    struct stat st;
    tc_entry_path(f->root, sig, TC_EXT, path);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal((size_t)st.st_size, 48 + strlen(sig) + strlen("launch grid=1,1,1") + 5000);
    tc_parent_dir(path, dir);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(stat(f->root, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    free(p);
}

static void test_empty_payload_and_meta(void **state)
{
    tc_fixture *f = *state;
    assert_int_equal(nj_cache_put(f->c, "empty", "so", NULL, NULL, 0), NJ_OK);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(f->c, "empty", "so", &e), NJ_OK);
    assert_string_equal(e.meta, "");
    assert_int_equal(e.payload_size, 0);
    nj_cache_entry_free(&e);
}

static void test_overwrite_replaces(void **state)
{
    tc_fixture *f = *state;
    assert_int_equal(nj_cache_put(f->c, "k", TC_EXT, "one", "aaaa", 4), NJ_OK);
    assert_int_equal(nj_cache_put(f->c, "k", TC_EXT, "two", "bbbbbb", 6), NJ_OK);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(f->c, "k", TC_EXT, &e), NJ_OK);
    assert_string_equal(e.meta, "two");
    assert_memory_equal(e.payload, "bbbbbb", 6);
    nj_cache_entry_free(&e);
    uint64_t bytes = 0, entries = 0;
    assert_int_equal(nj_cache_usage(f->c, &bytes, &entries), NJ_OK);
    assert_int_equal(entries, 1);
    assert_int_equal(bytes, 48 + 1 + 3 + 6);
}

static void test_bad_arguments_fail(void **state)
{
    tc_fixture *f = *state;
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(NULL, "s", TC_EXT, &e), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cache_get(f->c, NULL, TC_EXT, &e), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cache_get(f->c, "s", TC_EXT, NULL), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cache_get(f->c, "", TC_EXT, &e), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cache_get(f->c, "s", "../x", &e), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cache_get(f->c, "s", "", &e), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cache_put(f->c, "s", "CUBIN", NULL, "x", 1), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cache_put(f->c, "s", TC_EXT, NULL, NULL, 3), NJ_ERR_NULL_POINTER);
    assert_int_equal(nj_cache_open(NULL, 0, NULL), NJ_ERR_NULL_POINTER);
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open("", 0, &c), NJ_ERR_BAD_ARGUMENT);
    assert_int_equal(nj_cache_open_ex(f->root, 0, 0x80, &c), NJ_ERR_BAD_FLAGS);
    assert_null(c);
    nj_cache_close(NULL); /* does nothing */
}

static void test_umask_proof_modes(void **state)
{
    tc_fixture *f = *state;
    char root[PATH_MAX];
    tc_pathf(root, "%s/deep/er/root", f->dir);
    mode_t old = umask(0277); /* would strip owner write and give 0500 directories */
    nj_cache *c = NULL;
    nj_status s = nj_cache_open(root, 0, &c);
    if (s == NJ_OK) s = nj_cache_put(c, "umask", TC_EXT, NULL, "x", 1);
    umask(old);
    assert_int_equal(s, NJ_OK);
    char path[PATH_MAX], dir[PATH_MAX];
    struct stat st;
    tc_entry_path(root, "umask", TC_EXT, path);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    tc_parent_dir(path, dir);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    tc_pathf(dir, "%s/deep", f->dir);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_true(tc_get_matches(c, "umask", 0) == 0); /* payload "x" is not tc_payload_for(): a mismatch, not a miss */
    nj_cache_close(c);
}

/* ---- corruption: each case must be a miss, counted, and the entry removed ---- */

static void test_truncated_entry_fail(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "truncated";
    char path[PATH_MAX];
    tc_entry_path(f->root, sig, TC_EXT, path);
    const off_t cuts[] = {1, 10, 47, 48, 48 + 5, -1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        tc_put_sig(f->c, sig, 3000);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        off_t len = cuts[i] >= 0 ? cuts[i] : st.st_size + cuts[i];
        assert_int_equal(truncate(path, len), 0);
        tc_expect_corrupt_miss(f->c, sig, path);
    }
    /* After all that, a fresh put serves again. */
    tc_put_sig(f->c, sig, 3000);
    assert_true(tc_get_matches(f->c, sig, 3000));
}

static void test_zero_length_entry_fail(void **state)
{
    tc_fixture *f = *state;
    char path[PATH_MAX], dir[PATH_MAX];
    tc_entry_path(f->root, "zero", TC_EXT, path);
    tc_parent_dir(path, dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    tc_write_file(path, "", 0);
    tc_expect_corrupt_miss(f->c, "zero", path);
}

static void test_flipped_bit_payload_fail(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "flip-payload";
    char path[PATH_MAX];
    tc_entry_path(f->root, sig, TC_EXT, path);
    size_t n = 0;
    const size_t at[] = {0, 777, 3999}; /* offsets into the payload */
    for (size_t i = 0; i < 3; i++) {
        tc_put_sig(f->c, sig, 4000);
        uint8_t *img = tc_read_file(path, &n);
        img[n - 4000 + at[i]] ^= 0x10;
        tc_write_file(path, img, n);
        free(img);
        tc_expect_corrupt_miss(f->c, sig, path);
    }
}

static void test_flipped_bit_header_fail(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "flip-header";
    char path[PATH_MAX];
    tc_entry_path(f->root, sig, TC_EXT, path);
    for (size_t byte = 0; byte < 48; byte++) { /* every header byte, including both checksums */
        tc_put_sig(f->c, sig, 600);
        size_t n = 0;
        uint8_t *img = tc_read_file(path, &n);
        img[byte] ^= (uint8_t)(1u << (byte % 8));
        tc_write_file(path, img, n);
        free(img);
        tc_expect_corrupt_miss(f->c, sig, path);
    }
    /* A flipped bit in the stored signature or meta text too. */
    tc_put_sig(f->c, sig, 600);
    size_t n = 0;
    uint8_t *img = tc_read_file(path, &n);
    img[48 + 3] ^= 1;
    tc_write_file(path, img, n);
    free(img);
    tc_expect_corrupt_miss(f->c, sig, path);
}

static void test_hash_collision_fail(void **state)
{
    tc_fixture *f = *state;
    /* Simulate two signatures hashing to one name: A's valid entry placed under B's name. */
    char pa[PATH_MAX], pb[PATH_MAX], db[PATH_MAX];
    tc_put_sig(f->c, "signature A", 1000);
    tc_entry_path(f->root, "signature A", TC_EXT, pa);
    tc_entry_path(f->root, "signature B", TC_EXT, pb);
    tc_parent_dir(pb, db);
    mkdir(db, 0700);
    size_t n = 0;
    uint8_t *img = tc_read_file(pa, &n);
    tc_write_file(pb, img, n);
    free(img);
    tc_expect_corrupt_miss(f->c, "signature B", pb);
    assert_true(tc_get_matches(f->c, "signature A", 1000)); /* the real owner is untouched */
    /* A longer/shorter signature sharing a prefix is also no match. */
    img = tc_read_file(pa, &n);
    tc_entry_path(f->root, "signature", TC_EXT, pb);
    tc_parent_dir(pb, db);
    mkdir(db, 0700);
    tc_write_file(pb, img, n);
    free(img);
    tc_expect_corrupt_miss(f->c, "signature", pb);
}

/* Rewrites the header fields of an image and re-seals the header checksum, so only the deeper checks
 * (lengths against the file size, the body checksum) can catch the lie. */
static void reseal(uint8_t *img, uint32_t sig_len, uint32_t meta_len, uint64_t payload_len)
{
    for (int i = 0; i < 4; i++) img[16 + i] = (uint8_t)(sig_len >> (8 * i));
    for (int i = 0; i < 4; i++) img[20 + i] = (uint8_t)(meta_len >> (8 * i));
    for (int i = 0; i < 8; i++) img[24 + i] = (uint8_t)(payload_len >> (8 * i));
    uint64_t h = nj_hash64(img, 40);
    for (int i = 0; i < 8; i++) img[40 + i] = (uint8_t)(h >> (8 * i));
}

static void test_lying_lengths_fail(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "lying";
    char path[PATH_MAX];
    tc_entry_path(f->root, sig, TC_EXT, path);
    const uint32_t sl = (uint32_t)strlen(sig);
    for (int i = 0; i < 5; i++) {
        tc_put_sig(f->c, sig, 100);
        size_t n = 0;
        uint8_t *img = tc_read_file(path, &n);
        const uint32_t ml = (uint32_t)(n - 48 - sl - 100);
        switch (i) {
        case 0: reseal(img, sl, ml, UINT64_MAX); break;         /* payload beyond the file (and wrapping) */
        case 1: reseal(img, sl, UINT32_MAX, 100); break;        /* meta beyond the file */
        case 2: reseal(img, UINT32_MAX, UINT32_MAX, 0); break;  /* both texts beyond */
        case 3: reseal(img, 0, 0, n - 48); break;               /* sums up, but no signature */
        case 4: reseal(img, sl + 1, ml, 99); break;             /* sums up, signature length wrong */
        }
        tc_write_file(path, img, n);
        free(img);
        tc_expect_corrupt_miss(f->c, sig, path);
    }
}

static void test_directory_in_place_fail(void **state)
{
    tc_fixture *f = *state;
    char path[PATH_MAX], inner[PATH_MAX];
    tc_entry_path(f->root, "dir-entry", TC_EXT, path);
    char dir[PATH_MAX];
    tc_parent_dir(path, dir);
    mkdir(dir, 0700);
    mkdir(path, 0700);
    tc_pathf(inner, "%s/junk", path);
    tc_write_file(inner, "junk", 4);
    tc_expect_corrupt_miss(f->c, "dir-entry", path);
    /* put over a directory (no get first) also replaces it. */
    mkdir(path, 0700);
    tc_write_file(inner, "junk", 4);
    tc_put_sig(f->c, "dir-entry", 64);
    assert_true(tc_get_matches(f->c, "dir-entry", 64));
}

static void test_symlink_entry_fail(void **state)
{
    tc_fixture *f = *state;
    char path[PATH_MAX], target[PATH_MAX], dir[PATH_MAX];
    tc_put_sig(f->c, "real", 100);
    tc_entry_path(f->root, "real", TC_EXT, target);
    tc_entry_path(f->root, "linked", TC_EXT, path);
    tc_parent_dir(path, dir);
    mkdir(dir, 0700);
    assert_int_equal(symlink(target, path), 0);
    tc_expect_corrupt_miss(f->c, "linked", path);
    assert_true(tc_exists(target));
}

/* Random damage must never crash and never load: a hit is allowed only for an unchanged image. */
static void test_fuzz_entries(void **state)
{
    tc_fixture *f = *state;
    const char *sig = "fuzz";
    char path[PATH_MAX];
    tc_entry_path(f->root, sig, TC_EXT, path);
    tc_put_sig(f->c, sig, 700);
    size_t n = 0;
    uint8_t *orig = tc_read_file(path, &n);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 600; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint8_t *img = malloc(n + 64);
        memcpy(img, orig, n);
        size_t len = n;
        switch (it % 4) {
        case 0: img[x % n] ^= (uint8_t)(1u << ((x >> 32) % 8)); break;    /* one bit */
        case 1: len = (size_t)(x % n); break;                            /* truncation */
        case 2: for (size_t i = 0; i < 48; i++) img[i] = (uint8_t)(x >> (i % 8 * 8)) ^ (uint8_t)i; break;
        case 3: /* plausible header with random lengths, re-sealed */
            reseal(img, (uint32_t)(x % 64), (uint32_t)((x >> 8) % 4096), (x >> 20) % (2 * n));
            break;
        }
        tc_write_file(path, img, len);
        nj_cache_entry e;
        nj_status s = nj_cache_get(f->c, sig, TC_EXT, &e);
        int same = len == n && memcmp(img, orig, n) == 0;
        assert_int_equal(s, same ? NJ_OK : NJ_ERR_NOT_CACHED);
        if (s == NJ_OK) nj_cache_entry_free(&e);
        free(img);
    }
    free(orig);
}

/* ---- root safety ---- */

static void expect_unsafe(const char *root, const char *why)
{
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(root, 0, &c), NJ_ERR_CACHE_UNSAFE);
    assert_null(c);
    assert_non_null(strstr(nj_last_error(), root)); /* the message names the path */
    assert_non_null(strstr(nj_last_error(), why));  /* and the reason */
}

static void test_root_symlink_refused_fail(void **state)
{
    tc_fixture *f = *state;
    char link[PATH_MAX], slash[PATH_MAX];
    tc_pathf(link, "%s/link", f->dir);
    assert_int_equal(symlink(f->root, link), 0);
    expect_unsafe(link, "symbolic link");
    tc_pathf(slash, "%s/", link); /* a trailing slash must not make lstat follow it */
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(slash, 0, &c), NJ_ERR_CACHE_UNSAFE);
}

static void test_root_writable_by_others_refused_fail(void **state)
{
    tc_fixture *f = *state;
    assert_int_equal(chmod(f->root, 0777), 0);
    expect_unsafe(f->root, "writable by group or others");
    assert_int_equal(chmod(f->root, 0770), 0);
    expect_unsafe(f->root, "writable by group or others");
    assert_int_equal(chmod(f->root, 0755), 0); /* readable by others is fine */
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(f->root, 0, &c), NJ_OK);
    nj_cache_close(c);
}

static void test_root_other_owner_refused_fail(void **state)
{
    tc_fixture *f = *state;
    if (geteuid() != 0) skip(); /* only root can give a directory to another user */
    assert_int_equal(chown(f->root, 65534, 65534), 0);
    expect_unsafe(f->root, "owned by uid 65534");
    assert_int_equal(chown(f->root, 0, 0), 0);
}

static void test_uncreatable_root_fail(void **state)
{
    tc_fixture *f = *state;
    char file[PATH_MAX], root[PATH_MAX];
    tc_pathf(file, "%s/plainfile", f->dir);
    tc_write_file(file, "x", 1);
    tc_pathf(root, "%s/sub/root", file); /* a regular file in the middle of the path */
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open(root, 0, &c), NJ_ERR_CACHE_IO);
    assert_non_null(strstr(nj_last_error(), file));
    assert_int_equal(nj_cache_open(file, 0, &c), NJ_ERR_CACHE_IO); /* the root itself a file */
    assert_non_null(strstr(nj_last_error(), "not a directory"));
}

/* Everything about a read-only root except how it became read-only. Running as root, permission bits do
 * not stop writes and there is no read-only mount to use, so this takes NJ_CACHE_OPEN_READ_ONLY; the
 * next test makes a root truly unwritable by dropping to another uid in a child. */
static void check_read_only_cache(nj_cache *c, const char *root)
{
    assert_true(nj_cache_read_only(c));
    assert_true(tc_get_matches(c, "ro-present", 2000));
    char path[PATH_MAX], dir[PATH_MAX];
    tc_entry_path(root, "ro-absent", TC_EXT, path);
    tc_parent_dir(path, dir);
    uint8_t *p = tc_payload_for("ro-absent", 100);
    assert_int_equal(nj_cache_put(c, "ro-absent", TC_EXT, NULL, p, 100), NJ_ERR_CACHE_IO);
    free(p);
    assert_false(tc_exists(path));
    assert_int_equal(tc_count_prefixed(dir, ".tmp-"), 0);
    uint64_t n = 0, r = 0;
    assert_int_equal(nj_cache_gc(c, 0, &n), NJ_ERR_CACHE_IO);
    assert_int_equal(nj_cache_clear(c), NJ_ERR_CACHE_IO);
    assert_int_equal(nj_cache_import(c, "/nonexistent", &n, &r), NJ_ERR_CACHE_IO);
    assert_true(tc_get_matches(c, "ro-present", 2000)); /* nothing was damaged */
    int fd = -2;
    assert_int_equal(nj_cache_lock(c, "ro-present", 100, &fd), NJ_OK);
    nj_cache_unlock(c, fd);
}

static void test_read_only_flag(void **state)
{
    tc_fixture *f = *state;
    tc_put_sig(f->c, "ro-present", 2000);
    tc_put_sig(f->c, "ro-bad", 2000);
    char bad[PATH_MAX];
    tc_entry_path(f->root, "ro-bad", TC_EXT, bad);
    assert_int_equal(truncate(bad, 100), 0);
    nj_cache *c = NULL;
    assert_int_equal(nj_cache_open_ex(f->root, 0, NJ_CACHE_OPEN_READ_ONLY, &c), NJ_OK);
    check_read_only_cache(c, f->root);
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(c, "ro-bad", TC_EXT, &e), NJ_ERR_NOT_CACHED);
    assert_int_equal(tc_corrupt_count(c), 1);
    assert_true(tc_exists(bad)); /* a read-only root is never modified, bad entries included */
    nj_cache_close(c);
    char missing[PATH_MAX];
    tc_pathf(missing, "%s/never-created", f->dir);
    assert_int_equal(nj_cache_open_ex(missing, 0, NJ_CACHE_OPEN_READ_ONLY, &c), NJ_ERR_CACHE_IO);
    assert_false(tc_exists(missing));
}

/* Child side of the unwritable-root test; returns a nonzero step number on failure. */
static int unwritable_child(const char *root)
{
    if (setgid(65534) != 0 || setuid(65534) != 0) return 1;
    nj_cache *c = NULL;
    if (nj_cache_open(root, 0, &c) != NJ_OK) return 2;
    if (!nj_cache_read_only(c)) return 3;
    if (!tc_get_matches(c, "ro-present", 2000)) return 4;
    if (nj_cache_put(c, "ro-absent", TC_EXT, NULL, "x", 1) != NJ_ERR_CACHE_IO) return 5;
    nj_cache_close(c);
    return 0;
}

static void chown_tree(const char *path, uid_t uid)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "chown -R %u:%u '%s'", (unsigned)uid, (unsigned)uid, path);
    assert_int_equal(system(cmd), 0);
}

static void test_unwritable_root(void **state)
{
    tc_fixture *f = *state;
    if (geteuid() != 0) skip(); /* needs setuid to a second user */
    tc_put_sig(f->c, "ro-present", 2000);
    /* Hand the tree to uid 65534 (so it is that user's own, safe root) without write permission. */
    chown_tree(f->root, 65534);
    assert_int_equal(chmod(f->dir, 0711), 0);
    assert_int_equal(chmod(f->root, 0500), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(unwritable_child(f->root));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    chmod(f->root, 0700);
    chown_tree(f->root, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- crashes and full disks ---- */

static int full_disk_child(nj_cache *c, const char *root)
{
    struct rlimit rl = {8192, 8192};
    signal(SIGXFSZ, SIG_IGN); /* write fails with EFBIG instead of killing us, like ENOSPC would */
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 1;
    uint8_t *p = tc_payload_for("too-big", 65536);
    nj_status s = nj_cache_put(c, "too-big", TC_EXT, NULL, p, 65536);
    free(p);
    if (s != NJ_ERR_CACHE_IO) return 2;
    char path[PATH_MAX], dir[PATH_MAX];
    tc_entry_path(root, "too-big", TC_EXT, path);
    tc_parent_dir(path, dir);
    if (tc_exists(path) || tc_count_prefixed(dir, ".tmp-") != 0) return 3;
    nj_cache_entry e;
    if (nj_cache_get(c, "too-big", TC_EXT, &e) != NJ_ERR_NOT_CACHED) return 4;
    p = tc_payload_for("small", 1000);
    s = nj_cache_put(c, "small", TC_EXT, NULL, p, 1000);
    free(p);
    return s == NJ_OK && tc_get_matches(c, "small", 1000) ? 0 : 5;
}

static void test_full_disk_fail(void **state)
{
    tc_fixture *f = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(full_disk_child(f->c, f->root));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_stale_temp_removed(void **state)
{
    tc_fixture *f = *state;
    tc_put_sig(f->c, "neighbour", 100);
    char path[PATH_MAX], dir[PATH_MAX], stale[PATH_MAX], fresh[PATH_MAX];
    tc_entry_path(f->root, "neighbour", TC_EXT, path);
    tc_parent_dir(path, dir);
    tc_pathf(stale, "%s/.tmp-deadbe", dir);
    tc_pathf(fresh, "%s/.tmp-inflig", dir);
    tc_write_file(stale, "half an entry", 13);
    tc_write_file(fresh, "being written", 13);
    tc_set_mtime_ago(stale, 120);
    uint64_t bytes = 0, entries = 0;
    assert_int_equal(nj_cache_scan(f->c, 1, NULL, NULL), NJ_OK);
    assert_false(tc_exists(stale));
    assert_true(tc_exists(fresh)); /* a live writer's temp file is left alone */
    assert_int_equal(nj_cache_usage(f->c, &bytes, &entries), NJ_OK);
    assert_int_equal(entries, 1); /* temp files are not entries */
    tc_set_mtime_ago(fresh, 61);
    uint64_t ev = 0;
    assert_int_equal(nj_cache_gc(f->c, UINT64_MAX, &ev), NJ_OK);
    assert_false(tc_exists(fresh));
    assert_int_equal(ev, 0);
    assert_true(tc_get_matches(f->c, "neighbour", 100));
}

static int g_hook_pipe = -1;

/* Runs in the child: tell the parent where the temp file is, then wait to be killed. */
static void mid_write_hook(const char *temp_path)
{
    char line[PATH_MAX + 1];
    int n = snprintf(line, sizeof line, "%s\n", temp_path);
    if (write(g_hook_pipe, line, (size_t)n) != n) _exit(9);
    for (;;) pause();
}

static void test_killed_writer(void **state)
{
    tc_fixture *f = *state;
    const size_t big = 8 << 20;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(60); /* dies on its own if the parent fails an assertion before killing it */
        g_hook_pipe = fds[1];
        nj_cache_test_mid_write_hook = mid_write_hook;
        uint8_t *p = tc_payload_for("killed", big);
        nj_cache_put(f->c, "killed", TC_EXT, NULL, p, big);
        _exit(8); /* never reached: the hook waits for SIGKILL */
    }
    close(fds[1]);
    char tmp[PATH_MAX + 1] = {0};
    size_t got = 0;
    while (got < sizeof tmp - 1 && !strchr(tmp, '\n')) {
        ssize_t r = read(fds[0], tmp + got, sizeof tmp - 1 - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fds[0]);
    *strchr(tmp, '\n') = '\0';
    struct stat st;
    assert_int_equal(stat(tmp, &st), 0);
    assert_true(st.st_size > 0 && (size_t)st.st_size < big); /* really half written */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    char path[PATH_MAX];
    tc_entry_path(f->root, "killed", TC_EXT, path);
    assert_false(tc_exists(path)); /* nothing under the final name */
    nj_cache_entry e;
    assert_int_equal(nj_cache_get(f->c, "killed", TC_EXT, &e), NJ_ERR_NOT_CACHED);
    assert_int_equal(tc_corrupt_count(f->c), 0); /* a plain miss: the half file was never seen */
    assert_true(tc_exists(tmp));
    tc_set_mtime_ago(tmp, 120); /* a minute later, the next scan clears it */
    assert_int_equal(nj_cache_scan(f->c, 0, NULL, NULL), NJ_OK);
    assert_false(tc_exists(tmp));
    tc_put_sig(f->c, "killed", 1000);
    assert_true(tc_get_matches(f->c, "killed", 1000));
}

/* ---- many processes warming one manifest ---- */

#define WARM_PROCS 8
#define WARM_SIGS 12
#define WARM_SIZE 3000

static void warm_sig(int i, char out[64]) { snprintf(out, 64, "manifest entry %d | sm_90", i); }

/* One worker: the context's protocol at this level (get, lock, get again, compile, put, unlock). */
static int warm_child(const char *root, const char *log, int seed)
{
    nj_cache *c = NULL;
    if (nj_cache_open(root, 0, &c) != NJ_OK) return 1;
    int logfd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (logfd < 0) return 2;
    for (int k = 0; k < WARM_SIGS; k++) {
        int i = (k * 5 + seed * 7) % WARM_SIGS; /* 5 is coprime with 12: every child visits all, in its own order */
        char sig[64];
        warm_sig(i, sig);
        if (tc_get_matches(c, sig, WARM_SIZE)) continue;
        int fd = -1;
        if (nj_cache_lock(c, sig, 20000, &fd) != NJ_OK) return 3;
        if (!tc_get_matches(c, sig, WARM_SIZE)) {
            char line[80];
            int n = snprintf(line, sizeof line, "%s\n", sig);
            if (write(logfd, line, (size_t)n) != n) return 4;
            usleep(3000); /* a compile takes a while: widen the window for a second compiler */
            uint8_t *p = tc_payload_for(sig, WARM_SIZE);
            nj_status s = nj_cache_put(c, sig, TC_EXT, "meta", p, WARM_SIZE);
            free(p);
            if (s != NJ_OK) return 5;
        }
        nj_cache_unlock(c, fd);
    }
    close(logfd);
    nj_cache_close(c);
    return 0;
}


static void test_eight_processes_warm_once(void **state)
{
    tc_fixture *f = *state;
    char log[PATH_MAX];
    tc_pathf(log, "%s/compile.log", f->dir);
    pid_t pids[WARM_PROCS];
    for (int p = 0; p < WARM_PROCS; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            alarm(120); /* a deadlock fails the test instead of hanging it */
            _exit(warm_child(f->root, log, p));
        }
    }
    for (int p = 0; p < WARM_PROCS; p++) {
        int status = 0;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    size_t n = 0;
    char *text = (char *)tc_read_file(log, &n);
    assert_non_null(text);
    for (int i = 0; i < WARM_SIGS; i++) {
        char sig[64], line[80];
        warm_sig(i, sig);
        snprintf(line, sizeof line, "%s\n", sig);
        int times = 0;
        for (size_t at = 0; at + strlen(line) <= n; at++) times += memcmp(text + at, line, strlen(line)) == 0;
        assert_int_equal(times, 1); /* compiled exactly once across all processes */
        assert_true(tc_get_matches(f->c, sig, WARM_SIZE));
    }
    free(text);
    tc_tally t = {0, 0};
    assert_int_equal(nj_cache_scan(f->c, 1, tc_tally_visit, &t), NJ_OK);
    assert_int_equal(t.ok, WARM_SIGS);
    assert_int_equal(t.bad, 0);
}

static void test_lock_timeout_fail(void **state)
{
    tc_fixture *f = *state;
    int a = -1, b = -1;
    assert_int_equal(nj_cache_lock(f->c, "locked", 1000, &a), NJ_OK);
    assert_true(a >= 0);
    uint64_t t0 = nj_now_ns();
    /* flock conflicts between two open files even in one process, as between processes. */
    assert_int_equal(nj_cache_lock(f->c, "locked", 150, &b), NJ_ERR_LOCK_TIMEOUT);
    uint64_t waited_ms = (nj_now_ns() - t0) / 1000000;
    assert_true(waited_ms >= 150 && waited_ms < 2000);
    assert_int_equal(b, -1);
    assert_int_equal(nj_cache_lock(f->c, "another key", 0, &b), NJ_OK); /* locks are per key */
    nj_cache_unlock(f->c, b);
    nj_cache_unlock(f->c, a);
    assert_int_equal(nj_cache_lock(f->c, "locked", 0, &b), NJ_OK);
    nj_cache_unlock(f->c, b);
    char lock[PATH_MAX], hash[33];
    nj_hash_hex("locked", 6, hash);
    tc_pathf(lock, "%s/v%d/locks/%s.lock", f->root, NJ_CACHE_FORMAT, hash);
    struct stat st;
    assert_int_equal(stat(lock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

static void test_default_root(void **state)
{
    (void)state;
    const char *names[] = {"NORMJIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
    char *saved[3];
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
    }
    setenv("NORMJIT_CACHE_DIR", "/a/env", 1);
    setenv("XDG_CACHE_HOME", "/b/xdg", 1);
    setenv("HOME", "/c/home", 1);
    char *r = nj_cache_default_root("/explicit");
    assert_string_equal(r, "/explicit");
    free(r);
    r = nj_cache_default_root(NULL);
    assert_string_equal(r, "/a/env");
    free(r);
    unsetenv("NORMJIT_CACHE_DIR");
    r = nj_cache_default_root("");
    assert_string_equal(r, "/b/xdg/normjit");
    free(r);
    setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, as the XDG spec says */
    r = nj_cache_default_root(NULL);
    assert_string_equal(r, "/c/home/.cache/normjit");
    free(r);
    for (int i = 0; i < 3; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
}

/* ---- threads sharing one handle ---- */

typedef struct thread_arg {
    nj_cache *c;
    int id, failures, gets;
} thread_arg;

static void *thread_worker(void *p)
{
    thread_arg *a = p;
    char sig[32];
    for (int round = 0; round < 200; round++) {
        snprintf(sig, sizeof sig, "threaded %d", (round * 3 + a->id) % 10);
        nj_cache_entry e;
        a->gets++;
        nj_status s = nj_cache_get(a->c, sig, TC_EXT, &e);
        if (s == NJ_OK) {
            uint8_t *want = tc_payload_for(sig, 2000);
            a->failures += e.payload_size != 2000 || memcmp(e.payload, want, 2000) != 0;
            free(want);
            nj_cache_entry_free(&e);
        } else {
            uint8_t *want = tc_payload_for(sig, 2000);
            a->failures += s != NJ_ERR_NOT_CACHED || nj_cache_put(a->c, sig, TC_EXT, "m", want, 2000) != NJ_OK;
            free(want);
        }
    }
    return NULL;
}

static void test_threads_share_handle(void **state)
{
    tc_fixture *f = *state;
    pthread_t th[8];
    thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (thread_arg){f->c, i, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thread_worker, &args[i]), 0);
    }
    int gets = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
        gets += args[i].gets;
    }
    nj_cache_counters k;
    nj_cache_counters_get(f->c, &k);
    assert_int_equal(k.hits + k.misses, (uint64_t)gets);
    assert_int_equal(k.corrupt, 0);
    assert_true(k.stores >= 10);
}

/* ---- repeated reads (the warm-load figure itself is `normjit bench`'s, not a timed test's) ---- */

static void test_repeated_get(void **state)
{
    tc_fixture *f = *state;
    tc_put_sig(f->c, "repeated", 20000);
    for (int i = 0; i < 200; i++) assert_true(tc_get_matches(f->c, "repeated", 20000));
    assert_int_equal(tc_corrupt_count(f->c), 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_put_get_roundtrip),
        T(test_empty_payload_and_meta),
        T(test_overwrite_replaces),
        T(test_bad_arguments_fail),
        T(test_umask_proof_modes),
        T(test_truncated_entry_fail),
        T(test_zero_length_entry_fail),
        T(test_flipped_bit_payload_fail),
        T(test_flipped_bit_header_fail),
        T(test_hash_collision_fail),
        T(test_lying_lengths_fail),
        T(test_directory_in_place_fail),
        T(test_symlink_entry_fail),
        T(test_fuzz_entries),
        T(test_root_symlink_refused_fail),
        T(test_root_writable_by_others_refused_fail),
        T(test_root_other_owner_refused_fail),
        T(test_uncreatable_root_fail),
        T(test_read_only_flag),
        T(test_unwritable_root),
        T(test_full_disk_fail),
        T(test_stale_temp_removed),
        T(test_killed_writer),
        T(test_eight_processes_warm_once),
        T(test_lock_timeout_fail),
        T(test_default_root),
        T(test_threads_share_handle),
        T(test_repeated_get),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
