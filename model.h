// model.h - the model file format, the structs of a model, and the forward pass.
//
// What this is: the checkpoint (loader.c reads our format and llama2.c's legacy one; the weights
// are pointers into a read-only mmap), the activations and KV cache, and the forward pass
// (model.c). What this is not: the tokenizer, the sampler, the command line (run.c), the
// arithmetic of products and attention (kernels.c) or of positions (rope.c).
//
// ---------------------------------------------------------------------------------------------
// The model file format, version 1 to 4 (written by export/export.py; all values little-endian)
//
// Header, 256 bytes. Integers are int32, reals float64:
//   off  field                 meaning
//     0  magic                 the 4 bytes "LRUN"
//     4  version               1; 2 when the checkpoint has several end tokens (fields at 128);
//                              and 3 when it is not a plain Llama (fields at 164)
//     8  dim                   hidden size (HF hidden_size)
//    12  hidden_dim            MLP size (HF intermediate_size)
//    16  n_layers
//    20  n_heads               query heads
//    24  n_kv_heads            key/value heads (< n_heads: grouped-query attention)
//    28  head_dim              per-head size; dim == n_heads*head_dim is NOT required
//    32  vocab_size
//    36  seq_len               largest context the checkpoint supports (HF max_position_embeddings)
//    40  bos_id
//    44  eos_id
//    48  shared_classifier     1: the classifier is the token embedding (tied); 0: wcls follows
//    52  dtype                 weight type of the matrices: 0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 bf16,
//                              and in groups of 16 rows 5 q8_0_r16 and 6 bf16_r16 (what export.py
//                              writes for q8_0 and bf16 now; 2 and 4 are the first layouts, still
//                              read: copied into 5 and 6 at load). 4, 5 and 6 in any version: a
//                              reader older than them refuses them as an unknown dtype, so no
//                              version is needed to keep it from misreading
//    56  rope_scaling          the checkpoint's own scaling (RopeScaling in rope.h), 0 = none
//    60  rope_orig_ctx         the context it was trained at, L (HF original_max_position_embeddings);
//                            0 = seq_len
//    64  rope_theta            base b
//    72  norm_eps              RMSNorm epsilon
//    80  rope_factor           s (1 when unscaled)
//    88  rope_attn_factor      yarn attention_factor; 0 = the default 0.1*ln(s)+1
//    96  rope_beta_fast        yarn; 0 = default 32
//   104  rope_beta_slow        yarn; 0 = default 1
//   112  rope_low_freq_factor  llama3
//   120  rope_high_freq_factor llama3
//   128  reserved, must be zero, up to byte 256 (version 1)
// Version 2 adds, where version 1 has reserved zeros (Llama 3's eos_token_id lists):
//   128  n_end_ids             1..8: more tokens that end the text, besides eos_id
//   132  end_ids[8]            int32 each; the first n_end_ids are token ids, the rest zero
//   164  reserved, must be zero, up to byte 256
// Version 3 (the families past Llama; export/export.py writes 3 only for them): n_end_ids may be 0,
//   164  family                the architecture, for the banner (Family below: Llama, Mistral,
//                              Qwen2, Qwen3, SmolLM3, Phi-3); what runs differently is said below
//   168  rot_dims              the first rot_dims dimensions of each head turn (partial rotary);
//                              0 = head_dim
//   172  qkv_bias              1: the q, k and v projections have biases (Qwen2)
//   176  qk_norm               1: q and k are RMS-normalized per head before RoPE (Qwen3)
//   180  sliding_window        W > 0: a query in a sliding layer sees only the last W positions,
//                              its own included (Mistral); 0 = no layer slides
//   184  reserved, must be zero, up to byte 256
//   256  layer_kind[n_layers]  int32 each: bit 0 the layer has no RoPE (SmolLM3's NoPE layers),
//                              bit 1 it slides (needs sliding_window > 0), bit 2 (version 4) its
//                              RoPE is the local one (rope_freq_base_train_swa, below); other bits zero
//        then, when rope_scaling is longrope (8): rot_dims/2 short factors, then (at the next
//        multiple of 64) rot_dims/2 long factors, float64 each (rope.h, RopeParams)
// Version 4 (the families whose layers differ by more than a flag: Gemma 2 and 3, OLMo 2 and 3,
//   EXAONE 4, GLM-4, Granite 3, Ministral 3) is version 3 with family up to 13, qk_norm up to 2
//   (QK_NORM_ALL), and
//   184  n_hparams             entries of the hparams table, 0 .. 64
//   188  reserved, must be zero, up to byte 256
//   256  the hparams table, before the tables above (layer_kind then starts at the next multiple
//        of 64): n_hparams entries of 40 bytes, a name (32 bytes of ASCII, NUL-padded) and a float64
//        value, each name once.
//        The names are those of Config's fields, llama.cpp's: norms, act, f_embedding_scale,
//        f_attention_scale, f_attn_logit_softcapping, f_residual_scale, f_logit_scale,
//        f_final_logit_softcapping, rope_freq_base_train_swa, f_attn_temp_scale,
//        n_attn_temp_floor_scale (loader.c, HPARAMS, has each one's range); a name not listed is
//        Llama's default, a name this program does not know refuses the file.
//
// Tensors follow (version 3: after its tables), each starting at a multiple of 64 bytes from the
// file start (zero padding between tensors and tables, none after the last one; the file ends
// exactly where the last tensor ends):
//   token_embedding  (vocab, dim)                 matrix
//   for each layer (the norms as Config.norms says: all but the post-norms up to version 3):
//     rms_att        (dim)                        f32, only with NORM_ATTN
//     wq             (n_heads*head_dim, dim)      matrix
//     bq             (n_heads*head_dim)           f32, only if qkv_bias (so are bk and bv)
//     wk             (n_kv_heads*head_dim, dim)   matrix
//     bk             (n_kv_heads*head_dim)        f32
//     wv             (n_kv_heads*head_dim, dim)   matrix
//     bv             (n_kv_heads*head_dim)        f32
//     q_norm         (head_dim)                   f32, only if qk_norm (so is k_norm); with
//                                                 QK_NORM_ALL (n_heads*head_dim)
//     k_norm         (head_dim)                   f32; with QK_NORM_ALL (n_kv_heads*head_dim)
//     wo             (dim, n_heads*head_dim)      matrix
//     post_att       (dim)                        f32, only with NORM_ATTN_POST
//     rms_ffn        (dim)                        f32, only with NORM_FFN
//     w1             (hidden_dim, dim)            matrix   gate_proj
//     w2             (dim, hidden_dim)            matrix   down_proj
//     w3             (hidden_dim, dim)            matrix   up_proj
//     post_ffn       (dim)                        f32, only with NORM_FFN_POST
//   rms_final        (dim)                        f32
//   wcls             (vocab, dim)                 matrix, only if shared_classifier == 0
//
// A matrix (rows, cols) is row-major (out, in), like nn.Linear.weight, stored as its dtype says:
//   f32   rows*cols float32
//   f16   rows*cols IEEE half
//   bf16  rows*cols bfloat16: the top 16 bits of the float32 (rounded to nearest even from f32;
//         a bf16 checkpoint's bits copied as they are)
//   q8_0  let cp = cols rounded up to a multiple of 32. rows*cp int8 values q (each row zero-padded
//         to cp), then, at the next multiple of 64, rows*(cp/32) float32 scales d;
//         value = q * d of its block of 32 (Q8_0 as in ggml, with the scales stored apart).
//   q8_0_r16  the same numbers as q8_0 (q, d per block of 32; cp as for q8_0), the rows in groups
//         of 16 (the last group filled up with zero rows: q = 0, d = 0), group after group; per group,
//         block after block, 576 bytes: the 16 rows' float32 d (64 bytes), then 512 bytes of q, each
//         stored as the unsigned byte q + 128, where bytes 64k .. 64k+63 hold values 4k .. 4k+3 of the
//         block of row 0, then of row 1, .., row 15 (k = 0 .. 7). So value j of row 16g + i, block
//         b, sits at 576 (g cp/32 + b) + 64 + 64 (j / 4) + 4 i + j % 4. No scales follow.
//         One 64-byte load holds 4 columns of 16 rows, which the decode kernel multiplies by 4 values
//         of x at once into the 16 rows' sums (kernels_x86.c), and prefill copies as its tiles read
//         them (kernels_prefill.c): nothing is repacked when the file is loaded.
//   bf16_r16  the same numbers as bf16, the rows in groups of 16 (the last group filled up with zero
//         rows) and each row zero-padded to cp columns (cp as for q8_0), group after group; a group
//         is cp/2 runs of 64 bytes, run p holding columns 2p and 2p+1 of row 0, of row 1, .., row 15,
//         each row's two as one 32-bit little-endian word (column 2p in its low half). So column c of
//         row 16g + i is the uint16 at 16 cp g + 32 (c / 2) + 2 i + c % 2. One 64-byte load is a pair
//         of columns of 16 rows, which decode and prefill multiply by x's pair broadcast into the 16
//         rows' sums (kernels_x86.c); nothing is repacked when the file is loaded.
//   q4_0  cp as for q8_0. rows*cp/2 bytes, 16 per block of 32: byte j of a block holds value j in its
//         low 4 bits and value j+16 in its high 4 bits, an unsigned q in [0, 15]; then, at the next
//         multiple of 64, rows*(cp/32) f16 scales d; value = (q - 8) * d (ggml's Q4_0, scales apart).
// The rows of wq and wk are in the interleaved RoPE layout: within each head, row 2i and row 2i+1
// are the two coordinates of rotation pair i (Meta's layout, not Hugging Face's rotate_half one);
// under partial rotary only the first rot_dims rows of a head are paired so, the rest keep their
// order. bq, bk, q_norm and k_norm are permuted as the rows they go with.
// ---------------------------------------------------------------------------------------------
#ifndef MODEL_H
#define MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "rope.h"

#define MODEL_MAGIC       "LRUN"
#define MODEL_VERSION     4 // the newest this program reads; it reads 1 to 3 too
#define MODEL_MAX_HPARAMS 64
#define MODEL_MAX_END_IDS 8
#define MODEL_HEADER_SIZE 256
#define MODEL_ALIGN       64

// The architectures this program runs: what a Hugging Face config.json's architectures names. Only the
// banner reads it: what runs differently is said by the hparams below and the layers' kinds, never
// by the family's name.
typedef enum {
    FAMILY_LLAMA, FAMILY_MISTRAL, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_SMOLLM3, FAMILY_PHI3, // version 3
    FAMILY_GEMMA2, FAMILY_GEMMA3, FAMILY_OLMO2, FAMILY_OLMO3, FAMILY_EXAONE4, FAMILY_GLM4, FAMILY_GRANITE,
    FAMILY_MINISTRAL3, // version 4
    FAMILY_COUNT
} Family;
const char *family_name(Family f);

// The sublayer norms a layer has (Config.norms): before attention (attn_norm, Llama's
// input_layernorm), after it (attn_post_norm: on attention's output, before it joins the residual
// stream; Gemma 2/3, OLMo 2, EXAONE 4, GLM-4), before the MLP (ffn_norm) and after it (ffn_post_norm).
// The names are llama.cpp's tensor names.
enum { NORM_ATTN = 1, NORM_ATTN_POST = 2, NORM_FFN = 4, NORM_FFN_POST = 8, NORMS_LLAMA = NORM_ATTN | NORM_FFN };
// The MLP's activation: act(gate) * up. SiLU (SwiGLU: Llama and most), or GELU with the tanh
// approximation (GeGLU: Gemma's gelu_pytorch_tanh).
typedef enum { ACT_SILU, ACT_GELU_TANH, ACT_COUNT } Activation;
// How q and k are RMS-normalized before RoPE (Config.qk_norm): not at all, each head on its own with
// one head_dim weight (Qwen3, Gemma 3, EXAONE 4), or the whole projection at once with a weight per
// feature (OLMo 2 and 3: q over n_heads*head_dim, k over n_kv_heads*head_dim).
enum { QK_NORM_NONE = 0, QK_NORM_HEAD = 1, QK_NORM_ALL = 2 };

// What the checkpoint was trained with: the file header.
typedef struct {
    int dim;        // D
    int hidden_dim; // H, the MLP width
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;   // hd
    int vocab_size; // V
    // The largest context the checkpoint says it supports with its own scaling
    // (max_position_embeddings, the header's seq_len); the one it was trained at, L, is rope.orig_ctx
    // (n_ctx_train below).
    int n_ctx_max;
    int bos_id, eos_id;
    int n_end_ids;                    // more ids that end the text (version 2 files), besides eos_id
    int end_ids[MODEL_MAX_END_IDS];
    int shared_classifier; // 1: logits = x @ token_embedding^T
    DType dtype;
    float norm_eps;
    RopeParams rope; // the checkpoint's own RoPE: base, rotated dimensions, its rope_scaling
    int version;     // of the file; 0: a llama2.c legacy file; a GGUF file: 3, what its export would be
    int gguf;        // a GGUF file: its GGUF version; 0 for ours and llama2.c's
    Family family;
    int qkv_bias;          // 1: bq, bk, bv
    int qk_norm;           // QK_NORM_NONE, QK_NORM_HEAD (q_norm, k_norm of head_dim) or QK_NORM_ALL
    int sliding_window;    // W of the sliding layers (0: none slides)
    const int *layer_kind; // [n_layers] LAYER_NO_ROPE, LAYER_SLIDING, LAYER_ROPE_SWA bits (kernels.h);
                           // NULL: all plain
    // What the layers do besides Llama's (version 4's hparams table; named as llama.cpp's
    // llama_hparams names them; each default is Llama's):
    int norms;                       // NORM_* bits; NORMS_LLAMA
    Activation act;                  // ACT_SILU
    float f_embedding_scale;         // the token embeddings times this (Gemma: sqrt(dim); Granite); 1
    float f_attention_scale;         // the scores q . k times this; 0 = 1/sqrt(head_dim)
    float f_attn_logit_softcapping;  // c > 0: each score s becomes c tanh(s / c) (Gemma 2); 0 = none
    float f_residual_scale;          // each sublayer's output times this before it joins x (Granite); 1
    float f_logit_scale;             // the logits divided by this (Granite's logits_scaling); 1
    float f_final_logit_softcapping; // c > 0: each logit l becomes c tanh(l / c) (Gemma 2); 0 = none
    double rope_freq_base_train_swa; // RoPE base of the LAYER_ROPE_SWA layers, unscaled (Gemma 3's
                                     // rope_local_base_freq); 0 = no such layer
    float f_attn_temp_scale;         // beta > 0: the query at m times 1 + beta ln(1 + floor(m / F))
    int n_attn_temp_floor_scale;     // F (Ministral 3's llama_4_scaling_beta and the original context)
    int n_hparams;                   // entries of the file's hparams table (version 4)
} Config;

// The context the model was trained at, L (llama.cpp's n_ctx_train; HF original_max_position_embeddings
// when the checkpoint has one, else max_position_embeddings), kept once: in its RoPE parameters.
static inline int n_ctx_train(const Config *c) { return c->rope.orig_ctx; }

typedef struct {
    const float *rms_att; // (D) the norm before attention, or NULL (Config.norms)
    Matrix wq;            // (n_heads*hd, D)
    Matrix wk;            // (n_kv_heads*hd, D)
    Matrix wv;            // (n_kv_heads*hd, D)
    const float *bq, *bk, *bv;    // (n_heads*hd), (kv_dim), (kv_dim): biases, or NULL
    const float *q_norm, *k_norm; // RMSNorm weights of q and k (Config.qk_norm): (hd) each, shared by
                                  // every head, or (n_heads*hd), (kv_dim); or NULL
    Matrix wo;            // (D, n_heads*hd)
    const float *rms_ffn; // (D) the norm before the MLP, or NULL
    Matrix w1;            // (H, D)
    Matrix w2;            // (D, H)
    Matrix w3;            // (H, D)
    const float *post_att, *post_ffn; // (D) each: the norms after attention and after the MLP, or NULL
} LayerWeights;

typedef struct {
    Matrix token_embedding; // (V, D)
    LayerWeights *layers;   // [n_layers]
    const float *rms_final; // (D)
    Matrix wcls;            // (V, D); the token embedding when the classifier is shared
} TransformerWeights;

// What the user asked for at run time (llama.cpp's cparams).
typedef struct {
    int n_ctx;     // KV cache length in tokens (--ctx)
    int max_batch; // most tokens one forward call takes (prefill block)
    DType cache_k, cache_v; // types of the cached keys and values: DTYPE_F32, DTYPE_F16 or DTYPE_Q8_0
    RopeParams rope;
    int attn_logn; // 1: a query at position m >= L scaled by ln(m + 1) / ln(L) (--attn-logn; model.c)
    int swa_full;  // 1: sliding layers keep every position (--swa-full), not a ring of about W (model.c)
} RunConfig;

// Where a forward's numbers first were not finite (transformer_trace_nonfinite): the first place,
// in the order the forward computes them, whose rows hold a NaN or an infinity.
typedef struct {
    int layer; // the layer; -1: the token embedding; n_layers: the final norm and the classifier;
               // -2: nowhere (every activation and logit was finite)
    int mlp;   // in the layer: 0 its attention (the stream after it), 1 its MLP
    int row;   // the first such token of the block, 0 .. n-1
} NonFinite;

// Activations for a block of up to B = max_batch tokens, the KV cache, and the kernels' scratch.
typedef struct {
    float *x;              // (B, D) residual stream
    float *xb;             // (B, max(D, n_heads*hd)) normalized input, then attention output
    float *xb2;            // (B, D) output of a sublayer before it joins the residual stream
    float *q;              // (B, n_heads*hd)
    float *q_far;          // (B, turns - 1, n_heads*hd) the queries' turns past the first (rope.h,
                           // rope_turn_at; NULL with one turn): rerope's far ones, dca's two
    float *k;              // (B, kv_dim) keys of the block, before they go into the cache
    float *v;              // (B, kv_dim) values of the block
    float *hb;             // (B, H)
    float *hb2;            // (B, H)
    float *att;            // (n_threads, attention_scratch_floats) attention scratch per thread
    float *logits;         // (B, V)
    KVCache kv;            // keys and values of every layer and position (kernels.h)
    float *rope_keys;      // rope_key_tables x (ctx, hd) the key tables rope.c fills (NULL when keys are
                           // cached rotated): cos and sin for the un-rotated cached keys
    RopeAttention *rope_layers; // (n_layers) what attention reads of RoPE in each layer (KVCache.rope)
    Workspace work;        // the kernels' scratch (packed weights, quantized activations)
    int n_threads;         // threads the scratch was sized for; the kernels never use more
    int trace;             // > 0: the forward notes in `found` where the first `trace` rows of the block
                           // first hold a number that is not finite; 0: no such check
    NonFinite found;
    size_t bytes;          // of the one allocation all the buffers above live in
} RunState;

typedef struct {
    Config config;
    RunConfig run;
    TransformerWeights weights;
    RunState state;
    Rope rope;     // the checkpoint's RoPE with the run's scaling: every rotating layer but
    Rope rope_swa; // the LAYER_ROPE_SWA ones: base rope_freq_base_train_swa, unscaled (Gemma 3's local layers)
    void *map; // the mmapped file
    size_t map_size;
    void *copy; // the matrices copied into another layout (transformer_copy_weights); else NULL
    size_t copy_bytes;
    char copied[96]; // what was copied, as "f16 to f16_r16, ..." (each pair of types once; the banner)
    void *made; // what a GGUF file needs made at load (loader.c, gguf_made): q and k interleaved, the
                // layers' kinds, longrope's factors as float64; else NULL
    size_t made_bytes;
    char gguf_keys[240]; // a GGUF file: the banner's line on the {arch}.* keys read and not read (loader.c)
    char gguf_types[160]; // a GGUF file: its matrices' types other than config.dtype, as the banner lists them
    size_t weight_bytes; // bytes of tensors in the file
    size_t state_bytes;  // bytes of activations + KV cache + RoPE tables
} Transformer;

// Read and check the header of the file at path (ours, llama2.c's legacy one or GGUF), mmap the
// weights (loader.c) and copy those the kernels do not read as stored (transformer_copy_weights, with
// f16_as_bf16: ./run --f16-as-bf16). Returns 0, or -1 with "what: why (hint: fix)" in err. Nothing is
// left allocated on failure.
int transformer_load(Transformer *t, const char *path, int f16_as_bf16, char *err, size_t errlen);

// --check-tensors: every weight of the loaded model finite (loader.c). Returns 0, or -1 with the first
// tensor that holds a NaN or an infinity (its name as lrun/modelfile.py names it, layers.L.NAME, and
// where in it) in err.
int transformer_check_tensors(const Transformer *t, char *err, size_t errlen);

// Bytes transformer_prepare will allocate for this run on n_threads threads: activations, KV
// cache, kernel scratch and RoPE tables. Sets *overflow (and returns 0) if that does not fit in
// size_t.
size_t transformer_state_bytes(const Config *c, const RunConfig *run, int n_threads, int *overflow);

// Allocate the run state and RoPE tables for run->n_ctx tokens, sized for the current OpenMP
// thread count. Returns PREPARE_OK, or another status with a plain message in err.
typedef enum { PREPARE_OK = 0, PREPARE_BAD_SIZE, PREPARE_NO_MEMORY, PREPARE_BAD_ROPE } PrepareStatus;
PrepareStatus transformer_prepare(Transformer *t, const RunConfig *run, char *err, size_t errlen);

void transformer_free(Transformer *t);

// The weight matrices the kernels do not read as stored copied, once, into one anonymous mapping
// in the grouped layouts (kernels.h, matrix_to_r16), the classifier and the embedding too
// (transformer_load does it): those of a file in a first layout (q8_0 or bf16: dtype.h, runs_as;
// GGUF's Q8_0) and f32 and f16 ones (into f32_r16, f16_r16), the same numbers moved; with f16_as_bf16
// every f16 one to bf16_r16 instead (./run --f16-as-bf16: each weight rounded to nearest even). The
// model then runs as an export in those layouts would, bit for bit. The file stays mapped for the
// vectors (norms) and the matrices read as stored. A second call, or one with nothing to copy, does
// nothing. Returns 0, or -1 with a message in err (no memory for the copy).
int transformer_copy_weights(Transformer *t, int f16_as_bf16, char *err, size_t errlen);

// Bytes of the KV cache for this run: keys and values in their types, and the un-rotated keys that
// dynamic NTK keeps beside them. 0 if that does not fit in size_t. *ring (when not NULL): the slots
// each sliding layer keeps (0: every position).
size_t transformer_kv_bytes(const Config *c, const RunConfig *run, int *ring);

// Run n tokens (1 <= n <= max_batch) at positions pos .. pos+n-1 of a sequence of text_len tokens
// through the network, writing their keys and values into the cache, and point *logits at the
// result: (n, V) if all_logits, else (1, V) for the last token, whose residual stream is then row 0
// of RunState.x (the last layer runs for that token alone: the others' outputs would feed nothing).
// text_len (pos + n <= text_len <= ctx) is the length of the text these tokens belong to: a prompt
// or a perplexity window is one sequence, as in one Hugging Face forward pass over it; when
// generating, text_len = pos + 1. The forward owns it: dynamic NTK takes its base from it (and
// re-rotates the cached keys when that changes), the other modes ignore it. Returns 0, or -1 with a
// message in err (bad arguments: a caller's bug).
int transformer_forward(Transformer *t, const int *tokens, int n, int pos, int text_len, int all_logits, float **logits,
                        char *err, size_t errlen);

// After a forward whose logits were not finite: the same call again (the same tokens at the same
// positions, so the cache ends as it was), the residual stream of the block's first `rows` tokens
// checked after the embedding and after each layer's attention and MLP, which transformer_forward
// does only here: *where says where their numbers first went non-finite. Returns 0, or -1 with a
// message in err.
int transformer_trace_nonfinite(Transformer *t, const int *tokens, int n, int pos, int text_len, int all_logits,
                                int rows, NonFinite *where, char *err, size_t errlen);

// Context shift, for generating past a full cache of len positions: keep the first `keep`, drop the
// `drop` after them, and move the rest down by `drop` (keys turned to their new positions, values
// as they are). The cache then holds len - drop positions; the caller continues from there.
// Returns 0, or -1 with a message in err when keep + drop > len.
int transformer_shift(Transformer *t, int len, int keep, int drop, char *err, size_t errlen);

#endif
