// fuzz_model.c - libFuzzer target: arbitrary bytes as a model file.
//
// The bytes become an in-memory file (memfd) that transformer_load opens by its /proc path, as
// ./run opens a file someone downloaded. Whatever they are, the loader must either refuse them
// with a message or hand back a model that can be used; this target then uses it the way ./run
// does: RoPE for a small context from the checkpoint's own parameters, the run state, a block of
// five tokens (the matrix x matrix kernels) and one more token (matrix x vector) through the
// forward pass. Any crash, out-of-bounds access, leak
// or undefined behaviour is a finding (AddressSanitizer, UBSan and LeakSanitizer watch).
//
// What this is not: a test of the numbers. Weights that are random bytes give NaN logits, and
// that is fine; reading outside the file is not.
//
//   make fuzz                                   (all targets, FUZZ_SECONDS each)
//   build/fuzz/fuzz_model fuzz/corpus/model     (this one until stopped; see fuzz/README.md)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../model.h"

static int fd = -1;
static char path[64]; // /proc/self/fd/N: a path transformer_load can open

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fd = memfd_create("model.bin", 0);
    if (fd < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();

    Transformer t;
    char err[600] = "";
    if (transformer_load(&t, path, 0, err, sizeof err)) {
        const size_t n = strlen(path); // a refusal names the file, then says why
        if (strncmp(err, path, n) || strncmp(err + n, ": ", 2) || !err[n + 2]) abort();
        return 0;
    }
    const Config *c = &t.config;
    // 8 positions: past the trained context when it is < 6, so that dynamic RoPE re-rotates keys.
    RunConfig run = {.n_ctx = 8, .max_batch = 5};
    // The checkpoint's own RoPE, or (chosen by the input's size, so the corpus reaches all of them) one
    // of the run-time modes whose attention paths differ: the far path, Self-Extend, dual chunk
    // attention, dynamic YaRN. A mode the tiny model's L does not allow is refused and skipped.
    static const int modes[] = {-1, ROPE_SCALING_REROPE, ROPE_SCALING_LEAKY_REROPE, ROPE_SCALING_SELFEXTEND,
                                ROPE_SCALING_DCA, ROPE_SCALING_DYNAMIC_YARN};
    RopeOverrides o = {.mode = modes[size % (sizeof modes / sizeof modes[0])]};
    if (!rope_params_resolve(&run.rope, &c->rope, run.n_ctx, &o, err, sizeof err) &&
        !transformer_prepare(&t, &run, err, sizeof err)) {
        const int V = c->vocab_size, tokens[6] = {0, V - 1, V / 2, 1 % V, V / 3, 2 % V};
        float *logits;
        if (transformer_forward(&t, tokens, 5, 0, 5, 1, &logits, err, sizeof err)) abort();     // (5, V) logits
        if (transformer_forward(&t, tokens + 5, 1, 5, 6, 0, &logits, err, sizeof err)) abort(); // (1, V)
    }
    transformer_free(&t);
    return 0;
}
