/* lp_io.c — per-thread scratch, dtype-dispatched conversions and the streaming driver of the
 * 16-bit I/O kernels (lp_io.h).
 *
 * Scratch lives in thread-specific storage: OpenMP worker threads are long-lived, so a kernel
 * called every step reuses its buffers instead of allocating. Buffers only grow (rounded to
 * pages) and are freed by the key's destructor when the thread exits.
 * The streaming tile (TILE elements, three fp32 tiles = 24 KiB on the stack) fits in L1, so a
 * tile is converted, computed and rounded while it is hot: one DRAM pass per 16-bit array.
 */
#include "lp_io.h"

#include "core/core_internal.h"
#include "kmath.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct {
    void *p[ZERO__KS_COUNT];
    size_t bytes[ZERO__KS_COUNT];
} kscratch_t;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void kscratch_destroy(void *v) {
    kscratch_t *s = v;
    for (int i = 0; i < ZERO__KS_COUNT; i++) free(s->p[i]);
    free(s);
}

static void key_init(void) { ZERO_ASSERT(pthread_key_create(&key, kscratch_destroy) == 0); }

void *zero__kscratch(int slot, size_t bytes) {
    ZERO_ASSERT(slot >= 0 && slot < ZERO__KS_COUNT);
    pthread_once(&key_once, key_init);
    kscratch_t *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof *s);
        ZERO_ASSERT(s != NULL);
        ZERO_ASSERT(pthread_setspecific(key, s) == 0);
    }
    if (s->bytes[slot] < bytes || !s->p[slot]) {
        free(s->p[slot]);
        size_t b = (bytes + 4095) & ~(size_t)4095;
        if (b == 0) b = 4096;
        s->p[slot] = aligned_alloc(64, b);
        ZERO_ASSERT(s->p[slot] != NULL);
        s->bytes[slot] = b;
    }
    return s->p[slot];
}

#define TILE 2048

void zero__stream_lp(void *out, int accumulate, const void *a, const void *b, zero_dtype_t dt,
                     size_t n, zero__span_fn fn, int threads) {
    ZERO_ASSERT(out && a && fn && (dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_FP16));
    uint16_t *o = out;
    const uint16_t *pa = a, *pb = b;
    int nt = kthreads(n, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t i0, i1;
        kslice(n, 32, &i0, &i1); /* 32 16-bit values: one cache line */
        _Alignas(64) float to[TILE], ta[TILE], tb[TILE];
        for (size_t i = i0; i < i1; i += TILE) {
            size_t w = ZERO_MIN((size_t)TILE, i1 - i);
            zero__widen(ta, pa + i, w, dt);
            if (pb) zero__widen(tb, pb + i, w, dt);
            if (accumulate) zero__widen(to, o + i, w, dt);
            fn(to, ta, pb ? tb : NULL, w);
            zero__narrow(o + i, to, w, dt);
        }
    }
}
