/* bench_matmul.c — fp32 GEMM throughput of the candidate libraries on the GPT linear shapes.
 *
 * Libraries: oneDNN dnnl_sgemm (through zero__sgemm, the kernel wrapper), the oneDNN matmul
 * primitive (created once per shape, executed in the timed loop), and OpenBLAS / BLIS loaded
 * with dlopen (both export cblas_sgemm, so they cannot be linked together; run one library per
 * process so one library's idle spinning threads do not slow the next).
 * Shapes: tokens M in {512, 1024}, C = 768 linears 768->2304, 768->768, 768->3072, 3072->768 as
 * forward NT (W stored [out, in]), backward-data NN, backward-weight TN, plus a 2048^3 square.
 * Mode --ranks R runs R threads concurrently, each a "rank" calling zero__sgemm with --threads
 * threads on its own buffers: shows whether per-thread thread counts oversubscribe.
 *
 * Usage: bench_matmul [--lib dnnl|dnnl_matmul|openblas|blis] [--threads t] [--ranks r]
 *                     [--time s] [--shape all|sq2048] [--guard 0|1]
 * The guard (default on) redoes a repetition when other processes used more than 0.15 cores
 * during it (from /proc/stat); the number of redone repetitions is printed at the end.
 * Output: one markdown table row per case: GFLOP/s = 2mnk / call time, median and best of 9
 * repetitions. Not a test.
 */
#include "kernels/kernels.h"
#include "zero/core.h"

#include <dlfcn.h>
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct shape {
    const char *name;
    char ta, tb; /* 'N' or 'T' */
    size_t m, n, k;
} shape_t;

/* cblas through dlopen */
enum { CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
static cblas_sgemm_fn p_cblas_sgemm;

static const char *lib = "dnnl";
static int threads = 1;
static double min_time = 0.25;

/* oneDNN matmul primitive for one shape, created outside the timed loop. */
typedef struct prim {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
} prim_t;

static void check(dnnl_status_t s, const char *what) {
    if (s != dnnl_success) {
        fprintf(stderr, "oneDNN %s failed: %d\n", what, (int)s);
        exit(1);
    }
}

static void prim_init(prim_t *pr, const shape_t *s, float *A, float *B, float *C) {
    dnnl_memory_desc_t ad, bd, cd;
    dnnl_dims_t adims = {(dnnl_dim_t)s->m, (dnnl_dim_t)s->k};
    dnnl_dims_t bdims = {(dnnl_dim_t)s->k, (dnnl_dim_t)s->n};
    dnnl_dims_t cdims = {(dnnl_dim_t)s->m, (dnnl_dim_t)s->n};
    check(dnnl_engine_create(&pr->eng, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&pr->stream, pr->eng, dnnl_stream_default_flags), "stream");
    check(dnnl_memory_desc_init_by_tag(&ad, 2, adims, dnnl_f32, s->ta == 'T' ? dnnl_ba : dnnl_ab),
          "a md");
    check(dnnl_memory_desc_init_by_tag(&bd, 2, bdims, dnnl_f32, s->tb == 'T' ? dnnl_ba : dnnl_ab),
          "b md");
    check(dnnl_memory_desc_init_by_tag(&cd, 2, cdims, dnnl_f32, dnnl_ab), "c md");
    dnnl_matmul_desc_t md;
    check(dnnl_matmul_desc_init(&md, &ad, &bd, NULL, &cd), "matmul desc");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &md, NULL, pr->eng, NULL), "pd");
    check(dnnl_primitive_create(&pr->p, pd), "primitive");
    dnnl_primitive_desc_destroy(pd);
    check(dnnl_memory_create(&pr->a, &ad, pr->eng, A), "mem a");
    check(dnnl_memory_create(&pr->b, &bd, pr->eng, B), "mem b");
    check(dnnl_memory_create(&pr->c, &cd, pr->eng, C), "mem c");
}

static void prim_run(prim_t *pr) {
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, pr->a}, {DNNL_ARG_WEIGHTS, pr->b}, {DNNL_ARG_DST, pr->c}};
    check(dnnl_primitive_execute(pr->p, pr->stream, 3, args), "execute");
    check(dnnl_stream_wait(pr->stream), "wait");
}

static void prim_free(prim_t *pr) {
    dnnl_memory_destroy(pr->a);
    dnnl_memory_destroy(pr->b);
    dnnl_memory_destroy(pr->c);
    dnnl_primitive_destroy(pr->p);
    dnnl_stream_destroy(pr->stream);
    dnnl_engine_destroy(pr->eng);
}

static void run_once(const shape_t *s, const float *A, const float *B, float *C, prim_t *pr,
                     int thr) {
    size_t lda = s->ta == 'T' ? s->m : s->k;
    size_t ldb = s->tb == 'T' ? s->k : s->n;
    if (pr) {
        prim_run(pr);
    } else if (p_cblas_sgemm) {
        p_cblas_sgemm(CblasRowMajor, s->ta == 'T' ? CblasTrans : CblasNoTrans,
                      s->tb == 'T' ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k,
                      1.0f, A, (int)lda, B, (int)ldb, 0.0f, C, (int)s->n);
    } else {
        zero__sgemm(s->ta == 'T', s->tb == 'T', s->m, s->n, s->k, 1.0f, A, lda, B, ldb, 0.0f, C,
                    s->n, thr);
    }
}

/* System-wide busy CPU seconds (all cores, including steal) from /proc/stat. */
static double system_busy_seconds(void) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[10] = {0};
    if (!f) return 0.0;
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) != 8) {
        fclose(f);
        return 0.0;
    }
    fclose(f);
    /* user nice system [idle iowait] irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int guard = 1;    /* redo repetitions that saw foreign load */
static int redone_total; /* repetitions redone because of foreign load */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define REPS 9

/* GFLOP/s of the median and of the best of REPS repetitions (each: back-to-back calls for
 * >= min_time / REPS). On a shared machine the best is the steadier figure. */
static double bench_shape(const shape_t *s, int thr, double *best_gflops) {
    float *A = zero_mem_alloc(NULL, ZERO_MEM_OTHER, s->m * s->k * sizeof(float), 64);
    float *B = zero_mem_alloc(NULL, ZERO_MEM_OTHER, s->k * s->n * sizeof(float), 64);
    float *C = zero_mem_alloc(NULL, ZERO_MEM_OTHER, s->m * s->n * sizeof(float), 64);
    if (!A || !B || !C) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < s->m * s->k; i++) A[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < s->k * s->n; i++) B[i] = (float)((i * 5) % 11) * 0.01f;
    memset(C, 0, s->m * s->n * sizeof(float));
    prim_t pr, *prp = NULL;
    if (strcmp(lib, "dnnl_matmul") == 0) {
        prim_init(&pr, s, A, B, C);
        prp = &pr;
    }
    run_once(s, A, B, C, prp, thr); /* warm-up: packing buffers, thread pool */
    double t_rep[REPS];
    for (int r = 0; r < REPS; r++) {
        /* Guard (as in MACHINE.md): other processes' CPU time during the repetition, i.e.
         * system busy time minus our own, must stay under 0.15 cores, else wait and redo it
         * (at most 3 times; then the noisy sample is kept). */
        for (int attempt = 0;; attempt++) {
            int calls = 0;
            double b0 = system_busy_seconds(), c0 = self_cpu_seconds();
            double t0 = zero_time_now(), t1;
            do {
                run_once(s, A, B, C, prp, thr);
                calls++;
                t1 = zero_time_now();
            } while (t1 - t0 < min_time / REPS);
            double foreign = (system_busy_seconds() - b0 - (self_cpu_seconds() - c0)) / (t1 - t0);
            t_rep[r] = (t1 - t0) / calls;
            if (!guard || foreign < 0.15 || attempt >= 3) break;
            redone_total++;
            usleep(200000);
        }
    }
    qsort(t_rep, REPS, sizeof(double), cmp_double);
    if (prp) prim_free(prp);
    zero_mem_free(A);
    zero_mem_free(B);
    zero_mem_free(C);
    double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    if (best_gflops) *best_gflops = flop / t_rep[0] * 1e-9;
    return flop / t_rep[REPS / 2] * 1e-9;
}

typedef struct rank_arg {
    const shape_t *s;
    double gflops;
    pthread_barrier_t *bar;
} rank_arg_t;

static int os_threads(void);
static int threads_seen = -1;

static void *rank_main(void *p) {
    rank_arg_t *ra = p;
    pthread_barrier_wait(ra->bar);
    ra->gflops = bench_shape(ra->s, threads, NULL);
    /* Count the process's threads while every rank (and its OpenMP workers, which libgomp
     * ends when their rank thread exits) is still alive. The barrier orders the write before
     * main's read after pthread_join. */
    if (pthread_barrier_wait(ra->bar) == PTHREAD_BARRIER_SERIAL_THREAD) threads_seen = os_threads();
    pthread_barrier_wait(ra->bar);
    return NULL;
}

/* Threads of this process now (main + rank threads + OpenMP workers, which persist). */
static int os_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1) break;
    fclose(f);
    return n;
}

static int load_cblas(void) {
    const char *so = NULL, *setter = NULL;
    if (strcmp(lib, "openblas") == 0) {
        so = "libopenblas.so.0";
        setter = "openblas_set_num_threads";
    } else if (strcmp(lib, "blis") == 0) {
        so = "libblis.so.4";
        setter = "bli_thread_set_num_threads";
    } else {
        return 0;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cannot load %s: %s\n", so, dlerror());
        return -1;
    }
    p_cblas_sgemm = (cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(h, setter);
    if (!p_cblas_sgemm || !set_threads) {
        fprintf(stderr, "%s lacks cblas_sgemm or %s\n", so, setter);
        return -1;
    }
    set_threads(threads);
    return 0;
}

int main(int argc, char **argv) {
    int ranks = 0;
    const char *which = "all";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--lib") == 0)
            lib = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--ranks") == 0)
            ranks = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--time") == 0)
            min_time = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--shape") == 0)
            which = argv[i + 1];
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (threads < 1 || load_cblas() != 0) return 2;
    omp_set_num_threads(threads); /* oneDNN (both entry points) takes the calling thread's ICV */

    shape_t shapes[32];
    int ns = 0;
    shapes[ns++] = (shape_t){"sq2048 NN", 'N', 'N', 2048, 2048, 2048};
    if (strcmp(which, "all") == 0) {
        static const size_t lin[4][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
        static const size_t toks[2] = {512, 1024};
        static char names[24][48];
        for (int ti = 0; ti < 2; ti++) {
            for (int li = 0; li < 4; li++) {
                size_t M = toks[ti], in = lin[li][0], out = lin[li][1];
                char *nm = names[ns - 1];
                snprintf(nm, 48, "M%zu %zu->%zu fwd NT", M, in, out);
                shapes[ns++] = (shape_t){nm, 'N', 'T', M, out, in};
                nm = names[ns - 1];
                snprintf(nm, 48, "M%zu %zu->%zu bwdX NN", M, in, out);
                shapes[ns++] = (shape_t){nm, 'N', 'N', M, in, out};
                nm = names[ns - 1];
                snprintf(nm, 48, "M%zu %zu->%zu bwdW TN", M, in, out);
                shapes[ns++] = (shape_t){nm, 'T', 'N', out, in, M};
            }
        }
    }

    if (ranks > 0) {
        /* Concurrent ranks on the first shape only. */
        pthread_t th[16];
        rank_arg_t ra[16];
        pthread_barrier_t bar;
        if (ranks > 16) ranks = 16;
        pthread_barrier_init(&bar, NULL, (unsigned)ranks);
        for (int r = 0; r < ranks; r++) {
            ra[r] = (rank_arg_t){&shapes[0], 0, &bar};
            pthread_create(&th[r], NULL, rank_main, &ra[r]);
        }
        double sum = 0;
        for (int r = 0; r < ranks; r++) {
            pthread_join(th[r], NULL);
            sum += ra[r].gflops;
            printf("| %s | rank %d of %d | %d thr | %.1f GFLOP/s |\n", shapes[0].name, r, ranks,
                   threads, ra[r].gflops);
        }
        printf("| %s | %d ranks x %d thr | sum | %.1f GFLOP/s | OS threads in process: %d |\n",
               shapes[0].name, ranks, threads, sum, threads_seen);
        pthread_barrier_destroy(&bar);
        fprintf(stderr, "repetitions redone for foreign load: %d\n", redone_total);
        return 0;
    }
    for (int i = 0; i < ns; i++) {
        double best, med = bench_shape(&shapes[i], threads, &best);
        printf("| %s (%zu,%zu,%zu) | %s | %d | %.1f | %.1f |\n", shapes[i].name, shapes[i].m,
               shapes[i].n, shapes[i].k, lib, threads, med, best);
        fflush(stdout);
    }
    fprintf(stderr, "repetitions redone for foreign load: %d\n", redone_total);
    return 0;
}
