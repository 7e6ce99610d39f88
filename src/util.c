/* Small utilities shared by every module: string builder, hashing, clock, logging, dtype helpers. */
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

size_t nj_dtype_size(nj_dtype d)
{
    switch (d) {
    case NJ_F32: return 4;
    case NJ_F16:
    case NJ_BF16: return 2;
    default: return 0;
    }
}

const char *nj_dtype_name(nj_dtype d)
{
    switch (d) {
    case NJ_F32: return "f32";
    case NJ_F16: return "f16";
    case NJ_BF16: return "bf16";
    default: return "none";
    }
}

static uint32_t nj_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float nj_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float nj_bf16_to_float(uint16_t h) { return nj_u2f((uint32_t)h << 16); }

uint16_t nj_float_to_bf16(float f)
{
    uint32_t u = nj_f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float nj_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return nj_u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = (float)man * 5.9604644775390625e-8f; /* 2^-24 */
        return sign ? -v : v;
    }
    return nj_u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t nj_float_to_half(float f)
{
    uint32_t u = nj_f2u(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {                                   /* subnormal or zero in half */
        float v = nj_u2f(a) * 16777216.0f;                    /* scale by 2^24, round to nearest even */
        uint32_t m = (uint32_t)v;
        float r = v - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((a >> 23) - 112u) << 10, m = (a >> 13) & 0x3ffu, rest = a & 0x1fffu;
    uint32_t h = e | m;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
