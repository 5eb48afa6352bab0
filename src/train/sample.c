/* sample.c — generation for the end-of-training samples, drawing with the library's sampler
 * (infer/sample.h).
 *
 * Not here: KV caching — this reruns the forward over the window for each new token on the
 * training model (every rank, whatever the stage), which is fine for a few short samples of small
 * models; zero generate (zero/generate.h) decodes with a KV cache from a checkpoint.
 */
#include "train/sample.h"

#include "core/core_internal.h"
#include "infer/sample.h"

zero_status_t zero__generate(zero_gpt_t *gpt, int32_t *tokens, int prompt_len, int total_len,
                             float temperature, int top_k, uint64_t *rng) {
    const zero_gpt_config_t *c = zero__gpt_config(gpt);
    if (prompt_len < 1 || total_len < prompt_len)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "generate: prompt of %d tokens, total %d (expected 1 <= prompt <= "
                           "total)",
                           prompt_len, total_len);
    zero_sample_params_t sp = zero_sample_params_default();
    sp.temperature = temperature;
    sp.top_k = top_k;
    for (int len = prompt_len; len < total_len; len++) {
        int T = len < c->seq ? len : c->seq;
        zero_status_t st = zero__gpt_forward(gpt, tokens + len - T, NULL, 1, T, NULL);
        if (!st)
            st = zero__sample(zero__gpt_logits(gpt) + (size_t)(T - 1) * (size_t)c->vocab, c->vocab,
                              &sp, rng, &tokens[len]);
        if (st) return st;
    }
    return ZERO_OK;
}
