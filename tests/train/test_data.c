/* test_data.c — token files, the built-in corpus, the split and batches (src/train/data.c).
 *
 * Files are written here byte by byte from their format descriptions (llm.c: 256 int32 header,
 * magic 20240520, version 1, count; nanoGPT: raw uint16), read back and compared with what was
 * written. Bad input — missing, empty, ids beyond the vocabulary, a wrong header — must fail
 * with a message naming the file and the value. The unigram entropy is checked against a
 * closed form, batches against the stream they were cut from.
 */
#include "check.h"
#include "train/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
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

static void test_text(void) {
    char p[512];
    path_of(p, sizeof p, "a.txt");
    const char *text = "hello, world\n\xff";
    write_file(p, text, strlen(text));
    zero_dataset_t ds;
    CHECK(zero__data_load(&ds, p, 256) == ZERO_OK, "text: %s", zero_last_error());
    CHECK(ds.format == ZERO_DATA_TEXT && ds.count == strlen(text), "text count %zu", ds.count);
    int ok = 1;
    for (size_t i = 0; i < ds.count; i++) ok &= ds.tokens[i] == (unsigned char)text[i];
    CHECK(ok && ds.max_token == 255, "text tokens are the bytes");
    zero__data_free(&ds);
    zero_status_t st = zero__data_load(&ds, p, 128);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "token 255") &&
              strstr(zero_last_error(), "a.txt") && strstr(zero_last_error(), "0..127"),
          "byte beyond a 128 vocabulary: '%s'", zero_last_error());
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
    CHECK(zero__data_load(&ds, p, 50257) == ZERO_OK, "nanoGPT: %s", zero_last_error());
    int ok = ds.format == ZERO_DATA_NANOGPT_BIN && ds.count == 6;
    for (int i = 0; ok && i < 6; i++) ok &= ds.tokens[i] == toks[i];
    CHECK(ok, "nanoGPT tokens");
    zero__data_free(&ds);
    zero_status_t st = zero__data_load(&ds, p, 50000);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "token 50256") &&
              strstr(zero_last_error(), "position 2"),
          "id beyond the vocabulary: '%s'", zero_last_error());
    write_file(p, raw, 11);
    CHECK(zero__data_load(&ds, p, 50257) == ZERO_ERR_FORMAT && strstr(zero_last_error(), "odd"),
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
    CHECK(zero__data_load(&ds, p, 50257) == ZERO_OK, "llm.c: %s", zero_last_error());
    ok = ds.format == ZERO_DATA_LLMC_BIN && ds.count == 6;
    for (int i = 0; ok && i < 6; i++) ok &= ds.tokens[i] == toks[i];
    CHECK(ok, "llm.c tokens");
    zero__data_free(&ds);
    put32(buf + 8, 7);
    write_file(p, buf, n);
    CHECK(zero__data_load(&ds, p, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "7 tokens"),
          "llm.c count mismatch: '%s'", zero_last_error());
    put32(buf + 8, 6);
    put32(buf + 4, 2);
    write_file(p, buf, n);
    CHECK(zero__data_load(&ds, p, 50257) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "version 2"),
          "llm.c version: '%s'", zero_last_error());
    free(buf);
}

static void test_missing_empty(void) {
    char p[512];
    zero_dataset_t ds;
    path_of(p, sizeof p, "does-not-exist.txt");
    CHECK(zero__data_load(&ds, p, 256) == ZERO_ERR_IO && strstr(zero_last_error(), p),
          "missing: '%s'", zero_last_error());
    path_of(p, sizeof p, "empty.txt");
    write_file(p, "", 0);
    CHECK(zero__data_load(&ds, p, 256) == ZERO_ERR_FORMAT && strstr(zero_last_error(), "empty"),
          "empty: '%s'", zero_last_error());
}

static void test_split_batches(void) {
    zero_dataset_t ds;
    memset(&ds, 0, sizeof ds);
    ds.count = 1000;
    ds.tokens = malloc(1000 * sizeof *ds.tokens);
    for (int i = 0; i < 1000; i++) ds.tokens[i] = i % 4; /* uniform over 4: entropy ln 4 */
    ds.max_token = 3;
    snprintf(ds.source, sizeof ds.source, "synthetic");
    CHECK(fabs(zero__data_unigram_entropy(&ds, 0, 1000) - log(4.0)) < 1e-12, "entropy");
    CHECK(zero__data_split(&ds, 0.1, 16) == ZERO_OK && ds.train_count == 900, "split %zu",
          ds.train_count);
    CHECK(zero__data_split(&ds, 0.1, 200) == ZERO_ERR_FORMAT &&
              strstr(zero_last_error(), "synthetic"),
          "split too small: '%s'", zero_last_error());
    CHECK(zero__data_split(&ds, 1.5, 16) == ZERO_ERR_CONFIG, "val fraction 1.5");
    zero__data_split(&ds, 0.1, 16);
    for (int i = 0; i < 1000; i++) ds.tokens[i] = i; /* position-valued: windows are checkable */
    int32_t x[4 * 16], y[4 * 16];
    uint64_t rng = 1;
    int ok = 1;
    for (int rep = 0; rep < 50; rep++) {
        zero__data_train_batch(&ds, &rng, 4, 16, x, y);
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < 16; t++) {
                ok &= y[b * 16 + t] == x[b * 16 + t] + 1 && x[b * 16 + t] == x[b * 16] + t;
                ok &= y[b * 16 + t] < 900; /* never crosses into validation */
            }
    }
    CHECK(ok, "training windows");
    size_t w = zero__data_val_windows(&ds, 16);
    CHECK(w == (100 - 1) / 16, "validation windows %zu", w);
    zero__data_val_batch(&ds, 0, 4, 16, x, y);
    ok = 1;
    for (int b = 0; b < 4; b++)
        ok &= x[b * 16] == 900 + 16 * b && y[b * 16 + 15] == 900 + 16 * b + 16;
    CHECK(ok, "validation windows are fixed, disjoint, in the tail");
    zero__data_free(&ds);
}

static void test_builtin(void) {
    zero_dataset_t a, b;
    CHECK(zero__data_builtin(&a, 200000, 1) == ZERO_OK &&
              zero__data_builtin(&b, 200000, 1) == ZERO_OK,
          "builtin");
    CHECK(!memcmp(a.tokens, b.tokens, 200000 * sizeof(int32_t)),
          "built-in corpus not deterministic");
    int printable = 1;
    for (size_t i = 0; i < a.count; i++)
        printable &= a.tokens[i] == '\n' || (a.tokens[i] >= 32 && a.tokens[i] < 127);
    CHECK(printable, "built-in corpus has non-printable bytes");
    double h = zero__data_unigram_entropy(&a, 0, a.count);
    CHECK(h > 2.0 && h < 3.5, "built-in corpus unigram entropy %.3f", h);
    zero__data_free(&b);
    CHECK(zero__data_builtin(&b, 200000, 2) == ZERO_OK &&
              memcmp(a.tokens, b.tokens, 1000 * sizeof(int32_t)),
          "seed does not change the corpus");
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
    test_bins();
    test_missing_empty();
    test_split_batches();
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
