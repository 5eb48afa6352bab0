/* tokenize_tool.c — the tokenizer from the command line, for test_tokenizer_hf.py:
 *   tokenize_tool encode TOKENIZER TEXT_FILE   ids on stdout, space-separated; the seconds the
 *                                              encoding took on stderr
 *   tokenize_tool decode TOKENIZER IDS_FILE    the bytes of space-separated ids on stdout
 *   tokenize_tool info TOKENIZER               "vocab N eot E"
 * Errors: the library's message on stderr, exit 1.
 */
#include "core/fileio.h"
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(void) {
    fprintf(stderr, "%s\n", zero_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || (strcmp(argv[1], "info") && argc < 4)) {
        fprintf(stderr, "usage: tokenize_tool encode|decode|info TOKENIZER [FILE]\n");
        return 2;
    }
    zero_tokenizer_t *tok;
    if (zero_tokenizer_init(&tok, argv[2])) return fail();
    int rc = 0;
    if (!strcmp(argv[1], "info")) {
        printf("vocab %d eot %d\n", zero_tokenizer_vocab(tok), (int)zero_tokenizer_eot(tok));
        zero_tokenizer_free(tok);
        return 0;
    }
    char *text = NULL;
    size_t n = 0;
    if (zero__read_file(argv[3], (size_t)1 << 31, &text, &n)) {
        zero_tokenizer_free(tok);
        return fail();
    }
    if (!strcmp(argv[1], "encode")) {
        int32_t *ids = NULL;
        size_t count = 0;
        double t0 = zero_time_now();
        if (zero_tokenizer_encode(tok, text, n, &ids, &count)) {
            rc = fail();
        } else {
            fprintf(stderr, "%.6f\n", zero_time_now() - t0);
            for (size_t i = 0; i < count; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            printf("\n");
        }
        free(ids);
    } else {
        size_t count = 0, cap = 1024;
        int32_t *ids = malloc(cap * sizeof *ids);
        char *p = text, *end;
        for (long v; ids && (v = strtol(p, &end, 10), end != p); p = end) {
            if (count == cap) {
                int32_t *grown = realloc(ids, (cap *= 2) * sizeof *ids);
                if (!grown) free(ids);
                ids = grown;
            }
            if (ids) ids[count++] = (int32_t)v;
        }
        char *out = NULL;
        size_t bytes = 0;
        if (!ids || zero_tokenizer_decode(tok, ids, count, &out, &bytes))
            rc = fail();
        else
            fwrite(out, 1, bytes, stdout);
        free(out);
        free(ids);
    }
    free(text);
    zero_tokenizer_free(tok);
    return rc;
}
