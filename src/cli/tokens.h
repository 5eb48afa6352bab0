/* tokens.h — tokens as text for `zero generate` (src/cli/tokens.c): a tokenizer's text, else
 * bytes for a vocabulary of at most 256, else ids; and the prompt's tokens.
 */
#ifndef ZERO_CLI_TOKENS_H
#define ZERO_CLI_TOKENS_H

#include "zero/tokenizer.h"

#include <cJSON.h>
#include <stdint.h>
#include <stdio.h>

/* The prompt's tokens (malloc'd, *count of them): encoded by tok, else its bytes. NULL after a
 * message on stderr when encoding fails. */
int32_t *zero__cli_prompt_tokens(const unsigned char *text, size_t bytes,
                                 const zero_tokenizer_t *tok, size_t *count);

/* One token as text: tok's bytes for it ("[token N]" for an id the tokenizer lacks, as a padded
 * vocabulary has), else the byte for a vocabulary of at most 256, else " id". */
void zero__cli_put_token(FILE *out, int32_t t, int vocab, const zero_tokenizer_t *tok);

/* Tokens as a JSON string (always valid JSON): tok's text with any bytes that are not UTF-8 as
 * U+FFFD (as Hugging Face's decode gives them); without tok, each byte one code point (Latin-1)
 * for a vocabulary of at most 256, else the ids. */
cJSON *zero__cli_tokens_json(const int32_t *t, size_t n, int vocab, const zero_tokenizer_t *tok);

#endif /* ZERO_CLI_TOKENS_H */
