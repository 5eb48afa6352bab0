/* qgz.h — ZeRO++ qgZ: a gradient reduce-scatter carried as blockwise int4 (kernels/quant.h) in
 * a two-hop hierarchical all-to-all, qgz.c.
 *
 * The collective: n ranks, each with n blocks of B elements (block r for rank r, the layout of
 * zero_comm_reduce_scatter); rank r receives scale x sum over ranks k of block r of rank k,
 * computed as ZeRO++ does: on M nodes of L consecutive ranks each (rank r = m L + l),
 *   1. every rank quantizes each destination block to int4, ordering them so that local peer
 *      l' gets, as one piece, the M blocks of the ranks {m L + l' : every node m};
 *   2. all-to-all inside the node (a communicator of the node's L ranks);
 *   3. local rank l dequantizes the L contributions to each of its M blocks and sums them in
 *      fp32, in local rank order (= rank order), then re-quantizes the M partial sums to int4;
 *   4. all-to-all between the M ranks of local index l (one per node);
 *   5. dequantizes the M partials of its own block, sums them in node order in fp32, multiplies
 *      by scale and rounds once into the dtype.
 * On one node (M = 1) steps 3's re-quantization and 4 are skipped: the sum of step 3 is the
 * result. Nodes that are not L consecutive ranks each (unequal sizes, or interleaved) run as one
 * node of n ranks (one hop, every block crossing the network once at int4).
 * Every sum has a fixed order, and the communicators only move bytes, so the result is the same
 * bits on every run and on both backends.
 *
 * Blocks are cut into segments (a bucket's units: seg[i] elements each, summing to B), each
 * quantized on its own grid of 256-element blocks: a block's wire size is W = sum_i
 * zero__q4_bytes(seg[i]), linear in the units, as the engine's byte formula needs.
 *
 * Error: with s1_k the int4 scale of rank k's block (max|x| / 7 over its 256 elements) and s2_m
 * that of node m's partial, each element's error before the scaling is at most
 *   sum_m ( sum_{k on m} s1_k / 2 + s2_m / 2 )     (one node: sum_k s1_k / 2)
 * plus the fp32 roundings of the sums, with s2_m <= (sum_{k on m} (max|x_k| + s1_k / 2)) / 7.
 * Non-finite values make their blocks NaN (quant.h), so an overflow reaches the result.
 *
 * Bytes this rank sends per call: (L - 1) M W inside the node and (M - 1) W to other nodes,
 * exactly the all-to-alls' (zero_comm_coll_bytes of ZERO_COLL_ALL_TO_ALL, uint8), which is what
 * the statistics of the two communicators count.
 */
#ifndef ZERO_ZERO_QGZ_H
#define ZERO_ZERO_QGZ_H

#include "zero/comm.h"
#include "zero/core.h"

#include <stdint.h>

typedef struct zero__qgz {
    zero_comm_t *node;  /* owned: this rank's node (NULL when L = 1) */
    zero_comm_t *cross; /* owned: the ranks of this local index, one per node (NULL when M = 1) */
    int n, L, M;        /* ranks, ranks per node, nodes (the hierarchy used, L M = n) */
    int l, m;           /* this rank's local index and node */
} zero__qgz_t;

/* Build the hierarchy over comm (splits it: collective over comm). comm may be NULL (one rank:
 * n = 1). */
zero_status_t zero__qgz_init(zero__qgz_t *q, zero_comm_t *comm);
void zero__qgz_free(zero__qgz_t *q);

/* Wire bytes of one block of the given segments. */
size_t zero__qgz_wire_bytes(const size_t *seg, int nseg);
/* Scratch bytes one call over the given segments needs. */
size_t zero__qgz_scratch_bytes(const zero__qgz_t *q, const size_t *seg, int nseg);
/* Bytes this rank sends in one call with W wire bytes a block: in all, and to other nodes. */
void zero__qgz_bytes(const zero__qgz_t *q, size_t W, uint64_t *sent, uint64_t *inter_sent);

/* One call in flight. Buffers are borrowed until it is done. */
typedef struct zero__qgz_op {
    const zero__qgz_t *q;
    int state; /* 0 idle, 1 node exchange in flight, 2 cross exchange in flight, 3 done,
                * 4 failed (status) */
    zero_status_t status;
    void *recv;
    zero_dtype_t dtype;
    float scale;
    int threads;
    size_t B, W;
    size_t *seg; /* owned copy */
    int nseg;
    unsigned char *qsend, *qrecv, *xsend, *xrecv; /* carved from the scratch */
    float *acc;
    zero_comm_request_t *req;
} zero__qgz_op_t;

/* Start a call: send holds n blocks of B = sum seg elements of dtype (fp32, bf16 or fp16); recv
 * gets B elements of dtype. scratch: zero__qgz_scratch_bytes(q, seg, nseg) bytes, 64-byte aligned.
 * Quantizes and posts the node exchange; the rest happens in zero__qgz_progress. Collective:
 * every rank posts its calls in the same order. */
zero_status_t zero__qgz_post(zero__qgz_op_t *op, const zero__qgz_t *q, const void *send, void *recv,
                             const size_t *seg, int nseg, zero_dtype_t dtype, float scale,
                             void *scratch, int threads);
/* Advance a call: wait = 0 does what has become possible without blocking, wait = 1 finishes
 * it. *done = 1 once recv holds the result. Calls must be advanced in posting order (a later
 * call only after an earlier one has reached state 2 or 3). A failure is returned again by
 * every later call on the op. */
zero_status_t zero__qgz_progress(zero__qgz_op_t *op, int wait, int *done);
/* Release what a call holds (after done, or after a failure). */
void zero__qgz_op_clear(zero__qgz_op_t *op);

/* Blocking form: post and finish (scratch allocated and freed inside, untracked). */
zero_status_t zero__qgz_reduce_scatter(const zero__qgz_t *q, const void *send, void *recv,
                                       const size_t *seg, int nseg, zero_dtype_t dtype, float scale,
                                       int threads);

#endif /* ZERO_ZERO_QGZ_H */
