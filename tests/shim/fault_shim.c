/* LD_PRELOAD fault injection for the tool tests: makes writes below one directory fail as a full or a
 * read-only file system would, without root (CI runs as root, where chmod stops nothing, and mounting a
 * small tmpfs needs privileges). Settings, read from the environment:
 *   NJ_FAULT_PATH    absolute directory; only paths below it are affected
 *   NJ_FAULT_MODE    "enospc": write() to files below the path fails with ENOSPC once NJ_FAULT_BUDGET
 *                    bytes were written there (a small disk filling up);
 *                    "erofs": creating, writing, renaming or removing below the path fails with EROFS
 * Calls through openat/open/write/mkdirat/renameat/unlinkat are covered: what src/cache*.c uses. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static atomic_llong nj_spent;

static const char *nj_mode(void) { return getenv("NJ_FAULT_MODE"); }

static int nj_below(const char *full)
{
    const char *dir = getenv("NJ_FAULT_PATH");
    size_t n = dir ? strlen(dir) : 0;
    return n && strncmp(full, dir, n) == 0 && (full[n] == '/' || full[n] == '\0');
}

/* The absolute path of name relative to dirfd (or of fd itself when name is NULL). */
static int nj_resolve(int dirfd, const char *name, char out[PATH_MAX])
{
    if (name && name[0] == '/') return snprintf(out, PATH_MAX, "%s", name) < PATH_MAX ? 0 : -1;
    char link[64], dir[PATH_MAX];
    ssize_t n;
    if (dirfd == AT_FDCWD) {
        if (!getcwd(dir, sizeof dir)) return -1;
        n = (ssize_t)strlen(dir);
    } else {
        snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
        n = readlink(link, dir, sizeof dir - 1);
        if (n < 0) return -1;
        dir[n] = '\0';
    }
    if (!name) return snprintf(out, PATH_MAX, "%s", dir) < PATH_MAX ? 0 : -1;
    return snprintf(out, PATH_MAX, "%s/%s", dir, name) < PATH_MAX ? 0 : -1;
}

static int nj_erofs_at(int dirfd, const char *name)
{
    char full[PATH_MAX];
    const char *m = nj_mode();
    return m && !strcmp(m, "erofs") && nj_resolve(dirfd, name, full) == 0 && nj_below(full);
}

#define NJ_REAL(name, type) static type real_##name; if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

typedef int (*nj_openat_fn)(int, const char *, int, ...);
typedef int (*nj_open_fn)(const char *, int, ...);

static int nj_open_common(int dirfd, const char *name, int flags)
{
    if ((flags & (O_CREAT | O_WRONLY | O_RDWR | O_TRUNC)) && nj_erofs_at(dirfd, name)) {
        errno = EROFS;
        return -1;
    }
    return 0;
}

int openat(int dirfd, const char *name, int flags, ...)
{
    NJ_REAL(openat, nj_openat_fn);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (nj_open_common(dirfd, name, flags) != 0) return -1;
    return real_openat(dirfd, name, flags, mode);
}

int openat64(int dirfd, const char *name, int flags, ...) __attribute__((alias("openat")));

int open(const char *name, int flags, ...)
{
    NJ_REAL(open, nj_open_fn);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    if (nj_open_common(AT_FDCWD, name, flags) != 0) return -1;
    return real_open(name, flags, mode);
}

int open64(const char *name, int flags, ...) __attribute__((alias("open")));

typedef ssize_t (*nj_write_fn)(int, const void *, size_t);

ssize_t write(int fd, const void *buf, size_t n)
{
    NJ_REAL(write, nj_write_fn);
    const char *m = nj_mode();
    char full[PATH_MAX];
    if (m && fd > 2 && nj_resolve(fd, NULL, full) == 0 && nj_below(full)) {
        if (!strcmp(m, "erofs")) {
            errno = EROFS;
            return -1;
        }
        const char *b = getenv("NJ_FAULT_BUDGET");
        long long budget = b ? atoll(b) : 0;
        if (!strcmp(m, "enospc") && atomic_fetch_add(&nj_spent, (long long)n) + (long long)n > budget) {
            errno = ENOSPC;
            return -1;
        }
    }
    return real_write(fd, buf, n);
}

typedef int (*nj_mkdirat_fn)(int, const char *, mode_t);
typedef int (*nj_renameat_fn)(int, const char *, int, const char *);
typedef int (*nj_unlinkat_fn)(int, const char *, int);

int mkdirat(int dirfd, const char *name, mode_t mode)
{
    NJ_REAL(mkdirat, nj_mkdirat_fn);
    if (nj_erofs_at(dirfd, name)) {
        errno = EROFS;
        return -1;
    }
    return real_mkdirat(dirfd, name, mode);
}

int renameat(int a, const char *an, int b, const char *bn)
{
    NJ_REAL(renameat, nj_renameat_fn);
    if (nj_erofs_at(a, an) || nj_erofs_at(b, bn)) {
        errno = EROFS;
        return -1;
    }
    return real_renameat(a, an, b, bn);
}

int unlinkat(int dirfd, const char *name, int flags)
{
    NJ_REAL(unlinkat, nj_unlinkat_fn);
    if (nj_erofs_at(dirfd, name)) {
        errno = EROFS;
        return -1;
    }
    return real_unlinkat(dirfd, name, flags);
}
