/* test_train_mpi.c — `zero train` under `mpirun -np 2` against the threads backend with 2 ranks:
 * the same config must give the same weights_fingerprint (the comm layer sums in rank order on
 * both backends, so the weights are bitwise equal), at stage 0 and, when the engine runs it,
 * stage 3; and at stage 2 with the optimizer's states on NVMe (swap files of each process), and
 * at stage 3 with parameters, gradient accumulators and optimizer states there; and at stage 3
 * with ZeRO++ qwZ (int8 parameter gathers) in fp32 and bf16, and with hpZ 2 (equal to plain stage
 * 3), and with qgZ (int4 gradient all-to-alls) with LoCo in fp32 and with qwZ in bf16; and, on 4
 * ranks, an MoE-GPT with expert parallelism (ep_size 1, 2 at stage 3, 4), whose three
 * fingerprints must also be one; and FP8 compute (delayed in bf16 at stage 3 on 2 ranks,
 * blockwise in fp32 at stage 1 on 4 ranks, and with fp8.weight_gather at stage 3 on 2 ranks:
 * the 1-byte parameter gathers).
 *
 * Arguments: the `zero` program and the MPI launcher (CTest passes both). Runs them as child
 * processes; when the engine does not run 2 ranks yet the case prints SKIP.
 */
#include "check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static char dir[256];

/* Run a shell command with stderr captured to dir/err.txt; returns the exit status. */
static int run(const char *cmd, char *err, size_t err_size) {
    char full[4096], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/err.txt", dir);
    snprintf(full, sizeof full, "%s 2>%s", cmd, errpath);
    printf("$ %s\n", cmd);
    fflush(stdout);
    int rc = system(full);
    char *e = slurp(errpath);
    snprintf(err, err_size, "%s", e ? e : "");
    free(e);
    unlink(errpath);
    return rc;
}

static char *fingerprint_of(const char *report, int ranks) {
    char *text = slurp(report);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(root, "weights_fingerprint");
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(root, "world_size");
    CHECK(cJSON_IsNumber(ws) && ws->valuedouble == ranks, "%s: world_size is not %d", report,
          ranks);
    char *out = cJSON_IsString(fp) ? strdup(fp->valuestring) : NULL;
    CHECK(out != NULL, "%s has no weights_fingerprint", report);
    cJSON_Delete(root);
    unlink(report);
    return out;
}

/* Runs cfg on `ranks` thread ranks and under mpirun -np `ranks` and checks the fingerprints are
 * equal; returns the threads run's fingerprint (malloc; NULL when a run failed or was skipped). */
static char *compare_np(const char *zero, const char *mpirun, const char *cfg, int stage,
                        int ranks) {
    char cmd[2048], err[8192], a[512], b[512];
    snprintf(a, sizeof a, "%s/threads-%d.json", dir, stage);
    snprintf(b, sizeof b, "%s/mpi-%d.json", dir, stage);
    snprintf(cmd, sizeof cmd,
             "%s train -q --no-peak --config %s --ranks %d --stage %d "
             "--json-report %s",
             zero, cfg, ranks, stage, a);
    int rc = run(cmd, err, sizeof err);
    if (rc != 0 && (strstr(err, "one rank only") || strstr(err, "not implemented"))) {
        printf("SKIP stage %d: the engine does not run 2 ranks yet: %s", stage, err);
        return NULL;
    }
    CHECK(rc == 0, "threads run failed (%d): %s", rc, err);
    snprintf(cmd, sizeof cmd,
             "%s --allow-run-as-root --oversubscribe -np %d %s train -q --no-peak --config %s "
             "--stage %d --json-report %s",
             mpirun, ranks, zero, cfg, stage, b);
    rc = run(cmd, err, sizeof err);
    CHECK(rc == 0, "mpirun run failed (%d): %s", rc, err);
    if (rc) return NULL;
    char *fa = fingerprint_of(a, ranks), *fb = fingerprint_of(b, ranks);
    printf("stage %d: threads %s, mpi %s\n", stage, fa ? fa : "-", fb ? fb : "-");
    CHECK(fa && fb && !strcmp(fa, fb), "stage %d: threads %s vs MPI %s", stage, fa ? fa : "-",
          fb ? fb : "-");
    free(fb);
    return fa;
}

static char *compare(const char *zero, const char *mpirun, const char *cfg, int stage) {
    return compare_np(zero, mpirun, cfg, stage, 2);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_train_mpi ZERO_PROGRAM MPIRUN\n");
        return 2;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-mpi-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/tiny.json", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) return 1;
    fputs("{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
          " \"data\": {\"builtin_bytes\": 65536},\n"
          " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
          " \"zero_optimization\": {\"reduce_bucket_size\": 5000},\n"
          " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, \"samples\": 1,\n"
          "           \"sample_tokens\": 8}}\n",
          f);
    fclose(f);
    free(compare(argv[1], argv[2], cfg, 0));
    char *plain3 = compare(argv[1], argv[2], cfg, 3);
    /* ZeRO++ qwZ (int8 parameter gathers), fp32 and bf16: both backends quantize the same
     * shards and dequantize every rank's part the same way. The run must differ from plain
     * stage 3 (the forward saw quantized weights), or qwZ was not on. */
    char qcfg[512];
    snprintf(qcfg, sizeof qcfg, "%s/tiny-qwz.json", dir);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        f = fopen(qcfg, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
                " \"data\": {\"builtin_bytes\": 65536}, \"bf16\": {\"enabled\": %s},\n"
                " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
                " \"zero_optimization\": {\"reduce_bucket_size\": 5000, "
                "\"stage3_param_persistence_threshold\": 0, \"zero_quantized_weights\": true},\n"
                " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, "
                "\"samples\": 1,\n"
                "           \"sample_tokens\": 8}}\n",
                bf16 ? "true" : "false");
        fclose(f);
        char *q = compare(argv[1], argv[2], qcfg, 3);
        if (!bf16)
            CHECK(q && plain3 && strcmp(q, plain3),
                  "qwZ's weights %s equal plain stage 3's %s: was it on?", q ? q : "-",
                  plain3 ? plain3 : "-");
        free(q);
    }
    /* ZeRO++ hpZ 2 (groups of both ranks), with gradient accumulation 2: bitwise plain stage 3
     * on both backends */
    f = fopen(qcfg, "w");
    if (!f) return 1;
    fputs(
        "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
        " \"data\": {\"builtin_bytes\": 65536},\n"
        " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
        " \"zero_optimization\": {\"reduce_bucket_size\": 5000, \"zero_hpz_partition_size\": 2},\n"
        " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, \"samples\": 1,\n"
        "           \"sample_tokens\": 8}}\n",
        f);
    fclose(f);
    char *hp = compare(argv[1], argv[2], qcfg, 3);
    CHECK(hp && plain3 && !strcmp(hp, plain3), "hpZ's weights %s differ from plain stage 3's %s",
          hp ? hp : "-", plain3 ? plain3 : "-");
    free(hp);
    /* ZeRO++ qgZ (int4 gradient all-to-alls): fp32 with LoCo, bf16 with qwZ (one node: the
     * trainer takes MPI's nodes; test_qgz_mpi_np4 runs 2 nodes x 2); the arithmetic is the
     * engine's, the backends only move bytes, so the weights are the same bits */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        f = fopen(qcfg, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
                " \"data\": {\"builtin_bytes\": 65536}, \"bf16\": {\"enabled\": %s},\n"
                " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
                " \"zero_optimization\": {\"reduce_bucket_size\": 5000, "
                "\"zero_quantized_gradients\": true, %s},\n"
                " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, "
                "\"samples\": 0}}\n",
                bf16 ? "true" : "false",
                bf16 ? "\"zero_quantized_weights\": true"
                     : "\"zeropp_loco_param\": {\"err_beta\": 0.8, \"reset_T\": 1024}");
        fclose(f);
        char *q = compare(argv[1], argv[2], qcfg, 3);
        if (!bf16)
            CHECK(q && plain3 && strcmp(q, plain3),
                  "qgZ's weights %s equal plain stage 3's %s: was it on?", q ? q : "-",
                  plain3 ? plain3 : "-");
        free(q);
    }
    free(plain3);
    unlink(qcfg);
    /* the optimizer's states on NVMe: swap files per process (MPI) or per thread rank */
    char nvme[512], swap[300];
    snprintf(nvme, sizeof nvme, "%s/tiny-nvme.json", dir);
    snprintf(swap, sizeof swap, "%s/swap", dir);
    f = fopen(nvme, "w");
    if (!f || mkdir(swap, 0700) != 0) return 1;
    fprintf(f,
            "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
            " \"data\": {\"builtin_bytes\": 65536},\n"
            " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
            " \"zero_optimization\": {\"sub_group_size\": 4096, \"offload_optimizer\": "
            "{\"device\": \"nvme\", \"nvme_path\": \"%s\"}},\n"
            " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, "
            "\"samples\": 0}}\n",
            swap);
    fclose(f);
    free(compare(argv[1], argv[2], nvme, 2));
    /* stage 3 with everything on NVMe: parameter shards, gradient accumulators, m and v */
    f = fopen(nvme, "w");
    if (!f) return 1;
    fprintf(f,
            "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
            " \"data\": {\"builtin_bytes\": 65536},\n"
            " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
            " \"zero_optimization\": {\"reduce_bucket_size\": 5000, \"sub_group_size\": 4096,\n"
            "   \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\"},\n"
            "   \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
            "\"buffer_count\": 3}},\n"
            " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, "
            "\"samples\": 0}}\n",
            swap, swap);
    fclose(f);
    free(compare(argv[1], argv[2], nvme, 3));
    /* the same with the optimizer's updates in backward (offload_optimizer.overlap_step: on with
     * gradient_clipping 0; persistence 0 so that the blocks are sharded), bf16: threads equal
     * MPI, and both equal the run with the key false; the metrics show units updated in
     * backward (none with the key false) */
    char *ov[2] = {NULL, NULL};
    for (int on = 1; on >= 0; on--) {
        f = fopen(nvme, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
                " \"data\": {\"builtin_bytes\": 65536}, \"bf16\": {\"enabled\": true},\n"
                " \"train_batch_size\": 16, \"gradient_accumulation_steps\": 2,\n"
                " \"gradient_clipping\": 0,\n"
                " \"zero_optimization\": {\"reduce_bucket_size\": 5000, \"sub_group_size\": 4096,\n"
                "   \"stage3_param_persistence_threshold\": 0,\n"
                "   \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
                "\"overlap_step\": %s},\n"
                "   \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s\", "
                "\"buffer_count\": 3}},\n"
                " \"train\": {\"steps\": 5, \"eval_interval\": 0, \"eval_batches\": 2, "
                "\"samples\": 0}}\n",
                swap, on ? "true" : "false", swap);
        fclose(f);
        ov[on] = compare(argv[1], argv[2], nvme, 3);
        char cmd[2048], err[8192], met[600];
        snprintf(met, sizeof met, "%s/overlap.jsonl", dir);
        snprintf(cmd, sizeof cmd,
                 "%s train -q --no-peak --config %s --ranks 2 --stage 3 --metrics %s", argv[1],
                 nvme, met);
        CHECK(run(cmd, err, sizeof err) == 0, "overlap %d metrics run: %s", on, err);
        int lines = 0, with = 0;
        char line[4096];
        FILE *m = fopen(met, "r");
        while (m && fgets(line, sizeof line, m)) {
            lines++;
            const char *k = strstr(line, "\"units_in_backward\": ");
            with += k && atoi(k + strlen("\"units_in_backward\": ")) > 0;
        }
        if (m) fclose(m);
        unlink(met);
        /* with the key, a unit waits in backward only until its first states are read (read
         * ahead while forward runs): which steps count one depends on the disk's timing */
        printf("overlap_step %d: %d of %d steps updated units in backward\n", on, with, lines);
        CHECK(lines == 5 && (on ? with >= 1 : with == 0),
              "overlap_step %d: %d of %d steps updated units in backward", on, with, lines);
    }
    CHECK(ov[0] && ov[1] && !strcmp(ov[0], ov[1]), "overlap_step on %s, off %s",
          ov[1] ? ov[1] : "-", ov[0] ? ov[0] : "-");
    free(ov[0]);
    free(ov[1]);
    CHECK(rmdir(swap) == 0, "swap files left in %s", swap);
    /* MoE expert parallelism on 4 ranks (blocks of ep_size exchanging tokens by all-to-all(v)):
     * MPI processes give the thread ranks' weights, and every ep gives ep 1's (gradient clipping
     * off: its factor would carry the norm's float64 rounding, which depends on the shards) */
    char *moe[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        f = fopen(nvme, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"model\": {\"layers\": 3, \"heads\": 2, \"dim\": 32, \"seq\": 16,\n"
                "   \"moe\": {\"experts\": 4, \"top_k\": 2, \"capacity_factor\": 1, "
                "\"min_capacity\": 0, \"shared_experts\": 1, \"ep_size\": %d}},\n"
                " \"data\": {\"builtin_bytes\": 65536}, \"gradient_clipping\": 0,\n"
                " \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 3,\n"
                " \"train\": {\"steps\": 2, \"eval_interval\": 0, \"eval_batches\": 1, "
                "\"samples\": 1, \"sample_tokens\": 8}}\n",
                1 << i);
        fclose(f);
        moe[i] = compare_np(argv[1], argv[2], nvme, i == 1 ? 3 : 1, 4);
    }
    CHECK(moe[0] && moe[1] && moe[2] && !strcmp(moe[0], moe[1]) && !strcmp(moe[0], moe[2]),
          "MoE at ep 1 %s, ep 2 %s, ep 4 %s", moe[0] ? moe[0] : "-", moe[1] ? moe[1] : "-",
          moe[2] ? moe[2] : "-");
    for (int i = 0; i < 3; i++) free(moe[i]);
    /* FP8 compute: the delayed recipe's amax all-reduce (MAX) and scales, and blockwise tiles,
     * give the thread ranks' weights under MPI too */
    static const char *const fp8[3] = {
        "\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true, \"amax_history_len\": 2}",
        "\"fp8\": {\"enabled\": true, \"recipe\": \"blockwise\", \"format\": \"e4m3\"}",
        "\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true, \"weight_gather\": true}, "
        "\"zero_optimization\": {\"stage3_param_persistence_threshold\": 0}"};
    for (int i = 0; i < 3; i++) {
        f = fopen(nvme, "w");
        if (!f) return 1;
        fprintf(f,
                "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 64, \"seq\": 16}, %s,\n"
                " \"data\": {\"builtin_bytes\": 65536}, \"train_micro_batch_size_per_gpu\": 2,\n"
                " \"gradient_accumulation_steps\": 2,\n"
                " \"train\": {\"steps\": 3, \"eval_interval\": 0, \"eval_batches\": 1, "
                "\"samples\": 0}}\n",
                fp8[i]);
        fclose(f);
        free(compare_np(argv[1], argv[2], nvme, i == 1 ? 1 : 3, i == 1 ? 4 : 2));
    }
    unlink(nvme);
    unlink(cfg);
    rmdir(dir);
    return check_report();
}
