// fuzz_cli.c - libFuzzer target: arbitrary command lines through cli.c's flag parser.
//
// The input is split at NUL bytes into arguments after "run". parse_args must either refuse the
// command line (a usage error, already printed) or return options inside every documented range;
// the options then go where ./run sends them next: rope_params_resolve for a checkpoint trained
// on 512 tokens with head_dim 8 (once without and once with its own YaRN scaling), the inverse
// frequencies of whatever that resolves to, and the sampler with the parsed sampling flags, over
// logits made from the input's bytes (a vocabulary of 97, the text so far the same bytes). Nothing
// here loads a model or allocates by the size of the context, so the fuzzer stays fast.
//
// Run it with -close_fd_mask=3: the usage errors it finds are printed, by design.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "../sampler.h"

#define MAX_ARGS 64

static void check_ranges(const Options *o) {
    if (!o->model) abort();
    if (o->n_predict < -1 || !(o->temp >= 0) || !isfinite(o->temp)) abort();
    if (!(o->top_p > 0 && o->top_p <= 1) || !(o->min_p >= 0 && o->min_p <= 1)) abort();
    if (!(o->repeat_penalty > 0) || !isfinite(o->repeat_penalty) || o->top_k < 0 || o->repeat_last_n < -1) abort();
    if (o->n_reverse < 0 || o->n_reverse > MAX_REVERSE_PROMPTS) abort();
    for (int i = 0; i < o->n_reverse; i++)
        if (!o->reverse[i] || !o->reverse[i][0]) abort();
    if (o->ctx && o->keep >= o->ctx - 1 && o->keep >= 0) abort();
    if (o->ctx < 0 || o->threads < 0 || o->batch < 1 || o->ppl_windows < 0 || o->seed < -1) abort();
    if (o->rope.mode < -1 || o->rope.mode >= ROPE_SCALING_COUNT) abort();
    if (!(o->rope.factor == 0 || o->rope.factor >= 1) || !isfinite(o->rope.factor)) abort();
    if (!(o->rope.base >= 0) || !isfinite(o->rope.base)) abort();
    if (!(o->rope.alpha == 0 || o->rope.alpha >= 1) || !isfinite(o->rope.alpha)) abort();
    if (o->rope.window < 0) abort();
}

static void resolve(const Options *o, const RopeParams *trained) {
    RopeParams p;
    char err[300];
    int ctx = o->ctx ? o->ctx : trained->orig_ctx;
    if (rope_params_resolve(&p, trained, ctx, &o->rope, err, sizeof err)) return;
    if (p.head_dim != trained->head_dim || !(p.factor >= 1) || !(p.base > 0)) abort();
    double inv_freq[8], mscale, eff_base;
    rope_inv_freq(&p, ctx, inv_freq, &mscale, &eff_base);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2] = {"run"};
    int argc = 1;
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    argv[argc] = NULL;

    Options o;
    if (parse_args(argc, argv, &o) == 0) {
        check_ranges(&o);
        const RopeParams plain = {
            .mode = ROPE_SCALING_NONE, .head_dim = 8, .orig_ctx = 512, .base = 10000, .factor = 1};
        RopeParams yarn = plain;
        yarn.mode = ROPE_SCALING_YARN, yarn.factor = 4, yarn.beta_fast = 32, yarn.beta_slow = 1;
        resolve(&o, &plain);
        resolve(&o, &yarn);
        enum { V = 97 };
        const SamplerParams p = {.temp = o.temp,
                                 .top_p = o.top_p,
                                 .min_p = o.min_p,
                                 .repeat_penalty = o.repeat_penalty,
                                 .top_k = o.top_k,
                                 .repeat_last_n = o.repeat_last_n < 0 ? 512 : o.repeat_last_n % 4096};
        Sampler *s = sampler_new(&p, V, (unsigned long long)o.seed);
        float logits[V];
        for (int i = 0; s && i < V; i++)
            logits[i] = size ? (float)((signed char)data[i % size]) / 8 : 0;
        for (size_t i = 0; s && i < size && i < 600; i++)
            sampler_accept(s, data[i] % V);
        const int id = s ? sampler_sample(s, logits) : 0;
        if (id < 0 || id >= V) abort();
        sampler_free(s);
    }
    free(buf);
    return 0;
}
