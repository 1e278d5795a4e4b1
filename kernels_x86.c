// kernels_x86.c - the x86 vector versions of the kernels' microkernels (AVX-512, VNNI, AVX2).
//
// Compiled to nothing unless the compiler targets AVX2 or more (-march=native on such a machine;
// kernels_internal.h decides). Each function here that the algorithms call has the signature and
// the meaning of the plain C one it replaces (dot_rows_x86 <-> dot_rows_plain in kernels_decode.c,
// ...): kernels_internal.h declares both with one type and its table says which one a build uses.
// This file needs nothing from the other kernel files but that header. Attention has one 256-bit
// version for AVX2 and AVX-512 builds; decode has a 256-bit one and, for AVX-512 with VNNI, 512-bit
// f16, bf16_r16, q8_0_r16 and q4_0 dot products (half the instructions per byte, which counts once a core
// streams fast enough); the prefill tiles have two side by side, 512-bit (AVX-512, with VNNI for
// the integer ones) and 256-bit (AVX2, for machines without AVX-512). tests/test_kernels.c checks
// every path against the references, in a native, an AVX2 and a plain C build.
//
// What the vector versions add, and why (docs/speed.md has the measurements):
//   - decode reads four weight rows at once, one from each quarter of the matrix, with wide loads
//     into independent sums: four streams of the weights in flight, and each activation vector
//     loaded serves four rows;
//   - q8_0_r16 and q4_0 dot products are exact integer sums of byte products. The multiply
//     instructions (vpdpbusd with VNNI, vpmaddubsw without) want one unsigned operand: decode feeds
//     them w + 128 and a start of -128 sum(x) (or |x| and w * sign(x)), q4_0's nibbles are unsigned
//     already; the decode hook (q4_prep) lays each token's activations out in the order of q4_0's
//     nibbles;
//     q8_0_r16's 16-row groups are stored as vpdpbusd reads them (w + 128, 4 bytes of 16 rows per
//     64 bytes), so a block's 16 row sums land in one vector, with no sum across lanes;
//   - bf16_r16's groups are stored as vdpbf16ps reads them (a pair of columns of 16 rows per 64
//     bytes), so x's pair, broadcast, meets 16 rows at once and each lane is one row's whole sum;
//   - f16 weights made bf16 (--f16-as-bf16, at load) are rounded 32 at a time by vcvtph2ps and
//     vcvtne2ps2bf16 (AVX512-BF16), else by round_bf16's integer arithmetic;
//   - q4_0's scales multiplied eight blocks at a time, as one vector, not one block at a time;
//   - the prefill microkernels keep a tile of outputs in registers (24 of the 32 AVX-512 registers,
//     12 of the 16 AVX2 ones), so each loaded weight feeds several multiply-adds;
//   - attention works on tiles of up to 3 query rows x 32 positions (or coordinates) in registers,
//     so each key or value loaded serves every query head of its kv head and several queries.
#include "kernels_internal.h"

#ifdef USE_AVX2
#include <immintrin.h>
#include <math.h>
#include <string.h>

// The sum of the 8 lanes of a vector.
static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// 8 halves widened to floats (exact).
static inline __m256 half8(const _Float16 *h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }
// bf16_r16's order (kernels_internal.h) in vectors. A 32-bit word of bf16_r16 holds a row's columns
// 2p (low half) and 2p + 1 (high half), 16 rows' words per 64 bytes: one 512-bit vector, or two
// 256-bit ones (rows 0-7, then 8-15). As floats, a word's high half is the word with its low 16 bits
// cleared and its low half the word shifted up by 16, both exact; a product of two bf16 numbers is
// exact too, so a fused multiply-add is the rounded sum of the row's sum and the product, as the
// order has it.
static inline __m256 bf16_high8(__m256i v) {
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000)));
}
static inline __m256 bf16_low8(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
// One step of 8 lanes: the high halves' product first, then the low halves'.
static inline __m256 bf16_step8(__m256 acc, __m256i w, __m256 x_high, __m256 x_low) {
    return _mm256_fmadd_ps(bf16_low8(w), x_low, _mm256_fmadd_ps(bf16_high8(w), x_high, acc));
}
// f16 weights as bf16 (matrix_to_r16): 8 floats (widened from f16, so never below 2^-126)
// rounded to bf16, to nearest even, each in the low half of its 32-bit word (round_bf16's arithmetic;
// a NaN stays a quiet NaN); then 16 f16 weights as stored become 16 bf16 ones in the same places.
static inline __m256i round8_bf16(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
}
static inline __m256i f16_bf16_16(const uint16_t *w) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)w);
    const __m256i lo = round8_bf16(_mm256_cvtph_ps(_mm256_castsi256_si128(h)));      // columns 0-7
    const __m256i hi = round8_bf16(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))); // 8-15
    return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8); // packus interleaves 64-bit quarters
}

#ifdef USE_AVX512
// 32 f16 weights (their bits, as stored) as 32 bf16 ones in the same places, each rounded to nearest
// even: vcvtph2ps then vcvtne2ps2bf16 with AVX512-BF16, else round_bf16's arithmetic in integers.
static inline __m512i f16_bf16_32(__m512i h) {
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
#ifdef USE_AVX512_BF16
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); // words 0-15 from lo, 16-31 from hi
#else
    __m256i half[2];
    for (int i = 0; i < 2; i++) {
        const __m512 f = i ? hi : lo;
        const __m512i u = _mm512_castps_si512(f);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
        const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        half[i] = _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), r, nan));
    }
    return _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
#endif
}
// f16 weights as bf16 (RoundF16): 32 at a time.
void round_f16_bf16_x86(uint16_t *to, const uint16_t *from, size_t count) {
    size_t i = 0;
    for (; i + 32 <= count; i += 32)
        _mm512_storeu_si512(to + i, f16_bf16_32(_mm512_loadu_si512(from + i)));
    for (; i < count; i++)
        to[i] = f16_bf16(from[i]);
}
#else
// f16 weights as bf16 (RoundF16): 16 at a time.
void round_f16_bf16_x86(uint16_t *to, const uint16_t *from, size_t count) {
    size_t i = 0;
    for (; i + 16 <= count; i += 16)
        _mm256_storeu_si256((__m256i *)(to + i), f16_bf16_16(from + i));
    for (; i < count; i++)
        to[i] = f16_bf16(from[i]);
}
#endif

#ifdef USE_AVX512
// One step of 16 lanes: vdpbf16ps, which adds the product of the words' high halves to each lane,
// then that of their low halves, each rounded to nearest (Intel's SDM; subnormal numbers read and
// written as zero); without AVX512-BF16 the two fused multiply-adds it does.
static inline __m512 bf16_step16(__m512 acc, __m512i w, __m512i x) {
#ifdef USE_AVX512_BF16
    return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
#else
    const __m512i high = _mm512_set1_epi32((int)0xffff0000);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(w, high)),
                          _mm512_castsi512_ps(_mm512_and_si512(x, high)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)),
                           acc);
#endif
}

#endif

// The lane mask (all bits set) of the first k of 8 lanes, for vmaskmov loads and stores at ragged ends.
static inline __m256i first_lanes8(int k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The first k of 8 floats at p (the rest 0), and stored back: plain moves when all 8 are real.
// A masked store (vmaskmovps) is a slow microcoded sequence on some cores (AMD's among them), so the
// prefill tiles, which load and store their outputs once per call, keep it for the ragged edges.
static inline __m256 load_first8(const float *p, int k) {
    return k >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, first_lanes8(k));
}
static inline void store_first8(float *p, int k, __m256 v) {
    if (k >= 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, first_lanes8(k), v);
}

// ---------------------------------------------------------------------------------------------
// Decode: DOT_ROWS = 4 weight rows at once (rows r, r + step, ..., chosen by matvec) against one
// activation row, in 256-bit vectors (the 512-bit versions follow), for each group of a run
// (dot_rows_plain in kernels_decode.c says what a run is). Four rows far apart keep four streams
// of the weights in flight, where one row at a time is one stream; each activation vector loaded
// serves the four rows. Software prefetch only where a gain was measured, q4_0 (both widths) and
// f32_r16 / f16_r16: on four plain streams it only slowed them down (docs/speed.md, "Four rows at a
// time").

// AVX-512 machines with VNNI run the 512-bit versions further down; -DDECODE_256 keeps the 256-bit
// ones there too (for comparing the two).
#if defined(USE_AVX512_VNNI) && !defined(DECODE_256)
#define DECODE_512 1
#endif

// The decode hook (kernels_internal.h): each token's q8_0 activations arranged once more for the
// q4_0 dot products. Per token: its q with each group of SPLIT_GROUP blocks split in halves, the
// values 0-15 of each block of the group, then the values 16-31 of each (for two blocks: [b 0-15,
// b+1 0-15, b 16-31, b+1 16-31]), the order q4_0's low and high nibbles have in one vector load of
// the weights. A last group of fewer blocks stays as it is.
#ifdef DECODE_512
#define SPLIT_GROUP 4 // dots_q4_512 reads four blocks' nibbles per load
#else
#define SPLIT_GROUP 2
#endif

size_t q4_prep_bytes(size_t cp) { return cp; }

int8_t *q4_prep(int8_t *prep, const QuantizedRows *qx, int n, size_t cp) {
    const size_t nb = cp / Q8_BLOCK, half = Q8_BLOCK / 2;
    for (size_t t = 0; t < (size_t)n; t++) {
        const int8_t *q = qx->q + t * cp;
        int8_t *p = prep + t * q4_prep_bytes(cp);
        size_t b = 0;
        for (; b + SPLIT_GROUP <= nb; b += SPLIT_GROUP) // blocks b .. b + SPLIT_GROUP - 1
            for (size_t j = 0; j < SPLIT_GROUP; j++) {
                memcpy(p + b * Q8_BLOCK + j * half, q + (b + j) * Q8_BLOCK, half);
                memcpy(p + b * Q8_BLOCK + (SPLIT_GROUP + j) * half, q + (b + j) * Q8_BLOCK + half, half);
            }
        memcpy(p + b * Q8_BLOCK, q + b * Q8_BLOCK, (nb - b) * Q8_BLOCK);
    }
    return prep;
}

// The rows of a group, set up in one place for every dot product below. A run's matrix as its
// groups read it: where its values and its scales (q4_0) begin, the bytes of a stored row of
// each, and how far apart a group's rows are (set up once per run).
typedef struct {
    const char *w, *d;
    size_t w_row, d_row;
    int rows, step;
} RunRows;

static inline RunRows run_rows(const Matrix *m, int step) {
    return (RunRows){m->data, m->scale, row_bytes(m->dtype, m->cols), row_scale_bytes(m->dtype, m->cols),
                     m->rows, step};
}

// Where a row's values or scales begin, as the matrix's type reads them.
typedef union {
    const char *at;
    const float *f32;
    const _Float16 *f16;
    const int8_t *i8;
    const uint8_t *u8;
} Row;

// Group r: rows r, r + step, ..., DOT_ROWS of them; past the end of the matrix the last real row
// again, whose sums are not stored, so a row is summed in the same order whichever group it falls
// in. Sets where each row's values (w) and scales (d; NULL: f32 and f16 have none) begin; returns
// how many rows are real.
static inline int group_at(const RunRows *a, int r, Row w[DOT_ROWS], Row d[DOT_ROWS]) {
    const int nr = group_rows(a->rows, r, a->step);
    for (int k = 0; k < DOT_ROWS; k++) {
        const size_t row = (size_t)(r + (k < nr ? k : nr - 1) * a->step);
        w[k].at = a->w + row * a->w_row;
        if (d) d[k].at = a->d + row * a->d_row;
    }
    return nr;
}

// q8_0_r16 and bf16_r16 (kernels_internal.h): group r of a run is the R16-row groups r, r + step,
// .., DOT_ROWS of them; past the end of the matrix the last real one again, whose sums are not
// stored. Sets where each begins; returns how many are real.
static inline int r16_group_at(const Matrix *m, int r, int step, const uint8_t *g[DOT_ROWS]) {
    const int ng = group_rows(r16_groups(m->rows), r, step);
    for (int k = 0; k < DOT_ROWS; k++)
        g[k] = (const uint8_t *)m->data + (size_t)(r + (k < ng ? k : ng - 1) * step) * group_bytes(m->dtype, m->cols);
    return ng;
}
// K-quants (kernels_internal.h has their bits), DOT_ROWS rows at a time against x quantized in blocks
// of QK_K, in 256-bit vectors (with AVX-512 VNNI in 512-bit ones, below). Per block of
// QK_K and row, dot_k_plain's integers: per sub-block its 32 products summed in pairs (vpmaddubsw) and
// the pairs times the sub-block's scale (vpmaddwd: q6_K's two scales of 16, one per 128-bit half),
// added into eight int32 lanes; q4_K's and q5_K's mins times x's sums of 32 likewise. Then the four
// rows' lanes summed across (vphaddd: any order, the sums being exact) into one lane per row, and
// dot_k_plain's float step for the four rows at once, its products and difference rounded as it
// rounds them (no fused multiply-add): the same bits. The scales come out of their 12 bytes as 32-bit
// words: bytes 0-3 hold the scales of sub-blocks 0-3 in their low 6 bits, 4-7 the mins; byte 8 + k's
// nibbles the low bits of sub-block 4 + k's, the top 2 bits of bytes k and 4 + k their high bits.
static inline void k_scales8(const uint8_t *s, int16_t sc[8], __m256i *mn) {
    uint32_t a, b, c;
    memcpy(&a, s, 4), memcpy(&b, s + 4, 4), memcpy(&c, s + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, lo2 = 0x03030303;
    const uint32_t sc4 = (c & lo4) | ((a >> 6) & lo2) << 4, m4 = (c >> 4 & lo4) | ((b >> 6) & lo2) << 4;
    _mm_storeu_si128((__m128i *)sc, _mm_cvtepu8_epi16(_mm_setr_epi32((int)(a & lo6), (int)sc4, 0, 0)));
    *mn = _mm256_cvtepu8_epi32(_mm_setr_epi32((int)(b & lo6), (int)m4, 0, 0));
}

// The four rows' int32 lanes summed, one row per lane of the result.
static inline __m128i k_sum4(const __m256i v[DOT_ROWS]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// x's sums of 32 of block B, sub-blocks 0-7 in order: pairs of its sums of K_SUM (vphaddd pairs them
// within 128-bit halves; the permute puts the halves' pairs back in order).
static inline __m256i k_x_sums32(const QuantizedRow *x, int B) {
    const int32_t *s = x->sum + (size_t)B * (QK_K / K_SUM);
    const __m256i lo = _mm256_loadu_si256((const __m256i *)s), hi = _mm256_loadu_si256((const __m256i *)(s + 8));
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xd8);
}

// dot_k_plain's float step for the four rows at once (one per lane), rounded as it rounds: acc + dx
// (d S - dmin M); q6_K's acc + dx (d S) (M NULL).
static inline __m128 k_step(__m128 acc, float dx, __m128 d, __m128 dmin, const __m256i S[DOT_ROWS], const __m256i *M) {
    const __m128 ds = _mm_mul_ps(d, _mm_cvtepi32_ps(k_sum4(S)));
    const __m128 v = M ? _mm_sub_ps(ds, _mm_mul_ps(dmin, _mm_cvtepi32_ps(k_sum4(M)))) : ds;
    return _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(dx), v));
}

#ifdef DECODE_512
// With AVX-512 VNNI the same in 512-bit vectors: the same integers, so the same bits.
// A 64-byte load of a q4_K or q5_K row is two 32-byte runs of qs: its low nibbles are sub-blocks 2c and
// 2c + 2, its high ones 2c + 1 and 2c + 3, met by x's two runs of 32 for those sub-blocks; per 64
// values vpmaddubsw makes pairs and vpdpwssd adds them times their sub-block's scale (a vector of the
// two scales, 16 lanes each, vpermw from the eight). q6_K's 64 values per load are in order (the low
// nibbles of 64 bytes of ql are quarters 0 and 1 of a half, the high ones 2 and 3); there is no
// 512-bit vpsignb, so its bits go in unsigned (0-63) and the offset comes off after:
// S = sum_g s_g sum q x - 32 sum_g s_g sum_g(x), x's sums of 16 times the scales (vpmulld).
static inline __m256i fold512(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

// x's runs of 32 for sub-blocks a and b of block B, side by side.
static inline __m512i x_pair(const int8_t *xq, int a, int b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(xq + 32 * a))),
                              _mm256_loadu_si256((const __m256i *)(xq + 32 * b)), 1);
}

// The first 16 bytes of the four rows' blocks (d, dmin and the 12 bytes of scales) side by side, one
// row per 128-bit lane, made into each row's eight scales then eight mins, one byte each: scales
// 0-3 are bytes a (4-7) & 63, mins 0-3 bytes b (8-11) & 63, scales 4-7 the low nibbles of bytes c
// (12-15) topped with a's high 2 bits, mins 4-7 c's high nibbles topped with b's (vpshufb puts a, c, b,
// c and 0, a, 0, b side by side; k_scales8 does the same for one row in scalar code). *dd: the rows'
// d and dmin, d0 dmin0 d1 dmin1 ...
static inline __m512i k_scales_4rows(const Row w[DOT_ROWS], size_t at, __m256 *dd) {
    __m512i h = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w[0].u8 + at)));
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(w[1].u8 + at)), 1);
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(w[2].u8 + at)), 2);
    h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(w[3].u8 + at)), 3);
    *dd = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), h)));
    const __m512i acbc = _mm512_shuffle_epi8(h, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
    const __m512i tops = _mm512_shuffle_epi8(h, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
    const __m512i low = _mm512_mask_blend_epi8(0xf000f000f000f000ULL, acbc, _mm512_srli_epi16(acbc, 4));
    const __m512i keep = _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    return _mm512_or_si512(_mm512_and_si512(low, keep), _mm512_and_si512(_mm512_srli_epi16(tops, 2), _mm512_set1_epi8(0x30)));
}

static inline __m128 k45_rows(const Row w[DOT_ROWS], const QuantizedRow *x, int nsb, const int five) {
    const size_t bytes = five ? 176 : 144;
    const __m512i nib = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    // vpermw indices: the scales of sub-blocks (a, b) to lanes 0-15 and 16-31, for (0, 2), (1, 3), (4, 6),
    // (5, 7), from a table of two rows' scales and mins as int16: the first row's (0-15), the second's (+16)
    __m512i pick[2][4];
    for (int v = 0; v < 4; v++) {
        const int a = (v / 2) * 4 + v % 2;
        for (int r = 0; r < 2; r++)
            pick[r][v] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(a + 16 * r))),
                                            _mm256_set1_epi16((short)(a + 2 + 16 * r)), 1);
    }
    // q5_K's qh bit of each: bits 2c, 2c + 2 (low nibbles) and 2c + 1, 2c + 3 (high), per half of the vector
    const __m512i bit[4] = {_mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(4), 1),
                            _mm512_inserti64x4(_mm512_set1_epi8(2), _mm256_set1_epi8(8), 1),
                            _mm512_inserti64x4(_mm512_set1_epi8(16), _mm256_set1_epi8(64), 1),
                            _mm512_inserti64x4(_mm512_set1_epi8(32), _mm256_set1_epi8((char)128), 1)};
    __m128 acc = _mm_setzero_ps();
    for (int B = 0; B < nsb; B++) {
        const int8_t *xq = x->q + (size_t)B * QK_K;
        const __m512i xv[4] = {x_pair(xq, 0, 2), x_pair(xq, 1, 3), x_pair(xq, 4, 6), x_pair(xq, 5, 7)};
        const __m256i xs = k_x_sums32(x, B);
        __m256i S[DOT_ROWS], M[DOT_ROWS];
        __m256 dd;
        const __m512i scales = k_scales_4rows(w, B * bytes, &dd);
        const __m512i table[2] = {_mm512_cvtepu8_epi16(_mm512_castsi512_si256(scales)),
                                  _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(scales, 1))};
        __m128i rows[DOT_ROWS]; // each row's 16 bytes of scales: through memory, since vextracti32x4
        _mm512_storeu_si512((void *)rows, scales); // takes its lane as an immediate, which k is not at -O1
        for (int k = 0; k < DOT_ROWS; k++) {
            const uint8_t *block = w[k].u8 + B * bytes;
            const __m128i row = rows[k];
            M[k] = _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(row, 8)), xs);
            const __m512i sc8 = table[k / 2];
            const uint8_t *qs = block + (five ? Q5K_QS : Q4K_QS);
            __m512i q[4];
            for (int h = 0; h < 2; h++) {
                const __m512i v = _mm512_loadu_si512(qs + 64 * h);
                q[2 * h] = _mm512_and_si512(v, nib), q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            }
            if (five) {
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(block + Q5K_QH)));
                for (int v = 0; v < 4; v++)
                    q[v] = _mm512_mask_add_epi8(q[v], _mm512_test_epi8_mask(qh, bit[v]), q[v], sixteen);
            }
            __m512i sum = _mm512_setzero_si512();
            for (int v = 0; v < 4; v++)
                sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(q[v], xv[v]), _mm512_permutexvar_epi16(pick[k % 2][v], sc8));
            S[k] = fold512(sum);
        }
        const __m256 split = _mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        acc = k_step(acc, x->d[B], _mm256_castps256_ps128(split), _mm256_extractf128_ps(split, 1), S, M);
    }
    return acc;
}

static inline __m128 k6_rows(const Row w[DOT_ROWS], const QuantizedRow *x, int nsb) {
    const __m512i nib = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3);
    // qh's bits for quarters (0, 1) and (2, 3) of a half: shifts per 64-bit lane, one per half of the vector
    const __m512i shift[2] = {_mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6)};
    __m512i pick[4]; // the scales of groups 4v .. 4v + 3 (16 values, 8 lanes each) for the four 64-value runs
    for (int v = 0; v < 4; v++) {
        int16_t idx[32];
        for (int i = 0; i < 32; i++)
            idx[i] = (int16_t)(4 * v + i / 8);
        pick[v] = _mm512_loadu_si512(idx);
    }
    __m128 acc = _mm_setzero_ps();
    for (int B = 0; B < nsb; B++) {
        const int8_t *xq = x->q + (size_t)B * QK_K;
        __m512i xv[4];
        for (int v = 0; v < 4; v++)
            xv[v] = _mm512_loadu_si512(xq + 64 * v);
        const __m512i xs = _mm512_loadu_si512(x->sum + (size_t)B * (QK_K / K_SUM));
        __m256i S[DOT_ROWS];
        float d[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++) {
            const uint8_t *block = w[k].u8 + B * 210;
            const __m128i s8 = _mm_loadu_si128((const __m128i *)(block + Q6K_SCALES));
            const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(s8));
            d[k] = f16_at(block + Q6K_D);
            // the offset: 32 sum_g s_g (x's sum over g), taken off the start
            __m512i sum = _mm512_sub_epi32(_mm512_setzero_si512(),
                                           _mm512_slli_epi32(_mm512_mullo_epi32(_mm512_cvtepi8_epi32(s8), xs), 5));
            for (int h = 0; h < 2; h++) {
                const __m512i l = _mm512_loadu_si512(block + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(block + Q6K_QH + 32 * h)));
                for (int e = 0; e < 2; e++) { // e 0: low nibbles, quarters 0, 1; e 1: high, quarters 2, 3
                    const __m512i lo4 = _mm512_and_si512(e ? _mm512_srli_epi16(l, 4) : l, nib);
                    const __m512i hi2 = _mm512_and_si512(_mm512_srlv_epi64(qh, shift[e]), three);
                    const __m512i q = _mm512_or_si512(lo4, _mm512_slli_epi16(hi2, 4));
                    sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(q, xv[2 * h + e]),
                                              _mm512_permutexvar_epi16(pick[2 * h + e], sc16));
                }
            }
            S[k] = fold512(sum);
        }
        acc = k_step(acc, x->d[B], _mm_loadu_ps(d), _mm_setzero_ps(), S, NULL);
    }
    return acc;
}

#else
// q4_K (five 0) and q5_K (five 1): DOT_ROWS rows w, one sum per row in the lanes of acc.
static inline __m128 k45_rows(const Row w[DOT_ROWS], const QuantizedRow *x, int nsb, const int five) {
    const size_t bytes = five ? 176 : 144;
    const __m256i nib = _mm256_set1_epi8(15), sixteen = _mm256_set1_epi8(16);
    __m128 acc = _mm_setzero_ps();
    for (int B = 0; B < nsb; B++) {
        const int8_t *xq = x->q + (size_t)B * QK_K;
        const __m256i xs = k_x_sums32(x, B);
        int16_t sc[DOT_ROWS][8];
        __m256i S[DOT_ROWS], M[DOT_ROWS];
        float d[DOT_ROWS], dmin[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++) {
            const uint8_t *block = w[k].u8 + B * bytes;
            __m256i mn;
            k_scales8(block + QK_SCALES, sc[k], &mn);
            M[k] = _mm256_mullo_epi32(mn, xs);
            S[k] = _mm256_setzero_si256();
            d[k] = f16_at(block), dmin[k] = f16_at(block + 2);
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) { // sub-blocks 2c (low nibbles) and 2c + 1 (high)
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + 64 * c));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 64 * c + 32));
            const __m256i bit0 = _mm256_set1_epi8((char)(1 << 2 * c)), bit1 = _mm256_set1_epi8((char)(2 << 2 * c));
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++) {
                const uint8_t *block = w[k].u8 + B * bytes;
                const __m256i v = _mm256_loadu_si256((const __m256i *)(block + (five ? Q5K_QS : Q4K_QS) + 32 * c));
                __m256i q0 = _mm256_and_si256(v, nib), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                if (five) { // bits 2c and 2c + 1 of qh: 16 more
                    const __m256i h = _mm256_loadu_si256((const __m256i *)(block + Q5K_QH));
                    q0 = _mm256_or_si256(q0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit0), bit0), sixteen));
                    q1 = _mm256_or_si256(q1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit1), bit1), sixteen));
                }
                const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_set1_epi16(sc[k][2 * c]));
                const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, x1), _mm256_set1_epi16(sc[k][2 * c + 1]));
                S[k] = _mm256_add_epi32(S[k], _mm256_add_epi32(p0, p1));
            }
        }
        acc = k_step(acc, x->d[B], _mm_loadu_ps(d), _mm_loadu_ps(dmin), S, M);
    }
    return acc;
}

// q6_K: DOT_ROWS rows w, one sum per row in the lanes of acc. Its q - 32 is signed: x's sign moves onto
// it (vpsignb) so that vpmaddubsw multiplies |x| (unsigned, at most 127) by it.
static inline __m128 k6_rows(const Row w[DOT_ROWS], const QuantizedRow *x, int nsb) {
    const __m256i nib = _mm256_set1_epi8(15), three = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    __m128 acc = _mm_setzero_ps();
    for (int B = 0; B < nsb; B++) {
        const int8_t *xq = x->q + (size_t)B * QK_K;
        int16_t s16[DOT_ROWS][16];
        __m256i S[DOT_ROWS];
        float d[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++) {
            const uint8_t *block = w[k].u8 + B * 210;
            _mm256_storeu_si256((__m256i *)s16[k], _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(block + Q6K_SCALES))));
            S[k] = _mm256_setzero_si256();
            d[k] = f16_at(block + Q6K_D);
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) { // half h = j / 4, quarter u = j % 4
            const int h = j / 4, u = j % 4;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + 32 * j)), ax = _mm256_abs_epi8(xv);
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++) {
                const uint8_t *block = w[k].u8 + B * 210;
                const __m256i lo = _mm256_loadu_si256((const __m256i *)(block + 64 * h + 32 * (u % 2)));
                const __m256i hi = _mm256_loadu_si256((const __m256i *)(block + Q6K_QH + 32 * h));
                const __m256i low4 = _mm256_and_si256(u < 2 ? lo : _mm256_srli_epi16(lo, 4), nib);
                const __m256i high2 = _mm256_and_si256(_mm256_srli_epi16(hi, 2 * u), three);
                const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low4, _mm256_slli_epi16(high2, 4)), bias);
                const __m256i p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(q, xv));
                const __m256i sc = _mm256_setr_m128i(_mm_set1_epi16(s16[k][8 * h + 2 * u]), _mm_set1_epi16(s16[k][8 * h + 2 * u + 1]));
                S[k] = _mm256_add_epi32(S[k], _mm256_madd_epi16(p, sc));
            }
        }
        acc = k_step(acc, x->d[B], _mm_loadu_ps(d), _mm_setzero_ps(), S, NULL);
    }
    return acc;
}

#endif

static ONE_COPY void dots_k_x86(float *out, const Matrix *m, int r0, int step, int count, const QuantizedRow *xq) {
    const RunRows rows = run_rows(m, step);
    const int nsb = cols_stored(m->dtype, m->cols) / QK_K;
    for (int r = r0; r < r0 + count; r++) { // one group: rows r, r + step, ..
        Row w[DOT_ROWS];
        const int nr = group_at(&rows, r, w, NULL);
        const __m128 acc = m->dtype == DTYPE_GGUF_Q6_K ? k6_rows(w, xq, nsb)
                           : m->dtype == DTYPE_GGUF_Q5_K ? k45_rows(w, xq, nsb, 1)
                                                         : k45_rows(w, xq, nsb, 0);
        float sums[DOT_ROWS];
        _mm_storeu_ps(sums, acc);
        for (int k = 0; k < nr; k++)
            out[r + k * step] = sums[k];
    }
}

// x's pair of columns p (rounded to bf16) in every 32-bit lane: the word a bf16_r16 step multiplies
// 16 rows' words by.
static inline int32_t br16_x_word(const uint16_t *x, int p) {
    int32_t word;
    memcpy(&word, x + 2 * p, sizeof word);
    return word;
}
// The 16 sums of each of a run's ng real groups (group k: rows (r + k step) R16 ..) into out, the last
// group's padding rows not stored: from two 8-lane vectors a group, or one 16-lane one.
#ifndef DECODE_512
static inline void store_groups8(float *out, const Matrix *m, int r, int step, int ng, __m256 acc[DOT_ROWS][2]) {
    for (int k = 0; k < ng; k++) {
        const int first = (r + k * step) * R16;
        float sums[R16];
        _mm256_storeu_ps(sums, acc[k][0]);
        _mm256_storeu_ps(sums + 8, acc[k][1]);
        for (int i = 0; i < R16 && first + i < m->rows; i++)
            out[first + i] = sums[i];
    }
}
#else
static inline void store_groups16(float *out, const Matrix *m, int r, int step, int ng, const __m512 acc[DOT_ROWS]) {
    for (int k = 0; k < ng; k++) {
        const int first = (r + k * step) * R16, real = m->rows - first;
        _mm512_mask_storeu_ps(out + first, real >= R16 ? (__mmask16)0xFFFF : (__mmask16)((1u << real) - 1), acc[k]);
    }
}
#endif

// f32_r16 and f16_r16 in their order (kernels_internal.h): per column, a group's 16 rows (64 bytes;
// f16: 32, widened exactly by vcvtph2ps) times x's value broadcast, one fused multiply-add into
// each row's sum; the four groups of a run, one from each quarter, side by side (four streams, each
// broadcast serving all four). Each lane one row's sum from start to end, as prefill's tiles sum it:
// no sum across lanes. In two 8-lane vectors a group, or (DECODE_512) one 16-lane one.
// Each group's stream asked for R16F_AHEAD bytes ahead, once per 64-byte line: one core's four
// streams widened from f16 leave the hardware prefetcher behind (docs/speed.md, "f32 and f16 in
// 16-row groups", has the distances tried).
enum { R16F_AHEAD = 2048 };
static inline void r16f_ask_ahead(const uint8_t *const g[DOT_ROWS], int c, int per_line) {
    if (c % per_line == 0)
        for (int k = 0; k < DOT_ROWS; k++)
            _mm_prefetch((const char *)g[k] + (size_t)c * 64 / per_line + R16F_AHEAD, _MM_HINT_T0);
}
static inline __attribute__((always_inline)) void f32r16_runs(float *out, const Matrix *m, int r0, int step, int count,
                                                              const float *x, const int f16) {
    const int cols = m->cols, per_line = f16 ? 2 : 1; // columns of a group per 64-byte line
    for (int r = r0; r < r0 + count; r++) { // one group: R16-row groups r, r + step, ..
        const uint8_t *g[DOT_ROWS];
        const int ng = r16_group_at(m, r, step, g);
#ifdef DECODE_512
        __m512 acc[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int c = 0; c < cols; c++) {
            r16f_ask_ahead(g, c, per_line);
            const __m512 xc = _mm512_set1_ps(x[c]);
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++)
                acc[k] = _mm512_fmadd_ps(
                    f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const _Float16 *)g[k] + (size_t)c * R16)))
                        : _mm512_loadu_ps((const float *)g[k] + (size_t)c * R16),
                    xc, acc[k]);
        }
        store_groups16(out, m, r, step, ng, acc);
#else
        __m256 acc[DOT_ROWS][2];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k][0] = acc[k][1] = _mm256_setzero_ps();
#pragma GCC unroll 2
        for (int c = 0; c < cols; c++) {
            r16f_ask_ahead(g, c, per_line);
            const __m256 xc = _mm256_set1_ps(x[c]);
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++)
                for (int h = 0; h < 2; h++)
                    acc[k][h] = _mm256_fmadd_ps(f16 ? half8((const _Float16 *)g[k] + (size_t)c * R16 + 8 * h)
                                                    : _mm256_loadu_ps((const float *)g[k] + (size_t)c * R16 + 8 * h),
                                                xc, acc[k][h]);
        }
        store_groups8(out, m, r, step, ng, acc);
#endif
    }
}
static ONE_COPY void dots_f32r16_x86(float *out, const Matrix *m, int r0, int step, int count, const float *x) {
    f32r16_runs(out, m, r0, step, count, x, 0);
}
static ONE_COPY void dots_f16r16_x86(float *out, const Matrix *m, int r0, int step, int count, const float *x) {
    f32r16_runs(out, m, r0, step, count, x, 1);
}

// q4_0, both widths: each of a group's rows asked for Q4_AHEAD blocks on (2 KiB of nibbles, 256
// bytes of scales; past its end: the next group's), 8 blocks (128 bytes of each row) per call. The
// scales are a second, slow stream per row (2 bytes a block) that the hardware prefetcher leaves
// behind; asking for both, this far ahead, is what brought the products close to plain reads of the
// same bytes (bench/stepread; the figures and the distances tried: docs/speed.md, "Where a step's
// reads go").
enum { Q4_AHEAD = 128 };
static inline void q4_ask_ahead(const Row w[DOT_ROWS], const Row dw[DOT_ROWS], int b) {
#pragma GCC unroll 4
    for (int k = 0; k < DOT_ROWS; k++) {
        const uint8_t *ahead = w[k].u8 + (size_t)(b + Q4_AHEAD) * Q4_BLOCK_BYTES;
        _mm_prefetch((const char *)ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)ahead + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(dw[k].f16 + b + Q4_AHEAD), _MM_HINT_T0);
    }
}

// q4_0's decode adds a row's blocks as prefill's integer tiles do (kernel_q8_x86: each block's exact
// integer sum, then sum * (dw * dx) into the row's float sum by one fused multiply-add, block after
// block), so a prompt's logits are its tokens' one at a time, bit for bit. The vector loops below
// sum each block in several int32 lanes; these put a group's four rows side by side for that step.
// block_sums4: in each 128-bit lane of s[k] the four partial sums of one block of row k; returns in
// that lane the block's four whole sums, row k's in 32-bit lane k (exact: integers).
static inline __m256i block_sums4(const __m256i s[DOT_ROWS]) {
    const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(s[0], s[1]), _mm256_unpackhi_epi32(s[0], s[1]));
    const __m256i c = _mm256_add_epi32(_mm256_unpacklo_epi32(s[2], s[3]), _mm256_unpackhi_epi32(s[2], s[3]));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, c), _mm256_unpackhi_epi64(a, c));
}
#ifdef DECODE_512
// block_sums4 in each 128-bit lane of four 512-bit vectors: four blocks' sums of the four rows.
static inline __m512i block_sums4_512(const __m512i s[DOT_ROWS]) {
    const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
    const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, c), _mm512_unpackhi_epi64(a, c));
}
#endif
// The four rows' dw * dx of blocks b .. b + 7: dd[j] holds block b + j's in its low 128 bits, block
// b + 4 + j's in its high ones (each row's eight, transposed within halves).
static inline void block_scales4(__m256 dd[4], const Row dw[DOT_ROWS], const QuantizedRow *x, int b) {
    const __m256 dx = _mm256_loadu_ps(x->d + b);
    __m256 d[DOT_ROWS];
    for (int k = 0; k < DOT_ROWS; k++)
        d[k] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(dw[k].f16 + b))), dx);
    const __m256 t0 = _mm256_unpacklo_ps(d[0], d[1]), t1 = _mm256_unpackhi_ps(d[0], d[1]);
    const __m256 t2 = _mm256_unpacklo_ps(d[2], d[3]), t3 = _mm256_unpackhi_ps(d[2], d[3]);
    dd[0] = _mm256_shuffle_ps(t0, t2, 0x44), dd[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
    dd[2] = _mm256_shuffle_ps(t1, t3, 0x44), dd[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}
// Block j of eight (dd as block_scales4 leaves them): the four rows' dw * dx.
static inline __m128 block_scale(const __m256 dd[4], int j) {
    return j < 4 ? _mm256_castps256_ps128(dd[j]) : _mm256_extractf128_ps(dd[j - 4], 1);
}
// The blocks b .. nb-1 of a row that the vector loop left, from its float sum on, in the same steps.
static inline float q4_rest(float sum, const uint8_t *w, const _Float16 *dw, const QuantizedRow *x, int b, int nb) {
    for (; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++)
            s += q4_at(w + b * Q4_BLOCK_BYTES, i) * x->q[b * Q8_BLOCK + i];
        sum = fmaf((float)s, (float)dw[b] * x->d[b], sum);
    }
    return sum;
}
// The group's four sums (acc, row k in lane k) finished with the blocks past b, stored for its real rows.
static inline void q4_store(float *out, int r, int step, int nr, __m128 acc, const Row w[DOT_ROWS],
                            const Row dw[DOT_ROWS], const QuantizedRow *xr, int b, int nb) {
    float sums[DOT_ROWS];
    _mm_storeu_ps(sums, acc);
    for (int k = 0; k < nr; k++)
        out[r + k * step] = q4_rest(sums[k], w[k].u8, dw[k].f16, xr, b, nb);
}

#ifndef DECODE_512
// q4_0 . q8_0, eight blocks per step. One 32-byte load holds the nibbles of two blocks b, b+1;
// masking gives their values 0-15 ("lo") and, shifted, 16-31 ("hi"), which x's split layout
// (q4_prep) matches byte for byte. vpmaddubsw multiplies the unsigned q in [0, 15] by the signed x
// and adds pairs into 16 bits; lo's and hi's sums are added there too (at most 4 * 15 * 127: no
// saturation), vpmaddwd adds pairs into 8 int32 lanes, lanes 0-3 block b's and 4-7 block b+1's.
// The four rows' lanes become each block's sums (block_sums4), the -8 of every weight comes off as
// 8 sum(x_b), and the two blocks are added to the rows' sums in order.
static ONE_COPY void dots_q4_x86(float *out, const Matrix *m, int r0, int step, int count, const QuantizedRow *xr) {
    const int nb = cols_stored(m->dtype, m->cols) / Q8_BLOCK;
    const RunRows rows = run_rows(m, step);
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int r = r0; r < r0 + count; r++) { // one group: rows r, r + step, ..
        Row w[DOT_ROWS], dw[DOT_ROWS];
        const int nr = group_at(&rows, r, w, dw);
        __m128 acc = _mm_setzero_ps(); // row k's sum in lane k
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            q4_ask_ahead(w, dw, b);
            const __m256i minus8 = _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(xr->sum + b)), 3);
            __m256 dd[4];
            block_scales4(dd, dw, xr, b);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) { // blocks b + 2p and b + 2p + 1
                const int8_t *xp = xr->prep + (size_t)(b + 2 * p) * Q8_BLOCK;
                const __m256i xlo = _mm256_loadu_si256((const __m256i *)xp);
                const __m256i xhi = _mm256_loadu_si256((const __m256i *)(xp + 32));
                const __m256i sel =
                    _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
                __m256i s[DOT_ROWS];
#pragma GCC unroll 4
                for (int k = 0; k < DOT_ROWS; k++) {
                    const uint8_t *wb = w[k].u8 + (size_t)(b + 2 * p) * Q4_BLOCK_BYTES;
                    const __m256i v = _mm256_loadu_si256((const __m256i *)wb);
                    const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi));
                    s[k] = _mm256_madd_epi16(s16, ones);
                }
                const __m256 f = _mm256_cvtepi32_ps(
                    _mm256_sub_epi32(block_sums4(s), _mm256_permutevar8x32_epi32(minus8, sel)));
                acc = _mm_fmadd_ps(_mm256_castps256_ps128(f), block_scale(dd, 2 * p), acc);
                acc = _mm_fmadd_ps(_mm256_extractf128_ps(f, 1), block_scale(dd, 2 * p + 1), acc);
            }
        }
        q4_store(out, r, step, nr, acc, w, dw, xr, b, nb);
    }
}

// q8_0_r16, 256-bit: a 64-byte run of a block (4 columns of 16 rows, q + 128) is two vectors, rows
// 0-7 and 8-15, each multiplied by 4 bytes of x broadcast into 8 rows' sums; with 256-bit VNNI
// (vpdpbusd) as stored, from -128 sum(x) on; else as signed bytes (q + 128 xor 0x80 = q) by
// vpmaddubsw's |x| and q * sign(x) (pairs fit int16: 2 * 128 * 127 < 32767), from 0. Then per block
// one multiply-add of each half by its 8 scales times dx. Four groups from the four quarters at once.
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define R16_VNNI256 1
#endif
static inline __m256i dot4x8_r16(__m256i s, __m256i w, __m256i x4, __m256i ax4) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return (void)ax4, _mm256_dpbusd_epi32(s, w, x4);
#elif defined(__AVXVNNI__)
    return (void)ax4, _mm256_dpbusd_avx_epi32(s, w, x4);
#else
    const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
    return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(ax4, _mm256_sign_epi8(q, x4)),
                                                 _mm256_set1_epi16(1)));
#endif
}

static ONE_COPY void dots_r16_x86(float *out, const Matrix *m, int r0, int step, int count, const QuantizedRow *xr) {
    const int nb = cols_stored(m->dtype, m->cols) / Q8_BLOCK;
    for (int r = r0; r < r0 + count; r++) { // one group: R16-row groups r, r + step, ..
        const uint8_t *g[DOT_ROWS];
        const int ng = r16_group_at(m, r, step, g);
        __m256 acc[DOT_ROWS][2];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k][0] = acc[k][1] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const size_t at = (size_t)b * R16_BLOCK_BYTES;
#ifdef R16_VNNI256
            const __m256i start = _mm256_set1_epi32(-128 * xr->sum[b]);
#else
            const __m256i start = _mm256_setzero_si256();
#endif
            __m256i s[DOT_ROWS][2];
            for (int k = 0; k < DOT_ROWS; k++)
                s[k][0] = s[k][1] = start;
#pragma GCC unroll 8
            for (int u = 0; u < Q8_BLOCK / 4; u++) {
                int32_t four;
                memcpy(&four, xr->q + b * Q8_BLOCK + 4 * u, sizeof four);
                const __m256i x4 = _mm256_set1_epi32(four), ax4 = _mm256_sign_epi8(x4, x4);
#pragma GCC unroll 4
                for (int k = 0; k < DOT_ROWS; k++) {
                    const uint8_t *q = g[k] + at + R16 * sizeof(float) + u * R16 * 4;
                    s[k][0] = dot4x8_r16(s[k][0], _mm256_loadu_si256((const __m256i *)q), x4, ax4);
                    s[k][1] = dot4x8_r16(s[k][1], _mm256_loadu_si256((const __m256i *)(q + 32)), x4, ax4);
                }
            }
            const __m256 dx = _mm256_set1_ps(xr->d[b]);
            for (int k = 0; k < DOT_ROWS; k++)
                for (int h = 0; h < 2; h++)
                    acc[k][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[k][h]),
                                                _mm256_mul_ps(_mm256_loadu_ps((const float *)(g[k] + at) + 8 * h), dx),
                                                acc[k][h]);
        }
        store_groups8(out, m, r, step, ng, acc);
    }
}

// bf16_r16 in bf16_r16's order: per pair of columns 64 bytes of a group, the words of rows 0-7 then
// 8-15, two vectors of 8 lanes; x's pair as two broadcast floats (its high and its low column) serves
// the four groups of a run, one from each quarter. Each lane one row's sum from start to end.
static ONE_COPY void dots_br16_x86(float *out, const Matrix *m, int r0, int step, int count, const uint16_t *x) {
    const int pairs = bf16_cols(m->cols) / 2;
    for (int r = r0; r < r0 + count; r++) { // one group: R16-row groups r, r + step, ..
        const uint8_t *g[DOT_ROWS];
        const int ng = r16_group_at(m, r, step, g);
        __m256 acc[DOT_ROWS][2];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k][0] = acc[k][1] = _mm256_setzero_ps();
#pragma GCC unroll 2
        for (int p = 0; p < pairs; p++) {
            const __m256i xw = _mm256_set1_epi32(br16_x_word(x, p));
            const __m256 xh = bf16_high8(xw), xl = bf16_low8(xw);
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++)
                for (int h = 0; h < 2; h++)
                    acc[k][h] = bf16_step8(
                        acc[k][h], _mm256_loadu_si256((const __m256i *)(g[k] + 64 * (size_t)p + 32 * h)), xh, xl);
        }
        store_groups8(out, m, r, step, ng, acc);
    }
}

void dot_rows_x86(float *out, const Matrix *m, int r, int step, int count, const float *x, const QuantizedRow *xq) {
    switch (m->dtype) {
    case DTYPE_F32_R16:
        dots_f32r16_x86(out, m, r, step, count, x);
        break;
    case DTYPE_F16_R16:
        dots_f16r16_x86(out, m, r, step, count, x);
        break;
    case DTYPE_Q8_0_R16:
        dots_r16_x86(out, m, r, step, count, xq);
        break;
    case DTYPE_BF16_R16:
        dots_br16_x86(out, m, r, step, count, xq->h);
        break;
    case DTYPE_Q4_0:
        dots_q4_x86(out, m, r, step, count, xq);
        break;
    case DTYPE_GGUF_Q4_K:
    case DTYPE_GGUF_Q5_K:
    case DTYPE_GGUF_Q6_K:
        dots_k_x86(out, m, r, step, count, xq);
        break;
    case DTYPE_F32: // file types only, copied at load: matmul refuses them (dtype.h)
    case DTYPE_F16:
    case DTYPE_Q8_0:
    case DTYPE_BF16:
    case DTYPE_GGUF_Q8_0:
    case DTYPE_GGUF_Q4_0:
        break;
    }
}
#else // DECODE_512
// The same four-row dot products in 512-bit vectors, for AVX-512 machines with VNNI (f32 keeps the
// 256-bit one above, which was faster). The bytes in flight are the same; what halves is the
// instructions per byte, which bounds the f16, q8_0_r16 and q4_0 decode on one core once the memory
// keeps up (docs/speed.md has the gain over the 256-bit kernels).

// q4_0: one 64-byte load holds the nibbles of four blocks, whose low nibbles (values 0-15, masked)
// and high ones (16-31, shifted) meet x in the order q4_prep gives groups of four blocks. Two
// vpdpbusd (nibbles unsigned, x signed) sum each block's 32 products into its 128-bit lane; the four
// rows' lanes then become each block's sums (block_sums4_512), the -8 of every weight
// comes off as 8 sum(x_b), and the four blocks are added to the rows' sums in order.
static ONE_COPY void dots_q4_512(float *out, const Matrix *m, int r0, int step, int count, const QuantizedRow *xr) {
    const int nb = cols_stored(m->dtype, m->cols) / Q8_BLOCK;
    const RunRows rows = run_rows(m, step);
    const __m512i low = _mm512_set1_epi8(15);
    const __m512i sel0 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i sel1 = _mm512_add_epi32(sel0, _mm512_set1_epi32(4));
    for (int r = r0; r < r0 + count; r++) { // one group: rows r, r + step, ..
        Row w[DOT_ROWS], dw[DOT_ROWS];
        const int nr = group_at(&rows, r, w, dw);
        __m128 acc = _mm_setzero_ps(); // row k's sum in lane k
        int b = 0;
        for (; b + 8 <= nb; b += 8) {
            const __m256i sum = _mm256_loadu_si256((const __m256i *)(xr->sum + b));
            const __m512i sum8 = _mm512_castsi256_si512(_mm256_slli_epi32(sum, 3)); // 8 sum(x_b)
            const __m512i minus8[2] = {_mm512_permutexvar_epi32(sel0, sum8), _mm512_permutexvar_epi32(sel1, sum8)};
            __m256 dd[4];
            block_scales4(dd, dw, xr, b);
            q4_ask_ahead(w, dw, b);
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) { // blocks b + 4g .. b + 4g + 3
                const int8_t *xs = xr->prep + (size_t)(b + 4 * g) * Q8_BLOCK;
                const __m512i xlo = _mm512_loadu_si512(xs), xhi = _mm512_loadu_si512(xs + 64);
                __m512i s[DOT_ROWS];
#pragma GCC unroll 4
                for (int k = 0; k < DOT_ROWS; k++) {
                    const __m512i v = _mm512_loadu_si512(w[k].u8 + (size_t)(b + 4 * g) * Q4_BLOCK_BYTES);
                    const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                    s[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
                }
                const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(block_sums4_512(s), minus8[g]));
                acc = _mm_fmadd_ps(_mm512_castps512_ps128(f), block_scale(dd, 4 * g), acc);
                acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 1), block_scale(dd, 4 * g + 1), acc);
                acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 2), block_scale(dd, 4 * g + 2), acc);
                acc = _mm_fmadd_ps(_mm512_extractf32x4_ps(f, 3), block_scale(dd, 4 * g + 3), acc);
            }
        }
        q4_store(out, r, step, nr, acc, w, dw, xr, b, nb);
    }
}

// q8_0_r16: a 64-byte run of a block (4 columns of 16 rows, q + 128) times 4 bytes of x broadcast,
// by vpdpbusd, 8 runs from -128 sum(x) on: the block's 16 integer sums in one vector, with no sum
// across lanes; then one multiply-add by the block's 16 scales times dx. Four groups from the four
// quarters at once (four streams, each broadcast of x serving all four). Lane i of a group's
// vector is row i's sum, block after block in order, as dot_r16_plain adds them.
static ONE_COPY void dots_r16_512(float *out, const Matrix *m, int r0, int step, int count, const QuantizedRow *xr) {
    const int nb = cols_stored(m->dtype, m->cols) / Q8_BLOCK;
    for (int r = r0; r < r0 + count; r++) { // one group: R16-row groups r, r + step, ..
        const uint8_t *g[DOT_ROWS];
        const int ng = r16_group_at(m, r, step, g);
        __m512 acc[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k] = _mm512_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const size_t at = (size_t)b * R16_BLOCK_BYTES;
            __m512i s[DOT_ROWS];
            for (int k = 0; k < DOT_ROWS; k++)
                s[k] = _mm512_set1_epi32(-128 * xr->sum[b]);
#pragma GCC unroll 8
            for (int u = 0; u < Q8_BLOCK / 4; u++) {
                int32_t four;
                memcpy(&four, xr->q + b * Q8_BLOCK + 4 * u, sizeof four);
                const __m512i x4 = _mm512_set1_epi32(four);
#pragma GCC unroll 4
                for (int k = 0; k < DOT_ROWS; k++)
                    s[k] = _mm512_dpbusd_epi32(s[k], _mm512_loadu_si512(g[k] + at + R16 * sizeof(float) + u * R16 * 4),
                                               x4);
            }
            const __m512 dx = _mm512_set1_ps(xr->d[b]);
            for (int k = 0; k < DOT_ROWS; k++)
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[k]),
                                         _mm512_mul_ps(_mm512_loadu_ps((const float *)(g[k] + at)), dx), acc[k]);
        }
        store_groups16(out, m, r, step, ng, acc);
    }
}

// bf16_r16 in bf16_r16's order: one vdpbf16ps per 64 bytes of a group (a pair of columns of its 16
// rows) with x's pair broadcast, which serves the four groups of a run; lane i of a group's vector is
// row i's sum, pair after pair: no sum across lanes at the end.
static ONE_COPY void dots_br16_512(float *out, const Matrix *m, int r0, int step, int count, const uint16_t *x) {
    const int pairs = bf16_cols(m->cols) / 2;
    for (int r = r0; r < r0 + count; r++) { // one group: R16-row groups r, r + step, ..
        const uint8_t *g[DOT_ROWS];
        const int ng = r16_group_at(m, r, step, g);
        __m512 acc[DOT_ROWS];
        for (int k = 0; k < DOT_ROWS; k++)
            acc[k] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int p = 0; p < pairs; p++) {
            const __m512i xw = _mm512_set1_epi32(br16_x_word(x, p));
#pragma GCC unroll 4
            for (int k = 0; k < DOT_ROWS; k++)
                acc[k] = bf16_step16(acc[k], _mm512_loadu_si512(g[k] + 64 * (size_t)p), xw);
        }
        store_groups16(out, m, r, step, ng, acc);
    }
}

void dot_rows_x86(float *out, const Matrix *m, int r, int step, int count, const float *x, const QuantizedRow *xq) {
    switch (m->dtype) {
    case DTYPE_F32_R16:
        dots_f32r16_x86(out, m, r, step, count, x);
        break;
    case DTYPE_F16_R16:
        dots_f16r16_x86(out, m, r, step, count, x);
        break;
    case DTYPE_Q8_0_R16:
        dots_r16_512(out, m, r, step, count, xq);
        break;
    case DTYPE_BF16_R16:
        dots_br16_512(out, m, r, step, count, xq->h);
        break;
    case DTYPE_Q4_0:
        dots_q4_512(out, m, r, step, count, xq);
        break;
    case DTYPE_GGUF_Q4_K:
    case DTYPE_GGUF_Q5_K:
    case DTYPE_GGUF_Q6_K:
        dots_k_x86(out, m, r, step, count, xq);
        break;
    case DTYPE_F32: // file types only, copied at load: matmul refuses them (dtype.h)
    case DTYPE_F16:
    case DTYPE_Q8_0:
    case DTYPE_BF16:
    case DTYPE_GGUF_Q8_0:
    case DTYPE_GGUF_Q4_0:
        break;
    }
}
#endif // DECODE_512

// ---------------------------------------------------------------------------------------------
// Prefill: packing and tiles

#ifdef USE_AVX512
// The mask of the first k of 16 lanes (none for k <= 0, all for k >= 16): for the ragged ends.
static inline __mmask16 first_lanes(int k) { return k >= 16 ? 0xFFFF : k <= 0 ? 0 : (__mmask16)((1u << k) - 1); }

// The f32 microkernel: 12 tokens x 32 rows of outputs in 24 registers; per column, 2 weight loads
// and 12 broadcasts feed 24 fused multiply-adds.
ONE_COPY void kernel_f32_x86(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc,
                             int accumulate) {
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
}

// bf16_r16 (kernels_internal.h, TileBR16): a tile of NG groups x MT tokens, NG x MT vectors of 16
// sums; per pair of columns NG 64-byte loads of weights and MT broadcasts of x's pair, each weight
// vector serving MT tokens and each broadcast NG groups. No lanes to sum at the end: a vector is 16
// rows' outputs for one token, stored as they are. The tokens' x (MT x 4 KB at 2048 columns) stays
// in L1 and the item's groups in L2; nothing is cut into chunks (5632 columns run at the rate of 2048:
// docs/speed.md). Called with constants for NG and MT, so each variant keeps its sums in registers.
static inline __attribute__((always_inline)) void br16_tile(float *out, size_t ldo, const uint16_t *w, int nr,
                                                            const uint16_t *x, size_t ldx, int cols, const int NG,
                                                            const int MT) {
    const size_t gv = br16_group_values(cols);
    const int pairs = bf16_cols(cols) / 2;
    __m512 c[BR16_NG][BR16_MT];
    for (int g = 0; g < NG; g++)
        for (int t = 0; t < MT; t++)
            c[g][t] = _mm512_setzero_ps();
    for (int p = 0; p < pairs; p++) {
        __m512i wv[BR16_NG];
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++)
            wv[g] = _mm512_loadu_si512(w + g * gv + (size_t)p * 2 * R16);
#pragma GCC unroll 6
        for (int t = 0; t < MT; t++) {
            const __m512i xw = _mm512_set1_epi32(br16_x_word(x + t * ldx, p));
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++)
                c[g][t] = bf16_step16(c[g][t], wv[g], xw);
        }
    }
    for (int t = 0; t < MT; t++)
        for (int g = 0; g < NG; g++)
            _mm512_mask_storeu_ps(out + t * ldo + g * R16, first_lanes(nr - g * R16), c[g][t]);
}
static __attribute__((noinline)) void br16_tile_full(float *out, size_t ldo, const uint16_t *w, int nr,
                                                     const uint16_t *x, size_t ldx, int cols) {
    br16_tile(out, ldo, w, nr, x, ldx, cols, BR16_NG, BR16_MT);
}
static __attribute__((noinline)) void br16_tile_token(float *out, size_t ldo, const uint16_t *w, int nr,
                                                      const uint16_t *x, size_t ldx, int cols) {
    br16_tile(out, ldo, w, nr, x, ldx, cols, BR16_NG, 1);
}
static __attribute__((noinline)) void br16_tile_group(float *out, size_t ldo, const uint16_t *w, int nr,
                                                      const uint16_t *x, size_t ldx, int cols) {
    br16_tile(out, ldo, w, nr, x, ldx, cols, 1, BR16_MT);
}
static __attribute__((noinline)) void br16_tile_one(float *out, size_t ldo, const uint16_t *w, int nr,
                                                    const uint16_t *x, size_t ldx, int cols) {
    br16_tile(out, ldo, w, nr, x, ldx, cols, 1, 1);
}

// The panel: whole tiles where it has BR16_NG groups and BR16_MT tokens, else a group or a token at a
// time (the end of a matrix; a prompt's last tokens).
ONE_COPY void kernel_br16_x86(float *out, size_t ldo, const uint16_t *w, int nr, const uint16_t *x, size_t ldx,
                              int nt, int cols) {
    const size_t gv = br16_group_values(cols);
    if (nr == BR16_ROWS) {
        if (nt == BR16_MT)
            br16_tile_full(out, ldo, w, nr, x, ldx, cols);
        else
            for (int t = 0; t < nt; t++)
                br16_tile_token(out + t * ldo, ldo, w, nr, x + t * ldx, ldx, cols);
        return;
    }
    for (int r = 0; r < nr; r += R16) {
        if (nt == BR16_MT)
            br16_tile_group(out + r, ldo, w + (size_t)(r / R16) * gv, nr - r, x, ldx, cols);
        else
            for (int t = 0; t < nt; t++)
                br16_tile_one(out + t * ldo + r, ldo, w + (size_t)(r / R16) * gv, nr - r, x + t * ldx, ldx, cols);
    }
}
#elif defined(USE_AVX2)
// 16 registers of 8 floats: the tile is done as 2 x 2 blocks of 6 tokens x 16 rows, each with 12
// accumulators, 2 weight vectors and a broadcast (the classic Haswell 6 x 16 kernel). Every loop
// over the accumulators has a constant count and the ragged edges go through lane masks, so the
// compiler keeps the 12 in registers (a loop bounded by nt made it store them after every
// multiply-add: half the speed). Not inlined (ONE_COPY): inside gemm's loops GCC kept a weight vector
// in memory and loaded it again for every multiply-add (docs/speed.md).
ONE_COPY void kernel_f32_x86(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc,
                             int accumulate) {
    for (int j0 = 0; j0 < nr; j0 += 16) {
        for (int t0 = 0; t0 < nt; t0 += 6) {
            __m256 c[6][2];
#pragma GCC unroll 6
            for (int t = 0; t < 6; t++) {
                const int load = accumulate && t0 + t < nt;
                c[t][0] = load ? load_first8(out + (t0 + t) * ldo + j0, nr - j0) : _mm256_setzero_ps();
                c[t][1] = load ? load_first8(out + (t0 + t) * ldo + j0 + 8, nr - j0 - 8) : _mm256_setzero_ps();
            }
            for (int k = 0; k < kc; k++) {
                const __m256 w0 = _mm256_load_ps(wp + k * NR + j0), w1 = _mm256_load_ps(wp + k * NR + j0 + 8);
#pragma GCC unroll 6
                for (int t = 0; t < 6; t++) {
                    const __m256 a = _mm256_broadcast_ss(xp + k * MR + t0 + t);
                    c[t][0] = _mm256_fmadd_ps(a, w0, c[t][0]);
                    c[t][1] = _mm256_fmadd_ps(a, w1, c[t][1]);
                }
            }
#pragma GCC unroll 6
            for (int t = 0; t < 6; t++)
                if (t0 + t < nt) {
                    store_first8(out + (t0 + t) * ldo + j0, nr - j0, c[t][0]);
                    store_first8(out + (t0 + t) * ldo + j0 + 8, nr - j0 - 8, c[t][1]);
                }
        }
    }
}

#endif // USE_AVX512 / USE_AVX2

// pack_w_br16 (kernels_prefill.c, pack_w_br16_plain): per pair of columns a group's 64 bytes, as two
// 256-bit vectors (rows 0-7, 8-15), split into the high columns (k even: 2p + 1) and the low ones.
// 256-bit in every vector build: only a build without AVX-512 runs bf16 through the f32 tiles.
ONE_COPY void pack_w_br16_x86(float *wp, const Matrix *m, int r0, int k0, int kc) {
    const size_t gv = br16_group_values(m->cols);
    for (int h = 0; h < NR / R16; h++) {
        const int g = r0 / R16 + h;
        const uint16_t *group = g < r16_groups(m->rows) ? (const uint16_t *)m->data + (size_t)g * gv : NULL;
        for (int k = 0; k < kc; k += 2) {
            float *hi = wp + (size_t)k * NR + h * R16, *lo = hi + NR;
            if (!group) {
                _mm256_store_ps(hi, _mm256_setzero_ps()), _mm256_store_ps(hi + 8, _mm256_setzero_ps());
                _mm256_store_ps(lo, _mm256_setzero_ps()), _mm256_store_ps(lo + 8, _mm256_setzero_ps());
                continue;
            }
            const uint16_t *pair = group + (size_t)(k0 + k) / 2 * 2 * R16;
            const __m256i w0 = _mm256_loadu_si256((const __m256i *)pair), w1 = _mm256_loadu_si256((const __m256i *)(pair + R16));
            _mm256_store_ps(hi, bf16_high8(w0)), _mm256_store_ps(hi + 8, bf16_high8(w1));
            _mm256_store_ps(lo, bf16_low8(w0)), _mm256_store_ps(lo + 8, bf16_low8(w1));
        }
    }
}

#ifdef USE_AVX512_VNNI
// The q8_0 microkernel: a 6-token x 32-row tile; per block of 32 columns the exact integer sums in
// 12 registers (vpdpbusd of 4 bytes of every row against 4 bytes of one token), then added to 12
// float accumulators as sum * (dw * dx), one fused multiply-add, as dots_r16_512 adds a block.
ONE_COPY void kernel_q8_x86(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd,
                            const int32_t *xs, const uint8_t *wq, const float *wd, int kc, int accumulate) {
    const __mmask16 m0 = first_lanes(nr), m1 = first_lanes(nr - 16);
    __m512 c[MR_Q8][2];
    for (int t = 0; t < MR_Q8; t++) {
        const int load = accumulate && t < nt;
        c[t][0] = load ? _mm512_maskz_loadu_ps(m0, out + t * ldo) : _mm512_setzero_ps();
        c[t][1] = load ? _mm512_maskz_loadu_ps(m1, out + t * ldo + 16) : _mm512_setzero_ps();
    }
    for (int b = 0; b < kc / Q8_BLOCK; b++) {
        __m512i s[MR_Q8][2];
        for (int t = 0; t < MR_Q8; t++)
            s[t][0] = s[t][1] = _mm512_set1_epi32(xs[b * MR_Q8 + t]);
#pragma GCC unroll 8
        for (int u = 0; u < Q8_BLOCK / 4; u++) { // the 8 groups of 4 bytes of the block
            const int k4 = b * (Q8_BLOCK / 4) + u;
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
            c[t][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][0]), _mm512_mul_ps(d0, dx), c[t][0]);
            c[t][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][1]), _mm512_mul_ps(d1, dx), c[t][1]);
        }
    }
    for (int t = 0; t < nt; t++) {
        _mm512_mask_storeu_ps(out + t * ldo, m0, c[t][0]);
        _mm512_mask_storeu_ps(out + t * ldo + 16, m1, c[t][1]);
    }
}

// The K-quants' integer half (kernels_internal.h, TileK): per group of columns 12 registers of exact
// sums (vpdpbusd, the weights' unsigned bits against x's signed bytes), multiplied by the group's
// 32 row scales (vpmulld) into 12 more, stored per block of QK_K.
ONE_COPY void kernel_k_x86(int32_t *S, int nsb, int group, const int8_t *xq, const uint8_t *wq, const int32_t *sc) {
    for (int b = 0; b < nsb; b++) {
        __m512i s[MR_Q8][2];
        for (int t = 0; t < MR_Q8; t++)
            s[t][0] = s[t][1] = _mm512_setzero_si512();
        for (int g = b * (QK_K / group); g < (b + 1) * (QK_K / group); g++) {
            __m512i p[MR_Q8][2];
            for (int t = 0; t < MR_Q8; t++)
                p[t][0] = p[t][1] = _mm512_setzero_si512();
            for (int k4 = g * group / 4; k4 < (g + 1) * group / 4; k4++) {
                const __m512i w0 = _mm512_load_si512(wq + k4 * NR * 4), w1 = _mm512_load_si512(wq + k4 * NR * 4 + 64);
                for (int t = 0; t < MR_Q8; t++) {
                    int32_t four;
                    memcpy(&four, xq + (k4 * MR_Q8 + t) * 4, 4);
                    const __m512i a = _mm512_set1_epi32(four);
                    p[t][0] = _mm512_dpbusd_epi32(p[t][0], w0, a);
                    p[t][1] = _mm512_dpbusd_epi32(p[t][1], w1, a);
                }
            }
            const __m512i c0 = _mm512_loadu_si512(sc + g * NR), c1 = _mm512_loadu_si512(sc + g * NR + 16);
            for (int t = 0; t < MR_Q8; t++) {
                s[t][0] = _mm512_add_epi32(s[t][0], _mm512_mullo_epi32(p[t][0], c0));
                s[t][1] = _mm512_add_epi32(s[t][1], _mm512_mullo_epi32(p[t][1], c1));
            }
        }
        for (int t = 0; t < MR_Q8; t++) {
            _mm512_storeu_si512(S + ((size_t)b * MR_Q8 + t) * NR, s[t][0]);
            _mm512_storeu_si512(S + ((size_t)b * MR_Q8 + t) * NR + 16, s[t][1]);
        }
    }
}
#elif defined(USE_AVX2)
// The K-quants' integer half without VNNI, 8 rows at a time: the weights' bits are unsigned (at most
// 63), so vpmaddubsw takes them as they are against x's signed bytes (pairs at most 2 * 63 * 127 <
// 32767) and vpmaddwd by ones adds the pairs into int32; per group times the rows' scales.
ONE_COPY void kernel_k_x86(int32_t *S, int nsb, int group, const int8_t *xq, const uint8_t *wq, const int32_t *sc) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nsb; b++)
        for (int r0 = 0; r0 < NR; r0 += 8) {
            __m256i s[MR_Q8];
            for (int t = 0; t < MR_Q8; t++)
                s[t] = _mm256_setzero_si256();
            for (int g = b * (QK_K / group); g < (b + 1) * (QK_K / group); g++) {
                __m256i p[MR_Q8];
                for (int t = 0; t < MR_Q8; t++)
                    p[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
                for (int k4 = g * group / 4; k4 < (g + 1) * group / 4; k4++) {
                    const __m256i w = _mm256_load_si256((const __m256i *)(wq + (k4 * NR + r0) * 4));
#pragma GCC unroll 6
                    for (int t = 0; t < MR_Q8; t++) {
                        int32_t four;
                        memcpy(&four, xq + (k4 * MR_Q8 + t) * 4, 4);
                        p[t] = _mm256_add_epi32(p[t], _mm256_madd_epi16(_mm256_maddubs_epi16(w, _mm256_set1_epi32(four)), ones));
                    }
                }
                const __m256i c = _mm256_loadu_si256((const __m256i *)(sc + g * NR + r0));
                for (int t = 0; t < MR_Q8; t++)
                    s[t] = _mm256_add_epi32(s[t], _mm256_mullo_epi32(p[t], c));
            }
            for (int t = 0; t < MR_Q8; t++)
                _mm256_storeu_si256((__m256i *)(S + ((size_t)b * MR_Q8 + t) * NR + r0), s[t]);
        }
}

// The q8_0 microkernel without VNNI, 8 rows at a time: one vector holds 4 bytes of each of 8 rows,
// and per group of 4 columns the 6 tokens of the tile each add their 4 bytes' products to 8 int32
// lanes. vpmaddubsw wants one unsigned operand and adds pairs of products into 16 bits, so the
// packed w + 128 is turned back into w (xor 0x80) and fed as |w| against x with w's sign: the same
// products, pairs at most 2 * 128 * 127 < 32767; vpmaddwd then adds the pairs into int32. Per block
// of 32 columns the exact sums are scaled into 6 float accumulators.
ONE_COPY void kernel_q8_x86(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd,
                            const int32_t *xs, const uint8_t *wq, const float *wd, int kc, int accumulate) {
    (void)xs; // -128 sum(x), the start values of biased weights: not needed with w itself
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    for (int r0 = 0; r0 < nr; r0 += 8) {
        __m256 c[MR_Q8];
#pragma GCC unroll 6
        for (int t = 0; t < MR_Q8; t++)
            c[t] = accumulate && t < nt ? load_first8(out + t * ldo + r0, nr - r0) : _mm256_setzero_ps();
        for (int b = 0; b < kc / Q8_BLOCK; b++) {
            __m256i s[MR_Q8];
#pragma GCC unroll 6
            for (int t = 0; t < MR_Q8; t++)
                s[t] = _mm256_setzero_si256();
            const uint8_t *wb = wq + (size_t)b * Q8_BLOCK * NR + r0 * 4;
            const int8_t *xb = xq + (size_t)b * Q8_BLOCK * MR_Q8;
#pragma GCC unroll 1
            for (int u = 0; u < Q8_BLOCK / 4; u++) { // the 8 groups of 4 bytes of the block
                const __m256i w = _mm256_xor_si256(_mm256_load_si256((const __m256i *)(wb + u * NR * 4)), flip);
                const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 6
                for (int t = 0; t < MR_Q8; t++) {
                    int32_t four;
                    memcpy(&four, xb + (u * MR_Q8 + t) * 4, 4);
                    const __m256i sx = _mm256_sign_epi8(_mm256_set1_epi32(four), w);
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones));
                }
            }
            const __m256 d = _mm256_load_ps(wd + b * NR + r0);
#pragma GCC unroll 6
            for (int t = 0; t < MR_Q8; t++)
                c[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_mul_ps(d, _mm256_set1_ps(xd[b * MR_Q8 + t])),
                                       c[t]);
        }
#pragma GCC unroll 6
        for (int t = 0; t < MR_Q8; t++)
            if (t < nt) store_first8(out + t * ldo + r0, nr - r0, c[t]);
    }
}
#endif // USE_AVX512_VNNI / USE_AVX2

// Attention. A tile is ROWS query rows x 32 positions (or output coordinates) in 12 accumulators,
// and each vector of keys (or values) loaded feeds ROWS multiply-adds: in 256-bit vectors, 3 rows
// (four vectors a row); with AVX-512, 6 rows (two vectors a row), twice the multiply-adds per
// instruction. The tiles are FMA-bound, so the 512-bit ones pay where the core executes 512-bit FMAs
// at full width (on a core that splits them in two halves the widths measured even). Each lane
// adds the same products in the same order in either width, so the two give the same bits.
// always_inline with a constant ROWS and cache type T: one copy per row count and type, without the
// row loop's branches.
#define ATT_TILE static inline __attribute__((always_inline))
#ifdef USE_AVX512
#define TILE_ROWS 6 // query rows one tile takes
#else
#define TILE_ROWS 3
#endif

// 8 cached values from element i of a (float32, or halves widened exactly).
ATT_TILE __m256 kv_load8(const void *a, size_t i, const DType T) {
    return T == DTYPE_F16 ? half8((const _Float16 *)a + i) : _mm256_loadu_ps((const float *)a + i);
}

// 8 q8_0 numbers as floats: 8 int8 q times their 8 scales d (halves), or times one scale s.
ATT_TILE __m256 q8_load8(const int8_t *q, const _Float16 *d) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))), half8(d));
}
ATT_TILE __m256 q8_load8s(const int8_t *q, __m256 s) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))), s);
}

// The 32 scales (halves) of coordinate d in a q8_0 block of keys kt (hd, 32): after its hd rows of
// 32 int8, one row of scales per 32 coordinates (kernels.c, the KV cache's layout).
ATT_TILE const _Float16 *q8_key_scales(const void *kt, int hd, int d) {
    return (const _Float16 *)((const int8_t *)kt + (size_t)hd * KV_RUN) + (size_t)(d / Q8_BLOCK) * KV_RUN;
}

// Scores: att[r, j .. j+31] = sum_d qs[r, d] k_{j .. j+31}[d] over one block of the cache, kt
// (hd, 32): the whole block, even past the last real position. A q8_0 block's coordinate d is its
// row d of q times row d / 32 of its scales (kernels.c, the KV cache's layout).
ATT_TILE void scores_tile(float *att, size_t ld, const float *qs, const int ROWS, const void *kt, const DType T,
                          int hd) {
    __m256 a[3][4];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < 4; c++)
            a[r][c] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const size_t k = (size_t)d * KV_RUN;
        __m256 k0, k1, k2, k3;
        if (T == DTYPE_Q8_0) {
            const int8_t *q = (const int8_t *)kt + k;
            const _Float16 *sc = q8_key_scales(kt, hd, d);
            k0 = q8_load8(q, sc), k1 = q8_load8(q + 8, sc + 8), k2 = q8_load8(q + 16, sc + 16),
            k3 = q8_load8(q + 24, sc + 24);
        } else {
            k0 = kv_load8(kt, k, T), k1 = kv_load8(kt, k + 8, T), k2 = kv_load8(kt, k + 16, T),
            k3 = kv_load8(kt, k + 24, T);
        }
        for (int r = 0; r < ROWS; r++) {
            const __m256 qd = _mm256_broadcast_ss(qs + (size_t)r * hd + d);
            a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
            a[r][2] = _mm256_fmadd_ps(qd, k2, a[r][2]);
            a[r][3] = _mm256_fmadd_ps(qd, k3, a[r][3]);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < 4; c++)
            _mm256_storeu_ps(att + r * ld + 8 * c, a[r][c]);
}

// n halves widened to floats (n a multiple of 8).
static inline void widen(float *out, const void *h, size_t n) {
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(out + i, half8((const _Float16 *)h + i));
}

// n q8_0 values v (rows of hd int8 and hd / 32 halves) as floats, into out (n, hd): 32 at a time.
static inline void value_rows_q8(float *out, const void *v, int hd, int n) {
    const size_t row = kv_row_bytes(DTYPE_Q8_0, hd);
    for (int j = 0; j < n; j++) {
        const int8_t *q = (const int8_t *)v + (size_t)j * row;
        const _Float16 *d = (const _Float16 *)(q + hd);
        for (int b = 0; b < hd / 32; b++) {
            const __m256 scale = _mm256_set1_ps((float)d[b]);
            for (int c = 0; c < 32; c += 8)
                _mm256_storeu_ps(out + (size_t)j * hd + 32 * b + c, q8_load8s(q + 32 * b + c, scale));
        }
    }
}

#ifdef USE_AVX512
// 16 cached values from element i of a, and 16 q8_0 numbers (int8 q times their halves d): the
// 256-bit loads above, two at a time.
ATT_TILE __m512 kv_load16(const void *a, size_t i, const DType T) {
    return T == DTYPE_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const _Float16 *)a + i)))
                          : _mm512_loadu_ps((const float *)a + i);
}
ATT_TILE __m512 q8_load16(const int8_t *q, const _Float16 *d) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))),
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d)));
}
ATT_TILE __m512 q8_load16s(const int8_t *q, __m512 s) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q))), s);
}

// scores_tile for 1 to 6 rows in 512-bit vectors.
ATT_TILE void scores_tile16(float *att, size_t ld, const float *qs, const int ROWS, const void *kt, const DType T,
                            int hd) {
    __m512 a[6][2];
    for (int r = 0; r < ROWS; r++)
        a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const size_t k = (size_t)d * KV_RUN;
        __m512 k0, k1;
        if (T == DTYPE_Q8_0) {
            const int8_t *q = (const int8_t *)kt + k;
            const _Float16 *sc = q8_key_scales(kt, hd, d);
            k0 = q8_load16(q, sc), k1 = q8_load16(q + 16, sc + 16);
        } else {
            k0 = kv_load16(kt, k, T), k1 = kv_load16(kt, k + 16, T);
        }
        for (int r = 0; r < ROWS; r++) {
            const __m512 qd = _mm512_set1_ps(qs[(size_t)r * hd + d]);
            a[r][0] = _mm512_fmadd_ps(qd, k0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(qd, k1, a[r][1]);
        }
    }
    for (int r = 0; r < ROWS; r++) {
        _mm512_storeu_ps(att + r * ld, a[r][0]);
        _mm512_storeu_ps(att + r * ld + 16, a[r][1]);
    }
}
#endif

// The scores of all rows against one block (hd, 32) of keys of type T: six rows at a time with
// AVX-512, three without.
ATT_TILE void scores_block(float *att, size_t ld, const float *qs, int rows, const void *block, const DType T, int hd) {
#ifdef USE_AVX512
    for (int r = 0; r < rows; r += 6) {
        float *a = att + r * ld;
        const float *q = qs + (size_t)r * hd;
        switch (rows - r < 6 ? rows - r : 6) {
        case 6: scores_tile16(a, ld, q, 6, block, T, hd); break;
        case 5: scores_tile16(a, ld, q, 5, block, T, hd); break;
        case 4: scores_tile16(a, ld, q, 4, block, T, hd); break;
        case 3: scores_tile16(a, ld, q, 3, block, T, hd); break;
        case 2: scores_tile16(a, ld, q, 2, block, T, hd); break;
        default: scores_tile16(a, ld, q, 1, block, T, hd); break;
        }
    }
#else
    for (int r = 0; r < rows; r += 3) {
        float *a = att + r * ld;
        const float *q = qs + (size_t)r * hd;
        if (rows - r >= 3)
            scores_tile(a, ld, q, 3, block, T, hd);
        else if (rows - r == 2)
            scores_tile(a, ld, q, 2, block, T, hd);
        else
            scores_tile(a, ld, q, 1, block, T, hd);
    }
#endif
}

// A block of keys kt (hd, 32) of type T, f16 or q8_0, as floats, into out: halves widened, q8_0 values
// times their scales (kernels.c, the KV cache's layout), in registers. A float32 block is read where
// it is (scores_all turns it straight from the cache).
ATT_TILE void key_block_x86(float *out, const void *kt, const DType T, int hd) {
    if (T == DTYPE_F16) {
        widen(out, kt, (size_t)hd * KV_RUN);
    } else {
        for (int c = 0; c < hd; c++)
            for (int i = 0; i < KV_RUN; i += 8)
                _mm256_storeu_ps(out + (size_t)c * KV_RUN + i,
                                 q8_load8((const int8_t *)kt + (size_t)c * KV_RUN + i, q8_key_scales(kt, hd, c) + i));
    }
}

// All scores, a block of 32 positions at a time (the last one ragged: its extra scores land in
// att's row, which is stride long, and are never read), TILE_ROWS rows at a time, the block
// coming from L1 for every tile after the first. With a rotation table, the block is made floats and
// turned first (rotate_block, plain C, which the compiler vectorizes); so are half and q8_0 blocks
// that more than one tile of rows will read, once rather than per tile.
ATT_TILE void scores_all(float *att, size_t ld, const float *qs, int rows, const void *kt, const DType T,
                         const float *rot, float *turned, int hd, int len) {
    for (int j = 0; j < len; j += KV_RUN) {
        const char *block = (const char *)kt + (size_t)j * kv_row_bytes(T, hd); // block j / 32
        if (rot || (T != DTYPE_F32 && rows > TILE_ROWS)) {
            if (T != DTYPE_F32) key_block_x86(turned, block, T, hd);
            if (rot) rotate_block(turned, T != DTYPE_F32 ? turned : (const float *)block, rot + (size_t)j * hd, hd);
            scores_block(att + j, ld, qs, rows, turned, DTYPE_F32, hd);
        } else {
            scores_block(att + j, ld, qs, rows, block, T, hd);
        }
    }
}

void attention_scores_x86(float *att, size_t ld, const float *qs, int rows, const void *kt, DType t, const float *rot,
                          float *turned, int hd, int len) {
    if (t == DTYPE_F16)
        scores_all(att, ld, qs, rows, kt, DTYPE_F16, rot, turned, hd, len);
    else if (t == DTYPE_Q8_0)
        scores_all(att, ld, qs, rows, kt, DTYPE_Q8_0, rot, turned, hd, len);
    else
        scores_all(att, ld, qs, rows, kt, DTYPE_F32, rot, turned, hd, len);
}

// Mix: o[r, d0 .. d0+width) += sum_{j < len} att[r, j] v[j, d0 .. d0+31] for width <= 32 real
// coordinates, v the values from position 0 on. Loads 32 coordinates of every value row (past a
// head's last coordinate: the next position's, or the cache's padding after the last row), loads
// and stores only the real ones of o. A q8_0 row's 32 coordinates from d0 (a multiple of 32, since
// head_dim is) are one block: its q times its one scale.
ATT_TILE void mix_tile(float *o, int hd, const float *att, size_t ld, const int ROWS, const void *v, const DType T,
                       int len, int d0, int width) {
    __m256 a[3][4];
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < 4; c++)
            a[r][c] = load_first8(o + (size_t)r * hd + 8 * c, width - 8 * c);
    for (int j = 0; j < len; j++) {
        __m256 v0, v1, v2, v3;
        if (T == DTYPE_Q8_0) {
            const int8_t *q = (const int8_t *)v + (size_t)j * kv_row_bytes(DTYPE_Q8_0, hd);
            const __m256 sc = _mm256_set1_ps((float)((const _Float16 *)(q + hd))[d0 / Q8_BLOCK]);
            v0 = q8_load8s(q + d0, sc), v1 = q8_load8s(q + d0 + 8, sc), v2 = q8_load8s(q + d0 + 16, sc),
            v3 = q8_load8s(q + d0 + 24, sc);
        } else {
            const size_t vj = (size_t)j * hd + d0;
            v0 = kv_load8(v, vj, T), v1 = kv_load8(v, vj + 8, T), v2 = kv_load8(v, vj + 16, T),
            v3 = kv_load8(v, vj + 24, T);
        }
        for (int r = 0; r < ROWS; r++) {
            const __m256 p = _mm256_broadcast_ss(att + r * ld + j);
            a[r][0] = _mm256_fmadd_ps(p, v0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(p, v1, a[r][1]);
            a[r][2] = _mm256_fmadd_ps(p, v2, a[r][2]);
            a[r][3] = _mm256_fmadd_ps(p, v3, a[r][3]);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < 4 && 8 * c < width; c++)
            store_first8(o + (size_t)r * hd + 8 * c, width - 8 * c, a[r][c]);
}

#ifdef USE_AVX512
// mix_tile for 1 to 6 rows in 512-bit vectors; the real coordinates of o by masked loads and stores.
ATT_TILE void mix_tile16(float *o, int hd, const float *att, size_t ld, const int ROWS, const void *v, const DType T,
                         int len, int d0, int width) {
    const __mmask16 m0 = width >= 16 ? 0xffff : (__mmask16)((1u << width) - 1);
    const __mmask16 m1 = width >= 32 ? 0xffff : width > 16 ? (__mmask16)((1u << (width - 16)) - 1) : 0;
    __m512 a[6][2];
    for (int r = 0; r < ROWS; r++) {
        a[r][0] = _mm512_maskz_loadu_ps(m0, o + (size_t)r * hd);
        a[r][1] = _mm512_maskz_loadu_ps(m1, o + (size_t)r * hd + 16);
    }
    for (int j = 0; j < len; j++) {
        __m512 v0, v1;
        if (T == DTYPE_Q8_0) {
            const int8_t *q = (const int8_t *)v + (size_t)j * kv_row_bytes(DTYPE_Q8_0, hd);
            const __m512 sc = _mm512_set1_ps((float)((const _Float16 *)(q + hd))[d0 / Q8_BLOCK]);
            v0 = q8_load16s(q + d0, sc), v1 = q8_load16s(q + d0 + 16, sc);
        } else {
            const size_t vj = (size_t)j * hd + d0;
            v0 = kv_load16(v, vj, T), v1 = kv_load16(v, vj + 16, T);
        }
        for (int r = 0; r < ROWS; r++) {
            const __m512 p = _mm512_set1_ps(att[r * ld + j]);
            a[r][0] = _mm512_fmadd_ps(p, v0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(p, v1, a[r][1]);
        }
    }
    for (int r = 0; r < ROWS; r++) {
        _mm512_mask_storeu_ps(o + (size_t)r * hd, m0, a[r][0]);
        _mm512_mask_storeu_ps(o + (size_t)r * hd + 16, m1, a[r][1]);
    }
}
#endif

// One run of `run` positions: values v from the run's first position, att's rows from its first
// score; added into o. Six rows at a time with AVX-512, three without.
ATT_TILE void mix_run(float *o, const float *att, size_t ld, int rows, const void *v, const DType T, int run, int hd) {
    for (int d0 = 0; d0 < hd; d0 += 32) {
        const int width = hd - d0 < 32 ? hd - d0 : 32;
#ifdef USE_AVX512
        for (int r = 0; r < rows; r += 6) {
            float *out = o + (size_t)r * hd + d0;
            const float *p = att + r * ld;
            switch (rows - r < 6 ? rows - r : 6) {
            case 6: mix_tile16(out, hd, p, ld, 6, v, T, run, d0, width); break;
            case 5: mix_tile16(out, hd, p, ld, 5, v, T, run, d0, width); break;
            case 4: mix_tile16(out, hd, p, ld, 4, v, T, run, d0, width); break;
            case 3: mix_tile16(out, hd, p, ld, 3, v, T, run, d0, width); break;
            case 2: mix_tile16(out, hd, p, ld, 2, v, T, run, d0, width); break;
            default: mix_tile16(out, hd, p, ld, 1, v, T, run, d0, width); break;
            }
        }
#else
        for (int r = 0; r < rows; r += 3) {
            float *out = o + (size_t)r * hd + d0;
            const float *p = att + r * ld;
            if (rows - r >= 3)
                mix_tile(out, hd, p, ld, 3, v, T, run, d0, width);
            else if (rows - r == 2)
                mix_tile(out, hd, p, ld, 2, v, T, run, d0, width);
            else
                mix_tile(out, hd, p, ld, 1, v, T, run, d0, width);
        }
#endif
    }
}

// All of o (added into: the caller zeroes it), in runs of MIX_RUN positions, so that a run's values (MIX_RUN rows of hd values, 32 KB
// for hd 64 in float32) stay in cache while every tile of rows and every 32 coordinates go over
// them; each output is summed in position order whatever the runs, as in the plain version. Halves
// (and q8_0 values) are widened into `wide` once per run when more than one tile will read them.
ATT_TILE void mix_all(float *o, const float *att, size_t ld, int rows, const void *v, const DType T, float *wide,
                      int len, int hd) {
    for (int j = 0; j < len; j += MIX_RUN) {
        const int run = len - j < MIX_RUN ? len - j : MIX_RUN;
        const char *from = (const char *)v + (size_t)j * kv_row_bytes(T, hd);
        if (T == DTYPE_F16 && rows > TILE_ROWS) {
            widen(wide, from, ((size_t)run * hd + 7) / 8 * 8);
            mix_run(o, att + j, ld, rows, wide, DTYPE_F32, run, hd);
        } else if (T == DTYPE_Q8_0 && rows > TILE_ROWS) { // head_dim a multiple of 32: whole rows, no padding read
            value_rows_q8(wide, from, hd, run);
            mix_run(o, att + j, ld, rows, wide, DTYPE_F32, run, hd);
        } else {
            mix_run(o, att + j, ld, rows, from, T, run, hd);
        }
    }
}

void attention_mix_x86(float *o, const float *att, size_t ld, int rows, const void *v, DType t, float *wide, int len,
                       int hd) {
    if (t == DTYPE_F16)
        mix_all(o, att, ld, rows, v, DTYPE_F16, wide, len, hd);
    else if (t == DTYPE_Q8_0)
        mix_all(o, att, ld, rows, v, DTYPE_Q8_0, wide, len, hd);
    else
        mix_all(o, att, ld, rows, v, DTYPE_F32, wide, len, hd);
}

// q8_0 quantization of one row of activations (every x86 build: AVX2 is enough), a block of 32
// floats in four vectors: max |x|, then q = x * (127 / max), clamped to [-127, 127], rounded half
// away from zero as x + (+-0.5) truncated, packed to bytes. Each operation is the plain C one
// (quantize_block_q8) on 8 lanes at once (max as a > b ? a : b, so a NaN x becomes -127 here too),
// so the bytes, scales and sums are the same bit for bit. A last partial block goes through the
// plain C.
static inline float hmax8(__m256 a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// The largest |x| of n vectors of 8 from x (NaNs passed over, as q8_inv passes them: max_ps keeps
// its second operand when the first is NaN).
static inline float amax_x86(const float *x, int n) {
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < n; j++)
        amax = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(x + 8 * j)), amax);
    return hmax8(amax);
}

static inline int32_t hsum8_epi32(__m256i s) {
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1)));
}

// 32 values of x times inv into q, rounded as q8_round rounds them: clamped to [-127, 127] (a NaN to
// -127: max_ps keeps the -127), then x + (+-0.5) truncated. The sums of its two halves of 16.
static inline void q8_32_x86(int8_t *q, const float *x, float inv, int32_t half_sums[2]) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7); // undo the lane order of the packs
    __m256i r[4];
    for (int j = 0; j < 4; j++) {
        __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), _mm256_set1_ps(inv)), lo), hi);
        t = _mm256_add_ps(t, _mm256_or_ps(half, _mm256_and_ps(sign, t))); // -0.0 gives -0.5: still 0
        r[j] = _mm256_cvttps_epi32(t);
    }
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(bytes, order));
    half_sums[0] = hsum8_epi32(_mm256_add_epi32(r[0], r[1]));
    half_sums[1] = hsum8_epi32(_mm256_add_epi32(r[2], r[3]));
}

void quantize_row_q8_x86(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    int b = 0;
    for (; (b + 1) * Q8_BLOCK <= cols; b++) {
        const float m = amax_x86(x + b * Q8_BLOCK, Q8_BLOCK / 8), inv = m >= 0x1p-126f ? 127 / m : 0;
        int32_t s[2];
        q8_32_x86(q + b * Q8_BLOCK, x + b * Q8_BLOCK, inv, s);
        d[b] = m / 127;
        sum[b] = s[0] + s[1];
    }
    if (b * Q8_BLOCK < cols) quantize_block_q8(q + b * Q8_BLOCK, d + b, sum + b, x + b * Q8_BLOCK, cols - b * Q8_BLOCK);
}

// The K-quants' x (quantize_row_q8k_plain, kernels.c): a scale per QK_K values and a sum per K_SUM, the
// same numbers; a last partial block goes through the plain C.
void quantize_row_q8k_x86(int8_t *q, float *d, int32_t *sum, const float *x, int cols) {
    _Static_assert(K_SUM == Q8_BLOCK / 2, "q8_32_x86 gives the sums of halves of 32");
    int b = 0;
    for (; (b + 1) * QK_K <= cols; b++) {
        const float m = amax_x86(x + b * QK_K, QK_K / 8), inv = m >= 0x1p-126f ? 127 / m : 0;
        for (int c = 0; c < QK_K / Q8_BLOCK; c++)
            q8_32_x86(q + b * QK_K + c * Q8_BLOCK, x + b * QK_K + c * Q8_BLOCK, inv, sum + b * (QK_K / K_SUM) + 2 * c);
        d[b] = m / 127;
    }
    if (b * QK_K < cols) quantize_row_q8k_plain(q + b * QK_K, d + b, sum + b * (QK_K / K_SUM), x + b * QK_K, cols - b * QK_K);
}

#endif // USE_AVX2
