/* uring.c — the io_uring engine of the swap I/O layer: intra_op_parallelism driver threads, each
 * with its own ring of queue_depth entries (DeepSpeed's aio threads, each with its own context),
 * all taking pieces from the context's one queue.
 *
 * A driver takes pieces (aio.c cuts them) while fewer than queue_depth are in flight, submits
 * them (in one batch, or one by one with single_submit), waits for a completion and refills at
 * once (overlap_events), or only when the whole batch is back (overlap_events off, DeepSpeed's
 * non-overlapped mode). A partial transfer is resubmitted for the rest from the same slot. Having
 * a thread of its own is what lets a caller compute while a request much larger than
 * queue_depth x block_size streams: nothing waits for the caller to come back and refill.
 * While pieces are in flight the thread sleeps in io_uring_wait_cqe, so a request posted then is
 * picked up at the next completion (one block's latency at most); with nothing in flight it
 * sleeps on a condition variable that posting signals; a driver that takes a piece and sees more
 * queued wakes one more sleeping driver, so a large request spreads over all of them.
 *
 * Built without liburing (no ZERO_HAVE_URING), start fails with ZERO_ERR_UNSUPPORTED and the
 * context falls back to the thread pool.
 */
#include "io/io_internal.h"

#ifdef ZERO_HAVE_URING

#include <errno.h>
#include <liburing.h>
#include <string.h>

typedef struct driver {
    zero__aio_uring_t *group;
    struct io_uring ring;
    pthread_t thread;
    int started; /* ring initialised (1), thread running (2) */
    int depth;
    zero__aio_piece_t *slots;
    int *free_slots, nfree;
    uint32_t *scratch;
} driver_t;

struct zero__aio_uring {
    zero__aio_t *aio;
    int count;
    driver_t *drivers;
    pthread_cond_t work_cv; /* with aio->mu: a request was queued, or stop */
    int sleeping;           /* drivers waiting on work_cv (mu) */
    int stop;               /* mu */
};

static void prep(driver_t *u, int slot) {
    zero__aio_piece_t *p = &u->slots[slot];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    ZERO_ASSERT(sqe); /* at most depth pieces in flight on a ring of depth entries */
    unsigned n = (unsigned)(p->bytes - p->done);
    if (p->write)
        io_uring_prep_write(sqe, p->file->fd, p->buf + p->done, n,
                            (uint64_t)(p->offset + (int64_t)p->done));
    else
        io_uring_prep_read(sqe, p->file->fd, p->buf + p->done, n,
                           (uint64_t)(p->offset + (int64_t)p->done));
    io_uring_sqe_set_data64(sqe, (uint64_t)slot);
}

/* Submit what is prepared. A failure of the submission itself (not of an I/O) fails the pieces
 * that were not taken: their completions will never come. */
static int submit(driver_t *u, int *slots, int n) {
    int taken = 0;
    while (taken < n) {
        int rc = io_uring_submit(&u->ring);
        if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
        if (rc <= 0) break;
        taken += rc;
    }
    for (int i = taken; i < n; i++) {
        /* Unsubmitted SQEs would be submitted later with stale slots: the ring is unusable. */
        zero__aio_piece_t *p = &u->slots[slots[i]];
        p->err = EIO;
        zero__aio_piece_finish(p, u->scratch);
        u->free_slots[u->nfree++] = slots[i];
    }
    return taken;
}

static void *drive(void *arg) {
    driver_t *u = arg;
    zero__aio_uring_t *g = u->group;
    zero__aio_t *aio = g->aio;
    int inflight = 0, nfinished = 0;
    int *fresh = malloc((size_t)u->depth * sizeof(int));
    /* Pieces whose transfer is over, copied out of their slots: their checksums are computed
     * after the next refill is submitted, so they overlap the transfers in flight (at queue depth
     * 1 this is the difference between the disk idling during every CRC or not). */
    zero__aio_piece_t *finished = malloc((size_t)u->depth * sizeof *finished);
    ZERO_ASSERT(fresh && finished);
    for (;;) {
        int room = aio->params.overlap_events ? u->nfree : (inflight == 0 ? u->nfree : 0);
        int n = 0;
        pthread_mutex_lock(&aio->mu);
        while (n < room && zero__aio_cut(aio, ENGINE_URING, &u->slots[u->free_slots[u->nfree - 1]]))
            fresh[n++] = u->free_slots[--u->nfree];
        if (n && g->sleeping && zero__aio_has_work(aio, ENGINE_URING))
            pthread_cond_signal(&g->work_cv);
        if (n == 0 && inflight == 0 && nfinished == 0) {
            if (g->stop) {
                pthread_mutex_unlock(&aio->mu);
                break;
            }
            g->sleeping++;
            pthread_cond_wait(&g->work_cv, &aio->mu);
            g->sleeping--;
            pthread_mutex_unlock(&aio->mu);
            continue;
        }
        pthread_mutex_unlock(&aio->mu);
        if (aio->params.single_submit) {
            for (int i = 0; i < n; i++) {
                prep(u, fresh[i]);
                inflight += submit(u, fresh + i, 1);
            }
        } else if (n) {
            for (int i = 0; i < n; i++) prep(u, fresh[i]);
            inflight += submit(u, fresh, n);
        }
        for (int i = 0; i < nfinished; i++) zero__aio_piece_finish(&finished[i], u->scratch);
        nfinished = 0;
        if (inflight == 0) continue;
        struct io_uring_cqe *cqe;
        int rc = io_uring_wait_cqe(&u->ring, &cqe);
        if (rc == -EINTR) continue;
        ZERO_ASSERT(rc == 0);
        int resubmit = 0;
        do {
            int slot = (int)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&u->ring, cqe);
            zero__aio_piece_t *p = &u->slots[slot];
            inflight--;
            if (zero__aio_piece_result(p, res)) {
                finished[nfinished++] = *p;
                u->free_slots[u->nfree++] = slot;
            } else {
                prep(u, slot); /* the rest of a partial transfer */
                fresh[resubmit++] = slot;
            }
        } while (io_uring_peek_cqe(&u->ring, &cqe) == 0);
        if (resubmit) inflight += submit(u, fresh, resubmit);
    }
    free(finished);
    free(fresh);
    return NULL;
}

static void free_driver(driver_t *u) {
    if (u->started == 2) pthread_join(u->thread, NULL);
    if (u->started >= 1) io_uring_queue_exit(&u->ring);
    free(u->scratch);
    free(u->free_slots);
    free(u->slots);
}

/* Stop the drivers (each exits once nothing is queued or in flight), free everything. */
static void stop_all(zero__aio_uring_t *g) {
    pthread_mutex_lock(&g->aio->mu);
    g->stop = 1;
    pthread_cond_broadcast(&g->work_cv);
    pthread_mutex_unlock(&g->aio->mu);
    for (int i = 0; i < g->count; i++) free_driver(&g->drivers[i]);
    pthread_cond_destroy(&g->work_cv);
    free(g->drivers);
    free(g);
}

zero_status_t zero__aio_uring_start(zero__aio_t *aio, zero__aio_uring_t **out) {
    int n = aio->params.intra_op_parallelism, depth = aio->params.queue_depth;
    zero__aio_uring_t *g = calloc(1, sizeof *g);
    if (g) g->drivers = calloc((size_t)n, sizeof *g->drivers);
    if (!g || !g->drivers) {
        free(g);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory");
    }
    g->aio = aio;
    g->count = n;
    pthread_cond_init(&g->work_cv, NULL);
    zero_status_t st = ZERO_OK;
    for (int d = 0; d < n && st == ZERO_OK; d++) {
        driver_t *u = &g->drivers[d];
        u->group = g;
        u->depth = depth;
        u->slots = calloc((size_t)depth, sizeof *u->slots);
        u->free_slots = calloc((size_t)depth, sizeof(int));
        u->scratch = malloc(aio->params.block_size / ZERO__AIO_ALIGN * sizeof(uint32_t));
        if (!u->slots || !u->free_slots || !u->scratch) {
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory");
            break;
        }
        for (int i = 0; i < depth; i++) u->free_slots[u->nfree++] = depth - 1 - i;
        int rc = io_uring_queue_init((unsigned)depth, &u->ring, 0);
        if (rc < 0) {
            st = zero__error(ZERO_ERR_UNSUPPORTED,
                             "io_uring is unavailable (io_uring_queue_init: %s%s)", strerror(-rc),
                             rc == -EPERM ? "; see kernel.io_uring_disabled or a seccomp filter"
                                          : "");
            break;
        }
        u->started = 1;
        rc = pthread_create(&u->thread, NULL, drive, u);
        if (rc != 0) {
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                             "aio: cannot start io_uring thread %d of %d: %s", d + 1, n,
                             strerror(rc));
            break;
        }
        u->started = 2;
    }
    if (st) {
        stop_all(g); /* nothing was posted yet: the started drivers exit at once */
        return st;
    }
    *out = g;
    return ZERO_OK;
}

void zero__aio_uring_wake(zero__aio_uring_t *g) {
    if (g->sleeping) pthread_cond_signal(&g->work_cv);
}

void zero__aio_uring_stop(zero__aio_uring_t *g) { stop_all(g); }

#else /* !ZERO_HAVE_URING */

zero_status_t zero__aio_uring_start(zero__aio_t *aio, zero__aio_uring_t **out) {
    (void)aio;
    (void)out;
    return zero__error(ZERO_ERR_UNSUPPORTED, "io_uring is unavailable (built without liburing)");
}
void zero__aio_uring_wake(zero__aio_uring_t *u) { (void)u; }
void zero__aio_uring_stop(zero__aio_uring_t *u) { (void)u; }

#endif
