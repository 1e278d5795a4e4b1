// dtype.c - the weight types' names and the sizes of a matrix of each, from the table in dtype.h
// (kernels_internal.h has the per-row sizes the kernels use; these are the same, checked for
// overflow, for the loader and the tests).
#include "kernels_internal.h"

#include <string.h>

const char *dtype_name(DType t) { return t >= 0 && t < DTYPE_COUNT ? DTYPES[t].name : "unknown"; }

int dtype_from_name(const char *name, DType *t) {
    for (int i = 0; i < DTYPE_COUNT; i++) {
        if (strcmp(name, DTYPES[i].name) == 0) {
            *t = (DType)i;
            return 0;
        }
    }
    return -1;
}

int matrix_cols_stored(DType t, int cols) { return cols_stored(t, cols); }

size_t matrix_data_bytes(DType t, int rows, int cols) {
    if (rows <= 0 || cols <= 0 || t < 0 || t >= DTYPE_COUNT) return 0;
    const size_t groups = ((size_t)rows + DTYPES[t].group - 1) / DTYPES[t].group; // whole groups
    return mul_or_zero(mul_or_zero(groups, (size_t)DTYPES[t].group), row_bytes(t, cols));
}

size_t matrix_scale_bytes(DType t, int rows, int cols) {
    if (rows <= 0 || cols <= 0 || t < 0 || t >= DTYPE_COUNT) return 0;
    return mul_or_zero((size_t)rows, row_scale_bytes(t, cols));
}
