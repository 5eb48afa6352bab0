/* test_comm_topology.c — the nodes of a communicator and the bytes that cross between them, on the
 * threads backend's simulated nodes (zero_comm_params_t.ranks_per_node).
 *
 * Checks: node numbering (equal and unequal nodes), splits keeping each rank's node, and for every
 * collective the inter-node bytes of the statistics against a closed form written here from the
 * per-peer definition (what a rank sends to each rank of another node), with intra + inter equal
 * to the totals. A bad ranks_per_node is a named error. The communicators here are flat
 * (zero_comm_params_t.flat); the hierarchical algorithms' bytes are test_comm_hier's.
 */
#include "check.h"
#include "thread_ranks.h"

#include <stdint.h>
#include <string.h>

#define N 6
#define COUNT 1009 /* not a multiple of N: all-reduce blocks of two lengths */

static int node_of_rank(int r, int k) { return k ? r / k : 0; }

/* Elements of rank r's all-reduce block of count over n ranks. */
static uint64_t block_len(uint64_t count, int n, int r) {
    return count * (uint64_t)(r + 1) / (uint64_t)n - count * (uint64_t)r / (uint64_t)n;
}

/* Node of member q of the child made of parents first, first + stride, ...: its parent's node
 * numbered by first appearance among the members 0..q. */
static int renumbered(int stride, int first, int q, int k) {
    int seen[N], count = 0, idx = 0;
    for (int j = 0; j <= q; j++) {
        const int nd = node_of_rank(first + stride * j, k);
        idx = count;
        for (int t = 0; t < count; t++)
            if (seen[t] == nd) idx = t;
        if (idx == count) seen[count++] = nd;
    }
    return idx;
}

typedef struct {
    int k; /* ranks per node */
} topo_arg_t;

static void check_inter(zero_comm_t *comm, zero_coll_t coll, uint64_t want_sent, uint64_t want_recv,
                        const char *what) {
    zero_comm_stats_t s;
    zero_comm_get_stats(comm, &s);
    const int r = zero_comm_rank(comm);
    CHECK(s.inter_node_sent_bytes[coll] == want_sent && s.inter_node_recv_bytes[coll] == want_recv,
          "%s rank %d: inter-node sent %llu recv %llu, expected %llu / %llu", what, r,
          (unsigned long long)s.inter_node_sent_bytes[coll],
          (unsigned long long)s.inter_node_recv_bytes[coll], (unsigned long long)want_sent,
          (unsigned long long)want_recv);
    CHECK(s.inter_node_sent_bytes[coll] <= s.sent_bytes[coll] &&
              s.inter_node_recv_bytes[coll] <= s.recv_bytes[coll],
          "%s rank %d: more inter-node bytes than bytes", what, r);
    zero_comm_reset_stats(comm);
}

static void rank_main(zero_comm_t *comm, int r, void *argp) {
    const topo_arg_t *a = argp;
    const int k = a->k, n = zero_comm_size(comm), me = node_of_rank(r, k);
    const int nodes = k ? (n + k - 1) / k : 1;
    CHECK(zero_comm_node_count(comm) == nodes, "k %d: %d nodes, expected %d", k,
          zero_comm_node_count(comm), nodes);
    for (int q = 0; q < n; q++)
        CHECK(zero_comm_node_of(comm, q) == node_of_rank(q, k), "k %d: rank %d on node %d", k, q,
              zero_comm_node_of(comm, q));
    CHECK(zero_comm_node_of(comm, n) == -1 && zero_comm_node_of(comm, -1) == -1,
          "k %d: a rank out of range has a node", k);
    int remote = 0; /* ranks on other nodes */
    for (int q = 0; q < n; q++) remote += node_of_rank(q, k) != me;
    const uint64_t f = sizeof(float);
    float *send = calloc((size_t)n * COUNT, f), *recv = calloc((size_t)n * COUNT, f);
    if (!send || !recv) abort();
    zero_comm_reset_stats(comm);

    CHECK(zero_comm_all_gather(send, recv, COUNT, ZERO_DTYPE_FP32, comm) == ZERO_OK, "all_gather");
    check_inter(comm, ZERO_COLL_ALL_GATHER, remote * COUNT * f, remote * COUNT * f, "all_gather");
    CHECK(zero_comm_reduce_scatter(send, recv, COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm) ==
              ZERO_OK,
          "reduce_scatter");
    check_inter(comm, ZERO_COLL_REDUCE_SCATTER, remote * COUNT * f, remote * COUNT * f,
                "reduce_scatter");
    CHECK(zero_comm_all_to_all(send, recv, COUNT, ZERO_DTYPE_FP32, comm) == ZERO_OK, "all_to_all");
    check_inter(comm, ZERO_COLL_ALL_TO_ALL, remote * COUNT * f, remote * COUNT * f, "all_to_all");
    /* all-reduce: q's block to q (reduce-scatter) and our block to q (all-gather) */
    uint64_t ar = 0;
    for (int q = 0; q < n; q++)
        if (node_of_rank(q, k) != me) ar += (block_len(COUNT, n, q) + block_len(COUNT, n, r)) * f;
    CHECK(zero_comm_all_reduce(send, recv, COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm) == ZERO_OK,
          "all_reduce");
    check_inter(comm, ZERO_COLL_ALL_REDUCE, ar, ar, "all_reduce");
    /* broadcast from rank 5: its node's ranks receive nothing across */
    const int root = 5;
    CHECK(zero_comm_broadcast(send, recv, COUNT, ZERO_DTYPE_FP32, root, comm) == ZERO_OK,
          "broadcast");
    check_inter(comm, ZERO_COLL_BROADCAST, r == root ? remote * COUNT * f : 0,
                node_of_rank(root, k) != me ? COUNT * f : 0, "broadcast");
    /* all-to-allv: rank i sends i + j + 1 elements to rank j */
    size_t sc[N], sd[N], rc[N], rd[N];
    uint64_t vs = 0, vr = 0;
    for (int q = 0, so = 0, ro = 0; q < n; q++) {
        sc[q] = (size_t)(r + q + 1), rc[q] = (size_t)(q + r + 1);
        sd[q] = (size_t)so, rd[q] = (size_t)ro;
        so += (int)sc[q], ro += (int)rc[q];
        if (node_of_rank(q, k) != me) vs += sc[q] * f, vr += rc[q] * f;
    }
    CHECK(zero_comm_all_to_allv(send, sc, sd, recv, rc, rd, ZERO_DTYPE_FP32, comm) == ZERO_OK,
          "all_to_allv");
    check_inter(comm, ZERO_COLL_ALL_TO_ALLV, vs, vr, "all_to_allv");

    /* Splits keep each rank's node: odd / even ranks, and halves. */
    zero_comm_t *odd = NULL, *half = NULL;
    CHECK(zero_comm_split(comm, r % 2, r, &odd) == ZERO_OK, "split");
    CHECK(zero_comm_split(comm, r / 3, r, &half) == ZERO_OK, "split");
    /* the odd/even child's rank q is parent 2q + r % 2; its nodes are the parents' nodes,
     * numbered again in the order of their lowest member */
    for (int q = 0; odd && q < zero_comm_size(odd); q++)
        CHECK(zero_comm_node_of(odd, q) == renumbered(2, r % 2, q, k),
              "k %d: split rank %d (parent %d) on node %d, expected %d", k, q, 2 * q + r % 2,
              zero_comm_node_of(odd, q), renumbered(2, r % 2, q, k));
    zero_comm_stats_t s;
    zero_comm_get_stats(odd, &s);
    CHECK(s.calls[ZERO_COLL_ALL_GATHER] == 0, "k %d: the split's node exchange counted", k);
    if (half) {
        /* ranks 0-2 and 3-5: with k = 2, nodes {0,0,1} and {1,2,2}: two nodes each */
        const int h = r / 3;
        int expect_nodes = 1;
        for (int q = 1; q < 3; q++)
            if (node_of_rank(3 * h + q, k) != node_of_rank(3 * h + q - 1, k)) expect_nodes++;
        CHECK(zero_comm_node_count(half) == expect_nodes, "k %d: half %d has %d nodes, expected %d",
              k, h, zero_comm_node_count(half), expect_nodes);
    }
    zero_comm_free(odd);
    zero_comm_free(half);
    free(send);
    free(recv);
}

static void run(int k) {
    zero_comm_t *comms[N];
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 30;
    p.ranks_per_node = k;
    p.flat = 1;
    CHECK(zero_comm_threads_init_all(N, comms, &p) == ZERO_OK, "init k %d: %s", k,
          zero_last_error());
    topo_arg_t a = {k};
    thread_ranks_run(N, comms, rank_main, &a);
    for (int r = 0; r < N; r++) zero_comm_free(comms[r]);
}

int main(void) {
    run(0); /* one node: nothing crosses */
    run(1); /* every rank its own node: everything crosses */
    run(2); /* three nodes of two */
    run(4); /* unequal: four ranks and two */
    zero_comm_t *comms[N];
    zero_comm_params_t p = zero_comm_params_default();
    p.ranks_per_node = -1;
    CHECK(zero_comm_threads_init_all(N, comms, &p) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "ranks_per_node -1"),
          "ranks_per_node -1: %s", zero_last_error());
    return check_report();
}
