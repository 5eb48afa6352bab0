/* dnnl_matmul.c — the cache of oneDNN matmul primitives behind dnnl_matmul.h.
 *
 * Invariants: the cache only grows (bounded by CACHE_MAX; beyond it a primitive is made and
 * destroyed per call) and its entries are never freed while the process runs, except by
 * zero__dnnl_matmul_cache_clear when no call is in flight; so a looked-up entry needs no
 * reference count. A miss builds the primitive under the lock: misses are rare (a handful of
 * shapes per model) and two rank threads never build the same one twice.
 */
#include "dnnl_matmul.h"

#if defined(ZERO_HAVE_DNNL)
#include "core/core_internal.h"
#include "lp_io.h" /* zero__kscratch: the per-thread scratchpad */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

enum { CACHE_MAX = 256 };

typedef struct {
    zero__mm_key_t key;
    dnnl_primitive_t prim; /* NULL: no acceptable implementation (remembered as such) */
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

static void desc2d(dnnl_memory_desc_t *md, size_t rows, size_t cols, size_t s0, size_t s1,
                   dnnl_data_type_t dt) {
    dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols};
    dnnl_dims_t strides = {(dnnl_dim_t)s0, (dnnl_dim_t)s1};
    ZERO_ASSERT(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success);
}

/* The entry for k; ->prim NULL when oneDNN cannot run it (or only by reference loops and
 * k->no_ref). Created with the calling thread's OpenMP count set to k->threads. */
static entry_t *entry_create(const zero__mm_key_t *k) {
    entry_t *e = calloc(1, sizeof *e);
    ZERO_ASSERT(e != NULL);
    e->key = *k;
    /* A(m, k): stored (M, K) row-major, or (K, M) when transposed: element (m, k) at k*lda+m. */
    desc2d(&e->a_md, k->M, k->K, k->ta ? 1 : k->lda, k->ta ? k->lda : 1, k->ab_dt);
    desc2d(&e->b_md, k->K, k->N, k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1, k->ab_dt);
    desc2d(&e->c_md, k->M, k->N, k->ldc, 1, k->c_dt);
    if (k->bias) desc2d(&e->bias_md, 1, k->N, k->N, 1, k->ab_dt);

    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    int ok =
        dnnl_matmul_desc_init(&md, &e->a_md, &e->b_md, k->bias ? &e->bias_md : NULL, &e->c_md) ==
            dnnl_success &&
        dnnl_primitive_attr_create(&attr) == dnnl_success &&
        dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->acc) /* C += ...: a sum post-op, so a 16-bit C is rounded once */
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success;
    if (ok) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
            impl)
            snprintf(e->impl, sizeof e->impl, "%s", impl);
        ok = !(k->no_ref && strncmp(e->impl, "ref", 3) == 0);
    }
    if (ok) {
        e->scratch_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        e->scratch_bytes = dnnl_memory_desc_get_size(&e->scratch_md);
        if (dnnl_primitive_create(&e->prim, pd) != dnnl_success) e->prim = NULL;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return e;
}

static void entry_free(entry_t *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    free(e);
}

/* The entry for k, created on a miss. *owned is set when it did not fit in the cache: the
 * caller frees it after use. NULL when there is no CPU engine. */
static entry_t *lookup(const zero__mm_key_t *key, int *owned) {
    pthread_once(&engine_once, engine_init);
    *owned = 0;
    if (!engine) return NULL;
    zero__mm_key_t k = *key;
#if defined(_OPENMP)
    if (omp_in_parallel()) k.threads = 1;
#else
    k.threads = 1;
#endif
    pthread_mutex_lock(&cache_lock);
    entry_t *e = NULL;
    for (int i = 0; i < cache_n && !e; i++)
        if (memcmp(&cache[i]->key, &k, sizeof k) == 0) e = cache[i];
    if (!e) {
        e = entry_create(&k);
        if (cache_n < CACHE_MAX)
            cache[cache_n++] = e;
        else
            *owned = 1;
    }
    pthread_mutex_unlock(&cache_lock);
    return e;
}

int zero__dnnl_matmul(const zero__mm_key_t *k, const void *A, const void *B, void *C,
                      const void *bias) {
    int owned;
    entry_t *e = lookup(k, &owned);
    if (!e || !e->prim) {
        if (e && owned) entry_free(e);
        return 0;
    }
    void *sp = e->scratch_bytes ? zero__kscratch(ZERO__KS_MM_DNNL, e->scratch_bytes) : NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, mbias = NULL, ms = NULL;
    dnnl_stream_t stream = NULL;
    /* oneDNN takes non-const handles but only reads SRC, WEIGHTS and BIAS. Memory objects and
     * the stream are per call (microseconds against the GEMMs sent here): nothing mutable is
     * shared between rank threads. */
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

int zero__dnnl_matmul_impl(const zero__mm_key_t *k, char *buf, size_t n) {
    int owned;
    entry_t *e = lookup(k, &owned);
    int ok = e && e->prim;
    if (ok) snprintf(buf, n, "%s", e->impl);
    if (e && owned) entry_free(e);
    return ok;
}

void zero__dnnl_matmul_cache_clear(void) {
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < cache_n; i++) entry_free(cache[i]);
    cache_n = 0;
    pthread_mutex_unlock(&cache_lock);
}
#endif /* ZERO_HAVE_DNNL */
