// tokenizer.cpp - one C interface, two tokenizers: SentencePiece (tokenizer.model, the C++
// library libsentencepiece from Debian) and byte-level BPE (tokenizer.json, bpe.c).
// The one C++ file of the project; everything else includes tokenizer.h only.
#include "tokenizer.h"

#include "bpe.h"
#include "gguf.h"

#include <cjson/cJSON.h>
#include <sentencepiece_processor.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

// What tokenizer_config.json says of one special token (BOS or EOS); see tokenizer.h.
struct Special {
    int add = -1;          // add_bos_token / add_eos_token: 1, 0, or -1 when not set
    int named = 0;         // 1: bos_token / eos_token is set (to a token, or to null)
    std::string name;      // its content; empty for null
    int id = -1;           // the decision: the id added, -1 none
    const char *reason = "";
};

// A token a SentencePiece model gains from tokenizer_config.json's added_tokens_decoder, past its
// own pieces (Phi-3's <|user|>, <|end|>, <|assistant|> are 32000..32010 beside Llama 2's 32000).
struct SpAdded {
    int id;
    std::string content;
    bool lstrip, rstrip; // the white space before / after it goes with it, as in Hugging Face
    bool special;        // decodes to nothing in a stream
};

struct Tokenizer {
    Bpe *bpe; // a tokenizer.json; NULL for a SentencePiece model, which is then in sp
    sentencepiece::SentencePieceProcessor sp;
    std::vector<SpAdded> added; // SentencePiece only; matched in the text before it is encoded
    int n_ids = 0;              // SentencePiece: its pieces, or 1 + the largest added id
    std::string added_error;    // an added token this program cannot read (tokenizer_load refuses)
    std::string piece; // what tokenizer_decode_piece returned last
    Special bos, eos;
    int gpt2_class = 0; // tokenizer_class GPT2Tokenizer(Fast): no BOS unless add_bos_token says so
    int checkpoint_bos = -1, checkpoint_eos = -1;
    std::string config_path, config; // tokenizer_config.json beside the file, and its text
    int config_errno = 0;            // why it could not be read; 0 when it was
    int gguf = 0;                    // read from a GGUF file's metadata (its keys decide BOS and EOS)
};

// The id of a token by its text (a special token's content, a SentencePiece piece); -1: none.
static int token_id(const Tokenizer *t, const char *piece) {
    for (const SpAdded &a : t->added)
        if (a.content == piece) return a.id;
    if (!t->bpe) {
        const int id = t->sp.PieceToId(piece);
        return id == t->sp.unk_id() && t->sp.IdToPiece(id) != piece ? -1 : id;
    }
    const size_t want = strlen(piece);
    for (int id = 0, n = bpe_vocab_size(t->bpe); id < n; id++) {
        size_t len;
        int special;
        const char *bytes = bpe_token_bytes(t->bpe, id, &len, &special);
        if (len == want && !memcmp(bytes, piece, len)) return id;
    }
    return -1;
}

// A value of tokenizer_config.json as an error shows it: its JSON, cut at 40 bytes.
static std::string json_text(const cJSON *v) {
    char *printed = cJSON_PrintUnformatted(v);
    std::string out = printed ? std::string(printed).substr(0, 40) : "?";
    cJSON_free(printed);
    return out;
}

// tokenizer_config.json's add_X_token and X_token ("<s>", {"content": "<s>", ...} or null). A key
// of another type is an error (err): Hugging Face would fail on it too, and taking it for unset
// would quietly change the BOS / EOS decision. Returns 0 or -1.
static int read_special(const cJSON *root, const char *add_key, const char *key, Special *s, std::string *err) {
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(root, add_key);
    if (add && !cJSON_IsBool(add) && !cJSON_IsNull(add)) { // null: not set, as a missing key
        *err = std::string(add_key) + " is " + json_text(add) + ", and must be true or false (hint: \"" + add_key +
               "\": true or false, or leave the key out for the tokenizer's default)";
        return -1;
    }
    if (cJSON_IsBool(add)) s->add = cJSON_IsTrue(add);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, key);
    const cJSON *content = cJSON_IsObject(tok) ? cJSON_GetObjectItemCaseSensitive(tok, "content") : tok;
    if (tok && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
        *err = std::string(key) + " is " + json_text(tok) + ", and must be a token's text, {\"content\": text} " +
               "or null (hint: \"" + key + "\": null for none, or leave the key out for the tokenizer's own)";
        return -1;
    }
    if (tok) s->named = 1;
    if (cJSON_IsString(content)) s->name = content->valuestring;
    return 0;
}

// added_tokens_decoder {"32010": {"content": "<|user|>", "rstrip": true, ...}, ...}: for a
// SentencePiece model, the tokens past its own pieces (those below are its own, and it spells them).
// A tokenizer.json lists its added tokens itself (bpe.c).
static void read_added(Tokenizer *t, const cJSON *root) {
    t->added.clear(), t->added_error.clear();
    t->n_ids = t->bpe ? 0 : t->sp.GetPieceSize();
    const cJSON *decoder = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
    if (t->bpe || !cJSON_IsObject(decoder)) return;
    for (const cJSON *e = decoder->child; e; e = e->next) {
        char *end;
        const long id = strtol(e->string, &end, 10);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (*end || end == e->string || id < t->sp.GetPieceSize()) continue; // one of its own pieces
        if (id >= (1 << 24) || !cJSON_IsString(content) || !content->valuestring[0]) {
            t->added_error = std::string("added_tokens_decoder: \"") + std::string(e->string).substr(0, 20) +
                             "\" needs an id below 2^24 and a non-empty \"content\"";
            continue;
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "single_word"))) {
            t->added_error = std::string("added_tokens_decoder: \"") + std::string(content->valuestring).substr(0, 40) +
                             "\" has single_word true, which is not implemented";
            continue;
        }
        t->added.push_back({static_cast<int>(id), content->valuestring,
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "lstrip")) != 0,
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "rstrip")) != 0,
                            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) != 0});
        t->n_ids = std::max(t->n_ids, static_cast<int>(id) + 1);
    }
}

extern "C" int tokenizer_config_json(Tokenizer *t, const char *text, size_t len, char *err, size_t errlen) {
    t->bos = Special(), t->eos = Special(), t->gpt2_class = 0;
    const char *end = text;
    cJSON *root = len ? cJSON_ParseWithLengthOpts(text, len, &end, 0) : nullptr;
    while (root && end < text + len && strchr(" \t\r\n", *end) && *end)
        end++;
    std::string why;
    // What follows the value must be white space, as in JSON.
    if (len && (!root || end < text + len)) {
        const char *at = root ? end : cJSON_GetErrorPtr(); // where the parser stopped, inside text
        why = "not valid JSON";
        if (at >= text && at <= text + len) why += " near byte " + std::to_string(at - text);
        cJSON_Delete(root);
        root = nullptr;
    } else if (root && !cJSON_IsObject(root)) {
        why = "not a JSON object";
    }
    if (!why.empty()) why += " (hint: repair it, or move it away to use the tokenizer's defaults)";
    if (root && why.empty() && !read_special(root, "add_bos_token", "bos_token", &t->bos, &why))
        read_special(root, "add_eos_token", "eos_token", &t->eos, &why);
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(root, "tokenizer_class");
    if (why.empty() && cls && !cJSON_IsNull(cls) && !cJSON_IsString(cls))
        why = "tokenizer_class is " + json_text(cls) + ", and must be a class name or null (hint: leave the key out)";
    if (!why.empty()) { // then it says nothing, as a missing file
        t->bos = Special(), t->eos = Special();
        cJSON_Delete(root); // cls pointed into it
        root = nullptr;
    } else {
        t->gpt2_class = cJSON_IsString(cls) && !strncmp(cls->valuestring, "GPT2Tokenizer", 13);
    }
    read_added(t, root);
    cJSON_Delete(root);
    tokenizer_use_checkpoint(t, t->checkpoint_bos, t->checkpoint_eos);
    if (why.empty()) return 0;
    snprintf(err, errlen, "%s", why.c_str());
    return -1;
}

// tokenizer_config.json beside the tokenizer file, if there is one; kept for the chat template.
// Returns 0 (also when there is none), or -1 with the reason in err when it is there and cannot
// be read or is not what Hugging Face writes.
static int read_config(Tokenizer *t, const char *tok_path, char *err, size_t errlen) {
    const char *slash = strrchr(tok_path, '/');
    t->config_path = std::string(tok_path, slash ? slash - tok_path + 1 : 0) + "tokenizer_config.json";
    FILE *f = fopen(t->config_path.c_str(), "rb");
    if (f) {
        char buf[1 << 16];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0)
            t->config.append(buf, got);
        if (ferror(f)) t->config_errno = errno ? errno : EIO;
        fclose(f);
    } else {
        t->config_errno = errno;
    }
    if (t->config_errno) t->config.clear();
    char why[400];
    if (t->config_errno && t->config_errno != ENOENT) {
        snprintf(err, errlen,
                 "%s: cannot read it: %s (hint: make it a readable file, or move it away to use the "
                 "tokenizer's defaults)",
                 t->config_path.c_str(), strerror(t->config_errno));
        return -1;
    }
    if (!t->config_errno && t->config.empty()) {
        snprintf(err, errlen,
                 "%s: is empty (hint: put the model's own there, or move it away to use the "
                 "tokenizer's defaults)",
                 t->config_path.c_str());
        return -1;
    }
    if (tokenizer_config_json(t, t->config.data(), t->config.size(), why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", t->config_path.c_str(), why);
        return -1;
    }
    return 0;
}

extern "C" const char *tokenizer_config_text(const Tokenizer *t, const char **path, size_t *len, int *error) {
    *path = t->config_path.c_str();
    *len = t->config.size();
    *error = t->config_errno;
    return t->config_errno ? nullptr : t->config.c_str();
}

// The decision of tokenizer.h for one special token. is_bos: BOS (added by default), else EOS.
static void decide(const Tokenizer *t, Special *s, int is_bos) {
    int tmpl_bos = -1, tmpl_eos = -1;
    const int tmpl = t->bpe && bpe_template(t->bpe, &tmpl_bos, &tmpl_eos);
    const int tmpl_id = is_bos ? tmpl_bos : tmpl_eos;
    const int own = t->bpe ? -1 : is_bos ? t->sp.bos_id() : t->sp.eos_id();
    const int checkpoint = is_bos ? t->checkpoint_bos : t->checkpoint_eos;
    int id;
    if (tmpl_id >= 0)
        id = tmpl_id;
    else if (s->named)
        id = s->name.empty() ? -1 : token_id(t, s->name.c_str());
    else
        id = t->bpe ? checkpoint : own; // a SentencePiece model knows its own (or has none)
    int add;
    if (s->add >= 0 && t->gguf) {
        add = s->add;
        s->reason = is_bos ? "GGUF tokenizer.ggml.add_bos_token" : "GGUF tokenizer.ggml.add_eos_token";
    } else if (s->add >= 0) {
        add = s->add;
        s->reason = is_bos ? "tokenizer_config.json add_bos_token" : "tokenizer_config.json add_eos_token";
    } else if (tmpl) {
        add = tmpl_id >= 0;
        s->reason = "the template of tokenizer.json";
    } else if (is_bos && t->gpt2_class) {
        add = 0;
        s->reason = "tokenizer_class GPT2Tokenizer";
    } else {
        add = is_bos;
        s->reason = !is_bos      ? "the default"
                    : t->bpe     ? (s->named ? "tokenizer_config.json bos_token" : "the checkpoint's bos_token_id")
                    : t->gguf    ? "llama.cpp's default: no tokenizer.ggml.add_bos_token"
                                 : "SentencePiece's default";
    }
    s->id = add ? id : -1;
}

extern "C" void tokenizer_use_checkpoint(Tokenizer *t, int bos_id, int eos_id) {
    t->checkpoint_bos = bos_id, t->checkpoint_eos = eos_id;
    decide(t, &t->bos, 1);
    decide(t, &t->eos, 0);
}

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

// A GGUF file (llama.cpp's) starts with the 4 bytes "GGUF".
static int is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    const int is = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return is;
}

#define PASS_TOKENIZER "pass the model's tokenizer.model or tokenizer.json with -z"

// What the path is, checked before either reader sees it: the libraries' own words for a
// directory or an empty file ("basic_filebuf::underflow", "unk is not defined") name neither, and
// reading a FIFO would wait for a writer. Returns 0, or -1 with the reason in err.
static int check_path(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st)) {
        snprintf(err, errlen, "%s: cannot open the tokenizer: %s (hint: " PASS_TOKENIZER ")", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        const std::string dir = std::string(path) + (path[0] && path[strlen(path) - 1] == '/' ? "" : "/");
        struct stat in;
        for (const char *name : {"tokenizer.model", "tokenizer.json"}) // run.c's order beside a model
            if (stat((dir + name).c_str(), &in) == 0 && S_ISREG(in.st_mode) && in.st_size > 0) {
                snprintf(err, errlen, "%s: is a directory, not a tokenizer file (hint: -z %s%s)", path, dir.c_str(),
                         name);
                return -1;
            }
        snprintf(err, errlen, "%s: is a directory, not a tokenizer file (hint: " PASS_TOKENIZER ")", path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: is not a regular file (hint: " PASS_TOKENIZER ")", path);
        return -1;
    }
    if (st.st_size == 0) {
        snprintf(err, errlen, "%s: is empty, not a tokenizer (hint: " PASS_TOKENIZER ")", path);
        return -1;
    }
    return 0;
}


// ---------------------------------------------------------------------------------------------
// A GGUF file's own tokenizer (llama.cpp's tokenizer.ggml.* keys, gguf.h). tokenizer.ggml.model
// "llama" is a SentencePiece vocabulary: its tokens, scores and token types (the numbers are
// SentencePiece's piece types: 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte).
// They are written here into the protocol buffer a tokenizer.model holds (sentencepiece_model.proto:
// ModelProto, its pieces, a BPE TrainerSpec with byte fallback, an "identity" NormalizerSpec) and
// read by the same SentencePiece library as a tokenizer.model, so the encoding is SentencePiece's own.
// What a GGUF file does not carry is llama.cpp's default: a leading space added
// (tokenizer.ggml.add_space_prefix, true when absent), runs of spaces kept (SentencePiece's
// remove_extra_whitespaces off, as llama.cpp's tokenizer does; tok512.model has it on, so a text
// with two spaces in a row encodes otherwise there).

static void pb_varint(std::string &s, uint64_t v) {
    for (; v >= 0x80; v >>= 7)
        s += static_cast<char>(v | 0x80);
    s += static_cast<char>(v);
}
static void pb_int(std::string &s, int field, uint64_t v) { pb_varint(s, static_cast<uint64_t>(field) << 3), pb_varint(s, v); }
static void pb_bytes(std::string &s, int field, const char *p, size_t n) {
    pb_varint(s, static_cast<uint64_t>(field) << 3 | 2), pb_varint(s, n), s.append(p, n);
}
static void pb_float(std::string &s, int field, float f) {
    char b[4];
    memcpy(b, &f, 4);
    pb_varint(s, static_cast<uint64_t>(field) << 3 | 5), s.append(b, 4);
}

// The vocabulary both kinds read: tokenizer.ggml.tokens, an array of 1 to 2^22 strings; NULL if it
// is missing or not that.
static const GgufKV *gguf_tokens(const Gguf *g) {
    const GgufKV *kv = gguf_find(g, "tokenizer.ggml.tokens");
    return kv && kv->type == GGUF_ARRAY && kv->elem == GGUF_STRING && kv->count >= 1 && kv->count <= (1 << 22) ? kv
                                                                                                           : nullptr;
}

// Whether kv, an optional per-token array (token_type, scores), is absent or n numbers.
static bool per_token_numbers(const GgufKV *kv, uint64_t n) {
    return !kv || (kv->type == GGUF_ARRAY && kv->count == n && kv->elem != GGUF_STRING && kv->elem != GGUF_ARRAY &&
                   kv->elem != GGUF_BOOL);
}

// Returns "" when the SentencePiece model is in t->sp, else why not.
static std::string sp_from_gguf(Tokenizer *t, const Gguf *g) {
    const char *model;
    size_t len;
    if (gguf_get_string(g, "tokenizer.ggml.model", &model, &len) != 1) return "no tokenizer.ggml.model string";
    const std::string kind(model, len);
    if (kind != "llama")
        return "tokenizer.ggml.model \"" + kind.substr(0, 20) + "\" is not read from GGUF yet (llama and gpt2 are; "
               "hint: pass the model's tokenizer.json or tokenizer.model with -z)";
    const GgufKV *tokens = gguf_tokens(g), *scores = gguf_find(g, "tokenizer.ggml.scores"),
                 *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (!tokens) return "tokenizer.ggml.tokens is not an array of 1 to 2^22 strings";
    const uint64_t n = tokens->count;
    if (!per_token_numbers(scores, n) || !per_token_numbers(types, n))
        return "tokenizer.ggml.scores and token_type must be arrays of numbers, one per token";
    int64_t add_space = 1;
    if (gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &add_space) < 0) return "tokenizer.ggml.add_space_prefix is not a bool";
    std::string proto, piece;
    const uint8_t *at = tokens->value;
    int unknown = 0, bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t slen;
        at = gguf_next_string(at, &s, &slen);
        const double type = types ? gguf_array_real(types, i) : 1;
        if (type != 1 && type != 2 && type != 3 && type != 4 && type != 5 && type != 6)
            return "tokenizer.ggml.token_type " + std::to_string(i) + " is not a piece type (1 to 6)";
        unknown += type == 2, bytes += type == 6;
        piece.clear();
        pb_bytes(piece, 1, s, slen);                                          // SentencePiece.piece
        pb_float(piece, 2, scores ? static_cast<float>(gguf_array_real(scores, i)) : 0.0f); // .score
        pb_int(piece, 3, static_cast<uint64_t>(type));                        // .type
        pb_bytes(proto, 1, piece.data(), piece.size());                       // ModelProto.pieces
    }
    if (unknown != 1) return "the vocabulary has " + std::to_string(unknown) + " unknown tokens (token_type 2), SentencePiece needs one";
    std::string trainer, normalizer;
    pb_int(trainer, 3, 2);             // TrainerSpec.model_type: BPE
    pb_int(trainer, 4, n);             // .vocab_size
    pb_int(trainer, 35, bytes > 0);    // .byte_fallback (SentencePiece then wants a piece for each byte)
    const char *names[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int k = 0; k < 2; k++) { // .bos_piece, .eos_piece: the pieces SentencePiece's bos_id() and eos_id() find
        int64_t id;
        if (gguf_get_int(g, names[k], &id) == 1 && id >= 0 && static_cast<uint64_t>(id) < n) {
            const char *s;
            size_t slen;
            const uint8_t *p = tokens->value;
            for (int64_t i = 0; i <= id; i++)
                p = gguf_next_string(p, &s, &slen);
            pb_bytes(trainer, 46 + k, s, slen);
        }
    }
    pb_bytes(normalizer, 1, "identity", 8); // NormalizerSpec.name
    pb_int(normalizer, 3, add_space != 0);  // .add_dummy_prefix
    pb_int(normalizer, 4, 0);               // .remove_extra_whitespaces
    pb_bytes(proto, 2, trainer.data(), trainer.size());
    pb_bytes(proto, 3, normalizer.data(), normalizer.size());
    try {
        const auto status = t->sp.LoadFromSerializedProto(proto);
        if (!status.ok()) return "SentencePiece refuses its vocabulary: " + status.ToString() + " (hint: " PASS_TOKENIZER ")";
    } catch (const std::exception &e) {
        return std::string("SentencePiece refuses its vocabulary: ") + e.what() + " (hint: " PASS_TOKENIZER ")";
    }
    t->n_ids = static_cast<int>(n);
    return "";
}

// tokenizer.ggml.model "gpt2" is a byte-level BPE: its tokens (GPT-2's byte-to-character map, as
// in a tokenizer.json's vocab), its merges ("a b"), and tokenizer.ggml.pre, the name llama.cpp's
// converter gives the pre-tokenizer it recognized (convert_hf_to_gguf.py, get_vocab_base_pre). They
// are written back into the tokenizer.json that name stands for and read by bpe.c, so the encoding is
// the one tests/test_bpe.py holds to the npm tokenizers. A token of type 3 (control) is a special
// added token, of type 4 (user defined) an added one that is text. The names read, with the
// pre-tokenizer of the model family's own tokenizer.json (the regular expressions are theirs):
//   llama-bpe  Llama 3: Split on its regex, then ByteLevel without one; ignore_merges
//   qwen2      Qwen2, Qwen2.5, Qwen3: NFC, Split on its regex (one digit at a time), ByteLevel
//   gpt-2      GPT-2: ByteLevel with its own regex
// Another name is refused, naming it: its expression is not known here.
static const struct {
    const char *pre;
    const char *regex; // NULL: ByteLevel's own (GPT-2's)
    int nfc, ignore_merges;
} GGUF_PRE[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     0, 1},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     1, 0},
    {"gpt-2", nullptr, 0, 0},
};

// Returns "" when the BPE is in t->bpe, else why not.
static std::string bpe_from_gguf(Tokenizer *t, const Gguf *g, const char *path) {
    const char *pre = "";
    size_t pre_len = 0;
    gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len);
    const std::string name(pre, pre_len);
    size_t k = 0;
    while (k < sizeof GGUF_PRE / sizeof GGUF_PRE[0] && name != GGUF_PRE[k].pre)
        k++;
    if (k == sizeof GGUF_PRE / sizeof GGUF_PRE[0])
        return "tokenizer.ggml.pre \"" + name.substr(0, 30) + "\" is not one this program knows (llama-bpe, qwen2 and "
               "gpt-2 are; hint: pass the model's tokenizer.json with -z)";
    const GgufKV *tokens = gguf_tokens(g), *merges = gguf_find(g, "tokenizer.ggml.merges"),
                 *types = gguf_find(g, "tokenizer.ggml.token_type");
    if (!tokens) return "tokenizer.ggml.tokens is not an array of 1 to 2^22 strings";
    if (!merges || merges->type != GGUF_ARRAY || merges->elem != GGUF_STRING)
        return "tokenizer.ggml.merges is not an array of strings";
    if (!per_token_numbers(types, tokens->count))
        return "tokenizer.ggml.token_type must be an array of numbers, one per token";
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *list = cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "ignore_merges", GGUF_PRE[k].ignore_merges);
    const uint8_t *at = tokens->value;
    std::string text;
    for (uint64_t i = 0; i < tokens->count; i++) {
        const char *s;
        size_t len;
        at = gguf_next_string(at, &s, &len);
        text.assign(s, len);
        const double type = types ? gguf_array_real(types, i) : 1;
        if (type == 3 || type == 4) { // an added token: matched in the text before the BPE
            cJSON *a = cJSON_CreateObject();
            cJSON_AddNumberToObject(a, "id", static_cast<double>(i));
            cJSON_AddStringToObject(a, "content", text.c_str());
            cJSON_AddBoolToObject(a, "special", type == 3);
            cJSON_AddBoolToObject(a, "normalized", false);
            cJSON_AddItemToArray(added, a);
        } else {
            cJSON_AddNumberToObject(vocab, text.c_str(), static_cast<double>(i));
        }
    }
    at = merges->value;
    for (uint64_t i = 0; i < merges->count; i++) {
        const char *s;
        size_t len;
        at = gguf_next_string(at, &s, &len);
        cJSON_AddItemToArray(list, cJSON_CreateString(std::string(s, len).c_str()));
    }
    cJSON *byte_level = cJSON_CreateObject();
    cJSON_AddStringToObject(byte_level, "type", "ByteLevel");
    cJSON_AddBoolToObject(byte_level, "add_prefix_space", false);
    cJSON_AddBoolToObject(byte_level, "use_regex", GGUF_PRE[k].regex == nullptr);
    if (GGUF_PRE[k].regex) {
        cJSON *seq = cJSON_AddObjectToObject(root, "pre_tokenizer"), *steps = cJSON_AddArrayToObject(seq, "pretokenizers");
        cJSON_AddStringToObject(seq, "type", "Sequence");
        cJSON *split = cJSON_CreateObject(), *pattern = cJSON_AddObjectToObject(split, "pattern");
        cJSON_AddStringToObject(split, "type", "Split");
        cJSON_AddStringToObject(pattern, "Regex", GGUF_PRE[k].regex);
        cJSON_AddStringToObject(split, "behavior", "Isolated");
        cJSON_AddBoolToObject(split, "invert", false);
        cJSON_AddItemToArray(steps, split);
        cJSON_AddItemToArray(steps, byte_level);
    } else {
        cJSON_AddItemToObject(root, "pre_tokenizer", byte_level);
    }
    if (GGUF_PRE[k].nfc) cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "normalizer"), "type", "NFC");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) return "out of memory";
    char err[400];
    t->bpe = bpe_load_json(json, strlen(json), path, err, sizeof err);
    cJSON_free(json);
    if (!t->bpe) return std::string(err + (strncmp(err, path, strlen(path)) ? 0 : strlen(path) + 2));
    return "";
}

// BOS and EOS as the file's keys say (tokenizer.ggml.add_bos_token / add_eos_token; absent: BOS yes,
// EOS no, llama.cpp's default for this kind). Returns "" or why not.
static std::string specials_from_gguf(Tokenizer *t, const Gguf *g) {
    const char *keys[] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"};
    Special *s[] = {&t->bos, &t->eos};
    for (int k = 0; k < 2; k++) {
        int64_t v;
        const int got = gguf_get_int(g, keys[k], &v);
        if (got < 0) return std::string(keys[k]) + " is not a bool";
        if (got) s[k]->add = v != 0;
    }
    return "";
}

static int load_gguf(Tokenizer *t, const char *path, char *err, size_t errlen) {
    const int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(err, errlen, "%s: cannot open the tokenizer: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void *map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map the file: %s", path, strerror(errno));
        return -1;
    }
    Gguf g;
    char why[300];
    std::string bad;
    if (gguf_parse(&g, map, size, why, sizeof why)) {
        bad = why;
    } else {
        const char *kind = "";
        size_t len = 0;
        gguf_get_string(&g, "tokenizer.ggml.model", &kind, &len);
        bad = len == 4 && !memcmp(kind, "gpt2", 4) ? bpe_from_gguf(t, &g, path) : sp_from_gguf(t, &g);
        if (bad.empty()) bad = specials_from_gguf(t, &g);
        // tokenizer.chat_template, where chat reads a template (tokenizer_config_text): as the
        // tokenizer_config.json of a Hugging Face directory would hold it, with no key if it has none
        const char *tmpl;
        size_t tmpl_len;
        cJSON *config = cJSON_CreateObject();
        if (config && gguf_get_string(&g, "tokenizer.chat_template", &tmpl, &tmpl_len) == 1)
            cJSON_AddStringToObject(config, "chat_template", std::string(tmpl, tmpl_len).c_str());
        char *text = config ? cJSON_PrintUnformatted(config) : nullptr;
        if (text) t->config = text;
        cJSON_free(text);
        cJSON_Delete(config);
        int64_t id; // the file's own BOS and EOS: a byte-level BPE takes them from the checkpoint (tokenizer.h)
        const int64_t n = bad.empty() ? tokenizer_vocab_size(t) : 0;
        t->checkpoint_bos = gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &id) == 1 && id >= 0 && id < n ? (int)id : -1;
        t->checkpoint_eos = gguf_get_int(&g, "tokenizer.ggml.eos_token_id", &id) == 1 && id >= 0 && id < n ? (int)id : -1;
        gguf_free(&g);
    }
    munmap(map, size);
    if (!bad.empty()) {
        snprintf(err, errlen, "%s: %s", path, bad.c_str());
        return -1;
    }
    t->gguf = 1;
    t->config_path = path; // no tokenizer_config.json: the file's keys say what it would
    tokenizer_use_checkpoint(t, t->checkpoint_bos, t->checkpoint_eos);
    return 0;
}

extern "C" Tokenizer *tokenizer_load(const char *path, char *err, size_t errlen) {
    if (check_path(path, err, errlen)) return nullptr;
    Tokenizer *t = new (std::nothrow) Tokenizer;
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", path);
        return nullptr;
    }
    t->bpe = nullptr;
    if (is_gguf(path)) {
        if (load_gguf(t, path, err, errlen)) {
            delete t;
            return nullptr;
        }
        return t;
    }
    if (is_json(path)) {
        t->bpe = bpe_load(path, err, errlen);
        if (!t->bpe) {
            delete t;
            return nullptr;
        }
        if (read_config(t, path, err, errlen)) {
            tokenizer_free(t);
            return nullptr;
        }
        return t;
    }
    try {
        auto status = t->sp.Load(path);
        if (!status.ok()) {
            snprintf(err, errlen, "%s: cannot load the SentencePiece tokenizer: %s (hint: " PASS_TOKENIZER ")", path,
                     status.ToString().c_str());
            delete t;
            return nullptr;
        }
    } catch (const std::exception &e) {
        snprintf(err, errlen, "%s: cannot load the SentencePiece tokenizer: %s", path, e.what());
        delete t;
        return nullptr;
    }
    if (read_config(t, path, err, errlen)) {
        delete t;
        return nullptr;
    }
    if (!t->added_error.empty()) {
        snprintf(err, errlen, "%s: %s (hint: this program reads added tokens without it)", t->config_path.c_str(),
                 t->added_error.c_str());
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
    return t->bpe ? bpe_vocab_size(t->bpe) : t->n_ids;
}
extern "C" int tokenizer_bos_id(const Tokenizer *t) { return t->bos.id; }
extern "C" int tokenizer_eos_id(const Tokenizer *t) { return t->eos.id; }
extern "C" const char *tokenizer_bos_reason(const Tokenizer *t) { return t->bos.reason; }
extern "C" const char *tokenizer_eos_reason(const Tokenizer *t) { return t->eos.reason; }

// The length of the white space character (Rust's char::is_whitespace, as Hugging Face's lstrip and
// rstrip use) that starts at s (n bytes left), or 0.
static size_t white_at(const char *s, size_t n) {
    static const char *const wide[] = {"\xC2\x85", "\xC2\xA0", "\xE1\x9A\x80", "\xE2\x80\xA8", "\xE2\x80\xA9",
                                       "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
    if (n && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) return 1;
    if (n >= 3 && !memcmp(s, "\xE2\x80", 2) && (unsigned char)s[2] >= 0x80 && (unsigned char)s[2] <= 0x8A) return 3;
    for (const char *w : wide)
        if (n >= strlen(w) && !memcmp(s, w, strlen(w))) return strlen(w);
    return 0;
}

// The length of the white space character that ends at s + n, or 0.
static size_t white_before(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (white_at(s + n - k, k) == k) return k;
    return 0;
}

// SentencePiece with the added tokens of tokenizer_config.json: the text is cut at them (leftmost
// first, the longest at one place; lstrip / rstrip take the white space beside them), and each part
// is encoded alone, as Hugging Face's tokenizer does (each part gets the leading-space marker).
static bool sp_encode(const Tokenizer *t, const char *text, size_t len, std::vector<int> *ids) {
    try {
        size_t start = 0, i = 0;
        std::vector<int> part;
        auto encode_part = [&](size_t from, size_t to) {
            if (to <= from) return true;
            if (!t->sp.Encode(std::string(text + from, to - from), &part).ok()) return false;
            ids->insert(ids->end(), part.begin(), part.end());
            return true;
        };
        while (i < len && !t->added.empty()) {
            const SpAdded *best = nullptr;
            for (const SpAdded &a : t->added)
                if (a.content.size() <= len - i && (!best || a.content.size() > best->content.size()) &&
                    !memcmp(text + i, a.content.data(), a.content.size()))
                    best = &a;
            if (!best) {
                i++;
                continue;
            }
            size_t end = i, w;
            while (best->lstrip && end > start && (w = white_before(text + start, end - start)))
                end -= w;
            if (!encode_part(start, end)) return false;
            ids->push_back(best->id);
            i += best->content.size();
            while (best->rstrip && (w = white_at(text + i, len - i)))
                i += w;
            start = i;
        }
        return encode_part(start, len);
    } catch (const std::exception &) {
        return false;
    }
}

extern "C" int *tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int specials, int *n) {
    std::vector<int> ids;
    if (t->bpe) {
        int m;
        int *raw = bpe_encode(t->bpe, text, len, &m);
        if (!raw) return nullptr;
        ids.assign(raw, raw + m);
        free(raw);
    } else if (!sp_encode(t, text, len, &ids)) {
        return nullptr;
    }
    const size_t first = specials && t->bos.id >= 0, last = specials && t->eos.id >= 0;
    int *out = static_cast<int *>(malloc((ids.size() + first + last + 1) * sizeof(int)));
    if (!out) return nullptr;
    if (first) out[0] = t->bos.id;
    std::copy(ids.begin(), ids.end(), out + first);
    if (last) out[first + ids.size()] = t->eos.id;
    *n = static_cast<int>(ids.size() + first + last);
    return out;
}

// A tokenizer.json: a token's bytes, whatever came before it (a character may straddle two tokens;
// the bytes join up in the output). Special tokens (<|begin_of_text|>, <|eot_id|>) are not text.
// Where the decoder strips the space its normalizer put first (Llama 2's), that space is dropped
// at the start of a text: after nothing or after a special token (BOS), as SentencePiece does below.
static const char *decode_bpe(Tokenizer *t, int prev, int id, size_t *len) {
    const int n = bpe_vocab_size(t->bpe);
    if (id < 0 || id >= n || prev >= n) return nullptr;
    int special, prev_special = 0;
    const char *bytes = bpe_token_bytes(t->bpe, id, len, &special);
    if (prev >= 0) {
        size_t prev_len;
        bpe_token_bytes(t->bpe, prev, &prev_len, &prev_special);
    }
    if (!special && *len && bytes[0] == ' ' && bpe_strips_start(t->bpe) && (prev < 0 || prev_special))
        bytes++, (*len)--;
    t->piece.assign(special ? "" : bytes, special ? 0 : *len);
    *len = t->piece.size();
    return t->piece.c_str();
}

extern "C" const char *tokenizer_decode_piece(Tokenizer *t, int prev, int id, size_t *len) {
    if (t->bpe) return decode_bpe(t, prev, id, len);
    // prev is checked too: SentencePiece's IsControl(prev) does not check its argument.
    const int pieces = t->sp.GetPieceSize();
    if (id < 0 || id >= t->n_ids || prev >= t->n_ids) return nullptr;
    t->piece.clear();
    if (id >= pieces) { // an added token: its content, or nothing if special (or an id none has)
        for (const SpAdded &a : t->added)
            if (a.id == id && !a.special) t->piece = a.content;
        *len = t->piece.size();
        return t->piece.c_str();
    }
    const std::string &piece = t->sp.IdToPiece(id);
    try {
        if (t->sp.IsControl(id)) {
            // BOS, EOS and the like are not text.
        } else if (t->sp.IsByte(id)) {
            // Byte fallback: "<0x0A>" stands for the single byte 0x0A.
            t->piece.push_back(static_cast<char>(std::strtol(piece.c_str() + 3, nullptr, 16)));
        } else if (prev < 0 || prev >= pieces || t->sp.IsControl(prev)) {
            // At the start of the text SentencePiece drops the space it added in front of the first
            // word (add_dummy_prefix); let the library decide, as it does for a whole text. After an
            // added token too: the text after it was encoded alone (sp_encode), with its own space.
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

extern "C" int tokenizer_is_special(const Tokenizer *t, int id) {
    if (t->bpe) {
        size_t len;
        int special = 0;
        if (id >= 0 && id < bpe_vocab_size(t->bpe)) bpe_token_bytes(t->bpe, id, &len, &special);
        return special != 0;
    }
    if (id < 0 || id >= t->n_ids) return 0;
    if (id < t->sp.GetPieceSize()) return t->sp.IsControl(id);
    for (const SpAdded &a : t->added)
        if (a.id == id) return a.special;
    return 0;
}
