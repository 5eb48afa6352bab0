/* test_engine.c — the engine of src/zero/ on one rank (moved here from tests/model).
 *
 * Oracles: a naive double-precision AdamW written here (gradient averaging over micro-steps,
 * global-norm clipping, bias correction, decoupled decay skipped for NO_DECAY tensors), the
 * closed-form learning-rate schedules, and the statistics of the initialisation. Also: layout
 * (16-element tensor offsets), memory categories, skipped steps on non-finite gradients, the
 * ZERO_ERR_UNSUPPORTED / ZERO_ERR_CONFIG answers, DeepSpeed scheduler names and warm-up types.
 */
#include "check.h"
#include "zero/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_unsupported(void) {
    zero_engine_params_t p = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    p.stage = 5;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG && !eng && strstr(zero_last_error(), "5"),
          "stage 5: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.reduce_bucket_bytes = 0;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "reduce_bucket_size"),
          "bucket 0: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.compute_dtype = ZERO_DTYPE_INT8;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "int8"),
          "int8: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.compute_dtype = ZERO_DTYPE_BF16;
    p.grad_accum_dtype = ZERO_DTYPE_FP16;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "grad_accum_dtype fp16"),
          "bf16 with fp16 accumulation: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.grad_accum_dtype = ZERO_DTYPE_BF16;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG, "fp32 with bf16 accumulation");
    p = zero_engine_params_default();
    p.compute_dtype = ZERO_DTYPE_FP16;
    p.loss_scaler.hysteresis = 0;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "hysteresis"),
          "fp16 hysteresis 0: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.lr = -1.0f;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "-1"),
          "negative lr: '%s'", zero_last_error());
    p = zero_engine_params_default();
    p.beta2 = 1.0f;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG, "beta2 = 1");
}

static void test_schedule(void) {
    const double pi = 3.141592653589793;
    for (int s = 0; s < ZERO_LR_SCHEDULE_COUNT; s++) {
        zero_engine_params_t p = zero_engine_params_default();
        p.lr = 1.0f;
        p.min_lr = 0.1f;
        p.warmup_steps = 10;
        p.total_steps = 110;
        p.schedule = (zero_lr_schedule_t)s;
        zero_engine_t *eng;
        CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init");
        int bad = 0;
        for (int step = 0; step < 130; step++) {
            double want;
            if (step < 10)
                want = (step + 1) / 10.0;
            else if (s == ZERO_LR_CONSTANT)
                want = 1.0;
            else {
                double f = (step - 10) / 100.0;
                if (f > 1) f = 1;
                double k = s == ZERO_LR_COSINE ? 0.5 * (1 + cos(pi * f)) : 1 - f;
                want = 0.1 + 0.9 * k;
            }
            double got = zero_engine_lr_at(eng, step);
            if (fabs(got - want) > 1e-6) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s step %d: lr %.7f, expected %.7f\n",
                            zero_lr_schedule_name(p.schedule), step, got, want);
            }
        }
        CHECK(bad == 0, "schedule %s: %d wrong learning rates", zero_lr_schedule_name(p.schedule),
              bad);
        zero_engine_free(eng);
    }
    zero_lr_schedule_t sc;
    CHECK(zero_lr_schedule_parse("linear", &sc) == ZERO_OK && sc == ZERO_LR_LINEAR, "parse");
    CHECK(zero_lr_schedule_parse("WarmupLR", &sc) == ZERO_OK && sc == ZERO_LR_CONSTANT, "WarmupLR");
    CHECK(zero_lr_schedule_parse("WarmupDecayLR", &sc) == ZERO_OK && sc == ZERO_LR_LINEAR,
          "WarmupDecayLR");
    CHECK(zero_lr_schedule_parse("WarmupCosineLR", &sc) == ZERO_OK && sc == ZERO_LR_COSINE,
          "WarmupCosineLR");
    /* DeepSpeed's log warm-up from warmup_min_lr: min + (max - min) * log(step + 1) / log(W). */
    zero_engine_params_t p = zero_engine_params_default();
    p.lr = 1.0f;
    p.warmup_min_lr = 0.2f;
    p.warmup_steps = 10;
    p.warmup_type = ZERO_WARMUP_LOG;
    p.schedule = ZERO_LR_CONSTANT;
    zero_engine_t *eng;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init log warm-up");
    int bad = 0;
    for (int step = 0; step < 12; step++) {
        double want = step < 10 ? 0.2 + 0.8 * log(step + 1.0) / log(10.0) : 1.0;
        bad += fabs(zero_engine_lr_at(eng, step) - want) > 1e-6;
    }
    CHECK(bad == 0, "log warm-up: %d wrong learning rates", bad);
    zero_engine_free(eng);
    CHECK(zero_lr_schedule_parse("exp", &sc) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "exp"),
          "parse exp");
}

static void test_layout_and_init(void) {
    zero_engine_t *eng, *eng2;
    zero_engine_params_t p = zero_engine_params_default();
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK && zero_engine_init(&eng2, &p) == ZERO_OK, "init");
    zero_tensor_desc_t t[3] = {
        {"w", 2, {100, 50}, 0, ZERO_INIT_NORMAL, 0.5f},
        {"b", 1, {7}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0},
        {"g", 1, {9}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ONES, 0},
    };
    int u = -1;
    CHECK(zero_engine_add_unit(eng, "unit", t, 3, &u) == ZERO_OK && u == 0, "add unit");
    CHECK(zero_engine_add_unit(eng2, "unit", t, 3, NULL) == ZERO_OK, "add unit 2");
    CHECK(zero_engine_tensor_offset(eng, 0, 1) == 5008 &&
              zero_engine_tensor_offset(eng, 0, 2) == 5024,
          "offsets %zu %zu", zero_engine_tensor_offset(eng, 0, 1),
          zero_engine_tensor_offset(eng, 0, 2));
    CHECK(zero_engine_param_count(eng) == 5016, "param count %zu", zero_engine_param_count(eng));
    float buf[5040], buf2[5040];
    zero_engine_params_read(eng, 0, 0, 5033, buf);
    zero_engine_params_read(eng2, 0, 0, 5033, buf2);
    CHECK(!memcmp(buf, buf2, 5033 * sizeof(float)), "same seed, different initial weights");
    double m = 0, v = 0;
    for (int i = 0; i < 5000; i++) m += buf[i];
    m /= 5000;
    for (int i = 0; i < 5000; i++) v += (buf[i] - m) * (buf[i] - m);
    double sd = sqrt(v / 5000);
    CHECK(fabs(m) < 0.03 && fabs(sd - 0.5) < 0.03, "normal init mean %.4f std %.4f (want 0, 0.5)",
          m, sd);
    int ok = 1;
    for (int i = 0; i < 7; i++) ok &= buf[5008 + i] == 0.0f;
    for (int i = 0; i < 9; i++) ok &= buf[5024 + i] == 1.0f;
    CHECK(ok, "zeros/ones init");
    zero_mem_stats_t ms;
    zero_mem_get_stats(zero_engine_mem(eng), &ms);
    /* One rank, stage 0, one micro-step: params, grads (the model's buffer, which is also the
     * fp32 accumulator), m and v. */
    size_t bytes = 5040 * sizeof(float);
    CHECK(ms.live_bytes[ZERO_MEM_PARAMS] == bytes && ms.live_bytes[ZERO_MEM_GRADS] == bytes &&
              ms.live_bytes[ZERO_MEM_OPTIM] == 2 * bytes,
          "memory by category: params %zu grads %zu optim %zu (want %zu, %zu, %zu)",
          ms.live_bytes[ZERO_MEM_PARAMS], ms.live_bytes[ZERO_MEM_GRADS],
          ms.live_bytes[ZERO_MEM_OPTIM], bytes, bytes, 2 * bytes);
    zero_tensor_desc_t dup[2] = {t[1], t[1]};
    CHECK(zero_engine_add_unit(eng, "dup", dup, 2, NULL) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "'b' twice"),
          "duplicate names: '%s'", zero_last_error());
    CHECK(zero_unit_fetch(eng, 5) == NULL && strstr(zero_last_error(), "unit 5"), "bad unit");
    zero_engine_free(eng);
    zero_engine_free(eng2);
}

/* Naive AdamW over two tensors with micro-step averaging and clipping. */
/* acc: the declared gradient_accumulation_steps (the step divides by it); the model adds two
 * draws per step, in `cycles` (1 or 2) zero_unit_grads / grads_done pairs; idle_step: a step
 * whose unit gets no gradient at all (-1: none). One rank at stages 0-1 with acc 1 keeps one
 * gradient buffer (engine.h), and a second pair in a step makes it allocate a second one. */
static void test_adamw(int stage, int64_t persistence, int acc, int cycles, int idle_step) {
    enum { N0 = 37, N1 = 5, DRAWS = 2, STEPS = 4 };
    const int ACC = acc;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = stage;
    p.persistence_threshold_elems = persistence;
    p.lr = 0.01f;
    p.min_lr = 0.001f;
    p.warmup_steps = 1;
    p.total_steps = 4;
    p.weight_decay = 0.2f;
    p.grad_clip = 0.5f;
    p.grad_accum_steps = ACC;
    p.threads = 2;
    zero_engine_t *eng;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init");
    zero_tensor_desc_t t[2] = {{"w", 1, {N0}, 0, ZERO_INIT_NORMAL, 1.0f},
                               {"b", 1, {N1}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_NORMAL, 1.0f}};
    zero_engine_add_unit(eng, "u", t, 2, NULL);
    size_t off[2] = {0, zero_engine_tensor_offset(eng, 0, 1)};
    int n[2] = {N0, N1};
    double w[2][N0], m[2][N0], v[2][N0];
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    for (int k = 0; k < 2; k++) {
        float tmp[N0];
        zero_engine_params_read(eng, 0, off[k], (size_t)n[k], tmp);
        for (int i = 0; i < n[k]; i++) w[k][i] = tmp[i];
    }
    unsigned seed = 7;
    int clipped_any = 0;
    for (int step = 0; step < STEPS; step++) {
        double gsum[2][N0];
        memset(gsum, 0, sizeof gsum);
        for (int c = 0; c < cycles && step != idle_step; c++) {
            float *g = zero_unit_grads(eng, 0);
            for (int a = 0; a < DRAWS / cycles; a++)
                for (int k = 0; k < 2; k++)
                    for (int i = 0; i < n[k]; i++) {
                        seed = seed * 1103515245u + 12345u;
                        float gv = (float)((int)(seed >> 16 & 0x7fff) - 16384) / 16384.0f *
                                   (step == 2 ? 0.01f : 1.0f);
                        g[off[k] + i] += gv;
                        gsum[k][i] += gv;
                    }
            zero_unit_grads_done(eng, 0);
        }
        zero_step_stats_t st;
        CHECK(zero_engine_step(eng, &st) == ZERO_OK, "step");
        double sq = 0;
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < n[k]; i++) sq += (gsum[k][i] / ACC) * (gsum[k][i] / ACC);
        double norm = sqrt(sq), scale = norm > 0.5 ? 0.5 / norm : 1.0;
        clipped_any |= st.clipped;
        CHECK(fabs(st.grad_norm - norm) <= 1e-6 * norm, "step %d norm %.9g, want %.9g", step,
              st.grad_norm, norm);
        CHECK(st.clipped == (norm > 0.5), "step %d clipped flag", step);
        double lr = zero_engine_lr_at(eng, step);
        CHECK(fabs(st.lr - lr) < 1e-9, "stats lr");
        int t1 = step + 1;
        for (int k = 0; k < 2; k++) {
            double wd = k == 0 ? 0.2 : 0.0;
            for (int i = 0; i < n[k]; i++) {
                double gi = gsum[k][i] / ACC * scale;
                m[k][i] = 0.9 * m[k][i] + 0.1 * gi;
                v[k][i] = 0.95 * v[k][i] + 0.05 * gi * gi;
                double mh = m[k][i] / (1 - pow(0.9, t1)), vh = v[k][i] / (1 - pow(0.95, t1));
                w[k][i] -= lr * (mh / (sqrt(vh) + 1e-8) + wd * w[k][i]);
            }
        }
        int bad = 0;
        for (int k = 0; k < 2; k++) {
            float tmp[N0];
            zero_engine_params_read(eng, 0, off[k], (size_t)n[k], tmp);
            for (int i = 0; i < n[k]; i++)
                if (fabs(tmp[i] - w[k][i]) > 1e-5 * (1 + fabs(w[k][i]))) bad++;
        }
        CHECK(bad == 0, "step %d: %d weights differ from the naive AdamW", step, bad);
        float after[N0 + 16];
        zero_engine_grads_read(eng, 0, 0, off[1] + N1, after);
        int nz = 0;
        for (size_t i = 0; i < off[1] + N1; i++) nz += after[i] != 0.0f;
        CHECK(nz == 0, "gradients not zeroed after the step");
        /* gradient buffers: the working one, and the accumulator unless it is the same one;
         * a second micro-step in a step of one declared micro-step adds it for good */
        const size_t bytes = (size_t)zero_engine_tensor_offset(eng, 0, 1) + 16;
        const int one = stage <= 1 && acc == 1;
        zero_mem_stats_t ms;
        zero_mem_get_stats(zero_engine_mem(eng), &ms);
        const size_t want = stage >= 2           ? 0
                            : one && cycles == 1 ? bytes * sizeof(float)
                                                 : 2 * bytes * sizeof(float);
        if (stage <= 1)
            CHECK(ms.live_bytes[ZERO_MEM_GRADS] == want,
                  "stage %d accum %d, %d micro-steps: %zu gradient bytes, want %zu", stage, acc,
                  cycles, ms.live_bytes[ZERO_MEM_GRADS], want);
    }
    CHECK(clipped_any, "the test never exercised clipping");

    /* A non-finite gradient skips the step and leaves the weights alone. */
    float before[N0], now[N0];
    zero_engine_params_read(eng, 0, 0, N0, before);
    ((float *)zero_unit_grads(eng, 0))[3] = NAN;
    zero_step_stats_t st;
    CHECK(zero_engine_step(eng, &st) == ZERO_OK && st.skipped && st.grad_norm == -1.0,
          "non-finite gradient: skipped %d norm %g", st.skipped, st.grad_norm);
    zero_engine_params_read(eng, 0, 0, N0, now);
    CHECK(!memcmp(before, now, sizeof now), "weights changed on a skipped step");
    CHECK(((float *)zero_unit_grads(eng, 0))[3] == 0.0f,
          "gradient not cleared after a skipped step");
    zero_engine_free(eng);
}

int main(void) {
    test_unsupported();
    test_schedule();
    test_layout_and_init();
    for (int stage = 0; stage <= 3; stage++) {
        test_adamw(stage, 100000, 2, 1, -1);
        test_adamw(stage, 100000, 1, 1, 1); /* stages 0-1: one gradient buffer */
        test_adamw(stage, 100000, 1, 2, 1); /* and a second one on demand */
    }
    test_adamw(3, 0, 2, 1, -1); /* stage 3 with a non-persistent unit */
    return check_report();
}
