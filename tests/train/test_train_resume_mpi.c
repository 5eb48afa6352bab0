/* test_train_resume_mpi.c — `zero train --save-dir` / `--resume` under `mpirun -np 2`: for every
 * stage 0-3, 3 steps saved then resumed to 6 under MPI give the weights_fingerprint of an
 * uninterrupted 6-step run on 2 threads (the reference: both backends sum in rank order, so the
 * weights are bitwise equal); the stage-3 checkpoint written by MPI loads on 3 threads at stage 1
 * with the fingerprint the saving run reported. An MoE run (4 experts in layer 1) saved by MPI at
 * ep 2, stage 3, and resumed by MPI at ep 1, stage 1, ends on the weights of the uninterrupted
 * ep-1 run on 2 threads (the checkpoint holds the logical experts, every ep gives the same bits,
 * gradient clipping included). Output errors that only rank 0 sees (a metrics log
 * on /dev/full, a fresh run into a used save directory) fail both processes within a minute.
 *
 * Arguments: the `zero` program and the MPI launcher (CTest passes both); runs them as child
 * processes.
 */
#include "check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

static char dir[256], cfg[512];
static const char *zero, *mpirun;

/* Run `zero train` (under mpirun when mpi) with extra arguments; returns the report's
 * weights_fingerprint (malloc'd) or NULL after a failed CHECK. */
static char *train(int mpi, const char *extra) {
    char cmd[4096], report[512], errpath[512];
    snprintf(report, sizeof report, "%s/report.json", dir);
    snprintf(errpath, sizeof errpath, "%s/err.txt", dir);
    if (mpi)
        snprintf(cmd, sizeof cmd,
                 "%s --allow-run-as-root --oversubscribe -np 2 %s train -q --no-peak --config %s "
                 "--json-report %s %s 2>%s",
                 mpirun, zero, cfg, report, extra, errpath);
    else
        snprintf(cmd, sizeof cmd, "%s train -q --no-peak --config %s --json-report %s %s 2>%s",
                 zero, cfg, report, extra, errpath);
    printf("$ %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    char *err = slurp(errpath);
    CHECK(rc == 0, "exit %d: %s", rc, err ? err : "");
    free(err);
    unlink(errpath);
    if (rc) return NULL;
    char *text = slurp(report);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(root, "weights_fingerprint");
    char *out = cJSON_IsString(fp) ? strdup(fp->valuestring) : NULL;
    CHECK(out != NULL, "%s has no weights_fingerprint", report);
    cJSON_Delete(root);
    unlink(report);
    return out;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* `mpirun -np 2 zero train` that must fail on every rank, with `want` in its messages, within a
 * minute: a rank that did not learn of the other's failure would wait in a collective. */
static void train_fails(const char *extra, const char *want) {
    char cmd[4096], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/err.txt", dir);
    snprintf(cmd, sizeof cmd,
             "timeout 60 %s --allow-run-as-root --oversubscribe -np 2 %s train -q --no-peak "
             "--config %s %s 2>%s",
             mpirun, zero, cfg, extra, errpath);
    printf("$ %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    char *err = slurp(errpath);
    CHECK(rc != 0 && WIFEXITED(rc) && WEXITSTATUS(rc) != 124 && err && strstr(err, want),
          "expected a failure naming '%s' (exit status %d): %s", want, rc, err ? err : "");
    free(err);
    unlink(errpath);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_train_resume_mpi ZERO_PROGRAM MPIRUN\n");
        return 2;
    }
    zero = argv[1];
    mpirun = argv[2];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-resume-mpi-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(cfg, sizeof cfg, "%s/tiny.json", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) return 1;
    fputs(
        "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
        " \"data\": {\"builtin_bytes\": 65536},\n"
        " \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2,\n"
        " \"optimizer\": {\"params\": {\"lr\": 0.003}}, \"gradient_clipping\": 1.0,\n"
        " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": 2, "
        "\"total_num_steps\": 6}},\n"
        " \"zero_optimization\": {\"reduce_bucket_size\": 5000,\n"
        "     \"stage3_param_persistence_threshold\": 100},\n"
        " \"train\": {\"steps\": 6, \"eval_interval\": 0, \"eval_batches\": 1, \"samples\": 0}}\n",
        f);
    fclose(f);
    char extra[1024], save[512];
    for (int stage = 0; stage <= 3; stage++) {
        snprintf(save, sizeof save, "%s/ckpt-%d", dir, stage);
        snprintf(extra, sizeof extra, "--ranks 2 --stage %d", stage);
        char *ref = train(0, extra);
        snprintf(extra, sizeof extra, "--stage %d --steps 3 --save-dir %s", stage, save);
        char *mid = train(1, extra);
        snprintf(extra, sizeof extra, "--stage %d --save-dir %s --resume latest", stage, save);
        char *resumed = train(1, extra);
        printf("stage %d: threads uninterrupted %s, MPI resumed at 3 %s\n", stage, ref ? ref : "-",
               resumed ? resumed : "-");
        CHECK(same(ref, resumed), "stage %d: MPI resumed %s, uninterrupted %s", stage,
              resumed ? resumed : "-", ref ? ref : "-");
        if (stage == 3) {
            /* MPI's 2-rank stage-3 checkpoint of step 3, on 3 threads at stage 1 */
            snprintf(extra, sizeof extra, "--ranks 3 --stage 1 --steps 3 --resume %s/step-00000003",
                     save);
            char *loaded = train(0, extra);
            CHECK(same(mid, loaded), "2 MPI ranks stage 3 -> 3 threads stage 1: %s, saved %s",
                  loaded ? loaded : "-", mid ? mid : "-");
            free(loaded);
        }
        free(ref);
        free(mid);
        free(resumed);
    }
    /* MoE: ep 2 stage 3 saved, ep 1 stage 1 resumed, both under MPI */
    const char *moe = "--set model.moe.experts=4 --set model.moe.every=2";
    snprintf(save, sizeof save, "%s/ckpt-moe", dir);
    snprintf(extra, sizeof extra, "--ranks 2 --stage 1 --ep-size 1 %s", moe);
    char *ref = train(0, extra);
    snprintf(extra, sizeof extra, "--stage 3 --ep-size 2 --steps 3 --save-dir %s %s", save, moe);
    char *mid = train(1, extra);
    snprintf(extra, sizeof extra, "--stage 1 --ep-size 1 --save-dir %s --resume latest %s", save,
             moe);
    char *resumed = train(1, extra);
    printf("MoE: threads ep 1 uninterrupted %s, MPI ep 2 resumed at 3 by ep 1 %s\n",
           ref ? ref : "-", resumed ? resumed : "-");
    CHECK(same(ref, resumed) && mid && !same(mid, ref),
          "MoE: MPI ep 2 -> ep 1 resumed %s, uninterrupted ep 1 %s (saved at 3: %s)",
          resumed ? resumed : "-", ref ? ref : "-", mid ? mid : "-");
    free(ref);
    free(mid);
    free(resumed);
    /* Output errors of rank 0 fail rank 1 too: a metrics log on a full device, a fresh run into
     * a save directory holding another run's checkpoints. */
    train_fails("--metrics /dev/full", "No space left");
    snprintf(extra, sizeof extra, "--steps 1 --save-dir %s/ckpt-0", dir);
    train_fails(extra, "already holds checkpoints");
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
