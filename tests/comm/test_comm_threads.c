/* test_comm_threads.c — the collective matrix (coll_cases.c) on the threads backend, for rank
 * counts 1, 2, 3, 4, 7 and 8, each rank a pthread of one clique.
 *
 * Usage: test_comm_threads [--quick] [--ranks N]...
 *   --quick  the big count (1048579) only for two cases (sanitizer builds)
 *   --ranks  run only these rank counts (repeatable)
 */
#include "check.h"
#include "comm/coll_cases.h"
#include "thread_ranks.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct run {
    coll_opts_t opts;
    coll_tally_t *tallies; /* one per rank: no sharing between rank threads */
    zero_mem_t **mems;     /* one accounting domain per rank: scratch is ZERO_MEM_COMM */
} run_t;

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    run_t *run = arg;
    zero_comm_set_mem(comm, run->mems[rank]);
    coll_run_matrix(comm, &run->opts, &run->tallies[rank]);
}

/* After the communicators are freed no scratch is left, and none was accounted under another
 * category. Returns 1 when the rank's domain is clean. */
static void check_memory(zero_mem_t *mem, int n, int r, size_t *comm_peak) {
    zero_mem_stats_t ms;
    zero_mem_get_stats(mem, &ms);
    size_t other = 0;
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++)
        if (c != ZERO_MEM_COMM) other += ms.peak_bytes[c];
    if (ms.peak_bytes[ZERO_MEM_COMM] > *comm_peak) *comm_peak = ms.peak_bytes[ZERO_MEM_COMM];
    CHECK(ms.live_total_bytes == 0 && other == 0,
          "threads n=%d rank %d memory: %zu bytes live after free, %zu peak bytes outside "
          "comm_buffers",
          n, r, ms.live_total_bytes, other);
}

int main(int argc, char **argv) {
    int quick = 0, ranks[16], nranks = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc && nranks < 16) {
            ranks[nranks++] = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--ranks N]...\n", argv[0]);
            return 2;
        }
    }
    if (!nranks) {
        const int all[] = {1, 2, 3, 4, 7, 8};
        for (int i = 0; i < 6; i++) ranks[nranks++] = all[i];
    }
    for (int i = 0; i < nranks; i++) {
        int n = ranks[i];
        atomic_int arrivals = 0;
        char label[32];
        snprintf(label, sizeof label, "threads n=%d", n);
        run_t run = {
            .opts = {.quick = quick, .big = 1, .barrier_arrivals = &arrivals, .label = label},
            .tallies = calloc((size_t)n, sizeof(coll_tally_t)),
            .mems = calloc((size_t)n, sizeof(zero_mem_t *))};
        for (int r = 0; r < n; r++) zero_mem_init(&run.mems[r], NULL);
        long p = atomic_load(&passed), f = atomic_load(&failed);
        double t0 = zero_time_now();
        CHECK(thread_ranks_clique(n, 60.0, rank_main, &run) == ZERO_OK, "clique of %d", n);
        size_t comm_peak = 0;
        for (int r = 0; r < n; r++) {
            check_add(run.tallies[r].passed, run.tallies[r].failed);
            check_memory(run.mems[r], n, r, &comm_peak);
            zero_mem_free_domain(run.mems[r]);
        }
        p = atomic_load(&passed) - p;
        f = atomic_load(&failed) - f;
        printf("threads n=%d: %zu cases per rank, %ld checks passed, %ld failed, comm scratch "
               "peak %zu bytes per rank (%.2f s)\n",
               n, coll_case_count(n, &run.opts), p, f, comm_peak, zero_time_now() - t0);
        fflush(stdout);
        free(run.tallies);
        free(run.mems);
    }
    return check_report();
}
