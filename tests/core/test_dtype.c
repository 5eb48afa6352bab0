/* test_dtype.c — the fp16/bf16 <-> fp32 conversions of src/core/dtype.c against independent
 * references, plus dtype sizes, names and parsing.
 *
 * References: a decoder that builds each half/bfloat16 value in double arithmetic from its
 * fields (sign, exponent, mantissa), and an encoder that scales |x| by a power of two so the
 * kept significand becomes an integer and rounds it with nearbyint() (ties to even under the
 * default rounding mode); every step is exact in double. Where the CPU has F16C, the hardware
 * conversions (_cvtsh_ss / _cvtss_sh) are a second oracle for fp16.
 *
 * Coverage: to-fp32 is exhaustive over all 65536 encodings of each format; to-fp16/bf16 runs over
 * every representable value, every midpoint between neighbours and one float ulp either side of
 * it (where ties-to-even and carries into the exponent are decided), the subnormal, overflow and
 * special cases, and a few million pseudo-random bit patterns. Not covered: exhaustive 2^32
 * inputs (too slow for the suite's budget).
 */
#include "zero/core.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* The CPU's own conversions (F16C) as a second oracle where the CPU has them: compiled with a
 * target attribute, so a build for plain x86-64 checks them too. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1
__attribute__((target("f16c"))) static float hw_fp16_to_fp32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_fp32_to_fp16(float x) {
    return (uint16_t)_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
static int have_f16c(void) { return __builtin_cpu_supports("f16c"); }
#else
static int have_f16c(void) { return 0; }
#endif

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ------------------------------------------------------------------------------ references */

/* Value of a binary16 encoding, built from its fields in double (exact). NaN for NaN. */
static double ref_fp16_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0x1f)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)mant, -24);
    else
        v = ldexp(1024.0 + mant, exp - 25);
    return sign ? -v : v;
}

/* Value of a bfloat16 encoding: 8 exponent bits (bias 127), 7 mantissa bits. */
static double ref_bf16_value(uint16_t h) {
    int sign = h >> 15, exp = (h >> 7) & 0xff, mant = h & 0x7f;
    double v;
    if (exp == 0xff)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp((double)mant, -133);
    else
        v = ldexp(128.0 + mant, exp - 134);
    return sign ? -v : v;
}

/* Encode a finite or infinite (non-NaN) float into a format with `mbits` mantissa bits,
 * exponent bias `bias` and all-ones exponent `emax_field`, rounding to nearest, ties to even. */
static uint16_t ref_encode(float x, int mbits, int bias, int emax_field) {
    uint16_t sign = (f2u(x) >> 31) ? (uint16_t)0x8000 : 0;
    double a = fabs((double)x);
    uint16_t inf = (uint16_t)(sign | (emax_field << mbits));
    if (isinf(a)) return inf;
    if (a == 0) return sign;
    int e2;
    frexp(a, &e2);       /* a = m * 2^e2, m in [0.5, 1) */
    int exp = e2 - 1;    /* a in [2^exp, 2^(exp+1)) */
    int emin = 1 - bias; /* exponent of the smallest normal */
    if (exp < emin) {
        /* Subnormal: integer multiples of 2^(emin - mbits). A result of 2^mbits is the smallest
         * normal, whose encoding is the same integer. */
        double q = nearbyint(ldexp(a, mbits - emin));
        return (uint16_t)(sign | (uint16_t)q);
    }
    double q = nearbyint(ldexp(a, mbits - exp)); /* in [2^mbits, 2^(mbits+1)] */
    if (q == ldexp(1.0, mbits + 1)) {
        q = ldexp(1.0, mbits);
        exp++;
    }
    if (exp + bias >= emax_field) return inf;
    return (uint16_t)(sign | ((exp + bias) << mbits) | ((uint32_t)q - (1u << mbits)));
}

static uint16_t ref_fp32_to_fp16(float x) { return ref_encode(x, 10, 15, 0x1f); }
static uint16_t ref_fp32_to_bf16(float x) { return ref_encode(x, 7, 127, 0xff); }

static int fp16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

/* ------------------------------------------------------------------------------ to fp32 */

static void test_fp16_to_fp32_exhaustive(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float got = zero_fp16_to_fp32(h);
        double ref = ref_fp16_value(h);
        int ok;
        if (fp16_is_nan(h)) {
            /* NaN stays NaN with its sign and payload (the payload's top bits). Whether a
             * signalling NaN comes out quiet is not checked here: the header promises quiet NaNs
             * for the narrowing conversions. */
            uint32_t u = f2u(got);
            ok = isnan(got) && (u >> 31) == (uint32_t)(h >> 15) &&
                 ((u >> 13) & 0x1ff) == (uint32_t)(h & 0x1ff);
        } else {
            ok = f2u(got) == f2u((float)ref); /* bitwise: signed zeros and infinities too */
        }
#ifdef HAVE_X86
        if (have_f16c() && !fp16_is_nan(h)) ok = ok && f2u(got) == f2u(hw_fp16_to_fp32(h));
#endif
        if (!ok && bad++ < 10)
            fprintf(stderr, "FAIL fp16_to_fp32(0x%04x) = %a (0x%08x), expected %a\n", h, got,
                    f2u(got), ref);
    }
    CHECK(bad == 0, "fp16_to_fp32: %d of 65536 encodings wrong", bad);
}

static void test_bf16_to_fp32_exhaustive(void) {
    int bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float got = zero_bf16_to_fp32(h);
        double ref = ref_bf16_value(h);
        /* NaN: sign and payload kept (the quiet bit, 0x40, may be set on the way). */
        int ok = bf16_is_nan(h) ? isnan(got) && ((f2u(got) >> 16) & ~0x40u) == (h & ~0x40u)
                                : f2u(got) == f2u((float)ref);
        if (!ok && bad++ < 10)
            fprintf(stderr, "FAIL bf16_to_fp32(0x%04x) = %a (0x%08x), expected %a\n", h, got,
                    f2u(got), ref);
    }
    CHECK(bad == 0, "bf16_to_fp32: %d of 65536 encodings wrong", bad);
}

/* ------------------------------------------------------------------------------ from fp32 */

static int bad_fp16, bad_bf16;

static void check_fp16(float x) {
    uint16_t got = zero_fp32_to_fp16(x);
    if (isnan(x)) {
        /* Quiet NaN of the same sign. */
        int ok = fp16_is_nan(got) && (got & 0x200) && (got >> 15) == (f2u(x) >> 31);
        if (!ok && bad_fp16++ < 10)
            fprintf(stderr, "FAIL fp32_to_fp16(NaN 0x%08x) = 0x%04x, expected a quiet NaN\n",
                    f2u(x), got);
        return;
    }
    uint16_t ref = ref_fp32_to_fp16(x);
    int ok = got == ref;
#ifdef HAVE_X86
    if (have_f16c()) ok = ok && got == hw_fp32_to_fp16(x);
#endif
    if (!ok && bad_fp16++ < 10)
        fprintf(stderr, "FAIL fp32_to_fp16(%a = 0x%08x) = 0x%04x, expected 0x%04x\n", x, f2u(x),
                got, ref);
}

static void check_bf16(float x) {
    uint16_t got = zero_fp32_to_bf16(x);
    if (isnan(x)) {
        int ok = bf16_is_nan(got) && (got & 0x40) && (got >> 15) == (f2u(x) >> 31);
        if (!ok && bad_bf16++ < 10)
            fprintf(stderr, "FAIL fp32_to_bf16(NaN 0x%08x) = 0x%04x, expected a quiet NaN\n",
                    f2u(x), got);
        return;
    }
    uint16_t ref = ref_fp32_to_bf16(x);
    if (got != ref && bad_bf16++ < 10)
        fprintf(stderr, "FAIL fp32_to_bf16(%a = 0x%08x) = 0x%04x, expected 0x%04x\n", x, f2u(x),
                got, ref);
}

/* x, its float neighbours, and the same for -x. */
static void check_around(void (*check)(float), float x) {
    float v[3] = {x, nextafterf(x, INFINITY), nextafterf(x, -INFINITY)};
    for (int i = 0; i < 3; i++) {
        check(v[i]);
        check(-v[i]);
    }
}

static uint64_t rng_state = 0x1234567887654321ull;
static uint32_t rng32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 32);
}

static void test_fp32_to_fp16(void) {
    bad_fp16 = 0;
    /* Every finite positive fp16 value, and the midpoint to the next one (a tie: the result is
     * the neighbour with an even mantissa) with one float ulp either side. */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double a = ref_fp16_value((uint16_t)h);
        double b = h + 1 < 0x7c00 ? ref_fp16_value((uint16_t)(h + 1)) : 65520.0;
        check_around(check_fp16, (float)a);
        check_around(check_fp16, (float)((a + b) / 2)); /* exact: 12 significant bits */
    }
    /* Edge cases by name. */
    const float edges[] = {
        0.0f,         -0.0f,        INFINITY,    -INFINITY,  65504.0f,   65519.0f,     65519.996f,
        65520.0f,     65536.0f,     1e10f,       FLT_MAX,    FLT_MIN,    FLT_TRUE_MIN, 0x1p-24f,
        0x1p-25f,     0x1.8p-25f,   0x1p-26f,    0x1.8p-24f, 0x1.4p-24f, 0x1p-14f,     0x1.ffcp-15f,
        0x1.ffep-15f, 0x1.fffp-15f, 1.0f,        0x1.002p0f, 0x1.006p0f, 2047.0f,      2049.0f,
        2051.0f,      0.1f,         1.0f / 3.0f,
    };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check_around(check_fp16, edges[i]);
    /* NaNs: quiet, signalling, with payloads, both signs. */
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u,
                             0x7f802000u, 0xffc00000u, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) check_fp16(u2f(nans[i]));
    /* Random bit patterns, and random values in and around the fp16 range. */
    for (int i = 0; i < 1000000; i++) {
        check_fp16(u2f(rng32()));
        uint32_t u = rng32();
        uint32_t exp = 127 - 26 + (u >> 27) % 44; /* 2^-26 .. 2^17 */
        check_fp16(u2f((u & 0x807fffffu) | exp << 23));
    }
    CHECK(bad_fp16 == 0, "fp32_to_fp16: %d inputs wrong", bad_fp16);
}

static void test_fp32_to_bf16(void) {
    bad_bf16 = 0;
    for (uint32_t h = 0; h < 0x7f80; h++) {
        double a = ref_bf16_value((uint16_t)h);
        double b = h + 1 < 0x7f80 ? ref_bf16_value((uint16_t)(h + 1)) : ldexp(1.0, 128);
        check_around(check_bf16, (float)a);
        if (h + 1 < 0x7f80) {
            check_around(check_bf16, (float)((a + b) / 2)); /* exact: 9 significant bits */
        } else {
            /* The midpoint between the largest bf16 and 2^128 is not a float; its neighbours
             * below are (FLT_MAX rounds to inf). */
            check_around(check_bf16, FLT_MAX);
        }
    }
    const float edges[] = {0.0f,         -0.0f,       INFINITY,    -INFINITY, FLT_MAX,    FLT_MIN,
                           FLT_TRUE_MIN, 0x1.fep127f, 0x1.ffp127f, 1.0f,      0x1.01p0f,  0x1.03p0f,
                           0.1f,         1.0f / 3.0f, 0x1p-133f,   0x1p-134f, 0x1.8p-134f};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) check_around(check_bf16, edges[i]);
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fffffffu,
                             0x7f80ffffu, 0xff800001u, 0xffc00000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) check_bf16(u2f(nans[i]));
    for (int i = 0; i < 2000000; i++) check_bf16(u2f(rng32()));
    CHECK(bad_bf16 == 0, "fp32_to_bf16: %d inputs wrong", bad_bf16);
}

/* Every non-NaN encoding survives the round trip to fp32 and back bitwise (-0 included). */
static void test_round_trips(void) {
    int bad16 = 0, badbf = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        if (!fp16_is_nan(h) && zero_fp32_to_fp16(zero_fp16_to_fp32(h)) != h) bad16++;
        if (!bf16_is_nan(h) && zero_fp32_to_bf16(zero_bf16_to_fp32(h)) != h) badbf++;
    }
    CHECK(bad16 == 0, "fp16 round trip: %d encodings changed", bad16);
    CHECK(badbf == 0, "bf16 round trip: %d encodings changed", badbf);
}

/* Named cases, so a failure message is readable without decoding bits. */
static void test_named_cases(void) {
    CHECK(zero_fp32_to_fp16(65520.0f) == 0x7c00, "65520 must overflow to inf (tie to even)");
    CHECK(zero_fp32_to_fp16(65519.0f) == 0x7bff, "65519 must round to 65504");
    CHECK(zero_fp32_to_fp16(0x1p-25f) == 0x0000, "2^-25 is a tie between 0 and 2^-24: to 0");
    CHECK(zero_fp32_to_fp16(0x1.8p-24f) == 0x0002, "1.5 * 2^-24 ties to even: 2 * 2^-24");
    CHECK(zero_fp32_to_fp16(-0.0f) == 0x8000, "-0 keeps its sign");
    CHECK(zero_fp32_to_fp16(0x1.002p0f) == 0x3c00, "1 + 2^-11 ties to even: 1");
    CHECK(zero_fp32_to_fp16(0x1.006p0f) == 0x3c02, "1 + 3 * 2^-11 ties to even: 1 + 2^-9");
    CHECK(zero_fp32_to_bf16(0x1.01p0f) == 0x3f80, "1 + 2^-8 ties to even: 1");
    CHECK(zero_fp32_to_bf16(0x1.03p0f) == 0x3f82, "1 + 3 * 2^-8 ties to even: 1 + 2^-6");
    CHECK(zero_fp32_to_bf16(FLT_MAX) == 0x7f80, "FLT_MAX must round to inf in bf16");
    CHECK(zero_fp16_to_fp32(0x0001) == 0x1p-24f, "smallest fp16 subnormal is 2^-24");
    CHECK(zero_fp16_to_fp32(0x7bff) == 65504.0f, "largest fp16 is 65504");
    CHECK(zero_bf16_to_fp32(0x0001) == 0x1p-133f, "smallest bf16 subnormal is 2^-133");
}

static void test_dtype_table(void) {
    const struct {
        zero_dtype_t dtype;
        const char *name;
        size_t size;
    } want[] = {{ZERO_DTYPE_FP32, "fp32", 4},  {ZERO_DTYPE_FP64, "fp64", 8},
                {ZERO_DTYPE_FP16, "fp16", 2},  {ZERO_DTYPE_BF16, "bf16", 2},
                {ZERO_DTYPE_INT8, "int8", 1},  {ZERO_DTYPE_UINT8, "uint8", 1},
                {ZERO_DTYPE_INT32, "int32", 4}};
    CHECK(sizeof want / sizeof want[0] == ZERO_DTYPE_COUNT, "dtype table of the test is stale");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        zero_dtype_t parsed = ZERO_DTYPE_COUNT;
        CHECK(zero_dtype_size(want[i].dtype) == want[i].size, "size of %s", want[i].name);
        CHECK(strcmp(zero_dtype_name(want[i].dtype), want[i].name) == 0, "name of %s",
              want[i].name);
        CHECK(zero_dtype_parse(want[i].name, &parsed) == ZERO_OK && parsed == want[i].dtype,
              "parse %s", want[i].name);
    }
    zero_dtype_t out;
    CHECK(zero_dtype_size(ZERO_DTYPE_COUNT) == 0, "size of an invalid dtype is 0");
    CHECK(strcmp(zero_dtype_name((zero_dtype_t)99), "?") == 0, "name of an invalid dtype");
    CHECK(zero_dtype_parse("float17", &out) == ZERO_ERR_INVALID_ARG, "parse of an unknown name");
    CHECK(strstr(zero_last_error(), "float17") != NULL, "the message names the bad value: %s",
          zero_last_error());
    CHECK(zero_dtype_parse(NULL, &out) == ZERO_ERR_INVALID_ARG, "parse of NULL");
    CHECK(strcmp(zero_status_str(ZERO_OK), "ok") == 0, "status name of ok");
    CHECK(strcmp(zero_status_str((zero_status_t)-100), "unknown status") == 0, "unknown status");
    for (int s = 0; s < ZERO_STATUS_COUNT; s++)
        CHECK(zero_status_str((zero_status_t)-s) != NULL, "status %d has a name", -s);
}

int main(void) {
    test_fp16_to_fp32_exhaustive();
    test_bf16_to_fp32_exhaustive();
    test_fp32_to_fp16();
    test_fp32_to_bf16();
    test_round_trips();
    test_named_cases();
    test_dtype_table();
    if (!have_f16c())
        printf("note: no F16C on this CPU; fp16 checked against the double reference only\n");
    return check_report();
}
