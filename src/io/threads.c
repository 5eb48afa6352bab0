/* threads.c — the fallback engine of the swap I/O layer: intra_op_parallelism threads doing
 * pread/pwrite, each one piece at a time (so at most that many pieces are in flight; queue_depth,
 * single_submit and overlap_events have no meaning here).
 *
 * Used where io_uring is unavailable or not wanted, and for files whose file system refuses
 * O_DIRECT. A worker takes a piece under aio->mu, transfers it without the lock, and, when more
 * work is queued, wakes one more worker before it starts, so one large request spreads over all
 * threads without a broadcast per post.
 */
#include "io/io_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

struct zero__aio_threads {
    zero__aio_t *aio;
    int count;
    pthread_t *threads;
    pthread_cond_t work_cv; /* with aio->mu: a request was queued, or stop */
    int stop;               /* mu */
};

static void transfer(zero__aio_piece_t *p) {
    for (;;) {
        size_t n = p->bytes - p->done;
        off_t at = (off_t)(p->offset + (int64_t)p->done);
        ssize_t rc = p->write ? pwrite(p->file->fd, p->buf + p->done, n, at)
                              : pread(p->file->fd, p->buf + p->done, n, at);
        if (zero__aio_piece_result(p, rc < 0 ? -(ssize_t)errno : rc)) return;
    }
}

static void *work(void *arg) {
    zero__aio_threads_t *t = arg;
    zero__aio_t *aio = t->aio;
    uint32_t *scratch = malloc(aio->params.block_size / ZERO__AIO_ALIGN * sizeof(uint32_t));
    ZERO_ASSERT(scratch);
    pthread_mutex_lock(&aio->mu);
    for (;;) {
        zero__aio_piece_t p;
        if (zero__aio_cut(aio, ENGINE_THREADS, &p)) {
            if (zero__aio_has_work(aio, ENGINE_THREADS)) pthread_cond_signal(&t->work_cv);
            pthread_mutex_unlock(&aio->mu);
            transfer(&p);
            zero__aio_piece_finish(&p, scratch);
            pthread_mutex_lock(&aio->mu);
        } else if (t->stop) {
            break;
        } else {
            pthread_cond_wait(&t->work_cv, &aio->mu);
        }
    }
    pthread_mutex_unlock(&aio->mu);
    free(scratch);
    return NULL;
}

zero_status_t zero__aio_threads_start(zero__aio_t *aio, zero__aio_threads_t **out) {
    zero__aio_threads_t *t = calloc(1, sizeof *t);
    int n = aio->params.intra_op_parallelism;
    if (t) t->threads = calloc((size_t)n, sizeof(pthread_t));
    if (!t || !t->threads) {
        if (t) free(t);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory");
    }
    t->aio = aio;
    pthread_cond_init(&t->work_cv, NULL);
    for (int i = 0; i < n; i++) {
        int rc = pthread_create(&t->threads[i], NULL, work, t);
        if (rc != 0) {
            /* The started workers see stop once they take the mutex; join them. */
            t->count = i;
            zero__aio_threads_stop(t);
            return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: cannot start I/O thread %d of %d: %s",
                               i + 1, n, strerror(rc));
        }
    }
    t->count = n;
    *out = t;
    return ZERO_OK;
}

void zero__aio_threads_wake(zero__aio_threads_t *t) { pthread_cond_signal(&t->work_cv); }

void zero__aio_threads_stop(zero__aio_threads_t *t) {
    pthread_mutex_lock(&t->aio->mu);
    t->stop = 1;
    pthread_cond_broadcast(&t->work_cv);
    pthread_mutex_unlock(&t->aio->mu);
    for (int i = 0; i < t->count; i++) pthread_join(t->threads[i], NULL);
    pthread_cond_destroy(&t->work_cv);
    free(t->threads);
    free(t);
}
