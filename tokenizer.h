// tokenizer.h - text <-> token ids behind a C interface, for two kinds of tokenizer file:
//   tokenizer.model  SentencePiece (Llama 2, TinyLlama, Mistral), by the real SentencePiece library:
//                    BPE merges, byte fallback, digit splitting, the leading-space marker U+2581;
//   tokenizer.json   Hugging Face byte-level BPE (Llama 3, SmolLM, GPT-2), by bpe.c.
// The handle is opaque: tokenizer.cpp is the only file that sees C++. Decoding is piece by piece so
// generated text can be streamed as each token arrives.
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Tokenizer Tokenizer;

// Load a SentencePiece .model or a tokenizer.json, told apart by content (JSON starts with '{').
// Returns NULL with a message in err on failure.
Tokenizer *tokenizer_load(const char *path, char *err, size_t errlen);
void tokenizer_free(Tokenizer *t);

int tokenizer_vocab_size(const Tokenizer *t);
int tokenizer_bos_id(const Tokenizer *t); // -1 if the model has none (tokenizer.json: if no template adds one)
int tokenizer_eos_id(const Tokenizer *t); // -1 for a tokenizer.json, which does not say (the checkpoint does)

// Encode len bytes of text (any bytes; invalid UTF-8 is SentencePiece's to handle, and becomes U+FFFD
// for a tokenizer.json), with the BOS id first if bos. Special tokens written in the text
// ("<|eot_id|>") are matched by a tokenizer.json, as Hugging Face does; SentencePiece spells them. Returns a malloc'ed array of *n ids (free it), or NULL on failure.
int *tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int bos, int *n);

// The bytes that token id adds to the text when it follows token prev (prev < 0: nothing before
// it). The leading-space marker becomes ' ' except at the very start, byte-fallback pieces such
// as <0x0A> become their byte, control tokens (BOS, EOS) become nothing. Byte-level BPE: the
// token's bytes, which may be part of a character (the next pieces complete it); special tokens:
// nothing. Returns a pointer to a buffer inside t, valid until the next call, with its length in
// *len; NULL if id is not a token or prev is neither a token nor negative.
const char *tokenizer_decode_piece(Tokenizer *t, int prev, int id, size_t *len);

#ifdef __cplusplus
}
#endif

#endif
