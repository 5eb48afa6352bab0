/* mpi.c — the MPI backend: one process per rank, collectives over an MPI communicator.
 *
 * Every collective starts with an agreement round: each rank publishes a small signature (call
 * number, collective, count, dtype, op, root) to every peer and checks all of them, so a mismatch
 * fails every rank the same way and a rank that never arrives is named when the deadline passes.
 * Since every rank waits for a signature that every other rank publishes when it enters, the
 * agreement round is also a complete barrier.
 *
 * Two transports. When all ranks of the communicator are on this node (the common case here),
 * they share one POSIX shared-memory object set up with MPI at creation (see "shared memory"):
 * signatures go through it and calls whose per-rank input is at most 16 KiB carry that input with
 * the signature (one synchronisation per call, "eager") — both only while the node's ranks fit
 * its cores, where they measured faster; reduce_scatter and all_reduce's
 * reduce-scatter phase are a single-copy pipeline — each rank copies its send buffer once into
 * a staging slot, a slot at a time, and every rank reduces its own block straight from all slots
 * in rank order 0..N-1. Otherwise (ranks on several nodes, or ZERO_MPI_SHM=0) everything goes
 * over point-to-point: signatures on a reserved tag; reduce_scatter as a direct algorithm (rank r
 * receives block r from everyone into persistent scratch, segment by segment, and reduces it in
 * rank order). Either way the sums are bitwise equal to the threads backend: one kernel
 * (zero__reduce_blocks), one order; an MPI reduction or a ring would sum in another order.
 * all_reduce is the reduce-scatter over zero__block_range followed by a direct point-to-point
 * all-gather of the blocks. all_gather is direct point-to-point too (each rank pulls every block
 * straight from its owner, which is as fast as MPI_Allgather here and lets the deadline name the
 * missing rank); all_to_all(v) and broadcast use MPI's non-blocking collectives (with a
 * point-to-point or chunked path for counts beyond INT_MAX); split uses MPI_Comm_split.
 * fp16/bf16 travel as raw 2-byte data: we reduce, not MPI.
 *
 * Every wait polls (MPI_Testsome, or the shared counters) against one deadline per collective
 * (start + timeout_s) with a spin / yield / nanosleep backoff, because ranks may outnumber cores.
 * After a timeout pending point-to-point requests are cancelled or freed and the
 * communicator is failed; its MPI handle and scratch are then leaked on purpose (freeing them
 * could block, or let a late message land in freed memory).
 *
 * Not here: argument checks, queueing and statistics (comm.c); MPI must provide
 * MPI_THREAD_MULTIPLE, since each communicator's progress thread calls MPI concurrently.
 */
#include "comm_internal.h"

#include <mpi.h>

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

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

    int oversubscribed;   /* this node runs more ranks than it has cores */
    size_t segment_bytes; /* reduce-scatter segment */
    char *scratch;        /* SLOTS * (n-1) * segment_bytes, allocated on first use */

    /* On-node shared memory (NULL when the ranks span nodes or it could not be set up): region
     * r of shm_rank_bytes belongs to rank r (see the shared-memory section). */
    char *shm;
    size_t shm_rank_bytes;
    zero_mem_t *shm_mem;     /* the domain this rank's region is accounted to (borrowed) */
    size_t shm_sig_bytes;    /* one signature slot (sig_bytes rounded up to a cache line) */
    size_t shm_eager_offset; /* of the two eager slots in a rank's region */
    size_t shm_slot_bytes;   /* one staging slot */
    uint64_t round;          /* staging rounds run on this communicator */
    char peers_buf[256];     /* a formatted rank list for messages */
} mpi_comm_t;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int we_initialised; /* guarded by init_lock */

/* ------------------------------------------------------------------------------ helpers */

static double deadline_after(double seconds) { return zero_time_now() + seconds; }

/* How a wait polls: spin briefly (a peer's message is usually microseconds away), then yield for
 * about a thousand polls (as fast as spinning on an idle core, and with more ranks than cores it
 * hands the core to a rank with work), then sleep with a period growing to 256 us for long waits
 * (a late rank, a timeout). Sleeping much sooner when ranks outnumber cores was tried (after 8-32
 * polls, or after 200 us of yielding) and was not better for the reduce-scatter at 4 ranks on 2
 * cores within this machine's noise, but 2-4x slower for 1-256 KiB calls: a sleep costs at least
 * the timer slack (~50 us), and every wake-up preempts a rank with work. */
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

static signature_t *sig_at(mpi_comm_t *c, int r) {
    return (signature_t *)(c->sig_recv + (size_t)r * c->sig_bytes);
}

static uint64_t *sig_vectors(signature_t *s) { return (uint64_t *)(s + 1); }

/* ------------------------------------------------------------------------------ shared memory */

/* When every rank of the communicator is on this node, the ranks share one POSIX shared-memory
 * object (created by rank 0, opened by the others, unlinked as soon as all have mapped it, and
 * unmapped locally on destroy, so nothing collective happens at free time — a peer that never
 * arrives cannot hang us there). Rank r's region holds:
 *   - three counters, each on its own cache line, written only by rank r and read by all:
 *     arrived  = the call number + 1 of the last signature rank r published,
 *     staged   = the last staging round whose data rank r has copied into its slot,
 *     consumed = the last staging round rank r has finished reading from everyone's slots;
 *   - two signature slots and two eager-data slots (call number parity);
 *   - a ring of SHM_SLOTS staging slots (round number modulo SHM_SLOTS).
 * Ordering: a writer fills a slot, then stores its counter with release; a reader loads the
 * counter with acquire before it reads the slot, so it sees the slot's contents. A slot is
 * refilled only after every reader's counter says it is done with the previous use: round x
 * reuses the staging slot of round x - SHM_SLOTS once every rank has consumed that round; call
 * k + 2 reuses the signature and eager slots of call k, which every rank has read before it
 * could publish call k + 1, the condition for our reaching call k + 2. The counters live in memory
 * shared between processes, so they must be lock-free atomics. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared-memory counters need lock-free 64-bit atomics");

typedef struct shm_header {
    _Alignas(64) _Atomic uint64_t arrived;
    _Alignas(64) _Atomic uint64_t staged;
    _Alignas(64) _Atomic uint64_t consumed;
} shm_header_t;

enum { SHM_ARRIVED, SHM_STAGED, SHM_CONSUMED };
#define SHM_SIG_OFFSET ((size_t)4096)
/* A collective whose per-rank input fits in an eager slot carries it with the signature: one
 * synchronisation for the whole call instead of an agreement round plus a data exchange. */
#define SHM_EAGER_BYTES ((size_t)16 << 10) /* 64 KiB was slower than the CMA path (2 ranks) */
/* Staging ring: SHM_SLOTS slots of SHM_SLOT_BYTES per rank (8 MiB). A round moves a slot's worth
 * of each rank's send buffer; a slot is usually read by its peers soon after it is written, so
 * mostly from the 32 MiB L3 for small n. Eight slots let a rank run ahead of a descheduled peer:
 * with two slots (lockstep) 2 ranks under heavy foreign load fell to 0.4x of Open MPI at 256 MiB.
 */
enum { SHM_SLOTS = 8 };
#define SHM_SLOT_BYTES ((size_t)1 << 20)

static shm_header_t *shm_header(const mpi_comm_t *c, int r) {
    return (shm_header_t *)(c->shm + (size_t)r * c->shm_rank_bytes);
}

static char *shm_sig_slot(const mpi_comm_t *c, int r, uint64_t seq) {
    return c->shm + (size_t)r * c->shm_rank_bytes + SHM_SIG_OFFSET + (seq & 1) * c->shm_sig_bytes;
}

static char *shm_stage_slot(const mpi_comm_t *c, int r, uint64_t round) {
    size_t stage_offset = c->shm_rank_bytes - SHM_SLOTS * c->shm_slot_bytes;
    return c->shm + (size_t)r * c->shm_rank_bytes + stage_offset +
           (size_t)(round % SHM_SLOTS) * c->shm_slot_bytes;
}

static char *shm_eager_slot(const mpi_comm_t *c, int r, uint64_t seq) {
    return c->shm + (size_t)r * c->shm_rank_bytes + c->shm_eager_offset +
           (seq & 1) * SHM_EAGER_BYTES;
}

static _Atomic uint64_t *shm_counter(const mpi_comm_t *c, int r, int which) {
    shm_header_t *h = shm_header(c, r);
    return which == SHM_ARRIVED ? &h->arrived : which == SHM_STAGED ? &h->staged : &h->consumed;
}

static void shm_publish(const mpi_comm_t *c, int which, uint64_t value) {
    atomic_store_explicit(shm_counter(c, c->super.rank, which), value, memory_order_release);
}

/* Wait until every rank's counter `which` reaches target; on timeout name the ranks short of it. */
static zero_status_t shm_wait(mpi_comm_t *c, const zero__coll_args_t *a, double deadline, int which,
                              uint64_t target) {
    int n = c->super.size;
    unsigned idle = 0;
    int r = 0;
    for (;;) {
        while (r < n &&
               atomic_load_explicit(shm_counter(c, r, which), memory_order_acquire) >= target)
            r++;
        if (r == n) return ZERO_OK;
        if (zero_time_now() > deadline) break;
        backoff(&idle);
    }
    unsigned char flag[n];
    for (int q = 0; q < n; q++)
        flag[q] = atomic_load_explicit(shm_counter(c, q, which), memory_order_acquire) < target;
    char what[160];
    describe_args(what, sizeof what, a);
    if (which == SHM_ARRIVED)
        return zero__error(ZERO_ERR_TIMEOUT,
                           "%s timed out after %.1f s on rank %d: rank(s) %s did not arrive", what,
                           c->timeout_s, c->super.rank, format_ranks(c, flag));
    return zero__error(ZERO_ERR_TIMEOUT,
                       "%s timed out after %.1f s on rank %d: the data exchange with rank(s) %s "
                       "did not complete",
                       what, c->timeout_s, c->super.rank, format_ranks(c, flag));
}

/* The agreement round through shared memory: publish this rank's signature (already in
 * sig_at(c, me)), wait for every rank's, and copy them into sig_recv. */
static zero_status_t shm_exchange_signatures(mpi_comm_t *c, const zero__coll_args_t *a,
                                             double deadline, uint64_t seq) {
    int n = c->super.size, me = c->super.rank;
    memcpy(shm_sig_slot(c, me, seq), sig_at(c, me), c->sig_bytes);
    shm_publish(c, SHM_ARRIVED, seq + 1);
    zero_status_t st = shm_wait(c, a, deadline, SHM_ARRIVED, seq + 1);
    if (st) return st;
    for (int r = 0; r < n; r++)
        if (r != me) memcpy(sig_at(c, r), shm_sig_slot(c, r, seq), c->sig_bytes);
    return ZERO_OK;
}

/* Copy this rank's part of round x (elements [base, base + w) of every other rank's block) into
 * its slot for round x and publish it. The caller has checked that the slot is free. */
static void shm_stage(mpi_comm_t *c, const zero__coll_args_t *a, const char *send, uint64_t x,
                      size_t base, size_t w) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    char *slot = shm_stage_slot(c, me, x);
    for (int j = 0; j < n; j++)
        if (j != me && base < c->block_len[j])
            memcpy(slot + (size_t)j * w * es, send + (c->block_off[j] + base) * es,
                   ZERO_MIN(w, c->block_len[j] - base) * es);
    shm_publish(c, SHM_STAGED, x);
}

/* Whether every rank's counter `which` has reached target. */
static int shm_all_reached(const mpi_comm_t *c, int which, uint64_t target) {
    for (int r = 0; r < c->super.size; r++)
        if (atomic_load_explicit(shm_counter(c, r, which), memory_order_acquire) < target) return 0;
    return 1;
}

/* The reduce phase through shared memory (single copy of each input byte into a staging slot
 * that the owner of its block reads, often from cache). Round t covers elements [t*w, (t+1)*w)
 * of every block, w = slot / n: each rank copies its part of the other ranks' blocks into its
 * slot for the round and publishes it; once every rank has published round t, each reduces its
 * own block's part from every rank's slot (its own contribution straight from send) in rank
 * order 0..n-1 — the same order and kernel as the point-to-point path, so the result is bitwise
 * the same. Slots form a ring of SHM_SLOTS per rank: round x reuses the slot of x - SHM_SLOTS once
 * every rank has consumed that round. A rank stages ahead while it waits, so ranks are not held
 * in lockstep: with more ranks than cores (or foreign load) a descheduled peer costs the others
 * nothing until they have run SHM_SLOTS rounds ahead of it. */
static zero_status_t shm_reduce_phase(mpi_comm_t *c, const zero__coll_args_t *a, const char *send,
                                      char *out, double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    const size_t *off = c->block_off, *len = c->block_len;
    size_t w = c->shm_slot_bytes / ((size_t)n * es), longest = 0;
    for (int j = 0; j < n; j++) longest = ZERO_MAX(longest, len[j]);
    size_t rounds = (longest + w - 1) / w;
    uint64_t first = c->round + 1, last = c->round + rounds, next = first; /* next to stage */
    c->round = last;
    const void *in[n];
    for (uint64_t x = first; x <= last; x++) {
        unsigned idle = 0;
        for (;;) {
            int progressed = 0;
            while (next <= last &&
                   (next <= SHM_SLOTS || shm_all_reached(c, SHM_CONSUMED, next - SHM_SLOTS))) {
                shm_stage(c, a, send, next, (size_t)(next - first) * w, w);
                next++;
                progressed = 1;
            }
            if (next > x && shm_all_reached(c, SHM_STAGED, x)) break;
            if (progressed) {
                idle = 0;
                continue;
            }
            if (zero_time_now() > deadline) {
                /* Late: whoever has not staged round x, or (if our own slot is not free) not
                 * consumed the round it last held. */
                int which = next > x ? SHM_STAGED : SHM_CONSUMED;
                zero_status_t st = shm_wait(c, a, deadline, which, next > x ? x : next - SHM_SLOTS);
                if (st) return st;
                continue; /* it arrived just now */
            }
            backoff(&idle);
        }
        size_t base = (size_t)(x - first) * w;
        if (base < len[me]) {
            for (int j = 0; j < n; j++)
                in[j] = j == me ? (const void *)(send + (off[me] + base) * es)
                                : (const void *)(shm_stage_slot(c, j, x) + (size_t)me * w * es);
            zero__reduce_blocks(out + base * es, in, n, ZERO_MIN(w, len[me] - base), a->dtype,
                                a->op);
        }
        shm_publish(c, SHM_CONSUMED, x);
    }
    return ZERO_OK;
}

/* Bytes this rank publishes with its signature for an eager call, or 0 when the call takes the
 * ordinary path. Depends only on the signature's fields, so ranks that agree decide alike. */
static size_t eager_bytes(const mpi_comm_t *c, const zero__coll_args_t *a) {
    size_t es = zero_dtype_size(a->dtype), n = (size_t)c->super.size, bytes;
    /* Eager data rides on the shared-memory agreement, which is not used with more ranks than
     * cores (see agree). */
    if (!c->shm || c->oversubscribed) return 0;
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE:
    case ZERO_COLL_ALL_GATHER:
    case ZERO_COLL_BROADCAST: bytes = a->count * es; break;
    case ZERO_COLL_REDUCE_SCATTER:
    case ZERO_COLL_ALL_TO_ALL:
        bytes = a->count > SHM_EAGER_BYTES ? SIZE_MAX : n * a->count * es;
        break;
    default: return 0;
    }
    return bytes > 0 && bytes <= SHM_EAGER_BYTES && a->count <= SHM_EAGER_BYTES ? bytes : 0;
}

/* Copy this rank's input of call `seq` into its eager slot (before the signature is published).
 * The slot of call seq was last read in call seq - 2, which every peer finished before it could
 * publish call seq - 1 — the agreement this rank has already passed. */
static void eager_publish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq, size_t bytes) {
    if (a->coll == ZERO_COLL_BROADCAST && c->super.rank != a->root) return;
    memcpy(shm_eager_slot(c, c->super.rank, seq), a->send, bytes);
}

/* Finish an eager call after the agreement: every rank's input is in its eager slot. */
static zero_status_t eager_finish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype), block = a->count * es;
    const char *src[n];
    for (int r = 0; r < n; r++)
        src[r] = r == me ? (const char *)a->send : shm_eager_slot(c, r, seq);
    char *recv = a->recv;
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE:
        zero__reduce_blocks(recv, (const void *const *)src, n, a->count, a->dtype, a->op);
        break;
    case ZERO_COLL_REDUCE_SCATTER: {
        const void *in[n];
        for (int r = 0; r < n; r++) in[r] = src[r] + (size_t)me * block;
        zero__reduce_blocks(recv, in, n, a->count, a->dtype, a->op);
        break;
    }
    case ZERO_COLL_ALL_GATHER:
        for (int r = 0; r < n; r++)
            if (recv + (size_t)r * block != src[r]) memcpy(recv + (size_t)r * block, src[r], block);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        for (int r = 0; r < n; r++) {
            const char *from = src[r] + (size_t)me * block;
            if (recv + (size_t)r * block != from) memcpy(recv + (size_t)r * block, from, block);
        }
        break;
    case ZERO_COLL_BROADCAST:
        if (recv != src[a->root]) memcpy(recv, src[a->root], block);
        break;
    default: ZERO_ASSERT(!"eager_bytes admits only the collectives above");
    }
    return ZERO_OK;
}

/* Number of mc's ranks on this node (collective over mc). */
static int node_size(MPI_Comm mc) {
    MPI_Comm node = MPI_COMM_NULL;
    int local = 1;
    if (MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    return local;
}

typedef struct shm_mapping {
    char *base; /* NULL: not shared */
    size_t rank_bytes, sig_bytes, eager_offset, total_bytes, slot_bytes;
} shm_mapping_t;

/* Map the shared object when all n > 1 ranks of mc are on this node (collective over mc, called
 * before anything that could fail locally). On any failure every rank gets base == NULL and stays
 * on the point-to-point paths. */
static shm_mapping_t shm_map(MPI_Comm mc, int n, int me, int local, size_t sig_bytes) {
    static _Atomic unsigned serial;
    shm_mapping_t m = {0};
    /* ZERO_MPI_SHM=0 keeps a node-local communicator on the point-to-point paths (the ones used
     * across nodes), so they can be tested and compared on one machine. Ranks might see
     * different environments: take the switch only if all agree. */
    const char *env = getenv("ZERO_MPI_SHM");
    int want = local == n && !(env && strcmp(env, "0") == 0), all_want = 0;
    if (n < 2 || MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, mc) != MPI_SUCCESS ||
        !all_want)
        return m;
    size_t sig = (sig_bytes + 63) / 64 * 64;
    size_t eager_offset = (SHM_SIG_OFFSET + 2 * sig + 4095) / 4096 * 4096;
    size_t stage_offset = eager_offset + 2 * SHM_EAGER_BYTES;
    size_t slot_bytes = SHM_SLOT_BYTES;
    size_t rank_bytes = stage_offset + SHM_SLOTS * slot_bytes, total = rank_bytes * (size_t)n;
    char name[64] = "";
    int fd = -1;
    if (me == 0) {
        snprintf(name, sizeof name, "/zero-comm-%ld-%u", (long)getpid(),
                 atomic_fetch_add(&serial, 1u));
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)total) != 0) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
        if (fd < 0) name[0] = '\0';
    }
    MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, mc);
    if (me != 0 && name[0]) fd = shm_open(name, O_RDWR, 0);
    void *map = MAP_FAILED;
    if (fd >= 0) {
        map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    int ok = map != MAP_FAILED, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mc) != MPI_SUCCESS) all_ok = 0;
    if (me == 0 && name[0]) shm_unlink(name); /* every rank has it open or mapped by now */
    if (!all_ok) {
        if (ok) munmap(map, total);
        return m;
    }
    /* A new object is zero-filled: all counters start at 0. */
    m.base = map;
    m.rank_bytes = rank_bytes;
    m.sig_bytes = sig;
    m.eager_offset = eager_offset;
    m.total_bytes = total;
    m.slot_bytes = slot_bytes;
    return m;
}

/* ------------------------------------------------------------------------------ agreement */

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

    zero_status_t st = ZERO_OK;
    if (c->shm && !c->oversubscribed) {
        /* Through shared memory: no MPI matching and no progress-engine round trip. Not with
         * more ranks than cores: measured ~3x slower there for small calls (4 ranks, 2 cores;
         * polling shared memory gives up the core less well than polling MPI, not understood
         * yet), so those keep the point-to-point round. */
        st = shm_exchange_signatures(c, a, deadline, mine->seq);
        if (st) return st;
    } else {
        c->nreq = 0;
        st = reqs_reserve(c, 2 * n);
        if (st) return st;
        for (int r = 0; r < n && !st; r++)
            if (r != me)
                st = post_transfer(c, 1, sig_at(c, r), c->sig_bytes, r, TAG_SIGNATURE, name);
        for (int r = 0; r < n && !st; r++)
            if (r != me) st = post_transfer(c, 0, c->sig_send, sig_len, r, TAG_SIGNATURE, name);
        if (st) {
            reqs_abandon(c);
            return st;
        }
        st = reqs_wait(c, a, deadline, 1);
        if (st) return st;
    }

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

/* The point-to-point reduce path's scratch, from the communicator's memory domain; the
 * shared-memory path needs none. */
static zero_status_t ensure_scratch(mpi_comm_t *c, zero_mem_t *mem) {
    if (c->scratch || c->super.size == 1 || c->shm) return ZERO_OK;
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
    if (c->shm) return shm_reduce_phase(c, a, send, out, deadline);
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

/* Point-to-point exchange with every peer: receive rcount[r] elements from rank r at recv +
 * rdispl[r], send scount[r] elements from send + sdispl[r] to rank r, and copy this rank's own
 * part locally. sdispl NULL: every peer gets the same block, send[0, scount[me]) (all-gather;
 * in place when it already sits at recv + rdispl[me]). */
static zero_status_t exchange(mpi_comm_t *c, const zero__coll_args_t *a, const char *send,
                              const size_t *scount, const size_t *sdispl, char *recv,
                              const size_t *rcount, const size_t *rdispl, int tag,
                              double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    const char *name = zero_coll_name(a->coll);
    zero_status_t st = ZERO_OK;
    c->nreq = 0;
    for (int r = 0; r < n && !st; r++)
        if (r != me) st = post_transfer(c, 1, recv + rdispl[r] * es, rcount[r] * es, r, tag, name);
    for (int r = 0; r < n && !st; r++)
        if (r != me)
            st = post_transfer(c, 0, (void *)(send + (sdispl ? sdispl[r] : 0) * es),
                               (sdispl ? scount[r] : scount[me]) * es, r, tag, name);
    if (st) {
        reqs_abandon(c);
        return st;
    }
    const char *src = send + (sdispl ? sdispl[me] : 0) * es;
    char *dst = recv + rdispl[me] * es;
    if (scount[me] && dst != src) memcpy(dst, src, scount[me] * es);
    return reqs_wait(c, a, deadline, 0);
}

/* Direct all-gather of the blocks [block_off[r], +block_len[r]) of buf: this rank sends its
 * block to every peer and receives every peer's block in place. */
static zero_status_t gather_blocks(mpi_comm_t *c, const zero__coll_args_t *a, const char *mine,
                                   char *buf, int tag, double deadline) {
    return exchange(c, a, mine, c->block_len, NULL, buf, c->block_len, c->block_off, tag, deadline);
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
    /* counts MPI's int arguments cannot hold: point-to-point */
    return exchange(c, a, a->send, c->block_len, c->block_off, a->recv, c->block_len, c->block_off,
                    TAG_EXCHANGE, deadline);
}

static zero_status_t run_all_to_allv(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size;
    size_t es = zero_dtype_size(a->dtype);
    int fits = 1;
    for (int r = 0; r < n; r++)
        fits &= a->send_counts[r] <= (size_t)INT_MAX && a->send_displs[r] <= (size_t)INT_MAX &&
                a->recv_counts[r] <= (size_t)INT_MAX && a->recv_displs[r] <= (size_t)INT_MAX;
    if (!fits)
        return exchange(c, a, a->send, a->send_counts, a->send_displs, a->recv, a->recv_counts,
                        a->recv_displs, TAG_EXCHANGE, deadline);
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

static zero_status_t create(MPI_Comm mc, int oversubscribed, double timeout_s, zero_mem_t *mem,
                            zero_comm_t **out);

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
    return create(sub, c->oversubscribed, timeout_s, mem, a->split_out);
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
    uint64_t seq = c->seq;
    size_t eager = eager_bytes(c, a);
    if (eager) eager_publish(c, a, seq, eager);
    zero_status_t st = agree(c, a, deadline, local);
    if (st) {
        /* The rank that could not allocate keeps its own, more precise message. */
        if (local && st == local) zero__set_error_message(message);
        return st;
    }
    if (eager) return eager_finish(c, a, seq);
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
    /* Unmapping is local: the peers keep their own mappings of the object. */
    if (c->shm) munmap(c->shm, c->shm_rank_bytes * (size_t)c->super.size);
    zero__mem_untrack(c->shm_mem, ZERO_MEM_COMM, c->shm ? c->shm_rank_bytes : 0);
    c->shm = NULL;
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

/* This rank's region of the shared object counts as its comm buffers, in whichever domain the
 * communicator has: moved when the domain changes, so a domain can be detached and freed. */
static void mpi_mem_changed(zero_comm_t *comm, zero_mem_t *old_mem, zero_mem_t *new_mem) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    (void)old_mem;
    if (!c->shm) return;
    zero__mem_untrack(c->shm_mem, ZERO_MEM_COMM, c->shm_rank_bytes);
    zero__mem_track(new_mem, ZERO_MEM_COMM, c->shm_rank_bytes);
    c->shm_mem = new_mem;
}

static const zero__comm_backend_t mpi_backend = {.kind = ZERO_BACKEND_MPI,
                                                 .run = mpi_run,
                                                 .destroy = mpi_destroy,
                                                 .mem_changed = mpi_mem_changed};

/* Take ownership of mc and wrap it in a communicator with its progress thread. oversubscribed < 0
 * asks to find out (collective over mc). */
static zero_status_t create(MPI_Comm mc, int oversubscribed, double timeout_s, zero_mem_t *mem,
                            zero_comm_t **out) {
    int rank = 0, size = 1;
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    int local = node_size(mc);
    if (oversubscribed < 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        oversubscribed = cores > 0 && local > cores;
    }
    size_t sig_bytes = sizeof(signature_t) + 2 * (size_t)size * sizeof(uint64_t);
    shm_mapping_t shm = shm_map(mc, size, rank, local, sig_bytes);
    mpi_comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (shm.base) munmap(shm.base, shm.total_bytes);
        goto fail_oom;
    }
    c->mc = mc;
    c->shm = shm.base;
    c->shm_rank_bytes = shm.rank_bytes;
    c->shm_sig_bytes = shm.sig_bytes;
    c->shm_eager_offset = shm.eager_offset;
    c->shm_slot_bytes = shm.slot_bytes;
    c->super.size = size; /* release() needs it before the base is initialised */
    c->oversubscribed = oversubscribed;
    c->sig_bytes = sig_bytes;
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
    mpi_mem_changed(&c->super, NULL, mem);
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
    return create(mc, -1, p.timeout_s, p.mem, out);
}

void zero_comm_mpi_finalize(void) {
    pthread_mutex_lock(&init_lock);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised && !finalized) MPI_Finalize();
    we_initialised = 0;
    pthread_mutex_unlock(&init_lock);
}

void zero_comm_mpi_abort(int code) {
    int initialised = 0, finalized = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalized);
    if (!initialised || finalized) return;
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
}
