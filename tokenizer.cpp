// tokenizer.cpp - one C interface, two tokenizers: SentencePiece (tokenizer.model, the C++
// library libsentencepiece from Debian) and byte-level BPE (tokenizer.json, bpe.c).
// The one C++ file of the project; everything else includes tokenizer.h only.
#include "tokenizer.h"

#include "bpe.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct Tokenizer {
    Bpe *bpe; // a tokenizer.json; NULL for a SentencePiece model, which is then in sp
    sentencepiece::SentencePieceProcessor sp;
    std::string piece; // what tokenizer_decode_piece returned last
};

// A tokenizer.json is JSON, an object: its first byte that is not white space is '{'. A
// SentencePiece model is a protocol buffer, whose first byte is a field tag (0x0A).
static int is_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; // SentencePiece will say it cannot open it
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
    }
    fclose(f);
    return c == '{';
}

extern "C" Tokenizer *tokenizer_load(const char *path, char *err, size_t errlen) {
    Tokenizer *t = new (std::nothrow) Tokenizer;
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", path);
        return nullptr;
    }
    t->bpe = nullptr;
    if (is_json(path)) {
        t->bpe = bpe_load(path, err, errlen);
        if (!t->bpe) {
            delete t;
            return nullptr;
        }
        return t;
    }
    try {
        auto status = t->sp.Load(path);
        if (!status.ok()) {
            snprintf(err, errlen, "%s: cannot load the SentencePiece tokenizer: %s (hint: pass the model's "
                     "tokenizer.model or tokenizer.json with -z)", path, status.ToString().c_str());
            delete t;
            return nullptr;
        }
    } catch (const std::exception &e) {
        snprintf(err, errlen, "%s: cannot load the SentencePiece tokenizer: %s", path, e.what());
        delete t;
        return nullptr;
    }
    return t;
}

extern "C" void tokenizer_free(Tokenizer *t) {
    if (t) bpe_free(t->bpe);
    delete t;
}

extern "C" int tokenizer_vocab_size(const Tokenizer *t) {
    return t->bpe ? bpe_vocab_size(t->bpe) : t->sp.GetPieceSize();
}
extern "C" int tokenizer_bos_id(const Tokenizer *t) { return t->bpe ? bpe_bos_id(t->bpe) : t->sp.bos_id(); }
extern "C" int tokenizer_eos_id(const Tokenizer *t) { return t->bpe ? -1 : t->sp.eos_id(); }

extern "C" int *tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int bos, int *n) {
    std::vector<int> ids;
    const int bos_id = tokenizer_bos_id(t);
    if (t->bpe) {
        int m;
        int *raw = bpe_encode(t->bpe, text, len, &m);
        if (!raw) return nullptr;
        ids.assign(raw, raw + m);
        free(raw);
    } else {
        try {
            if (!t->sp.Encode(std::string(text, len), &ids).ok()) return nullptr;
        } catch (const std::exception &) {
            return nullptr;
        }
    }
    const size_t first = bos && bos_id >= 0 ? 1 : 0;
    int *out = static_cast<int *>(malloc((ids.size() + first + 1) * sizeof(int)));
    if (!out) return nullptr;
    if (first) out[0] = bos_id;
    std::copy(ids.begin(), ids.end(), out + first);
    *n = static_cast<int>(ids.size() + first);
    return out;
}

// Byte-level BPE: a token's bytes, whatever came before it (a character may straddle two tokens;
// the bytes join up in the output). Special tokens (<|begin_of_text|>, <|eot_id|>) are not text.
static const char *decode_bpe(Tokenizer *t, int prev, int id, size_t *len) {
    const int n = bpe_vocab_size(t->bpe);
    if (id < 0 || id >= n || prev >= n) return nullptr;
    int special;
    const char *bytes = bpe_token_bytes(t->bpe, id, len, &special);
    t->piece.assign(special ? "" : bytes, special ? 0 : *len);
    *len = t->piece.size();
    return t->piece.c_str();
}

extern "C" const char *tokenizer_decode_piece(Tokenizer *t, int prev, int id, size_t *len) {
    if (t->bpe) return decode_bpe(t, prev, id, len);
    // prev is checked too: SentencePiece's IsControl(prev) does not check its argument.
    if (id < 0 || id >= t->sp.GetPieceSize() || prev >= t->sp.GetPieceSize()) return nullptr;
    const std::string &piece = t->sp.IdToPiece(id);
    t->piece.clear();
    try {
        if (t->sp.IsControl(id)) {
            // BOS, EOS and the like are not text.
        } else if (t->sp.IsByte(id)) {
            // Byte fallback: "<0x0A>" stands for the single byte 0x0A.
            t->piece.push_back(static_cast<char>(std::strtol(piece.c_str() + 3, nullptr, 16)));
        } else if (prev < 0 || t->sp.IsControl(prev)) {
            // At the start of the text SentencePiece drops the space it added in front of the first
            // word (add_dummy_prefix); let the library decide, as it does for a whole text.
            t->piece = t->sp.DecodeIds(std::vector<int>{id});
        } else if (t->sp.IsUnknown(id)) {
            t->piece = t->sp.DecodeIds(std::vector<int>{id});
        } else {
            // "\xE2\x96\x81" is U+2581, SentencePiece's marker for a space.
            for (size_t i = 0; i < piece.size(); i++) {
                if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
                    t->piece.push_back(' ');
                    i += 2;
                } else {
                    t->piece.push_back(piece[i]);
                }
            }
        }
    } catch (const std::exception &) {
        return nullptr;
    }
    *len = t->piece.size();
    return t->piece.c_str();
}
