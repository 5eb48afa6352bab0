/* comm_internal.h — the communicator base struct and the backend vtable.
 *
 * A backend embeds `struct zero_comm` first (`super`) and implements `run`: one collective,
 * executed to completion on the communicator's progress thread. The front end (comm.c) checks
 * local arguments, queues requests, runs them in posting order and keeps the statistics, so a
 * backend only moves and reduces data, checks that ranks agree, and enforces the timeout.
 */
#ifndef ZERO_COMM_INTERNAL_H
#define ZERO_COMM_INTERNAL_H

#include "core/core_internal.h"
#include "reduce.h"
#include "zero/comm.h"

#include <pthread.h>

/* One collective call's arguments. `count` is the blocking call's count argument: all_reduce
 * count, reduce_scatter recv_count, all_gather send_count, all_to_all per-block count, broadcast
 * count. Unused members are zero. */
typedef struct zero__coll_args {
    zero_coll_t coll;
    const void *send;
    void *recv;
    size_t count;
    zero_dtype_t dtype;
    zero_op_t op;
    int root;
    const size_t *send_counts, *send_displs, *recv_counts, *recv_displs; /* all_to_allv */
    int colour, key;                                                     /* split */
    zero_comm_t **split_out;                                             /* split */
} zero__coll_args_t;

typedef struct zero__comm_backend {
    zero_backend_t kind;
    /* Run one collective on the progress thread. On failure return the status with the message
     * set through zero__error (it travels to the waiting thread). A split creates the child with
     * zero__comm_base_init and stores it in *args->split_out. Traffic statistics are kept by the
     * front end from the formulas of zero__coll_traffic, which every backend's algorithm must
     * match (direct algorithms: each rank sends exactly what the others need from it). */
    zero_status_t (*run)(zero_comm_t *comm, const zero__coll_args_t *args);
    /* The backend runs the hierarchical algorithms wherever zero__coll_hier chooses them (0: it
     * always runs the flat ones, and the statistics count those). */
    int hierarchical;
    /* Release backend state and the struct itself, after the progress thread has stopped. */
    void (*destroy)(zero_comm_t *comm);
    /* Optional (NULL: nothing to do): the memory domain changed from old_mem to new_mem, called
     * on the owner's thread by zero_comm_set_mem; memory the backend accounts by itself moves. */
    void (*mem_changed)(zero_comm_t *comm, zero_mem_t *old_mem, zero_mem_t *new_mem);
} zero__comm_backend_t;

typedef struct zero__request_queue {
    zero_comm_request_t *head, *tail;
} zero__request_queue_t;

struct zero_comm {
    const zero__comm_backend_t *backend;
    int rank, size;
    double timeout_s;
    zero_mem_t *mem; /* borrowed */

    /* Progress thread and its queue; everything below is guarded by lock. */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* signalled when a request is queued or stop is set */
    pthread_cond_t done; /* broadcast when a request completes */
    zero__request_queue_t queue;
    int stop;
    int thread_started;
    zero_status_t failure;      /* non-zero once a collective timed out or ranks disagreed */
    char failure_message[1024]; /* that first failure's message, repeated by later calls */
    zero_comm_stats_t stats;
    /* Topology: node_of[r] is rank r's node (numbered by lowest rank); NULL: one node. Owned:
     * one allocation that also holds the four arrays after it. */
    int *node_of;
    int node_count;
    int *local_of;        /* rank r's index among its node's ranks, in rank order */
    int *node_ranks;      /* the ranks of node 0, then of node 1, ..., each in rank order */
    int *node_first;      /* node j's ranks: node_ranks[node_first[j] .. + node_size[j]) */
    int *node_size;       /* ranks on node j */
    int nodes_contiguous; /* every node's ranks are consecutive: rank order visits node 0's ranks,
                           * then node 1's, ... (what the hierarchical reductions need) */
    int flat;             /* the hierarchical algorithms are off (zero_comm_params_t.flat) */
};

/* Initialise the base part of a backend's communicator and start its progress thread. */
zero_status_t zero__comm_base_init(zero_comm_t *comm, const zero__comm_backend_t *backend, int rank,
                                   int size, double timeout_s, zero_mem_t *mem);
/* Stop the progress thread (after draining the queue) and destroy the base part. */
void zero__comm_base_stop(zero_comm_t *comm);

/* The block of rank r when `count` elements are divided among n ranks (all-reduce's
 * reduce-scatter phase): [count*r/n, count*(r+1)/n). Both backends use this partition. */
void zero__block_range(size_t count, int n, int r, size_t *offset, size_t *len);

/* Hierarchical phases of one collective (zero__coll_hier): the reduce-scatter (phase) carries
 * each block's partial sum node to node in rank order; the all-gather (phase) sends each block
 * once to every other node, then spreads it inside the node. */
enum { ZERO__HIER_RS = 1, ZERO__HIER_AG = 2 };
/* Which phases of a collective run hierarchically on comm: reduce_scatter ZERO__HIER_RS or 0,
 * all_gather ZERO__HIER_AG or 0, all_reduce either or both (its reduce-scatter and all-gather
 * phases), others 0. A function of the topology, the backend and the call's collective and
 * dtype only, so every rank of an agreed call chooses the same. Rules (see comm.c). */
int zero__coll_hier(const zero_comm_t *comm, zero_coll_t coll, zero_dtype_t dtype);
/* Member `local` (taken modulo the node's size) of node j: the rank of node j that stands in
 * for a rank of local index `local` of another node (its all-gather receiver, its blocks'
 * reduce-scatter proxy). */
static inline int zero__node_member(const zero_comm_t *comm, int j, int local) {
    return comm->node_ranks[comm->node_first[j] + local % comm->node_size[j]];
}
/* The blocks of a reduce-scatter (phase): block r of every rank's send goes to rank r. */
void zero__coll_blocks(const zero__coll_args_t *args, int n, size_t *off, size_t *len);

/* Bytes rank `rank` sends to (sent[p]) and receives from (recv[p]) every rank p in one
 * collective (arrays of comm size; entry `rank` is 0); a rank's statistics are their sums (all,
 * and those of other nodes). Flat algorithms, with B(p) = rank p's block:
 *   reduce_scatter, all_gather, all_to_all: count * elem each way, so (n-1) * count * elem;
 *   all_reduce (zero__block_range blocks): reduce-scatter phase B(p) out, B(rank) in; all-gather
 *     phase B(rank) out, B(p) in: so (B(p) + B(rank)) * elem each way;
 *   all_to_allv: the counts addressed to / coming from that peer;
 *   broadcast: the root sends count * elem to each, the others receive count * elem from it;
 *   barrier, split: 0.
 * Hierarchical phases (zero__coll_hier), with P_j(b) = zero__node_member(comm, j, local_of[b]):
 *   reduce-scatter: for every block b and node j, each rank of node j other than P_j(b) sends
 *     it its B(b) * elem; P_j(b) sends the partial to P_{j+1}(b) (B(b) * accumulator size); the
 *     last node's P(b) sends the result (B(b) * elem) to b unless it is b;
 *   all-gather: rank r sends B(r) * elem to zero__node_member(comm, j, local_of[r]) of every
 *     other node j; then to every other rank of its node, B(r) and B(x) of every rank x of
 *     another node it received in the first step. */
void zero__coll_traffic(const zero_comm_t *comm, const zero__coll_args_t *args, int rank,
                        uint64_t *sent, uint64_t *recv);
/* Set comm's nodes from each rank's node key (size entries; equal keys: one node), numbering
 * them in the order of their lowest rank. ZERO_ERR_OUT_OF_MEMORY leaves one node. */
zero_status_t zero__comm_set_nodes(zero_comm_t *comm, const int32_t *keys);

/* ---- the launcher's environment before MPI_Init (launch.c) */
/* This process's rank as the launcher numbered it (mpirun, PMI, srun), or -1 when not launched. */
int zero__launch_rank(void);
/* The job's number of ranks, or 0 when no launcher says. */
int zero__launch_size(void);
/* The job's ranks on this machine, or 0 when no launcher says. */
int zero__launch_local_size(void);
/* Entry `node` (0-based) of Slurm's tasks-per-node list ("2(x3),1" is 2, 2, 2, 1), or -1 when the
 * list is malformed or shorter. */
int zero__slurm_tasks_on_node(const char *list, int node);

#endif /* ZERO_COMM_INTERNAL_H */
