/* state.c — access to the engine's training state for checkpoints: the fp32 master weights, the
 * Adam moments m and v, and the optimizer step counter (the learning-rate schedule position and
 * Adam's bias correction both read it).
 *
 * Not here: the parameters as the model sees them (layout.c, zero_engine_params_read/write).
 * Every call touches this rank's memory only but zero_engine_state_gather, the one collective
 * (every copy of a stacked unit on every rank, for a checkpoint's save).
 * Invariants: ranges are elements of the padded unit buffer and must lie inside what this rank
 * holds of that state (zero_engine_state_range); the caller keeps padding at zero. With fp32
 * compute the master IS the parameter buffer, so writing it changes what the next fetch returns.
 * With 16-bit compute the ranges are the same, but the fp32 master covers only part of them in
 * stages 1-3 (the owned shard): the rest of a whole-unit range is the 16-bit parameters (read
 * widened, written rounded), so a load at world 1 refreshes every parameter a rank holds.
 * With 8-bit Adam states m and v are read and written as fp32 through q8state.c.
 */
#include "engine_internal.h"

#include "optim/adamw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *zero_engine_state_name(zero_engine_state_t state) {
    const zero__optim_state_info_t *info = zero__optim_state(state);
    return info ? info->name : "?";
}

void zero__optim_held_range(const zero_engine_t *eng, const zero__unit_t *un,
                            zero_engine_state_t state, size_t *lo, size_t *n) {
    int whole = !eng->pol.shard_optim;
    if (state == ZERO_ENGINE_STATE_MASTER && !eng->lowp) whole = !zero__unit_sharded(un);
    *lo = whole ? 0 : zero__shard_lo(un);
    *n = whole ? un->padded_count : un->shard_count;
}

/* The RAM residency of the optimizer's states (optim/adamw.h): the buffer holding what this
 * rank holds of `state` of unit un (zero__optim_held_range), element 0 at the range's start.
 * The fp32 master: with 16-bit compute its own buffer; with fp32 compute the parameters (stage
 * 3's shard, else the full buffer). */
static float *ram_buffer(const zero_engine_t *eng, const zero__unit_t *un,
                         zero_engine_state_t state, size_t *lo, size_t *n) {
    zero__optim_held_range(eng, un, state, lo, n);
    if (state != ZERO_ENGINE_STATE_MASTER) return state == ZERO_ENGINE_STATE_ADAM_M ? un->m : un->v;
    return eng->lowp ? un->master : un->shard ? (float *)un->shard : (float *)un->full;
}

/* fp32 compute's master of a stage-3 shard in a parameter swap file (offload_param nvme): the
 * shard is mapped (uswap.c) between map and unmap, never held by the optimizer's swap. */
static int master_is_pshard(const zero_engine_t *eng, int u, zero_engine_state_t state) {
    return state == ZERO_ENGINE_STATE_MASTER && !eng->lowp && eng->units[u].poff;
}

/* map: base + offset, after checking (assert) that the range is inside the buffer. */
static zero_status_t ram_map(void *ctx, int u, zero_engine_state_t state, size_t offset,
                             size_t count, void **ptr) {
    const zero_engine_t *eng = ctx;
    size_t lo, n;
    float *base = ram_buffer(eng, &eng->units[u], state, &lo, &n);
    if (master_is_pshard(eng, u, state)) {
        void *shard = NULL;
        zero_status_t st = zero__shard_map(eng, &eng->units[u], &shard);
        if (st) return st;
        base = shard;
    }
    ZERO_ASSERT(offset >= lo && count <= n && offset - lo <= n - count);
    *ptr = base + (offset - lo);
    return ZERO_OK;
}

/* unmap: the tile is the buffer itself, nothing to write back. */
static zero_status_t ram_unmap(void *ctx, int u, zero_engine_state_t state, void *ptr,
                               size_t offset, size_t count, int written) {
    (void)ptr, (void)offset, (void)count;
    const zero_engine_t *eng = ctx;
    if (master_is_pshard(eng, u, state)) zero__shard_unmap(eng, &eng->units[u], written);
    return ZERO_OK;
}

zero__optim_residency_t zero__state_residency_ram(zero_engine_t *eng) {
    zero__optim_residency_t r = {ram_map, ram_unmap, eng};
    return r;
}

void zero__engine_set_residency(zero_engine_t *eng, const zero__optim_residency_t *res) {
    eng->residency = *res;
}

zero_status_t zero_engine_state_range(const zero_engine_t *eng, int u, zero_engine_state_t state,
                                      size_t *offset, size_t *count) {
    if (!eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_state_range: engine is NULL");
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un)
        return zero__error(ZERO_ERR_INVALID_ARG, "engine state: unit %d does not exist (%d units)",
                           u, eng->unit_count);
    if ((unsigned)state >= ZERO_ENGINE_STATE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "engine state: state %d of unit '%s' is not one of master, adam_m, "
                           "adam_v",
                           (int)state, un->name);
    /* Whole units: every stage's master outside stage 3 and stage 3's persistent units (their
     * full buffer is the one updated and used); stage 0's moments. Otherwise the owned shard. */
    int whole = state == ZERO_ENGINE_STATE_MASTER ? !zero__unit_sharded(un) : !eng->pol.shard_optim;
    size_t lo = whole ? 0 : zero__shard_lo(un);
    size_t n = whole ? un->padded_count : un->shard_count;
    if (offset) *offset = lo;
    if (count) *count = n;
    return ZERO_OK;
}

/* Checks that [offset, offset + count) of `state` of unit u is held here. *split: 16-bit
 * compute's master, split between the fp32 master and the 16-bit params (zero__master_io). */
static zero_status_t locate(const zero_engine_t *eng, int u, zero_engine_state_t state,
                            size_t offset, size_t count, int *split) {
    size_t lo = 0, n = 0;
    zero_status_t st = zero_engine_state_range(eng, u, state, &lo, &n);
    if (st) return st;
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (offset < lo || offset > lo + n || count > lo + n - offset)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "engine state: range [%zu, %zu) of %s of unit %d '%s' is not held by "
                           "rank %d at stage %d (it holds [%zu, %zu) of %zu padded elements)",
                           offset, offset + count, zero_engine_state_name(state), u, un->name,
                           eng->rank, eng->params.stage, lo, lo + n, un->padded_count);
    *split = eng->lowp && state == ZERO_ENGINE_STATE_MASTER;
    return ZERO_OK;
}

/* Copy one tile between the caller's buffer and the state through the residency: read (out)
 * or write (in). */
static zero_status_t state_copy(zero_engine_t *eng, int u, zero_engine_state_t state, size_t offset,
                                size_t count, float *out, const float *in) {
    void *p = NULL;
    zero_status_t st = eng->residency.map(eng->residency.ctx, u, state, offset, count, &p);
    if (st) return st;
    memcpy(in ? p : (void *)out, in ? (const void *)in : p, count * sizeof(float));
    return eng->residency.unmap(eng->residency.ctx, u, state, p, offset, count, in != NULL);
}

zero_status_t zero_engine_state_read(const zero_engine_t *eng, int u, zero_engine_state_t state,
                                     size_t offset, size_t count, float *out) {
    int split = 0;
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_state_read");
    if (!st) st = locate(eng, u, state, offset, count, &split);
    if (st || !count) return st;
    if (split) return zero__master_io(eng, &eng->units[u], offset, count, out, NULL);
    if (eng->q8 && state != ZERO_ENGINE_STATE_MASTER) /* 8-bit m, v: dequantized */
        return zero__q8_io((zero_engine_t *)eng, &eng->units[u], state, offset, count, out, NULL);
    /* reading maps the tile without changing it (unmapped as not written) */
    return state_copy((zero_engine_t *)eng, u, state, offset, count, out, NULL);
}

zero_status_t zero_engine_state_write(zero_engine_t *eng, int u, zero_engine_state_t state,
                                      size_t offset, size_t count, const float *in) {
    int split = 0;
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_state_write");
    if (!st) st = locate(eng, u, state, offset, count, &split);
    if (st || !count) return st;
    zero__hpz_invalidate(eng); /* a master written: the parameters follow it */
    eng->loco_reset = 1;       /* and LoCo's error feedback starts again (as at resume) */
    if (split) {
        st = zero__master_io(eng, &eng->units[u], offset, count, NULL, in);
        if (!st && zero__fp8w_unit(eng, &eng->units[u])) /* the parameters follow, on the grid */
            st = zero__fp8w_refresh(eng, &eng->units[u], offset, count);
        return st;
    }
    if (eng->q8 && state != ZERO_ENGINE_STATE_MASTER) /* 8-bit m, v: quantized at the step */
        return zero__q8_io(eng, &eng->units[u], state, offset, count, NULL, in);
    return state_copy(eng, u, state, offset, count, NULL, in);
}

zero_status_t zero_engine_state_gather(zero_engine_t *eng, int u, zero_engine_state_t state,
                                       float *out) {
    const zero__unit_t *un = zero__engine_unit(eng, u);
    if (!un || !out || (unsigned)state >= ZERO_ENGINE_STATE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_state_gather: bad unit %d, state %d or NULL output", u,
                           (int)state);
    const zero__group_t *g = un->grp;
    const size_t S = un->shard_count, P = un->padded_count;
    const int W = eng->world;
    if (W == 1) return zero_engine_state_read(eng, u, state, 0, P, out);
    /* Every rank's owned shard (inside whatever it holds of every state), gathered over the
     * world in world-rank order, then placed at its copy and group rank. A rank that cannot read
     * its shard sends zeros, so that the gather stays matched, and the statuses fail every rank. */
    float *all = malloc((size_t)W * S * sizeof *all);
    if (!all)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                           "zero_engine_state_gather: no memory for unit '%s' (%zu bytes)",
                           un->name, (size_t)W * S * sizeof *all);
    float *mine = all + (size_t)eng->rank * S;
    zero_status_t own = zero_engine_state_read(eng, u, state, zero__shard_lo(un), S, mine);
    char msg[512] = "";
    if (own) {
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        memset(mine, 0, S * sizeof *mine);
    }
    zero_status_t st = zero__xfer_gather(eng, &eng->groups[0], ZERO__XFER_CHECK, mine, all, S,
                                         ZERO_DTYPE_FP32, NULL);
    int bad = -1;
    zero_status_t theirs = ZERO_OK;
    if (!st) st = zero__xfer_statuses(eng, ZERO__XFER_CHECK, own, &bad, &theirs);
    if (!st && bad >= 0)
        st = own ? zero__error(own, "%s", msg)
                 : zero__error(theirs,
                               "zero_engine_state_gather: rank %d could not read its %s of unit "
                               "'%s'",
                               bad, zero_engine_state_name(state), un->name);
    for (int w = 0; !st && w < W; w++) {
        const int copy = g->copy_of ? g->copy_of[w] : 0, grank = g->grank_of ? g->grank_of[w] : w;
        memcpy(out + (size_t)copy * P + (size_t)grank * S, all + (size_t)w * S, S * sizeof *out);
    }
    free(all);
    return st;
}

int64_t zero_engine_step_count(const zero_engine_t *eng) { return eng ? eng->step : 0; }

zero_status_t zero_engine_set_step_count(zero_engine_t *eng, int64_t steps) {
    if (!eng)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_set_step_count: engine is NULL");
    if (steps < 0 || steps > INT32_MAX)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "engine step count %lld is out of range (expected 0 .. %d)",
                           (long long)steps, INT32_MAX);
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_set_step_count");
    if (st) return st;
    eng->step = steps;
    return ZERO_OK;
}
