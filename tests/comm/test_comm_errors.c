/* test_comm_errors.c — the failure paths of the communicator, on the threads backend.
 *
 *  - local argument errors (NULL buffers with elements to move, broadcast root out of range,
 *    invalid dtype or op, overlapping buffers, NULL count arrays, bad split colour) return
 *    ZERO_ERR_INVALID_ARG with a message naming the culprit, create no request, and leave the
 *    communicator usable;
 *  - ranks that disagree (count, dtype, op, broadcast root, which collective) get
 *    ZERO_ERR_MISMATCH on every rank, and ZERO_ERR_COMM_FAILED afterwards;
 *  - a rank that never arrives: the others get ZERO_ERR_TIMEOUT within a few seconds, the message
 *    names the operation, the count and the missing rank, later calls fail with
 *    ZERO_ERR_COMM_FAILED, and every communicator frees without hanging; also through
 *    post + test, and on a sub-communicator, which must inherit the parent's timeout.
 * Messages are checked by substrings (facts), never whole strings.
 */
#include "check.h"
#include "comm/coll_cases.h"
#include "thread_ranks.h"
#include "thread_ranks.h"
#include "zero/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has(const char *msg, const char *word) { return strstr(msg, word) != NULL; }

/* ------------------------------------------------------------------------------ local errors */

static void expect_invalid(zero_status_t st, const char *what, const char *word, int rank) {
    const char *msg = zero_last_error();
    CHECK(st == ZERO_ERR_INVALID_ARG, "rank %d: %s returned %s, expected invalid argument", rank,
          what, zero_status_str(st));
    if (word)
        CHECK(has(msg, word), "rank %d: %s: message '%s' does not mention '%s'", rank, what, msg,
              word);
}

static void local_errors(zero_comm_t *comm, int r, void *arg) {
    (void)arg;
    int n = zero_comm_size(comm);
    enum { C = 64 };
    float *a = calloc((size_t)C * (size_t)n * 2, sizeof(float));
    float *b = calloc((size_t)C * (size_t)n * 2, sizeof(float));
    zero_comm_request_t *req = (zero_comm_request_t *)(uintptr_t)1;

    expect_invalid(zero_comm_all_reduce(NULL, b, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
                   "all_reduce(send NULL)", "send", r);
    expect_invalid(zero_comm_all_reduce(a, NULL, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
                   "all_reduce(recv NULL)", "recv", r);
    CHECK(coll_has_number(zero_last_error(), C), "rank %d: message '%s' does not give the count %d",
          r, zero_last_error(), C);
    expect_invalid(zero_comm_reduce_scatter(NULL, b, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
                   "reduce_scatter(send NULL)", "send", r);
    expect_invalid(zero_comm_reduce_scatter(a, NULL, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
                   "reduce_scatter(recv NULL)", "recv", r);
    expect_invalid(zero_comm_all_gather(NULL, b, C, ZERO_DTYPE_FP32, comm), "all_gather(send NULL)",
                   "send", r);
    expect_invalid(zero_comm_all_gather(a, NULL, C, ZERO_DTYPE_FP32, comm), "all_gather(recv NULL)",
                   "recv", r);
    expect_invalid(zero_comm_all_to_all(NULL, b, C, ZERO_DTYPE_FP32, comm), "all_to_all(send NULL)",
                   "send", r);
    expect_invalid(zero_comm_all_to_all(a, NULL, C, ZERO_DTYPE_FP32, comm), "all_to_all(recv NULL)",
                   "recv", r);
    expect_invalid(zero_comm_broadcast(a, NULL, C, ZERO_DTYPE_FP32, 0, comm),
                   "broadcast(recv NULL)", "recv", r);
    if (r == 0)
        expect_invalid(zero_comm_broadcast(NULL, b, C, ZERO_DTYPE_FP32, 0, comm),
                       "broadcast(root's send NULL)", "send", r);
    /* Non-blocking: the error comes at post time and no request is created. */
    zero_status_t st =
        zero_comm_all_reduce_post(NULL, b, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm, &req);
    expect_invalid(st, "all_reduce_post(send NULL)", "send", r);
    CHECK(req == NULL, "rank %d: a refused post left a request behind", r);

    /* Broadcast root out of range: the message gives the root and the size. */
    expect_invalid(zero_comm_broadcast(a, b, C, ZERO_DTYPE_FP32, n, comm), "broadcast(root n)",
                   "root", r);
    CHECK(coll_has_number(zero_last_error(), n), "rank %d: message '%s' does not give root %d", r,
          zero_last_error(), n);
    expect_invalid(zero_comm_broadcast(a, b, C, ZERO_DTYPE_FP32, -1, comm), "broadcast(root -1)",
                   "root", r);

    /* Invalid enums. */
    expect_invalid(zero_comm_all_reduce(a, b, C, ZERO_DTYPE_COUNT, ZERO_OP_SUM, comm),
                   "all_reduce(dtype COUNT)", "dtype", r);
    expect_invalid(zero_comm_all_gather(a, b, C, (zero_dtype_t)-3, comm), "all_gather(dtype -3)",
                   "dtype", r);
    expect_invalid(zero_comm_all_reduce(a, b, C, ZERO_DTYPE_FP32, ZERO_OP_COUNT, comm),
                   "all_reduce(op COUNT)", "op", r);
    expect_invalid(zero_comm_reduce_scatter(a, b, C, ZERO_DTYPE_FP32, (zero_op_t)42, comm),
                   "reduce_scatter(op 42)", "42", r);

    /* Overlapping buffers that are not the documented in-place forms. */
    expect_invalid(zero_comm_all_reduce(a, a + 1, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
                   "all_reduce(recv = send + 1)", "overlap", r);
    if (r == 0) /* only the root's send is read, so only the root can see the overlap */
        expect_invalid(zero_comm_broadcast(a + 3, a, C, ZERO_DTYPE_FP32, 0, comm),
                       "broadcast(send = recv + 3)", "overlap", r);
    expect_invalid(zero_comm_all_to_all(a, a, C, ZERO_DTYPE_FP32, comm), "all_to_all(in place)",
                   "overlap", r);
    expect_invalid(zero_comm_all_to_all(a, a + C / 2, C, ZERO_DTYPE_FP32, comm),
                   "all_to_all(partial overlap)", "overlap", r);
    if (n > 1) {
        size_t wrong = (size_t)((r + 1) % n) * C; /* another rank's block */
        expect_invalid(
            zero_comm_reduce_scatter(a, a + wrong + 1, C, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm),
            "reduce_scatter(recv inside send, not the own block)", "overlap", r);
        expect_invalid(zero_comm_all_gather(a + wrong + 1, a, C, ZERO_DTYPE_FP32, comm),
                       "all_gather(send inside recv, not the own block)", "overlap", r);
    }
    size_t counts[16] = {0}, displs[16] = {0};
    for (int k = 0; k < n; k++) counts[k] = 4, displs[k] = (size_t)k * 4;
    expect_invalid(zero_comm_all_to_allv(a, NULL, displs, b, counts, displs, ZERO_DTYPE_FP32, comm),
                   "all_to_allv(send_counts NULL)", NULL, r);
    expect_invalid(
        zero_comm_all_to_allv(a, counts, displs, a, counts, displs, ZERO_DTYPE_FP32, comm),
        "all_to_allv(send == recv)", "overlap", r);
    zero_comm_t *sub = (zero_comm_t *)(uintptr_t)1;
    expect_invalid(zero_comm_split(comm, -5, 0, &sub), "split(colour -5)", "colour", r);
    CHECK(sub == NULL, "rank %d: a refused split left *out unset", r);

    /* None of that touched the communicator: a real collective still works. */
    int32_t in = r + 1, out = 0;
    st = zero_comm_all_reduce(&in, &out, 1, ZERO_DTYPE_INT32, ZERO_OP_SUM, comm);
    CHECK(st == ZERO_OK && out == n * (n + 1) / 2,
          "rank %d: all_reduce after refused calls: %s, %d (expected %d)", r, zero_status_str(st),
          out, n * (n + 1) / 2);
    free(a);
    free(b);
}

/* ------------------------------------------------------------------------------ mismatches */

typedef enum { MIS_COUNT, MIS_DTYPE, MIS_OP, MIS_ROOT, MIS_COLL, MIS_A2AV, MIS_COUNT_ } mismatch_t;
static const char *const mismatch_names[] = {"count",          "dtype",      "op",
                                             "broadcast root", "collective", "all_to_allv counts"};
_Static_assert(sizeof mismatch_names / sizeof mismatch_names[0] == MIS_COUNT_, "mismatch names");

typedef struct mismatch_arg {
    mismatch_t kind;
} mismatch_arg_t;

static void mismatch(zero_comm_t *comm, int r, void *arg) {
    mismatch_t kind = ((mismatch_arg_t *)arg)->kind;
    int odd = r == 1; /* rank 1 disagrees with everybody else */
    int32_t buf[256] = {0}, out[256 * 8];
    zero_status_t st;
    double t0 = zero_time_now();
    switch (kind) {
    case MIS_COUNT:
        st = zero_comm_all_reduce(buf, out, odd ? 101 : 100, ZERO_DTYPE_INT32, ZERO_OP_SUM, comm);
        break;
    case MIS_DTYPE: /* same element size, different type */
        st = zero_comm_all_reduce(buf, out, 100, odd ? ZERO_DTYPE_FP32 : ZERO_DTYPE_INT32,
                                  ZERO_OP_SUM, comm);
        break;
    case MIS_OP:
        st = zero_comm_all_reduce(buf, out, 100, ZERO_DTYPE_INT32, odd ? ZERO_OP_MAX : ZERO_OP_SUM,
                                  comm);
        break;
    case MIS_ROOT:
        st = zero_comm_broadcast(buf, out, 100, ZERO_DTYPE_INT32, odd ? 1 : 0, comm);
        break;
    case MIS_A2AV: {
        /* Rank 1 expects 5 elements from every rank, which send it 4. */
        size_t sc[8], sd[8], rc[8], rd[8];
        int n = zero_comm_size(comm);
        for (int k = 0; k < n; k++) {
            sc[k] = 4, sd[k] = (size_t)k * 8;
            rc[k] = odd ? 5 : 4, rd[k] = (size_t)k * 8;
        }
        st = zero_comm_all_to_allv(buf, sc, sd, out, rc, rd, ZERO_DTYPE_INT32, comm);
        break;
    }
    default:
        st = odd ? zero_comm_all_gather(buf, out, 100, ZERO_DTYPE_INT32, comm)
                 : zero_comm_all_reduce(buf, out, 100, ZERO_DTYPE_INT32, ZERO_OP_SUM, comm);
        break;
    }
    double dt = zero_time_now() - t0;
    CHECK(st == ZERO_ERR_MISMATCH, "rank %d: %s mismatch returned %s after %.2f s: %s", r,
          mismatch_names[kind], zero_status_str(st), dt, zero_last_error());
    if (st == ZERO_ERR_MISMATCH && kind == MIS_COUNT)
        CHECK(coll_has_number(zero_last_error(), 100) && coll_has_number(zero_last_error(), 101),
              "rank %d: count mismatch message '%s' does not give both counts", r,
              zero_last_error());
    st = zero_comm_barrier(comm);
    CHECK(st == ZERO_ERR_COMM_FAILED, "rank %d: barrier after a %s mismatch returned %s", r,
          mismatch_names[kind], zero_status_str(st));
}

/* ------------------------------------------------------------------------------ timeouts */

typedef struct timeout_arg {
    int missing;      /* the rank that never arrives */
    int use_test;     /* post + test instead of blocking */
    int late;         /* the missing rank calls the collective after the others timed out */
    zero_coll_t coll; /* all_reduce or all_gather */
    pthread_barrier_t done;
} timeout_arg_t;

#define TIMEOUT_S 1.5
#define TIMEOUT_COUNT 1009

static void check_timeout_message(int r, int missing, const char *op) {
    const char *msg = zero_last_error();
    CHECK(has(msg, op), "rank %d: timeout message '%s' does not name %s", r, msg, op);
    CHECK(coll_has_number(msg, TIMEOUT_COUNT),
          "rank %d: timeout message '%s' does not give count %d", r, msg, TIMEOUT_COUNT);
    CHECK(has(msg, "rank") && coll_has_number(msg, missing),
          "rank %d: timeout message '%s' does not name the missing rank %d", r, msg, missing);
}

static void timeout_rank(zero_comm_t *comm, int r, void *arg) {
    timeout_arg_t *ta = arg;
    zero_comm_set_timeout(comm, TIMEOUT_S);
    if (r != ta->missing) {
        int n = zero_comm_size(comm);
        float *send = calloc(TIMEOUT_COUNT, sizeof(float));
        float *recv = calloc((size_t)TIMEOUT_COUNT * (size_t)n, sizeof(float));
        double t0 = zero_time_now();
        zero_status_t st;
        if (ta->use_test) {
            zero_comm_request_t *req = NULL;
            st = ta->coll == ZERO_COLL_ALL_GATHER
                     ? zero_comm_all_gather_post(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, comm,
                                                 &req)
                     : zero_comm_all_reduce_post(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32,
                                                 ZERO_OP_SUM, comm, &req);
            int done = 0;
            while (st == ZERO_OK && !done && zero_time_now() - t0 < 30) {
                st = zero_comm_test(req, &done);
                if (!done) sched_yield();
            }
            if (st == ZERO_OK && !done) st = zero_comm_wait(req);
        } else {
            st = ta->coll == ZERO_COLL_ALL_GATHER
                     ? zero_comm_all_gather(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, comm)
                     : zero_comm_all_reduce(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM,
                                            comm);
        }
        double dt = zero_time_now() - t0;
        CHECK(st == ZERO_ERR_TIMEOUT, "rank %d: returned %s, expected timeout: %s", r,
              zero_status_str(st), zero_last_error());
        CHECK(dt >= TIMEOUT_S * 0.9 && dt < TIMEOUT_S + 4.0,
              "rank %d: the timeout came after %.2f s (timeout %.1f s)", r, dt, TIMEOUT_S);
        if (st == ZERO_ERR_TIMEOUT) check_timeout_message(r, ta->missing, zero_coll_name(ta->coll));
        /* The communicator is failed now: refused quickly, without waiting for anybody. */
        t0 = zero_time_now();
        st = zero_comm_all_reduce(send, recv, 4, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
        dt = zero_time_now() - t0;
        CHECK(st == ZERO_ERR_COMM_FAILED && dt < 1.0,
              "rank %d: all_reduce after the timeout returned %s after %.2f s", r,
              zero_status_str(st), dt);
        st = zero_comm_barrier(comm);
        CHECK(st == ZERO_ERR_COMM_FAILED, "rank %d: barrier after the timeout returned %s", r,
              zero_status_str(st));
        free(send);
        free(recv);
    }
    /* The missing rank waits here until the others have seen their timeout. */
    pthread_barrier_wait(&ta->done);
    if (r == ta->missing && ta->late) {
        /* Arriving late, after the others gave up: an error within about one timeout, never a
         * hang and never success (nobody else is in this collective any more). */
        float send[TIMEOUT_COUNT] = {0}, recv[TIMEOUT_COUNT * 8];
        double t0 = zero_time_now();
        zero_status_t st =
            ta->coll == ZERO_COLL_ALL_GATHER
                ? zero_comm_all_gather(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, comm)
                : zero_comm_all_reduce(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM,
                                       comm);
        double dt = zero_time_now() - t0;
        CHECK(st != ZERO_OK && dt < TIMEOUT_S + 4.0,
              "rank %d: arriving late returned %s after %.2f s: %s", r, zero_status_str(st), dt,
              zero_last_error());
    }
    pthread_barrier_wait(&ta->done); /* then every rank frees */
}

/* A sub-communicator inherits the timeout: in the second half of the clique, its last member
 * never arrives, and the others must time out after ~TIMEOUT_S, not the 300 s default. */
static void split_timeout_rank(zero_comm_t *comm, int r, void *arg) {
    timeout_arg_t *ta = arg;
    int n = zero_comm_size(comm);
    zero_comm_set_timeout(comm, TIMEOUT_S);
    zero_comm_t *sub = NULL;
    int colour = r < n / 2 ? 0 : 1;
    zero_status_t st = zero_comm_split(comm, colour, r, &sub);
    CHECK(st == ZERO_OK && sub, "rank %d: split: %s", r, zero_last_error());
    if (sub && colour == 1 && r != n - 1) {
        float send[TIMEOUT_COUNT] = {0}, recv[TIMEOUT_COUNT];
        double t0 = zero_time_now();
        st = zero_comm_all_reduce(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, sub);
        double dt = zero_time_now() - t0;
        CHECK(st == ZERO_ERR_TIMEOUT && dt < TIMEOUT_S + 4.0,
              "rank %d: sub-communicator returned %s after %.2f s (timeout %.1f s inherited)", r,
              zero_status_str(st), dt, TIMEOUT_S);
        if (st == ZERO_ERR_TIMEOUT) check_timeout_message(r, zero_comm_size(sub) - 1, "all_reduce");
    }
    pthread_barrier_wait(&ta->done);
    pthread_barrier_wait(&ta->done); /* the same barrier count as timeout_rank */
    zero_comm_free(sub);
}

/* ------------------------------------------------------------------------------ main */

static void run_clique_timed(const char *label, int n, thread_rank_fn fn, void *arg, double limit) {
    check_label = label;
    double t0 = zero_time_now();
    zero_status_t st = thread_ranks_clique(n, 5.0, fn, arg); /* a missed mismatch fails in 5 s */
    double dt = zero_time_now() - t0;
    CHECK(st == ZERO_OK, "%s: clique of %d could not be created", label, n);
    CHECK(dt < limit, "%s: took %.2f s including free (limit %.0f s)", label, dt, limit);
    printf("%-40s %.2f s\n", label, dt);
    fflush(stdout);
}

int main(void) {
    const int local_sizes[] = {1, 3, 4};
    for (size_t i = 0; i < 3; i++) {
        char label[64];
        snprintf(label, sizeof label, "local argument errors n=%d", local_sizes[i]);
        run_clique_timed(label, local_sizes[i], local_errors, NULL, 20);
    }
    for (int k = 0; k < MIS_COUNT_; k++) {
        const int sizes[] = {2, 4};
        for (int i = 0; i < 2; i++) {
            char label[64];
            snprintf(label, sizeof label, "%s mismatch n=%d", mismatch_names[k], sizes[i]);
            mismatch_arg_t ma = {(mismatch_t)k};
            run_clique_timed(label, sizes[i], mismatch, &ma, 20);
        }
    }
    const struct {
        int n, use_test;
        zero_coll_t coll;
        int missing, late;
    } tcases[] = {{4, 0, ZERO_COLL_ALL_REDUCE, 3, 0},
                  {3, 1, ZERO_COLL_ALL_GATHER, 2, 1},
                  {2, 1, ZERO_COLL_ALL_REDUCE, 1, 0},
                  {5, 0, ZERO_COLL_ALL_REDUCE, 2, 1}};
    for (size_t i = 0; i < sizeof tcases / sizeof tcases[0]; i++) {
        timeout_arg_t ta = {.missing = tcases[i].missing,
                            .use_test = tcases[i].use_test,
                            .coll = tcases[i].coll,
                            .late = tcases[i].late};
        pthread_barrier_init(&ta.done, NULL, (unsigned)tcases[i].n);
        char label[64];
        snprintf(label, sizeof label, "timeout %s n=%d missing %d%s %s",
                 zero_coll_name(tcases[i].coll), tcases[i].n, tcases[i].missing,
                 tcases[i].late ? " (late)" : "", tcases[i].use_test ? "post+test" : "blocking");
        run_clique_timed(label, tcases[i].n, timeout_rank, &ta, 15);
        pthread_barrier_destroy(&ta.done);
    }
    {
        timeout_arg_t ta = {0};
        pthread_barrier_init(&ta.done, NULL, 6);
        run_clique_timed("timeout inherited by split n=6", 6, split_timeout_rank, &ta, 10);
        pthread_barrier_destroy(&ta.done);
    }
    return check_report();
}
