/* mpi_agree.c — the MPI backend's waits, failures and agreement round.
 *
 * Posting and waiting for point-to-point requests against the collective's deadline (polling
 * with a spin / yield / nanosleep backoff), abandoning them after a failure, the messages that
 * name a failed or late rank, and the agreement round every collective starts with: each rank
 * publishes its signature to every peer (through shared memory when mpi_shm.c has mapped it,
 * else on TAG_SIGNATURE) and all ranks run the same checks, so all reach the same verdict.
 *
 * Not here: moving collective data (mpi_p2p.c, mpi_shm.c) or the communicator's lifetime
 * (mpi.c). Invariant: after a request is abandoned the communicator is failed and c->leaked
 * keeps its MPI handle and buffers alive, since MPI may still write into them.
 */
#include "mpi_internal.h"

#include <limits.h>
#include <sched.h>
#include <string.h>
#include <time.h>

/* How a wait polls: spin briefly (a peer's message is usually microseconds away), then yield for
 * about a thousand polls (as fast as spinning on an idle core, and with more ranks than cores it
 * hands the core to a rank with work), then sleep with a period growing to 256 us for long waits
 * (a late rank, a timeout). Sleeping much sooner when ranks outnumber cores was tried (after 8-32
 * polls, or after 200 us of yielding) and was not better for the reduce-scatter at 4 ranks on 2
 * cores within this machine's noise, but 2-4x slower for 1-256 KiB calls: a sleep costs at least
 * the timer slack (~50 us), and every wake-up preempts a rank with work. */
void zero__mpi_backoff(unsigned *idle) {
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

zero_status_t zero__mpi_error(mpi_comm_t *c, int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return zero__error(ZERO_ERR_COMM_FAILED, "%s on rank %d: MPI error: %s", what, c->super.rank,
                       text);
}

/* "all_reduce of 1000 fp32 elements" — what a timeout or failure message names. */
void zero__mpi_describe_args(char *buf, size_t cap, const zero__coll_args_t *a) {
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
const char *zero__mpi_format_ranks(mpi_comm_t *c, const unsigned char *flag) {
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

zero_status_t zero__mpi_reqs_reserve(mpi_comm_t *c, int need) {
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
zero_status_t zero__mpi_post_transfer(mpi_comm_t *c, int is_recv, void *ptr, size_t bytes, int peer,
                                      int tag, const char *what) {
    size_t chunks = bytes ? (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES : 0;
    if (chunks > (size_t)(INT_MAX - c->nreq))
        return zero__error(ZERO_ERR_INVALID_ARG, "%s on rank %d: %zu bytes is too large", what,
                           c->super.rank, bytes);
    zero_status_t st = zero__mpi_reqs_reserve(c, c->nreq + (int)chunks);
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
            return zero__mpi_error(c, rc, what);
        }
    }
    return ZERO_OK;
}

/* Give up on pending requests after a failure: cancel (receives are cancellable; Open MPI
 * ignores cancels of sends), then free what did not complete. The communicator is failed from
 * here on, so its handle and buffers are kept (leaked) in case MPI still touches them. */
void zero__mpi_reqs_abandon(mpi_comm_t *c) {
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
    return zero__mpi_format_ranks(c, flag);
}

zero_status_t zero__mpi_timeout_error(mpi_comm_t *c, const zero__coll_args_t *a, int agreement) {
    char what[160];
    zero__mpi_describe_args(what, sizeof what, a);
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
    zero__mpi_reqs_abandon(c);
    return st;
}

/* Wait for every posted request, polling against the deadline. */
zero_status_t zero__mpi_reqs_wait(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
                                  int agreement) {
    unsigned idle = 0;
    for (;;) {
        int outcount = 0;
        int rc = MPI_Testsome(c->nreq, c->reqs, &outcount, c->done_idx, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            zero_status_t st = zero__mpi_error(c, rc, zero_coll_name(a->coll));
            zero__mpi_reqs_abandon(c);
            return st;
        }
        if (outcount == MPI_UNDEFINED) break; /* every request is complete */
        if (outcount > 0) {
            idle = 0;
            continue;
        }
        if (zero_time_now() > deadline) return zero__mpi_timeout_error(c, a, agreement);
        zero__mpi_backoff(&idle);
    }
    c->nreq = 0;
    return ZERO_OK;
}

/* Wait for one request that cannot be cancelled (an MPI non-blocking collective). After a
 * timeout it is left behind: MPI forbids cancelling or freeing it. */
zero_status_t zero__mpi_wait_one(mpi_comm_t *c, MPI_Request *req, const zero__coll_args_t *a,
                                 double deadline) {
    unsigned idle = 0;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            c->leaked = 1;
            return zero__mpi_error(c, rc, zero_coll_name(a->coll));
        }
        if (done) return ZERO_OK;
        if (zero_time_now() > deadline) {
            char what[160];
            zero__mpi_describe_args(what, sizeof what, a);
            c->leaked = 1;
            return zero__error(ZERO_ERR_TIMEOUT,
                               "%s timed out after %.1f s on rank %d in the data exchange (MPI "
                               "collective did not complete)",
                               what, c->timeout_s, c->super.rank);
        }
        zero__mpi_backoff(&idle);
    }
}

/* ------------------------------------------------------------------------------ agreement */

static uint64_t *sig_vectors(signature_t *s) { return (uint64_t *)(s + 1); }

/* Exchange signatures with every peer and check them. local_status != 0 says this rank cannot
 * take part (its scratch allocation failed): every rank then fails the call the same way. */
zero_status_t zero__mpi_agree(mpi_comm_t *c, const zero__coll_args_t *a, double deadline,
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
        st = zero__mpi_shm_exchange_signatures(c, a, deadline, mine->seq);
        if (st) return st;
    } else {
        c->nreq = 0;
        st = zero__mpi_reqs_reserve(c, 2 * n);
        if (st) return st;
        for (int r = 0; r < n && !st; r++)
            if (r != me)
                st = zero__mpi_post_transfer(c, 1, sig_at(c, r), c->sig_bytes, r, TAG_SIGNATURE,
                                             name);
        for (int r = 0; r < n && !st; r++)
            if (r != me)
                st = zero__mpi_post_transfer(c, 0, c->sig_send, sig_len, r, TAG_SIGNATURE, name);
        if (st) {
            zero__mpi_reqs_abandon(c);
            return st;
        }
        st = zero__mpi_reqs_wait(c, a, deadline, 1);
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
