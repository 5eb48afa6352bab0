/* test_train_moe_ep.c — expert parallelism (model.moe.ep_size) through the trainer: the MoE-GPT of
 * moe_setup.h on 4 thread ranks.
 *
 * Oracles:
 * (1) expert parallelism only moves tokens and weights, never changes a sum's order: with
 *     gradient clipping at 1, below every step's norm (every step clipped, checked), ep 1, 2 and
 *     4 at stages 0-3 give the ep-1 stage-0 weights fingerprint and its gradient norms bitwise
 *     (the metrics log's 17 digits: the experts' share of the norm is summed exactly, so the
 *     shards each rank holds do not matter), at accumulation 1 and 3 in fp32, in bf16 at stages
 *     0 and 3, and with activation checkpointing (which exchanges the tokens again); the
 *     per-expert token counts of the report are the same global figures at every ep;
 * (2) the expert gradients are not off by a factor of ep (DeepSpeed's bug, twice): the global
 *     gradient norm of every step, from the metrics log, equals ep 1's at ep 2 and 4 without
 *     clipping too (doubling one expert weight's gradient moves it by 5%);
 * (3) all-to-all bytes: every rank's measured bytes per step equal the report's theory, and in a
 *     layout where every token reaches every expert (2 experts, top-2, no dropping, ep 2) both
 *     equal the closed form per micro-step (ep - 1)(E/ep + 1) x 4 + B T C (c + 4) x 2 (counts,
 *     the rows out in the compute dtype and their fp32 outputs back, the same again in
 *     backward), in fp32 and bf16; ep 1 sends none;
 * (4) memory: at stage 1 a rank holds the expert parameters of E / ep experts: ep 4 holds 0.25x
 *     ep 1's bytes (<= 0.3x), each equal to the padded closed form (and ep 4's to the report's
 *     theory); at stage 3 both shard to the same bytes;
 * (5) bad input (ep_size not dividing the experts or the world) fails before training, naming
 *     the key and the value.
 * (6) checkpoints hold the logical expert tensors: 2 steps saved at ep 2 and resumed for 2 more
 *     at ep 4 end on the weights of 4 uninterrupted steps at ep 1, with clipping.
 */
#include "check.h"
#include "moe_setup.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORLD 4
#define STEPS 2
#define CLIP "1" /* gradient_clipping below every step's norm (2.6 and 2.2 here) */

typedef struct run_opts {
    int ep, stage, bf16, checkpointing;
    const char *ga;
    const char *const *extra; /* more key/value pairs, NULL-terminated (may be NULL) */
    const char *clip;         /* gradient_clipping (NULL: 0) */
} run_opts_t;

/* One run on 4 ranks with the options; io may be NULL (silent). */
static zero_status_t run(const run_opts_t *o, const zero_train_io_t *io, zero_train_report_t *rep) {
    char ep[8], stage[8];
    snprintf(ep, sizeof ep, "%d", o->ep);
    snprintf(stage, sizeof stage, "%d", o->stage);
    const char *sets[64] = {"train.ranks",
                            "4",
                            "gradient_clipping",
                            o->clip ? o->clip : "0",
                            "model.moe.ep_size",
                            ep,
                            "zero_optimization.stage",
                            stage,
                            "gradient_accumulation_steps",
                            o->ga ? o->ga : "1",
                            "bf16.enabled",
                            o->bf16 ? "true" : "false",
                            "model.activation_checkpointing",
                            o->checkpointing ? "true" : "false"};
    int n = 14;
    for (int i = 0; o->extra && o->extra[i] && n < 62; i++) sets[n++] = o->extra[i];
    sets[n] = NULL;
    zero_train_io_t quiet = {0};
    return train_io(sets, io ? io : &quiet, rep);
}

/* The grad_norm of each step from a metrics log, and in *clipped (may be NULL) how many steps
 * were clipped. */
static int read_norms(const char *path, double *norms, int max, int *clipped) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    if (clipped) *clipped = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(o, "grad_norm");
        if (cJSON_IsNumber(g)) norms[n++] = g->valuedouble;
        if (clipped && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "clipped"))) (*clipped)++;
        cJSON_Delete(o);
    }
    if (f) fclose(f);
    return n;
}

/* A temporary file's name in path (a template ending in XXXXXX); 0 on failure. */
static int temp_file(char *path) {
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* (1) One fingerprint over ep, stage (and checkpointing) for a dtype and accumulation; the
 * routing figures are the same global counts at every ep. */
static void check_fingerprints(int bf16, const char *ga, int all_stages) {
    char path[] = "/tmp/zero-moe-ep-XXXXXX";
    if (!temp_file(path)) return;
    zero_train_io_t io = {.metrics_path = path};
    double norms0[STEPS] = {0};
    uint64_t fp0 = 0;
    double stats0[ZERO_GPT_MOE_STATS(E)] = {0};
    const int eps[] = {1, 2, 4};
    for (int i = 0; i < 3; i++)
        for (int s = 0; s <= 4; s++) { /* 4: stage 0 with activation checkpointing */
            if (!all_stages && s != 0 && s != 3) continue;
            if (s == 4 && (eps[i] != 2 || bf16)) continue;
            run_opts_t o = {eps[i], s == 4 ? 0 : s, bf16, s == 4, ga, NULL, CLIP};
            zero_train_report_t rep;
            zero_status_t st = run(&o, &io, &rep);
            CHECK(st == ZERO_OK, "%s accumulation %s ep %d stage %d: %s", bf16 ? "bf16" : "fp32",
                  ga, o.ep, o.stage, zero_last_error());
            if (st) continue;
            const int first = i == 0 && s == 0;
            double norms[STEPS] = {0};
            int clipped = 0;
            CHECK(read_norms(path, norms, STEPS, &clipped) == STEPS && clipped == STEPS,
                  "ep %d stage %d: %d of %d steps clipped", o.ep, o.stage, clipped, STEPS);
            if (first) {
                fp0 = rep.weights_fingerprint;
                memcpy(norms0, norms, sizeof norms0);
            }
            for (int k = 0; k < STEPS; k++)
                CHECK(norms[k] == norms0[k],
                      "%s accumulation %s ep %d stage %d step %d: gradient "
                      "norm %.17g, ep 1 stage 0 %.17g",
                      bf16 ? "bf16" : "fp32", ga, o.ep, o.stage, k + 1, norms[k], norms0[k]);
            CHECK(rep.weights_fingerprint == fp0,
                  "%s accumulation %s ep %d stage %d%s: fingerprint %016llx, ep 1 stage 0 %016llx",
                  bf16 ? "bf16" : "fp32", ga, o.ep, o.stage, s == 4 ? " checkpointing" : "",
                  (unsigned long long)rep.weights_fingerprint, (unsigned long long)fp0);
            CHECK(rep.moe_stats_count == ZERO_GPT_MOE_STATS(E), "%zu routing figures",
                  rep.moe_stats_count);
            if (rep.moe_stats_count == ZERO_GPT_MOE_STATS(E)) {
                if (first) memcpy(stats0, rep.moe_stats, sizeof stats0);
                for (int e = 0; e <= E + ZERO_GPT_MOE_DROPPED; e++)
                    CHECK(rep.moe_stats[e] == stats0[e],
                          "ep %d stage %d: routing figure %d is %.0f, at ep 1 %.0f", o.ep, o.stage,
                          e, rep.moe_stats[e], stats0[e]);
            }
            zero__train_report_free(&rep);
        }
    unlink(path);
    printf(
        "%s, accumulation %s, clipped: ep 1, 2, 4 x stages %s give %016llx, norms %.17g, %.17g\n",
        bf16 ? "bf16" : "fp32", ga, all_stages ? "0-3 (and checkpointing at ep 2)" : "0 and 3",
        (unsigned long long)fp0, norms0[0], norms0[1]);
}

/* (2) The expert-gradient guard: the global gradient norm (dense and expert units) of each step
 * at ep 2 and 4 equals ep 1's; an expert gradient scaled by ep would change it (the experts'
 * units hold a third of this model's parameters). */
static void check_grad_norms(void) {
    char path[] = "/tmp/zero-moe-ep-XXXXXX";
    if (!temp_file(path)) return;
    double norms[3][STEPS] = {{0}};
    const int eps[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        run_opts_t o = {eps[i], 2, 0, 0, "3", NULL, NULL};
        zero_train_io_t io = {.metrics_path = path};
        zero_train_report_t rep;
        zero_status_t st = run(&o, &io, &rep);
        CHECK(st == ZERO_OK, "ep %d: %s", eps[i], zero_last_error());
        if (st) continue;
        zero__train_report_free(&rep);
        CHECK(read_norms(path, norms[i], STEPS, NULL) == STEPS,
              "ep %d: %d steps in the metrics log", eps[i], STEPS);
        for (int s = 0; s < STEPS; s++)
            CHECK(norms[i][s] > 0 && fabs(norms[i][s] - norms[0][s]) <= 1e-8 * norms[0][s],
                  "ep %d step %d: gradient norm %.17g, at ep 1 %.17g", eps[i], s + 1, norms[i][s],
                  norms[0][s]);
    }
    unlink(path);
    printf("gradient norms at ep 1, 2, 4: %.12g, %.12g (steps 1, 2)\n", norms[0][0], norms[0][1]);
}

/* (3) All-to-all bytes: measured = theory on every rank; the closed form where every token goes
 * to every expert. */
static void check_bytes(void) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        const char *const every[] = {"model.moe.experts", "2", "model.moe.drop_tokens", "false",
                                     NULL};
        run_opts_t o = {2, 1, bf16, 0, "3", every, NULL};
        zero_train_report_t rep;
        zero_status_t st = run(&o, NULL, &rep);
        CHECK(st == ZERO_OK && rep.ranks, "every token to every expert, bf16 %d: %s", bf16,
              zero_last_error());
        if (st) continue;
        const double c = bf16 ? 2 : 4, BT = MICRO * SEQ, C = 32, El = 1, ep = 2, M = 3;
        const double closed = M * ((ep - 1) * (El + 1) * 4 + BT * C * (c + 4) * 2);
        for (int k = 0; rep.ranks && k < WORLD; k++)
            CHECK((double)rep.ranks[k].moe_a2a_bytes_per_step == closed &&
                      (double)rep.ranks[k].moe_a2a_theory_bytes_per_step == closed,
                  "bf16 %d rank %d: all-to-all %llu bytes per step, theory %llu, closed form %.0f",
                  bf16, k, (unsigned long long)rep.ranks[k].moe_a2a_bytes_per_step,
                  (unsigned long long)rep.ranks[k].moe_a2a_theory_bytes_per_step, closed);
        printf("every token to both experts, %s: %.0f all-to-all bytes per rank per step\n",
               bf16 ? "bf16" : "fp32", closed);
        zero__train_report_free(&rep);
    }
    /* the shared model (tokens dropped, uneven counts): measured = theory, none at ep 1 */
    const int eps[] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        zero_train_io_t io = {.out = out};
        run_opts_t o = {eps[i], 3, 0, 0, "3", NULL, NULL};
        zero_train_report_t rep;
        zero_status_t st = run(&o, &io, &rep);
        fclose(out);
        CHECK(st == ZERO_OK && rep.ranks, "ep %d: %s", eps[i], zero_last_error());
        for (int k = 0; !st && rep.ranks && k < WORLD; k++) {
            const zero_train_rank_report_t *rr = &rep.ranks[k];
            CHECK(rr->moe_a2a_bytes_per_step == rr->moe_a2a_theory_bytes_per_step &&
                      (eps[i] == 1) == (rr->moe_a2a_bytes_per_step == 0),
                  "ep %d rank %d: all-to-all %llu bytes per step, theory %llu", eps[i], k,
                  (unsigned long long)rr->moe_a2a_bytes_per_step,
                  (unsigned long long)rr->moe_a2a_theory_bytes_per_step);
        }
        CHECK(!text || (eps[i] > 1) == (strstr(text, "MoE all-to-all per rank per step") != NULL),
              "ep %d: the report's all-to-all lines", eps[i]);
        if (!st) zero__train_report_free(&rep);
        free(text);
    }
}

/* (4) Expert parameter bytes per rank, ep 4 against ep 1, at stage 1 (resident) and 3. The
 * report splits stacked units (ep > 1) from world units; at ep 1 the experts are world units, so
 * their bytes there are the parameters less the dense units' (the same units as ep 4's dense
 * part). */
static void check_memory(void) {
    /* one expert: fc (4C x C) + bias, proj (C x 4C) + bias, every span a multiple of 16 */
    const double C = 32, H = 4 * C, expert = H * C + H + C * H + C;
    for (int stage = 1; stage <= 3; stage += 2) {
        double bytes[2] = {0}, dense[WORLD] = {0};
        for (int i = 0; i < 2; i++) { /* ep 4, then ep 1 */
            /* stage 3: no unit is small enough to stay gathered */
            const char *const shard[] = {"zero_optimization.stage3_param_persistence_threshold",
                                         "0", NULL};
            run_opts_t o = {i ? 1 : 4, stage, 0, 0, "1", shard, NULL};
            zero_train_report_t rep;
            zero_status_t st = run(&o, NULL, &rep);
            CHECK(st == ZERO_OK && rep.ranks, "stage %d ep %d: %s", stage, o.ep, zero_last_error());
            if (st) continue;
            /* ep 4: one expert over its group of 1 rank; ep 1: the E experts over 4 ranks */
            const double held = i == 0 ? expert : stage == 3 ? E * expert / WORLD : E * expert;
            for (int k = 0; rep.ranks && k < WORLD; k++) {
                const zero_train_rank_report_t *rr = &rep.ranks[k];
                double b = (double)rr->model_state_split_bytes[1][0];
                if (i == 0) {
                    dense[k] = (double)rr->model_state_split_bytes[0][0];
                    CHECK(b == (double)rr->model_state_split_theory_bytes[1][0],
                          "stage %d ep 4 rank %d: expert parameters %.0f bytes, theory %llu", stage,
                          k, b, (unsigned long long)rr->model_state_split_theory_bytes[1][0]);
                } else {
                    b = (double)rr->model_state_bytes[0] - dense[k];
                }
                CHECK(b == 4 * held,
                      "stage %d ep %d rank %d: expert parameters %.0f bytes, "
                      "closed form %.0f",
                      stage, o.ep, k, b, 4 * held);
                if (k == 0) bytes[i] = b;
            }
            zero__train_report_free(&rep);
        }
        const double ratio = bytes[1] > 0 ? bytes[0] / bytes[1] : 1.0;
        CHECK(stage == 3 ? ratio == 1.0 : ratio <= 0.3,
              "stage %d: expert parameter bytes per rank ep 4 / ep 1 = %.3f", stage, ratio);
        printf("stage %d: expert parameters per rank %.0f bytes at ep 1, %.0f at ep 4 (%.2fx)\n",
               stage, bytes[1], bytes[0], ratio);
    }
}

/* (5) ep_size that does not divide the experts or the world: an error before training. */
static void check_bad_input(void) {
    const struct {
        const char *experts, *ep, *ranks, *want;
    } bad[] = {{"4", "3", "3",
                "model.moe.ep_size = 3 is invalid (expected a divisor of "
                "model.moe.experts = 4)"},
               {"8", "8", "4", "model.moe.ep_size = 8 does not divide the world size 4"},
               {"4", "4", "2", "model.moe.ep_size = 4 does not divide the world size 2"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *sets[] = {"model.moe.experts",
                              bad[i].experts,
                              "model.moe.ep_size",
                              bad[i].ep,
                              "train.ranks",
                              bad[i].ranks,
                              NULL};
        char *text = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&text, &len);
        zero_train_report_t rep;
        zero_status_t st = train(sets, out, &rep);
        fclose(out);
        CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), bad[i].want),
              "experts %s, ep_size %s, %s ranks: status %d, '%s'", bad[i].experts, bad[i].ep,
              bad[i].ranks, st, zero_last_error());
        CHECK(!text || !strstr(text, "step"), "trained before the error:\n%s", text);
        if (!st) zero__train_report_free(&rep);
        free(text);
    }
}

/* (6) Resume across ep: ep 2 -> ep 4 against ep 1 throughout. */
static void check_resume(void) {
    char dir[] = "/tmp/zero-moe-ep-ckpt-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *const four[] = {"train.steps", "4", NULL};
    const char *const save[] = {"train.steps", "2", "train.save_dir", dir, NULL};
    const char *const resume[] = {"train.steps", "4", "train.save_dir", dir, "train.resume",
                                  "latest",      NULL};
    const run_opts_t runs[] = {{1, 1, 0, 0, "1", four, CLIP},
                               {2, 1, 0, 0, "1", save, CLIP},
                               {4, 1, 0, 0, "1", resume, CLIP}};
    uint64_t fp[3] = {0};
    for (int i = 0; i < 3; i++) {
        zero_train_report_t rep;
        zero_status_t st = run(&runs[i], NULL, &rep);
        CHECK(st == ZERO_OK, "resume case %d (ep %d): %s", i, runs[i].ep, zero_last_error());
        if (st) break;
        fp[i] = rep.weights_fingerprint;
        zero__train_report_free(&rep);
    }
    CHECK(fp[2] == fp[0] && fp[1] != fp[0],
          "4 steps at ep 1 %016llx; 2 at ep 2 %016llx, resumed to 4 at ep 4 %016llx",
          (unsigned long long)fp[0], (unsigned long long)fp[1], (unsigned long long)fp[2]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

int main(void) {
    check_fingerprints(0, "1", 1);
    check_fingerprints(0, "3", 1);
    check_fingerprints(1, "1", 0);
    check_grad_norms();
    check_bytes();
    check_memory();
    check_bad_input();
    check_resume();
    return check_report();
}
