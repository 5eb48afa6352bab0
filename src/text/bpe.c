/* bpe.c — GPT-2's byte-level BPE encoding: the pre-tokenizer regex (PCRE2), then each piece's
 * bytes merged by rank.
 *
 * The merge loop is Hugging Face's (tokenizers' BPE Word::merge_all): a min-heap of candidate
 * pairs ordered by (rank, position), the lowest popped and merged if its pair is still there
 * (same symbols, same result), the pairs it forms with its neighbours pushed. For merges learned
 * in order (a merge's parts made by earlier merges) this is GPT-2's original loop (merge every
 * occurrence of the lowest-ranked pair, repeat); for other lists it is what `tokenizers` does,
 * which the tests take as the reference. Pieces repeat a lot in text, so one call keeps a cache
 * of the pieces it has encoded (keyed by the piece's bytes in the caller's text). Not here:
 * loading (tokenizer.c), special tokens (encoded as text).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/text_internal.h"

#include "core/core_internal.h"

#include <pcre2.h>
#include <string.h>

/* GPT-2's pre-tokenizer (Hugging Face's ByteLevel, OpenAI's encoder.py): contractions, an
 * optional space and letters, numbers or other symbols, whitespace not followed by a
 * non-space (so "  a" gives " " and " a"), whitespace. PCRE2's \s (with UCP) counts U+180E
 * (MONGOLIAN VOWEL SEPARATOR) as a space, Oniguruma's (the regex library of `tokenizers`) does
 * not, so spaces are [^\S\x{180e}] and U+180E is another symbol; test_tokenizer_hf checks every
 * Unicode space against `tokenizers`. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?(?:[^\\s\\p{L}\\p{N}]|\\x{180e})+"
    "|[^\\S\\x{180e}]+(?![\\S\\x{180e}])|[^\\S\\x{180e}]+";

zero_status_t zero__bpe_regex_init(zero_tokenizer_t *tok) {
    int err = 0;
    PCRE2_SIZE at = 0;
    /* invalid UTF-8 never matches, so such bytes fall between matches (encode keeps them) */
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return zero__error(ZERO_ERR_INTERNAL, "cannot compile the GPT-2 pre-tokenizer at %zu: %s",
                           (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT the interpreter matches */
    tok->regex = re;
    return ZERO_OK;
}

void zero__bpe_regex_free(zero_tokenizer_t *tok) {
    pcre2_code_free((pcre2_code *)tok->regex);
    tok->regex = NULL;
}

/* ------------------------------------------------------------------------ per-call state */

typedef struct {
    int32_t id;
    int prev, next; /* neighbours (-1: none) */
    int alive;
} sym_t;

typedef struct {
    uint32_t rank;
    int pos;
    int32_t id;
} cand_t;

typedef struct {
    const unsigned char *key; /* in the caller's text */
    uint32_t len;
    uint32_t count; /* tokens */
    size_t first;   /* into the output ids */
} cache_slot_t;

typedef struct {
    const zero_tokenizer_t *tok;
    int32_t *ids; /* output */
    size_t count, cap;
    sym_t *syms;
    cand_t *heap;
    size_t sym_cap, heap_cap, heap_n;
    cache_slot_t *cache;
    size_t cache_cap, cache_used;
} enc_t;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static int cand_less(const cand_t *a, const cand_t *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc_t *e, cand_t c) { /* heap_cap >= pieces' pair pushes: see merge */
    size_t i = e->heap_n++;
    while (i > 0 && cand_less(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static cand_t heap_pop(enc_t *e) {
    cand_t top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand_t *best = &last;
        if (l < e->heap_n && cand_less(&e->heap[l], best)) m = l, best = &e->heap[l];
        if (l + 1 < e->heap_n && cand_less(&e->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (e->heap_n) e->heap[i] = last;
    return top;
}

static void push_pair(enc_t *e, int pos) {
    const sym_t *s = &e->syms[pos];
    if (s->next < 0) return;
    const zero_bpe_merge_t *m = zero__bpe_merge_find(e->tok, s->id, e->syms[s->next].id);
    if (m) heap_push(e, (cand_t){m->rank, pos, m->id});
}

/* The piece p[0..n) (n > 0) as tokens appended to e->ids. */
static zero_status_t merge_piece(enc_t *e, const unsigned char *p, size_t n, size_t offset) {
    /* each merge pushes at most 2 pairs, and there are fewer than n merges */
    if (!grow((void **)&e->syms, &e->sym_cap, n, sizeof *e->syms) ||
        !grow((void **)&e->heap, &e->heap_cap, 3 * n, sizeof *e->heap))
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory (a %zu-byte piece)", n);
    for (size_t i = 0; i < n; i++) {
        const int32_t id = e->tok->byte_id[p[i]];
        if (id < 0)
            return zero__error(ZERO_ERR_FORMAT,
                               "tokenizer '%s' has no token for byte 0x%02x (at offset %zu of "
                               "the text): expected all 256 byte symbols in its vocabulary",
                               e->tok->path, p[i], offset + i);
        e->syms[i] = (sym_t){id, (int)i - 1, i + 1 < n ? (int)i + 1 : -1, 1};
    }
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(e, (int)i);
    while (e->heap_n) {
        const cand_t c = heap_pop(e);
        sym_t *s = &e->syms[c.pos];
        if (!s->alive || s->next < 0) continue;
        sym_t *r = &e->syms[s->next];
        const zero_bpe_merge_t *m = zero__bpe_merge_find(e->tok, s->id, r->id);
        if (!m || m->id != c.id) continue; /* the pair has changed since it was pushed */
        s->id = c.id;
        r->alive = 0;
        s->next = r->next;
        if (s->next >= 0) e->syms[s->next].prev = c.pos;
        if (s->prev >= 0) push_pair(e, s->prev);
        push_pair(e, c.pos);
    }
    if (!grow((void **)&e->ids, &e->cap, e->count + n, sizeof *e->ids))
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory (%zu tokens)",
                           e->count + n);
    for (int i = 0; i >= 0; i = e->syms[i].next) e->ids[e->count++] = e->syms[i].id;
    return ZERO_OK;
}

/* The piece, from the cache or merged (and then cached). */
static zero_status_t encode_piece(enc_t *e, const unsigned char *p, size_t n, size_t offset) {
    enum { CACHE_MAX_BYTES = 64, CACHE_MAX_ENTRIES = 1 << 20 };
    if (n > CACHE_MAX_BYTES) return merge_piece(e, p, n, offset);
    if (!e->cache_cap) {
        e->cache_cap = 1 << 12;
        e->cache = calloc(e->cache_cap, sizeof *e->cache);
        if (!e->cache) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory");
    }
    size_t i = (size_t)zero__hash_bytes(0x9e3779b97f4a7c15ull, p, n) & (e->cache_cap - 1);
    while (e->cache[i].key && (e->cache[i].len != n || memcmp(e->cache[i].key, p, n) != 0))
        i = (i + 1) & (e->cache_cap - 1);
    if (e->cache[i].key) {
        const cache_slot_t *c = &e->cache[i];
        if (!grow((void **)&e->ids, &e->cap, e->count + c->count, sizeof *e->ids))
            return zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory");
        memcpy(e->ids + e->count, e->ids + c->first, c->count * sizeof *e->ids);
        e->count += c->count;
        return ZERO_OK;
    }
    const size_t first = e->count;
    zero_status_t st = merge_piece(e, p, n, offset);
    if (st || e->cache_used >= CACHE_MAX_ENTRIES) return st;
    e->cache[i] = (cache_slot_t){p, (uint32_t)n, (uint32_t)(e->count - first), first};
    if (++e->cache_used * 2 > e->cache_cap) { /* rehash at half full */
        cache_slot_t *old = e->cache;
        const size_t old_cap = e->cache_cap;
        cache_slot_t *grown = calloc(old_cap * 2, sizeof *grown);
        if (!grown) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory");
        e->cache = grown;
        e->cache_cap = old_cap * 2;
        for (size_t k = 0; k < old_cap; k++) {
            if (!old[k].key) continue;
            size_t j = (size_t)zero__hash_bytes(0x9e3779b97f4a7c15ull, old[k].key, old[k].len) &
                       (e->cache_cap - 1);
            while (e->cache[j].key) j = (j + 1) & (e->cache_cap - 1);
            e->cache[j] = old[k];
        }
        free(old);
    }
    return ZERO_OK;
}

zero_status_t zero_tokenizer_encode(const zero_tokenizer_t *tok, const void *text, size_t bytes,
                                    int32_t **ids, size_t *count) {
    if (!tok || !ids || !count || (bytes && !text))
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_tokenizer_encode: null argument");
    *ids = NULL;
    *count = 0;
    if (tok->cannot_encode[0]) return zero__error(ZERO_ERR_UNSUPPORTED, "%s", tok->cannot_encode);
    const unsigned char *s = text;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    enc_t e = {.tok = tok};
    zero_status_t st = md ? ZERO_OK : zero__error(ZERO_ERR_OUT_OF_MEMORY, "encode: out of memory");
    size_t pos = 0;
    while (!st && pos < bytes) {
        int rc = pcre2_match((const pcre2_code *)tok->regex, s, bytes, pos, 0, md, NULL);
        size_t start = bytes, end = bytes;
        if (rc > 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            start = ov[0];
            end = ov[1] > ov[0] ? ov[1] : ZERO_MIN(ov[0] + 1, bytes); /* never empty */
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = zero__error(ZERO_ERR_INTERNAL, "encode: pre-tokenizer failed at byte %zu: %s", pos,
                             (const char *)msg);
            break;
        }
        /* bytes no match covers (not UTF-8) form one piece of their own */
        if (start > pos) st = encode_piece(&e, s + pos, start - pos, pos);
        if (!st && end > start) st = encode_piece(&e, s + start, end - start, start);
        pos = end;
    }
    pcre2_match_data_free(md);
    free(e.syms);
    free(e.heap);
    free(e.cache);
    if (st) {
        free(e.ids);
        return st;
    }
    *ids = e.ids;
    *count = e.count;
    return ZERO_OK;
}
