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
 * Group size: the _g forms take the group (block) length G, 1 <= G <= ZERO__Q_GROUP_MAX (even
 * for int4, so groups start on a byte), with the same format, rounding and guarantees, and
 * ceil(n / G) scales; the plain forms are G = 256. Inference keeps each row of a weight matrix
 * as one such wire of its C input features (zero__matmul_forward_q, matmul_q.c), the group-wise
 * symmetric scheme of ZeRO-Inference's weight quantization.
 * Not here: who sends it (src/zero/xfer.c, src/zero/qgz.c), who computes with it
 * (src/infer/generate.c).
 */
#ifndef ZERO_KERNELS_QUANT_H
#define ZERO_KERNELS_QUANT_H

#include "zero/core.h"

#include <stddef.h>

#define ZERO__Q8_BLOCK 256
#define ZERO__Q_GROUP_MAX 1024 /* the largest group of the _g forms */

/* Groups (and fp32 scales) of n elements in groups of G. */
static inline size_t zero__q_groups(size_t n, size_t G) { return (n + G - 1) / G; }
/* Wire bytes of n elements in groups of G: int8, int4. */
static inline size_t zero__q8_bytes_g(size_t n, size_t G) { return 4 * zero__q_groups(n, G) + n; }
static inline size_t zero__q4_bytes_g(size_t n, size_t G) {
    return 4 * zero__q_groups(n, G) + (n + 1) / 2;
}

/* Blocks (and fp32 scales) of n elements. */
static inline size_t zero__q8_blocks(size_t n) { return (n + ZERO__Q8_BLOCK - 1) / ZERO__Q8_BLOCK; }
/* Bytes of n quantized elements: 4 per block plus 1 per element. */
static inline size_t zero__q8_bytes(size_t n) { return 4 * zero__q8_blocks(n) + n; }

/* out (zero__q8_bytes(n) bytes, any alignment) <- x (n elements of dt: fp32, bf16 or fp16). */
void zero__q8_quantize(void *out, const void *x, zero_dtype_t dt, size_t n, int threads);
/* y (n elements of dt) <- in (zero__q8_bytes(n) bytes), as quantized above. */
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

/* The same with groups of `group` elements (see above). */
void zero__q8_quantize_g(void *out, const void *x, zero_dtype_t dt, size_t n, size_t group,
                         int threads);
void zero__q8_dequantize_g(void *y, zero_dtype_t dt, const void *in, size_t n, size_t group,
                           int threads);
void zero__q4_quantize_g(void *out, const void *x, zero_dtype_t dt, size_t n, size_t group,
                         int threads);
void zero__q4_dequantize_g(void *y, zero_dtype_t dt, const void *in, size_t n, size_t group,
                           int threads);

/* ------------------------------------------------------------------------------ matmul */

/* Bytes of one quantized weight row of C elements: bits 8 or 4, groups of `group`. */
static inline size_t zero__q_row_bytes(int bits, size_t C, size_t group) {
    return bits == 8 ? zero__q8_bytes_g(C, group) : zero__q4_bytes_g(C, group);
}

/* out (rows, OC) = inp (rows, C) @ W^T + bias (OC, may be NULL), fp32, where W (OC, C) is stored
 * quantized row by row: row o is the wire of its C elements (groups of `group` along C, bits 8
 * or 4) at wq + o * zero__q_row_bytes(bits, C, group). Each input row is rounded to int16 with
 * one scale (sx = max|x| / 32767), the dot products run in exact integers per group, and each
 * group's scale is applied once (matmul_q.c gives the order); so the result is bitwise
 * independent of `threads`, of the other rows and of the ISA level, and within
 * sum_i |q_i s_g(i)| sx / 2 (the activations' rounding) plus the float sums' rounding of
 * dequantizing W and an fp32 matmul. A row holding an inf or a NaN gives NaN outputs.
 * scratch: zero__matmul_q_scratch_bytes(rows, C, threads) bytes, 64-byte aligned. */
size_t zero__matmul_q_scratch_bytes(size_t rows, size_t C, int threads);
void zero__matmul_forward_q(float *out, const float *inp, const void *wq, int bits, size_t group,
                            const float *bias, size_t rows, size_t C, size_t OC, void *scratch,
                            int threads);

#endif /* ZERO_KERNELS_QUANT_H */
