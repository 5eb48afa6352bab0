/* zero/tokenizer.h — GPT-2's byte-level BPE tokenizer, read from the files users already have
 * (docs/tokenizer.md).
 *
 * Three kinds of file load:
 *   - Hugging Face's vocab.json (token -> id) with merges.txt beside it (one merge "a b" a line,
 *     by rank; a first "#version" line skipped);
 *   - Hugging Face's tokenizer.json (its "model": {"type": "BPE", "vocab", "merges"}, merges as
 *     "a b" strings or ["a", "b"] pairs; "added_tokens" decode too);
 *   - llm.c's gpt2_tokenizer.bin (a 256-int32 header: magic 20240328, version 1 or 2, token
 *     count, end-of-text id; then each token's bytes, a uint8 length first): decoding only, as
 *     it holds no merges.
 * A directory loads its tokenizer.json, else its vocab.json + merges.txt.
 *
 * Encoding is GPT-2's: the text is cut by GPT-2's pre-tokenizer regex (contractions, letters,
 * numbers, other symbols, whitespace; Unicode classes from PCRE2), each piece's bytes become
 * the byte-level symbols, merged by rank as Hugging Face's `tokenizers` merges them, and looked
 * up. Special tokens in the text ("<|endoftext|>") are encoded as text, as nanoGPT and llm.c's
 * data scripts do (tiktoken's encode_ordinary). Bytes that are not valid UTF-8 form pieces of
 * their own, so any bytes encode and decode(encode(x)) == x. Decoding concatenates each token's
 * bytes (invalid UTF-8 passes through as bytes).
 *
 * Ownership: paths are borrowed for the call; a tokenizer is immutable once loaded, so several
 * threads may encode and decode with one at once. Outputs of encode and decode are malloc'd and
 * freed by the caller with free().
 */
#ifndef ZERO_TOKENIZER_H
#define ZERO_TOKENIZER_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zero_tokenizer zero_tokenizer_t;

/* Load the tokenizer at `path` (a vocab.json, tokenizer.json, llm.c .bin, or a directory).
 * Errors name the file and what was expected: ZERO_ERR_IO (missing, unreadable),
 * ZERO_ERR_FORMAT (malformed JSON or header, a negative or repeated id, a merge line that is
 * not two tokens, a merge naming a token the vocabulary lacks or whose result it lacks, a
 * truncated .bin). *tok is NULL on failure. */
ZERO_API zero_status_t zero_tokenizer_init(zero_tokenizer_t **tok, const char *path);
ZERO_API void zero_tokenizer_free(zero_tokenizer_t *tok);

/* Ids run over [0, vocab): one more than the largest id of the file (an id inside that range
 * may still lack a token, which decoding then refuses). */
ZERO_API int zero_tokenizer_vocab(const zero_tokenizer_t *tok);

/* The file's end-of-text token ("<|endoftext|>", or llm.c's header), or -1. */
ZERO_API int32_t zero_tokenizer_eot(const zero_tokenizer_t *tok);

/* Text -> ids. *ids (malloc'd, *count entries; NULL when count is 0) on success. A tokenizer
 * without merges (llm.c's file, a vocab.json without merges.txt) or whose tokenizer.json asks
 * for another pre-tokenizer: ZERO_ERR_UNSUPPORTED naming the file and why; a byte whose
 * single-byte token the vocabulary lacks: ZERO_ERR_FORMAT naming it and its offset. */
ZERO_API zero_status_t zero_tokenizer_encode(const zero_tokenizer_t *tok, const void *text,
                                             size_t bytes, int32_t **ids, size_t *count);

/* Ids -> bytes, NUL-terminated (the terminator not counted in *bytes). An id outside
 * [0, vocab) or without a token: ZERO_ERR_INVALID_ARG naming it, its index and the file. */
ZERO_API zero_status_t zero_tokenizer_decode(const zero_tokenizer_t *tok, const int32_t *ids,
                                             size_t count, char **text, size_t *bytes);

/* One token's bytes (a view valid until zero_tokenizer_free; not NUL-terminated) and their
 * count; NULL when the id has no token. */
ZERO_API const char *zero_tokenizer_token(const zero_tokenizer_t *tok, int32_t id, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif /* ZERO_TOKENIZER_H */
