/* test_q8.c — 8-bit Adam states in the engine (optimizer_state_dtype int8, src/zero/q8state.c).
 *
 * Oracles:
 * (1) bitsandbytes' own protocol (tests/test_optim.py::test_optimizer8bit, lowbit-notes.md 4.2):
 *     one rank, tensors of 1024 x 32, 1024 x 1024 and 256 x 4097 (a width that is no multiple of
 *     256), p ~ 0.1 N(0, 1), each step g ~ 0.01 N(0, 1), Adam lr 1e-3, betas (0.9, 0.999), eps
 *     1e-8, no decay, 50 steps; an fp32-state engine beside an int8-state one, the parameters
 *     set equal after each step as bitsandbytes does (they would drift apart otherwise). After
 *     every step, per tensor: mean |p1 - p2| < 6e-5 and mean |p1 - p2| / |p1| < 6e-4 over the
 *     parameters with |p1| >= 1e-3 (bitsandbytes' fp32-gradient tolerances; its relative mean
 *     takes every parameter and is then decided by the few near zero, as test_q8dyn explains),
 *     and fewer than 20 elements of m and of v outside isclose(atol 3e-3, rtol 1e-3) of the fp32
 *     states.
 * (2) The engine against the kernel: one tensor of 32768 elements, the engine's parameters after
 *     5 steps bitwise equal to zero__adam8_update's on the same gradients (the kernel is checked
 *     against bitsandbytes' formulas by test_q8dyn).
 * (3) Stage equivalence: the tiny GPT of harness.c with int8 states, stages 0-3 x ranks {1, 2,
 *     4}, fp32 and bf16 compute: one fingerprint per dtype and world size (each world size
 *     trains on its own data), on every rank; not the fp32 states' one.
 * (4) Memory: each rank's optimizer bytes equal this test's own count from the GPT's tensor
 *     shapes (units padded to 256 x ranks; codes 2 B per element, 3 fp32 per block of 256 (two
 *     absmax, one index), 8 B per element of the blocks that touch a tensor of < 4096 elements,
 *     the fp32 master with bf16), and the report's theory equals it too.
 * (5) Checkpoint round trip: m and v read through zero_engine_state_read and written back into
 *     a fresh int8 engine in pieces cut at other places than the blocks give the same weights
 *     after further steps, bit for bit.
 * (6) Bad parameters: state dtype fp16, int8 with offload nvme: ZERO_ERR_CONFIG naming them.
 * (7) Resharding through checkpoints: a toy unit trained 4 steps on 2 ranks at stage 3 and
 *     saved; loaded by 4 ranks at stage 2 (each loading the whole checkpoint, as the trainer
 *     does), its m and v gathered and saved again: the weights and the gathered m and v equal the
 *     2-rank run's; then 2 more steps on 1 rank from that checkpoint and from the 2-rank one give
 *     the same weights and states, bit for bit (and not the saved weights).
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "harness.h"
#include "kernels/q8dyn.h"
#include "thread_ranks.h"
#include "zero/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ (1) and (2): one rank */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uni(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}
static float gauss(void) {
    return (float)(sqrt(-2.0 * log(uni())) * cos(6.283185307179586 * uni()));
}

static zero_engine_t *adam_engine(zero_dtype_t states, const zero_tensor_desc_t *t, int n) {
    zero_engine_params_t p = zero_engine_params_default();
    p.lr = 1e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.999f;
    p.eps = 1e-8f;
    p.weight_decay = 0.0f;
    p.grad_clip = 0.0f;
    p.schedule = ZERO_LR_CONSTANT;
    p.optim_state_dtype = states;
    p.threads = 2;
    zero_engine_t *eng = NULL;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "adam engine init");
    for (int u = 0; eng && u < n; u++)
        CHECK(zero_engine_add_unit(eng, t[u].name, &t[u], 1, NULL) == ZERO_OK, "unit %d", u);
    return eng;
}

static void set_grads(zero_engine_t *eng, int u, const float *g, size_t n) {
    float *w = zero_unit_grads(eng, u);
    memcpy(w, g, n * sizeof *w);
    CHECK(zero_unit_grads_done(eng, u) == ZERO_OK, "grads_done %d", u);
}

static void bnb_protocol(void) {
    zero_tensor_desc_t t[3] = {{"a", 2, {1024, 32}, 0, ZERO_INIT_ZEROS, 0},
                               {"b", 2, {1024, 1024}, 0, ZERO_INIT_ZEROS, 0},
                               {"c", 2, {256, 4097}, 0, ZERO_INIT_ZEROS, 0}};
    zero_engine_t *e32 = adam_engine(ZERO_DTYPE_FP32, t, 3),
                  *e8 = adam_engine(ZERO_DTYPE_INT8, t, 3);
    if (!e32 || !e8) return;
    size_t n[3];
    float *p1[3], *p2[3], *g[3], *s1 = NULL, *s2 = NULL;
    for (int u = 0; u < 3; u++) {
        n[u] = t[u].shape[0] * t[u].shape[1];
        p1[u] = malloc(n[u] * sizeof(float));
        p2[u] = malloc(n[u] * sizeof(float));
        g[u] = malloc(n[u] * sizeof(float));
        for (size_t i = 0; i < n[u]; i++) p1[u][i] = 0.1f * gauss();
        zero_engine_params_write(e32, u, 0, n[u], p1[u]);
        zero_engine_params_write(e8, u, 0, n[u], p1[u]);
    }
    s1 = malloc(n[1] * sizeof(float));
    s2 = malloc(n[1] * sizeof(float));
    int worst_bad = 0;
    double worst_abs = 0, worst_rel = 0;
    for (int s = 0; s < 50; s++) {
        for (int u = 0; u < 3; u++) {
            for (size_t i = 0; i < n[u]; i++) g[u][i] = 0.01f * gauss();
            set_grads(e32, u, g[u], n[u]);
            set_grads(e8, u, g[u], n[u]);
        }
        zero_step_stats_t st;
        CHECK(zero_engine_step(e32, &st) == ZERO_OK, "fp32 step %d", s);
        CHECK(zero_engine_step(e8, &st) == ZERO_OK, "int8 step %d", s);
        for (int u = 0; u < 3; u++) {
            zero_engine_params_read(e32, u, 0, n[u], p1[u]);
            zero_engine_params_read(e8, u, 0, n[u], p2[u]);
            double ea = 0, er = 0;
            size_t nr = 0;
            for (size_t i = 0; i < n[u]; i++) {
                const double d = fabs((double)p1[u][i] - p2[u][i]);
                ea += d;
                if (fabs(p1[u][i]) >= 1e-3) er += d / fabs(p1[u][i]), nr++;
            }
            ea /= (double)n[u];
            er /= (double)nr;
            worst_abs = fmax(worst_abs, ea);
            worst_rel = fmax(worst_rel, er);
            CHECK(ea < 6e-5 && er < 6e-4,
                  "bitsandbytes protocol step %d tensor %s: mean |dp| %.3g (< 6e-5), relative "
                  "%.3g (< 6e-4)",
                  s, t[u].name, ea, er);
            /* the states: fewer than 20 outside isclose(atol 3e-3, rtol 1e-3) */
            for (int k = 1; k <= 2; k++) {
                const zero_engine_state_t state = (zero_engine_state_t)k;
                float *a = u == 1 ? s1 : malloc(n[u] * sizeof(float));
                float *b = u == 1 ? s2 : malloc(n[u] * sizeof(float));
                zero_engine_state_read(e32, u, state, 0, n[u], a);
                zero_engine_state_read(e8, u, state, 0, n[u], b);
                int bad = 0;
                for (size_t i = 0; i < n[u]; i++)
                    bad += !(fabsf(a[i] - b[i]) <= 3e-3f + 1e-3f * fabsf(b[i]));
                worst_bad = bad > worst_bad ? bad : worst_bad;
                CHECK(bad < 20, "step %d tensor %s %s: %d elements not close", s, t[u].name,
                      zero_engine_state_name(state), bad);
                if (u != 1) free(a), free(b);
            }
            /* as bitsandbytes: the 8-bit run continues from the fp32 run's parameters */
            zero_engine_params_write(e8, u, 0, n[u], p1[u]);
        }
    }
    printf("bitsandbytes protocol, 50 steps: worst mean |dp| %.3g, relative %.3g, states not "
           "close %d\n",
           worst_abs, worst_rel, worst_bad);
    for (int u = 0; u < 3; u++) free(p1[u]), free(p2[u]), free(g[u]);
    free(s1);
    free(s2);
    zero_engine_free(e32);
    zero_engine_free(e8);
}

static void against_kernel(void) {
    enum { N = 32768, STEPS = 5 };
    zero_tensor_desc_t t = {"w", 1, {N}, 0, ZERO_INIT_NORMAL, 0.1f};
    zero_engine_t *eng = adam_engine(ZERO_DTYPE_INT8, &t, 1);
    if (!eng) return;
    float *p = malloc(N * sizeof *p), *g = malloc(N * sizeof *g), *q = malloc(N * sizeof *q);
    uint8_t *mc = malloc(N), *vc = malloc(N);
    float ma[N / 256], va[N / 256], zero[256] = {0};
    for (int b = 0; b < N / 256; b++) { /* zero states, as the kernel encodes zeros */
        zero__q8dyn_quantize(mc + b * 256, ma + b, zero, 256, 1);
        zero__q8dyn_quantize(vc + b * 256, va + b, zero, 256, 0);
    }
    zero_engine_params_read(eng, 0, 0, N, p);
    for (int s = 1; s <= STEPS; s++) {
        for (size_t i = 0; i < N; i++) g[i] = 0.01f * gauss();
        set_grads(eng, 0, g, N);
        zero_step_stats_t st;
        CHECK(zero_engine_step(eng, &st) == ZERO_OK, "step %d", s);
        const zero__adamw_hp_t hp = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, s};
        zero__adam8_update(p, g, 1.0f, mc, ma, vc, va, N, &hp);
    }
    zero_engine_params_read(eng, 0, 0, N, q);
    CHECK(!memcmp(p, q, N * sizeof *p), "engine vs zero__adam8_update: weights differ");
    free(p), free(g), free(q), free(mc), free(vc);
    zero_engine_free(eng);
}

/* ------------------------------------------------------------------ (3) and (4): the GPT */

#define R16(n) (((n) + 15) / 16 * 16)

/* This test's count of rank r's 8-bit state bytes for world N at stage `stage`, from the GPT's
 * tensor shapes (src/model/gpt.h), and the padded elements of all units. */
static uint64_t gpt_q8_bytes(int N, int r, int stage, uint64_t *padded, uint64_t *held) {
    const size_t C = HARNESS_DIM, V = HARNESS_VOCAB, T = HARNESS_SEQ;
    const size_t emb[] = {V * C, T * C};
    const size_t blk[] = {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    const size_t fin[] = {C, C};
    const size_t *units[4] = {emb, blk, blk, fin};
    const int counts[4] = {2, 12, 12, 2};
    uint64_t bytes = 0;
    *padded = *held = 0;
    for (int u = 0; u < 4; u++) {
        size_t off[12], end = 0;
        for (int t = 0; t < counts[u]; t++) off[t] = end, end += R16(units[u][t]);
        const size_t q = 256 * (size_t)N, P = (end + q - 1) / q * q, S = P / (size_t)N;
        const size_t lo = stage ? (size_t)r * S : 0, n = stage ? S : P;
        uint64_t small = 0;
        for (size_t a = lo; a < lo + n; a += 256) {
            int fp32 = 0;
            for (int t = 0; t < counts[u]; t++)
                fp32 |= units[u][t] < 4096 && off[t] < a + 256 && off[t] + units[u][t] > a;
            small += (uint64_t)fp32;
        }
        bytes += 2 * n + 12 * (n / 256) + 8 * 256 * small;
        *padded += P;
        *held += n;
    }
    return bytes;
}

static void gpt_stages(zero_dtype_t dt) {
    uint64_t ref = 0, one_rank = 0, fp32_states = 0;
    {
        run_cfg_t c = harness_default_cfg(0, 1, 1);
        c.dtype = c.accum_dtype = dt;
        rank_result_t r[1];
        if (harness_gpt_threads(&c, r) == ZERO_OK) fp32_states = r[0].fingerprint;
        harness_result_free(&r[0]);
    }
    const int ranks[] = {1, 2, 4};
    for (int ri = 0; ri < 3; ri++)
        for (int stage = 0; stage <= 3; stage++) {
            const int N = ranks[ri];
            int have = stage > 0; /* each world size has its own data: one reference per size */
            run_cfg_t c = harness_default_cfg(stage, N, 1);
            c.dtype = dt;
            c.accum_dtype = ZERO_DTYPE_FP32;
            c.state_dtype = ZERO_DTYPE_INT8;
            rank_result_t res[4];
            zero_status_t st = harness_gpt_threads(&c, res);
            CHECK(st == ZERO_OK, "%s stage %d ranks %d: %s", zero_dtype_name(dt), stage, N,
                  res[0].error);
            for (int r = 0; r < N && st == ZERO_OK; r++) {
                if (!have) ref = res[r].fingerprint, have = 1;
                if (N == 1) one_rank = ref;
                CHECK(res[r].fingerprint == ref,
                      "%s int8 states stage %d ranks %d rank %d: fingerprint %016llx, stage 0's "
                      "%016llx",
                      zero_dtype_name(dt), stage, N, r, (unsigned long long)res[r].fingerprint,
                      (unsigned long long)ref);
                uint64_t padded = 0, held = 0;
                uint64_t q8 = gpt_q8_bytes(N, r, stage, &padded, &held);
                const uint64_t want = q8 + (dt != ZERO_DTYPE_FP32 ? 4 * held : 0);
                const zero_engine_report_t *rep = &res[r].report;
                CHECK(rep->memory_bytes[ZERO_MEM_OPTIM] == want &&
                          rep->memory_theory_bytes[ZERO_MEM_OPTIM] == want,
                      "%s stage %d ranks %d rank %d: optimizer bytes %zu, theory %zu, expected "
                      "%llu",
                      zero_dtype_name(dt), stage, N, r, rep->memory_bytes[ZERO_MEM_OPTIM],
                      rep->memory_theory_bytes[ZERO_MEM_OPTIM], (unsigned long long)want);
                CHECK(rep->padded_param_count == padded, "stage %d ranks %d: padded %zu, not %llu",
                      stage, N, rep->padded_param_count, (unsigned long long)padded);
            }
            for (int r = 0; r < N; r++) harness_result_free(&res[r]);
        }
    CHECK(one_rank != fp32_states, "%s: int8 states give the fp32 states' weights",
          zero_dtype_name(dt));
}

/* ------------------------------------------------------------------ (5) checkpoint round trip */

static void train(zero_engine_t *eng, int steps, uint64_t seed) {
    const size_t n = zero_engine_unit_param_count(eng, 0);
    float *g = malloc(n * sizeof *g);
    rng = seed;
    for (int s = 0; s < steps; s++) {
        for (size_t i = 0; i < n; i++) g[i] = 0.01f * gauss() + (i % 7 == 0 ? -0.02f : 0.0f);
        set_grads(eng, 0, g, n);
        zero_step_stats_t st;
        CHECK(zero_engine_step(eng, &st) == ZERO_OK, "round trip step %d", s);
    }
    free(g);
}

static void round_trip(void) {
    /* a large tensor, a small one (fp32 states) and one of an odd size after it */
    zero_tensor_desc_t t[3] = {{"w", 2, {40, 300}, 0, ZERO_INIT_NORMAL, 0.1f},
                               {"b", 1, {300}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0},
                               {"u", 1, {5001}, 0, ZERO_INIT_NORMAL, 0.1f}};
    zero_engine_params_t p = zero_engine_params_default();
    p.optim_state_dtype = ZERO_DTYPE_INT8;
    p.grad_clip = 0.0f;
    zero_engine_t *a = NULL, *b = NULL;
    CHECK(zero_engine_init(&a, &p) == ZERO_OK && zero_engine_init(&b, &p) == ZERO_OK, "init");
    if (!a || !b) return;
    zero_engine_add_unit(a, "x", t, 3, NULL);
    zero_engine_add_unit(b, "x", t, 3, NULL);
    train(a, 7, 11);
    /* a's states into b, in pieces of 100 elements (cutting blocks), master last */
    const size_t P = zero_engine_unit_padded_count(a, 0);
    float *x = malloc(P * sizeof *x);
    for (int s = ZERO_ENGINE_STATE_COUNT - 1; s >= 0; s--) {
        zero_engine_state_read(a, 0, (zero_engine_state_t)s, 0, P, x);
        for (size_t o = 0; o < P; o += 100)
            CHECK(zero_engine_state_write(b, 0, (zero_engine_state_t)s, o,
                                          o + 100 < P ? 100 : P - o, x + o) == ZERO_OK,
                  "state write");
    }
    zero_engine_set_step_count(b, zero_engine_step_count(a));
    train(a, 5, 99);
    train(b, 5, 99);
    uint64_t fa = 0, fb = 0;
    zero_engine_fingerprint(a, &fa);
    zero_engine_fingerprint(b, &fb);
    CHECK(fa == fb, "8-bit states through fp32 reads and writes: weights differ after 5 steps");
    free(x);
    zero_engine_free(a);
    zero_engine_free(b);
}

/* ------------------------------------------------------------------ (7) resharding */

/* The toy unit of (5) on the ranks of a threads clique: optionally loaded from a checkpoint
 * (every rank loading it whole, as the trainer does), trained for some steps with the same
 * gradients on every rank, hashed (weights; m and v gathered over the ranks), optionally saved. */
typedef struct rs_job {
    int stage, steps;
    const char *load, *save;
    char path[512]; /* the saved checkpoint */
    uint64_t fp, states;
    zero_status_t st;
    char err[512];
} rs_job_t;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

static void rs_rank(zero_comm_t *comm, int rank, void *arg) {
    rs_job_t *j = (rs_job_t *)arg + rank;
    zero_tensor_desc_t t[3] = {{"w", 2, {40, 300}, 0, ZERO_INIT_NORMAL, 0.1f},
                               {"b", 1, {300}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0},
                               {"u", 1, {5001}, 0, ZERO_INIT_NORMAL, 0.1f}};
    const size_t extent = 12000 + 304 + 5001; /* where "u" ends */
    zero_engine_params_t p = zero_engine_params_default();
    p.optim_state_dtype = ZERO_DTYPE_INT8;
    p.grad_clip = 0.0f;
    p.stage = j->stage;
    p.comm = zero_comm_size(comm) > 1 ? comm : NULL;
    p.persistence_threshold_elems = 0;
    zero_engine_t *eng = NULL;
    zero_ckpt_engine_layout_t L = {0};
    zero_ckpt_t *c = NULL;
    zero_ckpt_engine_save_t *sv = NULL;
    float *g = malloc(extent * sizeof *g), *all = NULL;
    zero_status_t st = zero_engine_init(&eng, &p);
    if (!st) st = zero_engine_add_unit(eng, "x", t, 3, NULL);
    if (!st) st = zero_ckpt_engine_layout_init(&L, eng);
    if (!st && j->load) {
        zero_ckpt_shard_io_t io = zero_ckpt_engine_io(eng);
        zero_ckpt_load_params_t lp = zero_ckpt_load_params_default();
        st = zero_ckpt_open(&c, j->load);
        if (!st) st = zero_ckpt_load(c, &lp, &L.layout, &io);
        if (!st) st = zero_engine_set_step_count(eng, zero_ckpt_get_meta(c)->step);
    }
    for (int s = 0; !st && s < j->steps; s++) {
        const int64_t k = zero_engine_step_count(eng);
        for (size_t i = 0; i < extent; i++)
            g[i] = 0.01f * sinf(0.37f * (float)i + (float)k) + (i % 7 == 0 ? -0.02f : 0.0f);
        float *w = zero_unit_grads(eng, 0);
        for (size_t i = 0; i < extent; i++) w[i] = i < 12000 || i >= 12304 ? g[i] : 0.0f;
        zero_step_stats_t ss;
        st = zero_unit_grads_done(eng, 0);
        if (!st) st = zero_engine_step(eng, &ss);
    }
    if (!st) st = zero_engine_fingerprint(eng, &j->fp);
    const size_t P = zero_engine_unit_padded_count(eng, 0);
    all = malloc(P * sizeof *all);
    j->states = 0xcbf29ce484222325ull;
    for (int k = 1; !st && k <= 2; k++) {
        st = zero_engine_state_gather(eng, 0, (zero_engine_state_t)k, all);
        j->states = fnv(j->states, all, extent * sizeof *all);
    }
    if (!st && j->save) {
        zero_ckpt_save_params_t sp = zero_ckpt_save_params_default();
        sp.save_dir = j->save;
        sp.comm = comm;
        zero_ckpt_meta_t meta = {.step = zero_engine_step_count(eng), .stage = j->stage};
        st = zero_ckpt_engine_save_init(&sv, eng, 1);
        zero_ckpt_shard_io_t io = zero_ckpt_engine_save_io(sv);
        if (!st) st = zero_ckpt_save(&sp, &L.layout, &meta, &io, j->path, sizeof j->path);
    }
    if (st) snprintf(j->err, sizeof j->err, "%s", zero_last_error());
    j->st = st;
    zero_ckpt_engine_save_free(sv);
    zero_ckpt_close(c);
    zero_ckpt_engine_layout_free(&L);
    zero_engine_free(eng);
    free(g);
    free(all);
}

static int rs_run(int world, int stage, int steps, const char *load, const char *save,
                  rs_job_t *out) {
    rs_job_t j[4];
    memset(j, 0, sizeof j);
    for (int r = 0; r < world; r++)
        j[r] = (rs_job_t){.stage = stage, .steps = steps, .load = load, .save = save};
    zero_comm_params_t cp = zero_comm_params_default();
    CHECK(thread_ranks_clique_with(world, &cp, rs_rank, j) == ZERO_OK, "clique of %d", world);
    int ok = 1;
    for (int r = 0; r < world; r++) {
        CHECK(j[r].st == ZERO_OK, "%d ranks stage %d rank %d: %s", world, stage, r, j[r].err);
        ok &= j[r].st == ZERO_OK && j[r].fp == j[0].fp && j[r].states == j[0].states;
    }
    *out = j[0];
    return ok;
}

static void reshard(const char *root) {
    char d2[600], d4[600];
    snprintf(d2, sizeof d2, "%s/two", root);
    snprintf(d4, sizeof d4, "%s/four", root);
    rs_job_t a, b, c, d;
    if (!rs_run(2, 3, 4, NULL, d2, &a)) return;
    if (!rs_run(4, 2, 0, a.path, d4, &b)) return; /* loaded, quantized, saved again */
    CHECK(b.fp == a.fp && b.states == a.states,
          "2 -> 4 ranks: weights %016llx / %016llx, states %016llx / %016llx",
          (unsigned long long)b.fp, (unsigned long long)a.fp, (unsigned long long)b.states,
          (unsigned long long)a.states);
    if (!rs_run(1, 0, 2, b.path, NULL, &c) || !rs_run(1, 0, 2, a.path, NULL, &d)) return;
    CHECK(c.fp == d.fp && c.states == d.states && c.fp != a.fp,
          "2 -> 4 -> 1 ranks then 2 steps: %016llx, 2 -> 1: %016llx (saved %016llx)",
          (unsigned long long)c.fp, (unsigned long long)d.fp, (unsigned long long)a.fp);
    printf("8-bit states 2 -> 4 -> 1 ranks: saved %016llx, continued %016llx and %016llx\n",
           (unsigned long long)a.fp, (unsigned long long)c.fp, (unsigned long long)d.fp);
}

/* ------------------------------------------------------------------ (6) */

static void bad_params(void) {
    zero_engine_params_t p = zero_engine_params_default();
    zero_engine_t *eng = NULL;
    p.optim_state_dtype = ZERO_DTYPE_FP16;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "state_dtype fp16"),
          "state dtype fp16 accepted or not named");
    p.optim_state_dtype = ZERO_DTYPE_INT8;
    p.offload_optimizer.device = ZERO_OFFLOAD_NVME;
    CHECK(zero_engine_init(&eng, &p) == ZERO_ERR_CONFIG &&
              strstr(zero_last_error(), "offload_optimizer.device nvme"),
          "int8 states with offload_optimizer nvme accepted or not named");
    CHECK(!eng, "an engine was made");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    char root[512];
    snprintf(root, sizeof root, "%s/zero-test-q8-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root)) return 1;
    zero_log_set_level(ZERO_LOG_WARN);
    reshard(root);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (failed == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", root);
    bad_params();
    against_kernel();
    round_trip();
    bnb_protocol();
    gpt_stages(ZERO_DTYPE_FP32);
    gpt_stages(ZERO_DTYPE_BF16);
    return check_report();
}
