/* mpi.c — the MPI backend: one process per rank, collectives over an MPI communicator.
 *
 * Every collective starts with an agreement round: each rank sends a small signature (call
 * number, collective, count, dtype, op, root) to every peer on a reserved tag and checks all of
 * them, so a mismatch fails every rank the same way and a rank that never arrives is named when
 * the deadline passes. Since every rank waits for a message that every other rank sends when it
 * enters, the agreement round is also a complete barrier.
 *
 * Data: reduce_scatter is our own direct algorithm over point-to-point (rank r receives block r
 * from everyone and reduces it with zero__reduce_blocks in rank order 0..N-1, pipelined in
 * segments through persistent scratch), so sums are bitwise equal to the threads backend; an
 * MPI reduction or a ring would sum in another order. all_reduce is that reduce-scatter over
 * zero__block_range followed by a direct all-gather of the blocks. all_gather is direct
 * point-to-point too (each rank pulls every block straight from its owner, which is as fast as
 * MPI_Allgather here and lets the deadline name the missing rank); all_to_all(v) and broadcast
 * use MPI's non-blocking collectives (with a point-to-point or chunked path for counts beyond
 * INT_MAX); split uses MPI_Comm_split. fp16/bf16 travel as raw 2-byte data: we reduce, not MPI.
 *
 * Every wait polls MPI_Testsome against one deadline per collective (start + timeout_s) with a
 * spin / yield / nanosleep backoff, because ranks may outnumber cores. After a timeout pending
 * point-to-point requests are cancelled or freed and the communicator is failed; its MPI handle
 * and scratch are then leaked on purpose (freeing them could block, or let a late message land
 * in freed memory).
 *
 * Not here: argument checks, queueing and statistics (comm.c); MPI must provide
 * MPI_THREAD_MULTIPLE, since each communicator's progress thread calls MPI concurrently.
 */
#include "comm_internal.h"

#include <mpi.h>

#include <limits.h>
#include <sched.h>
#include <string.h>
#include <time.h>

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

    size_t segment_bytes; /* reduce-scatter segment */
    char *scratch;        /* SLOTS * (n-1) * segment_bytes, allocated on first use */
    char peers_buf[256];  /* a formatted rank list for messages */
} mpi_comm_t;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int we_initialised; /* guarded by init_lock */

/* ------------------------------------------------------------------------------ helpers */

static double deadline_after(double seconds) { return zero_time_now() + seconds; }

/* Spin briefly (a peer's message is usually microseconds away), then yield for about a
 * millisecond (as fast as spinning on an idle core, but with more ranks than cores it hands the
 * core to the rank we wait for), then sleep with a period growing to 256 us for long waits
 * (a late rank, a timeout). */
static void backoff(unsigned *idle) {
    unsigned i = (*idle)++;
    if (i < 16) return;
    if (i < 1024) {
        sched_yield();
        return;
    }
    unsigned shift = ZERO_MIN(i - 1024, 8u);
    struct timespec ts = {0, 1000L << shift};
    nanosleep(&ts, NULL);
}

static MPI_Datatype element_type(size_t es) {
    switch (es) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
    }
}

static zero_status_t mpi_error(mpi_comm_t *c, int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return zero__error(ZERO_ERR_COMM_FAILED, "%s on rank %d: MPI error: %s", what, c->super.rank,
                       text);
}

/* "all_reduce of 1000 fp32 elements" — what a timeout or failure message names. */
static void describe_args(char *buf, size_t cap, const zero__coll_args_t *a) {
    const char *name = zero_coll_name(a->coll);
    switch (a->coll) {
    case ZERO_COLL_BARRIER:
    case ZERO_COLL_SPLIT: snprintf(buf, cap, "%s", name); break;
    case ZERO_COLL_ALL_TO_ALLV:
        snprintf(buf, cap, "%s of %s elements", name, zero_dtype_name(a->dtype));
        break;
    default: snprintf(buf, cap, "%s of %zu %s elements", name, a->count, zero_dtype_name(a->dtype));
    }
}

static void describe_signature(char *buf, size_t cap, const signature_t *s) {
    zero_coll_t coll = (zero_coll_t)s->coll;
    const char *name = zero_coll_name(coll);
    const char *dt = zero_dtype_name((zero_dtype_t)s->dtype);
    switch (coll) {
    case ZERO_COLL_BARRIER:
    case ZERO_COLL_SPLIT: snprintf(buf, cap, "%s", name); break;
    case ZERO_COLL_ALL_TO_ALLV: snprintf(buf, cap, "%s of %s elements", name, dt); break;
    case ZERO_COLL_ALL_REDUCE:
    case ZERO_COLL_REDUCE_SCATTER:
        snprintf(buf, cap, "%s of %llu %s elements (%s)", name, (unsigned long long)s->count, dt,
                 zero_op_name((zero_op_t)s->op));
        break;
    case ZERO_COLL_BROADCAST:
        snprintf(buf, cap, "%s of %llu %s elements from root %d", name,
                 (unsigned long long)s->count, dt, (int)s->root);
        break;
    default: snprintf(buf, cap, "%s of %llu %s elements", name, (unsigned long long)s->count, dt);
    }
}

/* Format the ranks with flag[r] set as "1, 3" into c->peers_buf. */
static const char *format_ranks(mpi_comm_t *c, const unsigned char *flag) {
    size_t used = 0;
    c->peers_buf[0] = '\0';
    for (int r = 0; r < c->super.size; r++) {
        if (!flag[r]) continue;
        int w =
            snprintf(c->peers_buf + used, sizeof c->peers_buf - used, "%s%d", used ? ", " : "", r);
        if (w < 0 || (size_t)w >= sizeof c->peers_buf - used) break;
        used += (size_t)w;
    }
    return c->peers_buf;
}

/* ------------------------------------------------------------------------------ requests */

static zero_status_t reqs_reserve(mpi_comm_t *c, int need) {
    if (need <= c->req_cap) return ZERO_OK;
    int cap = ZERO_MAX(need, 2 * c->req_cap);
    MPI_Request *reqs = realloc(c->reqs, (size_t)cap * sizeof *reqs);
    if (reqs) c->reqs = reqs;
    int *peer = realloc(c->req_peer, (size_t)cap * sizeof *peer);
    if (peer) c->req_peer = peer;
    unsigned char *is_recv = realloc(c->req_is_recv, (size_t)cap);
    if (is_recv) c->req_is_recv = is_recv;
    int *done = realloc(c->done_idx, (size_t)cap * sizeof *done);
    if (done) c->done_idx = done;
    if (!reqs || !peer || !is_recv || !done)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "MPI backend on rank %d: out of memory for %d request handles",
                           c->super.rank, cap);
    for (int i = c->req_cap; i < cap; i++) c->reqs[i] = MPI_REQUEST_NULL;
    c->req_cap = cap;
    return ZERO_OK;
}

/* Post one transfer as messages of at most CHUNK_BYTES (MPI counts are int). The receiver
 * posts the same chunking, and MPI keeps messages of one (source, tag) in order. */
static zero_status_t post_transfer(mpi_comm_t *c, int is_recv, void *ptr, size_t bytes, int peer,
                                   int tag, const char *what) {
    size_t chunks = bytes ? (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES : 0;
    if (chunks > (size_t)(INT_MAX - c->nreq))
        return zero__error(ZERO_ERR_INVALID_ARG, "%s on rank %d: %zu bytes is too large", what,
                           c->super.rank, bytes);
    zero_status_t st = reqs_reserve(c, c->nreq + (int)chunks);
    if (st) return st;
    for (size_t k = 0; k < chunks; k++) {
        size_t off = k * CHUNK_BYTES, len = ZERO_MIN(CHUNK_BYTES, bytes - off);
        int i = c->nreq++;
        int rc =
            is_recv
                ? MPI_Irecv((char *)ptr + off, (int)len, MPI_BYTE, peer, tag, c->mc, &c->reqs[i])
                : MPI_Isend((char *)ptr + off, (int)len, MPI_BYTE, peer, tag, c->mc, &c->reqs[i]);
        c->req_peer[i] = peer;
        c->req_is_recv[i] = (unsigned char)is_recv;
        if (rc != MPI_SUCCESS) {
            c->reqs[i] = MPI_REQUEST_NULL;
            return mpi_error(c, rc, what);
        }
    }
    return ZERO_OK;
}

/* Give up on pending requests after a failure: cancel (receives are cancellable; Open MPI
 * ignores cancels of sends), then free what did not complete. The communicator is failed from
 * here on, so its handle and buffers are kept (leaked) in case MPI still touches them. */
static void reqs_abandon(mpi_comm_t *c) {
    for (int i = 0; i < c->nreq; i++) {
        if (c->reqs[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&c->reqs[i]);
        int done = 0;
        MPI_Test(&c->reqs[i], &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Request_free(&c->reqs[i]);
        c->reqs[i] = MPI_REQUEST_NULL;
        c->leaked = 1;
    }
    c->nreq = 0;
}

/* Flag the peers that still have a pending request (only receives when recv_only). */
static const char *pending_peers(mpi_comm_t *c, int recv_only) {
    unsigned char flag[c->super.size];
    memset(flag, 0, sizeof flag);
    for (int i = 0; i < c->nreq; i++)
        if (c->reqs[i] != MPI_REQUEST_NULL && (!recv_only || c->req_is_recv[i]))
            flag[c->req_peer[i]] = 1;
    return format_ranks(c, flag);
}

static zero_status_t timeout_error(mpi_comm_t *c, const zero__coll_args_t *a, int agreement) {
    char what[160];
    describe_args(what, sizeof what, a);
    zero_status_t st;
    if (agreement)
        st = zero__error(ZERO_ERR_TIMEOUT,
                         "%s timed out after %.1f s on rank %d: rank(s) %s did "
                         "not arrive",
                         what, c->timeout_s, c->super.rank, pending_peers(c, 1));
    else
        st = zero__error(ZERO_ERR_TIMEOUT,
                         "%s timed out after %.1f s on rank %d: the data exchange with rank(s) %s "
                         "did not complete",
                         what, c->timeout_s, c->super.rank, pending_peers(c, 0));
    reqs_abandon(c);
    return st;
}

/* Wait for every posted request, polling against the deadline. */
static zero_status_t reqs_wait(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
                               int agreement) {
    unsigned idle = 0;
    for (;;) {
        int outcount = 0;
        int rc = MPI_Testsome(c->nreq, c->reqs, &outcount, c->done_idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            zero_status_t st = mpi_error(c, rc, zero_coll_name(a->coll));
            reqs_abandon(c);
            return st;
        }
        if (outcount == MPI_UNDEFINED) break; /* every request is complete */
        if (outcount > 0) {
            idle = 0;
            continue;
        }
        if (zero_time_now() > deadline) return timeout_error(c, a, agreement);
        backoff(&idle);
    }
    c->nreq = 0;
    return ZERO_OK;
}

/* Wait for one request that cannot be cancelled (an MPI non-blocking collective). After a
 * timeout it is left behind: MPI forbids cancelling or freeing it. */
static zero_status_t wait_one(mpi_comm_t *c, MPI_Request *req, const zero__coll_args_t *a,
                              double deadline) {
    unsigned idle = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            c->leaked = 1;
            return mpi_error(c, rc, zero_coll_name(a->coll));
        }
        if (done) return ZERO_OK;
        if (zero_time_now() > deadline) {
            char what[160];
            describe_args(what, sizeof what, a);
            c->leaked = 1;
            return zero__error(ZERO_ERR_TIMEOUT,
                               "%s timed out after %.1f s on rank %d in the data exchange (MPI "
                               "collective did not complete)",
                               what, c->timeout_s, c->super.rank);
        }
        backoff(&idle);
    }
}

/* ------------------------------------------------------------------------------ agreement */

static signature_t *sig_at(mpi_comm_t *c, int r) {
    return (signature_t *)(c->sig_recv + (size_t)r * c->sig_bytes);
}

static uint64_t *sig_vectors(signature_t *s) { return (uint64_t *)(s + 1); }

/* Exchange signatures with every peer and check them. local_status != 0 says this rank cannot
 * take part (its scratch allocation failed): every rank then fails the call the same way. */
static zero_status_t agree(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
                           zero_status_t local_status) {
    int n = c->super.size, me = c->super.rank;
    const char *name = zero_coll_name(a->coll);
    signature_t *mine = (signature_t *)c->sig_send;
    memset(c->sig_send, 0, c->sig_bytes);
    mine->seq = c->seq++;
    mine->coll = (int32_t)a->coll;
    mine->status = (int32_t)local_status;
    size_t sig_len = sizeof *mine;
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE:
    case ZERO_COLL_REDUCE_SCATTER: mine->op = (int32_t)a->op; /* fall through */
    case ZERO_COLL_ALL_GATHER:
    case ZERO_COLL_ALL_TO_ALL:
        mine->count = a->count;
        mine->dtype = (int32_t)a->dtype;
        break;
    case ZERO_COLL_BROADCAST:
        mine->count = a->count;
        mine->dtype = (int32_t)a->dtype;
        mine->root = a->root;
        break;
    case ZERO_COLL_ALL_TO_ALLV:
        mine->dtype = (int32_t)a->dtype;
        for (int r = 0; r < n; r++) {
            sig_vectors(mine)[r] = a->send_counts[r];
            sig_vectors(mine)[n + r] = a->recv_counts[r];
        }
        sig_len = c->sig_bytes;
        break;
    default: break;
    }
    memcpy(sig_at(c, me), c->sig_send, c->sig_bytes);

    c->nreq = 0;
    zero_status_t st = reqs_reserve(c, 2 * n);
    if (st) return st;
    for (int r = 0; r < n && !st; r++)
        if (r != me) st = post_transfer(c, 1, sig_at(c, r), c->sig_bytes, r, TAG_SIGNATURE, name);
    for (int r = 0; r < n && !st; r++)
        if (r != me) st = post_transfer(c, 0, c->sig_send, sig_len, r, TAG_SIGNATURE, name);
    if (st) {
        reqs_abandon(c);
        return st;
    }
    st = reqs_wait(c, a, deadline, 1);
    if (st) return st;

    /* Every rank holds the same n signatures and runs the same checks, so all reach the same
     * verdict with the same message. */
    const signature_t *ref = sig_at(c, 0);
    for (int r = 1; r < n; r++) {
        const signature_t *s = sig_at(c, r);
        if (s->seq != ref->seq || s->coll != ref->coll || s->count != ref->count ||
            s->dtype != ref->dtype || s->op != ref->op || s->root != ref->root) {
            char d0[160], d1[160];
            describe_signature(d0, sizeof d0, ref);
            describe_signature(d1, sizeof d1, s);
            return zero__error(ZERO_ERR_MISMATCH,
                               "%s on rank %d: ranks disagree: rank 0 called %s (call #%llu), "
                               "rank %d called %s (call #%llu)",
                               name, me, d0, (unsigned long long)ref->seq, r, d1,
                               (unsigned long long)s->seq);
        }
    }
    for (int r = 0; r < n; r++) {
        const signature_t *s = sig_at(c, r);
        if (s->status)
            return zero__error((zero_status_t)s->status,
                               "%s on rank %d: rank %d could not take part (%s)", name, me, r,
                               zero_status_str((zero_status_t)s->status));
    }
    if (a->coll == ZERO_COLL_ALL_TO_ALLV) {
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < n; j++) {
                uint64_t sends = sig_vectors(sig_at(c, i))[j];
                uint64_t expects = sig_vectors(sig_at(c, j))[n + i];
                if (sends != expects)
                    return zero__error(ZERO_ERR_MISMATCH,
                                       "all_to_allv on rank %d: ranks disagree: rank %d sends "
                                       "%llu elements to rank %d but rank %d expects %llu from "
                                       "rank %d",
                                       me, i, (unsigned long long)sends, j, j,
                                       (unsigned long long)expects, i);
            }
        }
    }
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ reduce */

static zero_status_t ensure_scratch(mpi_comm_t *c, zero_mem_t *mem) {
    if (c->scratch || c->super.size == 1) return ZERO_OK;
    size_t bytes = (size_t)SLOTS * (size_t)(c->super.size - 1) * c->segment_bytes;
    c->scratch = zero_mem_alloc(mem, ZERO_MEM_COMM, bytes, 4096);
    if (!c->scratch)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "MPI backend on rank %d: cannot allocate %zu bytes of reduce-scatter "
                           "scratch",
                           c->super.rank, bytes);
    return ZERO_OK;
}

/* Rank j owns elements [block_off[j], +block_len[j]) of every send buffer. This rank receives
 * its block from every peer segment by segment into scratch and writes the rank-order
 * reduction of segment k to out + k * segment while segments k+1.. are being received; it sends
 * every peer that peer's block with up to SEND_WINDOW segments in flight.
 *
 * Request layout: receive of slot s from peer index q at s*(n-1)+q; sends after SLOTS*(n-1). */
static zero_status_t reduce_phase(mpi_comm_t *c, const zero__coll_args_t *a, const char *send,
                                  char *out, double deadline) {
    int n = c->super.size, me = c->super.rank, np = n - 1;
    size_t es = zero_dtype_size(a->dtype);
    const size_t *off = c->block_off, *len = c->block_len;
    if (n == 1) {
        const void *in[1] = {send + off[0] * es};
        zero__reduce_blocks(out, in, 1, len[0], a->dtype, a->op);
        return ZERO_OK;
    }
    size_t seg = c->segment_bytes / es;
    size_t my_nseg = (len[me] + seg - 1) / seg;
    int nreq = (SLOTS + SEND_WINDOW) * np;
    zero_status_t st = reqs_reserve(c, nreq);
    if (st) return st;
    c->nreq = nreq;
    for (int i = 0; i < nreq; i++) c->reqs[i] = MPI_REQUEST_NULL;

    size_t sends_posted[np], pending_slot[SLOTS] = {0};
    const char *name = zero_coll_name(a->coll);
    int rc = MPI_SUCCESS;

#define PEER(q) ((q) < me ? (q) : (q) + 1)
#define SLOT_BUF(s, q) (c->scratch + ((size_t)(s) * (size_t)np + (size_t)(q)) * c->segment_bytes)

    /* Post the receives of segment k into slot k % SLOTS. */
#define POST_RECVS(k)                                                                              \
    do {                                                                                           \
        size_t s_ = (k) % SLOTS, e_ = ZERO_MIN(seg, len[me] - (k)*seg);                            \
        for (int q = 0; q < np && rc == MPI_SUCCESS; q++) {                                        \
            int i_ = (int)s_ * np + q;                                                             \
            c->req_peer[i_] = PEER(q);                                                             \
            c->req_is_recv[i_] = 1;                                                                \
            rc = MPI_Irecv(SLOT_BUF(s_, q), (int)(e_ * es), MPI_BYTE, PEER(q), TAG_REDUCE, c->mc,  \
                           &c->reqs[i_]);                                                          \
        }                                                                                          \
        pending_slot[s_] = (size_t)np;                                                             \
    } while (0)

    /* Post the next segment of peer q's block into request w of its window. */
#define POST_SEND(q, w)                                                                            \
    do {                                                                                           \
        int p_ = PEER(q);                                                                          \
        size_t k_ = sends_posted[q]++, e_ = ZERO_MIN(seg, len[p_] - k_ * seg);                     \
        int i_ = SLOTS * np + (w)*np + (q);                                                        \
        c->req_peer[i_] = p_;                                                                      \
        c->req_is_recv[i_] = 0;                                                                    \
        rc = MPI_Isend(send + (off[p_] + k_ * seg) * es, (int)(e_ * es), MPI_BYTE, p_, TAG_REDUCE, \
                       c->mc, &c->reqs[i_]);                                                       \
    } while (0)

    for (size_t k = 0; k < (size_t)SLOTS && k < my_nseg && rc == MPI_SUCCESS; k++) POST_RECVS(k);
    for (int q = 0; q < np; q++) {
        size_t nseg_q = (len[PEER(q)] + seg - 1) / seg;
        sends_posted[q] = 0;
        for (int w = 0; w < SEND_WINDOW && sends_posted[q] < nseg_q && rc == MPI_SUCCESS; w++)
            POST_SEND(q, w);
    }

    const void *in[n];
    size_t k = 0; /* next segment to reduce */
    unsigned idle = 0;
    while (rc == MPI_SUCCESS) {
        if (k < my_nseg && pending_slot[k % SLOTS] == 0) {
            size_t s = k % SLOTS, e = ZERO_MIN(seg, len[me] - k * seg);
            for (int r = 0; r < n; r++)
                in[r] = r == me ? (const void *)(send + (off[me] + k * seg) * es)
                                : (const void *)SLOT_BUF(s, r < me ? r : r - 1);
            zero__reduce_blocks(out + k * seg * es, in, n, e, a->dtype, a->op);
            if (k + SLOTS < my_nseg) POST_RECVS(k + SLOTS);
            k++;
            idle = 0;
            continue;
        }
        int outcount = 0;
        rc = MPI_Testsome(nreq, c->reqs, &outcount, c->done_idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) break;
        if (outcount == MPI_UNDEFINED) {
            if (k >= my_nseg) break; /* everything received, reduced and sent */
            outcount = 0;
        }
        for (int d = 0; d < outcount && rc == MPI_SUCCESS; d++) {
            int i = c->done_idx[d];
            if (i < SLOTS * np) {
                pending_slot[i / np]--;
            } else {
                int w = (i - SLOTS * np) / np, q = (i - SLOTS * np) % np;
                if (sends_posted[q] * seg < len[PEER(q)]) POST_SEND(q, w);
            }
        }
        if (outcount > 0) {
            idle = 0;
            continue;
        }
        if (zero_time_now() > deadline) return timeout_error(c, a, 0);
        backoff(&idle);
    }
#undef POST_SEND
#undef POST_RECVS
#undef SLOT_BUF
#undef PEER
    if (rc != MPI_SUCCESS) {
        st = mpi_error(c, rc, name);
        reqs_abandon(c);
        return st;
    }
    c->nreq = 0;
    return ZERO_OK;
}

static zero_status_t run_reduce_scatter(mpi_comm_t *c, const zero__coll_args_t *a,
                                        double deadline) {
    int n = c->super.size;
    for (int r = 0; r < n; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    return reduce_phase(c, a, a->send, a->recv, deadline);
}

/* Direct all-gather of the blocks [block_off[r], +block_len[r]) of buf: this rank sends its
 * block to every peer and receives every peer's block in place. */
static zero_status_t gather_blocks(mpi_comm_t *c, const zero__coll_args_t *a, const char *mine,
                                   char *buf, int tag, double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    const char *name = zero_coll_name(a->coll);
    zero_status_t st = ZERO_OK;
    c->nreq = 0;
    for (int r = 0; r < n && !st; r++)
        if (r != me)
            st =
                post_transfer(c, 1, buf + c->block_off[r] * es, c->block_len[r] * es, r, tag, name);
    for (int r = 0; r < n && !st; r++)
        if (r != me) st = post_transfer(c, 0, (void *)mine, c->block_len[me] * es, r, tag, name);
    if (st) {
        reqs_abandon(c);
        return st;
    }
    char *dst = buf + c->block_off[me] * es;
    if (dst != mine) memcpy(dst, mine, c->block_len[me] * es);
    return reqs_wait(c, a, deadline, 0);
}

static zero_status_t run_all_reduce(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    for (int r = 0; r < n; r++)
        zero__block_range(a->count, n, r, &c->block_off[r], &c->block_len[r]);
    char *mine = (char *)a->recv + c->block_off[me] * es;
    /* Two phases, not one fused pipeline: sending each reduced segment on at once was measured
     * slower on this machine (likely because its copies evict the scratch segments from L2 between
     * their copy and their reduction). The reduce phase completes all its sends and receives before
     * the gather posts receives into recv, so in place (send == recv) no peer still reads what is
     * being overwritten. */
    zero_status_t st = reduce_phase(c, a, a->send, mine, deadline);
    if (st) return st;
    return gather_blocks(c, a, mine, a->recv, TAG_GATHER, deadline);
}

static zero_status_t run_all_gather(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    for (int r = 0; r < c->super.size; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    return gather_blocks(c, a, a->send, a->recv, TAG_GATHER, deadline);
}

/* ------------------------------------------------------------------------------ others */

/* all_to_all(v) over point-to-point, for counts MPI's int arguments cannot hold. */
static zero_status_t exchange_p2p(mpi_comm_t *c, const zero__coll_args_t *a, const size_t *sc,
                                  const size_t *sd, const size_t *rc_, const size_t *rd,
                                  double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    const char *name = zero_coll_name(a->coll);
    zero_status_t st = ZERO_OK;
    c->nreq = 0;
    for (int r = 0; r < n && !st; r++)
        if (r != me)
            st = post_transfer(c, 1, (char *)a->recv + rd[r] * es, rc_[r] * es, r, TAG_EXCHANGE,
                               name);
    for (int r = 0; r < n && !st; r++)
        if (r != me)
            st = post_transfer(c, 0, (char *)a->send + sd[r] * es, sc[r] * es, r, TAG_EXCHANGE,
                               name);
    if (st) {
        reqs_abandon(c);
        return st;
    }
    if (sc[me])
        memcpy((char *)a->recv + rd[me] * es, (const char *)a->send + sd[me] * es, sc[me] * es);
    return reqs_wait(c, a, deadline, 0);
}

static zero_status_t run_all_to_all(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size;
    size_t es = zero_dtype_size(a->dtype);
    if (a->count == 0) return ZERO_OK;
    if (a->count <= (size_t)INT_MAX) {
        MPI_Request req;
        MPI_Datatype t = element_type(es);
        int rc = MPI_Ialltoall(a->send, (int)a->count, t, a->recv, (int)a->count, t, c->mc, &req);
        if (rc != MPI_SUCCESS) return mpi_error(c, rc, "all_to_all");
        return wait_one(c, &req, a, deadline);
    }
    for (int r = 0; r < n; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    return exchange_p2p(c, a, c->block_len, c->block_off, c->block_len, c->block_off, deadline);
}

static zero_status_t run_all_to_allv(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size;
    size_t es = zero_dtype_size(a->dtype);
    int fits = 1;
    for (int r = 0; r < n; r++)
        fits &= a->send_counts[r] <= (size_t)INT_MAX && a->send_displs[r] <= (size_t)INT_MAX &&
                a->recv_counts[r] <= (size_t)INT_MAX && a->recv_displs[r] <= (size_t)INT_MAX;
    if (!fits)
        return exchange_p2p(c, a, a->send_counts, a->send_displs, a->recv_counts, a->recv_displs,
                            deadline);
    int *sc = c->counts_i, *sd = sc + n, *rc_ = sd + n, *rd = rc_ + n;
    for (int r = 0; r < n; r++) {
        sc[r] = (int)a->send_counts[r];
        sd[r] = (int)a->send_displs[r];
        rc_[r] = (int)a->recv_counts[r];
        rd[r] = (int)a->recv_displs[r];
    }
    MPI_Datatype t = element_type(es);
    MPI_Request req;
    int rc = MPI_Ialltoallv(a->send, sc, sd, t, a->recv, rc_, rd, t, c->mc, &req);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "all_to_allv");
    return wait_one(c, &req, a, deadline);
}

static zero_status_t run_broadcast(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    size_t bytes = a->count * zero_dtype_size(a->dtype);
    int is_root = c->super.rank == a->root;
    /* The root broadcasts from its send buffer (MPI only reads it there). */
    char *buf = is_root ? (char *)a->send : (char *)a->recv;
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES) {
        MPI_Request req;
        int rc = MPI_Ibcast(buf + off, (int)ZERO_MIN(CHUNK_BYTES, bytes - off), MPI_BYTE, a->root,
                            c->mc, &req);
        if (rc != MPI_SUCCESS) return mpi_error(c, rc, "broadcast");
        zero_status_t st = wait_one(c, &req, a, deadline);
        if (st) return st;
    }
    if (is_root && a->recv != a->send && bytes) memcpy(a->recv, a->send, bytes);
    return ZERO_OK;
}

static zero_status_t create(MPI_Comm mc, double timeout_s, zero_mem_t *mem, zero_comm_t **out);

static zero_status_t run_split(mpi_comm_t *c, const zero__coll_args_t *a) {
    MPI_Comm sub = MPI_COMM_NULL;
    *a->split_out = NULL;
    /* Every rank passed the agreement, so this blocking call has every rank in it. */
    int rc = MPI_Comm_split(c->mc, a->colour < 0 ? MPI_UNDEFINED : a->colour, a->key, &sub);
    if (rc != MPI_SUCCESS) return mpi_error(c, rc, "split");
    if (sub == MPI_COMM_NULL) return ZERO_OK;
    pthread_mutex_lock(&c->super.lock);
    double timeout_s = c->super.timeout_s;
    zero_mem_t *mem = c->super.mem;
    pthread_mutex_unlock(&c->super.lock);
    return create(sub, timeout_s, mem, a->split_out);
}

static zero_status_t mpi_run(zero_comm_t *comm, const zero__coll_args_t *a) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    pthread_mutex_lock(&comm->lock);
    c->timeout_s = comm->timeout_s;
    zero_mem_t *mem = comm->mem;
    double deadline = deadline_after(c->timeout_s);
    pthread_mutex_unlock(&comm->lock);

    zero_status_t local = ZERO_OK;
    if (a->coll == ZERO_COLL_ALL_REDUCE || a->coll == ZERO_COLL_REDUCE_SCATTER)
        local = ensure_scratch(c, mem);
    char message[1024];
    if (local) snprintf(message, sizeof message, "%s", zero_last_error());
    zero_status_t st = agree(c, a, deadline, local);
    if (st) {
        /* The rank that could not allocate keeps its own, more precise message. */
        if (local && st == local) zero__set_error_message(message);
        return st;
    }
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE: return run_all_reduce(c, a, deadline);
    case ZERO_COLL_REDUCE_SCATTER: return run_reduce_scatter(c, a, deadline);
    case ZERO_COLL_ALL_GATHER: return run_all_gather(c, a, deadline);
    case ZERO_COLL_ALL_TO_ALL: return run_all_to_all(c, a, deadline);
    case ZERO_COLL_ALL_TO_ALLV: return run_all_to_allv(c, a, deadline);
    case ZERO_COLL_BROADCAST: return run_broadcast(c, a, deadline);
    case ZERO_COLL_BARRIER: return ZERO_OK; /* the agreement round is a complete barrier */
    case ZERO_COLL_SPLIT: return run_split(c, a);
    default:
        return zero__error(ZERO_ERR_INTERNAL, "MPI backend: unknown collective %d", (int)a->coll);
    }
}

/* ------------------------------------------------------------------------------ lifetime */

static void release(mpi_comm_t *c) {
    /* After abandoned requests MPI may still write into these: keep them (see file comment). */
    if (!c->leaked) {
        zero_mem_free(c->scratch);
        free(c->sig_send);
        free(c->sig_recv);
        free(c->reqs);
        free(c->req_peer);
        free(c->req_is_recv);
        free(c->done_idx);
        free(c->block_off);
        free(c->block_len);
        free(c->counts_i);
        free(c);
    }
}

static void mpi_destroy(zero_comm_t *comm) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    /* MPI_Comm_free is local in Open MPI, but a failed communicator may have requests MPI
     * still holds; skip it then, so freeing never blocks. */
    if (!c->leaked && !comm->failure && c->mc != MPI_COMM_NULL) MPI_Comm_free(&c->mc);
    release(c);
}

static const zero__comm_backend_t mpi_backend = {
    .kind = ZERO_BACKEND_MPI, .run = mpi_run, .destroy = mpi_destroy};

/* Take ownership of mc and wrap it in a communicator with its progress thread. */
static zero_status_t create(MPI_Comm mc, double timeout_s, zero_mem_t *mem, zero_comm_t **out) {
    int rank = 0, size = 1;
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    mpi_comm_t *c = calloc(1, sizeof *c);
    if (!c) goto fail_oom;
    c->mc = mc;
    c->sig_bytes = sizeof(signature_t) + 2 * (size_t)size * sizeof(uint64_t);
    c->sig_send = calloc(1, c->sig_bytes);
    c->sig_recv = calloc((size_t)size, c->sig_bytes);
    c->block_off = calloc((size_t)size, sizeof(size_t));
    c->block_len = calloc((size_t)size, sizeof(size_t));
    c->counts_i = calloc(4 * (size_t)size, sizeof(int));
    if (!c->sig_send || !c->sig_recv || !c->block_off || !c->block_len || !c->counts_i)
        goto fail_buffers;
    /* Keep SLOTS * (n-1) segments near SCRATCH_TARGET_BYTES: 1 MiB segments up to 9 ranks. */
    size_t seg = size > 1 ? SCRATCH_TARGET_BYTES / ((size_t)SLOTS * (size_t)(size - 1)) : 0;
    seg = ZERO_MAX(SEGMENT_MIN_BYTES, ZERO_MIN(SEGMENT_MAX_BYTES, seg));
    c->segment_bytes = seg / 4096 * 4096;
    if (reqs_reserve(c, (SLOTS + SEND_WINDOW) * (size > 1 ? size - 1 : 1) + 2 * size))
        goto fail_buffers;
    zero_status_t st = zero__comm_base_init(&c->super, &mpi_backend, rank, size, timeout_s, mem);
    if (st) {
        release(c);
        MPI_Comm_free(&mc);
        return st;
    }
    *out = &c->super;
    return ZERO_OK;

fail_buffers:
    release(c);
fail_oom:
    MPI_Comm_free(&mc);
    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                       "MPI backend: out of memory creating a communicator of %d ranks (rank %d)",
                       size, rank);
}

/* ------------------------------------------------------------------------------ public */

int zero_comm_mpi_available(void) { return 1; }

int zero_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
    }
}

zero_status_t zero_comm_mpi_init(zero_comm_t **out, const zero_comm_params_t *params) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero_comm_mpi_init: out is NULL");
    *out = NULL;
    zero_comm_params_t p = params ? *params : zero_comm_params_default();
    int initialised = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    pthread_mutex_lock(&init_lock);
    MPI_Finalized(&finalized);
    MPI_Initialized(&initialised);
    if (finalized) {
        pthread_mutex_unlock(&init_lock);
        return zero__error(ZERO_ERR_UNSUPPORTED,
                           "zero_comm_mpi_init: MPI was already finalized in this process and "
                           "cannot be initialised again");
    }
    if (!initialised) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&init_lock);
            return zero__error(ZERO_ERR_COMM_FAILED,
                               "zero_comm_mpi_init: MPI_Init_thread failed (error %d)", rc);
        }
        we_initialised = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    pthread_mutex_unlock(&init_lock);
    if (provided < MPI_THREAD_MULTIPLE)
        return zero__error(ZERO_ERR_UNSUPPORTED,
                           "zero_comm_mpi_init: MPI provides %s but the MPI backend needs "
                           "MPI_THREAD_MULTIPLE (each communicator's progress thread calls MPI); "
                           "%s",
                           thread_level_name(provided),
                           initialised ? "initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)"
                                       : "use an MPI library built with thread support");
    MPI_Comm mc;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &mc);
    if (rc != MPI_SUCCESS)
        return zero__error(ZERO_ERR_COMM_FAILED,
                           "zero_comm_mpi_init: MPI_Comm_dup(MPI_COMM_WORLD) failed (error %d)",
                           rc);
    return create(mc, p.timeout_s, p.mem, out);
}

void zero_comm_mpi_finalize(void) {
    pthread_mutex_lock(&init_lock);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised && !finalized) MPI_Finalize();
    we_initialised = 0;
    pthread_mutex_unlock(&init_lock);
}
