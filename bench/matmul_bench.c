// matmul_bench.c - time one matrix product (kernels.h matmul) in isolation.
//
//   bench/matmul_bench ROWS COLS N DTYPE [repeats]
//
// Prints the best and median time of `repeats` calls of out (N, ROWS) = x (N, COLS) @ W^T and
// what they mean: GFLOP/s (2 * ROWS * COLS * N flops) and, for the weights, GB/s read. The best
// time is the least disturbed by other processes on a shared machine; the matrix is larger than
// the caches when it is large enough to matter, as in the model. What this is not: the
// end-to-end benchmark (bench/bench.py runs ./run on whole models).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels.h"

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    DType t;
    if (argc < 5 || dtype_from_name(argv[4], &t)) {
        fprintf(stderr, "usage: matmul_bench ROWS COLS N f32|f16|bf16_r16|q8_0_r16|q4_0 [repeats]\n");
        return 2;
    }
    if (DTYPES[t].runs_as != t) { // a first layout (dtype.h): what it runs as is what to time
        fprintf(stderr, "error: %s is a file type only, copied into %s at load (hint: matmul_bench ... %s)\n",
                argv[4], dtype_name(DTYPES[t].runs_as), dtype_name(DTYPES[t].runs_as));
        return 2;
    }
    const int rows = atoi(argv[1]), cols = atoi(argv[2]), n = atoi(argv[3]);
    const int repeats = argc > 5 ? atoi(argv[5]) : 10;
    if (rows < 1 || cols < 1 || n < 1 || repeats < 1 || repeats > 1000) {
        fprintf(stderr, "error: sizes and repeats must be positive (repeats <= 1000)\n");
        return 2;
    }
    // 64-byte aligned, as the loader places every matrix and its scales (model.h, MODEL_ALIGN): from
    // malloc's 16-byte alignment every 64-byte load of a row would straddle two cache lines.
    const size_t data = matrix_data_bytes(t, rows, cols), scales = matrix_scale_bytes(t, rows, cols);
    const size_t data_padded = (data + 63) / 64 * 64;
    uint8_t *w = aligned_alloc(64, data_padded + (scales + 63) / 64 * 64);
    float *x = malloc(sizeof(float) * n * cols), *out = malloc(sizeof(float) * n * rows);
    if (!w || !x || !out) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    // Small values every type holds: f16 0x2e66 ~ 0.1, q4_0 bytes 1..100 with scale 1e-3.
    for (size_t i = 0; i < data; i++)
        w[i] = t == DTYPE_F16 ? (i % 2 ? 0x2e : 0x66) : (uint8_t)(1 + i % 100);
    if (t == DTYPE_F32)
        for (size_t i = 0; i < data / 4; i++)
            ((float *)w)[i] = 0.001f * (float)(i % 97);
    for (size_t i = 0; t == DTYPE_Q4_0 && i < scales / 2; i++)
        ((_Float16 *)(w + data_padded))[i] = (_Float16)1e-3f;
    for (size_t i = 0; i < (size_t)n * cols; i++)
        x[i] = (float)(i % 13) - 6;
    Matrix m = {w, scales ? w + data_padded : NULL, rows, cols, t};

    // Wall time, and CPU time of the whole process: on a busy machine the wall time includes the
    // time the threads waited for a core; CPU time / threads does not.
    double secs[1000], cpu[1000];
    Workspace ws = {NULL, workspace_bytes(n, cols, max_threads()), n, cols, max_threads()};
    ws.base = aligned_alloc(64, (ws.bytes + 63) / 64 * 64);
    if (!ws.base) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    matmul(&ws, out, x, &m, n); // warm up: page in, start the threads
    for (int r = 0; r < repeats; r++) {
        // The CPU-time clock is a system call (~1 us in a VM), the monotonic one is not: read it
        // outside the wall-clock interval, which a product of a few microseconds would notice.
        const double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = clock_s(CLOCK_MONOTONIC);
        matmul(&ws, out, x, &m, n);
        secs[r] = clock_s(CLOCK_MONOTONIC) - t0;
        cpu[r] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(secs, repeats, sizeof secs[0], by_value);
    qsort(cpu, repeats, sizeof cpu[0], by_value);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const double flops = 2.0 * rows * cols * n, bytes = (double)(data + scales);
    printf("%s %d x %d, n %d, threads %d: best %.3f ms (%.1f GFLOP/s, %.2f GB/s of weights), median %.3f ms; "
           "CPU time / threads: best %.3f ms (%.1f GFLOP/s)\n",
           dtype_name(t), rows, cols, n, threads, secs[0] * 1e3, flops / secs[0] / 1e9,
           bytes / secs[0] / 1e9, secs[repeats / 2] * 1e3, cpu[0] / threads * 1e3, flops / (cpu[0] / threads) / 1e9);
    free(ws.base);
    free(w);
    free(x);
    free(out);
    return 0;
}
