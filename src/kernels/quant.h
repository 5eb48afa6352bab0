/* quant.h — blockwise symmetric int8 quantization with fp32 scales (ZeRO++ qwZ's wire format)
 * and its int4 sibling (ZeRO++ qgZ's), quant.c.
 *
 * n elements are cut into blocks of ZERO__Q8_BLOCK (the last one may be shorter: any n >= 0
 * works, no divisibility is required). A block's scale is s = max|x| / 127 (rounded to fp32);
 * each element is q = round_to_nearest_even(x / s) clamped to [-127, 127] and comes back as
 * q * s (then rounded to nearest even into a 16-bit dtype). Hence |x - q s| <= s / 2 up to the
 * rounding of the fp32 division and product, and a value that is an integer multiple k s
 * (|k| <= 127) of its block's scale comes back exactly.
 *   - a block of zeros has s = 0 and q = 0: zeros back, no division by zero;
 *   - a block whose max|x| is so small that max|x| / 127 underflows to 0 uses the smallest
 *     subnormal (2^-149) instead: those values are multiples of it and come back exactly;
 *   - a block holding an inf or a NaN gets s = NaN: every element of it comes back as NaN. A
 *     non-finite value never comes back finite (nor does its block pretend to be intact).
 * Wire layout of zero__q8_bytes(n) bytes: the ceil(n / ZERO__Q8_BLOCK) fp32 scales, then the n
 * int8 values. Results are bitwise independent of `threads`.
 *
 * int4 (ZERO__Q4_*): the same blocks of 256 with s = max|x| / 7 and q in [-7, 7], the same
 * rounding, bound (|x - q s| <= s / 2 up to the fp32 rounding) and edge cases (zeros, the
 * underflow to 2^-149, a non-finite block all NaN). Two values a byte: element 2i in the low
 * nibble of byte i, 2i + 1 in the high one, each q as 4-bit two's complement (an odd n leaves
 * the last high nibble 0). Wire layout of zero__q4_bytes(n) bytes: the ceil(n / 256) fp32
 * scales, then ceil(n / 2) bytes; read and written with memcpy, so no alignment is needed.
 * Dequantized into fp32 (or a 16-bit dtype), or added into an fp32 accumulator (acc += q s,
 * the product rounded to fp32 first): the fixed-order sums of qgZ (src/zero/qgz.c).
 * Not here: who sends it (src/zero/xfer.c, src/zero/qgz.c).
 */
#ifndef ZERO_KERNELS_QUANT_H
#define ZERO_KERNELS_QUANT_H

#include "zero/core.h"

#include <stddef.h>

#define ZERO__Q8_BLOCK 256

/* Blocks (and fp32 scales) of n elements. */
static inline size_t zero__q8_blocks(size_t n) { return (n + ZERO__Q8_BLOCK - 1) / ZERO__Q8_BLOCK; }
/* Bytes of n quantized elements: 4 per block plus 1 per element. */
static inline size_t zero__q8_bytes(size_t n) { return 4 * zero__q8_blocks(n) + n; }

/* out (zero__q8_bytes(n) bytes, 4-byte aligned) <- x (n elements of dt: fp32, bf16 or fp16). */
void zero__q8_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads);
/* y (n elements of dt) <- in (zero__q8_bytes(n) bytes, 4-byte aligned), as quantized above. */
void zero__q8_dequantize(void *y, zero_dtype_t dt, const void *in, size_t n, int threads);

#define ZERO__Q4_BLOCK 256

static inline size_t zero__q4_blocks(size_t n) { return (n + ZERO__Q4_BLOCK - 1) / ZERO__Q4_BLOCK; }
/* Bytes of n int4 elements: 4 per block plus one per two elements. */
static inline size_t zero__q4_bytes(size_t n) { return 4 * zero__q4_blocks(n) + (n + 1) / 2; }

/* out (zero__q4_bytes(n) bytes) <- x (n elements of dt: fp32, bf16 or fp16). */
void zero__q4_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads);
/* y (n elements of dt) <- in (zero__q4_bytes(n) bytes). */
void zero__q4_dequantize(void *y, zero_dtype_t dt, const void *in, size_t n, int threads);
/* acc[i] += q_i s_i (fp32, n elements) from in (zero__q4_bytes(n) bytes). */
void zero__q4_dequantize_add(float *acc, const void *in, size_t n, int threads);

#endif /* ZERO_KERNELS_QUANT_H */
