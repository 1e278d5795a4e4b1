// promptcache.h - the prompt cache (./run --prompt-cache FILE): the keys and values a prompt left in
// the KV cache, kept in a file so that a later prompt which starts with the same tokens skips them.
//
// What it is for: many prompts that share a long beginning (a system prompt, a document asked
// several questions; the extension lab's passkey prompts, whose filler before the key is the same
// for every key at one depth: scripts/ppl_results.py). llama.cpp's --prompt-cache does the same.
//
// The rule: a run reads FILE when it exists and reuses the longest run of its tokens that begins the
// prompt (all but the prompt's last token at most: its logits are needed); the rest of the prompt
// runs as usual. A run writes FILE (a new file, then renamed over the old: never half-written) when
// there was none, or when the prompt begins with every cached token and is longer; any other run
// leaves it as it is. So a cache made from the longest shared beginning serves every later prompt.
// The reused numbers are those a run without the cache computes, bit for bit: a position's keys and
// values depend only on the tokens up to it (not on how the prompt was cut into blocks: model.c,
// kernels_attention.c), and a file made with another model file or other settings is not used.
// Not for the modes whose keys depend on the whole prompt's length (dynamic, dynamic-yarn,
// longrope) nor for sliding layers kept in a ring (--swa-full keeps every position): run.c refuses.
//
// The file, little-endian:
//   off  field
//     0  magic         the 4 bytes "LRPC"
//     4  version       1
//     8  n_tokens      the cached prompt's length n, 1 .. 2^24
//    12  n_layers, n_kv_heads, head_dim, key type, value type (int32 each; types as DType numbers)
//    32  settings_len  bytes of the settings text, 1 .. PCACHE_SETTINGS_MAX
//    36  zeros up to byte 64
//    64  the settings text (no NUL): what else the numbers depend on, as run.c writes it (the
//        model file, the RoPE mode and its parameters, ...); a file is used only when it is the same
//        then n_tokens int32 token ids
//        then per layer, per kv head: the keys of positions [0, n) in the cache's layout (whole
//        blocks of 32 positions), then their values (n rows): kernels.h, kv_span
//   and the file ends there.
#ifndef PROMPTCACHE_H
#define PROMPTCACHE_H

#include <stdio.h>

#include "kernels.h"

#define PCACHE_SETTINGS_MAX 2048

typedef enum {
    PCACHE_NONE,  // no file: nothing reused
    PCACHE_USED,  // *reused positions of the cache hold the file's keys and values
    PCACHE_OTHER, // a cache for another model, shape or settings (the note in err): nothing reused
    PCACHE_BAD,   // not a prompt cache, damaged, or unreadable (the error in err)
} PcacheStatus;

// Read a prompt cache from f (named `name` in messages) into c, for a prompt of ids[0 .. n): the
// longest common beginning of the file's tokens and ids, at most n - 1, is copied into c's
// positions [0, *reused). *cached: the file's token count (0 unless PCACHE_USED).
PcacheStatus pcache_read(FILE *f, const char *name, const char *settings, KVCache *c, const int *ids, int n,
                         int *reused, int *cached, char *err, size_t errlen);

// Write the cache of ids[0 .. n) (positions [0, n) of c) to path: into a new file beside it, then
// renamed over path. Returns 0, or -1 with the error in err (no file left behind).
int pcache_write(const char *path, const char *settings, const KVCache *c, const int *ids, int n, char *err,
                 size_t errlen);

#endif
