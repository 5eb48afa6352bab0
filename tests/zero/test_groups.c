/* test_groups.c — stacked units sharded over partition groups smaller than the world.
 *
 * Four threads-backend ranks hold a dense unit (the world) and two "expert" units declared in
 * the expert-parallel layout with ep = 2 (zero_engine_add_group with color rank % 2): ranks
 * {0, 2} hold copy 0 of each expert unit, ranks {1, 3} copy 1. The larger expert is reduced
 * directly, the smaller one packed into a bucket after it, and the dense unit packed after that
 * (the bucket changes group). Each rank feeds gradients of its own over two micro-steps and three
 * steps at every stage, clipping off. References, each independent of the grouping:
 *  - every unit equals, bit for bit, a four-rank engine where each expert unit is one world unit
 *    of the logical shape (2 x the copy's) and rank r feeds its gradient into the slice of its
 *    copy (r % 2), zeros elsewhere: initial values, the world mean's scale and the stacking;
 *  - the reported gradient norm is the norm of the world means (every unit's reduced gradient
 *    over 4 ranks x 2 micro-steps), computed here in double from the gradients themselves;
 *  - the bytes sent per kind equal the engine's theory and a closed form per group;
 *  - the fingerprint (logical tensors) is the reference's;
 *  - the replica check passes (experts are compared within their group only) and catches a
 *    one-ulp change of an expert replica inside a group;
 *  - the memory report's model states split into dense and stacked parts, each equal to the
 *    closed form with N = its group size;
 *  - the checkpoint layout holds the logical tensors (dimension 0 doubled);
 *  - zero_engine_estimate_memory with the experts' group_size gives the same model states;
 *  - stage 3 with both offloads at nvme equals the RAM run bit for bit;
 *  - with bf16 compute (stages 0 and 3) the grouped run is still the logical run's, bit for bit;
 *  - a split into groups of unequal sizes is a named error on every rank.
 */
#include "check.h"
#include "ranks.h"
#include "toy_grads.h"
#include "zero/engine_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 3
#define MICRO 2
enum { DENSE, EXPERT_BIG, EXPERT_SMALL, UNITS };
static const size_t sizes[UNITS] = {300, 1000, 40};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define COPIES 2

typedef struct case_arg {
    int stage;
    int grouped;                         /* experts stacked in groups (else logical world units) */
    const char *nvme;                    /* both offloads at nvme under this directory, or NULL */
    zero_dtype_t dtype;                  /* compute dtype (0: fp32) */
    float weights[UNITS][COPIES * 1000]; /* after the last step: the unit whole (logical) */
    double norm[STEPS];
    uint64_t sent[ZERO_XFER_KIND_COUNT], theory[ZERO_XFER_KIND_COUNT];
    zero_engine_report_t rep;
    uint64_t fp;             /* zero_engine_fingerprint after the last step */
    size_t ckpt_dim0[UNITS]; /* the checkpoint layout's dimension 0 of each unit's tensor */
    zero_status_t st, replicas, drift, ckpt;
    char error[1024];
} case_arg_t;

/* Elements of unit u as declared: the copy's in the grouped engine, the logical unit's else. */
static size_t declared(const case_arg_t *a, int u) {
    return u == DENSE || a->grouped ? sizes[u] : COPIES * sizes[u];
}

static zero_status_t run_steps(zero_engine_t *eng, case_arg_t *a, int r) {
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < MICRO; m++) {
            for (int u = 0; u < UNITS; u++)
                if (!zero_unit_fetch(eng, u)) return ZERO_ERR_INTERNAL;
            for (int u = UNITS - 1; u >= 0; u--) { /* experts first, then the dense unit */
                void *g = zero_unit_grads(eng, u);
                if (!g) return ZERO_ERR_INTERNAL;
                /* the logical reference: rank r's gradient lands in its copy's slice */
                const size_t at = u != DENSE && !a->grouped ? (size_t)(r % COPIES) * sizes[u] : 0;
                for (size_t i = 0; i < sizes[u]; i++) { /* into a zeroed buffer, exact in bf16 */
                    if (a->dtype == ZERO_DTYPE_BF16)
                        ((uint16_t *)g)[at + i] = zero_fp32_to_bf16(toy_grad(r, u, s, m, i));
                    else
                        ((float *)g)[at + i] += toy_grad(r, u, s, m, i);
                }
                zero_status_t st = zero_unit_grads_done(eng, u);
                zero_unit_release(eng, u);
                if (st) return st;
            }
        }
        zero_step_stats_t ss;
        zero_status_t st = zero_engine_step(eng, &ss);
        if (st) return st;
        a->norm[s] = ss.grad_norm;
    }
    return ZERO_OK;
}

/* Unit u's weights whole, logical: every copy (zero_engine_state_gather), tensor by tensor. */
static zero_status_t read_unit(zero_engine_t *eng, const case_arg_t *a, int u, float *out) {
    int copies = 1;
    zero_status_t st = zero_engine_unit_group(eng, u, NULL, NULL, &copies);
    const size_t P = zero_engine_unit_padded_count(eng, u), n = declared(a, u);
    float *all = malloc((size_t)copies * P * sizeof *all);
    if (!st && !all) st = ZERO_ERR_OUT_OF_MEMORY;
    if (!st) st = zero_engine_state_gather(eng, u, ZERO_ENGINE_STATE_MASTER, all);
    for (int c = 0; !st && c < copies; c++) memcpy(out + c * n, all + c * P, n * sizeof *out);
    free(all);
    return st;
}

static void case_rank(zero_comm_t *comm, void *argp) {
    case_arg_t *a = argp;
    const int rank = zero_comm_rank(comm);
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = a->stage;
    p.comm = comm;
    p.grad_clip = 0.0f;
    p.grad_accum_steps = MICRO;
    p.persistence_threshold_elems = 0;
    p.reduce_bucket_bytes = 1400 * 4;
    p.total_steps = STEPS;
    p.compute_dtype = a->dtype ? a->dtype : ZERO_DTYPE_FP32;
    if (a->nvme) {
        p.offload_param.device = p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
        snprintf(p.offload_param.nvme_path, sizeof p.offload_param.nvme_path, "%s", a->nvme);
        snprintf(p.offload_optimizer.nvme_path, sizeof p.offload_optimizer.nvme_path, "%s",
                 a->nvme);
    }
    zero_engine_t *eng = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    int expert_group = 0;
    if (!st && a->grouped) st = zero_engine_add_group(eng, rank % COPIES, &expert_group);
    for (int u = 0; !st && u < UNITS; u++) {
        zero_tensor_desc_t t = {"w", 1, {declared(a, u)}, 0, ZERO_INIT_NORMAL, 0.1f};
        char name[16];
        snprintf(name, sizeof name, "u%d", u);
        st = zero_engine_add_unit_in(eng, u == DENSE ? 0 : expert_group, name, &t, 1, NULL);
    }
    if (!st) st = run_steps(eng, a, rank);
    for (int u = 0; !st && u < UNITS; u++) st = read_unit(eng, a, u, a->weights[u]);
    if (!st) st = zero_engine_fingerprint(eng, &a->fp);
    if (!st) {
        zero_engine_get_report(eng, &a->rep);
        memcpy(a->sent, a->rep.comm_sent_bytes_per_step_by_kind, sizeof a->sent);
        memcpy(a->theory, a->rep.comm_theory_bytes_per_step_by_kind, sizeof a->theory);
        a->replicas = zero_engine_check_replicas(eng);
        zero_ckpt_engine_layout_t layout;
        a->ckpt = zero_ckpt_engine_layout_init(&layout, eng);
        for (int u = 0; !a->ckpt && u < UNITS; u++)
            a->ckpt_dim0[u] = layout.layout.units[u].tensors[0].shape[0];
        if (!a->ckpt) zero_ckpt_engine_layout_free(&layout);
    }
    /* An expert replica drifts by one ulp on the last rank of its group: the group must see it.
     * Stage 3 holds shards, not replicas, of non-persistent units: nothing to compare there. */
    if (!st && a->grouped && !a->nvme && a->stage < 3) {
        if (rank == 3) {
            float x;
            st = zero_engine_params_read(eng, EXPERT_SMALL, 0, 1, &x);
            x = nextafterf(x, INFINITY);
            if (!st) st = zero_engine_params_write(eng, EXPERT_SMALL, 0, 1, &x);
        }
        if (!st) a->drift = zero_engine_check_replicas(eng);
        snprintf(a->error, sizeof a->error, "%s", a->drift ? zero_last_error() : "");
    }
    if (st) snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    a->st = st;
    zero_engine_free(eng);
}

static void run(int n, case_arg_t *a) {
    void *args[4];
    for (int r = 0; r < n; r++) a[r].st = ZERO_ERR_INTERNAL;
    for (int r = 0; r < n; r++) args[r] = &a[r];
    CHECK(run_ranks(n, 20.0, case_rank, args) == ZERO_OK, "clique");
    for (int r = 0; r < n; r++) CHECK(a[r].st == ZERO_OK, "rank %d: %s", r, a[r].error);
}

static int same(const float *x, const float *y, size_t n) { return !memcmp(x, y, n * sizeof *x); }

/* The norm of the step's mean gradients, from the gradients themselves: every unit's reduced
 * gradient (an expert copy's over its group of two) scaled as the world's mean, 1 / (4 x MICRO).
 * Sums in rank order, in fp32, as every reduction sums; squares in double. */
static double closed_norm(int s) {
    double sumsq = 0.0;
    for (int u = 0; u < UNITS; u++)
        for (int copy = 0; copy < (u == DENSE ? 1 : COPIES); copy++)
            for (size_t i = 0; i < sizes[u]; i++) {
                float acc = 0.0f;
                for (int m = 0; m < MICRO; m++) {
                    float red = 0.0f;
                    for (int r = 0; r < 4; r++)
                        if (u == DENSE || r % COPIES == copy) red += toy_grad(r, u, s, m, i);
                    acc += red;
                }
                const double mean = (double)acc / (4 * MICRO);
                sumsq += mean * mean;
            }
    return sqrt(sumsq);
}

/* The model states' theory of `kind` (0 dense, 1 stacked) at fp32: per unit padded P and shard S
 * over its group (dense 320 over 4 ranks, experts 1024 and 64 over 2). */
static void closed_states(int stage, int kind, double out[3]) {
    const double P = kind ? 1024 + 64 : 320, S = kind ? P / 2 : P / 4;
    out[0] = 4 * (stage == 3 ? S : P);
    out[1] = stage >= 2 ? 4 * S : 4 * P + 4 * S;
    out[2] = 8 * (stage == 0 ? P : S);
}

static void run_stage(int stage) {
    static case_arg_t grouped[4], world[4];
    memset(grouped, 0, sizeof grouped);
    memset(world, 0, sizeof world);
    for (int r = 0; r < 4; r++) {
        grouped[r].stage = world[r].stage = stage;
        grouped[r].grouped = 1;
    }
    run(4, grouped);
    run(4, world);
    pthread_mutex_lock(&lock);
    for (int r = 0; r < 4; r++) {
        const case_arg_t *g = &grouped[r];
        for (int u = 0; u < UNITS; u++) {
            const size_t n = sizes[u], c = u == DENSE ? 0 : (size_t)(r % COPIES);
            CHECK(same(g->weights[u], world[0].weights[u], u == DENSE ? n : COPIES * n) &&
                      same(g->weights[u] + c * n, world[r].weights[u] + c * n, n),
                  "stage %d rank %d: unit %d differs from the logical all-world run", stage, r, u);
        }
        CHECK(g->fp == world[0].fp, "stage %d rank %d: fingerprint differs from the logical run",
              stage, r);
        for (int s = 0; s < STEPS; s++) {
            const double want = closed_norm(s);
            CHECK(fabs(g->norm[s] - want) <= 1e-6 * want &&
                      fabs(world[r].norm[s] - want) <= 1e-6 * want,
                  "stage %d rank %d step %d: gradient norm %.17g (logical world run %.17g), "
                  "closed form %.17g",
                  stage, r, s + 1, g->norm[s], world[r].norm[s], want);
        }
        /* Per step, per rank: gradients (N_u - 1) x 4 S_u per micro-step (stage 0: one more
         * for the gradient all-gather); parameters at stages 1-2 (N_u - 1) x 4 S_u after the
         * step, at stage 3 once per micro-step (this test holds each unit fetched from its
         * forward use through its gradient: one fetch window per micro-step); control
         * 3 x (32 + 88): the record and, the units being declared by zero_engine_add_unit_in,
         * the rank's exact sum of squares (10 limbs and the inf/NaN flags). Padded sizes: dense 300
         * -> 320 over 4 (S 80); experts over 2: 1000 -> 1024 (S 512), 40 -> 64 (S 32). */
        const double peers = 3.0 * 4 * 80 + 1.0 * 4 * (512 + 32);
        const double grads = peers * MICRO + (stage == 0 ? peers : 0);
        const double params = stage == 0 ? 0 : stage < 3 ? peers : peers * MICRO;
        const double want[ZERO_XFER_KIND_COUNT] = {params, grads, 3 * (32.0 + 88.0)};
        for (int x = 0; x < ZERO_XFER_KIND_COUNT; x++)
            CHECK(g->sent[x] == want[x] && g->theory[x] == want[x],
                  "stage %d rank %d %s: sent %llu, theory %llu, closed form %.0f", stage, r,
                  zero_xfer_kind_name((zero_xfer_kind_t)x), (unsigned long long)g->sent[x],
                  (unsigned long long)g->theory[x], want[x]);
        for (int kind = 0; kind < 2; kind++) {
            double ms[3];
            closed_states(stage, kind, ms);
            for (int k = 0; k < 3; k++)
                CHECK(g->rep.model_state_split_theory_bytes[kind][k] == ms[k] &&
                          g->rep.model_state_split_bytes[kind][k] == ms[k] &&
                          g->rep.model_state_split_theory_bytes[0][k] +
                                  g->rep.model_state_split_theory_bytes[1][k] ==
                              g->rep.model_state_theory_bytes[k],
                      "stage %d rank %d: model state %d of the %s units: %zu live, %zu theory, "
                      "closed form %.0f",
                      stage, r, k, kind ? "stacked" : "dense",
                      g->rep.model_state_split_bytes[kind][k],
                      g->rep.model_state_split_theory_bytes[kind][k], ms[k]);
        }
        CHECK(g->ckpt == ZERO_OK && g->ckpt_dim0[DENSE] == sizes[DENSE] &&
                  g->ckpt_dim0[EXPERT_BIG] == COPIES * sizes[EXPERT_BIG] &&
                  g->ckpt_dim0[EXPERT_SMALL] == COPIES * sizes[EXPERT_SMALL],
              "stage %d rank %d: checkpoint layout of stacked units %s, dimension 0 %zu %zu %zu",
              stage, r, zero_status_str(g->ckpt), g->ckpt_dim0[0], g->ckpt_dim0[1],
              g->ckpt_dim0[2]);
        CHECK(g->replicas == ZERO_OK, "stage %d rank %d: replica check on equal replicas: %s",
              stage, r, zero_status_str(g->replicas));
        if (stage < 3) {
            /* only the group of ranks 1 and 3 holds the drifted replica */
            const zero_status_t drift_want = r % 2 ? ZERO_ERR_MISMATCH : ZERO_OK;
            CHECK(g->drift == drift_want && (r % 2 == 0 || strstr(g->error, "unit 'u2'")),
                  "stage %d rank %d: drift in group 1 gave %s '%s'", stage, r,
                  zero_status_str(g->drift), g->error);
        }
    }
    pthread_mutex_unlock(&lock);
    /* the estimate of the same declarations (experts with group_size 2) */
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = stage;
    p.persistence_threshold_elems = 0;
    zero_tensor_desc_t t[UNITS];
    zero_unit_decl_t d[UNITS];
    for (int u = 0; u < UNITS; u++) {
        t[u] = (zero_tensor_desc_t){"w", 1, {sizes[u]}, 0, ZERO_INIT_NORMAL, 0.1f};
        d[u] = (zero_unit_decl_t){&t[u], 1, 1, u == DENSE ? 0 : COPIES, 1};
    }
    zero_memory_estimate_t est;
    CHECK(zero_engine_estimate_memory(&p, 4, d, UNITS, &est) == ZERO_OK, "estimate: %s",
          zero_last_error());
    for (int k = 0; k < 3; k++) {
        double dense[3], stacked[3];
        closed_states(stage, 0, dense);
        closed_states(stage, 1, stacked);
        CHECK(est.model_state_bytes[k] == dense[k] + stacked[k],
              "stage %d: estimated model state %d %zu, closed form %.0f", stage, k,
              est.model_state_bytes[k], dense[k] + stacked[k]);
    }
    d[EXPERT_BIG].group_size = 3;
    CHECK(zero_engine_estimate_memory(&p, 4, d, UNITS, &est) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "group_size 3"),
          "estimate with group_size 3 of 4: %s", zero_last_error());
}

/* Stage 3 with the parameter shards, the gradient accumulators and the optimizer's states of
 * stacked units in swap files: the same bits as in RAM. */
static void run_nvme(const char *dir) {
    static case_arg_t ram[4], disk[4];
    memset(ram, 0, sizeof ram);
    memset(disk, 0, sizeof disk);
    for (int r = 0; r < 4; r++) {
        ram[r].stage = disk[r].stage = 3;
        ram[r].grouped = disk[r].grouped = 1;
        disk[r].nvme = dir;
    }
    run(4, ram);
    run(4, disk);
    for (int r = 0; r < 4; r++)
        for (int u = 0; u < UNITS; u++)
            CHECK(same(ram[r].weights[u], disk[r].weights[u], declared(&ram[r], u) * COPIES),
                  "nvme rank %d unit %d: differs from RAM", r, u);
}

/* bf16 compute: the 16-bit parameters' initial rounding, the fp32 master and the 16-bit
 * reductions of stacked units are still those of the logical world units, bit for bit. */
static void run_bf16(int stage) {
    static case_arg_t grouped[4], world[4];
    memset(grouped, 0, sizeof grouped);
    memset(world, 0, sizeof world);
    for (int r = 0; r < 4; r++) {
        grouped[r].stage = world[r].stage = stage;
        grouped[r].dtype = world[r].dtype = ZERO_DTYPE_BF16;
        grouped[r].grouped = 1;
    }
    run(4, grouped);
    run(4, world);
    for (int r = 0; r < 4; r++) {
        for (int u = 0; u < UNITS; u++)
            CHECK(same(grouped[r].weights[u], world[r].weights[u], COPIES * sizes[u]),
                  "bf16 stage %d rank %d: unit %d differs from the logical all-world run", stage, r,
                  u);
        CHECK(grouped[r].fp == world[0].fp, "bf16 stage %d rank %d: fingerprint", stage, r);
    }
}

/* Colors 0, 0, 0, 1: groups of 3 and 1 ranks cannot hold equal copies. */
static void uneven_rank(zero_comm_t *comm, void *argp) {
    case_arg_t *a = argp;
    zero_engine_params_t p = zero_engine_params_default();
    p.comm = comm;
    zero_engine_t *eng = NULL;
    a->st = zero_engine_init(&eng, &p);
    int g = 0;
    if (!a->st) a->drift = zero_engine_add_group(eng, zero_comm_rank(comm) == 3, &g);
    snprintf(a->error, sizeof a->error, "%s", zero_last_error());
    zero_engine_free(eng);
}

int main(void) {
    for (int stage = 0; stage <= 3; stage++) run_stage(stage);
    run_bf16(0);
    run_bf16(3);
    char dir[] = "/tmp/zero-groups-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    run_nvme(dir);
    rmdir(dir);
    static case_arg_t uneven[4];
    void *args[4];
    for (int r = 0; r < 4; r++) args[r] = &uneven[r];
    CHECK(run_ranks(4, 20.0, uneven_rank, args) == ZERO_OK, "clique");
    for (int r = 0; r < 4; r++)
        CHECK(!uneven[r].st && uneven[r].drift == ZERO_ERR_INVALID_ARG &&
                  strstr(uneven[r].error, "expected groups of equal size"),
              "rank %d: uneven split gave %s '%s'", r, zero_status_str(uneven[r].drift),
              uneven[r].error);
    /* a group that does not exist is a named error */
    zero_engine_t *eng = NULL;
    zero_engine_params_t p = zero_engine_params_default();
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init");
    zero_tensor_desc_t t = {"w", 1, {10}, 0, ZERO_INIT_NORMAL, 0.1f};
    CHECK(zero_engine_add_unit_in(eng, 3, "u", &t, 1, NULL) == ZERO_ERR_INVALID_ARG &&
              strstr(zero_last_error(), "partition group 3 does not exist"),
          "unknown group: %s", zero_last_error());
    zero_engine_free(eng);
    return check_report();
}
