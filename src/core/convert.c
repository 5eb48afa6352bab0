/* convert.c — vectorised fp32 <-> bf16 / fp16 array conversions.
 *
 * Contract: bitwise identical to the scalar reference in dtype.c for every input, so which path
 * ran never changes a result. The hardware instructions differ from that reference in three
 * corners, each patched here:
 * - vcvtne2ps2bf16 (AVX512-BF16) treats fp32 subnormal inputs as zero: a 32-element chunk that
 *   holds one is redone with the integer rounding (rare: gradients that small are noise).
 * - vcvtps2ph keeps the top payload bits of a NaN; the reference returns sign | 0x7e00. NaN
 *   inputs are replaced by the canonical quiet NaN of their sign before converting, which the
 *   instruction maps to exactly sign | 0x7e00.
 * - vcvtph2ps quiets a signalling NaN; the reference keeps the payload as is. NaN lanes are
 *   rebuilt from the bits.
 * Tails (count not a multiple of the vector width) go through the scalar reference itself.
 * Not here: conversion inside kernels (they call these or fuse their own).
 * The implementation is chosen once per process with __builtin_cpu_supports (functions carry
 * target attributes, so the build does not need -march=native) and can be forced for tests.
 */
#include "core_internal.h"

#include <assert.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

typedef enum { IMPL_SCALAR, IMPL_F16C, IMPL_AVX512, IMPL_AVX512BF16, IMPL_COUNT } impl_t;

static const char *const impl_names[] = {
    [IMPL_SCALAR] = "scalar",
    [IMPL_F16C] = "f16c",
    [IMPL_AVX512] = "avx512",
    [IMPL_AVX512BF16] = "avx512bf16",
};
static_assert(ZERO_ARRAY_LEN(impl_names) == IMPL_COUNT, "impl name table");

/* -1 = not chosen yet. Relaxed is enough: every value is a valid choice on its own. */
static atomic_int chosen = -1;

/* ------------------------------------------------------------------------------ scalar */

static void f32_to_bf16_scalar(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = zero_fp32_to_bf16(in[i]);
}
static void bf16_to_f32_scalar(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = zero_bf16_to_fp32(in[i]);
}
static void f32_to_f16_scalar(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = zero_fp32_to_fp16(in[i]);
}
static void f16_to_f32_scalar(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = zero_fp16_to_fp32(in[i]);
}

#ifdef HAVE_X86
/* ------------------------------------------------------------------------------ F16C (AVX2) */

#define T_F16C __attribute__((target("avx2,f16c")))

T_F16C static void f32_to_f16_f16c(uint16_t *out, const float *in, size_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i qnan = _mm256_set1_epi32(0x7fc00000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(in + i));
        __m256i a = _mm256_and_si256(u, abs_mask);
        /* a > inf as signed ints: both are non-negative, so this is the unsigned compare */
        __m256i is_nan = _mm256_cmpgt_epi32(a, inf);
        __m256i canon = _mm256_or_si256(_mm256_andnot_si256(abs_mask, u), qnan);
        u = _mm256_blendv_epi8(u, canon, is_nan);
        __m128i h = _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(out + i), h);
    }
    f32_to_f16_scalar(out + i, in + i, n - i);
}

T_F16C static void f16_to_f32_f16c(float *out, const uint16_t *in, size_t n) {
    const __m256i exp16 = _mm256_set1_epi32(0x7c00);
    const __m256i mant16 = _mm256_set1_epi32(0x3ff);
    const __m256i sign16 = _mm256_set1_epi32(0x8000);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(in + i));
        __m256 f = _mm256_cvtph_ps(h);
        __m256i w = _mm256_cvtepu16_epi32(h);
        __m256i mant = _mm256_and_si256(w, mant16);
        __m256i is_nan = _mm256_andnot_si256(_mm256_cmpeq_epi32(mant, _mm256_setzero_si256()),
                                             _mm256_cmpeq_epi32(_mm256_and_si256(w, exp16), exp16));
        __m256i exact = _mm256_or_si256(
            _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, sign16), 16), inf),
            _mm256_slli_epi32(mant, 13));
        __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(f), exact, is_nan);
        _mm256_storeu_si256((__m256i *)(out + i), r);
    }
    f16_to_f32_scalar(out + i, in + i, n - i);
}

T_F16C static void bf16_to_f32_avx2(float *out, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(in + i)));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(w, 16));
    }
    bf16_to_f32_scalar(out + i, in + i, n - i);
}

T_F16C static void f32_to_bf16_avx2(uint16_t *out, const float *in, size_t n) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int k = 0; k < 2; k++) {
            __m256i u = _mm256_loadu_si256((const __m256i *)(in + i + 8 * k));
            __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
            __m256i rounded =
                _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
            __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
            r[k] = _mm256_blendv_epi8(rounded, nan, is_nan);
        }
        /* packus works per 128-bit lane: fix the order with a 64-bit permute */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(out + i), p);
    }
    f32_to_bf16_scalar(out + i, in + i, n - i);
}

/* ------------------------------------------------------------------------------ AVX-512 */

#define T_512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* 16 floats -> 16 bf16 by integer rounding: the reference's formula, lane-wise. */
T_512 static inline __m256i bf16_round16(__m512i u) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    __mmask16 is_nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), _mm512_set1_epi32(0x7f800000));
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    r = _mm512_srli_epi32(r, 16);
    __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, r, nan));
}

T_512 static void f32_to_bf16_avx512(uint16_t *out, const float *in, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(in + i));
        _mm256_storeu_si256((__m256i *)(out + i), bf16_round16(u));
    }
    f32_to_bf16_scalar(out + i, in + i, n - i);
}

T_512 static void bf16_to_f32_avx512(float *out, const uint16_t *in, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + i)));
        _mm512_storeu_si512((void *)(out + i), _mm512_slli_epi32(w, 16));
    }
    bf16_to_f32_scalar(out + i, in + i, n - i);
}

T_512 static void f32_to_f16_avx512(uint16_t *out, const float *in, size_t n) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    const __m512i qnan = _mm512_set1_epi32(0x7fc00000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(in + i));
        __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        __m512i canon = _mm512_or_si512(_mm512_andnot_si512(abs_mask, u), qnan);
        u = _mm512_mask_blend_epi32(is_nan, u, canon);
        __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(u), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)(out + i), h);
    }
    f32_to_f16_scalar(out + i, in + i, n - i);
}

T_512 static void f16_to_f32_avx512(float *out, const uint16_t *in, size_t n) {
    const __m512i exp16 = _mm512_set1_epi32(0x7c00);
    const __m512i mant16 = _mm512_set1_epi32(0x3ff);
    const __m512i sign16 = _mm512_set1_epi32(0x8000);
    const __m512i inf = _mm512_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(in + i));
        __m512 f = _mm512_cvtph_ps(h);
        __m512i w = _mm512_cvtepu16_epi32(h);
        __mmask16 is_nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(w, exp16), exp16) &
                           _mm512_test_epi32_mask(w, mant16);
        if (is_nan) { /* rare: rebuild NaNs from the bits (payload kept, not quieted) */
            __m512i exact = _mm512_or_si512(
                _mm512_slli_epi32(_mm512_and_si512(w, sign16), 16),
                _mm512_or_si512(inf, _mm512_slli_epi32(_mm512_and_si512(w, mant16), 13)));
            f = _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_nan, _mm512_castps_si512(f), exact));
        }
        _mm512_storeu_ps(out + i, f);
    }
    f16_to_f32_scalar(out + i, in + i, n - i);
}

/* ------------------------------------------------------------------------------ AVX512-BF16 */

#define T_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

T_BF16 static void f32_to_bf16_avx512bf16(uint16_t *out, const float *in, size_t n) {
    const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
    const __m512i mant_mask = _mm512_set1_epi32(0x007fffff);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i lo = _mm512_loadu_si512((const void *)(in + i));
        __m512i hi = _mm512_loadu_si512((const void *)(in + i + 16));
        /* subnormal = exponent field 0 and mantissa non-zero: the instruction flushes those */
        __mmask16 sub_lo =
            _mm512_testn_epi32_mask(lo, exp_mask) & _mm512_test_epi32_mask(lo, mant_mask);
        __mmask16 sub_hi =
            _mm512_testn_epi32_mask(hi, exp_mask) & _mm512_test_epi32_mask(hi, mant_mask);
        if ((sub_lo | sub_hi) == 0) {
            __m512bh b = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
            _mm512_storeu_si512((void *)(out + i), (__m512i)b);
        } else {
            _mm256_storeu_si256((__m256i *)(out + i), bf16_round16(lo));
            _mm256_storeu_si256((__m256i *)(out + i + 16), bf16_round16(hi));
        }
    }
    f32_to_bf16_avx512(out + i, in + i, n - i);
}
#endif /* HAVE_X86 */

/* ------------------------------------------------------------------------------ dispatch */

static const struct {
    void (*to_bf16)(uint16_t *, const float *, size_t);
    void (*from_bf16)(float *, const uint16_t *, size_t);
    void (*to_f16)(uint16_t *, const float *, size_t);
    void (*from_f16)(float *, const uint16_t *, size_t);
} impls[IMPL_COUNT] = {
    [IMPL_SCALAR] = {f32_to_bf16_scalar, bf16_to_f32_scalar, f32_to_f16_scalar, f16_to_f32_scalar},
#ifdef HAVE_X86
    [IMPL_F16C] = {f32_to_bf16_avx2, bf16_to_f32_avx2, f32_to_f16_f16c, f16_to_f32_f16c},
    [IMPL_AVX512] = {f32_to_bf16_avx512, bf16_to_f32_avx512, f32_to_f16_avx512, f16_to_f32_avx512},
    [IMPL_AVX512BF16] = {f32_to_bf16_avx512bf16, bf16_to_f32_avx512, f32_to_f16_avx512,
                         f16_to_f32_avx512},
#endif
};

static int impl_supported(impl_t impl) {
#ifdef HAVE_X86
    switch (impl) {
    case IMPL_SCALAR: return 1;
    case IMPL_F16C: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case IMPL_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    case IMPL_AVX512BF16:
        return impl_supported(IMPL_AVX512) && __builtin_cpu_supports("avx512bf16");
    default: return 0;
    }
#else
    return impl == IMPL_SCALAR;
#endif
}

static impl_t best_impl(void) {
    for (int i = IMPL_COUNT - 1; i > IMPL_SCALAR; i--)
        if (impl_supported((impl_t)i)) return (impl_t)i;
    return IMPL_SCALAR;
}

static impl_t current(void) {
    int c = atomic_load_explicit(&chosen, memory_order_relaxed);
    if (c < 0) {
        c = (int)best_impl();
        atomic_store_explicit(&chosen, c, memory_order_relaxed);
    }
    return (impl_t)c;
}

const char *zero_convert_impl(void) { return impl_names[current()]; }

zero_status_t zero_convert_set_impl(const char *name) {
    if (!name) {
        atomic_store_explicit(&chosen, (int)best_impl(), memory_order_relaxed);
        return ZERO_OK;
    }
    for (int i = 0; i < IMPL_COUNT; i++) {
        if (strcmp(name, impl_names[i]) != 0) continue;
        if (!impl_supported((impl_t)i))
            return zero__error(ZERO_ERR_UNSUPPORTED,
                               "conversion implementation '%s' needs instructions this CPU "
                               "lacks (expected one of the supported: best is '%s')",
                               name, impl_names[best_impl()]);
        atomic_store_explicit(&chosen, i, memory_order_relaxed);
        return ZERO_OK;
    }
    return zero__error(ZERO_ERR_INVALID_ARG,
                       "unknown conversion implementation '%s' (expected scalar, f16c, avx512 "
                       "or avx512bf16)",
                       name);
}

void zero_fp32_to_bf16_array(uint16_t *out, const float *in, size_t count) {
    impls[current()].to_bf16(out, in, count);
}

void zero_bf16_to_fp32_array(float *out, const uint16_t *in, size_t count) {
    impls[current()].from_bf16(out, in, count);
}

void zero_fp32_to_fp16_array(uint16_t *out, const float *in, size_t count) {
    impls[current()].to_f16(out, in, count);
}

void zero_fp16_to_fp32_array(float *out, const uint16_t *in, size_t count) {
    impls[current()].from_f16(out, in, count);
}

void zero__widen(float *out, const void *in, size_t n, zero_dtype_t dt) {
    switch (dt) {
    case ZERO_DTYPE_FP32: memmove(out, in, n * sizeof(float)); break;
    case ZERO_DTYPE_BF16: zero_bf16_to_fp32_array(out, in, n); break;
    case ZERO_DTYPE_FP16: zero_fp16_to_fp32_array(out, in, n); break;
    default: ZERO_ASSERT(!"dtype is not fp32, bf16 or fp16");
    }
}

void zero__narrow(void *out, const float *in, size_t n, zero_dtype_t dt) {
    switch (dt) {
    case ZERO_DTYPE_FP32: memmove(out, in, n * sizeof(float)); break;
    case ZERO_DTYPE_BF16: zero_fp32_to_bf16_array(out, in, n); break;
    case ZERO_DTYPE_FP16: zero_fp32_to_fp16_array(out, in, n); break;
    default: ZERO_ASSERT(!"dtype is not fp32, bf16 or fp16");
    }
}
