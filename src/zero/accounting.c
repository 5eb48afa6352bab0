/* accounting.c — the weights fingerprint and the per-rank report: memory by category beside the
 * theory of this engine's padded layout, and the bytes this rank sent in the last step beside the
 * formula (both documented in engine.h).
 *
 * Not here: the allocations themselves (every engine allocation carries its category where it
 * is made). Invariants: the comm counters are the engine's private communicator's, so they hold
 * only the engine's collectives; a fingerprint's traffic is moved out of the step's window.
 */
#include "engine_internal.h"

#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

/* The control all-gather of each step (step.c's step_record_t). */
#define CONTROL_BYTES 32u

void zero__comm_sent(const zero_engine_t *eng, uint64_t out[ZERO_COLL_COUNT]) {
    memset(out, 0, ZERO_COLL_COUNT * sizeof *out);
    if (!eng->comm) return;
    zero_comm_stats_t s;
    zero_comm_get_stats(eng->comm, &s);
    memcpy(out, s.sent_bytes, ZERO_COLL_COUNT * sizeof *out);
}

void zero__accounting_end_step(zero_engine_t *eng) {
    uint64_t now[ZERO_COLL_COUNT];
    zero__comm_sent(eng, now);
    for (int c = 0; c < ZERO_COLL_COUNT; c++) {
        eng->last_sent[c] = now[c] - eng->sent_base[c];
        eng->sent_base[c] = now[c];
    }
    eng->last_rs_elems = eng->rs_elems;
    eng->last_gather_elems = eng->gather_elems;
    eng->rs_elems = eng->gather_elems = 0;
    eng->have_last = 1;
}

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

zero_status_t zero_engine_fingerprint(zero_engine_t *eng, uint64_t *out) {
    if (!eng || !out)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_fingerprint: NULL argument");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    uint64_t before[ZERO_COLL_COUNT];
    zero__comm_sent(eng, before);
    uint64_t h = FNV_OFFSET;
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < eng->unit_count && !st; i++) {
        zero__unit_t *u = &eng->units[i];
        const float *w = u->full;
        float *tmp = NULL, *pooled = NULL;
        if (eng->lowp) {
            /* The fp32 master: whole at stage 0 or with one rank, else the owned shard. */
            w = u->master;
            if (eng->pol.shard_optim && eng->world > 1) {
                tmp = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, u->padded_count * sizeof(float), 64);
                if (!tmp)
                    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                       "fingerprint: no memory to gather unit '%s'", u->name);
                st = zero_comm_all_gather(u->master, tmp, u->shard_count, ZERO_DTYPE_FP32,
                                          eng->comm);
                w = tmp;
            }
        } else if (u->shard) { /* shard_params: this rank holds a shard; gather a private copy */
            if (eng->world == 1) {
                w = u->shard;
            } else {
                /* An idle gather buffer if the pool has one (after a step it has): a fresh
                 * allocation would raise the peak resident size by a unit at the end of a run. */
                tmp = pooled = zero__pool_take_idle(&eng->pool, u->padded_count * sizeof(float));
                if (!tmp)
                    tmp = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, u->padded_count * sizeof(float),
                                         64);
                if (!tmp)
                    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                       "fingerprint: no memory to gather unit '%s'", u->name);
                st =
                    zero_comm_all_gather(u->shard, tmp, u->shard_count, ZERO_DTYPE_FP32, eng->comm);
                w = tmp;
            }
        }
        if (!st)
            for (int t = 0; t < u->tensor_count; t++)
                h = fnv_bytes(h, w + u->offsets[t], u->counts[t] * sizeof(float));
        if (pooled)
            zero__pool_give(&eng->pool, pooled);
        else
            zero_mem_free(tmp);
    }
    uint64_t after[ZERO_COLL_COUNT];
    zero__comm_sent(eng, after);
    for (int c = 0; c < ZERO_COLL_COUNT; c++) eng->sent_base[c] += after[c] - before[c];
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        return zero__engine_fail(eng, st, "fingerprint: gathering the weights failed: %s", msg);
    }
    *out = h;
    return ZERO_OK;
}

void zero_engine_get_report(const zero_engine_t *eng, zero_engine_report_t *out) {
    memset(out, 0, sizeof *out);
    if (!eng) return;
    zero_mem_stats_t ms;
    zero_mem_get_stats(eng->mem, &ms);
    memcpy(out->memory_bytes, ms.live_bytes, sizeof out->memory_bytes);
    memcpy(out->memory_peak_bytes, ms.peak_bytes, sizeof out->memory_peak_bytes);
    const zero__stage_policy_t pol = eng->pol;
    const uint64_t N = (uint64_t)eng->world;
    uint64_t P = 0, S = 0, S_np = 0, P_pers = 0, S_pers = 0;
    for (int i = 0; i < eng->unit_count; i++) {
        const zero__unit_t *u = &eng->units[i];
        P += u->padded_count;
        S += u->shard_count;
        out->param_count += u->param_count;
        if (u->persistent) {
            P_pers += u->padded_count;
            S_pers += u->shard_count;
        } else {
            S_np += u->shard_count;
        }
    }
    out->padded_param_count = (size_t)P;
    const uint64_t c = eng->ce, a = eng->ae;
    out->memory_theory_bytes[ZERO_MEM_PARAMS] =
        (size_t)(pol.shard_params ? c * (S_np + P_pers) : c * P);
    /* Communication buffers: the two reduce-bucket slots (allocated at the first grads_done
     * with world > 1) and the stage-3 pool of gather buffers, kept until zero_engine_free. */
    /* Per slot: the packed send buffer (B elements) and its recv (B / N), plus, once a direct
     * unit was reduced onto a non-zero accumulator (accumulation), a recv of the largest direct
     * unit's shard. */
    const uint64_t per_slot =
        eng->bucket_cap + eng->recv_cap + (eng->buckets[0].drecv ? eng->direct_recv_count : 0);
    out->gather_pool_bytes = zero__pool_bytes(&eng->pool, 0);
    out->gather_pool_idle_bytes = zero__pool_bytes(&eng->pool, 1);
    out->memory_theory_bytes[ZERO_MEM_COMM] =
        (size_t)(ZERO__BUCKET_SLOTS * c * per_slot) + out->gather_pool_bytes;
    /* Stage 2-3: the shard accumulator plus the pool of working buffers the model fills during
     * backward (4 sum_p p K_p, K_p the most units of padded size p holding gradients at once;
     * kept between steps so that backward does not map fresh memory for every unit). */
    out->grad_pool_bytes = zero__pool_bytes(&eng->grad_pool, 0);
    const uint64_t grads_kept = pol.shard_grads ? a * S : c * P + a * S;
    out->memory_theory_bytes[ZERO_MEM_GRADS] = (size_t)grads_kept + out->grad_pool_bytes;
    /* Optimizer states: Adam m and v, plus the separate fp32 master with 16-bit compute. */
    const uint64_t ob = zero__optim_state_bytes(eng->lowp); /* per element */
    out->memory_theory_bytes[ZERO_MEM_OPTIM] = (size_t)(pol.shard_optim ? ob * S : ob * P);
    /* The paper's breakdown: what stays between steps, transient pools apart. */
    out->model_state_theory_bytes[0] = out->memory_theory_bytes[ZERO_MEM_PARAMS];
    out->model_state_theory_bytes[1] = (size_t)grads_kept;
    out->model_state_theory_bytes[2] = out->memory_theory_bytes[ZERO_MEM_OPTIM];
    out->model_state_bytes[0] = out->memory_bytes[ZERO_MEM_PARAMS];
    out->model_state_bytes[1] = out->memory_bytes[ZERO_MEM_GRADS] >= out->grad_pool_bytes
                                    ? out->memory_bytes[ZERO_MEM_GRADS] - out->grad_pool_bytes
                                    : 0;
    out->model_state_bytes[2] = out->memory_bytes[ZERO_MEM_OPTIM];
    out->compute_dtype = eng->params.compute_dtype;
    out->grad_accum_dtype = eng->params.grad_accum_dtype;

    uint64_t rs, ag;
    if (eng->have_last) {
        rs = eng->last_rs_elems;
        ag = eng->last_gather_elems;
    } else {
        rs = (uint64_t)eng->params.grad_accum_steps * S;
        ag = pol.shard_params ? 2 * (uint64_t)eng->params.grad_accum_steps * S_np : 0;
    }
    /* After the step: the reduced gradient (0, accumulator dtype), params (1-2), persistent
     * units (3), in the compute dtype. */
    const uint64_t after = !pol.shard_optim ? a * S : c * (pol.shard_params ? S_pers : S);
    out->comm_theory_bytes_per_step = N > 1 ? (N - 1) * (c * (rs + ag) + after + CONTROL_BYTES) : 0;
    for (int k = 0; k < ZERO_COLL_COUNT; k++) {
        out->comm_sent_bytes_per_step_by_coll[k] = eng->last_sent[k];
        out->comm_bytes_per_step += eng->last_sent[k];
    }
    out->stage = eng->params.stage;
    out->world_size = eng->world;
    out->rank = eng->rank;
}
