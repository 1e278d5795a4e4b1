// run.c - the command line: generate text from a Llama checkpoint, or measure its perplexity.
//
//   ./run model.bin -i "Once upon a time"          stream a continuation to stdout
//   ./run model.bin -f prompt.txt                   the prompt from a file
//   ./run model.bin -m chat -y "Be brief."         talk to an instruct model, turns from stdin
//   ./run model.bin --ctx 4096 --rope-scaling ntk   run past the trained context
//   ./run model.bin --ppl text.txt --ctx 2048       perplexity, by position bucket
//
// This file owns the process: it loads the model and tokenizer with the flags cli.c parsed, runs
// the generation loop with sampler.c's sampler, the chat loop with chat.c's templates, or the
// perplexity, prints the banner and timings on stderr, and is the only place that decides to
// exit. Exit status: 0 ok, 1 runtime or file error, 2 usage error, 130 after Ctrl-C.
#define _GNU_SOURCE // memmem
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "chat.h"
#include "cli.h"
#include "model.h"
#include "promptcache.h"
#include "sampler.h"
#include "tokenizer.h"

// ---------------------------------------------------------------------------------------------
// Generation

// The whole file at path, malloc'ed (not NUL-terminated), its length in *len; NULL with errno set.
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *bigger = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static const char *plural(long n) { return n == 1 ? "" : "s"; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The output: stdout, every write checked. A failed write (a full disk, a closed file) ends the run
// with exit 1; a closed pipe (| head) ends it by SIGPIPE, as for any Unix filter.
static int output_failed; // errno of the first failed write; 0 while all went well

static void out_write(const void *bytes, size_t len) {
    const char *p = bytes;
    while (!output_failed) {
        errno = 0;
        const size_t n = len ? fwrite(p, 1, len, stdout) : 0;
        p += n, len -= n;
        if (!len && !fflush(stdout)) return;
        if (errno != EINTR) output_failed = errno ? errno : EIO;
        clearerr(stdout); // Ctrl-C cut the write short (EINTR): write the rest
    }
}

// Reported once, where the run ends; returns 1 (the exit status) if a write failed.
static int output_status(void) {
    if (!output_failed) return 0;
    fprintf(stderr, "error: cannot write the output: %s\n", strerror(output_failed));
    return 1;
}

// Ctrl-C: the first one stops the run where it is, which then prints its timing line and exits
// with 130 (128 + SIGINT, as a shell reports it); a second one ends the process at once (the
// handler is reset after the first, SA_RESETHAND).
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

// -r/--reverse-prompt: stop when the output shows one of these texts. A text may end inside a
// token and begin several tokens back, so the last bytes of the output are kept: enough for the
// longest text less one byte, plus the newest piece, which any new match must end in.
typedef struct {
    const char *const *texts;
    int n;
    size_t longest;
    char *tail;
    size_t len;
    const char *hit; // the text seen; NULL while none
} Stop;

static void stop_feed(Stop *s, const char *piece, size_t len) {
    if (!s->n || s->hit || !len) return;
    char *buf = realloc(s->tail, s->len + len);
    if (!buf) { // nothing to match against: stop rather than run past the user's stop text
        s->hit = s->texts[0];
        return;
    }
    memcpy(buf + s->len, piece, len);
    s->tail = buf, s->len += len;
    for (int i = 0; i < s->n && !s->hit; i++)
        if (memmem(buf, s->len, s->texts[i], strlen(s->texts[i]))) s->hit = s->texts[i];
    if (s->len >= s->longest) {
        memmove(buf, buf + s->len - (s->longest - 1), s->longest - 1);
        s->len = s->longest - 1;
    }
}

static Stop stop_new(const Options *o) {
    Stop s = {.texts = o->reverse, .n = o->n_reverse, .longest = 1};
    for (int i = 0; i < o->n_reverse; i++)
        if (strlen(o->reverse[i]) > s.longest) s.longest = strlen(o->reverse[i]);
    return s;
}

static void emit(Tokenizer *tok, int prev, int id, Stop *stop) {
    size_t len;
    const char *piece = tokenizer_decode_piece(tok, prev, id, &len);
    if (!piece || !len) return;
    out_write(piece, len);
    if (stop) stop_feed(stop, piece, len);
}

// Does token id end the text? EOS, every other end token the checkpoint lists (Llama 3 instruct:
// <|end_of_text|>, <|eom_id|>, <|eot_id|>), and BOS, which would start another text.
static int is_end(const Config *c, int id) {
    for (int i = 0; i < c->n_end_ids; i++)
        if (id == c->end_ids[i]) return 1;
    return id == c->eos_id || id == c->bos_id;
}

// Room for `need` more tokens after position *pos. While they would pass the end of the context, a
// context shift (README, "Past the end of the context") keeps the first `keep` positions, drops
// the oldest half of the rest and moves the others down (transformer_shift). Returns 0; 1 when no
// shift can make the room (the kept positions and the new tokens alone fill the context); -1 after
// an error, in err.
static int make_room(Transformer *t, int keep, int *pos, int need, int *shifts, char *err, size_t errlen) {
    while (*pos + need > t->run.n_ctx) {
        const int drop = (*pos - keep) / 2;
        if (drop < 1 || keep + need > t->run.n_ctx) return 1;
        if (transformer_shift(t, *pos, keep, drop, err, errlen)) return -1;
        *pos -= drop;
        (*shifts)++;
    }
    return 0;
}

// Run n tokens at positions pos, pos + 1, ... in blocks of --batch-size, all of them one sequence
// (as one Hugging Face forward pass over them would be); the last one's logits in *logits. Stops
// early after Ctrl-C. Returns how many ran, -1 after an error (in err).
static int prefill(Transformer *t, const int *ids, int n, int pos, float **logits, char *err, size_t errlen) {
    int done = 0;
    while (done < n && !interrupted) {
        const int len = n - done < t->run.max_batch ? n - done : t->run.max_batch;
        if (transformer_forward(t, ids + done, len, pos + done, pos + n, 0, logits, err, errlen)) return -1;
        done += len;
    }
    return done;
}

// One decode step, the same for generation and chat: room for one more token (a context shift
// when the context is full), then the token at *pos, which moves on by one. Returns 0; 1 when no
// shift can make the room; -1 after an error (in err).
static int decode_step(Transformer *t, int keep, int token, int *pos, int *shifts, float **logits, char *err,
                       size_t errlen) {
    const int room = make_room(t, keep, pos, 1, shifts, err, errlen);
    if (room) return room;
    if (transformer_forward(t, &token, 1, *pos, *pos + 1, 0, logits, err, errlen)) return -1;
    (*pos)++;
    return 0;
}

// The positions a context shift keeps: --keep, or 4 (attention's sinks: BOS and three more), fewer
// in a context of 5 or less: ctx - 2, so that a shift of a full context drops at least one (it
// drops half of what is not kept); a context of 1 cannot shift.
static int keep_of(const Options *o, int ctx) { return o->keep >= 0 ? o->keep : ctx - 2 < 0 ? 0 : ctx - 2 < 4 ? ctx - 2 : 4; }

// The run's sampler: the flags, and a seed from the kernel when -s is not given. The seed goes on
// stderr so that a run can be repeated exactly with -s.
static Sampler *make_sampler(const Options *o, int vocab_size, int ctx) {
    unsigned long long seed = (unsigned long long)o->seed;
    if (o->seed < 0) {
        unsigned long long r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) // no kernel source: time and pid
            r = (unsigned long long)time(NULL) ^ (unsigned long long)getpid() << 32;
        seed = r % 9000000000000000000ULL;
    }
    SamplerParams p = {.temp = o->temp, .top_p = o->top_p, .min_p = o->min_p, .repeat_penalty = o->repeat_penalty,
                       .top_k = o->top_k, .repeat_last_n = o->repeat_last_n < 0 ? ctx : o->repeat_last_n};
    fprintf(stderr, "sampling: seed %llu%s | ", seed, o->seed < 0 ? " (random; -s repeats it)" : "");
    if (o->repeat_penalty != 1 && p.repeat_last_n)
        fprintf(stderr, "repeat-penalty %g over the last %d, ", o->repeat_penalty, p.repeat_last_n);
    if (o->temp == 0)
        fprintf(stderr, "greedy (-t 0)\n");
    else
        fprintf(stderr, "top-k %d, top-p %g, min-p %g, temp %g\n", o->top_k, o->top_p, o->min_p, o->temp);
    Sampler *s = sampler_new(&p, vocab_size, seed);
    if (!s) fprintf(stderr, "error: out of memory\n");
    return s;
}

// --verbose-prompt: each id and its text, as llama.cpp prints them. The text is what the output
// shows, so a piece can be empty without being special: SentencePiece's leading-space piece (U+2581
// alone) where a text starts.
static void show_prompt(Tokenizer *tok, const int *ids, int n) {
    fprintf(stderr, "prompt: %d token%s\n", n, n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        const char *piece = tokenizer_decode_piece(tok, i ? ids[i - 1] : -1, ids[i], &len);
        const char *note = "";
        if (tokenizer_is_special(tok, ids[i]))
            note = " (special)";
        else if (!len)
            note = " (a leading space, not shown where a text starts)";
        fprintf(stderr, "%8d -> '%.*s'%s\n", ids[i], (int)len, piece ? piece : "", note);
    }
}

// Logits that are not finite (NaN or infinite weights, or activations that overflowed) end the run
// with an error: sampled, they give whitespace, and a perplexity of NaN. A look at the row of each
// sampled token, or at the loss of each scored one, is cheap beside the forward that made it; the
// place where the numbers went wrong is found only then, by running the tokens again with the
// residual stream checked after every layer (transformer_trace_nonfinite).

// Are a token's logits (NULL: not looked at) and the residual stream they came from (row `row` of
// the last forward's block; a forward that asked for the last logits only leaves that token's in
// row 0, model.h) finite? The stream too: a quantized product (q8_0, q4_0) rounds its
// input to 8 bits, which turns a NaN on its way to the logits into a finite number, while in the
// stream a NaN stays. 0 when they are; else 1, with the first value that is not in *x.
static int nonfinite_output(const Transformer *t, const float *logits, int row, double *x) {
    const float *h = t->state.x + (size_t)row * t->config.dim; // (D) the stream before the final norm
    for (int i = 0; i < t->config.dim; i++)
        if (!isfinite(h[i])) return *x = h[i], 1;
    for (int i = 0; logits && i < t->config.vocab_size; i++)
        if (!isfinite(logits[i])) return *x = logits[i], 1;
    return 0;
}

// Position `at`'s logits (of perplexity window `window`; 0: not a perplexity run) were not finite
// (x, one of them, or the loss made of them). tokens[0..n)
// are what ran at positions pos .. pos+n-1 of a text of text_len tokens (a prompt, a turn, a
// perplexity block or one decoded token): they run again, block by block from the first, until one
// shows where. Reports it; returns 1, the exit status.
static int nonfinite_error(Transformer *t, const Options *o, const int *tokens, int n, int pos, int text_len,
                           int all_logits, int at, int window, double x) {
    NonFinite where = {-2, 0, 0};
    char err[300], place[160];
    int b = 0;
    for (; b < n; b += t->run.max_batch) {
        const int len = n - b < t->run.max_batch ? n - b : t->run.max_batch;
        // the rows up to position `at`: the later ones of its block cannot have made it non-finite
        if (transformer_trace_nonfinite(t, tokens + b, len, pos + b, text_len, all_logits, at - (pos + b) + 1, &where,
                                        err, sizeof err)) {
            fprintf(stderr, "\nerror: %s\n", err);
            return 1;
        }
        if (where.layer != -2) break;
    }
    const int L = t->config.n_layers, origin = pos + b + where.row;
    if (where.layer == -2)
        snprintf(place, sizeof place, "; run again with a check after every layer, no layer gave one");
    else {
        char layer[60], at_origin[40] = " there";
        if (where.layer == -1)
            snprintf(layer, sizeof layer, "the token embedding (token id %d)", tokens[b + where.row]);
        else if (where.layer == L)
            snprintf(layer, sizeof layer, "the final norm and the classifier");
        else
            snprintf(layer, sizeof layer, "layer %d's %s", where.layer, where.mlp ? "MLP" : "attention");
        if (origin != at) snprintf(at_origin, sizeof at_origin, " at position %d", origin);
        snprintf(place, sizeof place, ": the numbers first went non-finite%s, in %s", at_origin, layer);
    }
    char in_window[40] = "";
    if (window) snprintf(in_window, sizeof in_window, " of window %d", window);
    fprintf(stderr, "\nerror: the logits at position %d%s are not finite (%s)%s %s\n", at, in_window,
            isnan(x) ? "NaN" : "infinity", place,
            o->check_tensors ? "(every weight is finite, --check-tensors said: the numbers overflowed on the way)"
                             : "(hint: --check-tensors looks for NaN and infinity in the weights at load)");
    return 1;
}

// Before a token is sampled, its logits checked (nonfinite_output): before any token is decoded,
// those of the last of ids[0..n), which ran at positions pos - n .. pos - 1; after, those of prev,
// decoded at pos - 1. Returns 1 (reported: nonfinite_error) when a number is not finite, else 0.
static int sampled_nonfinite(Transformer *t, const Options *o, const float *logits, const int *ids, int n, int prev,
                             int decoded, int pos) {
    double x;
    if (!nonfinite_output(t, logits, 0, &x)) return 0;
    return decoded ? nonfinite_error(t, o, &prev, 1, pos - 1, pos, 0, pos - 1, 0, x)
                   : nonfinite_error(t, o, ids, n, pos - n, pos, 0, pos - 1, 0, x);
}

// --prompt-cache: what the cached numbers depend on besides the tokens, as the cache file's settings
// text (promptcache.h): the model file, known by its place on disk, size and time of change (a new
// export is a new file), and every run setting a key or value depends on. The context is not among
// them (only through the RoPE parameters it sets: a cache made at --ctx 4096 serves --ctx 8192 when
// they are the same), nor are the batch size and the thread count: the numbers depend on neither.
static int cache_settings(const Transformer *t, const Options *o, char *out, size_t len) {
    struct stat st;
    if (stat(o->model, &st)) return -1;
    const RunConfig *r = &t->run;
    const RopeParams *p = &r->rope;
    const int n = snprintf(out, len,
                           "model file: device %llu inode %llu, %lld bytes, changed %lld.%09ld; keys %s, values "
                           "%s; f16-as-bf16 %d; attn-logn %d; swa-full %d; rope %s: dims %d of %d, L %d, base %.17g, "
                           "factor %.17g, alpha %.17g, attn factor %.17g, beta %.17g %.17g, frequency factors %.17g "
                           "%.17g, window %d, group %d, local window %d, chunk %d",
                           (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size,
                           (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                           dtype_name(r->cache_k), dtype_name(r->cache_v), o->f16_as_bf16, r->attn_logn, r->swa_full,
                           rope_scaling_name(p->mode), p->rot_dims, p->head_dim, p->orig_ctx, p->base, p->factor,
                           p->alpha, p->attn_factor, p->beta_fast, p->beta_slow, p->low_freq_factor,
                           p->high_freq_factor, p->window, p->group, p->local_window, p->chunk);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

// --prompt-cache FILE before the prompt runs: whether it can serve this run, and what of it does.
// Returns -1 after an error (reported), else 0 with *reused positions of the KV cache filled from it
// and *write set when this run's prompt is to be written there afterwards (promptcache.h's rule).
static int open_prompt_cache(Transformer *t, const Options *o, const int *ids, int n, char *settings, size_t len,
                             int *reused, int *write) {
    const char *path = o->prompt_cache;
    *reused = 0, *write = 0;
    if (rope_is_dynamic(&t->rope)) {
        fprintf(stderr, "error: --prompt-cache: with --rope-scaling %s a key depends on the whole prompt's length, so "
                        "no beginning of it can be reused (hint: another --rope-scaling, or no --prompt-cache)\n",
                rope_scaling_name(t->run.rope.mode));
        return -1;
    }
    if (t->state.kv.ring) {
        fprintf(stderr, "error: --prompt-cache: this model's sliding layers keep only their last positions, so a "
                        "beginning cannot be kept (hint: add --swa-full)\n");
        return -1;
    }
    if (cache_settings(t, o, settings, len)) {
        fprintf(stderr, "error: --prompt-cache: cannot describe the model file %s: %s\n", o->model, strerror(errno));
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno != ENOENT) {
            fprintf(stderr, "error: --prompt-cache %s: %s (hint: check the path)\n", path, strerror(errno));
            return -1;
        }
        *write = 1;
        return 0;
    }
    char err[600];
    int cached;
    const PcacheStatus s = pcache_read(f, path, settings, &t->state.kv, ids, n, reused, &cached, err, sizeof err);
    fclose(f);
    if (s == PCACHE_BAD) {
        fprintf(stderr, "error: --prompt-cache %s\n", err);
        return -1;
    }
    if (s == PCACHE_OTHER) fprintf(stderr, "note: --prompt-cache %s\n", err);
    if (s == PCACHE_USED) {
        *write = *reused == cached && n > cached;
        fprintf(stderr, "prompt cache: %d of the prompt's %d tokens from %s (it holds %d)\n", *reused, n, path, cached);
    }
    return 0;
}

static int generate(Transformer *t, Tokenizer *tok, const Options *o) {
    const Config *c = &t->config;
    size_t prompt_len = o->prompt ? strlen(o->prompt) : 0;
    char *from_file = NULL;
    if (o->prompt_file && !(from_file = read_file(o->prompt_file, &prompt_len))) {
        fprintf(stderr, "error: %s: cannot read the prompt file: %s (hint: check the path given to -f)\n",
                o->prompt_file, strerror(errno));
        return 1;
    }
    if (from_file && prompt_len == 0)
        fprintf(stderr, "warning: -f %s is empty: the text starts after BOS, as with no prompt\n", o->prompt_file);
    int n_prompt;
    int *ids = tokenizer_encode(tok, from_file ? from_file : o->prompt ? o->prompt : "", prompt_len, 1, &n_prompt);
    free(from_file);
    if (!ids) {
        fprintf(stderr, "error: the tokenizer could not encode the prompt\n");
        return 1;
    }
    if (o->verbose_prompt) show_prompt(tok, ids, n_prompt);
    if (n_prompt == 0) { // nothing to start from: an empty prompt and no BOS token
        fprintf(stderr, "error: the prompt is empty and the tokenizer has no BOS token to start from (hint: give a "
                        "prompt with -i)\n");
        free(ids);
        return 1;
    }
    if (n_prompt > t->run.n_ctx) {
        fprintf(stderr,
                "error: the prompt is %d tokens, longer than the context of %d (hint: a larger --ctx "
                "or a shorter prompt)\n",
                n_prompt, t->run.n_ctx);
        free(ids);
        return 1;
    }
    char settings[PCACHE_SETTINGS_MAX + 1];
    int reused = 0, write_cache = 0;
    if (o->prompt_cache && open_prompt_cache(t, o, ids, n_prompt, settings, sizeof settings, &reused, &write_cache)) {
        free(ids);
        return 1;
    }
    Sampler *sampler = make_sampler(o, tokenizer_vocab_size(tok), t->run.n_ctx);
    if (!sampler) {
        free(ids);
        return 1;
    }
    Stop stop = stop_new(o);
    const int keep = keep_of(o, t->run.n_ctx);

    // Prompt: echo it, then run it through the network.
    for (int i = 0; i < n_prompt; i++) {
        emit(tok, i ? ids[i - 1] : -1, ids[i], NULL);
        sampler_accept(sampler, ids[i]);
    }
    double t0 = now();
    float *logits = NULL;
    char err[300];
    const int prompt_done = prefill(t, ids + reused, n_prompt - reused, reused, &logits, err, sizeof err);
    int status = prompt_done < 0;
    const double t1 = now(); // the prompt's time: its forward passes; the cache file's writing is neither's
    if (!status && write_cache && prompt_done == n_prompt - reused)
        status = pcache_write(o->prompt_cache, settings, &t->state.kv, ids, n_prompt, err, sizeof err);
    const double t_gen = now();

    // Decode: sample, print, feed back, until n_predict tokens (-1: no limit) or an end of text.
    // When the context is full, a context shift (README, "Past the end of the context") keeps the
    // first `keep` positions, drops the oldest half of the rest and moves the others down.
    int pos = n_prompt, prev = ids[n_prompt - 1], generated = 0, steps = 0, shifts = 0;
    const char *why = interrupted ? "interrupted (Ctrl-C)" : NULL;
    int nonfinite = 0; // reported by nonfinite_error
    char hit[128];
    while (!status && !why && (o->n_predict < 0 || generated < o->n_predict)) {
        if (sampled_nonfinite(t, o, logits, ids, n_prompt, prev, steps, pos)) {
            nonfinite = status = 1;
            break;
        }
        int next = sampler_sample(sampler, logits);
        if (is_end(c, next)) {
            why = "end of text";
            break;
        }
        emit(tok, prev, next, &stop);
        sampler_accept(sampler, next);
        generated++;
        prev = next;
        if (output_failed) break;
        if (stop.hit) {
            snprintf(hit, sizeof hit, "reverse prompt '%.100s'", stop.hit);
            why = hit;
            break;
        }
        if (generated == o->n_predict) break;
        if (interrupted) {
            why = "interrupted (Ctrl-C)";
            break;
        }
        const int step = decode_step(t, keep, next, &pos, &shifts, &logits, err, sizeof err);
        if (step > 0) {
            why = "context full (hint: a larger --ctx: a context shift needs 2 positions)"; // only at --ctx 1
            break;
        }
        status = step < 0;
        steps++;
    }
    double t2 = now();
    sampler_free(sampler);
    free(stop.tail);
    free(ids);
    if (status) {
        if (!nonfinite) fprintf(stderr, "\nerror: %s\n", err);
        return 1;
    }
    out_write("\n", 1);
    if (output_status()) return 1;
    // The first token came from the prompt's logits: generation's speed counts forward passes.
    char shifted[80] = "", cache[160] = "";
    if (o->prompt_cache)
        snprintf(cache, sizeof cache, " (and %d from the prompt cache%s)", reused,
                 write_cache ? ", then written with the whole prompt" : "");
    if (shifts)
        snprintf(shifted, sizeof shifted, " | context shifts: %d (kept %d, dropped %d each)", shifts, keep,
                 (t->run.n_ctx - keep) / 2);
    fprintf(stderr,
            "\nprompt: %d token%s in %.3f s (%.1f tok/s)%s | generation: %d token%s, %d decode step%s in %.3f s "
            "(%.1f tok/s) | threads %d%s%s%s\n",
            prompt_done, plural(prompt_done), t1 - t0, prompt_done / (t1 - t0), cache, generated, plural(generated), steps,
            plural(steps), t2 - t_gen, steps ? steps / (t2 - t_gen) : 0.0, t->state.n_threads, shifted,
            why ? " | stopped: " : "", why ? why : "");
    return interrupted ? 130 : 0;
}

// ---------------------------------------------------------------------------------------------
// Chat: llama2.c's interface (-m chat, -y system prompt), the user's turns read from stdin one line
// each, the assistant's replies streamed to stdout. The KV cache is kept across turns: each turn
// feeds only its new tokens (the template's text around the user's line), after the reply and the
// end token that closed it. chat.c knows the templates.

#define KEEP_FILLS "the context is full and --keep leaves nothing to drop (hint: a smaller --keep or a larger --ctx)"

// The template: --chat-template, else the one tokenizer_config.json beside the tokenizer holds
// (the text tokenizer_load read). -1 after an error (reported).
static int chat_template_of(const Options *o, const Tokenizer *tok) {
    if (o->chat_template) return chat_template_from_name(o->chat_template); // checked by parse_args
    const char *path;
    size_t len;
    int error;
    const char *text = tokenizer_config_text(tok, &path, &len, &error);
    if (!text) {
        fprintf(stderr, "error: %s: cannot read it for the chat template: %s (hint: --chat-template %s)\n", path,
                strerror(error), CHAT_TEMPLATE_NAMES);
        return -1;
    }
    return chat_template_detect(text, len, path);
}

static int chat(Transformer *t, Tokenizer *tok, const Options *o) {
    const Config *c = &t->config;
    const int k = chat_template_of(o, tok);
    if (k < 0) return 1;
    if (k == CHAT_MISTRAL && o->system) {
        fprintf(stderr, "error: -y: the mistral template has no system prompt (hint: put it in the first turn)\n");
        return 2;
    }
    const int tty = isatty(STDIN_FILENO) && isatty(STDERR_FILENO); // a person types the turns
    fprintf(stderr, "chat: template %s%s%s\n", CHAT_NAMES[k], o->chat_template ? " (--chat-template)" : "",
            tty ? "; one line a turn, Ctrl-D ends the chat" : "");
    Sampler *sampler = make_sampler(o, tokenizer_vocab_size(tok), t->run.n_ctx);
    const int keep = keep_of(o, t->run.n_ctx);
    char *line = NULL, err[300];
    size_t line_cap = 0;
    int *ids = NULL, cap = 0, pos = 0, shifts = 0, status = sampler ? 0 : 1, turns = 0, refused = 0;
    long prompt_tokens = 0, reply_tokens = 0;
    double prompt_secs = 0, reply_secs = 0;
    for (int turn = 0; !status && !interrupted; turn++) {
        const char *user = turn == 0 && o->prompt ? o->prompt : NULL;
        if (!user) {
            if (tty) fprintf(stderr, "> ");
            ssize_t got = getline(&line, &line_cap, stdin);
            if (got < 0) break; // end of input (or Ctrl-C): the conversation is over
            if (got && line[got - 1] == '\n') line[got - 1] = 0;
            user = line;
        }
        const int first = pos == 0; // nothing in the cache yet: the turn opens the conversation
        char *text = chat_render((ChatTemplate)k, first, o->system, user);
        int n = 0;
        if (!text || chat_encode(tok, c->bos_id, c->eos_id, chat_sentencepiece((ChatTemplate)k), text, &ids, &n, &cap)) {
            free(text);
            fprintf(stderr, "error: could not encode the turn\n");
            status = 1;
            break;
        }
        free(text);
        if (keep + n > t->run.n_ctx) { // no context shift can make room for it: refuse it, go on
            fprintf(stderr,
                    "chat: this turn is %d tokens, more than the context of %d holds after the first %d kept; it "
                    "was not sent (hint: a shorter line, or a larger --ctx)\n",
                    n, t->run.n_ctx, keep);
            refused++;
            continue;
        }
        // A full context shifts (make_room), as in generate: the conversation goes on, its oldest
        // turns dropped (all but the first `keep` positions).
        if (make_room(t, keep, &pos, n, &shifts, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            status = 1;
            break;
        }
        for (int i = 0; i < n; i++)
            sampler_accept(sampler, ids[i]);
        double t0 = now();
        float *logits = NULL;
        const int fed = prefill(t, ids, n, pos, &logits, err, sizeof err);
        double t1 = now();
        status = fed < 0;
        pos += fed > 0 ? fed : 0, turns++, prompt_tokens += n, prompt_secs += t1 - t0;
        Stop stop = stop_new(o);
        int prev = ids[n - 1], generated = 0, ended = 0;
        while (!status && !interrupted && !stop.hit && (o->n_predict < 0 || generated < o->n_predict)) { // the reply
            if (sampled_nonfinite(t, o, logits, ids, n, prev, generated, pos)) {
                status = 1;
                err[0] = 0; // reported
                break;
            }
            int next = sampler_sample(sampler, logits);
            ended = is_end(c, next);
            if (!ended) emit(tok, prev, next, &stop);
            sampler_accept(sampler, next);
            const int step = decode_step(t, keep, next, &pos, &shifts, &logits, err, sizeof err);
            if (step > 0) snprintf(err, sizeof err, "%s", KEEP_FILLS);
            status = step != 0;
            generated++, prev = next;
            if (ended || output_failed) break; // an end token is in the cache, as the template has it after the reply
        }
        free(stop.tail);
        reply_tokens += generated, reply_secs += now() - t1;
        out_write("\n", 1);
        if (output_failed) break;
        // Cut by -n or -r: close the turn as the template would. GLM-4's marker after a reply is also
        // the next turn's opening (chat.c), so a reply ended by another end token gets it too.
        if (!status && !interrupted && (!ended || chat_close_opens_turn((ChatTemplate)k))) {
            n = 0;
            int bad = chat_encode(tok, c->bos_id, c->eos_id, chat_sentencepiece((ChatTemplate)k),
                                  chat_close((ChatTemplate)k), &ids, &n, &cap);
            if (!bad && ended && n == 1 && ids[0] == prev) n = 0; // the reply ended with the marker itself
            const int room = bad || !n ? 0 : make_room(t, keep, &pos, n, &shifts, err, sizeof err);
            if (bad) snprintf(err, sizeof err, "could not encode the end of the turn");
            if (room > 0) snprintf(err, sizeof err, "%s", KEEP_FILLS);
            const int fed = bad || room || !n ? 0 : prefill(t, ids, n, pos, &logits, err, sizeof err);
            status = bad || room != 0 || fed < 0;
            pos += fed > 0 ? fed : 0;
        }
        if (status && err[0]) fprintf(stderr, "error: %s\n", err);
    }
    char shifted[120] = "", skipped[60] = "";
    if (shifts)
        snprintf(shifted, sizeof shifted, " | context shifts: %d (kept %d, dropped the oldest half of the rest)",
                 shifts, keep);
    if (refused) snprintf(skipped, sizeof skipped, " | %d turn%s too long, not sent", refused, plural(refused));
    fprintf(stderr,
            "\nchat: %d turn%s%s | prompt: %ld token%s in %.3f s (%.1f tok/s) | replies: %ld token%s in %.3f s "
            "(%.1f tok/s) | threads %d%s%s\n",
            turns, plural(turns), skipped, prompt_tokens, plural(prompt_tokens), prompt_secs,
            prompt_secs > 0 ? prompt_tokens / prompt_secs : 0.0, reply_tokens, plural(reply_tokens), reply_secs,
            reply_secs > 0 ? reply_tokens / reply_secs : 0.0, t->state.n_threads, shifted,
            interrupted ? " | stopped: interrupted (Ctrl-C)" : "");
    free(line);
    free(ids);
    sampler_free(sampler);
    if (output_status()) return 1;
    return status ? status : interrupted ? 130 : 0;
}

// ---------------------------------------------------------------------------------------------
// Perplexity: how surprised the model is by real text, position by position.
//
// The text (BOS first) is cut into consecutive windows of ctx tokens; each window starts at
// position 0 with an empty cache and, when the tokenizer adds one, with BOS in place of its first
// token (as llama.cpp's perplexity does: a window is scored as the start of a text), and each of
// its tokens t = 0 .. ctx-2 predicts token t+1. The
// negative log-likelihood -log p(token t+1 | tokens 0..t) is summed per bucket of the position t:
// [0, L), [L, 2L), [2L, 4L), ... with L the trained context, so the table shows where a scaling
// mode stops extrapolating. perplexity = exp(mean NLL).

#define MAX_BUCKETS 32

static int bucket_of(int pos, int L) {
    int b = 0;
    for (long edge = L; pos >= edge && b < MAX_BUCKETS - 1; edge *= 2)
        b++;
    return b;
}

static int perplexity(Transformer *t, Tokenizer *tok, const Options *o) {
    const int V = t->config.vocab_size, N = t->run.n_ctx, L = n_ctx_train(&t->config);
    size_t len;
    char *text = read_file(o->ppl, &len);
    if (!text) {
        fprintf(stderr, "error: %s: cannot read: %s\n", o->ppl, strerror(errno));
        return 1;
    }
    if (len == 0) {
        fprintf(stderr, "error: %s is empty: there is no text to score (hint: give --ppl a file with text in it)\n",
                o->ppl);
        free(text);
        return 1;
    }
    if (N < 2) { // the first token of a window is only read: one more is needed to predict anything
        fprintf(stderr,
                "error: --ppl scores each token of a window from those before it, and a window of --ctx %d "
                "has none to score (hint: --ctx 2 or more)\n",
                N);
        free(text);
        return 1;
    }
    int n_tokens;
    int *ids = tokenizer_encode(tok, text, len, 1, &n_tokens);
    free(text);
    if (!ids) {
        fprintf(stderr, "error: %s: the tokenizer could not encode the text\n", o->ppl);
        return 1;
    }
    int windows = n_tokens / N;
    if (o->ppl_windows && o->ppl_windows < windows) windows = o->ppl_windows;
    if (windows < 1) { // a shorter window that fits, if one can score a token
        char fits[32] = "";
        if (n_tokens >= 2) snprintf(fits, sizeof fits, "--ctx %d, or ", n_tokens);
        fprintf(stderr, "error: %s is %d token%s, less than one window of --ctx %d (hint: %sa longer text)\n", o->ppl,
                n_tokens, plural(n_tokens), N, fits);
        free(ids);
        return 1;
    }
    fprintf(stderr, "perplexity: %d token%s, %d window%s of %d\n", n_tokens, plural(n_tokens), windows, plural(windows),
            N);

    int *win = malloc((size_t)N * sizeof *win);
    double *win_nll = calloc((size_t)windows, sizeof *win_nll); // each window's sum, for the spread over windows
    if (!win || !win_nll) {
        fprintf(stderr, "error: out of memory\n");
        free(win);
        free(win_nll);
        free(ids);
        return 1;
    }
    double nll[MAX_BUCKETS] = {0};
    long count[MAX_BUCKETS] = {0};
    const int tty = isatty(fileno(stderr)); // a progress bar on a terminal, a line per window otherwise
    double t0 = now();
    int w = 0;
    for (; w < windows && !interrupted; w++) {
        memcpy(win, ids + (size_t)w * N, (size_t)N * sizeof *win);
        if (tokenizer_bos_id(tok) >= 0) win[0] = tokenizer_bos_id(tok);
        for (int b = 0; b < N; b += t->run.max_batch) { // one sequence of N tokens, as one HF forward pass
            int n = N - b < t->run.max_batch ? N - b : t->run.max_batch;
            float *logits;
            char err[300];
            if (transformer_forward(t, win + b, n, b, N, 1, &logits, err, sizeof err)) {
                fprintf(stderr, "\nerror: %s\n", err);
                free(win);
                free(win_nll);
                free(ids);
                return 1;
            }
            for (int i = 0; i < n && b + i < N - 1; i++) {
                const float *row = logits + (size_t)i * V;
                float max = row[0];
                for (int v = 1; v < V; v++)
                    max = row[v] > max ? row[v] : max;
                double sum = 0;
                for (int v = 0; v < V; v++)
                    sum += exp((double)row[v] - max);
                double loss = max + log(sum) - row[win[b + i + 1]]; // -log softmax(row)[next token]
                if (!isfinite(loss) || nonfinite_output(t, NULL, i, &loss)) { // NaN in the row or the stream
                    nonfinite_error(t, o, win + b, n, b, N, 1, b + i, w + 1, loss);
                    free(win);
                    free(win_nll);
                    free(ids);
                    return 1;
                }
                int k = bucket_of(b + i, L);
                win_nll[w] += loss;
                nll[k] += loss;
                count[k]++;
            }
            if (tty) fprintf(stderr, "\r[%d/%d] %3d%%", w + 1, windows, (int)(100.0 * (b + n) / N));
        }
        if (!tty) fprintf(stderr, "window %d/%d\n", w + 1, windows);
    }
    double secs = now() - t0;
    free(win);
    fprintf(stderr, "%s%d window%s in %.2f s (%.1f tok/s) | threads %d%s\n", tty ? "\r" : "", w, plural(w), secs,
            w * (double)N / secs, t->state.n_threads, interrupted ? " | stopped: interrupted (Ctrl-C)" : "");
    if (interrupted) {
        free(win_nll);
        free(ids);
        return 130;
    }

    double total = 0;
    long total_count = 0;
    for (int k = 0; k < MAX_BUCKETS; k++) {
        total += nll[k];
        total_count += count[k];
    }
    printf("perplexity: %.6f\n", exp(total / total_count));
    printf("%-20s %10s %10s %12s\n", "positions", "tokens", "mean NLL", "perplexity");
    errno = 0;
    for (int k = 0; k < MAX_BUCKETS; k++) {
        if (!count[k]) continue;
        long lo = k ? (long)L << (k - 1) : 0, hi = (long)L << k;
        char range[48];
        snprintf(range, sizeof range, "[%ld, %ld)", lo, hi);
        printf("%-20s %10ld %10.6f %12.6f\n", range, count[k], nll[k] / count[k], exp(nll[k] / count[k]));
    }
    // Each window alone: how far apart they are says how much of a difference between two runs on the
    // same text is the text (scripts/ppl_results.py pairs the windows of two modes).
    for (int v = 0; v < w; v++)
        printf("window %-13d %10d %10.6f %12.6f\n", v + 1, N - 1, win_nll[v] / (N - 1), exp(win_nll[v] / (N - 1)));
    free(win_nll);
    free(ids);
    if (fflush(stdout) || ferror(stdout)) output_failed = errno ? errno : EIO;
    return output_status();
}

// ---------------------------------------------------------------------------------------------
// main

// How long an OpenMP thread with nothing to do spins before it sleeps. libgomp's default is 300,000
// spins (GOMP_SPINCOUNT); while another process holds one of the cores, the threads then spin
// against each other at every region's end and a decode can run fifty times slower than on one
// thread. 1000 spins cost nothing measurable on an idle machine and avoid the collapse on a busy
// one, where passive waiting would be slower idle (README, "Threads", has the measurements). With
// more threads than the cores the process may use, some thread is always waiting for a core, and
// a waiting thread that spins holds one: there the threads wait passively (OMP_WAIT_POLICY).
// libgomp reads the variables once, as it loads, before main: so when the user has set neither
// OMP_WAIT_POLICY nor GOMP_SPINCOUNT, main sets one and starts the program again. If that exec
// fails (no /proc), the run goes on with libgomp's default.
#define DEFAULT_SPINCOUNT "1000"

// The cores this process may run on (its affinity mask, which taskset and cgroup cpusets narrow);
// the online processors when the mask cannot be read.
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void default_spin(char **argv, int oversubscribed) {
#ifdef _OPENMP
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const char *name = oversubscribed ? "OMP_WAIT_POLICY" : "GOMP_SPINCOUNT";
    if (setenv(name, oversubscribed ? "passive" : DEFAULT_SPINCOUNT, 1) == 0) execv("/proc/self/exe", argv);
    unsetenv(name); // the exec failed: say nothing we did not do
#else
    (void)argv, (void)oversubscribed;
#endif
}

// What the threads do while they wait, for the banner.
static const char *wait_policy(char *buf, size_t len) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spins = getenv("GOMP_SPINCOUNT");
    if (policy)
        snprintf(buf, len, "OMP_WAIT_POLICY=%.20s%s", policy,
                 !spins && !strcmp(policy, "passive") && max_threads() > usable_cores() ? ", the default past the cores"
                                                                                        : "");
    else if (spins)
        snprintf(buf, len, "GOMP_SPINCOUNT=%.20s%s", spins, strcmp(spins, DEFAULT_SPINCOUNT) ? "" : ", the default");
    else
        snprintf(buf, len, "libgomp's default wait");
    return buf;
}

// More threads than cores: the run goes ahead (the user asked for them), slower than at the core
// count, and says so. The count comes from --threads, else from OMP_NUM_THREADS.
static void warn_threads(const Options *o) {
    const int threads = max_threads(), cores = usable_cores();
    if (threads <= cores) return;
    char from[60];
    if (o->threads)
        snprintf(from, sizeof from, "--threads %d", o->threads);
    else
        snprintf(from, sizeof from, "OMP_NUM_THREADS=%.30s", getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "");
    fprintf(stderr,
            "warning: %s is more than the %d core%s this process may use (sched_getaffinity): the threads take "
            "turns on them, which is slower than one thread a core (hint: --threads %d)\n",
            from, cores, plural(cores), cores);
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

// Layers l0 .. l1-1 whose kind has `bit` set (want 1) or clear (want 0), as "0-2, 4-6, 8".
static void layer_ranges(const Config *c, int bit, int want, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int l = 0; l < c->n_layers && n < len; l++) {
        const int has = !!(c->layer_kind[l] & bit);
        if (has != want || (l > 0 && !!(c->layer_kind[l - 1] & bit) == want)) continue; // not a range's start
        int end = l;
        while (end + 1 < c->n_layers && !!(c->layer_kind[end + 1] & bit) == want)
            end++;
        n += (size_t)snprintf(buf + n, len - n, n ? ", %d" : "%d", l);
        if (end > l && n < len) n += (size_t)snprintf(buf + n, len - n, "-%d", end);
    }
}

// The banner's line on what a layer does besides Llama's (version 4's hparams), when it does.
static void banner_recipe(const Config *c) {
    char buf[400];
    size_t n = 0;
#define ADD(...) n += (size_t)snprintf(buf + n, n < sizeof buf ? sizeof buf - n : 0, __VA_ARGS__)
    static const char *const WHERE[4] = {"no norm", "a norm before", "a norm after", "norms before and after"};
    if (c->norms != NORMS_LLAMA)
        ADD(", %s attention, %s the MLP", WHERE[!!(c->norms & NORM_ATTN) + 2 * !!(c->norms & NORM_ATTN_POST)],
            WHERE[!!(c->norms & NORM_FFN) + 2 * !!(c->norms & NORM_FFN_POST)]);
    if (c->act == ACT_GELU_TANH) ADD(", GeGLU (tanh GELU)");
    if (c->qk_norm == QK_NORM_ALL) ADD(", q/k RMSNorm over the whole projection");
    if (c->f_embedding_scale != 1) ADD(", embeddings x %g", c->f_embedding_scale);
    if (c->f_attention_scale > 0) ADD(", scores x %g", c->f_attention_scale);
    if (c->f_attn_logit_softcapping > 0) ADD(", scores capped at %g", c->f_attn_logit_softcapping);
    if (c->f_residual_scale != 1) ADD(", sublayer outputs x %g", c->f_residual_scale);
    if (c->f_logit_scale != 1) ADD(", logits / %g", c->f_logit_scale);
    if (c->f_final_logit_softcapping > 0) ADD(", logits capped at %g", c->f_final_logit_softcapping);
    if (c->f_attn_temp_scale > 0)
        ADD(", queries x 1 + %g ln(1 + floor(m / %d))", c->f_attn_temp_scale, c->n_attn_temp_floor_scale);
#undef ADD
    if (n) fprintf(stderr, "layer:%s\n", buf + 1);
}

// The banner's line on layers that differ: which ones rotate (NoPE) and which slide.
static void banner_layers(const Config *c) {
    banner_recipe(c);
    if (!c->layer_kind) return;
    int nope = 0, sliding = 0, local = 0;
    for (int l = 0; l < c->n_layers; l++)
        nope += !!(c->layer_kind[l] & LAYER_NO_ROPE), sliding += !!(c->layer_kind[l] & LAYER_SLIDING),
            local += !!(c->layer_kind[l] & LAYER_ROPE_SWA);
    if (!nope && !sliding) return;
    char rot[200], no[200], slide[200];
    layer_ranges(c, LAYER_NO_ROPE, 0, rot, sizeof rot);
    layer_ranges(c, LAYER_NO_ROPE, 1, no, sizeof no);
    layer_ranges(c, LAYER_SLIDING, 1, slide, sizeof slide);
    fprintf(stderr, "layers:");
    if (nope) fprintf(stderr, " RoPE in %s, none (NoPE) in %s%s", nope < c->n_layers ? rot : "none", no, sliding ? ";" : "");
    if (local) {
        char swa[200];
        layer_ranges(c, LAYER_ROPE_SWA, 1, swa, sizeof swa);
        fprintf(stderr, " the local RoPE (base %g, unscaled) in %s;", c->rope_freq_base_train_swa, swa);
    }
    if (sliding == c->n_layers)
        fprintf(stderr, " every layer sees the last %d positions (sliding window)", c->sliding_window);
    else if (sliding)
        fprintf(stderr, " layers %s see the last %d positions (sliding window), the others all", slide,
                c->sliding_window);
    fprintf(stderr, "\n");
}

// The banner's first two lines, before the cache and activations are allocated: the model, and what
// the run will allocate (the KV cache and the activations; the weights are mmapped, some copied at
// load) against what is available.
static void banner_memory(const Transformer *t, const RunConfig *run, const char *path) {
    const Config *c = &t->config;
    char waiting[96];
    char version[32] = "llama2.c legacy";
    if (c->version) snprintf(version, sizeof version, c->gguf ? "GGUF v%d" : "lrun v%d", c->gguf ? c->gguf : c->version);
    fprintf(stderr,
            "model: %s (%s, %s, %s%s): dim %d, hidden %d, %d layers, %d heads / %d kv heads, head_dim %d, "
            "vocab %d%s%s\n",
            path, version, family_name(c->family), dtype_name(c->dtype), t->gguf_types, c->dim, c->hidden_dim, c->n_layers,
            c->n_heads, c->n_kv_heads, c->head_dim, c->vocab_size, c->qkv_bias ? ", q/k/v biases" : "",
            c->qk_norm == QK_NORM_HEAD ? ", q/k RMSNorm per head" : "");
    banner_layers(c);
    if (c->gguf) fprintf(stderr, "gguf: %s\n", t->gguf_keys);
    int overflow;
    int ring;
    const size_t kv = transformer_kv_bytes(c, run, &ring), all = transformer_state_bytes(c, run, max_threads(), &overflow);
    char rings[80] = ""; // sliding layers that keep a ring of positions, not the whole context
    if (ring) snprintf(rings, sizeof rings, ", sliding layers a ring of %d positions", ring);
    char supports[80] = ""; // a checkpoint whose rope_scaling stretches it past the trained context
    if (c->n_ctx_max != n_ctx_train(c))
        snprintf(supports, sizeof supports, " (n_ctx_max %d with its scaling)", c->n_ctx_max);
    char copied[256] = ""; // the matrices copied into another layout at load (transformer_copy_weights)
    if (t->copy)
        snprintf(copied, sizeof copied, "; copied at load: %s, %.1f MiB%s", t->copied, t->copy_bytes / 1048576.0,
                 c->dtype == DTYPE_F16 && t->weights.layers[0].wq.dtype == DTYPE_BF16_R16
                     ? ", multiplied as bf16: --f16-as-bf16; export.py --dtype bf16 writes a file to map instead"
                 : !c->gguf && (c->dtype == DTYPE_Q8_0 || c->dtype == DTYPE_BF16)
                     ? ", the first layout: export again to skip it"
                     : "");
    fprintf(stderr,
            "context: n_ctx_train %d%s, n_ctx %d | weights %.1f MiB (mmapped%s) | KV cache %.2f MiB (keys %s%s, "
            "values %s%s), activations %.2f MiB, of %.2f GiB available | kernels %s | threads %d (%s)\n",
            n_ctx_train(c), supports, run->n_ctx, t->weight_bytes / 1048576.0, copied, kv / 1048576.0,
            dtype_name(run->cache_k), rope_keys_unrotated(&run->rope) ? " un-rotated" : "", dtype_name(run->cache_v), rings,
            (all - kv) / 1048576.0, available_memory() / 1073741824.0, kernels_isa(), max_threads(),
            wait_policy(waiting, sizeof waiting));
}

// The banner's RoPE line, once the tables are made.
static void banner_rope(const Transformer *t) {
    char what[400];
    rope_describe(&t->rope, t->run.n_ctx, what, sizeof what);
    fprintf(stderr, "rope: %s%s\n", what, t->run.attn_logn ? ", log-n: queries past L times ln(m + 1) / ln(L)" : "");
}

// The banner's tokenizer line: the file, and what goes around a prompt (tokenizer.h).
static void banner_tokenizer(const Tokenizer *tok, const char *path, int model_vocab) {
    fprintf(stderr, "tokenizer: %s (vocab %d", path, tokenizer_vocab_size(tok));
    if (model_vocab > tokenizer_vocab_size(tok)) fprintf(stderr, "; the model's %d rows are padded", model_vocab);
    fprintf(stderr, ") | ");
    if (tokenizer_bos_id(tok) >= 0)
        fprintf(stderr, "BOS %d first", tokenizer_bos_id(tok));
    else
        fprintf(stderr, "no BOS");
    fprintf(stderr, " (%s)", tokenizer_bos_reason(tok));
    if (tokenizer_eos_id(tok) >= 0)
        fprintf(stderr, " | EOS %d last (%s)", tokenizer_eos_id(tok), tokenizer_eos_reason(tok));
    fprintf(stderr, "\n");
}

// Does --rope-scaling `mode`, with the user's other RoPE flags (`given`), pass configure's rules
// for this model and context? The hints that offer a mode offer only these.
static int mode_runs(const Config *c, int ctx, const RopeOverrides *given, int mode) {
    RopeOverrides o = *given;
    o.mode = mode;
    RopeParams p;
    char err[300];
    return rope_params_resolve(&p, &c->rope, ctx, &o, err, sizeof err) == ROPE_OK &&
           !(rope_query_turns(&p) > 1 && c->sliding_window);
}

// The modes that run (mode_runs) other than `skip`, as "pi|ntk|...": first with the user's other
// RoPE flags; when none does, with only --rope-base (*alone set: the hint must say to drop the
// others). Empty when none runs.
static void modes_that_run(const Config *c, int ctx, const RopeOverrides *given, int skip, char *buf, size_t len,
                           int *alone) {
    const RopeOverrides base_only = {.mode = -1, .base = given->base};
    for (*alone = 0; *alone < 2; (*alone)++) {
        size_t n = 0;
        buf[0] = 0;
        for (int m = 0; m < ROPE_SCALING_COUNT && n < len; m++)
            if (m != skip && mode_runs(c, ctx, *alone ? &base_only : given, m))
                n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "|" : "", rope_scaling_name((RopeScaling)m));
        if (buf[0]) return;
    }
    *alone = 0;
}

// A factor for a hint: x rounded up to three decimals, so that the number printed (%.12g prints it
// whole) is never below x and the run it suggests covers what the hint says.
static double factor_up(double x) { return ceil(x * 1000 - 1e-9) / 1000; }

// Runs that go ahead but probably not as meant say so, each with a fix. A warning names what the
// run uses and where it came from (a flag the user gave, the checkpoint, the default), and a hint
// offers only flags the program accepts that make the warning go away (tests/test_hints.py
// reruns each).
static void warn_context(const Config *c, const RunConfig *run, const Options *o) {
    const RopeParams *p = &run->rope;
    const int L = n_ctx_train(c), ctx = run->n_ctx;
    const int same_mode = o->rope.mode < 0 || o->rope.mode == (int)c->rope.mode;
    const int user_factor = o->rope.factor > 0 || o->rope.group > 0;
    const int own = same_mode && !user_factor; // the checkpoint's own scaling, factor included
    char modes[200];
    int alone;
    if (ctx > L && !rope_is_scaled(p)) {
        modes_that_run(c, ctx, &o->rope, ROPE_SCALING_NONE, modes, sizeof modes, &alone);
        fprintf(stderr,
                "warning: --ctx %d is beyond the %d tokens the model was trained on, with %s: expect the text to "
                "fall apart past %d%s%s%s\n",
                ctx, L, o->rope.mode < 0 ? "no RoPE scaling (the checkpoint has none)" : "--rope-scaling none", L,
                modes[0] ? " (hint: --rope-scaling " : "", modes, modes[0] ? ")" : "");
    }
    // A factor covers s L positions (rope_covers); dynamic's grows with the length and rerope has
    // none. A checkpoint's own scaling covers what it says it supports (Llama 3.1: factor 8 of
    // 8192, said good to 131072); LongRoPE's long factors are fixed by the checkpoint, so past
    // that a --rope-factor (its attention factor only) changes nothing and --ctx is the fix.
    double fix, covers = rope_covers(p, ctx, &fix);
    const int by_group = rope_takes(p->mode, ROPE_KNOB_GROUP); // selfextend reaches by its G, not a factor
    const char *flag = by_group ? "--grp-attn-n" : "--rope-factor";
    const double flag_max = by_group ? ROPE_GROUP_MAX : ROPE_FACTOR_MAX;
    char factor_hint[80] = "";
    if (covers && fix <= flag_max) snprintf(factor_hint, sizeof factor_hint, "%s %.12g", flag, factor_up(fix));
    if (same_mode && (own || p->mode == ROPE_SCALING_LONGROPE) && c->n_ctx_max > L && ctx > c->n_ctx_max) {
        fprintf(stderr,
                "warning: --ctx %d is beyond the %d positions the checkpoint says it supports with its own %s "
                "scaling (max_position_embeddings) (hint: --ctx %d%s%s)\n",
                ctx, c->n_ctx_max, rope_scaling_name(c->rope.mode), c->n_ctx_max, factor_hint[0] ? ", or " : "",
                factor_hint);
        return; // what the factor covers is this same limit
    }
    if (!covers) return; // a mode with no factor (none: the first warning's case)
    if (own && c->n_ctx_max > covers) covers = c->n_ctx_max;
    if (covers >= ctx) return;
    // The fixes: a factor that covers --ctx; leaving the user's factor out when the default covers
    // (it does unless the default is the checkpoint's own); a --ctx the factor covers.
    char hint[300];
    size_t n = (size_t)snprintf(hint, sizeof hint, "%s", factor_hint);
#define OR(...) (n += n < sizeof hint ? (size_t)snprintf(hint + n, sizeof hint - n, __VA_ARGS__) : 0)
    RopeOverrides left_out = o->rope;
    left_out.factor = 0, left_out.group = 0;
    RopeParams dflt;
    char err[300];
    double unused;
    if (user_factor && rope_params_resolve(&dflt, &c->rope, ctx, &left_out, err, sizeof err) == ROPE_OK &&
        (rope_covers(&dflt, ctx, &unused) >= ctx || (same_mode && c->n_ctx_max >= ctx)))
        OR("%sleave %s out: the default, %g, covers --ctx", n ? ", or " : "", flag, by_group ? dflt.group : dflt.factor);
    if (o->keep < 0 || o->keep < (int)covers - 1) OR("%s--ctx %d", n ? ", or " : "", (int)covers);
#undef OR
    char from[80];
    if (user_factor)
        snprintf(from, sizeof from, "%s %g", flag, by_group ? p->group : p->factor);
    else
        snprintf(from, sizeof from, "%s %s %g", own ? "the checkpoint's" : "the default", by_group ? "G" : "factor",
                 by_group ? p->group : p->factor);
    fprintf(stderr, "warning: %s with %s covers %g positions, fewer than --ctx %d: positions past %g are extrapolated%s%s%s\n",
            rope_scaling_name(p->mode), from, covers, ctx, covers, hint[0] ? " (hint: " : "", hint, hint[0] ? ")" : "");
}

// The run's parameters from the flags and the checkpoint; 0, or 2 after a usage error, 1 after
// another error (both reported).
static int configure(const Transformer *t, const Options *o, RunConfig *run) {
    const Config *c = &t->config;
    char err[300];
    // Default context: the one the model was trained at, L (not the largest its scaling supports).
    *run = (RunConfig){.n_ctx = o->ctx ? o->ctx : n_ctx_train(c),
                       .max_batch = o->batch,
                       .attn_logn = o->attn_logn,
                       .swa_full = o->swa_full};
    const char *types[2] = {o->cache_k ? o->cache_k : "f32", o->cache_v ? o->cache_v : "f32"};
    DType *set[2] = {&run->cache_k, &run->cache_v};
    for (int i = 0; i < 2; i++) {
        // a cache type at all (with a head_dim q8_0 accepts); this model's head_dim is checked below
        if (dtype_from_name(types[i], set[i]) || !kv_type_ok(*set[i], Q8_BLOCK)) {
            fprintf(stderr, "error: invalid KV cache type '%s' for %s (hint: %s)\n", types[i],
                    i ? "--cache-type-v" : "--cache-type-k",
                    kv_type_ok(DTYPE_Q8_0, c->head_dim) ? "f32, f16 or q8_0" : "f32 or f16; q8_0 needs a head_dim that "
                                                                               "is a multiple of 32");
            return 2;
        }
        if (!kv_type_ok(*set[i], c->head_dim)) {
            fprintf(stderr, "error: %s q8_0 needs a head_dim that is a multiple of 32, and this model's is %d "
                            "(hint: f16)\n", i ? "--cache-type-v" : "--cache-type-k", c->head_dim);
            return 2;
        }
    }
    if (check_keep(o, run->n_ctx)) return 2;
    if (o->f16_as_bf16 && c->dtype != DTYPE_F16) { // refused, not ignored: the user expected a change
        fprintf(stderr, "error: --f16-as-bf16 is for f16 models, and this one's weights are %s (hint: drop it%s)\n",
                dtype_name(c->dtype),
                c->dtype == DTYPE_BF16 || c->dtype == DTYPE_BF16_R16 ? "; bf16 weights are multiplied so already" : "");
        return 2;
    }
    // rope.c owns the rules and their messages (each names the flag that broke one and the fix).
    const RopeRule rule = rope_params_resolve(&run->rope, &c->rope, run->n_ctx, &o->rope, err, sizeof err);
    if (rule) {
        fprintf(stderr, "error: %s%s\n", err, rule == ROPE_BAD_VALUE ? " (hint: see --help for the RoPE flags)" : "");
        return 2;
    }
    if (rope_query_turns(&run->rope) > 1 && c->sliding_window) {
        char modes[200];
        int alone;
        modes_that_run(c, run->n_ctx, &o->rope, (int)run->rope.mode, modes, sizeof modes, &alone);
        fprintf(stderr,
                "error: --rope-scaling %s on a model with sliding-window layers (window %d): their queries see no "
                "key farther than the window, and the two are not run together (hint: --rope-scaling %s%s)\n",
                rope_scaling_name(run->rope.mode), c->sliding_window, modes,
                alone ? ", without the flags of this mode" : "");
        return 2;
    }
    int overflow;
    size_t bytes = transformer_state_bytes(c, run, max_threads(), &overflow), avail = available_memory();
    if (overflow || bytes > avail) {
        const int f32_cache = run->cache_k == DTYPE_F32 && run->cache_v == DTYPE_F32;
        fprintf(stderr,
                "error: --ctx %d needs %.2f GiB for the KV cache and activations, more than the %.2f GiB "
                "of memory available (hint: a smaller --ctx%s)\n",
                run->n_ctx, overflow ? INFINITY : bytes / 1073741824.0, avail / 1073741824.0,
                f32_cache ? ", or -ctk f16 -ctv f16 for a cache of half the size (q8_0: 0.27x)" : "");
        return 1;
    }
    return 0;
}

// The tokenizer in the model's directory: tokenizer.model (SentencePiece) if there is one, else
// tokenizer.json (byte-level BPE), else tokenizer.model again, for the error message.
static char *default_tokenizer(const char *model) {
    const char *slash = strrchr(model, '/');
    size_t dir = slash ? (size_t)(slash - model + 1) : 0;
    char *path = malloc(dir + sizeof "tokenizer.model");
    if (path) {
        memcpy(path, model, dir);
        strcpy(path + dir, "tokenizer.model");
        if (access(path, F_OK) != 0) {
            strcpy(path + dir, "tokenizer.json");
            if (access(path, F_OK) != 0) strcpy(path + dir, "tokenizer.model");
        }
    }
    return path;
}

int main(int argc, char **argv) {
    Options o;
    int parsed = parse_args(argc, argv, &o);
    if (parsed) return parsed < 0 ? 2 : 0;
#ifdef _OPENMP
    if (o.threads) omp_set_num_threads(o.threads);
#endif
    default_spin(argv, max_threads() > usable_cores()); // may start the program again, which parses again
    cli_warn(&o);
    warn_threads(&o);
    struct sigaction sa = {.sa_handler = on_interrupt, .sa_flags = SA_RESETHAND}; // no SA_RESTART: getline returns
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    char err[600];
    Transformer t;
    if (transformer_load(&t, o.model, o.f16_as_bf16, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (o.check_tensors && transformer_check_tensors(&t, err, sizeof err)) {
        fprintf(stderr, "error: %s: %s\n", o.model, err);
        transformer_free(&t);
        return 1;
    }
    const Config *c = &t.config;
    // A GGUF file holds its own tokenizer (-z still chooses another); else the file beside the model
    char *tok_default = o.tokenizer ? NULL : c->gguf ? strdup(o.model) : default_tokenizer(o.model);
    const char *tok_path = o.tokenizer ? o.tokenizer : tok_default;
    Tokenizer *tok = tok_path ? tokenizer_load(tok_path, err, sizeof err) : NULL;
    if (!tok) {
        fprintf(stderr, "error: %s\n", tok_path ? err : "out of memory");
        free(tok_default);
        transformer_free(&t);
        return 1;
    }
    // A model's embedding may have more rows than its tokenizer has tokens (Qwen2.5 and Qwen3: 151936
    // or 152064 rows for 151669 ids, Phi-3: 32064 for 32011; padded for the hardware it was trained
    // on). The rows past the tokenizer's are never a prompt token, and the sampler draws only from the
    // tokenizer's ids (make_sampler); --ppl scores over every row, as transformers does.
    if (tokenizer_vocab_size(tok) > c->vocab_size) {
        fprintf(stderr,
                "error: %s has %d tokens but the model's vocabulary is %d (hint: pass the model's own "
                "tokenizer with -z)\n",
                tok_path, tokenizer_vocab_size(tok), c->vocab_size);
        tokenizer_free(tok);
        free(tok_default);
        transformer_free(&t);
        return 1;
    }

    tokenizer_use_checkpoint(tok, c->bos_id, c->eos_id);

    RunConfig run;
    int status = configure(&t, &o, &run);
    if (status == 0) {
        banner_memory(&t, &run, o.model);
        banner_tokenizer(tok, tok_path, c->vocab_size);
    }
    PrepareStatus prepared = status ? PREPARE_OK : transformer_prepare(&t, &run, err, sizeof err);
    if (prepared != PREPARE_OK) {
        fprintf(stderr, "error: %s%s\n", err, prepared == PREPARE_BAD_ROPE ? "" : " (hint: a smaller --ctx)");
        status = 1;
    } else if (status == 0) {
        banner_rope(&t);
        warn_context(c, &run, &o);
        status = o.ppl                               ? perplexity(&t, tok, &o)
                 : o.mode && !strcmp(o.mode, "chat") ? chat(&t, tok, &o)
                                                     : generate(&t, tok, &o);
    }
    tokenizer_free(tok);
    free(tok_default);
    transformer_free(&t);
    if (!status && fclose(stdout)) { // what stdio still held, written now
        fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
        status = 1;
    }
    return status;
}
