// stepread.c - where a decode step's read rate goes: its matrix products against plain reads of
// the same bytes, in one process, taking turns.
//
//   bench/stepread MODEL.bin [rounds]        threads: OMP_NUM_THREADS (default: all cores)
//
// Each round runs four passes, in a different order every round, and times each:
//   products  every matrix product of one decode step (q, k, v; o; gate, up; down; the classifier),
//             called as model.c calls them, one token, on fixed activations
//   reads     the same matrices (weights and scales) in the same order and in the same parallel
//             regions as the products, XORed with 64-byte loads: the step's reads without arithmetic
//   probe     bench/bwprobe's pattern (4 streams per thread, 256 KiB apart) over the same bytes in one
//             region: what the machine streams when nothing else happens
//   step      the whole decode step: transformer_forward of one token at position STEP_POS, with that
//             many positions in the KV cache (the products, and attention, norms, RoPE, the cache)
// and prints the medians over the rounds as GB/s of the step's weight bytes. Taking turns in one
// process puts all four in the same minute: this machine's bandwidth drifts 20-30% from one minute
// to the next (docs/speed.md, "Noise"), which swamps a comparison of separate runs.
//
// What the ratios say: products / reads is what the arithmetic costs on top of reading (1.0 = the
// products hide entirely behind memory); reads / probe is what cutting the step into ~150 matrices
// costs; step / products what the rest of a step costs at a shallow depth; step / probe is the
// decode's fraction of the roof. The end-to-end comparison is bench/versus.py.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>

#include "fold.h"
#include "kernels.h"
#include "model.h"

enum { GAP = 256 << 10, MAX_ROUNDS = 1000, PASSES = 4, STEP_POS = 32 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One thread's share of [p, p + bytes): as four streams side by side, the way bwprobe reads.
static uint64_t read_share(const unsigned char *p, size_t bytes) {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    const size_t lo = bytes / nt * id / 64 * 64, hi = id == nt - 1 ? bytes / 64 * 64 : bytes / nt * (id + 1) / 64 * 64;
    if (hi - lo >= 4 * (size_t)GAP) { // whole tiles of 4 x GAP, then the rest as one stream
        const size_t tiles = (hi - lo) / (4 * (size_t)GAP);
        uint64_t x = 0;
        for (size_t t = 0; t < tiles; t++)
            x ^= fold(p + lo + t * 4 * GAP, GAP, GAP, 4);
        return x ^ fold(p + lo + tiles * 4 * GAP, hi - lo - tiles * 4 * GAP, 0, 1);
    }
    const size_t q = (hi - lo) / 4 / 64 * 64; // a small share: four quarters
    return fold(p + lo, q, q, 4) ^ fold(p + lo + 4 * q, hi - lo - 4 * q, 0, 1);
}

static uint64_t read_region(const void *p, size_t bytes) {
    uint64_t x = 0;
#pragma omp parallel reduction(^ : x)
    x ^= read_share(p, bytes);
    return x;
}

// A stack of matrices the products take in one parallel region: here too, each thread reading its
// share of every matrix's weights, then of its scales. Adds the bytes of the stack to *bytes.
static uint64_t read_stack(const Matrix *const *m, int count, size_t *bytes) {
    uint64_t x = 0;
#pragma omp parallel reduction(^ : x)
    for (int i = 0; i < count; i++) {
        x ^= read_share(m[i]->data, matrix_data_bytes(m[i]->dtype, m[i]->rows, m[i]->cols));
        if (m[i]->scale) x ^= read_share(m[i]->scale, matrix_scale_bytes(m[i]->dtype, m[i]->rows, m[i]->cols));
    }
    for (int i = 0; i < count; i++)
        *bytes += matrix_data_bytes(m[i]->dtype, m[i]->rows, m[i]->cols) +
                  matrix_scale_bytes(m[i]->dtype, m[i]->rows, m[i]->cols);
    return x;
}

// The decode step's products (model.c: the q, k, v and gate, up products share one region each).
static void products(Transformer *t) {
    RunState *s = &t->state;
    for (int l = 0; l < t->config.n_layers; l++) {
        const LayerWeights *lw = &t->weights.layers[l];
        const Matrix *qkv[3] = {&lw->wq, &lw->wk, &lw->wv}, *gate_up[2] = {&lw->w1, &lw->w3};
        float *qkv_out[3] = {s->q, s->k, s->v}, *gate_up_out[2] = {s->hb, s->hb2};
        matmul_many(&s->work, qkv_out, s->xb, qkv, 3, 1);
        matmul(&s->work, s->xb2, s->xb, &lw->wo, 1);
        matmul_many(&s->work, gate_up_out, s->xb, gate_up, 2, 1);
        matmul(&s->work, s->xb2, s->hb, &lw->w2, 1);
    }
    matmul(&s->work, s->logits, s->xb, &t->weights.wcls, 1);
}

// The products' matrices, read; *bytes gains what a decode step reads.
static uint64_t reads(const Transformer *t, size_t *bytes) {
    uint64_t x = 0;
    for (int l = 0; l < t->config.n_layers; l++) {
        const LayerWeights *lw = &t->weights.layers[l];
        const Matrix *qkv[3] = {&lw->wq, &lw->wk, &lw->wv}, *o = &lw->wo, *gate_up[2] = {&lw->w1, &lw->w3},
                     *down = &lw->w2;
        x ^= read_stack(qkv, 3, bytes) ^ read_stack(&o, 1, bytes) ^ read_stack(gate_up, 2, bytes) ^
             read_stack(&down, 1, bytes);
    }
    const Matrix *cls = &t->weights.wcls;
    return x ^ read_stack(&cls, 1, bytes);
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (argc < 2 || argc > 3 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: stepread MODEL.bin [rounds 1..%d]\n", MAX_ROUNDS);
        return 2;
    }
    Transformer t;
    char err[512];
    if (transformer_load(&t, argv[1], 0, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const Config *c = &t.config;
    const RunConfig run = {
        .n_ctx = STEP_POS + 1, .max_batch = 1, .cache_k = DTYPE_F16, .cache_v = DTYPE_F16, .rope = c->rope};
    if (transformer_prepare(&t, &run, err, sizeof err) != PREPARE_OK) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    RunState *s = &t.state;
    for (int i = 0; i < c->dim; i++) // small activations of both signs, as after a norm
        s->xb[i] = 0.01f * (float)((i * 37) % 101 - 50);
    for (int i = 0; i < c->hidden_dim; i++)
        s->hb[i] = 0.01f * (float)((i * 41) % 103 - 51);

    // The step's weight bytes, counted by a first pass of reads (which also maps the pages), and the
    // layers' weights in file order, which the probe reads: from the first layer's wq to the end of
    // the last matrix of the last layer.
    size_t bytes = 0, ignored = 0;
    uint64_t sink = reads(&t, &bytes);
    const unsigned char *lo = t.weights.layers[0].wq.data, *hi = lo;
    for (int l = 0; l < c->n_layers; l++) {
        const Matrix *w3 = &t.weights.layers[l].w3;
        const unsigned char *end = (const unsigned char *)w3->data + matrix_data_bytes(w3->dtype, w3->rows, w3->cols) +
                                   matrix_scale_bytes(w3->dtype, w3->rows, w3->cols);
        hi = end > hi ? end : hi;
    }
    const size_t span = (size_t)(hi - lo);

    // The step's cache: positions 0 .. STEP_POS - 1 written once, so that every timed step attends
    // over STEP_POS + 1 positions, as the generator's early steps do.
    const int token = 1;
    float *logits;
    for (int pos = 0; pos < STEP_POS; pos++)
        if (transformer_forward(&t, &token, 1, pos, pos + 1, 0, &logits, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }

    static double secs[PASSES][MAX_ROUNDS];
    for (int r = -1; r < rounds; r++) // round -1 warms up and is not counted
        for (int k = 0; k < PASSES; k++) {
            const int pass = (k + (r < 0 ? 0 : r)) % PASSES;
            const double t0 = now();
            if (pass == 0)
                products(&t);
            else if (pass == 1)
                sink ^= reads(&t, &ignored);
            else if (pass == 2)
                sink ^= read_region(lo, span);
            else
                transformer_forward(&t, &token, 1, STEP_POS, STEP_POS + 1, 0, &logits, err, sizeof err);
            if (r >= 0) secs[pass][r] = (now() - t0) / (pass == 2 ? (double)span / (double)bytes : 1.0);
        }
    double rate[PASSES];
    for (int p = 0; p < PASSES; p++) {
        qsort(secs[p], rounds, sizeof(double), by_value);
        rate[p] = (double)bytes / secs[p][rounds / 2] / 1e9;
    }
    printf("%s: %s, %d threads, %.3f GB of weights per step, medians of %d rounds (checksum %llx)\n", argv[1],
           dtype_name(c->dtype), omp_get_max_threads(), (double)bytes / 1e9, rounds, (unsigned long long)(sink & 0xff));
    printf("products %.1f GB/s | reads %.1f GB/s | probe %.1f GB/s | products/reads %.2f, reads/probe %.2f, "
           "products/probe %.2f\n",
           rate[0], rate[1], rate[2], rate[0] / rate[1], rate[1] / rate[2], rate[0] / rate[2]);
    printf("step %.1f GB/s (one token at position %d) | step/products %.2f, step/probe %.2f\n", rate[3], STEP_POS,
           rate[3] / rate[0], rate[3] / rate[2]);
    transformer_free(&t);
    return 0;
}
