/* bench_comm.c — `zero bench comm`: bandwidth of the collectives, in the manner
 * of nccl-tests.
 *
 * For each collective and size S (bytes of the full vector, the nccl-tests
 * convention) every rank runs the blocking zero_comm_* call; a sample is a
 * barrier then a batch of back-to-back calls, and the reported time is the
 * median over samples of the slowest rank's time per call. algbw = S / time,
 * busbw = algbw * the nccl-tests factor. Beside it: the busbw that the
 * machine's memory bandwidth allows (memcpy measured at start-up with one
 * worker per rank, and a per-collective model of the bytes an algorithm must
 * read and write), and on the MPI backend the raw MPI collective timed on the
 * same buffers in the same run.
 *
 * Not here: in-place variants, non-blocking overlap, sub-communicators.
 *
 * Invariant: every rank makes the same sequence of collective calls. Every
 * decision that changes the number of calls (sample counts, skipping a size,
 * giving up after an allocation failure) is taken from values all-gathered from
 * every rank, so ranks cannot diverge and hang.
 *
 * Results are checked, not only timed: send buffers hold small integers (exact
 * in every dtype), so the expected output of each collective has a closed form
 * computed here independently of the library; recv buffers are poisoned before
 * each run so a stale result cannot pass.
 */
#include "comm/comm_internal.h"
#include "zero/zero.h"

#ifdef ZERO_HAVE_MPI
#include <mpi.h>
#endif

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

/* Entry point, called from bench.c. */
int zero__bench_comm(int argc, char **argv);

#define N_COLLS 4
#define AUTO_MAX_SAMPLES 20
#define AUTO_MIN_SAMPLES 5
#define AUTO_BUDGET_S 1.5                  /* per (collective, size, implementation) */
#define AUTO_BATCH_BYTES ((size_t)4 << 20) /* a sample moves at least this much ... */
#define AUTO_MAX_BATCH 64                  /* ... in at most this many calls */
#define MEMBW_REPS 5
#define TIMEOUT_S 120.0
#define POISON 0x7f /* a byte pattern no expected result contains (see check_recv) */
#define PATTERN_PERIOD 13

static const zero_coll_t colls[] = {ZERO_COLL_ALL_REDUCE, ZERO_COLL_REDUCE_SCATTER,
                                    ZERO_COLL_ALL_GATHER, ZERO_COLL_ALL_TO_ALL};
static const char *const raw_names[] = {"MPI_Allreduce", "MPI_Reduce_scatter_block",
                                        "MPI_Allgather", "MPI_Alltoall"};
/* Minimum bytes read + written in memory, over all ranks, by a single-copy
 * shared-memory algorithm (see model_bytes); shown in the output so a reader
 * can check the bound. */
static const char *const model_texts[] = {
    "(3n-1)*S: reduce-scatter (each rank reads its block from n send buffers, "
    "writes 1 block), "
    "then all-gather (each rank copies the n-1 other blocks)",
    "(n+1)*S: each rank reads its block from n send buffers and writes 1 block",
    "2n*S: each rank reads n blocks of S/n and writes n blocks (its own block "
    "included)",
    "2n*S: each rank reads S (n blocks of S/n, one from each rank) and writes "
    "S",
};
#define TABLE_HAS_N_COLLS(t) (sizeof(t) / sizeof(t)[0] == N_COLLS)
_Static_assert(TABLE_HAS_N_COLLS(colls) && TABLE_HAS_N_COLLS(raw_names) &&
                   TABLE_HAS_N_COLLS(model_texts),
               "a name and a model text for every collective");

typedef struct options {
    zero_backend_t backend;
    int backend_set;
    int ranks; /* threads: rank threads; MPI: the expected job size when ranks_set
                */
    int ranks_set;
    int ranks_per_node; /* threads: simulated nodes of this many ranks (0: one node) */
    int use[N_COLLS];   /* 1 where the collective is selected, in the order of
                           colls[] */
    zero_dtype_t dtype;
    size_t min_bytes, max_bytes, membw_bytes;
    int step_factor;
    int iters;  /* samples per row; 0 = auto */
    int warmup; /* untimed samples before them */
    int batch;  /* calls per sample; 0 = auto */
    int json, check, help;
    int flat; /* --flat: zero_comm_params_t.flat (the flat algorithms on several nodes too) */
} options_t;

typedef struct rank_ctx {
    const options_t *o;
    zero_comm_t *comm;
    int rank, n;
    char *send, *recv;    /* owned, o->max_bytes each */
    double copy_bw;       /* bytes copied per second by all ranks together, agreed by
                             all */
    int raw;              /* the raw MPI collectives are timed beside ours */
    size_t check_errors;  /* mismatching elements over all ranks and rows, agreed
                             by all */
    const char *raw_note; /* why the raw columns are absent, or NULL */
} rank_ctx_t;

/* ------------------------------------------------------------------------------
 * utilities */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..k) (sorts v). */
static double median(double *v, int k) {
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static void report_failure(const rank_ctx_t *c, const char *what, zero_status_t st) {
    fprintf(stderr, "zero bench comm: [rank %d/%d] %s failed: %s: %s\n", c->rank, c->n, what,
            zero_status_str(st), zero_last_error());
}

/* all[r * k + j] = local[j] of rank r. The values travel as raw bytes (uint8),
 * so this depends on no reduction of the backend under test. Collective. */
static int gather_all(rank_ctx_t *c, const double *local, int k, double *all) {
    zero_status_t st =
        zero_comm_all_gather(local, all, (size_t)k * sizeof(double), ZERO_DTYPE_UINT8, c->comm);
    if (st != ZERO_OK) {
        report_failure(c, "all_gather of the timings", st);
        return -1;
    }
    return 0;
}

/* out[j] = max over ranks of local[j]. Collective. */
static int gather_max(rank_ctx_t *c, const double *local, int k, double *out) {
    double *all = malloc((size_t)c->n * (size_t)k * sizeof *all);
    if (!all) {
        fprintf(stderr, "zero bench comm: [rank %d/%d] out of memory\n", c->rank, c->n);
        return -1; /* the others then time out: an 8-byte malloc failing ends
                      everything anyway */
    }
    int rc = gather_all(c, local, k, all);
    for (int j = 0; rc == 0 && j < k; j++) {
        out[j] = all[j];
        for (int r = 1; r < c->n; r++) out[j] = fmax(out[j], all[(size_t)r * (size_t)k + j]);
    }
    free(all);
    return rc;
}

/* 1 when every rank passed ok != 0. Collective. Returns -1 if the agreement
 * itself failed. */
static int all_ok(rank_ctx_t *c, int ok) {
    double bad = ok ? 0.0 : 1.0, any_bad = 0.0;
    if (gather_max(c, &bad, 1, &any_bad)) return -1;
    return any_bad == 0.0;
}

/* ------------------------------------------------------------------------------
 * data */

/* Element idx of rank r's send buffer: a small integer, exact in every dtype
 * and with sums of up to 21 ranks fitting int8. Period 13 in idx (coprime to
 * block sizes) so that misplaced blocks show; 3 * r shifts the pattern per rank
 * so that a wrong source rank shows. */
static int64_t pattern(zero_dtype_t dt, int r, size_t idx) {
    int64_t v =
        (int64_t)((idx % PATTERN_PERIOD + 3 * ((size_t)r % PATTERN_PERIOD)) % PATTERN_PERIOD) - 6;
    return dt == ZERO_DTYPE_UINT8 ? v + 6 : v;
}

static void store(zero_dtype_t dt, void *buf, size_t i, int64_t v) {
    switch (dt) {
    case ZERO_DTYPE_FP32: ((float *)buf)[i] = (float)v; break;
    case ZERO_DTYPE_FP64: ((double *)buf)[i] = (double)v; break;
    case ZERO_DTYPE_FP16: ((uint16_t *)buf)[i] = zero_fp32_to_fp16((float)v); break;
    case ZERO_DTYPE_BF16: ((uint16_t *)buf)[i] = zero_fp32_to_bf16((float)v); break;
    case ZERO_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ZERO_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ZERO_DTYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: break;
    }
}

static double load(zero_dtype_t dt, const void *buf, size_t i) {
    switch (dt) {
    case ZERO_DTYPE_FP32: return ((const float *)buf)[i];
    case ZERO_DTYPE_FP64: return ((const double *)buf)[i];
    case ZERO_DTYPE_FP16: return zero_fp16_to_fp32(((const uint16_t *)buf)[i]);
    case ZERO_DTYPE_BF16: return zero_bf16_to_fp32(((const uint16_t *)buf)[i]);
    case ZERO_DTYPE_INT8: return ((const int8_t *)buf)[i];
    case ZERO_DTYPE_UINT8: return ((const uint8_t *)buf)[i];
    case ZERO_DTYPE_INT32: return ((const int32_t *)buf)[i];
    default: return NAN;
    }
}

/* The value an exact sum takes in dtype: integers wrap modulo 2^bits (comm.h),
 * small-integer float sums are exact. */
static double wrap(zero_dtype_t dt, int64_t v) {
    switch (dt) {
    case ZERO_DTYPE_INT8: return (int8_t)(uint8_t)(uint64_t)v;
    case ZERO_DTYPE_UINT8: return (uint8_t)(uint64_t)v;
    case ZERO_DTYPE_INT32: return (int32_t)(uint32_t)(uint64_t)v;
    default: return (double)v;
    }
}

/* Mismatching elements of this rank's recv buffer after `coll` with `count`
 * (the API's count argument), against the closed form of the pattern. The
 * poison (0x7f bytes) decodes to NaN or a huge value for every float dtype and
 * int32, and to 127 for int8/uint8, which no sum of fewer than 11 ranks of the
 * pattern produces. */
static size_t check_recv(const rank_ctx_t *c, zero_coll_t coll, size_t count) {
    zero_dtype_t dt = c->o->dtype;
    int n = c->n;
    double sum_tab[PATTERN_PERIOD];
    for (size_t m = 0; m < PATTERN_PERIOD; m++) {
        int64_t s = 0;
        for (int r = 0; r < n; r++) s += pattern(dt, r, m);
        sum_tab[m] = wrap(dt, s);
    }
    size_t errors = 0, base = (size_t)c->rank * count;
    switch (coll) {
    case ZERO_COLL_ALL_REDUCE:
        for (size_t j = 0; j < count; j++)
            errors += load(dt, c->recv, j) != sum_tab[j % PATTERN_PERIOD];
        break;
    case ZERO_COLL_REDUCE_SCATTER:
        for (size_t j = 0; j < count; j++)
            errors += load(dt, c->recv, j) != sum_tab[(base + j) % PATTERN_PERIOD];
        break;
    case ZERO_COLL_ALL_GATHER:
        for (int r = 0; r < n; r++)
            for (size_t k = 0; k < count; k++)
                errors += load(dt, c->recv, (size_t)r * count + k) != (double)pattern(dt, r, k);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        for (int r = 0; r < n; r++)
            for (size_t k = 0; k < count; k++)
                errors +=
                    load(dt, c->recv, (size_t)r * count + k) != (double)pattern(dt, r, base + k);
        break;
    default: break;
    }
    return errors;
}

/* ------------------------------------------------------------------------------
 * collectives */

static int coll_index(zero_coll_t coll) {
    for (int i = 0; i < N_COLLS; i++)
        if (colls[i] == coll) return i;
    return -1;
}

/* The API's count argument for a full vector of S bytes (nccl-tests: rounded
 * down so that it divides among the ranks). */
static size_t coll_count(zero_coll_t coll, size_t S, int n, size_t es) {
    return coll == ZERO_COLL_ALL_REDUCE ? S / es : S / es / (size_t)n;
}

/* Bytes of the full vector actually moved for that count. */
static size_t coll_bytes(zero_coll_t coll, size_t count, int n, size_t es) {
    return coll == ZERO_COLL_ALL_REDUCE ? count * es : count * es * (size_t)n;
}

/* nccl-tests' bus-bandwidth factor. */
static double bus_factor(zero_coll_t coll, int n) {
    double f = (double)(n - 1) / n;
    return coll == ZERO_COLL_ALL_REDUCE ? 2.0 * f : f;
}

/* Bytes read + written in memory, over all ranks, by a single-copy algorithm on
 * shared memory: each input element read once per rank that needs it, each
 * output element written once. No write-allocate traffic and no cache reuse are
 * counted, the same way memcpy is counted. */
static double model_bytes(zero_coll_t coll, size_t S, int n) {
    double s = (double)S;
    switch (coll) {
    case ZERO_COLL_ALL_REDUCE: return (3.0 * n - 1.0) * s;
    case ZERO_COLL_REDUCE_SCATTER: return (n + 1.0) * s;
    default: return 2.0 * n * s; /* all_gather, all_to_all */
    }
}

/* Bytes this rank sends per call to ranks of other nodes, by the algorithms' definition
 * (zero/comm.h). Flat: every rank of another node gets count elements (all_reduce: its block
 * of the reduce-scatter split, and this rank's block of the all-gather). Hierarchical (several
 * nodes, not --flat, where it moves fewer blocks between nodes): the all-gather sends this
 * rank's block to one rank (the same local index, modulo the node's size) of each other node;
 * the reduce-scatter (contiguous nodes only) sends the node's partial of every block this rank
 * stands in for (the blocks of its local index, modulo) to the next node, in fp32 for
 * fp16/bf16, and from the last node the results to their owners. */
static double inter_node_theory(const rank_ctx_t *c, zero_coll_t coll, size_t count, size_t es) {
    const zero_comm_t *comm = c->comm;
    const int n = c->n, N = zero_comm_node_count(comm), me = zero_comm_node_of(comm, c->rank);
    int local[256], size[256] = {0}, contiguous = 1;
    for (int r = 0; r < n; r++) {
        const int j = zero_comm_node_of(comm, r);
        local[r] = size[j]++;
        if (r && j != zero_comm_node_of(comm, r - 1) && j != zero_comm_node_of(comm, r - 1) + 1)
            contiguous = 0;
    }
    uint64_t sq = 0, un = (uint64_t)n, uN = (uint64_t)N;
    for (int j = 0; j < N; j++) sq += (uint64_t)size[j] * (uint64_t)size[j];
    const int half = c->o->dtype == ZERO_DTYPE_BF16 || c->o->dtype == ZERO_DTYPE_FP16;
    const uint64_t acc = half ? 4 : es;
    const int ag = !c->o->flat && N > 1 && un * (uN - 1) < un * un - sq;
    const int rs = !c->o->flat && N > 1 && contiguous &&
                   un * (uN - 1) * acc + (un - (uint64_t)size[N - 1]) * es < (un * un - sq) * es;
    uint64_t len[256];
    for (int r = 0; r < n; r++)
        len[r] = coll == ZERO_COLL_ALL_REDUCE
                     ? (uint64_t)count * (uint64_t)(r + 1) / un - (uint64_t)count * (uint64_t)r / un
                     : (uint64_t)count;
    double bytes = 0;
    const int do_rs = coll == ZERO_COLL_ALL_REDUCE || coll == ZERO_COLL_REDUCE_SCATTER;
    const int do_ag = coll == ZERO_COLL_ALL_REDUCE || coll == ZERO_COLL_ALL_GATHER;
    if (coll == ZERO_COLL_ALL_TO_ALL)
        for (int r = 0; r < n; r++)
            bytes += zero_comm_node_of(comm, r) != me ? (double)count * es : 0;
    if (do_rs && !rs)
        for (int r = 0; r < n; r++)
            bytes += zero_comm_node_of(comm, r) != me ? (double)(len[r] * es) : 0;
    if (do_rs && rs)
        for (int b = 0; b < n; b++) {
            if (local[b] % size[me] != local[c->rank]) continue; /* not one of mine */
            if (me < N - 1)
                bytes += (double)(len[b] * acc);
            else if (zero_comm_node_of(comm, b) != me)
                bytes += (double)(len[b] * es);
        }
    if (do_ag) bytes += (double)(len[c->rank] * es) * (ag ? N - 1 : n - size[me]);
    return bytes;
}

static zero_status_t call_ours(rank_ctx_t *c, zero_coll_t coll, size_t count) {
    zero_dtype_t dt = c->o->dtype;
    switch (coll) {
    case ZERO_COLL_ALL_REDUCE:
        return zero_comm_all_reduce(c->send, c->recv, count, dt, ZERO_OP_SUM, c->comm);
    case ZERO_COLL_REDUCE_SCATTER:
        return zero_comm_reduce_scatter(c->send, c->recv, count, dt, ZERO_OP_SUM, c->comm);
    case ZERO_COLL_ALL_GATHER: return zero_comm_all_gather(c->send, c->recv, count, dt, c->comm);
    case ZERO_COLL_ALL_TO_ALL: return zero_comm_all_to_all(c->send, c->recv, count, dt, c->comm);
    default: return ZERO_ERR_INTERNAL;
    }
}

#ifdef ZERO_HAVE_MPI
/* The MPI type for dtype in coll; 0 when MPI has none that does the same thing
 * (fp16 and bf16 can be moved as 16-bit words, but MPI cannot sum them). */
static int raw_type(zero_dtype_t dt, zero_coll_t coll, MPI_Datatype *out) {
    int reduces = coll == ZERO_COLL_ALL_REDUCE || coll == ZERO_COLL_REDUCE_SCATTER;
    switch (dt) {
    case ZERO_DTYPE_FP32: *out = MPI_FLOAT; return 1;
    case ZERO_DTYPE_FP64: *out = MPI_DOUBLE; return 1;
    case ZERO_DTYPE_INT8: *out = MPI_INT8_T; return 1;
    case ZERO_DTYPE_UINT8: *out = MPI_UINT8_T; return 1;
    case ZERO_DTYPE_INT32: *out = MPI_INT32_T; return 1;
    case ZERO_DTYPE_FP16:
    case ZERO_DTYPE_BF16: *out = MPI_UINT16_T; return !reduces;
    default: return 0;
    }
}

static int raw_call(rank_ctx_t *c, zero_coll_t coll, size_t count) {
    MPI_Datatype t;
    if (!raw_type(c->o->dtype, coll, &t) || count > INT_MAX) return -1;
    int k = (int)count, rc = MPI_ERR_OTHER;
    switch (coll) {
    case ZERO_COLL_ALL_REDUCE:
        rc = MPI_Allreduce(c->send, c->recv, k, t, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ZERO_COLL_REDUCE_SCATTER:
        rc = MPI_Reduce_scatter_block(c->send, c->recv, k, t, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ZERO_COLL_ALL_GATHER:
        rc = MPI_Allgather(c->send, k, t, c->recv, k, t, MPI_COMM_WORLD);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        rc = MPI_Alltoall(c->send, k, t, c->recv, k, t, MPI_COMM_WORLD);
        break;
    default: break;
    }
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "zero bench comm: [rank %d/%d] %s failed: %s\n", c->rank, c->n,
                raw_names[coll_index(coll)], msg);
        return -1;
    }
    return 0;
}
#endif

/* Whether the raw MPI collective exists for this row (the same answer on every
 * rank). */
static int raw_possible(const rank_ctx_t *c, zero_coll_t coll, size_t count) {
#ifdef ZERO_HAVE_MPI
    MPI_Datatype t;
    return c->raw && raw_type(c->o->dtype, coll, &t) && count <= INT_MAX;
#else
    (void)c, (void)coll, (void)count;
    return 0;
#endif
}

static int do_call(rank_ctx_t *c, int raw, zero_coll_t coll, size_t count) {
#ifdef ZERO_HAVE_MPI
    if (raw) return raw_call(c, coll, count);
#endif
    (void)raw;
    zero_status_t st = call_ours(c, coll, count);
    if (st != ZERO_OK) {
        report_failure(c, zero_coll_name(coll), st);
        return -1;
    }
    return 0;
}

static int do_barrier(rank_ctx_t *c, int raw) {
#ifdef ZERO_HAVE_MPI
    if (raw) return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
#endif
    (void)raw;
    zero_status_t st = zero_comm_barrier(c->comm);
    if (st != ZERO_OK) report_failure(c, "barrier", st);
    return st == ZERO_OK ? 0 : -1;
}

typedef struct timing {
    int batch, samples;
    double median_s, min_s; /* per call, slowest rank */
} timing_t;

/* One sample: barrier, then `batch` calls; this rank's time per call. */
static int sample(rank_ctx_t *c, int raw, zero_coll_t coll, size_t count, int batch, double *t) {
    if (do_barrier(c, raw)) return -1;
    double t0 = zero_time_now();
    for (int b = 0; b < batch; b++)
        if (do_call(c, raw, coll, count)) return -1;
    *t = (zero_time_now() - t0) / batch;
    return 0;
}

/* Time one implementation of one row. Collective. */
static int time_row(rank_ctx_t *c, int raw, zero_coll_t coll, size_t count, size_t S,
                    timing_t *out) {
    const options_t *o = c->o;
    int batch = o->batch;
    if (!batch) {
        size_t b = AUTO_BATCH_BYTES / (S ? S : 1);
        batch = (int)(b < 1 ? 1 : b > AUTO_MAX_BATCH ? AUTO_MAX_BATCH : b);
    }
    double t = 0.0, warm = 0.0;
    for (int w = 0; w < o->warmup; w++)
        if (sample(c, raw, coll, count, batch, &t)) return -1;
    int samples = o->iters;
    if (!samples) {
        samples = AUTO_MAX_SAMPLES;
        if (o->warmup > 0) {
            /* The slowest rank's last warm-up sample sets the count, so every rank
             * agrees. */
            if (gather_max(c, &t, 1, &warm)) return -1;
            double fit = AUTO_BUDGET_S / (warm * batch + 1e-9);
            if (fit < samples) samples = fit < AUTO_MIN_SAMPLES ? AUTO_MIN_SAMPLES : (int)fit;
        }
    }
    double *local = malloc((size_t)samples * sizeof *local);
    double *slowest = malloc((size_t)samples * sizeof *slowest);
    int rc = local && slowest ? 0 : -1;
    if (rc) fprintf(stderr, "zero bench comm: [rank %d/%d] out of memory\n", c->rank, c->n);
    for (int s = 0; rc == 0 && s < samples; s++) rc = sample(c, raw, coll, count, batch, &local[s]);
    if (rc == 0) rc = gather_max(c, local, samples, slowest);
    if (rc == 0) {
        out->batch = batch;
        out->samples = samples;
        out->median_s = median(slowest, samples);
        out->min_s = slowest[0]; /* sorted by median() */
    }
    free(local);
    free(slowest);
    return rc;
}

/* Check the recv buffer on every rank; returns the number of bad elements over
 * all ranks (the same on every rank) or -1 if the agreement failed. */
static long long checked_errors(rank_ctx_t *c, zero_coll_t coll, size_t count) {
    double mine = (double)check_recv(c, coll, count);
    double *all = malloc((size_t)c->n * sizeof *all);
    if (!all || gather_all(c, &mine, 1, all)) {
        free(all);
        return -1;
    }
    double total = 0.0;
    for (int r = 0; r < c->n; r++) total += all[r];
    free(all);
    return (long long)total;
}

/* ------------------------------------------------------------------------------
 * memory bound */

/* Copy bandwidth of all ranks at once: each rank copies its own buffer of
 * membw_bytes after a barrier; bytes copied by all ranks / the slowest rank's
 * time, median of MEMBW_REPS after one warm-up. glibc's memcpy uses
 * non-temporal stores at this size, so the memory traffic is 2 x the bytes
 * copied (read + write, no write-allocate). Collective. */
static int measure_membw(rank_ctx_t *c) {
    size_t bytes = c->o->membw_bytes;
    char *src = zero_mem_alloc(NULL, ZERO_MEM_OTHER, bytes, 4096);
    char *dst = zero_mem_alloc(NULL, ZERO_MEM_OTHER, bytes, 4096);
    int ok = src && dst, rc = 0;
    if (!ok)
        fprintf(stderr, "zero bench comm: [rank %d/%d] cannot allocate 2 x %zu bytes: %s\n",
                c->rank, c->n, bytes, zero_last_error());
    if (ok) { /* first touch outside the timing */
        memset(src, 1, bytes);
        memset(dst, 0, bytes);
    }
    int agreed = all_ok(c, ok);
    if (agreed != 1) rc = -1;
    double local[MEMBW_REPS + 1], slowest[MEMBW_REPS + 1];
    for (int r = 0; rc == 0 && r <= MEMBW_REPS; r++) {
        rc = do_barrier(c, 0);
        double t0 = zero_time_now();
        if (rc == 0) memcpy(dst, src, bytes);
        local[r] = zero_time_now() - t0;
    }
    if (rc == 0) rc = gather_max(c, local, MEMBW_REPS + 1, slowest);
    if (rc == 0) c->copy_bw = (double)c->n * (double)bytes / median(slowest + 1, MEMBW_REPS);
    zero_mem_free(src);
    zero_mem_free(dst);
    return rc;
}

/* ------------------------------------------------------------------------------
 * output */

static void print_json_num(FILE *out, const char *key, double v, int last) {
    if (isfinite(v))
        fprintf(out, "\"%s\":%.6g%s", key, v, last ? "" : ",");
    else
        fprintf(out, "\"%s\":null%s", key, last ? "" : ",");
}

static void print_header(const rank_ctx_t *c) {
    const options_t *o = c->o;
    if (o->json || c->rank != 0) return;
    struct utsname u;
    char when[64] = "?";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
    if (uname(&u) != 0) snprintf(u.nodename, sizeof u.nodename, "?");
    double mem_bw = 2.0 * c->copy_bw;
    printf("# zero bench comm: backend %s, %d ranks, dtype %s, op sum (zero %s, "
           "host %s, %s)\n",
           zero_backend_name(zero_comm_backend(c->comm)), c->n, zero_dtype_name(o->dtype),
           ZERO_VERSION_STRING, u.nodename, when);
    const int nodes = zero_comm_node_count(c->comm);
    printf("# nodes: %d", nodes);
    for (int r = 0; nodes > 1 && r < c->n; r++)
        printf("%s%d", r ? "," : " (node of each rank: ", zero_comm_node_of(c->comm, r));
    printf("%s; collectives %s\n", nodes > 1 ? ")" : "",
           nodes == 1 ? "flat (one node)"
           : o->flat  ? "flat (--flat): a rank on a node of L ranks sends (n-L)/(n-1) of its "
                        "bytes to other nodes"
                      : "hierarchical where that sends fewer bytes between nodes (--flat: not)");
    printf("# size S = bytes of the full vector (nccl-tests); count = the API's "
           "count argument\n");
    printf("# time = median over samples of the slowest rank's time per call; a "
           "sample = barrier + "
           "a batch of calls\n");
    if (o->iters)
        printf("#   %d samples", o->iters);
    else
        printf("#   %d-%d samples (fit to ~%.1f s per row)", AUTO_MIN_SAMPLES, AUTO_MAX_SAMPLES,
               AUTO_BUDGET_S);
    if (o->batch)
        printf(" of %d calls, %d warm-up samples\n", o->batch, o->warmup);
    else
        printf(" of 4 MiB / S calls (1-%d), %d warm-up samples\n", AUTO_MAX_BATCH, o->warmup);
    printf("# algbw = S / time, busbw = algbw * 2(n-1)/n (all_reduce) or (n-1)/n "
           "(others); "
           "GB/s = 1e9 B/s\n");
    printf("# memcpy: %d workers x %zu MiB, median of %d: %.2f GB/s copied = "
           "%.2f GB/s memory "
           "traffic (read + write)\n",
           c->n, o->membw_bytes >> 20, MEMBW_REPS, c->copy_bw * 1e-9, mem_bw * 1e-9);
    printf("# bound = busbw if the op's minimum memory traffic (model below) ran "
           "at %.2f GB/s; "
           "%%bound = our busbw / bound.\n"
           "#   Single copy, write-allocate not counted, no cache reuse: sizes "
           "that fit in cache "
           "can beat it.\n",
           mem_bw * 1e-9);
    double load[3];
    if (getloadavg(load, 3) == 3)
        printf("# load average %.2f %.2f %.2f (the machine is shared: other load shows up as "
               "noise)\n",
               load[0], load[1], load[2]);
    if (c->raw_note) printf("# raw MPI: %s\n", c->raw_note);
    if (c->o->check) printf("# check: every rank's output compared with a closed-form reference\n");
}

static void print_coll_header(const rank_ctx_t *c, int ci, int raw) {
    if (c->o->json || c->rank != 0) return;
    printf("#\n# %s: busbw factor %s; bytes model %s\n", zero_coll_name(colls[ci]),
           colls[ci] == ZERO_COLL_ALL_REDUCE ? "2(n-1)/n" : "(n-1)/n", model_texts[ci]);
    printf("#%12s %11s %6s %7s %10s %8s %8s %8s %7s %6s", "size", "count", "calls", "samples",
           "time", "algbw", "busbw", "bound", "%bound", "check");
    if (raw)
        printf(" | %10s %9s %8s %6s   (raw = %s on MPI_COMM_WORLD)", "raw time", "raw busbw",
               "ours/raw", "check", raw_names[ci]);
    if (zero_comm_node_count(c->comm) > 1)
        printf(" | %11s %11s   (rank 0 to other nodes)", "measured", "theory");
    printf("\n#%12s %11s %6s %7s %10s %8s %8s %8s %7s %6s", "(B)", "(elements)", "", "", "(us)",
           "(GB/s)", "(GB/s)", "(GB/s)", "", "");
    if (raw) printf(" | %10s %9s", "(us)", "(GB/s)");
    if (zero_comm_node_count(c->comm) > 1) printf(" | %11s %11s", "(B/call)", "(B/call)");
    printf("\n");
}

static const char *check_word(const options_t *o, long long errors) {
    return !o->check ? "off" : errors ? "FAIL" : "ok";
}

typedef struct row {
    zero_coll_t coll;
    size_t S, count;
    timing_t ours, raw;
    int has_raw;
    long long errors, raw_errors;
    /* rank 0's bytes per call to ranks of other nodes: the comm statistics of one more call,
     * and the closed form */
    double inter_bytes, inter_theory;
} row_t;

static void print_row(const rank_ctx_t *c, int raw_columns, const row_t *w) {
    const options_t *o = c->o;
    int n = c->n, ci = coll_index(w->coll);
    double f = bus_factor(w->coll, n), S = (double)w->S;
    double t = w->ours.median_s, algbw = S / t, busbw = algbw * f;
    double mem_bw = 2.0 * c->copy_bw, t_bound = model_bytes(w->coll, w->S, n) / mem_bw;
    double bound_busbw = S / t_bound * f, frac = t_bound / t;
    double rt = w->has_raw ? w->raw.median_s : NAN, raw_busbw = S / rt * f, ratio = rt / t;
    if (o->json) {
        printf("{\"bench\":\"comm\",\"backend\":\"%s\",\"ranks\":%d,\"op\":\"%s\","
               "\"dtype\":\"%s\","
               "\"size_bytes\":%zu,\"count\":%zu,\"calls_per_sample\":%d,"
               "\"samples\":%d,",
               zero_backend_name(zero_comm_backend(c->comm)), n, zero_coll_name(w->coll),
               zero_dtype_name(o->dtype), w->S, w->count, w->ours.batch, w->ours.samples);
        print_json_num(stdout, "time_us", t * 1e6, 0);
        print_json_num(stdout, "time_min_us", w->ours.min_s * 1e6, 0);
        print_json_num(stdout, "algbw_gbs", algbw * 1e-9, 0);
        print_json_num(stdout, "busbw_gbs", busbw * 1e-9, 0);
        print_json_num(stdout, "busbw_factor", f, 0);
        print_json_num(stdout, "memcpy_gbs", c->copy_bw * 1e-9, 0);
        print_json_num(stdout, "mem_traffic_gbs", mem_bw * 1e-9, 0);
        print_json_num(stdout, "model_bytes", model_bytes(w->coll, w->S, n), 0);
        print_json_num(stdout, "bound_busbw_gbs", bound_busbw * 1e-9, 0);
        print_json_num(stdout, "frac_of_bound", frac, 0);
        print_json_num(stdout, "inter_node_bytes", w->inter_bytes, 0);
        print_json_num(stdout, "inter_node_theory_bytes", w->inter_theory, 0);
        double load[1] = {NAN};
        getloadavg(load, 1);
        print_json_num(stdout, "loadavg_1m", load[0], 0);
        printf("\"check\":\"%s\",\"check_errors\":%lld,", check_word(o, w->errors), w->errors);
        if (w->has_raw)
            printf("\"raw\":\"%s\",", raw_names[ci]);
        else
            printf("\"raw\":null,");
        print_json_num(stdout, "raw_time_us", rt * 1e6, 0);
        print_json_num(stdout, "raw_busbw_gbs", raw_busbw * 1e-9, 0);
        print_json_num(stdout, "ours_over_raw", ratio, 0);
        if (w->has_raw)
            printf("\"raw_check\":\"%s\"}\n", check_word(o, w->raw_errors));
        else
            printf("\"raw_check\":null}\n");
    } else {
        printf(" %12zu %11zu %6d %7d %10.1f %8.2f %8.2f %8.2f %6.0f%% %6s", w->S, w->count,
               w->ours.batch, w->ours.samples, t * 1e6, algbw * 1e-9, busbw * 1e-9,
               bound_busbw * 1e-9, frac * 100.0, check_word(o, w->errors));
        if (raw_columns && w->has_raw)
            printf(" | %10.1f %9.2f %7.2fx %6s", rt * 1e6, raw_busbw * 1e-9, ratio,
                   check_word(o, w->raw_errors));
        else if (raw_columns)
            printf(" | %10s %9s %8s %6s", "-", "-", "-", "-");
        if (zero_comm_node_count(c->comm) > 1)
            printf(" | %11.0f %11.0f", w->inter_bytes, w->inter_theory);
        printf("\n");
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------------------
 * per rank */

/* Run one implementation on one row: poison, time, check. Collective. */
static int run_impl(rank_ctx_t *c, int raw, zero_coll_t coll, size_t count, size_t S, timing_t *tm,
                    long long *errors) {
    memset(c->recv, POISON, S);
    if (time_row(c, raw, coll, count, S, tm)) return -1;
    *errors = 0;
    if (c->o->check) {
        *errors = checked_errors(c, coll, count);
        if (*errors < 0) return -1;
        c->check_errors += (size_t)*errors;
    }
    return 0;
}

/* One more call of ours with the statistics read around it: its bytes to other nodes, beside
 * the closed form. Collective. */
static int measure_inter_node(rank_ctx_t *c, zero_coll_t coll, size_t count, size_t es, row_t *w) {
    zero_comm_stats_t a, b;
    zero_comm_get_stats(c->comm, &a);
    zero_status_t st = call_ours(c, coll, count);
    zero_comm_get_stats(c->comm, &b);
    if (st) {
        report_failure(c, "the call counted for the inter-node bytes", st);
        return -1;
    }
    w->inter_bytes = (double)(b.inter_node_sent_bytes[coll] - a.inter_node_sent_bytes[coll]);
    w->inter_theory = inter_node_theory(c, coll, count, es);
    return 0;
}

/* The whole benchmark as seen by one rank; every rank runs it. Returns the exit
 * code. */
static int run_rank(const options_t *o, zero_comm_t *comm) {
    rank_ctx_t ctx = {.o = o, .comm = comm};
    rank_ctx_t *c = &ctx;
    c->rank = zero_comm_rank(comm);
    c->n = zero_comm_size(comm);
    size_t es = zero_dtype_size(o->dtype);
#ifdef ZERO_HAVE_MPI
    if (zero_comm_backend(comm) == ZERO_BACKEND_MPI) {
        int level = MPI_THREAD_SINGLE, world = 0;
        MPI_Query_thread(&level);
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        /* Our collectives run on the communicator's progress thread while the raw
         * ones run on this one: MPI must allow calls from several threads (one at a
         * time suffices, since the blocking calls do not overlap). */
        if (level < MPI_THREAD_SERIALIZED)
            c->raw_note = "not timed: MPI was initialised below MPI_THREAD_SERIALIZED";
        else if (world != c->n)
            c->raw_note = "not timed: the communicator is not MPI_COMM_WORLD";
        else
            c->raw = 1;
    }
#endif
    if (measure_membw(c)) return 1;
    print_header(c);

    c->send = zero_mem_alloc(NULL, ZERO_MEM_COMM, o->max_bytes, 4096);
    c->recv = zero_mem_alloc(NULL, ZERO_MEM_COMM, o->max_bytes, 4096);
    int ok = c->send && c->recv;
    if (!ok)
        fprintf(stderr,
                "zero bench comm: [rank %d/%d] cannot allocate 2 x %zu bytes "
                "(--max-bytes): %s\n",
                c->rank, c->n, o->max_bytes, zero_last_error());
    for (size_t i = 0; ok && i < o->max_bytes / es; i++)
        store(o->dtype, c->send, i, pattern(o->dtype, c->rank, i));
    int agreed = all_ok(c, ok);
    int rc = agreed == 1 ? 0 : 1;

    for (int ci = 0; rc == 0 && ci < N_COLLS; ci++) {
        if (!o->use[ci]) continue;
        zero_coll_t coll = colls[ci];
        print_coll_header(c, ci, c->raw);
        for (size_t S = o->min_bytes; rc == 0 && S <= o->max_bytes;) {
            row_t w = {.coll = coll};
            w.count = coll_count(coll, S, c->n, es);
            w.S = coll_bytes(coll, w.count, c->n, es);
            if (w.count > 0) { /* the same on every rank */
                rc = run_impl(c, 0, coll, w.count, w.S, &w.ours, &w.errors);
                if (rc == 0) rc = measure_inter_node(c, coll, w.count, es, &w);
                w.has_raw = raw_possible(c, coll, w.count);
                if (rc == 0 && w.has_raw)
                    rc = run_impl(c, 1, coll, w.count, w.S, &w.raw, &w.raw_errors);
                if (rc == 0 && c->rank == 0) print_row(c, c->raw, &w);
                rc = rc ? 1 : 0;
            }
            if (S > o->max_bytes / (size_t)o->step_factor) break;
            S *= (size_t)o->step_factor;
        }
    }
    if (rc == 0 && c->check_errors) {
        if (c->rank == 0)
            fprintf(stderr,
                    "zero bench comm: %zu output elements differ from the reference "
                    "(rows marked "
                    "FAIL)\n",
                    c->check_errors);
        rc = 1;
    }
    zero_mem_free(c->send);
    zero_mem_free(c->recv);
    return rc;
}

/* ------------------------------------------------------------------------------
 * options */

static void usage(FILE *out) {
    fprintf(out,
            "usage: zero bench comm [options]\n"
            "\n"
            "Times the collectives like nccl-tests: for each op and size S "
            "(bytes of the full "
            "vector),\n"
            "the median over samples of the slowest rank's time per call, algbw "
            "= S/t and busbw.\n"
            "Prints the memcpy bandwidth and the busbw it allows; under MPI also "
            "the raw MPI call.\n"
            "\n"
            "options:\n"
            "  --backend threads|mpi  default: mpi when started by mpirun, else "
            "threads\n"
            "  --ranks N              threads: rank threads (default 2); mpi: "
            "must equal the job size\n"
            "  --ranks-per-node K     threads: the ranks stand for nodes of K ranks "
            "(default 0: one node); mpi: the MPI library's nodes\n"
            "  --op NAME[,NAME...]    all_reduce, reduce_scatter, all_gather, "
            "all_to_all or all "
            "(default all)\n"
            "  --dtype NAME           fp32 (default), bf16, fp16, fp64, int8, "
            "uint8, int32\n"
            "  --min-bytes SIZE       smallest S (default 1K); SIZE is bytes, or "
            "with K, M, G (x1024)\n"
            "  --max-bytes SIZE       largest S (default 256M)\n"
            "  --step-factor F        multiply S by F from one size to the next "
            "(default 2)\n"
            "  --iters K              timed samples per size (default: 5-20, fit "
            "to ~%.1f s)\n"
            "  --warmup W             untimed samples before them (default 2)\n"
            "  --batch B              calls per sample (default: 4 MiB / S, "
            "between 1 and %d)\n"
            "  --membw-bytes SIZE     buffer each rank copies to measure memory "
            "bandwidth (default "
            "64M)\n"
            "  --flat                 the flat collectives also on several nodes (default: "
            "hierarchical where they send fewer bytes between nodes)\n"
            "  --no-check             do not compare outputs with the reference\n"
            "  --json                 one JSON object per line and size instead "
            "of the table\n"
            "  --help                 this text\n"
            "\n"
            "examples:\n"
            "  zero bench comm --ranks 4 --op reduce_scatter --max-bytes 64M\n"
            "  mpirun -np 2 zero bench comm --min-bytes 16M --step-factor 4\n",
            AUTO_BUDGET_S, AUTO_MAX_BATCH);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    if (zero__launch_rank() <= 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "zero bench comm: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, " (try `zero bench comm --help`)\n");
        va_end(ap);
    }
    return 2;
}

/* Parse "1024", "64K", "16M", "1G" (also "64KiB", "64KB"; binary multiples). */
static int parse_size(const char *s, size_t *out) {
    char *end = NULL;
    if (!s || *s < '0' || *s > '9') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K': shift = 10, end++; break;
    case 'm':
    case 'M': shift = 20, end++; break;
    case 'g':
    case 'G': shift = 30, end++; break;
    default: break;
    }
    if (shift && (!strcmp(end, "iB") || !strcmp(end, "B"))) end += strlen(end);
    if (*end == 'B' && !end[1] && !shift) end++;
    if (*end || v == 0 || v > (SIZE_MAX >> shift) >> 2) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end = NULL;
    if (!s || !*s) return -1;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_ops(const char *s, int *use) {
    char buf[256];
    if (!s || strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    memset(use, 0, N_COLLS * sizeof *use);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < N_COLLS; i++) {
            if (!strcmp(tok, "all") || !strcmp(tok, zero_coll_name(colls[i]))) {
                use[i] = 1;
                found = 1;
            }
        }
        if (!found) return -1;
    }
    for (int i = 0; i < N_COLLS; i++)
        if (use[i]) return 0;
    return -1;
}

static int parse_options(int argc, char **argv, options_t *o) {
    *o = (options_t){.backend = ZERO_BACKEND_THREADS,
                     .ranks = 2,
                     .dtype = ZERO_DTYPE_FP32,
                     .min_bytes = (size_t)1 << 10,
                     .max_bytes = (size_t)256 << 20,
                     .membw_bytes = (size_t)64 << 20,
                     .step_factor = 2,
                     .warmup = 2,
                     .check = 1};
    for (int i = 0; i < N_COLLS; i++) o->use[i] = 1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL;
        char flag[64];
        /* --flag=value or --flag value */
        const char *eq = strchr(arg, '=');
        size_t flen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (flen >= sizeof flag) flen = sizeof flag - 1;
        memcpy(flag, arg, flen);
        flag[flen] = '\0';
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            o->help = 1;
            continue;
        }
        if (!strcmp(flag, "--json") || !strcmp(flag, "--no-check") || !strcmp(flag, "--flat")) {
            if (eq) return usage_error("%s takes no value (got '%s')", flag, eq + 1);
            if (!strcmp(flag, "--json"))
                o->json = 1;
            else if (!strcmp(flag, "--flat"))
                o->flat = 1;
            else
                o->check = 0;
            continue;
        }
        static const char *const valued[] = {
            "--backend",     "--ranks", "--op",     "--dtype", "--min-bytes",   "--max-bytes",
            "--step-factor", "--iters", "--warmup", "--batch", "--membw-bytes", "--ranks-per-node"};
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known |= !strcmp(flag, valued[k]);
        if (!known) return usage_error("unknown option '%s'", arg);
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return usage_error("%s needs a value", flag);

        if (!strcmp(flag, "--backend")) {
            if (zero_backend_parse(val, &o->backend) != ZERO_OK)
                return usage_error("--backend '%s': expected threads or mpi", val);
            o->backend_set = 1;
        } else if (!strcmp(flag, "--ranks")) {
            if (parse_int(val, 1, 256, &o->ranks))
                return usage_error("--ranks '%s': expected an integer from 1 to 256", val);
            o->ranks_set = 1;
        } else if (!strcmp(flag, "--ranks-per-node")) {
            if (parse_int(val, 0, 256, &o->ranks_per_node))
                return usage_error("--ranks-per-node '%s': expected an integer from 0 to 256 (0: "
                                   "one node)",
                                   val);
        } else if (!strcmp(flag, "--op")) {
            if (parse_ops(val, o->use))
                return usage_error("--op '%s': expected all_reduce, reduce_scatter, all_gather, "
                                   "all_to_all or all (comma-separated)",
                                   val);
        } else if (!strcmp(flag, "--dtype")) {
            if (zero_dtype_parse(val, &o->dtype) != ZERO_OK)
                return usage_error("--dtype '%s': expected fp32, bf16, fp16, fp64, "
                                   "int8, uint8 or int32",
                                   val);
        } else if (!strcmp(flag, "--min-bytes") || !strcmp(flag, "--max-bytes") ||
                   !strcmp(flag, "--membw-bytes")) {
            size_t *dst = !strcmp(flag, "--min-bytes")   ? &o->min_bytes
                          : !strcmp(flag, "--max-bytes") ? &o->max_bytes
                                                         : &o->membw_bytes;
            if (parse_size(val, dst))
                return usage_error("%s '%s': expected a positive size such as 4096, 64K, 16M "
                                   "or 1G",
                                   flag, val);
        } else if (!strcmp(flag, "--step-factor")) {
            if (parse_int(val, 2, 1024, &o->step_factor))
                return usage_error("--step-factor '%s': expected an integer from 2 to 1024 "
                                   "(2 or 4 are usual)",
                                   val);
        } else if (!strcmp(flag, "--iters")) {
            if (parse_int(val, 1, 1000000, &o->iters))
                return usage_error("--iters '%s': expected an integer from 1 to 1000000", val);
        } else if (!strcmp(flag, "--warmup")) {
            if (parse_int(val, 0, 1000000, &o->warmup))
                return usage_error("--warmup '%s': expected an integer from 0 to 1000000", val);
        } else if (!strcmp(flag, "--batch")) {
            if (parse_int(val, 1, 1000000, &o->batch))
                return usage_error("--batch '%s': expected an integer from 1 to 1000000", val);
        }
    }
    if (o->min_bytes > o->max_bytes) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%zu", o->min_bytes);
        snprintf(b, sizeof b, "%zu", o->max_bytes);
        return usage_error("--min-bytes %s is larger than --max-bytes %s", a, b);
    }
    return 0;
}

/* ------------------------------------------------------------------------------
 * backends */

typedef struct rank_thread {
    pthread_t thread;
    const options_t *o;
    zero_comm_t *comm;
    int rc;
} rank_thread_t;

static void *rank_thread_main(void *arg) {
    rank_thread_t *t = arg;
    t->rc = run_rank(t->o, t->comm);
    return NULL;
}

static int run_threads(const options_t *o) {
    int n = o->ranks, rc = 0;
    zero_comm_params_t params = zero_comm_params_default();
    params.timeout_s = TIMEOUT_S;
    params.ranks_per_node = o->ranks_per_node;
    params.flat = o->flat;
    zero_comm_t **comms = calloc((size_t)n, sizeof *comms);
    rank_thread_t *threads = calloc((size_t)n, sizeof *threads);
    if (!comms || !threads) {
        fprintf(stderr, "zero bench comm: out of memory\n");
        free(comms);
        free(threads);
        return 1;
    }
    zero_status_t st = zero_comm_threads_init_all(n, comms, &params);
    if (st != ZERO_OK) {
        fprintf(stderr, "zero bench comm: creating %d thread ranks failed: %s: %s\n", n,
                zero_status_str(st), zero_last_error());
        free(comms);
        free(threads);
        return 1;
    }
    int started = 0;
    for (; started < n; started++) {
        threads[started] = (rank_thread_t){.o = o, .comm = comms[started]};
        if (pthread_create(&threads[started].thread, NULL, rank_thread_main, &threads[started]))
            break;
    }
    if (started < n) {
        /* The started ranks wait for the missing ones and fail by timeout. */
        fprintf(stderr, "zero bench comm: could not start rank thread %d of %d\n", started, n);
        rc = 1;
    }
    for (int r = 0; r < started; r++) {
        pthread_join(threads[r].thread, NULL);
        if (threads[r].rc > rc) rc = threads[r].rc;
    }
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
    free(comms);
    free(threads);
    return rc;
}

static int run_mpi(const options_t *o) {
    zero_comm_params_t params = zero_comm_params_default();
    params.timeout_s = TIMEOUT_S;
    params.flat = o->flat;
    zero_comm_t *comm = NULL;
    zero_status_t st = zero_comm_mpi_init(&comm, &params);
    if (st != ZERO_OK) {
        if (zero__launch_rank() <= 0)
            fprintf(stderr, "zero bench comm: MPI backend: %s: %s\n", zero_status_str(st),
                    zero_last_error());
        return 1;
    }
    int rc;
    if (o->ranks_set && o->ranks != zero_comm_size(comm)) {
        if (zero_comm_rank(comm) == 0)
            fprintf(stderr,
                    "zero bench comm: --ranks %d, but the MPI job has %d ranks "
                    "(under MPI the "
                    "ranks are the job's processes: use mpirun -np %d, or omit "
                    "--ranks)\n",
                    o->ranks, zero_comm_size(comm), o->ranks);
        rc = 2;
    } else {
        rc = run_rank(o, comm);
    }
    zero_comm_free(comm);
    zero_comm_mpi_finalize();
    return rc;
}

int zero__bench_comm(int argc, char **argv) {
    options_t o;
    int rc = parse_options(argc, argv, &o);
    if (rc) return rc;
    if (o.help) {
        if (zero__launch_rank() <= 0) usage(stdout);
        return 0;
    }
    if (!o.backend_set && zero_comm_mpi_launched()) o.backend = ZERO_BACKEND_MPI;
    return o.backend == ZERO_BACKEND_MPI ? run_mpi(&o) : run_threads(&o);
}
