/* tune.c — `zero tune`: DeepSpeed's autotuner for zero. Builds the search space over a base
 * config (src/plan/tune.h), leaves out what `zero plan` says will not fit, runs the rest as
 * short trials — each a child `zero train` process, so a trial that crashes or runs out of
 * memory is recorded and the search goes on — in the tuner's order with DeepSpeed's stopping
 * rules, measures each from its metrics log with the warm-up steps left out, and writes the best
 * config and the table of every trial.
 *
 * Test hook: $ZERO_TUNE_TEST_CRASH_STAGE=S makes the trials of ZeRO stage S die of SIGSEGV
 * before they start (how the tests see a crashed trial recorded).
 */
#include "cli/cli.h"
#include "core/core_internal.h"
#include "core/fileio.h"
#include "plan/tune.h"
#include "zero/zero.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GiB (1024.0 * 1024.0 * 1024.0)
#define MiB (1024.0 * 1024.0)

typedef enum { T_NOT_RUN, T_PRUNED, T_OK, T_FAILED } trial_state_t;

typedef struct trial {
    trial_state_t state;
    int order; /* when it ran (1, 2, ...), 0: not run */
    double tokens_per_s, step_s, flops_per_s, score;
    double peak_rss; /* bytes, the largest rank's */
    char why[256];   /* failed, pruned or not run: why */
} trial_t;

typedef struct opts {
    const char *config, *out, *mpirun;
    int json, trial_steps, warmup_steps;
    double ram_gib, timeout_s;
} opts_t;

static void usage(FILE *out) {
    fprintf(out,
            "usage: zero tune --config FILE [--out DIR] [--json] [--trial-steps N]\n"
            "                 [--warmup-steps N] [--ram GiB] [--trial-timeout S] [--mpirun CMD]\n"
            "\n"
            "DeepSpeed's autotuning for zero: tries ways to run the config at its global batch\n"
            "(ZeRO stage, micro-batch and accumulation; unless autotuning.fast: offload, reduce\n"
            "bucket, stage-3 prefetch, overlap_comm, threads per rank, ranks per process), leaves\n"
            "out what `zero plan` says does not fit, runs the rest as short `zero train` trials\n"
            "in the order of autotuning.tuner_type, and writes the best config and every trial.\n"
            "\n"
            "  --config FILE        the base config; its `autotuning` block steers the search\n"
            "  --out DIR            where the trials and results go (default: autotuning_results)\n"
            "  --json               the table of trials as JSON on stdout\n"
            "  --trial-steps N      steps each trial runs (default: 5)\n"
            "  --warmup-steps N     first steps left out of the measure (default: 2)\n"
            "  --ram GiB            RAM the planner prunes against (default: MemAvailable)\n"
            "  --trial-timeout S    a trial running longer is killed and recorded (default: 900)\n"
            "  --mpirun CMD         also try one MPI process per rank, launched as\n"
            "                       `CMD -np WORLD zero train ...` (default: thread ranks only)\n"
            "\n"
            "Writes DIR/ds_config_optimal.json, DIR/trials.json and DIR/trial-NNN/ (config,\n"
            "logs, report, metrics). Exit status 0 when a trial succeeded, 1 otherwise, 2 on a\n"
            "bad flag. docs/tune.md has the details.\n");
}

/* The last non-empty line of a file (a failed trial's error), cut to n - 1 bytes. */
static void last_line(const char *path, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        const size_t k = strlen(line) < n ? strlen(line) : n - 1;
        if (k) {
            memcpy(buf, line, k);
            buf[k] = 0;
        }
    }
    if (f) fclose(f);
}

/* dir/name into buf; 0 when it does not fit. */
static int join(char *buf, size_t n, const char *dir, const char *name) {
    return snprintf(buf, n, "%s/%s", dir, name) < (int)n;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    if (!fseek(f, 0, SEEK_END)) {
        const long n = ftell(f);
        if (n >= 0 && !fseek(f, 0, SEEK_SET) && (s = malloc((size_t)n + 1))) {
            s[fread(s, 1, (size_t)n, f)] = 0;
        }
    }
    fclose(f);
    return s;
}

/* The trial's figures: step times after the warm-up from its metrics log, the largest rank's
 * peak RSS and FLOP per token from its report. 0 with t->why set when they are missing. */
static int read_results(const char *dir, int warmup, int tokens_per_step, trial_t *t) {
    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    double sum = 0;
    int n = 0;
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *step = cJSON_GetObjectItem(o, "step"), *s = cJSON_GetObjectItem(o, "step_s");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(s) && step->valuedouble > warmup) {
            sum += s->valuedouble;
            n++;
        }
        cJSON_Delete(o);
    }
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/report.json", dir);
    char *text = read_text(path);
    cJSON *rep = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!n || !(sum > 0) || !rep) {
        snprintf(t->why, sizeof t->why, "no %s after the warm-up", rep ? "step times" : "report");
        cJSON_Delete(rep);
        return 0;
    }
    t->step_s = sum / n;
    t->tokens_per_s = tokens_per_step / t->step_s;
    const cJSON *fpt = cJSON_GetObjectItem(rep, "flops_per_token"), *r;
    t->flops_per_s = cJSON_IsNumber(fpt) ? t->tokens_per_s * fpt->valuedouble : 0;
    t->peak_rss = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(rep, "per_rank")) {
        const cJSON *rss = cJSON_GetObjectItem(r, "peak_rss_bytes");
        if (cJSON_IsNumber(rss) && rss->valuedouble > t->peak_rss) t->peak_rss = rss->valuedouble;
    }
    cJSON_Delete(rep);
    return 1;
}

/* Set a dotted key of a JSON document to v (taken), creating the objects on the way. */
static void set_path(cJSON *root, const char *path, cJSON *v) {
    char key[128];
    cJSON *o = root;
    for (const char *dot; (dot = strchr(path, '.')); path = dot + 1) {
        snprintf(key, sizeof key, "%.*s", (int)(dot - path), path);
        cJSON *next = cJSON_GetObjectItem(o, key);
        if (!cJSON_IsObject(next)) {
            cJSON_DeleteItemFromObject(o, key);
            next = cJSON_AddObjectToObject(o, key);
        }
        o = next;
    }
    if (!o) {
        cJSON_Delete(v);
        return;
    }
    cJSON_DeleteItemFromObject(o, path);
    cJSON_AddItemToObject(o, path, v);
}

/* The base file with point p's keys written over it and its autotuning block removed (what
 * DeepSpeed's ds_config_optimal.json is); a trial also gets steps (> 0) and no checkpoints,
 * evaluations or samples. */
static int write_config(const char *base_path, const zero_train_config_t *base,
                        const zero_tune_point_t *p, int world, int steps, const char *path) {
    char *text = read_text(base_path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) {
        fprintf(stderr, "zero tune: cannot read %s again\n", base_path);
        return 0;
    }
    zero_train_config_t c;
    zero__tune_apply(base, p, world, &c);
    cJSON_DeleteItemFromObject(root, "autotuning");
    set_path(root, "zero_optimization.stage", cJSON_CreateNumber(c.stage));
    set_path(root, "train_micro_batch_size_per_gpu", cJSON_CreateNumber(c.micro_batch));
    set_path(root, "gradient_accumulation_steps", cJSON_CreateNumber(c.grad_accum));
    set_path(root, "train_batch_size", cJSON_CreateNumber(c.train_batch_size));
    set_path(root, "zero_optimization.reduce_bucket_size",
             cJSON_CreateNumber((double)c.reduce_bucket_elems));
    set_path(root, "zero_optimization.stage3_prefetch_bucket_size",
             cJSON_CreateNumber((double)c.prefetch_bucket_elems));
    set_path(root, "zero_optimization.overlap_comm", cJSON_CreateBool(c.overlap_comm));
    if (strcmp(c.offload_optimizer, base->offload_optimizer))
        set_path(root, "zero_optimization.offload_optimizer.device", cJSON_CreateString("none"));
    if (strcmp(c.offload_param, base->offload_param))
        set_path(root, "zero_optimization.offload_param.device", cJSON_CreateString("none"));
    set_path(root, "train.threads", cJSON_CreateNumber(c.threads));
    set_path(root, "train.ranks", cJSON_CreateNumber(world));
    set_path(root, "train.backend", cJSON_CreateString(c.backend));
    if (steps > 0) {
        set_path(root, "train.steps", cJSON_CreateNumber(steps));
        set_path(root, "train.eval_interval", cJSON_CreateNumber(0));
        set_path(root, "train.samples", cJSON_CreateNumber(0));
        set_path(root, "train.save_dir", cJSON_CreateString(""));
        set_path(root, "train.resume", cJSON_CreateString(""));
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    FILE *f = out ? fopen(path, "w") : NULL;
    const int ok = f && fputs(out, f) >= 0 && fputc('\n', f) != EOF;
    free(out);
    if (!f || fclose(f) || !ok) {
        fprintf(stderr, "zero tune: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    return 1;
}

/* Run one trial: `zero train` on dir/config.json as a child process (its own process group, so
 * a timeout ends it and everything it started), logs into dir. */
static void run_trial(const opts_t *o, const char *exe, const char *dir, const zero_tune_point_t *p,
                      int world, int tokens_per_step, trial_t *t) {
    char cfg[1100], rep[1100], met[1100], out[1100], err[1100], steps[32];
    if (!join(cfg, sizeof cfg, dir, "config.json") || !join(rep, sizeof rep, dir, "report.json") ||
        !join(met, sizeof met, dir, "metrics.jsonl") || !join(out, sizeof out, dir, "stdout.log") ||
        !join(err, sizeof err, dir, "stderr.log")) {
        t->state = T_FAILED;
        snprintf(t->why, sizeof t->why, "the trial directory's path is too long");
        return;
    }
    snprintf(steps, sizeof steps, "%d", o->trial_steps);
    remove(rep);
    remove(met);
    char np[16];
    snprintf(np, sizeof np, "%d", world);
    const char *argv[64];
    int n = 0;
    char launcher[512];
    if (p->ranks_per_process == 1 && world > 1) {
        snprintf(launcher, sizeof launcher, "%s", o->mpirun);
        for (char *s = strtok(launcher, " "); s && n < 40; s = strtok(NULL, " ")) argv[n++] = s;
        argv[n++] = "-np";
        argv[n++] = np;
    }
    const char *tail[] = {exe,         "train", "--config",      cfg,
                          "--steps",   steps,   "--json-report", rep,
                          "--metrics", met,     "--no-peak"};
    for (size_t i = 0; i < ZERO_ARRAY_LEN(tail); i++) argv[n++] = tail[i];
    argv[n] = NULL;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        t->state = T_FAILED;
        snprintf(t->why, sizeof t->why, "cannot start: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        setpgid(0, 0);
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr)) _exit(127);
        const char *crash = getenv("ZERO_TUNE_TEST_CRASH_STAGE");
        if (crash && *crash && atoi(crash) == p->stage) {
            signal(SIGSEGV, SIG_DFL);
            raise(SIGSEGV);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    int status = 0, timed_out = 0;
    const double t0 = zero_time_now();
    for (;;) {
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (!timed_out && zero_time_now() - t0 > o->timeout_s) {
            kill(-pid, SIGKILL);
            timed_out = 1;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    char last[200];
    last_line(err, last, sizeof last);
    t->state = T_FAILED;
    if (timed_out)
        snprintf(t->why, sizeof t->why, "killed after --trial-timeout %.0f s", o->timeout_s);
    else if (WIFSIGNALED(status))
        snprintf(t->why, sizeof t->why, "crashed: signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)),
                 WTERMSIG(status) == SIGKILL ? ", out of memory?" : "");
    else if (WEXITSTATUS(status))
        snprintf(t->why, sizeof t->why, "exit %d: %s", WEXITSTATUS(status), last);
    else if (read_results(dir, o->warmup_steps, tokens_per_step, t))
        t->state = T_OK;
}

static void point_name(char *buf, size_t n, const zero_tune_point_t *p, int world) {
    snprintf(buf, n,
             "stage %d, micro-batch %d x %d, offload %s, reduce bucket %.3g, prefetch %.3g, "
             "overlap_comm %s, %d thread%s per rank, %s",
             p->stage, p->micro, p->accum, zero__plan_offload_name((zero_plan_offload_t)p->offload),
             (double)p->reduce_bucket_elems, (double)p->prefetch_bucket_elems,
             p->overlap_comm ? "on" : "off", p->threads, p->threads == 1 ? "" : "s",
             p->ranks_per_process == 1 && world > 1 ? "one MPI process per rank"
                                                    : "thread ranks of one process");
}

static const char *state_name(trial_state_t s) {
    static const char *const names[] = {"not run", "pruned", "ok", "failed"};
    return names[s];
}

static void print_table(const zero_tune_point_t *pts, const trial_t *tr, int count, int best) {
    printf("\n  # S micro accum offload    bucket  prefetch ovl thr rpp | plan s/step | "
           "%9s %9s %9s | result\n",
           "tok/s", "s/step", "RSS MiB");
    for (int i = 0; i < count; i++) {
        const zero_tune_point_t *p = &pts[i];
        const trial_t *t = &tr[i];
        printf("%c%3d %d %5d %5d %-9s %8.3g %9.3g %-3s %3d %3d | %11.4g | ", i == best ? '*' : ' ',
               i, p->stage, p->micro, p->accum,
               zero__plan_offload_name((zero_plan_offload_t)p->offload),
               (double)p->reduce_bucket_elems, (double)p->prefetch_bucket_elems,
               p->overlap_comm ? "on" : "off", p->threads, p->ranks_per_process, p->plan_step_s);
        if (t->state == T_OK)
            printf("%9.1f %9.4f %9.1f | trial %d%s\n", t->tokens_per_s, t->step_s,
                   t->peak_rss / MiB, t->order, i == best ? ", best" : "");
        else
            printf("%9s %9s %9s | %s%s%s\n", "-", "-", "-", state_name(t->state),
                   t->why[0] ? ": " : "", t->why);
    }
}

static int write_json(FILE *out, const zero_train_config_t *base, const zero_tune_point_t *pts,
                      const trial_t *tr, int count, int best, int world, int run,
                      const char *best_path) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return 0;
    cJSON_AddStringToObject(root, "metric", base->tune_metric);
    cJSON_AddStringToObject(root, "tuner_type", base->tune_tuner);
    cJSON_AddBoolToObject(root, "fast", base->tune_fast);
    cJSON_AddNumberToObject(root, "world_size", world);
    cJSON_AddNumberToObject(root, "space_size", count);
    cJSON_AddNumberToObject(root, "trials_run", run);
    cJSON_AddNumberToObject(root, "best", best);
    cJSON_AddStringToObject(root, "best_config", best >= 0 ? best_path : "");
    cJSON *arr = cJSON_AddArrayToObject(root, "trials");
    for (int i = 0; arr && i < count; i++) {
        const zero_tune_point_t *p = &pts[i];
        const trial_t *t = &tr[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(arr, o);
        cJSON_AddNumberToObject(o, "index", i);
        cJSON_AddNumberToObject(o, "stage", p->stage);
        cJSON_AddNumberToObject(o, "micro_batch", p->micro);
        cJSON_AddNumberToObject(o, "gradient_accumulation_steps", p->accum);
        cJSON_AddStringToObject(o, "offload",
                                zero__plan_offload_name((zero_plan_offload_t)p->offload));
        cJSON_AddNumberToObject(o, "reduce_bucket_size", (double)p->reduce_bucket_elems);
        cJSON_AddNumberToObject(o, "stage3_prefetch_bucket_size", (double)p->prefetch_bucket_elems);
        cJSON_AddBoolToObject(o, "overlap_comm", p->overlap_comm);
        cJSON_AddNumberToObject(o, "threads", p->threads);
        cJSON_AddNumberToObject(o, "ranks_per_process", p->ranks_per_process);
        cJSON_AddNumberToObject(o, "plan_step_s", p->plan_step_s);
        cJSON_AddNumberToObject(o, "plan_ram_bytes", (double)p->plan_ram);
        cJSON_AddStringToObject(o, "state", state_name(t->state));
        cJSON_AddStringToObject(o, "why", t->why);
        cJSON_AddNumberToObject(o, "order", t->order);
        if (t->state == T_OK) {
            cJSON_AddNumberToObject(o, "tokens_per_s", t->tokens_per_s);
            cJSON_AddNumberToObject(o, "step_s", t->step_s);
            cJSON_AddNumberToObject(o, "flops_per_s", t->flops_per_s);
            cJSON_AddNumberToObject(o, "peak_rss_bytes", t->peak_rss);
        }
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return 0;
    fprintf(out, "%s\n", text);
    free(text);
    return 1;
}

static int parse_args(int argc, char **argv, opts_t *o) {
    const char *v;
    double num;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--config"))) {
            o->config = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--out"))) {
            o->out = v;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--mpirun"))) {
            o->mpirun = v;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--trial-steps"))) {
            if (!zero__cli_number("zero tune", a, v, 1, 1, &num)) return 2;
            o->trial_steps = (int)num;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--warmup-steps"))) {
            if (!zero__cli_number("zero tune", a, v, 0, 1, &num)) return 2;
            o->warmup_steps = (int)num;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--ram"))) {
            if (!zero__cli_number("zero tune", a, v, 1e-3, 0, &o->ram_gib)) return 2;
        } else if ((v = zero__cli_arg_value(argc, argv, &i, "--trial-timeout"))) {
            if (!zero__cli_number("zero tune", a, v, 1, 0, &o->timeout_s)) return 2;
        } else {
            fprintf(stderr, "zero tune: unknown option '%s' (try `zero tune --help`)\n", a);
            return 2;
        }
    }
    if (!o->config) {
        fprintf(stderr, "zero tune: --config FILE is required (the base config to tune)\n");
        return 2;
    }
    if (o->warmup_steps >= o->trial_steps) {
        fprintf(stderr,
                "zero tune: --warmup-steps %d leaves no step of --trial-steps %d to measure "
                "(expected fewer warm-up steps than trial steps)\n",
                o->warmup_steps, o->trial_steps);
        return 2;
    }
    return -1;
}

int zero__cli_tune(int argc, char **argv) {
    zero_train_config_t base;
    zero__train_config_default(&base);
    opts_t o = {.out = "autotuning_results", .trial_steps = 5, .warmup_steps = 2, .timeout_s = 900};
    const int rc = parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    zero__train_config_quiet(1);
    if (zero__train_config_load(&base, o.config)) {
        fprintf(stderr, "zero tune: %s\n", zero_last_error());
        return 1;
    }
    const int world = base.ranks;
    if (zero__train_config_check(&base, world)) {
        fprintf(stderr, "zero tune: %s\n", zero_last_error());
        return 1;
    }
    zero__train_config_quiet(0);
    char exe[1024];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "zero tune: cannot find the zero program (/proc/self/exe)\n");
        return 1;
    }
    exe[len] = 0;
    if (mkdir(o.out, 0777) && errno != EEXIST) {
        fprintf(stderr, "zero tune: cannot create --out %s: %s\n", o.out, strerror(errno));
        return 1;
    }

    zero_plan_calibration_t cal;
    char cpath[1024];
    if (zero__plan_calibration_load(zero__plan_calibration_path(cpath, sizeof cpath), &cal))
        zero__plan_calibration_default(&cal);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const zero_tune_machine_t m = {
        .world = world,
        .cores = cores > 0 ? (int)cores : 1,
        .mpi = o.mpirun != NULL,
        .ram_bytes = o.ram_gib > 0 ? (uint64_t)(o.ram_gib * GiB) : zero__mem_available(),
        .disk_bytes = zero__disk_free(base.nvme_path),
    };
    zero_tune_point_t *pts = NULL;
    int count = 0;
    if (zero__tune_space(&base, &m, &cal, &pts, &count)) {
        fprintf(stderr, "zero tune: %s\n", zero_last_error());
        return 1;
    }
    trial_t *tr = calloc((size_t)count, sizeof *tr);
    int *order = malloc((size_t)count * sizeof *order);
    double *measured = calloc((size_t)count, sizeof *measured);
    int *ran = calloc((size_t)count, sizeof *ran);
    if (!tr || !order || !measured || !ran) {
        free(pts), free(tr), free(order), free(measured), free(ran);
        fprintf(stderr, "zero tune: out of memory\n");
        return 1;
    }
    for (int i = 0; i < count; i++)
        if (!pts[i].fits) {
            tr[i].state = T_PRUNED;
            snprintf(tr[i].why, sizeof tr[i].why,
                     "zero plan: %.1f MiB of RAM per node (--ram %.1f MiB), %.1f MiB of swap "
                     "files (%.1f MiB free)",
                     (double)pts[i].plan_ram / MiB, (double)m.ram_bytes / MiB,
                     (double)pts[i].plan_disk / MiB, (double)m.disk_bytes / MiB);
        }
    const int n = zero__tune_order(base.tune_tuner, pts, count, (uint64_t)base.seed, order);
    const int lower = !strcmp(base.tune_metric, "latency");
    const int tokens_per_step = base.model.seq * pts[0].micro * pts[0].accum * world;
    if (!o.json)
        printf("zero tune: %d ways to run it, %d pruned by zero plan; tuner %s, metric %s, at most "
               "%d trials, early stopping after %d\n",
               count, count - n, base.tune_tuner, base.tune_metric, base.tune_num_trials,
               base.tune_early_stopping);
    int best = -1, run = 0, since_best = 0;
    char name[300], dir[1100];
    const int model = !strcmp(base.tune_tuner, "model_based");
    for (int k = 0; k < n; k++) {
        if (model) {
            const int pick = k + zero__tune_model_next(pts, count, measured, ran, order + k, n - k);
            const int t = order[pick];
            memmove(order + k + 1, order + k, (size_t)(pick - k) * sizeof *order);
            order[k] = t;
        }
        const int i = order[k];
        if (run >= base.tune_num_trials || since_best >= base.tune_early_stopping) {
            snprintf(tr[i].why, sizeof tr[i].why, "%s",
                     run >= base.tune_num_trials ? "tuner_num_trials reached"
                                                 : "tuner_early_stopping reached");
            continue;
        }
        snprintf(dir, sizeof dir, "%s/trial-%03d", o.out, i);
        char cfg_path[1200];
        if (!join(cfg_path, sizeof cfg_path, dir, "config.json") ||
            (mkdir(dir, 0777) && errno != EEXIST) ||
            !write_config(o.config, &base, &pts[i], world, o.trial_steps, cfg_path)) {
            fprintf(stderr, "zero tune: cannot prepare %s\n", dir);
            continue;
        }
        point_name(name, sizeof name, &pts[i], world);
        if (!o.json) {
            printf("trial %d (#%d): %s ... ", run + 1, i, name);
            fflush(stdout);
        }
        run_trial(&o, exe, dir, &pts[i], world, tokens_per_step, &tr[i]);
        tr[i].order = ++run;
        tr[i].score = lower                                ? -tr[i].step_s
                      : !strcmp(base.tune_metric, "flops") ? tr[i].flops_per_s
                                                           : tr[i].tokens_per_s;
        if (!o.json) {
            if (tr[i].state == T_OK)
                printf("%.1f tok/s, %.4f s/step, peak RSS %.1f MiB\n", tr[i].tokens_per_s,
                       tr[i].step_s, tr[i].peak_rss / MiB);
            else
                printf("%s (%s/stderr.log)\n", tr[i].why, dir);
        }
        ran[i] = 1;
        if (tr[i].state == T_OK) measured[i] = tr[i].step_s;
        if (tr[i].state == T_OK && (best < 0 || tr[i].score > tr[best].score)) {
            best = i;
            since_best = 0;
        } else {
            since_best++;
        }
    }
    char best_path[1200];
    snprintf(best_path, sizeof best_path, "%s/ds_config_optimal.json", o.out);
    int ok = best >= 0;
    if (ok) ok = write_config(o.config, &base, &pts[best], world, 0, best_path);
    char trials_path[1200];
    snprintf(trials_path, sizeof trials_path, "%s/trials.json", o.out);
    FILE *f = fopen(trials_path, "w");
    if (!f || !write_json(f, &base, pts, tr, count, best, world, run, best_path) || fclose(f)) {
        fprintf(stderr, "zero tune: cannot write %s\n", trials_path);
        ok = 0;
    }
    if (o.json) {
        write_json(stdout, &base, pts, tr, count, best, world, run, best_path);
    } else {
        print_table(pts, tr, count, best);
        if (best >= 0) {
            point_name(name, sizeof name, &pts[best], world);
            printf("\nbest of %d trials by %s: %s: %.1f tok/s, %.4g s/step, %.4g FLOP/s; wrote %s "
                   "and %s\n",
                   run, base.tune_metric, name, tr[best].tokens_per_s, tr[best].step_s,
                   tr[best].flops_per_s, best_path, trials_path);
        }
    }
    if (best < 0)
        fprintf(stderr,
                "zero tune: no trial succeeded (%d run, %d pruned by zero plan); see %s and the "
                "trials' stderr.log\n",
                run, count - n, trials_path);
    free(pts), free(tr), free(order), free(measured), free(ran);
    return ok ? 0 : 1;
}
