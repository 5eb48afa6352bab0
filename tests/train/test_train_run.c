/* test_train_run.c — `zero train` end to end (src/cli/train.c over src/train/trainer.c).
 *
 * A short run on tinyshakespeare ($ZERO_SHARED_DIR/data/tinyshakespeare.txt; the built-in corpus
 * when it is absent) must bring the validation loss well below the unigram entropy of the
 * validation text (a model that ignores context cannot beat it), starting near ln(256); the JSON
 * report must hold the promised keys with consistent values (flops_per_s = tokens_per_s x
 * (6 params + 12 L T C), mfu = flops / peak). Bad input through the command line — missing or
 * empty data, a config with heads not dividing dim, unknown options — must fail with exit codes
 * 1 (error) or 2 (usage). Then the same run in bf16 (--dtype bf16): its validation loss must end
 * within 3% of the fp32 run's (issue 6), with no skipped step, and its report must say bf16 with
 * a loss scale of 1.
 */
#include "check.h"
#include "cli/cli.h"
#include "zero/zero.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"

static double num(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    CHECK(cJSON_IsNumber(it), "report has no number '%s'", key);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

/* 1 when /proc/cpuinfo's flags list `flag` (the kernel's names, e.g. avx512_bf16). */
static int cpu_flag(const char *flag) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[8192];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5)) continue;
        for (char *tok = strtok(line, " \t\n"); tok && !found; tok = strtok(NULL, " \t\n"))
            found = !strcmp(tok, flag);
        break;
    }
    if (f) fclose(f);
    return found;
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char dir[256], report[512], empty[512], cfgpath[512], data[512];
    snprintf(dir, sizeof dir, "%s/zero-test-train-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(empty, sizeof empty, "%s/empty.txt", dir);
    snprintf(cfgpath, sizeof cfgpath, "%s/heads.json", dir);
    FILE *f = fopen(empty, "w");
    fclose(f);
    f = fopen(cfgpath, "w");
    fprintf(f, "{\"model\": {\"layers\": 1, \"heads\": 5, \"dim\": 64}}\n");
    fclose(f);

    /* usage and errors */
    CHECK(train_cli((const char *[]){"train", "--help", NULL}) == 0, "--help");
    CHECK(train_cli((const char *[]){"train", "--bogus", NULL}) == 2, "unknown option");
    CHECK(train_cli((const char *[]){"train", "--steps", NULL}) == 2, "missing value");
    CHECK(train_cli((const char *[]){"train", "--print-config", "--set", "model.layers=3", NULL}) ==
              0,
          "--print-config");
    /* --flag=value, DeepSpeed's --deepspeed_config, a flag where a value belongs (issue 12), a
     * switch given a value, and a flag that replaces a bad value of the file (the file's value
     * for a key the command line sets is not read). */
    CHECK(train_cli((const char *[]){"train", "--print-config", "--steps=3", "--set=model.layers=2",
                                     "--deepspeed_config", cfgpath, "--set", "model.heads=2",
                                     NULL}) == 0,
          "--flag=value, --deepspeed_config, --set over a bad file value: %s", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "--print-config",
                                     "--deepspeed-config=/nonexistent.json", NULL}) == 1 &&
              strstr(zero_last_error(), "/nonexistent.json"),
          "--deepspeed-config=FILE is --config: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "--steps", "--config", cfgpath, NULL}) == 2,
          "--steps --config x: a flag where the value belongs");
    CHECK(train_cli((const char *[]){"train", "--print-config=yes", NULL}) == 2,
          "a switch with a value");
    CHECK(train_cli((const char *[]){"train", "--print-config", "--config", cfgpath, NULL}) == 1 &&
              strstr(zero_last_error(), "model.heads = 5"),
          "the file's heads 5 without --set fails: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--data", "/nonexistent/input.txt", NULL}) == 1,
          "missing data file");
    CHECK(strstr(zero_last_error(), "/nonexistent/input.txt") != NULL, "message: '%s'",
          zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--data", empty, NULL}) == 1,
          "empty data file");
    CHECK(strstr(zero_last_error(), "empty") != NULL, "message: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--config", cfgpath, NULL}) == 1,
          "heads not dividing dim");
    CHECK(strstr(zero_last_error(), "model.heads = 5") != NULL, "message: '%s'", zero_last_error());
    CHECK(train_cli((const char *[]){"train", "-q", "--set", "model.seq=0", NULL}) == 1, "seq 0");
    /* the report is written atomically: an unwritable place fails, naming it */
    char bad_report[600];
    snprintf(bad_report, sizeof bad_report, "%s/missing-dir/report.json", dir);
    const char *tiny[] = {"train", TINY_RUN_ARGS, "--json-report", bad_report, NULL};
    CHECK(train_cli(tiny) == 1, "report into a missing directory");
    CHECK(strstr(zero_last_error(), "missing-dir") != NULL, "message: '%s'", zero_last_error());
    snprintf(bad_report, sizeof bad_report, "%s/", dir);
    CHECK(train_cli(tiny) == 1, "report path naming a directory");
    CHECK(strstr(zero_last_error(), "expected a file name") != NULL, "message: '%s'",
          zero_last_error());

    /* the short run */
    test_data_path(data, sizeof data);
    const char *args[] = {"train",
                          "--data",
                          data,
                          "--steps",
                          "500",
                          "--set",
                          "model.layers=2",
                          "--set",
                          "model.heads=4",
                          "--set",
                          "model.dim=64",
                          "--set",
                          "model.seq=64",
                          "--set",
                          "train_micro_batch_size_per_gpu=8",
                          "--set",
                          "optimizer.params.lr=4e-3",
                          "--set",
                          "scheduler.type=WarmupCosineLR",
                          "--set",
                          "scheduler.params.warmup_num_steps=10",
                          "--set=scheduler.params.warmup_type=linear",
                          "--set=scheduler.params.cos_min_ratio=0.1",
                          "--set=gradient_clipping=1",
                          "--set=optimizer.params.betas=0.9,0.95",
                          "--set=optimizer.params.weight_decay=0.1",
                          "--set",
                          "train.eval_interval=100",
                          "--set",
                          "train.sample_tokens=80",
                          "--set",
                          "train.samples=1",
                          "--set",
                          "steps_per_print=50",
                          "--json-report",
                          report,
                          NULL};
    double t0 = zero_time_now();
    int rc = train_cli(args);
    double secs = zero_time_now() - t0;
    CHECK(rc == 0, "training run failed: %s", zero_last_error());
    printf("run took %.1f s\n", secs);
    char *text = slurp(report);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root != NULL, "report %s missing or not JSON", report);
    CHECK(text && text[0] && text[strlen(text) - 1] == '\n', "report does not end in a newline");
    char leftover[600];
    snprintf(leftover, sizeof leftover, "%s/.report.json.tmp", dir);
    CHECK(access(leftover, F_OK) != 0, "temporary file %s left behind", leftover);
    if (root) {
        double val = num(root, "final_val_loss"), init = num(root, "initial_val_loss");
        double uni = num(root, "unigram_entropy"), train = num(root, "final_train_loss");
        double tps = num(root, "tokens_per_s"), fps = num(root, "flops_per_s");
        double peak = num(root, "matmul_peak_flops_per_s"), mfu = num(root, "mfu");
        double params = num(root, "params");
        printf("losses: initial %.3f, final val %.3f, train %.3f, unigram %.3f\n", init, val, train,
               uni);
        CHECK(fabs(init - log(256.0)) < 0.1, "initial loss %.3f, expected about ln 256", init);
        CHECK(val < uni - 0.6, "validation loss %.3f is not well below the unigram %.3f", val, uni);
        CHECK(isfinite(train) && train < uni, "train loss %.3f", train);
        double C = 64, L = 2, T = 64, V = 256;
        double want_params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
        CHECK(params == want_params, "params %.0f, expected %.0f", params, want_params);
        double fpt = 6 * want_params + 12 * L * T * C;
        CHECK(fabs(fps - tps * fpt) <= 1e-6 * fps, "flops_per_s %.4g != tokens/s x %.0f", fps, fpt);
        CHECK(tps > 0 && peak > 0 && fabs(mfu - fps / peak) <= 1e-9, "mfu %.4g peak %.4g", mfu,
              peak);
        cJSON_Delete(root);
    }
    free(text);

    /* the same run in bf16 */
    char report16[600];
    snprintf(report16, sizeof report16, "%s/report-bf16.json", dir);
    const char *args16[64];
    int n16 = 0;
    for (int i = 0; args[i]; i++) args16[n16++] = strcmp(args[i], report) ? args[i] : report16;
    args16[n16++] = "--dtype";
    args16[n16++] = "bf16";
    args16[n16] = NULL;
    t0 = zero_time_now();
    rc = train_cli(args16);
    CHECK(rc == 0, "bf16 training run failed: %s", zero_last_error());
    printf("bf16 run took %.1f s\n", zero_time_now() - t0);
    char *text16 = slurp(report16), *text32 = slurp(report);
    cJSON *r16 = text16 ? cJSON_Parse(text16) : NULL, *r32 = text32 ? cJSON_Parse(text32) : NULL;
    CHECK(r16 && r32, "reports %s / %s missing", report16, report);
    if (r16 && r32) {
        double v16 = num(r16, "final_val_loss"), v32 = num(r32, "final_val_loss");
        printf("validation loss: fp32 %.4f, bf16 %.4f (%+.2f%%); tokens/s fp32 %.0f, bf16 %.0f\n",
               v32, v16, 100 * (v16 - v32) / v32, num(r32, "tokens_per_s"),
               num(r16, "tokens_per_s"));
        CHECK(fabs(v16 - v32) <= 0.03 * v32,
              "bf16 validation loss %.4f is not within 3%% of fp32's %.4f", v16, v32);
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(r16, "compute_dtype");
        CHECK(cJSON_IsString(dt) && !strcmp(dt->valuestring, "bf16"), "bf16 report dtype");
        /* the bf16 GEMMs' path against the CPU's own flags: AMX or the AVX512-BF16 dot products
         * where the CPU has them (oneDNN picks one of the two), a conversion to fp32 elsewhere */
        const cJSON *p16 = cJSON_GetObjectItemCaseSensitive(r16, "matmul_path"),
                    *p32 = cJSON_GetObjectItemCaseSensitive(r32, "matmul_path");
        const char *path = cJSON_IsString(p16) ? p16->valuestring : "";
        const int amx = cpu_flag("amx_bf16"), dot = cpu_flag("avx512_bf16");
        CHECK(amx || dot ? !strcmp(path, "AVX512-BF16") || (amx && !strcmp(path, "AMX"))
                         : !strcmp(path, "oneDNN") || !strcmp(path, "widening"),
              "bf16 matmul path '%s' on a CPU with%s amx_bf16 and with%s avx512_bf16", path,
              amx ? "" : "out", dot ? "" : "out");
        CHECK(cJSON_IsString(p32) && !strcmp(p32->valuestring, "fp32"), "fp32 matmul path");
        CHECK(num(r16, "loss_scale") == 1.0 && num(r16, "skipped_steps") == 0,
              "bf16: loss scale %g, %g skipped steps", num(r16, "loss_scale"),
              num(r16, "skipped_steps"));
    }
    cJSON_Delete(r16);
    cJSON_Delete(r32);
    free(text16);
    free(text32);
    unlink(report16);
    unlink(report);
    unlink(empty);
    unlink(cfgpath);
    rmdir(dir);
    return check_report();
}
