// kernels.h - weight matrices and the matrix products of the forward pass.
//
// Every product in a Llama layer is out = x @ W^T with W an nn.Linear weight (out, in). The
// weights may be stored as f32, f16 or q8_0 (see model.h for the bytes). Each product exists
// twice: a plain reference (matmul_ref), written to be obviously right, and the fast one
// (matmul) that the forward pass uses. tests/test_kernels.c checks one against the other.
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>

typedef enum { DTYPE_F32 = 0, DTYPE_F16 = 1, DTYPE_Q8_0 = 2, DTYPE_COUNT } DType;

#define Q8_BLOCK 32 // q8_0: values per scale

// A weight matrix (rows, cols) = (out, in), usually inside the mmapped model file.
typedef struct {
    const void *data;   // (rows, cols) f32 or f16; q8_0: (rows, cols_padded) int8
    const float *scale; // q8_0 only: (rows, cols_padded / Q8_BLOCK)
    int rows, cols;
    DType dtype;
} Matrix;

const char *dtype_name(DType t);
int dtype_from_name(const char *name, DType *t); // 0 ok, -1 unknown

// Columns of a row as stored: q8_0 pads each row to a multiple of Q8_BLOCK.
int matrix_cols_stored(DType t, int cols);
// Bytes of a matrix's values, and (q8_0) of its scales. 0 if the size overflows size_t.
size_t matrix_data_bytes(DType t, int rows, int cols);
size_t matrix_scale_bytes(DType t, int rows, int cols);

// out (cols) = row r of m as float (the token embedding lookup).
void matrix_row(float *out, const Matrix *m, int r);

// out (n, m->rows) = x (n, m->cols) @ m^T. matmul_ref: the plain definition, in double. matmul:
// the fast one, a matrix x vector product per token below a few tokens (decode), a blocked matrix
// x matrix product from there on (prefill); q8_0 quantizes x to 8 bits per block of 32 first.
// Each output is computed by one thread in a fixed order: results do not depend on the thread
// count. x and out must not overlap.
void matmul_ref(float *out, const float *x, const Matrix *m, int n);
void matmul(float *out, const float *x, const Matrix *m, int n);

// out[i] = x @ m[i]^T for i < count: products of one input (q, k, v; gate and up) in one parallel
// loop when decoding, so the threads meet once instead of once per product. Same results as count
// calls of matmul.
void matmul_many(float *const *out, const float *x, const Matrix *const *m, int count, int n);

// Attention of one query head over `len` cached positions (model.c calls these per query and head).
// Keys are transposed, kt (hd, stride): coordinate d of position j at kt[d * stride + j], so the
// scores come out a run of positions at a time; values are row-major, row j at v + j * stride.
//   attention_scores  att[j] = scale * sum_d q[d] kt[d, j]          for j < len
//   attention_mix     out[d] = sum_j att[j] v[j, d]                 for d < hd
void attention_scores(float *att, const float *q, const float *kt, int hd, size_t stride, int len, float scale);
void attention_mix(float *out, const float *att, const float *v, size_t stride, int len, int hd);

// OpenMP's thread count and this thread's number, or 1 and 0 in a build without OpenMP.
int max_threads(void);
int thread_num(void);

// Which vector instructions matmul was compiled for, e.g. "AVX-512 + VNNI", "AVX2", "plain C".
const char *matmul_isa(void);

#endif
