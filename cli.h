// cli.h - ./run's command line: the options, their flags and ranges, and --help.
//
// run.c calls parse_args once; fuzz/fuzz_cli.c feeds it arbitrary command lines. Everything that
// can be checked without the model is checked here, so a mistake is reported before a long load.
#ifndef CLI_H
#define CLI_H

#include <stdio.h>

#include "rope.h"

#define MAX_REVERSE_PROMPTS 16

// The largest --rope-factor and --grp-attn-n the parser takes; run.c offers no larger one in a hint.
#define ROPE_FACTOR_MAX 1e6
#define ROPE_GROUP_MAX (1 << 24)

typedef struct {
    const char *model;
    const char *tokenizer; // -z; default: tokenizer.model, else tokenizer.json, beside the model
    const char *prompt;
    const char *prompt_file; // -f: the prompt is this file's bytes
    const char *prompt_cache; // --prompt-cache FILE: the prompt's keys and values kept there (promptcache.h)
    int n_predict;           // tokens to generate; -1: until an end token
    int keep;                // --keep: positions a context shift keeps at the start; -1: 4 (run.c)
    double temp;             // 0 = greedy
    double top_p, min_p, repeat_penalty;
    int top_k, repeat_last_n;      // repeat_last_n -1: the whole context
    long seed;                     // -1: not given (run.c draws one)
    int ctx;                       // 0 = the trained context
    int threads;                   // 0 = OpenMP's default
    int batch;                     // prompt tokens per forward call
    const char *ppl;               // --ppl FILE: evaluate perplexity instead of generating
    int ppl_windows;               // 0 = all windows
    const char *rope_mode;         // --rope-scaling; NULL = the checkpoint's own
    const char *cache_k, *cache_v; // -ctk, -ctv: KV cache types; NULL = f32
    int attn_logn;                 // --attn-logn (a switch)
    int swa_full;                  // --swa-full (a switch): sliding layers keep every position
    int f16_as_bf16;               // --f16-as-bf16 (a switch): f16 weights multiplied as bf16
    int verbose_prompt;            // --verbose-prompt (a switch): the prompt's ids on stderr
    int check_tensors;             // --check-tensors (a switch): every weight finite, checked at load
    RopeOverrides rope;
    const char *reverse[MAX_REVERSE_PROMPTS]; // -r: stop when the output shows one of these
    int n_reverse;
    const char *gen_flag;      // the first generation-only flag given, which --ppl refuses
    const char *temp_as_threads; // -t N with a whole N >= 2 (llama.cpp's thread count?): N as typed
    const char *mode;          // -m: "generate" (default) or "chat"
    const char *system;        // -y: chat's system prompt
    const char *chat_template; // --chat-template NAME; NULL: recognised from tokenizer_config.json
} Options;

// The chat templates run.c renders, by the names --chat-template takes.
#define CHAT_TEMPLATE_NAMES \
    "llama2 | llama3 | zephyr | chatml | qwen3 | mistral | phi3 | phi4-mini | gemma | olmo2 | exaone | glm4 | granite"

// Returns 0 to run, 1 after --help or --version (printed on stdout), -1 after a usage error
// (reported on stderr, with a pointer to --help). A successful parse prints nothing: run.c may start
// itself again (its wait policy), and its warnings (cli_warn) are printed once, by the last start.
int parse_args(int argc, char **argv, Options *o);

// The warnings of a command line that parsed: a run that goes ahead but maybe not as meant.
void cli_warn(const Options *o);

void usage(FILE *f);

// An explicit --keep must leave positions for a context shift to drop in a context of ctx: 0, or
// -1 after a usage error (reported). parse_args checks it against an explicit --ctx, run.c against
// the trained context when there is none.
int check_keep(const Options *o, int ctx);

#endif
