/* core_internal.h — helpers shared inside the library: error setting and logging.
 *
 * zero__error() formats the thread-local message behind zero_last_error() and returns the
 * status, so a failing path reads `return zero__error(ZERO_ERR_X, "what %s", name);`.
 */
#ifndef ZERO_CORE_INTERNAL_H
#define ZERO_CORE_INTERNAL_H

#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>

#define ZERO_PRINTF(a, b) __attribute__((format(printf, a, b)))

zero_status_t zero__error(zero_status_t status, const char *fmt, ...) ZERO_PRINTF(2, 3);
/* Set the thread-local message verbatim (used to carry a message across threads). */
void zero__set_error_message(const char *message);

void zero__log(zero_log_level_t level, int rank, int world, const char *fmt, ...) ZERO_PRINTF(4, 5);

/* A fast non-cryptographic hash of `bytes` bytes at data, continuing from h (src/core/hash.c):
 * equal inputs give equal hashes on every rank and machine of the same endianness. */
uint64_t zero__hash_bytes(uint64_t h, const void *data, size_t bytes);

/* Random uint64 (xorshift64*), advancing *state (never 0) (src/core/rng.c): the data sampler's
 * and the token sampler's stream. */
uint64_t zero__rng_next(uint64_t *state);
/* Uniform float in [0, 1). */
float zero__rng_float(uint64_t *state);

/* The layout rule the engine and the checkpoints share (ARCHITECTURE.md section 3): every tensor
 * of a unit starts at a multiple of ZERO__ALIGN_ELEMS elements, and a unit sharded over n ranks
 * is padded to a multiple of n x ZERO__ALIGN_ELEMS, so every shard starts 64-byte aligned. */
#define ZERO__ALIGN_ELEMS 16
static inline size_t zero__align_up(size_t count, size_t quantum) {
    return (count + quantum - 1) / quantum * quantum;
}
/* A tensor of `count` elements occupies this many of its unit (the next one starts after). */
static inline size_t zero__tensor_span(size_t count) {
    return zero__align_up(count, ZERO__ALIGN_ELEMS);
}
/* A unit whose tensors end at `extent`, sharded over n ranks: its padded element count. */
static inline size_t zero__padded_count(size_t extent, int n) {
    return zero__align_up(extent, (size_t)(n < 1 ? 1 : n) * ZERO__ALIGN_ELEMS);
}

/* Account `bytes` of memory the library obtained outside zero_mem_alloc (a shared mapping) to
 * `category` of mem (NULL: nothing), or give them back. */
void zero__mem_track(zero_mem_t *mem, zero_mem_category_t category, size_t bytes);
void zero__mem_untrack(zero_mem_t *mem, zero_mem_category_t category, size_t bytes);

/* Always-on invariant check: our own bugs only, never user input. */
#define ZERO_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "zero: internal error at %s:%d: assertion '%s' failed\n", __FILE__,    \
                    __LINE__, #cond);                                                              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#ifdef NDEBUG
#define ZERO_DEBUG_ASSERT(cond) ((void)0)
#else
#define ZERO_DEBUG_ASSERT(cond) ZERO_ASSERT(cond)
#endif

#define ZERO_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define ZERO_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ZERO_MAX(a, b) ((a) > (b) ? (a) : (b))

/* out(n) fp32 <- in(n) of dt (FP32, BF16 or FP16): exact. Another dtype trips ZERO_ASSERT. */
void zero__widen(float *out, const void *in, size_t n, zero_dtype_t dt);
/* out(n) of dt <- in(n) fp32, rounded to nearest even (FP32: a copy; in and out may overlap). */
void zero__narrow(void *out, const float *in, size_t n, zero_dtype_t dt);

#endif /* ZERO_CORE_INTERNAL_H */
