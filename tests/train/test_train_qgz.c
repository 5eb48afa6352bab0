/* test_train_qgz.c — `zero train` with ZeRO++ qgZ (zero_optimization.zero_quantized_gradients):
 * stage 3 on 4 thread ranks as 2 simulated nodes of 2 (--ranks-per-node 2), a short run on
 * tinyshakespeare ($ZERO_SHARED_DIR/data/tinyshakespeare.txt; the built-in corpus when it is
 * absent): qgZ off and on in fp32 and bf16, LoCo on, and qwZ + hpZ + qgZ together.
 *
 * Oracles: (1) convergence: each quantized run's final validation loss within 1% of the
 * unquantized run's of the same dtype (the gradients' int4 rounding is noise around the exact
 * mean: a run that averaged over the wrong number of ranks takes steps of another size and is
 * also caught by the gradient norm, which must be within 5% of the unquantized run's at the
 * first step, the weights being the same); (2) the gradient bytes per step: measured equal to the
 * report's theory and to the closed form 3 W_u per unit (L - 1 = 1 peer in the node gets M = 2
 * blocks, 1 peer across gets one), W_u = 4 ceil(S_u / 256) + ceil(S_u / 2), S_u = P_u / 4; (3) with
 * qwZ + hpZ + qgZ, the bytes to the other node per step equal to the closed form sum_u (S_u + 4
 * ceil(S_u / 256)
 * + W_u) + 32 (the step's first gather of each unit at int8 across, every later gather inside
 * the node, the int4 gradient's W_u across, the control record) and to the theory, and at most
 * 0.25x plain stage 3's; (4) memory equal to the theory in every category the engine predicts,
 * and LoCo's gradient memory that of qgZ plus the closed form 4 sum_u P_u; (5) LoCo without
 * qgZ fails, naming both keys.
 */
#include "check.h"
#include "cli/cli.h"
#include "zero/zero.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

/* The model of the run: 2 layers, dim 64, seq 64, vocabulary 256, every unit sharded. */
#define C 64
#define L 2
#define T 64
#define V 256
#define RANKS 4

static double q4_bytes(double S) { return 4 * ceil(S / 256) + ceil(S / 2); }

static char metrics[512];
static double first_norm; /* the gradient norm of the last run's first step */

/* A run with the given --set values (NULL-terminated). */
static cJSON *run(const char *data, const char *dtype, const char *report, const char *what,
                  const char *const *sets) {
    const char *args[64] = {"train",
                            "-q",
                            "--no-peak",
                            "--data",
                            data,
                            "--ranks",
                            "4",
                            "--ranks-per-node",
                            "2",
                            "--stage",
                            "3",
                            "--dtype",
                            dtype,
                            "--steps",
                            "200",
                            "--set",
                            "model.layers=2",
                            "--set",
                            "model.heads=4",
                            "--set",
                            "model.dim=64",
                            "--set",
                            "model.seq=64",
                            "--set",
                            "train_micro_batch_size_per_gpu=2",
                            "--set",
                            "optimizer.params.lr=1e-3",
                            "--set=gradient_clipping=1",
                            "--set=zero_optimization.stage3_param_persistence_threshold=0",
                            "--set",
                            "train.eval_interval=0",
                            "--set",
                            "train.samples=0",
                            "--json-report",
                            report,
                            "--metrics",
                            metrics,
                            NULL};
    int n = 0;
    while (args[n]) n++;
    for (int k = 0; sets && sets[k]; k++) {
        args[n++] = "--set";
        args[n++] = sets[k];
    }
    double t0 = zero_time_now();
    int rc = train_cli(args);
    CHECK(rc == 0, "%s %s run: %s", dtype, what, zero_last_error());
    printf("%s %s: %.1f s\n", dtype, what, zero_time_now() - t0);
    first_norm = NAN;
    FILE *f = fopen(metrics, "r");
    char line[4096];
    if (f && fgets(line, sizeof line, f)) {
        cJSON *m = cJSON_Parse(line);
        first_norm = json_num(m, "grad_norm");
        cJSON_Delete(m);
    }
    if (f) fclose(f);
    return rc ? NULL : load_json(report);
}

static const cJSON *rank_of(const cJSON *r, int k) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "per_rank"), k);
}
static double sub(const cJSON *o, const char *obj, const char *key) {
    return json_num(cJSON_GetObjectItemCaseSensitive(o, obj), key);
}

/* Measured memory equal to the theory where the engine has one (parameters, gradients,
 * optimizer states, communication buffers). */
static void check_memory(const cJSON *r, const char *what) {
    static const char *cats[] = {"parameters", "gradients", "optimizer_states", "comm_buffers"};
    for (int k = 0; r && k < RANKS; k++)
        for (int c = 0; c < 4; c++) {
            const double m = sub(rank_of(r, k), "memory_bytes", cats[c]),
                         t = sub(rank_of(r, k), "memory_theory_bytes", cats[c]);
            CHECK(m == t && m > 0, "%s rank %d: %s memory %.0f, theory %.0f", what, k, cats[c], m,
                  t);
        }
}

static void check_loss(const cJSON *base, const cJSON *r, const char *what) {
    if (!base || !r) return;
    const double v0 = json_num(base, "final_val_loss"), v1 = json_num(r, "final_val_loss");
    printf("%s: validation loss %.4f, unquantized %.4f (%+.2f%%)\n", what, v1, v0,
           100 * (v1 - v0) / v0);
    CHECK(isfinite(v1) && fabs(v1 - v0) <= 0.01 * v0,
          "%s: validation loss %.4f is not within 1%% of the unquantized %.4f", what, v1, v0);
    CHECK(v1 != v0, "%s: the loss equals the unquantized run's: was it on?", what);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[256], report[512], data[512];
    snprintf(dir, sizeof dir, "%s/zero-test-qgz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    test_data_path(data, sizeof data);
    size_t sizes[8];
    const size_t nu = gpt_unit_sizes(sizes, C, L, T, V, RANKS);
    double W = 0, Q8 = 0, P = 0;
    for (size_t u = 0; u < nu; u++) {
        const double S = (double)(sizes[u] / RANKS);
        W += q4_bytes(S);
        Q8 += S + 4 * ceil(S / 256);
        P += (double)sizes[u];
    }
    static const char *const qgz[] = {"zero_optimization.zero_quantized_gradients=true", NULL};
    static const char *const loco[] = {"zero_optimization.zero_quantized_gradients=true",
                                       "zero_optimization.zeropp_loco_param.err_beta=0.8", NULL};
    static const char *const all3[] = {"zero_optimization.zero_quantized_gradients=true",
                                       "zero_optimization.zero_quantized_weights=true",
                                       "zero_optimization.zero_hpz_partition_size=2", NULL};
    const char *dtypes[] = {"fp32", "bf16"};
    for (int d = 0; d < 2; d++) {
        cJSON *base = run(data, dtypes[d], report, "plain", NULL);
        const double norm0 = first_norm;
        cJSON *q = run(data, dtypes[d], report, "qgZ", qgz);
        /* the first step's gradient norm (same weights): the mean's, not L or M times it */
        printf("%s: first gradient norm %.5f, unquantized %.5f\n", dtypes[d], first_norm, norm0);
        CHECK(fabs(first_norm - norm0) <= 0.05 * norm0,
              "%s qgZ: first gradient norm %.5f, unquantized %.5f", dtypes[d], first_norm, norm0);
        check_loss(base, q, d ? "bf16 qgZ" : "fp32 qgZ");
        check_memory(base, "plain");
        check_memory(q, "qgZ");
        for (int k = 0; q && base && k < RANKS; k++) {
            const cJSON *o = rank_of(q, k);
            const double sent = sub(o, "comm_sent_bytes_per_step_by_kind", "grads"),
                         theory = sub(o, "comm_theory_bytes_per_step_by_kind", "grads");
            printf("%s qgZ rank %d: gradient bytes per step %.0f (theory %.0f, closed form %.0f, "
                   "plain %.0f)\n",
                   dtypes[d], k, sent, theory, 3 * W,
                   sub(rank_of(base, k), "comm_sent_bytes_per_step_by_kind", "grads"));
            CHECK(sent == 3 * W && theory == 3 * W,
                  "%s qgZ rank %d: gradient bytes %.0f, theory %.0f, closed form %.0f", dtypes[d],
                  k, sent, theory, 3 * W);
            CHECK(json_num(o, "comm_inter_node_bytes_per_step") ==
                      json_num(o, "comm_inter_node_theory_bytes_per_step"),
                  "%s qgZ rank %d: bytes to the other node %.0f, theory %.0f", dtypes[d], k,
                  json_num(o, "comm_inter_node_bytes_per_step"),
                  json_num(o, "comm_inter_node_theory_bytes_per_step"));
        }
        if (d == 0) {
            cJSON *lo = run(data, dtypes[d], report, "qgZ + LoCo", loco);
            check_loss(base, lo, "fp32 qgZ + LoCo");
            check_memory(lo, "qgZ + LoCo");
            for (int k = 0; lo && q && k < RANKS; k++) {
                const double g0 = sub(rank_of(q, k), "memory_bytes", "gradients"),
                             g1 = sub(rank_of(lo, k), "memory_bytes", "gradients");
                CHECK(g1 - g0 == 4 * P,
                      "LoCo rank %d: gradient memory %.0f, qgZ's %.0f + 4P = %.0f", k, g1, g0,
                      g0 + 4 * P);
            }
            cJSON *a = run(data, dtypes[d], report, "qwZ + hpZ + qgZ", all3);
            check_loss(base, a, "fp32 qwZ + hpZ + qgZ");
            check_memory(a, "qwZ + hpZ + qgZ");
            for (int k = 0; a && base && k < RANKS; k++) {
                const double inter = json_num(rank_of(a, k), "comm_inter_node_bytes_per_step"),
                             theory =
                                 json_num(rank_of(a, k), "comm_inter_node_theory_bytes_per_step"),
                             plain = json_num(rank_of(base, k), "comm_inter_node_bytes_per_step"),
                             want = Q8 + W + 32;
                printf("qwZ + hpZ + qgZ rank %d: to the other node %.0f per step (theory %.0f, "
                       "closed form %.0f), plain stage 3 %.0f: %.4fx\n",
                       k, inter, theory, want, plain, inter / plain);
                CHECK(inter == want && theory == want,
                      "qwZ + hpZ + qgZ rank %d: bytes to the other node %.0f, theory %.0f, "
                      "closed form %.0f",
                      k, inter, theory, want);
                CHECK(inter <= 0.25 * plain, "qwZ + hpZ + qgZ rank %d: %.0f > 0.25 x %.0f", k,
                      inter, plain);
            }
            cJSON_Delete(lo);
            cJSON_Delete(a);
        }
        cJSON_Delete(base);
        cJSON_Delete(q);
    }
    /* LoCo without qgZ: a named error before training */
    const char *bad[] = {"train",   "-q",    "--no-peak",
                         "--ranks", "2",     "--steps",
                         "1",       "--set", "zero_optimization.zeropp_loco_param.reset_T=5",
                         NULL};
    const int rc = train_cli(bad);
    CHECK(rc != 0 && strstr(zero_last_error(), "zeropp_loco_param") &&
              strstr(zero_last_error(), "zero_quantized_gradients"),
          "LoCo without qgZ: exit %d, '%s'", rc, zero_last_error());
    unlink(report);
    unlink(metrics);
    rmdir(dir);
    return check_report();
}
