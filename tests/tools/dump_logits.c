// dump_logits.c - run token ids through model.c and write every position's logits, so the tests
// can compare them with the PyTorch reference (tests/reference.py).
//
//   dump_logits MODEL IDS OUT [--ctx N] [--rope-scaling M] [--rope-factor S] [--rope-base B]
//               [--rope-alpha A] [--rope-window W] [--grp-attn-n G] [--dca-chunk S] [--batch B] [--threads T]
//               [--growing [--prefill P]] [--shift KEEP] [--cache-type-k T] [--cache-type-v T]
//               [--attn-logn] [--f16-as-bf16] [--swa-full] [--last-logits]
//
// IDS is int32 token ids; OUT gets float32 logits (n, vocab). The ids run from position 0. By
// default they are one sequence of length n (RoPE length n for every position, as one Hugging
// Face forward pass), in blocks of --batch tokens. --growing feeds one token at a time and sets
// the RoPE length to the tokens seen so far, as generation does (matters only for dynamic);
// with --prefill P the first P ids go first as one prompt in blocks, as ./run's prompt does.
// --shift KEEP: the ids may run past --ctx; whenever the next block would not fit, a context shift
// keeps the first KEEP positions and drops the oldest half of the rest, as run.c's make_room does,
// and the RoPE length is the positions held (tests/test_bit_identical.py). --cache-type-k and
// --cache-type-v: the KV cache's types (f32, f16, q8_0), as ./run's flags.
// --last-logits: each forward asks only for its block's last logits, as ./run's prompt does (the
// last layer then runs for that token alone); the other rows of OUT are NaN. The line on stderr
// names the kernels' instruction set (kernels_isa), whose vector code decides the low bits.
#include <math.h>
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
    int ctx = 0, batch = 64, growing = 0, logn = 0, f16b = 0, keep = -1, prompt = 0, swa_full = 0, last = 0;
    DType cache[2] = {DTYPE_F32, DTYPE_F32}; // keys, values
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--f16-as-bf16")) { // run's --f16-as-bf16 (model.h)
            f16b = 1;
            continue;
        }
        if (!strcmp(a, "--swa-full")) { // run's --swa-full: no ring in the sliding layers
            swa_full = 1;
            continue;
        }
        if (!strcmp(a, "--last-logits")) {
            last = 1;
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
        else if (!strcmp(a, "--prefill"))
            prompt = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--shift"))
            keep = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--cache-type-k") || !strcmp(a, "--cache-type-v")) {
            if (dtype_from_name(v, &cache[a[13] == 'v'])) return fail("unknown cache type"), 2;
        } else if (!strcmp(a, "--rope-scaling")) {
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
    if (transformer_load(&t, argv[1], f16b, err, sizeof err)) return fail(err);
    const int V = t.config.vocab_size;
    RunConfig run = {.n_ctx = ctx ? ctx : n,
                     .max_batch = growing && !prompt ? 1 : batch,
                     .attn_logn = logn,
                     .swa_full = swa_full,
                     .cache_k = cache[0],
                     .cache_v = cache[1]};
    if (rope_params_resolve(&run.rope, &t.config.rope, run.n_ctx, &ov, err, sizeof err)) return fail(err);
    if (transformer_prepare(&t, &run, err, sizeof err)) return fail(err);

    float *out = malloc((size_t)n * V * sizeof(float));
    if (!out) return fail("out of memory");
    for (int i = 0, pos = 0; i < n;) { // id i at position pos (pos < i after a context shift)
        const int decode = growing && i >= prompt, end = growing ? prompt : n; // the prompt ends at `end`
        const int len = decode ? 1 : (end - i < t.run.max_batch ? end - i : t.run.max_batch);
        while (keep >= 0 && pos + len > t.run.n_ctx) { // run.c's make_room
            const int drop = (pos - keep) / 2;
            if (drop < 1 || transformer_shift(&t, pos, keep, drop, err, sizeof err)) return fail("no room to shift");
            pos -= drop;
        }
        // decoding: each token is the end of a sequence (generation); a shifting run holds pos + len;
        // else the prompt (all n ids without --growing) is one sequence
        const int text_len = decode ? pos + 1 : keep >= 0 ? pos + len : end;
        float *logits;
        if (transformer_forward(&t, ids + i, len, pos, text_len, !last, &logits, err, sizeof err)) return fail(err);
        for (size_t j = 0; last && j < (size_t)(len - 1) * V; j++)
            out[(size_t)i * V + j] = NAN;
        memcpy(out + (size_t)(i + (last ? len - 1 : 0)) * V, logits, (size_t)(last ? 1 : len) * V * sizeof(float));
        i += len, pos += len;
    }
    f = fopen(argv[3], "wb");
    if (!f || fwrite(out, sizeof(float) * V, (size_t)n, f) != (size_t)n || fclose(f)) return fail("cannot write OUT");
    fprintf(stderr,
            "dump_logits: %d positions, rope %s base %g factor %g window %d group %d local window %d chunk %d "
            "(effective base %g, mscale %g), kernels %s\n",
            n, rope_scaling_name(t.rope.p.mode), t.rope.p.base, t.rope.p.factor, t.rope.p.window, t.rope.p.group,
            t.rope.p.local_window, t.rope.p.chunk, t.rope.eff_base,
            t.rope.mscale, kernels_isa());
    free(out);
    free(ids);
    transformer_free(&t);
    return 0;
}
