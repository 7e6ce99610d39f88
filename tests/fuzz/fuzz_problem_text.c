/* Fuzz target: the problem text parser (nj_problem_from_text). Any line parses or is refused with a
 * status; a line that parses prints back to text that parses to the same problem (nj_problem_key). */
#include "fuzz.h"

#include <string.h>

#include "problem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char text[4097];
    memcpy(text, data, size);
    text[size] = '\0';
    nj_problem_desc p;
    if (nj_problem_from_text(text, 3, &p) != NJ_OK) return 0;
    NJ_FUZZ_CHECK(nj_problem_validate(&p) == NJ_OK);
    char out[4096];
    size_t len = 0;
    NJ_FUZZ_CHECK(nj_problem_to_text(&p, out, sizeof out, &len) == NJ_OK);
    nj_problem_desc q;
    NJ_FUZZ_CHECK(nj_problem_from_text(out, 7, &q) == NJ_OK);
    unsigned char ka[NJ_PROBLEM_KEY_MAX], kb[NJ_PROBLEM_KEY_MAX];
    size_t la = nj_problem_key(&p, ka, sizeof ka), lb = nj_problem_key(&q, kb, sizeof kb);
    NJ_FUZZ_CHECK(la == lb && memcmp(ka, kb, la) == 0);
    return 0;
}
