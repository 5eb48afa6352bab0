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
 *
 * Stacked units (zero_engine_add_unit_in: copy c of `copies` slices along dimension 0) appear in
 * the checkpoint as their logical unit: each tensor of shape (copies x shape[0], ...), the tensors
 * placed by the engine's layout rule (each at a multiple of 16 elements), so the files and the
 * manifest do not depend on the copies, and a world unit of the logical shapes has the same
 * layout. A put maps the logical range onto the slice of this rank's copy (the rest is another
 * copy's). A save needs each rank's shard of the logical unit, which other ranks hold:
 * zero_ckpt_engine_save_init gathers it beforehand (collective), one unit and one state at a time.
 * The same for a unit the engine pads to a multiple of 256 x ranks (8-bit optimizer states,
 * src/zero/q8state.c): the checkpoint keeps its round_up(extent, world x 16) layout, so the files
 * do not depend on the optimizer's state dtype, and its shards are cut from the gathered unit.
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"
#include "optim/adamw.h"

#include <stdlib.h>
#include <string.h>

static size_t numel(const zero_tensor_desc_t *d) {
    size_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

/* The end of unit u's last tensor in the engine's buffer (its gaps included, padding not). */
static size_t engine_extent(const zero_engine_t *eng, int u) {
    size_t end = 0;
    for (int t = 0; t < zero_engine_tensor_count(eng, u); t++)
        end = ZERO_MAX(end, zero_engine_tensor_offset(eng, u, t) +
                                numel(zero_engine_tensor_desc(eng, u, t)));
    return end;
}

static int copies_of(const zero_engine_t *eng, int u, int *copy) {
    int copies = 1, c = 0;
    zero_engine_unit_group(eng, u, NULL, &c, &copies);
    if (copy) *copy = c;
    return copies;
}

/* Tensor t of stacked unit u in the logical unit: its offset (the layout rule over the logical
 * tensors) and its elements (copies x the copy's). A plain unit: the engine's offset. */
static size_t logical_offset(const zero_engine_t *eng, int u, int t, size_t *count) {
    const size_t copies = (size_t)copies_of(eng, u, NULL);
    *count = copies * numel(zero_engine_tensor_desc(eng, u, t));
    if (copies == 1) return zero_engine_tensor_offset(eng, u, t);
    size_t off = 0;
    for (int k = 0; k < t; k++)
        off += zero__tensor_span(copies * numel(zero_engine_tensor_desc(eng, u, k)));
    return off;
}

/* The end of unit u's last logical tensor: the checkpoint's unit extent. */
static size_t logical_extent(const zero_engine_t *eng, int u) {
    size_t end = 0;
    for (int t = 0; t < zero_engine_tensor_count(eng, u); t++) {
        size_t n = 0, off = logical_offset(eng, u, t, &n);
        end = ZERO_MAX(end, off + n);
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
    for (int u = 0; u < nu; u++) {
        zero_ckpt_unit_t *U = &out->units[u];
        const int copies = copies_of(eng, u, NULL);
        U->name = zero_engine_unit_name(eng, u);
        U->param_count = logical_extent(eng, u);
        U->tensor_count = zero_engine_tensor_count(eng, u);
        U->tensors = &out->tensors[k];
        U->copies = copies;
        for (int t = 0; t < U->tensor_count; t++, k++) {
            const zero_tensor_desc_t *d = zero_engine_tensor_desc(eng, u, t);
            zero_ckpt_tensor_t *T = &out->tensors[k];
            size_t n = 0;
            T->name = d->name;
            T->ndim = d->ndim;
            for (int i = 0; i < d->ndim && i < ZERO_CKPT_MAX_DIMS; i++) T->shape[i] = d->shape[i];
            T->shape[0] *= (size_t)copies;
            T->offset = logical_offset(eng, u, t, &n);
            T->flags = d->flags;
        }
        /* Our invariant: the checkpoint's padded size is the engine's at its world size (plain
         * units; a stacked unit's shards are re-cut from the logical unit at the save). */
        size_t padded = zero_engine_unit_padded_count(eng, u), so = 0, sc = 0;
        zero_engine_shard_range(eng, u, &so, &sc);
        const size_t G = sc ? padded / sc : 1, extent = engine_extent(eng, u);
        /* (with 8-bit optimizer states the engine pads to group x 256: padded_differs) */
        if (!sc ||
            (zero_ckpt_padded_count(extent, (int)G) != padded &&
             zero__align_up(extent, G * 256) != padded) ||
            (copies == 1 && U->param_count != extent)) {
            zero_ckpt_engine_layout_free(out);
            return zero__error(ZERO_ERR_INTERNAL,
                               "checkpoint layout: unit %d of the engine has %zu padded elements, "
                               "its tensors end at %zu (expected round_up(%zu, group x %d), or "
                               "x 256 with 8-bit optimizer states)",
                               u, padded, extent, extent, ZERO_CKPT_ALIGN_ELEMS);
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

/* Whether unit u's checkpoint shards are not the engine's, so that a save gathers them first:
 * a stacked unit (its copies are on other ranks), or a unit the engine pads to more than the
 * checkpoint's round_up(extent, world x 16) (8-bit optimizer states: group x 256), whose
 * shards are cut elsewhere. */
static int regather(const zero_engine_t *eng, int u, int world) {
    return copies_of(eng, u, NULL) > 1 || zero_engine_unit_padded_count(eng, u) !=
                                              zero_ckpt_padded_count(engine_extent(eng, u), world);
}

static zero_status_t eng_get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, float *out) {
    zero_engine_t *eng = user;
    (void)rank;
    if (copies_of(eng, unit, NULL) > 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint save: unit %d '%s' is stacked (its copies are on other "
                           "ranks): save through zero_ckpt_engine_save_init's shard access",
                           unit, zero_engine_unit_name(eng, unit));
    size_t so = 0, sc = 0;
    zero_engine_shard_range(eng, unit, &so, &sc);
    if (sc && regather(eng, unit, (int)(zero_engine_unit_padded_count(eng, unit) / sc)))
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint save: unit %d '%s' is padded to a multiple of 256 x ranks "
                           "(8-bit optimizer states), so its checkpoint shards are not the "
                           "engine's: save through zero_ckpt_engine_save_init's shard access",
                           unit, zero_engine_unit_name(eng, unit));
    size_t a = offset, e = offset + count;
    zero_status_t st = clip(eng, unit, state, &a, &e);
    if (st) return st;
    memset(out, 0, count * sizeof(float));
    return e > a ? zero_engine_state_read(eng, unit, engine_state(state), a, e - a,
                                          out + (a - offset))
                 : ZERO_OK;
}

/* Local elements [a, e) of unit u from in[0 ..), clipped to what this rank holds. */
static zero_status_t put_local(zero_engine_t *eng, int unit, zero_ckpt_state_t state, size_t a,
                               size_t e, const float *in) {
    const size_t a0 = a;
    zero_status_t st = clip(eng, unit, state, &a, &e);
    if (st) return st;
    return e > a ? zero_engine_state_write(eng, unit, engine_state(state), a, e - a, in + (a - a0))
                 : ZERO_OK;
}

static zero_status_t eng_put(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, const float *in) {
    zero_engine_t *eng = user;
    (void)rank;
    int copy = 0;
    if (copies_of(eng, unit, &copy) == 1)
        return put_local(eng, unit, state, offset, offset + count, in);
    /* Stacked: of each logical tensor, the part in range that is this rank's copy's slice. */
    for (int t = 0; t < zero_engine_tensor_count(eng, unit); t++) {
        size_t n = 0, lo = logical_offset(eng, unit, t, &n);
        n /= (size_t)copies_of(eng, unit, NULL);
        const size_t s0 = lo + (size_t)copy * n; /* the slice [s0, s0 + n) */
        const size_t x0 = ZERO_MAX(s0, offset), x1 = ZERO_MIN(s0 + n, offset + count);
        if (x0 >= x1) continue;
        const size_t local = zero_engine_tensor_offset(eng, unit, t) + (x0 - s0);
        zero_status_t st =
            put_local(eng, unit, state, local, local + (x1 - x0), in + (x0 - offset));
        if (st) return st;
    }
    return ZERO_OK;
}

zero_ckpt_shard_io_t zero_ckpt_engine_io(zero_engine_t *eng) {
    zero_ckpt_shard_io_t io = {eng_get, eng_put, eng};
    return io;
}

/* ------------------------------------------------------------------------------ saving */

struct zero_ckpt_engine_save {
    zero_engine_t *eng;
    int rank, unit_count;
    /* stacked units: this rank's shard of the logical unit at the engine's world size, per state
     * ([unit x ZERO_CKPT_STATE_COUNT + state], owned; NULL for plain units), from logical element
     * lo[unit], count[unit] elements */
    float **held;
    size_t *lo, *count;
};

/* This rank's shard [lo, lo + n) of stacked unit u's logical `state`, from every copy whole (all:
 * copies x P_u, copy c's padded buffer at c x P_u), into out. Gaps and padding stay zero. */
static void cut_logical(const zero_engine_t *eng, int u, const float *all, size_t lo, size_t n,
                        float *out) {
    const size_t P = zero_engine_unit_padded_count(eng, u);
    const size_t copies = (size_t)copies_of(eng, u, NULL);
    memset(out, 0, n * sizeof *out);
    for (int t = 0; t < zero_engine_tensor_count(eng, u); t++) {
        size_t total = 0, tlo = logical_offset(eng, u, t, &total);
        const size_t per = total / copies, local = zero_engine_tensor_offset(eng, u, t);
        const size_t x0 = ZERO_MAX(tlo, lo), x1 = ZERO_MIN(tlo + total, lo + n);
        for (size_t x = x0; x < x1;) { /* one copy's run at a time */
            const size_t j = x - tlo, c = j / per, i = j % per;
            const size_t run = ZERO_MIN(per - i, x1 - x);
            memcpy(out + (x - lo), all + c * P + local + i, run * sizeof *out);
            x += run;
        }
    }
}

zero_status_t zero_ckpt_engine_save_init(zero_ckpt_engine_save_t **out, zero_engine_t *eng,
                                         int with_optim) {
    if (!out || !eng)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_ckpt_engine_save_init: NULL argument");
    *out = NULL;
    zero_ckpt_engine_save_t *sv = calloc(1, sizeof *sv);
    const int nu = zero_engine_unit_count(eng);
    zero_engine_report_t rep;
    zero_engine_get_report(eng, &rep);
    if (sv) {
        sv->eng = eng;
        sv->rank = rep.rank;
        sv->unit_count = nu;
        sv->held = calloc((size_t)(nu ? nu : 1) * ZERO_CKPT_STATE_COUNT, sizeof *sv->held);
        sv->lo = calloc((size_t)(nu ? nu : 1), sizeof *sv->lo);
        sv->count = calloc((size_t)(nu ? nu : 1), sizeof *sv->count);
    }
    if (!sv || !sv->held || !sv->lo || !sv->count) {
        zero_ckpt_engine_save_free(sv);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "checkpoint save: out of memory");
    }
    zero_status_t st = ZERO_OK;
    for (int u = 0; u < nu && !st; u++) {
        const int copies = copies_of(eng, u, NULL);
        if (!regather(eng, u, rep.world_size)) continue;
        zero_ckpt_shard_range(logical_extent(eng, u), rep.world_size, rep.rank, &sv->lo[u],
                              &sv->count[u]);
        const size_t P = zero_engine_unit_padded_count(eng, u);
        float *all = malloc((size_t)copies * P * sizeof *all);
        for (int s = 0; s < (with_optim ? ZERO_CKPT_STATE_COUNT : 1) && !st; s++) {
            float *mine = malloc(ZERO_MAX(sv->count[u], (size_t)1) * sizeof *mine);
            sv->held[u * ZERO_CKPT_STATE_COUNT + s] = mine;
            if (!all || !mine) {
                st = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                 "checkpoint save: no memory to gather stacked unit '%s' (%zu "
                                 "bytes)",
                                 zero_engine_unit_name(eng, u), (size_t)copies * P * sizeof *all);
                break;
            }
            st = zero_engine_state_gather(eng, u, engine_state((zero_ckpt_state_t)s), all);
            if (!st) cut_logical(eng, u, all, sv->lo[u], sv->count[u], mine);
        }
        free(all);
    }
    if (st) {
        zero_ckpt_engine_save_free(sv);
        return st;
    }
    *out = sv;
    return ZERO_OK;
}

static zero_status_t save_get(void *user, int rank, int unit, zero_ckpt_state_t state,
                              size_t offset, size_t count, float *out) {
    zero_ckpt_engine_save_t *sv = user;
    if (unit < 0 || unit >= sv->unit_count || (unsigned)state >= ZERO_CKPT_STATE_COUNT)
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint save: unit %d state %d unknown", unit,
                           (int)state);
    const float *held = sv->held[unit * ZERO_CKPT_STATE_COUNT + state];
    if (!sv->count[unit]) /* not gathered (regather): the engine's shards are the checkpoint's */
        return eng_get(sv->eng, rank, unit, state, offset, count, out);
    if (!held || rank != sv->rank || offset < sv->lo[unit] ||
        offset + count > sv->lo[unit] + sv->count[unit])
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "checkpoint save: [%zu, %zu) of stacked unit '%s' %s for rank %d was "
                           "not gathered (rank %d gathered [%zu, %zu)%s): save with the engine's "
                           "communicator",
                           offset, offset + count, zero_engine_unit_name(sv->eng, unit),
                           zero_ckpt_state_name(state), rank, sv->rank, sv->lo[unit],
                           sv->lo[unit] + sv->count[unit], held ? "" : ", without this state");
    memcpy(out, held + (offset - sv->lo[unit]), count * sizeof *out);
    return ZERO_OK;
}

zero_ckpt_shard_io_t zero_ckpt_engine_save_io(zero_ckpt_engine_save_t *sv) {
    zero_ckpt_shard_io_t io = {save_get, NULL, sv};
    return io;
}

void zero_ckpt_engine_save_free(zero_ckpt_engine_save_t *sv) {
    if (!sv) return;
    for (int i = 0; sv->held && i < sv->unit_count * ZERO_CKPT_STATE_COUNT; i++) free(sv->held[i]);
    free(sv->held);
    free(sv->lo);
    free(sv->count);
    free(sv);
}
