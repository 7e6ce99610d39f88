/* Tests of the cache's per-key locks (src/cache_lock.c): a stopped holder does not stall a waiter, the
 * wait bound comes from the environment, lock files go with their entries and with gc/clear, and a lock
 * file unlinked while waited on is not taken twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache_fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void lock_path(const tc_fixture *f, const char *sig, char out[PATH_MAX])
{
    char hash[33];
    nj_hash_hex(sig, strlen(sig), hash);
    tc_pathf(out, "%s/v%d/locks/%s.lock", f->root, NJ_CACHE_FORMAT, hash);
}

/* A child takes the lock of sig and stops itself (SIGSTOP), as a process frozen by a debugger or a
 * cgroup freezer would; returns its pid once it is stopped. */
static pid_t stopped_holder(const tc_fixture *f, const char *sig)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        nj_cache *c = NULL;
        int fd = -1;
        alarm(120); /* never outlive the test */
        if (nj_cache_open(f->root, 0, &c) != NJ_OK || nj_cache_lock(c, sig, 1000, &fd) != NJ_OK) _exit(3);
        raise(SIGSTOP);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, WUNTRACED), pid);
    assert_true(WIFSTOPPED(st));
    return pid;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
}

/* The waiter gives up on a stopped holder at once (not after its 60 s bound), with a message naming the
 * stopped process, and counts a lock fallback; once the holder dies, the lock is free. */
static void test_stopped_holder_fail(void **state)
{
    tc_fixture *f = *state;
    pid_t pid = stopped_holder(f, "frozen");
    int fd = -1;
    assert_int_equal(nj_cache_lock(f->c, "frozen", 60000, &fd), NJ_ERR_LOCK_TIMEOUT);
    assert_int_equal(fd, -1);
    char want[64];
    snprintf(want, sizeof want, "process %ld, which is stopped", (long)pid);
    assert_non_null(strstr(nj_last_error(), want));
    nj_cache_counters k;
    nj_cache_counters_get(f->c, &k);
    assert_int_equal(k.lock_fallbacks, 1);
    reap(pid);
    assert_int_equal(nj_cache_lock(f->c, "frozen", 0, &fd), NJ_OK); /* a dead holder's flock is gone */
    assert_true(fd >= 0);
    nj_cache_unlock(f->c, fd);
}

/* A holder that is alive and running is waited for up to the bound, which counts as a fallback too. */
static void test_live_holder_times_out_fail(void **state)
{
    tc_fixture *f = *state;
    int a = -1, b = -1;
    assert_int_equal(nj_cache_lock(f->c, "busy", 0, &a), NJ_OK);
    assert_int_equal(nj_cache_lock(f->c, "busy", 100, &b), NJ_ERR_LOCK_TIMEOUT);
    assert_non_null(strstr(nj_last_error(), "still held by another process after 100 ms"));
    nj_cache_counters k;
    nj_cache_counters_get(f->c, &k);
    assert_int_equal(k.lock_fallbacks, 1);
    nj_cache_unlock(f->c, a);
}

static void test_timeout_from_env(void **state)
{
    (void)state;
    unsetenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS");
    assert_int_equal(nj_cache_lock_timeout_ms(), NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS);
    setenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS", "250", 1);
    assert_int_equal(nj_cache_lock_timeout_ms(), 250);
    setenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS", "0", 1);
    assert_int_equal(nj_cache_lock_timeout_ms(), 0);
    setenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS", "-5", 1); /* nonsense falls back to the default */
    assert_int_equal(nj_cache_lock_timeout_ms(), NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS);
    setenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS", "12abc", 1);
    assert_int_equal(nj_cache_lock_timeout_ms(), NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS);
    unsetenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS");
}

/* The holder's record: this process's pid, then its start time. */
static void test_holder_record(void **state)
{
    tc_fixture *f = *state;
    int fd = -1;
    assert_int_equal(nj_cache_lock(f->c, "stamped", 0, &fd), NJ_OK);
    char path[PATH_MAX];
    lock_path(f, "stamped", path);
    size_t n = 0;
    char *rec = (char *)tc_read_file(path, &n);
    long pid = 0;
    unsigned long long start = 0;
    assert_int_equal(sscanf(rec, "%ld %llu", &pid, &start), 2);
    assert_int_equal(pid, (long)getpid());
    assert_true(start > 0);
    free(rec);
    nj_cache_unlock(f->c, fd);
}

/* gc and clear remove idle lock files but never one that is held. */
static void test_gc_and_clear_remove_idle_locks(void **state)
{
    tc_fixture *f = *state;
    char idle[PATH_MAX], held[PATH_MAX];
    lock_path(f, "idle", idle);
    lock_path(f, "held", held);
    int a = -1, b = -1;
    assert_int_equal(nj_cache_lock(f->c, "idle", 0, &a), NJ_OK);
    nj_cache_unlock(f->c, a);
    assert_int_equal(nj_cache_lock(f->c, "held", 0, &b), NJ_OK);
    uint64_t evicted = 0;
    assert_int_equal(nj_cache_gc(f->c, 1 << 30, &evicted), NJ_OK);
    assert_false(tc_exists(idle));
    assert_true(tc_exists(held));
    nj_cache_unlock(f->c, b);
    assert_int_equal(nj_cache_clear(f->c), NJ_OK);
    assert_false(tc_exists(held));
}

/* An entry removed (evicted, or bad) takes its idle lock file with it. */
static void test_lock_goes_with_entry(void **state)
{
    tc_fixture *f = *state;
    char lock[PATH_MAX], entry[PATH_MAX];
    lock_path(f, "entry with a lock", lock);
    tc_entry_path(f->root, "entry with a lock", TC_EXT, entry);
    int fd = -1;
    assert_int_equal(nj_cache_lock(f->c, "entry with a lock", 0, &fd), NJ_OK);
    tc_put_sig(f->c, "entry with a lock", 500);
    nj_cache_unlock(f->c, fd);
    assert_true(tc_exists(lock));
    uint64_t evicted = 0;
    assert_int_equal(nj_cache_gc(f->c, 0, &evicted), NJ_OK);
    assert_int_equal(evicted, 1);
    assert_false(tc_exists(entry));
    assert_false(tc_exists(lock));
    /* a bad entry found by a lookup */
    assert_int_equal(nj_cache_lock(f->c, "entry with a lock", 0, &fd), NJ_OK);
    tc_put_sig(f->c, "entry with a lock", 500);
    nj_cache_unlock(f->c, fd);
    size_t n = 0;
    uint8_t *img = tc_read_file(entry, &n);
    img[n - 1] ^= 1;
    tc_write_file(entry, img, n);
    free(img);
    tc_expect_corrupt_miss(f->c, "entry with a lock", entry);
    assert_false(tc_exists(lock));
}

/* A lock file unlinked (by gc in another process) while a waiter sits on it: the waiter notices after
 * taking it that it holds a dead inode and takes the current file instead, so two holders never meet. */
static void test_replaced_lock_file(void **state)
{
    tc_fixture *f = *state;
    char path[PATH_MAX];
    lock_path(f, "swapped", path);
    int a = -1, b = -1;
    assert_int_equal(nj_cache_lock(f->c, "swapped", 0, &a), NJ_OK);
    struct stat before, after;
    assert_int_equal(fstat(a, &before), 0);
    /* the holder's file is unlinked and a fresh one made in its place (what gc then a new locker do) */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(nj_cache_lock(f->c, "swapped", 0, &b), NJ_OK);
    assert_int_equal(fstat(b, &after), 0);
    assert_true(before.st_ino != after.st_ino);
    assert_int_equal(stat(path, &after), 0);
    nj_cache_unlock(f->c, b);
    nj_cache_unlock(f->c, a);
}

/* The locks directory replaced by a symlink: locking never writes through it. */
static void test_locks_dir_symlink(void **state)
{
    tc_fixture *f = *state;
    char locks[PATH_MAX], outside[PATH_MAX];
    tc_pathf(locks, "%s/v%d/locks", f->root, NJ_CACHE_FORMAT);
    tc_pathf(outside, "%s/outside", f->dir);
    assert_int_equal(mkdir(outside, 0700), 0);
    tc_rm_rf(locks);
    assert_int_equal(symlink(outside, locks), 0);
    int fd = -1;
    assert_int_equal(nj_cache_lock(f->c, "through a link", 0, &fd), NJ_OK);
    nj_cache_unlock(f->c, fd);
    struct stat st;
    assert_int_equal(lstat(locks, &st), 0);
    assert_true(S_ISDIR(st.st_mode)); /* the link was replaced by a real directory */
    assert_int_equal(tc_count_prefixed(outside, ""), 2); /* only . and .. */
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, tc_setup, tc_teardown)
    const struct CMUnitTest tests[] = {
        T(test_stopped_holder_fail),
        T(test_live_holder_times_out_fail),
        T(test_timeout_from_env),
        T(test_holder_record),
        T(test_gc_and_clear_remove_idle_locks),
        T(test_lock_goes_with_entry),
        T(test_replaced_lock_file),
        T(test_locks_dir_symlink),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
