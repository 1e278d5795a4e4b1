// fuzz_prompt_cache.c - libFuzzer target: arbitrary bytes as a --prompt-cache file (promptcache.h).
//
// Byte 0 and byte 1 choose the cached keys' and values' types (f32, f16, q8_0) of a KV cache of 2
// layers of 2 kv heads of 32, context 64; the rest is the file, in an in-memory file (memfd) that
// pcache_read reads for a prompt of the 48 ids 0 .. 47 under the settings text "fuzz". Whatever the
// bytes, it must refuse them with a message, or call them another run's, or copy at most 47
// positions (a prompt's last token always runs) and say how many. When it used them, the cache they
// filled is written (pcache_write, a real file) and read back, which must give the same positions
// and the same bytes. Any crash, out-of-bounds access, leak or undefined behaviour is a finding.
//
//   make fuzz                                                     (all targets, FUZZ_SECONDS each)
//   build/fuzz/fuzz_prompt_cache fuzz/corpus/prompt_cache         (this one until stopped)
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../promptcache.h"

enum { LAYERS = 2, HEADS = 2, HD = 32, CTX = 64, N = 48 };

static int fd = -1;
static char out_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fd = memfd_create("prompt.cache", 0);
    if (fd < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(out_path, sizeof out_path, "/tmp/fuzz_prompt_cache.%ld", (long)getpid());
    return 0;
}

static KVCache make_cache(DType kt, DType vt) {
    KVCache c = {.key_type = kt,
                 .value_type = vt,
                 .n_layers = LAYERS,
                 .ctx = CTX,
                 .n_heads = HEADS,
                 .n_kv_heads = HEADS,
                 .head_dim = HD};
    c.keys = calloc(1, kv_cache_bytes(kt, LAYERS, CTX, HEADS, HD));
    c.values = calloc(1, kv_cache_bytes(vt, LAYERS, CTX, HEADS, HD));
    if (!c.keys || !c.values) abort();
    return c;
}

static PcacheStatus read_from(FILE *f, KVCache *c, const int *ids, int *reused) {
    char err[600];
    int cached;
    const PcacheStatus s = pcache_read(f, "fuzz.cache", "fuzz", c, ids, N, reused, &cached, err, sizeof err);
    if (s != PCACHE_USED && (*reused || !err[0])) abort(); // nothing used without a message
    if (s == PCACHE_USED && (*reused < 0 || *reused > N - 1 || *reused > cached)) abort();
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const DType types[3] = {DTYPE_F32, DTYPE_F16, DTYPE_Q8_0};
    KVCache c = make_cache(types[data[0] % 3], types[data[1] % 3]);
    int ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = i;
    if (ftruncate(fd, 0) || pwrite(fd, data + 2, size - 2, 0) != (ssize_t)(size - 2)) abort();
    // dup shares the file offset, which the last input's read left at its end: back to the start.
    if (lseek(fd, 0, SEEK_SET)) abort();
    FILE *f = fdopen(dup(fd), "rb");
    if (!f) abort();
    int reused = 0;
    const PcacheStatus s = read_from(f, &c, ids, &reused);
    fclose(f);
    if (s == PCACHE_USED && reused > 0) { // round trip: what it filled, written and read back
        char err[600];
        if (pcache_write(out_path, "fuzz", &c, ids, reused, err, sizeof err)) abort();
        KVCache back = make_cache(c.key_type, c.value_type);
        FILE *g = fopen(out_path, "rb");
        int again = 0;
        if (!g || read_from(g, &back, ids, &again) != PCACHE_USED || again != (reused < N - 1 ? reused : N - 1))
            abort();
        fclose(g);
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < HEADS; h++)
                for (int which = 0; which < 2; which++) {
                    size_t a, b;
                    const void *x = kv_span(&c, l, h, which, again, &a), *y = kv_span(&back, l, h, which, again, &b);
                    if (a != b || memcmp(x, y, a)) abort();
                }
        unlink(out_path);
        free(back.keys), free(back.values);
    }
    free(c.keys), free(c.values);
    return 0;
}
