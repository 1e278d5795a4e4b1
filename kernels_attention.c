// kernels_attention.c - causal self-attention of a block of queries over the KV cache (kernels.h,
// attention), fast: the same three steps as kernels.c's attention_ref (scores, softmax, the
// weighted sum of the values), on tasks that share each cached key and value read among the query
// heads of one kv head and a run of queries.
//
// The plain C microkernels come first (the scores of a task's rows against a head's keys, and the
// mix of its values): they define what each computes, and are what a build without vector code
// runs; kernels_x86.c has vector versions behind the same signatures (kernels_internal.h says
// which a build uses). Then the tasks, their scratch, and attention, which shares them out. The
// cache's layout is kernels.c's.
#include "kernels_internal.h"
#include "rope.h" // the pair turn, ROPE_MAX_HEAD_DIM

#include <math.h>
#include <string.h>

enum {
    OUT_RUN = 64,  // plain C: output coordinates summed at a time
    ATT_ROWS = 16, // query rows (queries x heads of one kv head) per task, at most
};

// ---------------------------------------------------------------------------------------------
// Scores and mix, plain C

// A block of keys k (hd, KV_RUN) turned by RoPE in place with its block of the rotation table: rows
// 2p and 2p+1 (pair p) become (x0 cos - x1 sin, x0 sin + x1 cos) with cos and sin rows 2p and 2p+1
// of rot. Used for the keys of dynamic NTK and ReRoPE, which the cache holds un-rotated.
void rotate_block(float *k, const float *rot, int hd) {
    for (int p = 0; p < hd / 2; p++) {
        const size_t r0 = (size_t)2 * p * KV_RUN, r1 = r0 + KV_RUN;
#pragma omp simd
        for (int i = 0; i < KV_RUN; i++) {
            const float x0 = k[r0 + i], x1 = k[r1 + i], c = rot[r0 + i], s = rot[r1 + i];
            k[r0 + i] = rope_turn0(x0, x1, c, s);
            k[r1 + i] = rope_turn1(x0, x1, c, s);
        }
    }
}

// Attention, scores: att[r, j] = sum_d qs[r, d] k_j[d] for rows r < rows and positions j < len,
// over one head's keys kt (of type t) in the cache's blocks of KV_RUN; att rows are ld apart. A
// block other than float32, or with a rotation table, is first made floats (and turned) in
// `turned` (hd * KV_RUN floats). A block's KV_RUN scores are summed in a local array while all hd
// coordinates go by, so each row reads the keys once, in order.
void attention_scores_plain(float *att, size_t ld, const float *qs, int rows, const void *kt, DType t, const float *rot,
                            float *turned, int hd, int len) {
    for (int j = 0; j < len; j += KV_RUN) {
        const int run = len - j < KV_RUN ? len - j : KV_RUN;
        const void *block = (const char *)kt + (size_t)j * kv_row_bytes(t, hd); // block j / KV_RUN
        const float *keys = block;
        if (t != DTYPE_F32 || rot) {
            key_block_floats(turned, block, t, hd);
            if (rot) rotate_block(turned, rot + (size_t)j * hd, hd);
            keys = turned;
        }
        for (int r = 0; r < rows; r++) {
            float acc[KV_RUN] = {0};
            for (int d = 0; d < hd; d++) {
                const float qd = qs[(size_t)r * hd + d];
#pragma omp simd
                for (int i = 0; i < run; i++)
                    acc[i] += qd * keys[(size_t)d * KV_RUN + i];
            }
            memcpy(att + r * ld + j, acc, (size_t)run * sizeof(float));
        }
    }
}

// Attention, mix: o[r, d] = sum_j att[r, j] v[j, d] for rows r < rows and d < hd, over one head's
// values v (len, hd) of type t, o (rows, hd); in runs of MIX_RUN positions (other than float32:
// made floats in `wide` first), OUT_RUN output coordinates at a time in a local array while the
// positions of the run go by. Each output is summed in position order.
void attention_mix_plain(float *o, const float *att, size_t ld, int rows, const void *v, DType t, float *wide, int len,
                         int hd) {
    memset(o, 0, (size_t)rows * hd * sizeof(float));
    for (int j0 = 0; j0 < len; j0 += MIX_RUN) {
        const int run = len - j0 < MIX_RUN ? len - j0 : MIX_RUN;
        const void *from = (const char *)v + (size_t)j0 * kv_row_bytes(t, hd);
        const float *vals = from;
        if (t != DTYPE_F32) {
            value_rows_floats(wide, from, t, hd, run);
            vals = wide;
        }
        for (int r = 0; r < rows; r++) {
            for (int d0 = 0; d0 < hd; d0 += OUT_RUN) {
                const int width = hd - d0 < OUT_RUN ? hd - d0 : OUT_RUN;
                float acc[OUT_RUN];
                memcpy(acc, o + (size_t)r * hd + d0, (size_t)width * sizeof(float));
                for (int j = 0; j < run; j++) {
                    const float p = att[r * ld + j0 + j];
#pragma omp simd
                    for (int d = 0; d < width; d++)
                        acc[d] += p * vals[(size_t)j * hd + d0 + d];
                }
                memcpy(o + (size_t)r * hd + d0, acc, (size_t)width * sizeof(float));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attention, fast: the same three steps as attention_ref, on tasks of up to ATT_ROWS query rows
// that share one kv head: the group = n_heads / n_kv_heads query heads of that kv head, for a run of
// consecutive queries. Each key and value a task loads then serves every row of the task (grouped-
// query attention's saving, and the reuse of a matrix product across the queries of a prompt), where
// a (query, head) at a time would read the cache once per row. Scores of the task's last query go to
// its last position; an earlier query's scores past its own position are computed and then set to 0
// after its softmax (the causal mask), which adds exact zeros to its mix, so a query's result does
// not depend on which task it was in: the same for any block size or thread count.
// Scratch per thread: attention_scratch_floats, for the scaled queries, the scores and the outputs
// (ReRoPE and Self-Extend: and the scaled far queries and the near scores; dual chunk attention: its
// two more turns of each query and a second row of scores).

static int att_queries(int n_heads, int n_kv_heads) {
    const int group = n_heads / n_kv_heads;
    return group >= ATT_ROWS ? 1 : ATT_ROWS / group;
}

// One task's scratch, laid out in one place: attention_scratch_floats sizes it and attention_task
// carves it with this function, so the two cannot drift. Offsets in floats from the scratch's start;
// returns the total. rows: the task's most query rows; each part is that many rows long.
typedef struct {
    size_t qs, o, att; // the scaled queries, the outputs, the scores (a row of stride per query)
    size_t qf, near;   // more turns of the queries (ReRoPE's far ones; dca's successive, then inter
                       // ones), scaled; a second row of scores
    size_t turned;     // a turned or widened block of keys, or a run of widened values, and 32 past it
} AttLayout;

static size_t att_layout(AttLayout *a, size_t rows, size_t hd, size_t stride, int extra_turns) {
    size_t at = 0;
    a->qs = at, at += rows * hd;
    a->o = at, at += rows * hd;
    a->att = at, at += rows * stride;
    a->qf = at, at += (size_t)extra_turns * rows * hd;
    a->near = at, at += extra_turns ? rows * stride : 0;
    a->turned = at, at += hd * MIX_RUN + KV_RUN;
    return at;
}

// The extra turns of each query a cache's attention reads (rope.h, rope_query_turns - 1).
static int extra_turns(const KVCache *c) { return c->dca_chunk > 0 ? 2 : c->window > 0 ? 1 : 0; }

size_t attention_scratch_floats(int ctx, int n_heads, int n_kv_heads, int head_dim, int extra) {
    // The bounds make every product of att_layout fit a size_t: ctx and head_dim as the loader and
    // --ctx allow them (each part is below 2^24 x 2^10 x 16 x 2^10 floats).
    if (ctx < 1 || ctx > (1 << 24) || n_heads < 1 || n_kv_heads < 1 || n_heads > 1024 || head_dim < 1 ||
        head_dim > ROPE_MAX_HEAD_DIM)
        return 0;
    AttLayout a;
    const size_t rows = (size_t)att_queries(n_heads, n_kv_heads) * (n_heads / n_kv_heads);
    return att_layout(&a, rows, (size_t)head_dim, kv_stride(ctx), extra);
}

// ReRoPE's scores for a task's rows (row r: the query at first + r / group), the cache's keys kt of one
// kv head: a key at distance m - p >= W from the query m takes the far path (q_far, rotation_far),
// the others the near one (q, rotation). Positions before far_end are far from the task's last query
// (m = len - 1), so the far path runs over them, into att; positions from near_start on (a block
// boundary) are near the first query, so the near path runs over them, into `near`; a row then takes
// the near score at each position that is near for its own query. Only the block or two where the
// task's queries disagree are scored both ways; elsewhere one path serves every row.
static void rerope_scores(float *att, float *near, size_t ld, const float *qs, const float *qf, int rows, int group,
                          const KVCache *c, const void *kt, float *turned, int first, int len) {
    const int W = c->window, hd = c->head_dim;
    const int far_end = len - W > 0 ? len - W : 0,
              near_start = first - W + 1 > 0 ? (first - W + 1) / KV_RUN * KV_RUN : 0;
    if (far_end > 0) attention_scores(att, ld, qf, rows, kt, c->key_type, c->rotation_far, turned, hd, far_end);
    if (near_start >= len) return;
    attention_scores(near + near_start, ld, qs, rows,
                     (const char *)kt + (size_t)near_start * kv_row_bytes(c->key_type, c->head_dim), c->key_type,
                     c->rotation + (size_t)near_start * hd, turned, hd, len - near_start);
    for (int r = 0; r < rows; r++) {
        const int m = first + r / group, from = m - W + 1 > near_start ? m - W + 1 : near_start; // near: p > m - W
        memcpy(att + r * ld + from, near + r * ld + from, (size_t)(len - from) * sizeof(float));
    }
}

// Dual chunk attention's scores for rows r0 .. r0 + rows - 1 whose queries are all in chunk k (of C
// positions): the keys of chunks before k - 1 with the inter-chunk queries qi, those of chunk k - 1
// with the successive-chunk ones qf, those of chunk k with the intra-chunk ones qs; every key turned
// by the cache's rotation (to n mod C). Each range is scored from the block holding its start (the
// cache's unit), into `spare` when it must not overwrite the range before it, then copied into att.
static void dca_scores(float *att, float *spare, size_t ld, const float *qs, const float *qf, const float *qi,
                       int rows, const KVCache *c, const void *kt, float *turned, int k, int len) {
    const int hd = c->head_dim, C = c->dca_chunk;
    const int bounds[4] = {0, (k - 1) * C > 0 ? (k - 1) * C : 0, k * C, len}; // inter, successive, intra
    const float *qx[3] = {qi, qf, qs};
    for (int part = 0; part < 3; part++) {
        const int from = bounds[part], to = bounds[part + 1] < len ? bounds[part + 1] : len;
        if (from >= to) continue;
        const int start = from / KV_RUN * KV_RUN; // the block holding `from`
        float *dst = part == 0 ? att : spare;
        attention_scores(dst + start, ld, qx[part], rows, (const char *)kt + (size_t)start * kv_row_bytes(c->key_type, hd),
                         c->key_type, c->rotation + (size_t)start * hd, turned, hd, to - start);
        for (int r = 0; dst != att && r < rows; r++)
            memcpy(att + r * ld + from, spare + r * ld + from, (size_t)(to - from) * sizeof(float));
    }
}

// One task of attention: kv head kvh's query rows for queries t * per .. (at most per of them).
static void attention_task(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
                           float *scratch, int kvh, int t) {
    const int hd = c->head_dim, qd = c->n_heads * hd, two = c->window > 0 && layer_rotates(c, layer);
    const int group = c->n_heads / c->n_kv_heads, per = att_queries(c->n_heads, c->n_kv_heads), max_rows = per * group;
    const size_t stride = kv_stride(c->ctx);
    const float scale = 1.0f / sqrtf((float)hd);
    const int i0 = t * per, nq = n - i0 < per ? n - i0 : per, rows = nq * group, len = pos + i0 + nq;
    AttLayout lay;
    att_layout(&lay, (size_t)max_rows, (size_t)hd, stride, extra_turns(c)); // as attention_scratch_floats sized it
    const int dca = c->dca_chunk > 0 && layer_rotates(c, layer);
    // A sliding layer: the task's first query sees nothing before `first`, so neither does any later
    // one; scores and the mix start at the block that holds it (the positions before it in that
    // block are masked below, with the ones each later query no longer sees).
    const int first = two || dca ? 0 : layer_first(c, layer, pos + i0) / KV_RUN * KV_RUN;
    const void *keys = (const char *)head_keys(c, layer, kvh) + (size_t)first * kv_row_bytes(c->key_type, hd);
    const float *rot = layer_rotates(c, layer) && c->rotation ? c->rotation + (size_t)first * hd : NULL;
    float *qs = scratch + lay.qs, *o = scratch + lay.o, *att = scratch + lay.att, *turned = scratch + lay.turned;
    float *qf = scratch + lay.qf, *near = scratch + lay.near; // ReRoPE's far queries and near scores
    for (int r = 0; r < rows; r++) { // row r: query i0 + r / group, head kvh * group + r % group
        const size_t at = (size_t)(i0 + r / group) * qd + (size_t)(kvh * group + r % group) * hd;
        for (int d = 0; d < hd; d++)
            qs[(size_t)r * hd + d] = q[at + d] * scale;
        for (int d = 0; two && d < hd; d++)
            qf[(size_t)r * hd + d] = q_far[at + d] * scale;
        // dca: q_far's row holds the successive-chunk turns of every head, then the inter-chunk ones
        const size_t far = (size_t)(i0 + r / group) * 2 * qd + (size_t)(kvh * group + r % group) * hd;
        for (int d = 0; dca && d < hd; d++) {
            qf[(size_t)r * hd + d] = q_far[far + d] * scale;
            qf[((size_t)max_rows + r) * hd + d] = q_far[far + qd + d] * scale;
        }
    }
    if (two) // q . k_j / sqrt(d), near or far
        rerope_scores(att, near, stride, qs, qf, rows, group, c, head_keys(c, layer, kvh), turned, pos + i0, len);
    else if (dca) // by runs of the task's queries that share a chunk
        for (int r0 = 0; r0 < rows;) {
            const int k = (pos + i0 + r0 / group) / c->dca_chunk;
            int r1 = r0;
            while (r1 < rows && (pos + i0 + r1 / group) / c->dca_chunk == k)
                r1 += group;
            dca_scores(att + r0 * stride, near + r0 * stride, stride, qs + (size_t)r0 * hd, qf + (size_t)r0 * hd,
                       qf + ((size_t)max_rows + r0) * hd, r1 - r0, c, head_keys(c, layer, kvh), turned, k, len);
            r0 = r1;
        }
    else
        attention_scores(att + first, stride, qs, rows, keys, c->key_type, rot, turned, hd,
                         len - first); // q . k_j / sqrt(d)
    for (int r = 0; r < rows; r++) {
        const int m = pos + i0 + r / group, from = layer_first(c, layer, m); // this query sees from .. m
        memset(att + r * stride + first, 0, (size_t)(from - first) * sizeof(float));
        softmax(att + r * stride + from, m + 1 - from);
        memset(att + r * stride + m + 1, 0, (size_t)(len - m - 1) * sizeof(float));
    }
    const void *values = (const char *)head_values(c, layer, kvh) + (size_t)first * kv_row_bytes(c->value_type, hd);
    attention_mix(o, att + first, stride, rows, values, c->value_type, turned, len - first, hd); // sum_j p_j v_j
    for (int r = 0; r < rows; r++)
        memcpy(out + (size_t)(i0 + r / group) * qd + (size_t)(kvh * group + r % group) * hd, o + (size_t)r * hd,
               (size_t)hd * sizeof(float));
}

void attention(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
               float *scratch, int n_threads) {
    const int per = att_queries(c->n_heads, c->n_kv_heads), tasks = (n + per - 1) / per;
    const size_t each = attention_scratch_floats(c->ctx, c->n_heads, c->n_kv_heads, c->head_dim, extra_turns(c));
    // No more threads than tasks (as matvec): a thread with no task would only be woken and wait,
    // and with more threads than cores each such wake takes a core from a thread with work.
    if (n_threads > c->n_kv_heads * tasks) n_threads = c->n_kv_heads * tasks;
    if (n_threads == 1) { // no team for one thread (kernels.c)
        for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
            for (int t = 0; t < tasks; t++)
                attention_task(out, q, q_far, c, layer, n, pos, scratch, kvh, t);
        return;
    }
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(n_threads)
    for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
        for (int t = 0; t < tasks; t++)
            attention_task(out, q, q_far, c, layer, n, pos, scratch + (size_t)thread_num() * each, kvh, t);
}
