/* accounting.c — the weights fingerprint and the per-rank report: memory by category beside the
 * theory of this engine's padded layout (engine.h), and the bytes this rank sent in the last step
 * by kind beside the formula of xfer.c.
 *
 * Not here: the allocations themselves (every engine allocation carries its category where it
 * is made), the counting of what is sent (xfer.c). Invariants: the fingerprint's gathers are
 * checks, not part of any step's traffic.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* The fp32 weights of unit u whole: what this rank holds of the optimizer's master (through the
 * residency: with fp32 compute the parameters), all-gathered over the unit's group when that is
 * a shard. The hash reads each tensor, padding apart. With more than one rank, a master this
 * rank cannot read (a swap file) is recorded (zero__fetch_lost) and zeros are gathered in its
 * place, so the other ranks do not wait for it; zero_engine_fingerprint then fails everywhere. */
/* A stacked unit (more than one copy): every copy gathered (zero_engine_state_gather, which fails
 * every rank alike), each tensor hashed as its logical tensor, copy after copy: the bytes of a
 * world unit of the logical shapes. */
static zero_status_t hash_stacked(zero_engine_t *eng, int u, uint64_t *h) {
    const zero__unit_t *un = &eng->units[u];
    const size_t P = un->padded_count, copies = (size_t)un->grp->copies;
    float *all = malloc(copies * P * sizeof *all);
    if (!all)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "no memory to gather unit '%s' (%zu bytes)",
                           un->name, copies * P * sizeof *all);
    zero_status_t st = zero_engine_state_gather(eng, u, ZERO_ENGINE_STATE_MASTER, all);
    for (int t = 0; !st && t < un->tensor_count; t++)
        for (size_t c = 0; c < copies; c++)
            *h = fnv_bytes(*h, all + c * P + un->offsets[t], un->counts[t] * sizeof(float));
    free(all);
    return st;
}

static zero_status_t hash_unit(zero_engine_t *eng, int u, uint64_t *h) {
    const zero__unit_t *un = &eng->units[u];
    if (un->grp->copies > 1) return hash_stacked(eng, u, h);
    const zero__optim_residency_t *res = &eng->residency;
    size_t lo, n;
    zero__optim_held_range(eng, un, ZERO_ENGINE_STATE_MASTER, &lo, &n);
    void *held = NULL;
    zero_status_t st = res->map(res->ctx, u, ZERO_ENGINE_STATE_MASTER, lo, n, &held);
    if (st && eng->world == 1) return st;
    if (st) {
        zero__fetch_lost(eng, st, "fingerprint: reading the weights of unit %d '%s' failed: %s", u,
                         un->name, zero_last_error());
        st = ZERO_OK;
        held = NULL;
    }
    const float *w = held;
    float *whole = NULL, *pooled = NULL;
    if (n < un->padded_count) {
        /* An idle gather buffer if the pool has one (after a step at stage 3 it has): a fresh
         * allocation would raise the peak resident size by a unit at the end of a run. */
        const size_t bytes = un->padded_count * sizeof(float);
        whole = pooled = zero__pool_take_idle(&eng->pool, bytes);
        if (!whole) whole = zero_mem_alloc(eng->mem, ZERO_MEM_COMM, bytes, 64);
        if (!whole)
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "no memory to gather unit '%s' (%zu bytes)",
                             un->name, bytes);
        else if (!held) /* lost: zeros, sent in place (comm.h's in-place all-gather) */
            st = zero__xfer_gather(eng, un->grp, ZERO__XFER_CHECK,
                                   memset(whole + lo, 0, n * sizeof(float)), whole, n,
                                   ZERO_DTYPE_FP32, NULL);
        else
            st = zero__xfer_gather(eng, un->grp, ZERO__XFER_CHECK, held, whole, n, ZERO_DTYPE_FP32,
                                   NULL);
        w = whole;
    }
    if (!st && held)
        for (int t = 0; t < un->tensor_count; t++)
            *h = fnv_bytes(*h, w + un->offsets[t], un->counts[t] * sizeof(float));
    if (pooled)
        zero__pool_give(&eng->pool, pooled);
    else
        zero_mem_free(whole);
    zero_status_t st2 =
        held ? res->unmap(res->ctx, u, ZERO_ENGINE_STATE_MASTER, held, lo, n, 0) : ZERO_OK;
    return st ? st : st2;
}

zero_status_t zero_engine_fingerprint(zero_engine_t *eng, uint64_t *out) {
    if (!eng || !out)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_fingerprint: NULL argument");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    zero_status_t refused = zero__overlap_refuse(eng, "zero_engine_fingerprint");
    if (refused) return refused;
    uint64_t h = FNV_OFFSET;
    zero_status_t st = ZERO_OK;
    for (int i = 0; i < eng->unit_count && !st; i++) st = hash_unit(eng, i, &h);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        return zero__engine_fail(eng, st, "fingerprint: gathering the weights failed: %s", msg);
    }
    /* a swap file a rank could not read, here or at a fetch since the last step: every rank
     * fails here (one 4-byte all-gather) */
    if ((st = zero_engine_check(eng))) return st;
    *out = h;
    return ZERO_OK;
}

/* Sums over a kind of units for the theory: all (-1), the world's (0), smaller groups' (1). */
typedef struct unit_sums {
    uint64_t P, S, S_np, P_pers, S_acc, P_sec, loco;
    uint64_t P_work; /* the working buffers' elements: slots x P_u each */
    uint64_t q8;     /* 8-bit Adam states: their bytes by the layout (zero__q8_state_bytes) */
    uint64_t ob;     /* 1-bit Adam's error buffers and scratch (zero__onebit_theory_bytes) */
} unit_sums_t;

static int unit_of_kind(const zero_engine_t *eng, const zero__unit_t *u, int kind) {
    return kind < 0 || kind == (u->grp != &eng->groups[0]);
}

static unit_sums_t sum_units(const zero_engine_t *eng, int kind) {
    unit_sums_t s = {0};
    for (int i = 0; i < eng->unit_count; i++) {
        const zero__unit_t *u = &eng->units[i];
        if (!unit_of_kind(eng, u, kind)) continue;
        s.P += u->padded_count;
        s.P_work += zero__work_count(u);
        s.S += u->shard_count;
        if (zero__hpz_unit(eng, u)) s.P_sec += zero__hpz_count(eng, u);
        /* gswap: the accumulator in its swap file; one buffer: the working one is it */
        if (!u->goff && !zero__one_grad_buffer(eng, u)) s.S_acc += u->shard_count;
        if (u->persistent)
            s.P_pers += u->padded_count;
        else if (!u->poff) /* offload_param: in its swap file, not in RAM */
            s.S_np += u->shard_count;
        /* + LoCo: 4 P_u per unit of the world's int4 reductions, from the first reduction on */
        if (eng->params.loco && eng->buckets_ready && zero__xfer_qgz_group(eng, u->grp))
            s.loco += 4 * (uint64_t)u->padded_count;
        s.ob += zero__onebit_theory_bytes(eng, u);
        if (eng->q8) {
            size_t lo = 0, n = 0;
            zero__optim_held_range(eng, u, ZERO_ENGINE_STATE_ADAM_M, &lo, &n);
            s.q8 += zero__q8_state_bytes(
                n, zero__q8_fp32_blocks(u->offsets, u->counts, u->tensor_count, lo, n));
        }
    }
    return s;
}

/* The model states' theory (engine.h) of the units summed in s: parameters, gradients kept
 * between steps, optimizer states. Each unit's S is its share of its own group (N = the group's
 * size): the ZeRO formulas per unit. */
static void model_theory(const zero_engine_t *eng, const unit_sums_t *s, uint64_t out[3]) {
    const zero__stage_policy_t pol = eng->pol;
    const uint64_t c = eng->ce, a = eng->ae;
    out[0] = pol.shard_params ? c * (s->S_np + s->P_pers + s->P_sec) : c * s->P; /* + hpZ */
    out[1] = (pol.shard_grads ? a * s->S_acc : c * s->P_work + a * s->S_acc) + s->loco;
    const uint64_t ob = eng->swap ? 0 : zero__optim_state_bytes(eng->lowp); /* per element */
    out[2] = pol.shard_optim ? ob * s->S : ob * s->P;
    if (eng->q8) /* m and v 8-bit: the fp32 master (16-bit compute) and s->q8 */
        out[2] = (eng->lowp ? sizeof(float) : 0) * (pol.shard_optim ? s->S : s->P) + s->q8;
    out[2] += s->ob;
}

/* The model states unit u holds in RAM now, from its buffers: parameters (full copy, shard, hpZ's
 * secondary shard; not a stage-3 gather, which is the pool's), gradients kept between steps (the
 * accumulator; the stage 0-1 working buffer; LoCo's error), optimizer states (fp32 master, m, v).
 */
static void unit_held(const zero_engine_t *eng, const zero__unit_t *u, uint64_t out[3]) {
    const zero__stage_policy_t pol = eng->pol;
    const uint64_t P = u->padded_count, S = u->shard_count, c = eng->ce, a = eng->ae;
    const uint64_t opt = pol.shard_optim ? S : P;
    out[0] += (u->shard                                          ? c * S
               : (!pol.shard_params || u->persistent) && u->full ? c * P
                                                                 : 0) +
              (u->sec ? c * zero__hpz_count(eng, u) : 0);
    out[1] += (u->acc ? a * S : 0) + (!pol.shard_grads && u->work ? c * zero__work_count(u) : 0) +
              (u->loco ? 4 * P : 0);
    out[2] += (u->master ? 4 * opt : 0) + (u->m ? 4 * opt : 0) + (u->v ? 4 * opt : 0) +
              zero__q8_unit_bytes(u) + zero__onebit_unit_bytes(u);
}

void zero_engine_get_report(const zero_engine_t *eng, zero_engine_report_t *out) {
    memset(out, 0, sizeof *out);
    if (!eng) return;
    zero_mem_stats_t ms;
    zero_mem_get_stats(eng->mem, &ms);
    memcpy(out->memory_bytes, ms.live_bytes, sizeof out->memory_bytes);
    memcpy(out->memory_peak_bytes, ms.peak_bytes, sizeof out->memory_peak_bytes);
    const unit_sums_t all = sum_units(eng, -1);
    const uint64_t P = all.P;
    for (int i = 0; i < eng->unit_count; i++) out->param_count += eng->units[i].param_count;
    uint64_t theory[3];
    model_theory(eng, &all, theory);
    out->padded_param_count = (size_t)P;
    const uint64_t c = eng->ce;
    out->memory_theory_bytes[ZERO_MEM_PARAMS] = (size_t)theory[0];
    /* Communication buffers: the two reduce-bucket slots (allocated at the first grads_done
     * with world > 1) and the stage-3 pool of gather buffers, kept until zero_engine_free. */
    /* Per slot: the packed send buffer (B elements) and its recv (B / N), plus, once a direct
     * unit was reduced onto a non-zero accumulator (accumulation), a recv of the largest direct
     * unit's shard. */
    const uint64_t per_slot =
        eng->bucket_cap + eng->recv_cap + (eng->buckets[0].drecv ? eng->direct_recv_count : 0);
    out->gather_pool_bytes = zero__pool_bytes(&eng->pool, 0);
    out->gather_pool_idle_bytes = zero__pool_bytes(&eng->pool, 1);
    /* + qwZ: the pool of quantized shards being sent (one per gather in flight, kept); + qgZ:
     * each slot's scratch, zero__qgz_scratch_bytes of the largest call it carried (kept) */
    uint64_t qgz_scratch = 0;
    for (int s = 0; s < ZERO__BUCKET_SLOTS; s++) qgz_scratch += eng->buckets[s].qscratch_bytes;
    out->memory_theory_bytes[ZERO_MEM_COMM] = (size_t)(ZERO__BUCKET_SLOTS * c * per_slot) +
                                              out->gather_pool_bytes +
                                              zero__pool_bytes(&eng->qpool, 0) + qgz_scratch;
    /* Stage 2-3: the shard accumulator plus the pool of working buffers the model fills during
     * backward (4 sum_p p K_p, K_p the most units of padded size p holding gradients at once;
     * kept between steps so that backward does not map fresh memory for every unit). */
    out->grad_pool_bytes = zero__pool_bytes(&eng->grad_pool, 0);
    out->memory_theory_bytes[ZERO_MEM_GRADS] = (size_t)theory[1] + out->grad_pool_bytes;
    /* Optimizer states: Adam m and v, plus the separate fp32 master with 16-bit compute. */
    out->memory_theory_bytes[ZERO_MEM_OPTIM] = (size_t)theory[2];
    /* Swapped states: in RAM only the staging buffers (and the swap files' page checksums). */
    out->memory_theory_bytes[ZERO_MEM_OFFLOAD] =
        zero__swap_memory_bytes(eng) + zero__pswap_memory_bytes(eng);
    out->swap_disk_bytes = zero__swap_disk_bytes(eng) + zero__pswap_disk_bytes(eng);
    out->swap_read_bytes_per_step = eng->io_last.bytes_read;
    out->swap_written_bytes_per_step = eng->io_last.bytes_written;
    out->swap_wait_s_per_step = eng->io_last.wait_seconds;
    /* The paper's breakdown: what stays between steps, transient pools apart. */
    out->model_state_theory_bytes[0] = out->memory_theory_bytes[ZERO_MEM_PARAMS];
    out->model_state_theory_bytes[1] = (size_t)theory[1];
    out->model_state_theory_bytes[2] = out->memory_theory_bytes[ZERO_MEM_OPTIM];
    out->model_state_bytes[0] = out->memory_bytes[ZERO_MEM_PARAMS];
    out->model_state_bytes[1] = out->memory_bytes[ZERO_MEM_GRADS] >= out->grad_pool_bytes
                                    ? out->memory_bytes[ZERO_MEM_GRADS] - out->grad_pool_bytes
                                    : 0;
    out->model_state_bytes[2] = out->memory_bytes[ZERO_MEM_OPTIM];
    /* Stacked units (smaller partition groups: experts) apart from the world's (dense): theory
     * per kind, live from the stacked units' buffers (the dense part is the rest). */
    for (int kind = 0; kind < 2; kind++) {
        const unit_sums_t su = sum_units(eng, kind);
        uint64_t t[3];
        model_theory(eng, &su, t);
        for (int k = 0; k < 3; k++) out->model_state_split_theory_bytes[kind][k] = (size_t)t[k];
    }
    uint64_t held[3] = {0, 0, 0};
    for (int i = 0; i < eng->unit_count; i++)
        if (unit_of_kind(eng, &eng->units[i], 1)) unit_held(eng, &eng->units[i], held);
    for (int k = 0; k < 3; k++) {
        out->model_state_split_bytes[1][k] = (size_t)held[k];
        out->model_state_split_bytes[0][k] =
            out->model_state_bytes[k] >= held[k] ? out->model_state_bytes[k] - (size_t)held[k] : 0;
    }
    out->compute_dtype = eng->params.compute_dtype;
    out->grad_accum_dtype = eng->params.grad_accum_dtype;

    zero__xfer_theory(eng, out->comm_theory_bytes_per_step_by_kind);
    for (int k = 0; k < ZERO_XFER_KIND_COUNT; k++) {
        out->comm_sent_bytes_per_step_by_kind[k] = eng->xfer.last_sent[k];
        out->comm_bytes_per_step += eng->xfer.last_sent[k];
        out->comm_theory_bytes_per_step += out->comm_theory_bytes_per_step_by_kind[k];
    }
    out->comm_inter_node_bytes_per_step = eng->xfer.last_inter_sent;
    out->comm_inter_node_theory_bytes_per_step = zero__xfer_inter_node_theory(eng);
    memcpy(out->comm_sent_bytes_per_step_by_coll, eng->xfer.last_sent_coll,
           sizeof out->comm_sent_bytes_per_step_by_coll);
    out->stage = eng->params.stage;
    out->world_size = eng->world;
    out->rank = eng->rank;
}
