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
 * The other 16-bit I/O kernels (below the matmul) mirror kernels.h: each tensor marked `dt`
 * holds bf16 or fp16 bit patterns, every `float *` stays fp32. They widen row or element tiles
 * into per-thread fp32 scratch, run the fp32 kernel's own math and round each output once; an
 * accumulating output becomes round(old + fp32 update). See docs/kernels-matmul.md section
 * "16-bit kernels".
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

/* The decode GEMV (gemv_bf16.c): out (rows, OC) = inp (rows, C) @ W^T + bias, W (OC, C) and inp
 * and bias (OC, may be NULL) bf16, out fp32 or bf16 (rounded once); fp32 sums in a fixed order
 * per row (independent of the other rows and of threads). Returns 1 when done, 0 when it does
 * not apply (more than ZERO__GEMV_ROWS rows, or a CPU without AVX512-BF16 / ZERO_ISA below
 * avx512): the caller then runs its GEMM. */
#define ZERO__GEMV_ROWS 4
int zero__gemv_bf16(void *out, zero_dtype_t out_dtype, const void *inp, const void *w,
                    const void *bias, size_t rows, size_t C, size_t OC, int threads);

/* How a 16-bit GEMM of `dtype` runs here, e.g. "oneDNN matmul brg:avx512_core_amx_bf16" or
 * "fp32 widening + oneDNN 2.6.3 (dnnl_sgemm)". Creates (and caches) a small primitive on first
 * use. Static or cached string, valid for the process. */
const char *zero__matmul_lp_impl(zero_dtype_t dtype);

/* The hardware path of zero__matmul_lp_impl(dtype) in one word: "AMX" (oneDNN on the AMX tiles),
 * "AVX512-BF16" (oneDNN on the bf16 dot-product instructions), "oneDNN" (another oneDNN kernel,
 * which converts to fp32 inside), or "widening" (to fp32, then the fp32 GEMM). Static string. */
const char *zero__matmul_lp_path(zero_dtype_t dtype);

/* Destroy every cached oneDNN primitive (dnnl_matmul.c: the fp32 forward's too). Only when no
 * thread is inside a matmul (tests). */
void zero__matmul_lp_cache_clear(void);

/* ------------------------------------------------------------------------------ 16-bit I/O */

/* LayerNorm forward (as zero__layernorm_forward). out, inp: (BT, C) dt; weight, bias: (C) dt;
 * mean, rstd: (BT) fp32. */
void zero__layernorm_forward_lp(void *out, float *mean, float *rstd, const void *inp,
                                const void *weight, const void *bias, zero_dtype_t dt, size_t BT,
                                size_t C, int threads);

/* LayerNorm backward, accumulates (+=). dinp, dout, inp: (BT, C) dt; dweight, dbias: (C) dt or
 * both NULL (summed over rows in fp32, rounded once); weight: (C) dt; mean, rstd: (BT) fp32. */
void zero__layernorm_backward_lp(void *dinp, void *dweight, void *dbias, const void *dout,
                                 const void *inp, const void *weight, const float *mean,
                                 const float *rstd, zero_dtype_t dt, size_t BT, size_t C,
                                 int threads);

/* GELU (tanh form). out, inp: (n) dt; out == inp allowed. */
void zero__gelu_forward_lp(void *out, const void *inp, zero_dtype_t dt, size_t n, int threads);

/* GELU backward, accumulates: dinp += gelu'(inp) * dout. All (n) dt. */
void zero__gelu_backward_lp(void *dinp, const void *inp, const void *dout, zero_dtype_t dt,
                            size_t n, int threads);

/* out = a + b, overwrites; all (n) dt; out may alias a or b. */
void zero__residual_forward_lp(void *out, const void *a, const void *b, zero_dtype_t dt, size_t n,
                               int threads);

/* Token + position embedding, overwrites: out[b,t,:] = round(wte[tokens[b,t],:] + wpe[t,:]).
 * out: (B, T, C) dt; tokens: (B, T); wte: (V, C) dt; wpe: (maxT >= T, C) dt. */
void zero__embedding_forward_lp(void *out, const int32_t *tokens, const void *wte, const void *wpe,
                                zero_dtype_t dt, size_t B, size_t T, size_t C, int threads);

/* Embedding backward, accumulates: every row of dwte (V, C) and dwpe (maxT, C) (dt, either may
 * be NULL) receives round(old + sum of its dout (B, T, C) rows), the sum in fp32 over positions
 * in increasing order: one rounding per row however often a token occurs. tokens in [0, V). */
void zero__embedding_backward_lp(void *dwte, void *dwpe, const void *dout, const int32_t *tokens,
                                 zero_dtype_t dt, size_t B, size_t T, size_t C, size_t V,
                                 int threads);

/* Fused softmax + cross-entropy forward and backward (as zero__softmax_ce_forward_backward) on
 * fp32 logits (BT, Vp), writing losses (BT) fp32 and dlogits (BT, Vp) in dt: each element the
 * fp32 kernel's value rounded once. dloss carries the loss scale (fp16 loss scaling). */
void zero__softmax_ce_forward_backward_lp(float *losses, void *dlogits, zero_dtype_t dt,
                                          const float *logits, const int32_t *targets, float dloss,
                                          size_t BT, size_t V, size_t Vp, int threads);

/* Scratch floats the 16-bit attention kernels need (forward and backward) for sequence length
 * T, head size hs and `threads` threads. */
size_t zero__attention_scratch_count_lp(size_t T, size_t hs, int threads);

/* Causal self-attention forward (as zero__attention_forward). out: (B, T, C) dt; att:
 * (B, NH, T, T) fp32 probabilities; inp: (B, T, 3C) dt; scratch: count above, clobbered. Each
 * head's q, k, v are widened to fp32, the fp32 attention runs on them, out is rounded once. */
void zero__attention_forward_lp(void *out, float *att, const void *inp, float *scratch,
                                zero_dtype_t dt, size_t B, size_t T, size_t C, size_t NH,
                                int threads);

/* zero__attention_decode (kernels.h) on 16-bit tensors: out (B, T, C), q (B, T, ldq) and the
 * cache kc, vc (B, NH, head_stride) in dt; each task widens its head's queries and the cached
 * keys and values of positions [0, pos + T) to fp32, runs the fp32 block and rounds the output
 * once, as zero__attention_forward_lp does, so its rows are that kernel's. pos + T <= max_keys;
 * scratch: zero__attention_decode_scratch_count_lp(max_keys, C / NH, threads) floats. */
size_t zero__attention_decode_scratch_count_lp(size_t max_keys, size_t hs, int threads);
void zero__attention_decode_lp(void *out, float *scratch, const void *q, size_t ldq, const void *kc,
                               const void *vc, size_t head_stride, zero_dtype_t dt, size_t B,
                               size_t T, size_t pos, size_t C, size_t NH, size_t max_keys,
                               int threads);

/* Attention backward, accumulates into dinp (B, T, 3C) dt: round(old + fp32 dq, dk, dv).
 * dout: (B, T, C) dt; inp: (B, T, 3C) dt; att: the forward's fp32 probabilities. */
void zero__attention_backward_lp(void *dinp, float *scratch, const void *dout, const void *inp,
                                 const float *att, zero_dtype_t dt, size_t B, size_t T, size_t C,
                                 size_t NH, int threads);

#endif /* ZERO_KERNELS_LP_H */
