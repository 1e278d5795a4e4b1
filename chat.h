// chat.h - the chat templates ./run -m chat speaks: which one a checkpoint was trained on, and the
// token ids of one turn in it. chat.c shows each template's text; run.c runs the conversation.
#ifndef CHAT_H
#define CHAT_H

#include <stddef.h>

#include "tokenizer.h"

typedef enum {
    CHAT_LLAMA2,
    CHAT_LLAMA3,
    CHAT_ZEPHYR,
    CHAT_CHATML,
    CHAT_MISTRAL,
    CHAT_QWEN3,
    CHAT_PHI3,
    CHAT_PHI4_MINI,
    CHAT_GEMMA,
    CHAT_OLMO2,
    CHAT_EXAONE,
    CHAT_GLM4,
    CHAT_GRANITE,
} ChatTemplate;
#define CHAT_COUNT (CHAT_GRANITE + 1) // how many there are: not a template, so no switch needs a case for it
extern const char *const CHAT_NAMES[CHAT_COUNT]; // cli.h's CHAT_TEMPLATE_NAMES lists the same

int chat_template_from_name(const char *name); // -1: none of CHAT_NAMES

// The template that tokenizer_config.json's JSON text holds (path names it in messages): its
// index, or -1 after an error, reported on stderr (an unknown template, or SmolLM3's, refused).
// For chatml it also keeps the default system prompt the template writes when the conversation
// has none (Qwen2, Qwen2.5, SmolLM2), which chat_render then puts first when -y gives none.
int chat_template_detect(const char *text, size_t len, const char *path);
const char *chat_default_system(void); // the one kept; NULL: none (or no template detected)

// 1 for the templates of SentencePiece models, whose "<s>" and "</s>" are BOS and EOS.
int chat_sentencepiece(ChatTemplate k);

// The text of the user's turn (on the first turn with the system prompt before it, if any), up to
// where the model writes its reply. malloc'ed; NULL when out of memory.
char *chat_render(ChatTemplate k, int first, const char *system, const char *user);

// What closes the assistant's turn, fed when a reply ends without it (-n reached).
const char *chat_close(ChatTemplate k);
// Whether that marker also opens the next turn (GLM-4's <|user|>): then a reply ended by any other end
// token is closed with it too, or the next turn would start without it.
int chat_close_opens_turn(ChatTemplate k);

// Append the ids of text to *ids (capacity *cap, count *n, grown with realloc); with markers,
// "<s>" and "</s>" become bos_id and eos_id. Returns 0, -1 if the tokenizer failed or memory ran out.
int chat_encode(Tokenizer *tok, int bos_id, int eos_id, int markers, const char *text, int **ids, int *n, int *cap);

#endif
