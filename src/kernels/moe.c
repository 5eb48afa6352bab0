/* moe.c — Mixture-of-Experts routing kernels: top-k router with capacity, its aux and z losses,
 * dispatch and combine, forward and backward (the math and the conventions are in moe.h).
 *
 * Not here: the experts themselves, config keys, model wiring, expert parallelism.
 * Invariants: an expert appears at most once among a token's k choices, so a token's rows land in
 * distinct (expert, slot) cells and every cell is written by at most one (token, choice): the
 * dispatch and combine backward never race on a cell. Sums over experts run in double, in
 * expert order, so results are deterministic.
 */
#include "moe.h"

#include "core/core_internal.h"

#include <math.h>
#include <string.h>

/* logsumexp of a row of E logits, with its max (*mx) and sum of exp(x - max) (*sum), which the
 * softmax divides by. */
static double row_lse(const float *x, size_t E, float *mx, double *sum) {
    float m = x[0];
    for (size_t e = 1; e < E; e++) m = x[e] > m ? x[e] : m;
    double s = 0.0;
    for (size_t e = 0; e < E; e++) s += exp((double)x[e] - (double)m);
    *mx = m;
    *sum = s;
    return (double)m + log(s);
}

static zero_status_t check_shape(size_t E, int k) {
    if (E == 0) return zero__error(ZERO_ERR_INVALID_ARG, "moe: experts is 0, expected >= 1");
    if (k != 1 && k != 2)
        return zero__error(ZERO_ERR_INVALID_ARG, "moe: top_k is %d, expected 1 or 2", k);
    if ((size_t)k > E)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "moe: top_k %d exceeds experts %zu, expected top_k <= experts", k, E);
    return ZERO_OK;
}

zero_status_t zero__moe_capacity(size_t *capacity, size_t T, size_t E, int k,
                                 double capacity_factor, size_t min_capacity, int drop_tokens) {
    if (!capacity) return zero__error(ZERO_ERR_INVALID_ARG, "moe: capacity output is NULL");
    zero_status_t st = check_shape(E, k);
    if (st) return st;
    if (!drop_tokens) {
        *capacity = T > 0 ? T : 1;
        return ZERO_OK;
    }
    if (!(capacity_factor > 0.0) || !isfinite(capacity_factor))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "moe: capacity_factor is %g, expected a finite number > 0",
                           capacity_factor);
    double c = ceil(capacity_factor * (double)T * (double)k / (double)E);
    size_t cap = (size_t)c;
    if (cap < min_capacity) cap = min_capacity;
    if (cap == 0) cap = 1; /* T == 0 with min_capacity 0: a valid, empty buffer shape */
    *capacity = cap;
    return ZERO_OK;
}

zero_status_t zero__moe_router_forward(float *probs, int32_t *expert_idx, int32_t *slot,
                                       float *gates, int32_t *expert_count, size_t *dropped,
                                       float *aux_loss, float *z_loss, const float *logits,
                                       size_t T, size_t E, int k, size_t capacity) {
    zero_status_t st = check_shape(E, k);
    if (st) return st;
    if (capacity == 0)
        return zero__error(ZERO_ERR_INVALID_ARG, "moe: capacity is 0, expected >= 1");
    if (capacity > INT32_MAX)
        return zero__error(ZERO_ERR_INVALID_ARG, "moe: capacity is %zu, expected <= %d", capacity,
                           INT32_MAX);
    if (T > 0 && (!probs || !expert_idx || !slot || !gates || !logits))
        return zero__error(ZERO_ERR_INVALID_ARG, "moe: router got a NULL tensor with T = %zu", T);
    if (!expert_count) return zero__error(ZERO_ERR_INVALID_ARG, "moe: expert_count is NULL");

    double zsum = 0.0;
    for (size_t t = 0; t < T; t++) {
        const float *x = logits + t * E;
        float *p = probs + t * E;
        float mx;
        double sum;
        const double lse = row_lse(x, E, &mx, &sum);
        zsum += lse * lse;
        for (size_t e = 0; e < E; e++) p[e] = (float)(exp((double)x[e] - (double)mx) / sum);
        /* strict > keeps the lowest index among equal probabilities */
        size_t e1 = 0;
        for (size_t e = 1; e < E; e++)
            if (p[e] > p[e1]) e1 = e;
        expert_idx[t * k] = (int32_t)e1;
        if (k == 1) {
            gates[t] = p[e1];
        } else {
            size_t e2 = e1 == 0 ? 1 : 0;
            for (size_t e = e2 + 1; e < E; e++)
                if (e != e1 && p[e] > p[e2]) e2 = e;
            expert_idx[t * 2 + 1] = (int32_t)e2;
            double s = (double)p[e1] + (double)p[e2];
            gates[t * 2] = (float)(p[e1] / s);
            gates[t * 2 + 1] = (float)(p[e2] / s);
        }
    }

    /* slots: all first choices in token order, then all second choices (GShard) */
    memset(expert_count, 0, E * sizeof *expert_count);
    size_t ndrop = 0;
    for (int c = 0; c < k; c++) {
        for (size_t t = 0; t < T; t++) {
            int32_t e = expert_idx[t * k + c];
            if ((size_t)expert_count[e] < capacity) {
                slot[t * k + c] = expert_count[e]++;
            } else {
                slot[t * k + c] = -1;
                ndrop++;
            }
        }
    }
    if (dropped) *dropped = ndrop;

    if (aux_loss) {
        /* E * sum_e f_e P_e = E / T^2 * sum_e n_e * sum_t p[t, e], n_e = #first choices of e */
        double aux = 0.0;
        for (size_t e = 0; e < E && T > 0; e++) {
            size_t n = 0;
            double psum = 0.0;
            for (size_t t = 0; t < T; t++) {
                n += expert_idx[t * k] == (int32_t)e;
                psum += probs[t * E + e];
            }
            aux += (double)n * psum;
        }
        *aux_loss = T > 0 ? (float)(aux * (double)E / ((double)T * (double)T)) : 0.0f;
    }
    if (z_loss) *z_loss = T > 0 ? (float)(zsum / (double)T) : 0.0f;
    return ZERO_OK;
}

void zero__moe_router_backward(float *dlogits, const float *dgates, const float *logits,
                               const float *probs, const int32_t *expert_idx, size_t T, size_t E,
                               int k, float aux_coef, float z_coef) {
    ZERO_ASSERT(E > 0 && (k == 1 || k == 2) && (size_t)k <= E);
    if (T == 0) return;
    ZERO_ASSERT(dlogits && logits && probs && expert_idx);
    /* d aux / d p[t, e] = E f_e / T = E n_e / T^2 (f_e constant) */
    double aux_scale = (double)aux_coef * (double)E / ((double)T * (double)T);
    double zs = 2.0 * (double)z_coef / (double)T;
    /* n_e: first choices per expert (f_e = n_e / T); then the softmax backward per token */
    int32_t n_small[64];
    int32_t *n = n_small;
    int32_t *n_heap = NULL;
    if (E > 64) {
        n_heap = malloc(E * sizeof *n_heap);
        ZERO_ASSERT(n_heap);
        n = n_heap;
    }
    memset(n, 0, E * sizeof *n);
    for (size_t t = 0; t < T; t++) n[expert_idx[t * k]]++;
    for (size_t t = 0; t < T; t++) {
        const float *p = probs + t * E;
        const float *x = logits + t * E;
        float *dx = dlogits + t * E;
        size_t e1 = (size_t)expert_idx[t * k], e2 = k == 2 ? (size_t)expert_idx[t * k + 1] : E;
        double dp1 = 0.0, dp2 = 0.0;
        if (dgates) {
            if (k == 1) {
                dp1 = dgates[t];
            } else {
                double p1 = p[e1], p2 = p[e2], s = p1 + p2;
                double dg1 = dgates[t * 2], dg2 = dgates[t * 2 + 1];
                dp1 = p2 * (dg1 - dg2) / (s * s);
                dp2 = p1 * (dg2 - dg1) / (s * s);
            }
        }
        double dot = 0.0;
        for (size_t e = 0; e < E; e++) {
            double dpe = aux_scale * n[e] + (e == e1 ? dp1 : 0.0) + (e == e2 ? dp2 : 0.0);
            dot += (double)p[e] * dpe;
        }
        /* z: d lse^2 / d x_e = 2 lse p_e; lse recomputed from the logits */
        double lse = 0.0;
        if (z_coef != 0.0f) {
            float mx;
            double sum;
            lse = row_lse(x, E, &mx, &sum);
        }
        for (size_t e = 0; e < E; e++) {
            double dpe = aux_scale * n[e] + (e == e1 ? dp1 : 0.0) + (e == e2 ? dp2 : 0.0);
            double g = (double)p[e] * (dpe - dot) + zs * lse * (double)p[e];
            dx[e] += (float)g;
        }
    }
    free(n_heap);
}

void zero__moe_dispatch_forward(float *buf, const float *x, const int32_t *expert_idx,
                                const int32_t *slot, size_t T, size_t E, int k, size_t C,
                                size_t dim) {
    ZERO_ASSERT(buf && (T == 0 || (x && expert_idx && slot)));
    memset(buf, 0, E * C * dim * sizeof *buf);
    for (size_t t = 0; t < T; t++)
        for (int c = 0; c < k; c++) {
            int32_t e = expert_idx[t * k + c], s = slot[t * k + c];
            if (s < 0) continue;
            ZERO_ASSERT((size_t)e < E && (size_t)s < C);
            memcpy(buf + ((size_t)e * C + (size_t)s) * dim, x + t * dim, dim * sizeof *buf);
        }
}

void zero__moe_dispatch_backward(float *dx, const float *dbuf, const int32_t *expert_idx,
                                 const int32_t *slot, size_t T, size_t E, int k, size_t C,
                                 size_t dim) {
    ZERO_ASSERT(T == 0 || (dx && dbuf && expert_idx && slot));
    for (size_t t = 0; t < T; t++)
        for (int c = 0; c < k; c++) {
            int32_t e = expert_idx[t * k + c], s = slot[t * k + c];
            if (s < 0) continue;
            ZERO_ASSERT((size_t)e < E && (size_t)s < C);
            const float *d = dbuf + ((size_t)e * C + (size_t)s) * dim;
            float *o = dx + t * dim;
            for (size_t j = 0; j < dim; j++) o[j] += d[j];
        }
}

void zero__moe_combine_forward(float *out, const float *y, const float *gates,
                               const int32_t *expert_idx, const int32_t *slot, size_t T, size_t E,
                               int k, size_t C, size_t dim) {
    ZERO_ASSERT(T == 0 || (out && y && gates && expert_idx && slot));
    for (size_t t = 0; t < T; t++) {
        float *o = out + t * dim;
        for (size_t j = 0; j < dim; j++) o[j] = 0.0f;
        for (int c = 0; c < k; c++) {
            int32_t e = expert_idx[t * k + c], s = slot[t * k + c];
            if (s < 0) continue;
            ZERO_ASSERT((size_t)e < E && (size_t)s < C);
            const float *src = y + ((size_t)e * C + (size_t)s) * dim;
            float g = gates[t * k + c];
            for (size_t j = 0; j < dim; j++) o[j] += g * src[j];
        }
    }
}

void zero__moe_combine_backward(float *dy, float *dgates, const float *dout, const float *y,
                                const float *gates, const int32_t *expert_idx, const int32_t *slot,
                                size_t T, size_t E, int k, size_t C, size_t dim) {
    ZERO_ASSERT(T == 0 || (dout && expert_idx && slot));
    for (size_t t = 0; t < T; t++) {
        const float *d = dout + t * dim;
        for (int c = 0; c < k; c++) {
            int32_t e = expert_idx[t * k + c], s = slot[t * k + c];
            if (s < 0) continue;
            ZERO_ASSERT((size_t)e < E && (size_t)s < C);
            size_t off = ((size_t)e * C + (size_t)s) * dim;
            if (dy) {
                ZERO_ASSERT(gates);
                float g = gates[t * k + c];
                for (size_t j = 0; j < dim; j++) dy[off + j] += g * d[j];
            }
            if (dgates) {
                ZERO_ASSERT(y);
                double acc = 0.0;
                for (size_t j = 0; j < dim; j++) acc += (double)d[j] * (double)y[off + j];
                dgates[t * k + c] += (float)acc;
            }
        }
    }
}
