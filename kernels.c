// kernels.c - matrix products over f32, f16 and q8_0 weights, and attention over the KV cache.
//
// Layout: W is (rows, cols) row-major; a block of n activations x is (n, cols); the product
// out = x @ W^T is (n, rows). Every output element is computed start to end by one thread in an
// order that depends only on the shapes, so the result does not depend on the number of threads.
//
// Two regimes, two algorithms (docs/speed.md says why, with numbers):
//   decode, n < GEMM_MIN_N tokens: matrix x vector. Each weight is used once per token, so the
//     time is the time to stream the weights from memory; a dot product reads each row start to
//     end, OpenMP splits the rows, and the arithmetic hides under the memory traffic.
//   prefill, n >= GEMM_MIN_N: matrix x matrix, blocked as in Goto & van de Geijn, "Anatomy of
//     high-performance matrix multiplication" (ACM TOMS 2008) and BLIS (Van Zee & van de Geijn,
//     ACM TOMS 2015): a panel of NR weight rows is packed once into a layout the microkernel reads
//     with one vector load per column, and is then reused from cache by every token; the
//     microkernel keeps an MR x NR block of outputs in registers, so each loaded weight feeds MR
//     fused multiply-adds. Here the time is arithmetic, not memory.
// What this is not: a BLAS. Only out = x @ W^T with W in the file's layout, and one level of
// cache blocking (the K dimension, so a chunk of activations stays in L2).
//
// How the file reads: the references (the definitions); then the plain C microkernels (dot
// products, packing, the prefill tile, the attention loops), which are what every machine can
// compile and what the vector versions must equal; then kernels_x86.h, the one fenced place with
// AVX-512 / VNNI / AVX2 versions of those microkernels behind the same signatures, chosen at build
// time from the compiler's target; then the algorithms (decode, prefill, attention), which call
// the microkernels by name and never see an instruction set.
#include "kernels.h"
#include "rope.h" // the pair turn, ROPE_MAX_HEAD_DIM

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// Which vector code to compile, from what the compiler targets (-march=native: this machine).
// -DKERNELS_PLAIN compiles only the plain C, so that tests/test_kernels_plain can check it here.
#if !defined(KERNELS_PLAIN) && defined(__AVX2__) && defined(__FMA__)
#define USE_AVX2 1 // 256-bit integer and float vectors (Haswell, 2013, and later)
#endif
#if defined(USE_AVX2) && defined(__AVX512F__)
#define USE_AVX512 1 // 512-bit vectors, masked loads and stores (Skylake-SP, 2017, and later)
#endif
#if defined(USE_AVX512) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define USE_AVX512_VNNI 1 // vpdpbusd: 64 byte products summed into 16 int32 lanes (Cascade Lake, 2019)
#endif

// Not inlined: one compiled copy of each dot product, so every caller sums in the same order (a
// compiler may vectorize an inlined plain C loop differently in each place it lands); and the
// prefill tiles compiled on their own, whose registers an inlining caller would take (docs/speed.md).
#define ONE_COPY __attribute__((noinline))
// A plain C microkernel that a vector build replaces is still compiled (and read), not called.
#define PLAIN __attribute__((unused))

// No parallel region for work one thread does (one token's norms, keys and activations; everything
// at --threads 1): the code calls it directly. An OpenMP region whose if clause is false, or which
// has one thread, still makes GCC's libgomp start and end a team, and the end's barrier makes a
// futex system call every time, a cost that a small model's decode pays hundreds of times a token
// (docs/speed.md, "No team for one thread", has the figures).

enum {
    GEMM_MIN_N = 4, // from this many tokens on, matrix x matrix
    NR = 32,        // weight rows per panel: two 16-float vectors
    MR = 12,        // tokens per tile: MR * 2 = 24 accumulator vectors of the 32 a core has
    MR_Q8 = 6,      // q8_0 tiles: 12 integer + 12 float accumulators
    KC_MIN = 256,   // columns per chunk, at least and at most
    KC_MAX = 4096,
    X_CHUNK = 512 << 10, // bytes of packed activations per chunk: a quarter of a 2 MB L2
    PANEL_GROUP = 4,     // panels per work item, at most
    OUT_RUN = 64,        // attention, plain C: output coordinates summed at a time
    KV_RUN = 32,         // attention: positions (or coordinates) a vector tile covers; the cache's unit
    MIX_RUN = 128,       // attention: positions of values the weighted sum takes at a time (vector code)
    ATT_ROWS = 16,       // attention: query rows (queries x heads of one kv head) per task, at most
    DOT_ROWS = 4,        // decode: weight rows a group of dot_rows reads (at once in the vector code),
                         // each from its own quarter of the matrix
    PIECE_GROUPS = 16,   // decode: groups of DOT_ROWS rows a thread takes at a time (matvec)
};

// ---------------------------------------------------------------------------------------------
// Types and sizes

static const char *const DTYPE_NAMES[DTYPE_COUNT] = {"f32", "f16", "q8_0", "q4_0"};

const char *dtype_name(DType t) { return (t >= 0 && t < DTYPE_COUNT) ? DTYPE_NAMES[t] : "unknown"; }

int dtype_from_name(const char *name, DType *t) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(name, DTYPE_NAMES[i]) == 0) {
            *t = (DType)i;
            return 0;
        }
    }
    return -1;
}

static int quantized(DType t) { return t == DTYPE_Q8_0 || t == DTYPE_Q4_0; }

int matrix_cols_stored(DType t, int cols) { return quantized(t) ? (cols + Q8_BLOCK - 1) / Q8_BLOCK * Q8_BLOCK : cols; }

static size_t mul_or_zero(size_t a, size_t b) { return (b && a > SIZE_MAX / b) ? 0 : a * b; }

size_t matrix_data_bytes(DType t, int rows, int cols) {
    static const size_t bits[DTYPE_COUNT] = {32, 16, 8, 4}; // per value
    if (rows <= 0 || cols <= 0 || t < 0 || t >= DTYPE_COUNT) return 0;
    return mul_or_zero((size_t)rows, (size_t)matrix_cols_stored(t, cols) * bits[t] / 8);
}

size_t matrix_scale_bytes(DType t, int rows, int cols) {
    if (!quantized(t) || rows <= 0 || cols <= 0) return 0;
    const size_t scale = t == DTYPE_Q8_0 ? sizeof(float) : sizeof(_Float16);
    return mul_or_zero((size_t)rows, (size_t)matrix_cols_stored(t, cols) / Q8_BLOCK * scale);
}

// q4_0 (ggml's Q4_0): per block of 32 values, 16 bytes; byte j holds value j in its low 4 bits and
// value j + 16 in its high 4 bits, each an unsigned q in [0, 15] meaning (q - 8) * d, with one f16
// scale d per block, stored apart like q8_0's.
static int q4_at(const uint8_t *block, int i) { return (i < 16 ? block[i] & 15 : block[i - 16] >> 4) - 8; }

int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ---------------------------------------------------------------------------------------------
// The references: one weight (one cached number) at a time, summed in double. Slow and obviously
// right; every fast path is tested against them.

static float weight_at(const Matrix *m, int r, int c) {
    size_t cp = (size_t)matrix_cols_stored(m->dtype, m->cols);
    switch (m->dtype) {
    case DTYPE_F32:
        return ((const float *)m->data)[(size_t)r * cp + c];
    case DTYPE_F16:
        return (float)((const _Float16 *)m->data)[(size_t)r * cp + c];
    case DTYPE_Q8_0:
        return ((const int8_t *)m->data)[(size_t)r * cp + c] *
               ((const float *)m->scale)[((size_t)r * cp + c) / Q8_BLOCK];
    case DTYPE_Q4_0: {
        const size_t b = ((size_t)r * cp + c) / Q8_BLOCK;
        return q4_at((const uint8_t *)m->data + b * Q4_BLOCK_BYTES, c % Q4_BLOCK) *
               (float)((const _Float16 *)m->scale)[b];
    }
    default:
        return 0;
    }
}

void matrix_row(float *out, const Matrix *m, int r) {
    for (int c = 0; c < m->cols; c++)
        out[c] = weight_at(m, r, c);
}

void matmul_ref(float *out, const float *x, const Matrix *m, int n) {
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < m->rows; r++) {
            double sum = 0;
            for (int c = 0; c < m->cols; c++)
                sum += (double)weight_at(m, r, c) * x[(size_t)t * m->cols + c];
            out[(size_t)t * m->rows + r] = (float)sum;
        }
    }
}

// The KV cache, per layer and kv head: the keys in blocks of KV_RUN positions, each block
// transposed, (head_dim, KV_RUN), so that the scores of a query against a run of positions read
// consecutive memory, one block after the other (see attention below); the values (ctx, head_dim).
// ctx is rounded up to whole blocks (the stride), so the vector code always reads whole blocks,
// and KV_RUN floats of padding after the last one let it read whole runs of coordinates past a
// head's last one. Each of the two holds float32, IEEE half or q8_0 (key_type, value_type); a half
// is rounded to nearest when stored and widened exactly when read. q8_0 is ggml's Q8_0 (34 bytes
// per 32 values): each run of 32 coordinates of one key or value is stored as 32 int8 q and one
// half d = max |x| / 127 (q = x / d rounded), read as q * d; a block of keys is its (head_dim,
// KV_RUN) int8 q, then its (head_dim / 32, KV_RUN) halves d; a value is its head_dim q, then its
// head_dim / 32 d. Only these functions and attention() know the layout.
static size_t kv_stride(int ctx) { return ((size_t)ctx + KV_RUN - 1) / KV_RUN * KV_RUN; }

// Bytes of one position's keys (or values) of one kv head.
static size_t kv_row_bytes(DType t, int hd) {
    switch (t) {
    case DTYPE_F16:
        return (size_t)hd * sizeof(_Float16);
    case DTYPE_Q8_0:
        return (size_t)hd + (size_t)hd / Q8_BLOCK * sizeof(_Float16);
    default:
        return (size_t)hd * sizeof(float);
    }
}

int kv_type_ok(DType t, int head_dim) {
    return t == DTYPE_F32 || t == DTYPE_F16 || (t == DTYPE_Q8_0 && head_dim % Q8_BLOCK == 0);
}

size_t kv_cache_bytes(DType t, int n_layers, int ctx, int n_kv_heads, int head_dim) {
    if (n_layers < 1 || ctx < 1 || n_kv_heads < 1 || head_dim < 1 || !kv_type_ok(t, head_dim)) return 0;
    const size_t rows = mul_or_zero(mul_or_zero((size_t)n_layers, kv_stride(ctx)), (size_t)n_kv_heads);
    const size_t n = mul_or_zero(rows, kv_row_bytes(t, head_dim));
    return n && n <= SIZE_MAX - KV_RUN * sizeof(float) ? n + KV_RUN * sizeof(float) : 0;
}

// The keys and the values of kv head h of a layer: stride rows of kv_row_bytes each.
static void *head_keys(const KVCache *c, int layer, int h) {
    return (char *)c->keys +
           ((size_t)layer * c->n_kv_heads + h) * kv_stride(c->ctx) * kv_row_bytes(c->key_type, c->head_dim);
}
static void *head_values(const KVCache *c, int layer, int h) {
    return (char *)c->values +
           ((size_t)layer * c->n_kv_heads + h) * kv_stride(c->ctx) * kv_row_bytes(c->value_type, c->head_dim);
}
// Where coordinate d of the key at position j sits among its head's keys, counted in floats (and
// in halves for f16 keys; the rotation tables use the same index).
static size_t key_at(int hd, int j, int d) { return ((size_t)(j / KV_RUN) * hd + d) * KV_RUN + j % KV_RUN; }
// q8_0 keys: the q of coordinate d of the key at position j, and its scale.
static int8_t *key_q(const void *keys, int hd, int j, int d) {
    return (int8_t *)keys + (size_t)(j / KV_RUN) * KV_RUN * kv_row_bytes(DTYPE_Q8_0, hd) + (size_t)d * KV_RUN +
           j % KV_RUN;
}
static _Float16 *key_scale(const void *keys, int hd, int j, int d) {
    char *block = (char *)keys + (size_t)(j / KV_RUN) * KV_RUN * kv_row_bytes(DTYPE_Q8_0, hd);
    return (_Float16 *)(block + (size_t)hd * KV_RUN) + (size_t)(d / Q8_BLOCK) * KV_RUN + j % KV_RUN;
}

static void quantize_block_q8(int8_t *q, float *d, int32_t *sum, const float *x, int len);

// Coordinate d of the cached key (value) at position j of one kv head's keys (values), as float;
// and a whole key (value) x (hd floats) stored at position j.
static float key_get(const void *keys, DType t, int hd, int j, int d) {
    switch (t) {
    case DTYPE_F16:
        return (float)((const _Float16 *)keys)[key_at(hd, j, d)];
    case DTYPE_Q8_0:
        return *key_q(keys, hd, j, d) * (float)*key_scale(keys, hd, j, d);
    default:
        return ((const float *)keys)[key_at(hd, j, d)];
    }
}
static void key_put(void *keys, DType t, int hd, int j, const float *x) {
    if (t == DTYPE_F32) {
        for (int d = 0; d < hd; d++)
            ((float *)keys)[key_at(hd, j, d)] = x[d];
    } else if (t == DTYPE_F16) {
        for (int d = 0; d < hd; d++)
            ((_Float16 *)keys)[key_at(hd, j, d)] = (_Float16)x[d];
    } else { // q8_0: head_dim a multiple of 32 (kv_type_ok)
        for (int d0 = 0; d0 < hd; d0 += Q8_BLOCK) {
            int8_t q[Q8_BLOCK];
            float scale;
            int32_t sum;
            quantize_block_q8(q, &scale, &sum, x + d0, Q8_BLOCK);
            *key_scale(keys, hd, j, d0) = (_Float16)scale;
            for (int d = d0; d < d0 + Q8_BLOCK; d++)
                *key_q(keys, hd, j, d) = q[d - d0];
        }
    }
}
static float value_get(const void *values, DType t, int hd, int j, int d) {
    const char *row = (const char *)values + (size_t)j * kv_row_bytes(t, hd);
    switch (t) {
    case DTYPE_F16:
        return (float)((const _Float16 *)row)[d];
    case DTYPE_Q8_0:
        return ((const int8_t *)row)[d] * (float)((const _Float16 *)(row + hd))[d / Q8_BLOCK];
    default:
        return ((const float *)row)[d];
    }
}
static void value_put(void *values, DType t, int hd, int j, const float *x) {
    char *row = (char *)values + (size_t)j * kv_row_bytes(t, hd);
    if (t == DTYPE_F32) {
        memcpy(row, x, (size_t)hd * sizeof(float));
    } else if (t == DTYPE_F16) {
        for (int d = 0; d < hd; d++)
            ((_Float16 *)row)[d] = (_Float16)x[d];
    } else { // q8_0: head_dim a multiple of 32 (kv_type_ok)
        for (int d0 = 0; d0 < hd; d0 += Q8_BLOCK) {
            float scale;
            int32_t sum;
            quantize_block_q8((int8_t *)row + d0, &scale, &sum, x + d0, Q8_BLOCK);
            ((_Float16 *)(row + hd))[d0 / Q8_BLOCK] = (_Float16)scale;
        }
    }
}

// One thread (no team, top of the file): a 4096-token window's keys and values take a few ms a layer.
void kv_store(KVCache *c, int layer, const float *k, const float *v, int pos, int n) {
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    for (int h = 0; h < c->n_kv_heads; h++)
        for (int i = 0; i < n; i++) {
            const size_t at = (size_t)i * kvd + (size_t)h * hd;
            key_put(head_keys(c, layer, h), c->key_type, hd, pos + i, k + at);
            if (v) value_put(head_values(c, layer, h), c->value_type, hd, pos + i, v + at);
        }
}

// Whether layer l's keys are rotated (all but the NoPE layers).
static int layer_rotates(const KVCache *c, int l) { return !(c->layer_kind && c->layer_kind[l] & LAYER_NO_ROPE); }

// The positions a query at m sees in layer l start here: m - slide + 1 in a sliding layer, else 0.
static int layer_first(const KVCache *c, int l, int m) {
    const int first = c->layer_kind && c->layer_kind[l] & LAYER_SLIDING ? m - c->slide + 1 : 0;
    return first > 0 ? first : 0;
}

// Context shift: every layer's positions from .. from+n-1 move down to to .. to+n-1, the keys turned
// by -(from - to) theta_i on the way (cos, sin of that angle per pair; NULL: moved as they are).
// Ascending order never overwrites a position before it is read, since to < from. A q8_0 key is
// quantized anew after its turn (as it was stored: from floats).
void kv_shift(KVCache *c, int from, int to, int n, const float *cos_by, const float *sin_by) {
    const int hd = c->head_dim;
#pragma omp parallel for collapse(2)
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            void *keys = head_keys(c, l, h), *values = head_values(c, l, h);
            const float *cos = layer_rotates(c, l) ? cos_by : NULL, *sin = layer_rotates(c, l) ? sin_by : NULL;
            const size_t vrow = kv_row_bytes(c->value_type, hd);
            for (int i = 0; i < n; i++) {
                float k[ROPE_MAX_HEAD_DIM];
                for (int p = 0; p < hd / 2; p++) { // RoPE's pair (x0, x1) turned back by the angle
                    const float x0 = key_get(keys, c->key_type, hd, from + i, 2 * p);
                    const float x1 = key_get(keys, c->key_type, hd, from + i, 2 * p + 1);
                    const float cs = cos ? cos[p] : 1, sn = sin ? sin[p] : 0;
                    k[2 * p] = rope_turn0(x0, x1, cs, -sn);
                    k[2 * p + 1] = rope_turn1(x0, x1, cs, -sn);
                }
                key_put(keys, c->key_type, hd, to + i, k);
                memmove((char *)values + (size_t)(to + i) * vrow, (char *)values + (size_t)(from + i) * vrow, vrow);
            }
        }
}

float kv_key(const KVCache *c, int layer, int pos, int i) {
    return key_get(head_keys(c, layer, i / c->head_dim), c->key_type, c->head_dim, pos, i % c->head_dim);
}

// Rotation table: per block of KV_RUN positions and pair p of coordinates (2p, 2p+1), KV_RUN cosines
// then KV_RUN sines, so a block's table is (head_dim, KV_RUN) like the block of keys it turns.
size_t kv_rotation_floats(int ctx, int head_dim) {
    return ctx < 1 || head_dim < 2 ? 0 : mul_or_zero(kv_stride(ctx), (size_t)head_dim);
}

static void fill_rotation(float *table, const float *cos, const float *sin, int len, int hd) {
    const int half = hd / 2;
#pragma omp parallel for if ((size_t)len * half >= 4096)
    for (int j = 0; j < len; j++) {
        float *block = table + (size_t)(j / KV_RUN) * hd * KV_RUN + j % KV_RUN;
        for (int p = 0; p < half; p++) {
            block[(size_t)2 * p * KV_RUN] = cos[(size_t)j * half + p];
            block[(size_t)(2 * p + 1) * KV_RUN] = sin[(size_t)j * half + p];
        }
    }
}

void kv_set_rotation(KVCache *c, float *table, const float *cos, const float *sin, int len) {
    fill_rotation(table, cos, sin, len, c->head_dim);
    c->rotation = table;
}

void kv_set_rerope(KVCache *c, int window, float *table, const float *cos, const float *sin, int len) {
    if (table) fill_rotation(table, cos, sin, len, c->head_dim);
    c->window = window;
    c->rotation_far = table;
}

// Coordinate i of the cached key at pos turned by table t (NULL: as cached).
static float key_turned(const KVCache *c, const float *t, int layer, int pos, int i) {
    const int hd = c->head_dim, d = i % hd;
    if (!t) return kv_key(c, layer, pos, i);
    // RoPE on the pair (x0, x1) holding coordinate d.
    t += key_at(hd, pos, d & ~1);
    const float x0 = kv_key(c, layer, pos, i - (d & 1)), x1 = kv_key(c, layer, pos, i - (d & 1) + 1);
    const float cs = t[0], sn = t[KV_RUN];
    return d & 1 ? rope_turn1(x0, x1, cs, sn) : rope_turn0(x0, x1, cs, sn);
}

float kv_key_seen(const KVCache *c, int layer, int pos, int i) {
    return key_turned(c, layer_rotates(c, layer) ? c->rotation : NULL, layer, pos, i);
}
float kv_key_far(const KVCache *c, int layer, int pos, int i) {
    return key_turned(c, layer_rotates(c, layer) ? c->rotation_far : NULL, layer, pos, i);
}

float kv_value(const KVCache *c, int layer, int pos, int i) {
    return value_get(head_values(c, layer, i / c->head_dim), c->value_type, c->head_dim, pos, i % c->head_dim);
}

// Attention as written in the paper, for every query i and head h: scores over the positions
// 0 .. pos+i (a sliding layer: the last `slide` of them), a softmax over them, the weighted sum of
// the values. ReRoPE: a key at distance pos + i - j >= window is scored with the far query and the
// far key instead (README, "ReRoPE"), except in a NoPE layer, where nothing is rotated.
// The keys and values of each kv head are first read out of the cache as the math sees them
// (kv_key_seen, kv_key_far, kv_value) into plain arrays, so the three loops are only arithmetic.
void attention_ref(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos) {
    const int hd = c->head_dim, qd = c->n_heads * hd, group = c->n_heads / c->n_kv_heads, all = pos + n;
    const int two = c->window > 0 && layer_rotates(c, layer); // ReRoPE's two paths
    double *p = malloc((size_t)all * sizeof(double));
    float *k = malloc((size_t)all * hd * sizeof(float)), *k_far = malloc((size_t)all * hd * sizeof(float));
    float *v = malloc((size_t)all * hd * sizeof(float));
    for (int h = 0; p && k && k_far && v && h < c->n_heads; h++) {
        const int kvh = h / group;
        for (int j = 0; h % group == 0 && j < all; j++) // a new kv head
            for (int d = 0; d < hd; d++) {
                k[(size_t)j * hd + d] = kv_key_seen(c, layer, j, kvh * hd + d);
                if (two) k_far[(size_t)j * hd + d] = kv_key_far(c, layer, j, kvh * hd + d); // ReRoPE
                v[(size_t)j * hd + d] = kv_value(c, layer, j, kvh * hd + d);
            }
        for (int i = 0; i < n; i++) {
            const int len = pos + i + 1, first = layer_first(c, layer, pos + i);
            const float *qh = q + (size_t)i * qd + (size_t)h * hd;
            double max = -INFINITY, sum = 0;
            for (int j = first; j < len; j++) { // scores: q . k_j / sqrt(d)
                const int far = two && pos + i - j >= c->window;
                const float *qj = far ? q_far + (size_t)i * qd + (size_t)h * hd : qh,
                            *kj = (far ? k_far : k) + (size_t)j * hd;
                double s = 0;
                for (int d = 0; d < hd; d++)
                    s += (double)qj[d] * kj[d];
                p[j] = s / sqrt((double)hd);
                max = p[j] > max ? p[j] : max;
            }
            for (int j = first; j < len; j++)
                sum += p[j] = exp(p[j] - max); // causal softmax
            for (int d = 0; d < hd; d++) {     // mix: sum_j p_j v_j
                double o = 0;
                for (int j = first; j < len; j++)
                    o += p[j] / sum * v[(size_t)j * hd + d];
                out[(size_t)i * qd + (size_t)h * hd + d] = (float)o;
            }
        }
    }
    free(p);
    free(k);
    free(k_far);
    free(v);
}

// ---------------------------------------------------------------------------------------------
// Layer math that is not a product: RMSNorm and the softmax of attention.

// HF LlamaRMSNorm: hidden_states * torch.rsqrt(variance + self.variance_epsilon), times self.weight.
// One thread: a 4096-token window's rows of 2048 values take ~2 ms, a thousandth of the window.
void rmsnorm(float *out, const float *x, const float *w, int n, int size, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * size;
        float *ot = out + (size_t)t * size;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < size; i++)
            ss += xt[i] * xt[i];
        float scale = 1.0f / sqrtf(ss / size + eps);
        for (int i = 0; i < size; i++)
            ot[i] = w[i] * (xt[i] * scale);
    }
}

// e^x for the x <= 0 of a softmax, written without branches so that loops over it vectorize
// (libm's expf does not). e^x = 2^k * e^r with k = round(x / ln 2) and |r| <= ln(2)/2, ln 2 split
// in two parts (Cody-Waite) so r is exact, e^r by its Taylor polynomial to r^6: relative error
// ~1e-7. Below x = -40 it returns 0: such terms weigh less than 4e-18 beside the largest one (1),
// so even 2^24 of them change a float sum by less than its rounding, and dropping them keeps
// subnormal numbers, which are slow, out of the attention weights. NaN also gives 0.
static inline float softmax_exp(float x) {
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

void softmax(float *x, int n) {
    float max = x[0];
#pragma omp simd reduction(max : max)
    for (int i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        x[i] = softmax_exp(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

// ---------------------------------------------------------------------------------------------
// q8_0 activations: each row of x is cut into blocks of 32 and stored like the weights,
// d = max|x| / 127 and q = round(x / d) in [-127, 127] (ggml's quantize_row_q8_0), so that a
// block's dot product is an exact integer sum:  sum_i w_i x_i ~ dw * dx * sum_i qw_i qx_i.
// The activation side loses about 1/254 of each block's largest value per element; test_quant.py
// measures what that does to perplexity.

typedef struct {
    int8_t *q;    // (n, cp) cp = cols rounded up to Q8_BLOCK, zero-padded
    float *d;     // (n, cp/Q8_BLOCK) scales
    int32_t *sum; // (n, cp/Q8_BLOCK) sum of the q of each block (for the unsigned trick in gemm_q8)
    // Decode against q4_0 weights only (else NULL), for the vector dot product:
    // (n, cp) q with each group of SPLIT_GROUP blocks split in halves, the values 0-15 of each block
    // of the group, then the values 16-31 of each: for two blocks [b 0-15, b+1 0-15, b 16-31, b+1 16-31],
    // the order of q4_0's low and high nibbles as one vector load of the weights holds them.
    int8_t *split;
    float *c8; // (n, cp/Q8_BLOCK) 8 * d * sum of each block: what the -8 of q4_0 takes off (AVX2 decode)
} QuantizedRows;

// One token's row of a QuantizedRows, as the decode dot products read it.
typedef struct {
    const int8_t *q, *split;
    const float *d, *c8;
    const int32_t *sum;
} QuantizedRow;

// Token t's row of qx (rows of cp values, nb blocks).
static QuantizedRow row_of(const QuantizedRows *qx, int t, size_t cp, size_t nb) {
    return (QuantizedRow){qx->q + t * cp, qx->split ? qx->split + t * cp : NULL, qx->d + t * nb,
                          qx->c8 ? qx->c8 + t * nb : NULL, qx->sum + t * nb};
}

// One block of len <= Q8_BLOCK values of x (the rest of the block is zero padding).
static void quantize_block_q8(int8_t *q, float *d, int32_t *sum, const float *x, int len) {
    float amax = 0;
    for (int i = 0; i < len; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        amax = a > amax ? a : amax;
    }
    // A block below the smallest normal float counts as zero (127 / amax would be inf there).
    const float scale = amax / 127, inv = amax >= 0x1p-126f ? 127 / amax : 0;
    int32_t s = 0;
    for (int i = 0; i < Q8_BLOCK; i++) {
        float v = i < len ? x[i] * inv : 0;
        // NaN (from a damaged model) becomes -127: converting it to int would be undefined.
        v = v > -127.0f ? (v < 127.0f ? v : 127.0f) : -127.0f;
        int qi = (int)(v < 0 ? v - 0.5f : v + 0.5f); // round half away from zero, like roundf
        q[i] = (int8_t)qi;
        s += qi;
    }
    *d = scale;
    *sum = s;
}

static PLAIN void quantize_row_q8_plain(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    for (int b = 0; b * Q8_BLOCK < cols; b++) {
        const int c0 = b * Q8_BLOCK, len = cols - c0 < Q8_BLOCK ? cols - c0 : Q8_BLOCK;
        quantize_block_q8(q + c0, d + b, sum + b, x + c0, len);
    }
}

// ---------------------------------------------------------------------------------------------
// The workspace: one block of memory set up with the run, carved anew by each product.

typedef struct {
    unsigned char *next, *end;
} Carver;

// 64-byte aligned pieces; NULL when the workspace is too small, which sizing prevents.
static void *carve(Carver *c, size_t bytes) {
    unsigned char *p = c->next;
    bytes = (bytes + 63) / 64 * 64;
    if (!p || bytes > (size_t)(c->end - p)) return NULL;
    c->next = p + bytes;
    return p;
}

// Columns per chunk: the packed activations of all n tokens in about X_CHUNK bytes, a multiple of 32.
static int chunk_cols(int n, int cols, size_t elem) {
    long kc = X_CHUNK / ((long)n * (long)elem);
    kc = kc < KC_MIN ? KC_MIN : kc > KC_MAX ? KC_MAX : kc;
    kc = kc / Q8_BLOCK * Q8_BLOCK;
    return kc < cols ? (int)kc : cols;
}

// What gemm_f32, gemm_q8 and the q8_0 matrix x vector product carve, at most. Within the limits
// checked first (the model loader's and the command line's are tighter) every term is below 2^40.
size_t workspace_bytes(int max_n, int max_cols, int n_threads) {
    if (max_n < 1 || max_n > 1 << 16 || max_cols < 1 || max_cols > 1 << 20 || n_threads < 1 || n_threads > 1 << 12)
        return 0;
    const size_t n = (size_t)max_n, cp = (size_t)matrix_cols_stored(DTYPE_Q8_0, max_cols), nb = cp / Q8_BLOCK;
    const size_t kc = cp < KC_MAX ? cp : KC_MAX, th = (size_t)n_threads, pad = 64 * 12;
    const size_t tiles = (n + MR - 1) / MR, tiles_q8 = (n + MR_Q8 - 1) / MR_Q8;
    const size_t quantized = 2 * n * cp + 3 * n * nb * 4 + th * 64; // and decode's PieceRuns
    const size_t f32 = tiles * MR * cp * 4 + th * kc * NR * 4;
    const size_t q8 = quantized + tiles_q8 * MR_Q8 * (cp + 2 * nb * 4) + th * (2 * kc * NR + kc / Q8_BLOCK * NR * 4);
    return (f32 > q8 ? f32 : q8) + pad;
}

// ---------------------------------------------------------------------------------------------
// Microkernels, plain C. These define what each microkernel computes; kernels_x86.h has vector
// versions with the same signatures, and the table at its end says which ones a build uses.

// Decode: dot product of one weight row with one activation row (dot_rows below calls them).
static PLAIN ONE_COPY float dot_f32_plain(const float *w, const float *x, int n) {
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

static PLAIN ONE_COPY float dot_f16_plain(const _Float16 *w, const float *x, int n) {
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++)
        sum += (float)w[i] * x[i];
    return sum;
}

// q4_0 weights . q8_0 activations over nb blocks: sum_b dw_b dx_b (sum_i (qw_i - 8) qx_i). The
// vector versions read x's other fields (sum, split, c8); this one only q and d.
static PLAIN ONE_COPY float dot_q4_plain(const uint8_t *w, const _Float16 *dw, const QuantizedRow *x, int nb) {
    float sum = 0;
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++)
            s += q4_at(w + b * Q4_BLOCK_BYTES, i) * x->q[b * Q8_BLOCK + i];
        sum += (float)s * ((float)dw[b] * x->d[b]);
    }
    return sum;
}

// q8_0 weights . q8_0 activations over nb blocks: sum_b dw_b dx_b (sum_i qw_i qx_i).
static PLAIN ONE_COPY float dot_q8_plain(const int8_t *w, const float *dw, const QuantizedRow *x, int nb) {
    float sum = 0;
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++)
            s += w[b * Q8_BLOCK + i] * x->q[b * Q8_BLOCK + i];
        sum += (float)s * (dw[b] * x->d[b]);
    }
    return sum;
}

// Decode: a run of `count` groups of rows against one activation row. Group g (g < count) is rows
// r + g, r + g + step, ..., DOT_ROWS of them or as many as the matrix has (group_rows); each row's
// dot product with x goes to out[row], out being the activation row's output (m->rows values). x as
// floats, and quantized (xq) for q8_0 and q4_0 weights. One call per run, not per group: the vector
// versions set up once and keep the next group's loads going while one ends (docs/speed.md).
static inline int group_rows(int rows, int r, int step) {
    const int ahead = (rows - r + step - 1) / step; // rows r, r + step, ... before the end
    return ahead < DOT_ROWS ? ahead : DOT_ROWS;
}

static PLAIN void dot_rows_plain(float *out, const Matrix *m, int r, int step, int count, const float *x,
                                 const QuantizedRow *xq) {
    const size_t cp = (size_t)matrix_cols_stored(m->dtype, m->cols), nb = cp / Q8_BLOCK;
    for (int g = r; g < r + count; g++) {
        for (int k = 0; k < group_rows(m->rows, g, step); k++) {
            const size_t row = (size_t)(g + k * step);
            switch (m->dtype) {
            case DTYPE_F32:
                out[row] = dot_f32_plain((const float *)m->data + row * cp, x, m->cols);
                break;
            case DTYPE_F16:
                out[row] = dot_f16_plain((const _Float16 *)m->data + row * cp, x, m->cols);
                break;
            case DTYPE_Q8_0:
                out[row] =
                    dot_q8_plain((const int8_t *)m->data + row * cp, (const float *)m->scale + row * nb, xq, (int)nb);
                break;
            default:
                out[row] = dot_q4_plain((const uint8_t *)m->data + row * cp / 2, (const _Float16 *)m->scale + row * nb,
                                        xq, (int)nb);
                break;
            }
        }
    }
}

// Prefill, packing: xp (cols, MR) = x[t0 : t0+MR, :] transposed, so column k of a tile is MR
// consecutive floats, one broadcast each in the microkernel. Tokens past n are zero.
static void pack_x_f32(float *xp, const float *x, int cols, int n, int t0) {
    for (int t = 0; t < MR; t++) {
        if (t0 + t < n) {
            const float *src = x + (size_t)(t0 + t) * cols;
            for (int k = 0; k < cols; k++)
                xp[(size_t)k * MR + t] = src[k];
        } else {
            for (int k = 0; k < cols; k++)
                xp[(size_t)k * MR + t] = 0;
        }
    }
}

// wp (kc, NR) = W[r0 : r0+NR, k0 : k0+kc] transposed and widened to f32, from column `from` of the
// chunk on (the vector version packs the first columns itself); rows past the end are 0.
static void pack_w_f32_from(float *wp, const Matrix *m, int r0, int k0, int kc, int from) {
    const size_t cols = (size_t)m->cols;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR;
    for (int j = 0; j < NR; j++) {
        const size_t at = (size_t)(r0 + j) * cols + k0;
        for (int k = from; k < kc; k++)
            wp[k * NR + j] = j >= nr                 ? 0
                             : m->dtype == DTYPE_F32 ? ((const float *)m->data)[at + k]
                                                     : (float)((const _Float16 *)m->data)[at + k];
    }
}

static PLAIN void pack_w_f32_plain(float *wp, const Matrix *m, int r0, int k0, int kc) {
    pack_w_f32_from(wp, m, r0, k0, kc, 0);
}

// out[t, j] (+)= sum_k xp[k, t] * wp[k, j] for t < nt tokens, j < nr rows; out rows are ldo apart.
// Each output is one multiply-add chain over k in order, started from the value already in out
// when accumulating: the same result however the columns were cut into chunks.
static PLAIN void kernel_f32_plain(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc,
                                   int accumulate) {
    float c[MR][NR] = {{0}};
    for (int t = 0; accumulate && t < nt; t++)
        for (int j = 0; j < nr; j++)
            c[t][j] = out[t * ldo + j];
    for (int k = 0; k < kc; k++)
        for (int t = 0; t < MR; t++) {
            const float a = xp[k * MR + t];
#pragma omp simd
            for (int j = 0; j < NR; j++)
                c[t][j] += a * wp[k * NR + j];
        }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++)
            out[t * ldo + j] = c[t][j];
}

// q8_0 prefill works on integer tiles. The multiply instruction of the vector version (vpdpbusd)
// takes unsigned by signed bytes, so the weights are packed as qw + 128 (unsigned) and the
// activations stay signed; the extra 128 * sum(qx) each block picks up is removed by starting its
// integer sum at -128 * sum(qx).
//   packed tokens   xq (cp/4, MR_Q8, 4) s8, scales xd (cp/32, MR_Q8), start values xs (cp/32, MR_Q8)
//   packed weights  wq (kc/4, NR, 4) u8 and their scales wd (kc/32, NR)
static void pack_x_q8(int8_t *xq, float *xd, int32_t *xs, const QuantizedRows *qx, int cp, int n, int t0) {
    const int nb = cp / Q8_BLOCK;
    for (int t = 0; t < MR_Q8; t++) {
        const int real = t0 + t < n;
        const int8_t *src = qx->q + (size_t)(real ? t0 + t : 0) * cp; // padding tokens read nothing
        for (int k4 = 0; k4 < cp / 4; k4++)
            for (int i = 0; i < 4; i++)
                xq[((size_t)k4 * MR_Q8 + t) * 4 + i] = real ? src[k4 * 4 + i] : 0;
        for (int b = 0; b < nb; b++) {
            const size_t at = (size_t)(t0 + t) * nb + b;
            xd[b * MR_Q8 + t] = real ? qx->d[at] : 0;
            xs[b * MR_Q8 + t] = real ? -128 * qx->sum[at] : 0;
        }
    }
}

static void pack_w_q8_from(uint8_t *wq, float *wd, const Matrix *m, int r0, int k0, int kc, int from) {
    const size_t cp = (size_t)matrix_cols_stored(DTYPE_Q8_0, m->cols), nb = cp / Q8_BLOCK;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR;
    const int8_t *w = (const int8_t *)m->data;
    for (int j = 0; j < NR; j++)
        for (int k4 = from / 4; k4 < kc / 4; k4++)
            for (int i = 0; i < 4; i++)
                wq[(k4 * NR + j) * 4 + i] = j < nr ? (uint8_t)(w[(size_t)(r0 + j) * cp + k0 + k4 * 4 + i] + 128) : 128;
    for (int j = 0; j < NR; j++)
        for (int b = 0; b < kc / Q8_BLOCK; b++)
            wd[b * NR + j] = j < nr ? ((const float *)m->scale)[(size_t)(r0 + j) * nb + k0 / Q8_BLOCK + b] : 0;
}

// q4_0 weights go through the same integer tiles as q8_0, unpacked to q - 8 + 128 = q + 120: each
// row's nibbles into stage (NR, kc) in column order (loops the compiler vectorizes), then moved
// into wq's layout 4 bytes at a time.
static void pack_w_q4(uint8_t *wq, float *wd, uint8_t *stage, const Matrix *m, int r0, int k0, int kc) {
    const size_t cp = (size_t)matrix_cols_stored(DTYPE_Q4_0, m->cols), nb = cp / Q8_BLOCK;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR;
    const _Float16 *d = (const _Float16 *)m->scale;
    for (int j = 0; j < NR; j++) {
        uint8_t *row = stage + (size_t)j * kc;
        const uint8_t *src = j < nr ? (const uint8_t *)m->data + ((size_t)(r0 + j) * cp + k0) / 2 : NULL;
        // Byte i of a block holds value i (low nibble) and value i + 16 (high); padding rows read as
        // 0x88: q = 8, w = 0.
        for (int b = 0; b < kc / Q4_BLOCK; b++)
            for (int i = 0; i < Q4_BLOCK_BYTES; i++) {
                const uint8_t two = src ? src[b * Q4_BLOCK_BYTES + i] : 0x88;
                row[b * Q4_BLOCK + i] = (uint8_t)((two & 15) + 120);
                row[b * Q4_BLOCK + Q4_BLOCK_BYTES + i] = (uint8_t)((two >> 4) + 120);
            }
    }
    for (int k4 = 0; k4 < kc / 4; k4++)
        for (int j = 0; j < NR; j++)
            memcpy(wq + ((size_t)k4 * NR + j) * 4, stage + (size_t)j * kc + k4 * 4, 4);
    for (int j = 0; j < NR; j++)
        for (int b = 0; b < kc / Q8_BLOCK; b++)
            wd[b * NR + j] = j < nr ? (float)d[(size_t)(r0 + j) * nb + k0 / Q8_BLOCK + b] : 0;
}

static PLAIN void pack_w_q8_plain(uint8_t *wq, float *wd, uint8_t *stage, const Matrix *m, int r0, int k0, int kc) {
    (void)stage; // the vector version copies rows through it
    pack_w_q8_from(wq, wd, m, r0, k0, kc, 0);
}

// Per block of 32 columns: the exact integer sums of an MR_Q8 x NR tile, then dw * dx * sum added
// to float accumulators.
static PLAIN void kernel_q8_plain(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd,
                                  const int32_t *xs, const uint8_t *wq, const float *wd, int kc, int accumulate) {
    float c[MR_Q8][NR] = {{0}};
    for (int t = 0; accumulate && t < nt; t++)
        for (int j = 0; j < nr; j++)
            c[t][j] = out[t * ldo + j];
    for (int b = 0; b < kc / Q8_BLOCK; b++) {
        int32_t s[MR_Q8][NR];
        for (int t = 0; t < MR_Q8; t++)
            for (int j = 0; j < NR; j++)
                s[t][j] = xs[b * MR_Q8 + t];
        for (int k4 = b * Q8_BLOCK / 4; k4 < (b + 1) * Q8_BLOCK / 4; k4++)
            for (int t = 0; t < MR_Q8; t++)
                for (int j = 0; j < NR; j++)
                    for (int i = 0; i < 4; i++)
                        s[t][j] += wq[(k4 * NR + j) * 4 + i] * xq[(k4 * MR_Q8 + t) * 4 + i];
        for (int t = 0; t < MR_Q8; t++)
            for (int j = 0; j < NR; j++)
                c[t][j] += (float)s[t][j] * xd[b * MR_Q8 + t] * wd[b * NR + j];
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++)
            out[t * ldo + j] = c[t][j];
}

// A block of keys kt (hd, KV_RUN) of type t as floats, into out (hd * KV_RUN).
static void key_block_floats(float *out, const void *kt, DType t, int hd) {
    const size_t n = (size_t)hd * KV_RUN;
    if (t == DTYPE_F32) {
        memcpy(out, kt, n * sizeof(float));
    } else if (t == DTYPE_F16) {
        for (size_t i = 0; i < n; i++)
            out[i] = (float)((const _Float16 *)kt)[i];
    } else { // q8_0: q (hd, KV_RUN), then d (hd / 32, KV_RUN)
        const int8_t *q = kt;
        const _Float16 *d = (const _Float16 *)(q + n);
        for (int c = 0; c < hd; c++)
#pragma omp simd
            for (int i = 0; i < KV_RUN; i++)
                out[(size_t)c * KV_RUN + i] = q[(size_t)c * KV_RUN + i] * (float)d[(size_t)(c / Q8_BLOCK) * KV_RUN + i];
    }
}

// n cached values v (n rows of type t) as floats, into out (n, hd).
static void value_rows_floats(float *out, const void *v, DType t, int hd, int n) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hd; d++)
            out[(size_t)j * hd + d] = value_get(v, t, hd, j, d);
}

// A block of keys k (hd, KV_RUN) turned by RoPE in place with its block of the rotation table: rows
// 2p and 2p+1 (pair p) become (x0 cos - x1 sin, x0 sin + x1 cos) with cos and sin rows 2p and 2p+1
// of rot. Used for the keys of dynamic NTK and ReRoPE, which the cache holds un-rotated.
static void rotate_block(float *k, const float *rot, int hd) {
    for (int p = 0; p < hd / 2; p++) {
        const size_t r0 = (size_t)2 * p * KV_RUN, r1 = r0 + KV_RUN;
#pragma omp simd
        for (int i = 0; i < KV_RUN; i++) {
            const float x0 = k[r0 + i], x1 = k[r1 + i], c = rot[r0 + i], s = rot[r1 + i];
            k[r0 + i] = rope_turn0(x0, x1, c, s);
            k[r1 + i] = rope_turn1(x0, x1, c, s);
        }
    }
}

// Attention, scores: att[r, j] = sum_d qs[r, d] k_j[d] for rows r < rows and positions j < len,
// over one head's keys kt (of type t) in the cache's blocks of KV_RUN; att rows are ld apart. A
// block other than float32, or with a rotation table, is first made floats (and turned) in
// `turned` (hd * KV_RUN floats). A block's KV_RUN scores are summed in a local array while all hd
// coordinates go by, so each row reads the keys once, in order.
static PLAIN void attention_scores_plain(float *att, size_t ld, const float *qs, int rows, const void *kt, DType t,
                                         const float *rot, float *turned, int hd, int len) {
    for (int j = 0; j < len; j += KV_RUN) {
        const int run = len - j < KV_RUN ? len - j : KV_RUN;
        const void *block = (const char *)kt + (size_t)j * kv_row_bytes(t, hd); // block j / KV_RUN
        const float *keys = block;
        if (t != DTYPE_F32 || rot) {
            key_block_floats(turned, block, t, hd);
            if (rot) rotate_block(turned, rot + (size_t)j * hd, hd);
            keys = turned;
        }
        for (int r = 0; r < rows; r++) {
            float acc[KV_RUN] = {0};
            for (int d = 0; d < hd; d++) {
                const float qd = qs[(size_t)r * hd + d];
#pragma omp simd
                for (int i = 0; i < run; i++)
                    acc[i] += qd * keys[(size_t)d * KV_RUN + i];
            }
            memcpy(att + r * ld + j, acc, (size_t)run * sizeof(float));
        }
    }
}

// Attention, mix: o[r, d] = sum_j att[r, j] v[j, d] for rows r < rows and d < hd, over one head's
// values v (len, hd) of type t, o (rows, hd); in runs of MIX_RUN positions (other than float32:
// made floats in `wide` first), OUT_RUN output coordinates at a time in a local array while the
// positions of the run go by. Each output is summed in position order.
static PLAIN void attention_mix_plain(float *o, const float *att, size_t ld, int rows, const void *v, DType t,
                                      float *wide, int len, int hd) {
    memset(o, 0, (size_t)rows * hd * sizeof(float));
    for (int j0 = 0; j0 < len; j0 += MIX_RUN) {
        const int run = len - j0 < MIX_RUN ? len - j0 : MIX_RUN;
        const void *from = (const char *)v + (size_t)j0 * kv_row_bytes(t, hd);
        const float *vals = from;
        if (t != DTYPE_F32) {
            value_rows_floats(wide, from, t, hd, run);
            vals = wide;
        }
        for (int r = 0; r < rows; r++) {
            for (int d0 = 0; d0 < hd; d0 += OUT_RUN) {
                const int width = hd - d0 < OUT_RUN ? hd - d0 : OUT_RUN;
                float acc[OUT_RUN];
                memcpy(acc, o + (size_t)r * hd + d0, (size_t)width * sizeof(float));
                for (int j = 0; j < run; j++) {
                    const float p = att[r * ld + j0 + j];
#pragma omp simd
                    for (int d = 0; d < width; d++)
                        acc[d] += p * vals[(size_t)j * hd + d0 + d];
                }
                memcpy(o + (size_t)r * hd + d0, acc, (size_t)width * sizeof(float));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The vector versions, where this build has them (kernels_x86.h), else the plain ones above.
#ifdef USE_AVX2
#include "kernels_x86.h"
#endif
#ifndef dot_rows
#define dot_rows dot_rows_plain
#endif
#ifndef pack_w_f32
#define pack_w_f32 pack_w_f32_plain
#endif
#ifndef pack_w_q8
#define pack_w_q8 pack_w_q8_plain
#endif
#ifndef kernel_f32
#define kernel_f32 kernel_f32_plain
#endif
#ifndef kernel_q8
#define kernel_q8 kernel_q8_plain
#endif
#ifndef attention_scores
#define attention_scores attention_scores_plain
#endif
#ifndef attention_mix
#define attention_mix attention_mix_plain
#endif
#ifndef quantize_row_q8
#define quantize_row_q8 quantize_row_q8_plain
#endif

// ---------------------------------------------------------------------------------------------
// q8_0 activations, for both products: the rows of x quantized into the workspace.

// Blocks per group of QuantizedRows.split: as many as one vector load of q4_0 weights holds
// (kernels_x86.h: 4 with AVX-512, else 2).
#ifndef SPLIT_GROUP
#define SPLIT_GROUP 2
#endif

// with_split: also fill split and c8 (decode against q4_0 weights).
static int quantize_rows_q8(Carver *c, QuantizedRows *qr, const float *x, int n, int cols, int with_split) {
    const size_t cp = (size_t)matrix_cols_stored(DTYPE_Q8_0, cols), nb = cp / Q8_BLOCK, half = Q8_BLOCK / 2;
    qr->q = carve(c, (size_t)n * cp);
    qr->d = carve(c, (size_t)n * nb * sizeof(float));
    qr->sum = carve(c, (size_t)n * nb * sizeof(int32_t));
    qr->split = with_split ? carve(c, (size_t)n * cp) : NULL;
    qr->c8 = with_split ? carve(c, (size_t)n * nb * sizeof(float)) : NULL;
    if (!qr->q || !qr->d || !qr->sum || (with_split && (!qr->split || !qr->c8))) return -1;
    if (n == 1) // one token: no team (top of the file)
        quantize_row_q8(qr->q, qr->d, qr->sum, x, cols);
    else
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++)
            quantize_row_q8(qr->q + t * cp, qr->d + t * nb, qr->sum + t * nb, x + (size_t)t * cols, cols);
    for (size_t t = 0; with_split && t < (size_t)n; t++) {
        const int8_t *q = qr->q + t * cp;
        int8_t *p = qr->split + t * cp;
        size_t b = 0;
        for (; b + SPLIT_GROUP <= nb; b += SPLIT_GROUP) // blocks b .. b + SPLIT_GROUP - 1
            for (size_t j = 0; j < SPLIT_GROUP; j++) {
                memcpy(p + b * Q8_BLOCK + j * half, q + (b + j) * Q8_BLOCK, half);
                memcpy(p + b * Q8_BLOCK + (SPLIT_GROUP + j) * half, q + (b + j) * Q8_BLOCK + half, half);
            }
        memcpy(p + b * Q8_BLOCK, q + b * Q8_BLOCK, (nb - b) * Q8_BLOCK); // a last, short group stays as it is
        for (b = 0; b < nb; b++)
            qr->c8[t * nb + b] = 8 * qr->d[t * nb + b] * (float)qr->sum[t * nb + b];
    }
    return 0;
}

const char *kernels_isa(void) {
#if defined(USE_AVX512_VNNI)
    return "avx512-vnni";
#elif defined(USE_AVX512)
    return "avx512";
#elif defined(USE_AVX2)
    return "avx2";
#else
    return "plain-c";
#endif
}

// ---------------------------------------------------------------------------------------------
// Decode: matrix x vector. out[i] (n, m[i]->rows) = x (n, cols) @ m[i]^T for the `count` matrices,
// which share cols and dtype: their rows are shared out together in one parallel region. A matrix
// of R rows is read as ceil(R / 4) groups: group j is rows j, j + R/4, j + 2R/4, j + 3R/4, read at
// once (dot_rows), so the groups in order stream the matrix's four quarters side by side, four long
// sequential runs, as bench/bwprobe reads: the hardware prefetcher follows a few long streams and
// starts over at every short one (docs/speed.md, "Where a step's reads go", has the layouts tried).
// A row is never split, so the sum order does not depend on the thread count, nor on which thread
// sums it.
//
// Sharing out: each thread owns one contiguous run of the stack's row groups, cut in pieces of
// PIECE_GROUPS groups, and takes its pieces front to back, so that it streams its run start to end
// as one static share would. A thread whose run is done takes pieces from the back of the others'
// runs until none are left. Handing out small pieces to whichever thread asks (schedule dynamic)
// interleaves the threads' reads and defeats the hardware prefetcher; a plain static split leaves
// the faster thread waiting at the end of every product, since two vCPUs need not stream equally
// fast (docs/speed.md has both measured).

// The groups of a matrix of `rows` rows, which is also how far apart a group's rows are.
static int row_groups(int rows) { return (rows + DOT_ROWS - 1) / DOT_ROWS; }

// Groups g0 .. g1-1 of the stack of matrices (one piece), for each of the n activation rows; cp
// bytes (or values) and nb blocks a stored row, the same for every matrix of the stack (they share
// cols and dtype). The piece's first group is found once; from there the piece goes as runs of
// groups within one matrix (consecutive rows r, r + 1, ..), one dot_rows call per run.
static void matvec_piece(float *const *out, const float *x, const Matrix *const *m, int g0, int g1, int n,
                         const QuantizedRows *qx, size_t cp, size_t nb) {
    int i = 0, j = g0; // group g0 of the stack is group j of matrix i
    while (j >= row_groups(m[i]->rows))
        j -= row_groups(m[i++]->rows);
    for (int g = g0; g < g1;) {
        if (j == row_groups(m[i]->rows)) i++, j = 0;
        const int rows = m[i]->rows, cols = m[i]->cols, step = row_groups(rows); // group j: rows j, j + step, ..
        const int count = step - j < g1 - g ? step - j : g1 - g;
        for (int t = 0; t < n; t++) {
            const QuantizedRow xq = qx->q ? row_of(qx, t, cp, nb) : (QuantizedRow){0};
            dot_rows(out[i] + (size_t)t * rows, m[i], j, step, count, x + (size_t)t * cols, &xq);
        }
        g += count, j += count;
    }
}

// One thread's run of pieces: its next piece and its end, in one word, so that the owner taking
// from the front and another thread taking from the back cannot both get the last piece.
typedef struct {
    _Alignas(64) _Atomic uint64_t next_end; // next (low 32 bits), end (high 32 bits); a cache line each
} PieceRun;

// The next piece of a run, from its front or its back; -1 when the run is empty.
static int take_piece(PieceRun *run, int from_back) {
    uint64_t v = atomic_load_explicit(&run->next_end, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
        if (next >= end) return -1;
        const uint64_t taken = from_back ? (uint64_t)(end - 1) << 32 | next : v + 1;
        if (atomic_compare_exchange_weak_explicit(&run->next_end, &v, taken, memory_order_relaxed,
                                                  memory_order_relaxed))
            return (int)(from_back ? end - 1 : next);
    }
}

// Thread `self` of `threads`: its own run from the front, then the others' from the back.
static void matvec_runs(PieceRun *runs, int self, int threads, int pieces, int groups, float *const *out,
                        const float *x, const Matrix *const *m, int n, const QuantizedRows *qx, size_t cp, size_t nb) {
    for (int k = 0; k < threads; k++) {
        PieceRun *run = &runs[(self + k) % threads];
        for (int p; (p = take_piece(run, k > 0)) >= 0;)
            matvec_piece(out, x, m, p * PIECE_GROUPS, p < pieces - 1 ? (p + 1) * PIECE_GROUPS : groups, n, qx, cp, nb);
    }
}

static int matvec(Carver *ws, int threads, float *const *out, const float *x, const Matrix *const *m, int count,
                  int n) {
    int groups = 0;
    for (int i = 0; i < count; i++)
        groups += row_groups(m[i]->rows);
    const int pieces = (groups + PIECE_GROUPS - 1) / PIECE_GROUPS;
    threads = threads < pieces ? threads : pieces;
    const size_t cp = (size_t)matrix_cols_stored(m[0]->dtype, m[0]->cols), nb = cp / Q8_BLOCK;
    QuantizedRows qx = {0};
    if (quantized(m[0]->dtype) && quantize_rows_q8(ws, &qx, x, n, m[0]->cols, m[0]->dtype == DTYPE_Q4_0)) return -1;
    PieceRun *runs = carve(ws, (size_t)threads * sizeof(PieceRun));
    if (!runs) return -1;
    for (int t = 0; t < threads; t++) // thread t's run: pieces [pieces t / threads, pieces (t + 1) / threads)
        atomic_init(&runs[t].next_end,
                    (uint64_t)((int64_t)pieces * (t + 1) / threads) << 32 | (uint64_t)((int64_t)pieces * t / threads));
    if (threads == 1) { // no team for one thread (top of the file)
        matvec_runs(runs, 0, 1, pieces, groups, out, x, m, n, &qx, cp, nb);
        return 0;
    }
#pragma omp parallel num_threads(threads)
    matvec_runs(runs, thread_num(), threads, pieces, groups, out, x, m, n, &qx, cp, nb);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Prefill: blocked matrix x matrix, for the `count` matrices that read the same x (q, k and v;
// gate and up): x is quantized and packed once for all of them.
//
//   pack x into tiles of MR tokens                        xp (tiles, cols, MR), once, shared
//   for each matrix, for each group of a few panels of NR weight rows, to whichever thread is free
//     for each chunk of KC columns k0 ..                  (that chunk of xp stays in L2)
//       for each panel of the group
//         pack W[panel rows, k0 : k0+KC]                  wp (KC, NR): NR rows side by side
//         for each tile of MR tokens
//           out[tile, panel] (+)= xp[tile, k0 : k0+KC] @ wp   the microkernel, MR x NR in registers
//
// A group of panels is one thread's work from start to end, so every output is summed in the same
// order whatever the number of threads. Groups go to whichever thread is free (schedule dynamic)
// and nothing waits between them, nor between matrices (nowait): on a busy machine a thread that
// lost its core delays the others by one group, not by its whole share. Padding: a partial tile is
// packed with zero tokens, a partial panel with zero rows; only real outputs are stored.

// Panels per work item: several, so a chunk of packed activations read into L2 serves them all,
// but items enough for every thread to get a few (the last ones finish close together).
static int panel_group(int panels, int threads) {
    int g = panels / (4 * threads);
    return g < 1 ? 1 : g > PANEL_GROUP ? PANEL_GROUP : g;
}

// f32 and f16 weights.
static int gemm_f32(Carver *ws, int threads, float *const *out, const float *x, const Matrix *const *m, int count,
                    int n) {
    const int cols = m[0]->cols, tiles = (n + MR - 1) / MR;
    const int kc_max = chunk_cols(tiles * MR, cols, sizeof(float));
    const size_t wp_floats = (size_t)kc_max * NR;
    float *xp = carve(ws, (size_t)tiles * cols * MR * sizeof(float));       // (tiles, cols, MR)
    float *wp_all = carve(ws, (size_t)threads * wp_floats * sizeof(float)); // per thread (kc, NR)
    if (!xp || !wp_all) return -1;
#pragma omp parallel num_threads(threads)
    {
        float *wp = wp_all + (size_t)thread_num() * wp_floats;
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++)
            pack_x_f32(xp + (size_t)i * cols * MR, x, cols, n, i * MR);
        for (int mi = 0; mi < count; mi++) {
            const int rows = m[mi]->rows, panels = (rows + NR - 1) / NR;
            const int group = panel_group(panels, threads), groups = (panels + group - 1) / group;
#pragma omp for schedule(dynamic) nowait
            for (int g = 0; g < groups; g++) {
                const int p_end = (g + 1) * group < panels ? (g + 1) * group : panels;
                for (int k0 = 0; k0 < cols; k0 += kc_max) {
                    const int kc = cols - k0 < kc_max ? cols - k0 : kc_max;
                    for (int p = g * group; p < p_end; p++) {
                        const int r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
                        pack_w_f32(wp, m[mi], r0, k0, kc);
                        for (int i = 0; i < tiles; i++) {
                            const int nt = n - i * MR < MR ? n - i * MR : MR;
                            kernel_f32(out[mi] + (size_t)i * MR * rows + r0, (size_t)rows, nt, nr,
                                       xp + ((size_t)i * cols + k0) * MR, wp, kc, k0 > 0);
                        }
                    }
                }
            }
        }
    }
    return 0;
}

// q8_0 and q4_0 weights: the same loops over integer tiles.
static int gemm_q8(Carver *ws, int threads, float *const *out, const float *x, const Matrix *const *m, int count,
                   int n) {
    const int cols = m[0]->cols, cp = matrix_cols_stored(DTYPE_Q8_0, cols), nb = cp / Q8_BLOCK;
    const int tiles = (n + MR_Q8 - 1) / MR_Q8;
    const int kc_max = chunk_cols(tiles * MR_Q8, cp, 1);
    const size_t tile_q = (size_t)cp * MR_Q8, tile_b = (size_t)nb * MR_Q8; // per tile: bytes, blocks
    const size_t wq_bytes = (size_t)kc_max * NR, wd_floats = (size_t)kc_max / Q8_BLOCK * NR;
    QuantizedRows qx;
    if (quantize_rows_q8(ws, &qx, x, n, cols, 0)) return -1;
    int8_t *xq = carve(ws, tiles * tile_q);                                 // (tiles, cp/4, MR_Q8, 4)
    float *xd = carve(ws, tiles * tile_b * sizeof(float));                  // (tiles, cp/32, MR_Q8)
    int32_t *xs = carve(ws, tiles * tile_b * sizeof(int32_t));              // (tiles, cp/32, MR_Q8)
    uint8_t *wq_all = carve(ws, (size_t)threads * 2 * wq_bytes);            // per thread (kc/4, NR, 4), stage
    float *wd_all = carve(ws, (size_t)threads * wd_floats * sizeof(float)); // per thread (kc/32, NR)
    if (!xq || !xd || !xs || !wq_all || !wd_all) return -1;
#pragma omp parallel num_threads(threads)
    {
        uint8_t *wq = wq_all + (size_t)thread_num() * 2 * wq_bytes, *stage = wq + wq_bytes;
        float *wd = wd_all + (size_t)thread_num() * wd_floats;
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++)
            pack_x_q8(xq + i * tile_q, xd + i * tile_b, xs + i * tile_b, &qx, cp, n, i * MR_Q8);
        for (int mi = 0; mi < count; mi++) {
            const int rows = m[mi]->rows, panels = (rows + NR - 1) / NR;
            const int group = panel_group(panels, threads), groups = (panels + group - 1) / group;
#pragma omp for schedule(dynamic) nowait
            for (int g = 0; g < groups; g++) {
                const int p_end = (g + 1) * group < panels ? (g + 1) * group : panels;
                for (int k0 = 0; k0 < cp; k0 += kc_max) {
                    const int kc = cp - k0 < kc_max ? cp - k0 : kc_max, b0 = k0 / Q8_BLOCK;
                    for (int p = g * group; p < p_end; p++) {
                        const int r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
                        if (m[mi]->dtype == DTYPE_Q4_0)
                            pack_w_q4(wq, wd, stage, m[mi], r0, k0, kc);
                        else
                            pack_w_q8(wq, wd, stage, m[mi], r0, k0, kc);
                        for (int i = 0; i < tiles; i++) {
                            const int nt = n - i * MR_Q8 < MR_Q8 ? n - i * MR_Q8 : MR_Q8;
                            kernel_q8(out[mi] + (size_t)i * MR_Q8 * rows + r0, (size_t)rows, nt, nr,
                                      xq + i * tile_q + (size_t)k0 * MR_Q8, xd + i * tile_b + (size_t)b0 * MR_Q8,
                                      xs + i * tile_b + (size_t)b0 * MR_Q8, wq, wd, kc, k0 > 0);
                        }
                    }
                }
            }
        }
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The products the forward pass calls

int matmul(Workspace *ws, float *out, const float *x, const Matrix *m, int n) {
    return matmul_many(ws, &out, x, &m, 1, n);
}

int matmul_many(Workspace *ws, float *const *out, const float *x, const Matrix *const *m, int count, int n) {
    for (int i = 0; i < count; i++)
        if (n < 1 || n > ws->max_n || m[i]->cols > ws->max_cols) return -1; // the workspace was sized for less
    int same = 1; // one parallel loop needs one input width and one weight type
    for (int i = 1; i < count; i++)
        same &= m[i]->cols == m[0]->cols && m[i]->dtype == m[0]->dtype;
    if (!same) {
        for (int i = 0; i < count; i++)
            if (matmul(ws, out[i], x, m[i], n)) return -1;
        return 0;
    }
    const int threads = ws->n_threads;
    Carver c = {ws->base, ws->base + ws->bytes};
    if (n >= GEMM_MIN_N) return (quantized(m[0]->dtype) ? gemm_q8 : gemm_f32)(&c, threads, out, x, m, count, n);
    return matvec(&c, threads, out, x, m, count, n);
}

// ---------------------------------------------------------------------------------------------
// Attention, fast: the same three steps as attention_ref, on tasks of up to ATT_ROWS query rows
// that share one kv head: the group = n_heads / n_kv_heads query heads of that kv head, for a run of
// consecutive queries. Each key and value a task loads then serves every row of the task (grouped-
// query attention's saving, and the reuse of a matrix product across the queries of a prompt), where
// a (query, head) at a time would read the cache once per row. Scores of the task's last query go to
// its last position; an earlier query's scores past its own position are computed and then set to 0
// after its softmax (the causal mask), which adds exact zeros to its mix, so a query's result does
// not depend on which task it was in: the same for any block size or thread count.
// Scratch per thread: attention_scratch_floats, for the scaled queries, the scores and the outputs
// (ReRoPE: and the scaled far queries and the near scores).

static int att_queries(int n_heads, int n_kv_heads) {
    const int group = n_heads / n_kv_heads;
    return group >= ATT_ROWS ? 1 : ATT_ROWS / group;
}

// One task's scratch, laid out in one place: attention_scratch_floats sizes it and attention_task
// carves it with this function, so the two cannot drift. Offsets in floats from the scratch's start;
// returns the total. rows: the task's most query rows; each part is that many rows long.
typedef struct {
    size_t qs, o, att; // the scaled queries, the outputs, the scores (a row of stride per query)
    size_t qf, near;   // ReRoPE (two paths): the scaled far queries and the near scores
    size_t turned;     // a turned or widened block of keys, or a run of widened values, and 32 past it
} AttLayout;

static size_t att_layout(AttLayout *a, size_t rows, size_t hd, size_t stride, int two_paths) {
    size_t at = 0;
    a->qs = at, at += rows * hd;
    a->o = at, at += rows * hd;
    a->att = at, at += rows * stride;
    a->qf = at, at += two_paths ? rows * hd : 0;
    a->near = at, at += two_paths ? rows * stride : 0;
    a->turned = at, at += hd * MIX_RUN + KV_RUN;
    return at;
}

size_t attention_scratch_floats(int ctx, int n_heads, int n_kv_heads, int head_dim, int two_paths) {
    // The bounds make every product of att_layout fit a size_t: ctx and head_dim as the loader and
    // --ctx allow them (each part is below 2^24 x 2^10 x 16 x 2^10 floats).
    if (ctx < 1 || ctx > (1 << 24) || n_heads < 1 || n_kv_heads < 1 || n_heads > 1024 || head_dim < 1 ||
        head_dim > ROPE_MAX_HEAD_DIM)
        return 0;
    AttLayout a;
    const size_t rows = (size_t)att_queries(n_heads, n_kv_heads) * (n_heads / n_kv_heads);
    return att_layout(&a, rows, (size_t)head_dim, kv_stride(ctx), two_paths);
}

// ReRoPE's scores for a task's rows (row r: the query at first + r / group), the cache's keys kt of one
// kv head: a key at distance m - p >= W from the query m takes the far path (q_far, rotation_far),
// the others the near one (q, rotation). Positions before far_end are far from the task's last query
// (m = len - 1), so the far path runs over them, into att; positions from near_start on (a block
// boundary) are near the first query, so the near path runs over them, into `near`; a row then takes
// the near score at each position that is near for its own query. Only the block or two where the
// task's queries disagree are scored both ways; elsewhere one path serves every row.
static void rerope_scores(float *att, float *near, size_t ld, const float *qs, const float *qf, int rows, int group,
                          const KVCache *c, const void *kt, float *turned, int first, int len) {
    const int W = c->window, hd = c->head_dim;
    const int far_end = len - W > 0 ? len - W : 0,
              near_start = first - W + 1 > 0 ? (first - W + 1) / KV_RUN * KV_RUN : 0;
    if (far_end > 0) attention_scores(att, ld, qf, rows, kt, c->key_type, c->rotation_far, turned, hd, far_end);
    if (near_start >= len) return;
    attention_scores(near + near_start, ld, qs, rows,
                     (const char *)kt + (size_t)near_start * kv_row_bytes(c->key_type, c->head_dim), c->key_type,
                     c->rotation + (size_t)near_start * hd, turned, hd, len - near_start);
    for (int r = 0; r < rows; r++) {
        const int m = first + r / group, from = m - W + 1 > near_start ? m - W + 1 : near_start; // near: p > m - W
        memcpy(att + r * ld + from, near + r * ld + from, (size_t)(len - from) * sizeof(float));
    }
}

// One task of attention: kv head kvh's query rows for queries t * per .. (at most per of them).
static void attention_task(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
                           float *scratch, int kvh, int t) {
    const int hd = c->head_dim, qd = c->n_heads * hd, two = c->window > 0 && layer_rotates(c, layer);
    const int group = c->n_heads / c->n_kv_heads, per = att_queries(c->n_heads, c->n_kv_heads), max_rows = per * group;
    const size_t stride = kv_stride(c->ctx);
    const float scale = 1.0f / sqrtf((float)hd);
    const int i0 = t * per, nq = n - i0 < per ? n - i0 : per, rows = nq * group, len = pos + i0 + nq;
    AttLayout lay;
    att_layout(&lay, (size_t)max_rows, (size_t)hd, stride, c->window > 0); // as attention_scratch_floats sized it
    // A sliding layer: the task's first query sees nothing before `first`, so neither does any later
    // one; scores and the mix start at the block that holds it (the positions before it in that
    // block are masked below, with the ones each later query no longer sees).
    const int first = two ? 0 : layer_first(c, layer, pos + i0) / KV_RUN * KV_RUN;
    const void *keys = (const char *)head_keys(c, layer, kvh) + (size_t)first * kv_row_bytes(c->key_type, hd);
    const float *rot = layer_rotates(c, layer) && c->rotation ? c->rotation + (size_t)first * hd : NULL;
    float *qs = scratch + lay.qs, *o = scratch + lay.o, *att = scratch + lay.att, *turned = scratch + lay.turned;
    float *qf = scratch + lay.qf, *near = scratch + lay.near; // ReRoPE's far queries and near scores
    for (int r = 0; r < rows; r++) { // row r: query i0 + r / group, head kvh * group + r % group
        const size_t at = (size_t)(i0 + r / group) * qd + (size_t)(kvh * group + r % group) * hd;
        for (int d = 0; d < hd; d++)
            qs[(size_t)r * hd + d] = q[at + d] * scale;
        for (int d = 0; two && d < hd; d++)
            qf[(size_t)r * hd + d] = q_far[at + d] * scale;
    }
    if (two) // q . k_j / sqrt(d), near or far
        rerope_scores(att, near, stride, qs, qf, rows, group, c, head_keys(c, layer, kvh), turned, pos + i0, len);
    else
        attention_scores(att + first, stride, qs, rows, keys, c->key_type, rot, turned, hd, len - first); // q . k_j / sqrt(d)
    for (int r = 0; r < rows; r++) {
        const int m = pos + i0 + r / group, from = layer_first(c, layer, m); // this query sees from .. m
        memset(att + r * stride + first, 0, (size_t)(from - first) * sizeof(float));
        softmax(att + r * stride + from, m + 1 - from);
        memset(att + r * stride + m + 1, 0, (size_t)(len - m - 1) * sizeof(float));
    }
    const void *values = (const char *)head_values(c, layer, kvh) + (size_t)first * kv_row_bytes(c->value_type, hd);
    attention_mix(o, att + first, stride, rows, values, c->value_type, turned, len - first, hd); // sum_j p_j v_j
    for (int r = 0; r < rows; r++)
        memcpy(out + (size_t)(i0 + r / group) * qd + (size_t)(kvh * group + r % group) * hd, o + (size_t)r * hd,
               (size_t)hd * sizeof(float));
}

void attention(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
               float *scratch, int n_threads) {
    const int per = att_queries(c->n_heads, c->n_kv_heads), tasks = (n + per - 1) / per;
    const size_t each = attention_scratch_floats(c->ctx, c->n_heads, c->n_kv_heads, c->head_dim, c->window > 0);
    if (n_threads == 1) { // no team for one thread (top of the file)
        for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
            for (int t = 0; t < tasks; t++)
                attention_task(out, q, q_far, c, layer, n, pos, scratch, kvh, t);
        return;
    }
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(n_threads)
    for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
        for (int t = 0; t < tasks; t++)
            attention_task(out, q, q_far, c, layer, n, pos, scratch + (size_t)thread_num() * each, kvh, t);
}
