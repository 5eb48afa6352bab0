/* test_plan.c — the planner's formulas and plans, without running anything.
 *
 *   - paper: zero__plan_paper_bytes reproduces the ZeRO paper's Fig. 1 example (7.5B on 64
 *     ranks: 120 GB -> 31.4 / 16.6 / 1.9 GB), every cell of its Table 1 (within one unit of the
 *     last printed digit: the paper rounds some columns and truncates others) and the left half
 *     of its Table 2 (largest model in 32 GB at 64-way data parallelism, times the MP degree);
 *   - traffic: the rows' bytes on the wire against the paper's volumes (Sec. 7): stages 1-2 send
 *     2 P (N - 1) / N elements per step, stage 3 3 P (N - 1) / N, with P the padded parameter
 *     count; on two nodes of two ranks the two-level split;
 *   - bad input: heads that do not divide dim, a world size that does not divide the batch,
 *     ranks per node that do not divide the world: ZERO_ERR_CONFIG with a sentence naming the
 *     value and what to change; a model that fits nowhere is a plan with no best row;
 *   - scale: ZeRO-Infinity's 1T (128 layers, dim 25600) and 10T (195 layers, dim 65536) GPTs
 *     over 512 ranks (16 per node) and 1024 ranks (one per node), nodes of 1.5 TiB RAM and
 *     30 TB disk: every figure finite, the parameter count within 1% of 12 L C^2, stage 3's
 *     model states per rank between the paper's 16 Psi / N and 18 Psi / N (+ padding: fp32
 *     gradient accumulators), and a best configuration, which offloads whenever 16 Psi / N for
 *     the node's ranks exceeds its RAM.
 */
#include "check.h"

#include "plan/plan.h"
#include "train/preflight.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define GB 1e9

/* Within one unit of the last printed digit. */
static int near_printed(double computed, double printed, double unit) {
    return fabs(computed - printed) <= unit * 1.0001;
}

static void test_paper(void) {
    const double psi = 7.5e9;
    CHECK(near_printed(zero__plan_paper_bytes(psi, 12, 64, 0) / GB, 120, 1), "baseline 120 GB");
    CHECK(near_printed(zero__plan_paper_bytes(psi, 12, 64, 1) / GB, 31.4, 0.1), "P_os 31.4 GB");
    CHECK(near_printed(zero__plan_paper_bytes(psi, 12, 64, 2) / GB, 16.6, 0.1), "P_os+g 16.6 GB");
    CHECK(near_printed(zero__plan_paper_bytes(psi, 12, 64, 3) / GB, 1.9, 0.1), "P_os+g+p 1.9 GB");
    /* Table 1 (GB per device), rows DP = 1, 4, 16, 64, 256, 1024; columns 7.5B, 128B, 1T, each
     * P_os, P_os+g, P_os+g+p; units of the last printed digit */
    static const int dp[6] = {1, 4, 16, 64, 256, 1024};
    static const double psis[3] = {7.5e9, 128e9, 1e12};
    static const double table[6][9] = {
        {120, 120, 120, 2048, 2048, 2048, 16000, 16000, 16000},
        {52.5, 41.3, 30, 896, 704, 512, 7000, 5500, 4000},
        {35.6, 21.6, 7.5, 608, 368, 128, 4750, 2875, 1000},
        {31.4, 16.6, 1.88, 536, 284, 32, 4187, 2218, 250},
        {30.4, 15.4, 0.47, 518, 263, 8, 4046, 2054, 62.5},
        {30.1, 15.1, 0.12, 513, 257, 2, 4011, 2013, 15.6},
    };
    static const double units[6][9] = {
        {1, 1, 1, 1, 1, 1, 1, 1, 1},          {0.1, 0.1, 1, 1, 1, 1, 1, 1, 1},
        {0.1, 0.1, 0.1, 1, 1, 1, 1, 1, 1},    {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 1},
        {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 0.1}, {0.1, 0.1, 0.01, 1, 1, 1, 1, 1, 0.1},
    };
    for (int r = 0; r < 6; r++)
        for (int m = 0; m < 3; m++)
            for (int s = 1; s <= 3; s++) {
                double v = zero__plan_paper_bytes(psis[m], 12, dp[r], s) / GB;
                int col = 3 * m + s - 1;
                CHECK(near_printed(v, table[r][col], units[r][col]),
                      "Table 1, DP %d, %.4g parameters, stage %d: %.4f GB, printed %.4g", dp[r],
                      psis[m], s, v, table[r][col]);
            }
    /* Table 2, left half: the largest model whose states fit 32 GB at Nd = 64, times MP */
    static const double t2[4] = {2e9, 7.6e9, 14.4e9, 128e9}; /* MP = 1 */
    static const double t2_units[4] = {1e9, 0.1e9, 0.1e9, 1e9};
    for (int mp = 1; mp <= 16; mp *= 2)
        for (int s = 0; s <= 3; s++) {
            /* the paper rounds the MP = 1 value first, then multiplies (REFERENCE.md) */
            double psi_max = 32 * GB / zero__plan_paper_bytes(1, 12, 64, s);
            CHECK(near_printed(psi_max, t2[s], t2_units[s]) &&
                      fabs(psi_max * mp - t2[s] * mp) <= t2_units[s] * mp,
                  "Table 2, MP %d stage %d: %.4g parameters, printed %.4g", mp, s, psi_max * mp,
                  t2[s] * mp);
        }
}

static void small_config(zero_train_config_t *c) {
    zero__train_config_default(c);
    CHECK(zero__train_config_parse(c,
                                   "{\"model\": {\"layers\": 2, \"heads\": 2, \"dim\": 64, "
                                   "\"seq\": 32}, \"train_micro_batch_size_per_gpu\": 2, "
                                   "\"gradient_accumulation_steps\": 1, "
                                   "\"train\": {\"threads\": 1}}",
                                   "small") == ZERO_OK,
          "small config");
}

static zero_plan_machine_t machine(int world, int per_node) {
    zero_plan_machine_t m = {world, per_node, 1, 1ull << 50, 1ull << 50, 1};
    return m;
}

static const zero_plan_row_t *find(const zero_plan_t *p, int stage, int off, int zpp, int ckpt,
                                   int micro) {
    for (int i = 0; i < p->count; i++) {
        const zero_plan_row_t *r = &p->rows[i];
        if (r->stage == stage && r->offload == off && r->zeropp == zpp &&
            r->checkpointing == ckpt && r->micro == micro)
            return r;
    }
    return NULL;
}

static void test_traffic(void) {
    zero_train_config_t c;
    small_config(&c);
    zero_plan_calibration_t cal;
    zero__plan_calibration_default(&cal);
    for (int nodes = 1; nodes <= 2; nodes++) {
        const int N = 4, L = N / nodes;
        zero_plan_machine_t m = machine(N, L);
        zero_plan_t p;
        CHECK(zero__plan_run(&c, &m, &cal, &p) == ZERO_OK, "plan");
        if (!p.count) continue;
        zero_train_config_t cc = c;
        CHECK(zero__train_config_check(&cc, N) == ZERO_OK, "check");
        zero_train_process_estimate_t e;
        CHECK(zero__train_process_estimate(&cc, N, 1, 1, 1, &e) == ZERO_OK, "estimate");
        const double P = (double)e.rank.padded_param_count, B = 4 * P; /* fp32 */
        /* closed forms: stage 1-2 2 B, stage 3 3 B per step (accumulation 1): inside the
         * node B (L - 1) / L each, between nodes B / L (M - 1) / M each */
        const double M = nodes, intra = B * (L - 1) / L, inter = B / L * (M - 1) / M;
        for (int s = 1; s <= 3; s++) {
            const zero_plan_row_t *r = find(&p, s, ZERO_PLAN_OFFLOAD_NONE, 0, 0, 2);
            CHECK(r != NULL, "row of stage %d", s);
            if (!r) continue;
            const double k = s == 3 ? 3 : 2;
            CHECK(fabs(r->wire_intra - k * intra) <= 1e-9 * B &&
                      fabs(r->wire_inter - k * inter) <= 1e-9 * B,
                  "%d node(s), stage %d: wire %.0f / %.0f bytes, closed form %.0f / %.0f", nodes, s,
                  r->wire_intra, r->wire_inter, k * intra, k * inter);
        }
        /* the paper's 1.5x: stage 3 over stage 1 */
        const zero_plan_row_t *r1 = find(&p, 1, 0, 0, 0, 2), *r3 = find(&p, 3, 0, 0, 0, 2);
        if (r1 && r3)
            CHECK(fabs((r3->wire_intra + r3->wire_inter) / (r1->wire_intra + r1->wire_inter) -
                       1.5) < 1e-12,
                  "stage 3 / stage 1 traffic");
        zero__plan_free(&p);
    }
}

static void expect_bad(const zero_train_config_t *c, zero_plan_machine_t m, const char *want1,
                       const char *want2) {
    zero_plan_calibration_t cal;
    zero__plan_calibration_default(&cal);
    zero_plan_t p;
    zero_status_t st = zero__plan_run(c, &m, &cal, &p);
    const char *msg = zero_last_error();
    printf("bad input: %s\n", msg);
    CHECK(st == ZERO_ERR_CONFIG && strstr(msg, want1) && strstr(msg, want2),
          "expected ZERO_ERR_CONFIG naming '%s' and '%s', got %s: %s", want1, want2,
          zero_status_str(st), msg);
    if (!st) zero__plan_free(&p);
}

static void test_bad_input(void) {
    zero_train_config_t c;
    small_config(&c);
    c.model.heads = 3; /* does not divide 64 */
    expect_bad(&c, machine(1, 1), "model.heads = 3", "multiple of heads");
    small_config(&c);
    CHECK(zero__train_config_set(&c, "train_batch_size", "32") == ZERO_OK, "set batch");
    expect_bad(&c, machine(3, 3), "--world 3 does not divide train_batch_size = 32",
               "choose a world size that divides 32");
    small_config(&c);
    expect_bad(&c, machine(4, 3), "--ranks-per-node 3 does not divide --world 4",
               "set it to a divisor");
    /* fits nowhere: 175B parameters in 1 GiB per node */
    small_config(&c);
    c.model.layers = 96;
    c.model.dim = 12288;
    c.model.heads = 96;
    c.model.vocab = 50257;
    c.model.seq = 2048;
    zero_plan_machine_t m = machine(8, 8);
    m.ram_bytes = m.disk_bytes = 1ull << 30;
    zero_plan_calibration_t cal;
    zero__plan_calibration_default(&cal);
    zero_plan_t p;
    CHECK(zero__plan_run(&c, &m, &cal, &p) == ZERO_OK, "a plan where nothing fits");
    CHECK(p.best == -1 && p.smallest >= 0, "fits nowhere: best %d, smallest %d", p.best,
          p.smallest);
    zero__plan_free(&p);
}

static int finite_row(const zero_plan_row_t *r) {
    const double v[] = {r->wire_intra, r->wire_inter, r->t_compute,    r->t_comm,     r->t_optim,
                        r->t_disk,     r->t_step,     r->tokens_per_s, r->paper_bytes};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (!isfinite(v[i]) || v[i] < 0) return 0;
    uint64_t sum = 0;
    for (int k = 0; k < ZERO_PLAN_RAM_COUNT; k++) sum += r->ram[k];
    return sum == r->ram_rank && r->ram_rank > 0 && r->ram_node >= r->ram_rank && r->t_step > 0;
}

static void test_scale(int layers, int dim, int world, int per_node) {
    zero_train_config_t c;
    small_config(&c);
    c.model.layers = layers;
    c.model.dim = dim;
    c.model.heads = dim / 128;
    c.model.vocab = 50257;
    c.model.seq = 1024;
    c.bf16 = 1;
    char batch[32];
    snprintf(batch, sizeof batch, "%d", world);
    CHECK(zero__train_config_set(&c, "train_batch_size", batch) == ZERO_OK, "batch");
    /* nodes of 1.5 TiB of RAM and 30 TB of NVMe (a DGX-2's host) */
    zero_plan_machine_t m = machine(world, per_node);
    m.ram_bytes = 3ull << 39;
    m.disk_bytes = 30000000000000ull;
    m.threads = 4;
    zero_plan_calibration_t cal;
    zero__plan_calibration_default(&cal);
    zero_plan_t p;
    double t0 = zero_time_now();
    zero_status_t st = zero__plan_run(&c, &m, &cal, &p);
    CHECK(st == ZERO_OK, "plan of %d layers x %d over %d ranks", layers, dim, world);
    if (st) return;
    const double psi = p.params, closed = 12.0 * layers * (double)dim * dim;
    printf("scale: %d layers x %d: %.4g parameters, %d rows over %d ranks in %.2f s\n", layers, dim,
           psi, p.count, world, zero_time_now() - t0);
    CHECK(fabs(psi / closed - 1) < 0.01, "parameters %.4g, 12 L C^2 = %.4g", psi, closed);
    int finite = 1;
    for (int i = 0; i < p.count; i++) finite &= finite_row(&p.rows[i]);
    CHECK(finite, "every row's figures finite, non-negative and summing");
    const zero_plan_row_t *s3 = find(&p, 3, ZERO_PLAN_OFFLOAD_NONE, 0, 1, 1);
    CHECK(s3 != NULL, "stage 3 row");
    if (s3) {
        const double states = (double)s3->model_states;
        const double paper = zero__plan_paper_bytes(psi, 12, world, 3);
        printf("scale: stage 3 model states per rank %.2f GB, paper's 16 Psi / N %.2f GB\n",
               states / GB, paper / GB);
        /* bf16 parameters 2, fp32 gradient accumulators 4 (the paper's 2), Adam 12: 18 / 16 */
        CHECK(states >= paper && states <= 1.15 * paper,
              "stage 3 model states %.4g bytes per rank, paper %.4g (expected [1, 1.15] x)", states,
              paper);
    }
    CHECK(p.best >= 0, "a configuration fits");
    if (p.best >= 0) {
        const zero_plan_row_t *b = &p.rows[p.best];
        printf("scale: best stage %d offload %s ZeRO++ %d ckpt %d micro %d: %.4g s per step\n",
               b->stage, zero__plan_offload_name((zero_plan_offload_t)b->offload), b->zeropp,
               b->checkpointing, b->micro, b->t_step);
        if (16 * psi / world * per_node > (double)m.ram_bytes)
            CHECK(b->offload != ZERO_PLAN_OFFLOAD_NONE,
                  "16 Psi / N x %d ranks = %.3g bytes exceeds the node's RAM: the best must "
                  "offload",
                  per_node, 16 * psi / world * per_node);
    }
    zero__plan_free(&p);
}

int main(void) {
    zero_log_set_level(ZERO_LOG_ERROR);
    test_paper();
    test_traffic();
    test_bad_input();
    test_scale(128, 25600, 512, 16); /* 1T: 32 nodes of 16 ranks */
    test_scale(195, 65536, 1024, 1); /* 10T: 1024 nodes of one rank */
    return check_report();
}
