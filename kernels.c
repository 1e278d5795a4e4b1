// kernels.c - the fences and the references of the kernels: matrix products over the weight types
// (dtype.h), and attention over the KV cache.
//
// Layout: W is (rows, cols) row-major; a block of n activations x is (n, cols); the product
// out = x @ W^T is (n, rows). Every output element is computed start to end by one thread in an
// order that depends only on the shapes, so the result does not depend on the number of threads.
//
// Two regimes, two algorithms (docs/speed.md says why, with numbers), in files of their own:
//   decode, n < GEMM_MIN_N tokens (kernels_decode.c): matrix x vector. Each weight is used once per
//     token, so the time is the time to stream the weights from memory.
//   prefill, n >= GEMM_MIN_N (kernels_prefill.c): matrix x matrix, blocked so that each weight
//     read serves every token from cache. Here the time is arithmetic, not memory.
// and attention (kernels_attention.c). kernels_internal.h lists the files and what they share.
//
// This file: the references, one weight or one cached number at a time in double, slow and
// obviously right, which every fast path is tested against (matmul_ref, attention_ref); the copy of a
// first layout into its grouped one (matrix_to_r16); the KV cache's layout, which only this file,
// attention and its vector tiles know; RMSNorm and the softmax; the q8_0 activations; the workspace's
// layout; and matmul, which hands each product to decode or prefill (the weight types and their
// sizes: dtype.h, dtype.c, kernels_internal.h).
// What this is not: a BLAS. Only out = x @ W^T with W in the file's layout.
#include "kernels_internal.h"
#include "rope.h" // the pair turn, ROPE_MAX_HEAD_DIM

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// No parallel region for work one thread does (one token's norms, keys and activations; everything
// at --threads 1): the code calls it directly. An OpenMP region whose if clause is false, or which
// has one thread, still makes GCC's libgomp start and end a team, and the end's barrier makes a
// futex system call every time, a cost that a small model's decode pays hundreds of times a token
// (docs/speed.md, "No team for one thread", has the figures).

enum { GEMM_MIN_N = 4 }; // from this many tokens on, matrix x matrix

// ---------------------------------------------------------------------------------------------
// Threads, bf16, the instruction set

int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

unsigned short bf16_round(float x) { return round_bf16(x); }
float bf16_float(unsigned short b) { return widen_bf16(b); }

const char *kernels_isa(void) {
#if defined(USE_AVX512_VNNI) && defined(USE_AVX512_BF16)
    return "avx512-vnni-bf16"; // bf16 prefill by vdpbf16ps
#elif defined(USE_AVX512_VNNI)
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
// The reference product: one weight at a time, summed in double. Slow and obviously right; every
// fast product is tested against it (attention_ref, with the KV cache below, is the same for
// attention).

// Block b of a GGUF Q8_0 or Q4_0 matrix (ggml's block_q8_0, block_q4_0: an f16 scale d, then the
// block's values): where its values start, and d as a float in *d.
static const uint8_t *gguf_block(const Matrix *m, size_t b, float *d) {
    const uint8_t *block = (const uint8_t *)m->data + b * DTYPES[m->dtype].block_bytes;
    _Float16 h;
    memcpy(&h, block, sizeof h);
    *d = (float)h;
    return block + sizeof h;
}

// The block of QK_K of a K-quant matrix that holds row r's column c.
static const uint8_t *k_block(const Matrix *m, int r, int c) {
    return (const uint8_t *)m->data + ((size_t)r * (size_t)cols_stored(m->dtype, m->cols) + c) / QK_K *
                                          (size_t)DTYPES[m->dtype].block_bytes;
}

static float weight_at(const Matrix *m, int r, int c) {
    size_t cp = (size_t)cols_stored(m->dtype, m->cols);
    switch (m->dtype) {
    case DTYPE_F32:
        return ((const float *)m->data)[(size_t)r * cp + c];
    case DTYPE_F16:
        return (float)((const _Float16 *)m->data)[(size_t)r * cp + c];
    case DTYPE_BF16:
        return widen_bf16(((const uint16_t *)m->data)[(size_t)r * cp + c]);
    case DTYPE_BF16_R16:
        return widen_bf16(((const uint16_t *)m->data)[br16_at(r, c, m->cols)]);
    case DTYPE_F32_R16:
        return ((const float *)m->data)[r16f_at(r, c, m->cols)];
    case DTYPE_F16_R16:
        return (float)((const _Float16 *)m->data)[r16f_at(r, c, m->cols)];
    case DTYPE_Q8_0:
        return ((const int8_t *)m->data)[(size_t)r * cp + c] *
               ((const float *)m->scale)[((size_t)r * cp + c) / Q8_BLOCK];
    case DTYPE_Q8_0_R16: { // group r / 16, its block c / 32: 16 scales, then the quants + 128
        const uint8_t *block = (const uint8_t *)m->data + (size_t)(r / R16) * r16_group_bytes(m->cols) +
                               (size_t)(c / Q8_BLOCK) * R16_BLOCK_BYTES;
        return (block[R16 * sizeof(float) + r16_at(r % R16, c % Q8_BLOCK)] - 128) * ((const float *)block)[r % R16];
    }
    case DTYPE_Q4_0: {
        const size_t b = ((size_t)r * cp + c) / Q8_BLOCK;
        return q4_at((const uint8_t *)m->data + b * Q4_BLOCK_BYTES, c % Q4_BLOCK) *
               (float)((const _Float16 *)m->scale)[b];
    }
    case DTYPE_GGUF_Q4_0: { // 16 bytes of nibbles as q4_0's
        float d;
        const uint8_t *q = gguf_block(m, ((size_t)r * cp + c) / Q4_BLOCK, &d);
        return q4_at(q, c % Q4_BLOCK) * d;
    }
    case DTYPE_GGUF_Q8_0: { // the 32 q
        float d;
        const int8_t *q = (const int8_t *)gguf_block(m, ((size_t)r * cp + c) / Q8_BLOCK, &d);
        return q[c % Q8_BLOCK] * d;
    }
    case DTYPE_GGUF_Q4_K: // d sc q - dmin m (kernels_internal.h says where each lies)
    case DTYPE_GGUF_Q5_K: {
        const uint8_t *block = k_block(m, r, c);
        const int i = c % QK_K, q = m->dtype == DTYPE_GGUF_Q4_K ? q4k_at(block, i) : q5k_at(block, i);
        int sc, mn;
        k_scale_min(block + QK_SCALES, i / 32, &sc, &mn);
        return f16_at(block) * (float)sc * (float)q - f16_at(block + 2) * (float)mn;
    }
    case DTYPE_GGUF_Q6_K: { // d s (q - 32)
        const uint8_t *block = k_block(m, r, c);
        return f16_at(block + Q6K_D) * (float)q6k_scale(block, c % QK_K) * (float)q6k_at(block, c % QK_K);
    }
    }
    return 0; // not reached: the switch lists every type
}

void matrix_row(float *out, const Matrix *m, int r) {
    for (int c = 0; c < m->cols; c++)
        out[c] = weight_at(m, r, c);
}

// bf16 weights (bf16_r16, and the first layout too) multiply x rounded to bf16 (kernels.h): the fast
// products do, in decode and prefill.
void matmul_ref(float *out, const float *x, const Matrix *m, int n) {
    const int round_x = x_bf16(m->dtype);
    float *row = malloc((size_t)m->cols * sizeof *row); // a row read once for all n tokens (else per token)
    for (int r = 0; r < m->rows; r++) {
        if (row) matrix_row(row, m, r);
        for (int t = 0; t < n; t++) {
            double sum = 0;
            for (int c = 0; c < m->cols; c++) {
                const float xc = x[(size_t)t * m->cols + c];
                sum += (double)(row ? row[c] : weight_at(m, r, c)) * (round_x ? widen_bf16(round_bf16(xc)) : xc);
            }
            out[(size_t)t * m->rows + r] = (float)sum;
        }
    }
    free(row);
}

// ---------------------------------------------------------------------------------------------
// The grouped layouts from rows (matrix_to_r16, at load): group by group, each R16 rows of the
// matrix (past its end zero rows) written out in the order the grouped layout stores them.

// One group of q8_0 weights (each row's q, then all the scales) as q8_0_r16 (kernels_internal.h): per
// block of 32 columns the 16 rows' scales, then their q + 128, 4 columns of the 16 rows at a time.
// The scales' bits are copied as they are; a padding row is q = 0 (stored 128) and d = 0.
// GGUF's Q8_0 (gguf_q8_0) the same way, each block's f16 scale made float32.
static void group_to_q8_0_r16(uint8_t *group, const Matrix *m, int g) {
    const size_t cp = (size_t)cols_stored(m->dtype, m->cols), nb = cp / Q8_BLOCK;
    const int gguf = m->dtype == DTYPE_GGUF_Q8_0;
    for (size_t b = 0; b < nb; b++) {
        uint8_t *block = group + b * R16_BLOCK_BYTES, *q = block + R16 * sizeof(float);
        for (int i = 0; i < R16; i++) {
            const size_t r = (size_t)g * R16 + i;
            const int8_t *from = NULL;
            float d = 0;
            if (r < (size_t)m->rows && gguf) {
                from = (const int8_t *)gguf_block(m, r * nb + b, &d);
            } else if (r < (size_t)m->rows) {
                memcpy(&d, (const float *)m->scale + r * nb + b, sizeof d);
                from = (const int8_t *)m->data + r * cp + b * Q8_BLOCK;
            }
            memcpy(block + i * sizeof(float), &d, sizeof d);
            for (int j = 0; j < Q8_BLOCK; j++)
                q[r16_at(i, j)] = (uint8_t)((from ? from[j] : 0) + 128);
        }
    }
}

// One group of f16 or bf16 weights as bf16_r16 (kernels_internal.h): its rows into `rows`, the
// thread's scratch (R16, bf16_cols(cols)), f16 rounded by round_f16_bf16 (the vector version where
// there is one), bf16 copied, past the matrix's rows and columns zeros; then written out a pair of
// columns of the 16 rows at a time.
static void group_to_bf16_r16(uint32_t *words, uint16_t *rows, const Matrix *m, int g) {
    const int cp = bf16_cols(m->cols);
    for (int i = 0; i < R16 && g * R16 + i < m->rows; i++) {
        const uint16_t *from = (const uint16_t *)m->data + (size_t)(g * R16 + i) * m->cols;
        if (m->dtype == DTYPE_F16)
            round_f16_bf16(rows + (size_t)i * cp, from, (size_t)m->cols);
        else
            memcpy(rows + (size_t)i * cp, from, (size_t)m->cols * sizeof(uint16_t));
    }
    if ((g + 1) * R16 > m->rows) // the last group's padding rows
        memset(rows + (size_t)(m->rows - g * R16) * cp, 0, (size_t)((g + 1) * R16 - m->rows) * cp * 2);
    for (int p = 0; p < cp / 2; p++)
        for (int i = 0; i < R16; i++)
            memcpy(words++, rows + (size_t)i * cp + 2 * p, sizeof(uint32_t));
}

// One group of f32 or f16 weights as f32_r16 or f16_r16 (kernels_internal.h): the same bits,
// column after column of the 16 rows; past the matrix's rows zeros.
static void group_to_f32_r16(uint8_t *group, const Matrix *m, int g) {
    const size_t cols = (size_t)m->cols;
    for (size_t i = 0; i < R16; i++) {
        const size_t r = (size_t)g * R16 + i, real = r < (size_t)m->rows;
        for (size_t c = 0; c < cols; c++)
            if (m->dtype == DTYPE_F32)
                ((uint32_t *)group)[c * R16 + i] = real ? ((const uint32_t *)m->data)[r * cols + c] : 0;
            else
                ((uint16_t *)group)[c * R16 + i] = real ? ((const uint16_t *)m->data)[r * cols + c] : 0;
    }
}

int matrix_to_r16(Matrix *out, const Matrix *m, DType to, void *at, int threads) {
    const int bf16 = to == DTYPE_BF16_R16 && (m->dtype == DTYPE_F16 || m->dtype == DTYPE_BF16);
    const int same = (to == DTYPE_F32_R16 && m->dtype == DTYPE_F32) || (to == DTYPE_F16_R16 && m->dtype == DTYPE_F16);
    if (!bf16 && !same && !(to == DTYPE_Q8_0_R16 && (m->dtype == DTYPE_Q8_0 || m->dtype == DTYPE_GGUF_Q8_0)))
        return -1;
    const size_t gb = group_bytes(to, m->cols);
    const int groups = r16_groups(m->rows);
    int failed = 0;
    (void)threads; // for OpenMP
#pragma omp parallel num_threads(threads)
    {
        uint16_t *rows = bf16 ? calloc((size_t)R16 * bf16_cols(m->cols), sizeof(uint16_t)) : NULL; // bf16's scratch
        if (bf16 && !rows) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int g = 0; g < groups; g++) {
            uint8_t *group = (uint8_t *)at + (size_t)g * gb;
            if (same)
                group_to_f32_r16(group, m, g);
            else if (!bf16)
                group_to_q8_0_r16(group, m, g);
            else if (rows)
                group_to_bf16_r16((uint32_t *)group, rows, m, g);
        }
        free(rows);
    }
    if (failed) return -1;
    *out = (Matrix){at, NULL, m->rows, m->cols, to};
    return 0;
}

// GGUF's Q4_0 (gguf_q4_0: per block an f16 d, then 16 bytes) as q4_0 (model.h): the 16 bytes of every
// block one after the other, then at the next multiple of 64 bytes the d of every block. The nibbles
// are the same in both (value j in the low half of byte j, value j + 16 in the high half).
int matrix_q4_0_from_gguf(Matrix *out, const Matrix *m, void *at) {
    if (m->dtype != DTYPE_GGUF_Q4_0) return -1;
    const size_t blocks = (size_t)m->rows * (size_t)(cols_stored(m->dtype, m->cols) / Q4_BLOCK);
    uint8_t *q = at, *d = q + (blocks * Q4_BLOCK_BYTES + 63) / 64 * 64;
    for (size_t b = 0; b < blocks; b++) {
        const uint8_t *block = (const uint8_t *)m->data + b * DTYPES[DTYPE_GGUF_Q4_0].block_bytes;
        memcpy(d + 2 * b, block, 2);
        memcpy(q + b * Q4_BLOCK_BYTES, block + 2, Q4_BLOCK_BYTES);
    }
    *out = (Matrix){at, d, m->rows, m->cols, DTYPE_Q4_0};
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The KV cache: its layout, storing, the context shift, the keys as the math sees them, and
// attention_ref, which reads the cache only through those.
//
// Per layer and kv head: the keys in blocks of KV_RUN positions, each block transposed,
// (head_dim, KV_RUN), so that the scores of a query against a run of positions read consecutive
// memory, one block after the other (kernels_attention.c); the values (ctx, head_dim).
// ctx is rounded up to whole blocks (the stride), so the vector code always reads whole blocks,
// and KV_RUN floats of padding after the last one let it read whole runs of coordinates past a
// head's last one. Each of the two holds float32, IEEE half or q8_0 (key_type, value_type); a half
// is rounded to nearest when stored and widened exactly when read. q8_0 is ggml's Q8_0 (34 bytes
// per 32 values): each run of 32 coordinates of one key or value is stored as 32 int8 q and one
// half d = max |x| / 127 (q = x / d rounded), read as q * d; a block of keys is its (head_dim,
// KV_RUN) int8 q, then its (head_dim / 32, KV_RUN) halves d; a value is its head_dim q, then its
// head_dim / 32 d. Only these functions, attention (kernels_attention.c) and its vector tiles
// (kernels_x86.c) know the layout; kv_stride, kv_row_bytes, head_keys and head_values are in
// kernels_internal.h.

int kv_type_ok(DType t, int head_dim) {
    return t == DTYPE_F32 || t == DTYPE_F16 || (t == DTYPE_Q8_0 && head_dim % Q8_BLOCK == 0);
}

size_t kv_cache_bytes(DType t, int n_layers, int ctx, int n_kv_heads, int head_dim) {
    return kv_cache_bytes_ring(t, n_layers, ctx, 0, 0, n_kv_heads, head_dim);
}

size_t kv_cache_bytes_ring(DType t, int n_layers, int ctx, int n_sliding, int ring, int n_kv_heads, int head_dim) {
    if (n_layers < 1 || ctx < 1 || n_kv_heads < 1 || head_dim < 1 || !kv_type_ok(t, head_dim)) return 0;
    if (!ring) n_sliding = 0;
    if (n_sliding < 0 || n_sliding > n_layers || ring < 0 || ring % KV_RUN) return 0;
    const size_t slots = mul_or_zero((size_t)(n_layers - n_sliding), kv_stride(ctx)) + (size_t)n_sliding * ring;
    const size_t rows = mul_or_zero(slots, (size_t)n_kv_heads);
    const size_t n = mul_or_zero(rows, kv_row_bytes(t, head_dim));
    return n && n <= SIZE_MAX - KV_RUN * sizeof(float) ? n + KV_RUN * sizeof(float) : 0;
}

// A query block of max_batch at pos reads keys from the block holding pos - window + 1 (up to
// KV_RUN - 1 before it) to pos + max_batch - 1, and stores its own before it reads: that many slots,
// whole blocks, never overwrite a key some query of the block still reads.
int kv_ring_slots(int window, int max_batch, int ctx) {
    if (window < 1 || max_batch < 1 || ctx < 1) return 0;
    const size_t need = kv_stride((int)((size_t)window + max_batch + KV_RUN < (size_t)ctx ? window + max_batch + KV_RUN : ctx));
    return need < kv_stride(ctx) ? (int)need : 0;
}

// Where coordinate d of the key at position j sits among its head's keys, counted in floats (and
// in halves for f16 keys; rope.h's key tables use the same index).
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

// Coordinate d of the cached key (value) at position j of one kv head's keys (values), as float;
// and a whole key (value) x (hd floats) stored at position j.
static float key_get(const void *keys, DType t, int hd, int j, int d) {
    switch (t) {
    case DTYPE_F16:
        return (float)((const _Float16 *)keys)[key_at(hd, j, d)];
    case DTYPE_Q8_0:
        return *key_q(keys, hd, j, d) * (float)*key_scale(keys, hd, j, d);
    case DTYPE_F32:
        return ((const float *)keys)[key_at(hd, j, d)];
    case DTYPE_Q4_0: // weight types only, never a cache's (kv_type_ok)
    case DTYPE_BF16:
    case DTYPE_Q8_0_R16:
    case DTYPE_BF16_R16:
    case DTYPE_F32_R16:
    case DTYPE_F16_R16:
    case DTYPE_GGUF_Q8_0:
    case DTYPE_GGUF_Q4_0:
    case DTYPE_GGUF_Q4_K:
    case DTYPE_GGUF_Q5_K:
    case DTYPE_GGUF_Q6_K:
        break;
    }
    return 0;
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
    case DTYPE_F32:
        return ((const float *)row)[d];
    case DTYPE_Q4_0: // weight types only, never a cache's (kv_type_ok)
    case DTYPE_BF16:
    case DTYPE_Q8_0_R16:
    case DTYPE_BF16_R16:
    case DTYPE_F32_R16:
    case DTYPE_F16_R16:
    case DTYPE_GGUF_Q8_0:
    case DTYPE_GGUF_Q4_0:
    case DTYPE_GGUF_Q4_K:
    case DTYPE_GGUF_Q5_K:
    case DTYPE_GGUF_Q6_K:
        break;
    }
    return 0;
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

// A block of keys kt (hd, KV_RUN) of type t, f16 or q8_0, as floats, into out (hd * KV_RUN); a
// float32 block is read where it is (attention_scores_plain turns it straight from the cache).
void key_block_floats(float *out, const void *kt, DType t, int hd) {
    const size_t n = (size_t)hd * KV_RUN;
    if (t == DTYPE_F16) {
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
void value_rows_floats(float *out, const void *v, DType t, int hd, int n) {
    for (int j = 0; j < n; j++)
        for (int d = 0; d < hd; d++)
            out[(size_t)j * hd + d] = value_get(v, t, hd, j, d);
}

// One thread (no team, top of the file): a block's keys and values are a copy of a few rows a layer,
// not worth waking a team for.
void kv_store(KVCache *c, int layer, const float *k, const float *v, int pos, int n) {
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    for (int h = 0; h < c->n_kv_heads; h++)
        for (int i = 0; i < n; i++) {
            const size_t at = (size_t)i * kvd + (size_t)h * hd;
            const int slot = layer_slot(c, layer, pos + i);
            key_put(head_keys(c, layer, h), c->key_type, hd, slot, k + at);
            if (v) value_put(head_values(c, layer, h), c->value_type, hd, slot, v + at);
        }
}

void *kv_span(const KVCache *c, int layer, int h, int values, int n, size_t *bytes) {
    if (values) {
        *bytes = (size_t)n * kv_row_bytes(c->value_type, c->head_dim);
        return head_values(c, layer, h);
    }
    *bytes = kv_stride(n) * kv_row_bytes(c->key_type, c->head_dim);
    return head_keys(c, layer, h);
}

// Context shift: the keys and values of every layer move down; a key of a layer that rotates (all
// but the NoPE layers) is turned by -(from - to) theta_i on the way (cos, sin of that angle per pair; NULL: moved as they are).
// Ascending order never overwrites a position before it is read, since to < from. A q8_0 key is
// quantized anew after its turn (as it was stored: from floats).
// A ring (KVCache.ring) holds only the last `ring` positions, and after the shift needs only the last
// `ring` of the new ones: those are moved, through a copy (in a ring a destination slot can be the
// source slot of a later move), each key turned by the same arithmetic as in a full cache.
static void turn_back(float *k, const void *keys, DType t, int hd, int slot, const float *cos, const float *sin) {
    for (int p = 0; p < hd / 2; p++) { // RoPE's pair (x0, x1) turned back by the angle
        const float x0 = key_get(keys, t, hd, slot, 2 * p), x1 = key_get(keys, t, hd, slot, 2 * p + 1);
        const float cs = cos ? cos[p] : 1, sn = sin ? sin[p] : 0;
        k[2 * p] = rope_turn0(x0, x1, cs, -sn);
        k[2 * p + 1] = rope_turn1(x0, x1, cs, -sn);
    }
}

int kv_shift(KVCache *c, int from, int to, int n, const float *const *cos_by, const float *const *sin_by) {
    const int hd = c->head_dim;
    int failed = 0;
#pragma omp parallel for collapse(2)
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            void *keys = head_keys(c, l, h), *values = head_values(c, l, h);
            const float *cos = cos_by[l], *sin = sin_by[l];
            const size_t vrow = kv_row_bytes(c->value_type, hd);
            if (!layer_ring(c, l)) {
                for (int i = 0; i < n; i++) {
                    float k[ROPE_MAX_HEAD_DIM];
                    turn_back(k, keys, c->key_type, hd, from + i, cos, sin);
                    key_put(keys, c->key_type, hd, to + i, k);
                    memmove((char *)values + (size_t)(to + i) * vrow, (char *)values + (size_t)(from + i) * vrow, vrow);
                }
                continue;
            }
            const int skip = n > c->ring ? n - c->ring : 0, m = n - skip; // the last m moves
            float *k = malloc((size_t)m * hd * sizeof(float));
            char *v = malloc((size_t)m * vrow);
            if (!k || !v) {
#pragma omp atomic write
                failed = 1;
            }
            for (int i = 0; k && v && i < m; i++) {
                const int src = layer_slot(c, l, from + skip + i);
                turn_back(k + (size_t)i * hd, keys, c->key_type, hd, src, cos, sin);
                memcpy(v + (size_t)i * vrow, (char *)values + (size_t)src * vrow, vrow);
            }
            for (int i = 0; k && v && i < m; i++) {
                const int dst = layer_slot(c, l, to + skip + i);
                key_put(keys, c->key_type, hd, dst, k + (size_t)i * hd);
                memcpy((char *)values + (size_t)dst * vrow, v + (size_t)i * vrow, vrow);
            }
            free(k);
            free(v);
        }
    return failed ? -1 : 0;
}

float kv_key(const KVCache *c, int layer, int pos, int i) {
    return key_get(head_keys(c, layer, i / c->head_dim), c->key_type, c->head_dim, layer_slot(c, layer, pos),
                   i % c->head_dim);
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

float kv_key_seen(const KVCache *c, int layer, int pos, int i, int k) {
    return key_turned(c, layer_rope(c, layer).keys[k], layer, pos, i);
}

float kv_value(const KVCache *c, int layer, int pos, int i) {
    return value_get(head_values(c, layer, i / c->head_dim), c->value_type, c->head_dim, layer_slot(c, layer, pos),
                     i % c->head_dim);
}

// Attention as written in the paper, for every query i and head h: scores over the positions
// 0 .. pos+i (a sliding layer: the last `slide` of them), a softmax over them, the weighted sum of
// the values. Each key is scored against the query's turn and turned by the key table that RoPE
// says for the segment it lies in (rope.h, rope_segments): for most modes one segment, turn 0.
// The keys and values of each kv head are first read out of the cache as the math sees them
// (kv_key_seen under each key table the layer's segments use, kv_value) into plain arrays, so the
// three loops are only arithmetic.
void attention_ref(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos) {
    const int hd = c->head_dim, qd = c->n_heads * hd, group = c->n_heads / c->n_kv_heads, all = pos + n;
    const RopeAttention ra = layer_rope(c, layer);
    RopeSegment seg[ROPE_MAX_SEGMENTS];
    int used[ROPE_KEY_TABLES] = {0}; // the key tables any query here reads
    for (int s = 0, count = rope_segments(&ra, pos, all - 1, seg); s < count; s++)
        used[seg[s].key] = 1;
    double *p = malloc((size_t)all * sizeof(double));
    float *k[ROPE_KEY_TABLES], *v = malloc((size_t)all * hd * sizeof(float));
    int ok = p && v;
    for (int t = 0; t < ROPE_KEY_TABLES; t++)
        ok &= (k[t] = used[t] ? malloc((size_t)all * hd * sizeof(float)) : NULL) || !used[t];
    for (int h = 0; ok && h < c->n_heads; h++) {
        const int kvh = h / group;
        for (int j = 0; h % group == 0 && j < all; j++) // a new kv head
            for (int d = 0; d < hd; d++) {
                for (int t = 0; t < ROPE_KEY_TABLES; t++)
                    if (used[t]) k[t][(size_t)j * hd + d] = kv_key_seen(c, layer, j, kvh * hd + d, t);
                v[(size_t)j * hd + d] = kv_value(c, layer, j, kvh * hd + d);
            }
        for (int i = 0; i < n; i++) {
            const int len = pos + i + 1, first = layer_first(c, layer, pos + i);
            double max = -INFINITY, sum = 0;
            const int count = rope_segments(&ra, pos + i, pos + i, seg);
            for (int s = 0; s < count; s++) { // scores: cap(q_turn . k_j * scale)
                const float *qt = seg[s].turn ? q_far + rope_turn_at(ra.turns, qd, i, seg[s].turn) : q + (size_t)i * qd;
                for (int j = seg[s].from > first ? seg[s].from : first; j < seg[s].to; j++) {
                    const float *kj = k[seg[s].key] + (size_t)j * hd;
                    double sc = 0;
                    for (int d = 0; d < hd; d++)
                        sc += (double)qt[(size_t)h * hd + d] * kj[d];
                    p[j] = c->scale > 0 ? sc * c->scale : sc / sqrt((double)hd);
                    if (c->softcap > 0) p[j] = c->softcap * tanh(p[j] / c->softcap);
                    max = p[j] > max ? p[j] : max;
                }
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
    for (int t = 0; t < ROPE_KEY_TABLES; t++)
        free(k[t]);
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

void softmax(float *x, int n) {
    float max = x[0];
#pragma omp simd reduction(max : max)
    for (int i = 1; i < n; i++)
        max = x[i] > max ? x[i] : max;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        x[i] = exp_nonpositive(x[i] - max);
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


void quantize_row_q8_plain(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    for (int b = 0; b * Q8_BLOCK < cols; b++) {
        const int c0 = b * Q8_BLOCK, len = cols - c0 < Q8_BLOCK ? cols - c0 : Q8_BLOCK;
        quantize_block_q8(q + c0, d + b, sum + b, x + c0, len);
    }
}

// x for the K-quants (kernels_internal.h): one d per QK_K values, each value rounded as
// quantize_block_q8 rounds it (q8_inv, q8_round), and the sum of every K_SUM q; past cols, zeros.
void quantize_row_q8k_plain(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    for (int b = 0; b * QK_K < cols; b++) {
        const int c0 = b * QK_K, len = cols - c0 < QK_K ? cols - c0 : QK_K;
        float amax;
        const float inv = q8_inv(x + c0, len, &amax);
        d[b] = amax / 127;
        for (int g = 0; g < QK_K / K_SUM; g++) {
            int32_t s = 0;
            for (int i = g * K_SUM; i < (g + 1) * K_SUM; i++) {
                const int qi = q8_round(i < len ? x[c0 + i] * inv : 0);
                q[c0 + i] = (int8_t)qi;
                s += qi;
            }
            sum[b * (QK_K / K_SUM) + g] = s;
        }
    }
}

// The n rows of x (n, cols) into qx's q, d and sum, as type t's products read them.
static void quantize_rows_q8(const QuantizedRows *qx, DType t, const float *x, int n, int cols, int threads) {
    const size_t cp = (size_t)cols_stored(t, cols), nd = x_scales(t, cp), ns = x_sums(t, cp);
    QuantizeRow *row = k_quant(t) ? quantize_row_q8k : quantize_row_q8;
    if (n == 1 || threads == 1) // one token or one thread: no team (top of the file)
        for (int i = 0; i < n; i++)
            row(qx->q + i * cp, qx->d + i * nd, qx->sum + i * ns, x + (size_t)i * cols, cols);
    else
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int i = 0; i < n; i++)
            row(qx->q + i * cp, qx->d + i * nd, qx->sum + i * ns, x + (size_t)i * cols, cols);
}

// bf16 weights: the n rows of x (n, cols) rounded to bf16 into h (n, bf16_cols(cols)), each row's
// padding zero (the vector code reads whole steps of 32). Decode and prefill alike: a token's
// products then see the same numbers in a prompt or alone (kernels_internal.h, bf16's order).
static void round_row_bf16(uint16_t *h, const float *x, int cols) {
    for (int c = 0; c < cols; c++)
        h[c] = round_bf16(x[c]);
    for (int c = cols; c < bf16_cols(cols); c++)
        h[c] = 0;
}
static void round_rows_bf16(uint16_t *h, const float *x, int n, int cols, int threads) {
    const size_t ld = (size_t)bf16_cols(cols);
    if (n == 1 || threads == 1) // one token or one thread: no team (top of the file)
        for (int t = 0; t < n; t++)
            round_row_bf16(h + t * ld, x + (size_t)t * cols, cols);
    else
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int t = 0; t < n; t++)
            round_row_bf16(h + t * ld, x + (size_t)t * cols, cols);
}

// ---------------------------------------------------------------------------------------------
// The workspace: one block of memory set up with the run, laid out anew for each product by
// ws_layout, with which workspace_bytes also sizes it.

typedef enum { WS_DECODE, WS_GEMM_F32, WS_GEMM_Q8, WS_GEMM_BF16, WS_GEMM_K, WS_PATHS } WsPath;

// A piece of `bytes` at *at, which moves past it to the next multiple of 64.
static size_t piece(size_t *at, size_t bytes) {
    const size_t p = *at;
    *at += (bytes + 63) / 64 * 64;
    return p;
}

// The pieces of one product of n tokens with inputs of `cols` columns on `threads` threads; returns
// the bytes of the whole. Every piece grows with n, cols and threads, so the layout at the largest
// of each holds every smaller product's.
static size_t ws_layout(WsLayout *l, WsPath path, size_t n, size_t cols, size_t threads) {
    const size_t cp = (cols + Q8_BLOCK - 1) / Q8_BLOCK * Q8_BLOCK, nb = cp / Q8_BLOCK;
    const size_t kc = cp < KC_MAX ? cp : KC_MAX; // the widest chunk of columns prefill packs
    const size_t ck = (cols + QK_K - 1) / QK_K * QK_K; // the K-quants' cp, whose x has a sum per K_SUM
    size_t at = 0, mine = 0;                           // the shared pieces; one thread's
    *l = (WsLayout){0};
    if (path == WS_DECODE || path == WS_GEMM_Q8 || path == WS_GEMM_K) { // x quantized (x_scales, x_sums: the most of any type)
        l->q = piece(&at, n * ck);
        l->d = piece(&at, n * nb * sizeof(float));
        l->sum = piece(&at, n * (ck / K_SUM) * sizeof(int32_t));
    }
    if (path == WS_DECODE || path == WS_GEMM_BF16) // x rounded to bf16, rows padded to whole steps
        l->h = piece(&at, n * (size_t)bf16_cols((int)cols) * sizeof(uint16_t));
    if (path == WS_DECODE) {
        l->prep = piece(&at, n * q4_prep_bytes(cp));
        l->runs = piece(&at, threads * sizeof(PieceRun));
    } else if (path == WS_GEMM_F32 || path == WS_GEMM_BF16) { // bf16 over its padded columns (AVX-512: unused)
        l->xp = piece(&at, (n + MR - 1) / MR * MR * (size_t)bf16_cols((int)cols) * sizeof(float)); // (tiles, cols, MR)
        l->wp = piece(&mine, kc * NR * sizeof(float));                     // (kc, NR)
    } else if (path == WS_GEMM_Q8) {
        const size_t tokens = (n + MR_Q8 - 1) / MR_Q8 * MR_Q8;    // whole tiles
        l->xp = piece(&at, tokens * cp);                          // (tiles, cp/4, MR_Q8, 4)
        l->xd = piece(&at, tokens * nb * sizeof(float));          // (tiles, cp/32, MR_Q8)
        l->xs = piece(&at, tokens * nb * sizeof(int32_t));        // (tiles, cp/32, MR_Q8)
        l->wp = piece(&mine, kc * NR);                            // (kc/4, NR, 4)
        l->wd = piece(&mine, kc / Q8_BLOCK * NR * sizeof(float)); // (kc/32, NR)
        l->stage = piece(&mine, kc * NR);                         // (NR, kc)
    } else if (path == WS_GEMM_K) {
        const size_t tokens = (n + MR_Q8 - 1) / MR_Q8 * MR_Q8, kb = KC_MAX / QK_K;
        l->xp = piece(&at, tokens * ck);                           // (tiles, cp/4, MR_Q8, 4)
        l->xd = piece(&at, tokens * (ck / QK_K) * sizeof(float));  // (tiles, cp/QK_K, MR_Q8)
        l->xs = piece(&at, tokens * (ck / K_SUM) * sizeof(int32_t)); // (tiles, cp/K_SUM, MR_Q8)
        l->wp = piece(&mine, KC_MAX * NR);                         // (kc/4, NR, 4)
        l->stage = piece(&mine, KC_MAX * NR);                      // (NR, kc)
        // scales, mins, d and dmin, the tile's sums (gemm_k carves them for the widest chunk)
        l->kx = piece(&mine, kb * NR * (QK_K / 16 + QK_K / 32) * sizeof(int32_t) + 2 * kb * NR * sizeof(float) +
                                 kb * MR_Q8 * NR * sizeof(int32_t));
    }
    l->wp += at, l->wd += at, l->stage += at, l->kx += at; // thread 0's come after the shared pieces
    l->each = mine;
    return l->bytes = at + threads * mine;
}

// The largest layout of the four products. Within the limits checked first (the model loader's
// and the command line's are tighter) every piece is below 2^40.
size_t workspace_bytes(int max_n, int max_cols, int n_threads) {
    if (max_n < 1 || max_n > 1 << 16 || max_cols < 1 || max_cols > 1 << 20 || n_threads < 1 || n_threads > 1 << 12)
        return 0;
    size_t most = 0;
    for (int p = 0; p < WS_PATHS; p++) {
        WsLayout l;
        const size_t bytes = ws_layout(&l, (WsPath)p, (size_t)max_n, (size_t)max_cols, (size_t)n_threads);
        most = bytes > most ? bytes : most;
    }
    return most;
}

// ---------------------------------------------------------------------------------------------
// The products the forward pass calls

int matmul(Workspace *ws, float *out, const float *x, const Matrix *m, int n) {
    return matmul_many(ws, &out, x, &m, 1, n);
}

// Which product runs n tokens of a type's weights: decode below GEMM_MIN_N tokens, else the prefill
// of what the type multiplies (dtype.h).
static WsPath product_path(DType t, int n) {
    if (n < GEMM_MIN_N) return WS_DECODE;
    if (k_quant(t)) return WS_GEMM_K; // x quantized in blocks of QK_K (kernels_internal.h)
    switch (DTYPES[t].x) {
    case X_FLOAT:
        return WS_GEMM_F32;
    case X_Q8:
        return WS_GEMM_Q8;
    case X_BF16:
        return WS_GEMM_BF16;
    }
    return WS_GEMM_F32; // not reached: the switch lists every XForm
}

int matmul_many(Workspace *ws, float *const *out, const float *x, const Matrix *const *m, int count, int n) {
    for (int i = 0; i < count; i++) {
        if (n < 1 || n > ws->max_n || m[i]->cols > ws->max_cols) return -1; // the workspace was sized for less
        if (DTYPES[m[i]->dtype].runs_as != m[i]->dtype) return -1; // a file type only: copied at load (dtype.h)
    }
    int same = 1; // one parallel loop needs one input width and one weight type
    for (int i = 1; i < count; i++)
        same &= m[i]->cols == m[0]->cols && m[i]->dtype == m[0]->dtype;
    if (!same) {
        for (int i = 0; i < count; i++)
            if (matmul(ws, out[i], x, m[i], n)) return -1;
        return 0;
    }
    const int cols = m[0]->cols, threads = ws->n_threads;
    const DType t = m[0]->dtype;
    const WsPath path = product_path(t, n);
    WsLayout l;
    if (ws_layout(&l, path, (size_t)n, (size_t)cols, (size_t)threads) > ws->bytes) return -1; // as above
    unsigned char *b = ws->base;
    const QuantizedRows qx = {(int8_t *)(b + l.q), (float *)(b + l.d), (int32_t *)(b + l.sum), NULL,
                              (uint16_t *)(b + l.h)};
    if (x_quantized(t)) quantize_rows_q8(&qx, t, x, n, cols, threads); // once for every product that reads x
    if (x_bf16(t)) round_rows_bf16(qx.h, x, n, cols, threads);
    if (path == WS_DECODE)
        matvec(b, &l, threads, out, x, x_quantized(t) || x_bf16(t) ? &qx : NULL, m, count, n);
    else if (path == WS_GEMM_Q8)
        gemm_q8(b, &l, threads, out, &qx, m, count, n);
    else if (path == WS_GEMM_K)
        gemm_k(b, &l, threads, out, &qx, m, count, n);
#ifdef USE_AVX512
    else if (path == WS_GEMM_BF16)
        gemm_bf16(b, &l, threads, out, qx.h, m, count, n);
#endif
    else // f32_r16, f16_r16; bf16_r16 without AVX-512
        gemm_f32(b, &l, threads, out, x, qx.h, m, count, n);
    return 0;
}
