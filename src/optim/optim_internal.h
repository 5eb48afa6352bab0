/* optim_internal.h — helpers of the mixed-precision step shared inside the library.
 *
 * zero__has_nonfinite is the overflow check behind loss scaling (fp16) and the bf16 inf/NaN
 * guard: the engine runs it on its gradient shard, agrees the flag across ranks and feeds it to
 * zero_loss_scaler_update(). It reads only; buffers are borrowed for the call.
 */
#ifndef ZERO_OPTIM_INTERNAL_H
#define ZERO_OPTIM_INTERNAL_H

#include "zero/core.h"
#include "zero/optim.h"

#include <stddef.h>

/* 1 if any of the `count` elements of buf (fp32, bf16 or fp16) is +-inf or NaN, else 0.
 * Vectorised (AVX-512 where the CPU has it, chosen at run time) and stops at the first block
 * with a non-finite value. Any other dtype is our bug (ZERO_ASSERT). Thread-safe. */
int zero__has_nonfinite(const void *buf, size_t count, zero_dtype_t dtype);

/* Same on the portable scalar path only (the test's second implementation and the fallback). */
int zero__has_nonfinite_scalar(const void *buf, size_t count, zero_dtype_t dtype);

#endif /* ZERO_OPTIM_INTERNAL_H */
