/* data.h — token streams for training (internal API): byte-level text files, nanoGPT raw uint16
 * .bin files, llm.c headered token files, and a built-in corpus the program generates itself.
 *
 * A dataset is one stream of int32 token ids, split deterministically: the first
 * (1 - val_fraction) of the stream trains, the tail validates (as char-rnn and nanoGPT do), so
 * the same file always gives the same split.
 *
 * File formats, chosen by content then name:
 *   llm.c    256 int32 header (magic 20240520, version 1, token count, ...), then uint16 tokens
 *   nanoGPT  a file named *.bin without that magic: raw little-endian uint16 tokens
 *   text     anything else: one token per byte (vocabulary 256)
 */
#ifndef ZERO_TRAIN_DATA_H
#define ZERO_TRAIN_DATA_H

#include "zero/core.h"

#include <stdint.h>

#define ZERO_LLMC_MAGIC 20240520
#define ZERO_LLMC_VERSION 1
#define ZERO_LLMC_HEADER_INTS 256

typedef enum {
    ZERO_DATA_TEXT,
    ZERO_DATA_NANOGPT_BIN,
    ZERO_DATA_LLMC_BIN,
    ZERO_DATA_BUILTIN,
    ZERO_DATA_FORMAT_COUNT
} zero_data_format_t;

const char *zero__data_format_name(zero_data_format_t format);

typedef struct zero_dataset {
    int32_t *tokens; /* owned (malloc) */
    size_t count;
    size_t train_count; /* [0, train_count) trains, [train_count, count) validates */
    int max_token;      /* largest id present */
    zero_data_format_t format;
    char source[256]; /* file name or "built-in corpus" */
} zero_dataset_t;

/* Load a file; every id must be < vocab (else ZERO_ERR_FORMAT naming the file, the id, its
 * position and the vocabulary). Missing file: ZERO_ERR_IO; empty: ZERO_ERR_FORMAT. */
zero_status_t zero__data_load(zero_dataset_t *ds, const char *path, int vocab);

/* Generate the built-in corpus: `bytes` bytes of English-like text from a small random grammar
 * (sentences with agreement, lists, arithmetic lines), deterministic in seed. Byte tokens. */
zero_status_t zero__data_builtin(zero_dataset_t *ds, size_t bytes, uint64_t seed);

/* Text of the built-in corpus into buf (bytes long, no terminator). For tests and `--print`. */
void zero__data_builtin_text(char *buf, size_t bytes, uint64_t seed);

/* Split: the last val_fraction (0 < f < 1) of the stream validates. Both parts must hold at
 * least seq + 1 tokens (else ZERO_ERR_FORMAT naming the source, its length and the need). */
zero_status_t zero__data_split(zero_dataset_t *ds, double val_fraction, int seq);

void zero__data_free(zero_dataset_t *ds);

/* B random windows of T+1 tokens from the training part: x = window[0..T), y = window[1..T].
 * rng is the caller's state (advanced). x, y: (B, T). */
void zero__data_train_batch(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int32_t *x,
                            int32_t *y);

/* Rank `rank`'s share of a global micro-batch of world x B windows: the windows are drawn from
 * rng exactly as zero__data_train_batch(world * B) draws them and this rank keeps windows
 * [rank * B, (rank + 1) * B). Every rank advances rng identically, so the global batch does not
 * depend on how it is split (one rank with world x B sees the same windows). */
void zero__data_train_batch_shard(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int rank,
                                  int world, int32_t *x, int32_t *y);

/* Number of disjoint validation windows of T+1 tokens, and batch i of them (windows i*B ..,
 * wrapping). Deterministic: every evaluation sees the same tokens. */
size_t zero__data_val_windows(const zero_dataset_t *ds, int T);
void zero__data_val_batch(const zero_dataset_t *ds, size_t batch_index, int B, int T, int32_t *x,
                          int32_t *y);

/* Entropy in nats of the unigram distribution of tokens [begin, end): the loss of a model that
 * ignores context, i.e. the baseline learning must beat. */
double zero__data_unigram_entropy(const zero_dataset_t *ds, size_t begin, size_t end);

#endif /* ZERO_TRAIN_DATA_H */
