/* test_mpi_smoke.c — smoke test of the MPI backend (src/comm/mpi.c), run under mpirun.
 *
 * Every collective, fp32/fp16/bf16 (plus int32/int8 for all_reduce), in and out of place,
 * against a naive reference: each rank can generate every rank's input from (rank, index), and
 * sums are accumulated here in rank order with plain loops (fp16/bf16 in fp32, rounded once), so
 * results must be bitwise equal. Sizes cross the reduce-scatter segment (1 MiB) boundaries.
 * Then the fault paths: ranks that disagree get ZERO_ERR_MISMATCH, a rank that never arrives is
 * named in ZERO_ERR_TIMEOUT on the others, and a failed communicator refuses further work.
 * The full multi-backend suite lives in tests/comm.
 */
#include "mpi_harness.h"
#include "zero/zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------ data */

static uint32_t mix(uint32_t a, uint32_t b, uint32_t c) {
    uint64_t x = ((uint64_t)a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)b * 0xC2B2AE3D27D4EB4Full) ^
                 ((uint64_t)c * 0x165667B19E3779F9ull);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint32_t)(x >> 16);
}

/* Rank r's element i for a call salted `salt`: values of very different magnitudes, so the
 * order of a floating-point sum changes its result. */
static void gen(zero_dtype_t dt, int rank, size_t i, uint32_t salt, void *out) {
    uint32_t h = mix((uint32_t)rank + 1, (uint32_t)i, salt);
    float v = ldexpf((float)(h & 0xffff) / 65536.0f - 0.5f, (int)((h >> 16) % 24) - 12);
    switch (dt) {
    case ZERO_DTYPE_FP32: memcpy(out, &v, 4); break;
    case ZERO_DTYPE_FP16: *(uint16_t *)out = zero_fp32_to_fp16(v); break;
    case ZERO_DTYPE_BF16: *(uint16_t *)out = zero_fp32_to_bf16(v); break;
    case ZERO_DTYPE_INT32: *(int32_t *)out = (int32_t)h; break;
    case ZERO_DTYPE_INT8: *(int8_t *)out = (int8_t)(h >> 8); break;
    default: abort();
    }
}

static float as_float(zero_dtype_t dt, const void *p) {
    switch (dt) {
    case ZERO_DTYPE_FP32: return *(const float *)p;
    case ZERO_DTYPE_FP16: return zero_fp16_to_fp32(*(const uint16_t *)p);
    default: return zero_bf16_to_fp32(*(const uint16_t *)p);
    }
}

/* Naive reference of element i reduced over ranks 0..n-1 in rank order. */
static void ref_reduce(zero_dtype_t dt, zero_op_t op, int n, size_t i, uint32_t salt, void *out) {
    unsigned char e[8];
    if (dt == ZERO_DTYPE_INT32 || dt == ZERO_DTYPE_INT8) {
        int64_t acc = 0;
        for (int r = 0; r < n; r++) {
            gen(dt, r, i, salt, e);
            int64_t v = dt == ZERO_DTYPE_INT32 ? *(int32_t *)e : *(int8_t *)e;
            if (op == ZERO_OP_SUM)
                acc += v;
            else if (r == 0 || v > acc)
                acc = v;
        }
        if (dt == ZERO_DTYPE_INT32)
            *(int32_t *)out = (int32_t)(uint32_t)(uint64_t)acc;
        else
            *(int8_t *)out = (int8_t)(uint8_t)(uint64_t)acc;
        return;
    }
    float acc = 0;
    for (int r = 0; r < n; r++) {
        gen(dt, r, i, salt, e);
        float v = as_float(dt, e);
        if (r == 0)
            acc = v;
        else if (op == ZERO_OP_SUM)
            acc = acc + v;
        else if (v > acc)
            acc = v;
    }
    switch (dt) {
    case ZERO_DTYPE_FP32: memcpy(out, &acc, 4); break;
    case ZERO_DTYPE_FP16: *(uint16_t *)out = zero_fp32_to_fp16(acc); break;
    default: *(uint16_t *)out = zero_fp32_to_bf16(acc); break;
    }
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) abort();
    return p;
}

/* First differing element index of two arrays, or -1. */
static long first_diff(const void *a, const void *b, size_t count, size_t es) {
    for (size_t i = 0; i < count; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return (long)i;
    return -1;
}

/* ------------------------------------------------------------------------------ cases */

static void test_all_reduce(zero_comm_t *comm, zero_dtype_t dt, zero_op_t op, size_t count,
                            int in_place) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt);
    uint32_t salt = (uint32_t)(count * 7 + (size_t)dt * 3 + (size_t)op);
    char *send = xmalloc(count * es), *recv = xmalloc(count * es), *want = xmalloc(count * es);
    for (size_t i = 0; i < count; i++) {
        gen(dt, me, i, salt, send + i * es);
        ref_reduce(dt, op, n, i, salt, want + i * es);
    }
    char *out = in_place ? send : recv;
    zero_status_t st = zero_comm_all_reduce(send, out, count, dt, op, comm);
    long d = st ? -2 : first_diff(out, want, count, es);
    CHECK(st == ZERO_OK && d < 0, "all_reduce %s %s count %zu in_place %d: status %s, diff at %ld",
          zero_dtype_name(dt), zero_op_name(op), count, in_place, zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
}

static void test_reduce_scatter(zero_comm_t *comm, zero_dtype_t dt, zero_op_t op, size_t rc,
                                int in_place) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt), total = rc * (size_t)n;
    uint32_t salt = (uint32_t)(rc * 11 + (size_t)dt * 5 + (size_t)op + 1);
    char *send = xmalloc(total * es), *recv = xmalloc(rc * es), *want = xmalloc(rc * es);
    for (size_t i = 0; i < total; i++) gen(dt, me, i, salt, send + i * es);
    for (size_t j = 0; j < rc; j++) ref_reduce(dt, op, n, (size_t)me * rc + j, salt, want + j * es);
    char *out = in_place ? send + (size_t)me * rc * es : recv;
    zero_status_t st = zero_comm_reduce_scatter(send, out, rc, dt, op, comm);
    long d = st ? -2 : first_diff(out, want, rc, es);
    CHECK(st == ZERO_OK && d < 0,
          "reduce_scatter %s %s recv_count %zu in_place %d: status %s, diff at %ld",
          zero_dtype_name(dt), zero_op_name(op), rc, in_place, zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
}

static void test_all_gather(zero_comm_t *comm, zero_dtype_t dt, size_t sc, int in_place) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt), total = sc * (size_t)n;
    uint32_t salt = (uint32_t)(sc * 13 + (size_t)dt);
    char *send = xmalloc(sc * es), *recv = xmalloc(total * es), *want = xmalloc(total * es);
    for (int r = 0; r < n; r++)
        for (size_t j = 0; j < sc; j++) gen(dt, r, j, salt, want + ((size_t)r * sc + j) * es);
    char *src = in_place ? recv + (size_t)me * sc * es : send;
    memcpy(src, want + (size_t)me * sc * es, sc * es);
    zero_status_t st = zero_comm_all_gather(src, recv, sc, dt, comm);
    long d = st ? -2 : first_diff(recv, want, total, es);
    CHECK(st == ZERO_OK && d < 0, "all_gather %s send_count %zu in_place %d: status %s, diff %ld",
          zero_dtype_name(dt), sc, in_place, zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
}

static void test_all_to_all(zero_comm_t *comm, zero_dtype_t dt, size_t c) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt), total = c * (size_t)n;
    char *send = xmalloc(total * es), *recv = xmalloc(total * es), *want = xmalloc(total * es);
    for (size_t i = 0; i < total; i++) gen(dt, me, i, 99, send + i * es);
    for (int r = 0; r < n; r++) /* block r of recv is block `me` of rank r's send */
        for (size_t x = 0; x < c; x++)
            gen(dt, r, (size_t)me * c + x, 99, want + ((size_t)r * c + x) * es);
    zero_status_t st = zero_comm_all_to_all(send, recv, c, dt, comm);
    long d = st ? -2 : first_diff(recv, want, total, es);
    CHECK(st == ZERO_OK && d < 0, "all_to_all %s count %zu: status %s, diff at %ld",
          zero_dtype_name(dt), c, zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
}

static size_t v_count(int from, int to) { return (size_t)((from * 3 + to * 5) % 4) * 37; }

static void test_all_to_allv(zero_comm_t *comm, zero_dtype_t dt) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt);
    size_t *sc = xmalloc((size_t)n * sizeof *sc), *sd = xmalloc((size_t)n * sizeof *sd);
    size_t *rc = xmalloc((size_t)n * sizeof *rc), *rd = xmalloc((size_t)n * sizeof *rd);
    size_t stot = 0, rtot = 0;
    for (int r = 0; r < n; r++) { /* blocks laid out in reverse rank order, with gaps */
        int j = n - 1 - r;
        sc[j] = v_count(me, j);
        sd[j] = stot + 1;
        stot += sc[j] + 1;
        rc[j] = v_count(j, me);
        rd[j] = rtot + 2;
        rtot += rc[j] + 2;
    }
    char *send = xmalloc(stot * es), *recv = xmalloc(rtot * es), *want = xmalloc(rtot * es);
    memset(recv, 0x5a, rtot * es);
    memset(want, 0x5a, rtot * es);
    for (int j = 0; j < n; j++)
        for (size_t x = 0; x < sc[j]; x++)
            gen(dt, me, (size_t)j * 1000 + x, 7, send + (sd[j] + x) * es);
    for (int i = 0; i < n; i++)
        for (size_t x = 0; x < rc[i]; x++)
            gen(dt, i, (size_t)me * 1000 + x, 7, want + (rd[i] + x) * es);
    zero_status_t st = zero_comm_all_to_allv(send, sc, sd, recv, rc, rd, dt, comm);
    long d = st ? -2 : first_diff(recv, want, rtot, es);
    CHECK(st == ZERO_OK && d < 0, "all_to_allv %s: status %s, diff at %ld", zero_dtype_name(dt),
          zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

static void test_broadcast(zero_comm_t *comm, zero_dtype_t dt, size_t count, int root,
                           int in_place) {
    int me = zero_comm_rank(comm);
    size_t es = zero_dtype_size(dt);
    char *send = xmalloc(count * es), *recv = xmalloc(count * es), *want = xmalloc(count * es);
    for (size_t i = 0; i < count; i++) gen(dt, root, i, 5, want + i * es);
    memset(send, 0, count * es);
    memset(recv, 0, count * es);
    if (me == root) memcpy(in_place ? recv : send, want, count * es);
    zero_status_t st = zero_comm_broadcast(in_place ? recv : send, recv, count, dt, root, comm);
    long d = st ? -2 : first_diff(recv, want, count, es);
    CHECK(st == ZERO_OK && d < 0, "broadcast %s count %zu root %d in_place %d: status %s, diff %ld",
          zero_dtype_name(dt), count, root, in_place, zero_status_str(st), d);
    free(send);
    free(recv);
    free(want);
}

static void test_nonblocking(zero_comm_t *comm) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    enum { COUNT = 5000 };
    size_t total = (size_t)COUNT * (size_t)n;
    float *a = xmalloc(COUNT * 4), *want_a = xmalloc(COUNT * 4);
    float *b = xmalloc(total * 4), *want_b = xmalloc(total * 4);
    for (size_t i = 0; i < COUNT; i++) {
        gen(ZERO_DTYPE_FP32, me, i, 1234, &a[i]);
        ref_reduce(ZERO_DTYPE_FP32, ZERO_OP_SUM, n, i, 1234, &want_a[i]);
    }
    for (int r = 0; r < n; r++)
        for (size_t j = 0; j < COUNT; j++) gen(ZERO_DTYPE_FP32, r, j, 4321, &want_b[r * COUNT + j]);
    memcpy(b + (size_t)me * COUNT, want_b + (size_t)me * COUNT, COUNT * 4);
    /* Two requests in flight at once: they run in posting order on the progress thread. */
    zero_comm_request_t *r1 = NULL, *r2 = NULL;
    zero_status_t s1 =
        zero_comm_all_reduce_post(a, a, COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm, &r1);
    zero_status_t s2 =
        zero_comm_all_gather_post(b + (size_t)me * COUNT, b, COUNT, ZERO_DTYPE_FP32, comm, &r2);
    int done = 0;
    while (!s2 && !done) s2 = zero_comm_test(r2, &done);
    if (!s1) s1 = zero_comm_wait(r1);
    CHECK(s1 == ZERO_OK && s2 == ZERO_OK && first_diff(a, want_a, COUNT, 4) < 0 &&
              first_diff(b, want_b, total, 4) < 0,
          "non-blocking all_reduce + all_gather: %s / %s", zero_status_str(s1),
          zero_status_str(s2));
    free(a);
    free(want_a);
    free(b);
    free(want_b);
}

/* Blocks of more than 20 pipeline segments (the send window is 16): all_reduce in_place as
 * given, reduce_scatter the other way.
 * Small integers sum exactly in any order, so this checks data movement cheaply; the order of
 * sums is checked by the hashed cases above. */
static float exact_value(int rank, size_t i) { return (float)((i * 7 + (size_t)rank * 3) % 17); }

static void test_many_segments(zero_comm_t *comm, int in_place) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    size_t block = 20 * 262144 + 123, total = block * (size_t)n;
    float *send = xmalloc(total * 4), *recv = xmalloc(total * 4);
    for (size_t i = 0; i < total; i++) send[i] = exact_value(me, i);
    float *out = in_place ? send : recv;
    zero_status_t st = zero_comm_all_reduce(send, out, total, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    size_t bad = 0;
    for (size_t i = 0; i < total && !st; i++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += exact_value(r, i);
        bad += out[i] != want;
    }
    CHECK(st == ZERO_OK && bad == 0, "all_reduce of %zu fp32 in_place %d: %s, %zu wrong", total,
          in_place, zero_status_str(st), bad);
    for (size_t i = 0; i < total; i++) send[i] = exact_value(me, i);
    out = !in_place ? send + (size_t)me * block : recv;
    st = zero_comm_reduce_scatter(send, out, block, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    bad = 0;
    for (size_t j = 0; j < block && !st; j++) {
        float want = 0;
        for (int r = 0; r < n; r++) want += exact_value(r, (size_t)me * block + j);
        bad += out[j] != want;
    }
    CHECK(st == ZERO_OK && bad == 0, "reduce_scatter of %zu fp32 in_place %d: %s, %zu wrong", block,
          !in_place, zero_status_str(st), bad);
    free(send);
    free(recv);
}

static void test_split(zero_comm_t *comm) {
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    /* The last rank (when n > 2) joins no group; the others split into even and odd ranks, with
     * the key reversing the order inside each group. */
    int out_rank = n > 2 ? n - 1 : -1;
    int colour = me == out_rank ? ZERO_COMM_NO_COLOUR : me % 2;
    zero_comm_t *sub = NULL;
    zero_status_t st = zero_comm_split(comm, colour, n - me, &sub);
    CHECK(st == ZERO_OK, "split: %s (%s)", zero_status_str(st), zero_last_error());
    if (st) return;
    if (me == out_rank) {
        CHECK(sub == NULL, "split with no colour returned a communicator");
        return;
    }
    int members[8], m = 0;
    for (int r = 0; r < n; r++)
        if (r != out_rank && r % 2 == me % 2) members[m++] = r;
    /* Keys n - r: the highest parent rank comes first. */
    int want_rank = 0;
    for (int i = 0; i < m; i++)
        if (members[i] > me) want_rank++;
    CHECK(sub && zero_comm_size(sub) == m && zero_comm_rank(sub) == want_rank,
          "split: size %d rank %d, expected %d and %d", sub ? zero_comm_size(sub) : -1,
          sub ? zero_comm_rank(sub) : -1, m, want_rank);
    if (sub) {
        int32_t v = me + 1, sum = 0;
        st = zero_comm_all_reduce(&v, &sum, 1, ZERO_DTYPE_INT32, ZERO_OP_SUM, sub);
        int32_t want = 0;
        for (int i = 0; i < m; i++) want += members[i] + 1;
        CHECK(st == ZERO_OK && sum == want, "all_reduce on split: %d, expected %d (%s)", sum, want,
              zero_status_str(st));
        zero_comm_free(sub);
    }
}

static void test_mismatch(void) {
    zero_comm_t *comm;
    zero_status_t st = zero_comm_mpi_init(&comm, NULL);
    CHECK(st == ZERO_OK, "second mpi_init: %s", zero_status_str(st));
    if (st) return;
    int me = zero_comm_rank(comm);
    float buf[16] = {0};
    st = zero_comm_all_reduce(buf, buf, me == 0 ? 10 : 11, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), "rank 0 called all_reduce of 10"),
          "mismatch: %s: %s", zero_status_str(st), zero_last_error());
    st = zero_comm_barrier(comm);
    CHECK(st == ZERO_ERR_COMM_FAILED, "after a mismatch: %s", zero_status_str(st));
    zero_comm_free(comm);
}

static void *failing_alloc(void *user, size_t bytes, size_t align) {
    (void)user;
    (void)bytes;
    (void)align;
    return NULL;
}
static void plain_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

/* Rank 0 cannot allocate its reduce-scatter scratch: every rank fails the call with
 * ZERO_ERR_OUT_OF_MEMORY naming rank 0, and the communicator stays usable afterwards. Only the
 * point-to-point path (ranks on several nodes) has scratch: ZERO_MPI_SHM=0 selects it here. */
static void test_scratch_oom(void) {
    zero_comm_t *comm;
    setenv("ZERO_MPI_SHM", "0", 1);
    zero_status_t st = zero_comm_mpi_init(&comm, NULL);
    unsetenv("ZERO_MPI_SHM");
    CHECK(st == ZERO_OK, "mpi_init for the OOM case: %s", zero_status_str(st));
    if (st) return;
    int me = zero_comm_rank(comm), n = zero_comm_size(comm);
    zero_allocator_t bad = {failing_alloc, plain_free, NULL};
    zero_mem_t *mem = NULL;
    if (me == 0) {
        zero_mem_init(&mem, &bad);
        zero_comm_set_mem(comm, mem);
    }
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    st = zero_comm_all_reduce(v, out, 8, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    CHECK(st == ZERO_ERR_OUT_OF_MEMORY &&
              (me == 0 ? strstr(zero_last_error(), "scratch") != NULL
                       : strstr(zero_last_error(), "rank 0 could not take part") != NULL),
          "scratch OOM: %s: %s", zero_status_str(st), zero_last_error());
    if (me == 0) zero_comm_set_mem(comm, NULL);
    st = zero_comm_all_reduce(v, out, 8, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    CHECK(st == ZERO_OK && out[7] == 8.0f * (float)n, "all_reduce after an OOM: %s, %g",
          zero_status_str(st), (double)out[7]);
    zero_comm_free(comm);
    zero_mem_free_domain(mem);
}

static void test_timeout(void) {
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 1.5;
    zero_comm_t *comm;
    zero_status_t st = zero_comm_mpi_init(&comm, &p);
    CHECK(st == ZERO_OK, "third mpi_init: %s", zero_status_str(st));
    if (st) return;
    int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    enum { COUNT = 1000003 };
    if (me == n - 1) {
        /* Never arrive: outlive the others' deadline, then leave. */
        struct timespec ts = {2, 500000000L};
        nanosleep(&ts, NULL);
    } else {
        float *buf = calloc(COUNT, sizeof *buf);
        double t0 = zero_time_now();
        st = zero_comm_all_reduce(buf, buf, COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
        double t = zero_time_now() - t0;
        char want[64];
        snprintf(want, sizeof want, "rank(s) %d did not arrive", n - 1);
        CHECK(st == ZERO_ERR_TIMEOUT && strstr(zero_last_error(), want) &&
                  strstr(zero_last_error(), "all_reduce of 1000003 fp32"),
              "timeout: %s: %s", zero_status_str(st), zero_last_error());
        CHECK(t > 1.4 && t < 10, "timeout after %.2f s, expected 1.5", t);
        if (me == 0) fprintf(stderr, "[rank 0] expected failure: %s\n", zero_last_error());
        st = zero_comm_barrier(comm);
        CHECK(st == ZERO_ERR_COMM_FAILED, "after a timeout: %s", zero_status_str(st));
        free(buf);
    }
    zero_comm_free(comm);
}

int main(void) {
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 60;
    zero_comm_t *comm = mpi_harness_init(&p);
    if (!comm) return 1;
    int n = zero_comm_size(comm);

    const zero_dtype_t floats[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_FP16, ZERO_DTYPE_BF16};
    /* 600001 fp32 per block: three 1 MiB segments with a ragged end. */
    const size_t counts[] = {0, 1, 3, 1000, 600001};
    for (int t = 0; t < 3; t++) {
        zero_dtype_t dt = floats[t];
        for (int c = 0; c < 5; c++) {
            for (int ip = 0; ip < 2; ip++) {
                if (c == 4 && ip != t % 2) continue; /* big: one placement per dtype */
                test_all_reduce(comm, dt, ZERO_OP_SUM, counts[c] * (c == 4 ? (size_t)n : 1), ip);
                test_reduce_scatter(comm, dt, ZERO_OP_SUM, counts[c], ip);
                test_all_gather(comm, dt, counts[c] / (c == 4 ? 4 : 1), ip);
            }
        }
        test_all_reduce(comm, dt, ZERO_OP_MAX, 777, 0);
        test_reduce_scatter(comm, dt, ZERO_OP_MAX, 333, 1);
        test_all_to_all(comm, dt, 0);
        test_all_to_all(comm, dt, 129);
        test_all_to_allv(comm, dt);
        for (int root = 0; root < n; root++) test_broadcast(comm, dt, 1001, root, root % 2);
        test_broadcast(comm, dt, 0, 0, 0);
    }
    test_all_reduce(comm, ZERO_DTYPE_INT32, ZERO_OP_SUM, 1001, 1);
    test_all_reduce(comm, ZERO_DTYPE_INT8, ZERO_OP_MAX, 1001, 0);
    test_reduce_scatter(comm, ZERO_DTYPE_INT8, ZERO_OP_SUM, 100, 0);
    zero_status_t st = zero_comm_barrier(comm);
    CHECK(st == ZERO_OK, "barrier: %s", zero_status_str(st));
    test_nonblocking(comm);
    test_many_segments(comm, 1);
    test_split(comm);

    zero_comm_stats_t stats;
    zero_comm_get_stats(comm, &stats);
    CHECK(stats.calls[ZERO_COLL_ALL_REDUCE] > 0, "no all_reduce counted");

    if (n > 1) {
        test_mismatch();
        test_scratch_oom();
        test_timeout();
    }

    return mpi_harness_finish(comm);
}
