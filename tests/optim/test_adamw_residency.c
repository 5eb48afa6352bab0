/* test_adamw_residency.c — the residency seam of the optimizer's states (optim/adamw.h): an
 * engine whose states live in a store of the test's own, reached only through map/unmap, trains
 * bit for bit like the same engine on the RAM residency, and its checkpoint access
 * (zero_engine_state_read/write) reads and writes that store.
 *
 * The bounce residency: when installed it copies every state range the rank holds (Adam m and v;
 * with 16-bit compute the fp32 master too) out of the engine's buffers into its store and fills
 * those buffers with NaN, so an access that bypasses the seam turns the weights into NaN. map
 * hands out a fresh malloc'd copy of the tile, unmap writes it back only when flagged written and
 * checks that a tile not flagged written is unchanged. With fp32 compute the master is the
 * parameter buffer the model reads, so it stays there, but its tiles still bounce through copies
 * (a write not flagged would be lost and caught).
 * Compared with the RAM engine after every step: parameters, master, m and v bit for bit (read
 * through the seam), and no tile left mapped. Halfway, the same new m and master are written into
 * both (the checkpoint's load path) and training goes on. Stages 0-3, fp32 / bf16 / fp16, one rank.
 * Prints "N passed, M failed" and fails through the exit code.
 */
#include "check.h"
#include "optim/adamw.h"
#include "zero/engine.h"
#include "zero/engine_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 4, NU = 2, MAXU = 4 };

typedef struct bounce {
    zero__optim_residency_t ram;                 /* the engine's own, to reach its buffers */
    float *store[MAXU][ZERO_ENGINE_STATE_COUNT]; /* NULL: the state stays in the engine (RAM) */
    size_t lo[MAXU][ZERO_ENGINE_STATE_COUNT], n[MAXU][ZERO_ENGINE_STATE_COUNT];
    int open, maps, bad_range, unflagged_write;
} bounce_t;

typedef struct tile {
    float *copy, *orig;
} tile_t;

/* Where the tile lives: the store, or (a state left in the engine) the engine's own buffer. */
static zero_status_t backing(bounce_t *b, int u, zero_engine_state_t s, size_t offset, size_t count,
                             float **where) {
    if (!b->store[u][s]) return b->ram.map(b->ram.ctx, u, s, offset, count, (void **)where);
    if (offset < b->lo[u][s] || offset + count > b->lo[u][s] + b->n[u][s]) b->bad_range++;
    *where = b->store[u][s] + (offset - b->lo[u][s]);
    return ZERO_OK;
}

static zero_status_t b_map(void *ctx, int u, zero_engine_state_t s, size_t offset, size_t count,
                           void **ptr) {
    bounce_t *b = ctx;
    float *src;
    zero_status_t st = backing(b, u, s, offset, count, &src);
    if (st) return st;
    /* the tile handed out, then a pristine copy behind it to check unflagged writes */
    float *t = malloc(2 * (count ? count : 1) * sizeof(float));
    if (!t) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "bounce: out of memory");
    memcpy(t, src, count * sizeof(float));
    memcpy(t + count, src, count * sizeof(float));
    *ptr = t;
    b->open++;
    b->maps++;
    return ZERO_OK;
}

static zero_status_t b_unmap(void *ctx, int u, zero_engine_state_t s, void *ptr, size_t offset,
                             size_t count, int written) {
    bounce_t *b = ctx;
    float *t = ptr, *dst;
    zero_status_t st = backing(b, u, s, offset, count, &dst);
    if (st) return st;
    if (written)
        memcpy(dst, t, count * sizeof(float));
    else if (memcmp(t, t + count, count * sizeof(float)) != 0)
        b->unflagged_write++;
    free(t);
    b->open--;
    return ZERO_OK;
}

/* Move the states of eng into b's store (see the top) and make b eng's residency. */
static void bounce_install(bounce_t *b, zero_engine_t *eng, int lowp) {
    memset(b, 0, sizeof *b);
    b->ram = zero__state_residency_ram(eng);
    for (int u = 0; u < zero_engine_unit_count(eng); u++)
        for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++) {
            if (s == ZERO_ENGINE_STATE_MASTER && !lowp) continue;
            size_t lo, n;
            zero_engine_state_range(eng, u, (zero_engine_state_t)s, &lo, &n);
            if (s == ZERO_ENGINE_STATE_MASTER && zero_engine_params(eng)->stage > 0)
                zero_engine_shard_range(eng, u, &lo, &n); /* the fp32 master: the owned shard */
            void *p;
            b->ram.map(b->ram.ctx, u, (zero_engine_state_t)s, lo, n, &p);
            b->store[u][s] = malloc(n * sizeof(float));
            memcpy(b->store[u][s], p, n * sizeof(float));
            for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
            b->ram.unmap(b->ram.ctx, u, (zero_engine_state_t)s, p, lo, n, 1);
            b->lo[u][s] = lo;
            b->n[u][s] = n;
        }
    zero__optim_residency_t r = {b_map, b_unmap, b};
    zero__engine_set_residency(eng, &r);
}

static void bounce_free(bounce_t *b) {
    for (int u = 0; u < MAXU; u++)
        for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++) free(b->store[u][s]);
}

static zero_engine_t *make(int stage, zero_dtype_t dt) {
    zero_engine_params_t p = zero_engine_params_default();
    p.stage = stage;
    p.compute_dtype = dt;
    p.lr = 0.01f;
    p.warmup_steps = 1;
    p.total_steps = STEPS;
    p.weight_decay = 0.1f;
    p.threads = 2;
    zero_engine_t *eng = NULL;
    CHECK(zero_engine_init(&eng, &p) == ZERO_OK, "init");
    zero_tensor_desc_t t0[2] = {{"w", 1, {37}, 0, ZERO_INIT_NORMAL, 1.0f},
                                {"b", 1, {5}, ZERO_TENSOR_NO_DECAY, ZERO_INIT_NORMAL, 1.0f}};
    zero_tensor_desc_t t1[1] = {{"big", 2, {120, 150}, 0, ZERO_INIT_NORMAL, 0.1f}};
    CHECK(zero_engine_add_unit(eng, "small", t0, 2, NULL) == ZERO_OK, "unit");
    CHECK(zero_engine_add_unit(eng, "big", t1, 1, NULL) == ZERO_OK, "unit");
    return eng;
}

/* The same deterministic gradient into unit u of eng (the compute dtype's element size). */
static void give_grads(zero_engine_t *eng, int u, int step, zero_dtype_t dt) {
    size_t P = zero_engine_unit_padded_count(eng, u);
    size_t n = zero_engine_tensor_offset(eng, u, zero_engine_tensor_count(eng, u) - 1) + 5;
    void *g = zero_unit_grads(eng, u);
    for (size_t i = 0; i < n && i < P; i++) {
        float x =
            (float)((int)((i * 2654435761u + (size_t)step * 40503u + (size_t)u) % 511) - 255) /
            256.0f;
        if (dt == ZERO_DTYPE_FP32)
            ((float *)g)[i] = x;
        else
            ((uint16_t *)g)[i] =
                dt == ZERO_DTYPE_BF16 ? zero_fp32_to_bf16(x) : zero_fp32_to_fp16(x);
    }
    CHECK(zero_unit_grads_done(eng, u) == ZERO_OK, "grads_done");
}

/* Bitwise comparison of parameters and every state of the two engines. */
static void compare(zero_engine_t *a, zero_engine_t *b, const char *what, int step) {
    for (int u = 0; u < NU; u++) {
        size_t P = zero_engine_unit_padded_count(a, u);
        float *x = malloc(P * sizeof(float)), *y = malloc(P * sizeof(float));
        CHECK(zero_engine_params_read(a, u, 0, P, x) == ZERO_OK, "params read");
        CHECK(zero_engine_params_read(b, u, 0, P, y) == ZERO_OK, "params read");
        CHECK(memcmp(x, y, P * sizeof(float)) == 0, "%s step %d unit %d: parameters differ", what,
              step, u);
        for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++) {
            size_t lo, n;
            zero_engine_state_range(a, u, (zero_engine_state_t)s, &lo, &n);
            CHECK(zero_engine_state_read(a, u, (zero_engine_state_t)s, lo, n, x) == ZERO_OK,
                  "read");
            CHECK(zero_engine_state_read(b, u, (zero_engine_state_t)s, lo, n, y) == ZERO_OK,
                  "read");
            size_t differ = 0, nan = 0;
            for (size_t i = 0; i < n; i++) {
                differ += memcmp(&x[i], &y[i], sizeof(float)) != 0;
                nan += isnan(y[i]);
            }
            CHECK(differ == 0 && nan == 0, "%s step %d unit %d %s: %zu differ, %zu NaN", what, step,
                  u, zero_engine_state_name((zero_engine_state_t)s), differ, nan);
        }
        free(x), free(y);
    }
}

static void run(int stage, zero_dtype_t dt) {
    char what[64];
    snprintf(what, sizeof what, "stage %d %s", stage,
             dt == ZERO_DTYPE_FP32   ? "fp32"
             : dt == ZERO_DTYPE_BF16 ? "bf16"
                                     : "fp16");
    zero_engine_t *a = make(stage, dt), *b = make(stage, dt);
    if (!a || !b) return;
    bounce_t bo;
    bounce_install(&bo, b, dt != ZERO_DTYPE_FP32);
    compare(a, b, what, 0);
    for (int s = 1; s <= STEPS; s++) {
        for (int u = 0; u < NU; u++) give_grads(a, u, s, dt), give_grads(b, u, s, dt);
        zero_step_stats_t sa, sb;
        CHECK(zero_engine_step(a, &sa) == ZERO_OK, "%s: step", what);
        CHECK(zero_engine_step(b, &sb) == ZERO_OK, "%s: step", what);
        CHECK(!sa.skipped && !sb.skipped, "%s step %d: skipped", what, s);
        compare(a, b, what, s);
        if (s == 2) /* the load path: the same new m and master into both */
            for (int u = 0; u < NU; u++)
                for (int st = ZERO_ENGINE_STATE_MASTER; st <= ZERO_ENGINE_STATE_ADAM_M; st++) {
                    size_t lo, n;
                    zero_engine_state_range(a, u, (zero_engine_state_t)st, &lo, &n);
                    float *x = malloc(n * sizeof(float));
                    zero_engine_state_read(a, u, (zero_engine_state_t)st, lo, n, x);
                    for (size_t i = 0; i < n; i++) x[i] *= 0.5f;
                    CHECK(zero_engine_state_write(a, u, (zero_engine_state_t)st, lo, n, x) ==
                              ZERO_OK,
                          "write");
                    CHECK(zero_engine_state_write(b, u, (zero_engine_state_t)st, lo, n, x) ==
                              ZERO_OK,
                          "write");
                    free(x);
                }
    }
    CHECK(bo.maps > 0, "%s: the step never mapped a tile", what);
    CHECK(bo.open == 0, "%s: %d tiles left mapped", what, bo.open);
    CHECK(bo.bad_range == 0, "%s: %d maps outside what the rank holds", what, bo.bad_range);
    CHECK(bo.unflagged_write == 0, "%s: %d tiles changed but unmapped as not written", what,
          bo.unflagged_write);
    zero_engine_free(a);
    zero_engine_free(b);
    bounce_free(&bo);
}

int main(void) {
    const zero_dtype_t dts[3] = {ZERO_DTYPE_FP32, ZERO_DTYPE_BF16, ZERO_DTYPE_FP16};
    for (int stage = 0; stage <= 3; stage++)
        for (int d = 0; d < 3; d++) run(stage, dts[d]);
    return check_report();
}
