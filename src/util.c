/* Small utilities shared by every module: string builder, hashing, clock, logging (dtypes: vocab.c). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

void nj_buf_init(nj_buf *b) { memset(b, 0, sizeof *b); }

void nj_buf_free(nj_buf *b)
{
    free(b->data);
    nj_buf_init(b);
}

static bool nj_buf_reserve(nj_buf *b, size_t extra)
{
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void nj_buf_append(nj_buf *b, const void *data, size_t n)
{
    if (!nj_buf_reserve(b, n)) return;
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void nj_buf_printf(nj_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !nj_buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *nj_buf_take(nj_buf *b)
{
    if (b->failed) {
        nj_buf_free(b);
        return NULL;
    }
    if (!b->data) nj_buf_reserve(b, 0);
    char *d = b->data;
    if (d) d[b->len] = '\0';
    nj_buf_init(b);
    return d;
}

nj_status nj_copy_out(const char *text, char *buf, size_t cap, size_t *len)
{
    size_t n = strlen(text);
    if (len) *len = n;
    NJ_RETURN_IF(!buf || cap < n + 1, NJ_ERR_BAD_ARGUMENT, "output buffer holds %zu bytes, %zu needed", cap, n + 1);
    memcpy(buf, text, n + 1);
    return NJ_OK;
}

void nj_hash_hex(const void *data, size_t n, char out[33])
{
    XXH128_hash_t h = XXH3_128bits(data, n);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

uint64_t nj_hash64(const void *data, size_t n) { return XXH3_64bits(data, n); }

uint64_t nj_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void nj_log(const nj_logger *lg, nj_log_level level, const char *fmt, ...)
{
    if (!lg || !lg->fn || level > lg->level || level == NJ_LOG_OFF) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lg->fn(lg->user, level, msg);
}
