// sampler.c - llama.cpp's sampler chain (sampler.h says what each step does and in which order).
//
// One step costs a pass over the vocabulary plus a sort of the tokens that can still be kept: with
// top-k, the k selected in linear time; without it, only the tokens that top-p and min-p cannot
// rule out before sorting (see distribution), a few hundred of 128256 for a peaked distribution.
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct Sampler {
    SamplerParams p;
    int n_vocab;
    unsigned long long rng; // xorshift64* state, never 0
    int *recent, n_recent;  // the last repeat_last_n tokens, a ring; next write at head
    int head;
    unsigned *seen, epoch; // seen[id] == epoch: id already penalised in this step
    Candidate *cand;       // [n_vocab]
};

Sampler *sampler_new(const SamplerParams *p, int vocab_size, unsigned long long seed) {
    Sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = vocab_size;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    s->cand = malloc((size_t)vocab_size * sizeof *s->cand);
    s->seen = calloc((size_t)vocab_size, sizeof *s->seen);
    s->recent = p->repeat_last_n > 0 ? malloc((size_t)p->repeat_last_n * sizeof *s->recent) : NULL;
    if (!s->cand || !s->seen || (p->repeat_last_n > 0 && !s->recent)) {
        sampler_free(s);
        return NULL;
    }
    return s;
}

void sampler_free(Sampler *s) {
    if (!s) return;
    free(s->cand), free(s->seen), free(s->recent);
    free(s);
}

void sampler_accept(Sampler *s, int id) {
    if (s->p.repeat_last_n <= 0) return;
    s->recent[s->head] = id;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

static unsigned long long rng_next(unsigned long long *state) { // xorshift64* (Vigna 2016)
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1DULL;
}

// Step 1: each distinct recent token once, however often it occurs (as llama.cpp's repeat penalty;
// its frequency and presence penalties, which count, are not here).
static void penalise(Sampler *s, float *logits) {
    const float pen = (float)s->p.repeat_penalty;
    if (pen == 1.0f || !s->n_recent) return;
    if (++s->epoch == 0) { // the stamps wrapped: start them again
        memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
        s->epoch = 1;
    }
    for (int i = 0; i < s->n_recent; i++) {
        const int id = s->recent[i];
        if (id < 0 || id >= s->n_vocab || s->seen[id] == s->epoch) continue;
        s->seen[id] = s->epoch;
        logits[id] = logits[id] <= 0 ? logits[id] * pen : logits[id] / pen;
    }
}

// The order of the whole chain: more likely first, then the lower id. Candidates hold logits here.
static int before(const Candidate *a, const Candidate *b) {
    return a->prob > b->prob || (a->prob == b->prob && a->id < b->id);
}

static int by_order(const void *a, const void *b) { return before(b, a) - before(a, b); }

// Rearrange c[0..n) so that its first k entries are the k first in the order (Hoare's selection).
static void select_first(Candidate *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        Candidate pivot = c[lo + (hi - lo) / 2], t;
        int i = lo, j = hi;
        while (i <= j) {
            while (before(&c[i], &pivot))
                i++;
            while (before(&pivot, &c[j]))
                j--;
            if (i <= j) t = c[i], c[i++] = c[j], c[j--] = t;
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int sampler_distribution(Sampler *s, float *logits, const Candidate **out) {
    const int n = s->n_vocab;
    Candidate *c = s->cand;
    *out = c;
    penalise(s, logits);
    int best = 0; // the likeliest; NaN logits (a damaged model) never win
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best] || isnan(logits[best])) best = i;
    const float max = logits[best];
    if (s->p.temp == 0 || !isfinite(max)) {
        c[0] = (Candidate){1.0f, best};
        return 1;
    }
    // Steps 2-4 on e = exp(logit - max), so the likeliest has e = 1 and p = e / z.
    int m = 0;
    double z = 0;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        for (int i = 0; i < n; i++)
            c[i] = (Candidate){isnan(logits[i]) ? -INFINITY : logits[i], i};
        select_first(c, n, s->p.top_k);
        m = s->p.top_k;
        for (int i = 0; i < m; i++)
            z += (c[i].prob = expf(c[i].prob - max));
    } else {
        for (int i = 0; i < n; i++)
            z += isnan(logits[i]) ? 0 : expf(logits[i] - max);
        // Not yet sorted, drop what cannot be kept: below min_p (e < min_p), or too unlikely for
        // the nucleus (p < (1 - top_p) / (n - 1): all tokens that unlikely together fall short of
        // the 1 - top_p the nucleus leaves out). The likeliest always stays.
        double floor = s->p.min_p;
        if (s->p.top_p < 1 && n > 1 && (1 - s->p.top_p) / (n - 1) * z > floor) floor = (1 - s->p.top_p) / (n - 1) * z;
        for (int i = 0; i < n; i++) {
            const float e = expf(logits[i] - max);
            if (e >= floor || i == best) c[m++] = (Candidate){e, i};
        }
    }
    qsort(c, m, sizeof *c, by_order);
    if (s->p.top_p < 1) { // step 3: the probabilities over what top-k kept (z)
        double cum = 0;
        for (int i = 0; i < m; i++)
            if ((cum += c[i].prob / z) >= s->p.top_p) {
                m = i + 1;
                break;
            }
    }
    while (m > 1 && c[m - 1].prob < s->p.min_p) // step 4: c[0] has e = 1
        m--;
    // Step 5, from the logits (e^(1/temp) would lose what underflowed in e).
    double sum = 0;
    for (int i = 0; i < m; i++)
        sum += (c[i].prob = expf((float)((logits[c[i].id] - max) / s->p.temp)));
    for (int i = 0; i < m; i++)
        c[i].prob = (float)(c[i].prob / sum);
    return m;
}

int sampler_sample(Sampler *s, float *logits) {
    const Candidate *c;
    const int m = sampler_distribution(s, logits, &c);
    const float r = (rng_next(&s->rng) >> 40) / 16777216.0f; // [0, 1), 24 random bits
    float acc = 0;
    for (int i = 0; i < m; i++)
        if (r < (acc += c[i].prob)) return c[i].id;
    return c[m - 1].id;
}
