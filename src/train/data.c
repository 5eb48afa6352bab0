/* data.c — reading token files, the built-in corpus, the train/validation split and batches.
 *
 * Not here: tokenisation beyond bytes (larger vocabularies come pre-tokenized), shuffling across
 * epochs (windows are drawn at random positions, which is what nanoGPT and llm.c do for small
 * runs). Invariant: after zero__data_split, both parts hold at least seq + 1 tokens, so every
 * window the batch functions draw is in range.
 */
#include "train/data.h"

#include "core/core_internal.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const char *const format_names[] = {"text (bytes)", "nanoGPT uint16 .bin",
                                           "llm.c token file", "built-in corpus"};
_Static_assert(sizeof format_names / sizeof format_names[0] == ZERO_DATA_FORMAT_COUNT,
               "format name table");

const char *zero__data_format_name(zero_data_format_t f) {
    return (unsigned)f < ZERO_DATA_FORMAT_COUNT ? format_names[f] : "?";
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static int32_t rd32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24));
}

zero_status_t zero__data_load(zero_dataset_t *ds, const char *path, int vocab) {
    memset(ds, 0, sizeof *ds);
    if (!path || !path[0])
        return zero__error(ZERO_ERR_INVALID_ARG, "data file name is empty (expected a path)");
    snprintf(ds->source, sizeof ds->source, "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return zero__error(ZERO_ERR_IO,
                           "cannot open data file '%s': %s (expected a readable "
                           "text or token file)",
                           path, strerror(errno));
    zero_status_t st = ZERO_OK;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = zero__error(ZERO_ERR_IO, "cannot seek in data file '%s': %s", path, strerror(errno));
        goto done;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = zero__error(ZERO_ERR_IO, "cannot size data file '%s': %s", path, strerror(errno));
        goto done;
    }
    if (size == 0) {
        st =
            zero__error(ZERO_ERR_FORMAT, "data file '%s' is empty (expected text or tokens)", path);
        goto done;
    }
    buf = malloc((size_t)size);
    if (!buf) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot hold data file '%s' (%ld bytes)", path,
                         size);
        goto done;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = zero__error(ZERO_ERR_IO, "short read of data file '%s' (%ld bytes expected)", path,
                         size);
        goto done;
    }
    size_t n = 0, first = 0;
    int wide = 0;
    const size_t header_bytes = ZERO_LLMC_HEADER_INTS * 4;
    if ((size_t)size >= header_bytes && rd32(buf) == ZERO_LLMC_MAGIC) {
        int32_t version = rd32(buf + 4), count = rd32(buf + 8);
        if (version != ZERO_LLMC_VERSION) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "llm.c token file '%s' has version %d (expected %d: uint16 tokens)",
                             path, (int)version, ZERO_LLMC_VERSION);
            goto done;
        }
        if (count < 0 || (size_t)size != header_bytes + 2 * (size_t)count) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "llm.c token file '%s' is %ld bytes but its header announces %d "
                             "tokens (expected %zu bytes)",
                             path, size, (int)count,
                             header_bytes + 2 * (size_t)(count < 0 ? 0 : count));
            goto done;
        }
        ds->format = ZERO_DATA_LLMC_BIN;
        n = (size_t)count;
        first = header_bytes;
        wide = 1;
    } else if (ends_with(path, ".bin")) {
        if (size % 2) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "nanoGPT token file '%s' has an odd size of %ld bytes (expected "
                             "uint16 tokens: an even size)",
                             path, size);
            goto done;
        }
        ds->format = ZERO_DATA_NANOGPT_BIN;
        n = (size_t)size / 2;
        wide = 1;
    } else {
        ds->format = ZERO_DATA_TEXT;
        n = (size_t)size;
    }
    if (n == 0) {
        st = zero__error(ZERO_ERR_FORMAT, "data file '%s' holds no tokens (expected at least one)",
                         path);
        goto done;
    }
    ds->tokens = malloc(n * sizeof *ds->tokens);
    if (!ds->tokens) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot hold %zu tokens of '%s'", n, path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t t = wide ? rd16(buf + first + 2 * i) : buf[i];
        if (t >= vocab) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "data file '%s' (%s): token %d at position %zu is outside the "
                             "model's vocabulary (expected ids 0..%d; raise model.vocab)",
                             path, zero__data_format_name(ds->format), (int)t, i, vocab - 1);
            goto done;
        }
        if (t > ds->max_token) ds->max_token = t;
        ds->tokens[i] = t;
    }
    ds->count = n;
    ds->train_count = n;
done:
    free(buf);
    fclose(f);
    if (st) {
        free(ds->tokens);
        ds->tokens = NULL;
        ds->count = 0;
    }
    return st;
}

/* ------------------------------------------------------------------------------ corpus */

/* A tiny English-like grammar. Its structure is learnable at several levels — spelling of a
 * small lexicon, determiner/noun/verb order, subject-verb agreement (singular subjects take
 * "-s"), adjective lists, and arithmetic lines whose answer is determined by the question — so
 * a byte model's loss falls well below the unigram entropy within a minute or two. */
static const char *const nouns_s[] = {"cat",   "dog",   "bird",  "child", "farmer", "queen",
                                      "robot", "river", "horse", "king",  "sailor", "tree"};
static const char *const nouns_p[] = {"cats",   "dogs",   "birds",  "children", "farmers", "queens",
                                      "robots", "rivers", "horses", "kings",    "sailors", "trees"};
static const char *const verbs[] = {"see",  "like", "follow", "watch", "help",
                                    "find", "call", "know",   "love",  "fear"};
static const char *const adjs[] = {"small", "old",  "green", "quiet", "happy",
                                   "brave", "tall", "red",   "cold",  "bright"};
static const char *const advs[] = {"today", "again", "slowly", "at night", "by the sea"};
static const char *const places[] = {"in the garden", "near the castle", "on the hill",
                                     "under the bridge", "in the old town"};

#define PICK(arr, rng) (arr)[zero__rng_next(rng) % (sizeof(arr) / sizeof((arr)[0]))]

typedef struct sink {
    char *buf;
    size_t len, cap;
} sink_t;

static void put(sink_t *s, const char *str) {
    while (*str && s->len < s->cap) s->buf[s->len++] = *str++;
}

static void noun_phrase(sink_t *s, uint64_t *rng, int plural) {
    int r = (int)(zero__rng_next(rng) % 4);
    put(s, plural ? (r == 0 ? "some " : "the ") : (r == 0 ? "a " : "the "));
    if (zero__rng_next(rng) % 2) {
        put(s, PICK(adjs, rng));
        put(s, " ");
    }
    put(s, plural ? PICK(nouns_p, rng) : PICK(nouns_s, rng));
}

static void sentence(sink_t *s, uint64_t *rng, int capital) {
    int plural = (int)(zero__rng_next(rng) % 2);
    size_t start = s->len;
    noun_phrase(s, rng, plural);
    if (capital && start < s->len && s->buf[start] >= 'a' && s->buf[start] <= 'z')
        s->buf[start] = (char)(s->buf[start] - 'a' + 'A');
    put(s, " ");
    put(s, PICK(verbs, rng));
    if (!plural) put(s, "s");
    put(s, " ");
    noun_phrase(s, rng, (int)(zero__rng_next(rng) % 2));
    int tail = (int)(zero__rng_next(rng) % 3);
    if (tail == 1) {
        put(s, " ");
        put(s, PICK(advs, rng));
    } else if (tail == 2) {
        put(s, " ");
        put(s, PICK(places, rng));
    }
}

static void arithmetic(sink_t *s, uint64_t *rng) {
    int a = (int)(zero__rng_next(rng) % 10), b = (int)(zero__rng_next(rng) % 10);
    char line[64];
    snprintf(line, sizeof line, "%d plus %d is %d.\n", a, b, a + b);
    put(s, line);
}

void zero__data_builtin_text(char *buf, size_t bytes, uint64_t seed) {
    sink_t s = {buf, 0, bytes};
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    while (s.len < s.cap) {
        int kind = (int)(zero__rng_next(&rng) % 6);
        if (kind == 0) {
            arithmetic(&s, &rng);
        } else {
            sentence(&s, &rng, 1);
            if (kind == 1) { /* compound sentence */
                put(&s, ", and ");
                sentence(&s, &rng, 0);
            }
            put(&s, ".\n");
        }
    }
}

zero_status_t zero__data_builtin(zero_dataset_t *ds, size_t bytes, uint64_t seed) {
    memset(ds, 0, sizeof *ds);
    snprintf(ds->source, sizeof ds->source, "built-in corpus");
    ds->format = ZERO_DATA_BUILTIN;
    if (bytes == 0)
        return zero__error(ZERO_ERR_INVALID_ARG, "built-in corpus size 0 (expected > 0 bytes)");
    char *text = malloc(bytes);
    ds->tokens = malloc(bytes * sizeof *ds->tokens);
    if (!text || !ds->tokens) {
        free(text);
        free(ds->tokens);
        ds->tokens = NULL;
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot generate a %zu-byte corpus", bytes);
    }
    zero__data_builtin_text(text, bytes, seed);
    for (size_t i = 0; i < bytes; i++) {
        ds->tokens[i] = (unsigned char)text[i];
        if (ds->tokens[i] > ds->max_token) ds->max_token = ds->tokens[i];
    }
    free(text);
    ds->count = ds->train_count = bytes;
    return ZERO_OK;
}

zero_status_t zero__data_split(zero_dataset_t *ds, double val_fraction, int seq) {
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return zero__error(ZERO_ERR_CONFIG,
                           "data.val_fraction = %g is invalid (expected 0 < f < 1)", val_fraction);
    size_t val = (size_t)((double)ds->count * val_fraction);
    size_t train = ds->count - val, need = (size_t)seq + 1;
    if (train < need || val < need)
        return zero__error(ZERO_ERR_FORMAT,
                           "data '%s' has %zu tokens: a %.0f%% validation split leaves %zu "
                           "training and %zu validation tokens, but each part needs at least "
                           "seq + 1 = %zu (use more data or a shorter model.seq)",
                           ds->source, ds->count, 100.0 * val_fraction, train, val, need);
    ds->train_count = train;
    return ZERO_OK;
}

void zero__data_free(zero_dataset_t *ds) {
    if (!ds) return;
    free(ds->tokens);
    memset(ds, 0, sizeof *ds);
}

void zero__data_train_batch(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int32_t *x,
                            int32_t *y) {
    size_t span = ds->train_count - (size_t)T; /* start positions 0 .. span-1 */
    ZERO_ASSERT(ds->train_count >= (size_t)T + 1);
    for (int b = 0; b < B; b++) {
        size_t start = (size_t)(zero__rng_next(rng) % span);
        memcpy(x + (size_t)b * T, ds->tokens + start, (size_t)T * sizeof *x);
        memcpy(y + (size_t)b * T, ds->tokens + start + 1, (size_t)T * sizeof *y);
    }
}

void zero__data_train_batch_shard(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int rank,
                                  int world, int32_t *x, int32_t *y) {
    ZERO_ASSERT(rank >= 0 && rank < world);
    size_t span = ds->train_count - (size_t)T;
    ZERO_ASSERT(ds->train_count >= (size_t)T + 1);
    for (int w = 0; w < world; w++)
        for (int b = 0; b < B; b++) {
            size_t start = (size_t)(zero__rng_next(rng) % span);
            if (w != rank) continue;
            memcpy(x + (size_t)b * T, ds->tokens + start, (size_t)T * sizeof *x);
            memcpy(y + (size_t)b * T, ds->tokens + start + 1, (size_t)T * sizeof *y);
        }
}

size_t zero__data_val_windows(const zero_dataset_t *ds, int T) {
    size_t val = ds->count - ds->train_count;
    return val >= (size_t)T + 1 ? (val - 1) / (size_t)T : 0;
}

void zero__data_val_batch(const zero_dataset_t *ds, size_t batch_index, int B, int T, int32_t *x,
                          int32_t *y) {
    size_t windows = zero__data_val_windows(ds, T);
    ZERO_ASSERT(windows > 0);
    for (int b = 0; b < B; b++) {
        size_t w = (batch_index * (size_t)B + (size_t)b) % windows;
        size_t start = ds->train_count + w * (size_t)T;
        memcpy(x + (size_t)b * T, ds->tokens + start, (size_t)T * sizeof *x);
        memcpy(y + (size_t)b * T, ds->tokens + start + 1, (size_t)T * sizeof *y);
    }
}

double zero__data_unigram_entropy(const zero_dataset_t *ds, size_t begin, size_t end) {
    if (end > ds->count) end = ds->count;
    if (begin >= end) return 0.0;
    size_t vocab = (size_t)ds->max_token + 1;
    size_t *counts = calloc(vocab, sizeof *counts);
    if (!counts) return 0.0;
    for (size_t i = begin; i < end; i++) counts[ds->tokens[i]]++;
    double h = 0.0, n = (double)(end - begin);
    for (size_t v = 0; v < vocab; v++)
        if (counts[v]) {
            double p = (double)counts[v] / n;
            h -= p * log(p);
        }
    free(counts);
    return h;
}
