// sample_dump.c - sampler.c from the command line, for tests/test_sampler.py.
//
//   sample_dump dist             the distribution the sampler draws from: one line "ID PROB" per
//                                kept token, most likely first
//   sample_dump draw SEED COUNT  COUNT tokens drawn from the same logits, one id a line
//
// stdin, numbers separated by white space: temp top_p min_p repeat_penalty top_k repeat_last_n,
// then V and V logits, then H and the H token ids of the text so far (oldest first), each
// given to sampler_accept.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

int main(int argc, char **argv) {
    const int draw = argc == 4 && !strcmp(argv[1], "draw");
    if (!draw && !(argc == 2 && !strcmp(argv[1], "dist"))) {
        fprintf(stderr, "usage: sample_dump dist | sample_dump draw SEED COUNT  (input on stdin)\n");
        return 2;
    }
    SamplerParams p;
    int v, h;
    if (scanf("%lf %lf %lf %lf %d %d %d", &p.temp, &p.top_p, &p.min_p, &p.repeat_penalty, &p.top_k, &p.repeat_last_n,
              &v) != 7 ||
        v < 1) {
        fprintf(stderr, "error: bad parameters\n");
        return 1;
    }
    float *logits = malloc((size_t)v * sizeof *logits), *work = malloc((size_t)v * sizeof *work);
    for (int i = 0; i < v; i++)
        if (scanf("%f", &logits[i]) != 1) return 1;
    Sampler *s = sampler_new(&p, v, draw ? strtoull(argv[2], NULL, 10) : 1);
    if (!s || scanf("%d", &h) != 1) return 1;
    for (int i = 0, id; i < h; i++) {
        if (scanf("%d", &id) != 1) return 1;
        sampler_accept(s, id);
    }
    if (draw) {
        for (long n = atol(argv[3]); n > 0; n--) {
            memcpy(work, logits, (size_t)v * sizeof *work);
            printf("%d\n", sampler_sample(s, work));
        }
    } else {
        const Candidate *c;
        const int m = sampler_distribution(s, logits, &c);
        for (int i = 0; i < m; i++)
            printf("%d %.9g\n", c[i].id, c[i].prob);
    }
    sampler_free(s);
    free(logits), free(work);
    return 0;
}
