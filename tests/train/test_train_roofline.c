/* test_train_roofline.c — the run report's roofline and the sources of its matmul peak.
 *
 * The roofline (src/train/roofline.c) against its closed form for a tiny model, worked by hand
 * below from the shapes pass by pass; then `zero train` end to end: --peak (and the key
 * train.peak_gflops) is the MFU's denominator, checked from the JSON report (mfu = tokens/s x
 * FLOP per token / the given peak, the roofline's terms consistent with the report's figures),
 * bad --peak values are refused naming the flag, and a calibration file
 * ($ZERO_CALIBRATION) gives the peak when it was measured with the run's threads (and not
 * otherwise). A bf16 run's peak is of the GEMMs it runs: bf16 on a bf16 path (measured, the
 * fp32 one beside it; a calibration file's fp32 figure not taken), fp32 when bf16 widens; its
 * activations move in 2-byte elements. No timing is asserted.
 */
#include "check.h"
#include "kernels/kernels_lp.h"
#include "train/roofline.h"
#include "zero/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"

static int close_rel(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

/* L 2, C 8, NH 2, T 4, V 16 */
static void closed_form(void) {
    const zero_gpt_config_t m = {.layers = 2, .heads = 2, .dim = 8, .vocab = 16, .seq = 4};
    /* parameters: wte 16x8 = 128, wpe 4x8 = 32; a block: qkv 24x8 + 24, proj 8x8 + 8,
     * fc 32x8 + 32, fcproj 8x32 + 8, ln1 and ln2 4 x 8: 216 + 72 + 288 + 264 + 32 = 872;
     * final layernorm 16. 128 + 32 + 2 x 872 + 16 = 1920. */
    CHECK(zero__gpt_param_count(&m) == 1920, "params %zu", zero__gpt_param_count(&m));
    /* activation elements per token:
     *   forward, a layer:  ln1 8 + 8; softmax 2 heads x 4 in + out = 16; two residuals
     *                      2 x (16 in + 8 out) = 48; ln2 16; GELU 32 + 32 = 64     -> 160
     *   backward, a layer: two layernorms 2 x 24 = 48; GELU 3 x 32 = 96; softmax 3 x 8 = 24;
     *                      two residual gradients 48                                -> 216
     *   outside: embedding 24 + 40; final layernorm 16 + 24; loss 4 x 16 = 64        -> 168
     *   2 x (160 + 216) + 168 = 920 */
    double act = zero__train_roofline_activation_elems(&m);
    CHECK(act == 920, "activation elements per token %g, expected 920", act);
    /* parameters outside the GEMMs: 1 rank, 9 x 1920 = 17280; 4 ranks, shard 480:
     * 8 x 480 + 1920 + 2 x 1920 = 9600 */
    CHECK(zero__train_roofline_parameter_elems(1920, 1920, 1) == 17280, "1 rank");
    CHECK(zero__train_roofline_parameter_elems(1920, 480, 4) == 9600, "4 ranks");

    /* a step of 8 tokens at 1 GFLOP/s and 0.1 GB/s: FLOP per token 6 x 1920 + 12 x 2 x 4 x 8 =
     * 12288, so 98304 FLOP = 98.304 us; bytes 4 x (920 x 8 + 17280) = 98560 = 985.6 us */
    zero_train_roofline_t rl;
    zero__train_roofline(&m, 8, 1920, 1920, 1, 4, 1e9, 1e8, &rl);
    CHECK(rl.gemm_flops == 98304, "gemm flops %g", rl.gemm_flops);
    CHECK(rl.activation_bytes == 29440 && rl.parameter_bytes == 69120, "bytes %g %g",
          rl.activation_bytes, rl.parameter_bytes);
    CHECK(close_rel(rl.gemm_s, 98.304e-6) && close_rel(rl.memory_s, 985.6e-6) &&
              close_rel(rl.total_s, 1083.904e-6),
          "times %g %g %g", rl.gemm_s, rl.memory_s, rl.total_s);
    zero__train_roofline(&m, 8, 1920, 1920, 1, 4, 0, 0, &rl);
    CHECK(rl.total_s == 0, "no rates, no times");
    /* 2-byte activations: the 920 - 64 elements outside the loss at 2 bytes, the loss's 4 x 16
     * logits at 4: 1712 + 256 = 1968 bytes per token */
    CHECK(zero__train_roofline_activation_bytes(&m, 4) == 3680 &&
              zero__train_roofline_activation_bytes(&m, 2) == 1968,
          "activation bytes per token %g (fp32) %g (bf16)",
          zero__train_roofline_activation_bytes(&m, 4),
          zero__train_roofline_activation_bytes(&m, 2));
    zero__train_roofline(&m, 8, 1920, 1920, 1, 2, 1e9, 1e8, &rl);
    CHECK(rl.activation_bytes == 15744 && rl.parameter_bytes == 69120, "bf16 bytes %g %g",
          rl.activation_bytes, rl.parameter_bytes);

    double v[] = {5, 1, 4, 2}, w[] = {3, 9, 1};
    CHECK(zero__train_median(v, 4) == 3 && zero__train_median(w, 3) == 3, "medians");
}

/* `zero train` on a tiny model (1 layer, dim 32, 2 heads, seq 16, batch 4, V 256) for 5 steps
 * with extra arguments; its JSON report, or NULL. */
static cJSON *tiny_run(const char *report, const char *a, const char *b, const char *c) {
    const char *args[32] = {"train",         "-q",
                            "--steps",       "5",
                            "--set",         "model.layers=1",
                            "--set",         "model.dim=32",
                            "--set",         "model.heads=2",
                            "--set",         "model.seq=16",
                            "--set",         "train_micro_batch_size_per_gpu=4",
                            "--json-report", report};
    int n = 16;
    if (a) args[n++] = a;
    if (b) args[n++] = b;
    if (c) args[n++] = c;
    unlink(report);
    if (train_cli(args) != 0) return NULL;
    return load_json(report);
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(it) ? it->valuestring : "";
}

/* mfu = tokens/s x FLOP per token / peak (of the GEMMs' dtype), the roofline's figures
 * consistent, its activations in act_bytes elements */
static void check_run(const cJSON *r, double peak, const char *source, const char *dtype,
                      size_t act_bytes) {
    const double C = 32, T = 16, V = 256, L = 1;
    const double params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    const double fpt = 6 * params + 12 * L * T * C;
    CHECK(json_num(r, "matmul_peak_flops_per_s") == peak, "peak %g, expected %g",
          json_num(r, "matmul_peak_flops_per_s"), peak);
    CHECK(!strcmp(str(r, "matmul_peak_source"), source), "source '%s', expected '%s'",
          str(r, "matmul_peak_source"), source);
    CHECK(!strcmp(str(r, "matmul_peak_dtype"), dtype), "peak dtype '%s', expected '%s'",
          str(r, "matmul_peak_dtype"), dtype);
    const zero_gpt_config_t m = {
        .layers = (int)L, .heads = 2, .dim = (int)C, .vocab = (int)V, .seq = (int)T};
    CHECK(json_num(r, "roofline_activation_bytes") ==
              zero__train_roofline_activation_bytes(&m, act_bytes) * 4 * T,
          "activation bytes %g", json_num(r, "roofline_activation_bytes"));
    double tps = json_num(r, "tokens_per_s");
    CHECK(tps > 0 && close_rel(json_num(r, "mfu"), tps * fpt / peak), "mfu %g != %g x %g / %g",
          json_num(r, "mfu"), tps, fpt, peak);
    double gemm = json_num(r, "roofline_gemm_flops"), bw = json_num(r, "memory_bytes_per_s");
    CHECK(gemm == fpt * 4 * T, "roofline GEMM FLOP %g, expected %g", gemm, fpt * 4 * T);
    CHECK(close_rel(json_num(r, "roofline_gemm_s"), gemm / peak), "roofline GEMM time");
    double bytes =
        json_num(r, "roofline_activation_bytes") + json_num(r, "roofline_parameter_bytes");
    CHECK(bw > 0 && close_rel(json_num(r, "roofline_memory_s"), bytes / bw),
          "roofline memory time");
    CHECK(close_rel(json_num(r, "roofline_step_s"),
                    json_num(r, "roofline_gemm_s") + json_num(r, "roofline_memory_s")),
          "roofline = GEMMs + memory");
    CHECK(json_num(r, "median_step_s") > 0 &&
              close_rel(json_num(r, "roofline_ratio"),
                        json_num(r, "median_step_s") / json_num(r, "roofline_step_s")),
          "ratio %g", json_num(r, "roofline_ratio"));
}

int main(void) {
    closed_form();

    const char *tmp = getenv("TMPDIR");
    char dir[256], report[512], cal[512];
    snprintf(dir, sizeof dir, "%s/zero-test-roofline-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(cal, sizeof cal, "%s/calibration.json", dir);
    setenv("ZERO_CALIBRATION", cal, 1); /* none yet: this machine's own file stays out */

    cJSON *r = tiny_run(report, "--peak", "50", NULL);
    CHECK(r != NULL, "run with --peak 50");
    if (r) check_run(r, 50e9, "--peak", "fp32", 4);
    cJSON_Delete(r);
    r = tiny_run(report, "--set", "train.peak_gflops=20", NULL);
    CHECK(r != NULL, "run with train.peak_gflops=20");
    if (r) check_run(r, 20e9, "--peak", "fp32", 4);
    cJSON_Delete(r);

    const char *bad[] = {"-1", "abc", "nan", "1e10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(tiny_run(report, "--peak", bad[i], NULL) == NULL, "--peak %s accepted", bad[i]);
        CHECK(strstr(zero_last_error(), "--peak") != NULL, "--peak %s: error '%s' names no flag",
              bad[i], zero_last_error());
    }

    /* a calibration file measured with 1 thread: the peak of a 1-thread run; a 2-thread run
     * measures its own */
    FILE *f = fopen(cal, "w");
    fprintf(f, "{\"version\": 1, \"threads\": 1, \"gemm_fp32_flops\": 123e9, "
               "\"memory_bytes_per_s\": 10e9}\n");
    fclose(f);
    r = tiny_run(report, "--threads", "1", NULL);
    CHECK(r != NULL, "run with a calibration file");
    if (r) check_run(r, 123e9, "calibration", "fp32", 4);
    cJSON_Delete(r);
    r = tiny_run(report, "--threads", "2", NULL);
    CHECK(r != NULL, "2-thread run with a 1-thread calibration file");
    if (r)
        CHECK(!strcmp(str(r, "matmul_peak_source"), "measured") &&
                  json_num(r, "matmul_peak_flops_per_s") > 0,
              "source '%s'", str(r, "matmul_peak_source"));
    cJSON_Delete(r);

    /* bf16: the peak of the GEMMs it runs; the 1-thread calibration file is fp32's only */
    const int native = strcmp(zero__matmul_lp_path(ZERO_DTYPE_BF16), "widening") != 0;
    const char *bdt = native ? "bf16" : "fp32";
    r = tiny_run(report, "--set", "bf16.enabled=true", "--peak=40");
    CHECK(r != NULL, "bf16 run with --peak 40");
    if (r) check_run(r, 40e9, "--peak", bdt, 2);
    cJSON_Delete(r);
    r = tiny_run(report, "--set", "bf16.enabled=true", "--threads=1");
    CHECK(r != NULL, "1-thread bf16 run with a 1-thread calibration file");
    if (r && native) {
        const double p = json_num(r, "matmul_peak_flops_per_s");
        check_run(r, p, "measured", "bf16", 2);
        CHECK(p > 0 && json_num(r, "matmul_peak_fp32_flops_per_s") > 0,
              "bf16 %g and fp32 %g peaks measured", p, json_num(r, "matmul_peak_fp32_flops_per_s"));
    } else if (r) {
        check_run(r, 123e9, "calibration", "fp32", 2);
    }
    cJSON_Delete(r);
    r = tiny_run(report, "--no-peak", NULL, NULL);
    CHECK(r != NULL && json_num(r, "roofline_step_s") == 0 && json_num(r, "mfu") == 0 &&
              !strcmp(str(r, "matmul_peak_source"), "none"),
          "--no-peak: no MFU, no roofline");
    cJSON_Delete(r);

    unlink(report);
    unlink(cal);
    rmdir(dir);
    return check_report();
}
