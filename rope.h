// rope.h - rotary position embedding (RoPE) and the context-extension scalings.
//
// Everything positional lives in rope.c. The forward pass in model.c asks three things: "rotate
// this head as position m" (rope_rotate); "the sequence is now l tokens long" (rope_set_length,
// which only dynamic NTK reacts to); and "can the frequencies change with the length?"
// (rope_is_dynamic), in which case it keeps un-rotated keys and rotates them again whenever
// Rope.version moves. It never looks at the scaling mode otherwise.
//
// Layout: pairs are interleaved, (x0,x1), (x2,x3), ... as in the RoFormer paper and Meta's and
// llama2.c's code. Hugging Face checkpoints use the rotate_half layout; export/export.py permutes
// their q/k rows into this one (see the README, "Two layouts").
#ifndef ROPE_H
#define ROPE_H

#include <stddef.h>

// The numbers are stored in the model file header; do not reorder.
typedef enum {
    ROPE_SCALING_NONE = 0,    // theta_i = b^(-2i/d)
    ROPE_SCALING_PI = 1,      // position interpolation: theta_i / s       (HF "linear")
    ROPE_SCALING_NTK = 2,     // NTK-aware base change: b' = b * alpha^(d/(d-2))
    ROPE_SCALING_DYNAMIC = 3, // dynamic NTK: the base follows the current length l > L
    ROPE_SCALING_YARN = 4,    // YaRN: per-pair blend of PI and none, plus attention factor
    ROPE_SCALING_LLAMA3 = 5,  // Llama 3.1: three wavelength bands
    ROPE_SCALING_COUNT
} RopeScaling;

// Everything that decides the frequencies. Fields that a mode does not use are ignored.
typedef struct {
    RopeScaling mode;
    int head_dim;            // d: rotary dimension (all of the head is rotated)
    int orig_ctx;            // L: context the model was trained with (YaRN/llama3: original_max_pos)
    double base;             // b: rope_theta
    double factor;           // s: context extension factor (>= 1)
    double alpha;            // ntk only: alpha of the base change; 0 = use factor
    double attn_factor;      // yarn only: magnitude on cos and sin; 0 = 0.1*ln(s) + 1
    double beta_fast;        // yarn only: ramp starts at pairs with this many turns over L (32)
    double beta_slow;        // yarn only: ramp ends at pairs with this many turns over L (1)
    double low_freq_factor;  // llama3 only: wavelengths above L/low_freq_factor are divided by s
    double high_freq_factor; // llama3 only: wavelengths below L/high_freq_factor are kept
} RopeParams;

typedef struct {
    RopeParams p;
    int max_pos;      // the tables cover positions [0, max_pos)
    int length;       // dynamic: sequence length the tables were computed for
    double eff_base;  // base after any base change (ntk, dynamic), for the banner
    double mscale;    // magnitude folded into cos and sin (yarn), else 1
    unsigned version; // increases whenever the tables change (dynamic only)
    double *inv_freq; // (head_dim/2) theta_i after scaling, in double
    float *cos;       // (max_pos, head_dim/2) mscale * cos(m * theta_i)
    float *sin;       // (max_pos, head_dim/2) mscale * sin(m * theta_i)
} Rope;

// Mode names for the command line and the banner: none, pi (alias linear), ntk, dynamic, yarn, llama3.
const char *rope_scaling_name(RopeScaling mode);
int rope_scaling_from_name(const char *name, RopeScaling *mode); // 0 ok, -1 unknown name

// What the user asked on the command line. Unset fields: mode -1, the reals 0.
typedef struct {
    int mode;      // RopeScaling, or -1 to keep the checkpoint's own
    double factor; // --rope-factor; 0 = the checkpoint's, else ctx / L when ctx > L, else 1 (dynamic: 1)
    double base;   // --rope-base; 0 = the checkpoint's rope_theta
    double alpha;  // --rope-alpha (ntk); 0 = factor
} RopeOverrides;

// The parameters for a run at context ctx: the checkpoint's own (trained), with the user's
// overrides on top. Returns 0, or -1 with a message in err.
int rope_params_resolve(RopeParams *out, const RopeParams *trained, int ctx, const RopeOverrides *o, char *err,
                        size_t errlen);

// Fill in the defaults a mode needs (beta_fast 32, ...) and check every field; on error writes a
// message to err and returns -1.
int rope_params_check(RopeParams *p, char *err, size_t errlen);

// Inverse frequencies theta_i (head_dim/2 of them) for sequence length `length` (only dynamic
// looks at it) and the attention magnitude; pure math, no allocation. Tests call it directly.
void rope_inv_freq(const RopeParams *p, int length, double *inv_freq, double *mscale, double *eff_base);

// Allocate tables for positions [0, max_pos). Returns 0, or -1 with a message in err.
int rope_init(Rope *r, const RopeParams *p, int max_pos, char *err, size_t errlen);
void rope_free(Rope *r);

// Tell rope the current sequence length (tokens so far, including the ones being processed).
// Only dynamic NTK reacts: when the base for this length differs from the current one it
// recomputes the tables for every position and bumps version. The base always follows the length
// given, also when it is shorter than before (a new sequence); Hugging Face instead keeps the
// largest base it has seen until the length drops below L.
void rope_set_length(Rope *r, int length);

// True when rope_set_length can change the tables (the caller must then keep keys un-rotated).
int rope_is_dynamic(const Rope *r);

// Rotate one head x (head_dim floats, interleaved pairs) to position pos.
void rope_rotate(const Rope *r, float *x, int pos);

#endif
