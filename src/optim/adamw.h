/* adamw.h — the AdamW optimizer as a module of its own (adamw.c): its hyper-parameters, the one
 * list of its states (fp32 master, Adam m and v), the residency seam through which every reader
 * and writer of those states reaches them, and the fused step over one tile.
 *
 * Why: the engine's step, its checkpoint access (zero_engine_state_read/write, which the
 * checkpoint module calls) and its memory accounting each used to know the states and where
 * they live. Now they take the list from here and reach the memory only through map/unmap, so
 * that state living elsewhere than RAM (NVMe tiles) changes the residency, not its callers.
 * Not here: the arithmetic (kernels/optim_fused.c: zero__adamw_fused, and kernels/adamw.c), which
 * ranges of which unit a rank updates (zero/step.c), the loss scaler (loss_scaler.c, beside).
 *
 * The seam: map(unit, state, offset, count) returns a pointer to elements
 * [offset, offset + count) of that state of that unit (element offsets of the padded unit buffer,
 * inside what this rank holds of the state), valid until the matching unmap(..., written), which
 * says whether the caller changed them. Every map is unmapped before the next step or checkpoint
 * call returns; a tile is mapped at most once at a time. The RAM residency (zero/state.c) returns
 * base + offset and its unmap does nothing: no copy, no allocation.
 */
#ifndef ZERO_OPTIM_ADAMW_H
#define ZERO_OPTIM_ADAMW_H

#include "zero/engine.h"

#include "kernels/optim_fused.h"

#include <stddef.h>

/* One state of the optimizer. ckpt_name is what the checkpoint calls it (zero_ckpt_state_name:
 * the master is stored as the checkpoint's "params"). */
typedef struct zero__optim_state_info {
    zero_engine_state_t id;
    const char *name;      /* zero_engine_state_name */
    const char *ckpt_name; /* zero_ckpt_state_name of the checkpoint state holding it */
    zero_dtype_t dtype;
    size_t esize; /* bytes per element */
} zero__optim_state_info_t;

/* The list, indexed by zero_engine_state_t. */
extern const zero__optim_state_info_t zero__optim_states[ZERO_ENGINE_STATE_COUNT];

/* The entry of state s, or NULL when s is not a state. */
const zero__optim_state_info_t *zero__optim_state(zero_engine_state_t s);

/* Bytes per element of the states the optimizer holds apart from the parameters: m and v, and
 * the master when it is a buffer of its own (separate_master: 16-bit compute; with fp32 compute
 * the master is the parameter buffer). */
size_t zero__optim_state_bytes(int separate_master);

/* The residency seam (see the top). Both return ZERO_OK or a status with zero__error set (an
 * I/O error of a residency that is not RAM); the RAM residency never fails. */
typedef struct zero__optim_residency {
    zero_status_t (*map)(void *ctx, int unit, zero_engine_state_t state, size_t offset,
                         size_t count, void **ptr);
    zero_status_t (*unmap)(void *ctx, int unit, zero_engine_state_t state, void *ptr, size_t offset,
                           size_t count, int written);
    void *ctx;
} zero__optim_residency_t;

/* AdamW's hyper-parameters, from the engine's parameters (beta1, beta2, eps, weight_decay). */
typedef struct zero__adamw {
    float beta1, beta2, eps, weight_decay;
} zero__adamw_t;

zero__adamw_t zero__adamw_from_params(const zero_engine_params_t *p);

/* The kernel's hyper-parameters for step t (1-based) at learning rate lr; decay 0 for the
 * tensors that skip weight decay (ZERO_TENSOR_NO_DECAY). */
zero__adamw_hp_t zero__adamw_hp(const zero__adamw_t *opt, float lr, int t, int decay);

/* One fused AdamW pass over the tile [offset, offset + n) of unit `unit`: master, m and v are
 * mapped from res, updated by zero__adamw_fused (gradient `grads` of grad_dt scaled by gscale
 * and zeroed if zero_grads; with params != NULL the master rounded into them, param_dt) and
 * unmapped as written. grads and params point at the tile's first element. */
zero_status_t zero__adamw_step_tile(const zero__optim_residency_t *res, int unit, size_t offset,
                                    size_t n, const zero__adamw_hp_t *hp, void *params,
                                    zero_dtype_t param_dt, void *grads, zero_dtype_t grad_dt,
                                    float gscale, int zero_grads, int threads);

#endif /* ZERO_OPTIM_ADAMW_H */
