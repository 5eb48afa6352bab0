/* crc32c.c — CRC32C (Castagnoli), the checksum of checkpoint chunks and headers (src/ckpt) and
 * of swap-file blocks (src/io).
 *
 * With SSE4.2 (the crc32 instruction) a buffer is cut into three parts whose CRCs run
 * interleaved (the instruction has a latency of 3 cycles and a throughput of 1, so one stream
 * runs at a third of the speed), then the three are joined with the GF(2) "combine" identity
 * crc(A || B) = crc(A) * x^(8|B|) mod P xor crc(B) (as zlib's crc32_combine). Without SSE4.2 a
 * byte table is used. The SSE4.2 path is compiled with a target attribute and chosen at run time
 * (__builtin_cpu_supports), so a build for plain x86-64 still uses it. Both give the standard
 * CRC32C (initial ~0, final xor ~0): "123456789" -> 0xE3069283; tests/core/test_crc32c checks the
 * fast path against the table.
 */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_X86 1
#endif

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */

/* a * b mod P, reflected (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static uint32_t x2n_table[64];   /* x^(2^k) mod P */
static uint32_t byte_table[256]; /* CRC of each byte value */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Called once (pthread_once): savers on several rank threads share the tables. */
static void make_tables(void) {
    uint32_t p = 1u << 30; /* x^1 */
    for (int i = 0; i < 64; i++) {
        x2n_table[i] = p;
        p = multmodp(p, p);
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        byte_table[i] = c;
    }
}

#ifdef HAVE_X86
/* x^(n * 2^k) mod P. */
static uint32_t x2nmodp(uint64_t n, unsigned k) {
    pthread_once(&tables_once, make_tables);
    uint32_t p = 1u << 31; /* x^0 */
    while (n) {
        if (n & 1) p = multmodp(x2n_table[k & 63], p);
        n >>= 1;
        k++;
    }
    return p;
}

static uint32_t combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
    return multmodp(x2nmodp(len2, 3), crc1) ^ crc2;
}
#endif

static uint32_t crc_table_bytes(uint32_t crc, const unsigned char *p, size_t bytes) {
    pthread_once(&tables_once, make_tables);
    uint32_t c = ~crc;
    while (bytes--) c = byte_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

uint32_t zero__crc32c_reference(uint32_t crc, const void *data, size_t bytes) {
    return crc_table_bytes(crc, data, bytes);
}

#ifdef HAVE_X86
/* The CRCs (from zero) of three streams of n bytes (a multiple of 8) at a, b and c, computed
 * interleaved: the crc32 instruction's latency is hidden by the other two streams. */
__attribute__((target("sse4.2"))) static inline void crc3_sse42(uint32_t out[3],
                                                                const unsigned char *a,
                                                                const unsigned char *b,
                                                                const unsigned char *c, size_t n) {
    uint64_t ca = 0xFFFFFFFFu, cb = 0xFFFFFFFFu, cc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t va, vb, vc;
        memcpy(&va, a + i, 8);
        memcpy(&vb, b + i, 8);
        memcpy(&vc, c + i, 8);
        ca = _mm_crc32_u64(ca, va);
        cb = _mm_crc32_u64(cb, vb);
        cc = _mm_crc32_u64(cc, vc);
    }
    out[0] = ~(uint32_t)ca;
    out[1] = ~(uint32_t)cb;
    out[2] = ~(uint32_t)cc;
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const unsigned char *p,
                                                            size_t bytes) {
    if (bytes >= 3 * 256) {
        size_t part = bytes / 3 / 8 * 8;
        uint32_t c3[3];
        crc3_sse42(c3, p, p + part, p + 2 * part, part);
        uint32_t r = combine(crc, c3[0], part);
        r = combine(r, c3[1], part);
        r = combine(r, c3[2], part);
        return crc_sse42(r, p + 3 * part, bytes - 3 * part);
    }
    uint64_t c64 = ~crc;
    while (bytes >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
        p += 8;
        bytes -= 8;
    }
    uint32_t c32 = (uint32_t)c64;
    while (bytes--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

#ifdef HAVE_X86
/* Three pages at a time, each its own stream: the three interleaved streams of crc_sse42 without
 * the combine, which costs about as much as a 4 KiB page's CRC. */
__attribute__((target("sse4.2"))) static void pages_sse42(uint32_t *out, const unsigned char *p,
                                                          size_t page_bytes, size_t pages) {
    size_t i = 0;
    for (; i + 3 <= pages && page_bytes % 8 == 0; i += 3) {
        const unsigned char *a = p + i * page_bytes;
        crc3_sse42(out + i, a, a + page_bytes, a + 2 * page_bytes, page_bytes);
    }
    for (; i < pages; i++) out[i] = crc_sse42(0, p + i * page_bytes, page_bytes);
}
#endif

void zero__crc32c_pages(uint32_t *out, const void *data, size_t page_bytes, size_t pages) {
    const unsigned char *p = data;
#ifdef HAVE_X86
    if (__builtin_cpu_supports("sse4.2")) {
        pages_sse42(out, p, page_bytes, pages);
        return;
    }
#endif
    for (size_t i = 0; i < pages; i++) out[i] = crc_table_bytes(0, p + i * page_bytes, page_bytes);
}

uint32_t zero__crc32c(uint32_t crc, const void *data, size_t bytes) {
#ifdef HAVE_X86
    /* __builtin_cpu_supports reads a table filled before main: cheap, and no race */
    if (__builtin_cpu_supports("sse4.2")) return crc_sse42(crc, data, bytes);
#endif
    return crc_table_bytes(crc, data, bytes);
}
