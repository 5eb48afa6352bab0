/* engine.c — engine parameters, creation and destruction, the learning-rate schedule.
 *
 * Not here: the layout (layout.c), gradients (buckets.c), fetch (fetch.c), the step (step.c),
 * reports (accounting.c).
 * Invariants: with world > 1 the engine owns a communicator split from the caller's (xfer.c),
 * so the collectives it posts run in its own queue.
 */
#include "engine_internal.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

static const char *const init_names[] = {"zeros", "ones", "normal"};
static_assert(ZERO_ARRAY_LEN(init_names) == ZERO_INIT_COUNT, "init name table");
static const char *const schedule_names[] = {"constant", "cosine", "linear"};
static_assert(ZERO_ARRAY_LEN(schedule_names) == ZERO_LR_SCHEDULE_COUNT, "schedule name table");
/* DeepSpeed's scheduler.type values, same order as schedule_names. */
static const char *const schedule_ds_names[] = {"WarmupLR", "WarmupCosineLR", "WarmupDecayLR"};
static_assert(ZERO_ARRAY_LEN(schedule_ds_names) == ZERO_LR_SCHEDULE_COUNT, "DeepSpeed names");

static const char *const offload_names[] = {"none", "cpu", "nvme"};
static_assert(ZERO_ARRAY_LEN(offload_names) == ZERO_OFFLOAD_DEVICE_COUNT, "offload name table");

const char *zero_offload_device_name(zero_offload_device_t d) {
    return (unsigned)d < ZERO_OFFLOAD_DEVICE_COUNT ? offload_names[d] : "?";
}

zero_status_t zero_offload_device_parse(const char *name, zero_offload_device_t *out) {
    for (int i = 0; name && i < ZERO_OFFLOAD_DEVICE_COUNT; i++)
        if (!strcasecmp(name, offload_names[i])) {
            *out = (zero_offload_device_t)i;
            return ZERO_OK;
        }
    return zero__error(ZERO_ERR_CONFIG,
                       "offload device '%s' is invalid (expected none, cpu or nvme)",
                       name ? name : "(null)");
}

const char *zero_init_name(zero_init_t init) {
    return (unsigned)init < ZERO_INIT_COUNT ? init_names[init] : "?";
}

const char *zero_lr_schedule_name(zero_lr_schedule_t schedule) {
    return (unsigned)schedule < ZERO_LR_SCHEDULE_COUNT ? schedule_names[schedule] : "?";
}

zero_status_t zero_lr_schedule_parse(const char *name, zero_lr_schedule_t *out) {
    for (int i = 0; name && i < ZERO_LR_SCHEDULE_COUNT; i++)
        if (!strcmp(name, schedule_names[i]) || !strcmp(name, schedule_ds_names[i])) {
            *out = (zero_lr_schedule_t)i;
            return ZERO_OK;
        }
    return zero__error(ZERO_ERR_INVALID_ARG,
                       "unknown learning-rate schedule '%s' (expected constant, cosine or linear, "
                       "or DeepSpeed's WarmupLR, WarmupCosineLR or WarmupDecayLR)",
                       name ? name : "(null)");
}

zero_engine_params_t zero_engine_params_default(void) {
    zero_engine_params_t p;
    memset(&p, 0, sizeof p);
    p.stage = 0;
    p.comm = NULL;
    p.mem = NULL;
    p.compute_dtype = ZERO_DTYPE_FP32;
    p.grad_accum_dtype = ZERO_DTYPE_FP32;
    p.loss_scaler = zero_loss_scaler_params_default();
    p.seed = 1337;
    p.threads = 1;
    p.lr = 3e-4f;
    p.min_lr = 3e-5f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.weight_decay = 0.1f;
    p.schedule = ZERO_LR_COSINE;
    p.warmup_steps = 0;
    p.total_steps = 1;
    p.warmup_min_lr = 0.0f;
    p.warmup_type = ZERO_WARMUP_LINEAR;
    p.grad_clip = 1.0f;
    p.grad_accum_steps = 1;
    p.optim_state_dtype = ZERO_DTYPE_FP32;
    p.freeze_step = 100000;
    p.reduce_bucket_bytes = (size_t)INT_MAX; /* DeepSpeed: 5e8 elements = 2e9 bytes */
    p.overlap_comm = 1;
    p.prefetch_bucket_elems = 50000000;
    p.persistence_threshold_elems = 100000;
    p.max_live_elems = 1000000000;
    p.hpz_partition_size = 1;
    p.loco_err_beta = 0.8f;
    p.loco_reset_t = 1024;
    p.offload_optimizer.device = ZERO_OFFLOAD_NONE;
    p.offload_optimizer.buffer_count = 4;
    p.offload_optimizer.pipeline_read = 1;
    p.offload_optimizer.pipeline_write = 1;
    p.offload_optimizer.overlap_step = 1;
    p.offload_param.device = ZERO_OFFLOAD_NONE;
    p.offload_param.buffer_count = 5;
    p.sub_group_elems = 1000000000;
    p.aio.block_size = 1048576;
    p.aio.queue_depth = 8;
    p.aio.intra_op_parallelism = 1;
    p.aio.single_submit = 0;
    p.aio.overlap_events = 1;
    return p;
}

/* offload_optimizer.overlap_step: on where a unit's update in backward gives the step's bits
 * (step.c): stage 3 with the optimizer states on NVMe, no clipping (its factor needs the global
 * norm, known only after backward) and no loss scale (fp16's dynamic scale can skip a step).
 * Said once, with the reason when it is off. */
static void overlap_init(zero_engine_t *eng) {
    const zero_engine_params_t *p = &eng->params;
    if (p->offload_optimizer.device != ZERO_OFFLOAD_NVME) return;
    const char *why = !p->offload_optimizer.overlap_step    ? "set false"
                      : !eng->pol.shard_params              ? "it needs stage 3"
                      : p->grad_clip > 0.0f                 ? "gradient_clipping is on (the "
                                                              "clip factor needs the global "
                                                              "norm, known after backward)"
                      : p->compute_dtype == ZERO_DTYPE_FP16 ? "fp16's loss scale may skip "
                                                              "a step"
                      : p->quantized_gradients ? "zero_quantized_gradients' reduce-scatter is "
                                                 "not followed per unit"
                                               : NULL;
    eng->overlap = why == NULL;
    if (eng->rank != 0) return;
    if (eng->overlap)
        zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                  "offload_optimizer.overlap_step on: each unit's optimizer update runs in the "
                  "last micro-step's backward once its gradient is final (an inf/NaN gradient "
                  "then fails the step instead of skipping it)");
    else
        zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                  "offload_optimizer.overlap_step off (%s): the optimizer step updates every unit",
                  why);
}

/* Either offload keeps its data in swap files. */
static int uses_swap_files(const zero_engine_params_t *p) {
    return p->offload_optimizer.device == ZERO_OFFLOAD_NVME ||
           p->offload_param.device == ZERO_OFFLOAD_NVME;
}

/* The public aio block as the I/O layer's parameters. */
static zero__aio_params_t aio_params(const zero_aio_params_t *a) {
    zero__aio_params_t ap = zero__aio_params_default();
    ap.block_size = a->block_size;
    ap.queue_depth = a->queue_depth;
    ap.intra_op_parallelism = a->intra_op_parallelism;
    ap.single_submit = a->single_submit;
    ap.overlap_events = a->overlap_events;
    return ap;
}

/* The swap files' I/O context, one per engine and shared by the optimizer's and the parameters'
 * swap files (eng->aio; NULL without them). */
static zero_status_t io_init(zero_engine_t *eng) {
    if (!uses_swap_files(&eng->params)) return ZERO_OK;
    const zero__aio_params_t ap = aio_params(&eng->params.aio);
    return zero__aio_init(&eng->aio, &ap, eng->mem);
}

static zero_status_t check_params(const zero_engine_params_t *p) {
    if (p->stage < 0 || p->stage > 3)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.stage %d is invalid (expected 0, 1, 2 or 3)",
                           p->stage);
    if (p->compute_dtype != ZERO_DTYPE_FP32 && p->compute_dtype != ZERO_DTYPE_BF16 &&
        p->compute_dtype != ZERO_DTYPE_FP16)
        return zero__error(ZERO_ERR_CONFIG,
                           "compute dtype %s is invalid (expected fp32, bf16 or fp16)",
                           zero_dtype_name(p->compute_dtype));
    if (p->grad_accum_dtype != ZERO_DTYPE_FP32 && p->grad_accum_dtype != p->compute_dtype)
        return zero__error(ZERO_ERR_CONFIG,
                           "data_types.grad_accum_dtype %s is invalid with compute dtype %s "
                           "(expected fp32 or %s)",
                           zero_dtype_name(p->grad_accum_dtype), zero_dtype_name(p->compute_dtype),
                           zero_dtype_name(p->compute_dtype));
    if (p->compute_dtype == ZERO_DTYPE_FP16) {
        zero_status_t st = zero_loss_scaler_params_check(&p->loss_scaler);
        if (st) return st;
    }
    if (!(p->lr >= 0.0f) || !isfinite(p->lr))
        return zero__error(ZERO_ERR_CONFIG, "learning rate %g is invalid (expected >= 0)",
                           (double)p->lr);
    if (!(p->min_lr >= 0.0f) || !isfinite(p->min_lr))
        return zero__error(ZERO_ERR_CONFIG, "minimum learning rate %g is invalid (expected >= 0)",
                           (double)p->min_lr);
    if (!(p->warmup_min_lr >= 0.0f) || !isfinite(p->warmup_min_lr))
        return zero__error(ZERO_ERR_CONFIG, "warmup_min_lr %g is invalid (expected >= 0)",
                           (double)p->warmup_min_lr);
    if ((unsigned)p->warmup_type >= ZERO_WARMUP_TYPE_COUNT)
        return zero__error(ZERO_ERR_CONFIG, "warmup_type %d is invalid (expected linear or log)",
                           (int)p->warmup_type);
    if (!(p->beta1 >= 0.0f && p->beta1 < 1.0f) || !(p->beta2 >= 0.0f && p->beta2 < 1.0f))
        return zero__error(ZERO_ERR_CONFIG, "Adam betas (%g, %g) are invalid (expected [0, 1))",
                           (double)p->beta1, (double)p->beta2);
    if (!(p->eps > 0.0f))
        return zero__error(ZERO_ERR_CONFIG, "Adam eps %g is invalid (expected > 0)",
                           (double)p->eps);
    if (!(p->weight_decay >= 0.0f))
        return zero__error(ZERO_ERR_CONFIG, "weight decay %g is invalid (expected >= 0)",
                           (double)p->weight_decay);
    if (!(p->grad_clip >= 0.0f))
        return zero__error(ZERO_ERR_CONFIG,
                           "gradient clipping %g is invalid (expected >= 0; 0 disables it)",
                           (double)p->grad_clip);
    if ((unsigned)p->schedule >= ZERO_LR_SCHEDULE_COUNT)
        return zero__error(ZERO_ERR_CONFIG, "learning-rate schedule %d is invalid",
                           (int)p->schedule);
    if (p->warmup_steps < 0 || p->total_steps < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "schedule warm-up %d / total %d steps are invalid (expected warm-up "
                           ">= 0, total >= 1)",
                           p->warmup_steps, p->total_steps);
    if (p->threads < 1)
        return zero__error(ZERO_ERR_CONFIG, "engine threads %d is invalid (expected >= 1)",
                           p->threads);
    if (p->optim_state_dtype != ZERO_DTYPE_FP32 && p->optim_state_dtype != ZERO_DTYPE_INT8)
        return zero__error(ZERO_ERR_CONFIG,
                           "optimizer.params.state_dtype %s is invalid (expected fp32 or int8)",
                           zero_dtype_name(p->optim_state_dtype));
    if (p->optim_state_dtype == ZERO_DTYPE_INT8 &&
        (p->offload_optimizer.device == ZERO_OFFLOAD_NVME ||
         p->offload_param.device == ZERO_OFFLOAD_NVME))
        return zero__error(ZERO_ERR_CONFIG,
                           "optimizer.params.state_dtype int8 (AdamW8bit) cannot be combined with "
                           "zero_optimization.%s.device nvme (8-bit optimizer states live in "
                           "memory; expected device none or cpu)",
                           p->offload_optimizer.device == ZERO_OFFLOAD_NVME ? "offload_optimizer"
                                                                            : "offload_param");
    if (p->onebit) {
        const char *why = p->stage != 0                         ? "zero_optimization.stage is not 0"
                          : p->compute_dtype == ZERO_DTYPE_FP16 ? "fp16.enabled is true"
                          : p->optim_state_dtype != ZERO_DTYPE_FP32
                              ? "optimizer.params.state_dtype is not fp32"
                          : p->offload_optimizer.device != ZERO_OFFLOAD_NONE
                              ? "zero_optimization.offload_optimizer.device is not none"
                          : p->offload_param.device != ZERO_OFFLOAD_NONE
                              ? "zero_optimization.offload_param.device is not none"
                          : p->freeze_step < 0 ? "optimizer.params.freeze_step is negative"
                                               : NULL;
        if (why)
            return zero__error(ZERO_ERR_CONFIG,
                               "optimizer.type OneBitAdam (1-bit Adam) cannot run: %s (stage %d; "
                               "expected stage 0 with bf16 or fp32, fp32 states, no offload, "
                               "freeze_step >= 0; DeepSpeed refuses 1-bit Adam with ZeRO too)",
                               why, p->stage);
    }
    if (p->fp8_weights) {
        /* the first key that weights on the E4M3 grid cannot run with, and its value */
        const char *why =
            p->compute_dtype != ZERO_DTYPE_BF16 ? "bf16.enabled is not true"
            : p->quantized_weights              ? "zero_optimization.zero_quantized_weights is true"
            : p->hpz_partition_size > 1         ? "zero_optimization.zero_hpz_partition_size is > 1"
            : p->optim_state_dtype != ZERO_DTYPE_FP32
                ? "optimizer.params.state_dtype is not fp32 (AdamW8bit)"
            : p->onebit ? "optimizer.type is OneBitAdam"
            : p->offload_optimizer.device == ZERO_OFFLOAD_NVME
                ? "zero_optimization.offload_optimizer.device is nvme"
            : p->offload_param.device == ZERO_OFFLOAD_NVME
                ? "zero_optimization.offload_param.device is nvme"
                : NULL;
        if (why)
            return zero__error(ZERO_ERR_CONFIG,
                               "fp8.weight_gather = true cannot run: %s (expected bf16 compute, "
                               "AdamW with fp32 states, no qwZ, hpZ or NVMe offload)",
                               why);
    }
    if (p->grad_accum_steps < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "gradient accumulation steps %d is invalid (expected >= 1)",
                           p->grad_accum_steps);
    if (p->reduce_bucket_bytes == 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.reduce_bucket_size: %zu bytes is invalid (expected "
                           ">= 1)",
                           p->reduce_bucket_bytes);
    if (p->prefetch_bucket_elems < 0 || p->persistence_threshold_elems < 0 || p->max_live_elems < 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "stage3_prefetch_bucket_size %lld, stage3_param_persistence_threshold "
                           "%lld, stage3_max_live_parameters %lld: expected >= 0",
                           (long long)p->prefetch_bucket_elems,
                           (long long)p->persistence_threshold_elems, (long long)p->max_live_elems);
    if (p->loco && !p->quantized_gradients)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zeropp_loco_param is set but "
                           "zero_quantized_gradients is false (LoCo is error feedback for qgZ: "
                           "expected zero_quantized_gradients true, or zeropp_loco_param null)");
    if (p->loco && !(p->loco_err_beta >= 0.0f && p->loco_err_beta < 1.0f))
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zeropp_loco_param.err_beta %g is invalid "
                           "(expected 0 <= err_beta < 1)",
                           (double)p->loco_err_beta);
    if (p->loco && p->loco_reset_t < 1)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zeropp_loco_param.reset_T %d is invalid (expected "
                           ">= 1 optimizer steps)",
                           p->loco_reset_t);
    zero_status_t st = zero__swap_check_params(p);
    if (!st) st = zero__pswap_check_params(p);
    if (!st && uses_swap_files(p)) {
        const zero__aio_params_t ap = aio_params(&p->aio);
        st = zero__aio_params_check(&ap);
    }
    return st;
}

zero_status_t zero__engine_fail(zero_engine_t *eng, zero_status_t st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!eng->failure) {
        eng->failure = st;
        snprintf(eng->failure_msg, sizeof eng->failure_msg, "%s", msg);
    }
    zero__set_error_message(msg);
    return st;
}

/* ZeRO++ hpZ: check zero_hpz_partition_size against the stage and the world, and make the
 * group of h consecutive ranks (eng->hpz; NULL when off: h = 1 or one rank). */
static zero_status_t hpz_init(zero_engine_t *eng) {
    const zero_engine_params_t *p = &eng->params;
    const int h = p->hpz_partition_size;
    eng->hpz = NULL;
    if (h == 1) return ZERO_OK;
    if (h < 1 || h > eng->world || eng->world % h)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zero_hpz_partition_size %d is invalid for %d ranks "
                           "(expected a divisor of the world size, typically the ranks per node)",
                           h, eng->world);
    if (p->stage < 3)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zero_hpz_partition_size %d needs stage 3 (stage is "
                           "%d): the secondary partition is of stage 3's parameter shards",
                           h, p->stage);
    if (p->offload_param.device == ZERO_OFFLOAD_NVME)
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.zero_hpz_partition_size %d cannot be combined with "
                           "offload_param device nvme (expected 1, or another offload_param)",
                           h);
    int g = 0;
    zero_status_t st = zero__xfer_group_split(eng, eng->rank / h, &g);
    if (st) return st;
    eng->hpz = &eng->groups[g];
    /* A group over two nodes gives the same bits, but the gathers hpZ keeps inside the group
     * then cross nodes, which is what it is for: said once, by rank 0. */
    const zero_comm_t *c = eng->groups[0].comm;
    for (int r = 1; eng->rank == 0 && c && r < eng->world; r++) {
        const int first = r / h * h, a = zero_comm_node_of(c, first), b = zero_comm_node_of(c, r);
        if (a != b) {
            zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                      "zero_optimization.zero_hpz_partition_size %d: the group of ranks %d-%d "
                      "has ranks on nodes %d and %d, so its secondary-shard gathers cross nodes "
                      "(expected the ranks per node, or a divisor of it)",
                      h, first, first + h - 1, a, b);
            break;
        }
    }
    return ZERO_OK;
}

zero_status_t zero_engine_init(zero_engine_t **out, const zero_engine_params_t *params) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_init: out is NULL");
    *out = NULL;
    zero_engine_params_t p = params ? *params : zero_engine_params_default();
    zero_status_t st = check_params(&p);
    if (st) return st;
    zero_engine_t *eng = calloc(1, sizeof *eng);
    if (!eng) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory");
    eng->params = p;
    eng->world = 1;
    eng->lowp = p.compute_dtype != ZERO_DTYPE_FP32;
    eng->ce = eng->lowp ? 2 : sizeof(float);
    eng->ae = p.grad_accum_dtype == ZERO_DTYPE_FP32 ? sizeof(float) : 2;
    eng->q8 = p.optim_state_dtype == ZERO_DTYPE_INT8;
    eng->residency = zero__state_residency_ram(eng);
    {
        /* fp16: the configured (dynamic by default) scaler. bf16 and fp32: a static scale of 1,
         * which only turns an inf/NaN into a skipped step: one code path for every dtype. */
        zero_loss_scaler_params_t lsp = p.loss_scaler;
        if (p.compute_dtype != ZERO_DTYPE_FP16) {
            lsp = zero_loss_scaler_params_default();
            lsp.loss_scale = 1.0;
        }
        st = zero_loss_scaler_init(&eng->scaler, &lsp);
        if (st) goto fail_eng;
    }
    if (p.mem) {
        eng->mem = p.mem;
    } else {
        st = zero_mem_init(&eng->mem, NULL);
        if (st) goto fail_eng;
        eng->owns_mem = 1;
    }
    eng->params.mem = eng->mem;
    if (eng->lowp) {
        eng->scratch =
            zero_mem_alloc(eng->mem, ZERO_MEM_OTHER, ZERO__SCRATCH_COUNT * sizeof(float), 64);
        if (!eng->scratch) {
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "engine: out of memory (scratch)");
            goto fail_mem;
        }
    }
    if ((st = zero__xfer_world_init(eng, p.comm))) goto fail_mem;
    eng->pol = zero__stage_policy(&p, eng->world);
    if (p.quantized_weights && p.stage < 3 && eng->rank == 0)
        zero__log(ZERO_LOG_WARN, eng->rank, eng->world,
                  "zero_optimization.zero_quantized_weights applies to stage 3's parameter "
                  "all-gathers; at stage %d it changes nothing (as in DeepSpeed)",
                  p.stage);
    if ((st = hpz_init(eng))) goto fail_groups;
    if (p.quantized_gradients && eng->world > 1) {
        /* ZeRO++ qgZ over the world: its node and cross-node communicators (collective) */
        if ((st = zero__qgz_init(&eng->qgz, eng->groups[0].comm))) goto fail_groups;
        eng->qgz_on = 1;
        if (eng->rank == 0 && eng->qgz.M == 1 && zero_comm_node_count(eng->groups[0].comm) > 1)
            zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                      "zero_quantized_gradients: the nodes are not equal runs of consecutive "
                      "ranks, so the int4 reduce-scatter is one all-to-all over all %d ranks",
                      eng->world);
    }
    overlap_init(eng);
    if ((st = io_init(eng))) goto fail_groups;
    if ((st = zero__swap_init(eng))) goto fail_io;
    if (eng->swap) eng->residency = zero__swap_residency(eng);
    if ((st = zero__pswap_init(eng))) {
        zero__swap_free(eng);
        goto fail_io;
    }
    if (p.offload_param.device == ZERO_OFFLOAD_CPU && p.stage == 3 && eng->rank == 0)
        zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                  "offload_param device cpu: the parameter shards stay in this process's memory "
                  "(a CPU build computes there anyway)");
    if (p.offload_optimizer.device == ZERO_OFFLOAD_CPU && eng->rank == 0)
        zero__log(ZERO_LOG_INFO, eng->rank, eng->world,
                  "offload_optimizer device cpu: the optimizer states stay in this process's "
                  "memory (a CPU build computes there anyway)");
    *out = eng;
    return ZERO_OK;
fail_io:
    zero__aio_free(eng->aio);
fail_groups:
    zero__qgz_free(&eng->qgz);
    zero__xfer_groups_free(eng);
fail_mem:
    zero_mem_free(eng->scratch);
    if (eng->owns_mem) zero_mem_free_domain(eng->mem);
fail_eng:
    zero_loss_scaler_free(eng->scaler);
    free(eng);
    return st;
}

zero__stage_policy_t zero__stage_policy(const zero_engine_params_t *p, int world) {
    zero__stage_policy_t pol;
    pol.shard_optim = p->stage >= 1;
    pol.shard_grads = p->stage >= 2;
    pol.shard_params = p->stage >= 3;
    pol.gather_after_step = pol.shard_optim && world > 1;
    pol.quantize_weights = pol.shard_params && p->quantized_weights && world > 1;
    return pol;
}

void zero_engine_free(zero_engine_t *eng) {
    if (!eng) return;
    /* Requests in flight borrow our buffers: let them land before freeing anything. */
    zero__buckets_free(eng);
    for (int i = 0; i < eng->unit_count; i++) {
        if (eng->units[i].gather) (void)zero__xfer_wait(eng->units[i].gather);
        if (zero__unit_sharded(&eng->units[i]))
            eng->units[i].full = NULL;                       /* lent by the pool, freed below */
        if (eng->pol.shard_grads) eng->units[i].work = NULL; /* lent by the gradient pool */
        zero__unit_free_buffers(&eng->units[i]);
    }
    zero__swap_free(eng);
    zero__pswap_free(eng);
    zero__aio_free(eng->aio); /* after both swaps closed their files */
    zero__pool_free(&eng->pool);
    zero__pool_free(&eng->grad_pool);
    zero__pool_free(&eng->qpool);
    free(eng->units);
    free(eng->events);
    free(eng->ref_fetches);
    free(eng->prev_fetches);
    zero__qgz_free(&eng->qgz);
    zero__xfer_groups_free(eng);
    zero_mem_free(eng->scratch);
    if (eng->owns_mem) zero_mem_free_domain(eng->mem);
    zero_loss_scaler_free(eng->scaler);
    free(eng);
}

float zero_engine_loss_scale(const zero_engine_t *eng) {
    return eng ? (float)zero_loss_scaler_scale(eng->scaler) : 1.0f;
}

zero_loss_scaler_t *zero_engine_loss_scaler(const zero_engine_t *eng) {
    return eng ? eng->scaler : NULL;
}

float zero_engine_lr_at(const zero_engine_t *eng, int64_t step) {
    const zero_engine_params_t *p = &eng->params;
    if (step < p->warmup_steps) {
        if (p->warmup_type == ZERO_WARMUP_LINEAR && p->warmup_min_lr == 0.0f)
            return p->lr * (float)(step + 1) / (float)p->warmup_steps; /* the historical form */
        double frac;
        if (p->warmup_type == ZERO_WARMUP_LOG)
            frac =
                p->warmup_steps > 1 ? log((double)step + 1.0) / log((double)p->warmup_steps) : 1.0;
        else
            frac = (double)(step + 1) / (double)p->warmup_steps;
        return (float)(p->warmup_min_lr + frac * (p->lr - p->warmup_min_lr));
    }
    if (p->schedule == ZERO_LR_CONSTANT) return p->lr;
    int64_t span = p->total_steps - p->warmup_steps;
    double frac = span > 0 ? (double)(step - p->warmup_steps) / (double)span : 1.0;
    if (frac > 1.0) frac = 1.0;
    double coeff =
        p->schedule == ZERO_LR_COSINE ? 0.5 * (1.0 + cos(3.141592653589793 * frac)) : 1.0 - frac;
    return (float)(p->min_lr + coeff * (p->lr - p->min_lr));
}

zero_mem_t *zero_engine_mem(const zero_engine_t *eng) { return eng ? eng->mem : NULL; }

const zero_engine_params_t *zero_engine_params(const zero_engine_t *eng) {
    return eng ? &eng->params : NULL;
}
