/* test_train_qwz.c — `zero train` with ZeRO++ qwZ (zero_optimization.zero_quantized_weights):
 * stage 3 on 2 thread ranks as 2 simulated nodes (--ranks-per-node 1), the same short run on
 * tinyshakespeare ($ZERO_SHARED_DIR/data/tinyshakespeare.txt; the built-in corpus when it is
 * absent) with qwZ off and on, in fp32 and bf16.
 *
 * Oracles: (1) convergence: qwZ's final validation loss within 1% of the unquantized run's of
 * the same dtype (the forward and backward see int8-rounded weights, the optimizer the exact
 * ones). At a learning rate of 1e-3 the two runs stay close (-0.2% to +0.4% measured); at
 * 4e-3 this small model's trajectory is chaotic enough that runs differing in any rounding
 * spread by about 5% at 150-500 steps, quantized or not (seeds alone: 2.22 to 2.35), which no
 * tolerance separates from a fault. (2) the report's parameter bytes per step: measured equal
 * to its theory, and equal to the closed form of the model's units: w_u = S_u + 4 ceil(S_u /
 * 256) with qwZ (c S_u without) to the one other rank per gather, two gathers per unit and step
 * (forward, backward) and three for the embeddings (the token embedding is the output head
 * too: gathered for the input, again for the head, and held from the head's backward to the
 * embedding's); (3) the bytes to the other node: measured equal to theory; (4) fp32 with the
 * parameter shards on NVMe (offload_param): the same weights as in RAM, bitwise.
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

/* extra, extra2: more --set values (NULL: none). */
static cJSON *run(const char *data, const char *dtype, int qwz, const char *report,
                  const char *extra, const char *extra2) {
    const char *args[48] = {"train",
                            "-q",
                            "--no-peak",
                            "--data",
                            data,
                            "--ranks",
                            "2",
                            "--ranks-per-node",
                            "1",
                            "--stage",
                            "3",
                            "--dtype",
                            dtype,
                            "--steps",
                            "120",
                            "--set",
                            "model.layers=2",
                            "--set",
                            "model.heads=4",
                            "--set",
                            "model.dim=64",
                            "--set",
                            "model.seq=64",
                            "--set",
                            "train_micro_batch_size_per_gpu=4",
                            "--set",
                            "optimizer.params.lr=1e-3",
                            "--set=gradient_clipping=1",
                            "--set=zero_optimization.stage3_param_persistence_threshold=0",
                            qwz ? "--set=zero_optimization.zero_quantized_weights=true"
                                : "--set=zero_optimization.zero_quantized_weights=false",
                            "--set",
                            "train.eval_interval=0",
                            "--set",
                            "train.samples=0",
                            "--json-report",
                            report,
                            NULL};
    int n = 0;
    while (args[n]) n++;
    const char *extras[] = {extra, extra2};
    for (int k = 0; k < 2; k++)
        if (extras[k]) {
            args[n++] = "--set";
            args[n++] = extras[k];
        }
    double t0 = zero_time_now();
    int rc = train_cli(args);
    CHECK(rc == 0, "%s run, qwZ %d: %s", dtype, qwz, zero_last_error());
    printf("%s, qwZ %s: %.1f s\n", dtype, qwz ? "on" : "off", zero_time_now() - t0);
    return rc ? NULL : load_json(report);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[256], report[512], data[512];
    snprintf(dir, sizeof dir, "%s/zero-test-qwz-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    test_data_path(data, sizeof data);
    size_t sizes[8];
    const size_t nu = gpt_unit_sizes(sizes, C, L, T, V, 2);
    const char *dtypes[] = {"fp32", "bf16"};
    for (int d = 0; d < 2; d++) {
        cJSON *r[2];
        for (int q = 0; q < 2; q++) r[q] = run(data, dtypes[d], q, report, NULL, NULL);
        if (d == 0 && r[1]) { /* the parameter shards on NVMe: the same quantized run, bitwise */
            char nvme[300], path[400];
            snprintf(nvme, sizeof nvme, "%s/nvme", dir);
            snprintf(path, sizeof path, "zero_optimization.offload_param.nvme_path=%s", nvme);
            cJSON *o = mkdir(nvme, 0700) == 0
                           ? run(data, dtypes[d], 1, report,
                                 "zero_optimization.offload_param.device=nvme", path)
                           : NULL;
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(r[1], "weights_fingerprint"),
                        *b = cJSON_GetObjectItemCaseSensitive(o, "weights_fingerprint");
            CHECK(cJSON_IsString(a) && cJSON_IsString(b) && !strcmp(a->valuestring, b->valuestring),
                  "qwZ with offload_param nvme: fingerprint %s, in RAM %s",
                  cJSON_IsString(b) ? b->valuestring : "-",
                  cJSON_IsString(a) ? a->valuestring : "-");
            cJSON_Delete(o);
            CHECK(rmdir(nvme) == 0, "swap files left in %s", nvme);
        }
        const double c = d ? 2 : 4;
        for (int q = 0; q < 2 && r[0] && r[1]; q++) {
            double want = 0;
            for (size_t u = 0; u < nu; u++) {
                const double S = (double)(sizes[u] / 2);
                want += (u == 0 ? 3 : 2) * (q ? S + 4 * ceil(S / 256) : c * S);
            }
            const cJSON *per = cJSON_GetObjectItemCaseSensitive(r[q], "per_rank");
            for (int k = 0; k < cJSON_GetArraySize(per); k++) {
                const cJSON *o = cJSON_GetArrayItem(per, k);
                const double sent = json_num(cJSON_GetObjectItemCaseSensitive(
                                                 o, "comm_sent_bytes_per_step_by_kind"),
                                             "params"),
                             theory = json_num(cJSON_GetObjectItemCaseSensitive(
                                                   o, "comm_theory_bytes_per_step_by_kind"),
                                               "params");
                printf("%s qwZ %d rank %d: parameter bytes per step %.0f (theory %.0f, closed form "
                       "%.0f); to the other node %.0f (theory %.0f)\n",
                       dtypes[d], q, k, sent, theory, want,
                       json_num(o, "comm_inter_node_bytes_per_step"),
                       json_num(o, "comm_inter_node_theory_bytes_per_step"));
                CHECK(sent == want && theory == want,
                      "%s qwZ %d rank %d: parameter bytes %.0f, theory %.0f, closed form %.0f",
                      dtypes[d], q, k, sent, theory, want);
                CHECK(json_num(o, "comm_inter_node_bytes_per_step") ==
                              json_num(o, "comm_inter_node_theory_bytes_per_step") &&
                          json_num(o, "comm_inter_node_bytes_per_step") > 0,
                      "%s qwZ %d rank %d: bytes to the other node differ from theory", dtypes[d], q,
                      k);
            }
        }
        if (r[0] && r[1]) {
            const double v0 = json_num(r[0], "final_val_loss"),
                         v1 = json_num(r[1], "final_val_loss");
            printf("%s: validation loss without qwZ %.4f, with %.4f (%+.2f%%)\n", dtypes[d], v0, v1,
                   100 * (v1 - v0) / v0);
            CHECK(isfinite(v1) && fabs(v1 - v0) <= 0.01 * v0,
                  "%s: qwZ's validation loss %.4f is not within 1%% of %.4f", dtypes[d], v1, v0);
            CHECK(v1 != v0, "%s: qwZ's loss equals the unquantized run's: was it on?", dtypes[d]);
        }
        cJSON_Delete(r[0]);
        cJSON_Delete(r[1]);
    }
    unlink(report);
    rmdir(dir);
    return check_report();
}
