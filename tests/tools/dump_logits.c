// dump_logits.c - run token ids through model.c and write every position's logits, so the tests
// can compare them with the PyTorch reference (tests/reference.py).
//
//   dump_logits MODEL IDS OUT [--ctx N] [--rope-scaling M] [--rope-factor S] [--rope-base B]
//               [--rope-alpha A] [--rope-window W] [--grp-attn-n G] [--dca-chunk S] [--batch B] [--threads T]
//               [--growing]
//               [--attn-logn] [--f16-as-bf16]
//
// IDS is int32 token ids; OUT gets float32 logits (n, vocab). The ids run from position 0. By
// default they are one sequence of length n (RoPE length n for every position, as one Hugging
// Face forward pass), in blocks of --batch tokens. --growing feeds one token at a time and sets
// the RoPE length to the tokens seen so far, as generation does (matters only for dynamic).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "model.h"

static int fail(const char *msg) {
    fprintf(stderr, "dump_logits: %s\n", msg);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) return fail("usage: dump_logits MODEL IDS OUT [options]"), 2;
    RopeOverrides ov = {.mode = -1};
    int ctx = 0, batch = 64, growing = 0, logn = 0, f16b = 0;
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--f16-as-bf16")) { // run's --f16-as-bf16 (model.h)
            f16b = 1;
            continue;
        }
        if (!strcmp(a, "--growing") || !strcmp(a, "--attn-logn")) {
            *(a[2] == 'g' ? &growing : &logn) = 1;
            continue;
        }
        if (!v) return fail("option without a value"), 2;
        i++;
        if (!strcmp(a, "--ctx"))
            ctx = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--batch"))
            batch = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--rope-factor"))
            ov.factor = strtod(v, NULL);
        else if (!strcmp(a, "--rope-base"))
            ov.base = strtod(v, NULL);
        else if (!strcmp(a, "--rope-alpha"))
            ov.alpha = strtod(v, NULL);
        else if (!strcmp(a, "--rope-window"))
            ov.window = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--grp-attn-n"))
            ov.group = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--dca-chunk"))
            ov.chunk = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--rope-scaling")) {
            RopeScaling m;
            if (rope_scaling_from_name(v, &m)) return fail("unknown --rope-scaling"), 2;
            ov.mode = (int)m;
        } else if (!strcmp(a, "--threads")) {
#ifdef _OPENMP
            omp_set_num_threads((int)strtol(v, NULL, 10));
#endif
        } else
            return fail("unknown option"), 2;
    }

    FILE *f = fopen(argv[2], "rb");
    if (!f) return fail("cannot open IDS");
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    int n = (int)(bytes / 4);
    int *ids = malloc((size_t)n * sizeof(int) + 1);
    if (n < 1 || !ids || fread(ids, 4, (size_t)n, f) != (size_t)n) return fail("cannot read IDS");
    fclose(f);

    char err[600];
    Transformer t;
    if (transformer_load(&t, argv[1], err, sizeof err)) return fail(err);
    if (f16b && transformer_copy_weights(&t, DTYPE_BF16_R16, err, sizeof err)) return fail(err);
    const int V = t.config.vocab_size;
    RunConfig run = {.n_ctx = ctx ? ctx : n, .max_batch = growing ? 1 : batch, .attn_logn = logn};
    if (rope_params_resolve(&run.rope, &t.config.rope, run.n_ctx, &ov, err, sizeof err)) return fail(err);
    if (transformer_prepare(&t, &run, err, sizeof err)) return fail(err);

    float *out = malloc((size_t)n * V * sizeof(float));
    if (!out) return fail("out of memory");
    for (int pos = 0; pos < n;) {
        int len = growing ? 1 : (n - pos < t.run.max_batch ? n - pos : t.run.max_batch);
        // growing: each token is the end of a sequence (generation); else all n are one sequence
        float *logits;
        if (transformer_forward(&t, ids + pos, len, pos, growing ? pos + 1 : n, 1, &logits, err, sizeof err))
            return fail(err);
        memcpy(out + (size_t)pos * V, logits, (size_t)len * V * sizeof(float));
        pos += len;
    }
    f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof(float) * V, (size_t)n, f) != (size_t)n || fclose(f)) return fail("cannot write OUT");
    fprintf(stderr, "dump_logits: %d positions, rope %s base %g factor %g window %d (effective base %g, mscale %g)\n",
            n, rope_scaling_name(t.rope.p.mode), t.rope.p.base, t.rope.p.factor, t.rope.p.window, t.rope.eff_base,
            t.rope.mscale);
    free(out);
    free(ids);
    transformer_free(&t);
    return 0;
}
