/* fuzz_ckpt.c — fuzz target for the checkpoint readers: the shard-file header parser, the
 * manifest parser and the safetensors header check (src/ckpt/shard.c, manifest.c, st_header.c),
 * which see every byte of a file before anything is loaded.
 *
 * The input's first byte picks the reader (bit 2 set: safetensors; else bit 0 clear: shard
 * header, set: manifest); the rest is the file. With bit 1 set, a shard header's own CRC32C is
 * recomputed first, so that mutations reach the checks behind the checksum (block table, chunk
 * table, sizes) instead of stopping at it. A reader may refuse the input (it should, almost always)
 * but must never crash, hang, read out of bounds or leak: libFuzzer with ASan/UBSan checks that
 * (fuzz/README.md), and fuzz_ckpt_smoke.c drives the same entry point with mutations of valid files
 * in every build.
 */
#include "ckpt/ckpt_internal.h"
#include "zero/ckpt.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] & 4) {
        (void)zero_ckpt_parse_safetensors_header(data + 1, size - 1);
        return 0;
    }
    if (data[0] % 2 == 0 && (data[0] & 2) && size - 1 >= ZERO__CKPT_FIXED_HEADER_BYTES) {
        size_t n = size - 1;
        unsigned char *b = malloc(n);
        if (!b) return 0;
        memcpy(b, data + 1, n);
        uint64_t nb = (uint64_t)zero__get_u32(b + 24) * zero__get_u32(b + 28);
        uint64_t chunks = zero__get_u64(b + 72);
        if (nb < n && chunks < n) {
            uint64_t table =
                ZERO__CKPT_FIXED_HEADER_BYTES + nb * ZERO__CKPT_BLOCK_ENTRY_BYTES + chunks * 4 + 4;
            if (table <= n) zero__put_u32(b + table - 4, zero__crc32c(0, b, (size_t)table - 4));
        }
        (void)zero_ckpt_parse_shard_header(b, n);
        free(b);
    } else if (data[0] % 2 == 0)
        (void)zero_ckpt_parse_shard_header(data + 1, size - 1);
    else
        (void)zero_ckpt_parse_manifest((const char *)data + 1, size - 1);
    return 0;
}
