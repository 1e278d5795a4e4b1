// rope.h - rotary position embedding (RoPE) and the context-extension scalings.
//
// Everything positional is decided here: the frequencies of every scaling mode, the cos/sin tables,
// the parameter rules, and what attention reads of RoPE. Each mode is one row of rope.c's MODES
// table (its names, whether a file may carry it, whether it follows the length, its query turns and
// key tables, the flags it takes and their defaults, its line in --help and its source); the
// predicates below, the rules and their messages, and --help's list of modes are read from it.
// Where the rotations happen:
//   queries and keys    rope_rotate (turn 0) and rope_rotate_turn (a query's other turns), called by
//                       model.c's rope_qk for each head;
//   cached keys         when a mode keeps them un-rotated (rope_keys_unrotated: the frequencies of
//                       dynamic NTK, dynamic YaRN and LongRoPE follow the length; rerope,
//                       leaky-rerope, Self-Extend and dual chunk attention score a key at more than
//                       one rotation), attention turns each block of them as it reads it with a key
//                       table that rope.c fills (rope_set_keys), and fills again when the frequencies
//                       change (rope_set_length);
//   a context shift     kernels.c's kv_shift turns the kept keys back by rope_shift_angles.
// The forward pass (model.c) says "the sequence is now l tokens long" (rope_set_length, which only
// the modes that follow the length react to), asks how many turns of each query and key tables to
// make room for (rope_query_turns, rope_key_tables), and never looks at the scaling mode itself.
//
// What attention reads of RoPE (RopeAttention, one per layer, which the KV cache points to):
// every mode scores a query at m against a key at n as (R_a q) . (R_b k) for some rotation a of the
// query (a "turn") and b of the key (a key table, or the key as cached), and which a and b depends
// only on where n lies relative to m. So a query's keys 0 .. m fall into at most three segments
// (RopeSegment): keys [from, to), the query's turn, the key table. rope_segments says where they are:
//   one turn (none, pi, ntk, yarn, llama3; dynamic, dynamic-yarn, longrope with the key table of
//     the current frequencies):        [0, m + 1) turn 0
//   a window W (rerope, leaky-rerope, selfextend): far keys [0, m - W + 1) turn 1 with key table 1,
//     near keys [m - W + 1, m + 1) turn 0 with key table 0 (README, "ReRoPE", "Self-Extend")
//   chunks of c (dca): the chunks before the previous one turn 2, the previous chunk turn 1, the
//     query's own chunk turn 0, every key with table 0 (to n mod c) (README, "Dual chunk attention")
// Attention loops over segments and knows no mode. Its fast path scores tasks of several queries
// at once, whose segments differ: asked for a run of queries m0 .. m1, rope_segments gives for each
// (turn, key table) the smallest key range that any of them scores that way. Where the queries
// agree the ranges do not overlap and each key is scored once; only where they disagree is a key
// scored both ways (up to m1 - m0 keys at a window's edge; across a chunk boundary, the chunk on
// each side of it), and each query then keeps the score of its own segment (rope_segments of that
// query alone). tests/test_rope.c checks both properties for every mode.
// A segment has no offset into its key table: attention turns a block of 32 cached keys with the
// block of the table beside it (ROPE_KEY_BLOCK), so a table is indexed by the key's own position.
//
// Layout: pairs are interleaved, (x0,x1), (x2,x3), ... as in the RoFormer paper and Meta's and
// llama2.c's code. Hugging Face checkpoints use the rotate_half layout; export/export.py permutes
// their q/k rows into this one (see the README, "Two layouts").
#ifndef ROPE_H
#define ROPE_H

#include <stddef.h>

// The widest head this program runs: the loader refuses a wider one, and every fixed array of a
// head's pairs (the context shift's angles, a key turned back) is this long.
#define ROPE_MAX_HEAD_DIM 1024
#define ROPE_MAX_PAIRS (ROPE_MAX_HEAD_DIM / 2)

// One RoPE pair turn, written once: the pair (x0, x1) turned by the angle whose cosine and sine are
// c and s becomes (x0 c - x1 s, x0 s + x1 c); with -s it turns back. rope.c rotates queries and
// keys with it, kernels.c turns cached keys as attention reads them and back at a context shift.
static inline float rope_turn0(float x0, float x1, float c, float s) { return x0 * c - x1 * s; }
static inline float rope_turn1(float x0, float x1, float c, float s) { return x0 * s + x1 * c; }

// The numbers are stored in the model file header; do not reorder. A new mode takes the next number
// and a row in rope.c's MODES table.
typedef enum {
    ROPE_SCALING_NONE = 0,    // theta_i = b^(-2i/d)
    ROPE_SCALING_PI = 1,      // position interpolation: theta_i / s       (HF "linear")
    ROPE_SCALING_NTK = 2,     // NTK-aware base change: b' = b * alpha^(d/(d-2))
    ROPE_SCALING_DYNAMIC = 3, // dynamic NTK: the base follows the current length l > L
    ROPE_SCALING_YARN = 4,    // YaRN: per-pair blend of PI and none, plus attention factor
    ROPE_SCALING_LLAMA3 = 5,  // Llama 3.1: three wavelength bands
    // Run-time only (a model file never carries them; loader.c refuses them in a header): the
    // relative position is clipped in attention, not the frequencies changed (Su 2023, ReRoPE).
    ROPE_SCALING_REROPE = 6,       // distances r >= W are scored as W
    ROPE_SCALING_LEAKY_REROPE = 7, // distances r >= W are scored as W + (r - W) / K, K = factor
    // LongRoPE (Phi-3): a factor per pair, the short ones up to L and the long ones past it.
    ROPE_SCALING_LONGROPE = 8,
    // Run-time only, like the rerope modes:
    ROPE_SCALING_SELFEXTEND = 9,   // Self-Extend: keys at distance >= W scored at positions grouped G to one
    ROPE_SCALING_DYNAMIC_YARN = 10, // YaRN whose factor follows the length: s = max(1, l / L)
    ROPE_SCALING_DCA = 11,          // dual chunk attention: positions within chunks, three query turns
} RopeScaling;
#define ROPE_SCALING_COUNT (ROPE_SCALING_DCA + 1) // how many there are: not a mode, so no switch needs a case for it

// ---------------------------------------------------------------------------------------------
// What attention reads (the design is at the top of this file)

// Key tables are in the layout of attention's cached keys (kernels.c): positions in blocks of
// ROPE_KEY_BLOCK, each block (head_dim, ROPE_KEY_BLOCK): row 2p the cosines of pair p at the block's
// positions, row 2p + 1 the sines. So a block of keys is turned by the block of the table beside it.
#define ROPE_KEY_BLOCK 32
#define ROPE_KEY_TABLES 2  // at most: table 0, the keys' own positions; table 1, a far path's
#define ROPE_MAX_SEGMENTS 3

typedef struct {
    int from, to; // keys [from, to)
    int turn;     // the query's turn that scores them: 0 is q, t > 0 is row t - 1 of q_far (rope_turn_at)
    int key;      // the key table that turns them: RopeAttention.keys[key], NULL meaning as cached
} RopeSegment;

typedef struct {
    int turns;                            // the turns of each query attention reads: q, and turns - 1 more
    const float *keys[ROPE_KEY_TABLES];   // key tables in the layout above; NULL: keys as cached
    int window;                           // > 0: keys at distance >= window take turn 1 and table 1
    int chunk;                            // > 0: chunks of this many positions, turns 0, 1, 2
} RopeAttention;

// The segments of the queries m0 .. m1 (m0 <= m1) over the keys 0 .. m1: per (turn, key table) the
// smallest range holding every key that one of the queries scores that way, in order; empty ones
// left out. For one query (m0 == m1) they partition [0, m + 1). Returns how many.
static inline int rope_segments(const RopeAttention *a, int m0, int m1, RopeSegment seg[ROPE_MAX_SEGMENTS]) {
    int n = 0;
#define ROPE_SEGMENT(f, t, turn_, key_)                                                                       \
    if ((f) < (t)) seg[n++] = (RopeSegment){(f), (t), (turn_), (key_)}
    const int end = m1 + 1;
    if (a->chunk > 0) { // a query in chunk k: keys before chunk k - 1, in chunk k - 1, in chunk k
        const int c = a->chunk, k0 = m0 / c, k1 = m1 / c, prev0 = (k0 - 1) * c > 0 ? (k0 - 1) * c : 0;
        ROPE_SEGMENT(0, (k1 - 1) * c, 2, 0);
        ROPE_SEGMENT(prev0, k1 * c < end ? k1 * c : end, 1, 0);
        ROPE_SEGMENT(k0 * c, end, 0, 0);
    } else if (a->window > 0) { // far: m - n >= W, near: m - n < W
        const int near0 = m0 - a->window + 1 > 0 ? m0 - a->window + 1 : 0;
        ROPE_SEGMENT(0, end - a->window, 1, 1);
        ROPE_SEGMENT(near0, end, 0, 0);
    } else {
        ROPE_SEGMENT(0, end, 0, 0);
    }
#undef ROPE_SEGMENT
    return n;
}

// Where turn t > 0 of query i sits in q_far, in floats: row i holds turns 1 .. turns - 1 of every
// head, qd = n_heads * head_dim floats each (model.c writes them, attention reads them).
static inline size_t rope_turn_at(int turns, size_t qd, int i, int t) { return ((size_t)i * (turns - 1) + t - 1) * qd; }

// ---------------------------------------------------------------------------------------------
// Parameters and tables

// Everything that decides the frequencies. A field the mode does not use is 0; a field it uses that
// is 0 takes the mode's default (rope_params_defaults).
typedef struct {
    RopeScaling mode;
    int head_dim;            // the head's size; the tables have head_dim / 2 pairs
    int rot_dims;            // d: the dimensions that turn, the first d of the head (partial rotary);
                             // pairs from d / 2 on pass through (cos 1, sin 0). 0 = head_dim

    int orig_ctx;            // L: context the model was trained with (YaRN/llama3: original_max_pos)
    double base;             // b: rope_theta
    double factor;           // s: context extension factor (>= 1); leaky-rerope: K, the rate past W;
                             // 1 for the modes that take none (none, rerope, selfextend, dynamic-yarn, dca)
    double alpha;            // ntk only: alpha of the base change; 0 = use factor
    double attn_factor;      // yarn, dynamic-yarn, longrope: magnitude on cos and sin; 0 = the paper's
    double beta_fast;        // yarn, dynamic-yarn: ramp starts at pairs with this many turns over L (32)
    double beta_slow;        // yarn, dynamic-yarn: ramp ends at pairs with this many turns over L (1)
    double low_freq_factor;  // llama3 only: wavelengths above L/low_freq_factor are divided by s
    double high_freq_factor; // llama3 only: wavelengths below L/high_freq_factor are kept
    int window;              // rerope, leaky-rerope, selfextend: W; keys at distances below it are
                             // scored as trained, the ones from W on by the far path
    int group;               // selfextend only: G, far positions grouped G to one (floor(n / G))
    int local_window;        // dca only: its local window w, chunks holding c = chunk - w positions
    int chunk;               // dca only: the chunk size S
    // longrope only: rot_dims / 2 factors each, pair i's frequency divided by short_factor[i] for
    // lengths up to L, by long_factor[i] past it (pointers into the model file, or the caller's)
    const double *short_factor, *long_factor;
    // llama3 from a GGUF file only: rot_dims / 2 divisors, pair i's frequency divided by
    // pair_divisor[i], in place of the bands' formula (llama.cpp's converter writes a llama3
    // rope_scaling as the tensor rope_freqs.weight, the formula's result per pair; a pointer into the
    // file). NULL otherwise.
    const float *pair_divisor;
} RopeParams;

typedef struct {
    RopeParams p;
    int n_pos;      // the tables cover positions [0, n_pos)
    int length;       // dynamic: sequence length the tables were computed for
    double eff_base;  // base after any base change (ntk, dynamic), for the banner
    double mscale;    // magnitude folded into cos and sin (yarn), else 1
    unsigned version; // increases whenever the tables change (dynamic, dynamic-yarn, longrope)
    double *inv_freq; // (head_dim/2) theta_i after scaling, in double
    float *cos;       // (n_pos, head_dim/2) mscale * cos(m * theta_i)
    float *sin;       // (n_pos, head_dim/2) mscale * sin(m * theta_i)
    // rerope, leaky-rerope, selfextend (else NULL): the far path's rotations. far_cos, far_sin: of a
    // query at m, to W (rerope: one row, the same for every m), to W + (m - W) / K (leaky-rerope) or
    // to floor(m / G) + W - floor(W / G) (selfextend; n_pos rows for both); key_cos, key_sin
    // (leaky-rerope, selfextend; n_pos rows): of a key at n, to n / K or floor(n / G). The score of a
    // far key is then (R(W + (m - W)/K) q) . (R(n/K) k) = q^T R(-(W + (m - n - W)/K)) k: relative
    // again (selfextend: relative to the groups, floor(m/G) - floor(n/G) + W - floor(W/G)).
    float *far_cos, *far_sin, *key_cos, *key_sin;
    // dca (else NULL): the inter-chunk query's one row, at S. Its cos and sin (n_pos rows) are of
    // m mod c, for keys and the intra-chunk query; far_cos, far_sin of min(m mod c + c, S), the
    // successive-chunk query.
    float *inter_cos, *inter_sin;
    // The key tables attention turns cached keys with (rope_set_keys; NULL when keys are cached
    // rotated): table 0 of the keys' own positions (cos, sin), table 1 of the far path's (key_cos,
    // key_sin), each rope_key_floats long. Not owned: the run state's memory.
    float *keys;
} Rope;

// The modes by name, for the command line and the banner (rope.c's MODES table holds the list:
// none, pi (alias linear), ntk, dynamic, yarn, llama3, rerope, leaky-rerope, longrope, selfextend,
// dynamic-yarn, dca).
const char *rope_scaling_name(RopeScaling mode);
int rope_scaling_from_name(const char *name, RopeScaling *mode); // 0 ok, -1 unknown name
// Every mode's name in order, for messages: "none, pi (or linear), ntk, ...". Always NUL-terminated.
void rope_scaling_names(char *buf, size_t len);
// For --help: the mode's other name (Hugging Face's; NULL if none), what it does in a line, and
// where its formula comes from. NULL for a number that is no mode.
const char *rope_scaling_alias(int mode);
const char *rope_scaling_about(int mode);
const char *rope_scaling_source(int mode);

// The overrides a mode may take (RopeOverrides, the flags that set them), one bit each. --rope-base
// applies to every mode.
typedef enum {
    ROPE_KNOB_FACTOR = 1,  // --rope-factor: s (leaky-rerope: K)
    ROPE_KNOB_ALPHA = 2,   // --rope-alpha: ntk's alpha
    ROPE_KNOB_WINDOW = 4,  // --rope-window: W of rerope, leaky-rerope, selfextend
    ROPE_KNOB_LOCAL = 8,   // --rope-window: dca's local window w
    ROPE_KNOB_GROUP = 16,  // --grp-attn-n: selfextend's G
    ROPE_KNOB_CHUNK = 32,  // --dca-chunk: dca's S
} RopeKnob;
// Whether mode takes one of the knobs.
int rope_takes(int mode, unsigned knobs);
// The modes that take one of the knobs, as "a, b and c" (--help, messages). Always NUL-terminated.
void rope_modes_taking(unsigned knobs, char *buf, size_t len);

// What the user asked on the command line. Unset fields: mode -1, the others 0.
typedef struct {
    int mode;      // RopeScaling, or -1 to keep the checkpoint's own
    double factor; // --rope-factor; 0 = the mode's default (rope_params_defaults)
    double base;   // --rope-base; 0 = the checkpoint's rope_theta
    double alpha;  // --rope-alpha (ntk); 0 = factor
    int window;    // --rope-window, --grp-attn-w: W (rerope, leaky-rerope, selfextend), w (dca); 0 = default
    int group;     // --grp-attn-n (selfextend): G; 0 = the smallest that covers the context
    int chunk;     // --dca-chunk (dca): S; 0 = 3 L / 4
} RopeOverrides;

// The rules an override can break, one code each. rope_params_resolve owns the rules and writes the
// message (which flag broke one, and how to fix it: the mode's row in rope.c's MODES); run.c prints it.
typedef enum {
    ROPE_OK = 0,
    ROPE_KNOB_NOT_TAKEN,   // --rope-alpha, --rope-window, --grp-attn-n or --dca-chunk with a mode that takes none
    ROPE_FACTOR_NOT_TAKEN, // --rope-factor with a mode that takes none (none, rerope, selfextend, ...)
    ROPE_FACTOR_PLAIN,     // a factor that leaves the mode plain RoPE (leaky-rerope with K = 1)
    ROPE_NO_PAIR_FACTORS,  // longrope, and the checkpoint has no short and long factors
    ROPE_BAD_VALUE,        // a parameter out of its range (rope_params_check)
} RopeRule;

// The parameters for a run at context ctx: the checkpoint's own (trained), with the user's overrides
// on top, and the mode's defaults in every field left 0. Returns ROPE_OK, or the rule broken with a
// message in err.
RopeRule rope_params_resolve(RopeParams *out, const RopeParams *trained, int ctx, const RopeOverrides *o, char *err,
                             size_t errlen);

// The one place defaults are filled: each field of p's mode still 0 takes the mode's default (rope.c's
// MODES: yarn's beta 32 and 1, llama3's 1 and 4, W = L / 4, dca's S = 3 L / 4 and w = L / 16; the
// factor by the mode's rule for a context of ctx, 1 at ctx = L; G the smallest that covers ctx).
// Tests and tools that make parameters by hand call it with ctx = L.
void rope_params_defaults(RopeParams *p, int ctx);

// Check every field, the zeros read as rope_params_defaults would fill them at L (a model file's
// header leaves the defaults 0); writes nothing to p. 0, or -1 with a message in err.
int rope_params_check(const RopeParams *p, char *err, size_t errlen);

// Inverse frequencies theta_i (head_dim/2 of them; 0 for the pairs past rot_dims / 2, which do not
// turn) for sequence length `length` (only the modes that follow the length look at it: dynamic,
// dynamic-yarn, longrope) and the attention magnitude; pure math, no allocation. p complete
// (rope_params_resolve or rope_params_defaults). Tests call it directly.
void rope_inv_freq(const RopeParams *p, int length, double *inv_freq, double *mscale, double *eff_base);

// Allocate tables for positions [0, n_pos) for the parameters p (rope_params_resolve's; a field left
// 0 takes its default at L, as rope_params_check reads it), which it checks. Returns 0, or -1 with a
// message in err.
int rope_init(Rope *r, const RopeParams *p, int n_pos, char *err, size_t errlen);
void rope_free(Rope *r);

// Tell rope the current sequence length (tokens so far, including the ones being processed).
// Only the modes that follow the length react (dynamic NTK, dynamic YaRN, longrope): when the
// frequencies for this length differ from the current ones (dynamic: the base; dynamic-yarn: the
// factor; longrope: short or long factors) it recomputes the tables for every position, and the key
// tables, and bumps version. The frequencies always follow the length given, also when it is
// shorter than before (a new sequence); Hugging Face instead keeps the largest base it has seen
// until the length drops below L.
void rope_set_length(Rope *r, int length);

// The predicates below read the mode's row in rope.c's MODES table.
// True when rope_set_length can change the tables (dynamic NTK, dynamic YaRN, longrope; keys are then
// cached un-rotated).
int rope_is_dynamic(const Rope *r);
// True for rerope, leaky-rerope and selfextend: attention scores the keys at distance >= window by
// another path (the query's turn 1, key table 1: rope_segments).
int rope_far_path(const RopeParams *p);
// How many rotations of each query attention reads: 1; 2 for the far-path modes (near, far); 3 for
// dca (intra, successive, inter chunk). model.c keeps the ones past the first in q_far.
int rope_query_turns(const RopeParams *p);
// The model file's side (loader.c): whether a checkpoint can carry the mode (none, pi, ntk, dynamic,
// yarn, llama3, longrope; the others are chosen at run time), and how many per-pair factors of each set
// follow the header for it (longrope: rot_dims / 2 short, then as many long; else 0).
int rope_mode_in_file(int mode);
int rope_file_factors(const RopeParams *p);
// True for every mode but none: something changes past the trained context.
int rope_is_scaled(const RopeParams *p);
// True when the keys must be cached un-rotated: the modes whose frequencies follow the length
// (dynamic, dynamic-yarn, longrope) and those that score a key at more than one rotation (rerope,
// leaky-rerope, selfextend, dca).
int rope_keys_unrotated(const RopeParams *p);

// How many key tables the un-rotated cached keys need when attention turns them (model.c):
// 0 when keys are cached rotated, 1 for dynamic, dynamic-yarn, longrope, rerope and dca, 2 for
// leaky-rerope and selfextend (near and far).
int rope_key_tables(const RopeParams *p);
// The floats of one key table for a context of ctx positions: whole blocks of ROPE_KEY_BLOCK
// positions, head_dim floats each.
size_t rope_key_floats(const RopeParams *p, int ctx);
// Hand rope the memory of its key tables (rope_key_tables of rope_key_floats each, 64-byte aligned)
// and fill them; rope_set_length fills table 0 again whenever the frequencies change.
void rope_set_keys(Rope *r, float *tables);
// What attention reads of this RoPE in a layer whose queries and keys rotate (rotates = 1), or in a
// layer without RoPE (SmolLM3's NoPE layers: one turn, keys as cached).
RopeAttention rope_attention(const Rope *r, int rotates);
// The rows of head_dim floats (cos and sin) rope_init allocates for a context of ctx positions.
size_t rope_table_rows(const RopeParams *p, int ctx);

// The positions the factor covers: s L for pi, ntk, yarn and llama3; W + K (L - W) for
// leaky-rerope, whose farthest distance then lands on L; W + G (L - W) for selfextend, whose reach is
// its group size G. 0 for the modes that cover any length (dynamic, dynamic-yarn and longrope follow
// it; dca's chunks repeat) or have nothing to cover it with (none, rerope). *fix: the factor (G) that
// would cover ctx.
double rope_covers(const RopeParams *p, int ctx, double *fix);

// The cosine and sine of every pair's angle for a move of `by` positions (the context shift turns
// cached keys back by it): head_dim / 2 of each.
void rope_shift_angles(const Rope *r, int by, float *cos, float *sin);

// The banner's description of a run's RoPE: mode, base (and where dynamic's ends up at ctx),
// window, factor, trained context, attention factor. Into buf, always NUL-terminated.
void rope_describe(const Rope *r, int ctx, char *buf, size_t len);

// Rotate one head x (head_dim floats, interleaved pairs) to position pos.
void rope_rotate(const Rope *r, float *x, int pos);
// Rotate one head of the query at pos for its turn t (1 .. rope_query_turns - 1): the far keys of
// rerope (to W), leaky-rerope (to W + (pos - W) / K) and selfextend (to floor(pos/G) + W - floor(W/G))
// for t = 1; dca's previous chunk (t = 1, to min(pos mod c + c, S)) and earlier chunks (t = 2, to S).
void rope_rotate_turn(const Rope *r, float *x, int pos, int t);

#endif
