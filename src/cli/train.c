/* train.c — `zero train ...` (placeholder until the trainer lands). */
#include "cli/cli.h"

#include <stdio.h>

int zero__cli_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "zero train: not built yet\n");
    return 1;
}
