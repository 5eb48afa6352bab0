/* test_data.c — token files, nanoGPT directories, llm.c shard globs, the built-in corpus, the
 * split and batches (src/train/data.c).
 *
 * Files are written here byte by byte from their format descriptions (llm.c: 256 int32 header,
 * magic 20240520, version 1, count; nanoGPT: raw uint16), read back and compared with what was
 * written. Bad input — missing, empty, a directory, not a regular file, ids beyond the
 * vocabulary, a wrong header, an odd size, mixed formats, a glob matching nothing — must fail
 * with a message naming the file and the value. The unigram entropy is checked against a closed
 * form; batches against the tokens the test reads back from its own files at the positions the
 * sampler reports; one file against the same tokens cut into shards (the same batches, windows
 * across shard boundaries included); a separate validation file against its own tokens. meta.pkl
 * is read from pickles built here opcode by opcode (Python's own pickles: test_data_cli.py).
 */
#include "check.h"
#include "core/core_internal.h"
#include "train/data.h"

#include <math.h>
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

static void put32(unsigned char *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* The whole stream of ds as int32 (malloc'd). */
static int32_t *all_tokens(const zero_dataset_t *ds) {
    int32_t *t = malloc((ds->count + 1) * sizeof *t);
    zero__data_read(ds, 0, ds->count, t);
    return t;
}

/* n uint16 tokens as little-endian bytes at out (2n bytes). */
static void put16s(unsigned char *out, const uint16_t *toks, size_t n) {
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = (unsigned char)(toks[i] & 0xff);
        out[2 * i + 1] = (unsigned char)(toks[i] >> 8);
    }
}

/* An llm.c token file of n tokens at path. */
static void write_llmc(const char *path, const uint16_t *toks, size_t n) {
    size_t bytes = 1024 + 2 * n;
    unsigned char *buf = calloc(1, bytes);
    put32(buf, 20240520);
    put32(buf + 4, 1);
    put32(buf + 8, (int32_t)n);
    put16s(buf + 1024, toks, n);
    write_file(path, buf, bytes);
    free(buf);
}

/* A raw nanoGPT .bin of n tokens at path. */
static void write_raw(const char *path, const uint16_t *toks, size_t n) {
    unsigned char *buf = malloc(2 * n);
    put16s(buf, toks, n);
    write_file(path, buf, 2 * n);
    free(buf);
}

static void test_text(void) {
    char p[512];
    path_of(p, sizeof p, "a.txt");
    const char *text = "hello, world\n\xff";
    write_file(p, text, strlen(text));
    zero_dataset_t ds;
    CHECK(zero__data_open(&ds, p, NULL, 256) == ZERO_OK, "text: %s", zero_last_error());
    CHECK(ds.format == ZERO_DATA_TEXT && ds.count == strlen(text), "text count %zu", ds.count);
    int32_t *t = all_tokens(&ds);
    int ok = 1;
    for (size_t i = 0; i < ds.count; i++) ok &= t[i] == (unsigned char)text[i];
    CHECK(ok && ds.max_token == 255, "text tokens are the bytes");
    free(t);
    zero__data_free(&ds);
    zero_status_t st = zero__data_open(&ds, p, NULL, 128);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "token 255") &&
              strstr(zero_last_error(), "a.txt") && strstr(zero_last_error(), "0..127"),
          "byte beyond a 128 vocabulary: '%s'", zero_last_error());
}

/* A text file encoded by a tokenizer written here: printable ASCII bytes stand for themselves in
 * GPT-2's byte-level strings, space is "\u0120" and newline "\u010a"; three merges by rank. The
 * tokens are worked out by hand: pieces "hello", " hello", "\n", "well"; (h, e) first, then
 * (l, l); (G, w) never meets a w after a space. */
static void test_text_bpe(void) {
    char vocab[8192], p[512], m[512];
    size_t k = (size_t)sprintf(vocab, "{\"\\u0120\": 32, \"\\u010a\": 10");
    for (int b = '!'; b <= '~'; b++)
        k += (size_t)sprintf(vocab + k, b == '"' || b == '\\' ? ", \"\\%c\": %d" : ", \"%c\": %d",
                             b, b);
    sprintf(vocab + k, ", \"he\": 300, \"\\u0120w\": 301, \"ll\": 302}");
    path_of(p, sizeof p, "vocab.json");
    write_file(p, vocab, strlen(vocab));
    path_of(m, sizeof m, "merges.txt");
    const char *merges = "#version: 0.2\nh e\n\xc4\xa0 w\nl l\n";
    write_file(m, merges, strlen(merges));
    zero_tokenizer_t *tok = NULL;
    CHECK(zero_tokenizer_init(&tok, p) == ZERO_OK, "tokenizer: %s", zero_last_error());
    char t[512];
    path_of(t, sizeof t, "bpe.txt");
    const char *text = "hello hello\nwell";
    write_file(t, text, strlen(text));
    const int32_t want[] = {300, 302, 'o', ' ', 300, 302, 'o', '\n', 'w', 'e', 302};
    zero_dataset_t ds;
    CHECK(zero__data_open_tokenized(&ds, t, NULL, 303, tok) == ZERO_OK, "bpe: %s",
          zero_last_error());
    CHECK(ds.format == ZERO_DATA_TEXT_BPE && ds.count == ZERO_ARRAY_LEN(want) &&
              ds.max_token == 302 && ds.shards[0].width == 2,
          "bpe: format %d, %zu tokens, max %d", ds.format, ds.count, ds.max_token);
    if (ds.count == ZERO_ARRAY_LEN(want)) {
        int32_t *got = all_tokens(&ds);
        CHECK(!memcmp(got, want, sizeof want), "bpe: the tokens worked out by hand");
        free(got);
    }
    zero__data_free(&ds);
    CHECK(zero__data_open_tokenized(&ds, t, NULL, 300, tok) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "bpe.txt") && strstr(zero_last_error(), "token 300") &&
              strstr(zero_last_error(), "text (BPE)"),
          "bpe: an id beyond model.vocab: '%s'", zero_last_error());
    write_file(t, "caf\xc3\xa9", 5);
    CHECK(zero__data_open_tokenized(&ds, t, NULL, 303, tok) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "bpe.txt") && strstr(zero_last_error(), "byte 0xc3"),
          "bpe: a byte without a token names the data file: '%s'", zero_last_error());
    zero_tokenizer_free(tok);
    unlink(t);
    unlink(m);
    unlink(p);
}

static void test_bins(void) {
    char p[512];
    uint16_t toks[6] = {0, 1, 50256, 7, 300, 2};
    /* nanoGPT raw */
    unsigned char raw[12];
    for (int i = 0; i < 6; i++) {
        raw[2 * i] = (unsigned char)(toks[i] & 0xff);
        raw[2 * i + 1] = (unsigned char)(toks[i] >> 8);
    }
    path_of(p, sizeof p, "train.bin");
    write_file(p, raw, sizeof raw);
    zero_dataset_t ds;
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_OK, "nanoGPT: %s", zero_last_error());
    int ok = ds.format == ZERO_DATA_NANOGPT_BIN && ds.count == 6;
    int32_t *t = all_tokens(&ds);
    for (int i = 0; ok && i < 6; i++) ok &= t[i] == toks[i];
    free(t);
    CHECK(ok, "nanoGPT tokens");
    zero__data_free(&ds);
    zero_status_t st = zero__data_open(&ds, p, NULL, 50000);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "token 50256") &&
              strstr(zero_last_error(), "position 2"),
          "id beyond the vocabulary: '%s'", zero_last_error());
    write_file(p, raw, 11);
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "odd") && strstr(zero_last_error(), "train.bin"),
          "odd .bin: '%s'", zero_last_error());

    /* llm.c headered */
    size_t n = 1024 + sizeof raw;
    unsigned char *buf = calloc(1, n);
    put32(buf, 20240520);
    put32(buf + 4, 1);
    put32(buf + 8, 6);
    memcpy(buf + 1024, raw, sizeof raw);
    path_of(p, sizeof p, "tok.dat"); /* the magic decides, not the name */
    write_file(p, buf, n);
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_OK, "llm.c: %s", zero_last_error());
    ok = ds.format == ZERO_DATA_LLMC_BIN && ds.count == 6;
    t = all_tokens(&ds);
    for (int i = 0; ok && i < 6; i++) ok &= t[i] == toks[i];
    free(t);
    CHECK(ok, "llm.c tokens");
    zero__data_free(&ds);
    put32(buf + 8, 7);
    write_file(p, buf, n);
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "7 tokens") && strstr(zero_last_error(), "tok.dat"),
          "llm.c count mismatch: '%s'", zero_last_error());
    put32(buf + 8, 6);
    put32(buf + 4, 2);
    write_file(p, buf, n);
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "version 2"),
          "llm.c version: '%s'", zero_last_error());
    put32(buf + 4, 1);
    write_file(p, buf, 100); /* the magic, then less than the header */
    CHECK(zero__data_open(&ds, p, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "100 bytes") && strstr(zero_last_error(), "header"),
          "llm.c short header: '%s'", zero_last_error());
    free(buf);
}

static void test_missing_empty(void) {
    char p[512];
    zero_dataset_t ds;
    path_of(p, sizeof p, "does-not-exist.txt");
    CHECK(zero__data_open(&ds, p, NULL, 256) == ZERO_ERR_IO && strstr(zero_last_error(), p),
          "missing: '%s'", zero_last_error());
    path_of(p, sizeof p, "empty.txt");
    write_file(p, "", 0);
    CHECK(zero__data_open(&ds, p, NULL, 256) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "empty") && strstr(zero_last_error(), p),
          "empty: '%s'", zero_last_error());
    /* a directory that is no nanoGPT directory: it has no train.bin */
    CHECK(zero__data_open(&ds, dir, NULL, 256) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "train.bin") && strstr(zero_last_error(), dir),
          "directory without train.bin: '%s'", zero_last_error());
    /* a directory met as a file (through a glob), and not a regular file */
    char pattern[512];
    path_of(p, sizeof p, "sub.bin");
    mkdir(p, 0700);
    path_of(pattern, sizeof pattern, "sub.b?n");
    CHECK(zero__data_open(&ds, pattern, NULL, 256) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "is a directory") && strstr(zero_last_error(), p),
          "a directory as a data file: '%s'", zero_last_error());
    rmdir(p);
    CHECK(zero__data_open(&ds, "/dev/null", NULL, 256) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "not a regular file") &&
              strstr(zero_last_error(), "/dev/null"),
          "a device: '%s'", zero_last_error());
    path_of(pattern, sizeof pattern, "nothing_*.bin");
    CHECK(zero__data_open(&ds, pattern, NULL, 256) == ZERO_ERR_IO &&
              strstr(zero_last_error(), "matches no file") && strstr(zero_last_error(), pattern),
          "a glob matching nothing: '%s'", zero_last_error());
}

/* 1000 tokens 0, 1, ..., 999 in a nanoGPT file: windows can be checked against positions. */
static void test_split_batches(void) {
    char p[512];
    uint16_t toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (uint16_t)(i % 4); /* uniform over 4: ln 4 */
    path_of(p, sizeof p, "pos.bin");
    write_raw(p, toks, 1000);
    zero_dataset_t ds;
    CHECK(zero__data_open(&ds, p, NULL, 4) == ZERO_OK, "open: %s", zero_last_error());
    CHECK(fabs(zero__data_unigram_entropy(&ds, 0, 1000) - log(4.0)) < 1e-12, "entropy");
    CHECK(zero__data_split(&ds, 0.1, 16) == ZERO_OK && ds.train_count == 900, "split %zu",
          ds.train_count);
    CHECK(zero__data_split(&ds, 0.1, 200) == ZERO_ERR_FORMAT && strstr(zero_last_error(), p),
          "split too small: '%s'", zero_last_error());
    CHECK(zero__data_split(&ds, 1.5, 16) == ZERO_ERR_CONFIG, "val fraction 1.5");
    zero__data_free(&ds);

    for (int i = 0; i < 1000; i++) toks[i] = (uint16_t)i;
    write_raw(p, toks, 1000);
    CHECK(zero__data_open(&ds, p, NULL, 1000) == ZERO_OK, "open: %s", zero_last_error());
    zero__data_split(&ds, 0.1, 16);
    int32_t x[4 * 16], y[4 * 16];
    size_t starts[4];
    uint64_t rng = 1;
    int ok = 1;
    FILE *f = fopen(p, "rb");
    for (int rep = 0; rep < 50; rep++) {
        zero__data_train_batch(&ds, &rng, 4, 16, x, y, starts);
        for (int b = 0; b < 4; b++) {
            /* the window read back from the file at the position the sampler reports */
            unsigned char raw[34];
            ok &= starts[b] + 17 <= 900 && fseek(f, (long)(2 * starts[b]), SEEK_SET) == 0 &&
                  fread(raw, 1, 34, f) == 34;
            for (int t = 0; t < 16; t++) {
                ok &= x[b * 16 + t] == (raw[2 * t] | raw[2 * t + 1] << 8);
                ok &= y[b * 16 + t] == (raw[2 * t + 2] | raw[2 * t + 3] << 8);
                ok &= y[b * 16 + t] < 900; /* never crosses into validation */
            }
        }
    }
    fclose(f);
    CHECK(ok, "training windows are the file's tokens at the reported positions");
    size_t w = zero__data_val_windows(&ds, 16);
    CHECK(w == (100 - 1) / 16, "validation windows %zu", w);
    zero__data_val_batch(&ds, 0, 4, 16, x, y);
    ok = 1;
    for (int b = 0; b < 4; b++)
        ok &= x[b * 16] == 900 + 16 * b && y[b * 16 + 15] == 900 + 16 * b + 16;
    CHECK(ok, "validation windows are fixed, disjoint, in the tail");
    zero__data_free(&ds);
    unlink(p);
}

/* One stream of tokens as one nanoGPT file and as llm.c shards of uneven sizes (a glob): the same
 * tokens, and from the same RNG state the same windows, some spanning two shards. */
static void test_shards(void) {
    enum { N = 5000, T = 32, B = 8 };
    static uint16_t toks[N];
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) toks[i] = (uint16_t)(zero__rng_next(&seed) % 50257);
    const size_t cut[] = {0, 1234, 1235, 3001, N}; /* a 1-token shard too */
    char p[512], pattern[512];
    for (int s = 0; s < 4; s++) {
        char name[64];
        snprintf(name, sizeof name, "shard_train_%06d.bin", s);
        path_of(p, sizeof p, name);
        write_llmc(p, toks + cut[s], cut[s + 1] - cut[s]);
    }
    path_of(p, sizeof p, "whole.bin");
    write_raw(p, toks, N);
    path_of(pattern, sizeof pattern, "shard_train_*.bin");
    zero_dataset_t one, sh;
    CHECK(zero__data_open(&one, p, NULL, 50257) == ZERO_OK, "one file: %s", zero_last_error());
    CHECK(zero__data_open(&sh, pattern, NULL, 50257) == ZERO_OK, "shards: %s", zero_last_error());
    CHECK(sh.shard_count == 4 && sh.count == N && sh.format == ZERO_DATA_LLMC_BIN,
          "4 shards of %d tokens: %d, %zu", N, sh.shard_count, sh.count);
    if (one.count != N || sh.shard_count != 4) return;
    int ok = 1;
    for (int s = 0; s < 4; s++) ok &= sh.shards[s].start == cut[s];
    CHECK(ok, "shards in name order");
    int32_t *a = all_tokens(&one), *b = all_tokens(&sh);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= a[i] == toks[i] && b[i] == toks[i];
    CHECK(ok, "the shards' stream is the file's");
    free(a);
    free(b);
    zero__data_split(&one, 0.1, T);
    zero__data_split(&sh, 0.1, T);
    CHECK(one.train_count == sh.train_count, "the same split");
    static int32_t x1[B * T], y1[B * T], x2[B * T], y2[B * T];
    size_t s1[B], s2[B];
    uint64_t r1 = 3, r2 = 3;
    int same = 1, crossing = 0;
    for (int rep = 0; rep < 100; rep++) {
        zero__data_train_batch(&one, &r1, B, T, x1, y1, s1);
        zero__data_train_batch(&sh, &r2, B, T, x2, y2, s2);
        same &=
            !memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1) && !memcmp(s1, s2, sizeof s1);
        for (int w = 0; w < B; w++) {
            for (int t = 0; t < T; t++)
                same &= x2[w * T + t] == toks[s2[w] + (size_t)t] &&
                        y2[w * T + t] == toks[s2[w] + (size_t)t + 1];
            for (int c = 1; c < 4; c++) crossing += s2[w] < cut[c] && s2[w] + T >= cut[c];
        }
    }
    CHECK(same, "one file and its shards give the same windows, the stream's tokens");
    CHECK(crossing > 0, "some windows span two shards (%d)", crossing);

    /* sequential: window k starts at (k mod W) T, W = (train - 1) / T, through the shards and
     * around; rank r of 3 keeps windows r B .. of each global batch of 3 B */
    one.sequential = sh.sequential = 1;
    const size_t W = (sh.train_count - 1) / T;
    uint64_t k1 = 0, k2 = 0;
    same = 1;
    for (int rep = 0; rep < 30; rep++) {
        zero__data_train_batch(&one, &k1, B, T, x1, y1, s1);
        const uint64_t base = k2; /* every rank starts from the same state */
        for (int r = 0; r < 3; r++) {
            k2 = base;
            zero__data_train_batch_shard(&sh, &k2, B / 3, T, r, 3, x2, y2);
            for (int w = 0; w < B / 3; w++) {
                size_t start = ((size_t)(base + (uint64_t)(r * (B / 3) + w)) % W) * T;
                for (int t = 0; t < T; t++)
                    same &= x2[w * T + t] == toks[start + (size_t)t] &&
                            y2[w * T + t] == toks[start + (size_t)t + 1];
            }
        }
        for (int w = 0; w < B; w++) {
            size_t start = (((size_t)rep * B + (size_t)w) % W) * T;
            same &= s1[w] == start;
            for (int t = 0; t < T; t++)
                same &= x1[w * T + t] == toks[start + (size_t)t] &&
                        y1[w * T + t] == toks[start + (size_t)t + 1];
        }
    }
    CHECK(same && k1 == 30 * B && k2 == 30 * 3 * (B / 3),
          "sequential windows follow the stream, split over ranks (state %llu %llu)",
          (unsigned long long)k1, (unsigned long long)k2);
    one.sequential = sh.sequential = 0;
    zero__data_val_batch(&one, 1, B, T, x1, y1);
    zero__data_val_batch(&sh, 1, B, T, x2, y2);
    CHECK(!memcmp(x1, x2, sizeof x1) && !memcmp(y1, y2, sizeof y1), "the same validation batch");
    zero__data_free(&one);
    zero__data_free(&sh);

    /* shards of two formats: refused naming both */
    char other[512];
    path_of(other, sizeof other, "shard_train_000004.bin");
    write_raw(other, toks, 100);
    CHECK(zero__data_open(&sh, pattern, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "shard_train_000004.bin") &&
              strstr(zero_last_error(), "shard_train_000000.bin"),
          "mixed formats: '%s'", zero_last_error());
    unlink(other);
    /* a token beyond the vocabulary in the third shard: named with its position there */
    uint16_t bad[3] = {1, 2, 60000};
    path_of(other, sizeof other, "shard_train_000002.bin");
    write_llmc(other, bad, 3);
    CHECK(zero__data_open(&sh, pattern, NULL, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "shard_train_000002.bin") &&
              strstr(zero_last_error(), "token 60000 at position 2"),
          "token beyond the vocabulary in a shard: '%s'", zero_last_error());
    for (int s = 0; s < 4; s++) {
        char name[64];
        snprintf(name, sizeof name, "shard_train_%06d.bin", s);
        path_of(p, sizeof p, name);
        unlink(p);
    }
    path_of(p, sizeof p, "whole.bin");
    unlink(p);
}

/* A separate validation file: the training file trains whole, the validation windows are the
 * validation file's tokens, val_fraction does not apply; a nanoGPT directory's val.bin likewise. */
static void test_val_path(void) {
    enum { NT = 700, NV = 300, T = 16 };
    uint16_t tr[NT], va[NV];
    for (int i = 0; i < NT; i++) tr[i] = (uint16_t)(i % 50);
    for (int i = 0; i < NV; i++) va[i] = (uint16_t)(100 + i % 7);
    char sub[300], p[512], v[512];
    path_of(sub, sizeof sub, "nano");
    mkdir(sub, 0700);
    snprintf(p, sizeof p, "%s/train.bin", sub);
    snprintf(v, sizeof v, "%s/val.bin", sub);
    write_raw(p, tr, NT);
    write_raw(v, va, NV);
    zero_dataset_t ds;
    for (int how = 0; how < 2; how++) { /* train.bin + --val-data val.bin; the directory */
        zero_status_t st =
            how == 0 ? zero__data_open(&ds, p, v, 200) : zero__data_open(&ds, sub, NULL, 200);
        CHECK(st == ZERO_OK && ds.val_given && ds.train_count == NT && ds.count == NT + NV &&
                  ds.shard_count == 2,
              "validation apart (%d): %s", how, zero_last_error());
        CHECK(zero__data_split(&ds, 0.5, T) == ZERO_OK && ds.train_count == NT,
              "val_fraction does not apply (%zu)", ds.train_count);
        int32_t x[4 * T], y[4 * T];
        zero__data_val_batch(&ds, 0, 4, T, x, y);
        int ok = 1;
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < T; t++)
                ok &= x[b * T + t] == va[b * T + t] && y[b * T + t] == va[b * T + t + 1];
        CHECK(ok, "validation windows are the validation file's (%d)", how);
        CHECK(fabs(zero__data_unigram_entropy(&ds, ds.train_count, ds.count) - log(7.0)) < 0.01,
              "validation entropy is the validation file's");
        CHECK(zero__data_split(&ds, 0.1, NV) == ZERO_ERR_FORMAT && strstr(zero_last_error(), v),
              "too little validation data names the file: '%s'", zero_last_error());
        zero__data_free(&ds);
    }
    /* a directory without val.bin: the tail of train.bin validates */
    unlink(v);
    CHECK(zero__data_open(&ds, sub, NULL, 200) == ZERO_OK && !ds.val_given && ds.count == NT,
          "directory without val.bin: %s", zero_last_error());
    zero__data_free(&ds);
    unlink(p);
    rmdir(sub);
}

static void put_pickle_str(unsigned char **q, const char *s) {
    *(*q)++ = 0x8c; /* SHORT_BINUNICODE */
    *(*q)++ = (unsigned char)strlen(s);
    memcpy(*q, s, strlen(s));
    *q += strlen(s);
    *(*q)++ = 0x94; /* MEMOIZE */
}

/* meta.pkl as pickle protocol 4 writes {'itos': {0: 'vocab_size'}, 'vocab_size': n}: the key
 * inside itos (a value there) must not be taken for the outer one. */
static size_t make_pickle(unsigned char *buf, uint32_t vocab, unsigned char int_op) {
    unsigned char *q = buf;
    *q++ = 0x80;
    *q++ = 4;    /* PROTO 4 */
    *q++ = '}';  /* EMPTY_DICT */
    *q++ = 0x94; /* MEMOIZE */
    *q++ = '(';  /* MARK */
    put_pickle_str(&q, "itos");
    *q++ = '}';
    *q++ = 0x94;
    *q++ = '(';
    *q++ = 'K';
    *q++ = 0;
    put_pickle_str(&q, "vocab_size");
    *q++ = 'K';
    *q++ = 1;
    put_pickle_str(&q, "vocab_size");
    *q++ = 'u'; /* SETITEMS (itos) */
    put_pickle_str(&q, "vocab_size");
    *q++ = int_op;
    if (int_op == 'K') {
        *q++ = (unsigned char)vocab;
    } else if (int_op == 'M') {
        *q++ = (unsigned char)vocab;
        *q++ = (unsigned char)(vocab >> 8);
    } else {
        put32(q, (int32_t)vocab);
        q += 4;
    }
    *q++ = 'u';
    *q++ = '.';
    return (size_t)(q - buf);
}

static void test_meta_pkl(void) {
    char sub[300], meta[512];
    path_of(sub, sizeof sub, "meta");
    mkdir(sub, 0700);
    snprintf(meta, sizeof meta, "%s/meta.pkl", sub);
    int vocab = -1;
    CHECK(zero__data_dir_vocab(sub, &vocab) == ZERO_ERR_IO && strstr(zero_last_error(), meta) &&
              strstr(zero_last_error(), "model.vocab"),
          "no meta.pkl: '%s'", zero_last_error());
    unsigned char buf[256];
    const unsigned char ops[] = {'K', 'M', 'J'};
    const uint32_t vocabs[] = {65, 50257, 100277};
    for (int i = 0; i < 3; i++) {
        write_file(meta, buf, make_pickle(buf, vocabs[i], ops[i]));
        CHECK(zero__data_dir_vocab(sub, &vocab) == ZERO_OK && vocab == (int)vocabs[i],
              "vocab_size %u read as %d: %s", vocabs[i], vocab, zero_last_error());
    }
    size_t n = make_pickle(buf, 65, 'K');
    buf[n - 4] = 'N'; /* the outer value becomes None: the int is missing */
    buf[n - 3] = 'N';
    write_file(meta, buf, n);
    CHECK(zero__data_dir_vocab(sub, &vocab) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "not an int") && strstr(zero_last_error(), meta),
          "vocab_size None: '%s'", zero_last_error());
    static const char proto0[] = "(dp0\nS'vocab_size'\n";
    write_file(meta, proto0, sizeof proto0 - 1); /* protocol 0 */
    CHECK(zero__data_dir_vocab(sub, &vocab) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "opcode") && strstr(zero_last_error(), meta),
          "protocol 0: '%s'", zero_last_error());
    write_file(meta, "\x80\x04}.", 4); /* an empty dict */
    CHECK(zero__data_dir_vocab(sub, &vocab) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "vocab_size"),
          "no vocab_size: '%s'", zero_last_error());
    vocab = -1;
    CHECK(zero__data_dir_vocab(meta, &vocab) == ZERO_OK && vocab == 0, "a file: no vocabulary");
    unlink(meta);
    rmdir(sub);
}

static void test_builtin(void) {
    zero_dataset_t a, b;
    CHECK(zero__data_builtin(&a, 200000, 1) == ZERO_OK &&
              zero__data_builtin(&b, 200000, 1) == ZERO_OK,
          "builtin");
    int32_t *ta = all_tokens(&a), *tb = all_tokens(&b);
    CHECK(!memcmp(ta, tb, 200000 * sizeof(int32_t)), "built-in corpus not deterministic");
    CHECK(a.content_hash == b.content_hash, "the same corpus hashes the same");
    int printable = 1;
    for (size_t i = 0; i < a.count; i++) printable &= ta[i] == '\n' || (ta[i] >= 32 && ta[i] < 127);
    CHECK(printable, "built-in corpus has non-printable bytes");
    double h = zero__data_unigram_entropy(&a, 0, a.count);
    CHECK(h > 2.0 && h < 3.5, "built-in corpus unigram entropy %.3f", h);
    zero__data_free(&b);
    free(tb);
    CHECK(zero__data_builtin(&b, 200000, 2) == ZERO_OK, "builtin seed 2");
    tb = all_tokens(&b);
    CHECK(memcmp(ta, tb, 1000 * sizeof(int32_t)) && a.content_hash != b.content_hash,
          "seed does not change the corpus");
    free(ta);
    free(tb);
    char text[121];
    zero__data_builtin_text(text, 120, 1);
    text[120] = 0;
    printf("built-in corpus: \"%.60s...\"\n", text);
    zero__data_free(&a);
    zero__data_free(&b);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-data-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_text();
    test_text_bpe();
    test_bins();
    test_missing_empty();
    test_split_batches();
    test_shards();
    test_val_path();
    test_meta_pkl();
    test_builtin();
    const char *names[] = {"a.txt", "train.bin", "tok.dat", "empty.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[512];
        path_of(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return check_report();
}
