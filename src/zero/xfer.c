/* xfer.c — every collective the engine posts, and the formula of what a step should send.
 *
 * The rest of src/zero never calls the comm API: parameter gathers (stage-3 fetch windows, the
 * after-step gather), gradient reductions (bucketed and direct reduce-scatters, stage 0's
 * gradient all-gather), the step's control exchange and the checks (fingerprint, replicas) all
 * come through here, over a partition group (engine_internal.h). That makes this file the one
 * place that counts what the engine sends, by kind and by collective, and the place where a
 * quantized or hierarchical variant of a collective plugs in.
 *
 * Counting: bytes this rank sends, as the comm layer counts them (zero_comm_coll_bytes: (n - 1)
 * x count x element size for a flat reduce-scatter or all-gather over n ranks; the hierarchical
 * algorithms on several nodes send other amounts, which depend on the rank's place). Counted
 * when posted; a step that fails is not reported. Checks (ZERO__XFER_CHECK) run between steps and
 * are not part of a step.
 *
 * Not here: what is sent when (buckets.c, fetch.c, step.c), and the buffers.
 * Invariants: group 0 is the engine's world, a private split of the caller's communicator, so
 * the engine's collectives queue behind nobody else's; every other group is a split of it.
 */
#include "engine_internal.h"

#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"params", "grads", "control"};
_Static_assert(ZERO_ARRAY_LEN(kind_names) == ZERO_XFER_KIND_COUNT, "xfer kind name table");

const char *zero_xfer_kind_name(zero_xfer_kind_t kind) {
    return (unsigned)kind < ZERO_XFER_KIND_COUNT ? kind_names[kind] : "?";
}

/* ------------------------------------------------------------------------------ groups */

/* Ranks of comm on this rank's node. */
static int local_ranks(const zero_comm_t *comm) {
    const int me = zero_comm_node_of(comm, zero_comm_rank(comm));
    int local = 0;
    for (int r = 0; r < zero_comm_size(comm); r++) local += zero_comm_node_of(comm, r) == me;
    return local;
}

zero_status_t zero__xfer_world_init(zero_engine_t *eng, zero_comm_t *parent) {
    zero__group_t *g = &eng->groups[0];
    memset(g, 0, sizeof *g);
    g->size = g->local = g->copies = 1;
    eng->group_count = 1;
    if (parent && zero_comm_size(parent) > 1) {
        /* A private communicator: our posted reduce-scatters and gathers queue behind nobody
         * else's collectives. */
        zero_status_t st = zero_comm_split(parent, 0, zero_comm_rank(parent), &g->comm);
        if (st) return st;
        g->size = zero_comm_size(g->comm);
        g->rank = zero_comm_rank(g->comm);
        g->local = local_ranks(g->comm);
    }
    eng->world = g->size;
    eng->rank = g->rank;
    return ZERO_OK;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Group g's copy numbering from every world rank's color: copies ordered by color, group ranks
 * by world rank (the split's key). ZERO_ERR_INVALID_ARG when the groups differ in size. */
static zero_status_t number_copies(zero_engine_t *eng, zero__group_t *g, const int32_t *colors) {
    const int W = eng->world;
    int32_t *sorted = malloc((size_t)W * sizeof *sorted);
    int *members = calloc((size_t)W, sizeof *members);
    g->copy_of = malloc((size_t)W * sizeof *g->copy_of);
    g->grank_of = malloc((size_t)W * sizeof *g->grank_of);
    zero_status_t st = ZERO_OK;
    if (!sorted || !members || !g->copy_of || !g->grank_of) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory for a partition group");
        goto done;
    }
    memcpy(sorted, colors, (size_t)W * sizeof *sorted);
    qsort(sorted, (size_t)W, sizeof *sorted, cmp_i32);
    int distinct = 0;
    for (int w = 0; w < W; w++)
        if (w == 0 || sorted[w] != sorted[w - 1]) sorted[distinct++] = sorted[w];
    for (int w = 0; w < W; w++) { /* world rank order: the group rank is the members before */
        int c = 0;
        while (sorted[c] != colors[w]) c++;
        g->copy_of[w] = c;
        g->grank_of[w] = members[c]++;
    }
    for (int c = 0; c < distinct && !st; c++)
        if (members[c] != g->size)
            st = zero__error(ZERO_ERR_INVALID_ARG,
                             "engine: partition group color %d has %d ranks and color %d has %d "
                             "(expected groups of equal size, e.g. color = rank %% ep)",
                             (int)sorted[c], members[c], g->color, g->size);
    g->copy = g->copy_of[eng->rank];
    g->copies = distinct;
done:
    free(sorted);
    free(members);
    return st;
}

zero_status_t zero__xfer_group_split(zero_engine_t *eng, int color, int *group_out) {
    if (eng->group_count == ZERO__GROUP_MAX)
        return zero__error(ZERO_ERR_INVALID_ARG, "engine: at most %d partition groups",
                           ZERO__GROUP_MAX);
    if (color < 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "engine: partition group color %d is invalid (expected >= 0)", color);
    zero__group_t g;
    memset(&g, 0, sizeof g);
    g.size = g.local = g.copies = 1;
    g.color = color;
    zero_status_t st = ZERO_OK;
    if (eng->groups[0].comm) {
        int32_t *colors = malloc((size_t)eng->world * sizeof *colors), mine = color;
        if (!colors)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory for a group split");
        st = zero__xfer_gather(eng, &eng->groups[0], ZERO__XFER_CHECK, &mine, colors, 1,
                               ZERO_DTYPE_INT32, NULL);
        if (!st) st = zero_comm_split(eng->groups[0].comm, color, eng->rank, &g.comm);
        if (!st) {
            g.size = zero_comm_size(g.comm);
            g.rank = zero_comm_rank(g.comm);
            g.local = local_ranks(g.comm);
            st = number_copies(eng, &g, colors); /* every rank sees the same sizes */
        }
        free(colors);
    }
    if (st) {
        zero_comm_free(g.comm);
        free(g.copy_of);
        free(g.grank_of);
        return st;
    }
    eng->groups[eng->group_count] = g;
    *group_out = eng->group_count++;
    return ZERO_OK;
}

void zero__xfer_groups_free(zero_engine_t *eng) {
    for (int i = 0; i < eng->group_count; i++) {
        zero_comm_free(eng->groups[i].comm);
        free(eng->groups[i].copy_of);
        free(eng->groups[i].grank_of);
    }
    eng->group_count = 0;
}

/* ------------------------------------------------------------------------------ collectives */

uint64_t zero__xfer_bytes(const zero__group_t *g, zero_coll_t coll, size_t n, zero_dtype_t dt,
                          int inter) {
    if (!g->comm || g->size == 1) return 0;
    uint64_t sent = 0, inter_sent = 0;
    zero_comm_coll_bytes(g->comm, coll, n, dt, &sent, &inter_sent);
    return inter ? inter_sent : sent;
}

static void count(zero_engine_t *eng, const zero__group_t *g, zero__xfer_kind_t kind,
                  zero_coll_t coll, size_t n, zero_dtype_t dt) {
    if (kind == ZERO__XFER_CHECK) return;
    const uint64_t bytes = zero__xfer_bytes(g, coll, n, dt, 0);
    eng->xfer.sent[kind] += bytes;
    eng->xfer.sent_coll[coll] += bytes;
    eng->xfer.inter_sent += zero__xfer_bytes(g, coll, n, dt, 1);
}

zero_status_t zero__xfer_gather(zero_engine_t *eng, const zero__group_t *g, zero__xfer_kind_t kind,
                                const void *send, void *recv, size_t n, zero_dtype_t dt,
                                zero_comm_request_t **req) {
    count(eng, g, kind, ZERO_COLL_ALL_GATHER, n, dt);
    if (req) return zero_comm_all_gather_post(send, recv, n, dt, g->comm, req);
    return zero_comm_all_gather(send, recv, n, dt, g->comm);
}

/* ------------------------------------------------------------------------------ qwZ */

uint64_t zero__xfer_param_wire_bytes(const zero_engine_t *eng, const zero__unit_t *un) {
    if (zero__fp8w_unit(eng, un)) return zero__fp8w_wire_bytes(eng, un);
    return eng->pol.quantize_weights ? zero__q8_bytes(un->shard_count)
                                     : (uint64_t)un->shard_count * eng->ce;
}

/* With qwZ each rank's part of the gather is its quantized shard, Q = zero__q8_bytes(S) bytes,
 * and the n parts land at the END of un->full (P ce bytes): Q <= S ce (S >= 16 elements, ce >=
 * 2), so they fit, and rank r's dequantized elements [r S, (r + 1) S) end at or before where
 * rank r + 1's part begins (P ce - (n - r - 1) Q >= (r + 1) S ce). The wait dequantizes rank
 * by rank in order, each part first copied into qsend (free once the gather has landed): no
 * part is overwritten before it is read, and no buffer beyond the unit's own is needed but the
 * Q-byte send buffer. */
static unsigned char *qwz_recv(const zero_engine_t *eng, const zero__unit_t *un) {
    const size_t Q = zero__q8_bytes(un->shard_count);
    return (unsigned char *)un->full + un->padded_count * eng->ce - (size_t)un->grp->size * Q;
}

/* With fp8 weights each rank's part is its packed shard (fp8w.c), W bytes: qsend holds this
 * rank's part and then the n parts received, unpacked into un->full at the wait. */
static zero_status_t gather_fp8w(zero_engine_t *eng, zero__unit_t *un, const void *shard) {
    const size_t W = zero__fp8w_wire_bytes(eng, un), n = (size_t)un->grp->size;
    ZERO_ASSERT(!un->qsend);
    un->qsend = zero__pool_take(eng, &eng->qpool, ZERO_MEM_COMM, (n + 1) * W);
    if (!un->qsend)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "no memory for the fp8 gather of unit '%s' (%zu bytes)", un->name,
                           (n + 1) * W);
    unsigned char *q = un->qsend;
    zero__fp8w_pack(eng, un, un->grp->rank, shard, q);
    zero_status_t st = zero__xfer_gather(eng, un->grp, ZERO_XFER_PARAMS, q, q + W, W,
                                         ZERO_DTYPE_UINT8, &un->gather);
    if (st) {
        zero__pool_give(&eng->qpool, un->qsend);
        un->qsend = NULL;
    }
    return st;
}

zero_status_t zero__xfer_gather_params(zero_engine_t *eng, zero__unit_t *un, const void *shard) {
    const zero_dtype_t dt = eng->params.compute_dtype;
    if (zero__fp8w_unit(eng, un) && un->grp->size > 1) return gather_fp8w(eng, un, shard);
    if (!eng->pol.quantize_weights || un->grp->size == 1)
        return zero__xfer_gather(eng, un->grp, ZERO_XFER_PARAMS, shard, un->full, un->shard_count,
                                 dt, &un->gather);
    const size_t S = un->shard_count, Q = zero__q8_bytes(S);
    ZERO_ASSERT(Q <= S * eng->ce && !un->qsend);
    un->qsend = zero__pool_take(eng, &eng->qpool, ZERO_MEM_COMM, Q);
    if (!un->qsend)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "no memory for the quantized shard of unit '%s' (%zu bytes)", un->name,
                           Q);
    zero__q8_quantize(un->qsend, shard, dt, S, eng->params.threads);
    zero_status_t st = zero__xfer_gather(eng, un->grp, ZERO_XFER_PARAMS, un->qsend,
                                         qwz_recv(eng, un), Q, ZERO_DTYPE_UINT8, &un->gather);
    if (st) {
        zero__pool_give(&eng->qpool, un->qsend);
        un->qsend = NULL;
    }
    return st;
}

zero_status_t zero__xfer_gather_params_wait(zero_engine_t *eng, zero__unit_t *un) {
    zero_status_t st = zero_comm_wait(un->gather);
    un->gather = NULL;
    if (!un->qsend) return st;
    if (!st && zero__fp8w_unit(eng, un)) {
        const size_t W = zero__fp8w_wire_bytes(eng, un);
        for (int r = 0; r < un->grp->size; r++)
            zero__fp8w_unpack(eng, un, r, (unsigned char *)un->qsend + (size_t)(r + 1) * W,
                              zero__elem(un->full, (size_t)r * un->shard_count, eng->ce));
    } else if (!st) {
        const size_t S = un->shard_count, Q = zero__q8_bytes(S);
        const unsigned char *recv = qwz_recv(eng, un);
        for (int r = 0; r < un->grp->size; r++) {
            memcpy(un->qsend, recv + (size_t)r * Q, Q);
            zero__q8_dequantize(zero__elem(un->full, (size_t)r * S, eng->ce),
                                eng->params.compute_dtype, un->qsend, S, eng->params.threads);
        }
    }
    zero__pool_give(&eng->qpool, un->qsend);
    un->qsend = NULL;
    return st;
}

zero_status_t zero__xfer_reduce_scatter(zero_engine_t *eng, const zero__group_t *g,
                                        zero__xfer_kind_t kind, const void *send, void *recv,
                                        size_t n, zero_dtype_t dt, zero_comm_request_t **req) {
    count(eng, g, kind, ZERO_COLL_REDUCE_SCATTER, n, dt);
    return zero_comm_reduce_scatter_post(send, recv, n, dt, ZERO_OP_SUM, g->comm, req);
}

zero_status_t zero__xfer_all_to_all(zero_engine_t *eng, const zero__group_t *g,
                                    zero__xfer_kind_t kind, const void *send, void *recv, size_t n,
                                    zero_dtype_t dt) {
    count(eng, g, kind, ZERO_COLL_ALL_TO_ALL, n, dt);
    return zero_comm_all_to_all(send, recv, n, dt, g->comm);
}

/* ------------------------------------------------------------------------------ qgZ */

int zero__xfer_qgz_group(const zero_engine_t *eng, const zero__group_t *g) {
    return eng->qgz_on && g == &eng->groups[0];
}

uint64_t zero__xfer_grad_bytes(const zero_engine_t *eng, const zero__unit_t *un, int inter) {
    const zero__group_t *g = un->grp;
    const size_t S = un->shard_count;
    const zero_dtype_t c = eng->params.compute_dtype;
    if (un->slots > 1) /* one all-to-all of S elements per block for each slot (buckets.c) */
        return (uint64_t)un->slots * zero__xfer_bytes(g, ZERO_COLL_ALL_TO_ALL, S, c, inter);
    if (!zero__xfer_qgz_group(eng, g))
        return zero__xfer_bytes(g, ZERO_COLL_REDUCE_SCATTER, S, c, inter);
    uint64_t sent = 0, inter_sent = 0;
    zero__qgz_bytes(&eng->qgz, zero__q4_bytes(S), &sent, &inter_sent);
    return inter ? inter_sent : sent;
}

zero_status_t zero__xfer_qgz_post(zero_engine_t *eng, zero__bucket_t *b, const void *send,
                                  void *recv, const size_t *seg, int nseg) {
    const size_t W = zero__qgz_wire_bytes(seg, nseg);
    const size_t need = zero__qgz_scratch_bytes(&eng->qgz, seg, nseg);
    if (need > b->qscratch_bytes) { /* the slot's last call has landed: nothing reads it */
        zero_mem_free(b->qscratch);
        b->qscratch_bytes = 0;
        b->qscratch = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, need, 64);
        if (!b->qscratch)
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine: no memory for the int4 reduce-scatter's scratch (%zu "
                               "bytes)",
                               need);
        b->qscratch_bytes = need;
    }
    uint64_t sent = 0, inter_sent = 0;
    zero__qgz_bytes(&eng->qgz, W, &sent, &inter_sent);
    eng->xfer.sent[ZERO_XFER_GRADS] += sent;
    eng->xfer.sent_coll[ZERO_COLL_ALL_TO_ALL] += sent;
    eng->xfer.inter_sent += inter_sent;
    /* scale 1: the sum, as the plain reduce-scatter gives (the step takes the mean) */
    zero_status_t st =
        zero__qgz_post(&b->qop, &eng->qgz, send, recv, seg, nseg, eng->params.compute_dtype, 1.0f,
                       b->qscratch, eng->params.threads);
    if (st)
        zero__qgz_op_clear(&b->qop);
    else
        b->qgz = 1;
    return st;
}

zero_status_t zero__xfer_max(zero_engine_t *eng, const zero__group_t *g, int32_t *buf, size_t n) {
    (void)eng; /* checks only: not counted */
    return zero_comm_all_reduce(buf, buf, n, ZERO_DTYPE_INT32, ZERO_OP_MAX, g->comm);
}

zero_status_t zero__xfer_statuses(zero_engine_t *eng, zero__xfer_kind_t kind, zero_status_t mine,
                                  int *bad, zero_status_t *theirs) {
    *bad = -1;
    *theirs = ZERO_OK;
    int32_t *all = malloc((size_t)eng->world * sizeof *all);
    if (!all) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (statuses)");
    const int32_t m = (int32_t)mine;
    zero_status_t st =
        zero__xfer_gather(eng, &eng->groups[0], kind, &m, all, sizeof m, ZERO_DTYPE_UINT8, NULL);
    for (int r = 0; !st && r < eng->world && *bad < 0; r++)
        if (all[r]) {
            *bad = r;
            *theirs = (zero_status_t)all[r];
        }
    free(all);
    return st;
}

zero_status_t zero__xfer_wait(zero_comm_request_t *req) { return zero_comm_wait(req); }

/* ------------------------------------------------------------------------------ the step */

void zero__xfer_end_step(zero_engine_t *eng) {
    zero__xfer_counts_t *x = &eng->xfer;
    memcpy(x->last_sent, x->sent, sizeof x->sent);
    memcpy(x->last_sent_coll, x->sent_coll, sizeof x->sent_coll);
    memset(x->sent, 0, sizeof x->sent);
    memset(x->sent_coll, 0, sizeof x->sent_coll);
    x->last_inter_sent = x->inter_sent;
    x->last_rs_bytes = x->rs_bytes;
    x->last_gather_bytes = x->gather_bytes;
    x->last_rs_inter_bytes = x->rs_inter_bytes;
    x->last_gather_inter_bytes = x->gather_inter_bytes;
    x->inter_sent = x->rs_bytes = x->gather_bytes = x->rs_inter_bytes = x->gather_inter_bytes = 0;
    x->have_last = 1;
}

/* The control record of step.c: norm partial, schedule hash and length, overflow flag, the
 * status of a parameter shard lost at a fetch, step; with exact units (zero_engine_add_unit_in)
 * the rank's exact sum of squares after it. */
static uint64_t control_bytes(const zero_engine_t *eng) {
    return ZERO__CONTROL_BYTES + (eng->exact_units ? ZERO__CONTROL_EXACT_BYTES : 0);
}

/* What the last completed step should have sent, per kind (bytes from this rank). Each unit u
 * of group g_u, shard S_u, with RS(g, S, dtype) and AG(g, S, dtype) the bytes this rank sends in
 * a reduce-scatter / all-gather of S elements per rank over g (zero__xfer_bytes: (n_u - 1) x S x
 * element size flat; the hierarchical algorithms' amounts on several nodes), c the compute dtype,
 * a the accumulator's:
 *   grads    RS(g_u, S_u, c) per grads_done (one reduce-scatter of the unit's gradient per
 *            micro-step), or with k_u > 1 source slots k_u A2A(g_u, S_u, c) (an all-to-all of
 *            blocks of S_u elements per slot: (n_u - 1) k_u S_u c), or with qgZ (units of the
 * world) its two int4 all-to-alls, (L - 1) M W_u inside the node and (M - 1) W_u to other nodes,
 * W_u = zero__q4_bytes(S_u) (qgz.h; the bytes are linear in W, each unit being its own segment of a
 * bucket),
 *            + stage 0: AG(g_u, S_u, a) (the reduced gradient all-gathered)
 *            or in 1-bit Adam's compression stage (params.onebit, the last step after
 *            freeze_step) instead of both, per tensor t of a unit of more than one rank,
 *            A2A(g_u, k_t bytes) + AG(g_u, k_t bytes), k_t = 4 + n_t / n_u / 8, n_t the tensor
 *            padded to n_u lcm(n_u, 8) (onebit.c: [scale][sign bits] per chunk)
 *   params   stage 3: AG(g_u, w_u bytes) per fetch window of a non-persistent unit (a fetch
 *            with the unit not held: twice per micro-step for a forward + backward use), where
 *            w_u = c S_u, or with qwZ (n_u > 1) the quantized shard S_u + 4 ceil(S_u / 256); +
 *            AG(g_u, S_u, c) for each unit gathered after the step (stages 1-2: every unit;
 *            stage 3: the persistent ones, never quantized); with hpZ (group H of h ranks) a
 *            unit's first window of the step as above and every later one AG(H, P_u / h, c)
 *   control  AG(world, 32 bytes) (one record per rank per step; 120 with units of
 *            zero_engine_add_unit_in, whose exact sum of squares it carries), + AG(world, 4 bytes)
 * with the optimizer's states on NVMe (every rank's I/O status) Bucketing packs several units'
 * shards into one reduce-scatter; the bytes are linear in the count, so the sum over units is the
 * buckets' bytes. Prefetch changes when a window's gather is posted, not how many: it follows a
 * confirmed fetch sequence only while the calls match it, so no gather is dropped unused (if one
 * ever is, fetch.c logs a warning and the step sends that much more than this). The windows and
 * micro-steps are the last step's (counted as they happen); before the first step, M =
 * grad_accum_steps micro-steps and 2M windows per unit. The same with only the bytes to other nodes
 * when inter is set. */
static void theory(const zero_engine_t *eng, int inter, uint64_t out[ZERO_XFER_KIND_COUNT]) {
    const zero__stage_policy_t pol = eng->pol;
    const zero_dtype_t c = eng->params.compute_dtype, a = eng->params.grad_accum_dtype;
    const uint64_t M = (uint64_t)eng->params.grad_accum_steps;
    uint64_t rs = 0, ag = 0, after = 0;
    for (int i = 0; i < eng->unit_count; i++) {
        const zero__unit_t *u = &eng->units[i];
        const size_t S = u->shard_count;
        rs += M * zero__xfer_grad_bytes(eng, u, inter);
        if (zero__hpz_unit(eng, u))
            ag += zero__xfer_bytes(u->grp, ZERO_COLL_ALL_GATHER,
                                   zero__xfer_param_wire_bytes(eng, u), ZERO_DTYPE_UINT8, inter) +
                  (2 * M - 1) * zero__xfer_bytes(eng->hpz, ZERO_COLL_ALL_GATHER,
                                                 zero__hpz_count(eng, u), c, inter);
        else if (pol.shard_params && !u->persistent)
            ag += 2 * M *
                  zero__xfer_bytes(u->grp, ZERO_COLL_ALL_GATHER,
                                   zero__xfer_param_wire_bytes(eng, u), ZERO_DTYPE_UINT8, inter);
        if (!pol.shard_optim)
            after += zero__xfer_bytes(u->grp, ZERO_COLL_ALL_GATHER, S, a, inter);
        else if (!pol.shard_params || u->persistent)
            after += zero__xfer_bytes(u->grp, ZERO_COLL_ALL_GATHER, S, c, inter);
    }
    if (eng->xfer.have_last) {
        rs = inter ? eng->xfer.last_rs_inter_bytes : eng->xfer.last_rs_bytes;
        ag = inter ? eng->xfer.last_gather_inter_bytes : eng->xfer.last_gather_bytes;
    }
    out[ZERO_XFER_GRADS] = rs + (pol.shard_optim ? 0 : after);
    /* 1-bit Adam's compression stage (the last step was in it): no reduction, the compressed
     * all-reduces of m instead (onebit.c) */
    if (eng->params.onebit && eng->step > eng->params.freeze_step) {
        out[ZERO_XFER_GRADS] = 0;
        for (int i = 0; i < eng->unit_count; i++)
            out[ZERO_XFER_GRADS] += zero__onebit_comm_bytes(eng, &eng->units[i], inter);
    }
    out[ZERO_XFER_PARAMS] = ag + (pol.shard_optim ? after : 0);
    /* + with swapped optimizer states, the step's 4-byte I/O agreement (step.c) */
    const zero__group_t *w = &eng->groups[0];
    out[ZERO_XFER_CONTROL] =
        zero__xfer_bytes(w, ZERO_COLL_ALL_GATHER, control_bytes(eng), ZERO_DTYPE_UINT8, inter) +
        (eng->swap
             ? zero__xfer_bytes(w, ZERO_COLL_ALL_GATHER, sizeof(int32_t), ZERO_DTYPE_UINT8, inter)
             : 0);
}

void zero__xfer_theory(const zero_engine_t *eng, uint64_t out[ZERO_XFER_KIND_COUNT]) {
    theory(eng, 0, out);
}

uint64_t zero__xfer_inter_node_theory(const zero_engine_t *eng) {
    uint64_t out[ZERO_XFER_KIND_COUNT], sum = 0;
    theory(eng, 1, out);
    for (int k = 0; k < ZERO_XFER_KIND_COUNT; k++) sum += out[k];
    return sum;
}
