// kernels.c - matrix x vector and matrix x matrix products over f32, f16 and q8_0 weights.
//
// Layout: W is (rows, cols) row-major; a block of n activations x is (n, cols); the product
// out = x @ W^T is (n, rows). Every output element is one dot product of a weight row with an
// activation row, computed start to end by one thread, so the result does not depend on the
// number of threads.
#include "kernels.h"

#include <stdint.h>
#include <string.h>

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
// Fast kernels. OpenMP splits the output rows; each weight row is read once per block of
// tokens and dotted with every activation row while it is in cache.

static float dot_f32(const float *w, const float *x, int n) {
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += w[i] * x[i];
    return sum;
}

static float dot_f16(const _Float16 *w, const float *x, int n) {
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) sum += (float)w[i] * x[i];
    return sum;
}

static float dot_q8(const int8_t *w, const float *scale, const float *x, int n) {
    float sum = 0;
    for (int b = 0; b < n; b += Q8_BLOCK) {
        int end = b + Q8_BLOCK < n ? b + Q8_BLOCK : n;
        float block = 0;
#pragma omp simd reduction(+ : block)
        for (int i = b; i < end; i++) block += w[i] * x[i];
        sum += block * scale[b / Q8_BLOCK];
    }
    return sum;
}

void matmul(float *out, const float *x, const Matrix *m, int n) {
    const int rows = m->rows, cols = m->cols;
    const size_t cp = (size_t)matrix_cols_stored(m->dtype, cols);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int t = 0; t < n; t++) {
            const float *xt = x + (size_t)t * cols;
            float v;
            switch (m->dtype) {
            case DTYPE_F32: v = dot_f32((const float *)m->data + r * cp, xt, cols); break;
            case DTYPE_F16: v = dot_f16((const _Float16 *)m->data + r * cp, xt, cols); break;
            default: v = dot_q8((const int8_t *)m->data + r * cp, m->scale + r * cp / Q8_BLOCK, xt, cols); break;
            }
            out[(size_t)t * rows + r] = v;
        }
    }
}
