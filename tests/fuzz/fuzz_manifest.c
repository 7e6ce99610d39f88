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

    static nj_context *ctx;
    if (!ctx) {
        nj_context_options o;
        nj_context_options_init(&o);
        o.backend = NJ_BACKEND_EMULATOR;
        o.flags = NJ_CTX_NO_COMPILE | NJ_CTX_NO_DISK_CACHE;
        o.max_parallel_compiles = 1;
        if (nj_context_create(&o, &ctx) != NJ_OK) abort();
    }
    nj_warmup_options wo;
    nj_warmup_options_init(&wo);
    wo.jobs = 1;
    nj_warmup_result *res = NULL;
    int32_t count = -1;
    nj_status s = nj_warmup_manifest(ctx, (const char *)data, size, &wo, &res, &count);
    NJ_FUZZ_CHECK(count >= 0 && (count == 0 || res));
    int newlines = 0;
    for (size_t i = 0; i < size; i++) newlines += data[i] == '\n';
    for (int32_t i = 0; i < count; i++) {
        NJ_FUZZ_CHECK(res[i].index == i && res[i].line >= 1 && res[i].line <= newlines + 1);
        NJ_FUZZ_CHECK(i == 0 || res[i].line > res[i - 1].line);
        NJ_FUZZ_CHECK(res[i].status != NJ_OK && res[i].compiled == 0); /* nothing can be compiled here */
        NJ_FUZZ_CHECK(memchr(res[i].message, '\0', sizeof res[i].message) != NULL);
    }
    NJ_FUZZ_CHECK((count == 0) == (s == NJ_OK));
    nj_warmup_results_free(res);
    return 0;
}
