/* test_swap.c — the optimizer's states on NVMe (offload_optimizer device nvme) change no bit.
 *
 * A toy model of three units (one larger than several sub-groups, so tiles are cut at sub-group
 * boundaries and read ahead across units) trains three steps with the states in swap files and
 * again in RAM; the weights fingerprints and every optimizer state read back
 * (zero_engine_state_read, the checkpoint's path) must be equal bit for bit, at every stage, on
 * 1, 2 and 4 thread ranks, with 1 and 3 micro-steps, fp32 and bf16, with the pipelines on and
 * off and two or four staging buffers. The swap directory is a temporary directory on disk
 * (O_DIRECT) and one on /dev/shm (tmpfs: the page-cache path) where it exists. Then:
 *  - the report: no optimizer state in RAM, the staging buffers and checksums as its theory, the
 *    swap files' bytes as the closed form, and the files gone after zero_engine_free;
 *  - a bit flipped in a swap file on disk is a named error (the file, a checksum) at the next
 *    step, not a wrong step; on 2 ranks both fail that step, the other naming the rank;
 *  - bad settings (missing or non-directory nvme_path, one staging buffer, a block size that is
 *    not whole pages) are named errors at zero_engine_init.
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

#define STEPS 3
#define UNITS 3
static const size_t sizes[UNITS] = {300, 5000, 40};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct swap_case {
    int stage, micro, buffers, pipeline;
    zero_dtype_t dtype;
    const char *dir; /* NULL: states in RAM */
} swap_case_t;

typedef struct rank_arg {
    const swap_case_t *c;
    uint64_t fingerprint;
    uint32_t state_hash; /* of every state this rank holds, read back */
    zero_engine_report_t report;
    zero_status_t st;
    char error[1024];
} rank_arg_t;

static zero_engine_params_t params_of(const swap_case_t *c, zero_comm_t *comm) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = c->stage;
    p.comm = comm;
    p.compute_dtype = c->dtype;
    p.grad_accum_steps = c->micro;
    p.persistence_threshold_elems = 100; /* stage 3: unit 2 persistent */
    p.reduce_bucket_bytes = 1400 * 4;
    p.total_steps = STEPS;
    p.sub_group_elems = 2048; /* unit 1 spans several sub-groups (fewer per shard at 4 ranks) */
    if (c->dir) {
        p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s", c->dir);
        p.offload_optimizer.buffer_count = c->buffers;
        p.offload_optimizer.pipeline_read = p.offload_optimizer.pipeline_write = c->pipeline;
        p.aio.block_size = 8192; /* several pieces per request */
    }
    return p;
}

/* zero_engine_estimate_memory for this model and case. */
static zero_memory_estimate_t estimate(const swap_case_t *c, int n) {
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

static zero_status_t train(zero_engine_t *eng, int rank, int micro) {
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < micro; m++) {
            zero_status_t st = toy_backward(eng, sizes, UNITS, rank, s, m);
            if (st) return st;
        }
        zero_status_t st = zero_engine_step(eng, NULL);
        if (st) return st;
    }
    return ZERO_OK;
}

/* Every state this rank holds, read through zero_engine_state_read, hashed. */
static zero_status_t hash_states(zero_engine_t *eng, uint32_t *out) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int u = 0; u < UNITS; u++)
        for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++) {
            size_t off, n;
            zero_status_t st = zero_engine_state_range(eng, u, (zero_engine_state_t)s, &off, &n);
            float *buf = malloc(n * sizeof *buf);
            if (!st && !buf) st = ZERO_ERR_OUT_OF_MEMORY;
            if (!st) st = zero_engine_state_read(eng, u, (zero_engine_state_t)s, off, n, buf);
            if (!st) h = zero__hash_bytes(h, buf, n * sizeof *buf);
            free(buf);
            if (st) return st;
        }
    *out = (uint32_t)(h ^ (h >> 32));
    return ZERO_OK;
}

static void case_rank(zero_comm_t *comm, void *argp) {
    rank_arg_t *a = argp;
    zero_engine_params_t p = params_of(a->c, comm);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st) st = train(eng, comm ? zero_comm_rank(comm) : 0, a->c->micro);
    if (!st) st = zero_engine_fingerprint(eng, &a->fingerprint);
    if (!st) st = hash_states(eng, &a->state_hash);
    if (!st) zero_engine_get_report(eng, &a->report);
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", st ? zero_last_error() : "");
    zero_engine_free(eng);
}

static void run(int n, const swap_case_t *c, rank_arg_t *a) {
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

static void compare(int n, const swap_case_t *c) {
    rank_arg_t ram[4], swp[4];
    swap_case_t rc = *c;
    rc.dir = NULL;
    run(n, &rc, ram);
    run(n, c, swp);
    pthread_mutex_lock(&lock);
    for (int r = 0; r < n; r++) {
        const char *what = c->dtype == ZERO_DTYPE_FP32 ? "fp32" : "bf16";
        CHECK(ram[r].st == ZERO_OK && swp[r].st == ZERO_OK,
              "stage %d, %d ranks, %s, %d micro: rank %d: RAM '%s', swap '%s'", c->stage, n, what,
              c->micro, r, ram[r].error, swp[r].error);
        CHECK(swp[r].fingerprint == ram[r].fingerprint && swp[r].state_hash == ram[r].state_hash,
              "stage %d, %d ranks, %s, %d micro, %d buffers, pipeline %d, %s: rank %d: "
              "fingerprint %016llx / %016llx, states %08x / %08x (swap / RAM)",
              c->stage, n, what, c->micro, c->buffers, c->pipeline, c->dir, r,
              (unsigned long long)swp[r].fingerprint, (unsigned long long)ram[r].fingerprint,
              swp[r].state_hash, ram[r].state_hash);
        const zero_engine_report_t *rep = &swp[r].report;
        CHECK(rep->memory_bytes[ZERO_MEM_OPTIM] == 0 &&
                  rep->memory_theory_bytes[ZERO_MEM_OPTIM] == 0 &&
                  rep->memory_bytes[ZERO_MEM_OFFLOAD] ==
                      rep->memory_theory_bytes[ZERO_MEM_OFFLOAD] &&
                  rep->memory_bytes[ZERO_MEM_OFFLOAD] > 0,
              "stage %d rank %d: optim %zu (theory %zu), offload %zu (theory %zu)", c->stage, r,
              rep->memory_bytes[ZERO_MEM_OPTIM], rep->memory_theory_bytes[ZERO_MEM_OPTIM],
              rep->memory_bytes[ZERO_MEM_OFFLOAD], rep->memory_theory_bytes[ZERO_MEM_OFFLOAD]);
        /* swap files: per unit, each swapped state's held range rounded up to 4 KiB (m, v, and
         * with bf16 the master); held: the shard at stages 1-3, the unit at stage 0 */
        uint64_t want = 0;
        const int states = c->dtype == ZERO_DTYPE_FP32 ? 2 : 3;
        for (int u = 0; u < UNITS; u++) {
            const size_t padded = (sizes[u] - 7 + 15) / 16 * 16 + 16, q = (size_t)n * 16;
            const size_t P = (padded + q - 1) / q * q, held = c->stage ? P / (size_t)n : P;
            want += (uint64_t)states * ((held * 4 + 4095) / 4096 * 4096);
        }
        CHECK(rep->swap_disk_bytes == want,
              "stage %d rank %d: swap files %llu bytes, expected %llu", c->stage, r,
              (unsigned long long)rep->swap_disk_bytes, (unsigned long long)want);
        /* the last step wrote every sub-group once, and read about that much */
        CHECK(rep->swap_written_bytes_per_step == want &&
                  rep->swap_read_bytes_per_step <= 2 * want && rep->swap_wait_s_per_step >= 0,
              "stage %d rank %d: last step wrote %llu, read %llu bytes of %llu", c->stage, r,
              (unsigned long long)rep->swap_written_bytes_per_step,
              (unsigned long long)rep->swap_read_bytes_per_step, (unsigned long long)want);
        /* the estimate, made before anything exists: the same disk, no optimizer state in RAM,
         * and the offload peak: staging and checksums, plus at most one read of a whole held
         * range (the fingerprint or a checkpoint reading a state that spans sub-groups) */
        const zero_memory_estimate_t e = estimate(c, n);
        const size_t peak = rep->memory_peak_bytes[ZERO_MEM_OFFLOAD],
                     live = rep->memory_bytes[ZERO_MEM_OFFLOAD];
        CHECK(e.disk_bytes == want && e.bytes[ZERO_MEM_OPTIM] == 0 &&
                  e.bytes[ZERO_MEM_OFFLOAD] >= peak &&
                  e.bytes[ZERO_MEM_OFFLOAD] - live <= (size_t)want,
              "stage %d rank %d: estimate disk %llu (want %llu), optim %zu, offload %zu (peak %zu, "
              "live %zu)",
              c->stage, r, (unsigned long long)e.disk_bytes, (unsigned long long)want,
              e.bytes[ZERO_MEM_OPTIM], e.bytes[ZERO_MEM_OFFLOAD], peak, live);
    }
    CHECK(swap_files_in(c->dir) == 0, "%s: swap files left after zero_engine_free", c->dir);
    pthread_mutex_unlock(&lock);
}

/* A bit flipped in the larger unit's swap file after one step: the next step must fail naming
 * the file, on every rank (the others time out waiting for it, naming it). */
static void flipped_bit(const char *dir) {
    /* two staging buffers: after a step they hold the last sub-group and the first one read
     * ahead, so the flipped one is read from disk again */
    swap_case_t c = {1, 1, 2, 1, ZERO_DTYPE_FP32, dir};
    zero_engine_params_t p = params_of(&c, NULL);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st) st = train(eng, 0, 1);
    CHECK(st == ZERO_OK, "flip: training before the flip: %s", zero_last_error());
    char path[1400];
    snprintf(path, sizeof path, "%s/zero-%ld-r0-u1.swp", dir, (long)getpid());
    /* m, third page: the second sub-group */
    CHECK(flip_bit(path, 4096 * 2 + 100), "flip: cannot change %s", path);
    if (!st) st = train(eng, 0, 1);
    CHECK(st == ZERO_ERR_FORMAT && strstr(zero_last_error(), path) &&
              strstr(zero_last_error(), "checksum"),
          "flip: the step after a flipped bit gave %s: %s", zero_status_str(st), zero_last_error());
    zero_engine_free(eng);
    CHECK(swap_files_in(dir) == 0, "flip: swap files left");
}

typedef struct flip_arg {
    const char *dir;
    zero_status_t st;
    char error[1024];
} flip_arg_t;

/* Two ranks; rank 1's swap file gets a flipped bit after a step: the next step fails on both,
 * rank 1 naming its file, rank 0 naming rank 1 (no rank trains on, none waits forever). */
static void flip_rank(zero_comm_t *comm, void *argp) {
    flip_arg_t *a = argp;
    const int rank = zero_comm_rank(comm);
    swap_case_t c = {1, 1, 2, 1, ZERO_DTYPE_FP32, a->dir};
    zero_engine_params_t p = params_of(&c, comm);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, UNITS);
    if (!st) st = train(eng, rank, 1);
    if (!st && rank == 1) {
        char path[1400];
        snprintf(path, sizeof path, "%s/zero-%ld-r1-u1.swp", a->dir, (long)getpid());
        CHECK(flip_bit(path, 4096 * 2 + 100), "flip: cannot change %s", path);
    }
    if (!st) st = train(eng, rank, 1);
    a->st = st;
    snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    zero_engine_free(eng);
}

static void flipped_bit_ranks(const char *dir) {
    flip_arg_t a[2] = {{dir, ZERO_OK, ""}, {dir, ZERO_OK, ""}};
    void *args[2] = {&a[0], &a[1]};
    CHECK(run_ranks(2, 30.0, flip_rank, args) == ZERO_OK, "clique");
    CHECK(a[1].st == ZERO_ERR_FORMAT && strstr(a[1].error, "-r1-u1.swp") &&
              strstr(a[1].error, "checksum"),
          "flip, 2 ranks: rank 1 gave %s: %s", zero_status_str(a[1].st), a[1].error);
    CHECK(a[0].st == ZERO_ERR_FORMAT && strstr(a[0].error, "rank 1 failed"),
          "flip, 2 ranks: rank 0 gave %s: %s", zero_status_str(a[0].st), a[0].error);
    CHECK(swap_files_in(dir) == 0, "flip, 2 ranks: swap files left");
}

static void bad_settings(const char *dir) {
    swap_case_t c = {1, 1, 4, 1, ZERO_DTYPE_FP32, dir};
    zero_engine_params_t p = params_of(&c, NULL);
    zero_engine_t *eng = NULL;
    snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s/missing/x",
             dir);
    CHECK(zero_engine_init(&eng, &p) != ZERO_OK && strstr(zero_last_error(), "nvme_path") &&
              strstr(zero_last_error(), "missing/x"),
          "missing nvme_path: %s", zero_last_error());
    p = params_of(&c, NULL);
    snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s/plain-file",
             dir);
    FILE *f = fopen(p.offload_optimizer.nvme_path, "w");
    if (f) fclose(f);
    CHECK(zero_engine_init(&eng, &p) != ZERO_OK && strstr(zero_last_error(), "plain-file"),
          "nvme_path is a file: %s", zero_last_error());
    unlink(p.offload_optimizer.nvme_path);
    p = params_of(&c, NULL);
    p.offload_optimizer.nvme_path[0] = 0;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "nvme_path is empty"),
          "empty nvme_path: %s", zero_last_error());
    p = params_of(&c, NULL);
    p.offload_optimizer.buffer_count = 1;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "buffer_count 1"),
          "one buffer: %s", zero_last_error());
    p = params_of(&c, NULL);
    p.aio.block_size = 1000;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG && strstr(zero_last_error(), "block_size"),
          "block size 1000: %s", zero_last_error());
    zero_offload_device_t d;
    CHECK(zero_offload_device_parse("NVMe", &d) == ZERO_OK && d == ZERO_OFFLOAD_NVME &&
              zero_offload_device_parse("disk", &d) == ZERO_ERR_CONFIG,
          "device names");
}

int main(void) {
    char disk[] = "/tmp/zero-swap-XXXXXX";
    if (!mkdtemp(disk)) {
        fprintf(stderr, "cannot make a temporary directory\n");
        return 1;
    }
    for (int stage = 0; stage <= 3; stage++) {
        const swap_case_t fp32 = {stage, 1, 4, 1, ZERO_DTYPE_FP32, disk};
        const swap_case_t accum = {stage, 3, 2, 0, ZERO_DTYPE_FP32, disk};
        const swap_case_t bf16 = {stage, 3, 3, 1, ZERO_DTYPE_BF16, disk};
        for (int n = 1; n <= 4; n *= 2) {
            compare(n, &fp32);
            compare(n, &bf16);
        }
        compare(2, &accum);
    }
    char shm[] = "/dev/shm/zero-swap-XXXXXX";
    if (mkdtemp(shm)) { /* tmpfs: O_DIRECT refused on older kernels, the page-cache path */
        const swap_case_t t = {3, 3, 3, 1, ZERO_DTYPE_BF16, shm};
        compare(2, &t);
        rmdir(shm);
    }
    flipped_bit(disk);
    flipped_bit_ranks(disk);
    bad_settings(disk);
    rmdir(disk);
    return check_report();
}
