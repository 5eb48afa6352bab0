/* membw.c — the memory figure of the time models: the best of a few large memcpy calls.
 *
 * memcpy, not a read-only sum (bench/bench_membw.c measures that for decoding): a training
 * step's memory-bound passes read and write. The buffers are far past the last-level cache when
 * the caller asks for tens of MiB; best of, not mean of: noise from a shared machine only slows
 * a call down. On the caller's threads, each copying its slice, as the elementwise passes and
 * AdamW run (one thread alone does not reach what two draw from memory).
 */
#include "kernels/kernels.h"

#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

double zero__memcpy_rate(size_t bytes, int reps, int threads) {
    char *a = malloc(bytes), *b = malloc(bytes);
    double best = 0;
    if (a && b) {
        memset(a, 1, bytes); /* touched first, so page faults stay out of the timing */
        memset(b, 2, bytes);
        for (int r = 0; r < reps; r++) {
            double t0 = zero_time_now();
            zero__copy(r & 1 ? a : b, r & 1 ? b : a, bytes, threads);
            double v = (double)bytes / (zero_time_now() - t0);
            if (v > best) best = v;
        }
    }
    free(a);
    free(b);
    return best;
}
