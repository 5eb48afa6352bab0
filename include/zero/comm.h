/* zero/comm.h — collectives over ranks: threads of one process, or MPI processes.
 *
 * Every collective must be called by every rank of the communicator, in the same order, with
 * matching arguments (NCCL/MPI rules). Argument order follows NCCL: send, recv, count, dtype,
 * op, comm.
 *
 * Determinism: each element of a sum is accumulated in rank order 0, 1, ..., N-1 (fp16/bf16 in
 * fp32, rounded once at the end; integers wrap modulo 2^bits), on both backends, for every size.
 * All-reduce is reduce-scatter followed by all-gather. Threads and MPI results are bitwise equal.
 *
 * Hierarchical: on several nodes, all-gather sends each rank's block once to every other node
 * (to the rank of the same local index) and then spreads it inside the node; reduce-scatter
 * carries each block's partial sum from node to node in rank order (each node adding its ranks'
 * contributions in rank order, fp16/bf16 partials in fp32) and sends the result back to its
 * owner: the same operations in the same order as the flat algorithm, so the results are
 * bitwise the flat ones. Each is used where it sends fewer bytes between nodes (reduce-scatter
 * only when every node is a contiguous range of ranks); zero_comm_params_t.flat turns them off.
 * The statistics count what the algorithm used really sends.
 *
 * In place (NCCL convention): all-reduce and broadcast with send == recv; reduce-scatter with
 * recv == send + rank * recv_count; all-gather with send == recv + rank * send_count.
 *
 * Failure: a collective that does not complete within the communicator's timeout returns
 * ZERO_ERR_TIMEOUT on every waiting rank; zero_last_error() names the operation, the element
 * count and the ranks that did not arrive. After a timeout or mismatch the communicator is
 * failed: later calls return ZERO_ERR_COMM_FAILED.
 *
 * Threading: one communicator belongs to one rank; its calls must not be made concurrently from
 * several threads. Collectives run in posting order on the communicator's own progress thread,
 * so non-blocking calls overlap the caller's compute. Different communicators (sub-groups) have
 * their own progress threads, so collectives on different communicators proceed concurrently.
 */
#ifndef ZERO_COMM_H
#define ZERO_COMM_H

#include "zero/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZERO_OP_SUM, ZERO_OP_MAX, ZERO_OP_COUNT } zero_op_t;

typedef enum {
    ZERO_COLL_ALL_REDUCE,
    ZERO_COLL_REDUCE_SCATTER,
    ZERO_COLL_ALL_GATHER,
    ZERO_COLL_ALL_TO_ALL,
    ZERO_COLL_ALL_TO_ALLV,
    ZERO_COLL_BROADCAST,
    ZERO_COLL_BARRIER,
    ZERO_COLL_SPLIT,
    ZERO_COLL_COUNT
} zero_coll_t;

typedef enum { ZERO_BACKEND_THREADS, ZERO_BACKEND_MPI, ZERO_BACKEND_COUNT } zero_backend_t;

ZERO_API const char *zero_op_name(zero_op_t op);
ZERO_API const char *zero_coll_name(zero_coll_t coll); /* "all_reduce", "reduce_scatter", ... */
ZERO_API const char *zero_backend_name(zero_backend_t backend); /* "threads", "mpi" */
ZERO_API zero_status_t zero_backend_parse(const char *name, zero_backend_t *out);

typedef struct zero_comm zero_comm_t;
typedef struct zero_comm_request zero_comm_request_t;

typedef struct zero_comm_params {
    double timeout_s; /* collective timeout in seconds (default 300) */
    zero_mem_t *mem;  /* borrowed; scratch buffers are accounted under ZERO_MEM_COMM (NULL: not) */
    /* The ranks stand for nodes of this many consecutive ranks (rank r on node r /
     * ranks_per_node), to study a multi-node layout on one machine. 0: the threads backend has
     * one node, the MPI backend the MPI library's nodes (MPI_COMM_TYPE_SHARED). */
    int ranks_per_node;
    /* 1: always the flat collectives (every rank sends straight to every other), for comparing;
     * 0 (default): all-gather, reduce-scatter and all-reduce run hierarchically where there are
     * several nodes and that sends fewer bytes between them (see "Hierarchical" below). Kept by
     * splits. */
    int flat;
} zero_comm_params_t;

ZERO_API zero_comm_params_t zero_comm_params_default(void);

/* ------------------------------------------------------------------------------ creation */

/* Create n communicators that form one clique of n ranks in this process; comms[r] is rank r and
 * must be used by one thread (the rank's thread). params may be NULL (defaults); params->mem is
 * ignored here (give each rank's domain with zero_comm_set_mem). Not collective. */
ZERO_API zero_status_t zero_comm_threads_init_all(int n, zero_comm_t **comms,
                                                  const zero_comm_params_t *params);

/* True when the library was built with MPI. */
ZERO_API int zero_comm_mpi_available(void);
/* True when this process was started by an MPI launcher (mpirun sets the rank environment). */
ZERO_API int zero_comm_mpi_launched(void);

/* Initialise MPI (MPI_Init_thread if nobody did) and return a communicator over MPI_COMM_WORLD.
 * Collective over the MPI job. Returns ZERO_ERR_UNSUPPORTED when built without MPI. */
ZERO_API zero_status_t zero_comm_mpi_init(zero_comm_t **out, const zero_comm_params_t *params);
/* Finalize MPI if zero_comm_mpi_init initialised it. Call after freeing every MPI communicator. */
ZERO_API void zero_comm_mpi_finalize(void);
/* Abort every process of the MPI job (MPI_Abort on MPI_COMM_WORLD with errorcode `code`) when
 * MPI is initialised and not finalized; otherwise (and in a build without MPI) return at once.
 * For a fatal error under MPI: MPI_Finalize waits for every rank, forever if one hangs, whereas
 * the launcher ends the whole job on an abort. Does not return when it aborts; meant for a
 * program's top level (the library itself never calls it). Not collective. */
ZERO_API void zero_comm_mpi_abort(int code);

/* Split into sub-communicators: ranks passing the same colour form one group, ordered by key
 * then parent rank. colour < 0 (ZERO_COMM_NO_COLOUR) joins no group and gets *out = NULL.
 * Collective over comm. The new communicator inherits the timeout and memory domain. */
#define ZERO_COMM_NO_COLOUR (-1)
ZERO_API zero_status_t zero_comm_split(zero_comm_t *comm, int colour, int key, zero_comm_t **out);

/* Free a communicator (NULL accepted). Waits for posted collectives first. Not collective, but
 * for the threads backend the clique's shared state is released by its last member. */
ZERO_API void zero_comm_free(zero_comm_t *comm);

ZERO_API int zero_comm_rank(const zero_comm_t *comm);
ZERO_API int zero_comm_size(const zero_comm_t *comm);
ZERO_API zero_backend_t zero_comm_backend(const zero_comm_t *comm);
ZERO_API void zero_comm_set_timeout(zero_comm_t *comm, double timeout_s);
ZERO_API void zero_comm_set_mem(zero_comm_t *comm, zero_mem_t *mem);

/* Topology: the nodes (machines, or the threads backend's simulated ones) the ranks run on,
 * numbered 0.. in the order of their lowest rank; fixed at creation, inherited by splits. */
ZERO_API int zero_comm_node_count(const zero_comm_t *comm);
/* The node of `rank` (0 <= rank < size), -1 for a rank out of range. */
ZERO_API int zero_comm_node_of(const zero_comm_t *comm, int rank);

/* ------------------------------------------------------------------------------ blocking */

/* recv[i] = op over ranks of send[i], count elements. */
ZERO_API zero_status_t zero_comm_all_reduce(const void *send, void *recv, size_t count,
                                            zero_dtype_t dtype, zero_op_t op, zero_comm_t *comm);
/* send holds size * recv_count elements; rank r receives the reduction of block r. */
ZERO_API zero_status_t zero_comm_reduce_scatter(const void *send, void *recv, size_t recv_count,
                                                zero_dtype_t dtype, zero_op_t op,
                                                zero_comm_t *comm);
/* recv (size * send_count elements) gets every rank's send block in rank order. */
ZERO_API zero_status_t zero_comm_all_gather(const void *send, void *recv, size_t send_count,
                                            zero_dtype_t dtype, zero_comm_t *comm);
/* Block j (count elements) of send goes to rank j; block i of recv comes from rank i. Not in
 * place: send and recv must not overlap. */
ZERO_API zero_status_t zero_comm_all_to_all(const void *send, void *recv, size_t count,
                                            zero_dtype_t dtype, zero_comm_t *comm);
/* Per-rank counts and displacements (elements), arrays of comm size. send_counts[j] on rank i
 * must equal recv_counts[i] on rank j. Not in place. */
ZERO_API zero_status_t zero_comm_all_to_allv(const void *send, const size_t *send_counts,
                                             const size_t *send_displs, void *recv,
                                             const size_t *recv_counts, const size_t *recv_displs,
                                             zero_dtype_t dtype, zero_comm_t *comm);
/* recv = root's send on every rank. */
ZERO_API zero_status_t zero_comm_broadcast(const void *send, void *recv, size_t count,
                                           zero_dtype_t dtype, int root, zero_comm_t *comm);
ZERO_API zero_status_t zero_comm_barrier(zero_comm_t *comm);

/* ------------------------------------------------------------------------------ non-blocking */

/* Same arguments as the blocking form; *req receives a request to test or wait on. Buffers and
 * count arrays are borrowed until the request completes. Argument errors are returned at post
 * time and no request is created. */
ZERO_API zero_status_t zero_comm_all_reduce_post(const void *send, void *recv, size_t count,
                                                 zero_dtype_t dtype, zero_op_t op,
                                                 zero_comm_t *comm, zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_reduce_scatter_post(const void *send, void *recv,
                                                     size_t recv_count, zero_dtype_t dtype,
                                                     zero_op_t op, zero_comm_t *comm,
                                                     zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_all_gather_post(const void *send, void *recv, size_t send_count,
                                                 zero_dtype_t dtype, zero_comm_t *comm,
                                                 zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_all_to_all_post(const void *send, void *recv, size_t count,
                                                 zero_dtype_t dtype, zero_comm_t *comm,
                                                 zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_all_to_allv_post(const void *send, const size_t *send_counts,
                                                  const size_t *send_displs, void *recv,
                                                  const size_t *recv_counts,
                                                  const size_t *recv_displs, zero_dtype_t dtype,
                                                  zero_comm_t *comm, zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_broadcast_post(const void *send, void *recv, size_t count,
                                                zero_dtype_t dtype, int root, zero_comm_t *comm,
                                                zero_comm_request_t **req);
ZERO_API zero_status_t zero_comm_barrier_post(zero_comm_t *comm, zero_comm_request_t **req);

/* *done = 1 when the request has completed (its status is then returned and the request is
 * freed: do not use it again); *done = 0 and ZERO_OK while it runs. */
ZERO_API zero_status_t zero_comm_test(zero_comm_request_t *req, int *done);
/* Block until the request completes; returns its status and frees it. */
ZERO_API zero_status_t zero_comm_wait(zero_comm_request_t *req);

/* ------------------------------------------------------------------------------ accounting */

/* Bytes this rank sent to and received from other ranks, per collective kind, since creation
 * (or the last reset): what the algorithm moves between ranks, never a rank's copy to itself. */
typedef struct zero_comm_stats {
    uint64_t calls[ZERO_COLL_COUNT];
    uint64_t sent_bytes[ZERO_COLL_COUNT];
    uint64_t recv_bytes[ZERO_COLL_COUNT];
    /* Of those, the bytes sent to and received from ranks on other nodes (what crosses the
     * slower link between machines). */
    uint64_t inter_node_sent_bytes[ZERO_COLL_COUNT];
    uint64_t inter_node_recv_bytes[ZERO_COLL_COUNT];
} zero_comm_stats_t;

ZERO_API void zero_comm_get_stats(const zero_comm_t *comm, zero_comm_stats_t *out);
/* The bytes this rank sends in one call of coll (all_reduce, reduce_scatter, all_gather or
 * all_to_all) with this count and dtype on comm, in all and to ranks of other nodes: what the
 * statistics will count for it, with the algorithm (flat or hierarchical) the call would use.
 * Linear in count for reduce_scatter, all_gather and all_to_all. Not collective; NULL outputs
 * are skipped; other collectives give 0. */
ZERO_API void zero_comm_coll_bytes(const zero_comm_t *comm, zero_coll_t coll, size_t count,
                                   zero_dtype_t dtype, uint64_t *sent_bytes,
                                   uint64_t *inter_node_sent_bytes);
ZERO_API void zero_comm_reset_stats(zero_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_COMM_H */
