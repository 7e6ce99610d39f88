/* Fuzz target: the manifest reader (the tool's njt_tool_read_manifest, as warmup, bench and perf use it)
 * and each line through the problem parser. Every line read is non-empty, comment-free text. */
#include "fuzz.h"

#include <string.h>

#include "toolkit.h"
#include "normjit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536) return 0;
    char path[600];
    snprintf(path, sizeof path, "%s/manifest.txt", nj_fuzz_dir());
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    njt_manifest_line *lines = NULL;
    int n = 0, cap = 0;
    if (njt_tool_read_manifest(path, &lines, &n, &cap) == 0) {
        for (int i = 0; i < n; i++) {
            NJ_FUZZ_CHECK(lines[i].text && lines[i].text[0] != '\0' && lines[i].line >= 1);
            NJ_FUZZ_CHECK(!strchr(lines[i].text, '\n'));
            nj_problem_desc p;
            (void)nj_problem_from_text(lines[i].text, 1, &p);
        }
    }
    njt_tool_free_manifest(lines, n);
    return 0;
}
