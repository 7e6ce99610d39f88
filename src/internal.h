/* Shared internals: export macro, error macros, per-thread error detail, logging, small utilities.
 * Every src/ file includes this first. Names shared across files are nj_ prefixed and hidden
 * (-fvisibility=hidden); only NJ_API names in include/normjit.h leave the library. */
#ifndef NJ_INTERNAL_H
#define NJ_INTERNAL_H

#include "normjit.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NJ_HIDDEN __attribute__((visibility("hidden")))
#define NJ_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define NJ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Records a failure: status plus a formatted detail, kept per thread, readable with nj_last_error().
 * Returns the status so call sites can write `return nj_fail(NJ_ERR_X, "...")`. */
NJ_HIDDEN nj_status nj_fail(nj_status s, const char *fmt, ...) NJ_PRINTF(2, 3);
/* Prepends context to the current detail ("while compiling X: <old detail>") and returns s. */
NJ_HIDDEN nj_status nj_fail_context(nj_status s, const char *fmt, ...) NJ_PRINTF(2, 3);
/* Clears the detail (at the start of each public call). */
NJ_HIDDEN void nj_error_clear(void);

/* Error propagation. NJ_RETURN_IF(cond, status, fmt, ...) fails with a message when cond holds;
 * NJ_TRY(expr) forwards a non-OK status unchanged (the callee already set the detail). */
#define NJ_RETURN_IF(cond, status, ...)          \
    do {                                         \
        if (cond) return nj_fail((status), __VA_ARGS__); \
    } while (0)
#define NJ_TRY(expr)                       \
    do {                                   \
        nj_status nj_try_s_ = (expr);      \
        if (nj_try_s_ != NJ_OK) return nj_try_s_; \
    } while (0)

/* A growable byte/char buffer; the only string builder used across modules. */
typedef struct nj_buf {
    char *data;
    size_t len, cap;
    bool failed; /* an allocation failed; further appends are ignored */
} nj_buf;
NJ_HIDDEN void nj_buf_init(nj_buf *b);
NJ_HIDDEN void nj_buf_free(nj_buf *b);
NJ_HIDDEN void nj_buf_append(nj_buf *b, const void *data, size_t n);
NJ_HIDDEN void nj_buf_printf(nj_buf *b, const char *fmt, ...) NJ_PRINTF(2, 3);
/* Hands the NUL-terminated contents to the caller (caller frees) and resets b; NULL if an append failed. */
NJ_HIDDEN char *nj_buf_take(nj_buf *b);
/* Copies text to a caller buffer with the public API's (buf, cap, len) convention. */
NJ_HIDDEN nj_status nj_copy_out(const char *text, char *buf, size_t cap, size_t *len);

/* 128-bit hash (XXH3) of bytes as 32 lowercase hex chars + NUL. */
NJ_HIDDEN void nj_hash_hex(const void *data, size_t n, char out[33]);
NJ_HIDDEN uint64_t nj_hash64(const void *data, size_t n);

/* Monotonic clock in nanoseconds. */
NJ_HIDDEN uint64_t nj_now_ns(void);

/* Logging through the context's callback only; the library never prints. */
typedef struct nj_logger {
    nj_log_level level;
    nj_log_fn fn;
    void *user;
} nj_logger;
NJ_HIDDEN void nj_log(const nj_logger *lg, nj_log_level level, const char *fmt, ...) NJ_PRINTF(3, 4);

#endif
