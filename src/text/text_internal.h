/* text_internal.h — the tokenizer's tables (internal), shared by the loader (tokenizer.c) and
 * the encoder (bpe.c).
 *
 * Ids index the decode table (each id's bytes in one blob). Encoding needs three more things,
 * all resolved to ids at load: the id of each single byte's symbol, the merges as a hash table
 * from a pair of ids to its rank and the id of their concatenation, and the compiled
 * pre-tokenizer. Everything is immutable after zero_tokenizer_init.
 */
#ifndef ZERO_TEXT_INTERNAL_H
#define ZERO_TEXT_INTERNAL_H

#include "zero/tokenizer.h"

#include <stdint.h>

#define ZERO_TOKENIZER_PATH_MAX 512

typedef struct zero_bpe_merge {
    uint64_t pair; /* (left id << 32) | right id; UINT64_MAX: an empty slot */
    uint32_t rank; /* position in the merges list */
    int32_t id;    /* the merged token */
} zero_bpe_merge_t;

struct zero_tokenizer {
    char path[ZERO_TOKENIZER_PATH_MAX]; /* the file, for messages */
    int vocab;                          /* ids [0, vocab) */
    int32_t eot;                        /* end-of-text id or -1 */
    size_t *token_offset;               /* (vocab) into blob */
    int32_t *token_bytes;               /* (vocab) bytes of each id; -1: no token */
    char *blob;                         /* owned: every token's bytes */
    /* encoding */
    char cannot_encode[2 * ZERO_TOKENIZER_PATH_MAX + 256]; /* why not ("" when it can) */
    int32_t byte_id[256];                                  /* id of each byte's symbol, -1: none */
    zero_bpe_merge_t *merges; /* open addressing, merge_cap slots (a power of two) */
    size_t merge_cap;
    void *regex; /* pcre2_code_8 *: the pre-tokenizer, or NULL */
};

/* The merge of (a, b), or NULL. */
const zero_bpe_merge_t *zero__bpe_merge_find(const zero_tokenizer_t *tok, int32_t a, int32_t b);

/* Compile GPT-2's pre-tokenizer into tok->regex. */
zero_status_t zero__bpe_regex_init(zero_tokenizer_t *tok);
void zero__bpe_regex_free(zero_tokenizer_t *tok);

#endif /* ZERO_TEXT_INTERNAL_H */
