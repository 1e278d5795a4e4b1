// fuzz_gguf.c - libFuzzer target: arbitrary bytes as a GGUF file (llama.cpp's format; gguf.h).
//
// The bytes become an in-memory file (memfd), opened by its /proc path as ./run opens a download,
// twice: as a model (transformer_load: gguf.c's reader, then loader.c's mapping of the keys and
// tensors, and the Q8_0 copy), and as a tokenizer (tokenizer_load: the SentencePiece vocabulary of
// tokenizer.ggml.*). Each must refuse with a message naming the file, or give something usable: the
// model then runs a block of three tokens and one more through the forward pass, the tokenizer
// encodes a text to ids inside its vocabulary and decodes them again. fuzz_model.c reads the same
// bytes too (every model format goes through transformer_load); this target's seeds are GGUF files.
//
//   build/fuzz/fuzz_gguf fuzz/corpus/gguf      (until stopped; see fuzz/README.md)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../model.h"
#include "../tokenizer.h"

static int fd = -1;
static char path[64]; // /proc/self/fd/N

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fd = memfd_create("model.gguf", 0);
    if (fd < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return 0;
}

// A refusal names the file, then says why.
static void check_refusal(const char *err) {
    const size_t n = strlen(path);
    if (strncmp(err, path, n) || strncmp(err + n, ": ", 2) || !err[n + 2]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (ftruncate(fd, 0) || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) abort();
    char err[600] = "";
    Transformer t;
    if (transformer_load(&t, path, 0, err, sizeof err)) {
        check_refusal(err);
    } else {
        RunConfig run = {.n_ctx = 8, .max_batch = 3};
        RopeOverrides o = {.mode = -1};
        float *logits;
        const int ids[3] = {0, t.config.vocab_size - 1, t.config.vocab_size / 2};
        if (!rope_params_resolve(&run.rope, &t.config.rope, run.n_ctx, &o, err, sizeof err) &&
            !transformer_prepare(&t, &run, err, sizeof err)) {
            if (transformer_forward(&t, ids, 3, 0, 3, 1, &logits, err, sizeof err) ||
                transformer_forward(&t, ids, 1, 3, 4, 0, &logits, err, sizeof err))
                abort(); // arguments in range: never refused
        }
        transformer_free(&t);
    }
    Tokenizer *tok = tokenizer_load(path, err, sizeof err);
    if (!tok) {
        check_refusal(err);
        return 0;
    }
    static const char text[] = "Hello  world, caf\xc3\xa9 \xe4\xb8\xad <s>\xff\n";
    int n;
    int *ids = tokenizer_encode(tok, text, sizeof text - 1, 1, &n);
    if (!ids) abort();
    for (int i = 0; i < n; i++) {
        size_t len;
        if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(tok)) abort();
        if (!tokenizer_decode_piece(tok, i ? ids[i - 1] : -1, ids[i], &len)) abort();
    }
    free(ids);
    tokenizer_free(tok);
    return 0;
}
