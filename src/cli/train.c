/* train.c — `zero train --config FILE [--ranks N] [--backend threads|mpi] [--stage S]
 * [--steps K] [--json-report FILE] [--metrics FILE] ...`: parses flags over the JSON config,
 * runs the trainer (ranks as threads, or the MPI job under mpirun) with rank 0 writing to stdout,
 * and turns errors into a message with a hint and an exit code (0 ok, 1 failure, 2 usage).
 *
 * The flags that set config keys come from the key table (src/train/config.c); flags are applied
 * after the config file, in command-line order, whatever their position.
 */
#include "cli/cli.h"

#include "train/trainer.h"
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zero train [options]\n"
        "\n"
        "Train a GPT with ZeRO stages 0-3 over ranks: threads of this process (--ranks N), or\n"
        "the processes of an MPI job when started by mpirun. With no options: a small model\n"
        "on the built-in corpus, with progress, validation loss, samples and a report.\n"
        "\n"
        "options:\n"
        "  --config FILE        JSON config: DeepSpeed keys (ds_config.json) + model/data/train\n"
        "  --json-report FILE   write the run report as JSON (rank 0)\n"
        "  --metrics FILE       JSON lines, one object per step (rank 0)\n"
        "  --dtype NAME         compute dtype fp32, bf16 or fp16 (sets bf16.enabled and\n"
        "                       fp16.enabled over the config file)\n");
    zero__train_config_print_flags(out);
    fprintf(out,
            "  --set KEY=VALUE      set any config key, e.g. --set model.layers=2\n"
            "  --no-peak            skip the start-up matmul peak measurement (no MFU)\n"
            "  --print-config       print the effective configuration (JSON) and exit\n"
            "  --help-config        list every config key with its default\n"
            "  --config-doc         the key table as Markdown (docs/config.md)\n"
            "  -q, --quiet          no progress output (errors still go to stderr)\n"
            "  -h, --help           this text\n"
            "\n"
            "Unless OMP_WAIT_POLICY is set, `zero train` sets it (restarting itself): active\n"
            "(threads spin between parallel regions) when the run's threads fit the machine's\n"
            "cores, passive when they outnumber them.\n");
}

static int fail(const char *what) {
    fprintf(stderr, "zero train: %s: %s\n", what, zero_last_error());
    return 1;
}

static int need_value(int i, int argc, char **argv) {
    if (i + 1 >= argc) {
        fprintf(stderr, "zero train: %s needs a value (try `zero train --help`)\n", argv[i]);
        return 0;
    }
    return 1;
}

/* How OpenMP threads wait between parallel regions. Spinning ("active") saves the futex wake-up
 * of every region (~5-8% of an 85M step on 2 threads: docs/benchmarks.md, "OpenMP wait
 * policy") but when the run's threads outnumber the cores, spinners steal the cores that the
 * others need and slow everything down several times: "passive" then. libgomp reads the variable
 * when it is loaded, before main, so setting it takes effect only in a fresh image of this
 * program with the same command line. Only the `zero` program itself restarts (a test that calls
 * this function in-process sets the variable instead). A variable the user set wins. */
static void choose_openmp_wait(const zero_train_config_t *cfg) {
    if (getenv("OMP_WAIT_POLICY")) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int fits = cores > 0 && zero__train_machine_threads(cfg) <= cores;
    setenv("OMP_WAIT_POLICY", fits ? "active" : "passive", 1);
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

int zero__cli_train(int argc, char **argv) {
    const char *config_path = NULL, *report_path = NULL, *metrics_path = NULL;
    int print_config = 0, quiet = 0, peak = 1;
    /* First pass: the config file and the flags that are not keys. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--help-config")) {
            printf("configuration keys (JSON path, default):\n");
            zero__train_config_print_keys(stdout);
            return 0;
        } else if (!strcmp(a, "--config-doc")) {
            zero__train_config_print_markdown(stdout);
            return 0;
        } else if (!strcmp(a, "--config")) {
            if (!need_value(i, argc, argv)) return 2;
            config_path = argv[++i];
        } else if (!strcmp(a, "--json-report")) {
            if (!need_value(i, argc, argv)) return 2;
            report_path = argv[++i];
        } else if (!strcmp(a, "--metrics")) {
            if (!need_value(i, argc, argv)) return 2;
            metrics_path = argv[++i];
        } else if (!strcmp(a, "--print-config")) {
            print_config = 1;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (!strcmp(a, "--no-peak")) {
            peak = 0;
        } else if (!strcmp(a, "--set") || !strcmp(a, "--dtype") || zero__train_config_flag_key(a)) {
            if (!need_value(i, argc, argv)) return 2;
            i++;
        } else {
            fprintf(stderr, "zero train: unknown option '%s' (try `zero train --help`)\n", a);
            return 2;
        }
    }
    zero_train_config_t cfg;
    zero__train_config_default(&cfg);
    if (config_path && zero__train_config_load(&cfg, config_path))
        return fail("cannot use the config");
    /* Second pass: overrides, in command-line order. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *key = zero__train_config_flag_key(a), *value = NULL;
        char buf[1024];
        if (key) {
            value = argv[++i];
        } else if (!strcmp(a, "--set")) {
            snprintf(buf, sizeof buf, "%s", argv[++i]);
            char *eq = strchr(buf, '=');
            if (!eq) {
                fprintf(stderr, "zero train: --set '%s' needs KEY=VALUE\n", buf);
                return 2;
            }
            *eq = 0;
            key = buf;
            value = eq + 1;
        } else if (!strcmp(a, "--dtype")) {
            if (zero__train_config_set_dtype(&cfg, argv[++i])) return fail("invalid option value");
        } else if (!strcmp(a, "--config") || !strcmp(a, "--json-report") ||
                   !strcmp(a, "--metrics")) {
            i++;
        }
        if (key && zero__train_config_set(&cfg, key, value)) return fail("invalid option value");
    }
    if (print_config) {
        if (zero__train_config_check(&cfg, zero__train_world_size(&cfg)))
            return fail("invalid configuration");
        zero__train_config_print(&cfg, stdout);
        return 0;
    }
    choose_openmp_wait(&cfg);
    zero_train_io_t io = {quiet ? NULL : stdout, isatty(STDOUT_FILENO), peak, metrics_path};
    zero_train_report_t rep;
    if (zero__train_run(&cfg, &io, &rep)) {
        if (!quiet && io.tty) printf("\n");
        return fail("training failed");
    }
    int rc = 0;
    if (report_path && rep.rank == 0) {
        if (zero__train_report_write(&rep, &cfg, report_path))
            rc = fail("cannot write the report");
        else if (!quiet)
            printf("report written to %s\n", report_path);
    }
    zero__train_report_free(&rep);
    return rc;
}
