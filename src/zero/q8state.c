/* q8state.c — 8-bit Adam states in the engine (params.optim_state_dtype int8, bitsandbytes'
 * AdamW8bit): their allocation, the step over a unit's held range and fp32 access for
 * checkpoints. The format and the arithmetic are kernels/q8dyn.h's.
 *
 * Layout: with 8-bit states every unit is padded to a multiple of group size x 256 elements
 * (layout.c), so each rank's range of m and v (zero__optim_held_range: the whole unit at stage 0,
 * else the owned shard) starts and ends on a multiple of 256, and the blocks of 256 sit at the
 * same offsets of the unit buffer at every stage and world size. What the step computes for an
 * element depends only on its block, which keeps stages and world sizes bitwise equal and lets
 * a checkpoint carry blocks between world sizes unchanged. Tensors keep the engine's 16-element
 * alignment, so a block may hold the end of one tensor and the start of the next, which then
 * share the block's absmax (bitsandbytes quantizes each tensor apart; its last block is short,
 * here the gap after a tensor is zeros, which do not change a max).
 *
 * Small tensors: a block holding any element of a tensor of fewer than ZERO__Q8_MIN_SIZE = 4096
 * elements (bitsandbytes' min_8bit_size) keeps fp32 m and v, in m32 / v32 at slot[b] x 256 (else
 * slot[b] = -1). Up to 255 elements of a large neighbour sharing such a block get fp32 states too.
 *
 * Checkpoints hold fp32 m and v (docs/checkpoint-format.md). A read gives map[code] x absmax,
 * except that the signed map has no -1: in an m block without code 255 (+1), whose absmax came
 * from a negative value, code 0 reads as -absmax instead of -0.99296875 absmax. Then the largest
 * |value| read is the absmax again (+1 is code 255, read as +absmax), every value divided by it
 * is within 2 ulp of its map entry, far from the midpoints, and writing the block back gives the
 * same codes and absmax: resume and resharding are exact. (Not for a block whose absmax is the
 * floor 1e-38 and whose values are subnormal.) Writes are staged in an fp32 copy of the held
 * range and quantized at the unit's next update or state read: a checkpoint writes a block in
 * pieces (at the old world size's shard boundaries), and quantizing a piece beside a stale
 * remainder would not give the block's absmax. An fp32 checkpoint loaded into an 8-bit run is
 * quantized there (a conversion), and an 8-bit run's checkpoint loads into an fp32 run as the
 * dequantized states.
 */
#include "engine_internal.h"

#include "kernels/kmath.h"
#include "kernels/q8dyn.h"

#include <stdlib.h>
#include <string.h>

#define QB ZERO__Q8DYN_BLOCK
/* Blocks dequantized, updated and quantized together (32 KiB of fp32 m and v on the stack). */
#define CHUNK_BLOCKS 16

typedef struct zero__q8 {
    size_t lo, n, blocks; /* the held range [lo, lo + n) and its blocks */
    uint8_t *mc, *vc;     /* codes (n each): m on the signed map, v on the unsigned one */
    float *ma, *va;       /* absmax per block */
    int32_t *slot;        /* per block: -1 (8-bit) or its place in m32 / v32 */
    size_t nfp32;
    float *m32, *v32;         /* nfp32 x 256 each */
    float *stage_m, *stage_v; /* checkpoint writes (n each) until the next update; else NULL */
} zero__q8_t;

static int block_small(const size_t *offsets, const size_t *counts, int tensors, size_t a) {
    for (int t = 0; t < tensors; t++)
        if (counts[t] < ZERO__Q8_MIN_SIZE && offsets[t] < a + QB && offsets[t] + counts[t] > a)
            return 1;
    return 0;
}

size_t zero__q8_fp32_blocks(const size_t *offsets, const size_t *counts, int tensors, size_t lo,
                            size_t n) {
    size_t k = 0;
    for (size_t a = lo; a < lo + n; a += QB) k += (size_t)block_small(offsets, counts, tensors, a);
    return k;
}

uint64_t zero__q8_state_bytes(uint64_t n, uint64_t fp32_blocks) {
    return 2 * n + 3 * sizeof(float) * (n / QB) + 2 * sizeof(float) * QB * fp32_blocks;
}

/* The code of 0 on a map. */
static uint8_t zero_code(int is_signed) {
    const float *map = zero__q8dyn_map(is_signed);
    int c = 0;
    while (map[c] != 0.0f) c++;
    return (uint8_t)c;
}

zero_status_t zero__q8_alloc(zero_engine_t *eng, zero__unit_t *un) {
    size_t lo = 0, n = 0;
    zero__optim_held_range(eng, un, ZERO_ENGINE_STATE_ADAM_M, &lo, &n);
    ZERO_ASSERT(lo % QB == 0 && n % QB == 0);
    zero__q8_t *q = calloc(1, sizeof *q);
    if (!q) return ZERO_ERR_OUT_OF_MEMORY;
    un->q8 = q;
    q->lo = lo;
    q->n = n;
    q->blocks = n / QB;
    zero_mem_t *mem = eng->mem;
    const size_t nb = q->blocks ? q->blocks : 1;
    q->mc = zero_mem_alloc(mem, ZERO_MEM_OPTIM, n ? n : 1, 64);
    q->vc = zero_mem_alloc(mem, ZERO_MEM_OPTIM, n ? n : 1, 64);
    q->ma = zero_mem_alloc(mem, ZERO_MEM_OPTIM, nb * sizeof(float), 64);
    q->va = zero_mem_alloc(mem, ZERO_MEM_OPTIM, nb * sizeof(float), 64);
    q->slot = zero_mem_alloc(mem, ZERO_MEM_OPTIM, nb * sizeof(int32_t), 64);
    if (!q->mc || !q->vc || !q->ma || !q->va || !q->slot) return ZERO_ERR_OUT_OF_MEMORY;
    /* zeros, as zero__q8dyn_quantize encodes them: the code of 0 and the absmax floor */
    memset(q->mc, zero_code(1), n);
    memset(q->vc, zero_code(0), n);
    for (size_t b = 0; b < q->blocks; b++) {
        q->ma[b] = q->va[b] = 1e-38f;
        q->slot[b] = block_small(un->offsets, un->counts, un->tensor_count, lo + b * QB)
                         ? (int32_t)q->nfp32++
                         : -1;
    }
    if (q->nfp32) {
        q->m32 = zero_mem_calloc(mem, ZERO_MEM_OPTIM, q->nfp32 * QB * sizeof(float), 64);
        q->v32 = zero_mem_calloc(mem, ZERO_MEM_OPTIM, q->nfp32 * QB * sizeof(float), 64);
        if (!q->m32 || !q->v32) return ZERO_ERR_OUT_OF_MEMORY;
    }
    return ZERO_OK;
}

static void free_staging(zero__q8_t *q) {
    zero_mem_free(q->stage_m);
    zero_mem_free(q->stage_v);
    q->stage_m = q->stage_v = NULL;
}

void zero__q8_free(zero__unit_t *un) {
    zero__q8_t *q = un->q8;
    if (!q) return;
    free_staging(q);
    zero_mem_free(q->mc);
    zero_mem_free(q->vc);
    zero_mem_free(q->ma);
    zero_mem_free(q->va);
    zero_mem_free(q->slot);
    zero_mem_free(q->m32);
    zero_mem_free(q->v32);
    free(q);
    un->q8 = NULL;
}

uint64_t zero__q8_unit_bytes(const zero__unit_t *un) {
    const zero__q8_t *q = un->q8;
    if (!q) return 0;
    return zero__q8_state_bytes(q->n, q->nfp32) + (q->stage_m ? 2 * sizeof(float) * q->n : 0);
}

/* Block b's m and v in fp32 (the values the update starts from). */
static void load_block(const zero__q8_t *q, size_t b, float *m, float *v) {
    if (q->slot[b] >= 0) {
        memcpy(m, q->m32 + (size_t)q->slot[b] * QB, QB * sizeof *m);
        memcpy(v, q->v32 + (size_t)q->slot[b] * QB, QB * sizeof *v);
        return;
    }
    zero__q8dyn_dequantize(m, q->mc + b * QB, q->ma + b, QB, 1);
    zero__q8dyn_dequantize(v, q->vc + b * QB, q->va + b, QB, 0);
}

static void store_block(zero__q8_t *q, size_t b, const float *m, const float *v) {
    if (q->slot[b] >= 0) {
        memcpy(q->m32 + (size_t)q->slot[b] * QB, m, QB * sizeof *m);
        memcpy(q->v32 + (size_t)q->slot[b] * QB, v, QB * sizeof *v);
        return;
    }
    zero__q8dyn_quantize(q->mc + b * QB, q->ma + b, m, QB, 1);
    zero__q8dyn_quantize(q->vc + b * QB, q->va + b, v, QB, 0);
}

/* Block b of m (is_m) or v as a checkpoint reads it (see the top: the exact round trip). */
static void export_block(const zero__q8_t *q, size_t b, int is_m, float *x) {
    if (q->slot[b] >= 0) {
        memcpy(x, (is_m ? q->m32 : q->v32) + (size_t)q->slot[b] * QB, QB * sizeof *x);
        return;
    }
    const uint8_t *c = (is_m ? q->mc : q->vc) + b * QB;
    zero__q8dyn_dequantize(x, c, (is_m ? q->ma : q->va) + b, QB, is_m);
    if (!is_m || memchr(c, 255, QB)) return;
    for (size_t i = 0; i < QB; i++)
        if (c[i] == 0) x[i] = -q->ma[b];
}

/* The staged writes become the states. */
static void commit_staging(zero__q8_t *q) {
    if (!q->stage_m) return;
    for (size_t b = 0; b < q->blocks; b++)
        store_block(q, b, q->stage_m + b * QB, q->stage_v + b * QB);
    free_staging(q);
}

typedef struct update_job {
    const zero_engine_t *eng;
    const zero__unit_t *un;
    zero__q8_t *q;
    float *master;
    void *lp, *g;
    zero_dtype_t gdt;
    size_t gsize;
    float gscale;
    int zero_g;
    zero__adamw_hp_t hp_decay, hp_plain; /* hp_plain: no decay (NO_DECAY tensors, gaps) */
} update_job_t;

/* The end of the run of unit elements from e that one set of hyper-parameters covers (a
 * tensor's part, or the gap up to the next tensor) within [e, end), and its parameters. */
static size_t segment(const update_job_t *j, size_t e, size_t end, const zero__adamw_hp_t **hp) {
    const zero__unit_t *u = j->un;
    *hp = &j->hp_plain;
    for (int t = 0; t < u->tensor_count; t++) {
        const size_t a = u->offsets[t], b = a + u->counts[t];
        if (e >= a && e < b) {
            if (!(u->tensors[t].flags & ZERO_TENSOR_NO_DECAY)) *hp = &j->hp_decay;
            return ZERO_MIN(b, end);
        }
        if (a > e) end = ZERO_MIN(end, a); /* the gap ends where a later tensor starts */
    }
    return end;
}

/* Blocks [b0, b1) of the held range: a chunk at a time, its blocks loaded, each segment
 * updated by the fused AdamW kernel (gradient, master, 16-bit parameters at the same element),
 * its blocks stored with their new absmax. */
static void update_blocks(const update_job_t *j, size_t b0, size_t b1) {
    float m[CHUNK_BLOCKS * QB], v[CHUNK_BLOCKS * QB];
    const zero_engine_t *eng = j->eng;
    const size_t lo = j->q->lo;
    for (size_t c = b0; c < b1; c += CHUNK_BLOCKS) {
        const size_t nb = ZERO_MIN((size_t)CHUNK_BLOCKS, b1 - c);
        for (size_t k = 0; k < nb; k++) load_block(j->q, c + k, m + k * QB, v + k * QB);
        const size_t x0 = c * QB, x1 = x0 + nb * QB; /* elements of the held range */
        for (size_t x = x0, y; x < x1; x = y) {
            const zero__adamw_hp_t *hp = NULL;
            y = segment(j, lo + x, lo + x1, &hp) - lo;
            zero__adamw_fused(j->master + x, j->lp ? zero__elem(j->lp, x, eng->ce) : NULL,
                              eng->params.compute_dtype, zero__elem(j->g, x, j->gsize), j->gdt,
                              j->gscale, j->zero_g, m + (x - x0), v + (x - x0), y - x, hp, 1);
        }
        for (size_t k = 0; k < nb; k++) store_block(j->q, c + k, m + k * QB, v + k * QB);
    }
}

zero_status_t zero__q8_update(zero_engine_t *eng, int unit, size_t base, size_t span, float *master,
                              void *lp, void *g, zero_dtype_t gdt, float gscale, int zero_g,
                              float lr, int64_t tstep) {
    zero__unit_t *un = &eng->units[unit];
    zero__q8_t *q = un->q8;
    ZERO_ASSERT(q && base == q->lo && span == q->n);
    commit_staging(q);
    const zero__adamw_t opt = zero__adamw_from_params(&eng->params);
    update_job_t j = {.eng = eng,
                      .un = un,
                      .q = q,
                      .master = master,
                      .lp = lp,
                      .g = g,
                      .gdt = gdt,
                      .gsize = zero_dtype_size(gdt),
                      .gscale = gscale,
                      .zero_g = zero_g,
                      .hp_decay = zero__adamw_hp(&opt, lr, (int)tstep, 1),
                      .hp_plain = zero__adamw_hp(&opt, lr, (int)tstep, 0)};
    /* blocks are independent: threads take contiguous runs of chunks (any split, same bits) */
    const int nt = kthreads(span, eng->params.threads);
    if (nt == 1) {
        update_blocks(&j, 0, q->blocks);
        return ZERO_OK;
    }
#pragma omp parallel num_threads(nt)
    {
        size_t b0, b1;
        kslice(q->blocks, CHUNK_BLOCKS, &b0, &b1);
        if (b1 > b0) update_blocks(&j, b0, b1);
    }
    return ZERO_OK;
}

zero_status_t zero__q8_io(zero_engine_t *eng, zero__unit_t *un, zero_engine_state_t state,
                          size_t offset, size_t count, float *out, const float *in) {
    zero__q8_t *q = un->q8;
    const int is_m = state == ZERO_ENGINE_STATE_ADAM_M;
    ZERO_ASSERT(q && (is_m || state == ZERO_ENGINE_STATE_ADAM_V));
    ZERO_ASSERT(offset >= q->lo && count <= q->n && offset - q->lo <= q->n - count);
    const size_t r = offset - q->lo;
    if (in && !q->stage_m) {
        q->stage_m = zero_mem_alloc(eng->mem, ZERO_MEM_OPTIM, q->n * sizeof(float) + 1, 64);
        q->stage_v = zero_mem_alloc(eng->mem, ZERO_MEM_OPTIM, q->n * sizeof(float) + 1, 64);
        if (!q->stage_m || !q->stage_v) {
            free_staging(q);
            return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                               "engine state: no memory to stage the 8-bit Adam states of unit "
                               "'%s' (2 x %zu bytes)",
                               un->name, q->n * sizeof(float));
        }
        for (size_t b = 0; b < q->blocks; b++) {
            export_block(q, b, 1, q->stage_m + b * QB);
            export_block(q, b, 0, q->stage_v + b * QB);
        }
    }
    if (in) {
        memcpy((is_m ? q->stage_m : q->stage_v) + r, in, count * sizeof(float));
        return ZERO_OK;
    }
    commit_staging(q); /* a read gives what the states hold: the writes quantized */
    float x[QB];
    for (size_t i = r; i < r + count;) {
        const size_t b = i / QB, k = ZERO_MIN(QB - i % QB, r + count - i);
        export_block(q, b, is_m, x);
        memcpy(out + (i - r), x + i % QB, k * sizeof *out);
        i += k;
    }
    return ZERO_OK;
}
