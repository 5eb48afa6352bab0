/* gelu.c — GELU (tanh approximation) forward and backward, elementwise, multi-threaded.
 *
 * One streaming pass each, written as x sigmoid(2u) (the same function as 0.5 x (1 + tanh u))
 * with kmath.h's exp so the loops vectorise. Backward accumulates
 * into dinp (llm.c semantics). Not here: the erf form of GELU.
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

void zero__gelu_forward(float *out, const float *inp, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        /* 0.5 (1 + tanh u) = sigmoid(2u): one exp and one division, no sign handling */
        out[i] = x / (1.0f + kexp(-2.0f * u));
    }
}

void zero__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        float sg = 1.0f / (1.0f + kexp(-2.0f * u)); /* sigmoid(2u) = 0.5 (1 + tanh u) */
        /* d/dx x sigmoid(2u) = sg + 2 x sg (1 - sg) u'(x) */
        float du = GELU_S * (1.0f + 3.0f * GELU_C * x * x);
        float g = sg + 2.0f * x * sg * (1.0f - sg) * du;
        dinp[i] += g * dout[i];
    }
}
