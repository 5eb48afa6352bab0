/* harness.h — helpers the trainer tests share: run `zero train` in-process, read a file whole. */
#ifndef ZERO_TESTS_TRAIN_HARNESS_H
#define ZERO_TESTS_TRAIN_HARNESS_H

#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* `zero train ARGS...` in this process; args is NULL-terminated, args[0] the command name. */
static inline int train_cli(const char *const *args) {
    int argc = 0;
    char *argv[64];
    for (; args[argc] && argc < 63; argc++) argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    fflush(stdout);
    return zero__cli_train(argc, argv);
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

#endif /* ZERO_TESTS_TRAIN_HARNESS_H */
