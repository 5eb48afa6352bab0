/* qgz.c — ZeRO++ qgZ, the int4 hierarchical reduce-scatter (qgz.h states the algorithm, its
 * error bound and its bytes).
 *
 * Built on two communicators split from the caller's: the node's ranks and the ranks of one
 * local index across the nodes. Each exchange is one all-to-all of bytes on one of them, so the
 * comm layer's statistics count exactly the int4 bytes, on both backends, and all arithmetic is
 * here, on the calling thread, in a fixed order: the backends only move bytes, which is why
 * threads and MPI give the same bits. A call is a small state machine (post, node exchange,
 * cross exchange, done) so that an engine can let the exchanges run while it computes and
 * advance the call between its own steps.
 *
 * Not here: when the engine calls it (buckets.c), the wire format (kernels/quant.c).
 */
#include "qgz.h"

#include "core/core_internal.h"
#include "kernels/quant.h"

#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

zero_status_t zero__qgz_init(zero__qgz_t *q, zero_comm_t *comm) {
    memset(q, 0, sizeof *q);
    q->n = comm ? zero_comm_size(comm) : 1;
    q->L = q->n;
    q->M = 1;
    if (q->n == 1) return ZERO_OK;
    const int rank = zero_comm_rank(comm), nodes = zero_comm_node_count(comm);
    /* The two-hop form needs M nodes of L consecutive ranks each. */
    int L = q->n / nodes, regular = q->n % nodes == 0;
    for (int r = 0; regular && r < q->n; r++) regular = zero_comm_node_of(comm, r) == r / L;
    if (regular && nodes > 1) {
        q->L = L;
        q->M = nodes;
    }
    q->l = rank % q->L;
    q->m = rank / q->L;
    zero_status_t st = ZERO_OK;
    if (q->L > 1) st = zero_comm_split(comm, q->m, rank, &q->node);
    if (!st && q->M > 1) st = zero_comm_split(comm, q->l, rank, &q->cross);
    if (st) zero__qgz_free(q);
    return st;
}

void zero__qgz_free(zero__qgz_t *q) {
    zero_comm_free(q->node);
    zero_comm_free(q->cross);
    q->node = q->cross = NULL;
}

size_t zero__qgz_wire_bytes(const size_t *seg, int nseg) {
    size_t W = 0;
    for (int i = 0; i < nseg; i++) W += zero__q4_bytes(seg[i]);
    return W;
}

/* qsend and qrecv (n W each), xsend and xrecv (M W each, with several nodes), acc (B floats). */
size_t zero__qgz_scratch_bytes(const zero__qgz_t *q, const size_t *seg, int nseg) {
    size_t B = 0;
    for (int i = 0; i < nseg; i++) B += seg[i];
    const size_t W = zero__qgz_wire_bytes(seg, nseg);
    const size_t nW = ALIGN64((size_t)q->n * W), MW = q->M > 1 ? ALIGN64((size_t)q->M * W) : 0;
    return 2 * nW + 2 * MW + ALIGN64(B * sizeof(float));
}

void zero__qgz_bytes(const zero__qgz_t *q, size_t W, uint64_t *sent, uint64_t *inter_sent) {
    uint64_t s = 0, x = 0, a = 0, ax = 0;
    if (q->node)
        zero_comm_coll_bytes(q->node, ZERO_COLL_ALL_TO_ALL, (size_t)q->M * W, ZERO_DTYPE_UINT8, &s,
                             &x);
    if (q->cross)
        zero_comm_coll_bytes(q->cross, ZERO_COLL_ALL_TO_ALL, W, ZERO_DTYPE_UINT8, &a, &ax);
    if (sent) *sent = s + a;
    if (inter_sent) *inter_sent = x + ax;
}

/* Quantize the segments of src (B elements of dt) into wire (W bytes). */
static void quantize_block(unsigned char *wire, const void *src, zero_dtype_t dt,
                           const zero__qgz_op_t *op) {
    const size_t es = zero_dtype_size(dt);
    size_t off = 0;
    for (int i = 0; i < op->nseg; i++) {
        zero__q4_quantize(wire, (const char *)src + off * es, dt, op->seg[i], op->threads);
        wire += zero__q4_bytes(op->seg[i]);
        off += op->seg[i];
    }
}

/* op->acc = sum over k (in order) of the dequantized parts[k] (np >= 1). */
static void sum_parts(zero__qgz_op_t *op, const unsigned char *const *parts, int np) {
    size_t off = 0, woff = 0;
    for (int i = 0; i < op->nseg; i++) {
        const size_t S = op->seg[i];
        zero__q4_dequantize(op->acc + off, ZERO_DTYPE_FP32, parts[0] + woff, S, op->threads);
        for (int k = 1; k < np; k++)
            zero__q4_dequantize_add(op->acc + off, parts[k] + woff, S, op->threads);
        off += S;
        woff += zero__q4_bytes(S);
    }
}

/* The result: acc scaled, rounded once into recv. */
static void finish(zero__qgz_op_t *op) {
    if (op->scale != 1.0f)
        for (size_t i = 0; i < op->B; i++) op->acc[i] *= op->scale;
    if (op->dtype == ZERO_DTYPE_FP32)
        memcpy(op->recv, op->acc, op->B * sizeof(float));
    else
        zero__narrow(op->recv, op->acc, op->B, op->dtype);
    op->state = 3;
}

zero_status_t zero__qgz_post(zero__qgz_op_t *op, const zero__qgz_t *q, const void *send, void *recv,
                             const size_t *seg, int nseg, zero_dtype_t dtype, float scale,
                             void *scratch, int threads) {
    memset(op, 0, sizeof *op);
    op->seg = malloc((size_t)(nseg > 0 ? nseg : 1) * sizeof *op->seg);
    if (!op->seg) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "qgZ: out of memory");
    memcpy(op->seg, seg, (size_t)nseg * sizeof *seg);
    op->nseg = nseg;
    op->q = q;
    op->recv = recv;
    op->dtype = dtype;
    op->scale = scale;
    op->threads = threads;
    for (int i = 0; i < nseg; i++) op->B += seg[i];
    op->W = zero__qgz_wire_bytes(seg, nseg);
    const size_t n = (size_t)q->n, M = (size_t)q->M, L = (size_t)q->L, W = op->W;
    unsigned char *p = scratch;
    op->qsend = p;
    p += ALIGN64(n * W);
    op->qrecv = p;
    p += ALIGN64(n * W);
    if (q->M > 1) {
        op->xsend = p;
        p += ALIGN64(M * W);
        op->xrecv = p;
        p += ALIGN64(M * W);
    }
    op->acc = (float *)(void *)p;
    /* rank r = m L + l goes to local peer l, as its m-th piece */
    const size_t es = zero_dtype_size(dtype);
    for (size_t r = 0; r < n; r++)
        quantize_block(op->qsend + ((r % L) * M + r / L) * W, (const char *)send + r * op->B * es,
                       dtype, op);
    op->state = 1;
    if (!q->node) { /* one rank per node: its pieces are all its own */
        memcpy(op->qrecv, op->qsend, n * W);
        return ZERO_OK;
    }
    zero_status_t st =
        zero_comm_all_to_all_post(op->qsend, op->qrecv, M * W, ZERO_DTYPE_UINT8, q->node, &op->req);
    if (st) op->state = 0;
    return st;
}

/* Wait for or test op->req; *landed = 1 when there is none any more. */
static zero_status_t landed(zero__qgz_op_t *op, int wait, int *done) {
    *done = 1;
    if (!op->req) return ZERO_OK;
    zero_status_t st = ZERO_OK;
    if (wait) {
        st = zero_comm_wait(op->req);
    } else {
        st = zero_comm_test(op->req, done);
        if (!*done) return ZERO_OK;
    }
    op->req = NULL;
    return st;
}

static zero_status_t progress(zero__qgz_op_t *op, int wait, int *done) {
    const zero__qgz_t *q = op->q;
    const int L = q->L, M = q->M;
    const size_t W = op->W;
    *done = op->state == 3;
    if (op->state == 1) {
        int ready;
        zero_status_t st = landed(op, wait, &ready);
        if (st || !ready) return st;
        const unsigned char *parts[L > M ? L : M];
        if (M == 1) {
            for (int k = 0; k < L; k++) parts[k] = op->qrecv + (size_t)k * W;
            sum_parts(op, parts, L);
            finish(op);
        } else {
            /* the node's partial of each of my M blocks, re-quantized for its node */
            for (int m = 0; m < M; m++) {
                for (int k = 0; k < L; k++) parts[k] = op->qrecv + ((size_t)k * M + m) * W;
                sum_parts(op, parts, L);
                quantize_block(op->xsend + (size_t)m * W, op->acc, ZERO_DTYPE_FP32, op);
            }
            op->state = 2;
            st = zero_comm_all_to_all_post(op->xsend, op->xrecv, W, ZERO_DTYPE_UINT8, q->cross,
                                           &op->req);
            if (st) return st;
        }
    }
    if (op->state == 2) {
        int ready;
        zero_status_t st = landed(op, wait, &ready);
        if (st || !ready) return st;
        const unsigned char *parts[M];
        for (int m = 0; m < M; m++) parts[m] = op->xrecv + (size_t)m * W;
        sum_parts(op, parts, M);
        finish(op);
    }
    *done = op->state == 3;
    return ZERO_OK;
}

zero_status_t zero__qgz_progress(zero__qgz_op_t *op, int wait, int *done) {
    *done = 0;
    if (op->state == 4)
        return zero__error(op->status, "qgZ: an exchange of this reduce-scatter failed earlier");
    zero_status_t st = progress(op, wait, done);
    if (st) { /* a failed call stays failed */
        op->state = 4;
        op->status = st;
        *done = 0;
    }
    return st;
}

void zero__qgz_op_clear(zero__qgz_op_t *op) {
    if (op->req) (void)zero_comm_wait(op->req);
    free(op->seg);
    memset(op, 0, sizeof *op);
}

zero_status_t zero__qgz_reduce_scatter(const zero__qgz_t *q, const void *send, void *recv,
                                       const size_t *seg, int nseg, zero_dtype_t dtype, float scale,
                                       int threads) {
    const size_t bytes = zero__qgz_scratch_bytes(q, seg, nseg);
    void *scratch = zero_mem_alloc(NULL, ZERO_MEM_COMM, bytes, 64);
    if (!scratch)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "qgZ: no memory for %zu bytes of scratch",
                           bytes);
    zero__qgz_op_t op;
    zero_status_t st =
        zero__qgz_post(&op, q, send, recv, seg, nseg, dtype, scale, scratch, threads);
    int done = 0;
    if (!st) st = zero__qgz_progress(&op, 1, &done);
    zero__qgz_op_clear(&op);
    zero_mem_free(scratch);
    return st;
}
