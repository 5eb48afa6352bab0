/* aio.h — asynchronous file I/O for swap files (src/io): io_uring with a pread/pwrite thread-pool
 * fallback, O_DIRECT, preallocated files, and a CRC32C on every 4 KiB page written, verified on
 * every read.
 *
 * What it is: the layer that optimizer-state and parameter offload (ZeRO-Infinity) stand on. A
 * context (zero__aio_t) owns one I/O engine; files created through it are preallocated swap files
 * whose pages carry checksums kept in memory; reads and writes are posted as requests (file,
 * buffer, bytes, offset) that the engine cuts into `block_size` pieces, keeps up to `queue_depth`
 * of them in flight and refills as pieces complete, while the caller computes; the caller then
 * waits on a request or on all of them. What it is not: a general file API (files are scratch:
 * created empty, their checksums live only as long as the handle) and it knows nothing of the
 * engine, tensors or ranks.
 *
 * Engines, chosen at zero__aio_init and logged once per process when it is not io_uring:
 *   io_uring  intra_op_parallelism threads of the context, each driving its own ring of
 *             queue_depth entries (DeepSpeed's aio threads, each with its own context): it submits
 *             pieces, reaps completions, refills, and checks/records checksums; up to
 *             intra_op_parallelism x queue_depth pieces in flight. Files are opened O_DIRECT (no
 *             page cache).
 *   threads   intra_op_parallelism threads doing pread/pwrite, each one piece at a time. Used when
 *             io_uring is unavailable (built without liburing, io_uring_queue_init refused:
 *             seccomp, old kernel, kernel.io_uring_disabled), when asked for
 *             (params.backend, or ZERO_AIO_BACKEND=threads in the environment when params.backend
 *             is AUTO), and, beside io_uring, for each file whose file system refuses O_DIRECT
 *             (such a file is read and written through the page cache).
 *
 * Rules for callers: offsets, lengths and buffers are multiples of ZERO__AIO_ALIGN (4096), as
 * O_DIRECT requires; zero__aio_buffer_alloc and the buffer pool give such buffers. A buffer is
 * borrowed by a request until its wait returns: it must not be written (write request) or read
 * (read request) before then. Two requests in flight must not overlap in a file if one of them
 * writes. Checksums: each 4 KiB page of a file has a CRC32C in memory, starting as the CRC of a
 * zero page (a preallocated file reads as zeros); a write records the CRCs of its pages when it
 * completes, a read verifies every page it read. A mismatch, a short read or an I/O error fails
 * the request with a message naming the file, the offset and what was expected; a failed write
 * leaves its pages unreadable (their checksums no longer match) until they are written again.
 *
 * Thread safety: every function may be called from any thread; a context serialises its
 * bookkeeping with one mutex. Requests of one context complete in any order.
 */
#ifndef ZERO_IO_AIO_H
#define ZERO_IO_AIO_H

#include "zero/core.h"

#include <stddef.h>
#include <stdint.h>

/* Alignment of offsets, lengths and buffers, and the size of a checksummed page. */
#define ZERO__AIO_ALIGN 4096

/* ------------------------------------------------------------------------------ parameters */

typedef enum {
    ZERO__AIO_BACKEND_AUTO,    /* io_uring where it works, else threads */
    ZERO__AIO_BACKEND_URING,   /* io_uring or fail (ZERO_ERR_UNSUPPORTED) */
    ZERO__AIO_BACKEND_THREADS, /* the pread/pwrite pool */
    ZERO__AIO_BACKEND_COUNT
} zero__aio_backend_t;

/* "auto", "io_uring", "threads" ("?" if invalid). */
const char *zero__aio_backend_str(zero__aio_backend_t b);

/* DeepSpeed's `aio` block, same names and defaults (deepspeed-notes §1.5), plus the backend. */
typedef struct zero__aio_params {
    size_t block_size;           /* bytes per piece: a multiple of 4096 in [4096, 256 MiB]; 1 MiB */
    int queue_depth;             /* pieces in flight per io_uring thread, [1, 4096]; 8 */
    int intra_op_parallelism;    /* threads of either engine, [1, 256]; 1 (alias thread_count) */
    int single_submit;           /* 0/1: submit pieces one by one instead of in batches; 0 */
    int overlap_events;          /* 0/1: refill as each piece completes (1) or once the whole
                                    batch of queue_depth has completed (0); 1 */
    zero__aio_backend_t backend; /* AUTO */
} zero__aio_params_t;

zero__aio_params_t zero__aio_params_default(void);

/* ZERO_OK, or ZERO_ERR_CONFIG naming the first bad field, its value and what was expected
 * ("aio.block_size 1000 is invalid (expected a multiple of 4096 ...)"). */
zero_status_t zero__aio_params_check(const zero__aio_params_t *p);

/* Set one field by its ds_config key in the aio block ("block_size", "queue_depth",
 * "intra_op_parallelism" or its alias "thread_count", "single_submit", "overlap_events"), without
 * checking the value (zero__aio_params_check does). An unknown key is ZERO_ERR_CONFIG naming it
 * and the known ones. */
zero_status_t zero__aio_params_set(zero__aio_params_t *p, const char *key, long long value);

/* ------------------------------------------------------------------------------ buffers */

/* A page-aligned buffer of bytes rounded up to 4096, accounted to mem (may be NULL) as
 * ZERO_MEM_OFFLOAD. NULL with zero_last_error() set on failure. Free with zero__aio_buffer_free. */
void *zero__aio_buffer_alloc(zero_mem_t *mem, size_t bytes);
void zero__aio_buffer_free(void *buf); /* NULL is accepted */

/* A fixed set of `count` page-aligned buffers of buffer_bytes each (DeepSpeed's buffer_count
 * swap buffers), allocated at init, accounted to mem as ZERO_MEM_OFFLOAD. Thread-safe. */
typedef struct zero__aio_pool zero__aio_pool_t;

zero_status_t zero__aio_pool_init(zero__aio_pool_t **out, zero_mem_t *mem, int count,
                                  size_t buffer_bytes);
void zero__aio_pool_free(zero__aio_pool_t *pool); /* every buffer must be back; NULL accepted */
/* A free buffer (owned by the caller until put back), or NULL with ZERO_ERR_OUT_OF_MEMORY set
 * when all `count` are taken. */
void *zero__aio_pool_get(zero__aio_pool_t *pool);
void zero__aio_pool_put(zero__aio_pool_t *pool, void *buf);
size_t zero__aio_pool_buffer_bytes(const zero__aio_pool_t *pool);
int zero__aio_pool_available(const zero__aio_pool_t *pool); /* buffers not taken */

/* ------------------------------------------------------------------------------ context */

typedef struct zero__aio zero__aio_t;
typedef struct zero__aio_file zero__aio_file_t;
typedef struct zero__aio_req zero__aio_req_t;

/* Start a context: checks params (ZERO_ERR_CONFIG), picks the engine and starts its threads.
 * mem (borrowed, may be NULL) accounts the checksum tables. ZERO_ERR_UNSUPPORTED when io_uring
 * was asked for and is unavailable. */
zero_status_t zero__aio_init(zero__aio_t **out, const zero__aio_params_t *params, zero_mem_t *mem);
/* Wait for every request (their errors are dropped), stop the threads, free. Every file must be
 * closed first. NULL is accepted. */
void zero__aio_free(zero__aio_t *aio);
/* "io_uring" or "threads": the engine of O_DIRECT files. */
const char *zero__aio_engine_name(const zero__aio_t *aio);
const zero__aio_params_t *zero__aio_params(const zero__aio_t *aio);

/* Create (or truncate) the swap file `path` of size_bytes (rounded up to 4096) and preallocate
 * it (fallocate), so a full disk is found here and not in the middle of a step: not enough space
 * is ZERO_ERR_IO naming the path, the bytes needed and the bytes free (statvfs), and nothing is
 * left behind. Opened O_DIRECT; a file system refusing O_DIRECT (EINVAL) gets a page-cache file
 * on the thread pool (logged once per process). */
zero_status_t zero__aio_file_create(zero__aio_t *aio, const char *path, int64_t size_bytes,
                                    zero__aio_file_t **out);
/* Wait for the file's requests, close it and, if remove, delete it. NULL is accepted. */
void zero__aio_file_close(zero__aio_file_t *f, int remove);
int zero__aio_file_direct(const zero__aio_file_t *f); /* 1 when opened O_DIRECT */
/* "io_uring" or "threads": the engine that serves this file. */
const char *zero__aio_file_engine_name(const zero__aio_file_t *f);
int64_t zero__aio_file_size(const zero__aio_file_t *f);
const char *zero__aio_file_path(const zero__aio_file_t *f);

/* ------------------------------------------------------------------------------ requests */

/* Post a read of bytes at offset_bytes of f into buf, or a write of buf there, and return at
 * once with a handle in *out. Argument errors (alignment, a range beyond the file) are
 * ZERO_ERR_INVALID_ARG naming the file and posting nothing. bytes == 0 is a request already
 * complete. Every posted request must be waited (zero__aio_wait or zero__aio_wait_all). */
zero_status_t zero__aio_read_post(zero__aio_file_t *f, void *buf, size_t bytes,
                                  int64_t offset_bytes, zero__aio_req_t **out);
zero_status_t zero__aio_write_post(zero__aio_file_t *f, const void *buf, size_t bytes,
                                   int64_t offset_bytes, zero__aio_req_t **out);
/* 1 when the request has completed (its wait will not block), else 0. */
int zero__aio_test(zero__aio_req_t *req);
/* Block until req completes and release it (the handle is invalid afterwards). Returns the
 * request's status: ZERO_ERR_IO (an I/O error or a short read), ZERO_ERR_FORMAT (a checksum
 * mismatch), with the message naming the file, the offset and what was expected. */
zero_status_t zero__aio_wait(zero__aio_req_t *req);
/* Wait for and release every request of the context not yet waited; the first failure's status
 * and message. */
zero_status_t zero__aio_wait_all(zero__aio_t *aio);
/* Post and wait. */
zero_status_t zero__aio_read(zero__aio_file_t *f, void *buf, size_t bytes, int64_t offset_bytes);
zero_status_t zero__aio_write(zero__aio_file_t *f, const void *buf, size_t bytes,
                              int64_t offset_bytes);

/* Counters since init (for reports: bytes moved, time the callers were blocked in waits). */
typedef struct zero__aio_stats {
    uint64_t bytes_read, bytes_written;
    uint64_t requests, pieces;
    double wait_seconds; /* time spent inside zero__aio_wait / wait_all: I/O not hidden */
} zero__aio_stats_t;

void zero__aio_get_stats(zero__aio_t *aio, zero__aio_stats_t *out);
/* The counters since *base into *window (bytes read, written, seconds waited), then *base =
 * now: a caller's per-step figures. */
void zero__aio_stats_window(zero__aio_t *aio, zero__aio_stats_t *base, zero__aio_stats_t *window);

/* ------------------------------------------------------------------------------ test hooks */

typedef enum {
    ZERO__AIO_FAULT_NONE,
    ZERO__AIO_FAULT_EIO,        /* the read piece covering the offset fails with EIO */
    ZERO__AIO_FAULT_SHORT_READ, /* ... returns half its bytes, then end of file */
    ZERO__AIO_FAULT_WRITE_EIO,  /* the write piece covering the offset fails with EIO */
    ZERO__AIO_FAULT_COUNT
} zero__aio_fault_t;

/* Tests only: arm one fault on the next read (write: WRITE_EIO) piece of f covering
 * offset_bytes. */
void zero__aio_test_inject(zero__aio_file_t *f, zero__aio_fault_t fault, int64_t offset_bytes);
/* Tests only: while on, file creation behaves as if the file system refused O_DIRECT (EINVAL),
 * as tmpfs did before Linux 6.6. Process-wide. */
void zero__aio_test_refuse_direct(int on);

#endif /* ZERO_IO_AIO_H */
