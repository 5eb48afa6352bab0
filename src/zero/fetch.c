/* fetch.c — zero_unit_fetch / zero_unit_release: the stage-3 just-in-time all-gather, release,
 * persistence and prefetch, and the per-step schedule (sequence of fetch / grads_done calls)
 * whose hash zero_engine_step checks across ranks.
 *
 * Not here: gradients (buckets.c). Stages 0-2 and persistent stage-3 units keep full
 * parameters, so fetch only records the call.
 * Invariants: a non-persistent stage-3 unit's full buffer exists iff it is held (refs > 0) or
 * prefetched (gathered ahead, not fetched yet); it is lent by the pool of gather buffers (exact
 * size match) and given back there, never freed, so the pool holds, for each padded size, the
 * most units of that size ever gathered at once. A prefetch is posted only from the reference
 * sequence (a step's fetch sequence seen again in the next step) and only while this step's
 * fetches so far equal its prefix: the decision depends on the call sequence alone, so every
 * rank with the same calls posts the same collectives in the same order, and a step whose calls
 * match the reference gathers each unit exactly once per fetch window (nothing is gathered
 * ahead and then dropped unused). live_elems counts the lent buffers.
 */
#include "engine_internal.h"
#include "kernels/kernels.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

void zero__schedule_event(zero_engine_t *eng, int32_t event) {
    if (eng->event_count == 0) eng->event_hash = FNV_OFFSET;
    if (eng->event_count == eng->event_cap) {
        int cap = eng->event_cap ? 2 * eng->event_cap : 256;
        int32_t *e = realloc(eng->events, (size_t)cap * sizeof *e);
        ZERO_ASSERT(e); /* a few bytes per call; running out here is not recoverable anyway */
        eng->events = e;
        eng->event_cap = cap;
    }
    eng->events[eng->event_count++] = event;
    uint32_t x = (uint32_t)event;
    for (int k = 0; k < 4; k++) {
        eng->event_hash ^= (x >> (8 * k)) & 0xffu;
        eng->event_hash *= FNV_PRIME;
    }
}

/* Fetch sequence of this step (units of the non-negative events); NULL if out of memory or
 * no fetch happened. */
static int *step_fetches(const zero_engine_t *eng, int *count) {
    int n = 0;
    for (int i = 0; i < eng->event_count; i++) n += eng->events[i] >= 0;
    *count = 0;
    if (n == 0) return NULL;
    int *f = malloc((size_t)n * sizeof *f);
    if (!f) return NULL;
    for (int i = 0; i < eng->event_count; i++)
        if (eng->events[i] >= 0) f[(*count)++] = eng->events[i];
    return f;
}

static int same_seq(const int *a, int na, const int *b, int nb) {
    return a && b && na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
}

void zero__schedule_end_step(zero_engine_t *eng) {
    if (eng->pol.shard_params) {
        /* A sequence becomes the reference once two consecutive steps agree on it: the first
         * step of a trainer also runs the initial evaluation, and evaluations recur every few
         * steps, so one step alone says little about the next. */
        int n = 0;
        int *cur = step_fetches(eng, &n);
        if (same_seq(cur, n, eng->prev_fetches, eng->prev_fetch_count) &&
            !same_seq(cur, n, eng->ref_fetches, eng->ref_fetch_count)) {
            int *ref = malloc((size_t)n * sizeof *ref);
            if (ref) { /* out of memory: keep the old reference, prefetch is only an optimisation */
                memcpy(ref, cur, (size_t)n * sizeof *ref);
                free(eng->ref_fetches);
                eng->ref_fetches = ref;
                eng->ref_fetch_count = n;
            }
        }
        free(eng->prev_fetches);
        eng->prev_fetches = cur;
        eng->prev_fetch_count = n;
    }
    eng->event_count = 0;
    eng->event_hash = FNV_OFFSET;
    eng->fetch_index = 0;
    eng->off_schedule = 0;
}

static zero_status_t gather_fail(zero_engine_t *eng, const zero__unit_t *un, zero_status_t st,
                                 const char *what) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zero_last_error());
    return zero__engine_fail(eng, st,
                             "step %lld, fetch #%d: %s of unit %d '%s' failed (do all ranks fetch "
                             "the same units in the same order?): %s",
                             (long long)eng->step, eng->fetch_index, what, (int)(un - eng->units),
                             un->name, msg);
}

/* offload_param: the gather of un has landed (or was never posted): its source shard may leave
 * memory. */
static void unmap_send(const zero_engine_t *eng, zero__unit_t *un) {
    if (!un->send_mapped) return;
    un->send_mapped = 0;
    zero__shard_unmap(eng, un, 0);
}

/* offload_param: a map of un's shard needs a buffer, and every one holds the source of a
 * prefetched gather still in flight: wait for those (posted in schedule order, so waiting
 * early changes nothing) and let their shards go. */
static zero_status_t free_send_buffers(zero_engine_t *eng, zero__unit_t *un) {
    for (int i = 0; i < eng->unit_count && !zero__pswap_can_map(eng, un); i++) {
        zero__unit_t *o = &eng->units[i];
        if (!o->send_mapped || !o->gather) continue;
        zero_status_t st = zero__xfer_gather_params_wait(eng, o);
        unmap_send(eng, o);
        if (st) return gather_fail(eng, o, st, "the prefetch all-gather");
    }
    return ZERO_OK;
}

/* Allocate unit un's full buffer and post (or, with one rank, do) its gather. With offload_param
 * the shard is read from its swap file first (or was read ahead) and stays mapped until the
 * gather has landed.
 * A read that fails (an I/O error, a short read, a checksum mismatch) fails the engine at once
 * with one rank. With more, the other ranks are about to wait for this rank's shard in this
 * gather, and the model goes on calling fetch and grads_done after it: returning NULL would
 * stop this rank's model and leave them waiting until the collective timeout. So the failure is
 * recorded (fetch_failure, naming the file and the unit), this rank's part of the gather is
 * zeros, and the fetch succeeds: every collective stays matched, the forward and backward run
 * on values nobody will use, and the step's control record (step.c) fails every rank before
 * any update. Between steps (evaluation, sampling) zero_engine_check does the same. */
/* Unit un's full buffer from the gather pool, counted live. */
static zero_status_t take_full(zero_engine_t *eng, zero__unit_t *un) {
    const size_t P = un->padded_count;
    un->full = zero__pool_take(eng, &eng->pool, ZERO_MEM_COMM, P * eng->ce);
    if (!un->full)
        return zero__engine_fail(eng, ZERO_ERR_OUT_OF_MEMORY,
                                 "step %lld: no memory to gather unit '%s' (%zu bytes)",
                                 (long long)eng->step, un->name, P * eng->ce);
    eng->live_elems += (int64_t)P;
    return ZERO_OK;
}

static zero_status_t start_gather(zero_engine_t *eng, zero__unit_t *un) {
    const size_t P = un->padded_count;
    void *shard = un->shard;
    un->gather_hpz = 0;
    if (zero__hpz_unit(eng, un) && un->sec_valid) {
        /* hpZ: a later window of this step, inside the group from the secondary shards, exact
         * (never quantized: it carries what the step's first gather gave) */
        zero_status_t st = take_full(eng, un);
        if (st) return st;
        un->gather_hpz = 1;
        st = zero__xfer_gather(eng, eng->hpz, ZERO_XFER_PARAMS, un->sec, un->full,
                               zero__hpz_count(eng, un), eng->params.compute_dtype, &un->gather);
        return st ? gather_fail(eng, un, st, "posting the hpZ in-group all-gather") : ZERO_OK;
    }
    if (un->poff) {
        zero_status_t st = free_send_buffers(eng, un);
        if (st) return st;
        st = zero__shard_map(eng, un, &shard);
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg,
                     "step %lld: reading the parameters of unit %d '%s' from NVMe failed: %s",
                     (long long)eng->step, (int)(un - eng->units), un->name, zero_last_error());
            if (eng->world == 1) return zero__engine_fail(eng, st, "%s", msg);
            zero__fetch_lost(eng, st, "%s", msg);
            shard = NULL;
        } else {
            un->send_mapped = 1;
        }
    }
    zero_status_t st = take_full(eng, un);
    if (st) {
        unmap_send(eng, un);
        return st;
    }
    if (!shard) { /* the lost shard: zeros, sent in place (comm.h's in-place all-gather) */
        shard = zero__elem(un->full, zero__shard_lo(un), eng->ce);
        memset(shard, 0, un->shard_count * eng->ce);
    }
    if (un->grp->size == 1) {
        if (shard != un->full) zero__copy(un->full, shard, P * eng->ce, eng->params.threads);
        unmap_send(eng, un);
        return ZERO_OK;
    }
    st = zero__xfer_gather_params(eng, un, shard);
    if (st) {
        unmap_send(eng, un);
        return gather_fail(eng, un, st, "posting the all-gather");
    }
    return ZERO_OK;
}

/* offload_param: the units of the recorded schedule from fetch `from` on that are not gathered:
 * post the reads of their shards, nearest first, while buffers are free, so the disk works
 * through the coming units while the model computes and a slow read has the time of several
 * units to land. A read-ahead never evicts another, nor a shard the schedule needs before the
 * one it reads (the turn from forward to backward uses the last units again). */
static void read_ahead(zero_engine_t *eng, int from) {
    if (!eng->pswap || !eng->ref_fetches || eng->off_schedule) return;
    int keep[64], nkeep = 0; /* the units of fetches [from, j) */
    for (int j = from, n = 0;
         j < eng->ref_fetch_count && n < eng->params.offload_param.buffer_count; j++) {
        int v = eng->ref_fetches[j];
        if (v < 0 || v >= eng->unit_count) return;
        const zero__unit_t *un = &eng->units[v];
        if (un->poff && !un->full) {
            int posted;
            /* no write is in flight between steps (the step's sync ended them): no error */
            if (zero__pswap_read_ahead(eng, un, keep, nkeep, &posted) || !posted) return;
            n++;
        }
        int seen = 0;
        for (int k = 0; k < nkeep && !seen; k++) seen = keep[k] == v;
        if (seen) continue;
        if (nkeep == (int)(sizeof keep / sizeof keep[0])) return;
        keep[nkeep++] = v;
    }
}

void zero__fetch_read_ahead_next(zero_engine_t *eng) { read_ahead(eng, 0); }

static void drop(zero_engine_t *eng, zero__unit_t *un) {
    if (un->prefetched) {
        eng->prefetch_elems -= (int64_t)un->padded_count;
        /* Only when the calls departed from the reference after the prefetch: the gather was
         * wasted and the step's traffic exceeds the theory of engine.h. Say so once. */
        if (!eng->warned_waste) {
            eng->warned_waste = 1;
            zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                      "step %lld: unit '%s' was prefetched but not fetched before the step (the "
                      "fetch sequence departed from the recorded one); its all-gather was wasted",
                      (long long)eng->step, un->name);
        }
    }
    eng->live_elems -= (int64_t)un->padded_count;
    zero__pool_give(&eng->pool, un->full);
    un->full = NULL;
    un->prefetched = 0;
    un->refs = 0;
}

/* Post the gathers of the next units of the recorded schedule while they fit the prefetch
 * budget and the live-parameter cap; stop at the first that does not, so the order of posted
 * gathers is the schedule's. */
static void prefetch(zero_engine_t *eng) {
    const zero_engine_params_t *p = &eng->params;
    if (!eng->ref_fetches || eng->off_schedule || p->prefetch_bucket_elems <= 0) return;
    for (int j = eng->fetch_index; j < eng->ref_fetch_count; j++) {
        int v = eng->ref_fetches[j];
        if (v < 0 || v >= eng->unit_count) return;
        zero__unit_t *un = &eng->units[v];
        if (un->persistent || un->full) continue;
        int64_t P = (int64_t)un->padded_count;
        if (eng->prefetch_elems + P > p->prefetch_bucket_elems ||
            eng->live_elems + P > p->max_live_elems)
            return;
        /* offload_param: only while a shard buffer is at hand (prefetch never waits for one) */
        if (un->poff && !zero__pswap_can_map(eng, un)) return;
        if (start_gather(eng, un)) return; /* failure recorded: the next fetch reports it */
        un->prefetched = 1;
        eng->prefetch_elems += P;
    }
}

const void *zero_unit_fetch(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un) return NULL;
    if (eng->failure) {
        zero__error(eng->failure, "%s", eng->failure_msg);
        return NULL;
    }
    if (un->early == 2) { /* its shard holds the next step's parameters already */
        zero__engine_fail(
            eng, ZERO_ERR_INVALID_ARG,
            "step %lld: unit %d '%s' is fetched after its optimizer update ran in "
            "this step's backward (zero_optimization.offload_optimizer.overlap_step): "
            "fetch it after zero_engine_step, or set overlap_step false",
            (long long)eng->step + 1, u, un->name);
        return NULL;
    }
    zero__schedule_event(eng, u);
    if (eng->ref_fetches && !eng->off_schedule &&
        (eng->fetch_index >= eng->ref_fetch_count || eng->ref_fetches[eng->fetch_index] != u))
        eng->off_schedule = 1;
    eng->fetch_index++;
    if (!eng->pol.shard_params || un->persistent) {
        if (un->fp8_stale) zero__fp8w_settle(eng, un); /* written where no master is held */
        return un->full;
    }
    if (un->refs == 0) {
        /* a new fetch window: one gather */
        /* with qwZ the gather carries the quantized shard: its bytes, as uint8 (an all-gather's
         * bytes depend only on those it carries) */
        /* with hpZ, a window after the step's first one: P_u / h elements inside the group */
        const int in_group = zero__hpz_unit(eng, un) && (un->full ? un->gather_hpz : un->sec_valid);
        const zero__group_t *g = in_group ? eng->hpz : un->grp;
        const uint64_t wire =
            in_group ? zero__hpz_count(eng, un) * eng->ce : zero__xfer_param_wire_bytes(eng, un);
        eng->xfer.gather_bytes +=
            zero__xfer_bytes(g, ZERO_COLL_ALL_GATHER, wire, ZERO_DTYPE_UINT8, 0);
        eng->xfer.gather_inter_bytes +=
            zero__xfer_bytes(g, ZERO_COLL_ALL_GATHER, wire, ZERO_DTYPE_UINT8, 1);
        if (!un->full && start_gather(eng, un)) return NULL;
        if (un->gather) {
            zero_status_t st = zero__xfer_gather_params_wait(eng, un);
            unmap_send(eng, un);
            if (st) {
                gather_fail(eng, un, st, "the all-gather");
                return NULL;
            }
        }
        if (un->prefetched) {
            un->prefetched = 0;
            eng->prefetch_elems -= (int64_t)un->padded_count;
        }
        if (zero__hpz_unit(eng, un) && !un->sec_valid) {
            /* hpZ: the step's first gather of the unit: keep this rank's slice over its group */
            const size_t H = zero__hpz_count(eng, un);
            memcpy(un->sec, zero__elem(un->full, (size_t)eng->hpz->rank * H, eng->ce), H * eng->ce);
            un->sec_valid = 1;
        }
    }
    un->refs++;
    prefetch(eng);
    read_ahead(eng, eng->fetch_index);
    return un->full;
}

void zero_unit_release(zero_engine_t *eng, int u) {
    zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un || !eng->pol.shard_params || un->persistent || un->refs == 0) return;
    if (--un->refs == 0) drop(eng, un);
    if (un->refs == 0 && un->early == 1) zero__overlap_run(eng); /* its update waited for this */
}

void zero__fetch_lost(zero_engine_t *eng, zero_status_t st, const char *fmt, ...) {
    if (eng->fetch_failure) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(eng->fetch_failure_msg, sizeof eng->fetch_failure_msg, fmt, ap);
    va_end(ap);
    eng->fetch_failure = st;
    zero__log(ZERO_LOG_ERROR, eng->rank, eng->world,
              "%s (gathering zeros in its place; every rank fails at the next step or check)",
              eng->fetch_failure_msg);
}

zero_status_t zero__fetch_failure_agreed(zero_engine_t *eng, int bad, zero_status_t theirs) {
    const char *outcome = eng->overlap
                              ? "the step fails; units updated in backward keep their update"
                              : "no rank updates anything";
    if (eng->fetch_failure)
        return zero__engine_fail(eng, eng->fetch_failure, "%s (%s)", eng->fetch_failure_msg,
                                 outcome);
    if (bad < 0) return ZERO_OK;
    return zero__engine_fail(eng, theirs,
                             "step %lld: rank %d could not read or write one of its swap files "
                             "(NVMe) (%s): %s; that rank's message names the file",
                             (long long)eng->step, bad, zero_status_str(theirs), outcome);
}

zero_status_t zero_engine_check(zero_engine_t *eng) {
    if (!eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_check: engine is NULL");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    if (eng->world == 1) return ZERO_OK;
    int bad;
    zero_status_t theirs;
    zero_status_t st =
        zero__xfer_statuses(eng, ZERO__XFER_CHECK, eng->fetch_failure, &bad, &theirs);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        return zero__engine_fail(eng, st, "zero_engine_check: the status all-gather failed: %s",
                                 msg);
    }
    return zero__fetch_failure_agreed(eng, bad, theirs);
}

void zero__hpz_invalidate(zero_engine_t *eng) {
    if (!eng || !eng->hpz) return;
    for (int i = 0; i < eng->unit_count; i++) eng->units[i].sec_valid = 0;
}

zero_status_t zero__fetch_drop_all(zero_engine_t *eng) {
    zero__hpz_invalidate(eng); /* the step changes every parameter */
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < eng->unit_count; i++) {
        zero__unit_t *un = &eng->units[i];
        if (un->persistent || !zero__unit_sharded(un)) continue;
        if (un->gather) {
            zero_status_t s = zero__xfer_gather_params_wait(eng, un);
            unmap_send(eng, un);
            if (s && !st) st = gather_fail(eng, un, s, "the prefetch all-gather");
        }
        if (un->refs > 0)
            zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                      "unit '%s' is still fetched (%d times) at the optimizer step; releasing it",
                      un->name, un->refs);
        if (un->full) drop(eng, un);
    }
    return st;
}
