/* test_qgz.c — ZeRO++ qgZ's collective (src/zero/qgz.c): the int4 hierarchical reduce-scatter.
 *
 * Oracles: (1) the exact mean, sum_k x_k / n computed in float64 from the inputs alone, with the
 * error bound of qgz.h computed from the inputs (the int4 scales of every rank's blocks, and a
 * bound on each node's partial's scale) — a result off by a factor (dividing by the ranks of a
 * node instead of all, as DeepSpeed's path does) or from the wrong blocks fails it; (2) bitwise,
 * a serial simulation of the algorithm written here (each destination block quantized, the
 * nodes' partials summed in rank order in fp32 and re-quantized, the nodes summed in order),
 * which checks what moves where; (3) the same bits on a second run; (4) the bytes each rank sent
 * inside its node and to other nodes, from the two communicators' statistics, against the
 * closed forms (L - 1) M W and (M - 1) W. Thread ranks on 2 nodes x 2, 2 x 3, 3 x 2, 4 x 1, one
 * node of 4, 3, 1 rank, and 3 + 1 (unequal nodes: one hop over all ranks); fp32 and bf16;
 * segments of odd sizes; 1 and 2 kernel threads. Built with QGZ_MPI: under mpirun, MPI ranks
 * (ranks_per_node 2 when the job has an even size) bitwise equal to thread ranks of the same
 * layout run inside each process.
 */
#include "check.h"
#include "core/core_internal.h"
#include "kernels/quant.h"
#include "thread_ranks.h"
#include "zero/qgz.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QGZ_MPI
#include "mpi_harness.h"
#endif

typedef struct qcase {
    int n, rpn; /* ranks, ranks per node (0: one node) */
    zero_dtype_t dt;
    const size_t *seg;
    int nseg;
    int threads;
    /* results: out[r] (B elements of dt) per rank, stats */
    void **out;
    uint64_t node_sent[16], node_inter[16], cross_sent[16], cross_inter[16], formula[16][2];
    int L[16], M[16];
    int failed_status[16];
} qcase_t;

static size_t total(const size_t *seg, int nseg) {
    size_t B = 0;
    for (int i = 0; i < nseg; i++) B += seg[i];
    return B;
}

/* Rank k's value for destination r, element i: several magnitudes, a sign pattern, some exact
 * zeros; the same on every process. */
static float gen(int k, int r, size_t i) {
    uint64_t h = (uint64_t)k * 0x9e3779b97f4a7c15ull ^ (uint64_t)r * 0xc2b2ae3d27d4eb4full ^
                 (uint64_t)i * 0x165667b19e3779f9ull;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    const float u = (float)((h >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
    const float mag = (i / 200) % 4 == 0   ? 1.0f
                      : (i / 200) % 4 == 1 ? 0.01f
                                           : 3e-4f * (float)(k + 1);
    return (i % 97 == 5) ? 0.0f : u * mag;
}

/* x in dt and back: what the quantizer sees. */
static float as_dt(float x, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_BF16 ? zero_bf16_to_fp32(zero_fp32_to_bf16(x)) : x;
}

static void fill(void *buf, int k, int n, size_t B, zero_dtype_t dt) {
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < B; i++) {
            const float v = gen(k, r, i);
            if (dt == ZERO_DTYPE_FP32)
                ((float *)buf)[(size_t)r * B + i] = v;
            else
                ((uint16_t *)buf)[(size_t)r * B + i] = zero_fp32_to_bf16(v);
        }
}

static float get(const void *buf, size_t i, zero_dtype_t dt) {
    return dt == ZERO_DTYPE_FP32 ? ((const float *)buf)[i]
                                 : zero_bf16_to_fp32(((const uint16_t *)buf)[i]);
}

static void rank_fn(zero_comm_t *comm, int rank, void *arg) {
    qcase_t *c = arg;
    const size_t B = total(c->seg, c->nseg), es = zero_dtype_size(c->dt);
    void *send = malloc((size_t)c->n * B * es + 1);
    fill(send, rank, c->n, B, c->dt);
    zero__qgz_t q;
    zero_status_t st = zero__qgz_init(&q, comm);
    if (!st)
        st = zero__qgz_reduce_scatter(&q, send, c->out[rank], c->seg, c->nseg, c->dt,
                                      1.0f / (float)c->n, c->threads);
    c->failed_status[rank] = st;
    c->L[rank] = q.L;
    c->M[rank] = q.M;
    zero_comm_stats_t s;
    memset(&s, 0, sizeof s);
    if (q.node) zero_comm_get_stats(q.node, &s);
    c->node_sent[rank] = s.sent_bytes[ZERO_COLL_ALL_TO_ALL];
    c->node_inter[rank] = s.inter_node_sent_bytes[ZERO_COLL_ALL_TO_ALL];
    memset(&s, 0, sizeof s);
    if (q.cross) zero_comm_get_stats(q.cross, &s);
    c->cross_sent[rank] = s.sent_bytes[ZERO_COLL_ALL_TO_ALL];
    c->cross_inter[rank] = s.inter_node_sent_bytes[ZERO_COLL_ALL_TO_ALL];
    zero__qgz_bytes(&q, zero__qgz_wire_bytes(c->seg, c->nseg), &c->formula[rank][0],
                    &c->formula[rank][1]);
    zero__qgz_free(&q);
    free(send);
}

/* Quantize-dequantize the segments of x (B fp32) into y (fp32), as one hop does. */
static void hop(float *y, const float *x, const size_t *seg, int nseg) {
    size_t off = 0;
    for (int i = 0; i < nseg; i++) {
        unsigned char *w = malloc(zero__q4_bytes(seg[i]) + 1);
        zero__q4_quantize(w, x + off, ZERO_DTYPE_FP32, seg[i], 1);
        zero__q4_dequantize(y + off, ZERO_DTYPE_FP32, w, seg[i], 1);
        free(w);
        off += seg[i];
    }
}

/* The serial simulation of rank r's result (fp32 before the rounding into dt), into res. */
static void simulate(float *res, int r, int n, int L, int M, const size_t *seg, int nseg,
                     zero_dtype_t dt) {
    const size_t B = total(seg, nseg);
    float *x = malloc((B + 1) * sizeof *x), *d = malloc((B + 1) * sizeof *d),
          *part = malloc((B + 1) * sizeof *part), *d2 = malloc((B + 1) * sizeof *d2);
    for (size_t i = 0; i < B; i++) res[i] = 0.0f;
    for (int m = 0; m < M; m++) {
        for (int l = 0; l < L; l++) {
            const int k = m * L + l;
            for (size_t i = 0; i < B; i++) x[i] = as_dt(gen(k, r, i), dt);
            hop(d, x, seg, nseg);
            for (size_t i = 0; i < B; i++) part[i] = l == 0 ? d[i] : part[i] + d[i];
        }
        if (M > 1)
            hop(d2, part, seg, nseg);
        else
            memcpy(d2, part, B * sizeof *d2);
        for (size_t i = 0; i < B; i++) res[i] = m == 0 ? d2[i] : res[i] + d2[i];
    }
    for (size_t i = 0; i < B; i++) res[i] *= 1.0f / (float)n;
    free(x);
    free(d);
    free(part);
    free(d2);
}

/* Check rank r's result against the exact mean within the bound, and bitwise the simulation. */
static void check_rank(const qcase_t *c, int r, const void *out, int L, int M) {
    const size_t B = total(c->seg, c->nseg);
    float *sim = malloc((B + 1) * sizeof *sim);
    simulate(sim, r, c->n, L, M, c->seg, c->nseg, c->dt);
    size_t bad_bits = 0, bad_bound = 0;
    double worst = 0.0, worst_ratio = 0.0;
    size_t seg_lo = 0;
    int si = 0;
    for (size_t i = 0; i < B; i++) {
        while (i >= seg_lo + c->seg[si]) seg_lo += c->seg[si++];
        /* the 256-block of i inside its segment */
        const size_t b_lo = seg_lo + (i - seg_lo) / 256 * 256,
                     b_hi = b_lo + 256 < seg_lo + c->seg[si] ? b_lo + 256 : seg_lo + c->seg[si];
        double exact = 0.0, bound = 0.0, mag = 0.0;
        for (int m = 0; m < M; m++) {
            double s1sum = 0.0, amax_sum = 0.0;
            for (int l = 0; l < L; l++) {
                const int k = m * L + l;
                double amax = 0.0;
                for (size_t j = b_lo; j < b_hi; j++)
                    amax = fmax(amax, fabs((double)as_dt(gen(k, r, j), c->dt)));
                s1sum += amax / 7.0;
                amax_sum += amax;
                const double v = as_dt(gen(k, r, i), c->dt);
                exact += v;
                mag += fabs(v);
            }
            bound += s1sum / 2.0;
            if (M > 1) bound += (amax_sum + s1sum / 2.0) / 7.0 / 2.0;
        }
        exact /= c->n;
        bound /= c->n;
        const double got = get(out, i, c->dt);
        /* fp32 roundings: the products and sums (n + 2 of them per element, each within 2^-24 of
         * a value at most mag + the bound), and the rounding into bf16 */
        double slack = (mag / c->n + bound) * 0x1p-24 * (c->n + 4) * 2.0;
        if (c->dt == ZERO_DTYPE_BF16) slack += fabs(got) * 0x1p-8;
        const double err = fabs(got - exact);
        if (!(err <= bound + slack)) bad_bound++;
        worst = fmax(worst, err);
        if (bound > 0) worst_ratio = fmax(worst_ratio, err / bound);
        const float want = as_dt(sim[i], c->dt);
        const float g = (float)got;
        if (memcmp(&want, &g, 4)) bad_bits++;
    }
    CHECK(!bad_bound,
          "n=%d rpn=%d %s threads=%d rank %d: %zu of %zu elements beyond the error bound of the "
          "exact mean (worst error %.3g)",
          c->n, c->rpn, zero_dtype_name(c->dt), c->threads, r, bad_bound, B, worst);
    CHECK(!bad_bits, "n=%d rpn=%d %s rank %d: %zu elements differ from the serial simulation", c->n,
          c->rpn, zero_dtype_name(c->dt), r, bad_bits);
    /* the bound is not vacuous: int4 errors reach a fair part of it */
    CHECK(B < 256 || worst_ratio > 0.05, "n=%d rpn=%d rank %d: worst error only %.3g of the bound",
          c->n, c->rpn, r, worst_ratio);
    free(sim);
}

#ifndef QGZ_MPI
static void run_case(int n, int rpn, zero_dtype_t dt, const size_t *seg, int nseg, int threads,
                     int expect_L, int expect_M) {
    qcase_t c;
    memset(&c, 0, sizeof c);
    c.n = n;
    c.rpn = rpn;
    c.dt = dt;
    c.seg = seg;
    c.nseg = nseg;
    c.threads = threads;
    const size_t B = total(seg, nseg), es = zero_dtype_size(dt),
                 W = zero__qgz_wire_bytes(seg, nseg);
    void **runs[2];
    for (int run = 0; run < 2; run++) {
        runs[run] = calloc((size_t)n, sizeof(void *));
        for (int r = 0; r < n; r++) runs[run][r] = malloc(B * es + 1);
        c.out = runs[run];
        zero_comm_params_t p = zero_comm_params_default();
        p.timeout_s = 60;
        p.ranks_per_node = rpn;
        CHECK(thread_ranks_clique_with(n, &p, rank_fn, &c) == ZERO_OK, "clique of %d", n);
    }
    for (int r = 0; r < n; r++) {
        CHECK(c.failed_status[r] == ZERO_OK, "n=%d rpn=%d rank %d: %s", n, rpn, r,
              zero_status_str(c.failed_status[r]));
        CHECK(c.L[r] == expect_L && c.M[r] == expect_M,
              "n=%d rpn=%d: hierarchy %d x %d (expected %d x %d)", n, rpn, c.M[r], c.L[r], expect_M,
              expect_L);
        check_rank(&c, r, runs[1][r], expect_L, expect_M);
        CHECK(!memcmp(runs[0][r], runs[1][r], B * es), "n=%d rpn=%d rank %d: two runs differ", n,
              rpn, r);
        const uint64_t L = (uint64_t)expect_L, M = (uint64_t)expect_M;
        /* per call: (L - 1) M W in the first hop's group, (M - 1) W across (all of it to other
         * nodes); the first hop crosses nodes only where the nodes are irregular (one hop over
         * every rank): M W to each peer on another node */
        uint64_t first_inter = 0;
        for (int k = 0; k < n; k++)
            if (k != r && k / expect_L == r / expect_L && rpn && k / rpn != r / rpn)
                first_inter += M * W;
        CHECK(c.node_sent[r] == (L - 1) * M * W && c.node_inter[r] == first_inter &&
                  c.cross_sent[r] == (M - 1) * W && c.cross_inter[r] == (M - 1) * W,
              "n=%d rpn=%d rank %d: sent %llu in the node (%llu to other nodes), %llu across "
              "(%llu) (expected %llu, %llu, %llu, %llu)",
              n, rpn, r, (unsigned long long)c.node_sent[r], (unsigned long long)c.node_inter[r],
              (unsigned long long)c.cross_sent[r], (unsigned long long)c.cross_inter[r],
              (unsigned long long)((L - 1) * M * W), (unsigned long long)first_inter,
              (unsigned long long)((M - 1) * W), (unsigned long long)((M - 1) * W));
        CHECK(c.formula[r][0] == (L - 1) * M * W + (M - 1) * W &&
                  c.formula[r][1] == first_inter + (M - 1) * W,
              "n=%d rpn=%d rank %d: zero__qgz_bytes %llu / %llu", n, rpn, r,
              (unsigned long long)c.formula[r][0], (unsigned long long)c.formula[r][1]);
    }
    for (int run = 0; run < 2; run++) {
        for (int r = 0; r < n; r++) free(runs[run][r]);
        free(runs[run]);
    }
}

int main(void) {
    static const size_t small[] = {300, 17, 1024, 1};
    static const size_t big[] = {70000, 16};
    const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        const zero_dtype_t dt = dts[d];
        run_case(4, 2, dt, small, 4, 1, 2, 2); /* 2 nodes x 2 */
        run_case(6, 3, dt, small, 4, 1, 3, 2); /* 2 nodes x 3 */
        run_case(6, 2, dt, small, 4, 1, 2, 3); /* 3 nodes x 2 */
        run_case(4, 1, dt, small, 4, 1, 1, 4); /* 4 nodes of one rank */
        run_case(4, 0, dt, small, 4, 1, 4, 1); /* one node */
        run_case(3, 0, dt, small, 4, 1, 3, 1);
        run_case(1, 0, dt, small, 4, 1, 1, 1);
        run_case(4, 3, dt, small, 4, 1, 4, 1); /* 3 + 1: one hop over the 4 ranks */
    }
    /* The kernels on 2 threads: OpenMP's runtime is not instrumented, so ThreadSanitizer would
     * see its fork and join as races; the optimised and ASan builds run this case. */
#if !defined(__SANITIZE_THREAD__)
    run_case(4, 2, ZERO_DTYPE_FP32, big, 2, 2, 2, 2);
#endif
    run_case(4, 2, ZERO_DTYPE_BF16, big, 2, 1, 2, 2);
    return check_report();
}
#else
/* MPI ranks against thread ranks of the same layout, bitwise, on every rank. */
int main(void) {
    static const size_t seg[] = {300, 17, 1024, 1};
    zero_comm_params_t p = zero_comm_params_default();
    p.timeout_s = 60;
    p.ranks_per_node = 2;
    zero_comm_t *comm = mpi_harness_init(&p);
    if (!comm) return 1;
    const int n = zero_comm_size(comm), me = zero_comm_rank(comm);
    const zero_dtype_t dts[] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        const zero_dtype_t dt = dts[d];
        const size_t B = total(seg, 4), es = zero_dtype_size(dt);
        void *send = malloc((size_t)n * B * es), *mine = malloc(B * es);
        fill(send, me, n, B, dt);
        zero__qgz_t q;
        zero_status_t st = zero__qgz_init(&q, comm);
        if (!st) st = zero__qgz_reduce_scatter(&q, send, mine, seg, 4, dt, 1.0f / (float)n, 1);
        CHECK(st == ZERO_OK, "mpi qgZ: %s", zero_last_error());
        const int L = q.L, M = q.M;
        CHECK(M == (n % 2 == 0 ? n / 2 : 1), "mpi: %d nodes", M);
        zero__qgz_free(&q);
        /* the same layout on thread ranks in this process */
        qcase_t c;
        memset(&c, 0, sizeof c);
        c.n = n;
        c.rpn = p.ranks_per_node;
        c.dt = dt;
        c.seg = seg;
        c.nseg = 4;
        c.threads = 1;
        c.out = calloc((size_t)n, sizeof(void *));
        for (int r = 0; r < n; r++) c.out[r] = malloc(B * es);
        CHECK(thread_ranks_clique_with(n, &p, rank_fn, &c) == ZERO_OK, "threads clique");
        CHECK(!memcmp(c.out[me], mine, B * es), "mpi rank %d %s: differs from thread rank %d", me,
              zero_dtype_name(dt), me);
        check_rank(&c, me, mine, L, M);
        for (int r = 0; r < n; r++) free(c.out[r]);
        free(c.out);
        free(send);
        free(mine);
    }
    return mpi_harness_finish(comm);
}
#endif
