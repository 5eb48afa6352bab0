/* buckets.c — gradient buffers and the bucketed, asynchronous reduce-scatter of backward.
 *
 * zero_unit_grads hands the model a zeroed full-size buffer for unit u; zero_unit_grads_done
 * packs its rank blocks into the current bucket (rank-major: block r holds shard r of each unit
 * in the bucket) and recycles the buffer. A full bucket's reduce-scatter is posted non-blocking,
 * so it runs on the communicator's progress thread while backward goes on; its result is added
 * to the units' fp32 shard accumulators when the bucket slot is needed again or at the step.
 *
 * Not here: the optimizer step. Invariants: slots are used round-robin and each is waited for
 * before reuse, so completions — and the accumulation order of a unit's micro-step gradients —
 * follow posting order. Every stage goes through this path (the canonical order of engine.h).
 * With one rank there is no communication: the buffer is added to the accumulator directly,
 * which gives the same bits as a one-rank reduce-scatter.
 */
#include "engine_internal.h"

#include <string.h>

float *zero_unit_grads(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return NULL;
    if (!un->work) {
        un->work = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, un->padded_count * sizeof(float), 64);
        if (!un->work) return NULL;
    }
    un->dirty = 1;
    return un->work;
}

static void add_into(float *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

static zero_status_t wait_bucket(zero_engine_t *eng, zero__bucket_t *b) {
    if (!b->req) return ZERO_OK;
    zero_status_t st = zero_comm_wait(b->req);
    b->req = NULL;
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        const zero__unit_t *first = &eng->units[b->entries[0].unit];
        const zero__unit_t *last = &eng->units[b->entries[b->entry_count - 1].unit];
        b->entry_count = 0;
        b->block = 0;
        return zero__engine_fail(
            eng, st,
            "step %lld: reduce-scatter of the gradient bucket of units '%s' .. "
            "'%s' failed (do all ranks call zero_unit_grads_done for the same "
            "units in the same order?): %s",
            (long long)eng->step, first->name, last->name, msg);
    }
    for (int k = 0; k < b->entry_count; k++) {
        zero__unit_t *un = &eng->units[b->entries[k].unit];
        add_into(un->acc, b->recv + b->entries[k].offset, un->shard_count);
    }
    b->entry_count = 0;
    b->block = 0;
    return ZERO_OK;
}

static zero_status_t alloc_buckets(zero_engine_t *eng) {
    size_t q = (size_t)eng->world * ZERO__TENSOR_ALIGN_COUNT;
    size_t cap = (size_t)eng->params.reduce_bucket_bytes / sizeof(float) / q * q;
    size_t total = 0;
    for (int i = 0; i < eng->unit_count; i++) {
        if (eng->units[i].padded_count > cap) cap = eng->units[i].padded_count;
        total += eng->units[i].padded_count;
    }
    /* No bucket bigger than the model needs (DeepSpeed's default is 2 GB of fp32). */
    if (cap > total) cap = total;
    eng->bucket_cap = cap;
    for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
        zero__bucket_t *b = &eng->buckets[s];
        b->send = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, cap * sizeof(float), 64);
        b->recv =
            zero_mem_alloc(eng->mem, ZERO_MEM_COMM, cap / (size_t)eng->world * sizeof(float), 64);
        if (!b->send || !b->recv)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: cannot allocate reduce buckets of %zu bytes", cap * 4);
    }
    return ZERO_OK;
}

/* Post the current bucket's reduce-scatter and move to the next slot (waiting for it). */
static zero_status_t flush(zero_engine_t *eng) {
    zero__bucket_t *b = &eng->buckets[eng->bucket_cur];
    if (b->entry_count == 0) return ZERO_OK;
    const size_t stride = eng->bucket_cap / (size_t)eng->world, B = b->block;
    /* Blocks were packed at a fixed stride; the collective wants them contiguous. Moving block r
     * from r*stride down to r*B in increasing r never overwrites a block not yet moved. */
    if (B < stride)
        for (int r = 1; r < eng->world; r++)
            memmove(b->send + (size_t)r * B, b->send + (size_t)r * stride, B * sizeof(float));
    zero_status_t st = zero_comm_reduce_scatter_post(b->send, b->recv, B, ZERO_DTYPE_FP32,
                                                     ZERO_OP_SUM, eng->comm, &b->req);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        b->entry_count = 0;
        b->block = 0;
        return zero__engine_fail(eng, st, "step %lld: cannot post the gradient reduce-scatter: %s",
                                 (long long)eng->step, msg);
    }
    b->seq = eng->bucket_seq++;
    eng->bucket_cur = (eng->bucket_cur + 1) % ZERO__BUCKET_SLOTS;
    return wait_bucket(eng, &eng->buckets[eng->bucket_cur]);
}

zero_status_t zero__grads_done(zero_engine_t *eng, int u) {
    zero__unit_t *un = &eng->units[u];
    zero__schedule_event(eng, -(int32_t)u - 1);
    if (!un->work) { /* the model never asked: its gradient is zero, but ranks must agree */
        un->work = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, un->padded_count * sizeof(float), 64);
        if (!un->work)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: no memory for the gradient of unit '%s'", un->name);
    }
    const size_t S = un->shard_count;
    if (eng->world == 1) {
        add_into(un->acc, un->work, S);
    } else {
        if (!eng->bucket_cap) {
            zero_status_t st = alloc_buckets(eng);
            if (st) return st;
        }
        const size_t stride = eng->bucket_cap / (size_t)eng->world;
        zero__bucket_t *b = &eng->buckets[eng->bucket_cur];
        if (b->block + S > stride) {
            zero_status_t st = flush(eng);
            if (st) return st;
            b = &eng->buckets[eng->bucket_cur];
        }
        if (b->entry_count == b->entry_cap) {
            int cap = b->entry_cap ? 2 * b->entry_cap : 16;
            zero__bucket_entry_t *e = realloc(b->entries, (size_t)cap * sizeof *e);
            if (!e) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (bucket)");
            b->entries = e;
            b->entry_cap = cap;
        }
        for (int r = 0; r < eng->world; r++)
            memcpy(b->send + (size_t)r * stride + b->block, un->work + (size_t)r * S,
                   S * sizeof(float));
        b->entries[b->entry_count].unit = u;
        b->entries[b->entry_count].offset = b->block;
        b->entry_count++;
        b->block += S;
    }
    eng->rs_elems += S;
    if (eng->params.stage <= 1) {
        memset(un->work, 0, un->padded_count * sizeof(float));
    } else {
        zero_mem_free(un->work);
        un->work = NULL;
    }
    un->dirty = 0;
    return ZERO_OK;
}

zero_status_t zero_unit_grads_done(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    return zero__grads_done(eng, u);
}

zero_status_t zero__buckets_drain(zero_engine_t *eng) {
    if (eng->world == 1 || !eng->bucket_cap) return ZERO_OK;
    zero_status_t st = flush(eng);
    for (;;) { /* wait in posting order */
        zero__bucket_t *next = NULL;
        for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
            zero__bucket_t *b = &eng->buckets[s];
            if (b->req && (!next || b->seq < next->seq)) next = b;
        }
        if (!next) break;
        zero_status_t st2 = wait_bucket(eng, next);
        if (!st) st = st2;
    }
    return st;
}

void zero__buckets_free(zero_engine_t *eng) {
    for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
        zero__bucket_t *b = &eng->buckets[s];
        if (b->req) (void)zero_comm_wait(b->req);
        zero_mem_free(b->send);
        zero_mem_free(b->recv);
        free(b->entries);
        memset(b, 0, sizeof *b);
    }
}
