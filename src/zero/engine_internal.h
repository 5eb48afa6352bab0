/* engine_internal.h — the engine's private state, shared by the files of src/zero/.
 *
 * layout.c      units, padding, initialisation, queries, read/write
 * engine.c      parameters, init/free, learning-rate schedule
 * buckets.c     gradient buffers, bucketed asynchronous reduce-scatter, fp32 accumulation
 * fetch.c       fetch/release (stage-3 gather, prefetch, persistence, the pool of gather
 *               buffers), schedule recording
 * pool.c        pools of reusable buffers (stage-3 gathers, stage-2/3 gradient work)
 * step.c        optimizer step: norm, schedule check, clip, AdamW on shards, all-gathers;
 *               with overlap_step, the updates run in backward as gradients become final
 * xfer.c        every collective the engine posts, over a partition group, counted by
 *               kind; the formula of what a step sends
 * accounting.c  fingerprint and the memory / communication report
 *
 * uswap.c      stage 3's per-unit swap files, mapped on use: the parameter shards
 *              (offload_param nvme) and, with both offloads at nvme, the gradient accumulators
 *
 * lowp.c       16-bit helpers: widen/round ranges, accumulate, the master -> params rounding
 * fp8w.c       fp8 weights (params.fp8_weights): flagged tensors rounded to the E4M3 grid, stage
 *              3's packed gather format
 *
 * Invariants: every unit is sharded over its partition group (the world unless declared
 * otherwise) and padded by the rule of zero__padded_count (core) to a multiple of group size x
 * 16 elements; the rank of group rank r owns [r*S, (r+1)*S). Padding elements of parameters,
 * gradients and moments stay zero forever. Buffers of the compute dtype (params, working gradients,
 * buckets, gathers) are void * with eng->ce bytes per element; the accumulator has eng->ae; master,
 * m and v are fp32. With fp32 compute the master is the parameter buffer itself (un->master ==
 * NULL): that path is the pre-mixed-precision code, bit for bit. Collectives are posted in the
 * order the model calls the engine, which is the same on every rank as long as the schedules agree
 * (checked at every step).
 */
#ifndef ZERO_ENGINE_INTERNAL_H
#define ZERO_ENGINE_INTERNAL_H

#include "zero/engine.h"

#include "core/core_internal.h"
#include "io/aio.h"
#include "kernels/sumsq_exact.h"
#include "optim/adamw.h"
#include "qgz.h"

#include <stdint.h>

#define ZERO__NAME_MAX_LEN 64
#define ZERO__BUCKET_SLOTS 2
#define ZERO__SCRATCH_COUNT 65536
#define ZERO__GROUP_MAX 8
/* Buffers of the gradient accumulators on NVMe (uswap.c): one being added into while the last
 * one's write is in flight (or a direct unit's reduce-scatter lands in it). */
#define ZERO__GSWAP_SLOTS 2
/* The step's control record (step.c), sent by every rank to every other once per step. */
#define ZERO__CONTROL_BYTES 32u
/* With exact units (zero__unit_t.exact), the record's exact sum of squares follows it. */
#define ZERO__CONTROL_EXACT_BYTES 88u

/* A partition group: the ranks a unit is sharded over (and its gradient reduced over). Group 0
 * is the engine's world; others are splits of it chosen when a unit is declared (an expert's
 * data-parallel group, a node). Ranks with the same color form one group; the split's groups
 * all have the same size. Ordered by color they number the copies: a unit of the group holds
 * copy `copy` of `copies` slices (along dimension 0) of its logical tensors (engine.h,
 * zero_engine_add_unit_in). */
typedef struct zero__group {
    zero_comm_t *comm; /* owned; NULL with one rank */
    int size, rank;
    int local; /* of its ranks, those on this rank's node (size on one node) */
    int color;
    int copy, copies;
    /* world rank w holds copy copy_of[w] at group rank grank_of[w] (owned, world entries; NULL
     * for the world itself, whose copy is 0 and group rank the world rank) */
    int *copy_of, *grank_of;
} zero__group_t;

typedef struct zero__unit {
    char name[ZERO__NAME_MAX_LEN];
    int tensor_count;
    zero_tensor_desc_t *tensors; /* owned; names point into tensor_names */
    char (*tensor_names)[ZERO__NAME_MAX_LEN];
    size_t *offsets;          /* element offset of each tensor */
    size_t *counts;           /* elements of each tensor */
    size_t param_count;       /* without padding */
    size_t padded_count;      /* P_u: multiple of world x 16 */
    size_t shard_count;       /* S_u = P_u / group size */
    const zero__group_t *grp; /* the ranks it is sharded over: an entry of eng->groups */
    int persistent;           /* stage 3: kept full (param_count <= persistence threshold) */
    /* fp8 weights: flagged parameters outside the master's range were written and are not on
     * the grid yet (fp8w.c: rounded at the next fetch, once every piece has been written) */
    int fp8_stale;

    /* Parameters (compute dtype). full: P_u elements (stages 0-2 and persistent stage-3 units:
     * always; other stage-3 units: only while gathered). shard: S_u elements (non-persistent
     * stage 3 only). master: 16-bit compute only, fp32, P_u elements at stage 0, else S_u (the
     * owned range); NULL with fp32 compute. */
    void *full, *shard;
    float *master;
    /* offload_param nvme: the shard lives in a swap file (uswap.c) and shard stays NULL; every
     * access maps it (zero__shard_map). zero__unit_sharded says whether a unit is held as a
     * shard, whatever holds it. */
    int poff;
    int refs;                    /* stage 3: open fetches */
    int prefetched;              /* stage 3: gathered ahead of its fetch, not fetched yet */
    zero_comm_request_t *gather; /* stage 3: all-gather in flight into full */
    void *qsend;     /* qwZ: the quantized shard being sent (from eng->qpool) while gather flies;
                      * fp8 weights: the packed shard and then every rank's part */
    int send_mapped; /* offload_param: the shard is mapped as the gather's source */
    /* ZeRO++ hpZ (zero__hpz_unit): sec, the secondary shard, P_u / h elements (ZERO_MEM_PARAMS,
     * allocated with the unit); sec_valid: it holds this step's values (set by the first
     * gather's landing, cleared by a step or a write); gather_hpz: the gather in flight into
     * full is the in-group one from sec. */
    void *sec;
    int sec_valid, gather_hpz;
    /* LoCo (loco with qgZ, units of the world): this rank's error feedback, P_u fp32 elements
     * (ZERO_MEM_GRADS), allocated with the reduce buckets; added to the next gradient sent. */
    float *loco;

    /* Gradients. work: slots x P_u compute-dtype elements (zero__work_count), the model's
     * micro-step buffer (stages 0-1: always, owned; 2-3: lent by the gradient pool between
     * zero_unit_grads and zero_unit_grads_done). acc: S_u grad_accum_dtype elements, the
     * accumulator of reduced micro-step gradients. slots (zero_engine_set_unit_slots, 1 by
     * default): the partials of this many source ranks, slot s at s x P_u; with more than one the
     * unit is reduced by reduce_slots (buckets.c), never packed or sent direct. With
     * zero__one_grad_buffer one of the two is NULL between steps and inside backward. */
    void *work, *acc;
    int slots;
    int dirty;    /* work handed out and not yet handed back */
    int direct;   /* reduce-scattered straight from work (2 P_u > the bucket), not packed */
    int inflight; /* stages 0-1, direct: work is being sent; zeroed when that lands */
    int acc_used; /* something was reduced into acc since it was last zeroed */
    /* Both offloads at nvme (uswap.c): acc stays NULL and the accumulator lives in a swap file,
     * reached through zero__acc_map. acc_on_disk: this step's accumulator was written there
     * (else it is zero); acc_sumsq: its sum of squares then (the step's norm). */
    int goff, acc_on_disk;
    double acc_sumsq;
    zero__xsum_t acc_xsum; /* the same for an exact unit */
    /* One rank, stages 0-1, accumulator dtype != compute dtype: the step's only gradient so far
     * is still in work, acc is zero. The step reads work directly; a further micro-step first
     * widens it into acc (zero__flush_pending). */
    int pending;

    float *m, *v;        /* Adam moments: P_u (stage 0) or S_u elements; NULL with 8-bit states */
    struct zero__q8 *q8; /* 8-bit Adam states (q8state.c) instead of m and v; else NULL */
    struct zero__onebit *ob; /* 1-bit Adam's error feedback (onebit.c); else NULL */

    /* offload_optimizer.overlap_step (step.c, eng->overlap): grads_done calls and reduced
     * gradients landed in the accumulator this step; early: 1 its last micro-step's gradient
     * has landed (final) and the update waits for a hook, 2 updated in backward (early_sumsq:
     * its accumulator's sum of squares, taken before the update zeroed it). */
    int done_count, landed_count, early;
    double early_sumsq;
    zero__xsum_t early_xsum; /* the same for an exact unit */

    /* Declared by zero_engine_add_unit_in: its share of the global norm is summed exactly
     * (kernels/sumsq_exact.h) instead of in float64, so that it does not depend on how the
     * unit is cut over ranks (step.c). */
    int exact;
} zero__unit_t;

/* One buffer of a pool (pool.c): kept for reuse by any unit of the same padded size, so
 * fetches and backward do not allocate once the pool has grown to the step's needs. */
typedef struct zero__pool_buf {
    void *ptr;    /* owned by the pool, `bytes` bytes */
    size_t bytes; /* a unit's padded count times its element size: the key */
    int in_use;   /* lent to a unit */
} zero__pool_buf_t;

typedef struct zero__pool {
    zero__pool_buf_t *bufs;
    int count, cap;
} zero__pool_t;

typedef struct zero__bucket_entry {
    int unit;
    size_t offset; /* of the unit's shard inside each rank block */
    void *lent;    /* direct: the unit's working buffer being sent, given back when it lands */
    int into_acc;  /* direct: reduced straight into the (zero) accumulator, nothing to add */
} zero__bucket_entry_t;

typedef struct zero__bucket {
    const zero__group_t *grp; /* of every unit in it */
    void *send; /* group size x block elements (compute dtype), rank-major blocks (ZERO_MEM_COMM) */
    void *recv; /* block elements */
    void *drecv;  /* direct units whose accumulator holds a sum already (accumulation):
                   * direct_recv_count elements, allocated at the first such use */
    size_t block; /* elements per rank block filled so far */
    zero__bucket_entry_t *entries;
    int entry_count, entry_cap;
    zero_comm_request_t *req; /* reduce-scatter in flight */
    uint64_t seq;             /* posting order */
    /* ZeRO++ qgZ: the int4 reduce-scatter in flight instead of req (qgz set), its segments
     * (the units' shard sizes, seg_cap allocated) and its scratch (ZERO_MEM_COMM, grown to the
     * largest call the slot has carried and kept). */
    int qgz;
    zero__qgz_op_t qop;
    size_t *segs;
    int seg_cap;
    void *qscratch;
    size_t qscratch_bytes;
} zero__bucket_t;

/* The stage as a policy: what is sharded and how gradients and parameters move, decided once
 * by zero__stage_policy from the stage and the world size; the engine (and the memory estimate)
 * reads these fields, never the stage number. Later variants (offload, ZeRO++, MoE) extend it.
 *   stage          shard_optim  shard_grads  shard_params
 *   0              0            0            0
 *   1              1            0            0
 *   2              1            1            0
 *   3              1            1            1                                                */
typedef struct {
    /* AdamW states (m, v and the 16-bit master) hold the owned shard S_u and the step updates
     * only it; else whole P_u, updated identically on every rank. */
    int shard_optim;
    /* The model's gradient working buffer is lent by the gradient pool for one micro-step and
     * handed back when its reduce-scatter is posted; else each unit owns one for good. */
    int shard_grads;
    /* Parameters are held as the owned shard and all-gathered per use (fetch/release), except
     * the persistent units; else every rank keeps the full buffers. */
    int shard_params;
    /* After the step, the updated shards are all-gathered into the full parameters of every
     * rank (shard_optim with world > 1; with shard_params, only the persistent units). */
    int gather_after_step;
    /* ZeRO++ qwZ (quantized_weights at stage 3): the fetch gathers of sharded units carry
     * blockwise int8 (kernels/quant.h) and are dequantized on arrival (xfer.c). */
    int quantize_weights;
} zero__stage_policy_t;

/* engine.c: the policy of p's stage (0..3) and options over `world` ranks. */
zero__stage_policy_t zero__stage_policy(const zero_engine_params_t *p, int world);

/* What the engine sent (xfer.c): this step so far and the last completed step, in bytes by
 * kind and by collective; and, for the theory, the bytes of a shard's reduce-scatter at every
 * grads_done and of a shard's all-gather at every stage-3 fetch window (zero__xfer_bytes). */
typedef struct zero__xfer_counts {
    uint64_t sent[ZERO_XFER_KIND_COUNT], last_sent[ZERO_XFER_KIND_COUNT];
    uint64_t sent_coll[ZERO_COLL_COUNT], last_sent_coll[ZERO_COLL_COUNT];
    uint64_t inter_sent, last_inter_sent; /* to ranks of other nodes */
    uint64_t rs_bytes, gather_bytes, last_rs_bytes, last_gather_bytes;
    /* the same to ranks of other nodes */
    uint64_t rs_inter_bytes, gather_inter_bytes, last_rs_inter_bytes, last_gather_inter_bytes;
    int have_last;
} zero__xfer_counts_t;

typedef struct zero__swap zero__swap_t;
typedef struct zero__uswap zero__uswap_t;

struct zero_engine {
    zero_engine_params_t params;
    zero__stage_policy_t pol; /* decided at create from params.stage and world */
    zero_mem_t *mem;
    int owns_mem;
    zero__group_t groups[ZERO__GROUP_MAX]; /* [0]: the world (xfer.c) */
    int group_count;
    int world, rank;          /* groups[0]'s size and rank */
    const zero__group_t *hpz; /* ZeRO++ hpZ: this rank's group of h ranks; NULL when off */
    /* ZeRO++ qgZ (quantized_gradients, world > 1): the hierarchy of the world's int4
     * reduce-scatter (its two communicators); qgz_on when in use (for group 0's units). */
    zero__qgz_t qgz;
    int qgz_on;
    int loco_reset;        /* LoCo: zero the error buffers before their next use */
    zero_status_t failure; /* sticky: the first collective failure */
    char failure_msg[1024];
    /* world > 1: the first swap-file read that failed at a fetch (offload_param), in backward
     * (a gradient accumulator read back for the next micro-step) or in the fingerprint (its
     * status and message, naming the unit and the file). Sticky. The rank goes
     * on gathering zeros in place of what it could not read so that every collective stays
     * matched; the step's control record (or zero_engine_check) then fails every rank, before
     * any update. */
    zero_status_t fetch_failure;
    char fetch_failure_msg[1024];
    /* Precision: element bytes of the compute dtype and of the accumulator; lowp = 16-bit
     * compute (separate fp32 master). The scaler decides skips (and fp16's scale). */
    size_t ce, ae;
    int lowp;
    int q8; /* 8-bit Adam states (params.optim_state_dtype int8): units padded to 256 x group */
    zero_loss_scaler_t *scaler;
    /* Where the optimizer's states (fp32 master, m, v) live: every access to them goes through
     * its map/unmap (optim/adamw.h). RAM: zero__state_residency_ram. */
    zero__optim_residency_t residency;
    zero__swap_t *swap;   /* offload_optimizer nvme: the swap files behind residency; else NULL */
    zero__uswap_t *pswap; /* offload_param nvme (stage 3): the parameter shards' files; else NULL */
    zero__uswap_t *gswap; /* and offload_optimizer nvme: the gradient accumulators'; else NULL */
    /* The swap files' I/O context, shared by swap and pswap (either offload at device nvme; else
     * NULL), and its counters: at the previous step's end, and of that step. */
    zero__aio_t *aio;
    zero__aio_stats_t io_base, io_last;
    float *scratch; /* lowp: ZERO__SCRATCH_COUNT fp32 for chunked widening (ZERO_MEM_OTHER) */

    zero__unit_t *units;
    int unit_count, unit_cap;
    int exact_units; /* units with exact set: the control record carries an exact sum */
    int64_t step;

    /* Buckets (buckets.c): slots used round-robin so that completions (and so accumulations)
     * happen in posting order; the slot being filled never has a request in flight. Units of
     * more than half of bucket_cap go direct (reduce-scattered from their working buffer). */
    size_t bucket_cap;        /* packed units' send buffer (elements) */
    size_t recv_cap;          /* packed units' recv buffer: bucket_cap / smallest group */
    size_t direct_recv_count; /* largest direct unit's shard */
    int buckets_ready;        /* sizes fixed and buffers allocated (first reduction, N > 1) */
    zero__bucket_t buckets[ZERO__BUCKET_SLOTS];
    int bucket_cur; /* slot being filled */

    /* Schedule of the current step: events (fetch u -> u, grads_done u -> -(u + 1)) and their
     * hash. Prefetch follows ref_fetches, a fetch sequence seen in two consecutive steps, and
     * only while this step's fetches so far equal its prefix (evaluation or sampling forwards
     * between steps make a step's sequence differ; a guess from it would gather units that
     * nobody fetches before the step). */
    int32_t *events;
    int event_count, event_cap;
    uint64_t event_hash;
    int *ref_fetches; /* owned: confirmed fetch sequence (unit per fetch), NULL: none yet */
    int ref_fetch_count;
    int *prev_fetches; /* owned: the previous step's fetch sequence (candidate reference) */
    int prev_fetch_count;
    int off_schedule;       /* this step's fetches departed from ref_fetches: no prefetch */
    int warned_waste;       /* a dropped, never-fetched prefetch was logged */
    int fetch_index;        /* fetches so far in this step */
    int64_t live_elems;     /* stage 3: gathered elements of non-persistent units */
    int64_t prefetch_elems; /* of which gathered ahead and not fetched yet */
    zero__pool_t pool;      /* stage 3: gather buffers (ZERO_MEM_COMM), kept until free */
    zero__pool_t grad_pool; /* stage 2-3: gradient working buffers (ZERO_MEM_GRADS), same */
    zero__pool_t qpool;     /* qwZ: quantized shards being sent (ZERO_MEM_COMM), same */

    /* offload_optimizer.overlap_step in effect (decided at init, the same on every rank);
     * early_ready: units with early == 1; early_done: units updated in this step's backward
     * (the state calls refuse while it is not 0); early_stop: no further update in this
     * backward (an inf/NaN gradient seen, or one failed). */
    int overlap;
    int early_ready, early_done, early_stop;
    /* tests: an update in backward waits for its data (as the step does) instead of leaving the
     * unit to a later hook, so that which units are updated in backward does not depend on the
     * disk's timing */
    int overlap_wait;

    uint64_t bucket_seq; /* posting order of bucket reduce-scatters */
    zero__xfer_counts_t xfer;
};

/* layout.c */
zero__unit_t *zero__engine_unit(const zero_engine_t *eng, int u);
/* 16-bit compute, [offset, offset + count) of unit un, held in this rank's parameters. Write
 * (out NULL): round `in` into the parameters and copy it exactly into the fp32 master where
 * the master covers it (stage 0: the whole unit; stages 1-3: the owned shard). Read (in NULL):
 * the widened parameters, with the master's exact values where it covers them. */
zero_status_t zero__master_io(const zero_engine_t *eng, const zero__unit_t *un, size_t offset,
                              size_t count, float *out, const float *in);
void zero__unit_free_buffers(zero__unit_t *un);

/* buckets.c */
zero_status_t zero__grads_done(zero_engine_t *eng, int u);
zero_status_t zero__buckets_drain(zero_engine_t *eng); /* flush + wait all, in posting order */
/* A pending gradient (zero__unit_t.pending) moves into the accumulator (allocated now if
 * zero__one_grad_buffer left it out); work is zeroed. */
zero_status_t zero__flush_pending(zero_engine_t *eng, zero__unit_t *un);
void zero__buckets_free(zero_engine_t *eng);
/* Stages 0-1, a one-rank group, accumulator in RAM, one slot and one micro-step per step: the
 * unit keeps one gradient buffer, not two. Same dtypes: the working buffer until grads_done,
 * then the accumulator (the two trade places there anyway) until the step has read and zeroed
 * it. A 16-bit gradient with an fp32 accumulator: the step reads it pending in the working
 * buffer, so the accumulator is never needed. An undeclared second micro-step allocates it. */
int zero__one_grad_buffer(const zero_engine_t *eng, const zero__unit_t *un);
/* The step: a unit without an accumulator and no gradient this step (its working buffer is zero)
 * takes that buffer as its accumulator, or as a pending gradient; after the step the buffer goes
 * back to being the working one. No-ops otherwise. */
void zero__grad_buffer_to_acc(const zero_engine_t *eng, zero__unit_t *un);
void zero__grad_buffer_to_work(const zero_engine_t *eng, zero__unit_t *un);

/* fetch.c */
void zero__schedule_event(zero_engine_t *eng, int32_t event);
void zero__schedule_end_step(zero_engine_t *eng); /* after a step: record, reset */
/* offload_param, after the step's sync: the next step's first shards of the recorded schedule
 * are read while the trainer finishes the step and the forward begins. */
void zero__fetch_read_ahead_next(zero_engine_t *eng);
/* Stage 3, at the step: wait for prefetches and give every gathered unit's buffer back to the
 * pool (the gathered copies are stale once the shards are updated). */
zero_status_t zero__fetch_drop_all(zero_engine_t *eng);
/* Record a failed swap-file read as fetch_failure (the first one; message as printf), logged. */
void zero__fetch_lost(zero_engine_t *eng, zero_status_t st, const char *fmt, ...) ZERO_PRINTF(3, 4);
/* Every rank has learnt each rank's fetch_failure (bad: the first failing rank, theirs: its
 * status; bad < 0: none): ZERO_OK, or the engine failed (sticky) with this rank's own message
 * or one naming rank bad. */
zero_status_t zero__fetch_failure_agreed(zero_engine_t *eng, int bad, zero_status_t theirs);

/* step.c, offload_optimizer.overlap_step. A reduced gradient of unit un has landed in its
 * accumulator (buckets.c): on the last micro-step it is final and its update may run. */
void zero__overlap_landed(zero_engine_t *eng, zero__unit_t *un);
/* A hook in backward (grads_done, release): run the updates of the final units that can run now
 * (no fetch open, their swap buffers available). Failures become the step's (every rank). */
void zero__overlap_run(zero_engine_t *eng);
/* ZERO_OK, or (some unit was updated in this backward, zero_engine_step not yet called) the error
 * naming `what` and the key. */
zero_status_t zero__overlap_refuse(const zero_engine_t *eng, const char *what);

/* pool.c. take: an idle buffer of exactly `bytes` bytes, else a new one (category cat)
 * that joins the pool; NULL when out of memory. give: back to the pool (asserts it came from
 * it). free: engine free, after every request using the buffers has landed. */
void *zero__pool_take(zero_engine_t *eng, zero__pool_t *pool, zero_mem_category_t cat,
                      size_t bytes);
/* An idle buffer of exactly `bytes` bytes, or NULL: never grows the pool. */
void *zero__pool_take_idle(zero__pool_t *pool, size_t bytes);
void zero__pool_give(zero__pool_t *pool, const void *ptr);
void zero__pool_free(zero__pool_t *pool);
size_t zero__pool_bytes(const zero__pool_t *pool, int idle_only);

/* Record a failure once (sticky) and return it; message keeps the original text. */
zero_status_t zero__engine_fail(zero_engine_t *eng, zero_status_t st, const char *fmt, ...)
    ZERO_PRINTF(3, 4);

/* lowp.c. Element i of a buffer of dtype dt (fp32/bf16/fp16) at byte offset. */
static inline void *zero__elem(const void *buf, size_t i, size_t esize) {
    return (unsigned char *)buf + i * esize;
}
/* acc[i] += src[i] for n elements: acc of dtype acc_dt, src of dtype src_dt (each fp32 or
 * 16-bit; the sum in fp32, rounded once into a 16-bit acc). overwrite (fp32 acc known to be
 * zero): acc[i] = src[i] instead, the same bits except that a -0 stays -0 (see
 * zero__acc_add_fused). zero_src: src[i] = 0 afterwards, in the same pass. Elementwise and
 * multi-threaded; any chunking or threading gives the same bits. */
void zero__acc_add(zero_engine_t *eng, void *acc, zero_dtype_t acc_dt, void *src,
                   zero_dtype_t src_dt, size_t n, int overwrite, int zero_src);
/* Sum of squares (float64) of n elements of dtype dt (fp32: zero__sumsq itself). */
double zero__sumsq_dt(zero_engine_t *eng, const void *x, size_t n, zero_dtype_t dt);

/* fp8w.c: weights on the E4M3 grid (params.fp8_weights). A unit with a ZERO_TENSOR_FP8 tensor
 * while the option is on. */
int zero__fp8w_unit(const zero_engine_t *eng, const zero__unit_t *un);
/* Round the flagged blocks inside [lo, lo + n), a run of whole partitions, of parameters whose
 * element plo is params[0]. */
void zero__fp8w_round(const zero_engine_t *eng, const zero__unit_t *un, void *params, size_t plo,
                      size_t lo, size_t n);
/* After a write of [offset, offset + count): every flagged piece it touches in the parameters
 * this rank holds, taken again from the fp32 master and rounded where the master covers the
 * piece (so that a block written in pieces is rounded from its exact values); elsewhere the
 * unit is marked fp8_stale, to be rounded at its next fetch (zero__fp8w_settle), when a
 * checkpoint's pieces have all been written. */
zero_status_t zero__fp8w_refresh(zero_engine_t *eng, zero__unit_t *un, size_t offset, size_t count);
/* Round the flagged pieces of the full parameters outside the master's range (the other ranks'
 * partitions at stages 1-2 and of persistent units); clears fp8_stale. */
void zero__fp8w_settle(const zero_engine_t *eng, zero__unit_t *un);
/* Bytes of each rank's part of a stage-3 gather of un (the largest, a multiple of 4). */
size_t zero__fp8w_wire_bytes(const zero_engine_t *eng, const zero__unit_t *un);
/* Partition r of un (element r S at shard[0]) to its wire part, and back. */
void zero__fp8w_pack(const zero_engine_t *eng, const zero__unit_t *un, int r, const void *shard,
                     unsigned char *wire);
void zero__fp8w_unpack(const zero_engine_t *eng, const zero__unit_t *un, int r,
                       const unsigned char *wire, void *shard);

/* state.c. [*lo, *lo + *n): the range of `state` of unit un this rank holds (whatever the
 * residency): the fp32 master with 16-bit compute: stage 0 the whole unit, else the owned shard;
 * with fp32 compute (the parameters): stage 3's shard, else the whole unit. m, v: stage 0 the
 * whole unit, else the owned shard. */
void zero__optim_held_range(const zero_engine_t *eng, const zero__unit_t *un,
                            zero_engine_state_t state, size_t *lo, size_t *n);
/* The residency that keeps the optimizer's states in the units' buffers (map: base +
 * offset, unmap: nothing). */
zero__optim_residency_t zero__state_residency_ram(zero_engine_t *eng);
/* Replace where the optimizer's states live (tests; an offload residency). Only between steps,
 * with no tile mapped; the new residency must hold the states' current values. */
void zero__engine_set_residency(zero_engine_t *eng, const zero__optim_residency_t *res);

/* q8state.c: 8-bit Adam states (params.optim_state_dtype int8; engine.h). Blocks of
 * ZERO__Q8DYN_BLOCK elements at multiples of it in the unit buffer; a block holding any element
 * of a tensor of fewer than ZERO__Q8_MIN_SIZE elements keeps fp32 m and v. */
#define ZERO__Q8_MIN_SIZE 4096
/* The quantum of a unit's padding per rank of its group: 256 with 8-bit states, else 16. */
static inline size_t zero__pad_quantum(const zero_engine_t *eng) {
    return eng->q8 ? 256 : ZERO__ALIGN_ELEMS;
}
/* Blocks of [lo, lo + n) (multiples of 256) that keep fp32 states, of tensors at offsets[t]
 * with counts[t] elements. */
size_t zero__q8_fp32_blocks(const size_t *offsets, const size_t *counts, int tensors, size_t lo,
                            size_t n);
/* Bytes of the 8-bit states of n held elements of which fp32_blocks blocks keep fp32 states:
 * codes of m and v (1 byte each per element), absmax of m and v and a block index (4 bytes each
 * per block), fp32 m and v of the fp32 blocks. */
uint64_t zero__q8_state_bytes(uint64_t n, uint64_t fp32_blocks);
/* Unit un's states over its held range (zero__optim_held_range), zero. */
zero_status_t zero__q8_alloc(zero_engine_t *eng, zero__unit_t *un);
void zero__q8_free(zero__unit_t *un);
uint64_t zero__q8_unit_bytes(const zero__unit_t *un); /* what it holds now (staging included) */
/* The step of [base, base + span) of unit `unit` (its held range): for each run of blocks, m
 * and v dequantized (fp32 blocks copied), zero__adamw_fused on each tensor's part with its decay
 * (and on the gaps, which stay zero), then the blocks quantized again with their new absmax:
 * bitsandbytes' order. master: its fp32 master (base's element first); lp, g as in step.c. */
zero_status_t zero__q8_update(zero_engine_t *eng, int unit, size_t base, size_t span, float *master,
                              void *lp, void *g, zero_dtype_t gdt, float gscale, int zero_g,
                              float lr, int64_t tstep);
/* onebit.c: DeepSpeed's 1-bit Adam (params.onebit; engine.h). */
/* The compression stage: steps after the first freeze_step. During backward and before the
 * step's count moves (eng->step completed steps) a unit of more than one rank then keeps its
 * gradient local in its working buffer, summed over micro-steps, unreduced. */
static inline int zero__onebit_local(const zero_engine_t *eng, const zero__unit_t *un) {
    return eng->params.onebit && un->grp->size > 1 && eng->step >= eng->params.freeze_step;
}
/* A tensor of n elements padded as DeepSpeed pads it for N ranks: to N x lcm(N, 8). */
size_t zero__onebit_padded(size_t n, int N);
/* Bytes of one rank's block in either phase of the compressed all-reduce of n (padded)
 * elements over N ranks: its fp32 scale and n / N sign bits. */
size_t zero__onebit_block_bytes(size_t n, int N);
/* Bytes of unit un's error buffers and scratch by its tensors' counts (the theory; 0 for a unit
 * of one rank or without 1-bit Adam), and what it holds. */
uint64_t zero__onebit_theory_bytes(const zero_engine_t *eng, const zero__unit_t *un);
uint64_t zero__onebit_unit_bytes(const zero__unit_t *un);
/* Bytes this rank sends (inter: to other nodes) in unit un's compressed all-reduces of a step. */
uint64_t zero__onebit_comm_bytes(const zero_engine_t *eng, const zero__unit_t *un, int inter);
zero_status_t zero__onebit_alloc(zero_engine_t *eng, zero__unit_t *un);
void zero__onebit_free(zero__unit_t *un);
/* The worker side of one compressed all-reduce: x += err, the RMS scale s = |x|_2 / sqrt(n)
 * (float64 sum in index order, rounded once), bit i of signs (LSB first) = x_i >= 0 (sign(0) =
 * +1), err = x - s sign(x). Returns s. n a multiple of 8. */
float zero__onebit_compress(float *x, float *err, size_t n, uint8_t *signs);
/* The step of unit `unit` in the compression stage (tstep > freeze_step): per tensor, m from
 * the gradient g (gdt, scaled by gscale; zeroed), m averaged by the compressed all-reduce over
 * the unit's group (one rank: kept), then the update with the frozen v into the master and, with
 * 16-bit compute, the parameters (onebit.c). */
zero_status_t zero__onebit_update(zero_engine_t *eng, int unit, void *g, zero_dtype_t gdt,
                                  float gscale, float lr, int64_t tstep);

/* zero_engine_state_read (out) / write (in) of m or v, [offset, offset + count) inside the held
 * range: reads dequantize, writes are staged in fp32 and quantized at the unit's next update or
 * read, so that a checkpoint's states come back exactly (q8state.c). */
zero_status_t zero__q8_io(zero_engine_t *eng, zero__unit_t *un, zero_engine_state_t state,
                          size_t offset, size_t count, float *out, const float *in);

/* swap.c: the optimizer's states in swap files (offload_optimizer device nvme). */
/* An offload block's keys (block: "offload_optimizer", "offload_param"; files and buffers name
 * what its path and its buffer_count hold, for the messages); with device nvme a path and
 * min_buffers to 64 buffers. */
zero_status_t zero__offload_check(const zero_offload_params_t *o, const char *block,
                                  const char *files, int min_buffers, const char *buffers);
zero_status_t zero__swap_check_params(const zero_engine_params_t *p); /* the offload keys */
zero_status_t zero__swap_init(zero_engine_t *eng);            /* nothing unless device is nvme */
zero_status_t zero__swap_add_unit(zero_engine_t *eng, int u); /* its file, before its fill */
void zero__swap_drop_unit(zero_engine_t *eng, int u);         /* a failed declaration */
/* Finish every write (end of a step, of a unit's fill); the first I/O error. */
zero_status_t zero__swap_sync(zero_engine_t *eng);
/* A unit's update in backward is done: post the write of the sub-group still current (else only
 * the next unit's update would) and read ahead; the error of posting it. */
zero_status_t zero__swap_leave(zero_engine_t *eng);
/* Tests only: unit u's optimizer swap file (m, v, and with 16-bit compute the master), or NULL. */
zero__aio_file_t *zero__swap_file(const zero_engine_t *eng, int u);
/* overlap_step: the first sub-group of unit's states has been read (1 without swap): its update
 * would not wait for it. If no slot holds it, its read is posted ahead when a slot is free. */
int zero__swap_ready(zero_engine_t *eng, int unit);
zero__optim_residency_t zero__swap_residency(zero_engine_t *eng);
/* Elements of a sub-group (the step cuts its tiles at multiples of it from the held range's
 * start), 0 without swap; the RAM it holds (staging buffers, page checksums: ZERO_MEM_OFFLOAD);
 * bytes of the swap files. */
size_t zero__swap_tile_elems(const zero_engine_t *eng);
size_t zero__swap_memory_bytes(const zero_engine_t *eng);
uint64_t zero__swap_disk_bytes(const zero_engine_t *eng);
void zero__swap_free(zero_engine_t *eng);

/* uswap.c: stage 3's per-unit swap files: parameter shards (offload_param device nvme) and, with
 * offload_optimizer at nvme too, gradient accumulators. */
zero_status_t zero__pswap_check_params(const zero_engine_params_t *p); /* the offload_param keys */
zero_status_t zero__pswap_init(zero_engine_t *eng); /* nothing unless offload_param is nvme */
/* Unit u's files (shard, and accumulator with gswap), before its fill. */
zero_status_t zero__pswap_add_unit(zero_engine_t *eng, int u);
void zero__pswap_drop_unit(zero_engine_t *eng, int u); /* a failed declaration */
/* The unit's shard (S_u compute-dtype elements) in *ptr, resident and pinned until the unmap
 * (written: it was changed). Without offload the shard itself, and the unmap does nothing. An
 * I/O error or a checksum mismatch is the aio layer's named error. */
zero_status_t zero__shard_map(const zero_engine_t *eng, const zero__unit_t *un, void **ptr);
void zero__shard_unmap(const zero_engine_t *eng, const zero__unit_t *un, int written);
/* Post the write of un's changed shard now (after its update), not when its buffer is needed. */
zero_status_t zero__shard_write_behind(const zero_engine_t *eng, const zero__unit_t *un);
/* 1 when a map of un would find a buffer now (it is resident or one is unpinned). */
int zero__pswap_can_map(const zero_engine_t *eng, const zero__unit_t *un);
/* The same for un's accumulator (1 without gswap). */
int zero__acc_can_map(const zero_engine_t *eng, const zero__unit_t *un);
/* overlap_step: un's shard and (written this step) accumulator are resident in their slots, no
 * read or write of theirs still running (1 without the swap files): its update would not wait. */
int zero__uswap_ready(const zero_engine_t *eng, const zero__unit_t *un);
/* Post the read of un's shard if a buffer is free, or clean (a finished write collected),
 * unpinned, not read ahead itself and not holding one of the units keep[0..nkeep) (needed
 * before un); never waits. *posted 0: no buffer was (un is not resident). An error: a collected
 * write had failed (its data is not on disk). */
zero_status_t zero__pswap_read_ahead(const zero_engine_t *eng, const zero__unit_t *un,
                                     const int *keep, int nkeep, int *posted);
/* The unit's accumulator (S_u grad_accum_dtype elements) in *ptr until the unmap; without gswap
 * un->acc itself. When this step has written none yet, fill ZERO__ACC_ZERO gives zeros and
 * ZERO__ACC_OVERWRITE leaves the contents undefined (the caller stores every element). The unmap
 * with written posts its write and takes its sum of squares (un->acc_sumsq). Failures are
 * recorded on the engine (zero__engine_fail) and named; with fill | ZERO__ACC_BACKWARD (backward's
 * accumulation, before the step's control record) and more than one rank, a failed read is
 * recorded as fetch_failure instead and the map gives zeros, so that this rank's collectives go
 * on and the step fails on every rank. */
#define ZERO__ACC_OVERWRITE 0
#define ZERO__ACC_ZERO 1
#define ZERO__ACC_BACKWARD 2
/* written of zero__acc_unmap: the update consumed it (zeroed it): its slot is not written back,
 * the file stays stale (acc_on_disk ends with the step). With overlap_step a unit's last landing
 * of the step is not written through either: its update reads it from the slot. */
#define ZERO__ACC_SPENT 2
zero_status_t zero__acc_map(zero_engine_t *eng, zero__unit_t *un, int fill, void **ptr);
zero_status_t zero__acc_unmap(zero_engine_t *eng, zero__unit_t *un, int written);
/* Post the read of un's accumulator ahead (it was written this step); never waits. An error: a
 * collected write had failed, as for zero__pswap_read_ahead. */
zero_status_t zero__acc_read_ahead(zero_engine_t *eng, const zero__unit_t *un);
/* Tests only: unit u's parameter (grads 0) or accumulator (1) swap file, NULL if none. */
zero__aio_file_t *zero__uswap_file(const zero_engine_t *eng, int grads, int u);
/* After the step's update: write the changed data back and empty every unpinned buffer. */
zero_status_t zero__pswap_sync(zero_engine_t *eng);
uint64_t zero__pswap_disk_bytes(const zero_engine_t *eng); /* both kinds of files */
size_t zero__pswap_memory_bytes(const zero_engine_t *eng); /* buffers + checksums (OFFLOAD) */
void zero__pswap_free(zero_engine_t *eng);

/* Held as a shard (stage 3, not persistent), in RAM or in a parameter swap file. */
static inline int zero__unit_sharded(const zero__unit_t *un) { return un->shard || un->poff; }
/* ZeRO++ hpZ applies to un: on, a non-persistent stage-3 unit sharded over the world. */
static inline int zero__hpz_unit(const zero_engine_t *eng, const zero__unit_t *un) {
    return eng->hpz && eng->pol.shard_params && !un->persistent && un->grp == &eng->groups[0];
}
/* hpZ: the elements of un's secondary shard, P_u / h (and of each rank's part of an in-group
 * gather). */
static inline size_t zero__hpz_count(const zero_engine_t *eng, const zero__unit_t *un) {
    return un->padded_count / (size_t)eng->hpz->size;
}
/* hpZ: the secondary shards no longer hold the parameters (a step or a write changed them). */
void zero__hpz_invalidate(zero_engine_t *eng);

/* Elements of un's working gradient buffer: its slots' partials, P_u each. */
static inline size_t zero__work_count(const zero__unit_t *un) {
    return (size_t)un->slots * un->padded_count;
}

/* The first element of unit un this rank owns (of its group's shards). */
static inline size_t zero__shard_lo(const zero__unit_t *un) {
    return (size_t)un->grp->rank * un->shard_count;
}

/* xfer.c: the only caller of the comm API in the engine. Kinds are the public ones plus checks
 * (fingerprint, replicas), which run between steps and are not counted in one. */
typedef int zero__xfer_kind_t; /* a zero_xfer_kind_t or ZERO__XFER_CHECK */
#define ZERO__XFER_CHECK ZERO_XFER_KIND_COUNT
/* Group 0 from the caller's communicator (NULL or one rank: a world of one). */
zero_status_t zero__xfer_world_init(zero_engine_t *eng, zero_comm_t *parent);
/* Collective over the world: a new group of the ranks calling with the same color, its copy
 * numbering from every rank's color (ZERO_ERR_INVALID_ARG when the groups differ in size). */
zero_status_t zero__xfer_group_split(zero_engine_t *eng, int color, int *group_out);
void zero__xfer_groups_free(zero_engine_t *eng);
/* All-gather / reduce-scatter (sum) of n elements per rank over group g: posted when req is
 * given, else blocking (all-gather only). */
zero_status_t zero__xfer_gather(zero_engine_t *eng, const zero__group_t *g, zero__xfer_kind_t kind,
                                const void *send, void *recv, size_t n, zero_dtype_t dt,
                                zero_comm_request_t **req);
zero_status_t zero__xfer_reduce_scatter(zero_engine_t *eng, const zero__group_t *g,
                                        zero__xfer_kind_t kind, const void *send, void *recv,
                                        size_t n, zero_dtype_t dt, zero_comm_request_t **req);
/* Stage 3's fetch gather of unit un from `shard` (its S_u elements) into un->full, posted
 * (un->gather). With qwZ the shard is quantized into un->qsend and the gather carries
 * zero__xfer_param_wire_bytes per rank; zero__xfer_gather_params_wait then dequantizes every
 * rank's part into un->full. Either way the wait is the one to call. */
zero_status_t zero__xfer_gather_params(zero_engine_t *eng, zero__unit_t *un, const void *shard);
zero_status_t zero__xfer_gather_params_wait(zero_engine_t *eng, zero__unit_t *un);
/* Blocking all-to-all over group g: block j (n elements) of send to group rank j. */
zero_status_t zero__xfer_all_to_all(zero_engine_t *eng, const zero__group_t *g,
                                    zero__xfer_kind_t kind, const void *send, void *recv, size_t n,
                                    zero_dtype_t dt);
/* ZeRO++ qgZ: whether group g's gradient reductions are int4 (qgz.h); the bytes this rank sends
 * (inter: to other nodes) in one gradient reduction of unit un (qgZ, the plain reduce-scatter of
 * its shard, or with source slots their all-to-alls); post bucket b's int4 reduce-scatter of the
 * segments seg (summing to B) from send (n blocks of B) into recv, counted as its two all-to-alls.
 */
int zero__xfer_qgz_group(const zero_engine_t *eng, const zero__group_t *g);
uint64_t zero__xfer_grad_bytes(const zero_engine_t *eng, const zero__unit_t *un, int inter);
zero_status_t zero__xfer_qgz_post(zero_engine_t *eng, zero__bucket_t *b, const void *send,
                                  void *recv, const size_t *seg, int nseg);
/* Bytes one rank's part of un's fetch gather occupies on the wire: S_u compute elements, or
 * with qwZ the quantized shard. */
uint64_t zero__xfer_param_wire_bytes(const zero_engine_t *eng, const zero__unit_t *un);
/* In-place maximum of n int32 over group g (checks). */
zero_status_t zero__xfer_max(zero_engine_t *eng, const zero__group_t *g, int32_t *buf, size_t n);
/* Every rank's status gathered over the world (4 bytes each): *bad the first rank whose status
 * is not ZERO_OK (-1: none) and *theirs that status. Returns the gather's own status. */
zero_status_t zero__xfer_statuses(zero_engine_t *eng, zero__xfer_kind_t kind, zero_status_t mine,
                                  int *bad, zero_status_t *theirs);
zero_status_t zero__xfer_wait(zero_comm_request_t *req);
void zero__xfer_end_step(zero_engine_t *eng); /* the step's counts become the last step's */
/* Bytes this rank sends (inter: only those to other nodes) in one coll of n elements of dt over
 * group g, as the comm layer counts them (flat or hierarchical: zero_comm_coll_bytes). */
uint64_t zero__xfer_bytes(const zero__group_t *g, zero_coll_t coll, size_t n, zero_dtype_t dt,
                          int inter);
void zero__xfer_theory(const zero_engine_t *eng, uint64_t out[ZERO_XFER_KIND_COUNT]);
/* The same formula counting only the bytes to ranks of other nodes, summed over kinds. */
uint64_t zero__xfer_inter_node_theory(const zero_engine_t *eng);

#endif /* ZERO_ENGINE_INTERNAL_H */
