// rope.c - rotary position embedding (RoPE) and how to stretch it past the trained context.
//
// RoPE (Su et al., RoFormer, arXiv 2104.09864, eq. 14-16) encodes position m by rotating each
// pair of coordinates (x_2i, x_2i+1) of a query or key head by the angle m * theta_i:
//
//     x'_2i   = x_2i * cos(m theta_i) - x_2i+1 * sin(m theta_i)
//     x'_2i+1 = x_2i * sin(m theta_i) + x_2i+1 * cos(m theta_i)
//
// with theta_i = b^(-2i/d) for pair i = 0 .. d/2-1, head size d and base b (rope_theta, 10000
// in Llama 1/2). A query rotated by m scored against a key rotated by n depends only on the distance
// r = m - n: (R_m q) . (R_n k) = q^T R_{n-m} k = Re sum_i q_i conj(k_i) e^{i r theta_i}, with pair i
// read as the complex number x_2i + i x_2i+1 (README, "RoPE, from the math to the code"). Only q
// and k are rotated, never v.
//
// A model trained on L tokens has only ever seen angles m * theta_i with m < L. Every
// context-extension method below changes theta_i (and sometimes the attention magnitude) so
// that positions up to s * L produce angles the model can cope with, or (rerope, leaky-rerope,
// selfextend, dca) rotates the keys it scores to positions below L. Each mode is one row of the
// MODES table (below: its names, flags, defaults and shape), one case in rope_inv_freq() (its
// frequencies), and, for the four that rotate a query more than once, tables of their own in
// rope_init(); the rest of this file is bookkeeping: tables of cos/sin per position, the key
// tables, and the rotation itself.
//
// What this is not: attention. model.c rotates q and k heads with rope_rotate() (and a query's
// other turns with rope_rotate_turn()) and tells the sequence length with rope_set_length(); the
// key tables that turn un-rotated cached keys are filled here (rope_set_keys), and attention reads
// this module through RopeAttention and rope_segments() (rope.h), which say which turn of a query
// scores which keys with which key table.
#include "rope.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// The modes: one row each. Every fact about a mode that the rest of the program asks is read from
// its row: the predicates below, the flags it takes and their defaults (rope_params_resolve,
// rope_params_defaults), the messages of the rules (rope_params_resolve), rope_attention, and the
// list of modes in --help (cli.c). A new mode is a row here, its case in rope_inv_freq (or its
// tables in rope_init), and a test.

// Where the factor s comes from when --rope-factor is not given (a mode that takes one).
typedef enum {
    FACTOR_STRETCH = 1, // the checkpoint's own, else ctx / L when ctx > L (else 1): s L covers ctx
    FACTOR_SLOPE,       // dynamic: the checkpoint's own, else 1, so alpha grows as l / L (rope_inv_freq)
    FACTOR_RATE,        // leaky-rerope's K: (ctx - W) / (L - W), the farthest distance lands on L
} FactorRule;

typedef struct {
    const char *name, *alias; // --rope-scaling's names (alias: Hugging Face's, or NULL)
    const char *about;        // what it does, in one line of --help
    const char *source;       // where its formula comes from (rope_inv_freq and rope_init cite more)
    int in_file;              // a checkpoint may carry it (loader.c); the others are chosen at run time
    int pair_factors;         // a factor per pair follows the header (longrope: short, then long)
    int follows_length;       // its frequencies follow the current length (rope_set_length)
    int turns;                // the turns of each query attention reads (rope.h, rope_segments)
    int key_tables;           // the key tables of un-rotated cached keys; 0: keys cached rotated
    unsigned knobs;           // the overrides it takes besides --rope-base (RopeKnob)
    FactorRule factor;        // with ROPE_KNOB_FACTOR: the default factor; without, s = 1
    const char *no_factor;    // without ROPE_KNOB_FACTOR: why --rope-factor is refused, and the fix
    // The defaults of the knobs it takes and of the checkpoint's fields it reads (rope_params_defaults):
    // W, w and S as fractions of L (W and w at least 1); yarn's ramp; llama3's bands.
    struct {
        double window, local_window, chunk;
        double beta_fast, beta_slow, low_freq_factor, high_freq_factor;
    } dflt;
} RopeMode;

static const RopeMode MODES[ROPE_SCALING_COUNT] = {
    [ROPE_SCALING_NONE] = {.name = "none", .about = "plain RoPE, theta_i = b^(-2i/d)",
                           .source = "Su et al., RoFormer, arXiv 2104.09864", .in_file = 1, .turns = 1},
    [ROPE_SCALING_PI] = {.name = "pi", .alias = "linear", .about = "position interpolation: m / s",
                         .source = "Chen et al. 2023, arXiv 2306.15595", .in_file = 1, .turns = 1,
                         .knobs = ROPE_KNOB_FACTOR, .factor = FACTOR_STRETCH},
    [ROPE_SCALING_NTK] = {.name = "ntk", .about = "NTK-aware: a larger base, b alpha^(d/(d-2))",
                          .source = "bloc97, r/LocalLLaMA 14lz7j5", .in_file = 1, .turns = 1,
                          .knobs = ROPE_KNOB_FACTOR | ROPE_KNOB_ALPHA, .factor = FACTOR_STRETCH},
    [ROPE_SCALING_DYNAMIC] = {.name = "dynamic", .about = "dynamic NTK: the base grows with the length",
                              .source = "emozilla, r/LocalLLaMA 14mrgpr", .in_file = 1, .follows_length = 1,
                              .turns = 1, .key_tables = 1, .knobs = ROPE_KNOB_FACTOR, .factor = FACTOR_SLOPE},
    [ROPE_SCALING_YARN] = {.name = "yarn", .about = "YaRN: pi on slow pairs, none on fast ones",
                           .source = "Peng et al. 2023, arXiv 2309.00071", .in_file = 1, .turns = 1,
                           .knobs = ROPE_KNOB_FACTOR, .factor = FACTOR_STRETCH,
                           .dflt = {.beta_fast = 32, .beta_slow = 1}}, // transformers' defaults
    [ROPE_SCALING_LLAMA3] = {.name = "llama3", .about = "Llama 3.1: three wavelength bands",
                             .source = "Meta's Llama 3.1 apply_scaling", .in_file = 1, .turns = 1,
                             .knobs = ROPE_KNOB_FACTOR, .factor = FACTOR_STRETCH,
                             .dflt = {.low_freq_factor = 1, .high_freq_factor = 4}}, // Meta's for Llama 3.1
    // ReRoPE's window: L / 4 (bojone/rerope uses W = 512 for L = 4096, and reports W = 1024 = L/4),
    // well inside the trained range, where every pair's angles were seen at each distance.
    [ROPE_SCALING_REROPE] = {.name = "rerope", .about = "ReRoPE: distances past a window W scored as W",
                             .source = "Su 2023, kexue.fm/archives/9708", .turns = 2, .key_tables = 1,
                             .knobs = ROPE_KNOB_WINDOW, .dflt = {.window = 0.25},
                             .no_factor = "every distance past the window is scored as the window "
                                          "(hint: --rope-scaling leaky-rerope --rope-factor K lets them grow at 1/K)"},
    [ROPE_SCALING_LEAKY_REROPE] = {.name = "leaky-rerope", .about = "leaky ReRoPE: past W, distances grow at 1/K",
                                   .source = "Su 2023, kexue.fm/archives/9708", .turns = 2, .key_tables = 2,
                                   .knobs = ROPE_KNOB_FACTOR | ROPE_KNOB_WINDOW, .factor = FACTOR_RATE,
                                   .dflt = {.window = 0.25}},
    [ROPE_SCALING_LONGROPE] = {.name = "longrope", .about = "LongRoPE: a checkpoint's own factor per pair",
                               .source = "Ding et al. 2024, arXiv 2402.13753", .in_file = 1, .pair_factors = 1,
                               .follows_length = 1, .turns = 1, .key_tables = 1, .knobs = ROPE_KNOB_FACTOR,
                               .factor = FACTOR_STRETCH},
    // Self-Extend's neighbour window as ReRoPE's; its group size G by the context (selfextend_group).
    [ROPE_SCALING_SELFEXTEND] = {.name = "selfextend", .about = "Self-Extend: far keys at grouped positions",
                                 .source = "Jin et al. 2024, arXiv 2401.01325", .turns = 2, .key_tables = 2,
                                 .knobs = ROPE_KNOB_WINDOW | ROPE_KNOB_GROUP, .dflt = {.window = 0.25},
                                 .no_factor = "its reach is its group size G (hint: --grp-attn-n G, not --rope-factor)"},
    [ROPE_SCALING_DYNAMIC_YARN] = {.name = "dynamic-yarn", .about = "YaRN with s = length / L",
                                   .source = "Peng et al. 2023, arXiv 2309.00071, sec. 3.3", .follows_length = 1,
                                   .turns = 1, .key_tables = 1, .dflt = {.beta_fast = 32, .beta_slow = 1},
                                   .no_factor = "its factor is the length over the trained context "
                                                "(hint: --rope-scaling yarn --rope-factor S for a fixed one)"},
    // Dual chunk attention's sizes as ChunkLlama sets them (replace_with_chunkllama): chunks of
    // S = 3 L / 4 with a local window w = L / 16, so every position it rotates to stays below L.
    [ROPE_SCALING_DCA] = {.name = "dca", .about = "dual chunk attention: positions within chunks",
                          .source = "An et al. 2024, arXiv 2402.17463", .turns = 3, .key_tables = 1,
                          .knobs = ROPE_KNOB_LOCAL | ROPE_KNOB_CHUNK, .dflt = {.local_window = 0.0625, .chunk = 0.75},
                          .no_factor = "positions are counted within chunks "
                                       "(hint: --dca-chunk S and --rope-window w size its chunks)"},
};

static const RopeMode *mode_of(int mode) { return &MODES[mode >= 0 && mode < ROPE_SCALING_COUNT ? mode : 0]; }

const char *rope_scaling_name(RopeScaling mode) {
    return (mode >= 0 && mode < ROPE_SCALING_COUNT) ? MODES[mode].name : "unknown";
}
const char *rope_scaling_alias(int mode) { return mode >= 0 && mode < ROPE_SCALING_COUNT ? MODES[mode].alias : NULL; }
const char *rope_scaling_about(int mode) { return mode >= 0 && mode < ROPE_SCALING_COUNT ? MODES[mode].about : NULL; }
const char *rope_scaling_source(int mode) { return mode >= 0 && mode < ROPE_SCALING_COUNT ? MODES[mode].source : NULL; }

void rope_scaling_names(char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < ROPE_SCALING_COUNT && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s%s%s%s", i ? ", " : "", MODES[i].name, MODES[i].alias ? " (or " : "",
                              MODES[i].alias ? MODES[i].alias : "", MODES[i].alias ? ")" : "");
}

int rope_scaling_from_name(const char *name, RopeScaling *mode) {
    for (int i = 0; i < ROPE_SCALING_COUNT; i++) {
        if (strcmp(name, MODES[i].name) == 0 || (MODES[i].alias && strcmp(name, MODES[i].alias) == 0)) {
            *mode = (RopeScaling)i;
            return 0;
        }
    }
    return -1;
}

int rope_takes(int mode, unsigned knobs) { return (mode_of(mode)->knobs & knobs) != 0; }

// The names of the modes that take one of the knobs (and, with `own`, those that need no factors of a
// checkpoint's), between them `sep` and before the last one `last`: "a, b and c", "a|b|c".
static void modes_taking(unsigned knobs, int own, const char *sep, const char *last, char *buf, size_t len) {
    int count = 0, k = 0;
    for (int i = 0; i < ROPE_SCALING_COUNT; i++)
        count += (MODES[i].knobs & knobs) && !(own && MODES[i].pair_factors);
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < ROPE_SCALING_COUNT && n < len; i++) {
        if (!(MODES[i].knobs & knobs) || (own && MODES[i].pair_factors)) continue;
        n += (size_t)snprintf(buf + n, len - n, "%s%s", k == 0 ? "" : k == count - 1 ? last : sep, MODES[i].name);
        k++;
    }
}

void rope_modes_taking(unsigned knobs, char *buf, size_t len) { modes_taking(knobs, 0, ", ", " and ", buf, len); }

// "<what> is used only by --rope-scaling <the modes that take the knobs>", into buf; returns buf.
static const char *used_only_by(const char *what, unsigned knobs, char *buf, size_t len) {
    char modes[160];
    rope_modes_taking(knobs, modes, sizeof modes);
    snprintf(buf, len, "%s is used only by --rope-scaling %s", what, modes);
    return buf;
}

// ---------------------------------------------------------------------------------------------
// Parameters: the checkpoint's, the user's overrides, the defaults, and their checks

static int finite_pos(double x) { return isfinite(x) && x > 0; }

// yarn and dynamic-yarn share the per-pair blend and its parameters.
static int is_yarn(const RopeParams *p) { return p->mode == ROPE_SCALING_YARN || p->mode == ROPE_SCALING_DYNAMIC_YARN; }

// Self-Extend's farthest distance in a context of ctx: the query at ctx - 1 against the key at 0, on
// the grouped path: floor((ctx - 1) / G) + W - floor(W / G). The smallest G that keeps it below L
// (1 when the window is no smaller than L: nothing is grouped that could be kept in range).
static int selfextend_group(int ctx, int W, int L) {
    int g = 1;
    while (W < L && g < ctx && (ctx - 1) / g + W - W / g > L - 1)
        g++;
    return g;
}

// A fraction f of L, for a window: at least 1.
static int part_of(int L, double f) { return (int)(L * f) > 1 ? (int)(L * f) : 1; }

void rope_params_defaults(RopeParams *p, int ctx) {
    const RopeMode *m = mode_of(p->mode);
    const int L = p->orig_ctx;
    if (p->rot_dims == 0) p->rot_dims = p->head_dim;
    // The checkpoint's optional fields, as transformers' modeling_rope_utils.py fills them.
    if (p->beta_fast == 0) p->beta_fast = m->dflt.beta_fast;
    if (p->beta_slow == 0) p->beta_slow = m->dflt.beta_slow;
    if (p->low_freq_factor == 0) p->low_freq_factor = m->dflt.low_freq_factor;
    if (p->high_freq_factor == 0) p->high_freq_factor = m->dflt.high_freq_factor;
    // The knobs' sizes: the window first, which the group and the factor depend on.
    if (m->knobs & ROPE_KNOB_WINDOW && p->window == 0) p->window = part_of(L, m->dflt.window);
    if (m->knobs & ROPE_KNOB_LOCAL && p->local_window == 0) p->local_window = part_of(L, m->dflt.local_window);
    if (m->knobs & ROPE_KNOB_CHUNK && p->chunk == 0) p->chunk = (int)(L * m->dflt.chunk);
    // Self-Extend's group size G (LongLM's group_size_1, llama.cpp's --grp-attn-n): the smallest that
    // keeps every grouped distance of the context inside L.
    if (m->knobs & ROPE_KNOB_GROUP && p->group == 0) p->group = selfextend_group(ctx, p->window, L);
    // The factor, by the mode's rule (FactorRule); 1 for the modes without one (dynamic-yarn's s
    // follows the length: rope_inv_freq).
    if (p->factor != 0) return;
    if (m->factor == FACTOR_STRETCH) // stretch L to the context
        p->factor = ctx > L ? (double)ctx / L : 1;
    else if (m->factor == FACTOR_RATE) // the smallest K that keeps every distance below L: W + (ctx - W) / K = L
        p->factor = ctx > L && p->window < L ? (double)(ctx - p->window) / (L - p->window) : 1;
    else // (dynamic: alpha(l) = l / L, the YaRN paper's dynamic scaling; s > 1 is a steeper slope)
        p->factor = 1;
}

int rope_params_check(const RopeParams *given, char *err, size_t errlen) {
    RopeParams q = *given, *p = &q; // the zeros a model file leaves, read as their defaults at L
    rope_params_defaults(p, p->orig_ctx);
    const RopeMode *m = mode_of(p->mode);
    char msg[200];
    const char *bad = NULL;
    if (p->mode < 0 || p->mode >= ROPE_SCALING_COUNT)
        bad = "unknown scaling mode";
    else if (p->head_dim < 2 || p->head_dim % 2 || p->head_dim > ROPE_MAX_HEAD_DIM)
        bad = "head_dim must be even, in [2, 1024]";
    else if (p->rot_dims < 2 || p->rot_dims % 2 || p->rot_dims > p->head_dim)
        bad = "the rotated dimensions must be even, in [2, head_dim]";
    else if (p->orig_ctx < 1)
        bad = "trained context must be at least 1";
    else if (!finite_pos(p->base))
        bad = "base (rope_theta) must be a finite number > 0";
    else if (!(isfinite(p->factor) && p->factor >= 1))
        bad = "factor must be a finite number >= 1";
    else if (!(isfinite(p->alpha) && (p->alpha == 0 || p->alpha >= 1)))
        bad = "alpha must be >= 1";
    else if ((p->mode == ROPE_SCALING_NTK || p->mode == ROPE_SCALING_DYNAMIC) && p->rot_dims < 4)
        bad = "ntk and dynamic need d >= 4 rotated dimensions (the exponent is d/(d-2))";
    else if (m->pair_factors && !(p->short_factor && p->long_factor))
        bad = "longrope needs the checkpoint's short and long factors";
    else if (p->mode == ROPE_SCALING_LONGROPE && !(isfinite(p->attn_factor) && p->attn_factor >= 0))
        bad = "longrope attention factor must be >= 0";
    else if (is_yarn(p) && !(p->base > 1))
        bad = "yarn needs base > 1 (its ramp divides by ln(base))";
    else if (is_yarn(p) && !(isfinite(p->attn_factor) && p->attn_factor >= 0))
        bad = "yarn attention factor must be >= 0";
    else if (is_yarn(p) && !(finite_pos(p->beta_slow) && p->beta_fast > p->beta_slow))
        bad = "yarn needs beta_fast > beta_slow > 0";
    else if (p->mode == ROPE_SCALING_LLAMA3 && !(finite_pos(p->low_freq_factor) && isfinite(p->high_freq_factor) &&
                                                 p->high_freq_factor > p->low_freq_factor))
        bad = "llama3 needs high_freq_factor > low_freq_factor > 0";
    // A mode chosen at run time that takes no factor has s = 1 (rope_params_resolve); a checkpoint's
    // factor under none is ignored, as transformers ignores it without a rope_type.
    else if (!(m->knobs & ROPE_KNOB_FACTOR) && !m->in_file && p->factor != 1)
        bad = "this mode has no factor";
    else if (m->knobs & ROPE_KNOB_GROUP && !(p->group >= 1 && p->group <= 1 << 24))
        bad = "selfextend's group size G must be in [1, 2^24]";
    else if (rope_far_path(p) && !(p->window >= 1 && p->window <= p->orig_ctx))
        bad = "the window W must be in [1, L], L the trained context: no distance is then rotated past what "
              "the model was trained on";
    else if ((p->mode == ROPE_SCALING_LEAKY_REROPE || p->mode == ROPE_SCALING_SELFEXTEND) && p->window >= p->orig_ctx)
        bad = "leaky-rerope and selfextend need a window W below L, the trained context (distances past W grow "
              "from W)";
    else if (p->mode == ROPE_SCALING_DCA && !(p->chunk < p->orig_ctx && p->local_window >= 1 && p->local_window < p->chunk))
        bad = "dca needs a local window w >= 1 below its chunk size S, and S below L, the trained context";
    else if (!(m->knobs & ROPE_KNOB_ALPHA) && p->alpha != 0)
        bad = used_only_by("alpha", ROPE_KNOB_ALPHA, msg, sizeof msg);
    else if (!(m->knobs & ROPE_KNOB_WINDOW) && p->window != 0)
        bad = used_only_by("a window W", ROPE_KNOB_WINDOW, msg, sizeof msg);
    else if (!(m->knobs & ROPE_KNOB_LOCAL) && p->local_window != 0)
        bad = used_only_by("a local window w", ROPE_KNOB_LOCAL, msg, sizeof msg);
    else if (!(m->knobs & ROPE_KNOB_GROUP) && p->group != 0)
        bad = used_only_by("a group size G", ROPE_KNOB_GROUP, msg, sizeof msg);
    else if (!(m->knobs & ROPE_KNOB_CHUNK) && p->chunk != 0)
        bad = used_only_by("a chunk size S", ROPE_KNOB_CHUNK, msg, sizeof msg);
    for (int i = 0; !bad && m->pair_factors && i < p->rot_dims / 2; i++)
        if (!finite_pos(p->short_factor[i]) || !finite_pos(p->long_factor[i]))
            bad = "longrope factors must be finite numbers > 0";
    for (int i = 0; !bad && p->pair_divisor && i < p->rot_dims / 2; i++)
        if (p->mode != ROPE_SCALING_LLAMA3 || !finite_pos(p->pair_divisor[i]))
            bad = "the file's per-pair divisors (rope_freqs.weight) must be finite numbers > 0, for llama3";
    if (bad) {
        snprintf(err, errlen, "RoPE (%s): %s", rope_scaling_name(p->mode), bad);
        return -1;
    }
    return 0;
}

// An override the mode does not take: which rule, and the message (the flag, why, and the fix).
static RopeRule refused(const RopeParams *out, const RopeOverrides *o, char *err, size_t errlen) {
    const RopeMode *m = mode_of(out->mode);
    char modes[200];
    if (m->pair_factors && !(out->short_factor && out->long_factor)) {
        snprintf(err, errlen, "--rope-scaling %s needs a LongRoPE checkpoint's short and long factors (Phi-3's "
                 "rope_scaling), and this model has none (hint: --rope-scaling yarn)", m->name);
        return ROPE_NO_PAIR_FACTORS;
    }
    if (o->factor > 0 && out->pair_divisor) {
        snprintf(err, errlen, "--rope-factor does not change this model's llama3 scaling: the file gives it as a "
                 "divisor per pair (rope_freqs.weight) (hint: drop --rope-factor, or --rope-scaling yarn "
                 "--rope-factor S for a scaling of your own)");
        return ROPE_FACTOR_NOT_TAKEN;
    }
    if (o->factor > 0 && !(m->knobs & ROPE_KNOB_FACTOR)) {
        modes_taking(ROPE_KNOB_FACTOR, 1, "|", "|", modes, sizeof modes); // the modes that take one here
        if (m->no_factor)
            snprintf(err, errlen, "%s has no --rope-factor: %s", m->name, m->no_factor);
        else
            snprintf(err, errlen, "--rope-factor needs a scaling mode (hint: --rope-scaling %s)", modes);
        return ROPE_FACTOR_NOT_TAKEN;
    }
    if (o->factor == 1 && m->factor == FACTOR_RATE) {
        snprintf(err, errlen, "%s with --rope-factor 1 is plain RoPE (hint: --rope-factor K with K > 1, or "
                 "--rope-scaling none without --rope-factor)", m->name);
        return ROPE_FACTOR_PLAIN;
    }
    static const struct {
        unsigned knobs;
        const char *flag;
    } KNOB_FLAGS[] = {{ROPE_KNOB_ALPHA, "--rope-alpha"},
                      {ROPE_KNOB_WINDOW | ROPE_KNOB_LOCAL, "--rope-window"},
                      {ROPE_KNOB_GROUP, "--grp-attn-n"},
                      {ROPE_KNOB_CHUNK, "--dca-chunk"}};
    const double given[] = {o->alpha, o->window, o->group, o->chunk}; // in KNOB_FLAGS' order
    for (size_t k = 0; k < sizeof KNOB_FLAGS / sizeof KNOB_FLAGS[0]; k++)
        if (given[k] > 0 && !(m->knobs & KNOB_FLAGS[k].knobs)) {
            used_only_by(KNOB_FLAGS[k].flag, KNOB_FLAGS[k].knobs, err, errlen);
            return ROPE_KNOB_NOT_TAKEN;
        }
    return ROPE_OK;
}

RopeRule rope_params_resolve(RopeParams *out, const RopeParams *trained, int ctx, const RopeOverrides *o, char *err,
                             size_t errlen) {
    *out = *trained;
    if (o->mode >= 0 && o->mode != (int)trained->mode) {
        // A different mode than the checkpoint's: the checkpoint's values are for its own; start from
        // that mode's defaults. L stays the context the model was really trained with.
        out->mode = (RopeScaling)o->mode;
        out->factor = 0;
        out->attn_factor = out->beta_fast = out->beta_slow = 0;
        out->low_freq_factor = out->high_freq_factor = 0;
        out->pair_divisor = NULL;
    } else if (out->factor == 0) {
        out->factor = 1; // the checkpoint's own mode with no factor given: 1, as transformers reads it
    }
    const RopeRule rule = refused(out, o, err, errlen);
    if (rule) return rule;
    const unsigned knobs = mode_of(out->mode)->knobs;
    if (o->base > 0) out->base = o->base;
    if (!(knobs & ROPE_KNOB_FACTOR)) out->factor = 1;
    if (o->factor > 0) out->factor = o->factor;
    out->alpha = o->alpha;
    out->window = knobs & ROPE_KNOB_WINDOW ? o->window : 0; // 0: the default (rope_params_defaults)
    out->local_window = knobs & ROPE_KNOB_LOCAL ? o->window : 0;
    out->group = knobs & ROPE_KNOB_GROUP ? o->group : 0;
    out->chunk = knobs & ROPE_KNOB_CHUNK ? o->chunk : 0;
    rope_params_defaults(out, ctx);
    if (rope_params_check(out, err, errlen)) return ROPE_BAD_VALUE;
    return ROPE_OK;
}

// ---------------------------------------------------------------------------------------------
// The frequencies: one case per scaling mode. d = the rotated dimensions (rot_dims: head_dim, or
// the first part of it under partial rotary), b = base, L = trained context, s = factor, i = pair
// index. Everything in double.

// YaRN's "inverse dimension formula": the pair index whose wavelength 2*pi*b^(2i/d) fits
// `turns` full rotations into L tokens. Peng et al. 2023 (arXiv 2309.00071) eq. 17-18;
// transformers modeling_rope_utils.py find_correction_dim.
static double yarn_pair_with_turns(double turns, int d, double b, double L) {
    return d * log(L / (turns * 2 * M_PI)) / (2 * log(b));
}

void rope_inv_freq(const RopeParams *p, int length, double *inv_freq, double *mscale, double *eff_base) {
    const int d = p->rot_dims ? p->rot_dims : p->head_dim, half = d / 2;
    const double L = p->orig_ctx;
    double s = p->factor;
    double b = p->base;
    *mscale = 1;

    // NTK-aware (bloc97, r/LocalLLaMA 14lz7j5; YaRN paper appendix A.1): change the base so the
    // lowest frequency is slowed by exactly alpha while the highest (i = 0) is untouched:
    // b'^((d-2)/d) = alpha * b^((d-2)/d)  =>  b' = b * alpha^(d/(d-2)).
    if (p->mode == ROPE_SCALING_NTK) b *= pow(p->alpha > 0 ? p->alpha : s, d / (d - 2.0));

    // Dynamic NTK (emozilla, r/LocalLLaMA 14mrgpr; transformers _compute_dynamic_ntk_parameters):
    // the same base change, with alpha following the current length l once it exceeds L:
    // alpha(l) = s*l/L - (s-1), which is 1 at l = L. For l <= L this is exactly `none`. The formula
    // is a heuristic; s is its slope: alpha reaches s only at l = (2 - 1/s) L, and s = 1 gives
    // alpha = l / L.
    if (p->mode == ROPE_SCALING_DYNAMIC && length > p->orig_ctx) b *= pow(s * length / L - (s - 1), d / (d - 2.0));
    *eff_base = b;

    for (int i = 0; i < half; i++)
        inv_freq[i] = pow(b, -2.0 * i / d); // theta_i = b^(-2i/d)
    // Partial rotary (GPT-NeoX's rotary_pct; transformers' partial_rotary_factor, Phi-3's 0.75): the
    // pairs past d / 2 never turn, theta = 0. Every formula here sees d, the rotated part, as its
    // head size, as transformers' _compute_*_parameters do (dim = head_dim * partial_rotary_factor).
    for (int i = half; i < p->head_dim / 2; i++)
        inv_freq[i] = 0;

    switch (p->mode) {
    case ROPE_SCALING_NONE:
    case ROPE_SCALING_NTK:
    case ROPE_SCALING_DYNAMIC:
    case ROPE_SCALING_REROPE: // the frequencies are the trained ones; attention clips the distance
    case ROPE_SCALING_LEAKY_REROPE:
    case ROPE_SCALING_SELFEXTEND: // ... or groups the positions (rope_init's far tables)
    case ROPE_SCALING_DCA:        // ... or counts them within chunks (rope_init)
        break;
    case ROPE_SCALING_PI:
        // Position Interpolation (Chen et al. 2023, arXiv 2306.15595): f'(x, m) = f(x, m/s).
        // Dividing every frequency by s is the same thing: m * (theta_i / s) = (m/s) * theta_i.
        for (int i = 0; i < half; i++)
            inv_freq[i] /= s;
        break;
    case ROPE_SCALING_DYNAMIC_YARN:
        // Dynamic YaRN (the YaRN paper's sec. 3.3, "Dynamic Scaling", applied to YaRN as its authors
        // recommend for models used without fine-tuning): YaRN below with s = max(1, l / L) for the
        // current length l, so a text no longer than L runs with the trained frequencies, and at the
        // full window l = ctx it is static YaRN with s = ctx / L. Rotation-consistent like dynamic
        // NTK: the keys are cached un-rotated and every one is turned with the current s.
        s = length > p->orig_ctx ? (double)length / p->orig_ctx : 1;
        // fall through
    case ROPE_SCALING_YARN: {
        // YaRN (Peng et al. 2023, arXiv 2309.00071, sec. 3.2-3.4, as transformers'
        // _compute_yarn_parameters computes it). Pairs that turn more than beta_fast times over
        // L keep their frequency (extrapolate), pairs that turn less than beta_slow times are
        // interpolated like PI, and a linear ramp over the pair index blends the ones between.
        double lo = floor(yarn_pair_with_turns(p->beta_fast, d, b, L));
        double hi = ceil(yarn_pair_with_turns(p->beta_slow, d, b, L));
        if (lo < 0) lo = 0;
        if (hi > d - 1) hi = d - 1;
        if (hi == lo) hi += 0.001; // as transformers: avoid dividing by zero
        for (int i = 0; i < half; i++) {
            double ramp = (i - lo) / (hi - lo); // 0 at fast pairs, 1 at slow pairs
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double keep = 1 - ramp; // transformers' inv_freq_extrapolation_factor
            inv_freq[i] = inv_freq[i] / s * (1 - keep) + inv_freq[i] * keep;
        }
        // Eq. 22: sqrt(1/t) = 0.1 ln(s) + 1, put on cos and sin so every logit q.k gets 1/t.
        *mscale = p->attn_factor > 0 ? p->attn_factor : 0.1 * log(s) + 1;
        break;
    }
    case ROPE_SCALING_LLAMA3: {
        // Llama 3.1 (Meta's apply_scaling; transformers _compute_llama3_parameters): by
        // wavelength lambda_i = 2*pi/theta_i, keep pairs with lambda < L/high_freq_factor,
        // divide by s those with lambda > L/low_freq_factor, blend linearly in L/lambda between.
        // From a GGUF file, the divisors this formula gave, pair by pair (rope.h, pair_divisor).
        if (p->pair_divisor) {
            for (int i = 0; i < half; i++)
                inv_freq[i] /= p->pair_divisor[i];
            break;
        }
        const double lf = p->low_freq_factor, hf = p->high_freq_factor;
        for (int i = 0; i < half; i++) {
            double wavelen = 2 * M_PI / inv_freq[i];
            if (wavelen > L / lf) {
                inv_freq[i] /= s;
            } else if (wavelen >= L / hf) {
                double smooth = (L / wavelen - lf) / (hf - lf);
                inv_freq[i] = (1 - smooth) * inv_freq[i] / s + smooth * inv_freq[i];
            }
        }
        break;
    }
    case ROPE_SCALING_LONGROPE: {
        // LongRoPE (Ding et al. 2024, arXiv 2402.13753; Phi-3's rope_scaling; transformers
        // _compute_longrope_parameters): a factor lambda_i per pair, found by search rather than by a
        // formula: theta_i = b^(-2i/d) / lambda_i. The short factors serve lengths up to L, the long
        // ones past it. Which set applies follows the current length l, like dynamic NTK's base:
        // every position (and every cached key) uses the set of the length the text has reached.
        // Attention factor (the paper's, as in YaRN): sqrt(1 + ln(s) / ln(L)), s the factor the model
        // was stretched by, unless the checkpoint gives one; it applies at every length.
        const double *lambda = length > p->orig_ctx ? p->long_factor : p->short_factor;
        for (int i = 0; i < half; i++)
            inv_freq[i] /= lambda[i];
        *mscale = p->attn_factor > 0 ? p->attn_factor : s <= 1 ? 1 : sqrt(1 + log(s) / log(L));
        break;
    }
    default:
        break;
    }
}

// ---------------------------------------------------------------------------------------------
// Tables of cos and sin per position

// Rows [0, n) of tables cos, sin from inv_freq, row m for the position at + m * step (RoPE's own
// tables: at 0, step 1; leaky ReRoPE's far path: fractional positions). The angle m * theta_i is
// formed in double: in float32
// it carries an error of about m * 6e-8 radians (1e-3 at m = 16k), which is the very range where
// the scaling modes are compared. Dynamic NTK fills them again at every step past L, so cos and sin
// are not called for every entry: from each position that is a multiple of 32 (computed directly)
// the next 31 follow by turning one step, (cos, sin)((m+1)theta) = (cos, sin)(m theta) rotated by
// theta, in double; 31 steps add an error of about 1e-14, far below a float's 6e-8.
static void fill_tables(const Rope *r, float *cos_out, float *sin_out, int n, double at, double step) {
    const int half = r->p.head_dim / 2, turning = r->p.rot_dims / 2; // pairs past `turning` stay put
    double step_c[half], step_s[half]; // one step of pair i: cos and sin of step * theta_i
    for (int i = 0; i < half; i++)
        step_c[i] = cos(step * r->inv_freq[i]), step_s[i] = sin(step * r->inv_freq[i]);
        // Runs of 32 positions are independent (each starts from cos and sin computed directly), so
        // the threads share them out when there are enough to pay for waking the threads.
#pragma omp parallel for if ((size_t)n * half >= 4096)
    for (int m0 = 0; m0 < n; m0 += 32) {
        double c[half], s[half]; // pair i at the current m
        for (int m = m0; m < n && m < m0 + 32; m++) {
            for (int i = 0; i < half; i++) { // the pairs are independent: their steps overlap in time
                if (m == m0) {
                    const double angle = (at + m * step) * r->inv_freq[i];
                    c[i] = cos(angle), s[i] = sin(angle);
                } else {
                    const double c1 = c[i] * step_c[i] - s[i] * step_s[i];
                    s[i] = s[i] * step_c[i] + c[i] * step_s[i], c[i] = c1;
                }
                // (a pair that does not turn keeps its magnitude too, as transformers' q_pass)
                cos_out[(size_t)m * half + i] = i < turning ? (float)(r->mscale * c[i]) : 1;
                sin_out[(size_t)m * half + i] = i < turning ? (float)(r->mscale * s[i]) : 0;
            }
        }
    }
}

// Self-Extend's tables: row m for the position at + floor(m / group), the same row for the group's
// members; every distinct row from cos and sin of its angle directly (a row per G positions).
static void fill_grouped(const Rope *r, float *cos_out, float *sin_out, int n, int at, int group) {
    const int half = r->p.head_dim / 2, turning = r->p.rot_dims / 2;
    for (int m = 0; m < n; m++) {
        float *c = cos_out + (size_t)m * half, *s = sin_out + (size_t)m * half;
        if (m % group) { // a later member of a group: the first one's row
            memcpy(c, c - half, (size_t)half * sizeof(float));
            memcpy(s, s - half, (size_t)half * sizeof(float));
            continue;
        }
        const double pos = at + m / group;
        for (int i = 0; i < half; i++) {
            c[i] = i < turning ? (float)(r->mscale * cos(pos * r->inv_freq[i])) : 1;
            s[i] = i < turning ? (float)(r->mscale * sin(pos * r->inv_freq[i])) : 0;
        }
    }
}

// Dual chunk attention's positions (An et al. 2024, "Training-Free Long-Context Scaling of Large
// Language Models", arXiv 2402.17463, sec. 3; HKUNLP/ChunkLlama chunkllama_attn_replace.py, its
// q_t, qc_t and k_t): chunks of c = S - w positions. A key at n sits at n mod c, as does the query at
// m against the keys of its own chunk (intra: distances below c, as trained); against the previous
// chunk the query sits at min(m mod c + c, S) (successive: the distance of neighbouring tokens
// across the boundary stays right, up to the local window w); against any earlier chunk at S
// (inter: every such key looks at least w and at most S away). Every position is below S < L.
static double dca_position(const RopeParams *p, int m, int which) {
    const int c = p->chunk - p->local_window, at = m % c;
    if (which == 0) return at;                       // keys, and the intra-chunk query
    if (which == 1) return at + c < p->chunk ? at + c : p->chunk; // the successive-chunk query
    return p->chunk;                                 // the inter-chunk query
}

// n rows of the table `which` of dca_position, each from cos and sin of its angle directly.
static void fill_dca(const Rope *r, float *cos_out, float *sin_out, int n, int which) {
    const int half = r->p.head_dim / 2, turning = r->p.rot_dims / 2;
    for (int m = 0; m < n; m++)
        for (int i = 0; i < half; i++) {
            const double angle = dca_position(&r->p, m, which) * r->inv_freq[i];
            cos_out[(size_t)m * half + i] = i < turning ? (float)(r->mscale * cos(angle)) : 1;
            sin_out[(size_t)m * half + i] = i < turning ? (float)(r->mscale * sin(angle)) : 0;
        }
}

int rope_init(Rope *r, const RopeParams *p, int n_pos, char *err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    r->p = *p;
    rope_params_defaults(&r->p, p->orig_ctx); // (p's zeros, as rope_params_check reads them)
    if (rope_params_check(&r->p, err, errlen)) return -1;
    if (n_pos < 1) {
        snprintf(err, errlen, "RoPE: the context must hold at least one position");
        return -1;
    }
    const size_t half = (size_t)p->head_dim / 2;
    r->n_pos = n_pos;
    r->inv_freq = malloc(half * sizeof(double));
    r->cos = malloc((size_t)n_pos * half * sizeof(float));
    r->sin = malloc((size_t)n_pos * half * sizeof(float));
    if (!r->inv_freq || !r->cos || !r->sin) {
        rope_free(r);
        snprintf(err, errlen, "RoPE: out of memory for the tables of %d positions", n_pos);
        return -1;
    }
    r->length = r->p.orig_ctx; // dynamic: up to L the frequencies are the unscaled ones
    rope_inv_freq(&r->p, r->length, r->inv_freq, &r->mscale, &r->eff_base);
    if (r->p.mode == ROPE_SCALING_DCA) { // README, "Dual chunk attention"
        r->far_cos = malloc((size_t)n_pos * half * sizeof(float));
        r->far_sin = malloc((size_t)n_pos * half * sizeof(float));
        r->inter_cos = malloc(half * sizeof(float));
        r->inter_sin = malloc(half * sizeof(float));
        if (!r->far_cos || !r->far_sin || !r->inter_cos || !r->inter_sin) {
            rope_free(r);
            snprintf(err, errlen, "RoPE: out of memory for the tables of %d positions", n_pos);
            return -1;
        }
        fill_dca(r, r->cos, r->sin, n_pos, 0);
        fill_dca(r, r->far_cos, r->far_sin, n_pos, 1);
        fill_dca(r, r->inter_cos, r->inter_sin, 1, 2);
        return 0;
    }
    fill_tables(r, r->cos, r->sin, n_pos, 0, 1);
    if (rope_far_path(&r->p)) { // the far path (README, "ReRoPE", "Self-Extend")
        const int leaky = r->p.mode != ROPE_SCALING_REROPE, rows = leaky ? n_pos : 1; // (leaky: per position)
        const double W = r->p.window, K = r->p.factor; // (leaky-rerope)
        r->far_cos = malloc((size_t)rows * half * sizeof(float));
        r->far_sin = malloc((size_t)rows * half * sizeof(float));
        if (leaky) {
            r->key_cos = malloc((size_t)n_pos * half * sizeof(float));
            r->key_sin = malloc((size_t)n_pos * half * sizeof(float));
        }
        if (!r->far_cos || !r->far_sin || (leaky && (!r->key_cos || !r->key_sin))) {
            rope_free(r);
            snprintf(err, errlen, "RoPE: out of memory for the tables of %d positions", n_pos);
            return -1;
        }
        // rerope: every query to W. leaky-rerope: the query at m to W + (m - W) / K = (W - W/K) + m / K,
        // the key at n to n / K (bojone/rerope leaky_rerope_patch.py: positions + W (K - 1) and
        // positions, both at 1/K the rate).
        // selfextend (Jin et al. 2024, "LLM Maybe LongLM", arXiv 2401.01325, eq. 3; LongLM's
        // self_extend_patch: group_query_position, group_key_position): the query at m to
        // floor(m / G) + W - floor(W / G), the key at n to floor(n / G).
        if (r->p.mode == ROPE_SCALING_SELFEXTEND) {
            const int G = r->p.group, w = r->p.window;
            fill_grouped(r, r->far_cos, r->far_sin, n_pos, w - w / G, G);
            fill_grouped(r, r->key_cos, r->key_sin, n_pos, 0, G);
        } else {
            fill_tables(r, r->far_cos, r->far_sin, rows, leaky ? W - W / K : W, leaky ? 1 / K : 0);
            if (leaky) fill_tables(r, r->key_cos, r->key_sin, n_pos, 0, 1 / K);
        }
    }
    return 0;
}

void rope_free(Rope *r) {
    free(r->inv_freq);
    free(r->cos);
    free(r->sin);
    free(r->far_cos);
    free(r->far_sin);
    free(r->key_cos);
    free(r->inter_cos);
    free(r->inter_sin);
    free(r->key_sin);
    memset(r, 0, sizeof(*r));
}

int rope_is_dynamic(const Rope *r) { return mode_of(r->p.mode)->follows_length; }

int rope_far_path(const RopeParams *p) { return mode_of(p->mode)->turns == 2; }

int rope_keys_unrotated(const RopeParams *p) { return mode_of(p->mode)->key_tables > 0; }

int rope_query_turns(const RopeParams *p) { return mode_of(p->mode)->turns; }

int rope_mode_in_file(int mode) { return mode >= 0 && mode < ROPE_SCALING_COUNT && MODES[mode].in_file; }

int rope_file_factors(const RopeParams *p) { return mode_of(p->mode)->pair_factors ? p->rot_dims / 2 : 0; }

// Dual chunk attention's chunk length c = S - w (positions per chunk); 0 for every other mode.
static int dca_chunk(const RopeParams *p) {
    return mode_of(p->mode)->knobs & ROPE_KNOB_CHUNK ? p->chunk - p->local_window : 0;
}

int rope_is_scaled(const RopeParams *p) { return p->mode != ROPE_SCALING_NONE; }

// leaky-rerope and selfextend turn a far key by a table of its own (n / K, floor(n / G)).
static int far_key_table(const RopeParams *p) { return mode_of(p->mode)->key_tables == 2; }

int rope_key_tables(const RopeParams *p) { return mode_of(p->mode)->key_tables; }

// rope_init's tables: cos and sin for every position; rerope one far row more; leaky-rerope and
// selfextend a far and a key table of every position more; dca a far table and the inter row.
size_t rope_table_rows(const RopeParams *p, int ctx) {
    if (p->mode == ROPE_SCALING_DCA) return (size_t)ctx * 2 + 1;
    return (size_t)ctx * (far_key_table(p) ? 3 : 1) + (p->mode == ROPE_SCALING_REROPE);
}

double rope_covers(const RopeParams *p, int ctx, double *fix) {
    const double L = p->orig_ctx, W = p->window;
    switch (p->mode) {
    case ROPE_SCALING_PI:
    case ROPE_SCALING_NTK:
    case ROPE_SCALING_YARN:
    case ROPE_SCALING_LLAMA3:
        *fix = ctx / L;
        return p->factor * L;
    case ROPE_SCALING_LEAKY_REROPE:
        *fix = (ctx - W) / (L - W);
        return W + p->factor * (L - W);
    case ROPE_SCALING_SELFEXTEND: // a whole G: (L - W) G + W, the capacity of LongLM's paper
        *fix = ceil((ctx - W) / (L - W));
        return W + p->group * (L - W);
    case ROPE_SCALING_NONE:
    case ROPE_SCALING_DYNAMIC:
    case ROPE_SCALING_REROPE:
    case ROPE_SCALING_LONGROPE:
    case ROPE_SCALING_DYNAMIC_YARN:
    case ROPE_SCALING_DCA:
        break;
    }
    *fix = 0;
    return 0;
}

void rope_describe(const Rope *r, int ctx, char *buf, size_t len) {
    const RopeParams *p = &r->p;
    size_t n = (size_t)snprintf(buf, len, "%s, base %g", rope_scaling_name(p->mode), p->base);
#define MORE(...) (n += n < len ? (size_t)snprintf(buf + n, len - n, __VA_ARGS__) : 0)
    if (p->mode == ROPE_SCALING_LONGROPE) {
        MORE(" (short factors up to L, long ones past it)");
    } else if (p->pair_divisor) {
        double lo = p->pair_divisor[0], hi = lo;
        for (int i = 1; i < p->rot_dims / 2; i++)
            lo = fmin(lo, p->pair_divisor[i]), hi = fmax(hi, p->pair_divisor[i]);
        MORE(" (the file's divisor per pair, rope_freqs.weight: %g to %g)", lo, hi);
    } else if (p->mode == ROPE_SCALING_DYNAMIC_YARN) {
        MORE(" (past L the factor is the length over L: %g at %d)", ctx > p->orig_ctx ? (double)ctx / p->orig_ctx : 1.0,
             ctx);
    } else if (rope_is_dynamic(r)) { // the base follows the length: show where it ends up
        double inv_freq[ROPE_MAX_PAIRS], mscale, at_ctx;
        rope_inv_freq(p, ctx, inv_freq, &mscale, &at_ctx);
        MORE(" (past L it grows with the length, to %g at %d)", at_ctx, ctx);
    } else if (r->eff_base != p->base) {
        MORE(" (effective %g)", r->eff_base);
    }
    if (p->mode == ROPE_SCALING_REROPE)
        MORE(", window W = %d (distances past W scored as W)", p->window);
    else if (p->mode == ROPE_SCALING_LEAKY_REROPE)
        MORE(", window W = %d, K = %g (distance r past W scored as W + (r - W) / K)", p->window, p->factor);
    else if (p->mode == ROPE_SCALING_SELFEXTEND)
        MORE(", neighbour window W = %d, group G = %d (a key at distance >= W scored at floor(m/G) + W - "
             "floor(W/G) against floor(n/G); capacity (L - W) G + W = %g)",
             p->window, p->group, p->window + (double)p->group * (p->orig_ctx - p->window));
    else if (p->mode == ROPE_SCALING_DCA)
        MORE(", chunk S = %d, local window w = %d (chunks of %d: a key at n mod c, the query at m mod c in its "
             "own chunk, min(m mod c + c, S) in the previous one, S in earlier ones)",
             p->chunk, p->local_window, p->chunk - p->local_window);
    if (!rope_far_path(p) && !p->pair_divisor && (rope_takes(p->mode, ROPE_KNOB_FACTOR) || !rope_is_scaled(p))) // (leaky: K above)
        MORE(", factor %g", p->factor);
    if (p->rot_dims < p->head_dim) MORE(", %d of %d dimensions turn", p->rot_dims, p->head_dim);
    MORE(", trained context L = %d, attention factor %g", p->orig_ctx, r->mscale);
#undef MORE
}

// Dynamic NTK: when the sequence grows past L, every frequency changes with it, so every cached
// key must be rotated again (the caller watches `version`). Lengths up to L all share the
// unscaled frequencies, so nothing changes there. Dynamic YaRN: the same, its factor l / L in
// place of the base. LongRoPE: the same, at one step: the short
// factors up to L, the long ones for any length past it. transformers also switches when a
// forward's length passes L but keeps the keys it cached with the short factors (stale keys, as
// its issue 25104 describes for dynamic NTK); llama.cpp picks one set from the context size (n_ctx
// > L: long) for the whole run. Here every cached key is turned with the set of the current length,
// so generation and one forward pass over the same text agree.
static void fill_keys(const Rope *r, float *table, const float *cos, const float *sin);

void rope_set_length(Rope *r, int length) {
    if (!rope_is_dynamic(r)) return;
    int l = length > r->p.orig_ctx ? length : r->p.orig_ctx;
    if (r->p.mode == ROPE_SCALING_LONGROPE) l = length > r->p.orig_ctx ? r->p.orig_ctx + 1 : r->p.orig_ctx; // a side of L
    // (dynamic-yarn, like dynamic, at every length past L)
    if (l == r->length) return;
    r->length = l;
    rope_inv_freq(&r->p, l, r->inv_freq, &r->mscale, &r->eff_base);
    fill_tables(r, r->cos, r->sin, r->n_pos, 0, 1); // every position: never two bases at once
    if (r->keys) fill_keys(r, r->keys, r->cos, r->sin); // and every cached key turned with them
    r->version++;
}

// ---------------------------------------------------------------------------------------------
// What attention reads: the key tables and the turns (rope.h)

size_t rope_key_floats(const RopeParams *p, int ctx) {
    return ((size_t)ctx + ROPE_KEY_BLOCK - 1) / ROPE_KEY_BLOCK * ROPE_KEY_BLOCK * (size_t)p->head_dim;
}

// A key table from cos, sin ((n_pos, head_dim / 2) each) in attention's layout: per block of
// ROPE_KEY_BLOCK positions and pair p, the block's cosines in row 2p and its sines in row 2p + 1.
static void fill_keys(const Rope *r, float *table, const float *cos, const float *sin) {
    const int half = r->p.head_dim / 2, hd = r->p.head_dim, B = ROPE_KEY_BLOCK;
#pragma omp parallel for if ((size_t)r->n_pos * half >= 4096)
    for (int j = 0; j < r->n_pos; j++) {
        float *block = table + (size_t)(j / B) * hd * B + j % B;
        for (int p = 0; p < half; p++) {
            block[(size_t)2 * p * B] = cos[(size_t)j * half + p];
            block[(size_t)(2 * p + 1) * B] = sin[(size_t)j * half + p];
        }
    }
}

void rope_set_keys(Rope *r, float *tables) {
    r->keys = rope_key_tables(&r->p) ? tables : NULL;
    if (!r->keys) return;
    fill_keys(r, r->keys, r->cos, r->sin);
    if (r->key_cos) fill_keys(r, r->keys + rope_key_floats(&r->p, r->n_pos), r->key_cos, r->key_sin);
}

RopeAttention rope_attention(const Rope *r, int rotates) {
    RopeAttention a = {.turns = 1};
    if (!rotates) return a; // a NoPE layer: q . k as they came out of wq and wk
    a.turns = rope_query_turns(&r->p);
    a.keys[0] = r->keys; // NULL: keys cached rotated
    // the far path: leaky-rerope's and selfextend's table 1, rerope's keys as cached
    a.keys[1] = r->key_cos ? r->keys + rope_key_floats(&r->p, r->n_pos) : NULL;
    a.window = rope_far_path(&r->p) ? r->p.window : 0;
    a.chunk = dca_chunk(&r->p);
    return a;
}

// ---------------------------------------------------------------------------------------------
// The rotation

// Rotate one head by the table rows c, s: pair i = (x[2i], x[2i+1]) turns by the angle whose cos and
// sin are c[i], s[i]. This is the block-diagonal matrix R_pos of the RoFormer paper (eq. 15) applied
// without building it, and the vector form x * [c0 c0 c1 c1 ...] + (-x1, x0, -x3, x2, ...) *
// [s0 s0 s1 s1 ...] written pair by pair (README, "The vector form, and a worked example";
// tests/test_rope_math.py).
static void rotate_with(float *x, const float *c, const float *s, int half) {
    for (int i = 0; i < half; i++) {
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = rope_turn0(x0, x1, c[i], s[i]);
        x[2 * i + 1] = rope_turn1(x0, x1, c[i], s[i]);
    }
}

void rope_shift_angles(const Rope *r, int by, float *cos_by, float *sin_by) {
    for (int i = 0; i < r->p.head_dim / 2; i++) {
        cos_by[i] = (float)cos(by * r->inv_freq[i]);
        sin_by[i] = (float)sin(by * r->inv_freq[i]);
    }
}

// Rotate one head to position pos: pair i turns by pos * theta_i.
void rope_rotate(const Rope *r, float *x, int pos) {
    const size_t half = (size_t)r->p.head_dim / 2;
    rotate_with(x, r->cos + pos * half, r->sin + pos * half, (int)half);
}

// A query's turn t > 0: the far path's table (rerope: one row, W, for every position; the others a
// row per position), dca's successive-chunk table (t = 1) or its one inter-chunk row (t = 2).
void rope_rotate_turn(const Rope *r, float *x, int pos, int t) {
    const size_t half = (size_t)r->p.head_dim / 2, row = r->p.mode == ROPE_SCALING_REROPE ? 0 : (size_t)pos;
    if (t == 2)
        rotate_with(x, r->inter_cos, r->inter_sin, (int)half);
    else
        rotate_with(x, r->far_cos + row * half, r->far_sin + row * half, (int)half);
}
