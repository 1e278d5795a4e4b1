// model.c - the checkpoint (our format and llama2.c's legacy one), the run state, the forward pass.
//
// The forward pass is Hugging Face's LlamaForCausalLM in float32, written out:
//   x = embed(tokens)
//   for each layer:  x = x + wo(attention(rope(wq(rmsnorm(x))), rope(wk(rmsnorm(x))), wv(rmsnorm(x))))
//                    x = x + w2(silu(w1(rmsnorm(x))) * w3(rmsnorm(x)))
//   logits = wcls(rmsnorm(x))
// for a block of consecutive positions at once (a prompt, a perplexity window, or one token).
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
// Reading the file: a cursor walks the tensors in file order. It never hands out a pointer past
// the end of the file and never lets an offset overflow; the caller then checks that the walk
// ended exactly at the end of the file.

typedef struct {
    const uint8_t *base; // the mapped file
    size_t size;         // its length
    size_t off;          // where the next tensor starts
    int overflow;        // a size did not fit in size_t
} Cursor;

static const void *take(Cursor *c, size_t bytes, size_t align) {
    size_t off = c->off, pad = (align - off % align) % align;
    if (bytes == 0 || off > SIZE_MAX - pad || off + pad > SIZE_MAX - bytes) {
        c->overflow = 1;
        c->off = SIZE_MAX;
        return NULL;
    }
    off += pad;
    c->off = off + bytes;
    return c->off <= c->size ? c->base + off : NULL;
}

static size_t mul3(size_t a, size_t b, size_t c) {
    if (b && a > SIZE_MAX / b) return 0;
    if (c && a * b > SIZE_MAX / c) return 0;
    return a * b * c; // 0 doubles as "overflow": no tensor here is empty
}

static Matrix take_matrix(Cursor *c, DType t, int rows, int cols, size_t align) {
    Matrix m = {NULL, NULL, rows, cols, t};
    m.data = take(c, matrix_data_bytes(t, rows, cols), align);
    if (t == DTYPE_Q8_0) m.scale = take(c, matrix_scale_bytes(t, rows, cols), align);
    return m;
}

static const float *take_f32(Cursor *c, size_t n, size_t align) {
    return take(c, mul3(n, sizeof(float), 1), align);
}

// Our format: per layer, tensor after tensor, each aligned to MODEL_ALIGN (see model.h).
static void walk_ours(Cursor *c, Transformer *t) {
    const Config *p = &t->config;
    const int D = p->dim, qd = p->n_heads * p->head_dim, kvd = p->n_kv_heads * p->head_dim;
    TransformerWeights *w = &t->weights;
    c->off = MODEL_HEADER_SIZE;
    w->token_embedding = take_matrix(c, p->dtype, p->vocab_size, D, MODEL_ALIGN);
    for (int l = 0; l < p->n_layers; l++) {
        LayerWeights *lw = &w->layers[l];
        lw->rms_att = take_f32(c, D, MODEL_ALIGN);
        lw->wq = take_matrix(c, p->dtype, qd, D, MODEL_ALIGN);
        lw->wk = take_matrix(c, p->dtype, kvd, D, MODEL_ALIGN);
        lw->wv = take_matrix(c, p->dtype, kvd, D, MODEL_ALIGN);
        lw->wo = take_matrix(c, p->dtype, D, qd, MODEL_ALIGN);
        lw->rms_ffn = take_f32(c, D, MODEL_ALIGN);
        lw->w1 = take_matrix(c, p->dtype, p->hidden_dim, D, MODEL_ALIGN);
        lw->w2 = take_matrix(c, p->dtype, D, p->hidden_dim, MODEL_ALIGN);
        lw->w3 = take_matrix(c, p->dtype, p->hidden_dim, D, MODEL_ALIGN);
    }
    w->rms_final = take_f32(c, D, MODEL_ALIGN);
    w->wcls = p->shared_classifier ? w->token_embedding : take_matrix(c, p->dtype, p->vocab_size, D, MODEL_ALIGN);
}

// llama2.c's legacy files store each weight for all layers at once, (layer, rows, cols) in f32,
// with no padding. These two split such a stack into per-layer views.
static void take_stacked_matrix(Cursor *c, Transformer *t, size_t field, int rows, int cols) {
    const float *stack = take_f32(c, mul3(t->config.n_layers, rows, cols), 1);
    for (int l = 0; l < t->config.n_layers; l++) {
        Matrix *m = (Matrix *)((char *)&t->weights.layers[l] + field);
        *m = (Matrix){stack ? stack + (size_t)l * rows * cols : NULL, NULL, rows, cols, DTYPE_F32};
    }
}

static void take_stacked_norm(Cursor *c, Transformer *t, size_t field) {
    const int D = t->config.dim;
    const float *stack = take_f32(c, mul3(t->config.n_layers, D, 1), 1);
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
    take_f32(c, mul3(p->seq_len, p->head_dim / 2, 2), 1); // freq_cis_real and freq_cis_imag
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
    if (p->head_dim < 2 || p->head_dim > 1024 || p->head_dim % 2) return "head_dim must be even, in [2, 1024]";
    if (p->vocab_size < 1 || p->vocab_size > 1 << 22) return "vocab_size must be in [1, 2^22]";
    if (p->seq_len < 1 || p->seq_len > 1 << 24) return "seq_len (trained context) must be in [1, 2^24]";
    if (p->bos_id < -1 || p->bos_id >= p->vocab_size) return "bos_id must be -1 or a token id";
    if (p->eos_id < -1 || p->eos_id >= p->vocab_size) return "eos_id must be -1 or a token id";
    if (!(isfinite(p->norm_eps) && p->norm_eps > 0 && p->norm_eps < 1)) return "norm_eps must be in (0, 1)";
    return NULL;
}

static int read_header_ours(Transformer *t, const uint8_t *h, size_t size, char *why, size_t n) {
    Config *p = &t->config;
    if (size < MODEL_HEADER_SIZE) {
        snprintf(why, n, "file is %zu bytes, shorter than the %d-byte header (hint: the file is truncated; "
                 "copy or export it again)", size, MODEL_HEADER_SIZE);
        return -1;
    }
    uint32_t version = (uint32_t)get_i32(h, 4);
    if (version != MODEL_VERSION) {
        snprintf(why, n, "format version %u, this program reads version %d (hint: export the model again "
                 "with this program's export/export.py)", version, MODEL_VERSION);
        return -1;
    }
    p->dim = get_i32(h, 8);
    p->hidden_dim = get_i32(h, 12);
    p->n_layers = get_i32(h, 16);
    p->n_heads = get_i32(h, 20);
    p->n_kv_heads = get_i32(h, 24);
    p->head_dim = get_i32(h, 28);
    p->vocab_size = get_i32(h, 32);
    p->seq_len = get_i32(h, 36);
    p->bos_id = get_i32(h, 40);
    p->eos_id = get_i32(h, 44);
    int shared = get_i32(h, 48), dtype = get_i32(h, 52), mode = get_i32(h, 56), orig = get_i32(h, 60);
    p->norm_eps = (float)get_f64(h, 72);
    p->rope = (RopeParams){
        .mode = (RopeScaling)mode,
        .head_dim = p->head_dim,
        .orig_ctx = orig ? orig : p->seq_len,
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
    if (!bad && (dtype < 0 || dtype >= DTYPE_COUNT)) bad = "unknown weight dtype (0 f32, 1 f16, 2 q8_0)";
    if (!bad && (mode < 0 || mode >= ROPE_SCALING_COUNT)) bad = "unknown rope_scaling mode";
    if (!bad && (orig < 0 || orig > 1 << 24)) bad = "rope_orig_ctx must be in [0, 2^24]";
    for (int i = 128; !bad && i < MODEL_HEADER_SIZE; i++)
        if (h[i]) bad = "reserved header bytes 128..255 must be zero";
    if (bad) {
        snprintf(why, n, "bad header: %s (hint: the file is damaged or not written by export/export.py)", bad);
        return -1;
    }
    p->shared_classifier = shared;
    p->dtype = (DType)dtype;
    char rope_err[200];
    if (rope_params_check(&p->rope, rope_err, sizeof rope_err)) {
        snprintf(why, n, "bad header: %s (hint: the file is damaged or not written by export/export.py)", rope_err);
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
    p->seq_len = get_i32(h, 24);
    p->shared_classifier = vocab > 0;
    p->vocab_size = vocab == INT32_MIN ? 0 : abs(vocab);
    p->head_dim = p->n_heads > 0 ? p->dim / p->n_heads : 0;
    // What llama2.c hard-codes: base 10000, eps 1e-5, BOS 1, EOS 2, no scaling.
    p->bos_id = 1;
    p->eos_id = 2;
    p->norm_eps = 1e-5f;
    p->dtype = DTYPE_F32;
    p->legacy = 1;
    p->rope = (RopeParams){.mode = ROPE_SCALING_NONE, .head_dim = p->head_dim, .orig_ctx = p->seq_len,
                           .base = 10000, .factor = 1};
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
        snprintf(err, errlen, "%s: not a regular file (hint: pass the .bin file; export/export.py converts "
                 "a Hugging Face directory)", path);
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size < 4) {
        snprintf(err, errlen, "%s: %zu bytes is too short to be a model (hint: the file is truncated or "
                 "empty; export it again)", path, size);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map the file: %s", path, strerror(errno));
        return -1;
    }
    t->map = map;
    t->map_size = size;
    const uint8_t *h = map;

    int ours = memcmp(h, MODEL_MAGIC, 4) == 0;
    if (!ours && memcmp(h, "ak42", 4) == 0) {
        snprintf(why, sizeof why, "a llama2.c version 1/2 export, which this program does not read (hint: "
                 "export with llama2.c's --version 0, or convert the Hugging Face model with export/export.py)");
        goto fail;
    }
    if (ours ? read_header_ours(t, h, size, why, sizeof why) : read_header_legacy(t, h, size)) {
        if (!ours)
            snprintf(why, sizeof why, "not a model file: no \"%s\" magic and no valid llama2.c legacy header "
                     "(hint: convert a Hugging Face checkpoint with export/export.py)", MODEL_MAGIC);
        goto fail;
    }

    t->weights.layers = calloc((size_t)t->config.n_layers, sizeof(LayerWeights));
    if (!t->weights.layers) {
        snprintf(why, sizeof why, "out of memory");
        goto fail;
    }
    Cursor c = {h, size, 0, 0};
    if (ours) walk_ours(&c, t);
    else walk_legacy(&c, t);
    if (c.overflow || c.off != size) {
        if (!ours && (c.overflow || c.off > size))
            snprintf(why, sizeof why, "not a model file: no \"%s\" magic, and as a llama2.c legacy checkpoint "
                     "it would need more than its %zu bytes (hint: convert the model with export/export.py, "
                     "or the file is truncated)", MODEL_MAGIC, size);
        else if (c.overflow)
            snprintf(why, sizeof why, "header describes tensors too large to address (hint: the file is damaged)");
        else
            snprintf(why, sizeof why, "file is %zu bytes but its header describes %zu (hint: %s)", size, c.off,
                     c.off > size ? "the file is truncated; copy or export it again"
                                  : "extra bytes at the end: the file is damaged or the header is wrong");
        goto fail;
    }
    t->weight_bytes = size - (ours ? MODEL_HEADER_SIZE : 7 * sizeof(int32_t));
    return 0;

fail:
    snprintf(err, errlen, "%s: %s", path, why);
    transformer_free(t);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// Run state: activations for a block of B tokens and the KV cache, one allocation.

// Lays the buffers out one after the other (each 64-byte aligned) from base, or only counts
// them when base is NULL. Returns the number of floats, 0 if that overflows.
static size_t state_layout(RunState *s, float *base, const Config *p, const RunConfig *run, int n_threads) {
    const size_t B = (size_t)run->max_batch, ctx = (size_t)run->ctx, D = (size_t)p->dim;
    const size_t qd = (size_t)p->n_heads * p->head_dim, kvd = (size_t)p->n_kv_heads * p->head_dim;
    const size_t H = (size_t)p->hidden_dim, L = (size_t)p->n_layers;
    const size_t kv = mul3(L, ctx, kvd);
    const int dynamic = run->rope.mode == ROPE_SCALING_DYNAMIC;
    struct {
        float **p;
        size_t n;
    } part[] = {
        {&s->x, mul3(B, D, 1)},        {&s->xb, mul3(B, D > qd ? D : qd, 1)},
        {&s->xb2, mul3(B, D, 1)},      {&s->q, mul3(B, qd, 1)},
        {&s->k, mul3(B, kvd, 1)},
        {&s->hb, mul3(B, H, 1)},       {&s->hb2, mul3(B, H, 1)},
        {&s->att, mul3(n_threads, ctx, 1)}, {&s->logits, mul3(B, p->vocab_size, 1)},
        {&s->key_cache, kv},           {&s->value_cache, kv},
        {&s->key_raw, dynamic ? kv : 1},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof part / sizeof part[0]; i++) {
        size_t n = (part[i].n + 15) / 16 * 16; // keep every buffer 64-byte aligned
        if (part[i].n == 0 || n < part[i].n || total > SIZE_MAX / sizeof(float) - n) return 0;
        if (base) *part[i].p = base + total;
        total += n;
    }
    if (base && !dynamic) s->key_raw = NULL;
    return total;
}

size_t transformer_state_bytes(const Config *c, const RunConfig *run, int n_threads) {
    RunState s;
    size_t floats = state_layout(&s, NULL, c, run, n_threads);
    size_t rope = mul3((size_t)run->ctx, (size_t)c->head_dim, sizeof(float)); // cos and sin tables
    return floats && rope && floats <= (SIZE_MAX - rope) / sizeof(float) ? floats * sizeof(float) + rope : 0;
}

// What the kernel says could still be allocated without swapping (MemAvailable), in bytes.
static size_t available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb) return (size_t)kb * 1024;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
}

int transformer_prepare(Transformer *t, const RunConfig *run, char *err, size_t errlen) {
    RunState *s = &t->state;
    t->run = *run;
    if (run->ctx < 1 || run->max_batch < 1) {
        snprintf(err, errlen, "the context and the batch must hold at least one token");
        return -1;
    }
    if (t->run.max_batch > run->ctx) t->run.max_batch = run->ctx;
    s->n_threads = max_threads();
    size_t bytes = transformer_state_bytes(&t->config, &t->run, s->n_threads);
    size_t avail = available_memory();
    if (bytes == 0 || bytes > avail) {
        snprintf(err, errlen, "--ctx %d needs %.2f GiB for the KV cache and activations, more than the %.2f GiB "
                 "of memory available (hint: a smaller --ctx)", run->ctx,
                 bytes ? bytes / 1073741824.0 : INFINITY, avail / 1073741824.0);
        return -1;
    }
    // Anonymous memory comes zeroed and page-aligned, and only the pages the run touches get RSS.
    size_t floats = state_layout(s, NULL, &t->config, &t->run, s->n_threads);
    void *base = mmap(NULL, floats * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        snprintf(err, errlen, "out of memory allocating %zu bytes for --ctx %d (hint: a smaller --ctx)", bytes,
                 run->ctx);
        return -1;
    }
    state_layout(s, base, &t->config, &t->run, s->n_threads);
    s->bytes = floats * sizeof(float);
    t->state_bytes = bytes;
    char rope_err[300];
    if (rope_init(&t->rope, &run->rope, run->ctx, rope_err, sizeof rope_err)) {
        snprintf(err, errlen, "%s", rope_err);
        munmap(base, s->bytes);
        memset(s, 0, sizeof(*s));
        return -1;
    }
    s->rope_version = t->rope.version;
    return 0;
}

void transformer_free(Transformer *t) {
    if (t->state.x) munmap(t->state.x, t->state.bytes); // the first buffer of the single allocation
    rope_free(&t->rope);
    free(t->weights.layers);
    if (t->map) munmap(t->map, t->map_size);
    memset(t, 0, sizeof(*t));
}

// ---------------------------------------------------------------------------------------------
// The layers' math

// RMSNorm (Zhang & Sennrich 2019), per row: x * rsqrt(mean(x^2) + eps) * weight.
// HF LlamaRMSNorm: hidden_states * torch.rsqrt(variance + self.variance_epsilon); self.weight * ...
static void rmsnorm(float *out, const float *x, const float *w, int n, int size, float eps) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * size;
        float *ot = out + (size_t)t * size;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < size; i++) ss += xt[i] * xt[i];
        float scale = 1.0f / sqrtf(ss / size + eps);
        for (int i = 0; i < size; i++) ot[i] = w[i] * (xt[i] * scale);
    }
}

// e^x for the x <= 0 of a softmax, written without branches so that loops over it vectorize
// (libm's expf does not). e^x = 2^k * e^r with k = round(x / ln 2) and |r| <= ln(2)/2, ln 2 split
// in two parts (Cody-Waite) so r is exact, e^r by its Taylor polynomial to r^6: relative error
// ~1e-7. Below x = -40 it returns 0: such terms weigh less than 4e-18 beside the largest one (1),
// so even 2^24 of them change a float sum by less than its rounding, and dropping them keeps
// subnormal numbers, which are slow, out of the attention weights. NaN also gives 0.
static inline float softmax_exp(float x) {
    const float xc = x > -40.0f ? x : -40.0f;
    const float k = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; // round(x * log2(e)), 1.5 * 2^23 trick
    const float r = (xc - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    union {
        int32_t i;
        float f;
    } two_k = {.i = ((int32_t)k + 127) << 23};
    return x > -40.0f ? p * two_k.f : 0.0f;
}

// softmax(x) over n scores in place.
static void softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        x[i] = softmax_exp(x[i] - max);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// x += y over n floats: the residual connection.
static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

// Causal self-attention for the block's queries at positions pos .. pos+n-1 over the cached keys
// and values 0 .. pos+i. Query head h reads key/value head h / (n_heads / n_kv_heads): grouped-
// query attention (Ainslie et al. 2023), the same as HF's repeat_kv. One (query, head) per task.
//   scores = softmax(q k^T / sqrt(head_dim)),  out = scores v
static void attention(Transformer *t, int layer, int n, int pos) {
    const Config *p = &t->config;
    RunState *s = &t->state;
    const int hd = p->head_dim, qd = p->n_heads * hd, kvd = p->n_kv_heads * hd;
    const int group = p->n_heads / p->n_kv_heads, ctx = t->run.ctx;
    const float *keys = s->key_cache + (size_t)layer * kvd * ctx;   // (kvd, ctx)
    const float *values = s->value_cache + (size_t)layer * ctx * kvd; // (ctx, kvd)
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int h = 0; h < p->n_heads; h++) {     // head outer: one head's cached keys and values stay
        for (int i = 0; i < n; i++) {          // in cache while every query of the block reads them
            const int kvh = h / group, len = pos + i + 1;
            float *att = s->att + (size_t)thread_num() * ctx;
            // kernels.c: scores over the transposed keys, vectorized over positions; then the mix
            attention_scores(att, s->q + (size_t)i * qd + (size_t)h * hd, keys + (size_t)kvh * hd * ctx, hd,
                             (size_t)ctx, len, scale);
            softmax(att, len);
            attention_mix(s->xb + (size_t)i * qd + (size_t)h * hd, att, values + (size_t)kvh * hd, (size_t)kvd, len,
                          hd);
        }
    }
}

// Write the block's keys k (n, kvd), already rotated, into the transposed cache of a layer.
static void store_keys(float *kt, const float *k, int n, int pos, int kvd, int ctx) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < kvd; c++) kt[(size_t)c * ctx + pos + i] = k[(size_t)i * kvd + c];
}

// Dynamic NTK changed the frequencies: rotate every cached key again, from its un-rotated copy,
// so that the query and all keys use the same base (see README, "dynamic").
static void rerotate_keys(Transformer *t, int pos) {
    const Config *p = &t->config;
    RunState *s = &t->state;
    const int hd = p->head_dim, kvd = p->n_kv_heads * hd, ctx = t->run.ctx;
#pragma omp parallel for
    for (int l = 0; l < p->n_layers; l++) {
        float key[kvd];
        for (int j = 0; j < pos; j++) {
            memcpy(key, s->key_raw + ((size_t)l * ctx + j) * kvd, sizeof key);
            for (int h = 0; h < p->n_kv_heads; h++) rope_rotate(&t->rope, key + (size_t)h * hd, j);
            store_keys(s->key_cache + (size_t)l * kvd * ctx, key, 1, j, kvd, ctx);
        }
    }
    s->rope_version = t->rope.version;
}

// ---------------------------------------------------------------------------------------------
// The forward pass

float *transformer_forward(Transformer *t, const int *tokens, int n, int pos, int all_logits) {
    const Config *p = &t->config;
    const TransformerWeights *w = &t->weights;
    RunState *s = &t->state;
    const int D = p->dim, hd = p->head_dim, qd = p->n_heads * hd, kvd = p->n_kv_heads * hd;
    const int H = p->hidden_dim, ctx = t->run.ctx;
    if (n < 1 || n > t->run.max_batch || pos < 0 || pos > ctx - n) return NULL;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= p->vocab_size) return NULL;

    if (s->key_raw && s->rope_version != t->rope.version) rerotate_keys(t, pos);

    for (int i = 0; i < n; i++) matrix_row(s->x + (size_t)i * D, &w->token_embedding, tokens[i]); // (n, D)

    for (int l = 0; l < p->n_layers; l++) {
        const LayerWeights *lw = &w->layers[l];
        const size_t block = ((size_t)l * ctx + pos) * kvd; // this block's rows in the row-major caches
        float *v = s->value_cache + block;                   // (n, kvd)

        // Attention: x = x + wo(attention(rope(q), rope(k), v))
        rmsnorm(s->xb, s->x, lw->rms_att, n, D, p->norm_eps); // (n, D)
        // q (n, qd), k (n, kvd), v (n, kvd) = xb (n, D) @ wq^T, wk^T, wv^T, in one go (kernels.h)
        matmul_many((float *[]){s->q, s->k, v}, s->xb, (const Matrix *[]){&lw->wq, &lw->wk, &lw->wv}, 3, n);
        if (s->key_raw) memcpy(s->key_raw + block, s->k, (size_t)n * kvd * sizeof(float));
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < p->n_heads; h++) rope_rotate(&t->rope, s->q + (size_t)i * qd + (size_t)h * hd, pos + i);
            for (int h = 0; h < p->n_kv_heads; h++) rope_rotate(&t->rope, s->k + (size_t)i * kvd + (size_t)h * hd, pos + i);
        }
        store_keys(s->key_cache + (size_t)l * kvd * ctx, s->k, n, pos, kvd, ctx);
        attention(t, l, n, pos);                              // -> xb (n, qd)
        matmul(s->xb2, s->xb, &lw->wo, n);                    // (n, qd) -> (n, D)
        add_rows(s->x, s->xb2, (size_t)n * D);

        // MLP: x = x + w2(silu(w1(x)) * w3(x)), HF: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        rmsnorm(s->xb, s->x, lw->rms_ffn, n, D, p->norm_eps);
        matmul_many((float *[]){s->hb, s->hb2}, s->xb, (const Matrix *[]){&lw->w1, &lw->w3}, 2, n); // -> (n, H) x 2
        for (size_t i = 0; i < (size_t)n * H; i++) {
            float g = s->hb[i];
            s->hb[i] = g / (1.0f + expf(-g)) * s->hb2[i];     // silu(g) = g * sigmoid(g)
        }
        matmul(s->xb2, s->hb, &lw->w2, n);                    // (n, H) -> (n, D)
        add_rows(s->x, s->xb2, (size_t)n * D);
    }

    // Classifier, for every row of the block or only the last one.
    const int first = all_logits ? 0 : n - 1;
    rmsnorm(s->xb, s->x + (size_t)first * D, w->rms_final, n - first, D, p->norm_eps);
    matmul(s->logits, s->xb, &w->wcls, n - first);            // (rows, D) -> (rows, V)
    return s->logits;
}
