/* main.c — the `zero` command line: dispatches subcommands (zero__cli_dispatch, which `zero
 * bench` uses too). The CLI is the only place that may exit the process. */
#include "cli/cli.h"
#include "zero/zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const zero__cli_command_t commands[] = {
    {"train", zero__cli_train, "train a model (threads or MPI ranks, ZeRO stages 0-3)"},
    {"bench", zero__cli_bench,
     "benchmarks: `zero bench comm` (collectives), `zero bench io` (swap files)"},
    {"plan", zero__cli_plan,
     "every way to run a config on a machine: memory, disk, traffic, step time; what fits"},
    {"tune", zero__cli_tune,
     "autotuning: run short trials of the ways to run a config that fit, keep the fastest"},
    {"convert", zero__cli_convert, "export a checkpoint to safetensors (Hugging Face GPT-2 names)"},
    {"plot", zero__cli_plot, "draw the curves of zero train --metrics logs (SVG, PNG, PDF)"},
    {"generate", zero__cli_generate,
     "generate text from a checkpoint or safetensors file (KV cache, sampling)"},
};

static void usage(FILE *out, const char *prog, const char *what, const char *footer,
                  const zero__cli_command_t *table, size_t n) {
    int width = 0;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(table[i].name) > width) width = (int)strlen(table[i].name);
    fprintf(out, "usage: %s <%s> [options]\n\n%ss:\n", prog, what, what);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-*s  %s\n", width, table[i].name, table[i].help);
    fprintf(out, "\n  %s <%s> --help   options of a %s\n%s", prog, what, what,
            footer ? footer : "");
}

const char *zero__cli_arg_value(int argc, char **argv, int *i, const char *flag) {
    const char *a = argv[*i];
    size_t n = strlen(flag);
    if (!strncmp(a, flag, n) && a[n] == '=') return a + n + 1;
    if (strcmp(a, flag)) return NULL;
    if (*i + 1 >= argc) return "";
    return argv[++*i];
}

int zero__cli_number(const char *prog, const char *flag, const char *v, double lo, int whole,
                     double *out) {
    char *end = NULL;
    double d = v && *v ? strtod(v, &end) : NAN;
    if (!v || !*v || *end || !isfinite(d) || d < lo || (whole && d != floor(d)) || d > 1e9) {
        fprintf(stderr, "%s: %s '%s' is invalid (expected %s %s %g)\n", prog, flag, v ? v : "",
                whole ? "a whole number" : "a number", "of at least", lo);
        return 0;
    }
    *out = d;
    return 1;
}

int zero__cli_dispatch(const char *prog, const char *what, const char *footer,
                       const zero__cli_command_t *table, size_t n, int argc, char **argv) {
    if (argc < 2) {
        usage(stderr, prog, what, footer, table, n);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout, prog, what, footer, table, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], table[i].name)) return table[i].run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown %s '%s' (expected one of:", prog, what, argv[1]);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %s", table[i].name);
    fprintf(stderr, "; try `%s --help`)\n", prog);
    return 2;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--version")) {
        printf("zero %s\n", ZERO_VERSION_STRING);
        return 0;
    }
    return zero__cli_dispatch("zero", "command", "  zero --version\n", commands,
                              sizeof commands / sizeof commands[0], argc, argv);
}
