/* state.c — access to the engine's training state for checkpoints: the fp32 master weights, the
 * Adam moments m and v, and the optimizer step counter (the learning-rate schedule position and
 * Adam's bias correction both read it).
 *
 * Not here: the parameters as the model sees them (layout.c, zero_engine_params_read/write) and
 * anything collective: every call touches this rank's memory only.
 * Invariants: ranges are elements of the padded unit buffer and must lie inside what this rank
 * holds of that state (zero_engine_state_range); the caller keeps padding at zero. With fp32
 * compute the master IS the parameter buffer, so writing it changes what the next fetch returns.
 * With 16-bit compute the ranges are the same, but the fp32 master covers only part of them in
 * stages 1-3 (the owned shard): the rest of a whole-unit range is the 16-bit parameters (read
 * widened, written rounded), so a load at world 1 refreshes every parameter a rank holds.
 */
#include "engine_internal.h"

#include <string.h>

static const char *const state_names[] = {"master", "adam_m", "adam_v"};
_Static_assert(sizeof state_names / sizeof state_names[0] == ZERO_ENGINE_STATE_COUNT,
               "state name table");

const char *zero_engine_state_name(zero_engine_state_t state) {
    return (unsigned)state < ZERO_ENGINE_STATE_COUNT ? state_names[state] : "?";
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
    int whole = state == ZERO_ENGINE_STATE_MASTER ? un->shard == NULL : eng->params.stage == 0;
    size_t lo = whole ? 0 : (size_t)eng->rank * un->shard_count;
    size_t n = whole ? un->padded_count : un->shard_count;
    if (offset) *offset = lo;
    if (count) *count = n;
    return ZERO_OK;
}

/* Pointer to element `offset` of `state` of unit u, after checking the range is held here. */
static zero_status_t locate(const zero_engine_t *eng, int u, zero_engine_state_t state,
                            size_t offset, size_t count, float **ptr) {
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
    if (eng->lowp && state == ZERO_ENGINE_STATE_MASTER) {
        *ptr = NULL; /* split between the master and the 16-bit params: see master_io */
        return ZERO_OK;
    }
    float *base = state == ZERO_ENGINE_STATE_ADAM_M   ? un->m
                  : state == ZERO_ENGINE_STATE_ADAM_V ? un->v
                  : un->shard                         ? (float *)un->shard
                                                      : (float *)un->full;
    *ptr = base + (offset - lo);
    return ZERO_OK;
}

zero_status_t zero_engine_state_read(const zero_engine_t *eng, int u, zero_engine_state_t state,
                                     size_t offset, size_t count, float *out) {
    float *p = NULL;
    zero_status_t st = locate(eng, u, state, offset, count, &p);
    if (st) return st;
    if (count && !p) zero__master_io(eng, &eng->units[u], offset, count, out, NULL);
    if (count && p) memcpy(out, p, count * sizeof(float));
    return ZERO_OK;
}

zero_status_t zero_engine_state_write(zero_engine_t *eng, int u, zero_engine_state_t state,
                                      size_t offset, size_t count, const float *in) {
    float *p = NULL;
    zero_status_t st = locate(eng, u, state, offset, count, &p);
    if (st) return st;
    if (count && !p) zero__master_io(eng, &eng->units[u], offset, count, NULL, in);
    if (count && p) memcpy(p, in, count * sizeof(float));
    return ZERO_OK;
}

int64_t zero_engine_step_count(const zero_engine_t *eng) { return eng ? eng->step : 0; }

zero_status_t zero_engine_set_step_count(zero_engine_t *eng, int64_t steps) {
    if (!eng)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_set_step_count: engine is NULL");
    if (steps < 0 || steps > INT32_MAX)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "engine step count %lld is out of range (expected 0 .. %d)",
                           (long long)steps, INT32_MAX);
    eng->step = steps;
    return ZERO_OK;
}
