/* layout.c — the shard arithmetic shared by every part of the checkpoint module: padded unit
 * sizes, rank ranges, layout validation, state names.
 *
 * Kept apart from ckpt.c (which needs the communicator) so that the readers and the fuzz target
 * link without the rest of the library. Invariant: padded = zero__padded_count (core: the rule
 * the engine uses), rank r owns [r * padded / world, (r + 1) * padded / world), as in the engine
 * (ARCHITECTURE.md section 3).
 */
#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"

static const char *const state_names[] = {"params", "adam_m", "adam_v"};
_Static_assert(ZERO_ARRAY_LEN(state_names) == ZERO_CKPT_STATE_COUNT, "state name table");

const char *zero_ckpt_state_name(zero_ckpt_state_t state) {
    return (unsigned)state < ZERO_CKPT_STATE_COUNT ? state_names[state] : "?";
}

_Static_assert(ZERO_CKPT_ALIGN_ELEMS == ZERO__ALIGN_ELEMS,
               "the checkpoint's alignment is the engine's");

size_t zero_ckpt_padded_count(size_t param_count, int world) {
    return zero__padded_count(param_count, world);
}

void zero_ckpt_shard_range(size_t param_count, int world, int rank, size_t *offset, size_t *count) {
    size_t s = zero_ckpt_padded_count(param_count, world) / (size_t)(world < 1 ? 1 : world);
    *offset = (size_t)rank * s;
    *count = s;
}

zero_status_t zero_ckpt_layout_check(const zero_ckpt_layout_t *L) {
    if (!L || L->unit_count < 0 || (L->unit_count > 0 && !L->units))
        return zero__error(ZERO_ERR_INVALID_ARG, "checkpoint layout is NULL or has no units");
    for (int u = 0; u < L->unit_count; u++) {
        const zero_ckpt_unit_t *U = &L->units[u];
        if (!U->name || U->tensor_count < 0 || (U->tensor_count > 0 && !U->tensors))
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "checkpoint layout: unit %d has no name or no tensors", u);
        for (int t = 0; t < U->tensor_count; t++) {
            const zero_ckpt_tensor_t *T = &U->tensors[t];
            size_t n = 1;
            if (!T->name || T->ndim < 1 || T->ndim > ZERO_CKPT_MAX_DIMS)
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "checkpoint layout: unit %s tensor %d has no name or ndim %d "
                                   "(expected 1..%d)",
                                   U->name, t, T->ndim, ZERO_CKPT_MAX_DIMS);
            for (int d = 0; d < T->ndim; d++) n *= T->shape[d];
            if (T->offset > U->param_count || n > U->param_count - T->offset)
                return zero__error(ZERO_ERR_INVALID_ARG,
                                   "checkpoint layout: unit %s tensor %s [%zu, +%zu) leaves the "
                                   "unit of %zu elements",
                                   U->name, T->name, T->offset, n, U->param_count);
        }
    }
    return ZERO_OK;
}
