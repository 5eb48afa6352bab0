/* test_qwz.c — ZeRO++ qwZ in the engine: stage 3's parameter all-gathers in blockwise int8.
 *
 * Every rank runs two engines side by side over the same communicator, one with
 * quantized_weights and one without, on the same toy units of odd sizes (no unit a multiple of
 * the 256-element block, shards of 16 elements upwards), and feeds both the same hand-made
 * gradients (toy_grads.h, independent of the weights). Oracles:
 *   - the exact engine's gathered unit, cut into each rank's shard and put through a naive
 *     quantizer written here (blocks of 256 from the shard's start, s = max|x| / 127,
 *     rint(x / s) in [-127, 127], q s, rounded into the compute dtype), equals what a fetch of
 *     the qwZ engine returns, bitwise, on every rank (the owner's own shard included);
 *   - the error bound |x - x'| <= s / 2 (with the rounding slack of the dtype);
 *   - after steps, both engines' fingerprints (the exact weights) are equal: only the wire is
 *     quantized, the shards, the master and the optimizer are not;
 *   - the parameter bytes each rank sent in the step are the closed form
 *     2 M k_r sum_u (S_u + 4 ceil(S_u / 256)), measured and in the engine's theory, with k_r =
 *     n - 1 for a flat all-gather and for a hierarchical one over equal nodes, and on nodes of
 *     2 + 1 (hierarchical: ranks 0 and 1 send their part to rank 2, rank 2 its part to rank 0,
 *     which passes it on to rank 1 with its own) k = 3, 2, 1; with two ranks per node the bytes
 *     to other nodes equal their theory too;
 *   - a parameter set to inf or NaN arrives as NaN in its block on every rank, never finite;
 *   - below stage 3 the option changes no byte and is noted once in the log.
 * Rank counts 1, 2, 3, 4, 7; fp32 and bf16.
 */
#include "check.h"
#include "core/core_internal.h"
#include "thread_ranks.h"
#include "toy_units.h"
#include "zero/zero.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t sizes[] = {9, 270, 1031, 40007};
#define NU ((int)ZERO_ARRAY_LEN(sizes))
#define STEPS 3

typedef struct job {
    int ranks, ranks_per_node, stage;
    zero_dtype_t dt;
} job_t;

static float get(const void *buf, size_t i, zero_dtype_t dt) {
    if (dt == ZERO_DTYPE_FP32) return ((const float *)buf)[i];
    return zero_bf16_to_fp32(((const uint16_t *)buf)[i]);
}

static float to_dt(float x, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_FP32 ? x : zero_bf16_to_fp32(zero_fp32_to_bf16(x));
}

/* The naive reference of one rank's shard x[0..S): y = dequant(quant(x)) in dt; scale of each
 * element's block in s. */
static void ref_shard(float *y, float *s, const float *x, size_t S, zero_dtype_t dt) {
    for (size_t lo = 0; lo < S; lo += 256) {
        size_t hi = lo + 256 < S ? lo + 256 : S;
        float amax = 0.0f;
        int finite = 1;
        for (size_t i = lo; i < hi; i++) {
            finite &= isfinite(x[i]) != 0;
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        }
        float sc = !finite ? NAN : amax == 0.0f ? 0.0f : amax / 127.0f;
        if (finite && amax > 0.0f && sc == 0.0f) sc = FLT_TRUE_MIN;
        for (size_t i = lo; i < hi; i++) {
            float q = sc > 0.0f ? nearbyintf(x[i] / sc) : 0.0f;
            q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q;
            y[i] = to_dt((float)(int)q * sc, dt); /* an int8 has no -0 */
            s[i] = sc;
        }
    }
}

static zero_engine_t *make(zero_comm_t *comm, const job_t *j, int qwz) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = j->stage;
    p.comm = comm;
    p.compute_dtype = j->dt;
    p.persistence_threshold_elems = 0; /* every unit sharded */
    p.quantized_weights = qwz;
    p.lr = 1e-2f;
    p.grad_clip = 0.0f;
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, NU);
    CHECK(!st, "engine (qwz %d) init: %s", qwz, zero_status_str(st));
    return st ? NULL : eng;
}

/* Fetch every unit of both engines and compare q's with the reference of e's. Returns the
 * mismatches. */
static long compare_units(zero_engine_t *e, zero_engine_t *q, int rank, const job_t *j,
                          const char *when) {
    long bad = 0, bound = 0;
    for (int u = 0; u < NU; u++) {
        const void *xe = zero_unit_fetch(e, u), *xq = zero_unit_fetch(q, u);
        CHECK(xe && xq, "%s: fetch of unit %d failed", when, u);
        if (!xe || !xq) return 1;
        const size_t P = zero_engine_unit_padded_count(e, u), S = P / (size_t)j->ranks;
        float *x = malloc(P * sizeof *x), *y = malloc(P * sizeof *y), *s = malloc(P * sizeof *s);
        for (size_t i = 0; i < P; i++) x[i] = get(xe, i, j->dt);
        for (int r = 0; r < j->ranks; r++) {
            if (j->ranks == 1) { /* nothing is sent, nothing quantized */
                memcpy(y, x, P * sizeof *x);
                for (size_t i = 0; i < P; i++) s[i] = 0.0f;
                break;
            }
            ref_shard(y + (size_t)r * S, s + (size_t)r * S, x + (size_t)r * S, S, j->dt);
        }
        for (size_t i = 0; i < P; i++) {
            const float got = get(xq, i, j->dt);
            if (memcmp(&got, &y[i], 4) && !(isnan(got) && isnan(y[i]))) {
                if (getenv("QWZ_DEBUG") && bad < 5)
                    fprintf(stderr, "u %d i %zu P %zu x %.9g got %.9g want %.9g s %.9g\n", u, i, P,
                            x[i], got, y[i], s[i]);
                bad++;
            }
            const double ulp = j->dt == ZERO_DTYPE_FP32 ? 0x1p-24 : 0x1p-8;
            if (isfinite(s[i]) &&
                !(fabs((double)got - x[i]) <=
                  s[i] / 2.0 * (1 + 0x1p-20) + (fabs(x[i]) + s[i]) * (0x1p-22 + ulp)))
                bound++;
        }
        free(x);
        free(y);
        free(s);
        zero_unit_release(e, u);
        zero_unit_release(q, u);
    }
    CHECK(!bad && !bound,
          "%s, %d ranks, %s, rank %d: %ld gathered values differ from the naive reference, %ld "
          "beyond scale / 2",
          when, j->ranks, zero_dtype_name(j->dt), rank, bad, bound);
    return bad + bound;
}

static zero_status_t step(zero_engine_t *eng, int rank, int s) {
    zero_status_t st = toy_forward(eng, NU);
    if (!st) st = toy_backward(eng, sizes, NU, rank, s, 0);
    zero_step_stats_t stats;
    if (!st) st = zero_engine_step(eng, &stats);
    return st;
}

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    const job_t *j = arg;
    zero_engine_t *e = make(comm, j, 0), *q = make(comm, j, 1);
    if (!e || !q) goto done;
    if (j->stage == 3) compare_units(e, q, rank, j, "initial weights");
    for (int s = 0; s < STEPS; s++) {
        zero_status_t st = step(e, rank, s);
        if (!st) st = step(q, rank, s);
        CHECK(!st, "step %d: %s", s, zero_status_str(st));
        if (st) goto done;
    }
    uint64_t fe = 0, fq = 1;
    zero_status_t st = zero_engine_fingerprint(e, &fe);
    if (!st) st = zero_engine_fingerprint(q, &fq);
    CHECK(!st && fe == fq,
          "%d ranks, %s, stage %d: the qwZ engine's exact weights %016llx differ from the exact "
          "engine's %016llx after %d steps (only the wire may be quantized)",
          j->ranks, zero_dtype_name(j->dt), j->stage, (unsigned long long)fq,
          (unsigned long long)fe, STEPS);
    zero_engine_report_t re, rq;
    zero_engine_get_report(e, &re);
    zero_engine_get_report(q, &rq);
    const int n = j->ranks;
    const uint64_t kr = n == 3 && j->ranks_per_node == 2 ? (uint64_t)(3 - rank) : (uint64_t)(n - 1);
    uint64_t want = 0;
    for (int u = 0; u < NU; u++) {
        const size_t S = zero_engine_unit_padded_count(q, u) / (size_t)n;
        want += 2 * kr * (S + 4 * ((S + 255) / 256));
    }
    if (j->stage < 3 || n == 1) want = re.comm_sent_bytes_per_step_by_kind[ZERO_XFER_PARAMS];
    const uint64_t got = rq.comm_sent_bytes_per_step_by_kind[ZERO_XFER_PARAMS],
                   th = rq.comm_theory_bytes_per_step_by_kind[ZERO_XFER_PARAMS];
    CHECK(got == want && th == want,
          "%d ranks (%d per node), %s, stage %d: parameter bytes sent %llu, theory %llu, "
          "expected %llu",
          n, j->ranks_per_node, zero_dtype_name(j->dt), j->stage, (unsigned long long)got,
          (unsigned long long)th, (unsigned long long)want);
    CHECK(rq.comm_bytes_per_step == rq.comm_theory_bytes_per_step &&
              rq.comm_inter_node_bytes_per_step == rq.comm_inter_node_theory_bytes_per_step,
          "%d ranks (%d per node): total %llu vs theory %llu, to other nodes %llu vs %llu", n,
          j->ranks_per_node, (unsigned long long)rq.comm_bytes_per_step,
          (unsigned long long)rq.comm_theory_bytes_per_step,
          (unsigned long long)rq.comm_inter_node_bytes_per_step,
          (unsigned long long)rq.comm_inter_node_theory_bytes_per_step);
    if (j->ranks_per_node > 0 && n > j->ranks_per_node)
        CHECK(rq.comm_inter_node_bytes_per_step > 0, "%d ranks over nodes: nothing to other nodes",
              n);
    CHECK(rq.memory_bytes[ZERO_MEM_COMM] == rq.memory_theory_bytes[ZERO_MEM_COMM],
          "%d ranks: comm memory %zu vs its theory %zu", n, rq.memory_bytes[ZERO_MEM_COMM],
          rq.memory_theory_bytes[ZERO_MEM_COMM]);
    if (j->stage < 3) goto done;
    compare_units(e, q, rank, j, "after the steps");
    /* A non-finite parameter: rank 0's first element of the largest unit (its first block),
     * inf in one run of the check, NaN in the other. */
    for (int k = 0; k < 2 && n > 1; k++) {
        const int u = NU - 1;
        size_t off, cnt;
        zero_engine_shard_range(q, u, &off, &cnt);
        float v = k ? NAN : INFINITY, keep = 0.0f;
        if (rank == 0) {
            zero_engine_params_read(q, u, off, 1, &keep);
            zero_engine_params_write(q, u, off, 1, &v);
        }
        const void *xq = zero_unit_fetch(q, u);
        CHECK(xq != NULL, "fetch with a non-finite parameter failed");
        if (xq) {
            int nan_block = 1, finite_rest = 1;
            for (size_t i = 0; i < 256; i++) nan_block &= isnan(get(xq, i, j->dt)) != 0;
            for (size_t i = 256; i < zero_engine_unit_padded_count(q, u); i++)
                finite_rest &= isfinite(get(xq, i, j->dt)) != 0;
            CHECK(nan_block && finite_rest,
                  "%d ranks, rank %d: %s in rank 0's first block: that block all NaN %d, the "
                  "others finite %d",
                  n, rank, k ? "NaN" : "inf", nan_block, finite_rest);
        }
        zero_unit_release(q, u);
        if (rank == 0) zero_engine_params_write(q, u, off, 1, &keep);
    }
done:
    zero_engine_free(e);
    zero_engine_free(q);
}

static void run(int ranks, int per_node, int stage, zero_dtype_t dt) {
    job_t j = {ranks, per_node, stage, dt};
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 60;
    p.ranks_per_node = per_node;
    zero_status_t st = thread_ranks_clique_with(ranks, &p, rank_main, &j);
    CHECK(!st, "threads clique of %d: %s", ranks, zero_status_str(st));
}

/* The note below stage 3: counted from the log. */
static atomic_int notes;
static void on_log(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)level;
    (void)rank;
    (void)world;
    (void)user;
    if (strstr(msg, "zero_quantized_weights")) atomic_fetch_add(&notes, 1);
}

int main(void) {
    const int counts[] = {1, 2, 3, 4, 7};
    for (size_t k = 0; k < ZERO_ARRAY_LEN(counts); k++) {
        run(counts[k], 0, 3, ZERO_DTYPE_FP32);
        run(counts[k], 0, 3, ZERO_DTYPE_BF16);
    }
    run(4, 2, 3, ZERO_DTYPE_FP32);
    run(3, 2, 3, ZERO_DTYPE_BF16);
    zero_log_set_callback(on_log, NULL);
    run(2, 0, 2, ZERO_DTYPE_FP32);
    zero_log_set_callback(NULL, NULL);
    CHECK(atomic_load(&notes) == 1, "stage 2 with zero_quantized_weights: %d notes (expected one)",
          atomic_load(&notes));
    return check_report();
}
