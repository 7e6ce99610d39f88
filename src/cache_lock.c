/* Per-key cross-process locks of the on-disk cache: <vdir>/locks/<hash>.lock, taken with flock.
 * A dead holder releases its flock with its last fd; a stopped one (SIGSTOP, a debugger) would hold it
 * for ever, so the holder writes "pid starttime" into the file and a waiter that finds that process
 * stopped gives up at once instead of waiting out the bound. Lock files go with their entries and with
 * gc/clear; a waiter whose file was unlinked meanwhile notices it (inode check) and opens the new one. */
#include "cache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

int32_t nj_cache_lock_timeout_ms(void)
{
    const char *env = getenv("NORMJIT_CACHE_LOCK_TIMEOUT_MS");
    if (!env || !*env) return NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS;
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (*end || v < 0 || v > INT32_MAX) return NJ_CACHE_LOCK_TIMEOUT_DEFAULT_MS;
    return (int32_t)v;
}

/* State letter and start time (clock ticks after boot) of a process from /proc; 0 when it is gone. */
static int nj_proc_state(long pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    *state = p[2];
    p += 2;
    for (int field = 3; field < 22; field++) { /* starttime is field 22 of proc(5) */
        p = strchr(p, ' ');
        if (!p) return 0;
        p++;
    }
    *start = strtoull(p, NULL, 10);
    return 1;
}

/* Stamps the lock file with this process's pid and start time. */
static void nj_lock_stamp(int fd)
{
    char state;
    unsigned long long start = 0;
    if (!nj_proc_state((long)getpid(), &state, &start)) return;
    char rec[64];
    int n = snprintf(rec, sizeof rec, "%ld %llu\n", (long)getpid(), start);
    if (ftruncate(fd, 0) == 0 && pwrite(fd, rec, (size_t)n, 0) != n) (void)ftruncate(fd, 0);
}

/* The holder named in the lock file, when that very process (same start time) is stopped. */
static long nj_lock_holder_stopped(int fd)
{
    char rec[64];
    ssize_t n = pread(fd, rec, sizeof rec - 1, 0);
    if (n <= 0) return 0;
    rec[n] = '\0';
    long pid = 0;
    unsigned long long start = 0, now_start = 0;
    char state = 0;
    if (sscanf(rec, "%ld %llu", &pid, &start) != 2 || pid <= 0 || pid == (long)getpid()) return 0;
    if (!nj_proc_state(pid, &state, &now_start) || now_start != start) return 0;
    return (state == 'T' || state == 't') ? pid : 0;
}

/* Opens the lock file below the locks directory dfd; -1 with errno. */
static int nj_lock_open(nj_cache *c, int dfd, const char *name)
{
    if (c->read_only) return openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    int fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd >= 0) (void)fchmod(fd, 0600);
    return fd;
}

/* 1 when fd is still the file the name points to (gc/clear may have unlinked it). */
static int nj_lock_current(int dfd, const char *name, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* 0: taken; 1: the file was replaced, open it again; else a failure status already set. */
static int nj_lock_wait(nj_cache *c, int dfd, const char *name, int fd, int32_t timeout_ms, uint64_t deadline,
                        nj_status *s)
{
    uint64_t next_check = 0;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) return nj_lock_current(dfd, name, fd) ? 0 : 1;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            *s = nj_fail(NJ_ERR_CACHE_IO, "cache lock %s/locks/%s: %s", c->vdir, name, strerror(errno));
            return -1;
        }
        uint64_t now = nj_now_ns();
        long pid = 0;
        if (now >= next_check) {
            next_check = now + 50 * 1000000ull; /* /proc is read every 50 ms, not every 2 */
            pid = nj_lock_holder_stopped(fd);
        }
        if (pid || (timeout_ms >= 0 && now >= deadline)) {
            nj_cache_count(c, NJ_CC_LOCK_FALLBACKS, 1);
            if (pid)
                *s = nj_fail(NJ_ERR_LOCK_TIMEOUT, "cache lock %s/locks/%s is held by process %ld, which is stopped",
                             c->vdir, name, pid);
            else
                *s = nj_fail(NJ_ERR_LOCK_TIMEOUT, "cache lock %s/locks/%s still held by another process after %d ms",
                             c->vdir, name, (int)timeout_ms);
            return -1;
        }
        struct timespec ts = {0, 2 * 1000000L}; /* short: the holder is usually a compile of tens of ms */
        nanosleep(&ts, NULL);
    }
}

nj_status nj_cache_lock(nj_cache *c, const char *signature, int32_t timeout_ms, int *lock_fd)
{
    NJ_RETURN_IF(!c || !signature || !lock_fd, NJ_ERR_NULL_POINTER, "nj_cache_lock: NULL argument");
    *lock_fd = -1;
    size_t n = strlen(signature);
    NJ_RETURN_IF(n == 0, NJ_ERR_BAD_ARGUMENT, "nj_cache_lock: empty signature");
    char hash[33], name[48];
    nj_hash_hex(signature, n, hash);
    snprintf(name, sizeof name, "%s.lock", hash);
    uint64_t deadline = nj_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    for (int attempt = 0; attempt < 100; attempt++) {
        int dfd = nj_cache_sub_fd(c, "locks", 1);
        if (dfd < 0 && c->read_only) return NJ_OK; /* nothing to take: this process cannot publish anyway */
        NJ_RETURN_IF(dfd < 0, NJ_ERR_CACHE_IO, "cache lock directory %s/locks: %s", c->vdir, strerror(errno));
        int fd = nj_lock_open(c, dfd, name);
        if (fd < 0) {
            int e = errno;
            close(dfd);
            if (c->read_only) return NJ_OK;
            return nj_fail(NJ_ERR_CACHE_IO, "cache lock %s/locks/%s: %s", c->vdir, name, strerror(e));
        }
        nj_status s = NJ_OK;
        int r = nj_lock_wait(c, dfd, name, fd, timeout_ms, deadline, &s);
        close(dfd);
        if (r == 0) {
            if (!c->read_only) nj_lock_stamp(fd);
            *lock_fd = fd;
            return NJ_OK;
        }
        close(fd);
        if (r < 0) return s;
    }
    return nj_fail(NJ_ERR_LOCK_TIMEOUT, "cache lock %s/locks/%s kept being replaced", c->vdir, name);
}

void nj_cache_unlock(nj_cache *c, int lock_fd)
{
    (void)c;
    if (lock_fd < 0) return;
    flock(lock_fd, LOCK_UN);
    close(lock_fd);
}

/* Unlinks one lock file when no process holds it (taking it proves that); a link or odd file in a
 * lock's place goes too. 1 when removed. */
static int nj_lock_remove_at(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ELOOP && unlinkat(dfd, name, 0) == 0;
    struct stat st;
    int removed = 0;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) removed = nj_cache_remove_at(dfd, name) == 0;
    else if (flock(fd, LOCK_EX | LOCK_NB) == 0 && nj_lock_current(dfd, name, fd)) removed = unlinkat(dfd, name, 0) == 0;
    close(fd); /* releases the flock */
    return removed;
}

void nj_cache_drop_lock(nj_cache *c, const char *hash)
{
    if (c->read_only) return;
    int dfd = nj_cache_sub_fd(c, "locks", 0);
    if (dfd < 0) return;
    char name[48];
    snprintf(name, sizeof name, "%.32s.lock", hash);
    (void)nj_lock_remove_at(dfd, name);
    close(dfd);
}

void nj_cache_sweep_locks(nj_cache *c, uint64_t *removed)
{
    if (c->read_only) return;
    int dfd = nj_cache_sub_fd(c, "locks", 0);
    if (dfd < 0) return;
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0) close(dup_fd);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".lock") != 0) continue;
        if (nj_lock_remove_at(dfd, e->d_name) && removed) (*removed)++;
    }
    if (d) closedir(d);
    close(dfd);
}
