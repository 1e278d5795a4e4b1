// kernels.h - the numerical kernels of the forward pass: matrix products and attention.
//
// Every product in a Llama layer is out = x @ W^T with W an nn.Linear weight (out, in), stored in
// one of dtype.h's types (model.h has the bytes). Attention reads a KV cache whose layout is this
// module's business. Each kernel exists twice: a plain reference (matmul_ref, attention_ref),
// written to be obviously right, and the fast one the forward pass uses (matmul, attention).
// tests/test_kernels.c checks one against the other in every build (AVX-512, AVX2, plain C).
// The Matrix and KVCache structs are fences: the forward pass never sees a weight type or the
// cache layout. Behind this header: kernels.c (the references, the cache, matmul), kernels_decode.c,
// kernels_prefill.c, kernels_attention.c, kernels_x86.c and dtype.c (kernels_internal.h says what
// each holds).
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> // memcpy, in exp_nonpositive

#include "dtype.h" // the weight types: DType, the table of what each is, and the sizes of a matrix
#include "rope.h"  // what attention reads of RoPE: RopeAttention, rope_segments

// A weight matrix (rows, cols) = (out, in), usually inside the mmapped model file.
typedef struct {
    const void *data;  // (rows, cols) f32, f16 or bf16 (uint16_t bits); q8_0: (rows, cols_padded) int8;
                       // q4_0: (rows, cols_padded / 2);
                       // q8_0_r16: its groups of 16 rows, quants and scales together (model.h);
                       // bf16_r16: its groups of 16 rows, each pair of columns of the 16 side by side
    const void *scale; // q8_0: (rows, cols_padded / Q8_BLOCK) float; q4_0: the same in f16; else NULL
    int rows, cols;
    DType dtype;
} Matrix;

// out (cols) = row r of m as float (the token embedding lookup).
void matrix_row(float *out, const Matrix *m, int r);

// *out reads m in the grouped layout `to` (dtype.h) from `at` (matrix_data_bytes(to, rows, cols)
// bytes, 64-byte aligned), filled here on `threads` threads group by group (as export.py writes
// q8_0_r16 and bf16_r16), the padding zero:
//   q8_0 (the first layout, DTYPE_Q8_0) to q8_0_r16: the same q and scales, moved (model.c, at load);
//   gguf_q8_0 (a GGUF file's Q8_0) to q8_0_r16: the same q, each f16 scale made float32 (exact);
//   bf16 (the first layout, DTYPE_BF16) to bf16_r16: the same bits, moved (model.c, at load);
//   f32 to f32_r16, f16 to f16_r16: the same bits, moved (model.c, at load);
//   f16 to bf16_r16: each weight rounded to nearest even from f16 to bf16 (bf16_round of the f16
//     widened, which is exact and never below 2^-126; ./run --f16-as-bf16), which moves it by at most
//     2^-8 / (1 + 2^-8) of itself (bf16 keeps 8 significant bits, f16 11).
// Returns 0, or -1 for any other pair of types or when scratch could not be allocated.
int matrix_to_r16(Matrix *out, const Matrix *m, DType to, void *at, int threads);

// *out reads m, a GGUF file's Q4_0 (gguf_q4_0), as q4_0 from `at` (matrix_data_bytes rounded up to 64,
// then matrix_scale_bytes of q4_0): the same nibbles and scales, moved apart. Returns 0, or -1 for a
// matrix of another type.
int matrix_q4_0_from_gguf(Matrix *out, const Matrix *m, void *at);

// bf16 (bfloat16): the top 16 bits of a float32. A bf16 product rounds each activation to bf16
// first, to nearest, ties to even, as x86's vcvtneps2bf16 does: a NaN stays a (quiet) NaN, and a
// value below the smallest normal float (2^-126) becomes a zero of its sign, as AVX512-BF16's dot
// product reads it; then every product of two bf16 numbers is exact in float32 (kernels.c).
unsigned short bf16_round(float x); // the bits of x rounded to bf16
float bf16_float(unsigned short b); // a bf16 number as float32 (exact)

// ---------------------------------------------------------------------------------------------
// Scratch memory for the fast kernels (packed weights, quantized activations), set up once per
// run so that nothing is allocated while the model runs. workspace_bytes gives the size for
// products of up to max_n tokens with inputs of up to max_cols columns on n_threads threads
// (0 if it does not fit in size_t); the caller provides that many bytes, 64-byte aligned.
typedef struct {
    unsigned char *base;
    size_t bytes;
    int max_n, max_cols, n_threads;
} Workspace;

size_t workspace_bytes(int max_n, int max_cols, int n_threads);

// out (n, m->rows) = x (n, m->cols) @ m^T.
//   matmul_ref: the definition, one weight at a time, summed in double.
//   matmul: a matrix x vector product per token below a few tokens (decode), a blocked matrix x
//     matrix product from there on (prefill); q8_0_r16 and q4_0 quantize x to 8 bits per block of 32
//     first, bf16_r16 rounds x to bf16 (bf16_round), in decode and prefill alike (dtype.h, XForm).
//     Each output is computed by one thread in a fixed order: results do not depend on the thread
//     count. bf16_r16: in one order in decode and prefill too (kernels_internal.h), so a token's
//     outputs are the same bits in a block of n tokens or alone; q8_0_r16 likewise (each row's blocks
//     added in order, each as sum * (dw * dx), kernels_prefill.c). x and out must not overlap.
//     Returns 0, or -1 when n or m->cols exceed what ws was sized for or m is a file type only (q8_0,
//     bf16: dtype.h; a caller's bug; nothing is computed then).
void matmul_ref(float *out, const float *x, const Matrix *m, int n);
int matmul(Workspace *ws, float *out, const float *x, const Matrix *m, int n);

// out[i] = x @ m[i]^T for i < count: products of one input (q, k, v; gate and up) in one parallel
// loop when decoding, so the threads meet once instead of once per product. Same results as count
// calls of matmul.
int matmul_many(Workspace *ws, float *const *out, const float *x, const Matrix *const *m, int count, int n);

// ---------------------------------------------------------------------------------------------
// The KV cache and attention

typedef struct {
    void *keys;   // per layer and kv head: (ctx, head_dim) keys, in transposed blocks (kernels.c)
    void *values; // per layer and kv head: (ctx, head_dim)
    DType key_type, value_type; // f32, f16 or q8_0 (kv_type_ok)
    int n_layers, ctx, n_heads, n_kv_heads, head_dim;
    // Per layer (NULL: every layer one turn, keys as cached): what attention reads of RoPE there
    // (rope.h): how many turns of each query, the key tables, and through rope_segments which keys
    // each turn scores with which table.
    const RopeAttention *rope;
    // Layers that differ (NULL: none does): layer_kind[l] has LAYER_NO_ROPE when layer l's keys and
    // queries are never rotated (SmolLM3's NoPE layers: a context shift moves their keys unturned),
    // LAYER_SLIDING when a query there sees only the last `slide` positions, its own included
    // (Mistral's sliding window: keys at distance m - j < slide).
    const int *layer_kind;
    int slide;
    // ring > 0: each sliding layer keeps only the last `ring` positions (a multiple of 32, at least the
    // window plus a block of queries plus a block of keys: kv_ring_slots), position p in slot p mod
    // ring; 0: every layer keeps every position of the context.
    int ring;
    // The scores: q . k times `scale` (0: 1/sqrt(head_dim); others as the model says: Gemma's
    // query_pre_attn_scalar, Granite's attention_multiplier); then, when softcap c > 0, c tanh(s / c)
    // (Gemma 2's attention logit softcapping, before the causal mask and the softmax).
    float scale, softcap;
} KVCache;

// The bytes of kv head h of a layer that hold positions [0, n), in a cache without rings: its keys
// (values = 0; whole blocks of KV_RUN positions, so up to KV_RUN - 1 positions more) or its values
// (values = 1); *bytes says how many. The prompt cache (promptcache.c) saves and restores them as
// they are.
void *kv_span(const KVCache *c, int layer, int h, int values, int n, size_t *bytes);

#define LAYER_NO_ROPE 1
#define LAYER_SLIDING 2
#define LAYER_ROPE_SWA 4 // the layer rotates with the model's second, local RoPE (model.h, rope_swa)

// Whether keys or values of head_dim coordinates can be cached in type t: f32, f16, or q8_0 when
// head_dim is a multiple of 32 (its blocks).
int kv_type_ok(DType t, int head_dim);
// Bytes of keys (or values) of type t for this shape: a little more than
// n_layers * ctx * kv_dim values, since the layout pads; 0 if t is not a cache type or the size
// does not fit in size_t. With rings (KVCache.ring), n_sliding of the layers keep `ring` slots.
size_t kv_cache_bytes(DType t, int n_layers, int ctx, int n_kv_heads, int head_dim);
size_t kv_cache_bytes_ring(DType t, int n_layers, int ctx, int n_sliding, int ring, int n_kv_heads, int head_dim);
// The slots a sliding layer's ring needs for a window of `window` positions and blocks of up to
// max_batch queries: the window, the block, and the block of keys attention starts reading at
// (KVCache.ring); 0 when that is no smaller than the context (a ring would save nothing).
int kv_ring_slots(int window, int max_batch, int ctx);

// Store n rows of keys k (n, kv_dim) and values v (n, kv_dim; NULL: keys only) at positions
// pos .. pos+n-1 of a layer, in the cache's types. Keys must already be rotated.
void kv_store(KVCache *c, int layer, const float *k, const float *v, int pos, int n);
// Context shift: move positions from .. from+n-1 of every layer to to .. to+n-1 (to < from), keys
// of layer l turned by the angles -(from - to) theta_i of its RoPE, given as cos[l] and sin[l]
// (head_dim / 2 each): R(a) R(b) = R(a + b), so a key rotated for position p becomes the key rotated
// for p - (from - to). NULL cos[l] and sin[l] move layer l's keys as they are (a layer without RoPE,
// or keys cached un-rotated: rope.h, rope_keys_unrotated).
// Returns 0, or -1 when a ring's scratch could not be allocated (nothing is then moved in that ring).
int kv_shift(KVCache *c, int from, int to, int n, const float *const *cos, const float *const *sin);
// The cached key and value coordinate `i` (< kv_dim) of position `pos` (tests, the reference);
// kv_key_seen: the key coordinate turned by the layer's key table k (RopeAttention.keys[k]; as
// cached when that is NULL), as attention uses it.
float kv_key(const KVCache *c, int layer, int pos, int i);
float kv_key_seen(const KVCache *c, int layer, int pos, int i, int k);
float kv_value(const KVCache *c, int layer, int pos, int i);

// Causal self-attention of the queries q (n, n_heads*head_dim) at positions pos .. pos+n-1 over the
// cached positions 0 .. pos+i (a sliding layer: the last c->slide of them), into out
// (n, n_heads*head_dim). Query head h reads kv head
// h / (n_heads / n_kv_heads) (grouped-query attention, Hugging Face's repeat_kv):
//     score_j = cap(q_t . k_j * scale),   p = softmax(score_0 .. score_{pos+i}),   out = sum_j p_j v_j
// (scale and cap: KVCache.scale, softcap)
// where the query's turn t and the key table that turns k_j are those of the segment j lies in
// (rope.h, rope_segments of the layer's c->rope); q_far holds the turns past the first
// (rope_turn_at; NULL when the layer has one turn).
// attention_ref: those three steps as three plain loops, in double.
// attention: the same, fast: the query heads of one kv head and a run of queries together, so that
//   each cached key and value read serves all of them; tasks on at most n_threads threads, each
//   with attention_scratch_floats(...) floats of scratch (scratch holds n_threads of them).
//   extra_turns: attention_scratch_floats for the turns past the first of each query (rope_query_turns
//   - 1): room for those queries and a second row of scores.
void attention_ref(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos);
void attention(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
               float *scratch, int n_threads);
size_t attention_scratch_floats(int ctx, int n_heads, int n_kv_heads, int head_dim, int extra_turns); // 0: overflow

// e^x for x <= 0 (a softmax's terms, a sigmoid's), written without branches so that loops over it
// vectorize (libm's expf does not). e^x = 2^k * e^r with k = round(x / ln 2) and |r| <= ln(2)/2, ln 2
// split in two parts (Cody-Waite) so r is exact, e^r by its Taylor polynomial to r^6: relative error
// ~1e-7. Below x = -40 it returns 0: such terms weigh less than 4e-18 beside the largest one (1),
// so even 2^24 of them change a float sum by less than its rounding, and dropping them keeps
// subnormal numbers, which are slow, out of the attention weights. NaN also gives 0.
static inline float exp_nonpositive(float x) {
    const float xc = x > -40.0f ? x : -40.0f;
    const float k = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; // round(x * log2(e)), 1.5 * 2^23 trick
    const float r = (xc - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
    const float p =
        1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    const int32_t bits = ((int32_t)k + 127) << 23; // 2^k as a float's bits
    float two_k;
    memcpy(&two_k, &bits, sizeof two_k); // (a union would keep the loop from vectorizing)
    return x > -40.0f ? p * two_k : 0.0f;
}

// softmax(x) over n scores in place, with exp_nonpositive (relative error ~1e-7; e^x is 0 for
// x < -40, where a term weighs less than 4e-18 beside the largest one).
void softmax(float *x, int n);

// RMSNorm (Zhang & Sennrich 2019) of n rows of `size`: out = x * rsqrt(mean(x^2) + eps) * w.
void rmsnorm(float *out, const float *x, const float *w, int n, int size, float eps);

// OpenMP's thread count, or 1 in a build without OpenMP.
int max_threads(void);

// Which vector instructions the kernels were compiled for, e.g. "avx512-vnni", "avx2", "plain-c".
const char *kernels_isa(void);

#endif
