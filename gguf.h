// gguf.h - reading a GGUF file, llama.cpp's model format: its metadata (key, typed value) and its
// tensor directory (name, dimensions, ggml type, where the data is), checked against the file's
// length before anything is trusted. What this is not: what the keys and tensors mean for a model
// (loader.c maps them onto Config and the weights).
//
// The format (llama.cpp docs/gguf.md; versions 2 and 3, little-endian; version 1's 32-bit counts
// are not read): the 4 bytes "GGUF", a uint32 version, a uint64 tensor count, a uint64 metadata
// count; the metadata, each a string key, a uint32 value type, the value; the tensor infos, each a
// string name, a uint32 n_dims (1..4), n_dims uint64 dimensions ne[] (ne[0] the fastest: a
// matrix's columns), a uint32 ggml type, a uint64 offset; then, at the next multiple of
// general.alignment (32 when the key is absent), the data section, each tensor at its offset from
// there. A string is a uint64 length and that many bytes (no NUL); an array is a uint32 element
// type, a uint64 count and the elements.
#ifndef GGUF_H
#define GGUF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Metadata value types, the file's numbers.
typedef enum {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
} GgufType;

// The ggml tensor types this program knows by name (ggml.h, enum ggml_type; the numbers are the
// file's). Which of them it runs is loader.c's to say; a number not listed is refused as unknown.
enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15,
    GGML_IQ2_XXS = 16, GGML_IQ2_XS = 17, GGML_IQ3_XXS = 18, GGML_IQ1_S = 19, GGML_IQ4_NL = 20, GGML_IQ3_S = 21,
    GGML_IQ2_S = 22, GGML_IQ4_XS = 23, GGML_I8 = 24, GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28,
    GGML_IQ1_M = 29, GGML_BF16 = 30,
};
const char *ggml_type_name(uint32_t type); // "Q4_K"; NULL for a number not listed above

typedef struct {
    const char *key; // not NUL-terminated: key_len bytes
    size_t key_len;
    GgufType type;
    GgufType elem;         // an array's element type
    uint64_t count;        // a string's length in bytes; an array's element count
    const uint8_t *value;  // in the file: the scalar, the string's bytes, or the array's first element
    int looked_up;         // 1 once gguf_find (so any getter) has handed it out: what a reader read
} GgufKV;

#define GGUF_MAX_DIMS 4
typedef struct {
    const char *name; // not NUL-terminated: name_len bytes
    size_t name_len;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; // ne[0] the fastest; 1 past n_dims
    uint32_t type;              // a ggml type with a known size (ggml_type_name)
    const uint8_t *data;        // in the file, inside it
    size_t bytes;
} GgufTensor;

typedef struct {
    uint32_t version;
    size_t alignment;
    size_t n_kv, n_tensors;
    GgufKV *kv;
    GgufTensor *tensors;
} Gguf;

// 1 if the size bytes at map start with GGUF's magic.
int gguf_is_gguf(const void *map, size_t size);

// Read the metadata and the tensor directory of the size bytes at map (which must outlive g):
// every length, count and offset is checked against the file (no allocation is sized by a count
// the file could not hold), every tensor lies inside the data section, none overlaps another.
// Returns 0, or -1 with "what is wrong (hint: ...)" in err and nothing left allocated.
int gguf_parse(Gguf *g, const void *map, size_t size, char *err, size_t errlen);
void gguf_free(Gguf *g);

// The entry of a key, or NULL.
const GgufKV *gguf_find(const Gguf *g, const char *key);
// A whole number (any integer type, or a bool) into *v: 1, 0 when the key is absent, -1 when its
// value is not a whole number.
int gguf_get_int(const Gguf *g, const char *key, int64_t *v);
// A real (f32, f64, or any integer type) into *v: 1, 0 absent, -1 not a number.
int gguf_get_real(const Gguf *g, const char *key, double *v);
// A string into *s (*len bytes, not NUL-terminated): 1, 0 absent, -1 not a string.
int gguf_get_string(const Gguf *g, const char *key, const char **s, size_t *len);
// The strings of an array of strings, one after the other: the one at p (kv->value for the first)
// into *s and *len; returns where the next one starts. Only for kv->elem == GGUF_STRING (gguf_parse
// checked every length).
const uint8_t *gguf_next_string(const uint8_t *p, const char **s, size_t *len);
// Element i of an array of numbers as a double (elem any integer, f32 or f64 type).
double gguf_array_real(const GgufKV *kv, uint64_t i);

// The tensor of a name, or NULL.
const GgufTensor *gguf_tensor(const Gguf *g, const char *name);

#ifdef __cplusplus
}
#endif

#endif
