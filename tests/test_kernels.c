// test_kernels.c - every fast matrix product against the plain reference (kernels.h).
//
// For each weight type the kernels multiply (f32_r16, f16_r16, q4_0, q8_0_r16, bf16_r16, the K-quants), each
// shape (odd ones: 1 column, 172 columns, rows that are no multiple of anything, enough tokens and
// columns to cross the tile and chunk edges) and each token count (1 = decode's matrix x vector; 4
// and more = prefill's blocked matrix x matrix):
//   1. matmul agrees with matmul_ref within a stated bound (below);
//   2. matmul of n tokens equals n calls of one token within float rounding (prefill vs decode);
//   3. the result is bit-identical with 1, 2 and 3 threads, and when the first half of the tokens
//      is multiplied alone (prefill sums do not depend on the block size), and matmul_many
//      equals matmul;
// attention against attention_ref (with a negative control), also with keys turned as read (dynamic NTK)
// and with ReRoPE's two score paths (with a window off by one as the control), sliding and NoPE layers
// and dual chunk attention (each with its control); softmax (with its e^-40
// cutoff) and rmsnorm against double; bf16: the rounding of x against its definition (with truncation
// as the control), bf16_r16's decode and prefill sums bit for bit against its order, one sum per
// row (the pairs' other order and the first bf16 layout's lanes-and-tree order as the controls), and
// n tokens bit for bit one token at a time; f32_r16's and f16_r16's likewise against theirs (a
// vector dot product's lanes and tree as the control); matrix_to_r16 against f16 weights rounded and
// bf16, q8_0, f32 and f16 ones laid out here (an f16 weight that is no bf16 number and a buffer of
// 0xAB as the controls); matmul refusing the first bf16 and q8_0 layouts and f32 and f16 in rows,
// which the loader copies into the grouped layouts.
// Bounds, relative to s = sum_k |w_k x_k| of each output (the scale rounding errors live on):
//   f32_r16, f16_r16  |fast - ref| <= 1e-5 s: a float sum of cols terms against a double one.
//   bf16_r16  the same: x is rounded to bf16 in matmul_ref too, so only the sums' rounding is left.
//   q4_0, q8_0_r16  |fast - ref| <= e + 1e-5 s, e = sum_blocks dw * sum|qw| * dx / 2: the
//             activations are rounded to 8 bits per block (half a step dx / 2 at most each), the
//             weights are already exactly q * d, so e bounds the whole quantization error.
// Prints the largest error as a fraction of its bound per weight type (per case with -v, and
// every failing case), and a one-line verdict.
// Built three times by the Makefile: native (this machine's best: AVX-512 with VNNI on some x86
// machines, AVX2 on others), -march=haswell (AVX2 without AVX-512) and -DKERNELS_PLAIN (the plain C
// every other machine compiles).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"
#include "kernels_internal.h" // the quantizers of x, checked against their plain C below

static unsigned long long rng = 88172645463325252ULL;

static float uniform(void) { // xorshift64, in [-1, 1)
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

typedef struct {
    Matrix m;
    void *data;
    float *scale;
} TestMatrix;

// A random (rows, cols) matrix stored as dtype; q8_0 quantized as export.py does it.
static TestMatrix make_matrix_r16(int rows, int cols);
static TestMatrix make_matrix_br16(int rows, int cols);
static TestMatrix make_matrix_r16f(DType t, int rows, int cols);
static int failures = 0, verbose = 0;
static TestMatrix make_matrix(DType t, int rows, int cols) {
    if (t == DTYPE_Q8_0_R16) return make_matrix_r16(rows, cols);
    if (t == DTYPE_BF16_R16) return make_matrix_br16(rows, cols);
    if (t == DTYPE_F32_R16 || t == DTYPE_F16_R16) return make_matrix_r16f(t, rows, cols);
    TestMatrix tm = {{NULL, NULL, rows, cols, t}, NULL, NULL};
    const int cp = matrix_cols_stored(t, cols);
    tm.data = calloc(matrix_data_bytes(t, rows, cols), 1);
    if (DTYPES[t].block == QK_K) { // K-quants: random bits, but for d and dmin (f16 of the size of a
        // weight over its largest q and scale, with both signs, as llama.cpp's quantizer may write)
        uint8_t *b = tm.data;
        for (size_t i = 0; i < matrix_data_bytes(t, rows, cols); i++)
            b[i] = (uint8_t)((rng = rng * 6364136223846793005ULL + 1442695040888963407ULL) >> 56);
        for (size_t B = 0; B < matrix_data_bytes(t, rows, cols) / DTYPES[t].block_bytes; B++) {
            _Float16 *d = (_Float16 *)(b + B * DTYPES[t].block_bytes + (t == DTYPE_GGUF_Q6_K ? 208 : 0));
            d[0] = (_Float16)(uniform() / 500);
            if (t != DTYPE_GGUF_Q6_K) d[1] = (_Float16)(uniform() / 500);
        }
        tm.m.data = tm.data;
        return tm;
    }
    if (t == DTYPE_Q8_0) tm.scale = calloc((size_t)rows * cp / Q8_BLOCK, sizeof(float));
    if (t == DTYPE_Q4_0) tm.scale = calloc((size_t)rows * cp / Q8_BLOCK, sizeof(_Float16));
    float row[cp];
    for (int r = 0; r < rows; r++) {
        memset(row, 0, sizeof row);
        for (int c = 0; c < cols; c++)
            row[c] = uniform() * (1 + (r % 7)); // rows of different sizes
        if (t == DTYPE_F32) memcpy((float *)tm.data + (size_t)r * cp, row, cols * sizeof(float));
        if (t == DTYPE_F16)
            for (int c = 0; c < cols; c++)
                ((_Float16 *)tm.data)[(size_t)r * cp + c] = (_Float16)row[c];
        if (t == DTYPE_BF16)
            for (int c = 0; c < cols; c++)
                ((uint16_t *)tm.data)[(size_t)r * cp + c] = bf16_round(row[c]);
        if (t == DTYPE_Q4_0) { // ggml's Q4_0: d = (the value of largest magnitude) / -8, q = x / d + 8
            for (int b = 0; b < cp / Q8_BLOCK; b++) {
                float max = 0;
                for (int i = 0; i < Q8_BLOCK; i++)
                    if (fabsf(row[b * Q8_BLOCK + i]) > fabsf(max)) max = row[b * Q8_BLOCK + i];
                const _Float16 d = (_Float16)(max / -8);
                ((_Float16 *)tm.scale)[(size_t)r * cp / Q8_BLOCK + b] = d;
                uint8_t *block = (uint8_t *)tm.data + ((size_t)r * cp + b * Q8_BLOCK) / 2;
                for (int i = 0; i < Q8_BLOCK; i++) {
                    int q = d != 0 ? (int)fminf(15, fmaxf(0, rintf(row[b * Q8_BLOCK + i] / (float)d) + 8)) : 8;
                    block[i % 16] |= (uint8_t)(i < 16 ? q : q << 4);
                }
            }
        }
        if (t == DTYPE_Q8_0) {
            for (int b = 0; b < cp / Q8_BLOCK; b++) {
                float amax = 0;
                for (int i = 0; i < Q8_BLOCK; i++)
                    amax = fmaxf(amax, fabsf(row[b * Q8_BLOCK + i]));
                const float d = amax / 127;
                tm.scale[(size_t)r * cp / Q8_BLOCK + b] = d;
                for (int i = 0; i < Q8_BLOCK; i++)
                    ((int8_t *)tm.data)[(size_t)r * cp + b * Q8_BLOCK + i] =
                        (int8_t)(d > 0 ? rintf(row[b * Q8_BLOCK + i] / d) : 0);
            }
        }
    }
    tm.m.data = tm.data;
    tm.m.scale = tm.scale;
    return tm;
}

// A matrix in a 16-row layout read back through kernels.c's matrix_row (which matmul_ref reads too)
// against the same numbers in rows: the same bits, or a failure.
static void same_rows(const Matrix *grouped, const Matrix *rows) {
    float a[rows->cols], b[rows->cols];
    for (int r = 0; r < rows->rows; r++) {
        matrix_row(a, grouped, r);
        matrix_row(b, rows, r);
        if (memcmp(a, b, sizeof a)) {
            printf("%s %d x %d: row %d reads back otherwise than its %s row  <-- FAIL\n", dtype_name(grouped->dtype),
                   rows->rows, rows->cols, r, dtype_name(rows->dtype));
            failures++;
            return;
        }
    }
}

// A q8_0 matrix (the first layout: rows of q, then the scales) laid out in q8_0_r16's groups of 16
// rows (model.h) as export.py does it, into data (matrix_data_bytes(DTYPE_Q8_0_R16, ...) bytes), the
// padding rows zero (q + 128 = 128, d = 0).
static void r16_layout(uint8_t *data, const TestMatrix *q8, int rows, int cols) {
    const int nb = matrix_cols_stored(DTYPE_Q8_0, cols) / Q8_BLOCK, groups = (rows + 15) / 16;
    const size_t block = 16 * sizeof(float) + 16 * Q8_BLOCK;
    for (int g = 0; g < groups; g++)
        for (int b = 0; b < nb; b++) {
            uint8_t *at = data + ((size_t)g * nb + b) * block;
            for (int i = 0; i < 16; i++) {
                const int r = g * 16 + i;
                const float d = r < rows ? q8->scale[(size_t)r * nb + b] : 0;
                memcpy(at + i * sizeof(float), &d, sizeof d);
                for (int j = 0; j < Q8_BLOCK; j++) {
                    const int q = r < rows ? ((const int8_t *)q8->data)[((size_t)r * nb + b) * Q8_BLOCK + j] : 0;
                    at[16 * sizeof(float) + j / 4 * 64 + i * 4 + j % 4] = (uint8_t)(q + 128);
                }
            }
        }
}

// A random (rows, cols) matrix in q8_0_r16: the q8_0 matrix of the same random numbers in groups.
static TestMatrix make_matrix_r16(int rows, int cols) {
    TestMatrix q8 = make_matrix(DTYPE_Q8_0, rows, cols);
    TestMatrix tm = {{NULL, NULL, rows, cols, DTYPE_Q8_0_R16}, NULL, NULL};
    uint8_t *data = calloc(matrix_data_bytes(DTYPE_Q8_0_R16, rows, cols), 1);
    r16_layout(data, &q8, rows, cols);
    tm.data = data;
    tm.m.data = data;
    same_rows(&tm.m, &q8.m); // the layout read back: the q8_0 rows, bit for bit
    free(q8.data);
    free(q8.scale);
    return tm;
}

// A random (rows, cols) matrix in bf16_r16: the bf16 matrix of the same random numbers, its rows laid
// out in groups of 16 (model.h) as export.py does it: per group, pair p of columns of rows 0 .. 15 as
// 16 words (column 2p in the low half), the padding rows and columns zero.
static void br16_layout(uint16_t *data, const uint16_t *bits, int rows, int cols) { // data zeroed
    const int cp = (cols + 31) / 32 * 32, groups = (rows + 15) / 16;
    for (int g = 0; g < groups; g++)
        for (int i = 0; i < 16 && g * 16 + i < rows; i++)
            for (int c = 0; c < cols; c++)
                data[(size_t)g * 16 * cp + (c / 2) * 32 + i * 2 + c % 2] = bits[(size_t)(g * 16 + i) * cols + c];
}
static TestMatrix make_matrix_br16(int rows, int cols) {
    TestMatrix bf = make_matrix(DTYPE_BF16, rows, cols);
    TestMatrix tm = {{NULL, NULL, rows, cols, DTYPE_BF16_R16}, NULL, NULL};
    uint16_t *data = calloc(matrix_data_bytes(DTYPE_BF16_R16, rows, cols), 1);
    br16_layout(data, bf.data, rows, cols);
    tm.data = data;
    tm.m.data = data;
    same_rows(&tm.m, &bf.m); // the layout read back: the bf16 rows, bit for bit
    free(bf.data);
    return tm;
}

// f32 or f16 values (elem bytes each) in rows laid out in f32_r16's or f16_r16's groups of 16 rows
// (kernels_internal.h): per group, column c of rows 0 .. 15 side by side, the padding rows zero.
static void r16f_layout(uint8_t *data, const uint8_t *values, int rows, int cols, size_t elem) { // data zeroed
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            memcpy(data + (((size_t)(r / 16) * cols + c) * 16 + r % 16) * elem, values + ((size_t)r * cols + c) * elem,
                   elem);
}
// A random (rows, cols) matrix in f32_r16 or f16_r16: the f32 or f16 matrix of the same random
// numbers laid out by r16f_layout.
static TestMatrix make_matrix_r16f(DType t, int rows, int cols) {
    const DType from = t == DTYPE_F32_R16 ? DTYPE_F32 : DTYPE_F16;
    TestMatrix plain = make_matrix(from, rows, cols);
    TestMatrix tm = {{NULL, NULL, rows, cols, t}, NULL, NULL};
    tm.data = calloc(matrix_data_bytes(t, rows, cols), 1);
    r16f_layout(tm.data, plain.data, rows, cols, from == DTYPE_F32 ? 4 : 2);
    tm.m.data = tm.data;
    same_rows(&tm.m, &plain.m); // the layout read back: the rows, bit for bit
    free(plain.data);
    return tm;
}

// The bound on |fast - ref| for output (t, r), as described at the top; *rounding = its float part.
static double error_bound(const Matrix *m, const float *x, int t, int r, double *rounding) {
    const int cols = m->cols;
    const float *xt = x + (size_t)t * cols;
    double s = 0, e = 0;
    float w[cols];
    matrix_row(w, m, r);
    for (int c = 0; c < cols; c++)
        s += fabs((double)w[c] * xt[c]);
    if (DTYPES[m->dtype].x == X_Q8) { // x quantized to 8 bits, in blocks of 32 (K-quants: of QK_K)
        const int xb = DTYPES[m->dtype].block == QK_K ? QK_K : Q8_BLOCK;
        for (int b = 0; b * xb < cols; b++) {
            double amax = 0, wsum = 0;
            for (int c = b * xb; c < cols && c < (b + 1) * xb; c++) {
                amax = fmax(amax, fabs(xt[c]));
                wsum += fabs(w[c]);
            }
            e += wsum * (amax / 127) / 2;
        }
    }
    *rounding = 1e-5 * s + 1e-30;
    return e + *rounding;
}

// matmul with a workspace of its own, sized for this product on `threads` threads.
static void mm(float *out, const float *x, const Matrix *m, int n, int threads) {
    Workspace ws = {NULL, workspace_bytes(n, m->cols, threads), n, m->cols, threads};
    ws.base = aligned_alloc(64, (ws.bytes + 63) / 64 * 64);
    if (!ws.base || matmul(&ws, out, x, m, n)) {
        printf("matmul refused a workspace sized by workspace_bytes  <-- FAIL\n");
        failures++;
    }
    free(ws.base);
}
static double worst_of[DTYPE_COUNT][2]; // per weight type: vs ref, n tokens vs 1 at a time
static double worst_attention;
static double largest_off_by_one; // check_rerope: the largest move of the output by a window off by one

// What attention reads of RoPE in the two layers of check_attention's caches (rope.h): layer 0 plain,
// layer 1 as each check sets it (KVCache.rope points here).
static RopeAttention test_rope[2];

// A key table in rope.h's layout (blocks of ROPE_KEY_BLOCK positions, row 2p the cosines of pair p,
// row 2p + 1 its sines) from cs, sn ((ctx, hd / 2) each), written out here from that description.
static float *key_table(const float *cs, const float *sn, int ctx, int hd) {
    const int B = ROPE_KEY_BLOCK, half = hd / 2;
    float *t = calloc((size_t)(ctx + B - 1) / B * B * hd, sizeof(float));
    for (int j = 0; t && j < ctx; j++)
        for (int p = 0; p < half; p++) {
            t[(size_t)(j / B) * hd * B + (size_t)2 * p * B + j % B] = cs[(size_t)j * half + p];
            t[(size_t)(j / B) * hd * B + (size_t)(2 * p + 1) * B + j % B] = sn[(size_t)j * half + p];
        }
    return t;
}

static void check_case(DType t, int rows, int cols, int n) {
    TestMatrix tm = make_matrix(t, rows, cols);
    const Matrix *m = &tm.m;
    float *x = malloc(sizeof(float) * n * cols);
    float *ref = malloc(sizeof(float) * n * rows), *fast = malloc(sizeof(float) * n * rows);
    float *one = malloc(sizeof(float) * n * rows), *other = malloc(sizeof(float) * n * rows);
    for (int i = 0; i < n * cols; i++)
        x[i] = uniform() * (i % 5 == 0 ? 4 : 1); // uneven blocks
    for (int i = 0; i < n * rows; i++) // an output the product forgets to write fails the bound
        fast[i] = one[i] = other[i] = 1e30f;
    matmul_ref(ref, x, m, n);
    mm(fast, x, m, n, 2);
    for (int i = 0; i < n; i++)
        mm(one + (size_t)i * rows, x + (size_t)i * cols, m, 1, 2);

    double worst = 0, worst_split = 0; // largest |error| / bound
    for (int i = 0; i < n; i++)
        for (int r = 0; r < rows; r++) {
            const size_t at = (size_t)i * rows + r;
            double rounding, bound = error_bound(m, x, i, r, &rounding);
            worst = fmax(worst, fabs((double)fast[at] - ref[at]) / bound);
            // prefill vs decode: the same quantized inputs, only the float summation order differs
            worst_split = fmax(worst_split, fabs((double)fast[at] - one[at]) / rounding);
        }
    // Prefill of the first half of the tokens gives the same bits as their rows of the whole block:
    // the column chunks (sized from n) and the tiles do not change any sum.
    int same_prefix = 1;
    if (n >= 8) {
        mm(other, x, m, n / 2, 2);
        same_prefix = memcmp(other, fast, sizeof(float) * (n / 2) * rows) == 0;
    }
    int same_threads = 1;
    for (int nt = 1; nt <= 3; nt++) {
        mm(other, x, m, n, nt);
        same_threads &= memcmp(other, fast, sizeof(float) * n * rows) == 0;
    }
    // bf16: every output in one order (kernels_internal.h), so a prompt's tokens are the bits of each
    // token alone (x is rounded to bf16 between layers, where any difference could grow); q8_0_r16:
    // prefill adds each row's blocks as decode does, in order, each as sum * (dw * dx); bf16_r16 as bf16.
    // K-quants: every version sums each block's integers exactly, then one float step per block in
    // order (dot_k_plain); q4_0 as q8_0_r16 (kernels_x86.c, block_sums4).
    // f32_r16, f16_r16: one chain per row over the columns in order, decode and tiles alike.
    const int split_exact = t == DTYPE_Q8_0_R16 || t == DTYPE_BF16_R16 || t == DTYPE_Q4_0 || DTYPES[t].block == QK_K ||
                            t == DTYPE_F32_R16 || t == DTYPE_F16_R16;
    const int same_split = !split_exact || memcmp(fast, one, sizeof(float) * n * rows) == 0;
    const int ok = worst <= 1 && worst_split <= 1 && same_threads && same_prefix && same_split;
    failures += !ok;
    worst_of[t][0] = fmax(worst_of[t][0], worst);
    worst_of[t][1] = fmax(worst_of[t][1], worst_split);
    if (verbose || !ok)
        printf("%-4s %5d x %-5d n %-4d  error/bound: vs ref %.3f, n tokens vs 1 at a time %.3f, threads 1-3 %s, "
               "first n/2 tokens alone %s%s%s\n",
               dtype_name(t), rows, cols, n, worst, worst_split, same_threads ? "identical" : "DIFFER",
               same_prefix ? "identical" : "DIFFER", same_split ? "" : ", n tokens vs 1 NOT bit for bit",
               ok ? "" : "  <-- FAIL");
    free(x);
    free(ref);
    free(fast);
    free(one);
    free(other);
    free(tm.data);
    free(tm.scale);
}

// ReRoPE on a cache c whose keys attention turns as it reads them (README, "ReRoPE"): a key at
// distance >= W is scored with the far queries (turn 1, q_far) instead, against the keys as cached
// (rerope) or turned by a second table of random angles (leaky). Windows: 1 (every earlier key far),
// 33 (a block boundary inside a block of queries), about half the length, and past every distance
// (all near: the bits of `turned`, the result without ReRoPE). Each query alone gives the same bits.
// Controls, at the middle window: the far path moves some output by more than 1e-3 (it is read), and
// the reference with the window off by one, W + 1, is farther from attention's output than the right
// one (a single key changes path there, so the move can be small; the largest one over all cases is
// printed). Returns 1 when the bits and the controls are right; the largest error / bound to *worst.
static int check_rerope(KVCache *c, const float *q, const float *turned, float *ref, float *cs, float *sn, int n,
                        int pos, float *scratch, int threads, double *worst) {
    const int qd = c->n_heads * c->head_dim, half = c->head_dim / 2, len = pos + n, layer = 1, ctx = c->ctx;
    int ok = 1;
    float *q_far = malloc(sizeof(float) * n * qd), *two = malloc(sizeof(float) * n * qd);
    for (int i = 0; i < n * qd; i++)
        q_far[i] = 2 * uniform();
    for (int j = 0; j < ctx * half; j++) {
        const double angle = 3.2 * uniform();
        cs[j] = (float)cos(angle), sn[j] = (float)sin(angle);
    }
    float *table_far = key_table(cs, sn, ctx, c->head_dim);
    const RopeAttention near = test_rope[layer];
    const int windows[2][3] = {{1, len / 2 + 1, len + 1}, {33, len / 2 + 1, 0}}; // rerope, leaky
    for (int leaky = 0; leaky < 2; leaky++)
        for (int w = 0; w < 3 && windows[leaky][w]; w++) {
            const int W = windows[leaky][w];
            test_rope[layer] = (RopeAttention){.turns = 2, .keys = {near.keys[0], leaky ? table_far : NULL}, .window = W};
            attention(two, q, q_far, c, layer, n, pos, scratch, threads);
            attention_ref(ref, q, q_far, c, layer, n, pos);
            for (int i = 0; i < n * qd; i++)
                *worst = fmax(*worst, fabs((double)two[i] - ref[i]) / 1e-5);
            if (w == 1 && len > 2) { // controls: the far path matters, and so does W to the position
                double error = 0, far = 0, off = 0;
                test_rope[layer].window = W + 1;
                float *other = malloc(sizeof(float) * n * qd);
                attention_ref(other, q, q_far, c, layer, n, pos);
                for (int i = 0; i < n * qd; i++) {
                    error = fmax(error, fabs((double)two[i] - ref[i]));
                    far = fmax(far, fabs((double)two[i] - turned[i]));
                    off = fmax(off, fabs((double)two[i] - other[i]));
                }
                free(other);
                test_rope[layer].window = W;
                ok &= far > 1e-3 && off > 2 * error;
                largest_off_by_one = fmax(largest_off_by_one, off);
            }
            if (W > len) ok &= memcmp(two, turned, sizeof(float) * n * qd) == 0;
            for (int a = 0; a < 3; a++) {
                const int i = a == 0 ? 0 : a == 1 ? n / 2 : n - 1;
                attention(ref, q + (size_t)i * qd, q_far + (size_t)i * qd, c, layer, 1, pos + i, scratch, threads);
                ok &= memcmp(ref, two + (size_t)i * qd, sizeof(float) * qd) == 0;
            }
        }
    test_rope[layer] = near;
    free(q_far);
    free(two);
    free(table_far);
    return ok;
}

// The other per-layer and per-mode paths of attention, on the same cache (keys turned by the table
// the caller set, random angles): a sliding layer (Mistral: a query sees the last `slide` positions;
// windows 1, 33 and about half the length), a layer without RoPE (SmolLM3's NoPE: one turn and no key
// table, so the output is that of the keys as cached, `unturned`), and dual chunk attention (chunks of
// 5, 33 and about half the length: the query's turn follows the key's chunk). Each against
// attention_ref, each query alone giving the same bits; controls: the window and the chunk each off
// by one must move the reference's output away from attention's. Returns 1 when all hold.
static int check_layers_and_dca(KVCache *c, const float *q, const float *unturned, float *ref, int n, int pos,
                                float *scratch, int threads, double *worst) {
    const int qd = c->n_heads * c->head_dim, len = pos + n, layer = 1;
    int ok = 1, kinds[2] = {0, 0};
    float *out = malloc(sizeof(float) * n * qd), *q_far = malloc(sizeof(float) * n * 2 * qd);
    for (int i = 0; i < n * 2 * qd; i++)
        q_far[i] = 2 * uniform();
    c->layer_kind = kinds;
    const RopeAttention turned = test_rope[layer];
    const int sizes[3] = {1, 33, len / 2 + 1};
    for (int mode = 0; mode < 3; mode++) // sliding, NoPE, dca
        for (int w = 0; w < (mode == 1 ? 1 : 3); w++) {
            const int W = mode == 2 && sizes[w] == 1 ? 5 : sizes[w];
            kinds[layer] = mode == 0 ? LAYER_SLIDING : mode == 1 ? LAYER_NO_ROPE : 0;
            c->slide = mode == 0 ? W : 0;
            test_rope[layer] = mode == 1   ? (RopeAttention){.turns = 1}
                               : mode == 2 ? (RopeAttention){.turns = 3, .keys = {turned.keys[0]}, .chunk = W}
                                           : turned;
            const float *far = mode == 2 ? q_far : NULL;
            attention(out, q, far, c, layer, n, pos, scratch, threads);
            attention_ref(ref, q, far, c, layer, n, pos);
            double error = 0;
            for (int i = 0; i < n * qd; i++)
                error = fmax(error, fabs((double)out[i] - ref[i]));
            *worst = fmax(*worst, error / 1e-5);
            if (mode == 1) ok &= memcmp(out, unturned, sizeof(float) * n * qd) == 0; // NoPE: no turn at all
            if (mode != 1 && W + 1 < len) { // the control: one more position in the window or the chunk
                c->slide += mode == 0, test_rope[layer].chunk += mode == 2;
                attention_ref(ref, q, far, c, layer, n, pos);
                double off = 0;
                for (int i = 0; i < n * qd; i++)
                    off = fmax(off, fabs((double)out[i] - ref[i]));
                ok &= off > 2 * error && off > 1e-6;
                c->slide -= mode == 0, test_rope[layer].chunk -= mode == 2;
            }
            for (int a = 0; a < 3; a++) { // each query alone: the same bits
                const int i = a == 0 ? 0 : a == 1 ? n / 2 : n - 1;
                attention(ref, q + (size_t)i * qd, far ? far + (size_t)i * 2 * qd : NULL, c, layer, 1, pos + i, scratch,
                          threads);
                ok &= memcmp(ref, out + (size_t)i * qd, sizeof(float) * qd) == 0;
            }
        }
    c->layer_kind = NULL, c->slide = 0;
    test_rope[layer] = turned;
    free(out);
    free(q_far);
    return ok;
}

// attention (fast) against attention_ref (double, three plain loops) on a cache filled with random
// keys and values: grouped-query shapes, odd head sizes, one query (decode) and a block of queries
// (prefill) ending at the last position. The output is a weighted mean of values in [-1, 1], so
// the bound is absolute: 1e-5. A changed cached value must change the reference (negative control).
static void check_attention(DType kt, DType vt, int n_heads, int n_kv_heads, int hd, int len, int n, int rerope) {
    const int layers = 2, layer = 1, ctx = len + 3, qd = n_heads * hd, kvd = n_kv_heads * hd, pos = len - n;
    KVCache c = {.keys = malloc(kv_cache_bytes(kt, layers, ctx, n_kv_heads, hd)),
                 .values = malloc(kv_cache_bytes(vt, layers, ctx, n_kv_heads, hd)),
                 .key_type = kt,
                 .value_type = vt,
                 .n_layers = layers,
                 .ctx = ctx,
                 .n_heads = n_heads,
                 .n_kv_heads = n_kv_heads,
                 .head_dim = hd,
                 .rope = test_rope};
    float *k = malloc(sizeof(float) * kvd), *v = malloc(sizeof(float) * kvd), *q = malloc(sizeof(float) * n * qd);
    float *fast = malloc(sizeof(float) * n * qd), *ref = malloc(sizeof(float) * n * qd);
    const int threads = max_threads(); // more threads than cores would only spin at the barriers
    float *scratch = malloc(sizeof(float) * threads * attention_scratch_floats(ctx, n_heads, n_kv_heads, hd, 2));
    for (int l = 0; l < layers; l++)
        for (int j = 0; j < ctx; j++) {
            for (int i = 0; i < kvd; i++)
                k[i] = 2 * uniform(), v[i] = uniform();
            kv_store(&c, l, k, v, j, 1);
        }
    for (int i = 0; i < n * qd; i++)
        q[i] = 2 * uniform();
    attention(fast, q, NULL, &c, layer, n, pos, scratch, threads);
    attention_ref(ref, q, NULL, &c, layer, n, pos);
    double worst = 0;
    for (int i = 0; i < n * qd; i++)
        worst = fmax(worst, fabs((double)fast[i] - ref[i]) / 1e-5);
    // The block's first, middle and last query alone (decode) give the same bits: a query's result
    // must not depend on the block it came in (its masked positions add exact zeros).
    int same = 1;
    for (int a = 0; a < 3; a++) {
        const int i = a == 0 ? 0 : a == 1 ? n / 2 : n - 1;
        attention(ref, q + (size_t)i * qd, NULL, &c, layer, 1, pos + i, scratch, threads);
        same &= memcmp(ref, fast + (size_t)i * qd, sizeof(float) * qd) == 0;
    }
    // The same cache read as un-rotated keys with a key table of random angles (dynamic NTK's way):
    // attention must turn every key as the reference does (kv_key_seen), and the turn must matter
    // (the outputs move by more than 1e-3 somewhere, given more than one position to weigh).
    double worst_turned = 0, moved = hd % 2 ? 1 : 0, worst_rerope = 0;
    int rerope_ok = 1; // check_rerope: bits, the all-near window, the control
    if (hd % 2 == 0) {
        const int half = hd / 2;
        float *cs = malloc(sizeof(float) * ctx * half), *sn = malloc(sizeof(float) * ctx * half);
        float *turned = malloc(sizeof(float) * n * qd);
        for (int j = 0; j < ctx * half; j++) {
            const double angle = 3.2 * uniform();
            cs[j] = (float)cos(angle), sn[j] = (float)sin(angle);
        }
        float *table = key_table(cs, sn, ctx, hd);
        test_rope[layer] = (RopeAttention){.turns = 1, .keys = {table}};
        attention(turned, q, NULL, &c, layer, n, pos, scratch, threads);
        attention_ref(ref, q, NULL, &c, layer, n, pos);
        for (int i = 0; i < n * qd; i++) {
            worst_turned = fmax(worst_turned, fabs((double)turned[i] - ref[i]) / 1e-5);
            moved = fmax(moved, fabs((double)turned[i] - fast[i]));
        }
        if (rerope) rerope_ok = check_rerope(&c, q, turned, ref, cs, sn, n, pos, scratch, threads, &worst_rerope);
        if (rerope) rerope_ok &= check_layers_and_dca(&c, q, fast, ref, n, pos, scratch, threads, &worst_rerope);
        test_rope[layer] = (RopeAttention){.turns = 1};
        free(cs);
        free(sn);
        free(table);
        free(turned);
    }
    worst = fmax(worst, fmax(worst_turned, worst_rerope));
    // Negative control: coordinate 0 of every cached value of kv head 0 moves by 1, so head 0's
    // output coordinate 0 must move by 1 (the weights sum to 1; within 1e-2, a half's rounding of
    // the moved values) and no longer match.
    for (int j = 0; j < ctx; j++) {
        for (int i = 0; i < kvd; i++)
            k[i] = kv_key(&c, layer, j, i), v[i] = kv_value(&c, layer, j, i);
        v[0] += 1;
        kv_store(&c, layer, k, v, j, 1);
    }
    attention_ref(ref, q, NULL, &c, layer, 1, pos);
    const int control = fabs((double)fast[0] - ref[0] + 1) < 1e-2;
    const int ok = worst <= 1 && control && same && rerope_ok &&
                   (moved > 1e-3 || len == 1); // one position: weight 1 whatever the score
    failures += !ok;
    worst_attention = fmax(worst_attention, worst);
    if (verbose || !ok)
        printf("attention %s/%s cache, %d/%d heads, head_dim %-4d len %-5d n %-3d error/bound %.3f, one at a time %s, "
               "turned keys %.3f (moved %.1e), rerope %.3f (%s), control %s%s\n",
               dtype_name(kt), dtype_name(vt), n_heads, n_kv_heads, hd, len, n, worst, same ? "same" : "DIFFERENT",
               worst_turned, moved, worst_rerope, rerope_ok ? "ok" : "BITS OR CONTROL WRONG",
               control ? "moved" : "DID NOT MOVE", ok ? "" : "  <-- FAIL");
    free(c.keys);
    free(c.values);
    free(k);
    free(v);
    free(q);
    free(fast);
    free(ref);
    free(scratch);
}

// softmax against double: inputs spread over 60 units, so terms below e^-40 of the largest are
// cut to 0 as documented; everything else within 1e-6 relative (the exp is ~1e-7) plus what the
// float subtraction x - max can lose (|x - max| * 2^-23 relative).
static void check_softmax(void) {
    double worst = 0;
    int cut_ok = 1;
    for (int n = 1; n <= 300; n += 37) {
        float x[300];
        double xd[300], max = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++)
            max = fmax(max, xd[i] = x[i] = 30 * uniform());
        for (int i = 0; i < n; i++)
            sum += exp(xd[i] - max);
        softmax(x, n);
        for (int i = 0; i < n; i++) {
            const double want = exp(xd[i] - max) / sum;
            if (xd[i] - max < -40)
                cut_ok &= x[i] == 0;
            else
                worst = fmax(worst, fabs(x[i] - want) / ((1e-6 + fabs(xd[i] - max) * 0x1p-23) * want + 1e-30));
        }
    }
    const int ok = worst <= 1 && cut_ok;
    failures += !ok;
    printf("softmax vs double: largest error / bound %.3f, terms below e^-40 are 0: %s%s\n", worst,
           cut_ok ? "yes" : "NO", ok ? "" : "  <-- FAIL");
}

// rmsnorm against double: x * w / sqrt(mean(x^2) + eps), within 1e-6 relative per element.
static void check_rmsnorm(void) {
    enum { N = 3, SIZE = 257 };
    float x[N * SIZE], w[SIZE], out[N * SIZE];
    for (int i = 0; i < N * SIZE; i++)
        x[i] = 5 * uniform();
    for (int i = 0; i < SIZE; i++)
        w[i] = 1 + uniform();
    rmsnorm(out, x, w, N, SIZE, 1e-5f);
    double worst = 0;
    for (int t = 0; t < N; t++) {
        double ss = 0;
        for (int i = 0; i < SIZE; i++)
            ss += (double)x[t * SIZE + i] * x[t * SIZE + i];
        const double inv = 1 / sqrt(ss / SIZE + 1e-5);
        for (int i = 0; i < SIZE; i++) {
            const double want = (double)x[t * SIZE + i] * inv * w[i];
            worst = fmax(worst, fabs(out[t * SIZE + i] - want) / (1e-6 * fabs(want) + 1e-30));
        }
    }
    failures += worst > 1;
    printf("rmsnorm vs double: largest error / bound (1e-6 relative) %.3f%s\n", worst, worst <= 1 ? "" : "  <-- FAIL");
}

// q8_0 activations bit for bit: with one-hot q8_0_r16 weights (row r is 1 at column r, scale 1; made
// in the first layout and moved by matrix_to_r16),
// out[t, r] = q * d exactly, the activation x[t, r] quantized and read back, in decode (1 token) and
// prefill (5 tokens). The expected q and d are computed here as kernels.c defines them: per block,
// d = max|x| / 127 (0 below the smallest normal float), q = x * (127 / max|x|) clamped to
// [-127, 127] and rounded half away from zero, NaN giving -127. Inputs: exact halves (the ties a
// round-half-to-even quantizer gets wrong; the count printed is the negative control: each of them
// would fail), zeros of both signs, a block below 2^-126, a NaN, and ordinary values.
static float expected_q8(const float *block, int len, int i) {
    float amax = 0;
    for (int k = 0; k < len; k++)
        amax = fabsf(block[k]) > amax ? fabsf(block[k]) : amax;
    const float d = amax / 127, inv = amax >= 0x1p-126f ? 127 / amax : 0, v = block[i] * inv;
    const float c = v > -127.0f ? (v < 127.0f ? v : 127.0f) : -127.0f;
    return (float)(int)(c < 0 ? c - 0.5f : c + 0.5f) * d;
}

static void check_quantize_q8(void) {
    static const int widths[] = {1, 31, 32, 33, 100, 257};
    int ok = 1, ties = 0, checked = 0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const int cols = widths[w], cp = matrix_cols_stored(DTYPE_Q8_0, cols);
        int8_t *q = calloc((size_t)cols * cp, 1);
        float *d = malloc(sizeof(float) * cols * cp / Q8_BLOCK), x[5 * 257], out[5 * 257];
        for (int r = 0; r < cols; r++)
            q[(size_t)r * cp + r] = 1;
        for (int i = 0; i < cols * cp / Q8_BLOCK; i++)
            d[i] = 1;
        const Matrix rows = {q, d, cols, cols, DTYPE_Q8_0};
        Matrix m;
        void *grouped = aligned_alloc(64, (matrix_data_bytes(DTYPE_Q8_0_R16, cols, cols) + 63) / 64 * 64);
        ok &= matrix_to_r16(&m, &rows, DTYPE_Q8_0_R16, grouped, 1) == 0;
        for (int n = 1; n <= 5; n += 4) {
            for (int t = 0; t < n; t++)
                for (int c = 0; c < cols; c++) {
                    const int b = c / Q8_BLOCK, kind = (t + b) % 5;
                    float v = 100 * uniform();
                    if (kind == 0) v = c % Q8_BLOCK == 0 ? 127 : (float)((int)v) + 0.5f; // max 127: ties
                    if (kind == 1) v = c % 3 == 0 ? -0.0f : c % 3 == 1 ? 0.0f : v;
                    if (kind == 2) v *= 1e-41f; // the block counts as zero
                    if (kind == 3 && c % Q8_BLOCK == 5) v = NAN;
                    x[t * cols + c] = v;
                }
            mm(out, x, &m, n, 2);
            for (int t = 0; t < n; t++)
                for (int c = 0; c < cols; c++) {
                    const int b0 = c / Q8_BLOCK * Q8_BLOCK, len = cols - b0 < Q8_BLOCK ? cols - b0 : Q8_BLOCK;
                    const float *block = x + t * cols + b0, want = expected_q8(block, len, c - b0);
                    const float even = rintf(block[c - b0]); // what half-to-even would give (inv = 1 there)
                    ties += fabsf(block[c - b0] - truncf(block[c - b0])) == 0.5f && even != want;
                    ok &= out[t * cols + c] == want;
                    checked++;
                }
        }
        free(q);
        free(d);
        free(grouped);
    }
    failures += !ok || ties == 0;
    printf("q8_0 activations vs their definition: %d values, bit for bit: %s (%d ties that half-to-even would "
           "round wrongly)%s\n",
           checked, ok ? "yes" : "NO", ties, ok && ties ? "" : "  <-- FAIL");
}

// The K-quants' x (QK_K values per scale, a sum per K_SUM) as this build quantizes it against the
// plain C (kernels.c, quantize_row_q8k_plain): the same bytes, scales and sums, on rows of the kinds
// check_quantize_q8 uses (exact halves, zeros of both signs, a block below 2^-126, NaNs), whole
// blocks and a last partial one. In the plain build the two are one function.
static void check_quantize_q8k(void) {
    static const int widths[] = {256, 512, 300};
    int ok = 1, checked = 0;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        const int cols = widths[w], cp = (cols + QK_K - 1) / QK_K * QK_K;
        float x[512];
        int8_t q[2][512];
        float d[2][2];
        int32_t sum[2][512 / K_SUM];
        for (int trial = 0; trial < 20; trial++) {
            for (int c = 0; c < cols; c++) {
                const int kind = (trial + c / QK_K) % 5;
                float v = 100 * uniform();
                if (kind == 0) v = c % QK_K == 0 ? 127 : (float)((int)v) + 0.5f;
                if (kind == 1) v = c % 3 == 0 ? -0.0f : c % 3 == 1 ? 0.0f : v;
                if (kind == 2) v *= 1e-41f;
                if (kind == 3 && c % 37 == 5) v = NAN;
                x[c] = v;
            }
            memset(q, 0x55, sizeof q);
            quantize_row_q8k_plain(q[0], d[0], sum[0], x, cols);
            quantize_row_q8k(q[1], d[1], sum[1], x, cols);
            ok &= !memcmp(q[0], q[1], (size_t)cp) && !memcmp(d[0], d[1], sizeof(float) * (size_t)(cp / QK_K)) &&
                  !memcmp(sum[0], sum[1], sizeof(int32_t) * (size_t)(cp / K_SUM));
            checked += cols;
        }
    }
    failures += !ok;
    printf("K-quants' x quantized (%s) vs the plain C: %d values, the same bytes, scales and sums: %s%s\n",
           kernels_isa(), checked, ok ? "yes" : "NO", ok ? "" : "  <-- FAIL");
}

// bf16's rounding of x (kernels.h) against its definition, computed here another way: a normal x
// to 8 significant bits by rint (ties to even) on x scaled by 2^(8 - its exponent), a value below
// 2^-126 to a zero of its sign, a NaN to a quiet NaN of its top bits; overflow to infinity. Then
// through matmul, with one-hot weights (out[t, r] = x[t, r] rounded), in decode (1 token) and
// prefill (5 tokens). The control: truncation (the top 16 bits as they are) differs from the
// definition on some of the inputs, which the check would catch.
static uint16_t expected_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    if (isinf(x) || fabsf(x) < 0x1p-126f) return (uint16_t)(isinf(x) ? u >> 16 : (u >> 16) & 0x8000);
    int e;
    frexp(x, &e);
    const float r = (float)ldexp(rint(ldexp(x, 8 - e)), e - 8); // may overflow to inf: so does bf16
    memcpy(&u, &r, sizeof u);
    return (uint16_t)(u >> 16);
}

static void check_bf16_round(void) {
    enum { N = 4000, COLS = 40 };
    static float x[N];
    for (int i = 0; i < N; i++) {
        const float base = (float)ldexp(1 + (i % 128) / 128.0, i % 40 - 20); // a bf16 number
        const int kind = i % 10;
        float v = uniform() * 1000;
        if (kind == 0) v = base * (1 + 0x1p-9f);                          // a tie (halfway): to even
        if (kind == 1) v = nextafterf(base * (1 + 0x1p-9f), INFINITY);   // just above halfway
        if (kind == 2) v = nextafterf(base * (1 + 0x1p-9f), 0);          // just below
        if (kind == 3) v = i % 3 == 0 ? 1e-40f : i % 3 == 1 ? -1e-39f : -0.0f; // subnormal, zero
        if (kind == 4) v = i % 4 == 0 ? NAN : i % 4 == 1 ? -INFINITY : i % 4 == 2 ? 3.4e38f : -3.39e38f;
        x[i] = v;
    }
    int ok = 1, truncation_wrong = 0;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        const uint16_t want = expected_bf16(x[i]);
        ok &= bf16_round(x[i]) == want;
        truncation_wrong += (uint16_t)(u >> 16) != want;
    }
    // Through matmul: identity weights (1.0 is 0x3f80), x finite as bf16 only (0 * NaN, 0 * inf would
    // spread).
    uint16_t *bits = calloc(COLS * COLS, sizeof(uint16_t)), *w = calloc(matrix_data_bytes(DTYPE_BF16_R16, COLS, COLS), 1);
    for (int r = 0; r < COLS; r++)
        bits[r * COLS + r] = 0x3f80;
    br16_layout(w, bits, COLS, COLS);
    free(bits);
    const Matrix m = {w, NULL, COLS, COLS, DTYPE_BF16_R16};
    int through = 1;
    for (int n = 1; n <= 5; n += 4)
        for (int i0 = 0; i0 + n * COLS <= N; i0 += n * COLS) {
            float xs[5 * COLS], out[5 * COLS];
            for (int i = 0; i < n * COLS; i++)
                xs[i] = isfinite(bf16_float(expected_bf16(x[i0 + i]))) ? x[i0 + i] : 1;
            mm(out, xs, &m, n, 2);
            for (int i = 0; i < n * COLS; i++)
                through &= out[i] == bf16_float(expected_bf16(xs[i]));
        }
    free(w);
    failures += !ok || !through || truncation_wrong == 0;
    printf("bf16 rounding vs its definition: %d values bit for bit %s, through matmul (decode, prefill) %s "
           "(%d that truncation gets wrong)%s\n",
           N, ok ? "yes" : "NO", through ? "yes" : "NO", truncation_wrong,
           ok && through && truncation_wrong ? "" : "  <-- FAIL");
}

// The first bf16 layout's order (its kernels are gone: the loader copies such files into bf16_r16),
// a control below: x rounded, each product exact; lane l of 16 adds columns 32s + 2l + 1, then
// 32s + 2l of every step s, then the lanes' tree l + 8, + 4, + 2, + 1.
static float tree_order(const float *w, const float *xr, int cols) {
    float lane[16] = {0};
    for (int s = 0; s < cols; s += 32)
        for (int l = 0; l < 16; l++)
            for (int h = 0; h < 2; h++) {
                const int k = s + 2 * l + 1 - h;
                if (k < cols) lane[l] = lane[l] + w[k] * xr[k];
            }
    for (int half = 8; half >= 1; half /= 2)
        for (int l = 0; l < half; l++)
            lane[l] = lane[l] + lane[l + half];
    return lane[0];
}

// bf16_r16's order (kernels_internal.h), written here again: x rounded, each product exact; one sum
// per row, to which columns 2p + 1, then 2p are added for p = 0, 1, .. over the columns padded with
// zeros to a multiple of 32. A control: the pairs' two columns the other way round (first_first).
static float br16_order(const float *w, const float *xr, int cols, int first_first) {
    float sum = 0;
    for (int k = 0; k < (cols + 31) / 32 * 32; k += 2)
        for (int h = 0; h < 2; h++) {
            const int c = k + (first_first ? h : 1 - h);
            sum = sum + (c < cols ? w[c] * xr[c] : 0.0f);
        }
    return sum;
}

// The shapes (rows, cols, tokens) of the two bf16-order checks below (the first says why these).
static const int BF16_CASES[][3] = {{33, 173, 5}, {70, 64, 12}, {45, 1001, 300}, {17, 5000, 37}, {13, 31, 4},
                                    {200, 33, 7}, {9, 1, 5},     {611, 72, 1},   {515, 40, 2},   {64, 2048, 3},
                                    {37, 770, 1}, {37, 770, 4}, {70, 4103, 6},   {130, 4128, 11}, {6, 2600, 7}};

// count activations x (every fifth four times larger) and xr, the same rounded to bf16 as matmul does.
static void bf16_inputs(float *x, float *xr, int count) {
    for (int i = 0; i < count; i++) {
        x[i] = uniform() * (i % 5 == 0 ? 4 : 1);
        xr[i] = bf16_float(bf16_round(x[i]));
    }
}

// bf16_r16 products bit for bit in its order, decode (1-3 tokens) and prefill alike, in every build
// (vdpbf16ps with AVX512-BF16, fused multiply-adds in 512- or 256-bit vectors, plain C): columns
// no multiple of 32 (a step padded with zeros) or of 2, rows no multiple of a group's 16 or a tile's
// 64, tokens no multiple of a tile's 6, several blocks of tokens (1001 columns at 300 tokens, 5000
// at 37) and of rows (70, 200, 130), long rows (2600 to 5000 columns), each at 1, 2 and 3 threads.
// The controls: the pairs' other order, and the first bf16 layout's order, each differ somewhere.
static void check_br16_order(void) {
    int same = 1, first_first_differs = 0, tree_differs = 0;
    for (size_t c = 0; c < sizeof BF16_CASES / sizeof BF16_CASES[0]; c++) {
        const int rows = BF16_CASES[c][0], cols = BF16_CASES[c][1], n = BF16_CASES[c][2];
        TestMatrix tm = make_matrix(DTYPE_BF16_R16, rows, cols);
        float *x = malloc(sizeof(float) * n * cols), *xr = malloc(sizeof(float) * n * cols);
        float *out = malloc(sizeof(float) * n * rows), *w = malloc(sizeof(float) * cols);
        bf16_inputs(x, xr, n * cols);
        for (int threads = 1; threads <= 3; threads++) {
            mm(out, x, &tm.m, n, threads);
            for (int r = 0; r < rows; r++) {
                matrix_row(w, &tm.m, r);
                for (int t = 0; t < n; t++) {
                    const float *xt = xr + (size_t)t * cols, got = out[(size_t)t * rows + r];
                    const float want = br16_order(w, xt, cols, 0);
                    if (memcmp(&got, &want, sizeof got) != 0) {
                        if (same || verbose)
                            printf("bf16_r16 %d x %d n %d threads %d: out[%d, %d] = %.9g, the order gives %.9g\n", rows,
                                   cols, n, threads, t, r, got, want);
                        same = 0;
                    }
                    first_first_differs |= br16_order(w, xt, cols, 1) != want;
                    tree_differs |= tree_order(w, xt, cols) != want;
                }
            }
        }
        free(x);
        free(xr);
        free(out);
        free(w);
        free(tm.data);
    }
    const int ok = same && first_first_differs && tree_differs;
    failures += !ok;
    printf("bf16_r16 decode and prefill vs its order (one sum per row, pair after pair), 1-3 threads: %s (the pairs' "
           "other order: %s, the first layout's lanes and tree: %s)%s\n",
           same ? "bit for bit" : "DIFFER", first_first_differs ? "differs" : "the same",
           tree_differs ? "differs" : "the same", ok ? "" : "  <-- FAIL");
}

// f32_r16's and f16_r16's order (kernels_internal.h), written here again: one sum from 0, the columns'
// products added in order, each rounded into it on its own: a fused multiply-add in the vector builds,
// a product then a sum in plain C (-std=c11 contracts nothing). The control: 16 lanes of every 16th
// column summed as a tree at the end, the order of a vector dot product over a row.
static float r16f_order(const float *w, const float *x, int cols) {
    float sum = 0;
    for (int k = 0; k < cols; k++)
#ifdef USE_AVX2
        sum = fmaf(w[k], x[k], sum);
#else
        sum = sum + w[k] * x[k];
#endif
    return sum;
}
static float lanes_order(const float *w, const float *x, int cols) {
    float lane[16] = {0};
    for (int k = 0; k < cols; k++)
        lane[k % 16] = fmaf(w[k], x[k], lane[k % 16]);
    for (int half = 8; half >= 1; half /= 2)
        for (int l = 0; l < half; l++)
            lane[l] = lane[l] + lane[l + half];
    return lane[0];
}

// f32_r16 and f16_r16 products bit for bit in their order, decode (1-3 tokens) and prefill alike, on
// bf16's shapes (columns across prefill's chunks, rows no multiple of a group's 16 or a panel's 32,
// tokens no multiple of a tile's 12), each at 1, 2 and 3 threads: a prompt's token gives the bits of
// the token alone. The control: the lanes-and-tree order differs somewhere.
static void check_r16f_order(void) {
    static const DType types[2] = {DTYPE_F32_R16, DTYPE_F16_R16};
    int same = 1, lanes_differ = 0;
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof BF16_CASES / sizeof BF16_CASES[0]; c++) {
            const int rows = BF16_CASES[c][0], cols = BF16_CASES[c][1], n = BF16_CASES[c][2];
            TestMatrix tm = make_matrix(types[k], rows, cols);
            float *x = malloc(sizeof(float) * n * cols), *out = malloc(sizeof(float) * n * rows);
            float *w = malloc(sizeof(float) * cols);
            for (int i = 0; i < n * cols; i++)
                x[i] = uniform() * (i % 5 == 0 ? 4 : 1);
            for (int threads = 1; threads <= 3; threads++) {
                mm(out, x, &tm.m, n, threads);
                for (int r = 0; r < rows; r++) {
                    matrix_row(w, &tm.m, r);
                    for (int t = 0; t < n; t++) {
                        const float got = out[(size_t)t * rows + r], want = r16f_order(w, x + (size_t)t * cols, cols);
                        if (memcmp(&got, &want, sizeof got) != 0) {
                            if (same || verbose)
                                printf("%s %d x %d n %d threads %d: out[%d, %d] = %.9g, the order gives %.9g\n",
                                       dtype_name(types[k]), rows, cols, n, threads, t, r, got, want);
                            same = 0;
                        }
                        lanes_differ |= lanes_order(w, x + (size_t)t * cols, cols) != want;
                    }
                }
            }
            free(x);
            free(out);
            free(w);
            free(tm.data);
        }
    const int ok = same && lanes_differ;
    failures += !ok;
    printf("f32_r16 and f16_r16 decode and prefill vs their order (one sum per row, column after column), 1-3 "
           "threads: %s (16 lanes and a tree: %s)%s\n",
           same ? "bit for bit" : "DIFFER", lanes_differ ? "differs" : "the same", ok ? "" : "  <-- FAIL");
}

// matrix_to_r16 on the same shapes as bf16's: the bytes it writes at 1, 2 and 3 threads are those
// of the weights laid out by make_matrix_br16's, make_matrix_r16's and r16f_layout's own code, padding
// included: f16 weights each rounded here (bf16_round of the f16 widened; ./run --f16-as-bf16), bf16
// ones in the first layout as they are, q8_0 ones in the first layout their q and scales as they are,
// f32 and f16 ones as they are (the loader's copies). The products are then bf16_r16's, q8_0_r16's,
// f32_r16's and f16_r16's, checked above. The controls:
// some f16 weight is not a bf16 number (the rounding is done, not skipped); every byte is written (the
// buffer is filled with 0xAB first); f32, and q8_0 to bf16_r16, are refused.
static void check_to_r16(void) {
    static const DType from[5] = {DTYPE_BF16, DTYPE_F16, DTYPE_Q8_0, DTYPE_F32, DTYPE_F16};
    static const DType into[5] = {DTYPE_BF16_R16, DTYPE_BF16_R16, DTYPE_Q8_0_R16, DTYPE_F32_R16, DTYPE_F16_R16};
    int same = 1, rounded_somewhere = 0;
    for (size_t c = 0; c < sizeof BF16_CASES / sizeof BF16_CASES[0]; c++)
        for (int k = 0; k < 5; k++) {
            const DType to = into[k];
            const int rows = BF16_CASES[c][0], cols = BF16_CASES[c][1], f16 = from[k] == DTYPE_F16;
            TestMatrix tm = make_matrix(from[k], rows, cols);
            const size_t bytes = matrix_data_bytes(to, rows, cols);
            uint8_t *want = calloc(bytes, 1), *got = aligned_alloc(64, (bytes + 63) / 64 * 64);
            if (to == DTYPE_Q8_0_R16) {
                r16_layout(want, &tm, rows, cols);
            } else if (to == DTYPE_F32_R16 || to == DTYPE_F16_R16) {
                r16f_layout(want, tm.data, rows, cols, to == DTYPE_F32_R16 ? 4 : 2);
            } else {
                uint16_t *bits = malloc(sizeof(uint16_t) * rows * cols);
                for (size_t i = 0; i < (size_t)rows * cols; i++) {
                    const uint16_t b = ((const uint16_t *)tm.data)[i];
                    const float f = (float)((const _Float16 *)tm.data)[i];
                    bits[i] = f16 ? bf16_round(f) : b;
                    rounded_somewhere |= f16 && bf16_float(bits[i]) != f;
                }
                br16_layout((uint16_t *)want, bits, rows, cols);
                free(bits);
            }
            for (int threads = 1; threads <= 3; threads++) {
                Matrix m;
                memset(got, 0xAB, bytes); // what it does not write shows
                const int status = matrix_to_r16(&m, &tm.m, to, got, threads);
                if (status || m.dtype != to || m.data != got || memcmp(got, want, bytes)) {
                    if (same || verbose)
                        printf("%s to %s %d x %d threads %d: %s\n", dtype_name(from[k]), dtype_name(to), rows, cols,
                               threads, status ? "refused" : "other bytes than laying out gives");
                    same = 0;
                }
            }
            free(want);
            free(got);
            free(tm.data);
            free(tm.scale);
        }
    Matrix m;
    const int refuses = matrix_to_r16(&m, &(Matrix){NULL, NULL, 1, 1, DTYPE_F32}, DTYPE_BF16_R16, NULL, 1) == -1 &&
                        matrix_to_r16(&m, &(Matrix){NULL, NULL, 1, 1, DTYPE_F32}, DTYPE_Q8_0_R16, NULL, 1) == -1 &&
                        matrix_to_r16(&m, &(Matrix){NULL, NULL, 1, 1, DTYPE_Q8_0}, DTYPE_BF16_R16, NULL, 1) == -1;
    const int ok = same && rounded_somewhere && refuses;
    failures += !ok;
    printf("f16 (rounded), bf16 and q8_0 (moved) to bf16_r16 and q8_0_r16, f32 and f16 (moved) to f32_r16 and f16_r16, "
           "1-3 threads: %s laid out (f16 weights "
           "that are no bf16 numbers: %s; f32 and q8_0 to bf16_r16 refused: %s)%s\n",
           same ? "bit for bit" : "NOT", rounded_somewhere ? "yes" : "no", refuses ? "yes" : "no",
           ok ? "" : "  <-- FAIL");
}

// The first layouts (q8_0, bf16) and f32 and f16 in rows are file types only: matmul refuses them
// rather than reading them as another type, in decode and prefill.
static void check_file_types_refused(void) {
    static const DType first[4] = {DTYPE_Q8_0, DTYPE_BF16, DTYPE_F32, DTYPE_F16};
    int refused = 1;
    for (int k = 0; k < 4; k++) {
        TestMatrix tm = make_matrix(first[k], 20, 64);
        float x[8 * 64] = {0}, out[8 * 20];
        for (int n = 1; n <= 8; n += 7) {
            Workspace ws = {NULL, workspace_bytes(n, 64, 2), n, 64, 2};
            ws.base = aligned_alloc(64, (ws.bytes + 63) / 64 * 64);
            refused &= matmul(&ws, out, x, &tm.m, n) == -1;
            free(ws.base);
        }
        free(tm.data);
        free(tm.scale);
    }
    failures += !refused;
    printf("matmul refuses the first q8_0 and bf16 layouts and f32 and f16 in rows (decode, prefill): %s\n",
           refused ? "yes" : "NO  <-- FAIL");
}

// matmul_many on three matrices of one input (as q, k, v) equals three calls of matmul, bit for bit.
static void check_many(DType t, int cols, int n) {
    static const int rows[3] = {37, 16, 70};
    TestMatrix tm[3];
    const Matrix *m[3];
    float *many[3], *one[3], *x = malloc(sizeof(float) * n * cols);
    for (int i = 0; i < n * cols; i++)
        x[i] = uniform();
    int same = 1;
    for (int i = 0; i < 3; i++) {
        tm[i] = make_matrix(t, rows[i], cols);
        m[i] = &tm[i].m;
        many[i] = malloc(sizeof(float) * n * rows[i]);
        one[i] = malloc(sizeof(float) * n * rows[i]);
        mm(one[i], x, m[i], n, 2);
    }
    Workspace ws = {NULL, workspace_bytes(n, cols, 2), n, cols, 2};
    ws.base = aligned_alloc(64, (ws.bytes + 63) / 64 * 64);
    same &= ws.base && matmul_many(&ws, many, x, m, 3, n) == 0;
    // A product wider or longer than the workspace was sized for is refused, not computed.
    same &= matmul(&ws, many[0], x, m[0], n + 1) == -1;
    free(ws.base);
    for (int i = 0; i < 3; i++) {
        same &= memcmp(many[i], one[i], sizeof(float) * n * rows[i]) == 0;
        free(many[i]);
        free(one[i]);
        free(tm[i].data);
        free(tm[i].scale);
    }
    free(x);
    failures += !same;
    if (verbose || !same)
        printf("matmul_many %-4s cols %d n %d: %s\n", dtype_name(t), cols, n, same ? "identical" : "DIFFERS  <-- FAIL");
}

static int cols_k(int cols) { return (cols + QK_K - 1) / QK_K * QK_K; }

int main(int argc, char **argv) {
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    // (rows, cols, n): odd sizes everywhere; the last ones cross the column chunks (KC) of prefill;
    // decode's groups (a row from each quarter of the matrix) with 4, 3 or fewer rows.
    static const int cases[][3] = {
        {1, 1, 1},     {3, 5, 1},     {5, 7, 4},     {33, 172, 1},  {33, 172, 5},    {67, 172, 13},   {100, 64, 12},
        {31, 300, 25}, {257, 96, 64}, {64, 2048, 1}, {64, 2048, 3}, {45, 1000, 300}, {40, 1000, 600}, {17, 5000, 37},
        {256, 40, 1},  {611, 72, 1},  {515, 33, 2},
    };
    // K-quants (rows of whole blocks of 256, as GGUF stores them): each case's columns rounded up.
    for (DType t = 0; t < DTYPE_COUNT; t++) // the first q8_0 and bf16 layouts are file types only (dtype.h)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && DTYPES[t].runs_as == t; i++)
            check_case(t, cases[i][0], DTYPES[t].block == QK_K ? cols_k(cases[i][1]) : cases[i][1], cases[i][2]);
    for (DType t = 0; t < DTYPE_COUNT; t++)
        for (int n = 1; n <= 5 && DTYPES[t].runs_as == t; n += 2)
            check_many(t, DTYPES[t].block == QK_K ? 512 : 100, n);
    check_file_types_refused();
    // Head shapes: one head, grouped (2, 8 and 24 query heads per kv head: below, at and above the
    // 16 rows of a task), head sizes that are and are not multiples of the 8- and 32-float tiles.
    static const int heads[][3] = {{1, 1, 1},    {2, 1, 5},    {8, 4, 8},   {4, 2, 64},
                                   {3, 3, 72},   {2, 1, 128},  {1, 1, 200}, {16, 2, 64},
                                   {24, 1, 16}};
    static const int lens[] = {1, 15, 16, 33, 64, 100, 1000};
    static const int blocks[] = {1, 5, 37}; // one query (decode), a block, several tasks' worth
    static const DType types[][2] = {{DTYPE_F32, DTYPE_F32}, {DTYPE_F16, DTYPE_F32},  {DTYPE_F32, DTYPE_F16},
                                     {DTYPE_F16, DTYPE_F16}, {DTYPE_Q8_0, DTYPE_F32}, {DTYPE_F32, DTYPE_Q8_0},
                                     {DTYPE_Q8_0, DTYPE_Q8_0}}; // q8_0: head_dim 64 and 128
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++)
        for (size_t j = 0; j < sizeof lens / sizeof lens[0]; j++)
            for (size_t b = 0; b < sizeof blocks / sizeof blocks[0] && blocks[b] <= lens[j]; b++)
                for (size_t kv = 0; kv < sizeof types / sizeof types[0]; kv++) // cached keys, values
                    if ((kv == 0 || blocks[b] <= 5) && kv_type_ok(types[kv][0], heads[i][2]) &&
                        kv_type_ok(types[kv][1], heads[i][2])) // the other types on the smaller blocks
                        check_attention(types[kv][0], types[kv][1], heads[i][0], heads[i][1], heads[i][2], lens[j],
                                        blocks[b], // ReRoPE etc.: float32 values; at 1000, one query of a float32 cache
                                        types[kv][1] == DTYPE_F32 && (lens[j] < 1000 || (blocks[b] == 1 && kv == 0)));
    check_softmax();
    check_rmsnorm();
    check_quantize_q8();
    check_quantize_q8k();
    check_bf16_round();
    check_br16_order();
    check_r16f_order();
    check_to_r16();
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (DType t = 0; t < DTYPE_COUNT; t++)
        if (DTYPES[t].runs_as == t)
            printf("%-4s %d shapes: largest error / bound: vs matmul_ref %.3f, n tokens vs 1 at a time %.3f\n",
               dtype_name(t), n_cases, worst_of[t][0], worst_of[t][1]);
    printf("attention %d head sizes x %d lengths: largest error / bound %.3f; ReRoPE's window off by one moves an "
           "output by up to %.2g\n",
           (int)(sizeof heads / sizeof heads[0]), (int)(sizeof lens / sizeof lens[0]), worst_attention,
           largest_off_by_one);
    if (!(largest_off_by_one > 1e-2)) printf("ReRoPE's window off by one never moved an output by 1e-2  <-- FAIL\n");
    failures += !(largest_off_by_one > 1e-2);
    printf("test_kernels (%s): %s (%d failure%s)\n", kernels_isa(), failures ? "FAIL" : "ok", failures,
           failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
