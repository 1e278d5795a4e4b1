// tok_dump.c - the tokenizer wrapper from the command line, for tests/test_tokenizer.py.
//
//   tok_dump TOKENIZER encode     reads text on stdin, prints the ids (BOS and EOS around them when
//                                 the tokenizer adds them, tokenizer.h), one line
//   tok_dump TOKENIZER decode     reads ids on stdin, writes the streamed pieces to stdout
//   tok_dump TOKENIZER vocab      prints vocab size, bos and eos ids
//   tok_dump TOKENIZER batch      many texts at once, for tests/test_bpe.py: stdin holds records
//                                 "LENGTH\n" + LENGTH bytes; for each, one line: its ids (no BOS),
//                                 a tab, then the hex of its pieces streamed one by one, each
//                                 followed by '.'
// An optional last argument gives the checkpoint's BOS id (config.json bos_token_id, the model
// file's header), which tokenizer.h falls back on as ./run does: tok_dump TOKENIZER encode 128000.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: tok_dump TOKENIZER encode|decode|vocab|batch [CHECKPOINT_BOS_ID]\n");
        return 2;
    }
    char err[600];
    Tokenizer *tok = tokenizer_load(argv[1], err, sizeof err);
    if (!tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (argc == 4) tokenizer_use_checkpoint(tok, atoi(argv[3]), -1);
    int status = 0;
    if (!strcmp(argv[2], "vocab")) {
        printf("%d %d %d\n", tokenizer_vocab_size(tok), tokenizer_bos_id(tok), tokenizer_eos_id(tok));
    } else if (!strcmp(argv[2], "encode")) {
        size_t cap = 1 << 16, len = 0, got;
        char *text = malloc(cap);
        while (text && (got = fread(text + len, 1, cap - len, stdin)) > 0)
            if ((len += got) == cap) text = realloc(text, cap *= 2);
        int n;
        int *ids = text ? tokenizer_encode(tok, text, len, 1, &n) : NULL;
        if (!ids) {
            fprintf(stderr, "error: encode failed\n");
            status = 1;
        } else {
            for (int i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        }
        free(ids);
        free(text);
    } else if (!strcmp(argv[2], "batch")) {
        size_t len;
        while (!status && scanf("%zu", &len) == 1 && getchar() == '\n') {
            char *text = malloc(len + 1);
            int n;
            int *ids = text && fread(text, 1, len, stdin) == len ? tokenizer_encode(tok, text, len, 0, &n) : NULL;
            if (!ids) {
                fprintf(stderr, "error: encode failed\n");
                status = 1;
            }
            for (int i = 0; ids && i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            printf("\t");
            for (int i = 0; ids && i < n; i++) {
                size_t plen;
                const char *piece = tokenizer_decode_piece(tok, i ? ids[i - 1] : -1, ids[i], &plen);
                for (size_t k = 0; piece && k < plen; k++)
                    printf("%02x", (unsigned char)piece[k]);
                printf(".");
            }
            printf("\n");
            free(ids);
            free(text);
        }
    } else if (!strcmp(argv[2], "decode")) {
        int prev = -1, id;
        while (scanf("%d", &id) == 1) {
            size_t len;
            const char *piece = tokenizer_decode_piece(tok, prev, id, &len);
            if (!piece) {
                fprintf(stderr, "error: %d is not a token id\n", id);
                status = 1;
                break;
            }
            fwrite(piece, 1, len, stdout);
            prev = id;
        }
    } else {
        fprintf(stderr, "usage: tok_dump TOKENIZER encode|decode|vocab|batch\n");
        status = 2;
    }
    tokenizer_free(tok);
    return status;
}
