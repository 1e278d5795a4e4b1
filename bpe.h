// bpe.h - BPE from a Hugging Face tokenizer.json: byte-level (Llama 3, SmolLM, GPT-2 style) and the
// SentencePiece kind with byte fallback (Gemma 3, Llama 2, Mistral).
//
// tokenizer.cpp puts this behind tokenizer.h, beside SentencePiece; nothing else includes it.
// What it reads, and what it refuses, is described at the top of bpe.c.
#ifndef BPE_H
#define BPE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Bpe Bpe;

// Load tokenizer.json from path, or from len bytes of JSON in memory (name is used in messages).
// Returns NULL with "name: what is wrong (hint: ...)" in err on failure.
Bpe *bpe_load(const char *path, char *err, size_t errlen);
Bpe *bpe_load_json(const char *json, size_t len, const char *name, char *err, size_t errlen);
void bpe_free(Bpe *b);

int bpe_vocab_size(const Bpe *b); // 1 + the largest id of the vocab and the added tokens
// 1 if a TemplateProcessing post-processor decides what goes around an encoded text, with the
// ids it puts first (*bos) and last (*eos), -1 for none; 0 if the file leaves it open.
int bpe_template(const Bpe *b, int *bos, int *eos);
// 1 if a Split step with behavior Removed drops text, which decoding then does not give back.
int bpe_drops_text(const Bpe *b);
// 1 if the decoder drops one space from the start of a text (Llama 2's Strip, after its Prepend).
int bpe_strips_start(const Bpe *b);
// 1 if token id (0 <= id < vocab size) is an added token, special or not: a text starts after it
// as at the start (the Prepend normalizer puts its '▁' there too).
int bpe_is_added(const Bpe *b, int id);

// Encode len bytes of text (invalid UTF-8 is first replaced by U+FFFD, see bpe.c) into ids.
// Returns a malloc'ed array of *n ids (free it), NULL when out of memory.
int *bpe_encode(const Bpe *b, const char *text, size_t len, int *n);

// The bytes of token id (0 <= id < vocab size): its vocab string through the byte-level map (with
// byte fallback: '▁' as a space, <0xXX> as its byte), or an added token's content. *special is 1 for an added token marked special. Never NULL for an
// id in range (an id no token has gives 0 bytes).
const char *bpe_token_bytes(const Bpe *b, int id, size_t *len, int *special);

#ifdef __cplusplus
}
#endif

#endif
