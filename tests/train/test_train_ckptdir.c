/* test_train_ckptdir.c — what `zero train` does with the files around a run: save directories
 * shared with other runs, a lost `latest`, resumes that do not fit, the metrics log across a
 * resume, and output paths that cannot be written (in process, threads backend).
 *
 * Oracles: (1) a fresh run into a save directory holding another run's checkpoints is refused,
 * naming them, and leaves them as they were; with train.overwrite it saves beside them and its
 * keep-last deletes only its own older saves (the directory listing after a known sequence of
 * saves). (2) Without `latest`, --resume latest continues from the newest save: the report's
 * start step is that save's and the weights equal those of an uninterrupted run. (3) A resume
 * with another model.heads fails naming the key and both values; another data file warns naming
 * both; train.steps at or below the checkpoint's step warns naming both numbers and reports 0
 * steps trained. (4) The metrics log of a run resumed from its step-4 checkpoint equals, line for
 * line, the log the uninterrupted run wrote (timing fields apart), and elapsed_s never goes back.
 * (5) A save directory that is a file and a JSON report in a missing directory fail before step
 * 1 (the metrics log holds no record); a metrics log on /dev/full fails the run, naming the file
 * and "No space left", on 2 ranks (no rank waits for the other).
 * Full disks and read-only directories on real mounts: test_train_outputs_mount.c.
 */
#include "check.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"

static char dir[256];

static const char *tiny =
    "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 32, \"seq\": 32},\n"
    " \"data\": {\"builtin_bytes\": 65536},\n"
    " \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 1,\n"
    " \"optimizer\": {\"params\": {\"lr\": 0.003}},\n"
    " \"scheduler\": {\"params\": {\"warmup_num_steps\": 2, \"total_num_steps\": 6}},\n"
    " \"train\": {\"steps\": 6, \"eval_interval\": 2, \"eval_batches\": 1, \"samples\": 0}}\n";

/* Warnings the library logs, collected (rank threads log concurrently). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char warnings[16384];

static void on_log(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)rank, (void)world, (void)user;
    if (level < ZERO_LOG_WARN) return;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", msg);
    pthread_mutex_unlock(&log_lock);
}

static void clear_warnings(void) {
    pthread_mutex_lock(&log_lock);
    warnings[0] = 0;
    pthread_mutex_unlock(&log_lock);
}

typedef struct result {
    uint64_t fp;
    int steps, start_step;
} result_t;

/* Run the trainer in process: the tiny config, then `sets` (NULL-terminated key/value pairs). */
static zero_status_t train(const char *const *sets, const char *metrics, const char *report,
                           result_t *res) {
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
    if (!st) {
        if (res) *res = (result_t){rep.weights_fingerprint, rep.steps, rep.start_step};
        zero__train_report_free(&rep);
    }
    return st;
}

static void path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static int exists(const char *p) { return access(p, F_OK) == 0; }

/* Bit s set when save/step-s exists (s <= 30). */
static int step_mask(const char *save) {
    int mask = 0;
    for (int s = 0; s <= 30; s++) {
        char p[700];
        snprintf(p, sizeof p, "%s/step-%08d", save, s);
        mask |= exists(p) << s;
    }
    return mask;
}

static int count_lines(const char *file) {
    char *text = slurp(file);
    if (!text) return -1;
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    free(text);
    return n;
}

/* (1) Shared save directories. */
static void test_shared_dir(void) {
    char save[512], latest[600];
    path(save, sizeof save, "shared");
    snprintf(latest, sizeof latest, "%s/latest", save);
    /* run A: steps 1..6, every step */
    const char *a[] = {"train.save_dir", save, "train.save_every", "1", NULL};
    CHECK(train(a, NULL, NULL, NULL) == ZERO_OK, "run A: %s", zero_last_error());
    CHECK(step_mask(save) == 0x7e, "run A saved steps mask %x", step_mask(save));
    char *before = slurp(latest);
    /* run B, fresh, 3 steps: refused, naming A's checkpoints; nothing changed */
    const char *b[] = {"train.save_dir",
                       save,
                       "train.save_every",
                       "1",
                       "train.steps",
                       "3",
                       "train.keep_last",
                       "2",
                       "seed",
                       "7",
                       NULL};
    zero_status_t st = train(b, NULL, NULL, NULL);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "step-00000001") &&
              strstr(zero_last_error(), "step-00000006") && strstr(zero_last_error(), "overwrite"),
          "fresh run into a used directory: status %d, '%s'", (int)st, zero_last_error());
    char *after = slurp(latest);
    CHECK(step_mask(save) == 0x7e && before && after && !strcmp(before, after),
          "the refused run changed the directory (mask %x, latest '%s')", step_mask(save),
          after ? after : "(none)");
    free(after);
    /* with overwrite: B's saves replace steps 1-3, its keep-last 2 deletes only its own step 1;
     * A's steps 4-6 stay (the old rule kept the highest steps: B's own 2 and 3 went, and
     * `latest` named a deleted checkpoint) */
    const char *b2[] = {"train.save_dir",
                        save,
                        "train.save_every",
                        "1",
                        "train.steps",
                        "3",
                        "train.keep_last",
                        "2",
                        "seed",
                        "7",
                        "train.overwrite",
                        "true",
                        NULL};
    CHECK(train(b2, NULL, NULL, NULL) == ZERO_OK, "run B with overwrite: %s", zero_last_error());
    CHECK(step_mask(save) == 0x7c, "after run B (keep-last 2): steps mask %x, expected 2-6",
          step_mask(save));
    after = slurp(latest);
    CHECK(after && !strcmp(after, "step-00000003\n"), "latest after run B: '%s'",
          after ? after : "(none)");
    free(after);
    free(before);
    /* --overwrite on the command line sets train.overwrite */
    const char *cli[] = {"train",      TINY_RUN_ARGS,
                         "--set",      "train.samples=0",
                         "--set",      "data.builtin_bytes=65536",
                         "--save-dir", save,
                         NULL,         NULL};
    CHECK(train_cli(cli) == 1 && strstr(zero_last_error(), "already holds checkpoints"),
          "CLI without --overwrite: '%s'", zero_last_error());
    cli[19] = "--overwrite";
    CHECK(train_cli(cli) == 0, "CLI with --overwrite: '%s'", zero_last_error());
}

/* (2) `latest` lost: resume from the newest save. */
static void test_latest_lost(void) {
    char save[512], latest[600];
    path(save, sizeof save, "lost");
    snprintf(latest, sizeof latest, "%s/latest", save);
    result_t ref = {0}, res = {0};
    CHECK(train(NULL, NULL, NULL, &ref) == ZERO_OK, "uninterrupted: %s", zero_last_error());
    const char *first[] = {
        "train.save_dir", save, "train.save_every", "2", "train.steps", "4", NULL};
    CHECK(train(first, NULL, NULL, NULL) == ZERO_OK, "first 4 steps: %s", zero_last_error());
    CHECK(unlink(latest) == 0, "remove latest");
    clear_warnings();
    const char *again[] = {"train.save_dir", save, "train.resume", "latest", NULL};
    CHECK(train(again, NULL, NULL, &res) == ZERO_OK, "resume without latest: %s",
          zero_last_error());
    CHECK(res.start_step == 4 && res.steps == 2, "resumed at step %d, trained %d (expected 4, 2)",
          res.start_step, res.steps);
    CHECK(res.fp == ref.fp, "resumed %016llx, uninterrupted %016llx", (unsigned long long)res.fp,
          (unsigned long long)ref.fp);
    CHECK(strstr(warnings, "no `latest`") && strstr(warnings, "step-00000004"),
          "warning about the missing latest: '%s'", warnings);
    CHECK(step_mask(save) == ((1 << 2) | (1 << 4) | (1 << 6)), "checkpoints mask %x",
          step_mask(save));
}

/* (3) Resumes that do not fit. */
static void test_resume_mismatch(void) {
    char save[512], text[512];
    path(save, sizeof save, "mismatch");
    path(text, sizeof text, "other.txt");
    const char *first[] = {"train.save_dir", save, "train.steps", "3", NULL};
    result_t saved = {0}, res = {0};
    CHECK(train(first, NULL, NULL, &saved) == ZERO_OK, "save: %s", zero_last_error());
    /* another number of heads: the tensors have the same shapes, the model is another */
    const char *heads[] = {"train.resume", save, "model.heads", "4", NULL};
    zero_status_t st = train(heads, NULL, NULL, NULL);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), "model.heads = 2") &&
              strstr(zero_last_error(), "model.heads = 4"),
          "resume with 4 heads: status %d, '%s'", (int)st, zero_last_error());
    const char *seq[] = {"train.resume", save, "model.seq", "16", NULL};
    st = train(seq, NULL, NULL, NULL);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), "model.seq = 32") &&
              strstr(zero_last_error(), "model.seq = 16"),
          "resume with seq 16: status %d, '%s'", (int)st, zero_last_error());
    /* another data file: a warning naming both */
    FILE *f = fopen(text, "w");
    for (int i = 0; f && i < 2000; i++) fprintf(f, "line %d of another text, not the corpus.\n", i);
    if (f) fclose(f);
    clear_warnings();
    const char *data[] = {"train.resume", save, "data.path", text, "train.steps", "4", NULL};
    CHECK(train(data, NULL, NULL, NULL) == ZERO_OK, "resume on another file: %s",
          zero_last_error());
    CHECK(strstr(warnings, "built-in corpus") && strstr(warnings, text),
          "warning about the data file: '%s'", warnings);
    /* train.steps at the checkpoint's step: nothing to train, said with both numbers */
    clear_warnings();
    const char *none[] = {"train.resume", save, "train.steps", "3", NULL};
    CHECK(train(none, NULL, NULL, &res) == ZERO_OK, "resume at its own step: %s",
          zero_last_error());
    CHECK(strstr(warnings, "train.steps = 3") && strstr(warnings, ", 3: nothing to train"),
          "warning about nothing to train: '%s'", warnings);
    CHECK(res.steps == 0 && res.start_step == 3 && res.fp == saved.fp,
          "report: %d steps from %d, fingerprint %016llx (saved %016llx)", res.steps,
          res.start_step, (unsigned long long)res.fp, (unsigned long long)saved.fp);
    clear_warnings();
    const char *below[] = {"train.resume", save, "train.steps", "1", NULL};
    CHECK(train(below, NULL, NULL, &res) == ZERO_OK && strstr(warnings, "train.steps = 1") &&
              strstr(warnings, ", 3: nothing to train") && res.steps == 0,
          "train.steps below the checkpoint: '%s'", warnings);
}

/* The line of `text` that starts at *p, with the timing fields' values blanked. */
static char *next_line_untimed(const char **p) {
    const char *e = strchr(*p, '\n');
    size_t n = e ? (size_t)(e - *p) : strlen(*p);
    char *line = calloc(1, n + 1);
    memcpy(line, *p, n);
    *p += n + (e ? 1 : 0);
    static const char *const timing[] = {
        "\"tokens_per_s\": ", "\"step_s\": ", "\"elapsed_s\": ", "\"optimizer_step_s\": "};
    for (size_t k = 0; k < sizeof timing / sizeof *timing; k++) {
        char *v = strstr(line, timing[k]);
        if (!v) continue;
        v += strlen(timing[k]);
        char *end = v;
        while (*end && *end != ',' && *end != '}') end++;
        memmove(v, end, strlen(end) + 1); /* the value dropped, the key kept */
    }
    return line;
}

static double elapsed_of(const char *line) {
    const char *v = strstr(line, "\"elapsed_s\": ");
    return v ? atof(v + 13) : -1.0;
}

/* (4) The metrics log across a resume. */
static void test_metrics_resume(void) {
    char save[512], metrics[512], step4[600];
    path(save, sizeof save, "metrics-save");
    path(metrics, sizeof metrics, "metrics.jsonl");
    snprintf(step4, sizeof step4, "%s/step-%08d", save, 4);
    const char *full[] = {"train.save_dir", save, "train.save_every", "2", NULL};
    CHECK(train(full, metrics, NULL, NULL) == ZERO_OK, "uninterrupted: %s", zero_last_error());
    char *ref = slurp(metrics);
    CHECK(count_lines(metrics) == 6, "uninterrupted log has %d lines", count_lines(metrics));
    /* a crash mid-record leaves an incomplete line: it goes too */
    FILE *f = fopen(metrics, "a");
    if (f) {
        fputs("{\"step\": 7, \"loss\": 1.2", f);
        fclose(f);
    }
    const char *resume[] = {"train.save_dir", save, "train.resume", step4, NULL};
    CHECK(train(resume, metrics, NULL, NULL) == ZERO_OK, "resume at 4: %s", zero_last_error());
    char *got = slurp(metrics);
    CHECK(count_lines(metrics) == 6, "resumed log has %d lines, expected 6", count_lines(metrics));
    const char *p = ref, *q = got;
    double last_elapsed = -1;
    for (int i = 1; ref && got && i <= 6; i++) {
        char *a = next_line_untimed(&p), *b = next_line_untimed(&q);
        CHECK(!strcmp(a, b), "line %d differs:\n  uninterrupted %s\n  resumed       %s", i, a, b);
        free(a);
        free(b);
    }
    q = got;
    for (int i = 1; got && *q && i <= 6; i++) {
        const char *e = strchr(q, '\n');
        double el = elapsed_of(q);
        CHECK(el >= last_elapsed, "elapsed_s goes back at line %d: %g after %g", i, el,
              last_elapsed);
        last_elapsed = el;
        q = e ? e + 1 : q + strlen(q);
    }
    free(ref);
    free(got);
    /* resume latest with no checkpoint yet starts the log afresh */
    char fresh[512];
    path(fresh, sizeof fresh, "metrics-fresh");
    const char *start[] = {
        "train.save_dir", fresh, "train.resume", "latest", "train.steps", "2", NULL};
    CHECK(train(start, metrics, NULL, NULL) == ZERO_OK && count_lines(metrics) == 2,
          "a fresh start truncates the log: %d lines", count_lines(metrics));
}

/* (5) Output paths that cannot be written fail before step 1. */
static void test_bad_outputs(void) {
    char file[512], metrics[512], report[512];
    path(file, sizeof file, "a-file");
    path(metrics, sizeof metrics, "bad-metrics.jsonl");
    path(report, sizeof report, "no-such-dir/report.json");
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    const char *as_dir[] = {"train.save_dir", file, NULL};
    zero_status_t st = train(as_dir, metrics, NULL, NULL);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), file) &&
              strstr(zero_last_error(), "not a directory"),
          "save dir that is a file: status %d, '%s'", (int)st, zero_last_error());
    CHECK(count_lines(metrics) <= 0, "a step ran before the save dir failed (%d metrics lines)",
          count_lines(metrics));
    unlink(metrics);
    st = train(NULL, metrics, report, NULL);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), report),
          "report in a missing directory: status %d, '%s'", (int)st, zero_last_error());
    CHECK(count_lines(metrics) <= 0, "a step ran before the report path failed (%d lines)",
          count_lines(metrics));
    st = train(NULL, metrics, dir, NULL);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "is a directory"),
          "report path that is a directory: status %d, '%s'", (int)st, zero_last_error());
    /* A metrics log that cannot take its records: the run fails on every rank, naming it. */
    if (access("/dev/full", W_OK) == 0) {
        const char *two[] = {"train.ranks", "2", NULL};
        st = train(two, "/dev/full", NULL, NULL);
        CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "/dev/full") &&
                  strstr(zero_last_error(), "No space left"),
              "metrics on /dev/full: status %d, '%s'", (int)st, zero_last_error());
    } else {
        printf("metrics on /dev/full: skipped (no /dev/full)\n");
    }
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zero-test-ckptdir-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    zero_log_set_callback(on_log, NULL);
    test_shared_dir();
    test_latest_lost();
    test_resume_mismatch();
    test_metrics_resume();
    test_bad_outputs();
    zero_log_set_callback(NULL, NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return check_report();
}
