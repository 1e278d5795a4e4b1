// bwprobe.c - how fast this machine streams memory into the cores: the roof of decoding.
//
//   bench/bwprobe [MiB] [passes]       prints "threads T: X.X GB/s" for T = 1 and 2 (and all cores)
//
// Decoding one token reads every weight matrix once and does two flops per weight, far below what
// the cores could compute, so tokens/s can be at most  bandwidth / bytes read per token. For that
// bound to be a roof, the probe must read at least as fast as any decoder can: each thread reads
// its own share of a buffer far larger than the caches with the widest loads the machine has,
// folding the data with integer xor (no floating-point dependency chain to wait on), in huge
// pages where the kernel gives them, and tries 1, 2 and 4 streams per thread, 64 bytes of each in
// turn from places 256 KiB apart (several places at once keep more misses in flight, as decode's
// four weight rows at a time do; one sequential stream suits the prefetcher of other machines).
// On the AMD EPYC (Zen 3) four such streams read 1.2x-1.3x faster than one. It reports the best stream count's best pass, in GB/s = 1e9 bytes/s: a roof is the
// most the machine did, not its typical speed.
// Last, a compute line per thread count (compute_rate): the cores' speed, to tell a slow vCPU from
// slow memory. What it is not: a STREAM copy/triad benchmark (those also write), nor a latency probe.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "fold.h"

enum { GAP = 256 << 10 }; // bytes between the streams of one thread (decode: a quarter of a matrix)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One thread's share [lo, hi) (multiples of GAP) read in tiles of `streams` x GAP bytes, each
// tile as `streams` places read side by side; what is left over as one stream.
static uint64_t read_share(const unsigned char *buf, size_t lo, size_t hi, int streams) {
    const size_t tile = (size_t)streams * GAP;
    uint64_t x = 0;
    for (; lo + tile <= hi; lo += tile)
        x ^= streams == 4   ? fold(buf + lo, GAP, GAP, 4)
             : streams == 2 ? fold(buf + lo, GAP, GAP, 2)
                            : fold(buf + lo, GAP, GAP, 1);
    for (; lo < hi; lo += GAP)
        x ^= fold(buf + lo, GAP, GAP, 1);
    return x;
}

// Bytes/s reading the buffer once with `threads` threads, best of `passes`.
static double read_bandwidth(const unsigned char *buf, size_t bytes, int threads, int streams, int passes,
                             uint64_t *sink) {
    double best = 0;
    for (int p = 0; p < passes; p++) {
        uint64_t x = 0;
        size_t read = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(^ : x) reduction(+ : read)
        {
            int id = 0, nt = 1;
#ifdef _OPENMP
            id = omp_get_thread_num();
            nt = omp_get_num_threads();
#endif
            size_t lo = bytes / nt * id / GAP * GAP, hi = bytes / nt * (id + 1) / GAP * GAP;
            x ^= read_share(buf, lo, hi, streams);
            read += hi - lo;
        }
        double rate = read / (now() - t0);
        best = rate > best ? rate : best;
        *sink ^= x;
    }
    return best;
}

// The cores' own speed, beside the memory's: 64 independent multiply-adds per thread per step, all
// in registers, best of 3 tries, in GFLOP/s. On a virtual machine the share of the host a vCPU
// gets can drop for minutes; prefill (compute-bound) and decode then slow together while the
// bandwidth above stays high, and only this line shows it (docs/speed.md, "Noise").
static double compute_rate(int threads, float *sink) {
    enum { STEPS = 60000000, CHAINS = 64 };
    double best = 0;
    for (int t = 0; t < 3; t++) {
        float s = 0;
        double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : s)
        {
            float acc[CHAINS];
            for (int j = 0; j < CHAINS; j++)
                acc[j] = (float)j * 1e-3f;
            for (long i = 0; i < STEPS; i++)
                for (int j = 0; j < CHAINS; j++)
                    acc[j] = acc[j] * 0.99999f + 1e-5f;
            for (int j = 0; j < CHAINS; j++)
                s += acc[j];
        }
        double rate = 2.0 * CHAINS * STEPS * threads / (now() - t0);
        best = rate > best ? rate : best;
        *sink += s;
    }
    return best / 1e9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int passes = argc > 2 ? atoi(argv[2]) : 7;
    if (mib < 64 || mib > (1u << 20) || passes < 1) {
        fprintf(stderr, "usage: bwprobe [MiB, 64 .. 2^20] [passes >= 1]\n");
        return 2;
    }
    size_t bytes = mib * 1048576;
    unsigned char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        fprintf(stderr, "error: cannot allocate %zu MiB (hint: a smaller size)\n", mib);
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE); // fewer TLB misses; a hint the kernel may ignore
#endif
    // Touch every page (and make the values non-trivial) from all threads before timing.
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = i * 0x9E3779B97F4A7C15ull;
        memcpy(buf + i, &v, 8);
    }
    int max_threads = 1;
#ifdef _OPENMP
    max_threads = omp_get_max_threads();
#endif
    uint64_t sink = 0;
    printf("buffer %zu MiB, best of %d passes and of 1, 2, 4 streams per thread (%d KiB apart)\n", mib, passes, GAP >> 10);
    int counts[3] = {1, 2, max_threads}, n = max_threads > 2 ? 3 : max_threads; // 1, 2, every core if more
    for (int i = 0; i < n; i++) {
        double best = 0, by[3];
        for (int k = 0; k < 3; k++) {
            by[k] = read_bandwidth(buf, bytes, counts[i], 1 << k, passes, &sink) / 1e9;
            best = by[k] > best ? by[k] : best;
        }
        printf("threads %d: %.2f GB/s (1, 2, 4 streams: %.1f, %.1f, %.1f)\n", counts[i], best, by[0], by[1], by[2]);
    }
    float fsink = 0;
    for (int i = 0; i < n; i++)
        printf("compute, threads %d: %.1f GFLOP/s\n", counts[i], compute_rate(counts[i], &fsink));
    fprintf(stderr, "(checksums %llx, %g)\n", (unsigned long long)sink, fsink); // the folds are used: not optimized away
    munmap(buf, bytes);
    return 0;
}
