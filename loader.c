// loader.c - reading a checkpoint: our format (model.h documents it byte by byte) and llama2.c's
// legacy one, mapped read-only with mmap; the weights are pointers into the mapping.
//
// What this is: the header readers (every field checked before anything is trusted), and the
// walkers that hand out each tensor in file order, checking that the file is exactly as long as
// its header says. What this is not: the run state or the forward pass (model.c).
#include "model.h"

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
    size_t at;        // where the LayerWeights field is: a Matrix, or a const float *
    int matrix, rows, cols, when;
} LAYER_TENSORS[] = {
    {"rms_att", offsetof(LayerWeights, rms_att), 0, SIZE_D, 0, IF_NORM_ATTN},
    {"wq", offsetof(LayerWeights, wq), 1, SIZE_Q, SIZE_D, ALWAYS},
    {"bq", offsetof(LayerWeights, bq), 0, SIZE_Q, 0, IF_BIAS},
    {"wk", offsetof(LayerWeights, wk), 1, SIZE_KV, SIZE_D, ALWAYS},
    {"bk", offsetof(LayerWeights, bk), 0, SIZE_KV, 0, IF_BIAS},
    {"wv", offsetof(LayerWeights, wv), 1, SIZE_KV, SIZE_D, ALWAYS},
    {"bv", offsetof(LayerWeights, bv), 0, SIZE_KV, 0, IF_BIAS},
    {"q_norm", offsetof(LayerWeights, q_norm), 0, SIZE_QNORM, 0, IF_QK_NORM},
    {"k_norm", offsetof(LayerWeights, k_norm), 0, SIZE_KNORM, 0, IF_QK_NORM},
    {"wo", offsetof(LayerWeights, wo), 1, SIZE_D, SIZE_Q, ALWAYS},
    {"post_att", offsetof(LayerWeights, post_att), 0, SIZE_D, 0, IF_NORM_ATTN_POST},
    {"rms_ffn", offsetof(LayerWeights, rms_ffn), 0, SIZE_D, 0, IF_NORM_FFN},
    {"w1", offsetof(LayerWeights, w1), 1, SIZE_H, SIZE_D, ALWAYS},
    {"w2", offsetof(LayerWeights, w2), 1, SIZE_D, SIZE_H, ALWAYS},
    {"w3", offsetof(LayerWeights, w3), 1, SIZE_H, SIZE_D, ALWAYS},
    {"post_ffn", offsetof(LayerWeights, post_ffn), 0, SIZE_D, 0, IF_NORM_FFN_POST},
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
    _Static_assert(sizeof HPARAMS / sizeof HPARAMS[0] <= 32, "seen holds a bit per hparam");
    for (int e = 0; e < p->n_hparams; e++) {
        const uint8_t *entry = h + MODEL_HEADER_SIZE + (size_t)e * HPARAM_BYTES;
        char name[HPARAM_NAME + 1] = {0};
        memcpy(name, entry, HPARAM_NAME);
        const double v = get_f64(entry, HPARAM_NAME);
        size_t k = 0, count = sizeof HPARAMS / sizeof HPARAMS[0];
        while (k < count && strcmp(HPARAMS[k].name, name))
            k++;
        int printable = strlen(name) > 0;
        for (size_t i = 0; name[i]; i++)
            printable &= name[i] > ' ' && name[i] < 127;
        for (size_t i = strlen(name); i < HPARAM_NAME; i++)
            printable &= !entry[i]; // NUL-padded
        const char *bad = !printable ? "is not a NUL-padded ASCII name"
                          : k == count ? "is not one this program knows (hint: a newer export/export.py wrote it; "
                                         "use that version's ./run)"
                          : seen >> k & 1 ? "is given twice"
                          : !(v >= HPARAMS[k].lo && v <= HPARAMS[k].hi) ? "is out of its range"
                          : HPARAMS[k].type == 'i' && v != floor(v) ? "must be a whole number"
                                                                     : NULL;
        if (bad) {
            snprintf(why, n, "bad header: hparam %d (%s = %g) %s%s", e, printable ? name : "?", v, bad,
                     strstr(bad, "hint") ? "" : " (hint: the file is damaged or not written by export/export.py)");
            if (k < count && strstr(bad, "range"))
                snprintf(why + strlen(why), n - strlen(why), "; its range is [%g, %g]", HPARAMS[k].lo, HPARAMS[k].hi);
            return -1;
        }
        seen |= 1u << k;
        char *field = (char *)p + HPARAMS[k].at;
        if (HPARAMS[k].type == 'i') *(int *)field = (int)v;
        if (HPARAMS[k].type == 'f') *(float *)field = (float)v;
        if (HPARAMS[k].type == 'd') *(double *)field = v;
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
    if (!bad && (dtype < 0 || dtype >= DTYPE_COUNT)) bad = "unknown weight dtype (0 f32, 1 f16, 2 q8_0, 3 q4_0, 4 bf16, 5 q8_0_r16, 6 bf16_r16)";
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
// Loading

int transformer_load(Transformer *t, const char *path, char *err, size_t errlen) {
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
    // q8_0 and bf16 in their first layouts (dtype 2, 4): copied into q8_0_r16 and bf16_r16, the
    // layouts the kernels read (dtype.h)
    if (transformer_copy_weights(t, DTYPES[t->config.dtype].runs_as, why, sizeof why)) goto fail;
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
