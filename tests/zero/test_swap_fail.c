/* test_swap_fail.c — a swap file that cannot be read on one rank fails every rank at once, with a
 * named error, and never makes a wrong step.
 *
 * Each case trains a toy model one step on N ranks, flips one bit in a swap file of one rank (the
 * last), and goes on, with a collective timeout of 60 s; every rank must fail within FAST_S
 * seconds (a rank left waiting in a collective would take the 60 s: measured, so a hang fails the
 * test), the failing rank naming its file and a checksum, the others naming the failing rank.
 *  - param: stage 3, offload_param nvme, the file of unit 1's parameter shard. The next forward's
 *    fetch of unit 1 cannot read it: that rank gathers zeros in its place, every collective stays
 *    matched, and zero_engine_step fails on every rank before any update: the step count, every
 *    optimizer state and every parameter each rank holds read back the same bits as before
 *    (on the failing rank, unit 1's shard itself cannot be read any more: that read must fail
 *    naming the checksum).
 *  - param, both offloads: the same with the optimizer's states and the gradient accumulators on
 *    NVMe too.
 *  - gradient: both offloads and two micro-steps; unit 1's gradient accumulator file gets the
 *    flip between them, so the second micro-step's backward cannot read it back: that rank
 *    accumulates into zeros, its reduce-scatters go on, and the step fails on every rank before
 *    any update, nothing changed.
 *  - param short read: the same, the file truncated to nothing instead of a bit flipped (the
 *    read comes back short: ZERO_ERR_IO naming the file).
 *  - eval: the same flip, then only a forward (an evaluation: no step follows) and
 *    zero_engine_check, which must fail on every rank the same way, nothing changed.
 *  - fingerprint: the same flip, then zero_engine_fingerprint alone (it reads the shards itself):
 *    the same, on every rank.
 *  - stage 0: offload_optimizer nvme, the flip in unit 1's Adam m (its second sub-group, read
 *    during the update). Stage 0 all-gathers each unit's gradient inside the update: the failing
 *    rank posts the later units' gathers without the math, so every rank reaches the step's I/O
 *    agreement at once and fails (the update is not undone: units before the failing sub-group
 *    were updated; the engine is failed, so no later step, fetch or fingerprint runs on them).
 * Threads with 2 and 4 ranks; built with -DSWAP_FAIL_MPI the same cases run under mpirun, one
 * process per rank.
 */
#include "check.h"
#include "toy_units.h"
#include "zero/engine_internal.h"

#ifdef SWAP_FAIL_MPI
#include "mpi_harness.h"
#else
#include "ranks.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define UNITS 4
#define TIMEOUT_S 60.0
#define FAST_S 15.0 /* well under the collective timeout: nobody waited for it */
static const size_t sizes[UNITS] = {3000, 5000, 40, 700};

typedef enum {
    CASE_PARAM,
    CASE_BOTH,
    CASE_GRAD,
    CASE_SHORT,
    CASE_EVAL,
    CASE_FINGERPRINT,
    CASE_STAGE0,
    CASE_COUNT
} case_kind_t;
static const char *const case_names[] = {
    "param", "param, both offloads", "gradient", "param short read",
    "eval",  "fingerprint",          "stage 0"};

typedef struct fail_arg {
    case_kind_t kind;
    int bad; /* the rank whose file gets the flipped bit */
    const char *dir;
    zero_status_t st;
    double elapsed_s;
    char error[1024];
    char path[1400]; /* the flipped file (the bad rank) */
} fail_arg_t;

static zero_engine_params_t params_of(case_kind_t kind, const char *dir, zero_comm_t *comm) {
    zero_engine_params_t p = zero_engine_params_default();
    p.comm = comm;
    p.persistence_threshold_elems = 100; /* stage 3: unit 2 persistent */
    p.reduce_bucket_bytes = 1400 * 4;
    p.total_steps = 4;
    p.prefetch_bucket_elems = 6000;
    p.sub_group_elems = 2048; /* unit 1 spans several sub-groups */
    p.aio.block_size = 8192;
    zero_offload_params_t *o = kind == CASE_STAGE0 ? &p.offload_optimizer : &p.offload_param;
    p.stage = kind == CASE_STAGE0 ? 0 : 3;
    o->device = ZERO_OFFLOAD_NVME;
    snprintf(o->nvme_path, sizeof o->nvme_path, "%s", dir);
    o->buffer_count = 2;
    if (kind == CASE_GRAD) p.grad_accum_steps = 2;
    if (kind == CASE_BOTH || kind == CASE_GRAD) {
        p.offload_optimizer = p.offload_param;
        p.offload_optimizer.pipeline_read = p.offload_optimizer.pipeline_write = 1;
    }
    return p;
}

/* One micro-step m of step s: a forward (fetch, release in order) and unless forward_only a
 * backward (fetch, gradient, release in reverse). */
static zero_status_t micro_step(zero_engine_t *eng, int rank, int s, int m, int forward_only) {
    zero_status_t st = toy_forward(eng, UNITS);
    return st || forward_only ? st : toy_backward(eng, sizes, UNITS, rank, s, m);
}

/* Step s from its micro-step m0 on, and the engine's step; eval: a forward and
 * zero_engine_check; fingerprint: zero_engine_fingerprint alone. */
static zero_status_t step(zero_engine_t *eng, int rank, int s, case_kind_t kind, int m0) {
    uint64_t fp = 0;
    if (kind == CASE_FINGERPRINT) return zero_engine_fingerprint(eng, &fp);
    if (kind == CASE_EVAL) {
        zero_status_t st = micro_step(eng, rank, s, 0, 1);
        return st ? st : zero_engine_check(eng);
    }
    zero_status_t st = ZERO_OK;
    for (int m = m0; !st && m < zero_engine_params(eng)->grad_accum_steps; m++)
        st = micro_step(eng, rank, s, m, 0);
    return st ? st : zero_engine_step(eng, NULL);
}

/* What this rank holds, read back: every optimizer state and the parameters, per unit. */
#define ENTRIES (ZERO_ENGINE_STATE_COUNT + 1)
typedef struct held {
    zero_status_t st[UNITS][ENTRIES];
    uint64_t hash[UNITS][ENTRIES];
    int64_t steps;
} held_t;

static void read_held(zero_engine_t *eng, held_t *h) {
    memset(h, 0, sizeof *h);
    h->steps = zero_engine_step_count(eng);
    for (int u = 0; u < UNITS; u++)
        for (int s = 0; s < ENTRIES; s++) {
            size_t off = 0, n = 0;
            zero_status_t st;
            if (s < ZERO_ENGINE_STATE_COUNT) {
                st = zero_engine_state_range(eng, u, (zero_engine_state_t)s, &off, &n);
            } else if (zero_engine_params(eng)->stage == 3 && u != 2) {
                st = zero_engine_shard_range(eng, u, &off, &n);
            } else {
                st = ZERO_OK;
                n = zero_engine_unit_padded_count(eng, u);
            }
            float *buf = malloc((n ? n : 1) * sizeof *buf);
            if (!st && !buf) st = ZERO_ERR_OUT_OF_MEMORY;
            if (!st)
                st = s < ZERO_ENGINE_STATE_COUNT
                         ? zero_engine_state_read(eng, u, (zero_engine_state_t)s, off, n, buf)
                         : zero_engine_params_read(eng, u, off, n, buf);
            h->st[u][s] = st;
            h->hash[u][s] = st ? 0 : zero__hash_bytes(0xcbf29ce484222325ull, buf, n * sizeof *buf);
            free(buf);
        }
}

static void fail_rank(zero_comm_t *comm, void *argp) {
    fail_arg_t *a = argp;
    const int rank = zero_comm_rank(comm), n = zero_comm_size(comm);
    const char *what = case_names[a->kind];
    zero_engine_params_t p = params_of(a->kind, a->dir, comm);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st) st = step(eng, rank, 0, CASE_PARAM, 0);
    CHECK(st == ZERO_OK, "%s, %d ranks, rank %d: the first step: %s", what, n, rank,
          zero_last_error());
    held_t before, after;
    if (!st) read_held(eng, &before);
    int m0 = 0;
    if (!st && a->kind == CASE_GRAD) { /* the first micro-step, every write landed */
        st = micro_step(eng, rank, 1, 0, 0);
        if (!st) st = zero__pswap_sync(eng);
        m0 = 1;
    }
    if (!st && rank == a->bad) {
        const int param = a->kind != CASE_STAGE0;
        snprintf(a->path, sizeof a->path, "%s/zero-%ld-r%d-u1.%s", a->dir, (long)getpid(), rank,
                 a->kind == CASE_GRAD ? "grad.swp"
                 : param              ? "param.swp"
                                      : "swp");
        /* parameters: the shard's first page; stage 0: Adam m's third page, in the second
         * sub-group (the first ones were read ahead before the flip) */
        if (a->kind == CASE_SHORT ? truncate(a->path, 0) != 0
                                  : !flip_bit(a->path, param ? 100 : 4096 * 2 + 100))
            st = ZERO_ERR_IO;
        CHECK(st == ZERO_OK, "%s: cannot change %s", what, a->path);
    }
    if (st) { /* the others would wait for this rank: the case is lost anyway */
        a->st = st;
        zero_engine_free(eng);
        return;
    }
    const double t0 = zero_time_now();
    st = step(eng, rank, 1, a->kind, m0);
    a->elapsed_s = zero_time_now() - t0;
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    CHECK(st != ZERO_OK && a->elapsed_s < FAST_S,
          "%s, %d ranks, rank %d: the step after the flip gave %s after %.1f s (collective "
          "timeout %.0f s): %s",
          what, n, rank, zero_status_str(st), a->elapsed_s, TIMEOUT_S, a->error);
    const zero_status_t want = a->kind == CASE_SHORT ? ZERO_ERR_IO : ZERO_ERR_FORMAT;
    if (rank == a->bad)
        CHECK(st == want && strstr(a->error, a->path) &&
                  strstr(a->error, a->kind == CASE_SHORT ? "short read" : "checksum") &&
                  (a->kind == CASE_STAGE0 || strstr(a->error, "'u1'")),
              "%s, %d ranks, the failing rank %d: %s: %s", what, n, rank, zero_status_str(st),
              a->error);
    else {
        char who[32];
        snprintf(who, sizeof who, "rank %d", a->bad);
        CHECK(st == want && strstr(a->error, who) && strstr(a->error, "NVMe"),
              "%s, %d ranks, rank %d: %s: %s (expected it to name %s)", what, n, rank,
              zero_status_str(st), a->error, who);
    }
    /* failed for good: no further step, fetch or fingerprint, and fast (no collective) */
    uint64_t fp = 0;
    CHECK(zero_engine_step(eng, NULL) == st && zero_unit_fetch(eng, 1) == NULL &&
              zero_engine_fingerprint(eng, &fp) == st && zero_engine_check(eng) == st,
          "%s, %d ranks, rank %d: the engine goes on after the failure", what, n, rank);
    if (a->kind != CASE_STAGE0) { /* nothing updated: what the rank holds reads the same */
        read_held(eng, &after);
        CHECK(after.steps == before.steps, "%s, rank %d: step count %lld, before %lld", what, rank,
              (long long)after.steps, (long long)before.steps);
        for (int u = 0; u < UNITS; u++)
            for (int s = 0; s < ENTRIES; s++) {
                /* the failing rank's lost shard (with fp32 the master is the shard) */
                const int lost = rank == a->bad && u == 1 && a->kind != CASE_GRAD &&
                                 (s == ENTRIES - 1 || s == ZERO_ENGINE_STATE_MASTER);
                if (lost) {
                    CHECK(after.st[u][s] == want, "%s, rank %d: the flipped shard reads back (%s)",
                          what, rank, zero_status_str(after.st[u][s]));
                    continue;
                }
                CHECK(before.st[u][s] == ZERO_OK && after.st[u][s] == ZERO_OK &&
                          before.hash[u][s] == after.hash[u][s],
                      "%s, %d ranks, rank %d: unit %d %s changed by the failed step (%s)", what, n,
                      rank, u, s < ZERO_ENGINE_STATE_COUNT ? "state" : "parameters",
                      zero_status_str(after.st[u][s]));
            }
    }
    zero_engine_free(eng);
}

#ifdef SWAP_FAIL_MPI

int main(void) {
    zero_comm_params_t cp = zero_comm_params_default();
    cp.timeout_s = TIMEOUT_S;
    zero_comm_t *comm = mpi_harness_init(&cp);
    if (!comm) return 1;
    char dir[] = "/tmp/zero-swapfail-XXXXXX"; /* one per process */
    CHECK(mkdtemp(dir) != NULL, "cannot make a temporary directory");
    const int n = zero_comm_size(comm);
    for (int k = 0; k < CASE_COUNT; k++) {
        fail_arg_t a = {(case_kind_t)k, n - 1, dir, ZERO_OK, 0.0, "", ""};
        fail_rank(comm, &a);
        printf("%s, %d mpi ranks, rank %d: %.2f s: %s\n", case_names[k], n, mpi_rank, a.elapsed_s,
               a.error);
        fflush(stdout);
    }
    CHECK(swap_files_in(dir) == 0, "swap files left in %s", dir);
    rmdir(dir);
    return mpi_harness_finish(comm);
}

#else

int main(void) {
    char dir[] = "/tmp/zero-swapfail-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    for (int n = 2; n <= 4; n += 2)
        for (int k = 0; k < CASE_COUNT; k++) {
            fail_arg_t a[4];
            void *args[4];
            for (int r = 0; r < n; r++) {
                a[r] = (fail_arg_t){(case_kind_t)k, n - 1, dir, ZERO_OK, 0.0, "", ""};
                args[r] = &a[r];
            }
            CHECK(run_ranks(n, TIMEOUT_S, fail_rank, args) == ZERO_OK, "clique");
            for (int r = 0; r < n; r++)
                printf("%s, %d thread ranks, rank %d: %.2f s: %s\n", case_names[k], n, r,
                       a[r].elapsed_s, a[r].error);
            CHECK(swap_files_in(dir) == 0, "%s, %d ranks: swap files left", case_names[k], n);
        }
    rmdir(dir);
    return check_report();
}

#endif
