/* ckpt_internal.h — shared pieces of src/ckpt/: CRC32C, little-endian encoding, careful file I/O,
 * the shard-file header and the manifest model.
 *
 * Invariants: every length read from a file is checked against the file's size before use, so a
 * corrupted or hostile file gives ZERO_ERR_FORMAT, never a crash or a huge allocation.
 */
#ifndef ZERO_CKPT_INTERNAL_H
#define ZERO_CKPT_INTERNAL_H

#include "core/crc32c.h"
#include "core/fileio.h"
#include "zero/ckpt.h"

#include <stdint.h>
#include <string.h>

/* Chunk of a shard block covered by one CRC32C (elements): 4 MiB of fp32. */
#define ZERO__CKPT_CHUNK_ELEMS ((size_t)1 << 20)
#define ZERO__CKPT_SHARD_MAGIC "ZEROSHRD"
#define ZERO__CKPT_FIXED_HEADER_BYTES 80
#define ZERO__CKPT_BLOCK_ENTRY_BYTES 40
#define ZERO__CKPT_DATA_ALIGN 4096
/* Sanity limits on what a header may declare (a corrupted count must not allocate gigabytes). */
#define ZERO__CKPT_MAX_UNITS 1000000u
#define ZERO__CKPT_MAX_WORLD 1000000u

enum { ZERO__CKPT_KIND_PARAMS = 1, ZERO__CKPT_KIND_OPTIM = 2 };

static inline void zero__put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void zero__put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t zero__get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t zero__get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- file I/O: core/fileio.h */

/* ---- shard files (shard.c) */
typedef struct zero__shard_block {
    uint64_t unit_param_count; /* unpadded elements of the unit */
    uint64_t shard_offset;     /* first element of the padded unit buffer held here */
    uint64_t shard_count;      /* elements held (the rank's whole shard, padding included) */
    uint64_t data_offset_bytes;
    uint64_t first_chunk; /* index of this block's first CRC in the chunk table */
} zero__shard_block_t;

typedef struct zero__shard_header {
    uint32_t version, kind, rank, world, unit_count, state_count;
    uint64_t chunk_elems, header_bytes, file_bytes, step, nonce;
    uint64_t chunk_total;
    zero__shard_block_t *blocks; /* unit_count * state_count, unit-major */
    uint32_t *chunk_crc;         /* chunk_total */
} zero__shard_header_t;

/* Parse and check a header held in memory (`size` bytes available, `file_bytes` the size of the
 * whole file or 0 when unknown). `what` names the file in messages. */
zero_status_t zero__shard_header_parse(zero__shard_header_t *h, const unsigned char *data,
                                       size_t size, uint64_t file_size, const char *what);
void zero__shard_header_free(zero__shard_header_t *h);

/* Write one rank's shard file (params: state PARAMS; optim: ADAM_M then ADAM_V). */
zero_status_t zero__shard_write(const char *path, int kind, int rank, int world, int64_t step,
                                uint64_t nonce, const zero_ckpt_layout_t *layout,
                                const zero_ckpt_shard_io_t *io);

/* An open shard file: header parsed and checked against the manifest. */
typedef struct zero__shard_file {
    int fd;
    char path[4096];
    zero__shard_header_t h;
    const zero_ckpt_layout_t *layout; /* borrowed: the manifest's, for messages */
} zero__shard_file_t;

zero_status_t zero__shard_open(zero__shard_file_t *f, const char *path, int kind, int rank,
                               int world, int64_t step, uint64_t nonce,
                               const zero_ckpt_layout_t *layout);
void zero__shard_close(zero__shard_file_t *f);
/* Read [offset, offset+count) of block (unit, state-in-file) as absolute padded-buffer elements,
 * verifying every chunk touched. buf: ZERO__CKPT_CHUNK_ELEMS floats of scratch. */
zero_status_t zero__shard_read(zero__shard_file_t *f, int unit, int state_index, size_t offset,
                               size_t count, float *out, float *chunk_buf);
/* Read and verify every chunk of the file. */
zero_status_t zero__shard_verify_all(zero__shard_file_t *f, float *chunk_buf);

/* ---- safetensors header (st_header.c) */
struct cJSON;
/* Check every entry of a parsed header against a data section of data_bytes (see st_header.c);
 * ZERO_ERR_FORMAT naming the file (path) and the tensor otherwise. */
zero_status_t zero__st_header_check(const struct cJSON *hdr, uint64_t data_bytes, const char *path);
/* Parse hlen bytes of header text and check it: *out (cJSON_Delete) on success, NULL otherwise. */
zero_status_t zero__st_header_parse(struct cJSON **out, const char *text, size_t hlen,
                                    uint64_t data_bytes, const char *path);
/* Read and check (zero__st_header_parse) the header of the safetensors file at path: *hdr
 * (cJSON_Delete) on success; ZERO_ERR_IO / ZERO_ERR_FORMAT naming the file otherwise. */
zero_status_t zero__st_header_read(const char *path, struct cJSON **hdr);

/* ---- manifest (manifest.c) */
typedef struct zero__manifest {
    int version;
    int world;
    int with_optim;
    uint64_t nonce;
    int64_t saved_unix_us;     /* 0: not recorded (older checkpoints) */
    zero_ckpt_meta_t meta;     /* strings owned */
    zero_ckpt_layout_t layout; /* owned */
    zero_ckpt_unit_t *units;   /* owned arrays behind layout */
    zero_ckpt_tensor_t *tensors;
} zero__manifest_t;

/* JSON text of a manifest (malloc'ed). */
zero_status_t zero__manifest_build(char **out, int world, int with_optim, uint64_t nonce,
                                   const zero_ckpt_layout_t *layout, const zero_ckpt_meta_t *meta);
zero_status_t zero__manifest_parse(zero__manifest_t *m, const char *text, size_t size,
                                   const char *what);
void zero__manifest_free(zero__manifest_t *m);

#endif /* ZERO_CKPT_INTERNAL_H */
