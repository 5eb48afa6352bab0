/* test_train_fp8.c — FP8 compute (fp8.*) through the trainer: a 2-layer GPT of width 64 (each
 * linear's 128-wide tiles ragged), micro-batch 2 of 16 tokens, 3 steps on the built-in corpus.
 *
 * Oracles: (1) ZeRO only changes where the bits live, and the delayed recipe's amax is reduced
 * over all ranks before any rank makes a scale (every rank ends with the same scales and
 * histories: the report's per-rank hash), so stages 0-3 give one weights fingerprint at 1, 2
 * and 4 thread ranks, for the delayed recipe (hybrid, bf16, accumulation 2, an amax history of 2
 * steps so that it rolls), the blockwise recipe (e4m3, fp32) and the delayed recipe under
 * activation checkpointing (the recomputed forward quantizes alike); fp8 on is not fp8 off and
 * the two recipes differ (the quantization is in the path). (2) Exact resume: 4 steps against 2,
 * a save, and a resume to 4, stage 3 on 2 ranks, delayed: the same fingerprint and last loss (the
 * scales and amax histories are in the checkpoint); a resume with another amax_history_len
 * fails naming it. (3) Accounting: the report's scaling state is the closed form
 * layers x 4 linears x 3 inputs x (2 + history) x 4 bytes, it is what ZERO_MEM_OTHER grew by, and
 * the activations grew by the quantized inputs' buffers, (2 B T 4C + 4C C) elements.
 * (4) fp8.weight_gather (persistence threshold 0, so every unit is gathered at stage 3): stages
 * 0-3 give one fingerprint at 1, 2 and 4 ranks for both recipes (stage 3 decodes 1-byte gathers
 * into the values the other stages round locally), not the fingerprint without it; the stage-3
 * parameter bytes per step on 2 ranks equal a closed form from the block's tensor shapes (and
 * the report's theory); a resume at step 2 is exact at stage 3 and at stage 2 (where the
 * checkpoint also writes the other ranks' partitions of the full parameters); combinations it
 * refuses name the key.
 */
#include "check.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 2, C = 64, SEQ = 16, MICRO = 2 };

static const char *const base[] = {"model.layers",
                                   "2",
                                   "model.dim",
                                   "64",
                                   "model.heads",
                                   "2",
                                   "model.seq",
                                   "16",
                                   "train_micro_batch_size_per_gpu",
                                   "2",
                                   "train.steps",
                                   "3",
                                   "train.samples",
                                   "0",
                                   "train.eval_batches",
                                   "1",
                                   "train.eval_interval",
                                   "0",
                                   "data.builtin_bytes",
                                   "65536",
                                   "fp8.enabled",
                                   "true",
                                   "fp8.amax_history_len",
                                   "2",
                                   NULL};

/* Run with base, then sets, then ranks and stage; the fingerprint (0 on failure). */
static uint64_t fingerprint(const char *const *sets, int ranks, int stage, float *loss) {
    char r[16], s[16];
    snprintf(r, sizeof r, "%d", ranks);
    snprintf(s, sizeof s, "%d", stage);
    const char *rs[] = {"train.ranks", r, "zero_optimization.stage", s, NULL};
    const char *all[32];
    int n = 0;
    for (int i = 0; sets && sets[i]; i++) all[n++] = sets[i];
    for (int i = 0; rs[i]; i++) all[n++] = rs[i];
    all[n] = NULL;
    zero_train_io_t io = {0};
    zero_train_report_t rep;
    zero_status_t st = train_pairs(base, all, &io, &rep);
    CHECK(st == ZERO_OK, "ranks %d stage %d: %s", ranks, stage, zero_last_error());
    if (st) return 0;
    uint64_t fp = rep.weights_fingerprint;
    if (loss) *loss = rep.last_step_loss;
    /* every rank ends with the same scales and histories (delayed; 0 = none elsewhere) */
    for (int k = 1; k < rep.world; k++)
        CHECK(rep.ranks[k].fp8_state_hash == rep.ranks[0].fp8_state_hash,
              "ranks %d stage %d: rank %d's fp8 state %016llx, rank 0's %016llx", ranks, stage, k,
              (unsigned long long)rep.ranks[k].fp8_state_hash,
              (unsigned long long)rep.ranks[0].fp8_state_hash);
    zero__train_report_free(&rep);
    return fp;
}

static uint64_t check_stages(const char *name, const char *const *sets) {
    uint64_t first = 0;
    for (int ranks = 1; ranks <= 4; ranks *= 2) {
        uint64_t fp0 = fingerprint(sets, ranks, 0, NULL);
        for (int stage = 1; stage <= 3; stage++) {
            uint64_t fp = fingerprint(sets, ranks, stage, NULL);
            CHECK(fp == fp0 && fp0, "%s, %d ranks: stage %d %016llx, stage 0 %016llx", name, ranks,
                  stage, (unsigned long long)fp, (unsigned long long)fp0);
        }
        printf("%s, %d rank%s: stages 0-3 give %016llx\n", name, ranks, ranks > 1 ? "s" : "",
               (unsigned long long)fp0);
        if (ranks == 2) first = fp0;
    }
    return first;
}

/* sets followed by extra (both NULL-terminated; extra may be NULL) into out (room for 32). */
static const char **join(const char **out, const char *const *sets, const char *const *extra) {
    int n = 0;
    for (int i = 0; sets[i]; i++) out[n++] = sets[i];
    for (int i = 0; extra && extra[i]; i++) out[n++] = extra[i];
    out[n] = NULL;
    return out;
}

/* Resume at step 2 of 4, at `stage` on 2 ranks, with the extra settings. */
static void check_resume(const char *name, const char *const *extra, int stage) {
    char dir[] = "/tmp/zero_test_fp8_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *run[] = {"bf16.enabled",     "true", "train.steps", "4", "train.save_dir", dir,
                         "train.save_every", "2",    NULL};
    float ref_loss = 0, loss = 1;
    const char *j1[32], *j2[32];
    uint64_t ref = fingerprint(join(j1, run, extra), 2, stage, &ref_loss);
    char ck[128];
    snprintf(ck, sizeof ck, "%s/step-00000002", dir);
    const char *resume[] = {"bf16.enabled",
                            "true",
                            "train.steps",
                            "4",
                            "train.save_dir",
                            dir,
                            "train.overwrite",
                            "true",
                            "train.resume",
                            ck,
                            NULL};
    uint64_t fp = fingerprint(join(j2, resume, extra), 2, stage, &loss);
    CHECK(fp == ref && loss == ref_loss && ref,
          "%s: resumed at 2: %016llx loss %.9g, uninterrupted %016llx loss %.9g", name,
          (unsigned long long)fp, (double)loss, (unsigned long long)ref, (double)ref_loss);
    printf("%s, stage %d, 2 ranks: resumed at step 2 %016llx = uninterrupted %016llx\n", name,
           stage, (unsigned long long)fp, (unsigned long long)ref);
    const char *const history[] = {"fp8.amax_history_len", "3", NULL};
    const char *j3[32];
    zero_train_io_t io = {0};
    zero_train_report_t rep;
    zero_status_t st = train_pairs(base, join(j3, resume, history), &io, &rep);
    CHECK(st != ZERO_OK && strstr(zero_last_error(), "amax_history_len"),
          "a resume with another history length: status %d, '%s'", st, zero_last_error());
    if (!st) zero__train_report_free(&rep);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* ZERO_MEM_OTHER and the activations with fp8 (sets) against without. */
static void check_accounting(const char *const *sets, size_t state_bytes) {
    zero_train_io_t io = {0};
    zero_train_report_t on, off;
    const char *no[] = {"fp8.enabled", "false", NULL};
    zero_status_t st = train_pairs(base, sets, &io, &on);
    CHECK(st == ZERO_OK, "accounting run: %s", zero_last_error());
    if (st) return;
    st = train_pairs(base, no, &io, &off);
    CHECK(st == ZERO_OK, "fp8 off: %s", zero_last_error());
    if (!st) {
        const size_t grown = on.mem.live_bytes[ZERO_MEM_OTHER] - off.mem.live_bytes[ZERO_MEM_OTHER];
        CHECK(on.fp8_state_bytes == state_bytes && grown == state_bytes && !off.fp8_state_bytes,
              "fp8 state %zu bytes, other memory grew by %zu, expected %zu", on.fp8_state_bytes,
              grown, state_bytes);
        const size_t q = (2 * (size_t)MICRO * SEQ * 4 * C + 4 * (size_t)C * C) * sizeof(float);
        CHECK(on.activation_bytes == off.activation_bytes + q,
              "activations %zu with fp8, %zu without (expected + %zu)", on.activation_bytes,
              off.activation_bytes, q);
        zero__train_report_free(&off);
    }
    zero__train_report_free(&on);
}

/* fp8.weight_gather: the bytes of one rank's part of a block's stage-3 gather over n ranks, from
 * the block's tensor shapes (all multiples of 16 at C = 64, so laid end to end): per partition r
 * of S elements, a 4-byte scale per 128 elements (or fewer, at a piece's end) of each linear
 * weight's part in it, a byte per such element, 2 per other element; the largest over r, to a
 * multiple of 4. */
static double block_wire_bytes(size_t n) {
    const size_t c = C,
                 sz[12] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c};
    const int w8[12] = {0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0};
    size_t off[12], P = 0, most = 0;
    for (int i = 0; i < 12; i++) off[i] = P, P += sz[i];
    const size_t S = (P + 16 * n - 1) / (16 * n) * 16;
    for (size_t r = 0; r < n; r++) {
        size_t blocks = 0, f = 0;
        for (int i = 0; i < 12; i++) {
            const size_t a = off[i] > r * S ? off[i] : r * S;
            const size_t b = off[i] + sz[i] < (r + 1) * S ? off[i] + sz[i] : (r + 1) * S;
            if (!w8[i] || a >= b) continue;
            blocks += (b - a + 127) / 128;
            f += b - a;
        }
        const size_t w = 4 * blocks + f + 2 * (S - f);
        most = w > most ? w : most;
    }
    return (double)((most + 3) / 4 * 4);
}

/* fp8.weight_gather at stage 3 on 2 ranks: the parameter bytes per step are the closed form (the
 * embeddings and the final norm in bf16, the blocks packed) and the report's theory; a resume
 * at step 2 gives the uninterrupted fingerprint. */
static void check_weight_gather(void) {
    const char *wg[] = {"bf16.enabled",
                        "true",
                        "fp8.weight_gather",
                        "true",
                        "zero_optimization.stage3_param_persistence_threshold",
                        "0",
                        "model.vocab",
                        "256",
                        "train.ranks",
                        "2",
                        "zero_optimization.stage",
                        "3",
                        NULL};
    zero_train_io_t io = {0};
    zero_train_report_t rep;
    zero_status_t st = train_pairs(base, wg, &io, &rep);
    CHECK(st == ZERO_OK, "weight gather, stage 3: %s", zero_last_error());
    if (st) return;
    const double emb = (256.0 * C + SEQ * C) / 2, lnf = 2.0 * C / 2; /* shards, elements */
    const double want = 3 * 2 * emb + L * 2 * block_wire_bytes(2) + 2 * 2 * lnf;
    double bf16 = 3 * 2 * emb + 2 * 2 * lnf; /* the same gathers all in bf16 */
    for (int i = 0; i < 12; i++) {
        const double sz[12] = {C, C, 3 * C * C, 3 * C, C * C,     C,
                               C, C, 4 * C * C, 4 * C, 4 * C * C, C};
        bf16 += L * 2 * 2 * sz[i] / 2;
    }
    for (int k = 0; k < rep.world; k++) {
        const double sent = (double)rep.ranks[k].comm_sent_bytes_per_step_by_kind[ZERO_XFER_PARAMS];
        const double theory =
            (double)rep.ranks[k].comm_theory_bytes_per_step_by_kind[ZERO_XFER_PARAMS];
        CHECK(sent == want && theory == want,
              "weight gather rank %d: parameter bytes per step %.0f, theory %.0f, closed form %.0f",
              k, sent, theory, want);
    }
    printf("weight gather, stage 3, 2 ranks: parameter bytes per step %.0f (closed form %.0f; "
           "all in bf16 %.0f)\n",
           (double)rep.ranks[0].comm_sent_bytes_per_step_by_kind[ZERO_XFER_PARAMS], want, bf16);
    zero__train_report_free(&rep);
}

/* Combinations fp8.weight_gather refuses, each naming the key in its way. */
static void check_weight_gather_errors(void) {
    const struct {
        const char *sets[9], *key;
    } bad[] = {
        {{"fp8.weight_gather", "true", "fp8.enabled", "false", NULL}, "fp8.enabled"},
        {{"fp8.weight_gather", "true", NULL}, "bf16.enabled"},
        {{"fp8.weight_gather", "true", "bf16.enabled", "true", "zero_optimization.stage", "3",
          "zero_optimization.zero_quantized_weights", "true", NULL},
         "zero_quantized_weights"},
        {{"fp8.weight_gather", "true", "bf16.enabled", "true", "optimizer.type", "AdamW8bit", NULL},
         "state_dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        zero_train_io_t io = {0};
        zero_train_report_t rep;
        zero_status_t st = train_pairs(base, bad[i].sets, &io, &rep);
        CHECK(st != ZERO_OK && strstr(zero_last_error(), "fp8.weight_gather") &&
                  strstr(zero_last_error(), bad[i].key),
              "weight gather with %s: status %d, '%s'", bad[i].key, st, zero_last_error());
        if (!st) zero__train_report_free(&rep);
    }
}

int main(void) {
    const char *delayed[] = {"bf16.enabled", "true", "gradient_accumulation_steps", "2", NULL};
    const char *blockwise[] = {"fp8.recipe", "blockwise", "fp8.format", "e4m3", NULL};
    const char *ckpt[] = {"fp8.format", "e4m3", "model.activation_checkpointing", "true", NULL};
    const uint64_t a = check_stages("delayed hybrid bf16, accumulation 2", delayed);
    const uint64_t b = check_stages("blockwise e4m3 fp32", blockwise);
    check_stages("delayed e4m3 fp32, checkpointing", ckpt);
    const char *off[] = {
        "fp8.enabled", "false", "bf16.enabled", "true", "gradient_accumulation_steps", "2", NULL};
    const char *bw_bf16[] = {
        "fp8.recipe", "blockwise", "bf16.enabled", "true", "gradient_accumulation_steps",
        "2",          NULL};
    const uint64_t none = fingerprint(off, 2, 0, NULL), c = fingerprint(bw_bf16, 2, 0, NULL);
    CHECK(none && a && b && c && none != a && a != c,
          "fp8 off %016llx, delayed %016llx, blockwise %016llx: expected all different",
          (unsigned long long)none, (unsigned long long)a, (unsigned long long)c);
    check_resume("delayed", NULL, 3);
    const char *wg[] = {"bf16.enabled",
                        "true",
                        "gradient_accumulation_steps",
                        "2",
                        "fp8.weight_gather",
                        "true",
                        "zero_optimization.stage3_param_persistence_threshold",
                        "0",
                        NULL};
    const uint64_t w = check_stages("delayed hybrid bf16, accumulation 2, weight gather", wg);
    const char *wg_bw[] = {"bf16.enabled",
                           "true",
                           "fp8.recipe",
                           "blockwise",
                           "fp8.weight_gather",
                           "true",
                           "zero_optimization.stage3_param_persistence_threshold",
                           "0",
                           NULL};
    check_stages("blockwise hybrid bf16, weight gather", wg_bw);
    CHECK(w && w != a, "weight gather %016llx, without %016llx: expected different",
          (unsigned long long)w, (unsigned long long)a);
    check_weight_gather();
    check_weight_gather_errors();
    const char *wg_resume[] = {"fp8.weight_gather", "true",
                               "zero_optimization.stage3_param_persistence_threshold", "0", NULL};
    check_resume("delayed, weight gather", wg_resume, 3);
    check_resume("delayed, weight gather", wg_resume, 2); /* others' partitions written too */
    const char *fp32[] = {NULL};
    check_accounting(fp32, (size_t)L * 4 * 3 * (2 + 2) * sizeof(float));
    check_accounting(blockwise, 0);
    return check_report();
}
