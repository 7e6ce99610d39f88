/* Fuzz target: the cache archive importer (nj_cache_import) on a scratch cache. Any file imports what it
 * validly holds or is refused with a status; memory stays bounded (ASan's allocation limit, set by the
 * CI run, catches a frame whose claimed size is allocated before being checked). */
#include "fuzz.h"

#include <string.h>

#include "cache.h"

static nj_cache *g_cache;
static unsigned g_runs;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char root[600], file[600];
    snprintf(root, sizeof root, "%s/cache", nj_fuzz_dir());
    snprintf(file, sizeof file, "%s/archive.njar", nj_fuzz_dir());
    if (!g_cache && nj_cache_open(root, 1u << 20, &g_cache) != NJ_OK) abort();
    FILE *f = fopen(file, "wb");
    if (!f) abort();
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    uint64_t count = 0, rejected = 0;
    nj_status s = nj_cache_import(g_cache, file, &count, &rejected);
    NJ_FUZZ_CHECK(s == NJ_OK || nj_last_error()[0] != '\0'); /* a refusal says why */
    if (++g_runs % 256 == 0) (void)nj_cache_clear(g_cache); /* keep the scratch cache small */
    return 0;
}
