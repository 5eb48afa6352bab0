/* estimate.c — the memory a rank's engine will need for a model, computed from the units'
 * declarations without allocating anything: the same padded layout as zero_engine_add_unit and
 * the same per-stage buffers as alloc_unit (layout.c), plus the transient pools the memory
 * theory of engine.h describes (reduce buckets, stage 2-3 gradient working buffers, the stage-3
 * gather pool), sized for their worst case in a step.
 *
 * Not here: the model's activations (the model adds its own), the process's own overhead.
 * Invariants: must follow layout.c and buckets.c; tests/train/test_train_memcheck.c compares the
 * estimate with the peak the accounting allocator measures in real runs.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

/* The k largest of n values, summed (n small: the units of a model). */
static uint64_t sum_largest(const uint64_t *v, int n, int k) {
    uint64_t *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return 0;
    memcpy(tmp, v, (size_t)n * sizeof *tmp);
    uint64_t sum = 0;
    for (int j = 0; j < k && j < n; j++) {
        int best = j;
        for (int i = j + 1; i < n; i++)
            if (tmp[i] > tmp[best]) best = i;
        uint64_t t = tmp[j];
        tmp[j] = tmp[best];
        tmp[best] = t;
        sum += tmp[j];
    }
    free(tmp);
    return sum;
}

/* The sum of the distinct values (one buffer per padded size). */
static uint64_t sum_distinct(const uint64_t *v, int n) {
    uint64_t sum = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = v[j] == v[i];
        if (!seen) sum += v[i];
    }
    return sum;
}

zero_status_t zero_engine_estimate_memory(const zero_engine_params_t *p, int world,
                                          const zero_unit_decl_t *units, int unit_count,
                                          zero_memory_estimate_t *out) {
    if (!p || !out || (unit_count > 0 && !units) || unit_count < 0)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_estimate_memory: NULL argument");
    if (world < 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_estimate_memory: world %d is invalid (expected >= 1)",
                           world);
    if (p->stage < 0 || p->stage > 3)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_engine_estimate_memory: stage %d is invalid (expected 0..3)",
                           p->stage);
    memset(out, 0, sizeof *out);
    const uint64_t ce = zero_dtype_size(p->compute_dtype),
                   ae = zero_dtype_size(p->grad_accum_dtype);
    if (!ce || !ae)
        return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_estimate_memory: invalid dtype");
    const int lowp = p->compute_dtype != ZERO_DTYPE_FP32;
    const int q8 = p->optim_state_dtype == ZERO_DTYPE_INT8;
    const zero__stage_policy_t pol = zero__stage_policy(p, world);
    const uint64_t N = (uint64_t)world, f = sizeof(float), q = N * ZERO__ALIGN_ELEMS;
    int total_units = 0;
    for (int i = 0; i < unit_count; i++) total_units += units[i].repeat > 0 ? units[i].repeat : 1;
    /* per unit, in one block: padded and its shard count, padded over the non-persistent units,
     * source slots (the working buffer's elements k P_u, and the receive buffer of a slotted
     * unit over more than one rank, k P_u, else 0), and two flags */
    const size_t nu = total_units ? (size_t)total_units : 1;
    uint64_t *block = calloc(5 * nu + (2 * nu + 7) / 8, sizeof *block);
    if (!block)
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "zero_engine_estimate_memory: out of memory");
    uint64_t *padded = block, *np = padded + nu, *shards = np + nu, *work = shards + nu,
             *srecv = work + nu;
    char *tied = (char *)(srecv + nu), *np_tied = tied + nu;
    int n = 0, n_np = 0;
    uint64_t P = 0, S = 0, params = 0, optim = 0, grads = 0, P_np = 0;
    /* offload_optimizer nvme: m and v (and the 16-bit compute's master) in swap files */
    const int swap = p->offload_optimizer.device == ZERO_OFFLOAD_NVME;
    const uint64_t swapped = lowp ? 3 : 2;
    uint64_t disk = 0, max_held = 0;
    /* offload_param nvme (stage 3): the non-persistent shards in swap files, whole pages each;
     * in RAM buffer_count buffers of the largest and the files' checksums */
    const int pswap = p->offload_param.device == ZERO_OFFLOAD_NVME && pol.shard_params;
    uint64_t pdisk = 0, max_pshard = 0;
    /* and with offload_optimizer nvme too, their gradient accumulators (uswap.c: two buffers) */
    const int gswap = pswap && swap;
    uint64_t gdisk = 0, max_gshard = 0;
    const int hpz = pol.shard_params && world > 1 && p->hpz_partition_size > 1 &&
                            world % p->hpz_partition_size == 0
                        ? p->hpz_partition_size
                        : 1;
    uint64_t N_min = N; /* the smallest partition group: the packed receive buffer's divisor */
    for (int i = 0; i < unit_count; i++) {
        const int g = units[i].group_size > 0 ? units[i].group_size : world;
        const int k = units[i].slots > 0 ? units[i].slots : 1;
        if (g > world || world % g || (k != 1 && k != world / g)) {
            free(block);
            return zero__error(ZERO_ERR_INVALID_ARG,
                               "zero_engine_estimate_memory: unit %d has group_size %d and slots "
                               "%d (expected a divisor of the world size %d, or 0 for the world, "
                               "and slots 0, 1 or world / group_size)",
                               i, units[i].group_size, units[i].slots, world);
        }
        if (k == 1) /* slotted units are never packed */
            N_min = (uint64_t)g < N_min ? (uint64_t)g : N_min;
    }
    for (int i = 0; i < unit_count; i++) {
        /* a stacked unit's group (zero_engine_add_unit_in): the ZeRO formulas with N = G */
        const uint64_t G = (uint64_t)(units[i].group_size > 0 ? units[i].group_size : world);
        const uint64_t K = (uint64_t)(units[i].slots > 0 ? units[i].slots : 1);
        uint64_t count = 0, off = 0, fp32_blocks = 0;
        int is_tied = 0;
        const int T = units[i].tensor_count;
        /* with 8-bit states: the tensors' places, for the blocks that keep fp32 states */
        size_t *toff = q8 ? malloc(2 * (size_t)(T > 0 ? T : 1) * sizeof *toff) : NULL;
        if (q8 && !toff) {
            free(block);
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "zero_engine_estimate_memory: out of memory");
        }
        for (int t = 0; t < T; t++) {
            is_tied |= (units[i].tensors[t].flags & ZERO_TENSOR_TIED) != 0;
            uint64_t e = 1;
            for (int k = 0; k < units[i].tensors[t].ndim; k++) e *= units[i].tensors[t].shape[k];
            if (toff) {
                toff[t] = (size_t)off;
                toff[T + t] = (size_t)e;
            }
            count += e;
            off += zero__tensor_span(e);
        }
        const uint64_t Pu = zero__align_up(off, G * (q8 ? 256 : ZERO__ALIGN_ELEMS)), Su = Pu / G;
        /* rank 0's range of m and v */
        if (toff)
            fp32_blocks = zero__q8_fp32_blocks(toff, toff + T, T, 0, pol.shard_optim ? Su : Pu);
        free(toff);
        const int persistent = pol.shard_params && (int64_t)count <= p->persistence_threshold_elems;
        const int reps = units[i].repeat > 0 ? units[i].repeat : 1;
        for (int r = 0; r < reps; r++) {
            out->param_count += count;
            tied[n] = is_tied;
            work[n] = K * Pu;
            srecv[n] = K > 1 && G > 1 ? K * Pu : 0;
            shards[n] = Su;
            padded[n++] = Pu;
            P += Pu;
            S += Su;
            if (pswap && !persistent) {
                const uint64_t b = zero__align_up(ce * Su, ZERO__AIO_ALIGN);
                pdisk += b;
                max_pshard = b > max_pshard ? b : max_pshard;
            } else {
                params += ce * (!pol.shard_params || persistent ? Pu : Su);
            }
            /* hpZ: the secondary shard of every sharded unit, P_u / h */
            if (hpz > 1 && !persistent && G == N) params += ce * (Pu / (uint64_t)hpz);
            if (pol.shard_params && !persistent) {
                np_tied[n_np] = (char)is_tied;
                np[n_np++] = Pu;
                P_np += Pu;
            }
            const uint64_t states = pol.shard_optim ? Su : Pu;
            if (swap) { /* in the unit's swap file, each state's region whole pages */
                disk += (uint64_t)swapped * zero__align_up(f * states, ZERO__AIO_ALIGN);
                max_held = states > max_held ? states : max_held;
            } else {
                /* master (16-bit), Adam m and v (fp32 or 8-bit) */
                optim +=
                    q8 ? f * states * (lowp ? 1 : 0) + zero__q8_state_bytes(states, fp32_blocks)
                       : f * states * (lowp ? 3 : 2);
            }
            if (gswap && !persistent) {
                const uint64_t b = zero__align_up(ae * Su, ZERO__AIO_ALIGN);
                gdisk += b;
                max_gshard = b > max_gshard ? b : max_gshard;
                grads += pol.shard_grads ? 0 : ce * K * Pu;
            } else if (!pol.shard_grads && G == 1 && K == 1 && p->grad_accum_steps == 1) {
                grads += ce * Pu; /* one buffer, working and accumulator (zero__one_grad_buffer) */
            } else {
                grads += ae * Su + (pol.shard_grads ? 0 : ce * K * Pu);
            }
        }
    }
    out->padded_param_count = (size_t)P;
    /* Stages 2-3: the working gradient buffers of backward: the unit being differentiated (the
     * largest), a unit with a TIED tensor (its buffer stays open across backward, collecting
     * both uses; else the next largest unit), and with overlap_comm over N > 1 ranks one more
     * largest unit whose reduce-scatter is still in flight. Stage 0 with 16-bit compute and
     * N > 1: the landing buffer of the gradient all-gather, one per padded size. A unit with
     * source slots: its working buffer is k P_u, and over more than one rank (every stage) its
     * reduction borrows a receive buffer of k P_u (one per size). */
    uint64_t grad_pool = ce * sum_distinct(srecv, n);
    if (pol.shard_grads) {
        int big = 0;
        for (int i = 1; i < n; i++)
            if (work[i] > work[big]) big = i;
        uint64_t second = 0;
        for (int i = 0; i < n; i++)
            if (i != big && (tied[i] ? work[i] + (1ull << 62) : work[i]) > second)
                second = tied[i] ? work[i] + (1ull << 62) : work[i];
        second &= (1ull << 62) - 1;
        grad_pool += ce * (work[big] + second + (p->overlap_comm && N > 1 ? work[big] : 0));
    }
    if (!pol.shard_optim && lowp && N > 1) grad_pool += ae * sum_distinct(padded, n);
    /* Reduce buckets (buckets.c): two slots of send (B) and receive (B / N) buffers once N > 1,
     * B = reduce_bucket_bytes / 4 rounded down to a multiple of 16N, capped at P; with
     * accumulation each slot also receives the largest direct unit's shard. */
    uint64_t comm = 0;
    if (N > 1) {
        uint64_t B =
            (uint64_t)(p->reduce_bucket_bytes > 0 ? p->reduce_bucket_bytes : 0) / f / q * q;
        if (B > P) B = P;
        uint64_t max_direct = 0;    /* the largest direct unit's shard */
        for (int i = 0; i < n; i++) /* (slotted units are never direct) */
            if (2 * padded[i] > B && work[i] == padded[i] && shards[i] > max_direct)
                max_direct = shards[i];
        /* Direct units reduce into a separate receive buffer when the accumulator cannot take
         * the sum itself: it holds one already (accumulation), or its dtype differs. */
        const int drecv = p->grad_accum_steps > 1 || p->grad_accum_dtype != p->compute_dtype;
        comm = ZERO__BUCKET_SLOTS * ce * (B + B / N_min + (drecv ? max_direct : 0));
        if (p->quantized_gradients) {
            /* qgZ (qgz.h): each slot's scratch for its largest call, blocks of Bq elements and
             * W <= Bq / 2 + 4 (Bq / 256 + 1) + 5 per unit wire bytes: 2 N W + 2 M W + 4 Bq
             * (M <= N nodes) and the 64-byte roundings; LoCo: 4 P of error buffers */
            const uint64_t Bq = (B / N > max_direct ? B / N : max_direct);
            const uint64_t W = Bq / 2 + 4 * (Bq / 256 + 1) + 5 * (uint64_t)n;
            comm += ZERO__BUCKET_SLOTS * (4 * N * W + 4 * Bq + 5 * 64);
            if (p->loco) grads += 4 * P;
        }
    }
    /* Stage 3: the gather pool holds the units in use (a block and a tied unit), plus what the
     * prefetch keeps ahead (up to stage3_prefetch_bucket_size elements, whole units). */
    if (pol.shard_params && n_np > 0) {
        int k = 2;
        uint64_t ahead = 0;
        uint64_t smallest = np[0];
        for (int i = 1; i < n_np; i++)
            if (np[i] < smallest) smallest = np[i];
        while (p->prefetch_bucket_elems > 0 && k < n_np &&
               ahead < (uint64_t)p->prefetch_bucket_elems) {
            ahead += smallest;
            k++;
        }
        uint64_t gathered = sum_largest(np, n_np, k);
        if (gathered > P_np) gathered = P_np;
        /* A second bound, per padded size p (the pool's key): in use at once are one unit
         * and the units with a TIED tensor (held across the step, as above); ahead at most
         * bucket / p units of size p, since the prefetch posts a gather only while the
         * prefetched elements stay within the bucket. Tighter when a small unit sits beside
         * large ones: the count above, by the smallest unit, takes a 0.8M-element embedding
         * beside 28M-element blocks for 64 units ahead where one block fits
         * (docs/benchmarks.md, "ZeRO-Infinity"). */
        uint64_t per_size = 0;
        for (int i = 0; i < n_np; i++) {
            int seen = 0;
            uint64_t count = 0, in_use = 0;
            for (int j = 0; j < n_np; j++) {
                seen |= j < i && np[j] == np[i];
                if (np[j] != np[i]) continue;
                count++;
                in_use += np_tied[j] != 0;
            }
            if (seen) continue;
            in_use += in_use < count; /* the one untied unit in use */
            const uint64_t most =
                in_use +
                (p->prefetch_bucket_elems > 0 ? (uint64_t)p->prefetch_bucket_elems / np[i] : 0);
            per_size += np[i] * (count < most ? count : most);
        }
        if (per_size < gathered) gathered = per_size;
        comm += ce * gathered;
        /* qwZ: the quantized shard of each gather in flight (S + 4 ceil(S / 256) bytes, at
         * most S + 4 S / 256 + 4 for each of the n_np units) */
        if (pol.quantize_weights) comm += gathered / N + 4 * (gathered / N / 256 + (uint64_t)n_np);
        /* fp8 weights (fp8w.c): each gather in flight holds its packed part and the N parts
         * received, (N + 1) W bytes with W <= ce S + 4 (S / 128 + a scale per ragged block, at
         * most one per tensor: 16 per unit counted) whatever share of the unit is flagged */
        if (p->fp8_weights && N > 1)
            comm +=
                (N + 1) * (ce * (gathered / N) + 4 * (gathered / N / 128 + 16 * (uint64_t)n_np));
    }
    /* zero_engine_fingerprint at the end of a run gathers each unit in fp32 when the fp32
     * weights are sharded (16-bit compute at stages 1-3 over N > 1 ranks), one at a time. */
    if (lowp && pol.shard_optim && N > 1) comm += f * sum_largest(padded, n, 1);
    free(block);
    out->bytes[ZERO_MEM_PARAMS] = (size_t)params;
    out->bytes[ZERO_MEM_GRADS] = (size_t)(grads + grad_pool);
    out->bytes[ZERO_MEM_OPTIM] = (size_t)optim;
    out->bytes[ZERO_MEM_COMM] = (size_t)comm;
    out->bytes[ZERO_MEM_OTHER] = lowp ? ZERO__SCRATCH_COUNT * sizeof(float) : 0;
    if (swap) {
        /* swap.c: buffer_count staging buffers of one sub-group of every swapped state, a
         * checksum per 4 KiB of file, and at the end of a run the fingerprint's read of a whole
         * held range (the largest) */
        uint64_t G = (uint64_t)p->sub_group_elems / 1024 * 1024;
        if (G < 1024) G = 1024;
        const uint64_t group = G < max_held ? G : (max_held + 1023) / 1024 * 1024;
        out->bytes[ZERO_MEM_OFFLOAD] =
            (size_t)((uint64_t)p->offload_optimizer.buffer_count * swapped * group * f +
                     disk / 4096 * 4 + zero__align_up(max_held * f, ZERO__AIO_ALIGN));
        out->disk_bytes = disk;
    }
    if (pswap) {
        out->bytes[ZERO_MEM_OFFLOAD] +=
            (size_t)((uint64_t)p->offload_param.buffer_count * max_pshard + pdisk / 4096 * 4 +
                     ZERO__GSWAP_SLOTS * max_gshard + gdisk / 4096 * 4);
        out->disk_bytes += pdisk + gdisk;
    }
    out->model_state_bytes[0] = (size_t)params;
    out->model_state_bytes[1] = (size_t)grads;
    out->model_state_bytes[2] = (size_t)optim;
    for (int c = 0; c < ZERO_MEM_CATEGORY_COUNT; c++) out->total_bytes += out->bytes[c];
    return ZERO_OK;
}
