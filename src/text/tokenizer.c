/* tokenizer.c — loading GPT-2 tokenizer files into the tables of text_internal.h, and decoding:
 * Hugging Face's vocab.json + merges.txt and tokenizer.json, llm.c's gpt2_tokenizer.bin.
 *
 * Not here: encoding (bpe.c). Vocabulary strings are byte-level: each byte of a token is one
 * visible character (GPT-2's bytes_to_unicode), so the loader maps them back to bytes for
 * decoding and resolves every merge to ids, its strings to a pair of ids and its result to the
 * id of their concatenation, as Hugging Face's BPE model does; the strings are not kept.
 * Invariant after init: every id in [0, vocab) with token_bytes >= 0 has its bytes at
 * blob + token_offset, and every merge's ids are < vocab.
 */
#include "text/text_internal.h"

#include "core/core_internal.h"
#include "core/fileio.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define LLMC_TOKENIZER_MAGIC 20240328
#define LLMC_HEADER_INTS 256
#define MAX_FILE_BYTES ((size_t)1 << 30)
#define MAX_ID (1 << 24) /* model.vocab's upper bound */

/* ------------------------------------------------------------------------ byte-level strings */

/* GPT-2's bytes_to_unicode: the printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC,
 * U+00AE..U+00FF) stand for themselves, the other 68 (0..32, 127..160, 173) for U+0100..U+0143
 * in byte order. */
static int printable(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static uint32_t byte_char(int b) {
    if (printable(b)) return (uint32_t)b;
    return b <= 32 ? 256u + (uint32_t)b : b <= 160 ? 289u + (uint32_t)(b - 127) : 323u;
}

/* The byte a code point stands for, or -1. */
static int char_byte(uint32_t cp) {
    if (cp < 256) return printable((int)cp) ? (int)cp : -1;
    return cp <= 288 ? (int)cp - 256 : cp <= 322 ? (int)cp - 289 + 127 : cp == 323 ? 173 : -1;
}

static size_t utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), 2;
    out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 63));
    out[2] = (char)(0x80 | (cp & 63));
    return 3; /* byte_char's code points are below U+0144 */
}

/* The next code point of s[0..n) (n > 0) and its length; *cp = UINT32_MAX if not UTF-8. */
static size_t utf8_get(const unsigned char *s, size_t n, uint32_t *cp) {
    int len = s[0] < 0x80         ? 1
              : (s[0] >> 5) == 6  ? 2
              : (s[0] >> 4) == 14 ? 3
              : (s[0] >> 3) == 30 ? 4
                                  : 0;
    *cp = UINT32_MAX;
    if (!len || (size_t)len > n) return 1;
    uint32_t v = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 1;
        v = v << 6 | (s[i] & 63);
    }
    *cp = v;
    return (size_t)len;
}

/* The bytes a vocabulary string stands for, into out (at least strlen(s) bytes): each character
 * mapped back through bytes_to_unicode, or, when one of them is not such a character (an added
 * token's text), the string's own UTF-8 — what Hugging Face's ByteLevel decoder does. */
static size_t string_bytes(const char *s, char *out) {
    const size_t n = strlen(s);
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_get((const unsigned char *)s + i, n - i, &cp);
        int b = cp == UINT32_MAX ? -1 : char_byte(cp);
        if (b < 0) {
            memcpy(out, s, n);
            return n;
        }
        out[k++] = (char)b;
    }
    return k;
}

/* ------------------------------------------------------------------------ load-time string map */

typedef struct {
    const char *key; /* borrowed from the parsed file */
    int32_t id;
} str_slot_t;

typedef struct {
    str_slot_t *slots;
    size_t cap; /* a power of two */
} str_map_t;

static size_t str_hash(const char *s, size_t len) {
    return (size_t)zero__hash_bytes(0x9e3779b97f4a7c15ull, s, len);
}

static str_slot_t *str_slot(const str_map_t *m, const char *key, size_t len) {
    size_t i = str_hash(key, len) & (m->cap - 1);
    while (m->slots[i].key &&
           (strlen(m->slots[i].key) != len || memcmp(m->slots[i].key, key, len) != 0))
        i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

static int32_t str_find(const str_map_t *m, const char *key, size_t len) {
    const str_slot_t *s = str_slot(m, key, len);
    return s->key ? s->id : -1;
}

/* ------------------------------------------------------------------------ building */

const zero_bpe_merge_t *zero__bpe_merge_find(const zero_tokenizer_t *tok, int32_t a, int32_t b) {
    if (!tok->merge_cap) return NULL;
    const uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = (size_t)(pair * 0x9e3779b97f4a7c15ull >> 20) & (tok->merge_cap - 1);
    while (tok->merges[i].pair != UINT64_MAX) {
        if (tok->merges[i].pair == pair) return &tok->merges[i];
        i = (i + 1) & (tok->merge_cap - 1);
    }
    return NULL;
}

/* A later merge of the same pair replaces the earlier one (Hugging Face collects the list
 * into a map the same way). */
static void merge_put(zero_tokenizer_t *tok, int32_t a, int32_t b, uint32_t rank, int32_t id) {
    const uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = (size_t)(pair * 0x9e3779b97f4a7c15ull >> 20) & (tok->merge_cap - 1);
    while (tok->merges[i].pair != UINT64_MAX && tok->merges[i].pair != pair)
        i = (i + 1) & (tok->merge_cap - 1);
    tok->merges[i] = (zero_bpe_merge_t){pair, rank, id};
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* The decode table for ids [0, vocab), every entry empty. */
static zero_status_t table_alloc(zero_tokenizer_t *tok, int vocab, size_t blob_bytes) {
    tok->vocab = vocab;
    tok->token_offset = calloc((size_t)vocab, sizeof *tok->token_offset);
    tok->token_bytes = malloc((size_t)vocab * sizeof *tok->token_bytes);
    tok->blob = malloc(blob_bytes + 1);
    if (!tok->token_offset || !tok->token_bytes || !tok->blob)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "tokenizer '%s': cannot hold %d tokens",
                           tok->path, vocab);
    for (int i = 0; i < vocab; i++) tok->token_bytes[i] = -1;
    return ZERO_OK;
}

/* A vocabulary (JSON object string -> id) and added tokens (tokenizer.json's list, or NULL)
 * into the decode table and *map (which borrows the JSON's strings). */
static zero_status_t load_vocab(zero_tokenizer_t *tok, const cJSON *vocab, const cJSON *added,
                                str_map_t *map) {
    if (!cJSON_IsObject(vocab))
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s': the vocabulary is not a JSON object (expected "
                           "{\"token\": id, ...})",
                           tok->path);
    size_t n = 0, blob = 0;
    int max_id = -1;
    for (const cJSON *it = vocab->child; it; it = it->next, n++) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!cJSON_IsNumber(it))
            return zero__error(ZERO_ERR_FORMAT,
                               "tokenizer '%s': vocabulary entry \"%.60s\" has an id that is not "
                               "a number (expected an integer 0..%d)",
                               tok->path, it->string, MAX_ID - 1);
        if (!(v >= 0 && v < MAX_ID && v == (double)(int)v))
            return zero__error(ZERO_ERR_FORMAT,
                               "tokenizer '%s': vocabulary entry \"%.60s\" has id %g (expected "
                               "an integer 0..%d)",
                               tok->path, it->string, v, MAX_ID - 1);
        max_id = ZERO_MAX(max_id, (int)v);
        blob += strlen(it->string);
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!cJSON_IsString(content) || !(v >= 0 && v < MAX_ID && v == (double)(int)v))
            return zero__error(ZERO_ERR_FORMAT,
                               "tokenizer '%s': an added_tokens entry lacks an integer \"id\" "
                               "0..%d or a string \"content\"",
                               tok->path, MAX_ID - 1);
        max_id = ZERO_MAX(max_id, (int)v);
        blob += strlen(content->valuestring);
    }
    if (max_id < 0)
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s': the vocabulary is empty (expected tokens)", tok->path);
    zero_status_t st = table_alloc(tok, max_id + 1, blob);
    if (st) return st;
    map->cap = pow2_at_least(2 * n);
    map->slots = calloc(map->cap, sizeof *map->slots);
    if (!map->slots)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "tokenizer '%s': out of memory", tok->path);
    size_t off = 0;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        const int id = (int)it->valuedouble;
        str_slot_t *s = str_slot(map, it->string, strlen(it->string));
        *s = (str_slot_t){it->string, id}; /* a repeated string: the last one wins, as in HF */
        if (tok->token_bytes[id] >= 0)
            return zero__error(ZERO_ERR_FORMAT,
                               "tokenizer '%s': id %d is given to two tokens, the second "
                               "\"%.60s\" (expected one token per id)",
                               tok->path, id, it->string);
        tok->token_offset[id] = off;
        tok->token_bytes[id] = (int32_t)string_bytes(it->string, tok->blob + off);
        off += (size_t)tok->token_bytes[id];
    }
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next) {
        const int id = (int)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        const char *text = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        if (tok->token_bytes[id] >= 0) continue; /* GPT-2's <|endoftext|> is in both */
        tok->token_offset[id] = off;
        tok->token_bytes[id] = (int32_t)string_bytes(text, tok->blob + off);
        off += (size_t)tok->token_bytes[id];
        if (!strcmp(text, "<|endoftext|>")) tok->eot = id;
    }
    const int32_t eot = str_find(map, "<|endoftext|>", 13);
    if (eot >= 0) tok->eot = eot;
    for (int b = 0; b < 256; b++) {
        char s[4];
        tok->byte_id[b] = str_find(map, s, utf8_put(s, byte_char(b)));
    }
    return ZERO_OK;
}

/* Merge `rank` ("left right") into the table: both tokens and their concatenation must be in
 * the vocabulary. `where` says where the merge was read ("line 12", "merges[11]"). */
static zero_status_t add_merge(zero_tokenizer_t *tok, const str_map_t *map, const char *left,
                               size_t left_len, const char *right, size_t right_len, uint32_t rank,
                               const char *file, const char *where) {
    const int32_t a = str_find(map, left, left_len), b = str_find(map, right, right_len);
    if (a < 0 || b < 0)
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s', %s: the merge \"%.*s %.*s\" names \"%.*s\", which is "
                           "not in the vocabulary (expected two tokens of the vocabulary)",
                           file, where, (int)ZERO_MIN(left_len, 60), left,
                           (int)ZERO_MIN(right_len, 60), right,
                           (int)ZERO_MIN(a < 0 ? left_len : right_len, 60), a < 0 ? left : right);
    char buf[512];
    if (left_len + right_len > sizeof buf)
        return zero__error(ZERO_ERR_FORMAT, "tokenizer '%s', %s: a merge of %zu bytes is too long",
                           file, where, left_len + right_len);
    memcpy(buf, left, left_len);
    memcpy(buf + left_len, right, right_len);
    const int32_t id = str_find(map, buf, left_len + right_len);
    if (id < 0)
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s', %s: the merge \"%.*s %.*s\" makes \"%.*s\", which is "
                           "not in the vocabulary (expected every merge's result to be a token)",
                           file, where, (int)ZERO_MIN(left_len, 60), left,
                           (int)ZERO_MIN(right_len, 60), right,
                           (int)ZERO_MIN(left_len + right_len, 120), buf);
    merge_put(tok, a, b, rank, id);
    return ZERO_OK;
}

static zero_status_t merges_alloc(zero_tokenizer_t *tok, size_t n) {
    tok->merge_cap = pow2_at_least(2 * n);
    tok->merges = malloc(tok->merge_cap * sizeof *tok->merges);
    if (!tok->merges)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "tokenizer '%s': cannot hold %zu merges",
                           tok->path, n);
    for (size_t i = 0; i < tok->merge_cap; i++) tok->merges[i].pair = UINT64_MAX;
    return ZERO_OK;
}

/* merges.txt as Hugging Face reads it: lines (a final newline ends the last one; "\r\n"
 * counts as "\n"), a line starting with "#version" skipped, every other line exactly two
 * tokens split by one space, ranked in file order. */
static zero_status_t load_merges_txt(zero_tokenizer_t *tok, const str_map_t *map,
                                     const char *path) {
    char *text = NULL;
    size_t n = 0;
    zero_status_t st = zero__read_file(path, MAX_FILE_BYTES, &text, &n);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", zero_last_error());
        return zero__error(st, "tokenizer '%s': merges: %s", tok->path, why);
    }
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    st = merges_alloc(tok, lines);
    uint32_t rank = 0;
    size_t line_no = 0;
    for (size_t i = 0; i < n && !st;) {
        const char *line = text + i, *nl = memchr(line, '\n', n - i);
        size_t len = nl ? (size_t)(nl - line) : n - i;
        i += len + 1;
        line_no++;
        if (len && line[len - 1] == '\r') len--;
        if (len >= 8 && !memcmp(line, "#version", 8)) continue;
        const char *sp = memchr(line, ' ', len);
        char where[32];
        snprintf(where, sizeof where, "line %zu", line_no);
        if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - line)))
            st = zero__error(ZERO_ERR_FORMAT,
                             "tokenizer merges '%s', %s: \"%.*s\" is not two tokens (expected "
                             "\"left right\", one space between)",
                             path, where, (int)ZERO_MIN(len, 80), line);
        else
            st = add_merge(tok, map, line, (size_t)(sp - line), sp + 1,
                           len - (size_t)(sp + 1 - line), rank++, path, where);
    }
    free(text);
    return st;
}

/* tokenizer.json's model.merges: "left right" strings (tokenizers < 0.20) or [left, right]
 * pairs (later versions). */
static zero_status_t load_merges_json(zero_tokenizer_t *tok, const str_map_t *map,
                                      const cJSON *merges) {
    if (!cJSON_IsArray(merges))
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s': model.merges is missing or not a list (expected "
                           "[\"left right\", ...] or [[\"left\", \"right\"], ...])",
                           tok->path);
    zero_status_t st = merges_alloc(tok, (size_t)cJSON_GetArraySize(merges));
    uint32_t rank = 0;
    for (const cJSON *m = merges->child; m && !st; m = m->next, rank++) {
        char where[40];
        snprintf(where, sizeof where, "model.merges[%u]", rank);
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' '))
                l = s, ll = (size_t)(sp - s), r = sp + 1, rl = strlen(r);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            l = m->child->valuestring, ll = strlen(l);
            r = m->child->next->valuestring, rl = strlen(r);
        }
        if (!l)
            st = zero__error(ZERO_ERR_FORMAT,
                             "tokenizer '%s', %s is not two tokens (expected \"left right\" or "
                             "[\"left\", \"right\"])",
                             tok->path, where);
        else
            st = add_merge(tok, map, l, ll, r, rl, rank, tok->path, where);
    }
    return st;
}

static int is_null_or_false(const cJSON *j) { return !j || cJSON_IsNull(j) || cJSON_IsFalse(j); }

/* What this encoder does not do that a tokenizer.json asks for: the reason, or NULL. */
static const char *unsupported_json(const cJSON *root, const cJSON *model) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel"))
            return "its pre_tokenizer is not GPT-2's ByteLevel";
        if (!is_null_or_false(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
            return "its ByteLevel pre_tokenizer adds a prefix space";
        const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
        if (use_regex && cJSON_IsFalse(use_regex))
            return "its ByteLevel pre_tokenizer does not split with GPT-2's regex";
    }
    const cJSON *normalizer = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (normalizer && !cJSON_IsNull(normalizer)) return "it has a normalizer";
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix", "ignore_merges",
                          "byte_fallback"};
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, keys[i]);
        if (!is_null_or_false(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return keys[i][0] == 'c'   ? "its model sets continuing_subword_prefix"
                   : keys[i][0] == 'e' ? "its model sets end_of_word_suffix"
                   : keys[i][0] == 'i' ? "its model sets ignore_merges"
                                       : "its model sets byte_fallback";
    }
    return NULL;
}

static zero_status_t parse_json(zero_tokenizer_t *tok, const char *text, size_t n, cJSON **out) {
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!*out)
        return zero__error(ZERO_ERR_FORMAT,
                           "tokenizer '%s' is not valid JSON (near byte %zu) nor llm.c's "
                           "tokenizer file (expected a Hugging Face vocab.json or tokenizer.json, "
                           "or llm.c's gpt2_tokenizer.bin)",
                           tok->path, end && end >= text ? (size_t)(end - text) : (size_t)0);
    return ZERO_OK;
}

/* merges.txt beside a vocab.json: "merges.txt" in its directory, or PREFIX-merges.txt for a
 * PREFIX-vocab.json (Megatron's gpt2-vocab.json, gpt2-merges.txt). */
static void merges_path_of(const char *vocab_path, char *out, size_t n) {
    const char *slash = strrchr(vocab_path, '/');
    const char *name = slash ? slash + 1 : vocab_path;
    const size_t dir_len = (size_t)(name - vocab_path), name_len = strlen(name);
    const size_t prefix =
        name_len >= 10 && !strcmp(name + name_len - 10, "vocab.json") ? name_len - 10 : 0;
    snprintf(out, n, "%.*smerges.txt", (int)(dir_len + prefix), vocab_path);
}

static zero_status_t load_json(zero_tokenizer_t *tok, const char *text, size_t n) {
    cJSON *root = NULL;
    str_map_t map = {0};
    zero_status_t st = parse_json(tok, text, n, &root);
    if (st) return st;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model) { /* tokenizer.json */
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "tokenizer '%s': model.type is %s%s%s (expected \"BPE\")", tok->path,
                             cJSON_IsString(type) ? "\"" : "",
                             cJSON_IsString(type) ? type->valuestring : "missing",
                             cJSON_IsString(type) ? "\"" : "");
            goto done;
        }
        st = load_vocab(tok, cJSON_GetObjectItemCaseSensitive(model, "vocab"),
                        cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &map);
        if (!st)
            st = load_merges_json(tok, &map, cJSON_GetObjectItemCaseSensitive(model, "merges"));
        const char *why = st ? NULL : unsupported_json(root, model);
        if (why)
            snprintf(tok->cannot_encode, sizeof tok->cannot_encode,
                     "tokenizer '%s' cannot encode: %s (this encoder is GPT-2's)", tok->path, why);
    } else { /* vocab.json, merges.txt beside it */
        st = load_vocab(tok, root, NULL, &map);
        char merges[ZERO_TOKENIZER_PATH_MAX + 16];
        merges_path_of(tok->path, merges, sizeof merges);
        struct stat sb;
        if (!st && stat(merges, &sb) != 0)
            snprintf(tok->cannot_encode, sizeof tok->cannot_encode,
                     "tokenizer '%s' cannot encode: no merges file '%s' beside it (expected "
                     "Hugging Face's merges.txt next to vocab.json)",
                     tok->path, merges);
        else if (!st)
            st = load_merges_txt(tok, &map, merges);
    }
done:
    free(map.slots);
    cJSON_Delete(root);
    return st;
}

static int32_t rd32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* llm.c's gpt2_tokenizer.bin: 256 int32 (magic, version 1 or 2, token count, version 2's
 * end-of-text id), then per token a uint8 length and that many bytes. */
static zero_status_t load_llmc(zero_tokenizer_t *tok, const unsigned char *p, size_t n) {
    const size_t header = LLMC_HEADER_INTS * 4;
    if (n < header)
        return zero__error(ZERO_ERR_FORMAT,
                           "llm.c tokenizer '%s' is %zu bytes, shorter than its %zu-byte header",
                           tok->path, n, header);
    const int32_t version = rd32(p + 4), count = rd32(p + 8);
    if (version != 1 && version != 2)
        return zero__error(ZERO_ERR_FORMAT, "llm.c tokenizer '%s' has version %d (expected 1 or 2)",
                           tok->path, (int)version);
    if (count < 1 || count > MAX_ID)
        return zero__error(ZERO_ERR_FORMAT,
                           "llm.c tokenizer '%s' announces %d tokens (expected 1..%d)", tok->path,
                           (int)count, MAX_ID);
    zero_status_t st = table_alloc(tok, count, n - header);
    if (st) return st;
    /* version 1 files are GPT-2's, whose end of text is its last token (llm.c assumes it) */
    const int32_t eot = version == 2 ? rd32(p + 12) : count == 50257 ? 50256 : -1;
    tok->eot = eot >= 0 && eot < count ? eot : -1;
    size_t off = header, blob = 0;
    for (int32_t i = 0; i < count; i++) {
        const size_t len = off < n ? p[off] : 0;
        if (off >= n || len == 0 || n - off - 1 < len)
            return zero__error(ZERO_ERR_FORMAT,
                               "llm.c tokenizer '%s': token %d at byte %zu is %s (expected %d "
                               "tokens, each a length byte > 0 and that many bytes)",
                               tok->path, (int)i, off,
                               off >= n   ? "past the end of the file"
                               : len == 0 ? "empty"
                                          : "cut short by the end of the file",
                               (int)count);
        memcpy(tok->blob + blob, p + off + 1, len);
        tok->token_offset[i] = blob;
        tok->token_bytes[i] = (int32_t)len;
        blob += len;
        off += 1 + len;
    }
    if (off != n)
        return zero__error(ZERO_ERR_FORMAT,
                           "llm.c tokenizer '%s' has %zu bytes after its %d tokens (expected the "
                           "file to end there)",
                           tok->path, n - off, (int)count);
    snprintf(tok->cannot_encode, sizeof tok->cannot_encode,
             "tokenizer '%s' cannot encode: llm.c's tokenizer file holds each token's bytes but "
             "no merges (give Hugging Face's vocab.json + merges.txt or tokenizer.json)",
             tok->path);
    return ZERO_OK;
}

static zero_status_t load_path(zero_tokenizer_t *tok, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return zero__error(ZERO_ERR_IO,
                           "cannot open tokenizer '%s': %s (expected a vocab.json, tokenizer.json "
                           "or llm.c's gpt2_tokenizer.bin)",
                           path, strerror(errno));
    char file[ZERO_TOKENIZER_PATH_MAX];
    snprintf(file, sizeof file, "%s", path);
    if (S_ISDIR(sb.st_mode)) {
        const char *sep = path[strlen(path) - 1] == '/' ? "" : "/";
        snprintf(file, sizeof file, "%s%stokenizer.json", path, sep);
        if (stat(file, &sb) != 0) snprintf(file, sizeof file, "%s%svocab.json", path, sep);
        if (stat(file, &sb) != 0)
            return zero__error(ZERO_ERR_IO,
                               "tokenizer directory '%s' holds neither tokenizer.json nor "
                               "vocab.json (expected Hugging Face's files)",
                               path);
    }
    snprintf(tok->path, sizeof tok->path, "%s", file);
    char *text = NULL;
    size_t n = 0;
    zero_status_t st = zero__read_file(file, MAX_FILE_BYTES, &text, &n);
    if (st) {
        char why[400];
        snprintf(why, sizeof why, "%s", zero_last_error());
        return zero__error(st, "cannot read tokenizer: %s", why);
    }
    if (n >= 4 && rd32((const unsigned char *)text) == LLMC_TOKENIZER_MAGIC)
        st = load_llmc(tok, (const unsigned char *)text, n);
    else
        st = load_json(tok, text, n);
    free(text);
    return st;
}

/* ------------------------------------------------------------------------ public API */

zero_status_t zero_tokenizer_init(zero_tokenizer_t **out, const char *path) {
    if (!out || !path || !path[0])
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_tokenizer_init: no path given");
    *out = NULL;
    if (strlen(path) >= ZERO_TOKENIZER_PATH_MAX - 16)
        return zero__error(ZERO_ERR_INVALID_ARG, "tokenizer path '%.80s...' is too long", path);
    zero_tokenizer_t *tok = calloc(1, sizeof *tok);
    if (!tok) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot allocate a tokenizer");
    tok->eot = -1;
    zero_status_t st = load_path(tok, path);
    if (!st && !tok->cannot_encode[0]) st = zero__bpe_regex_init(tok);
    if (st) {
        zero_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return ZERO_OK;
}

void zero_tokenizer_free(zero_tokenizer_t *tok) {
    if (!tok) return;
    zero__bpe_regex_free(tok);
    free(tok->token_offset);
    free(tok->token_bytes);
    free(tok->blob);
    free(tok->merges);
    free(tok);
}

int zero_tokenizer_vocab(const zero_tokenizer_t *tok) { return tok->vocab; }

int32_t zero_tokenizer_eot(const zero_tokenizer_t *tok) { return tok->eot; }

const char *zero_tokenizer_token(const zero_tokenizer_t *tok, int32_t id, size_t *bytes) {
    if (id < 0 || id >= tok->vocab || tok->token_bytes[id] < 0) return NULL;
    if (bytes) *bytes = (size_t)tok->token_bytes[id];
    return tok->blob + tok->token_offset[id];
}

zero_status_t zero_tokenizer_decode(const zero_tokenizer_t *tok, const int32_t *ids, size_t count,
                                    char **text, size_t *bytes) {
    if (!tok || !text || (count && !ids))
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_tokenizer_decode: null argument");
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        size_t len = 0;
        if (!zero_tokenizer_token(tok, ids[i], &len))
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "token id %d at index %zu is %s tokenizer '%s' (expected ids "
                               "0..%d)",
                               (int)ids[i], i,
                               ids[i] < 0 || ids[i] >= tok->vocab ? "outside"
                                                                  : "a gap (no token) in",
                               tok->path, tok->vocab - 1);
        total += len;
    }
    char *out = malloc(total + 1);
    if (!out)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot decode %zu tokens (%zu bytes)", count,
                           total);
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(out + k, tok->blob + tok->token_offset[ids[i]], (size_t)tok->token_bytes[ids[i]]);
        k += (size_t)tok->token_bytes[ids[i]];
    }
    out[k] = 0;
    *text = out;
    if (bytes) *bytes = k;
    return ZERO_OK;
}
