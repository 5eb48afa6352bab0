/* engine_io.c — the checkpoint module plugged into the engine through its public API only: a
 * layout built from the engine's unit and tensor queries, and shard access by
 * zero_engine_state_read/write (fp32 master, Adam m and v: the optimizer's list of its states,
 * optim/adamw.h, says which checkpoint state holds which; the engine reaches them through the
 * optimizer's residency seam).
 *
 * The checkpoint's unit extent (zero_ckpt_unit_t.param_count) is where the engine's last tensor
 * ends, not the engine's parameter count: the engine starts every tensor at a multiple of 16
 * elements, so a tensor whose size is not a multiple of 16 leaves a gap of zeros before the next
 * one, and the buffer holds more elements than the sum of the tensors (engine_extent). Both give
 * the same padded size, round_up(extent, world * 16), so the checkpoint's shards are the
 * engine's.
 *
 * Ranges handed to the callbacks are elements of the padded unit buffer. They are clipped to the
 * extent (reads give zeros in the padding, writes drop it, so the engine's padding stays zero) and
 * to what this rank holds of that state (zero_engine_state_range: the whole unit for the master in
 * stages 0-2 and stage-3 persistent units and for stage 0's moments, else the owned shard). So a
 * whole-unit put (safetensors import, or a load at world 1) fills exactly what the rank holds. A
 * load through a communicator at stage 3 delivers only the rank's shard: a persistent unit's full
 * copy would then be partly stale, which is why the trainer loads at world 1 without a communicator
 * on every rank. Whole units must be written alike on every rank.
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"
#include "optim/adamw.h"

#include <stdlib.h>
#include <string.h>

/* The end of unit u's last tensor in the engine's buffer (its gaps included, padding not). */
static size_t engine_extent(const zero_engine_t *eng, int u) {
    size_t end = 0;
    for (int t = 0; t < zero_engine_tensor_count(eng, u); t++) {
        const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
        size_t n = 1;
        for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
        end = ZERO_MAX(end, zero_engine_tensor_offset(eng, u, t) + n);
    }
    return end;
}

zero_status_t zero_ckpt_engine_layout_init(zero_ckpt_engine_layout_t *out,
                                           const zero_engine_t *eng) {
    if (!out || !eng)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_engine_layout_init: NULL argument");
    memset(out, 0, sizeof *out);
    int nu = zero_engine_unit_count(eng);
    size_t nt = 0;
    for (int u = 0; u < nu; u++) nt += (size_t)zero_engine_tensor_count(eng, u);
    out->units = calloc(nu > 0 ? (size_t)nu : 1, sizeof *out->units);
    out->tensors = calloc(nt ? nt : 1, sizeof *out->tensors);
    if (!out->units || !out->tensors) {
        zero_ckpt_engine_layout_free(out);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint layout: out of memory");
    }
    size_t k = 0;
    size_t ranks0 = 0; /* ranks the first unit is sharded over */
    for (int u = 0; u < nu; u++) {
        zero_ckpt_unit_t *U = &out->units[u];
        U->name = zero_engine_unit_name(eng, u);
        U->param_count = engine_extent(eng, u);
        U->tensor_count = zero_engine_tensor_count(eng, u);
        U->tensors = &out->tensors[k];
        for (int t = 0; t < U->tensor_count; t++, k++) {
            const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
            zero_ckpt_tensor_t *T = &out->tensors[k];
            T->name = d->name;
            T->ndim = d->ndim;
            for (int i = 0; i < d->ndim && i < ZERO_CKPT_MAX_DIMS; i++) T->shape[i] = d->shape[i];
            T->offset = zero_engine_tensor_offset(eng, u, t);
            T->flags = d->flags;
        }
        /* Our invariant: the checkpoint's padded size is the engine's at its world size. */
        size_t padded = zero_engine_unit_padded_count(eng, u), so = 0, sc = 0;
        zero_engine_shard_range(eng, u, &so, &sc);
        if (!sc || zero_ckpt_padded_count(U->param_count, (int)(padded / sc)) != padded) {
            zero_ckpt_engine_layout_free(out);
            return zero__error(ZERO_ERR_INTERNAL,
                               "checkpoint layout: unit %d of the engine has %zu padded elements, "
                               "its tensors end at %zu (expected round_up(%zu, world x %d))",
                               u, padded, engine_extent(eng, u), engine_extent(eng, u),
                               ZERO_CKPT_ALIGN_ELEMS);
        }
        /* Every unit sharded over the same ranks (the world): a unit of a smaller partition
         * group (an expert) holds different parameters in each group, which one set of shard
         * files per rank cannot say yet. */
        if (u == 0) ranks0 = padded / sc;
        if (padded / sc != ranks0) {
            zero_ckpt_engine_layout_free(out);
            return zero__error(ZERO_ERR_UNSUPPORTED,
                               "checkpoint layout: unit %d '%s' is sharded over %zu ranks, unit 0 "
                               "over %zu: checkpoints of units in partition groups smaller than "
                               "the world are not supported",
                               u, zero_engine_unit_name(eng, u), padded / sc, ranks0);
        }
    }
    out->layout.unit_count = nu;
    out->layout.units = out->units;
    return zero_ckpt_layout_check(&out->layout);
}

void zero_ckpt_engine_layout_free(zero_ckpt_engine_layout_t *l) {
    if (!l) return;
    free(l->units);
    free(l->tensors);
    memset(l, 0, sizeof *l);
}

/* The engine state a checkpoint state holds, from the optimizer's list of its states (which
 * names each in both). The callbacks move fp32 values: every state is fp32 (asserted). */
static zero_engine_state_t engine_state(zero_ckpt_state_t state) {
    const char *name = zero_ckpt_state_name(state);
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++)
        if (!strcmp(zero__optim_states[s].ckpt_name, name)) {
            ZERO_ASSERT(zero__optim_states[s].dtype == ZERO_DTYPE_FP32);
            return (zero_engine_state_t)s;
        }
    ZERO_ASSERT(0 && "a checkpoint state the optimizer does not list");
    return ZERO_ENGINE_STATE_MASTER;
}

/* [*a, *e) clipped to the unit's extent and to what this rank holds of the state. */
static zero_status_t clip(zero_engine_t *eng, int u, zero_ckpt_state_t state, size_t *a,
                          size_t *e) {
    if ((unsigned)state >= ZERO_CKPT_STATE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint: unknown state %d of unit %d",
                           (int)state, u);
    size_t so = 0, sc = 0;
    zero_status_t st = zero_engine_state_range(eng, u, engine_state(state), &so, &sc);
    if (st) return st;
    *e = ZERO_MIN(*e, engine_extent(eng, u));
    *a = ZERO_MAX(*a, so);
    *e = ZERO_MIN(*e, so + sc);
    if (*a > *e) *a = *e;
    return ZERO_OK;
}

static zero_status_t eng_get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, float *out) {
    zero_engine_t *eng = user;
    (void)rank;
    size_t a = offset, e = offset + count;
    zero_status_t st = clip(eng, unit, state, &a, &e);
    if (st) return st;
    memset(out, 0, count * sizeof(float));
    return e > a ? zero_engine_state_read(eng, unit, engine_state(state), a, e - a,
                                          out + (a - offset))
                 : ZERO_OK;
}

static zero_status_t eng_put(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, const float *in) {
    zero_engine_t *eng = user;
    (void)rank;
    size_t a = offset, e = offset + count;
    zero_status_t st = clip(eng, unit, state, &a, &e);
    if (st) return st;
    return e > a ? zero_engine_state_write(eng, unit, engine_state(state), a, e - a,
                                           in + (a - offset))
                 : ZERO_OK;
}

zero_ckpt_shard_io_t zero_ckpt_engine_io(zero_engine_t *eng) {
    zero_ckpt_shard_io_t io = {eng_get, eng_put, eng};
    return io;
}
