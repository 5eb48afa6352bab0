/* step.c — zero_engine_step: gradient completion, global norm over shards, the cross-rank
 * schedule check, clipping, AdamW on the owned shard (stage 0: on the full buffers) and the
 * all-gathers that make parameters whole again.
 *
 * Not here: bucket mechanics (buckets.c), fetch (fetch.c).
 * Invariants: the norm is the same computation on every stage: float64 sum of squares of each
 * unit's accumulator shard (units in order), per-rank partials combined in rank order after an
 * all-gather; the units of zero_engine_add_unit_in add their squares exactly instead
 * (kernels/sumsq_exact.h): the ranks' exact sums travel in the same all-gather, are merged as
 * integers and rounded once, and that double is added to the float64 part, the same bits however
 * those units are cut over the ranks (expert parallelism).
 * AdamW is elementwise, so updating a shard or the full buffer gives the same bits;
 * parameters are only ever updated by their owner and then copied.
 * Overflow: each rank's float64 sum of squares is non-finite iff one of its accumulator
 * elements is inf or NaN (argued where it is computed), so that one read-only pass is also the
 * overflow check; the flag goes in the same control all-gather as the norm partial and the
 * schedule hash, so every rank sees every flag without a collective of its own; the loss scaler
 * then decides on every rank alike. A parameter shard a rank could not read from its swap file
 * at a fetch (fetch.c) travels in the same record: every rank fails the step before any
 * update. 16-bit compute: AdamW runs on the fp32 master (16-bit accumulators widened in blocks),
 * the master is rounded (RNE) into the parameters, and those are all-gathered in the compute
 * dtype.
 * Passes over memory: one read-only pass (sum of squares), then one fused pass per tensor
 * (kernels/optim_fused.h: scale, AdamW, rounding into the 16-bit parameters and zeroing of the
 * gradient it read), bitwise what the former separate passes computed.
 */
#include "engine_internal.h"

#include "kernels/kernels.h"
#include "optim/adamw.h"

#include <math.h>
#include <string.h>

/* One rank's contribution to the step's agreement all-gather. */
typedef struct step_record {
    double sumsq;
    uint64_t schedule_hash;
    uint32_t schedule_calls;
    int16_t overflow;      /* 1: an accumulator shard of this rank holds inf or NaN */
    int16_t fetch_failure; /* this rank's eng->fetch_failure (a status, 0: none) */
    uint64_t step;
} step_record_t;
_Static_assert(sizeof(step_record_t) == ZERO__CONTROL_BYTES, "the comm theory's control record");
_Static_assert(sizeof(zero__xsum_t) == ZERO__CONTROL_EXACT_BYTES, "the exact sum in the record");

static void describe_event(const zero_engine_t *eng, int32_t ev, char *buf, size_t n) {
    if (ev == INT32_MIN) {
        snprintf(buf, n, "made no further call");
        return;
    }
    int u = ev >= 0 ? ev : -ev - 1;
    const char *name = u < eng->unit_count ? eng->units[u].name : "?";
    snprintf(buf, n, "%s unit %d '%s'", ev >= 0 ? "fetched" : "finished gradients of", u, name);
}

/* The hashes differ: exchange the call sequences and name the first difference, the same text
 * on every rank. */
static zero_status_t schedule_mismatch(zero_engine_t *eng, const step_record_t *all) {
    uint64_t maxn = 0;
    for (int r = 0; r < eng->world; r++) maxn = ZERO_MAX(maxn, (uint64_t)all[r].schedule_calls);
    if (maxn == 0) maxn = 1;
    int32_t *mine = malloc(maxn * sizeof *mine);
    int32_t *every = malloc(maxn * (size_t)eng->world * sizeof *every);
    if (!mine || !every) {
        free(mine);
        free(every);
        return zero__engine_fail(eng, ZERO_ERR_MISMATCH,
                                 "step %lld: ranks called the engine in different orders (schedule "
                                 "hashes differ)",
                                 (long long)eng->step);
    }
    for (uint64_t i = 0; i < maxn; i++)
        mine[i] = i < (uint64_t)eng->event_count ? eng->events[i] : INT32_MIN;
    zero_status_t st = zero__xfer_gather(eng, &eng->groups[0], ZERO_XFER_CONTROL, mine, every,
                                         maxn * sizeof *mine, ZERO_DTYPE_UINT8, NULL);
    char msg[768] = "";
    if (!st) {
        for (uint64_t i = 0; i < maxn && !msg[0]; i++)
            for (int r = 1; r < eng->world; r++) {
                int32_t e0 = every[i], er = every[(size_t)r * maxn + i];
                if (e0 == er) continue;
                char a[160], b[160];
                describe_event(eng, e0, a, sizeof a);
                describe_event(eng, er, b, sizeof b);
                snprintf(msg, sizeof msg,
                         "step %lld: ranks called the engine differently: at call #%llu rank 0 "
                         "%s but rank %d %s (every rank must fetch and finish the same units in "
                         "the same order)",
                         (long long)eng->step, (unsigned long long)i, a, r, b);
                break;
            }
    }
    if (!msg[0])
        snprintf(msg, sizeof msg,
                 "step %lld: ranks called the engine in different orders (schedule hashes differ)",
                 (long long)eng->step);
    free(mine);
    free(every);
    return zero__engine_fail(eng, ZERO_ERR_MISMATCH, "%s", msg);
}

static zero_status_t comm_fail(zero_engine_t *eng, zero_status_t st, const char *what) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", zero_last_error());
    return zero__engine_fail(eng, st, "step %lld: %s failed: %s", (long long)eng->step, what, msg);
}

/* All-gather each listed unit's owned range in place (full buffers) over its group, all posted
 * then waited. */
static zero_status_t gather_params(zero_engine_t *eng, int persistent_only) {
    zero_status_t st = ZERO_OK;
    zero_comm_request_t **reqs = calloc((size_t)eng->unit_count, sizeof *reqs);
    if (!reqs) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (step)");
    for (int i = 0; i < eng->unit_count && !st; i++) {
        zero__unit_t *un = &eng->units[i];
        if (persistent_only && !un->persistent) continue;
        if (un->grp->size == 1) continue;
        st = zero__xfer_gather(eng, un->grp, ZERO_XFER_PARAMS,
                               zero__elem(un->full, zero__shard_lo(un), eng->ce), un->full,
                               un->shard_count, eng->params.compute_dtype, &reqs[i]);
    }
    for (int i = 0; i < eng->unit_count; i++)
        if (reqs[i]) {
            zero_status_t s = zero__xfer_wait(reqs[i]);
            if (!st) st = s;
        }
    free(reqs);
    return st ? comm_fail(eng, st, "the parameter all-gather") : ZERO_OK;
}

/* Zero (all bits) elements [a, b) of g (dtype of gsize bytes), and with 16-bit compute round
 * the master's [a, b) into the parameters lp: the padding between and after tensors, which the
 * fused pass does not visit. Both stay zero anyway (engine_internal.h); this keeps the buffers
 * exactly as the whole-range passes left them without relying on it. Offsets are relative to
 * base, the unit element of g[0] and lp[0]; the master is read through the residency. */
/* The end of the tile that starts at element x of [x, b): b, or the next multiple of the
 * residency's sub-group from base (the held range's start) when the states are swapped, so that
 * a tile never spans two sub-groups. AdamW is elementwise: any cut gives the same bits. */
static size_t tile_end(const zero_engine_t *eng, size_t base, size_t x, size_t b) {
    const size_t G = zero__swap_tile_elems(eng);
    if (!G) return b;
    return ZERO_MIN(b, base + ((x - base) / G + 1) * G);
}

static zero_status_t pass_gap(const zero_engine_t *eng, int unit, size_t base, void *g,
                              size_t gsize, int zero_g, void *lp, size_t a, size_t b) {
    if (a >= b) return ZERO_OK;
    if (zero_g) memset(zero__elem(g, a, gsize), 0, (b - a) * gsize);
    if (!lp) return ZERO_OK;
    const zero__optim_residency_t *res = &eng->residency;
    zero_status_t st = ZERO_OK;
    for (size_t x = base + a, y; !st && x < base + b; x = y) {
        y = tile_end(eng, base, x, base + b);
        void *par = NULL;
        st = res->map(res->ctx, unit, ZERO_ENGINE_STATE_MASTER, x, y - x, &par);
        if (st) break;
        zero__narrow(zero__elem(lp, x - base, eng->ce), par, y - x, eng->params.compute_dtype);
        st = res->unmap(res->ctx, unit, ZERO_ENGINE_STATE_MASTER, par, x, y - x, 0);
    }
    return st;
}

/* AdamW on what this rank updates of unit `unit` (stage 0: everything), in one fused pass per
 * tensor, the tile of the optimizer's states (optim/adamw.h) mapped through the residency, with
 * learning rate lr and bias-correction step tstep (the step's count after it): the
 * gradient scaled by `scale` (the world's, for a unit of a smaller group too: its group's sum
 * is a sum over the world's tokens, engine.h zero_engine_add_unit_in), m, v and the fp32 master
 * updated, with 16-bit compute the master rounded into the parameters, and the gradient zeroed.
 * Clears *acc_cleared when that gradient was not the accumulator itself (stage 0 over more than
 * one rank: the gathered copy; the step must zero the accumulators then), else leaves it: the
 * caller starts from 1, so one such unit clears it whatever units (one-rank groups) follow. */
static zero_status_t update_unit(zero_engine_t *eng, int unit, double scale, float lr,
                                 int64_t tstep, int read_next, int *acc_cleared) {
    zero__unit_t *u = &eng->units[unit];
    const zero_engine_params_t *p = &eng->params;
    const size_t S = u->shard_count, lo = zero__shard_lo(u);
    const int N = u->grp->size;
    const float gscale = (float)scale;
    /* the gradient: the accumulator, or (one rank, pending) the 16-bit working buffer */
    void *g = u->pending ? u->work : u->acc, *pooled = NULL;
    zero_dtype_t gdt = u->pending ? p->compute_dtype : p->grad_accum_dtype;
    size_t gsize = u->pending ? eng->ce : eng->ae;
    size_t base = lo, span = S;
    int zero_g = 1;
    u->pending = 0;                                     /* the pass zeroes work */
    if (p->onebit && tstep > p->freeze_step) {          /* 1-bit Adam's compression stage */
        if (N > 1) g = u->work, gdt = p->compute_dtype; /* the local gradient */
        zero_status_t st = zero__onebit_update(eng, unit, g, gdt, gscale, lr, tstep);
        if (st) return comm_fail(eng, st, "1-bit Adam's compressed all-reduce");
        return ZERO_OK;
    }
    if (!eng->pol.shard_optim) {
        /* Stage 0 keeps whole moments: gather the reduced gradient and update all. fp32 uses the
         * model's working buffer (zeroed by the pass); 16-bit compute a pooled
         * accumulator-dtype one. The accumulator itself is then zeroed at the end of the step. */
        if (N > 1) {
            void *dst = u->work;
            if (eng->lowp) {
                dst = pooled = zero__pool_take(eng, &eng->grad_pool, ZERO_MEM_GRADS,
                                               u->padded_count * eng->ae);
                if (!dst)
                    return zero__engine_fail(eng, ZERO_ERR_OUT_OF_MEMORY,
                                             "step %lld: no memory to gather the gradient of unit "
                                             "'%s' (%zu bytes)",
                                             (long long)tstep, u->name, u->padded_count * eng->ae);
            }
            zero_status_t st = zero__xfer_gather(eng, u->grp, ZERO_XFER_GRADS, u->acc, dst, S,
                                                 p->grad_accum_dtype, NULL);
            if (st) {
                if (pooled) zero__pool_give(&eng->grad_pool, pooled);
                return comm_fail(eng, st, "the gradient all-gather");
            }
            g = dst;
            zero_g = !eng->lowp;
            *acc_cleared = 0;
        }
        base = 0;
        span = u->padded_count;
    }
    /* offload_param: the shard stays mapped for the whole pass (with fp32 compute the master's
     * tiles map it again and find it resident), and the next unit's shard and accumulator are
     * read while this one is updated */
    void *shard = NULL;
    if (u->poff) {
        zero_status_t st = zero__shard_map(eng, u, &shard);
        if (st) {
            if (pooled) zero__pool_give(&eng->grad_pool, pooled);
            return zero__engine_fail(eng, st, "step %lld: parameters of unit '%s' on NVMe: %s",
                                     (long long)tstep, u->name, zero_last_error());
        }
    }
    if (!u->pending && u->goff) { /* the accumulator on NVMe */
        zero_status_t st = zero__acc_map(eng, u, ZERO__ACC_ZERO, &g);
        if (st) {
            zero__shard_unmap(eng, u, 0);
            return st;
        }
    }
    /* the unit the step updates next: the following one, or with overlap the one below not
     * updated in backward */
    int next = unit + 1;
    if (eng->overlap)
        for (next = unit - 1; next >= 0 && eng->units[next].early == 2;) next--;
    if (read_next && next >= 0 && next < eng->unit_count) {
        int posted;
        zero_status_t st = zero__pswap_read_ahead(eng, &eng->units[next], NULL, 0, &posted);
        if (!st) st = zero__acc_read_ahead(eng, &eng->units[next]);
        if (st) { /* the message names the file */
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", zero_last_error());
            if (!u->pending && u->goff) zero__acc_unmap(eng, u, 0);
            zero__shard_unmap(eng, u, 0);
            if (pooled) zero__pool_give(&eng->grad_pool, pooled);
            return zero__engine_fail(eng, st, "step %lld: writing a swap file (NVMe): %s",
                                     (long long)tstep, msg);
        }
    }
    /* the parameters [base, base + span) the master rounds into (16-bit compute) */
    void *lp = NULL;
    if (eng->lowp) lp = u->poff ? shard : u->shard ? u->shard : zero__elem(u->full, base, eng->ce);
    const zero__adamw_t opt = zero__adamw_from_params(p);
    zero_status_t st = ZERO_OK;
    size_t done = base; /* [base, done) is finished: tensors in offset order, gaps between */
    if (eng->q8) {      /* 8-bit states: block by block over the whole range, gaps included */
        void *master = NULL;
        st = eng->residency.map(eng->residency.ctx, unit, ZERO_ENGINE_STATE_MASTER, base, span,
                                &master);
        if (!st)
            st = zero__q8_update(eng, unit, base, span, master, lp, g, gdt, gscale, zero_g, lr,
                                 tstep);
        if (master) {
            zero_status_t s2 = eng->residency.unmap(
                eng->residency.ctx, unit, ZERO_ENGINE_STATE_MASTER, master, base, span, 1);
            if (!st) st = s2;
        }
        done = base + span;
    }
    for (int t = 0; t < u->tensor_count && !st && !eng->q8; t++) {
        size_t a = ZERO_MAX(u->offsets[t], base);
        size_t b = ZERO_MIN(u->offsets[t] + u->counts[t], base + span);
        if (a >= b) continue;
        /* the fused pass zeroes the gradient it reads: tensors must not overlap */
        ZERO_ASSERT(a >= done);
        st = pass_gap(eng, unit, base, g, gsize, zero_g, lp, done - base, a - base);
        if (st) break;
        /* decoupled decay (in the kernel), skipped for NO_DECAY tensors */
        const zero__adamw_hp_t hp =
            zero__adamw_hp(&opt, lr, (int)tstep, !(u->tensors[t].flags & ZERO_TENSOR_NO_DECAY));
        for (size_t x = a, y; !st && x < b; x = y) {
            y = tile_end(eng, base, x, b);
            const size_t o = x - base;
            st = zero__adamw_step_tile(&eng->residency, unit, x, y - x, &hp,
                                       lp ? zero__elem(lp, o, eng->ce) : NULL, p->compute_dtype,
                                       zero__elem(g, o, gsize), gdt, gscale, zero_g, p->threads);
        }
        done = b;
    }
    if (!st) st = pass_gap(eng, unit, base, g, gsize, zero_g, lp, done - base, span);
    /* fp8 weights: the flagged tensors' new parameters back on the E4M3 grid */
    if (!st && lp && zero__fp8w_unit(eng, u)) zero__fp8w_round(eng, u, lp, base, base, span);
    if (!u->pending && u->goff) {
        /* zeroed by the pass, never read again this step: not written back */
        zero_status_t s2 = zero__acc_unmap(eng, u, ZERO__ACC_SPENT);
        if (!st) st = s2;
    }
    if (u->poff) {
        zero__shard_unmap(eng, u, 1);
        zero_status_t s2 = zero__shard_write_behind(eng, u);
        if (!st) st = s2;
    }
    if (pooled) zero__pool_give(&eng->grad_pool, pooled);
    if (st)
        return zero__engine_fail(eng, st, "step %lld: optimizer state of unit '%s': %s",
                                 (long long)tstep, u->name, zero_last_error());
    return ZERO_OK;
}

/* Unit u's share of this rank's sum of squares from its reduced gradient (before its update,
 * which zeroes it): a float64 unit's added to *f, an exact unit's (zero__unit_t.exact) to *x. A
 * unit of a smaller group counts with weight 1, like every unit: its group's sum, scaled as the
 * world's mean, is its gradient (zero_engine_add_unit_in). */
static void unit_sumsq(zero_engine_t *eng, const zero__unit_t *u, double *f, zero__xsum_t *x) {
    const zero_engine_params_t *p = &eng->params;
    if (u->early == 2) { /* updated in backward, its share taken then */
        if (u->exact)
            zero__xsum_merge(x, &u->early_xsum);
        else
            *f += u->early_sumsq;
        return;
    }
    /* pending: the accumulator would hold exactly the widened working buffer, and the sum over
     * one chunk of all of it is zero__sumsq of the widened values, same bits (exact: the same
     * values, the same sum) */
    const void *g = u->pending ? u->work : u->acc;
    const zero_dtype_t dt = u->pending ? p->compute_dtype : p->grad_accum_dtype;
    if (zero__onebit_local(eng, u)) { /* the local gradient, whole (onebit.c) */
        *f += zero__sumsq_dt(eng, u->work, u->padded_count, p->compute_dtype);
        return;
    }
    if (u->goff && !u->pending) { /* taken when written; zero if never written */
        if (!u->acc_on_disk) return;
        if (u->exact)
            zero__xsum_merge(x, &u->acc_xsum);
        else
            *f += u->acc_sumsq;
    } else if (u->exact) {
        zero__xsum_add_squares(x, g, u->shard_count, dt, p->threads);
    } else {
        *f += u->pending ? zero__sumsq_lp(g, dt, u->shard_count,
                                          ZERO_MAX(u->shard_count, (size_t)1), p->threads)
                         : zero__sumsq_dt(eng, g, u->shard_count, dt);
    }
}

/* ------------------------------------------------------------------------------ overlap_step
 * offload_optimizer.overlap_step (eng->overlap: stage 3, states on NVMe, no clipping, no loss
 * scale; engine.c). The step's update of a unit needs only its final gradient, the scale, the lr
 * and the step count: without clipping the scale is the mean over ranks x micro-steps (the loss
 * scale is 1), the lr and the count are known before the step. So once the last micro-step's
 * reduced gradient of a unit has landed in its accumulator (landed_count reaches
 * grad_accum_steps: every grads_done of the step has landed, in posting order), update_unit can
 * run in backward, the same call with the same arguments as the step's: the same bits. Its
 * states' reads and writes (swap.c, in backward's order: units downward) then overlap with the
 * backward of the units below. Only non-persistent units: their parameters are reachable only
 * through a fetch (refs counts the open ones), so the update waits until none is open, and a
 * later fetch in the step is refused. The step sums the partial taken before the update
 * (early_sumsq) in unit order as before, and updates the other units. An inf/NaN gradient can no
 * longer skip a step whose units were updated: it fails, on every rank (the control record's
 * overflow field carries "updated in backward" as its bit 1). */

/* The step's scale without clipping: avg of zero_engine_step, the loss scale being 1. */
static double overlap_scale(const zero_engine_t *eng) {
    return 1.0 / ((double)eng->world * (double)eng->params.grad_accum_steps) /
           zero_loss_scaler_scale(eng->scaler);
}

void zero__overlap_landed(zero_engine_t *eng, zero__unit_t *un) {
    if (!eng->overlap) return;
    if (++un->landed_count == eng->params.grad_accum_steps && !un->persistent && !un->early) {
        un->early = 1;
        eng->early_ready++;
    }
}

/* An update in backward failed (its message is the engine's failure): with more than one rank
 * it becomes this rank's fetch_failure, so that its collectives go on and the step's control
 * record fails every rank; with one the engine stays failed. No further update in this step. */
static void overlap_failed(zero_engine_t *eng, zero_status_t st) {
    eng->early_stop = 1;
    if (eng->world == 1 || eng->fetch_failure) return;
    snprintf(eng->fetch_failure_msg, sizeof eng->fetch_failure_msg, "%s", eng->failure_msg);
    eng->fetch_failure = st;
    eng->failure = ZERO_OK;
    eng->failure_msg[0] = '\0';
    zero__log(ZERO_LOG_ERROR, eng->rank, eng->world, "%s (every rank fails at the step)",
              eng->fetch_failure_msg);
}

void zero__overlap_run(zero_engine_t *eng) {
    if (!eng->early_ready || eng->early_stop || eng->failure || eng->fetch_failure) return;
    for (int i = eng->unit_count - 1; i >= 0 && eng->early_ready; i--) {
        zero__unit_t *u = &eng->units[i];
        /* never waits for the disk: a unit whose data is not in yet waits for a later hook (or
         * the step) */
        if (u->early != 1 || u->refs) continue;
        if (eng->overlap_wait) {
            if (!zero__pswap_can_map(eng, u) || !zero__acc_can_map(eng, u)) continue;
        } else if (!zero__uswap_ready(eng, u)) {
            /* evicted since (the fetch's read-ahead, another accumulator): read back ahead */
            int posted;
            zero_status_t st = zero__pswap_read_ahead(eng, u, NULL, 0, &posted);
            if (!st) st = zero__acc_read_ahead(eng, u);
            if (st) { /* a collected write had failed: its data is not on disk */
                zero__engine_fail(eng, st, "step %lld: writing a swap file (NVMe): %s",
                                  (long long)eng->step + 1, zero_last_error());
                overlap_failed(eng, st);
                return;
            }
            continue;
        } else if (!zero__swap_ready(eng, i)) {
            continue;
        }
        double part = 0.0;
        zero__xsum_t xpart;
        memset(&xpart, 0, sizeof xpart);
        unit_sumsq(eng, u, &part, &xpart);
        if (!isfinite(part) || xpart.nonfinite) { /* the step fails (or skips, if no rank
                                                     updated anything) */
            eng->early_stop = 1;
            return;
        }
        u->early_sumsq = part;
        u->early_xsum = xpart;
        u->early = 2;
        eng->early_ready--;
        eng->early_done++;
        int cleared = 1;
        zero_status_t st =
            update_unit(eng, i, overlap_scale(eng), zero_engine_lr_at(eng, eng->step),
                        eng->step + 1, 0, &cleared);
        if (!st && (st = zero__swap_leave(eng)))
            zero__engine_fail(eng, st, "step %lld: optimizer states on NVMe (in backward): %s",
                              (long long)eng->step + 1, zero_last_error());
        if (st) {
            overlap_failed(eng, st);
            return;
        }
    }
}

zero_status_t zero__overlap_refuse(const zero_engine_t *eng, const char *what) {
    if (!eng || !eng->early_done) return ZERO_OK;
    return zero__error(ZERO_ERR_INVALID_ARG,
                       "%s: %d units were already updated by this step's optimizer during "
                       "backward (zero_optimization.offload_optimizer.overlap_step); call it "
                       "before the last micro-step's backward or after zero_engine_step, or set "
                       "overlap_step false",
                       what, eng->early_done);
}

/* Stage 0 all-gathers each unit's reduced gradient inside its update. When this rank's update
 * fails at unit `from` (its swap I/O), the other ranks go on to the gathers of the units after
 * it: this rank posts them too, computing nothing, so that every rank reaches swap_agree at once
 * instead of the others waiting in a gather until the collective timeout. `posted`: unit from's
 * own gather was posted. A gather that fails ends it: its communicator is failed then, and the
 * later calls would return at once anyway. */
static void gathers_after(zero_engine_t *eng, int from, int posted) {
    if (eng->pol.shard_optim) return;
    for (int i = from + (posted ? 1 : 0); i < eng->unit_count; i++) {
        zero__unit_t *u = &eng->units[i];
        if (u->grp->size == 1) continue;
        void *buf =
            zero__pool_take(eng, &eng->grad_pool, ZERO_MEM_GRADS, u->padded_count * eng->ae);
        zero_status_t st =
            buf ? zero__xfer_gather(eng, u->grp, ZERO_XFER_GRADS, u->acc, buf, u->shard_count,
                                    eng->params.grad_accum_dtype, NULL)
                : ZERO_ERR_OUT_OF_MEMORY;
        if (buf) zero__pool_give(&eng->grad_pool, buf);
        if (st) return;
    }
}

/* Offloaded states: every rank says whether its update (its swap I/O) succeeded; a failure on
 * any rank is this step's failure everywhere, named with the first failing rank. */
static zero_status_t swap_agree(zero_engine_t *eng, zero_status_t mine) {
    if (eng->world == 1) return mine;
    int bad;
    zero_status_t theirs;
    zero_status_t st = zero__xfer_statuses(eng, ZERO_XFER_CONTROL, mine, &bad, &theirs);
    if (st) return comm_fail(eng, st, "the optimizer-swap agreement all-gather");
    if (mine || bad < 0) return mine;
    return zero__engine_fail(eng, theirs,
                             "step %lld: the swap files (NVMe) of rank %d failed (%s); "
                             "see that rank's message",
                             (long long)eng->step, bad, zero_status_str(theirs));
}

/* Drop this step's gradients (a skipped or failed step: all of them; after an update: the
 * accumulators the fused pass did not zero) and close its schedule window. */
static void end_step(zero_engine_t *eng, int acc_cleared) {
    for (int i = 0; i < eng->unit_count; i++) {
        zero__unit_t *u = &eng->units[i];
        if (!acc_cleared && u->acc)
            zero__zero(u->acc, u->shard_count * eng->ae / sizeof(float), eng->params.threads);
        u->acc_on_disk = 0; /* gswap: the file's contents are stale from here on */
        if (u->pending)     /* a skipped step's gradient still in the working buffer */
            zero__zero(u->work, u->padded_count * eng->ce / sizeof(float), eng->params.threads);
        u->pending = 0;
        u->acc_used = 0;
        u->done_count = u->landed_count = u->early = 0;
        zero__grad_buffer_to_work(eng, u);
    }
    eng->early_ready = eng->early_done = eng->early_stop = 0;
    zero__schedule_end_step(eng);
    zero__xfer_end_step(eng);
    if (eng->aio) zero__aio_stats_window(eng->aio, &eng->io_base, &eng->io_last);
    /* after the window: the next step's reads count in the next step */
    zero__fetch_read_ahead_next(eng);
}

zero_status_t zero_engine_step(zero_engine_t *eng, zero_step_stats_t *stats) {
    if (!eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_step: engine is NULL");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    if (eng->world == 1 && eng->fetch_failure) return zero__fetch_failure_agreed(eng, 0, 0);
    double t0 = zero_time_now();
    const zero_engine_params_t *p = &eng->params;
    zero_status_t st;

    /* Buffers handed out and never handed back are handed back now, in unit order. */
    for (int i = 0; i < eng->unit_count; i++)
        if (eng->units[i].dirty && (st = zero__grads_done(eng, i))) return st;
    if ((st = zero__buckets_drain(eng))) return st;
    if (eng->pol.shard_params && (st = zero__fetch_drop_all(eng))) return st;
    for (int i = 0; i < eng->unit_count; i++) zero__grad_buffer_to_acc(eng, &eng->units[i]);

    /* This rank's partial sum of squares over its shards (units in order; a unit updated in
     * backward gave its part then), and its inf/NaN flag: float64 over the units of
     * zero_engine_add_unit, exact over those of zero_engine_add_unit_in. */
    double mine = 0.0;
    zero__xsum_t xmine, xall;
    memset(&xmine, 0, sizeof xmine);
    for (int i = 0; i < eng->unit_count; i++) unit_sumsq(eng, &eng->units[i], &mine, &xmine);
    int overflow = 0;
    /* The sum of squares is the non-finite check too, with no pass of its own. A finite fp32,
     * bf16 or fp16 value squares to at most 3.4e38^2 = 1.2e77 in float64, so a float64 sum of
     * any number of them that this machine can hold (< 2^64 terms: < 2.1e96) is finite: every
     * lane, part, chunk and unit partial is a sum of at most that many such squares. An inf
     * element squares to +inf and a NaN to NaN, and adding non-negative finite terms (squares
     * are never negative, so never inf - inf) keeps +inf or NaN. So mine is non-finite iff some
     * element of this rank's shards is inf or NaN — what zero__has_nonfinite answered. */
    overflow = !isfinite(mine) || xmine.nonfinite;
    int early_any = eng->early_done > 0; /* some rank updated units in backward */
    double sumsq = mine;
    xall = xmine;
    if (eng->world > 1) {
        /* the record, then with exact units this rank's exact sum */
        const size_t rb = ZERO__CONTROL_BYTES + (eng->exact_units ? ZERO__CONTROL_EXACT_BYTES : 0);
        step_record_t rec, *all = malloc((size_t)eng->world * sizeof *all);
        unsigned char *out = malloc(rb), *in = malloc((size_t)eng->world * rb);
        if (!all || !out || !in) {
            free(all);
            free(out);
            free(in);
            return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (step)");
        }
        memset(&rec, 0, sizeof rec);
        rec.sumsq = mine;
        rec.schedule_hash = eng->event_count ? eng->event_hash : 0;
        rec.schedule_calls = (uint32_t)eng->event_count;
        rec.overflow = (int16_t)(overflow | (early_any ? 2 : 0));
        rec.fetch_failure = (int16_t)eng->fetch_failure;
        rec.step = (uint64_t)eng->step;
        memcpy(out, &rec, sizeof rec);
        if (eng->exact_units) memcpy(out + sizeof rec, &xmine, sizeof xmine);
        st = zero__xfer_gather(eng, &eng->groups[0], ZERO_XFER_CONTROL, out, in, rb,
                               ZERO_DTYPE_UINT8, NULL);
        /* the ranks' exact sums merged: integers, so in any order */
        memset(&xall, 0, sizeof xall);
        for (int r = 0; !st && r < eng->world; r++) {
            memcpy(&all[r], in + (size_t)r * rb, sizeof *all);
            if (!eng->exact_units) continue;
            zero__xsum_t xr;
            memcpy(&xr, in + (size_t)r * rb + sizeof *all, sizeof xr);
            zero__xsum_merge(&xall, &xr);
        }
        free(out);
        free(in);
        if (st) {
            free(all);
            return comm_fail(eng, st, "the gradient-norm and schedule all-gather");
        }
        /* A parameter shard lost at a fetch (fetch.c) on any rank: every rank fails here, before
         * the loss scaler or any update, and before the schedule check (the lost rank kept
         * calling, so the schedules agree anyway). */
        int bad = -1;
        for (int r = 0; r < eng->world && bad < 0; r++)
            if (all[r].fetch_failure) bad = r;
        if (bad >= 0) {
            const zero_status_t theirs = all[bad].fetch_failure;
            free(all);
            return zero__fetch_failure_agreed(eng, bad, theirs);
        }
        for (int r = 1; r < eng->world; r++)
            if (all[r].schedule_hash != all[0].schedule_hash ||
                all[r].schedule_calls != all[0].schedule_calls) {
                st = schedule_mismatch(eng, all);
                free(all);
                return st;
            }
        sumsq = 0.0;
        for (int r = 0; r < eng->world; r++) { /* rank order */
            sumsq += all[r].sumsq;
            overflow |= (all[r].overflow & 1) != 0;
            early_any |= (all[r].overflow & 2) != 0;
        }
        free(all);
    }
    /* The exact units' share, rounded once: the same double whatever cut the ranks summed (so
     * across ep). A model without such units adds 0.0, leaving the float64 sum's bits. */
    sumsq += zero__xsum_value(&xall);
    /* A finite shard cannot give a non-finite float64 sum of squares; belt and braces, and the
     * same on every rank since sumsq is. */
    if (!isfinite(sumsq)) overflow = 1;
    if (overflow && early_any) /* every rank alike: the flags and sumsq are the same on all */
        return zero__engine_fail(
            eng, ZERO_ERR_INVALID_ARG,
            "step %lld: inf/NaN gradient, but zero_optimization.offload_optimizer.overlap_step "
            "already updated units during backward, so the step cannot be skipped; the engine "
            "cannot go on (resume from a checkpoint; set overlap_step false to have such steps "
            "skipped instead)",
            (long long)eng->step + 1);

    int acc_cleared = 0; /* the update zeroed every accumulator (same for every unit) */
    zero_loss_scaler_result_t ls;
    const double scale_before = zero_loss_scaler_scale(eng->scaler);
    st = zero_loss_scaler_update(eng->scaler, overflow, &ls);
    if (st) { /* an overflow at the floor with raise_error_at_min_scale: training diverged */
        char msg[768];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        end_step(eng, 0);
        return zero__error(st, "step %lld: inf/NaN gradient at loss scale %g: %s",
                           (long long)eng->step + 1, scale_before, msg);
    }

    /* Mean over ranks x micro-steps and the loss scale's unscaling, folded into one multiply
     * with the clip factor (fp32 and bf16: the scale is 1, so this is the plain mean). */
    const double avg = 1.0 / ((double)eng->world * (double)p->grad_accum_steps) / ls.used_scale;
    double norm = sqrt(sumsq) * avg;
    /* 1-bit Adam's compression stage: each rank's own gradient, unreduced, is what the step
     * scales; the norm clipped against is the quadratic mean of the ranks' local norms */
    const int local = p->onebit && eng->step >= p->freeze_step && eng->world > 1;
    if (local) norm *= sqrt((double)eng->world);
    zero_step_stats_t ss;
    memset(&ss, 0, sizeof ss);
    ss.lr = zero_engine_lr_at(eng, eng->step);
    ss.loss_scale = (float)ls.used_scale;
    if (ls.skip) {
        ss.grad_norm = isfinite(norm) ? norm : -1.0;
        ss.skipped = 1;
        eng->loco_reset = 1; /* LoCo: an inf/NaN may sit in the error buffers */
        for (int i = 0; i < eng->unit_count; i++) /* 1-bit Adam: the local gradients */
            if (zero__onebit_local(eng, &eng->units[i]))
                zero__zero(eng->units[i].work, eng->units[i].padded_count * eng->ce / sizeof(float),
                           p->threads);
        if (eng->rank == 0) {
            zero_loss_scaler_state_t lst;
            zero_loss_scaler_get_state(eng->scaler, &lst);
            if (p->compute_dtype == ZERO_DTYPE_FP16)
                zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                          "step %lld skipped: inf/NaN gradient, loss scale %g -> %g",
                          (long long)lst.iter, ls.used_scale, ls.next_scale);
            else
                zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                          "step %lld skipped: inf/NaN gradient", (long long)lst.iter);
        }
    } else {
        ss.grad_norm = norm;
        double scale = local ? avg * eng->world : avg;
        if (p->grad_clip > 0.0f && norm > p->grad_clip) {
            scale *= p->grad_clip / norm;
            ss.clipped = 1;
        }
        eng->step++;
        if (p->loco && eng->step % p->loco_reset_t == 0) eng->loco_reset = 1;
        /* units updated in backward: the same call, their accumulators zeroed (stage 3) */
        acc_cleared = 1;
        ss.units_in_backward = eng->early_done;
        /* overlap: the rest in backward's order too, which swap.c reads ahead in (each unit's
         * update is its own: any order gives the same bits) */
        for (int k = 0; k < eng->unit_count && !st; k++) {
            const int i = eng->overlap ? eng->unit_count - 1 - k : k;
            if (eng->units[i].early == 2) continue;
            const uint64_t sent = eng->xfer.sent[ZERO_XFER_GRADS];
            st = update_unit(eng, i, scale, ss.lr, eng->step, 1, &acc_cleared);
            if (st && eng->swap) gathers_after(eng, i, eng->xfer.sent[ZERO_XFER_GRADS] != sent);
        }
        if (!st && (st = zero__swap_sync(eng)))
            zero__engine_fail(eng, st, "step %lld: optimizer states on NVMe: %s",
                              (long long)eng->step, zero_last_error());
        if (!st && (st = zero__pswap_sync(eng)))
            zero__engine_fail(eng, st, "step %lld: writing the parameters to NVMe: %s",
                              (long long)eng->step, zero_last_error());
        /* A swap file that fails on one rank fails the step on every rank, before any rank
         * gathers parameters the failed one did not update. */
        if ((eng->swap || eng->pswap) && (st = swap_agree(eng, st))) return st;
        if (st) return st;
        if (eng->pol.gather_after_step && (st = gather_params(eng, eng->pol.shard_params)))
            return st;
    }
    end_step(eng, acc_cleared);
    ss.step = eng->step;
    ss.step_s = zero_time_now() - t0;
    if (stats) *stats = ss;
    return ZERO_OK;
}

void zero_engine_zero_grads(zero_engine_t *eng) {
    if (!eng) return;
    /* units updated in backward: half a step taken, nothing consistent to go back to */
    if (zero__overlap_refuse(eng, "zero_engine_zero_grads")) {
        zero__engine_fail(eng, ZERO_ERR_INVALID_ARG, "%s", zero_last_error());
        return;
    }
    (void)zero__buckets_drain(eng);
    for (int i = 0; i < eng->unit_count; i++) {
        zero__unit_t *u = &eng->units[i];
        if (u->work) memset(u->work, 0, zero__work_count(u) * eng->ce);
        if (u->acc) memset(u->acc, 0, u->shard_count * eng->ae);
        u->acc_on_disk = 0;
        u->acc_used = 0;
        u->pending = 0;
        u->done_count = u->landed_count = u->early = 0;
        zero__grad_buffer_to_work(eng, u);
    }
    eng->early_ready = eng->early_stop = 0;
}
