/* Fuzz target: the cache entry reader (nj_cache_check_header, nj_cache_check_image) and the launch
 * metadata an entry carries (nj_launches_from_text). An image is valid or refused with a reason; a valid
 * one's views lie inside it; metadata that parses prints back to the same text. */
#include "fuzz.h"

#include <string.h>

#include "cache_impl.h"
#include "planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nj_cache_view v;
    memset(&v, 0, sizeof v);
    if (size >= 64) (void)nj_cache_check_header(data, size, &v);
    memset(&v, 0, sizeof v);
    if (nj_cache_check_image(data, size, NULL, &v) == NULL) {
        const uint8_t *end = data + size;
        NJ_FUZZ_CHECK(!v.meta || ((const uint8_t *)v.meta >= data && (const uint8_t *)v.meta + v.meta_len <= end));
        NJ_FUZZ_CHECK(!v.payload || (v.payload >= data && v.payload_len <= (uint64_t)(end - v.payload)));
    }
    /* the metadata text alone (an entry's meta is NUL-terminated text) */
    if (size > 8192) return 0;
    char meta[8193];
    memcpy(meta, data, size);
    meta[size] = '\0';
    nj_plan_params pp;
    memset(&pp, 0, sizeof pp);
    if (nj_launches_from_text(meta, &pp) == NJ_OK) {
        NJ_FUZZ_CHECK(pp.nlaunch >= 0 && pp.nlaunch <= NJ_MAX_LAUNCHES);
        char *again = nj_launches_to_text(&pp);
        nj_plan_params back;
        memset(&back, 0, sizeof back);
        NJ_FUZZ_CHECK(again && nj_launches_from_text(again, &back) == NJ_OK);
        NJ_FUZZ_CHECK(back.nlaunch == pp.nlaunch &&
                      memcmp(back.launch, pp.launch, sizeof(nj_launch) * (size_t)pp.nlaunch) == 0);
        free(again);
    }
    return 0;
}
