/* adamw.c — AdamW update over a flat range (decoupled weight decay, bias-corrected moments).
 *
 * One streaming pass over params, grads, m and v (16 B read + 12 B written per element). The
 * bias corrections are computed once in double. Matches torch.optim.AdamW: the decay term uses
 * the parameter before the step and is scaled by lr. Not here: gradient clipping or loss-scale
 * division (the engine applies them before calling), NO_DECAY selection (caller passes 0).
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#include <math.h>

void zero__adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t,
                        int threads) {
    ZERO_ASSERT(params && grads && m && v && t >= 1);
    const float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
    const float b1c = 1.0f - beta1, b2c = 1.0f - beta2;
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        float mi = beta1 * m[i] + b1c * g;
        float vi = beta2 * v[i] + b2c * g * g;
        m[i] = mi;
        v[i] = vi;
        float p = params[i];
        float upd = (mi * bc1) / (sqrtf(vi * bc2) + eps);
        params[i] = p - lr * (upd + weight_decay * p);
    }
}
