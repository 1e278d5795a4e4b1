// gguf.c - the GGUF reader (gguf.h has the format). A reader walks the file once with a cursor that
// never passes its end; counts are bounded by the bytes left before anything is allocated for them
// (a metadata entry takes at least 13 bytes, a tensor info 32), so a file that claims 2^60 tensors
// is refused for its length, not by an allocation.
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// The ggml types: name, values per block, bytes per block (ggml.c, type_traits; each quantized
// type's block struct in ggml-common.h). Only the sizes decide where a tensor ends.

static const struct {
    const char *name;
    int block, bytes;
} GGML_TYPES[] = {
    [GGML_F32] = {"F32", 1, 4},          [GGML_F16] = {"F16", 1, 2},          [GGML_Q4_0] = {"Q4_0", 32, 18},
    [GGML_Q4_1] = {"Q4_1", 32, 20},      [GGML_Q5_0] = {"Q5_0", 32, 22},      [GGML_Q5_1] = {"Q5_1", 32, 24},
    [GGML_Q8_0] = {"Q8_0", 32, 34},      [GGML_Q8_1] = {"Q8_1", 32, 36},      [GGML_Q2_K] = {"Q2_K", 256, 84},
    [GGML_Q3_K] = {"Q3_K", 256, 110},    [GGML_Q4_K] = {"Q4_K", 256, 144},    [GGML_Q5_K] = {"Q5_K", 256, 176},
    [GGML_Q6_K] = {"Q6_K", 256, 210},    [GGML_Q8_K] = {"Q8_K", 256, 292},    [GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [GGML_IQ2_XS] = {"IQ2_XS", 256, 74}, [GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98}, [GGML_IQ1_S] = {"IQ1_S", 256, 50},
    [GGML_IQ4_NL] = {"IQ4_NL", 32, 18},  [GGML_IQ3_S] = {"IQ3_S", 256, 110},  [GGML_IQ2_S] = {"IQ2_S", 256, 82},
    [GGML_IQ4_XS] = {"IQ4_XS", 256, 136}, [GGML_I8] = {"I8", 1, 1},           [GGML_I16] = {"I16", 1, 2},
    [GGML_I32] = {"I32", 1, 4},          [GGML_I64] = {"I64", 1, 8},          [GGML_F64] = {"F64", 1, 8},
    [GGML_IQ1_M] = {"IQ1_M", 256, 56},   [GGML_BF16] = {"BF16", 1, 2},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const char *ggml_type_name(uint32_t type) { return type < N_GGML_TYPES ? GGML_TYPES[type].name : NULL; }

// Bytes of a metadata scalar of type t; 0 for a string, an array or a number that is no type.
static size_t scalar_bytes(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

// ---------------------------------------------------------------------------------------------
// The cursor

typedef struct {
    const uint8_t *base;
    size_t size, off;
    const char *bad; // the first thing found wrong; the cursor stops there
} Cur;

static const uint8_t *need(Cur *c, size_t n) {
    if (c->bad) return NULL;
    if (n > c->size - c->off) {
        c->bad = "the file ends inside its header (hint: the file is truncated; download or convert it again)";
        return NULL;
    }
    const uint8_t *p = c->base + c->off;
    c->off += n;
    return p;
}

static uint64_t u64(Cur *c) {
    const uint8_t *p = need(c, 8);
    uint64_t v = 0;
    if (p) memcpy(&v, p, 8);
    return v;
}

static uint32_t u32(Cur *c) {
    const uint8_t *p = need(c, 4);
    uint32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}

static const char *string(Cur *c, size_t *len) {
    const uint64_t n = u64(c);
    if (!c->bad && n > c->size - c->off) c->bad = "a string runs past the end of the file (hint: the file is damaged)";
    *len = c->bad ? 0 : (size_t)n;
    return (const char *)need(c, *len);
}

// A value of type t (after its type), into kv (NULL: an element of an array, only walked over).
// depth: arrays inside arrays, at most one level.
static void value(Cur *c, uint32_t t, GgufKV *kv, int depth) {
    if (kv) kv->type = (GgufType)t, kv->value = c->base + c->off;
    if (t == GGUF_STRING) {
        size_t len;
        string(c, &len);
        if (kv) kv->count = len, kv->value += 8;
    } else if (t == GGUF_ARRAY) {
        const uint32_t elem = u32(c);
        const uint64_t count = u64(c);
        if (kv) kv->elem = (GgufType)elem, kv->count = count, kv->value += 12;
        const size_t each = scalar_bytes(elem);
        if (c->bad) return;
        if (elem != GGUF_STRING && elem != GGUF_ARRAY && !each) {
            c->bad = "an array has an unknown element type (hint: the file is damaged or newer than this reader)";
        } else if (elem == GGUF_ARRAY && depth > 0) {
            c->bad = "arrays nested more than two deep (hint: the file is damaged)";
        } else if (each) { // the count checked before it is multiplied
            if (count > (c->size - c->off) / each) c->bad = "an array runs past the end of the file (hint: the file is damaged)";
            need(c, (size_t)count * each);
        } else { // strings (8 bytes at least each) or arrays (12): the count is bounded by the bytes walked
            for (uint64_t i = 0; i < count && !c->bad; i++)
                value(c, elem, NULL, depth + 1);
        }
    } else if (scalar_bytes(t)) {
        need(c, scalar_bytes(t));
    } else if (!c->bad) {
        c->bad = "a metadata value has an unknown type (hint: the file is damaged or newer than this reader)";
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

int gguf_is_gguf(const void *map, size_t size) { return size >= 4 && !memcmp(map, "GGUF", 4); }

static int fail(Gguf *g, char *err, size_t errlen, const char *what, const char *detail) {
    snprintf(err, errlen, "bad GGUF: %s%s", what, detail ? detail : "");
    gguf_free(g);
    return -1;
}

static int by_offset(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int by_name(const void *a, const void *b) {
    const GgufTensor *x = *(const GgufTensor *const *)a, *y = *(const GgufTensor *const *)b;
    const int c = memcmp(x->name, y->name, x->name_len < y->name_len ? x->name_len : y->name_len);
    return c ? c : x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

static int by_key(const void *a, const void *b) {
    const GgufKV *x = a, *y = b;
    const int c = memcmp(x->key, y->key, x->key_len < y->key_len ? x->key_len : y->key_len);
    return c ? c : x->key_len < y->key_len ? -1 : x->key_len > y->key_len;
}

int gguf_parse(Gguf *g, const void *map, size_t size, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    Cur c = {map, size, 0, NULL};
    char msg[200];
    if (!gguf_is_gguf(map, size)) return fail(g, err, errlen, "no GGUF magic", NULL);
    need(&c, 4);
    g->version = u32(&c);
    if (!c.bad && (g->version < 2 || g->version > 3)) {
        snprintf(msg, sizeof msg, "version %u; this program reads versions 2 and 3 (hint: convert the model "
                 "again with a current llama.cpp)", g->version);
        return fail(g, err, errlen, msg, NULL);
    }
    const uint64_t n_tensors = u64(&c), n_kv = u64(&c);
    if (c.bad) return fail(g, err, errlen, c.bad, NULL);
    if (n_kv > (size - c.off) / 13 || n_tensors > (size - c.off) / 32)
        return fail(g, err, errlen, "more metadata or tensors than the file has room for (hint: the file is "
                                    "damaged or not GGUF)", NULL);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return fail(g, err, errlen, "out of memory", NULL);
    for (uint64_t i = 0; i < n_kv && !c.bad; i++) {
        GgufKV *kv = &g->kv[g->n_kv++];
        kv->key = string(&c, &kv->key_len);
        value(&c, u32(&c), kv, 0);
    }
    if (c.bad) return fail(g, err, errlen, c.bad, NULL);
    qsort(g->kv, g->n_kv, sizeof *g->kv, by_key); // in key order: a key given twice sits beside itself
    for (size_t i = 1; i < g->n_kv; i++)
        if (!by_key(&g->kv[i - 1], &g->kv[i])) {
            snprintf(msg, sizeof msg, "metadata key %.*s is given twice (hint: the file is damaged)",
                     (int)(g->kv[i].key_len < 64 ? g->kv[i].key_len : 64), g->kv[i].key);
            return fail(g, err, errlen, msg, NULL);
        }
    g->alignment = 32; // general.alignment: a power of two
    int64_t align;
    const int has = gguf_get_int(g, "general.alignment", &align);
    if (has < 0 || (has && (align < 1 || align > 1 << 20 || (align & (align - 1)))))
        return fail(g, err, errlen, "general.alignment must be a power of two up to 2^20", NULL);
    if (has) g->alignment = (size_t)align;
    uint64_t data_end = 0; // the largest end of a tensor, from the data section's start
    for (uint64_t i = 0; i < n_tensors && !c.bad; i++) {
        GgufTensor *t = &g->tensors[g->n_tensors++];
        t->name = string(&c, &t->name_len);
        const uint32_t dims = u32(&c);
        if (!c.bad && (dims < 1 || dims > GGUF_MAX_DIMS)) c.bad = "a tensor has more than 4 dimensions, or none";
        uint64_t n = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            t->ne[d] = d < (int)dims && !c.bad ? u64(&c) : 1;
            if (!c.bad && (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || n > (1ull << 40) / t->ne[d]))
                c.bad = "a tensor's dimensions are 0 or multiply past 2^40";
            n *= c.bad ? 1 : t->ne[d];
        }
        t->n_dims = (int)dims;
        t->type = u32(&c);
        const uint64_t off = u64(&c);
        if (c.bad) break;
        if (!ggml_type_name(t->type)) {
            snprintf(msg, sizeof msg, "tensor %.*s has ggml type %u, which this program does not know "
                     "(hint: the file is newer than this reader)", (int)(t->name_len < 64 ? t->name_len : 64), t->name, t->type);
            return fail(g, err, errlen, msg, NULL);
        }
        const int block = GGML_TYPES[t->type].block;
        if (t->ne[0] % (uint64_t)block) {
            snprintf(msg, sizeof msg, "tensor %.*s: a row of %llu values is not whole blocks of %d (%s)",
                     (int)(t->name_len < 64 ? t->name_len : 64), t->name, (unsigned long long)t->ne[0], block,
                     GGML_TYPES[t->type].name);
            return fail(g, err, errlen, msg, NULL);
        }
        const uint64_t bytes = n / (uint64_t)block * (uint64_t)GGML_TYPES[t->type].bytes; // < 2^40 * 292 / 1
        if (off % g->alignment || off > size || bytes > size - off) {
            snprintf(msg, sizeof msg, "tensor %.*s lies outside the file or off its alignment (hint: the file is "
                     "truncated or damaged)", (int)(t->name_len < 64 ? t->name_len : 64), t->name);
            return fail(g, err, errlen, msg, NULL);
        }
        t->data = (const uint8_t *)(uintptr_t)off; // from the data section's start, until it is known
        t->bytes = (size_t)bytes;
        if (off + bytes > data_end) data_end = off + bytes;
    }
    if (c.bad) return fail(g, err, errlen, c.bad, NULL);
    const size_t start = (c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors && (start > size || data_end > size - start)) // (a vocabulary-only file may end unpadded)
        return fail(g, err, errlen, "its tensors run past the end of the file (hint: the file is truncated; "
                                    "download or convert it again)", NULL);
    GgufTensor **order = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *order);
    if (!order) return fail(g, err, errlen, "out of memory", NULL);
    for (size_t i = 0; i < g->n_tensors; i++) {
        g->tensors[i].data = (const uint8_t *)map + start + (size_t)(uintptr_t)g->tensors[i].data;
        order[i] = &g->tensors[i];
    }
    qsort(order, g->n_tensors, sizeof *order, by_offset);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (order[i - 1]->data + order[i - 1]->bytes > order[i]->data) {
            snprintf(msg, sizeof msg, "tensors %.*s and %.*s overlap (hint: the file is damaged)",
                     (int)(order[i - 1]->name_len < 64 ? order[i - 1]->name_len : 64), order[i - 1]->name,
                     (int)(order[i]->name_len < 64 ? order[i]->name_len : 64), order[i]->name);
            free(order);
            return fail(g, err, errlen, msg, NULL);
        }
    qsort(order, g->n_tensors, sizeof *order, by_name);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!by_name(&order[i - 1], &order[i])) {
            snprintf(msg, sizeof msg, "tensor %.*s is given twice (hint: the file is damaged)",
                     (int)(order[i]->name_len < 64 ? order[i]->name_len : 64), order[i]->name);
            free(order);
            return fail(g, err, errlen, msg, NULL);
        }
    free(order);
    return 0;
}

void gguf_free(Gguf *g) {
    free(g->kv);
    free(g->tensors);
    memset(g, 0, sizeof *g);
}

// ---------------------------------------------------------------------------------------------
// Lookups

const GgufKV *gguf_find(const Gguf *g, const char *key) {
    const size_t n = strlen(key);
    for (size_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key_len == n && !memcmp(g->kv[i].key, key, n)) {
            g->kv[i].looked_up = 1; // the array is the Gguf's own, not the file's
            return &g->kv[i];
        }
    return NULL;
}

// A scalar of a number type at p as a double; *whole: 1 for an integer type or a bool.
static double number(GgufType t, const uint8_t *p, int *whole) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
            uint64_t u64; int64_t i64; double f64; } v;
    memcpy(&v, p, scalar_bytes(t));
    *whole = t != GGUF_F32 && t != GGUF_F64;
    switch (t) {
    case GGUF_U8: case GGUF_BOOL: return v.u8;
    case GGUF_I8: return v.i8;
    case GGUF_U16: return v.u16;
    case GGUF_I16: return v.i16;
    case GGUF_U32: return v.u32;
    case GGUF_I32: return v.i32;
    case GGUF_F32: return v.f32;
    case GGUF_U64: return (double)v.u64;
    case GGUF_I64: return (double)v.i64;
    case GGUF_F64: return v.f64;
    case GGUF_STRING: case GGUF_ARRAY: break;
    }
    return 0;
}

int gguf_get_int(const Gguf *g, const char *key, int64_t *v) {
    const GgufKV *kv = gguf_find(g, key);
    int whole = 0;
    if (!kv) return 0;
    if (!scalar_bytes(kv->type)) return -1;
    const double x = number(kv->type, kv->value, &whole);
    if (!whole || x < -9.2e18 || x > 9.2e18) return -1;
    *v = (int64_t)x;
    return 1;
}

int gguf_get_real(const Gguf *g, const char *key, double *v) {
    const GgufKV *kv = gguf_find(g, key);
    int whole;
    if (!kv) return 0;
    if (!scalar_bytes(kv->type) || kv->type == GGUF_BOOL) return -1;
    *v = number(kv->type, kv->value, &whole);
    return 1;
}

int gguf_get_string(const Gguf *g, const char *key, const char **s, size_t *len) {
    const GgufKV *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_STRING) return -1;
    *s = (const char *)kv->value, *len = (size_t)kv->count;
    return 1;
}

const uint8_t *gguf_next_string(const uint8_t *p, const char **s, size_t *len) {
    uint64_t n;
    memcpy(&n, p, 8);
    *s = (const char *)p + 8, *len = (size_t)n;
    return p + 8 + n;
}

double gguf_array_real(const GgufKV *kv, uint64_t i) {
    int whole;
    return number(kv->elem, kv->value + i * scalar_bytes(kv->elem), &whole);
}

const GgufTensor *gguf_tensor(const Gguf *g, const char *name) {
    const size_t n = strlen(name);
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name_len == n && !memcmp(g->tensors[i].name, name, n)) return &g->tensors[i];
    return NULL;
}
