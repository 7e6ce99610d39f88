/* Status table, per-thread error detail, version. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define NJ_DETAIL_CAP 8192
static _Thread_local char nj_detail[NJ_DETAIL_CAP];

const char *nj_version(void) { return "0.1.0"; }
uint32_t nj_version_number(void) { return NJ_VERSION_NUMBER; }

const char *nj_status_name(nj_status s)
{
    switch (s) {
#define NJ_STATUS_NAME_(name, code, text) \
    case name:                            \
        return #name;
        NJ_STATUS_TABLE(NJ_STATUS_NAME_)
#undef NJ_STATUS_NAME_
    }
    return "NJ_UNKNOWN_STATUS";
}

const char *nj_status_string(nj_status s)
{
    switch (s) {
#define NJ_STATUS_TEXT_(name, code, text) \
    case name:                            \
        return text;
        NJ_STATUS_TABLE(NJ_STATUS_TEXT_)
#undef NJ_STATUS_TEXT_
    }
    return "unknown status code";
}

const char *nj_last_error(void) { return nj_detail; }

void nj_error_clear(void) { nj_detail[0] = '\0'; }

nj_status nj_fail(nj_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nj_detail, sizeof nj_detail, fmt, ap);
    va_end(ap);
    return s;
}

nj_status nj_fail_context(nj_status s, const char *fmt, ...)
{
    char prefix[1024], old[NJ_DETAIL_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, nj_detail, sizeof old);
    /* Built by hand rather than with "%s: %s", so that truncating a long log is plainly intended. */
    size_t n = strlen(prefix);
    memcpy(nj_detail, prefix, n + 1);
    if (old[0] && n + 2 < sizeof nj_detail) {
        memcpy(nj_detail + n, ": ", 2);
        size_t room = sizeof nj_detail - n - 3;
        size_t m = strlen(old);
        if (m > room) m = room;
        memcpy(nj_detail + n + 2, old, m);
        nj_detail[n + 2 + m] = '\0';
    }
    return s;
}
