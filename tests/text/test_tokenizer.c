/* test_tokenizer.c — the GPT-2 BPE tokenizer (src/text, zero/tokenizer.h) on files written here.
 *
 * Vocabularies are written as Hugging Face does (vocab.json with byte-level strings, the byte
 * map re-derived here from GPT-2's bytes_to_unicode as OpenAI's encoder.py writes it; merges.txt
 * with a "#version" line), as tokenizer.json (merges as strings and as pairs) and as llm.c's
 * gpt2_tokenizer.bin (header and length-prefixed bytes, both versions). Checks:
 * - hand-worked encodings: merges by rank, ties leftmost, contractions, letters against
 *   numbers, runs of spaces (the (?!\S) rule) and a trailing run;
 * - random merges learned in order (each merge's parts made earlier, as training makes them)
 *   against GPT-2's textbook loop (merge every occurrence of the lowest-ranked pair, repeat),
 *   a naive implementation here, over random words and texts;
 * - decode(encode(x)) == x for random bytes (invalid UTF-8 included) and for every byte alone;
 * - two threads encoding one tokenizer at once get the single thread's ids;
 * - llm.c's file decodes as the vocabulary it was written from;
 * - bad files and calls each fail with the status and a message naming the file and the thing;
 *   600 randomly corrupted copies of good files each load (and encode and decode) or fail
 *   naming the file, without crashing.
 */
#include "check.h"

#include "zero/tokenizer.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_str(const char *path, const char *s) { write_file(path, s, strlen(s)); }

/* ------------------------------------------------------------------------ a vocabulary */

#define MAX_TOKENS 1024
#define MAX_MERGES 512

typedef struct {
    unsigned char bytes[64];
    int len;
} token_t;

static token_t tokens[MAX_TOKENS];
static int n_tokens;
static int merge_l[MAX_MERGES], merge_r[MAX_MERGES], merge_out[MAX_MERGES], n_merges;
static uint32_t byte_cp[256]; /* GPT-2's bytes_to_unicode */

/* encoder.py: bs = printable ranges; cs = bs; for b in 0..255 not in bs: bs += b, cs += 256+n */
static void make_byte_map(void) {
    int in_bs[256] = {0}, n = 0;
    for (int b = '!'; b <= '~'; b++) in_bs[b] = 1;
    for (int b = 0xA1; b <= 0xAC; b++) in_bs[b] = 1;
    for (int b = 0xAE; b <= 0xFF; b++) in_bs[b] = 1;
    for (int b = 0; b < 256; b++) byte_cp[b] = in_bs[b] ? (uint32_t)b : (uint32_t)(256 + n++);
}

/* The byte-level string of a token, JSON-escaped when json (out: room for 8 bytes a byte). */
static void level_string(const token_t *t, int json, char *out) {
    size_t k = 0;
    for (int i = 0; i < t->len; i++) {
        uint32_t c = byte_cp[t->bytes[i]];
        if (json && (c == '"' || c == '\\')) out[k++] = '\\';
        if (c < 0x80) {
            out[k++] = (char)c;
        } else {
            out[k++] = (char)(0xC0 | c >> 6);
            out[k++] = (char)(0x80 | (c & 63));
        }
    }
    out[k] = 0;
}

static int find_token(const unsigned char *b, int len) {
    for (int i = 0; i < n_tokens; i++)
        if (tokens[i].len == len && !memcmp(tokens[i].bytes, b, (size_t)len)) return i;
    return -1;
}

static int add_token(const unsigned char *b, int len) {
    int id = find_token(b, len);
    if (id >= 0) return id;
    memcpy(tokens[n_tokens].bytes, b, (size_t)len);
    tokens[n_tokens].len = len;
    return n_tokens++;
}

static void add_merge(int l, int r) {
    unsigned char b[64];
    memcpy(b, tokens[l].bytes, (size_t)tokens[l].len);
    memcpy(b + tokens[l].len, tokens[r].bytes, (size_t)tokens[r].len);
    merge_l[n_merges] = l, merge_r[n_merges] = r;
    merge_out[n_merges++] = add_token(b, tokens[l].len + tokens[r].len);
}

static int merge_of(const char *l, const char *r) {
    int a = find_token((const unsigned char *)l, (int)strlen(l));
    int b = find_token((const unsigned char *)r, (int)strlen(r));
    add_merge(a, b);
    return merge_out[n_merges - 1];
}

static void reset_vocab(void) {
    n_tokens = n_merges = 0;
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        add_token(&c, 1);
    }
}

/* vocab.json (ids in order, the first `skip_bytes` byte tokens left out) and merges.txt. */
static void write_hf(const char *vocab_name, const char *merges_name, int skip_bytes) {
    char p[512], s[600];
    size_t cap = (size_t)n_tokens * 600 + 64, k = 0;
    char *buf = malloc(cap);
    k += (size_t)sprintf(buf, "{");
    for (int i = skip_bytes; i < n_tokens; i++) {
        level_string(&tokens[i], 1, s);
        k += (size_t)sprintf(buf + k, "%s\"%s\": %d", i > skip_bytes ? ", " : "", s, i);
    }
    k += (size_t)sprintf(buf + k, "}\n");
    path_of(p, sizeof p, vocab_name);
    write_file(p, buf, k);
    if (merges_name) {
        k = (size_t)sprintf(buf, "#version: 0.2\n");
        for (int m = 0; m < n_merges; m++) {
            char a[600], b[600];
            level_string(&tokens[merge_l[m]], 0, a);
            level_string(&tokens[merge_r[m]], 0, b);
            k += (size_t)sprintf(buf + k, "%s %s\n", a, b);
        }
        path_of(p, sizeof p, merges_name);
        write_file(p, buf, k);
    }
    free(buf);
}

/* tokenizer.json: model.vocab, model.merges as "a b" strings or ["a", "b"] pairs. */
static void write_tokenizer_json(const char *name, int pairs) {
    char p[512], s[600], t[600];
    size_t cap = (size_t)(n_tokens + n_merges) * 1300 + 1024, k = 0;
    char *buf = malloc(cap);
    k += (size_t)sprintf(buf, "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": null, "
                              "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
                              "false, \"trim_offsets\": true, \"use_regex\": true}, \"model\": "
                              "{\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                              "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                              "\"fuse_unk\": false, \"byte_fallback\": false, \"vocab\": {");
    for (int i = 0; i < n_tokens; i++) {
        level_string(&tokens[i], 1, s);
        k += (size_t)sprintf(buf + k, "%s\"%s\": %d", i ? ", " : "", s, i);
    }
    k += (size_t)sprintf(buf + k, "}, \"merges\": [");
    for (int m = 0; m < n_merges; m++) {
        level_string(&tokens[merge_l[m]], 1, s);
        level_string(&tokens[merge_r[m]], 1, t);
        k += (size_t)sprintf(buf + k, pairs ? "%s[\"%s\", \"%s\"]" : "%s\"%s %s\"", m ? ", " : "",
                             s, t);
    }
    k += (size_t)sprintf(buf + k, "]}}\n");
    path_of(p, sizeof p, name);
    write_file(p, buf, k);
    free(buf);
}

static void put32(unsigned char *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* llm.c's gpt2_tokenizer.bin of the vocabulary; returns its size. */
static size_t write_llmc(const char *name, int version, int eot, size_t cut) {
    size_t cap = 1024 + (size_t)n_tokens * 65, k = 1024;
    unsigned char *buf = calloc(1, cap);
    put32(buf, 20240328);
    put32(buf + 4, version);
    put32(buf + 8, n_tokens);
    put32(buf + 12, eot);
    for (int i = 0; i < n_tokens; i++) {
        buf[k++] = (unsigned char)tokens[i].len;
        memcpy(buf + k, tokens[i].bytes, (size_t)tokens[i].len);
        k += (size_t)tokens[i].len;
    }
    char p[512];
    path_of(p, sizeof p, name);
    write_file(p, buf, k - cut);
    free(buf);
    return k;
}

/* ------------------------------------------------------------------------ helpers */

static zero_tokenizer_t *load(const char *name) {
    char p[512];
    path_of(p, sizeof p, name);
    zero_tokenizer_t *tok = NULL;
    CHECK(zero_tokenizer_init(&tok, p) == ZERO_OK && tok, "load %s", name);
    return tok;
}

static int32_t *encode(const zero_tokenizer_t *tok, const char *text, size_t n, size_t *count) {
    int32_t *ids = NULL;
    *count = 0;
    zero_status_t st = zero_tokenizer_encode(tok, text, n, &ids, count);
    CHECK(st == ZERO_OK, "encode %zu bytes", n);
    return ids;
}

/* GPT-2's textbook merge loop (OpenAI's encoder.py bpe()), on ids: the lowest-ranked pair
 * present, every occurrence merged left to right, until no pair has a rank. */
static int textbook(const unsigned char *p, int n, int *out) {
    for (int i = 0; i < n; i++) out[i] = p[i];
    for (;;) {
        int best = -1;
        for (int i = 0; i + 1 < n; i++)
            for (int m = 0; m < n_merges && (best < 0 || m < best); m++)
                if (merge_l[m] == out[i] && merge_r[m] == out[i + 1]) best = m;
        if (best < 0) return n;
        int k = 0;
        for (int i = 0; i < n;) {
            if (i + 1 < n && out[i] == merge_l[best] && out[i + 1] == merge_r[best]) {
                out[k++] = merge_out[best];
                i += 2;
            } else {
                out[k++] = out[i++];
            }
        }
        n = k;
    }
}

static uint64_t rng = 0x1234567;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static int ids_equal(const int32_t *a, size_t n, const int *b, size_t m) {
    if (n != m) return 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* ------------------------------------------------------------------------ tests */

static void test_hand_worked(void) {
    reset_vocab();
    const int ab = merge_of("a", "b"), abc = merge_of("ab", "c"), sa = merge_of(" ", "a");
    const int aa = merge_of("a", "a"), tq = merge_of("t", "'"), qs = merge_of("'", "s");
    const int sb = merge_of(" ", "b"), ss = merge_of(" ", " "), c1 = merge_of("c", "1");
    (void)tq, (void)c1; /* present so that a wrong split would use them */
    write_hf("hand-vocab.json", "hand-merges.txt", 0);
    write_hf("vocab.json", "merges.txt", 0);
    write_tokenizer_json("hand.json", 0);
    const char *names[] = {"hand-vocab.json", "vocab.json", "hand.json", "."};
    const struct {
        const char *text;
        int ids[16], n;
    } cases[] = {
        /* ab (rank 0) before Ga (rank 2); abc; aa leftmost first */
        {"abc ab abca aaaaa", {abc, ' ', ab, ' ', abc, 'a', sa, aa, aa}, 9},
        {"it's", {'i', 't', qs}, 3},              /* "it" "'s": no t' */
        {"don't", {'d', 'o', 'n', '\'', 't'}, 5}, /* "don" "'t" */
        {"abc123", {abc, '1', '2', '3'}, 4},      /* letters, then numbers: no c1 */
        {"a  b", {'a', ' ', sb}, 3},              /* "a" " " " b" */
        {"a   b", {'a', ss, sb}, 3},              /* "a" "  " " b" */
        {"a  ", {'a', ss}, 2},                    /* a trailing run is one piece */
        {"a!!! b", {'a', '!', '!', '!', sb}, 5},  /* other symbols: one piece */
        {"\n\n b", {'\n', '\n', sb}, 3},          /* "\n\n" " b" */
    };
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        zero_tokenizer_t *tok = load(names[f]);
        if (!tok) continue;
        CHECK(zero_tokenizer_vocab(tok) == n_tokens, "%s: vocab %d, expected %d", names[f],
              zero_tokenizer_vocab(tok), n_tokens);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            size_t n = 0;
            int32_t *ids = encode(tok, cases[c].text, strlen(cases[c].text), &n);
            CHECK(ids_equal(ids, n, cases[c].ids, (size_t)cases[c].n), "%s: '%s' (%zu tokens)",
                  names[f], cases[c].text, n);
            free(ids);
        }
        zero_tokenizer_free(tok);
    }
}

/* Merges learned in order over the letters a-e; words and texts against the textbook loop. */
static void test_textbook(void) {
    reset_vocab();
    int letters[MAX_TOKENS], n_letters = 0;
    for (int c = 'a'; c <= 'e'; c++) letters[n_letters++] = c;
    while (n_merges < 300) {
        int l = letters[rnd((uint32_t)n_letters)], r = letters[rnd((uint32_t)n_letters)];
        if (tokens[l].len + tokens[r].len > 12) continue;
        unsigned char b[64];
        memcpy(b, tokens[l].bytes, (size_t)tokens[l].len);
        memcpy(b + tokens[l].len, tokens[r].bytes, (size_t)tokens[r].len);
        if (find_token(b, tokens[l].len + tokens[r].len) >= 0) continue; /* one pair a token */
        add_merge(l, r);
        letters[n_letters++] = merge_out[n_merges - 1];
    }
    write_hf("rand-vocab.json", "rand-merges.txt", 0);
    write_tokenizer_json("rand-pairs.json", 1);
    zero_tokenizer_t *tok = load("rand-vocab.json"), *tj = load("rand-pairs.json");
    if (!tok || !tj) return;
    int ref[4096];
    for (int w = 0; w < 400; w++) {
        unsigned char word[64];
        int n = 1 + (int)rnd(60);
        for (int i = 0; i < n; i++) word[i] = (unsigned char)('a' + rnd(5));
        int m = textbook(word, n, ref);
        size_t k = 0;
        int32_t *ids = encode(w % 2 ? tok : tj, (const char *)word, (size_t)n, &k);
        CHECK(ids_equal(ids, k, ref, (size_t)m), "word %d '%.*s': %zu tokens, textbook %d", w, n,
              (const char *)word, k, m);
        free(ids);
    }
    /* a text of words separated by one space: pieces are the first word and " word"s */
    enum { TEXT = 20000 };
    char *text = malloc(TEXT + 64);
    int *all = malloc((TEXT + 64) * sizeof *all), n_all = 0, len = 0;
    while (len < TEXT) {
        int start = len, n = 1 + (int)rnd(20);
        if (len) text[len++] = ' ';
        for (int i = 0; i < n; i++) text[len++] = (char)('a' + rnd(5));
        n_all += textbook((const unsigned char *)text + start, len - start, all + n_all);
    }
    size_t k = 0;
    int32_t *ids = encode(tok, text, (size_t)len, &k);
    CHECK(ids_equal(ids, k, all, (size_t)n_all), "text of %d bytes: %zu tokens, textbook %d", len,
          k, n_all);
    free(ids);
    free(text);
    free(all);
    zero_tokenizer_free(tok);
    zero_tokenizer_free(tj);
}

typedef struct {
    const zero_tokenizer_t *tok;
    const char *text;
    size_t n, count;
    int32_t *ids;
} job_t;

static void *encode_job(void *arg) {
    job_t *j = arg;
    if (zero_tokenizer_encode(j->tok, j->text, j->n, &j->ids, &j->count)) j->ids = NULL;
    return NULL;
}

/* Any bytes encode and decode back; two threads at once agree with one. */
static void test_round_trip(void) {
    zero_tokenizer_t *tok = load("rand-vocab.json");
    if (!tok) return;
    enum { N = 60000 };
    char *text = malloc(N);
    static const char *const pieces[] = {"abc",
                                         " dea",
                                         "'s",
                                         "'ll",
                                         "  ",
                                         "\n",
                                         "\t",
                                         "123",
                                         "\xc3\xa9",
                                         "\xe6\x9d\xb1",
                                         "\xf0\x9f\x99\x82",
                                         "\xff",
                                         "\xc3",
                                         "\x80\x80",
                                         "!?"};
    size_t n = 0;
    while (n < N - 8) {
        if (rnd(4) == 0) {
            text[n++] = (char)rnd(256);
        } else {
            const char *p = pieces[rnd(sizeof pieces / sizeof pieces[0])];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
    }
    size_t count = 0;
    int32_t *ids = encode(tok, text, n, &count);
    char *back = NULL;
    size_t bytes = 0;
    CHECK(ids && zero_tokenizer_decode(tok, ids, count, &back, &bytes) == ZERO_OK && bytes == n &&
              !memcmp(back, text, n),
          "decode(encode(random bytes)) != the bytes (%zu of %zu)", bytes, n);
    free(back);
    job_t jobs[2] = {{tok, text, n, 0, NULL}, {tok, text, n, 0, NULL}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, encode_job, &jobs[t]);
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        CHECK(jobs[t].ids && jobs[t].count == count &&
                  !memcmp(jobs[t].ids, ids, count * sizeof *ids),
              "thread %d's ids differ from one thread's", t);
        free(jobs[t].ids);
    }
    free(ids);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        ids = encode(tok, &c, 1, &count);
        CHECK(count == 1 && ids && ids[0] == b, "byte 0x%02x alone: %zu tokens", b, count);
        free(ids);
    }
    ids = encode(tok, "", 0, &count);
    CHECK(count == 0 && !ids, "the empty text: %zu tokens", count);
    free(text);
    zero_tokenizer_free(tok);
}

/* llm.c's file, both versions: the tokens' bytes as written, decoding, no encoding. */
static void test_llmc(void) {
    /* rand-vocab's tokens are still in `tokens` */
    const int eot = n_tokens - 1;
    write_llmc("v2.bin", 2, eot, 0);
    write_llmc("v1.bin", 1, 0, 0);
    zero_tokenizer_t *v2 = load("v2.bin"), *v1 = load("v1.bin");
    if (!v2 || !v1) return;
    CHECK(zero_tokenizer_vocab(v2) == n_tokens && zero_tokenizer_eot(v2) == eot,
          "v2: vocab %d eot %d", zero_tokenizer_vocab(v2), (int)zero_tokenizer_eot(v2));
    CHECK(zero_tokenizer_eot(v1) == -1, "v1 of %d tokens (not GPT-2's 50257): no eot", n_tokens);
    int ok = 1;
    for (int i = 0; i < n_tokens; i++) {
        size_t len = 0;
        const char *b = zero_tokenizer_token(v1, i, &len);
        ok &= b && len == (size_t)tokens[i].len && !memcmp(b, tokens[i].bytes, len);
    }
    CHECK(ok, "v1: every token's bytes as written");
    zero_tokenizer_t *hf = load("rand-vocab.json");
    const char *text = "abc dea\xff\xc3\xa9 'll\n\n  bad";
    size_t count = 0, bytes = 0;
    int32_t *ids = hf ? encode(hf, text, strlen(text), &count) : NULL;
    char *back = NULL;
    CHECK(ids && zero_tokenizer_decode(v2, ids, count, &back, &bytes) == ZERO_OK &&
              bytes == strlen(text) && !strcmp(back, text),
          "llm.c v2 decodes what vocab.json encoded");
    free(back);
    int32_t *none = NULL;
    CHECK(zero_tokenizer_encode(v2, "a", 1, &none, &count) == ZERO_ERR_UNSUPPORTED &&
              strstr(zero_last_error(), "v2.bin") && strstr(zero_last_error(), "merges"),
          "llm.c's file cannot encode, saying why");
    free(ids);
    zero_tokenizer_free(hf);
    zero_tokenizer_free(v1);
    zero_tokenizer_free(v2);
}

/* One bad file: init fails with `status` and a message holding `what` and the name of the file
 * at fault (`named`, or NULL: this one). */
static void bad_named(const char *name, const char *content, zero_status_t status, const char *what,
                      const char *named) {
    char p[512];
    path_of(p, sizeof p, name);
    if (content) write_str(p, content);
    zero_tokenizer_t *tok = (zero_tokenizer_t *)1;
    zero_status_t st = zero_tokenizer_init(&tok, p);
    const char *msg = zero_last_error();
    CHECK(st == status && !tok && strstr(msg, named ? named : name) && strstr(msg, what),
          "%s: status %d (expected %d), message '%s' (expected '%s' and the name)", name, st,
          status, msg, what);
    if (st == ZERO_OK) zero_tokenizer_free(tok);
}

static void bad(const char *name, const char *content, zero_status_t status, const char *what) {
    bad_named(name, content, status, what, NULL);
}

static void test_errors(void) {
    bad("missing.json", NULL, ZERO_ERR_IO, "cannot open");
    bad("notjson.json", "{\"a\": 1,", ZERO_ERR_FORMAT, "not valid JSON");
    bad("frac.json", "{\"a\": 1.5}", ZERO_ERR_FORMAT, "\"a\" has id");
    bad("neg.json", "{\"a\": -1}", ZERO_ERR_FORMAT, "expected an integer");
    bad("str.json", "{\"a\": \"1\"}", ZERO_ERR_FORMAT, "not a number");
    bad("twice.json", "{\"a\": 0, \"b\": 0}", ZERO_ERR_FORMAT, "id 0 is given to two tokens");
    bad("empty.json", "{}", ZERO_ERR_FORMAT, "vocabulary is empty");
    bad("list.json", "[1, 2]", ZERO_ERR_FORMAT, "not a JSON object");
    bad("wp.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", ZERO_ERR_FORMAT,
        "\"WordPiece\" (expected \"BPE\")");
    bad("nomerges.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", ZERO_ERR_FORMAT,
        "model.merges is missing");
    bad("badpair.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [\"a\"]}}",
        ZERO_ERR_FORMAT, "model.merges[0] is not two tokens");
    bad("unknown.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": "
        "[\"a a\", [\"a\", \"q\"]]}}",
        ZERO_ERR_FORMAT, "model.merges[1]: the merge \"a q\" names \"q\", which is not in");
    bad("result.json",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": "
        "[\"a b\"]}}",
        ZERO_ERR_FORMAT, "makes \"ab\", which is not in the vocabulary");
    /* merges.txt beside a vocab.json: the merges file is named */
    char p[512];
    path_of(p, sizeof p, "m1-merges.txt");
    write_str(p, "#version: 0.2\na a\na b c\n");
    bad_named("m1-vocab.json", "{\"a\": 0, \"aa\": 1, \"b\": 2}", ZERO_ERR_FORMAT,
              "line 3: \"a b c\" is not two tokens", "m1-merges.txt");
    path_of(p, sizeof p, "m2-merges.txt");
    write_str(p, "a a\n\n");
    bad_named("m2-vocab.json", "{\"a\": 0, \"aa\": 1}", ZERO_ERR_FORMAT, "line 2: \"\" is not two",
              "m2-merges.txt");
    path_of(p, sizeof p, "m3-merges.txt");
    write_str(p, "a a\r\nz a\r\n");
    bad_named("m3-vocab.json", "{\"a\": 0, \"aa\": 1}", ZERO_ERR_FORMAT,
              "line 2: the merge \"z a\" names \"z\"", "m3-merges.txt");
    /* llm.c files */
    reset_vocab();
    merge_of("a", "b");
    const size_t full = write_llmc("cut.bin", 2, 0, 3);
    bad("cut.bin", NULL, ZERO_ERR_FORMAT, "token 256 at byte");
    write_llmc("v3.bin", 3, 0, 0);
    bad("v3.bin", NULL, ZERO_ERR_FORMAT, "version 3 (expected 1 or 2)");
    unsigned char small[100] = {0};
    put32(small, 20240328);
    path_of(p, sizeof p, "short.bin");
    write_file(p, small, sizeof small);
    bad("short.bin", NULL, ZERO_ERR_FORMAT, "shorter than its 1024-byte header");
    unsigned char *extra = calloc(1, full + 5);
    write_llmc("extra.bin", 2, 0, 0);
    path_of(p, sizeof p, "extra.bin");
    FILE *f = fopen(p, "rb");
    CHECK(f && fread(extra, 1, full, f) == full, "read back extra.bin");
    if (f) fclose(f);
    write_file(p, extra, full + 5);
    free(extra);
    bad("extra.bin", NULL, ZERO_ERR_FORMAT, "5 bytes after its 257 tokens");
    path_of(p, sizeof p, "emptydir");
    mkdir(p, 0755);
    bad("emptydir", NULL, ZERO_ERR_IO, "neither tokenizer.json nor vocab.json");

    /* encoding without merges, a byte without a token, ids out of range */
    write_hf("solo-vocab.json", NULL, 0);
    zero_tokenizer_t *tok = load("solo-vocab.json");
    int32_t *ids = NULL;
    size_t count = 0;
    CHECK(tok && zero_tokenizer_encode(tok, "ab", 2, &ids, &count) == ZERO_ERR_UNSUPPORTED &&
              strstr(zero_last_error(), "solo-merges.txt"),
          "no merges beside vocab.json: encoding names the missing file");
    int32_t out_of_range[] = {97, 258, 3};
    char *text = NULL;
    CHECK(tok &&
              zero_tokenizer_decode(tok, out_of_range, 3, &text, &count) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "id 258 at index 1") &&
              strstr(zero_last_error(), "solo-vocab.json"),
          "an id out of range is named with its index and the file");
    int32_t negative[] = {-1};
    CHECK(tok && zero_tokenizer_decode(tok, negative, 1, &text, &count) == ZERO_ERR_INVALID_ARG,
          "a negative id");
    zero_tokenizer_free(tok);
    write_hf("nobytes-vocab.json", "nobytes-merges.txt", 11); /* bytes 0..10: no token */
    tok = load("nobytes-vocab.json");
    CHECK(tok && zero_tokenizer_encode(tok, "ab\ncd", 5, &ids, &count) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "byte 0x0a (at offset 2") && !ids,
          "a byte without a token is named with its offset");
    int32_t gap[] = {5};
    CHECK(tok && zero_tokenizer_decode(tok, gap, 1, &text, &count) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "id 5 at index 0 is a gap"),
          "an id without a token is named");
    zero_tokenizer_free(tok);
}

static unsigned char *slurp(const char *name, size_t *n) {
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "rb");
    unsigned char *b = malloc(1 << 20);
    *n = f && b ? fread(b, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    return b;
}

/* Corrupted copies of good files (bytes overwritten, flipped, cut, repeated): each either loads
 * and then encodes and decodes, or fails naming the corrupted file; nothing crashes (the ASan
 * build runs this too). */
static void test_corrupted(void) {
    static const char *const good[] = {"rand-vocab.json", "rand-merges.txt", "v2.bin"};
    static const char *const bad_name[] = {"fz-vocab.json", "fz-merges.txt", "fz.bin"};
    size_t sizes[3];
    unsigned char *files[3];
    for (int f = 0; f < 3; f++) files[f] = slurp(good[f], &sizes[f]);
    unsigned char *buf = malloc((1 << 20) + 4096);
    int loaded = 0, refused = 0, unnamed = 0;
    for (int iter = 0; iter < 600; iter++) {
        const int f = (int)rnd(3);
        size_t n = sizes[f];
        memcpy(buf, files[f], n);
        for (int op = 0, ops = 1 + (int)rnd(4); op < ops && n > 0; op++) {
            const size_t at = rnd((uint32_t)n);
            switch (rnd(4)) {
            case 0: buf[at] = (unsigned char)rnd(256); break;
            case 1: buf[at] ^= (unsigned char)(1u << rnd(8)); break;
            case 2: n = at; break;
            default: { /* repeat a piece */
                size_t len = rnd(64);
                if (len > n - at) len = n - at;
                if (n + len <= (1 << 20)) memmove(buf + at + len, buf + at, n - at), n += len;
            }
            }
        }
        char p[512];
        path_of(p, sizeof p, bad_name[f]);
        write_file(p, buf, n);
        if (f < 2) { /* the other half of the pair as it was */
            path_of(p, sizeof p, bad_name[1 - f]);
            write_file(p, files[1 - f], sizes[1 - f]);
        }
        path_of(p, sizeof p, f == 2 ? "fz.bin" : "fz-vocab.json");
        zero_tokenizer_t *tok = NULL;
        if (zero_tokenizer_init(&tok, p) == ZERO_OK) {
            loaded++;
            int32_t *ids = NULL;
            size_t count = 0, bytes = 0;
            char *text = NULL;
            const char *sample = "abc dea 'll\xff  e";
            if (zero_tokenizer_encode(tok, sample, strlen(sample), &ids, &count) == ZERO_OK)
                (void)zero_tokenizer_decode(tok, ids, count, &text, &bytes);
            free(ids);
            free(text);
            zero_tokenizer_free(tok);
        } else {
            refused++;
            unnamed += !strstr(zero_last_error(), "fz");
            if (!strstr(zero_last_error(), "fz"))
                fprintf(stderr, "unnamed: %s\n", zero_last_error());
        }
    }
    CHECK(unnamed == 0 && refused > 100 && loaded > 10,
          "corrupted files: %d loaded, %d refused, %d of them without the file's name", loaded,
          refused, unnamed);
    for (int f = 0; f < 3; f++) free(files[f]);
    free(buf);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/zero_test_tokenizer_%d", (int)getpid());
    mkdir(dir, 0755);
    make_byte_map();
    test_hand_worked();
    test_textbook();
    test_round_trip();
    test_llmc();
    test_corrupted();
    test_errors();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_report();
}
