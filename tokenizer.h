// tokenizer.h - text <-> token ids behind a C interface, for two kinds of tokenizer file:
//   tokenizer.model  SentencePiece (Llama 2, TinyLlama, Mistral, Phi-3), by the real SentencePiece
//                    library: BPE merges, byte fallback, digit splitting, the leading-space marker
//                    U+2581; plus the tokens tokenizer_config.json's added_tokens_decoder adds past
//                    its pieces (Phi-3's <|user|>, <|end|>: 32000..32010), matched in the text as
//                    Hugging Face does (lstrip / rstrip included), the parts between them encoded
//                    alone;
//   tokenizer.json   Hugging Face byte-level BPE (Llama 3, SmolLM, GPT-2, Qwen2/2.5/3, Phi-4-mini),
//                    and the SentencePiece kind with byte fallback and the metaspace '▁' (Gemma 3,
//                    Llama 2, Mistral), by bpe.c.
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

int tokenizer_vocab_size(const Tokenizer *t); // 1 + the largest id it has (added tokens included)
// What tokenizer_encode puts around a text when asked to (specials = 1): BOS first, EOS last.
// Hugging Face decides this in three places and this program reads all three, decided at load
// and again when tokenizer_use_checkpoint gives the checkpoint's own ids:
//   added or not   tokenizer_config.json's add_bos_token / add_eos_token, when it sets them; else a
//                  tokenizer.json's TemplateProcessing (Llama 3.1: "<|begin_of_text|> $A"); else
//                  BOS yes, EOS no, as Meta's reference code and llama.cpp do for Llama (the
//                  original Llama 3 tokenizer.json has only a ByteLevel post-processor, which
//                  adds nothing, yet the model was trained with BOS first). One exception, as
//                  transformers' class default: tokenizer_class GPT2Tokenizer adds no BOS.
//   which token    the template's; else tokenizer_config.json's bos_token / eos_token (null: none);
//                  else SentencePiece's own; for a tokenizer.json, the checkpoint's bos_token_id
//                  / eos_token_id.
// tokenizer_config.json is the file of that name beside the tokenizer; a missing one says nothing.
// One that is there must be read, in every mode alike: tokenizer_load fails, naming the file, when
// it cannot be read, is empty or not a JSON object, or when a key read here has the wrong type
// ("add_bos_token": "yes"), rather than run with BOS or EOS decided as if it were not there.
void tokenizer_use_checkpoint(Tokenizer *t, int bos_id, int eos_id); // -1: the checkpoint has none
// tokenizer_load reads tokenizer_config.json itself; this takes its text from elsewhere (the fuzzer),
// replacing what the file said. Empty text says nothing. Returns 0, or -1 with why in err (then it
// says nothing) for text that is not a JSON object or a key of the wrong type.
int tokenizer_config_json(Tokenizer *t, const char *text, size_t len, char *err, size_t errlen);
int tokenizer_bos_id(const Tokenizer *t); // the id put first; -1: none
int tokenizer_eos_id(const Tokenizer *t); // the id put last; -1: none
const char *tokenizer_bos_reason(const Tokenizer *t); // why, for the banner: "tokenizer_config.json add_bos_token"
const char *tokenizer_eos_reason(const Tokenizer *t);
// tokenizer_config.json as tokenizer_load read it (chat reads its template there): the text, or NULL
// with the errno of the failed read in *error; *path names the file either way.
const char *tokenizer_config_text(const Tokenizer *t, const char **path, size_t *len, int *error);

// Encode len bytes of text (any bytes; invalid UTF-8 is SentencePiece's to handle, and becomes U+FFFD
// for a tokenizer.json), with BOS and EOS around it as above if specials. Special tokens written in the text
// ("<|eot_id|>") are matched by a tokenizer.json, as Hugging Face does; SentencePiece spells its own
// (<s>) and matches the added ones of tokenizer_config.json. Returns a malloc'ed array of *n ids (free it), or NULL on failure.
int *tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int specials, int *n);

// The bytes that token id adds to the text when it follows token prev (prev < 0: nothing before
// it). The leading-space marker becomes ' ' except at the very start, byte-fallback pieces such
// as <0x0A> become their byte, control tokens (BOS, EOS) become nothing. Byte-level BPE: the
// token's bytes, which may be part of a character (the next pieces complete it); special tokens:
// nothing. An added token of tokenizer_config.json (SentencePiece): its content, nothing if
// special, and the piece after it is decoded as at the start of a text. Returns a pointer to a
// buffer inside t, valid until the next call, with its length in *len; NULL if id is not a token
// or prev is neither a token nor negative.
const char *tokenizer_decode_piece(Tokenizer *t, int prev, int id, size_t *len);
// 1 when id is a control or special token, which is not text (BOS, EOS, <|eot_id|>, a special
// added token); 0 for every other id, the leading-space piece too, and for an id that is no token.
int tokenizer_is_special(const Tokenizer *t, int id);

#ifdef __cplusplus
}
#endif

#endif
