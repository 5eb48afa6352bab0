/* fp8.h — FP8 E4M3 and E5M2 (OCP OFP8 v1.0: ml_dtypes' float8_e4m3fn and float8_e5m2) to and
 * from fp32, fp8.c; the element format of FP8 compute and of 1-byte parameter all-gathers.
 *
 * Formats: E4M3 has bias 7, no infinity, NaN only at S.1111.111 (0x7F / 0xFF), max 448 (0x7E);
 * E5M2 has bias 15, infinities at S.11111.00 and NaNs at S.11111.{01,10,11}, max 57344 (0x7B).
 * Encoding rounds to nearest, ties to even, and saturates (Transformer Engine's satfinite, the
 * convention of NVIDIA's FP8 conversions): a finite value or an infinity beyond the largest
 * finite magnitude becomes it (±448, ±57344), so a scaled tensor never turns into NaN or Inf by
 * overflowing; a NaN becomes the format's NaN 0x7F with its sign. (ml_dtypes' cast does not
 * saturate: the tests clip before comparing with it.) Negative zero keeps its sign (0x80).
 * Decoding is exact (every FP8 value is an fp32 value). The array forms scale on the way:
 * encode writes enc(x[i] * scale), decode writes dec(c[i]) * scale, each product rounded to fp32
 * once; both are branch-free per element (the compiler vectorises them) and bitwise equal to
 * the one-element forms.
 */
#ifndef ZERO_KERNELS_FP8_H
#define ZERO_KERNELS_FP8_H

#include <stddef.h>
#include <stdint.h>

typedef enum { ZERO__FP8_E4M3, ZERO__FP8_E5M2, ZERO__FP8_FORMAT_COUNT } zero__fp8_format_t;

/* "e4m3" / "e5m2" */
const char *zero__fp8_name(zero__fp8_format_t f);
/* The largest finite magnitude: 448 (E4M3), 57344 (E5M2). */
float zero__fp8_max(zero__fp8_format_t f);

uint8_t zero__fp8_encode1(float x, zero__fp8_format_t f);
float zero__fp8_decode1(uint8_t c, zero__fp8_format_t f);

/* out[i] = enc(x[i] * scale) for i < n. */
void zero__fp8_encode(uint8_t *out, const float *x, size_t n, float scale, zero__fp8_format_t f);
/* out[i] = dec(c[i]) * scale for i < n. */
void zero__fp8_decode(float *out, const uint8_t *c, size_t n, float scale, zero__fp8_format_t f);

#endif /* ZERO_KERNELS_FP8_H */
