/* lowp.c — the engine's 16-bit helpers: widening and rounding ranges between fp32 and the
 * compute / accumulation dtypes, accumulating reduced 16-bit gradients into the accumulator, and
 * sums of squares over 16-bit shards.
 *
 * Not here: when they run (buckets.c, step.c). Conversions are src/core/convert.c's vectorised
 * RNE array functions; the fp32 arithmetic goes through the same kernels as fp32 compute.
 * Invariants: everything is elementwise or summed in fixed chunks of ZERO__SCRATCH_COUNT
 * elements in order, so the bits depend only on the values and the shard, never on the stage or
 * the thread count. Accumulation is one multi-threaded pass (kernels/optim_fused.h) whose fp32
 * add is the one zero__add_into did, so fp32 compute is unchanged.
 */
#include "engine_internal.h"

#include "kernels/kernels.h"
#include "kernels/optim_fused.h"

#include <string.h>

void zero__acc_add(zero_engine_t *eng, void *acc, zero_dtype_t acc_dt, void *src,
                   zero_dtype_t src_dt, size_t n, int overwrite, int zero_src) {
    zero__acc_add_fused(acc, acc_dt, src, src_dt, n, overwrite, zero_src, eng->params.threads);
}

double zero__sumsq_dt(zero_engine_t *eng, const void *x, size_t n, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return zero__sumsq(x, n, eng->params.threads);
    /* in chunks of ZERO__SCRATCH_COUNT, the order this sum has always had */
    return zero__sumsq_lp(x, dt, n, ZERO__SCRATCH_COUNT, eng->params.threads);
}
