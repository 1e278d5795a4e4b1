// loader.c - reading a checkpoint: our format (model.h documents it byte by byte) and llama2.c's
// legacy one, mapped read-only with mmap; the weights are pointers into the mapping.
//
// What this is: the header readers (every field checked before anything is trusted), and the
// walkers that hand out each tensor in file order, checking that the file is exactly as long as
// its header says. What this is not: the run state or the forward pass (model.c).
#include "model.h"
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// The cursor: it walks the tensors in file order. It never hands out a pointer past the end of the
// file and never lets a size or an offset overflow (it sets `overflow` instead); the caller then
// checks that the walk ended exactly at the end of the file.

typedef struct {
    const uint8_t *base; // the mapped file
    size_t size;         // its length
    size_t off;          // where the next tensor starts
    int overflow;        // a size did not fit in size_t
} Cursor;

static const void *take(Cursor *c, size_t bytes, size_t align) {
    size_t off = c->off, pad = (align - off % align) % align;
    if (c->overflow || off > SIZE_MAX - pad || off + pad > SIZE_MAX - bytes) {
        c->overflow = 1;
        c->off = SIZE_MAX;
        return NULL;
    }
    off += pad;
    c->off = off + bytes;
    return c->off <= c->size ? c->base + off : NULL;
}

// a * b * c, or 0 with c->overflow set when the product does not fit in size_t.
static size_t count3(Cursor *cur, size_t a, size_t b, size_t c) {
    if ((b && a > SIZE_MAX / b) || (c && a * b > SIZE_MAX / c)) {
        cur->overflow = 1;
        return 0;
    }
    return a * b * c;
}

static Matrix take_matrix(Cursor *c, DType t, int rows, int cols, size_t align) {
    Matrix m = {NULL, NULL, rows, cols, t};
    size_t data = matrix_data_bytes(t, rows, cols), scale = matrix_scale_bytes(t, rows, cols);
    const int scales_apart = DTYPES[t].scale_bytes > 0; // the scales follow the values (q8_0, q4_0)
    if (data == 0 || (scales_apart && scale == 0)) c->overflow = 1; // a matrix here is never empty
    m.data = take(c, data, align);
    if (scales_apart) m.scale = take(c, scale, align);
    return m;
}

static const float *take_f32(Cursor *c, size_t n, size_t align) {
    return take(c, count3(c, n, sizeof(float), 1), align);
}

#define HPARAM_BYTES 40 // version 4's hparams: a name of 32 bytes, a float64 (model.h)
#define HPARAM_NAME 32

// The tensors of a layer in file order (model.h), once: walk_ours hands them out and
// transformer_check_tensors scans them. A tensor is a matrix (in the file's dtype) or an f32 vector;
// its sizes are codes (tensor_size) and it is in the file when the model has `when` (has_tensor).
enum { SIZE_D, SIZE_Q, SIZE_KV, SIZE_QNORM, SIZE_KNORM, SIZE_H };
enum { ALWAYS, IF_BIAS, IF_QK_NORM, IF_NORM_ATTN, IF_NORM_ATTN_POST, IF_NORM_FFN, IF_NORM_FFN_POST };
static const struct {
    const char *name; // as lrun/modelfile.py names it: layers.L.NAME
    const char *gguf; // as llama.cpp names it in a GGUF file: blk.L.NAME (llama-arch.cpp, LLM_TENSOR_NAMES)
    size_t at;        // where the LayerWeights field is: a Matrix, or a const float *
    int matrix, rows, cols, when;
} LAYER_TENSORS[] = {
    {"rms_att", "attn_norm.weight", offsetof(LayerWeights, rms_att), 0, SIZE_D, 0, IF_NORM_ATTN},
    {"wq", "attn_q.weight", offsetof(LayerWeights, wq), 1, SIZE_Q, SIZE_D, ALWAYS},
    {"bq", "attn_q.bias", offsetof(LayerWeights, bq), 0, SIZE_Q, 0, IF_BIAS},
    {"wk", "attn_k.weight", offsetof(LayerWeights, wk), 1, SIZE_KV, SIZE_D, ALWAYS},
    {"bk", "attn_k.bias", offsetof(LayerWeights, bk), 0, SIZE_KV, 0, IF_BIAS},
    {"wv", "attn_v.weight", offsetof(LayerWeights, wv), 1, SIZE_KV, SIZE_D, ALWAYS},
    {"bv", "attn_v.bias", offsetof(LayerWeights, bv), 0, SIZE_KV, 0, IF_BIAS},
    {"q_norm", "attn_q_norm.weight", offsetof(LayerWeights, q_norm), 0, SIZE_QNORM, 0, IF_QK_NORM},
    {"k_norm", "attn_k_norm.weight", offsetof(LayerWeights, k_norm), 0, SIZE_KNORM, 0, IF_QK_NORM},
    {"wo", "attn_output.weight", offsetof(LayerWeights, wo), 1, SIZE_D, SIZE_Q, ALWAYS},
    {"post_att", "post_attention_norm.weight", offsetof(LayerWeights, post_att), 0, SIZE_D, 0, IF_NORM_ATTN_POST},
    {"rms_ffn", "ffn_norm.weight", offsetof(LayerWeights, rms_ffn), 0, SIZE_D, 0, IF_NORM_FFN},
    {"w1", "ffn_gate.weight", offsetof(LayerWeights, w1), 1, SIZE_H, SIZE_D, ALWAYS},
    {"w2", "ffn_down.weight", offsetof(LayerWeights, w2), 1, SIZE_D, SIZE_H, ALWAYS},
    {"w3", "ffn_up.weight", offsetof(LayerWeights, w3), 1, SIZE_H, SIZE_D, ALWAYS},
    {"post_ffn", "post_ffw_norm.weight", offsetof(LayerWeights, post_ffn), 0, SIZE_D, 0, IF_NORM_FFN_POST},
};
#define N_LAYER_TENSORS (int)(sizeof LAYER_TENSORS / sizeof LAYER_TENSORS[0])

static int tensor_size(const Config *p, int code) {
    const int hd = p->head_dim, all = p->qk_norm == QK_NORM_ALL;
    switch (code) {
    case SIZE_D: return p->dim;
    case SIZE_Q: return p->n_heads * hd;
    case SIZE_KV: return p->n_kv_heads * hd;
    case SIZE_QNORM: return all ? p->n_heads * hd : hd;
    case SIZE_KNORM: return all ? p->n_kv_heads * hd : hd;
    default: return p->hidden_dim;
    }
}

static int has_tensor(const Config *p, int when) {
    switch (when) {
    case IF_BIAS: return p->qkv_bias;
    case IF_QK_NORM: return p->qk_norm != QK_NORM_NONE;
    case IF_NORM_ATTN: return p->norms & NORM_ATTN;
    case IF_NORM_ATTN_POST: return p->norms & NORM_ATTN_POST;
    case IF_NORM_FFN: return p->norms & NORM_FFN;
    case IF_NORM_FFN_POST: return p->norms & NORM_FFN_POST;
    default: return 1;
    }
}

// Our format: the tables after the header (version 3 and 4), then per layer, tensor after tensor,
// each aligned to MODEL_ALIGN (see model.h).
static void walk_ours(Cursor *c, Transformer *t) {
    Config *p = &t->config;
    TransformerWeights *w = &t->weights;
    c->off = MODEL_HEADER_SIZE;
    if (p->version >= 4) take(c, count3(c, p->n_hparams, HPARAM_BYTES, 1), 1); // read with the header
    if (p->version >= 3) {
        p->layer_kind = take(c, count3(c, p->n_layers, sizeof(int32_t), 1), MODEL_ALIGN);
        if (rope_file_factors(&p->rope)) { // longrope's short and long factors
            const size_t pairs = (size_t)rope_file_factors(&p->rope);
            p->rope.short_factor = take(c, count3(c, pairs, sizeof(double), 1), MODEL_ALIGN);
            p->rope.long_factor = take(c, count3(c, pairs, sizeof(double), 1), MODEL_ALIGN);
        }
    }
    w->token_embedding = take_matrix(c, p->dtype, p->vocab_size, p->dim, MODEL_ALIGN);
    for (int l = 0; l < p->n_layers; l++)
        for (int i = 0; i < N_LAYER_TENSORS; i++) {
            char *field = (char *)&w->layers[l] + LAYER_TENSORS[i].at;
            const int rows = tensor_size(p, LAYER_TENSORS[i].rows), cols = tensor_size(p, LAYER_TENSORS[i].cols);
            if (!has_tensor(p, LAYER_TENSORS[i].when)) continue;
            if (LAYER_TENSORS[i].matrix)
                *(Matrix *)field = take_matrix(c, p->dtype, rows, cols, MODEL_ALIGN);
            else
                *(const float **)field = take_f32(c, rows, MODEL_ALIGN);
        }
    w->rms_final = take_f32(c, p->dim, MODEL_ALIGN);
    w->wcls = p->shared_classifier ? w->token_embedding : take_matrix(c, p->dtype, p->vocab_size, p->dim, MODEL_ALIGN);
}

// llama2.c's legacy files store each weight for all layers at once, (layer, rows, cols) in f32,
// with no padding. These two split such a stack into per-layer views.
static void take_stacked_matrix(Cursor *c, Transformer *t, size_t field, int rows, int cols) {
    const float *stack = take_f32(c, count3(c, t->config.n_layers, rows, cols), 1);
    for (int l = 0; l < t->config.n_layers; l++) {
        Matrix *m = (Matrix *)((char *)&t->weights.layers[l] + field);
        *m = (Matrix){stack ? stack + (size_t)l * rows * cols : NULL, NULL, rows, cols, DTYPE_F32};
    }
}

static void take_stacked_norm(Cursor *c, Transformer *t, size_t field) {
    const int D = t->config.dim;
    const float *stack = take_f32(c, count3(c, t->config.n_layers, D, 1), 1);
    for (int l = 0; l < t->config.n_layers; l++)
        *(const float **)((char *)&t->weights.layers[l] + field) = stack ? stack + (size_t)l * D : NULL;
}

// Legacy order (llama2.c run.c memory_map_weights): embedding, then per weight all layers, then
// the final norm, then two RoPE tables freq_cis_real/imag (seq_len, head_dim/2) that we skip:
// rope.c computes its own, for whatever context and scaling the run asks for.
static void walk_legacy(Cursor *c, Transformer *t) {
    const Config *p = &t->config;
    const int D = p->dim, kvd = p->n_kv_heads * p->head_dim, H = p->hidden_dim;
    TransformerWeights *w = &t->weights;
    c->off = 7 * sizeof(int32_t);
    w->token_embedding = take_matrix(c, DTYPE_F32, p->vocab_size, D, 1);
    take_stacked_norm(c, t, offsetof(LayerWeights, rms_att));
    take_stacked_matrix(c, t, offsetof(LayerWeights, wq), D, D);
    take_stacked_matrix(c, t, offsetof(LayerWeights, wk), kvd, D);
    take_stacked_matrix(c, t, offsetof(LayerWeights, wv), kvd, D);
    take_stacked_matrix(c, t, offsetof(LayerWeights, wo), D, D);
    take_stacked_norm(c, t, offsetof(LayerWeights, rms_ffn));
    take_stacked_matrix(c, t, offsetof(LayerWeights, w1), H, D);
    take_stacked_matrix(c, t, offsetof(LayerWeights, w2), D, H);
    take_stacked_matrix(c, t, offsetof(LayerWeights, w3), H, D);
    w->rms_final = take_f32(c, D, 1);
    take_f32(c, count3(c, p->n_ctx_max, p->head_dim / 2, 2), 1); // freq_cis_real and freq_cis_imag
    w->wcls = p->shared_classifier ? w->token_embedding : take_matrix(c, DTYPE_F32, p->vocab_size, D, 1);
}

// ---------------------------------------------------------------------------------------------
// Headers

static int32_t get_i32(const uint8_t *h, int off) {
    int32_t v;
    memcpy(&v, h + off, sizeof v);
    return v;
}

static double get_f64(const uint8_t *h, int off) {
    double v;
    memcpy(&v, h + off, sizeof v);
    return v;
}

// Range checks shared by both formats. Returns a description of the first bad field, or NULL.
static const char *check_shape(const Config *p) {
    if (p->dim < 1 || p->dim > 65536) return "dim must be in [1, 65536]";
    if (p->hidden_dim < 1 || p->hidden_dim > 1 << 20) return "hidden_dim must be in [1, 2^20]";
    if (p->n_layers < 1 || p->n_layers > 1024) return "n_layers must be in [1, 1024]";
    if (p->n_heads < 1 || p->n_heads > 1024) return "n_heads must be in [1, 1024]";
    if (p->n_kv_heads < 1 || p->n_kv_heads > p->n_heads) return "n_kv_heads must be in [1, n_heads]";
    if (p->n_heads % p->n_kv_heads) return "n_heads must be a multiple of n_kv_heads";
    if (p->head_dim < 2 || p->head_dim > ROPE_MAX_HEAD_DIM || p->head_dim % 2) return "head_dim must be even, in [2, 1024]";
    if (p->vocab_size < 1 || p->vocab_size > 1 << 22) return "vocab_size must be in [1, 2^22]";
    if (p->n_ctx_max < 1 || p->n_ctx_max > 1 << 24) return "seq_len (max_position_embeddings) must be in [1, 2^24]";
    if (p->bos_id < -1 || p->bos_id >= p->vocab_size) return "bos_id must be -1 or a token id";
    if (p->eos_id < -1 || p->eos_id >= p->vocab_size) return "eos_id must be -1 or a token id";
    if (!(isfinite(p->norm_eps) && p->norm_eps > 0 && p->norm_eps < 1)) return "norm_eps must be in (0, 1)";
    return NULL;
}

// Version 4's hparams (model.h): each a field of Config, named as llama.cpp names it, with its range.
// A name not in the file keeps Llama's default (config_defaults).
static const struct {
    const char *name;
    size_t at;  // where the Config field is
    char type;  // 'i' int, 'f' float, 'd' double
    double lo, hi;
} HPARAMS[] = {
    {"norms", offsetof(Config, norms), 'i', 1, 15},
    {"act", offsetof(Config, act), 'i', 0, ACT_COUNT - 1},
    {"f_embedding_scale", offsetof(Config, f_embedding_scale), 'f', 1e-6, 1e6},
    {"f_attention_scale", offsetof(Config, f_attention_scale), 'f', 1e-6, 1e6},
    {"f_attn_logit_softcapping", offsetof(Config, f_attn_logit_softcapping), 'f', 1e-3, 1e6},
    {"f_residual_scale", offsetof(Config, f_residual_scale), 'f', 1e-6, 1e6},
    {"f_logit_scale", offsetof(Config, f_logit_scale), 'f', 1e-6, 1e6},
    {"f_final_logit_softcapping", offsetof(Config, f_final_logit_softcapping), 'f', 1e-3, 1e6},
    {"rope_freq_base_train_swa", offsetof(Config, rope_freq_base_train_swa), 'd', 1.0001, 1e12},
    {"f_attn_temp_scale", offsetof(Config, f_attn_temp_scale), 'f', 1e-6, 100},
    {"n_attn_temp_floor_scale", offsetof(Config, n_attn_temp_floor_scale), 'i', 1, 1 << 24},
};

#define N_HPARAMS (sizeof HPARAMS / sizeof HPARAMS[0])

// The index of the hparam called name in HPARAMS; N_HPARAMS when there is none.
static size_t hparam_index(const char *name) {
    size_t k = 0;
    while (k < N_HPARAMS && strcmp(HPARAMS[k].name, name))
        k++;
    return k;
}

// Sets hparam k of p to v. Returns NULL, or why v is not one it takes.
static const char *hparam_set(Config *p, size_t k, double v) {
    if (!(v >= HPARAMS[k].lo && v <= HPARAMS[k].hi)) return "is out of its range";
    if (HPARAMS[k].type == 'i' && v != floor(v)) return "must be a whole number";
    char *field = (char *)p + HPARAMS[k].at;
    if (HPARAMS[k].type == 'i') *(int *)field = (int)v;
    if (HPARAMS[k].type == 'f') *(float *)field = (float)v;
    if (HPARAMS[k].type == 'd') *(double *)field = v;
    return NULL;
}

// What a model is when its file says nothing more: Llama (a norm before each sublayer, SiLU, the
// scales 1).
static void config_defaults(Config *p) {
    p->norms = NORMS_LLAMA;
    p->act = ACT_SILU;
    p->f_embedding_scale = p->f_residual_scale = p->f_logit_scale = 1;
}

// The hparams table of a version 4 file at byte 256 (model.h). Returns 0, or -1 with the reason in why.
static int read_hparams(Config *p, const uint8_t *h, size_t size, char *why, size_t n) {
    const size_t end = MODEL_HEADER_SIZE + (size_t)p->n_hparams * HPARAM_BYTES;
    if (size < end) {
        snprintf(why, n, "file is %zu bytes, shorter than its %d hparams (hint: the file is truncated; export it again)",
                 size, p->n_hparams);
        return -1;
    }
    unsigned seen = 0; // bit k: HPARAMS[k] read
    _Static_assert(N_HPARAMS <= 32, "seen holds a bit per hparam");
    for (int e = 0; e < p->n_hparams; e++) {
        const uint8_t *entry = h + MODEL_HEADER_SIZE + (size_t)e * HPARAM_BYTES;
        char name[HPARAM_NAME + 1] = {0};
        memcpy(name, entry, HPARAM_NAME);
        const double v = get_f64(entry, HPARAM_NAME);
        const size_t k = hparam_index(name);
        int printable = strlen(name) > 0;
        for (size_t i = 0; name[i]; i++)
            printable &= name[i] > ' ' && name[i] < 127;
        for (size_t i = strlen(name); i < HPARAM_NAME; i++)
            printable &= !entry[i]; // NUL-padded
        const char *bad = !printable ? "is not a NUL-padded ASCII name"
                          : k == N_HPARAMS ? "is not one this program knows (hint: a newer export/export.py wrote it; "
                                             "use that version's ./run)"
                          : seen >> k & 1 ? "is given twice"
                                          : hparam_set(p, k, v);
        if (bad) {
            snprintf(why, n, "bad header: hparam %d (%s = %g) %s%s", e, printable ? name : "?", v, bad,
                     strstr(bad, "hint") ? "" : " (hint: the file is damaged or not written by export/export.py)");
            if (k < N_HPARAMS && strstr(bad, "range"))
                snprintf(why + strlen(why), n - strlen(why), "; its range is [%g, %g]", HPARAMS[k].lo, HPARAMS[k].hi);
            return -1;
        }
        seen |= 1u << k;
    }
    return 0;
}

static int read_header_ours(Transformer *t, const uint8_t *h, size_t size, char *why, size_t n) {
    Config *p = &t->config;
    if (size < MODEL_HEADER_SIZE) {
        snprintf(why, n,
                 "file is %zu bytes, shorter than the %d-byte header (hint: the file is truncated; "
                 "copy or export it again)",
                 size, MODEL_HEADER_SIZE);
        return -1;
    }
    uint32_t version = (uint32_t)get_i32(h, 4);
    if (version < 1 || version > MODEL_VERSION) {
        snprintf(why, n,
                 "format version %u, this program reads versions 1 to %d (hint: export the model again "
                 "with this program's export/export.py)",
                 version, MODEL_VERSION);
        return -1;
    }
    p->dim = get_i32(h, 8);
    p->hidden_dim = get_i32(h, 12);
    p->n_layers = get_i32(h, 16);
    p->n_heads = get_i32(h, 20);
    p->n_kv_heads = get_i32(h, 24);
    p->head_dim = get_i32(h, 28);
    p->vocab_size = get_i32(h, 32);
    p->n_ctx_max = get_i32(h, 36);
    p->bos_id = get_i32(h, 40);
    p->eos_id = get_i32(h, 44);
    int shared = get_i32(h, 48), dtype = get_i32(h, 52), mode = get_i32(h, 56), orig = get_i32(h, 60);
    p->version = (int)version;
    p->norm_eps = (float)get_f64(h, 72);
    p->rope = (RopeParams){
        .mode = (RopeScaling)mode,
        .head_dim = p->head_dim,
        .rot_dims = p->head_dim, // version 3 may turn fewer (below)
        .orig_ctx = orig ? orig : p->n_ctx_max, // L, the trained context
        .base = get_f64(h, 64),
        .factor = get_f64(h, 80),
        .attn_factor = get_f64(h, 88),
        .beta_fast = get_f64(h, 96),
        .beta_slow = get_f64(h, 104),
        .low_freq_factor = get_f64(h, 112),
        .high_freq_factor = get_f64(h, 120),
    };
    const char *bad = check_shape(p);
    if (!bad && (shared != 0 && shared != 1)) bad = "shared_classifier must be 0 or 1";
    if (!bad && (dtype < 0 || dtype >= DTYPE_IN_OUR_FILES)) bad = "unknown weight dtype (0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 bf16, 5 q8_0_r16, 6 bf16_r16)";
    // rerope and leaky-rerope are chosen at run time (--rope-scaling); no checkpoint carries them.
    if (!bad && !rope_mode_in_file(mode))
        bad = "unknown rope_scaling mode";
    if (!bad && rope_file_factors(&p->rope) && version < 3) bad = "longrope needs a version 3 file";
    if (!bad && (orig < 0 || orig > 1 << 24)) bad = "rope_orig_ctx must be in [0, 2^24]";
    p->n_end_ids = version >= 2 ? get_i32(h, 128) : 0;
    if (!bad && version == 2 && (p->n_end_ids < 1 || p->n_end_ids > MODEL_MAX_END_IDS))
        bad = "n_end_ids must be in [1, 8] in a version 2 file";
    if (!bad && version >= 3 && (p->n_end_ids < 0 || p->n_end_ids > MODEL_MAX_END_IDS))
        bad = "n_end_ids must be in [0, 8]";
    for (int i = 0; !bad && i < MODEL_MAX_END_IDS && version >= 2; i++) {
        int id = get_i32(h, 132 + 4 * i);
        if (i < p->n_end_ids && (id < 0 || id >= p->vocab_size)) bad = "end_ids must be token ids";
        if (i >= p->n_end_ids && id) bad = "end_ids past n_end_ids must be zero";
        p->end_ids[i] = id;
    }
    if (version >= 3) {
        const int family = get_i32(h, 164), rot = get_i32(h, 168), families = version >= 4 ? FAMILY_COUNT : FAMILY_GEMMA2;
        p->qkv_bias = get_i32(h, 172);
        p->qk_norm = get_i32(h, 176);
        p->sliding_window = get_i32(h, 180);
        p->family = (Family)family;
        p->rope.rot_dims = rot ? rot : p->head_dim;
        if (!bad && (family < 0 || family >= families)) bad = version >= 4 ? "unknown family (0 .. 13)" : "unknown family (0 .. 5)";
        if (!bad && (rot < 0 || rot % 2 || rot > p->head_dim)) bad = "rot_dims must be 0 or even, up to head_dim";
        if (!bad && (p->qkv_bias & ~1)) bad = "qkv_bias must be 0 or 1";
        if (!bad && (p->qk_norm < 0 || p->qk_norm > (version >= 4 ? QK_NORM_ALL : QK_NORM_HEAD)))
            bad = version >= 4 ? "qk_norm must be 0, 1 or 2" : "qk_norm must be 0 or 1";
        if (!bad && (p->sliding_window < 0 || p->sliding_window > 1 << 24))
            bad = "sliding_window must be in [0, 2^24]";
    }
    if (version >= 4) {
        p->n_hparams = get_i32(h, 184);
        if (!bad && (p->n_hparams < 0 || p->n_hparams > MODEL_MAX_HPARAMS)) bad = "n_hparams must be in [0, 64]";
    }
    const int reserved = version >= 4 ? 188 : version >= 3 ? 184 : version == 2 ? 164 : 128;
    char what[64];
    snprintf(what, sizeof what, "reserved header bytes %d..255 must be zero", reserved);
    for (int i = reserved; !bad && i < MODEL_HEADER_SIZE; i++)
        if (h[i]) bad = what;
    if (bad) {
        snprintf(why, n, "bad header: %s (hint: the file is damaged or not written by export/export.py)", bad);
        return -1;
    }
    if (version >= 4 && read_hparams(p, h, size, why, n)) return -1;
    p->shared_classifier = shared;
    p->dtype = (DType)dtype;
    char rope_err[200]; // every mode but longrope, whose factors follow the header (check_tables)
    if (!rope_file_factors(&p->rope) && rope_params_check(&p->rope, rope_err, sizeof rope_err)) {
        snprintf(why, n, "bad header: %s (hint: the file is damaged or not written by export/export.py)", rope_err);
        return -1;
    }
    return 0;
}

// What only the tables after a version 3 header complete: every layer's kind, the RoPE parameters
// (longrope's factors). Returns 0, or -1 with the reason in why.
static int check_tables(Config *p, char *why, size_t n) {
    const char *bad = NULL;
    for (int l = 0; p->layer_kind && !bad && l < p->n_layers; l++) {
        const int known = LAYER_NO_ROPE | LAYER_SLIDING | (p->version >= 4 ? LAYER_ROPE_SWA : 0);
        if (p->layer_kind[l] & ~known) bad = "layer_kind has unknown bits";
        if (!bad && p->layer_kind[l] & LAYER_SLIDING && p->sliding_window == 0)
            bad = "a sliding layer, and no sliding_window";
        if (!bad && p->layer_kind[l] & LAYER_ROPE_SWA && p->rope_freq_base_train_swa == 0)
            bad = "a layer with the local RoPE, and no rope_freq_base_train_swa";
        if (!bad && (p->layer_kind[l] & (LAYER_ROPE_SWA | LAYER_NO_ROPE)) == (LAYER_ROPE_SWA | LAYER_NO_ROPE))
            bad = "a layer both without RoPE and with the local one";
    }
    char rope_err[200];
    if (!bad && rope_params_check(&p->rope, rope_err, sizeof rope_err)) bad = rope_err;
    if (bad) {
        snprintf(why, n, "bad header: %s (hint: the file is damaged or not written by export/export.py)", bad);
        return -1;
    }
    return 0;
}

// llama2.c legacy ("version 0") header: 7 int32, dim hidden_dim n_layers n_heads n_kv_heads
// vocab_size seq_len; a negative vocab_size means the classifier is stored separately.
static int read_header_legacy(Transformer *t, const uint8_t *h, size_t size) {
    Config *p = &t->config;
    if (size < 7 * sizeof(int32_t)) return -1;
    p->dim = get_i32(h, 0);
    p->hidden_dim = get_i32(h, 4);
    p->n_layers = get_i32(h, 8);
    p->n_heads = get_i32(h, 12);
    p->n_kv_heads = get_i32(h, 16);
    int vocab = get_i32(h, 20);
    p->n_ctx_max = get_i32(h, 24);
    p->shared_classifier = vocab > 0;
    p->vocab_size = vocab == INT32_MIN ? 0 : abs(vocab);
    p->head_dim = p->n_heads > 0 ? p->dim / p->n_heads : 0;
    // What llama2.c hard-codes: base 10000, eps 1e-5, BOS 1, EOS 2, no scaling.
    p->bos_id = 1;
    p->eos_id = 2;
    p->norm_eps = 1e-5f;
    p->dtype = DTYPE_F32;
    p->version = 0;
    p->rope = (RopeParams){
        .mode = ROPE_SCALING_NONE, .head_dim = p->head_dim, .orig_ctx = p->n_ctx_max, .base = 10000, .factor = 1};
    if (check_shape(p) || p->dim % p->n_heads || p->vocab_size < 3) return -1;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// GGUF: llama.cpp's files (gguf.c reads the directory). The keys are mapped onto the same Config an
// export gives, the tensors onto the same weights, each by its llama.cpp name; whatever the file
// holds that this program would not run as written is refused by name, never run half-right.
// Read so far: llama (Llama 1-3, Llama 3.1's rope_freqs included, Mistral, TinyLlama), qwen2
// (Qwen2, Qwen2.5: q/k/v biases), qwen3 (q/k RMSNorm per head), phi3 (Phi-3, Phi-4: q, k and v in one
// tensor, gate and up in another, LongRoPE's factors as tensors), gemma2 and gemma3, olmo2 (OLMo 2, and
// OLMo 3 as an olmo2 file with a window), exaone4, glm4 (GLM-4-0414), granite and mistral3 (Ministral 3),
// their matrices F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K, their vectors F32.
// llama.cpp's converter (its LlamaModel's permute: llama, granite, mistral3) stores q and k rows in
// interleaved pairs, this program's layout (model.h), and GLM-4's are so in the checkpoint: they are
// used as they are. It stores the others' as Hugging Face has them, the two halves of each pair apart
// (llama.cpp rotates them "NEOX" style): their rows are permuted once at load into interleaved pairs
// (gguf_made), as export/export.py does, so that one rotation serves every file; the rest of the
// model is read in place.
// What a file does not say, llama.cpp's graph for its architecture assumes (llama-model.cpp at
// c392e50; for exaone4, glm4 and mistral3 its later models/*.cpp): that is the table below. Gemma's
// norms are stored as 1 + w by the converter, as in our files, and its embedding scale and query
// scale are not stored at all.

// Which layers slide when the file gives {arch}.attention.sliding_window W (Config.layer_kind): in the
// families of local and global layers (slides > 1), those its {arch}.attention.sliding_window_pattern
// says (later converters: a bool per layer, from transformers' layer_types; or a period P, as below);
// else the `slides` column's rule: none (0: a W below the context is refused, for the layers that
// slide are then the checkpoint's rule, which the file does not carry, as Qwen2's use_sliding_window
// and max_window_layers), every one (1: Mistral's and Phi-3's rule), or those whose l + 1 is not a
// multiple of P (P > 1: llama.cpp's set_swa_pattern, transformers' layer_types alike): Gemma 2 the
// even ones (2), OLMo 3 (an olmo2 file with a window) and EXAONE 4 three of four (4), Gemma 3 five of
// six (6). With `local` they also turn with the local RoPE, unscaled: Gemma 3's at base 10000 (llama.cpp's fixed rope_freq_base_train_swa), OLMo 3's at
// the file's own base (llama.cpp's olmo2 graph drops only the YaRN on them). With `nope` the layers
// that do not slide turn with no RoPE at all when some do (EXAONE 4's global NoPE layers: llama.cpp's
// exaone4 graph, use_rope). A file without a window has every layer global, each with the RoPE.
// (llama.cpp reads an exaone4 file's pattern only at 64 layers, the 32B's, and runs any other with a
// window all global; the pattern the converter wrote from layer_types is what transformers runs.)
enum { FUSED_QKV = 1, FUSED_GATE_UP = 2 }; // the `fused` bits: FUSED below
typedef struct {
    const char *arch; // general.architecture
    Family family;
    int halves;       // q and k rows in rotate_half order (NEOX), permuted at load
    int qkv_bias;     // 1: attn_q/k/v.bias; 2: when the file has blk.0.attn_q.bias (GLM-4's attention_bias)
    int qk_norm;      // QK_NORM_HEAD: attn_q_norm, attn_k_norm of one head each; QK_NORM_ALL: of all heads
    int norms;        // NORM_* bits: attn_norm, post_attention_norm, ffn_norm, post_ffw_norm
    Activation act;
    int fused;        // FUSED_* bits: attn_qkv holds q, k and v; ffn_up gate then up (FUSED below)
    int slides;       // 0, 1 or P, above
    int local;        // the sliding layers turn with the local RoPE
    int nope;         // the other layers have no RoPE
    int window;       // W when the file gives none (llama.cpp's default for Gemma 2); 0: none
    int gemma;        // > 0: embeddings x sqrt(dim), scores x 1/sqrt(head_dim), or 1/sqrt(dim / heads)
                      // with this many layers (the 27B models): llama.cpp's rule, standing in for
                      // query_pre_attn_scalar, which the files do not carry
    int mscale_all_dim; // rope.scaling.yarn_log_multiplier is YaRN's mscale_all_dim, mscale 1
                        // (Ministral 3's converter; llama.cpp's mistral3 hparams)
} GgufArch;
#define POST_NORMS (NORM_ATTN_POST | NORM_FFN_POST)
static const GgufArch GGUF_ARCHS[] = {
    {.arch = "llama", .family = FAMILY_LLAMA, .norms = NORMS_LLAMA, .slides = 1},
    {.arch = "qwen2", .family = FAMILY_QWEN2, .halves = 1, .qkv_bias = 1, .norms = NORMS_LLAMA},
    {.arch = "qwen3", .family = FAMILY_QWEN3, .halves = 1, .qk_norm = QK_NORM_HEAD, .norms = NORMS_LLAMA},
    {.arch = "phi3", .family = FAMILY_PHI3, .halves = 1, .norms = NORMS_LLAMA, .fused = FUSED_QKV | FUSED_GATE_UP,
     .slides = 1},
    {.arch = "gemma2", .family = FAMILY_GEMMA2, .halves = 1, .norms = NORMS_LLAMA | POST_NORMS, .act = ACT_GELU_TANH,
     .slides = 2, .window = 4096, .gemma = 46},
    {.arch = "gemma3", .family = FAMILY_GEMMA3, .halves = 1, .qk_norm = QK_NORM_HEAD, .norms = NORMS_LLAMA | POST_NORMS,
     .act = ACT_GELU_TANH, .slides = 6, .local = 1, .gemma = 62},
    {.arch = "olmo2", .family = FAMILY_OLMO2, .halves = 1, .qk_norm = QK_NORM_ALL, .norms = POST_NORMS, .slides = 4,
     .local = 1},
    {.arch = "exaone4", .family = FAMILY_EXAONE4, .halves = 1, .qk_norm = QK_NORM_HEAD, .norms = POST_NORMS,
     .slides = 4, .nope = 1},
    {.arch = "glm4", .family = FAMILY_GLM4, .qkv_bias = 2, .norms = NORMS_LLAMA | POST_NORMS, .fused = FUSED_GATE_UP},
    {.arch = "granite", .family = FAMILY_GRANITE, .norms = NORMS_LLAMA},
    {.arch = "mistral3", .family = FAMILY_MINISTRAL3, .norms = NORMS_LLAMA, .mscale_all_dim = 1},
};

// The keys past the shape an architecture's files carry, each onto its hparam (HPARAMS), with the
// value llama.cpp takes when the file has none (0: the hparam's own default, Llama's).
static const struct {
    const char *arch, *key, *hparam;
    double absent;
} GGUF_HPARAMS[] = {
    {"gemma2", "attn_logit_softcapping", "f_attn_logit_softcapping", 50},
    {"gemma2", "final_logit_softcapping", "f_final_logit_softcapping", 30},
    {"gemma3", "rope.freq_base_swa", "rope_freq_base_train_swa", 10000}, // the local layers' base
    {"gemma3", "final_logit_softcapping", "f_final_logit_softcapping", 0},
    {"granite", "attention.scale", "f_attention_scale", 0},               // muP's four multipliers
    {"granite", "embedding_scale", "f_embedding_scale", 0},
    {"granite", "residual_scale", "f_residual_scale", 0},
    {"granite", "logit_scale", "f_logit_scale", 0},
    {"mistral3", "attention.temperature_scale", "f_attn_temp_scale", 0}, // Ministral 3's llama_4_scaling_beta
};

// The integer at key `{arch}.name`, in [lo, hi]: 1, 0 when absent (*v untouched), -1 with why.
static int arch_int(const Gguf *g, const char *arch, const char *name, int lo, int hi, int *v, char *why, size_t n) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    int64_t x;
    const int got = gguf_get_int(g, key, &x);
    if (got == 0) return 0;
    if (got < 0 || x < lo || x > hi) {
        snprintf(why, n, "bad GGUF: %s must be a whole number in [%d, %d] (hint: the file is damaged)", key, lo, hi);
        return -1;
    }
    *v = (int)x;
    return 1;
}

static int arch_real(const Gguf *g, const char *arch, const char *name, double *v, char *why, size_t n) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    const int got = gguf_get_real(g, key, v);
    if (got < 0 || (got && !isfinite(*v))) {
        snprintf(why, n, "bad GGUF: %s must be a finite number (hint: the file is damaged)", key);
        return -1;
    }
    return got;
}

#define GGUF_HINT "hint: convert the Hugging Face checkpoint with export/export.py instead"

// The tensor `name` as a matrix (rows, cols) or, matrix 0, an F32 vector of rows values; its mark in
// used set. NULL data (and why) when it is missing, misshapen or of a type this program does not run.
static Matrix gguf_matrix(const Gguf *g, const char *name, int matrix, int rows, int cols, unsigned char *used,
                          char *why, size_t n) {
    Matrix m = {NULL, NULL, rows, cols, DTYPE_F32};
    const GgufTensor *t = gguf_tensor(g, name);
    if (!t) {
        snprintf(why, n, "bad GGUF: no tensor %s, which a model of this shape needs (hint: the file is damaged)", name);
        return m;
    }
    used[t - g->tensors] = 1;
    const int dims = matrix ? 2 : 1;
    if (t->n_dims != dims || t->ne[0] != (uint64_t)(matrix ? cols : rows) || (matrix && t->ne[1] != (uint64_t)rows)) {
        snprintf(why, n, "bad GGUF: tensor %s is %llu x %llu (%d dims), where the metadata make it %d x %d (hint: the file "
                 "is damaged)", name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], t->n_dims,
                 matrix ? cols : rows, matrix ? rows : 1);
        return m;
    }
    // The ggml types a matrix runs in (a vector: F32 only, the first), and the type each is read as.
    static const struct {
        uint32_t ggml;
        DType dtype;
    } RUNS[] = {{GGML_F32, DTYPE_F32},        {GGML_F16, DTYPE_F16},        {GGML_BF16, DTYPE_BF16},
                {GGML_Q8_0, DTYPE_GGUF_Q8_0}, {GGML_Q4_0, DTYPE_GGUF_Q4_0}, {GGML_Q4_K, DTYPE_GGUF_Q4_K},
                {GGML_Q5_K, DTYPE_GGUF_Q5_K}, {GGML_Q6_K, DTYPE_GGUF_Q6_K}};
    const size_t kinds = matrix ? sizeof RUNS / sizeof RUNS[0] : 1;
    size_t k = 0;
    while (k < kinds && RUNS[k].ggml != t->type)
        k++;
    if (k == kinds) {
        snprintf(why, n, "tensor %s is %s, which this program does not run from GGUF (it reads F32, F16, BF16, Q8_0, "
                 "Q4_0, Q4_K, Q5_K and Q6_K matrices and F32 vectors; " GGUF_HINT ", or quantize with llama.cpp's "
                 "Q4_K_M, Q5_K_M or Q8_0)", name, ggml_type_name(t->type));
        return m;
    }
    if ((uintptr_t)t->data % 32) { // the mapping starts on a page: the file offset's alignment
        snprintf(why, n, "GGUF tensor %s is not at a multiple of 32 bytes (general.alignment %zu), where this program "
                 "reads tensors (" GGUF_HINT ")", name, g->alignment);
        return m;
    }
    m.dtype = RUNS[k].dtype;
    m.data = t->data;
    return m;
}

// Rows of n_heads heads of hd rows each (row_bytes bytes apiece) from rotate_half order into interleaved
// pairs, from `from` into `to` (export/export.py, interleave_rows): out row h hd + 2i + c = row h hd +
// c rd/2 + i for pair i < rd/2, c in {0, 1}; the rows past rd as they are. A vector is rows of 4 bytes.
static void interleave(uint8_t *to, const uint8_t *from, int n_heads, int hd, int rd, size_t row_bytes) {
    for (int h = 0; h < n_heads; h++)
        for (int r = 0; r < hd; r++) {
            const int src = r >= rd ? r : r % 2 * rd / 2 + r / 2;
            memcpy(to + ((size_t)h * hd + r) * row_bytes, from + ((size_t)h * hd + src) * row_bytes, row_bytes);
        }
}

// The one anonymous mapping of what a GGUF file needs made at load (t->made; as much memory as the
// pieces take, each at a multiple of 64 bytes): longrope's factors as float64 from the file's float32
// (short, then long, `pairs` each; none when NULL), every layer's kind (Config.layer_kind; none when
// kinds is NULL), and with halves q and k of a file in rotate_half order: wq, wk, their biases and
// their norms copied, interleaved. Returns 0, or -1 with why.
static int gguf_made(Transformer *t, const float *factors[2], int pairs, const int *kinds, int halves, char *why,
                     size_t n) {
    Config *p = &t->config;
    const int rd = p->rope.rot_dims, hd = p->head_dim, all = p->qk_norm == QK_NORM_ALL;
#define PIECE(bytes) (((bytes) + MODEL_ALIGN - 1) / MODEL_ALIGN * MODEL_ALIGN)
    size_t bytes = (factors[0] ? 2 * PIECE((size_t)pairs * sizeof(double)) : 0) +
                   (kinds ? PIECE((size_t)p->n_layers * sizeof(int)) : 0);
    for (int l = 0; halves && l < p->n_layers; l++) {
        const LayerWeights *lw = &t->weights.layers[l];
        bytes += PIECE(matrix_data_bytes(lw->wq.dtype, lw->wq.rows, lw->wq.cols)) +
                 PIECE(matrix_data_bytes(lw->wk.dtype, lw->wk.rows, lw->wk.cols));
        bytes += p->qkv_bias ? PIECE((size_t)lw->wq.rows * sizeof(float)) + PIECE((size_t)lw->wk.rows * sizeof(float)) : 0;
        bytes += p->qk_norm ? PIECE((size_t)tensor_size(p, SIZE_QNORM) * sizeof(float)) +
                              PIECE((size_t)tensor_size(p, SIZE_KNORM) * sizeof(float)) : 0;
    }
    if (!bytes) return 0;
    uint8_t *at = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (at == MAP_FAILED) {
        snprintf(why, n, "no memory for what the GGUF file needs made at load (%.1f MiB)", bytes / 1048576.0);
        return -1;
    }
    t->made = at, t->made_bytes = bytes;
    for (int k = 0; factors[0] && k < 2; k++) {
        double *f = (double *)at;
        for (int i = 0; i < pairs; i++)
            f[i] = factors[k][i];
        *(k ? &p->rope.long_factor : &p->rope.short_factor) = f;
        at += PIECE((size_t)pairs * sizeof(double));
    }
    if (kinds) {
        memcpy(at, kinds, (size_t)p->n_layers * sizeof(int));
        p->layer_kind = (const int *)at;
        at += PIECE((size_t)p->n_layers * sizeof(int));
    }
    for (int l = 0; halves && l < p->n_layers; l++) {
        LayerWeights *lw = &t->weights.layers[l];
        Matrix *m[2] = {&lw->wq, &lw->wk};
        const float **bias[2] = {&lw->bq, &lw->bk}, **norm[2] = {&lw->q_norm, &lw->k_norm};
        for (int k = 0; k < 2; k++) {
            const int heads = k ? p->n_kv_heads : p->n_heads;
            interleave(at, m[k]->data, heads, hd, rd, matrix_data_bytes(m[k]->dtype, 1, m[k]->cols));
            m[k]->data = at, at += PIECE(matrix_data_bytes(m[k]->dtype, m[k]->rows, m[k]->cols));
            if (p->qk_norm) { // each weight stays with its coordinate: one head's, or every head's
                interleave(at, (const uint8_t *)*norm[k], all ? heads : 1, hd, rd, sizeof(float));
                *norm[k] = (const float *)at, at += PIECE((size_t)(all ? heads : 1) * hd * sizeof(float));
            }
            if (!p->qkv_bias) continue;
            interleave(at, (const uint8_t *)*bias[k], heads, hd, rd, sizeof(float));
            *bias[k] = (const float *)at, at += PIECE((size_t)heads * hd * sizeof(float));
        }
    }
#undef PIECE
    return 0;
}

// A GGUF file's matrix types other than the one the banner names, as read, before any copy (a GGUF
// file keeps each tensor's own: a Q4_K_M file Q4_K, Q6_K and F16, a Q8_0 one F16 rows that are not
// whole blocks), as ", with T and U matrices" in the order first met; "" when every matrix is of that
// type.
static void gguf_types_line(const Transformer *t, char *buf, size_t n) {
    const Config *c = &t->config;
    const TransformerWeights *w = &t->weights;
    int seen[DTYPE_COUNT] = {0}, count = 0;
    seen[c->dtype] = 1;
    DType found[DTYPE_COUNT];
    buf[0] = 0;
    const Matrix *top[2] = {&w->token_embedding, &w->wcls};
    for (int l = -1; l <= c->n_layers; l++) { // the embedding, the layers, the classifier
        const LayerWeights *lw = l >= 0 && l < c->n_layers ? &w->layers[l] : NULL;
        const Matrix *ms[7] = {lw ? &lw->wq : top[l >= 0], lw ? &lw->wk : NULL, lw ? &lw->wv : NULL,
                               lw ? &lw->wo : NULL,        lw ? &lw->w1 : NULL, lw ? &lw->w2 : NULL,
                               lw ? &lw->w3 : NULL};
        for (int i = 0; i < 7; i++)
            if (ms[i] && ms[i]->data && !seen[ms[i]->dtype]) seen[ms[i]->dtype] = 1, found[count++] = ms[i]->dtype;
    }
    for (int i = 0; i < count; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i == 0 ? ", with " : i == count - 1 ? " and " : ", ",
                 dtype_name(found[i]));
    if (count) snprintf(buf + strlen(buf), n - strlen(buf), " matrices");
}

// The banner's line on the file's {arch}.* keys: how many were read (gguf_find marks each one looked
// up, present or not, as it hands it out), and the names of those that were not, which this program
// does not know and so runs without (as llama.cpp does with keys its architecture does not read).
static void gguf_keys_line(const Gguf *g, const char *arch, char *line, size_t n) {
    const size_t len = strlen(arch);
#define ARCH_KEY(kv) ((kv)->key_len > len && !memcmp((kv)->key, arch, len) && (kv)->key[len] == '.')
    size_t read = 0, all = 0;
    for (size_t i = 0; i < g->n_kv; i++)
        if (ARCH_KEY(&g->kv[i])) all++, read += g->kv[i].looked_up;
    size_t at = (size_t)snprintf(line, n, "%zu of its %zu %s.* keys read", read, all, arch);
    const char *sep = "; not read: ";
    for (size_t i = 0; i < g->n_kv && at < n; i++)
        if (ARCH_KEY(&g->kv[i]) && !g->kv[i].looked_up) {
            const GgufKV *kv = &g->kv[i];
            at += (size_t)snprintf(line + at, n - at, "%s%.*s", sep, (int)(kv->key_len < 60 ? kv->key_len : 60), kv->key);
            sep = ", ";
        }
#undef ARCH_KEY
}

// The fused matrices (Phi-3's qkv_proj, modeling_phi3.py; gate_up_proj of Phi-3 and GLM-4, whose
// chunk(2) puts gate first): the GgufArch.fused bit, the tensor, and the LayerWeights its rows go to,
// in order, with their sizes (tensor_size).
static const struct {
    int bit;
    const char *gguf;
    size_t at[3];
    int rows[3], parts;
} FUSED[] = {
    {FUSED_QKV, "attn_qkv.weight", {offsetof(LayerWeights, wq), offsetof(LayerWeights, wk), offsetof(LayerWeights, wv)},
     {SIZE_Q, SIZE_KV, SIZE_KV}, 3},
    {FUSED_GATE_UP, "ffn_up.weight", {offsetof(LayerWeights, w1), offsetof(LayerWeights, w3)}, {SIZE_H, SIZE_H}, 2},
};

static int read_gguf(Transformer *t, const uint8_t *map, size_t size, char *why, size_t n) {
    Config *p = &t->config;
    Gguf g;
    unsigned char *used = NULL;
    if (gguf_parse(&g, map, size, why, n)) return -1;
    int status = -1;
    const char *arch = NULL;
    size_t arch_len = 0;
    char name[160], a[32] = "";
    if (!g.n_tensors) {
        snprintf(why, n, "a GGUF file without tensors: a vocabulary only, not a model (hint: it can be the tokenizer "
                 "of a model with the same vocabulary: -z FILE)");
        goto done;
    }
    if (gguf_get_string(&g, "general.architecture", &arch, &arch_len) != 1 || arch_len >= sizeof a) {
        snprintf(why, n, "bad GGUF: no general.architecture string (hint: the file is damaged)");
        goto done;
    }
    memcpy(a, arch, arch_len);
    size_t kind = 0, kinds = sizeof GGUF_ARCHS / sizeof GGUF_ARCHS[0];
    while (kind < kinds && (strlen(a) != arch_len || strcmp(a, GGUF_ARCHS[kind].arch)))
        kind++;
    if (kind == kinds) {
        char known[160] = "";
        for (size_t k = 0; k < kinds; k++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "", GGUF_ARCHS[k].arch);
        snprintf(why, n, "GGUF architecture \"%.*s\" is not one this program reads from GGUF yet (it reads %s; "
                 GGUF_HINT ")", (int)(arch_len < 40 ? arch_len : 40), arch, known);
        goto done;
    }
    const GgufArch *A = &GGUF_ARCHS[kind];
    int experts = 0;
    if (arch_int(&g, a, "expert_count", 0, 1 << 20, &experts, why, n) < 0) goto done;
    if (experts > 0) {
        snprintf(why, n, "GGUF model with %d experts (mixture of experts), which this program does not run", experts);
        goto done;
    }
    p->gguf = (int)g.version;
    p->family = A->family;
    p->version = p->family >= FAMILY_GEMMA2 ? 4 : 3; // what an export of the same checkpoint reads as (model.h)
    p->qkv_bias = A->qkv_bias == 2 ? gguf_tensor(&g, "blk.0.attn_q.bias") != NULL : A->qkv_bias;
    p->qk_norm = A->qk_norm;
    p->norms = A->norms;
    p->act = A->act;
    p->n_kv_heads = 0, p->head_dim = 0, p->n_ctx_max = 0;
    if (arch_int(&g, a, "embedding_length", 1, 65536, &p->dim, why, n) != 1 ||
        arch_int(&g, a, "feed_forward_length", 1, 1 << 20, &p->hidden_dim, why, n) != 1 ||
        arch_int(&g, a, "block_count", 1, 1024, &p->n_layers, why, n) != 1 ||
        arch_int(&g, a, "attention.head_count", 1, 1024, &p->n_heads, why, n) != 1 ||
        arch_int(&g, a, "context_length", 1, 1 << 24, &p->n_ctx_max, why, n) != 1) {
        if (!*why)
            snprintf(why, n, "bad GGUF: a %s model needs %s.embedding_length, feed_forward_length, block_count, "
                     "attention.head_count and context_length (hint: the file is damaged)", a, a);
        goto done;
    }
    p->n_kv_heads = p->n_heads;
    p->head_dim = p->dim / p->n_heads;
    int value_length = 0, rot = 0;
    double eps = 0, base = 10000;
    if (arch_int(&g, a, "attention.head_count_kv", 1, 1024, &p->n_kv_heads, why, n) < 0 ||
        arch_int(&g, a, "attention.key_length", 2, ROPE_MAX_HEAD_DIM, &p->head_dim, why, n) < 0 ||
        arch_int(&g, a, "attention.value_length", 2, ROPE_MAX_HEAD_DIM, &value_length, why, n) < 0 ||
        arch_int(&g, a, "rope.dimension_count", 0, ROPE_MAX_HEAD_DIM, &rot, why, n) < 0 ||
        arch_real(&g, a, "rope.freq_base", &base, why, n) < 0 ||
        arch_real(&g, a, "attention.layer_norm_rms_epsilon", &eps, why, n) < 0)
        goto done;
    if (value_length && value_length != p->head_dim) {
        snprintf(why, n, "GGUF attention.value_length %d differs from key_length %d, which this program does not run",
                 value_length, p->head_dim);
        goto done;
    }
    // What the layers do besides Llama's: the keys the architecture's files carry, then Gemma's scales
    for (size_t i = 0; i < sizeof GGUF_HPARAMS / sizeof GGUF_HPARAMS[0]; i++) {
        if (strcmp(GGUF_HPARAMS[i].arch, a)) continue;
        double v = GGUF_HPARAMS[i].absent;
        if (arch_real(&g, a, GGUF_HPARAMS[i].key, &v, why, n) < 0) goto done;
        const size_t k = hparam_index(GGUF_HPARAMS[i].hparam);
        const char *bad = v ? hparam_set(p, k, v) : NULL;
        if (bad) {
            snprintf(why, n, "bad GGUF: %s.%s %g %s [%g, %g] (hint: the file is damaged)", a, GGUF_HPARAMS[i].key, v,
                     bad, HPARAMS[k].lo, HPARAMS[k].hi);
            goto done;
        }
    }
    if (A->gemma) {
        p->f_embedding_scale = sqrtf((float)p->dim); // Gemma2Model: in the model's float type
        p->f_attention_scale = (float)(1 / sqrt(p->n_layers == A->gemma ? p->dim / p->n_heads : p->head_dim));
    }
    // rope.scaling.type: none; linear (position interpolation by factor); yarn, read as Hugging Face
    // reads a rope_scaling of that type (factor, original_max_position_embeddings; beta_fast and
    // beta_slow from llama.cpp's yarn_beta_* keys; attention factor the paper's 0.1 ln s + 1, which
    // is llama.cpp's too when its rope.scaling.attn_factor is 1 or absent)
    const char *scaling = "none";
    size_t scaling_len = 4;
    snprintf(name, sizeof name, "%s.rope.dimension_sections", a);
    if (gguf_find(&g, name)) { // the vision models' rows and positions (GLM-4V's converter permutes for it)
        snprintf(why, n, "GGUF %s: multimodal RoPE (M-RoPE) is not run by this program (" GGUF_HINT ")", name);
        goto done;
    }
    snprintf(name, sizeof name, "%s.rope.scaling.type", a);
    RopeScaling mode = ROPE_SCALING_NONE;
    if (gguf_get_string(&g, name, &scaling, &scaling_len) < 0) scaling_len = 0;
    if (scaling_len == 6 && !memcmp(scaling, "linear", 6))
        mode = ROPE_SCALING_PI;
    else if (scaling_len == 4 && !memcmp(scaling, "yarn", 4))
        mode = ROPE_SCALING_YARN;
    else if (!(scaling_len == 4 && !memcmp(scaling, "none", 4))) {
        snprintf(why, n, "GGUF %s \"%.*s\" is not read from GGUF yet (none, linear and yarn are; " GGUF_HINT ")", name,
                 (int)(scaling_len < 20 ? scaling_len : 20), scaling);
        goto done;
    }
    double factor = 1, attn = 1, beta_fast = 0, beta_slow = 0;
    int orig = p->n_ctx_max, has_attn;
    if (mode != ROPE_SCALING_NONE && (arch_real(&g, a, "rope.scaling.factor", &factor, why, n) != 1 || factor < 1)) {
        if (!*why)
            snprintf(why, n, "bad GGUF: RoPE scaling %.*s needs %s.rope.scaling.factor >= 1", (int)scaling_len, scaling, a);
        goto done;
    }
    if (arch_int(&g, a, "rope.scaling.original_context_length", 1, 1 << 24, &orig, why, n) < 0 ||
        (has_attn = arch_real(&g, a, "rope.scaling.attn_factor", &attn, why, n)) < 0 ||
        arch_real(&g, a, "rope.scaling.yarn_beta_fast", &beta_fast, why, n) < 0 ||
        arch_real(&g, a, "rope.scaling.yarn_beta_slow", &beta_slow, why, n) < 0)
        goto done;
    // The scalings written as tensors: rope_freqs.weight, how llama.cpp's converter writes a llama3
    // rope_scaling (Llama 3.1, 3.2): no rope.scaling.* keys, and per pair the divisor Meta's bands give
    // its frequency (1, the factor, or the blend between), read as llama3 with those divisors (rope.h,
    // pair_divisor; the file's context_length is then L, the context they were made for); and
    // rope_factors_short.weight and rope_factors_long.weight, Phi-3's LongRoPE factors (one per pair
    // each), with rope.scaling.original_context_length L and the attention factor it was given
    // (rope.scaling.attn_factor), read as longrope stretched by context_length / L (Phi3's config).
    const GgufTensor *freqs = gguf_tensor(&g, "rope_freqs.weight");
    const GgufTensor *lambda[2] = {gguf_tensor(&g, "rope_factors_short.weight"), gguf_tensor(&g, "rope_factors_long.weight")};
    if ((freqs || lambda[0] || lambda[1]) && mode != ROPE_SCALING_NONE) {
        snprintf(why, n, "bad GGUF: both %s \"%.*s\" and the per-pair tensor %s; one RoPE scaling is run at a time "
                 "(hint: the file is damaged)", name, (int)scaling_len, scaling,
                 freqs ? "rope_freqs.weight" : "rope_factors_short/long.weight");
        goto done;
    }
    if (freqs && (lambda[0] || lambda[1])) {
        snprintf(why, n, "bad GGUF: both rope_freqs.weight and LongRoPE's factors (hint: the file is damaged)");
        goto done;
    }
    if (!lambda[0] != !lambda[1]) {
        snprintf(why, n, "bad GGUF: LongRoPE needs both rope_factors_short.weight and rope_factors_long.weight, and "
                 "the file has one (hint: the file is damaged)");
        goto done;
    }
    if (freqs) mode = ROPE_SCALING_LLAMA3;
    if (lambda[0]) mode = ROPE_SCALING_LONGROPE, factor = (double)p->n_ctx_max / orig;
    if (has_attn && attn != 1 && mode != ROPE_SCALING_LONGROPE) {
        snprintf(why, n, "GGUF %s.rope.scaling.attn_factor %g is not read from GGUF yet (1, the default, is; " GGUF_HINT ")",
                 a, attn);
        goto done;
    }
    // Later converters' YaRN keys (llama-arch.cpp, LLM_KV_ROPE_SCALING_YARN_*): each changes the
    // attention factor or the ramp away from the paper's unless it has its neutral value (or, for the
    // ramp's ext_factor, llama.cpp's -1, "unset": 1 under YaRN), so any other value is refused by name
    // rather than run as if absent.
    static const struct {
        const char *key;
        double neutral, unset;
    } YARN_KEYS[] = {{"rope.scaling.yarn_attn_factor", 1, 1}, {"rope.scaling.yarn_log_multiplier", 0, 0},
                     {"rope.scaling.yarn_ext_factor", 1, -1}};
    // Ministral 3's converter writes YaRN's mscale_all_dim m as yarn_log_multiplier and its mscale not
    // at all (1, as llama.cpp's mistral3 hparams take it): transformers' attention factor is then
    // get_mscale(s, 1) / get_mscale(s, m), get_mscale(s, m) = 0.1 m ln s + 1 (modeling_rope_utils.py,
    // _compute_yarn_parameters), which is 1 for the released m = 1 (the paper's 0.1 ln s + 1 cancelled).
    double mscale_all_dim = 0;
    if (A->mscale_all_dim && (arch_real(&g, a, "rope.scaling.yarn_log_multiplier", &mscale_all_dim, why, n) < 0 ||
                              mscale_all_dim < 0 || mscale_all_dim > 100)) {
        if (!*why)
            snprintf(why, n, "bad GGUF: %s.rope.scaling.yarn_log_multiplier %g is not in [0, 100] "
                     "(hint: the file is damaged)", a, mscale_all_dim);
        goto done;
    }
    const int yarn_m = mode == ROPE_SCALING_YARN && mscale_all_dim;
    if (yarn_m) attn = (0.1 * log(factor) + 1) / (0.1 * mscale_all_dim * log(factor) + 1);
    for (size_t i = 0; i < sizeof YARN_KEYS / sizeof YARN_KEYS[0]; i++) {
        double v = YARN_KEYS[i].neutral;
        if (A->mscale_all_dim && !strcmp(YARN_KEYS[i].key, "rope.scaling.yarn_log_multiplier")) continue; // above
        if (arch_real(&g, a, YARN_KEYS[i].key, &v, why, n) < 0) goto done;
        if (v != YARN_KEYS[i].neutral && v != YARN_KEYS[i].unset) {
            snprintf(why, n, "GGUF %s.%s %g is not read from GGUF yet (%g, the neutral value, is; " GGUF_HINT ")", a,
                     YARN_KEYS[i].key, v, YARN_KEYS[i].neutral);
            goto done;
        }
    }
    p->norm_eps = (float)(eps ? eps : 1e-5);
    p->rope = (RopeParams){
        .mode = mode,
        .head_dim = p->head_dim,
        .rot_dims = rot ? rot : p->head_dim,
        .orig_ctx = mode != ROPE_SCALING_NONE ? orig : p->n_ctx_max,
        .base = base,
        .factor = factor,
        .attn_factor = (mode == ROPE_SCALING_LONGROPE && has_attn) || yarn_m ? attn : 0,
        .beta_fast = mode == ROPE_SCALING_YARN ? beta_fast : 0,
        .beta_slow = mode == ROPE_SCALING_YARN ? beta_slow : 0,
    };
    // Ministral 3's query temperature steps at the original context (llama.cpp: n_ctx_orig_yarn)
    if (p->f_attn_temp_scale) p->n_attn_temp_floor_scale = orig;
    // The window and the layers that slide (GGUF_ARCHS' slides, local and nope, above)
    int window = A->window, layer_kind[1024] = {0}, slides = 0, differ = 0, period = A->slides;
    if (arch_int(&g, a, "attention.sliding_window", 0, 1 << 24, &window, why, n) < 0) goto done;
    if (!A->slides && window > 0 && window < p->n_ctx_max) {
        snprintf(why, n, "GGUF %s.attention.sliding_window %d (below its context_length %d) is not read from GGUF "
                 "yet: the file does not say which layers slide (" GGUF_HINT ")", a, window, p->n_ctx_max);
        goto done;
    }
    snprintf(name, sizeof name, "%s.attention.sliding_window_pattern", a);
    const GgufKV *pattern = A->slides > 1 ? gguf_find(&g, name) : NULL; // the per-layer families'
    const int per_layer = pattern && pattern->type == GGUF_ARRAY;
    const int numbers = per_layer && pattern->elem != GGUF_STRING && pattern->elem != GGUF_ARRAY;
    if (per_layer ? pattern->count != (uint64_t)p->n_layers || !numbers
                  : pattern && arch_int(&g, a, "attention.sliding_window_pattern", 1, 1024, &period, why, n) != 1) {
        snprintf(why, n, "bad GGUF: %s must be a bool per layer (%d) or a period in [1, 1024] (hint: the file is "
                 "damaged)", name, p->n_layers);
        goto done;
    }
    for (int l = 0; A->slides && window > 0 && l < p->n_layers; l++) {
        const int slide = per_layer ? gguf_array_real(pattern, l) != 0 : period == 1 || (l + 1) % period;
        layer_kind[l] = slide ? LAYER_SLIDING | (A->local ? LAYER_ROPE_SWA : 0) : A->nope ? LAYER_NO_ROPE : 0;
        slides += slide, differ += layer_kind[l] != 0;
    }
    if (slides && A->local && !p->rope_freq_base_train_swa) p->rope_freq_base_train_swa = base; // OLMo 3's
    p->sliding_window = slides ? window : 0;
    if (p->family == FAMILY_OLMO2 && slides) p->family = FAMILY_OLMO3; // written as olmo2 with a window
    const GgufTensor *emb = gguf_tensor(&g, "token_embd.weight");
    if (!emb) {
        snprintf(why, n, "bad GGUF: no tensor token_embd.weight (hint: the file is damaged)");
        goto done;
    }
    p->vocab_size = emb->n_dims == 2 && emb->ne[1] <= (1 << 22) ? (int)emb->ne[1] : 0;
    int vocab = p->vocab_size;
    if (arch_int(&g, a, "vocab_size", 1, 1 << 22, &vocab, why, n) < 0) goto done;
    if (vocab != p->vocab_size) {
        snprintf(why, n, "bad GGUF: %s.vocab_size %d, and token_embd.weight has %d rows (hint: the file is damaged)", a,
                 vocab, p->vocab_size);
        goto done;
    }
    int64_t id;
    p->bos_id = gguf_get_int(&g, "tokenizer.ggml.bos_token_id", &id) == 1 && id >= 0 && id < vocab ? (int)id : -1;
    p->eos_id = gguf_get_int(&g, "tokenizer.ggml.eos_token_id", &id) == 1 && id >= 0 && id < vocab ? (int)id : -1;
    const char *ends[] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}; // more ends of a text
    for (int i = 0; i < 2; i++)
        if (gguf_get_int(&g, ends[i], &id) == 1 && id >= 0 && id < vocab && id != p->eos_id)
            p->end_ids[p->n_end_ids++] = (int)id;
    const char *bad = check_shape(p);
    if (bad || rot % 2 || rot > p->head_dim) {
        snprintf(why, n, "bad GGUF: %s (hint: the file is damaged)", bad ? bad : "rope.dimension_count must be even, up to the head size");
        goto done;
    }
    p->shared_classifier = gguf_tensor(&g, "output.weight") == NULL;
    used = calloc(g.n_tensors ? g.n_tensors : 1, 1);
    t->weights.layers = calloc((size_t)p->n_layers, sizeof(LayerWeights));
    if (!used || !t->weights.layers) {
        snprintf(why, n, "out of memory");
        goto done;
    }
    *why = 0;
    TransformerWeights *w = &t->weights;
    w->token_embedding = gguf_matrix(&g, "token_embd.weight", 1, p->vocab_size, p->dim, used, why, n);
    for (int l = 0; l < p->n_layers && !*why; l++) {
        for (size_t f = 0; f < sizeof FUSED / sizeof FUSED[0] && !*why; f++) { // each part a run of rows
            if (!(A->fused & FUSED[f].bit)) continue;
            int rows = 0;
            for (int i = 0; i < FUSED[f].parts; i++)
                rows += tensor_size(p, FUSED[f].rows[i]);
            snprintf(name, sizeof name, "blk.%d.%s", l, FUSED[f].gguf);
            Matrix m = gguf_matrix(&g, name, 1, rows, p->dim, used, why, n);
            for (int i = 0; i < FUSED[f].parts && m.data; i++) {
                Matrix *part = (Matrix *)((char *)&w->layers[l] + FUSED[f].at[i]);
                *part = m, part->rows = tensor_size(p, FUSED[f].rows[i]);
                m.data = (const uint8_t *)m.data + matrix_data_bytes(m.dtype, part->rows, m.cols);
            }
        }
        for (int i = 0; i < N_LAYER_TENSORS && !*why; i++) {
            char *field = (char *)&w->layers[l] + LAYER_TENSORS[i].at;
            if (!has_tensor(p, LAYER_TENSORS[i].when) || (LAYER_TENSORS[i].matrix && ((Matrix *)field)->data))
                continue; // not in this model, or a part of a fused one
            snprintf(name, sizeof name, "blk.%d.%s", l, LAYER_TENSORS[i].gguf);
            const Matrix m = gguf_matrix(&g, name, LAYER_TENSORS[i].matrix, tensor_size(p, LAYER_TENSORS[i].rows),
                                         tensor_size(p, LAYER_TENSORS[i].cols), used, why, n);
            if (LAYER_TENSORS[i].matrix)
                *(Matrix *)field = m;
            else
                *(const float **)field = m.data;
        }
    }
    if (!*why) w->rms_final = gguf_matrix(&g, "output_norm.weight", 0, p->dim, 0, used, why, n).data;
    if (!*why && freqs) p->rope.pair_divisor = gguf_matrix(&g, "rope_freqs.weight", 0, p->rope.rot_dims / 2, 0, used, why, n).data;
    const float *factors[2] = {NULL, NULL};
    for (int k = 0; k < 2 && !*why && lambda[0]; k++)
        factors[k] = gguf_matrix(&g, k ? "rope_factors_long.weight" : "rope_factors_short.weight", 0,
                                 p->rope.rot_dims / 2, 0, used, why, n).data;
    if (!*why) w->wcls = p->shared_classifier ? w->token_embedding
                                              : gguf_matrix(&g, "output.weight", 1, p->vocab_size, p->dim, used, why, n);
    for (size_t i = 0; i < g.n_tensors && !*why; i++)
        if (!used[i])
            snprintf(why, n, "GGUF tensor %.*s is not one this program reads for a %s model: it would run without it "
                     "(" GGUF_HINT ")", (int)(g.tensors[i].name_len < 64 ? g.tensors[i].name_len : 64), g.tensors[i].name, a);
    if (*why || gguf_made(t, factors, p->rope.rot_dims / 2, differ ? layer_kind : NULL, A->halves, why, n))
        goto done;
    p->dtype = w->layers[0].wq.dtype; // what the banner names; each matrix has its own (a Q8_0 file's F16 rows)
    gguf_keys_line(&g, a, t->gguf_keys, sizeof t->gguf_keys);
    gguf_types_line(t, t->gguf_types, sizeof t->gguf_types);
    t->weight_bytes = 0;
    for (size_t i = 0; i < g.n_tensors; i++)
        t->weight_bytes += g.tensors[i].bytes;
    status = 0;
done:
    free(used);
    gguf_free(&g);
    return status;
}

// ---------------------------------------------------------------------------------------------
// Loading

int transformer_load(Transformer *t, const char *path, int f16_as_bf16, char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    char why[400] = "";
    int fd = open(path, O_RDONLY | O_NONBLOCK); // O_NONBLOCK: opening a FIFO would wait for a writer
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open model: %s (hint: check the path)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen,
                 "%s: not a regular file (hint: pass the .bin file; export/export.py converts "
                 "a Hugging Face directory)",
                 path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size < 4) {
        snprintf(err, errlen,
                 "%s: %zu bytes is too short to be a model (hint: the file is truncated or "
                 "empty; export it again)",
                 path, size);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map the file: %s", path, strerror(errno));
        return -1;
    }
    // A hint, ignored where unsupported: the parts of the file not yet in the page cache are read in
    // 2 MiB pieces and mapped as 2 MiB pages (Linux 6.x, transparent huge pages on "madvise" or
    // "always"), fewer address translations for decode, which reads every weight once a step
    // (docs/speed.md, "Memory"; FilePmdMapped in /proc/PID/smaps shows how much got them). Parts
    // already cached in 4 KiB pieces (a file just copied with cp) stay 4 KiB pages.
    madvise(map, size, MADV_HUGEPAGE);
    t->map = map;
    t->map_size = size;
    const uint8_t *h = map;

    if (gguf_is_gguf(h, size)) { // llama.cpp's format (above); the rest of this function is ours and llama2.c's
        config_defaults(&t->config);
        if (read_gguf(t, h, size, why, sizeof why) || check_tables(&t->config, why, sizeof why) ||
            transformer_copy_weights(t, f16_as_bf16, why, sizeof why))
            goto fail;
        return 0;
    }
    int ours = memcmp(h, MODEL_MAGIC, 4) == 0;
    if (!ours && memcmp(h, "ak42", 4) == 0) {
        snprintf(why, sizeof why,
                 "a llama2.c version 1/2 export, which this program does not read (hint: "
                 "export with llama2.c's --version 0, or convert the Hugging Face model with export/export.py)");
        goto fail;
    }
    config_defaults(&t->config);
    if (ours ? read_header_ours(t, h, size, why, sizeof why) : read_header_legacy(t, h, size)) {
        if (!ours)
            snprintf(why, sizeof why,
                     "not a model file: no \"%s\" magic and no valid llama2.c legacy header "
                     "(hint: convert a Hugging Face checkpoint with export/export.py)",
                     MODEL_MAGIC);
        goto fail;
    }

    t->weights.layers = calloc((size_t)t->config.n_layers, sizeof(LayerWeights));
    if (!t->weights.layers) {
        snprintf(why, sizeof why, "out of memory");
        goto fail;
    }
    Cursor c = {h, size, 0, 0};
    if (ours)
        walk_ours(&c, t);
    else
        walk_legacy(&c, t);
    if (c.overflow || c.off != size) {
        if (!ours && (c.overflow || c.off > size))
            snprintf(why, sizeof why,
                     "not a model file: no \"%s\" magic, and as a llama2.c legacy checkpoint "
                     "it would need more than its %zu bytes (hint: convert the model with export/export.py, "
                     "or the file is truncated)",
                     MODEL_MAGIC, size);
        else if (c.overflow)
            snprintf(why, sizeof why, "header describes tensors too large to address (hint: the file is damaged)");
        else
            snprintf(why, sizeof why, "file is %zu bytes but its header describes %zu (hint: %s)", size, c.off,
                     c.off > size ? "the file is truncated; copy or export it again"
                                  : "extra bytes at the end: the file is damaged or the header is wrong");
        goto fail;
    }
    if (check_tables(&t->config, why, sizeof why)) goto fail;
    t->weight_bytes = size - (ours ? MODEL_HEADER_SIZE : 7 * sizeof(int32_t));
    // f32, f16, and q8_0 and bf16 in their first layouts (dtype 0, 1, 2, 4): copied into the grouped
    // layouts the kernels read (dtype.h)
    if (transformer_copy_weights(t, f16_as_bf16, why, sizeof why)) goto fail;
    return 0;

fail:
    snprintf(err, errlen, "%s: %s", path, why);
    transformer_free(t);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// --check-tensors: every weight's value finite (llama.cpp's flag of the same name). A NaN or an
// infinity in a weight turns every activation it touches into NaN, and the text into whatever
// token the sampler makes of NaN logits; scanned at load, the file is refused naming the tensor.
// A matrix is read as the forward pass reads it (matrix_row: a q8_0 or q4_0 value is its quant
// times its block's scale, so a non-finite scale shows in every value of its block); the vectors
// (norms, biases) are f32 in every file.

// The first non-finite value of m: its row, column and value in *row, *col, *x; 0 when every value
// is finite, 1 when one is not, -1 when no scratch row could be allocated.
static int matrix_nonfinite(const Matrix *m, int *row, int *col, float *value) {
    int first = m->rows, failed = 0; // the first row with a non-finite value; rows: none
#pragma omp parallel
    {
        float *x = malloc((size_t)m->cols * sizeof *x); // (cols) one row as float
        if (!x) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static) reduction(min : first)
        for (int r = 0; r < m->rows; r++) {
            if (!x || r > first) continue; // (this thread's first so far)
            matrix_row(x, m, r);
            for (int c = 0; c < m->cols; c++)
                if (!isfinite(x[c])) {
                    first = r;
                    break;
                }
        }
        free(x);
    }
    if (failed) return -1;
    if (first == m->rows) return 0;
    float *x = malloc((size_t)m->cols * sizeof *x);
    if (!x) return -1;
    matrix_row(x, m, first);
    int c = 0;
    while (isfinite(x[c]))
        c++;
    *row = first, *col = c, *value = x[c];
    free(x);
    return 1;
}

// One tensor: a matrix m, or (m NULL) the n f32 values v (NULL: the model has no such tensor).
// 0 when every value is finite; -1 with the tensor, the place and the value in err.
static int check_tensor(const char *name, int layer, const Matrix *m, const float *v, int n, char *err, size_t errlen) {
    int row = 0, col = 0, bad = 0;
    float x = 0;
    if (m) {
        bad = matrix_nonfinite(m, &row, &col, &x);
        if (bad < 0) {
            snprintf(err, errlen, "--check-tensors: out of memory");
            return -1;
        }
    } else if (v) {
        while (col < n && isfinite(v[col]))
            col++;
        bad = col < n;
        if (bad) x = v[col];
    }
    if (!bad) return 0;
    char tensor[48], at[48];
    if (layer >= 0)
        snprintf(tensor, sizeof tensor, "layers.%d.%s", layer, name);
    else
        snprintf(tensor, sizeof tensor, "%s", name);
    if (m)
        snprintf(at, sizeof at, "row %d, column %d", row, col);
    else
        snprintf(at, sizeof at, "index %d", col);
    snprintf(err, errlen,
             "--check-tensors: tensor %s holds %s at %s (hint: the file is damaged, or its checkpoint has such "
             "weights: export it again from a good one)",
             tensor, isnan(x) ? "NaN" : x > 0 ? "+infinity" : "-infinity", at);
    return -1;
}

int transformer_check_tensors(const Transformer *t, char *err, size_t errlen) {
    const Config *p = &t->config;
    const TransformerWeights *w = &t->weights;
    if (check_tensor("token_embedding", -1, &w->token_embedding, NULL, 0, err, errlen)) return -1;
    for (int l = 0; l < p->n_layers; l++)
        for (int i = 0; i < N_LAYER_TENSORS; i++) {
            const char *field = (const char *)&w->layers[l] + LAYER_TENSORS[i].at;
            const Matrix *m = LAYER_TENSORS[i].matrix ? (const Matrix *)field : NULL;
            const float *v = m ? NULL : *(const float *const *)field; // NULL: not in this model
            if (has_tensor(p, LAYER_TENSORS[i].when) &&
                check_tensor(LAYER_TENSORS[i].name, l, m, v, tensor_size(p, LAYER_TENSORS[i].rows), err, errlen))
                return -1;
        }
    if (check_tensor("rms_final", -1, NULL, w->rms_final, p->dim, err, errlen)) return -1;
    if (w->wcls.data != w->token_embedding.data && check_tensor("wcls", -1, &w->wcls, NULL, 0, err, errlen)) return -1;
    return 0;
}
