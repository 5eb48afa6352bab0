/* kernels_lp.h — 16-bit (bf16 / fp16) matmul kernels with fp32 accumulation (internal API).
 *
 * What it is: the mixed-precision twins of zero__matmul_forward / zero__matmul_backward in
 * kernels.h, same shapes, same layout (weights [out, in]) and the same accumulate/overwrite
 * contract, plus the GEMM under them. Inputs are bf16 or fp16 bit patterns (uint16_t); outputs
 * are fp32 or the input dtype. Products and sums are fp32 (or wider); a 16-bit output is rounded
 * once, to nearest even, at the end.
 * How: bf16 runs on oneDNN's dnnl_matmul primitive (AVX512-BF16 or AMX-BF16, whichever oneDNN
 * picks; primitives are cached per shape and thread count: creating one JIT-compiles kernels,
 * 0.6-4 ms measured on the GPT shapes here). oneDNN 2.6 has no f16 matmul on CPU, so fp16 (and
 * bf16 without oneDNN) widens the operands to fp32 in a per-thread scratch buffer and calls
 * zero__sgemm: exact products, fp32 speed.
 * What it is not: no other 16-bit kernel lives here yet (layernorm, GELU, ... stay fp32).
 * Thread safety: as kernels.h; each call may use `threads` cores of the calling thread. The
 * primitive cache is shared and locked; per-thread scratch is freed when the thread exits.
 * Misuse (bad dtype, NULL operand) is our bug and trips ZERO_ASSERT.
 */
#ifndef ZERO_KERNELS_LP_H
#define ZERO_KERNELS_LP_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* C(M, N) = op(A)(M, K) · op(B)(K, N) [+ C if accumulate], op(X) = Xᵀ when trans_x.
 * A, B: ab_dtype (BF16 or FP16); C: c_dtype (FP32 or ab_dtype). Strides in elements of the
 * stored matrices (A is stored (K, M) when trans_a). With a 16-bit C and accumulate, the sum
 * C + A·B is formed in fp32 and rounded once. */
void zero__gemm_lp(int trans_a, int trans_b, size_t M, size_t N, size_t K, const void *A,
                   size_t lda, const void *B, size_t ldb, zero_dtype_t ab_dtype, int accumulate,
                   void *C, size_t ldc, zero_dtype_t c_dtype, int threads);

/* Linear forward, overwrites out.
 * out:    (BT, OC)  out_dtype: FP32 or dtype
 * inp:    (BT, C)   dtype: BF16 or FP16
 * weight: (OC, C)   dtype, [out, in]
 * bias:   (OC)      dtype, or NULL
 * out = inp · weightᵀ + bias, bias added in fp32 before the single rounding. */
void zero__matmul_forward_lp(void *out, zero_dtype_t out_dtype, const void *inp, const void *weight,
                             const void *bias, zero_dtype_t dtype, size_t BT, size_t C, size_t OC,
                             int threads);

/* Linear backward, accumulates (+=) into each gradient; any of dinp, dweight, dbias may be NULL.
 * dinp:    (BT, C)   dinp_dtype (FP32 or dtype)  += dout · weight
 * dweight: (OC, C)   dw_dtype (FP32 or dtype)    += doutᵀ · inp
 * dbias:   (OC)      dw_dtype                    += column sums of dout (fp32, rows in order)
 * dout:    (BT, OC), inp: (BT, C), weight: (OC, C), all dtype (BF16 or FP16). */
void zero__matmul_backward_lp(void *dinp, zero_dtype_t dinp_dtype, void *dweight, void *dbias,
                              zero_dtype_t dw_dtype, const void *dout, const void *inp,
                              const void *weight, zero_dtype_t dtype, size_t BT, size_t C,
                              size_t OC, int threads);

/* How a 16-bit GEMM of `dtype` runs here, e.g. "oneDNN matmul brg:avx512_core_amx_bf16" or
 * "fp32 widening + oneDNN 2.6.3 (dnnl_sgemm)". Creates (and caches) a small primitive on first
 * use. Static or cached string, valid for the process. */
const char *zero__matmul_lp_impl(zero_dtype_t dtype);

/* Destroy every cached primitive. Only when no thread is inside a 16-bit matmul (tests). */
void zero__matmul_lp_cache_clear(void);

#endif /* ZERO_KERNELS_LP_H */
