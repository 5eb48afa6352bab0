/* test_step_fused.c — the engine's one-rank step and accumulation paths with real micro-steps:
 * the gradient buffers trading places with a zero accumulator, a 16-bit gradient left pending in
 * its working buffer, the one-pass accumulation (widening a 16-bit gradient) that zeroes the
 * working buffer, the fused optimizer pass and the overflow check that is the sum of squares.
 *
 * Every stage, fp32 / bf16 / fp16 compute, fp32 or 16-bit accumulators, one or three micro-steps
 * per step, a -0 in the first micro-step's gradient. Oracles written here: a naive double AdamW
 * (averaging, unscaling, clipping, bias correction, no decay for NO_DECAY) fed with the exact
 * micro-step sums (a 16-bit accumulator: its RNE rounding after each add, emulated with core's
 * scalar conversion); the parameters equal to the master rounded by core's scalar RNE, bit for
 * bit; the engine's contract that every zero_unit_grads buffer is zero-filled; the gradients
 * (zero_engine_grads_read) equal to the micro-step sums before the step and zero after it;
 * padding stays zero; an inf or NaN in the first micro-step (the swap / pending path) or the
 * last (the add path) skips the step and changes nothing.
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "zero/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 5, NU = 2, BAD_STEP = 2 };
static const size_t tcount[NU][2] = {{37, 5}, {40000, 0}}; /* unit 1: crosses the thread cut */

static size_t esize(zero_dtype_t dt) { return dt == ZERO_DTYPE_FP32 ? 4 : 2; }
static float load(const void *x, size_t i, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return ((const float *)x)[i];
    uint16_t h = ((const uint16_t *)x)[i];
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(h) : zero_fp16_to_fp32(h);
}
static void store(void *x, size_t i, zero_dtype_t dt, float f) {
    if (dt == ZERO_DTYPE_FP32)
        ((float *)x)[i] = f;
    else
        ((uint16_t *)x)[i] = dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(f) : zero_fp32_to_fp16(f);
}
static float round_to(float f, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return f;
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(zero_fp32_to_bf16(f))
                                 : zero_fp16_to_fp32(zero_fp32_to_fp16(f));
}

/* Micro-step gradient k / 256, |k| < 256: exact in every dtype (times a power-of-two scale). */
static float grad_of(int s, int a, int u, size_t i) {
    uint32_t h = (uint32_t)(s * 7919 + a * 104729 + u * 15485863) ^ (uint32_t)(i * 2654435761u);
    h ^= h >> 15;
    h *= 0x2c1b3c6dU;
    h ^= h >> 12;
    int k = (int)(h % 511) - 255;
    if (a == 0 && i % 13 == 0) return -0.0f; /* lands in the accumulator as -0 when swapped */
    return (float)k / 256.0f;
}

typedef struct cfg {
    int stage;
    zero_dtype_t dt, adt;
    int acc_steps; /* micro-steps per step */
    int bad_micro; /* micro-step of BAD_STEP that carries an inf/NaN */
    int bad_nan;
} cfg_t;

static void run(const cfg_t *c) {
    char what[128];
    snprintf(what, sizeof what, "stage %d %s acc %s x%d bad micro %d %s", c->stage,
             c->dt == ZERO_DTYPE_FP32   ? "fp32"
             : c->dt == ZERO_DTYPE_BF16 ? "bf16"
                                        : "fp16",
             c->adt == ZERO_DTYPE_FP32 ? "fp32" : "16-bit", c->acc_steps, c->bad_micro,
             c->bad_nan ? "NaN" : "inf");
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = c->stage;
    p.compute_dtype = c->dt;
    p.grad_accum_dtype = c->adt;
    p.lr = 0.01f;
    p.min_lr = 0.001f;
    p.warmup_steps = 1;
    p.total_steps = STEPS;
    p.weight_decay = 0.2f;
    p.grad_clip = 3.0f;
    p.grad_accum_steps = c->acc_steps;
    p.threads = 2;
    zero_engine_t *eng;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "%s: init", what);
    zero_tensor_desc_t t0[2] = {{"w", 1, {37}, 0, ZERO_INIT_NORMAL, 1.0f},
                                {"b", 1, {5}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_NORMAL, 1.0f}};
    zero_tensor_desc_t t1[1] = {{"big", 2, {200, 200}, 0, ZERO_INIT_NORMAL, 0.1f}};
    CHECK(zero_engine_add_unit(eng, "small", t0, 2, NULL) == ZERO_OK, "%s: unit", what);
    CHECK(zero_engine_add_unit(eng, "big", t1, 1, NULL) == ZERO_OK, "%s: unit", what);
    size_t P[NU], off[NU][2];
    double *w[NU], *m[NU], *v[NU];
    float *acc[NU];
    for (int u = 0; u < NU; u++) {
        P[u] = zero_engine_unit_padded_count(eng, u);
        off[u][0] = 0;
        off[u][1] = zero_engine_tensor_count(eng, u) > 1 ? zero_engine_tensor_offset(eng, u, 1) : 0;
        w[u] = calloc(P[u], sizeof(double));
        m[u] = calloc(P[u], sizeof(double));
        v[u] = calloc(P[u], sizeof(double));
        acc[u] = calloc(P[u], sizeof(float));
        float *tmp = malloc(P[u] * sizeof(float));
        zero_engine_state_read(eng, u, ZERO_ENGINE_STATE_MASTER, 0, P[u], tmp);
        for (size_t i = 0; i < P[u]; i++) w[u][i] = tmp[i];
        free(tmp);
    }
    int64_t tstep = 0;
    for (int s = 0; s < STEPS; s++) {
        const float scale = zero_engine_loss_scale(eng);
        const int bad = s == BAD_STEP;
        int zero_filled = 1;
        for (int u = 0; u < NU; u++) memset(acc[u], 0, P[u] * sizeof(float));
        for (int a = 0; a < c->acc_steps; a++)
            for (int u = 0; u < NU; u++) {
                unsigned char *g = zero_unit_grads(eng, u);
                for (size_t i = 0; i < P[u] * esize(c->dt); i++) zero_filled &= g[i] == 0;
                for (int k = 0; k < 2; k++)
                    for (size_t i = 0; i < tcount[u][k]; i++) {
                        float gv = grad_of(s, a, u, i + 1000 * (size_t)k);
                        store(g, off[u][k] + i, c->dt, gv * scale);
                        /* the accumulator's sums: exact in fp32; 16-bit: rounded per add */
                        float sum = acc[u][off[u][k] + i] + load(g, off[u][k] + i, c->dt);
                        acc[u][off[u][k] + i] = round_to(sum, c->adt);
                    }
                if (bad && a == c->bad_micro && u == 1)
                    store(g, 4321, c->dt, c->bad_nan ? NAN : INFINITY);
                CHECK(zero_unit_grads_done(eng, u) == ZERO_OK, "%s: grads_done", what);
            }
        CHECK(zero_filled, "%s step %d: a gradient buffer was not zero-filled", what, s);
        for (int u = 0; u < NU && !bad; u++) { /* the accumulated sums, before the step */
            float *gr = malloc(P[u] * sizeof(float));
            zero_engine_grads_read(eng, u, 0, P[u], gr);
            size_t differ = 0;
            for (size_t i = 0; i < P[u]; i++) differ += gr[i] != acc[u][i];
            CHECK(differ == 0, "%s step %d unit %d: %zu accumulated gradients differ", what, s, u,
                  differ);
            free(gr);
        }
        zero_step_stats_t st;
        CHECK(zero_engine_step(eng, &st) == ZERO_OK, "%s: step", what);
        if (bad) {
            CHECK(st.skipped, "%s: an inf/NaN gradient did not skip the step", what);
        } else {
            CHECK(!st.skipped, "%s step %d: skipped", what, s);
            double sq = 0;
            const double avg = 1.0 / c->acc_steps / scale;
            for (int u = 0; u < NU; u++)
                for (size_t i = 0; i < P[u]; i++) sq += (acc[u][i] * avg) * (acc[u][i] * avg);
            const double norm = sqrt(sq), clip = norm > 3.0 ? 3.0 / norm : 1.0;
            CHECK(fabs(st.grad_norm - norm) <= 1e-6 * norm, "%s step %d: norm %.9g, want %.9g",
                  what, s, st.grad_norm, norm);
            const double lr = zero_engine_lr_at(eng, tstep);
            const int tt = (int)++tstep;
            for (int u = 0; u < NU; u++)
                for (int k = 0; k < 2; k++) {
                    const double wd = (u == 0 && k == 1) ? 0.0 : 0.2;
                    for (size_t i = off[u][k]; i < off[u][k] + tcount[u][k]; i++) {
                        double gi = acc[u][i] * avg * clip;
                        m[u][i] = 0.9 * m[u][i] + 0.1 * gi;
                        v[u][i] = 0.95 * v[u][i] + 0.05 * gi * gi;
                        double mh = m[u][i] / (1 - pow(0.9, tt));
                        double vh = v[u][i] / (1 - pow(0.95, tt));
                        w[u][i] -= lr * (mh / (sqrt(vh) + 1e-8) + wd * w[u][i]);
                    }
                }
        }
        CHECK(zero_engine_step_count(eng) == tstep, "%s: step count", what);
        for (int u = 0; u < NU; u++) {
            float *mw = malloc(P[u] * sizeof(float)), *pw = malloc(P[u] * sizeof(float));
            float *gr = malloc(P[u] * sizeof(float));
            zero_engine_state_read(eng, u, ZERO_ENGINE_STATE_MASTER, 0, P[u], mw);
            const size_t used =
                off[u][1] + tcount[u][1] > tcount[u][0] ? off[u][1] + tcount[u][1] : tcount[u][0];
            zero_engine_params_read(eng, u, 0, used, pw);
            zero_engine_grads_read(eng, u, 0, P[u], gr);
            size_t far = 0, unrounded = 0, pad = 0, grads = 0;
            for (size_t i = 0; i < P[u]; i++) {
                far += !(fabs(mw[i] - w[u][i]) <= 1e-5 * (1 + fabs(w[u][i])));
                if (i < used) unrounded += memcmp(&pw[i], &(float){round_to(mw[i], c->dt)}, 4);
                int in_tensor =
                    i < tcount[u][0] || (i >= off[u][1] && i < off[u][1] + tcount[u][1]);
                if (!in_tensor) pad += mw[i] != 0.0f || (i < used && pw[i] != 0.0f);
                grads += gr[i] != 0.0f;
            }
            CHECK(far == 0, "%s step %d unit %d: %zu masters differ from the naive AdamW", what, s,
                  u, far);
            CHECK(unrounded == 0, "%s step %d unit %d: %zu params are not the rounded master", what,
                  s, u, unrounded);
            CHECK(pad == 0, "%s step %d unit %d: %zu padding elements not zero", what, s, u, pad);
            CHECK(grads == 0, "%s step %d unit %d: %zu gradients not zero after the step", what, s,
                  u, grads);
            free(mw), free(pw), free(gr);
        }
    }
    for (int u = 0; u < NU; u++) free(w[u]), free(m[u]), free(v[u]), free(acc[u]);
    zero_engine_free(eng);
}

int main(void) {
    const zero_dtype_t dts[3] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    /* one micro-step: the swapped or pending gradient reaches the step; three: it is added to */
    for (int acc = 1; acc <= 3; acc += 2)
        for (int stage = 0; stage <= 3; stage++)
            for (int d = 0; d < 3; d++)
                for (int lowacc = 0; lowacc <= (dts[d] == ZERO_DTYPE_BF16); lowacc++) {
                    cfg_t c = {stage,
                               dts[d],
                               lowacc ? dts[d] : ZERO_DTYPE_FP32,
                               acc,
                               (stage + d) % 2 ? 0 : acc - 1,
                               (stage + lowacc) % 2};
                    run(&c);
                }
    return check_report();
}
