/* engine_io.c — the checkpoint module plugged into the engine through its public API only: a
 * layout built from the engine's unit and tensor queries, and shard access by
 * zero_engine_params_read/write.
 *
 * Ranges handed to the callbacks are elements of the padded unit buffer; the engine's read/write
 * take the unpadded unit, so the padding is clipped off (reads give zeros, writes drop it). In
 * stage 3 the engine only accepts its own shard, so ranges are also clipped to
 * zero_engine_shard_range: a whole-unit put (safetensors import, or a load at world 1) then
 * fills exactly what this rank owns. In stages 0-2 every rank must write the same whole unit
 * (engine.h), which a load at world 1 without a communicator does on every rank.
 * Not here: Adam m and v (the engine has no public accessor yet: ZERO_ERR_UNSUPPORTED).
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

#include <stdlib.h>

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
        U->name = zero_engine_unit_name(eng, u);
        U->param_count = zero_engine_unit_param_count(eng, u);
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

/* [*a, *e) clipped to what the engine accepts for unit u. */
static void clip(zero_engine_t *eng, int u, size_t *a, size_t *e) {
    size_t pc = zero_engine_unit_param_count(eng, u);
    *e = ZERO_MIN(*e, pc);
    if (zero_engine_params(eng)->stage == 3) {
        size_t so = 0, sc = 0;
        if (zero_engine_shard_range(eng, u, &so, &sc) == ZERO_OK) {
            *a = ZERO_MAX(*a, so);
            *e = ZERO_MIN(*e, so + sc);
        }
    }
    if (*a > *e) *a = *e;
}

static zero_status_t no_optim(zero_ckpt_state_t state) {
    return zero__error(ZERO_ERR_UNSUPPORTED,
                       "checkpoint: the engine does not expose its optimizer state (%s) yet; "
                       "save and load with with_optim = 0",
                       zero_ckpt_state_name(state));
}

static zero_status_t eng_get(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, float *out) {
    zero_engine_t *eng = user;
    (void)rank;
    if (state != ZERO_CKPT_PARAMS) return no_optim(state);
    size_t a = offset, e = offset + count;
    clip(eng, unit, &a, &e);
    memset(out, 0, count * sizeof(float));
    return e > a ? zero_engine_params_read(eng, unit, a, e - a, out + (a - offset)) : ZERO_OK;
}

static zero_status_t eng_put(void *user, int rank, int unit, zero_ckpt_state_t state, size_t offset,
                             size_t count, const float *in) {
    zero_engine_t *eng = user;
    (void)rank;
    if (state != ZERO_CKPT_PARAMS) return no_optim(state);
    size_t a = offset, e = offset + count;
    clip(eng, unit, &a, &e);
    return e > a ? zero_engine_params_write(eng, unit, a, e - a, in + (a - offset)) : ZERO_OK;
}

zero_ckpt_shard_io_t zero_ckpt_engine_io(zero_engine_t *eng) {
    zero_ckpt_shard_io_t io = {eng_get, eng_put, eng};
    return io;
}
