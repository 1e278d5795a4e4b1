// sampler.h - the next token from the logits: llama.cpp's sampler chain, in its order.
//
//   1. repeat penalty   each distinct token among the last repeat_last_n of the text (prompt and
//                       output) has its logit divided by repeat_penalty when positive, multiplied
//                       when negative (Keskar et al. 2019, CTRL, section 4.1; llama.cpp's
//                       llama_sampler_penalties). 1 = off.
//   2. top-k            keep the k most likely tokens. 0 = off.
//   3. top-p            keep the most likely tokens until their probabilities add up to top_p
//                       (Holtzman et al. 2019, nucleus), the one that crosses it included. 1 = off.
//   4. min-p            keep the tokens at least min_p times as likely as the likeliest. 0 = off.
//   5. temperature      divide the kept logits by temp and draw from their softmax; temp 0: the
//                       likeliest token (greedy; the penalty still applies).
// Probabilities in 2-4 are the softmax of the penalised logits at temperature 1 over the tokens
// still kept, as in llama.cpp: the temperature shapes the draw, not which tokens may be drawn.
// Ties are broken by the lower token id.
#ifndef SAMPLER_H
#define SAMPLER_H

typedef struct {
    double temp;           // >= 0
    double top_p;          // (0, 1]
    double min_p;          // [0, 1]
    double repeat_penalty; // > 0
    int top_k;             // >= 0
    int repeat_last_n;     // >= 0: how many of the last tokens the penalty looks at
} SamplerParams;

typedef struct {
    float prob;
    int id;
} Candidate;

typedef struct Sampler Sampler;

// NULL when out of memory. seed: any value (the generator's state is never 0).
Sampler *sampler_new(const SamplerParams *p, int vocab_size, unsigned long long seed);
void sampler_free(Sampler *s);

// The text so far grows by id (a prompt token or a sampled one): the penalty's window moves.
void sampler_accept(Sampler *s, int id);

// The next token. logits (vocab_size of them) are overwritten.
int sampler_sample(Sampler *s, float *logits);

// What sampler_sample draws from, for the tests: the kept tokens, most likely first, with their
// probabilities after the temperature (adding up to 1); greedy: the likeliest alone with 1. Returns
// their count; *out points into the sampler, valid until the next call. logits are overwritten.
int sampler_distribution(Sampler *s, float *logits, const Candidate **out);

#endif
