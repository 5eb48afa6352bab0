/* cli.h — subcommands of the `zero` program. Each takes the arguments after its name
 * (argv[0] is the subcommand's name) and returns the process exit code: 0 success, 1 failure,
 * 2 usage error. */
#ifndef ZERO_CLI_H
#define ZERO_CLI_H

int zero__cli_bench(int argc, char **argv);
int zero__cli_convert(int argc, char **argv);
int zero__cli_train(int argc, char **argv);

#endif /* ZERO_CLI_H */
