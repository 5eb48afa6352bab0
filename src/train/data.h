/* data.h — token streams for training (internal API): byte-level text files, nanoGPT raw uint16
 * .bin files (one file, or a directory with train.bin, val.bin and meta.pkl), llm.c headered
 * token files (one, or a glob of shards), and a built-in corpus the program generates itself.
 *
 * A dataset is one stream of token ids made of segments ("shards"): the training files in order,
 * then the validation files when they are given apart (data.val_path, a directory's val.bin).
 * Otherwise the first (1 - val_fraction) of the stream trains and the tail validates (as char-rnn
 * and nanoGPT's shakespeare do), so the same files always give the same split. Files are mapped
 * read-only (mmap), never read whole: a window's tokens are copied out of the mapping and its
 * pages released from the process (they stay in the page cache), so the resident memory stays
 * flat whatever the files' size. The files must not change while a run reads them.
 *
 * File formats, chosen by content then name:
 *   llm.c    256 int32 header (magic 20240520, version 1, token count, ...), then uint16 tokens
 *   nanoGPT  a file named *.bin without that magic: raw little-endian uint16 tokens
 *   text     anything else: one token per byte (vocabulary 256), or, given a tokenizer, its
 *            GPT-2 BPE tokens, encoded once when the file is opened and kept in memory
 * All files of one dataset have one format.
 *
 * Sampling (docs/data.md): training windows start uniformly at random in the training part of
 * the stream, as nanoGPT's get_batch draws them, or (sequential) one after another from its
 * start, wrapping at the end, as llm.c's DataLoader reads its shards; a window may span two
 * shards (llm.c's shards cut one token stream), so one file and the same tokens split into
 * shards give the same batches. The sampler's whole state is one 64-bit value (an RNG state, or
 * the index of the next window), which checkpoints save.
 */
#ifndef ZERO_TRAIN_DATA_H
#define ZERO_TRAIN_DATA_H

#include "zero/core.h"
#include "zero/tokenizer.h"

#include <stdint.h>

#define ZERO_LLMC_MAGIC 20240520
#define ZERO_LLMC_VERSION 1
#define ZERO_LLMC_HEADER_INTS 256
#define ZERO_DATA_PATH_MAX 512

typedef enum {
    ZERO_DATA_TEXT,
    ZERO_DATA_NANOGPT_BIN,
    ZERO_DATA_LLMC_BIN,
    ZERO_DATA_BUILTIN,
    ZERO_DATA_TEXT_BPE,
    ZERO_DATA_FORMAT_COUNT
} zero_data_format_t;

const char *zero__data_format_name(zero_data_format_t format);

/* One segment of the stream: a mapped file, or the built-in corpus's text. */
typedef struct zero_data_shard {
    const unsigned char *bytes; /* view: the first token (in map, or the dataset's text) */
    void *map;                  /* owned mapping of the whole file (munmap), or NULL */
    void *tokens;               /* owned: a text file's tokens encoded by a tokenizer, or NULL */
    size_t map_bytes;
    size_t start, count; /* position of the first token in the stream; tokens */
    int width; /* bytes per token: 1 (text), 2 (uint16 little-endian), 4 (encoded int32) */
    char path[ZERO_DATA_PATH_MAX];
} zero_data_shard_t;

typedef struct zero_dataset {
    zero_data_shard_t *shards; /* owned, in stream order */
    int shard_count;
    size_t count;
    size_t train_count; /* [0, train_count) trains, [train_count, count) validates */
    int val_given;      /* the validation part is its own files: train_count is fixed */
    int sequential;     /* training windows in order (data.order), else at random */
    int max_token;      /* largest id present */
    uint64_t
        content_hash; /* zero__hash_bytes of the stream as int32 ids, for the ranks' agreement */
    zero_data_format_t format;
    char *text;                      /* owned: the built-in corpus, or NULL */
    char source[ZERO_DATA_PATH_MAX]; /* the training path as given, or "built-in corpus" */
} zero_dataset_t;

/* Open the data: `path` is a file, a nanoGPT directory (train.bin, and val.bin when present,
 * which then validates) or a glob(3) pattern of shards (sorted by name); `val_path` (NULL or ""
 * for none) the same for the validation part, which then overrides a directory's val.bin. Every
 * file is mapped and checked once from end to end: its format and size, and every id < vocab
 * (else ZERO_ERR_FORMAT naming the file, the id, its position and the vocabulary). A missing
 * path or a glob matching nothing: ZERO_ERR_IO; a directory without train.bin, another kind of
 * file, an empty file, a size that is not a whole number of tokens, a bad llm.c header, files of
 * different formats: ZERO_ERR_FORMAT, each naming the file and what was expected. */
zero_status_t zero__data_open(zero_dataset_t *ds, const char *path, const char *val_path,
                              int vocab);

/* zero__data_open with a tokenizer (NULL: none): text files are encoded with it (format "text
 * (BPE)"), in memory, as uint16 when its ids fit, else int32; token files are read as they are.
 * Encoding errors name the file. */
zero_status_t zero__data_open_tokenized(zero_dataset_t *ds, const char *path, const char *val_path,
                                        int vocab, const zero_tokenizer_t *tok);

/* The vocabulary size of a nanoGPT data directory: `vocab_size` of the dict in path/meta.pkl
 * (a pickle, protocols 2-5). *vocab = 0 and ZERO_OK when path is not a directory. A missing
 * meta.pkl: ZERO_ERR_IO naming it and saying to set model.vocab; a pickle without an int
 * vocab_size (or with an opcode this reader does not know): ZERO_ERR_FORMAT naming it. */
zero_status_t zero__data_dir_vocab(const char *path, int *vocab);

/* Generate the built-in corpus: `bytes` bytes of English-like text from a small random grammar
 * (sentences with agreement, lists, arithmetic lines), deterministic in seed. Byte tokens. */
zero_status_t zero__data_builtin(zero_dataset_t *ds, size_t bytes, uint64_t seed);

/* Text of the built-in corpus into buf (bytes long, no terminator). For tests and `--print`. */
void zero__data_builtin_text(char *buf, size_t bytes, uint64_t seed);

/* Split: the last val_fraction (0 < f < 1) of the stream validates, unless the validation part
 * was given as its own files (val_given: the fraction does not apply). Both parts must hold at
 * least seq + 1 tokens (else ZERO_ERR_FORMAT naming the source, its length and the need). */
zero_status_t zero__data_split(zero_dataset_t *ds, double val_fraction, int seq);

/* Unmap and free; ds may be zeroed or NULL. */
void zero__data_free(zero_dataset_t *ds);

/* Tokens [pos, pos + n) of the stream as int32 into out, then their pages released from the
 * process. pos + n <= count. Thread-safe (rank threads read one dataset at once). */
void zero__data_read(const zero_dataset_t *ds, size_t pos, size_t n, int32_t *out);

/* B windows of T+1 tokens from the training part: x = window[0..T), y = window[1..T]. rng is the
 * caller's sampler state (advanced): at random, each start uniform in [0, train_count - T) drawn
 * from the RNG state; sequential, window k = (*rng)++ starts at (k mod W) x T, W =
 * (train_count - 1) / T windows. x, y: (B, T). starts (may be NULL): each window's first position
 * in the stream (B). */
void zero__data_train_batch(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int32_t *x,
                            int32_t *y, size_t *starts);

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
