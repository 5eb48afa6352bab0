/* test_train_ranks.c — `zero train` over several ranks on the threads backend (src/cli/train.c
 * over src/train/trainer.c), through the command line in this process.
 *
 * Oracles: the same config at stages 0-3 gives the same weights_fingerprint (ZeRO changes where
 * state lives, never the arithmetic); 2 ranks of micro-batch B and 1 rank of micro-batch 2B see
 * the same windows (the global batch does not depend on its split), so their losses agree to
 * rounding; the JSON report holds world_size, stage and per-rank memory and communication with
 * consistent values (tokens = steps x train_batch_size x seq; every stage sends exactly the
 * bytes of the engine's theory and of this test's closed form — stage 3 from the GPT's unit
 * shapes, with prefetch, a persistence threshold and evaluation forwards between steps, once
 * with an evaluation inside the last step's window and once without; stage 0 holds 4 P
 * parameter bytes, stage 3 less, and sends more per step). A
 * DeepSpeed documentation-style config (argument 1: configs/ds_zero3.json) runs, warning about what
 * it drops. Stages or world sizes the engine does not run yet are reported as SKIP lines.
 */
#include "check.h"
#include "cli/cli.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"

static char warnings[8192];

static void capture(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)rank, (void)world, (void)user;
    if (level >= ZERO_LOG_WARN && strlen(warnings) + strlen(msg) + 2 < sizeof warnings) {
        strcat(warnings, msg);
        strcat(warnings, "\n");
    }
}

static char dir[256], cfgpath[512];

static const char *tiny =
    "{\n"
    "  \"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
    "  \"data\": {\"builtin_bytes\": 65536},\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"gradient_accumulation_steps\": 2,\n"
    "  \"optimizer\": {\"params\": {\"lr\": 0.003}},\n"
    "  \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 2}},\n"
    "  \"zero_optimization\": {\"reduce_bucket_size\": 5000,\n"
    "      \"stage3_param_persistence_threshold\": 100},\n"
    "  \"train\": {\"steps\": 6, \"eval_interval\": 3, \"eval_batches\": 2,\n"
    "            \"samples\": 1, \"sample_tokens\": 16}\n"
    "}\n";

static double num(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    CHECK(cJSON_IsNumber(it), "no number '%s'", key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

static double cat(const cJSON *rank, const char *what, const char *category) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(rank, what);
    CHECK(cJSON_IsObject(o), "no object '%s'", what);
    return o ? num(o, category) : NAN;
}

/* Does the engine run `ranks` ranks at `stage`? A one-step run through the library says. */
static int engine_runs(int ranks, int stage) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    if (zero__train_config_parse(&c, tiny, "tiny.json")) return 0;
    c.ranks = ranks;
    c.stage = stage;
    c.steps = 1;
    c.samples = 0;
    zero_train_io_t io = {.out = NULL}; /* silent, no peak measurement */
    zero_train_report_t rep;
    zero_status_t st = zero__train_run(&c, &io, &rep);
    if (st == ZERO_OK) {
        zero__train_report_free(&rep);
        return 1;
    }
    printf("SKIP %d ranks at stage %d: %s\n", ranks, stage, zero_last_error());
    CHECK(st == ZERO_ERR_UNSUPPORTED, "probe of %d ranks, stage %d failed: %s", ranks, stage,
          zero_last_error());
    return 0;
}

/* The metrics log: one JSON object per step with the promised keys; the last step's loss is the
 * report's last_step_loss. */
static void check_metrics(const char *path, const cJSON *report) {
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no metrics log %s", path);
    if (!f) return;
    char line[4096];
    int n = 0;
    double last_loss = NAN;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        CHECK(o != NULL, "metrics line %d is not JSON: %s", n + 1, line);
        if (!o) break;
        n++;
        CHECK(num(o, "step") == n, "metrics line %d has step %g", n, num(o, "step"));
        const char *keys[] = {"loss", "lr", "grad_norm", "tokens_per_s", "tokens", "step_s"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            CHECK(isfinite(num(o, keys[k])), "metrics line %d: %s", n, keys[k]);
        CHECK(num(o, "tokens") == n * num(report, "train_batch_size") * 32, "tokens at step %d", n);
        last_loss = num(o, "loss");
        cJSON_Delete(o);
    }
    fclose(f);
    CHECK(n == num(report, "steps"), "metrics log has %d lines for %g steps", n,
          num(report, "steps"));
    CHECK((float)last_loss == (float)num(report, "last_step_loss"),
          "metrics last loss %.9g, report %.9g", last_loss, num(report, "last_step_loss"));
    unlink(path);
}

/* Train the tiny config; returns the parsed report (NULL on failure). */
static cJSON *train(int ranks, int stage, const char *extra_key, const char *extra_value) {
    char report[600], metrics[600], r[16], s[16], set[128];
    snprintf(report, sizeof report, "%s/report-%d-%d.json", dir, ranks, stage);
    snprintf(metrics, sizeof metrics, "%s/metrics-%d-%d.jsonl", dir, ranks, stage);
    snprintf(r, sizeof r, "%d", ranks);
    snprintf(s, sizeof s, "%d", stage);
    snprintf(set, sizeof set, "%s=%s", extra_key ? extra_key : "seed",
             extra_value ? extra_value : "1337");
    const char *args[] = {"train", "-q",        "--no-peak", "--config", cfgpath, "--ranks",
                          r,       "--stage",   s,           "--set",    set,     "--json-report",
                          report,  "--metrics", metrics,     NULL};
    double t0 = zero_time_now();
    int rc = train_cli(args);
    printf("%d ranks, stage %d%s%s: exit %d in %.2f s\n", ranks, stage, extra_key ? ", " : "",
           extra_key ? set : "", rc, zero_time_now() - t0);
    CHECK(rc == 0, "%d ranks stage %d: %s", ranks, stage, zero_last_error());
    cJSON *root = rc == 0 ? load_json(report) : NULL;
    CHECK(rc != 0 || root != NULL, "report %s unreadable", report);
    if (root) check_metrics(metrics, root);
    unlink(report);
    return root;
}

static const char *fingerprint(const cJSON *root) {
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(root, "weights_fingerprint");
    CHECK(cJSON_IsString(fp) && strlen(fp->valuestring) == 16, "weights_fingerprint");
    return cJSON_IsString(fp) ? fp->valuestring : "";
}

/* Stage-3 bytes one rank sends per step for the tiny config (2 layers, dim 32, seq 32, vocab
 * 256, persistence threshold 100: the final norm of 64 parameters stays full, the embedding and
 * the blocks are sharded), from the GPT's tensor shapes: per micro-step a reduce-scatter of every
 * shard and one gather per fetch window (embedding 3: embedding, head forward, head backward +
 * embedding backward; each block 2), per evaluation forward in the window 2 and 1; after the step
 * the persistent unit's all-gather; plus the 32-byte control all-gather. */
static double stage3_closed_form(int ranks, int micro, int eval_forwards) {
    const double C = 32, V = 256, T = 32, N = ranks, q = 16 * N;
    const double blk =
        2 * C + 3 * C * C + 3 * C + C * C + 3 * C + 4 * C * C + 4 * C + 4 * C * C + C;
    const double Pe = ceil((V * C + T * C) / q) * q, Pb = ceil(blk / q) * q,
                 Pf = ceil(2 * C / q) * q;
    const double Se = Pe / N, Sb = Pb / N, Sf = Pf / N, S = Se + 2 * Sb + Sf;
    double ag = micro * (3 * Se + 2 * 2 * Sb) + eval_forwards * (2 * Se + 2 * Sb) + Sf;
    return (N - 1) * (4 * (micro * S + ag) + 32);
}

/* Fields every report must have, with values consistent among themselves. */
static void check_report_fields(const cJSON *root, int ranks, int stage) {
    CHECK(num(root, "world_size") == ranks, "world_size %g, expected %d", num(root, "world_size"),
          ranks);
    CHECK(num(root, "stage") == stage, "stage %g, expected %d", num(root, "stage"), stage);
    double tb = num(root, "train_batch_size");
    CHECK(tb == 4.0 * 2 * ranks, "train_batch_size %g = 4 x 2 x %d", tb, ranks);
    CHECK(num(root, "tokens") == num(root, "steps") * tb * 32, "tokens %g", num(root, "tokens"));
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(root, "per_rank");
    CHECK(cJSON_IsArray(per) && cJSON_GetArraySize(per) == ranks, "per_rank has %d entries",
          cJSON_IsArray(per) ? cJSON_GetArraySize(per) : -1);
    for (int k = 0; cJSON_IsArray(per) && k < cJSON_GetArraySize(per); k++) {
        const cJSON *r = cJSON_GetArrayItem(per, k);
        CHECK(num(r, "rank") == k, "per_rank[%d].rank", k);
        CHECK(cat(r, "memory_bytes", "parameters") > 0 &&
                  cat(r, "memory_bytes", "optimizer_states") > 0,
              "rank %d memory", k);
        CHECK(cat(r, "memory_theory_bytes", "parameters") >= 0, "rank %d theory", k);
        CHECK(num(r, "peak_rss_bytes") > 0, "rank %d peak RSS", k);
        CHECK(num(r, "comm_theory_bytes_per_step") >= 0, "rank %d comm theory", k);
        CHECK(ranks == 1 || num(r, "comm_bytes_per_step") > 0, "rank %d sends nothing", k);
        /* padded layout: every unit a multiple of world x 16 elements */
        double P = num(r, "padded_params"), params = num(root, "params");
        CHECK(P >= params && fmod(P, 16.0 * ranks) == 0, "padded params %g for %g", P, params);
        CHECK(num(r, "comm_bytes_per_step") == num(r, "comm_theory_bytes_per_step"),
              "stage %d rank %d sends %.0f bytes per step, engine theory %.0f", stage, k,
              num(r, "comm_bytes_per_step"), num(r, "comm_theory_bytes_per_step"));
        /* the paper's breakdown: fp32 here, so parameters 4 P (stage 3: the shards and the
         * persistent units, not 4 P / N exactly), optimizer states 8 P or 8 P / N */
        double ms = cat(r, "model_state_bytes", "total");
        CHECK(ms == cat(r, "model_state_theory_bytes", "total") &&
                  cat(r, "model_state_bytes", "optimizer_states") ==
                      (stage == 0 ? 8 * P : 8 * P / ranks) &&
                  cat(r, "model_state_bytes", "parameters") == cat(r, "memory_bytes", "parameters"),
              "stage %d rank %d model states %.0f, theory %.0f", stage, k, ms,
              cat(r, "model_state_theory_bytes", "total"));
        if (stage == 3 && ranks > 1) {
            /* evaluation every 3 steps: after step 3 it falls in step 4's window */
            int steps = (int)num(root, "steps");
            double want = stage3_closed_form(ranks, 2, (steps - 1) % 3 == 0 ? 2 : 0);
            CHECK(num(r, "comm_bytes_per_step") == want,
                  "stage 3 rank %d (%d steps) sends %.0f bytes per step, closed form %.0f", k,
                  steps, num(r, "comm_bytes_per_step"), want);
        }
        if (stage <= 2 && ranks > 1) {
            /* closed form (ARCHITECTURE.md section 3, engine.h): per micro-step a reduce-scatter
             * sends (N-1) shards of 4 P / N bytes, the step's all-gather (N-1) more, plus one
             * 32-byte control all-gather; accumulation M = 2 here. */
            double N = ranks, M = 2, want = (N - 1) * (4 * P / N * (M + 1) + 32);
            CHECK(num(r, "comm_bytes_per_step") == want,
                  "stage %d rank %d sends %.0f bytes per step, closed form %.0f", stage, k,
                  num(r, "comm_bytes_per_step"), want);
            /* by kind: the reduce-scatters (and stage 0's gradient all-gather) are gradients,
             * stages 1-2's all-gather parameters, the record control */
            double shard = (N - 1) * 4 * P / N;
            double grads = shard * M + (stage == 0 ? shard : 0), gathered = stage == 0 ? 0 : shard;
            const char *kinds[3] = {"grads", "params", "control"};
            double kind_want[3] = {grads, gathered, (N - 1) * 32};
            for (int x = 0; x < 3; x++)
                CHECK(cat(r, "comm_sent_bytes_per_step_by_kind", kinds[x]) == kind_want[x] &&
                          cat(r, "comm_theory_bytes_per_step_by_kind", kinds[x]) == kind_want[x],
                      "stage %d rank %d %s: sent %.0f, theory %.0f, closed form %.0f", stage, k,
                      kinds[x], cat(r, "comm_sent_bytes_per_step_by_kind", kinds[x]),
                      cat(r, "comm_theory_bytes_per_step_by_kind", kinds[x]), kind_want[x]);
        }
        if (stage == 0)
            CHECK(cat(r, "memory_bytes", "parameters") == 4 * P &&
                      cat(r, "memory_theory_bytes", "parameters") == 4 * P,
                  "stage 0 rank %d parameters: %g bytes, theory %g, 4 P = %g", k,
                  cat(r, "memory_bytes", "parameters"), cat(r, "memory_theory_bytes", "parameters"),
                  4 * P);
    }
}

static void test_stages(void) {
    if (!engine_runs(2, 0)) return;
    cJSON *base = train(2, 0, NULL, NULL);
    if (!base) return;
    check_report_fields(base, 2, 0);
    const cJSON *per0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(base, "per_rank"), 0);

    /* 1 rank with twice the micro-batch sees the same windows: same losses up to rounding. */
    cJSON *one = train(1, 0, "train_micro_batch_size_per_gpu", "8");
    if (one) {
        double a = num(base, "final_train_loss"), b = num(one, "final_train_loss");
        double va = num(base, "final_val_loss"), vb = num(one, "final_val_loss");
        printf("2 ranks vs 1 rank: train loss %.7f / %.7f, val loss %.7f / %.7f\n", a, b, va, vb);
        CHECK(fabs(a - b) < 2e-4 && fabs(va - vb) < 2e-4,
              "2 ranks x 4 and 1 rank x 8 disagree: %.7f vs %.7f, %.7f vs %.7f", a, b, va, vb);
        CHECK(fabs(a - num(base, "initial_val_loss")) > 0.05, "the run did not learn");
        cJSON_Delete(one);
    }

    for (int stage = 1; stage <= 3; stage++) {
        if (!engine_runs(2, stage)) continue;
        cJSON *rep = train(2, stage, NULL, NULL);
        if (!rep) continue;
        check_report_fields(rep, 2, stage);
        CHECK(!strcmp(fingerprint(rep), fingerprint(base)),
              "stage %d fingerprint %s differs from stage 0's %s", stage, fingerprint(rep),
              fingerprint(base));
        CHECK(num(rep, "final_train_loss") == num(base, "final_train_loss"),
              "stage %d loss differs", stage);
        const cJSON *per = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(rep, "per_rank"), 0);
        if (stage >= 1)
            CHECK(cat(per, "memory_bytes", "optimizer_states") <
                      cat(per0, "memory_bytes", "optimizer_states"),
                  "stage %d does not shard optimizer states", stage);
        if (stage == 3) {
            CHECK(cat(per, "memory_bytes", "parameters") < cat(per0, "memory_bytes", "parameters"),
                  "stage 3 keeps %g parameter bytes, stage 0 %g",
                  cat(per, "memory_bytes", "parameters"), cat(per0, "memory_bytes", "parameters"));
            double c3 = num(per, "comm_bytes_per_step"), c0 = num(per0, "comm_bytes_per_step");
            printf("stage 3: %.0f bytes per step (theory %.0f), stage 0: %.0f\n", c3,
                   num(per, "comm_theory_bytes_per_step"), c0);
            CHECK(c3 > c0, "stage 3 sends %.0f bytes per step, no more than stage 0's %.0f", c3,
                  c0);
        }
        cJSON_Delete(rep);
    }
    /* Stage 3 with an evaluation in the last step's window (4 steps: evaluation after step 3),
     * and prefetch limited to about one block so that it runs ahead during that evaluation. */
    if (engine_runs(2, 3)) {
        const char *sets[][2] = {{"train.steps", "4"},
                                 {"zero_optimization.stage3_prefetch_bucket_size", "15000"}};
        for (int i = 0; i < 2; i++) {
            cJSON *rep = train(2, 3, sets[i][0], sets[i][1]);
            if (!rep) continue;
            check_report_fields(rep, 2, 3);
            cJSON_Delete(rep);
        }
    }

    /* an odd world size at the highest stage the engine runs */
    int top = engine_runs(3, 3) ? 3 : engine_runs(3, 0) ? 0 : -1;
    if (top >= 0) {
        cJSON *rep = train(3, top, NULL, NULL);
        if (rep) {
            check_report_fields(rep, 3, top);
            cJSON_Delete(rep);
        }
    }
    cJSON_Delete(base);
}

/* Simulated nodes (train.ranks_per_node) change no bit, and each rank's bytes, in all and to
 * other nodes, follow closed forms in R and A, the bytes of the step's reduce-scatters and
 * all-gathers per peer of the one-node run (its bytes by collective / 3: each collective is over
 * the world of 4, fp32, flat on one node). Nodes of 2 + 2: the all-gather is hierarchical (A to
 * the other node, then 2 A to the node's other rank); so is the reduce-scatter (node 0's ranks
 * send their node partial of 2 blocks to the other node and their contribution to 2 blocks to
 * the node's other rank: 4 R in all, 2 R across; node 1's ranks: 2 R inside and 1 R, the final
 * block of the owner, across). Nodes of 3 + 1: the all-gather is hierarchical (rank 3's block
 * goes to rank 0, which passes it on with its own: rank 0 sends 5 A, rank 3 only A), the
 * reduce-scatter flat (carrying partials would cost more). Nodes of 1: everything flat, all of
 * it across. */
static void test_nodes(void) {
    if (!engine_runs(4, 3)) return;
    cJSON *flat = train(4, 3, NULL, NULL);
    if (!flat) return;
    check_report_fields(flat, 4, 3);
    const int ks[] = {2, 3, 1};
    /* per rank: total = tr R + ta A, across = ir R + ia A */
    static const int forms[3][4][4] = {
        {{4, 3, 2, 1}, {4, 3, 2, 1}, {3, 3, 1, 1}, {3, 3, 1, 1}},
        {{3, 5, 1, 1}, {3, 3, 1, 1}, {3, 3, 1, 1}, {3, 1, 3, 1}},
        {{3, 3, 3, 3}, {3, 3, 3, 3}, {3, 3, 3, 3}, {3, 3, 3, 3}},
    };
    const cJSON *fper = cJSON_GetObjectItemCaseSensitive(flat, "per_rank");
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        char k[8];
        snprintf(k, sizeof k, "%d", ks[i]);
        cJSON *rep = train(4, 3, "train.ranks_per_node", k);
        if (!rep) continue;
        if (ks[i] == 1) check_report_fields(rep, 4, 3); /* flat: the flat closed forms hold */
        CHECK(!strcmp(fingerprint(rep), fingerprint(flat)),
              "ranks_per_node %d: fingerprint %s, one node %s", ks[i], fingerprint(rep),
              fingerprint(flat));
        const cJSON *per = cJSON_GetObjectItemCaseSensitive(rep, "per_rank");
        for (int r = 0; r < 4; r++) {
            const cJSON *pr = cJSON_GetArrayItem(per, r), *fr = cJSON_GetArrayItem(fper, r);
            const double R = cat(fr, "comm_sent_bytes_per_step_by_collective", "reduce_scatter") /
                             3,
                         A = cat(fr, "comm_sent_bytes_per_step_by_collective", "all_gather") / 3;
            const int *f = forms[i][r];
            const double total = f[0] * R + f[1] * A, across = f[2] * R + f[3] * A;
            CHECK(R > 0 && A > 0 && num(pr, "comm_bytes_per_step") == total &&
                      num(pr, "comm_theory_bytes_per_step") == total,
                  "ranks_per_node %d rank %d: %.0f bytes per step (theory %.0f), closed form "
                  "%.0f",
                  ks[i], r, num(pr, "comm_bytes_per_step"), num(pr, "comm_theory_bytes_per_step"),
                  total);
            CHECK(num(pr, "comm_inter_node_bytes_per_step") == across &&
                      num(pr, "comm_inter_node_theory_bytes_per_step") == across,
                  "ranks_per_node %d rank %d: %.0f bytes to other nodes (theory %.0f), closed "
                  "form %.0f",
                  ks[i], r, num(pr, "comm_inter_node_bytes_per_step"),
                  num(pr, "comm_inter_node_theory_bytes_per_step"), across);
        }
        cJSON_Delete(rep);
    }
    cJSON_Delete(flat);
    CHECK(train_cli((const char *[]){"train", "-q", "--ranks-per-node", "-1", NULL}) == 1 &&
              strstr(zero_last_error(), "train.ranks_per_node = -1"),
          "--ranks-per-node -1: '%s'", zero_last_error());
}

/* A ds_config.json like DeepSpeed's documentation examples runs (in fp16 now, with its loss
 * scaling keys), and says what it ignored. */
static void test_deepspeed_config(const char *path) {
    int ranks = 2, stage = 3;
    if (!engine_runs(2, 3)) {
        ranks = engine_runs(2, 0) ? 2 : 1;
        stage = 0;
        printf("SKIP DeepSpeed example at stage 3 on 2 ranks: running %d rank(s) at stage 0\n",
               ranks);
    }
    char r[16], s[16], report[600];
    snprintf(r, sizeof r, "%d", ranks);
    snprintf(s, sizeof s, "%d", stage);
    snprintf(report, sizeof report, "%s/ds.json", dir);
    warnings[0] = 0;
    const char *args[] = {"train", "-q",      "--no-peak", "--config",      path,   "--ranks",
                          r,       "--stage", s,           "--json-report", report, NULL};
    int rc = train_cli(args);
    CHECK(rc == 0, "DeepSpeed example config failed: %s", zero_last_error());
    CHECK(!strstr(warnings, "'fp16' ignored") && !strstr(warnings, "offload_optimizer") &&
              !strstr(warnings, "offload_param"),
          "fp16, offload_optimizer and offload_param are supported now, yet: %s", warnings);
    cJSON *root = rc == 0 ? load_json(report) : NULL;
    if (root) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "compute_dtype");
        CHECK(cJSON_IsString(dt) && !strcmp(dt->valuestring, "fp16"), "compute_dtype %s",
              cJSON_IsString(dt) ? dt->valuestring : "?");
        /* dynamic scaling from 2^16: a power of two, halved once per skip after the first
         * hysteresis unit, never grown within 20 steps (window 1000) */
        double ls = num(root, "loss_scale"), sk = num(root, "skipped_steps");
        CHECK(ls >= 1 && ls <= 65536 && ls == exp2(round(log2(ls))) && sk >= 0 && sk < 20 &&
                  (sk < 2 ? ls == 65536 : ls == 65536 / exp2(sk - 1)),
              "fp16 loss scale %g after %g skipped steps", ls, sk);
        /* train_batch_size 8 over the world: the micro-batch follows */
        CHECK(num(root, "micro_batch") == 8 / ranks, "micro_batch %g", num(root, "micro_batch"));
        CHECK(num(root, "world_size") == ranks && num(root, "stage") == stage, "world/stage");
        cJSON_Delete(root);
    }
    unlink(report);
}

int main(int argc, char **argv) {
    zero_log_set_callback(capture, NULL);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-ranks-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(cfgpath, sizeof cfgpath, "%s/tiny.json", dir);
    FILE *f = fopen(cfgpath, "w");
    if (!f) return 1;
    fputs(tiny, f);
    fclose(f);

    /* usage errors specific to ranks */
    CHECK(train_cli((const char *[]){"train", "-q", "--ranks", "0", NULL}) == 1 &&
              strstr(zero_last_error(), "train.ranks = 0"),
          "--ranks 0: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--backend", "tcp", NULL}) == 1 &&
              strstr(zero_last_error(), "auto|threads|mpi"),
          "--backend tcp: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--stage", "4", NULL}) == 1 &&
              strstr(zero_last_error(), "zero_optimization.stage = 4"),
          "--stage 4: '%s'", zero_last_error());

    /* rank 0 cannot open its metrics log: every rank stops, none waits for it */
    if (engine_runs(2, 0)) {
        double t0 = zero_time_now();
        CHECK(
            train_cli((const char *[]){"train", "-q", "--no-peak", "--config", cfgpath, "--ranks",
                                       "2", "--metrics", "/nonexistent/dir/m.jsonl", NULL}) == 1 &&
                strstr(zero_last_error(), "/nonexistent/dir/m.jsonl") && zero_time_now() - t0 < 10,
            "bad metrics path: '%s'", zero_last_error());
    }
    test_stages();
    test_nodes();
    if (argc > 1) test_deepspeed_config(argv[1]);
    unlink(cfgpath);
    rmdir(dir);
    return check_report();
}
