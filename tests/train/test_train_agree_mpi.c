/* test_train_agree_mpi.c — the processes of an MPI job that were given different configurations
 * or data refuse to train, fast, naming the first differing key and both values.
 *
 * Real MPMD jobs (`mpirun -np 1 zero train --seed 1 ... : -np 1 zero train --seed 2 ...`):
 *   seed:  the job must fail (non-zero exit) within 60 s, saying "rank 1 has seed = 2, rank 0 has
 *          seed = 1"; before this check such a job trained two different models to the end;
 *   lr:    --set optimizer.params.lr differs: named as optimizer.params.lr;
 *   data:  two data files with different text: named as data (paths may differ, the content
 *          counts: a third case gives the same text under two names, and another --threads and
 *          --timeout, which change no math: it must train).
 * Arguments: the `zero` program and the MPI launcher (CTest passes both).
 */
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"

static char dir[256];

/* Run a shell command with stdout and stderr captured; returns the exit status. */
static int run(const char *cmd, char *out, size_t out_size, double *seconds) {
    char full[8192], path[512];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, path);
    printf("$ %s\n", cmd);
    fflush(stdout);
    double t0 = zero_time_now();
    int rc = system(full);
    *seconds = zero_time_now() - t0;
    char *e = slurp(path);
    snprintf(out, out_size, "%s", e ? e : "");
    free(e);
    unlink(path);
    return rc;
}

static void write_file(const char *path, const char *text, int repeat) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    for (int i = 0; i < repeat; i++) fputs(text, f);
    fclose(f);
}

/* Two processes, each with its own extra arguments; expect failure naming `want` (or, want
 * NULL, success). */
static void mpmd(const char *zero, const char *mpirun, const char *cfg, const char *a0,
                 const char *a1, const char *want) {
    char cmd[4096], out[16384];
    snprintf(cmd, sizeof cmd,
             "%s --allow-run-as-root --oversubscribe -np 1 %s train -q --no-peak --config %s %s "
             ": -np 1 %s train -q --no-peak --config %s %s",
             mpirun, zero, cfg, a0, zero, cfg, a1);
    double s = 0;
    int rc = run(cmd, out, sizeof out, &s);
    printf("exit %d after %.1f s:\n%s\n", rc, s, out);
    if (!want) {
        CHECK(rc == 0, "[%s] vs [%s]: the same model should train, got exit %d: %s", a0, a1, rc,
              out);
        return;
    }
    CHECK(rc != 0, "[%s] vs [%s]: the job trained two different models (exit 0)", a0, a1);
    CHECK(strstr(out, want) != NULL, "[%s] vs [%s]: the error does not say '%s': %s", a0, a1, want,
          out);
    CHECK(s < 60, "[%s] vs [%s]: took %.1f s to refuse", a0, a1, s);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_train_agree_mpi ZERO_PROGRAM MPIRUN\n");
        return 2;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-agree-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    char cfg[512], d1[512], d2[512], d3[512];
    snprintf(cfg, sizeof cfg, "%s/tiny.json", dir);
    snprintf(d1, sizeof d1, "%s/a.txt", dir);
    snprintf(d2, sizeof d2, "%s/b.txt", dir);
    snprintf(d3, sizeof d3, "%s/same-as-a.txt", dir);
    write_file(cfg,
               "{\"model\": {\"layers\": 1, \"heads\": 2, \"dim\": 16, \"seq\": 16},\n"
               " \"data\": {\"builtin_bytes\": 16384},\n"
               " \"train_micro_batch_size_per_gpu\": 2,\n"
               " \"train\": {\"steps\": 3, \"eval_interval\": 0, \"eval_batches\": 1,\n"
               "           \"samples\": 0}}\n",
               1);
    write_file(d1, "the quick brown fox jumps over the lazy dog. ", 200);
    write_file(d2, "pack my box with five dozen liquor jugs now. ", 200);
    write_file(d3, "the quick brown fox jumps over the lazy dog. ", 200);
    const char *zero = argv[1], *mpirun = argv[2];
    mpmd(zero, mpirun, cfg, "--seed 1", "--seed 2", "rank 1 has seed = 2, rank 0 has seed = 1");
    mpmd(zero, mpirun, cfg, "", "--set optimizer.params.lr=0.002",
         "rank 1 has optimizer.params.lr = 0.002, rank 0 has optimizer.params.lr = 0.001");
    char a0[600], a1[600];
    snprintf(a0, sizeof a0, "--data %s", d1);
    snprintf(a1, sizeof a1, "--data %s", d2);
    mpmd(zero, mpirun, cfg, a0, a1, "rank 1 has data = ");
    snprintf(a1, sizeof a1, "--data %s --threads 1 --timeout 100", d3);
    mpmd(zero, mpirun, cfg, a0, a1, NULL);
    unlink(cfg);
    unlink(d1);
    unlink(d2);
    unlink(d3);
    rmdir(dir);
    return check_report();
}
