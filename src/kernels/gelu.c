/* gelu.c — GELU (tanh approximation) forward and backward, elementwise, multi-threaded, in fp32
 * and with 16-bit I/O.
 *
 * One streaming pass each, written as x sigmoid(2u) (the same function as 0.5 x (1 + tanh u)).
 * The sigmoid is evaluated on e = exp(-|2u|) <= 1 only: sigmoid(|2u|) = 1 / (1 + e) and
 * sigmoid(-|2u|) = e / (1 + e), so nothing overflows, the denominator lies in [1, 2], the negative
 * tail keeps its relative accuracy (no 1 + tanh cancellation) and sigmoid (1 - sigmoid) = e / (1 +
 * e)^2 needs no 1 - sigmoid subtraction. Backward accumulates into dinp (llm.c semantics).
 * Accuracy against the double-precision tanh formula: see the comments above the span functions.
 * The span functions live in isa/spans.c, built once per instruction-set level (isa.h); the
 * fp32 and 16-bit kernels share them: the 16-bit ones run them on fp32
 * tiles (lp_io.c), so each 16-bit output is the fp32 result on the widened inputs, rounded once.
 * Invariant: each element's result is a fixed sequence of IEEE operations on that element alone
 * (explicit fmaf, no implicit contraction under -std=c11, correctly rounded division), so vector
 * body, remainder loop and any thread split give bitwise the same output.
 * Not here: the erf form of GELU.
 */
#include "isa.h"
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

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
    stream_f32(out, inp, NULL, n, zero__isa_current()->gelu_forward, threads);
}

void zero__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    stream_f32(dinp, inp, dout, n, zero__isa_current()->gelu_backward, threads);
}

void zero__gelu_forward_lp(void *out, const void *inp, zero_dtype_t dt, size_t n, int threads) {
    ZERO_ASSERT(out && inp);
    zero__stream_lp(out, 0, inp, NULL, dt, n, zero__isa_current()->gelu_forward, threads);
}

void zero__gelu_backward_lp(void *dinp, const void *inp, const void *dout, zero_dtype_t dt,
                            size_t n, int threads) {
    ZERO_ASSERT(dinp && inp && dout);
    zero__stream_lp(dinp, 1, inp, dout, dt, n, zero__isa_current()->gelu_backward, threads);
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
