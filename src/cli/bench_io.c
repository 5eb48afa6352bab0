/* bench_io.c — `zero bench io`: O_DIRECT read and write bandwidth of the swap I/O layer
 * (src/io/aio.h) over block sizes and queue depths, in the manner of DeepSpeed's ds_io sweep.
 *
 * For each engine (io_uring, and the pread/pwrite pool with as many threads as the queue depth,
 * so both keep the same number of pieces in flight), block size and queue depth: a fresh context,
 * a fresh preallocated test file of --size bytes, three timed passes over the whole file: a
 * first write (into preallocated, never written blocks: file systems convert them as they go),
 * then --repeat times a read and a rewrite (what a swap file sees every step; reported as
 * "write"), of which the median time is kept: the machine may be shared. A pass posts
 * requests of up to 256 MiB (one buffer) and waits for them; bandwidth = bytes / wall time of
 * the pass, with the layer's checksums computed (writes) and verified (read) as in training.
 *
 * --tune prints the best aio block as a ds_config fragment: among the io_uring points, the one
 * maximising the harmonic mean of read and write bandwidth, or rather the first in sweep order
 * (queue depth, then block size, ascending) within 5% of that maximum, so noise does not buy a
 * deeper queue or bigger blocks for nothing.
 *
 * Beside them, the checksum alone: the layer's CRC32C of every 4 KiB page of one buffer on one
 * thread (median of --repeat + 2 passes), the CPU cost every byte read or written pays once.
 *
 * Files: the test file is unlinked as soon as it is created (the open descriptor keeps it), so
 * nothing is left behind on failure, Ctrl-C or a kill. Free space is checked before anything.
 */
#include "cli/cli.h"
#include "core/crc32c.h"
#include "io/aio.h"
#include "zero/zero.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

int zero__bench_io(int argc, char **argv);

#define MAX_POINTS 32
#define MAX_REQUEST ((size_t)256 << 20)
#define TUNE_SLACK 0.95
#define TMPFS_MAGIC_NUMBER 0x01021994

typedef struct options {
    const char *path;
    size_t size;
    size_t blocks[MAX_POINTS];
    int nblocks;
    int depths[MAX_POINTS];
    int ndepths;
    int engines[2]; /* io_uring, threads */
    int repeat;
    int uring_threads; /* intra_op_parallelism of the io_uring engine */
    int json, tune;
} options_t;

typedef struct point {
    int engine; /* 0 io_uring, 1 threads */
    size_t block;
    int depth;
    double read_gbps, write_gbps, first_write_gbps;
    double read_s, write_s, first_write_s;
} point_t;

static const char *const engine_names[] = {"io_uring", "threads"};

static void usage(FILE *out) {
    fprintf(
        out,
        "usage: zero bench io --path DIR [options]\n"
        "\n"
        "O_DIRECT write and read bandwidth of the swap I/O layer over block sizes and queue\n"
        "depths (DeepSpeed's ds_io sweep), io_uring beside the pread/pwrite fallback (as many\n"
        "threads as the queue depth). Each point writes then reads a fresh preallocated file,\n"
        "with the per-page CRC32C computed and verified as in training.\n"
        "\n"
        "options:\n"
        "  --path DIR              directory of the test file (required; use the disk that\n"
        "                          will hold the swap files: tmpfs measures memory)\n"
        "  --size SIZE             test file size (default 256M); SIZE is bytes or with K, M, G\n"
        "  --block-sizes LIST      default 128K,256K,512K,1M,2M,4M,8M (multiples of 4K)\n"
        "  --queue-depths LIST     default 1,2,4,8,16,32\n"
        "  --engine io_uring|threads|both   default both\n"
        "  --fallback              the same as --engine threads\n"
        "  --tune                  print the best aio block as ds_config JSON\n"
        "  --json                  one JSON object per line instead of the table\n"
        "  --help                  this text\n"
        "\n"
        "example:\n"
        "  zero bench io --path /mnt/nvme/tmp --tune\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zero bench io: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (try `zero bench io --help`)\n");
    va_end(ap);
    return 2;
}

/* "1048576", "64K", "16M", "1G" (binary multiples; "KiB"/"KB" accepted). */
static int parse_size(const char *s, size_t *out) {
    char *end = NULL;
    if (!s || *s < '0' || *s > '9') return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'm' || *end == 'M')
        shift = 20, end++;
    else if (*end == 'g' || *end == 'G')
        shift = 30, end++;
    if (shift && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    if (*end || errno || v == 0 || v > (SIZE_MAX >> shift) >> 2) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_list(const char *s, int sizes, size_t *sz, int *ints, int *n) {
    char buf[512];
    if (!s || strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_POINTS) return -1;
        if (sizes) {
            if (parse_size(tok, &sz[*n]) || sz[*n] % ZERO__AIO_ALIGN) return -1;
        } else {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end || v < 1 || v > 256) return -1;
            ints[*n] = (int)v;
        }
        (*n)++;
    }
    return *n ? 0 : -1;
}

static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.size = (size_t)256 << 20, .engines = {1, 1}, .repeat = 3, .uring_threads = 1};
    const size_t blocks[] = {128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20};
    const int depths[] = {1, 2, 4, 8, 16, 32};
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        o->blocks[o->nblocks++] = blocks[i];
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
        o->depths[o->ndepths++] = depths[i];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) return 1;
        if (!strcmp(arg, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(arg, "--tune")) {
            o->tune = 1;
            continue;
        }
        if (!strcmp(arg, "--fallback")) {
            o->engines[0] = 0, o->engines[1] = 1;
            continue;
        }
        const char *flags[] = {"--path",   "--size",   "--block-sizes", "--queue-depths",
                               "--engine", "--repeat", "--threads"};
        int known = 0;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) known |= !strcmp(arg, flags[k]);
        if (!known) return usage_error("unknown option '%s'", arg);
        if (i + 1 >= argc) return usage_error("%s needs a value", arg);
        const char *val = argv[++i];
        if (!strcmp(arg, "--path")) {
            o->path = val;
        } else if (!strcmp(arg, "--size")) {
            if (parse_size(val, &o->size) || o->size % ZERO__AIO_ALIGN)
                return usage_error("--size '%s': expected a multiple of 4096 bytes such as 64M "
                                   "or 1G",
                                   val);
        } else if (!strcmp(arg, "--repeat")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 100)
                return usage_error("--repeat '%s': expected an integer from 1 to 100", val);
            o->repeat = (int)v;
        } else if (!strcmp(arg, "--threads")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 256)
                return usage_error("--threads '%s': expected an integer from 1 to 256", val);
            o->uring_threads = (int)v;
        } else if (!strcmp(arg, "--block-sizes")) {
            if (parse_list(val, 1, o->blocks, NULL, &o->nblocks))
                return usage_error("--block-sizes '%s': expected a comma-separated list of "
                                   "multiples of 4096 such as 128K,1M (at most %d)",
                                   val, MAX_POINTS);
        } else if (!strcmp(arg, "--queue-depths")) {
            if (parse_list(val, 0, NULL, o->depths, &o->ndepths))
                return usage_error("--queue-depths '%s': expected a comma-separated list of "
                                   "integers from 1 to 256 (at most %d)",
                                   val, MAX_POINTS);
        } else if (!strcmp(val, "io_uring")) {
            o->engines[0] = 1, o->engines[1] = 0;
        } else if (!strcmp(val, "threads")) {
            o->engines[0] = 0, o->engines[1] = 1;
        } else if (!strcmp(val, "both")) {
            o->engines[0] = 1, o->engines[1] = 1;
        } else {
            return usage_error("--engine '%s': expected io_uring, threads or both", val);
        }
    }
    if (!o->path) return usage_error("--path DIR is required (the directory of the test file)");
    for (int b = 0; b < o->nblocks; b++)
        if (o->blocks[b] > (size_t)256 << 20)
            return usage_error("--block-sizes: %zu is larger than 256M", o->blocks[b]);
    return 0;
}

/* One timed pass over the whole file: writes posted all at once (the buffer is only read),
 * reads one buffer-full at a time. Returns seconds, or < 0 with the error printed. */
static double pass(zero__aio_t *aio, zero__aio_file_t *f, unsigned char *buf, size_t bufsize,
                   size_t size, int write) {
    double t0 = zero_time_now();
    for (size_t off = 0; off < size; off += bufsize) {
        size_t n = size - off < bufsize ? size - off : bufsize;
        zero__aio_req_t *r;
        zero_status_t st = write ? zero__aio_write_post(f, buf, n, (int64_t)off, &r)
                                 : zero__aio_read_post(f, buf, n, (int64_t)off, &r);
        if (st == ZERO_OK && !write) st = zero__aio_wait(r);
        if (st) {
            (void)zero__aio_wait_all(aio);
            fprintf(stderr, "zero bench io: %s\n", zero_last_error());
            return -1;
        }
    }
    if (zero__aio_wait_all(aio)) {
        fprintf(stderr, "zero bench io: %s\n", zero_last_error());
        return -1;
    }
    return zero_time_now() - t0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[n] (the mean of the middle two for even n); sorts v. */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Seconds (median of passes) of the per-page CRC32C of buf on this thread. */
static double crc_seconds(const unsigned char *buf, size_t bytes, int passes) {
    const size_t pages = bytes / ZERO__AIO_ALIGN;
    uint32_t *crc = malloc((pages ? pages : 1) * sizeof *crc);
    double *t = malloc((size_t)passes * sizeof *t);
    if (!crc || !t) {
        free(crc);
        free(t);
        return -1;
    }
    for (int i = 0; i < passes; i++) {
        double t0 = zero_time_now();
        zero__crc32c_pages(crc, buf, ZERO__AIO_ALIGN, pages);
        t[i] = zero_time_now() - t0;
    }
    double m = median(t, passes);
    free(crc);
    free(t);
    return m;
}

static int measure(const options_t *o, point_t *pt, unsigned char *buf, size_t bufsize,
                   const char *file) {
    zero__aio_params_t p = zero__aio_params_default();
    p.block_size = pt->block;
    p.queue_depth = pt->depth;
    p.intra_op_parallelism = pt->engine ? pt->depth : o->uring_threads;
    p.backend = pt->engine ? ZERO__AIO_BACKEND_THREADS : ZERO__AIO_BACKEND_URING;
    zero__aio_t *aio;
    if (zero__aio_init(&aio, &p, NULL)) {
        fprintf(stderr, "zero bench io: %s\n", zero_last_error());
        return -1;
    }
    zero__aio_file_t *f;
    if (zero__aio_file_create(aio, file, (int64_t)o->size, &f)) {
        fprintf(stderr, "zero bench io: %s\n", zero_last_error());
        zero__aio_free(aio);
        return -1;
    }
    unlink(file); /* the descriptor keeps it: nothing is left behind, whatever happens next */
    if (!zero__aio_file_direct(f))
        fprintf(stderr, "zero bench io: note: %s refuses O_DIRECT: the page cache is measured\n",
                o->path);
    double reads[100], writes[100];
    pt->first_write_s = pass(aio, f, buf, bufsize, o->size, 1);
    int bad = pt->first_write_s < 0;
    for (int i = 0; i < o->repeat && !bad; i++) {
        reads[i] = pass(aio, f, buf, bufsize, o->size, 0);
        writes[i] = reads[i] < 0 ? -1 : pass(aio, f, buf, bufsize, o->size, 1);
        bad = writes[i] < 0;
    }
    zero__aio_file_close(f, 0);
    zero__aio_free(aio);
    if (bad) return -1;
    pt->read_s = median(reads, o->repeat);
    pt->write_s = median(writes, o->repeat);
    pt->first_write_gbps = (double)o->size / pt->first_write_s / 1e9;
    pt->write_gbps = (double)o->size / pt->write_s / 1e9;
    pt->read_gbps = (double)o->size / pt->read_s / 1e9;
    return 0;
}

static double score(const point_t *p) { return 2.0 / (1.0 / p->read_gbps + 1.0 / p->write_gbps); }

static const char *human(size_t b, char *out, size_t n) {
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(out, n, "%zuM", b >> 20);
    else
        snprintf(out, n, "%zuK", b >> 10);
    return out;
}

int zero__bench_io(int argc, char **argv) {
    options_t o;
    int rc = parse_options(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    struct stat sb;
    if (stat(o.path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "zero bench io: --path %s: %s\n", o.path,
                stat(o.path, &sb) != 0 ? strerror(errno) : "not a directory");
        return 1;
    }
    struct statvfs vfs;
    if (statvfs(o.path, &vfs) == 0) {
        unsigned long long avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        if (avail < o.size) {
            fprintf(stderr,
                    "zero bench io: %s has %llu bytes free, the test file needs %zu (--size): "
                    "choose a smaller --size or another --path\n",
                    o.path, avail, o.size);
            return 1;
        }
    }
    struct statfs fs;
    int tmpfs = statfs(o.path, &fs) == 0 && fs.f_type == TMPFS_MAGIC_NUMBER;
    zero_log_set_level(ZERO_LOG_ERROR);

    if (o.engines[0]) {
        zero__aio_params_t p = zero__aio_params_default();
        p.backend = ZERO__AIO_BACKEND_URING;
        zero__aio_t *probe;
        if (zero__aio_init(&probe, &p, NULL) == ZERO_OK) {
            zero__aio_free(probe);
        } else if (o.engines[1]) {
            fprintf(stderr, "zero bench io: note: %s: only the threads engine is measured\n",
                    zero_last_error());
            o.engines[0] = 0;
        } else {
            fprintf(stderr, "zero bench io: %s\n", zero_last_error());
            return 1;
        }
    }
    char file[4096];
    snprintf(file, sizeof file, "%s/.zero-bench-io-%ld.tmp", o.path, (long)getpid());
    size_t bufsize = o.size < MAX_REQUEST ? o.size : MAX_REQUEST;
    unsigned char *buf = zero__aio_buffer_alloc(NULL, bufsize);
    if (!buf) {
        fprintf(stderr, "zero bench io: %s\n", zero_last_error());
        return 1;
    }
    uint64_t x = 0x243F6A8885A308D3ull; /* any non-constant pattern */
    for (size_t i = 0; i + 8 <= bufsize; i += 8) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        memcpy(buf + i, &x, 8);
    }
    int npoints = o.nblocks * o.ndepths * 2;
    point_t *pts = calloc((size_t)npoints, sizeof *pts);
    int n = 0;
    char hb[32], hs[32], date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (!o.json) {
        printf("# zero bench io: %s%s, file %s, O_DIRECT, CRC32C per 4 KiB page; %s\n", o.path,
               tmpfs ? " (tmpfs: memory, not a disk)" : "", human(o.size, hs, sizeof hs), date);
        printf("# io_uring engine: %d thread(s), each with a ring of the queue depth; threads "
               "engine: pread/pwrite with as many threads as the queue depth\n",
               o.uring_threads);
        printf("# median of %d read and rewrite passes per point; first write: one pass\n",
               o.repeat);
    }
    /* the checksum's own cost, before the disk's */
    const size_t crc_bytes = bufsize / ZERO__AIO_ALIGN * ZERO__AIO_ALIGN;
    const double crc_s = crc_seconds(buf, crc_bytes, o.repeat + 2);
    if (crc_s <= 0) {
        fprintf(stderr, "zero bench io: out of memory (checksum timing)\n");
        rc = 1;
    } else if (o.json) {
        printf("{\"bench\":\"io\",\"op\":\"crc32c\",\"threads\":1,\"bytes\":%zu,"
               "\"seconds\":%.6f,\"gbps\":%.4f,\"passes\":%d}\n",
               crc_bytes, crc_s, crc_bytes / crc_s / 1e9, o.repeat + 2);
    } else {
        printf("# CRC32C per 4 KiB page on one thread: %.2f GB/s (%s, median of %d passes): the "
               "CPU time every byte read or written costs once\n",
               crc_bytes / crc_s / 1e9, human(crc_bytes, hs, sizeof hs), o.repeat + 2);
        printf("# %-8s %6s  %-9s %10s %10s %12s\n", "block", "depth", "engine", "write GB/s",
               "read GB/s", "first write");
    }
    for (int e = 0; e < 2 && rc == 0; e++) {
        if (!o.engines[e]) continue;
        for (int d = 0; d < o.ndepths && rc == 0; d++) {
            for (int b = 0; b < o.nblocks && rc == 0; b++) {
                point_t *pt = &pts[n];
                *pt = (point_t){.engine = e, .block = o.blocks[b], .depth = o.depths[d]};
                if (measure(&o, pt, buf, bufsize, file)) {
                    rc = 1;
                    break;
                }
                n++;
                if (o.json) {
                    const char *ops[] = {"write", "read", "first_write"};
                    const double secs[] = {pt->write_s, pt->read_s, pt->first_write_s};
                    const double gbps[] = {pt->write_gbps, pt->read_gbps, pt->first_write_gbps};
                    for (int k = 0; k < 3; k++)
                        printf("{\"bench\":\"io\",\"engine\":\"%s\",\"op\":\"%s\","
                               "\"block_size\":%zu,\"queue_depth\":%d,\"threads\":%d,"
                               "\"bytes\":%zu,\"seconds\":%.6f,\"gbps\":%.4f,\"passes\":%d,"
                               "\"path\":\"%s\",\"tmpfs\":%s}\n",
                               engine_names[e], ops[k], pt->block, pt->depth,
                               e ? pt->depth : o.uring_threads, o.size, secs[k], gbps[k],
                               k == 2 ? 1 : o.repeat, o.path, tmpfs ? "true" : "false");
                } else {
                    printf("  %-8s %6d  %-9s %10.3f %10.3f %12.3f\n",
                           human(pt->block, hb, sizeof hb), pt->depth, engine_names[e],
                           pt->write_gbps, pt->read_gbps, pt->first_write_gbps);
                }
                fflush(stdout);
            }
        }
    }
    if (rc == 0 && o.engines[0] && o.engines[1] && !o.json) {
        /* the same points side by side */
        printf("# io_uring / threads at each point (same pieces in flight)\n");
        printf("# %-8s %6s %12s %12s\n", "block", "depth", "write ratio", "read ratio");
        int half = n / 2;
        for (int i = 0; i < half; i++)
            printf("  %-8s %6d %12.2f %12.2f\n", human(pts[i].block, hb, sizeof hb), pts[i].depth,
                   pts[i].write_gbps / pts[half + i].write_gbps,
                   pts[i].read_gbps / pts[half + i].read_gbps);
    }
    if (rc == 0 && o.tune && n > 0) {
        int tune_engine = o.engines[0] ? 0 : 1;
        double best = 0;
        for (int i = 0; i < n; i++)
            if (pts[i].engine == tune_engine && score(&pts[i]) > best) best = score(&pts[i]);
        const point_t *pick = NULL;
        for (int i = 0; i < n && !pick; i++)
            if (pts[i].engine == tune_engine && score(&pts[i]) >= TUNE_SLACK * best) pick = &pts[i];
        if (!o.json)
            printf("# best aio block (%s: harmonic mean of read and write %.3f GB/s, read %.3f, "
                   "write %.3f; the first point within 5%% of the best %.3f):\n",
                   engine_names[tune_engine], score(pick), pick->read_gbps, pick->write_gbps, best);
        printf("{\"aio\": {\"block_size\": %zu, \"queue_depth\": %d, \"intra_op_parallelism\": %d, "
               "\"single_submit\": false, \"overlap_events\": true}}\n",
               pick->block, tune_engine ? 8 : pick->depth,
               tune_engine ? pick->depth : o.uring_threads);
    }
    free(pts);
    zero__aio_buffer_free(buf);
    return rc;
}
