/* q8dyn.h — 8-bit block-wise quantization with bitsandbytes' dynamic map, and the 8-bit Adam
 * update on it (q8dyn.c): the optimizer-state format of 8-bit Adam (Dettmers et al., "8-bit
 * Optimizers via Block-wise Quantization"; ../shared/design/lowbit-notes.md, section 1).
 *
 * The map: 256 sorted fp32 values in [-1, 1] (signed, for Adam's m) or [0, 1] (unsigned, for v),
 * bitsandbytes' create_dynamic_map with its defaults: decades 10^(i-6), i = 0..6, each holding
 * the midpoints of an even split of [0.1, 1] into 2^i parts (signed, with their negatives) or
 * 2^(i+1) parts (unsigned), plus 0 and 1. The signed map has no -1 (its smallest entry is
 * -0.99296875). bitsandbytes computes the midpoints in fp32 with torch.linspace, whose last bit
 * depends on the CPU's vector width; here each entry is the exact value rounded to fp32 once (at
 * most 2 ulp from torch's, tests/kernels/test_q8dyn.py).
 * Blocks of ZERO__Q8DYN_BLOCK = 256 values (bitsandbytes' optimizer block), the last one may be
 * shorter; each block keeps one fp32 absmax = max |x| (at least 1e-38, bitsandbytes' floor), and
 * each value the code of the map entry nearest to clamp(x / absmax, -1, 1), a tie going to the
 * lower code (bitsandbytes' CPU backend; its CUDA kernel also nudges a code whose sign differs
 * from the value's, which this does not). Dequantized: map[code] * absmax. Inputs are finite
 * (the engine skips steps with an inf or NaN gradient).
 */
#ifndef ZERO_KERNELS_Q8DYN_H
#define ZERO_KERNELS_Q8DYN_H

#include "kernels/optim_fused.h"

#include <stddef.h>
#include <stdint.h>

#define ZERO__Q8DYN_BLOCK 256

/* The map (static, 256 entries, ascending). */
const float *zero__q8dyn_map(int is_signed);

/* Blocks of n values: codes (n), absmax (ceil(n / 256)). */
void zero__q8dyn_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, int is_signed);
void zero__q8dyn_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
                            int is_signed);

/* One AdamW step on n parameters whose m and v are 8-bit (m signed, v unsigned; blocks of 256 as
 * above), in bitsandbytes' order: m and v dequantized with the old absmax; g = grads[i] * gscale;
 * m = b1 m + (1 - b1) g and v = b2 v + (1 - b2) g^2 in fp32; the parameter updated from those
 * fp32 states with zero's AdamW arithmetic (optim_fused.h; decoupled decay on the parameter
 * before the step, as bitsandbytes' CPU path); then each block's new absmax and codes. So the
 * quantization error reaches the parameters one step later. */
void zero__adam8_update(float *params, const float *grads, float gscale, uint8_t *m_codes,
                        float *m_absmax, uint8_t *v_codes, float *v_absmax, size_t n,
                        const zero__adamw_hp_t *hp);

#endif /* ZERO_KERNELS_Q8DYN_H */
