/* toy_grads.h — the gradients the engine tests feed by hand: element i of unit u at step s,
 * micro-step m, from world rank r. Exact fp32 values (multiples of 1/64 in [-30/64, 30/64]), so
 * sums over ranks and micro-steps are exact, and different per rank, so groups' means differ. */
#ifndef ZERO_TESTS_ZERO_TOY_GRADS_H
#define ZERO_TESTS_ZERO_TOY_GRADS_H

#include <stddef.h>

static inline float toy_grad(int r, int u, int s, int m, size_t i) {
    return (float)((int)((i * 7 + (size_t)u * 13 + (size_t)r * 29 + (size_t)s * 5 + (size_t)m) %
                         61) -
                   30) /
           64.0f;
}

#endif /* ZERO_TESTS_ZERO_TOY_GRADS_H */
