/* toy_units.h — what the swap tests' toy models share: units of a weight and a 7-element bias
 * declared by size, their forward and backward (toy_grads.h's gradients), the swap files left
 * in a directory, and a bit flipped on disk. */
#ifndef ZERO_TESTS_ZERO_TOY_UNITS_H
#define ZERO_TESTS_ZERO_TOY_UNITS_H

#include "core/core_internal.h"
#include "toy_grads.h"
#include "zero/engine.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* A unit of `size` elements: weight "w" (size - 7, normal init, decayed) and bias "b" (7). */
static inline void toy_unit_tensors(size_t size, zero_tensor_desc_t t[2]) {
    t[0] = (zero_tensor_desc_t){"w", 1, {size - 7}, 0, ZERO_INIT_NORMAL, 0.1f};
    t[1] = (zero_tensor_desc_t){"b", 1, {7}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0.0f};
}

/* Units "u0", "u1", ... of these sizes, in order. */
static inline zero_status_t toy_add_units(zero_engine_t *eng, const size_t *sizes, int n) {
    zero_status_t st = ZERO_OK;
    for (int u = 0; !st && u < n; u++) {
        zero_tensor_desc_t t[2];
        toy_unit_tensors(sizes[u], t);
        char name[16];
        snprintf(name, sizeof name, "u%d", u);
        st = zero_engine_add_unit(eng, name, t, 2, NULL);
    }
    return st;
}

/* The toy model's forward: units 0 .. n-1 fetched and released in order. */
static inline zero_status_t toy_forward(zero_engine_t *eng, int n) {
    for (int u = 0; u < n; u++) {
        if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
        zero_unit_release(eng, u);
    }
    return ZERO_OK;
}

/* Its backward of micro-step m of step s on rank `rank`: units n-1 .. 0 each fetched, given
 * toy_grad's values for its sizes[u] elements (in the compute dtype), handed back, released. */
static inline zero_status_t toy_backward(zero_engine_t *eng, const size_t *sizes, int n, int rank,
                                         int s, int m) {
    const zero_dtype_t dt = zero_engine_params(eng)->compute_dtype;
    for (int u = n - 1; u >= 0; u--) {
        if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
        void *g = zero_unit_grads(eng, u);
        if (!g) return ZERO_ERR_INTERNAL;
        for (size_t i = 0; i < sizes[u]; i++) {
            float x = toy_grad(rank, u, s, m, i);
            zero__narrow((char *)g + i * zero_dtype_size(dt), &x, 1, dt);
        }
        zero_status_t st = zero_unit_grads_done(eng, u);
        zero_unit_release(eng, u);
        if (st) return st;
    }
    return ZERO_OK;
}

/* Swap files (*.swp) in dir. */
static inline int swap_files_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".swp") != NULL;
    if (d) closedir(d);
    return n;
}

/* One bit of the byte at `at` of the file flipped on disk (a torn or rotted page); 1 if done. */
static inline int flip_bit(const char *path, off_t at) {
    int fd = open(path, O_RDWR);
    unsigned char byte = 0;
    int ok = fd >= 0 && pread(fd, &byte, 1, at) == 1;
    byte ^= 0x10;
    ok = ok && pwrite(fd, &byte, 1, at) == 1 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* Every optimizer state of the first `units` units and the parameters this rank holds of them
 * (all of unit `whole`, which stays gathered: persistent), read back, hashed. */
static inline zero_status_t toy_hash_states(zero_engine_t *eng, int units, int whole,
                                            uint64_t *out) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int u = 0; u < units; u++)
        for (int s = 0; s <= ZERO_ENGINE_STATE_COUNT; s++) {
            size_t off = 0, n = 0;
            zero_status_t st =
                s < ZERO_ENGINE_STATE_COUNT
                    ? zero_engine_state_range(eng, u, (zero_engine_state_t)s, &off, &n)
                : u == whole ? (n = zero_engine_unit_padded_count(eng, u), ZERO_OK)
                             : zero_engine_shard_range(eng, u, &off, &n);
            float *buf = malloc(n * sizeof *buf);
            if (!st && !buf) st = ZERO_ERR_OUT_OF_MEMORY;
            if (!st)
                st = s < ZERO_ENGINE_STATE_COUNT
                         ? zero_engine_state_read(eng, u, (zero_engine_state_t)s, off, n, buf)
                         : zero_engine_params_read(eng, u, off, n, buf);
            if (!st) h = zero__hash_bytes(h, buf, n * sizeof *buf);
            free(buf);
            if (st) return st;
        }
    *out = h;
    return ZERO_OK;
}

#endif /* ZERO_TESTS_ZERO_TOY_UNITS_H */
