/* test_train_memcheck.c — the pre-flight memory check.
 *
 * Mode "estimate" (no argument):
 *   - huge: a 175B-parameter GPT (dim 12288, 96 layers) on one rank is refused within a second,
 *     before any allocation, with ZERO_ERR_OUT_OF_MEMORY naming the estimate; the estimate is
 *     checked against the closed form of its model states, 20 bytes per parameter at stage 0 in
 *     fp32 on one rank (parameters 4, gradient buffer 4 and accumulator 4, Adam m and v 8), which
 *     it must exceed by no more than 5% (the activations of micro-batch 1);
 *   - accuracy: small real runs (stages 0-3, 1-4 thread ranks, fp32 and bf16, activation
 *     checkpointing) are measured by the accounting allocator; the estimate of every category
 *     and of the total must lie within 2% (+ 4 KiB) of the measured peak of rank 0;
 *     (and stage 3 with ZeRO++ qwZ, whose quantized send buffers are communication memory; and
 *     8-bit Adam states at stages 0, 1 and 3);
 *   - override: a too-large model with train.memory_check = false is not refused by the check
 *     (it then fails to allocate, or not: the test only asks that the refusal is gone).
 * Mode "cgroup ZERO_PROGRAM": a real memory cgroup (v1) limited to 192 MiB; `zero train` of a
 * model that fits the machine but needs about 0.5 GiB must be refused inside it, naming the
 * cgroup, while a tiny model trains inside it. The cgroup is removed on every path; without
 * cgroup v1 or the right to make one the test prints one SKIP line and exits 77.
 */
#include "check.h"

#include "train/config.h"
#include "train/preflight.h"
#include "train/trainer.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void tiny(zero_train_config_t *c) {
    zero__train_config_default(c);
    CHECK(zero__train_config_parse(c,
                                   "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 64, "
                                   "\"seq\": 32}, \"data\": {\"builtin_bytes\": 65536}, "
                                   "\"train_micro_batch_size_per_gpu\": 4, "
                                   "\"zero_optimization\": {\"reduce_bucket_size\": 20000, "
                                   "\"stage3_prefetch_bucket_size\": 60000, "
                                   "\"stage3_param_persistence_threshold\": 1000}, "
                                   "\"train\": {\"steps\": 3, \"eval_interval\": 0, "
                                   "\"eval_batches\": 1, \"samples\": 0, \"threads\": 1}}",
                                   "tiny") == ZERO_OK,
          "tiny config");
}

/* The tiny config with a 175B-parameter model's shape (GPT-3: 96 layers, dim 12288). */
static void huge(zero_train_config_t *c) {
    tiny(c);
    c->model.dim = 12288;
    c->model.heads = 96;
    c->model.layers = 96;
    c->model.vocab = 50257;
    c->model.seq = 2048;
}

static void test_huge(void) {
    zero_train_config_t c;
    huge(&c);
    c.micro_batch = 1;
    double t0 = zero_time_now();
    zero_status_t st = zero__train_run(&c, NULL, NULL);
    double s = zero_time_now() - t0;
    const char *msg = zero_last_error();
    printf("huge: %.3f s: %s\n", s, msg);
    CHECK(st == ZERO_ERR_OUT_OF_MEMORY, "huge model: status %s", zero_status_str(st));
    CHECK(s < 1.0, "huge model: refused after %.2f s (expected < 1 s)", s);
    CHECK(strstr(msg, "--ignore-memory-check") && strstr(msg, "available"),
          "huge model: the message names neither the override nor what is available: %s", msg);
    const char *p = strstr(msg, "needs an estimated ");
    double gib = p ? strtod(p + strlen("needs an estimated "), NULL) : 0;
    /* fp32, stage 0, one rank, one micro-step: parameters 4, one gradient buffer 4 (the
     * working buffer is the accumulator), Adam m and v 8 */
    const double P = (double)zero__gpt_param_count(&c.model), states = 16.0 * P / (1 << 30);
    printf("huge: %.0f parameters, estimate %.1f GiB, closed-form model states %.1f GiB\n", P, gib,
           states);
    CHECK(gib >= states && gib <= 1.05 * states,
          "huge model: estimate %.1f GiB, expected within [%.1f, %.1f] GiB (16 bytes per "
          "parameter + up to 5%%)",
          gib, states, 1.05 * states);
}

static int near(double est, double meas) {
    return est <= meas * 1.02 + 4096 && est >= meas * 0.98 - 4096;
}

/* Estimate, run and compare config c on `ranks` ranks; label names the case. */
static void accuracy_run(const zero_train_config_t *cp, int ranks, const char *label) {
    zero_train_config_t c = *cp;
    CHECK(zero__train_config_check(&c, ranks) == ZERO_OK, "config check");
    zero_memory_estimate_t e;
    CHECK(zero__train_memory_estimate(&c, ranks, 1, &e) == ZERO_OK, "estimate");
    zero_train_report_t rep;
    memset(&rep, 0, sizeof rep);
    zero_train_io_t io;
    memset(&io, 0, sizeof io); /* silent, no matmul peak */
    zero_status_t st = zero__train_run(&c, &io, &rep);
    CHECK(st == ZERO_OK, "run: %s", zero_last_error());
    if (st) return;
    const zero_train_rank_report_t *r0 = &rep.ranks[0];
    static const zero_mem_category_t cats[] = {ZERO_MEM_PARAMS, ZERO_MEM_GRADS, ZERO_MEM_OPTIM,
                                               ZERO_MEM_ACTIVATIONS, ZERO_MEM_COMM};
    char line[512];
    int len = snprintf(line, sizeof line, "%s:", label);
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++) {
        double est = (double)e.bytes[cats[i]], meas = (double)r0->memory_peak_bytes[cats[i]];
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.0f/%.0f",
                        zero_mem_category_name(cats[i]), est, meas);
        CHECK(near(est, meas), "%s: %s estimated %.0f bytes, measured peak %.0f", line,
              zero_mem_category_name(cats[i]), est, meas);
    }
    double est = (double)e.total_bytes, meas = (double)rep.mem.peak_total_bytes;
    printf("%s; total %.0f/%.0f (%+.1f%%)\n", line, est, meas, 100.0 * (est - meas) / meas);
    CHECK(near(est, meas), "%s: total estimated %.0f bytes, measured peak %.0f", line, est, meas);
    zero__train_report_free(&rep);
}

static void accuracy_case(int ranks, int stage, int bf16, int ckpt, int overlap) {
    zero_train_config_t c;
    tiny(&c);
    c.ranks = ranks;
    c.stage = stage;
    c.bf16 = bf16;
    c.checkpointing = ckpt;
    c.overlap_comm = overlap;
    char label[128];
    snprintf(label, sizeof label, "ranks %d stage %d %s%s%s", ranks, stage, bf16 ? "bf16" : "fp32",
             ckpt ? " ckpt" : "", overlap ? "" : " no-overlap");
    accuracy_run(&c, ranks, label);
}

/* Stage 3 with blocks 5x the embedding unit and a prefetch bucket that holds one block: the
 * gather pool peaks at the embedding (tied, held through backward), the block in use and the
 * one prefetched, not at every unit (6 blocks) as a count of prefetched units by the smallest
 * unit's size gives. */
static void accuracy_prefetch_case(void) {
    zero_train_config_t c;
    tiny(&c);
    c.model.layers = 6;
    c.model.dim = 128;
    c.ranks = 1;
    c.stage = 3;
    c.prefetch_bucket_elems = 250000; /* a block: 198272 elements */
    accuracy_run(&c, 1, "ranks 1 stage 3 fp32, 6 blocks, prefetch of one block");
}

/* ZeRO++ qwZ: the quantized shards being sent (ZERO_MEM_COMM) beside the gather pool. */
static void accuracy_qwz_case(int ranks, int bf16) {
    zero_train_config_t c;
    tiny(&c);
    c.ranks = ranks;
    c.stage = 3;
    c.bf16 = bf16;
    c.quantized_weights = 1;
    c.persistence_threshold_elems = 0;
    char label[128];
    snprintf(label, sizeof label, "ranks %d stage 3 %s qwZ", ranks, bf16 ? "bf16" : "fp32");
    accuracy_run(&c, ranks, label);
}

/* 8-bit Adam states (AdamW8bit): units padded to 256 x ranks, codes, absmax, fp32 blocks. */
static void accuracy_q8_case(int ranks, int stage, int bf16) {
    zero_train_config_t c;
    tiny(&c);
    c.ranks = ranks;
    c.stage = stage;
    c.bf16 = bf16;
    snprintf(c.optimizer, sizeof c.optimizer, "AdamW8bit");
    char label[128];
    snprintf(label, sizeof label, "ranks %d stage %d %s AdamW8bit", ranks, stage,
             bf16 ? "bf16" : "fp32");
    accuracy_run(&c, ranks, label);
}

static void test_override(void) {
    zero_train_config_t c;
    huge(&c);
    c.steps = 0;
    c.memory_check = 0;
    c.data_path[0] = 0;
    c.builtin_bytes = 4096; /* too short for seq 2048: the run fails after the check */
    zero_status_t st = zero__train_run(&c, NULL, NULL);
    CHECK(st != ZERO_OK && !strstr(zero_last_error(), "not enough memory"),
          "override: still refused by the memory check: %s", zero_last_error());
}

/* ------------------------------------------------------------------------------ cgroup */

static char cg[256];

static void cg_remove(void) {
    if (cg[0] && rmdir(cg) != 0 && errno != ENOENT)
        fprintf(stderr, "warning: cannot remove %s: %s\n", cg, strerror(errno));
    cg[0] = 0;
}

static void on_signal(int sig) {
    cg_remove();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int write_str(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(s, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Run `zero train ARGS` in the cgroup; output into out. Returns the exit status (-1: failed to
 * run). */
static int run_in_cgroup(const char *zero, const char *args, char *out, size_t n) {
    char cmd[2048], procs[300];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", cg);
    /* The child joins the cgroup before exec: sh writes its own pid, then execs zero. */
    snprintf(cmd, sizeof cmd, "sh -c 'echo $$ > %s && exec %s train --no-peak %s' 2>&1", procs,
             zero, args);
    printf("$ %s\n", cmd);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + (WIFSIGNALED(rc) ? WTERMSIG(rc) : 0);
}

static int test_cgroup(const char *zero) {
    struct stat sb;
    if (stat("/sys/fs/cgroup/memory/memory.limit_in_bytes", &sb) != 0) {
        printf("SKIP: no cgroup v1 memory controller at /sys/fs/cgroup/memory\n");
        return 77;
    }
    snprintf(cg, sizeof cg, "/sys/fs/cgroup/memory/zero-test-%ld", (long)getpid());
    if (mkdir(cg, 0755) != 0) {
        printf("SKIP: cannot make the memory cgroup %s: %s\n", cg, strerror(errno));
        cg[0] = 0;
        return 77;
    }
    atexit(cg_remove);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char path[300];
    snprintf(path, sizeof path, "%s/memory.limit_in_bytes", cg);
    if (write_str(path, "201326592") != 0) { /* 192 MiB */
        printf("SKIP: cannot set the limit of %s: %s\n", cg, strerror(errno));
        cg_remove();
        return 77;
    }
    static char out[1 << 16];
    /* 12 layers of dim 512: 38M parameters, ~0.75 GiB at stage 0 in fp32 with its activations:
     * fits a machine with a GiB free, not 192 MiB. */
    int rc = run_in_cgroup(zero,
                           "--steps 1 --set model.layers=12 --set model.dim=512 --set "
                           "model.heads=8 --set model.seq=64 --set train.samples=0",
                           out, sizeof out);
    printf("exit %d:\n%s\n", rc, out);
    CHECK(rc == 1 && strstr(out, "not enough memory") && strstr(out, "memory cgroup") &&
              strstr(out, "zero-test-"),
          "a model larger than the cgroup: exit %d, output: %s", rc, out);
    rc = run_in_cgroup(zero,
                       "-q --steps 2 --set model.layers=1 --set model.dim=32 --set model.heads=2 "
                       "--set model.seq=32 --set train.samples=0 --set train.eval_interval=0",
                       out, sizeof out);
    printf("exit %d:\n%s\n", rc, out);
    CHECK(rc == 0, "a tiny model in the cgroup: exit %d, output: %s", rc, out);
    cg_remove();
    return check_report();
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "cgroup")) return test_cgroup(argv[2]);
    zero_log_set_level(ZERO_LOG_ERROR);
    test_huge();
    test_override();
    for (int stage = 0; stage <= 3; stage++) {
        accuracy_case(stage == 3 ? 1 : 4, stage, 0, 0, 1);
        accuracy_case(3, stage, 1, 0, 1);
        if (stage >= 2) accuracy_case(2, stage, 0, 1, 0);
    }
    accuracy_case(2, 3, 0, 0, 1);
    accuracy_prefetch_case();
    accuracy_qwz_case(2, 0);
    accuracy_qwz_case(3, 1);
    accuracy_q8_case(1, 0, 0);
    accuracy_q8_case(2, 3, 1);
    accuracy_q8_case(3, 1, 0);
    return check_report();
}
