/* kernels.h — fp32 CPU kernels of the GPT reference model (internal API, llm.c layout).
 *
 * What it is: forward and backward of every layer the model needs (linear, layernorm, GELU,
 * causal self-attention, residual, embeddings, fused softmax + cross-entropy) and the AdamW
 * update, each multi-threaded and each with a naive twin in reference.c (zero__ref_*).
 * What it is not: it allocates no model memory and knows nothing about ranks or the engine.
 *
 * Conventions (llm.c train_gpt2.c):
 * - Activations are row-major (B, T, C); BT = B * T rows. Linear weights are stored [out, in]
 *   (PyTorch layout): out(BT, OC) = inp(BT, C) · weight(OC, C)ᵀ + bias(OC).
 * - Arguments go `out, in..., sizes, threads` like memcpy. Every pointer is borrowed for the
 *   duration of the call; nothing is retained.
 * - `threads` (>= 1) is how many cores this call may use. It applies to the calling thread
 *   only: several rank threads of one process can each call kernels with their own share of
 *   the cores (matmuls run on oneDNN's OpenMP runtime, whose thread count is per calling
 *   thread; see docs/kernels-matmul.md). Results are deterministic for a given `threads`.
 * - Backward kernels ACCUMULATE (+=) into every gradient buffer (zero them once per step),
 *   except where a comment says "overwrites" (softmax_ce_backward). A NULL gradient pointer
 *   means "not needed" and is skipped where the comment says so.
 * - Thread safety: kernels keep no global state, so concurrent calls on different buffers are
 *   safe. Not async-signal-safe; none of them fails, so they return void (shape or pointer
 *   misuse is our own bug and trips ZERO_ASSERT).
 */
#ifndef ZERO_KERNELS_H
#define ZERO_KERNELS_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------ matmul */

/* Row-major single-precision GEMM on the chosen library (oneDNN):
 * C(M, N) = alpha * op(A)(M, K) · op(B)(K, N) + beta * C, op(X) = Xᵀ when trans_x != 0.
 * lda/ldb/ldc are row strides in elements of the stored matrices (A is (K, M) when trans_a). */
void zero__sgemm(int trans_a, int trans_b, size_t M, size_t N, size_t K, float alpha,
                 const float *A, size_t lda, const float *B, size_t ldb, float beta, float *C,
                 size_t ldc, int threads);

/* Linear forward, overwrites out.
 * out:    (BT, OC)
 * inp:    (BT, C)
 * weight: (OC, C)   [out, in]
 * bias:   (OC) or NULL */
void zero__matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                          size_t BT, size_t C, size_t OC, int threads);

/* The decode GEMV (gemv_fp32.c): the same product for a few rows, each weight row read once in
 * place; fp32 sums in a fixed order per output (independent of the other rows and of threads).
 * Returns 1 when done, 0 when it does not apply (more than ZERO__GEMV_FP32_ROWS rows, or ZERO_ISA
 * / the CPU below avx512): the caller then runs zero__matmul_forward. */
#define ZERO__GEMV_FP32_ROWS 16
int zero__gemv_fp32(float *out, const float *inp, const float *w, const float *bias, size_t rows,
                    size_t C, size_t OC, int threads);

/* Linear backward, accumulates (+=) into each gradient; any of dinp, dweight, dbias may be NULL.
 * dinp:    (BT, C)    += dout · weight
 * dweight: (OC, C)    += doutᵀ · inp
 * dbias:   (OC)       += column sums of dout
 * dout:    (BT, OC)
 * inp:     (BT, C)
 * weight:  (OC, C) */
void zero__matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, size_t BT, size_t C, size_t OC,
                           int threads);

/* Make the calling thread's next GEMM-library call (and OpenMP regions) use `threads` threads
 * (1 inside a parallel region). Returns the OpenMP thread count those regions get: 1 inside a
 * parallel region or without OpenMP, else threads. Shared by matmul.c and matmul_lp.c. */
int zero__matmul_set_threads(int threads);

/* Best measured throughput (FLOP/s) of a 2048^3 GEMM of dtype dt on `threads` threads of the
 * calling thread, over at least 5 repetitions (~0.5-0.6 s; allocates up to 48 MiB for the call):
 * FP32 on zero__sgemm, BF16 (bf16 operands, fp32 result) on zero__gemm_lp, the calls the model's
 * GEMMs make. The MFU denominator when neither --peak nor a calibration file gives one. Returns
 * 0 if the buffers cannot be allocated. */
double zero__matmul_peak_flops(zero_dtype_t dt, int threads);

/* Best measured copy rate (bytes copied per second; each byte is read and written, so the
 * memory traffic is twice this) of `bytes`-byte copies (zero__copy on `threads` threads of the
 * calling thread), over `reps` calls (membw.c). The memory figure of `zero plan --calibrate`
 * (1 thread) and of the run report's roofline (the run's threads per rank). Returns 0 if the
 * two buffers cannot be allocated. */
double zero__memcpy_rate(size_t bytes, int reps, int threads);

/* Name of the matmul library in use, e.g. "oneDNN 2.6.3 (dnnl_sgemm)". Static string. */
const char *zero__matmul_library(void);

/* ------------------------------------------------------------------------------ layernorm */

/* LayerNorm over the last dimension, eps = 1e-5 (biased variance). Overwrites out/mean/rstd.
 * out:    (BT, C)
 * mean:   (BT)      saved for backward
 * rstd:   (BT)      saved for backward, 1 / sqrt(var + eps)
 * inp:    (BT, C)
 * weight: (C), bias: (C) */
void zero__layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, size_t BT, size_t C,
                             int threads);

/* LayerNorm backward, accumulates (+=); dweight/dbias may be NULL.
 * dinp: (BT, C), dweight: (C), dbias: (C)
 * dout: (BT, C), inp: (BT, C), weight: (C), mean: (BT), rstd: (BT) */
void zero__layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean,
                              const float *rstd, size_t BT, size_t C, int threads);

/* ------------------------------------------------------------------------------ GELU */

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Overwrites out.
 * out: (n), inp: (n). out == inp is allowed. */
void zero__gelu_forward(float *out, const float *inp, size_t n, int threads);

/* GELU backward, accumulates: dinp += gelu'(inp) * dout. dinp: (n), inp: (n), dout: (n). */
void zero__gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, int threads);

/* ------------------------------------------------------------------------------ attention */

/* Causal multi-head self-attention, head size hs = C / NH (C % NH == 0).
 * Overwrites out and att.
 * out: (B, T, C)         heads concatenated: out[b,t,h*hs + i]
 * att: (B, NH, T, T)     softmax probabilities saved for backward; att[b,h,t,s] for s <= t.
 *                        Entries above the diagonal (s > t) are unspecified (not all written).
 * inp: (B, T, 3C)        qkv: q = inp[..., 0:C], k = inp[..., C:2C], v = inp[..., 2C:3C]
 * scores = q·kᵀ / sqrt(hs), masked for s > t, softmax over s, out = att · v. */
void zero__attention_forward(float *out, float *att, const float *inp, size_t B, size_t T, size_t C,
                             size_t NH, int threads);

/* Scratch floats attention_backward needs for sequence length T and `threads` threads. */
size_t zero__attention_scratch_count(size_t T, int threads);

/* Attention backward, accumulates into dinp.
 * dinp:    (B, T, 3C)  += dq, dk, dv
 * scratch: (zero__attention_scratch_count(T, threads)) floats, contents ignored and clobbered
 * dout:    (B, T, C)
 * inp:     (B, T, 3C)  the forward's qkv
 * att:     (B, NH, T, T) the forward's probabilities */
void zero__attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                              const float *att, size_t B, size_t T, size_t C, size_t NH,
                              int threads);

/* Attention of T new query rows per sequence, at positions [pos, pos + T), against a key/value
 * cache that already holds positions [0, pos + T) (the new rows' own keys and values included):
 * incremental decoding (pos > 0, T = 1) and chunked prefill. Each output row is computed like
 * row pos + t of zero__attention_forward over the whole sequence, with the same sums in the same
 * order: the same bits where the softmax runs on AVX2 or above (zero__isa_selected), within
 * rounding below. Overwrites out.
 * out:     (B, T, C)            heads concatenated
 * scratch: zero__attention_decode_scratch_count(>= pos + T, threads) floats, clobbered
 * q:       (B, T, ldq)          the queries of head h at q[(b T + t) ldq + h hs + i] (qkv: 3C)
 * kc, vc:  (B, NH, head_stride) keys and values of (b, h) at kc + (b NH + h) head_stride, one
 *                               row of hs = C / NH floats per position */
void zero__attention_decode(float *out, float *scratch, const float *q, size_t ldq, const float *kc,
                            const float *vc, size_t head_stride, size_t B, size_t T, size_t pos,
                            size_t C, size_t NH, int threads);
size_t zero__attention_decode_scratch_count(size_t max_keys, int threads);

/* ------------------------------------------------------------------------------ residual */

/* out = a + b, overwrites. out, a, b: (n). out may alias a or b. */
void zero__residual_forward(float *out, const float *a, const float *b, size_t n, int threads);

/* da += dout; db += dout. da, db, dout: (n). */
void zero__residual_backward(float *da, float *db, const float *dout, size_t n, int threads);

/* ------------------------------------------------------------------------------ embedding */

/* Token + position embedding, overwrites out: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
 * out: (B, T, C), tokens: (B, T) each in [0, V), wte: (V, C), wpe: (maxT >= T, C) */
void zero__embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                             size_t B, size_t T, size_t C, int threads);

/* Embedding backward, accumulates: dwte[tokens[b,t],:] += dout[b,t,:], dwpe[t,:] += dout[b,t,:].
 * dwte: (V, C) or NULL, dwpe: (maxT, C) or NULL, dout: (B, T, C), tokens: (B, T) */
void zero__embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                              size_t B, size_t T, size_t C, int threads);

/* ------------------------------------------------------------------------------ softmax + CE */

/* Fused softmax + cross-entropy over the first V of Vp (>= V) columns; columns [V, Vp) are
 * padding and ignored. A target < 0 marks an ignored position: its loss is 0 (and its gradient
 * 0 in backward). Overwrites losses and lse.
 * losses:  (BT)      -log softmax(logits)[target]
 * lse:     (BT)      log-sum-exp of each row, saved for backward (may be NULL if unused)
 * logits:  (BT, Vp)
 * targets: (BT)      each in [0, V) or < 0 */
void zero__softmax_ce_forward(float *losses, float *lse, const float *logits,
                              const int32_t *targets, size_t BT, size_t V, size_t Vp, int threads);

/* Backward, OVERWRITES dlogits: dlogits[i,j] = (softmax(logits[i])[j] - [j == target_i]) *
 * dlosses[i] for j < V, 0 for padding columns j >= V and for ignored rows.
 * dlogits may alias logits (in place: saves a (BT, Vp) buffer).
 * dlogits: (BT, Vp), logits: (BT, Vp), lse: (BT) from forward, dlosses: (BT), targets: (BT) */
void zero__softmax_ce_backward(float *dlogits, const float *logits, const float *lse,
                               const float *dlosses, const int32_t *targets, size_t BT, size_t V,
                               size_t Vp, int threads);

/* Forward and backward in one pass over the logits, for the usual case where the loss gradient
 * is known before the forward (mean loss: dloss = 1 / number of counted positions). Overwrites
 * losses and dlogits exactly as softmax_ce_forward followed by softmax_ce_backward with
 * dlosses[i] = dloss would; dlogits may alias logits. Each row is read from memory once instead
 * of twice (the row stays in L2 between the passes).
 * losses: (BT), dlogits: (BT, Vp), logits: (BT, Vp), targets: (BT) */
void zero__softmax_ce_forward_backward(float *losses, float *dlogits, const float *logits,
                                       const int32_t *targets, float dloss, size_t BT, size_t V,
                                       size_t Vp, int threads);

/* ------------------------------------------------------------------------------ LM head + loss */

/* Backward of the LM head and softmax + cross-entropy, chunked over the vocabulary
 * (lm_head.c): the gradient of the logits is made ZERO__LM_HEAD_CHUNK columns at a time into a
 * scratch that stays in cache and fed to both GEMMs there, so the (BT, V) dlogits tensor is never
 * stored. 4096 columns: 4 MiB at BT = 256 (in L3), and within the noise of the fastest width
 * measured at the GPT-2 124M shape (docs/benchmarks.md). */
#define ZERO__LM_HEAD_CHUNK 4096

/* Floats of scratch zero__lm_head_ce_backward needs for BT rows and vocabulary V. */
size_t zero__lm_head_scratch_count(size_t BT, size_t V);

/* For the mean-type loss whose gradient per counted position is dloss (as
 * zero__softmax_ce_forward_backward's), with dlogits = (softmax(logits) - onehot(target)) *
 * dloss (0 on rows with target < 0): OVERWRITES dinp = dlogits · weight and ACCUMULATES
 * dweight += dlogitsᵀ · inp. dlogits is made element by element as softmax_ce_forward_backward
 * makes it (bitwise); dinp is summed chunk by chunk and dweight's rows come from GEMMs of the
 * chunk's height, so both are bitwise the unfused calls' only when V <= ZERO__LM_HEAD_CHUNK.
 * dinp: (BT, C), dweight: (V, C), scratch: zero__lm_head_scratch_count floats,
 * logits: (BT, V) and lse: (BT) from zero__softmax_ce_forward, inp: (BT, C) the head's input,
 * weight: (V, C) [out, in], targets: (BT) each in [0, V) or < 0 */
void zero__lm_head_ce_backward(float *dinp, float *dweight, float *scratch, const float *logits,
                               const float *lse, const float *inp, const float *weight,
                               const int32_t *targets, float dloss, size_t BT, size_t C, size_t V,
                               int threads);

/* ------------------------------------------------------------------------------ AdamW */

/* One AdamW step over a flat range, in place (Loshchilov & Hutter; PyTorch's AdamW):
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   p -= lr * ( (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * p )
 * Decoupled weight decay uses the parameter before this step's update. t is the 1-based step
 * count. A NO_DECAY tensor is updated with weight_decay = 0.
 * params, grads, m, v: (n) */
void zero__adamw_update(float *params, const float *grads, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int t,
                        int threads);

/* ------------------------------------------------------------------------------ vector passes */

/* Whole-buffer passes of the optimizer step (gradient norm, clipping, accumulation, zeroing),
 * multi-threaded; every result is bitwise independent of `threads` (vector.c). */

/* Sum of x[i]^2 in float64, in a fixed blocked order that depends on n only (not the plain
 * serial order: the result differs from a serial loop by rounding, ~1e-16 relative). NaN or
 * Inf in x gives NaN or Inf. x: (n) */
double zero__sumsq(const float *x, size_t n, int threads);

/* x *= s, in place. x: (n) */
void zero__scale(float *x, float s, size_t n, int threads);

/* acc += x. acc, x: (n), not overlapping unless equal. */
void zero__add_into(float *acc, const float *x, size_t n, int threads);

/* x = 0 (all bits zero). x: (n) */
void zero__zero(float *x, size_t n, int threads);

/* dst = src, bytes of them, not overlapping (memcpy on a team of threads). */
void zero__copy(void *dst, const void *src, size_t bytes, int threads);

/* ------------------------------------------------------------------------------ references */

/* Naive single-threaded twins of every kernel above (reference.c), written independently from
 * the plain formulas, same arguments and accumulate/overwrite semantics. For tests only. */
void zero__ref_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                              size_t BT, size_t C, size_t OC);
void zero__ref_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, size_t BT, size_t C,
                               size_t OC);
void zero__ref_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, size_t BT, size_t C);
void zero__ref_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean,
                                  const float *rstd, size_t BT, size_t C);
void zero__ref_gelu_forward(float *out, const float *inp, size_t n);
void zero__ref_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void zero__ref_attention_forward(float *out, float *att, const float *inp, size_t B, size_t T,
                                 size_t C, size_t NH);
void zero__ref_attention_backward(float *dinp, const float *dout, const float *inp,
                                  const float *att, size_t B, size_t T, size_t C, size_t NH);
void zero__ref_residual_forward(float *out, const float *a, const float *b, size_t n);
void zero__ref_residual_backward(float *da, float *db, const float *dout, size_t n);
void zero__ref_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                 const float *wpe, size_t B, size_t T, size_t C);
void zero__ref_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                  const int32_t *tokens, size_t B, size_t T, size_t C);
void zero__ref_softmax_ce_forward(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, size_t BT, size_t V, size_t Vp);
void zero__ref_softmax_ce_backward(float *dlogits, const float *logits, const float *lse,
                                   const float *dlosses, const int32_t *targets, size_t BT,
                                   size_t V, size_t Vp);
double zero__ref_sumsq(const float *x, size_t n);
void zero__ref_scale(float *x, float s, size_t n);
void zero__ref_add_into(float *acc, const float *x, size_t n);
void zero__ref_adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int t);

#endif /* ZERO_KERNELS_H */
