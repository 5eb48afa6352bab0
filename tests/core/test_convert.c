/* test_convert.c — the vectorised array conversions (src/core/convert.c) against the scalar
 * conversions of src/core/dtype.c, bitwise, on every implementation this CPU supports.
 *
 * The scalar conversions are the reference (test_dtype checks them against independent
 * decoders/encoders built in double). Coverage per implementation:
 * - widening: all 65536 encodings of bf16 and of fp16;
 * - narrowing: every fp32 bit pattern with a stride of 509 (8.4 M inputs, both signs), plus edge
 *   classes: for every 16-bit value its exact fp32 value, the midpoint to the next value (the
 *   tie) and one fp32 ulp either side of it; all fp32 subnormals near zero and at the top of the
 *   subnormal range; the fp16 overflow boundary (every fp32 from 65504 to just above 65520);
 *   inf, and NaNs with many payloads (quiet and signalling).
 * Inputs go through at odd lengths and unaligned offsets so the scalar tails run too.
 */
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* A growable list of fp32 bit patterns to narrow. */
typedef struct {
    uint32_t *v;
    size_t n, cap;
} list_t;

static void push(list_t *l, uint32_t u) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1 << 16;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
    }
    l->v[l->n++] = u;
}

static void push_both_signs(list_t *l, uint32_t u) {
    push(l, u & 0x7fffffffu);
    push(l, u | 0x80000000u);
}

/* The edge classes: exact values, ties and their neighbours of both 16-bit formats, the
 * subnormal and overflow regions, infinities and NaNs. */
static void build_edges(list_t *l) {
    for (uint32_t h = 0; h < 0x7f80u; h++) { /* positive finite bf16 */
        uint32_t x = h << 16;
        uint32_t mid = x + 0x8000u; /* halfway to the next bf16 */
        push_both_signs(l, x);
        push_both_signs(l, mid);
        push_both_signs(l, mid - 1);
        push_both_signs(l, mid + 1);
    }
    for (uint32_t h = 0; h < 0x7c00u; h++) { /* positive finite fp16 */
        float a = zero_fp16_to_fp32((uint16_t)h);
        /* the next value up (65504's successor is the overflow threshold 65520's double) */
        float b = h + 1 < 0x7c00u ? zero_fp16_to_fp32((uint16_t)(h + 1)) : 65536.0f;
        uint32_t mid = f2u((a + b) * 0.5f); /* exact: fp16 neighbours differ in 11 bits */
        push_both_signs(l, f2u(a));
        push_both_signs(l, mid);
        push_both_signs(l, mid - 1);
        push_both_signs(l, mid + 1);
    }
    for (uint32_t u = 0; u < 0x20000u; u++) push_both_signs(l, u);               /* tiny */
    for (uint32_t u = 0x007e0000u; u <= 0x00810000u; u++) push_both_signs(l, u); /* sub/normal */
    for (uint32_t u = 0x477fe000u; u <= 0x47801000u; u++) push_both_signs(l, u); /* fp16 max */
    push_both_signs(l, 0x7f7fffffu); /* FLT_MAX: bf16 rounds to inf */
    push_both_signs(l, 0x7f800000u); /* inf */
    for (uint32_t p = 1; p < 0x800000u; p = p * 3 + 1) {
        push_both_signs(l, 0x7f800000u | p); /* signalling NaNs (and quiet if bit 22) */
        push_both_signs(l, 0x7fc00000u | p); /* quiet NaNs with payload */
        push_both_signs(l, 0x7f800000u | (p << 8 & 0x7fffffu) | 1u); /* low bits only */
    }
    push_both_signs(l, 0x7fc00000u);
    push_both_signs(l, 0x7fffffffu);
}

/* Narrow l's inputs through the array function, in chunks of odd length at an odd offset, and
 * compare every result with the scalar reference. */
static void check_narrow(const list_t *l, const char *impl, int bf16) {
    enum { CHUNK = 100003 };
    float *in = malloc((CHUNK + 1) * sizeof(float));
    uint16_t *out = malloc((CHUNK + 2) * sizeof(uint16_t));
    if (!in || !out) exit(2);
    size_t bad = 0;
    for (size_t i0 = 0; i0 < l->n; i0 += CHUNK) {
        size_t n = l->n - i0 < CHUNK ? l->n - i0 : CHUNK;
        for (size_t i = 0; i < n; i++) in[1 + i] = u2f(l->v[i0 + i]);
        out[1 + n] = 0xabcd; /* guard: must not be written */
        if (bf16)
            zero_fp32_to_bf16_array(out + 1, in + 1, n);
        else
            zero_fp32_to_fp16_array(out + 1, in + 1, n);
        for (size_t i = 0; i < n; i++) {
            float x = in[1 + i];
            uint16_t want = bf16 ? zero_fp32_to_bf16(x) : zero_fp32_to_fp16(x);
            if (out[1 + i] != want) {
                if (bad < 5)
                    fprintf(stderr, "  %s %s: in 0x%08x: got 0x%04x, want 0x%04x\n", impl,
                            bf16 ? "fp32->bf16" : "fp32->fp16", f2u(x), out[1 + i], want);
                bad++;
            }
        }
        CHECK(out[1 + n] == 0xabcd, "%s: wrote past the end", impl);
    }
    CHECK(bad == 0, "%s %s: %zu of %zu inputs differ from the scalar reference", impl,
          bf16 ? "fp32->bf16" : "fp32->fp16", bad, l->n);
    free(in);
    free(out);
}

static void check_widen(const char *impl, int bf16) {
    enum { N = 65536 };
    uint16_t *in = malloc((N + 3) * sizeof(uint16_t));
    float *out = malloc((N + 3) * sizeof(float));
    if (!in || !out) exit(2);
    for (size_t i = 0; i < N; i++) in[3 + i] = (uint16_t)i;
    size_t bad = 0;
    /* all at once from an odd offset, then a few short lengths for the tails */
    size_t lens[] = {N, 1, 7, 15, 17, 31, 33, 1000};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        size_t n = lens[k];
        memset(out, 0xee, (N + 3) * sizeof(float));
        if (bf16)
            zero_bf16_to_fp32_array(out + 3, in + 3, n);
        else
            zero_fp16_to_fp32_array(out + 3, in + 3, n);
        for (size_t i = 0; i < n; i++) {
            float want = bf16 ? zero_bf16_to_fp32(in[3 + i]) : zero_fp16_to_fp32(in[3 + i]);
            if (f2u(out[3 + i]) != f2u(want)) {
                if (bad < 5)
                    fprintf(stderr, "  %s %s: in 0x%04x: got 0x%08x, want 0x%08x\n", impl,
                            bf16 ? "bf16->fp32" : "fp16->fp32", in[3 + i], f2u(out[3 + i]),
                            f2u(want));
                bad++;
            }
        }
        if (n < N) CHECK(f2u(out[3 + n]) == 0xeeeeeeeeu, "%s: wrote past the end (n=%zu)", impl, n);
    }
    CHECK(bad == 0, "%s %s: %zu encodings differ from the scalar reference", impl,
          bf16 ? "bf16->fp32" : "fp16->fp32", bad);
    free(in);
    free(out);
}

int main(void) {
    const char *best = zero_convert_impl();
    printf("automatic implementation: %s\n", best);

    list_t strided = {0}, edges = {0};
    for (uint64_t u = 0; u <= 0xffffffffull; u += 509) push(&strided, (uint32_t)u);
    build_edges(&edges);
    printf("inputs: %zu strided, %zu edge cases\n", strided.n, edges.n);

    const char *impls[] = {"scalar", "f16c", "avx512", "avx512bf16"};
    int tested = 0;
    for (size_t k = 0; k < sizeof impls / sizeof impls[0]; k++) {
        zero_status_t st = zero_convert_set_impl(impls[k]);
        if (st == ZERO_ERR_UNSUPPORTED) {
            printf("%s: not supported by this CPU, skipped\n", impls[k]);
            continue;
        }
        CHECK(st == ZERO_OK, "set_impl(%s): %s", impls[k], zero_last_error());
        CHECK(strcmp(zero_convert_impl(), impls[k]) == 0, "impl is %s", zero_convert_impl());
        tested++;
        int before = failed;
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            check_widen(impls[k], bf16);
            check_narrow(&edges, impls[k], bf16);
            check_narrow(&strided, impls[k], bf16);
        }
        printf("%s: %s\n", impls[k], failed == before ? "ok" : "FAILED");
    }
    CHECK(tested >= 1, "no implementation tested");
    CHECK(zero_convert_set_impl("nonsense") == ZERO_ERR_INVALID_ARG, "unknown name accepted");
    CHECK(zero_convert_set_impl(NULL) == ZERO_OK && strcmp(zero_convert_impl(), best) == 0,
          "NULL did not restore the automatic choice");
    /* count 0 with NULL pointers is a no-op */
    zero_fp32_to_bf16_array(NULL, NULL, 0);
    zero_fp16_to_fp32_array(NULL, NULL, 0);

    free(strided.v);
    free(edges.v);
    return check_report();
}
