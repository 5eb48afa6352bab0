/* main.c — the `zero` command line: dispatches subcommands. The only place that exits. */
#include "zero/zero.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: zero <command> [options]\n\n"
                 "commands:\n"
                 "  bench comm   collective benchmark (threads or MPI backend)\n\n"
                 "  zero --help | --version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("zero %s\n", ZERO_VERSION_STRING);
        return 0;
    }
    fprintf(stderr, "zero: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
