/* nj_fuzz_dir: one scratch directory per fuzzing process, removed at exit. */
#include "fuzz.h"

#include <string.h>

#include "nj_testutil.h"

static char g_dir[512];

static void nj_fuzz_cleanup(void) { nj_tu_remove_tree(g_dir); }

const char *nj_fuzz_dir(void)
{
    if (!g_dir[0]) {
        if (!nj_tu_make_temp_dir("fuzz", g_dir, sizeof g_dir)) abort();
        atexit(nj_fuzz_cleanup);
    }
    return g_dir;
}
