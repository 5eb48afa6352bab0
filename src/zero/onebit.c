/* onebit.c — DeepSpeed's 1-bit Adam (Tang et al. 2021; DeepSpeed runtime/fp16/onebit/adam.py and
 * runtime/comm/nccl.py::compressed_allreduce) in the engine's compression stage, stage 0 only.
 *
 * The first freeze_step steps are the engine's plain AdamW (step.c, untouched). After them, per
 * step and unit (engine.h, params.onebit):
 *  - backward reduces nothing: each rank's gradient stays in its working buffer (buckets.c);
 *  - per tensor: m = beta1 m + (1 - beta1) g (the local gradient scaled like the mean's
 *    contribution would be: 1 / (accumulation x loss scale), times the clip factor);
 *  - m is averaged over the unit's group by the compressed all-reduce below, DeepSpeed's: x = m
 *    padded with zeros to N x lcm(N, 8), x += worker error, worker scale s = |x|_2 / sqrt(n),
 *    the sign bits (sign(0) = +1) and s, the new worker error x - s sign(x). Chunk r of n / N
 *    goes to rank r (one all-to-all of [s][sign bits] blocks: DeepSpeed's all-to-all of signs
 *    and all-gather of scales, the same bytes); rank r sums s_j sign_j over ranks j in rank
 *    order, multiplies by 1/N, adds its server error, and compresses that chunk the same way
 *    with its server error; one all-gather of the [scale][sign bits] blocks gives every rank the
 *    same averaged m. DeepSpeed compresses each parameter tensor on its own, so does this;
 *  - v is frozen, and so is its bias correction at freeze_step; the master moves by
 *    lr ((m (1 / (1 - beta1^t))) / (sqrt(v / (1 - beta2^freeze_step)) + eps) + wd p), the AdamW
 *    kernel's expression. DeepSpeed's 1-bit Adam applies no bias correction at all; here the
 *    warm-up must be the engine's AdamW bit for bit, and its v carries the correction, so the
 *    frozen v keeps the correction it had when frozen (so no jump at the switch).
 * Padding elements are compressed too (as in DeepSpeed) and never read back. The error buffers
 * (worker: the padded tensors; server: their chunk) are allocated with the unit and not
 * checkpointed: DeepSpeed's load_state_dict drops them as well.
 */
#include "engine_internal.h"

#include "core/core_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct zero__onebit {
    size_t *pad;     /* per tensor: its padded count n_t */
    size_t *woff;    /* per tensor: its offset in werr (sum of n_t before it) */
    size_t wn, maxn; /* sum of n_t; the largest n_t */
    float *werr;     /* worker error, wn elements */
    float *serr;     /* server error: chunk of each tensor, wn / N elements (offsets woff / N) */
    float *x;        /* scratch: maxn elements */
    uint8_t *send, *recv; /* scratch: N blocks of zero__onebit_block_bytes(maxn, N) each */
} zero__onebit_t;

static size_t gcd(size_t a, size_t b) {
    while (b) {
        const size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

size_t zero__onebit_padded(size_t n, int N) {
    const size_t lcm = (size_t)N * 8 / gcd((size_t)N, 8), d = (size_t)N * lcm;
    return (n + d - 1) / d * d;
}

size_t zero__onebit_block_bytes(size_t n, int N) { return sizeof(float) + n / (size_t)N / 8; }

static int onebit_unit(const zero_engine_t *eng, const zero__unit_t *un) {
    return eng->params.onebit && un->grp->size > 1;
}

uint64_t zero__onebit_theory_bytes(const zero_engine_t *eng, const zero__unit_t *un) {
    if (!onebit_unit(eng, un)) return 0;
    const int N = un->grp->size;
    uint64_t wn = 0, maxn = 0;
    for (int t = 0; t < un->tensor_count; t++) {
        const uint64_t n = zero__onebit_padded(un->counts[t], N);
        wn += n;
        maxn = ZERO_MAX(maxn, n);
    }
    return sizeof(float) * (wn + wn / (uint64_t)N + maxn) +
           2 * (uint64_t)N * zero__onebit_block_bytes(maxn, N);
}

uint64_t zero__onebit_unit_bytes(const zero__unit_t *un) {
    const zero__onebit_t *o = un->ob;
    if (!o) return 0;
    const int N = un->grp->size;
    return sizeof(float) * (o->wn + o->wn / (size_t)N + o->maxn) +
           2 * (uint64_t)N * zero__onebit_block_bytes(o->maxn, N);
}

uint64_t zero__onebit_comm_bytes(const zero_engine_t *eng, const zero__unit_t *un, int inter) {
    if (!onebit_unit(eng, un)) return 0;
    uint64_t b = 0;
    for (int t = 0; t < un->tensor_count; t++) {
        const size_t k = zero__onebit_block_bytes(zero__onebit_padded(un->counts[t], un->grp->size),
                                                  un->grp->size);
        b += zero__xfer_bytes(un->grp, ZERO_COLL_ALL_TO_ALL, k, ZERO_DTYPE_UINT8, inter) +
             zero__xfer_bytes(un->grp, ZERO_COLL_ALL_GATHER, k, ZERO_DTYPE_UINT8, inter);
    }
    return b;
}

zero_status_t zero__onebit_alloc(zero_engine_t *eng, zero__unit_t *un) {
    if (!onebit_unit(eng, un)) return ZERO_OK;
    const int N = un->grp->size;
    zero__onebit_t *o = calloc(1, sizeof *o);
    if (!o) return ZERO_ERR_OUT_OF_MEMORY;
    un->ob = o;
    o->pad = calloc((size_t)un->tensor_count, sizeof *o->pad);
    o->woff = calloc((size_t)un->tensor_count, sizeof *o->woff);
    if (!o->pad || !o->woff) return ZERO_ERR_OUT_OF_MEMORY;
    for (int t = 0; t < un->tensor_count; t++) {
        o->pad[t] = zero__onebit_padded(un->counts[t], N);
        o->woff[t] = o->wn;
        o->wn += o->pad[t];
        o->maxn = ZERO_MAX(o->maxn, o->pad[t]);
    }
    zero_mem_t *mem = eng->mem;
    const size_t blocks = (size_t)N * zero__onebit_block_bytes(o->maxn, N);
    o->werr = zero_mem_calloc(mem, ZERO_MEM_OPTIM, o->wn * sizeof(float), 64);
    o->serr = zero_mem_calloc(mem, ZERO_MEM_OPTIM, o->wn / (size_t)N * sizeof(float), 64);
    o->x = zero_mem_calloc(mem, ZERO_MEM_OPTIM, o->maxn * sizeof(float), 64);
    o->send = zero_mem_calloc(mem, ZERO_MEM_OPTIM, blocks, 64);
    o->recv = zero_mem_calloc(mem, ZERO_MEM_OPTIM, blocks, 64);
    if (!o->werr || !o->serr || !o->x || !o->send || !o->recv) return ZERO_ERR_OUT_OF_MEMORY;
    return ZERO_OK;
}

void zero__onebit_free(zero__unit_t *un) {
    zero__onebit_t *o = un->ob;
    if (!o) return;
    zero_mem_free(o->werr);
    zero_mem_free(o->serr);
    zero_mem_free(o->x);
    zero_mem_free(o->send);
    zero_mem_free(o->recv);
    free(o->pad);
    free(o->woff);
    free(o);
    un->ob = NULL;
}

float zero__onebit_compress(float *x, float *err, size_t n, uint8_t *signs) {
    double s2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        x[i] += err[i];
        s2 += (double)x[i] * (double)x[i];
    }
    const float s = n ? (float)(sqrt(s2) / sqrt((double)n)) : 0.0f;
    memset(signs, 0, n / 8);
    for (size_t i = 0; i < n; i++) {
        const int pos = x[i] >= 0.0f;
        err[i] = x[i] - (pos ? s : -s);
        signs[i / 8] |= (uint8_t)(pos << (i % 8));
    }
    return s;
}

static float sign_of(const uint8_t *signs, size_t i) {
    return (signs[i / 8] >> (i % 8)) & 1 ? 1.0f : -1.0f;
}

/* The compressed all-reduce of x (n elements, padded: a multiple of N x 8) over group g, in
 * place, with worker error werr (n) and server error serr (n / N). */
static zero_status_t allreduce(zero_engine_t *eng, const zero__group_t *g, zero__onebit_t *o,
                               float *x, size_t n, float *werr, float *serr) {
    const int N = g->size;
    const size_t C = n / (size_t)N, B = zero__onebit_block_bytes(n, N);
    /* worker: compress the whole tensor, then block r = [s][signs of chunk r] */
    uint8_t *bits = o->recv; /* n / 8 bytes, free until the all-to-all */
    const float s = zero__onebit_compress(x, werr, n, bits);
    for (int r = 0; r < N; r++) {
        uint8_t *blk = o->send + (size_t)r * B;
        memcpy(blk, &s, sizeof s);
        memcpy(blk + sizeof s, bits + (size_t)r * C / 8, C / 8);
    }
    zero_status_t st =
        zero__xfer_all_to_all(eng, g, ZERO_XFER_GRADS, o->send, o->recv, B, ZERO_DTYPE_UINT8);
    if (st) return st;
    /* server: this rank's chunk averaged over the ranks (in rank order); compress adds the
     * server error to it (DeepSpeed: the sum times 1/N, + server error) */
    float *y = x; /* the chunk, in x's first C elements */
    for (size_t i = 0; i < C; i++) {
        float acc = 0.0f;
        for (int j = 0; j < N; j++) {
            const uint8_t *blk = o->recv + (size_t)j * B;
            float sj;
            memcpy(&sj, blk, sizeof sj);
            acc += sj * sign_of(blk + sizeof sj, i);
        }
        y[i] = acc * (1.0f / (float)N);
    }
    const float ss = zero__onebit_compress(y, serr, C, o->send + sizeof(float));
    memcpy(o->send, &ss, sizeof ss);
    st = zero__xfer_gather(eng, g, ZERO_XFER_GRADS, o->send, o->recv, B, ZERO_DTYPE_UINT8, NULL);
    if (st) return st;
    for (int r = 0; r < N; r++) {
        const uint8_t *blk = o->recv + (size_t)r * B;
        float sr;
        memcpy(&sr, blk, sizeof sr);
        for (size_t i = 0; i < C; i++) x[(size_t)r * C + i] = sr * sign_of(blk + sizeof sr, i);
    }
    return ZERO_OK;
}

zero_status_t zero__onebit_update(zero_engine_t *eng, int unit, void *g, zero_dtype_t gdt,
                                  float gscale, float lr, int64_t tstep) {
    zero__unit_t *u = &eng->units[unit];
    const zero_engine_params_t *p = &eng->params;
    zero__onebit_t *o = u->ob;
    ZERO_ASSERT(u->m && u->v && !eng->swap && !eng->pol.shard_optim);
    float *master = eng->lowp ? u->master : (float *)u->full;
    const float b1 = p->beta1, b1c = 1.0f - p->beta1, eps = p->eps;
    /* the AdamW kernel's factors (optim_fused.c): bc1 at this step, bc2 frozen at freeze_step */
    const float bc1 = (float)(1.0 / (1.0 - pow((double)p->beta1, (double)tstep)));
    const float bc2 = p->freeze_step > 0
                          ? (float)(1.0 / (1.0 - pow((double)p->beta2, (double)p->freeze_step)))
                          : 1.0f; /* no warm-up: v is 0 and stays 0, the update is m / eps */
    const size_t gsize = zero_dtype_size(gdt);
    float gbuf[256];
    for (int t = 0; t < u->tensor_count; t++) {
        const size_t a = u->offsets[t], n = u->counts[t];
        float *m = u->m + a, *v = u->v + a, *w = master + a;
        /* m from the local gradient, which is zeroed for the next step */
        for (size_t i = 0; i < n; i += 256) {
            const size_t k = ZERO_MIN((size_t)256, n - i);
            void *gi = zero__elem(g, a + i, gsize);
            if (gdt == ZERO_DTYPE_FP32)
                memcpy(gbuf, gi, k * sizeof(float));
            else
                zero__widen(gbuf, gi, k, gdt);
            for (size_t j = 0; j < k; j++) m[i + j] = b1 * m[i + j] + b1c * (gbuf[j] * gscale);
            memset(gi, 0, k * gsize);
        }
        if (o) {
            float *x = o->x;
            memcpy(x, m, n * sizeof *x);
            memset(x + n, 0, (o->pad[t] - n) * sizeof *x);
            zero_status_t st = allreduce(eng, u->grp, o, x, o->pad[t], o->werr + o->woff[t],
                                         o->serr + o->woff[t] / (size_t)u->grp->size);
            if (st) return st;
            memcpy(m, x, n * sizeof *m);
        }
        const float wd = u->tensors[t].flags & ZERO_TENSOR_NO_DECAY ? 0.0f : p->weight_decay;
        for (size_t i = 0; i < n; i++) {
            const float pi = w[i];
            const float upd = (m[i] * bc1) / (sqrtf(v[i] * bc2) + eps);
            w[i] = pi - lr * (upd + wd * pi);
        }
        if (eng->lowp) zero__narrow(zero__elem(u->full, a, eng->ce), w, n, p->compute_dtype);
    }
    return ZERO_OK;
}
