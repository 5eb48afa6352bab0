/* train.c — `zero train --config FILE [--ranks N] [--backend threads|mpi] [--stage S]
 * [--steps K] [--json-report FILE] [--metrics FILE] ...`: parses flags over the JSON config,
 * runs the trainer (ranks as threads, or the MPI job under mpirun) with rank 0 writing to stdout,
 * and turns errors into a message with a hint and an exit code (0 ok, 1 failure, 2 usage).
 *
 * The flags that set config keys come from the key table (src/train/config.c); flags are applied
 * after the config file, in command-line order, whatever their position, and the file's values
 * for the keys they set are not read (so a flag can replace a value the file has wrong).
 * `--name value` and `--name=value` are the same; a value that starts with `--` where one is
 * expected is an error naming the option that lacks it.
 */
#include "cli/cli.h"
#include "core/core_internal.h"
#include "plan/plan.h"

#include "train/preflight.h"
#include "train/trainer.h"
#include "zero/zero.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zero train [options]\n"
        "\n"
        "Train a GPT with ZeRO stages 0-3 over ranks: threads of this process (--ranks N), or\n"
        "the processes of an MPI job when started by mpirun. With no options: a small model\n"
        "on the built-in corpus, with progress, validation loss, samples and a report.\n"
        "A DeepSpeed key the config leaves out means what it means under DeepSpeed (no\n"
        "scheduler: constant learning rate; no gradient_clipping: none), also with no --config.\n"
        "\n"
        "options:\n"
        "  --config FILE        JSON config: DeepSpeed keys (ds_config.json) + model/data/train\n"
        "  --deepspeed_config FILE  the same (DeepSpeed's spelling; also --deepspeed-config)\n"
        "  --json-report FILE   write the run report as JSON (rank 0)\n"
        "  --metrics FILE       JSON lines, one object per step (rank 0)\n"
        "  --dtype NAME         compute dtype fp32, bf16 or fp16 (sets bf16.enabled and\n"
        "                       fp16.enabled over the config file)\n");
    zero__train_config_print_flags(out);
    fprintf(out,
            "  --overwrite          let a fresh run save into a --save-dir that holds another\n"
            "                       run's checkpoints (train.overwrite; else refused)\n"
            "  --ignore-memory-check  start even when the estimated memory exceeds what is\n"
            "                       available (train.memory_check = false; else refused)\n"
            "  --tune-online        retune buckets, prefetch and overlap_comm between steps\n"
            "                       (autotuning.online; the weights stay the same bits)\n"
            "  --set KEY=VALUE      set any config key, e.g. --set model.layers=2\n"
            "  --no-peak            no matmul peak: no MFU, no roofline (else --peak GFLOPS,\n"
            "                       `zero plan --calibrate`'s file, or measured at start-up)\n"
            "  --print-config       print the effective configuration (JSON; on stderr the memory\n"
            "                       and swap-file bytes a rank needs) and exit\n"
            "  --help-config        list every config key with its default\n"
            "  --config-doc         the key table as Markdown (docs/config.md)\n"
            "  -q, --quiet          no progress output (errors still go to stderr)\n"
            "  -h, --help           this text\n"
            "\n"
            "Every option that takes a value accepts --option VALUE and --option=VALUE.\n"
            "Flags apply after the config file and win over it, in command-line order.\n"
            "\n"
            "Unless OMP_WAIT_POLICY is set, `zero train` sets it (restarting itself): active\n"
            "(threads spin between parallel regions) when the run's threads (every rank's\n"
            "compute threads, and its aio threads with swap files on NVMe) fit the machine's\n"
            "cores, passive when they outnumber them.\n"
            "\n"
            "SIGTERM, SIGINT or SIGHUP: finish the current step, save a checkpoint (--save-dir),\n"
            "write the report and exit with 128 + the signal; a second signal exits at once.\n"
            "SIGUSR1: save a checkpoint after the current step and go on.\n");
}

static int fail(const char *what) {
    fprintf(stderr, "zero train: %s: %s\n", what, zero_last_error());
    return 1;
}

/* One command-line argument: `--name value` or `--name=value` (value NULL for a switch). */
typedef struct {
    char name[64];
    const char *value;
} arg_t;

enum { A_VALUE, A_SWITCH };

/* The options that are not config keys, with whether they take a value. */
static const struct {
    const char *name;
    int kind;
} plain_opts[] = {
    {"--config", A_VALUE},
    {"--deepspeed_config", A_VALUE},
    {"--deepspeed-config", A_VALUE},
    {"--json-report", A_VALUE},
    {"--metrics", A_VALUE},
    {"--set", A_VALUE},
    {"--dtype", A_VALUE},
    {"--print-config", A_SWITCH},
    {"--help-config", A_SWITCH},
    {"--config-doc", A_SWITCH},
    {"--no-peak", A_SWITCH},
    {"--overwrite", A_SWITCH},
    {"--ignore-memory-check", A_SWITCH},
    {"--tune-online", A_SWITCH},
    {"--quiet", A_SWITCH},
    {"-q", A_SWITCH},
    {"--help", A_SWITCH},
    {"-h", A_SWITCH},
};

static int is_config_flag(const char *name) {
    return !strcmp(name, "--config") || !strcmp(name, "--deepspeed_config") ||
           !strcmp(name, "--deepspeed-config");
}

/* Split argv into arguments; 0, or 2 after a usage message (an unknown option, a missing value,
 * a value that is itself an option, a value given to a switch). */
static int split_args(int argc, char **argv, arg_t *out, int *n_out) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) ? NULL : strchr(a, '=');
        arg_t *r = &out[n++];
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof r->name) len = sizeof r->name - 1;
        memcpy(r->name, a, len);
        r->name[len] = 0;
        r->value = eq ? eq + 1 : NULL;
        int kind = -1;
        for (size_t k = 0; k < sizeof plain_opts / sizeof plain_opts[0]; k++)
            if (!strcmp(plain_opts[k].name, r->name)) kind = plain_opts[k].kind;
        if (kind < 0 && zero__train_config_flag_key(r->name)) kind = A_VALUE;
        if (kind < 0) {
            fprintf(stderr, "zero train: unknown option '%s' (try `zero train --help`)\n", a);
            return 2;
        }
        if (kind == A_SWITCH && eq) {
            fprintf(stderr, "zero train: %s takes no value (got '%s')\n", r->name, a);
            return 2;
        }
        if (kind == A_VALUE && !eq) {
            if (i + 1 >= argc) {
                fprintf(stderr, "zero train: %s needs a value (try `zero train --help`)\n", a);
                return 2;
            }
            if (!strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr,
                        "zero train: %s needs a value, but the next argument is the option '%s' "
                        "(write %s=VALUE for a value that starts with --)\n",
                        a, argv[i + 1], a);
                return 2;
            }
            r->value = argv[++i];
        }
    }
    *n_out = n;
    return 0;
}

/* The effective configuration: defaults, the keys the command line sets marked first, the file
 * (its values for those keys skipped), then the flags in command-line order. Each value is checked
 * once, where it is applied; the cross-key checks come later (zero__train_config_check). */
static int build_config(const arg_t *args, int n, const char *config_path, int loud,
                        zero_train_config_t *cfg) {
    zero__train_config_default(cfg);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const char *name = args[i].name, *key = zero__train_config_flag_key(name);
            const char *value = args[i].value;
            char buf[1024];
            if (!strcmp(name, "--set")) {
                snprintf(buf, sizeof buf, "%s", value);
                char *eq = strchr(buf, '=');
                if (!eq) {
                    if (loud) fprintf(stderr, "zero train: --set '%s' needs KEY=VALUE\n", buf);
                    return 2;
                }
                *eq = 0;
                key = buf;
                value = eq + 1;
            } else if (!strcmp(name, "--overwrite")) {
                key = "train.overwrite";
                value = "true";
            } else if (!strcmp(name, "--ignore-memory-check")) {
                key = "train.memory_check";
                value = "false";
            } else if (!strcmp(name, "--tune-online")) {
                key = "autotuning.online";
                value = "true";
            } else if (!strcmp(name, "--dtype")) {
                if (pass == 0) {
                    zero__train_config_mark_cli(cfg, "bf16.enabled");
                    zero__train_config_mark_cli(cfg, "fp16.enabled");
                } else if (zero__train_config_set_dtype(cfg, value)) {
                    return loud ? fail("invalid option value") : 1;
                }
                continue;
            }
            if (!key) continue;
            if (pass == 0 ? zero__train_config_mark_cli(cfg, key)
                          : zero__train_config_set(cfg, key, value)) {
                /* the message names the key; a flag's user looks for the flag */
                if (strcmp(name, "--set")) {
                    char msg[512];
                    const char *e = zero_last_error(), *cl = "command line: ";
                    snprintf(msg, sizeof msg, "%s",
                             strncmp(e, cl, strlen(cl)) ? e : e + strlen(cl));
                    zero__error(ZERO_ERR_CONFIG, "command line: %s: %s", name, msg);
                }
                return loud ? fail("invalid option value") : 1;
            }
        }
        if (pass == 0 && config_path && zero__train_config_load(cfg, config_path))
            return loud ? fail("cannot use the config") : 1;
    }
    return 0;
}

/* The "cpu" line of /proc/stat: busy and total jiffies of all CPUs; 0 on failure. */
static int cpu_jiffies(double *busy, double *total) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    unsigned long long v[8] = {0};
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                         &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 5) return 0;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += (double)v[i];
    *busy = *total - (double)v[3] - (double)v[4]; /* idle, iowait */
    return 1;
}

double zero__cli_busy_cores(int ms) {
    double b0, t0, b1, t1;
    if (!cpu_jiffies(&b0, &t0)) return -1;
    const struct timespec nap = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&nap, NULL);
    if (!cpu_jiffies(&b1, &t1) || t1 <= t0) return -1;
    return (b1 - b0) / (t1 - t0) * (double)sysconf(_SC_NPROCESSORS_ONLN);
}

/* How OpenMP threads wait between parallel regions (cli.h: zero train's and zero generate's; each
 * picks the policy). libgomp reads the variable when it is loaded, before main, so setting it takes
 * effect only in a fresh image of this program with the same command line. Only the `zero` program
 * itself restarts (a test that calls this function in-process sets the variable instead). A
 * variable the user set wins. */
void zero__cli_openmp_wait(const char *policy) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", policy, 1);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    const char *base = strrchr(exe, '/');
    if (strcmp(base ? base + 1 : exe, "zero") != 0) return;
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f) return;
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    if (len == 0 || len >= sizeof buf - 1) return;
    buf[len] = 0;
    char *args[1024];
    int argc = 0;
    for (size_t i = 0; i < len && argc < 1023; i += strlen(buf + i) + 1) args[argc++] = buf + i;
    args[argc] = NULL;
    fflush(NULL);
    execv(exe, args); /* returns only on failure: carry on with libgomp's default */
}

/* Signals. The first SIGINT, SIGTERM or SIGHUP asks the run to stop after the current step (it
 * saves a checkpoint when train.save_dir is set and writes the report; exit status 128 + the
 * signal); a second one exits at once. SIGUSR1 asks for a checkpoint after the current step and
 * training goes on (Slurm's --signal warning before preemption). The trainer reads the two flags
 * once per step and agrees on them across ranks (zero_train_io_t).
 *
 * The signals are blocked in every thread of the run and taken by one thread of ours in
 * sigwait, never delivered asynchronously to a compute thread: oneDNN's JIT sgemm kernels (2.x,
 * Debian 12) point rsp into the heap, so a signal frame pushed while one runs corrupts the heap
 * (uxlfoundation/oneDNN#4845; seen here as glibc's "corrupted size vs. prev_size" after a
 * SIGUSR1). Threads inherit the mask, so blocking it before the run starts (before MPI_Init, the
 * rank threads, the progress threads and OpenMP's) covers them all. A handler doing the same as
 * the thread stays installed for any thread created before. */
static atomic_int stop_signal, save_request;
static const int handled[] = {SIGHUP, SIGINT, SIGTERM, SIGUSR1};
#define N_HANDLED (sizeof handled / sizeof handled[0])
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal flags must be lock-free");

static void say_signal(const char *text) {
    ssize_t w = write(STDERR_FILENO, text, strlen(text));
    (void)w;
}

/* Async-signal-safe: atomics, write and _exit only. */
static void take_signal(int sig) {
    if (sig == SIGUSR1) {
        atomic_store(&save_request, 1);
        say_signal("zero train: SIGUSR1: a checkpoint will be saved after the current step\n");
    } else if (atomic_exchange(&stop_signal, sig) == 0) {
        say_signal(sig == SIGINT   ? "zero train: SIGINT: "
                   : sig == SIGHUP ? "zero train: SIGHUP: "
                                   : "zero train: SIGTERM: ");
        say_signal("stopping after the current step (checkpoint if --save-dir, report); signal "
                   "again to exit at once\n");
    } else {
        say_signal("zero train: second signal: exiting at once\n");
        _exit(128 + sig);
    }
}

static void on_signal(int sig) {
    int saved_errno = errno;
    take_signal(sig);
    errno = saved_errno;
}

static void *signal_thread_main(void *arg) {
    const sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig) == 0) take_signal(sig); /* a cancellation point */
    }
    return NULL;
}

typedef struct signals {
    sigset_t set, old_mask;
    struct sigaction old[N_HANDLED];
    pthread_t thread;
    int thread_started;
} signals_t;

static void signals_install(signals_t *s) {
    atomic_store(&stop_signal, 0);
    atomic_store(&save_request, 0);
    sigemptyset(&s->set);
    for (size_t i = 0; i < N_HANDLED; i++) sigaddset(&s->set, handled[i]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_mask = s->set;
    sa.sa_flags = SA_RESTART; /* file writes and waits carry on after a handler */
    for (size_t i = 0; i < N_HANDLED; i++) sigaction(handled[i], &sa, &s->old[i]);
    pthread_sigmask(SIG_BLOCK, &s->set, &s->old_mask);
    s->thread_started = pthread_create(&s->thread, NULL, signal_thread_main, &s->set) == 0;
    if (!s->thread_started) /* the handler then takes them, on the compute threads */
        pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
}

static void signals_restore(signals_t *s) {
    if (s->thread_started) {
        pthread_cancel(s->thread);
        pthread_join(s->thread, NULL);
        pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
    }
    for (size_t i = 0; i < N_HANDLED; i++) sigaction(handled[i], &s->old[i], NULL);
}

/* After --print-config's JSON, on stderr: what one rank of this configuration will need, in
 * memory and, with the optimizer's states or the parameters on NVMe, on disk (the pre-flight's
 * estimate). */
static void print_needs(const zero_train_config_t *cfg) {
    zero_memory_estimate_t e;
    const int world = zero__train_world_size(cfg);
    if (zero__train_memory_estimate(cfg, world, cfg->threads > 0 ? cfg->threads : 1, &e)) return;
    const double MiB = 1048576.0;
    fprintf(stderr,
            "estimate per rank (%d rank%s): %.1f MiB of memory (parameters %.1f, gradients %.1f, "
            "optimizer states %.1f, activations %.1f, communication buffers %.1f, offload "
            "staging %.1f)",
            world, world == 1 ? "" : "s", e.total_bytes / MiB, e.bytes[ZERO_MEM_PARAMS] / MiB,
            e.bytes[ZERO_MEM_GRADS] / MiB, e.bytes[ZERO_MEM_OPTIM] / MiB,
            e.bytes[ZERO_MEM_ACTIVATIONS] / MiB, e.bytes[ZERO_MEM_COMM] / MiB,
            e.bytes[ZERO_MEM_OFFLOAD] / MiB);
    if (e.disk_bytes) { /* the optimizer's directory, else (offload_param alone) the parameters' */
        const int opt = !strcasecmp(cfg->offload_optimizer, "nvme");
        const int par = !strcasecmp(cfg->offload_param, "nvme");
        fprintf(stderr, "; %.1f MiB of swap files under %s", e.disk_bytes / MiB,
                opt ? cfg->nvme_path : cfg->param_nvme_path);
        if (opt && par && strcmp(cfg->nvme_path, cfg->param_nvme_path))
            fprintf(stderr, " and %s", cfg->param_nvme_path);
    }
    fputc('\n', stderr);
}

int zero__cli_train(int argc, char **argv) {
    const char *config_path = NULL, *report_path = NULL, *metrics_path = NULL;
    int print_config = 0, quiet = 0, peak = 1, n = 0;
    arg_t *args = calloc((size_t)(argc > 0 ? argc : 1), sizeof *args);
    if (!args) return fail("out of memory");
    int rc = split_args(argc, argv, args, &n);
    for (int i = 0; i < n && !rc; i++) {
        const char *a = args[i].name;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(args);
            return 0;
        } else if (!strcmp(a, "--help-config")) {
            printf("configuration keys (JSON path, default):\n");
            zero__train_config_print_keys(stdout);
            free(args);
            return 0;
        } else if (!strcmp(a, "--config-doc")) {
            zero__train_config_print_markdown(stdout);
            free(args);
            return 0;
        } else if (is_config_flag(a)) {
            config_path = args[i].value;
        } else if (!strcmp(a, "--json-report")) {
            report_path = args[i].value;
        } else if (!strcmp(a, "--metrics")) {
            metrics_path = args[i].value;
        } else if (!strcmp(a, "--print-config")) {
            print_config = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--no-peak")) {
            peak = 0;
        }
    }
    zero_train_config_t cfg;
    /* Under mpirun every process reads the config: rank 0 alone says what it noticed. */
    const char *mpi_rank = getenv("OMPI_COMM_WORLD_RANK");
    if (!mpi_rank) mpi_rank = getenv("PMI_RANK");
    int other_rank = mpi_rank && atoi(mpi_rank) > 0;
    /* Read the config muted first when this program may restart itself for OMP_WAIT_POLICY
     * (zero__cli_openmp_wait), so that its warnings are printed once, by the image that trains. */
    if (!rc && !print_config && !getenv("OMP_WAIT_POLICY")) {
        zero__train_config_quiet(1);
        int r0 = build_config(args, n, config_path, 0, &cfg);
        zero__train_config_quiet(0);
        if (!r0) {
            /* spinning saves the futex wake-up of every region (~5-8% of an 85M step on 2
             * threads: docs/benchmarks.md, "OpenMP wait policy"), but when the run's threads
             * outnumber the cores, spinners steal the cores the others need */
            long cores = sysconf(_SC_NPROCESSORS_ONLN);
            zero__cli_openmp_wait(
                cores > 0 && zero__train_machine_threads(&cfg) <= cores ? "active" : "passive");
        }
    }
    zero__train_config_quiet(other_rank);
    if (!rc) rc = build_config(args, n, config_path, 1, &cfg);
    free(args);
    if (rc) return rc;
    if (print_config) {
        if (zero__train_data_vocab(&cfg) ||
            zero__train_config_check(&cfg, zero__train_world_size(&cfg)))
            return fail("invalid configuration");
        zero__train_config_print(&cfg, stdout);
        print_needs(&cfg);
        return 0;
    }
    /* `zero plan --calibrate`'s GEMM rate, when this machine has the file: the trainer takes the
     * peak from it where it fits the run */
    char cal_path[1024];
    zero_plan_calibration_t cal;
    zero__plan_calibration_path(cal_path, sizeof cal_path);
    if (!peak || zero__plan_calibration_load(cal_path, &cal)) {
        if (peak && access(cal_path, F_OK) == 0 && !quiet)
            fprintf(stderr, "zero train: ignoring the calibration file: %s\n", zero_last_error());
        memset(&cal, 0, sizeof cal);
    }
    zero_train_io_t io = {.out = quiet ? NULL : stdout,
                          /* under a launcher (mpirun, srun) stdout may be a pty that forwards
                           * every redraw into the job's log: plain lines there */
                          .tty = isatty(STDOUT_FILENO) && !zero_comm_mpi_launched(),
                          .measure_peak = peak,
                          .calibration_path = cal.measured ? cal_path : NULL,
                          .calibration_gemm_flops = cal.gemm_fp32_flops,
                          .calibration_threads = cal.threads,
                          .metrics_path = metrics_path,
                          .report_path = report_path,
                          .stop_signal = &stop_signal,
                          .save_request = &save_request};
    /* After zero__cli_openmp_wait (its restart would drop them), before any thread of the run. */
    signals_t sigs;
    signals_install(&sigs);
    zero_train_report_t rep;
    if (zero__train_run(&cfg, &io, &rep)) {
        if (!quiet && io.tty) printf("\n");
        rc = fail("training failed");
        /* Under MPI: end the whole job now; finalizing would wait for a hung rank forever. */
        zero_comm_mpi_abort(rc);
        signals_restore(&sigs);
        return rc;
    }
    /* The signal the ranks agreed to stop for; or one that came after the last step. Under
     * mpirun only rank 0 (which writes the report) exits with 128 + N: mpirun kills the other
     * ranks as soon as one exits non-zero, and it must not kill rank 0 while it writes. The other
     * ranks are done by then (MPI is finalized) and exit 0; mpirun's status is rank 0's. */
    int sig = rep.stop_signal ? rep.stop_signal : atomic_load(&stop_signal);
    int mpi_peer = rep.rank != 0 && rep.backend && !strcmp(rep.backend, "mpi");
    if (report_path && rep.rank == 0) {
        if (zero__train_report_write(&rep, &cfg, report_path))
            rc = fail("cannot write the report");
        else if (!quiet)
            printf("report written to %s\n", report_path);
    }
    zero__train_report_free(&rep);
    signals_restore(&sigs);
    if (!rc && sig && !mpi_peer) {
        rc = 128 + sig;
        if (!quiet) printf("zero train: stopped by signal %d: exit status %d\n", sig, rc);
    }
    return rc;
}
