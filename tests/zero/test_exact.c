/* test_exact.c — two ranks, one unit of 15 elements (padded to 32: rank 0 owns [0, 16) with one
 * padding element, rank 1 owns [16, 32), only padding), on every stage.
 *
 * Oracles written here by hand: each rank's reduced gradient shard is the float sum g0 + g1 in
 * rank order (zeros on rank 1); the norm is that of the mean (g0 + g1) / 2; the first AdamW step
 * with bias correction gives m^ = g, v^ = g^2, so p' = p - lr * (g / (|g| + eps) + wd * p) — a
 * sign step plus decay; padding stays zero. Then stage-3 residency on a four-unit toy model: the
 * resident bytes (live parameter bytes plus the gather buffers lent to units, i.e. the pool
 * minus its idle part; an idle pooled buffer is not a resident unit) equal, with prefetch off
 * after every fetch and release, the shards plus the persistent unit plus exactly the units
 * held; with prefetch on they never exceed that plus the live-parameter cap. The pool itself is
 * checked against this test's formula (each unit has its own padded size and is gathered at
 * most once at a time, so it ends up holding one buffer per non-persistent unit), the live
 * communication bytes against the pool plus the two reduce-bucket slots, and the allocator's
 * call count: after the first step, fetches allocate nothing (only the gradient buffers are).
 */
#include "check.h"
#include "ranks.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N15 15
static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
/* Evaluates cond BEFORE taking the lock: cond may be a collective call. */
#define LCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        int ok_ = (cond);                                                                          \
        pthread_mutex_lock(&check_lock);                                                           \
        CHECK(ok_, __VA_ARGS__);                                                                   \
        pthread_mutex_unlock(&check_lock);                                                         \
    } while (0)

static float w_init(int i) { return 0.05f * (float)(i - 7); }
static float g_of(int r, int i) {
    return (float)(i + 1) * (r == 0 ? 0.5f : -0.25f) + (i % 3 == 0 ? 0.3f * (float)r : 0.0f);
}

typedef struct exact_arg {
    int stage;
} exact_arg_t;

static void exact_rank(zero_comm_t *comm, void *argp) {
    const exact_arg_t *a = argp;
    const int rank = zero_comm_rank(comm);
    const float lr = 0.1f, wd = 0.01f;
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = a->stage;
    p.comm = comm;
    p.lr = lr;
    p.weight_decay = wd;
    p.grad_clip = 0.0f;
    p.schedule = ZERO_LR_CONSTANT;
    p.persistence_threshold_elems = 0;
    zero_engine_t *eng = NULL;
    LCHECK(zero_engine_init(&eng, &p) == ZERO_OK, "stage %d init: %s", a->stage, zero_last_error());
    if (!eng) return;
    zero_tensor_desc_t t = {"w", 1, {N15}, 0, ZERO_INIT_ZEROS, 0};
    LCHECK(zero_engine_add_unit(eng, "u", &t, 1, NULL) == ZERO_OK, "add unit");
    size_t lo, S;
    zero_engine_shard_range(eng, 0, &lo, &S);
    LCHECK(zero_engine_unit_padded_count(eng, 0) == 32 && S == 16 && lo == (size_t)rank * 16,
           "layout: padded %zu shard [%zu, +%zu)", zero_engine_unit_padded_count(eng, 0), lo, S);
    /* Write the initial weights where this rank may (stage 3: its shard only). */
    float w[32] = {0};
    for (int i = 0; i < N15; i++) w[i] = w_init(i);
    if (a->stage < 3)
        zero_engine_params_write(eng, 0, 0, N15, w);
    else if (lo < N15)
        zero_engine_params_write(eng, 0, lo, N15 - lo, w + lo);

    const float *full = zero_unit_fetch(eng, 0);
    int ok = full != NULL;
    for (int i = 0; ok && i < 32; i++) ok = full[i] == w[i];
    LCHECK(ok, "stage %d rank %d: fetched parameters differ from the written ones", a->stage, rank);
    zero_unit_release(eng, 0);
    zero_unit_fetch(eng, 0);
    float *g = zero_unit_grads(eng, 0);
    for (int i = 0; i < N15; i++) g[i] += g_of(rank, i);
    LCHECK(zero_unit_grads_done(eng, 0) == ZERO_OK, "grads_done");
    zero_unit_release(eng, 0);

    float shard[16];
    LCHECK(zero_engine_grads_read(eng, 0, lo, S, shard) == ZERO_OK, "grads_read: %s",
           zero_last_error());
    int bad = 0;
    for (int k = 0; k < 16; k++) {
        int i = (int)lo + k;
        float want = i < N15 ? g_of(0, i) + g_of(1, i) : 0.0f;
        bad += shard[k] != want;
    }
    LCHECK(bad == 0, "stage %d rank %d: %d reduced gradient elements differ from g0 + g1", a->stage,
           rank, bad);

    zero_step_stats_t st;
    LCHECK(zero_engine_step(eng, &st) == ZERO_OK, "step: %s", zero_last_error());
    double sq = 0;
    for (int i = 0; i < N15; i++) {
        double s = (double)(g_of(0, i) + g_of(1, i));
        sq += s * s;
    }
    double norm = sqrt(sq) / 2;
    LCHECK(fabs(st.grad_norm - norm) <= 1e-12 * norm, "norm %.15g, want %.15g", st.grad_norm, norm);
    float now[32];
    size_t rlo = a->stage < 3 ? 0 : lo, rn = a->stage < 3 ? 32 : S;
    zero_engine_params_read(eng, 0, rlo, rn, now);
    bad = 0;
    for (size_t k = 0; k < rn; k++) {
        int i = (int)(rlo + k);
        double want = 0;
        if (i < N15) {
            double gi = (double)(g_of(0, i) + g_of(1, i)) / 2, pi = w_init(i);
            want = pi - lr * (gi / (fabs(gi) + 1e-8) + wd * pi);
        }
        if (fabs(now[k] - want) > 1e-6) {
            if (bad++ < 3)
                fprintf(stderr, "  stage %d rank %d element %d: %.8f, want %.8f\n", a->stage, rank,
                        i, (double)now[k], want);
        }
    }
    LCHECK(bad == 0, "stage %d rank %d: %d parameters differ from the hand-computed step", a->stage,
           rank, bad);
    zero_engine_free(eng);
}

/* ---------------------------------------------------------------------------- residency */

#define UNITS 4
static const size_t unit_n[UNITS] = {40, 300, 170, 500}; /* unit 0 is persistent (<= 50) */

typedef struct res_arg {
    int prefetch;
} res_arg_t;

/* Parameter bytes resident for compute: shards, persistent units and the gather buffers lent
 * to units now (idle pooled buffers excluded). */
static size_t live_params(zero_engine_t *eng) {
    zero_mem_stats_t ms;
    zero_mem_get_stats(zero_engine_mem(eng), &ms);
    zero_engine_report_t rep;
    zero_engine_get_report(eng, &rep);
    return ms.live_bytes[ZERO_MEM_PARAMS] + rep.gather_pool_bytes - rep.gather_pool_idle_bytes;
}

/* Counting allocator: how many blocks the engine asked for. */
typedef struct count_alloc {
    int calls;
} count_alloc_t;

static void *counting_alloc(void *user, size_t bytes, size_t align) {
    ((count_alloc_t *)user)->calls++;
    return aligned_alloc(align, (bytes + align - 1) / align * align);
}

static void counting_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

static void residency_rank(zero_comm_t *comm, void *argp) {
    const res_arg_t *a = argp;
    const int N = zero_comm_size(comm);
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = 3;
    p.comm = comm;
    p.persistence_threshold_elems = 50;
    p.prefetch_bucket_elems = a->prefetch ? 1000 : 0;
    p.max_live_elems = 700;
    count_alloc_t counter = {0};
    zero_allocator_t al = {counting_alloc, counting_free, &counter};
    zero_mem_t *mem = NULL;
    LCHECK(zero_mem_init(&mem, &al) == ZERO_OK, "mem: %s", zero_last_error());
    if (!mem) return;
    p.mem = mem;
    zero_engine_t *eng = NULL;
    LCHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init: %s", zero_last_error());
    if (!eng) {
        zero_mem_free_domain(mem);
        return;
    }
    size_t P[UNITS], base = 0, pool = 0, Ptot = 0;
    for (int u = 0; u < UNITS; u++) {
        zero_tensor_desc_t t = {"w", 1, {unit_n[u]}, 0, ZERO_INIT_NORMAL, 0.1f};
        char name[8];
        snprintf(name, sizeof name, "u%d", u);
        zero_engine_add_unit(eng, name, &t, 1, NULL);
        size_t q = 16 * (size_t)N;
        P[u] = (unit_n[u] + 15) / 16 * 16;
        P[u] = (P[u] + q - 1) / q * q;
        base += 4 * (u == 0 ? P[u] : P[u] / (size_t)N);
        pool += u == 0 ? 0 : 4 * P[u];
        Ptot += P[u];
    }
    /* Default reduce bucket (INT_MAX bytes) is capped at the model: two slots of send + recv. */
    const size_t buckets = 2 * 4 * (Ptot + Ptot / (size_t)N);
    int bad = 0, calls_after_first = 0;
    size_t worst_extra = 0;
    for (int step = 0; step < 3; step++) {
        if (step == 1) calls_after_first = counter.calls;
        int held[UNITS] = {0};
        int order[2 * UNITS];
        for (int u = 0; u < UNITS; u++) order[u] = u, order[2 * UNITS - 1 - u] = u;
        for (int k = 0; k < 2 * UNITS; k++) {
            int u = order[k];
            zero_unit_fetch(eng, u);
            held[u] = 1;
            if (k >= UNITS) {
                float *g = zero_unit_grads(eng, u);
                g[0] += 1.0f;
                zero_unit_grads_done(eng, u);
            }
            size_t want = base;
            for (int v = 1; v < UNITS; v++) want += held[v] ? 4 * P[v] : 0;
            size_t live = live_params(eng);
            if (a->prefetch) {
                if (live < want || live > want + 4 * 700) bad++;
                if (live > want)
                    worst_extra = live - want > worst_extra ? live - want : worst_extra;
            } else if (live != want) {
                bad++;
            }
            zero_unit_release(eng, u);
            held[u] = 0;
            want = base;
            live = live_params(eng);
            if (!a->prefetch && live != want) bad++;
        }
        LCHECK(zero_engine_step(eng, NULL) == ZERO_OK, "step: %s", zero_last_error());
        LCHECK(live_params(eng) == base, "after step %d: live params %zu, want %zu", step,
               live_params(eng), base);
        zero_engine_report_t rep;
        zero_engine_get_report(eng, &rep);
        LCHECK(rep.gather_pool_bytes == pool && rep.gather_pool_idle_bytes == pool,
               "after step %d: gather pool %zu bytes (%zu idle), want %zu all idle", step,
               rep.gather_pool_bytes, rep.gather_pool_idle_bytes, pool);
        LCHECK(rep.memory_bytes[ZERO_MEM_COMM] == buckets + pool &&
                   rep.memory_theory_bytes[ZERO_MEM_COMM] == buckets + pool,
               "after step %d: comm buffers %zu bytes, theory %zu, want %zu (buckets) + %zu "
               "(pool)",
               step, rep.memory_bytes[ZERO_MEM_COMM], rep.memory_theory_bytes[ZERO_MEM_COMM],
               buckets, pool);
    }
    /* Steps 2-3 allocate nothing: gather buffers and the gradient working buffers are pooled
     * (each unit's gradient is handed back before the next is asked for, so the gradient pool
     * holds one buffer per distinct padded size), checked against the grads theory. */
    LCHECK(counter.calls - calls_after_first == 0,
           "prefetch %d: %d allocations in steps 2-3, want 0 (gather and gradient buffers are "
           "pooled)",
           a->prefetch, counter.calls - calls_after_first);
    size_t grad_pool = 0, Stot = 0;
    for (int u = 0; u < UNITS; u++) {
        int seen = 0;
        for (int v = 0; v < u; v++) seen |= P[v] == P[u];
        grad_pool += seen ? 0 : 4 * P[u];
        Stot += P[u] / (size_t)N;
    }
    zero_engine_report_t rep;
    zero_engine_get_report(eng, &rep);
    LCHECK(rep.memory_bytes[ZERO_MEM_GRADS] == 4 * Stot + grad_pool &&
               rep.memory_theory_bytes[ZERO_MEM_GRADS] == 4 * Stot + grad_pool,
           "prefetch %d: gradients %zu bytes, theory %zu, want %zu (shard accumulators) + %zu "
           "(gradient pool)",
           a->prefetch, rep.memory_bytes[ZERO_MEM_GRADS], rep.memory_theory_bytes[ZERO_MEM_GRADS],
           4 * Stot, grad_pool);
    LCHECK(bad == 0, "prefetch %d: %d residency violations", a->prefetch, bad);
    if (a->prefetch)
        LCHECK(worst_extra > 0, "prefetch never gathered ahead (extra live bytes %zu)",
               worst_extra);
    zero_engine_free(eng);
    zero_mem_free_domain(mem);
}

int main(void) {
    for (int stage = 0; stage <= 3; stage++) {
        exact_arg_t a = {stage};
        void *args[2] = {&a, &a};
        CHECK(run_ranks(2, 30, exact_rank, args) == ZERO_OK, "clique");
    }
    for (int pf = 0; pf <= 1; pf++)
        for (int n = 2; n <= 3; n++) {
            res_arg_t a = {pf};
            void *args[3] = {&a, &a, &a};
            CHECK(run_ranks(n, 30, residency_rank, args) == ZERO_OK, "clique");
        }
    return check_report();
}
