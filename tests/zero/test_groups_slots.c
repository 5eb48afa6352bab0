/* test_groups_slots.c — source slots (zero_engine_set_unit_slots): expert units give the same
 * weights at every expert-parallel degree.
 *
 * A dense world unit and two experts units, each of E = 4 logical experts (250 and 10 elements
 * per expert). Every source rank r contributes a partial p_r to every element (an MoE expert's
 * gradient sums the partials of the tokens each rank routed to it). The partials are floats of
 * 24 significant bits over 2^-8 .. 2^8, so fp32 sums depend on their order (checked: the pairwise
 * order (p0 + p1) + (p2 + p3) differs from the rank order in many elements). Layouts over W ranks:
 *  - ep = 1: the experts units are world units of the logical shape; rank r feeds p_r;
 *  - ep > 1: stacked units over the groups of color rank % ep (E / ep experts per copy) with
 *    slots = ep; rank r (group rank g = r / ep, copy c = r % ep) feeds slot s with
 *    p_{g ep + s} restricted to its copy's slice.
 * Checks, W = 4 (ep 1, 2, 4) and W = 2 (ep 1, 2), stages 0-3, accumulation 1 and 3, fp32 and
 * bf16:
 *  - with gradient clipping active (every step clipped, checked), the weights fingerprint
 *    (logical tensors) is the same for every ep and stage of one (W, dtype, accumulation), on
 *    every rank, and so is the gradient norm, bitwise: the dense unit (zero_engine_add_unit)
 *    sums its squares in float64 over the same shards at every ep, the experts units
 *    (zero_engine_add_unit_in) exactly, whatever their cut;
 *  - the gradient norm equals, to float64 rounding, a closed form from the partials (rank-order
 *    sums in fp32, 16-bit ones rounded once; micro-steps accumulated in fp32), at every ep;
 *  - bytes sent per kind equal the engine's theory and a closed form per unit: a slotted unit
 *    sends (n - 1) x ep x S_u x c per micro-step (its all-to-alls) instead of a reduce-scatter;
 *  - memory: the stacked units' gradient state (stages 0-1: slots x P_u working buffer + the
 *    accumulator) against the closed form, live gradients equal to the theory, and
 *    zero_engine_estimate_memory with the slots giving the same model states and at least the
 *    measured peak of gradient memory;
 *  - stage 3 with both offloads at nvme gives the RAM runs' fingerprint and norms, without
 *    clipping (overlap_step updating units in backward, their share of the norm taken then) and
 *    with it (the accumulators' shares taken as they are written to their files), and so do two
 * simulated nodes of two ranks (hierarchical reduce-scatters), with bytes in all and to the other
 * node equal to their theory;
 *  - bad slots (0, not the copies, on a world unit, after training started; the estimate's) are
 *    named errors.
 * Built with SLOTS_MPI: under mpirun -np 4, MPI ranks (ep 2 and 4, stages 0 and 3, fp32 and
 * bf16, accumulation 3) give the fingerprint of thread ranks.
 */
#include "check.h"
#include "ranks.h"
#include "zero/engine.h"
#ifdef SLOTS_MPI
#include "mpi_harness.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define E 4 /* logical experts per experts unit */
#define STEPS 2
/* gradient_clipping: below every step's norm (the means of partials of magnitude up to 2^8 over
 * 1340 elements), so that every step is clipped (checked) */
#define CLIP 0.5f
#define MAX_WORLD 4
enum { DENSE, BIG, SMALL, UNITS };
/* dense: its elements; experts units: elements per expert */
static const size_t esize[UNITS] = {300, 250, 10};

typedef struct case_arg {
    int world, ep, stage, accum;
    zero_dtype_t dtype;
    const char *nvme;   /* both offloads at nvme under this directory, or NULL */
    int ranks_per_node; /* simulated nodes of this many ranks (0: one node) */
    float clip;         /* gradient_clipping */
    zero_status_t st;
    char error[1024];
    uint64_t fp;
    double norm[STEPS];
    int in_backward; /* units updated in backward over the run (overlap_step) */
    int clipped;     /* steps clipped */
    zero_engine_report_t rep;
} case_arg_t;

/* Elements of unit u as declared: the logical unit at ep 1, one copy's E / ep experts else. */
static size_t declared(int u, int ep) {
    return u == DENSE ? esize[u] : (size_t)(E / ep) * esize[u];
}

/* Source rank r's partial for element i of logical unit u at step s, micro-step m: a mantissa of
 * 24 bits, a sign and an exponent in [-8, 7] from a hash. */
static float partial(int r, int u, int s, int m, size_t i) {
    uint64_t h = ((uint64_t)r * 1000003u + (uint64_t)u * 7919u + (uint64_t)s * 104729u +
                  (uint64_t)m * 1299709u + i) *
                 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    const float mant = 1.0f + (float)(h & 0x7fffff) / 8388608.0f;
    return ldexpf((h >> 23) & 1 ? -mant : mant, (int)((h >> 24) % 16) - 8);
}

static void put(void *g, zero_dtype_t dt, size_t k, float x) {
    if (dt == ZERO_DTYPE_BF16)
        ((uint16_t *)g)[k] = zero_fp32_to_bf16(x);
    else
        ((float *)g)[k] = x;
}

/* Rank `rank`'s gradient buffer of unit u: its own partial (dense units, experts at ep 1), or
 * each slot's source partial over its copy's slice. */
static void feed(const case_arg_t *a, zero_engine_t *eng, int rank, int u, int s, int m, void *g) {
    const size_t n = declared(u, a->ep);
    if (u == DENSE || a->ep == 1) {
        for (size_t i = 0; i < n; i++) put(g, a->dtype, i, partial(rank, u, s, m, i));
        return;
    }
    const size_t P = zero_engine_unit_padded_count(eng, u);
    const int copy = rank % a->ep, grank = rank / a->ep;
    for (int slot = 0; slot < a->ep; slot++)
        for (size_t i = 0; i < n; i++)
            put(g, a->dtype, (size_t)slot * P + i,
                partial(grank * a->ep + slot, u, s, m, (size_t)copy * n + i));
}

static case_arg_t case_of(int world, int ep, int stage, int accum, zero_dtype_t dt) {
    return (case_arg_t){
        .world = world, .ep = ep, .stage = stage, .accum = accum, .dtype = dt, .clip = CLIP};
}

static zero_engine_params_t params_of(const case_arg_t *a, zero_comm_t *comm) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = a->stage;
    p.comm = comm;
    p.grad_clip = a->clip;
    p.grad_accum_steps = a->accum;
    p.persistence_threshold_elems = 0;
    p.reduce_bucket_bytes = 1400 * 4; /* the ep-1 experts: one direct, one packed */
    p.total_steps = STEPS;
    p.compute_dtype = a->dtype;
    if (a->nvme) {
        p.offload_param.device = p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s", a->nvme);
        snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s",
                 a->nvme);
    }
    return p;
}

/* The engine of the case's layout: units declared, experts stacked with slots at ep > 1. */
static zero_status_t build(const case_arg_t *a, zero_comm_t *comm, zero_engine_t **out) {
    zero_engine_params_t p = params_of(a, comm);
    zero_status_t st = zero_engine_init(out, &p);
    int group = 0;
    if (!st && a->ep > 1) st = zero_engine_add_group(*out, zero_comm_rank(comm) % a->ep, &group);
    for (int u = 0; !st && u < UNITS; u++) {
        zero_tensor_desc_t t = {"w", 1, {declared(u, a->ep)}, 0, ZERO_INIT_NORMAL, 0.1f};
        char name[16];
        snprintf(name, sizeof name, "u%d", u);
        st = u == DENSE ? zero_engine_add_unit(*out, name, &t, 1, NULL)
                        : zero_engine_add_unit_in(*out, group, name, &t, 1, NULL);
        if (!st && u != DENSE && a->ep > 1) st = zero_engine_set_unit_slots(*out, u, a->ep);
    }
    return st;
}

static zero_status_t train(zero_engine_t *eng, case_arg_t *a, int rank) {
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < a->accum; m++) {
            for (int u = 0; u < UNITS; u++)
                if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
            for (int u = UNITS - 1; u >= 0; u--) {
                void *g = zero_unit_grads(eng, u);
                if (!g) return ZERO_ERR_INTERNAL;
                feed(a, eng, rank, u, s, m, g);
                zero_status_t st = zero_unit_grads_done(eng, u);
                zero_unit_release(eng, u);
                if (st) return st;
            }
        }
        zero_step_stats_t ss;
        zero_status_t st = zero_engine_step(eng, &ss);
        if (st) return st;
        a->norm[s] = ss.grad_norm;
        a->in_backward += ss.units_in_backward;
        a->clipped += ss.clipped;
    }
    return ZERO_OK;
}

static void case_rank(zero_comm_t *comm, void *argp) {
    case_arg_t *a = argp;
    zero_engine_t *eng = NULL;
    zero_status_t st = build(a, comm, &eng);
    if (!st) st = train(eng, a, zero_comm_rank(comm));
    if (!st) st = zero_engine_fingerprint(eng, &a->fp);
    if (!st) zero_engine_get_report(eng, &a->rep);
    if (st) snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    a->st = st;
    zero_engine_free(eng);
}

static void run(case_arg_t *a) {
    void *args[MAX_WORLD];
    for (int r = 0; r < a[0].world; r++) {
        a[r] = a[0];
        a[r].st = ZERO_ERR_INTERNAL;
        args[r] = &a[r];
    }
    zero_comm_params_t cp = zero_comm_params_default();
    cp.timeout_s = 30.0;
    cp.ranks_per_node = a[0].ranks_per_node;
    CHECK(run_ranks_with(a[0].world, &cp, case_rank, args) == ZERO_OK, "clique");
    for (int r = 0; r < a[0].world; r++)
        CHECK(a[r].st == ZERO_OK, "W %d ep %d stage %d rank %d: %s", a[0].world, a[0].ep,
              a[0].stage, r, a[r].error);
}

#ifndef SLOTS_MPI
/* What the model stores for a partial: the value in the compute dtype (bf16: rounded). */
static float stored(float x, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(zero_fp32_to_bf16(x)) : x;
}

/* The step's gradient norm from the partials: per element the rank-order sum of every source's
 * stored partial in fp32 (16-bit: rounded once, as the reduction does), accumulated over the
 * micro-steps in fp32, the world mean squared in double. */
static double closed_norm(const case_arg_t *a, int s) {
    double sumsq = 0.0;
    for (int u = 0; u < UNITS; u++) {
        const size_t n = u == DENSE ? esize[u] : E * esize[u];
        for (size_t i = 0; i < n; i++) {
            float acc = 0.0f;
            for (int m = 0; m < a->accum; m++) {
                float red = stored(partial(0, u, s, m, i), a->dtype);
                for (int r = 1; r < a->world; r++) red += stored(partial(r, u, s, m, i), a->dtype);
                acc += stored(red, a->dtype);
            }
            const double mean = (double)acc / (a->world * a->accum);
            sumsq += mean * mean;
        }
    }
    return sqrt(sumsq);
}

/* Unit u's group size, padded elements and slots in the case's layout (the padding rule:
 * 16-element tensor spans, padded to a multiple of 16 x group size). */
static void layout(const case_arg_t *a, int u, size_t *n, size_t *P, size_t *k) {
    const int stacked = u != DENSE && a->ep > 1;
    *n = stacked ? (size_t)(a->world / a->ep) : (size_t)a->world;
    *k = stacked ? (size_t)a->ep : 1;
    const size_t span = (declared(u, a->ep) + 15) / 16 * 16, q = 16 * *n;
    *P = (span + q - 1) / q * q;
}

/* Bytes each rank sends per step, by kind (params, grads, control): per micro-step a
 * reduce-scatter (n - 1) S c, or a slotted unit's all-to-alls (n - 1) k S c; stage 0 gathers
 * the reduced gradient ((n - 1) S a), stages 1-2 the parameters after the step, stage 3 once per
 * micro-step (each unit is held from its fetch through its gradient: one window); the control
 * record (W - 1) x (32 + 88), the units of zero_engine_add_unit_in adding the rank's exact sum
 * of squares (10 64-bit limbs and the inf/NaN flags). */
static void closed_bytes(const case_arg_t *a, double out[ZERO_XFER_KIND_COUNT]) {
    const double c = a->dtype == ZERO_DTYPE_BF16 ? 2 : 4, acc = 4, M = a->accum;
    out[0] = out[1] = 0;
    for (int u = 0; u < UNITS; u++) {
        size_t n, P, k;
        layout(a, u, &n, &P, &k);
        const double peers = (double)(n - 1) * (double)(P / n);
        out[1] += M * peers * (double)k * c + (a->stage == 0 ? peers * acc : 0);
        out[0] += a->stage == 0 ? 0 : a->stage < 3 ? peers * c : M * peers * c;
    }
    out[2] = (a->world - 1) * (32.0 + 88.0);
}

/* The stacked units' gradient state: stages 0-1 the slots' working buffer k P c and the
 * accumulator S a; stages 2-3 the accumulator. */
static double closed_stacked_grads(const case_arg_t *a) {
    const double c = a->dtype == ZERO_DTYPE_BF16 ? 2 : 4;
    double bytes = 0;
    for (int u = BIG; a->ep > 1 && u < UNITS; u++) {
        size_t n, P, k;
        layout(a, u, &n, &P, &k);
        bytes += 4.0 * (double)(P / n) + (a->stage < 2 ? (double)(k * P) * c : 0);
    }
    return bytes;
}

/* The estimate of the case's declarations: the report's model states, at least its peaks. */
static void check_estimate(const case_arg_t *a) {
    zero_engine_params_t p = params_of(a, NULL);
    zero_tensor_desc_t t[UNITS];
    zero_unit_decl_t d[UNITS];
    for (int u = 0; u < UNITS; u++) {
        t[u] = (zero_tensor_desc_t){"w", 1, {declared(u, a->ep)}, 0, ZERO_INIT_NORMAL, 0.1f};
        const int stacked = u != DENSE && a->ep > 1;
        d[u] = (zero_unit_decl_t){&t[u], 1, 1, stacked ? a->world / a->ep : 0, stacked ? a->ep : 1};
    }
    zero_memory_estimate_t est;
    CHECK(zero_engine_estimate_memory(&p, a->world, d, UNITS, &est) == ZERO_OK, "estimate: %s",
          zero_last_error());
    for (int k = 0; k < 3; k++)
        CHECK(est.model_state_bytes[k] == a->rep.model_state_theory_bytes[k],
              "W %d ep %d stage %d: estimated model state %d %zu, report's theory %zu", a->world,
              a->ep, a->stage, k, est.model_state_bytes[k], a->rep.model_state_theory_bytes[k]);
    /* the bound of the slots' buffers (at ep 1 the stage 2-3 pool of working buffers, one per
     * padded size, can exceed the estimate's three largest units: not the slots' matter) */
    CHECK(a->ep == 1 || est.bytes[ZERO_MEM_GRADS] >= a->rep.memory_peak_bytes[ZERO_MEM_GRADS],
          "W %d ep %d stage %d %s: estimated gradient memory %zu below the peak %zu", a->world,
          a->ep, a->stage, zero_dtype_name(a->dtype), est.bytes[ZERO_MEM_GRADS],
          a->rep.memory_peak_bytes[ZERO_MEM_GRADS]);
}

/* Every ep and stage of one (world, dtype, accumulation) against the first run's fingerprint. */
static void run_world(int world, zero_dtype_t dt, int accum) {
    static case_arg_t runs[MAX_WORLD];
    uint64_t ref = 0;
    double ref_norm[STEPS] = {0};
    for (int ep = 1; ep <= world; ep *= 2)
        for (int stage = 0; stage <= 3; stage++) {
            memset(runs, 0, sizeof runs);
            runs[0] = case_of(world, ep, stage, accum, dt);
            run(runs);
            if (ep == 1 && stage == 0) {
                ref = runs[0].fp;
                memcpy(ref_norm, runs[0].norm, sizeof ref_norm);
            }
            const char *dn = zero_dtype_name(dt);
            double bytes[ZERO_XFER_KIND_COUNT];
            closed_bytes(&runs[0], bytes);
            for (int r = 0; r < world; r++) {
                const case_arg_t *a = &runs[r];
                CHECK(a->fp == ref,
                      "W %d %s accum %d ep %d stage %d rank %d: fingerprint %016llx, "
                      "ep 1 stage 0 %016llx",
                      world, dn, accum, ep, stage, r, (unsigned long long)a->fp,
                      (unsigned long long)ref);
                CHECK(a->clipped == STEPS,
                      "W %d %s accum %d ep %d stage %d rank %d: %d of %d "
                      "steps clipped",
                      world, dn, accum, ep, stage, r, a->clipped, STEPS);
                for (int s = 0; s < STEPS; s++) {
                    CHECK(a->norm[s] == ref_norm[s],
                          "W %d %s accum %d ep %d stage %d rank %d step %d: norm %.17g, ep 1 "
                          "stage 0 %.17g",
                          world, dn, accum, ep, stage, r, s + 1, a->norm[s], ref_norm[s]);
                    const double want = closed_norm(a, s);
                    CHECK(fabs(a->norm[s] - want) <= 1e-12 * want,
                          "W %d %s accum %d ep %d stage %d rank %d step %d: norm %.17g, closed "
                          "form %.17g",
                          world, dn, accum, ep, stage, r, s + 1, a->norm[s], want);
                }
                for (int x = 0; x < ZERO_XFER_KIND_COUNT; x++)
                    CHECK(a->rep.comm_sent_bytes_per_step_by_kind[x] == bytes[x] &&
                              a->rep.comm_theory_bytes_per_step_by_kind[x] == bytes[x],
                          "W %d %s accum %d ep %d stage %d rank %d %s: sent %llu, theory %llu, "
                          "closed form %.0f",
                          world, dn, accum, ep, stage, r, zero_xfer_kind_name((zero_xfer_kind_t)x),
                          (unsigned long long)a->rep.comm_sent_bytes_per_step_by_kind[x],
                          (unsigned long long)a->rep.comm_theory_bytes_per_step_by_kind[x],
                          bytes[x]);
                const double grads = closed_stacked_grads(a);
                CHECK(a->rep.model_state_split_bytes[1][1] == grads &&
                          a->rep.model_state_split_theory_bytes[1][1] == grads &&
                          a->rep.memory_bytes[ZERO_MEM_GRADS] ==
                              a->rep.memory_theory_bytes[ZERO_MEM_GRADS],
                      "W %d %s accum %d ep %d stage %d rank %d: stacked gradients %zu live, %zu "
                      "theory, closed form %.0f; gradient memory %zu live, %zu theory",
                      world, dn, accum, ep, stage, r, a->rep.model_state_split_bytes[1][1],
                      a->rep.model_state_split_theory_bytes[1][1], grads,
                      a->rep.memory_bytes[ZERO_MEM_GRADS],
                      a->rep.memory_theory_bytes[ZERO_MEM_GRADS]);
            }
            check_estimate(&runs[0]);
        }
}

/* The partials do depend on the order of their sum: otherwise the fingerprints above would
 * agree whatever order the reductions used. */
static void check_order_matters(void) {
    size_t differ = 0;
    for (size_t i = 0; i < E * esize[BIG]; i++) {
        float p[4];
        for (int r = 0; r < 4; r++) p[r] = partial(r, BIG, 0, 0, i);
        const float ranks = ((p[0] + p[1]) + p[2]) + p[3], pairs = (p[0] + p[1]) + (p[2] + p[3]);
        differ += memcmp(&ranks, &pairs, sizeof ranks) != 0;
    }
    CHECK(differ > E * esize[BIG] / 10, "rank-order and pairwise sums differ in %zu of %zu", differ,
          (size_t)(E * esize[BIG]));
}

/* Stage 3 with both offloads at nvme (the accumulators in swap files): the RAM runs'
 * fingerprint and norms, without clipping (overlap_step's updates in backward) and with it (no
 * update in backward: clipping needs the norm first). */
static void run_nvme(const char *dir) {
    static case_arg_t ram[MAX_WORLD], disk[MAX_WORLD];
    for (int c = 0; c < 4; c++) {
        const int ep = c & 1 ? 4 : 2, clip = c >= 2;
        memset(ram, 0, sizeof ram);
        memset(disk, 0, sizeof disk);
        ram[0] = case_of(4, ep, 3, 3, ZERO_DTYPE_FP32);
        ram[0].clip = clip ? CLIP : 0.0f;
        disk[0] = ram[0];
        disk[0].nvme = dir;
        run(ram);
        run(disk);
        for (int r = 0; r < 4; r++)
            CHECK(disk[r].fp == ram[0].fp &&
                      !memcmp(disk[r].norm, ram[0].norm, sizeof ram[0].norm) &&
                      (disk[r].in_backward > 0) == !clip && disk[r].clipped == (clip ? STEPS : 0),
                  "nvme ep %d clip %d rank %d: fingerprint %016llx, RAM %016llx; norm %.17g, RAM "
                  "%.17g; %d units updated in backward, %d steps clipped",
                  ep, clip, r, (unsigned long long)disk[r].fp, (unsigned long long)ram[0].fp,
                  disk[r].norm[0], ram[0].norm[0], disk[r].in_backward, disk[r].clipped);
    }
}

/* Two nodes of two ranks: the world units' reduce-scatters (ep 1) run hierarchically, carrying
 * each block's partial sum node to node in rank order, and the dense unit's at every ep; the
 * slots' all-to-alls inside the groups cross nodes too. The one-node fingerprint, and the bytes
 * their theory. */
static void run_nodes(void) {
    static case_arg_t one[MAX_WORLD], two[MAX_WORLD];
    for (int d = 0; d < 2; d++) {
        const zero_dtype_t dt = d ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32;
        memset(one, 0, sizeof one);
        one[0] = case_of(4, 1, 0, 3, dt);
        run(one);
        for (int ep = 1; ep <= 4; ep *= 2)
            for (int stage = 0; stage <= 3; stage += 3) {
                memset(two, 0, sizeof two);
                two[0] = case_of(4, ep, stage, 3, dt);
                two[0].ranks_per_node = 2;
                run(two);
                for (int r = 0; r < 4; r++) {
                    const zero_engine_report_t *rep = &two[r].rep;
                    CHECK(two[r].fp == one[0].fp &&
                              rep->comm_bytes_per_step == rep->comm_theory_bytes_per_step &&
                              rep->comm_inter_node_bytes_per_step ==
                                  rep->comm_inter_node_theory_bytes_per_step &&
                              rep->comm_inter_node_bytes_per_step > 0,
                          "2 nodes %s ep %d stage %d rank %d: fingerprint %016llx, one node "
                          "%016llx; sent %llu (theory %llu), to the other node %llu (theory %llu)",
                          zero_dtype_name(dt), ep, stage, r, (unsigned long long)two[r].fp,
                          (unsigned long long)one[0].fp,
                          (unsigned long long)rep->comm_bytes_per_step,
                          (unsigned long long)rep->comm_theory_bytes_per_step,
                          (unsigned long long)rep->comm_inter_node_bytes_per_step,
                          (unsigned long long)rep->comm_inter_node_theory_bytes_per_step);
                }
            }
    }
}

/* Bad slots on two ranks (copies 2): named errors. */
static void errors_rank(zero_comm_t *comm, void *argp) {
    case_arg_t *a = argp;
    zero_engine_t *eng = NULL;
    a->st = build(a, comm, &eng); /* ep 2: the experts with slots 2 */
    struct {
        int unit, slots;
        const char *want;
    } bad[] = {{BIG, 0, "slots 0 is invalid"},
               {BIG, 3, "expected 1, or the unit's copies 2"},
               {DENSE, 2, "a unit with one copy takes 1"},
               {UNITS, 1, "no unit 3"}};
    for (size_t i = 0; !a->st && i < sizeof bad / sizeof bad[0]; i++)
        if (zero_engine_set_unit_slots(eng, bad[i].unit, bad[i].slots) != ZERO_ERR_INVALID_ARG ||
            !strstr(zero_last_error(), bad[i].want)) {
            a->st = ZERO_ERR_INTERNAL;
            snprintf(a->error, sizeof a->error, "slots %d on unit %d: '%s'", bad[i].slots,
                     bad[i].unit, zero_last_error());
        }
    if (!a->st && zero_engine_unit_slots(eng, BIG) != 2) a->st = ZERO_ERR_INTERNAL;
    if (!a->st) a->st = train(eng, a, zero_comm_rank(comm));
    if (!a->st && (zero_engine_set_unit_slots(eng, SMALL, 1) != ZERO_ERR_INVALID_ARG ||
                   !strstr(zero_last_error(), "after training started"))) {
        a->st = ZERO_ERR_INTERNAL;
        snprintf(a->error, sizeof a->error, "slots after training: '%s'", zero_last_error());
    }
    zero_engine_free(eng);
}

static void run_errors(void) {
    static case_arg_t a[MAX_WORLD];
    memset(a, 0, sizeof a);
    a[0] = case_of(2, 2, 1, 1, ZERO_DTYPE_FP32);
    void *args[2];
    for (int r = 0; r < 2; r++) {
        a[r] = a[0];
        args[r] = &a[r];
    }
    CHECK(run_ranks(2, 30.0, errors_rank, args) == ZERO_OK, "clique");
    for (int r = 0; r < 2; r++) CHECK(a[r].st == ZERO_OK, "errors rank %d: %s", r, a[r].error);
    zero_engine_params_t p = zero_engine_params_default();
    zero_tensor_desc_t t = {"w", 1, {100}, 0, ZERO_INIT_NORMAL, 0.1f};
    zero_unit_decl_t d = {&t, 1, 1, 2, 3};
    zero_memory_estimate_t est;
    CHECK(zero_engine_estimate_memory(&p, 4, &d, 1, &est) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "slots 3"),
          "estimate with slots 3 for groups of 2 of 4: %s", zero_last_error());
}

int main(void) {
    check_order_matters();
    for (int accum = 1; accum <= 3; accum += 2) {
        run_world(4, ZERO_DTYPE_FP32, accum);
        run_world(4, ZERO_DTYPE_BF16, accum);
        run_world(2, ZERO_DTYPE_FP32, accum);
        run_world(2, ZERO_DTYPE_BF16, accum);
    }
    char dir[] = "/tmp/zero-slots-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    run_nvme(dir);
    rmdir(dir);
    run_nodes();
    run_errors();
    return check_report();
}
#else
int main(void) {
    zero_comm_t *comm = mpi_harness_init(NULL);
    if (!comm) return 1;
    const int rank = zero_comm_rank(comm);
    for (int c = 0; c < 8; c++) {
        case_arg_t mine =
            case_of(4, c & 1 ? 4 : 2, c & 2 ? 3 : 0, 3, c & 4 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32);
        case_rank(comm, &mine);
        CHECK(mine.st == ZERO_OK, "mpi ep %d stage %d: %s", mine.ep, mine.stage, mine.error);
        if (rank != 0) continue;
        static case_arg_t th[MAX_WORLD];
        memset(th, 0, sizeof th);
        th[0] = mine;
        run(th);
        CHECK(th[0].fp == mine.fp, "%s ep %d stage %d: mpi %016llx, threads %016llx",
              zero_dtype_name(mine.dtype), mine.ep, mine.stage, (unsigned long long)mine.fp,
              (unsigned long long)th[0].fp);
        printf("%s ep %d stage %d: mpi %016llx threads %016llx\n", zero_dtype_name(mine.dtype),
               mine.ep, mine.stage, (unsigned long long)mine.fp, (unsigned long long)th[0].fp);
    }
    return mpi_harness_finish(comm);
}
#endif
