/* matmul_lp.c — bf16 / fp16 linear layer and GEMM with fp32 accumulation.
 *
 * Two paths, chosen per dtype at build time by what exists (docs/mixed-precision.md):
 * - bf16 on oneDNN's dnnl_matmul primitive. On this CPU oneDNN 2.6.3 runs it on AMX-BF16
 *   (brg:avx512_core_amx_bf16), elsewhere on AVX512-BF16 or its own emulation. Accumulation
 *   (+=) is a sum post-op, so a 16-bit destination is rounded once. Primitives are immutable
 *   after creation and run with a user-provided scratchpad, so one cached primitive can be
 *   executed by several rank threads at once (oneDNN's default "library" scratchpad is
 *   per-thread and would tie a primitive to the thread that created it).
 * - fp16 (oneDNN 2.6 has no f16 matmul on CPU: primitive creation returns "unimplemented"), and
 *   bf16 when oneDNN is missing: widen both operands to fp32 (exact) into per-thread scratch and
 *   call zero__sgemm; a 16-bit destination goes through an fp32 scratch tile and is rounded once.
 * Invariants: the cache only grows (bounded by CACHE_MAX; beyond it a primitive is made and
 * destroyed per call) and its entries are never freed while the process runs, except by
 * zero__matmul_lp_cache_clear when no call is in flight. Per-thread scratch only grows and is
 * freed when its thread exits (lp_io.c). Allocation failure of scratch is
 * fatal (ZERO_ASSERT): these kernels return void like every kernel in kernels.h.
 */
#include "kernels_lp.h"

#include "core/core_internal.h"
#include "kernels.h"
#include "kmath.h"
#include "lp_io.h"

#include <pthread.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(ZERO_HAVE_DNNL)
#include <dnnl.h>
#endif

/* ------------------------------------------------------------------------------ helpers */

/* dst(rows, cols; ld dld) <- src(rows, cols; ld sld), 16-bit -> fp32. */
static void widen_rows(float *dst, size_t dld, const uint16_t *src, size_t sld, size_t rows,
                       size_t cols, zero_dtype_t dt, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * cols >= 65536)
    for (size_t i = 0; i < rows; i++) zero__widen(dst + i * dld, src + i * sld, cols, dt);
}

static void narrow_rows(uint16_t *dst, size_t dld, const float *src, size_t sld, size_t rows,
                        size_t cols, zero_dtype_t dt, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows * cols >= 65536)
    for (size_t i = 0; i < rows; i++) zero__narrow(dst + i * dld, src + i * sld, cols, dt);
}

static int is16(zero_dtype_t dt) { return dt == ZERO_DTYPE_BF16 || dt == ZERO_DTYPE_FP16; }

/* ------------------------------------------------------------------------------ widening path */

/* C = op(A) op(B) (+ C) (+ bias row) through fp32 copies of the operands and zero__sgemm. */
static void gemm_widen(int ta, int tb, size_t M, size_t N, size_t K, const uint16_t *A, size_t lda,
                       const uint16_t *B, size_t ldb, zero_dtype_t dt, int acc, void *C, size_t ldc,
                       zero_dtype_t cdt, const uint16_t *bias, int threads) {
    size_t ar = ta ? K : M, ac = ta ? M : K; /* stored shape of A */
    size_t br = tb ? N : K, bc = tb ? K : N;
    float *a = zero__kscratch(ZERO__KS_MM_A, ar * ac * sizeof(float));
    float *b = zero__kscratch(ZERO__KS_MM_B, br * bc * sizeof(float));
    widen_rows(a, ac, A, lda, ar, ac, dt, threads);
    widen_rows(b, bc, B, ldb, br, bc, dt, threads);
    float *c;
    size_t cld;
    if (cdt == ZERO_DTYPE_FP32) {
        c = C;
        cld = ldc;
    } else {
        c = zero__kscratch(ZERO__KS_MM_C, M * N * sizeof(float));
        cld = N;
        if (acc) widen_rows(c, cld, C, ldc, M, N, cdt, threads);
    }
    float beta = acc ? 1.0f : 0.0f;
    if (bias) {
        float *fb = zero__kscratch(ZERO__KS_MM_BIAS, N * sizeof(float));
        zero__widen(fb, bias, N, dt);
        /* Seed (or add to) C with the bias and let the GEMM accumulate: one pass over C. */
#pragma omp parallel for num_threads(threads) schedule(static) if (M * N >= 65536)
        for (size_t i = 0; i < M; i++) {
            float *row = c + i * cld;
            if (acc)
                for (size_t j = 0; j < N; j++) row[j] += fb[j];
            else
                memcpy(row, fb, N * sizeof(float));
        }
        beta = 1.0f;
    }
    zero__sgemm(ta, tb, M, N, K, 1.0f, a, ac, b, bc, beta, c, cld, threads);
    if (cdt != ZERO_DTYPE_FP32) narrow_rows(C, ldc, c, cld, M, N, cdt, threads);
}

/* ------------------------------------------------------------------------------ oneDNN path */

#if defined(ZERO_HAVE_DNNL)

enum { CACHE_MAX = 256 };

/* Everything a primitive depends on. Zero-filled before use so memcmp sees no padding junk. */
typedef struct {
    int ta, tb, acc, bias, threads;
    zero_dtype_t cdt;
    size_t M, N, K, lda, ldb, ldc;
} gemm_key_t;

typedef struct {
    gemm_key_t key;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md, scratch_md;
    size_t scratch_bytes;
    char impl[64];
} entry_t;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t *cache[CACHE_MAX];
static int cache_n;

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine; /* NULL if the CPU engine could not be created */

static void engine_init(void) {
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

static void desc2d(dnnl_memory_desc_t *md, size_t rows, size_t cols, dnnl_dim_t s0, dnnl_dim_t s1,
                   dnnl_data_type_t dt) {
    dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols};
    dnnl_dims_t strides = {s0, s1};
    ZERO_ASSERT(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success);
}

/* Build the primitive for k (threads already set on the calling thread). Returns NULL with the
 * entry freed if oneDNN cannot (then the caller takes the widening path). */
static entry_t *entry_create(const gemm_key_t *k) {
    entry_t *e = calloc(1, sizeof *e);
    ZERO_ASSERT(e != NULL);
    e->key = *k;
    /* A(m, k): stored (M, K) row-major, or (K, M) when transposed: element (m, k) at k*lda+m. */
    desc2d(&e->a_md, k->M, k->K, k->ta ? 1 : (dnnl_dim_t)k->lda, k->ta ? (dnnl_dim_t)k->lda : 1,
           dnnl_bf16);
    desc2d(&e->b_md, k->K, k->N, k->tb ? 1 : (dnnl_dim_t)k->ldb, k->tb ? (dnnl_dim_t)k->ldb : 1,
           dnnl_bf16);
    desc2d(&e->c_md, k->M, k->N, (dnnl_dim_t)k->ldc, 1,
           k->cdt == ZERO_DTYPE_FP32 ? dnnl_f32 : dnnl_bf16);
    if (k->bias) desc2d(&e->bias_md, 1, k->N, (dnnl_dim_t)k->N, 1, dnnl_bf16);

    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok =
        dnnl_matmul_desc_init(&md, &e->a_md, &e->b_md, k->bias ? &e->bias_md : NULL, &e->c_md) ==
            dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->acc) {
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    }
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success;
    if (ok) {
        const dnnl_memory_desc_t *smd =
            dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->scratch_md = *smd;
        e->scratch_bytes = dnnl_memory_desc_get_size(smd);
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
            impl)
            snprintf(e->impl, sizeof e->impl, "%s", impl);
        ok = dnnl_primitive_create(&e->prim, pd) == dnnl_success;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (!ok) {
        free(e);
        return NULL;
    }
    return e;
}

static void entry_free(entry_t *e) {
    if (!e) return;
    dnnl_primitive_destroy(e->prim);
    free(e);
}

/* The cached primitive for k, creating it on a miss. *owned is set when the entry did not fit
 * in the cache: the caller then frees it after use. */
static entry_t *lookup(const gemm_key_t *k, int *owned) {
    *owned = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < cache_n; i++) {
        if (memcmp(&cache[i]->key, k, sizeof *k) == 0) {
            entry_t *e = cache[i];
            pthread_mutex_unlock(&cache_lock);
            return e;
        }
    }
    /* Create under the lock: a miss is rare (a handful of shapes per model) and this keeps two
     * threads from building the same primitive. */
    entry_t *e = entry_create(k);
    if (e) {
        if (cache_n < CACHE_MAX)
            cache[cache_n++] = e;
        else
            *owned = 1;
    }
    pthread_mutex_unlock(&cache_lock);
    return e;
}

/* Returns 0 if oneDNN could not take this GEMM (the caller falls back to widening). */
static int gemm_dnnl(int ta, int tb, size_t M, size_t N, size_t K, const void *A, size_t lda,
                     const void *B, size_t ldb, int acc, void *C, size_t ldc, zero_dtype_t cdt,
                     const void *bias, int threads) {
    pthread_once(&engine_once, engine_init);
    if (!engine) return 0;
    /* oneDNN 2.6.3's AMX bf16 matmul returns wrong sums (or dies of SIGILL in a worker thread
     * whose tile configuration was skipped) for K = 63 with two threads and M >= 37, every
     * transpose combination (found by an exhaustive scan of M, K <= 70; oneDNN issue #1661 shows
     * the same K = 63 crash). No even K failed, so odd K takes the exact widening path: the model
     * only meets one when B x T or the width is odd. */
    if (K % 2) return 0;
    gemm_key_t k;
    memset(&k, 0, sizeof k);
    k.ta = ta != 0;
    k.tb = tb != 0;
    k.acc = acc != 0;
    k.bias = bias != NULL;
    k.cdt = cdt;
    k.M = M;
    k.N = N;
    k.K = K;
    k.lda = lda;
    k.ldb = ldb;
    k.ldc = ldc;
#if defined(_OPENMP)
    k.threads = omp_in_parallel() ? 1 : threads;
#else
    k.threads = 1;
#endif
    int owned;
    entry_t *e = lookup(&k, &owned);
    if (!e) return 0;

    void *sp = e->scratch_bytes ? zero__kscratch(ZERO__KS_MM_DNNL, e->scratch_bytes) : NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, mbias = NULL, ms = NULL;
    dnnl_stream_t stream = NULL;
    /* oneDNN takes non-const handles but only reads SRC, WEIGHTS and BIAS. */
    int ok =
        dnnl_memory_create(&ma, &e->a_md, engine, (void *)A) == dnnl_success &&
        dnnl_memory_create(&mb, &e->b_md, engine, (void *)B) == dnnl_success &&
        dnnl_memory_create(&mc, &e->c_md, engine, C) == dnnl_success &&
        (!bias || dnnl_memory_create(&mbias, &e->bias_md, engine, (void *)bias) == dnnl_success) &&
        (!sp || dnnl_memory_create(&ms, &e->scratch_md, engine, sp) == dnnl_success) &&
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[5];
        int n = 0;
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ma};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mb};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mc};
        if (mbias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mbias};
        if (ms) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
        /* After a successful creation only an internal failure can make this fail. */
        ZERO_ASSERT(dnnl_primitive_execute(e->prim, stream, n, args) == dnnl_success);
        ZERO_ASSERT(dnnl_stream_wait(stream) == dnnl_success);
    }
    if (stream) dnnl_stream_destroy(stream);
    if (ms) dnnl_memory_destroy(ms);
    if (mbias) dnnl_memory_destroy(mbias);
    if (mc) dnnl_memory_destroy(mc);
    if (mb) dnnl_memory_destroy(mb);
    if (ma) dnnl_memory_destroy(ma);
    if (owned) entry_free(e);
    return ok;
}
#endif /* ZERO_HAVE_DNNL */

void zero__matmul_lp_cache_clear(void) {
#if defined(ZERO_HAVE_DNNL)
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < cache_n; i++) entry_free(cache[i]);
    cache_n = 0;
    pthread_mutex_unlock(&cache_lock);
#endif
}

const char *zero__matmul_lp_impl(zero_dtype_t dtype) {
    ZERO_ASSERT(is16(dtype));
#if defined(ZERO_HAVE_DNNL)
    if (dtype == ZERO_DTYPE_BF16) {
        pthread_once(&engine_once, engine_init);
        if (engine) {
            /* Build (and cache) a small NT primitive and report what oneDNN chose for it. */
            gemm_key_t k;
            memset(&k, 0, sizeof k);
            k.tb = 1;
            k.cdt = ZERO_DTYPE_FP32;
            k.M = k.N = k.K = k.lda = k.ldb = k.ldc = 64;
#if defined(_OPENMP)
            k.threads = omp_get_max_threads();
#else
            k.threads = 1;
#endif
            int owned;
            entry_t *e = lookup(&k, &owned);
            if (e) {
                static char name[96];
                static pthread_mutex_t name_lock = PTHREAD_MUTEX_INITIALIZER;
                pthread_mutex_lock(&name_lock);
                snprintf(name, sizeof name, "oneDNN matmul (%s)", e->impl);
                pthread_mutex_unlock(&name_lock);
                if (owned) entry_free(e);
                return name;
            }
        }
    }
#endif
    return "fp32 widening + zero__sgemm";
}

/* ------------------------------------------------------------------------------ public */

void zero__gemm_lp(int trans_a, int trans_b, size_t M, size_t N, size_t K, const void *A,
                   size_t lda, const void *B, size_t ldb, zero_dtype_t ab_dtype, int accumulate,
                   void *C, size_t ldc, zero_dtype_t c_dtype, int threads) {
    ZERO_ASSERT(is16(ab_dtype) && (c_dtype == ZERO_DTYPE_FP32 || c_dtype == ab_dtype));
    ZERO_ASSERT(threads >= 1);
    if (M == 0 || N == 0) return;
    ZERO_ASSERT(C != NULL && (K == 0 || (A != NULL && B != NULL)));
    if (K == 0) { /* C = 0 or unchanged, as BLAS with beta = accumulate */
        if (!accumulate)
            for (size_t i = 0; i < M; i++)
                memset((char *)C + i * ldc * zero_dtype_size(c_dtype), 0,
                       N * zero_dtype_size(c_dtype));
        return;
    }
    zero__matmul_set_threads(threads);
#if defined(ZERO_HAVE_DNNL)
    if (ab_dtype == ZERO_DTYPE_BF16 && gemm_dnnl(trans_a, trans_b, M, N, K, A, lda, B, ldb,
                                                 accumulate, C, ldc, c_dtype, NULL, threads))
        return;
#endif
    gemm_widen(trans_a, trans_b, M, N, K, A, lda, B, ldb, ab_dtype, accumulate, C, ldc, c_dtype,
               NULL, threads);
}

void zero__matmul_forward_lp(void *out, zero_dtype_t out_dtype, const void *inp, const void *weight,
                             const void *bias, zero_dtype_t dtype, size_t BT, size_t C, size_t OC,
                             int threads) {
    ZERO_ASSERT(out && inp && weight && threads >= 1);
    ZERO_ASSERT(is16(dtype) && (out_dtype == ZERO_DTYPE_FP32 || out_dtype == dtype));
    if (BT == 0 || OC == 0) return;
    if (C == 0) { /* out = bias (or 0), as the fp32 kernel */
        zero__gemm_lp(0, 1, BT, OC, 0, inp, C, weight, C, dtype, 0, out, OC, out_dtype, threads);
        if (!bias) return;
        float *fb = zero__kscratch(ZERO__KS_MM_BIAS, OC * sizeof(float));
        zero__widen(fb, bias, OC, dtype);
        for (size_t i = 0; i < BT; i++) {
            if (out_dtype == ZERO_DTYPE_FP32)
                memcpy((float *)out + i * OC, fb, OC * sizeof(float));
            else
                memcpy((uint16_t *)out + i * OC, bias, OC * sizeof(uint16_t));
        }
        return;
    }
    zero__matmul_set_threads(threads);
    /* out(BT, OC) = inp(BT, C) · weight(OC, C)ᵀ + bias: NT, bias fused. */
#if defined(ZERO_HAVE_DNNL)
    if (dtype == ZERO_DTYPE_BF16 &&
        gemm_dnnl(0, 1, BT, OC, C, inp, C, weight, C, 0, out, OC, out_dtype, bias, threads))
        return;
#endif
    gemm_widen(0, 1, BT, OC, C, inp, C, weight, C, dtype, 0, out, OC, out_dtype, bias, threads);
}

/* dbias(OC) += column sums of dout(BT, OC), in fp32, rows in order: each thread owns a slice of
 * columns, so the order per column does not depend on the thread count (as matmul.c). */
static void bias_backward(void *dbias, zero_dtype_t dbdt, const uint16_t *dout, zero_dtype_t dt,
                          size_t BT, size_t OC, int threads) {
#pragma omp parallel num_threads(threads)
    {
        size_t j0, j1;
        kslice(OC, 32, &j0, &j1); /* 32 16-bit values: one cache line */
        float acc[256], tmp[256];
        for (size_t jb = j0; jb < j1; jb += 256) {
            size_t w = ZERO_MIN((size_t)256, j1 - jb);
            for (size_t j = 0; j < w; j++) acc[j] = 0.0f;
            for (size_t i = 0; i < BT; i++) {
                zero__widen(tmp, dout + i * OC + jb, w, dt);
                for (size_t j = 0; j < w; j++) acc[j] += tmp[j];
            }
            if (dbdt == ZERO_DTYPE_FP32) {
                float *db = (float *)dbias + jb;
                for (size_t j = 0; j < w; j++) db[j] += acc[j];
            } else {
                uint16_t *db = (uint16_t *)dbias + jb;
                zero__widen(tmp, db, w, dbdt);
                for (size_t j = 0; j < w; j++) tmp[j] += acc[j];
                zero__narrow(db, tmp, w, dbdt);
            }
        }
    }
}

void zero__matmul_backward_lp(void *dinp, zero_dtype_t dinp_dtype, void *dweight, void *dbias,
                              zero_dtype_t dw_dtype, const void *dout, const void *inp,
                              const void *weight, zero_dtype_t dtype, size_t BT, size_t C,
                              size_t OC, int threads) {
    ZERO_ASSERT(dout && threads >= 1 && is16(dtype));
    if (dinp) {
        ZERO_ASSERT(weight && (dinp_dtype == ZERO_DTYPE_FP32 || dinp_dtype == dtype));
        /* dinp(BT, C) += dout(BT, OC) · weight(OC, C): NN. */
        zero__gemm_lp(0, 0, BT, C, OC, dout, OC, weight, C, dtype, 1, dinp, C, dinp_dtype, threads);
    }
    if (dweight || dbias) ZERO_ASSERT(dw_dtype == ZERO_DTYPE_FP32 || dw_dtype == dtype);
    if (dweight) {
        ZERO_ASSERT(inp);
        /* dweight(OC, C) += dout(BT, OC)ᵀ · inp(BT, C): TN. */
        zero__gemm_lp(1, 0, OC, C, BT, dout, OC, inp, C, dtype, 1, dweight, C, dw_dtype, threads);
    }
    if (dbias && OC > 0) bias_backward(dbias, dw_dtype, dout, dtype, BT, OC, threads);
}
