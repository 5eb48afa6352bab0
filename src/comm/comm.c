/* comm.c — the communicator front end shared by every backend.
 *
 * Checks each call's local arguments, queues it as a request, and runs requests in posting order
 * on the communicator's progress thread (so non-blocking calls overlap the caller). Blocking calls
 * are post + wait. After a timeout or a mismatch the communicator is failed and refuses further
 * work, because the ranks no longer agree on where in the sequence of collectives they are.
 */
#include "comm_internal.h"

#include <assert.h>
#include <string.h>

struct zero_comm_request {
    zero__coll_args_t args;
    zero_comm_t *comm;
    zero_status_t status;
    int done;           /* guarded by comm->lock */
    char message[1024]; /* the failure message, copied to the waiting thread */
    zero_comm_request_t *next;
};

#define ARGS(...) (&(zero__coll_args_t){__VA_ARGS__})

static const char *const coll_names[] = {
    "all_reduce",  "reduce_scatter", "all_gather", "all_to_all",
    "all_to_allv", "broadcast",      "barrier",    "split",
};
static_assert(ZERO_ARRAY_LEN(coll_names) == ZERO_COLL_COUNT, "collective name table");
static const char *const op_names[] = {"sum", "max"};
static_assert(ZERO_ARRAY_LEN(op_names) == ZERO_OP_COUNT, "op name table");
static const char *const backend_names[] = {"threads", "mpi"};
static_assert(ZERO_ARRAY_LEN(backend_names) == ZERO_BACKEND_COUNT, "backend name table");

const char *zero_coll_name(zero_coll_t coll) {
    return (unsigned)coll < ZERO_COLL_COUNT ? coll_names[coll] : "?";
}
const char *zero_op_name(zero_op_t op) { return (unsigned)op < ZERO_OP_COUNT ? op_names[op] : "?"; }
const char *zero_backend_name(zero_backend_t backend) {
    return (unsigned)backend < ZERO_BACKEND_COUNT ? backend_names[backend] : "?";
}

zero_status_t zero_backend_parse(const char *name, zero_backend_t *out) {
    for (int i = 0; i < ZERO_BACKEND_COUNT; i++) {
        if (name && strcmp(name, backend_names[i]) == 0) {
            *out = (zero_backend_t)i;
            return ZERO_OK;
        }
    }
    return zero__error(ZERO_ERR_INVALID_ARG, "unknown backend '%s' (expected threads or mpi)",
                       name ? name : "(null)");
}

zero_comm_params_t zero_comm_params_default(void) {
    return (zero_comm_params_t){.timeout_s = 300.0, .mem = NULL, .ranks_per_node = 0, .flat = 0};
}

/* ------------------------------------------------------------------------------ traffic */

void zero__block_range(size_t count, int n, int r, size_t *offset, size_t *len) {
    /* count * r may overflow size_t only beyond 2^64 / n elements: not a real buffer. */
    size_t begin = count / (size_t)n * (size_t)r + count % (size_t)n * (size_t)r / (size_t)n;
    size_t end =
        count / (size_t)n * (size_t)(r + 1) + count % (size_t)n * (size_t)(r + 1) / (size_t)n;
    *offset = begin;
    *len = end - begin;
}

void zero__coll_blocks(const zero__coll_args_t *a, int n, size_t *off, size_t *len) {
    for (int r = 0; r < n; r++) {
        if (a->coll == ZERO_COLL_ALL_REDUCE) {
            zero__block_range(a->count, n, r, &off[r], &len[r]);
        } else {
            off[r] = (size_t)r * a->count;
            len[r] = a->count;
        }
    }
}

/* The rules of zero__coll_hier. Counting the blocks that cross between nodes in one call, over
 * all ranks (n ranks, N nodes of L_j ranks, e = element size, c = accumulator size):
 *   flat reduce-scatter or all-gather: every rank sends a block to every rank of another node:
 *     sum_j L_j (n - L_j) = n^2 - sum_j L_j^2 blocks of e bytes;
 *   hierarchical all-gather: every block crosses to each other node once: n (N - 1);
 *   hierarchical reduce-scatter: every block's partial makes N - 1 hops (c bytes each), and the
 *     result goes back to its owner unless the owner is on the last node: n (N - 1) c +
 *     (n - L_{N-1}) e bytes. On 2 nodes of 2: 6 blocks (fp32) instead of 8; of 4: 12 instead of
 *     32. Nodes of one rank each gain nothing (the all-gather's count is the flat one, the
 *     reduce-scatter's more), and fp16/bf16 partials travel in fp32 (c = 2e), which on 2 nodes
 *     of 2 makes the hierarchical reduce-scatter cost more (10 e-blocks instead of 8).
 * Each phase is hierarchical where it moves fewer bytes between nodes, and, for the
 * reduce-scatter, only where the nodes are contiguous rank ranges: the rank-order sum (the
 * contract) visits the ranks node by node only then; with interleaved nodes (which
 * MPI_COMM_TYPE_SHARED can give) the partial would cross between nodes at almost every rank, so
 * the reduction stays flat there. The all-gather has no order to keep and works for any layout:
 * a rank of local index l sends to local index l mod L_j of node j. */
int zero__coll_hier(const zero_comm_t *comm, zero_coll_t coll, zero_dtype_t dtype) {
    if (!comm->node_of || comm->flat || !comm->backend->hierarchical) return 0;
    if (coll != ZERO_COLL_ALL_REDUCE && coll != ZERO_COLL_REDUCE_SCATTER &&
        coll != ZERO_COLL_ALL_GATHER)
        return 0;
    const uint64_t n = (uint64_t)comm->size, N = (uint64_t)comm->node_count;
    uint64_t sumsq = 0;
    for (int j = 0; j < comm->node_count; j++)
        sumsq += (uint64_t)comm->node_size[j] * (uint64_t)comm->node_size[j];
    const uint64_t flat_blocks = n * n - sumsq;
    int phases = 0;
    if (coll != ZERO_COLL_REDUCE_SCATTER && n * (N - 1) < flat_blocks) phases |= ZERO__HIER_AG;
    if (coll != ZERO_COLL_ALL_GATHER && comm->nodes_contiguous) {
        const uint64_t e = zero_dtype_size(dtype), c = zero__reduce_acc_size(dtype);
        const uint64_t last = (uint64_t)comm->node_size[comm->node_count - 1];
        if (n * (N - 1) * c + (n - last) * e < flat_blocks * e) phases |= ZERO__HIER_RS;
    }
    return phases;
}

/* Hierarchical reduce-scatter (phase) traffic of rank r, added to sent/recv (see the header). */
static void hier_rs_traffic(const zero_comm_t *comm, int r, const size_t *len, uint64_t e,
                            uint64_t c, uint64_t *sent, uint64_t *recv) {
    const int n = comm->size, N = comm->node_count, i = comm->node_of[r];
    for (int b = 0; b < n; b++) {
        const int lb = comm->local_of[b];
        const int proxy = zero__node_member(comm, i, lb);
        if (proxy != r) {
            sent[proxy] += len[b] * e; /* my contribution to block b */
        } else {
            for (int k = 0; k < comm->node_size[i]; k++) {
                const int u = comm->node_ranks[comm->node_first[i] + k];
                if (u != r) recv[u] += len[b] * e;
            }
            if (i + 1 < N) sent[zero__node_member(comm, i + 1, lb)] += len[b] * c;
            if (i > 0) recv[zero__node_member(comm, i - 1, lb)] += len[b] * c;
            if (i == N - 1 && b != r) sent[b] += len[b] * e; /* the result to its owner */
        }
        if (b == r) {
            const int last = zero__node_member(comm, N - 1, lb);
            if (last != r) recv[last] += len[b] * e;
        }
    }
}

/* Hierarchical all-gather (phase) traffic of rank r, added to sent/recv (see the header). */
static void hier_ag_traffic(const zero_comm_t *comm, int r, const size_t *len, uint64_t e,
                            uint64_t *sent, uint64_t *recv) {
    const int n = comm->size, i = comm->node_of[r];
    /* held[k]: elements local rank k of my node holds after the inter-node step */
    const int L = comm->node_size[i];
    uint64_t held[L];
    for (int k = 0; k < L; k++) held[k] = len[comm->node_ranks[comm->node_first[i] + k]];
    for (int x = 0; x < n; x++) {
        const int j = comm->node_of[x];
        if (j == i) continue;
        const int to = zero__node_member(comm, i, comm->local_of[x]); /* x's receiver here */
        held[comm->local_of[to]] += len[x];
        if (to == r) recv[x] += len[x] * e;
        if (x == r) continue;
        if (zero__node_member(comm, j, comm->local_of[r]) == x) sent[x] += len[r] * e;
    }
    for (int k = 0; k < L; k++) {
        const int u = comm->node_ranks[comm->node_first[i] + k];
        if (u == r) continue;
        sent[u] += held[comm->local_of[r]] * e;
        recv[u] += held[k] * e;
    }
}

void zero__coll_traffic(const zero_comm_t *comm, const zero__coll_args_t *a, int rank,
                        uint64_t *sent, uint64_t *recv) {
    const int n = comm->size;
    const uint64_t es = zero_dtype_size(a->dtype);
    for (int p = 0; p < n; p++) sent[p] = recv[p] = 0;
    switch (a->coll) {
    case ZERO_COLL_REDUCE_SCATTER:
    case ZERO_COLL_ALL_GATHER:
    case ZERO_COLL_ALL_REDUCE: {
        size_t off[n], len[n];
        zero__coll_blocks(a, n, off, len);
        const int hier = zero__coll_hier(comm, a->coll, a->dtype);
        const int rs = a->coll != ZERO_COLL_ALL_GATHER, ag = a->coll != ZERO_COLL_REDUCE_SCATTER;
        if (rs && (hier & ZERO__HIER_RS)) {
            hier_rs_traffic(comm, rank, len, es, zero__reduce_acc_size(a->dtype), sent, recv);
        } else if (rs) {
            for (int p = 0; p < n; p++)
                if (p != rank) sent[p] += len[p] * es, recv[p] += len[rank] * es;
        }
        if (ag && (hier & ZERO__HIER_AG)) {
            hier_ag_traffic(comm, rank, len, es, sent, recv);
        } else if (ag) {
            for (int p = 0; p < n; p++)
                if (p != rank) sent[p] += len[rank] * es, recv[p] += len[p] * es;
        }
        break;
    }
    case ZERO_COLL_ALL_TO_ALL:
        for (int p = 0; p < n; p++)
            if (p != rank) sent[p] = recv[p] = a->count * es;
        break;
    case ZERO_COLL_ALL_TO_ALLV:
        for (int p = 0; p < n; p++)
            if (p != rank) sent[p] = a->send_counts[p] * es, recv[p] = a->recv_counts[p] * es;
        break;
    case ZERO_COLL_BROADCAST:
        for (int p = 0; p < n; p++) {
            if (p == rank) continue;
            if (rank == a->root) sent[p] = a->count * es;
            if (p == a->root) recv[p] = a->count * es;
        }
        break;
    default: break;
    }
}

zero_status_t zero__comm_set_nodes(zero_comm_t *comm, const int32_t *keys) {
    const int n = comm->size;
    /* node_of, local_of, node_ranks, node_first, node_size: n ints each */
    int *node_of = malloc(5 * (size_t)n * sizeof *node_of);
    if (!node_of) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "communicator: out of memory");
    int *local_of = node_of + n, *node_ranks = local_of + n, *node_first = node_ranks + n,
        *node_size = node_first + n;
    int nodes = 0;
    for (int r = 0; r < n; r++) {
        int j = 0;
        while (j < r && keys[j] != keys[r]) j++;
        node_of[r] = j < r ? node_of[j] : nodes++;
    }
    for (int j = 0; j < nodes; j++) node_size[j] = 0;
    for (int r = 0; r < n; r++) local_of[r] = node_size[node_of[r]]++;
    for (int j = 0, first = 0; j < nodes; j++) node_first[j] = first, first += node_size[j];
    int contiguous = 1;
    for (int r = 0; r < n; r++) {
        node_ranks[node_first[node_of[r]] + local_of[r]] = r;
        if (r > 0 && node_of[r] != node_of[r - 1] && node_of[r] != node_of[r - 1] + 1)
            contiguous = 0;
    }
    free(comm->node_of);
    comm->node_of = nodes > 1 ? node_of : NULL;
    comm->node_count = nodes;
    comm->local_of = nodes > 1 ? local_of : NULL;
    comm->node_ranks = nodes > 1 ? node_ranks : NULL;
    comm->node_first = nodes > 1 ? node_first : NULL;
    comm->node_size = nodes > 1 ? node_size : NULL;
    comm->nodes_contiguous = contiguous;
    if (nodes <= 1) free(node_of);
    return ZERO_OK;
}

int zero_comm_node_count(const zero_comm_t *comm) { return comm->node_of ? comm->node_count : 1; }

int zero_comm_node_of(const zero_comm_t *comm, int rank) {
    if (rank < 0 || rank >= comm->size) return -1;
    return comm->node_of ? comm->node_of[rank] : 0;
}

/* A completed collective's bytes, summed over the peers: to and from every other rank, and of
 * those to and from ranks of other nodes; out = {sent, received, inter-node sent, received}. */
static void collective_traffic(const zero_comm_t *comm, const zero__coll_args_t *a,
                               uint64_t out[4]) {
    out[0] = out[1] = out[2] = out[3] = 0;
    uint64_t s[comm->size], v[comm->size];
    zero__coll_traffic(comm, a, comm->rank, s, v);
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank) continue;
        out[0] += s[r];
        out[1] += v[r];
        if (comm->node_of && comm->node_of[r] != comm->node_of[comm->rank]) {
            out[2] += s[r];
            out[3] += v[r];
        }
    }
}

/* ------------------------------------------------------------------------------ progress */

static void *progress_main(void *arg) {
    zero_comm_t *comm = arg;
    pthread_mutex_lock(&comm->lock);
    for (;;) {
        while (!comm->queue.head && !comm->stop) pthread_cond_wait(&comm->work, &comm->lock);
        zero_comm_request_t *req = comm->queue.head;
        if (!req) break; /* stop requested and the queue is drained */
        zero_status_t failure = comm->failure;
        char first[sizeof comm->failure_message];
        if (failure) memcpy(first, comm->failure_message, sizeof first);
        pthread_mutex_unlock(&comm->lock);

        zero_status_t status;
        if (failure) {
            /* The first failure names the missing ranks; a later call that reaches the caller
             * first (non-blocking calls are waited in any order) must not lose that. */
            status = zero__error(ZERO_ERR_COMM_FAILED,
                                 "%s on rank %d: the communicator failed earlier (%s: %s) and can "
                                 "no longer be used",
                                 coll_names[req->args.coll], comm->rank, zero_status_str(failure),
                                 first);
        } else {
            status = comm->backend->run(comm, &req->args);
        }

        uint64_t bytes[4];
        if (status == ZERO_OK) collective_traffic(comm, &req->args, bytes);
        pthread_mutex_lock(&comm->lock);
        if (status == ZERO_OK) {
            const zero_coll_t c = req->args.coll;
            comm->stats.calls[c]++;
            comm->stats.sent_bytes[c] += bytes[0];
            comm->stats.recv_bytes[c] += bytes[1];
            comm->stats.inter_node_sent_bytes[c] += bytes[2];
            comm->stats.inter_node_recv_bytes[c] += bytes[3];
        } else {
            snprintf(req->message, sizeof req->message, "%s", zero_last_error());
            if ((status == ZERO_ERR_TIMEOUT || status == ZERO_ERR_MISMATCH ||
                 status == ZERO_ERR_COMM_FAILED) &&
                !comm->failure) {
                comm->failure = status;
                snprintf(comm->failure_message, sizeof comm->failure_message, "%s", req->message);
            }
        }
        req->status = status;
        comm->queue.head = req->next;
        if (!comm->queue.head) comm->queue.tail = NULL;
        req->done = 1;
        pthread_cond_broadcast(&comm->done);
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

zero_status_t zero__comm_base_init(zero_comm_t *comm, const zero__comm_backend_t *backend, int rank,
                                   int size, double timeout_s, zero_mem_t *mem) {
    comm->backend = backend;
    comm->rank = rank;
    comm->size = size;
    comm->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    comm->mem = mem;
    comm->queue.head = comm->queue.tail = NULL;
    comm->stop = 0;
    comm->failure = ZERO_OK;
    comm->failure_message[0] = '\0';
    memset(&comm->stats, 0, sizeof comm->stats);
    comm->node_of = comm->local_of = comm->node_ranks = comm->node_first = comm->node_size = NULL;
    comm->node_count = 1;
    comm->nodes_contiguous = 1;
    comm->flat = 0;
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->work, NULL);
    pthread_cond_init(&comm->done, NULL);
    if (pthread_create(&comm->thread, NULL, progress_main, comm) != 0) {
        pthread_cond_destroy(&comm->done);
        pthread_cond_destroy(&comm->work);
        pthread_mutex_destroy(&comm->lock);
        comm->thread_started = 0;
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "could not start the progress thread of rank %d",
                           rank);
    }
    comm->thread_started = 1;
    return ZERO_OK;
}

void zero__comm_base_stop(zero_comm_t *comm) {
    if (!comm->thread_started) return;
    pthread_mutex_lock(&comm->lock);
    comm->stop = 1;
    pthread_cond_signal(&comm->work);
    pthread_mutex_unlock(&comm->lock);
    pthread_join(comm->thread, NULL);
    comm->thread_started = 0;
    pthread_cond_destroy(&comm->done);
    pthread_cond_destroy(&comm->work);
    pthread_mutex_destroy(&comm->lock);
}

void zero_comm_free(zero_comm_t *comm) {
    if (!comm) return;
    zero__comm_base_stop(comm);
    free(comm->node_of);
    comm->node_of = NULL;
    comm->backend->destroy(comm);
}

int zero_comm_rank(const zero_comm_t *comm) { return comm->rank; }
int zero_comm_size(const zero_comm_t *comm) { return comm->size; }
zero_backend_t zero_comm_backend(const zero_comm_t *comm) { return comm->backend->kind; }

void zero_comm_set_timeout(zero_comm_t *comm, double timeout_s) {
    pthread_mutex_lock(&comm->lock);
    comm->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    pthread_mutex_unlock(&comm->lock);
}

void zero_comm_set_mem(zero_comm_t *comm, zero_mem_t *mem) {
    pthread_mutex_lock(&comm->lock);
    zero_mem_t *old = comm->mem;
    comm->mem = mem;
    pthread_mutex_unlock(&comm->lock);
    if (comm->backend->mem_changed && old != mem) comm->backend->mem_changed(comm, old, mem);
}

void zero_comm_get_stats(const zero_comm_t *comm, zero_comm_stats_t *out) {
    zero_comm_t *c = (zero_comm_t *)comm; /* the lock is not part of the logical state */
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

void zero_comm_coll_bytes(const zero_comm_t *comm, zero_coll_t coll, size_t count,
                          zero_dtype_t dtype, uint64_t *sent_bytes,
                          uint64_t *inter_node_sent_bytes) {
    uint64_t out[4] = {0, 0, 0, 0};
    if (coll == ZERO_COLL_ALL_REDUCE || coll == ZERO_COLL_REDUCE_SCATTER ||
        coll == ZERO_COLL_ALL_GATHER || coll == ZERO_COLL_ALL_TO_ALL)
        collective_traffic(comm, ARGS(.coll = coll, .count = count, .dtype = dtype), out);
    if (sent_bytes) *sent_bytes = out[0];
    if (inter_node_sent_bytes) *inter_node_sent_bytes = out[2];
}

void zero_comm_reset_stats(zero_comm_t *comm) {
    pthread_mutex_lock(&comm->lock);
    memset(&comm->stats, 0, sizeof comm->stats);
    pthread_mutex_unlock(&comm->lock);
}

/* ------------------------------------------------------------------------------ requests */

static int ranges_overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

/* Local argument checks: what one rank can see is wrong without asking the others. */
static zero_status_t check_args(const zero_comm_t *comm, const zero__coll_args_t *a) {
    const char *name = coll_names[a->coll];
    if (!comm) return zero__error(ZERO_ERR_INVALID_ARG, "%s: communicator is NULL", name);
    int n = comm->size;
    if (a->coll == ZERO_COLL_BARRIER || a->coll == ZERO_COLL_SPLIT) return ZERO_OK;
    if ((unsigned)a->dtype >= ZERO_DTYPE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG, "%s: invalid dtype %d", name, (int)a->dtype);
    if ((unsigned)a->op >= ZERO_OP_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "%s: invalid reduction op %d (expected sum or max)", name, (int)a->op);
    size_t es = zero_dtype_size(a->dtype);
    size_t send_count = a->count, recv_count = a->count;
    switch (a->coll) {
    case ZERO_COLL_REDUCE_SCATTER: send_count = a->count * (size_t)n; break;
    case ZERO_COLL_ALL_GATHER: recv_count = a->count * (size_t)n; break;
    case ZERO_COLL_ALL_TO_ALL: send_count = recv_count = a->count * (size_t)n; break;
    case ZERO_COLL_BROADCAST:
        if (a->root < 0 || a->root >= n)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "broadcast: root %d is outside the communicator (size %d)", a->root,
                               n);
        if (comm->rank != a->root) send_count = 0; /* only the root's send buffer is read */
        break;
    case ZERO_COLL_ALL_TO_ALLV:
        if (!a->send_counts || !a->send_displs || !a->recv_counts || !a->recv_displs)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "all_to_allv: count and displacement arrays must not be NULL");
        send_count = recv_count = 0;
        for (int r = 0; r < n; r++) { /* empty blocks touch no memory, whatever their offset */
            if (a->send_counts[r])
                send_count = ZERO_MAX(send_count, a->send_displs[r] + a->send_counts[r]);
            if (a->recv_counts[r])
                recv_count = ZERO_MAX(recv_count, a->recv_displs[r] + a->recv_counts[r]);
        }
        break;
    default: break;
    }
    if (send_count && !a->send)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "%s: send buffer is NULL with %zu elements to send on rank %d", name,
                           send_count, comm->rank);
    if (recv_count && !a->recv)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "%s: recv buffer is NULL with %zu elements to receive on rank %d", name,
                           recv_count, comm->rank);
    if ((a->coll == ZERO_COLL_ALL_TO_ALL || a->coll == ZERO_COLL_ALL_TO_ALLV) &&
        ranges_overlap(a->send, send_count * es, a->recv, recv_count * es))
        return zero__error(ZERO_ERR_INVALID_ARG, "%s: send and recv buffers overlap on rank %d",
                           name, comm->rank);
    if (a->coll == ZERO_COLL_REDUCE_SCATTER && a->send != a->recv &&
        (const char *)a->recv != (const char *)a->send + (size_t)comm->rank * a->count * es &&
        ranges_overlap(a->send, send_count * es, a->recv, recv_count * es))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "reduce_scatter: recv overlaps send but is not the in-place block "
                           "(send + rank * recv_count) on rank %d",
                           comm->rank);
    if (a->coll == ZERO_COLL_ALL_GATHER &&
        (const char *)a->send != (const char *)a->recv + (size_t)comm->rank * a->count * es &&
        ranges_overlap(a->send, send_count * es, a->recv, recv_count * es))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "all_gather: send overlaps recv but is not the in-place block "
                           "(recv + rank * send_count) on rank %d",
                           comm->rank);
    if ((a->coll == ZERO_COLL_ALL_REDUCE || a->coll == ZERO_COLL_BROADCAST) && a->send != a->recv &&
        ranges_overlap(a->send, send_count * es, a->recv, recv_count * es))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "%s: send and recv overlap without being the same buffer on rank %d",
                           name, comm->rank);
    return ZERO_OK;
}

static zero_status_t post(zero_comm_t *comm, const zero__coll_args_t *args,
                          zero_comm_request_t **out) {
    if (!out)
        return zero__error(ZERO_ERR_INVALID_ARG, "%s: request pointer is NULL",
                           coll_names[args->coll]);
    *out = NULL;
    zero_status_t st = check_args(comm, args);
    if (st) return st;
    zero_comm_request_t *req = calloc(1, sizeof *req);
    if (!req)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory for a request",
                           coll_names[args->coll]);
    req->args = *args;
    req->comm = comm;
    pthread_mutex_lock(&comm->lock);
    if (comm->queue.tail)
        comm->queue.tail->next = req;
    else
        comm->queue.head = req;
    comm->queue.tail = req;
    pthread_cond_signal(&comm->work);
    pthread_mutex_unlock(&comm->lock);
    *out = req;
    return ZERO_OK;
}

static zero_status_t finish(zero_comm_request_t *req) {
    zero_status_t st = req->status;
    if (st) zero__set_error_message(req->message);
    free(req);
    return st;
}

zero_status_t zero_comm_test(zero_comm_request_t *req, int *done) {
    if (!req || !done) return zero__error(ZERO_ERR_INVALID_ARG, "zero_comm_test: NULL argument");
    zero_comm_t *comm = req->comm;
    pthread_mutex_lock(&comm->lock);
    *done = req->done;
    pthread_mutex_unlock(&comm->lock);
    return *done ? finish(req) : ZERO_OK;
}

zero_status_t zero_comm_wait(zero_comm_request_t *req) {
    if (!req) return zero__error(ZERO_ERR_INVALID_ARG, "zero_comm_wait: request is NULL");
    zero_comm_t *comm = req->comm;
    pthread_mutex_lock(&comm->lock);
    while (!req->done) pthread_cond_wait(&comm->done, &comm->lock);
    pthread_mutex_unlock(&comm->lock);
    return finish(req);
}

static zero_status_t run_blocking(zero_comm_t *comm, const zero__coll_args_t *args) {
    zero_comm_request_t *req;
    zero_status_t st = post(comm, args, &req);
    return st ? st : zero_comm_wait(req);
}

/* ------------------------------------------------------------------------------ public calls */

zero_status_t zero_comm_all_reduce_post(const void *send, void *recv, size_t count,
                                        zero_dtype_t dtype, zero_op_t op, zero_comm_t *comm,
                                        zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_ALL_REDUCE, .send = send, .recv = recv, .count = count,
                     .dtype = dtype, .op = op),
                req);
}
zero_status_t zero_comm_all_reduce(const void *send, void *recv, size_t count, zero_dtype_t dtype,
                                   zero_op_t op, zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_ALL_REDUCE, .send = send, .recv = recv,
                                   .count = count, .dtype = dtype, .op = op));
}

zero_status_t zero_comm_reduce_scatter_post(const void *send, void *recv, size_t recv_count,
                                            zero_dtype_t dtype, zero_op_t op, zero_comm_t *comm,
                                            zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                     .count = recv_count, .dtype = dtype, .op = op),
                req);
}
zero_status_t zero_comm_reduce_scatter(const void *send, void *recv, size_t recv_count,
                                       zero_dtype_t dtype, zero_op_t op, zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                                   .count = recv_count, .dtype = dtype, .op = op));
}

zero_status_t zero_comm_all_gather_post(const void *send, void *recv, size_t send_count,
                                        zero_dtype_t dtype, zero_comm_t *comm,
                                        zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_ALL_GATHER, .send = send, .recv = recv, .count = send_count,
                     .dtype = dtype),
                req);
}
zero_status_t zero_comm_all_gather(const void *send, void *recv, size_t send_count,
                                   zero_dtype_t dtype, zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_ALL_GATHER, .send = send, .recv = recv,
                                   .count = send_count, .dtype = dtype));
}

zero_status_t zero_comm_all_to_all_post(const void *send, void *recv, size_t count,
                                        zero_dtype_t dtype, zero_comm_t *comm,
                                        zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_ALL_TO_ALL, .send = send, .recv = recv, .count = count,
                     .dtype = dtype),
                req);
}
zero_status_t zero_comm_all_to_all(const void *send, void *recv, size_t count, zero_dtype_t dtype,
                                   zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_ALL_TO_ALL, .send = send, .recv = recv,
                                   .count = count, .dtype = dtype));
}

zero_status_t zero_comm_all_to_allv_post(const void *send, const size_t *send_counts,
                                         const size_t *send_displs, void *recv,
                                         const size_t *recv_counts, const size_t *recv_displs,
                                         zero_dtype_t dtype, zero_comm_t *comm,
                                         zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_ALL_TO_ALLV, .send = send, .recv = recv, .dtype = dtype,
                     .send_counts = send_counts, .send_displs = send_displs,
                     .recv_counts = recv_counts, .recv_displs = recv_displs),
                req);
}
zero_status_t zero_comm_all_to_allv(const void *send, const size_t *send_counts,
                                    const size_t *send_displs, void *recv,
                                    const size_t *recv_counts, const size_t *recv_displs,
                                    zero_dtype_t dtype, zero_comm_t *comm) {
    return run_blocking(comm,
                        ARGS(.coll = ZERO_COLL_ALL_TO_ALLV, .send = send, .recv = recv,
                             .dtype = dtype, .send_counts = send_counts, .send_displs = send_displs,
                             .recv_counts = recv_counts, .recv_displs = recv_displs));
}

zero_status_t zero_comm_broadcast_post(const void *send, void *recv, size_t count,
                                       zero_dtype_t dtype, int root, zero_comm_t *comm,
                                       zero_comm_request_t **req) {
    return post(comm,
                ARGS(.coll = ZERO_COLL_BROADCAST, .send = send, .recv = recv, .count = count,
                     .dtype = dtype, .root = root),
                req);
}
zero_status_t zero_comm_broadcast(const void *send, void *recv, size_t count, zero_dtype_t dtype,
                                  int root, zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_BROADCAST, .send = send, .recv = recv,
                                   .count = count, .dtype = dtype, .root = root));
}

zero_status_t zero_comm_barrier_post(zero_comm_t *comm, zero_comm_request_t **req) {
    return post(comm, ARGS(.coll = ZERO_COLL_BARRIER), req);
}
zero_status_t zero_comm_barrier(zero_comm_t *comm) {
    return run_blocking(comm, ARGS(.coll = ZERO_COLL_BARRIER));
}

zero_status_t zero_comm_split(zero_comm_t *comm, int colour, int key, zero_comm_t **out) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "split: out is NULL");
    *out = NULL;
    if (colour < ZERO_COMM_NO_COLOUR)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "split: colour %d is invalid (expected >= 0, or ZERO_COMM_NO_COLOUR)",
                           colour);
    zero_status_t st = run_blocking(
        comm, ARGS(.coll = ZERO_COLL_SPLIT, .colour = colour, .key = key, .split_out = out));
    if (!st && *out) (*out)->flat = comm->flat; /* before the child's first request */
    if (st || !*out || !comm->node_of || (*out)->node_of) return st;
    /* The child's ranks keep their nodes: every member tells the others its parent node (every
     * member takes this branch: the parent's topology is the same on all its ranks, and a child
     * the backend gave nodes of its own has them on all its ranks). The exchange is set-up, not
     * traffic: the child's statistics start from zero. */
    zero_comm_t *child = *out;
    int32_t mine = comm->node_of[comm->rank];
    int32_t *keys = malloc((size_t)child->size * sizeof *keys);
    st = keys ? zero_comm_all_gather(&mine, keys, 1, ZERO_DTYPE_INT32, child)
              : zero__error(ZERO_ERR_OUT_OF_MEMORY, "split: out of memory");
    if (!st) st = zero__comm_set_nodes(child, keys);
    free(keys);
    zero_comm_reset_stats(child);
    if (st) {
        zero_comm_free(child);
        *out = NULL;
    }
    return st;
}
