/* sample.c — temperature / top-k sampling and generation.
 *
 * Not here: KV caching — generation reruns the forward over the window for each new token, which
 * is fine for the end-of-training samples of small models and keeps one code path.
 */
#include "train/sample.h"

#include "core/core_internal.h"
#include "train/data.h"

#include <math.h>
#include <string.h>

int zero__sample_token(const float *logits, int V, float temperature, int top_k, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (!(temperature > 0.0f)) return best;
    /* Threshold for top-k: the k-th largest logit, found by counting (V is small enough, and
     * this keeps sampling allocation-free). Ties at the threshold are all kept. */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float lo = logits[best];
        for (int i = 0; i < V; i++)
            if (logits[i] < lo) lo = logits[i];
        float hi = logits[best];
        /* bisection on the value: at most ~40 passes to converge in float */
        for (int it = 0; it < 60 && lo < hi; it++) {
            float mid = lo + (hi - lo) * 0.5f;
            if (mid <= lo || mid >= hi) break;
            int above = 0;
            for (int i = 0; i < V; i++) above += logits[i] >= mid;
            if (above >= top_k)
                lo = mid;
            else
                hi = mid;
        }
        thresh = lo;
    }
    double sum = 0.0, maxl = (double)logits[best];
    for (int i = 0; i < V; i++)
        if (logits[i] >= thresh) sum += exp(((double)logits[i] - maxl) / temperature);
    double r = (double)zero__rng_float(rng) * sum, acc = 0.0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (logits[i] < thresh) continue;
        acc += exp(((double)logits[i] - maxl) / temperature);
        last = i;
        if (acc > r) return i;
    }
    return last;
}

zero_status_t zero__generate(zero_gpt_t *gpt, int32_t *tokens, int prompt_len, int total_len,
                             float temperature, int top_k, uint64_t *rng) {
    const zero_gpt_config_t *c = zero__gpt_config(gpt);
    if (prompt_len < 1 || total_len < prompt_len)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "generate: prompt of %d tokens, total %d (expected 1 <= prompt <= "
                           "total)",
                           prompt_len, total_len);
    for (int len = prompt_len; len < total_len; len++) {
        int T = len < c->seq ? len : c->seq;
        zero_status_t st = zero__gpt_forward(gpt, tokens + len - T, NULL, 1, T, NULL);
        if (st) return st;
        const float *row = zero__gpt_logits(gpt) + (size_t)(T - 1) * (size_t)c->vocab;
        tokens[len] = zero__sample_token(row, c->vocab, temperature, top_k, rng);
    }
    return ZERO_OK;
}
