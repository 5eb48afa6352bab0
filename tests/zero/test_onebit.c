/* test_onebit.c — 1-bit Adam at stage 0 (params.onebit, src/zero/onebit.c).
 *
 * Oracles:
 * (1) The worker compressor on a hand-computed case (the RMS scale, sign(0) = +1, the bits LSB
 *     first, the error), and error feedback's telescoping sum: over K steps of inputs x_k, the
 *     compressed values sent plus the final error equal the sum of the inputs (x_k + e_{k-1} =
 *     C_k + e_k summed), to float rounding.
 * (2) Warm-up: on 2 and 4 thread ranks, every rank with its own gradients, the 1-bit engine's
 *     master, m and v after freeze_step steps are bitwise the AdamW engine's.
 * (3) Compression stage: from that state, this test's serial simulation of DeepSpeed's algorithm
 *     (local momentum per rank, worker compression of each tensor padded to N x lcm(N, 8) with
 *     its error, the server average of each chunk in rank order times 1/N plus its error,
 *     compressed again, the result s_r sign; v and its bias correction frozen) gives the
 *     engine's parameters bitwise on every rank after 4 more steps, for tensors of sizes that
 *     need padding and a tensor without decay; also with 2 micro-steps per step, which the
 *     model adds into the unreduced buffer.
 * (4) Bytes: the last step's sent bytes equal this test's count: per tensor an all-to-all and an
 *     all-gather of N blocks of (4 + n_t / N / 8) bytes, (N - 1) blocks each, plus the step's
 *     32-byte control record; 16x fewer than AdamW's stage 0 in fp32 would send, minus scales.
 * (5) Bad parameters: 1-bit Adam at stages 1-3, with fp16, with 8-bit states, with offload:
 *     ZERO_ERR_CONFIG naming the key.
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "ranks.h"
#include "zero/zero.h"
#include "zero/engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ (1) the compressor */

static void compressor(void) {
    float x[8] = {3, -4, 0, 0, 0, 0, 0, 0}, e[8] = {0};
    uint8_t b[1];
    const float s = zero__onebit_compress(x, e, 8, b);
    CHECK(s == (float)(5.0 / sqrt(8.0)), "RMS scale %.9g", s);
    CHECK(b[0] == 0xFD, "sign bits 0x%02x (expected 0xFD: -4 negative, zeros positive)", b[0]);
    CHECK(e[0] == 3 - s && e[1] == -4 + s && e[2] == -s, "errors %g %g %g", e[0], e[1], e[2]);

    enum { N = 256, K = 50 };
    float err[N] = {0}, xin[N];
    double sum_in[N] = {0}, sum_sent[N] = {0};
    uint8_t bits[N / 8];
    uint64_t r = 12345;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            xin[i] = (float)((double)(r >> 11) / 9007199254740992.0 - 0.5) * (1 + i % 7);
            sum_in[i] += xin[i];
        }
        const float sc = zero__onebit_compress(xin, err, N, bits);
        for (int i = 0; i < N; i++) sum_sent[i] += (bits[i / 8] >> (i % 8)) & 1 ? sc : -sc;
    }
    double worst = 0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs(sum_sent[i] + err[i] - sum_in[i]));
    CHECK(worst < 1e-4, "telescoping: sent + final error - inputs up to %g", worst);
}

/* ------------------------------------------------------------------ (2)-(4) the engine */

#define STEPS 6
#define FREEZE 2
#define UNITS 2
static const size_t wsize[UNITS] = {300, 1000}; /* + a 7-element bias each */
static const float LR = 1e-2f, B1 = 0.9f, B2 = 0.99f, EPS = 1e-8f, WD = 0.1f;

/* Rank r's gradient of element i of unit u at step s (1-based). */
static float grad(int r, int s, int u, size_t i) {
    uint64_t h = ((uint64_t)r * 1000003u + (uint64_t)s * 7919u + (uint64_t)u * 104729u + i) *
                 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return (float)((double)(h >> 11) / 9007199254740992.0 - 0.5) * 0.01f + 0.002f * (float)r;
}

typedef struct rank_arg {
    int onebit, accum;
    zero_status_t st;
    float *snap[UNITS][3]; /* master, m, v after FREEZE steps (padded units) */
    float *final[UNITS];   /* the master after STEPS */
    size_t P[UNITS];
    zero_engine_report_t rep;
} rank_arg_t;

static zero_engine_params_t params(zero_comm_t *comm, int onebit) {
    zero_engine_params_t p = zero_engine_params_default();
    p.comm = comm;
    p.lr = LR;
    p.beta1 = B1;
    p.beta2 = B2;
    p.eps = EPS;
    p.weight_decay = WD;
    p.grad_clip = 0.0f;
    p.schedule = ZERO_LR_CONSTANT;
    p.warmup_steps = 0;
    p.onebit = onebit;
    p.freeze_step = FREEZE;
    return p;
}

static void engine_rank(zero_comm_t *comm, void *argp) {
    rank_arg_t *a = argp;
    zero_engine_params_t p = params(comm, a->onebit);
    p.grad_accum_steps = a->accum;
    zero_engine_t *eng = NULL;
    a->st = zero_engine_init(&eng, &p);
    const int r = zero_comm_rank(comm);
    for (int u = 0; !a->st && u < UNITS; u++) {
        zero_tensor_desc_t t[2] = {{"w", 1, {wsize[u]}, 0, ZERO_INIT_NORMAL, 0.1f},
                                   {"b", 1, {7}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_ZEROS, 0.0f}};
        a->st = zero_engine_add_unit(eng, u ? "u1" : "u0", t, 2, NULL);
    }
    for (int s = 1; !a->st && s <= STEPS; s++) {
        for (int k = 0; k < a->accum; k++) /* micro-steps: the model adds into the buffer */
            for (int u = 0; !a->st && u < UNITS; u++) {
                a->P[u] = zero_engine_unit_padded_count(eng, u);
                float *g = zero_unit_grads(eng, u);
                const size_t bo = (wsize[u] + 15) / 16 * 16; /* the bias's 16-aligned offset */
                for (size_t i = 0; i < wsize[u]; i++) g[i] += grad(r, s * 4 + k, u, i);
                for (size_t i = 0; i < 7; i++) g[bo + i] += grad(r, s * 4 + k, u, wsize[u] + i);
                a->st = zero_unit_grads_done(eng, u);
            }
        if (!a->st) a->st = zero_engine_step(eng, NULL);
        for (int u = 0; !a->st && u < UNITS && (s == FREEZE || s == STEPS); u++)
            for (int k = 0; k < (s == FREEZE ? 3 : 1) && !a->st; k++) {
                float *out = malloc(a->P[u] * sizeof *out);
                a->st = zero_engine_state_read(eng, u, (zero_engine_state_t)k, 0, a->P[u], out);
                if (s == FREEZE)
                    a->snap[u][k] = out;
                else
                    a->final[u] = out;
            }
    }
    if (!a->st) zero_engine_get_report(eng, &a->rep);
    zero_engine_free(eng);
}

static size_t ds_padded(size_t n, int N) { /* DeepSpeed's divider: N x lcm(N, 8) */
    size_t l = 8;
    while (l % (size_t)N) l += 8;
    const size_t d = (size_t)N * l;
    return (n + d - 1) / d * d;
}

/* DeepSpeed's compressed all-reduce of N ranks' x[r] (n padded elements each), serially, with
 * worker errors we[r] and server errors se[r] (n / N): out = the averaged vector. */
static void naive_allreduce(int N, float **x, size_t n, float **we, float **se, float *out) {
    const size_t C = n / (size_t)N;
    float *ws = calloc((size_t)N, sizeof *ws), *sgn = calloc((size_t)N * n, sizeof *sgn);
    for (int r = 0; r < N; r++) {
        double s2 = 0;
        for (size_t i = 0; i < n; i++) {
            x[r][i] = x[r][i] + we[r][i];
            s2 += (double)x[r][i] * x[r][i];
        }
        ws[r] = (float)(sqrt(s2) / sqrt((double)n));
        for (size_t i = 0; i < n; i++) {
            sgn[(size_t)r * n + i] = x[r][i] >= 0 ? 1.0f : -1.0f;
            we[r][i] = x[r][i] - ws[r] * sgn[(size_t)r * n + i];
        }
    }
    float *y = calloc(C, sizeof *y);
    for (int c = 0; c < N; c++) { /* the server of chunk c */
        double s2 = 0;
        for (size_t i = 0; i < C; i++) {
            float acc = 0;
            for (int j = 0; j < N; j++) acc += ws[j] * sgn[(size_t)j * n + (size_t)c * C + i];
            y[i] = acc * (1.0f / (float)N) + se[c][i];
            s2 += (double)y[i] * y[i];
        }
        const float ss = (float)(sqrt(s2) / sqrt((double)C));
        for (size_t i = 0; i < C; i++) {
            const float sg = y[i] >= 0 ? 1.0f : -1.0f;
            se[c][i] = y[i] - ss * sg;
            out[(size_t)c * C + i] = ss * sg;
        }
    }
    free(y);
    free(ws);
    free(sgn);
}

static void engine_cases(int N, int accum) {
    rank_arg_t ob[4], ad[4];
    void *pob[4], *pad[4];
    memset(ob, 0, sizeof ob);
    memset(ad, 0, sizeof ad);
    for (int r = 0; r < N; r++) {
        ob[r].onebit = 1;
        ob[r].accum = ad[r].accum = accum;
        pob[r] = &ob[r];
        pad[r] = &ad[r];
    }
    CHECK(run_ranks(N, 60, engine_rank, pob) == ZERO_OK, "clique 1-bit N=%d", N);
    CHECK(run_ranks(N, 60, engine_rank, pad) == ZERO_OK, "clique AdamW N=%d", N);
    for (int r = 0; r < N; r++)
        CHECK(!ob[r].st && !ad[r].st, "N=%d rank %d: %s", N, r, zero_last_error());
    if (ob[0].st || ad[0].st) return;
    /* (2) warm-up bitwise AdamW */
    for (int r = 0; r < N; r++)
        for (int u = 0; u < UNITS; u++)
            for (int k = 0; k < 3; k++)
                CHECK(!memcmp(ob[r].snap[u][k], ad[r].snap[u][k], ob[r].P[u] * sizeof(float)),
                      "N=%d rank %d unit %d state %d after the warm-up: not AdamW's bits", N, r, u,
                      k);
    /* (3) the serial simulation from rank 0's state at FREEZE */
    for (int u = 0; u < UNITS; u++) {
        const size_t P = ob[0].P[u], bo = (wsize[u] + 15) / 16 * 16;
        float *W = malloc(P * sizeof *W), *M = malloc(P * sizeof *M), *V = ob[0].snap[u][2];
        memcpy(W, ob[0].snap[u][0], P * sizeof *W);
        memcpy(M, ob[0].snap[u][1], P * sizeof *M);
        const size_t off[2] = {0, bo}, cnt[2] = {wsize[u], 7};
        float *we[2][4], *se[2][4];
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < N; r++) {
                we[t][r] = calloc(ds_padded(cnt[t], N), sizeof(float));
                se[t][r] = calloc(ds_padded(cnt[t], N) / (size_t)N, sizeof(float));
            }
        for (int s = FREEZE + 1; s <= STEPS; s++) {
            const float bc1 = (float)(1.0 / (1.0 - pow(B1, s)));
            const float bc2 = (float)(1.0 / (1.0 - pow(B2, FREEZE)));
            for (int t = 0; t < 2; t++) {
                const size_t n = ds_padded(cnt[t], N);
                float *x[4], *avg = calloc(n, sizeof *avg);
                /* local momentum, the gradient scaled by 1 / (N accum) x N */
                const float gs = (float)(1.0 / ((double)N * accum) * N);
                for (int r = 0; r < N; r++) {
                    x[r] = calloc(n, sizeof(float));
                    for (size_t i = 0; i < cnt[t]; i++) {
                        float g = 0.0f;
                        for (int k = 0; k < accum; k++)
                            g += grad(r, s * 4 + k, u, (t ? wsize[u] : 0) + i);
                        x[r][i] = B1 * M[off[t] + i] + (1.0f - B1) * (g * gs);
                    }
                }
                naive_allreduce(N, x, n, we[t], se[t], avg);
                const float wd = t ? 0.0f : WD;
                for (size_t i = 0; i < cnt[t]; i++) {
                    const size_t e = off[t] + i;
                    M[e] = avg[i];
                    const float upd = (M[e] * bc1) / (sqrtf(V[e] * bc2) + EPS);
                    W[e] = W[e] - LR * (upd + wd * W[e]);
                }
                for (int r = 0; r < N; r++) free(x[r]);
                free(avg);
            }
        }
        for (int r = 0; r < N; r++)
            CHECK(!memcmp(W, ob[r].final[u], P * sizeof *W),
                  "N=%d rank %d unit %d: the compression stage differs from the simulation", N, r,
                  u);
        CHECK(memcmp(W, ad[0].final[u], P * sizeof *W), "N=%d unit %d: 1-bit equals AdamW", N, u);
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < N; r++) free(we[t][r]), free(se[t][r]);
        free(W);
        free(M);
    }
    /* (4) bytes of the last step */
    uint64_t want = (uint64_t)(N - 1) * 32; /* the control record */
    for (int u = 0; u < UNITS; u++) {
        const size_t cnt[2] = {wsize[u], 7};
        for (int t = 0; t < 2; t++)
            want += 2 * (uint64_t)(N - 1) * (4 + ds_padded(cnt[t], N) / (size_t)N / 8);
    }
    for (int r = 0; r < N; r++)
        CHECK(ob[r].rep.comm_bytes_per_step == want && ob[r].rep.comm_theory_bytes_per_step == want,
              "N=%d rank %d: sent %llu, theory %llu, expected %llu", N, r,
              (unsigned long long)ob[r].rep.comm_bytes_per_step,
              (unsigned long long)ob[r].rep.comm_theory_bytes_per_step, (unsigned long long)want);
    for (int r = 0; r < N; r++)
        for (int u = 0; u < UNITS; u++) {
            for (int k = 0; k < 3; k++) free(ob[r].snap[u][k]), free(ad[r].snap[u][k]);
            free(ob[r].final[u]);
            free(ad[r].final[u]);
        }
}

/* ------------------------------------------------------------------ (5) refusals */

static void refused(const char *what, zero_engine_params_t p, const char *needle) {
    zero_engine_t *eng = NULL;
    const zero_status_t st = zero_engine_init(&eng, &p);
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), needle) &&
              strstr(zero_last_error(), "OneBitAdam"),
          "%s: status %d, '%s' (expected a config error naming %s)", what, st, zero_last_error(),
          needle);
    zero_engine_free(eng);
}

static void refusals(void) {
    for (int s = 1; s <= 3; s++) {
        zero_engine_params_t p = params(NULL, 1);
        p.stage = s;
        refused("stage 1-3", p, "zero_optimization.stage");
    }
    zero_engine_params_t p = params(NULL, 1);
    p.compute_dtype = ZERO_DTYPE_FP16;
    refused("fp16", p, "fp16.enabled");
    p = params(NULL, 1);
    p.optim_state_dtype = ZERO_DTYPE_INT8;
    refused("8-bit states", p, "state_dtype");
    p = params(NULL, 1);
    p.offload_optimizer.device = ZERO_OFFLOAD_CPU;
    refused("offload", p, "offload_optimizer");
    /* a unit of a smaller partition group (expert parallelism) */
    p = params(NULL, 1);
    zero_engine_t *eng = NULL;
    int grp = -1;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK && zero_engine_add_group(eng, 0, &grp) == ZERO_OK,
          "engine with a group: %s", zero_last_error());
    zero_tensor_desc_t t = {"w", 1, {64}, 0, ZERO_INIT_ZEROS, 0.0f};
    const zero_status_t st =
        grp > 0 ? zero_engine_add_unit_in(eng, grp, "e", &t, 1, NULL) : ZERO_ERR_INVALID_ARG;
    CHECK(st == ZERO_ERR_CONFIG && strstr(zero_last_error(), "OneBitAdam") &&
              strstr(zero_last_error(), "ep_size"),
          "unit in group %d: status %d, '%s'", grp, st, zero_last_error());
    zero_engine_free(eng);
}

int main(void) {
    compressor();
    engine_cases(2, 1);
    engine_cases(4, 1);
    engine_cases(2, 2);
    refusals();
    return check_report();
}
