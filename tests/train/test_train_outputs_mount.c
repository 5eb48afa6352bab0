/* test_train_outputs_mount.c — `zero train`'s output files on real read-only and full file
 * systems: two 64 KiB tmpfs mounts, one read-only, in a private mount namespace of this process
 * (needs CAP_SYS_ADMIN; exit code 77, which CTest counts as skipped, with one line saying why
 * otherwise). The namespace dies with the process, so the mounts go away even when the test
 * crashes; they are unmounted at the end as well.
 *
 * Oracles: (1) a save directory on the read-only mount (missing, so to be created, or existing)
 * and a JSON report there fail before step 1: the status is an I/O error naming the path and
 * "Read-only file system", and the metrics log, on a writable disk, holds no record. Root
 * ignores permission bits, so only a read-only mount (or an immutable file) tests this as root.
 * (2) A metrics log on a full tmpfs fails the run on both ranks (no rank waits for the other
 * until the timeout) with an I/O error naming the file and "No space left"; before, the run
 * stopped writing mid-record and exited 0. (3) The JSON report on a full disk: `zero train`
 * exits 1 naming the file and leaves no temporary file.
 */
#include "check.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static char dir[256], ro[320], full[320];

static const char *tiny =
    "{\"model\": {\"layers\": 1, \"heads\": 2, \"dim\": 32, \"seq\": 16},\n"
    " \"data\": {\"builtin_bytes\": 65536},\n"
    " \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 1,\n"
    " \"train\": {\"steps\": 4, \"eval_interval\": 0, \"eval_batches\": 1, \"samples\": 0}}\n";

static zero_status_t train(const char *const *sets, const char *metrics, const char *report) {
    zero_train_config_t c;
    zero__train_config_default(&c);
    zero_status_t st = zero__train_config_parse(&c, tiny, "tiny.json");
    for (int i = 0; !st && sets && sets[i]; i += 2)
        st = zero__train_config_set(&c, sets[i], sets[i + 1]);
    CHECK(st == ZERO_OK, "config: %s", zero_last_error());
    if (st) return st;
    zero_train_io_t io = {.metrics_path = metrics, .report_path = report};
    zero_train_report_t rep;
    st = zero__train_run(&c, &io, &rep);
    if (!st) zero__train_report_free(&rep);
    return st;
}

static int count_lines(const char *file) {
    char *text = slurp(file);
    if (!text) return -1;
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    free(text);
    return n;
}

/* (1) Read-only places fail before step 1. */
static void test_read_only(void) {
    char metrics[512], save_new[512], report[512];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);
    snprintf(save_new, sizeof save_new, "%s/ckpt", ro);
    snprintf(report, sizeof report, "%s/report.json", ro);
    const char *places[] = {save_new, ro};
    for (int i = 0; i < 2; i++) {
        unlink(metrics);
        const char *sets[] = {"train.save_dir", places[i], NULL};
        zero_status_t st = train(sets, metrics, NULL);
        CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), places[i]) &&
                  strstr(zero_last_error(), "Read-only file system"),
              "save dir %s on a read-only mount: status %d, '%s'", places[i], (int)st,
              zero_last_error());
        CHECK(count_lines(metrics) <= 0, "%d steps ran before the save dir %s failed",
              count_lines(metrics), places[i]);
        printf("read-only save dir -> %s\n", zero_last_error());
    }
    unlink(metrics);
    zero_status_t st = train(NULL, metrics, report);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), report) &&
              strstr(zero_last_error(), "Read-only file system"),
          "report on a read-only mount: status %d, '%s'", (int)st, zero_last_error());
    CHECK(count_lines(metrics) <= 0, "%d steps ran before the report path failed",
          count_lines(metrics));
    printf("read-only report -> %s\n", zero_last_error());
}

/* Fill the full tmpfs, then free `room` bytes. */
static void fill(size_t room) {
    char filler[512];
    snprintf(filler, sizeof filler, "%s/filler", full);
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char block[4096];
    memset(block, 'x', sizeof block);
    off_t size = 0;
    ssize_t n;
    while (fd >= 0 && (n = write(fd, block, sizeof block)) > 0) size += n;
    CHECK(fd >= 0 && errno == ENOSPC, "filling the tmpfs stopped with errno %d", errno);
    if (fd >= 0 && ftruncate(fd, size > (off_t)room ? size - (off_t)room : 0) != 0)
        CHECK(0, "ftruncate: %s", strerror(errno));
    if (fd >= 0) close(fd);
}

/* (2) and (3): a full disk. */
static void test_full(void) {
    char metrics[512], report[512], tmp_report[512];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", full);
    fill(4096); /* room for a dozen records */
    const char *sets[] = {"train.ranks", "2", "train.steps", "60", NULL};
    zero_status_t st = train(sets, metrics, NULL);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), metrics) &&
              strstr(zero_last_error(), "No space left"),
          "metrics on a full disk: status %d, '%s'", (int)st, zero_last_error());
    printf("full metrics disk -> %s (%d complete records)\n", zero_last_error(),
           count_lines(metrics));
    unlink(metrics);
    fill(0);
    snprintf(report, sizeof report, "%s/report.json", full);
    snprintf(tmp_report, sizeof tmp_report, "%s/.report.json.tmp", full);
    const char *cli[] = {"train",           TINY_RUN_ARGS, "--set",
                         "train.samples=0", "--set",       "data.builtin_bytes=65536",
                         "--json-report",   report,        NULL};
    CHECK(train_cli(cli) == 1 && strstr(zero_last_error(), "report.json") &&
              strstr(zero_last_error(), "No space left"),
          "report on a full disk: '%s'", zero_last_error());
    CHECK(access(tmp_report, F_OK) != 0 && access(report, F_OK) != 0,
          "a report or its temporary file was left on the full disk");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-outputs-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    snprintf(ro, sizeof ro, "%s/ro", dir);
    snprintf(full, sizeof full, "%s/full", dir);
    mkdir(ro, 0755);
    mkdir(full, 0755);
    /* Before any thread exists: the namespace is then the whole process's. */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", ro, "tmpfs", MS_RDONLY, "size=64k") != 0 ||
        mount("tmpfs", full, "tmpfs", 0, "size=64k") != 0) {
        printf("SKIP: cannot mount a tmpfs in a private mount namespace here (%s; needs "
               "CAP_SYS_ADMIN)\n",
               strerror(errno));
        umount2(ro, MNT_DETACH); /* when only the first mount worked */
        rmdir(ro);
        rmdir(full);
        rmdir(dir);
        return 77;
    }
    zero_log_set_level(ZERO_LOG_ERROR);
    test_read_only();
    test_full();
    umount2(ro, MNT_DETACH);
    umount2(full, MNT_DETACH);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
