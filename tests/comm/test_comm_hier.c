/* test_comm_hier.c — the hierarchical collectives on the threads backend's simulated nodes.
 *
 * For each node layout (2 x 2, 3 + 1, 2 x 3, 3 x 2, 1 rank per node, one node) the collective
 * matrix of coll_cases.c runs twice, hierarchical (the default) and flat (zero_comm_params_t.flat):
 * every result must be bitwise the naive rank-order reference (so the hierarchical and the flat
 * algorithms give the same bits: the hashes are compared too), and every rank's statistics, in
 * total and to other nodes, the walk of the algorithm's transfers in coll_cases.c. Interleaved
 * nodes (a split whose ranks alternate between the parent's two nodes): the reduction must fall
 * back to flat, the all-gather stays hierarchical. Then the closed forms of the bytes between
 * nodes on N nodes of L ranks, written here: all-gather (N - 1) blocks per rank; reduce-scatter
 * (fp32) N partials from every rank of nodes 0..N-2 and N - 1 results from node N - 1's, i.e.
 * L (N^2 - 1) blocks in all against N L^2 (N - 1) flat (2 x 2: 6 vs 8; 2 x 4: 12 vs 32).
 *
 * Usage: test_comm_hier [--quick]  (accepted for the sanitizer builds: the counts are small anyway)
 */
#include "check.h"
#include "comm/coll_cases.h"
#include "thread_ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_N 8

typedef struct run {
    coll_opts_t opts[MAX_N];
    coll_tally_t tally[MAX_N];
    int interleave; /* run the matrix on a split whose ranks alternate between nodes */
} run_t;

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    run_t *run = arg;
    if (!run->interleave) {
        coll_run_matrix(comm, &run->opts[rank], &run->tally[rank]);
        return;
    }
    /* parent nodes {0, 1}, {2, 3}: child order 0, 2, 1, 3 has nodes 0, 1, 0, 1 */
    const int key[4] = {0, 2, 1, 3};
    zero_comm_t *child = NULL;
    CHECK(zero_comm_split(comm, 0, key[rank], &child) == ZERO_OK, "split: %s", zero_last_error());
    if (!child) return;
    int nodes_ok = 1;
    for (int q = 0; q < 4; q++) nodes_ok &= zero_comm_node_of(child, q) == q % 2;
    CHECK(nodes_ok, "interleaved split: nodes not 0, 1, 0, 1");
    coll_run_matrix(child, &run->opts[key[rank]], &run->tally[rank]);
    zero_comm_free(child);
}

/* The matrix on n ranks in nodes of k (0: one node), hierarchical and flat; hashes compared. */
static void layout(int n, int k, int interleave, int quick) {
    uint64_t *hashes[2];
    size_t ncases = 0;
    for (int flat = 0; flat < 2; flat++) {
        run_t *run = calloc(1, sizeof *run);
        char label[64];
        snprintf(label, sizeof label, "%s n=%d ranks_per_node=%d%s", flat ? "flat" : "hier", n, k,
                 interleave ? " interleaved" : "");
        coll_opts_t o = {.quick = quick, .big = 0, .lite = 1, .flat = flat, .label = label};
        ncases = coll_case_count(n, &o);
        hashes[flat] = calloc(ncases * (size_t)n, sizeof(uint64_t));
        for (int r = 0; r < n; r++) {
            run->opts[r] = o;
            run->opts[r].hashes = hashes[flat] + (size_t)r * ncases;
        }
        run->interleave = interleave;
        zero_comm_t *comms[MAX_N];
        zero_comm_params_t p = zero_comm_params_default();
        p.timeout_s = 60;
        p.ranks_per_node = k;
        p.flat = flat;
        CHECK(zero_comm_threads_init_all(n, comms, &p) == ZERO_OK, "init: %s", zero_last_error());
        long before_p = atomic_load(&passed), before_f = atomic_load(&failed);
        thread_ranks_run(n, comms, rank_main, run);
        for (int r = 0; r < n; r++) {
            check_add(run->tally[r].passed, run->tally[r].failed);
            zero_comm_free(comms[r]);
        }
        printf("%s: %zu cases, %ld checks passed, %ld failed\n", label, ncases,
               atomic_load(&passed) - before_p, atomic_load(&failed) - before_f);
        free(run);
    }
    size_t differ = 0;
    for (size_t i = 0; i < ncases * (size_t)n; i++)
        differ += hashes[0][i] == 0 || hashes[0][i] != hashes[1][i];
    CHECK(differ == 0, "n=%d ranks_per_node=%d: %zu results differ between hier and flat", n, k,
          differ);
    free(hashes[0]);
    free(hashes[1]);
}

/* ------------------------------------------------------------------------------ closed forms */

typedef struct closed {
    int N, L;
    size_t count;
    uint64_t ag_sent[MAX_N], rs_sent[MAX_N], rs_recv[MAX_N]; /* inter-node bytes */
    uint64_t flat_rs_sent[MAX_N];
} closed_t;

static void closed_rank(zero_comm_t *comm, int r, void *arg) {
    closed_t *c = arg;
    const size_t n = (size_t)zero_comm_size(comm), cnt = c->count;
    float *send = calloc(n * cnt, sizeof(float)), *recv = calloc(n * cnt, sizeof(float));
    if (!send || !recv) abort();
    zero_comm_stats_t s;
    zero_comm_reset_stats(comm);
    CHECK(zero_comm_all_gather(send, recv, cnt, ZERO_DTYPE_FP32, comm) == ZERO_OK, "all_gather");
    CHECK(zero_comm_reduce_scatter(send, recv, cnt, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm) == ZERO_OK,
          "reduce_scatter");
    zero_comm_get_stats(comm, &s);
    c->ag_sent[r] = s.inter_node_sent_bytes[ZERO_COLL_ALL_GATHER];
    c->rs_sent[r] = s.inter_node_sent_bytes[ZERO_COLL_REDUCE_SCATTER];
    c->rs_recv[r] = s.inter_node_recv_bytes[ZERO_COLL_REDUCE_SCATTER];
    free(send);
    free(recv);
}

static void closed_forms(int N, int L) {
    const int n = N * L;
    closed_t c = {.N = N, .L = L, .count = 1001};
    zero_comm_t *comms[MAX_N];
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 30;
    p.ranks_per_node = L;
    CHECK(zero_comm_threads_init_all(n, comms, &p) == ZERO_OK, "init");
    thread_ranks_run(n, comms, closed_rank, &c);
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
    const uint64_t B = c.count * sizeof(float); /* one block */
    uint64_t rs_total = 0, ag_total = 0;
    for (int r = 0; r < n; r++) {
        const int node = r / L;
        const uint64_t ag = (uint64_t)(N - 1) * B;
        const uint64_t rs_out = (uint64_t)(node < N - 1 ? N : N - 1) * B;
        /* in: the partials from the previous node, and the own result from the last node */
        const uint64_t rs_in = (uint64_t)((node > 0 ? N : 0) + (node < N - 1 ? 1 : 0)) * B;
        CHECK(c.ag_sent[r] == ag,
              "%dx%d rank %d: all_gather sends %llu bytes to other nodes, "
              "closed form %llu",
              N, L, r, (unsigned long long)c.ag_sent[r], (unsigned long long)ag);
        CHECK(c.rs_sent[r] == rs_out && c.rs_recv[r] == rs_in,
              "%dx%d rank %d: reduce_scatter %llu / %llu bytes to / from other nodes, closed form "
              "%llu / %llu",
              N, L, r, (unsigned long long)c.rs_sent[r], (unsigned long long)c.rs_recv[r],
              (unsigned long long)rs_out, (unsigned long long)rs_in);
        rs_total += c.rs_sent[r];
        ag_total += c.ag_sent[r];
    }
    const uint64_t want = (uint64_t)L * (uint64_t)(N * N - 1) * B;
    const uint64_t flat = (uint64_t)N * (uint64_t)(L * L) * (uint64_t)(N - 1) * B;
    CHECK(rs_total == want, "%dx%d: reduce_scatter %llu blocks between nodes, closed form %llu", N,
          L, (unsigned long long)(rs_total / B), (unsigned long long)(want / B));
    printf("%d nodes x %d: reduce_scatter %llu blocks between nodes (flat %llu), all_gather %llu "
           "(flat %llu)\n",
           N, L, (unsigned long long)(rs_total / B), (unsigned long long)(flat / B),
           (unsigned long long)(ag_total / B), (unsigned long long)(flat / B));
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    closed_forms(2, 2); /* 6 blocks instead of 8 */
    closed_forms(2, 4); /* 12 instead of 32 */
    closed_forms(3, 2);
    layout(4, 2, 0, quick); /* 2 x 2 */
    layout(4, 3, 0, quick); /* 3 + 1 */
    layout(6, 3, 0, quick); /* 2 x 3 */
    layout(6, 2, 0, quick); /* 3 x 2 */
    layout(3, 1, 0, quick); /* one rank per node: flat */
    layout(4, 0, 0, quick); /* one node: flat */
    layout(4, 2, 1, quick); /* interleaved: flat reduction, hierarchical gather */
    return check_report();
}
