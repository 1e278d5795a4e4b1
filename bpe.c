// bpe.c - BPE read from a Hugging Face tokenizer.json: byte-level, as Llama 3 and GPT-2 use it, and
// the SentencePiece kind (byte fallback and the metaspace U+2581), as Gemma 3, Llama 2 and Mistral
// ship it beside (or instead of) their tokenizer.model.
//
// Encoding a text takes four steps, each a section below:
//   1. invalid UTF-8 is replaced by U+FFFD, one per maximal ill-formed subpart (Unicode 15, sec.
//      3.9, "U+FFFD Substitution of Maximal Subparts"; what Python's and JavaScript's decoders do,
//      so the text the model sees is the text those tokenizers would be given);
//   2. added tokens ("<|eot_id|>", ...) are found in the text, leftmost first and the longest of
//      those starting at one place, and become their ids: Hugging Face's default, special tokens
//      included (transformers' split_special_tokens=False). One with rstrip (lstrip) takes the white
//      space after (before) it along (Phi-3's <|end|> eats the newline the template puts after it);
//   3. the text between them is put in Unicode normalization form C when the file's normalizer is
//      NFC (Qwen2 and Qwen3: Hugging Face normalizes after taking out the added tokens), then cut into pieces by the pre-tokenizer: Split regexes and Digits in
//      the order the file gives (Isolated: matches and the text between them are pieces; Removed:
//      the matches are dropped, or with invert the text between them, as o200k-style files do),
//      then ByteLevel with or without its own GPT-2 regex. ByteLevel maps
//      each byte to a printable character (bytes_to_unicode in GPT-2's encoder.py, Radford et al.
//      2019), so a piece is a string over 256 characters;
//   4. each piece is merged by BPE (Sennrich et al. 2016, "Neural Machine Translation of Rare Words
//      with Subword Units", arXiv 1508.07909): start from one symbol per byte and merge the
//      adjacent pair with the best (lowest) rank in the merges list, the leftmost of equal ones,
//      until no pair is in the list. With ignore_merges (Llama 3) a piece that is already a word
//      of the vocabulary is taken whole.
// The SentencePiece kind (model.byte_fallback true) changes steps 3 and 4 and decoding, as Hugging
// Face's LlamaConverter / GemmaConverter write such files (transformers convert_slow_tokenizer.py):
//   3'. the normalizer replaces every space by U+2581 '▁' (Replace), and with Prepend also puts one
//      '▁' in front of each non-empty text between added tokens (Llama 2, Mistral; Gemma 3 has no
//      Prepend). There is no pre-tokenizer: Gemma 3's Split on " " finds no space left after the
//      normalizer, so the text between two added tokens is one piece;
//   4'. BPE starts from one symbol per character: the character's vocab id, or, for a character the
//      vocabulary does not have, one <0xXX> token per UTF-8 byte (byte fallback; Hugging Face's
//      BPE::merge_word in tokenizers/src/models/bpe/model.rs); then the same merges by rank.
// Decoding (Replace '▁' -> ' ', ByteFallback, Fuse): a token's '▁' become spaces and <0xXX> its
// byte; with a Strip decoder (Llama 2: Strip(" ", 1, 0)) the space that Prepend put first is
// dropped from the start of a text (tokenizer.cpp, which knows what came before).
// Decoding is per token: a token's string mapped back to bytes. A character can be split across
// tokens (an emoji is 4 bytes, often 2 tokens), so a streamed piece may be part of a character;
// the caller writes bytes, and the bytes of consecutive pieces join up.
//
// The format is Hugging Face tokenizers' serialization (tokenizer.json, "version": "1.0").
// Anything in it that this file does not implement is refused with a message that names it:
// normalizers other than NFC (and, with byte fallback, the Replace / Prepend above), other models
// (WordPiece, Unigram), other pre-tokenizers and decoders (Metaspace among them), Split behaviors
// other than Isolated and Removed, BPE dropout, byte fallback without every <0xXX> token, subword
// prefixes/suffixes, and added tokens with single_word (or normalized, beside a normalizer).
// Regexes are compiled by PCRE2 (Unicode properties, look-ahead, as Llama 3's pattern needs); JSON
// is parsed by cJSON; NFC (Qwen's normalizer) is utf8proc's. All three come from Debian.
#include "bpe.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#define MAX_TOKENS  (1 << 24) // ids and merges: far above any real vocabulary (Llama 3: 128256)
#define MAX_REGEXES 16        // pre-tokenizer steps

// GPT-2's pre-tokenizer regex, which ByteLevel applies when its use_regex is true (the default):
// contractions, letters, digits, other symbols, each optionally after one space; whitespace runs
// keep their last space for the word that follows.
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define METASPACE "\xE2\x96\x81" // U+2581 '▁', SentencePiece's mark for a space
// What a tokenizer.json of the SentencePiece kind that this file does not read is told to do instead.
#define SP_KIND_HINT "(a SentencePiece-style BPE; hint: use the model's tokenizer.model)"

typedef struct {
    int id;
    int special;        // 1: a control token (decodes to nothing in a stream)
    int lstrip, rstrip; // 1: the white space before / after it goes with it (is not encoded)
    int normalized;     // 1: Hugging Face would match it in the normalized text
    size_t off, len;    // its content in Bpe.added_text
} Added;

// What a Split step does with the text (Hugging Face's SplitDelimiterBehavior, and invert).
enum { SPLIT_ISOLATED, SPLIT_DROP_MATCHES, SPLIT_DROP_GAPS };

struct Bpe {
    int n_ids;              // vocab size: 1 + the largest id
    int has_template;       // 1: a TemplateProcessing post-processor decides BOS and EOS
    int bos_id, eos_id;     // the special tokens its template puts before and after the text; -1: none
    char *bytes;            // the decoded bytes of every token, back to back
    size_t *bytes_off;      // [n_ids + 1]: token id is bytes[bytes_off[id] .. bytes_off[id+1])
    unsigned char *special; // [n_ids]: 1 an added token marked special, 2 one not so marked, 0 a word
    // The vocabulary as byte-level strings (ids of the BPE model only), in an open-addressing hash
    // table: word_slot[h] is an id or -1.
    char *words;
    size_t *word_off; // [n_ids + 1]; an id that is not a model word has an empty string
    unsigned char *is_word;
    int *word_slot;
    size_t word_mask;
    // The merges: the pair of ids (a, b) -> its rank and the id of the merged word.
    uint64_t *merge_key; // (a << 32 | b) + 1; 0 = empty slot
    int *merge_rank, *merge_id;
    size_t merge_mask;
    int byte_id[256]; // the id of each byte's one-character word; with byte fallback its <0xXX> token
    int ignore_merges;
    int metaspace;    // the SentencePiece kind: byte fallback, spaces written '▁' (see the top)
    int prepend;      // its normalizer puts '▁' in front of each text (Llama 2, Mistral)
    int strip_start;  // its decoder drops the space at the start of a text (Strip " " 1 0)
    Added *added;
    int n_added;
    unsigned char added_first[256]; // 1: some added token starts with this byte
    char *added_text;
    pcre2_code *re[MAX_REGEXES]; // the pre-tokenizer's regexes, in order
    unsigned char re_mode[MAX_REGEXES]; // SPLIT_*
    int n_re;
    int nfc; // the normalizer is NFC
};

// ---------------------------------------------------------------------------------------------
// Small tools: errors, UTF-8, hashing, growing arrays

static int fail(char *err, size_t errlen, const char *name, const char *what) {
    snprintf(err, errlen, "%s: %s", name, what);
    return -1;
}

static size_t utf8_put(char *out, unsigned cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Length of the well-formed UTF-8 character at s (n bytes left), or 0 with *bad set to the length
// of its maximal ill-formed subpart (at least 1). Well-formed means Table 3-7 of the Unicode
// standard: no overlong forms, no surrogates, nothing past U+10FFFF.
static size_t utf8_char(const unsigned char *s, size_t n, size_t *bad) {
    unsigned c = s[0], need, lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else {
        *bad = 1;
        return 0;
    }
    size_t k = 0; // continuation bytes that fit
    while (k < need && 1 + k < n && s[1 + k] >= (k ? 0x80 : lo) && s[1 + k] <= (k ? 0xBF : hi))
        k++;
    if (k == need) return 1 + need;
    *bad = 1 + k;
    return 0;
}

// The code point of the well-formed character at s, of length len.
static unsigned utf8_decode(const unsigned char *s, size_t len) {
    if (len == 1) return s[0];
    unsigned cp = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

// text with every ill-formed subpart replaced by U+FFFD (EF BF BD); malloc'ed, length in *out_len.
static char *utf8_repair(const char *text, size_t len, size_t *out_len) {
    char *out = malloc(len * 3 + 1); // a bad byte becomes 3 bytes at most
    size_t o = 0;
    if (!out) return NULL;
    for (size_t i = 0; i < len;) {
        size_t bad = 0, ok = utf8_char((const unsigned char *)text + i, len - i, &bad);
        if (ok) {
            memcpy(out + o, text + i, ok);
            o += ok, i += ok;
        } else {
            o += utf8_put(out + o, 0xFFFD);
            i += bad;
        }
    }
    *out_len = o;
    return out;
}

static uint64_t hash_bytes(const char *s, size_t len) { // FNV-1a, 64 bits
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h;
}

static uint64_t hash_u64(uint64_t x) { // splitmix64's finalizer
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ x >> 31;
}

static size_t table_size(size_t n) { // a power of two at least twice n
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    return cap;
}

// An id: an integer in [0, MAX_TOKENS), else -1 (compared as a double first: casting 1e300 to int
// is undefined).
static int json_id(const cJSON *x) {
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble < MAX_TOKENS)) return -1;
    return x->valuedouble == (int)x->valuedouble ? (int)x->valuedouble : -1;
}

typedef struct {
    int *v;
    size_t n, cap;
} IntVec;

static int push(IntVec *a, int x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        int *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The byte-level map (GPT-2's bytes_to_unicode): bytes that are printable Latin-1 characters
// ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 (controls, space, DEL, NBSP,
// soft hyphen) become U+0100, U+0101, ... in byte order. So ' ' is 'Ġ' (U+0120), '\n' is 'Ċ'.

static int printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// The unprintable bytes are three runs, 0x00-0x20 (33 bytes), 0x7F-0xA0 (34) and 0xAD, numbered on
// from U+0100 in that order.
static unsigned byte_to_cp(unsigned b) {
    if (printable(b)) return b;
    return b <= 0x20 ? 256 + b : b <= 0xA0 ? 256 + 33 + (b - 0x7F) : 256 + 33 + 34;
}

// The byte a character of the map stands for, or -1 if it is not one of the 256.
static int cp_to_byte(unsigned cp) {
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    return cp < 256 + 33 ? (int)cp - 256 : cp < 256 + 67 ? 0x7F + (int)cp - 289 : cp == 323 ? 0xAD : -1;
}

// ---------------------------------------------------------------------------------------------
// The vocabulary and the merges

static int word_find(const Bpe *b, const char *s, size_t len) {
    for (size_t h = hash_bytes(s, len) & b->word_mask;; h = (h + 1) & b->word_mask) {
        int id = b->word_slot[h];
        if (id < 0) return -1;
        size_t off = b->word_off[id], wl = b->word_off[id + 1] - off;
        if (wl == len && !memcmp(b->words + off, s, len)) return id;
    }
}

// (rank, merged id) of the pair (a, b), or rank -1 if it is not a merge.
static int merge_find(const Bpe *b, int left, int right, int *merged) {
    const uint64_t key = ((uint64_t)(unsigned)left << 32 | (unsigned)right) + 1;
    for (size_t h = hash_u64(key) & b->merge_mask;; h = (h + 1) & b->merge_mask) {
        if (b->merge_key[h] == 0) return -1;
        if (b->merge_key[h] == key) {
            *merged = b->merge_id[h];
            return b->merge_rank[h];
        }
    }
}

// The vocab object {"word": id, ...}: n_ids, the words and their hash table.
static int load_vocab(Bpe *b, const cJSON *vocab, int max_added_id, const char *name, char *err, size_t errlen) {
    int n = max_added_id + 1, count = 0;
    size_t total = 0;
    char msg[300];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (json_id(e) < 0) {
            snprintf(msg, sizeof msg, "model.vocab: the id of \"%.40s\" is not an integer in [0, %d)", e->string,
                     MAX_TOKENS);
            return fail(err, errlen, name, msg);
        }
        n = e->valueint + 1 > n ? e->valueint + 1 : n;
        total += strlen(e->string);
        count++;
    }
    if (count == 0) return fail(err, errlen, name, "model.vocab is empty");
    b->n_ids = n;
    b->word_off = calloc((size_t)n + 1, sizeof *b->word_off);
    b->is_word = calloc((size_t)n, 1);
    b->words = malloc(total + 1);
    b->word_mask = table_size((size_t)count) - 1;
    b->word_slot = malloc((b->word_mask + 1) * sizeof *b->word_slot);
    size_t *len = calloc((size_t)n, sizeof *len);
    const char **str = calloc((size_t)n, sizeof *str);
    if (!b->word_off || !b->is_word || !b->words || !b->word_slot || !len || !str) {
        free(len), free(str);
        return fail(err, errlen, name, "out of memory");
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (str[e->valueint]) {
            snprintf(msg, sizeof msg, "model.vocab: id %d belongs to two words (\"%.40s\" and \"%.40s\")", e->valueint,
                     str[e->valueint], e->string);
            free(len), free(str);
            return fail(err, errlen, name, msg);
        }
        str[e->valueint] = e->string;
        len[e->valueint] = strlen(e->string);
        b->is_word[e->valueint] = 1;
    }
    size_t off = 0;
    for (int id = 0; id < n; id++) {
        b->word_off[id] = off;
        if (str[id]) memcpy(b->words + off, str[id], len[id]);
        off += len[id];
    }
    b->word_off[n] = off;
    free(len), free(str);
    memset(b->word_slot, 0xFF, (b->word_mask + 1) * sizeof *b->word_slot);
    for (int id = 0; id < n; id++) {
        if (!b->is_word[id]) continue;
        const char *w = b->words + b->word_off[id];
        size_t wl = b->word_off[id + 1] - b->word_off[id];
        if (word_find(b, w, wl) >= 0) { // a JSON object may repeat a key; HF's reader would keep one
            snprintf(msg, sizeof msg, "model.vocab: the word \"%.*s\" appears twice", (int)(wl < 40 ? wl : 40), w);
            return fail(err, errlen, name, msg);
        }
        size_t h = hash_bytes(w, wl) & b->word_mask;
        while (b->word_slot[h] >= 0)
            h = (h + 1) & b->word_mask;
        b->word_slot[h] = id;
    }
    for (unsigned x = 0; b->metaspace && x < 256; x++) { // byte fallback needs a token for every byte
        char c[8];
        snprintf(c, sizeof c, "<0x%02X>", x); // Rust's format!("<{:#04X}>"), as merge_word spells it
        b->byte_id[x] = word_find(b, c, strlen(c));
        if (b->byte_id[x] < 0) {
            snprintf(msg, sizeof msg, "model.vocab has no token %s, which byte_fallback needs for every byte " SP_KIND_HINT,
                     c);
            return fail(err, errlen, name, msg);
        }
    }
    for (unsigned x = 0; !b->metaspace && x < 256; x++) { // every byte must be a word: BPE starts from them
        char c[4];
        b->byte_id[x] = word_find(b, c, utf8_put(c, byte_to_cp(x)));
        if (b->byte_id[x] < 0) {
            snprintf(msg, sizeof msg,
                     "model.vocab has no word for byte 0x%02X (U+%04X), so it is not a byte-level "
                     "vocabulary (hint: this program reads byte-level BPE tokenizer.json files)",
                     x, byte_to_cp(x));
            return fail(err, errlen, name, msg);
        }
    }
    return 0;
}

// The merges list, ["a b", ...] or [["a", "b"], ...]: rank = position in the list.
static int load_merges(Bpe *b, const cJSON *merges, const char *name, char *err, size_t errlen) {
    int n = cJSON_GetArraySize(merges);
    char msg[300];
    if (n > MAX_TOKENS) return fail(err, errlen, name, "model.merges has more than 2^24 entries");
    b->merge_mask = table_size((size_t)n) - 1;
    b->merge_key = calloc(b->merge_mask + 1, sizeof *b->merge_key);
    b->merge_rank = malloc((b->merge_mask + 1) * sizeof *b->merge_rank);
    b->merge_id = malloc((b->merge_mask + 1) * sizeof *b->merge_id);
    char *joined = malloc(b->word_off[b->n_ids] + 2); // no merge is longer than the longest word... or it fails
    if (!b->merge_key || !b->merge_rank || !b->merge_id || !joined) {
        free(joined);
        return fail(err, errlen, name, "out of memory");
    }
    int rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *left = NULL, *right = NULL;
        size_t left_len = 0, right_len = 0;
        if (cJSON_IsString(m)) { // "a b": the two words, split at the one space
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' '))
                left = m->valuestring, left_len = (size_t)(sp - left), right = sp + 1, right_len = strlen(right);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            left = m->child->valuestring, left_len = strlen(left);
            right = m->child->next->valuestring, right_len = strlen(right);
        }
        if (!left) {
            free(joined);
            snprintf(msg, sizeof msg, "model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]", rank);
            return fail(err, errlen, name, msg);
        }
        int a = word_find(b, left, left_len), c = word_find(b, right, right_len), ab = -1;
        if (a >= 0 && c >= 0 && left_len + right_len <= b->word_off[b->n_ids]) {
            memcpy(joined, left, left_len);
            memcpy(joined + left_len, right, right_len);
            ab = word_find(b, joined, left_len + right_len);
        }
        if (ab < 0) {
            free(joined);
            snprintf(msg, sizeof msg, "model.merges[%d] (\"%.*s\" + \"%.*s\"): %s is not in model.vocab", rank,
                     (int)(left_len < 40 ? left_len : 40), left, (int)(right_len < 40 ? right_len : 40), right,
                     a < 0   ? "the first word"
                     : c < 0 ? "the second word"
                             : "the merged word");
            return fail(err, errlen, name, msg);
        }
        const uint64_t key = ((uint64_t)(unsigned)a << 32 | (unsigned)c) + 1;
        size_t h = hash_u64(key) & b->merge_mask;
        while (b->merge_key[h] && b->merge_key[h] != key)
            h = (h + 1) & b->merge_mask;
        // A pair listed twice keeps its later rank, as Hugging Face's reader (a map built in order) does.
        b->merge_key[h] = key, b->merge_rank[h] = rank, b->merge_id[h] = ab;
    }
    free(joined);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Reading tokenizer.json: every section checked, anything not implemented refused by name

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const char *type_of(const cJSON *o) {
    const cJSON *t = get(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

// A boolean field: 1 if true, 0 if false, absent or null (the default in every case used here).
static int flag(const cJSON *o, const char *key) { return cJSON_IsTrue(get(o, key)); }

static int add_regex(Bpe *b, const char *pattern, int literal, int mode, const char *where, const char *name,
                     char *err, size_t errlen) {
    char msg[400];
    if (b->n_re == MAX_REGEXES) return fail(err, errlen, name, "pre_tokenizer: more than 16 Split/Digits steps");
    int code;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR why[160];
        pcre2_get_error_message(code, why, sizeof why);
        snprintf(msg, sizeof msg, "%s: the regex does not compile at offset %zu: %s", where, (size_t)at, why);
        return fail(err, errlen, name, msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // faster where PCRE2 has a JIT; matches the same without
    b->re_mode[b->n_re] = (unsigned char)mode;
    b->re[b->n_re++] = re;
    return 0;
}

// One pre-tokenizer of a Sequence (or the whole one).
static int load_pretokenizer(Bpe *b, const cJSON *p, int *byte_level, const char *name, char *err, size_t errlen) {
    const char *type = type_of(p);
    char msg[300];
    if (*byte_level)
        return fail(err, errlen, name,
                    "pre_tokenizer: ByteLevel must be the last step (a step after it is not implemented)");
    if (type && !strcmp(type, "Sequence") && cJSON_IsArray(get(p, "pretokenizers"))) {
        const cJSON *steps = get(p, "pretokenizers");
        for (const cJSON *s = steps->child; s; s = s->next)
            if (load_pretokenizer(b, s, byte_level, name, err, errlen)) return -1;
        return 0;
    }
    if (type && !strcmp(type, "ByteLevel")) {
        if (flag(p, "add_prefix_space"))
            return fail(err, errlen, name, "pre_tokenizer: ByteLevel add_prefix_space true is not implemented");
        const cJSON *use_regex = get(p, "use_regex"); // absent: true
        if (!cJSON_IsFalse(use_regex) && add_regex(b, GPT2_PATTERN, 0, SPLIT_ISOLATED, "ByteLevel", name, err, errlen)) return -1;
        *byte_level = 1;
        return 0;
    }
    if (type && !strcmp(type, "Digits")) { // Rust's char::is_numeric is the N category, \p{N}
        return add_regex(b, flag(p, "individual_digits") ? "\\p{N}" : "\\p{N}+", 0, SPLIT_ISOLATED, "Digits", name, err, errlen);
    }
    if (type && !strcmp(type, "Split")) {
        const cJSON *pattern = get(p, "pattern"), *behavior = get(p, "behavior");
        const cJSON *regex = get(pattern, "Regex"), *string = get(pattern, "String");
        // Isolated keeps every match and every gap as a piece, inverted or not; Removed drops the
        // matches, or with invert the gaps (the matches are then the pieces: o200k-style files).
        const int isolated = cJSON_IsString(behavior) && !strcmp(behavior->valuestring, "Isolated");
        const int removed = cJSON_IsString(behavior) && !strcmp(behavior->valuestring, "Removed");
        if (!isolated && !removed) {
            snprintf(msg, sizeof msg,
                     "pre_tokenizer: Split with behavior %.40s is not implemented (only Isolated and Removed)",
                     cJSON_IsString(behavior) ? behavior->valuestring : "(missing)");
            return fail(err, errlen, name, msg);
        }
        const int mode = isolated ? SPLIT_ISOLATED : flag(p, "invert") ? SPLIT_DROP_GAPS : SPLIT_DROP_MATCHES;
        if (cJSON_IsString(regex))
            return add_regex(b, regex->valuestring, 0, mode, "pre_tokenizer Split", name, err, errlen);
        if (cJSON_IsString(string))
            return add_regex(b, string->valuestring, 1, mode, "pre_tokenizer Split", name, err, errlen);
        return fail(err, errlen, name, "pre_tokenizer: Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
    }
    snprintf(msg, sizeof msg,
             "pre_tokenizer %.40s is not implemented (this program reads Sequence, Split, Digits and ByteLevel)",
             type ? type : "without a type");
    return fail(err, errlen, name, msg);
}

static int load_added(Bpe *b, const cJSON *list, int *max_id, const char *name, char *err, size_t errlen) {
    char msg[300];
    int n = cJSON_GetArraySize(list);
    size_t total = 0;
    b->added = calloc((size_t)n + 1, sizeof *b->added);
    if (!b->added) return fail(err, errlen, name, "out of memory");
    for (const cJSON *a = list->child; a; a = a->next) {
        const cJSON *id = get(a, "id"), *content = get(a, "content");
        if (json_id(id) < 0 || !cJSON_IsString(content) || !content->valuestring[0])
            return fail(err, errlen, name,
                        "added_tokens: every entry needs an integer \"id\" in [0, 2^24) and a non-empty \"content\"");
        if (flag(a, "single_word")) {
            snprintf(msg, sizeof msg, "added_tokens: \"%.40s\" has single_word true, which is not implemented",
                     content->valuestring);
            return fail(err, errlen, name, msg);
        }
        *max_id = id->valueint > *max_id ? id->valueint : *max_id;
        total += strlen(content->valuestring);
    }
    b->added_text = malloc(total + 1);
    if (!b->added_text) return fail(err, errlen, name, "out of memory");
    size_t off = 0;
    for (const cJSON *a = list->child; a; a = a->next) {
        Added *t = &b->added[b->n_added++];
        t->id = get(a, "id")->valueint;
        t->special = flag(a, "special");
        t->lstrip = flag(a, "lstrip"), t->rstrip = flag(a, "rstrip");
        const cJSON *normalized = get(a, "normalized"); // absent: true, as in Hugging Face
        t->normalized = !cJSON_IsFalse(normalized);
        t->off = off;
        t->len = strlen(get(a, "content")->valuestring);
        memcpy(b->added_text + off, get(a, "content")->valuestring, t->len);
        b->added_first[(unsigned char)b->added_text[off]] = 1;
        off += t->len;
    }
    return 0;
}

// A token's string decoded the SentencePiece way into out (at most len bytes; returns how many):
// "<0xXX>" is the byte XX (the ByteFallback decoder: u8::from_str_radix of its two hex digits), and
// otherwise every '▁' is a space (the Replace decoder).
static size_t metaspace_bytes(const char *s, size_t len, char *out) {
    if (len == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && isxdigit((unsigned char)s[3]) &&
        isxdigit((unsigned char)s[4])) {
        char hex[3] = {s[3], s[4], 0};
        out[0] = (char)strtol(hex, NULL, 16);
        return 1;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 3 <= len && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

// The bytes each token decodes to (the ByteLevel decoder): a word's characters through the map
// back to bytes, or, if one of them is not in the map, the word's own UTF-8 (as Hugging Face's
// decoder does); an added token's content.
static int build_bytes(Bpe *b, const char *name, char *err, size_t errlen) {
    size_t total = b->word_off[b->n_ids];
    for (int k = 0; k < b->n_added; k++)
        total += b->added[k].len;
    b->bytes = malloc(total + 1);
    b->bytes_off = calloc((size_t)b->n_ids + 1, sizeof *b->bytes_off);
    b->special = calloc((size_t)b->n_ids, 1);
    const Added **added = calloc((size_t)b->n_ids, sizeof *added);
    if (!b->bytes || !b->bytes_off || !b->special || !added) {
        free(added);
        return fail(err, errlen, name, "out of memory");
    }
    // An added token may also be a word of the vocabulary (GPT-2's <|endoftext|>), with the same
    // string: otherwise the id would decode to other bytes than it encodes.
    char msg[300];
    for (int k = 0; k < b->n_added; k++) {
        const Added *a = &b->added[k], *before = added[a->id];
        const char *word = b->words + b->word_off[a->id];
        size_t wl = b->word_off[a->id + 1] - b->word_off[a->id];
        if ((before &&
             (before->len != a->len || memcmp(b->added_text + before->off, b->added_text + a->off, a->len))) ||
            (b->is_word[a->id] && (wl != a->len || memcmp(word, b->added_text + a->off, a->len)))) {
            snprintf(msg, sizeof msg, "added_tokens: \"%.*s\" has id %d, which is another token's id",
                     (int)(a->len < 40 ? a->len : 40), b->added_text + a->off, a->id);
            free(added);
            return fail(err, errlen, name, msg);
        }
        added[a->id] = a;
    }
    size_t off = 0;
    for (int id = 0; id < b->n_ids; id++) {
        b->bytes_off[id] = off;
        if (added[id]) {
            const char *content = b->added_text + added[id]->off;
            if (b->metaspace) { // Hugging Face decodes added tokens through the decoder too ("▁▁": 2 spaces)
                off += metaspace_bytes(content, added[id]->len, b->bytes + off);
            } else {
                memcpy(b->bytes + off, content, added[id]->len);
                off += added[id]->len;
            }
            b->special[id] = added[id]->special ? 1 : 2;
            continue;
        }
        const unsigned char *w = (const unsigned char *)b->words + b->word_off[id];
        size_t wl = b->word_off[id + 1] - b->word_off[id], start = off;
        if (b->metaspace) {
            off += metaspace_bytes((const char *)w, wl, b->bytes + off);
            continue;
        }
        for (size_t i = 0; i < wl;) {
            size_t bad = 0, cl = utf8_char(w + i, wl - i, &bad);
            int byte = cl ? cp_to_byte(utf8_decode(w + i, cl)) : -1;
            if (byte < 0) { // not a byte-level word: its own bytes
                memcpy(b->bytes + start, w, wl);
                off = start + wl;
                break;
            }
            b->bytes[off++] = (char)byte;
            i += cl;
        }
    }
    b->bytes_off[b->n_ids] = off;
    free(added);
    return 0;
}

// The template's id of one special token of its "single" list, or -2 if the entry is not a
// SpecialToken (the text, $A, is a Sequence entry), -1 after an error (reported).
static int template_id(Bpe *b, const cJSON *p, const cJSON *entry, const char *name, char *err, size_t errlen) {
    const cJSON *special = get(get(entry, "SpecialToken"), "id");
    if (!get(entry, "SpecialToken")) return -2;
    const cJSON *tok = cJSON_IsString(special) ? get(get(p, "special_tokens"), special->valuestring) : NULL;
    const cJSON *ids = get(tok, "ids");
    if (!cJSON_IsArray(ids) || cJSON_GetArraySize(ids) != 1 || json_id(ids->child) < 0 ||
        json_id(ids->child) >= b->n_ids)
        return fail(err, errlen, name, "post_processor: a special token of the template has no single id in "
                                       "special_tokens");
    return json_id(ids->child);
}

// What goes around the text: a TemplateProcessing post-processor's "single" template, such as
// Llama 3's "<|begin_of_text|> $A" (BOS first) or "<s> $A </s>" (BOS and EOS). ByteLevel's
// post-processor adds nothing, and decides nothing: run.c then asks tokenizer_config.json and the
// checkpoint (tokenizer.h).
static int load_post_processor(Bpe *b, const cJSON *p, const char *name, char *err, size_t errlen) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *type = type_of(p);
    if (type && !strcmp(type, "ByteLevel")) return 0;
    if (type && !strcmp(type, "Sequence") && cJSON_IsArray(get(p, "processors"))) {
        for (const cJSON *s = get(p, "processors")->child; s; s = s->next)
            if (load_post_processor(b, s, name, err, errlen)) return -1;
        return 0;
    }
    if (type && !strcmp(type, "TemplateProcessing")) {
        const cJSON *single = get(p, "single"), *first = single ? single->child : NULL, *last = first;
        while (last && last->next)
            last = last->next;
        const int bos = first ? template_id(b, p, first, name, err, errlen) : -2;
        const int eos = last && last != first ? template_id(b, p, last, name, err, errlen) : -2;
        if (bos == -1 || eos == -1) return -1;
        b->has_template = 1;
        b->bos_id = bos < 0 ? -1 : bos;
        b->eos_id = eos < 0 ? -1 : eos;
        return 0;
    }
    char msg[200];
    snprintf(msg, sizeof msg,
             "post_processor %.40s is not implemented (this program reads ByteLevel, TemplateProcessing, Sequence)",
             type ? type : "without a type");
    return fail(err, errlen, name, msg);
}

// The SentencePiece kind (byte fallback): what its normalizer, pre-tokenizer and decoder may be.

static int is_string(const cJSON *x, const char *want) { return cJSON_IsString(x) && !strcmp(x->valuestring, want); }

static int is_type(const cJSON *o, const char *want) {
    const char *t = type_of(o);
    return t && !strcmp(t, want);
}

// Replace {"String": from} by to (a normalizer or a decoder).
static int is_replace(const cJSON *o, const char *from, const char *to) {
    return is_type(o, "Replace") && is_string(get(get(o, "pattern"), "String"), from) &&
           !get(get(o, "pattern"), "Regex") && is_string(get(o, "content"), to);
}

// The normalizer: Replace(" ", "▁") alone (Gemma 3), or in a Sequence with Prepend("▁") (Llama 2 and
// Mistral write Prepend first; either order gives the same text, the '▁' put first being no space).
static int load_metaspace_normalizer(Bpe *b, const cJSON *n, const char *name, char *err, size_t errlen) {
    int replace = 0, prepend = 0, other = 0;
    if (is_type(n, "Sequence") && cJSON_IsArray(get(n, "normalizers"))) {
        for (const cJSON *step = get(n, "normalizers")->child; step; step = step->next) {
            if (is_replace(step, " ", METASPACE))
                replace++;
            else if (is_type(step, "Prepend") && is_string(get(step, "prepend"), METASPACE))
                prepend++;
            else
                other++;
        }
    } else if (is_replace(n, " ", METASPACE)) {
        replace = 1;
    }
    if (replace != 1 || prepend > 1 || other) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "normalizer %.40s is not implemented beside byte_fallback (this program reads Replace(\" \", "
                 "\"" METASPACE "\"), alone or with Prepend(\"" METASPACE "\")) " SP_KIND_HINT,
                 n && !cJSON_IsNull(n) && type_of(n) ? type_of(n) : "none");
        return fail(err, errlen, name, msg);
    }
    b->prepend = prepend;
    return 0;
}

// The pre-tokenizer: none, or Gemma 3's Split on the String " " (not inverted), which never matches:
// it runs on the normalized text, whose spaces are all '▁' by then.
static int load_metaspace_pretokenizer(const cJSON *p, const char *name, char *err, size_t errlen) {
    if (!p || cJSON_IsNull(p)) return 0;
    if (is_type(p, "Split") && is_string(get(get(p, "pattern"), "String"), " ") && !flag(p, "invert")) return 0;
    char msg[300];
    snprintf(msg, sizeof msg,
             "pre_tokenizer %.40s is not implemented beside byte_fallback (this program reads none, or a Split "
             "on \" \" that the normalizer leaves nothing to match) " SP_KIND_HINT,
             type_of(p) ? type_of(p) : "without a type");
    return fail(err, errlen, name, msg);
}

// The decoder: Sequence [Replace("▁", " "), ByteFallback, Fuse], then Strip(" ", 1, 0) where the
// normalizer prepends (Llama 2, Mistral).
static int load_metaspace_decoder(Bpe *b, const cJSON *d, const char *name, char *err, size_t errlen) {
    const cJSON *step = is_type(d, "Sequence") && cJSON_IsArray(get(d, "decoders")) ? get(d, "decoders")->child : NULL;
    int ok = step && is_replace(step, METASPACE, " ");
    ok = ok && (step = step->next) && is_type(step, "ByteFallback");
    ok = ok && (step = step->next) && is_type(step, "Fuse");
    if (ok && (step = step->next)) {
        const cJSON *start = get(step, "start"), *stop = get(step, "stop");
        ok = is_type(step, "Strip") && is_string(get(step, "content"), " ") && cJSON_IsNumber(start) &&
             start->valuedouble == 1 && cJSON_IsNumber(stop) && stop->valuedouble == 0 && !step->next;
        b->strip_start = 1;
    }
    if (ok) return 0;
    char msg[300];
    snprintf(msg, sizeof msg,
             "decoder %.40s is not implemented beside byte_fallback (this program reads the Sequence Replace(\""
             METASPACE "\", \" \"), ByteFallback, Fuse, and Strip(\" \", 1, 0) after them) " SP_KIND_HINT,
             type_of(d) ? type_of(d) : "(missing)");
    return fail(err, errlen, name, msg);
}

static int load_root(Bpe *b, const cJSON *root, const char *name, char *err, size_t errlen) {
    char msg[300];
    const cJSON *model = get(root, "model"), *normalizer = get(root, "normalizer");
    const cJSON *pre = get(root, "pre_tokenizer"), *decoder = get(root, "decoder");
    const cJSON *added = get(root, "added_tokens");
    if (!cJSON_IsObject(root) || !cJSON_IsObject(model))
        return fail(err, errlen, name,
                    "not a tokenizer.json: no \"model\" object (hint: pass the model's "
                    "tokenizer.json or tokenizer.model with -z)");
    const char *mtype = type_of(model);
    if (mtype && strcmp(mtype, "BPE")) {
        snprintf(msg, sizeof msg, "model type %.40s is not implemented (this program reads BPE)", mtype);
        return fail(err, errlen, name, msg);
    }
    b->metaspace = flag(model, "byte_fallback");
    if (b->metaspace) {
        if (load_metaspace_normalizer(b, normalizer, name, err, errlen)) return -1;
    } else if (normalizer && !cJSON_IsNull(normalizer)) {
        if (!type_of(normalizer) || strcmp(type_of(normalizer), "NFC")) {
            snprintf(msg, sizeof msg,
                     "normalizer %.40s is not implemented (this program reads none, or NFC as Qwen's files have)",
                     type_of(normalizer) ? type_of(normalizer) : "without a type");
            return fail(err, errlen, name, msg);
        }
        b->nfc = 1;
    }
    const cJSON *dropout = get(model, "dropout"), *unk = get(model, "unk_token");
    const cJSON *prefix = get(model, "continuing_subword_prefix"), *suffix = get(model, "end_of_word_suffix");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0)
        return fail(err, errlen, name, "model.dropout is not implemented (BPE dropout is for training)");
    if ((cJSON_IsString(prefix) && prefix->valuestring[0]) || (cJSON_IsString(suffix) && suffix->valuestring[0]))
        return fail(err, errlen, name, "model.continuing_subword_prefix / end_of_word_suffix are not implemented");
    (void)unk; // never used: every byte is a word of a byte-level vocabulary, or has a <0xXX> token (below)
    b->ignore_merges = flag(model, "ignore_merges");
    if (!cJSON_IsObject(get(model, "vocab")) || !cJSON_IsArray(get(model, "merges")))
        return fail(err, errlen, name, "model needs a \"vocab\" object and a \"merges\" array");
    int max_id = -1;
    if (added && !cJSON_IsNull(added)) {
        if (!cJSON_IsArray(added)) return fail(err, errlen, name, "added_tokens is not an array");
        if (load_added(b, added, &max_id, name, err, errlen)) return -1;
    }
    for (int k = 0; (b->nfc || b->metaspace) && k < b->n_added; k++)
        if (b->added[k].normalized) { // Hugging Face would look for it in the normalized text
            snprintf(msg, sizeof msg,
                     "added_tokens: \"%.*s\" has normalized true beside a normalizer, which is not "
                     "implemented (Qwen's and Gemma's files have normalized false)",
                     (int)(b->added[k].len < 40 ? b->added[k].len : 40), b->added_text + b->added[k].off);
            return fail(err, errlen, name, msg);
        }
    if (load_vocab(b, get(model, "vocab"), max_id, name, err, errlen)) return -1;
    if (load_merges(b, get(model, "merges"), name, err, errlen)) return -1;
    if (b->metaspace) {
        if (load_metaspace_pretokenizer(pre, name, err, errlen) || load_metaspace_decoder(b, decoder, name, err, errlen))
            return -1;
        if (b->prepend != b->strip_start) // the one undoes the other: alone, a text would not come back
            return fail(err, errlen, name,
                        b->prepend ? "the normalizer's Prepend(\"" METASPACE "\") without the decoder's Strip(\" \", 1, 0) "
                                     "is not implemented (Llama 2 and Mistral have both) " SP_KIND_HINT
                                   : "the decoder's Strip(\" \", 1, 0) without the normalizer's Prepend(\"" METASPACE "\") "
                                     "is not implemented (Llama 2 and Mistral have both) " SP_KIND_HINT);
        if (build_bytes(b, name, err, errlen)) return -1;
        b->bos_id = b->eos_id = -1;
        return load_post_processor(b, get(root, "post_processor"), name, err, errlen);
    }
    int byte_level = 0;
    if (pre && !cJSON_IsNull(pre) && load_pretokenizer(b, pre, &byte_level, name, err, errlen)) return -1;
    if (!byte_level)
        return fail(err, errlen, name,
                    "pre_tokenizer: no ByteLevel step, so this is not byte-level BPE (only "
                    "byte-level BPE is implemented)");
    const char *dtype = type_of(decoder);
    if (!dtype || strcmp(dtype, "ByteLevel")) {
        snprintf(msg, sizeof msg, "decoder %.40s is not implemented (this program reads ByteLevel)",
                 dtype ? dtype : "(missing)");
        return fail(err, errlen, name, msg);
    }
    if (build_bytes(b, name, err, errlen)) return -1;
    b->bos_id = b->eos_id = -1;
    return load_post_processor(b, get(root, "post_processor"), name, err, errlen);
}

Bpe *bpe_load_json(const char *json, size_t len, const char *name, char *err, size_t errlen) {
    Bpe *b = calloc(1, sizeof *b);
    if (!b) {
        fail(err, errlen, name, "out of memory");
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        char msg[200];
        snprintf(msg, sizeof msg, "not valid JSON (the parser stopped at byte %td)", at ? at - json : (ptrdiff_t)0);
        fail(err, errlen, name, msg);
        free(b);
        return NULL;
    }
    int status = load_root(b, root, name, err, errlen);
    cJSON_Delete(root);
    if (status) {
        bpe_free(b);
        return NULL;
    }
    return b;
}

Bpe *bpe_load(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open (hint: pass the model's tokenizer.json or tokenizer.model with -z)",
                 path);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) {
            char *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, errlen, "%s: %s", path, bad ? "cannot read" : "out of memory");
        return NULL;
    }
    Bpe *b = bpe_load_json(buf, n, path, err, errlen);
    free(buf);
    return b;
}

void bpe_free(Bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->n_re; i++)
        pcre2_code_free(b->re[i]);
    free(b->bytes), free(b->bytes_off), free(b->special);
    free(b->words), free(b->word_off), free(b->is_word), free(b->word_slot);
    free(b->merge_key), free(b->merge_rank), free(b->merge_id);
    free(b->added), free(b->added_text);
    free(b);
}

int bpe_vocab_size(const Bpe *b) { return b->n_ids; }
int bpe_template(const Bpe *b, int *bos, int *eos) {
    *bos = b->bos_id;
    *eos = b->eos_id;
    return b->has_template;
}

int bpe_drops_text(const Bpe *b) {
    for (int k = 0; k < b->n_re; k++)
        if (b->re_mode[k] != SPLIT_ISOLATED) return 1;
    return 0;
}

int bpe_strips_start(const Bpe *b) { return b->strip_start; }

int bpe_is_added(const Bpe *b, int id) { return b->special[id] != 0; }

const char *bpe_token_bytes(const Bpe *b, int id, size_t *len, int *special) {
    *len = b->bytes_off[id + 1] - b->bytes_off[id];
    *special = b->special[id] == 1;
    return b->bytes + b->bytes_off[id];
}

// ---------------------------------------------------------------------------------------------
// BPE on one piece of the pre-tokenizer
//
// The piece starts as one symbol per byte, in a linked list. A min-heap holds candidate merges
// (rank, position of the left symbol): popping the best one gives the lowest rank, and the
// leftmost of equal ranks. A candidate whose symbols have changed since it was pushed is stale and
// dropped; a symbol only ever grows, so its id never comes back. After a merge, the new symbol's
// pairs with its neighbours become candidates. O(n log n) in the piece's length.

typedef struct {
    int rank, pos, left, right; // the pair as it was pushed
} Candidate;

typedef struct {
    Candidate *c;
    size_t n;
} Heap;

static int before(const Candidate *x, const Candidate *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(Heap *h, Candidate c) { // h->c has room (see encode_piece)
    size_t i = h->n++;
    while (i && before(&c, &h->c[(i - 1) / 2])) {
        h->c[i] = h->c[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->c[i] = c;
}

static Candidate heap_pop(Heap *h) {
    Candidate top = h->c[0], last = h->c[--h->n];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= h->n) break;
        if (k + 1 < h->n && before(&h->c[k + 1], &h->c[k])) k++;
        if (!before(&h->c[k], &last)) break;
        h->c[i] = h->c[k];
        i = k;
    }
    if (h->n) h->c[i] = last;
    return top;
}

typedef struct {
    int id, prev, next; // next = -1 at the end
} Symbol;

static void consider(const Bpe *b, Heap *h, const Symbol *s, int pos) {
    int next = s[pos].next, merged;
    if (next < 0) return;
    int rank = merge_find(b, s[pos].id, s[next].id, &merged);
    if (rank >= 0) heap_push(h, (Candidate){rank, pos, s[pos].id, s[next].id});
}

static int encode_piece(const Bpe *b, const char *piece, size_t len, IntVec *out) {
    if (len == 0) return 0;
    if (b->ignore_merges && b->metaspace) { // the whole piece may be a word already
        int id = word_find(b, piece, len);
        if (id >= 0) return push(out, id);
    } else if (b->ignore_merges) { // the whole piece, as a byte-level string, may be a word already
        char *mapped = malloc(len * 2);
        if (!mapped) return -1;
        size_t m = 0;
        for (size_t i = 0; i < len; i++)
            m += utf8_put(mapped + m, byte_to_cp((unsigned char)piece[i]));
        int id = word_find(b, mapped, m);
        free(mapped);
        if (id >= 0) return push(out, id);
    }
    Symbol *s = malloc(len * sizeof *s);
    Heap h = {malloc(3 * len * sizeof *h.c), 0}; // len - 1 pairs, then at most 2 per merge
    if (!s || !h.c) {
        free(s), free(h.c);
        return -1;
    }
    // The first symbols: one per byte; with byte fallback one per character, its id or, for one the
    // vocabulary lacks, its bytes' <0xXX> tokens (piece is well-formed UTF-8, see utf8_repair).
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t bad = 0, cl = b->metaspace ? utf8_char((const unsigned char *)piece + i, len - i, &bad) : 1;
        int id = b->metaspace ? word_find(b, piece + i, cl) : -1;
        if (id >= 0)
            s[n++].id = id;
        else
            for (size_t k = 0; k < cl; k++)
                s[n++].id = b->byte_id[(unsigned char)piece[i + k]];
        i += cl;
    }
    for (size_t i = 0; i < n; i++)
        s[i].prev = (int)i - 1, s[i].next = i + 1 < n ? (int)i + 1 : -1;
    for (size_t i = 0; i + 1 < n; i++)
        consider(b, &h, s, (int)i);
    while (h.n) {
        Candidate c = heap_pop(&h);
        int next = s[c.pos].next, merged = -1;
        if (s[c.pos].id != c.left || next < 0 || s[next].id != c.right) continue; // stale
        merge_find(b, c.left, c.right, &merged);
        s[c.pos].id = merged; // the left symbol absorbs the right one
        s[c.pos].next = s[next].next;
        if (s[next].next >= 0) s[s[next].next].prev = c.pos;
        s[next].id = -1;
        if (s[c.pos].prev >= 0) consider(b, &h, s, s[c.pos].prev);
        consider(b, &h, s, c.pos);
    }
    int status = 0;
    for (int i = 0; i >= 0 && !status; i = s[i].next)
        status = push(out, s[i].id);
    free(s), free(h.c);
    return status;
}

// ---------------------------------------------------------------------------------------------
// The pre-tokenizer: regex step k cuts a piece into its matches and the text between them (the
// gaps), and hands each part to step k + 1, except the matches of a Removed step (the gaps of an
// inverted one); after the last step, BPE. A regex sees only its piece, so a look-ahead stops at
// the piece's end, as in Hugging Face.

static int pre_tokenize(const Bpe *b, int k, const char *piece, size_t len, pcre2_match_data *md, IntVec *out) {
    if (k == b->n_re) return encode_piece(b, piece, len, out);
    const int gaps = b->re_mode[k] != SPLIT_DROP_GAPS, matches = b->re_mode[k] != SPLIT_DROP_MATCHES;
    size_t at = 0, done = 0; // done: the end of what has been handed on
    while (at < len) {
        int rc = pcre2_match(b->re[k], (PCRE2_SPTR)piece, len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break; // no more matches (or a match limit hit: the rest is one part)
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t start = ov[0], end = ov[1];
        if (end == start) { // an empty match gives no part; go on from the next character
            size_t bad = 0, cl = utf8_char((const unsigned char *)piece + start, len - start, &bad);
            at = start + (cl ? cl : 1);
            continue;
        }
        if (gaps && start > done && pre_tokenize(b, k + 1, piece + done, start - done, md, out)) return -1;
        if (matches && pre_tokenize(b, k + 1, piece + start, end - start, md, out)) return -1;
        done = at = end;
    }
    if (gaps && len > done && pre_tokenize(b, k + 1, piece + done, len - done, md, out)) return -1;
    return 0;
}

// Rust's char::is_whitespace (Unicode White_Space), which Hugging Face's lstrip and rstrip use.
static int is_white(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// The text between two added tokens: put in NFC if the file says so, then pre-tokenized and
// merged. text is well-formed UTF-8 (utf8_repair).
static int encode_text(const Bpe *b, const char *text, size_t len, pcre2_match_data *md, IntVec *out) {
    if (b->metaspace && len > 0) { // Prepend("▁") if asked, Replace(" ", "▁"); one piece (see the top)
        char *norm = malloc(3 * len + 3);
        if (!norm) return -1;
        size_t m = 0;
        if (b->prepend) memcpy(norm, METASPACE, 3), m = 3;
        for (size_t i = 0; i < len; i++)
            if (text[i] == ' ')
                memcpy(norm + m, METASPACE, 3), m += 3;
            else
                norm[m++] = text[i];
        const int status = encode_piece(b, norm, m, out);
        free(norm);
        return status;
    }
    if (!b->nfc || len == 0) return pre_tokenize(b, 0, text, len, md, out);
    utf8proc_uint8_t *nfc = NULL;
    const utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &nfc,
                                            UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    const int status = n < 0 ? -1 : pre_tokenize(b, 0, (const char *)nfc, (size_t)n, md, out);
    free(nfc);
    return status;
}

// The longest added token that starts at text[i], or NULL.
static const Added *added_at(const Bpe *b, const char *text, size_t len, size_t i) {
    const Added *best = NULL;
    for (int k = 0; k < b->n_added; k++) {
        const Added *a = &b->added[k];
        if (a->len <= len - i && (!best || a->len > best->len) && !memcmp(text + i, b->added_text + a->off, a->len))
            best = a;
    }
    return best;
}

int *bpe_encode(const Bpe *b, const char *raw, size_t raw_len, int *n) {
    size_t len;
    char *text = utf8_repair(raw, raw_len, &len);
    pcre2_match_data *md = b->n_re ? pcre2_match_data_create(1, NULL) : NULL;
    IntVec out = {0};
    int status = !text || (b->n_re && !md) ? -1 : 0;
    size_t start = 0; // of the text not yet encoded
    for (size_t i = 0; i < len && !status;) {
        const Added *a = b->added_first[(unsigned char)text[i]] ? added_at(b, text, len, i) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t end = i; // of the text before the token: lstrip leaves its white space out
        while (a->lstrip && end > start) {
            size_t c = end - 1, bad = 0;
            while (c > start && ((unsigned char)text[c] & 0xC0) == 0x80)
                c--;
            if (!is_white(utf8_decode((const unsigned char *)text + c, utf8_char((const unsigned char *)text + c,
                                                                                  end - c, &bad))))
                break;
            end = c;
        }
        status = encode_text(b, text + start, end - start, md, &out);
        if (!status) status = push(&out, a->id);
        i += a->len;
        while (a->rstrip && i < len) { // and rstrip the white space after it
            size_t bad = 0, cl = utf8_char((const unsigned char *)text + i, len - i, &bad);
            if (!is_white(utf8_decode((const unsigned char *)text + i, cl))) break;
            i += cl;
        }
        start = i;
    }
    if (!status) status = encode_text(b, text + start, len - start, md, &out);
    if (!status && !out.v) status = push(&out, 0), out.n = 0; // an empty text: a valid, empty array
    pcre2_match_data_free(md);
    free(text);
    if (status) {
        free(out.v);
        return NULL;
    }
    *n = (int)out.n;
    return out.v;
}
