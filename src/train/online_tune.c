/* online_tune.c — the online tuner's trials and decisions (online_tune.h). */
#include "train/online_tune.h"

#include "core/core_internal.h"
#include "train/roofline.h"

#include <stdlib.h>
#include <string.h>

/* Candidate moves, tried in this order from each base (the cheapest to undo and the likeliest
 * to matter first). */
typedef enum {
    MOVE_BUCKET_HALF,
    MOVE_OVERLAP,
    MOVE_PREFETCH_LESS,
    MOVE_BUCKET_DOUBLE,
    MOVE_PREFETCH_MORE,
    MOVE_COUNT
} move_t;

#define KEEP_GAIN 0.02 /* a candidate must be this much faster than its base to stay */

static int same(const zero_engine_tuning_t *a, const zero_engine_tuning_t *b) {
    return a->reduce_bucket_bytes == b->reduce_bucket_bytes && a->overlap_comm == b->overlap_comm &&
           a->prefetch_bucket_elems == b->prefetch_bucket_elems;
}

/* Candidate `m` from base into *c; 0 when it does not apply or changes nothing. Bucket sizes and
 * prefetch depths count from their effective values (capped at the model), so that halving a
 * default far above the model does change something. A prefetch budget below the largest
 * gathered unit may not admit the next unit, and one far below admits none (values that all behave
 * alike), so the prefetch moves step between "none" (0) and that unit, then double from it. */
static int candidate(const zero_online_tune_t *t, move_t m, const zero_engine_tuning_t *base,
                     zero_engine_tuning_t *c) {
    const size_t model_bytes = t->model_elems * sizeof(float);
    const size_t bucket = ZERO_MIN(base->reduce_bucket_bytes, model_bytes);
    const int64_t prefetch = ZERO_MIN(base->prefetch_bucket_elems, (int64_t)t->model_elems);
    const size_t min_bucket = 16 * (size_t)t->world * sizeof(float);
    const int comm = t->world > 1, gathers = t->stage == 3 && t->max_gather > 0;
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
    case MOVE_PREFETCH_LESS:
        if (!gathers || prefetch < t->max_gather) return 0;
        c->prefetch_bucket_elems = prefetch / 2 >= t->max_gather ? prefetch / 2 : 0;
        break;
    case MOVE_PREFETCH_MORE:
        if (!gathers || prefetch >= (int64_t)t->model_elems) return 0;
        c->prefetch_bucket_elems =
            ZERO_MIN(ZERO_MAX(2 * prefetch, t->max_gather), (int64_t)t->model_elems);
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

void zero__online_tune_init(zero_online_tune_t *t, zero_engine_t *eng, int interval) {
    memset(t, 0, sizeof *t);
    t->interval = interval;
    t->done = interval < 2;
    zero_engine_report_t rep;
    zero_engine_get_report(eng, &rep);
    t->stage = rep.stage;
    t->world = rep.world_size;
    t->model_elems = rep.padded_param_count;
    const int64_t persist = zero_engine_params(eng)->persistence_threshold_elems;
    for (int u = 0; u < zero_engine_unit_count(eng); u++) {
        const int64_t P = (int64_t)zero_engine_unit_padded_count(eng, u);
        if ((int64_t)zero_engine_unit_param_count(eng, u) > persist && P > t->max_gather)
            t->max_gather = P;
    }
    zero_engine_get_tuning(eng, &t->start);
    t->base = t->start;
}

/* The setting trial step `pos` runs: 0 the base, 1 the candidate (blocks of base, candidate,
 * candidate, base). */
static int arm(int pos) { return ((pos + 1) >> 1) & 1; }

int zero__online_tune_decides_next(const zero_online_tune_t *t) {
    return !t->done && (!t->started || t->pos + 1 == 2 * t->interval);
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

static void settings(char *buf, size_t n, const zero_engine_tuning_t *s) {
    snprintf(buf, n, "reduce_bucket_size %zu, overlap_comm %s, stage3_prefetch_bucket_size %lld",
             s->reduce_bucket_bytes / sizeof(float), s->overlap_comm ? "true" : "false",
             (long long)s->prefetch_bucket_elems);
}

/* The trial's figures, the same on every rank: [0] the median over its blocks of the ratio of
 * the candidate's step time to the base's (a trailing half block: one step each), [1] and [2]
 * the base's and the candidate's median step times. */
static zero_status_t trial_figures(zero_online_tune_t *t, zero_comm_t *comm, double fig[3]) {
    const int n = ZERO_MIN(t->interval, ZERO__ONLINE_STEPS_MAX); /* steps of each setting */
    double ratio[ZERO__ONLINE_STEPS_MAX];
    int blocks = 0;
    for (int i = 0; i < n; i += 2) { /* block i/2 holds steps i and i+1 of each setting */
        double b = t->times[0][i], c = t->times[1][i];
        if (i + 1 < n) b += t->times[0][i + 1], c += t->times[1][i + 1];
        ratio[blocks++] = b > 0 ? c / b : 1.0;
    }
    fig[0] = zero__train_median(ratio, (size_t)blocks);
    fig[1] = zero__train_median(t->times[0], (size_t)n);
    fig[2] = zero__train_median(t->times[1], (size_t)n);
    if (comm && t->world > 1) {
        /* rank-order sum: the same bits, so the same decision, on every rank */
        zero_status_t st = zero_comm_all_reduce(fig, fig, 3, ZERO_DTYPE_FP64, ZERO_OP_SUM, comm);
        if (st) return st;
        for (int k = 0; k < 3; k++) fig[k] /= t->world;
    }
    return ZERO_OK;
}

/* Every candidate of the base lost: set the base against the start in one more trial, or stop
 * when they are the same. */
static void settle(zero_online_tune_t *t, int step, FILE *out) {
    char s[160];
    settings(s, sizeof s, &t->base);
    if (same(&t->base, &t->start)) {
        t->done = 1;
        if (out) fprintf(out, "tune-online: step %d: settled on the start settings: %s\n", step, s);
        return;
    }
    t->verify = 1;
    t->cand = t->start;
    if (out)
        fprintf(out, "tune-online: step %d: settled on %s; checking it against the start\n", step,
                s);
}

/* The verification trial's end: the start settings come back unless the settled ones beat
 * them. */
static void end_verify(zero_online_tune_t *t, int step, const double fig[3], FILE *out) {
    t->done = 1;
    const int restore = fig[0] < 1.0;
    if (out)
        fprintf(out,
                "tune-online: step %d: settled %.4g s/step, start %.4g s/step (median ratio "
                "start/settled %.3f over %d blocks): %s\n",
                step, fig[1], fig[2], fig[0], (t->interval + 1) / 2,
                restore ? "the start settings restored" : "the settled ones kept");
    if (restore) t->base = t->start;
}

/* A trial's end: keep or undo its candidate, then propose the next or settle. */
static void decide(zero_online_tune_t *t, int step, const double fig[3], FILE *out) {
    const int kept = fig[0] < 1.0 - KEEP_GAIN;
    char what[128];
    describe(what, sizeof what, &t->base, &t->cand);
    if (out)
        fprintf(out,
                "tune-online: step %d: %s: %.4g s -> %.4g s/step (median ratio %.3f over %d "
                "blocks), %s\n",
                step, what, fig[1], fig[2], fig[0], (t->interval + 1) / 2,
                kept ? "kept" : "undone");
    if (kept) {
        t->prev = t->base;
        t->has_prev = 1;
        t->base = t->cand;
        t->losses = 0;
    } else {
        t->losses++;
    }
    if (t->losses >= applicable(t, &t->base) || !propose(t)) settle(t, step, out);
}

zero_status_t zero__online_tune_step(zero_online_tune_t *t, zero_engine_t *eng, zero_comm_t *comm,
                                     int step, double step_s, FILE *out) {
    if (t->done) return ZERO_OK;
    if (!t->started) { /* the first step ran the base: the first trial's step 0 */
        t->started = 1;
        if (!propose(t)) {
            t->done = 1;
            if (out)
                fprintf(out, "tune-online: step %d: nothing to tune (stage %d, %d rank%s)\n", step,
                        t->stage, t->world, t->world == 1 ? "" : "s");
            return ZERO_OK;
        }
    }
    const int ran = arm(t->pos);
    /* the k-th step of its setting in this trial */
    const int k = (t->pos / 4) * 2 + (t->pos % 4 == (ran ? 2 : 3));
    if (k < ZERO__ONLINE_STEPS_MAX) t->times[ran][k] = step_s;
    if (++t->pos < 2 * t->interval) /* the next step's setting */
        return arm(t->pos) == ran ? ZERO_OK
                                  : zero_engine_retune(eng, arm(t->pos) ? &t->cand : &t->base);
    t->pos = 0;
    double fig[3];
    zero_status_t st = trial_figures(t, comm, fig);
    if (st) return st;
    if (t->verify)
        end_verify(t, step, fig, out);
    else
        decide(t, step, fig, out);
    if (out) fflush(out);
    /* the next trial starts on the base (a no-op when the last step ran it) */
    return zero_engine_retune(eng, &t->base);
}
