/* test_crc32c.c — CRC32C (src/core/crc32c.c): the standard check value, and the interleaved
 * SSE4.2 fast path against the byte-table reference on random lengths, alignments and seeds,
 * including chaining (crc(A || B) from crc(A)). */
#include "check.h"
#include "core/crc32c.h"

#include <stdlib.h>

int main(void) {
    CHECK(zero__crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value");
    CHECK(zero__crc32c_reference(0, "123456789", 9) == 0xE3069283u, "reference check value");
    size_t n = 1 << 16;
    unsigned char *b = malloc(n);
    unsigned seed = 3;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rand_r(&seed);
    int bad = 0;
    for (int it = 0; it < 500; it++) {
        size_t off = (size_t)rand_r(&seed) % 64, len = (size_t)rand_r(&seed) % (n - 64);
        uint32_t c0 = (uint32_t)rand_r(&seed);
        bad += zero__crc32c(c0, b + off, len) != zero__crc32c_reference(c0, b + off, len);
        /* chaining: crc(A || B) from crc(A) */
        size_t cut = len / 3;
        bad += zero__crc32c(zero__crc32c(0, b + off, cut), b + off + cut, len - cut) !=
               zero__crc32c(0, b + off, len);
    }
    CHECK(bad == 0, "crc32c fast path: %d mismatches", bad);
    /* per-page checksums: every page count (multiples of three and not) and page size */
    bad = 0;
    uint32_t crcs[16];
    const size_t page_sizes[] = {4096, 512, 8, 12, 1};
    for (size_t s = 0; s < sizeof page_sizes / sizeof page_sizes[0]; s++) {
        for (size_t pages = 0; pages <= 10; pages++) {
            size_t off = (size_t)rand_r(&seed) % 64;
            zero__crc32c_pages(crcs, b + off, page_sizes[s], pages);
            for (size_t i = 0; i < pages; i++)
                bad += crcs[i] !=
                       zero__crc32c_reference(0, b + off + i * page_sizes[s], page_sizes[s]);
        }
    }
    CHECK(bad == 0, "crc32c per-page: %d mismatches", bad);
    free(b);
    return check_report();
}
