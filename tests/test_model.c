// test_model.c - unit test of model.c's own bookkeeping: dynamic NTK's rotation of cached keys.
//
// With --rope-scaling dynamic the forward caches every key un-rotated and, when the sequence grows
// past L and the base changes, hands attention the cos and sin of the new base, with which it turns
// every cached key as it reads it (KVCache.rotation). This checks the cache after a 600-token
// prompt and one decoded token of the real stories260K (L = 512): every key of every layer as
// attention sees it (kv_key_seen) must be the cached raw key rotated, in double, with the
// frequencies of the current length (601), within 2e-6 of the key's size; and (negative control)
// it must not match the frequencies of the length before (600).
// Run: ./tests/test_model data/stories260K/stories260K.bin   (part of `make test`)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

// x rotated to position pos with the inverse frequencies inv (interleaved pairs), in double.
static void rotate(double *out, const float *x, const double *inv, int hd, int pos) {
    for (int i = 0; i < hd / 2; i++) {
        const double a = pos * inv[i], c = cos(a), s = sin(a);
        out[2 * i] = x[2 * i] * c - x[2 * i + 1] * s;
        out[2 * i + 1] = x[2 * i] * s + x[2 * i + 1] * c;
    }
}

// Largest |cached - rotate(raw)| / |raw| over every layer, position < len and kv head, with the
// frequencies of sequence length `at`.
static double worst_against(const Transformer *t, int len, int at) {
    const Config *c = &t->config;
    const int hd = c->head_dim;
    double inv[512], mscale, base, worst = 0, want[1024];
    float raw[1024];
    rope_inv_freq(&t->rope.p, at, inv, &mscale, &base);
    for (int l = 0; l < c->n_layers; l++)
        for (int j = 0; j < len; j++)
            for (int h = 0; h < c->n_kv_heads; h++) {
                double norm = 1e-30;
                for (int d = 0; d < hd; d++) {
                    raw[d] = kv_key(&t->state.kv, l, j, h * hd + d); // as cached: un-rotated
                    norm += (double)raw[d] * raw[d];
                }
                rotate(want, raw, inv, hd, j);
                for (int d = 0; d < hd; d++)
                    worst = fmax(worst, fabs(kv_key_seen(&t->state.kv, l, j, h * hd + d) - want[d]) / sqrt(norm));
            }
    return worst;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_model stories260K.bin\n");
        return 2;
    }
    char err[600];
    Transformer t;
    if (transformer_load(&t, argv[1], err, sizeof err)) {
        fprintf(stderr, "test_model: %s\n", err);
        return 1;
    }
    RunConfig run = {.ctx = 1024, .max_batch = 256};
    RopeOverrides dynamic = {.mode = ROPE_SCALING_DYNAMIC};
    if (rope_params_resolve(&run.rope, &t.config.rope, run.ctx, &dynamic, err, sizeof err) ||
        transformer_prepare(&t, &run, err, sizeof err) != PREPARE_OK) {
        fprintf(stderr, "test_model: %s\n", err);
        return 1;
    }
    int ids[601];
    for (int i = 0; i < 601; i++)
        ids[i] = (i * 37 + 11) % t.config.vocab_size;
    float *logits;
    int bad = 0;
    for (int b = 0; b < 600 && !bad; b += 256) // the prompt: one sequence of 600 tokens
        bad = transformer_forward(&t, ids + b, 600 - b < 256 ? 600 - b : 256, b, 600, 0, &logits, err, sizeof err);
    bad = bad || transformer_forward(&t, ids + 600, 1, 600, 601, 0, &logits, err, sizeof err); // one decode step
    if (bad) {
        fprintf(stderr, "test_model: %s\n", err);
        return 1;
    }
    const double now = worst_against(&t, 601, 601), before = worst_against(&t, 601, 600);
    const int ok = now <= 2e-6 && before > 1e-4;
    printf("%-4s dynamic, 600-token prompt + 1 step: cached keys vs raw keys rotated in double at length 601: "
           "max diff %.3e (tol 2e-6); at length 600 (must differ): %.3e (> 1e-4)\n",
           ok ? "ok" : "FAIL", now, before);
    printf("test_model: %s\n", ok ? "ok" : "FAIL");
    transformer_free(&t);
    return ok ? 0 : 1;
}
