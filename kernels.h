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

// out (n, m->rows) = x (n, m->cols) @ m^T.
void matmul_ref(float *out, const float *x, const Matrix *m, int n);
void matmul(float *out, const float *x, const Matrix *m, int n);

#endif
