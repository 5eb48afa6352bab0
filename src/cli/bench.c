/* bench.c — `zero bench ...` (placeholder until the collective benchmark lands). */
#include "cli/cli.h"

#include <stdio.h>

int zero__cli_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zero bench: not built yet\n");
    return 1;
}
