/* hash.c — a fast non-cryptographic hash of bytes, shared by the checks that compare ranks (the
 * configuration and data agreement, the replica check).
 *
 * Not here: the weights fingerprint (src/zero/accounting.c), whose canonical order and format
 * are part of the reports. The hash detects drift and mistakes, not tampering.
 */
#include "core/core_internal.h"

#include <string.h>

/* Word at a time: about one multiply per 8 bytes, so hashing the parameters costs far less than
 * a training step; the tail is taken byte by byte. */
uint64_t zero__hash_bytes(uint64_t h, const void *data, size_t bytes) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; i < bytes; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}
