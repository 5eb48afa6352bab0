/* test_overlap.c — offload_optimizer.overlap_step: units updated during backward change no bit.
 *
 * A toy model of four units (three sharded, one small persistent) trains four steps at stage 3
 * with gradient_clipping 0, each micro-step a forward and a backward (toy_units.h), four ways:
 * the optimizer's states in RAM (the reference), on NVMe with overlap_step false (the step
 * updates every unit), on NVMe with overlap_step true (a sharded unit's update runs in the last
 * micro-step's backward at the first hook where its data is in: which units depends on the
 * disk's timing) and the same with the engine's overlap_wait (the hooks wait for the disk
 * instead, so exactly the final units are updated in backward). The weights fingerprint, every
 * optimizer state and parameter this rank holds (read back after the last step) and every step's
 * gradient norm must be equal bit for bit, on 1, 2 and 4 thread ranks, fp32 and bf16, 1 and 3
 * micro-steps, offload_param nvme on and off. With overlap_wait every step must have updated
 * the sharded units in backward (zero_step_stats_t units_in_backward: all three; with several
 * ranks all but unit 0, whose last reduce-scatter lands in the step), the runs without the key
 * none: a silent fall-back to the step's path fails here; on one rank with offload_param (the
 * accumulators on NVMe) it also moves fewer swap bytes per step (the last gradients are updated
 * from their slots, never written or read back). Then:
 *  - between the last backward and zero_engine_step the state calls refuse, naming the key;
 *  - an inf/NaN gradient on rank 1 of 2 fails that step on both ranks with the named error, and
 *    the engine refuses to go on; with overlap_step false the same step is skipped on both;
 *  - a read of rank 1's optimizer states failing in its update in backward fails the step on
 *    both ranks, rank 1 naming the file and rank 0 naming rank 1, and the engines stay failed;
 *  - overlap_step 2 is an error at zero_engine_init naming the key and the value.
 */
#include "check.h"
#include "ranks.h"
#include "toy_units.h"
#include "zero/engine_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 4
#define UNITS 4
static const size_t sizes[UNITS] = {3000, 5000, 40, 700}; /* unit 2 persistent */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct ocase {
    int micro, poff;
    zero_dtype_t dtype;
    int mode;        /* 0 RAM, 1 NVMe overlap_step false, 2 NVMe overlap_step true, 3 the same
                      * with overlap_wait (the updates in backward wait for the disk) */
    int nan_rank;    /* >= 0: that rank's gradient of unit 1 holds a NaN in step 1 */
    int eio_rank;    /* >= 0: that rank's read of unit 1's optimizer states fails in step 1 */
    const char *dir; /* the swap files' directory */
} ocase_t;

typedef struct rank_arg {
    const ocase_t *c;
    uint64_t fingerprint, state_hash, norm_hash;
    int in_backward[STEPS], skipped[STEPS];
    uint64_t read_bytes, written_bytes; /* the swap files' I/O of the last step */
    zero_status_t st, again;
    char error[1024], eio_path[1400];
    int failed_step;
} rank_arg_t;

static zero_engine_params_t params_of(const ocase_t *c, zero_comm_t *comm) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = 3;
    p.comm = comm;
    p.compute_dtype = c->dtype;
    p.grad_accum_steps = c->micro;
    p.grad_clip = 0.0f;
    p.persistence_threshold_elems = 100;
    p.reduce_bucket_bytes = 1400 * 4; /* units 0 and 1 direct, 2 and 3 packed */
    p.total_steps = STEPS;
    p.warmup_steps = 1;
    p.prefetch_bucket_elems = 6000;
    p.sub_group_elems = 2048; /* several sub-groups per unit */
    if (c->mode) {
        p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s", c->dir);
        p.offload_optimizer.buffer_count = 3;
        p.offload_optimizer.overlap_step = c->mode >= 2;
        p.aio.block_size = 8192;
        if (c->poff) {
            p.offload_param.device = ZERO_OFFLOAD_NVME;
            snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s", c->dir);
            p.offload_param.buffer_count = 2;
        }
    }
    return p;
}

/* toy_backward, with a NaN in unit 1's gradient on rank c->nan_rank at step 1 */
static zero_status_t backward(zero_engine_t *eng, const ocase_t *c, int rank, int s, int m) {
    const zero_dtype_t dt = zero_engine_params(eng)->compute_dtype;
    for (int u = UNITS - 1; u >= 0; u--) {
        if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
        void *g = zero_unit_grads(eng, u);
        if (!g) return ZERO_ERR_INTERNAL;
        for (size_t i = 0; i < sizes[u]; i++) {
            float x = toy_grad(rank, u, s, m, i);
            if (rank == c->nan_rank && s == 1 && u == 1 && i == 5) x = NAN;
            zero__narrow((char *)g + i * zero_dtype_size(dt), &x, 1, dt);
        }
        zero_status_t st = zero_unit_grads_done(eng, u);
        zero_unit_release(eng, u);
        if (st) return st;
    }
    return ZERO_OK;
}

/* Every state and the parameters this rank holds (unit 2 persistent), read back, hashed. */
static zero_status_t hash_states(zero_engine_t *eng, uint64_t *out) {
    return toy_hash_states(eng, UNITS, 2, out);
}

static void case_rank(zero_comm_t *comm, void *argp) {
    rank_arg_t *a = argp;
    const ocase_t *c = a->c;
    const int rank = comm ? zero_comm_rank(comm) : 0;
    zero_engine_params_t p = params_of(c, comm);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st && c->mode == 3) eng->overlap_wait = 1;
    a->norm_hash = 0xcbf29ce484222325ull;
    a->failed_step = -1;
    for (int s = 0; s < STEPS && !st; s++) {
        if (s == 1 && rank == c->eio_rank) { /* the next read of its first page */
            /* m written back as it is: a write spanning sub-groups drops the unit's staged
             * copies, so the next read of them comes from the file */
            size_t off, n;
            float *m = NULL;
            st = zero_engine_state_range(eng, 1, ZERO_ENGINE_STATE_ADAM_M, &off, &n);
            if (!st && !(m = malloc(n * sizeof *m))) st = ZERO_ERR_OUT_OF_MEMORY;
            if (!st) st = zero_engine_state_read(eng, 1, ZERO_ENGINE_STATE_ADAM_M, off, n, m);
            if (!st) st = zero_engine_state_write(eng, 1, ZERO_ENGINE_STATE_ADAM_M, off, n, m);
            free(m);
            zero__aio_file_t *f = zero__swap_file(eng, 1);
            if (!st && f) {
                snprintf(a->eio_path, sizeof a->eio_path, "%s", zero__aio_file_path(f));
                zero__aio_test_inject(f, ZERO__AIO_FAULT_EIO, 0);
            }
        }
        for (int m = 0; m < c->micro && !st; m++) {
            st = toy_forward(eng, UNITS);
            if (!st) st = backward(eng, c, rank, s, m);
        }
        if (st) break;
        if (s == 2 && c->mode == 3) { /* the window between the last backward and the step */
            float x;
            size_t off, n;
            zero_engine_shard_range(eng, 0, &off, &n);
            const zero_status_t r1 = zero_engine_params_read(eng, 0, off, 1, &x);
            const int named = strstr(zero_last_error(), "overlap_step") != NULL;
            const zero_status_t r2 =
                zero_engine_state_read(eng, 1, ZERO_ENGINE_STATE_ADAM_M, off, 1, &x);
            if (r1 != ZERO_ERR_INVALID_ARG || r2 != ZERO_ERR_INVALID_ARG || !named) {
                st = ZERO_ERR_INTERNAL;
                zero__error(st, "state calls in the window: %d, %d (named %d)", r1, r2, named);
                break;
            }
        }
        zero_step_stats_t ss;
        memset(&ss, 0, sizeof ss);
        st = zero_engine_step(eng, &ss);
        if (st) {
            a->failed_step = s;
            break;
        }
        a->in_backward[s] = ss.units_in_backward;
        a->skipped[s] = ss.skipped;
        a->norm_hash = zero__hash_bytes(a->norm_hash, &ss.grad_norm, sizeof ss.grad_norm);
    }
    if (!st) st = zero_engine_fingerprint(eng, &a->fingerprint);
    if (!st) st = hash_states(eng, &a->state_hash);
    if (!st) {
        zero_engine_report_t rep;
        zero_engine_get_report(eng, &rep);
        a->read_bytes = rep.swap_read_bytes_per_step;
        a->written_bytes = rep.swap_written_bytes_per_step;
    }
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", st ? zero_last_error() : "");
    a->again = st && eng ? zero_engine_step(eng, NULL) : ZERO_OK;
    zero_engine_free(eng);
}

static void run(int n, const ocase_t *c, rank_arg_t *a) {
    void *args[4];
    for (int r = 0; r < n; r++) {
        memset(&a[r], 0, sizeof a[r]);
        a[r].c = c;
        args[r] = &a[r];
    }
    if (n == 1) {
        case_rank(NULL, &a[0]);
        return;
    }
    CHECK(run_ranks(n, 30.0, case_rank, args) == ZERO_OK, "clique");
}

static void compare(int n, int micro, int poff, zero_dtype_t dt, const char *dir) {
    rank_arg_t res[4][4];
    for (int mode = 0; mode < 4; mode++) {
        const ocase_t c = {micro, poff, dt, mode, -1, -1, dir};
        run(n, &c, res[mode]);
    }
    pthread_mutex_lock(&lock);
    const char *what = dt == ZERO_DTYPE_FP32 ? "fp32" : "bf16";
    for (int r = 0; r < n; r++) {
        for (int mode = 0; mode < 4; mode++)
            CHECK(res[mode][r].st == ZERO_OK, "%d ranks %s micro %d poff %d mode %d rank %d: %s", n,
                  what, micro, poff, mode, r, res[mode][r].error);
        for (int mode = 1; mode < 4; mode++)
            CHECK(res[mode][r].fingerprint == res[0][r].fingerprint &&
                      res[mode][r].state_hash == res[0][r].state_hash &&
                      res[mode][r].norm_hash == res[0][r].norm_hash,
                  "%d ranks %s micro %d poff %d rank %d: mode %d fingerprint %016llx states "
                  "%016llx norms %016llx; RAM %016llx %016llx %016llx",
                  n, what, micro, poff, r, mode, (unsigned long long)res[mode][r].fingerprint,
                  (unsigned long long)res[mode][r].state_hash,
                  (unsigned long long)res[mode][r].norm_hash,
                  (unsigned long long)res[0][r].fingerprint,
                  (unsigned long long)res[0][r].state_hash,
                  (unsigned long long)res[0][r].norm_hash);
        for (int s = 0; s < STEPS; s++) {
            /* the sharded units (3, 1, 0) in backward, none without the key; with more than one
             * rank unit 0's last reduce-scatter lands at the step (no hook follows it) */
            const int want = n == 1 ? 3 : 2;
            CHECK(res[3][r].in_backward[s] == want && res[1][r].in_backward[s] == 0 &&
                      res[0][r].in_backward[s] == 0,
                  "%d ranks %s micro %d poff %d rank %d step %d: units in backward %d / %d / %d "
                  "(overlap / off / RAM), expected %d / 0 / 0",
                  n, what, micro, poff, r, s, res[3][r].in_backward[s], res[1][r].in_backward[s],
                  res[0][r].in_backward[s], want);
        }
    }
    /* with the gradient accumulators on NVMe (poff) a unit's last gradient is updated from its
     * slot in backward: neither written nor read back. One rank (every sharded unit updated in
     * backward): fewer bytes in all. */
    for (int r = 0; r < n && poff && n == 1; r++)
        CHECK(res[3][r].written_bytes + res[3][r].read_bytes <
                  res[1][r].written_bytes + res[1][r].read_bytes,
              "%d ranks %s micro %d rank %d: swap bytes read + written with overlap %llu + %llu, "
              "without %llu + %llu",
              n, what, micro, r, (unsigned long long)res[3][r].read_bytes,
              (unsigned long long)res[3][r].written_bytes, (unsigned long long)res[1][r].read_bytes,
              (unsigned long long)res[1][r].written_bytes);
    CHECK(swap_files_in(dir) == 0, "swap files left");
    pthread_mutex_unlock(&lock);
}

/* A NaN in rank 1's gradient: with overlap the step fails on both ranks, named, and the engine
 * refuses to go on; without it the step is skipped on both. */
static void nan_gradient(const char *dir, zero_dtype_t dt) {
    for (int mode = 1; mode < 3; mode++) {
        const ocase_t c = {1, 1, dt, mode == 2 ? 3 : 1, 1, -1, dir};
        rank_arg_t a[2];
        run(2, &c, a);
        for (int r = 0; r < 2; r++) {
            if (mode == 2) {
                CHECK(a[r].st == ZERO_ERR_INVALID_ARG && a[r].failed_step == 1 &&
                          strstr(a[r].error, "inf/NaN gradient") &&
                          strstr(a[r].error, "overlap_step false") && a[r].again == a[r].st,
                      "overlap, NaN on rank 1: rank %d: status %d at step %d ('%s'), again %d", r,
                      a[r].st, a[r].failed_step, a[r].error, a[r].again);
            } else {
                CHECK(a[r].st == ZERO_OK && a[r].skipped[1] == 1 && a[r].skipped[0] == 0,
                      "no overlap, NaN on rank 1: rank %d: status %d ('%s'), skipped %d", r,
                      a[r].st, a[r].error, a[r].skipped[1]);
            }
        }
    }
}

/* Rank 1 of 2 cannot read the first page of unit 1's optimizer states in step 1, whose staged
 * copies it dropped: its update in backward fails, rank 1 records it and its collectives go on,
 * and the step's control record fails the step on both ranks (rank 1 naming the file, rank 0
 * naming rank 1), neither waiting for the collective timeout; the engines refuse to go on. */
static void io_error(const char *dir) {
    const ocase_t c = {1, 1, ZERO_DTYPE_FP32, 3, -1, 1, dir};
    rank_arg_t a[2];
    run(2, &c, a);
    CHECK(a[1].eio_path[0] && a[1].st == ZERO_ERR_IO && a[1].failed_step == 1 &&
              strstr(a[1].error, a[1].eio_path) && strstr(a[1].error, "Input/output error") &&
              a[1].again == a[1].st,
          "I/O error on rank 1: rank 1: status %d at step %d ('%s', file '%s'), again %d", a[1].st,
          a[1].failed_step, a[1].error, a[1].eio_path, a[1].again);
    CHECK(a[0].st == ZERO_ERR_IO && a[0].failed_step == 1 &&
              strstr(a[0].error, "rank 1 could not read or write") && a[0].again == a[0].st,
          "I/O error on rank 1: rank 0: status %d at step %d ('%s'), again %d", a[0].st,
          a[0].failed_step, a[0].error, a[0].again);
    CHECK(swap_files_in(dir) == 0, "I/O error: swap files left");
}

static void bad_value(const char *dir) {
    const ocase_t c = {1, 0, ZERO_DTYPE_FP32, 2, -1, -1, dir};
    zero_engine_params_t p = params_of(&c, NULL);
    p.offload_optimizer.overlap_step = 2;
    zero_engine_t *eng = NULL;
    const zero_status_t st = zero_engine_init(&eng, &p);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "offload_optimizer.overlap_step 2"),
          "overlap_step 2: status %d '%s'", st, zero_last_error());
    zero_engine_free(eng);
}

int main(void) {
    char dir[] = "/tmp/zero-test-overlap-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const int ranks[] = {1, 2, 4};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            for (int micro = 1; micro <= 3; micro += 2)
                for (int poff = 0; poff < 2; poff++)
                    compare(ranks[k], micro, poff, d ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32, dir);
    nan_gradient(dir, ZERO_DTYPE_FP32);
    nan_gradient(dir, ZERO_DTYPE_BF16);
    io_error(dir);
    bad_value(dir);
    rmdir(dir);
    return check_report();
}
