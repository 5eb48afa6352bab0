/* tuning.c — the settings that may change between steps (zero_engine_retune): bucket size,
 * overlap_comm and stage-3 prefetch depth.
 *
 * Why they leave the numbers alone: every reduction sums the ranks' values in rank order
 * whatever piece carries them (a packed bucket or a unit sent directly), each unit's micro-step
 * gradients are accumulated in posting order, and a gathered parameter is the same bits whether
 * it was prefetched or fetched on demand. overlap_comm only decides when a reduction is waited
 * for. The trainer's online tuning (docs/tune.md) relies on it; tests/train checks it end to
 * end against an untuned run's fingerprint.
 */
#include "engine_internal.h"

void zero_engine_get_tuning(const zero_engine_t *eng, zero_engine_tuning_t *out) {
    out->reduce_bucket_bytes = eng->params.reduce_bucket_bytes;
    out->overlap_comm = eng->params.overlap_comm;
    out->prefetch_bucket_elems = eng->params.prefetch_bucket_elems;
}

/* A step is under way when some gradient was handed out, reduced or is still being sent since
 * the last zero_engine_step. */
static int inside_step(const zero_engine_t *eng) {
    for (int i = 0; i < eng->unit_count; i++) {
        const zero__unit_t *u = &eng->units[i];
        if (u->dirty || u->acc_used || u->pending || u->inflight) return 1;
    }
    for (int s = 0; s < ZERO__BUCKET_SLOTS; s++)
        if (eng->buckets[s].req || eng->buckets[s].qgz || eng->buckets[s].entry_count) return 1;
    return 0;
}

zero_status_t zero_engine_retune(zero_engine_t *eng, const zero_engine_tuning_t *t) {
    if (!eng || !t) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_retune: NULL argument");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    if (t->reduce_bucket_bytes == 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_retune: reduce_bucket_bytes 0 is invalid (expected >= 1)");
    if (t->overlap_comm != 0 && t->overlap_comm != 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_retune: overlap_comm %d is invalid (expected 0 or 1)",
                           t->overlap_comm);
    if (t->prefetch_bucket_elems < 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_retune: prefetch_bucket_elems %lld is invalid (expected "
                           ">= 0)",
                           (long long)t->prefetch_bucket_elems);
    const int new_buckets = t->reduce_bucket_bytes != eng->params.reduce_bucket_bytes;
    if (new_buckets && eng->params.quantized_gradients)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_retune: reduce_bucket_bytes %zu -> %zu with "
                           "zero_quantized_gradients: its int4 blocks follow the buckets' packing "
                           "(expected the same bucket size)",
                           eng->params.reduce_bucket_bytes, t->reduce_bucket_bytes);
    if (inside_step(eng))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_retune: called inside step %lld (a gradient is handed out "
                           "or reduced and zero_engine_step not called yet; expected between "
                           "steps)",
                           (long long)eng->step);
    if (new_buckets) {
        /* Sized again at the next reduction (alloc_buckets), which also decides anew which
         * units go direct. */
        zero__buckets_free(eng);
        eng->buckets_ready = 0;
        eng->bucket_cap = eng->recv_cap = eng->direct_recv_count = 0;
        eng->bucket_cur = 0;
    }
    eng->params.reduce_bucket_bytes = t->reduce_bucket_bytes;
    eng->params.overlap_comm = t->overlap_comm;
    eng->params.prefetch_bucket_elems = t->prefetch_bucket_elems;
    return ZERO_OK;
}
