/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c) and their corpus replay (replay_main.c). A target
 * defines LLVMFuzzerTestOneInput; a broken property aborts (a crash libFuzzer reports and keeps). */
#ifndef NJ_FUZZ_H
#define NJ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NJ_FUZZ_CHECK(cond)                                                                          \
    do {                                                                                             \
        if (!(cond)) {                                                                               \
            fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, #cond);              \
            abort();                                                                                 \
        }                                                                                            \
    } while (0)

/* A private directory made once per process (under $TMPDIR), removed at exit. */
const char *nj_fuzz_dir(void);

#endif
