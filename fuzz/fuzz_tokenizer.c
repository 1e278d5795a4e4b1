// fuzz_tokenizer.c - libFuzzer target: the tokenizer's two entry points on arbitrary input.
//
//   tokenizer_encode        the bytes as a prompt (any bytes: invalid UTF-8, NULs, control
//                           characters); every id it returns must be a token of the vocabulary.
//   tokenizer_decode_piece  the same bytes read as int32 ids (negative, huge, anything), each
//                           decoded after the one before it as generation streams them; an id
//                           or a previous id outside the vocabulary must give NULL, never a read
//                           out of bounds.
//   tokenizer_config_json   when the first byte has bit 2 set, the rest is tokenizer_config.json
//                           instead (any bytes; JSON or not): what it decides must be -1 or a
//                           token, and a text encoded with BOS and EOS must stay in the vocabulary;
//                           a text it refuses says why and leaves SentencePiece's own BOS (1).
// The first byte picks the tokenizer: tok512 (stories260K) or the Llama 2 one (32000 pieces),
// both from the repository's data/ folder (DATA_DIR, set by the Makefile; LRUN_DATA_DIR at run
// time overrides it).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tokenizer.h"

#ifndef DATA_DIR
#define DATA_DIR "data"
#endif

static Tokenizer *toks[2];

static Tokenizer *load(const char *dir, const char *name) {
    char path[4096], err[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        exit(1);
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dir = getenv("LRUN_DATA_DIR") ? getenv("LRUN_DATA_DIR") : DATA_DIR;
    toks[0] = load(dir, "stories260K/tokenizer.model"); // tok512.model
    toks[1] = load(dir, "llama2/tokenizer.model");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    Tokenizer *tok = toks[data[0] & 1];
    const int vocab = tokenizer_vocab_size(tok);
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    if (data[0] & 4) { // the bytes as tokenizer_config.json, with a checkpoint BOS of 1 or none
        tokenizer_use_checkpoint(tok, data[0] & 8 ? 1 : -1, data[0] & 8 ? 2 : -1);
        char err[600] = "";
        // refused: it says why, and nothing else (SentencePiece's own BOS, 1 in both tokenizers)
        if (tokenizer_config_json(tok, text, len, err, sizeof err) && (!err[0] || tokenizer_bos_id(tok) != 1)) abort();
        const int bos = tokenizer_bos_id(tok), eos = tokenizer_eos_id(tok);
        if (bos < -1 || bos >= vocab || eos < -1 || eos >= vocab || !tokenizer_bos_reason(tok)) abort();
        int n = -1;
        int *ids = tokenizer_encode(tok, "Hello", 5, 1, &n);
        for (int i = 0; ids && i < n; i++)
            if (ids[i] < 0 || ids[i] >= vocab) abort();
        if (ids && (bos >= 0) != (ids[0] == bos)) abort();
        free(ids);
        tokenizer_config_json(tok, "", 0, err, sizeof err); // back to saying nothing, for the next input
        tokenizer_use_checkpoint(tok, -1, -1);
        return 0;
    }

    // Encode, then stream the ids back out.
    int n = -1;
    int *ids = tokenizer_encode(tok, text, len, data[0] & 2, &n);
    if (ids) {
        if (n < 0) abort();
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= vocab) abort();
            size_t plen = 0;
            const char *piece = tokenizer_decode_piece(tok, i ? ids[i - 1] : -1, ids[i], &plen);
            if (!piece || strlen(piece) > plen) abort(); // a piece may hold a NUL byte, never run past plen
        }
        free(ids);
    }

    // The bytes as ids, each after the previous one (prev may be anything too).
    int prev = -1;
    for (size_t i = 0; i + sizeof(int32_t) <= len; i += sizeof(int32_t)) {
        int32_t id;
        memcpy(&id, text + i, sizeof id);
        size_t plen = 0;
        const char *piece = tokenizer_decode_piece(tok, prev, id, &plen);
        if ((id >= 0 && id < vocab && prev < vocab) != (piece != NULL)) abort();
        if (piece && plen) {
            volatile char last = piece[plen - 1]; // touch the whole piece: ASan checks the bounds
            (void)last;
        }
        prev = id;
    }
    return 0;
}
