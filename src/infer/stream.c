/* stream.c — the generator's blocks in a file, or sharded over ranks, fetched just in time
 * through a ring of buffers (stream.h has the cycle and its guarantees).
 *
 * Invariants: use k of the cycle (layer k % L) lives in buffer k % nbuf; `next` is the next use
 * to acquire; buffer b's request, when not NULL, fetches the use that will next take b (a read
 * of the file, or an all-gather of the ranks' slices). Without wrapping (nbuf >= L) the buffers
 * are filled once by start and never fetched again.
 */
#include "stream.h"

#include "core/core_internal.h"
#include "io/aio.h"
#include "zero/comm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct zero__wstream {
    /* in a file: */
    zero__aio_t *aio;
    zero__aio_file_t *file;
    /* or sharded: this rank's slice of every layer, slice = region_bytes / ranks bytes each */
    zero_comm_t *comm; /* borrowed */
    void *slices;      /* (layers x slice) owned */
    size_t slice;
    uint64_t gathered;        /* bytes received from the other ranks */
    double wait_s;            /* waiting for all-gathers */
    int layers, nbuf, staged; /* staged: the layer being loaded, -1 none */
    size_t region_bytes;
    void **buf;                 /* (nbuf) owned, page-aligned */
    zero__aio_req_t **req;      /* (nbuf) the read in flight into each buffer, or NULL */
    zero_comm_request_t **creq; /* (nbuf) sharded: the all-gather in flight, or NULL */
    uint64_t next;              /* the next use of the cycle */
    int held;                   /* 1 between acquire and release */
    int broken;                 /* a fetch failed: the cycle is lost, every acquire fails */
};

/* The ring: layers, nbuf buffers of region_bytes (page-aligned) and their requests. */
static zero_status_t ring_alloc(zero__wstream_t **out, int layers, size_t region_bytes, int nbuf) {
    zero__wstream_t *s = calloc(1, sizeof *s);
    *out = s;
    if (!s) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "generate: out of memory");
    s->layers = layers;
    s->nbuf = ZERO_MIN(nbuf, layers); /* more buffers than layers would hold nothing */
    s->region_bytes = region_bytes;
    s->staged = -1;
    s->buf = calloc((size_t)s->nbuf, sizeof *s->buf);
    s->req = calloc((size_t)s->nbuf, sizeof *s->req);
    s->creq = calloc((size_t)s->nbuf, sizeof *s->creq);
    if (!s->buf || !s->req || !s->creq)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "generate: out of memory");
    for (int b = 0; b < s->nbuf; b++)
        if (!(s->buf[b] = zero__aio_buffer_alloc(NULL, region_bytes)))
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "generate: cannot allocate %d layer buffers of %.1f MiB (try a "
                               "smaller buffer_count)",
                               s->nbuf, (double)region_bytes / 1048576.0);
    return ZERO_OK;
}

zero_status_t zero__wstream_init_sharded(zero__wstream_t **out, zero_comm_t *comm, int layers,
                                         size_t region_bytes, int nbuf) {
    const size_t ranks = (size_t)zero_comm_size(comm);
    ZERO_ASSERT(layers >= 1 && nbuf >= 1 && region_bytes % (64 * ranks) == 0);
    *out = NULL;
    zero__wstream_t *s;
    zero_status_t st = ring_alloc(&s, layers, region_bytes, nbuf);
    if (!st) {
        s->comm = comm;
        s->slice = region_bytes / ranks;
        s->slices = zero_mem_calloc(NULL, ZERO_MEM_PARAMS, (size_t)layers * s->slice, 64);
        if (!s->slices)
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                             "generate: cannot allocate this rank's %.1f MiB of the blocks",
                             (double)layers * (double)s->slice / 1048576.0);
    }
    if (st) {
        zero__wstream_free(s);
        return st;
    }
    *out = s;
    return ZERO_OK;
}

zero_status_t zero__wstream_init(zero__wstream_t **out, const char *dir, int layers,
                                 size_t region_bytes, int nbuf) {
    static atomic_int serial; /* several generators of one process get files of their own */
    ZERO_ASSERT(layers >= 1 && nbuf >= 1 && region_bytes % ZERO__AIO_ALIGN == 0);
    *out = NULL;
    struct stat sb;
    if (!dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)
        return zero__error(ZERO_ERR_IO,
                           "nvme_path %s is not a writable directory (expected a directory for "
                           "the weights file)",
                           dir ? dir : "(null)");
    zero__wstream_t *s;
    zero_status_t st = ring_alloc(&s, layers, region_bytes, nbuf);
    if (st) goto fail;
    const zero__aio_params_t ap = zero__aio_params_default();
    if ((st = zero__aio_init(&s->aio, &ap, NULL)) != ZERO_OK) goto fail;
    char path[4200];
    snprintf(path, sizeof path, "%s/zero-weights-%ld-%d.bin", dir, (long)getpid(),
             atomic_fetch_add(&serial, 1));
    st = zero__aio_file_create(s->aio, path, (int64_t)region_bytes * layers, &s->file);
    if (st) goto fail;
    *out = s;
    return ZERO_OK;
fail:
    zero__wstream_free(s);
    return st;
}

void zero__wstream_free(zero__wstream_t *s) {
    if (!s) return;
    for (int b = 0; s->req && b < s->nbuf; b++) /* a failed fetch no longer matters */
        if (s->req[b]) (void)zero__aio_wait(s->req[b]);
    for (int b = 0; s->creq && b < s->nbuf; b++)
        if (s->creq[b]) (void)zero_comm_wait(s->creq[b]);
    zero__aio_file_close(s->file, 1);
    zero__aio_free(s->aio);
    zero_mem_free(s->slices);
    for (int b = 0; s->buf && b < s->nbuf; b++) zero__aio_buffer_free(s->buf[b]);
    free(s->buf);
    free(s->req);
    free(s->creq);
    free(s);
}

void *zero__wstream_stage(zero__wstream_t *s, int layer) {
    ZERO_ASSERT(s->staged < 0 && layer >= 0 && layer < s->layers);
    s->staged = layer;
    memset(s->buf[0], 0, s->region_bytes); /* the gaps between tensors */
    return s->buf[0];
}

zero_status_t zero__wstream_flush(zero__wstream_t *s) {
    ZERO_ASSERT(s->staged >= 0);
    const int layer = s->staged;
    s->staged = -1;
    if (s->comm) { /* keep this rank's slice of the region */
        const size_t r = (size_t)zero_comm_rank(s->comm);
        memcpy((char *)s->slices + (size_t)layer * s->slice, (char *)s->buf[0] + r * s->slice,
               s->slice);
        return ZERO_OK;
    }
    return zero__aio_write(s->file, s->buf[0], s->region_bytes,
                           (int64_t)layer * (int64_t)s->region_bytes);
}

/* Post the fetch of use k into its buffer: the file's read, or the ranks' all-gather. */
static zero_status_t post(zero__wstream_t *s, uint64_t k) {
    const int b = (int)(k % (uint64_t)s->nbuf), layer = (int)(k % (uint64_t)s->layers);
    ZERO_ASSERT(!s->req[b] && !s->creq[b]);
    if (s->comm) {
        s->gathered += s->region_bytes - s->slice;
        return zero_comm_all_gather_post((char *)s->slices + (size_t)layer * s->slice, s->buf[b],
                                         s->slice, ZERO_DTYPE_UINT8, s->comm, &s->creq[b]);
    }
    return zero__aio_read_post(s->file, s->buf[b], s->region_bytes,
                               (int64_t)layer * (int64_t)s->region_bytes, &s->req[b]);
}

zero_status_t zero__wstream_start(zero__wstream_t *s) {
    ZERO_ASSERT(s->staged < 0);
    zero_status_t st = ZERO_OK;
    for (int k = 0; k < s->nbuf && !st; k++) st = post(s, (uint64_t)k);
    return st;
}

zero_status_t zero__wstream_acquire(zero__wstream_t *s, int layer, const void **region) {
    if (s->broken && s->comm)
        return zero__error(ZERO_ERR_IO, "generate: an earlier all-gather of the blocks failed "
                                        "(expected a new generator)");
    if (s->broken)
        return zero__error(ZERO_ERR_IO,
                           "weights file %s: an earlier read failed (expected a new generator)",
                           zero__aio_file_path(s->file));
    ZERO_ASSERT(!s->held && (uint64_t)layer == s->next % (uint64_t)s->layers);
    const int b = (int)(s->next % (uint64_t)s->nbuf);
    zero_status_t st = ZERO_OK;
    if (s->req[b]) {
        st = zero__aio_wait(s->req[b]);
        s->req[b] = NULL;
    } else if (s->creq[b]) {
        const double t0 = zero_time_now();
        st = zero_comm_wait(s->creq[b]);
        s->creq[b] = NULL;
        s->wait_s += zero_time_now() - t0;
    }
    if (st) {
        s->broken = 1;
        return st;
    }
    s->held = 1;
    *region = s->buf[b];
    return ZERO_OK;
}

zero_status_t zero__wstream_release(zero__wstream_t *s) {
    ZERO_ASSERT(s->held);
    s->held = 0;
    const uint64_t k = s->next++;
    /* nbuf >= layers: every layer stays in its buffer, nothing to read again */
    const zero_status_t st = s->nbuf < s->layers ? post(s, k + (uint64_t)s->nbuf) : ZERO_OK;
    if (st) s->broken = 1;
    return st;
}

const char *zero__wstream_path(const zero__wstream_t *s) {
    return s->file ? zero__aio_file_path(s->file) : NULL;
}
const char *zero__wstream_engine(const zero__wstream_t *s) {
    return s->file ? zero__aio_file_engine_name(s->file)
                   : zero_backend_name(zero_comm_backend(s->comm));
}

void zero__wstream_stats(zero__wstream_t *s, uint64_t *bytes_read, double *wait_s) {
    if (s->comm) {
        *bytes_read = s->gathered;
        *wait_s = s->wait_s;
        return;
    }
    zero__aio_stats_t st;
    zero__aio_get_stats(s->aio, &st);
    *bytes_read = st.bytes_read;
    *wait_s = st.wait_seconds;
}

size_t zero__wstream_slice_bytes(const zero__wstream_t *s) { return s->comm ? s->slice : 0; }
