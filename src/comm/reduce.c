/* reduce.c — the rank-order reduction kernel shared by every backend.
 *
 * out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], left to right. Floats accumulate in their
 * own precision except fp16/bf16, which accumulate in fp32 and round once (RNE) at the end.
 * Integers wrap modulo 2^bits (computed in unsigned arithmetic, so no undefined overflow). Max
 * keeps the earlier value unless a later one compares greater.
 *
 * Work is tiled so an accumulator tile stays in L1 while the n inputs stream through it. Types
 * that accumulate in their own precision use the output itself as the accumulator (one pass fewer
 * over memory) unless the output is one of the later inputs, which the first pass would clobber.
 */
#include "reduce.h"

#include "core/core_internal.h"

#include <string.h>

#define TILE 1024

#define DEFINE_REDUCE(name, T, ACC, LOAD, STORE, SUM)                                              \
    static void name(void *out, const void *const *in, int n, size_t count, zero_op_t op) {        \
        ACC acc[TILE];                                                                             \
        for (size_t base = 0; base < count; base += TILE) {                                        \
            size_t len = ZERO_MIN((size_t)TILE, count - base);                                     \
            const T *first = (const T *)in[0] + base;                                              \
            for (size_t i = 0; i < len; i++) acc[i] = LOAD(first[i]);                              \
            for (int k = 1; k < n; k++) {                                                          \
                const T *src = (const T *)in[k] + base;                                            \
                if (op == ZERO_OP_SUM) {                                                           \
                    for (size_t i = 0; i < len; i++) acc[i] = SUM(acc[i], LOAD(src[i]));           \
                } else {                                                                           \
                    for (size_t i = 0; i < len; i++) {                                             \
                        ACC v = LOAD(src[i]);                                                      \
                        if (v > acc[i]) acc[i] = v;                                                \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            T *dst = (T *)out + base;                                                              \
            for (size_t i = 0; i < len; i++) dst[i] = STORE(acc[i]);                               \
        }                                                                                          \
    }

/* Same order as DEFINE_REDUCE, accumulating in out: out = in0 op in1, then out = out op in_k. */
#define DEFINE_REDUCE_IN_OUT(name, T, SUM)                                                         \
    static void name(void *out, const void *const *in, int n, size_t count, zero_op_t op) {        \
        for (size_t base = 0; base < count; base += TILE) {                                        \
            size_t len = ZERO_MIN((size_t)TILE, count - base);                                     \
            T *dst = (T *)out + base;                                                              \
            const T *a = (const T *)in[0] + base;                                                  \
            if (n == 1) {                                                                          \
                if (dst != a) memcpy(dst, a, len * sizeof(T));                                     \
                continue;                                                                          \
            }                                                                                      \
            for (int k = 1; k < n; k++) {                                                          \
                const T *src = (const T *)in[k] + base;                                            \
                if (op == ZERO_OP_SUM) {                                                           \
                    for (size_t i = 0; i < len; i++) dst[i] = SUM(a[i], src[i]);                   \
                } else {                                                                           \
                    for (size_t i = 0; i < len; i++) dst[i] = src[i] > a[i] ? src[i] : a[i];       \
                }                                                                                  \
                a = dst;                                                                           \
            }                                                                                      \
        }                                                                                          \
    }

#define IDENT(x) (x)
#define PLUS(a, b) ((a) + (b))
/* Wrapping integer sums: add as unsigned, convert back (implementation-defined, two's
 * complement on every compiler we build with, never undefined). */
#define WRAP_I8(a, b) ((int8_t)(uint8_t)((uint8_t)(a) + (uint8_t)(b)))
#define WRAP_U8(a, b) ((uint8_t)((a) + (b)))
#define WRAP_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))

DEFINE_REDUCE(reduce_fp32, float, float, IDENT, IDENT, PLUS)
DEFINE_REDUCE(reduce_fp64, double, double, IDENT, IDENT, PLUS)
DEFINE_REDUCE(reduce_fp16, uint16_t, float, zero_fp16_to_fp32, zero_fp32_to_fp16, PLUS)
DEFINE_REDUCE(reduce_bf16, uint16_t, float, zero_bf16_to_fp32, zero_fp32_to_bf16, PLUS)
DEFINE_REDUCE(reduce_int8, int8_t, int8_t, IDENT, IDENT, WRAP_I8)
DEFINE_REDUCE(reduce_uint8, uint8_t, uint8_t, IDENT, IDENT, WRAP_U8)
DEFINE_REDUCE(reduce_int32, int32_t, int32_t, IDENT, IDENT, WRAP_I32)
DEFINE_REDUCE_IN_OUT(reduce_out_fp32, float, PLUS)
DEFINE_REDUCE_IN_OUT(reduce_out_fp64, double, PLUS)
DEFINE_REDUCE_IN_OUT(reduce_out_int8, int8_t, WRAP_I8)
DEFINE_REDUCE_IN_OUT(reduce_out_uint8, uint8_t, WRAP_U8)
DEFINE_REDUCE_IN_OUT(reduce_out_int32, int32_t, WRAP_I32)

/* Accumulating in out is safe unless out is (inside) one of the inputs after the first: the
 * first pass of a tile would overwrite that input's values before they are added. */
static int out_is_safe_accumulator(const void *out, const void *const *in, int n, size_t bytes) {
    uintptr_t o = (uintptr_t)out;
    for (int k = 1; k < n; k++) {
        uintptr_t p = (uintptr_t)in[k];
        if (bytes && o < p + bytes && p < o + bytes) return 0;
    }
    return 1;
}

void zero__reduce_blocks(void *out, const void *const *in, int n, size_t count, zero_dtype_t dtype,
                         zero_op_t op) {
    ZERO_ASSERT(n >= 1);
    if (out_is_safe_accumulator(out, in, n, count * zero_dtype_size(dtype))) {
        switch (dtype) {
        case ZERO_DTYPE_FP32: reduce_out_fp32(out, in, n, count, op); return;
        case ZERO_DTYPE_FP64: reduce_out_fp64(out, in, n, count, op); return;
        case ZERO_DTYPE_INT8: reduce_out_int8(out, in, n, count, op); return;
        case ZERO_DTYPE_UINT8: reduce_out_uint8(out, in, n, count, op); return;
        case ZERO_DTYPE_INT32: reduce_out_int32(out, in, n, count, op); return;
        default: break; /* fp16 and bf16 accumulate in fp32 */
        }
    }
    switch (dtype) {
    case ZERO_DTYPE_FP32: reduce_fp32(out, in, n, count, op); break;
    case ZERO_DTYPE_FP64: reduce_fp64(out, in, n, count, op); break;
    case ZERO_DTYPE_FP16: reduce_fp16(out, in, n, count, op); break;
    case ZERO_DTYPE_BF16: reduce_bf16(out, in, n, count, op); break;
    case ZERO_DTYPE_INT8: reduce_int8(out, in, n, count, op); break;
    case ZERO_DTYPE_UINT8: reduce_uint8(out, in, n, count, op); break;
    case ZERO_DTYPE_INT32: reduce_int32(out, in, n, count, op); break;
    default: ZERO_ASSERT(!"dtype checked by the front end");
    }
}

/* ------------------------------------------------------------------------------ partial sums */

size_t zero__reduce_acc_size(zero_dtype_t dtype) {
    return dtype == ZERO_DTYPE_FP16 || dtype == ZERO_DTYPE_BF16 ? sizeof(float)
                                                                : zero_dtype_size(dtype);
}

/* fp16/bf16 partials in fp32: the accumulator of DEFINE_REDUCE, kept between calls. The same
 * operations (acc + LOAD(x), or max keeping the earlier value) in the same order. */
#define DEFINE_PARTIAL_HALF(name, LOAD)                                                            \
    static void name(float *acc, const float *acc_in, const void *const *in, int n, size_t count,  \
                     zero_op_t op) {                                                               \
        for (size_t base = 0; base < count; base += TILE) {                                        \
            size_t len = ZERO_MIN((size_t)TILE, count - base);                                     \
            float *a = acc + base;                                                                 \
            int k = 0;                                                                             \
            if (acc_in) {                                                                          \
                if (a != acc_in + base) memcpy(a, acc_in + base, len * sizeof(float));             \
            } else {                                                                               \
                const uint16_t *first = (const uint16_t *)in[0] + base;                            \
                for (size_t i = 0; i < len; i++) a[i] = LOAD(first[i]);                            \
                k = 1;                                                                             \
            }                                                                                      \
            for (; k < n; k++) {                                                                   \
                const uint16_t *src = (const uint16_t *)in[k] + base;                              \
                if (op == ZERO_OP_SUM) {                                                           \
                    for (size_t i = 0; i < len; i++) a[i] = a[i] + LOAD(src[i]);                   \
                } else {                                                                           \
                    for (size_t i = 0; i < len; i++) {                                             \
                        float v = LOAD(src[i]);                                                    \
                        if (v > a[i]) a[i] = v;                                                    \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_PARTIAL_HALF(partial_fp16, zero_fp16_to_fp32)
DEFINE_PARTIAL_HALF(partial_bf16, zero_bf16_to_fp32)

void zero__reduce_partial(void *acc, const void *acc_in, const void *const *in, int n, size_t count,
                          zero_dtype_t dtype, zero_op_t op) {
    switch (dtype) {
    case ZERO_DTYPE_FP16: partial_fp16(acc, acc_in, in, n, count, op); return;
    case ZERO_DTYPE_BF16: partial_bf16(acc, acc_in, in, n, count, op); return;
    default: break;
    }
    /* The accumulator is the dtype: the partial is one more input, the first. */
    if (!acc_in) {
        zero__reduce_blocks(acc, in, n, count, dtype, op);
        return;
    }
    const void *all[n + 1];
    all[0] = acc_in;
    for (int k = 0; k < n; k++) all[k + 1] = in[k];
    zero__reduce_blocks(acc, all, n + 1, count, dtype, op);
}

void zero__reduce_round(void *out, const void *acc, size_t count, zero_dtype_t dtype) {
    if (dtype != ZERO_DTYPE_FP16 && dtype != ZERO_DTYPE_BF16) {
        if (out != acc) memmove(out, acc, count * zero_dtype_size(dtype));
        return;
    }
    /* Through a tile copy, so out may overlap acc (rounding in place). */
    float tmp[TILE];
    for (size_t base = 0; base < count; base += TILE) {
        size_t len = ZERO_MIN((size_t)TILE, count - base);
        memcpy(tmp, (const float *)acc + base, len * sizeof(float));
        uint16_t *dst = (uint16_t *)out + base;
        for (size_t i = 0; i < len; i++)
            dst[i] =
                dtype == ZERO_DTYPE_FP16 ? zero_fp32_to_fp16(tmp[i]) : zero_fp32_to_bf16(tmp[i]);
    }
}
