/* residual.c — residual connection: out = a + b forward, gradient fan-out backward.
 *
 * Pure streaming, one pass, multi-threaded for large n. Backward accumulates into both da and db
 * (llm.c semantics; da == db is not allowed).
 */
#include "kernels.h"
#include "kmath.h"

#include "core/core_internal.h"

void zero__residual_forward(float *out, const float *a, const float *b, size_t n, int threads) {
    ZERO_ASSERT(out && a && b);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void zero__residual_backward(float *da, float *db, const float *dout, size_t n, int threads) {
    ZERO_ASSERT(da && db && dout && da != db);
    int nt = kthreads(n, threads);
#pragma omp parallel for simd num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}
