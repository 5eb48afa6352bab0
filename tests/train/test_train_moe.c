/* test_train_moe.c — MoE-GPT (model.moe) through the trainer on the built-in corpus: a 3-layer
 * model whose layer 1 is MoE (4 experts, top-2, capacity factor 1 so that tokens are dropped, one
 * shared expert, aux and z losses on), 2 thread ranks.
 *
 * Oracles: (1) ZeRO only changes where the bits live: stages 0-3 give the same weights
 * fingerprint, at gradient accumulation 1 and 3, in fp32 and bf16; activation checkpointing
 * recomputes the same forward, so it gives the same fingerprint too; (2) the report's routing
 * statistics add up: per MoE layer the experts' kept tokens plus the dropped choices equal the
 * (token, choice) pairs of the last step over both ranks (micro x accumulation x ranks x seq x
 * top_k), no expert keeps more than its capacity per forward times the forwards, tokens were
 * dropped, the aux and z losses were summed, and the printed report shows the MoE layer's line
 * and none for the dense layers; (3) a bad MoE key fails before training, naming it.
 */
#include "check.h"
#include "moe_setup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_stages(const char *dtype, const char *ga) {
    uint64_t fp[5] = {0};
    for (int s = 0; s <= 4; s++) { /* 4: stage 0 with activation checkpointing */
        char stage[8];
        snprintf(stage, sizeof stage, "%d", s == 4 ? 0 : s);
        const char *sets[] = {"zero_optimization.stage",
                              stage,
                              "gradient_accumulation_steps",
                              ga,
                              "bf16.enabled",
                              strcmp(dtype, "bf16") ? "false" : "true",
                              "model.activation_checkpointing",
                              s == 4 ? "true" : "false",
                              NULL};
        zero_train_report_t rep;
        zero_status_t st = train(sets, NULL, &rep);
        CHECK(st == ZERO_OK, "%s, accumulation %s, stage %s: %s", dtype, ga, stage,
              zero_last_error());
        if (st) return;
        fp[s] = rep.weights_fingerprint;
        zero__train_report_free(&rep);
        CHECK(fp[s] == fp[0], "%s, accumulation %s: %s %s fingerprint %016llx, stage 0 %016llx",
              dtype, ga, s == 4 ? "checkpointing at stage" : "stage", stage,
              (unsigned long long)fp[s], (unsigned long long)fp[0]);
    }
    printf("%s, accumulation %s: stages 0-3 and checkpointing give %016llx\n", dtype, ga,
           (unsigned long long)fp[0]);
}

static void check_moe_report(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    const char *sets[] = {"gradient_accumulation_steps", "3", NULL};
    zero_train_report_t rep;
    zero_status_t st = train(sets, out, &rep);
    fclose(out);
    CHECK(st == ZERO_OK, "report run: %s", zero_last_error());
    if (st) {
        free(text);
        return;
    }
    /* one MoE layer (layer 1 of 3 with every 2) */
    CHECK(rep.moe_stats_count == ZERO_GPT_MOE_STATS(E), "%zu statistics, expected %d",
          rep.moe_stats_count, ZERO_GPT_MOE_STATS(E));
    if (rep.moe_stats_count == ZERO_GPT_MOE_STATS(E)) {
        const double *v = rep.moe_stats;
        const double tokens = MICRO * 3 * 2 * SEQ; /* micro x accumulation x ranks x seq */
        const double forwards = v[E + ZERO_GPT_MOE_FORWARDS];
        const double cap = ceil(1.0 * MICRO * SEQ * TOPK / E); /* per forward */
        double kept = 0.0;
        for (int e = 0; e < E; e++) {
            kept += v[e];
            CHECK(v[e] <= cap * forwards, "expert %d kept %.0f > capacity %.0f x %.0f forwards", e,
                  v[e], cap, forwards);
        }
        CHECK(forwards == 6, "%.0f forwards summed, expected 3 micro-steps x 2 ranks", forwards);
        CHECK(v[E + ZERO_GPT_MOE_CHOICES] == tokens * TOPK, "%.0f choices, expected %.0f",
              v[E + ZERO_GPT_MOE_CHOICES], tokens * TOPK);
        CHECK(kept + v[E + ZERO_GPT_MOE_DROPPED] == tokens * TOPK,
              "kept %.0f + dropped %.0f != %.0f choices", kept, v[E + ZERO_GPT_MOE_DROPPED],
              tokens * TOPK);
        CHECK(v[E + ZERO_GPT_MOE_DROPPED] > 0, "capacity factor 1 with top-2 dropped nothing");
        CHECK(v[E + ZERO_GPT_MOE_AUX] > 0 && v[E + ZERO_GPT_MOE_Z] > 0, "aux %g, z %g",
              v[E + ZERO_GPT_MOE_AUX], v[E + ZERO_GPT_MOE_Z]);
    }
    CHECK(text && strstr(text, "report: moe block.1 tokens per expert") &&
              !strstr(text, "moe block.0") && !strstr(text, "moe block.2"),
          "the report's MoE lines:\n%s", text ? text : "");
    CHECK(text && strstr(text, "moe: 4 experts, top-2, every 2 layers, hidden 128, 1 shared"),
          "the start-up MoE line");
    zero__train_report_free(&rep);
    free(text);
}

static void check_bad_key(void) {
    const char *sets[] = {"model.moe.top_k", "2", "model.moe.experts", "1", NULL};
    zero_train_report_t rep;
    zero_status_t st = train(sets, NULL, &rep);
    CHECK(st != ZERO_OK && strstr(zero_last_error(), "model.moe.top_k"),
          "top_k 2 of 1 expert: status %d, '%s'", st, zero_last_error());
}

int main(void) {
    check_stages("fp32", "1");
    check_stages("fp32", "3");
    check_stages("bf16", "1");
    check_moe_report();
    check_bad_key();
    return check_report();
}
