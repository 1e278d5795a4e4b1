// kernels_prefill.c - prefill: out (n, rows) = x (n, cols) @ W^T for n >= GEMM_MIN_N tokens, matrix
// x matrix, over f32_r16, f16_r16, bf16_r16, q8_0_r16, q4_0 and the K-quants' weights.
//
// Each weight is used n times, so once read and kept in cache the weights stop mattering and the
// arithmetic does. Blocked as in Goto & van de Geijn, "Anatomy of high-performance matrix
// multiplication" (ACM TOMS 2008) and BLIS (Van Zee & van de Geijn, ACM TOMS 2015): a panel of NR
// weight rows is packed once into a layout the microkernel reads with one vector load per column,
// and is then reused from cache by every token; the microkernel keeps an MR x NR block of outputs
// in registers, so each loaded weight feeds MR fused multiply-adds. One level of cache blocking:
// the K dimension, so a chunk of packed activations stays in L2.
//
// The plain C packing and tiles come first: they define what each computes, and are what a build
// without vector code runs; kernels_x86.c has vector versions behind the same signatures
// (kernels_internal.h says which a build uses). Then gemm_f32 (bf16_r16's too, except with AVX-512),
// gemm_bf16 (AVX-512), gemm_q8 and gemm_k, which call them.
#include "kernels_internal.h"

#include <string.h>

enum {
    X_CHUNK = 512 << 10, // bytes of packed activations per chunk: a quarter of a 2 MB L2
    PANEL_GROUP = 4,     // panels per work item, at most
};

// ---------------------------------------------------------------------------------------------
// Packing and tiles, plain C

// Packing the tokens: xp (cols, MR) = x[t0 : t0+MR, :] transposed, so column k of a tile is MR
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

// wp (kc, NR) = W[r0 : r0+NR, k0 : k0+kc] transposed, widened to f32, from a panel of f32_r16 or
// f16_r16 groups (NR / R16 whole groups: r0 is a multiple of NR), whose columns are already the 16
// rows side by side: a copy. A group past the matrix's end is zero rows (the last group's padding
// rows are zeros as stored).
void pack_w_f32(float *wp, const Matrix *m, int r0, int k0, int kc) {
    for (int h = 0; h < NR / R16; h++) {
        const int g = r0 / R16 + h;
        const size_t at = ((size_t)g * m->cols + k0) * R16; // the group's column k0
        float *to = wp + h * R16;
        if (g >= r16_groups(m->rows))
            for (int k = 0; k < kc; k++)
                memset(to + k * NR, 0, R16 * sizeof(float));
        else if (m->dtype == DTYPE_F32_R16)
            for (int k = 0; k < kc; k++)
                memcpy(to + k * NR, (const float *)m->data + at + (size_t)k * R16, R16 * sizeof(float));
        else
            for (int k = 0; k < kc; k++)
                for (int i = 0; i < R16; i++)
                    to[k * NR + i] = (float)((const _Float16 *)m->data)[at + (size_t)k * R16 + i];
    }
}

// bf16_r16 weights through the same f32 tiles (builds without AVX-512): the values widened to floats,
// which is exact, with each pair's columns swapped (2p + 1, then 2p), in x's packing too, so that the
// tile's one multiply-add chain per output over k is bf16_r16's order, the padding columns included
// (kernels_internal.h): the same bits as decode. xb is x rounded to bf16, rows ldx = bf16_cols apart.
static void pack_x_br16(float *xp, const uint16_t *xb, size_t ldx, int n, int t0) {
    for (int t = 0; t < MR; t++)
        for (size_t k = 0; k < ldx; k++)
            xp[k * MR + t] = t0 + t < n ? widen_bf16(xb[(size_t)(t0 + t) * ldx + (k ^ 1)]) : 0;
}
// wp (kc, NR) from a panel of bf16_r16 groups (NR / R16 whole groups: r0 is a multiple of NR), columns
// k0 (even) on; a group past the matrix's end is zero rows (the last group's padding rows are zeros
// as stored).
_Static_assert(NR % R16 == 0, "a panel of bf16_r16 weights is whole groups");
void pack_w_br16_plain(float *wp, const Matrix *m, int r0, int k0, int kc) {
    const size_t gv = br16_group_values(m->cols);
    for (int j = 0; j < NR; j++) {
        const int g = (r0 + j) / R16, i = (r0 + j) % R16;
        const uint16_t *group = g < r16_groups(m->rows) ? (const uint16_t *)m->data + (size_t)g * gv : NULL;
        for (int k = 0; k < kc; k++) { // pair (k0 + k) / 2: an even k its second column (the word's
            const int p = (k0 + k) / 2, high = (k0 + k) % 2 == 0; // high half), an odd k its first
            wp[k * NR + j] = group ? widen_bf16(group[((size_t)p * R16 + i) * 2 + high]) : 0;
        }
    }
}

// out[t, j] (+)= sum_k xp[k, t] * wp[k, j] for t < nt tokens, j < nr rows; out rows are ldo apart.
// Each output is one multiply-add chain over k in order, started from the value already in out
// when accumulating: the same result however the columns were cut into chunks.
void kernel_f32_plain(float *out, size_t ldo, int nt, int nr, const float *xp, const float *wp, int kc,
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

// f16 weights as bf16 (matrix_to_r16): count of them rounded to bf16, each as f16_bf16 does.
void round_f16_bf16_plain(uint16_t *to, const uint16_t *from, size_t count) {
    for (size_t i = 0; i < count; i++)
        to[i] = f16_bf16(from[i]);
}

// q8_0 prefill works on integer tiles. The multiply instruction of the vector version (vpdpbusd)
// takes unsigned by signed bytes, so the weights are packed as qw + 128 (unsigned) and the
// activations stay signed; the extra 128 * sum(qx) each block picks up is removed by starting its
// integer sum at -128 * sum(qx).
//   packed tokens   xq (cp/4, MR_Q8, 4) s8, scales xd (cp/32, MR_Q8), start values xs (cp/32, MR_Q8)
//   packed weights  wq (kc/4, NR, 4) u8 and their scales wd (kc/32, NR)
// Token t0 + t's q into xq (cp/4, MR_Q8, 4); a padding token (past n) as zeros, reading nothing.
static void pack_x_token(int8_t *xq, const QuantizedRows *qx, int cp, int n, int t0, int t) {
    const int real = t0 + t < n;
    const int8_t *src = qx->q + (size_t)(real ? t0 + t : 0) * cp;
    for (int k4 = 0; k4 < cp / 4; k4++)
        for (int i = 0; i < 4; i++)
            xq[((size_t)k4 * MR_Q8 + t) * 4 + i] = real ? src[k4 * 4 + i] : 0;
}

static void pack_x_q8(int8_t *xq, float *xd, int32_t *xs, const QuantizedRows *qx, int cp, int n, int t0) {
    const int nb = cp / Q8_BLOCK;
    for (int t = 0; t < MR_Q8; t++) {
        const int real = t0 + t < n;
        pack_x_token(xq, qx, cp, n, t0, t);
        for (int b = 0; b < nb; b++) {
            const size_t at = (size_t)(t0 + t) * nb + b;
            xd[b * MR_Q8 + t] = real ? qx->d[at] : 0;
            xs[b * MR_Q8 + t] = real ? -128 * qx->sum[at] : 0;
        }
    }
}

// q4_0 weights go through the same integer tiles as q8_0, unpacked to q - 8 + 128 = q + 120: each
// row's nibbles into stage (NR, kc) in column order (loops the compiler vectorizes), then moved
// into wq's layout 4 bytes at a time.
static void pack_w_q4(uint8_t *wq, float *wd, uint8_t *stage, const Matrix *m, int r0, int k0, int kc) {
    const size_t cp = (size_t)cols_stored(DTYPE_Q4_0, m->cols), nb = cp / Q8_BLOCK;
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

// q8_0_r16 weights are stored as the tiles read them, in groups of 16 rows: per 4 columns, a group's
// 64 bytes are its 16 rows' share of wq's NR * 4, already q + 128, and per block its 16 scales are
// its rows' share of wd's NR. So a panel (NR / R16 whole groups: r0 is a multiple of NR) is copied,
// 64 bytes at a time; a group past the end of the matrix is packed as zero rows.
_Static_assert(NR % R16 == 0, "a panel of q8_0_r16 weights is whole groups");
static void pack_w_r16(uint8_t *wq, float *wd, const Matrix *m, int r0, int k0, int kc) {
    const size_t gb = r16_group_bytes(m->cols);
    for (int h = 0; h < NR / R16; h++) {
        const int g = r0 / R16 + h;
        const uint8_t *group = g < r16_groups(m->rows) ? (const uint8_t *)m->data + (size_t)g * gb : NULL;
        for (int b = 0; b < kc / Q8_BLOCK; b++) {
            const uint8_t *block = group ? group + (size_t)(k0 / Q8_BLOCK + b) * R16_BLOCK_BYTES : NULL;
            if (block)
                memcpy(wd + b * NR + h * R16, block, R16 * sizeof(float));
            else
                memset(wd + b * NR + h * R16, 0, R16 * sizeof(float));
            for (int u = 0; u < Q8_BLOCK / 4; u++) {
                uint8_t *to = wq + ((size_t)(b * Q8_BLOCK / 4 + u) * NR + h * R16) * 4;
                if (block)
                    memcpy(to, block + R16 * sizeof(float) + u * R16 * 4, R16 * 4);
                else
                    memset(to, 128, R16 * 4);
            }
        }
    }
}

// A panel of q4_0 or q8_0_r16 weights into the integer tiles' layout.
static void pack_w_int(uint8_t *wq, float *wd, uint8_t *stage, const Matrix *m, int r0, int k0, int kc) {
    switch (m->dtype) {
    case DTYPE_Q4_0:
        pack_w_q4(wq, wd, stage, m, r0, k0, kc);
        break;
    case DTYPE_Q8_0_R16:
        pack_w_r16(wq, wd, m, r0, k0, kc);
        break;
    case DTYPE_F32_R16: // x not quantized: gemm_f32, gemm_bf16
    case DTYPE_F16_R16:
    case DTYPE_BF16_R16:
    case DTYPE_F32: // file types only, copied at load: matmul refuses them (dtype.h)
    case DTYPE_F16:
    case DTYPE_Q8_0:
    case DTYPE_BF16:
    case DTYPE_GGUF_Q8_0:
    case DTYPE_GGUF_Q4_0:
    case DTYPE_GGUF_Q4_K: // gemm_k (pack_w_k)
    case DTYPE_GGUF_Q5_K:
    case DTYPE_GGUF_Q6_K:
        break;
    }
}

// Per block of 32 columns: the exact integer sums of an MR_Q8 x NR tile, then sum * (dw * dx) added
// to float accumulators, block after block: as decode adds a q8_0_r16 row's blocks (dot_r16_plain),
// so a q8_0_r16 prompt's outputs are its tokens' one at a time, bit for bit, in every build (the
// vector versions, decode's and prefill's, fuse that multiply-add alike).
void kernel_q8_plain(float *out, size_t ldo, int nt, int nr, const int8_t *xq, const float *xd, const int32_t *xs,
                     const uint8_t *wq, const float *wd, int kc, int accumulate) {
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
                c[t][j] += (float)s[t][j] * (wd[b * NR + j] * xd[b * MR_Q8 + t]); // as dot_r16_plain
    }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++)
            out[t * ldo + j] = c[t][j];
}

// K-quants: integer tiles too, each block's products, scales and mins exact integers as in
// dot_k_plain (kernels_decode.c), then its float step, so a prompt's outputs are its tokens' one at a
// time, bit for bit, in every build. The weights go into the tiles as their unsigned bits (q4_K 0-15,
// q5_K 0-31, q6_K 0-63: q6_K's offset of 32 is taken off later with x's sums), by vpdpbusd's unsigned
// side; the scales multiply each group's integer sum (kernel_k), and the mins, the offset and the
// float step come after (k_finish), from the panel's scales:
//   packed tokens   xq (cp/4, MR_Q8, 4) s8 as for q8_0 (pack_x_token), x's d (cp/QK_K, MR_Q8), sums (cp/K_SUM, MR_Q8)
//   packed weights  wq (kc/4, NR, 4) u8; per row, sc (kc/group, NR), mn (kc/32, NR) (q4_K, q5_K),
//                   d and dmin (kc/QK_K, NR) each
static void pack_x_k(int8_t *xq, float *xd, int32_t *xs, const QuantizedRows *qx, int cp, int n, int t0) {
    const int nd = cp / QK_K, ns = cp / K_SUM;
    for (int t = 0; t < MR_Q8; t++) {
        const int real = t0 + t < n;
        pack_x_token(xq, qx, cp, n, t0, t);
        for (int b = 0; b < nd; b++)
            xd[b * MR_Q8 + t] = real ? qx->d[(size_t)(t0 + t) * nd + b] : 0;
        for (int g = 0; g < ns; g++)
            xs[g * MR_Q8 + t] = real ? qx->sum[(size_t)(t0 + t) * ns + g] : 0;
    }
}

// One block of QK_K of a K-quant row into stage (its QK_K values' bits, in column order: loops the
// compiler vectorizes), and its scales (and mins) into sc[g * NR], mn[j * NR], for groups g and
// sub-blocks j; d and dmin into d[0], dmin[0].
static void unpack_k(uint8_t *stage, int32_t *sc, int32_t *mn, float *d, float *dmin, DType t, const uint8_t *block) {
    if (t == DTYPE_GGUF_Q6_K) {
        for (int h = 0; h < 2; h++)
            for (int u = 0; u < 4; u++)
                for (int l = 0; l < 32; l++) {
                    const uint8_t lo = block[64 * h + l + 32 * (u % 2)], hi = block[Q6K_QH + 32 * h + l];
                    stage[128 * h + 32 * u + l] = (uint8_t)((u < 2 ? lo & 15 : lo >> 4) | (hi >> 2 * u & 3) << 4);
                }
        for (int g = 0; g < QK_K / 16; g++)
            sc[g * NR] = ((const int8_t *)block)[Q6K_SCALES + g];
        *d = f16_at(block + Q6K_D), *dmin = 0;
        return;
    }
    const uint8_t *qs = block + (t == DTYPE_GGUF_Q5_K ? Q5K_QS : Q4K_QS);
    for (int c = 0; c < 4; c++)
        for (int i = 0; i < 32; i++) {
            stage[64 * c + i] = qs[32 * c + i] & 15;
            stage[64 * c + 32 + i] = qs[32 * c + i] >> 4;
        }
    if (t == DTYPE_GGUF_Q5_K)
        for (int c = 0; c < 8; c++)
            for (int i = 0; i < 32; i++)
                stage[32 * c + i] |= (uint8_t)((block[Q5K_QH + i] >> c & 1) << 4);
    for (int j = 0; j < QK_K / 32; j++) {
        int a, b;
        k_scale_min(block + QK_SCALES, j, &a, &b);
        sc[j * NR] = a, mn[j * NR] = b;
    }
    *d = f16_at(block), *dmin = f16_at(block + 2);
}

// A panel of K-quant rows (columns k0 .. k0 + kc, whole blocks) into the tiles' layout; rows past
// the matrix's end are zeros.
static void pack_w_k(uint8_t *wq, int32_t *sc, int32_t *mn, float *d, float *dmin, uint8_t *stage, const Matrix *m,
                     int r0, int k0, int kc) {
    const DType t = m->dtype;
    const int nr = m->rows - r0 < NR ? m->rows - r0 : NR, group = t == DTYPE_GGUF_Q6_K ? 16 : 32;
    const size_t bytes = (size_t)DTYPES[t].block_bytes;
    for (int j = 0; j < NR; j++) {
        const uint8_t *row = j < nr ? (const uint8_t *)m->data + (size_t)(r0 + j) * row_bytes(t, m->cols) : NULL;
        for (int b = 0; b < kc / QK_K; b++) {
            uint8_t *st = stage + (size_t)j * kc + b * QK_K;
            int32_t *s = sc + (size_t)b * (QK_K / group) * NR + j, *mm = mn + (size_t)b * (QK_K / 32) * NR + j;
            if (row) {
                unpack_k(st, s, mm, d + b * NR + j, dmin + b * NR + j, t, row + (size_t)(k0 / QK_K + b) * bytes);
            } else {
                memset(st, 0, QK_K);
                for (int g = 0; g < QK_K / group; g++)
                    s[g * NR] = 0;
                for (int g = 0; g < QK_K / 32; g++)
                    mm[g * NR] = 0;
                d[b * NR + j] = dmin[b * NR + j] = 0;
            }
        }
    }
    for (int k4 = 0; k4 < kc / 4; k4++)
        for (int j = 0; j < NR; j++)
            memcpy(wq + ((size_t)k4 * NR + j) * 4, stage + (size_t)j * kc + k4 * 4, 4);
}

void kernel_k_plain(int32_t *S, int nsb, int group, const int8_t *xq, const uint8_t *wq, const int32_t *sc) {
    for (int b = 0; b < nsb; b++) {
        int32_t s[MR_Q8][NR] = {{0}};
        for (int g = b * (QK_K / group); g < (b + 1) * (QK_K / group); g++) {
            int32_t p[MR_Q8][NR] = {{0}};
            for (int k4 = g * group / 4; k4 < (g + 1) * group / 4; k4++)
                for (int t = 0; t < MR_Q8; t++)
                    for (int j = 0; j < NR; j++)
                        for (int i = 0; i < 4; i++)
                            p[t][j] += wq[(k4 * NR + j) * 4 + i] * xq[(k4 * MR_Q8 + t) * 4 + i];
            for (int t = 0; t < MR_Q8; t++)
                for (int j = 0; j < NR; j++)
                    s[t][j] += sc[g * NR + j] * p[t][j];
        }
        memcpy(S + (size_t)b * MR_Q8 * NR, s, sizeof s);
    }
}

// The float step of a tile after kernel_k, dot_k_plain's, block after block in order: out[t, j] (or
// from 0 when not accumulating) += dx (d S - dmin M), q6_K: += dx (d (S - 32 M)), M from the
// panel's mins (q6_K: its scales) and x's sums, the integers exact. Loops over the NR rows the
// compiler vectorizes, each product rounded once (no contraction in ISO C: the Makefile's -std=c11).
static void k_finish(float *out, size_t ldo, int nt, int nr, DType type, const int32_t *S, int nsb, const float *xd,
                     const int32_t *xs, const int32_t *sc, const int32_t *mn, const float *d, const float *dmin,
                     int accumulate) {
    float c[MR_Q8][NR] = {{0}};
    for (int t = 0; accumulate && t < nt; t++)
        for (int j = 0; j < nr; j++)
            c[t][j] = out[t * ldo + j];
    const int six = type == DTYPE_GGUF_Q6_K;
    for (int b = 0; b < nsb; b++)
        for (int t = 0; t < MR_Q8; t++) {
            const int32_t *s = S + ((size_t)b * MR_Q8 + t) * NR, *x = xs + (size_t)b * (QK_K / K_SUM) * MR_Q8 + t;
            const float dx = xd[b * MR_Q8 + t];
            int32_t M[NR] = {0};
            if (six)
                for (int g = 0; g < QK_K / 16; g++)
                    for (int j = 0; j < NR; j++)
                        M[j] += sc[((size_t)b * 16 + g) * NR + j] * x[g * MR_Q8];
            else
                for (int g = 0; g < QK_K / 32; g++)
                    for (int j = 0; j < NR; j++)
                        M[j] += mn[((size_t)b * 8 + g) * NR + j] * (x[2 * g * MR_Q8] + x[(2 * g + 1) * MR_Q8]);
            if (six)
                for (int j = 0; j < NR; j++)
                    c[t][j] += dx * (d[b * NR + j] * (float)(s[j] - 32 * M[j]));
            else
                for (int j = 0; j < NR; j++)
                    c[t][j] += dx * (d[b * NR + j] * (float)s[j] - dmin[b * NR + j] * (float)M[j]);
        }
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < nr; j++)
            out[t * ldo + j] = c[t][j];
}

// ---------------------------------------------------------------------------------------------
// gemm_f32, gemm_q8: blocked matrix x matrix, for the `count` matrices that read the same x (q, k
// and v; gate and up): x is packed once for all of them (and for q8_0 and q4_0 weights quantized
// once before, by matmul).
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

// Columns per chunk: the packed activations of all n tokens in about X_CHUNK bytes, a multiple of
// 32, at most KC_MAX (ws_layout sizes the packed panels for that many) and at most cols.
static int chunk_cols(int n, int cols, size_t elem) {
    long kc = X_CHUNK / ((long)n * (long)elem);
    kc = kc < KC_MIN ? KC_MIN : kc > KC_MAX ? KC_MAX : kc;
    kc = kc / Q8_BLOCK * Q8_BLOCK;
    return kc < cols ? (int)kc : cols;
}

// f32_r16 and f16_r16 weights, and bf16_r16 without AVX-512 (xb: x rounded to bf16; NULL for the others).
void gemm_f32(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const float *x,
              const uint16_t *xb, const Matrix *const *m, int count, int n) {
    const int br16 = m[0]->dtype == DTYPE_BF16_R16; // through xb and pack_w_br16, over the padded columns
    const int cols = br16 ? bf16_cols(m[0]->cols) : m[0]->cols, tiles = (n + MR - 1) / MR;
    const int kc_max = chunk_cols(tiles * MR, cols, sizeof(float));
    float *xp = (float *)(ws + l->xp); // (tiles, cols, MR)
#pragma omp parallel num_threads(threads)
    {
        float *wp = (float *)(ws + l->wp + (size_t)thread_num() * l->each); // (kc, NR), this thread's
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++)
            if (br16)
                pack_x_br16(xp + (size_t)i * cols * MR, xb, (size_t)cols, n, i * MR);
            else
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
                        if (br16)
                            pack_w_br16(wp, m[mi], r0, k0, kc);
                        else
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
}

#ifdef USE_AVX512
// bf16_r16 weights with AVX-512: no packing (x was rounded by matmul, the weights are read as stored). A work item
// is BR16_ROWS rows (whole groups), which the tokens go by in panels of BR16_MT (the item's rows in
// L2); every output is one sum from start to end (bf16_r16's order), whatever the blocks or threads.
void gemm_bf16(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const uint16_t *xb,
               const Matrix *const *m, int count, int n) {
    const int cols = m[0]->cols;
    const size_t ldx = (size_t)bf16_cols(cols);
    (void)ws, (void)l, (void)threads; // no packing, no scratch (threads: for OpenMP)
#pragma omp parallel num_threads(threads)
    for (int mi = 0; mi < count; mi++) {
        const int rows = m[mi]->rows, items = (rows + BR16_ROWS - 1) / BR16_ROWS;
#pragma omp for schedule(dynamic) nowait
        for (int b = 0; b < items; b++) {
            const int r0 = b * BR16_ROWS, nr = rows - r0 < BR16_ROWS ? rows - r0 : BR16_ROWS;
            const uint16_t *w = (const uint16_t *)m[mi]->data + (size_t)(r0 / R16) * br16_group_values(cols);
            for (int t = 0; t < n; t += BR16_MT)
                kernel_br16_x86(out[mi] + (size_t)t * rows + r0, (size_t)rows, w, nr, xb + t * ldx, ldx,
                                n - t < BR16_MT ? n - t : BR16_MT, cols);
        }
    }
}
#endif

// q8_0_r16 and q4_0 weights: the same loops over integer tiles.
void gemm_q8(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const QuantizedRows *qx,
             const Matrix *const *m, int count, int n) {
    const int cp = cols_stored(DTYPE_Q8_0, m[0]->cols), nb = cp / Q8_BLOCK;
    const int tiles = (n + MR_Q8 - 1) / MR_Q8;
    const int kc_max = chunk_cols(tiles * MR_Q8, cp, 1);
    const size_t tile_q = (size_t)cp * MR_Q8, tile_b = (size_t)nb * MR_Q8; // per tile: bytes, blocks
    int8_t *xq = (int8_t *)(ws + l->xp);                                   // (tiles, cp/4, MR_Q8, 4)
    float *xd = (float *)(ws + l->xd);                                     // (tiles, cp/32, MR_Q8)
    int32_t *xs = (int32_t *)(ws + l->xs);                                 // (tiles, cp/32, MR_Q8)
#pragma omp parallel num_threads(threads)
    {
        unsigned char *mine = ws + (size_t)thread_num() * l->each; // this thread's panel:
        uint8_t *wq = mine + l->wp, *stage = mine + l->stage;      // (kc/4, NR, 4), (NR, kc)
        float *wd = (float *)(mine + l->wd);                       // (kc/32, NR)
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++)
            pack_x_q8(xq + i * tile_q, xd + i * tile_b, xs + i * tile_b, qx, cp, n, i * MR_Q8);
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
                        pack_w_int(wq, wd, stage, m[mi], r0, k0, kc);
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
}

// K-quants: gemm_q8's loops, with chunks of whole blocks of QK_K, and after each tile's integer
// half (kernel_k) its float step (k_finish).
void gemm_k(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const QuantizedRows *qx,
            const Matrix *const *m, int count, int n) {
    const DType type = m[0]->dtype;
    const int cp = cols_stored(type, m[0]->cols), group = type == DTYPE_GGUF_Q6_K ? 16 : 32;
    const int tiles = (n + MR_Q8 - 1) / MR_Q8;
    int kc_max = chunk_cols(tiles * MR_Q8, cp, 1) / QK_K * QK_K;
    kc_max = kc_max < QK_K ? QK_K : kc_max;
    const size_t tile_q = (size_t)cp * MR_Q8, tile_d = (size_t)cp / QK_K * MR_Q8, tile_s = (size_t)cp / K_SUM * MR_Q8;
    int8_t *xq = (int8_t *)(ws + l->xp); // (tiles, cp/4, MR_Q8, 4)
    float *xd = (float *)(ws + l->xd);   // (tiles, cp/QK_K, MR_Q8)
    int32_t *xs = (int32_t *)(ws + l->xs); // (tiles, cp/K_SUM, MR_Q8)
    const size_t kb = (size_t)KC_MAX / QK_K; // blocks of the widest chunk: kx's pieces are sized for it
#pragma omp parallel num_threads(threads)
    {
        unsigned char *mine = ws + (size_t)thread_num() * l->each;
        uint8_t *wq = mine + l->wp, *stage = mine + l->stage;                       // (kc/4, NR, 4), (NR, kc)
        int32_t *sc = (int32_t *)(mine + l->kx), *mn = sc + kb * (QK_K / 16) * NR; // (kc/group, NR), (kc/32, NR)
        float *d = (float *)(mn + kb * (QK_K / 32) * NR), *dmin = d + kb * NR;      // (kc/QK_K, NR) each
        int32_t *S = (int32_t *)(dmin + kb * NR);                                   // (kc/QK_K, MR_Q8, NR)
#pragma omp for schedule(dynamic)
        for (int i = 0; i < tiles; i++)
            pack_x_k(xq + i * tile_q, xd + i * tile_d, xs + i * tile_s, qx, cp, n, i * MR_Q8);
        for (int mi = 0; mi < count; mi++) {
            const int rows = m[mi]->rows, panels = (rows + NR - 1) / NR;
            const int grp = panel_group(panels, threads), groups = (panels + grp - 1) / grp;
#pragma omp for schedule(dynamic) nowait
            for (int g = 0; g < groups; g++) {
                const int p_end = (g + 1) * grp < panels ? (g + 1) * grp : panels;
                for (int k0 = 0; k0 < cp; k0 += kc_max) {
                    const int kc = cp - k0 < kc_max ? cp - k0 : kc_max, b0 = k0 / QK_K;
                    for (int p = g * grp; p < p_end; p++) {
                        const int r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
                        pack_w_k(wq, sc, mn, d, dmin, stage, m[mi], r0, k0, kc);
                        for (int i = 0; i < tiles; i++) {
                            const int nt = n - i * MR_Q8 < MR_Q8 ? n - i * MR_Q8 : MR_Q8;
                            kernel_k(S, kc / QK_K, group, xq + i * tile_q + (size_t)k0 * MR_Q8, wq, sc);
                            k_finish(out[mi] + (size_t)i * MR_Q8 * rows + r0, (size_t)rows, nt, nr, type, S, kc / QK_K,
                                     xd + i * tile_d + (size_t)b0 * MR_Q8,
                                     xs + i * tile_s + (size_t)k0 / K_SUM * MR_Q8, sc, mn, d, dmin, k0 > 0);
                        }
                    }
                }
            }
        }
    }
}
