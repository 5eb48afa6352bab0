/* mpi_internal.h — what the MPI backend's files share: the communicator struct, the signature
 * of the agreement round, the tags and pipeline constants, and the cross-file functions.
 *
 * Files: mpi.c (the vtable, creation, destruction, MPI init/finalize/abort, the dispatch of one
 * collective), mpi_agree.c (request posting and waiting against the deadline, failure and
 * timeout messages, the agreement round), mpi_shm.c (the on-node shared-memory object: its
 * agreement, eager calls and single-copy reduce phase), mpi_p2p.c (the point-to-point data
 * paths and the collectives built on them).
 *
 * Not here: anything a file uses alone (it stays static there). Every function takes the
 * communicator of the running collective and is called only on its progress thread, except
 * zero__mpi_node_keys and zero__mpi_shm_map, which are collective over an MPI communicator
 * being wrapped.
 */
#ifndef ZERO_COMM_MPI_INTERNAL_H
#define ZERO_COMM_MPI_INTERNAL_H

#include "comm_internal.h"

#include <mpi.h>

#include <stdint.h>

/* Tags on our duplicated communicators (MPI's own collectives use a separate context). */
enum { TAG_SIGNATURE = 1, TAG_REDUCE = 2, TAG_GATHER = 3, TAG_EXCHANGE = 4 };

/* Reduce-scatter pipeline: receive segment k+1 of every peer while segment k is reduced.
 * SLOTS receive buffers per peer; SEND_WINDOW sends in flight per peer (with single-copy
 * transports the receiver pulls the data, so a deep send window keeps it from waiting on the
 * sender's progress while the sender is busy reducing). A segment is at most 1 MiB so the
 * SLOTS * (N-1) segments stay in the 4 MiB L2 for small N between copy and reduce. */
enum { SLOTS = 2, SEND_WINDOW = 16 };
#define SEGMENT_MAX_BYTES ((size_t)1 << 20)
#define SEGMENT_MIN_BYTES ((size_t)64 << 10)
#define SCRATCH_TARGET_BYTES ((size_t)16 << 20)
/* Largest point-to-point message: MPI counts are int. */
#define CHUNK_BYTES ((size_t)1 << 30)

typedef struct signature {
    uint64_t seq;   /* call number on this communicator */
    uint64_t count; /* the call's count (0 where it does not apply) */
    int32_t coll, dtype, op, root;
    int32_t status; /* a local failure (zero_status_t) that keeps this rank out, 0 if none */
    int32_t pad;
    /* all_to_allv only: uint64_t send_counts[n], recv_counts[n] follow. */
} signature_t;

typedef struct mpi_comm {
    zero_comm_t super;
    MPI_Comm mc;
    uint64_t seq;
    double timeout_s; /* of the running collective (the base's may change meanwhile) */
    zero_mem_t *mem;  /* the running collective's memory domain (read under the base's lock) */
    int leaked;       /* requests were abandoned after a failure: keep mc and buffers alive */

    size_t sig_bytes;  /* one signature with the all_to_allv vectors */
    char *sig_send;    /* sig_bytes */
    char *sig_recv;    /* n * sig_bytes; slot r holds rank r's signature */
    size_t *block_off; /* n: the blocks of a reduce-scatter phase (elements) */
    size_t *block_len;
    int *counts_i; /* 4n ints for MPI_Ialltoallv */

    /* Point-to-point requests of the current phase. */
    MPI_Request *reqs;
    int *req_peer;
    unsigned char *req_is_recv;
    int *done_idx;
    int nreq, req_cap;

    int oversubscribed;   /* this node runs more ranks than it has cores */
    size_t segment_bytes; /* reduce-scatter segment */
    char *scratch;        /* SLOTS * (n-1) * segment_bytes, allocated on first use */

    /* On-node shared memory (NULL when the ranks span nodes or it could not be set up): region
     * r of shm_rank_bytes belongs to rank r (see mpi_shm.c). */
    char *shm;
    size_t shm_rank_bytes;
    zero_mem_t *shm_mem;     /* the domain this rank's region is accounted to (borrowed) */
    size_t shm_sig_bytes;    /* one signature slot (sig_bytes rounded up to a cache line) */
    size_t shm_eager_offset; /* of the two eager slots in a rank's region */
    size_t shm_slot_bytes;   /* one staging slot */
    uint64_t round;          /* staging rounds run on this communicator */
    char peers_buf[256];     /* a formatted rank list for messages */
} mpi_comm_t;

typedef struct shm_mapping {
    char *base; /* NULL: not shared */
    size_t rank_bytes, sig_bytes, eager_offset, total_bytes, slot_bytes;
} shm_mapping_t;

static inline signature_t *sig_at(mpi_comm_t *c, int r) {
    return (signature_t *)(c->sig_recv + (size_t)r * c->sig_bytes);
}

/* mpi_agree.c: waits, requests, errors and the agreement round. */
void zero__mpi_backoff(unsigned *idle);
zero_status_t zero__mpi_error(mpi_comm_t *c, int rc, const char *what);
void zero__mpi_describe_args(char *buf, size_t cap, const zero__coll_args_t *a);
const char *zero__mpi_format_ranks(mpi_comm_t *c, const unsigned char *flag);
zero_status_t zero__mpi_reqs_reserve(mpi_comm_t *c, int need);
zero_status_t zero__mpi_post_transfer(mpi_comm_t *c, int is_recv, void *ptr, size_t bytes, int peer,
                                      int tag, const char *what);
void zero__mpi_reqs_abandon(mpi_comm_t *c);
zero_status_t zero__mpi_timeout_error(mpi_comm_t *c, const zero__coll_args_t *a, int agreement);
zero_status_t zero__mpi_reqs_wait(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
                                  int agreement);
zero_status_t zero__mpi_wait_one(mpi_comm_t *c, MPI_Request *req, const zero__coll_args_t *a,
                                 double deadline);
zero_status_t zero__mpi_agree(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
                              zero_status_t local_status);

/* mpi_shm.c: the on-node shared-memory object. */
zero_status_t zero__mpi_shm_exchange_signatures(mpi_comm_t *c, const zero__coll_args_t *a,
                                                double deadline, uint64_t seq);
zero_status_t zero__mpi_shm_reduce_phase(mpi_comm_t *c, const zero__coll_args_t *a,
                                         const char *send, char *out, double deadline);
size_t zero__mpi_eager_bytes(const mpi_comm_t *c, const zero__coll_args_t *a);
void zero__mpi_eager_publish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq, size_t bytes);
zero_status_t zero__mpi_eager_finish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq);
/* Each rank's node key (the lowest rank of mc on its node, MPI_COMM_TYPE_SHARED) into keys (size
 * entries); returns how many of mc's ranks are on this rank's node. Collective over mc. */
int zero__mpi_node_keys(MPI_Comm mc, int size, int32_t *keys);
shm_mapping_t zero__mpi_shm_map(MPI_Comm mc, int n, int me, int local, size_t sig_bytes);

/* mpi_p2p.c: the data paths after the agreement. */
zero_status_t zero__mpi_ensure_scratch(mpi_comm_t *c, zero_mem_t *mem);
zero_status_t zero__mpi_all_reduce(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);
zero_status_t zero__mpi_reduce_scatter(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);
zero_status_t zero__mpi_all_gather(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);
zero_status_t zero__mpi_all_to_all(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);
zero_status_t zero__mpi_all_to_allv(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);
zero_status_t zero__mpi_broadcast(mpi_comm_t *c, const zero__coll_args_t *a, double deadline);

/* mpi_hier.c: the hierarchical phases over the blocks [block_off[r], +block_len[r]) (ranks on
 * several nodes, zero__coll_hier). Reduce-scatter: block r of every rank's send, reduced in rank
 * order, into rank r's out. All-gather: this rank's block (mine) to recv + block_off[me], every
 * other rank's block to recv + block_off[r]. */
zero_status_t zero__mpi_hier_reduce_scatter(mpi_comm_t *c, const zero__coll_args_t *a,
                                            const char *send, char *out, double deadline);
zero_status_t zero__mpi_hier_all_gather(mpi_comm_t *c, const zero__coll_args_t *a, const char *mine,
                                        char *recv, double deadline);

#endif
