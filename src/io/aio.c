/* aio.c — the front end of the swap I/O layer (aio.h): parameters, page-aligned buffers and the
 * buffer pool, the context and its engine choice, swap files (preallocation, checksum tables),
 * requests (posting, cutting into pieces, completion, waiting) and the test hooks.
 *
 * The engines (uring.c, threads.c) only move bytes; everything a request means — which piece is
 * next, whether a result is complete, what a checksum mismatch says — is decided here, once, for
 * both (io_internal.h describes the locking).
 */
#include "io/io_internal.h"

#include "core/crc32c.h"
#include "core/fileio.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define PAGE ((size_t)ZERO__AIO_ALIGN)
#define MAX_BLOCK ((size_t)256 << 20)

/* ------------------------------------------------------------------------------ parameters */

static const char *const backend_names[] = {"auto", "io_uring", "threads"};
static_assert(ZERO_ARRAY_LEN(backend_names) == ZERO__AIO_BACKEND_COUNT, "backend table");

const char *zero__aio_backend_str(zero__aio_backend_t b) {
    return (unsigned)b < ZERO__AIO_BACKEND_COUNT ? backend_names[b] : "?";
}

zero__aio_params_t zero__aio_params_default(void) {
    zero__aio_params_t p = {
        .block_size = (size_t)1 << 20,
        .queue_depth = 8,
        .intra_op_parallelism = 1,
        .single_submit = 0,
        .overlap_events = 1,
        .backend = ZERO__AIO_BACKEND_AUTO,
    };
    return p;
}

zero_status_t zero__aio_params_check(const zero__aio_params_t *p) {
    if (!p) return zero__error(ZERO_ERR_INVALID_ARG, "aio: params is NULL");
    if (p->block_size < PAGE || p->block_size > MAX_BLOCK || p->block_size % PAGE)
        return zero__error(ZERO_ERR_CONFIG,
                           "aio.block_size %zu is invalid (expected a multiple of 4096 between "
                           "4096 and %zu)",
                           p->block_size, MAX_BLOCK);
    if (p->queue_depth < 1 || p->queue_depth > 4096)
        return zero__error(ZERO_ERR_CONFIG,
                           "aio.queue_depth %d is invalid (expected 1 to 4096 requests in flight)",
                           p->queue_depth);
    if (p->intra_op_parallelism < 1 || p->intra_op_parallelism > 256)
        return zero__error(ZERO_ERR_CONFIG,
                           "aio.intra_op_parallelism %d is invalid (expected 1 to 256 threads)",
                           p->intra_op_parallelism);
    if (p->single_submit != 0 && p->single_submit != 1)
        return zero__error(ZERO_ERR_CONFIG, "aio.single_submit %d is invalid (expected a boolean)",
                           p->single_submit);
    if (p->overlap_events != 0 && p->overlap_events != 1)
        return zero__error(ZERO_ERR_CONFIG, "aio.overlap_events %d is invalid (expected a boolean)",
                           p->overlap_events);
    if ((unsigned)p->backend >= ZERO__AIO_BACKEND_COUNT)
        return zero__error(ZERO_ERR_CONFIG,
                           "aio backend %d is invalid (expected auto, io_uring or threads)",
                           (int)p->backend);
    return ZERO_OK;
}

zero_status_t zero__aio_params_set(zero__aio_params_t *p, const char *key, long long value) {
    if (!p || !key) return zero__error(ZERO_ERR_INVALID_ARG, "aio: params or key is NULL");
    /* Out-of-range values become values the check refuses, never a silent wrap. */
    int v = value < -1 ? -1 : value > 1000000 ? 1000000 : (int)value;
    if (strcmp(key, "block_size") == 0)
        p->block_size = value < 0 ? 0 : (size_t)value;
    else if (strcmp(key, "queue_depth") == 0)
        p->queue_depth = v;
    else if (strcmp(key, "intra_op_parallelism") == 0 || strcmp(key, "thread_count") == 0)
        p->intra_op_parallelism = v;
    else if (strcmp(key, "single_submit") == 0)
        p->single_submit = v;
    else if (strcmp(key, "overlap_events") == 0)
        p->overlap_events = v;
    else
        return zero__error(ZERO_ERR_CONFIG,
                           "aio.%s is not a known key (expected block_size, queue_depth, "
                           "intra_op_parallelism (or thread_count), single_submit, overlap_events)",
                           key);
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ buffers */

void *zero__aio_buffer_alloc(zero_mem_t *mem, size_t bytes) {
    size_t rounded = (bytes + PAGE - 1) / PAGE * PAGE;
    return zero_mem_alloc(mem, ZERO_MEM_OFFLOAD, rounded ? rounded : PAGE, PAGE);
}

void zero__aio_buffer_free(void *buf) { zero_mem_free(buf); }

struct zero__aio_pool {
    pthread_mutex_t mu;
    int count, nfree;
    size_t buffer_bytes;
    void **all;
    void **free_list;
};

zero_status_t zero__aio_pool_init(zero__aio_pool_t **out, zero_mem_t *mem, int count,
                                  size_t buffer_bytes) {
    if (!out || count < 1 || buffer_bytes == 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "aio pool: %d buffers of %zu bytes (expected at least one buffer of at "
                           "least one byte)",
                           count, buffer_bytes);
    zero__aio_pool_t *pool = calloc(1, sizeof *pool);
    if (!pool) goto fail_oom;
    pool->all = calloc((size_t)count, sizeof(void *));
    pool->free_list = calloc((size_t)count, sizeof(void *));
    if (!pool->all || !pool->free_list) goto fail_lists;
    pool->count = count;
    pool->buffer_bytes = (buffer_bytes + PAGE - 1) / PAGE * PAGE;
    for (int i = 0; i < count; i++) {
        pool->all[i] = zero__aio_buffer_alloc(mem, pool->buffer_bytes);
        if (!pool->all[i]) goto fail_buffers;
        pool->free_list[pool->nfree++] = pool->all[i];
    }
    pthread_mutex_init(&pool->mu, NULL);
    *out = pool;
    return ZERO_OK;
fail_buffers:
    for (int i = 0; i < count; i++) zero__aio_buffer_free(pool->all[i]);
fail_lists:
    free(pool->all);
    free(pool->free_list);
    free(pool);
fail_oom:
    return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio pool: cannot allocate %d buffers of %zu bytes",
                       count, buffer_bytes);
}

void zero__aio_pool_free(zero__aio_pool_t *pool) {
    if (!pool) return;
    ZERO_ASSERT(pool->nfree == pool->count);
    for (int i = 0; i < pool->count; i++) zero__aio_buffer_free(pool->all[i]);
    pthread_mutex_destroy(&pool->mu);
    free(pool->all);
    free(pool->free_list);
    free(pool);
}

void *zero__aio_pool_get(zero__aio_pool_t *pool) {
    pthread_mutex_lock(&pool->mu);
    void *b = pool->nfree ? pool->free_list[--pool->nfree] : NULL;
    pthread_mutex_unlock(&pool->mu);
    if (!b)
        zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio pool: all %d buffers of %zu bytes are in use",
                    pool->count, pool->buffer_bytes);
    return b;
}

void zero__aio_pool_put(zero__aio_pool_t *pool, void *buf) {
    if (!buf) return;
    pthread_mutex_lock(&pool->mu);
    int known = 0;
    for (int i = 0; i < pool->count; i++) known |= pool->all[i] == buf;
    ZERO_ASSERT(known && pool->nfree < pool->count);
    pool->free_list[pool->nfree++] = buf;
    pthread_mutex_unlock(&pool->mu);
}

size_t zero__aio_pool_buffer_bytes(const zero__aio_pool_t *pool) { return pool->buffer_bytes; }

int zero__aio_pool_available(const zero__aio_pool_t *pool) {
    pthread_mutex_lock((pthread_mutex_t *)&pool->mu);
    int n = pool->nfree;
    pthread_mutex_unlock((pthread_mutex_t *)&pool->mu);
    return n;
}

/* ------------------------------------------------------------------------------ context */

/* Each fallback is logged once per process: with ranks as threads every rank would repeat it. */
static atomic_int logged_no_uring, logged_no_direct;
static atomic_int refuse_direct;

zero_status_t zero__aio_init(zero__aio_t **out, const zero__aio_params_t *params, zero_mem_t *mem) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero__aio_init: out is NULL");
    zero_status_t st = zero__aio_params_check(params);
    if (st) return st;
    zero__aio_params_t p = *params;
    const char *env = getenv("ZERO_AIO_BACKEND");
    if (p.backend == ZERO__AIO_BACKEND_AUTO && env && *env) {
        if (strcmp(env, "threads") == 0)
            p.backend = ZERO__AIO_BACKEND_THREADS;
        else if (strcmp(env, "io_uring") == 0)
            p.backend = ZERO__AIO_BACKEND_URING;
        else if (strcmp(env, "auto") != 0)
            return zero__error(
                ZERO_ERR_CONFIG,
                "ZERO_AIO_BACKEND=%s is invalid (expected auto, io_uring or threads)", env);
    }
    zero__aio_t *aio = calloc(1, sizeof *aio);
    if (!aio) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory");
    aio->params = p;
    aio->mem = mem;
    pthread_mutex_init(&aio->mu, NULL);
    pthread_mutex_init(&aio->start_mu, NULL);
    pthread_cond_init(&aio->done_cv, NULL);
    aio->primary = ENGINE_THREADS;
    if (p.backend != ZERO__AIO_BACKEND_THREADS) {
        st = zero__aio_uring_start(aio, &aio->uring);
        if (st == ZERO_OK) {
            aio->primary = ENGINE_URING;
        } else if (st != ZERO_ERR_OUT_OF_MEMORY && p.backend == ZERO__AIO_BACKEND_AUTO) {
            if (atomic_exchange(&logged_no_uring, 1) == 0)
                zero__log(ZERO_LOG_WARN, -1, 0,
                          "aio: %s: swap I/O uses %d pread/pwrite thread(s) instead "
                          "(aio.intra_op_parallelism)",
                          zero_last_error(), p.intra_op_parallelism);
        } else {
            goto fail;
        }
    }
    if (aio->primary == ENGINE_THREADS) {
        st = zero__aio_threads_start(aio, &aio->threads);
        if (st) goto fail;
    }
    *out = aio;
    return ZERO_OK;
fail:
    pthread_cond_destroy(&aio->done_cv);
    pthread_mutex_destroy(&aio->start_mu);
    pthread_mutex_destroy(&aio->mu);
    free(aio);
    return st;
}

void zero__aio_free(zero__aio_t *aio) {
    if (!aio) return;
    (void)zero__aio_wait_all(aio);
    if (aio->uring) zero__aio_uring_stop(aio->uring);
    if (aio->threads) zero__aio_threads_stop(aio->threads);
    pthread_cond_destroy(&aio->done_cv);
    pthread_mutex_destroy(&aio->start_mu);
    pthread_mutex_destroy(&aio->mu);
    free(aio);
}

static const char *engine_name(int engine) {
    return engine == ENGINE_URING ? "io_uring" : "threads";
}

const char *zero__aio_engine_name(const zero__aio_t *aio) { return engine_name(aio->primary); }

const zero__aio_params_t *zero__aio_params(const zero__aio_t *aio) { return &aio->params; }

/* ------------------------------------------------------------------------------ files */

static int64_t bytes_free(const char *path) {
    char dir[4096];
    zero__dir_of(path, dir, sizeof dir);
    struct statvfs s;
    if (statvfs(dir, &s) != 0) return -1;
    return (int64_t)s.f_bavail * (int64_t)s.f_frsize;
}

static zero_status_t no_space(const char *path, int64_t need) {
    int64_t avail = bytes_free(path);
    return zero__error(ZERO_ERR_IO,
                       "aio: not enough disk space for the swap file %s: %lld bytes needed, "
                       "%lld bytes free on its file system",
                       path, (long long)need, (long long)avail);
}

static uint32_t zero_page_crc(void) {
    static const unsigned char zeros[ZERO__AIO_ALIGN];
    return zero__crc32c(0, zeros, sizeof zeros);
}

zero_status_t zero__aio_file_create(zero__aio_t *aio, const char *path, int64_t size_bytes,
                                    zero__aio_file_t **out) {
    if (!aio || !path || !*path || !out || size_bytes <= 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "aio: swap file '%s' of %lld bytes (expected a path and a size > 0)",
                           path ? path : "(null)", (long long)size_bytes);
    int64_t size = (size_bytes + (int64_t)PAGE - 1) / (int64_t)PAGE * (int64_t)PAGE;
    zero_status_t st;
    zero__aio_file_t *f = calloc(1, sizeof *f);
    if (!f) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory");
    f->aio = aio;
    f->path = strdup(path);
    f->pages = (size_t)(size / (int64_t)PAGE);
    f->crc = zero_mem_alloc(aio->mem, ZERO_MEM_OFFLOAD, f->pages * sizeof(uint32_t), 64);
    if (!f->path || !f->crc) {
        st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                         "aio: out of memory for the checksum table of %s (%zu pages)", path,
                         f->pages);
        goto fail_alloc;
    }
    f->size_bytes = size;
    /* O_TRUNC first: an old swap file's blocks then count as free in the check below. */
    int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
    f->fd = atomic_load(&refuse_direct) ? -1 : open(path, flags | O_DIRECT, 0600);
    int open_errno = atomic_load(&refuse_direct) ? EINVAL : errno;
    f->direct = f->fd >= 0;
    if (f->fd < 0 && open_errno == EINVAL) f->fd = open(path, flags, 0600);
    if (f->fd < 0) {
        st = zero__error(ZERO_ERR_IO, "aio: cannot create the swap file %s: %s", path,
                         strerror(errno));
        goto fail_alloc;
    }
    if (!f->direct && atomic_exchange(&logged_no_direct, 1) == 0)
        zero__log(ZERO_LOG_WARN, -1, 0,
                  "aio: the file system of %s refuses O_DIRECT: such swap files go through the "
                  "page cache on %d pread/pwrite thread(s)",
                  path, aio->params.intra_op_parallelism);
    int64_t avail = bytes_free(path);
    if (avail >= 0 && avail < size) {
        st = no_space(path, size);
        goto fail_file;
    }
    int rc = fallocate(f->fd, 0, 0, size);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
        rc = posix_fallocate(f->fd, 0, size);
    else if (rc != 0)
        rc = errno;
    if (rc != 0) {
        st = rc == ENOSPC
                 ? no_space(path, size)
                 : zero__error(ZERO_ERR_IO, "aio: cannot preallocate %lld bytes for %s: %s",
                               (long long)size, path, strerror(rc));
        goto fail_file;
    }
    uint32_t zc = zero_page_crc();
    for (size_t i = 0; i < f->pages; i++) f->crc[i] = zc;
    f->engine = f->direct ? aio->primary : ENGINE_THREADS;
    if (f->engine == ENGINE_THREADS) {
        /* The pool of a context whose primary engine is io_uring starts with its first page-cache
         * file, here in the caller; start_mu makes two such first files start one pool. */
        pthread_mutex_lock(&aio->start_mu);
        st = ZERO_OK;
        if (!aio->threads) {
            zero__aio_threads_t *t;
            st = zero__aio_threads_start(aio, &t);
            if (st == ZERO_OK) {
                pthread_mutex_lock(&aio->mu);
                aio->threads = t;
                pthread_mutex_unlock(&aio->mu);
            }
        }
        pthread_mutex_unlock(&aio->start_mu);
        if (st) goto fail_file;
    }
    *out = f;
    return ZERO_OK;
fail_file:
    close(f->fd);
    unlink(path);
fail_alloc:
    zero_mem_free(f->crc);
    free(f->path);
    free(f);
    return st;
}

void zero__aio_file_close(zero__aio_file_t *f, int remove) {
    if (!f) return;
    zero__aio_t *aio = f->aio;
    pthread_mutex_lock(&aio->mu);
    while (f->open_reqs > 0) pthread_cond_wait(&aio->done_cv, &aio->mu);
    pthread_mutex_unlock(&aio->mu);
    close(f->fd);
    if (remove) unlink(f->path);
    zero_mem_free(f->crc);
    free(f->path);
    free(f);
}

int zero__aio_file_direct(const zero__aio_file_t *f) { return f->direct; }
const char *zero__aio_file_engine_name(const zero__aio_file_t *f) { return engine_name(f->engine); }
int64_t zero__aio_file_size(const zero__aio_file_t *f) { return f->size_bytes; }
const char *zero__aio_file_path(const zero__aio_file_t *f) { return f->path; }

/* ------------------------------------------------------------------------------ requests */

static zero_status_t post(zero__aio_file_t *f, int write, void *buf, size_t bytes, int64_t offset,
                          zero__aio_req_t **out) {
    const char *what = write ? "write" : "read";
    if (!f || !out || (!buf && bytes))
        return zero__error(ZERO_ERR_INVALID_ARG, "aio: %s with a NULL file, buffer or handle",
                           what);
    if (offset < 0 || offset % (int64_t)PAGE || bytes % PAGE || (uintptr_t)buf % PAGE)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "aio: %s of %zu bytes at offset %lld of %s into buffer %p: offset, "
                           "length and buffer address must be multiples of 4096 (O_DIRECT)",
                           what, bytes, (long long)offset, f->path, buf);
    if (offset > f->size_bytes || (int64_t)bytes > f->size_bytes - offset)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "aio: %s of %zu bytes at offset %lld is beyond the end of %s (%lld "
                           "bytes)",
                           what, bytes, (long long)offset, f->path, (long long)f->size_bytes);
    zero__aio_req_t *r = calloc(1, sizeof *r);
    if (!r) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "aio: out of memory for a request");
    zero__aio_t *aio = f->aio;
    r->aio = aio;
    r->file = f;
    r->write = write;
    r->buf = buf;
    r->bytes = bytes;
    r->offset = offset;
    pthread_mutex_lock(&aio->mu);
    r->next_all = aio->all;
    if (aio->all) aio->all->prev_all = r;
    aio->all = r;
    aio->stats.requests++;
    if (bytes == 0) {
        r->complete = 1;
    } else {
        f->open_reqs++;
        r->queued = 1;
        zero__aio_queue_t *q = &aio->queue[f->engine];
        if (q->tail)
            q->tail->next_queued = r;
        else
            q->head = r;
        q->tail = r;
        if (f->engine == ENGINE_URING)
            zero__aio_uring_wake(aio->uring);
        else
            zero__aio_threads_wake(aio->threads);
    }
    pthread_mutex_unlock(&aio->mu);
    *out = r;
    return ZERO_OK;
}

zero_status_t zero__aio_read_post(zero__aio_file_t *f, void *buf, size_t bytes,
                                  int64_t offset_bytes, zero__aio_req_t **out) {
    return post(f, 0, buf, bytes, offset_bytes, out);
}

zero_status_t zero__aio_write_post(zero__aio_file_t *f, const void *buf, size_t bytes,
                                   int64_t offset_bytes, zero__aio_req_t **out) {
    return post(f, 1, (void *)buf, bytes, offset_bytes, out);
}

/* Under mu: take r out of its engine's queue (it is at the head unless it failed early). */
static void dequeue(zero__aio_t *aio, zero__aio_req_t *r) {
    zero__aio_queue_t *q = &aio->queue[r->file->engine];
    zero__aio_req_t *prev = NULL;
    for (zero__aio_req_t *x = q->head; x; prev = x, x = x->next_queued) {
        if (x != r) continue;
        if (prev)
            prev->next_queued = r->next_queued;
        else
            q->head = r->next_queued;
        if (q->tail == r) q->tail = prev;
        break;
    }
    r->next_queued = NULL;
    r->queued = 0;
}

int zero__aio_has_work(const zero__aio_t *aio, int engine) {
    return aio->queue[engine].head != NULL;
}

int zero__aio_cut(zero__aio_t *aio, int engine, zero__aio_piece_t *p) {
    zero__aio_req_t *r = aio->queue[engine].head;
    if (!r) return 0;
    size_t n = ZERO_MIN(aio->params.block_size, r->bytes - r->cut);
    *p = (zero__aio_piece_t){.req = r,
                             .file = r->file,
                             .write = r->write,
                             .buf = r->buf + r->cut,
                             .offset = r->offset + (int64_t)r->cut,
                             .bytes = n};
    r->cut += n;
    r->pieces_out++;
    if (r->cut == r->bytes) dequeue(aio, r);
    aio->stats.pieces++;
    return 1;
}

/* A fault armed on this piece's file for an offset inside it: consumed here. */
static zero__aio_fault_t take_fault(zero__aio_piece_t *p) {
    zero__aio_file_t *f = p->file;
    if (!atomic_load_explicit(&f->fault_armed, memory_order_relaxed)) return 0;
    zero__aio_fault_t fault = ZERO__AIO_FAULT_NONE;
    pthread_mutex_lock(&f->aio->mu);
    if (f->fault && (f->fault == ZERO__AIO_FAULT_WRITE_EIO) == p->write &&
        f->fault_offset >= p->offset + (int64_t)p->done &&
        f->fault_offset < p->offset + (int64_t)p->bytes) {
        fault = f->fault;
        f->fault = ZERO__AIO_FAULT_NONE;
        atomic_store(&f->fault_armed, 0);
    }
    pthread_mutex_unlock(&f->aio->mu);
    return fault;
}

int zero__aio_piece_result(zero__aio_piece_t *p, ssize_t res) {
    size_t left = p->bytes - p->done;
    if (p->fault_eof) res = 0;
    switch (take_fault(p)) {
    case ZERO__AIO_FAULT_EIO:
    case ZERO__AIO_FAULT_WRITE_EIO: res = -EIO; break;
    case ZERO__AIO_FAULT_SHORT_READ:
        res = (ssize_t)(left / 2 / PAGE * PAGE);
        p->fault_eof = 1;
        break;
    default: break;
    }
    if (res == -EINTR || res == -EAGAIN) return 0; /* transfer the same range again */
    if (res < 0) {
        p->err = (int)-res;
        return 1;
    }
    if (res == 0) {
        p->short_eof = 1;
        return 1;
    }
    p->done += ZERO_MIN((size_t)res, left);
    return p->done == p->bytes;
}

void zero__aio_piece_finish(zero__aio_piece_t *p, uint32_t *scratch) {
    zero__aio_file_t *f = p->file;
    zero_status_t st = ZERO_OK;
    char msg[512] = "";
    const char *what = p->write ? "write" : "read";
    size_t page0 = (size_t)(p->offset / (int64_t)PAGE), pages = p->bytes / PAGE;
    if (p->err) {
        st = ZERO_ERR_IO;
        snprintf(msg, sizeof msg, "aio: %s of %zu bytes at offset %lld of %s failed: %s%s", what,
                 p->bytes, (long long)p->offset, f->path, strerror(p->err),
                 p->err == ENOSPC ? " (the file was preallocated: the file system lost space)"
                                  : "");
    } else if (p->short_eof) {
        st = ZERO_ERR_IO;
        snprintf(msg, sizeof msg,
                 "aio: short %s at offset %lld of %s: %zu of %zu bytes (expected the whole "
                 "range: the file is shorter than %lld bytes)",
                 what, (long long)p->offset, f->path, p->done, p->bytes, (long long)f->size_bytes);
    } else if (p->write) {
        zero__crc32c_pages(f->crc + page0, p->buf, PAGE, pages);
    } else {
        zero__crc32c_pages(scratch, p->buf, PAGE, pages);
        for (size_t i = 0; i < pages; i++) {
            if (scratch[i] == f->crc[page0 + i]) continue;
            st = ZERO_ERR_FORMAT;
            snprintf(msg, sizeof msg,
                     "aio: checksum mismatch in %s at offset %lld (a 4096-byte page): expected "
                     "crc32c %08x (as last written), found %08x: the swap file was changed or "
                     "the device returned wrong data",
                     f->path, (long long)(p->offset + (int64_t)(i * PAGE)), f->crc[page0 + i],
                     scratch[i]);
            break;
        }
    }
    zero__aio_t *aio = f->aio;
    zero__aio_req_t *r = p->req;
    pthread_mutex_lock(&aio->mu);
    if (st == ZERO_OK) {
        if (p->write)
            aio->stats.bytes_written += p->bytes;
        else
            aio->stats.bytes_read += p->bytes;
    } else if (r->status == ZERO_OK) {
        /* The first failure names the request; its other pieces still finish, no new ones. */
        r->status = st;
        memcpy(r->message, msg, sizeof r->message);
        if (r->queued) dequeue(aio, r);
    }
    r->pieces_out--;
    if (r->pieces_out == 0 && !r->queued) {
        r->complete = 1;
        f->open_reqs--;
        r->file = NULL;
        pthread_cond_broadcast(&aio->done_cv);
    }
    pthread_mutex_unlock(&aio->mu);
}

int zero__aio_test(zero__aio_req_t *req) {
    zero__aio_t *aio = req->aio;
    pthread_mutex_lock(&aio->mu);
    int c = req->complete;
    pthread_mutex_unlock(&aio->mu);
    return c;
}

/* Under mu: unlink a complete request from aio->all. */
static void unlink_all(zero__aio_t *aio, zero__aio_req_t *r) {
    if (r->prev_all)
        r->prev_all->next_all = r->next_all;
    else
        aio->all = r->next_all;
    if (r->next_all) r->next_all->prev_all = r->prev_all;
}

zero_status_t zero__aio_wait(zero__aio_req_t *req) {
    if (!req) return zero__error(ZERO_ERR_INVALID_ARG, "zero__aio_wait: req is NULL");
    zero__aio_t *aio = req->aio;
    double t0 = zero_time_now();
    pthread_mutex_lock(&aio->mu);
    while (!req->complete) pthread_cond_wait(&aio->done_cv, &aio->mu);
    unlink_all(aio, req);
    aio->stats.wait_seconds += zero_time_now() - t0;
    pthread_mutex_unlock(&aio->mu);
    zero_status_t st = req->status;
    if (st) zero__error(st, "%s", req->message);
    free(req);
    return st;
}

zero_status_t zero__aio_wait_all(zero__aio_t *aio) {
    if (!aio) return zero__error(ZERO_ERR_INVALID_ARG, "zero__aio_wait_all: aio is NULL");
    zero_status_t st = ZERO_OK;
    char msg[sizeof((zero__aio_req_t *)0)->message] = "";
    double t0 = zero_time_now();
    pthread_mutex_lock(&aio->mu);
    while (aio->all) {
        zero__aio_req_t *r = aio->all;
        while (!r->complete) pthread_cond_wait(&aio->done_cv, &aio->mu);
        unlink_all(aio, r);
        if (r->status && !st) {
            st = r->status;
            memcpy(msg, r->message, sizeof msg);
        }
        free(r);
    }
    aio->stats.wait_seconds += zero_time_now() - t0;
    pthread_mutex_unlock(&aio->mu);
    if (st) zero__error(st, "%s", msg);
    return st;
}

zero_status_t zero__aio_read(zero__aio_file_t *f, void *buf, size_t bytes, int64_t offset_bytes) {
    zero__aio_req_t *r = NULL;
    zero_status_t st = zero__aio_read_post(f, buf, bytes, offset_bytes, &r);
    return st ? st : zero__aio_wait(r);
}

zero_status_t zero__aio_write(zero__aio_file_t *f, const void *buf, size_t bytes,
                              int64_t offset_bytes) {
    zero__aio_req_t *r = NULL;
    zero_status_t st = zero__aio_write_post(f, buf, bytes, offset_bytes, &r);
    return st ? st : zero__aio_wait(r);
}

void zero__aio_get_stats(zero__aio_t *aio, zero__aio_stats_t *out) {
    pthread_mutex_lock(&aio->mu);
    *out = aio->stats;
    pthread_mutex_unlock(&aio->mu);
}

void zero__aio_stats_window(zero__aio_t *aio, zero__aio_stats_t *base, zero__aio_stats_t *window) {
    zero__aio_stats_t now;
    zero__aio_get_stats(aio, &now);
    window->bytes_read = now.bytes_read - base->bytes_read;
    window->bytes_written = now.bytes_written - base->bytes_written;
    window->requests = now.requests - base->requests;
    window->pieces = now.pieces - base->pieces;
    window->wait_seconds = now.wait_seconds - base->wait_seconds;
    *base = now;
}

/* ------------------------------------------------------------------------------ test hooks */

void zero__aio_test_inject(zero__aio_file_t *f, zero__aio_fault_t fault, int64_t offset_bytes) {
    pthread_mutex_lock(&f->aio->mu);
    f->fault = fault;
    f->fault_offset = offset_bytes;
    atomic_store(&f->fault_armed, fault != ZERO__AIO_FAULT_NONE);
    pthread_mutex_unlock(&f->aio->mu);
}

void zero__aio_test_refuse_direct(int on) { atomic_store(&refuse_direct, on != 0); }
