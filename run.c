// run.c - the command line: generate text from a Llama checkpoint, or measure its perplexity.
//
//   ./run model.bin -i "Once upon a time"          stream a continuation to stdout
//   ./run model.bin -f prompt.txt                   the prompt from a file
//   ./run model.bin -m chat -y "Be brief."         talk to an instruct model, turns from stdin
//   ./run model.bin --ctx 4096 --rope-scaling ntk   run past the trained context
//   ./run model.bin --ppl text.txt --ctx 2048       perplexity, by position bucket
//
// This file owns the process: it parses the flags, loads the model and tokenizer, runs the
// generation loop with its sampler, prints the banner and timings on stderr, and is the only
// place that decides to exit. Exit status: 0 ok, 1 runtime or file error, 2 usage error.
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <cjson/cJSON.h>

#include "model.h"
#include "tokenizer.h"

// ---------------------------------------------------------------------------------------------
// Command line

typedef struct {
    const char *model;
    const char *tokenizer; // -z; default: tokenizer.model, else tokenizer.json, beside the model
    const char *prompt;
    const char *prompt_file; // -f: the prompt is this file's bytes
    int n_predict;           // tokens to generate
    int keep;                // --keep: positions a context shift keeps at the start
    double temp;             // 0 = greedy
    double top_p;
    long seed;
    int ctx;               // 0 = the trained context
    int threads;           // 0 = OpenMP's default
    int batch;             // prompt tokens per forward call
    const char *ppl;       // --ppl FILE: evaluate perplexity instead of generating
    int ppl_windows;       // 0 = all windows
    const char *rope_mode; // --rope-scaling; NULL = the checkpoint's own
    const char *cache_k, *cache_v; // -ctk, -ctv: KV cache types; NULL = f32
    int attn_logn;                 // --attn-logn (a switch)
    RopeOverrides rope;
    const char *gen_flag;      // the first generation-only flag given (-i -f -n -t -p -s), which --ppl refuses
    const char *mode;          // -m: "generate" (default) or "chat"
    const char *system;        // -y: chat's system prompt
    const char *chat_template; // --chat-template NAME; NULL: recognised from tokenizer_config.json
} Options;

// The flags: names, what kind of value, where it goes, its allowed range [lo, hi] (lo excluded
// when open), and whether only generation uses it. Every flag takes a value but the switches
// (FLAG_SWITCH: the flag alone sets an int to 1). usage() shows the
// same ranges; tests/test_errors.py checks the two agree.
typedef enum { FLAG_TEXT, FLAG_INT, FLAG_LONG, FLAG_REAL, FLAG_SWITCH } FlagKind;

typedef struct {
    const char *names[3];
    FlagKind kind;
    size_t offset; // of the field in Options
    double lo, hi;
    int open;       // 1: the value must be > lo
    int generation; // 1: used only when generating text (refused with --ppl)
} Flag;

static const Flag FLAGS[] = {
    {{"-i", "--prompt"}, FLAG_TEXT, offsetof(Options, prompt), 0, 0, 0, 1},
    {{"-f", "--file"}, FLAG_TEXT, offsetof(Options, prompt_file), 0, 0, 0, 1},
    {{"-z", "--tokenizer"}, FLAG_TEXT, offsetof(Options, tokenizer), 0, 0, 0, 0},
    {{"-n", "--n-predict"}, FLAG_INT, offsetof(Options, n_predict), 0, 1 << 30, 0, 1},
    {{"--keep"}, FLAG_INT, offsetof(Options, keep), 0, 1 << 24, 0, 1},
    {{"-t", "--temp"}, FLAG_REAL, offsetof(Options, temp), 0, 1e6, 0, 1},
    {{"-p", "--top-p"}, FLAG_REAL, offsetof(Options, top_p), 0, 1, 1, 1},
    {{"-s", "--seed"}, FLAG_LONG, offsetof(Options, seed), 0, 9e18, 0, 1},
    {{"-c", "--ctx", "--ctx-size"}, FLAG_INT, offsetof(Options, ctx), 1, 1 << 24, 0, 0},
    {{"--threads"}, FLAG_INT, offsetof(Options, threads), 1, 1024, 0, 0},
    {{"-b", "--batch-size"}, FLAG_INT, offsetof(Options, batch), 1, 4096, 0, 0},
    {{"-ctk", "--cache-type-k"}, FLAG_TEXT, offsetof(Options, cache_k), 0, 0, 0, 0},
    {{"-ctv", "--cache-type-v"}, FLAG_TEXT, offsetof(Options, cache_v), 0, 0, 0, 0},
    {{"--ppl"}, FLAG_TEXT, offsetof(Options, ppl), 0, 0, 0, 0},
    {{"--ppl-windows"}, FLAG_INT, offsetof(Options, ppl_windows), 1, 1 << 30, 0, 0},
    {{"--rope-scaling"}, FLAG_TEXT, offsetof(Options, rope_mode), 0, 0, 0, 0},
    {{"--rope-factor", "--rope-scale"}, FLAG_REAL, offsetof(Options, rope.factor), 1, 1e6, 0, 0},
    {{"--rope-base", "--rope-freq-base"}, FLAG_REAL, offsetof(Options, rope.base), 0, 1e300, 1, 0},
    {{"--rope-alpha"}, FLAG_REAL, offsetof(Options, rope.alpha), 1, 1e6, 0, 0},
    {{"--rope-window"}, FLAG_INT, offsetof(Options, rope.window), 1, 1 << 24, 0, 0},
    {{"--attn-logn"}, FLAG_SWITCH, offsetof(Options, attn_logn), 0, 0, 0, 0},
    {{"-m", "--mode"}, FLAG_TEXT, offsetof(Options, mode), 0, 0, 0, 1},
    {{"-y", "--system"}, FLAG_TEXT, offsetof(Options, system), 0, 0, 0, 1},
    {{"--chat-template"}, FLAG_TEXT, offsetof(Options, chat_template), 0, 0, 0, 1},
};

static void usage(FILE *f) {
    fprintf(f, "usage: run MODEL.bin [options]\n"
               "\n"
               "Generate text from a Llama checkpoint (export/export.py output or a llama2.c legacy .bin).\n"
               "Allowed values in [brackets].\n"
               "\n"
               "  -i, --prompt TEXT        prompt (default: empty, the text starts after BOS)\n"
               "  -f, --file FILE          the prompt is the text of FILE (instead of -i)\n"
               "  -n, --n-predict N        tokens to generate [0, 1073741824] (default 256); past a full\n"
               "                           context the oldest half of it is dropped (context shift)\n"
               "      --keep N             a context shift keeps the first N tokens [0, 16777216]\n"
               "                           (default 4: BOS and 3 more, attention's sinks)\n"
               "  -t, --temp T             temperature, 0 = greedy [0, 1e6] (default 1.0)\n"
               "  -p, --top-p P            nucleus sampling (0, 1] (default 0.9)\n"
               "  -s, --seed N             random seed [0, 9000000000000000000] (default: time)\n"
               "  -z, --tokenizer PATH     tokenizer.model (SentencePiece) or tokenizer.json (byte-level\n"
               "                           BPE) (default: the one beside MODEL, tokenizer.model first)\n"
               "  -c, --ctx, --ctx-size N  context length = KV cache size in tokens [1, 16777216]\n"
               "                           (default: the trained context)\n"
               "      --threads N          OpenMP threads [1, 1024] (default: all cores)\n"
               "  -b, --batch-size N       prompt tokens per forward pass [1, 4096] (default 512)\n"
               "  -ctk, --cache-type-k T   type of the cached keys: f32 | f16 | q8_0 (default f32)\n"
               "  -ctv, --cache-type-v T   type of the cached values: f32 | f16 | q8_0 (default f32)\n"
               "\n"
               "Chat (see README, \"Chat\"), the user's turns one line each on stdin:\n"
               "  -m, --mode MODE          generate (default) or chat; in chat, -i is the first turn\n"
               "  -y, --system TEXT        chat: the system prompt\n"
               "      --chat-template NAME chat: llama2 | llama3 | zephyr | chatml | mistral (default:\n"
               "                           recognised from tokenizer_config.json beside the tokenizer)\n"
               "\n"
               "Perplexity, instead of generating (see README, \"Measuring long context\"):\n"
               "      --ppl FILE           perplexity of FILE in windows of --ctx tokens, by position\n"
               "      --ppl-windows K      with --ppl: at most K windows [1, 1073741824] (default: all)\n"
               "\n"
               "RoPE scaling, to run past the trained context (see README, \"Past the trained context\"):\n"
               "      --rope-scaling MODE  none | pi (alias linear) | ntk | dynamic | yarn | llama3 |\n"
               "                           rerope | leaky-rerope (default: the checkpoint's own, else none)\n"
               "      --rope-factor S      extension factor s [1, 1e6] (alias --rope-scale; default:\n"
               "                           ctx / trained ctx when larger, dynamic: 1, its alpha grows\n"
               "                           as length / trained ctx); leaky-rerope: the rate K > 1 past\n"
               "                           the window (default (ctx - W) / (L - W): ctx maps to L)\n"
               "      --rope-base B        RoPE base > 0, overrides the checkpoint's rope_theta\n"
               "                           (alias --rope-freq-base)\n"
               "      --rope-alpha A       ntk only: alpha of the base change [1, 1e6] (default: S)\n"
               "      --rope-window W      rerope, leaky-rerope: the window [1, 16777216] (default L / 4):\n"
               "                           a distance r >= W is scored as W (leaky: W + (r - W) / K);\n"
               "                           W <= L, the trained context (leaky-rerope: W < L)\n"
               "      --attn-logn          log-n scaling: a query at position m >= L is multiplied by\n"
               "                           ln(m + 1) / ln(L); combines with every mode\n"
               "  -h, --help               this text\n");
}

// Strict numbers: the whole string must parse (no leading blanks either, which strtod skips), no
// overflow, no NaN, inside the flag's range.
static int parse_value(const Flag *f, const char *v, Options *o) {
    char *field = (char *)o + f->offset, *end;
    if (f->kind == FLAG_TEXT) {
        *(const char **)field = v;
        return 0;
    }
    errno = 0;
    long n = 0; // integers are compared as integers: 9e18 + 1 is 9e18 as a double
    double x = f->kind == FLAG_REAL ? strtod(v, &end) : (double)(n = strtol(v, &end, 10));
    if (errno || end == v || *end || isspace((unsigned char)*v) || !isfinite(x) || x < f->lo || x > f->hi ||
        (f->open && x == f->lo) || (f->kind != FLAG_REAL && n > (long)f->hi))
        return -1;
    if (f->kind == FLAG_INT)
        *(int *)field = (int)n;
    else if (f->kind == FLAG_LONG)
        *(long *)field = n;
    else
        *(double *)field = x;
    return 0;
}

// Returns 0 to run, 1 after --help, -1 on a usage error (already reported).
static int parse_args(int argc, char **argv, Options *o) {
    *o = (Options){
        .n_predict = 256, .keep = 4, .temp = 1.0, .top_p = 0.9, .seed = (long)time(NULL), .batch = 512, .rope = {.mode = -1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->model) {
                fprintf(stderr, "error: unexpected argument '%s': only one model file is taken\n", a);
                return -1;
            }
            o->model = a;
            continue;
        }
        const Flag *f = NULL;
        for (size_t k = 0; !f && k < sizeof FLAGS / sizeof FLAGS[0]; k++)
            for (int j = 0; j < 3 && FLAGS[k].names[j]; j++)
                if (!strcmp(a, FLAGS[k].names[j])) f = &FLAGS[k];
        if (!f) {
            fprintf(stderr, "error: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (f->kind == FLAG_SWITCH) {
            *(int *)((char *)o + f->offset) = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value (see --help)\n", a);
            return -1;
        }
        if (parse_value(f, argv[++i], o)) {
            fprintf(stderr, "error: invalid value '%s' for %s (see --help for the allowed range)\n", argv[i], a);
            return -1;
        }
        if (f->generation && !o->gen_flag) o->gen_flag = a;
    }
    const int chat = o->mode && !strcmp(o->mode, "chat");
    if (o->mode && !chat && strcmp(o->mode, "generate")) {
        fprintf(stderr, "error: invalid value '%s' for -m (generate, chat)\n", o->mode);
        return -1;
    }
    if (!chat && (o->system || o->chat_template)) {
        fprintf(stderr, "error: %s is for chat (hint: add -m chat)\n", o->system ? "-y" : "--chat-template");
        return -1;
    }
    if (chat && o->prompt_file) {
        fprintf(stderr, "error: -f gives a prompt to continue, and chat reads its turns from stdin (hint: -i for "
                        "the first turn)\n");
        return -1;
    }
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "error: -i and -f both give the prompt (hint: one of them)\n");
        return -1;
    }
    // Flags that would do nothing are refused rather than ignored.
    if (o->ppl_windows && !o->ppl) {
        fprintf(stderr, "error: --ppl-windows limits a perplexity run and needs --ppl FILE\n");
        return -1;
    }
    if (o->ppl && o->gen_flag) {
        fprintf(stderr, "error: %s is for generating text, and --ppl does not generate (hint: drop %s or --ppl)\n",
                o->gen_flag, o->gen_flag);
        return -1;
    }
    RopeScaling mode;
    if (o->rope_mode) {
        if (rope_scaling_from_name(o->rope_mode, &mode)) {
            fprintf(stderr,
                    "error: invalid value '%s' for --rope-scaling (none, pi, linear, ntk, dynamic, yarn, "
                    "llama3, rerope, leaky-rerope)\n",
                    o->rope_mode);
            return -1;
        }
        o->rope.mode = (int)mode;
    }
    if (!o->model) {
        fprintf(stderr, "error: no model file given\n");
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The sampler: greedy, or temperature + top-p (nucleus, Holtzman et al. 2019).

typedef struct {
    float prob;
    int id;
} Candidate;

static unsigned long long rng_next(unsigned long long *state) { // xorshift64*
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 0x2545F4914F6CDD1DULL;
}

static float rng_float(unsigned long long *state) { return (rng_next(state) >> 40) / 16777216.0f; }

static int by_prob_desc(const void *a, const void *b) {
    float pa = ((const Candidate *)a)->prob, pb = ((const Candidate *)b)->prob;
    return (pa < pb) - (pa > pb);
}

static int sample(float *logits, int n, float temp, float top_p, Candidate *cand, unsigned long long *rng) {
    if (temp == 0) { // greedy: the most likely token; ties go to the lowest id
        int best = 0;
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    float max = logits[0], sum = 0;
    for (int i = 1; i < n; i++)
        max = logits[i] > max ? logits[i] : max;
    for (int i = 0; i < n; i++)
        sum += (logits[i] = expf((logits[i] - max) / temp));
    // Top-p: keep the most likely tokens whose probabilities add up to top_p. Tokens below
    // (1 - top_p) / (n - 1) can never be among them, so drop them before sorting.
    const float cutoff = (1.0f - top_p) / (n > 1 ? n - 1 : 1);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (logits[i] / sum >= cutoff) cand[k++] = (Candidate){logits[i] / sum, i};
    // None left: top_p < 1/n over (near-)equal probabilities, where the nucleus is the likeliest
    // token alone, or NaN logits from a damaged model. Either way, take the likeliest.
    if (k == 0) return sample(logits, n, 0, top_p, cand, rng);
    qsort(cand, k, sizeof *cand, by_prob_desc);
    float kept = 0;
    int last = k - 1;
    for (int i = 0; i < k; i++) {
        kept += cand[i].prob;
        if (kept >= top_p) {
            last = i;
            break;
        }
    }
    float r = rng_float(rng) * kept, acc = 0;
    for (int i = 0; i <= last; i++) {
        acc += cand[i].prob;
        if (r < acc) return cand[i].id;
    }
    return cand[last].id;
}

// ---------------------------------------------------------------------------------------------
// Generation

// The whole file at path, malloc'ed (not NUL-terminated), its length in *len; NULL with errno set.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static const char *plural(long n) { return n == 1 ? "" : "s"; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void emit(Tokenizer *tok, int prev, int id) {
    size_t len;
    const char *piece = tokenizer_decode_piece(tok, prev, id, &len);
    if (piece && len) fwrite(piece, 1, len, stdout);
    fflush(stdout);
}

// Does token id end the text? EOS, every other end token the checkpoint lists (Llama 3 instruct:
// <|end_of_text|>, <|eom_id|>, <|eot_id|>), and BOS, which would start another text.
static int is_end(const Config *c, int id) {
    for (int i = 0; i < c->n_end_ids; i++)
        if (id == c->end_ids[i]) return 1;
    return id == c->eos_id || id == c->bos_id;
}

// Room for `need` more tokens after position *pos. While they would pass the end of the context, a
// context shift (README, "Past the end of the context") keeps the first `keep` positions, drops
// the oldest half of the rest and moves the others down (transformer_shift). Returns 0; 1 when no
// shift can make the room (the kept positions and the new tokens alone fill the context); -1 after
// an error, in err.
static int make_room(Transformer *t, int keep, int *pos, int need, int *shifts, char *err, size_t errlen) {
    while (*pos + need > t->run.ctx) {
        const int drop = (*pos - keep) / 2;
        if (drop < 1 || keep + need > t->run.ctx) return 1;
        if (transformer_shift(t, *pos, keep, drop, err, errlen)) return -1;
        *pos -= drop;
        (*shifts)++;
    }
    return 0;
}

static int generate(Transformer *t, Tokenizer *tok, const Options *o) {
    const Config *c = &t->config;
    size_t prompt_len = o->prompt ? strlen(o->prompt) : 0;
    char *from_file = NULL;
    if (o->prompt_file && !(from_file = read_file(o->prompt_file, &prompt_len))) {
        fprintf(stderr, "error: %s: cannot read the prompt file: %s (hint: check the path given to -f)\n",
                o->prompt_file, strerror(errno));
        return 1;
    }
    int n_prompt;
    int *ids = tokenizer_encode(tok, from_file ? from_file : o->prompt ? o->prompt : "", prompt_len, 1, &n_prompt);
    free(from_file);
    if (!ids) {
        fprintf(stderr, "error: the tokenizer could not encode the prompt\n");
        return 1;
    }
    if (n_prompt == 0) { // nothing to start from: an empty prompt and no BOS token
        fprintf(stderr, "error: the prompt is empty and the tokenizer has no BOS token to start from (hint: give a "
                        "prompt with -i)\n");
        free(ids);
        return 1;
    }
    if (n_prompt > t->run.ctx) {
        fprintf(stderr,
                "error: the prompt is %d tokens, longer than the context of %d (hint: a larger --ctx "
                "or a shorter prompt)\n",
                n_prompt, t->run.ctx);
        free(ids);
        return 1;
    }
    Candidate *cand = malloc((size_t)c->vocab_size * sizeof *cand);
    if (!cand) {
        fprintf(stderr, "error: out of memory\n");
        free(ids);
        return 1;
    }
    unsigned long long rng = o->seed ? o->seed : 1;

    // Prompt: echo it, then run it through the network in blocks, all of them one sequence of
    // n_prompt tokens (as one Hugging Face forward pass over the prompt would be).
    for (int i = 0; i < n_prompt; i++)
        emit(tok, i ? ids[i - 1] : -1, ids[i]);
    double t0 = now();
    float *logits = NULL;
    char err[300];
    int status = 0;
    for (int b = 0; b < n_prompt && !status; b += t->run.max_batch) {
        int len = n_prompt - b < t->run.max_batch ? n_prompt - b : t->run.max_batch;
        status = transformer_forward(t, ids + b, len, b, n_prompt, 0, &logits, err, sizeof err);
    }
    double t1 = now();

    // Decode: sample, print, feed back, until n_predict tokens or an end of text. When the context
    // is full, a context shift (README, "Past the end of the context") keeps the first --keep
    // positions, drops the oldest half of the rest and moves the others down to make room.
    int pos = n_prompt, prev = ids[n_prompt - 1], generated = 0, steps = 0, shifts = 0;
    const char *stop = NULL;
    while (!status && generated < o->n_predict) {
        int next = sample(logits, c->vocab_size, (float)o->temp, (float)o->top_p, cand, &rng);
        if (is_end(c, next)) {
            stop = "end of text";
            break;
        }
        emit(tok, prev, next);
        generated++;
        prev = next;
        if (generated == o->n_predict) break;
        const int room = make_room(t, o->keep, &pos, 1, &shifts, err, sizeof err);
        if (room > 0) {
            stop = "context full (hint: a larger --ctx or a smaller --keep)";
            break;
        }
        status = room < 0 || transformer_forward(t, &next, 1, pos, pos + 1, 0, &logits, err, sizeof err);
        pos++, steps++;
    }
    double t2 = now();
    if (status) {
        fprintf(stderr, "\nerror: %s\n", err);
        free(cand);
        free(ids);
        return 1;
    }
    // The first token came from the prompt's logits: generation's speed counts forward passes.
    printf("\n");
    fflush(stdout);
    char shifted[80] = "";
    if (shifts)
        snprintf(shifted, sizeof shifted, " | context shifts: %d (kept %d, dropped %d each)", shifts, o->keep,
                 (t->run.ctx - o->keep) / 2);
    fprintf(stderr,
            "\nprompt: %d token%s in %.3f s (%.1f tok/s) | generation: %d token%s, %d decode step%s in %.3f s "
            "(%.1f tok/s) | threads %d%s%s%s\n",
            n_prompt, plural(n_prompt), t1 - t0, n_prompt / (t1 - t0), generated, plural(generated), steps,
            plural(steps), t2 - t1, steps ? steps / (t2 - t1) : 0.0, t->state.n_threads, shifted,
            stop ? " | stopped: " : "", stop ? stop : "");
    free(cand);
    free(ids);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Chat: llama2.c's interface (-m chat, -y system prompt), the user's turns read from stdin one line
// each, the assistant's replies streamed to stdout. The KV cache is kept across turns: each turn
// feeds only its new tokens (the template's text around the user's line), after the reply and the
// end token that closed it.
//
// A chat model was trained on one template. Hugging Face writes it as Jinja in
// tokenizer_config.json (chat_template); this program does not run Jinja, it recognises which of
// five known templates the file holds by a string only that template has, and renders it in C:
//   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] REPLY </s><s>[INST] USER [/INST]
//   llama3   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYSTEM<|eot_id|>
//            <|start_header_id|>user<|end_header_id|>\n\nUSER<|eot_id|><|start_header_id|>assistant...
//   zephyr   <|system|>\nSYSTEM</s>\n<|user|>\nUSER</s>\n<|assistant|>\nREPLY</s>\n  (TinyLlama-Chat)
//   chatml   <|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n<|im_start|>assistant\n
//   mistral  <s>[INST] USER [/INST]REPLY</s>[INST] USER [/INST]    (no system role)
// "<s>" and "</s>" are the checkpoint's BOS and EOS ids, not text: a SentencePiece tokenizer would
// spell them out. The other markers are added tokens of their tokenizer.json, which bpe.c matches.

typedef enum { CHAT_LLAMA2, CHAT_LLAMA3, CHAT_ZEPHYR, CHAT_CHATML, CHAT_MISTRAL, CHAT_COUNT } ChatTemplate;
static const char *const CHAT_NAMES[CHAT_COUNT] = {"llama2", "llama3", "zephyr", "chatml", "mistral"};
// The string that tells each template apart, in the order they are tried (llama2's has [INST] too).
static const char *const CHAT_MARKS[CHAT_COUNT] = {"<<SYS>>", "<|start_header_id|>", "<|user|>", "<|im_start|>",
                                                   "[INST]"};

// The template of tokenizer_config.json in dir (the tokenizer's directory): its index, or -1 after
// an error (reported).
static int chat_template_of(const char *tok_path) {
    const char *slash = strrchr(tok_path, '/');
    char path[4096];
    snprintf(path, sizeof path, "%.*stokenizer_config.json", slash ? (int)(slash - tok_path + 1) : 0, tok_path);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        fprintf(stderr,
                "error: %s: cannot read it for the chat template: %s (hint: --chat-template llama2|llama3|"
                "zephyr|chatml|mistral)\n",
                path, strerror(errno));
        return -1;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsArray(tmpl)) { // [{"name": "default", "template": ...}, ...]
        const cJSON *e = tmpl->child;
        while (e && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "name")))
            e = e->next;
        for (const cJSON *x = tmpl->child; x; x = x->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default")) e = x;
        }
        tmpl = e ? cJSON_GetObjectItemCaseSensitive(e, "template") : NULL;
    }
    int found = -1;
    for (int k = 0; cJSON_IsString(tmpl) && found < 0 && k < CHAT_COUNT; k++)
        if (strstr(tmpl->valuestring, CHAT_MARKS[k])) found = k;
    if (found < 0)
        fprintf(stderr,
                "error: %s: %s (hint: --chat-template llama2|llama3|zephyr|chatml|mistral names the "
                "model's template)\n",
                path,
                !root                   ? "not valid JSON"
                : !cJSON_IsString(tmpl) ? "no chat_template"
                                        : "the chat_template is none "
                                          "this program knows");
    cJSON_Delete(root);
    return found;
}

// The templates of SentencePiece models, whose "<s>" and "</s>" are BOS and EOS.
static int chat_sentencepiece(ChatTemplate k) { return k == CHAT_LLAMA2 || k == CHAT_ZEPHYR || k == CHAT_MISTRAL; }

// Append the ids of text to *ids; with markers, "<s>" and "</s>" as the BOS and EOS ids (a
// tokenizer.json matches its own special tokens). Returns 0, -1 if the tokenizer failed or memory
// ran out.
static int chat_encode(Tokenizer *tok, const Config *c, int markers, const char *text, int **ids, int *n, int *cap) {
    while (*text) {
        const char *bos = markers ? strstr(text, "<s>") : NULL, *eos = markers ? strstr(text, "</s>") : NULL;
        const char *mark = bos && (!eos || bos < eos) ? bos : eos;
        size_t len = mark ? (size_t)(mark - text) : strlen(text);
        int m = 0, *part = len ? tokenizer_encode(tok, text, len, 0, &m) : NULL;
        if (len && !part) return -1;
        if (*n + m + 1 > *cap) {
            int *bigger = realloc(*ids, (size_t)(*cap = 2 * (*n + m + 1)) * sizeof **ids);
            if (!bigger) {
                free(part);
                return -1;
            }
            *ids = bigger;
        }
        if (m) memcpy(*ids + *n, part, (size_t)m * sizeof *part);
        *n += m;
        free(part);
        if (!mark) break;
        (*ids)[(*n)++] = mark == bos ? c->bos_id : c->eos_id;
        text = mark + (mark == bos ? 3 : 4);
    }
    return 0;
}

// The text of the user's turn (and before it, on the first turn, the system prompt), up to where
// the model writes its reply. first: the first turn of the conversation.
static char *chat_render(ChatTemplate k, int first, const char *system, const char *user) {
    const char *sys = first ? system : NULL; // the system prompt opens the conversation, once
    size_t size = (sys ? strlen(sys) : 0) + strlen(user) + 256;
    char *out = malloc(size);
    if (!out) return NULL;
    switch (k) {
    case CHAT_LLAMA2:
        if (sys)
            snprintf(out, size, "<s>[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s [/INST]", sys, user);
        else
            snprintf(out, size, "<s>[INST] %s [/INST]", user);
        break;
    case CHAT_LLAMA3:
        snprintf(out, size,
                 "%s%s%s%s<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n",
                 first ? "<|begin_of_text|>" : "", sys ? "<|start_header_id|>system<|end_header_id|>\n\n" : "",
                 sys ? sys : "", sys ? "<|eot_id|>" : "", user);
        break;
    case CHAT_ZEPHYR:
        snprintf(out, size, "%s%s%s%s<|user|>\n%s</s>\n<|assistant|>\n", first ? "" : "\n", sys ? "<|system|>\n" : "",
                 sys ? sys : "", sys ? "</s>\n" : "", user);
        break;
    case CHAT_CHATML:
        snprintf(out, size, "%s%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", first ? "" : "\n",
                 sys ? "<|im_start|>system\n" : "", sys ? sys : "", sys ? "<|im_end|>\n" : "", user);
        break;
    default: // CHAT_MISTRAL
        snprintf(out, size, "%s[INST] %s [/INST]", first ? "<s>" : "", user);
        break;
    }
    return out;
}

// What closes the assistant's turn in the template, fed when a reply ends without it (-n reached).
static const char *chat_close(ChatTemplate k) {
    return k == CHAT_LLAMA3 ? "<|eot_id|>" : k == CHAT_CHATML ? "<|im_end|>" : k == CHAT_LLAMA2 ? " </s>" : "</s>";
}

#define KEEP_FILLS "the context is full and --keep leaves nothing to drop (hint: a smaller --keep or a larger --ctx)"

static int chat(Transformer *t, Tokenizer *tok, const char *tok_path, const Options *o) {
    const Config *c = &t->config;
    int k = -1;
    if (o->chat_template) {
        for (int i = 0; i < CHAT_COUNT; i++)
            if (!strcmp(o->chat_template, CHAT_NAMES[i])) k = i;
        if (k < 0) {
            fprintf(stderr,
                    "error: invalid value '%s' for --chat-template (llama2, llama3, zephyr, chatml, "
                    "mistral)\n",
                    o->chat_template);
            return 2;
        }
    } else if ((k = chat_template_of(tok_path)) < 0) {
        return 1;
    }
    if (k == CHAT_MISTRAL && o->system) {
        fprintf(stderr, "error: -y: the mistral template has no system prompt (hint: put it in the first turn)\n");
        return 2;
    }
    fprintf(stderr, "chat: template %s%s\n", CHAT_NAMES[k], o->chat_template ? " (--chat-template)" : "");
    Candidate *cand = malloc((size_t)c->vocab_size * sizeof *cand);
    unsigned long long rng = o->seed ? o->seed : 1;
    char *line = NULL, err[300];
    size_t line_cap = 0;
    int *ids = NULL, cap = 0, pos = 0, shifts = 0, status = cand ? 0 : 1;
    for (int turn = 0; !status; turn++) {
        const char *user = turn == 0 && o->prompt ? o->prompt : NULL;
        if (!user) {
            ssize_t got = getline(&line, &line_cap, stdin);
            if (got < 0) break; // end of input: the conversation is over
            if (got && line[got - 1] == '\n') line[got - 1] = 0;
            user = line;
        }
        char *text = chat_render((ChatTemplate)k, turn == 0, o->system, user);
        int n = 0;
        if (!text || chat_encode(tok, c, chat_sentencepiece((ChatTemplate)k), text, &ids, &n, &cap)) status = 1;
        free(text);
        // A full context shifts (make_room), as in generate: the conversation goes on, its oldest
        // turns dropped (all but the first --keep positions).
        const int room = status ? 0 : make_room(t, o->keep, &pos, n, &shifts, err, sizeof err);
        if (status || room) {
            if (status) fprintf(stderr, "error: could not encode the turn\n");
            if (room > 0)
                fprintf(stderr,
                        "error: the turn is %d tokens, more than the context of %d holds after the first %d kept "
                        "(hint: a larger --ctx or a smaller --keep)\n",
                        n, t->run.ctx, o->keep);
            if (room < 0) fprintf(stderr, "error: %s\n", err);
            status = 1;
            break;
        }
        float *logits = NULL;
        for (int b = 0; b < n && !status; b += t->run.max_batch) { // the turn, in blocks
            int len = n - b < t->run.max_batch ? n - b : t->run.max_batch;
            status = transformer_forward(t, ids + b, len, pos + b, pos + n, 0, &logits, err, sizeof err);
        }
        pos += n;
        int prev = ids[n - 1], generated = 0, ended = 0;
        while (!status && generated < o->n_predict) { // the reply
            int next = sample(logits, c->vocab_size, (float)o->temp, (float)o->top_p, cand, &rng);
            ended = is_end(c, next);
            if (!ended) emit(tok, prev, next);
            const int room = make_room(t, o->keep, &pos, 1, &shifts, err, sizeof err);
            if (room > 0) snprintf(err, sizeof err, "%s", KEEP_FILLS);
            status = room != 0 || transformer_forward(t, &next, 1, pos, pos + 1, 0, &logits, err, sizeof err);
            pos++, generated++, prev = next;
            if (ended) break; // the end token is in the cache, as the template has it after the reply
        }
        printf("\n");
        fflush(stdout);
        if (!status && !ended) { // cut by -n: close the turn as the template would
            n = 0;
            const int bad = chat_encode(tok, c, chat_sentencepiece((ChatTemplate)k), chat_close((ChatTemplate)k),
                                        &ids, &n, &cap);
            const int room = bad ? 0 : make_room(t, o->keep, &pos, n, &shifts, err, sizeof err);
            if (bad) snprintf(err, sizeof err, "could not encode the end of the turn");
            if (room > 0) snprintf(err, sizeof err, "%s", KEEP_FILLS);
            status = bad || room != 0;
            for (int i = 0; i < n && !status; i++, pos++)
                status = transformer_forward(t, ids + i, 1, pos, pos + 1, 0, &logits, err, sizeof err);
        }
        if (status) fprintf(stderr, "error: %s\n", err);
    }
    if (shifts)
        fprintf(stderr, "chat: context shifts: %d (each kept the first %d positions and dropped the oldest half of "
                        "the rest)\n", shifts, o->keep);
    free(line);
    free(ids);
    free(cand);
    return status;
}

// ---------------------------------------------------------------------------------------------
// Perplexity: how surprised the model is by real text, position by position.
//
// The text (BOS first) is cut into consecutive windows of ctx tokens; each window starts at
// position 0 with an empty cache, and each of its tokens t = 0 .. ctx-2 predicts token t+1. The
// negative log-likelihood -log p(token t+1 | tokens 0..t) is summed per bucket of the position t:
// [0, L), [L, 2L), [2L, 4L), ... with L the trained context, so the table shows where a scaling
// mode stops extrapolating. perplexity = exp(mean NLL).

#define MAX_BUCKETS 32

static int bucket_of(int pos, int L) {
    int b = 0;
    for (long edge = L; pos >= edge && b < MAX_BUCKETS - 1; edge *= 2)
        b++;
    return b;
}

static int perplexity(Transformer *t, Tokenizer *tok, const Options *o) {
    const int V = t->config.vocab_size, N = t->run.ctx, L = t->rope.p.orig_ctx;
    size_t len;
    char *text = read_file(o->ppl, &len);
    if (!text) {
        fprintf(stderr, "error: %s: cannot read: %s\n", o->ppl, strerror(errno));
        return 1;
    }
    int n_tokens;
    int *ids = tokenizer_encode(tok, text, len, 1, &n_tokens);
    free(text);
    if (!ids) {
        fprintf(stderr, "error: %s: the tokenizer could not encode the text\n", o->ppl);
        return 1;
    }
    int windows = n_tokens / N;
    if (o->ppl_windows && o->ppl_windows < windows) windows = o->ppl_windows;
    if (windows < 1 || N < 2) {
        fprintf(stderr,
                "error: %s is %d tokens, less than one window of --ctx %d (hint: a smaller --ctx or a "
                "longer text)\n",
                o->ppl, n_tokens, N);
        free(ids);
        return 1;
    }
    fprintf(stderr, "perplexity: %d token%s, %d window%s of %d\n", n_tokens, plural(n_tokens), windows, plural(windows),
            N);

    double nll[MAX_BUCKETS] = {0};
    long count[MAX_BUCKETS] = {0};
    const int tty = isatty(fileno(stderr)); // a progress bar on a terminal, a line per window otherwise
    double t0 = now();
    for (int w = 0; w < windows; w++) {
        const int *win = ids + (size_t)w * N;
        for (int b = 0; b < N; b += t->run.max_batch) { // one sequence of N tokens, as one HF forward pass
            int n = N - b < t->run.max_batch ? N - b : t->run.max_batch;
            float *logits;
            char err[300];
            if (transformer_forward(t, win + b, n, b, N, 1, &logits, err, sizeof err)) {
                fprintf(stderr, "\nerror: %s\n", err);
                free(ids);
                return 1;
            }
            for (int i = 0; i < n && b + i < N - 1; i++) {
                const float *row = logits + (size_t)i * V;
                float max = row[0];
                for (int v = 1; v < V; v++)
                    max = row[v] > max ? row[v] : max;
                double sum = 0;
                for (int v = 0; v < V; v++)
                    sum += exp((double)row[v] - max);
                int k = bucket_of(b + i, L);
                nll[k] += max + log(sum) - row[win[b + i + 1]]; // -log softmax(row)[next token]
                count[k]++;
            }
            if (tty) fprintf(stderr, "\r[%d/%d] %3d%%", w + 1, windows, (int)(100.0 * (b + n) / N));
        }
        if (!tty) fprintf(stderr, "window %d/%d\n", w + 1, windows);
    }
    double secs = now() - t0;
    fprintf(stderr, "%s%d window%s in %.2f s (%.1f tok/s) | threads %d\n", tty ? "\r" : "", windows, plural(windows),
            secs, windows * (double)N / secs, t->state.n_threads);

    double total = 0;
    long total_count = 0;
    for (int k = 0; k < MAX_BUCKETS; k++) {
        total += nll[k];
        total_count += count[k];
    }
    printf("perplexity: %.6f\n", exp(total / total_count));
    printf("%-20s %10s %10s %12s\n", "positions", "tokens", "mean NLL", "perplexity");
    for (int k = 0; k < MAX_BUCKETS; k++) {
        if (!count[k]) continue;
        long lo = k ? (long)L << (k - 1) : 0, hi = (long)L << k;
        char range[48];
        snprintf(range, sizeof range, "[%ld, %ld)", lo, hi);
        printf("%-20s %10ld %10.6f %12.6f\n", range, count[k], nll[k] / count[k], exp(nll[k] / count[k]));
    }
    free(ids);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// main

// What the kernel says could still be allocated without swapping (MemAvailable), in bytes.
static size_t available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb) return (size_t)kb * 1024;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
}

// The banner's first two lines, before anything is allocated: the model, and what the run will
// allocate (the KV cache and the activations; the weights are mmapped) against what is available.
static void banner_memory(const Transformer *t, const RunConfig *run, const char *path) {
    const Config *c = &t->config;
    fprintf(stderr,
            "model: %s (%s, %s): dim %d, hidden %d, %d layers, %d heads / %d kv heads, head_dim %d, "
            "vocab %d\n",
            path,
            c->legacy      ? "llama2.c legacy"
            : c->n_end_ids ? "lrun v2"
                           : "lrun v1",
            dtype_name(c->dtype), c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
            c->vocab_size);
    int overflow;
    const size_t kv = transformer_kv_bytes(c, run), all = transformer_state_bytes(c, run, max_threads(), &overflow);
    char supports[80] = ""; // a checkpoint whose rope_scaling stretches it past the trained context
    if (c->max_pos != c->rope.orig_ctx)
        snprintf(supports, sizeof supports, " (supports %d with its scaling)", c->max_pos);
    fprintf(stderr,
            "context: trained %d%s, requested %d | weights %.1f MiB (mmapped) | KV cache %.2f MiB (keys %s%s, "
            "values %s), activations %.2f MiB, of %.2f GiB available | kernels %s\n",
            c->rope.orig_ctx, supports, run->ctx, t->weight_bytes / 1048576.0, kv / 1048576.0,
            dtype_name(run->cache_k), rope_keys_unrotated(&run->rope) ? " un-rotated" : "", dtype_name(run->cache_v),
            (all - kv) / 1048576.0, available_memory() / 1073741824.0, kernels_isa());
}

// The banner's RoPE line, once the tables are made.
static void banner_rope(const Transformer *t) {
    const Rope *r = &t->rope;
    fprintf(stderr, "rope: %s, base %g", rope_scaling_name(r->p.mode), r->p.base);
    if (rope_is_dynamic(r)) { // the base follows the length: show where it ends up
        double inv_freq[r->p.head_dim / 2], mscale, at_ctx;
        rope_inv_freq(&r->p, t->run.ctx, inv_freq, &mscale, &at_ctx);
        fprintf(stderr, " (past L it grows with the length, to %g at %d)", at_ctx, t->run.ctx);
    } else if (r->eff_base != r->p.base) {
        fprintf(stderr, " (effective %g)", r->eff_base);
    }
    if (r->p.mode == ROPE_SCALING_REROPE)
        fprintf(stderr, ", window W = %d (distances past W scored as W)", r->p.window);
    else if (r->p.mode == ROPE_SCALING_LEAKY_REROPE)
        fprintf(stderr, ", window W = %d, K = %g (distance r past W scored as W + (r - W) / K)", r->p.window,
                r->p.factor);
    if (!rope_is_rerope(&r->p)) fprintf(stderr, ", factor %g", r->p.factor);
    fprintf(stderr, ", trained context L = %d, attention factor %g%s\n", r->p.orig_ctx, r->mscale,
            t->run.attn_logn ? ", log-n: queries past L times ln(m + 1) / ln(L)" : "");
}

// The run's parameters from the flags and the checkpoint; 0, or 2 after a usage error, 1 after
// another error (both reported).
static int configure(const Transformer *t, const Options *o, RunConfig *run) {
    const Config *c = &t->config;
    char err[300];
    // Default context: the one the model was trained at, L (not the largest its scaling supports).
    *run = (RunConfig){.ctx = o->ctx ? o->ctx : c->rope.orig_ctx, .max_batch = o->batch, .attn_logn = o->attn_logn};
    const char *types[2] = {o->cache_k ? o->cache_k : "f32", o->cache_v ? o->cache_v : "f32"};
    DType *set[2] = {&run->cache_k, &run->cache_v};
    for (int i = 0; i < 2; i++) {
        // a cache type at all (with a head_dim q8_0 accepts); this model's head_dim is checked below
        if (dtype_from_name(types[i], set[i]) || !kv_type_ok(*set[i], Q8_BLOCK)) {
            fprintf(stderr, "error: invalid KV cache type '%s' for %s (hint: f32, f16 or q8_0)\n", types[i],
                    i ? "--cache-type-v" : "--cache-type-k");
            return 2;
        }
        if (!kv_type_ok(*set[i], c->head_dim)) {
            fprintf(stderr, "error: %s q8_0 needs a head_dim that is a multiple of 32, and this model's is %d "
                            "(hint: f16)\n", i ? "--cache-type-v" : "--cache-type-k", c->head_dim);
            return 2;
        }
    }
    const int mode = o->rope.mode >= 0 ? o->rope.mode : (int)c->rope.mode;
    if (mode == ROPE_SCALING_NONE && o->rope.factor > 0) {
        fprintf(stderr,
                "error: --rope-factor needs a scaling mode (hint: --rope-scaling pi|ntk|dynamic|yarn|llama3)\n");
        return 2;
    }
    if (mode != ROPE_SCALING_NTK && o->rope.alpha > 0) {
        fprintf(stderr, "error: --rope-alpha is used only by --rope-scaling ntk\n");
        return 2;
    }
    if (mode != ROPE_SCALING_REROPE && mode != ROPE_SCALING_LEAKY_REROPE && o->rope.window > 0) {
        fprintf(stderr, "error: --rope-window is used only by --rope-scaling rerope and leaky-rerope\n");
        return 2;
    }
    if (mode == ROPE_SCALING_REROPE && o->rope.factor > 0) {
        fprintf(stderr, "error: rerope has no --rope-factor: every distance past the window is scored as the "
                        "window (hint: --rope-scaling leaky-rerope --rope-factor K lets them grow at 1/K)\n");
        return 2;
    }
    if (mode == ROPE_SCALING_LEAKY_REROPE && o->rope.factor == 1) {
        fprintf(stderr, "error: leaky-rerope with --rope-factor 1 is plain RoPE (hint: a factor K > 1, or "
                        "--rope-scaling none)\n");
        return 2;
    }
    if (rope_params_resolve(&run->rope, &c->rope, run->ctx, &o->rope, err, sizeof err)) {
        fprintf(stderr, "error: %s (hint: see --help for the RoPE flags)\n", err);
        return 2;
    }
    int overflow;
    size_t bytes = transformer_state_bytes(c, run, max_threads(), &overflow), avail = available_memory();
    if (overflow || bytes > avail) {
        const int f32_cache = run->cache_k == DTYPE_F32 && run->cache_v == DTYPE_F32;
        fprintf(stderr,
                "error: --ctx %d needs %.2f GiB for the KV cache and activations, more than the %.2f GiB "
                "of memory available (hint: a smaller --ctx%s)\n",
                run->ctx, overflow ? INFINITY : bytes / 1073741824.0, avail / 1073741824.0,
                f32_cache ? ", or -ctk f16 -ctv f16 for a cache of half the size (q8_0: 0.27x)" : "");
        return 1;
    }
    return 0;
}

// The tokenizer in the model's directory: tokenizer.model (SentencePiece) if there is one, else
// tokenizer.json (byte-level BPE), else tokenizer.model again, for the error message.
static char *default_tokenizer(const char *model) {
    const char *slash = strrchr(model, '/');
    size_t dir = slash ? (size_t)(slash - model + 1) : 0;
    char *path = malloc(dir + sizeof "tokenizer.model");
    if (path) {
        memcpy(path, model, dir);
        strcpy(path + dir, "tokenizer.model");
        if (access(path, F_OK) != 0) {
            strcpy(path + dir, "tokenizer.json");
            if (access(path, F_OK) != 0) strcpy(path + dir, "tokenizer.model");
        }
    }
    return path;
}

int main(int argc, char **argv) {
    Options o;
    int parsed = parse_args(argc, argv, &o);
    if (parsed) {
        if (parsed < 0) usage(stderr);
        return parsed < 0 ? 2 : 0;
    }
#ifdef _OPENMP
    if (o.threads) omp_set_num_threads(o.threads);
#endif

    char err[600];
    Transformer t;
    if (transformer_load(&t, o.model, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    const Config *c = &t.config;
    char *tok_default = o.tokenizer ? NULL : default_tokenizer(o.model);
    const char *tok_path = o.tokenizer ? o.tokenizer : tok_default;
    Tokenizer *tok = tok_path ? tokenizer_load(tok_path, err, sizeof err) : NULL;
    if (!tok) {
        fprintf(stderr, "error: %s\n", tok_path ? err : "out of memory");
        free(tok_default);
        transformer_free(&t);
        return 1;
    }
    if (tokenizer_vocab_size(tok) != c->vocab_size) {
        fprintf(stderr,
                "error: %s has %d tokens but the model's vocabulary is %d (hint: pass the model's own "
                "tokenizer with -z)\n",
                tok_path, tokenizer_vocab_size(tok), c->vocab_size);
        tokenizer_free(tok);
        free(tok_default);
        transformer_free(&t);
        return 1;
    }

    RunConfig run;
    int status = configure(&t, &o, &run);
    if (status == 0) banner_memory(&t, &run, o.model);
    PrepareStatus prepared = status ? PREPARE_OK : transformer_prepare(&t, &run, err, sizeof err);
    if (prepared != PREPARE_OK) {
        fprintf(stderr, "error: %s%s\n", err, prepared == PREPARE_BAD_ROPE ? "" : " (hint: a smaller --ctx)");
        status = 1;
    } else if (status == 0) {
        banner_rope(&t);
        if (run.ctx > run.rope.orig_ctx && run.rope.mode == ROPE_SCALING_NONE)
            fprintf(stderr,
                    "warning: --ctx %d is beyond the %d tokens the model was trained on, with no RoPE "
                    "scaling: expect the text to fall apart past %d (hint: --rope-scaling "
                    "pi|ntk|dynamic|yarn|llama3)\n",
                    run.ctx, run.rope.orig_ctx, run.rope.orig_ctx);
        if (run.rope.mode == ROPE_SCALING_PI && run.rope.factor * run.rope.orig_ctx < run.ctx)
            fprintf(stderr,
                    "warning: --rope-factor %g maps only %g positions onto the %d trained ones, fewer than --ctx "
                    "%d: positions past %g are extrapolated (hint: --rope-factor %g, or leave it out: the "
                    "default is ctx / L)\n",
                    run.rope.factor, run.rope.factor * run.rope.orig_ctx, run.rope.orig_ctx, run.ctx,
                    run.rope.factor * run.rope.orig_ctx, (double)run.ctx / run.rope.orig_ctx);
        status = o.ppl                               ? perplexity(&t, tok, &o)
                 : o.mode && !strcmp(o.mode, "chat") ? chat(&t, tok, tok_path, &o)
                                                     : generate(&t, tok, &o);
    }
    tokenizer_free(tok);
    free(tok_default);
    transformer_free(&t);
    return status;
}
