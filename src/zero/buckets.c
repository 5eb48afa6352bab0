/* buckets.c — gradient buffers and the bucketed, asynchronous reduce-scatter of backward.
 *
 * zero_unit_grads hands the model a zeroed full-size buffer for unit u (stages 2-3: lent by the
 * gradient pool, so backward maps no fresh memory). zero_unit_grads_done then either
 *  - packs its rank blocks into the current bucket (rank-major: block r holds shard r of each
 *    unit in the bucket) and recycles the buffer at once: units of at most half a bucket, where
 *    batching saves per-collective latency; or
 *  - for a "direct" unit (2 P_u > the bucket), posts the reduce-scatter straight from the
 *    working buffer, which is a unit's shards in rank order already: no packing copy and no send
 *    buffer; the buffer is lent to the bucket slot until the collective lands. When the unit's
 *    accumulator is still zero (the first micro-step) the result lands in it directly (0 + x
 *    is x bitwise except for -0, and a -0 gradient leaves AdamW's state and update unchanged).
 * A bucket's reduce-scatter is posted non-blocking, so it runs on the communicator's progress
 * thread while backward goes on; its result is added to the units' shard accumulators
 * when the bucket slot is needed again or at the step. Without overlap_comm a direct unit's
 * reduce-scatter is waited for at once (one working buffer in the pool instead of two).
 * Buffers and collectives are in the compute dtype (16-bit sums run in fp32 in rank order in the
 * comm layer, rounded once); the accumulators are in grad_accum_dtype (zero__acc_add). A direct
 * unit lands straight in its accumulator only when the two dtypes are the same.
 *
 * Not here: the optimizer step. Invariants: slots are used round-robin and each is waited for
 * before reuse, so completions — and the accumulation order of a unit's micro-step gradients —
 * follow posting order. Every stage goes through this path (the canonical order of engine.h).
 * With one rank there is no communication: the buffer is added to the accumulator directly,
 * which gives the same bits as a one-rank reduce-scatter, in one pass that also zeroes the
 * buffer (stages 0-1); into a still-zero accumulator of the same dtype the two buffers are
 * swapped instead (stages 0-1: both are the engine's own, S == P), the into_acc argument above.
 * With a 16-bit gradient and an fp32 accumulator, a still-zero accumulator is not written at
 * all: the gradient stays "pending" in the working buffer, the step reads it from there, and
 * only a second micro-step of the same unit widens it into the accumulator first.
 */
#include "engine_internal.h"

#include "comm/reduce.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#include <string.h>

/* Give unit un a zeroed working buffer: without shard_grads (stages 0-1) each unit owns one for
 * good; with it (stages 2-3) one is borrowed from the gradient pool until grads_done. */
static zero_status_t take_work(zero_engine_t *eng, zero__unit_t *un) {
    if (un->pending) { /* the model adds into a zeroed buffer */
        zero_status_t st = zero__flush_pending(eng, un);
        if (st) return st;
    }
    if (un->inflight) { /* stages 0-1: its last gradient is still being sent (accumulation) */
        zero_status_t st = zero__buckets_drain(eng);
        if (st) return st;
    }
    if (un->work) return ZERO_OK;
    const size_t bytes = zero__work_count(un) * eng->ce;
    if (!eng->pol.shard_grads) {
        un->work = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, bytes, 64);
    } else {
        un->work = zero__pool_take(eng, &eng->grad_pool, ZERO_MEM_GRADS, bytes);
        if (un->work) memset(un->work, 0, bytes);
    }
    if (!un->work)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "engine: no memory for the gradient of unit '%s' (%zu bytes)", un->name,
                           bytes);
    return ZERO_OK;
}

void *zero_unit_grads(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un || take_work(eng, un)) return NULL;
    un->dirty = 1;
    return un->work;
}

/* The slot's collective has landed (or failed): fold results into the accumulators, give lent
 * working buffers back (stages 2-3: to the pool; 0-1: zeroed for the next micro-step). */
static zero_status_t wait_bucket(zero_engine_t *eng, zero__bucket_t *b) {
    if (!b->req && !b->qgz) return ZERO_OK;
    zero_status_t st;
    if (b->qgz) { /* ZeRO++ qgZ: finish the int4 exchanges and sums */
        int done = 0;
        st = zero__qgz_progress(&b->qop, 1, &done);
        zero__qgz_op_clear(&b->qop);
        b->qgz = 0;
    } else {
        st = zero__xfer_wait(b->req);
        b->req = NULL;
    }
    char msg[512] = "";
    if (st) snprintf(msg, sizeof msg, "%s", zero_last_error());
    const int first = b->entries[0].unit, last = b->entries[b->entry_count - 1].unit;
    for (int k = 0; k < b->entry_count; k++) {
        const zero__bucket_entry_t *e = &b->entries[k];
        zero__unit_t *un = &eng->units[e->unit];
        if (e->into_acc) { /* landed in the accumulator (gswap: its mapped buffer) */
            zero_status_t s2 = zero__acc_unmap(eng, un, !st);
            if (!st) st = s2;
            if (!st) zero__overlap_landed(eng, un);
        } else if (!st) {
            void *acc = NULL;
            st = zero__acc_map(eng, un, ZERO__ACC_ZERO | ZERO__ACC_BACKWARD, &acc);
            if (!st) {
                zero__acc_add(eng, acc, eng->params.grad_accum_dtype,
                              e->lent ? b->drecv : zero__elem(b->recv, e->offset, eng->ce),
                              eng->params.compute_dtype, un->shard_count, 0, 0);
                st = zero__acc_unmap(eng, un, 1);
            }
            if (!st) zero__overlap_landed(eng, un);
        }
        if (!e->lent) continue;
        if (eng->pol.shard_grads) {
            zero__pool_give(&eng->grad_pool, e->lent);
        } else {
            /* zero__zero clears whole floats: a 16-bit buffer of P (a multiple of 16) elements
             * is P / 2 of them, and all-zero bits are +0 in every dtype. */
            zero__zero(e->lent, un->padded_count * eng->ce / sizeof(float), eng->params.threads);
            un->inflight = 0;
        }
    }
    b->entry_count = 0;
    b->block = 0;
    if (st && eng->failure) return st; /* an accumulator on NVMe: named already */
    if (st)
        return zero__engine_fail(
            eng, st,
            "step %lld: reduce-scatter of the gradient bucket of units '%s' .. "
            "'%s' failed (do all ranks call zero_unit_grads_done for the same "
            "units in the same order?): %s",
            (long long)eng->step, eng->units[first].name, eng->units[last].name, msg);
    return ZERO_OK;
}

/* Bucket sizes, fixed at the first reduction: the packed send buffer is the configured size
 * (rounded down to 16 x world elements, capped at the model) and units of more than half of it
 * go direct; recv holds one packed bucket's shard (of the smallest group: the largest shard). A
 * bucket packs units of one partition group; a group of n ranks packs n blocks of cap / n. */
static zero_status_t alloc_buckets(zero_engine_t *eng) {
    const size_t q = (size_t)eng->world * ZERO__ALIGN_ELEMS;
    size_t cap = eng->params.reduce_bucket_bytes / sizeof(float) / q * q;
    size_t total = 0, max_direct = 0;
    int min_group = eng->world;
    for (int i = 0; i < eng->unit_count; i++) total += eng->units[i].padded_count;
    /* No bucket bigger than the model needs (DeepSpeed's default is 2 GB of fp32). */
    if (cap > total) cap = total;
    for (int i = 0; i < eng->unit_count; i++) {
        zero__unit_t *un = &eng->units[i];
        if (un->slots > 1) continue; /* reduce_slots: neither packed nor direct */
        un->direct = 2 * un->padded_count > cap;
        if (un->direct && un->shard_count > max_direct) max_direct = un->shard_count;
        if (!un->direct && un->grp->size < min_group) min_group = un->grp->size;
    }
    /* LoCo: an error buffer for every unit of the world's int4 reductions */
    for (int i = 0; eng->params.loco && i < eng->unit_count; i++) {
        zero__unit_t *un = &eng->units[i];
        if (!zero__xfer_qgz_group(eng, un->grp) || un->loco) continue;
        un->loco = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, un->padded_count * sizeof(float), 64);
        if (!un->loco)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: no memory for the LoCo error buffer of unit '%s' (%zu "
                               "bytes)",
                               un->name, un->padded_count * sizeof(float));
    }
    eng->bucket_cap = cap;
    eng->recv_cap = cap / (size_t)min_group;
    eng->direct_recv_count = max_direct;
    eng->buckets_ready = 1;
    for (int s = 0; s < ZERO__BUCKET_SLOTS && cap > 0; s++) {
        zero__bucket_t *b = &eng->buckets[s];
        b->send = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, cap * eng->ce, 64);
        b->recv = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, eng->recv_cap * eng->ce, 64);
        if (!b->send || !b->recv)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: cannot allocate reduce buckets of %zu bytes",
                               cap * eng->ce);
    }
    return ZERO_OK;
}

/* Direct units whose accumulator already holds a sum need a landing buffer; every slot gets one
 * at the first such reduction (gradient accumulation), kept until zero_engine_free. */
static zero_status_t alloc_direct_recv(zero_engine_t *eng) {
    for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
        zero__bucket_t *b = &eng->buckets[s];
        if (b->drecv) continue;
        b->drecv = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, eng->direct_recv_count * eng->ce, 64);
        if (!b->drecv)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: cannot allocate a reduce buffer of %zu bytes",
                               eng->direct_recv_count * eng->ce);
    }
    return ZERO_OK;
}

static zero_status_t add_entry(zero__bucket_t *b, zero__bucket_entry_t e) {
    if (b->entry_count == b->entry_cap) {
        int cap = b->entry_cap ? 2 * b->entry_cap : 16;
        zero__bucket_entry_t *ne = realloc(b->entries, (size_t)cap * sizeof *ne);
        if (!ne) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (bucket)");
        b->entries = ne;
        b->entry_cap = cap;
    }
    b->entries[b->entry_count++] = e;
    return ZERO_OK;
}

static zero_status_t post_fail(zero_engine_t *eng, zero__bucket_t *b, zero_status_t st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zero_last_error());
    b->entry_count = 0;
    b->block = 0;
    return zero__engine_fail(eng, st, "step %lld: cannot post the gradient reduce-scatter: %s",
                             (long long)eng->step, msg);
}

/* The current slot's collective is posted: move to the next slot, waiting for it (so the
 * current slot never has a request in flight). */
static zero_status_t advance(zero_engine_t *eng) {
    eng->buckets[eng->bucket_cur].seq = eng->bucket_seq++;
    eng->bucket_cur = (eng->bucket_cur + 1) % ZERO__BUCKET_SLOTS;
    return wait_bucket(eng, &eng->buckets[eng->bucket_cur]);
}

/* ZeRO++ qgZ: the bucket's reduction as int4 (its group is the world's), one segment per unit
 * in packing order. */
static zero_status_t post_qgz(zero_engine_t *eng, zero__bucket_t *b, const void *send, void *recv) {
    if (b->entry_count > b->seg_cap) {
        size_t *ns = realloc(b->segs, (size_t)b->entry_count * sizeof *ns);
        if (!ns) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (bucket)");
        b->segs = ns;
        b->seg_cap = b->entry_count;
    }
    for (int k = 0; k < b->entry_count; k++)
        b->segs[k] = eng->units[b->entries[k].unit].shard_count;
    return zero__xfer_qgz_post(eng, b, send, recv, b->segs, b->entry_count);
}

/* Let the qgZ calls in flight go on without blocking, oldest first (a later call may start its
 * cross-node exchange only after every earlier one has): a call whose node exchange has landed
 * sums and re-quantizes its partials and posts its cross-node exchange now, while backward
 * goes on, instead of when its slot is waited for. */
static void poll_qgz(zero_engine_t *eng) {
    for (;;) {
        zero__bucket_t *next = NULL;
        for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
            zero__bucket_t *b = &eng->buckets[s];
            if (b->qgz && b->qop.state == 1 && (!next || b->seq < next->seq)) next = b;
        }
        if (!next) return;
        int done = 0;
        if (zero__qgz_progress(&next->qop, 0, &done)) return; /* the slot's wait reports it */
        if (next->qop.state == 1) return;
    }
}

/* Post the current bucket's reduce-scatter and move to the next slot (waiting for it). */
static zero_status_t flush(zero_engine_t *eng) {
    zero__bucket_t *b = &eng->buckets[eng->bucket_cur];
    if (b->entry_count == 0) return ZERO_OK;
    const size_t stride = eng->bucket_cap / (size_t)b->grp->size, B = b->block;
    /* Blocks were packed at a fixed stride; the collective wants them contiguous. Moving block r
     * from r*stride down to r*B in increasing r never overwrites a block not yet moved. */
    const size_t ce = eng->ce;
    if (B < stride)
        for (int r = 1; r < b->grp->size; r++)
            memmove(zero__elem(b->send, (size_t)r * B, ce),
                    zero__elem(b->send, (size_t)r * stride, ce), B * ce);
    zero_status_t st =
        zero__xfer_qgz_group(eng, b->grp)
            ? post_qgz(eng, b, b->send, b->recv)
            : zero__xfer_reduce_scatter(eng, b->grp, ZERO_XFER_GRADS, b->send, b->recv, B,
                                        eng->params.compute_dtype, &b->req);
    if (st) return post_fail(eng, b, st);
    return advance(eng);
}

/* Reduce-scatter unit u straight from its working buffer, after the packed units before it. */
static zero_status_t post_direct(zero_engine_t *eng, zero__unit_t *un) {
    zero_status_t st = flush(eng);
    if (st) return st;
    zero__bucket_t *b = &eng->buckets[eng->bucket_cur];
    /* Straight into the accumulator only while it is zero and of the dtype that lands. */
    zero__bucket_entry_t e = {(int)(un - eng->units), 0, un->work,
                              !un->acc_used && eng->ae == eng->ce};
    void *recv = NULL;
    if (e.into_acc) { /* gswap: mapped until the reduce-scatter lands (wait_bucket) */
        if ((st = zero__acc_map(eng, un, ZERO__ACC_OVERWRITE | ZERO__ACC_BACKWARD, &recv)))
            return st;
    } else {
        if ((st = alloc_direct_recv(eng))) return st;
        recv = b->drecv;
    }
    if ((st = add_entry(b, e))) return st;
    b->grp = un->grp;
    st = zero__xfer_qgz_group(eng, un->grp)
             ? post_qgz(eng, b, un->work, recv)
             : zero__xfer_reduce_scatter(eng, un->grp, ZERO_XFER_GRADS, un->work, recv,
                                         un->shard_count, eng->params.compute_dtype, &b->req);
    if (st) return post_fail(eng, b, st);
    return advance(eng);
}

/* LoCo error feedback on unit un's working buffer before it is sent by qgZ: per destination
 * block (the unit's shard S of every rank), per 256-element block of the int4 grid qgZ uses
 * there, g' = g + e is what is sent (rounded into the compute dtype first: what qgZ reads) and
 * e = err_beta e + (1 - err_beta) (g' - Q(g')), Q the int4 round trip of that block. */
static void loco_apply(zero_engine_t *eng, zero__unit_t *un) {
    if (eng->loco_reset) { /* every reset_T steps, after a skipped step, after a state write */
        for (int i = 0; i < eng->unit_count; i++)
            if (eng->units[i].loco)
                memset(eng->units[i].loco, 0, eng->units[i].padded_count * sizeof(float));
        eng->loco_reset = 0;
    }
    const float beta = eng->params.loco_err_beta;
    const zero_dtype_t ct = eng->params.compute_dtype;
    const size_t S = un->shard_count, N = (size_t)un->grp->size, ce = eng->ce;
    float g[ZERO__Q4_BLOCK], d[ZERO__Q4_BLOCK];
    unsigned char wire[4 + ZERO__Q4_BLOCK / 2];
    for (size_t r = 0; r < N; r++) {
        for (size_t lo = 0; lo < S; lo += ZERO__Q4_BLOCK) {
            const size_t k = ZERO_MIN((size_t)ZERO__Q4_BLOCK, S - lo), base = r * S + lo;
            float *e = un->loco + base;
            void *w = zero__elem(un->work, base, ce);
            if (ct == ZERO_DTYPE_FP32)
                memcpy(g, w, k * sizeof(float));
            else
                zero__widen(g, w, k, ct);
            for (size_t i = 0; i < k; i++) g[i] += e[i];
            if (ct == ZERO_DTYPE_FP32) {
                memcpy(w, g, k * sizeof(float));
            } else {
                zero__narrow(w, g, k, ct);
                zero__widen(g, w, k, ct);
            }
            zero__q4_quantize(wire, g, ZERO_DTYPE_FP32, k, 1);
            zero__q4_dequantize(d, ZERO_DTYPE_FP32, wire, k, 1);
            for (size_t i = 0; i < k; i++) e[i] = beta * e[i] + (1.0f - beta) * (g[i] - d[i]);
        }
    }
}

/* Unit un's working buffer has been consumed (added into the accumulator or copied into a
 * bucket): with shard_grads it goes back to the gradient pool; otherwise it stays the unit's,
 * zeroed for the next micro-step unless the consuming pass already zeroed it. */
static void work_done(zero_engine_t *eng, zero__unit_t *un, int zeroed) {
    if (eng->pol.shard_grads) {
        zero__pool_give(&eng->grad_pool, un->work);
        un->work = NULL;
    } else if (!zeroed) {
        zero__zero(un->work, zero__work_count(un) * eng->ce / sizeof(float), eng->params.threads);
    }
}

/* Source slots (zero_engine_set_unit_slots): unit un's k partials, slot s at s P_u of its
 * working buffer (each in the rank-major shard layout of every working buffer), summed in the
 * order (group rank, slot) -- the world order of their sources -- by the comm layer's
 * rank-order kernel (comm/reduce.h), so a shard gets bitwise the sum a reduce-scatter over the
 * world of W per-rank inputs gives. Over a group of N > 1 ranks each slot goes to the group in
 * one all-to-all (block j, shard j, to group rank j) into a receive buffer of k P_u elements
 * lent by the gradient pool (slot s at s P_u, group rank g's block at g S_u in it); a group of
 * one rank sums its slots where they are. The sum lands in the first block's place and is added
 * to the accumulator. Synchronous: the accumulator of one unit sees its micro-steps in order
 * whatever the buckets do, and the all-to-alls carry no reduction to overlap. */
static zero_status_t reduce_slots(zero_engine_t *eng, zero__unit_t *un) {
    const int k = un->slots, N = un->grp->size;
    const size_t S = un->shard_count, P = un->padded_count, ce = eng->ce;
    const zero_dtype_t ct = eng->params.compute_dtype;
    void *recv = un->work;
    zero_status_t st = ZERO_OK;
    if (N > 1) {
        recv = zero__pool_take(eng, &eng->grad_pool, ZERO_MEM_GRADS, zero__work_count(un) * ce);
        if (!recv)
            return zero__engine_fail(eng, ZERO_ERR_OUT_OF_MEMORY,
                                     "step %lld: no memory to receive the source slots of unit "
                                     "'%s' (%zu bytes)",
                                     (long long)eng->step, un->name, zero__work_count(un) * ce);
        for (int s = 0; s < k && !st; s++)
            st = zero__xfer_all_to_all(eng, un->grp, ZERO_XFER_GRADS,
                                       zero__elem(un->work, (size_t)s * P, ce),
                                       zero__elem(recv, (size_t)s * P, ce), S, ct);
    }
    if (!st) {
        const void *in[N * k];
        for (int g = 0; g < N; g++)
            for (int s = 0; s < k; s++)
                in[g * k + s] = zero__elem(recv, (size_t)s * P + (size_t)g * S, ce);
        zero__reduce_blocks(recv, in, N * k, S, ct, ZERO_OP_SUM);
        void *acc = NULL;
        st = zero__acc_map(eng, un, ZERO__ACC_ZERO | ZERO__ACC_BACKWARD, &acc);
        if (!st) {
            zero__acc_add(eng, acc, eng->params.grad_accum_dtype, recv, ct, S, 0, 0);
            st = zero__acc_unmap(eng, un, 1);
        }
        if (!st) zero__overlap_landed(eng, un);
    } else {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        st = zero__engine_fail(eng, st,
                               "step %lld: all-to-all of the source slots of unit '%s' failed "
                               "(do all ranks call zero_unit_grads_done for the same units in the "
                               "same order?): %s",
                               (long long)eng->step, un->name, msg);
    }
    if (recv != un->work) zero__pool_give(&eng->grad_pool, recv);
    return st;
}

zero_status_t zero__grads_done(zero_engine_t *eng, int u) {
    zero__unit_t *un = &eng->units[u];
    zero__schedule_event(eng, -(int32_t)u - 1);
    if (eng->overlap && ++un->done_count > eng->params.grad_accum_steps && un->early) {
        /* a gradient after the last micro-step's: the unit is final no more */
        if (un->early == 2)
            return zero__engine_fail(
                eng, ZERO_ERR_INVALID_ARG,
                "step %lld: unit %d '%s' got the gradient of micro-step %d, but "
                "gradient_accumulation_steps is %d and its update already ran in backward "
                "(zero_optimization.offload_optimizer.overlap_step): call zero_engine_step after "
                "that many micro-steps, or set overlap_step false",
                (long long)eng->step + 1, u, un->name, un->done_count,
                eng->params.grad_accum_steps);
        un->early = 0;
        eng->early_ready--;
    }
    if (!un->work) { /* the model never asked: its gradient is zero, but ranks must agree */
        zero_status_t st = take_work(eng, un);
        if (st) return st;
    }
    if (zero__onebit_local(eng, un)) { /* 1-bit Adam: summed where it is (onebit.c) */
        un->dirty = 0;
        return ZERO_OK;
    }
    const size_t S = un->shard_count;
    const int N = un->grp->size;
    eng->xfer.rs_bytes += zero__xfer_grad_bytes(eng, un, 0);
    eng->xfer.rs_inter_bytes += zero__xfer_grad_bytes(eng, un, 1);
    if (eng->qgz_on) poll_qgz(eng);
    if (eng->world > 1 && !eng->buckets_ready) {
        zero_status_t st = alloc_buckets(eng);
        if (st) return st;
    }
    if (un->slots > 1) {
        zero_status_t st = reduce_slots(eng, un);
        if (st) return st;
        un->acc_used = 1;
        work_done(eng, un, 0);
        un->dirty = 0;
        return ZERO_OK;
    }
    if (un->loco && N > 1) loco_apply(eng, un);
    if (N > 1 && un->direct) {
        zero_status_t st = post_direct(eng, un);
        if (st) return st;
        un->acc_used = 1;
        un->dirty = 0;
        if (eng->pol.shard_grads)
            un->work = NULL; /* the bucket slot gives it back to the pool */
        else
            un->inflight = 1;
        /* No overlap: land it now, so the next unit's backward reuses this buffer instead of
         * the pool growing a second one (post_direct flushed the packed units before it). */
        return eng->params.overlap_comm ? ZERO_OK : zero__buckets_drain(eng);
    }
    if (N == 1) {
        if (un->pending) { /* handed back without being asked for */
            zero_status_t st = zero__flush_pending(eng, un);
            if (st) return st;
        }
        const int fresh = !un->acc_used, own = !eng->pol.shard_grads;
        un->acc_used = 1;
        un->dirty = 0;
        if (fresh && own && eng->ae == eng->ce) {
            /* The accumulator is zero and the working buffer is the same size (S == P with one
             * rank) and dtype: they trade places, which is the add (0 + x == x, and a -0 kept
             * as -0 changes nothing, see the file comment) and the zeroing, without a pass.
             * With zero__one_grad_buffer there is no accumulator yet: work becomes NULL, and a
             * further micro-step's take_work allocates a second buffer. */
            void *t = un->acc;
            un->acc = un->work;
            un->work = t;
            zero__overlap_landed(eng, un);
            return ZERO_OK;
        }
        if (fresh && own) {
            /* A 16-bit gradient into a zero fp32 accumulator: leave it where it is. The step
             * reads it from work (widening is exact, so it sees the accumulator's values), and
             * only a further micro-step moves it into acc (take_work), which with
             * zero__one_grad_buffer is allocated then. */
            un->pending = 1;
            zero__overlap_landed(eng, un);
            return ZERO_OK;
        }
        /* One pass: add (widening a 16-bit gradient; into a zero fp32 accumulator a plain
         * store, so an accumulator on NVMe is not zeroed first) and, without shard_grads, zero
         * the working buffer for the next micro-step. */
        const int store = fresh && eng->params.grad_accum_dtype == ZERO_DTYPE_FP32;
        void *acc = NULL;
        zero_status_t st = zero__acc_map(
            eng, un, (store ? ZERO__ACC_OVERWRITE : ZERO__ACC_ZERO) | ZERO__ACC_BACKWARD, &acc);
        if (st) return st;
        zero__acc_add(eng, acc, eng->params.grad_accum_dtype, un->work, eng->params.compute_dtype,
                      S, store, own);
        work_done(eng, un, own);
        if ((st = zero__acc_unmap(eng, un, 1))) return st;
        zero__overlap_landed(eng, un);
        return ZERO_OK;
    } else {
        const size_t stride = eng->bucket_cap / (size_t)N;
        zero__bucket_t *b = &eng->buckets[eng->bucket_cur];
        if (b->entry_count && (b->grp != un->grp || b->block + S > stride)) {
            zero_status_t st = flush(eng);
            if (st) return st;
            b = &eng->buckets[eng->bucket_cur];
        }
        b->grp = un->grp;
        zero_status_t st = add_entry(b, (zero__bucket_entry_t){u, b->block, NULL, 0});
        if (st) return st;
        const size_t ce = eng->ce;
        for (int r = 0; r < N; r++)
            memcpy(zero__elem(b->send, (size_t)r * stride + b->block, ce),
                   zero__elem(un->work, (size_t)r * S, ce), S * ce);
        b->block += S;
    }
    un->acc_used = 1;
    work_done(eng, un, 0);
    un->dirty = 0;
    return ZERO_OK;
}

int zero__one_grad_buffer(const zero_engine_t *eng, const zero__unit_t *un) {
    return !eng->pol.shard_grads && un->grp->size == 1 && !un->goff && un->slots == 1 &&
           eng->params.grad_accum_steps == 1;
}

void zero__grad_buffer_to_acc(const zero_engine_t *eng, zero__unit_t *un) {
    if (un->acc || un->goff || !un->work || un->pending) return;
    if (eng->ae != eng->ce) { /* the zero 16-bit buffer read as the gradient, as after backward */
        un->pending = 1;
        return;
    }
    un->acc = un->work;
    un->work = NULL;
}

void zero__grad_buffer_to_work(const zero_engine_t *eng, zero__unit_t *un) {
    if (un->work || !un->acc || eng->pol.shard_grads) return;
    un->work = un->acc;
    un->acc = NULL;
}

zero_status_t zero__flush_pending(zero_engine_t *eng, zero__unit_t *un) {
    if (!un->acc) { /* zero__one_grad_buffer: a micro-step more than declared needs it now */
        un->acc = zero_mem_calloc(eng->mem, ZERO_MEM_GRADS, un->shard_count * eng->ae, 64);
        if (!un->acc)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: no memory for the gradient accumulator of unit '%s' "
                               "(%zu bytes)",
                               un->name, un->shard_count * eng->ae);
    }
    /* acc is zero and fp32 (pending is set only then): a widening store, as the add would be */
    zero__acc_add(eng, un->acc, eng->params.grad_accum_dtype, un->work, eng->params.compute_dtype,
                  un->shard_count, 1, 1);
    un->pending = 0;
    return ZERO_OK;
}

zero_status_t zero_unit_grads_done(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return ZERO_ERR_INVALID_ARG;
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    zero_status_t st = zero__grads_done(eng, u);
    if (!st) zero__overlap_run(eng); /* a unit final now (or landed since) whose fetch is closed */
    return st;
}

zero_status_t zero__buckets_drain(zero_engine_t *eng) {
    if (eng->world == 1 || !eng->buckets_ready) return ZERO_OK;
    zero_status_t st = flush(eng);
    for (;;) { /* wait in posting order */
        zero__bucket_t *next = NULL;
        for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) {
            zero__bucket_t *b = &eng->buckets[s];
            if ((b->req || b->qgz) && (!next || b->seq < next->seq)) next = b;
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
        if (b->req) (void)zero__xfer_wait(b->req);
        zero__qgz_op_clear(&b->qop); /* waits for an exchange still in flight */
        free(b->segs);
        zero_mem_free(b->qscratch);
        zero_mem_free(b->send);
        zero_mem_free(b->recv);
        zero_mem_free(b->drecv);
        free(b->entries);
        memset(b, 0, sizeof *b);
    }
}
