/* gelu.c — GELU (tanh approximation) forward and backward, elementwise, multi-threaded, in fp32
 * and with 16-bit I/O.
 *
 * One streaming pass each, written as x sigmoid(2u) (the same function as 0.5 x (1 + tanh u))
 * with kmath.h's exp so the loops vectorise. Backward accumulates into dinp (llm.c semantics).
 * The fp32 and 16-bit kernels share the span functions below: the 16-bit ones run them on fp32
 * tiles (lp_io.c), so each 16-bit output is the fp32 result on the widened inputs, rounded once.
 * Not here: the erf form of GELU.
 */
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* out(n) = gelu(inp(n)); b unused (zero__span_fn shape). */
static void gelu_fwd_span(float *out, const float *inp, const float *b, size_t n) {
    (void)b;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_S * (x + GELU_C * x * x * x);
        /* 0.5 (1 + tanh u) = sigmoid(2u): one exp and one division, no sign handling */
        out[i] = x / (1.0f + kexp(-2.0f * u));
    }
}

/* dinp(n) += gelu'(inp(n)) * dout(n) */
static void gelu_bwd_span(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp simd
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

/* fp32 driver: each thread one contiguous, cache-line aligned slice. */
static void stream_f32(float *out, const float *a, const float *b, size_t n, zero__span_fn fn,
                       int threads) {
    int nt = kthreads(n, threads);
#pragma omp parallel num_threads(nt)
    {
        size_t i0, i1;
        kslice(n, 16, &i0, &i1);
        if (i1 > i0) fn(out + i0, a + i0, b ? b + i0 : NULL, i1 - i0);
    }
}

void zero__gelu_forward(float *out, const float *inp, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    stream_f32(out, inp, NULL, n, gelu_fwd_span, threads);
}

void zero__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    stream_f32(dinp, inp, dout, n, gelu_bwd_span, threads);
}

void zero__gelu_forward_lp(void *out, const void *inp, zero_dtype_t dt, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    zero__stream_lp(out, 0, inp, NULL, dt, n, gelu_fwd_span, threads);
}

void zero__gelu_backward_lp(void *dinp, const void *inp, const void *dout, zero_dtype_t dt,
                            size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    zero__stream_lp(dinp, 1, inp, dout, dt, n, gelu_bwd_span, threads);
}

/* Residual forward lives here too: it is the same kind of streaming pass. */
static void add_span(float *out, const float *a, const float *b, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void zero__residual_forward_lp(void *out, const void *a, const void *b, zero_dtype_t dt, size_t n,
                               int threads) {
    ZERO_ASSERT(out && a && b);
    zero__stream_lp(out, 0, a, b, dt, n, add_span, threads);
}
