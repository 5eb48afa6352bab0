/* attention.c — causal multi-head self-attention forward/backward on register-tiled
 * micro-kernels per head (no BLAS call inside).
 *
 * Why not sgemm: the per-head products are tiny (128 x 128 x 64 at the benchmark shape), so
 * dnnl_sgemm's per-call packing and dispatch weigh, and a BLAS call computes whole blocks where
 * only the causal triangle is needed. Here every product is cut into MR x NR tiles (8 x 32: 16
 * accumulators of 16 lanes held in registers by an AVX-512 kernel, plain C elsewhere) and each
 * tile stops at the diagonal, so about 55% of the full products' FLOPs are done at T = 128.
 *
 * Per (b, h) the T query rows are cut into blocks of QB rows, inside a block into MR-row tiles.
 * Forward of block [r0, r1): S = Q Kᵀ · scale, key panel by key panel (NR keys, packed transposed
 * into the thread's scratch), written straight into att for the panels a row tile reaches;
 * row-wise causal softmax in place; O = P V, each tile's sum stopping at its last row.
 * Backward of a head, blocks in order: dP = dO Vᵀ (scratch), dS = P ∘ (dP - rowsum(P ∘ dP)) in
 * place and a copy of P, both with explicit zeros past the diagonal; dV += Pᵀ dO, dK += dSᵀ Q ·
 * scale, dQ += dS K · scale, accumulated straight into dinp. Q, V, dO, K are read in place.
 * Threads: forward tasks are (b, h, block) and write disjoint outputs; backward tasks are (b, h)
 * because dK/dV of a head receive from all of its blocks (in block order). Every output element
 * is a sum in a fixed order (k ascending inside a tile, tiles and blocks in a fixed order; the
 * AVX-512 and plain tiles do the same fused multiply-adds), so results depend neither on the
 * thread count nor on the schedule.
 * Invariants: forward writes att[t][s] for s < row_end(t) with zeros for s > t, so att stays
 * "probabilities, zero above the diagonal" wherever it is written (entries past row_end(t), up to
 * NR - 1 + MR beyond the diagonal, are not written). Backward reads att only at s <= t.
 * 16-bit I/O: a task widens its head's q, k, v (and dO, dq, dk, dv) into per-thread fp32 scratch
 * and runs the same block functions on it; the probabilities stay fp32 (one (B, NH, T, T) buffer
 * shared by all layers, so fp32 costs little memory and keeps the softmax exact).
 */
#include "isa.h"
#include "kernels.h"
#include "kernels_lp.h"
#include "kmath.h"
#include "lp_io.h"

#include "core/core_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define QB 128 /* query rows per block (a multiple of MR) */
#define MR 8   /* rows of a micro tile */
#define NR 32  /* columns of a micro tile: two 512-bit vectors; also the key panel width */
_Static_assert(MR == 8 && NR == 32 && QB % MR == 0,
               "tile_avx512 is written for 8 x 32 tiles, transpose16 for NR a multiple of 16");

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* c(i, j) = alpha · Σ_k a(i, k) b(k, j) [+ c(i, j) when add], i < mr <= MR, j < nr <= NR, k < kn;
 * a(i, k) = a[i * ai + k * ak], b(k, j) = b[k * ldb + j], c(i, j) = c[i * ldc + j].
 * Reads a only for i < mr and b only for j < nr. Each sum runs k = 0, 1, ... in order, so an
 * element's value does not depend on the tile it was computed in. Inlined into a full-tile and an
 * edge instance: with mr, nr the constants MR, NR the accumulators stay in registers (GCC keeps
 * acc out of registers as soon as an index into it is not a compile-time constant, which is why
 * the edge store goes through a copy). */
static ALWAYS_INLINE void tile_body(float *restrict c, size_t ldc, float alpha, int add,
                                    const float *restrict a, size_t ai, size_t ak,
                                    const float *restrict b, size_t ldb, size_t kn, size_t mr,
                                    size_t nr) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    for (size_t k = 0; k < kn; k++) {
        const float *bk = b + k * ldb;
        float bv[NR];
        for (int j = 0; j < NR; j++) bv[j] = (size_t)j < nr ? bk[j] : 0.0f;
        for (int i = 0; i < MR; i++) {
            float x = (size_t)i < mr ? a[(size_t)i * ai + k * ak] : 0.0f;
#pragma omp simd
            for (int j = 0; j < NR; j++) acc[i][j] = KFMA(x, bv[j], acc[i][j]);
        }
    }
    if (mr == MR && nr == NR) {
        if (add) {
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++) c[(size_t)i * ldc + j] += alpha * acc[i][j];
        } else {
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++) c[(size_t)i * ldc + j] = alpha * acc[i][j];
        }
        return;
    }
    float t[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) t[i][j] = acc[i][j];
    for (size_t i = 0; i < mr; i++)
        for (size_t j = 0; j < nr; j++)
            c[i * ldc + j] = alpha * t[i][j] + (add ? c[i * ldc + j] : 0.0f);
}

static void tile_full(float *restrict c, size_t ldc, float alpha, int add, const float *restrict a,
                      size_t ai, size_t ak, const float *restrict b, size_t ldb, size_t kn) {
    tile_body(c, ldc, alpha, add, a, ai, ak, b, ldb, kn, MR, NR);
}

static void tile_edge(float *restrict c, size_t ldc, float alpha, int add, const float *restrict a,
                      size_t ai, size_t ak, const float *restrict b, size_t ldb, size_t kn,
                      size_t mr, size_t nr) {
    tile_body(c, ldc, alpha, add, a, ai, ak, b, ldb, kn, mr, nr);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86 1

/* The full tile with AVX-512 intrinsics: the same sums in the same order as tile_body with
 * fmaf, but with the 16 accumulators (two 16-lane vectors per row) named, so that they live in
 * registers (tile_body's array lives on the stack: a store and a reload per FMA). */
#define ROW_FMA(r)                                                                                 \
    do {                                                                                           \
        __m512 x = _mm512_set1_ps(ap[(r)*ai]);                                                     \
        c##r##0 = _mm512_fmadd_ps(x, b0, c##r##0);                                                 \
        c##r##1 = _mm512_fmadd_ps(x, b1, c##r##1);                                                 \
    } while (0)
#define ROW_STORE(r)                                                                               \
    do {                                                                                           \
        float *cr = c + (r)*ldc;                                                                   \
        __m512 y0 = _mm512_mul_ps(va, c##r##0), y1 = _mm512_mul_ps(va, c##r##1);                   \
        if (add) {                                                                                 \
            y0 = _mm512_add_ps(y0, _mm512_loadu_ps(cr));                                           \
            y1 = _mm512_add_ps(y1, _mm512_loadu_ps(cr + 16));                                      \
        }                                                                                          \
        _mm512_storeu_ps(cr, y0);                                                                  \
        _mm512_storeu_ps(cr + 16, y1);                                                             \
    } while (0)

__attribute__((target("avx512f"))) static void tile_avx512(float *c, size_t ldc, float alpha,
                                                           int add, const float *a, size_t ai,
                                                           size_t ak, const float *b, size_t ldb,
                                                           size_t kn) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00;
    __m512 c61 = c00, c70 = c00, c71 = c00;
    for (size_t k = 0; k < kn; k++) {
        const float *ap = a + k * ak, *bk = b + k * ldb;
        __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16);
        ROW_FMA(0);
        ROW_FMA(1);
        ROW_FMA(2);
        ROW_FMA(3);
        ROW_FMA(4);
        ROW_FMA(5);
        ROW_FMA(6);
        ROW_FMA(7);
    }
    __m512 va = _mm512_set1_ps(alpha);
    ROW_STORE(0);
    ROW_STORE(1);
    ROW_STORE(2);
    ROW_STORE(3);
    ROW_STORE(4);
    ROW_STORE(5);
    ROW_STORE(6);
    ROW_STORE(7);
}
#endif

/* The level chosen once per process for all kernels (isa.h), so ZERO_ISA caps these paths too. */
static int use_avx2(void) {
#ifdef HAVE_X86
    return zero__isa_selected() >= ZERO__ISA_AVX2;
#else
    return 0;
#endif
}

static int use_avx512(void) {
#ifdef HAVE_X86
    return zero__isa_selected() >= ZERO__ISA_AVX512;
#else
    return 0;
#endif
}

#ifdef HAVE_X86
/* Horizontal max and sum of the 8 lanes, in a fixed order. */
__attribute__((target("avx2,fma"))) static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v) {
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* kexp_nonpos (kmath.h) on 8 lanes: the same operations in the same order, so the same bits. */
__attribute__((target("avx2,fma"))) static inline __m256 exp_nonpos8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3365478515625f), zero = _mm256_setzero_ps();
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), zero); /* max returns lo for NaN */
    __m256 n = _mm256_sub_ps(
        _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    y = _mm256_blendv_ps(y, zero, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* Lanes l < k set (k <= 8), for masked loads and stores. */
__attribute__((target("avx2,fma"))) static inline __m256i lanes_below8(size_t k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* causal_softmax_row in registers: the omp simd reductions of the plain version go through
 * stack arrays (a failed store-to-load forward per reduction), which cost more per row than
 * the exponentials at T = 128. Row sums in 8 lanes, then lanes in a fixed order. */
__attribute__((target("avx2,fma"))) static void softmax_row_avx2(float *p, size_t t, size_t n) {
    const size_t full = (t + 1) / 8 * 8, rest = t + 1 - full;
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i mt = lanes_below8(rest);
    __m256 tail = _mm256_blendv_ps(ninf, _mm256_maskload_ps(p + full, mt), _mm256_castsi256_ps(mt));
    __m256 vm = tail;
    for (size_t s = 0; s < full; s += 8) vm = _mm256_max_ps(_mm256_loadu_ps(p + s), vm);
    __m256 mx = _mm256_set1_ps(hmax8(vm));
    __m256 vs = _mm256_setzero_ps();
    for (size_t s = 0; s < full; s += 8) {
        __m256 e = exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(p + s), mx));
        _mm256_storeu_ps(p + s, e);
        vs = _mm256_add_ps(vs, e);
    }
    tail = exp_nonpos8(_mm256_sub_ps(tail, mx)); /* -inf lanes give 0 */
    vs = _mm256_add_ps(vs, tail);
    __m256 inv = _mm256_set1_ps(1.0f / hsum8(vs));
    for (size_t s = 0; s < full; s += 8)
        _mm256_storeu_ps(p + s, _mm256_mul_ps(_mm256_loadu_ps(p + s), inv));
    /* the tail chunk with its zeros, then zeros to n */
    size_t s = full;
    if (s < n) {
        _mm256_maskstore_ps(p + s, lanes_below8(ZERO_MIN(8, n - s)), _mm256_mul_ps(tail, inv));
        s += 8;
    }
    for (; s + 8 <= n; s += 8) _mm256_storeu_ps(p + s, _mm256_setzero_ps());
    for (; s < n; s++) p[s] = 0.0f;
}

#endif

#ifdef HAVE_X86
/* Lanes l < k set (k <= 16). */
static inline __mmask16 lanes_below(size_t k) { return (__mmask16)((1u << k) - 1u); }

/* tile_edge with AVX-512 intrinsics: mr (a constant after inlining) rows of two 16-lane
 * accumulators, b read through masks beyond nr. The same sums in the same order as tile_body,
 * and its edge store (alpha · acc + 0 or + c), so the same bits. Decoding's single query row
 * takes this path: the scalar edge tile was a quarter of a decode step at a few hundred keys. */
__attribute__((target("avx512f"), always_inline)) static inline void
tile_avx512_edge_rows(float *c, size_t ldc, float alpha, int add, const float *a, size_t ai,
                      size_t ak, const float *b, size_t ldb, size_t kn, const size_t mr,
                      size_t nr) {
    const __mmask16 m0 = lanes_below(ZERO_MIN(nr, (size_t)16));
    const __mmask16 m1 = nr > 16 ? lanes_below(nr - 16) : 0;
    __m512 acc[MR][2];
    for (size_t i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (size_t k = 0; k < kn; k++) {
        const float *ap = a + k * ak, *bk = b + k * ldb;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bk), b1 = _mm512_maskz_loadu_ps(m1, bk + 16);
        for (size_t i = 0; i < mr; i++) {
            const __m512 x = _mm512_set1_ps(ap[i * ai]);
            acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
    for (size_t i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        const __m512 c0 = add ? _mm512_maskz_loadu_ps(m0, ci) : _mm512_setzero_ps();
        const __m512 c1 = add ? _mm512_maskz_loadu_ps(m1, ci + 16) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(ci, m0, _mm512_add_ps(_mm512_mul_ps(va, acc[i][0]), c0));
        _mm512_mask_storeu_ps(ci + 16, m1, _mm512_add_ps(_mm512_mul_ps(va, acc[i][1]), c1));
    }
}

__attribute__((target("avx512f"))) static void
tile_avx512_edge(float *c, size_t ldc, float alpha, int add, const float *a, size_t ai, size_t ak,
                 const float *b, size_t ldb, size_t kn, size_t mr, size_t nr) {
    switch (mr) {
#define EDGE_ROWS(n)                                                                               \
    case n: tile_avx512_edge_rows(c, ldc, alpha, add, a, ai, ak, b, ldb, kn, n, nr); break;
        EDGE_ROWS(1)
        EDGE_ROWS(2)
        EDGE_ROWS(3)
        EDGE_ROWS(4)
        EDGE_ROWS(5)
        EDGE_ROWS(6)
        EDGE_ROWS(7)
        EDGE_ROWS(8)
#undef EDGE_ROWS
    }
}

/* Backward row: d[s] = p[s] (d[s] - Σ_{u<=t} p[u] d[u]) and pc[s] = p[s] for s <= t; d and pc
 * zero on (t, n). Reads p only at s <= t. */
__attribute__((target("avx512f"))) static void
dsoftmax_row_avx512(float *d, float *pc, const float *p, size_t t, size_t n) {
    const size_t full = (t + 1) / 16 * 16, rest = t + 1 - full;
    const __mmask16 mt = lanes_below(rest);
    __m512 acc = _mm512_setzero_ps();
    for (size_t s = 0; s < full; s += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(p + s), _mm512_loadu_ps(d + s), acc);
    __m512 pt = _mm512_maskz_loadu_ps(mt, p + full), dt = _mm512_maskz_loadu_ps(mt, d + full);
    acc = _mm512_fmadd_ps(pt, dt, acc);
    __m512 dot = _mm512_set1_ps(_mm512_reduce_add_ps(acc));
    for (size_t s = 0; s < full; s += 16) {
        __m512 pv = _mm512_loadu_ps(p + s);
        _mm512_storeu_ps(d + s, _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_loadu_ps(d + s), dot)));
        _mm512_storeu_ps(pc + s, pv);
    }
    size_t s = full;
    if (s < n) { /* masked lanes of pt are 0, so the products there are 0 too */
        __mmask16 mn = lanes_below(ZERO_MIN(16, n - s));
        _mm512_mask_storeu_ps(d + s, mn, _mm512_maskz_mul_ps(mt, pt, _mm512_sub_ps(dt, dot)));
        _mm512_mask_storeu_ps(pc + s, mn, pt);
        s += 16;
    }
    for (; s < n; s++) d[s] = 0.0f, pc[s] = 0.0f;
}
#endif

static void tile(float *c, size_t ldc, float alpha, int add, const float *a, size_t ai, size_t ak,
                 const float *b, size_t ldb, size_t kn, size_t mr, size_t nr) {
    if (mr == MR && nr == NR) {
#ifdef HAVE_X86
        if (use_avx512()) {
            tile_avx512(c, ldc, alpha, add, a, ai, ak, b, ldb, kn);
            return;
        }
#endif
        tile_full(c, ldc, alpha, add, a, ai, ak, b, ldb, kn);
        return;
    }
#ifdef HAVE_X86
    if (use_avx512()) {
        tile_avx512_edge(c, ldc, alpha, add, a, ai, ak, b, ldb, kn, mr, nr);
        return;
    }
#endif
    tile_edge(c, ldc, alpha, add, a, ai, ak, b, ldb, kn, mr, nr);
}

/* End (exclusive) of the columns `scores` writes in row t of block [r0, r1): the key panels up to
 * the last row of t's tile. Always > t, and >= the end of t's MR-tile (capped at T). */
static size_t row_end(size_t t, size_t r0, size_t r1, size_t T) {
    size_t i0 = r0 + (t - r0) / MR * MR;
    size_t last = ZERO_MIN(i0 + MR, r1);
    return ZERO_MIN(T, (last + NR - 1) / NR * NR);
}

static size_t round_nr(size_t n) { return (n + NR - 1) / NR * NR; }

/* Row stride of the backward's dS and P copies: one cache line more than T, so that a column
 * walk (the dK and dV tiles read them transposed) spreads over all L1 sets instead of T / 16
 * of them. */
static size_t ds_ld(size_t T) { return T + 16; }

/* Packing: only the keys of the scores products (K in the forward, V in the backward's dP) are
 * copied, because a tile reads NR consecutive keys of one head dimension per step and they are
 * rows apart in inp. The other operands are read in place (copying them into contiguous panels
 * measured no faster). */

#ifdef HAVE_X86
/* dst[c * ldd + r] = src[r * ld + c] for r, c < 16: unpack and lane shuffles in registers. */
__attribute__((target("avx512f"))) static void transpose16(float *dst, size_t ldd, const float *src,
                                                           size_t ld) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3 */
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        r[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        _mm512_storeu_ps(dst + (size_t)(c)*ldd, _mm512_shuffle_f32x4(v0, v2, 0x88));
        _mm512_storeu_ps(dst + (size_t)(4 + c) * ldd, _mm512_shuffle_f32x4(v0, v2, 0xDD));
        _mm512_storeu_ps(dst + (size_t)(8 + c) * ldd, _mm512_shuffle_f32x4(v1, v3, 0x88));
        _mm512_storeu_ps(dst + (size_t)(12 + c) * ldd, _mm512_shuffle_f32x4(v1, v3, 0xDD));
    }
}
#endif

/* Key panels: panel p holds keys [p NR, p NR + NR) transposed, dst[(p hs + d) NR + jj] =
 * src[(p NR + jj) ld + d], zero for keys >= n; round_nr(n) * hs floats. A scores tile reads NR
 * consecutive keys of one dimension per step. */
static void pack_key_panels(float *dst, const float *src, size_t ld, size_t n, size_t hs) {
    for (size_t j0 = 0; j0 < n; j0 += NR) {
        float *p = dst + j0 * hs;
#if defined(__GNUC__)
        /* the next panel's rows are rows of a (B, T, 3C) tensor, a stride the hardware
         * prefetcher does not follow within one panel */
        for (size_t jj = 0; jj < NR && j0 + NR + jj < n; jj++)
            for (size_t d = 0; d < hs; d += 16) __builtin_prefetch(src + (j0 + NR + jj) * ld + d);
#endif
        for (size_t jb = 0; jb < NR; jb += 16) {
            size_t d0 = 0;
#ifdef HAVE_X86
            if (j0 + jb + 16 <= n && use_avx512())
                for (; d0 + 16 <= hs; d0 += 16)
                    transpose16(p + d0 * NR + jb, NR, src + (j0 + jb) * ld + d0, ld);
#endif
            for (size_t jj = jb; jj < jb + 16; jj++) {
                const float *row = src + (j0 + jj) * ld;
                for (size_t d = d0; d < hs; d++) p[d * NR + jj] = j0 + jj < n ? row[d] : 0.0f;
            }
        }
    }
}

/* s(i, j) = alpha · a_i · key_j for rows i in [r0, r1) and the key panels [j0, j0 + NR) with
 * j0 <= the last row of i's tile; a_i at a + (i - r0) hs (packed rows), keys as key panels
 * (pack_key_panels); s row i at s + (i - r0) ls. */
static void scores(float *s, size_t ls, const float *a, size_t la, const float *kp, size_t r0,
                   size_t r1, size_t T, size_t hs, float alpha) {
    for (size_t j0 = 0; j0 < r1; j0 += NR) {
        size_t nr = ZERO_MIN(NR, T - j0);
        /* first row tile whose last row reaches j0 */
        size_t i0 = j0 > r0 ? r0 + (j0 - r0) / MR * MR : r0;
        for (size_t i = i0; i < r1; i += MR)
            tile(s + (i - r0) * ls + j0, ls, alpha, 0, a + (i - r0) * la, la, 1, kp + j0 * hs, NR,
                 hs, ZERO_MIN(MR, r1 - i), nr);
    }
}

/* Row t of the probabilities: softmax over s in [0, t] in place, p[s] = 0 for s in (t, n).
 * The loops run over all n columns with the causal mask as a select: n is the end of the tile's
 * key panels (a multiple of NR but at the sequence end), so they vectorise without remainder
 * code, which was half the cost of a row at T = 128. */
static void causal_softmax_row(float *p, size_t t, size_t n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (size_t s = 0; s < n; s++) {
        float x = s <= t ? p[s] : -INFINITY;
        mx = x > mx ? x : mx;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (size_t s = 0; s < n; s++) {
        float e = s <= t ? kexp_nonpos(p[s] - mx) : 0.0f;
        p[s] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
#pragma omp simd
    for (size_t s = 0; s < n; s++) p[s] *= inv;
}

/* See dsoftmax_row_avx512. */
static void dsoftmax_row(float *d, float *pc, const float *p, size_t t, size_t n) {
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (size_t s = 0; s <= t; s++) dot += p[s] * d[s];
#pragma omp simd
    for (size_t s = 0; s <= t; s++) {
        d[s] = p[s] * (d[s] - dot);
        pc[s] = p[s];
    }
    for (size_t s = t + 1; s < n; s++) d[s] = 0.0f, pc[s] = 0.0f;
}

static void softmax_row(float *p, size_t t, size_t n) {
#ifdef HAVE_X86
    if (use_avx2()) {
        softmax_row_avx2(p, t, n);
        return;
    }
#endif
    causal_softmax_row(p, t, n);
}

static void dsoftmax(float *d, float *pc, const float *p, size_t t, size_t n) {
#ifdef HAVE_X86
    if (use_avx512()) {
        dsoftmax_row_avx512(d, pc, p, t, n);
        return;
    }
#endif
    dsoftmax_row(d, pc, p, t, n);
}

/* Forward of query rows [r0, r1) of one head against keys [0, r1) of the T (>= r1) a row may
 * reach. q (ld lq), o (ld lo) and Pb (ld lp, >= row_end) point at row r0; k, v (ld lkv) at key
 * 0. The training forward passes its (T, T) probabilities; the decoder (T = r1) a scratch block.
 * Packs into the thread's ZERO__KS_ROWS scratch. */
static void fwd_block(float *o, size_t lo, float *Pb, size_t lp, size_t T, const float *q,
                      size_t lq, const float *k, const float *v, size_t lkv, size_t r0, size_t r1,
                      size_t hs, float scale) {
    float *kp = zero__kscratch(ZERO__KS_ROWS, round_nr(r1) * hs * sizeof(float));
    pack_key_panels(kp, k, lkv, r1, hs);
    scores(Pb, lp, q, lq, kp, r0, r1, T, hs, scale);
    for (size_t t = r0; t < r1; t++) softmax_row(Pb + (t - r0) * lp, t, row_end(t, r0, r1, T));
    /* O(i, :) = Σ_{s < i0 + mr} P(i, s) V(s, :): P is zero past the diagonal inside the tile */
    for (size_t c0 = 0; c0 < hs; c0 += NR)
        for (size_t i = r0; i < r1; i += MR) {
            size_t mr = ZERO_MIN(MR, r1 - i);
            tile(o + (i - r0) * lo + c0, lo, 1.0f, 0, Pb + (i - r0) * lp, lp, 1, v + c0, lkv,
                 i + mr, mr, ZERO_MIN(NR, hs - c0));
        }
}

/* Backward of one head, all query blocks in order, accumulating into dq, dk, dv (ld ld). q, k, v
 * (ld li) and dO (ld lo) point at row 0; P at the head's (T, T) probabilities; dS and Pc:
 * QB * ds_ld(T) scratch floats each. Packs into the thread's ZERO__KS_ROWS scratch. */
static void bwd_head(float *dq, float *dk, float *dv, size_t ld, float *dS, float *Pc,
                     const float *dO, size_t lo, const float *q, const float *k, const float *v,
                     size_t li, const float *P, size_t T, size_t hs, float scale) {
    const size_t lds = ds_ld(T);
    float *vt = zero__kscratch(ZERO__KS_ROWS, round_nr(T) * hs * sizeof(float));
    pack_key_panels(vt, v, li, T, hs);
    for (size_t r0 = 0; r0 < T; r0 += QB) {
        size_t r1 = ZERO_MIN(T, r0 + QB);
        /* dP(i, s) = dO_i · v_s into dS */
        scores(dS, lds, dO + r0 * lo, lo, vt, r0, r1, T, hs, 1.0f);
        /* dS = P ∘ (dP - rowsum(P ∘ dP)); Pc = P. Both get zeros on (t, end of t's MR-tile),
         * the part of the triangle the tile products below read. */
        for (size_t t = r0; t < r1; t++)
            dsoftmax(dS + (t - r0) * lds, Pc + (t - r0) * lds, P + t * T, t,
                     ZERO_MIN(T, (t / MR + 1) * MR));
        /* key tiles [j0, j0 + mr) of dV and dK receive from the block rows i >= j0 */
        for (size_t j0 = 0; j0 < r1; j0 += MR) {
            size_t mr = ZERO_MIN(MR, r1 - j0), ib = ZERO_MAX(r0, j0), kn = r1 - ib;
            const float *pa = Pc + (ib - r0) * lds + j0, *sa = dS + (ib - r0) * lds + j0;
            for (size_t c0 = 0; c0 < hs; c0 += NR) {
                size_t nr = ZERO_MIN(NR, hs - c0);
                tile(dv + j0 * ld + c0, ld, 1.0f, 1, pa, 1, lds, dO + ib * lo + c0, lo, kn, mr, nr);
                tile(dk + j0 * ld + c0, ld, scale, 1, sa, 1, lds, q + ib * li + c0, li, kn, mr, nr);
            }
        }
        /* dQ(i, :) += scale Σ_{s < i0 + mr} dS(i, s) K(s, :) */
        for (size_t i = r0; i < r1; i += MR) {
            size_t mr = ZERO_MIN(MR, r1 - i);
            for (size_t c0 = 0; c0 < hs; c0 += NR)
                tile(dq + i * ld + c0, ld, scale, 1, dS + (i - r0) * lds, lds, 1, k + c0, li,
                     i + mr, mr, ZERO_MIN(NR, hs - c0));
        }
    }
}

size_t zero__attention_scratch_count(size_t T, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads;
    return nt * 2 * (size_t)QB * ds_ld(T);
}

void zero__attention_forward(float *out, float *att, const float *inp, size_t B, size_t T, size_t C,
                             size_t NH, int threads) {
    ZERO_ASSERT(out && att && inp && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t nblk = (T + QB - 1) / QB;
    const size_t ntask = B * NH * nblk;
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
        /* dynamic: blocks late in the sequence cost up to T/QB times more than early ones */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t task = 0; task < ntask; task++) {
        size_t blk = nblk - 1 - task % nblk; /* big blocks first for better balance */
        size_t bh = task / nblk, b = bh / NH, h = bh % NH;
        size_t r0 = blk * QB, r1 = ZERO_MIN(T, r0 + QB);
        const float *q = inp + b * T * C3 + h * hs;
        fwd_block(out + (b * T + r0) * C + h * hs, C, att + (bh * T + r0) * T, T, T, q + r0 * C3,
                  C3, q + C, q + 2 * C, C3, r0, r1, hs, scale);
    }
}

size_t zero__attention_decode_scratch_count(size_t max_keys, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads;
    return nt * (size_t)QB * round_nr(max_keys);
}

void zero__attention_decode(float *out, float *scratch, const float *q, size_t ldq, const float *kc,
                            const float *vc, size_t head_stride, size_t B, size_t T, size_t pos,
                            size_t C, size_t NH, int threads) {
    ZERO_ASSERT(out && scratch && q && kc && vc && NH > 0 && C % NH == 0 && threads >= 1 && T);
    const size_t hs = C / NH, keys = pos + T, lp = round_nr(keys);
    const float scale = 1.0f / sqrtf((float)hs);
    /* the new rows in blocks of QB, as the training forward cuts its rows */
    const size_t nblk = (T + QB - 1) / QB, ntask = B * NH * nblk;
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *P = scratch + (size_t)id * QB * lp;
#pragma omp for schedule(dynamic, 1)
        for (size_t task = 0; task < ntask; task++) {
            size_t blk = nblk - 1 - task % nblk;
            size_t bh = task / nblk, b = bh / NH, h = bh % NH;
            size_t t0 = blk * QB, t1 = ZERO_MIN(T, t0 + QB);
            const float *k = kc + bh * head_stride, *v = vc + bh * head_stride;
            fwd_block(out + (b * T + t0) * C + h * hs, C, P, lp, pos + t1,
                      q + (b * T + t0) * ldq + h * hs, ldq, k, v, hs, pos + t0, pos + t1, hs,
                      scale);
        }
    }
}

void zero__attention_backward(float *dinp, float *scratch, const float *dout, const float *inp,
                              const float *att, size_t B, size_t T, size_t C, size_t NH,
                              int threads) {
    ZERO_ASSERT(dinp && scratch && dout && inp && att && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t ntask = B * NH;
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *dS = scratch + (size_t)id * 2 * QB * ds_ld(T), *Pc = dS + (size_t)QB * ds_ld(T);
#pragma omp for schedule(dynamic, 1)
        for (size_t bh = 0; bh < ntask; bh++) {
            size_t b = bh / NH, h = bh % NH;
            const float *in = inp + b * T * C3 + h * hs;
            float *d = dinp + b * T * C3 + h * hs;
            bwd_head(d, d + C, d + 2 * C, C3, dS, Pc, dout + b * T * C + h * hs, C, in, in + C,
                     in + 2 * C, C3, att + bh * T * T, T, hs, scale);
        }
    }
}

/* ------------------------------------------------------------------------------ 16-bit I/O */

/* Per thread: dS and Pc (QB, ds_ld(T)) each, then q, k, v, dO, dq, dk, dv (T, hs) each in fp32.
 * The forward uses the first q, k, v and o = dO's place. */
size_t zero__attention_scratch_count_lp(size_t T, size_t hs, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads;
    return nt * (2 * (size_t)QB * ds_ld(T) + 7 * T * hs);
}

/* dst(rows, hs) fp32 contiguous <- src rows of dt with stride ld (elements). */
static void widen_rows(float *dst, const void *src, size_t ld, size_t rows, size_t hs,
                       zero_dtype_t dt) {
    const size_t es = zero_dtype_size(dt);
    for (size_t i = 0; i < rows; i++)
        zero__widen(dst + i * hs, (const char *)src + i * ld * es, hs, dt);
}

static void narrow_rows(void *dst, size_t ld, const float *src, size_t rows, size_t hs,
                        zero_dtype_t dt) {
    const size_t es = zero_dtype_size(dt);
    for (size_t i = 0; i < rows; i++) zero__narrow((char *)dst + i * ld * es, src + i * hs, hs, dt);
}

void zero__attention_forward_lp(void *out, float *att, const void *inp, float *scratch,
                                zero_dtype_t dt, size_t B, size_t T, size_t C, size_t NH,
                                int threads) {
    ZERO_ASSERT(out && att && inp && scratch && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C, es = zero_dtype_size(dt);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t nblk = (T + QB - 1) / QB;
    const size_t ntask = B * NH * nblk;
    const size_t per = zero__attention_scratch_count_lp(T, hs, 1);
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *q = scratch + (size_t)id * per + 2 * (size_t)QB * ds_ld(T);
        float *k = q + T * hs, *v = k + T * hs, *o = v + T * hs;
#pragma omp for schedule(dynamic, 1)
        for (size_t task = 0; task < ntask; task++) {
            size_t blk = nblk - 1 - task % nblk;
            size_t bh = task / nblk, b = bh / NH, h = bh % NH;
            size_t r0 = blk * QB, r1 = ZERO_MIN(T, r0 + QB), m = r1 - r0;
            const char *base = (const char *)inp + (b * T * C3 + h * hs) * es;
            widen_rows(q + r0 * hs, base + r0 * C3 * es, C3, m, hs, dt);
            widen_rows(k, base + C * es, C3, r1, hs, dt);
            widen_rows(v, base + 2 * C * es, C3, r1, hs, dt);
            fwd_block(o + r0 * hs, hs, att + (bh * T + r0) * T, T, T, q + r0 * hs, hs, k, v, hs, r0,
                      r1, hs, scale);
            narrow_rows((char *)out + ((b * T + r0) * C + h * hs) * es, C, o + r0 * hs, m, hs, dt);
        }
    }
}

/* Per thread: P (QB, round_nr(keys)), q and o (QB, hs), k and v (round_nr(keys), hs). */
size_t zero__attention_decode_scratch_count_lp(size_t max_keys, size_t hs, int threads) {
    size_t nt = threads < 1 ? 1 : (size_t)threads, kp = round_nr(max_keys);
    return nt * ((size_t)QB * kp + 2 * (size_t)QB * hs + 2 * kp * hs);
}

void zero__attention_decode_lp(void *out, float *scratch, const void *q, size_t ldq, const void *kc,
                               const void *vc, size_t head_stride, zero_dtype_t dt, size_t B,
                               size_t T, size_t pos, size_t C, size_t NH, size_t max_keys,
                               int threads) {
    ZERO_ASSERT(out && scratch && q && kc && vc && NH > 0 && C % NH == 0 && threads >= 1 && T &&
                pos + T <= max_keys);
    const size_t hs = C / NH, keys = pos + T, lp = round_nr(keys), es = zero_dtype_size(dt);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t nblk = (T + QB - 1) / QB, ntask = B * NH * nblk;
    const size_t per = zero__attention_decode_scratch_count_lp(max_keys, hs, 1);
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *P = scratch + (size_t)id * per, *qf = P + (size_t)QB * round_nr(max_keys);
        float *of = qf + (size_t)QB * hs, *kf = of + (size_t)QB * hs;
        float *vf = kf + round_nr(max_keys) * hs;
#pragma omp for schedule(dynamic, 1)
        for (size_t task = 0; task < ntask; task++) {
            size_t blk = nblk - 1 - task % nblk;
            size_t bh = task / nblk, b = bh / NH, h = bh % NH;
            size_t t0 = blk * QB, t1 = ZERO_MIN(T, t0 + QB), m = t1 - t0;
            /* as zero__attention_forward_lp: the head's q, k, v widened, the fp32 block, one
             * rounding of the output */
            widen_rows(qf, (const char *)q + ((b * T + t0) * ldq + h * hs) * es, ldq, m, hs, dt);
            zero__widen(kf, (const char *)kc + bh * head_stride * es, (pos + t1) * hs, dt);
            zero__widen(vf, (const char *)vc + bh * head_stride * es, (pos + t1) * hs, dt);
            fwd_block(of, hs, P, lp, pos + t1, qf, hs, kf, vf, hs, pos + t0, pos + t1, hs, scale);
            narrow_rows((char *)out + ((b * T + t0) * C + h * hs) * es, C, of, m, hs, dt);
        }
    }
}

void zero__attention_backward_lp(void *dinp, float *scratch, const void *dout, const void *inp,
                                 const float *att, zero_dtype_t dt, size_t B, size_t T, size_t C,
                                 size_t NH, int threads) {
    ZERO_ASSERT(dinp && scratch && dout && inp && att && NH > 0 && C % NH == 0 && threads >= 1);
    const size_t hs = C / NH, C3 = 3 * C, es = zero_dtype_size(dt);
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t ntask = B * NH, per = zero__attention_scratch_count_lp(T, hs, 1);
    int nt = (int)ZERO_MIN((size_t)threads, ntask);
    if (nt < 1) nt = 1;
#pragma omp parallel num_threads(nt)
    {
        int id, team;
        kteam(&id, &team);
        float *dS = scratch + (size_t)id * per, *Pc = dS + (size_t)QB * ds_ld(T);
        float *q = Pc + (size_t)QB * ds_ld(T);
        float *k = q + T * hs, *v = k + T * hs, *dO = v + T * hs;
        float *dq = dO + T * hs, *dk = dq + T * hs, *dv = dk + T * hs;
#pragma omp for schedule(dynamic, 1)
        for (size_t bh = 0; bh < ntask; bh++) {
            size_t b = bh / NH, h = bh % NH;
            const char *in = (const char *)inp + (b * T * C3 + h * hs) * es;
            char *d = (char *)dinp + (b * T * C3 + h * hs) * es;
            widen_rows(q, in, C3, T, hs, dt);
            widen_rows(k, in + C * es, C3, T, hs, dt);
            widen_rows(v, in + 2 * C * es, C3, T, hs, dt);
            widen_rows(dO, (const char *)dout + (b * T * C + h * hs) * es, C, T, hs, dt);
            widen_rows(dq, d, C3, T, hs, dt);
            widen_rows(dk, d + C * es, C3, T, hs, dt);
            widen_rows(dv, d + 2 * C * es, C3, T, hs, dt);
            bwd_head(dq, dk, dv, hs, dS, Pc, dO, hs, q, k, v, hs, att + bh * T * T, T, hs, scale);
            narrow_rows(d, C3, dq, T, hs, dt);
            narrow_rows(d + C * es, C3, dk, T, hs, dt);
            narrow_rows(d + 2 * C * es, C3, dv, T, hs, dt);
        }
    }
}
