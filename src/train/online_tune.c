/* online_tune.c — the online tuner's windows and decisions (online_tune.h). */
#include "train/online_tune.h"

#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

/* Candidate moves, tried in this order from each base (the cheapest to undo and the likeliest
 * to matter first). */
typedef enum {
    MOVE_BUCKET_HALF,
    MOVE_OVERLAP,
    MOVE_PREFETCH_HALF,
    MOVE_BUCKET_DOUBLE,
    MOVE_PREFETCH_DOUBLE,
    MOVE_COUNT
} move_t;

#define KEEP_GAIN 0.02 /* a candidate must be this much faster than its base to stay */

void zero__online_tune_init(zero_online_tune_t *t, zero_engine_t *eng, int interval) {
    memset(t, 0, sizeof *t);
    t->interval = interval;
    t->done = interval < 2;
    zero_engine_report_t rep;
    zero_engine_get_report(eng, &rep);
    t->stage = rep.stage;
    t->world = rep.world_size;
    t->model_elems = rep.padded_param_count;
    zero_engine_get_tuning(eng, &t->base);
    t->prev = t->base;
}

static int same(const zero_engine_tuning_t *a, const zero_engine_tuning_t *b) {
    return a->reduce_bucket_bytes == b->reduce_bucket_bytes && a->overlap_comm == b->overlap_comm &&
           a->prefetch_bucket_elems == b->prefetch_bucket_elems;
}

/* Candidate `m` from base into *c; 0 when it does not apply or changes nothing. Bucket sizes and
 * prefetch depths count from their effective values (capped at the model), so that halving a
 * default far above the model does change something. */
static int candidate(const zero_online_tune_t *t, move_t m, const zero_engine_tuning_t *base,
                     zero_engine_tuning_t *c) {
    const size_t model_bytes = t->model_elems * sizeof(float);
    const size_t bucket = ZERO_MIN(base->reduce_bucket_bytes, model_bytes);
    const int64_t prefetch = ZERO_MIN(base->prefetch_bucket_elems, (int64_t)t->model_elems);
    const size_t min_bucket = 16 * (size_t)t->world * sizeof(float);
    const int comm = t->world > 1, stage3 = t->stage == 3;
    *c = *base;
    switch (m) {
    case MOVE_BUCKET_HALF:
        if (!comm || bucket / 2 < min_bucket) return 0;
        c->reduce_bucket_bytes = bucket / 2;
        break;
    case MOVE_BUCKET_DOUBLE:
        if (!comm || bucket >= model_bytes) return 0;
        c->reduce_bucket_bytes = ZERO_MIN(2 * bucket, model_bytes);
        break;
    case MOVE_OVERLAP:
        if (!comm) return 0;
        c->overlap_comm = !base->overlap_comm;
        break;
    case MOVE_PREFETCH_HALF:
        if (!stage3 || prefetch / 2 < 1) return 0;
        c->prefetch_bucket_elems = prefetch / 2;
        break;
    case MOVE_PREFETCH_DOUBLE:
        if (!stage3 || prefetch < 1 || prefetch >= (int64_t)t->model_elems) return 0;
        c->prefetch_bucket_elems = ZERO_MIN(2 * prefetch, (int64_t)t->model_elems);
        break;
    default: return 0;
    }
    /* going straight back to the base it just beat would time the same setting again */
    return !(t->has_prev && same(c, &t->prev));
}

static int applicable(const zero_online_tune_t *t, const zero_engine_tuning_t *base) {
    int n = 0;
    zero_engine_tuning_t c;
    for (int m = 0; m < MOVE_COUNT; m++) n += candidate(t, (move_t)m, base, &c);
    return n;
}

/* The next applicable move after the last one tried, into t->cand; 0 when none applies. */
static int propose(zero_online_tune_t *t) {
    for (int i = 0; i < MOVE_COUNT; i++) {
        const int m = (t->move + i) % MOVE_COUNT;
        if (candidate(t, (move_t)m, &t->base, &t->cand)) {
            t->move = (m + 1) % MOVE_COUNT;
            return 1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "reduce_bucket_size 5000 -> 2500": the knob that differs between a and b, in the config's
 * units (the bucket in elements, as DeepSpeed counts it). */
static void describe(char *buf, size_t n, const zero_engine_tuning_t *a,
                     const zero_engine_tuning_t *b) {
    if (a->reduce_bucket_bytes != b->reduce_bucket_bytes)
        snprintf(buf, n, "reduce_bucket_size %zu -> %zu", a->reduce_bucket_bytes / sizeof(float),
                 b->reduce_bucket_bytes / sizeof(float));
    else if (a->overlap_comm != b->overlap_comm)
        snprintf(buf, n, "overlap_comm %s -> %s", a->overlap_comm ? "true" : "false",
                 b->overlap_comm ? "true" : "false");
    else
        snprintf(buf, n, "stage3_prefetch_bucket_size %lld -> %lld",
                 (long long)a->prefetch_bucket_elems, (long long)b->prefetch_bucket_elems);
}

zero_status_t zero__online_tune_step(zero_online_tune_t *t, zero_engine_t *eng, zero_comm_t *comm,
                                     int step, double step_s, FILE *out) {
    if (t->done) return ZERO_OK;
    if (t->count < ZERO__ONLINE_WINDOW_MAX) t->times[t->count] = step_s;
    if (++t->count < t->interval) return ZERO_OK;
    double s = median(t->times, ZERO_MIN(t->count, ZERO__ONLINE_WINDOW_MAX));
    t->count = 0;
    if (comm && t->world > 1) {
        /* rank-order sum: the same bits, so the same decision, on every rank */
        zero_status_t st = zero_comm_all_reduce(&s, &s, 1, ZERO_DTYPE_FP64, ZERO_OP_SUM, comm);
        if (st) return st;
        s /= t->world;
    }
    if (!t->trial) { /* a base window: time the next candidate from here */
        t->base_s = s;
        if (t->first_s == 0) t->first_s = s;
        if (!propose(t)) {
            t->done = 1;
            if (out)
                fprintf(out, "tune-online: step %d: nothing to tune (stage %d, %d rank%s)\n", step,
                        t->stage, t->world, t->world == 1 ? "" : "s");
            return ZERO_OK;
        }
        t->trial = 1;
        t->changes++;
        return zero_engine_retune(eng, &t->cand);
    }
    t->trial = 0;
    const int kept = s < t->base_s * (1.0 - KEEP_GAIN);
    char what[128];
    describe(what, sizeof what, &t->base, &t->cand);
    if (out)
        fprintf(out, "tune-online: step %d: %s: %.4g s -> %.4g s/step, %s\n", step, what, t->base_s,
                s, kept ? "kept" : "undone");
    zero_status_t st = ZERO_OK;
    if (kept) {
        t->prev = t->base;
        t->has_prev = 1;
        t->base = t->cand;
        t->base_s = s;
        t->losses = 0;
    } else {
        st = zero_engine_retune(eng, &t->base);
        t->changes++;
        t->losses++;
    }
    if (!st && t->losses >= applicable(t, &t->base)) {
        t->done = 1;
        if (out)
            fprintf(out,
                    "tune-online: step %d: settled on reduce_bucket_size %zu, overlap_comm %s, "
                    "stage3_prefetch_bucket_size %lld: %.4g s/step (first window %.4g)\n",
                    step, t->base.reduce_bucket_bytes / sizeof(float),
                    t->base.overlap_comm ? "true" : "false",
                    (long long)t->base.prefetch_bucket_elems, t->base_s, t->first_s);
    }
    if (out) fflush(out);
    return st;
}
