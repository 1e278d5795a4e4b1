// chat.c - the chat templates: which one a checkpoint speaks, and its text for one turn.
//
// A chat model was trained on one template. Hugging Face writes it as Jinja in
// tokenizer_config.json (chat_template); this program does not run Jinja, it recognises which of
// five known templates the file holds by a string only that template has, and renders it in C:
//   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] REPLY </s><s>[INST] USER [/INST]
//   llama3   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYSTEM<|eot_id|>
//            <|start_header_id|>user<|end_header_id|>\n\nUSER<|eot_id|><|start_header_id|>assistant...
//   zephyr   <|system|>\nSYSTEM</s>\n<|user|>\nUSER</s>\n<|assistant|>\nREPLY</s>\n  (TinyLlama-Chat)
//   chatml   <|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n<|im_start|>assistant\n
//   mistral  <s>[INST] USER [/INST]REPLY</s>[INST] USER [/INST]    (no system role)
// "<s>" and "</s>" are the checkpoint's BOS and EOS ids, not text: a SentencePiece tokenizer would
// spell them out. The other markers are added tokens of their tokenizer.json, which bpe.c matches.

#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

const char *const CHAT_NAMES[CHAT_COUNT] = {"llama2", "llama3", "zephyr", "chatml", "mistral"};
// The string that tells each template apart, in the order they are tried (llama2's has [INST] too).
static const char *const CHAT_MARKS[CHAT_COUNT] = {"<<SYS>>", "<|start_header_id|>", "<|user|>", "<|im_start|>",
                                                   "[INST]"};

int chat_template_detect(const char *text, size_t len, const char *path) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsArray(tmpl)) { // [{"name": "default", "template": ...}, ...]
        const cJSON *e = tmpl->child;
        while (e && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "name")))
            e = e->next;
        for (const cJSON *x = tmpl->child; x; x = x->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(x, "name");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default")) e = x;
        }
        tmpl = e ? cJSON_GetObjectItemCaseSensitive(e, "template") : NULL;
    }
    int found = -1;
    for (int k = 0; cJSON_IsString(tmpl) && found < 0 && k < CHAT_COUNT; k++)
        if (strstr(tmpl->valuestring, CHAT_MARKS[k])) found = k;
    if (found < 0)
        fprintf(stderr,
                "error: %s: %s (hint: --chat-template llama2|llama3|zephyr|chatml|mistral names the "
                "model's template)\n",
                path,
                !root                   ? "not valid JSON"
                : !cJSON_IsString(tmpl) ? "no chat_template"
                                        : "the chat_template is none "
                                          "this program knows");
    cJSON_Delete(root);
    return found;
}

int chat_sentencepiece(ChatTemplate k) { return k == CHAT_LLAMA2 || k == CHAT_ZEPHYR || k == CHAT_MISTRAL; }

// Append the ids of text to *ids; with markers, "<s>" and "</s>" as the BOS and EOS ids (a
// tokenizer.json matches its own special tokens). Returns 0, -1 if the tokenizer failed or memory
// ran out.
int chat_encode(Tokenizer *tok, int bos_id, int eos_id, int markers, const char *text, int **ids, int *n, int *cap) {
    while (*text) {
        const char *bos = markers ? strstr(text, "<s>") : NULL, *eos = markers ? strstr(text, "</s>") : NULL;
        const char *mark = bos && (!eos || bos < eos) ? bos : eos;
        size_t len = mark ? (size_t)(mark - text) : strlen(text);
        int m = 0, *part = len ? tokenizer_encode(tok, text, len, 0, &m) : NULL;
        if (len && !part) return -1;
        if (*n + m + 1 > *cap) {
            int *bigger = realloc(*ids, (size_t)(*cap = 2 * (*n + m + 1)) * sizeof **ids);
            if (!bigger) {
                free(part);
                return -1;
            }
            *ids = bigger;
        }
        if (m) memcpy(*ids + *n, part, (size_t)m * sizeof *part);
        *n += m;
        free(part);
        if (!mark) break;
        (*ids)[(*n)++] = mark == bos ? bos_id : eos_id;
        text = mark + (mark == bos ? 3 : 4);
    }
    return 0;
}

// The text of the user's turn (and before it, on the first turn, the system prompt), up to where
// the model writes its reply. first: the first turn of the conversation.
char *chat_render(ChatTemplate k, int first, const char *system, const char *user) {
    const char *sys = first ? system : NULL; // the system prompt opens the conversation, once
    size_t size = (sys ? strlen(sys) : 0) + strlen(user) + 256;
    char *out = malloc(size);
    if (!out) return NULL;
    switch (k) {
    case CHAT_LLAMA2:
        if (sys)
            snprintf(out, size, "<s>[INST] <<SYS>>\n%s\n<</SYS>>\n\n%s [/INST]", sys, user);
        else
            snprintf(out, size, "<s>[INST] %s [/INST]", user);
        break;
    case CHAT_LLAMA3:
        snprintf(out, size,
                 "%s%s%s%s<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n",
                 first ? "<|begin_of_text|>" : "", sys ? "<|start_header_id|>system<|end_header_id|>\n\n" : "",
                 sys ? sys : "", sys ? "<|eot_id|>" : "", user);
        break;
    case CHAT_ZEPHYR:
        snprintf(out, size, "%s%s%s%s<|user|>\n%s</s>\n<|assistant|>\n", first ? "" : "\n", sys ? "<|system|>\n" : "",
                 sys ? sys : "", sys ? "</s>\n" : "", user);
        break;
    case CHAT_CHATML:
        snprintf(out, size, "%s%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", first ? "" : "\n",
                 sys ? "<|im_start|>system\n" : "", sys ? sys : "", sys ? "<|im_end|>\n" : "", user);
        break;
    default: // CHAT_MISTRAL
        snprintf(out, size, "%s[INST] %s [/INST]", first ? "<s>" : "", user);
        break;
    }
    return out;
}

// What closes the assistant's turn in the template, fed when a reply ends without it (-n reached).
const char *chat_close(ChatTemplate k) {
    return k == CHAT_LLAMA3 ? "<|eot_id|>" : k == CHAT_CHATML ? "<|im_end|>" : k == CHAT_LLAMA2 ? " </s>" : "</s>";
}

int chat_template_from_name(const char *name) {
    for (int k = 0; k < CHAT_COUNT; k++)
        if (!strcmp(name, CHAT_NAMES[k])) return k;
    return -1;
}
