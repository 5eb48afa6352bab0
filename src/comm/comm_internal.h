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
     * front end from the formulas of zero__coll_peer_traffic, which every backend's algorithm must
     * match (direct algorithms: each rank sends exactly what the others need from it). */
    zero_status_t (*run)(zero_comm_t *comm, const zero__coll_args_t *args);
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
    /* Topology: node_of[r] is rank r's node (numbered by lowest rank); NULL: one node. Owned. */
    int *node_of;
    int node_count;
};

/* Initialise the base part of a backend's communicator and start its progress thread. */
zero_status_t zero__comm_base_init(zero_comm_t *comm, const zero__comm_backend_t *backend, int rank,
                                   int size, double timeout_s, zero_mem_t *mem);
/* Stop the progress thread (after draining the queue) and destroy the base part. */
void zero__comm_base_stop(zero_comm_t *comm);

/* Rank-order reduction of `n` input blocks into out: out = in[0] op in[1] op ... op in[n-1],
 * each element accumulated left to right (fp16/bf16 in fp32, rounded once). out may alias
 * any input exactly (each tile is read in full before it is written). `count` elements each. This
 * is the one reduction kernel both backends use, which is what makes their results bitwise equal.
 */
void zero__reduce_blocks(void *out, const void *const *in, int n, size_t count, zero_dtype_t dtype,
                         zero_op_t op);

/* The block of rank r when `count` elements are divided among n ranks (all-reduce's
 * reduce-scatter phase): [count*r/n, count*(r+1)/n). Both backends use this partition. */
void zero__block_range(size_t count, int n, int r, size_t *offset, size_t *len);

/* Bytes rank `rank` sends to and receives from rank `peer` (!= rank) in one collective; a
 * rank's statistics are their sums over its peers (all of them, and those of other nodes):
 *   reduce_scatter, all_gather, all_to_all: count * elem each way, so (n-1) * count * elem;
 *   all_reduce: 2 * peer's block * elem each way (reduce-scatter + all-gather), so
 *     2 * (count - own block) * elem;
 *   all_to_allv: the counts addressed to / coming from that peer;
 *   broadcast: the root sends count * elem to each, the others receive count * elem from it;
 *   barrier, split: 0. */
void zero__coll_peer_traffic(const zero__coll_args_t *args, int rank, int peer, int n,
                             uint64_t *sent_bytes, uint64_t *recv_bytes);
/* Set comm's nodes from each rank's node key (size entries; equal keys: one node), numbering
 * them in the order of their lowest rank. ZERO_ERR_OUT_OF_MEMORY leaves one node. */
zero_status_t zero__comm_set_nodes(zero_comm_t *comm, const int32_t *keys);

#endif /* ZERO_COMM_INTERNAL_H */
