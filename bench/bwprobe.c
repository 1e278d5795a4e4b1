// bwprobe.c - how fast this machine streams memory into the cores: the roofline of decoding.
//
//   bench/bwprobe [MiB] [passes]       prints "threads T: X.X GB/s" for T = 1 and 2 (and all cores)
//
// Decoding one token reads every weight matrix once and does two flops per weight, far below what
// the cores could compute, so tokens/s can be at most  bandwidth / weight bytes per token. This
// program measures that bandwidth the way the decode kernels consume memory: each thread reads its
// own contiguous half of a buffer much larger than the caches, start to end, summing it (so the
// loads cannot be optimized away). It reports the median over the passes, in GB/s = 1e9 bytes/s.
// What it is not: a STREAM copy/triad benchmark (those also write), nor a latency probe.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Sum n floats with 8 independent 16-wide accumulators: enough loads in flight to saturate the
// memory system, written so that -O3 vectorizes it on any target.
static float sum_floats(const float *p, size_t n) {
    float acc[128] = {0};
    size_t i = 0;
    for (; i + 128 <= n; i += 128)
#pragma omp simd
        for (int j = 0; j < 128; j++) acc[j] += p[i + j];
    float s = 0;
    for (int j = 0; j < 128; j++) s += acc[j];
    for (; i < n; i++) s += p[i];
    return s;
}

// Bytes/s reading the buffer once with `threads` threads (median of `passes`).
static double read_bandwidth(const float *buf, size_t n, int threads, int passes, float *sink) {
    double rate[64];
    if (passes > 64) passes = 64;
    for (int p = 0; p < passes; p++) {
        float total = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
        {
            int id = 0, nt = 1;
#ifdef _OPENMP
            id = omp_get_thread_num();
            nt = omp_get_num_threads();
#endif
            size_t lo = n * id / nt, hi = n * (id + 1) / nt;
            total += sum_floats(buf + lo, hi - lo);
        }
        rate[p] = n * sizeof(float) / (now() - t0);
        *sink += total;
    }
    qsort(rate, passes, sizeof rate[0], by_value);
    return rate[passes / 2];
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 2048;
    int passes = argc > 2 ? atoi(argv[2]) : 7;
    if (mib < 64 || passes < 1) {
        fprintf(stderr, "usage: bwprobe [MiB >= 64] [passes >= 1]\n");
        return 2;
    }
    size_t n = mib * 1048576 / sizeof(float);
    float *buf = malloc(n * sizeof(float));
    if (!buf) {
        fprintf(stderr, "error: cannot allocate %zu MiB (hint: a smaller size)\n", mib);
        return 1;
    }
    // Touch every page (and make the values non-trivial) from all threads before timing.
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023);
    int max_threads = 1;
#ifdef _OPENMP
    max_threads = omp_get_max_threads();
#endif
    float sink = 0;
    printf("buffer %zu MiB, median of %d passes\n", mib, passes);
    int counts[3] = {1, 2, max_threads}; // 1 thread, 2 threads, and every core if more
    for (int i = 0; i < 3; i++) {
        if (counts[i] > max_threads || (i == 2 && max_threads <= 2)) continue;
        printf("threads %d: %.2f GB/s\n", counts[i], read_bandwidth(buf, n, counts[i], passes, &sink) / 1e9);
    }
    fprintf(stderr, "(checksum %g)\n", sink);
    free(buf);
    return 0;
}
