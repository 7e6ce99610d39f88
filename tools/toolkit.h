/* normjit_toolkit (tools/toolkit.c): what the normjit tool, its fuzz target and the tests share, on the
 * public headers only. Names are njt_ (the library's own are nj_). The tool is a library user: it prints,
 * the library never does. Exit codes: 0 ok, 1 failure, 2 usage. The kernel checker beside it is
 * check_lib.h (tolerances: tolerance.h), in the same library. */
#ifndef NJT_TOOLKIT_H
#define NJT_TOOLKIT_H

#include "normjit.h"

#include <stdint.h>
#include <stdio.h>

enum { NJT_EXIT_OK = 0, NJT_EXIT_FAIL = 1, NJT_EXIT_USAGE = 2 };

/* "normjit: <what>: NJ_ERR_X: <nj_last_error() or the status string>" on stderr. */
void njt_tool_error(nj_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "normjit <cmd>: <message>" plus a pointer to --help on stderr; returns NJT_EXIT_USAGE. */
int njt_tool_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Option matching for "--name VALUE" and "--name=VALUE" at argv[*i]. Returns 0 when argv[*i] is not
 * this option, 1 with *val set (and *i advanced past a separate value), -1 when the value is missing. */
int njt_tool_opt(int argc, char **argv, int *i, const char *name, const char **val);
int njt_tool_is_help(const char *arg);

/* Parsers; each returns 0 on success, -1 on bad text. */
int njt_tool_parse_backend(const char *s, nj_backend_kind *out);    /* cuda, emulator, compile-only */
int njt_tool_parse_arch(const char *s, int32_t *out);               /* sm_90, 90, compute_90 */
int njt_tool_parse_passes(const char *s, uint32_t *out);            /* fwd, bwd, fwd,bwd, both */
int njt_tool_parse_u64(const char *s, uint64_t *out);               /* 123, 64K, 512M, 2G */
int njt_tool_parse_int(const char *s, long lo, long hi, long *out);
const char *njt_tool_backend_name(nj_backend_kind k);

/* How a subcommand asks for a context. */
typedef enum njt_tool_fallback {
    NJT_TOOL_FALLBACK_NONE = 0,         /* an unusable default backend is an error */
    NJT_TOOL_FALLBACK_COMPILE_ONLY = 1, /* no driver: compile-only for sm_90 (warmup, plan) */
    NJT_TOOL_FALLBACK_EMULATOR = 2      /* no driver: run on the emulator (check, bench) */
} njt_tool_fallback;

typedef struct njt_tool_target {
    int backend_given;      /* --backend was on the command line */
    nj_backend_kind backend;
    int32_t arch;           /* 0 = device's / default */
    const char *cache_dir;  /* NULL = default root rules */
    int32_t jobs;           /* max_parallel_compiles (0 = cores) */
    uint32_t ctx_flags;     /* nj_context_flags */
} njt_tool_target;

/* Creates a context following the tool's backend rules: --backend wins; else --arch means compile-only
 * (when the fallback is compile-only); else NORMJIT_BACKEND; else cuda, and when cuda has no driver or
 * device the fallback backend is used with a note on stderr. Prints the error itself on failure. */
nj_status njt_tool_open_context(const njt_tool_target *t, njt_tool_fallback fb, nj_context **out);

/* Cache root for the tool: --cache if given; else NULL (the library's rules: NORMJIT_CACHE_DIR,
 * $XDG_CACHE_HOME/normjit, ~/.cache/normjit) unless NORMJIT_CACHE_DIR is unset and the current directory
 * is a normjit source tree (cache/.gitkeep beside include/normjit.h): then that tree's cache/. */
const char *njt_tool_cache_root(const char *given);

/* Groups argv words into problem texts: a word holding a space is a problem on its own; other words join
 * with spaces, and a word naming a problem kind (layernorm, rmsnorm, ...) starts a new problem.
 * Returns the count; *out is a malloc'd array of malloc'd strings (free with njt_tool_free_strings). */
int njt_tool_group_problems(int nwords, char **words, char ***out);
void njt_tool_free_strings(char **s, int n);

/* Reads one manifest into problem texts with their line numbers (comments and blank lines dropped).
 * Returns 0, or -1 with errno set when the file cannot be read. */
typedef struct njt_manifest_line {
    const char *file;
    int line;
    char *text;
} njt_manifest_line;
int njt_tool_read_manifest(const char *path, njt_manifest_line **lines, int *count, int *cap);
void njt_tool_free_manifest(njt_manifest_line *lines, int count);

/* Wall clock in seconds (monotonic). */
double njt_tool_now(void);
/* "1.2 KiB"-style size into buf. */
const char *njt_tool_bytes(uint64_t bytes, char *buf, size_t cap);
/* Text of a problem for messages (static per-thread buffer). */
const char *njt_tool_problem_text(const nj_problem_desc *p);

#endif
