/* sample.h — drawing a token from logits (internal API): the one sampler of the library, behind
 * zero_sample (zero/generate.h) and the trainer's end-of-training samples.
 */
#ifndef ZERO_INFER_SAMPLE_H
#define ZERO_INFER_SAMPLE_H

#include "zero/generate.h"

#include <stdint.h>

/* zero_sample without the argument checks of the public entry (p valid, V >= 1). */
zero_status_t zero__sample(const float *logits, int V, const zero_sample_params_t *p, uint64_t *rng,
                           int32_t *token);

#endif /* ZERO_INFER_SAMPLE_H */
