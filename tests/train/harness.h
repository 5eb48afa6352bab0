/* harness.h — helpers the trainer tests share: run `zero train` in-process (through the CLI or
 * the trainer), read a file whole. */
#ifndef ZERO_TESTS_TRAIN_HARNESS_H
#define ZERO_TESTS_TRAIN_HARNESS_H

#include "cli/cli.h"
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* `zero train ARGS...` in this process; args is NULL-terminated, args[0] the command name. */
static inline int train_cli(const char *const *args) {
    int argc = 0;
    char *argv[64];
    for (; args[argc] && argc < 63; argc++) argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    fflush(stdout);
    return zero__cli_train(argc, argv);
}

/* The trainer in this process on the default config, then the key/value pairs of base and then
 * of sets (each NULL-terminated; either may be NULL), with the given io. Returns the status; rep
 * is filled on success (free it with zero__train_report_free). */
static inline zero_status_t train_pairs(const char *const *base, const char *const *sets,
                                        const zero_train_io_t *io, zero_train_report_t *rep) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = ZERO_OK;
    for (int i = 0; !st && base && base[i]; i += 2)
        st = zero__train_config_set(&c, base[i], base[i + 1]);
    for (int i = 0; !st && sets && sets[i]; i += 2)
        st = zero__train_config_set(&c, sets[i], sets[i + 1]);
    if (st) return st;
    return zero__train_run(&c, io, rep);
}

/* train_cli arguments after "train" for one step of a tiny model (1 layer, dim 32, 2 heads,
 * seq 16), quiet and without the start-up peak measurement. */
#define TINY_RUN_ARGS                                                                              \
    "-q", "--no-peak", "--steps", "1", "--set", "model.layers=1", "--set", "model.dim=32",         \
        "--set", "model.heads=2", "--set", "model.seq=16"

/* The first MiB of a file as a NUL-terminated string (malloc'd), or NULL. */
static inline char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    if (buf) buf[n] = 0;
    fclose(f);
    return buf;
}

/* A JSON file parsed (free with cJSON_Delete), or NULL. */
static inline cJSON *load_json(const char *path) {
    char *buf = slurp(path);
    cJSON *root = buf ? cJSON_Parse(buf) : NULL;
    free(buf);
    return root;
}

/* A number of a JSON object, NAN when it is missing or not a number. */
static inline double json_num(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

/* The units' sizes of a GPT (dim c, layers l, seq t, vocabulary v) over `ranks` ranks, as the
 * model declares them (src/model/gpt.c): the embeddings (wte v x c, wpe t x c), each block (ln1
 * g b, qkv w b, proj w b, ln2 g b, fc w b, fcproj w b), the final layernorm (g b); each tensor
 * padded to 16 elements, each unit to 16 x ranks. Returns the number of units (l + 2). */
static inline size_t gpt_unit_sizes(size_t *out, size_t c, int l, size_t t, size_t v, int ranks) {
#define SPAN16(n) (((n) + 15) / 16 * 16)
    size_t n = 0;
    out[n++] = SPAN16(v * c) + SPAN16(t * c);
    for (int i = 0; i < l; i++)
        out[n++] = SPAN16(c) * 2 + SPAN16(3 * c * c) + SPAN16(3 * c) + SPAN16(c * c) + SPAN16(c) +
                   SPAN16(c) * 2 + SPAN16(4 * c * c) + SPAN16(4 * c) + SPAN16(4 * c * c) +
                   SPAN16(c);
    out[n++] = SPAN16(c) * 2;
#undef SPAN16
    const size_t pad = 16 * (size_t)ranks;
    for (size_t i = 0; i < n; i++) out[i] = (out[i] + pad - 1) / pad * pad;
    return n;
}

/* The real text for the tests, when the shared data sits beside the clone
 * ($ZERO_SHARED_DIR/data/tinyshakespeare.txt, readable): its path into data (n bytes), else ""
 * (the built-in corpus); says which on stdout. */
static inline void test_data_path(char *data, size_t n) {
    const char *shared = getenv("ZERO_SHARED_DIR");
    data[0] = 0;
    if (shared && shared[0]) {
        snprintf(data, n, "%s/data/tinyshakespeare.txt", shared);
        if (access(data, R_OK) != 0) data[0] = 0;
    }
    printf("data: %s\n", data[0] ? data : "built-in corpus (tinyshakespeare not found)");
}

#endif /* ZERO_TESTS_TRAIN_HARNESS_H */
