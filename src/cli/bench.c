/* bench.c — `zero bench <what>`: dispatches to the benchmarks, one per bench_<what>.c file.
 *
 * Only argument dispatch lives here; each benchmark parses its own flags and owns its exit code
 * (0 success, 1 failure, 2 usage error, as for every subcommand).
 */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

/* Defined in bench_comm.c. Declared here rather than in cli.h, which lists subcommands only. */
int zero__bench_comm(int argc, char **argv);

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} benches[] = {
    {"comm", zero__bench_comm,
     "collectives (all_reduce, reduce_scatter, all_gather, all_to_all), like nccl-tests"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: zero bench <benchmark> [options]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(out, "  %-6s %s\n", benches[i].name, benches[i].help);
    fprintf(out, "\n  zero bench <benchmark> --help   options of a benchmark\n");
}

int zero__cli_bench(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        if (!strcmp(argv[1], benches[i].name)) return benches[i].run(argc - 1, argv + 1);
    fprintf(stderr, "zero bench: unknown benchmark '%s' (expected one of:", argv[1]);
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++)
        fprintf(stderr, " %s", benches[i].name);
    fprintf(stderr, "; try `zero bench --help`)\n");
    return 2;
}
