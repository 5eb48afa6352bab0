/* coll_cases.c — the collective test matrix and its naive reference (see coll_cases.h).
 *
 * The reference never calls the library's reduction or traffic code: it regenerates every
 * rank's input element by element and folds it left to right in rank order, the way the
 * contract in zero/comm.h states (fp16/bf16 through fp32 with one rounding at the end, integers
 * wrapping, max keeping the earlier value unless a later one is greater). Inputs mix signs and
 * magnitudes over many binades, so a backend that sums in any other order (a tree, a ring
 * starting elsewhere, fp16 accumulation) gives different bits.
 *
 * Every rank walks the same case list, so the collectives match even when a check fails; a
 * collective that returns an error is counted and the walk goes on (a failed communicator then
 * fails the remaining cases quickly rather than hanging).
 */
#include "coll_cases.h"

#include <ctype.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 8         /* sentinel elements after every receive buffer */
#define SENTINEL 0xa5   /* byte pattern of untouched receive memory */
#define A2AV_SEND_GAP 2 /* elements between send blocks of all_to_allv */
#define A2AV_RECV_GAP 1 /* elements between receive blocks */

enum { MODE_BLOCKING, MODE_POST_WAIT, MODE_POST_TEST, MODE_COUNT };
static const char *const mode_names[] = {"blocking", "post+wait", "post+test"};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == MODE_COUNT, "mode name table");

typedef struct coll_case {
    zero_coll_t coll;
    zero_op_t op;
    zero_dtype_t dtype;
    size_t count;
    int in_place;
    int mode;
    int root;
    uint64_t seed;
} coll_case_t;

/* ------------------------------------------------------------------------------ values */

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t coll_gen_bits(zero_dtype_t dtype, uint64_t seed, int rank, uint64_t idx) {
    uint64_t h = mix64(seed ^ mix64((uint64_t)rank * 0x632be59bd9b4e019ull + idx));
    uint64_t sign = h >> 63;
    int zero = (h & 0xf0) == 0; /* 1 in 16: a signed zero (max must keep the earlier one) */
    switch (dtype) {
    case ZERO_DTYPE_FP32: {
        if (zero) return sign << 31;
        uint64_t exp = 127 - 20 + (h >> 40) % 41; /* 2^-20 .. 2^20 */
        return sign << 31 | exp << 23 | (h & 0x7fffff00) >> 8;
    }
    case ZERO_DTYPE_FP64: {
        if (zero) return sign << 63;
        uint64_t exp = 1023 - 30 + (h >> 52 & 0x3ff) % 61; /* 2^-30 .. 2^30 */
        return sign << 63 | exp << 52 | (mix64(h) & 0xfffffffffffffull);
    }
    case ZERO_DTYPE_FP16: {
        if (zero) return sign << 15;
        /* Exponent field 6..24 (2^-9 .. 2^9), sometimes 0 (subnormal): sums of 8 ranks stay
         * finite, and the span exceeds fp32's 24 bits so the order of the sum matters. */
        uint64_t exp = (h >> 24 & 0xff) < 16 ? 0 : 6 + (h >> 32) % 19;
        return sign << 15 | exp << 10 | (h >> 8 & 0x3ff);
    }
    case ZERO_DTYPE_BF16: {
        if (zero) return sign << 15;
        uint64_t exp = 127 - 20 + (h >> 32) % 41;
        return sign << 15 | exp << 7 | (h >> 8 & 0x7f);
    }
    case ZERO_DTYPE_INT8:
    case ZERO_DTYPE_UINT8: return h >> 8 & 0xff;
    case ZERO_DTYPE_INT32: return h >> 8 & 0xffffffffu;
    default: return 0;
    }
}

static void store_bits(void *buf, size_t i, zero_dtype_t dtype, uint64_t bits) {
    switch (zero_dtype_size(dtype)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)bits; break;
    case 2: ((uint16_t *)buf)[i] = (uint16_t)bits; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)bits; break;
    case 8: ((uint64_t *)buf)[i] = bits; break;
    default: break;
    }
}

static uint64_t load_bits(const void *buf, size_t i, zero_dtype_t dtype) {
    switch (zero_dtype_size(dtype)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 2: return ((const uint16_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    case 8: return ((const uint64_t *)buf)[i];
    default: return 0;
    }
}

void coll_fill(void *buf, size_t count, zero_dtype_t dtype, uint64_t seed, int rank,
               uint64_t first_idx) {
    for (size_t i = 0; i < count; i++)
        store_bits(buf, i, dtype, coll_gen_bits(dtype, seed, rank, first_idx + i));
}

static float bits_f32(uint64_t b) {
    uint32_t u = (uint32_t)b;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint64_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static double bits_f64(uint64_t b) {
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}
static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* One element of the reference: fold the members' inputs left to right. */
static uint64_t ref_element(zero_dtype_t dt, zero_op_t op, uint64_t seed, const int *members, int n,
                            uint64_t idx) {
    int is_sum = op == ZERO_OP_SUM;
    uint64_t first = coll_gen_bits(dt, seed, members[0], idx);
    switch (dt) {
    case ZERO_DTYPE_FP32: {
        float acc = bits_f32(first);
        for (int k = 1; k < n; k++) {
            float v = bits_f32(coll_gen_bits(dt, seed, members[k], idx));
            if (is_sum)
                acc = acc + v;
            else if (v > acc)
                acc = v;
        }
        return f32_bits(acc);
    }
    case ZERO_DTYPE_FP64: {
        double acc = bits_f64(first);
        for (int k = 1; k < n; k++) {
            double v = bits_f64(coll_gen_bits(dt, seed, members[k], idx));
            if (is_sum)
                acc = acc + v;
            else if (v > acc)
                acc = v;
        }
        return f64_bits(acc);
    }
    case ZERO_DTYPE_FP16:
    case ZERO_DTYPE_BF16: {
        int half = dt == ZERO_DTYPE_FP16;
        float acc = half ? zero_fp16_to_fp32((uint16_t)first) : zero_bf16_to_fp32((uint16_t)first);
        for (int k = 1; k < n; k++) {
            uint16_t b = (uint16_t)coll_gen_bits(dt, seed, members[k], idx);
            float v = half ? zero_fp16_to_fp32(b) : zero_bf16_to_fp32(b);
            if (is_sum)
                acc = acc + v;
            else if (v > acc)
                acc = v;
        }
        return half ? zero_fp32_to_fp16(acc) : zero_fp32_to_bf16(acc);
    }
    case ZERO_DTYPE_INT8:
    case ZERO_DTYPE_UINT8:
    case ZERO_DTYPE_INT32: {
        /* Sums wrap: add in uint64 and keep the low bits. Max compares as the dtype's type. */
        unsigned bits = dt == ZERO_DTYPE_INT32 ? 32 : 8;
        uint64_t mask = (1ull << bits) - 1, acc = first;
        for (int k = 1; k < n; k++) {
            uint64_t v = coll_gen_bits(dt, seed, members[k], idx);
            if (is_sum) {
                acc = (acc + v) & mask;
            } else {
                int64_t a = (int64_t)acc, b = (int64_t)v;
                if (dt != ZERO_DTYPE_UINT8) { /* sign-extend */
                    a = (int64_t)(acc << (64 - bits)) >> (64 - bits);
                    b = (int64_t)(v << (64 - bits)) >> (64 - bits);
                }
                if (b > a) acc = v;
            }
        }
        return acc;
    }
    default: return 0;
    }
}

void coll_ref_reduce(void *out, size_t count, zero_dtype_t dtype, zero_op_t op, uint64_t seed,
                     const int *members, int n, uint64_t first_idx) {
    for (size_t i = 0; i < count; i++)
        store_bits(out, i, dtype, ref_element(dtype, op, seed, members, n, first_idx + i));
}

int coll_has_number(const char *msg, long value) {
    for (const char *p = msg; *p; p++) {
        if (!isdigit((unsigned char)*p) || (p > msg && isdigit((unsigned char)p[-1]))) continue;
        char *end;
        long v = strtol(p, &end, 10);
        if (v == value && (p == msg || p[-1] != '-')) return 1;
        p = end - 1;
    }
    return 0;
}

uint64_t coll_hash_bytes(const void *data, size_t bytes, uint64_t h) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) { /* word at a time: the big cases hash megabytes */
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix64(h ^ w);
    }
    for (; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return mix64(h ^ bytes);
}

/* ------------------------------------------------------------------------------ case list */

typedef struct op_entry {
    zero_coll_t coll;
    zero_op_t op;
    int root; /* broadcast: 0 first, -1 last rank, -2 middle rank */
} op_entry_t;

static const op_entry_t op_entries[] = {
    {ZERO_COLL_ALL_REDUCE, ZERO_OP_SUM, 0},     {ZERO_COLL_ALL_REDUCE, ZERO_OP_MAX, 0},
    {ZERO_COLL_REDUCE_SCATTER, ZERO_OP_SUM, 0}, {ZERO_COLL_REDUCE_SCATTER, ZERO_OP_MAX, 0},
    {ZERO_COLL_ALL_GATHER, ZERO_OP_SUM, 0},     {ZERO_COLL_ALL_TO_ALL, ZERO_OP_SUM, 0},
    {ZERO_COLL_ALL_TO_ALLV, ZERO_OP_SUM, 0},    {ZERO_COLL_BROADCAST, ZERO_OP_SUM, 0},
    {ZERO_COLL_BROADCAST, ZERO_OP_SUM, -1},     {ZERO_COLL_BROADCAST, ZERO_OP_SUM, -2},
};

static int resolve_root(int root, int n) { return root == -1 ? n - 1 : root == -2 ? n / 2 : root; }

static int has_in_place(zero_coll_t coll) {
    return coll == ZERO_COLL_ALL_REDUCE || coll == ZERO_COLL_REDUCE_SCATTER ||
           coll == ZERO_COLL_ALL_GATHER || coll == ZERO_COLL_BROADCAST;
}

/* Build the case list (cases may be NULL to count). Identical on every rank for the same n and
 * options, and between backends, which is what makes hashes comparable. */
static size_t build_cases(int n, const coll_opts_t *o, coll_case_t *cases) {
    size_t k = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        if (cases) {                                                                               \
            cases[k] = (coll_case_t){__VA_ARGS__};                                                 \
            cases[k].seed = mix64(0x5eed0000ull + k * 7919 + (uint64_t)n);                         \
        }                                                                                          \
        k++;                                                                                       \
    } while (0)
    size_t counts[4] = {0, 1, (size_t)n - 1, 1009};
    int ncounts = 0;
    size_t uniq[4];
    for (int i = 0; i < 4; i++) {
        int dup = 0;
        for (int j = 0; j < ncounts; j++) dup |= uniq[j] == counts[i];
        if (!dup) uniq[ncounts++] = counts[i];
    }
    for (size_t e = 0; e < sizeof op_entries / sizeof op_entries[0]; e++) {
        const op_entry_t *oe = &op_entries[e];
        int root = resolve_root(oe->root, n);
        if (oe->coll == ZERO_COLL_BROADCAST) { /* skip roots equal to an earlier entry's */
            int dup = 0;
            for (size_t p = 0; p < e; p++)
                if (op_entries[p].coll == ZERO_COLL_BROADCAST &&
                    resolve_root(op_entries[p].root, n) == root)
                    dup = 1;
            if (dup) continue;
        }
        for (int c = 0; c < ncounts; c++)
            for (int dt = 0; dt < ZERO_DTYPE_COUNT; dt++)
                for (int ip = 0; ip <= has_in_place(oe->coll); ip++)
                    for (int m = 0; m < MODE_COUNT; m++) {
                        if (o->lite && m != (int)((e + (size_t)c + (size_t)dt + (size_t)ip) % 3))
                            continue;
                        ADD(.coll = oe->coll, .op = oe->op, .dtype = (zero_dtype_t)dt,
                            .count = uniq[c], .in_place = ip, .mode = m, .root = root);
                    }
    }
    for (int m = 0; m < MODE_COUNT; m++) ADD(.coll = ZERO_COLL_BARRIER, .mode = m);
    if (o->big) {
        const size_t B = COLL_BIG_COUNT;
        ADD(.coll = ZERO_COLL_ALL_REDUCE, .op = ZERO_OP_SUM, .dtype = ZERO_DTYPE_FP32, .count = B,
            .mode = MODE_BLOCKING);
        ADD(.coll = ZERO_COLL_REDUCE_SCATTER, .op = ZERO_OP_SUM, .dtype = ZERO_DTYPE_FP16,
            .count = B, .in_place = 1, .mode = MODE_POST_TEST);
        if (!o->quick) {
            ADD(.coll = ZERO_COLL_ALL_REDUCE, .op = ZERO_OP_SUM, .dtype = ZERO_DTYPE_BF16,
                .count = B, .in_place = 1, .mode = MODE_POST_WAIT);
            ADD(.coll = ZERO_COLL_ALL_REDUCE, .op = ZERO_OP_SUM, .dtype = ZERO_DTYPE_INT8,
                .count = B, .mode = MODE_POST_TEST);
            ADD(.coll = ZERO_COLL_ALL_REDUCE, .op = ZERO_OP_MAX, .dtype = ZERO_DTYPE_FP64,
                .count = B, .in_place = 1, .mode = MODE_BLOCKING);
            ADD(.coll = ZERO_COLL_REDUCE_SCATTER, .op = ZERO_OP_SUM, .dtype = ZERO_DTYPE_FP32,
                .count = B, .mode = MODE_BLOCKING);
            ADD(.coll = ZERO_COLL_REDUCE_SCATTER, .op = ZERO_OP_MAX, .dtype = ZERO_DTYPE_INT32,
                .count = B, .mode = MODE_POST_WAIT);
            ADD(.coll = ZERO_COLL_ALL_GATHER, .dtype = ZERO_DTYPE_FP32, .count = B, .in_place = 1,
                .mode = MODE_BLOCKING);
            ADD(.coll = ZERO_COLL_ALL_GATHER, .dtype = ZERO_DTYPE_UINT8, .count = B,
                .mode = MODE_POST_WAIT);
            ADD(.coll = ZERO_COLL_ALL_TO_ALL, .dtype = ZERO_DTYPE_INT8, .count = B,
                .mode = MODE_BLOCKING);
            ADD(.coll = ZERO_COLL_ALL_TO_ALLV, .dtype = ZERO_DTYPE_UINT8, .count = B,
                .mode = MODE_POST_TEST);
            ADD(.coll = ZERO_COLL_BROADCAST, .dtype = ZERO_DTYPE_FP64, .count = B, .root = n - 1,
                .mode = MODE_POST_WAIT);
            ADD(.coll = ZERO_COLL_BROADCAST, .dtype = ZERO_DTYPE_BF16, .count = B, .in_place = 1,
                .root = n / 2, .mode = MODE_BLOCKING);
        }
    }
#undef ADD
    return k;
}

size_t coll_case_count(int n, const coll_opts_t *opts) { return build_cases(n, opts, NULL); }

/* ------------------------------------------------------------------------------ running */

/* all_to_allv layout: message i -> j has a2av_count(i, j) elements. Uneven, some empty. */
static size_t a2av_count(const coll_case_t *c, int i, int j) {
    return c->count * (size_t)((7 * i + 3 * j + (int)(c->seed % 4)) % 4) / 2;
}

typedef struct layout {
    size_t send_elems, recv_elems; /* buffer extents (without guard) */
    size_t *sc, *sd, *rc, *rd;     /* all_to_allv */
} layout_t;

static void make_layout(const coll_case_t *c, int r, int n, layout_t *L) {
    size_t cnt = c->count;
    memset(L, 0, sizeof *L);
    switch (c->coll) {
    case ZERO_COLL_ALL_REDUCE:
    case ZERO_COLL_BROADCAST: L->send_elems = L->recv_elems = cnt; break;
    case ZERO_COLL_REDUCE_SCATTER:
        L->send_elems = cnt * (size_t)n;
        L->recv_elems = cnt;
        break;
    case ZERO_COLL_ALL_GATHER:
        L->send_elems = cnt;
        L->recv_elems = cnt * (size_t)n;
        break;
    case ZERO_COLL_ALL_TO_ALL: L->send_elems = L->recv_elems = cnt * (size_t)n; break;
    case ZERO_COLL_ALL_TO_ALLV: {
        L->sc = calloc((size_t)n * 4, sizeof(size_t));
        L->sd = L->sc + n;
        L->rc = L->sd + n;
        L->rd = L->rc + n;
        size_t pos = 0;
        for (int j = n - 1; j >= 0; j--) { /* send blocks in reverse rank order, with gaps */
            L->sc[j] = a2av_count(c, r, j);
            L->sd[j] = pos;
            pos += L->sc[j] + A2AV_SEND_GAP;
        }
        L->send_elems = pos;
        pos = A2AV_RECV_GAP;
        for (int i = 0; i < n; i++) {
            L->rc[i] = a2av_count(c, i, r);
            L->rd[i] = pos;
            pos += L->rc[i] + A2AV_RECV_GAP;
        }
        L->recv_elems = pos;
        break;
    }
    default: break;
    }
}

/* Expected result of rank r into ref (recv_elems + GUARD elements, sentinel where untouched). */
static void make_reference(const coll_case_t *c, int r, int n, const layout_t *L, void *ref,
                           int *members) {
    size_t es = zero_dtype_size(c->dtype), cnt = c->count;
    for (int k = 0; k < n; k++) members[k] = k;
    memset(ref, SENTINEL, (L->recv_elems + GUARD) * es);
    switch (c->coll) {
    case ZERO_COLL_ALL_REDUCE:
        coll_ref_reduce(ref, cnt, c->dtype, c->op, c->seed, members, n, 0);
        break;
    case ZERO_COLL_REDUCE_SCATTER:
        coll_ref_reduce(ref, cnt, c->dtype, c->op, c->seed, members, n, (uint64_t)r * cnt);
        break;
    case ZERO_COLL_ALL_GATHER:
        for (int k = 0; k < n; k++)
            coll_fill((char *)ref + (size_t)k * cnt * es, cnt, c->dtype, c->seed, k, 0);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        for (int k = 0; k < n; k++)
            coll_fill((char *)ref + (size_t)k * cnt * es, cnt, c->dtype, c->seed, k,
                      (uint64_t)r * cnt);
        break;
    case ZERO_COLL_ALL_TO_ALLV:
        for (int k = 0; k < n; k++)
            coll_fill((char *)ref + L->rd[k] * es, L->rc[k], c->dtype, c->seed, k,
                      (uint64_t)r << 40);
        break;
    case ZERO_COLL_BROADCAST: coll_fill(ref, cnt, c->dtype, c->seed, c->root, 0); break;
    default: break;
    }
}

/* The nodes of a communicator as this file sees them (from zero_comm_node_of only): local index
 * of every rank, node sizes, and member l (mod size) of node j. */
typedef struct topo {
    int n, nodes, contiguous;
    int node[64], local[64], size[64], first[64], ranks[64];
} topo_t;

static void topo_read(zero_comm_t *comm, topo_t *t) {
    memset(t, 0, sizeof *t);
    t->n = zero_comm_size(comm);
    t->nodes = zero_comm_node_count(comm);
    t->contiguous = 1;
    for (int r = 0; r < t->n; r++) {
        t->node[r] = zero_comm_node_of(comm, r);
        t->local[r] = t->size[t->node[r]]++;
        if (r && t->node[r] != t->node[r - 1] && t->node[r] != t->node[r - 1] + 1)
            t->contiguous = 0;
    }
    for (int j = 1; j < t->nodes; j++) t->first[j] = t->first[j - 1] + t->size[j - 1];
    for (int r = 0; r < t->n; r++) t->ranks[t->first[t->node[r]] + t->local[r]] = r;
}

static int member(const topo_t *t, int j, int l) { return t->ranks[t->first[j] + l % t->size[j]]; }

/* The hierarchical phases the library should choose (the rule of zero/comm.h: where they send
 * fewer bytes between nodes, counted in blocks; the reduce-scatter only on contiguous nodes). */
static void hier_phases(const topo_t *t, zero_dtype_t dt, int flat, int *rs, int *ag) {
    uint64_t n = (uint64_t)t->n, N = (uint64_t)t->nodes, sq = 0;
    for (int j = 0; j < t->nodes; j++) sq += (uint64_t)t->size[j] * (uint64_t)t->size[j];
    uint64_t e = zero_dtype_size(dt), a = dt == ZERO_DTYPE_FP16 || dt == ZERO_DTYPE_BF16 ? 4 : e;
    *ag = !flat && N > 1 && n * (N - 1) < n * n - sq;
    *rs = !flat && N > 1 && t->contiguous &&
          n * (N - 1) * a + (n - (uint64_t)t->size[t->nodes - 1]) * e < (n * n - sq) * e;
}

/* Bytes rank r sends (out[0]) and receives (out[1]) in the reduce-scatter and all-gather phases
 * over blocks of len[b] elements, and of those to and from other nodes (out[2], out[3]), by
 * walking every transfer of the algorithm as zero/comm.h describes it. */
static void add(const topo_t *t, int r, int from, int to, uint64_t bytes, uint64_t out[4]) {
    if (from == to) return;
    if (from == r) out[0] += bytes, out[2] += t->node[to] != t->node[r] ? bytes : 0;
    if (to == r) out[1] += bytes, out[3] += t->node[from] != t->node[r] ? bytes : 0;
}

static void walk_rs(const topo_t *t, int r, int hier, const uint64_t *len, uint64_t e, uint64_t a,
                    uint64_t out[4]) {
    for (int b = 0; b < t->n; b++) {
        if (!hier) {
            for (int q = 0; q < t->n; q++) add(t, r, q, b, len[b] * e, out);
            continue;
        }
        for (int j = 0; j < t->nodes; j++) {
            int p = member(t, j, t->local[b]);
            for (int k = 0; k < t->size[j]; k++)
                add(t, r, t->ranks[t->first[j] + k], p, len[b] * e, out);
            if (j + 1 < t->nodes)
                add(t, r, p, member(t, j + 1, t->local[b]), len[b] * a, out);
            else
                add(t, r, p, b, len[b] * e, out);
        }
    }
}

static void walk_ag(const topo_t *t, int r, int hier, const uint64_t *len, uint64_t e,
                    uint64_t out[4]) {
    for (int b = 0; b < t->n; b++)
        for (int q = 0; q < t->n; q++) {
            if (!hier || t->node[q] == t->node[b]) {
                add(t, r, b, q, len[b] * e, out);
            } else { /* via b's receiver on q's node, unless that is q */
                int via = member(t, t->node[q], t->local[b]);
                if (via == q)
                    add(t, r, b, q, len[b] * e, out);
                else
                    add(t, r, via, q, len[b] * e, out);
            }
        }
}

/* Independent statement of the traffic the statistics must count: out = {sent, received,
 * inter-node sent, received}. */
static void expected_traffic(const coll_case_t *c, zero_comm_t *comm, int flat, int r, int n,
                             const layout_t *L, uint64_t out[4]) {
    uint64_t es = zero_dtype_size(c->dtype), cnt = c->count, N = (uint64_t)n;
    topo_t t;
    topo_read(comm, &t);
    out[0] = out[1] = out[2] = out[3] = 0;
    uint64_t len[64];
    int rs = 0, ag = 0;
    if (c->coll != ZERO_COLL_BARRIER) hier_phases(&t, c->dtype, flat, &rs, &ag);
    uint64_t acc = c->dtype == ZERO_DTYPE_FP16 || c->dtype == ZERO_DTYPE_BF16 ? 4 : es;
    switch (c->coll) {
    case ZERO_COLL_REDUCE_SCATTER:
        for (int k = 0; k < n; k++) len[k] = cnt;
        walk_rs(&t, r, rs, len, es, acc, out);
        break;
    case ZERO_COLL_ALL_GATHER:
        for (int k = 0; k < n; k++) len[k] = cnt;
        walk_ag(&t, r, ag, len, es, out);
        break;
    case ZERO_COLL_ALL_REDUCE:
        /* Blocks of the reduce-scatter phase: [floor(cnt*k/n), floor(cnt*(k+1)/n)). */
        for (int k = 0; k < n; k++) len[k] = cnt * (uint64_t)(k + 1) / N - cnt * (uint64_t)k / N;
        walk_rs(&t, r, rs, len, es, acc, out);
        walk_ag(&t, r, ag, len, es, out);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        for (int k = 0; k < n; k++)
            if (k != r) add(&t, r, r, k, cnt * es, out), add(&t, r, k, r, cnt * es, out);
        break;
    case ZERO_COLL_ALL_TO_ALLV:
        for (int k = 0; k < n; k++)
            if (k != r) add(&t, r, r, k, L->sc[k] * es, out), add(&t, r, k, r, L->rc[k] * es, out);
        break;
    case ZERO_COLL_BROADCAST:
        for (int k = 0; k < n; k++) add(&t, r, c->root, k, cnt * es, out);
        break;
    default: break;
    }
}

static zero_status_t post_case(const coll_case_t *c, zero_comm_t *comm, const void *send,
                               void *recv, const layout_t *L, zero_comm_request_t **req) {
    switch (c->coll) {
    case ZERO_COLL_ALL_REDUCE:
        return zero_comm_all_reduce_post(send, recv, c->count, c->dtype, c->op, comm, req);
    case ZERO_COLL_REDUCE_SCATTER:
        return zero_comm_reduce_scatter_post(send, recv, c->count, c->dtype, c->op, comm, req);
    case ZERO_COLL_ALL_GATHER:
        return zero_comm_all_gather_post(send, recv, c->count, c->dtype, comm, req);
    case ZERO_COLL_ALL_TO_ALL:
        return zero_comm_all_to_all_post(send, recv, c->count, c->dtype, comm, req);
    case ZERO_COLL_ALL_TO_ALLV:
        return zero_comm_all_to_allv_post(send, L->sc, L->sd, recv, L->rc, L->rd, c->dtype, comm,
                                          req);
    case ZERO_COLL_BROADCAST:
        return zero_comm_broadcast_post(send, recv, c->count, c->dtype, c->root, comm, req);
    case ZERO_COLL_BARRIER: return zero_comm_barrier_post(comm, req);
    default: return ZERO_ERR_INTERNAL;
    }
}

static zero_status_t run_blocking(const coll_case_t *c, zero_comm_t *comm, const void *send,
                                  void *recv, const layout_t *L) {
    switch (c->coll) {
    case ZERO_COLL_ALL_REDUCE:
        return zero_comm_all_reduce(send, recv, c->count, c->dtype, c->op, comm);
    case ZERO_COLL_REDUCE_SCATTER:
        return zero_comm_reduce_scatter(send, recv, c->count, c->dtype, c->op, comm);
    case ZERO_COLL_ALL_GATHER: return zero_comm_all_gather(send, recv, c->count, c->dtype, comm);
    case ZERO_COLL_ALL_TO_ALL: return zero_comm_all_to_all(send, recv, c->count, c->dtype, comm);
    case ZERO_COLL_ALL_TO_ALLV:
        return zero_comm_all_to_allv(send, L->sc, L->sd, recv, L->rc, L->rd, c->dtype, comm);
    case ZERO_COLL_BROADCAST:
        return zero_comm_broadcast(send, recv, c->count, c->dtype, c->root, comm);
    case ZERO_COLL_BARRIER: return zero_comm_barrier(comm);
    default: return ZERO_ERR_INTERNAL;
    }
}

typedef struct runner {
    zero_comm_t *comm;
    const coll_opts_t *o;
    coll_tally_t *t;
    int rank, n;
    int messages;
    int barriers_done;
    int *members;
} runner_t;

static void describe(const coll_case_t *c, size_t index, char *buf, size_t len) {
    snprintf(buf, len, "case %zu: %s%s%s %s count=%zu %s %s", index, zero_coll_name(c->coll),
             c->coll == ZERO_COLL_ALL_REDUCE || c->coll == ZERO_COLL_REDUCE_SCATTER ? "/" : "",
             c->coll == ZERO_COLL_ALL_REDUCE || c->coll == ZERO_COLL_REDUCE_SCATTER
                 ? zero_op_name(c->op)
                 : "",
             zero_dtype_name(c->dtype), c->count, c->in_place ? "in-place" : "out-of-place",
             mode_names[c->mode]);
    if (c->coll == ZERO_COLL_BROADCAST) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, " root=%d", c->root);
    }
}

#define FAIL(R, C, I, ...)                                                                         \
    do {                                                                                           \
        (R)->t->failed++;                                                                          \
        if ((R)->messages++ < ((R)->o->max_messages ? (R)->o->max_messages : 10)) {                \
            char d_[256], m_[512];                                                                 \
            describe(C, I, d_, sizeof d_);                                                         \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            fprintf(stderr, "FAIL [%s rank %d/%d] %s: %s\n", (R)->o->label ? (R)->o->label : "",   \
                    (R)->rank, (R)->n, d_, m_);                                                    \
        }                                                                                          \
    } while (0)

#define PASS(R) ((R)->t->passed++)

static void run_case(runner_t *R, const coll_case_t *c, size_t index) {
    int r = R->rank, n = R->n;
    size_t es = c->coll == ZERO_COLL_BARRIER ? 1 : zero_dtype_size(c->dtype);
    layout_t L;
    make_layout(c, r, n, &L);

    /* Buffers. Count-0 blocking out-of-place cases pass NULL (allowed with nothing to move;
     * not for all_to_allv, whose displacements still describe a buffer). */
    int null_bufs = c->count == 0 && !c->in_place && c->mode == MODE_BLOCKING &&
                    c->coll != ZERO_COLL_ALL_TO_ALLV;
    char *sendbuf = NULL, *recvbuf = NULL, *ref = NULL;
    const void *send = NULL;
    void *recv = NULL;
    if (c->coll != ZERO_COLL_BARRIER) {
        ref = malloc((L.recv_elems + GUARD) * es);
        if (c->mode == MODE_BLOCKING) make_reference(c, r, n, &L, ref, R->members);
        recvbuf = malloc((L.recv_elems + GUARD) * es);
        memset(recvbuf, SENTINEL, (L.recv_elems + GUARD) * es);
        if (c->in_place) {
            switch (c->coll) {
            case ZERO_COLL_ALL_REDUCE:
                coll_fill(recvbuf, c->count, c->dtype, c->seed, r, 0);
                send = recv = recvbuf;
                break;
            case ZERO_COLL_BROADCAST:
                /* Non-roots hold their own data, which must be overwritten. */
                coll_fill(recvbuf, c->count, c->dtype, c->seed, r, 0);
                send = recv = recvbuf;
                break;
            case ZERO_COLL_REDUCE_SCATTER:
                /* recv == send + rank * recv_count: only that block is defined afterwards. */
                free(recvbuf);
                recvbuf = malloc((L.send_elems + GUARD) * es);
                memset(recvbuf, SENTINEL, (L.send_elems + GUARD) * es);
                coll_fill(recvbuf, L.send_elems, c->dtype, c->seed, r, 0);
                send = recvbuf;
                recv = recvbuf + (size_t)r * c->count * es;
                break;
            case ZERO_COLL_ALL_GATHER:
                /* send == recv + rank * send_count, holding this rank's input. */
                coll_fill(recvbuf + (size_t)r * c->count * es, c->count, c->dtype, c->seed, r, 0);
                send = recvbuf + (size_t)r * c->count * es;
                recv = recvbuf;
                break;
            default: break;
            }
        } else {
            sendbuf = malloc((L.send_elems + GUARD) * es);
            memset(sendbuf, SENTINEL, (L.send_elems + GUARD) * es);
            switch (c->coll) {
            case ZERO_COLL_ALL_TO_ALLV:
                for (int j = 0; j < n; j++)
                    coll_fill(sendbuf + L.sd[j] * es, L.sc[j], c->dtype, c->seed, r,
                              (uint64_t)j << 40);
                break;
            case ZERO_COLL_BROADCAST:
                /* Only the root's send is read: non-roots pass NULL in post+test mode and a
                 * buffer of their own (different) data otherwise. */
                coll_fill(sendbuf, L.send_elems, c->dtype, c->seed, r, 0);
                break;
            default: coll_fill(sendbuf, L.send_elems, c->dtype, c->seed, r, 0); break;
            }
            send = sendbuf;
            recv = recvbuf;
            if (c->coll == ZERO_COLL_BROADCAST && r != c->root && c->mode == MODE_POST_TEST)
                send = NULL;
        }
        if (null_bufs) send = recv = NULL;
    }
    uint64_t send_hash = sendbuf ? coll_hash_bytes(sendbuf, (L.send_elems + GUARD) * es, 0) : 0;

    zero_comm_reset_stats(R->comm);
    if (c->coll == ZERO_COLL_BARRIER && R->o->barrier_arrivals)
        atomic_fetch_add(R->o->barrier_arrivals, 1);

    zero_status_t st = ZERO_OK;
    int extra_barrier = 0;
    if (c->mode == MODE_BLOCKING) {
        st = run_blocking(c, R->comm, send, recv, &L);
    } else {
        zero_comm_request_t *req = NULL, *req2 = NULL;
        st = post_case(c, R->comm, send, recv, &L, &req);
        if (st == ZERO_OK && c->mode == MODE_POST_WAIT) {
            /* A second request queued behind the first, waited for first: completion order
             * and several outstanding requests. */
            zero_status_t st2 = zero_comm_barrier_post(R->comm, &req2);
            if (st2 != ZERO_OK) FAIL(R, c, index, "barrier_post: %s", zero_last_error());
            extra_barrier = st2 == ZERO_OK;
        }
        /* Overlap: the reference is computed while the collective runs. */
        if (ref) make_reference(c, r, n, &L, ref, R->members);
        if (st == ZERO_OK) {
            if (req2) {
                zero_status_t st2 = zero_comm_wait(req2);
                if (st2 != ZERO_OK) FAIL(R, c, index, "queued barrier: %s", zero_last_error());
            }
            if (c->mode == MODE_POST_TEST) {
                int done = 0;
                while (st == ZERO_OK && !done) {
                    st = zero_comm_test(req, &done);
                    if (!done) sched_yield();
                }
            } else {
                st = zero_comm_wait(req);
            }
        }
    }
    if (st != ZERO_OK) {
        FAIL(R, c, index, "returned %s: %s", zero_status_str(st), zero_last_error());
        if (R->o->hashes) R->o->hashes[index] = 0;
        goto done;
    }
    PASS(R);

    if (c->coll == ZERO_COLL_BARRIER) {
        R->barriers_done++;
        if (R->o->barrier_arrivals) {
            int seen = atomic_load(R->o->barrier_arrivals);
            if (seen < R->barriers_done * n)
                FAIL(R, c, index, "left the barrier after %d arrivals, expected at least %d", seen,
                     R->barriers_done * n);
            else
                PASS(R);
        }
    } else {
        /* The result, bitwise, including the guard after the buffer and all_to_allv's gaps. */
        const char *got = recv ? (const char *)recv : recvbuf;
        size_t len = L.recv_elems + GUARD;
        if (c->in_place && c->coll == ZERO_COLL_REDUCE_SCATTER) {
            got = recvbuf + (size_t)r * c->count * es; /* block only; guard at buffer end */
            len = c->count;
            if (memcmp(recvbuf + L.send_elems * es, ref + L.recv_elems * es, GUARD * es) != 0)
                FAIL(R, c, index, "wrote past the end of the in-place buffer");
        }
        if (null_bufs) got = recvbuf, len = GUARD; /* nothing may be written anywhere */
        if (memcmp(got, ref, len * es) != 0) {
            size_t i = 0;
            while (i < len && memcmp(got + i * es, ref + i * es, es) == 0) i++;
            size_t bad = 0;
            for (size_t j = i; j < len; j++) bad += memcmp(got + j * es, ref + j * es, es) != 0;
            FAIL(R, c, index,
                 "%zu of %zu elements differ; first at %zu%s: got 0x%llx, expected 0x%llx", bad,
                 len, i, i >= L.recv_elems ? " (guard/gap)" : "",
                 (unsigned long long)load_bits(got, i, c->dtype),
                 (unsigned long long)load_bits(ref, i, c->dtype));
        } else {
            PASS(R);
        }
        if (R->o->hashes)
            R->o->hashes[index] = coll_hash_bytes(got, len * es, 0x243f6a8885a308d3ull);
        if (sendbuf) {
            uint64_t h = coll_hash_bytes(sendbuf, (L.send_elems + GUARD) * es, 0);
            if (h != send_hash)
                FAIL(R, c, index, "the send buffer was modified by an out-of-place call");
            else
                PASS(R);
        }
    }
    if (c->coll == ZERO_COLL_BARRIER && R->o->hashes) R->o->hashes[index] = 1;

    /* Traffic statistics against the formulas, recomputed here. */
    {
        zero_comm_stats_t s;
        zero_comm_get_stats(R->comm, &s);
        uint64_t want[4];
        expected_traffic(c, R->comm, R->o->flat, r, n, &L, want);
        int ok = 1;
        for (int k = 0; k < ZERO_COLL_COUNT; k++) {
            uint64_t calls = (k == (int)c->coll) + (extra_barrier && k == ZERO_COLL_BARRIER);
            uint64_t ws = k == (int)c->coll ? want[0] : 0, wr = k == (int)c->coll ? want[1] : 0;
            uint64_t wis = k == (int)c->coll ? want[2] : 0, wir = k == (int)c->coll ? want[3] : 0;
            if (s.calls[k] != calls || s.sent_bytes[k] != ws || s.recv_bytes[k] != wr ||
                s.inter_node_sent_bytes[k] != wis || s.inter_node_recv_bytes[k] != wir) {
                FAIL(R, c, index,
                     "stats[%s]: calls %llu sent %llu recv %llu (other nodes %llu / %llu), "
                     "expected %llu / %llu / %llu (%llu / %llu)",
                     zero_coll_name((zero_coll_t)k), (unsigned long long)s.calls[k],
                     (unsigned long long)s.sent_bytes[k], (unsigned long long)s.recv_bytes[k],
                     (unsigned long long)s.inter_node_sent_bytes[k],
                     (unsigned long long)s.inter_node_recv_bytes[k], (unsigned long long)calls,
                     (unsigned long long)ws, (unsigned long long)wr, (unsigned long long)wis,
                     (unsigned long long)wir);
                ok = 0;
            }
        }
        if (ok) PASS(R);
    }

done:
    free(sendbuf);
    free(recvbuf);
    free(ref);
    free(L.sc);
}

void coll_run_matrix(zero_comm_t *comm, const coll_opts_t *opts, coll_tally_t *tally) {
    runner_t R = {.comm = comm, .o = opts, .t = tally};
    R.rank = zero_comm_rank(comm);
    R.n = zero_comm_size(comm);
    R.members = malloc(sizeof(int) * (size_t)R.n);
    size_t ncases = build_cases(R.n, opts, NULL);
    coll_case_t *cases = malloc(sizeof *cases * ncases);
    build_cases(R.n, opts, cases);
    for (size_t i = 0; i < ncases; i++) run_case(&R, &cases[i], i);
    tally->cases += ncases;
    free(cases);
    free(R.members);
}
