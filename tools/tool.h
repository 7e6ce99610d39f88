/* The normjit command-line tool's subcommands (tools/cmd_*.c, dispatched by tools/normjit.c) and bench's
 * helpers; the helpers every subcommand shares are the toolkit's (toolkit.h). */
#ifndef NJT_TOOL_H
#define NJT_TOOL_H

#include "toolkit.h"

#include <stdint.h>
#include <stdio.h>

/* Subcommand entry points: argv[0] is the subcommand name. */
int njt_cmd_warmup(int argc, char **argv);
int njt_cmd_plan(int argc, char **argv);
int njt_cmd_cache(int argc, char **argv);
int njt_cmd_check(int argc, char **argv);
int njt_cmd_bench(int argc, char **argv);
int njt_cmd_perf(int argc, char **argv);
int njt_cmd_model(int argc, char **argv); /* the performance model (docs/model.md) */

/* tools/bench_ab.c: a figure row (median and max of v[0..n), times unit, v left as it is); bench --dump
 * (the main kernels' sources of the problems, one file each) and --ab (two dumps compiled alternately). */
void njt_bench_row(const char *what, const double *v, int n, double unit, const char *uname);
int njt_bench_dump(const char *dir, const nj_problem_desc *pr, int np, uint32_t passes, int32_t arch);
int njt_bench_ab(const char *dir_a, const char *dir_b, int32_t arch, int rounds);
/* NVRTC seconds of a compile of each library module (every gamma dtype) into sec[0..cap); returns how many. */
int njt_bench_libs(int32_t arch, double *sec, int cap);

#endif
