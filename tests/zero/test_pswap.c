/* test_pswap.c — stage 3's parameter shards on NVMe (offload_param device nvme) change no bit.
 *
 * A toy model of four units (two large ones sharded and offloaded, one small persistent, one
 * more sharded) trains four steps, each micro-step a forward (fetch, release in order) and a
 * backward (fetch, gradient, release in reverse), so the recorded schedule drives the prefetch
 * and the read-ahead from the third step on. The same run with the shards in RAM is the
 * reference: the weights fingerprint, every optimizer state and every parameter this rank holds
 * (zero_engine_state_read, zero_engine_params_read: the checkpoint's paths) must be equal bit for
 * bit, with offload_param alone and with offload_optimizer too (then the gradient accumulators
 * live in swap files as well), on 1, 2 and 4 thread ranks, fp32 and bf16, 1 and 3 micro-steps,
 * with 1, 2 and 5 resident buffers. Then:
 *  - the report: the offloaded shards gone from the params category (and with both offloads the
 *    sharded units' accumulators from the grads one), the buffers and checksums in the offload
 *    one as their closed form, the files' bytes and each step's writes as the closed form, the
 *    estimate the same, and no file left after zero_engine_free;
 *  - a state written into an offloaded engine (a checkpoint's load) is read back the same, and
 *    training on from it equals training on in RAM;
 *  - a bit flipped in a parameter swap file is a named error (the file, a checksum) at the next
 *    fetch and fails the step, not a wrong step; on 2 ranks the other rank fails that step too,
 *    naming rank 1 (test_swap_fail.c: timing, more ranks, MPI, nothing changed); a bit flipped
 *    in a gradient accumulator's file fails the step that reads it, naming the file and unit;
 *  - an I/O error injected into a parameter read, a parameter write or an accumulator write
 *    fails its step naming the file, and an accumulator write failing on one of 2 ranks fails
 *    the step on both;
 *  - bad settings (stage 2 with device nvme, buffer_count 0, an empty or missing nvme_path) are
 *    named errors at zero_engine_init.
 */
#include "check.h"
#include "ranks.h"
#include "toy_units.h"
#include "zero/engine_internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS 4
#define UNITS 4
static const size_t sizes[UNITS] = {3000, 5000, 40, 700};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct pcase {
    int micro, buffers, both;
    zero_dtype_t dtype;
    const char *dir; /* NULL: everything in RAM */
} pcase_t;

typedef struct rank_arg {
    const pcase_t *c;
    uint64_t fingerprint;
    uint64_t state_hash; /* every state and parameter this rank holds, read back */
    zero_engine_report_t report;
    zero_status_t st;
    char error[1024];
} rank_arg_t;

static zero_engine_params_t params_of(const pcase_t *c, zero_comm_t *comm) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = 3;
    p.comm = comm;
    p.compute_dtype = c->dtype;
    p.grad_accum_steps = c->micro;
    p.persistence_threshold_elems = 100; /* unit 2 persistent */
    p.reduce_bucket_bytes = 1400 * 4;
    p.total_steps = STEPS;
    p.prefetch_bucket_elems = 6000; /* a unit or two ahead */
    p.sub_group_elems = 2048;
    if (c->dir) {
        p.offload_param.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s", c->dir);
        p.offload_param.buffer_count = c->buffers;
        p.aio.block_size = 8192; /* several pieces per request */
        if (c->both) {
            p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
            snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s",
                     c->dir);
            p.offload_optimizer.buffer_count = 2;
        }
    }
    return p;
}

static zero_memory_estimate_t estimate(const pcase_t *c, int n) {
    zero_tensor_desc_t t[UNITS][2];
    zero_unit_decl_t d[UNITS];
    for (int u = 0; u < UNITS; u++) {
        toy_unit_tensors(sizes[u], t[u]);
        d[u] = (zero_unit_decl_t){t[u], 2, 1, 0, 1};
    }
    zero_engine_params_t p = params_of(c, NULL);
    zero_memory_estimate_t e;
    memset(&e, 0, sizeof e);
    CHECK(zero_engine_estimate_memory(&p, n, d, UNITS, &e) == ZERO_OK, "estimate");
    return e;
}

/* micro-step m of step s: forward then backward */
static zero_status_t micro_step(zero_engine_t *eng, int rank, int s, int m) {
    zero_status_t st = toy_forward(eng, UNITS);
    return st ? st : toy_backward(eng, sizes, UNITS, rank, s, m);
}

/* steps [s0, s1) of training */
static zero_status_t train(zero_engine_t *eng, int rank, int micro, int s0, int s1) {
    for (int s = s0; s < s1; s++) {
        for (int m = 0; m < micro; m++) {
            zero_status_t st = micro_step(eng, rank, s, m);
            if (st) return st;
        }
        zero_status_t st = zero_engine_step(eng, NULL);
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
    zero_engine_params_t p = params_of(a->c, comm);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st) st = train(eng, comm ? zero_comm_rank(comm) : 0, a->c->micro, 0, STEPS);
    if (!st) st = zero_engine_fingerprint(eng, &a->fingerprint);
    if (!st) st = hash_states(eng, &a->state_hash);
    if (!st) zero_engine_get_report(eng, &a->report);
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", st ? zero_last_error() : "");
    zero_engine_free(eng);
}

static void run(int n, const pcase_t *c, rank_arg_t *a) {
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

static size_t padded_of(int u, int n) {
    const size_t span = (sizes[u] - 7 + 15) / 16 * 16 + 16, q = (size_t)n * 16;
    return (span + q - 1) / q * q;
}

static uint64_t pages(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

static void compare(int n, const pcase_t *c) {
    rank_arg_t ram[4], swp[4];
    pcase_t rc = *c;
    rc.dir = NULL;
    run(n, &rc, ram);
    run(n, c, swp);
    pthread_mutex_lock(&lock);
    const char *what = c->dtype == ZERO_DTYPE_FP32 ? "fp32" : "bf16";
    const size_t ce = c->dtype == ZERO_DTYPE_FP32 ? 4 : 2;
    for (int r = 0; r < n; r++) {
        CHECK(ram[r].st == ZERO_OK && swp[r].st == ZERO_OK,
              "%d ranks, %s, %d micro, %d buffers, both %d: rank %d: RAM '%s', swap '%s'", n, what,
              c->micro, c->buffers, c->both, r, ram[r].error, swp[r].error);
        CHECK(swp[r].fingerprint == ram[r].fingerprint && swp[r].state_hash == ram[r].state_hash,
              "%d ranks, %s, %d micro, %d buffers, both %d: rank %d: fingerprint %016llx / "
              "%016llx, states %016llx / %016llx (swap / RAM)",
              n, what, c->micro, c->buffers, c->both, r, (unsigned long long)swp[r].fingerprint,
              (unsigned long long)ram[r].fingerprint, (unsigned long long)swp[r].state_hash,
              (unsigned long long)ram[r].state_hash);
        const zero_engine_report_t *rep = &swp[r].report;
        /* closed forms: the parameter files hold each sharded unit's shard in whole pages; the
         * buffers are buffer_count of the largest; the persistent unit alone stays in params */
        uint64_t pdisk = 0, maxb = 0, odisk = 0;
        for (int u = 0; u < UNITS; u++) {
            const size_t P = padded_of(u, n), S = P / (size_t)n;
            if (u != 2) {
                pdisk += pages(S * ce);
                maxb = pages(S * ce) > maxb ? pages(S * ce) : maxb;
            }
            odisk += (uint64_t)(c->dtype == ZERO_DTYPE_FP32 ? 2 : 3) * pages(S * 4);
        }
        /* both offloads: the sharded units' gradient accumulators in files too, in RAM only
         * the persistent unit's (and the pool of working buffers) */
        const size_t ae = zero_dtype_size(params_of(c, NULL).grad_accum_dtype);
        uint64_t gdisk = 0, acc_ram = 0;
        for (int u = 0; u < UNITS; u++) {
            const size_t S = padded_of(u, n) / (size_t)n;
            if (c->both && u != 2)
                gdisk += pages(S * ae);
            else
                acc_ram += S * ae;
        }
        CHECK(rep->memory_bytes[ZERO_MEM_GRADS] == rep->memory_theory_bytes[ZERO_MEM_GRADS] &&
                  rep->memory_bytes[ZERO_MEM_GRADS] == acc_ram + rep->grad_pool_bytes,
              "%d ranks %s rank %d: grads %zu (theory %zu), expected accumulators %llu + pool %zu",
              n, what, r, rep->memory_bytes[ZERO_MEM_GRADS],
              rep->memory_theory_bytes[ZERO_MEM_GRADS], (unsigned long long)acc_ram,
              rep->grad_pool_bytes);
        const uint64_t want_disk = pdisk + (c->both ? odisk + gdisk : 0);
        const size_t want_params = padded_of(2, n) * ce;
        CHECK(rep->memory_bytes[ZERO_MEM_PARAMS] == want_params &&
                  rep->memory_theory_bytes[ZERO_MEM_PARAMS] == want_params,
              "%d ranks %s rank %d: params %zu (theory %zu), expected %zu", n, what, r,
              rep->memory_bytes[ZERO_MEM_PARAMS], rep->memory_theory_bytes[ZERO_MEM_PARAMS],
              want_params);
        CHECK(rep->memory_bytes[ZERO_MEM_OFFLOAD] == rep->memory_theory_bytes[ZERO_MEM_OFFLOAD] &&
                  rep->memory_bytes[ZERO_MEM_OFFLOAD] >=
                      (uint64_t)c->buffers * maxb + pdisk / 4096 * 4,
              "%d ranks %s rank %d: offload %zu (theory %zu, buffers and checksums %llu)", n, what,
              r, rep->memory_bytes[ZERO_MEM_OFFLOAD], rep->memory_theory_bytes[ZERO_MEM_OFFLOAD],
              (unsigned long long)((uint64_t)c->buffers * maxb + pdisk / 4096 * 4));
        if (!c->both)
            CHECK(rep->memory_bytes[ZERO_MEM_OFFLOAD] ==
                      (uint64_t)c->buffers * maxb + pdisk / 4096 * 4,
                  "%d ranks %s rank %d: offload %zu, expected %llu", n, what, r,
                  rep->memory_bytes[ZERO_MEM_OFFLOAD],
                  (unsigned long long)((uint64_t)c->buffers * maxb + pdisk / 4096 * 4));
        CHECK(rep->swap_disk_bytes == want_disk, "%d ranks %s rank %d: disk %llu, expected %llu", n,
              what, r, (unsigned long long)rep->swap_disk_bytes, (unsigned long long)want_disk);
        /* the last step read every sharded unit at least once and wrote each back once; each
         * gradient accumulator was written at least once (each micro-step) */
        CHECK(rep->swap_read_bytes_per_step >= pdisk &&
                  rep->swap_written_bytes_per_step >= pdisk + gdisk,
              "%d ranks %s rank %d: last step read %llu, wrote %llu (files %llu + %llu)", n, what,
              r, (unsigned long long)rep->swap_read_bytes_per_step,
              (unsigned long long)rep->swap_written_bytes_per_step, (unsigned long long)pdisk,
              (unsigned long long)gdisk);
        const zero_memory_estimate_t e = estimate(c, n);
        CHECK(e.disk_bytes == want_disk && e.bytes[ZERO_MEM_PARAMS] == want_params &&
                  e.bytes[ZERO_MEM_OFFLOAD] >= rep->memory_peak_bytes[ZERO_MEM_OFFLOAD],
              "%d ranks %s rank %d: estimate disk %llu (want %llu), params %zu (want %zu), "
              "offload %zu (peak %zu)",
              n, what, r, (unsigned long long)e.disk_bytes, (unsigned long long)want_disk,
              e.bytes[ZERO_MEM_PARAMS], want_params, e.bytes[ZERO_MEM_OFFLOAD],
              rep->memory_peak_bytes[ZERO_MEM_OFFLOAD]);
    }
    CHECK(swap_files_in(c->dir) == 0, "%s: swap files left after zero_engine_free", c->dir);
    pthread_mutex_unlock(&lock);
}

/* Train 2 steps in RAM, copy every state and parameter into a fresh offloaded engine (a
 * checkpoint's load), train 2 more on both: the same bits. One rank, bf16 (the master apart from
 * the parameters) and fp32 (the master is the offloaded shard). */
static void resume(const char *dir, zero_dtype_t dt) {
    const pcase_t rc = {1, 2, 1, dt, NULL}, sc = {1, 2, 1, dt, dir};
    zero_engine_params_t pr = params_of(&rc, NULL), ps = params_of(&sc, NULL);
    zero_engine_t *a = NULL, *b = NULL;
    zero_status_t st = zero_engine_init(&a, &pr);
    if (!st) st = toy_add_units(a, sizes, UNITS);
    if (!st) st = train(a, 0, 1, 0, 2);
    if (!st) st = zero_engine_init(&b, &ps);
    if (!st) st = toy_add_units(b, sizes, UNITS);
    for (int u = 0; !st && u < UNITS; u++)
        for (int s = 0; !st && s < ZERO_ENGINE_STATE_COUNT; s++) {
            size_t off, n;
            st = zero_engine_state_range(a, u, (zero_engine_state_t)s, &off, &n);
            float *buf = malloc(n * sizeof *buf);
            if (!st && !buf) st = ZERO_ERR_OUT_OF_MEMORY;
            if (!st) st = zero_engine_state_read(a, u, (zero_engine_state_t)s, off, n, buf);
            if (!st) st = zero_engine_state_write(b, u, (zero_engine_state_t)s, off, n, buf);
            free(buf);
        }
    if (!st) st = zero_engine_set_step_count(b, zero_engine_step_count(a));
    uint64_t ha = 0, hb = 0, fa = 0, fb = 0;
    if (!st) st = hash_states(a, &ha);
    if (!st) st = hash_states(b, &hb);
    CHECK(st == ZERO_OK && ha == hb, "resume %s: loaded states differ (%s)", zero_dtype_name(dt),
          st ? zero_last_error() : "");
    if (!st) st = train(a, 0, 1, 2, 4);
    if (!st) st = train(b, 0, 1, 2, 4);
    if (!st) st = zero_engine_fingerprint(a, &fa);
    if (!st) st = zero_engine_fingerprint(b, &fb);
    if (!st) st = hash_states(a, &ha);
    if (!st) st = hash_states(b, &hb);
    CHECK(st == ZERO_OK && fa == fb && ha == hb,
          "resume %s: after 2 more steps fingerprint %016llx / %016llx, states %016llx / %016llx "
          "(%s)",
          zero_dtype_name(dt), (unsigned long long)fb, (unsigned long long)fa,
          (unsigned long long)hb, (unsigned long long)ha, st ? zero_last_error() : "");
    zero_engine_free(a);
    zero_engine_free(b);
    CHECK(swap_files_in(dir) == 0, "resume: swap files left");
}

/* An engine of case c (on comm, NULL: one rank) with the toy units, trained steps [0, steps). */
static zero_status_t trained(const pcase_t *c, zero_comm_t *comm, int rank, int steps,
                             zero_engine_t **eng) {
    zero_engine_params_t p = params_of(c, comm);
    *eng = NULL;
    zero_status_t st = zero_engine_init(eng, &p);
    if (!st) st = toy_add_units(*eng, sizes, UNITS);
    if (!st) st = train(*eng, rank, 1, 0, steps);
    return st;
}

/* A bit flipped in unit 1's parameter file after a step: the next fetch of it fails naming the
 * file and a checksum, and so does the step. */
static void flipped_bit(const char *dir) {
    const pcase_t c = {1, 1, 0, ZERO_DTYPE_FP32, dir};
    zero_engine_t *eng = NULL;
    zero_status_t st = trained(&c, NULL, 0, 1, &eng);
    CHECK(st == ZERO_OK, "flip: training before the flip: %s", zero_last_error());
    char path[1400];
    snprintf(path, sizeof path, "%s/zero-%ld-r0-u1.param.swp", dir, (long)getpid());
    CHECK(flip_bit(path, 100), "flip: cannot change %s", path);
    if (!st) st = train(eng, 0, 1, 1, 2);
    CHECK(st != ZERO_OK && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "checksum") && strstr(zero_last_error(), "'u1'"),
          "flip: the step after a flipped bit gave %s: %s", zero_status_str(st), zero_last_error());
    CHECK(zero_engine_step(eng, NULL) == ZERO_ERR_FORMAT, "flip: the step goes on: %s",
          zero_last_error());
    zero_engine_free(eng);
    CHECK(swap_files_in(dir) == 0, "flip: swap files left");
}

/* Both offloads, one rank: a gradient accumulator rots on disk between backward and the step
 * (unit 3's, written first in backward and evicted by the later units): the step fails naming
 * the file and the unit, and the engine refuses to go on. */
static void flipped_grad_bit(const char *dir) {
    const pcase_t c = {1, 2, 1, ZERO_DTYPE_FP32, dir};
    zero_engine_t *eng = NULL;
    zero_status_t st = trained(&c, NULL, 0, 1, &eng);
    if (!st) st = micro_step(eng, 0, 1, 0);
    CHECK(st == ZERO_OK, "grad flip: training before the flip: %s", zero_last_error());
    char path[1400];
    snprintf(path, sizeof path, "%s/zero-%ld-r0-u3.grad.swp", dir, (long)getpid());
    CHECK(flip_bit(path, 100), "grad flip: cannot change %s", path);
    if (!st) st = zero_engine_step(eng, NULL);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "checksum") && strstr(zero_last_error(), "'u3'"),
          "grad flip: the step after a flipped bit gave %s: %s", zero_status_str(st),
          zero_last_error());
    CHECK(zero_engine_step(eng, NULL) == ZERO_ERR_FORMAT, "grad flip: the step goes on: %s",
          zero_last_error());
    zero_engine_free(eng);
    CHECK(swap_files_in(dir) == 0, "grad flip: swap files left");
}

/* An I/O error injected into one request of a swap file (the aio layer's test hook) on one
 * rank: the step it belongs to fails naming the file and the engine refuses to go on. Faults:
 * unit 1's parameter read at the next forward's fetch; unit 0's parameter write after the
 * step's update (found when a later shard's read-ahead takes its finished buffer: a read-ahead
 * that dropped the failure would let the step succeed); unit 3's accumulator write during
 * backward (found when its buffer is taken again). */
static void injected_fault(const char *dir, int grads, zero__aio_fault_t fault, int u) {
    const pcase_t c = {1, 2, 1, ZERO_DTYPE_FP32, dir};
    zero_engine_t *eng = NULL;
    zero_status_t st = trained(&c, NULL, 0, 2, &eng);
    CHECK(st == ZERO_OK, "fault %d/%d: training before it: %s", grads, (int)fault,
          zero_last_error());
    zero__aio_file_t *f = st ? NULL : zero__uswap_file(eng, grads, u);
    CHECK(f != NULL, "fault %d/%d: no swap file of unit %d", grads, (int)fault, u);
    if (!f) {
        zero_engine_free(eng);
        return;
    }
    char path[1400];
    snprintf(path, sizeof path, "%s", zero__aio_file_path(f));
    zero__aio_test_inject(f, fault, 0);
    st = train(eng, 0, 1, 2, 3);
    CHECK(st != ZERO_OK && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "Input/output error"),
          "fault %d/%d: the step gave %s: %s", grads, (int)fault, zero_status_str(st),
          zero_last_error());
    CHECK(zero_engine_step(eng, NULL) == ZERO_ERR_IO, "fault %d/%d: the engine goes on: %s", grads,
          (int)fault, zero_last_error());
    zero_engine_free(eng);
    CHECK(swap_files_in(dir) == 0, "fault %d/%d: swap files left", grads, (int)fault);
}

typedef struct flip_arg {
    const char *dir;
    int inject; /* 0: flip a bit in unit 1's parameters; 1: a write EIO of unit 3's gradient */
    zero_status_t st;
    char error[1024];
} flip_arg_t;

/* Two ranks; rank 1's file of unit 1 gets a flipped bit after a step: rank 1's next fetch of it
 * cannot read it (rank 1 gathers zeros in its place), and the step fails on both, rank 1 naming
 * the file, rank 0 naming rank 1, before the 2 s collective timeout: no rank trains on. */
static void flip_rank(zero_comm_t *comm, void *argp) {
    flip_arg_t *a = argp;
    const int rank = zero_comm_rank(comm);
    const pcase_t c = {1, 2, a->inject, ZERO_DTYPE_FP32, a->dir};
    zero_engine_t *eng = NULL;
    zero_status_t st = trained(&c, comm, rank, 1, &eng);
    if (!st && rank == 1 && a->inject) {
        zero__aio_file_t *f = zero__uswap_file(eng, 1, 3);
        if (f)
            zero__aio_test_inject(f, ZERO__AIO_FAULT_WRITE_EIO, 0);
        else
            st = ZERO_ERR_INTERNAL;
    } else if (!st && rank == 1) {
        char path[1400];
        snprintf(path, sizeof path, "%s/zero-%ld-r1-u1.param.swp", a->dir, (long)getpid());
        if (!flip_bit(path, 100)) st = ZERO_ERR_IO;
    }
    if (!st) st = train(eng, rank, 1, 1, 2);
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    zero_engine_free(eng);
}

/* inject 1: rank 1's write of an accumulator fails during backward: found when its buffer is
 * taken again, it is recorded as a lost read is, and the step fails on both ranks in the same
 * way, before the timeout. */
static void flipped_bit_ranks(const char *dir, int inject) {
    flip_arg_t a[2] = {{dir, inject, ZERO_OK, ""}, {dir, inject, ZERO_OK, ""}};
    void *args[2] = {&a[0], &a[1]};
    const char *file = inject ? "-r1-u3.grad.swp" : "-r1-u1.param.swp";
    const char *why = inject ? "Input/output error" : "checksum";
    const zero_status_t want = inject ? ZERO_ERR_IO : ZERO_ERR_FORMAT;
    CHECK(run_ranks(2, 2.0, flip_rank, args) == ZERO_OK, "clique");
    CHECK(a[1].st != ZERO_OK && strstr(a[1].error, file) && strstr(a[1].error, why),
          "%s, 2 ranks: rank 1 gave %s: %s", why, zero_status_str(a[1].st), a[1].error);
    CHECK(a[0].st == want && strstr(a[0].error, "rank 1") && strstr(a[0].error, "NVMe"),
          "%s, 2 ranks: rank 0 gave %s: %s", why, zero_status_str(a[0].st), a[0].error);
    printf("%s, 2 ranks: rank 0: %s\nrank 1: %s\n", why, a[0].error, a[1].error);
    CHECK(swap_files_in(dir) == 0, "%s, 2 ranks: swap files left", why);
}

static void bad_settings(const char *dir) {
    const pcase_t c = {1, 5, 0, ZERO_DTYPE_FP32, dir};
    zero_engine_t *eng = NULL;
    zero_engine_params_t p = params_of(&c, NULL);
    p.stage = 2;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "offload_param") &&
              strstr(zero_last_error(), "stage 3 (got stage 2)"),
          "stage 2: %s", zero_last_error());
    p = params_of(&c, NULL);
    p.offload_param.buffer_count = 0;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "offload_param.buffer_count 0"),
          "buffer_count 0: %s", zero_last_error());
    p = params_of(&c, NULL);
    p.offload_param.nvme_path[0] = 0;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "offload_param.nvme_path is empty"),
          "empty nvme_path: %s", zero_last_error());
    p = params_of(&c, NULL);
    snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s/missing/x", dir);
    CHECK(zero_engine_init(&eng, &p) != ZERO_OK &&
              strstr(zero_last_error(), "offload_param.nvme_path") &&
              strstr(zero_last_error(), "missing/x"),
          "missing nvme_path: %s", zero_last_error());
    p = params_of(&c, NULL);
    p.stage = 2;
    p.offload_param.device = ZERO_OFFLOAD_CPU; /* cpu: nothing moves, any stage */
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "device cpu at stage 2: %s", zero_last_error());
    zero_engine_free(eng);
}

int main(void) {
    char disk[] = "/tmp/zero-pswap-XXXXXX";
    if (!mkdtemp(disk)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    for (int both = 0; both <= 1; both++)
        for (int n = 1; n <= 4; n *= 2) {
            const pcase_t fp32 = {1, 2, both, ZERO_DTYPE_FP32, disk};
            const pcase_t bf16 = {3, 5, both, ZERO_DTYPE_BF16, disk};
            compare(n, &fp32);
            compare(n, &bf16);
        }
    const pcase_t one = {3, 1, 1, ZERO_DTYPE_FP32, disk}; /* one buffer: no prefetch */
    compare(2, &one);
    const pcase_t accum = {3, 2, 0, ZERO_DTYPE_FP32, disk};
    compare(2, &accum);
    resume(disk, ZERO_DTYPE_FP32);
    resume(disk, ZERO_DTYPE_BF16);
    flipped_bit(disk);
    flipped_grad_bit(disk);
    injected_fault(disk, 0, ZERO__AIO_FAULT_EIO, 1);
    injected_fault(disk, 0, ZERO__AIO_FAULT_WRITE_EIO, 0);
    injected_fault(disk, 1, ZERO__AIO_FAULT_WRITE_EIO, 3);
    flipped_bit_ranks(disk, 0);
    flipped_bit_ranks(disk, 1);
    bad_settings(disk);
    rmdir(disk);
    return check_report();
}
