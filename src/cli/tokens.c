/* tokens.c — tokens as text for `zero generate` (tokens.h). */
#include "cli/tokens.h"

#include <stdlib.h>
#include <string.h>

int32_t *zero__cli_prompt_tokens(const unsigned char *text, size_t bytes,
                                 const zero_tokenizer_t *tok, size_t *count) {
    int32_t *ids = NULL;
    *count = 0;
    if (tok) {
        if (zero_tokenizer_encode(tok, text, bytes, &ids, count)) {
            fprintf(stderr, "zero generate: cannot encode the prompt: %s\n", zero_last_error());
            return NULL;
        }
        return ids;
    }
    ids = malloc(bytes * sizeof *ids + 1);
    if (!ids) {
        fprintf(stderr, "zero generate: out of memory\n");
        return NULL;
    }
    for (size_t i = 0; i < bytes; i++) ids[i] = text[i];
    *count = bytes;
    return ids;
}

void zero__cli_put_token(FILE *out, int32_t t, int vocab, const zero_tokenizer_t *tok) {
    size_t len = 0;
    const char *b = tok ? zero_tokenizer_token(tok, t, &len) : NULL;
    if (b)
        fwrite(b, 1, len, out);
    else if (tok)
        fprintf(out, "[token %d]", (int)t);
    else if (vocab <= 256)
        fputc(t, out);
    else
        fprintf(out, " %d", (int)t);
}

/* The length of the UTF-8 character at s[0..n) (n > 0), or minus the length of its maximal
 * invalid subpart (Unicode's "substitution of maximal subparts", as Python's and Rust's lossy
 * decoders replace them: each by one U+FFFD). */
static int utf8_char(const unsigned char *s, size_t n) {
    const unsigned c = s[0];
    unsigned lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return -1;
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n || s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return -i;
    }
    return need + 1;
}

/* tok's text of t[0..n) into a malloc'd buffer (*bytes long). */
static unsigned char *tokens_text(const int32_t *t, size_t n, const zero_tokenizer_t *tok,
                                  size_t *bytes) {
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        size_t len = 24; /* "[token N]" */
        zero_tokenizer_token(tok, t[i], &len);
        cap += len;
    }
    unsigned char *s = malloc(cap), *p = s;
    for (size_t i = 0; s && i < n; i++) {
        size_t len = 0;
        const char *b = zero_tokenizer_token(tok, t[i], &len);
        if (b)
            memcpy(p, b, len), p += len;
        else
            p += sprintf((char *)p, "[token %d]", (int)t[i]);
    }
    *bytes = s ? (size_t)(p - s) : 0;
    return s;
}

cJSON *zero__cli_tokens_json(const int32_t *t, size_t n, int vocab, const zero_tokenizer_t *tok) {
    size_t raw_bytes = 0;
    unsigned char *raw = tok ? tokens_text(t, n, tok, &raw_bytes) : NULL;
    char *s = malloc(tok ? 3 * raw_bytes + 1 : n * 12 + 1), *p = s;
    if (!s || (tok && !raw)) {
        free(s);
        free(raw);
        return cJSON_CreateNull();
    }
    /* a tokenizer's text: bytes that are not UTF-8 (a character cut at the end) as U+FFFD */
    for (size_t k = 0; k < raw_bytes;) {
        const int c = utf8_char(raw + k, raw_bytes - k);
        if (c > 0)
            memcpy(p, raw + k, (size_t)c), p += c, k += (size_t)c;
        else
            memcpy(p, "\xef\xbf\xbd", 3), p += 3, k += (size_t)-c;
    }
    for (size_t i = 0; !tok && i < n; i++) {
        if (vocab > 256)
            p += sprintf(p, "%s%d", i ? " " : "", (int)t[i]);
        else if (t[i] < 0x80)
            *p++ = (char)t[i];
        else
            *p++ = (char)(0xC0 | (t[i] >> 6)), *p++ = (char)(0x80 | (t[i] & 0x3F));
    }
    *p = 0;
    cJSON *j = cJSON_CreateString(s);
    free(s);
    free(raw);
    return j;
}
