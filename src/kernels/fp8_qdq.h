/* fp8_qdq.h — FP8 quantize-dequantize of GEMM inputs (fp8_qdq.c): FP8 compute as a CPU without
 * FP8 hardware runs it, each GEMM input replaced by the values its FP8 codes stand for; their
 * amax; Transformer Engine's delayed-scaling update.
 *
 * Element format and rounding are fp8.h's (round to nearest even, saturating to ±max: TE's
 * satfinite). Inputs and outputs are in a compute dtype (fp32, bf16 or fp16): each element is
 * widened to fp32, quantized, dequantized in fp32 and rounded once to the dtype. Every element's
 * result depends only on it and its scale, so any thread split gives the same bits.
 *
 * Scales (lowbit-notes.md 2.2, 2.3):
 *   per tensor (TE): q = enc(x * scale), x' = dec(q) * (1 / scale);
 *   tiles (DeepSeek-V3): s = max(amax_tile, floor) / FP8_MAX, q = enc(x / s), x' = dec(q) * s.
 */
#ifndef ZERO_KERNELS_FP8_QDQ_H
#define ZERO_KERNELS_FP8_QDQ_H

#include "kernels/fp8.h"
#include "zero/core.h"

#include <stddef.h>

/* DeepSeek-V3's tile width (input channels per scale) and weight block side. */
#define ZERO__FP8_TILE 128
/* DeepSeek-V3's act_quant floor of a tile's amax. */
#define ZERO__FP8_AMAX_FLOOR 1e-4f

/* The largest |x[i]| of n values of dt; a NaN counts as +Inf (MS-AMP's rule, so that a MAX
 * reduction over ranks carries it); 0 for n == 0. */
float zero__fp8_amax(const void *x, zero_dtype_t dt, size_t n, int threads);

/* Per-tensor scale: out[i] = dec(enc(x[i] * scale)) * (1 / scale), rounded to dt. out may be
 * x. scale > 0, finite. */
void zero__fp8_qdq(void *out, const void *x, zero_dtype_t dt, size_t n, float scale,
                   zero__fp8_format_t f, int threads);

/* Tiles of tile_rows x ZERO__FP8_TILE of the row-major (rows, cols) matrix x, ragged tiles at
 * the right and bottom edges included: s = max(amax_tile, floor) / FP8_MAX per tile (a tile of
 * zeros with floor 0: s = 1), out = dec(enc(x / s)) * s rounded to dt. tile_rows 1: DeepSeek-V3's
 * 1 x 128 activation tiles; ZERO__FP8_TILE: its 128 x 128 weight blocks. out may be x. */
void zero__fp8_qdq_tiles(void *out, const void *x, zero_dtype_t dt, size_t rows, size_t cols,
                         size_t tile_rows, float floor, zero__fp8_format_t f, int threads);

/* Weights on the E4M3 grid (fp8.weight_gather): blocks of at most ZERO__FP8_TILE values with a
 * power-of-two scale s = 2^k, the least k >= -126 with amax <= 448 x 2^k (amax 0 or not finite:
 * s = 1); codes enc(x / s) in E4M3, values dec(c) x s. Division and product by 2^k are exact,
 * so the values are E4M3 values times s (exact in bf16 unless below its normal range), and the
 * rounding of rounded values gives them back bit for bit: a rank can send the codes of values
 * it holds rounded already and the receiver gets exactly those values. */
float zero__fp8_pow2_scale(float amax);
/* codes[i] = enc_e4m3(x[i] / s) for the n <= ZERO__FP8_TILE values x; returns s (from their
 * amax, NaN counting as +Inf). */
float zero__fp8_block_encode(uint8_t *codes, const float *x, size_t n);
/* x[i] = dec_e4m3(codes[i]) x s. */
void zero__fp8_block_decode(float *x, const uint8_t *codes, size_t n, float s);
/* n values of dt rounded in place block by block (ZERO__FP8_TILE from x[0], the last one
 * ragged): x = dec(enc(x / s)) x s rounded to dt. */
void zero__fp8_round_blocks(void *x, zero_dtype_t dt, size_t n);

/* Transformer Engine's delayed-scaling update of one tensor (recipe/delayed_scaling.cu):
 * history (len >= 1 slots) gets this step's amax in slot 0; a = max over the len slots; if a is
 * finite and > 0, *scale = (fp8_max / a) / 2^margin (an infinite result becomes FLT_MAX), else
 * *scale is kept; then the history rolls: new[i] = old[i + 1] for 0 < i < len - 1,
 * new[len - 1] = old[0], new[0] = 0 (len 1: the one slot becomes 0). */
void zero__fp8_delayed_update(float *scale, float *history, size_t len, float amax, float fp8_max,
                              int margin);

#endif /* ZERO_KERNELS_FP8_QDQ_H */
