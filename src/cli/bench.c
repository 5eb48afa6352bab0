/* bench.c — `zero bench <what>`: dispatches to the benchmarks, one per bench_<what>.c file.
 *
 * Only argument dispatch lives here; each benchmark parses its own flags and owns its exit code
 * (0 success, 1 failure, 2 usage error, as for every subcommand).
 */
#include "cli/cli.h"

/* Defined in bench_comm.c. Declared here rather than in cli.h, which lists subcommands only. */
int zero__bench_comm(int argc, char **argv);
int zero__bench_io(int argc, char **argv); /* bench_io.c */

static const zero__cli_command_t benches[] = {
    {"comm", zero__bench_comm,
     "collectives (all_reduce, reduce_scatter, all_gather, all_to_all), like nccl-tests"},
    {"io", zero__bench_io,
     "swap-file I/O: O_DIRECT read/write bandwidth over block sizes and queue depths (ds_io)"},
};

int zero__cli_bench(int argc, char **argv) {
    return zero__cli_dispatch("zero bench", "benchmark", NULL, benches,
                              sizeof benches / sizeof benches[0], argc, argv);
}
