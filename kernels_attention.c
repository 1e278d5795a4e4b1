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
    ATT_ROWS = 64, // query rows (queries x heads of one kv head) per task, at most: every block of keys
                   // (and its turning, for keys the cache holds un-rotated) and every run of values a
                   // task reads serves them all; each row holds its scores (the context long) meanwhile
};

// ---------------------------------------------------------------------------------------------
// Scores and mix, plain C

// A block of float keys k (hd, KV_RUN) turned by RoPE with its block of a key table (rope.h), into
// out (which may be k itself: each value is read before its place is written): rows 2p and 2p+1
// (pair p) become (x0 cos - x1 sin, x0 sin + x1 cos) with cos and sin rows 2p and 2p+1 of rot. Used
// for the keys the cache holds un-rotated (rope.h, rope_keys_unrotated); float32 ones are turned
// straight from the cache, without a copy first.
void rotate_block(float *out, const float *k, const float *rot, int hd) {
    for (int p = 0; p < hd / 2; p++) {
        const size_t r0 = (size_t)2 * p * KV_RUN, r1 = r0 + KV_RUN;
#pragma omp simd
        for (int i = 0; i < KV_RUN; i++) {
            const float x0 = k[r0 + i], x1 = k[r1 + i], c = rot[r0 + i], s = rot[r1 + i];
            out[r0 + i] = rope_turn0(x0, x1, c, s);
            out[r1 + i] = rope_turn1(x0, x1, c, s);
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
        if (t != DTYPE_F32) {
            key_block_floats(turned, block, t, hd);
            keys = turned;
        }
        if (rot) {
            rotate_block(turned, keys, rot + (size_t)j * hd, hd);
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
// A query's keys fall into segments (rope.h, rope_segments), each scored with a turn of the query and
// a key table. The task asks for the segments of its run of queries, scores each one's range for all
// of its rows (the first into the scores, the others into a second row of scores), and each row takes
// from the second row the scores of its own query's segments: a key is scored twice only where the
// task's queries disagree on its segment (at a window's edge or a chunk's boundary).
// Scratch per thread: attention_scratch_floats, for the scaled queries, the scores and the outputs,
// and for each turn past the first its scaled queries and, with any, the second row of scores.

static int att_queries(int n_heads, int n_kv_heads) {
    const int group = n_heads / n_kv_heads;
    return group >= ATT_ROWS ? 1 : ATT_ROWS / group;
}

// One task's scratch, laid out in one place: attention_scratch_floats sizes it and attention_task
// carves it with this function, so the two cannot drift. Offsets in floats from the scratch's start;
// returns the total. rows: the task's most query rows; each part is that many rows long.
typedef struct {
    size_t qs, o, att; // the scaled queries, the outputs, the scores (a row of stride per query)
    size_t qf, spare;  // the turns past the first of the queries, scaled (turn t at qf + (t - 1) rows
                       // x hd); a second row of scores
    size_t turned;     // a turned or widened block of keys, or a run of widened values, and 32 past it
} AttLayout;

static size_t att_layout(AttLayout *a, size_t rows, size_t hd, size_t stride, int extra_turns) {
    size_t at = 0;
    a->qs = at, at += rows * hd;
    a->o = at, at += rows * hd;
    a->att = at, at += rows * stride;
    a->qf = at, at += (size_t)extra_turns * rows * hd;
    a->spare = at, at += extra_turns ? rows * stride : 0;
    a->turned = at, at += hd * MIX_RUN + KV_RUN;
    return at;
}

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

// Positions [a, to) of a layer with a ring of `ring` slots (0: none) lie in its slots without a wrap up
// to the returned end: `to`, or the next multiple of ring.
static int piece_end(int a, int to, int ring) {
    const int wrap = ring ? (a / ring + 1) * ring : to;
    return wrap < to ? wrap : to;
}

// One task of attention: kv head kvh's query rows for queries t * per .. (at most per of them).
static void attention_task(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
                           float *scratch, int kvh, int t) {
    const int hd = c->head_dim, qd = c->n_heads * hd;
    const int group = c->n_heads / c->n_kv_heads, per = att_queries(c->n_heads, c->n_kv_heads), max_rows = per * group;
    const size_t stride = kv_stride(c->ctx), krow = kv_row_bytes(c->key_type, hd);
    const float scale = c->scale > 0 ? c->scale : 1.0f / sqrtf((float)hd);
    const int i0 = t * per, nq = n - i0 < per ? n - i0 : per, rows = nq * group, len = pos + i0 + nq;
    const RopeAttention ra = layer_rope(c, layer);
    AttLayout lay;
    att_layout(&lay, (size_t)max_rows, (size_t)hd, stride, ra.turns - 1); // as attention_scratch_floats sized it
    // A sliding layer: the task's first query sees nothing before `first`, so neither does any later
    // one; scores and the mix start at the block that holds it (the positions before it in that
    // block are masked below, with the ones each later query no longer sees).
    const int first = layer_first(c, layer, pos + i0) / KV_RUN * KV_RUN;
    const void *keys = head_keys(c, layer, kvh);
    const int ring = layer_ring(c, layer) ? c->ring : 0; // positions [a, b) lie in slots a mod ring ..
    float *qs = scratch + lay.qs, *o = scratch + lay.o, *att = scratch + lay.att, *turned = scratch + lay.turned;
    float *qf = scratch + lay.qf, *spare = scratch + lay.spare;
    for (int r = 0; r < rows; r++) { // row r: query i0 + r / group, head kvh * group + r % group
        const int i = i0 + r / group, h = kvh * group + r % group;
        for (int d = 0; d < hd; d++)
            qs[(size_t)r * hd + d] = q[(size_t)i * qd + (size_t)h * hd + d] * scale;
        for (int u = 1; u < ra.turns; u++) // the query's other turns (q_far)
            for (int d = 0; d < hd; d++)
                qf[((size_t)(u - 1) * max_rows + r) * hd + d] =
                    q_far[rope_turn_at(ra.turns, (size_t)qd, i, u) + (size_t)h * hd + d] * scale;
    }
    // q . k_j / sqrt(d): each segment of the run over its range, from the block that holds its start
    RopeSegment seg[ROPE_MAX_SEGMENTS], own[ROPE_MAX_SEGMENTS];
    const int count = rope_segments(&ra, pos + i0, len - 1, seg);
    for (int s = 0; s < count; s++) {
        const int from = (seg[s].from > first ? seg[s].from : first) / KV_RUN * KV_RUN, to = seg[s].to;
        if (from >= to) continue;
        const float *qt = seg[s].turn ? qf + (size_t)(seg[s].turn - 1) * max_rows * hd : qs;
        const float *table = ra.keys[seg[s].key];
        float *dst = s == 0 ? att : spare;
        for (int a = from, b; a < to; a = b) { // in a ring, the pieces between its wraps
            b = piece_end(a, to, ring);
            attention_scores(dst + a, stride, qt, rows, (const char *)keys + (size_t)layer_slot(c, layer, a) * krow,
                             c->key_type, table ? table + (size_t)a * hd : NULL, turned, hd, b - a);
        }
        for (int qi = 0; s > 0 && qi < nq; qi++) // each query's own keys of this segment, into its rows
            for (int k = 0, own_count = rope_segments(&ra, pos + i0 + qi, pos + i0 + qi, own); k < own_count; k++) {
                if (own[k].turn != seg[s].turn || own[k].key != seg[s].key) continue;
                const int lo = own[k].from > first ? own[k].from : first;
                for (int r = qi * group; r < (qi + 1) * group && lo < own[k].to; r++)
                    memcpy(att + r * stride + lo, spare + r * stride + lo, (size_t)(own[k].to - lo) * sizeof(float));
            }
    }
    for (int r = 0; r < rows; r++) {
        const int m = pos + i0 + r / group, from = layer_first(c, layer, m); // this query sees from .. m
        memset(att + r * stride + first, 0, (size_t)(from - first) * sizeof(float));
        for (int j = from; c->softcap > 0 && j <= m; j++) // Gemma 2: c tanh(s / c), before the mask
            att[r * stride + j] = c->softcap * tanhf(att[r * stride + j] / c->softcap);
        softmax(att + r * stride + from, m + 1 - from);
        memset(att + r * stride + m + 1, 0, (size_t)(len - m - 1) * sizeof(float));
    }
    // sum_j p_j v_j, in position order (a ring's pieces one after the other: the same sums)
    const char *values = head_values(c, layer, kvh);
    const size_t vrow = kv_row_bytes(c->value_type, hd);
    memset(o, 0, (size_t)rows * hd * sizeof(float));
    for (int a = first, b; a < len; a = b) {
        b = piece_end(a, len, ring);
        attention_mix(o, att + a, stride, rows, values + (size_t)layer_slot(c, layer, a) * vrow, c->value_type, turned,
                      b - a, hd);
    }
    for (int r = 0; r < rows; r++)
        memcpy(out + (size_t)(i0 + r / group) * qd + (size_t)(kvh * group + r % group) * hd, o + (size_t)r * hd,
               (size_t)hd * sizeof(float));
}

void attention(float *out, const float *q, const float *q_far, const KVCache *c, int layer, int n, int pos,
               float *scratch, int n_threads) {
    const int per = att_queries(c->n_heads, c->n_kv_heads), tasks = (n + per - 1) / per;
    const size_t each =
        attention_scratch_floats(c->ctx, c->n_heads, c->n_kv_heads, c->head_dim, layer_rope(c, layer).turns - 1);
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
