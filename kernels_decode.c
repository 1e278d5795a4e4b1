// kernels_decode.c - decode: out (n, rows) = x (n, cols) @ W^T for n < GEMM_MIN_N tokens, matrix x
// vector, over f32_r16, f16_r16, bf16_r16, q8_0_r16, q4_0 and GGUF's K-quant weights.
//
// Each weight is used once per token, so a product takes as long as streaming the weights from
// memory; everything here is about reading memory at full speed and doing the arithmetic in the
// shadow of the loads (docs/speed.md, "Decode: matrix x vector", has the measurements). The plain C
// dot products come first: they define what each computes, and are what a build without vector
// code runs. kernels_x86.c has the vector dot_rows behind the same signature (kernels_internal.h
// says which a build uses). Then matvec: how the rows are grouped and shared among the threads.
#include "kernels_internal.h"

// Groups of DOT_ROWS rows a thread takes at a time (matvec); of DOT_ROWS groups of R16 rows (the
// grouped layouts).
enum { PIECE_GROUPS = 16, PIECE_GROUPS_R16 = 4 };

// ---------------------------------------------------------------------------------------------
// The dot products, plain C

// Row i of an f32_r16 or f16_r16 group (its columns of 16 rows, kernels_internal.h) . x, in their
// order: one sum, the columns' products added one after the other.
static ONE_COPY float dot_f32r16_plain(DType t, const void *group, int i, const float *x, int cols) {
    float sum = 0;
    if (t == DTYPE_F32_R16)
        for (int k = 0; k < cols; k++)
            sum += ((const float *)group)[(size_t)k * R16 + i] * x[k];
    else
        for (int k = 0; k < cols; k++)
            sum += (float)((const _Float16 *)group)[(size_t)k * R16 + i] * x[k];
    return sum;
}

// Row i of a bf16_r16 group (its words of 16 rows, kernels_internal.h) . x rounded to bf16, in
// bf16_r16's order: one sum, each pair's second column first, pair after pair, padding included.
// Read as 32-bit words, as the vector code does: written with the two columns' indices (w[2p + 1],
// then w[2p]), GCC 12.2 at -O3 vectorized the loop into wrong sums (tests/test_kernels_plain caught it).
ONE_COPY float dot_br16_plain(const uint16_t *group, int i, const uint16_t *x, int cols) {
    float sum = 0;
    for (int p = 0; p < bf16_cols(cols) / 2; p++) {
        uint32_t w, v; // row i's columns 2p (low half) and 2p + 1 (high half); x's the same
        __builtin_memcpy(&w, group + (p * R16 + i) * 2, sizeof w);
        __builtin_memcpy(&v, x + 2 * p, sizeof v);
        sum = sum + widen_bf16((uint16_t)(w >> 16)) * widen_bf16((uint16_t)(v >> 16));
        sum = sum + widen_bf16((uint16_t)w) * widen_bf16((uint16_t)v);
    }
    return sum;
}

// q4_0 weights . q8_0 activations over nb blocks: sum_b dw_b dx_b (sum_i (qw_i - 8) qx_i). The
// vector versions also read x's sum and prep; this one only q and d.
ONE_COPY float dot_q4_plain(const uint8_t *w, const _Float16 *dw, const QuantizedRow *x, int nb) {
    float sum = 0;
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < Q8_BLOCK; i++)
            s += q4_at(w + b * Q4_BLOCK_BYTES, i) * x->q[b * Q8_BLOCK + i];
        sum += (float)s * ((float)dw[b] * x->d[b]);
    }
    return sum;
}

// Row i of a q8_0_r16 group (kernels_internal.h) . q8_0 activations over nb blocks:
// sum_b dw_b dx_b (sum_i qw_i qx_i), each block's integer sum read from the stored q + 128 and
// started at -128 sum(qx), which takes the 128s off again (exact).
ONE_COPY float dot_r16_plain(const uint8_t *group, int i, const QuantizedRow *x, int nb) {
    float sum = 0;
    for (int b = 0; b < nb; b++) {
        const uint8_t *block = group + (size_t)b * R16_BLOCK_BYTES, *q = block + R16 * sizeof(float);
        int32_t s = -128 * x->sum[b];
        for (int j = 0; j < Q8_BLOCK; j++)
            s += q[r16_at(i, j)] * x->q[b * Q8_BLOCK + j];
        sum += (float)s * (((const float *)block)[i] * x->d[b]);
    }
    return sum;
}

// A K-quant row . x over nsb blocks of QK_K, x quantized in blocks of QK_K (kernels_internal.h):
// per block B one exact integer sum of the row's products with x's q, its scales (and mins) included,
// and one float step, block after block:
//   q4_K, q5_K: dx_B (d S - dmin M),  S = sum_j sc_j sum_{i in j} q_i qx_i,  M = sum_j m_j sum_{i in j} qx_i
//   q6_K:       dx_B (d S),           S = sum_h sc_h sum_{i in h} q_i qx_i   (q = its 6 bits - 32)
// over the eight sub-blocks j of 32 values, or q6_K's sixteen h of 16, each float product rounded
// once. S and M are exact in int32 (|q6_K's S| <= 16 * 128 * 16 * 32 * 127 < 2^31) whatever order
// they are added in, so every version of this product, the prefill tiles' too (kernels_prefill.c),
// gives these bits: a prompt's logits are its tokens' one at a time in every build.
ONE_COPY float dot_k_plain(DType t, const uint8_t *w, const QuantizedRow *x, int nsb) {
    const size_t bytes = (size_t)DTYPES[t].block_bytes;
    float sum = 0;
    for (int B = 0; B < nsb; B++) {
        const uint8_t *block = w + B * bytes;
        const int8_t *xq = x->q + (size_t)B * QK_K;
        const int32_t *xs = x->sum + (size_t)B * (QK_K / K_SUM);
        int32_t S = 0, M = 0;
        if (t == DTYPE_GGUF_Q6_K) {
            for (int h = 0; h < QK_K / 16; h++) {
                int32_t p = 0;
                for (int i = 16 * h; i < 16 * h + 16; i++)
                    p += q6k_at(block, i) * xq[i];
                S += q6k_scale(block, 16 * h) * p;
            }
            sum += x->d[B] * (f16_at(block + Q6K_D) * (float)S);
        } else {
            for (int j = 0; j < QK_K / 32; j++) {
                int32_t p = 0, sc, m;
                for (int i = 32 * j; i < 32 * j + 32; i++)
                    p += (t == DTYPE_GGUF_Q5_K ? q5k_at(block, i) : q4k_at(block, i)) * xq[i];
                k_scale_min(block + QK_SCALES, j, &sc, &m);
                S += sc * p;
                M += m * (xs[2 * j] + xs[2 * j + 1]);
            }
            sum += x->d[B] * (f16_at(block) * (float)S - f16_at(block + 2) * (float)M);
        }
    }
    return sum;
}

// The grouped layouts: the groups of a run are groups of R16-row groups, r, r + step, .. (DOT_ROWS
// of them at most, one from each quarter of the matrix's R16-row groups, as rows are for the other
// types).
static void dots_r16_plain(float *out, const Matrix *m, int r, int step, int count, const float *x,
                           const QuantizedRow *xq) {
    const int nb = cols_stored(m->dtype, m->cols) / Q8_BLOCK, groups = r16_groups(m->rows);
    for (int g = r; g < r + count; g++)
        for (int k = 0; k < group_rows(groups, g, step); k++) {
            const int first = (g + k * step) * R16;
            const uint8_t *group = (const uint8_t *)m->data + (size_t)(g + k * step) * group_bytes(m->dtype, m->cols);
            for (int i = 0; i < R16 && first + i < m->rows; i++)
                out[first + i] = m->dtype == DTYPE_BF16_R16 ? dot_br16_plain((const uint16_t *)group, i, xq->h, m->cols)
                                 : m->dtype == DTYPE_Q8_0_R16 ? dot_r16_plain(group, i, xq, nb)
                                                              : dot_f32r16_plain(m->dtype, group, i, x, m->cols);
        }
}

// A run of `count` groups of rows against one activation row. Group g (g < count) is rows
// r + g, r + g + step, ..., DOT_ROWS of them or as many as the matrix has (group_rows); each row's
// dot product with x goes to out[row], out being the activation row's output (m->rows values). x as
// floats (f32_r16, f16_r16), quantized (xq) for q4_0 and q8_0_r16 weights, rounded (xq->h) for
// bf16_r16. One call per run, not per group: the vector versions set up once and keep the next
// group's loads going while one ends (docs/speed.md).
void dot_rows_plain(float *out, const Matrix *m, int r, int step, int count, const float *x, const QuantizedRow *xq) {
    if (in_groups(m->dtype)) {
        dots_r16_plain(out, m, r, step, count, x, xq);
        return;
    }
    const size_t cp = (size_t)cols_stored(m->dtype, m->cols), nb = cp / Q8_BLOCK;
    for (int g = r; g < r + count; g++) {
        for (int k = 0; k < group_rows(m->rows, g, step); k++) {
            const size_t row = (size_t)(g + k * step);
            switch (m->dtype) {
            case DTYPE_Q4_0:
                out[row] = dot_q4_plain((const uint8_t *)m->data + row * cp / 2, (const _Float16 *)m->scale + row * nb,
                                        xq, (int)nb);
                break;
            case DTYPE_GGUF_Q4_K:
            case DTYPE_GGUF_Q5_K:
            case DTYPE_GGUF_Q6_K:
                out[row] = dot_k_plain(m->dtype, (const uint8_t *)m->data + row * row_bytes(m->dtype, m->cols), xq,
                                       (int)(cp / QK_K));
                break;
            case DTYPE_Q8_0_R16: // in groups of rows: dots_r16_plain, above
            case DTYPE_BF16_R16:
            case DTYPE_F32_R16:
            case DTYPE_F16_R16:
            case DTYPE_F32: // file types only, copied at load: matmul refuses them (dtype.h)
            case DTYPE_F16:
            case DTYPE_Q8_0:
            case DTYPE_BF16:
            case DTYPE_GGUF_Q8_0:
            case DTYPE_GGUF_Q4_0:
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// matvec: out[i] (n, m[i]->rows) = x (n, cols) @ m[i]^T for the `count` matrices,
// which share cols and dtype: their rows are shared out together in one parallel region. A matrix
// of R rows is read as ceil(R / 4) groups: group j is rows j, j + R/4, j + 2R/4, j + 3R/4, read at
// once (dot_rows), so the groups in order stream the matrix's four quarters side by side, four long
// sequential runs, as bench/bwprobe reads: the hardware prefetcher follows a few long streams and
// starts over at every short one (docs/speed.md, "Where a step's reads go", has the layouts tried).
// The grouped layouts (q8_0_r16, bf16_r16, f32_r16, f16_r16): the same with groups of R16 rows for
// rows (a group of the run is 4 x 16 rows, and a piece PIECE_GROUPS_R16 of those, 256 rows where
// another type's piece is 64).
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

// The groups of a matrix, which is also how far apart a group's rows are (the grouped layouts: its
// groups of R16 rows, in groups of DOT_ROWS of them the same way).
static int row_groups(const Matrix *m) {
    const int units = in_groups(m->dtype) ? r16_groups(m->rows) : m->rows;
    return (units + DOT_ROWS - 1) / DOT_ROWS;
}
// The groups of a piece, for the stack's weight type (one type per stack).
static int piece_groups(const Matrix *m) { return in_groups(m->dtype) ? PIECE_GROUPS_R16 : PIECE_GROUPS; }

// Groups g0 .. g1-1 of the stack of matrices (one piece), for each of the n activation rows x (and
// quantized, xq). The piece's first group is found once; from there the piece goes as runs of
// groups within one matrix (consecutive rows r, r + 1, ..), one dot_rows call per run.
static void matvec_piece(float *const *out, const float *x, const Matrix *const *m, int g0, int g1, int n,
                         const QuantizedRow *xq) {
    int i = 0, j = g0; // group g0 of the stack is group j of matrix i
    while (j >= row_groups(m[i]))
        j -= row_groups(m[i++]);
    for (int g = g0; g < g1;) {
        if (j == row_groups(m[i])) i++, j = 0;
        const int rows = m[i]->rows, cols = m[i]->cols, step = row_groups(m[i]); // group j: rows j, j + step, ..
        const int count = step - j < g1 - g ? step - j : g1 - g;
        for (int t = 0; t < n; t++)
            dot_rows(out[i] + (size_t)t * rows, m[i], j, step, count, x + (size_t)t * cols, &xq[t]);
        g += count, j += count;
    }
}

// The next piece of a run (PieceRun), from its front or its back; -1 when the run is empty.
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
                        const float *x, const Matrix *const *m, int n, const QuantizedRow *xq) {
    const int per = piece_groups(m[0]);
    for (int k = 0; k < threads; k++) {
        PieceRun *run = &runs[(self + k) % threads];
        for (int p; (p = take_piece(run, k > 0)) >= 0;)
            matvec_piece(out, x, m, p * per, p < pieces - 1 ? (p + 1) * per : groups, n, xq);
    }
}

void matvec(unsigned char *ws, const WsLayout *l, int threads, float *const *out, const float *x,
            const QuantizedRows *qx, const Matrix *const *m, int count, int n) {
    int groups = 0;
    for (int i = 0; i < count; i++)
        groups += row_groups(m[i]);
    const int per = piece_groups(m[0]);
    const int pieces = (groups + per - 1) / per;
    threads = threads < pieces ? threads : pieces;
    const DType t0 = m[0]->dtype;
    const size_t cp = (size_t)cols_stored(t0, m[0]->cols), nd = x_scales(t0, cp), ns = x_sums(t0, cp);
    // Token t's row of x quantized (or rounded to bf16), as the dot products read it (f32, f16: none);
    // for q4_0 weights the decode hook (kernels_internal.h) arranges x once more, as the vector dot
    // products read it.
    const int8_t *prep = m[0]->dtype == DTYPE_Q4_0 ? q4_prep((int8_t *)(ws + l->prep), qx, n, cp) : NULL;
    QuantizedRow xq[n];
    for (int t = 0; t < n; t++)
        xq[t] = qx ? (QuantizedRow){qx->q + t * cp, qx->d + t * nd, qx->sum + t * ns,
                                    prep ? prep + t * q4_prep_bytes(cp) : NULL,
                                    qx->h + t * (size_t)bf16_cols(m[0]->cols)}
                   : (QuantizedRow){0};
    PieceRun *runs = (PieceRun *)(ws + l->runs);
    for (int t = 0; t < threads; t++) // thread t's run: pieces [pieces t / threads, pieces (t + 1) / threads)
        atomic_init(&runs[t].next_end,
                    (uint64_t)((int64_t)pieces * (t + 1) / threads) << 32 | (uint64_t)((int64_t)pieces * t / threads));
    if (threads == 1) { // no team for one thread (kernels.c)
        matvec_runs(runs, 0, 1, pieces, groups, out, x, m, n, xq);
        return;
    }
#pragma omp parallel num_threads(threads)
    matvec_runs(runs, thread_num(), threads, pieces, groups, out, x, m, n, xq);
}
