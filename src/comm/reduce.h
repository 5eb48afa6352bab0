/* reduce.h — the rank-order reduction kernel (reduce.c), shared by both comm backends and by the
 * engine's reduction of source slots (src/zero/buckets.c), which must sum exactly as a
 * reduce-scatter does.
 */
#ifndef ZERO_COMM_REDUCE_H
#define ZERO_COMM_REDUCE_H

#include "zero/comm.h"

#include <stddef.h>

/* Rank-order reduction of `n` input blocks into out: out = in[0] op in[1] op ... op in[n-1],
 * each element accumulated left to right (fp16/bf16 in fp32, rounded once). out may alias
 * any input exactly (each tile is read in full before it is written). `count` elements each. This
 * is the one reduction kernel both backends use, which is what makes their results bitwise equal.
 */
void zero__reduce_blocks(void *out, const void *const *in, int n, size_t count, zero_dtype_t dtype,
                         zero_op_t op);

/* Accumulator element size of a reduction of dtype: fp16/bf16 accumulate in fp32 (4), the others
 * in their own type. A partial sum carried between ranks travels at this size. */
size_t zero__reduce_acc_size(zero_dtype_t dtype);
/* Partial rank-order reduction into acc (accumulator type, count elements): acc = acc_in op in[0]
 * op ... op in[n-1], left to right; acc_in NULL: acc = in[0] op ... (n >= 1 then). acc may be
 * acc_in. Then zero__reduce_round(out, acc) gives bitwise what zero__reduce_blocks would have
 * given over the whole sequence of inputs: the same operations in the same order, in the same
 * precision. out may be acc (rounding in place). */
void zero__reduce_partial(void *acc, const void *acc_in, const void *const *in, int n, size_t count,
                          zero_dtype_t dtype, zero_op_t op);
void zero__reduce_round(void *out, const void *acc, size_t count, zero_dtype_t dtype);

#endif /* ZERO_COMM_REDUCE_H */
