/* io_internal.h — what the front end (aio.c) shares with the two engines (uring.c, threads.c).
 *
 * A request is cut into pieces under the context's mutex (zero__aio_cut); an engine performs a
 * piece without the mutex, passing each system-call result through zero__aio_piece_result
 * (which applies armed test faults and decides whether the piece continues), then hands the
 * piece to zero__aio_piece_finish, which checks or records the checksums and, under the mutex,
 * completes the request when its last piece is done.
 *
 * Locking: aio->mu guards the queues, every request's counters and status, the files' request
 * counts and fault fields, the engines' stop flags and the statistics. The checksum table of a
 * file is touched without the lock, by engine threads only, each on the pages of its own piece;
 * a caller may not have a write in flight overlapping another request (aio.h), so two pieces in
 * flight never share a page where one writes, and a page written by one piece and read by a later
 * one is ordered by the mutex (the write's request completed, under mu, before the read was
 * posted, under mu).
 */
#ifndef ZERO_IO_INTERNAL_H
#define ZERO_IO_INTERNAL_H

#include "core/core_internal.h"
#include "io/aio.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

enum { ENGINE_URING = 0, ENGINE_THREADS = 1, ENGINE_COUNT = 2 };

struct zero__aio_req {
    zero__aio_t *aio;
    zero__aio_file_t *file; /* valid while the request is not complete */
    int write;
    unsigned char *buf;
    size_t bytes;
    int64_t offset;
    size_t cut;     /* bytes handed out as pieces */
    int pieces_out; /* pieces handed out and not finished */
    int queued;     /* in its engine's queue (cut < bytes and not failed) */
    int complete;
    zero_status_t status;
    char message[512];
    zero__aio_req_t *next_queued;
    zero__aio_req_t *prev_all, *next_all; /* posted and not yet waited */
};

typedef struct zero__aio_piece {
    zero__aio_req_t *req;
    zero__aio_file_t *file;
    int write;
    unsigned char *buf;
    int64_t offset;
    size_t bytes;
    size_t done;   /* bytes transferred so far (partial transfers continue) */
    int err;       /* errno of a failed transfer, 0 */
    int short_eof; /* a read that reached the end of the file early */
    int fault_eof; /* test hook: the next transfer returns 0 */
} zero__aio_piece_t;

struct zero__aio_file {
    zero__aio_t *aio;
    char *path;
    int fd;
    int direct;
    int engine; /* ENGINE_* */
    int64_t size_bytes;
    size_t pages;
    uint32_t *crc; /* one per 4 KiB page */
    int open_reqs; /* requests not complete (mu) */
    atomic_int fault_armed;
    zero__aio_fault_t fault; /* mu */
    int64_t fault_offset;    /* mu */
};

typedef struct zero__aio_queue {
    zero__aio_req_t *head, *tail;
} zero__aio_queue_t;

typedef struct zero__aio_uring zero__aio_uring_t;
typedef struct zero__aio_threads zero__aio_threads_t;

struct zero__aio {
    zero__aio_params_t params;
    zero_mem_t *mem;
    pthread_mutex_t mu;
    pthread_mutex_t start_mu; /* starting the thread pool on first use (never under mu) */
    pthread_cond_t done_cv;   /* a request or piece completed */
    zero__aio_queue_t queue[ENGINE_COUNT];
    zero__aio_req_t *all; /* posted and not waited, doubly linked */
    int primary;          /* engine of O_DIRECT files */
    zero__aio_uring_t *uring;
    zero__aio_threads_t *threads; /* started on first use */
    zero__aio_stats_t stats;
};

/* Under aio->mu: hand out the next piece of the first queued request of `engine` into *p.
 * Returns 1, or 0 when the queue is empty. */
int zero__aio_cut(zero__aio_t *aio, int engine, zero__aio_piece_t *p);
/* Whether `engine` has a piece to hand out (under aio->mu). */
int zero__aio_has_work(const zero__aio_t *aio, int engine);

/* Without the mutex: account one transfer's result `res` (bytes, or -errno) to the piece.
 * Returns 1 when the piece is over (done, failed or short), 0 when the rest must be transferred
 * (p->done advanced). */
int zero__aio_piece_result(zero__aio_piece_t *p, ssize_t res);
/* Without the mutex: checksums (verify a read, record a write) with scratch of
 * block_size / 4096 entries, then complete the piece under the mutex. */
void zero__aio_piece_finish(zero__aio_piece_t *p, uint32_t *scratch);

/* Engines. start returns ZERO_OK or an error with a message (uring: the reason io_uring cannot
 * be used); they are called without aio->mu. wake (under aio->mu) tells the engine a request was
 * queued. stop (without the mutex) is called once all requests are complete. */
zero_status_t zero__aio_uring_start(zero__aio_t *aio, zero__aio_uring_t **out);
void zero__aio_uring_wake(zero__aio_uring_t *u);
void zero__aio_uring_stop(zero__aio_uring_t *u);
zero_status_t zero__aio_threads_start(zero__aio_t *aio, zero__aio_threads_t **out);
void zero__aio_threads_wake(zero__aio_threads_t *t);
void zero__aio_threads_stop(zero__aio_threads_t *t);

#endif /* ZERO_IO_INTERNAL_H */
