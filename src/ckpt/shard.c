/* shard.c — per-rank shard files: `rank-RRRRR.params` (fp32 master) and `rank-RRRRR.optim`
 * (Adam m then v), written sequentially and read by ranges with chunk verification.
 *
 * Layout (little-endian; docs/checkpoint-format.md): an 80-byte fixed header, a block table
 * (one entry per unit and state), a CRC32C per chunk of 2^20 elements, a CRC32C of the header
 * itself, zero padding to 4096 bytes, then the blocks' fp32 data back to back. A block holds the
 * rank's whole shard of the padded unit buffer [r*S, (r+1)*S), padding (zeros) included, so a
 * block is a plain range and resharding is slicing.
 *
 * The parser trusts nothing: every count and offset is checked against the file's size and the
 * shard arithmetic before it is used (the fuzz target in fuzz/ drives it).
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Write-back is started every this many bytes while a shard file is written. */
#define FLUSH_BYTES ((uint64_t)32 << 20)

static int states_of(int kind) { return kind == ZERO__CKPT_KIND_PARAMS ? 1 : 2; }
static zero_ckpt_state_t state_of(int kind, int index) {
    return kind == ZERO__CKPT_KIND_PARAMS ? ZERO_CKPT_PARAMS
                                          : (index == 0 ? ZERO_CKPT_ADAM_M : ZERO_CKPT_ADAM_V);
}
static uint64_t chunks_of(uint64_t count) {
    return (count + ZERO__CKPT_CHUNK_ELEMS - 1) / ZERO__CKPT_CHUNK_ELEMS;
}

/* ------------------------------------------------------------------------------ writing */

zero_status_t zero__shard_write(const char *path, int kind, int rank, int world, int64_t step,
                                uint64_t nonce, const zero_ckpt_layout_t *layout,
                                const zero_ckpt_shard_io_t *io) {
    if (!io || !io->get)
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint save: shard io has no get callback");
    int ns = states_of(kind), nu = layout->unit_count;
    size_t nb = (size_t)nu * (size_t)ns;
    zero__shard_block_t *blocks = calloc(nb ? nb : 1, sizeof *blocks);
    if (!blocks) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint save: out of memory");
    uint64_t chunk_total = 0;
    for (int u = 0; u < nu; u++) {
        size_t off, cnt;
        zero_ckpt_shard_range(layout->units[u].param_count, world, rank, &off, &cnt);
        for (int s = 0; s < ns; s++) {
            zero__shard_block_t *b = &blocks[(size_t)u * ns + s];
            b->unit_param_count = layout->units[u].param_count;
            b->shard_offset = off;
            b->shard_count = cnt;
            b->first_chunk = chunk_total;
            chunk_total += chunks_of(cnt);
        }
    }
    size_t table_bytes = ZERO__CKPT_FIXED_HEADER_BYTES + nb * ZERO__CKPT_BLOCK_ENTRY_BYTES +
                         (size_t)chunk_total * 4 + 4;
    uint64_t header_bytes = zero__align_up(table_bytes, ZERO__CKPT_DATA_ALIGN);
    uint64_t cursor = header_bytes;
    for (size_t i = 0; i < nb; i++) {
        blocks[i].data_offset_bytes = cursor;
        cursor += blocks[i].shard_count * 4;
    }
    uint64_t file_bytes = cursor;

    unsigned char *hdr = calloc(header_bytes, 1);
    uint32_t *crc = calloc(chunk_total ? chunk_total : 1, sizeof *crc);
    float *buf = malloc(ZERO__CKPT_CHUNK_ELEMS * sizeof(float));
    zero_status_t st = ZERO_OK;
    int fd = -1;
    if (!hdr || !crc || !buf) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint save: out of memory for %s", path);
        goto done;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        st = zero__error(ZERO_ERR_IO, "cannot create %s: %s", path, strerror(errno));
        goto done;
    }
    /* Data first, the header (which holds the CRCs) last: a file cut short is caught either by
     * its size or by a header that is still zeros (no magic). */
    if ((st = zero__pwrite_all(fd, hdr, header_bytes, 0, path)) != ZERO_OK) goto done;
    uint64_t written = header_bytes, flushed = 0;
    if (lseek(fd, (off_t)header_bytes, SEEK_SET) < 0) {
        st = zero__error(ZERO_ERR_IO, "cannot seek in %s: %s", path, strerror(errno));
        goto done;
    }
    for (int u = 0; u < nu; u++) {
        for (int s = 0; s < ns; s++) {
            const zero__shard_block_t *b = &blocks[(size_t)u * ns + s];
            for (uint64_t c = 0; c < chunks_of(b->shard_count); c++) {
                uint64_t begin = c * ZERO__CKPT_CHUNK_ELEMS;
                size_t n = (size_t)ZERO_MIN(ZERO__CKPT_CHUNK_ELEMS, b->shard_count - begin);
                st = io->get(io->user, rank, u, state_of(kind, s), b->shard_offset + begin, n, buf);
                if (st != ZERO_OK) goto done;
                crc[b->first_chunk + c] = zero__crc32c(0, buf, n * sizeof(float));
                if ((st = zero__write_all(fd, buf, n * sizeof(float), path)) != ZERO_OK) goto done;
                written += n * sizeof(float);
                if (written - flushed >= FLUSH_BYTES) {
                    /* Start write-back of what is written so far, without waiting: the disk
                     * works while the next chunks are produced, and the final fsync has
                     * little left to do (best effort; fsync below is the guarantee). */
                    sync_file_range(fd, (off_t)flushed, (off_t)(written - flushed),
                                    SYNC_FILE_RANGE_WRITE);
                    flushed = written;
                }
            }
        }
    }
    memcpy(hdr, ZERO__CKPT_SHARD_MAGIC, 8);
    zero__put_u32(hdr + 8, ZERO_CKPT_FORMAT_VERSION);
    zero__put_u32(hdr + 12, (uint32_t)kind);
    zero__put_u32(hdr + 16, (uint32_t)rank);
    zero__put_u32(hdr + 20, (uint32_t)world);
    zero__put_u32(hdr + 24, (uint32_t)nu);
    zero__put_u32(hdr + 28, (uint32_t)ns);
    zero__put_u64(hdr + 32, ZERO__CKPT_CHUNK_ELEMS);
    zero__put_u64(hdr + 40, header_bytes);
    zero__put_u64(hdr + 48, file_bytes);
    zero__put_u64(hdr + 56, (uint64_t)step);
    zero__put_u64(hdr + 64, nonce);
    zero__put_u64(hdr + 72, chunk_total);
    unsigned char *p = hdr + ZERO__CKPT_FIXED_HEADER_BYTES;
    for (size_t i = 0; i < nb; i++, p += ZERO__CKPT_BLOCK_ENTRY_BYTES) {
        zero__put_u64(p, blocks[i].unit_param_count);
        zero__put_u64(p + 8, blocks[i].shard_offset);
        zero__put_u64(p + 16, blocks[i].shard_count);
        zero__put_u64(p + 24, blocks[i].data_offset_bytes);
        zero__put_u64(p + 32, blocks[i].first_chunk);
    }
    for (uint64_t c = 0; c < chunk_total; c++, p += 4) zero__put_u32(p, crc[c]);
    zero__put_u32(p, zero__crc32c(0, hdr, (size_t)(p - hdr)));
    if ((st = zero__pwrite_all(fd, hdr, header_bytes, 0, path)) != ZERO_OK) goto done;
    if (fsync(fd) != 0)
        st = zero__error(ZERO_ERR_IO, "fsync of %s failed: %s", path, strerror(errno));
done:
    if (fd >= 0 && close(fd) != 0 && st == ZERO_OK)
        st = zero__error(ZERO_ERR_IO, "close of %s failed: %s", path, strerror(errno));
    free(buf);
    free(crc);
    free(hdr);
    free(blocks);
    return st;
}

/* ------------------------------------------------------------------------------ parsing */

void zero__shard_header_free(zero__shard_header_t *h) {
    free(h->blocks);
    free(h->chunk_crc);
    h->blocks = NULL;
    h->chunk_crc = NULL;
}

zero_status_t zero__shard_header_parse(zero__shard_header_t *h, const unsigned char *d, size_t size,
                                       uint64_t file_size, const char *what) {
    memset(h, 0, sizeof *h);
    if (size < ZERO__CKPT_FIXED_HEADER_BYTES)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s is truncated: expected a header of at least %d bytes, found %zu",
                           what, ZERO__CKPT_FIXED_HEADER_BYTES, size);
    if (memcmp(d, ZERO__CKPT_SHARD_MAGIC, 8) != 0)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s is not a zero shard file: expected magic \"%s\", found "
                           "%02x %02x %02x %02x %02x %02x %02x %02x",
                           what, ZERO__CKPT_SHARD_MAGIC, d[0], d[1], d[2], d[3], d[4], d[5], d[6],
                           d[7]);
    h->version = zero__get_u32(d + 8);
    if (h->version != ZERO_CKPT_FORMAT_VERSION)
        return zero__error(ZERO_ERR_FORMAT, "%s: format version %u, expected %d", what, h->version,
                           ZERO_CKPT_FORMAT_VERSION);
    h->kind = zero__get_u32(d + 12);
    h->rank = zero__get_u32(d + 16);
    h->world = zero__get_u32(d + 20);
    h->unit_count = zero__get_u32(d + 24);
    h->state_count = zero__get_u32(d + 28);
    h->chunk_elems = zero__get_u64(d + 32);
    h->header_bytes = zero__get_u64(d + 40);
    h->file_bytes = zero__get_u64(d + 48);
    h->step = zero__get_u64(d + 56);
    h->nonce = zero__get_u64(d + 64);
    h->chunk_total = zero__get_u64(d + 72);
    if (h->kind != ZERO__CKPT_KIND_PARAMS && h->kind != ZERO__CKPT_KIND_OPTIM)
        return zero__error(ZERO_ERR_FORMAT, "%s: file kind %u, expected 1 (params) or 2 (optim)",
                           what, h->kind);
    if (h->state_count != (uint32_t)states_of((int)h->kind))
        return zero__error(ZERO_ERR_FORMAT, "%s: %u states, expected %d for this kind", what,
                           h->state_count, states_of((int)h->kind));
    if (h->world < 1 || h->world > ZERO__CKPT_MAX_WORLD || h->rank >= h->world)
        return zero__error(ZERO_ERR_FORMAT, "%s: rank %u of world %u is invalid", what, h->rank,
                           h->world);
    if (h->unit_count > ZERO__CKPT_MAX_UNITS)
        return zero__error(ZERO_ERR_FORMAT, "%s: %u units, expected at most %u", what,
                           h->unit_count, ZERO__CKPT_MAX_UNITS);
    if (h->chunk_elems != ZERO__CKPT_CHUNK_ELEMS)
        return zero__error(ZERO_ERR_FORMAT, "%s: chunk of %llu elements, expected %zu", what,
                           (unsigned long long)h->chunk_elems, ZERO__CKPT_CHUNK_ELEMS);
    uint64_t nb = (uint64_t)h->unit_count * h->state_count;
    /* chunk_total is bounded by the bytes present, so the sum cannot overflow. */
    if (h->chunk_total > size / 4)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: header declares %llu chunk checksums, more than its %zu bytes "
                           "hold",
                           what, (unsigned long long)h->chunk_total, size);
    uint64_t table =
        ZERO__CKPT_FIXED_HEADER_BYTES + nb * ZERO__CKPT_BLOCK_ENTRY_BYTES + h->chunk_total * 4 + 4;
    if (h->header_bytes < table || h->header_bytes > size)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: header of %llu bytes, expected at least %llu (its tables) and at "
                           "most %zu (bytes present)",
                           what, (unsigned long long)h->header_bytes, (unsigned long long)table,
                           size);
    if (file_size && h->file_bytes != file_size)
        return zero__error(ZERO_ERR_FORMAT, "%s is %s: header says %llu bytes, found %llu", what,
                           file_size < h->file_bytes ? "truncated" : "too long",
                           (unsigned long long)h->file_bytes, (unsigned long long)file_size);
    uint32_t want = zero__get_u32(d + table - 4);
    uint32_t got = zero__crc32c(0, d, (size_t)table - 4);
    if (want != got)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: header checksum mismatch: expected crc32c %08x, found %08x", what,
                           want, got);
    h->blocks = calloc(nb ? nb : 1, sizeof *h->blocks);
    h->chunk_crc = calloc(h->chunk_total ? h->chunk_total : 1, sizeof *h->chunk_crc);
    if (!h->blocks || !h->chunk_crc) {
        zero__shard_header_free(h);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory for the header", what);
    }
    const unsigned char *p = d + ZERO__CKPT_FIXED_HEADER_BYTES;
    uint64_t chunk_next = 0, data_next = h->header_bytes;
    for (uint64_t i = 0; i < nb; i++, p += ZERO__CKPT_BLOCK_ENTRY_BYTES) {
        zero__shard_block_t *b = &h->blocks[i];
        b->unit_param_count = zero__get_u64(p);
        b->shard_offset = zero__get_u64(p + 8);
        b->shard_count = zero__get_u64(p + 16);
        b->data_offset_bytes = zero__get_u64(p + 24);
        b->first_chunk = zero__get_u64(p + 32);
        size_t off = 0, cnt = 0;
        if (b->unit_param_count > ((uint64_t)1 << 50)) goto bad_block;
        zero_ckpt_shard_range((size_t)b->unit_param_count, (int)h->world, (int)h->rank, &off, &cnt);
        if (b->shard_offset != off || b->shard_count != cnt) goto bad_block;
        if (b->first_chunk != chunk_next || b->data_offset_bytes != data_next) goto bad_block;
        chunk_next += chunks_of(cnt);
        data_next += (uint64_t)cnt * 4;
        if (chunk_next > h->chunk_total) goto bad_block;
        continue;
    bad_block:;
        /* the message reads *b: free only after formatting it */
        zero_status_t bs = zero__error(
            ZERO_ERR_FORMAT,
            "%s: block %llu (unit %llu) is inconsistent: %llu params, shard "
            "[%llu, +%llu), data at byte %llu, first chunk %llu",
            what, (unsigned long long)i, (unsigned long long)(i / h->state_count),
            (unsigned long long)b->unit_param_count, (unsigned long long)b->shard_offset,
            (unsigned long long)b->shard_count, (unsigned long long)b->data_offset_bytes,
            (unsigned long long)b->first_chunk);
        zero__shard_header_free(h);
        return bs;
    }
    if (chunk_next != h->chunk_total || data_next != h->file_bytes) {
        zero__shard_header_free(h);
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: blocks hold %llu chunks and end at byte %llu, header says %llu "
                           "chunks and %llu bytes",
                           what, (unsigned long long)chunk_next, (unsigned long long)data_next,
                           (unsigned long long)h->chunk_total, (unsigned long long)h->file_bytes);
    }
    for (uint64_t c = 0; c < h->chunk_total; c++, p += 4) h->chunk_crc[c] = zero__get_u32(p);
    return ZERO_OK;
}

zero_status_t zero_ckpt_parse_shard_header(const void *data, size_t size) {
    zero__shard_header_t h;
    zero_status_t st = zero__shard_header_parse(&h, data, size, 0, "shard header");
    if (st == ZERO_OK) zero__shard_header_free(&h);
    return st;
}

/* ------------------------------------------------------------------------------ reading */

zero_status_t zero__shard_open(zero__shard_file_t *f, const char *path, int kind, int rank,
                               int world, int64_t step, uint64_t nonce,
                               const zero_ckpt_layout_t *layout) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->layout = layout;
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return zero__error(errno == ENOENT ? ZERO_ERR_FORMAT : ZERO_ERR_IO,
                           "cannot open shard file %s (rank %d of %d): %s", path, rank, world,
                           strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return zero__error(ZERO_ERR_IO, "cannot stat %s: %s", path, strerror(errno));
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    /* Reads are sequential within a block: a larger read-ahead keeps the disk busy while the
     * chunks already read are checksummed. */
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    unsigned char fixed[ZERO__CKPT_FIXED_HEADER_BYTES];
    size_t first = (size_t)ZERO_MIN((uint64_t)sizeof fixed, fsize);
    zero_status_t st = zero__pread_all(fd, fixed, first, 0, path);
    if (st != ZERO_OK) goto fail;
    /* Learn the header size from the fixed part, then parse the whole header. */
    if (first == sizeof fixed && !memcmp(fixed, ZERO__CKPT_SHARD_MAGIC, 8)) {
        uint64_t hb = zero__get_u64(fixed + 40);
        if (hb <= fsize && hb <= ((uint64_t)1 << 30) && hb >= sizeof fixed) {
            unsigned char *buf = malloc((size_t)hb);
            if (!buf) {
                st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
                goto fail;
            }
            st = zero__pread_all(fd, buf, (size_t)hb, 0, path);
            if (st == ZERO_OK) st = zero__shard_header_parse(&f->h, buf, (size_t)hb, fsize, path);
            free(buf);
            if (st != ZERO_OK) goto fail;
        } else {
            st = zero__shard_header_parse(&f->h, fixed, first, fsize, path);
            if (st == ZERO_OK) { /* cannot happen: header_bytes was out of range */
                zero__shard_header_free(&f->h);
                st = zero__error(ZERO_ERR_FORMAT, "%s: bad header size", path);
            }
            goto fail;
        }
    } else {
        st = zero__shard_header_parse(&f->h, fixed, first, fsize, path);
        if (st == ZERO_OK) zero__shard_header_free(&f->h);
        goto fail;
    }
    const zero__shard_header_t *h = &f->h;
    if ((int)h->kind != kind || (int)h->rank != rank || (int)h->world != world) {
        st = zero__error(
            ZERO_ERR_FORMAT, "%s: holds %s of rank %u of %u, expected %s of rank %d of %d", path,
            h->kind == ZERO__CKPT_KIND_PARAMS ? "params" : "optimizer state", h->rank, h->world,
            kind == ZERO__CKPT_KIND_PARAMS ? "params" : "optimizer state", rank, world);
        goto fail_header;
    }
    if (h->step != (uint64_t)step || h->nonce != nonce) {
        st = zero__error(ZERO_ERR_FORMAT,
                         "%s belongs to another checkpoint: step %llu id %016llx, expected step "
                         "%lld id %016llx (from manifest.json)",
                         path, (unsigned long long)h->step, (unsigned long long)h->nonce,
                         (long long)step, (unsigned long long)nonce);
        goto fail_header;
    }
    if ((int)h->unit_count != layout->unit_count) {
        st = zero__error(ZERO_ERR_FORMAT, "%s: %u units, expected %d (from manifest.json)", path,
                         h->unit_count, layout->unit_count);
        goto fail_header;
    }
    for (int u = 0; u < layout->unit_count; u++) {
        uint64_t pc = h->blocks[(size_t)u * h->state_count].unit_param_count;
        if (pc != layout->units[u].param_count) {
            st = zero__error(ZERO_ERR_FORMAT,
                             "%s: unit %d (%s) has %llu params, expected %zu (from "
                             "manifest.json)",
                             path, u, layout->units[u].name, (unsigned long long)pc,
                             layout->units[u].param_count);
            goto fail_header;
        }
    }
    f->fd = fd;
    return ZERO_OK;
fail_header:
    zero__shard_header_free(&f->h);
fail:
    close(fd);
    return st;
}

void zero__shard_close(zero__shard_file_t *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    zero__shard_header_free(&f->h);
}

static zero_status_t read_chunk(zero__shard_file_t *f, const zero__shard_block_t *b, int unit,
                                int si, uint64_t c, float *dst, size_t *n_out) {
    uint64_t begin = c * ZERO__CKPT_CHUNK_ELEMS;
    size_t n = (size_t)ZERO_MIN((uint64_t)ZERO__CKPT_CHUNK_ELEMS, b->shard_count - begin);
    zero_status_t st = zero__pread_all(f->fd, dst, n * sizeof(float),
                                       (int64_t)(b->data_offset_bytes + begin * 4), f->path);
    if (st != ZERO_OK) return st;
    uint32_t want = f->h.chunk_crc[b->first_chunk + c];
    uint32_t got = zero__crc32c(0, dst, n * sizeof(float));
    if (want != got)
        return zero__error(ZERO_ERR_FORMAT,
                           "%s: checksum mismatch in unit %d (%s), %s, elements [%llu, %llu): "
                           "expected crc32c %08x, found %08x",
                           f->path, unit, f->layout->units[unit].name,
                           zero_ckpt_state_name(state_of((int)f->h.kind, si)),
                           (unsigned long long)(b->shard_offset + begin),
                           (unsigned long long)(b->shard_offset + begin + n), want, got);
    *n_out = n;
    return ZERO_OK;
}

zero_status_t zero__shard_read(zero__shard_file_t *f, int unit, int si, size_t offset, size_t count,
                               float *out, float *chunk_buf) {
    const zero__shard_block_t *b = &f->h.blocks[(size_t)unit * f->h.state_count + si];
    ZERO_ASSERT(offset >= b->shard_offset && offset + count <= b->shard_offset + b->shard_count);
    if (count == 0) return ZERO_OK;
    uint64_t lo = offset - b->shard_offset, hi = lo + count;
    for (uint64_t c = lo / ZERO__CKPT_CHUNK_ELEMS; c * ZERO__CKPT_CHUNK_ELEMS < hi; c++) {
        uint64_t cb = c * ZERO__CKPT_CHUNK_ELEMS;
        uint64_t ce = ZERO_MIN(cb + ZERO__CKPT_CHUNK_ELEMS, b->shard_count);
        size_t n;
        zero_status_t st;
        if (cb >= lo && ce <= hi) { /* whole chunk wanted: read it in place */
            st = read_chunk(f, b, unit, si, c, out + (cb - lo), &n);
            if (st != ZERO_OK) return st;
        } else {
            st = read_chunk(f, b, unit, si, c, chunk_buf, &n);
            if (st != ZERO_OK) return st;
            uint64_t a = ZERO_MAX(cb, lo), e = ZERO_MIN(ce, hi);
            memcpy(out + (a - lo), chunk_buf + (a - cb), (size_t)(e - a) * sizeof(float));
        }
    }
    return ZERO_OK;
}

zero_status_t zero__shard_verify_all(zero__shard_file_t *f, float *chunk_buf) {
    for (uint32_t u = 0; u < f->h.unit_count; u++)
        for (uint32_t s = 0; s < f->h.state_count; s++) {
            const zero__shard_block_t *b = &f->h.blocks[(size_t)u * f->h.state_count + s];
            for (uint64_t c = 0; c < chunks_of(b->shard_count); c++) {
                size_t n;
                zero_status_t st = read_chunk(f, b, (int)u, (int)s, c, chunk_buf, &n);
                if (st != ZERO_OK) return st;
            }
        }
    return ZERO_OK;
}
