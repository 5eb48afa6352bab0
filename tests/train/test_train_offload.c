/* test_train_offload.c — `zero train` with the optimizer states on NVMe
 * (zero_optimization.offload_optimizer.device nvme) and, at stage 3, the parameter shards too
 * (offload_param device nvme), against the same run in RAM.
 *
 *  - Same bits: the weights fingerprint of a run with the states in swap files equals the RAM
 *    run's, at stages 1-3 on 2 thread ranks, fp32 and bf16, with accumulation; the report shows
 *    no optimizer state in RAM and the swap files' bytes, and no swap file is left behind.
 *    Stage 3 with both offloads: the same bits, fp32 and bf16.
 *  - Checkpoints: a checkpoint saved by an offloaded run resumes in RAM, and one saved in RAM
 *    resumes offloaded, with the bits of a RAM -> RAM resume (and, at the same rank count, of
 *    the uninterrupted RAM run); also resharded from 2 ranks to 1; at stage 3 with both
 *    offloads as well.
 *  - --print-config adds the estimate per rank: memory and the swap files' bytes.
 *  - Faults: an nvme_path that does not exist fails before training, naming it; a file system
 *    too small for the swap files (a 1 MiB tmpfs in a private mount namespace: argument
 *    disk-full) fails before anything is allocated, naming the path, the bytes needed and the
 *    bytes free (skipped with one line where the mount is not permitted).
 */
#include "check.h"
#include "harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/zero-offload-XXXXXX";
static char swap_dir[600];

#define MODEL                                                                                      \
    "--set", "model.layers=2", "--set", "model.dim=64", "--set", "model.heads=2", "--set",         \
        "model.seq=32", "--set", "train.samples=0", "--set", "train.eval_batches=1", "--set",      \
        "zero_optimization.stage3_param_persistence_threshold=1000"

/* One run; its report's fingerprint (0 on failure). extra: further arguments, NULL-ended. */
static unsigned long long run(const char *name, const char *ranks, const char *stage,
                              const char *const *extra, cJSON **report_out) {
    char report[700];
    snprintf(report, sizeof report, "%s/%s.json", dir, name);
    const char *args[64] = {"train", "-q",      "--no-peak", "--ranks", ranks,           "--stage",
                            stage,   "--steps", "4",         MODEL,     "--json-report", report};
    int n = 0;
    while (args[n]) n++;
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    int rc = train_cli(args);
    CHECK(rc == 0, "%s: zero train failed (%d): %s", name, rc, zero_last_error());
    cJSON *root = rc == 0 ? load_json(report) : NULL;
    unsigned long long fp = 0;
    const cJSON *f = root ? cJSON_GetObjectItemCaseSensitive(root, "weights_fingerprint") : NULL;
    if (cJSON_IsString(f)) fp = strtoull(f->valuestring, NULL, 16);
    CHECK(fp != 0, "%s: no fingerprint in %s", name, report);
    if (report_out)
        *report_out = root;
    else
        cJSON_Delete(root);
    return fp;
}

static int swap_files_left(void) {
    DIR *d = opendir(swap_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".swp") != NULL;
    if (d) closedir(d);
    return n;
}

static double rank_number(const cJSON *root, const char *key, const char *sub) {
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(root, "per_rank");
    const cJSON *r0 = cJSON_GetArrayItem(ranks, 0);
    const cJSON *o = r0 ? cJSON_GetObjectItemCaseSensitive(r0, key) : NULL;
    if (sub && o) o = cJSON_GetObjectItemCaseSensitive(o, sub);
    return cJSON_IsNumber(o) ? o->valuedouble : -1;
}

#define NVME "--set", "zero_optimization.offload_optimizer.device=nvme", "--set", nvme_path_arg
/* stage 3: the parameters too */
#define BOTH NVME, "--set", "zero_optimization.offload_param.device=nvme", "--set", param_path_arg

static char nvme_path_arg[700], param_path_arg[700];

static void same_bits(const char *stage, const char *dtype, const char *accum) {
    char name[64];
    const char *ram[] = {"--dtype", dtype, "--set", accum, NULL};
    const char *off[] = {"--dtype", dtype,   "--set",
                         accum,     "--set", "zero_optimization.sub_group_size=4096",
                         NVME,      NULL};
    snprintf(name, sizeof name, "ram-%s-%s", stage, dtype);
    unsigned long long a = run(name, "2", stage, ram, NULL);
    cJSON *rep = NULL;
    snprintf(name, sizeof name, "nvme-%s-%s", stage, dtype);
    unsigned long long b = run(name, "2", stage, off, &rep);
    CHECK(a == b, "stage %s %s %s: fingerprint %016llx offloaded, %016llx in RAM", stage, dtype,
          accum, b, a);
    CHECK(rep && rank_number(rep, "memory_bytes", "optimizer_states") == 0 &&
              rank_number(rep, "swap_disk_bytes", NULL) > 0 &&
              rank_number(rep, "memory_bytes", "offload_staging") ==
                  rank_number(rep, "memory_theory_bytes", "offload_staging"),
          "stage %s %s: optimizer %g bytes in RAM, swap %g bytes, offload %g / %g", stage, dtype,
          rep ? rank_number(rep, "memory_bytes", "optimizer_states") : -1,
          rep ? rank_number(rep, "swap_disk_bytes", NULL) : -1,
          rep ? rank_number(rep, "memory_bytes", "offload_staging") : -1,
          rep ? rank_number(rep, "memory_theory_bytes", "offload_staging") : -1);
    cJSON_Delete(rep);
    CHECK(swap_files_left() == 0, "stage %s: swap files left in %s", stage, swap_dir);
}

/* Stage 3 with the parameters and the optimizer states on NVMe: the bits of the RAM run, and
 * the parameters gone from RAM (only the persistent units' stay). */
static void same_bits_both(const char *dtype) {
    char name[64];
    const char *ram[] = {"--dtype", dtype, "--set", "gradient_accumulation_steps=2", NULL};
    const char *off[] = {"--dtype", dtype,
                         "--set",   "gradient_accumulation_steps=2",
                         "--set",   "zero_optimization.offload_param.buffer_count=2",
                         BOTH,      NULL};
    cJSON *rr = NULL, *rep = NULL;
    snprintf(name, sizeof name, "ram-3-%s-both", dtype);
    unsigned long long a = run(name, "2", "3", ram, &rr);
    snprintf(name, sizeof name, "nvme-3-%s-both", dtype);
    unsigned long long b = run(name, "2", "3", off, &rep);
    CHECK(a == b, "stage 3 %s, both offloads: fingerprint %016llx offloaded, %016llx in RAM", dtype,
          b, a);
    const double pr = rr ? rank_number(rr, "memory_bytes", "parameters") : -1;
    const double po = rep ? rank_number(rep, "memory_bytes", "parameters") : -1;
    CHECK(rep && rank_number(rep, "memory_bytes", "optimizer_states") == 0 && po >= 0 && po < pr &&
              po == rank_number(rep, "memory_theory_bytes", "parameters") &&
              rank_number(rep, "memory_bytes", "offload_staging") ==
                  rank_number(rep, "memory_theory_bytes", "offload_staging"),
          "stage 3 %s, both: parameters %g bytes in RAM (%g without offload), offload %g / %g",
          dtype, po, pr, rep ? rank_number(rep, "memory_bytes", "offload_staging") : -1,
          rep ? rank_number(rep, "memory_theory_bytes", "offload_staging") : -1);
    cJSON_Delete(rr);
    cJSON_Delete(rep);
    CHECK(swap_files_left() == 0, "stage 3 both: swap files left in %s", swap_dir);
}

/* Save at step 2 on `ranks` ranks, resume to step 4 on `resume_ranks`: offloaded -> RAM,
 * RAM -> offloaded and RAM -> RAM give the same bits, and with the same rank count those of the
 * uninterrupted RAM run. Stage 2 with the optimizer offloaded, or (both) stage 3 with the
 * parameters too. */
static void resume_across(const char *ranks, const char *resume_ranks, int both) {
    unsigned long long got[3];
    const char *stage = both ? "3" : "2";
    for (int k = 0; k < 3; k++) { /* 0: saved offloaded, 1: resumed offloaded, 2: neither */
        char sd[720], name[64];
        snprintf(sd, sizeof sd, "%s/ckpt-%s-%s-%d-%d", dir, ranks, resume_ranks, both, k);
        const char *save_off1[] = {"--steps", "2", "--save-dir", sd, NVME, NULL};
        const char *save_off3[] = {"--steps", "2", "--save-dir", sd, BOTH, NULL};
        const char *save_ram[] = {"--steps", "2", "--save-dir", sd, NULL};
        const char *then_off1[] = {"--resume", sd, NVME, NULL};
        const char *then_off3[] = {"--resume", sd, BOTH, NULL};
        const char *then_ram[] = {"--resume", sd, NULL};
        const char *const *save_off = both ? save_off3 : save_off1;
        const char *const *then_off = both ? then_off3 : then_off1;
        snprintf(name, sizeof name, "save-%d", k);
        run(name, ranks, stage, k == 0 ? save_off : save_ram, NULL);
        snprintf(name, sizeof name, "resume-%d", k);
        got[k] = run(name, resume_ranks, stage, k == 1 ? then_off : then_ram, NULL);
        CHECK(swap_files_left() == 0, "resume: swap files left");
    }
    CHECK(got[0] == got[2] && got[1] == got[2],
          "%s ranks saved, %s resumed: offloaded -> RAM %016llx, RAM -> offloaded %016llx, RAM "
          "-> RAM %016llx",
          ranks, resume_ranks, got[0], got[1], got[2]);
    if (!strcmp(ranks, resume_ranks)) {
        const char *none[] = {NULL};
        unsigned long long whole = run("whole", ranks, stage, none, NULL);
        CHECK(got[2] == whole, "resumed %016llx, uninterrupted %016llx", got[2], whole);
    }
}

/* --print-config says, after its JSON, what a rank needs: memory and the swap files' bytes. */
static void print_config_needs(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/needs.txt", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) return;
    dup2(fd, 2);
    close(fd);
    const char *args[] = {"train", "--print-config", MODEL, NVME, NULL};
    int rc = train_cli(args);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *t = slurp(path);
    CHECK(rc == 0 && t && strstr(t, "estimate per rank") && strstr(t, "MiB of swap files under") &&
              strstr(t, swap_dir),
          "--print-config with offload: rc %d, '%s'", rc, t ? t : "");
    free(t);
}

static void missing_path(void) {
    char arg[700];
    snprintf(arg, sizeof arg, "zero_optimization.offload_optimizer.nvme_path=%s/no/such/dir", dir);
    const char *args[] = {
        "train", TINY_RUN_ARGS, "--set", "zero_optimization.offload_optimizer.device=nvme",
        "--set", arg,           NULL};
    int rc = train_cli(args);
    CHECK(rc != 0 && strstr(zero_last_error(), "no/such/dir") &&
              strstr(zero_last_error(), "nvme_path"),
          "missing nvme_path: rc %d, '%s'", rc, zero_last_error());
}

/* `test_train_offload disk-full`, a process of its own (CTest test_train_offload_disk_full),
 * so that no thread exists yet: a private mount namespace with a 1 MiB tmpfs, then a run whose
 * swap files do not fit. Exit 77 (skip) where the mount is not permitted. */
static int disk_full(void) {
    char mnt[700];
    snprintf(mnt, sizeof mnt, "%s/small", dir);
    if (mkdir(mnt, 0700) != 0 || unshare(CLONE_NEWNS) != 0 ||
        mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("SKIP: cannot mount a tmpfs in a private mount namespace here\n");
        rmdir(mnt);
        rmdir(dir);
        return 77;
    }
    char arg[760];
    snprintf(arg, sizeof arg, "zero_optimization.offload_optimizer.nvme_path=%s", mnt);
    /* 0.8M parameters: 6.5 MiB of Adam moments */
    const char *args[] = {"train",     "-q",
                          "--no-peak", "--steps",
                          "1",         MODEL,
                          "--set",     "model.dim=128",
                          "--set",     "model.layers=4",
                          "--set",     "zero_optimization.offload_optimizer.device=nvme",
                          "--set",     arg,
                          NULL};
    int rc = train_cli(args);
    const char *e = zero_last_error();
    CHECK(rc != 0 && strstr(e, mnt) && strstr(e, "need") && strstr(e, "free"),
          "disk full: rc %d, '%s' (expected the path, the bytes needed and free)", rc, e);
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
    rmdir(dir);
    return check_report();
}

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    if (argc > 1 && !strcmp(argv[1], "disk-full")) return disk_full();
    snprintf(swap_dir, sizeof swap_dir, "%s/swap", dir);
    mkdir(swap_dir, 0700);
    snprintf(nvme_path_arg, sizeof nvme_path_arg,
             "zero_optimization.offload_optimizer.nvme_path=%s", swap_dir);
    same_bits("1", "fp32", "gradient_accumulation_steps=2");
    same_bits("2", "bf16", "gradient_accumulation_steps=1");
    same_bits("3", "fp32", "gradient_accumulation_steps=2");
    same_bits("3", "bf16", "gradient_accumulation_steps=2");
    snprintf(param_path_arg, sizeof param_path_arg, "zero_optimization.offload_param.nvme_path=%s",
             swap_dir);
    same_bits_both("fp32");
    same_bits_both("bf16");
    resume_across("2", "2", 0);
    resume_across("2", "1", 0);
    resume_across("2", "2", 1);
    resume_across("2", "1", 1);
    print_config_needs();
    missing_path();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return check_report();
}
