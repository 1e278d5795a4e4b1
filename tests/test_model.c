// test_model.c - unit test of model.c's own bookkeeping: dynamic NTK's rotation of cached keys.
//
// With --rope-scaling dynamic the forward caches every key un-rotated and, when the sequence grows
// past L and the base changes, hands attention the cos and sin of the new base, with which it turns
// every cached key as it reads it (KVCache.rotation). This checks the cache after a 600-token
// prompt and one decoded token of the real stories260K (L = 512): every key of every layer as
// attention sees it (kv_key_seen) must be the cached raw key rotated, in double, with the
// frequencies of the current length (601), within 2e-6 of the key's size; and (negative control)
// it must not match the frequencies of the length before (600).
//
// Context shift (transformer_shift): after a 64-token prompt in a 64-token cache, keep 4 and drop
// 30; every moved key of layer 0 (whose keys depend on the token alone, not on the context) must
// equal the key of a fresh run of the 34 remaining tokens at their new positions, within 2e-6 of the
// key's size with f32 keys (2e-3 with f16 keys, rounded again when turned) in every RoPE mode; under
// dynamic NTK and ReRoPE (keys cached un-rotated) exactly. Negative control: moving the keys without turning
// them must be off by more than 1e-2.
// Run: ./tests/test_model data/stories260K/stories260K.bin   (part of `make test`); with --layers MODEL.bin,
// the shift of a model with a RoPE per layer (shift_layers, below).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                    worst = fmax(worst, fabs(kv_key_seen(&t->state.kv, l, j, h * hd + d, 0) - want[d]) / sqrt(norm));
            }
    return worst;
}

// Layer 0's cached keys at positions 0 .. len-1 (kv_key: as stored), (len, kv_dim) into out.
static void layer0_keys(const Transformer *t, int len, float *out) {
    const int kvd = t->config.n_kv_heads * t->config.head_dim;
    for (int j = 0; j < len; j++)
        for (int i = 0; i < kvd; i++)
            out[(size_t)j * kvd + i] = kv_key(&t->state.kv, 0, j, i);
}

// Load the model and prepare a cache of ctx tokens with `mode` (factor 2 where it takes one) and key
// type kt, then run `ids` (n tokens) as one sequence. 0 on success.
static int start(Transformer *t, const char *path, int mode, DType kt, const int *ids, int n, int ctx) {
    char err[600];
    float *logits;
    RunConfig run = {.n_ctx = ctx, .max_batch = 64, .cache_k = kt, .cache_v = DTYPE_F32};
    const int no_factor = mode == ROPE_SCALING_DYNAMIC || mode == ROPE_SCALING_NONE || mode == ROPE_SCALING_REROPE ||
                          mode == ROPE_SCALING_SELFEXTEND || mode == ROPE_SCALING_DYNAMIC_YARN || mode == ROPE_SCALING_DCA;
    RopeOverrides o = {.mode = mode, .factor = no_factor || mode < 0 ? 0 : 2}; // mode -1: the checkpoint's
    if (transformer_load(t, path, 0, err, sizeof err) ||
        rope_params_resolve(&run.rope, &t->config.rope, run.n_ctx, &o, err, sizeof err) ||
        transformer_prepare(t, &run, err, sizeof err) != PREPARE_OK ||
        transformer_forward(t, ids, n, 0, n, 0, &logits, err, sizeof err)) {
        fprintf(stderr, "test_model: %s\n", err);
        return -1;
    }
    return 0;
}

// Context shift in one mode: the worst |shifted - fresh| / |key| over layer 0's moved keys, with the
// keys turned (transformer_shift) or, for the negative control, only moved (kv_shift without angles).
static double shift_error(const char *path, int mode, DType kt, int turn) {
    enum { CTX = 64, KEEP = 4, DROP = 30, LEFT = CTX - DROP };
    int ids[CTX], rest[LEFT];
    for (int i = 0; i < CTX; i++)
        ids[i] = (i * 37 + 11) % 512;
    for (int i = 0; i < LEFT; i++)
        rest[i] = ids[i < KEEP ? i : i + DROP];
    Transformer a, b;
    char err[300];
    const float *unturned[64] = {NULL}; // no layer's keys turned (the control); fewer layers than this
    if (start(&a, path, mode, kt, ids, CTX, CTX) || start(&b, path, mode, kt, rest, LEFT, CTX)) return INFINITY;
    if (turn ? transformer_shift(&a, CTX, KEEP, DROP, err, sizeof err)
             : (kv_shift(&a.state.kv, KEEP + DROP, KEEP, LEFT - KEEP, unturned, unturned), 0)) {
        fprintf(stderr, "test_model: %s\n", err);
        return INFINITY;
    }
    const int kvd = a.config.n_kv_heads * a.config.head_dim, hd = a.config.head_dim;
    float *x = malloc(sizeof(float) * LEFT * kvd), *y = malloc(sizeof(float) * LEFT * kvd);
    layer0_keys(&a, LEFT, x);
    layer0_keys(&b, LEFT, y);
    double worst = 0;
    for (int j = 0; j < LEFT; j++)
        for (int h = 0; h < a.config.n_kv_heads; h++) {
            const float *xs = x + (size_t)j * kvd + h * hd, *ys = y + (size_t)j * kvd + h * hd;
            double norm = 1e-30, diff = 0;
            for (int d = 0; d < hd; d++) {
                norm += (double)ys[d] * ys[d];
                diff = fmax(diff, fabs((double)xs[d] - ys[d]));
            }
            worst = fmax(worst, diff / sqrt(norm));
        }
    free(x);
    free(y);
    transformer_free(&a);
    transformer_free(&b);
    return worst;
}

// Context shift with a RoPE per layer (`test_model --layers MODEL.bin`, tests/test_families2.py): a
// 64-token prompt in a 64-token cache, then 20 times: keep 4, drop 3, and 3 new tokens to fill the
// cache again, so that a key is turned up to 20 times. At every shift, every moved key of every layer
// must be the key cached before the shift turned back by 3 positions, in double, with the frequencies of its own layer's RoPE (the local one
// of LAYER_ROPE_SWA layers, the model's, or none for NoPE layers), within 2e-6 of the key's size;
// negative control: with the other RoPE (for a NoPE layer, the model's) some layer is off by more than
// 1e-2. After the 20 shifts, layer 0's keys (which depend on the token alone) must equal those of a
// fresh run of the 64 tokens the cache then holds, within 2e-5 of the key's size: the turns have not
// drifted (each a rounding in float32, up to 20 of them on a key).
enum { SHIFT_CTX = 64, SHIFT_KEEP = 4, SHIFT_DROP = 3, SHIFTS = 20 };

static int shift_layers(const char *path) {
    int ids[SHIFT_CTX + SHIFTS * SHIFT_DROP], held[SHIFT_CTX];
    for (int i = 0; i < SHIFT_CTX + SHIFTS * SHIFT_DROP; i++)
        ids[i] = (i * 37 + 11) % 512;
    Transformer t, fresh;
    char err[300];
    if (start(&t, path, -1, DTYPE_F32, ids, SHIFT_CTX, SHIFT_CTX)) return 1; // the checkpoint's own RoPE
    const Config *c = &t.config;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    float *before = malloc(sizeof(float) * c->n_layers * SHIFT_CTX * kvd);
    double inv[2][512], zero[512] = {0}, mscale, base, worst = 0, control = 1e300;
    rope_inv_freq(&t.rope.p, SHIFT_CTX, inv[0], &mscale, &base);
    rope_inv_freq(t.rope_swa.cos ? &t.rope_swa.p : &t.rope.p, SHIFT_CTX, inv[1], &mscale, &base);
    for (int i = 0; i < SHIFT_CTX; i++)
        held[i] = ids[i];
    for (int shift = 0, next = SHIFT_CTX; shift < SHIFTS; shift++) {
        for (int l = 0; l < c->n_layers; l++)
            for (int j = 0; j < SHIFT_CTX; j++)
                for (int i = 0; i < kvd; i++)
                    before[((size_t)l * SHIFT_CTX + j) * kvd + i] = kv_key(&t.state.kv, l, j, i);
        float *logits;
        if (transformer_shift(&t, SHIFT_CTX, SHIFT_KEEP, SHIFT_DROP, err, sizeof err) ||
            transformer_forward(&t, ids + next, SHIFT_DROP, SHIFT_CTX - SHIFT_DROP, SHIFT_CTX, 0, &logits, err,
                                sizeof err)) {
            fprintf(stderr, "test_model: %s\n", err);
            return 1;
        }
        double shift_control = 0;
        for (int l = 0; l < c->n_layers; l++) {
            const int kind = c->layer_kind ? c->layer_kind[l] : 0;
            const double *own = kind & LAYER_NO_ROPE ? zero : kind & LAYER_ROPE_SWA ? inv[1] : inv[0];
            const double *other = kind & LAYER_ROPE_SWA || kind & LAYER_NO_ROPE ? inv[0] : inv[1];
            for (int j = SHIFT_KEEP; j < SHIFT_CTX - SHIFT_DROP; j++)
                for (int h = 0; h < c->n_kv_heads; h++) {
                    const float *x = before + ((size_t)l * SHIFT_CTX + j + SHIFT_DROP) * kvd + h * hd;
                    double want[1024], wrong[1024], norm = 1e-30;
                    rotate(want, x, own, hd, -SHIFT_DROP);
                    rotate(wrong, x, other, hd, -SHIFT_DROP);
                    for (int d = 0; d < hd; d++)
                        norm += (double)x[d] * x[d];
                    for (int d = 0; d < hd; d++) {
                        const double got = kv_key(&t.state.kv, l, j, h * hd + d);
                        worst = fmax(worst, fabs(got - want[d]) / sqrt(norm));
                        shift_control = fmax(shift_control, fabs(got - wrong[d]) / sqrt(norm));
                    }
                }
        }
        control = fmin(control, shift_control); // every shift's control must fail
        for (int j = SHIFT_KEEP; j < SHIFT_CTX - SHIFT_DROP; j++) // the tokens the cache holds now
            held[j] = held[j + SHIFT_DROP];
        for (int j = SHIFT_CTX - SHIFT_DROP; j < SHIFT_CTX; j++)
            held[j] = ids[next + j - (SHIFT_CTX - SHIFT_DROP)];
        next += SHIFT_DROP;
    }
    if (start(&fresh, path, -1, DTYPE_F32, held, SHIFT_CTX, SHIFT_CTX)) return 1;
    float *x = malloc(sizeof(float) * SHIFT_CTX * kvd), *y = malloc(sizeof(float) * SHIFT_CTX * kvd);
    layer0_keys(&t, SHIFT_CTX, x);
    layer0_keys(&fresh, SHIFT_CTX, y);
    double drift = 0;
    for (int j = 0; j < SHIFT_CTX; j++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            double norm = 1e-30, diff = 0;
            for (int d = 0; d < hd; d++) {
                norm += (double)y[(size_t)j * kvd + h * hd + d] * y[(size_t)j * kvd + h * hd + d];
                diff = fmax(diff, fabs((double)x[(size_t)j * kvd + h * hd + d] - y[(size_t)j * kvd + h * hd + d]));
            }
            drift = fmax(drift, diff / sqrt(norm));
        }
    const int ok = worst <= 2e-6 && control > 1e-2 && drift <= 2e-5;
    printf("%-4s context shift, a RoPE per layer, 20 shifts (keep 4 drop 3 of 64): every layer's moved keys vs its keys "
           "before turned back in double by its own RoPE: max diff %.3e (tol 2e-6); by the other RoPE (must differ, "
           "each shift): %.3e (> 1e-2); layer 0 after 20 shifts vs a fresh run: %.3e (tol 2e-5)\n",
           ok ? "ok" : "FAIL", worst, control, drift);
    free(before);
    free(x);
    free(y);
    transformer_free(&t);
    transformer_free(&fresh);
    return !ok;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--layers")) return shift_layers(argv[2]);
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_model stories260K.bin [MODEL.bin with head_dim a multiple of 32, for q8_0 keys]\n");
        return 2;
    }
    char err[600];
    Transformer t;
    if (transformer_load(&t, argv[1], 0, err, sizeof err)) {
        fprintf(stderr, "test_model: %s\n", err);
        return 1;
    }
    RunConfig run = {.n_ctx = 1024, .max_batch = 256};
    RopeOverrides dynamic = {.mode = ROPE_SCALING_DYNAMIC};
    if (rope_params_resolve(&run.rope, &t.config.rope, run.n_ctx, &dynamic, err, sizeof err) ||
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
    transformer_free(&t);

    int all = ok;
    // Keys in f32 and f16 on stories260K; in q8_0 on the second model, which is quantized anew after
    // its turn, so it can differ from the fresh run's by about a step of each (2 / 127 of a block's largest).
    static const DType types[] = {DTYPE_F32, DTYPE_F16, DTYPE_Q8_0};
    for (int mode = 0; mode < ROPE_SCALING_COUNT; mode++)
        for (int i = 0; i < argc && mode != ROPE_SCALING_LONGROPE; i++) { // longrope: a Phi-3 checkpoint's factors
            // (its keys are cached un-rotated like dynamic's: the shift only moves them; test_families.py)
            const DType kt = types[i];
            const char *path = argv[kt == DTYPE_Q8_0 ? 2 : 1];
            // dynamic NTK and ReRoPE cache keys un-rotated: moving them is the whole shift, exactly
            const int raw = rope_keys_unrotated(&(RopeParams){.mode = (RopeScaling)mode});
            const double tol = raw ? 0 : kt == DTYPE_Q8_0 ? 1e-2 : kt == DTYPE_F16 ? 2e-3 : 2e-6;
            const double turned = shift_error(path, mode, kt, 1);
            const double moved = raw ? INFINITY : shift_error(path, mode, kt, 0);
            const int good = turned <= tol && moved > 1e-2;
            all &= good;
            char control[64] = "none (keys cached un-rotated: moving them is the shift)";
            if (!raw) snprintf(control, sizeof control, "%.3e (> 1e-2)", moved);
            printf("%-4s context shift, %-7s keys %s, keep 4 drop 30 of 64: layer 0's moved keys vs a fresh run "
                   "at the new positions: max diff %.3e (tol %g); moved without turning (must differ): %s\n",
                   good ? "ok" : "FAIL", rope_scaling_name(mode), dtype_name(kt), turned, tol, control);
        }
    printf("test_model: %s\n", all ? "ok" : "FAIL");
    return all ? 0 : 1;
}
