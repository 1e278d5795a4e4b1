// kernels_internal.h - what the kernel files share, and nothing outside them includes (kernels.h is
// the interface): the instruction set of the build, the sizes the algorithms and the microkernels
// agree on, the quantized activations, the workspace's layout, and each microkernel's signature
// with the table that picks its plain C or its vector version.
//
// The kernel files, each read top to bottom:
//   kernels.c            the fences and the references: matmul_ref, the KV cache's layout and
//                        attention_ref, RMSNorm, softmax, the q8_0 activations, the workspace's
//                        layout, and matmul, which hands a product to decode or prefill
//   kernels_decode.c     decode, matrix x vector: the plain dot products, then matvec
//   kernels_prefill.c    prefill, matrix x matrix: the plain packing and tiles, then gemm_f32, gemm_q8
//   kernels_attention.c  attention: the plain scores and mix, then the tasks attention runs
//   kernels_x86.c        AVX-512 / VNNI / AVX2 versions of the microkernels, behind the same
//                        signatures; it needs nothing from the other files but this header
//   dtype.c              the weight types' names and a matrix's bytes (dtype.h: the types' table)
// kernels.c is on top: it calls decode and prefill, which call nothing of it (the types' sizes and
// thread_num are in this header).
// The algorithms call the microkernels by their plain names (dot_rows, kernel_f32, ...) and never
// see an instruction set; the table at the end of this file says which version a name is.
#ifndef KERNELS_INTERNAL_H
#define KERNELS_INTERNAL_H

#include "kernels.h"

#include <stdatomic.h>
#include <stdint.h>
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
#if defined(USE_AVX512) && defined(__AVX512BF16__)
#define USE_AVX512_BF16 1 // vdpbf16ps: 32 bf16 products summed in pairs into 16 float lanes (AVX512-BF16)
#endif

// Not inlined: one compiled copy of each dot product, so every caller sums in the same order (a
// compiler may vectorize an inlined plain C loop differently in each place it lands); and the
// prefill tiles compiled on their own, whose registers an inlining caller would take (docs/speed.md).
#define ONE_COPY __attribute__((noinline))

// This thread's number in a parallel region, 0 without OpenMP: which share of the workspace is its own.
static inline int thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

enum {
    NR = 32,      // prefill: weight rows per panel, two 16-float vectors
    MR = 12,      // prefill: tokens per tile, MR * 2 = 24 accumulator vectors of the 32 a core has
    MR_Q8 = 6,    // prefill, q8_0 tiles: 12 integer + 12 float accumulators
    KC_MIN = 256, // prefill: columns per chunk, at least and at most
    KC_MAX = 4096,
    KV_RUN = 32,   // attention: positions (or coordinates) a vector tile covers; the cache's unit
    MIX_RUN = 128, // attention: positions of values the weighted sum takes at a time (vector code)
    DOT_ROWS = 4,  // decode: weight rows a group of dot_rows reads (at once in the vector code),
                   // each from its own quarter of the matrix
};

// What a type's products multiply (dtype.h): x quantized to q8_0 blocks; x rounded to bf16. And
// whether its rows are stored in groups of R16 (the rows of a decode group are then such groups).
static inline int x_quantized(DType t) { return DTYPES[t].x == X_Q8; }
static inline int x_bf16(DType t) { return DTYPES[t].x == X_BF16; }
static inline int in_groups(DType t) { return DTYPES[t].group > 1; }

// q8_0 in groups of R16 rows (DTYPE_Q8_0_R16; model.h has the bytes): a matrix's rows padded with
// zero rows to whole groups; per group and per block of 32 columns R16_BLOCK_BYTES: the 16 rows'
// float scales, then 8 runs of 64 bytes, run u holding bytes 4u .. 4u+3 of each of the 16 rows in
// row order, each stored as the unsigned q + 128. One 64-byte load is 4 columns of 16 rows, as
// vpdpbusd multiplies them by 4 bytes of x broadcast: a block's 16 sums land in one vector.
enum { R16_BLOCK_BYTES = R16 * (int)sizeof(float) + R16 * Q8_BLOCK };
static inline int r16_groups(int rows) { return (rows + R16 - 1) / R16; }
static inline size_t r16_group_bytes(int cols) {
    return (size_t)(cols + Q8_BLOCK - 1) / Q8_BLOCK * R16_BLOCK_BYTES;
}
// Where value j (< 32) of row i (< 16) of a block sits among the block's 512 bytes of quants.
static inline int r16_at(int i, int j) { return j / 4 * (R16 * 4) + i * 4 + j % 4; }

// bf16 in groups of R16 rows (DTYPE_BF16_R16; model.h has the bytes): a matrix's rows padded with
// zero rows to whole groups, its columns with zeros to whole steps of BF16_STEP (bf16_cols, below);
// a group is bf16_cols / 2 words of R16 x 32 bits, word (p, i) holding row i's columns 2p (low 16
// bits) and 2p + 1 (high 16 bits): one 64-byte load is a pair of columns of all 16 rows
// (br16_group_values and br16_at, below with bf16_cols, say where).

// One stored row of a matrix (dtype.h's matrix_* functions are these for whole matrices), from the
// type's row of the table: its columns, padded to whole blocks; the bytes of its values (q8_0_r16:
// on average, its groups have the bytes); the bytes of its scales where they follow the values.
static inline int cols_stored(DType t, int cols) {
    const int block = DTYPES[t].block;
    return (cols + block - 1) / block * block;
}
static inline size_t row_bytes(DType t, int cols) {
    return (size_t)(cols_stored(t, cols) / DTYPES[t].block) * (size_t)DTYPES[t].block_bytes;
}
static inline size_t row_scale_bytes(DType t, int cols) {
    return (size_t)(cols_stored(t, cols) / DTYPES[t].block) * (size_t)DTYPES[t].scale_bytes;
}
// a * b, or 0 when that does not fit in size_t.
static inline size_t mul_or_zero(size_t a, size_t b) { return (b && a > SIZE_MAX / b) ? 0 : a * b; }

// q4_0 (ggml's Q4_0): per block of 32 values, 16 bytes; byte j holds value j in its low 4 bits and
// value j + 16 in its high 4 bits, each an unsigned q in [0, 15] meaning (q - 8) * d, with one f16
// scale d per block, stored apart like q8_0's.
static inline int q4_at(const uint8_t *block, int i) { return (i < 16 ? block[i] & 15 : block[i - 16] >> 4) - 8; }

// The K-quants (dtype.h; ggml-common.h's block_q4_K, block_q5_K, block_q6_K): where each value's bits
// sit in its block of QK_K, as ggml-quants.c's dequantize_row_q4_K, _q5_K and _q6_K read them.
// q4_K, q5_K: f16 d at byte 0, f16 dmin at 2, the 12 bytes of scales and mins at 4 (k_scale_min);
// q5_K's 32 bytes qh at 16; the 128 bytes qs at 16 (q5_K: 48). Value i lies in sub-block j = i / 32;
// its low 4 bits are byte 32 (i / 64) + i % 32 of qs, the low nibble for an even j, the high for an
// odd one; q5_K's fifth bit (16) is bit j of qh[i % 32].
enum { QK_SCALES = 4, Q4K_QS = 16, Q5K_QH = 16, Q5K_QS = 48 };
// Sub-block j's 6-bit scale and min: for j < 4 the low 6 bits of bytes j and j + 4; else byte j + 4's
// low (scale) and high (min) nibble, with the top 2 bits of byte j - 4 (scale) and byte j (min) above.
static inline void k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63, *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}
static inline int q4k_at(const uint8_t *block, int i) {
    const uint8_t b = block[Q4K_QS + 32 * (i / 64) + i % 32];
    return i / 32 % 2 ? b >> 4 : b & 15;
}
static inline int q5k_at(const uint8_t *block, int i) {
    const uint8_t b = block[Q5K_QS + 32 * (i / 64) + i % 32];
    return (i / 32 % 2 ? b >> 4 : b & 15) | (block[Q5K_QH + i % 32] >> (i / 32) & 1) << 4;
}
// q6_K: 128 bytes ql at 0, 64 bytes qh at 128, sixteen int8 scales at 192, f16 d at 208. Value i lies
// in half h = i / 128 (ql from 64 h, qh from 32 h) and quarter u = i % 128 / 32 of it, l = i % 32:
// its low 4 bits are ql[l + 32 (u % 2)], the low nibble for u < 2, else the high; its high 2 bits are
// bits 2u, 2u + 1 of qh[l]; q = those 6 bits - 32, and its scale is scales[8 h + 2 u + l / 16].
enum { Q6K_QH = 128, Q6K_SCALES = 192, Q6K_D = 208 };
static inline int q6k_at(const uint8_t *block, int i) {
    const int h = i / 128, u = i % 128 / 32, l = i % 32;
    const uint8_t lo = block[64 * h + l + 32 * (u % 2)], hi = block[Q6K_QH + 32 * h + l];
    return ((u < 2 ? lo & 15 : lo >> 4) | (hi >> 2 * u & 3) << 4) - 32;
}
static inline int q6k_scale(const uint8_t *block, int i) {
    return ((const int8_t *)block)[Q6K_SCALES + 8 * (i / 128) + 2 * (i % 128 / 32) + i % 32 / 16];
}
static inline float f16_at(const uint8_t *p) {
    _Float16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return (float)h;
}

// bf16 (kernels.h, bf16_round): x's bits rounded to their top 16, to nearest, ties to even (adding
// 0x7fff and the lowest kept bit carries into the kept bits exactly when the dropped ones are more
// than half, or half with the kept ones odd); a NaN keeps its top bits, made quiet; a subnormal x
// (exponent bits 0) becomes a zero of its sign. Branch-free, so that loops over it vectorize.
static inline uint16_t round_bf16(float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, sizeof u);
    const uint32_t nan = (u & 0x7fffffff) > 0x7f800000, tiny = (u & 0x7f800000) == 0;
    const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
    return (uint16_t)(nan ? (u >> 16) | 0x40 : tiny ? (u >> 16) & 0x8000 : rounded);
}
static inline float widen_bf16(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float x;
    __builtin_memcpy(&x, &u, sizeof x);
    return x;
}

// bf16_r16's columns are padded with zeros to whole steps of BF16_STEP, and so are the rows of x
// rounded to bf16, which lie bf16_cols(cols) values apart (bf16_r16's tile reads x 4 bytes at a
// time, so no extra spacing of those rows pays: docs/speed.md, "bf16 in 16-row groups").
enum { BF16_STEP = 32 };
static inline int bf16_cols(int cols) { return (cols + BF16_STEP - 1) / BF16_STEP * BF16_STEP; }
// bf16_r16: the values of a group; where row r's column c is among a matrix's values.
static inline size_t br16_group_values(int cols) { return (size_t)R16 * bf16_cols(cols); }
static inline size_t br16_at(int r, int c, int cols) {
    return (size_t)(r / R16) * br16_group_values(cols) + ((size_t)(c / 2) * R16 + r % R16) * 2 + c % 2;
}
// The bytes of one R16-row group of a grouped matrix (in_groups) of `cols` columns.
static inline size_t group_bytes(DType t, int cols) { return (size_t)R16 * row_bytes(t, cols); }

// f32 and f16 in groups of R16 rows (DTYPE_F32_R16, DTYPE_F16_R16; matrix_to_r16 makes them at load
// from rows): a matrix's rows padded with zero rows to whole groups; a group is its columns one after
// the other, column c the values of its 16 rows in row order, so that one 64-byte load (f16: 32
// bytes) is a column of 16 rows. Their order, the same in decode and prefill's tiles: a row's sum
// starts at 0 and takes the products of columns 0, 1, .., cols - 1 one after the other, each rounded
// into it on its own (in the vector builds by a fused multiply-add; plain C as its compiler does
// `sum += w * x`, the same in both places). So a token's outputs are the same bits in a prompt or
// alone. r16f_at: where row r's column c is among a matrix's values.
static inline size_t r16f_at(int r, int c, int cols) { return ((size_t)(r / R16) * cols + c) * R16 + r % R16; }
// An f16 weight (its bits) rounded to bf16 (kernels.h, matrix_to_r16).
static inline uint16_t f16_bf16(uint16_t h) {
    _Float16 f;
    __builtin_memcpy(&f, &h, sizeof f);
    return round_bf16((float)f); // exact f16 -> f32 (never below 2^-126), then to nearest even
}
// bf16_r16's order (DTYPE_BF16_R16, the layout above), the same in decode and prefill, in every
// build, so that a token's outputs are the same bits in a prompt or alone: x rounded to bf16
// (kernels.h), so every product of two bf16 numbers is exact; a row's sum is one float, to which the
// pairs of columns 2p + 1, 2p (the pair's second column first, as vdpbf16ps adds the product of a
// 32-bit word's high halves first) are added one after the other, p = 0, 1, .., bf16_cols / 2 - 1
// (the padding too, zeros), each product rounded into the sum on its own. No tree: lane i of a
// group's 16-lane vector is row i's sum from start to end, so decode streams the groups as stored,
// one x pair broadcast to 16 rows, and prefill's tiles feed one loaded vector of weights to several
// tokens and one broadcast of x to several groups. vdpbf16ps reads subnormal numbers and writes them
// as zero: where a weight or a row's sum is below 2^-126 the AVX512-BF16 build differs from this
// order by less than 2^-126 per column.
// One row: row i (< R16) of a group (its first value) . x (bf16_cols(cols) rounded values).
float dot_br16_plain(const uint16_t *group, int i, const uint16_t *x, int cols);

// Decode: the rows of group r of a run (rows r, r + step, ...) before the end of a matrix of `rows`
// rows, at most DOT_ROWS (kernels_decode.c, dot_rows_plain, says what groups and runs are); for the
// grouped layouts the same in groups of R16 rows (`rows` then counts those).
static inline int group_rows(int rows, int r, int step) {
    const int ahead = (rows - r + step - 1) / step; // rows r, r + step, ... before the end
    return ahead < DOT_ROWS ? ahead : DOT_ROWS;
}

// ---------------------------------------------------------------------------------------------
// The KV cache as attention reads it (kernels.c has the layout): per layer and kv head, ctx
// rounded up to whole blocks of KV_RUN positions (the stride), each position kv_row_bytes.

static inline size_t kv_stride(int ctx) { return ((size_t)ctx + KV_RUN - 1) / KV_RUN * KV_RUN; }

// Bytes of one position's keys (or values) of one kv head.
static inline size_t kv_row_bytes(DType t, int hd) {
    switch (t) {
    case DTYPE_F16:
        return (size_t)hd * sizeof(_Float16);
    case DTYPE_Q8_0:
        return (size_t)hd + (size_t)hd / Q8_BLOCK * sizeof(_Float16);
    case DTYPE_F32:
        return (size_t)hd * sizeof(float);
    case DTYPE_Q4_0: // weight types only, never a cache's (kernels.h, kv_type_ok)
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

// Whether layer l keeps a ring of c->ring slots (a sliding layer, when the cache has rings), and the
// slots of each of its kv heads: the ring's, or every position of the context.
static inline int layer_ring(const KVCache *c, int l) {
    return c->ring && c->layer_kind && c->layer_kind[l] & LAYER_SLIDING;
}
static inline size_t layer_slots(const KVCache *c, int l) { return layer_ring(c, l) ? (size_t)c->ring : kv_stride(c->ctx); }
// The slot of position p in layer l: p itself, or p mod ring (ring is a multiple of KV_RUN, so a block
// of KV_RUN positions is a block of slots).
static inline int layer_slot(const KVCache *c, int l, int p) { return layer_ring(c, l) ? p % c->ring : p; }

// The keys and the values of kv head h of a layer: layer_slots rows of kv_row_bytes each, the layers
// one after the other.
static inline size_t head_rows_before(const KVCache *c, int layer, int h) {
    size_t rows = 0;
    for (int l = 0; l < layer; l++)
        rows += layer_slots(c, l) * (size_t)c->n_kv_heads;
    return rows + (size_t)h * layer_slots(c, layer);
}
static inline void *head_keys(const KVCache *c, int layer, int h) {
    return (char *)c->keys + head_rows_before(c, layer, h) * kv_row_bytes(c->key_type, c->head_dim);
}
static inline void *head_values(const KVCache *c, int layer, int h) {
    return (char *)c->values + head_rows_before(c, layer, h) * kv_row_bytes(c->value_type, c->head_dim);
}

// What attention reads of RoPE in layer l (rope.h); one turn, keys as cached, for a cache without.
static inline RopeAttention layer_rope(const KVCache *c, int l) {
    return c->rope ? c->rope[l] : (RopeAttention){.turns = 1};
}
// A key table is laid out in the blocks of the cached keys it turns.
_Static_assert(KV_RUN == ROPE_KEY_BLOCK, "rope.h's key tables and the cache's blocks of keys");

// The positions a query at m sees in layer l start here: m - slide + 1 in a sliding layer, else 0.
static inline int layer_first(const KVCache *c, int l, int m) {
    const int first = c->layer_kind && c->layer_kind[l] & LAYER_SLIDING ? m - c->slide + 1 : 0;
    return first > 0 ? first : 0;
}

// A block of keys kt (hd, KV_RUN) of type t, f16 or q8_0, as floats, into out (hd * KV_RUN); n cached values v
// (n rows of type t) as floats, into out (n, hd). kernels.c.
void key_block_floats(float *out, const void *kt, DType t, int hd);
void value_rows_floats(float *out, const void *v, DType t, int hd, int n);

// ---------------------------------------------------------------------------------------------
// q8_0 activations (kernels.c): the rows of x cut into blocks of 32, d = max|x| / 127 and
// q = round(x / d), so that a block's dot product with q8_0 or q4_0 weights is an exact integer sum.
// For the K-quants the blocks are QK_K long, one d per super-block, with the sum of every K_SUM q (the
// shape of ggml's block_q8_K): a super-block's dot product, its scales and mins included, is then one
// exact integer sum, whatever order a kernel adds it in (kernels_decode.c, dot_k_plain).

static inline int k_quant(DType t) { return DTYPES[t].block == QK_K; }
enum { K_SUM = 16 }; // x's values per sum for the K-quants (q6_K's scales each cover 16)
// Per token row of cp values quantized for type t's products: its scales, its sums.
static inline size_t x_scales(DType t, size_t cp) { return cp / (k_quant(t) ? QK_K : Q8_BLOCK); }
static inline size_t x_sums(DType t, size_t cp) { return cp / (k_quant(t) ? K_SUM : Q8_BLOCK); }

typedef struct {
    int8_t *q;    // (n, cp) cp = cols rounded up to Q8_BLOCK (K-quants: QK_K), zero-padded
    float *d;     // (n, x_scales) scales
    int32_t *sum; // (n, x_sums) sum of the q of each block (for the unsigned trick in gemm_q8), or of
                  // each K_SUM values (K-quants: their mins, and q6_K's offset of 32)
    int8_t *prep; // decode against q4_0 weights: (n, q4_prep_bytes(cp)) as q4_prep arranged it; else NULL
    uint16_t *h;  // bf16 weights: (n, bf16_cols(cols)) x rounded to bf16 (round_bf16), zero-padded; else NULL
} QuantizedRows;

// One token's row of a QuantizedRows, as the decode dot products read it.
typedef struct {
    const int8_t *q;
    const float *d;
    const int32_t *sum;
    const int8_t *prep;
    const uint16_t *h; // bf16 weights: x rounded to bf16
} QuantizedRow;

// One block of len <= Q8_BLOCK values of x (the rest of the block is zero padding), q8_0 as kernels.c
// describes it; here so that kernels.c (the KV cache, the plain row) and kernels_x86.c (a row's last
// partial block) share it without calling each other.
// The largest |x| of len values (a NaN is passed over), and 127 over it, what a block's values are
// multiplied by: 0 for a block below the smallest normal float, which counts as zero (127 / amax
// would be inf there).
static inline float q8_inv(const float *x, int len, float *amax) {
    float m = 0;
    for (int i = 0; i < len; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        m = a > m ? a : m;
    }
    *amax = m;
    return m >= 0x1p-126f ? 127 / m : 0;
}
// One value times inv as its q: within [-127, 127], rounded half away from zero, like roundf. NaN
// (from a damaged model) becomes -127: converting it to int would be undefined.
static inline int q8_round(float v) {
    v = v > -127.0f ? (v < 127.0f ? v : 127.0f) : -127.0f;
    return (int)(v < 0 ? v - 0.5f : v + 0.5f);
}
static inline void quantize_block_q8(int8_t *q, float *d, int32_t *sum, const float *x, int len) {
    float amax;
    const float inv = q8_inv(x, len, &amax);
    int32_t s = 0;
    for (int i = 0; i < Q8_BLOCK; i++) {
        const int qi = q8_round(i < len ? x[i] * inv : 0);
        q[i] = (int8_t)qi;
        s += qi;
    }
    *d = amax / 127;
    *sum = s;
}

// ---------------------------------------------------------------------------------------------
// The workspace, laid out in one place (kernels.c, ws_layout): workspace_bytes sizes it with the
// layout and matmul hands the same layout to the product it runs, so the two cannot drift.

// Decode's shares of the rows: one thread's run of pieces, its next piece and its end in one word,
// so that the owner taking from the front and another thread taking from the back cannot both get
// the last piece (kernels_decode.c).
typedef struct {
    _Alignas(64) _Atomic uint64_t next_end; // next (low 32 bits), end (high 32 bits); a cache line each
} PieceRun;

// One product's pieces, as byte offsets from the workspace's start, each 64-byte aligned; a piece
// the product does not use is empty. The per-thread pieces (wp, wd, stage) are thread 0's; thread
// t's are `each` bytes further per thread.
typedef struct {
    size_t q, d, sum;     // x quantized (q8_0 and q4_0 weights): QuantizedRows' q, d, sum
    size_t prep;          // decode, q4_0 weights: QuantizedRows.prep
    size_t h;             // bf16 weights (decode and prefill): QuantizedRows.h
    size_t runs;          // decode: a PieceRun per thread
    size_t xp, xd, xs;    // prefill: x packed in tiles; q8_0 and q4_0: their scales and start values
    size_t wp, wd, stage; // prefill, per thread: a packed panel of weights; q8_0 and q4_0: its scales,
                          // and the panel's rows as read
    size_t kx;            // prefill, K-quants, per thread: the panel's scales, mins, d and dmin, and a
                          // tile's integer sums (gemm_k)
    size_t each, bytes;   // bytes of one thread's pieces; of the whole
} WsLayout;

// The products matmul runs (out[i] = x @ m[i]^T for i < count, shared cols and dtype) on `threads`
// threads with the workspace at ws laid out as l; qx is x quantized (q8_0 and q4_0 weights).
void matvec(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const float *x,
            const QuantizedRows *qx, const Matrix *const *m, int count, int n);
void gemm_f32(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const float *x,
              const uint16_t *xb, const Matrix *const *m, int count, int n);
void gemm_q8(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const QuantizedRows *qx,
             const Matrix *const *m, int count, int n);
void gemm_k(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const QuantizedRows *qx,
            const Matrix *const *m, int count, int n);
// bf16_r16 weights, prefill with AVX-512: panels of rows x tokens (kernels_prefill.c), each output in
// bf16_r16's order (above); xb is x rounded to bf16 by matmul, (n, bf16_cols(cols)). gemm_f32 runs
// f32 and f16 weights, and bf16_r16 in other builds (xb: x rounded, else NULL).
void gemm_bf16(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const uint16_t *xb,
               const Matrix *const *m, int count, int n);

// ---------------------------------------------------------------------------------------------
// The microkernels. Each signature is a type, and both versions of a microkernel are declared with
// it, so the compiler holds them to the same one; the comments say what each computes, the plain C
// definitions (in the file of their algorithm) say it again as code.

// Decode (kernels_decode.c): a run of `count` groups of rows against one activation row, each row's
// dot product into out[row]; x as floats, and quantized (xq) for q4_0 and q8_0_r16 weights, rounded
// to bf16 (xq->h) for bf16_r16 weights.
typedef void DotRows(float *out, const Matrix *m, int r, int step, int count, const float *x, const QuantizedRow *xq);
// The plain dot products the vector ones finish a row with: q4_0 weights . q8_0 activations over nb
// blocks; row i (< R16) of a q8_0_r16 group . q8_0 activations over nb blocks.
float dot_q4_plain(const uint8_t *w, const _Float16 *dw, const QuantizedRow *x, int nb);
float dot_r16_plain(const uint8_t *group, int i, const QuantizedRow *x, int nb);
// A K-quant row (gguf_q4_K, gguf_q5_K, gguf_q6_K: nsb blocks of QK_K) . x quantized in blocks of QK_K.
float dot_k_plain(DType t, const uint8_t *w, const QuantizedRow *x, int nsb);

// Prefill (kernels_prefill.c): a panel of NR weight rows packed, wp (kc, NR) floats (f32_r16 and
// f16_r16: plain C only, two groups' columns side by side), or wq (kc/4, NR, 4) bytes with scales wd
// (kc/32, NR) (q4_0 through `stage`, q8_0_r16 copied as stored: plain C only); the tiles that
// multiply it with packed tokens into out.
typedef void PackF32(float *wp, const Matrix *m, int r0, int k0, int kc);
typedef void TileF32(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc, int accumulate);
typedef void TileQ8(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd, const int32_t *xs,
                    const uint8_t *wq, const float *wd, int kc, int accumulate);
// K-quants (gemm_k), the integer half of a tile: for the nsb blocks of QK_K of a chunk, S (nsb, MR_Q8,
// NR) = per block, sum over its groups g of `group` columns (32; q6_K 16) of sc_g (NR) times the exact
// integer products of the group's packed weights wq (unsigned: a K-quant's bits before any offset)
// with the MR_Q8 packed tokens xq; sc (kc/group, NR). The float step follows in plain C (kernels_prefill.c).
typedef void TileK(int32_t *S, int nsb, int group, const int8_t *xq, const uint8_t *wq, const int32_t *sc);
// bf16_r16 with AVX-512 (gemm_bf16), a panel: out[t, r] = row r . x row t in bf16_r16's order for r < nr rows
// from the group at w on (whole groups, nr <= BR16_ROWS) and t < nt rows of x (rounded, ldx =
// bf16_cols(cols) apart, padded with zeros), nt <= BR16_MT, BR16_NG groups x BR16_MT tokens of sums in
// registers. Without AVX-512, bf16_r16 goes through the f32 tiles instead (gemm_f32, pack_w_br16): 16
// registers hold no such tile, and there its weights widened once per panel feed many tokens.
typedef void TileBR16(float *out, size_t ldo, const uint16_t *w, int nr, const uint16_t *x, size_t ldx, int nt,
                      int cols);
enum {
    BR16_NG = 4,  // groups x tokens per tile: 24 vectors of sums and 4 of weights, within the 32
    BR16_MT = 6,  // registers; the fastest shape measured (docs/speed.md, "bf16 in 16-row groups")
    BR16_ROWS = BR16_NG * R16, // rows of a prefill work item: one tile's groups
};
// f16 as bf16 (matrix_to_r16): count f16 weights (their bits) rounded to bf16, each as f16_bf16.
typedef void RoundF16(uint16_t *to, const uint16_t *from, size_t count);

// Attention (kernels_attention.c): a task's scores against one head's keys, and its weighted sum of
// the values added into o (which the caller zeroes: a ring's values come in two pieces); rotate_block, a block of keys turned by RoPE with its block of the rotation table.
typedef void Scores(float *att, size_t ld, const float *qs, int rows, const void *kt, DType t, const float *rot,
                    float *turned, int hd, int len);
typedef void Mix(float *o, const float *att, size_t ld, int rows, const void *v, DType t, float *wide, int len, int hd);
void rotate_block(float *out, const float *k, const float *rot, int hd);

// The quantizers of one row of activations (kernels.c): q8_0's blocks of 32, the K-quants' of QK_K.
typedef void QuantizeRow(int8_t *q, float *d, int32_t *sum, const float *x, int cols);

DotRows dot_rows_plain, dot_rows_x86;
PackF32 pack_w_f32, pack_w_br16_plain, pack_w_br16_x86;
TileF32 kernel_f32_plain, kernel_f32_x86;
TileQ8 kernel_q8_plain, kernel_q8_x86;
TileK kernel_k_plain, kernel_k_x86;
TileBR16 kernel_br16_x86;
RoundF16 round_f16_bf16_plain, round_f16_bf16_x86;
Scores attention_scores_plain, attention_scores_x86;
Mix attention_mix_plain, attention_mix_x86;
QuantizeRow quantize_row_q8_plain, quantize_row_q8_x86, quantize_row_q8k_plain, quantize_row_q8k_x86;

// The decode hook: a vector build may arrange each token's quantized activations once more, in the
// order its q4_0 dot products read them (kernels_x86.c). q4_prep_bytes: the bytes per token of cp
// values; q4_prep fills them at `prep` for the n rows of qx and returns prep, which becomes
// QuantizedRows.prep. A plain build needs none of it: 0 bytes, nothing done, NULL.
#ifdef USE_AVX2
size_t q4_prep_bytes(size_t cp);
int8_t *q4_prep(int8_t *prep, const QuantizedRows *qx, int n, size_t cp);
#else
static inline size_t q4_prep_bytes(size_t cp) { return (void)cp, 0; }
static inline int8_t *q4_prep(int8_t *prep, const QuantizedRows *qx, int n, size_t cp) {
    return (void)prep, (void)qx, (void)n, (void)cp, NULL;
}
#endif

// Which version each name is: in an x86 build with AVX2 every one has a vector version, else the
// plain C. (pack_w_f32 has only its plain C: a copy of two groups' columns, which the compiler
// vectorizes.)
#ifdef USE_AVX2
#define dot_rows         dot_rows_x86
#define pack_w_br16      pack_w_br16_x86
#define kernel_f32       kernel_f32_x86
#define kernel_q8        kernel_q8_x86
#define kernel_k         kernel_k_x86
#define round_f16_bf16   round_f16_bf16_x86
#define attention_scores attention_scores_x86
#define attention_mix    attention_mix_x86
#define quantize_row_q8  quantize_row_q8_x86
#define quantize_row_q8k quantize_row_q8k_x86
#else
#define dot_rows         dot_rows_plain
#define pack_w_br16      pack_w_br16_plain
#define kernel_f32       kernel_f32_plain
#define kernel_q8        kernel_q8_plain
#define kernel_k         kernel_k_plain
#define round_f16_bf16   round_f16_bf16_plain
#define attention_scores attention_scores_plain
#define attention_mix    attention_mix_plain
#define quantize_row_q8  quantize_row_q8_plain
#define quantize_row_q8k quantize_row_q8k_plain
#endif

#endif
