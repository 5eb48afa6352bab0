/* test_hpz.c — ZeRO++ hpZ in the engine (zero_hpz_partition_size): stage 3's later gathers of a
 * step inside groups of h ranks, from secondary shards.
 *
 * Every rank runs two engines side by side over the same communicator, one plain (or qwZ only)
 * and one with hpZ (or qwZ + hpZ), on the same toy units of odd sizes, with the same hand-made
 * gradients (toy_grads.h), M micro-steps per step and several steps. Oracles:
 *   - every fetch of every window (forward and backward of every micro-step) returns, bitwise,
 *     the buffer the other engine's fetch returns: without qwZ the exact gathered unit, with qwZ
 *     the dequantized one (which the qwZ-only engine regathers from the same shards at every
 *     window, so the hpZ engine's later in-group gathers must reproduce the first gather's
 *     values); and the fingerprints after the steps are equal;
 *   - the bytes the comm layer itself counted (zero_comm_get_stats over the engine's
 *     communicators) for the all-gathers posted after the first micro-step's forward: none to
 *     other nodes with hpZ when h is the node size (the plain engine's are > 0), and the first
 *     forward's equal to the plain engine's;
 *   - the parameter bytes of the report: measured and theory equal to the closed form
 *     sum_u [(n - 1) w_u + (2M - 1)(h - 1)(P_u / h) c] (w_u: c S_u, or the quantized shard
 *     S_u + 4 ceil(S_u / 256) with qwZ; n - 1 holds for a flat or hierarchical all-gather over
 *     equal nodes, and the in-group all-gather is flat inside a node); total and inter-node bytes
 *     measured equal to theory;
 *   - memory: the hpZ engine's parameters take c sum_u P_u / h more than the plain engine's,
 *     measured, equal to its theory, and the pre-flight estimate says the same;
 *   - bad values: h not dividing the world, h > world, h at stage 2, h with offload_param nvme:
 *     ZERO_ERR_CONFIG naming the key.
 * Ranks 4 (nodes of 2, h 2) and 6 (nodes of 3, h 3; nodes of 2, h 2); fp32 and bf16; M 1 and 3.
 */
#include "check.h"
#include "core/core_internal.h"
#include "thread_ranks.h"
#include "toy_units.h"
#include "zero/engine_internal.h"
#include "zero/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

static const size_t sizes[] = {9, 270, 1031, 40007};
#define NU ((int)ZERO_ARRAY_LEN(sizes))
#define STEPS 3

typedef struct job {
    int ranks, ranks_per_node, h, M, qwz;
    zero_dtype_t dt;
} job_t;

static zero_engine_params_t params_of(zero_comm_t *comm, const job_t *j, int h) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = 3;
    p.comm = comm;
    p.compute_dtype = j->dt;
    p.persistence_threshold_elems = 0; /* every unit sharded */
    p.quantized_weights = j->qwz;
    p.hpz_partition_size = h;
    p.grad_accum_steps = j->M;
    p.lr = 1e-2f;
    p.grad_clip = 0.0f;
    return p;
}

static zero_engine_t *make(zero_comm_t *comm, const job_t *j, int h) {
    zero_engine_params_t p = params_of(comm, j, h);
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = toy_add_units(eng, sizes, NU);
    CHECK(!st, "engine (hpz %d) init: %s", h, zero_status_str(st));
    return st ? NULL : eng;
}

/* All-gather bytes this engine's communicators sent to other nodes so far (comm layer). */
static uint64_t ag_inter(const zero_engine_t *eng) {
    uint64_t b = 0;
    for (int g = 0; g < eng->group_count; g++) {
        if (!eng->groups[g].comm) continue;
        zero_comm_stats_t s;
        zero_comm_get_stats(eng->groups[g].comm, &s);
        b += s.inter_node_sent_bytes[ZERO_COLL_ALL_GATHER];
    }
    return b;
}

typedef struct counts {
    long mismatches;
    uint64_t first_e, first_q, later_e, later_q; /* all-gather bytes to other nodes */
} counts_t;

/* Fetch unit u of both engines, compare, and add the inter-node gather bytes of the fetch. */
static int fetch_both(zero_engine_t *e, zero_engine_t *q, int u, int first, counts_t *c) {
    const uint64_t e0 = ag_inter(e), q0 = ag_inter(q);
    const void *a = zero_unit_fetch(e, u);
    const void *b = zero_unit_fetch(q, u);
    const uint64_t de = ag_inter(e) - e0, dq = ag_inter(q) - q0;
    *(first ? &c->first_e : &c->later_e) += de;
    *(first ? &c->first_q : &c->later_q) += dq;
    if (!a || !b) return -1;
    const size_t bytes = zero_engine_unit_padded_count(e, u) * (size_t)e->ce;
    c->mismatches += memcmp(a, b, bytes) != 0;
    return 0;
}

static zero_status_t micro_step(zero_engine_t *e, zero_engine_t *q, int rank, int s, int m,
                                counts_t *c) {
    for (int u = 0; u < NU; u++) {
        if (fetch_both(e, q, u, m == 0, c)) return ZERO_ERR_INTERNAL;
        zero_unit_release(e, u);
        zero_unit_release(q, u);
    }
    const zero_dtype_t dt = zero_engine_params(e)->compute_dtype;
    for (int u = NU - 1; u >= 0; u--) {
        if (fetch_both(e, q, u, 0, c)) return ZERO_ERR_INTERNAL;
        zero_engine_t *both[2] = {e, q};
        for (int k = 0; k < 2; k++) {
            void *g = zero_unit_grads(both[k], u);
            if (!g) return ZERO_ERR_INTERNAL;
            for (size_t i = 0; i < sizes[u]; i++) {
                float x = toy_grad(rank, u, s, m, i);
                zero__narrow((char *)g + i * zero_dtype_size(dt), &x, 1, dt);
            }
            zero_status_t st = zero_unit_grads_done(both[k], u);
            zero_unit_release(both[k], u);
            if (st) return st;
        }
    }
    return ZERO_OK;
}

static void rank_main(zero_comm_t *comm, int rank, void *arg) {
    const job_t *j = arg;
    zero_engine_t *e = make(comm, j, 1), *q = make(comm, j, j->h);
    if (!e || !q) goto done;
    const int n = j->ranks, nodes = j->ranks_per_node ? n / j->ranks_per_node : 1;
    char what[96];
    snprintf(what, sizeof what, "%d ranks (%d per node), hpz %d, %s, M %d, qwz %d", n,
             j->ranks_per_node, j->h, zero_dtype_name(j->dt), j->M, j->qwz);
    uint64_t first_plain = 0;
    for (int s = 0; s < STEPS; s++) {
        counts_t c = {0};
        zero_status_t st = ZERO_OK;
        const uint64_t q0 = ag_inter(q);
        for (int m = 0; m < j->M && !st; m++) st = micro_step(e, q, rank, s, m, &c);
        /* the fetches' total (each waited its gather, so all are counted): a prefetched
         * gather's bytes are counted by the comm layer when it completes, which may fall
         * between two fetches' windows */
        const uint64_t total_q = ag_inter(q) - q0;
        zero_step_stats_t stats;
        if (!st) st = zero_engine_step(e, &stats);
        if (!st) st = zero_engine_step(q, &stats);
        CHECK(!st, "%s: step %d: %s", what, s, zero_status_str(st));
        if (st) goto done;
        CHECK(c.mismatches == 0, "%s, step %d: %ld fetches differ from the plain engine's", what, s,
              c.mismatches);
        /* step 0 has no prefetch (no recorded schedule yet): every gather lands inside its own
         * fetch, so its first forward is exactly its own; later steps' prefetch moves gathers
         * between the phases (and windows), not the step's sum */
        if (s == 0) first_plain = c.first_e;
        if (j->ranks_per_node == j->h || s == 0)
            CHECK(total_q == first_plain + (j->ranks_per_node == j->h ? 0 : c.later_q),
                  "%s, step %d: the gathers sent %llu bytes to other nodes, the plain engine's "
                  "first forward %llu",
                  what, s, (unsigned long long)total_q, (unsigned long long)first_plain);
        if (j->ranks_per_node == j->h)
            CHECK(c.later_q == 0 && (nodes == 1 || c.later_e > 0),
                  "%s, step %d: the later gathers sent %llu bytes to other nodes (expected 0; the "
                  "plain engine's %llu)",
                  what, s, (unsigned long long)c.later_q, (unsigned long long)c.later_e);
    }
    uint64_t fe = 0, fq = 1;
    zero_status_t st = zero_engine_fingerprint(e, &fe);
    if (!st) st = zero_engine_fingerprint(q, &fq);
    CHECK(!st && fe == fq, "%s: fingerprint %016llx with hpZ, %016llx without", what,
          (unsigned long long)fq, (unsigned long long)fe);
    zero_engine_report_t re, rq;
    zero_engine_get_report(e, &re);
    zero_engine_get_report(q, &rq);
    const uint64_t c = j->dt == ZERO_DTYPE_FP32 ? 4 : 2, h = (uint64_t)j->h, M = (uint64_t)j->M;
    uint64_t want = 0, sec = 0;
    for (int u = 0; u < NU; u++) {
        const uint64_t P = zero_engine_unit_padded_count(q, u), S = P / (uint64_t)n;
        const uint64_t w = j->qwz ? S + 4 * ((S + 255) / 256) : c * S;
        want += (uint64_t)(n - 1) * w + (2 * M - 1) * (h - 1) * (P / h) * c;
        sec += c * (P / h);
    }
    const uint64_t got = rq.comm_sent_bytes_per_step_by_kind[ZERO_XFER_PARAMS],
                   th = rq.comm_theory_bytes_per_step_by_kind[ZERO_XFER_PARAMS];
    CHECK(got == want && th == want, "%s: parameter bytes sent %llu, theory %llu, expected %llu",
          what, (unsigned long long)got, (unsigned long long)th, (unsigned long long)want);
    CHECK(rq.comm_bytes_per_step == rq.comm_theory_bytes_per_step &&
              rq.comm_inter_node_bytes_per_step == rq.comm_inter_node_theory_bytes_per_step,
          "%s: total %llu vs theory %llu, to other nodes %llu vs %llu", what,
          (unsigned long long)rq.comm_bytes_per_step,
          (unsigned long long)rq.comm_theory_bytes_per_step,
          (unsigned long long)rq.comm_inter_node_bytes_per_step,
          (unsigned long long)rq.comm_inter_node_theory_bytes_per_step);
    CHECK(rq.memory_bytes[ZERO_MEM_PARAMS] == re.memory_bytes[ZERO_MEM_PARAMS] + sec &&
              rq.memory_theory_bytes[ZERO_MEM_PARAMS] == rq.memory_bytes[ZERO_MEM_PARAMS],
          "%s: parameter memory %zu (theory %zu), without hpZ %zu, expected + %llu", what,
          rq.memory_bytes[ZERO_MEM_PARAMS], rq.memory_theory_bytes[ZERO_MEM_PARAMS],
          re.memory_bytes[ZERO_MEM_PARAMS], (unsigned long long)sec);
    /* the pre-flight estimate of the same units */
    zero_tensor_desc_t t[NU][2];
    zero_unit_decl_t d[NU];
    for (int u = 0; u < NU; u++) {
        toy_unit_tensors(sizes[u], t[u]);
        d[u] = (zero_unit_decl_t){0};
        d[u].tensors = t[u];
        d[u].tensor_count = 2;
    }
    zero_engine_params_t pe = params_of(NULL, j, 1), pq = params_of(NULL, j, j->h);
    zero_memory_estimate_t ee, eq;
    st = zero_engine_estimate_memory(&pe, n, d, NU, &ee);
    if (!st) st = zero_engine_estimate_memory(&pq, n, d, NU, &eq);
    CHECK(!st && eq.bytes[ZERO_MEM_PARAMS] == ee.bytes[ZERO_MEM_PARAMS] + sec,
          "%s: estimated parameter memory %zu with hpZ, %zu without, expected + %llu", what,
          eq.bytes[ZERO_MEM_PARAMS], ee.bytes[ZERO_MEM_PARAMS], (unsigned long long)sec);
done:
    zero_engine_free(e);
    zero_engine_free(q);
}

static void run(int ranks, int per_node, int h, zero_dtype_t dt, int M, int qwz,
                void (*fn)(zero_comm_t *, int, void *)) {
    job_t j = {ranks, per_node, h, M, qwz, dt};
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 60;
    p.ranks_per_node = per_node;
    zero_status_t st = thread_ranks_clique_with(ranks, &p, fn, &j);
    CHECK(!st, "threads clique of %d: %s", ranks, zero_status_str(st));
}

/* A bad zero_hpz_partition_size (h, at j->M's stage, with nvme when j->qwz): named error. */
static void bad_main(zero_comm_t *comm, int rank, void *arg) {
    const job_t *j = arg;
    zero_engine_params_t p = params_of(comm, j, j->h);
    p.quantized_weights = 0;
    p.grad_accum_steps = 1;
    p.stage = j->M;
    if (j->qwz) {
        p.offload_param.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s", ".");
    }
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    const char *msg = zero_last_error();
    CHECK(st == ZERO_ERR_CONFIG && strstr(msg, "zero_hpz_partition_size"),
          "rank %d, %d ranks, hpz %d, stage %d, nvme %d: status %s, message '%s' (expected a "
          "config error naming zero_hpz_partition_size)",
          rank, j->ranks, j->h, j->M, j->qwz, zero_status_str(st), st ? msg : "");
    zero_engine_free(eng);
}

/* The warning when an hpZ group has ranks on two nodes: counted from the log. */
static atomic_int straddles;
static void on_log(zero_log_level_t level, int rank, int world, const char *msg, void *user) {
    (void)rank;
    (void)world;
    (void)user;
    if (level == ZERO_LOG_WARN && strstr(msg, "zero_hpz_partition_size") &&
        strstr(msg, "cross nodes"))
        atomic_fetch_add(&straddles, 1);
}

static void init_main(zero_comm_t *comm, int rank, void *arg) {
    const job_t *j = arg;
    zero_engine_params_t p = params_of(comm, j, j->h);
    zero_engine_t *eng = NULL;
    const zero_status_t st = zero_engine_init(&eng, &p);
    CHECK(!st, "rank %d, %d ranks, nodes of %d, hpz %d: %s", rank, j->ranks, j->ranks_per_node,
          j->h, st ? zero_last_error() : "");
    zero_engine_free(eng);
}

/* Warned once (rank 0) for groups over two nodes, never for groups inside one. */
static void node_layout(void) {
    const struct {
        int ranks, per_node, h, warnings;
    } cases[] = {{6, 3, 2, 1}, {6, 2, 3, 1}, {4, 1, 2, 1}, {6, 3, 3, 0},
                 {6, 2, 2, 0}, {4, 0, 4, 0}, {8, 4, 2, 0}};
    zero_log_set_callback(on_log, NULL);
    for (size_t k = 0; k < ZERO_ARRAY_LEN(cases); k++) {
        atomic_store(&straddles, 0);
        run(cases[k].ranks, cases[k].per_node, cases[k].h, ZERO_DTYPE_FP32, 3, 0, init_main);
        CHECK(atomic_load(&straddles) == cases[k].warnings,
              "%d ranks, nodes of %d, hpz %d: %d warnings about groups over two nodes "
              "(expected %d)",
              cases[k].ranks, cases[k].per_node, cases[k].h, atomic_load(&straddles),
              cases[k].warnings);
    }
    zero_log_set_callback(NULL, NULL);
}

int main(void) {
    node_layout();
    const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
    for (int k = 0; k < 2; k++)
        for (int M = 1; M <= 3; M += 2) run(4, 2, 2, dts[k], M, 0, rank_main);
    run(6, 3, 3, ZERO_DTYPE_FP32, 3, 0, rank_main);
    run(6, 3, 3, ZERO_DTYPE_BF16, 1, 0, rank_main);
    run(6, 2, 2, ZERO_DTYPE_FP32, 2, 0, rank_main);
    /* with qwZ: against the qwZ-only engine */
    run(4, 2, 2, ZERO_DTYPE_FP32, 3, 1, rank_main);
    run(4, 2, 2, ZERO_DTYPE_BF16, 1, 1, rank_main);
    /* bad values (the job's M is the stage, its qwz the nvme offload) */
    run(4, 2, 3, ZERO_DTYPE_FP32, 3, 0, bad_main);
    run(4, 2, 8, ZERO_DTYPE_FP32, 3, 0, bad_main);
    run(4, 2, 2, ZERO_DTYPE_FP32, 2, 0, bad_main);
    run(4, 2, 2, ZERO_DTYPE_FP32, 3, 1, bad_main);
    return check_report();
}
