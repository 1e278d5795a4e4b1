// rope.h - rotary position embedding (RoPE) and the context-extension scalings.
//
// Everything positional is decided here: the frequencies of every scaling mode, the cos/sin tables,
// the parameter rules, what a mode needs of the rest of the program, and the one pair turn
// (rope_turn0/1) every rotation uses. Where the rotations happen:
//   queries and keys    rope_rotate / rope_rotate_far / rope_rotate_inter, called by model.c's
//                       rope_qk for each head (rope_query_turns of each query);
//   cached keys         when a mode keeps them un-rotated (rope_keys_unrotated: dynamic NTK, dynamic
//                       YaRN and LongRoPE, whose frequencies follow the length; the rerope modes,
//                       Self-Extend and dual chunk attention, which score a key at more than one
//                       rotation), attention turns them as it reads them (kernels.c key_turned for
//                       the reference, kernels_attention.c rotate_block for the fast path) with
//                       rotation tables that kv_set_rotation lays out from rope.c's cos and sin
//                       (rope_key_tables of them), again whenever model.c sees Rope.version move;
//   a context shift     kernels.c's kv_shift turns the kept keys back by rope_shift_angles.
// The forward pass asks "the sequence is now l tokens long" (rope_set_length, which only the modes
// that follow the length react to) and never looks at the scaling mode itself.
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

// The numbers are stored in the model file header; do not reorder.
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
    ROPE_SCALING_SELFEXTEND = 9,   // Self-Extend: keys at distance >= W scored at grouped positions
    ROPE_SCALING_DYNAMIC_YARN = 10, // YaRN whose factor follows the length: s = max(1, l / L)
    ROPE_SCALING_DCA = 11,          // dual chunk attention: positions within chunks, three query turns
} RopeScaling;
#define ROPE_SCALING_COUNT (ROPE_SCALING_DCA + 1) // how many there are: not a mode, so no switch needs a case for it

// Everything that decides the frequencies. Fields that a mode does not use are ignored.
typedef struct {
    RopeScaling mode;
    int head_dim;            // the head's size; the tables have head_dim / 2 pairs
    int rot_dims;            // d: the dimensions that turn, the first d of the head (partial rotary);
                             // pairs from d / 2 on pass through (cos 1, sin 0). 0 = head_dim

    int orig_ctx;            // L: context the model was trained with (YaRN/llama3: original_max_pos)
    double base;             // b: rope_theta
    double factor;           // s: context extension factor (>= 1)
    double alpha;            // ntk only: alpha of the base change; 0 = use factor
    double attn_factor;      // yarn only: magnitude on cos and sin; 0 = 0.1*ln(s) + 1
    double beta_fast;        // yarn only: ramp starts at pairs with this many turns over L (32)
    double beta_slow;        // yarn only: ramp ends at pairs with this many turns over L (1)
    double low_freq_factor;  // llama3 only: wavelengths above L/low_freq_factor are divided by s
    double high_freq_factor; // llama3 only: wavelengths below L/high_freq_factor are kept
    int window;              // rerope, leaky-rerope, selfextend: W, distances below it are rotated as
                             // usual (selfextend: the neighbour window; factor is its group size G);
                             // dca: the local window w
    int chunk;               // dca only: the chunk size S; chunks hold c = S - w positions
    // longrope only: rot_dims / 2 factors each, pair i's frequency divided by short_factor[i] for
    // lengths up to L, by long_factor[i] past it (pointers into the model file, or the caller's)
    const double *short_factor, *long_factor;
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
} Rope;

// Mode names for the command line and the banner: none, pi (alias linear), ntk, dynamic, yarn, llama3,
// rerope, leaky-rerope, longrope, selfextend, dynamic-yarn, dca.
const char *rope_scaling_name(RopeScaling mode);
int rope_scaling_from_name(const char *name, RopeScaling *mode); // 0 ok, -1 unknown name

// What the user asked on the command line. Unset fields: mode -1, the reals 0.
typedef struct {
    int mode;      // RopeScaling, or -1 to keep the checkpoint's own
    double factor; // --rope-factor; 0 = the checkpoint's, else ctx / L when ctx > L, else 1 (dynamic: 1)
    double base;   // --rope-base; 0 = the checkpoint's rope_theta
    double alpha;  // --rope-alpha (ntk); 0 = factor
    int window;    // --rope-window, --grp-attn-w (rerope, leaky-rerope, selfextend); 0 = L / 4
    int group;     // --grp-attn-n (selfextend): G; 0 = the smallest that covers the context
    int chunk;     // --dca-chunk (dca): S; 0 = 3 L / 4
} RopeOverrides;

// The rules an override can break, one code each: rope_params_resolve owns the rules, run.c says
// which flag broke one and how to fix it.
typedef enum {
    ROPE_OK = 0,
    ROPE_FACTOR_WITHOUT_MODE, // a factor, and the mode is none
    ROPE_ALPHA_NOT_NTK,       // alpha, and the mode is not ntk
    ROPE_WINDOW_NOT_REROPE,   // a window, and the mode is neither rerope nor leaky-rerope
    ROPE_REROPE_FACTOR,       // rerope has no factor (every distance past W is scored as W)
    ROPE_LEAKY_FACTOR_ONE,    // leaky-rerope with factor 1 is plain RoPE
    ROPE_LONGROPE_NO_FACTORS, // longrope, and the checkpoint has no short and long factors
    ROPE_GROUP_NOT_SELFEXTEND, // a group size G, and the mode is not selfextend
    ROPE_FACTOR_SELFEXTEND,   // a factor with selfextend, whose factor is G (--grp-attn-n)
    ROPE_FACTOR_FOLLOWS_LENGTH, // a factor with dynamic-yarn, whose factor is l / L
    ROPE_CHUNK_NOT_DCA,       // a chunk size, and the mode is not dca
    ROPE_FACTOR_DCA,          // a factor with dca, which has none
    ROPE_BAD_VALUE,           // a parameter out of its range (rope_params_check; err says which)
} RopeRule;

// The parameters for a run at context ctx: the checkpoint's own (trained), with the user's
// overrides on top. Returns ROPE_OK, or the rule broken (ROPE_BAD_VALUE with a message in err).
RopeRule rope_params_resolve(RopeParams *out, const RopeParams *trained, int ctx, const RopeOverrides *o, char *err,
                             size_t errlen);

// Fill in the defaults a mode needs (beta_fast 32, ...) and check every field; on error writes a
// message to err and returns -1.
int rope_params_check(RopeParams *p, char *err, size_t errlen);

// Inverse frequencies theta_i (head_dim/2 of them; 0 for the pairs past rot_dims / 2, which do not
// turn) for sequence length `length` (only dynamic and longrope look at it) and the attention magnitude; pure math, no allocation. Tests call it directly.
void rope_inv_freq(const RopeParams *p, int length, double *inv_freq, double *mscale, double *eff_base);

// Allocate tables for positions [0, n_pos). Returns 0, or -1 with a message in err.
int rope_init(Rope *r, const RopeParams *p, int n_pos, char *err, size_t errlen);
void rope_free(Rope *r);

// Tell rope the current sequence length (tokens so far, including the ones being processed).
// Only dynamic NTK and longrope react: when the frequencies for this length differ from the current
// ones (dynamic: the base; longrope: short or long factors) it recomputes the tables for every
// position and bumps version. The base always follows the length
// given, also when it is shorter than before (a new sequence); Hugging Face instead keeps the
// largest base it has seen until the length drops below L.
void rope_set_length(Rope *r, int length);

// True when rope_set_length can change the tables (dynamic NTK, longrope; the caller must then keep
// keys un-rotated).
int rope_is_dynamic(const Rope *r);
// True for rerope, leaky-rerope and selfextend: attention scores the keys at distance >= window by
// another path (rope_rotate_far, the key table).
int rope_far_path(const RopeParams *p);
// How many rotations of each query attention reads: 1; 2 for the far-path modes (near, far); 3 for
// dca (intra, successive, inter chunk). model.c keeps the ones past the first in q_far.
int rope_query_turns(const RopeParams *p);
// The model file's side (loader.c): whether a checkpoint can carry the mode (none, pi, dynamic, yarn,
// llama3, longrope; the others are chosen at run time), and how many per-pair factors of each set
// follow the header for it (longrope: rot_dims / 2 short, then as many long; else 0).
int rope_mode_in_file(int mode);
int rope_file_factors(const RopeParams *p);
// Dual chunk attention's chunk length c = S - w (positions per chunk); 0 for every other mode.
int rope_dca_chunk(const RopeParams *p);
// Whether the mode's factor is Self-Extend's group size G (--grp-attn-n) rather than a stretch factor.
int rope_factor_is_group(const RopeParams *p);
// True for every mode but none: something changes past the trained context.
int rope_is_scaled(const RopeParams *p);
// True when the keys must be cached un-rotated: dynamic and longrope (the frequencies change with the
// length) and the rerope modes (a key is scored at two rotations, near and far).
int rope_keys_unrotated(const RopeParams *p);

// How many rotation tables the un-rotated cached keys need when attention turns them (model.c):
// 0 when keys are cached rotated, 1 for dynamic, longrope and rerope, 2 for leaky-rerope (near and
// far).
int rope_key_tables(const RopeParams *p);
// The rows of head_dim floats (cos and sin) rope_init allocates for a context of ctx positions.
size_t rope_table_rows(const RopeParams *p, int ctx);

// The positions the factor covers: s L for pi, ntk, yarn and llama3; W + K (L - W) for
// leaky-rerope, whose farthest distance then lands on L. 0 for the modes whose factor covers any
// length (dynamic's grows with it) or that have none (none, rerope). *fix: the factor that would
// cover ctx.
double rope_covers(const RopeParams *p, int ctx, double *fix);

// The cosine and sine of every pair's angle for a move of `by` positions (the context shift turns
// cached keys back by it): head_dim / 2 of each.
void rope_shift_angles(const Rope *r, int by, float *cos, float *sin);

// The banner's description of a run's RoPE: mode, base (and where dynamic's ends up at ctx),
// window, factor, trained context, attention factor. Into buf, always NUL-terminated.
void rope_describe(const Rope *r, int ctx, char *buf, size_t len);

// Rotate one head x (head_dim floats, interleaved pairs) to position pos.
void rope_rotate(const Rope *r, float *x, int pos);
// rerope modes: rotate one head of a query at position pos for its far keys (far_cos, far_sin);
// dca: for the keys of the previous chunk.
void rope_rotate_far(const Rope *r, float *x, int pos);
// dca: rotate one head of a query for the keys of every earlier chunk (to S, whatever its position).
void rope_rotate_inter(const Rope *r, float *x);

#endif
