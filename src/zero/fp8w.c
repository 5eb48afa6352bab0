/* fp8w.c — weights on the E4M3 grid (params.fp8_weights, fp8.weight_gather; engine.h): the
 * rounding of the flagged tensors' 16-bit parameters and stage 3's 1-byte gather format.
 *
 * Blocks: the part of a ZERO_TENSOR_FP8 tensor inside one rank's partition [r S, (r + 1) S) is
 * cut into blocks of ZERO__FP8_TILE elements from its start (the last one ragged); each block
 * has a power-of-two scale (kernels/fp8_qdq.h). The blocks depend only on the unit and its
 * group size, never on the stage, and none straddles two partitions, so the owner of a shard
 * can quantize its blocks alone. Rounding is idempotent: the codes of rounded values decode to
 * them bit for bit, so what a stage-3 gather delivers is what stages 0-2 hold.
 *
 * Wire (one rank's part of a gather, zero__fp8w_wire_bytes bytes): the fp32 scales of its
 * blocks in order, their codes (one byte per element), then the other elements of its shard
 * (the compute dtype) in order, zeros up to the largest part of any rank of the group.
 */
#include "engine_internal.h"

#include "kernels/fp8_qdq.h"

#include <string.h>

#define TILE ZERO__FP8_TILE

int zero__fp8w_unit(const zero_engine_t *eng, const zero__unit_t *un) {
    if (!eng->params.fp8_weights) return 0;
    for (int t = 0; t < un->tensor_count; t++)
        if (un->tensors[t].flags & ZERO_TENSOR_FP8) return 1;
    return 0;
}

/* Flagged tensor t's part [*a, *b) in partition r (empty: *a >= *b). */
static int piece(const zero__unit_t *un, int t, size_t r, size_t *a, size_t *b) {
    if (!(un->tensors[t].flags & ZERO_TENSOR_FP8)) return 0;
    const size_t S = un->shard_count;
    *a = ZERO_MAX(un->offsets[t], r * S);
    *b = ZERO_MIN(un->offsets[t] + un->counts[t], (r + 1) * S);
    return *a < *b;
}

void zero__fp8w_round(const zero_engine_t *eng, const zero__unit_t *un, void *params, size_t plo,
                      size_t lo, size_t n) {
    const size_t S = un->shard_count;
    ZERO_ASSERT(lo % S == 0 && n % S == 0 && lo >= plo);
    size_t a, b;
    for (size_t r = lo / S; r < (lo + n) / S; r++)
        for (int t = 0; t < un->tensor_count; t++)
            if (piece(un, t, r, &a, &b))
                zero__fp8_round_blocks(zero__elem(params, a - plo, eng->ce),
                                       eng->params.compute_dtype, b - a);
}

zero_status_t zero__fp8w_refresh(zero_engine_t *eng, zero__unit_t *un, size_t offset,
                                 size_t count) {
    const int sharded = zero__unit_sharded(un);
    const size_t S = un->shard_count, plo = sharded ? zero__shard_lo(un) : 0;
    const size_t pn = sharded ? S : un->padded_count;
    void *params = sharded ? un->shard : un->full;
    size_t mlo, mn, a, b;
    zero__optim_held_range(eng, un, ZERO_ENGINE_STATE_MASTER, &mlo, &mn);
    const zero__optim_residency_t *res = &eng->residency;
    const int u = (int)(un - eng->units);
    for (size_t r = plo / S; r < (plo + pn) / S; r++)
        for (int t = 0; t < un->tensor_count; t++) {
            if (!piece(un, t, r, &a, &b) || b <= offset || a >= offset + count) continue;
            if (a < mlo || b > mlo + mn) { /* no exact values here: at the next fetch */
                un->fp8_stale = 1;
                continue;
            }
            void *lp = zero__elem(params, a - plo, eng->ce), *m = NULL;
            zero_status_t st = res->map(res->ctx, u, ZERO_ENGINE_STATE_MASTER, a, b - a, &m);
            if (st) return st;
            zero__narrow(lp, m, b - a, eng->params.compute_dtype);
            st = res->unmap(res->ctx, u, ZERO_ENGINE_STATE_MASTER, m, a, b - a, 0);
            if (st) return st;
            zero__fp8_round_blocks(lp, eng->params.compute_dtype, b - a);
        }
    return ZERO_OK;
}

void zero__fp8w_settle(const zero_engine_t *eng, zero__unit_t *un) {
    const size_t S = un->shard_count;
    size_t mlo, mn, a, b;
    zero__optim_held_range(eng, un, ZERO_ENGINE_STATE_MASTER, &mlo, &mn);
    for (size_t r = 0; r < un->padded_count / S; r++)
        for (int t = 0; t < un->tensor_count; t++)
            if ((r * S < mlo || r * S >= mlo + mn) && piece(un, t, r, &a, &b))
                zero__fp8_round_blocks(zero__elem(un->full, a, eng->ce), eng->params.compute_dtype,
                                       b - a);
    un->fp8_stale = 0;
}

/* Blocks and flagged elements of partition r. */
static void part_counts(const zero__unit_t *un, size_t r, size_t *blocks, size_t *flagged) {
    size_t a, b;
    *blocks = *flagged = 0;
    for (int t = 0; t < un->tensor_count; t++)
        if (piece(un, t, r, &a, &b)) {
            *blocks += (b - a + TILE - 1) / TILE;
            *flagged += b - a;
        }
}

size_t zero__fp8w_wire_bytes(const zero_engine_t *eng, const zero__unit_t *un) {
    size_t most = 0, nb, nf;
    for (int r = 0; r < un->grp->size; r++) {
        part_counts(un, (size_t)r, &nb, &nf);
        most = ZERO_MAX(most, sizeof(float) * nb + nf + eng->ce * (un->shard_count - nf));
    }
    return zero__align_up(most, sizeof(float));
}

/* Partition r's elements (element r S at shard[0]) into its wire part (pack) or back. */
static void move(const zero_engine_t *eng, const zero__unit_t *un, size_t r, void *shard,
                 unsigned char *wire, int pack) {
    const size_t S = un->shard_count, lo = r * S, ce = eng->ce;
    const zero_dtype_t dt = eng->params.compute_dtype;
    size_t nb, nf, a, b, pos = lo;
    part_counts(un, r, &nb, &nf);
    unsigned char *sc = wire, *codes = wire + sizeof(float) * nb, *rest = codes + nf;
    for (int t = 0; t <= un->tensor_count; t++) {
        if (t < un->tensor_count && !piece(un, t, r, &a, &b)) continue;
        if (t == un->tensor_count) a = b = lo + S; /* the tail after the last piece */
        void *plain = zero__elem(shard, pos - lo, ce);
        if (pack)
            memcpy(rest, plain, (a - pos) * ce);
        else
            memcpy(plain, rest, (a - pos) * ce);
        rest += (a - pos) * ce;
        for (size_t x = a; x < b; x += TILE) {
            const size_t k = ZERO_MIN((size_t)TILE, b - x);
            float buf[TILE], s;
            if (pack) {
                zero__widen(buf, zero__elem(shard, x - lo, ce), k, dt);
                s = zero__fp8_block_encode(codes, buf, k);
                memcpy(sc, &s, sizeof s);
            } else {
                memcpy(&s, sc, sizeof s);
                zero__fp8_block_decode(buf, codes, k, s);
                zero__narrow(zero__elem(shard, x - lo, ce), buf, k, dt);
            }
            sc += sizeof s;
            codes += k;
        }
        pos = b;
    }
    if (pack) /* the padding up to the largest part */
        memset(rest, 0, (size_t)(wire + zero__fp8w_wire_bytes(eng, un) - rest));
}

void zero__fp8w_pack(const zero_engine_t *eng, const zero__unit_t *un, int r, const void *shard,
                     unsigned char *wire) {
    move(eng, un, (size_t)r, (void *)shard, wire, 1);
}

void zero__fp8w_unpack(const zero_engine_t *eng, const zero__unit_t *un, int r,
                       const unsigned char *wire, void *shard) {
    move(eng, un, (size_t)r, shard, (unsigned char *)wire, 0);
}
