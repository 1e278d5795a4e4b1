// model.c - the run state and the forward pass.
//
// The forward pass is Hugging Face's LlamaForCausalLM in float32, written out:
//   x = embed(tokens)
//   for each layer:  x = x + wo(attention(rope(wq(rmsnorm(x))), rope(wk(rmsnorm(x))), wv(rmsnorm(x))))
//                    x = x + w2(silu(w1(rmsnorm(x))) * w3(rmsnorm(x)))
//   logits = wcls(rmsnorm(x))
// for a block of consecutive positions at once (a prompt, a perplexity window, or one token).
// The other families change steps of it, each read from data, never from the family's name (model.h,
// Config; README, "RoPE in today's models"): biases on wq, wk, wv (Qwen2, GLM-4); q and k
// RMS-normalized before rope, per head (Qwen3, Gemma 3, EXAONE 4) or over the whole projection (OLMo);
// a layer without rope (SmolLM3, EXAONE 4's global layers) or with a second, local one (Gemma 3, OLMo
// 3); sliding layers that attend to the last W positions (kernels_attention.c); part of each head
// turned (Phi-3, GLM-4); norms after a sublayer as well as or instead of before it (Gemma, OLMo,
// EXAONE, GLM-4); GeGLU for SwiGLU (Gemma); scales on the embeddings, the scores, the sublayers'
// outputs and the logits (Gemma, Granite); softcaps on the scores and the logits (Gemma 2); the queries
// grown with their position (Ministral 3, and --attn-logn).
// What this is not: the file reader (loader.c), the products and attention (kernels*.c, behind
// the Matrix and KVCache fences), the frequencies of RoPE (rope.c).
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const FAMILY_NAMES[FAMILY_COUNT] = {"Llama",  "Mistral", "Qwen2",   "Qwen3", "SmolLM3",
                                                        "Phi-3",  "Gemma 2", "Gemma 3", "OLMo 2", "OLMo 3",
                                                        "EXAONE 4", "GLM-4", "Granite", "Ministral 3"};

const char *family_name(Family f) { return f >= 0 && f < FAMILY_COUNT ? FAMILY_NAMES[f] : "unknown"; }

// ---------------------------------------------------------------------------------------------
// Run state: activations for a block of B tokens, the KV cache and the kernels' scratch, one
// allocation.

// n * m, or 0 with *overflow set.
static size_t mul_checked(size_t n, size_t m, int *overflow) {
    if (m && n > SIZE_MAX / m) {
        *overflow = 1;
        return 0;
    }
    return n * m;
}

// The widest input of any product: dim (q, k, v, gate, up, classifier), n_heads * head_dim (wo) or
// hidden_dim (down).
static int widest_input(const Config *p) {
    const int qd = p->n_heads * p->head_dim, w = p->dim > qd ? p->dim : qd;
    return p->hidden_dim > w ? p->hidden_dim : w;
}


// The slots of each sliding layer's ring (KVCache.ring): a sliding layer never reads a key more than
// W back, so it keeps about the last W + a block of positions, not the whole context (Gemma 3's 1B at
// 32768 tokens: 5 of every 6 layers). 0: every layer keeps every position (no sliding layer, a ring
// no smaller than the context, or --swa-full).
static int ring_slots(const Config *p, const RunConfig *run) {
    const int batch = run->max_batch < run->n_ctx ? run->max_batch : run->n_ctx;
    return p->sliding_window && !run->swa_full ? kv_ring_slots(p->sliding_window, batch, run->n_ctx) : 0;
}

// How many layers have the kind bit `bit` (LAYER_SLIDING, LAYER_ROPE_SWA, ...).
static int layers_with(const Config *p, int bit) {
    int n = 0;
    for (int l = 0; p->layer_kind && l < p->n_layers; l++)
        n += !!(p->layer_kind[l] & bit);
    return n;
}

// Bytes of the KV cache's parts for this run: part[0] keys and part[1] values in their types,
// part[2] RoPE's key tables (0 when keys are cached rotated). Sets *overflow when one does not fit.
static void kv_parts(const Config *p, const RunConfig *run, size_t part[3], int *overflow) {
    const int tables = rope_key_tables(&run->rope), ring = ring_slots(p, run), sliding = layers_with(p, LAYER_SLIDING);
    part[0] = kv_cache_bytes_ring(run->cache_k, p->n_layers, run->n_ctx, sliding, ring, p->n_kv_heads, p->head_dim);
    part[1] = kv_cache_bytes_ring(run->cache_v, p->n_layers, run->n_ctx, sliding, ring, p->n_kv_heads, p->head_dim);
    part[2] = mul_checked(mul_checked(rope_key_floats(&run->rope, run->n_ctx), sizeof(float), overflow), tables,
                          overflow);
    if (!part[0] || !part[1] || (tables && !part[2])) *overflow = 1;
}

// Lays the buffers out one after the other (each 64-byte aligned) from base, or only counts
// them when base is NULL. Returns the number of bytes; sets *overflow if that does not fit.
static size_t state_layout(RunState *s, unsigned char *base, const Config *p, const RunConfig *run, int n_threads,
                           int *overflow) {
    const size_t B = (size_t)run->max_batch, D = (size_t)p->dim;
    const size_t qd = (size_t)p->n_heads * p->head_dim, kvd = (size_t)p->n_kv_heads * p->head_dim;
    const size_t H = (size_t)p->hidden_dim, F = sizeof(float);
    size_t kv[3];
    kv_parts(p, run, kv, overflow);
    const int unrotated = rope_keys_unrotated(&run->rope), extra = rope_query_turns(&run->rope) - 1;
    const size_t att = attention_scratch_floats(run->n_ctx, p->n_heads, p->n_kv_heads, p->head_dim, extra);
    const size_t work = workspace_bytes(run->max_batch, widest_input(p), n_threads);
    if (att == 0 || work == 0) *overflow = 1;
    struct {
        void *p;
        size_t bytes;
    } part[] = {
        {&s->x, mul_checked(B * F, D, overflow)},
        {&s->xb, mul_checked(B * F, D > qd ? D : qd, overflow)},
        {&s->xb2, mul_checked(B * F, D, overflow)},
        {&s->q, mul_checked(B * F, qd, overflow)},
        {&s->q_far, extra ? mul_checked(B * F * extra, qd, overflow) : F},
        {&s->k, mul_checked(B * F, kvd, overflow)},
        {&s->v, mul_checked(B * F, kvd, overflow)},
        {&s->hb, mul_checked(B * F, H, overflow)},
        {&s->hb2, mul_checked(B * F, H, overflow)},
        {&s->att, mul_checked(n_threads * F, att, overflow)},
        {&s->logits, mul_checked(B * F, (size_t)p->vocab_size, overflow)},
        {&s->kv.keys, kv[0]},
        {&s->kv.values, kv[1]},
        {&s->rope_keys, unrotated ? kv[2] : F},
        {&s->rope_layers, mul_checked((size_t)p->n_layers, sizeof(RopeAttention), overflow)},
        {&s->work.base, work},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        size_t n = (part[i].bytes + 63) / 64 * 64; // keep every buffer 64-byte aligned
        if (n < part[i].bytes || total > SIZE_MAX - n) *overflow = 1;
        if (*overflow) return 0;
        if (base) *(void **)part[i].p = base + total;
        total += n;
    }
    if (base && !unrotated) s->rope_keys = NULL;
    if (base && !extra) s->q_far = NULL;
    return total;
}

size_t transformer_kv_bytes(const Config *c, const RunConfig *run, int *ring) {
    int overflow = 0;
    if (ring) *ring = ring_slots(c, run);
    size_t kv[3];
    kv_parts(c, run, kv, &overflow);
    if (overflow || kv[1] > SIZE_MAX - kv[0] || kv[2] > SIZE_MAX - kv[0] - kv[1]) return 0;
    return kv[0] + kv[1] + kv[2];
}

// The parameters of the local RoPE (the LAYER_ROPE_SWA layers'): the checkpoint's, with the local
// base and no scaling (Gemma 3's sliding layers: rope_local_base_freq; modeling_gemma3.py gives them a
// rotary embedding of their own with rope_type default).
static RopeParams swa_params(const Config *c) {
    RopeParams p = c->rope;
    p.mode = ROPE_SCALING_NONE;
    p.base = c->rope_freq_base_train_swa;
    p.factor = 1;
    p.short_factor = p.long_factor = NULL;
    p.pair_divisor = NULL;
    return p;
}

size_t transformer_state_bytes(const Config *c, const RunConfig *run, int n_threads, int *overflow) {
    RunState s;
    *overflow = 0;
    size_t bytes = state_layout(&s, NULL, c, run, n_threads, overflow);
    // + the cos and sin tables (rope.c), of the local RoPE too
    RopeParams swa = swa_params(c);
    size_t rows = rope_table_rows(&run->rope, run->n_ctx) + (layers_with(c, LAYER_ROPE_SWA) ? rope_table_rows(&swa, run->n_ctx) : 0);
    size_t rope = mul_checked(mul_checked(rows, (size_t)c->head_dim, overflow), sizeof(float), overflow);
    if (*overflow || bytes > SIZE_MAX - rope) {
        *overflow = 1;
        return 0;
    }
    return bytes + rope;
}

// The RoPE layer l rotates with: NULL for a layer without (LAYER_NO_ROPE), the local one for
// LAYER_ROPE_SWA, else the model's.
static const Rope *layer_rope_of(const Transformer *t, int l) {
    const int kind = t->config.layer_kind ? t->config.layer_kind[l] : 0;
    return kind & LAYER_NO_ROPE ? NULL : kind & LAYER_ROPE_SWA ? &t->rope_swa : &t->rope;
}

PrepareStatus transformer_prepare(Transformer *t, const RunConfig *run, char *err, size_t errlen) {
    RunState *s = &t->state;
    const Config *p = &t->config;
    t->run = *run;
    if (run->n_ctx < 1 || run->max_batch < 1) {
        snprintf(err, errlen, "the context and the batch must hold at least one token");
        return PREPARE_BAD_SIZE;
    }
    if (t->run.max_batch > run->n_ctx) t->run.max_batch = run->n_ctx;
    s->n_threads = max_threads();
    int overflow = 0;
    size_t bytes = state_layout(s, NULL, p, &t->run, s->n_threads, &overflow);
    if (overflow) {
        snprintf(err, errlen, "a context of %d tokens needs more memory than can be addressed", run->n_ctx);
        return PREPARE_BAD_SIZE;
    }
    // Anonymous memory comes zeroed and page-aligned, and only the pages the run touches get RSS.
    // Those pages are 2 MiB ones where the kernel has them (transparent huge pages, given on request
    // when /sys/kernel/mm/transparent_hugepage/enabled is madvise or always): attention reads every
    // cached key and value at every step, and in 4 KiB pages decode at depth ran at half the speed
    // (docs/speed.md, "Memory"). The price: a run touches whole 2 MiB pages (a kv head's cache starts
    // every ctx x head_dim values), so a short run's RSS and its first touches grow toward the whole
    // buffer.
    void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "out of memory allocating %zu bytes for a context of %d tokens", bytes, run->n_ctx);
        return PREPARE_NO_MEMORY;
    }
    madvise(base, bytes, MADV_HUGEPAGE); // a hint: without THP (or on failure) the pages stay 4 KiB
    state_layout(s, base, p, &t->run, s->n_threads, &overflow);
    s->bytes = bytes;
    s->kv = (KVCache){.keys = s->kv.keys,
                      .values = s->kv.values,
                      .key_type = run->cache_k,
                      .value_type = run->cache_v,
                      .n_layers = p->n_layers,
                      .ctx = run->n_ctx,
                      .n_heads = p->n_heads,
                      .n_kv_heads = p->n_kv_heads,
                      .head_dim = p->head_dim,
                      .rope = s->rope_layers,
                      .layer_kind = p->layer_kind,
                      .slide = p->sliding_window,
                      .ring = ring_slots(p, &t->run),
                      .scale = p->f_attention_scale,
                      .softcap = p->f_attn_logit_softcapping};
    s->work.max_n = t->run.max_batch;
    s->work.max_cols = widest_input(p);
    s->work.n_threads = s->n_threads;
    s->work.bytes = workspace_bytes(s->work.max_n, s->work.max_cols, s->n_threads);
    t->state_bytes = transformer_state_bytes(p, &t->run, s->n_threads, &overflow);
    char rope_err[300];
    const RopeParams swa = swa_params(p);
    if (rope_init(&t->rope, &run->rope, run->n_ctx, rope_err, sizeof rope_err) ||
        (layers_with(p, LAYER_ROPE_SWA) && rope_init(&t->rope_swa, &swa, run->n_ctx, rope_err, sizeof rope_err))) {
        snprintf(err, errlen, "%s", rope_err);
        rope_free(&t->rope); // (rope_free of a Rope rope_init did not fill, or emptied, frees nothing)
        munmap(base, s->bytes);
        memset(s, 0, sizeof(*s));
        return strstr(rope_err, "out of memory") ? PREPARE_NO_MEMORY : PREPARE_BAD_ROPE;
    }
    rope_set_keys(&t->rope, s->rope_keys); // rope fills the key tables, attention reads them
    for (int l = 0; l < p->n_layers; l++) {
        const Rope *r = layer_rope_of(t, l);
        s->rope_layers[l] = rope_attention(r ? r : &t->rope, r != NULL);
    }
    return PREPARE_OK;
}

// The type matrix m is copied into: what the kernels read of its type, or (f16_as_bf16) bf16_r16
// for an f16 one; m's own type when it is not copied.
static DType copy_type(const Matrix *m, int f16_as_bf16) {
    return f16_as_bf16 && m->dtype == DTYPE_F16 ? DTYPE_BF16_R16 : DTYPES[m->dtype].runs_as;
}

// Bytes of a matrix's copy in type `to`: its values, and its scales where they follow them (q4_0),
// each at a multiple of 64 bytes.
static size_t copy_bytes(DType to, const Matrix *m) {
    return (matrix_data_bytes(to, m->rows, m->cols) + 63) / 64 * 64 + (matrix_scale_bytes(to, m->rows, m->cols) + 63) / 64 * 64;
}

int transformer_copy_weights(Transformer *t, int f16_as_bf16, char *err, size_t errlen) {
    TransformerWeights *w = &t->weights;
    if (t->copy) return 0; // made already
    const int shared = w->wcls.data == w->token_embedding.data, layers = t->config.n_layers;
    Matrix *m[2 + 7 * layers]; // the embedding, the classifier unless it is the embedding, 7 per layer
    int count = 0;
    if (copy_type(&w->token_embedding, f16_as_bf16) != w->token_embedding.dtype) m[count++] = &w->token_embedding;
    if (!shared && copy_type(&w->wcls, f16_as_bf16) != w->wcls.dtype) m[count++] = &w->wcls;
    for (int l = 0; l < layers; l++) {
        LayerWeights *lw = &w->layers[l];
        Matrix *seven[] = {&lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->w1, &lw->w2, &lw->w3};
        for (int i = 0; i < 7; i++)
            if (copy_type(seven[i], f16_as_bf16) != seven[i]->dtype) m[count++] = seven[i];
    }
    if (!count) return 0; // every matrix is read as stored
    size_t bytes = 0; // each matrix at a multiple of 64 bytes, as in the file
    for (int i = 0; i < count; i++)
        bytes += copy_bytes(copy_type(m[i], f16_as_bf16), m[i]);
    const DType from = m[0]->dtype, to = copy_type(m[0], f16_as_bf16); // for the messages
    void *copy = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) {
        char hint[160];
        if (from == DTYPE_F32 || from == DTYPE_F16) // f32, f16 (--f16-as-bf16 too): a copy whatever the flags
            snprintf(hint, sizeof hint, "free some memory, or export the model with export/export.py --dtype bf16, "
                     "q8_0 or q4_0, whose files are read as stored");
        else if (from == DTYPE_GGUF_Q8_0 || from == DTYPE_GGUF_Q4_0)
            snprintf(hint, sizeof hint, "free some memory, or convert the model with export/export.py --dtype %s, "
                     "whose file is read as stored", from == DTYPE_GGUF_Q8_0 ? "q8_0" : "q4_0");
        else
            snprintf(hint, sizeof hint, "export the model again: --dtype %s writes %s", dtype_name(from),
                     dtype_name(to));
        snprintf(err, errlen, "no memory for the %s copy of the weights (%.1f MiB) (hint: %s)", dtype_name(to),
                 bytes / 1048576.0, hint);
        return -1;
    }
    // Asked for 2 MiB pages before the first write, as the run state is. In 4 KiB pages (the default
    // where transparent huge pages are "madvise") the copy is half a million pages, and its decode ran
    // anywhere from the bf16 file's speed to a tenth of it, run to run, with no fault during decode; in
    // 2 MiB pages at the file's speed or above every run, and the copy is made in half the time
    // (docs/speed.md, "The copy's pages"). The hint changes no value; without THP the pages stay 4 KiB.
    madvise(copy, bytes, MADV_HUGEPAGE);
    unsigned char *at = copy;
    char what[sizeof t->copied] = ""; // each type copied once, with the type it became, in the order met
    int named[DTYPE_COUNT] = {0};     // (the banner; a type's copy type is one, copy_type)
    for (int i = 0; i < count; i++) {
        const DType into = copy_type(m[i], f16_as_bf16);
        if (!named[m[i]->dtype]++)
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s to %s", *what ? ", " : "",
                     dtype_name(m[i]->dtype), dtype_name(into));
        const int failed = into == DTYPE_Q4_0 ? matrix_q4_0_from_gguf(m[i], m[i], at)
                                              : matrix_to_r16(m[i], m[i], into, at, max_threads());
        if (failed) {
            munmap(copy, bytes); // the matrices converted so far point into it: the load fails as a whole
            snprintf(err, errlen, "no memory for the %s copy's scratch", dtype_name(into));
            return -1;
        }
        at += copy_bytes(into, m[i]);
    }
    if (shared) w->wcls = w->token_embedding;
    t->copy = copy, t->copy_bytes = bytes;
    memcpy(t->copied, what, sizeof what);
    return 0;
}

void transformer_free(Transformer *t) {
    if (t->state.x) munmap(t->state.x, t->state.bytes); // the first buffer of the single allocation
    rope_free(&t->rope);
    rope_free(&t->rope_swa);
    free(t->weights.layers);
    if (t->map) munmap(t->map, t->map_size);
    if (t->copy) munmap(t->copy, t->copy_bytes);
    if (t->made) munmap(t->made, t->made_bytes);
    memset(t, 0, sizeof(*t));
}

// ---------------------------------------------------------------------------------------------
// The steps of a layer that are not in kernels.c

#ifdef LRUN_REFERENCE
// `make run-ref` builds ./run-ref from this file with LRUN_REFERENCE defined: every matrix product
// and attention go through kernels.c's plain references instead (matmul_ref, attention_ref: the
// definitions, one weight or one key at a time, summed in double, one thread), and RoPE is rope.c's
// plain rotation either way. The rest of the program is the same, so any difference between ./run
// and ./run-ref is the fast kernels' (tests/test_run_ref.py bounds it).
static int matmul_reference(float *out, const float *x, const Matrix *m, int n) {
    matmul_ref(out, x, m, n);
    return 0;
}
static int matmul_many_reference(float *const *out, const float *x, const Matrix *const *m, int count, int n) {
    for (int i = 0; i < count; i++)
        matmul_ref(out[i], x, m[i], n);
    return 0;
}
#define matmul(ws, out, x, m, n) matmul_reference(out, x, m, n)
#define matmul_many(ws, out, x, m, count, n) matmul_many_reference(out, x, m, count, n)
#define attention(out, q, q_far, c, layer, n, pos, scratch, n_threads) attention_ref(out, q, q_far, c, layer, n, pos)
#endif

// x (n, size) += bias (size) on every row: Qwen2's q, k and v projections (nn.Linear with bias).
static void add_bias(float *x, const float *bias, int n, int size) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < size; j++)
            x[(size_t)i * size + j] += bias[j];
}

// q (n, qd), k (n, kvd), v (n, kvd) = in (n, D) @ wq^T, wk^T, wv^T (+ bq, bk, bv): three products
// of one input, which matmul_many runs in one parallel loop when decoding.
static int qkv_proj(const Config *p, RunState *s, const LayerWeights *lw, const float *in, int n) {
    float *out[3] = {s->q, s->k, s->v};
    const Matrix *w[3] = {&lw->wq, &lw->wk, &lw->wv};
    const int bad = matmul_many(&s->work, out, in, w, 3, n);
    if (lw->bq) {
        add_bias(s->q, lw->bq, n, p->n_heads * p->head_dim);
        add_bias(s->k, lw->bk, n, p->n_kv_heads * p->head_dim);
        add_bias(s->v, lw->bv, n, p->n_kv_heads * p->head_dim);
    }
    return bad;
}

// Qwen3's q_norm and k_norm (modeling_qwen3.py: Qwen3RMSNorm over head_dim, after the projection
// and before RoPE): every head of every query and key is RMS-normalized on its own, with one
// weight vector per layer that all heads share. It keeps the scores q . k bounded whatever the
// projections do, so attention logits cannot grow without limit. Gemma 3 and EXAONE 4 do the same;
// OLMo 2 and 3 normalize the whole projection at once (modeling_olmo2.py, Olmo2Attention: q_norm
// over n_heads * head_dim features, before the split into heads).
static void qk_norm(const Config *p, RunState *s, const LayerWeights *lw, int n) {
    const int all = p->qk_norm == QK_NORM_ALL, hd = p->head_dim;
    rmsnorm(s->q, s->q, lw->q_norm, all ? n : n * p->n_heads, all ? p->n_heads * hd : hd, p->norm_eps);
    rmsnorm(s->k, s->k, lw->k_norm, all ? n : n * p->n_kv_heads, all ? p->n_kv_heads * hd : hd, p->norm_eps);
}

// hb = in @ w1^T (gate), hb2 = in @ w3^T (up), both (n, H).
static int gate_up_proj(RunState *s, const LayerWeights *lw, const float *in, int n) {
    float *out[2] = {s->hb, s->hb2};
    const Matrix *w[2] = {&lw->w1, &lw->w3};
    return matmul_many(&s->work, out, in, w, 2, n);
}

// RoPE on the block's queries and keys: every (token, head) pair is rotated on its own, so a
// prompt's pairs are shared out over the threads; one decoded token's heads (or a few tokens') are
// a few microseconds of work, which one thread does without a parallel region (kernels.c: a region
// of one thread still costs a system call). Values are never rotated, nor are the keys of the modes
// that cache them un-rotated (rope_keys_unrotated): attention turns them as it reads them with
// rope.c's key tables. A query with more than one turn (rope_query_turns: rerope's far path, dca's
// chunks) also gets its other turns, in q_far (rope_turn_at).
static void rope_head(Transformer *t, const Rope *r, int i, int h, int pos) {
    const Config *p = &t->config;
    RunState *s = &t->state;
    const int hd = p->head_dim, turns = rope_query_turns(&r->p);
    float *head = h < p->n_heads ? s->q + ((size_t)i * p->n_heads + h) * hd
                                 : s->k + ((size_t)i * p->n_kv_heads + h - p->n_heads) * hd;
    for (int u = 1; u < turns && h < p->n_heads; u++) {
        float *other = s->q_far + rope_turn_at(turns, (size_t)p->n_heads * hd, i, u) + (size_t)h * hd;
        memcpy(other, head, (size_t)hd * sizeof(float));
        rope_rotate_turn(r, other, pos + i, u);
    }
    rope_rotate(r, head, pos + i);
}

// Below this many coordinates to turn, RoPE runs on the calling thread: waking the team costs more
// than the work (one decoded token of Llama 2 7B turns 8192 coordinates, q and k; a prompt block of 64
// tokens of the 110M shape 98304; docs/speed.md, "No team for one thread", has the cost of a region).
#define ROPE_PARALLEL_MIN 16384

static void rope_qk(Transformer *t, const Rope *r, int n, int pos) {
    const Config *p = &t->config;
    const int heads = p->n_heads + (rope_keys_unrotated(&r->p) ? 0 : p->n_kv_heads);
    if ((size_t)n * heads * p->head_dim < ROPE_PARALLEL_MIN) {
        for (int i = 0; i < n; i++)
            for (int h = 0; h < heads; h++)
                rope_head(t, r, i, h, pos);
        return;
    }
#pragma omp parallel for collapse(2) num_threads(t->state.n_threads)
    for (int i = 0; i < n; i++)
        for (int h = 0; h < heads; h++)
            rope_head(t, r, i, h, pos);
}

// Queries grown with their position, two ways; each a factor f(m) on the query at m, after RoPE
// (a rotation does not change a length, so this works with every RoPE mode):
// log-n attention scaling (--attn-logn): f = max(1, ln(m + 1) / ln(L)), L the trained context
// (Su 2021, kexue.fm/archives/8823). Past L a query spreads its attention over more keys than training
// ever showed it; since the scores are q . k, growing q by the log of the number of keys keeps the
// softmax about as sharp as it was at L. The formula is the one of bojone/rerope (rerope_patch.py:
// log(position + 1) / log(training_length), clipped below at 1) and of Qwen's use_logn_attn (log base
// seq_length of the 1-based index when it exceeds seq_length, else 1): the same factors.
// Attention temperature by position (Config.f_attn_temp_scale = beta, n_attn_temp_floor_scale = F):
// f = 1 + beta ln(1 + floor(m / F)), a step up at every multiple of F (Ministral 3,
// modeling_ministral3.py get_llama_4_attn_scale, with F its original_max_position_embeddings; Llama 4's
// attention temperature tuning is the same idea). The model was trained with it: unlike log-n it is
// part of the checkpoint, and it acts from m = F on, where log-n waits for L.
static double query_factor(const Transformer *t, int m) {
    const Config *p = &t->config;
    const int L = n_ctx_train(p), F = p->n_attn_temp_floor_scale;
    double f = 1;
    if (t->run.attn_logn && L >= 2 && m + 1 > L) f = (float)(log(m + 1.0) / log((double)L));
    if (p->f_attn_temp_scale > 0 && F > 0) f *= 1 + p->f_attn_temp_scale * log(1.0 + floor((double)m / F));
    return f;
}

static void scale_queries(Transformer *t, int n, int pos) {
    const int qd = t->config.n_heads * t->config.head_dim;
    for (int i = 0; i < n; i++) {
        const float f = (float)query_factor(t, pos + i);
        if (f == 1) continue;
        const int turns = rope_query_turns(&t->rope.p), extra = turns - 1; // q_far: the other turns
        float *q = t->state.q + (size_t)i * qd, *q_far = extra ? t->state.q_far + rope_turn_at(turns, qd, i, 1) : NULL;
        for (int j = 0; j < qd; j++)
            q[j] *= f;
        for (int j = 0; q_far && j < extra * qd; j++)
            q_far[j] *= f;
    }
}

// act(gate) * up, in place in hb: HF act_fn(gate_proj(x)) * up_proj(x). SiLU: silu(g) = g *
// sigmoid(g) (SwiGLU, Llama and most); GELU's tanh approximation (GeGLU, Gemma's gelu_pytorch_tanh,
// Hendrycks & Gimpel 2016): 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
// A prompt's block is shared out over the threads (libm's expf is a few ns a value: a 512-token
// prompt block is many values a layer); one token's is not worth a parallel region
// (kernels.c: a region of one thread still costs a system call).
static float silu_times(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// GELU's tanh as the sigmoid it is, 0.5 (1 + tanh z) = 1 / (1 + e^-2z), with e^-2|z| from
// exp_nonpositive (kernels.h), so that a loop over it vectorizes: libm's tanhf does not, and took a
// sixth of a Gemma 3 prompt's time. Where torch's 1 + tanh z cancels (z far below 0) this form keeps
// the small value's digits; a NaN gate stays NaN.
static inline float gelu_tanh_times(float g, float u) {
    const float z2 = 1.5957691216057308f * (g + 0.044715f * g * g * g); // 2 sqrt(2/pi) (g + 0.044715 g^3)
    const float t = exp_nonpositive(-fabsf(z2));
    return g * (z2 >= 0 ? 1.0f : t) / (1.0f + t) * u;
}

// Below this many values the GLU runs on the calling thread (one decoded token of the largest
// MLP here, TinyLlama's 5632, is far below it; a prompt block is far above).
#define GLU_PARALLEL_MIN 65536

static void glu(Activation act, float *hb, const float *hb2, size_t n) {
    if (act == ACT_GELU_TANH && n < GLU_PARALLEL_MIN) {
#pragma omp simd
        for (size_t i = 0; i < n; i++)
            hb[i] = gelu_tanh_times(hb[i], hb2[i]);
    } else if (act == ACT_GELU_TANH) {
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++)
            hb[i] = gelu_tanh_times(hb[i], hb2[i]);
    } else if (n < GLU_PARALLEL_MIN) {
        for (size_t i = 0; i < n; i++)
            hb[i] = silu_times(hb[i], hb2[i]);
    } else {
#pragma omp parallel for
        for (size_t i = 0; i < n; i++)
            hb[i] = silu_times(hb[i], hb2[i]);
    }
}

// A sublayer's output y (n rows of D) joins the residual stream: x += r * y (r: Granite's
// residual_multiplier, else 1, where r * y is y exactly). Before that, the norm after the sublayer
// if the layer has one (Gemma 2/3, OLMo 2/3, EXAONE 4, GLM-4: post_attention_layernorm or
// post_feedforward_layernorm on the sublayer's output, modeling_gemma2.py Gemma2DecoderLayer).
// One thread: memory-bound, and short.
static void join(const Config *p, float *x, float *y, const float *post_norm, int n) {
    const size_t all = (size_t)n * p->dim;
    const float r = p->f_residual_scale;
    if (post_norm) rmsnorm(y, y, post_norm, n, p->dim, p->norm_eps);
    for (size_t i = 0; i < all; i++)
        x[i] += r * y[i];
}

// The input of a sublayer: x normalized into out by the norm before it, or x itself where the
// layer has none (OLMo 2's layers normalize only after).
static const float *pre_norm(const Config *p, float *out, const float *x, const float *w, int n) {
    if (!w) return x;
    rmsnorm(out, x, w, n, p->dim, p->norm_eps);
    return out;
}

// The classifier's output, (rows, V): divided by Granite's logits_scaling, then Gemma 2's final
// softcap c tanh(l / c) (modeling_gemma2.py, Gemma2ForCausalLM.forward).
static void finish_logits(const Config *p, float *logits, int rows) {
    const size_t all = (size_t)rows * p->vocab_size;
    const float s = p->f_logit_scale, c = p->f_final_logit_softcapping;
    for (size_t i = 0; s != 1 && i < all; i++)
        logits[i] /= s;
    for (size_t i = 0; c > 0 && i < all; i++)
        logits[i] = c * tanhf(logits[i] / c);
}

// transformer_trace_nonfinite: note the first place (layer, mlp) where one of the watched rows of x
// (n rows of width D) holds a value that is not finite. Off (s->trace 0) but in the traced forward:
// a scan of the stream per layer costs.
static void trace(RunState *s, const float *x, int n, int D, int layer, int mlp) {
    if (!s->trace || s->found.layer != -2) return;
    for (int i = 0; i < n && i < s->trace; i++)
        for (int d = 0; d < D; d++)
            if (!isfinite(x[(size_t)i * D + d])) {
                s->found = (NonFinite){layer, mlp, i};
                return;
            }
}

// ---------------------------------------------------------------------------------------------
// The forward pass

int transformer_forward(Transformer *t, const int *tokens, int n, int pos, int text_len, int all_logits, float **logits,
                        char *err, size_t errlen) {
    const Config *p = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    const int D = p->dim, H = p->hidden_dim, ctx = t->run.n_ctx;
    const size_t qd = (size_t)p->n_heads * p->head_dim;
    if (n < 1 || n > t->run.max_batch || pos < 0 || pos > ctx - n || text_len < pos + n || text_len > ctx) {
        snprintf(err, errlen,
                 "forward: %d tokens at position %d of a %d-token sequence do not fit a %d-token "
                 "context with blocks of at most %d",
                 n, pos, text_len, ctx, t->run.max_batch);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= p->vocab_size) {
            snprintf(err, errlen, "forward: token id %d is not in the vocabulary of %d", tokens[i], p->vocab_size);
            return -1;
        }
    }
    // RoPE's frequencies for this sequence length (only those of dynamic NTK, dynamic YaRN and
    // longrope depend on it); if they change, rope.c fills its key table again, with which attention
    // turns every cached key as it reads it: the query and all keys then use the same frequencies
    // (README, "dynamic"). Every position's, not only the text's so far: longrope changes them once,
    // and the positions the text grows into later must be turned with the new ones too.
    rope_set_length(&t->rope, text_len);

    for (int i = 0; i < n; i++)
        matrix_row(s->x + (size_t)i * D, &w->token_embedding, tokens[i]); // (n, D)
    for (size_t i = 0; p->f_embedding_scale != 1 && i < (size_t)n * D; i++)
        s->x[i] *= p->f_embedding_scale; // Gemma: times sqrt(D); Granite: embedding_multiplier
    trace(s, s->x, n, D, -1, 0);

    int bad = 0;  // a product refused its arguments: a bug in the sizing of the workspace
    int rows = n; // the rows of x still to be computed (see the last layer)
    for (int l = 0; l < p->n_layers && !bad; l++) {
        const LayerWeights *lw = &w->layers[l];
        const Rope *rope = layer_rope_of(t, l);

        // Attention: x = x + wo(attention(rope(q), rope(k), v)), each norm where the layer has it
        const float *in = pre_norm(p, s->xb, s->x, lw->rms_att, n); // (n, D)
        bad |= qkv_proj(p, s, lw, in, n);                           // q (n, qd), k and v (n, kvd)
        if (lw->q_norm) qk_norm(p, s, lw, n);                       // Qwen3 and others
        if (rope) rope_qk(t, rope, n, pos);                         // q, k rotated (NoPE: not)
        scale_queries(t, n, pos);                                   // --attn-logn, temperature
        kv_store(&s->kv, l, s->k, s->v, pos, n);                    // into the cache at pos .. pos+n-1
        // The last layer, when only the last token's logits are asked for (a prompt's blocks): every
        // token's key and value are cached above (later tokens read them), but the other tokens'
        // outputs would feed nothing, so the rest of the layer runs for the last token alone, moved
        // to row 0. Its numbers are the same: a query's attention and a row's products do not depend
        // on the rows beside them (kernels.h; tests/test_bit_identical.py, test_last_logits_alone).
        // Not when tracing, which watches every row.
        const float *q = s->q, *q_far = s->q_far;
        int at = pos;
        if (l == p->n_layers - 1 && !all_logits && !s->trace && n > 1) {
            const int turns = rope ? rope_query_turns(&rope->p) : 1;
            rows = 1, at = pos + n - 1;
            q += (size_t)(n - 1) * qd;
            if (turns > 1) q_far += rope_turn_at(turns, qd, n - 1, 1);
            memcpy(s->x, s->x + (size_t)(n - 1) * D, (size_t)D * sizeof(float));
        }
        attention(s->xb, q, q_far, &s->kv, l, rows, at, s->att, s->n_threads); // (rows, qd)
        bad |= matmul(&s->work, s->xb2, s->xb, &lw->wo, rows);                 // (rows, qd) -> (rows, D)
        join(p, s->x, s->xb2, lw->post_att, rows);
        trace(s, s->x, rows, D, l, 0);

        // MLP: x = x + w2(act(w1(x)) * w3(x)), HF: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        in = pre_norm(p, s->xb, s->x, lw->rms_ffn, rows);
        bad |= gate_up_proj(s, lw, in, rows); // hb, hb2 (rows, H)
        glu(p->act, s->hb, s->hb2, (size_t)rows * H);
        bad |= matmul(&s->work, s->xb2, s->hb, &lw->w2, rows); // (rows, H) -> (rows, D)
        join(p, s->x, s->xb2, lw->post_ffn, rows);
        trace(s, s->x, rows, D, l, 1);
    }

    // Classifier, for every row of the block or only the last one.
    const int first = all_logits ? 0 : rows - 1;
    rmsnorm(s->xb, s->x + (size_t)first * D, w->rms_final, rows - first, D, p->norm_eps);
    bad |= matmul(&s->work, s->logits, s->xb, &w->wcls, rows - first); // (rows, D) -> (rows, V)
    finish_logits(p, s->logits, rows - first);
    if (s->trace > first) { // the watched rows that have logits
        s->trace -= first;
        trace(s, s->logits, rows - first, p->vocab_size, p->n_layers, 0);
        if (s->found.layer == p->n_layers) s->found.row += first;
    }
    if (bad) {
        snprintf(err, errlen, "forward: a matrix product did not fit the scratch it was given (a bug)");
        return -1;
    }
    *logits = s->logits;
    return 0;
}

int transformer_trace_nonfinite(Transformer *t, const int *tokens, int n, int pos, int text_len, int all_logits,
                                int rows, NonFinite *where, char *err, size_t errlen) {
    RunState *s = &t->state;
    s->trace = rows > 0 ? rows : 1;
    s->found = (NonFinite){-2, 0, 0};
    float *logits;
    const int status = transformer_forward(t, tokens, n, pos, text_len, all_logits, &logits, err, errlen);
    s->trace = 0;
    *where = s->found;
    return status;
}

// ---------------------------------------------------------------------------------------------
// Context shift (README, "Past the end of the context"). A cached key is R(p theta) k: rotated for
// its position p. Moved to p - drop, it must become R((p - drop) theta) k = R(-drop theta) R(p theta) k
// (rotations add: R(a) R(b) = R(a + b)), so each moved key is turned back by drop theta_i, with no
// need for the token or the layer input that made it. The angle is computed in double from the
// frequencies; YaRN's magnitude, folded into its cos and sin, stays as it was. Under dynamic NTK the
// keys are cached un-rotated and only move; the next forward's shorter length gives the base, and
// every key is turned with it as attention reads it. Under ReRoPE they only move too: attention turns
// a key by its (new) position, near or far, as it reads it.
int transformer_shift(Transformer *t, int len, int keep, int drop, char *err, size_t errlen) {
    RunState *s = &t->state;
    if (keep < 0 || drop < 1 || len > t->run.n_ctx || keep > len - drop) {
        snprintf(err, errlen, "shift: cannot keep %d and drop %d of %d cached positions", keep, drop, len);
        return -1;
    }
    // The angles of each RoPE the layers use; a layer without RoPE, or whose keys are cached
    // un-rotated, moves its keys as they are.
    float cos_d[2][ROPE_MAX_PAIRS], sin_d[2][ROPE_MAX_PAIRS];
    rope_shift_angles(&t->rope, drop, cos_d[0], sin_d[0]);
    if (t->rope_swa.cos) rope_shift_angles(&t->rope_swa, drop, cos_d[1], sin_d[1]);
    const float **cos = malloc(2 * (size_t)t->config.n_layers * sizeof *cos), **sin = cos + t->config.n_layers;
    if (!cos) {
        snprintf(err, errlen, "shift: out of memory");
        return -1;
    }
    for (int l = 0; l < t->config.n_layers; l++) {
        const Rope *r = layer_rope_of(t, l);
        const int which = r == &t->rope_swa, turned = r && !rope_keys_unrotated(&r->p);
        cos[l] = turned ? cos_d[which] : NULL, sin[l] = turned ? sin_d[which] : NULL;
    }
    const int failed = kv_shift(&s->kv, keep + drop, keep, len - keep - drop, cos, sin);
    free(cos);
    if (failed) snprintf(err, errlen, "shift: out of memory");
    return failed ? -1 : 0;
}
