/* stream.h — a generator's transformer blocks kept in a file and read just in time (private to
 * src/infer; ZeRO-Inference's weight offload to NVMe), or sharded over the ranks of a
 * communicator and all-gathered just in time (ZeRO-3's parameter partitioning, for inference).
 *
 * Sharded (zero__wstream_init_sharded): the same cycle, with each rank keeping its slice of every
 * region (region_bytes / ranks bytes, slice r at byte r x slice of the region) instead of a file,
 * and a fetch being a non-blocking all-gather of the slices instead of a read. Every rank runs
 * the same calls in the same order (the generator's forward), so the collectives match.
 *
 * The file holds `layers` regions of region_bytes each (a block's weights as the generator
 * stores them, rounded up to 4 KiB), one after the other. It is written once while the model
 * loads (stage, then flush, layer by layer in order) and then read through `nbuf` page-aligned
 * buffers: the layers are used in a fixed cycle 0, 1, ..., L-1, 0, 1, ... (every forward runs
 * them all in order), and the k-th use of the cycle takes buffer k % nbuf, whose read was posted
 * when buffer k % nbuf was released nbuf uses earlier, so nbuf - 1 reads are in flight while a
 * layer computes. With nbuf >= layers every layer is read once and stays. The I/O is the NVMe
 * offload's (io/aio.h: io_uring or the thread pool, O_DIRECT, a CRC32C per page verified on
 * every read); the file is scratch, deleted by zero__wstream_free.
 * Not here: what a region holds (generate.c).
 * Threading: one thread at a time (the generator's).
 */
#ifndef ZERO_INFER_STREAM_H
#define ZERO_INFER_STREAM_H

#include "zero/comm.h"
#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

typedef struct zero__wstream zero__wstream_t;

/* Create the file zero-weights-<pid>-<n>.bin under dir (preallocated: a full disk fails here,
 * naming the path and the bytes) and nbuf (>= 1) buffers of region_bytes (a multiple of
 * 4096). ZERO_ERR_IO naming dir when it is not a writable directory. */
zero_status_t zero__wstream_init(zero__wstream_t **out, const char *dir, int layers,
                                 size_t region_bytes, int nbuf);
/* Sharded over comm's ranks (borrowed until the free): region_bytes a multiple of 64 x ranks. */
zero_status_t zero__wstream_init_sharded(zero__wstream_t **out, zero_comm_t *comm, int layers,
                                         size_t region_bytes, int nbuf);
/* Wait for the fetches in flight, delete the file, free. NULL is accepted. */
void zero__wstream_free(zero__wstream_t *s);

/* Loading, layer by layer in order: a zeroed region for `layer` to fill (borrowed until the
 * flush), then its write (waited). */
void *zero__wstream_stage(zero__wstream_t *s, int layer);
zero_status_t zero__wstream_flush(zero__wstream_t *s);
/* After the last flush: post the reads of the cycle's first nbuf uses. */
zero_status_t zero__wstream_start(zero__wstream_t *s);

/* The next use of the cycle, which must be `layer`: its region (valid until the release), its
 * read waited for (ZERO_ERR_IO / ZERO_ERR_FORMAT from the read, naming the file and offset). */
zero_status_t zero__wstream_acquire(zero__wstream_t *s, int layer, const void **region);
/* Done with the acquired layer: its buffer takes the read of the use nbuf later. */
zero_status_t zero__wstream_release(zero__wstream_t *s);

/* The file's path (NULL sharded), the engine serving it ("io_uring" or "threads"; sharded: the
 * communicator's backend, "threads" or "mpi"), the bytes read so far (sharded: received from
 * the other ranks) and the seconds spent waiting for them (what the computation did not hide). */
const char *zero__wstream_path(const zero__wstream_t *s);
const char *zero__wstream_engine(const zero__wstream_t *s);
void zero__wstream_stats(zero__wstream_t *s, uint64_t *bytes_read, double *wait_s);
/* Sharded: the bytes of each layer this rank keeps (0 for a file). */
size_t zero__wstream_slice_bytes(const zero__wstream_t *s);

#endif /* ZERO_INFER_STREAM_H */
