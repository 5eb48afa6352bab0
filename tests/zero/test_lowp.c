/* test_lowp.c — the engine with bf16 / fp16 compute on a toy model of this test's own (three
 * units; the gradient of each element is a function of its fetched 16-bit value, so a wrong
 * gather shows), on the threads backend.
 *
 * Oracles: (1) stage equivalence: for bf16 and fp16, fp32 and 16-bit accumulation, world sizes
 * {1, 2, 4} and accumulation {1, 3}, the fp32 master fingerprint after a few steps is bitwise
 * identical across stages 0-3; (2) the fetched parameters are the master rounded to the compute
 * dtype (RNE, widened here one element at a time with the scalar conversions); (3) memory: each
 * rank's params / grads / optimizer bytes equal this test's formula of the padded layout (written
 * from the tensor shapes), and at stage 3 with 4 ranks, bf16 and bf16 accumulation, the model
 * states are exactly 16 P / 4 bytes (P = padded parameter count computed here); (4) the bytes
 * sent per step equal this test's formula; (5) an inf written into one rank's gradient skips the
 * step on every rank, leaves the master, the parameters and the step count bitwise unchanged and
 * moves fp16's loss scale as the hysteresis rules say; a static fp16 scale is honoured; (6) a
 * 15-element case whose first AdamW step is computed here in double from the bf16-rounded
 * gradients (rank-order fp32 sum rounded once, as the comm layer documents).
 */
#include "check.h"
#include "ranks.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define R16(n) (((n) + 15) / 16 * 16)
#define NUNITS 3

/* The toy model: unit 0 = a 1000-element weight and a 7-element bias (NO_DECAY), unit 1 = 300
 * elements, unit 2 = 40 elements of ones (NO_DECAY; persistent at stage 3 when asked). */
static const size_t t_counts[NUNITS][2] = {{1000, 7}, {300, 0}, {40, 0}};

static size_t padded(int u, int N) {
    size_t s = R16(t_counts[u][0]) + R16(t_counts[u][1]), q = 16 * (size_t)N;
    return (s + q - 1) / q * q;
}

typedef struct lp_cfg {
    int stage, ranks, accum, steps;
    zero_dtype_t dtype, acc_dtype;
    int64_t persistence;
    int inject_step, inject_rank; /* write an inf into unit 1's gradient (-1: never) */
    int inject_step2;             /* a second injection (-1: none) */
    double static_scale;          /* fp16: > 0 static loss scale */
    int hysteresis;
    double min_scale; /* fp16: > 0 min_loss_scale */
    int no_raise;     /* fp16: raise_error_at_min_scale = 0 */
    int declared;     /* the engine's grad_accum_steps (0: accum, the micro-steps run) */
} lp_cfg_t;

typedef struct lp_res {
    uint64_t fp;
    zero_engine_report_t rep;
    zero_step_stats_t stats[8];
    float scale_after[8];
    float scale_seen[8]; /* zero_engine_loss_scale() during each step's backward */
    int64_t steps_taken;
    int steps_run;         /* zero_engine_step calls that returned */
    int unchanged_on_skip; /* master and params bitwise equal before/after every skipped step */
    int params_match_master;
    zero_status_t st;
} lp_res_t;

typedef struct lp_arg {
    const lp_cfg_t *cfg;
    lp_res_t *res;
} lp_arg_t;

static float target(int r, int s, int k, int u, size_t i) {
    uint32_t x = (uint32_t)(r * 7919 + s * 104729 + k * 1299709 + u * 15485863) ^ (uint32_t)i;
    x *= 2654435761u;
    x ^= x >> 15;
    return ((float)(x & 0xffff) / 65536.0f - 0.5f) * 2.0f;
}

static float widen1(uint16_t h, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}
static uint16_t narrow1(float x, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(x) : zero_fp32_to_fp16(x);
}

/* Snapshot of what this rank holds: master (state range) and params (param range) as fp32. */
static float *snapshot(zero_engine_t *eng, int stage, size_t *n_out) {
    size_t tot = 0;
    for (int u = 0; u < NUNITS; u++) tot += 2 * zero_engine_unit_padded_count(eng, u);
    float *buf = calloc(tot, sizeof(float)), *p = buf;
    for (int u = 0; u < NUNITS; u++) {
        size_t lo, n;
        zero_engine_state_range(eng, u, ZERO_ENGINE_STATE_MASTER, &lo, &n);
        zero_engine_state_read(eng, u, ZERO_ENGINE_STATE_MASTER, lo, n, p);
        p += n;
        if (stage == 3)
            zero_engine_shard_range(eng, u, &lo, &n);
        else
            lo = 0, n = zero_engine_unit_padded_count(eng, u);
        zero_engine_params_read(eng, u, lo, n, p);
        p += n;
    }
    *n_out = (size_t)(p - buf);
    return buf;
}

static void lp_rank(zero_comm_t *comm, void *argp) {
    lp_arg_t *a = argp;
    const lp_cfg_t *c = a->cfg;
    lp_res_t *res = a->res;
    const int rank = comm ? zero_comm_rank(comm) : 0;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = c->stage;
    p.comm = comm;
    p.compute_dtype = c->dtype;
    p.grad_accum_dtype = c->acc_dtype;
    p.grad_accum_steps = c->declared ? c->declared : c->accum;
    p.lr = 0.01f;
    p.schedule = ZERO_LR_CONSTANT;
    p.grad_clip = 0.5f;
    p.reduce_bucket_bytes = 4096; /* 1024 elements: unit 0 goes direct, the others are packed */
    p.persistence_threshold_elems = c->persistence;
    p.prefetch_bucket_elems = 2048;
    p.loss_scaler.initial_scale_power = 8; /* the toy's gradients are O(1): 2^16 overflows fp16 */
    if (c->static_scale > 0) p.loss_scaler.loss_scale = c->static_scale;
    if (c->hysteresis > 0) p.loss_scaler.hysteresis = c->hysteresis;
    if (c->min_scale > 0) p.loss_scaler.min_loss_scale = c->min_scale;
    if (c->no_raise) p.loss_scaler.raise_error_at_min_scale = 0;
    zero_engine_t *eng = NULL;
    res->st = zero_engine_init(&eng, &p);
    if (res->st) return;
    zero_tensor_desc_t t0[2] = {{"w", 2, {20, 50}, 0, ZERO_INIT_NORMAL, 0.5f},
                                {"b", 1, {7}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0}};
    zero_tensor_desc_t t1 = {"v", 1, {300}, 0, ZERO_INIT_NORMAL, 0.02f};
    zero_tensor_desc_t t2 = {"g", 1, {40}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ONES, 0};
    res->st = zero_engine_add_unit(eng, "u0", t0, 2, NULL);
    if (!res->st) res->st = zero_engine_add_unit(eng, "u1", &t1, 1, NULL);
    if (!res->st) res->st = zero_engine_add_unit(eng, "u2", &t2, 1, NULL);
    res->unchanged_on_skip = 1;
    res->params_match_master = 1;
    for (int s = 0; s < c->steps && !res->st; s++) {
        for (int k = 0; k < c->accum && !res->st; k++) {
            const float ls = zero_engine_loss_scale(eng);
            res->scale_seen[s] = ls;
            for (int u = 0; u < NUNITS; u++) { /* forward */
                if (!zero_unit_fetch(eng, u)) res->st = ZERO_ERR_INTERNAL;
                zero_unit_release(eng, u);
            }
            for (int u = NUNITS - 1; u >= 0 && !res->st; u--) { /* backward */
                const uint16_t *w = zero_unit_fetch(eng, u);
                uint16_t *g = zero_unit_grads(eng, u);
                if (!w || !g) {
                    res->st = ZERO_ERR_INTERNAL;
                    break;
                }
                for (int t = 0; t < 2; t++) {
                    size_t off = t ? R16(t_counts[u][0]) : 0;
                    for (size_t i = 0; i < t_counts[u][t]; i++) {
                        float wi = widen1(w[off + i], c->dtype);
                        float gi = ls * (wi - target(rank, s, k, u, off + i)) * 0.25f;
                        g[off + i] = narrow1(widen1(g[off + i], c->dtype) + gi, c->dtype);
                    }
                }
                if ((s == c->inject_step || s == c->inject_step2) && rank == c->inject_rank &&
                    u == 1 && k == 0)
                    g[5] = narrow1(INFINITY, c->dtype);
                res->st = zero_unit_grads_done(eng, u);
                zero_unit_release(eng, u);
            }
        }
        if (res->st) break;
        size_t n0 = 0, n1 = 0;
        float *before = snapshot(eng, c->stage, &n0);
        int64_t steps_before = zero_engine_step_count(eng);
        res->st = zero_engine_step(eng, &res->stats[s]);
        if (!res->st) res->steps_run++;
        res->scale_after[s] = zero_engine_loss_scale(eng);
        float *after = snapshot(eng, c->stage, &n1);
        if (res->stats[s].skipped && (n0 != n1 || memcmp(before, after, n0 * sizeof(float)) ||
                                      zero_engine_step_count(eng) != steps_before))
            res->unchanged_on_skip = 0;
        free(before);
        free(after);
    }
    /* The parameters are the master rounded: compare where this rank holds the master. */
    for (int u = 0; u < NUNITS && !res->st; u++) {
        size_t lo, n;
        zero_engine_shard_range(eng, u, &lo, &n);
        float *m = malloc(n * sizeof *m), *w = malloc(n * sizeof *w);
        zero_engine_state_read(eng, u, ZERO_ENGINE_STATE_MASTER, lo, n, m);
        zero_engine_params_read(eng, u, lo, n, w);
        for (size_t i = 0; i < n; i++)
            if (widen1(narrow1(m[i], c->dtype), c->dtype) != w[i]) res->params_match_master = 0;
        free(m);
        free(w);
    }
    res->steps_taken = zero_engine_step_count(eng);
    if (!res->st) res->st = zero_engine_fingerprint(eng, &res->fp);
    zero_engine_get_report(eng, &res->rep);
    zero_engine_free(eng);
}

static void run(const lp_cfg_t *c, lp_res_t *res) {
    lp_arg_t args[4];
    void *argv[4];
    for (int r = 0; r < c->ranks; r++) {
        memset(&res[r], 0, sizeof res[r]);
        args[r] = (lp_arg_t){c, &res[r]};
        argv[r] = &args[r];
    }
    if (c->ranks == 1)
        lp_rank(NULL, &args[0]);
    else
        CHECK(run_ranks(c->ranks, 60.0, lp_rank, argv) == ZERO_OK, "clique");
}

static lp_cfg_t cfg_default(int stage, int ranks, int accum, zero_dtype_t dt, zero_dtype_t adt) {
    lp_cfg_t c = {stage, ranks, accum, 3, dt, adt, 100, -1, -1, -1, 0.0, 0, 0.0, 0, 0};
    return c;
}

/* This test's memory and communication formulas (engine.h documents the same ones). */
static void check_theory(const lp_cfg_t *c, const lp_res_t *r) {
    const uint64_t N = (uint64_t)c->ranks, ce = 2, ae = c->acc_dtype == ZERO_DTYPE_FP32 ? 4 : 2;
    uint64_t P = 0, S = 0, Snp = 0, Ppers = 0, Spers = 0, maxdirect = 0;
    for (int u = 0; u < NUNITS; u++) {
        uint64_t Pu = padded(u, c->ranks), Su = Pu / N;
        size_t cnt = t_counts[u][0] + t_counts[u][1];
        int pers = c->stage == 3 && (int64_t)cnt <= c->persistence;
        P += Pu, S += Su;
        if (pers)
            Ppers += Pu, Spers += Su;
        else
            Snp += Su;
        if (u == 0) maxdirect = Pu;
    }
    (void)maxdirect;
    uint64_t want_params = c->stage < 3 ? ce * P : ce * (Snp + Ppers);
    /* stages 0-1, one rank, one micro-step: one buffer (a 16-bit accumulator: the working one;
     * an fp32 one: the step reads the 16-bit gradient where it is, none is allocated) */
    const int one_buffer = c->stage <= 1 && N == 1 && c->accum == 1;
    uint64_t want_grads_kept = c->stage <= 1 ? ce * P + (one_buffer ? 0 : ae * S) : ae * S;
    uint64_t want_optim = c->stage == 0 ? 12 * P : 12 * S;
    for (int k = 0; k < c->ranks; k++) {
        const zero_engine_report_t *rep = &r[k].rep;
        CHECK(rep->memory_bytes[ZERO_MEM_PARAMS] == want_params &&
                  rep->memory_theory_bytes[ZERO_MEM_PARAMS] == want_params,
              "%s stage %d N %d: params %zu theory %zu want %llu", zero_dtype_name(c->dtype),
              c->stage, c->ranks, rep->memory_bytes[ZERO_MEM_PARAMS],
              rep->memory_theory_bytes[ZERO_MEM_PARAMS], (unsigned long long)want_params);
        CHECK(rep->model_state_bytes[1] == want_grads_kept &&
                  rep->model_state_theory_bytes[1] == want_grads_kept &&
                  rep->memory_bytes[ZERO_MEM_GRADS] == rep->memory_theory_bytes[ZERO_MEM_GRADS],
              "%s/%s stage %d N %d: grads kept %zu theory %zu want %llu; grads %zu theory %zu",
              zero_dtype_name(c->dtype), zero_dtype_name(c->acc_dtype), c->stage, c->ranks,
              rep->model_state_bytes[1], rep->model_state_theory_bytes[1],
              (unsigned long long)want_grads_kept, rep->memory_bytes[ZERO_MEM_GRADS],
              rep->memory_theory_bytes[ZERO_MEM_GRADS]);
        CHECK(rep->memory_bytes[ZERO_MEM_OPTIM] == want_optim &&
                  rep->memory_theory_bytes[ZERO_MEM_OPTIM] == want_optim,
              "%s stage %d N %d: optim %zu theory %zu want %llu", zero_dtype_name(c->dtype),
              c->stage, c->ranks, rep->memory_bytes[ZERO_MEM_OPTIM],
              rep->memory_theory_bytes[ZERO_MEM_OPTIM], (unsigned long long)want_optim);
        CHECK(rep->memory_bytes[ZERO_MEM_COMM] == rep->memory_theory_bytes[ZERO_MEM_COMM],
              "%s stage %d N %d: comm buffers %zu theory %zu", zero_dtype_name(c->dtype), c->stage,
              c->ranks, rep->memory_bytes[ZERO_MEM_COMM], rep->memory_theory_bytes[ZERO_MEM_COMM]);
        /* Sent per step: M reduce-scatters of the shard, the step's all-gather, stage 3's two
         * gathers per micro-step of every non-persistent unit, the 32-byte control record. */
        uint64_t M = (uint64_t)c->accum, want = 0;
        if (N > 1) {
            want = (N - 1) * ce * S * M + (N - 1) * 32;
            if (c->stage == 0)
                want += (N - 1) * ae * S;
            else if (c->stage < 3)
                want += (N - 1) * ce * S;
            else
                want += (N - 1) * ce * (2 * M * Snp + Spers);
        }
        CHECK(rep->comm_bytes_per_step == want && rep->comm_theory_bytes_per_step == want,
              "%s stage %d N %d accum %d: sent %llu theory %llu want %llu",
              zero_dtype_name(c->dtype), c->stage, c->ranks, c->accum,
              (unsigned long long)rep->comm_bytes_per_step,
              (unsigned long long)rep->comm_theory_bytes_per_step, (unsigned long long)want);
    }
}

static void test_stage_equivalence(void) {
    const zero_dtype_t dts[2] = {ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    const int worlds[3] = {1, 2, 4}, accums[2] = {1, 3};
    lp_res_t res[4];
    for (int d = 0; d < 2; d++)
        for (int ad = 0; ad < 2; ad++) {
            zero_dtype_t adt = ad ? dts[d] : ZERO_DTYPE_FP32;
            for (int wi = 0; wi < 3; wi++)
                for (int ai = 0; ai < 2; ai++) {
                    uint64_t ref = 0;
                    for (int stage = 0; stage <= 3; stage++) {
                        lp_cfg_t c = cfg_default(stage, worlds[wi], accums[ai], dts[d], adt);
                        run(&c, res);
                        for (int r = 0; r < c.ranks; r++) {
                            CHECK(res[r].st == ZERO_OK && res[r].steps_taken == c.steps,
                                  "%s/%s stage %d N %d accum %d rank %d: status %d steps %lld: %s",
                                  zero_dtype_name(c.dtype), zero_dtype_name(adt), stage, c.ranks,
                                  c.accum, r, (int)res[r].st, (long long)res[r].steps_taken,
                                  zero_last_error());
                            CHECK(res[r].params_match_master,
                                  "%s stage %d N %d rank %d: params are not the rounded master",
                                  zero_dtype_name(c.dtype), stage, c.ranks, r);
                        }
                        if (stage == 0) ref = res[0].fp;
                        for (int r = 0; r < c.ranks; r++)
                            CHECK(res[r].fp == ref,
                                  "%s/%s N %d accum %d: stage %d rank %d fingerprint %016llx, "
                                  "stage 0 %016llx",
                                  zero_dtype_name(c.dtype), zero_dtype_name(adt), c.ranks, c.accum,
                                  stage, r, (unsigned long long)res[r].fp, (unsigned long long)ref);
                        if (res[0].st == ZERO_OK) check_theory(&c, res);
                    }
                }
        }
}

/* One rank at stages 0-1 keeps one gradient buffer when one micro-step is declared (engine.h);
 * three micro-steps in such a step allocate the accumulator then: the weights equal stages 2-3's
 * (which always have it) and the gradients count the working buffer plus the accumulator. */
static void test_undeclared_micro_steps(void) {
    lp_res_t res[4];
    uint64_t P = 0;
    for (int u = 0; u < NUNITS; u++) P += padded(u, 1);
    const zero_dtype_t adts[2] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
    for (int a = 0; a < 2; a++) {
        uint64_t ref = 0;
        for (int stage = 0; stage <= 3; stage++) {
            lp_cfg_t c = cfg_default(stage, 1, 3, ZERO_DTYPE_BF16, adts[a]);
            c.declared = 1;
            run(&c, res);
            CHECK(res[0].st == ZERO_OK && res[0].steps_taken == c.steps,
                  "bf16/%s stage %d, 3 micro-steps of 1 declared: status %d steps %lld: %s",
                  zero_dtype_name(adts[a]), stage, (int)res[0].st, (long long)res[0].steps_taken,
                  zero_last_error());
            if (stage == 0) ref = res[0].fp;
            CHECK(res[0].fp == ref,
                  "bf16/%s 3 micro-steps of 1 declared: stage %d %016llx, "
                  "stage 0 %016llx",
                  zero_dtype_name(adts[a]), stage, (unsigned long long)res[0].fp,
                  (unsigned long long)ref);
            const uint64_t want = 2 * P + zero_dtype_size(adts[a]) * P;
            if (stage <= 1)
                CHECK(res[0].rep.memory_bytes[ZERO_MEM_GRADS] == want,
                      "bf16/%s stage %d, 3 micro-steps of 1 declared: gradients %zu bytes, want "
                      "%llu",
                      zero_dtype_name(adts[a]), stage, res[0].rep.memory_bytes[ZERO_MEM_GRADS],
                      (unsigned long long)want);
        }
    }
}

/* (5) An inf in rank 1's gradient of unit 1 at steps 1 and 2 of four, 2 ranks, every stage.
 * fp16 with the default hysteresis 2 from 2^8: step 1 skips and keeps 256 (one unit of
 * hysteresis spent), step 2 skips and halves to 128, steps 0 and 3 update. bf16: skips, scale 1.
 * On every rank: the skipped steps leave master, params and step count bitwise unchanged
 * (compared inside lp_rank), two steps are taken, and the weights agree across stages. */
static void test_overflow(zero_dtype_t dt) {
    uint64_t ref = 0;
    lp_res_t res[4];
    for (int stage = 0; stage <= 3; stage++) {
        lp_cfg_t c = cfg_default(stage, 2, 2, dt, ZERO_DTYPE_FP32);
        c.steps = 4;
        c.inject_step = 1;
        c.inject_step2 = 2;
        c.inject_rank = 1;
        run(&c, res);
        const float s0 = dt == ZERO_DTYPE_FP16 ? 256.0f : 1.0f;
        const float s3 = dt == ZERO_DTYPE_FP16 ? 128.0f : 1.0f;
        for (int r = 0; r < 2; r++) {
            const lp_res_t *x = &res[r];
            CHECK(x->st == ZERO_OK && x->steps_run == 4 && x->steps_taken == 2,
                  "%s stage %d rank %d: status %d, %d steps run, %lld taken (want 4, 2)",
                  zero_dtype_name(dt), stage, r, (int)x->st, x->steps_run,
                  (long long)x->steps_taken);
            CHECK(!x->stats[0].skipped && x->stats[1].skipped && x->stats[2].skipped &&
                      !x->stats[3].skipped,
                  "%s stage %d rank %d: skipped %d %d %d %d (want 0 1 1 0)", zero_dtype_name(dt),
                  stage, r, x->stats[0].skipped, x->stats[1].skipped, x->stats[2].skipped,
                  x->stats[3].skipped);
            CHECK(x->stats[1].grad_norm == -1.0 && x->stats[1].step == 1 && x->stats[3].step == 2,
                  "%s stage %d rank %d: skipped norm %g, step counts %lld %lld",
                  zero_dtype_name(dt), stage, r, x->stats[1].grad_norm, (long long)x->stats[1].step,
                  (long long)x->stats[3].step);
            CHECK(x->unchanged_on_skip, "%s stage %d rank %d: a skipped step changed the weights",
                  zero_dtype_name(dt), stage, r);
            CHECK(x->stats[0].loss_scale == s0 && x->stats[1].loss_scale == s0 &&
                      x->scale_after[1] == s0 && x->stats[2].loss_scale == s0 &&
                      x->scale_after[2] == s3 && x->stats[3].loss_scale == s3 &&
                      x->scale_seen[3] == s3,
                  "%s stage %d rank %d: scales %g %g->%g %g->%g %g (want %g %g->%g %g->%g %g)",
                  zero_dtype_name(dt), stage, r, (double)x->stats[0].loss_scale,
                  (double)x->stats[1].loss_scale, (double)x->scale_after[1],
                  (double)x->stats[2].loss_scale, (double)x->scale_after[2],
                  (double)x->stats[3].loss_scale, (double)s0, (double)s0, (double)s0, (double)s0,
                  (double)s3, (double)s3);
        }
        if (stage == 0) ref = res[0].fp;
        CHECK(res[0].fp == ref && res[1].fp == ref,
              "%s overflow run: stage %d fingerprints %016llx %016llx, stage 0 %016llx",
              zero_dtype_name(dt), stage, (unsigned long long)res[0].fp,
              (unsigned long long)res[1].fp, (unsigned long long)ref);
    }
}

/* A static fp16 scale: handed to the model at every step, unchanged by an overflow (which still
 * skips), and divided back out: the first step's gradient norm equals that of a scale-1 run. */
static void test_static_scale(void) {
    lp_res_t res[4], one[4];
    lp_cfg_t c = cfg_default(2, 2, 1, ZERO_DTYPE_FP16, ZERO_DTYPE_FP32);
    c.steps = 3;
    c.static_scale = 1.0;
    run(&c, one);
    c.static_scale = 64.0;
    c.inject_step = 1;
    c.inject_rank = 0;
    run(&c, res);
    for (int r = 0; r < 2; r++) {
        const lp_res_t *x = &res[r];
        CHECK(x->st == ZERO_OK && x->scale_seen[0] == 64.0f && x->scale_seen[1] == 64.0f &&
                  x->scale_seen[2] == 64.0f && x->scale_after[2] == 64.0f &&
                  x->stats[1].loss_scale == 64.0f,
              "static 64, rank %d: status %d, scales seen %g %g %g, after %g", r, (int)x->st,
              (double)x->scale_seen[0], (double)x->scale_seen[1], (double)x->scale_seen[2],
              (double)x->scale_after[2]);
        CHECK(!x->stats[0].skipped && x->stats[1].skipped && !x->stats[2].skipped &&
                  x->steps_taken == 2,
              "static 64, rank %d: skipped %d %d %d", r, x->stats[0].skipped, x->stats[1].skipped,
              x->stats[2].skipped);
        double a = x->stats[0].grad_norm, b = one[r].stats[0].grad_norm;
        CHECK(fabs(a - b) <= 2e-3 * b, "static 64, rank %d: norm %.6g, scale-1 run %.6g", r, a, b);
    }
}

/* An overflow at the floor: with raise_error_at_min_scale the step fails with ZERO_ERR_CONFIG on
 * every rank (training diverged); without it, it is skipped and the scale stays at the floor. */
static void test_min_scale(void) {
    lp_res_t res[4];
    lp_cfg_t c = cfg_default(1, 2, 1, ZERO_DTYPE_FP16, ZERO_DTYPE_FP32);
    c.steps = 3;
    c.hysteresis = 1;
    c.min_scale = 256.0; /* = the initial 2^8 */
    c.inject_step = 1;
    c.inject_rank = 1;
    run(&c, res);
    for (int r = 0; r < 2; r++)
        CHECK(res[r].st == ZERO_ERR_CONFIG && res[r].steps_run == 1,
              "floor with raise, rank %d: status %d after %d steps (want %d after 1)", r,
              (int)res[r].st, res[r].steps_run, (int)ZERO_ERR_CONFIG);
    c.no_raise = 1;
    run(&c, res);
    for (int r = 0; r < 2; r++)
        CHECK(res[r].st == ZERO_OK && res[r].stats[1].skipped && res[r].scale_after[1] == 256.0f &&
                  res[r].steps_taken == 2 && res[r].unchanged_on_skip,
              "floor without raise, rank %d: status %d skipped %d scale %g", r, (int)res[r].st,
              res[r].stats[1].skipped, (double)res[r].scale_after[1]);
}

/* (6) Two ranks, one 15-element unit (padded to 32), bf16, every stage: rank r adds
 * g_r(i) rounded to bf16; the reduced shard is the bf16 rounding of the fp32 sum g_0 + g_1 (rank
 * order); the step averages it over the ranks (/2, exact), and the first AdamW step (bias
 * corrected: m^ = g, v^ = g^2) gives p' = p - lr (g / (|g| + eps) + wd p), computed here in
 * double. The fetched parameters are then the master rounded to bf16, exactly. */
static float w15(int i) { return 0.05f * (float)(i - 7) + 0.001f; }
static float g15(int r, int i) {
    return (float)(i + 1) * (r == 0 ? 0.51f : -0.27f) + (i % 3 == 0 ? 0.3f * (float)r : 0.0f);
}

static int exact_stage;
static void exact_rank(zero_comm_t *comm, void *argp) {
    int *bad = argp;
    const int rank = zero_comm_rank(comm);
    const float lr = 0.1f, wd = 0.01f;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = exact_stage;
    p.comm = comm;
    p.compute_dtype = ZERO_DTYPE_BF16;
    p.lr = lr;
    p.weight_decay = wd;
    p.grad_clip = 0.0f;
    p.schedule = ZERO_LR_CONSTANT;
    p.persistence_threshold_elems = 0;
    zero_engine_t *eng = NULL;
    if (zero_engine_init(&eng, &p)) {
        *bad = 1000;
        return;
    }
    zero_tensor_desc_t t = {"w", 1, {15}, 0, ZERO_INIT_ZEROS, 0};
    zero_engine_add_unit(eng, "u", &t, 1, NULL);
    size_t lo, S;
    zero_engine_shard_range(eng, 0, &lo, &S);
    float w[32] = {0};
    for (int i = 0; i < 15; i++) w[i] = w15(i);
    if (exact_stage < 3)
        zero_engine_params_write(eng, 0, 0, 15, w);
    else if (lo < 15)
        zero_engine_params_write(eng, 0, lo, 15 - lo, w + lo);
    zero_unit_fetch(eng, 0);
    uint16_t *g = zero_unit_grads(eng, 0);
    for (int i = 0; i < 15; i++) g[i] = zero_fp32_to_bf16(g15(rank, i)); /* 0 + g, rounded */
    zero_unit_grads_done(eng, 0);
    zero_unit_release(eng, 0);
    zero_step_stats_t st;
    if (zero_engine_step(eng, &st) || st.skipped) *bad += 100;
    double sq = 0;
    for (int i = 0; i < 15; i++) {
        float sum = zero_bf16_to_fp32(zero_fp32_to_bf16(g15(0, i))) +
                    zero_bf16_to_fp32(zero_fp32_to_bf16(g15(1, i)));
        double gi = (double)zero_bf16_to_fp32(zero_fp32_to_bf16(sum)) / 2;
        sq += gi * gi;
    }
    if (fabs(st.grad_norm - sqrt(sq)) > 1e-12 * sqrt(sq)) *bad += 10;
    float m[16], par[16];
    zero_engine_state_read(eng, 0, ZERO_ENGINE_STATE_MASTER, lo, S, m);
    zero_engine_params_read(eng, 0, lo, S, par);
    for (size_t k = 0; k < S; k++) {
        int i = (int)(lo + k);
        double want = 0;
        if (i < 15) {
            float sum = zero_bf16_to_fp32(zero_fp32_to_bf16(g15(0, i))) +
                        zero_bf16_to_fp32(zero_fp32_to_bf16(g15(1, i)));
            double gi = (double)zero_bf16_to_fp32(zero_fp32_to_bf16(sum)) / 2, pi = w15(i);
            want = pi - lr * (gi / (fabs(gi) + 1e-8) + wd * pi);
        }
        if (fabs(m[k] - want) > 1e-6) (*bad)++;
        if (par[k] != zero_bf16_to_fp32(zero_fp32_to_bf16(m[k]))) (*bad)++;
    }
    zero_engine_free(eng);
}

static void test_exact_bf16(void) {
    for (exact_stage = 0; exact_stage <= 3; exact_stage++) {
        int bad[2] = {0, 0};
        void *argv[2] = {&bad[0], &bad[1]};
        CHECK(run_ranks(2, 30.0, exact_rank, argv) == ZERO_OK, "clique");
        CHECK(bad[0] == 0 && bad[1] == 0,
              "bf16 exact case, stage %d: %d / %d mismatches (100: step, 10: norm, 1: element)",
              exact_stage, bad[0], bad[1]);
    }
}

int main(void) {
    zero_log_set_level(ZERO_LOG_ERROR);
    test_stage_equivalence();
    test_undeclared_micro_steps();
    test_overflow(ZERO_DTYPE_FP16);
    test_overflow(ZERO_DTYPE_BF16);
    test_static_scale();
    test_min_scale();
    test_exact_bf16();
    return check_report();
}
