// kernels.c - matrix x vector and matrix x matrix products over f32, f16 and q8_0 weights.
//
// Layout: W is (rows, cols) row-major; a block of n activations x is (n, cols); the product
// out = x @ W^T is (n, rows). Every output element is computed start to end by one thread in an
// order that depends only on the shapes, so the result does not depend on the number of threads.
//
// Two regimes, two algorithms (README.md, "Why it is fast", says why, with numbers):
//   decode, n < GEMM_MIN_N tokens: matrix x vector. Each weight is used once per token, so the
//     time is the time to stream the weights from memory; the kernels read each row start to end
//     with wide loads, OpenMP splits the rows, and the arithmetic hides under the memory traffic.
//   prefill, n >= GEMM_MIN_N: matrix x matrix, blocked as in Goto & van de Geijn, "Anatomy of
//     high-performance matrix multiplication" (ACM TOMS 2008) and BLIS (Van Zee & van de Geijn,
//     ACM TOMS 2015): a panel of NR weight rows is packed once into a layout the microkernel reads
//     with one vector load per column, and is then reused from cache by every token; the
//     microkernel keeps an MR x NR block of outputs in registers, so each loaded weight feeds MR
//     fused multiply-adds. Here the time is arithmetic, not memory.
// What this is not: a BLAS. Only out = x @ W^T with W in the file's layout, and one level of
// cache blocking (the K dimension, so a chunk of activations stays in L2).
//
// Instruction sets: the inner loops are written with AVX-512 intrinsics, and AVX2 ones for the
// f32 microkernel and the q8_0 dot product, where the compiler says they exist (__AVX512F__,
// __AVX512VNNI__, __AVX2__, ...); every such block has a plain C version beside it that computes
// the same thing and is what other machines (aarch64, older x86-64) compile. tests/test_kernels.c
// checks every path against matmul_ref.
// Also here: the two inner loops of attention, which have the same concern (keep sums in
// registers, stream the cache once).
#include "kernels.h"

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
#if !defined(KERNELS_PLAIN) && defined(__AVX512F__)
#define USE_AVX512 1 // 512-bit vectors, masked loads and stores (Skylake-SP, 2017, and later)
#endif
#if defined(USE_AVX512) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define USE_AVX512_VNNI 1 // vpdpbusd: 64 byte products summed into 16 int32 lanes (Cascade Lake, 2019)
#endif
#if defined(USE_AVX2) || defined(USE_AVX512)
#include <immintrin.h>
#endif
#ifdef USE_AVX512
// The mask of the first k of 16 lanes (none for k <= 0, all for k >= 16): for the ragged ends.
static inline __mmask16 first_lanes(int k) {
    return k >= 16 ? 0xFFFF : k <= 0 ? 0 : (__mmask16)((1u << k) - 1);
}
#endif

// ---------------------------------------------------------------------------------------------
// Types and sizes

static const char *const DTYPE_NAMES[DTYPE_COUNT] = {"f32", "f16", "q8_0"};

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

int matrix_cols_stored(DType t, int cols) {
    return t == DTYPE_Q8_0 ? (cols + Q8_BLOCK - 1) / Q8_BLOCK * Q8_BLOCK : cols;
}

static size_t mul_or_zero(size_t a, size_t b) { return (b && a > SIZE_MAX / b) ? 0 : a * b; }

size_t matrix_data_bytes(DType t, int rows, int cols) {
    static const size_t elem[DTYPE_COUNT] = {4, 2, 1};
    if (rows <= 0 || cols <= 0 || t < 0 || t >= DTYPE_COUNT) return 0;
    return mul_or_zero(mul_or_zero((size_t)rows, (size_t)matrix_cols_stored(t, cols)), elem[t]);
}

size_t matrix_scale_bytes(DType t, int rows, int cols) {
    if (t != DTYPE_Q8_0) return 0;
    if (rows <= 0 || cols <= 0) return 0;
    return mul_or_zero((size_t)rows, (size_t)matrix_cols_stored(t, cols) / Q8_BLOCK * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Reference kernels: one weight at a time, converted to float. Slow and obviously right.

static float weight_at(const Matrix *m, int r, int c) {
    size_t cp = (size_t)matrix_cols_stored(m->dtype, m->cols);
    switch (m->dtype) {
    case DTYPE_F32: return ((const float *)m->data)[(size_t)r * cp + c];
    case DTYPE_F16: return (float)((const _Float16 *)m->data)[(size_t)r * cp + c];
    case DTYPE_Q8_0:
        return ((const int8_t *)m->data)[(size_t)r * cp + c] * m->scale[((size_t)r * cp + c) / Q8_BLOCK];
    default: return 0;
    }
}

void matrix_row(float *out, const Matrix *m, int r) {
    for (int c = 0; c < m->cols; c++) out[c] = weight_at(m, r, c);
}

void matmul_ref(float *out, const float *x, const Matrix *m, int n) {
    for (int t = 0; t < n; t++) {
        for (int r = 0; r < m->rows; r++) {
            double sum = 0;
            for (int c = 0; c < m->cols; c++) sum += (double)weight_at(m, r, c) * x[(size_t)t * m->cols + c];
            out[(size_t)t * m->rows + r] = (float)sum;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers

// malloc aligned to a cache line (and to a 64-byte vector), size rounded up as aligned_alloc wants.
static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

// ---------------------------------------------------------------------------------------------
// q8_0 activations: each row of x is cut into blocks of 32 and stored like the weights,
// d = max|x| / 127 and q = round(x / d) in [-127, 127] (ggml's quantize_row_q8_0), so that a
// block's dot product is an exact integer sum:  sum_i w_i x_i ~ dw * dx * sum_i qw_i qx_i.
// The activation side loses about 1/254 of each block's largest value per element; test_quant.py
// measures what that does to perplexity.

typedef struct {
    int8_t *q;    // (n, cp) cp = cols rounded up to 32, zero-padded
    float *d;     // (n, cp/32) scales
    int32_t *sum; // (n, cp/32) sum of the 32 q of each block (for the unsigned trick in gemm_q8)
} QuantizedRows;

static void quantize_row_q8(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    const int cp = matrix_cols_stored(DTYPE_Q8_0, cols);
    for (int b = 0; b < cp / Q8_BLOCK; b++) {
        const int c0 = b * Q8_BLOCK, len = cols - c0 < Q8_BLOCK ? cols - c0 : Q8_BLOCK;
        float amax = 0;
        for (int i = 0; i < len; i++) {
            float a = x[c0 + i] < 0 ? -x[c0 + i] : x[c0 + i];
            amax = a > amax ? a : amax;
        }
        // A block below the smallest normal float counts as zero (127 / amax would be inf there).
        const float scale = amax / 127, inv = amax >= 0x1p-126f ? 127 / amax : 0;
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++) {
            float v = i < len ? x[c0 + i] * inv : 0;
            // NaN (from a damaged model) becomes -127: converting it to int would be undefined.
            v = v > -127.0f ? (v < 127.0f ? v : 127.0f) : -127.0f;
            int qi = (int)(v < 0 ? v - 0.5f : v + 0.5f); // round half away from zero, like roundf
            q[c0 + i] = (int8_t)qi;
            s += qi;
        }
        d[b] = scale;
        sum[b] = s;
    }
}

static int quantize_rows_q8(QuantizedRows *qr, const float *x, int n, int cols) {
    const size_t cp = (size_t)matrix_cols_stored(DTYPE_Q8_0, cols), nb = cp / Q8_BLOCK;
    qr->q = alloc64((size_t)n * cp);
    qr->d = alloc64((size_t)n * nb * sizeof(float));
    qr->sum = alloc64((size_t)n * nb * sizeof(int32_t));
    if (!qr->q || !qr->d || !qr->sum) return -1;
#pragma omp parallel for schedule(static) if (n > 1)
    for (int t = 0; t < n; t++)
        quantize_row_q8(qr->q + t * cp, qr->d + t * nb, qr->sum + t * nb, x + (size_t)t * cols, cols);
    return 0;
}

static void quantized_rows_free(QuantizedRows *qr) {
    free(qr->q);
    free(qr->d);
    free(qr->sum);
}

// ---------------------------------------------------------------------------------------------
// Decode: dot products of one weight row with one activation row (matrix x vector).
// Four independent accumulators per kernel so the adds do not wait on each other; the loads are
// the bottleneck and the hardware prefetcher sees one sequential stream per row.

// One core alone does not keep enough cache misses in flight to stream at the memory's speed when
// there is more work per byte (f16 conversion, q8_0 integer dots): asking for the weights about a
// kilobyte or two ahead of the loads brought f16 from ~6.5 to ~7.5 GB/s and q8_0 from ~5.5 to
// ~8.5 GB/s on one core of the development machine (bench/matmul_bench 32000 4096 1). f32, with
// the least work per byte, gained nothing measurable.
#define AHEAD_F16 2048 // bytes
#define AHEAD_Q8 1024

// Not inlined: one compiled copy of each, so every caller sums in the same order (a compiler may
// vectorize an inlined plain C loop differently in each place it lands).
#define ONE_COPY __attribute__((noinline))

static ONE_COPY float dot_f32(const float *w, const float *x, int n) {
#ifdef USE_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) { // the last n - i < 16 columns, through a mask
        const __mmask16 tail = first_lanes(n - i);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + i), _mm512_maskz_loadu_ps(tail, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += w[i] * x[i];
    return sum;
#endif
}

// f16 weights, f32 arithmetic: each half is widened exactly (vcvtph2ps) before the multiply-add.
static ONE_COPY float dot_f16(const _Float16 *w, const float *x, int n) {
#ifdef USE_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(w + i) + AHEAD_F16, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + i) + AHEAD_F16 + 64, _MM_HINT_T0);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 16))), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 32))), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i + 48))), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16)
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + i))), _mm512_loadu_ps(x + i), a0);
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) sum += (float)w[i] * x[i];
    return sum;
#else
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += (float)w[i] * x[i];
    return sum;
#endif
}

// q8_0 weights . q8_0 activations over nb blocks: sum_b dw_b dx_b (sum_i qw_i qx_i).
// x86: the integer dot of a block is 32 byte products summed in 8 lanes. The multiply instruction
// (vpdpbusd, or vpmaddubsw without VNNI) takes one unsigned and one signed operand, so it is fed
// |qx| and qw * sign(qx): the same products (llama.cpp's ggml_vec_dot_q8_0_q8_0 does this).
#if defined(USE_AVX2) || defined(USE_AVX512_VNNI)
static inline __m256i dot_i8_block(__m256i w, __m256i x) {
    const __m256i ax = _mm256_sign_epi8(x, x), sw = _mm256_sign_epi8(w, x);
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sw);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sw);
#else // pairs of products fit int16: 2 * 127 * 127 < 32767
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw), _mm256_set1_epi16(1));
#endif
}
#endif

static ONE_COPY float dot_q8(const int8_t *w, const float *dw, const int8_t *x, const float *dx, int nb) {
#ifdef USE_AVX512_VNNI
    // Two blocks per 64-byte vector: lanes 0-7 hold block b's sums, lanes 8-15 block b+1's, and
    // the scale vector repeats dw dx of each block over its 8 lanes. AVX-512 has no byte sign
    // instruction; |x| is vpabsb and w * sign(x) a masked negation.
    const __m512i first = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(2));
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int b = 0;
    for (; b + 4 <= nb; b += 4) {
        _mm_prefetch((const char *)(w + b * 32) + AHEAD_Q8, _MM_HINT_T0);
        _mm_prefetch((const char *)(w + b * 32) + AHEAD_Q8 + 64, _MM_HINT_T0);
        const __m512 d = _mm512_castps128_ps512(_mm_mul_ps(_mm_loadu_ps(dw + b), _mm_loadu_ps(dx + b)));
        const __m512i x0 = _mm512_loadu_si512(x + b * 32), x1 = _mm512_loadu_si512(x + b * 32 + 64);
        const __m512i w0 = _mm512_loadu_si512(w + b * 32), w1 = _mm512_loadu_si512(w + b * 32 + 64);
        const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x0),
                                               _mm512_mask_sub_epi8(w0, _mm512_movepi8_mask(x0), _mm512_setzero_si512(), w0));
        const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x1),
                                               _mm512_mask_sub_epi8(w1, _mm512_movepi8_mask(x1), _mm512_setzero_si512(), w1));
        a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(first, d), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(second, d), a1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; b < nb; b++) { // the last blocks, 0 to 3 of them
        const __m256i p = dot_i8_block(_mm256_loadu_si256((const __m256i *)(w + b * 32)),
                                       _mm256_loadu_si256((const __m256i *)(x + b * 32)));
        sum += (float)_mm512_reduce_add_epi32(_mm512_zextsi256_si512(p)) * (dw[b] * dx[b]);
    }
    return sum;
#elif defined(USE_AVX2)
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int b = 0;
    for (; b + 2 <= nb; b += 2) {
        _mm_prefetch((const char *)(w + b * 32) + AHEAD_Q8, _MM_HINT_T0);
        __m256i p0 = dot_i8_block(_mm256_loadu_si256((const __m256i *)(w + b * 32)),
                                  _mm256_loadu_si256((const __m256i *)(x + b * 32)));
        __m256i p1 = dot_i8_block(_mm256_loadu_si256((const __m256i *)(w + b * 32 + 32)),
                                  _mm256_loadu_si256((const __m256i *)(x + b * 32 + 32)));
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dw[b] * dx[b]), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(dw[b + 1] * dx[b + 1]), a1);
    }
    if (b < nb) {
        __m256i p0 = dot_i8_block(_mm256_loadu_si256((const __m256i *)(w + b * 32)),
                                  _mm256_loadu_si256((const __m256i *)(x + b * 32)));
        a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dw[b] * dx[b]), a0);
    }
    __m256 a = _mm256_add_ps(a0, a1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
#else
    float sum = 0;
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++) s += w[b * 32 + i] * x[b * 32 + i];
        sum += (float)s * (dw[b] * dx[b]);
    }
    return sum;
#endif
}

// out[i] (n, m[i]->rows) = x (n, cols) @ m[i]^T for the `count` matrices, which share cols and
// dtype: their rows are handed out together, 16 at a time, in one parallel loop.
static void matvec(float *const *out, const float *x, const Matrix *const *m, int count, int n) {
    const int cols = m[0]->cols;
    const DType dtype = m[0]->dtype;
    const size_t cp = (size_t)matrix_cols_stored(dtype, cols), nb = cp / Q8_BLOCK;
    int total = 0;
    for (int i = 0; i < count; i++) total += m[i]->rows;
    QuantizedRows qx = {0};
    if (dtype == DTYPE_Q8_0 && quantize_rows_q8(&qx, x, n, cols)) {
        quantized_rows_free(&qx);
        for (int i = 0; i < count; i++) matmul_ref(out[i], x, m[i], n); // out of memory for a few KB
        return;
    }
#pragma omp parallel for schedule(dynamic, 16)
    for (int row = 0; row < total; row++) {
        int i = 0, r = row; // row `row` of the stack is row r of matrix i
        while (r >= m[i]->rows) r -= m[i++]->rows;
        const Matrix *mi = m[i];
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * cols;
            float v;
            switch (dtype) {
            case DTYPE_F32: v = dot_f32((const float *)mi->data + r * cp, xt, cols); break;
            case DTYPE_F16: v = dot_f16((const _Float16 *)mi->data + r * cp, xt, cols); break;
            default:
                v = dot_q8((const int8_t *)mi->data + r * cp, mi->scale + r * nb, qx.q + t * cp, qx.d + t * nb,
                           (int)nb);
                break;
            }
            out[i][(size_t)t * mi->rows + r] = v;
        }
    }
    quantized_rows_free(&qx);
}

// ---------------------------------------------------------------------------------------------
// Prefill: blocked matrix x matrix.
//
//   pack x into tiles of MR tokens                        xp (tiles, cols, MR), once, shared
//   for each group of a few panels of NR weight rows, handed to whichever thread is free
//     for each chunk of KC columns k0 ..                  (that chunk of xp stays in L2)
//       for each panel of the group
//         pack W[panel rows, k0 : k0+KC]                  wp (KC, NR): NR rows side by side
//         for each tile of MR tokens
//           out[tile, panel] (+)= xp[tile, k0 : k0+KC] @ wp   the microkernel, MR x NR in registers
//
// A group of panels is one thread's work from start to end, so every output is summed in the same
// order whatever the number of threads. Groups go to whichever thread is free (schedule dynamic)
// and nothing waits between them: on a busy machine a thread that lost its core delays the others
// by one group, not by its whole share. Padding: a partial tile is packed with zero tokens, a
// partial panel with zero rows; only real outputs are stored.

enum {
    GEMM_MIN_N = 4,      // from this many tokens on, matrix x matrix
    NR = 32,             // weight rows per panel: two 16-float vectors
    MR = 12,             // tokens per tile: MR * 2 = 24 accumulator vectors of the 32 a core has
    MR_Q8 = 6,           // q8_0 tiles: 12 integer + 12 float accumulators
    KC_MIN = 256,        // columns per chunk, at least and at most
    KC_MAX = 4096,
    X_CHUNK = 512 << 10, // bytes of packed activations per chunk: a quarter of a 2 MB L2
    PANEL_GROUP = 4,     // panels per work item, at most
};

// Columns per chunk: the packed activations of all n tokens in about X_CHUNK bytes, a multiple of 32.
static int chunk_cols(int n, int cols, size_t elem) {
    long kc = X_CHUNK / ((long)n * (long)elem);
    kc = kc < KC_MIN ? KC_MIN : kc > KC_MAX ? KC_MAX : kc;
    kc = kc / Q8_BLOCK * Q8_BLOCK;
    return kc < cols ? (int)kc : cols;
}

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

// Panels per work item: several, so a chunk of packed activations read into L2 serves them all,
// but items enough for every thread to get a few (the last ones finish close together).
static int panel_group(int panels) {
    int g = panels / (4 * max_threads());
    return g < 1 ? 1 : g > PANEL_GROUP ? PANEL_GROUP : g;
}

// xp (cols, MR) = x[t0 : t0+MR, :] transposed: column k of the tile is MR consecutive floats, the
// values one broadcast each in the microkernel. Tokens past n are zero.
static void pack_x_f32(float *xp, const float *x, int cols, int n, int t0) {
    for (int t = 0; t < MR; t++) {
        if (t0 + t < n) {
            const float *src = x + (size_t)(t0 + t) * cols;
            for (int k = 0; k < cols; k++) xp[(size_t)k * MR + t] = src[k];
        } else {
            for (int k = 0; k < cols; k++) xp[(size_t)k * MR + t] = 0;
        }
    }
}

#ifdef USE_AVX512
// Transpose a 16 x 16 block of 32-bit values held in 16 vectors, in four rounds of shuffles that
// exchange ever larger pieces: single values, pairs, 4-value quarters, 8-value halves.
static inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}
#endif

// How far ahead (in values) packing asks for the rest of each weight row: the rows of a panel are
// read 64 bytes at a time from 16 rows side by side, which the hardware prefetcher alone does not
// keep up with.
#define PACK_AHEAD 128

// wp (kc, NR) = W[r0 : r0+NR, k0 : k0+kc] transposed and widened to f32; rows past the end are 0.
static void pack_w_f32(float *wp, const Matrix *m, int r0, int k0, int kc) {
    const size_t cols = (size_t)m->cols;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR;
    int k = 0;
#ifdef USE_AVX512
    for (; k + 16 <= kc; k += 16) // 16 columns of 16 rows at a time: load rows, transpose, store columns
        for (int j0 = 0; j0 < NR; j0 += 16) {
            __m512 v[16];
            for (int j = 0; j < 16; j++) {
                const size_t at = (size_t)(r0 + j0 + j) * cols + k0 + k;
                if (j0 + j >= nr) {
                    v[j] = _mm512_setzero_ps();
                } else if (m->dtype == DTYPE_F32) {
                    _mm_prefetch((const char *)((const float *)m->data + at + PACK_AHEAD), _MM_HINT_T0);
                    v[j] = _mm512_loadu_ps((const float *)m->data + at);
                } else {
                    if (k % 32 == 0) _mm_prefetch((const char *)((const _Float16 *)m->data + at + PACK_AHEAD), _MM_HINT_T0);
                    v[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const _Float16 *)m->data + at)));
                }
            }
            transpose16(v);
            for (int j = 0; j < 16; j++) _mm512_store_ps(wp + (size_t)(k + j) * NR + j0, v[j]);
        }
#endif
    for (int j = 0; j < NR; j++) { // the columns left over (all of them without AVX-512)
        const size_t r = (size_t)(r0 + j);
        if (j >= nr) {
            for (int kk = k; kk < kc; kk++) wp[kk * NR + j] = 0;
        } else if (m->dtype == DTYPE_F32) {
            const float *src = (const float *)m->data + r * cols + k0;
            for (int kk = k; kk < kc; kk++) wp[kk * NR + j] = src[kk];
        } else {
            const _Float16 *src = (const _Float16 *)m->data + r * cols + k0;
            for (int kk = k; kk < kc; kk++) wp[kk * NR + j] = (float)src[kk];
        }
    }
}

// out[t, j] (+)= sum_k xp[k, t] * wp[k, j] for t < nt tokens, j < nr rows; out rows are ldo apart.
// Each output is one fused multiply-add chain over k in order, started from the value already in
// out when accumulating: the same float result however the columns were cut into chunks.
static void kernel_f32(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc,
                       int accumulate) {
#if defined(USE_AVX512)
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16);
    __m512 c[MR][2];
    for (int t = 0; t < MR; t++) {
        const int load = accumulate && t < nt;
        c[t][0] = load ? _mm512_maskz_loadu_ps(m0, out + t * ldo) : _mm512_setzero_ps();
        c[t][1] = load ? _mm512_maskz_loadu_ps(m1, out + t * ldo + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        const __m512 w0 = _mm512_load_ps(wp + k * NR), w1 = _mm512_load_ps(wp + k * NR + 16);
        for (int t = 0; t < MR; t++) {
            const __m512 a = _mm512_set1_ps(xp[k * MR + t]);
            c[t][0] = _mm512_fmadd_ps(a, w0, c[t][0]);
            c[t][1] = _mm512_fmadd_ps(a, w1, c[t][1]);
        }
    }
    for (int t = 0; t < nt; t++) {
        _mm512_mask_storeu_ps(out + t * ldo, m0, c[t][0]);
        _mm512_mask_storeu_ps(out + t * ldo + 16, m1, c[t][1]);
    }
#elif defined(USE_AVX2)
    // 16 registers of 8 floats: the tile is done as 2 x 2 blocks of 6 tokens x 16 rows, each with
    // 12 accumulators, 2 weight vectors and a broadcast (the classic Haswell 6 x 16 kernel).
    for (int t0 = 0; t0 < MR; t0 += 6)
        for (int j0 = 0; j0 < NR; j0 += 16) {
            if (t0 >= nt || j0 >= nr) continue;
            __m256 c[6][2];
            for (int t = 0; t < 6; t++)
                for (int h = 0; h < 2; h++) {
                    float init[8] = {0};
                    for (int j = 0; accumulate && t0 + t < nt && j < 8 && j0 + 8 * h + j < nr; j++)
                        init[j] = out[(t0 + t) * ldo + j0 + 8 * h + j];
                    c[t][h] = _mm256_loadu_ps(init);
                }
            for (int k = 0; k < kc; k++) {
                const __m256 w0 = _mm256_load_ps(wp + k * NR + j0), w1 = _mm256_load_ps(wp + k * NR + j0 + 8);
                for (int t = 0; t < 6; t++) {
                    const __m256 a = _mm256_broadcast_ss(xp + k * MR + t0 + t);
                    c[t][0] = _mm256_fmadd_ps(a, w0, c[t][0]);
                    c[t][1] = _mm256_fmadd_ps(a, w1, c[t][1]);
                }
            }
            for (int t = 0; t < 6 && t0 + t < nt; t++)
                for (int h = 0; h < 2; h++) {
                    float res[8];
                    _mm256_storeu_ps(res, c[t][h]);
                    for (int j = 0; j < 8 && j0 + 8 * h + j < nr; j++) out[(t0 + t) * ldo + j0 + 8 * h + j] = res[j];
                }
        }
#else
    float c[MR][NR] = {{0}};
    for (int t = 0; accumulate && t < nt; t++)
        for (int j = 0; j < nr; j++) c[t][j] = out[t * ldo + j];
    for (int k = 0; k < kc; k++)
        for (int t = 0; t < MR; t++) {
            const float a = xp[k * MR + t];
#pragma omp simd
            for (int j = 0; j < NR; j++) c[t][j] += a * wp[k * NR + j];
        }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++) out[t * ldo + j] = c[t][j];
#endif
}

// f32 and f16 weights. Returns -1 if the packing buffers could not be allocated.
static int gemm_f32(float *out, const float *x, const Matrix *m, int n) {
    const int rows = m->rows, cols = m->cols;
    const int tiles = (n + MR - 1) / MR, panels = (rows + NR - 1) / NR;
    const int kc_max = chunk_cols(tiles * MR, cols, sizeof(float));
    const int group = panel_group(panels), groups = (panels + group - 1) / group;
    const size_t wp_floats = (size_t)kc_max * NR;
    float *xp = alloc64((size_t)tiles * cols * MR * sizeof(float)); // (tiles, cols, MR)
    float *wp_all = alloc64((size_t)max_threads() * wp_floats * sizeof(float)); // per thread (kc, NR)
    if (!xp || !wp_all) {
        free(xp);
        free(wp_all);
        return -1;
    }
#pragma omp parallel
    {
        float *wp = wp_all + (size_t)thread_num() * wp_floats;
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++) pack_x_f32(xp + (size_t)i * cols * MR, x, cols, n, i * MR);
#pragma omp for schedule(dynamic)
        for (int g = 0; g < groups; g++) {
            const int p_end = (g + 1) * group < panels ? (g + 1) * group : panels;
            for (int k0 = 0; k0 < cols; k0 += kc_max) {
                const int kc = cols - k0 < kc_max ? cols - k0 : kc_max;
                for (int p = g * group; p < p_end; p++) {
                    const int r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
                    pack_w_f32(wp, m, r0, k0, kc);
                    for (int i = 0; i < tiles; i++) {
                        const int nt = n - i * MR < MR ? n - i * MR : MR;
                        kernel_f32(out + (size_t)i * MR * rows + r0, (size_t)rows, nt, nr,
                                   xp + ((size_t)i * cols + k0) * MR, wp, kc, k0 > 0);
                    }
                }
            }
        }
    }
    free(xp);
    free(wp_all);
    return 0;
}

// q8_0: the same loops over integer tiles. vpdpbusd multiplies unsigned by signed bytes, so the
// weights are packed as qw + 128 (unsigned) and the activations stay signed; the extra
// 128 * sum(qx) each block picks up is removed by starting its integer sum at -128 * sum(qx).
//   packed tokens   xq (cp/4, MR_Q8, 4) s8, scales xd (cp/32, MR_Q8), start values xs (cp/32, MR_Q8)
//   packed weights  wq (kc/4, NR, 4) u8 and their scales wd (kc/32, NR)
// Per block of 32 columns the microkernel forms the exact integer sums of an MR_Q8 x NR tile and
// adds dw * dx * sum to float accumulators.

static void pack_x_q8(int8_t *xq, float *xd, int32_t *xs, const QuantizedRows *qx, int cp, int n, int t0) {
    const int nb = cp / Q8_BLOCK;
    for (int t = 0; t < MR_Q8; t++) {
        const int real = t0 + t < n;
        const int8_t *src = qx->q + (size_t)(real ? t0 + t : 0) * cp; // padding tokens read nothing
        for (int k4 = 0; k4 < cp / 4; k4++)
            for (int i = 0; i < 4; i++) xq[((size_t)k4 * MR_Q8 + t) * 4 + i] = real ? src[k4 * 4 + i] : 0;
        for (int b = 0; b < nb; b++) {
            const size_t at = (size_t)(t0 + t) * nb + b;
            xd[b * MR_Q8 + t] = real ? qx->d[at] : 0;
            xs[b * MR_Q8 + t] = real ? -128 * qx->sum[at] : 0;
        }
    }
}

static void pack_w_q8(uint8_t *wq, float *wd, uint8_t *stage, const Matrix *m, int r0, int k0, int kc) {
    const size_t cp = (size_t)matrix_cols_stored(DTYPE_Q8_0, m->cols), nb = cp / Q8_BLOCK;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR;
    const int8_t *w = (const int8_t *)m->data;
    int k = 0;
#ifdef USE_AVX512
    // Rows copied one after the other into `stage` (NR, kc), so memory is read in long runs the
    // hardware prefetcher follows (with the vectorized transpose, n = 64 tokens on one core of the
    // development machine went from ~150 to ~230 GOP/s against the byte by byte copy before), then
    // 16 x 16 transposes of 4-byte groups (the float transpose: it only moves bits) from there,
    // and 128 added to each byte (xor 0x80).
    for (int j = 0; j < nr; j++) memcpy(stage + (size_t)j * kc, w + (size_t)(r0 + j) * cp + k0, (size_t)kc);
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (; k + 64 <= kc; k += 64)
        for (int j0 = 0; j0 < NR; j0 += 16) {
            __m512 v[16];
            for (int j = 0; j < 16; j++)
                v[j] = _mm512_castsi512_ps(j0 + j < nr ? _mm512_xor_si512(_mm512_loadu_si512(stage + (size_t)(j0 + j) * kc + k), flip)
                                                       : flip); // a missing row: 128 + 0
            transpose16(v);
            for (int j = 0; j < 16; j++) _mm512_store_ps((float *)(wq + ((size_t)(k / 4 + j) * NR + j0) * 4), v[j]);
        }
#else
    (void)stage;
#endif
    for (int j = 0; j < NR; j++) // the columns left over (all of them without AVX-512)
        for (int k4 = k / 4; k4 < kc / 4; k4++)
            for (int i = 0; i < 4; i++)
                wq[(k4 * NR + j) * 4 + i] = j < nr ? (uint8_t)(w[(size_t)(r0 + j) * cp + k0 + k4 * 4 + i] + 128) : 128;
    for (int j = 0; j < NR; j++)
        for (int b = 0; b < kc / Q8_BLOCK; b++)
            wd[b * NR + j] = j < nr ? m->scale[(size_t)(r0 + j) * nb + k0 / Q8_BLOCK + b] : 0;
}

static void kernel_q8(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd, const int32_t *xs,
                      const uint8_t *wq, const float *wd, int kc, int accumulate) {
#ifdef USE_AVX512_VNNI
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16);
    __m512 c[MR_Q8][2];
    for (int t = 0; t < MR_Q8; t++) {
        const int load = accumulate && t < nt;
        c[t][0] = load ? _mm512_maskz_loadu_ps(m0, out + t * ldo) : _mm512_setzero_ps();
        c[t][1] = load ? _mm512_maskz_loadu_ps(m1, out + t * ldo + 16) : _mm512_setzero_ps();
    }
    for (int b = 0; b < kc / Q8_BLOCK; b++) {
        __m512i s[MR_Q8][2];
        for (int t = 0; t < MR_Q8; t++) s[t][0] = s[t][1] = _mm512_set1_epi32(xs[b * MR_Q8 + t]);
#pragma GCC unroll 8
        for (int u = 0; u < 8; u++) { // the 8 groups of 4 bytes of the block
            const int k4 = b * 8 + u;
            const __m512i w0 = _mm512_load_si512(wq + k4 * NR * 4), w1 = _mm512_load_si512(wq + k4 * NR * 4 + 64);
            for (int t = 0; t < MR_Q8; t++) {
                int32_t four;
                memcpy(&four, xq + (k4 * MR_Q8 + t) * 4, 4);
                const __m512i a = _mm512_set1_epi32(four);
                s[t][0] = _mm512_dpbusd_epi32(s[t][0], w0, a);
                s[t][1] = _mm512_dpbusd_epi32(s[t][1], w1, a);
            }
        }
        const __m512 d0 = _mm512_load_ps(wd + b * NR), d1 = _mm512_load_ps(wd + b * NR + 16);
        for (int t = 0; t < MR_Q8; t++) {
            const __m512 dx = _mm512_set1_ps(xd[b * MR_Q8 + t]);
            c[t][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[t][0]), dx), d0, c[t][0]);
            c[t][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[t][1]), dx), d1, c[t][1]);
        }
    }
    for (int t = 0; t < nt; t++) {
        _mm512_mask_storeu_ps(out + t * ldo, m0, c[t][0]);
        _mm512_mask_storeu_ps(out + t * ldo + 16, m1, c[t][1]);
    }
#else
    float c[MR_Q8][NR] = {{0}};
    for (int t = 0; accumulate && t < nt; t++)
        for (int j = 0; j < nr; j++) c[t][j] = out[t * ldo + j];
    for (int b = 0; b < kc / Q8_BLOCK; b++) {
        int32_t s[MR_Q8][NR];
        for (int t = 0; t < MR_Q8; t++)
            for (int j = 0; j < NR; j++) s[t][j] = xs[b * MR_Q8 + t];
        for (int k4 = b * 8; k4 < b * 8 + 8; k4++)
            for (int t = 0; t < MR_Q8; t++)
                for (int j = 0; j < NR; j++)
                    for (int i = 0; i < 4; i++) s[t][j] += wq[(k4 * NR + j) * 4 + i] * xq[(k4 * MR_Q8 + t) * 4 + i];
        for (int t = 0; t < MR_Q8; t++)
            for (int j = 0; j < NR; j++) c[t][j] += (float)s[t][j] * xd[b * MR_Q8 + t] * wd[b * NR + j];
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++) out[t * ldo + j] = c[t][j];
#endif
}

static int gemm_q8(float *out, const float *x, const Matrix *m, int n) {
    const int rows = m->rows, cols = m->cols, cp = matrix_cols_stored(DTYPE_Q8_0, cols), nb = cp / Q8_BLOCK;
    const int tiles = (n + MR_Q8 - 1) / MR_Q8, panels = (rows + NR - 1) / NR;
    const int kc_max = chunk_cols(tiles * MR_Q8, cp, 1);
    const int group = panel_group(panels), groups = (panels + group - 1) / group;
    const size_t tile_q = (size_t)cp * MR_Q8, tile_b = (size_t)nb * MR_Q8; // per tile: bytes, blocks
    const size_t wq_bytes = (size_t)kc_max * NR, wd_floats = (size_t)kc_max / Q8_BLOCK * NR;
    QuantizedRows qx = {0};
    int8_t *xq = alloc64(tiles * tile_q);                                // (tiles, cp/4, MR_Q8, 4)
    float *xd = alloc64(tiles * tile_b * sizeof(float));                 // (tiles, cp/32, MR_Q8)
    int32_t *xs = alloc64(tiles * tile_b * sizeof(int32_t));             // (tiles, cp/32, MR_Q8)
    uint8_t *wq_all = alloc64((size_t)max_threads() * 2 * wq_bytes);      // per thread (kc/4, NR, 4), stage
    float *wd_all = alloc64((size_t)max_threads() * wd_floats * sizeof(float)); // per thread (kc/32, NR)
    int status = -1;
    if (xq && xd && xs && wq_all && wd_all && quantize_rows_q8(&qx, x, n, cols) == 0) {
        status = 0;
#pragma omp parallel
        {
            uint8_t *wq = wq_all + (size_t)thread_num() * 2 * wq_bytes, *stage = wq + wq_bytes;
            float *wd = wd_all + (size_t)thread_num() * wd_floats;
#pragma omp for schedule(dynamic)
            for (int i = 0; i < tiles; i++)
                pack_x_q8(xq + i * tile_q, xd + i * tile_b, xs + i * tile_b, &qx, cp, n, i * MR_Q8);
#pragma omp for schedule(dynamic)
            for (int g = 0; g < groups; g++) {
                const int p_end = (g + 1) * group < panels ? (g + 1) * group : panels;
                for (int k0 = 0; k0 < cp; k0 += kc_max) {
                    const int kc = cp - k0 < kc_max ? cp - k0 : kc_max, b0 = k0 / Q8_BLOCK;
                    for (int p = g * group; p < p_end; p++) {
                        const int r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
                        pack_w_q8(wq, wd, stage, m, r0, k0, kc);
                        for (int i = 0; i < tiles; i++) {
                            const int nt = n - i * MR_Q8 < MR_Q8 ? n - i * MR_Q8 : MR_Q8;
                            kernel_q8(out + (size_t)i * MR_Q8 * rows + r0, (size_t)rows, nt, nr,
                                      xq + i * tile_q + (size_t)k0 * MR_Q8, xd + i * tile_b + (size_t)b0 * MR_Q8,
                                      xs + i * tile_b + (size_t)b0 * MR_Q8, wq, wd, kc, k0 > 0);
                        }
                    }
                }
            }
        }
    }
    quantized_rows_free(&qx);
    free(xq);
    free(xd);
    free(xs);
    free(wq_all);
    free(wd_all);
    return status;
}

// ---------------------------------------------------------------------------------------------
// Attention inner loops. With the keys transposed, kt (hd, ctx), every coordinate d adds q[d] *
// (row d of kt) to a run of scores: the work is vectorized over positions, and a run of 64 scores
// stays in registers while all hd coordinates are added. The mix is the same with the roles
// swapped: 64 coordinates of out in registers while every position adds its att[j] * v_j. (A
// plain C loop that adds into out[] in memory waits on its own stores, position after position.)

void attention_scores(float *att, const float *q, const float *kt, int hd, size_t stride, int len, float scale) {
    int j = 0;
#ifdef USE_AVX512
    for (; j + 64 <= len; j += 64) { // 64 positions in 4 vectors
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d++) {
            const __m512 qd = _mm512_set1_ps(q[d] * scale);
            const float *k = kt + (size_t)d * stride + j;
            a0 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k), a0);
            a1 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k + 16), a1);
            a2 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k + 32), a2);
            a3 = _mm512_fmadd_ps(qd, _mm512_loadu_ps(k + 48), a3);
        }
        _mm512_storeu_ps(att + j, a0);
        _mm512_storeu_ps(att + j + 16, a1);
        _mm512_storeu_ps(att + j + 32, a2);
        _mm512_storeu_ps(att + j + 48, a3);
    }
    for (; j < len; j += 16) { // the last < 64, 16 at a time, the very last through a mask
        const __mmask16 m = first_lanes(len - j);
        __m512 a = _mm512_setzero_ps();
        for (int d = 0; d < hd; d++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(q[d] * scale), _mm512_maskz_loadu_ps(m, kt + (size_t)d * stride + j), a);
        _mm512_mask_storeu_ps(att + j, m, a);
    }
#endif
    for (; j < len; j += 64) { // plain C: runs of 64 scores kept in a local array
        const int run = len - j < 64 ? len - j : 64;
        float acc[64] = {0};
        for (int d = 0; d < hd; d++) {
            const float qd = q[d] * scale, *k = kt + (size_t)d * stride + j;
#pragma omp simd
            for (int i = 0; i < run; i++) acc[i] += qd * k[i];
        }
        memcpy(att + j, acc, (size_t)run * sizeof(float));
    }
}

void attention_mix(float *out, const float *att, const float *v, size_t stride, int len, int hd) {
    for (int d0 = 0; d0 < hd; d0 += 64) { // 64 coordinates at a time
        const int width = hd - d0 < 64 ? hd - d0 : 64;
#ifdef USE_AVX512
        __mmask16 m[4];
        for (int r = 0; r < 4; r++) m[r] = first_lanes(width - 16 * r);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 0; j < len; j++) {
            const __m512 p = _mm512_set1_ps(att[j]);
            const float *vj = v + (size_t)j * stride + d0;
            a0 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(m[0], vj), a0);
            if (m[1]) a1 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(m[1], vj + 16), a1);
            if (m[2]) a2 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(m[2], vj + 32), a2);
            if (m[3]) a3 = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(m[3], vj + 48), a3);
        }
        _mm512_mask_storeu_ps(out + d0, m[0], a0);
        _mm512_mask_storeu_ps(out + d0 + 16, m[1], a1);
        _mm512_mask_storeu_ps(out + d0 + 32, m[2], a2);
        _mm512_mask_storeu_ps(out + d0 + 48, m[3], a3);
#else
        float acc[64] = {0};
        for (int j = 0; j < len; j++) {
            const float p = att[j], *vj = v + (size_t)j * stride + d0;
#pragma omp simd
            for (int d = 0; d < width; d++) acc[d] += p * vj[d];
        }
        memcpy(out + d0, acc, (size_t)width * sizeof(float));
#endif
    }
}

// ---------------------------------------------------------------------------------------------
// The entry point

const char *matmul_isa(void) {
#if defined(USE_AVX512_VNNI)
    return "AVX-512 + VNNI";
#elif defined(USE_AVX512)
    return "AVX-512";
#elif defined(USE_AVX2)
    return "AVX2";
#else
    return "plain C";
#endif
}

void matmul(float *out, const float *x, const Matrix *m, int n) { matmul_many(&out, x, &m, 1, n); }

void matmul_many(float *const *out, const float *x, const Matrix *const *m, int count, int n) {
    int same = 1; // one parallel loop needs one input width and one weight type
    for (int i = 1; i < count; i++) same &= m[i]->cols == m[0]->cols && m[i]->dtype == m[0]->dtype;
    if (!same) {
        for (int i = 0; i < count; i++) matmul(out[i], x, m[i], n);
        return;
    }
    if (n >= GEMM_MIN_N) { // prefill: one product after the other, each long enough to share out
        for (int i = 0; i < count; i++) {
            int status = m[i]->dtype == DTYPE_Q8_0 ? gemm_q8(out[i], x, m[i], n) : gemm_f32(out[i], x, m[i], n);
            if (status) matvec(&out[i], x, &m[i], 1, n); // out of memory for packing: this path needs none
        }
        return;
    }
    matvec(out, x, m, count, n);
}
