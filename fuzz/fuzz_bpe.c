// fuzz_bpe.c - libFuzzer target: the tokenizer.json reader and the byte-level BPE encoder (bpe.c).
//
// Input: the bytes of a tokenizer.json, a NUL byte, then a text (no NUL: the JSON is everything
// before the first one, and an input without one is all JSON with an empty text). The file is
// loaded from memory; if it is accepted, the text is encoded and must satisfy:
//   - every id is inside the vocabulary;
//   - decoding is stable: the bytes of the ids (special tokens as their content) are a text T
//     that encodes to the same ids again, and T decodes to T. (T is the input with invalid UTF-8
//     replaced, in NFC if the file normalizes, less the white space lstrip/rstrip tokens take: the
//     round trip of tests/test_bpe.py without an oracle, less the space a Prepend normalizer puts
//     in front of each text between added tokens.)
//     Not checked when a Split step drops text
//     (behavior Removed): the pieces left, joined, can be cut otherwise.
// Seeds (fuzz/corpus/bpe, by fuzz/make_corpus.py): small byte-level vocabularies with each
// pre-tokenizer arrangement, added tokens, ignore_merges, both forms of merges, broken files.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bpe.h"

// The text of ids[0..n) as the decoder gives it, malloc'ed, length in *len.
static char *join(const Bpe *b, const int *ids, int n, size_t *len) {
    size_t total = 0, piece;
    int special;
    for (int i = 0; i < n; i++) {
        bpe_token_bytes(b, ids[i], &piece, &special);
        total += piece;
    }
    char *out = malloc(total + 1), *p = out;
    for (int i = 0, after_added = 1; out && i < n; i++) {
        const char *bytes = bpe_token_bytes(b, ids[i], &piece, &special);
        const int added = bpe_is_added(b, ids[i]);
        // The Prepend normalizer (Llama 2's tokenizer.json, with a Strip decoder) puts a space in
        // front of each text between added tokens: dropped here so that the text gives it again.
        // tokenizer.cpp's decode drops it after nothing and after a special token only, as Hugging
        // Face's decode does (after a token not marked special, the space shows).
        if (!added && piece && bytes[0] == ' ' && after_added && bpe_strips_start(b)) bytes++, piece--;
        memcpy(p, bytes, piece);
        p += piece;
        after_added = added;
    }
    *len = out ? (size_t)(p - out) : 0;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    const size_t text_len = nul ? size - json_len - 1 : 0;
    char err[600];
    Bpe *b = bpe_load_json((const char *)data, json_len, "fuzz", err, sizeof err);
    if (!b) {
        if (strncmp(err, "fuzz: ", 6)) abort(); // a refusal names the file
        return 0;
    }
    const int vocab = bpe_vocab_size(b);
    int bos, eos;
    const int tmpl = bpe_template(b, &bos, &eos);
    if (bos < -1 || bos >= vocab || eos < -1 || eos >= vocab || (!tmpl && (bos != -1 || eos != -1))) abort();
    int n = -1, m = -1;
    int *ids = bpe_encode(b, text, text_len, &n);
    if (!ids) abort(); // only out of memory, which these sizes never are
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab) abort();
    size_t len, len2;
    char *t = join(b, ids, n, &len);
    int *again = bpe_encode(b, t, len, &m);
    if (!again) abort();
    for (int i = 0; i < m; i++)
        if (again[i] < 0 || again[i] >= vocab) abort();
    char *t2 = join(b, again, m, &len2);
    if (!bpe_drops_text(b) && (m != n || memcmp(again, ids, (size_t)n * sizeof *ids) || len2 != len ||
                               memcmp(t, t2, len)))
        abort();
    free(t), free(t2), free(ids), free(again);
    bpe_free(b);
    return 0;
}
