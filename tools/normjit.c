/* normjit command-line tool: dispatch to the subcommands. Each subcommand lives in tools/cmd_<name>.c; the
 * helpers they share are the toolkit's (tools/toolkit.c). */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct njt_tool_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} njt_tool_cmd;

static const njt_tool_cmd njt_cmds[] = {
    {"warmup", njt_cmd_warmup, "compile every problem of manifests into the cache"},
    {"plan", njt_cmd_plan, "show the plan, signature and cache state of problems"},
    {"cache", njt_cmd_cache, "list, verify, trim, export and import the kernel cache"},
    {"check", njt_cmd_check, "run problems on random data and compare with the double reference"},
    {"bench", njt_cmd_bench, "measure cold compile, warm load and hot lookup times"},
    {"perf", njt_cmd_perf, "time the kernels of problems on the device: us per call, GB/s"},
    {"model", njt_cmd_model, "performance model of problems on a named device, without a GPU"},
};

static void njt_tool_main_help(FILE *f)
{
    fprintf(f, "usage: normjit <command> [options] ...\n\ncommands:\n");
    for (size_t i = 0; i < sizeof njt_cmds / sizeof njt_cmds[0]; i++)
        fprintf(f, "  %-8s %s\n", njt_cmds[i].name, njt_cmds[i].summary);
    fprintf(f, "\n'normjit <command> --help' describes a command. normjit %s\n", nj_version());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        njt_tool_main_help(stderr);
        return NJT_EXIT_USAGE;
    }
    if (njt_tool_is_help(argv[1])) {
        njt_tool_main_help(stdout);
        return NJT_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("normjit %s\n", nj_version());
        return NJT_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof njt_cmds / sizeof njt_cmds[0]; i++)
        if (!strcmp(argv[1], njt_cmds[i].name)) return njt_cmds[i].run(argc - 1, argv + 1);
    fprintf(stderr, "normjit: unknown command '%s'\n", argv[1]);
    njt_tool_main_help(stderr);
    return NJT_EXIT_USAGE;
}
