/* adamw.c — the AdamW optimizer: the list of its states, its hyper-parameters and the fused
 * step over one tile through the residency seam (adamw.h).
 *
 * Not here: the arithmetic (kernels/optim_fused.c), where the states live (the residency:
 * zero/state.c for RAM), which tiles a rank updates (zero/step.c).
 * Invariants: every state is fp32 (the checkpoint's shard I/O and the fused kernel read them as
 * float); a tile is mapped, updated by one kernel call and unmapped, so with the RAM residency
 * the step is the kernel call on the buffers themselves, as before the seam.
 */
#include "adamw.h"

#include "core/core_internal.h"

const zero__optim_state_info_t zero__optim_states[ZERO_ENGINE_STATE_COUNT] = {
    {ZERO_ENGINE_STATE_MASTER, "master", "params", ZERO_DTYPE_FP32, sizeof(float)},
    {ZERO_ENGINE_STATE_ADAM_M, "adam_m", "adam_m", ZERO_DTYPE_FP32, sizeof(float)},
    {ZERO_ENGINE_STATE_ADAM_V, "adam_v", "adam_v", ZERO_DTYPE_FP32, sizeof(float)},
};

const zero__optim_state_info_t *zero__optim_state(zero_engine_state_t s) {
    return (unsigned)s < ZERO_ENGINE_STATE_COUNT ? &zero__optim_states[s] : NULL;
}

size_t zero__optim_state_bytes(int separate_master) {
    size_t b = 0;
    for (int s = 0; s < ZERO_ENGINE_STATE_COUNT; s++)
        if (s != ZERO_ENGINE_STATE_MASTER || separate_master) b += zero__optim_states[s].esize;
    return b;
}

zero__adamw_t zero__adamw_from_params(const zero_engine_params_t *p) {
    zero__adamw_t opt = {p->beta1, p->beta2, p->eps, p->weight_decay};
    return opt;
}

zero__adamw_hp_t zero__adamw_hp(const zero__adamw_t *opt, float lr, int t, int decay) {
    zero__adamw_hp_t hp = {lr, opt->beta1, opt->beta2, opt->eps, decay ? opt->weight_decay : 0.0f,
                           t};
    return hp;
}

zero_status_t zero__adamw_step_tile(const zero__optim_residency_t *res, int unit, size_t offset,
                                    size_t n, const zero__adamw_hp_t *hp, void *params,
                                    zero_dtype_t param_dt, void *grads, zero_dtype_t grad_dt,
                                    float gscale, int zero_grads, int threads) {
    void *x[ZERO_ENGINE_STATE_COUNT] = {NULL};
    zero_status_t st = ZERO_OK;
    int mapped = 0;
    for (; mapped < ZERO_ENGINE_STATE_COUNT && !st; mapped++)
        st = res->map(res->ctx, unit, (zero_engine_state_t)mapped, offset, n, &x[mapped]);
    if (!st)
        zero__adamw_fused(x[ZERO_ENGINE_STATE_MASTER], params, param_dt, grads, grad_dt, gscale,
                          zero_grads, x[ZERO_ENGINE_STATE_ADAM_M], x[ZERO_ENGINE_STATE_ADAM_V], n,
                          hp, threads);
    /* unmap what was mapped, written only if the pass ran */
    const int written = !st;
    for (int s = 0; s < mapped; s++) {
        if (!x[s]) continue;
        zero_status_t u =
            res->unmap(res->ctx, unit, (zero_engine_state_t)s, x[s], offset, n, written);
        if (!st) st = u;
    }
    return st;
}
