// chat_ids.c - the token ids ./run -m chat feeds for a two-turn conversation, for tests/test_chat.py.
//
//   chat_ids TOKENIZER TEMPLATE BOS EOS SYSTEM USER1 REPLY1 USER2
//
// prints one line of ids: turn 1 (with SYSTEM unless it is empty), REPLY1 and what closes it, then
// turn 2, rendered by chat.c's chat_render and chat_close and encoded as one text by chat_encode,
// as Hugging Face encodes a rendered conversation. (In ./run the reply's ids are the ones the model
// sampled.) TEMPLATE is a name of chat.h, or a tokenizer_config.json whose chat_template
// chat_template_detect recognises (and whose default system prompt it keeps), as ./run does.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

int main(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: chat_ids TOKENIZER TEMPLATE BOS EOS SYSTEM USER1 REPLY1 USER2\n");
        return 2;
    }
    char err[600];
    Tokenizer *tok = tokenizer_load(argv[1], err, sizeof err);
    if (!tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int k = chat_template_from_name(argv[2]);
    if (strstr(argv[2], ".json")) {
        FILE *f = fopen(argv[2], "rb");
        static char config[1 << 23]; // Gemma 3's is 1.1 MB (its added_tokens_decoder)
        const size_t len = f ? fread(config, 1, sizeof config, f) : 0;
        if (f) fclose(f);
        k = chat_template_detect(config, len, argv[2]);
        if (k < 0) {
            tokenizer_free(tok);
            return 1;
        }
        fprintf(stderr, "template %s\n", CHAT_NAMES[k]);
    }
    const char *system = argv[5][0] ? argv[5] : NULL;
    char *turn1 = chat_render((ChatTemplate)k, 1, system, argv[6]),
         *turn2 = chat_render((ChatTemplate)k, 0, system, argv[8]);
    size_t size = strlen(turn1) + strlen(argv[7]) + strlen(turn2) + 16;
    char *text = malloc(size);
    // Llama 2's template has a space before the reply, GLM-4's a newline: the model writes it, as the
    // start of the reply.
    snprintf(text, size, "%s%s%s%s%s", turn1, k == CHAT_LLAMA2 ? " " : k == CHAT_GLM4 ? "\n" : "", argv[7],
             chat_close((ChatTemplate)k), turn2);
    int *ids = NULL, n = 0, cap = 0;
    int status = k < 0 || chat_encode(tok, atoi(argv[3]), atoi(argv[4]), chat_sentencepiece((ChatTemplate)k), text, &ids, &n, &cap);
    for (int i = 0; i < n && !status; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(turn1), free(turn2), free(text);
    free(ids);
    tokenizer_free(tok);
    return status;
}
