/* fp8.c — FP8 E4M3 / E5M2 conversions (fp8.h): the scalar forms here, the array forms through
 * the instruction-set level's loops (isa/spans.c), both on fp8_elem.h. */
#include "kernels/fp8.h"

#include "kernels/fp8_elem.h"
#include "kernels/isa.h"

const char *zero__fp8_name(zero__fp8_format_t f) { return f == ZERO__FP8_E4M3 ? "e4m3" : "e5m2"; }
float zero__fp8_max(zero__fp8_format_t f) { return zero__fp8_float(zero__fp8_fmts[f].max_bits); }

uint8_t zero__fp8_encode1(float x, zero__fp8_format_t f) {
    return zero__fp8_enc(x, &zero__fp8_fmts[f]);
}
float zero__fp8_decode1(uint8_t c, zero__fp8_format_t f) {
    return zero__fp8_dec(c, &zero__fp8_fmts[f], f == ZERO__FP8_E4M3);
}

void zero__fp8_encode(uint8_t *out, const float *x, size_t n, float scale, zero__fp8_format_t f) {
    zero__isa_current()->fp8_encode(out, x, n, scale, f);
}
void zero__fp8_decode(float *out, const uint8_t *c, size_t n, float scale, zero__fp8_format_t f) {
    zero__isa_current()->fp8_decode(out, c, n, scale, f);
}
