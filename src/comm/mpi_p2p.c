/* mpi_p2p.c — the MPI backend's data paths after the agreement: reduce_scatter and all_reduce's
 * reduce-scatter phase as a direct point-to-point pipeline (rank r receives block r from every
 * peer into persistent scratch, segment by segment, and reduces it in rank order with
 * zero__reduce_blocks), direct point-to-point all-gather and exchange, and all_to_all(v) and
 * broadcast over MPI's non-blocking collectives (point-to-point or chunked beyond INT_MAX).
 *
 * Not here: the shared-memory reduce phase it hands over to when mapped (mpi_shm.c), the
 * agreement and the waits (mpi_agree.c). Invariant: every call follows a passed agreement, so
 * all ranks run the same path with the same counts.
 */
#include "mpi_internal.h"

#include <limits.h>
#include <string.h>

static MPI_Datatype element_type(size_t es) {
    switch (es) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
    }
}

/* ------------------------------------------------------------------------------ reduce */

/* The point-to-point reduce path's scratch, from the communicator's memory domain; the
 * shared-memory path needs none. */
zero_status_t zero__mpi_ensure_scratch(mpi_comm_t *c, zero_mem_t *mem) {
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
    if (c->shm) return zero__mpi_shm_reduce_phase(c, a, send, out, deadline);
    size_t seg = c->segment_bytes / es;
    size_t my_nseg = (len[me] + seg - 1) / seg;
    int nreq = (SLOTS + SEND_WINDOW) * np;
    zero_status_t st = zero__mpi_reqs_reserve(c, nreq);
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
        if (zero_time_now() > deadline) return zero__mpi_timeout_error(c, a, 0);
        zero__mpi_backoff(&idle);
    }
#undef POST_SEND
#undef POST_RECVS
#undef SLOT_BUF
#undef PEER
    if (rc != MPI_SUCCESS) {
        st = zero__mpi_error(c, rc, name);
        zero__mpi_reqs_abandon(c);
        return st;
    }
    c->nreq = 0;
    return ZERO_OK;
}

zero_status_t zero__mpi_reduce_scatter(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size;
    for (int r = 0; r < n; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    if (zero__coll_hier(&c->super, a->coll, a->dtype) & ZERO__HIER_RS)
        return zero__mpi_hier_reduce_scatter(c, a, a->send, a->recv, deadline);
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
        if (r != me)
            st = zero__mpi_post_transfer(c, 1, recv + rdispl[r] * es, rcount[r] * es, r, tag, name);
    for (int r = 0; r < n && !st; r++)
        if (r != me)
            st = zero__mpi_post_transfer(c, 0, (void *)(send + (sdispl ? sdispl[r] : 0) * es),
                                         (sdispl ? scount[r] : scount[me]) * es, r, tag, name);
    if (st) {
        zero__mpi_reqs_abandon(c);
        return st;
    }
    const char *src = send + (sdispl ? sdispl[me] : 0) * es;
    char *dst = recv + rdispl[me] * es;
    if (scount[me] && dst != src) memcpy(dst, src, scount[me] * es);
    return zero__mpi_reqs_wait(c, a, deadline, 0);
}

/* Direct all-gather of the blocks [block_off[r], +block_len[r]) of buf: this rank sends its
 * block to every peer and receives every peer's block in place. */
static zero_status_t gather_blocks(mpi_comm_t *c, const zero__coll_args_t *a, const char *mine,
                                   char *buf, int tag, double deadline) {
    return exchange(c, a, mine, c->block_len, NULL, buf, c->block_len, c->block_off, tag, deadline);
}

zero_status_t zero__mpi_all_reduce(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
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
    const int hier = zero__coll_hier(&c->super, a->coll, a->dtype);
    zero_status_t st = hier & ZERO__HIER_RS
                           ? zero__mpi_hier_reduce_scatter(c, a, a->send, mine, deadline)
                           : reduce_phase(c, a, a->send, mine, deadline);
    if (st) return st;
    if (hier & ZERO__HIER_AG) return zero__mpi_hier_all_gather(c, a, mine, a->recv, deadline);
    return gather_blocks(c, a, mine, a->recv, TAG_GATHER, deadline);
}

zero_status_t zero__mpi_all_gather(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    for (int r = 0; r < c->super.size; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    if (zero__coll_hier(&c->super, a->coll, a->dtype) & ZERO__HIER_AG)
        return zero__mpi_hier_all_gather(c, a, a->send, a->recv, deadline);
    return gather_blocks(c, a, a->send, a->recv, TAG_GATHER, deadline);
}

/* ------------------------------------------------------------------------------ others */

zero_status_t zero__mpi_all_to_all(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    int n = c->super.size;
    size_t es = zero_dtype_size(a->dtype);
    if (a->count == 0) return ZERO_OK;
    if (a->count <= (size_t)INT_MAX) {
        MPI_Request req;
        MPI_Datatype t = element_type(es);
        int rc = MPI_Ialltoall(a->send, (int)a->count, t, a->recv, (int)a->count, t, c->mc, &req);
        if (rc != MPI_SUCCESS) return zero__mpi_error(c, rc, "all_to_all");
        return zero__mpi_wait_one(c, &req, a, deadline);
    }
    for (int r = 0; r < n; r++) {
        c->block_off[r] = (size_t)r * a->count;
        c->block_len[r] = a->count;
    }
    /* counts MPI's int arguments cannot hold: point-to-point */
    return exchange(c, a, a->send, c->block_len, c->block_off, a->recv, c->block_len, c->block_off,
                    TAG_EXCHANGE, deadline);
}

zero_status_t zero__mpi_all_to_allv(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
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
    if (rc != MPI_SUCCESS) return zero__mpi_error(c, rc, "all_to_allv");
    return zero__mpi_wait_one(c, &req, a, deadline);
}

zero_status_t zero__mpi_broadcast(mpi_comm_t *c, const zero__coll_args_t *a, double deadline) {
    size_t bytes = a->count * zero_dtype_size(a->dtype);
    int is_root = c->super.rank == a->root;
    /* The root broadcasts from its send buffer (MPI only reads it there). */
    char *buf = is_root ? (char *)a->send : (char *)a->recv;
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES) {
        MPI_Request req;
        int rc = MPI_Ibcast(buf + off, (int)ZERO_MIN(CHUNK_BYTES, bytes - off), MPI_BYTE, a->root,
                            c->mc, &req);
        if (rc != MPI_SUCCESS) return zero__mpi_error(c, rc, "broadcast");
        zero_status_t st = zero__mpi_wait_one(c, &req, a, deadline);
        if (st) return st;
    }
    if (is_root && a->recv != a->send && bytes) memcpy(a->recv, a->send, bytes);
    return ZERO_OK;
}
