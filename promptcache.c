// promptcache.c - the prompt cache file (promptcache.h has the format and the rule).
#include "promptcache.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HEADER = 64, VERSION = 1, FIELDS = 8, MAX_TOKENS = 1 << 24 }; // FIELDS: int32s from byte 4

// The fixes the messages offer: a cache that cannot be read is made again by the next run once it is
// gone; one that cannot be written needs another place.
#define REMAKE    "(hint: delete it, and the next run makes it again)"
#define ELSEWHERE "(hint: a --prompt-cache path in a folder you can write to, with room for it)"

// The shape fields of a cache, in the header's order from byte 12.
static void shape_of(const KVCache *c, int32_t out[5]) {
    const int32_t s[5] = {c->n_layers, c->n_kv_heads, c->head_dim, (int32_t)c->key_type, (int32_t)c->value_type};
    memcpy(out, s, sizeof s);
}

// Bytes of the keys and values of n positions, all layers and heads (kv_span's).
static uint64_t data_bytes(const KVCache *c, int n) {
    uint64_t total = 0;
    for (int which = 0; which < 2; which++) {
        size_t bytes;
        kv_span(c, 0, 0, which, n, &bytes);
        total += (uint64_t)bytes * c->n_layers * c->n_kv_heads;
    }
    return total;
}

PcacheStatus pcache_read(FILE *f, const char *name, const char *settings, KVCache *c, const int *ids, int n,
                         int *reused, int *cached, char *err, size_t errlen) {
    *reused = *cached = 0;
    unsigned char head[HEADER];
    int32_t h[FIELDS];
    struct stat st;
    if (fread(head, 1, HEADER, f) != HEADER || memcmp(head, "LRPC", 4)) {
        snprintf(err, errlen,
                 "%s is not a prompt cache (it does not start with LRPC); it is left as it is (hint: "
                 "give --prompt-cache a new file's name)",
                 name);
        return PCACHE_BAD;
    }
    memcpy(h, head + 4, sizeof h); // little-endian, as every machine this builds for
    if (h[0] != VERSION) {
        snprintf(err, errlen, "%s is a prompt cache of version %d, this program reads version %d " REMAKE, name,
                 (int)h[0], VERSION);
        return PCACHE_BAD;
    }
    const int64_t tokens = h[1], text = h[7];
    if (tokens < 1 || tokens > MAX_TOKENS || text < 1 || text > PCACHE_SETTINGS_MAX) {
        snprintf(err, errlen, "%s: a damaged prompt cache (%lld tokens, settings of %lld bytes) " REMAKE, name,
                 (long long)tokens, (long long)text);
        return PCACHE_BAD;
    }
    int32_t shape[5];
    shape_of(c, shape);
    const int same_shape = !memcmp(shape, h + 2, sizeof shape);
    // The whole file's size, known before reading its data: a damaged one is refused untouched.
    const uint64_t want = HEADER + (uint64_t)text + 4 * (uint64_t)tokens + (same_shape ? data_bytes(c, tokens) : 0);
    if (fstat(fileno(f), &st)) {
        snprintf(err, errlen, "%s: cannot read the prompt cache's size: %s " REMAKE, name, strerror(errno));
        return PCACHE_BAD;
    }
    if ((same_shape && (uint64_t)st.st_size != want) || (uint64_t)st.st_size < want) {
        snprintf(err, errlen, "%s: a damaged prompt cache (%lld bytes, not the %llu its header says) " REMAKE, name,
                 (long long)st.st_size, (unsigned long long)want);
        return PCACHE_BAD;
    }
    char saved[PCACHE_SETTINGS_MAX + 1];
    if (fread(saved, 1, (size_t)text, f) != (size_t)text) goto unreadable;
    saved[text] = 0;
    if (!same_shape || strcmp(saved, settings)) {
        // The first "; "-separated part that differs says why, without the whole text.
        size_t at = 0, i = 0;
        while (saved[i] && saved[i] == settings[i]) {
            if (saved[i] == ';') at = i + 2;
            i++;
        }
        const int mine = (int)strcspn(settings + at, ";"), theirs = (int)strcspn(saved + at, ";");
        if (same_shape)
            snprintf(err, errlen,
                     "%s was made with other settings (%.*s, where this run has %.*s), so it is not used "
                     "and is left as it is (hint: another --prompt-cache file for these settings)",
                     name, theirs > 200 ? 200 : theirs, saved + at, mine > 200 ? 200 : mine, settings + at);
        else
            snprintf(err, errlen,
                     "%s was made for another model or cache type, so it is not used and is left as it is "
                     "(hint: another --prompt-cache file for these settings)",
                     name);
        return PCACHE_OTHER;
    }
    int *file_ids = malloc((size_t)tokens * sizeof *file_ids);
    if (!file_ids) {
        snprintf(err, errlen, "%s: no memory for its %lld token ids", name, (long long)tokens);
        return PCACHE_BAD;
    }
    if (fread(file_ids, 4, (size_t)tokens, f) != (size_t)tokens) {
        free(file_ids);
        goto unreadable;
    }
    int common = 0;
    while (common < tokens && common < n - 1 && file_ids[common] == ids[common])
        common++;
    free(file_ids);
    // Each span: the first `common` positions' bytes into the cache, the rest of the file's skipped.
    for (int l = 0; l < c->n_layers; l++)
        for (int kvh = 0; kvh < c->n_kv_heads; kvh++)
            for (int which = 0; which < 2; which++) {
                size_t all, part;
                kv_span(c, l, kvh, which, (int)tokens, &all);
                void *to = kv_span(c, l, kvh, which, common, &part);
                if (fread(to, 1, part, f) != part || fseek(f, (long)(all - part), SEEK_CUR)) goto unreadable;
            }
    *reused = common;
    *cached = (int)tokens;
    return PCACHE_USED;
unreadable:
    snprintf(err, errlen, "%s: cannot read the prompt cache: %s " REMAKE, name,
             ferror(f) ? strerror(errno) : "it ends early");
    return PCACHE_BAD;
}

int pcache_write(const char *path, const char *settings, const KVCache *c, const int *ids, int n, char *err,
                 size_t errlen) {
    char tmp[PATH_MAX + 32];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "--prompt-cache: the path is longer than a path can be " ELSEWHERE);
        return -1;
    }
    FILE *f = fopen(tmp, "wbx");
    if (!f) {
        snprintf(err, errlen, "--prompt-cache %s: cannot write %s: %s " ELSEWHERE, path, tmp, strerror(errno));
        return -1;
    }
    const size_t text = strlen(settings);
    unsigned char head[HEADER] = "LRPC";
    int32_t h[FIELDS] = {VERSION, n};
    shape_of(c, h + 2);
    h[7] = (int32_t)text;
    memcpy(head + 4, h, sizeof h);
    int ok = text >= 1 && text <= PCACHE_SETTINGS_MAX && fwrite(head, 1, HEADER, f) == HEADER &&
             fwrite(settings, 1, text, f) == text && fwrite(ids, 4, (size_t)n, f) == (size_t)n;
    for (int l = 0; ok && l < c->n_layers; l++)
        for (int kvh = 0; ok && kvh < c->n_kv_heads; kvh++)
            for (int which = 0; ok && which < 2; which++) {
                size_t bytes;
                const void *from = kv_span(c, l, kvh, which, n, &bytes);
                ok = fwrite(from, 1, bytes, f) == bytes;
            }
    int why = ok ? 0 : errno;
    if (fclose(f) && ok) why = errno, ok = 0;
    if (ok && rename(tmp, path)) why = errno, ok = 0;
    if (!ok) {
        snprintf(err, errlen, "--prompt-cache: cannot write %s: %s " ELSEWHERE, path, strerror(why));
        unlink(tmp);
        return -1;
    }
    return 0;
}
