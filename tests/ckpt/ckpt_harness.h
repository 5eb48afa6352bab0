/* ckpt_harness.h — a synthetic training state for the checkpoint tests: a few units with odd
 * sizes, each state a full unpadded fp32 buffer whose values are a function of (step, unit,
 * state, index), and shard-access callbacks that play the engine at any world size.
 *
 * The loader callback checks each delivered range independently: inside the rank's shard at the
 * load's world size, equal to the reference below param_count, zero in the padding, delivered
 * exactly once.
 */
#ifndef ZERO_TEST_CKPT_HARNESS_H
#define ZERO_TEST_CKPT_HARNESS_H

#include "zero/zero.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H_MAX_UNITS 8

typedef struct harness {
    zero_ckpt_layout_t layout;
    zero_ckpt_unit_t units[H_MAX_UNITS];
    zero_ckpt_tensor_t tensors[H_MAX_UNITS][4];
    int64_t step;
    int fail_get_after; /* > 0: the get callback fails on that call (simulated engine error) */
    int get_calls;
    /* loading */
    int world;
    long long put_calls;
    long long bad;
    unsigned char *seen[H_MAX_UNITS][ZERO_CKPT_STATE_COUNT]; /* per padded element at `world` */
} harness_t;

/* The value of element i: distinct per (step, unit, state, i), exact in fp32. */
static inline float h_value(int64_t step, int unit, int state, size_t i) {
    uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(unit * 40503u) ^
                 (uint32_t)(state * 977u) ^ (uint32_t)(step * 7919u);
    x ^= x >> 15;
    return (float)(x & 0xFFFFFF) / 4096.0f - 2048.0f;
}

/* units: sizes of the units (tensors: one 2-D [rows, cols] + one 1-D remainder). */
static inline void h_init(harness_t *h, int n, const size_t *sizes, int64_t step) {
    memset(h, 0, sizeof *h);
    static const char *names[H_MAX_UNITS] = {"embeddings", "block.0", "block.1", "block.2",
                                             "block.3",    "block.4", "block.5", "final"};
    static const char *tn[2] = {"w", "b"};
    h->layout.unit_count = n;
    h->layout.units = h->units;
    for (int u = 0; u < n; u++) {
        size_t rows = sizes[u] / 16;
        h->tensors[u][0] = (zero_ckpt_tensor_t){tn[0], 2, {rows, 16}, 0, 0};
        h->tensors[u][1] = (zero_ckpt_tensor_t){tn[1], 1, {sizes[u] - rows * 16}, rows * 16, 1};
        h->units[u] = (zero_ckpt_unit_t){names[u], sizes[u], 2, h->tensors[u], 1};
    }
    h->step = step;
}

static inline zero_status_t h_get(void *user, int rank, int unit, zero_ckpt_state_t state,
                                  size_t offset, size_t count, float *out) {
    harness_t *h = user;
    (void)rank;
    if (h->fail_get_after > 0 && ++h->get_calls >= h->fail_get_after) return ZERO_ERR_INTERNAL;
    size_t pc = h->units[unit].param_count;
    for (size_t i = 0; i < count; i++)
        out[i] = offset + i < pc ? h_value(h->step, unit, (int)state, offset + i) : 0.0f;
    return ZERO_OK;
}

static inline void h_load_begin(harness_t *h, int world) {
    h->world = world;
    h->put_calls = 0;
    h->bad = 0;
    for (int u = 0; u < h->layout.unit_count; u++)
        for (int s = 0; s < ZERO_CKPT_STATE_COUNT; s++) {
            free(h->seen[u][s]);
            h->seen[u][s] = calloc(zero_ckpt_padded_count(h->units[u].param_count, world) + 1, 1);
        }
}

static inline zero_status_t h_put(void *user, int rank, int unit, zero_ckpt_state_t state,
                                  size_t offset, size_t count, const float *in) {
    harness_t *h = user;
    h->put_calls++;
    size_t so, sc, pc = h->units[unit].param_count;
    zero_ckpt_shard_range(pc, h->world, rank, &so, &sc);
    if (offset < so || offset + count > so + sc) {
        h->bad++;
        return ZERO_OK;
    }
    for (size_t i = 0; i < count; i++) {
        size_t g = offset + i;
        float want = g < pc ? h_value(h->step, unit, (int)state, g) : 0.0f;
        if (memcmp(&want, &in[i], sizeof want) != 0 || h->seen[unit][state][g]) h->bad++;
        h->seen[unit][state][g] = 1;
    }
    return ZERO_OK;
}

/* After a load: every element of every state loaded (states < nstates) exactly once. */
static inline long long h_load_missing(const harness_t *h, int nstates) {
    long long missing = 0;
    for (int u = 0; u < h->layout.unit_count; u++)
        for (int s = 0; s < nstates; s++) {
            size_t n = zero_ckpt_padded_count(h->units[u].param_count, h->world);
            for (size_t i = 0; i < n; i++) missing += !h->seen[u][s][i];
        }
    return missing;
}

static inline void h_free(harness_t *h) {
    for (int u = 0; u < H_MAX_UNITS; u++)
        for (int s = 0; s < ZERO_CKPT_STATE_COUNT; s++) free(h->seen[u][s]);
}

static inline zero_ckpt_shard_io_t h_io(harness_t *h) {
    zero_ckpt_shard_io_t io = {h_get, h_put, h};
    return io;
}

#endif /* ZERO_TEST_CKPT_HARNESS_H */
