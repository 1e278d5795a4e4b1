// cli.c - ./run's flags: one table (FLAGS) that the parser, the range checks and --help share.
//
// The short flags are llama2.c's (-t temperature, -p top-p, -i prompt, -m mode, -y system prompt)
// and stay; the long ones are llama.cpp's where it has the same thing (--temp, --top-k, --ctx-size,
// --reverse-prompt ...). A llama.cpp user's reflex that means something else here (-t 4, -p TEXT,
// -m MODEL) or does not exist (-ngl) gets an error or warning that names the flag to use.
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "kernels.h"

// The program's version, raised by hand when what a user sees changes (flags, output, file format).
#define LRUN_VERSION "0.9.0"

// What kind of value a flag takes. FLAG_SWITCH takes none (the flag alone sets an int to 1);
// FLAG_LIST is text that may be given several times (-r).
typedef enum { FLAG_TEXT, FLAG_INT, FLAG_LONG, FLAG_REAL, FLAG_SWITCH, FLAG_LIST } FlagKind;

typedef struct {
    const char *names[3];
    FlagKind kind;
    size_t offset; // of the field in Options
    double lo, hi; // the allowed range [lo, hi], (lo, hi] when open; usage() prints the same
    int open;
    int generation; // 1: used only when generating text (refused with --ppl)
} Flag;

#define MAX_INT (1 << 30)

static const Flag FLAGS[] = {
    {{"-i", "--prompt"}, FLAG_TEXT, offsetof(Options, prompt), 0, 0, 0, 1},
    {{"-f", "--file"}, FLAG_TEXT, offsetof(Options, prompt_file), 0, 0, 0, 1},
    {{"--prompt-cache"}, FLAG_TEXT, offsetof(Options, prompt_cache), 0, 0, 0, 1},
    {{"-z", "--tokenizer"}, FLAG_TEXT, offsetof(Options, tokenizer), 0, 0, 0, 0},
    {{"-n", "--n-predict"}, FLAG_INT, offsetof(Options, n_predict), -1, MAX_INT, 0, 1},
    {{"--keep"}, FLAG_INT, offsetof(Options, keep), 0, 1 << 24, 0, 1},
    {{"-r", "--reverse-prompt"}, FLAG_LIST, offsetof(Options, reverse), 0, 0, 0, 1},
    {{"--verbose-prompt"}, FLAG_SWITCH, offsetof(Options, verbose_prompt), 0, 0, 0, 1},
    {{"-t", "--temp"}, FLAG_REAL, offsetof(Options, temp), 0, 1e6, 0, 1},
    {{"--top-k"}, FLAG_INT, offsetof(Options, top_k), 0, MAX_INT, 0, 1},
    {{"-p", "--top-p"}, FLAG_REAL, offsetof(Options, top_p), 0, 1, 1, 1},
    {{"--min-p"}, FLAG_REAL, offsetof(Options, min_p), 0, 1, 0, 1},
    {{"--repeat-penalty"}, FLAG_REAL, offsetof(Options, repeat_penalty), 0, 1e6, 1, 1},
    {{"--repeat-last-n"}, FLAG_INT, offsetof(Options, repeat_last_n), -1, MAX_INT, 0, 1},
    {{"-s", "--seed"}, FLAG_LONG, offsetof(Options, seed), -1, 9e18, 0, 1}, // -1: random, as llama.cpp
    {{"-c", "--ctx", "--ctx-size"}, FLAG_INT, offsetof(Options, ctx), 1, 1 << 24, 0, 0},
    {{"--threads"}, FLAG_INT, offsetof(Options, threads), 1, 1024, 0, 0},
    {{"-b", "--batch-size"}, FLAG_INT, offsetof(Options, batch), 1, 4096, 0, 0},
    {{"-ctk", "--cache-type-k"}, FLAG_TEXT, offsetof(Options, cache_k), 0, 0, 0, 0},
    {{"-ctv", "--cache-type-v"}, FLAG_TEXT, offsetof(Options, cache_v), 0, 0, 0, 0},
    {{"--f16-as-bf16"}, FLAG_SWITCH, offsetof(Options, f16_as_bf16), 0, 0, 0, 0},
    {{"--check-tensors"}, FLAG_SWITCH, offsetof(Options, check_tensors), 0, 0, 0, 0},
    {{"--ppl"}, FLAG_TEXT, offsetof(Options, ppl), 0, 0, 0, 0},
    {{"--ppl-windows"}, FLAG_INT, offsetof(Options, ppl_windows), 1, MAX_INT, 0, 0},
    {{"--rope-scaling"}, FLAG_TEXT, offsetof(Options, rope_mode), 0, 0, 0, 0},
    {{"--rope-factor", "--rope-scale"}, FLAG_REAL, offsetof(Options, rope.factor), 1, ROPE_FACTOR_MAX, 0, 0},
    {{"--rope-base", "--rope-freq-base"}, FLAG_REAL, offsetof(Options, rope.base), 0, 1e300, 1, 0},
    {{"--rope-alpha"}, FLAG_REAL, offsetof(Options, rope.alpha), 1, 1e6, 0, 0},
    {{"--rope-window", "--grp-attn-w", "-gaw"}, FLAG_INT, offsetof(Options, rope.window), 1, 1 << 24, 0, 0},
    {{"--grp-attn-n", "-gan"}, FLAG_INT, offsetof(Options, rope.group), 1, ROPE_GROUP_MAX, 0, 0},
    {{"--dca-chunk"}, FLAG_INT, offsetof(Options, rope.chunk), 2, 1 << 24, 0, 0},
    {{"--attn-logn"}, FLAG_SWITCH, offsetof(Options, attn_logn), 0, 0, 0, 0},
    {{"--swa-full"}, FLAG_SWITCH, offsetof(Options, swa_full), 0, 0, 0, 0},
    {{"-m", "--mode"}, FLAG_TEXT, offsetof(Options, mode), 0, 0, 0, 1},
    {{"-y", "--system"}, FLAG_TEXT, offsetof(Options, system), 0, 0, 0, 1},
    {{"--chat-template"}, FLAG_TEXT, offsetof(Options, chat_template), 0, 0, 0, 1},
};
#define N_FLAGS (sizeof FLAGS / sizeof FLAGS[0])

// llama.cpp's flags that this program does not have, and what to use instead.
static const char *const LLAMA_CPP[][2] = {
    {"--model", "the model is the first argument: ./run MODEL.bin [options]"},
    {"-ngl", "this program runs on the CPU only: drop it"},
    {"--n-gpu-layers", "this program runs on the CPU only: drop it"},
    {"--gpu-layers", "this program runs on the CPU only: drop it"},
    {"-cnv", "chat is -m chat"},
    {"--conversation", "chat is -m chat"},
    {"-sys", "the system prompt is -y/--system (with -m chat)"},
    {"--system-prompt", "the system prompt is -y/--system (with -m chat)"},
    {"--threads-batch", "one --threads count serves the prompt and the generation"},
    {"-tb", "one --threads count serves the prompt and the generation"},
    {"--rope-freq-scale", "here --rope-factor S is 1 / freq-scale (with --rope-scaling pi)"},
    {"--yarn-orig-ctx", "the trained context comes from the checkpoint"},
    {"-fa", "attention is always computed in one fused pass here: drop it"},
    {"--flash-attn", "attention is always computed in one fused pass here: drop it"},
    {"--interactive", "chat is -m chat; -i is the prompt here"},
    {"--color", "drop it"},
    {"--no-mmap", "the weights are always mmapped"},
    {"--mlock", "drop it"},
    {"--temperature", "the temperature is -t/--temp"},
    {"-e", "-i takes the text as it is: use the shell's $'...' for escapes"},
    {"--escape", "-i takes the text as it is: use the shell's $'...' for escapes"},
};

static void see_help(void) { fprintf(stderr, "see ./run --help\n"); }

int check_keep(const Options *o, int ctx) {
    if (o->keep < 0 || o->keep < ctx - 1) return 0;
    fprintf(stderr, "error: --keep %d leaves nothing for a context shift to drop in a context of %d (hint: a "
                    "smaller --keep or a larger --ctx)\n", o->keep, ctx);
    see_help();
    return -1;
}

// The edit distance of a and b, a swap of two neighbours counting as one edit (--tmep is one from
// --temp), capped at 3: enough to tell a typo.
static int distance(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40) return 3;
    int d[41][41];
    for (size_t i = 0; i <= la; i++)
        for (size_t j = 0; j <= lb; j++) {
            if (!i || !j) {
                d[i][j] = (int)(i + j);
                continue;
            }
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb] < 3 ? d[la][lb] : 3;
}

static void unknown_flag(const char *a) {
    for (size_t k = 0; k < sizeof LLAMA_CPP / sizeof LLAMA_CPP[0]; k++)
        if (!strcmp(a, LLAMA_CPP[k][0])) {
            fprintf(stderr, "error: unknown option '%s' (llama.cpp's; %s)\n", a, LLAMA_CPP[k][1]);
            return;
        }
    const char *near = NULL;
    int best = 3;
    for (size_t k = 0; k < N_FLAGS; k++)
        for (int j = 0; j < 3 && FLAGS[k].names[j]; j++) {
            const int d = strlen(FLAGS[k].names[j]) > 2 ? distance(a, FLAGS[k].names[j]) : 3;
            if (d < best) best = d, near = FLAGS[k].names[j];
        }
    const char *eq = strchr(a, '=');
    if (a[1] != '-' && eq)
        fprintf(stderr, "error: unknown option '%s' (a short flag takes its value after a space: %.*s %s)\n", a,
                (int)(eq - a), a, eq + 1);
    else if (near)
        fprintf(stderr, "error: unknown option '%s' (did you mean %s?)\n", a, near);
    else
        fprintf(stderr, "error: unknown option '%s'\n", a);
}

// The allowed values of a numeric flag, as an error shows them.
static void describe_range(const Flag *f, char *out, size_t len) {
    if (f->kind == FLAG_REAL)
        snprintf(out, len, "a number in %s%g, %g]", f->open ? "(" : "[", f->lo, f->hi);
    else
        snprintf(out, len, "an integer in %s%.0f, %.0f]", f->open ? "(" : "[", f->lo, f->hi);
}

// Strict numbers: the whole string must parse (no leading blanks either, which strtod skips), in
// decimal (strtod also reads hexadecimal, 0x10 = 16, and "inf", "nan"; strtol is given base 10), no
// overflow, no NaN, inside the flag's range.
static int parse_value(const Flag *f, const char *v, Options *o) {
    char *field = (char *)o + f->offset, *end;
    if (f->kind == FLAG_TEXT) {
        *(const char **)field = v;
        return 0;
    }
    if (f->kind == FLAG_LIST) {
        if (o->n_reverse == MAX_REVERSE_PROMPTS) return -1;
        if (!*v) return -1; // an empty stop string would stop before the first token
        o->reverse[o->n_reverse++] = v;
        return 0;
    }
    errno = 0;
    long n = 0; // integers are compared as integers: 9e18 + 1 is 9e18 as a double
    double x = f->kind == FLAG_REAL ? strtod(v, &end) : (double)(n = strtol(v, &end, 10));
    if (errno || end == v || *end || strspn(v, "0123456789+-.eE") != strlen(v) || !isfinite(x) || x < f->lo ||
        x > f->hi || (f->open && x == f->lo) || (f->kind != FLAG_REAL && n > (long)f->hi))
        return -1;
    if (f->kind == FLAG_INT)
        *(int *)field = (int)n;
    else if (f->kind == FLAG_LONG)
        *(long *)field = n;
    else
        *(double *)field = x;
    return 0;
}

// A value the parser refused: say what is allowed, and where a llama.cpp habit is the likely cause,
// the flag that does it here.
static void bad_value(const Flag *f, const char *name, const char *v, const Options *o) {
    char range[80] = "";
    if (f->kind == FLAG_LIST)
        snprintf(range, sizeof range, o->n_reverse == MAX_REVERSE_PROMPTS ? "at most %d of them" : "a non-empty text",
                 MAX_REVERSE_PROMPTS);
    else
        describe_range(f, range, sizeof range);
    char *end;
    const int number = (strtod(v, &end), end != v);
    fprintf(stderr, "error: invalid value '%s' for %s: %s", v, name, range);
    if (f->offset == offsetof(Options, top_p) && !number)
        fprintf(stderr, " (-p is top-p here, as in llama2.c; the prompt is -i/--prompt)");
    else if (number && strpbrk(v, "xX"))
        fprintf(stderr, " (written in decimal)");
    fprintf(stderr, "\n");
}

static const Flag *find_flag(const char *name) {
    for (size_t k = 0; k < N_FLAGS; k++)
        for (int j = 0; j < 3 && FLAGS[k].names[j]; j++)
            if (!strcmp(name, FLAGS[k].names[j])) return &FLAGS[k];
    return NULL;
}

static void version(void) {
    printf("lrun %s (kernels %s, %s", LRUN_VERSION, kernels_isa(),
#ifdef _OPENMP
           "OpenMP"
#else
           "no OpenMP"
#endif
    );
    printf(", built with " __VERSION__ ")\n");
}

int parse_args(int argc, char **argv, Options *o) {
    *o = (Options){.n_predict = 256,
                   .keep = -1,
                   .temp = 1.0,
                   .top_p = 0.9,
                   .repeat_penalty = 1.0,
                   .repeat_last_n = 64,
                   .seed = -1,
                   .batch = 512,
                   .rope = {.mode = -1}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--version")) {
            version();
            return 1;
        }
        if (a[0] != '-' || !a[1]) {
            if (o->model) {
                fprintf(stderr, "error: unexpected argument '%s': only one model file is taken\n", a);
                see_help();
                return -1;
            }
            o->model = a;
            continue;
        }
        // --flag=value: every long flag takes its value either way.
        char name[64];
        const char *value = NULL, *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            value = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
        }
        const Flag *f = find_flag(name);
        if (!f || (eq && !value)) {
            unknown_flag(eq ? name : a);
            see_help();
            return -1;
        }
        if (f->kind == FLAG_SWITCH) {
            if (value) {
                fprintf(stderr, "error: %s is a switch and takes no value\n", name);
                see_help();
                return -1;
            }
            *(int *)((char *)o + f->offset) = 1;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: %s needs a value\n", name);
                see_help();
                return -1;
            }
            value = argv[++i];
        }
        if (parse_value(f, value, o)) {
            bad_value(f, name, value, o);
            see_help();
            return -1;
        }
        for (int j = 0; f->generation && !o->gen_flag && j < 3 && f->names[j]; j++) // as typed
            if (!strcmp(name, f->names[j])) o->gen_flag = f->names[j];
        // llama.cpp's -t is its thread count: a whole number of 2 or more is probably meant as one
        // (warned by cli_warn).
        if (f->offset == offsetof(Options, temp))
            o->temp_as_threads = o->temp >= 2 && o->temp == floor(o->temp) && name[1] != '-' ? value : NULL;
    }
    const int chat = o->mode && !strcmp(o->mode, "chat");
    if (o->mode && !chat && strcmp(o->mode, "generate")) {
        fprintf(stderr, "error: invalid value '%s' for -m: generate or chat", o->mode);
        if (strchr(o->mode, '.') || strchr(o->mode, '/'))
            fprintf(stderr, " (-m is the mode here; the model is the first argument: ./run %s ...)", o->mode);
        fprintf(stderr, "\n");
        see_help();
        return -1;
    }
    const char *problem = NULL;
    char msg[300];
    if (!chat && (o->system || o->chat_template))
        snprintf(msg, sizeof msg, "%s is for chat (hint: add -m chat)", o->system ? "-y" : "--chat-template"),
            problem = msg;
    else if (o->chat_template && chat_template_from_name(o->chat_template) < 0)
        snprintf(msg, sizeof msg, "invalid value '%.100s' for --chat-template: " CHAT_TEMPLATE_NAMES, o->chat_template),
            problem = msg;
    else if (chat && o->prompt_file)
        problem = "-f gives a prompt to continue, and chat reads its turns from stdin (hint: -i for the first turn)";
    else if (chat && o->prompt_cache)
        problem = "--prompt-cache keeps one prompt's keys and values, and chat's turns are not one prompt (hint: drop "
                  "--prompt-cache, or -m generate)";
    else if (o->prompt_cache && !*o->prompt_cache)
        problem = "--prompt-cache needs a file name (hint: --prompt-cache prompt.cache)";
    else if (o->prompt && o->prompt_file)
        problem = "-i and -f both give the prompt (hint: one of them)";
    else if (o->ppl_windows && !o->ppl) // flags that would do nothing are refused rather than ignored
        problem = "--ppl-windows limits a perplexity run and needs --ppl FILE";
    else if (o->ppl && o->ctx == 1) // a window's first token is only read; run.c says the same of a trained 1
        problem = "--ppl scores each token of a window from those before it, and a window of --ctx 1 has none to "
                  "score (hint: --ctx 2 or more)";
    else if (o->ppl && o->gen_flag)
        snprintf(msg, sizeof msg, "%s is for generating text, and --ppl does not generate (hint: drop %s or --ppl)",
                 o->gen_flag, o->gen_flag),
            problem = msg;
    if (problem) {
        fprintf(stderr, "error: %s\n", problem);
        see_help();
        return -1;
    }
    if (o->ctx && check_keep(o, o->ctx)) return -1; // run.c checks again against a trained context
    if (o->rope_mode) {
        RopeScaling mode;
        if (rope_scaling_from_name(o->rope_mode, &mode)) {
            char names[300];
            rope_scaling_names(names, sizeof names);
            fprintf(stderr, "error: invalid value '%s' for --rope-scaling: %s\n", o->rope_mode, names);
            see_help();
            return -1;
        }
        o->rope.mode = (int)mode;
    }
    if (!o->model) {
        fprintf(stderr, "error: no model file given (./run MODEL.bin [options])\n");
        see_help();
        return -1;
    }
    return 0;
}

void cli_warn(const Options *o) {
    if (o->temp_as_threads)
        fprintf(stderr, "warning: -t %s is the temperature here (llama2.c's -t); the thread count is --threads (hint: "
                        "--threads %s)\n", o->temp_as_threads, o->temp_as_threads);
}

void usage(FILE *f) {
    fprintf(f, "usage: run MODEL.bin [options]\n"
               "\n"
               "Generate text from a Llama checkpoint (export/export.py output or a llama2.c legacy .bin).\n"
               "Allowed values in [brackets]. Long flags also take --flag=value.\n"
               "\n"
               "  -i, --prompt TEXT        prompt (default: empty, the text starts after BOS)\n"
               "  -f, --file FILE          the prompt is the text of FILE (instead of -i)\n"
               "      --prompt-cache FILE  keep the prompt's keys and values in FILE, and take from it\n"
               "                           those of the tokens a later prompt starts with (README,\n"
               "                           \"Prompt cache\"; not with dynamic, dynamic-yarn, longrope)\n"
               "  -n, --n-predict N        tokens to generate [-1, 1073741824] (default 256; -1: until an\n"
               "                           end token); past a full context the oldest half of it is\n"
               "                           dropped (context shift)\n"
               "      --keep N             a context shift keeps the first N tokens [0, 16777216]\n"
               "                           (default 4: attention's sinks, BOS first when there is one)\n"
               "  -r, --reverse-prompt S   stop when the output shows the text S (may be given up to 16\n"
               "                           times; matched across tokens)\n"
               "      --verbose-prompt     print the prompt's token ids on stderr\n"
               "  -s, --seed N             random seed [-1, 9000000000000000000] (default -1: random, as\n"
               "                           in llama.cpp, and printed)\n"
               "  -z, --tokenizer PATH     tokenizer.model (SentencePiece) or tokenizer.json (byte-level\n"
               "                           BPE) (default: the one beside MODEL, tokenizer.model first)\n"
               "  -c, --ctx, --ctx-size N  context length = KV cache size in tokens [1, 16777216]\n"
               "                           (default: the trained context)\n"
               "      --threads N          OpenMP threads [1, 1024] (default: all cores)\n"
               "  -b, --batch-size N       prompt tokens per forward pass [1, 4096] (default 512)\n"
               "  -ctk, --cache-type-k T   type of the cached keys: f32 | f16 | q8_0 (default f32)\n"
               "  -ctv, --cache-type-v T   type of the cached values: f32 | f16 | q8_0 (default f32)\n"
               "      --f16-as-bf16        f16 models only: a bf16 copy of the weights made at load, each\n"
               "                           rounded to nearest even, the activations rounded to bf16 too\n"
               "                           (prompts faster: docs/speed.md, \"f16 as bf16\"; as much memory\n"
               "                           again and seconds per load; each off by at most 2^-8 of itself:\n"
               "                           README's flag table; default off: f16 as it is). Steadier, and\n"
               "                           no copy: export the checkpoint with export.py --dtype bf16\n"
               "      --check-tensors      at load, check that every weight is finite (no NaN, no\n"
               "                           infinity) and refuse the model naming the first that is not\n"
               "      --version            the version and the build's kernels\n"
               "\n"
               "Sampling, in this order (llama.cpp's; see README, \"Sampling\"):\n"
               "      --repeat-penalty R   penalty on recent tokens (0, 1e6]: their logits divided by R,\n"
               "                           multiplied when negative (default 1: off)\n"
               "      --repeat-last-n N    recent = the last N [-1, 1073741824] (default 64; 0: off, -1:\n"
               "                           the whole context)\n"
               "      --top-k K            keep the K likeliest tokens [0, 1073741824] (default 0: off)\n"
               "  -p, --top-p P            nucleus: keep the likeliest tokens up to probability P (0, 1]\n"
               "                           (default 0.9; 1: off)\n"
               "      --min-p P            keep tokens at least P times as likely as the likeliest [0, 1]\n"
               "                           (default 0: off)\n"
               "  -t, --temp T             temperature, 0 = greedy [0, 1e6] (default 1.0)\n"
               "\n"
               "Chat (see README, \"Chat\"), the user's turns one line each on stdin:\n"
               "  -m, --mode MODE          generate (default) or chat; in chat, -i is the first turn\n"
               "  -y, --system TEXT        chat: the system prompt\n"
               "      --chat-template NAME chat: the model's template (default: recognised from the\n"
               "                           tokenizer_config.json beside the tokenizer), one of\n"
               "                           " CHAT_TEMPLATE_NAMES "\n"
               "\n"
               "Perplexity, instead of generating (see README, \"Measuring long context\"):\n"
               "      --ppl FILE           perplexity of FILE in windows of --ctx tokens, by position\n"
               "      --ppl-windows K      with --ppl: at most K windows [1, 1073741824] (default: all)\n"
               "\n"
               "RoPE scaling, to run past the trained context (see README, \"Past the trained context\"):\n"
               "      --rope-scaling MODE  one of these (default: the checkpoint's own, else none):\n");
    // The modes and the modes of each flag, from rope.c's table: a new mode shows here by itself.
    for (int m = 0; m < ROPE_SCALING_COUNT; m++) {
        char names[40];
        const char *alias = rope_scaling_alias(m);
        snprintf(names, sizeof names, "%s%s%s", rope_scaling_name((RopeScaling)m), alias ? ", " : "", alias ? alias : "");
        fprintf(f, "        %-15s%s (%s)\n", names, rope_scaling_about(m), rope_scaling_source(m));
    }
    char factor[200], alpha[200], window[200], group[200], chunk[200];
    rope_modes_taking(ROPE_KNOB_FACTOR, factor, sizeof factor);
    rope_modes_taking(ROPE_KNOB_ALPHA, alpha, sizeof alpha);
    rope_modes_taking(ROPE_KNOB_WINDOW | ROPE_KNOB_LOCAL, window, sizeof window);
    rope_modes_taking(ROPE_KNOB_GROUP, group, sizeof group);
    rope_modes_taking(ROPE_KNOB_CHUNK, chunk, sizeof chunk);
    fprintf(f,
            "      --rope-factor S      extension factor s [1, 1e6] (alias --rope-scale; default:\n"
            "                           ctx / trained ctx when larger, dynamic: 1, its alpha grows\n"
            "                           as length / trained ctx); leaky-rerope: the rate K > 1 past\n"
            "                           the window (default (ctx - W) / (L - W): ctx maps to L);\n"
            "                           taken by %s\n"
            "      --rope-base B        RoPE base > 0, overrides the checkpoint's rope_theta\n"
            "                           (alias --rope-freq-base)\n"
            "      --rope-alpha A       %s: alpha of the base change [1, 1e6] (default: S)\n"
            "      --rope-window W      %s: the window [1, 16777216]\n"
            "                           (alias --grp-attn-w, -gaw; default L / 4, dca: L / 16): a\n"
            "                           distance r >= W is scored as W (leaky: W + (r - W) / K;\n"
            "                           selfextend: grouped; dca: its local window, below --dca-chunk);\n"
            "                           W <= L, the trained context (leaky-rerope, selfextend: W < L)\n"
            "      --grp-attn-n G       %s: the group size [1, 16777216] (alias -gan; default:\n"
            "                           the smallest whose capacity (L - W) G + W covers ctx)\n"
            "      --dca-chunk S        %s: the chunk size [2, 16777216] (default 3 L / 4), below L; its\n"
            "                           local window is --rope-window (default L / 16)\n"
            "      --attn-logn          log-n scaling: a query at position m >= L is multiplied by\n"
            "                           ln(m + 1) / ln(L); combines with every mode\n"
            "      --swa-full           sliding-window layers keep every position of the context,\n"
            "                           not a ring of the last window + a block (llama.cpp's flag;\n"
            "                           the same logits, more memory)\n"
            "  -h, --help               this text\n",
            factor, alpha, window, group, chunk);
}
