/* moe_mlp.c — the MoE MLP: router, dispatch, experts one by one, combine, shared experts;
 * forward and backward on the routing kernels (kernels/moe.h) and the linear/GELU kernels.
 *
 * Not here: parameters (borrowed views), LayerNorm and residual (gpt.c), communication.
 * Invariants: slots of expert e are filled 0 .. count_e - 1 (the router hands them out in
 * order), so the experts run on a prefix of their capacity rows (expert_rows); the rows past
 * count_e are zero in the dispatch buffer and in the output gradient, so they add exact zeros to
 * the weight gradients, and their outputs are never read (the combine and the dispatch backward
 * only touch kept slots). count_e <= tokens: a token picks
 * an expert at most once. Per stored layer the forward keeps the router's logits, probabilities,
 * choices, slots and gates, each expert's pre-activation and fp32 output (the combine backward
 * needs it for the gates' gradient) and the shared experts' pre-activations; the dispatched input
 * is rebuilt in backward (a copy, bitwise the same).
 * Expert parallelism (ep > 1, moe_mlp.h): the expert side's buffers are laid out by (local
 * expert j, source p) blocks of cap rows, block j ep + p; the token side's stay (E, cap, C).
 * A layer then also keeps the received input rows (xin: the expert side's dispatch buffer, which
 * backward cannot rebuild without another exchange) and the counts it received. Padding rows
 * (count .. expert_rows - 1 of a block) are zeroed on the expert side, as the ep-1 dispatch and
 * combine backward leave them.
 */
#include "model/moe_mlp.h"

#include "core/core_internal.h"
#include "kernels/kernels.h"
#include "kernels/kernels_lp.h"
#include "kernels/moe.h"
#include "model/carve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* State of one stored layer, kept from its forward to its backward. */
typedef struct moe_layer {
    float *logits, *probs; /* (BT, E) fp32 */
    float *gates;          /* (BT, k) */
    int32_t *idx, *slot;   /* (BT, k) */
    int32_t *counts;       /* (E) */
    void *fch;             /* (E, cap, H) dt: experts' pre-activations */
    float *y;              /* (E, cap, C) fp32: experts' outputs */
    void *sfch;            /* (S, BT, H) dt: shared experts' pre-activations */
    size_t cap;            /* of the last forward */
    /* ep > 1 only */
    void *xin;        /* (E/ep, ep, cap, C) dt: the input rows this rank's experts received */
    int32_t *rcounts; /* (ep, E/ep + 1): from each peer, rows per local expert, then its cap */
} moe_layer_t;

struct zero_moe_mlp {
    zero_moe_config_t m;
    size_t C, H, E, S, tokens, cap_max;
    int k, stored, threads, eval;
    zero_dtype_t dt;
    size_t es;
    moe_layer_t *layers; /* stored entries, owned */
    /* scratch shared by every layer */
    void *buf;     /* (E, cap, C) dt: the dispatched input */
    float *bufw;   /* (E, cap, C) fp32: 16-bit dispatch; the dispatch buffer's gradient */
    float *xw;     /* (BT, C) fp32: widened x */
    float *outw;   /* (BT, C) fp32: combined output; the input's gradient */
    float *tmpw;   /* (BT, C) fp32: a shared expert's output; widened dout */
    void *h, *h2;  /* (max(BT, cap), H) dt: GELU output; its gradient */
    void *dyd;     /* (cap, C) dt: one expert's output gradient, narrowed */
    float *dy;     /* (E, cap, C) fp32 */
    float *dgates; /* (BT, k) */
    float *dlogits;
    void *dlogd; /* (BT, E) fp32 and dt */
    /* expert parallelism (ep > 1): the block's communicator, this rank's place in it, E / ep */
    zero_comm_t *comm; /* borrowed */
    size_t ep, me, El;
    int32_t *scounts;   /* (ep, El + 1) counts message */
    void *sbuf, *rbuf;  /* packed all-to-allv buffers, E cap C fp32 elements each */
    size_t *a2a;        /* send counts, send displs, recv counts, recv displs (ep each, bytes) */
    uint64_t theory;    /* bytes sent to peers, from the counts (zero__moe_mlp_traffic) */
    uint64_t base_sent; /* the communicator's sent bytes at the last reset */
};

#define LP (mm->dt != ZERO_DTYPE_FP32)

static void *at(const zero_moe_mlp_t *mm, const void *base, size_t i) {
    return (char *)(uintptr_t)base + i * mm->es;
}

zero_status_t zero__moe_config_check(const zero_moe_config_t *m, int dim) {
    if (m->experts == 0) return ZERO_OK;
    if (m->experts < 0 || m->experts > 65536)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.experts = %d is invalid (expected 1..65536, or 0 for a dense "
                           "model)",
                           m->experts);
    if (m->top_k != 1 && m->top_k != 2)
        return zero__error(ZERO_ERR_CONFIG, "model.moe.top_k = %d is invalid (expected 1 or 2)",
                           m->top_k);
    if (m->top_k > m->experts)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.top_k = %d exceeds model.moe.experts = %d (expected top_k <= "
                           "experts)",
                           m->top_k, m->experts);
    if (m->every < 1)
        return zero__error(ZERO_ERR_CONFIG, "model.moe.every = %d is invalid (expected >= 1)",
                           m->every);
    const struct {
        const char *key;
        double v;
    } factors[] = {{"capacity_factor", m->capacity_factor},
                   {"eval_capacity_factor", m->eval_capacity_factor}};
    for (size_t i = 0; i < ZERO_ARRAY_LEN(factors); i++)
        if (!isfinite(factors[i].v) || !(factors[i].v > 0.0))
            return zero__error(ZERO_ERR_CONFIG,
                               "model.moe.%s = %g is invalid (expected a finite number > 0)",
                               factors[i].key, factors[i].v);
    if (m->min_capacity < 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.min_capacity = %d is invalid (expected >= 0)",
                           m->min_capacity);
    const struct {
        const char *key;
        float v;
    } coefs[] = {{"aux_loss_coef", m->aux_loss_coef}, {"z_loss_coef", m->z_loss_coef}};
    for (size_t i = 0; i < ZERO_ARRAY_LEN(coefs); i++)
        if (!isfinite(coefs[i].v) || coefs[i].v < 0.0f)
            return zero__error(ZERO_ERR_CONFIG,
                               "model.moe.%s = %g is invalid (expected a finite number >= 0)",
                               coefs[i].key, (double)coefs[i].v);
    if (m->shared_experts < 0 || m->shared_experts > 1024)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.shared_experts = %d is invalid (expected 0..1024)",
                           m->shared_experts);
    if (m->hidden < 0 || m->hidden > 1 << 20)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.hidden = %d is invalid (expected 1..1048576, or 0 for 4 x "
                           "model.dim = %d)",
                           m->hidden, 4 * dim);
    if (m->ep_size < 1 || m->experts % m->ep_size != 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.ep_size = %d is invalid (expected a divisor of "
                           "model.moe.experts = %d)",
                           m->ep_size, m->experts);
    return ZERO_OK;
}

int zero__moe_is_layer(const zero_moe_config_t *m, int l) {
    return m->experts > 0 && m->every > 0 && (l + 1) % m->every == 0;
}

size_t zero__moe_hidden(const zero_moe_config_t *m, int dim) {
    return m->hidden > 0 ? (size_t)m->hidden : 4 * (size_t)dim;
}

size_t zero__moe_capacity_for(const zero_moe_config_t *m, size_t tokens, int eval) {
    size_t cap = 0;
    if (zero__moe_capacity(&cap, tokens, (size_t)m->experts, m->top_k,
                           eval ? m->eval_capacity_factor : m->capacity_factor,
                           (size_t)m->min_capacity, m->drop_tokens))
        return 0;
    return cap;
}

/* One pass of the layout (base NULL: only count bytes). */
static void layout(zero_moe_mlp_t *mm, char *base, size_t *total) {
    const size_t BT = mm->tokens, C = mm->C, H = mm->H, E = mm->E, S = mm->S, k = (size_t)mm->k;
    const size_t EC = E * mm->cap_max, f = sizeof(float), i4 = sizeof(int32_t), e = mm->es;
    size_t off = 0;
    for (int s = 0; s < mm->stored; s++) {
        moe_layer_t tmp, *L = base ? &mm->layers[s] : &tmp;
        zero__carve(base, &off, BT * E, f, &L->logits);
        zero__carve(base, &off, BT * E, f, &L->probs);
        zero__carve(base, &off, BT * k, f, &L->gates);
        zero__carve(base, &off, BT * k, i4, &L->idx);
        zero__carve(base, &off, BT * k, i4, &L->slot);
        zero__carve(base, &off, E, i4, &L->counts);
        zero__carve(base, &off, EC * H, e, &L->fch);
        zero__carve(base, &off, EC * C, f, &L->y);
        zero__carve(base, &off, S * BT * H, e, &L->sfch);
        if (mm->ep > 1) {
            zero__carve(base, &off, EC * C, e, &L->xin);
            zero__carve(base, &off, mm->ep * (mm->El + 1), i4, &L->rcounts);
        }
    }
    zero__carve(base, &off, EC * C, e, &mm->buf);
    zero__carve(base, &off, EC * C, f, &mm->bufw);
    zero__carve(base, &off, BT * C, f, &mm->xw);
    zero__carve(base, &off, BT * C, f, &mm->outw);
    zero__carve(base, &off, BT * C, f, &mm->tmpw);
    const size_t rows =
        BT > mm->cap_max ? BT : mm->cap_max; /* a shared expert's or a routed one's */
    zero__carve(base, &off, rows * H, e, &mm->h);
    zero__carve(base, &off, rows * H, e, &mm->h2);
    zero__carve(base, &off, mm->cap_max * C, e, &mm->dyd);
    zero__carve(base, &off, EC * C, f, &mm->dy);
    zero__carve(base, &off, BT * k, f, &mm->dgates);
    zero__carve(base, &off, BT * E, f, &mm->dlogits);
    zero__carve(base, &off, BT * E, e, &mm->dlogd);
    if (mm->ep > 1) {
        zero__carve(base, &off, mm->ep * (mm->El + 1), i4, &mm->scounts);
        zero__carve(base, &off, EC * C, f, &mm->sbuf);
        zero__carve(base, &off, EC * C, f, &mm->rbuf);
        zero__carve(base, &off, 4 * mm->ep, sizeof(size_t), &mm->a2a);
    }
    *total = off;
}

/* The shape fields of an instance (no memory). */
static void shape(zero_moe_mlp_t *mm, const zero_moe_config_t *m, int dim, size_t tokens,
                  int stored, zero_dtype_t dt) {
    mm->m = *m;
    mm->C = (size_t)dim;
    mm->H = zero__moe_hidden(m, dim);
    mm->E = (size_t)m->experts;
    mm->S = (size_t)m->shared_experts;
    mm->k = m->top_k;
    mm->tokens = tokens;
    mm->stored = stored;
    mm->dt = dt;
    mm->es = zero_dtype_size(dt);
    mm->ep = (size_t)(m->ep_size > 1 ? m->ep_size : 1);
    mm->El = mm->E / mm->ep;
    /* capacity grows with the token count: the largest forward needs the most */
    size_t ct = zero__moe_capacity_for(m, tokens, 0), ce = zero__moe_capacity_for(m, tokens, 1);
    mm->cap_max = ct > ce ? ct : ce;
}

size_t zero__moe_mlp_bytes(const zero_moe_config_t *m, int dim, size_t tokens, int stored,
                           zero_dtype_t dt) {
    if (m->experts <= 0) return 0;
    zero_moe_mlp_t mm;
    memset(&mm, 0, sizeof mm);
    shape(&mm, m, dim, tokens, stored, dt);
    size_t total = 0;
    layout(&mm, NULL, &total);
    return total;
}

zero_status_t zero__moe_mlp_init(zero_moe_mlp_t **out, const zero_moe_config_t *m, int dim,
                                 size_t tokens, int stored, zero_dtype_t dt, int threads,
                                 zero_comm_t *ep_comm, void *mem) {
    *out = NULL;
    zero_status_t st = zero__moe_config_check(m, dim);
    if (st) return st;
    if (m->experts == 0 || stored < 1 || tokens == 0 || !mem)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "moe mlp: %d experts, %d stored layers, %zu tokens (expected >= 1 each) "
                           "and memory",
                           m->experts, stored, tokens);
    const int n = ep_comm ? zero_comm_size(ep_comm) : 1;
    if (n != (m->ep_size > 1 ? m->ep_size : 1))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "moe mlp: model.moe.ep_size = %d but the expert-parallel communicator "
                           "has %d ranks (expected the same)",
                           m->ep_size, n);
    zero_moe_mlp_t *mm = calloc(1, sizeof *mm);
    if (!mm) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "moe mlp: out of memory");
    shape(mm, m, dim, tokens, stored, dt);
    mm->threads = threads < 1 ? 1 : threads;
    mm->layers = calloc((size_t)stored, sizeof *mm->layers);
    if (!mm->layers) {
        free(mm);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "moe mlp: out of memory");
    }
    size_t total = 0;
    layout(mm, mem, &total);
    if (mm->ep > 1) {
        mm->comm = ep_comm;
        mm->me = (size_t)zero_comm_rank(ep_comm);
        zero__moe_mlp_traffic_reset(mm);
    }
    *out = mm;
    return ZERO_OK;
}

void zero__moe_mlp_free(zero_moe_mlp_t *mm) {
    if (!mm) return;
    free(mm->layers);
    free(mm);
}

void zero__moe_mlp_set_eval(zero_moe_mlp_t *mm, int on) { mm->eval = on != 0; }

/* ------------------------------------------------------------------------------ dtype dispatch */

/* out (n, OC) = inp (n, IC) · wᵀ + b; out in fp32 (out_f32) or the compute dtype. */
static void lin_fwd(const zero_moe_mlp_t *mm, void *out, int out_f32, const void *inp,
                    const void *w, const void *b, size_t n, size_t IC, size_t OC) {
    if (LP)
        zero__matmul_forward_lp(out, out_f32 ? ZERO_DTYPE_FP32 : mm->dt, inp, w, b, mm->dt, n, IC,
                                OC, mm->threads);
    else
        zero__matmul_forward(out, inp, w, b, n, IC, OC, mm->threads);
}

/* Linear backward: dinp (n, IC) in dinp_dt (fp32 or the compute dtype) = dout · w, added to its
 * contents when accumulate, else overwritten; dw, db accumulate (db may be NULL). */
static void lin_bwd(const zero_moe_mlp_t *mm, void *dinp, zero_dtype_t dinp_dt, int accumulate,
                    void *dw, void *db, const void *dout, const void *inp, const void *w, size_t n,
                    size_t IC, size_t OC) {
    const int th = mm->threads;
    if (LP) {
        zero__gemm_lp(0, 0, n, IC, OC, dout, OC, w, IC, mm->dt, accumulate, dinp, IC, dinp_dt, th);
        zero__matmul_backward_lp(NULL, mm->dt, dw, db, mm->dt, dout, inp, w, mm->dt, n, IC, OC, th);
        return;
    }
    zero__sgemm(0, 0, n, IC, OC, 1.0f, dout, OC, w, IC, accumulate ? 1.0f : 0.0f, dinp, IC, th);
    zero__matmul_backward(NULL, dw, db, dout, inp, w, n, IC, OC, th);
}

static void gelu_fwd(const zero_moe_mlp_t *mm, void *out, const void *inp, size_t n) {
    if (LP)
        zero__gelu_forward_lp(out, inp, mm->dt, n, mm->threads);
    else
        zero__gelu_forward(out, inp, n, mm->threads);
}

/* dinp = gelu'(inp) * dout (overwrites: the kernels accumulate, so dinp is cleared first). */
static void gelu_bwd(const zero_moe_mlp_t *mm, void *dinp, const void *inp, const void *dout,
                     size_t n) {
    memset(dinp, 0, n * mm->es);
    if (LP)
        zero__gelu_backward_lp(dinp, inp, dout, mm->dt, n, mm->threads);
    else
        zero__gelu_backward(dinp, inp, dout, n, mm->threads);
}

/* mm->buf (E, cap, C) in the compute dtype <- x routed by layer L (the fp32 kernel on widened
 * rows for 16-bit; narrowing them back is exact). */
static void dispatch(zero_moe_mlp_t *mm, const moe_layer_t *L, const void *x, size_t BT) {
    const size_t C = mm->C, E = mm->E;
    if (!LP) {
        zero__moe_dispatch_forward(mm->buf, x, L->idx, L->slot, BT, E, mm->k, L->cap, C);
        return;
    }
    zero__widen(mm->xw, x, BT * C, mm->dt);
    zero__moe_dispatch_forward(mm->bufw, mm->xw, L->idx, L->slot, BT, E, mm->k, L->cap, C);
    zero__narrow(mm->buf, mm->bufw, E * L->cap * C, mm->dt);
}

/* Rows expert e's GEMMs run over: count_e rounded up to a multiple of max(64, cap / 8), at
 * most cap. oneDNN builds (and caches) one primitive per GEMM shape, and the counts change every
 * step: rounding bounds the shapes to about nine per GEMM for a given token count (an exact count
 * would build a primitive on almost every call), for at most an eighth of the capacity of padding
 * rows. */
static size_t expert_rows(size_t count, size_t cap) {
    if (count == 0) return 0;
    size_t q = (cap + 7) / 8;
    if (q < 64) q = 64;
    size_t m = (count + q - 1) / q * q;
    return m < cap ? m : cap;
}

/* ------------------------------------------------------------------------------ experts (ep 1) */

/* One block of an expert's rows: n rows of `in` (compute dtype) through local expert j's
 * GELU MLP; the pre-activation into fch, the fp32 output into out. The same call at every ep
 * (one block per expert at ep 1, per expert and source rank above): the same bits. */
static void expert_block_forward(zero_moe_mlp_t *mm, void *fch, const void *in, float *out,
                                 const zero_moe_weights_t *w, size_t j, size_t n) {
    const size_t C = mm->C, H = mm->H;
    lin_fwd(mm, fch, 0, in, at(mm, w->fc_w, j * H * C), at(mm, w->fc_b, j * H), n, C, H);
    gelu_fwd(mm, mm->h, fch, n * H);
    lin_fwd(mm, out, 1, mm->h, at(mm, w->proj_w, j * C * H), at(mm, w->proj_b, j * C), n, H, C);
}

/* Backward of expert_block_forward: dy the outputs' gradients (compute dtype), din (fp32)
 * receives the input rows' gradients, the weight gradients accumulate at element offset g of
 * gw (a source slot; 0 at ep 1). */
static void expert_block_backward(zero_moe_mlp_t *mm, const void *fch, const void *dy, float *din,
                                  const void *in, const zero_moe_weights_t *w,
                                  const zero_moe_weights_t *gw, size_t j, size_t g, size_t n) {
    const size_t C = mm->C, H = mm->H;
    gelu_fwd(mm, mm->h, fch, n * H); /* bitwise the forward's */
    lin_bwd(mm, mm->h2, mm->dt, 0, at(mm, gw->proj_w, g + j * C * H), at(mm, gw->proj_b, g + j * C),
            dy, mm->h, at(mm, w->proj_w, j * C * H), n, H, C);
    gelu_bwd(mm, mm->h, fch, mm->h2, n * H);
    lin_bwd(mm, din, ZERO_DTYPE_FP32, 0, at(mm, gw->fc_w, g + j * H * C),
            at(mm, gw->fc_b, g + j * H), mm->h, in, at(mm, w->fc_w, j * H * C), n, C, H);
}

/* The experts on mm->buf (dispatched), one block per expert over the rows its tokens filled;
 * fp32 outputs into L->y. */
static void experts_forward(zero_moe_mlp_t *mm, moe_layer_t *L, const zero_moe_weights_t *w) {
    const size_t C = mm->C, H = mm->H, cap = L->cap;
    for (size_t e = 0; e < mm->E; e++) {
        const size_t n = expert_rows((size_t)L->counts[e], cap);
        if (n == 0) continue;
        expert_block_forward(mm, at(mm, L->fch, e * cap * H), at(mm, mm->buf, e * cap * C),
                             L->y + e * cap * C, w, e, n);
    }
}

/* Backward of experts_forward: mm->dy holds the outputs' gradients, mm->buf the rebuilt
 * dispatch; mm->bufw receives the dispatched rows' gradients. */
static void experts_backward(zero_moe_mlp_t *mm, const moe_layer_t *L, const zero_moe_weights_t *w,
                             const zero_moe_weights_t *gw) {
    const size_t C = mm->C, H = mm->H, cap = L->cap;
    for (size_t e = 0; e < mm->E; e++) {
        const size_t n = expert_rows((size_t)L->counts[e], cap);
        if (n == 0) continue;
        const float *dye = mm->dy + e * cap * C;
        const void *dyd = dye;
        if (LP) {
            zero__narrow(mm->dyd, dye, n * C, mm->dt);
            dyd = mm->dyd;
        }
        expert_block_backward(mm, at(mm, L->fch, e * cap * H), dyd, mm->bufw + e * cap * C,
                              at(mm, mm->buf, e * cap * C), w, gw, e, 0, n);
    }
}

/* ------------------------------------------------------------------------------ expert parallelism
 */

/* Rows of the (peer p, local expert j) block: on the token side the rows this rank sends to expert
 * p El + j, on the expert side the rows peer p sends to local expert j. */
static size_t ep_count(const zero_moe_mlp_t *mm, const moe_layer_t *L, int expert_side, size_t p,
                       size_t j) {
    return (size_t)(expert_side ? L->rcounts[p * (mm->El + 1) + j] : L->counts[p * mm->El + j]);
}

/* Between a side's strided buffer of cap-row blocks (token side: block p El + j, the (E, cap, C)
 * layout; expert side: block j ep + p) and a packed all-to-allv buffer (peer by peer, then expert
 * by expert, the filled rows only), row elements of `es` bytes. Fills counts and displs (bytes per
 * peer); strided NULL: only those. */
static void ep_move(const zero_moe_mlp_t *mm, const moe_layer_t *L, int expert_side, int to_packed,
                    size_t es, void *strided, void *packed, size_t *counts, size_t *displs) {
    const size_t row = mm->C * es, ep = mm->ep, El = mm->El;
    size_t off = 0;
    for (size_t p = 0; p < ep; p++) {
        displs[p] = off;
        for (size_t j = 0; j < El; j++) {
            const size_t n = ep_count(mm, L, expert_side, p, j) * row;
            if (strided && n) {
                const size_t blk = expert_side ? j * ep + p : p * El + j;
                char *s = (char *)strided + blk * L->cap * row, *q = (char *)packed + off;
                memcpy(to_packed ? q : s, to_packed ? s : q, n);
            }
            off += n;
        }
        counts[p] = off - displs[p];
    }
}

/* One all-to-allv of filled rows: src on one side (from_tokens: the token side) to dst on the
 * other, elements of es bytes; adds the bytes sent to peers to the theory. */
static zero_status_t ep_exchange(zero_moe_mlp_t *mm, const moe_layer_t *L, int from_tokens,
                                 size_t es, void *src, void *dst) {
    size_t *sc = mm->a2a, *sd = sc + mm->ep, *rc = sd + mm->ep, *rd = rc + mm->ep;
    ep_move(mm, L, !from_tokens, 1, es, src, mm->sbuf, sc, sd);
    ep_move(mm, L, from_tokens, 0, es, NULL, NULL, rc, rd);
    zero_status_t st =
        zero_comm_all_to_allv(mm->sbuf, sc, sd, mm->rbuf, rc, rd, ZERO_DTYPE_UINT8, mm->comm);
    if (st) return st;
    ep_move(mm, L, from_tokens, 0, es, dst, mm->rbuf, rc, rd);
    for (size_t p = 0; p < mm->ep; p++)
        if (p != mm->me) mm->theory += sc[p];
    return ZERO_OK;
}

/* Zero rows count .. expert_rows - 1 of every expert-side block of buf (rows of `width`
 * compute elements): the padding the ep-1 GEMMs see as zeros. */
static void ep_zero_padding(const zero_moe_mlp_t *mm, const moe_layer_t *L, void *buf,
                            size_t width) {
    const size_t row = width * mm->es;
    for (size_t j = 0; j < mm->El; j++)
        for (size_t p = 0; p < mm->ep; p++) {
            const size_t c = ep_count(mm, L, 1, p, j), n = expert_rows(c, L->cap);
            memset((char *)buf + ((j * mm->ep + p) * L->cap + c) * row, 0, (n - c) * row);
        }
}

/* The counts message: to each peer, the rows of each of its experts and this rank's capacity. */
static zero_status_t ep_counts(zero_moe_mlp_t *mm, moe_layer_t *L) {
    const size_t El = mm->El, ep = mm->ep;
    for (size_t p = 0; p < ep; p++) {
        for (size_t j = 0; j < El; j++) mm->scounts[p * (El + 1) + j] = L->counts[p * El + j];
        mm->scounts[p * (El + 1) + El] = (int32_t)L->cap;
    }
    zero_status_t st =
        zero_comm_all_to_all(mm->scounts, L->rcounts, El + 1, ZERO_DTYPE_INT32, mm->comm);
    if (st) return st;
    mm->theory += (ep - 1) * (El + 1) * sizeof(int32_t);
    for (size_t p = 0; p < ep; p++)
        if ((size_t)L->rcounts[p * (El + 1) + El] != L->cap)
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "moe expert parallelism: rank %zu of the block routed with capacity "
                               "%d, this rank (%zu) with %zu (expected every rank of a block to "
                               "forward the same number of tokens)",
                               p, (int)L->rcounts[p * (El + 1) + El], mm->me, L->cap);
    return ZERO_OK;
}

/* The experts of an ep > 1 layer on mm->buf (dispatched): the rows travel to their experts,
 * one GEMM pair per (local expert, source) block, the fp32 outputs travel back into L->y. */
static zero_status_t ep_experts_forward(zero_moe_mlp_t *mm, moe_layer_t *L,
                                        const zero_moe_weights_t *w) {
    const size_t C = mm->C, H = mm->H, cap = L->cap, ep = mm->ep;
    zero_status_t st = ep_counts(mm, L);
    if (!st) st = ep_exchange(mm, L, 1, mm->es, mm->buf, L->xin);
    if (st) return st;
    ep_zero_padding(mm, L, L->xin, C);
    for (size_t j = 0; j < mm->El; j++)
        for (size_t p = 0; p < ep; p++) {
            const size_t n = expert_rows(ep_count(mm, L, 1, p, j), cap), blk = j * ep + p;
            if (n == 0) continue;
            expert_block_forward(mm, at(mm, L->fch, blk * cap * H), at(mm, L->xin, blk * cap * C),
                                 mm->dy + blk * cap * C, w, j, n);
        }
    /* mm->dy holds the expert side's outputs (it is scratch until the backward) */
    return ep_exchange(mm, L, 0, sizeof(float), mm->dy, L->y);
}

/* Backward of ep_experts_forward: mm->dy (token side, fp32) holds the outputs' gradients; on
 * return mm->bufw (token side, fp32) holds the dispatched rows' gradients, and each block's
 * weight gradients are in its source's slot. */
static zero_status_t ep_experts_backward(zero_moe_mlp_t *mm, const moe_layer_t *L,
                                         const zero_moe_weights_t *w,
                                         const zero_moe_weights_t *gw) {
    const size_t C = mm->C, H = mm->H, cap = L->cap, ep = mm->ep, E = mm->E;
    const size_t stride = gw->expert_slot_stride;
    /* the output gradients travel in the compute dtype (the ep-1 GEMMs read them narrowed) */
    void *dy = mm->dy;
    if (LP) {
        zero__narrow(mm->buf, mm->dy, E * cap * C, mm->dt);
        dy = mm->buf;
    }
    zero_status_t st = ep_exchange(mm, L, 1, mm->es, dy, mm->buf);
    if (st) return st;
    ep_zero_padding(mm, L, mm->buf, C);
    for (size_t j = 0; j < mm->El; j++)
        for (size_t p = 0; p < ep; p++) {
            const size_t n = expert_rows(ep_count(mm, L, 1, p, j), cap), blk = j * ep + p;
            if (n == 0) continue;
            /* weight gradients into source p's slot */
            expert_block_backward(mm, at(mm, L->fch, blk * cap * H), at(mm, mm->buf, blk * cap * C),
                                  mm->dy + blk * cap * C, at(mm, L->xin, blk * cap * C), w, gw, j,
                                  p * stride, n);
        }
    return ep_exchange(mm, L, 0, sizeof(float), mm->dy, mm->bufw);
}

void zero__moe_mlp_traffic(const zero_moe_mlp_t *mm, uint64_t *sent, uint64_t *theory) {
    uint64_t s = 0;
    if (mm->ep > 1) {
        zero_comm_stats_t cs;
        zero_comm_get_stats(mm->comm, &cs);
        s = cs.sent_bytes[ZERO_COLL_ALL_TO_ALL] + cs.sent_bytes[ZERO_COLL_ALL_TO_ALLV] -
            mm->base_sent;
    }
    if (sent) *sent = s;
    if (theory) *theory = mm->theory;
}

void zero__moe_mlp_traffic_reset(zero_moe_mlp_t *mm) {
    mm->theory = 0;
    mm->base_sent = 0;
    if (mm->ep > 1) zero__moe_mlp_traffic(mm, &mm->base_sent, NULL);
}

/* ------------------------------------------------------------------------------ forward */

zero_status_t zero__moe_mlp_forward(zero_moe_mlp_t *mm, int s, const zero_moe_weights_t *w,
                                    void *out, const void *x, size_t BT, int32_t *counts,
                                    zero_moe_layer_stats_t *stats) {
    ZERO_ASSERT(s >= 0 && s < mm->stored && BT <= mm->tokens);
    moe_layer_t *L = &mm->layers[s];
    const size_t C = mm->C, H = mm->H, E = mm->E;
    const int k = mm->k;
    L->cap = zero__moe_capacity_for(&mm->m, BT, mm->eval);
    ZERO_ASSERT(L->cap > 0 && L->cap <= mm->cap_max);
    const size_t cap = L->cap;

    lin_fwd(mm, L->logits, 1, x, w->router_w, NULL, BT, C, E);
    size_t dropped = 0;
    float aux = 0.0f, z = 0.0f;
    zero_status_t st = zero__moe_router_forward(L->probs, L->idx, L->slot, L->gates, L->counts,
                                                &dropped, &aux, &z, L->logits, BT, E, k, cap);
    ZERO_ASSERT(st == ZERO_OK); /* the shape was checked at init */
    dispatch(mm, L, x, BT);
    if (mm->ep > 1)
        st = ep_experts_forward(mm, L, w);
    else
        experts_forward(mm, L, w);
    if (st) return st;
    float *ow = LP ? mm->outw : out;
    zero__moe_combine_forward(ow, L->y, L->gates, L->idx, L->slot, BT, E, k, cap, C);
    /* shared experts on every token, added after the routed ones in expert order */
    for (size_t j = 0; j < mm->S; j++) {
        void *sfch = at(mm, L->sfch, j * BT * H);
        lin_fwd(mm, sfch, 0, x, at(mm, w->shared_fc_w, j * H * C), at(mm, w->shared_fc_b, j * H),
                BT, C, H);
        gelu_fwd(mm, mm->h, sfch, BT * H);
        lin_fwd(mm, mm->tmpw, 1, mm->h, at(mm, w->shared_proj_w, j * C * H),
                at(mm, w->shared_proj_b, j * C), BT, H, C);
        for (size_t i = 0; i < BT * C; i++) ow[i] += mm->tmpw[i];
    }
    if (LP) zero__narrow(out, ow, BT * C, mm->dt);
    if (counts) memcpy(counts, L->counts, E * sizeof *counts);
    if (stats) {
        stats->aux_loss = aux;
        stats->z_loss = z;
        stats->dropped = dropped;
        stats->capacity = cap;
    }
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ backward */

zero_status_t zero__moe_mlp_backward(zero_moe_mlp_t *mm, int s, const zero_moe_weights_t *w,
                                     const zero_moe_weights_t *gw, void *dx, const void *dout,
                                     const void *x, size_t BT, float loss_scale) {
    ZERO_ASSERT(s >= 0 && s < mm->stored && BT <= mm->tokens);
    const moe_layer_t *L = &mm->layers[s];
    const size_t C = mm->C, H = mm->H, E = mm->E, cap = L->cap;
    const int k = mm->k;
    const zero_dtype_t F = ZERO_DTYPE_FP32;

    /* combine: the experts' output gradients and the gates' */
    const float *doutw = dout;
    if (LP) {
        zero__widen(mm->tmpw, dout, BT * C, mm->dt);
        doutw = mm->tmpw;
    }
    memset(mm->dy, 0, E * cap * C * sizeof *mm->dy);
    memset(mm->dgates, 0, BT * (size_t)k * sizeof *mm->dgates);
    zero__moe_combine_backward(mm->dy, mm->dgates, doutw, L->y, L->gates, L->idx, L->slot, BT, E, k,
                               cap, C);

    /* experts: bufw receives the dispatch buffer's gradient */
    if (mm->ep > 1) {
        zero_status_t st = ep_experts_backward(mm, L, w, gw);
        if (st) return st;
    } else {
        dispatch(mm, L, x, BT);
        experts_backward(mm, L, w, gw);
    }
    float *dxw = LP ? mm->outw : dx;
    memset(dxw, 0, BT * C * sizeof *dxw);
    zero__moe_dispatch_backward(dxw, mm->bufw, L->idx, L->slot, BT, E, k, cap, C);

    /* router: gates, aux and z losses -> logits -> x and the router weight */
    memset(mm->dlogits, 0, BT * E * sizeof *mm->dlogits);
    zero__moe_router_backward(mm->dlogits, mm->dgates, L->logits, L->probs, L->idx, BT, E, k,
                              mm->m.aux_loss_coef * loss_scale, mm->m.z_loss_coef * loss_scale);
    const void *dl = mm->dlogits;
    if (LP) {
        zero__narrow(mm->dlogd, mm->dlogits, BT * E, mm->dt);
        dl = mm->dlogd;
    }
    lin_bwd(mm, dxw, F, 1, gw->router_w, NULL, dl, x, w->router_w, BT, C, E);

    /* shared experts */
    for (size_t j = 0; j < mm->S; j++) {
        const void *sfch = at(mm, L->sfch, j * BT * H);
        gelu_fwd(mm, mm->h, sfch, BT * H);
        lin_bwd(mm, mm->h2, mm->dt, 0, at(mm, gw->shared_proj_w, j * C * H),
                at(mm, gw->shared_proj_b, j * C), dout, mm->h, at(mm, w->shared_proj_w, j * C * H),
                BT, H, C);
        gelu_bwd(mm, mm->h, sfch, mm->h2, BT * H);
        lin_bwd(mm, dxw, F, 1, at(mm, gw->shared_fc_w, j * H * C), at(mm, gw->shared_fc_b, j * H),
                mm->h, x, at(mm, w->shared_fc_w, j * H * C), BT, C, H);
    }
    if (LP) zero__narrow(dx, dxw, BT * C, mm->dt);
    return ZERO_OK;
}
