/* data.c — opening token files (mapped), nanoGPT directories and llm.c shard globs, the built-in
 * corpus, the train/validation split and batches.
 *
 * Not here: the BPE tokenizer itself (src/text; a text file is encoded here with it), shuffling
 * across epochs (windows are drawn at random positions, which is what nanoGPT does). Invariants:
 * after zero__data_open every id in the stream is < the vocabulary it was opened for, and after
 * zero__data_split both parts hold at least seq + 1 tokens, so every window the batch functions
 * draw is in range. Pages are released with MADV_DONTNEED after each read: on a read-only file
 * mapping that only drops this process's page-table entries (the next access faults the page
 * back in from the page cache), so it is safe while other rank threads read the same pages.
 */
#include "train/data.h"

#include "core/core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const format_names[] = {"text (bytes)", "nanoGPT uint16 .bin",
                                           "llm.c token file", "built-in corpus", "text (BPE)"};
_Static_assert(sizeof format_names / sizeof format_names[0] == ZERO_DATA_FORMAT_COUNT,
               "format name table");

const char *zero__data_format_name(zero_data_format_t f) {
    return (unsigned)f < ZERO_DATA_FORMAT_COUNT ? format_names[f] : "?";
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int32_t rd32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24));
}

/* ------------------------------------------------------------------------------ reading */

/* Tokens [off, off + n) of one shard as int32. */
static void shard_copy(const zero_data_shard_t *sh, size_t off, size_t n, int32_t *out) {
    const unsigned char *p = sh->bytes + off * (size_t)sh->width;
    if (sh->width == 1)
        for (size_t i = 0; i < n; i++) out[i] = p[i];
    else if (sh->width == 2)
        for (size_t i = 0; i < n; i++) out[i] = (int32_t)(p[2 * i] | (p[2 * i + 1] << 8));
    else
        memcpy(out, p, n * sizeof *out); /* encoded tokens: native int32 */
}

/* Drop the pages under tokens [off, off + n) of a mapped shard from this process. */
static void shard_release(const zero_data_shard_t *sh, size_t off, size_t n) {
    if (!sh->map || n == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(sh->bytes + off * (size_t)sh->width);
    uintptr_t hi = lo + n * (size_t)sh->width;
    const uintptr_t map_lo = (uintptr_t)sh->map, map_hi = map_lo + sh->map_bytes;
    lo &= ~(page - 1);
    hi = (hi + page - 1) & ~(page - 1);
    if (lo < map_lo) lo = map_lo;
    if (hi > map_hi) hi = (map_hi + page - 1) & ~(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advice: failure is harmless */
}

/* The shard holding stream position pos (pos < count). */
static const zero_data_shard_t *shard_at(const zero_dataset_t *ds, size_t pos) {
    int lo = 0, hi = ds->shard_count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (ds->shards[mid].start <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &ds->shards[lo];
}

void zero__data_read(const zero_dataset_t *ds, size_t pos, size_t n, int32_t *out) {
    ZERO_ASSERT(pos <= ds->count && n <= ds->count - pos);
    while (n > 0) {
        const zero_data_shard_t *sh = shard_at(ds, pos);
        size_t off = pos - sh->start, take = ZERO_MIN(n, sh->count - off);
        shard_copy(sh, off, take, out);
        shard_release(sh, off, take);
        pos += take;
        out += take;
        n -= take;
    }
}

/* ------------------------------------------------------------------------------ opening */

/* A text shard's bytes encoded by tok into sh->tokens (uint16 when the tokenizer's ids fit, else
 * int32), the mapping then dropped. */
static zero_status_t encode_shard(zero_data_shard_t *sh, const zero_tokenizer_t *tok) {
    int32_t *ids = NULL;
    size_t n = 0;
    const double t0 = zero_time_now();
    zero_status_t st = zero_tokenizer_encode(tok, sh->bytes, sh->count, &ids, &n);
    if (st) {
        char why[600];
        snprintf(why, sizeof why, "%s", zero_last_error());
        return zero__error(st, "cannot encode data file '%s': %s", sh->path, why);
    }
    zero__log(ZERO_LOG_INFO, -1, 0, "data: '%s' (%.2f MB) encoded into %zu tokens in %.2f s",
              sh->path, (double)sh->count / 1e6, n, zero_time_now() - t0);
    munmap(sh->map, sh->map_bytes);
    sh->map = NULL;
    sh->map_bytes = 0;
    sh->width = 4;
    if (zero_tokenizer_vocab(tok) <= 65536) { /* GPT-2's 50257: half the memory */
        uint16_t *narrow = (uint16_t *)ids;   /* in place: each write is behind its read */
        for (size_t i = 0; i < n; i++) narrow[i] = (uint16_t)ids[i];
        sh->width = 2;
        int32_t *shrunk = n ? realloc(ids, n * sizeof *narrow) : NULL;
        if (shrunk) ids = shrunk; /* else the larger block serves as well */
    }
    sh->tokens = ids;
    sh->bytes = (const unsigned char *)ids;
    sh->count = n;
    return ZERO_OK;
}

/* Map one file into *sh and recognise its format; a text file is encoded when tok is given. */
static zero_status_t map_file(zero_data_shard_t *sh, const char *path, zero_data_format_t *format,
                              const zero_tokenizer_t *tok) {
    memset(sh, 0, sizeof *sh);
    if (strlen(path) >= sizeof sh->path)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "data file name '%.80s...' is too long (%zu bytes, "
                           "expected < %d)",
                           path, strlen(path), ZERO_DATA_PATH_MAX);
    snprintf(sh->path, sizeof sh->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zero__error(
            ZERO_ERR_IO, "cannot open data file '%s': %s (expected a readable text or token file)",
            path, strerror(errno));
    struct stat sb;
    zero_status_t st = ZERO_OK;
    if (fstat(fd, &sb) != 0)
        st = zero__error(ZERO_ERR_IO, "cannot stat data file '%s': %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode))
        st = zero__error(ZERO_ERR_FORMAT,
                         "data file '%s' is a directory (expected a text or token file, or a "
                         "nanoGPT data directory holding train.bin)",
                         path);
    else if (!S_ISREG(sb.st_mode))
        st = zero__error(ZERO_ERR_FORMAT,
                         "data file '%s' is not a regular file (expected a text or token file)",
                         path);
    else if (sb.st_size == 0)
        st =
            zero__error(ZERO_ERR_FORMAT, "data file '%s' is empty (expected text or tokens)", path);
    if (st) {
        close(fd);
        return st;
    }
    const size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (map == MAP_FAILED)
        return zero__error(ZERO_ERR_IO, "cannot map data file '%s' (%zu bytes): %s", path, size,
                           strerror(errno));
    sh->map = map;
    sh->map_bytes = size;
    const unsigned char *buf = map;
    const size_t header_bytes = ZERO_LLMC_HEADER_INTS * 4;
    if (size >= 4 && rd32(buf) == ZERO_LLMC_MAGIC) {
        int32_t version = size >= 12 ? rd32(buf + 4) : -1, count = size >= 12 ? rd32(buf + 8) : -1;
        if (size < header_bytes)
            st = zero__error(ZERO_ERR_FORMAT,
                             "llm.c token file '%s' is %zu bytes, shorter than its %zu-byte "
                             "header (expected magic %d, version %d, token count, then uint16 "
                             "tokens)",
                             path, size, header_bytes, ZERO_LLMC_MAGIC, ZERO_LLMC_VERSION);
        else if (version != ZERO_LLMC_VERSION)
            st = zero__error(ZERO_ERR_FORMAT,
                             "llm.c token file '%s' has version %d (expected %d: uint16 tokens)",
                             path, (int)version, ZERO_LLMC_VERSION);
        else if (count < 0 || size != header_bytes + 2 * (size_t)count)
            st = zero__error(ZERO_ERR_FORMAT,
                             "llm.c token file '%s' is %zu bytes but its header announces %d "
                             "tokens (expected %zu bytes)",
                             path, size, (int)count,
                             header_bytes + 2 * (size_t)(count < 0 ? 0 : count));
        *format = ZERO_DATA_LLMC_BIN;
        sh->bytes = buf + header_bytes;
        sh->count = count > 0 ? (size_t)count : 0;
        sh->width = 2;
    } else if (ends_with(path, ".bin")) {
        if (size % 2)
            st = zero__error(ZERO_ERR_FORMAT,
                             "nanoGPT token file '%s' has an odd size of %zu bytes (expected "
                             "uint16 tokens: an even size)",
                             path, size);
        *format = ZERO_DATA_NANOGPT_BIN;
        sh->bytes = buf;
        sh->count = size / 2;
        sh->width = 2;
    } else {
        *format = tok ? ZERO_DATA_TEXT_BPE : ZERO_DATA_TEXT;
        sh->bytes = buf;
        sh->count = size;
        sh->width = 1;
        if (tok) st = encode_shard(sh, tok);
    }
    if (!st && sh->count == 0)
        st = zero__error(ZERO_ERR_FORMAT, "data file '%s' holds no tokens (expected at least one)",
                         path);
    if (st) {
        if (sh->map) munmap(map, size);
        free(sh->tokens);
        sh->map = NULL;
        sh->tokens = NULL;
    }
    return st;
}

/* Read a shard once from end to end: every id < vocab, the largest id, the content hash (chained
 * chunk by chunk: the same files give the same hash). */
static zero_status_t scan_shard(zero_dataset_t *ds, const zero_data_shard_t *sh,
                                zero_data_format_t format, int vocab, int32_t *chunk,
                                size_t chunk_count) {
    for (size_t off = 0; off < sh->count; off += chunk_count) {
        size_t n = ZERO_MIN(chunk_count, sh->count - off);
        shard_copy(sh, off, n, chunk);
        shard_release(sh, off, n);
        for (size_t i = 0; i < n; i++) {
            if (chunk[i] >= vocab)
                return zero__error(ZERO_ERR_FORMAT,
                                   "data file '%s' (%s): token %d at position %zu is outside the "
                                   "model's vocabulary (expected ids 0..%d; raise model.vocab)",
                                   sh->path, zero__data_format_name(format), (int)chunk[i], off + i,
                                   vocab - 1);
            if (chunk[i] > ds->max_token) ds->max_token = chunk[i];
        }
        ds->content_hash = zero__hash_bytes(ds->content_hash, chunk, n * sizeof *chunk);
    }
    return ZERO_OK;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The files a data path names: a file; a nanoGPT directory's `name` (train.bin or val.bin); or
 * the sorted matches of a glob pattern. *files is g's list (globfree) or single, holding one. */
static zero_status_t expand(const char *path, const char *name, glob_t *g, int *globbed, char *one,
                            size_t one_size, const char **single, const char ***files,
                            size_t *count) {
    *globbed = 0;
    if (is_dir(path)) {
        snprintf(one, one_size, "%s%s%s", path, ends_with(path, "/") ? "" : "/", name);
        if (!exists(one))
            return zero__error(ZERO_ERR_FORMAT,
                               "data directory '%s' has no %s (expected a nanoGPT data "
                               "directory: train.bin, val.bin and meta.pkl as its prepare.py "
                               "writes them)",
                               path, name);
    } else if (!exists(path) && strpbrk(path, "*?[")) {
        int rc = glob(path, 0, NULL, g);
        if (rc == GLOB_NOMATCH)
            return zero__error(ZERO_ERR_IO,
                               "data pattern '%s' matches no file (expected token files such as "
                               "llm.c's fineweb_train_*.bin)",
                               path);
        if (rc != 0) {
            globfree(g);
            return zero__error(ZERO_ERR_IO, "cannot expand data pattern '%s' (glob error %d)", path,
                               rc);
        }
        *globbed = 1;
        *files = (const char **)g->gl_pathv;
        *count = g->gl_pathc;
        return ZERO_OK;
    } else {
        snprintf(one, one_size, "%s", path);
    }
    single[0] = one;
    *files = single;
    *count = 1;
    return ZERO_OK;
}

/* Map and scan the files of `path` onto the end of ds's shard list. */
static zero_status_t add_files(zero_dataset_t *ds, const char *path, const char *name, int vocab,
                               const zero_tokenizer_t *tok, int32_t *chunk, size_t chunk_count) {
    glob_t g;
    int globbed = 0;
    char one[ZERO_DATA_PATH_MAX + 16];
    const char *single[1], **files = NULL;
    size_t count = 0;
    zero_status_t st = expand(path, name, &g, &globbed, one, sizeof one, single, &files, &count);
    if (st) return st;
    zero_data_shard_t *grown =
        realloc(ds->shards, ((size_t)ds->shard_count + count) * sizeof *grown);
    if (!grown) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot list %zu data files of '%s'", count, path);
        goto done;
    }
    ds->shards = grown;
    for (size_t i = 0; i < count && !st; i++) {
        zero_data_shard_t *sh = &ds->shards[ds->shard_count];
        zero_data_format_t format = ZERO_DATA_TEXT;
        st = map_file(sh, files[i], &format, tok);
        if (st) break;
        ds->shard_count++; /* from here zero__data_free unmaps it */
        if (ds->shard_count == 1) {
            ds->format = format;
        } else if (format != ds->format) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "data files '%s' (%s) and '%s' (%s) differ in format (expected one "
                             "format for all training and validation files)",
                             sh->path, zero__data_format_name(format), ds->shards[0].path,
                             zero__data_format_name(ds->format));
            break;
        }
        sh->start = ds->count;
        st = scan_shard(ds, sh, format, vocab, chunk, chunk_count);
        ds->count += sh->count;
    }
done:
    if (globbed) globfree(&g);
    return st;
}

zero_status_t zero__data_open(zero_dataset_t *ds, const char *path, const char *val_path,
                              int vocab) {
    return zero__data_open_tokenized(ds, path, val_path, vocab, NULL);
}

zero_status_t zero__data_open_tokenized(zero_dataset_t *ds, const char *path, const char *val_path,
                                        int vocab, const zero_tokenizer_t *tok) {
    memset(ds, 0, sizeof *ds);
    if (!path || !path[0])
        return zero__error(ZERO_ERR_INVALID_ARG, "data file name is empty (expected a path)");
    snprintf(ds->source, sizeof ds->source, "%s", path);
    ds->content_hash = 0xcbf29ce484222325ull;
    const size_t chunk_count = 1 << 16;
    int32_t *chunk = malloc(chunk_count * sizeof *chunk);
    if (!chunk) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot read data: out of memory");
    zero_status_t st = add_files(ds, path, "train.bin", vocab, tok, chunk, chunk_count);
    if (!st) {
        /* A nanoGPT directory's val.bin validates unless a validation path is given. */
        char dir_val[ZERO_DATA_PATH_MAX + 16];
        const char *val = val_path && val_path[0] ? val_path : NULL;
        if (!val && is_dir(path)) {
            snprintf(dir_val, sizeof dir_val, "%s%sval.bin", path, ends_with(path, "/") ? "" : "/");
            if (exists(dir_val)) val = path;
        }
        if (val) {
            ds->train_count = ds->count;
            ds->val_given = 1;
            st = add_files(ds, val, "val.bin", vocab, tok, chunk, chunk_count);
        } else {
            ds->train_count = ds->count;
        }
    }
    free(chunk);
    if (st) zero__data_free(ds);
    return st;
}
/* ------------------------------------------------------------------------------ meta.pkl */

/* The opcodes the walk knows: fixed argument bytes, length-prefix bytes, and what they mean. */
enum { P_OTHER, P_INT, P_STR, P_MEMO, P_MARK, P_POP_MARK, P_STOP };
static const struct {
    unsigned char op, arg, len_bytes, kind;
} pickle_ops[] = {
    {'.', 0, 0, P_STOP},     {0x80, 1, 0, P_OTHER},   {0x95, 8, 0, P_OTHER}, /* PROTO FRAME */
    {0x94, 0, 0, P_MEMO},    {'q', 1, 0, P_MEMO},     {'r', 4, 0, P_MEMO},   /* memo puts */
    {'h', 1, 0, P_OTHER},    {'j', 4, 0, P_OTHER},                           /* memo gets */
    {'(', 0, 0, P_MARK},     {'u', 0, 0, P_POP_MARK}, {'e', 0, 0, P_POP_MARK},
    {'t', 0, 0, P_POP_MARK}, {'s', 0, 0, P_OTHER},    {'a', 0, 0, P_OTHER},
    {'}', 0, 0, P_OTHER},    {']', 0, 0, P_OTHER},    {')', 0, 0, P_OTHER},
    {0x85, 0, 0, P_OTHER},   {0x86, 0, 0, P_OTHER},   {0x87, 0, 0, P_OTHER}, /* TUPLE1-3 */
    {'N', 0, 0, P_OTHER},    {0x88, 0, 0, P_OTHER},   {0x89, 0, 0, P_OTHER}, /* None bools */
    {'K', 1, 0, P_INT},      {'M', 2, 0, P_INT},      {'J', 4, 0, P_INT},
    {0x8a, 0, 1, P_INT},     {'G', 8, 0, P_OTHER},                         /* LONG1 float */
    {0x8c, 0, 1, P_STR},     {'X', 0, 4, P_STR},      {0x8d, 0, 8, P_STR}, /* unicode */
    {'U', 0, 1, P_STR},      {'T', 0, 4, P_STR},                           /* py2 str */
    {'C', 0, 1, P_STR},      {'B', 0, 4, P_STR},      {0x8e, 0, 8, P_STR}, /* bytes */
};

/* nanoGPT's prepare.py writes meta.pkl with pickle.dump({'vocab_size': n, 'itos': {...},
 * 'stoi': {...}}) at Python's default protocol (4, or 5 from 3.14). This walks the opcodes of
 * protocols 2-5 that such a dict (and plain containers of ints, strings, bytes and floats) uses,
 * and takes the int that follows the key 'vocab_size' of the outer dict (mark depth <= 1: the
 * itos / stoi dicts' items sit at depth 2). It builds no objects. */
static zero_status_t pickle_vocab(const unsigned char *p, size_t n, const char *path, int *vocab) {
    size_t i = 0;
    int depth = 0, after_key = 0;
    while (i < n) {
        const unsigned op = p[i++];
        size_t k = 0;
        while (k < ZERO_ARRAY_LEN(pickle_ops) && pickle_ops[k].op != op) k++;
        if (k == ZERO_ARRAY_LEN(pickle_ops))
            return zero__error(ZERO_ERR_FORMAT,
                               "'%s': pickle opcode 0x%02x at byte %zu is not one this reader "
                               "knows (expected nanoGPT's meta.pkl, a dict with an int "
                               "'vocab_size', pickle protocol 2-5; or set model.vocab)",
                               path, op, i - 1);
        const int kind = pickle_ops[k].kind;
        size_t arg = pickle_ops[k].arg, len_bytes = pickle_ops[k].len_bytes;
        if (kind == P_STOP) break;
        if (kind == P_MARK) depth++;
        if (kind == P_POP_MARK) depth--;
        if (kind == P_MEMO) { /* between a key and its value: keeps after_key */
            i += arg;
            continue;
        }
        if (len_bytes) {
            if (n - i < len_bytes) break;
            uint64_t len = 0;
            for (size_t b = 0; b < len_bytes; b++) len |= (uint64_t)p[i + b] << (8 * b);
            i += len_bytes;
            arg = len > n ? n : (size_t)len;
        }
        if (n - i < arg) break;
        const unsigned char *a = p + i;
        i += arg;
        if (after_key) {
            if (kind != P_INT || arg > 8)
                return zero__error(ZERO_ERR_FORMAT,
                                   "'%s': 'vocab_size' is not an int (expected nanoGPT's "
                                   "meta.pkl; or set model.vocab)",
                                   path);
            uint64_t v = 0;
            for (size_t b = 0; b < arg; b++) v |= (uint64_t)a[b] << (8 * b);
            int negative = op == 'J' ? (a[3] & 0x80) : op == 0x8a && arg ? (a[arg - 1] & 0x80) : 0;
            if (negative || v < 1 || v > (uint64_t)INT32_MAX)
                return zero__error(ZERO_ERR_FORMAT,
                                   "'%s': vocab_size is %s%llu (expected a positive int)", path,
                                   negative ? "negative, " : "", (unsigned long long)v);
            *vocab = (int)v;
            return ZERO_OK;
        }
        after_key = kind == P_STR && depth <= 1 && arg == 10 && !memcmp(a, "vocab_size", 10);
    }
    return zero__error(ZERO_ERR_FORMAT,
                       "'%s' holds no int 'vocab_size' that this reader finds (expected nanoGPT's "
                       "meta.pkl, a dict with 'vocab_size'; or set model.vocab)",
                       path);
}

zero_status_t zero__data_dir_vocab(const char *path, int *vocab) {
    *vocab = 0;
    if (!path || !is_dir(path)) return ZERO_OK;
    char meta[ZERO_DATA_PATH_MAX + 16];
    snprintf(meta, sizeof meta, "%s%smeta.pkl", path, ends_with(path, "/") ? "" : "/");
    FILE *f = fopen(meta, "rb");
    if (!f)
        return zero__error(ZERO_ERR_IO,
                           "cannot read '%s': %s (the vocabulary size of nanoGPT data directory "
                           "'%s' comes from its meta.pkl, or set model.vocab)",
                           meta, strerror(errno), path);
    const size_t cap = 64u << 20; /* a character vocabulary's meta.pkl is a few KiB */
    unsigned char *buf = malloc(cap);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    int err = ferror(f);
    fclose(f);
    zero_status_t st;
    if (!buf)
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot read '%s': out of memory", meta);
    else if (err)
        st = zero__error(ZERO_ERR_IO, "cannot read '%s': read error", meta);
    else
        st = pickle_vocab(buf, n, meta, vocab);
    free(buf);
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
    ds->text = malloc(bytes);
    ds->shards = calloc(1, sizeof *ds->shards);
    if (!ds->text || !ds->shards) {
        zero__data_free(ds);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot generate a %zu-byte corpus", bytes);
    }
    zero__data_builtin_text(ds->text, bytes, seed);
    zero_data_shard_t *sh = &ds->shards[0];
    sh->bytes = (const unsigned char *)ds->text;
    sh->count = bytes;
    sh->width = 1;
    snprintf(sh->path, sizeof sh->path, "%s", ds->source);
    ds->shard_count = 1;
    ds->content_hash = 0xcbf29ce484222325ull;
    int32_t chunk[4096];
    zero_status_t st = scan_shard(ds, sh, ds->format, 256, chunk, ZERO_ARRAY_LEN(chunk));
    ZERO_ASSERT(st == ZERO_OK); /* bytes are < 256 */
    ds->count = ds->train_count = bytes;
    return ZERO_OK;
}

zero_status_t zero__data_split(zero_dataset_t *ds, double val_fraction, int seq) {
    const size_t need = (size_t)seq + 1;
    if (ds->val_given) {
        size_t val = ds->count - ds->train_count;
        if (ds->train_count < need || val < need)
            return zero__error(ZERO_ERR_FORMAT,
                               "data '%s' has %zu training and %zu validation tokens (validation "
                               "from '%s'), but each part needs at least seq + 1 = %zu (use more "
                               "data or a shorter model.seq)",
                               ds->source, ds->train_count, val,
                               ds->shards[ds->shard_count - 1].path, need);
        return ZERO_OK;
    }
    if (!(val_fraction > 0.0 && val_fraction < 1.0))
        return zero__error(ZERO_ERR_CONFIG,
                           "data.val_fraction = %g is invalid (expected 0 < f < 1)", val_fraction);
    size_t val = (size_t)((double)ds->count * val_fraction);
    size_t train = ds->count - val;
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
    for (int i = 0; i < ds->shard_count; i++) {
        if (ds->shards[i].map) munmap(ds->shards[i].map, ds->shards[i].map_bytes);
        free(ds->shards[i].tokens);
    }
    free(ds->shards);
    free(ds->text);
    memset(ds, 0, sizeof *ds);
}

/* One window of T + 1 tokens at stream position start into x and y (T each). */
static void window(const zero_dataset_t *ds, size_t start, int T, int32_t *x, int32_t *y) {
    zero__data_read(ds, start, (size_t)T, x);
    memcpy(y, x + 1, (size_t)(T - 1) * sizeof *y);
    zero__data_read(ds, start + (size_t)T, 1, y + T - 1);
}

/* The next training window's start: at random in [0, train_count - T), or the next of the
 * consecutive windows (the state counts them). */
static size_t next_start(const zero_dataset_t *ds, uint64_t *state, int T) {
    ZERO_ASSERT(ds->train_count >= (size_t)T + 1);
    if (ds->sequential) {
        const uint64_t windows = (ds->train_count - 1) / (size_t)T;
        return (size_t)((*state)++ % windows) * (size_t)T;
    }
    return (size_t)(zero__rng_next(state) % (ds->train_count - (size_t)T));
}

void zero__data_train_batch(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int32_t *x,
                            int32_t *y, size_t *starts) {
    for (int b = 0; b < B; b++) {
        size_t start = next_start(ds, rng, T);
        if (starts) starts[b] = start;
        window(ds, start, T, x + (size_t)b * T, y + (size_t)b * T);
    }
}

void zero__data_train_batch_shard(const zero_dataset_t *ds, uint64_t *rng, int B, int T, int rank,
                                  int world, int32_t *x, int32_t *y) {
    ZERO_ASSERT(rank >= 0 && rank < world);
    for (int w = 0; w < world; w++)
        for (int b = 0; b < B; b++) {
            size_t start = next_start(ds, rng, T);
            if (w == rank) window(ds, start, T, x + (size_t)b * T, y + (size_t)b * T);
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
        window(ds, ds->train_count + w * (size_t)T, T, x + (size_t)b * T, y + (size_t)b * T);
    }
}

double zero__data_unigram_entropy(const zero_dataset_t *ds, size_t begin, size_t end) {
    if (end > ds->count) end = ds->count;
    if (begin >= end) return 0.0;
    size_t vocab = (size_t)ds->max_token + 1, chunk_count = 1 << 16;
    size_t *counts = calloc(vocab, sizeof *counts);
    int32_t *chunk = malloc(chunk_count * sizeof *chunk);
    double h = 0.0, n = (double)(end - begin);
    if (counts && chunk) {
        for (size_t pos = begin; pos < end; pos += chunk_count) {
            size_t m = ZERO_MIN(chunk_count, end - pos);
            zero__data_read(ds, pos, m, chunk);
            for (size_t i = 0; i < m; i++) counts[chunk[i]]++;
        }
        for (size_t v = 0; v < vocab; v++)
            if (counts[v]) {
                double p = (double)counts[v] / n;
                h -= p * log(p);
            }
    }
    free(counts);
    free(chunk);
    return h;
}
