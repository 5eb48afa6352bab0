/* test_aio.c — the swap I/O layer (src/io/aio.h) against plain pread/pwrite.
 *
 * Oracle: a reference file written with ordinary pwrite receives every write the layer makes;
 * every read through the layer must equal pread of the reference, and at the end the swap file
 * itself, read back with plain read(2) (not through the layer), must equal the reference bytes.
 * Done for each engine (io_uring when the kernel allows it, the pread/pwrite pool) and several
 * aio blocks (block sizes, queue depths, single_submit, overlap_events off, several threads), with
 * random page-aligned offsets and sizes and several requests in flight at once, including one
 * request far larger than queue_depth x block_size overlapped with computation, and one that
 * must complete while the caller only polls (the engine refills on its own).
 * Faults: a bit flipped on disk (through a plain descriptor) is a checksum mismatch naming the
 * file and the page offset; an injected EIO and short read, and a real short read (the file
 * truncated behind the layer's back), are named I/O errors; misaligned or out-of-range requests
 * and bad parameters are named errors. tmpfs (/dev/shm), and a file system refusing O_DIRECT
 * (simulated, as tmpfs before Linux 6.6), give the same bytes.
 *
 * `test_aio full`: preallocation on a full file system — a 1 MiB tmpfs mounted in a private mount
 * namespace of this process (gone with the process, even on a crash); exits 77 (skipped) where
 * mounting is not permitted.
 */
#include "check.h"
#include "core/crc32c.h"
#include "io/aio.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define PAGE 4096
#define FILE_BYTES ((size_t)8 << 20)

static char root[512];
static int have_uring;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rnd();
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

static int full_pwrite(int fd, const void *b, size_t n, off_t at) {
    while (n) {
        ssize_t w = pwrite(fd, b, n, at);
        if (w <= 0) return -1;
        b = (const char *)b + w, n -= (size_t)w, at += w;
    }
    return 0;
}

static int full_pread(int fd, void *b, size_t n, off_t at) {
    while (n) {
        ssize_t r = pread(fd, b, n, at);
        if (r <= 0) return -1;
        b = (char *)b + r, n -= (size_t)r, at += r;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ parameters */

static void test_params(void) {
    zero__aio_params_t p = zero__aio_params_default();
    /* DeepSpeed's documented defaults (deepspeed-notes §1.5) */
    CHECK(p.block_size == 1048576 && p.queue_depth == 8 && p.intra_op_parallelism == 1 &&
              p.single_submit == 0 && p.overlap_events == 1,
          "defaults");
    CHECK(zero__aio_params_check(&p) == ZERO_OK, "defaults valid");
    struct {
        const char *key;
        long long value;
        const char *want;
    } bad[] = {
        {"block_size", 1000, "aio.block_size 1000 is invalid (expected a multiple of 4096"},
        {"block_size", 0, "aio.block_size 0"},
        {"block_size", (long long)1 << 30, "aio.block_size 1073741824"},
        {"queue_depth", 0, "aio.queue_depth 0 is invalid"},
        {"queue_depth", -3, "aio.queue_depth -1 is invalid"},
        {"intra_op_parallelism", 0, "aio.intra_op_parallelism 0 is invalid"},
        {"thread_count", 1000, "aio.intra_op_parallelism 1000 is invalid"},
        {"single_submit", 2, "aio.single_submit 2 is invalid (expected a boolean)"},
        {"overlap_events", -1, "aio.overlap_events -1 is invalid (expected a boolean)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zero__aio_params_t q = zero__aio_params_default();
        CHECK(zero__aio_params_set(&q, bad[i].key, bad[i].value) == ZERO_OK, "set %s", bad[i].key);
        zero_status_t st = zero__aio_params_check(&q);
        CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), bad[i].want),
              "%s=%lld refused: %d '%s'", bad[i].key, bad[i].value, (int)st, zero_last_error());
        zero__aio_t *aio = NULL;
        CHECK(zero__aio_init(&aio, &q, NULL) == ZERO_ERR_CONFIG && !aio, "init refuses %s",
              bad[i].key);
    }
    zero__aio_params_t q = zero__aio_params_default();
    CHECK(zero__aio_params_set(&q, "thread_count", 4) == ZERO_OK && q.intra_op_parallelism == 4,
          "thread_count is an alias of intra_op_parallelism");
    CHECK(zero__aio_params_set(&q, "block_sise", 4096) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "aio.block_sise is not a known key") &&
              strstr(zero_last_error(), "block_size"),
          "unknown key: '%s'", zero_last_error());
    q = zero__aio_params_default();
    q.backend = (zero__aio_backend_t)7;
    CHECK(zero__aio_params_check(&q) == ZERO_ERR_CONFIG, "bad backend");
    /* the environment override, read when the backend is auto */
    setenv("ZERO_AIO_BACKEND", "uring?", 1);
    zero__aio_t *aio = NULL;
    q = zero__aio_params_default();
    CHECK(zero__aio_init(&aio, &q, NULL) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "ZERO_AIO_BACKEND=uring?"),
          "bad ZERO_AIO_BACKEND: '%s'", zero_last_error());
    setenv("ZERO_AIO_BACKEND", "threads", 1);
    CHECK(zero__aio_init(&aio, &q, NULL) == ZERO_OK &&
              strcmp(zero__aio_engine_name(aio), "threads") == 0,
          "ZERO_AIO_BACKEND=threads forces the pool");
    zero__aio_free(aio);
    unsetenv("ZERO_AIO_BACKEND");
}

/* ------------------------------------------------------------------------------ buffers */

static void test_buffers(void) {
    zero_mem_t *mem;
    CHECK(zero_mem_init(&mem, NULL) == ZERO_OK, "mem");
    zero__aio_pool_t *pool;
    CHECK(zero__aio_pool_init(&pool, mem, 3, 10000) == ZERO_OK, "pool init");
    CHECK(zero__aio_pool_buffer_bytes(pool) == 12288, "buffers rounded to pages");
    zero_mem_stats_t s;
    zero_mem_get_stats(mem, &s);
    CHECK(s.live_bytes[ZERO_MEM_OFFLOAD] == 3 * 12288, "pool accounted as offload staging: %zu",
          s.live_bytes[ZERO_MEM_OFFLOAD]);
    void *b[3];
    for (int i = 0; i < 3; i++) {
        b[i] = zero__aio_pool_get(pool);
        CHECK(b[i] && (uintptr_t)b[i] % PAGE == 0, "buffer %d page-aligned", i);
    }
    CHECK(zero__aio_pool_get(pool) == NULL && strstr(zero_last_error(), "all 3 buffers"),
          "exhausted pool: '%s'", zero_last_error());
    CHECK(zero__aio_pool_available(pool) == 0, "none available");
    for (int i = 0; i < 3; i++) zero__aio_pool_put(pool, b[i]);
    CHECK(zero__aio_pool_available(pool) == 3, "all back");
    zero__aio_pool_free(pool);
    zero_mem_get_stats(mem, &s);
    CHECK(s.live_total_bytes == 0, "everything freed");
    zero_mem_free_domain(mem);
}

/* ------------------------------------------------------------------------------ round trips */

typedef struct config {
    const char *name;
    zero__aio_backend_t backend;
    size_t block_size;
    int queue_depth, threads, single_submit, overlap_events;
} config_t;

/* One swap file and its reference, exercised with random batches of requests. */
static void roundtrip(const config_t *c, const char *dir, int refuse_direct) {
    zero__aio_params_t p = zero__aio_params_default();
    p.backend = c->backend;
    p.block_size = c->block_size;
    p.queue_depth = c->queue_depth;
    p.intra_op_parallelism = c->threads;
    p.single_submit = c->single_submit;
    p.overlap_events = c->overlap_events;
    zero_mem_t *mem;
    zero_mem_init(&mem, NULL);
    zero__aio_t *aio;
    zero_status_t st = zero__aio_init(&aio, &p, mem);
    CHECK(st == ZERO_OK, "%s: init", c->name);
    if (st) return;
    char path[600], refpath[600];
    snprintf(path, sizeof path, "%s/swap-%s.bin", dir, c->name);
    snprintf(refpath, sizeof refpath, "%s/ref-%s.bin", root, c->name);
    zero__aio_test_refuse_direct(refuse_direct);
    zero__aio_file_t *f = NULL;
    st = zero__aio_file_create(aio, path, (int64_t)FILE_BYTES, &f);
    zero__aio_test_refuse_direct(0);
    CHECK(st == ZERO_OK, "%s: create %s", c->name, path);
    if (st) {
        zero__aio_free(aio);
        zero_mem_free_domain(mem);
        return;
    }
    const char *engine = zero__aio_file_engine_name(f);
    if (refuse_direct)
        CHECK(!zero__aio_file_direct(f) && strcmp(engine, "threads") == 0,
              "%s: a file refusing O_DIRECT goes to the thread pool (%s)", c->name, engine);
    else if (c->backend == ZERO__AIO_BACKEND_URING)
        CHECK(strcmp(engine, "io_uring") == 0 && zero__aio_file_direct(f), "%s: on io_uring",
              c->name);
    else if (c->backend == ZERO__AIO_BACKEND_THREADS)
        CHECK(strcmp(engine, "threads") == 0, "%s: on the pool", c->name);
    int ref = open(refpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(ref >= 0 && ftruncate(ref, (off_t)FILE_BYTES) == 0, "reference file");

    unsigned char *buf = zero__aio_buffer_alloc(mem, FILE_BYTES);
    unsigned char *chk = malloc(FILE_BYTES);
    /* the whole file reads as zeros before any write (preallocated, checksums of zero pages) */
    CHECK(zero__aio_read(f, buf, FILE_BYTES, 0) == ZERO_OK, "%s: read a fresh file", c->name);
    size_t nonzero = 0;
    for (size_t i = 0; i < FILE_BYTES; i++) nonzero += buf[i] != 0;
    CHECK(nonzero == 0, "%s: a fresh file reads as zeros (%zu non-zero bytes)", c->name, nonzero);

    /* Batches of up to 4 requests, one per quarter of the file (so none overlaps), each a random
     * page range and direction, using disjoint quarters of the buffer too. */
    const size_t quarter = FILE_BYTES / 4, qpages = quarter / PAGE;
    int bad_reads = 0;
    for (int batch = 0; batch < 24; batch++) {
        zero__aio_req_t *req[4];
        size_t off[4], len[4];
        int write[4], n = 0;
        for (int k = 0; k < 4; k++) {
            if (rnd() % 4 == 0) continue;
            size_t pages = 1 + rnd() % (rnd() % 2 ? 8 : qpages);
            size_t first = rnd() % (qpages - pages + 1);
            off[n] = (size_t)k * quarter + first * PAGE;
            len[n] = pages * PAGE;
            write[n] = rnd() % 2;
            unsigned char *b = buf + off[n];
            if (write[n]) {
                fill_random(b, len[n]);
                CHECK(full_pwrite(ref, b, len[n], (off_t)off[n]) == 0, "reference write");
                st = zero__aio_write_post(f, b, len[n], (int64_t)off[n], &req[n]);
            } else {
                st = zero__aio_read_post(f, b, len[n], (int64_t)off[n], &req[n]);
            }
            CHECK(st == ZERO_OK, "%s: post", c->name);
            if (st) return;
            n++;
        }
        if (batch % 3 == 0) {
            CHECK(zero__aio_wait_all(aio) == ZERO_OK, "%s: wait_all", c->name);
        } else {
            for (int k = n - 1; k >= 0; k--)
                CHECK(zero__aio_wait(req[k]) == ZERO_OK, "%s: wait", c->name);
        }
        for (int k = 0; k < n; k++) {
            if (write[k]) continue;
            CHECK(full_pread(ref, chk, len[k], (off_t)off[k]) == 0, "reference read");
            bad_reads += memcmp(chk, buf + off[k], len[k]) != 0;
        }
    }
    CHECK(bad_reads == 0, "%s: %d reads differ from the reference", c->name, bad_reads);

    /* One request far larger than queue_depth x block_size, with computation meanwhile: the
     * engine must refill on its own. */
    zero__aio_req_t *big;
    fill_random(buf, FILE_BYTES);
    CHECK(full_pwrite(ref, buf, FILE_BYTES, 0) == 0, "reference write");
    CHECK(zero__aio_write_post(f, buf, FILE_BYTES, 0, &big) == ZERO_OK, "%s: big post", c->name);
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++) x = x + 1e-9 * i;
    CHECK(zero__aio_wait(big) == ZERO_OK, "%s: big write", c->name);
    memset(buf, 0, FILE_BYTES);
    CHECK(zero__aio_read_post(f, buf, FILE_BYTES, 0, &big) == ZERO_OK, "%s: big read post",
          c->name);
    CHECK(zero__aio_test(big) == 0 || zero__aio_test(big) == 1, "test");
    CHECK(zero__aio_wait(big) == ZERO_OK, "%s: big read", c->name);
    CHECK(full_pread(ref, chk, FILE_BYTES, 0) == 0, "reference read");
    CHECK(memcmp(chk, buf, FILE_BYTES) == 0, "%s: big read equals the reference", c->name);

    /* The engine moves a request far larger than what it keeps in flight while the caller only
     * polls (zero__aio_test takes a lock, it transfers nothing): no caller-driven refill. */
    CHECK(zero__aio_write_post(f, buf, FILE_BYTES, 0, &big) == ZERO_OK, "%s: post", c->name);
    int polls = 0;
    while (!zero__aio_test(big) && polls < 30000) {
        usleep(1000);
        polls++;
    }
    CHECK(zero__aio_test(big), "%s: a request progresses while the caller does not wait", c->name);
    CHECK(zero__aio_wait(big) == ZERO_OK, "%s: wait after completion", c->name);

    zero__aio_stats_t s;
    zero__aio_get_stats(aio, &s);
    CHECK(s.bytes_read >= 2 * FILE_BYTES && s.bytes_written >= FILE_BYTES &&
              s.pieces >= s.requests && s.requests >= 20 && s.wait_seconds > 0 &&
              s.wait_seconds < 60,
          "%s: stats read %llu written %llu", c->name, (unsigned long long)s.bytes_read,
          (unsigned long long)s.bytes_written);

    /* misuse: named errors, nothing posted */
    zero__aio_req_t *r = NULL;
    st = zero__aio_read_post(f, buf + 100, PAGE, 0, &r);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "multiples of 4096") && !r,
          "misaligned buffer: '%s'", zero_last_error());
    st = zero__aio_write_post(f, buf, PAGE, 100, &r);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "offset 100"),
          "misaligned offset: '%s'", zero_last_error());
    st = zero__aio_read_post(f, buf, 2 * PAGE, (int64_t)FILE_BYTES - PAGE, &r);
    CHECK(st == ZERO_ERR_INVALID_ARG && strstr(zero_last_error(), "beyond the end"),
          "beyond the end: '%s'", zero_last_error());
    CHECK(zero__aio_read_post(f, buf, 0, 0, &r) == ZERO_OK && zero__aio_test(r) &&
              zero__aio_wait(r) == ZERO_OK,
          "an empty request completes at once");

    zero__aio_file_close(f, 0);
    /* the bytes on disk, read without the layer, are the reference's */
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && full_pread(fd, buf, FILE_BYTES, 0) == 0, "plain read of the swap file");
    CHECK(memcmp(chk, buf, FILE_BYTES) == 0, "%s: the swap file equals the reference file",
          c->name);
    close(fd);
    close(ref);
    unlink(path);
    unlink(refpath);
    free(chk);
    zero__aio_buffer_free(buf);
    zero__aio_free(aio);
    zero_mem_stats_t ms;
    zero_mem_get_stats(mem, &ms);
    CHECK(ms.live_total_bytes == 0 && ms.peak_bytes[ZERO_MEM_OFFLOAD] > 0,
          "%s: checksum table and buffers accounted and freed", c->name);
    zero_mem_free_domain(mem);
    printf("  %-22s %-9s %s\n", c->name, engine, dir);
}

/* ------------------------------------------------------------------------------ faults */

static void test_faults(zero__aio_backend_t backend, const char *name) {
    zero__aio_params_t p = zero__aio_params_default();
    p.backend = backend;
    p.block_size = 16 * PAGE;
    zero__aio_t *aio;
    CHECK(zero__aio_init(&aio, &p, NULL) == ZERO_OK, "%s: init", name);
    char path[600];
    snprintf(path, sizeof path, "%s/faults-%s.bin", root, name);
    zero__aio_file_t *f;
    CHECK(zero__aio_file_create(aio, path, 1 << 20, &f) == ZERO_OK, "%s: create", name);
    const size_t n = 256 << 10;
    unsigned char *buf = zero__aio_buffer_alloc(NULL, n), *orig = malloc(n);
    fill_random(orig, n);
    memcpy(buf, orig, n);
    CHECK(zero__aio_write(f, buf, n, 128 << 10) == ZERO_OK, "%s: write", name);

    /* a bit flipped on disk, behind the layer's back */
    int fd = open(path, O_RDWR);
    unsigned char byte;
    off_t at = (128 << 10) + 5000;
    CHECK(fd >= 0 && pread(fd, &byte, 1, at) == 1, "plain read");
    byte ^= 8;
    CHECK(pwrite(fd, &byte, 1, at) == 1 && fsync(fd) == 0, "flip a bit");
    zero_status_t st = zero__aio_read(f, buf, n, 128 << 10);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "checksum mismatch") &&
              strstr(zero_last_error(), path) && strstr(zero_last_error(), "offset 135168"),
          "%s: flipped bit: %d '%s'", name, (int)st, zero_last_error());
    /* the pages around it still read, and rewriting the page heals it */
    CHECK(zero__aio_read(f, buf, PAGE, 128 << 10) == ZERO_OK && memcmp(buf, orig, PAGE) == 0,
          "%s: the page before is intact", name);
    memcpy(buf, orig, n);
    CHECK(zero__aio_write(f, buf, 2 * PAGE, 128 << 10) == ZERO_OK &&
              zero__aio_read(f, buf, n, 128 << 10) == ZERO_OK && memcmp(buf, orig, n) == 0,
          "%s: rewritten page reads again", name);
    /* a flip in a never-written page is caught too (the checksum of a zero page) */
    byte = 1;
    CHECK(pwrite(fd, &byte, 1, 900 << 10) == 1 && fsync(fd) == 0, "flip in a zero page");
    st = zero__aio_read(f, buf, 16 * PAGE, 896 << 10);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), "offset 921600"),
          "%s: flipped zero page: '%s'", name, zero_last_error());

    /* injected EIO and short read, in the middle of a multi-piece request */
    zero__aio_test_inject(f, ZERO__AIO_FAULT_EIO, (128 << 10) + 20 * PAGE);
    st = zero__aio_read(f, buf, n, 128 << 10);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "Input/output error") &&
              strstr(zero_last_error(), path) && strstr(zero_last_error(), "offset 196608"),
          "%s: EIO: %d '%s'", name, (int)st, zero_last_error());
    zero__aio_test_inject(f, ZERO__AIO_FAULT_SHORT_READ, 128 << 10);
    st = zero__aio_read(f, buf, n, 128 << 10);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "short read") &&
              strstr(zero_last_error(), path) && strstr(zero_last_error(), "offset 131072") &&
              strstr(zero_last_error(), "32768 of 65536 bytes"),
          "%s: short read: %d '%s'", name, (int)st, zero_last_error());
    CHECK(zero__aio_read(f, buf, n, 128 << 10) == ZERO_OK && memcmp(buf, orig, n) == 0,
          "%s: faults are one-shot", name);
    /* an injected write EIO: a read of that range is not touched by it, the write fails naming
     * the file and the piece, and the next write of the same range succeeds */
    zero__aio_test_inject(f, ZERO__AIO_FAULT_WRITE_EIO, (128 << 10) + 3 * PAGE);
    CHECK(zero__aio_read(f, buf, n, 128 << 10) == ZERO_OK, "%s: a read past an armed write fault",
          name);
    st = zero__aio_write(f, buf, n, 128 << 10);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "write") &&
              strstr(zero_last_error(), "Input/output error") && strstr(zero_last_error(), path),
          "%s: write EIO: %d '%s'", name, (int)st, zero_last_error());
    memcpy(buf, orig, n);
    CHECK(zero__aio_write(f, buf, n, 128 << 10) == ZERO_OK &&
              zero__aio_read(f, buf, n, 128 << 10) == ZERO_OK && memcmp(buf, orig, n) == 0,
          "%s: the write after a write fault", name);
    /* a real short read: the file truncated behind the layer's back */
    CHECK(ftruncate(fd, 256 << 10) == 0, "truncate");
    st = zero__aio_read(f, buf, n, 128 << 10);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "short read") &&
              strstr(zero_last_error(), "offset 262144"),
          "%s: truncated file: %d '%s'", name, (int)st, zero_last_error());
    close(fd);
    zero__aio_file_close(f, 1);
    CHECK(access(path, F_OK) != 0, "%s: close(remove) deletes the file", name);
    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/no-such-dir/swap.bin", root);
    zero__aio_file_t *g = NULL;
    st = zero__aio_file_create(aio, path, 1 << 20, &g);
    CHECK(st == ZERO_ERR_IO && !g && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "No such file or directory"),
          "%s: missing directory: '%s'", name, zero_last_error());
    zero__aio_buffer_free(buf);
    free(orig);
    zero__aio_free(aio);
}

/* ------------------------------------------------------------------------------ full disk */

static int test_full(void) {
    char mnt[600];
    snprintf(mnt, sizeof mnt, "%s/full", root);
    mkdir(mnt, 0755);
    /* Before any thread exists: the namespace is then the whole process's, and the mount goes
     * away with the process whatever happens. */
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("SKIP: cannot mount a tmpfs in a private mount namespace here (%s; needs "
               "CAP_SYS_ADMIN)\n",
               strerror(errno));
        rmdir(mnt);
        return 77;
    }
    zero__aio_params_t p = zero__aio_params_default();
    zero__aio_t *aio;
    CHECK(zero__aio_init(&aio, &p, NULL) == ZERO_OK, "init");
    char path[700], path2[700];
    snprintf(path, sizeof path, "%s/too-big.swap", mnt);
    snprintf(path2, sizeof path2, "%s/fits.swap", mnt);
    zero__aio_file_t *f = NULL, *g = NULL;
    zero_status_t st = zero__aio_file_create(aio, path, 2 << 20, &f);
    CHECK(st == ZERO_ERR_IO && !f && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "2097152 bytes needed") &&
              strstr(zero_last_error(), "bytes free"),
          "2 MiB on a 1 MiB tmpfs: %d '%s'", (int)st, zero_last_error());
    CHECK(access(path, F_OK) != 0, "nothing left behind");
    printf("  full disk      -> %s\n", zero_last_error());
    /* a file that fits takes its space at creation: a second one no longer fits */
    struct statvfs before, after;
    statvfs(mnt, &before);
    CHECK(zero__aio_file_create(aio, path2, 640 << 10, &g) == ZERO_OK, "640 KiB fits");
    statvfs(mnt, &after);
    CHECK((before.f_bavail - after.f_bavail) * after.f_frsize >= (640 << 10),
          "preallocated: %llu bytes taken",
          (unsigned long long)((before.f_bavail - after.f_bavail) * after.f_frsize));
    st = zero__aio_file_create(aio, path, 640 << 10, &f);
    CHECK(st == ZERO_ERR_IO && strstr(zero_last_error(), "655360 bytes needed"),
          "second file refused before any write: '%s'", zero_last_error());
    /* and the first one is usable to its last byte */
    unsigned char *buf = zero__aio_buffer_alloc(NULL, 640 << 10), *back = malloc(640 << 10);
    fill_random(buf, 640 << 10);
    memcpy(back, buf, 640 << 10);
    CHECK(zero__aio_write(g, buf, 640 << 10, 0) == ZERO_OK, "write the whole file");
    memset(buf, 0, 640 << 10);
    CHECK(zero__aio_read(g, buf, 640 << 10, 0) == ZERO_OK && memcmp(buf, back, 640 << 10) == 0,
          "read it back");
    zero__aio_file_close(g, 1);
    zero__aio_buffer_free(buf);
    free(back);
    zero__aio_free(aio);
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
    return 0;
}

int main(int argc, char **argv) {
    /* Swap files in the working directory (the build tree: a real disk, as O_DIRECT wants). */
    snprintf(root, sizeof root, "zero-aio-test-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    zero_log_set_level(ZERO_LOG_ERROR);
    int rc = 0;
    if (argc > 1 && strcmp(argv[1], "full") == 0) {
        rc = test_full();
    } else {
        test_params();
        test_buffers();
        zero__aio_params_t p = zero__aio_params_default();
        p.backend = ZERO__AIO_BACKEND_URING;
        zero__aio_t *probe;
        have_uring = zero__aio_init(&probe, &p, NULL) == ZERO_OK;
        if (have_uring)
            zero__aio_free(probe);
        else
            printf("io_uring unavailable here (%s): its cases are skipped\n", zero_last_error());
        const config_t configs[] = {
            {"uring-default", ZERO__AIO_BACKEND_URING, 1 << 20, 8, 1, 0, 1},
            {"uring-64k-qd4", ZERO__AIO_BACKEND_URING, 64 << 10, 4, 1, 0, 1},
            {"uring-4k-qd1-single", ZERO__AIO_BACKEND_URING, 4 << 10, 1, 1, 1, 1},
            {"uring-32k-no-overlap", ZERO__AIO_BACKEND_URING, 32 << 10, 16, 1, 0, 0},
            {"uring-32k-qd2-x3", ZERO__AIO_BACKEND_URING, 32 << 10, 2, 3, 0, 1},
            {"threads-default", ZERO__AIO_BACKEND_THREADS, 1 << 20, 8, 1, 0, 1},
            {"threads-16k-x4", ZERO__AIO_BACKEND_THREADS, 16 << 10, 8, 4, 0, 1},
        };
        for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++)
            if (configs[i].backend != ZERO__AIO_BACKEND_URING || have_uring)
                roundtrip(&configs[i], root, 0);
        /* tmpfs: O_DIRECT accepted since Linux 6.6, refused before; the bytes are the same */
        struct stat st;
        if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
            char shm[64];
            snprintf(shm, sizeof shm, "/dev/shm/zero-aio-test-XXXXXX");
            if (mkdtemp(shm)) {
                config_t c = {"tmpfs-auto", ZERO__AIO_BACKEND_AUTO, 64 << 10, 8, 2, 0, 1};
                roundtrip(&c, shm, 0);
                rmdir(shm);
            }
        }
        /* a file system refusing O_DIRECT, beside io_uring: that file goes to the pool */
        config_t c = {"refused-direct", ZERO__AIO_BACKEND_AUTO, 64 << 10, 8, 2, 0, 1};
        roundtrip(&c, root, 1);
        if (have_uring) test_faults(ZERO__AIO_BACKEND_URING, "uring");
        test_faults(ZERO__AIO_BACKEND_THREADS, "threads");
    }
    rmdir(root);
    return rc == 77 ? 77 : check_report();
}
