/* main.c — the `zero` command line: dispatches subcommands. The CLI is the only place that may
 * exit the process. */
#include "cli/cli.h"
#include "zero/zero.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"train", zero__cli_train, "train a model (threads or MPI ranks, ZeRO stages 0-3)"},
    {"bench", zero__cli_bench, "benchmarks: `zero bench comm` (collectives)"},
    {"convert", zero__cli_convert, "export a checkpoint to safetensors (Hugging Face GPT-2 names)"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: zero <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n  zero <command> --help   options of a command\n"
                 "  zero --version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zero %s\n", ZERO_VERSION_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "zero: unknown command '%s' (try `zero --help`)\n", argv[1]);
    return 2;
}
