// fold.h - the read loop of bench/bwprobe and bench/stepread: the xor of `len` bytes (whole 64-byte
// pieces) at each of `streams` (1 to 4) places `gap` bytes apart from p, 64 bytes of each place in
// turn, as the decoder reads four weight rows at once; 64 bytes per load (two 32-byte loads where
// the machine has AVX2 but not AVX-512), an independent fold per load, no floating-point work.
// Unaligned loads: llama2.c's legacy files place matrices at any 4-byte offset (on aligned data they
// run as fast as aligned ones). Inlined into each caller, so that a constant `streams` unrolls.
#ifndef BENCH_FOLD_H
#define BENCH_FOLD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

static inline __attribute__((always_inline)) uint64_t fold(const unsigned char *p, size_t len, size_t gap,
                                                           int streams) {
#if defined(__AVX512F__)
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t i = 0; i + 64 <= len; i += 64)
        for (int s = 0; s < streams; s++)
            a[s] = _mm512_xor_si512(a[s], _mm512_loadu_si512(p + (size_t)s * gap + i));
    for (int s = 1; s < streams; s++)
        a[0] = _mm512_xor_si512(a[0], a[s]);
    uint64_t lanes[8], x = 0;
    _mm512_storeu_si512(lanes, a[0]);
    for (int j = 0; j < 8; j++)
        x ^= lanes[j];
    return x;
#elif defined(__AVX2__)
    __m256i a[8];
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_si256();
    for (size_t i = 0; i + 64 <= len; i += 64)
        for (int s = 0; s < streams; s++) {
            const unsigned char *q = p + (size_t)s * gap + i;
            a[2 * s] = _mm256_xor_si256(a[2 * s], _mm256_loadu_si256((const __m256i *)q));
            a[2 * s + 1] = _mm256_xor_si256(a[2 * s + 1], _mm256_loadu_si256((const __m256i *)(q + 32)));
        }
    for (int j = 1; j < 2 * streams; j++)
        a[0] = _mm256_xor_si256(a[0], a[j]);
    uint64_t lanes[4], x = 0;
    _mm256_storeu_si256((__m256i *)lanes, a[0]);
    for (int j = 0; j < 4; j++)
        x ^= lanes[j];
    return x;
#else
    uint64_t acc[8] = {0}, x = 0;
    for (size_t i = 0; i + 64 <= len; i += 64)
        for (int s = 0; s < streams; s++)
            for (int j = 0; j < 8; j++) {
                uint64_t v;
                memcpy(&v, p + (size_t)s * gap + i + 8 * j, 8);
                acc[j] ^= v;
            }
    for (int j = 0; j < 8; j++)
        x ^= acc[j];
    return x;
#endif
}

#endif
