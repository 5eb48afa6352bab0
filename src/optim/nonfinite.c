/* nonfinite.c — is any element of a gradient buffer inf or NaN? (fp32, bf16, fp16)
 *
 * The test is on the exponent field only: all ones means inf or NaN in all three formats, so no
 * float compare is needed and NaN payloads cannot fool it. The AVX-512 path ORs a block's
 * compare masks together and checks once per block (an early exit per vector would cost a
 * branch per 64 bytes on a scan that is almost always clean). Chosen once, at run time, with
 * __builtin_cpu_supports; the scalar path is the fallback and the test's second oracle.
 */
#include "optim_internal.h"

#include "core/core_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

enum { BLOCK = 4096 }; /* elements per early-exit check */

int zero__has_nonfinite_scalar(const void *buf, size_t count, zero_dtype_t dtype) {
    if (dtype == ZERO_DTYPE_FP32) {
        const uint32_t *u = buf;
        for (size_t i0 = 0; i0 < count; i0 += BLOCK) {
            size_t n = ZERO_MIN((size_t)BLOCK, count - i0);
            uint32_t hit = 0;
            for (size_t i = 0; i < n; i++) hit |= (u[i0 + i] & 0x7f800000u) == 0x7f800000u;
            if (hit) return 1;
        }
        return 0;
    }
    ZERO_ASSERT(dtype == ZERO_DTYPE_BF16 || dtype == ZERO_DTYPE_FP16);
    const uint16_t e = dtype == ZERO_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
    const uint16_t *h = buf;
    for (size_t i0 = 0; i0 < count; i0 += BLOCK) {
        size_t n = ZERO_MIN((size_t)BLOCK, count - i0);
        unsigned hit = 0;
        for (size_t i = 0; i < n; i++) hit |= (h[i0 + i] & e) == e;
        if (hit) return 1;
    }
    return 0;
}

#ifdef HAVE_X86
__attribute__((target("avx512f,avx512bw"))) static int nonfinite_avx512_32(const uint32_t *u,
                                                                           size_t count) {
    const __m512i e = _mm512_set1_epi32(0x7f800000);
    size_t i = 0;
    while (i < count) {
        size_t end = ZERO_MIN(count, i + BLOCK);
        __mmask16 hit = 0;
        for (; i + 16 <= end; i += 16) {
            __m512i x = _mm512_loadu_si512((const void *)(u + i));
            hit |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, e), e);
        }
        if (i < end) { /* tail of the whole buffer: masked load, lanes beyond read as 0 */
            __mmask16 m = (__mmask16)((1u << (end - i)) - 1u);
            __m512i x = _mm512_maskz_loadu_epi32(m, u + i);
            hit |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, e), e);
            i = end;
        }
        if (hit) return 1;
    }
    return 0;
}

__attribute__((target("avx512f,avx512bw"))) static int
nonfinite_avx512_16(const uint16_t *h, size_t count, uint16_t exp_mask) {
    const __m512i e = _mm512_set1_epi16((short)exp_mask);
    size_t i = 0;
    while (i < count) {
        size_t end = ZERO_MIN(count, i + BLOCK);
        __mmask32 hit = 0;
        for (; i + 32 <= end; i += 32) {
            __m512i x = _mm512_loadu_si512((const void *)(h + i));
            hit |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, e), e);
        }
        if (i < end) {
            __mmask32 m = (__mmask32)((1ull << (end - i)) - 1u);
            __m512i x = _mm512_maskz_loadu_epi16(m, h + i);
            hit |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x, e), e);
            i = end;
        }
        if (hit) return 1;
    }
    return 0;
}

static int have_avx512bw(void) {
    /* __builtin_cpu_supports reads a table filled by a constructor; cheap to call each time. */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif

int zero__has_nonfinite(const void *buf, size_t count, zero_dtype_t dtype) {
    ZERO_ASSERT(dtype == ZERO_DTYPE_FP32 || dtype == ZERO_DTYPE_BF16 || dtype == ZERO_DTYPE_FP16);
    ZERO_ASSERT(buf || count == 0);
#ifdef HAVE_X86
    if (have_avx512bw()) {
        if (dtype == ZERO_DTYPE_FP32) return nonfinite_avx512_32(buf, count);
        return nonfinite_avx512_16(buf, count, dtype == ZERO_DTYPE_BF16 ? 0x7f80u : 0x7c00u);
    }
#endif
    return zero__has_nonfinite_scalar(buf, count, dtype);
}
