/* crc32c.h — CRC32C (Castagnoli) of a byte range (crc32c.c): the checksum of checkpoint chunks
 * (src/ckpt) and of swap-file blocks (src/io).
 *
 * Standard CRC32C (initial ~0, final xor ~0, reflected polynomial 0x82F63B78): "123456789" gives
 * 0xE3069283. Chaining works: zero__crc32c(zero__crc32c(0, a, n), a + n, m) equals
 * zero__crc32c(0, a, n + m). Thread-safe; pointers are borrowed for the call.
 */
#ifndef ZERO_CORE_CRC32C_H
#define ZERO_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC32C of bytes at data, continuing from crc (0 to start). SSE4.2 when the CPU has it. */
uint32_t zero__crc32c(uint32_t crc, const void *data, size_t bytes);
/* out[i] = zero__crc32c(0, data + i * page_bytes, page_bytes) for i < pages: the per-page
 * checksums of consecutive pages, three pages interleaved (about 3x one page at a time for 4 KiB
 * pages). out(pages) and data(pages * page_bytes) are borrowed for the call. */
void zero__crc32c_pages(uint32_t *out, const void *data, size_t page_bytes, size_t pages);
/* The byte-table implementation (tests compare the fast path with it). */
uint32_t zero__crc32c_reference(uint32_t crc, const void *data, size_t bytes);

#endif /* ZERO_CORE_CRC32C_H */
