/* optim_fused.h — fused passes of the optimizer step and of gradient accumulation
 * (optim_fused.c), and the sum of squares of a 16-bit buffer (vector.c).
 *
 * Why: the engine's step used to stream the gradient shard and the optimizer state six times
 * (non-finite check, sum of squares, scale, AdamW, rounding of the master, zeroing), each pass
 * bound by memory bandwidth. These kernels do the work of several passes in one, with the same
 * float operations in the same order, so every result is bitwise what the separate passes
 * (zero__scale, zero__adamw_update, the RNE array conversions of core, zero__zero) give.
 * Every result is bitwise independent of `threads`.
 * Not here: which range of which buffer is updated (the engine), the non-fused kernels
 * (kernels.h), communication.
 */
#ifndef ZERO_KERNELS_OPTIM_FUSED_H
#define ZERO_KERNELS_OPTIM_FUSED_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* Hyper-parameters of one AdamW step (kernels.h, zero__adamw_update); t is 1-based. */
typedef struct zero__adamw_hp {
    float lr, beta1, beta2, eps, weight_decay;
    int t;
} zero__adamw_hp_t;

/* One pass over n elements, per element i:
 *   g = widen(grads[i]) * gscale             (grads of dtype grad_dt: fp32, bf16 or fp16)
 *   m, v, master updated exactly as zero__adamw_update(master, g, m, v, ...)
 *   params[i] = round_RNE(master[i])          (only if params != NULL; param_dt bf16 or fp16)
 *   grads[i] = 0 (all bits)                   (only if zero_grads)
 * Bitwise equal to zero__scale on the fp32 gradient (or a widened copy), then the AdamW formula
 * of kernels.h in float in the order written there (what zero__adamw_update always computed;
 * it is now this kernel with gscale 1), then zero_fp32_to_{bf16,fp16}_array, then zeroing — for
 * every g that is not NaN (x * 1.0f == x then, so gscale == 1 needs no special case; a NaN gradient
 * never reaches the optimizer: the step is skipped). grads may be NULL only with n == 0. master, m,
 * v: (n) fp32; grads: (n) grad_dt; params: (n) param_dt or NULL. */
void zero__adamw_fused(float *master, void *params, zero_dtype_t param_dt, void *grads,
                       zero_dtype_t grad_dt, float gscale, int zero_grads, float *m, float *v,
                       size_t n, const zero__adamw_hp_t *hp, int threads);

/* Gradient accumulation in one pass, per element i (acc of dtype acc_dt, src of src_dt, each
 * fp32 or 16-bit):
 *   overwrite: acc[i] = widen(src[i])                (acc_dt fp32 only)
 *   else:      acc[i] = narrow(widen(acc[i]) + widen(src[i]))  (fp32 acc: no rounding)
 *   then, if zero_src, src[i] = 0 (all bits).
 * overwrite is for an accumulator known to be zero: 0 + x == x bitwise except x == -0, where it
 * stores -0 instead of +0 (both square to +0 and leave AdamW's m, v and update unchanged).
 * acc: (n) acc_dt; src: (n) src_dt, not overlapping acc. */
void zero__acc_add_fused(void *acc, zero_dtype_t acc_dt, void *src, zero_dtype_t src_dt, size_t n,
                         int overwrite, int zero_src, int threads);

/* Sum of squares in float64 of n 16-bit values (dt bf16 or fp16), widened exactly: the buffer
 * is cut into chunks of `chunk` elements, each chunk summed exactly as zero__sumsq sums an fp32
 * buffer of that length, and the chunk totals added in order — the same bits as widening each
 * chunk and calling zero__sumsq on it, for any thread count. chunk > 0. x: (n) */
double zero__sumsq_lp(const uint16_t *x, zero_dtype_t dt, size_t n, size_t chunk, int threads);

/* Naive single-threaded twins (optim_fused.c), built from the reference kernels of reference.c
 * and core's scalar conversions. For tests only. */
void zero__ref_adamw_fused(float *master, void *params, zero_dtype_t param_dt, void *grads,
                           zero_dtype_t grad_dt, float gscale, int zero_grads, float *m, float *v,
                           size_t n, const zero__adamw_hp_t *hp);
void zero__ref_acc_add_fused(void *acc, zero_dtype_t acc_dt, void *src, zero_dtype_t src_dt,
                             size_t n, int overwrite, int zero_src);

#endif /* ZERO_KERNELS_OPTIM_FUSED_H */
