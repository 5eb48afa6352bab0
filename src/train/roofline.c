/* roofline.c — a training step's roofline time from the model's shapes (roofline.h).
 *
 * The GEMM term is the MFU's numerator, so MFU = gemm_s / step time and the roofline ratio
 * (step time / total_s) differ only by the memory-bound passes. Those are counted as the fp32
 * elements each pass must move between memory and the cores at least once (read its inputs, write
 * its outputs), with C the width, NH the heads, T the sequence, V the vocabulary, per token:
 *
 *   forward, per layer:   ln1 2C (x in, y out); attention softmax 2 NH T (scores in, probabilities
 *                         out; full rows, as the kernel stores them); two residual adds 2 x 3C;
 *                         ln2 2C; GELU 8C (4C in, 4C out)                     = 18C + 2 NH T
 *   backward, per layer:  two layernorms 2 x 3C (x and dy in, dx out); GELU 12C (pre-activation
 *                         and dy in, dx out); softmax 3 NH T (probabilities and dP in, dS out);
 *                         two residual gradient adds 2 x 3C                   = 24C + 3 NH T
 *   outside the blocks:   embedding 3C forward (wte row, wpe row, sum out) and 5C backward (dx in,
 *                         the wte and wpe gradient rows read and written); final layernorm 2C +
 *                         3C; the loss's softmax over the logits 2V forward (logits in,
 *                         probabilities out) and 2V backward (probabilities in, dlogits out)
 *                                                                             = 13C + 4V
 *
 * Each is an element of the compute dtype (2 bytes in bf16 and fp16) except the loss's 4V, whose
 * logits are fp32 in every dtype.
 *
 * Left out as small beside these: the bias adds and bias gradients, the layernorm statistics,
 * the attention's per-head copies (their GEMMs read them), the loss's gather of one logit per row.
 */
#include "train/roofline.h"

#include <stdlib.h>

double zero__train_roofline_activation_elems(const zero_gpt_config_t *m) {
    const double C = m->dim, NH = m->heads, T = m->seq, V = m->vocab, L = m->layers;
    const double fwd = 18.0 * C + 2.0 * NH * T, bwd = 24.0 * C + 3.0 * NH * T;
    return L * (fwd + bwd) + 13.0 * C + 4.0 * V;
}

double zero__train_roofline_activation_bytes(const zero_gpt_config_t *m, size_t act_bytes) {
    const double loss = 4.0 * m->vocab;
    return (double)act_bytes * (zero__train_roofline_activation_elems(m) - loss) + 4.0 * loss;
}

double zero__train_roofline_parameter_elems(size_t params, size_t shard_params, int world) {
    return 8.0 * (double)shard_params + (double)params + (world > 1 ? 2.0 * (double)params : 0.0);
}

void zero__train_roofline(const zero_gpt_config_t *m, double tokens, size_t params,
                          size_t shard_params, int world, size_t act_bytes, double peak_flops_per_s,
                          double memory_bytes_per_s, zero_train_roofline_t *out) {
    out->gemm_flops = zero__gpt_flops_per_token(m) * tokens;
    out->activation_bytes = zero__train_roofline_activation_bytes(m, act_bytes) * tokens;
    out->parameter_bytes = 4.0 * zero__train_roofline_parameter_elems(params, shard_params, world);
    out->gemm_s = peak_flops_per_s > 0 ? out->gemm_flops / peak_flops_per_s : 0.0;
    out->memory_s = memory_bytes_per_s > 0
                        ? (out->activation_bytes + out->parameter_bytes) / memory_bytes_per_s
                        : 0.0;
    out->total_s = out->gemm_s + out->memory_s;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double zero__train_median(double *v, size_t n) {
    if (n == 0) return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
