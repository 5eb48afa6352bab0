/* cli.h — subcommands of the `zero` program. Each takes the arguments after its name
 * (argv[0] is the subcommand's name) and returns the process exit code: 0 success, 1 failure,
 * 2 usage error. */
#ifndef ZERO_CLI_H
#define ZERO_CLI_H

#include <stddef.h>

/* One entry of a subcommand table: `zero <name>` or `zero bench <name>`. */
typedef struct zero__cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} zero__cli_command_t;

/* Runs the entry of table[0..n) that argv[1] names with (argc - 1, argv + 1). `prog` ("zero",
 * "zero bench") and `what` ("command", "benchmark") word the messages; `footer` (or NULL) ends
 * the usage. No argument: the usage on stderr, 2; --help, -h or help: the usage on stdout, 0;
 * an unknown name: an error naming it and the known ones, 2. */
int zero__cli_dispatch(const char *prog, const char *what, const char *footer,
                       const zero__cli_command_t *table, size_t n, int argc, char **argv);

/* The value of option `flag` at argv[*i], as "--flag=value" or "--flag value" (then *i moves to
 * the value); "" when the value is missing, NULL when argv[*i] is not that flag. */
const char *zero__cli_arg_value(int argc, char **argv, int *i, const char *flag);

/* Parse option value v of `flag` as a number >= lo (whole: a whole number), at most 1e9, into
 * *out: 1; otherwise print "PROG: FLAG 'V' is invalid (expected ...)" on stderr and return 0. */
int zero__cli_number(const char *prog, const char *flag, const char *v, double lo, int whole,
                     double *out);

/* Set OMP_WAIT_POLICY to `policy` ("active": threads spin between parallel regions; "passive":
 * they sleep) and restart the `zero` program with the same arguments (libgomp reads it at load
 * time). Returns when the user set the variable, when the program is not `zero` (tests) or when
 * the restart fails. Call before any OpenMP region. */
void zero__cli_openmp_wait(const char *policy);

/* Cores busy over the next `ms` milliseconds (non-idle time of all CPUs in /proc/stat, in
 * cores), measured while this process sleeps: what other processes use. -1 where /proc/stat
 * cannot be read. */
double zero__cli_busy_cores(int ms);

int zero__cli_bench(int argc, char **argv);
int zero__cli_generate(int argc, char **argv);
int zero__cli_convert(int argc, char **argv);
int zero__cli_plot(int argc, char **argv);
int zero__cli_plan(int argc, char **argv);
int zero__cli_train(int argc, char **argv);
int zero__cli_tune(int argc, char **argv);

#endif /* ZERO_CLI_H */
