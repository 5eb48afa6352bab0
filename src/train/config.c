/* config.c — the table of training keys and the JSON reader (cJSON).
 *
 * Not here: what the values do (zero__train_config_engine_params maps them onto the engine, the
 * trainer onto the model). Every other key DeepSpeed accepts is in `ds_keys` with what zero does
 * with it (the same thing, nothing needed, an equivalent, another spelling, not yet), so none is
 * an "unknown key". Duplicate keys are an error (find_duplicate), as in DeepSpeed. Invariant: every
 * field of zero_train_config_t that a user can set appears exactly once in `keys`, so defaults,
 * parsing, flags, printing and docs/config.md agree; keys are grouped by JSON section so that
 * printing can nest them by common prefix.
 */
#include "train/config.h"

#include "core/core_internal.h"
#include "zero/comm.h"
#include "zero/config.h"

#include <cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

typedef enum { K_INT, K_I64, K_FLOAT, K_BOOL, K_STR, K_PAIR, K_DOUBLE, K_TYPE_COUNT } key_type_t;
static const char *const type_names[] = {"integer", "integer",          "number", "boolean",
                                         "string",  "[number, number]", "number"};
_Static_assert(sizeof type_names / sizeof type_names[0] == K_TYPE_COUNT, "type name table");

typedef struct key {
    const char *name; /* dotted path in the JSON document */
    key_type_t type;
    size_t offset;
    double def, min, max; /* numbers (K_PAIR: both elements) */
    const char *def_str;  /* K_STR default */
    const char *allowed;  /* K_STR: '|'-separated allowed values (case-insensitive), or NULL */
    const char *flag;     /* command-line flag that sets it ("--stage"), or NULL */
    const char *doc;
} cfg_key_t;

/* DeepSpeed's defaults for the bucket and stage-3 sizes (elements), so a ds_config.json that
 * leaves them out means what it means under DeepSpeed. */
#define DS_BUCKET 5e8
#define DS_PREFETCH 5e7
#define DS_PERSIST 1e5
#define DS_LIVE 1e9
#define I64_MAX 9.0e18

#define OFF(f) offsetof(zero_train_config_t, f)
static const cfg_key_t keys[] = {
    {"model.layers", K_INT, OFF(model.layers), 4, 1, 1024, NULL, NULL, NULL, "transformer blocks"},
    {"model.heads", K_INT, OFF(model.heads), 4, 1, 65536, NULL, NULL, NULL,
     "attention heads (divides model.dim)"},
    {"model.dim", K_INT, OFF(model.dim), 128, 1, 65536, NULL, NULL, NULL, "embedding width C"},
    {"model.vocab", K_INT, OFF(model.vocab), 256, 2, 16777216, NULL, NULL, NULL,
     "vocabulary size (256 for byte-level text)"},
    {"model.seq", K_INT, OFF(model.seq), 128, 1, 1048576, NULL, NULL, NULL,
     "context length (max sequence)"},
    {"model.activation_checkpointing", K_BOOL, OFF(checkpointing), 0, 0, 1, NULL, NULL, NULL,
     "recompute each block's forward in backward"},
    {"model.moe.experts", K_INT, OFF(model.moe.experts), 0, 0, 65536, NULL, NULL, NULL,
     "routed experts E per MoE layer (0: no MoE, every MLP dense); docs/moe.md"},
    {"model.moe.top_k", K_INT, OFF(model.moe.top_k), 2, 1, 2, NULL, NULL, NULL,
     "experts per token: 1 (Switch) or 2 (GShard), at most experts"},
    {"model.moe.every", K_INT, OFF(model.moe.every), 2, 1, 1024, NULL, NULL, NULL,
     "layer l (from 0) is MoE when (l + 1) % every == 0: 2 = layers 1, 3, 5, ...; 1 = all"},
    {"model.moe.capacity_factor", K_DOUBLE, OFF(model.moe.capacity_factor), 1.0, -1e300, 1e300,
     NULL, NULL, NULL,
     "training: slots per expert = max(min_capacity, ceil(factor x tokens x top_k / experts))"},
    {"model.moe.eval_capacity_factor", K_DOUBLE, OFF(model.moe.eval_capacity_factor), 1.0, -1e300,
     1e300, NULL, NULL, NULL, "the same for validation and sampling (forwards in eval mode)"},
    {"model.moe.min_capacity", K_INT, OFF(model.moe.min_capacity), 4, 0, INT_MAX, NULL, NULL, NULL,
     "slots per expert at least"},
    {"model.moe.drop_tokens", K_BOOL, OFF(model.moe.drop_tokens), 1, 0, 1, NULL, NULL, NULL,
     "drop the choices that find their expert full (false: capacity = tokens, none dropped)"},
    {"model.moe.aux_loss_coef", K_FLOAT, OFF(model.moe.aux_loss_coef), 0.01, 0, 1e30, NULL, NULL,
     NULL, "weight of each MoE layer's load-balancing loss in the trained loss"},
    {"model.moe.z_loss_coef", K_FLOAT, OFF(model.moe.z_loss_coef), 0, 0, 1e30, NULL, NULL, NULL,
     "weight of each MoE layer's router z-loss in the trained loss (0: off)"},
    {"model.moe.shared_experts", K_INT, OFF(model.moe.shared_experts), 0, 0, 1024, NULL, NULL, NULL,
     "always-on experts added with weight 1 (DeepSeekMoE)"},
    {"model.moe.hidden", K_INT, OFF(model.moe.hidden), 0, 0, 1 << 20, NULL, NULL, NULL,
     "hidden width of every expert (0: 4 x model.dim, the dense MLP's)"},
    {"model.moe.ep_size", K_INT, OFF(model.moe.ep_size), 1, 1, 4096, NULL, NULL, "--ep-size",
     "expert-parallel group size: experts split over blocks of this many ranks (divides experts "
     "and the world size); docs/moe.md"},
    {"data.path", K_STR, OFF(data_path), 0, 0, 0, "", NULL, "--data",
     "training data: a text, nanoGPT .bin or llm.c token file, a nanoGPT data directory "
     "(train.bin, val.bin, meta.pkl) or a glob of llm.c shards ('fineweb_train_*.bin'); empty = "
     "built-in corpus; docs/data.md"},
    {"data.val_path", K_STR, OFF(val_path), 0, 0, 0, "", NULL, "--val-data",
     "validation data (a file or a glob, as data.path); empty = a data directory's val.bin, else "
     "the tail data.val_fraction of data.path"},
    {"data.tokenizer", K_STR, OFF(tokenizer), 0, 0, 0, "", NULL, "--tokenizer",
     "GPT-2 BPE tokenizer: a vocab.json (merges.txt beside it), a tokenizer.json, llm.c's "
     "gpt2_tokenizer.bin (decoding only) or a directory; text data is encoded with it, "
     "model.vocab comes from it unless set, samples are decoded with it; empty = bytes; "
     "docs/tokenizer.md"},
    {"data.order", K_STR, OFF(data_order), 0, 0, 0, "random", "random|sequential", NULL,
     "training windows: random (start anywhere in the training stream, with replacement, as "
     "nanoGPT's get_batch) or sequential (consecutive windows through the files in order, "
     "wrapping at the end, as llm.c's DataLoader without shuffling); docs/data.md"},
    {"data.val_fraction", K_FLOAT, OFF(val_fraction), 0.1, 1e-6, 0.999999, NULL, NULL, NULL,
     "tail fraction held out for validation when the validation data is not given apart"},
    {"data.builtin_bytes", K_INT, OFF(builtin_bytes), 1 << 20, 4096, 1 << 30, NULL, NULL, NULL,
     "size of the generated built-in corpus"},
    {"train_batch_size", K_INT, OFF(train_batch_size), 0, 0, INT_MAX, NULL, NULL, NULL,
     "global sequences per optimizer step = micro x accumulation x world size (0 or absent: "
     "computed from the other two)"},
    {"train_micro_batch_size_per_gpu", K_INT, OFF(micro_batch), 16, 1, 1 << 20, NULL, NULL, NULL,
     "sequences per rank per micro-step"},
    {"gradient_accumulation_steps", K_INT, OFF(grad_accum), 1, 1, 1 << 20, NULL, NULL, NULL,
     "micro-steps per optimizer step"},
    {"gradient_clipping", K_FLOAT, OFF(grad_clip), 0, 0, 1e30, NULL, NULL, NULL,
     "global L2 norm clip (0: no clipping, DeepSpeed's default)"},
    {"bf16.enabled", K_BOOL, OFF(bf16), 0, 0, 1, NULL, NULL, NULL,
     "bf16 compute: parameters, activations, gradients and collectives in bf16; fp32 master "
     "weights and Adam moments (see --dtype)"},
    {"fp16.enabled", K_BOOL, OFF(fp16), 0, 0, 1, NULL, NULL, NULL,
     "fp16 compute with dynamic loss scaling (the fp16.* keys); not with bf16.enabled"},
    /* fp16.*: stored by zero_loss_scaler_params_set (set_number), which checks the range and
     * names the key and value; the table's range only excludes non-finite numbers. */
    {"fp16.loss_scale", K_DOUBLE, OFF(loss_scaler.loss_scale), 0, -1e300, 1e300, NULL, NULL, NULL,
     "0: dynamic loss scaling; > 0: this static scale (an overflowed step is still skipped)"},
    {"fp16.initial_scale_power", K_INT, OFF(loss_scaler.initial_scale_power), 16, -1e300, 1e300,
     NULL, NULL, NULL,
     "first dynamic scale 2^power (always 16 by default, never DeepSpeed's 2^32)"},
    {"fp16.loss_scale_window", K_INT, OFF(loss_scaler.loss_scale_window), 1000, -1e300, 1e300, NULL,
     NULL, NULL, "clean steps before the scale doubles"},
    {"fp16.hysteresis", K_INT, OFF(loss_scaler.hysteresis), 2, -1e300, 1e300, NULL, NULL, NULL,
     "overflows tolerated before the scale halves (always 2 by default)"},
    {"fp16.consecutive_hysteresis", K_BOOL, OFF(loss_scaler.consecutive_hysteresis), 0, 0, 1, NULL,
     NULL, NULL, "refill the hysteresis on every clean step"},
    {"fp16.min_loss_scale", K_DOUBLE, OFF(loss_scaler.min_loss_scale), 1, -1e300, 1e300, NULL, NULL,
     NULL, "floor of the dynamic scale"},
    {"fp16.raise_error_at_min_scale", K_BOOL, OFF(loss_scaler.raise_error_at_min_scale), 1, 0, 1,
     NULL, NULL, NULL, "an overflow at the floor stops training (false: skip and stay)"},
    {"fp8.enabled", K_BOOL, OFF(model.fp8.enabled), 0, 0, 1, NULL, NULL, NULL,
     "FP8 GEMM inputs in every block's qkv, attention projection, fc and fc projection "
     "(forward X, W; backward dY), the GEMMs on the dequantized values (no speed-up on CPUs "
     "without FP8 hardware); embeddings, LM head, LayerNorm, softmax and loss stay in the "
     "compute dtype; fp32 or bf16, not fp16; docs/mixed-precision.md"},
    {"fp8.format", K_STR, OFF(fp8_format), 0, 0, 0, "hybrid", "hybrid|e4m3", NULL,
     "hybrid: X and W in E4M3, dY in E5M2 (Transformer Engine's default); e4m3: all E4M3"},
    {"fp8.recipe", K_STR, OFF(fp8_recipe), 0, 0, 0, "delayed", "delayed|blockwise", NULL,
     "delayed: one scale per tensor from the amax history of earlier steps, amax reduced (max) "
     "over the ranks once per step (Transformer Engine); blockwise: scales from the current "
     "values per 1 x 128 tile of X and dY and per 128 x 128 block of W (DeepSeek-V3)"},
    {"fp8.margin", K_INT, OFF(model.fp8.margin), 0, 0, 64, NULL, NULL, NULL,
     "delayed: scale = (FP8_MAX / amax) / 2^margin"},
    {"fp8.amax_history_len", K_INT, OFF(model.fp8.history_len), 1024, 1, 1 << 20, NULL, NULL, NULL,
     "delayed: steps of amax history whose max makes the scale (4 x 12 x len bytes per "
     "block)"},
    {"fp8.weight_gather", K_BOOL, OFF(model.fp8.weight_gather), 0, 0, 1, NULL, NULL, NULL,
     "the blocks' four linear weights live on the E4M3 grid (one power-of-two scale per 128 "
     "elements of each rank's partition, rounded after every step) and stage 3 all-gathers them "
     "in 1 + 4/128 bytes per element; needs fp8.enabled and bf16; not with qwZ, hpZ, "
     "AdamW8bit, OneBitAdam or NVMe offload"},
    {"data_types.grad_accum_dtype", K_STR, OFF(grad_accum_dtype), 0, 0, 0, "fp32", "fp32|bf16|fp16",
     NULL, "dtype of the reduced gradient accumulator: fp32, or the compute dtype"},
    {"steps_per_print", K_INT, OFF(steps_per_print), 10, 1, INT_MAX, NULL, NULL, NULL,
     "steps between progress lines when output is not a terminal"},
    {"seed", K_INT, OFF(seed), 1337, 0, INT_MAX, NULL, NULL, "--seed",
     "seed of initialisation, batches and sampling"},
    {"optimizer.type", K_STR, OFF(optimizer), 0, 0, 0, "AdamW", "AdamW|Adam|AdamW8bit|OneBitAdam",
     NULL,
     "AdamW (Adam means AdamW: decoupled decay, DeepSpeed's adam_w_mode); AdamW8bit: the same "
     "with 8-bit states, as bitsandbytes' name (optimizer.params.state_dtype int8); OneBitAdam: "
     "DeepSpeed's 1-bit Adam (AdamW for freeze_step steps, then v frozen and the momentum "
     "averaged by a 1-bit compressed all-reduce with error feedback; stage 0 only, not with "
     "fp16, 8-bit states or offload)"},
    {"optimizer.params.freeze_step", K_INT, OFF(freeze_step), 100000, 0, INT_MAX, NULL, NULL, NULL,
     "OneBitAdam: steps of plain AdamW before v is frozen and the momentum compressed "
     "(DeepSpeed's default 100000; its tutorial suggests 15-25% of the steps)"},
    {"optimizer.params.cuda_aware", K_BOOL, OFF(cuda_aware), 0, 0, 1, NULL, NULL, NULL,
     "OneBitAdam: accepted, no effect (CPU buffers)"},
    {"optimizer.params.comm_backend_name", K_STR, OFF(comm_backend_name), 0, 0, 0, "nccl", NULL,
     NULL, "OneBitAdam: accepted, no effect (the collectives are the engine's communicator's)"},
    {"optimizer.params.state_dtype", K_STR, OFF(state_dtype), 0, 0, 0, "fp32", "fp32|int8", NULL,
     "dtype of Adam's m and v: fp32, or int8 (bitsandbytes' 8-bit Adam: blocks of 256 at fixed "
     "offsets, the dynamic map, signed for m and unsigned for v, one fp32 absmax per block; "
     "units padded to 256 x ranks; blocks touching a tensor of fewer than 4096 elements keep "
     "fp32 states; checkpoints store the states as fp32, exactly; not with offload device nvme); "
     "absent with AdamW8bit: int8"},
    {"optimizer.params.lr", K_FLOAT, OFF(lr), 1e-3, 0, 10, NULL, NULL, NULL, "peak learning rate"},
    {"optimizer.params.betas", K_PAIR, OFF(beta), 0.9, 0, 0.999999, NULL, NULL, NULL,
     "Adam betas (default [0.9, 0.999], DeepSpeed's and PyTorch's Adam/AdamW default)"},
    {"optimizer.params.eps", K_FLOAT, OFF(eps), 1e-8, 1e-30, 1, NULL, NULL, NULL, "Adam epsilon"},
    {"optimizer.params.weight_decay", K_FLOAT, OFF(weight_decay), 0, 0, 10, NULL, NULL, NULL,
     "decoupled weight decay on every 2-D weight (token and position embeddings included), not on "
     "biases or layernorm gains; DeepSpeed's default 0"},
    {"scheduler.type", K_STR, OFF(scheduler), 0, 0, 0, "none",
     "none|WarmupCosineLR|WarmupDecayLR|WarmupLR", NULL,
     "none (no scheduler block): constant learning rate, as in DeepSpeed; otherwise a warm-up "
     "then cosine decay, linear decay or constant"},
    {"scheduler.params.warmup_min_lr", K_FLOAT, OFF(warmup_min_lr), 0, 0, 10, NULL, NULL, NULL,
     "WarmupLR, WarmupDecayLR: where the warm-up starts (and WarmupDecayLR's final lr)"},
    {"scheduler.params.warmup_max_lr", K_FLOAT, OFF(warmup_max_lr), 0.001, 0, 10, NULL, NULL, NULL,
     "WarmupLR, WarmupDecayLR: peak learning rate (DeepSpeed's default 0.001 whatever "
     "optimizer.params.lr says; 0: optimizer.params.lr)"},
    {"scheduler.params.warmup_min_ratio", K_FLOAT, OFF(warmup_min_ratio), 0, 0, 1, NULL, NULL, NULL,
     "WarmupCosineLR: where the warm-up starts, as a fraction of the peak"},
    {"scheduler.params.warmup_num_steps", K_INT, OFF(warmup_steps), 1000, 0, INT_MAX, NULL, NULL,
     NULL, "warm-up steps"},
    {"scheduler.params.warmup_type", K_STR, OFF(warmup_type), 0, 0, 0, "log", "linear|log", NULL,
     "warm-up shape: log (DeepSpeed's default: lr = min + (peak - min) log(step + 1) / "
     "log(warmup_num_steps)) or linear"},
    {"scheduler.params.total_num_steps", K_INT, OFF(total_steps), 0, 0, INT_MAX, NULL, NULL, NULL,
     "end of the decay (0: train.steps)"},
    {"scheduler.params.cos_min_ratio", K_FLOAT, OFF(min_lr_ratio), 0.0001, 0, 1, NULL, NULL, NULL,
     "WarmupCosineLR: final learning rate as a fraction of the peak"},
    {"zero_optimization.stage", K_INT, OFF(stage), 0, 0, 3, NULL, NULL, "--stage",
     "ZeRO stage: 0 data parallel, 1 optimizer states, 2 + gradients, 3 + parameters sharded"},
    {"zero_optimization.reduce_bucket_size", K_I64, OFF(reduce_bucket_elems), DS_BUCKET, 0, I64_MAX,
     NULL, NULL, NULL,
     "gradient elements per reduce-scatter bucket (0: no bucket, each unit's gradients are "
     "reduce-scattered on their own)"},
    {"zero_optimization.allgather_bucket_size", K_I64, OFF(allgather_bucket_elems), DS_BUCKET, 1,
     I64_MAX, NULL, NULL, NULL, "accepted; stages 1-2 all-gather updated parameters per unit"},
    {"zero_optimization.overlap_comm", K_BOOL, OFF(overlap_comm), 1, 0, 1, NULL, NULL, NULL,
     "gradient reduce-scatters overlap backward; false: each large unit's is waited for (stages "
     "2-3 hold one gradient buffer instead of two); absent: true at stage 3, false below, as in "
     "DeepSpeed"},
    {"zero_optimization.contiguous_gradients", K_BOOL, OFF(contiguous_gradients), 1, 0, 1, NULL,
     NULL, NULL, "accepted; gradients are always contiguous (one flat buffer per unit)"},
    {"zero_optimization.reduce_scatter", K_BOOL, OFF(reduce_scatter), 1, 0, 1, NULL, NULL, NULL,
     "accepted; gradients are always reduce-scattered (false warns)"},
    {"zero_optimization.stage3_prefetch_bucket_size", K_I64, OFF(prefetch_bucket_elems),
     DS_PREFETCH, 0, I64_MAX, NULL, NULL, NULL, "stage 3: parameter elements fetched ahead of use"},
    {"zero_optimization.stage3_param_persistence_threshold", K_I64,
     OFF(persistence_threshold_elems), DS_PERSIST, 0, I64_MAX, NULL, NULL, NULL,
     "stage 3: units with fewer elements stay gathered"},
    {"zero_optimization.stage3_max_live_parameters", K_I64, OFF(max_live_elems), DS_LIVE, 1,
     I64_MAX, NULL, NULL, NULL, "stage 3: cap on gathered parameter elements alive at once"},
    {"zero_optimization.stage3_max_reuse_distance", K_I64, OFF(max_reuse_distance_elems), DS_LIVE,
     0, I64_MAX, NULL, NULL, NULL, "accepted; released units are re-gathered when used again"},
    {"zero_optimization.zero_quantized_weights", K_BOOL, OFF(quantized_weights), 0, 0, 1, NULL,
     NULL, NULL,
     "ZeRO++ qwZ, stage 3: parameter all-gathers carry blockwise int8 with an fp32 scale per 256 "
     "elements (about 1/4 of fp32's bytes, 1/2 of bf16's); every rank computes with the "
     "dequantized weights, while the shards, the optimizer, the gradients and the checkpoints stay "
     "exact; below stage 3 it changes nothing (a note says so)"},
    {"zero_optimization.zero_hpz_partition_size", K_INT, OFF(hpz_partition_size), 1, 1, 65536, NULL,
     NULL, NULL,
     "ZeRO++ hpZ, stage 3 only (an error below): groups of this many consecutive ranks (a node); "
     "each rank keeps a secondary shard of every unit over its group (P/h elements), filled by the "
     "step's first all-gather of the unit, and the later gathers of the step (backward, later "
     "micro-steps) stay inside the group; must divide the world size; 1 = off; bitwise the "
     "results of plain stage 3; not with offload_param nvme"},
    {"zero_optimization.zero_quantized_gradients", K_BOOL, OFF(quantized_gradients), 0, 0, 1, NULL,
     NULL, NULL,
     "ZeRO++ qgZ, every stage: the gradient reduce-scatter carries blockwise int4 (an fp32 scale "
     "per 256 elements) in two all-to-alls, inside each node (partials summed in fp32 and "
     "re-quantized) then between nodes; about 1/8 of fp32's bytes to other nodes; the step takes "
     "the mean over all ranks as without it; only the wire is quantized (master weights, "
     "optimizer, checkpoints unchanged)"},
    {"zero_optimization.zeropp_loco_param.err_beta", K_FLOAT, OFF(loco_err_beta), 0.8, 0, 0.999999,
     NULL, NULL, NULL,
     "LoCo error feedback for qgZ (giving zeropp_loco_param, or either of its keys, turns it on; "
     "null: off): each rank adds its last quantization error to the next gradient it sends, "
     "error = err_beta error + (1 - err_beta) (sent - quantized); an fp32 buffer of the full "
     "gradient per rank; needs zero_quantized_gradients"},
    {"zero_optimization.zeropp_loco_param.reset_T", K_INT, OFF(loco_reset_t), 1024, 1, INT_MAX,
     NULL, NULL, NULL,
     "LoCo: the error buffers are zeroed every reset_T optimizer steps (and after a skipped step "
     "and at resume: not checkpointed)"},
    {"zero_optimization.sub_group_size", K_I64, OFF(sub_group_elems), 1e9, 1, I64_MAX, NULL, NULL,
     NULL,
     "optimizer states on NVMe are streamed through the step in sub-groups of this many elements "
     "(rounded down to a multiple of 1024, capped by the largest unit's shard)"},
    {"zero_optimization.offload_optimizer.device", K_STR, OFF(offload_optimizer), 0, 0, 0, "none",
     "none|cpu|nvme", NULL,
     "where Adam's m and v (and with bf16 or fp16 the fp32 master) live: none or cpu (this "
     "process's memory: a CPU build computes there anyway), nvme (swap files under nvme_path, "
     "read and written through the step; the results are the same bits)"},
    {"zero_optimization.offload_optimizer.nvme_path", K_STR, OFF(nvme_path), 0, 0, 0, "", NULL,
     NULL,
     "existing directory of the swap files (device nvme): one per unit and rank, preallocated at "
     "start, deleted at exit; a fast local disk"},
    {"zero_optimization.offload_optimizer.buffer_count", K_INT, OFF(offload_buffer_count), 4, 2, 64,
     NULL, NULL, NULL,
     "staging buffers of one sub-group of every swapped state each (RAM: buffer_count x "
     "sub-group x 8 bytes, 12 with bf16 or fp16)"},
    {"zero_optimization.offload_optimizer.pipeline_read", K_BOOL, OFF(pipeline_read), 1, 0, 1, NULL,
     NULL, NULL,
     "read the next sub-group while one is updated (on by default here; DeepSpeed's default is "
     "off)"},
    {"zero_optimization.offload_optimizer.pipeline_write", K_BOOL, OFF(pipeline_write), 1, 0, 1,
     NULL, NULL, NULL,
     "write the previous sub-group back while one is updated (on by default here; DeepSpeed's "
     "default is off)"},
    {"zero_optimization.offload_optimizer.overlap_step", K_BOOL, OFF(overlap_step), 1, 0, 1, NULL,
     NULL, NULL,
     "zero's own: with device nvme at stage 3, gradient_clipping 0 and fp32 or bf16, each unit's "
     "optimizer update runs in the last micro-step's backward once its gradient is final, so "
     "the swap I/O overlaps backward (the same bits); an inf/NaN gradient then fails the step "
     "instead of skipping it (false: skipped); ignored elsewhere (logged)"},
    {"zero_optimization.offload_param.device", K_STR, OFF(offload_param), 0, 0, 0, "none",
     "none|cpu|nvme", NULL,
     "stage 3: where the parameter shards live: none or cpu (this process's memory), nvme (one "
     "swap file per unit and rank under nvme_path, read before each all-gather and written back "
     "after the step; the results are the same bits); another stage with nvme is an error"},
    {"zero_optimization.offload_param.nvme_path", K_STR, OFF(param_nvme_path), 0, 0, 0, "", NULL,
     NULL,
     "existing directory of the parameter swap files (device nvme): one per unit and rank, "
     "preallocated at start, deleted at exit"},
    {"zero_optimization.offload_param.buffer_count", K_INT, OFF(param_buffer_count), 5, 1, 64, NULL,
     NULL, NULL,
     "parameter shards held in memory at once (RAM: buffer_count x the largest unit's shard)"},
    {"aio.block_size", K_INT, OFF(aio_block_size), 1048576, 4096, 268435456, NULL, NULL, NULL,
     "bytes per swap-file I/O piece (a multiple of 4096); `zero bench io --tune` suggests one"},
    {"aio.queue_depth", K_INT, OFF(aio_queue_depth), 8, 1, 4096, NULL, NULL, NULL,
     "swap-file I/O pieces in flight (io_uring)"},
    {"aio.intra_op_parallelism", K_INT, OFF(aio_threads), 1, 1, 256, NULL, NULL, NULL,
     "threads of the pread/pwrite pool that replaces io_uring where it is unavailable"},
    {"aio.single_submit", K_BOOL, OFF(aio_single_submit), 0, 0, 1, NULL, NULL, NULL,
     "submit swap-file I/O pieces one by one instead of in batches"},
    {"aio.overlap_events", K_BOOL, OFF(aio_overlap_events), 1, 0, 1, NULL, NULL, NULL,
     "refill the I/O queue as each piece completes (false: once the whole batch has)"},
    {"train.steps", K_INT, OFF(steps), 600, 0, INT_MAX, NULL, NULL, "--steps", "optimizer steps"},
    {"train.eval_interval", K_INT, OFF(eval_interval), 100, 0, INT_MAX, NULL, NULL, NULL,
     "steps between validation losses (0: only at the end)"},
    {"train.eval_batches", K_INT, OFF(eval_batches), 8, 1, 1 << 20, NULL, NULL, NULL,
     "micro-batches per rank per validation loss"},
    {"train.samples", K_INT, OFF(samples), 2, 0, 100, NULL, NULL, NULL, "text samples at the end"},
    {"train.sample_tokens", K_INT, OFF(sample_tokens), 200, 1, 1 << 20, NULL, NULL, NULL,
     "tokens per sample"},
    {"train.temperature", K_FLOAT, OFF(temperature), 0.8, 0, 100, NULL, NULL, NULL,
     "sampling temperature (0: greedy)"},
    {"train.top_k", K_INT, OFF(top_k), 40, 0, 16777216, NULL, NULL, NULL,
     "sample among the k likeliest tokens (0: all)"},
    {"train.prompt", K_STR, OFF(prompt), 0, 0, 0, "", NULL, NULL,
     "sample prompt (encoded with data.tokenizer when set, else its bytes for a model of at "
     "least 256 tokens; empty: the tokenizer's end-of-text token, else a newline)"},
    {"train.threads", K_INT, OFF(threads), 0, 0, 4096, NULL, NULL, "--threads",
     "compute threads per rank (0: cores / ranks, at least 1)"},
    {"train.ranks", K_INT, OFF(ranks), 1, 1, 4096, NULL, NULL, "--ranks",
     "ranks of the threads backend (under mpirun: the MPI job's size); every rank's buffers grow "
     "with the rank count (each unit is padded to 16 x ranks elements), so a 1-layer model needs "
     "1.4 GiB at 1024 ranks, 5.3 GiB at 2048 and about 20 GiB at 4096 (docs/benchmarks.md); the "
     "memory check refuses what does not fit"},
    {"train.ranks_per_node", K_INT, OFF(ranks_per_node), 0, 0, 4096, NULL, NULL, "--ranks-per-node",
     "threads backend: the ranks stand for nodes of this many consecutive ranks (0: one node), and "
     "the report counts the bytes that cross between nodes; under MPI the nodes are the MPI "
     "library's (setting it there is an error)"},
    {"train.backend", K_STR, OFF(backend), 0, 0, 0, "auto", "auto|threads|mpi", "--backend",
     "auto: MPI when started by mpirun, else threads"},
    {"train.peak_gflops", K_DOUBLE, OFF(peak_gflops), 0, 0, 1e9, NULL, NULL, "--peak",
     "the run's matmul peak in GFLOP/s (all ranks), of the dtype its GEMMs run in (bf16 for bf16 "
     "on a bf16 path, else fp32), the MFU's and the roofline's denominator; 0: `zero plan "
     "--calibrate`'s file when it fits the run, else measured at start-up"},
    {"train.timeout_s", K_DOUBLE, OFF(timeout_s), 300, 0.001, 1e9, NULL, NULL, "--timeout",
     "seconds a collective waits for the other ranks before the run fails naming the missing "
     "ones (under MPI the job is then aborted); not set: $ZERO_TIMEOUT, else 300"},
    {"train.save_dir", K_STR, OFF(save_dir), 0, 0, 0, "", NULL, "--save-dir",
     "checkpoint directory (empty: no checkpoints); a checkpoint is always saved at the end"},
    {"train.save_every", K_INT, OFF(save_every), 0, 0, INT_MAX, NULL, NULL, "--save-every",
     "steps between checkpoints (0: only at the end)"},
    {"train.keep_last", K_INT, OFF(keep_last), 0, 0, INT_MAX, NULL, NULL, "--keep-last",
     "keep only this run's N most recent checkpoints; never deletes another run's (0: keep all)"},
    {"train.overwrite", K_BOOL, OFF(overwrite), 0, 0, 1, NULL, NULL, NULL,
     "a fresh run may save into a save_dir holding other checkpoints, replacing those of its "
     "steps and `latest` (--overwrite); false: refused, naming them"},
    {"train.resume", K_STR, OFF(resume), 0, 0, 0, "", NULL, "--resume",
     "checkpoint to continue from: a checkpoint or save directory, or latest (train.save_dir's); "
     "weights, optimizer, step, data position and RNG states"},
    {"train.init_from", K_STR, OFF(init_from), 0, 0, 0, "", NULL, "--init-from",
     "initialise the weights from a safetensors file with Hugging Face GPT-2 names"},
    {"train.replica_check_every", K_INT, OFF(replica_check_every), 100, 0, INT_MAX, NULL, NULL,
     NULL,
     "steps between checks that the ranks' replicated parameters are the same bits (0: never); "
     "a rank that drifted stops the run, named with the step"},
    {"train.memory_check", K_BOOL, OFF(memory_check), 1, 0, 1, NULL, NULL, NULL,
     "refuse to start when the estimated memory exceeds what the machine (or the memory "
     "cgroup) has available, naming the changes that would fit (false: --ignore-memory-check)"},
    {"autotuning.enabled", K_BOOL, OFF(tune_enabled), 0, 0, 1, NULL, NULL, NULL,
     "DeepSpeed's switch; `zero tune` tunes either way and `zero train` only with "
     "autotuning.online"},
    {"autotuning.metric", K_STR, OFF(tune_metric), 0, 0, 0, "throughput",
     "throughput|latency|flops", NULL,
     "what `zero tune` maximises: tokens/s, FLOP/s, or minus the step time (docs/tune.md)"},
    {"autotuning.fast", K_BOOL, OFF(tune_fast), 1, 0, 1, NULL, NULL, NULL,
     "`zero tune` varies only the stage and micro-batch (false: also offload, buckets, prefetch, "
     "overlap_comm, threads, ranks per process)"},
    {"autotuning.max_train_batch_size", K_INT, OFF(tune_max_batch), 0, 0, INT_MAX, NULL, NULL, NULL,
     "the global batch `zero tune` keeps fixed (0: the config's train_batch_size)"},
    {"autotuning.mp_size", K_INT, OFF(tune_mp_size), 1, 1, 1, NULL, NULL, NULL,
     "model-parallel degree: zero is data parallel only, so 1"},
    {"autotuning.num_tuning_micro_batch_sizes", K_INT, OFF(tune_num_micro), 3, 1, 64, NULL, NULL,
     NULL, "micro-batches `zero tune` tries: the largest that divide the per-rank batch"},
    {"autotuning.tuner_type", K_STR, OFF(tune_tuner), 0, 0, 0, "gridsearch",
     "gridsearch|random|model_based", NULL,
     "trial order: the grid's, shuffled (seed), or fastest first by `zero plan`'s step time"},
    {"autotuning.tuner_early_stopping", K_INT, OFF(tune_early_stopping), 5, 1, INT_MAX, NULL, NULL,
     NULL, "`zero tune` stops after this many trials in a row without a better one"},
    {"autotuning.tuner_num_trials", K_INT, OFF(tune_num_trials), 50, 1, INT_MAX, NULL, NULL, NULL,
     "`zero tune` runs at most this many trials"},
    {"autotuning.online", K_BOOL, OFF(tune_online), 0, 0, 1, NULL, NULL, NULL,
     "`zero train` re-measures during the run and keeps faster bucket / prefetch / overlap_comm "
     "settings, logging each change; the weights stay bitwise those of an untuned run "
     "(--tune-online)"},
    {"autotuning.online_interval", K_INT, OFF(tune_online_interval), 20, 2, INT_MAX, NULL, NULL,
     NULL, "steps per online-tuning window: each setting tried is timed over this many steps"},
    {"tensorboard.enabled", K_BOOL, OFF(tb_enabled), 0, 0, 1, NULL, NULL, NULL,
     "rank 0 writes TensorBoard scalar event files in tensorboard.output_path/job_name: "
     "Train/Samples/train_loss, lr, loss_scale (fp16), grad_norm, tokens_per_s, mfu, val_loss "
     "against global samples (docs/monitor.md)"},
    {"tensorboard.output_path", K_STR, OFF(tb_output_path), 0, 0, 0, "", NULL, NULL,
     "directory of the event files' job directory (empty: the current directory)"},
    {"tensorboard.job_name", K_STR, OFF(tb_job_name), 0, 0, 0, "DeepSpeedJobName", NULL, NULL,
     "the event files' directory under tensorboard.output_path"},
    {"csv_monitor.enabled", K_BOOL, OFF(csv_enabled), 0, 0, 1, NULL, NULL, NULL,
     "rank 0 writes one CSV file per scalar (those of tensorboard.enabled) in "
     "csv_monitor.output_path/job_name, named as DeepSpeed names them "
     "(Train_Samples_train_loss.csv: step,train_loss)"},
    {"csv_monitor.output_path", K_STR, OFF(csv_output_path), 0, 0, 0, "", NULL, NULL,
     "directory of the CSV files' job directory (empty: the current directory)"},
    {"csv_monitor.job_name", K_STR, OFF(csv_job_name), 0, 0, 0, "DeepSpeedJobName", NULL, NULL,
     "the CSV files' directory under csv_monitor.output_path"},
};
#undef OFF
_Static_assert(sizeof keys / sizeof keys[0] <= ZERO_CONFIG_MAX_KEYS, "key_set is too small");

/* Every other key DeepSpeed accepts (deepspeed/runtime/config.py and constants.py, zero/config.py,
 * the optimizer and scheduler params): what zero does with it. Whole subtrees: a section's
 * path covers its keys.
 *   SAME   zero always does what `same` (JSON) says: that value is accepted silently ("auto"
 *          too: Hugging Face fills in DeepSpeed's default); another value warns "ignored: not
 *          supported yet" with the note.
 *   NOOP   accepted silently: it changes nothing zero does (the note says why, in the docs).
 *   EQUIV  zero has the equivalent elsewhere: a note (info) says where, unless disabled.
 *   UNSUP  not supported yet: warns with the note, unless disabled (false, null,
 *          "enabled": false, "device": "none").
 *   ALIAS  another spelling of the table key `note`.
 *   ERROR  DeepSpeed rejects it too: an error naming the key and the note. */
typedef enum { DS_SAME, DS_NOOP, DS_EQUIV, DS_UNSUP, DS_ALIAS, DS_ERROR } ds_kind_t;
typedef struct {
    const char *path;
    ds_kind_t kind;
    const char *same; /* DS_SAME: the value zero implements, as JSON */
    const char *note;
} ds_key_t;

#define ZO "zero_optimization."
static const ds_key_t ds_keys[] = {
    /* optimizer and scheduler params */
    {"optimizer.params.adam_w_mode", DS_SAME, "true",
     "zero's Adam is AdamW (decoupled weight decay); adam_w_mode false (L2 in the gradient) is not "
     "implemented"},
    {"optimizer.params.bias_correction", DS_SAME, "true", "Adam's bias correction is always on"},
    {"optimizer.params.amsgrad", DS_SAME, "false", "AMSGrad is not implemented"},
    {"optimizer.params.torch_adam", DS_NOOP, NULL,
     "a choice of implementation; zero's fused Adam has torch's math"},
    {"optimizer.params.max_grad_norm", DS_ERROR, NULL,
     "DeepSpeed rejects it too (expected the top-level gradient_clipping)"},
    {"optimizer.legacy_fusion", DS_NOOP, NULL, "a choice of implementation"},
    {"scheduler.params.last_batch_iteration", DS_SAME, "-1",
     "a schedule starts at step 0; --resume restores the step"},
    /* precision */
    {"bfloat16", DS_ALIAS, NULL, "bf16"},
    {"fp16.auto_cast", DS_SAME, "false", "inputs are token ids; nothing to cast"},
    {"fp16.fp16_master_weights_and_grads", DS_SAME, "false",
     "master weights and their gradients are always fp32"},
    {"bf16.immediate_grad_update", DS_NOOP, NULL,
     "an option of DeepSpeed's BF16_Optimizer; zero's ZeRO step is the same either way"},
    {"amp", DS_UNSUP, NULL, "use bf16 or fp16 (zero has no Apex AMP)"},
    {"torch_autocast", DS_UNSUP, NULL, "use bf16 or fp16: the whole model computes in that dtype"},
    {"communication_data_type", DS_SAME, "null",
     "gradient collectives run in the compute dtype (bf16.enabled / fp16.enabled)"},
    {"seq_parallel_communication_data_type", DS_NOOP, NULL, "zero has no sequence parallelism"},
    {"prescale_gradients", DS_SAME, "false", "gradients are averaged after the reduce-scatter"},
    {"gradient_predivide_factor", DS_SAME, "1.0",
     "gradients are averaged after the reduce-scatter"},
    {"fp32_reduce_scatter", DS_SAME, "false",
     "gradient collectives run in the compute dtype; data_types.grad_accum_dtype fp32 keeps the "
     "accumulator in fp32"},
    {"sparse_gradients", DS_SAME, "false", "gradients are dense"},
    {"disable_allgather", DS_SAME, "false", "parameters are always all-gathered"},
    {"zero_allow_untested_optimizer", DS_NOOP, NULL, "zero runs its own Adam"},
    {"zero_force_ds_cpu_optimizer", DS_NOOP, NULL, "zero runs its own Adam"},
    {"dataloader_drop_last", DS_NOOP, NULL,
     "zero's sampler draws full batches only (no partial last batch)"},
    {"vocabulary_size", DS_NOOP, NULL, "the vocabulary is model.vocab"},
    /* what zero reports instead */
    {"activation_checkpointing", DS_EQUIV, NULL,
     "honoured as model.activation_checkpointing = true (each block's forward is recomputed in "
     "backward)"},
    {"flops_profiler", DS_EQUIV, NULL,
     "the run report has FLOP/s and MFU (--json-report FILE: flops_per_s, mfu)"},
    {"wall_clock_breakdown", DS_EQUIV, NULL,
     "step and optimizer-step times are in the run report and --metrics FILE (step_s, "
     "optimizer_step_s)"},
    {"memory_breakdown", DS_EQUIV, NULL,
     "the run report has each rank's memory by category beside the ZeRO paper's theory"},
    {"comms_logger", DS_EQUIV, NULL,
     "the run report has each rank's bytes sent per step and per collective"},
    {"wandb", DS_UNSUP, NULL,
     "--metrics FILE writes one JSON line per step; tensorboard and csv_monitor are honoured"},
    {"comet", DS_UNSUP, NULL,
     "--metrics FILE writes one JSON line per step; tensorboard and csv_monitor are honoured"},
    {"monitor_config", DS_UNSUP, NULL, "--metrics FILE writes one JSON line per step"},
    {"dump_state", DS_SAME, "false", "--print-config prints the effective configuration"},
    /* features not there yet */
    {"aio.thread_count", DS_ALIAS, NULL, "aio.intra_op_parallelism"},
    {"aio.use_gds", DS_SAME, "false", "GPUDirect Storage needs a GPU"},
    {"elasticity", DS_UNSUP, NULL, "the world size is --ranks or the MPI job's"},
    {"autotuning.arg_mappings", DS_NOOP, NULL,
     "trials run zero itself: there is no script whose flags need mapping"},
    {"autotuning.start_profile_step", DS_EQUIV, NULL, "zero tune --warmup-steps"},
    {"autotuning.end_profile_step", DS_EQUIV, NULL, "zero tune --trial-steps"},
    {"autotuning.results_dir", DS_EQUIV, NULL, "zero tune --out"},
    {"autotuning.exps_dir", DS_EQUIV, NULL, "zero tune --out"},
    {"autotuning.overwrite", DS_NOOP, NULL, "zero tune rewrites its --out directory's files"},
    {"autotuning.model_info", DS_NOOP, NULL, "zero tune knows the model from the config"},
    {"autotuning.min_train_micro_batch_size_per_gpu", DS_NOOP, NULL,
     "micro-batches divide the per-rank batch (num_tuning_micro_batch_sizes)"},
    {"autotuning.max_train_micro_batch_size_per_gpu", DS_NOOP, NULL,
     "micro-batches divide the per-rank batch (num_tuning_micro_batch_sizes)"},
    {"autotuning.min_train_batch_size", DS_NOOP, NULL, "DeepSpeed never reads it either"},
    {"checkpoint", DS_UNSUP, NULL, "zero's checkpoints: --save-dir, --resume (any world size)"},
    {"load_universal_checkpoint", DS_SAME, "false",
     "zero's checkpoints load at any world size and stage by themselves"},
    {"use_node_local_storage", DS_SAME, "false", "checkpoints go to --save-dir"},
    {"data_efficiency", DS_UNSUP, NULL, ""},
    {"curriculum_learning", DS_UNSUP, NULL, ""},
    {"compression_training", DS_UNSUP, NULL, ""},
    {"quantize_training", DS_UNSUP, NULL, ""},
    {"weight_quantization", DS_UNSUP, NULL, ""},
    {"progressive_layer_drop", DS_UNSUP, NULL, ""},
    {"eigenvalue", DS_UNSUP, NULL, ""},
    {"pipeline", DS_UNSUP, NULL, "zero is data parallel only"},
    {"tensor_parallel", DS_UNSUP, NULL, "zero is data parallel only"},
    {"sequence_parallel_size", DS_SAME, "1", "zero is data parallel only"},
    {"sparse_attention", DS_UNSUP, NULL, ""},
    {"nebula", DS_UNSUP, NULL, ""},
    {"hybrid_engine", DS_UNSUP, NULL, ""},
    {"compile", DS_UNSUP, NULL, "zero is compiled C"},
    {"timers", DS_NOOP, NULL, "the run report times every step"},
    {"graph_harvesting", DS_SAME, "false", ""},
    {"use_data_before_expert_parallelism", DS_SAME, "false", "zero has no experts"},
    {"train_monitor", DS_UNSUP, NULL, "--metrics FILE writes one JSON line per step"},
    /* zero_optimization */
    {ZO "offload_optimizer.pin_memory", DS_NOOP, NULL,
     "the staging buffers are page-aligned memory of this process; pinning matters for GPU "
     "copies"},
    {ZO "offload_optimizer.fast_init", DS_NOOP, NULL,
     "the swap files are made once, when each unit is declared"},
    {ZO "offload_optimizer.ratio", DS_SAME, "1", "every sub-group is updated from the swap files"},
    {ZO "offload_param.buffer_size", DS_NOOP, NULL,
     "each buffer holds the largest unit's shard (DeepSpeed sizes them by the largest parameter)"},
    {ZO "offload_param.max_in_cpu", DS_NOOP, NULL,
     "device cpu keeps every parameter in memory; nvme keeps buffer_count shards"},
    {ZO "offload_param.pin_memory", DS_NOOP, NULL,
     "the buffers are page-aligned memory of this process; pinning matters for GPU copies"},
    {ZO "cpu_offload", DS_NOOP, NULL,
     "DeepSpeed's old name of offload_optimizer {\"device\": \"cpu\"}: the optimizer states "
     "stay in this process's memory, where a CPU build computes anyway"},
    {ZO "cpu_offload_param", DS_SAME, "false",
     "DeepSpeed's old name of offload_param {\"device\": \"cpu\"}: parameters stay in memory; "
     "offload_param {\"device\": \"nvme\"} puts them on disk"},
    {ZO "cpu_offload_use_pin_memory", DS_NOOP, NULL, "only used with offload"},
    {ZO "prefetch_bucket_size", DS_ALIAS, NULL, ZO "stage3_prefetch_bucket_size"},
    {ZO "param_persistence_threshold", DS_ALIAS, NULL, ZO "stage3_param_persistence_threshold"},
    {ZO "max_live_parameters", DS_ALIAS, NULL, ZO "stage3_max_live_parameters"},
    {ZO "max_reuse_distance", DS_ALIAS, NULL, ZO "stage3_max_reuse_distance"},
    {ZO "stage3_model_persistence_threshold", DS_NOOP, NULL,
     "no cap on the total of persistent units: every unit under "
     "stage3_param_persistence_threshold stays gathered"},
    {ZO "model_persistence_threshold", DS_NOOP, NULL,
     "no cap on the total of persistent units: every unit under "
     "stage3_param_persistence_threshold stays gathered"},
    {ZO "stage3_gather_16bit_weights_on_model_save", DS_EQUIV, NULL,
     "checkpoints always hold the full weights; `zero convert CKPT OUT.safetensors --dtype bf16` "
     "writes 16-bit weights"},
    {ZO "gather_16bit_weights_on_model_save", DS_EQUIV, NULL,
     "checkpoints always hold the full weights; `zero convert CKPT OUT.safetensors --dtype bf16` "
     "writes 16-bit weights"},
    {ZO "stage3_gather_fp16_weights_on_model_save", DS_EQUIV, NULL,
     "checkpoints always hold the full weights; `zero convert CKPT OUT.safetensors --dtype fp16` "
     "writes 16-bit weights"},
    {ZO "round_robin_gradients", DS_SAME, "false", "gradients are reduce-scattered in unit order"},
    {ZO "allgather_partitions", DS_SAME, "true", "parameters are always all-gathered"},
    {ZO "ignore_unused_parameters", DS_NOOP, NULL, "every parameter of the model gets a gradient"},
    {ZO "elastic_checkpoint", DS_SAME, "false", "checkpoints load at any world size by themselves"},
    {ZO "load_from_fp32_weights", DS_SAME, "true",
     "a resume restores the fp32 master weights from the checkpoint"},
    {ZO "zero_quantized_nontrainable_weights", DS_SAME, "false",
     "every parameter is trained, in the compute dtype"},
    {ZO "mics_shard_size", DS_SAME, "-1", "parameters are sharded over all ranks (no MiCS)"},
    {ZO "mics_hierarchical_params_gather", DS_SAME, "false", "no MiCS"},
    {ZO "memory_efficient_linear", DS_NOOP, NULL,
     "a detail of DeepSpeed's PyTorch linear layer; zero's model has its own"},
    {ZO "use_multi_rank_bucket_allreduce", DS_NOOP, NULL,
     "gradients are reduce-scattered, never all-reduced"},
    {ZO "legacy_stage1", DS_SAME, "false", "DeepSpeed removed it"},
    {ZO "stage3_module_granularity_threshold", DS_SAME, "0",
     "each model unit (a transformer block) is fetched whole"},
    {ZO "module_granularity_threshold", DS_SAME, "0",
     "each model unit (a transformer block) is fetched whole"},
    {ZO "stage3_use_all_reduce_for_fetch_params", DS_SAME, "false",
     "parameters are fetched with all-gathers"},
    {ZO "use_all_reduce_for_fetch_params", DS_SAME, "false",
     "parameters are fetched with all-gathers"},
    {ZO "pipeline_loading_checkpoint", DS_NOOP, NULL, "each rank reads its own slices"},
    {ZO "override_module_apply", DS_NOOP, NULL, "a PyTorch hook; nothing to override"},
    {ZO "log_trace_cache_warnings", DS_NOOP, NULL, "zero records no module trace"},
    {ZO "fp32_reduce_scatter", DS_SAME, "false",
     "gradient collectives run in the compute dtype; data_types.grad_accum_dtype fp32 keeps the "
     "accumulator in fp32"},
};
#undef ZO
static const char *const ds_kind_names[] = {"same",  "noop", "equivalent", "not supported yet",
                                            "alias", "error"};
_Static_assert(ZERO_ARRAY_LEN(ds_kind_names) == DS_ERROR + 1, "ds kind names");

static int quiet;
void zero__train_config_quiet(int on) { quiet = on; }

/* Every warning and note of the reader goes through here (muted by zero__train_config_quiet). */
static void note(zero_log_level_t level, const char *fmt, ...) ZERO_PRINTF(2, 3);
static void note(zero_log_level_t level, const char *fmt, ...) {
    if (quiet) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    zero__log(level, -1, 0, "%s", msg);
}

static void *field(zero_train_config_t *cfg, const cfg_key_t *k) { return (char *)cfg + k->offset; }
static const void *cfield(const zero_train_config_t *cfg, const cfg_key_t *k) {
    return (const char *)cfg + k->offset;
}
/* Capacity of a K_STR field: the short enumerations are small arrays, the rest paths. */
static size_t str_cap(const cfg_key_t *k) {
    size_t o = k->offset;
    if (o == offsetof(zero_train_config_t, optimizer) ||
        o == offsetof(zero_train_config_t, scheduler))
        return sizeof((zero_train_config_t *)0)->optimizer;
    if (o == offsetof(zero_train_config_t, warmup_type) ||
        o == offsetof(zero_train_config_t, backend) ||
        o == offsetof(zero_train_config_t, grad_accum_dtype) ||
        o == offsetof(zero_train_config_t, state_dtype) ||
        o == offsetof(zero_train_config_t, fp8_format) ||
        o == offsetof(zero_train_config_t, fp8_recipe) ||
        o == offsetof(zero_train_config_t, data_order) ||
        o == offsetof(zero_train_config_t, tune_metric) ||
        o == offsetof(zero_train_config_t, tune_tuner))
        return sizeof((zero_train_config_t *)0)->backend;
    return ZERO_CONFIG_STR_MAX;
}
static void mark_set(zero_train_config_t *cfg, const cfg_key_t *k) { cfg->key_set[k - keys] = 1; }

/* fp8.format and fp8.recipe (strings) into the model's config, whenever either changes. */
static void fp8_sync(zero_train_config_t *cfg) {
    cfg->model.fp8.hybrid = !strcmp(cfg->fp8_format, "hybrid");
    cfg->model.fp8.recipe =
        !strcmp(cfg->fp8_recipe, "blockwise") ? ZERO_FP8_BLOCKWISE : ZERO_FP8_DELAYED;
}

void zero__train_config_default(zero_train_config_t *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        const cfg_key_t *k = &keys[i];
        void *f = field(cfg, k);
        switch (k->type) {
        case K_INT:
        case K_BOOL: *(int *)f = (int)k->def; break;
        case K_I64: *(int64_t *)f = (int64_t)k->def; break;
        case K_FLOAT: *(float *)f = (float)k->def; break;
        case K_DOUBLE: *(double *)f = k->def; break;
        case K_STR: snprintf((char *)f, str_cap(k), "%s", k->def_str); break;
        case K_PAIR: break;
        default: ZERO_ASSERT(0);
        }
    }
    cfg->beta[0] = 0.9f;
    cfg->beta[1] = 0.999f;
    fp8_sync(cfg);
    /* cfg->loss_scaler holds the table's fp16.* defaults, which are the scaler's own
     * (zero_loss_scaler_params_default; test_config compares them). Not assigned from it: a
     * struct copy may leave padding bytes that the config's byte comparisons would see. */
}

/* fp16.* keys are the loss scaler's: they go through its setter (one table of DeepSpeed names,
 * ranges and messages). */
static int is_scaler_key(const cfg_key_t *k) {
    return !strncmp(k->name, "fp16.", 5) && strcmp(k->name, "fp16.enabled");
}

static const cfg_key_t *find_key(const char *name) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++)
        if (!strcmp(keys[i].name, name)) return &keys[i];
    return NULL;
}

zero_status_t zero__train_config_mark_cli(zero_train_config_t *cfg, const char *name) {
    const cfg_key_t *k = find_key(name);
    if (!k)
        return zero__error(ZERO_ERR_CONFIG,
                           "unknown configuration key '%s' (see `zero train --help-config`)", name);
    cfg->key_cli[k - keys] = 1;
    return ZERO_OK;
}

int zero__train_config_is_set(const zero_train_config_t *cfg, const char *name) {
    const cfg_key_t *k = find_key(name);
    return k && cfg->key_set[k - keys];
}

const char *zero__train_config_flag_key(const char *flag) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++)
        if (keys[i].flag && !strcmp(keys[i].flag, flag)) return keys[i].name;
    return NULL;
}

/* True if some key lives under `prefix` (an object path). */
static int is_section(const char *prefix) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++)
        if (!strncmp(keys[i].name, prefix, n) && keys[i].name[n] == '.') return 1;
    return 0;
}

static const ds_key_t *find_ds(const char *path) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(ds_keys); i++)
        if (!strcmp(ds_keys[i].path, path)) return &ds_keys[i];
    return NULL;
}

/* A DeepSpeed block or value that asks for nothing: false, null, {"enabled": false} or an offload
 * block with device "none". */
static int ds_disabled(const cJSON *it) {
    if (cJSON_IsFalse(it) || cJSON_IsNull(it)) return 1;
    if (!cJSON_IsObject(it)) return 0;
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(it, "enabled");
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(it, "device");
    return cJSON_IsFalse(en) || (cJSON_IsString(dev) && !strcasecmp(dev->valuestring, "none")) ||
           cJSON_IsNull(dev);
}

static int is_auto(const cJSON *it) {
    return cJSON_IsString(it) && !strcmp(it->valuestring, "auto");
}

static zero_status_t range_error(const char *src, const cfg_key_t *k, double v) {
    return zero__error(ZERO_ERR_CONFIG, "%s: %s = %g is out of range (expected %s in [%g, %g])",
                       src, k->name, v, type_names[k->type], k->min, k->max);
}

static zero_status_t set_number(zero_train_config_t *cfg, const cfg_key_t *k, double v, int idx,
                                const char *src) {
    if (!isfinite(v) || v < k->min || v > k->max) return range_error(src, k, v);
    if (is_scaler_key(k)) {
        zero_status_t st = zero_loss_scaler_params_set(&cfg->loss_scaler, k->name + 5, v);
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zero_last_error());
            return zero__error(st, "%s: %s", src, msg);
        }
        mark_set(cfg, k);
        return ZERO_OK;
    }
    void *f = field(cfg, k);
    switch (k->type) {
    case K_INT:
    case K_I64:
        if (v != floor(v))
            return zero__error(ZERO_ERR_CONFIG,
                               "%s: %s = %g is not an integer (expected an "
                               "integer in [%g, %g])",
                               src, k->name, v, k->min, k->max);
        if (k->type == K_INT)
            *(int *)f = (int)v;
        else
            *(int64_t *)f = (int64_t)v;
        break;
    case K_BOOL: *(int *)f = v != 0.0; break;
    case K_FLOAT: *(float *)f = (float)v; break;
    case K_DOUBLE: *(double *)f = v; break;
    case K_PAIR: ((float *)f)[idx] = (float)v; break;
    default: ZERO_ASSERT(0);
    }
    mark_set(cfg, k);
    return ZERO_OK;
}

static zero_status_t set_string(zero_train_config_t *cfg, const cfg_key_t *k, const char *v,
                                const char *src) {
    size_t cap = str_cap(k);
    if (k->allowed) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", k->allowed);
        for (char *save = NULL, *tok = strtok_r(buf, "|", &save); tok;
             tok = strtok_r(NULL, "|", &save))
            if (!strcasecmp(tok, v)) {
                /* store the canonical spelling */
                snprintf((char *)field(cfg, k), cap, "%s", tok);
                mark_set(cfg, k);
                fp8_sync(cfg);
                return ZERO_OK;
            }
        return zero__error(ZERO_ERR_CONFIG,
                           "%s: %s = \"%s\" is not allowed (expected one "
                           "of %s)",
                           src, k->name, v, k->allowed);
    }
    if (strlen(v) >= cap)
        return zero__error(ZERO_ERR_CONFIG, "%s: %s is %zu characters long (expected < %zu)", src,
                           k->name, strlen(v), cap);
    snprintf((char *)field(cfg, k), cap, "%s", v);
    mark_set(cfg, k);
    return ZERO_OK;
}

static zero_status_t type_error(const char *src, const cfg_key_t *k, const cJSON *item) {
    char *text = cJSON_PrintUnformatted(item);
    zero_status_t st = zero__error(ZERO_ERR_CONFIG, "%s: %s = %s has the wrong type (expected %s)",
                                   src, k->name, text ? text : "?", type_names[k->type]);
    cJSON_free(text);
    return st;
}

static zero_status_t apply_item(zero_train_config_t *cfg, const cfg_key_t *k, const cJSON *item,
                                const char *src) {
    /* Hugging Face's DeepSpeed integration writes "auto" for values it fills in itself. */
    if (k->type != K_STR && is_auto(item)) {
        /* resolved, and the value chosen said, by zero__train_config_check (resolve_auto) */
        cfg->key_auto[k - keys] = 1;
        return ZERO_OK;
    }
    switch (k->type) {
    case K_INT:
    case K_I64:
    case K_FLOAT:
    case K_DOUBLE:
        if (!cJSON_IsNumber(item)) return type_error(src, k, item);
        return set_number(cfg, k, item->valuedouble, 0, src);
    case K_BOOL:
        if (!cJSON_IsBool(item)) return type_error(src, k, item);
        return set_number(cfg, k, cJSON_IsTrue(item) ? 1.0 : 0.0, 0, src);
    case K_STR:
        if (!cJSON_IsString(item)) return type_error(src, k, item);
        return set_string(cfg, k, item->valuestring, src);
    case K_PAIR: {
        if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2) return type_error(src, k, item);
        for (int i = 0; i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(item, i);
            if (!cJSON_IsNumber(e)) return type_error(src, k, item);
            zero_status_t st = set_number(cfg, k, e->valuedouble, i, src);
            if (st) return st;
        }
        return ZERO_OK;
    }
    default: ZERO_ASSERT(0);
    }
    return ZERO_ERR_INTERNAL;
}

static zero_status_t walk(zero_train_config_t *cfg, const cJSON *obj, const char *prefix,
                          const char *src);

/* DeepSpeed's activation_checkpointing block: zero recomputes each transformer block's forward
 * in backward (model.activation_checkpointing) unless the model section says otherwise. */
static void activation_block(zero_train_config_t *cfg, const cJSON *it, const char *src) {
    const cfg_key_t *k = find_key("model.activation_checkpointing");
    if (!cfg->key_set[k - keys] && !cfg->key_cli[k - keys]) {
        cfg->checkpointing = 1;
        mark_set(cfg, k);
        note(ZERO_LOG_INFO,
             "%s: 'activation_checkpointing' honoured as model.activation_checkpointing = true "
             "(each block's forward is recomputed in backward)",
             src);
    }
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(it, "cpu_checkpointing");
    if (cJSON_IsTrue(cpu))
        note(ZERO_LOG_WARN,
             "%s: 'activation_checkpointing.cpu_checkpointing' ignored: not supported yet "
             "(checkpointed activations stay in memory)",
             src);
    const cJSON *part = cJSON_GetObjectItemCaseSensitive(it, "partition_activations");
    if (cJSON_IsTrue(part))
        note(ZERO_LOG_INFO,
             "%s: 'activation_checkpointing.partition_activations' has no effect: it splits "
             "activations over model-parallel ranks, and zero is data parallel only",
             src);
}

/* A key of DeepSpeed's that is not in the key table (ds_keys). */
static zero_status_t apply_ds(zero_train_config_t *cfg, const ds_key_t *d, const cJSON *it,
                              const char *path, const char *src) {
    switch (d->kind) {
    case DS_ALIAS: {
        const cfg_key_t *k = find_key(d->note);
        note(ZERO_LOG_INFO, "%s: '%s' is DeepSpeed's other name of '%s': read as %s", src, path,
             d->note, d->note);
        if (k) return cfg->key_cli[k - keys] ? ZERO_OK : apply_item(cfg, k, it, src);
        if (!cJSON_IsObject(it)) {
            char *text = cJSON_PrintUnformatted(it);
            zero_status_t st =
                zero__error(ZERO_ERR_CONFIG, "%s: %s = %s has the wrong type (expected an object)",
                            src, path, text ? text : "?");
            cJSON_free(text);
            return st;
        }
        return walk(cfg, it, d->note, src);
    }
    case DS_SAME: {
        cJSON *same = cJSON_Parse(d->same);
        int ok = is_auto(it) || (same && cJSON_Compare(it, same, 1));
        cJSON_Delete(same);
        if (!ok) {
            char *text = cJSON_PrintUnformatted(it);
            note(ZERO_LOG_WARN, "%s: '%s' = %s ignored: not supported yet (zero does %s; %s)", src,
                 path, text ? text : "?", d->same, d->note);
            cJSON_free(text);
        }
        return ZERO_OK;
    }
    case DS_NOOP: return ZERO_OK;
    case DS_EQUIV:
        if (ds_disabled(it)) return ZERO_OK;
        if (!strcmp(path, "activation_checkpointing") && cJSON_IsObject(it))
            activation_block(cfg, it, src);
        else
            note(ZERO_LOG_INFO, "%s: '%s': %s", src, path, d->note);
        return ZERO_OK;
    case DS_UNSUP:
        if (!ds_disabled(it))
            note(ZERO_LOG_WARN, "%s: '%s' ignored: not supported yet%s%s%s", src, path,
                 d->note[0] ? " (" : "", d->note, d->note[0] ? ")" : "");
        return ZERO_OK;
    case DS_ERROR:
        return zero__error(ZERO_ERR_CONFIG, "%s: '%s' is not allowed: %s", src, path, d->note);
    }
    return ZERO_ERR_INTERNAL;
}

static zero_status_t walk(zero_train_config_t *cfg, const cJSON *obj, const char *prefix,
                          const char *src) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        char path[256];
        if (prefix[0])
            snprintf(path, sizeof path, "%s.%s", prefix, it->string);
        else
            snprintf(path, sizeof path, "%s", it->string);
        const cfg_key_t *k = find_key(path);
        const ds_key_t *d = k ? NULL : find_ds(path);
        if (k && cfg->key_cli[k - keys]) {
            continue; /* the command line sets it: the flag wins, the file's value is not read */
        } else if (k) {
            zero_status_t st = apply_item(cfg, k, it, src);
            if (st) return st;
        } else if (d && d->kind == DS_ALIAS && !find_key(d->note) && !prefix[0] &&
                   cJSON_GetObjectItemCaseSensitive(obj, d->note)) {
            /* DeepSpeed reads "bf16" first and then, only if it is absent, "bfloat16" */
            note(ZERO_LOG_WARN, "%s: '%s' ignored: '%s' is given too, and DeepSpeed reads that one",
                 src, path, d->note);
        } else if (d) {
            zero_status_t st = apply_ds(cfg, d, it, path, src);
            if (st) return st;
        } else if (cJSON_IsObject(it) && is_section(path)) {
            zero_status_t st = walk(cfg, it, path, src);
            if (st) return st;
        } else if (!strcmp(path, "zero_optimization.zeropp_loco_param") && cJSON_IsNull(it)) {
            continue; /* DeepSpeed's "off" */
        } else if (!strcmp(path, "zero_optimization") && cJSON_IsBool(it)) {
            /* DeepSpeed's first releases (and some of its documentation examples) wrote
             * "zero_optimization": true for what is now stage 1. */
            cfg->stage = cJSON_IsTrue(it) ? 1 : 0;
            mark_set(cfg, find_key("zero_optimization.stage"));
            note(ZERO_LOG_WARN,
                 "%s: zero_optimization = %s is DeepSpeed's old form: stage %d used (write "
                 "{\"stage\": %d})",
                 src, cJSON_IsTrue(it) ? "true" : "false", cfg->stage, cfg->stage);
        } else if (is_section(path)) {
            char *text = cJSON_PrintUnformatted(it);
            zero_status_t st =
                zero__error(ZERO_ERR_CONFIG, "%s: %s = %s has the wrong type (expected an object)",
                            src, path, text ? text : "?");
            cJSON_free(text);
            return st;
        } else {
            note(ZERO_LOG_WARN, "%s: unknown key '%s' ignored", src, path);
        }
    }
    return ZERO_OK;
}

/* cJSON keeps one of two equal keys of an object silently; DeepSpeed (json.load with a hook)
 * rejects them, and so do we: a pass over text that cJSON already accepted as JSON, tracking the
 * objects open, the keys each holds so far and their lines. Depth beyond 64 is not checked. */
typedef struct {
    const char *s;
    size_t n;
    int line;
} jkey_t;
typedef struct {
    int is_obj, expect_key;
    size_t first; /* this object's keys: keys[first..] */
    const char *name;
    size_t name_n;
} jframe_t;

static zero_status_t find_duplicate(const char *json, const char *src) {
    enum { MAX_DEPTH = 64 };
    jframe_t fr[MAX_DEPTH];
    int depth = 0, line = 1;
    jkey_t *ks = NULL;
    size_t nk = 0, capk = 0;
    const char *last = NULL;
    size_t last_n = 0;
    zero_status_t st = ZERO_OK;
    for (const char *p = json; *p && !st; p++) {
        char c = *p;
        if (c == '\n') {
            line++;
        } else if (c == '"') {
            const char *b = ++p;
            while (*p && *p != '"') p += (*p == '\\' && p[1]) ? 2 : 1;
            size_t n = (size_t)(p - b);
            if (!*p) break;
            jframe_t *f = depth > 0 && depth <= MAX_DEPTH ? &fr[depth - 1] : NULL;
            if (!f || !f->is_obj || !f->expect_key) continue;
            f->expect_key = 0;
            last = b;
            last_n = n;
            for (size_t i = f->first; i < nk; i++) {
                if (ks[i].n != n || memcmp(ks[i].s, b, n)) continue;
                char path[512];
                size_t len = 0;
                path[0] = 0;
                for (int d = 1; d < depth && len < sizeof path; d++)
                    len += (size_t)snprintf(path + len, sizeof path - len, "%.*s.",
                                            (int)fr[d].name_n, fr[d].name ? fr[d].name : "[]");
                if (len < sizeof path) snprintf(path + len, sizeof path - len, "%.*s", (int)n, b);
                st = zero__error(ZERO_ERR_CONFIG,
                                 "%s:%d: duplicate key '%s' (first at line %d; expected each key "
                                 "once: JSON readers keep only one of the two, DeepSpeed rejects "
                                 "them)",
                                 src, line, path, ks[i].line);
                break;
            }
            if (st) break;
            if (nk == capk) {
                capk = capk ? 2 * capk : 64;
                jkey_t *nks = realloc(ks, capk * sizeof *ks);
                if (!nks) {
                    st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory", src);
                    break;
                }
                ks = nks;
            }
            ks[nk++] = (jkey_t){b, n, line};
        } else if (c == '{' || c == '[') {
            if (depth < MAX_DEPTH) {
                jframe_t *parent = depth > 0 ? &fr[depth - 1] : NULL;
                int named = parent && parent->is_obj;
                fr[depth] =
                    (jframe_t){c == '{', c == '{', nk, named ? last : NULL, named ? last_n : 2};
            }
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
            if (depth < MAX_DEPTH && depth >= 0) nk = fr[depth].first;
        } else if (c == ',') {
            if (depth > 0 && depth <= MAX_DEPTH && fr[depth - 1].is_obj)
                fr[depth - 1].expect_key = 1;
        }
    }
    free(ks);
    return st;
}

zero_status_t zero__train_config_parse(zero_train_config_t *cfg, const char *json,
                                       const char *name) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        const char *at = end ? end : cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *p = json; at && p < at && *p; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        return zero__error(ZERO_ERR_CONFIG,
                           "%s:%d:%d: JSON syntax error near '%.20s' (expected a valid JSON "
                           "object)",
                           name, line, col, at && *at ? at : "end of file");
    }
    zero_status_t st = find_duplicate(json, name);
    if (!st && !cJSON_IsObject(root))
        st = zero__error(ZERO_ERR_CONFIG,
                         "%s: the top level is not a JSON object (expected "
                         "{...})",
                         name);
    if (!st) st = walk(cfg, root, "", name);
    cJSON_Delete(root);
    return st;
}

zero_status_t zero__train_config_load(zero_train_config_t *cfg, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return zero__error(ZERO_ERR_IO, "cannot open config file '%s': %s (expected a JSON file)",
                           path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *nt = realloc(text, cap);
            if (!nt) {
                free(text);
                fclose(f);
                return zero__error(ZERO_ERR_OUT_OF_MEMORY, "cannot read config '%s'", path);
            }
            text = nt;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        return zero__error(ZERO_ERR_IO, "cannot read config file '%s'", path);
    }
    text[len] = 0;
    zero_status_t st = zero__train_config_parse(cfg, text, path);
    free(text);
    return st;
}

zero_status_t zero__train_config_set(zero_train_config_t *cfg, const char *name,
                                     const char *value) {
    const cfg_key_t *k = find_key(name);
    if (!k)
        return zero__error(ZERO_ERR_CONFIG,
                           "unknown configuration key '%s' (see `zero train --help-config`)", name);
    if (k->type == K_STR) return set_string(cfg, k, value, "command line");
    if (k->type == K_BOOL) {
        if (!strcmp(value, "true") || !strcmp(value, "1"))
            return set_number(cfg, k, 1, 0, "command line");
        if (!strcmp(value, "false") || !strcmp(value, "0"))
            return set_number(cfg, k, 0, 0, "command line");
        return zero__error(ZERO_ERR_CONFIG,
                           "command line: %s = '%s' is not a boolean (expected true or false)",
                           name, value);
    }
    if (k->type == K_PAIR) {
        char *end;
        double a = strtod(value, &end);
        if (*end != ',')
            return zero__error(ZERO_ERR_CONFIG,
                               "command line: %s = '%s' (expected two numbers: a,b)", name, value);
        double b = strtod(end + 1, &end);
        if (*end)
            return zero__error(ZERO_ERR_CONFIG,
                               "command line: %s = '%s' (expected two numbers: a,b)", name, value);
        zero_status_t st = set_number(cfg, k, a, 0, "command line");
        return st ? st : set_number(cfg, k, b, 1, "command line");
    }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || errno)
        return zero__error(ZERO_ERR_CONFIG, "command line: %s = '%s' is not a number (expected %s)",
                           name, value, type_names[k->type]);
    return set_number(cfg, k, v, 0, "command line");
}

static void print_value(const zero_train_config_t *cfg, const cfg_key_t *k, FILE *out);

/* "auto" (Hugging Face's placeholder for values its integration fills in). Where Hugging Face
 * derives the value from something zero knows, zero derives it the same way: warmup_max_lr from
 * optimizer.params.lr, the stage-3 sizes from model.dim (hidden_size), the batch sizes from each
 * other and the world size, total_num_steps from train.steps. Elsewhere "auto" means what an
 * absent key means (DeepSpeed's default, as docs/config.md lists). */
static void auto_derive(zero_train_config_t *cfg) {
    int64_t d = cfg->model.dim;
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        if (!cfg->key_auto[i]) continue;
        const char *n = keys[i].name;
        if (!strcmp(n, "scheduler.params.warmup_max_lr"))
            cfg->warmup_max_lr = cfg->lr;
        else if (!strcmp(n, "zero_optimization.reduce_bucket_size"))
            cfg->reduce_bucket_elems = d * d;
        else if (!strcmp(n, "zero_optimization.stage3_prefetch_bucket_size"))
            cfg->prefetch_bucket_elems = (int64_t)(0.9 * (double)(d * d));
        else if (!strcmp(n, "zero_optimization.stage3_param_persistence_threshold"))
            cfg->persistence_threshold_elems = 10 * d;
    }
}

static void auto_report(zero_train_config_t *cfg) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        if (!cfg->key_auto[i]) continue;
        const char *n = keys[i].name, *why = "the value when the key is absent";
        char val[128] = "?";
        FILE *m = fmemopen(val, sizeof val, "w");
        if (m) {
            print_value(cfg, &keys[i], m);
            fclose(m);
        }
        if (!strcmp(n, "scheduler.params.warmup_max_lr"))
            why = "optimizer.params.lr, as Hugging Face fills both from one learning rate";
        else if (!strcmp(n, "zero_optimization.reduce_bucket_size"))
            why = "model.dim^2, as Hugging Face fills it from hidden_size";
        else if (!strcmp(n, "zero_optimization.stage3_prefetch_bucket_size"))
            why = "0.9 x model.dim^2, as Hugging Face fills it from hidden_size";
        else if (!strcmp(n, "zero_optimization.stage3_param_persistence_threshold"))
            why = "10 x model.dim, as Hugging Face fills it from hidden_size";
        else if (!strcmp(n, "scheduler.params.total_num_steps")) {
            why = "0: the decay ends at train.steps";
        } else if (!strcmp(n, "train_batch_size") || !strcmp(n, "gradient_accumulation_steps") ||
                   !strcmp(n, "train_micro_batch_size_per_gpu"))
            why = "DeepSpeed's rule train_batch_size = micro x accumulation x world size, with "
                  "the absent ones at their defaults";
        note(ZERO_LOG_INFO, "%s = \"auto\": %s chosen (%s)", n, val, why);
        cfg->key_auto[i] = 0;
    }
}

/* train.timeout_s: the flag and the config file (which set the key) win over $ZERO_TIMEOUT, which
 * wins over the default; a job-wide default can so live in the environment of every rank. */
static zero_status_t timeout_from_env(zero_train_config_t *cfg) {
    const char *env = getenv("ZERO_TIMEOUT");
    if (zero__train_config_is_set(cfg, "train.timeout_s") || !env || !*env) return ZERO_OK;
    char *end;
    errno = 0;
    double v = strtod(env, &end);
    if (end == env || *end || errno || !isfinite(v) || v < 0.001 || v > 1e9)
        return zero__error(ZERO_ERR_CONFIG,
                           "environment: ZERO_TIMEOUT = '%s' is not a timeout (expected a number "
                           "of seconds in [0.001, 1e+09], e.g. 60)",
                           env);
    cfg->timeout_s = v;
    return ZERO_OK;
}

zero_status_t zero__train_config_check(zero_train_config_t *cfg, int world) {
    zero_status_t st = zero__gpt_config_check(&cfg->model);
    if (st) return st;
    auto_derive(cfg);
    /* DeepSpeed's absent overlap_comm means true at stage 3 and false below it. */
    if (!zero__train_config_is_set(cfg, "zero_optimization.overlap_comm"))
        cfg->overlap_comm = cfg->stage == 3;
    if (world < 1)
        return zero__error(ZERO_ERR_CONFIG, "world size %d is invalid (expected >= 1 ranks)",
                           world);
    if (cfg->model.moe.experts > 0 && world % cfg->model.moe.ep_size != 0)
        return zero__error(ZERO_ERR_CONFIG,
                           "model.moe.ep_size = %d does not divide the world size %d (expected a "
                           "divisor of the number of ranks: experts are split over blocks of "
                           "ep_size consecutive ranks)",
                           cfg->model.moe.ep_size, world);
    /* DeepSpeed's rule: train_batch_size = micro x accumulation x world; any two of the three
     * determine the third (train_batch_size alone keeps the accumulation at its value, 1 by
     * default, as DeepSpeed does). */
    int tb_set = zero__train_config_is_set(cfg, "train_batch_size") && cfg->train_batch_size > 0;
    int mb_set = zero__train_config_is_set(cfg, "train_micro_batch_size_per_gpu");
    int ga_set = zero__train_config_is_set(cfg, "gradient_accumulation_steps");
    int64_t tb = cfg->train_batch_size, mb = cfg->micro_batch, ga = cfg->grad_accum, w = world;
    if (tb_set && !(mb_set && ga_set)) {
        int64_t known = (mb_set ? mb : ga) * w;
        const char *name =
            mb_set ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps";
        if (tb % known != 0)
            return zero__error(ZERO_ERR_CONFIG,
                               "train_batch_size = %lld is not divisible by %s (%lld) x world "
                               "size (%d) (expected a multiple of %lld)",
                               (long long)tb, name, (long long)(mb_set ? mb : ga), world,
                               (long long)known);
        if (mb_set)
            ga = tb / known;
        else
            mb = tb / known;
    }
    if (tb_set && tb != mb * ga * w)
        return zero__error(ZERO_ERR_CONFIG,
                           "train_batch_size = %lld does not equal "
                           "train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps "
                           "(%lld) x world size (%d) = %lld (expected any two of the three, or "
                           "three that agree)",
                           (long long)tb, (long long)mb, (long long)ga, world,
                           (long long)(mb * ga * w));
    if (mb * ga * w > INT_MAX || mb > (1 << 20) || ga > (1 << 20))
        return zero__error(ZERO_ERR_CONFIG,
                           "train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps "
                           "(%lld) x world size (%d) is too large (expected <= %d)",
                           (long long)mb, (long long)ga, world, INT_MAX);
    cfg->micro_batch = (int)mb;
    cfg->grad_accum = (int)ga;
    cfg->train_batch_size = (int)(mb * ga * w);
    if (cfg->save_every > 0 && !cfg->save_dir[0])
        return zero__error(ZERO_ERR_CONFIG,
                           "train.save_every = %d but train.save_dir is empty (expected a "
                           "directory to save into: --save-dir DIR)",
                           cfg->save_every);
    if (!strcmp(cfg->resume, "latest") && !cfg->save_dir[0])
        return zero__error(ZERO_ERR_CONFIG,
                           "train.resume = \"latest\" needs train.save_dir (expected --save-dir "
                           "DIR, or --resume with a checkpoint directory)");
    if (cfg->resume[0] && cfg->init_from[0])
        return zero__error(ZERO_ERR_CONFIG,
                           "train.resume = \"%s\" and train.init_from = \"%s\" both given "
                           "(expected one: a resume restores the weights itself)",
                           cfg->resume, cfg->init_from);
    if (cfg->bf16 && cfg->fp16)
        return zero__error(ZERO_ERR_CONFIG,
                           "bf16.enabled and fp16.enabled are both true (expected at most one: "
                           "the compute dtype is bf16, fp16 or, with neither, fp32)");
    zero_dtype_t cdt = zero__train_config_compute_dtype(cfg);
    zero_dtype_t adt = zero__train_config_accum_dtype(cfg);
    if (adt != ZERO_DTYPE_FP32 && adt != cdt)
        return zero__error(
            ZERO_ERR_CONFIG,
            "data_types.grad_accum_dtype = \"%s\" does not fit compute dtype %s "
            "(expected \"fp32\"%s%s%s)",
            cfg->grad_accum_dtype, zero_dtype_name(cdt), cdt == ZERO_DTYPE_FP32 ? "" : " or \"",
            cdt == ZERO_DTYPE_FP32 ? "" : zero_dtype_name(cdt), cdt == ZERO_DTYPE_FP32 ? "" : "\"");
    if (!strcmp(cfg->optimizer, "AdamW8bit") &&
        zero__train_config_is_set(cfg, "optimizer.params.state_dtype") &&
        strcmp(cfg->state_dtype, "int8"))
        return zero__error(ZERO_ERR_CONFIG,
                           "optimizer.type = \"AdamW8bit\" with optimizer.params.state_dtype = "
                           "\"%s\" (expected \"int8\" or no state_dtype: AdamW8bit is 8-bit "
                           "states; for fp32 states use optimizer.type \"AdamW\")",
                           cfg->state_dtype);
    if (cfg->model.fp8.enabled && cfg->fp16)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp8.enabled = true cannot be combined with fp16.enabled = true (FP8 "
                           "scaling replaces fp16's loss scaling, as in Transformer Engine's "
                           "recipes; expected bf16.enabled or fp32 compute with fp8)");
    if (cfg->model.fp8.weight_gather && !cfg->model.fp8.enabled)
        return zero__error(ZERO_ERR_CONFIG,
                           "fp8.weight_gather = true needs fp8.enabled = true (the weights go on "
                           "the E4M3 grid of FP8 compute)");
    if (!strcmp(cfg->optimizer, "OneBitAdam")) {
        /* the first key that 1-bit Adam cannot run with, and its value */
        char stage[16];
        snprintf(stage, sizeof stage, "%d", cfg->stage);
        const char *key = NULL, *val = NULL;
        if (cfg->stage != 0)
            key = "zero_optimization.stage", val = stage;
        else if (cfg->fp16)
            key = "fp16.enabled", val = "true";
        else if (zero__train_config_state_dtype(cfg) != ZERO_DTYPE_FP32)
            key = "optimizer.params.state_dtype", val = cfg->state_dtype;
        else if (strcasecmp(cfg->offload_optimizer, "none"))
            key = "zero_optimization.offload_optimizer.device", val = cfg->offload_optimizer;
        else if (strcasecmp(cfg->offload_param, "none"))
            key = "zero_optimization.offload_param.device", val = cfg->offload_param;
        else if (cfg->model.moe.ep_size > 1)
            key = "model.moe.ep_size", val = "> 1";
        if (key)
            return zero__error(ZERO_ERR_CONFIG,
                               "optimizer.type = \"OneBitAdam\" cannot be combined with %s = %s "
                               "(1-bit Adam runs at zero_optimization.stage 0 only, as DeepSpeed "
                               "refuses it with ZeRO; expected stage 0, bf16 or fp32, "
                               "state_dtype fp32, no offload and no expert parallelism)",
                               key, val);
    }
    if (zero__train_config_state_dtype(cfg) == ZERO_DTYPE_INT8) {
        const char *dev = !strcasecmp(cfg->offload_optimizer, "nvme") ? "offload_optimizer"
                          : !strcasecmp(cfg->offload_param, "nvme")   ? "offload_param"
                                                                      : NULL;
        if (dev)
            return zero__error(ZERO_ERR_CONFIG,
                               "%s cannot be combined with zero_optimization.%s.device = "
                               "\"nvme\" (8-bit optimizer states live in memory; expected "
                               "\"none\" or \"cpu\", or fp32 states)",
                               !strcmp(cfg->optimizer, "AdamW8bit")
                                   ? "optimizer.type = \"AdamW8bit\" (8-bit states)"
                                   : "optimizer.params.state_dtype = \"int8\"",
                               dev);
    }
    st = zero_loss_scaler_params_check(&cfg->loss_scaler);
    if (st) return st;
    st = timeout_from_env(cfg);
    if (st) return st;
    auto_report(cfg);
    if (!cfg->reduce_scatter)
        note(ZERO_LOG_WARN,
             "zero_optimization.reduce_scatter = false ignored: gradients are always "
             "reduce-scattered (same result, less traffic)");
    return ZERO_OK;
}

zero_status_t zero__train_config_set_dtype(zero_train_config_t *cfg, const char *name) {
    int bf = 0, fp = 0;
    if (!strcmp(name, "bf16"))
        bf = 1;
    else if (!strcmp(name, "fp16"))
        fp = 1;
    else if (strcmp(name, "fp32"))
        return zero__error(ZERO_ERR_CONFIG,
                           "command line: --dtype %s is not a compute dtype (expected fp32, bf16 "
                           "or fp16)",
                           name);
    cfg->bf16 = bf;
    cfg->fp16 = fp;
    mark_set(cfg, find_key("bf16.enabled"));
    mark_set(cfg, find_key("fp16.enabled"));
    return ZERO_OK;
}

/* One of zero_optimization's offload blocks (`block`: offload_optimizer or offload_param) into
 * the engine's parameters; nvme needs a path (`files`: what goes there, for the message). */
static zero_status_t offload_block(const char *block, const char *files, const char *device,
                                   const char *nvme_path, int buffer_count,
                                   zero_offload_params_t *out) {
    zero_status_t st = zero_offload_device_parse(device, &out->device);
    if (st) return st;
    if (out->device == ZERO_OFFLOAD_NVME && !nvme_path[0])
        return zero__error(ZERO_ERR_CONFIG,
                           "zero_optimization.%s.nvme_path is not set (expected the directory of "
                           "the %s with device \"nvme\")",
                           block, files);
    snprintf(out->nvme_path, sizeof out->nvme_path, "%s", nvme_path);
    out->buffer_count = buffer_count;
    return ZERO_OK;
}

zero_status_t zero__train_config_engine_params(const zero_train_config_t *cfg,
                                               zero_engine_params_t *ep) {
    ep->stage = cfg->stage;
    ep->compute_dtype = zero__train_config_compute_dtype(cfg);
    ep->grad_accum_dtype = zero__train_config_accum_dtype(cfg);
    ep->optim_state_dtype = zero__train_config_state_dtype(cfg);
    ep->onebit = !strcmp(cfg->optimizer, "OneBitAdam");
    ep->freeze_step = cfg->freeze_step;
    ep->loss_scaler = cfg->loss_scaler;
    /* DeepSpeed: no scheduler keeps the optimizer's lr; WarmupLR and WarmupDecayLR take their
     * peak from warmup_max_lr and decay to warmup_min_lr; WarmupCosineLR scales the optimizer's
     * lr by cos_min_ratio at the end. */
    int none = !strcmp(cfg->scheduler, "none");
    int warmup_family = !none && strcmp(cfg->scheduler, "WarmupCosineLR") != 0;
    float peak = cfg->lr;
    if (warmup_family && cfg->warmup_max_lr > 0) peak = cfg->warmup_max_lr;
    if (none) {
        ep->lr = ep->min_lr = ep->warmup_min_lr = peak;
        ep->schedule = ZERO_LR_CONSTANT;
        ep->warmup_steps = 0;
        ep->warmup_type = ZERO_WARMUP_LINEAR;
    } else {
        ep->lr = peak;
        ep->schedule = !strcmp(cfg->scheduler, "WarmupLR")        ? ZERO_LR_CONSTANT
                       : !strcmp(cfg->scheduler, "WarmupDecayLR") ? ZERO_LR_LINEAR
                                                                  : ZERO_LR_COSINE;
        ep->min_lr = warmup_family ? cfg->warmup_min_lr : peak * cfg->min_lr_ratio;
        if (ep->min_lr > peak)
            return zero__error(ZERO_ERR_CONFIG,
                               "scheduler.params.warmup_min_lr = %g is above the peak learning "
                               "rate %g (expected <= the peak)",
                               (double)cfg->warmup_min_lr, (double)peak);
        ep->warmup_min_lr = warmup_family ? cfg->warmup_min_lr : peak * cfg->warmup_min_ratio;
        ep->warmup_steps = cfg->warmup_steps;
        ep->warmup_type = !strcmp(cfg->warmup_type, "log") ? ZERO_WARMUP_LOG : ZERO_WARMUP_LINEAR;
    }
    ep->beta1 = cfg->beta[0];
    ep->beta2 = cfg->beta[1];
    ep->eps = cfg->eps;
    ep->weight_decay = cfg->weight_decay;
    ep->total_steps = cfg->total_steps > 0 ? cfg->total_steps : (cfg->steps > 0 ? cfg->steps : 1);
    ep->grad_clip = cfg->grad_clip;
    ep->grad_accum_steps = cfg->grad_accum;
    /* DeepSpeed sizes buckets in elements; the engine takes bytes of fp32 gradient (with 16-bit
     * compute the bucket keeps this element count in half the bytes). A bucket of 0 elements
     * (DeepSpeed: every gradient is reduced on its own) becomes the engine's smallest, 1 byte,
     * which holds no unit, so every unit is reduce-scattered straight from its own buffer. */
    int64_t bucket_bytes = cfg->reduce_bucket_elems * (int64_t)sizeof(float);
    ep->reduce_bucket_bytes = bucket_bytes > INT32_MAX ? INT32_MAX
                              : bucket_bytes < 1       ? 1
                                                       : (size_t)bucket_bytes;
    ep->overlap_comm = cfg->overlap_comm;
    ep->prefetch_bucket_elems = cfg->prefetch_bucket_elems;
    ep->persistence_threshold_elems = cfg->persistence_threshold_elems;
    ep->max_live_elems = cfg->max_live_elems;
    ep->quantized_weights = cfg->quantized_weights;
    ep->fp8_weights = cfg->model.fp8.enabled && cfg->model.fp8.weight_gather;
    ep->hpz_partition_size = cfg->hpz_partition_size;
    ep->quantized_gradients = cfg->quantized_gradients;
    ep->loco = zero__train_config_is_set(cfg, "zero_optimization.zeropp_loco_param.err_beta") ||
               zero__train_config_is_set(cfg, "zero_optimization.zeropp_loco_param.reset_T");
    ep->loco_err_beta = cfg->loco_err_beta;
    ep->loco_reset_t = cfg->loco_reset_t;
    zero_status_t st =
        offload_block("offload_optimizer", "swap files", cfg->offload_optimizer, cfg->nvme_path,
                      cfg->offload_buffer_count, &ep->offload_optimizer);
    if (st) return st;
    ep->offload_optimizer.pipeline_read = cfg->pipeline_read;
    ep->offload_optimizer.pipeline_write = cfg->pipeline_write;
    ep->offload_optimizer.overlap_step = cfg->overlap_step;
    st = offload_block("offload_param", "parameter swap files", cfg->offload_param,
                       cfg->param_nvme_path, cfg->param_buffer_count, &ep->offload_param);
    if (st) return st;
    ep->sub_group_elems = cfg->sub_group_elems;
    ep->aio.block_size = (size_t)cfg->aio_block_size;
    ep->aio.queue_depth = cfg->aio_queue_depth;
    ep->aio.intra_op_parallelism = cfg->aio_threads;
    ep->aio.single_submit = cfg->aio_single_submit;
    ep->aio.overlap_events = cfg->aio_overlap_events;
    return ZERO_OK;
}

zero_dtype_t zero__train_config_state_dtype(const zero_train_config_t *cfg) {
    return !strcmp(cfg->state_dtype, "int8") || !strcmp(cfg->optimizer, "AdamW8bit")
               ? ZERO_DTYPE_INT8
               : ZERO_DTYPE_FP32;
}

zero_dtype_t zero__train_config_compute_dtype(const zero_train_config_t *cfg) {
    return cfg->bf16 ? ZERO_DTYPE_BF16 : cfg->fp16 ? ZERO_DTYPE_FP16 : ZERO_DTYPE_FP32;
}

zero_dtype_t zero__train_config_accum_dtype(const zero_train_config_t *cfg) {
    return !strcmp(cfg->grad_accum_dtype, "bf16")   ? ZERO_DTYPE_BF16
           : !strcmp(cfg->grad_accum_dtype, "fp16") ? ZERO_DTYPE_FP16
                                                    : ZERO_DTYPE_FP32;
}

/* The shortest decimal that reads back as the same float (0.1, not 0.100000001). */
static void print_float(float v, FILE *out) {
    char buf[64];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    fputs(buf, out);
}

static void print_value(const zero_train_config_t *cfg, const cfg_key_t *k, FILE *out) {
    const void *f = cfield(cfg, k);
    switch (k->type) {
    case K_INT: fprintf(out, "%d", *(const int *)f); break;
    case K_I64: fprintf(out, "%lld", (long long)*(const int64_t *)f); break;
    case K_BOOL: fprintf(out, "%s", *(const int *)f ? "true" : "false"); break;
    case K_FLOAT: print_float(*(const float *)f, out); break;
    case K_DOUBLE: fprintf(out, "%.17g", *(const double *)f); break;
    case K_PAIR:
        fputc('[', out);
        print_float(((const float *)f)[0], out);
        fputs(", ", out);
        print_float(((const float *)f)[1], out);
        fputc(']', out);
        break;
    case K_STR: {
        fputc('"', out);
        for (const char *s = (const char *)f; *s; s++) {
            if (*s == '"' || *s == '\\')
                fprintf(out, "\\%c", *s);
            else if ((unsigned char)*s < 0x20)
                fprintf(out, "\\u%04x", (unsigned char)*s);
            else
                fputc(*s, out);
        }
        fputc('"', out);
        break;
    }
    default: ZERO_ASSERT(0);
    }
}

/* Keys in the table are grouped by section, so nesting follows from common prefixes. */
void zero__train_config_print(const zero_train_config_t *cfg, FILE *out) {
    char open[4][64]; /* currently open objects */
    int depth = 0;
    int first[5] = {1, 1, 1, 1, 1};
    fprintf(out, "{");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        char parts[5][64];
        int n = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", keys[i].name);
        for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && n < 5;
             tok = strtok_r(NULL, ".", &save))
            snprintf(parts[n++], sizeof parts[0], "%s", tok);
        int common = 0;
        while (common < depth && common < n - 1 && !strcmp(open[common], parts[common])) common++;
        while (depth > common) {
            depth--;
            fprintf(out, "\n%*s}", 2 * (depth + 1), "");
        }
        while (depth < n - 1) {
            fprintf(out, "%s\n%*s\"%s\": {", first[depth] ? "" : ",", 2 * (depth + 1), "",
                    parts[depth]);
            first[depth] = 0;
            snprintf(open[depth], sizeof open[0], "%s", parts[depth]);
            depth++;
            first[depth] = 1;
        }
        fprintf(out, "%s\n%*s\"%s\": ", first[depth] ? "" : ",", 2 * (depth + 1), "", parts[n - 1]);
        first[depth] = 0;
        print_value(cfg, &keys[i], out);
    }
    while (depth > 0) {
        depth--;
        fprintf(out, "\n%*s}", 2 * (depth + 1), "");
    }
    fprintf(out, "\n}\n");
}

static void print_default(const cfg_key_t *k, FILE *out) {
    zero_train_config_t def;
    zero__train_config_default(&def);
    print_value(&def, k, out);
}

void zero__train_config_print_keys(FILE *out) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        fprintf(out, "  %-36s ", keys[i].name);
        print_default(&keys[i], out);
        fprintf(out, "\n      %s (%s", keys[i].doc, type_names[keys[i].type]);
        if (keys[i].allowed) fprintf(out, ": %s", keys[i].allowed);
        if (keys[i].flag) fprintf(out, "; flag %s", keys[i].flag);
        fprintf(out, ")\n");
    }
    fprintf(out, "\nother DeepSpeed keys (what zero does with them):\n");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(ds_keys); i++) {
        const ds_key_t *d = &ds_keys[i];
        fprintf(out, "  %-50s %s", d->path, ds_kind_names[d->kind]);
        if (d->kind == DS_SAME) fprintf(out, " (zero does %s)", d->same);
        if (d->kind == DS_ALIAS) fprintf(out, " of %s", d->note);
        fprintf(out, "\n");
    }
}

void zero__train_config_print_markdown(FILE *out) {
    fprintf(out, "| key | type | default | flag | meaning |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        const cfg_key_t *k = &keys[i];
        fprintf(out, "| `%s` | %s | `", k->name, type_names[k->type]);
        print_default(k, out);
        fprintf(out, "` | %s%s%s | %s", k->flag ? "`" : "", k->flag ? k->flag : "",
                k->flag ? "`" : "", k->doc);
        if (k->allowed) {
            fprintf(out, " (one of");
            for (const char *p = k->allowed; *p;) {
                size_t n = strcspn(p, "|");
                fprintf(out, " `%.*s`", (int)n, p);
                p += n + (p[n] == '|');
            }
            fprintf(out, ")");
        }
        fprintf(out, " |\n");
    }
    fprintf(out,
            "\nOther DeepSpeed keys, and what zero does with each (a section or value that asks "
            "for nothing — `false`, `null`, `\"enabled\": false`, `\"device\": \"none\"` — is "
            "accepted silently):\n\n| DeepSpeed key | zero |\n|---|---|\n");
    for (size_t i = 0; i < ZERO_ARRAY_LEN(ds_keys); i++) {
        const ds_key_t *d = &ds_keys[i];
        fprintf(out, "| `%s` | ", d->path);
        switch (d->kind) {
        case DS_SAME:
            fprintf(out, "zero does `%s` (accepted; another value warns \"not supported yet\")",
                    d->same);
            break;
        case DS_NOOP: fprintf(out, "accepted, changes nothing"); break;
        case DS_EQUIV: fprintf(out, "zero's equivalent (said when enabled)"); break;
        case DS_UNSUP: fprintf(out, "warns \"ignored: not supported yet\""); break;
        case DS_ALIAS: fprintf(out, "read as `%s` (DeepSpeed's other name)", d->note); break;
        case DS_ERROR: fprintf(out, "error"); break;
        }
        if (d->kind != DS_ALIAS && d->note[0]) fprintf(out, ": %s", d->note);
        fprintf(out, " |\n");
    }
}

/* What a flag's value is, for the help: a directory for *_dir keys and train.resume (a checkpoint
 * or save directory, or "latest"), a name from a list, a file, or a number. */
static const char *metavar(const cfg_key_t *k) {
    size_t n = strlen(k->name);
    if (k->type != K_STR) return "N";
    if (k->allowed) return "NAME";
    if (!strcmp(k->name, "train.resume")) return "DIR|latest";
    if (n > 4 && !strcmp(k->name + n - 4, "_dir")) return "DIR";
    return "FILE";
}

void zero__train_config_print_flags(FILE *out) {
    for (size_t i = 0; i < ZERO_ARRAY_LEN(keys); i++) {
        const cfg_key_t *k = &keys[i];
        if (!k->flag) continue;
        char left[64];
        snprintf(left, sizeof left, "%s %s", k->flag, metavar(k));
        fprintf(out, "  %-20s %s (%s)\n", left, k->doc, k->name);
    }
}

zero_status_t zero_ds_config_load(const char *path, zero_engine_params_t *out) {
    if (!path || !out)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_ds_config_load: %s is NULL (expected a config path and "
                           "engine parameters to fill)",
                           !path ? "path" : "out");
    zero_train_config_t cfg;
    zero__train_config_default(&cfg);
    zero_status_t st = zero__train_config_load(&cfg, path);
    if (st) return st;
    st = zero__train_config_check(&cfg, out->comm ? zero_comm_size(out->comm) : 1);
    if (st) return st;
    zero_engine_params_t p = zero_engine_params_default();
    p.comm = out->comm;
    p.mem = out->mem;
    p.threads = out->threads;
    p.seed = out->seed;
    st = zero__train_config_engine_params(&cfg, &p);
    if (st) return st;
    *out = p;
    return ZERO_OK;
}

int zero__train_config_key_count(void) { return (int)ZERO_ARRAY_LEN(keys); }

const char *zero__train_config_key_name(int i) {
    return i >= 0 && i < (int)ZERO_ARRAY_LEN(keys) ? keys[i].name : NULL;
}

void zero__train_config_value_str(const zero_train_config_t *cfg, int i, char *buf, size_t n) {
    if (!n) return;
    buf[0] = 0;
    if (i < 0 || i >= (int)ZERO_ARRAY_LEN(keys)) return;
    FILE *f = fmemopen(buf, n, "w");
    if (!f) return;
    print_value(cfg, &keys[i], f);
    fclose(f);
    buf[n - 1] = 0;
}
