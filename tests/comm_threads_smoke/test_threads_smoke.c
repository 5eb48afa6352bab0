/* test_threads_smoke.c — a small smoke test of the threads communicator backend.
 *
 * Every collective on 1..8 ranks, fp32 and fp16, in and out of place, compared bitwise with a
 * naive reference that regenerates every rank's data and reduces it in rank order. Then the
 * fault paths: a rank that never arrives (timeout), ranks that disagree (mismatch), and a split
 * by parity with collectives running concurrently on both halves. The full suite is tests/comm.
 */
#include "check.h"
#include "thread_ranks.h"
#include "zero/comm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------ data */

/* Element i of rank k's data: values whose sums round, so the rank order matters. */
static float gen(int k, size_t i, int salt) {
    int v = (int)((k * 131 + (int)(i % 100003) * 7 + salt * 13) % 97) - 48;
    return (float)v * 0.37f + (float)k * 0.0103f + (float)(i % 11) * 1e-3f;
}

static size_t esize(zero_dtype_t dt) { return dt == ZERO_DTYPE_FP16 ? 2 : 4; }

static void put(void *buf, size_t i, zero_dtype_t dt, float v) {
    if (dt == ZERO_DTYPE_FP16)
        ((uint16_t *)buf)[i] = zero_fp32_to_fp16(v);
    else
        ((float *)buf)[i] = v;
}

/* The value as stored in dtype, read back as float. */
static float stored(zero_dtype_t dt, float v) {
    return dt == ZERO_DTYPE_FP16 ? zero_fp16_to_fp32(zero_fp32_to_fp16(v)) : v;
}

/* Naive rank-order reduction of element i of the n ranks' data (position pos in their buffer). */
static void ref_reduce(void *out, size_t i, zero_dtype_t dt, zero_op_t op, int n, size_t pos,
                       int salt) {
    float acc = stored(dt, gen(0, pos, salt));
    for (int k = 1; k < n; k++) {
        float v = stored(dt, gen(k, pos, salt));
        if (op == ZERO_OP_SUM)
            acc = acc + v;
        else if (v > acc)
            acc = v;
    }
    put(out, i, dt, acc);
}

static int same(const void *a, const void *b, size_t count, zero_dtype_t dt) {
    return memcmp(a, b, count * esize(dt)) == 0;
}

/* ------------------------------------------------------------------------------ collectives */

typedef struct {
    int n;
} coll_ctx_t;

static void test_all_reduce(int r, zero_comm_t *c, int n, zero_dtype_t dt, size_t count,
                            zero_op_t op, int in_place, int salt) {
    size_t es = esize(dt);
    char *send = malloc(count * es + 1), *recv = malloc(count * es + 1),
         *want = malloc(count * es + 1);
    for (size_t i = 0; i < count; i++) {
        put(send, i, dt, gen(r, i, salt));
        ref_reduce(want, i, dt, op, n, i, salt);
    }
    if (in_place) memcpy(recv, send, count * es);
    zero_status_t st = zero_comm_all_reduce(in_place ? recv : send, recv, count, dt, op, c);
    CHECK(st == ZERO_OK && same(recv, want, count, dt),
          "all_reduce n=%d rank %d %s count %zu op %s in_place %d: %s", n, r, zero_dtype_name(dt),
          count, zero_op_name(op), in_place, st ? zero_last_error() : "wrong values");
    free(send), free(recv), free(want);
}

static void test_reduce_scatter(int r, zero_comm_t *c, int n, zero_dtype_t dt, size_t count,
                                int in_place, int salt) {
    size_t es = esize(dt);
    char *send = malloc(n * count * es + 1), *out = malloc(count * es + 1),
         *want = malloc(count * es + 1);
    for (size_t i = 0; i < n * count; i++) put(send, i, dt, gen(r, i, salt));
    for (size_t i = 0; i < count; i++)
        ref_reduce(want, i, dt, ZERO_OP_SUM, n, (size_t)r * count + i, salt);
    void *recv = in_place ? send + (size_t)r * count * es : out;
    zero_status_t st = zero_comm_reduce_scatter(send, recv, count, dt, ZERO_OP_SUM, c);
    CHECK(st == ZERO_OK && same(recv, want, count, dt),
          "reduce_scatter n=%d rank %d %s count %zu in_place %d: %s", n, r, zero_dtype_name(dt),
          count, in_place, st ? zero_last_error() : "wrong values");
    free(send), free(out), free(want);
}

static void test_all_gather(int r, zero_comm_t *c, int n, zero_dtype_t dt, size_t count,
                            int in_place, int salt) {
    size_t es = esize(dt);
    char *own = malloc(count * es + 1), *recv = malloc(n * count * es + 1),
         *want = malloc(n * count * es + 1);
    for (size_t i = 0; i < count; i++) put(own, i, dt, gen(r, i, salt));
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++) put(want, (size_t)k * count + i, dt, gen(k, i, salt));
    memset(recv, 0x5a, n * count * es);
    const void *send = own;
    if (in_place) {
        memcpy(recv + (size_t)r * count * es, own, count * es);
        send = recv + (size_t)r * count * es;
    }
    zero_status_t st = zero_comm_all_gather(send, recv, count, dt, c);
    CHECK(st == ZERO_OK && same(recv, want, n * count, dt),
          "all_gather n=%d rank %d %s count %zu in_place %d: %s", n, r, zero_dtype_name(dt), count,
          in_place, st ? zero_last_error() : "wrong values");
    free(own), free(recv), free(want);
}

static void test_broadcast(int r, zero_comm_t *c, int n, zero_dtype_t dt, size_t count, int root,
                           int in_place, int salt) {
    size_t es = esize(dt);
    char *send = malloc(count * es + 1), *recv = malloc(count * es + 1),
         *want = malloc(count * es + 1);
    for (size_t i = 0; i < count; i++) {
        put(send, i, dt, gen(r, i, salt));
        put(want, i, dt, gen(root, i, salt));
    }
    memset(recv, 0x33, count * es);
    if (in_place) memcpy(recv, send, count * es);
    zero_status_t st = zero_comm_broadcast(in_place ? recv : send, recv, count, dt, root, c);
    CHECK(st == ZERO_OK && same(recv, want, count, dt),
          "broadcast n=%d rank %d root %d %s count %zu in_place %d: %s", n, r, root,
          zero_dtype_name(dt), count, in_place, st ? zero_last_error() : "wrong values");
    free(send), free(recv), free(want);
}

static void test_all_to_all(int r, zero_comm_t *c, int n, zero_dtype_t dt, size_t count, int salt) {
    size_t es = esize(dt);
    char *send = malloc(n * count * es + 1), *recv = malloc(n * count * es + 1),
         *want = malloc(n * count * es + 1);
    for (size_t i = 0; i < n * count; i++) put(send, i, dt, gen(r, i, salt));
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < count; i++)
            put(want, (size_t)k * count + i, dt, gen(k, (size_t)r * count + i, salt));
    zero_status_t st = zero_comm_all_to_all(send, recv, count, dt, c);
    CHECK(st == ZERO_OK && same(recv, want, n * count, dt),
          "all_to_all n=%d rank %d %s count %zu: %s", n, r, zero_dtype_name(dt), count,
          st ? zero_last_error() : "wrong values");
    free(send), free(recv), free(want);
}

/* Elements rank i sends to rank j (0 included). */
static size_t a2av_count(int i, int j, int salt) { return (size_t)((i * 3 + j * 5 + salt) % 6); }

static void test_all_to_allv(int r, zero_comm_t *c, int n, zero_dtype_t dt, int salt) {
    size_t es = esize(dt), sc[16], sd[16], rc[16], rd[16], stot = 0, rtot = 0;
    /* Send blocks packed in reverse rank order with one-element gaps; receive blocks in order. */
    for (int j = n - 1; j >= 0; j--) {
        sc[j] = a2av_count(r, j, salt);
        sd[j] = stot + 1;
        stot += sc[j] + 1;
    }
    for (int j = 0; j < n; j++) {
        rc[j] = a2av_count(j, r, salt);
        rd[j] = rtot;
        rtot += rc[j];
    }
    char *send = malloc(stot * es + 1), *recv = malloc(rtot * es + 1),
         *want = malloc(rtot * es + 1);
    for (int j = 0; j < n; j++)
        for (size_t t = 0; t < sc[j]; t++)
            put(send, sd[j] + t, dt, gen(r, (size_t)j * 100 + t, salt));
    for (int j = 0; j < n; j++)
        for (size_t t = 0; t < rc[j]; t++)
            put(want, rd[j] + t, dt, gen(j, (size_t)r * 100 + t, salt));
    zero_status_t st = zero_comm_all_to_allv(send, sc, sd, recv, rc, rd, dt, c);
    CHECK(st == ZERO_OK && same(recv, want, rtot, dt), "all_to_allv n=%d rank %d %s: %s", n, r,
          zero_dtype_name(dt), st ? zero_last_error() : "wrong values");
    free(send), free(recv), free(want);
}

static void collectives_rank(zero_comm_t *c, int r, void *ctx) {
    int n = ((coll_ctx_t *)ctx)->n;
    const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_FP16};
    const size_t counts[] = {0, 1, 3, 7, 1000, 4099};
    int salt = 0;
    for (size_t d = 0; d < 2; d++) {
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t count = counts[ci];
            for (int ip = 0; ip < 2; ip++) {
                salt++;
                test_all_reduce(r, c, n, dts[d], count, ZERO_OP_SUM, ip, salt);
                test_all_reduce(r, c, n, dts[d], count, ZERO_OP_MAX, ip, salt);
                test_reduce_scatter(r, c, n, dts[d], count, ip, salt);
                test_all_gather(r, c, n, dts[d], count, ip, salt);
                test_broadcast(r, c, n, dts[d], count, (int)(count + ip) % n, ip, salt);
            }
            test_all_to_all(r, c, n, dts[d], count, salt);
            test_all_to_allv(r, c, n, dts[d], salt);
            CHECK(zero_comm_barrier(c) == ZERO_OK, "barrier n=%d rank %d: %s", n, r,
                  zero_last_error());
        }
    }
    /* Non-blocking: two requests in flight, completed in posting order. */
    float a[5], b[5], want_a[5], want_b[5];
    for (int i = 0; i < 5; i++) {
        a[i] = gen(r, (size_t)i, 900);
        b[i] = gen(r, (size_t)i, 901);
        ref_reduce(want_a, (size_t)i, ZERO_DTYPE_FP32, ZERO_OP_SUM, n, (size_t)i, 900);
        ref_reduce(want_b, (size_t)i, ZERO_DTYPE_FP32, ZERO_OP_SUM, n, (size_t)i, 901);
    }
    zero_comm_request_t *ra, *rb;
    zero_status_t s1 = zero_comm_all_reduce_post(a, a, 5, ZERO_DTYPE_FP32, ZERO_OP_SUM, c, &ra);
    zero_status_t s2 = zero_comm_all_reduce_post(b, b, 5, ZERO_DTYPE_FP32, ZERO_OP_SUM, c, &rb);
    if (!s1) s1 = zero_comm_wait(ra);
    if (!s2) s2 = zero_comm_wait(rb);
    CHECK(!s1 && !s2 && !memcmp(a, want_a, sizeof a) && !memcmp(b, want_b, sizeof b),
          "non-blocking all_reduce n=%d rank %d", n, r);
}

static void test_collectives(int n) {
    zero_comm_t *comms[16];
    zero_status_t st = zero_comm_threads_init_all(n, comms, NULL);
    CHECK(st == ZERO_OK, "init_all(%d): %s", n, zero_last_error());
    if (st) return;
    for (int r = 0; r < n; r++)
        CHECK(zero_comm_rank(comms[r]) == r && zero_comm_size(comms[r]) == n &&
                  zero_comm_backend(comms[r]) == ZERO_BACKEND_THREADS,
              "rank/size of comm %d", r);
    coll_ctx_t ctx = {n};
    thread_ranks_run(n, comms, collectives_rank, &ctx);
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
}

/* ------------------------------------------------------------------------------ timeout */

typedef struct {
    int n;
    atomic_int returned; /* ranks 0..n-2 that came back from the timed-out call */
} timeout_ctx_t;

static void timeout_rank(zero_comm_t *c, int r, void *p) {
    timeout_ctx_t *t = p;
    float buf[64] = {0};
    char expect[64];
    snprintf(expect, sizeof expect, "rank(s) %d did not arrive", t->n - 1);
    if (r == t->n - 1) {
        /* Never joins the all_reduce. After the others gave up, a late call fails, not hangs. */
        while (atomic_load(&t->returned) < t->n - 1)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        zero_status_t st = zero_comm_all_reduce(buf, buf, 64, ZERO_DTYPE_FP32, ZERO_OP_SUM, c);
        CHECK(st == ZERO_ERR_TIMEOUT || st == ZERO_ERR_COMM_FAILED, "late rank %d: got %s (%s)", r,
              zero_status_str(st), zero_last_error());
        return;
    }
    double t0 = zero_time_now();
    zero_status_t st = zero_comm_all_reduce(buf, buf, 64, ZERO_DTYPE_FP32, ZERO_OP_SUM, c);
    double waited = zero_time_now() - t0;
    atomic_fetch_add(&t->returned, 1);
    CHECK(st == ZERO_ERR_TIMEOUT && strstr(zero_last_error(), expect) &&
              strstr(zero_last_error(), "all_reduce of 64 fp32 elements"),
          "timeout rank %d: got %s (%s)", r, zero_status_str(st), zero_last_error());
    CHECK(waited > 0.5 && waited < 10.0, "timeout rank %d waited %.2f s", r, waited);
    st = zero_comm_barrier(c);
    CHECK(st == ZERO_ERR_COMM_FAILED, "after timeout rank %d: got %s", r, zero_status_str(st));
}

static void test_timeout(int n) {
    zero_comm_t *comms[16];
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 1.0;
    if (zero_comm_threads_init_all(n, comms, &p)) {
        CHECK(0, "init_all: %s", zero_last_error());
        return;
    }
    timeout_ctx_t t = {.n = n};
    atomic_init(&t.returned, 0);
    thread_ranks_run(n, comms, timeout_rank, &t);
    for (int r = n - 1; r >= 0; r--) zero_comm_free(comms[r]);
}

/* ------------------------------------------------------------------------------ mismatch */

static void mismatch_rank(zero_comm_t *c, int r, void *p) {
    int n = *(int *)p;
    float buf[32] = {0};
    size_t count = r == n - 1 ? 17 : 16;
    zero_status_t st = zero_comm_all_reduce(buf, buf, count, ZERO_DTYPE_FP32, ZERO_OP_SUM, c);
    char expect[96];
    snprintf(expect, sizeof expect, "all_reduce: rank %d passed count 17 but rank 0 passed 16",
             n - 1);
    CHECK(st == ZERO_ERR_MISMATCH && strstr(zero_last_error(), expect), "mismatch rank %d: %s (%s)",
          r, zero_status_str(st), zero_last_error());
}

static void a2av_mismatch_rank(zero_comm_t *c, int r, void *p) {
    int n = *(int *)p;
    size_t sc[16], sd[16], rc[16], rd[16];
    float send[64] = {0}, recv[64];
    for (int j = 0; j < n; j++) sc[j] = rc[j] = 2, sd[j] = rd[j] = 2 * (size_t)j;
    if (r == 1) rc[0] = 3; /* rank 1 expects 3 from rank 0, which sends 2 */
    zero_status_t st = zero_comm_all_to_allv(send, sc, sd, recv, rc, rd, ZERO_DTYPE_FP32, c);
    CHECK(st == ZERO_ERR_MISMATCH &&
              strstr(zero_last_error(), "rank 0 sends 2 elements to rank 1 (send_counts[1]) but "
                                        "rank 1 expects 3 from rank 0"),
          "a2av mismatch rank %d: %s (%s)", r, zero_status_str(st), zero_last_error());
}

static void test_mismatch(int n, thread_rank_fn fn) {
    zero_comm_t *comms[16];
    if (zero_comm_threads_init_all(n, comms, NULL)) {
        CHECK(0, "init_all: %s", zero_last_error());
        return;
    }
    thread_ranks_run(n, comms, fn, &n);
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
}

/* ------------------------------------------------------------------------------ split */

typedef struct {
    int n;
    zero_comm_t *subs[16];
} split_ctx_t;

static void split_rank(zero_comm_t *c, int r, void *p) {
    split_ctx_t *s = p;
    int n = s->n, colour = r % 2, half = (n - colour + 1) / 2;
    zero_comm_t *sub = NULL;
    /* Key -r: the new ranks run in reverse parent order. */
    zero_status_t st = zero_comm_split(c, colour, -r, &sub);
    CHECK(st == ZERO_OK && sub, "split rank %d: %s", r, zero_last_error());
    if (!sub) return;
    s->subs[r] = sub;
    /* Members of my colour in new-rank order: parent ranks descending. */
    int members[16], m = 0;
    for (int k = n - 1; k >= 0; k--)
        if (k % 2 == colour) members[m++] = k;
    int new_rank = zero_comm_rank(sub);
    CHECK(zero_comm_size(sub) == half && m == half && members[new_rank] == r,
          "split rank %d: new rank %d size %d (expected size %d)", r, new_rank, zero_comm_size(sub),
          half);
    /* Concurrent all-reduces on both halves: data keyed by new rank, reduced in new-rank order. */
    for (int it = 0; it < 20; it++) {
        size_t count = 257 + (size_t)it * 31;
        float *buf = malloc(count * sizeof *buf), *want = malloc(count * sizeof *want);
        int salt = 500 + it + 1000 * colour;
        for (size_t i = 0; i < count; i++) {
            buf[i] = gen(new_rank, i, salt);
            ref_reduce(want, i, ZERO_DTYPE_FP32, ZERO_OP_SUM, half, i, salt);
        }
        st = zero_comm_all_reduce(buf, buf, count, ZERO_DTYPE_FP32, ZERO_OP_SUM, sub);
        CHECK(st == ZERO_OK && !memcmp(buf, want, count * sizeof *buf),
              "split all_reduce rank %d colour %d it %d: %s", r, colour, it,
              st ? zero_last_error() : "wrong values");
        free(buf), free(want);
    }
    /* The parent still works, and a split where rank 0 joins no group gives it NULL. */
    CHECK(zero_comm_barrier(c) == ZERO_OK, "parent barrier after split rank %d", r);
    zero_comm_t *sub2 = (zero_comm_t *)1;
    st = zero_comm_split(c, r == 0 ? ZERO_COMM_NO_COLOUR : 7, 0, &sub2);
    CHECK(st == ZERO_OK &&
              (r == 0 ? sub2 == NULL
                      : (sub2 && zero_comm_size(sub2) == n - 1 && zero_comm_rank(sub2) == r - 1)),
          "split with no colour rank %d: %s", r, zero_last_error());
    if (sub2) {
        CHECK(zero_comm_barrier(sub2) == ZERO_OK, "barrier on second split rank %d", r);
        zero_comm_free(sub2); /* freed by each rank at its own time */
    }
}

static void test_split(int n) {
    zero_comm_t *comms[16];
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 60;
    if (zero_comm_threads_init_all(n, comms, &p)) {
        CHECK(0, "init_all: %s", zero_last_error());
        return;
    }
    split_ctx_t s = {.n = n};
    thread_ranks_run(n, comms, split_rank, &s);
    /* Free parents first, then the sub-communicators in a scrambled order: the shared state goes
     * with its last member whichever it is. */
    for (int r = 0; r < n; r++) zero_comm_free(comms[r]);
    for (int r = 0; r < n; r++) zero_comm_free(s.subs[(r * 3 + 1) % n]);
}

int main(void) {
    CHECK(zero_comm_threads_init_all(0, NULL, NULL) == ZERO_ERR_INVALID_ARG, "init_all(0)");
    const int sizes[] = {1, 2, 3, 4, 5, 7, 8};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) test_collectives(sizes[i]);
    test_mismatch(3, mismatch_rank);
    test_mismatch(4, a2av_mismatch_rank);
    test_timeout(4);
    test_split(8);
    test_split(5);
    return check_report();
}
