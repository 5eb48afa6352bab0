/* mpi_hier.c — the MPI backend's hierarchical reduce-scatter and all-gather phases, for ranks on
 * several nodes (comm.c states the algorithms, when they are chosen, and their traffic, which
 * the statistics count; threads.c runs the same ones over shared memory).
 *
 * Everything is point-to-point; between two ranks of one node Open MPI carries it over its
 * shared-memory transport, between nodes over the network. The reduce-scatter goes segment by
 * segment (at most segment_bytes of every block at a time, so its scratch stays bounded): in each
 * segment the ranks of node j send their contributions to the block's stand-in on node j
 * (zero__node_member), which adds them in rank order to the partial received from node j-1's
 * stand-in (fp32 for fp16/bf16: zero__reduce_partial) and sends the result on to node j+1, or,
 * on the last node, rounds it and sends it to the block's owner. Every rank posts a segment's
 * receives of contributions and partials before it waits for anything, and the waits only go
 * from one node to the next, so the chain cannot deadlock; a segment's requests all complete
 * before the next segment starts (so each pair of ranks has at most one kind of message in
 * flight, matched in posting order under one tag).
 *
 * Not here: the flat paths (mpi_p2p.c, mpi_shm.c), the agreement (mpi_agree.c). Invariant: every
 * call follows a passed agreement, so all ranks take the same path with the same counts.
 */
#include "mpi_internal.h"

#include <string.h>

/* Blocks this rank stands in for on its node, in block order. */
static int proxied_blocks(const zero_comm_t *comm, int *out) {
    const int me = comm->rank, j = comm->node_of[me];
    int m = 0;
    for (int b = 0; b < comm->size; b++)
        if (zero__node_member(comm, j, comm->local_of[b]) == me) out[m++] = b;
    return m;
}

zero_status_t zero__mpi_hier_reduce_scatter(mpi_comm_t *c, const zero__coll_args_t *a,
                                            const char *send, char *out, double deadline) {
    const zero_comm_t *comm = &c->super;
    const int n = comm->size, me = comm->rank, N = comm->node_count, i = comm->node_of[me];
    const int L = comm->node_size[i], first = comm->node_first[i];
    const size_t es = zero_dtype_size(a->dtype), acc = zero__reduce_acc_size(a->dtype);
    const size_t *off = c->block_off, *len = c->block_len;
    const char *name = zero_coll_name(a->coll);
    int mine[n];
    const int P = proxied_blocks(comm, mine);
    size_t seg = c->segment_bytes / acc, max_len = 0;
    for (int b = 0; b < n; b++) max_len = ZERO_MAX(max_len, len[b]);
    /* per stand-in block: L - 1 contributions, the partial in, the partial out */
    const size_t per_block = seg * ((size_t)(L - 1) * es + 2 * acc);
    char *scratch = NULL;
    if (P && max_len) {
        scratch = zero_mem_alloc(c->mem, ZERO_MEM_COMM, (size_t)P * per_block, 64);
        if (!scratch)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "%s on rank %d: cannot allocate %zu bytes of scratch for the "
                               "partial sums of its node",
                               name, me, (size_t)P * per_block);
    }
#define CONTRIB(p, k) (scratch + (size_t)(p)*per_block + (size_t)(k)*seg * es)
#define PART_IN(p) (scratch + (size_t)(p)*per_block + (size_t)(L - 1) * seg * es)
#define PART_OUT(p) (PART_IN(p) + seg * acc)
    const void *in[L];
    const int last = zero__node_member(comm, N - 1, comm->local_of[me]);
    zero_status_t st = ZERO_OK;
    for (size_t base = 0; base < max_len && !st; base += seg) {
        c->nreq = 0;
        /* 1. receives of my blocks' contributions and partials, 2. my contributions out */
        for (int p = 0; p < P && !st; p++) {
            const int b = mine[p];
            if (len[b] <= base) continue;
            const size_t e = ZERO_MIN(seg, len[b] - base);
            for (int k = 0, q = 0; k < L && !st; k++) {
                const int u = comm->node_ranks[first + k];
                if (u == me) continue;
                st = zero__mpi_post_transfer(c, 1, CONTRIB(p, q++), e * es, u, TAG_REDUCE, name);
            }
            if (!st && i > 0)
                st = zero__mpi_post_transfer(c, 1, PART_IN(p), e * acc,
                                             zero__node_member(comm, i - 1, comm->local_of[b]),
                                             TAG_REDUCE, name);
        }
        for (int b = 0; b < n && !st; b++) {
            const int to = zero__node_member(comm, i, comm->local_of[b]);
            if (to == me || len[b] <= base) continue;
            const size_t e = ZERO_MIN(seg, len[b] - base);
            st = zero__mpi_post_transfer(c, 0, (void *)(send + (off[b] + base) * es), e * es, to,
                                         TAG_REDUCE, name);
        }
        if (!st) st = zero__mpi_reqs_wait(c, a, deadline, 0);
        if (st) break;
        /* 3. the partials: this node's ranks in rank order after the previous node's partial;
         * on to the next node, or rounded to the owner */
        c->nreq = 0;
        for (int p = 0; p < P && !st; p++) {
            const int b = mine[p];
            if (len[b] <= base) continue;
            const size_t e = ZERO_MIN(seg, len[b] - base);
            for (int k = 0, q = 0; k < L; k++) {
                const int u = comm->node_ranks[first + k];
                in[k] = u == me ? (const void *)(send + (off[b] + base) * es) : CONTRIB(p, q++);
            }
            zero__reduce_partial(PART_OUT(p), i > 0 ? PART_IN(p) : NULL, in, L, e, a->dtype, a->op);
            if (i + 1 < N) {
                st = zero__mpi_post_transfer(c, 0, PART_OUT(p), e * acc,
                                             zero__node_member(comm, i + 1, comm->local_of[b]),
                                             TAG_REDUCE, name);
            } else if (b == me) {
                zero__reduce_round(out + base * es, PART_OUT(p), e, a->dtype);
            } else {
                zero__reduce_round(PART_OUT(p), PART_OUT(p), e, a->dtype);
                st = zero__mpi_post_transfer(c, 0, PART_OUT(p), e * es, b, TAG_REDUCE, name);
            }
        }
        /* 4. my block's result from the last node's stand-in */
        if (!st && last != me && len[me] > base)
            st = zero__mpi_post_transfer(c, 1, out + base * es, ZERO_MIN(seg, len[me] - base) * es,
                                         last, TAG_REDUCE, name);
        if (!st) st = zero__mpi_reqs_wait(c, a, deadline, 0);
    }
#undef PART_OUT
#undef PART_IN
#undef CONTRIB
    if (st) {
        zero__mpi_reqs_abandon(c);
        if (c->leaked) return st; /* MPI may still write into the scratch: keep it */
    }
    zero_mem_free(scratch);
    return st;
}

zero_status_t zero__mpi_hier_all_gather(mpi_comm_t *c, const zero__coll_args_t *a, const char *mine,
                                        char *recv, double deadline) {
    const zero_comm_t *comm = &c->super;
    const int n = comm->size, me = comm->rank, N = comm->node_count, i = comm->node_of[me];
    const size_t es = zero_dtype_size(a->dtype);
    const size_t *off = c->block_off, *len = c->block_len;
    const char *name = zero_coll_name(a->coll);
    zero_status_t st = ZERO_OK;
    /* 1. between nodes: my block to my counterpart on every other node; theirs to me */
    c->nreq = 0;
    for (int x = 0; x < n && !st; x++)
        if (comm->node_of[x] != i && zero__node_member(comm, i, comm->local_of[x]) == me && len[x])
            st =
                zero__mpi_post_transfer(c, 1, recv + off[x] * es, len[x] * es, x, TAG_GATHER, name);
    for (int j = 0; j < N && !st; j++)
        if (j != i && len[me])
            st = zero__mpi_post_transfer(c, 0, (void *)mine, len[me] * es,
                                         zero__node_member(comm, j, comm->local_of[me]), TAG_GATHER,
                                         name);
    if (!st && len[me] && recv + off[me] * es != mine)
        memcpy(recv + off[me] * es, mine, len[me] * es);
    if (!st) st = zero__mpi_reqs_wait(c, a, deadline, 0);
    /* 2. inside the node: every block to every other rank of the node from the one that holds
     * it (blocks in order on both sides, so a pair's messages match in order) */
    if (!st) c->nreq = 0;
    for (int x = 0; x < n && !st; x++) {
        if (!len[x]) continue;
        const int holder =
            comm->node_of[x] == i ? x : zero__node_member(comm, i, comm->local_of[x]);
        if (holder != me) {
            st = zero__mpi_post_transfer(c, 1, recv + off[x] * es, len[x] * es, holder, TAG_GATHER,
                                         name);
            continue;
        }
        for (int k = 0; k < comm->node_size[i] && !st; k++) {
            const int u = comm->node_ranks[comm->node_first[i] + k];
            if (u != me)
                st = zero__mpi_post_transfer(c, 0, recv + off[x] * es, len[x] * es, u, TAG_GATHER,
                                             name);
        }
    }
    if (!st) st = zero__mpi_reqs_wait(c, a, deadline, 0);
    if (st) zero__mpi_reqs_abandon(c);
    return st;
}
