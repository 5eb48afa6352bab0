/* adamw.c — AdamW update over a flat range (decoupled weight decay, bias-corrected moments).
 *
 * One streaming pass over params, grads, m and v (16 B read + 12 B written per element). The
 * arithmetic lives in one place, the fused step kernel (optim_fused.c): this is that kernel
 * with an fp32 gradient, a scale of 1 (g * 1.0f == g for every non-NaN g) and nothing rounded or
 * zeroed. Matches torch.optim.AdamW: the decay term uses the parameter before the step and is
 * scaled by lr. Not here: gradient clipping or loss-scale division (the engine applies them
 * before calling, or passes them to the fused kernel), NO_DECAY selection (caller passes 0).
 */
#include "kernels.h"
#include "optim_fused.h"

#include "core/core_internal.h"

void zero__adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t,
                        int threads) {
    ZERO_ASSERT(params && grads && m && v && t >= 1);
    const zero__adamw_hp_t hp = {lr, beta1, beta2, eps, weight_decay, t};
    /* zero_grads is 0: the gradient is only read, so dropping const is safe */
    zero__adamw_fused(params, NULL, ZERO_DTYPE_BF16, (void *)grads, ZERO_DTYPE_FP32, 1.0f, 0, m, v,
                      n, &hp, threads);
}
