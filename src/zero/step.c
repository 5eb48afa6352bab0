/* step.c — zero_engine_step: gradient completion, global norm over shards, the cross-rank
 * schedule check, clipping, AdamW on the owned shard (stage 0: on the full buffers) and the
 * all-gathers that make parameters whole again.
 *
 * Not here: bucket mechanics (buckets.c), fetch (fetch.c).
 * Invariants: the norm is the same computation on every stage: float64 sum of squares of each
 * unit's accumulator shard (units in order), per-rank partials combined in rank order after an
 * all-gather. AdamW is elementwise, so updating a shard or the full buffer gives the same bits;
 * parameters are only ever updated by their owner and then copied.
 */
#include "engine_internal.h"

#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* One rank's contribution to the step's agreement all-gather. */
typedef struct step_record {
    double sumsq;
    uint64_t schedule_hash;
    uint64_t schedule_calls;
    uint64_t step;
} step_record_t;

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
    for (int r = 0; r < eng->world; r++) maxn = ZERO_MAX(maxn, all[r].schedule_calls);
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
    zero_status_t st =
        zero_comm_all_gather(mine, every, maxn * sizeof *mine, ZERO_DTYPE_UINT8, eng->comm);
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

/* All-gather each listed unit's owned range in place (full buffers), all posted then waited. */
static zero_status_t gather_params(zero_engine_t *eng, int persistent_only) {
    zero_status_t st = ZERO_OK;
    zero_comm_request_t **reqs = calloc((size_t)eng->unit_count, sizeof *reqs);
    if (!reqs) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (step)");
    for (int i = 0; i < eng->unit_count && !st; i++) {
        zero__unit_t *un = &eng->units[i];
        if (persistent_only && !un->persistent) continue;
        size_t S = un->shard_count;
        st = zero_comm_all_gather_post(un->full + (size_t)eng->rank * S, un->full, S,
                                       ZERO_DTYPE_FP32, eng->comm, &reqs[i]);
    }
    for (int i = 0; i < eng->unit_count; i++)
        if (reqs[i]) {
            zero_status_t s = zero_comm_wait(reqs[i]);
            if (!st) st = s;
        }
    free(reqs);
    return st ? comm_fail(eng, st, "the parameter all-gather") : ZERO_OK;
}

static void adamw_range(zero_engine_t *eng, float *params, float *grads, float *m, float *v,
                        size_t n, float lr, float wd) {
    const zero_engine_params_t *p = &eng->params;
    if (n == 0) return;
    zero__adamw_update(params, grads, m, v, n, lr, p->beta1, p->beta2, p->eps, wd, (int)eng->step,
                       p->threads);
}

zero_status_t zero_engine_step(zero_engine_t *eng, zero_step_stats_t *stats) {
    if (!eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_step: engine is NULL");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    double t0 = zero_time_now();
    const zero_engine_params_t *p = &eng->params;
    zero_status_t st;

    /* Buffers handed out and never handed back are handed back now, in unit order. */
    for (int i = 0; i < eng->unit_count; i++)
        if (eng->units[i].dirty && (st = zero__grads_done(eng, i))) return st;
    if ((st = zero__buckets_drain(eng))) return st;
    if (p->stage == 3 && (st = zero__fetch_drop_all(eng))) return st;

    /* This rank's partial sum of squares over its shards. */
    double mine = 0.0;
    for (int i = 0; i < eng->unit_count; i++) {
        const zero__unit_t *u = &eng->units[i];
        mine += zero__sumsq(u->acc, u->shard_count, p->threads);
    }
    double sumsq = mine;
    if (eng->world > 1) {
        step_record_t rec, *all = malloc((size_t)eng->world * sizeof *all);
        if (!all) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (step)");
        memset(&rec, 0, sizeof rec);
        rec.sumsq = mine;
        rec.schedule_hash = eng->event_count ? eng->event_hash : 0;
        rec.schedule_calls = (uint64_t)eng->event_count;
        rec.step = (uint64_t)eng->step;
        st = zero_comm_all_gather(&rec, all, sizeof rec, ZERO_DTYPE_UINT8, eng->comm);
        if (st) {
            free(all);
            return comm_fail(eng, st, "the gradient-norm and schedule all-gather");
        }
        for (int r = 1; r < eng->world; r++)
            if (all[r].schedule_hash != all[0].schedule_hash ||
                all[r].schedule_calls != all[0].schedule_calls) {
                st = schedule_mismatch(eng, all);
                free(all);
                return st;
            }
        sumsq = 0.0;
        for (int r = 0; r < eng->world; r++) sumsq += all[r].sumsq; /* rank order */
        free(all);
    }

    /* Mean over ranks x micro-steps; folded into one scale with the clip factor. */
    const double avg = 1.0 / ((double)eng->world * (double)p->grad_accum_steps);
    double norm = sqrt(sumsq) * avg;
    zero_step_stats_t ss;
    memset(&ss, 0, sizeof ss);
    ss.lr = zero_engine_lr_at(eng, eng->step);
    if (!isfinite(norm)) {
        ss.grad_norm = -1.0;
        ss.skipped = 1;
    } else {
        ss.grad_norm = norm;
        double scale = avg;
        if (p->grad_clip > 0.0f && norm > p->grad_clip) {
            scale *= p->grad_clip / norm;
            ss.clipped = 1;
        }
        const float gscale = (float)scale;
        eng->step++;
        for (int i = 0; i < eng->unit_count; i++) {
            zero__unit_t *u = &eng->units[i];
            const size_t S = u->shard_count, lo = (size_t)eng->rank * S;
            float *g = u->acc, *par = u->shard ? u->shard : u->full + lo;
            size_t base = lo, span = S;
            if (p->stage == 0) {
                /* Stage 0 keeps whole moments: gather the reduced gradient and update all. */
                if (eng->world > 1) {
                    st = zero_comm_all_gather(u->acc, u->work, S, ZERO_DTYPE_FP32, eng->comm);
                    if (st) return comm_fail(eng, st, "the gradient all-gather");
                    g = u->work;
                }
                par = u->full;
                base = 0;
                span = u->padded_count;
            }
            if (gscale != 1.0f) zero__scale(g, gscale, span, p->threads);
            for (int t = 0; t < u->tensor_count; t++) {
                /* decoupled decay (in the kernel), skipped for NO_DECAY tensors */
                const float wd =
                    (u->tensors[t].flags & ZERO_TENSOR_NO_DECAY) ? 0.0f : p->weight_decay;
                size_t a = ZERO_MAX(u->offsets[t], base);
                size_t b = ZERO_MIN(u->offsets[t] + u->counts[t], base + span);
                if (a >= b) continue;
                size_t o = a - base;
                adamw_range(eng, par + o, g + o, u->m + o, u->v + o, b - a, ss.lr, wd);
            }
            if (p->stage == 0 && eng->world > 1)
                memset(u->work, 0, u->padded_count * sizeof(float));
        }
        if (eng->world > 1 && (p->stage == 1 || p->stage == 2) && (st = gather_params(eng, 0)))
            return st;
        if (eng->world > 1 && p->stage == 3 && (st = gather_params(eng, 1))) return st;
    }
    for (int i = 0; i < eng->unit_count; i++) {
        zero__zero(eng->units[i].acc, eng->units[i].shard_count, p->threads);
        eng->units[i].acc_used = 0;
    }
    zero__schedule_end_step(eng);
    zero__accounting_end_step(eng);
    ss.step = eng->step;
    ss.step_s = zero_time_now() - t0;
    if (stats) *stats = ss;
    return ZERO_OK;
}

void zero_engine_zero_grads(zero_engine_t *eng) {
    if (!eng) return;
    (void)zero__buckets_drain(eng);
    for (int i = 0; i < eng->unit_count; i++) {
        zero__unit_t *u = &eng->units[i];
        if (u->work) memset(u->work, 0, u->padded_count * sizeof(float));
        memset(u->acc, 0, u->shard_count * sizeof(float));
        u->acc_used = 0;
    }
}
