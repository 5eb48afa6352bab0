/* sample.c — greedy, temperature, top-k and top-p sampling, in Hugging Face's order (temperature
 * → top-k → top-p → draw; transformers' _get_logits_processor).
 *
 * Greedy takes the first maximal index (torch.argmax). Top-k keeps every logit >= the k-th
 * largest, so ties at the edge keep more than k (transformers' TopKLogitsWarper). Top-p sorts the
 * kept tokens by ascending probability, accumulates, and drops those whose cumulative probability
 * is <= 1 - top_p, keeping the likeliest always (TopPLogitsWarper); ties are ordered by index so
 * the result does not depend on the sort. The draw walks the kept tokens in index order.
 * Probabilities are exp((l - max) / T) in double, never normalised in place. Not here: repetition
 * penalties, min-p, typical sampling (none is on by default in transformers).
 */
#include "infer/sample.h"

#include "core/core_internal.h"

#include <math.h>
#include <stdlib.h>

static int argmax(const float *l, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* The k-th largest logit (0 < k < V), found by bisection on the value with counting passes:
 * allocation-free, at most ~60 passes, exact (it ends on two adjacent floats). -inf when fewer
 * than k logits are finite (masked tokens): then every token is kept. */
static float kth_largest(const float *l, int V, int k, float hi) {
    float lo = hi;
    for (int i = 0; i < V; i++)
        if (l[i] < lo && l[i] > -INFINITY) lo = l[i];
    int n = 0;
    for (int i = 0; i < V; i++) n += l[i] >= lo;
    if (n < k) return -INFINITY;
    for (int it = 0; it < 60 && lo < hi; it++) {
        float mid = lo + (hi - lo) * 0.5f;
        if (mid <= lo || mid >= hi) break;
        int above = 0;
        for (int i = 0; i < V; i++) above += l[i] >= mid;
        if (above >= k)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

typedef struct {
    double p;
    int i;
} entry_t;

/* ascending probability, ties by descending index (so the lowest index counts as likeliest) */
static int by_prob(const void *a, const void *b) {
    const entry_t *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return (x->i < y->i) - (x->i > y->i);
}

/* The top-p cut over the tokens with logit >= thresh: the smallest probability a kept token
 * has (every token with a larger one, and those equal to it of lower index, are kept): written
 * as *pmin and *imax (a token of probability pmin is kept when its index <= *imax). */
static zero_status_t top_p_cut(const float *l, int V, float thresh, double maxl, double temp,
                               double top_p, double *pmin, int *imax) {
    entry_t *e = malloc((size_t)V * sizeof *e);
    if (!e)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "sampling: no memory for top-p over %d tokens",
                           V);
    int n = 0;
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        if (l[i] >= thresh) {
            e[n] = (entry_t){exp(((double)l[i] - maxl) / temp), i};
            sum += e[n++].p;
        }
    qsort(e, (size_t)n, sizeof *e, by_prob);
    double cum = 0.0;
    int first = n - 1; /* the likeliest is always kept */
    for (int j = 0; j < n - 1; j++) {
        cum += e[j].p / sum;
        if (cum > 1.0 - top_p) {
            first = j;
            break;
        }
    }
    *pmin = e[first].p;
    *imax = e[first].i;
    free(e);
    return ZERO_OK;
}

zero_status_t zero__sample(const float *l, int V, const zero_sample_params_t *p, uint64_t *rng,
                           int32_t *token) {
    const int best = argmax(l, V);
    if (p->greedy || !(p->temperature > 0.0f)) {
        *token = best;
        return ZERO_OK;
    }
    const double maxl = (double)l[best], temp = (double)p->temperature;
    const float thresh =
        p->top_k > 0 && p->top_k < V ? kth_largest(l, V, p->top_k, l[best]) : -INFINITY;
    double pmin = 0.0;
    int imax = V;
    if (p->top_p < 1.0f) {
        zero_status_t st = top_p_cut(l, V, thresh, maxl, temp, (double)p->top_p, &pmin, &imax);
        if (st) return st;
    }
#define KEPT(i, w) (l[i] >= thresh && ((w) > pmin || ((w) == pmin && (i) <= imax)))
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        double w = exp(((double)l[i] - maxl) / temp);
        if (KEPT(i, w)) sum += w;
    }
    const double r = (double)zero__rng_float(rng) * sum;
    double acc = 0.0;
    int last = best;
    for (int i = 0; i < V; i++) {
        double w = exp(((double)l[i] - maxl) / temp);
        if (!KEPT(i, w)) continue;
        acc += w;
        last = i;
        if (acc > r) break;
    }
#undef KEPT
    *token = last;
    return ZERO_OK;
}

zero_sample_params_t zero_sample_params_default(void) {
    zero_sample_params_t p = {0, 1.0f, 0, 1.0f};
    return p;
}

zero_status_t zero_sample(const float *logits, int vocab, const zero_sample_params_t *p,
                          uint64_t *rng, int32_t *token) {
    if (!logits || !p || !rng || !token)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_sample: NULL argument");
    if (vocab < 1)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_sample: vocab = %d (expected >= 1)", vocab);
    if (p->top_k < 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "sampling: top_k = %d is invalid (expected >= 0; 0 keeps all)",
                           p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "sampling: top_p = %g is invalid (expected 0 < top_p <= 1)",
                           (double)p->top_p);
    return zero__sample(logits, vocab, p, rng, token);
}
