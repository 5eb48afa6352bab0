/* pool.c — pools of engine buffers kept for reuse, keyed by exact byte size: the stage-3
 * gather buffers (ZERO_MEM_COMM) and the stage-2/3 gradient working buffers (ZERO_MEM_GRADS).
 *
 * Not here: which unit holds which buffer (fetch.c, buckets.c). Invariants: a pool never
 * shrinks before zero__pool_free, so after the first step it holds, for each size p, the most
 * buffers of size p lent at the same time so far (K_p): sum_p p K_p bytes, the figure the
 * memory theory adds. Reusing buffers avoids a fresh mapping (and its page faults) per use, and
 * the allocator returning memory the next use takes again.
 */
#include "engine_internal.h"

#include <stdlib.h>

void *zero__pool_take_idle(zero__pool_t *pool, size_t bytes) {
    for (int i = 0; i < pool->count; i++) {
        zero__pool_buf_t *b = &pool->bufs[i];
        if (!b->in_use && b->bytes == bytes) {
            b->in_use = 1;
            return b->ptr;
        }
    }
    return NULL;
}

void *zero__pool_take(zero_engine_t *eng, zero__pool_t *pool, zero_mem_category_t cat,
                      size_t bytes) {
    void *idle = zero__pool_take_idle(pool, bytes);
    if (idle) return idle;
    if (pool->count == pool->cap) {
        int cap = pool->cap ? 2 * pool->cap : 8;
        zero__pool_buf_t *nb = realloc(pool->bufs, (size_t)cap * sizeof *nb);
        if (!nb) return NULL;
        pool->bufs = nb;
        pool->cap = cap;
    }
    void *ptr = zero_mem_alloc(eng->mem, cat, bytes, 64);
    if (!ptr) return NULL;
    pool->bufs[pool->count++] = (zero__pool_buf_t){ptr, bytes, 1};
    return ptr;
}

void zero__pool_give(zero__pool_t *pool, const void *ptr) {
    for (int i = 0; i < pool->count; i++)
        if (pool->bufs[i].ptr == ptr) {
            ZERO_ASSERT(pool->bufs[i].in_use);
            pool->bufs[i].in_use = 0;
            return;
        }
    ZERO_ASSERT(!"buffer not from this pool");
}

void zero__pool_free(zero__pool_t *pool) {
    for (int i = 0; i < pool->count; i++) zero_mem_free(pool->bufs[i].ptr);
    free(pool->bufs);
    pool->bufs = NULL;
    pool->count = pool->cap = 0;
}

size_t zero__pool_bytes(const zero__pool_t *pool, int idle_only) {
    size_t n = 0;
    for (int i = 0; i < pool->count; i++)
        if (!idle_only || !pool->bufs[i].in_use) n += pool->bufs[i].bytes;
    return n;
}
