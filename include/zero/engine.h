/* zero/engine.h — the model-agnostic training engine: owns parameters, gradients and optimizer
 * state, and runs the optimizer step (docs/ARCHITECTURE.md section 2, "the engine contract").
 *
 * A model declares units (a transformer block, the embeddings, the final norm); each unit is a
 * list of named tensors with flags and an initialisation rule, stored in one flat buffer that the
 * engine allocates and owns. Per micro-step the model calls, for each unit in the order it uses
 * them: zero_unit_fetch before forward, zero_unit_release after forward, zero_unit_fetch before
 * backward, zero_unit_grads_done after backward. At the end of the global batch it calls
 * zero_engine_step.
 *
 * Stages (docs/ARCHITECTURE.md section 3), fp32 compute, one padded layout: every unit is
 * padded to a multiple of world x 16 elements and rank r owns [r*S, (r+1)*S) of it (S = padded /
 * world).
 *   0: params, grads, Adam m/v full on every rank; gradients reduce-scattered per micro-step and
 *      all-gathered at the step (= all-reduce); AdamW on the full buffers.
 *   1: params full; the model's gradient buffers full; Adam m/v on the shard; params all-gathered
 *      after the step.
 *   2: as 1, but a unit's full gradient buffer lives only from zero_unit_grads to
 *      zero_unit_grads_done (then it is packed into a bucket and freed).
 *   3: as 2, and parameters are kept as shards: zero_unit_fetch all-gathers the unit just in
 *      time into a buffer lent by a pool of gather buffers (keyed by padded size), and
 *      zero_unit_release gives the buffer back (units of <= persistence_threshold_elems stay
 *      full). Prefetch follows a fetch sequence seen in two consecutive steps, and only while
 *      the current step's fetches match its prefix, so evaluation forwards between steps do not
 *      make it gather units that are then dropped unused.
 * Determinism: every stage follows one canonical order, so the weights are bitwise identical
 * across stages for a given world size and accumulation: each micro-step's gradient of a unit is
 * reduce-scattered (rank-order sums, done by the comm layer), the reduced shards are accumulated
 * in fp32 in micro-step order, the global norm is a sum of float64 per-rank partials over the
 * owned shards combined in rank order. Unlike DeepSpeed, stage 1 therefore communicates per
 * micro-step (its traffic is that of stage 2), and stages 0/1 keep a shard accumulator
 * (grad_accum_dtype) beside the full gradient buffer (counted in the memory theory).
 * Mixed precision (compute_dtype bf16 or fp16, docs/mixed-precision.md): parameters as fetched,
 * the model's gradient buffers, the reduce buckets and every collective are in the compute
 * dtype (the comm layer sums 16-bit values in fp32 in rank order and rounds once); the reduced
 * gradient accumulator (the shard) is in grad_accum_dtype (fp32 by default); the fp32 master
 * weights live beside the parameters (stage 0: full; stages 1-3: the owned shard) with Adam m
 * and v. After AdamW updates the master shard it is rounded (RNE) into the parameters and
 * all-gathered as the stage requires. fp16 scales the loss (zero_engine_loss_scale); every dtype
 * checks the reduced gradient for inf/NaN and skips the step on every rank when any has one.
 *
 * Collectives: with world > 1, zero_engine_init (it splits a private communicator so the
 * engine's traffic is counted apart), zero_unit_fetch / _release / _grads_done (they post
 * collectives in call order), zero_engine_grads_read, zero_engine_step and
 * zero_engine_fingerprint must be called by every rank in the same order. A rank whose sequence of
 * fetch / grads_done calls differs gets ZERO_ERR_MISMATCH (or the comm layer's timeout) naming the
 * unit and step, on every rank.
 *
 * Threading: an engine belongs to one rank and is used by one thread at a time.
 */
#ifndef ZERO_ENGINE_H
#define ZERO_ENGINE_H

#include "zero/comm.h"
#include "zero/core.h"
#include "zero/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ tensors */

/* Roles of a tensor, as flags (never positions in a list). */
typedef enum {
    ZERO_TENSOR_NO_DECAY = 1u << 0, /* AdamW skips weight decay (the GPT: biases and layernorm
                                       gains; its 2-D weights decay, embeddings included) */
    ZERO_TENSOR_TIED = 1u << 1,     /* used in two places (GPT's token embedding and head); the
                                       model accumulates both gradients into the one tensor */
    ZERO_TENSOR_FP8 = 1u << 2,      /* with params.fp8_weights: held on the E4M3 grid and
                                       all-gathered at stage 3 in 1 byte per element */
} zero_tensor_flag_t;

/* How the engine fills a tensor at declaration. Initialisation depends only on the engine seed,
 * the unit index and the tensor index, so every stage and world size starts from the same
 * weights. */
typedef enum {
    ZERO_INIT_ZEROS,
    ZERO_INIT_ONES,
    ZERO_INIT_NORMAL, /* N(0, init_std^2), Box-Muller over a counter-based generator */
    ZERO_INIT_COUNT
} zero_init_t;

ZERO_API const char *zero_init_name(zero_init_t init);

#define ZERO_TENSOR_MAX_DIMS 4

typedef struct zero_tensor_desc {
    const char *name; /* borrowed during zero_engine_add_unit; the engine keeps a copy */
    int ndim;         /* 1 .. ZERO_TENSOR_MAX_DIMS */
    size_t shape[ZERO_TENSOR_MAX_DIMS];
    unsigned flags; /* zero_tensor_flag_t bits */
    zero_init_t init;
    float init_std; /* ZERO_INIT_NORMAL only */
} zero_tensor_desc_t;

/* ------------------------------------------------------------------------------ parameters */

/* DeepSpeed's scheduler names map onto these: WarmupLR -> constant, WarmupDecayLR -> linear,
 * WarmupCosineLR -> cosine (zero_lr_schedule_parse accepts both spellings). */
typedef enum {
    ZERO_LR_CONSTANT, /* lr after warm-up */
    ZERO_LR_COSINE,   /* lr -> min_lr along half a cosine over [warmup, total) */
    ZERO_LR_LINEAR,   /* lr -> min_lr linearly over [warmup, total) */
    ZERO_LR_SCHEDULE_COUNT
} zero_lr_schedule_t;

ZERO_API const char *zero_lr_schedule_name(zero_lr_schedule_t schedule);
/* Parse "constant", "cosine" or "linear", or DeepSpeed's "WarmupLR", "WarmupDecayLR",
 * "WarmupCosineLR"; ZERO_ERR_INVALID_ARG otherwise. */
ZERO_API zero_status_t zero_lr_schedule_parse(const char *name, zero_lr_schedule_t *out);

/* Shape of the warm-up (DeepSpeed's scheduler.params.warmup_type). */
typedef enum {
    ZERO_WARMUP_LINEAR, /* lr = min + (lr - min) * (step + 1) / warmup_steps */
    ZERO_WARMUP_LOG,    /* lr = min + (lr - min) * log(step + 1) / log(warmup_steps) (DeepSpeed's
                           default for WarmupLR / WarmupDecayLR) */
    ZERO_WARMUP_TYPE_COUNT
} zero_warmup_type_t;

/* Where the optimizer's states live (zero_optimization.offload_optimizer.device). */
typedef enum zero_offload_device {
    ZERO_OFFLOAD_NONE, /* in RAM, as every state always was */
    ZERO_OFFLOAD_CPU,  /* DeepSpeed's CPU offload: on a CPU build the same as NONE */
    ZERO_OFFLOAD_NVME, /* in swap files under nvme_path, streamed through the step */
    ZERO_OFFLOAD_DEVICE_COUNT
} zero_offload_device_t;

ZERO_API const char *zero_offload_device_name(zero_offload_device_t d); /* "none", "cpu", "nvme" */
/* "none", "cpu" or "nvme" (case-insensitive); ZERO_ERR_CONFIG naming the value otherwise. */
ZERO_API zero_status_t zero_offload_device_parse(const char *name, zero_offload_device_t *out);

/* DeepSpeed's `aio` block: how swap files are read and written (io_uring, or a pread/pwrite
 * pool where io_uring is unavailable). */
typedef struct zero_aio_params {
    size_t block_size;        /* bytes per I/O piece, a multiple of 4096 (default 1 MiB) */
    int queue_depth;          /* pieces in flight (8) */
    int intra_op_parallelism; /* threads of the pread/pwrite pool (1); alias thread_count */
    int single_submit;        /* submit pieces one by one (0) */
    int overlap_events;       /* refill the queue as each piece completes (1) */
} zero_aio_params_t;

/* zero_optimization.offload_optimizer. With ZERO_OFFLOAD_NVME, Adam's m and v (and with 16-bit
 * compute the fp32 master) live in one swap file per unit and rank under nvme_path, created
 * (preallocated) when the unit is declared and deleted with the engine; the step streams them in
 * sub-groups of sub_group_size elements through buffer_count staging buffers, reading the next
 * sub-group while one is updated and writing the previous one back (pipeline_read,
 * pipeline_write). With fp32 compute the master is the parameters, which stay in RAM (or, with
 * offload_param nvme at stage 3, in the parameter swap files). The same struct describes
 * offload_param (below). */
typedef struct zero_offload_params {
    zero_offload_device_t device;
    char nvme_path[1024]; /* an existing, writable directory */
    int buffer_count;     /* staging buffers, >= 2 (DeepSpeed's default 4) */
    int pipeline_read, pipeline_write;
    /* offload_optimizer only (zero's own key offload_optimizer.overlap_step, default 1): run a
     * unit's AdamW during the last micro-step's backward, as soon as its gradient is final, so
     * that the optimizer states' disk I/O overlaps backward's compute. Applies where the result
     * is bitwise the step's: stage 3, device nvme, grad_clip 0 (the clip factor needs the global
     * norm), fp32 or bf16 compute (no loss scale) and quantized_gradients off; otherwise the step
     * updates every unit as before (logged once, with the reason). Units updated in backward: the
     * non-persistent ones, once their last micro-step's reduced gradient has landed and no fetch of
     * theirs is open. From then until zero_engine_step returns, the state calls
     * (zero_engine_params_read / _write, _grads_read, _state_read / _write, _set_step_count,
     * _fingerprint, _check_replicas, a zero_unit_fetch of an updated unit, _zero_grads) refuse with
     * ZERO_ERR_INVALID_ARG naming the key, and an inf/NaN gradient on any rank fails the step
     * (ZERO_ERR_INVALID_ARG, on every rank: the engine is failed) instead of skipping it. Not used
     * by offload_param. */
    int overlap_step;
} zero_offload_params_t;

typedef struct zero_engine_params {
    int stage;                  /* ZeRO stage 0-3 (zero_optimization.stage) */
    zero_comm_t *comm;          /* borrowed; NULL = one rank. The engine splits its own copy. */
    zero_mem_t *mem;            /* borrowed accounting domain; NULL: the engine makes its own */
    zero_dtype_t compute_dtype; /* ZERO_DTYPE_FP32, _BF16 or _FP16 (bf16.enabled / fp16.enabled) */
    /* data_types.grad_accum_dtype: dtype of the reduced gradient accumulator (the shard the
     * micro-step gradients are summed into): ZERO_DTYPE_FP32 (default) or compute_dtype. */
    zero_dtype_t grad_accum_dtype;
    /* fp16 only: DeepSpeed's fp16.* loss scaling (dynamic by default). bf16 and fp32 use a
     * static scale of 1 and still check for inf/NaN and skip. */
    zero_loss_scaler_params_t loss_scaler;
    uint64_t seed; /* parameter initialisation */
    int threads;   /* cores the optimizer step may use (>= 1) */

    /* AdamW with decoupled weight decay (Loshchilov & Hutter): p -= lr * (m^/(sqrt(v^)+eps)
     * + wd * p), wd skipped for ZERO_TENSOR_NO_DECAY tensors. */
    float lr, min_lr, beta1, beta2, eps, weight_decay;
    zero_lr_schedule_t schedule;
    int warmup_steps;    /* scheduler.params.warmup_num_steps */
    int total_steps;     /* scheduler.params.total_num_steps: decay ends here, then min_lr */
    float warmup_min_lr; /* scheduler.params.warmup_min_lr: warm-up starts here (default 0) */
    zero_warmup_type_t warmup_type; /* scheduler.params.warmup_type (default linear) */
    /* optimizer.params.state_dtype (optimizer.type "AdamW8bit"): the dtype of Adam's m and v.
     * ZERO_DTYPE_FP32 (default) or ZERO_DTYPE_INT8: bitsandbytes' 8-bit Adam, m and v block-wise
     * quantized with its dynamic map (signed for m, unsigned for v) in blocks of 256 elements at
     * fixed offsets of each unit, one fp32 absmax per block, the update in bitsandbytes' order
     * (kernels/q8dyn.h). Units are then padded to a multiple of group size x 256, so no block
     * straddles two ranks and the blocks are the same at every stage and world size. A block
     * holding any element of a tensor of fewer than 4096 elements (bitsandbytes' min_8bit_size)
     * keeps fp32 m and v. Checkpoints carry the states as fp32 through zero_engine_state_read /
     * write, exactly (src/zero/q8state.c). Not with offload (device nvme) of the optimizer or the
     * parameters (ZERO_ERR_CONFIG). */
    zero_dtype_t optim_state_dtype;
    /* optimizer.type "OneBitAdam" (DeepSpeed's 1-bit Adam, src/zero/onebit.c): 1 on. The first
     * freeze_step optimizer steps (optimizer.params.freeze_step, DeepSpeed's default 100000) are
     * plain AdamW on the all-reduced gradient, bitwise the AdamW engine's. From then on v is
     * frozen (with its bias correction at freeze_step), no gradient is reduced: each rank updates
     * m from its own gradient, m is averaged by DeepSpeed's 1-bit compressed all-reduce with
     * worker and server error feedback (sign bits and one RMS scale per tensor and chunk), and
     * the parameters move by lr (m / (1 - beta1^t)) / (sqrt(v_frozen) + eps) + decay. Clipping
     * then uses the quadratic mean of the ranks' local gradient norms. Stage 0 only, not with
     * fp16, 8-bit states or offload (ZERO_ERR_CONFIG), as DeepSpeed refuses 1-bit Adam with ZeRO.
     * The error buffers are not checkpointed (DeepSpeed resets them at a load too). */
    int onebit;
    int freeze_step;
    float grad_clip;      /* gradient_clipping: > 0 clips to this global L2 norm; 0 disables */
    int grad_accum_steps; /* gradient_accumulation_steps: zero_engine_step averages over them */

    /* zero_optimization.reduce_bucket_size, in BYTES of fp32 gradient (DeepSpeed counts
     * elements; the trainer converts): gradients of finished units are packed into a bucket of
     * this size whose reduce-scatter is posted when full; a unit larger than half a bucket is
     * reduce-scattered straight from its gradient buffer as soon as backward hands it back.
     * At least 1. */
    size_t reduce_bucket_bytes;
    /* zero_optimization.overlap_comm (default 1): gradient reduce-scatters run while backward
     * goes on. 0: zero_unit_grads_done waits for them, so a stage-2/3 rank holds one unit's
     * gradient buffer at a time instead of two (less memory, no overlap). Same results. */
    int overlap_comm;
    /* Stage 3 (elements): stage3_prefetch_bucket_size (parameters being prefetched at once;
     * 0 disables prefetch), stage3_param_persistence_threshold (units of at most this many
     * parameters stay gathered), stage3_max_live_parameters (prefetch never makes the gathered,
     * non-persistent parameters exceed this; a fetch the model asks for always proceeds). */
    int64_t prefetch_bucket_elems, persistence_threshold_elems, max_live_elems;
    /* zero_optimization.zero_quantized_weights (ZeRO++ qwZ; default 0). Stage 3: each parameter
     * all-gather of a fetch carries the shards as blockwise symmetric int8, one fp32 scale per
     * 256 elements (S + 4 ceil(S / 256) bytes per shard of S elements: about 1/4 of fp32's
     * bytes, 1/2 of bf16's), and every rank, the owner included, computes with the dequantized
     * values (max error half a block's scale, max|x| / 254). Only the wire is quantized: the
     * shards, the master weights, the optimizer, the gradients and the checkpoints are exact.
     * Not quantized: persistent units (gathered after the step) and groups of one rank. A
     * parameter block holding inf or NaN arrives as NaN. Below stage 3 it changes nothing
     * (logged once). */
    int quantized_weights;
    /* fp8.weight_gather (default 0): the tensors flagged ZERO_TENSOR_FP8 live on the E4M3 grid.
     * Their 16-bit parameters are rounded, after every optimizer step, at declaration and at
     * every write, to E4M3 values times a power-of-two scale per block (kernels/fp8_qdq.h,
     * zero__fp8_round_blocks); the fp32 master, the optimizer and the gradients are untouched.
     * Blocks: each flagged tensor's part in each rank's partition [r S, (r + 1) S), cut into
     * 128 elements from that part's start (the last one ragged), so no block straddles two
     * ranks and every stage rounds the same blocks (for a given group size). Stage 3: a
     * fetch's all-gather of a non-persistent unit over more than one rank carries each rank's
     * flagged blocks as E4M3 codes and one fp32 scale per block, the rest of its shard in the
     * compute dtype, every rank's part padded to the largest (zero__xfer_param_wire_bytes);
     * decoding gives back exactly the rounded values (the rounding is idempotent), so stages
     * 0-3 stay bitwise equal. bf16 compute only; not with quantized_weights, hpZ, 8-bit or
     * 1-bit Adam, offload of the optimizer or the parameters (ZERO_ERR_CONFIG). */
    int fp8_weights;
    /* zero_optimization.zero_hpz_partition_size (ZeRO++ hpZ; default 1 = off). Stage 3 only
     * (another stage with h > 1 is ZERO_ERR_CONFIG); h must divide the world size. Groups of h
     * consecutive ranks (typically a node). The first fetch window of a unit after an optimizer
     * step all-gathers over the unit's world from the primary shards as usual; each rank then
     * keeps its secondary shard, its [j P/h, (j+1) P/h) slice of the gathered unit (j = rank mod
     * h), and every later window of that unit until the next step all-gathers those P/h elements
     * inside its group only. Secondary shards are invalidated by every step and every write of
     * the parameters. Memory: P_u/h compute-dtype elements per rank and unit, kept for all
     * units (ZERO_MEM_PARAMS). Without qwZ the results are bitwise those of plain stage 3; with
     * qwZ the secondary shard holds the first (dequantized) gather's values and the in-group
     * gathers carry them exactly, so every window of a step sees what the first one gave.
     * Applies to units sharded over the world (not those of another partition group) and not
     * with offload_param nvme (ZERO_ERR_CONFIG). */
    int hpz_partition_size;
    /* zero_optimization.zero_quantized_gradients (ZeRO++ qgZ; default 0). Every stage's gradient
     * reduce-scatter of the units sharded over the world (not another partition group's) is
     * carried as blockwise symmetric int4 (one fp32 scale per 256 elements of each unit's shard)
     * in two all-to-alls: inside the node, where the node's contributions to each destination
     * are summed in fp32 and re-quantized, then between the nodes' ranks of one local index
     * (src/zero/qgz.h; on one node, or nodes that are not equal runs of consecutive ranks, one
     * all-to-all over all ranks). The result has the plain reduce-scatter's contract: the sum
     * over ranks into the accumulator, the step taking the mean (1 / (world x micro-steps)) as
     * always, so only the wire is quantized: master weights, optimizer, checkpoints are as
     * without it. Error per element of the sum: at most half the int4 scale (max|x| / 7 of its
     * 256-element block) of every rank's contribution plus half that of every node's partial.
     * A block holding inf or NaN arrives as NaN (the step's overflow check sees it). With one
     * rank it changes nothing. */
    int quantized_gradients;
    /* zero_optimization.zeropp_loco_param (LoCo error feedback for qgZ; loco = 0: off, DeepSpeed's
     * null). Each rank keeps, per unit sharded over the world, an fp32 buffer of its full
     * gradient's size (P_u elements, ZERO_MEM_GRADS): e = err_beta e + (1 - err_beta) (g' - Q(g'))
     * where g' = g + e is what it quantizes and sends instead of g. Reset to zero every reset_T
     * optimizer steps, on a skipped (inf/NaN) step and at resume (not checkpointed, as in
     * DeepSpeed). Needs quantized_gradients. err_beta in [0, 1), reset_T >= 1. */
    int loco;
    float loco_err_beta; /* default 0.8 */
    int loco_reset_t;    /* default 1024 */
    /* Offload of the optimizer's states, the elements of one swapped sub-group
     * (zero_optimization.sub_group_size, DeepSpeed's 1e9; rounded down to a multiple of 1024,
     * capped by the largest unit) and the swap files' I/O. */
    zero_offload_params_t offload_optimizer;
    /* zero_optimization.offload_param (stage 3 only; another stage with device nvme is
     * ZERO_ERR_CONFIG). With ZERO_OFFLOAD_NVME each non-persistent unit's parameter shard lives in
     * a swap file of its own per rank under nvme_path; at most buffer_count shards (1 to 64,
     * DeepSpeed's default 5) are in RAM at once: a shard is read when its all-gather is posted
     * (the prefetch posts those ahead), the next one of the recorded schedule is read ahead, and
     * the updated shards are written back after the step. pipeline_* are not used. With
     * offload_optimizer at nvme too, those units' gradient accumulators live in swap files under
     * offload_optimizer.nvme_path as well (two buffers of the largest in RAM), written during
     * backward as each gradient lands and read once by the step. */
    zero_offload_params_t offload_param;
    int64_t sub_group_elems;
    zero_aio_params_t aio;
} zero_engine_params_t;

/* Defaults: stage 0, one rank, fp32 (grad accumulation fp32, loss scaler defaults), seed 1337, 1
 * thread, lr 3e-4, min_lr 3e-5, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1, cosine, warm-up 0
 * (linear, from 0), total 1, clip 1.0, one micro-step; DeepSpeed's ZeRO defaults: reduce bucket 5e8
 * elements (2e9 bytes, capped at INT_MAX), prefetch 5e7, persistence 1e5, max live 1e9 elements; no
 * offload (optimizer buffer_count 4, pipelines and overlap_step on; parameter buffer_count 5),
 * sub-groups of 1e9 elements, DeepSpeed's aio block. */
ZERO_API zero_engine_params_t zero_engine_params_default(void);

typedef struct zero_engine zero_engine_t;

/* Create an engine. Returns ZERO_ERR_CONFIG for invalid values (a compute dtype other than
 * fp32/bf16/fp16, a grad_accum_dtype other than fp32 or the compute dtype, bad loss-scaler
 * params) with a message naming the value and what is allowed. *out is owned by the
 * caller: zero_engine_free. Collective over params->comm when it has more than one rank. */
ZERO_API zero_status_t zero_engine_init(zero_engine_t **out, const zero_engine_params_t *params);
/* Free the engine and every buffer it owns. NULL is accepted. */
ZERO_API void zero_engine_free(zero_engine_t *eng);

/* Declare a unit of `count` tensors; allocates its parameter, gradient and Adam buffers
 * (ZERO_MEM_PARAMS / _GRADS / _OPTIM, sized by the stage) and initialises the parameters. Every
 * rank must declare the same units (not collective: nothing is exchanged). Units are numbered from
 * 0 in declaration order; *unit_out receives the index (may be NULL). Tensor names must be unique
 * within the unit. Each tensor starts at an offset that is a multiple of 16 elements. */
ZERO_API zero_status_t zero_engine_add_unit(zero_engine_t *eng, const char *name,
                                            const zero_tensor_desc_t *tensors, int count,
                                            int *unit_out);

/* Partition groups (expert parallelism, docs/ARCHITECTURE.md): split the engine's world by
 * `color` (>= 0); the ranks calling with the same color form one group, numbered by their world
 * rank. Every group of one split must have the same number of ranks n (ZERO_ERR_INVALID_ARG
 * naming the colors and sizes otherwise), so there are copies = world / n groups; ordered by
 * color they are copies 0 .. copies - 1, and a rank's copy index is its group's place in that
 * order. *group_out receives the group's index for zero_engine_add_unit_in (0 is always the world
 * itself). At most 7 splits. For experts over ep ranks: color = rank % ep gives the
 * expert-data-parallel groups of world / ep ranks and copy index rank % ep. Collective over the
 * engine's world (every rank calls it in the same order; call before the first fetch). */
ZERO_API zero_status_t zero_engine_add_group(zero_engine_t *eng, int color, int *group_out);

/* zero_engine_add_unit over partition group `group` (zero_engine_add_group; 0: the world, the
 * same as zero_engine_add_unit but for the norm's exact sum below). The unit is stacked: its
 * tensors, of shape (shape[0], ...), on a rank whose group has copy index c are the c-th of
 * `copies` equal slices along dimension 0 of the unit's logical tensors, of shape (copies *
 * shape[0], ...) (an MoE layer's experts: E / ep experts of E on each rank). The unit is sharded
 * over the group's ranks (padded to a multiple of group size x 16), which hold the same copy; ranks
 * of other groups hold other copies. So:
 *  - initial values are those of the logical tensors (element c * numel + i of the logical tensor
 *    for element i of copy c), the same however the logical tensors are cut;
 *  - gradients: the step scales the group's summed gradient like every unit's, by 1 / (world x
 *    grad_accum_steps), and counts it in the global norm with weight 1, its squares summed
 *    exactly (integers, rounded to a double once over all ranks; every unit of
 *    zero_engine_add_unit_in, in any group, world included, whereas zero_engine_add_unit's
 *    units sum theirs in float64), so the norm does not depend on how the unit is cut: the same
 *    bits at every number of copies, which a clipped step needs. That is the world's mean
 *    when the model's gradient on each rank already holds every token that reached the copy
 *    (expert parallelism: the all-to-all brings each token of the ep block to its expert's rank),
 *    so the group's sum is a sum over the world's tokens: the same update and norm as a world unit
 *    of the logical shape whose rank w fed the gradient of its copy's slice (zeros elsewhere).
 *  - checkpoints (zero/ckpt.h) store the logical tensors, so a unit can resume at another world
 *    size or another number of copies.
 * ZeRO++ qgZ and hpZ apply to units of the world only (stacked units reduce and gather plainly);
 * qwZ and offload_optimizer.overlap_step apply to them too. Not collective. */
ZERO_API zero_status_t zero_engine_add_unit_in(zero_engine_t *eng, int group, const char *name,
                                               const zero_tensor_desc_t *tensors, int count,
                                               int *unit_out);

/* Source slots of a stacked unit: the same bits at every ep. An expert's gradient is a sum over
 * the world's source ranks of their tokens' partials p_0 + ... + p_{W-1}; a world unit's
 * reduce-scatter adds them in that order, whereas a stacked unit summing its group's buffers,
 * each already holding its block's partials, adds (p_0 + p_1) + (p_2 + p_3). With `slots` =
 * the unit's copies (ep for the layout color = rank % ep, where group rank g's expert-parallel
 * block is the ranks g x ep .. g x ep + ep - 1), zero_unit_grads returns slots x P_u elements:
 * slot s, at element s x P_u (P_u = zero_engine_unit_padded_count), is the partial of source rank
 * g x ep + s (this rank's group rank g), laid out and zeroed like an ordinary gradient buffer, and
 * the model adds each source's partial into its slot. zero_unit_grads_done then sums the group's
 * n x slots partials in the order (group rank, slot), the world order of the sources, with the
 * comm layer's rank-order kernel (fp32 accumulation for 16-bit dtypes, rounded once): each shard
 * gets bitwise what the reduce-scatter of a world unit of the logical shape gives when rank w
 * feeds p_w. Everything after is any unit's (the world mean's scale, micro-step accumulation,
 * norm, step, stage 0's gather, stage 3). So ep = 1 (world units), ep = W and any ep between
 * train to the same weights (zero_engine_fingerprint), at every stage and accumulation, for the
 * threads and MPI backends alike, and with gradient clipping: the global norm is the same bits
 * (the unit's squares are summed exactly, zero_engine_add_unit_in). The reduction is one all-to-all
 * of S_u-element blocks per slot inside the group, synchronous, (n - 1) x slots x S_u x c bytes
 * sent per micro-step (c = bytes per compute element), and a receive buffer of slots x P_u compute
 * elements lent by the gradient pool (ZERO_MEM_GRADS); a group of one rank (ep = world) sums its
 * slots in place and sends nothing. Never packed into a bucket. Memory: the working buffer is slots
 * x P_u elements (stages 0-1 keep it; the report's theory and zero_engine_estimate_memory count
 * it). slots must be 1 or the unit's copies (ZERO_ERR_INVALID_ARG naming the unit and both values;
 * a unit of the world or of a one-copy group takes 1); set it after zero_engine_add_unit_in and
 * before the first fetch (ZERO_ERR_INVALID_ARG after). Compatible with every stage, dtype,
 * overlap_comm, the offloads and overlap_step; ZeRO++ qgZ and LoCo apply to units of the world
 * only, so never to these. Not collective (every rank sets the same). zero_engine_unit_slots: unit
 * u's slots (1 unless set; 0 for a bad unit). */
ZERO_API zero_status_t zero_engine_set_unit_slots(zero_engine_t *eng, int u, int slots);
ZERO_API int zero_engine_unit_slots(const zero_engine_t *eng, int u);

/* ------------------------------------------------------------------------------ per step */

/* Full parameters of unit u for compute, valid until the matching
 * zero_unit_release (stage 3 then gives the buffer back to its pool of gather buffers unless the
 * unit is persistent; stages 0-2 keep them until zero_engine_free). Fetches nest (a counter).
 * Elements are of the compute dtype: float for fp32, uint16_t bit patterns for bf16 / fp16.
 * Tensor t starts at element zero_engine_tensor_offset(eng, u, t). Returns NULL with
 * zero_last_error() set for a bad unit or a failed gather (the message names the unit and step; the
 * engine is then failed and zero_engine_step returns the status). The model must not write the
 * memory. Collective in stage 3 (all-gather, possibly prefetches). offload_param nvme with more
 * than one rank: a shard that cannot be read from its swap file (I/O error, short read, checksum
 * mismatch) does not fail the fetch; that rank's part is zeros, every collective stays matched,
 * and the next zero_engine_step or zero_engine_check fails on every rank, naming the rank (and,
 * on that rank, the unit and the file). */
ZERO_API const void *zero_unit_fetch(zero_engine_t *eng, int u);
/* The model is done with unit u's parameters for now. */
ZERO_API void zero_unit_release(zero_engine_t *eng, int u);
/* Gradient buffer of unit u for this micro-step (same layout and dtype as the parameters,
 * zero-filled at the start of each micro-step; a unit with source slots: one such buffer per slot,
 * see zero_engine_set_unit_slots). The model ADDS its gradient, multiplied by
 * zero_engine_loss_scale(), into it (+=) during backward, then
 * calls zero_unit_grads_done. In stages 2-3 the buffer exists only between the two calls.
 * 1-bit Adam's compression stage (params.onebit) reduces nothing: the buffer then keeps the sum
 * of the step's earlier micro-steps (in the compute dtype), which the model adds to, and is zeroed
 * by the step. NULL for a bad unit or out of memory. */
ZERO_API void *zero_unit_grads(zero_engine_t *eng, int u);
/* The gradient of unit u for this micro-step is complete: it joins the reduce bucket (whose
 * reduce-scatter is posted when full) and the buffer from zero_unit_grads is recycled (stages
 * 0-1: zeroed; 2-3: freed). Collective (may post a reduce-scatter). A unit whose buffer was taken
 * but not handed back is handed back by zero_engine_step, in unit order. */
ZERO_API zero_status_t zero_unit_grads_done(zero_engine_t *eng, int u);

typedef struct zero_step_stats {
    int64_t step;     /* optimizer steps completed, this one included */
    float lr;         /* learning rate used by this step */
    double grad_norm; /* global L2 norm of the averaged gradient before clipping (-1: non-finite) */
    int clipped;      /* 1 if the gradient was scaled down to grad_clip */
    int skipped;      /* 1 if the step was skipped (inf/NaN gradient on some rank): master
                         weights, parameters, Adam moments, step count and LR schedule unchanged */
    float loss_scale; /* the scale this step's gradients carried (fp16; 1 for fp32 and bf16) */
    double step_s;    /* seconds spent in zero_engine_step */
    /* units whose update ran during the last backward (offload_optimizer.overlap_step), before
     * zero_engine_step; the step updated the others */
    int units_in_backward;
} zero_step_stats_t;

/* End of a global batch: wait for the reduce-scatters, average the accumulated gradient over
 * ranks x grad_accum_steps (and divide out the loss scale), compute its global norm (float64),
 * check the fetch schedule across ranks, clip, run AdamW with the scheduled learning rate on this
 * rank's shard (stage 0: on the full buffers; 16-bit compute: on the fp32 master, then rounded
 * into the parameters), all-gather the updated parameters (stages 1-2; stage 3 persistent units)
 * and zero the gradients. An inf/NaN in any rank's reduced gradient skips the update on every
 * rank (stats->skipped = 1, a warning is logged, fp16's scale follows the loss scaler's rules)
 * and returns ZERO_OK (with offload_optimizer.overlap_step in effect, once some rank updated
 * units during backward, it returns ZERO_ERR_INVALID_ARG on every rank instead and the engine
 * is failed: see zero_offload_params_t); an overflow at fp16's floor with
 * raise_error_at_min_scale returns ZERO_ERR_CONFIG on every rank, naming the step and the scale.
 * Ranks that called units differently get ZERO_ERR_MISMATCH naming the step, the first differing
 * call and the units. stats may be NULL. Collective. */
ZERO_API zero_status_t zero_engine_step(zero_engine_t *eng, zero_step_stats_t *stats);

/* After fetches that no step follows (an evaluation, sampling): ZERO_OK, or, when a fetch on any
 * rank since the last step could not read its parameter shard (see zero_unit_fetch), the engine
 * failed on every rank with a message naming that rank (on that rank: the unit and the file).
 * Also returns an earlier failure of this rank's engine (without taking part). Collective (a
 * 4-byte all-gather, not counted in a step's communication). */
ZERO_API zero_status_t zero_engine_check(zero_engine_t *eng);

/* The factor the model multiplies the loss gradient by before backward in this micro-step:
 * fp16's dynamic (or static) loss scale, 1.0f for fp32 and bf16. Constant between two
 * zero_engine_step calls; zero_engine_step divides it back out. */
ZERO_API float zero_engine_loss_scale(const zero_engine_t *eng);
/* The engine's loss scaler (borrowed, valid until zero_engine_free): for checkpoints
 * (zero_loss_scaler_get_state / _set_state; set it on every rank alike) and reports. */
ZERO_API zero_loss_scaler_t *zero_engine_loss_scaler(const zero_engine_t *eng);

/* Zero all gradients (e.g. after an evaluation pass that ran backward by mistake). */
ZERO_API void zero_engine_zero_grads(zero_engine_t *eng);

/* Learning rate the schedule gives at (0-based) step `step`. */
ZERO_API float zero_engine_lr_at(const zero_engine_t *eng, int64_t step);

/* ------------------------------------------------------------------------------ queries */

ZERO_API int zero_engine_unit_count(const zero_engine_t *eng);
ZERO_API const char *zero_engine_unit_name(const zero_engine_t *eng, int u);
/* Elements of unit u (sum of its tensors, without padding) and of the whole model. The unit's
 * buffer holds more: each tensor starts at a multiple of 16 elements (zero_engine_tensor_offset),
 * and the whole is padded to a multiple of world x 16 (zero_engine_unit_padded_count). */
ZERO_API size_t zero_engine_unit_param_count(const zero_engine_t *eng, int u);
ZERO_API size_t zero_engine_param_count(const zero_engine_t *eng);
ZERO_API int zero_engine_tensor_count(const zero_engine_t *eng, int u);
/* Element offset of tensor t inside unit u's buffer; (size_t)-1 for a bad index. */
ZERO_API size_t zero_engine_tensor_offset(const zero_engine_t *eng, int u, int t);
ZERO_API const zero_tensor_desc_t *zero_engine_tensor_desc(const zero_engine_t *eng, int u, int t);
/* Accounting domain of the engine (borrowed from params or owned by the engine). */
ZERO_API zero_mem_t *zero_engine_mem(const zero_engine_t *eng);
ZERO_API const zero_engine_params_t *zero_engine_params(const zero_engine_t *eng);

/* Copy `count` parameter (or gradient) elements of unit u starting at `offset` out of / into the
 * engine: for checkpoints and tests (finite differences). Writing parameters keeps the optimizer
 * state. Values are fp32 whatever the compute dtype: with bf16/fp16 a read widens the parameters
 * the model sees (exactly), a write rounds them (RNE) and sets the fp32 master where this rank
 * holds it to the written value; gradients are widened from grad_accum_dtype. ZERO_ERR_INVALID_ARG
 * when the range leaves the unit. Parameters: every rank may read and write the whole unit in
 * stages 0-2 (writes must then be the same on every rank); stage 3 reads and writes the owned shard
 * only (or the whole unit if it is persistent). Gradients: the reduced (summed over ranks, not
 * averaged) gradient accumulated so far this step, owned shard only when world > 1; reading first
 * flushes the partly filled bucket and waits for the posted reduce-scatters (collective when world
 * > 1: call it on every rank). */
ZERO_API zero_status_t zero_engine_params_read(const zero_engine_t *eng, int u, size_t offset,
                                               size_t count, float *out);
ZERO_API zero_status_t zero_engine_params_write(zero_engine_t *eng, int u, size_t offset,
                                                size_t count, const float *in);
/* Collective when world > 1 (it flushes the bucket and waits for the reduce-scatters): every
 * rank calls it, in the same order relative to the other collectives. */
ZERO_API zero_status_t zero_engine_grads_read(zero_engine_t *eng, int u, size_t offset,
                                              size_t count, float *out);

/* The range [*offset, *offset + *count) of unit u owned by this rank (padded layout). */
ZERO_API zero_status_t zero_engine_shard_range(const zero_engine_t *eng, int u, size_t *offset,
                                               size_t *count);
/* Unit u's partition group on this rank: its size in ranks (*group_size), this rank's copy
 * index (*copy) and the number of copies (*copies); a unit of the world: (world, 0, 1). Any
 * pointer may be NULL. ZERO_ERR_INVALID_ARG for a bad unit. Not collective. */
ZERO_API zero_status_t zero_engine_unit_group(const zero_engine_t *eng, int u, int *group_size,
                                              int *copy, int *copies);
/* Padded element count of unit u (a multiple of its group size x 16). */
ZERO_API size_t zero_engine_unit_padded_count(const zero_engine_t *eng, int u);

/* ------------------------------------------------------------------------------ state */

/* Training state beyond the parameters, for checkpoints (src/zero/state.c). None of these calls
 * is collective; each touches this rank's memory only. */
typedef enum {
    ZERO_ENGINE_STATE_MASTER, /* fp32 master weights (fp32 compute: the parameters themselves;
                                 bf16/fp16: a separate fp32 copy, full at stage 0, the owned
                                 shard at stages 1-3; see zero_engine_state_read) */
    ZERO_ENGINE_STATE_ADAM_M, /* Adam first moment */
    ZERO_ENGINE_STATE_ADAM_V, /* Adam second moment */
    ZERO_ENGINE_STATE_COUNT
} zero_engine_state_t;

ZERO_API const char *zero_engine_state_name(zero_engine_state_t state); /* "master", "adam_m" */
/* The range [*offset, *offset + *count) of `state` of unit u that this rank holds (padded
 * layout): the whole unit for the master in stages 0-2 and for stage-3 persistent units, and for
 * m and v in stage 0; otherwise the owned shard. The same ranges hold for every compute dtype. */
ZERO_API zero_status_t zero_engine_state_range(const zero_engine_t *eng, int u,
                                               zero_engine_state_t state, size_t *offset,
                                               size_t *count);
/* Copy `count` elements of `state` of unit u starting at `offset` (padded layout) out of / into
 * the engine; the range must lie inside zero_engine_state_range (ZERO_ERR_INVALID_ARG naming the
 * range and what the rank holds otherwise). Writers keep the padding zero and, where the master
 * is a whole unit, write the same values on every rank. Call between steps.
 * bf16/fp16 in stages 1-3 keep the fp32 master for the owned shard only: reading the master
 * outside it gives the compute-dtype parameters widened, and writing it there rounds the values
 * into the parameters (so a whole-unit load refreshes the full parameters of stages 1-2 and of
 * stage-3 persistent units); inside it, writes set the master and round it into the params. */
ZERO_API zero_status_t zero_engine_state_read(const zero_engine_t *eng, int u,
                                              zero_engine_state_t state, size_t offset,
                                              size_t count, float *out);
ZERO_API zero_status_t zero_engine_state_write(zero_engine_t *eng, int u, zero_engine_state_t state,
                                               size_t offset, size_t count, const float *in);
/* Every copy of `state` of unit u whole, on every rank: out receives copies x P_u fp32 elements
 * (zero_engine_unit_group, P_u = zero_engine_unit_padded_count), copy c's padded buffer at
 * c x P_u (a unit of the world: its one buffer). For checkpoints of stacked units. Each rank
 * sends its owned shard once (one all-gather over the world, not counted in a step's
 * communication; a transient buffer of copies x P_u elements). Call between steps. Collective
 * over the engine's world. */
ZERO_API zero_status_t zero_engine_state_gather(zero_engine_t *eng, int u,
                                                zero_engine_state_t state, float *out);
/* Optimizer steps taken (skipped steps not counted): the learning-rate schedule's position and
 * Adam's bias-correction step. Set it when restoring a checkpoint, on every rank alike;
 * ZERO_ERR_INVALID_ARG outside [0, INT32_MAX]. */
ZERO_API int64_t zero_engine_step_count(const zero_engine_t *eng);
ZERO_API zero_status_t zero_engine_set_step_count(zero_engine_t *eng, int64_t steps);

/* ------------------------------------------------------------------------------ tuning */

/* The settings that may change between steps without changing the math (online tuning): they
 * decide when and in what pieces the same collectives move the same values, never the order of
 * a sum. Their meaning is that of the zero_engine_params_t fields of the same names. Not here,
 * because they would change the numbers or cannot be rebuilt between steps: the stage, the
 * dtypes, persistence_threshold_elems (which units are gathered after the step), hpZ, the
 * quantization switches, the offload devices, and threads (the kernels' blocking of reductions
 * follows the thread count). */
typedef struct zero_engine_tuning {
    size_t reduce_bucket_bytes;    /* >= 1 */
    int overlap_comm;              /* 0 or 1 */
    int64_t prefetch_bucket_elems; /* >= 0 */
} zero_engine_tuning_t;

ZERO_API void zero_engine_get_tuning(const zero_engine_t *eng, zero_engine_tuning_t *out);
/* Apply *t from the next micro-step on. Call between steps (after zero_engine_step, or before
 * the first micro-step), on every rank alike: the ranks must pack the same buckets. A new
 * reduce_bucket_bytes frees the reduce buckets, which are allocated again at the next
 * reduction (the report's comm peak keeps the largest). ZERO_ERR_INVALID_ARG, naming the field
 * and value, for a value out of range, a call inside a step (a gradient handed out and not
 * back, a bucket not yet reduced), and a new bucket size with zero_quantized_gradients (its
 * int4 blocks follow the buckets' packing); the engine is unchanged then. */
ZERO_API zero_status_t zero_engine_retune(zero_engine_t *eng, const zero_engine_tuning_t *t);

/* ------------------------------------------------------------------------------ reports */

/* 64-bit FNV-1a hash of the bytes of the full fp32 weights in canonical order: units in
 * declaration order, tensors in order, unpadded, little-endian floats; a stacked unit's tensors
 * as their logical tensors (every copy, in copy order). Identical however the weights are sharded
 * or stacked and the same on every rank. Collective (stage 3 gathers each unit; its
 * traffic is not counted in the step's communication). Ends with zero_engine_check: a swap file
 * that a rank could not read here or at a fetch since the last step fails every rank. */
ZERO_API zero_status_t zero_engine_fingerprint(zero_engine_t *eng, uint64_t *out);

/* The replica check: the ranks compare a hash of the parameters every rank holds a copy of
 * (stages 0-2: every unit, stage 3: the persistent units; stage 0 with 16-bit compute also the
 * fp32 master), unit by unit. They are the same bits on every rank unless something went wrong
 * (a rank that loaded other weights, a non-deterministic kernel, memory corruption): then every
 * rank returns ZERO_ERR_MISMATCH with a message naming the step, the ranks whose copy differs
 * from rank 0's and the first unit that does. One pass over the replicated bytes and one
 * all-reduce of 32 bytes (and, on a mismatch, an all-gather of 8 bytes per unit to name it; not
 * counted in the step's communication); ZERO_OK at once with one rank. The engine stays usable
 * after a mismatch. Call between steps. Collective. */
ZERO_API zero_status_t zero_engine_check_replicas(zero_engine_t *eng);

/* Memory (bytes, this rank): live and peak by category in the engine's accounting domain (the
 * model's activations appear under ZERO_MEM_ACTIVATIONS when it allocates them there), and the
 * theory for params / grads / optimizer states / communication buffers of this engine's padded
 * layout between steps (other categories 0 = no theory). With P = padded model, S = P / world,
 * A_s = padded elements of stage-3 persistent units, S_n = shard elements of the other units,
 * c = bytes per compute element (4 fp32, 2 bf16/fp16), a = bytes per grad_accum_dtype element:
 *   params  stage 0-2: cP            stage 3: c(S_n + A_s), + with hpz_partition_size h > 1:
 *           c sum_u P_u / h over the non-persistent units (the secondary shards)
 *   grads   stage 0-1: cP + aS, or cP for a unit over one rank with one source slot and
 *           grad_accum_steps 1 (one gradient: the working buffer serves as the accumulator)
 *                                    stage 2-3: aS (the shard accumulator) plus the pool
 *           of working buffers the model fills during backward: c sum_p p K'_p, K'_p = the most
 *           units of padded size p holding gradients at once so far (kept between steps); with
 *           16-bit compute at stage 0 and N > 1 the pool also holds one aP_u buffer per padded
 *           size, the landing place of the step's gradient all-gather. A unit with k_u source
 *           slots (zero_engine_set_unit_slots) counts k_u P_u for its working buffer (in cP and
 *           in the pool), and, over a group of more than one rank, the pool (every stage) lends
 *           it a receive buffer of k_u P_u compute elements during its reduction
 *   optim   fp32 compute: stage 0: 8P (Adam m, v), stage 1-3: 8S (the params are the master)
 *           16-bit compute: stage 0: 12P (fp32 master, m, v), stage 1-3: 12S
 *   comm    2 x c(B + B/N) for the two reduce-bucket slots once a gradient was reduced with
 *           N > 1 ranks (B = the bucket's elements: reduce_bucket_bytes / 4 rounded down to a
 *           multiple of 16N, capped at P; with accumulation each slot also gets a receive buffer
 *           of the largest directly reduced unit's shard), plus, stage 3, the pool of
 *           gather buffers: c sum_p p K_p, K_p = the most non-persistent units of padded size p
 *           gathered (held or prefetched) at the same time so far. The pool lends a buffer of
 *           exactly a unit's padded size to each gather and takes it back at release; it frees
 *           them only in zero_engine_free. gather_pool_bytes reports it, gather_pool_idle_bytes
 *           the part not lent now (the rest are the units gathered now). With
 *           quantized_gradients (qgZ) each slot also keeps the int4 reduce-scatter's scratch
 *           for the largest call it carried, of B elements and W = sum_u (4 ceil(S_u / 256) +
 *           ceil(S_u / 2)) wire bytes over its units: 2 N W + 2 M_n W (M_n nodes; 0 on one
 *           node) + 4B, each part rounded up to 64 bytes.
 * Communication (bytes SENT by this rank in the last completed optimizer step, every collective
 * the engine issued), by kind beside the theory of src/zero/xfer.c (zero__xfer_theory): with
 * N = world, M = micro-steps of the step, S = P / N, c and a as above:
 *   grads    (N-1) cS per micro-step (the reduce-scatters) + stage 0: (N-1) aS (the reduced
 *            gradient all-gathered); a unit with k_u source slots over a group of n_u ranks sends
 *            (n_u-1) k_u c S_u per micro-step instead of its reduce-scatter. With
 * quantized_gradients (qgZ) on M_n nodes of L ranks each, a unit's reduction sends (L-1) M_n W_u
 * inside its node and (M_n-1) W_u to other nodes, W_u = 4 ceil(S_u / 256) + ceil(S_u / 2): (N-1)
 * W_u in all, 0.129x the flat reduce-scatter's bytes in fp32, 0.258x in bf16 params   stage 3:
 * (N-1) c S_u per fetch window of each non-persistent unit u (a fetch with u not held: twice per
 * micro-step for a forward + backward use) + (N-1) c S_pers (persistent units gathered after the
 * step); stages 1-2: (N-1) cS (after the step). With quantized_weights (qwZ) a window sends
 * (N-1)(S_u + 4 ceil(S_u / 256)) instead: the int8 shard and its fp32 scales. With
 * hpz_partition_size h > 1 only the first window of u after a step does so; every later one sends
 * (h-1) c P_u / h inside the group of h ranks control  (N-1) x 32 (one record per rank per step:
 * norm partial, schedule hash, inf/NaN flag; (N-1) x 120 with units of zero_engine_add_unit_in,
 * the record carrying the rank's exact sum of squares) Prefetch changes when a window's gather is
 * posted, not how many (if a prefetched gather is ever dropped unused, the engine logs a warning
 * and the step sends that much more). Before the first step the theory assumes M = grad_accum_steps
 * and two windows per micro-step. */
typedef enum zero_xfer_kind {
    ZERO_XFER_PARAMS,  /* parameter all-gathers */
    ZERO_XFER_GRADS,   /* gradient reductions */
    ZERO_XFER_CONTROL, /* the step's agreement record */
    ZERO_XFER_KIND_COUNT
} zero_xfer_kind_t;

ZERO_API const char *zero_xfer_kind_name(zero_xfer_kind_t kind); /* "params", "grads", "control" */

typedef struct zero_engine_report {
    size_t memory_bytes[ZERO_MEM_CATEGORY_COUNT];
    size_t memory_peak_bytes[ZERO_MEM_CATEGORY_COUNT];
    size_t memory_theory_bytes[ZERO_MEM_CATEGORY_COUNT];
    uint64_t comm_bytes_per_step;
    uint64_t comm_theory_bytes_per_step;
    uint64_t comm_sent_bytes_per_step_by_coll[ZERO_COLL_COUNT];
    uint64_t comm_sent_bytes_per_step_by_kind[ZERO_XFER_KIND_COUNT];
    uint64_t comm_theory_bytes_per_step_by_kind[ZERO_XFER_KIND_COUNT];
    /* Of comm_bytes_per_step, what goes to ranks on other nodes (zero_comm_node_of), measured
     * and its theory (0 on one node). */
    uint64_t comm_inter_node_bytes_per_step, comm_inter_node_theory_bytes_per_step;
    size_t param_count;        /* unpadded */
    size_t padded_param_count; /* P */
    int stage, world_size, rank;
    /* Stage 3 (ZERO_MEM_COMM, included in memory_bytes): the pool of gather buffers, in all
     * (c sum_p p K_p) and the part not lent to a unit now. */
    size_t gather_pool_bytes, gather_pool_idle_bytes;
    /* The ZeRO paper's breakdown of model states (live bytes of this rank, and the theory):
     * [0] parameters in the compute dtype, [1] gradients kept between steps (the shard
     * accumulator, plus at stages 0-1 the full working buffer), [2] optimizer states (fp32
     * master when separate, Adam m and v). With 16-bit compute and 16-bit accumulation that is
     * 2P + (2P + 2S) + 12P at stage 0 ... 2S + 2S + 12S = 16P/N at stage 3 (no persistent
     * units). Transient buffers are apart: grad_pool_bytes (stage 2-3 working buffers, the
     * stage-0 16-bit gather landing) and the comm buffers (reduce buckets, gather pool). */
    size_t model_state_bytes[3], model_state_theory_bytes[3];
    /* The same split by kind of unit: [0] units of the world (dense), [1] stacked units of smaller
     * partition groups (zero_engine_add_unit_in: experts), each [0..2] as above; each sums with
     * the other to the figures above. Theory: the formulas above per unit with N = the unit's
     * group size (S_u = P_u / N). Live: the stacked units' buffers; the dense part the rest. */
    size_t model_state_split_bytes[2][3], model_state_split_theory_bytes[2][3];
    size_t grad_pool_bytes;
    zero_dtype_t compute_dtype, grad_accum_dtype;
    /* offload_optimizer nvme: bytes of this rank's swap files (the optimizer states there); the
     * RAM left of them is ZERO_MEM_OFFLOAD: buffer_count staging buffers of one sub-group of
     * every swapped state, and 4 bytes of checksum per 4 KiB of swap file. offload_param nvme
     * adds the parameter files (each shard in whole pages) and, in ZERO_MEM_OFFLOAD, its
     * buffer_count buffers of the largest shard and their checksums; ZERO_MEM_PARAMS then holds
     * only the persistent units. Both at nvme add the gradient accumulators' files, their two
     * buffers and checksums; ZERO_MEM_GRADS then holds only the persistent units' accumulators
     * and the working buffers. The I/O below counts all of them. */
    uint64_t swap_disk_bytes;
    /* ... and their I/O in the last completed step: bytes read and written (each sub-group is
     * written once per step, so written is swap_disk_bytes; read is about that: less what was
     * still staged, more when a sub-group read ahead was dropped before use and read again),
     * and the seconds the step waited for them (I/O not hidden behind compute). */
    uint64_t swap_read_bytes_per_step, swap_written_bytes_per_step;
    double swap_wait_s_per_step;
} zero_engine_report_t;

/* Fill *out (not collective). */
ZERO_API void zero_engine_get_report(const zero_engine_t *eng, zero_engine_report_t *out);

/* ------------------------------------------------------------------------------ estimate */

/* A unit as zero_engine_add_unit takes it, for zero_engine_estimate_memory. */
typedef struct zero_unit_decl {
    const zero_tensor_desc_t *tensors; /* borrowed during the call */
    int tensor_count;
    int repeat; /* this many identical units in a row (a transformer's blocks); 0 means 1 */
    /* ranks of its partition group (zero_engine_add_unit_in: a stacked unit, tensors of one
     * copy), a divisor of world; 0: the world */
    int group_size;
    /* source slots (zero_engine_set_unit_slots): 1 or world / group_size; 0 means 1 */
    int slots;
} zero_unit_decl_t;

typedef struct zero_memory_estimate {
    size_t param_count;        /* unpadded */
    size_t padded_param_count; /* P, for this world size */
    /* Per rank, by category: params, grads (the kept buffers and, stages 2-3, the working
     * buffers of backward), optim (fp32 master with 16-bit compute, Adam m and v), comm (the
     * reduce buckets with N > 1 and, stage 3, the gather pool at its largest), other (the 16-bit
     * scratch). Activations 0: the model adds its own. */
    size_t bytes[ZERO_MEM_CATEGORY_COUNT];
    size_t model_state_bytes[3]; /* the paper's breakdown: parameters, gradients, optimizer */
    size_t total_bytes;          /* sum of bytes[] */
    /* offload_optimizer nvme: the swap files' bytes on disk (the optimizer states); their RAM
     * is then the offload category (staging buffers, checksums), optim holds none.
     * offload_param nvme: plus the parameter shards' files, their buffers in offload, and params
     * holding only the persistent units. */
    uint64_t disk_bytes;
} zero_memory_estimate_t;

/* The memory one rank of an engine with these params over `world` ranks will need for these
 * units, computed without allocating (params->comm is ignored: world says the size). The model
 * states follow the theory of zero_engine_get_report exactly; the transient pools are sized for
 * their worst case in a step: stage 2-3 gradient working buffers as the 3 largest units (2 with
 * overlap_comm off), the stage-3 gather pool as the 2 largest non-persistent units plus whole
 * units up to stage3_prefetch_bucket_size ahead. For a pre-flight check ("will this fit?") and
 * for planning stages and world sizes. ZERO_ERR_INVALID_ARG for a bad stage, dtype or world.
 * Not collective; thread-safe. */
ZERO_API zero_status_t zero_engine_estimate_memory(const zero_engine_params_t *params, int world,
                                                   const zero_unit_decl_t *units, int unit_count,
                                                   zero_memory_estimate_t *out);

#ifdef __cplusplus
}
#endif
#endif /* ZERO_ENGINE_H */
