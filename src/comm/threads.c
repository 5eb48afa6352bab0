/* threads.c — the threads backend: a clique of N ranks, one per thread, in one process.
 *
 * Collectives are single-copy over shared memory. Each rank publishes its arguments and buffer
 * pointers in its slot and arrives at a barrier; afterwards every rank checks that all ranks
 * agree, then reads the peers' buffers directly and writes only its own recv buffer. Every
 * collective ends with a barrier, so no rank returns (and lets its caller reuse its buffers or
 * count arrays) while a peer may still read them.
 *
 * Not here: local argument checks, request queues, posting order and traffic statistics (comm.c);
 * the reduction arithmetic (reduce.c, the one rank-order kernel shared with MPI).
 *
 * Invariants:
 *  - every rank of a clique runs the same sequence of barriers: each collective has a fixed
 *    number of phases, the same on every rank, and a disagreement is detected identically by
 *    every rank (all read the same published signatures), which then all skip to the final
 *    barrier;
 *  - a barrier either completes for every rank or the clique fails, never both: arrivals and the
 *    failure decision are both made under the clique mutex, and after a failure no rank can
 *    arrive any more. So "all ranks passed barrier e" is a fact every rank can rely on;
 *  - a rank's published slot is rewritten only at the start of its next collective, which it can
 *    begin only after every peer has arrived at the final barrier of the current one (and so
 *    has stopped reading it).
 */
#include "comm_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define CACHE_LINE 64
/* Polls of the peers' arrival counters before sleeping. A few microseconds: enough to catch a
 * peer that is just behind when every rank has a core, short enough not to steal the core from
 * the peer we wait for when ranks outnumber cores (then we barely spin at all). */
#define SPIN_POLLS 2000
#define SPIN_POLLS_OVERSUBSCRIBED 16

typedef struct slot {
    /* Synchronisation line, written by its owner, polled by the peers. */
    _Alignas(CACHE_LINE) atomic_uint_least64_t epoch; /* barriers this rank has arrived at */
    atomic_uint_least64_t seq; /* collectives this rank has started (timeout messages) */
    /* Published arguments: written by the owner before the collective's first barrier, read by
     * the peers after it, unchanged until the owner starts its next collective. */
    _Alignas(CACHE_LINE) zero__coll_args_t args;
    struct clique *split_clique; /* split: the new clique, published by its group's leader */
    int split_ok;                /* split: this rank created its new communicator */
    /* Hierarchical reduce-scatter: this rank's partial sums of the blocks it stands in for
     * (scratch_bytes wanted, scratch NULL if that failed), published with args. */
    char *scratch;
    size_t scratch_bytes;
} slot_t;

typedef struct clique {
    int n;
    int spin_polls;
    atomic_int refs;   /* communicators (or split members) still holding the clique */
    atomic_int failed; /* mirrors fail_status != 0, read without the lock by spinning waiters */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* broadcast when a barrier completes while someone sleeps, on failure */
    /* Guarded by lock. */
    int sleepers;
    zero_status_t fail_status; /* ZERO_ERR_TIMEOUT once a wait gave up */
    uint64_t fail_seq;         /* the collective (sequence number) that timed out */
    int fail_rank;             /* the rank that gave up */
    double fail_after_s;
    char fail_what[160];    /* "all_reduce of 16 fp32 elements" */
    char fail_missing[400]; /* "rank(s) 3 did not arrive" */
    slot_t *slots;          /* n slots, cache-line aligned */
} clique_t;

typedef struct threads_comm {
    zero_comm_t super;
    clique_t *clique; /* one reference held */
    /* Progress thread only. */
    uint64_t epoch;   /* barriers this rank has arrived at */
    uint64_t seq;     /* collectives this rank has started */
    const void *in[]; /* n input pointers for zero__reduce_blocks */
} threads_comm_t;

/* What one run() call needs along the way. */
typedef struct run_ctx {
    threads_comm_t *tc;
    clique_t *cl;
    const zero__coll_args_t *a;
    int me, n;
    uint64_t seq;
    double timeout_s;
    zero_mem_t *mem;
    int hier; /* zero__coll_hier of the call */
} run_ctx_t;

static zero_status_t threads_run(zero_comm_t *comm, const zero__coll_args_t *args);
static void threads_destroy(zero_comm_t *comm);

static const zero__comm_backend_t threads_backend = {
    .kind = ZERO_BACKEND_THREADS,
    .run = threads_run,
    .hierarchical = 1,
    .destroy = threads_destroy,
};

/* ------------------------------------------------------------------------------ clique */

static void clique_destroy(clique_t *cl) {
    pthread_cond_destroy(&cl->cond);
    pthread_mutex_destroy(&cl->lock);
    free(cl->slots);
    free(cl);
}

/* A clique of n ranks holding `refs` references. NULL with the error set on failure. */
static clique_t *clique_create(int n, int refs) {
    clique_t *cl = calloc(1, sizeof *cl);
    if (!cl) goto fail_alloc;
    size_t slots_bytes = (size_t)n * sizeof(slot_t); /* a multiple of CACHE_LINE */
    cl->slots = aligned_alloc(CACHE_LINE, slots_bytes);
    if (!cl->slots) goto fail_slots;
    memset(cl->slots, 0, slots_bytes);
    for (int r = 0; r < n; r++) {
        atomic_init(&cl->slots[r].epoch, 0);
        atomic_init(&cl->slots[r].seq, 0);
    }
    cl->n = n;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cl->spin_polls = (cpus > 0 && n <= cpus) ? SPIN_POLLS : SPIN_POLLS_OVERSUBSCRIBED;
    atomic_init(&cl->refs, refs);
    atomic_init(&cl->failed, 0);

    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) goto fail_attr;
    /* Deadlines are monotonic: a wall-clock jump must neither fire nor postpone a timeout. */
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0) rc = pthread_cond_init(&cl->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0) goto fail_attr;
    if (pthread_mutex_init(&cl->lock, NULL) != 0) goto fail_mutex;
    return cl;

fail_mutex:
    pthread_cond_destroy(&cl->cond);
fail_attr:
    free(cl->slots);
fail_slots:
    free(cl);
fail_alloc:
    zero__error(ZERO_ERR_OUT_OF_MEMORY, "threads: out of memory for the shared state of %d ranks",
                n);
    return NULL;
}

static void clique_release(clique_t *cl) {
    /* acq_rel: each member's release publishes its last use of the clique; the last member's
     * acquire makes all of them happen before the destruction. */
    if (atomic_fetch_sub_explicit(&cl->refs, 1, memory_order_acq_rel) == 1) clique_destroy(cl);
}

/* A communicator of rank `rank` on clique cl (taking over one of cl's references only on
 * success). NULL with the error set on failure. */
static threads_comm_t *comm_create(clique_t *cl, int rank, double timeout_s, zero_mem_t *mem) {
    threads_comm_t *tc = calloc(1, sizeof *tc + (size_t)cl->n * sizeof tc->in[0]);
    if (!tc) {
        zero__error(ZERO_ERR_OUT_OF_MEMORY,
                    "threads: out of memory for the communicator of rank %d", rank);
        return NULL;
    }
    tc->clique = cl;
    if (zero__comm_base_init(&tc->super, &threads_backend, rank, cl->n, timeout_s, mem) !=
        ZERO_OK) {
        free(tc);
        return NULL;
    }
    return tc;
}

/* Undo comm_create after the progress thread was started but the communicator never escaped. */
static void comm_discard(threads_comm_t *tc) {
    zero__comm_base_stop(&tc->super);
    free(tc->super.node_of);
    free(tc);
}

static void threads_destroy(zero_comm_t *comm) {
    threads_comm_t *tc = (threads_comm_t *)comm;
    clique_release(tc->clique);
    free(tc);
}

zero_status_t zero_comm_threads_init_all(int n, zero_comm_t **comms,
                                         const zero_comm_params_t *params) {
    if (!comms) return zero__error(ZERO_ERR_INVALID_ARG, "threads init_all: comms is NULL");
    if (n < 1)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "threads init_all: %d ranks requested (expected at least 1)", n);
    for (int r = 0; r < n; r++) comms[r] = NULL; /* also what a failed call leaves */
    zero_comm_params_t p = params ? *params : zero_comm_params_default();
    if (p.ranks_per_node < 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "threads init_all: ranks_per_node %d is invalid (expected >= 0; 0: one "
                           "node)",
                           p.ranks_per_node);
    int32_t *keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return zero__error(ZERO_ERR_OUT_OF_MEMORY, "threads init_all: out of memory");
    for (int r = 0; r < n; r++) keys[r] = p.ranks_per_node ? r / p.ranks_per_node : 0;
    clique_t *cl = clique_create(n, n);
    if (!cl) return ZERO_ERR_OUT_OF_MEMORY;
    int r;
    for (r = 0; r < n; r++) {
        threads_comm_t *tc = comm_create(cl, r, p.timeout_s, NULL);
        if (!tc) goto fail;
        comms[r] = &tc->super;
        comms[r]->flat = p.flat != 0;
        if (zero__comm_set_nodes(comms[r], keys)) {
            r++;
            goto fail;
        }
    }
    free(keys);
    return ZERO_OK;

fail:
    free(keys);
    zero_status_t st = ZERO_ERR_OUT_OF_MEMORY; /* the message is comm_create's */
    while (r-- > 0) {
        comm_discard((threads_comm_t *)comms[r]);
        comms[r] = NULL;
    }
    clique_destroy(cl);
    return st;
}

/* ------------------------------------------------------------------------------ messages */

static void describe(char *buf, size_t len, const zero__coll_args_t *a, int n) {
    const char *name = zero_coll_name(a->coll);
    switch (a->coll) {
    case ZERO_COLL_BARRIER:
    case ZERO_COLL_SPLIT: snprintf(buf, len, "%s", name); break;
    case ZERO_COLL_ALL_TO_ALLV: {
        size_t total = 0;
        for (int r = 0; r < n; r++) total += a->recv_counts[r];
        snprintf(buf, len, "%s of %zu %s elements", name, total, zero_dtype_name(a->dtype));
        break;
    }
    default:
        snprintf(buf, len, "%s of %zu %s elements", name, a->count, zero_dtype_name(a->dtype));
        break;
    }
}

/* Append ", r" (or "r" first) to a rank list, keeping the buffer terminated. */
static void append_rank(char *buf, size_t len, int *first, int r) {
    size_t used = strlen(buf);
    if (used + 16 >= len) {
        if (used + 4 < len && !strstr(buf, "...")) strcat(buf, " ...");
        return;
    }
    snprintf(buf + used, len - used, *first ? "%d" : ", %d", r);
    *first = 0;
}

/* The error of a rank that finds the clique failed (lock held). The rank that gave up reported
 * ZERO_ERR_TIMEOUT; the others in the same collective do too, naming the same culprits, whether
 * they were waiting (`late` = 0) or arrive afterwards; a rank that reaches a later collective
 * finds a failed communicator. */
static zero_status_t failure_error(const run_ctx_t *x, int late) {
    const clique_t *cl = x->cl;
    char what[160];
    describe(what, sizeof what, x->a, x->n);
    if (x->seq == cl->fail_seq && late)
        return zero__error(cl->fail_status,
                           "%s timed out on rank %d: it arrived after rank %d had given up waiting "
                           "(timeout %.1f s): %s",
                           what, x->me, cl->fail_rank, cl->fail_after_s, cl->fail_missing);
    if (x->seq == cl->fail_seq)
        return zero__error(cl->fail_status,
                           "%s timed out on rank %d (rank %d gave up after %.1f s): %s", what,
                           x->me, cl->fail_rank, cl->fail_after_s, cl->fail_missing);
    return zero__error(ZERO_ERR_COMM_FAILED,
                       "%s on rank %d: the communicator failed earlier (%s timed out after %.1f s "
                       "on rank %d: %s)",
                       what, x->me, cl->fail_what, cl->fail_after_s, cl->fail_rank,
                       cl->fail_missing);
}

static int all_arrived(clique_t *cl, uint64_t e) {
    for (int k = 0; k < cl->n; k++) {
        /* acquire pairs with the release store in sync_phase: whatever the peer wrote before
         * arriving (its slot, its recv blocks) is visible once we see its counter. */
        if (atomic_load_explicit(&cl->slots[k].epoch, memory_order_acquire) < e) return 0;
    }
    return 1;
}

/* Give up on barrier e (lock held, not all arrived, clique not failed yet): fail the clique so
 * every waiting or later rank gets an error instead of hanging. */
static zero_status_t declare_timeout(run_ctx_t *x, uint64_t e, const char *phase) {
    clique_t *cl = x->cl;
    char absent[160] = "", late[160] = "";
    int first_absent = 1, first_late = 1;
    for (int k = 0; k < x->n; k++) {
        if (atomic_load_explicit(&cl->slots[k].epoch, memory_order_relaxed) >= e) continue;
        uint64_t seq = atomic_load_explicit(&cl->slots[k].seq, memory_order_relaxed);
        if (seq < x->seq || strcmp(phase, "arrival") == 0)
            append_rank(absent, sizeof absent, &first_absent, k);
        else
            append_rank(late, sizeof late, &first_late, k);
    }
    if (*absent && *late)
        snprintf(cl->fail_missing, sizeof cl->fail_missing,
                 "rank(s) %s did not arrive; rank(s) %s did not reach the %s barrier", absent, late,
                 phase);
    else if (*absent)
        snprintf(cl->fail_missing, sizeof cl->fail_missing, "rank(s) %s did not arrive", absent);
    else
        snprintf(cl->fail_missing, sizeof cl->fail_missing,
                 "rank(s) %s did not reach the %s barrier", late, phase);
    describe(cl->fail_what, sizeof cl->fail_what, x->a, x->n);
    cl->fail_status = ZERO_ERR_TIMEOUT;
    cl->fail_seq = x->seq;
    cl->fail_rank = x->me;
    cl->fail_after_s = x->timeout_s;
    atomic_store_explicit(&cl->failed, 1, memory_order_relaxed); /* a hint; the lock orders it */
    pthread_cond_broadcast(&cl->cond);
    return zero__error(ZERO_ERR_TIMEOUT, "%s timed out after %.1f s on rank %d: %s", cl->fail_what,
                       x->timeout_s, x->me, cl->fail_missing);
}

/* One barrier over the clique: arrive, then wait until every rank has arrived, the clique has
 * failed, or the timeout passes. Everything this rank wrote before is visible to every peer
 * after it, and vice versa. */
static zero_status_t sync_phase(run_ctx_t *x, const char *phase) {
    clique_t *cl = x->cl;
    uint64_t e = ++x->tc->epoch;
    zero_status_t st = ZERO_OK;

    /* Arrive under the lock, so that arriving and failing the clique exclude each other (see the
     * invariants at the top). */
    pthread_mutex_lock(&cl->lock);
    if (cl->fail_status) {
        st = failure_error(x, 1);
        pthread_mutex_unlock(&cl->lock);
        return st;
    }
    /* release: publishes our slot and our writes of the previous phase to whoever acquires the
     * counter (spinning waiters; sleeping ones are ordered by the lock as well). */
    atomic_store_explicit(&cl->slots[x->me].epoch, e, memory_order_release);
    /* Only the last arrival wakes the sleepers (each arrival would otherwise wake every sleeper
     * just to find the barrier incomplete: n^2 wake-ups on two cores). Sleepers can only be
     * waiting for this barrier e: a later one needs our arrival, and an earlier one is complete
     * (its last arrival woke whoever slept on it, and anyone later checks completion under the
     * lock before sleeping). */
    if (cl->sleepers && all_arrived(cl, e)) pthread_cond_broadcast(&cl->cond);
    pthread_mutex_unlock(&cl->lock);

    double start = zero_time_now();
    for (int i = 0; i < cl->spin_polls; i++) {
        if (all_arrived(cl, e)) return ZERO_OK;
        if (atomic_load_explicit(&cl->failed, memory_order_relaxed)) break;
        cpu_relax();
    }

    /* Clamped so that a huge timeout ("forever") still converts to a valid time_t. */
    double deadline_s = start + ZERO_MIN(x->timeout_s, 1e9);
    struct timespec deadline;
    deadline.tv_sec = (time_t)deadline_s;
    deadline.tv_nsec = (long)((deadline_s - (double)deadline.tv_sec) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_nsec = 999999999L;

    /* Sleep. The arrival that completes the barrier happens under the lock and broadcasts while
     * sleepers > 0, and we count ourselves and check the counters under the same lock before
     * each wait, so no wake-up is lost. Completion is tested before failure: a barrier that
     * completed stays complete even if the clique fails later, in another phase. */
    pthread_mutex_lock(&cl->lock);
    cl->sleepers++;
    while (!all_arrived(cl, e)) {
        if (cl->fail_status) {
            st = failure_error(x, 0);
            break;
        }
        int rc = pthread_cond_timedwait(&cl->cond, &cl->lock, &deadline);
        if (rc == ETIMEDOUT && !all_arrived(cl, e) && !cl->fail_status) {
            st = declare_timeout(x, e, phase);
            break;
        }
    }
    cl->sleepers--;
    pthread_mutex_unlock(&cl->lock);
    return st;
}

/* ------------------------------------------------------------------------------ agreement */

/* Every rank runs the same checks over the same published signatures in the same order, so every
 * rank finds the same first difference and reports it. */
static zero_status_t check_agreement(const run_ctx_t *x) {
    const slot_t *s = x->cl->slots;
    const zero__coll_args_t *a0 = &s[0].args;
    for (int k = 1; k < x->n; k++)
        if (s[k].args.coll != a0->coll)
            return zero__error(ZERO_ERR_MISMATCH,
                               "collective mismatch: rank %d called %s but rank 0 called %s", k,
                               zero_coll_name(s[k].args.coll), zero_coll_name(a0->coll));
    const char *name = zero_coll_name(a0->coll);
    if (a0->coll == ZERO_COLL_BARRIER || a0->coll == ZERO_COLL_SPLIT) return ZERO_OK;
    for (int k = 1; k < x->n; k++) {
        const zero__coll_args_t *ak = &s[k].args;
        if (ak->dtype != a0->dtype)
            return zero__error(ZERO_ERR_MISMATCH,
                               "%s: rank %d passed dtype %s but rank 0 passed %s", name, k,
                               zero_dtype_name(ak->dtype), zero_dtype_name(a0->dtype));
        if (a0->coll != ZERO_COLL_ALL_TO_ALLV && ak->count != a0->count)
            return zero__error(ZERO_ERR_MISMATCH,
                               "%s: rank %d passed count %zu but rank 0 passed %zu", name, k,
                               ak->count, a0->count);
        if ((a0->coll == ZERO_COLL_ALL_REDUCE || a0->coll == ZERO_COLL_REDUCE_SCATTER) &&
            ak->op != a0->op)
            return zero__error(ZERO_ERR_MISMATCH, "%s: rank %d passed op %s but rank 0 passed %s",
                               name, k, zero_op_name(ak->op), zero_op_name(a0->op));
        if (a0->coll == ZERO_COLL_BROADCAST && ak->root != a0->root)
            return zero__error(ZERO_ERR_MISMATCH, "%s: rank %d passed root %d but rank 0 passed %d",
                               name, k, ak->root, a0->root);
    }
    if (a0->coll == ZERO_COLL_ALL_TO_ALLV) {
        for (int i = 0; i < x->n; i++)
            for (int j = 0; j < x->n; j++) {
                size_t sent = s[i].args.send_counts[j], expected = s[j].args.recv_counts[i];
                if (sent != expected)
                    return zero__error(ZERO_ERR_MISMATCH,
                                       "all_to_allv: rank %d sends %zu elements to rank %d "
                                       "(send_counts[%d]) but rank %d expects %zu from rank %d "
                                       "(recv_counts[%d])",
                                       i, sent, j, j, j, expected, i, i);
            }
    }
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ algorithms */

#define AT(ptr, elems, es) ((char *)(ptr) + (size_t)(elems) * (es))

/* ------------------------------------------------------------------------------ hierarchical */

/* Where rank q keeps the partial of block b in its scratch (b one of the blocks it stands in for,
 * zero__node_member(comm, node of q, local index of b) == q): after those before b. Every rank
 * computes every rank's layout the same way, from the topology and the agreed count. */
static size_t scratch_offset(const zero_comm_t *comm, int q, int b, const size_t *len, size_t acc) {
    const int j = comm->node_of[q];
    size_t off = 0;
    for (int k = 0; k < b; k++)
        if (zero__node_member(comm, j, comm->local_of[k]) == q) off += len[k] * acc;
    return off;
}

/* Hierarchical reduce-scatter over the blocks [off[b], +len[b]) of every rank's send (comm.c
 * states the algorithm and its traffic): in phase j the ranks of node j stand in for the blocks
 * (rank q for those of local index q's modulo node j's size), each continuing the partial the
 * previous node's stand-in left in its scratch with its node's ranks' contributions, in rank
 * order (the nodes are contiguous, so node by node is rank order). Node N-1 rounds; then each
 * owner takes its result into out. A barrier ends each phase: phase j reads only what phase j-1
 * wrote and the send buffers, which nobody writes until the owners' copy at the end (and an owner
 * writes only its own block, which only its own node's stand-in, itself, reads). */
static zero_status_t rs_hier(run_ctx_t *x, const size_t *off, const size_t *len, char *out) {
    const zero__coll_args_t *a = x->a;
    const zero_comm_t *comm = &x->tc->super;
    const slot_t *s = x->cl->slots;
    const size_t es = zero_dtype_size(a->dtype), acc = zero__reduce_acc_size(a->dtype);
    const int N = comm->node_count, mine = comm->node_of[x->me];
    for (int j = 0; j < N; j++) {
        if (j == mine) {
            const int L = comm->node_size[j];
            for (int b = 0; b < x->n; b++) {
                const int lb = comm->local_of[b];
                if (zero__node_member(comm, j, lb) != x->me || !len[b]) continue;
                for (int k = 0; k < L; k++)
                    x->tc->in[k] =
                        AT(s[comm->node_ranks[comm->node_first[j] + k]].args.send, off[b], es);
                char *partial = s[x->me].scratch + scratch_offset(comm, x->me, b, len, acc);
                const char *prev = NULL;
                if (j > 0) {
                    const int p = zero__node_member(comm, j - 1, lb);
                    prev = s[p].scratch + scratch_offset(comm, p, b, len, acc);
                }
                zero__reduce_partial(partial, prev, x->tc->in, L, len[b], a->dtype, a->op);
                if (j == N - 1)
                    zero__reduce_round(b == x->me ? out : partial, partial, len[b], a->dtype);
            }
        }
        zero_status_t st = sync_phase(x, "node reduce");
        if (st) return st;
    }
    const int last = zero__node_member(comm, N - 1, comm->local_of[x->me]);
    if (last != x->me && len[x->me])
        memcpy(out, s[last].scratch + scratch_offset(comm, last, x->me, len, acc), len[x->me] * es);
    return ZERO_OK;
}

/* Hierarchical all-gather of the blocks [off[k], +len[k]) into every rank's recv, block k
 * coming from src(k) (all_gather: k's send; all_reduce: k's recv at its block). First each rank
 * takes the blocks of the other nodes' ranks it receives for its node (those of its local index,
 * modulo its node's size), then, after a barrier, every other block from the rank of its node
 * that holds it. A rank writes in the second step only blocks it did not hold after the first,
 * which are the only ones its node's ranks read from it then. */
static zero_status_t ag_hier(run_ctx_t *x, int from_recv, const size_t *off, const size_t *len) {
    const zero__coll_args_t *a = x->a;
    const zero_comm_t *comm = &x->tc->super;
    const slot_t *s = x->cl->slots;
    const size_t es = zero_dtype_size(a->dtype);
    const int mine = comm->node_of[x->me];
#define SRC(k) (from_recv ? AT(s[k].args.recv, off[k], es) : (char *)s[k].args.send)
    for (int k = 0; k < x->n; k++) {
        if (!len[k] || (k != x->me && comm->node_of[k] == mine) ||
            zero__node_member(comm, mine, comm->local_of[k]) != x->me)
            continue;
        char *dst = AT(a->recv, off[k], es); /* k is me, or of another node */
        if (dst != SRC(k)) memcpy(dst, SRC(k), len[k] * es);
    }
#undef SRC
    zero_status_t st = sync_phase(x, "inter-node gather");
    if (st) return st;
    for (int k = 0; k < x->n; k++) {
        const int holder =
            comm->node_of[k] == mine ? k : zero__node_member(comm, mine, comm->local_of[k]);
        if (holder == x->me || !len[k]) continue;
        memcpy(AT(a->recv, off[k], es), AT(s[holder].args.recv, off[k], es), len[k] * es);
    }
    return ZERO_OK;
}

/* Bytes of scratch this rank needs for a hierarchical reduce-scatter of args. */
static size_t rs_hier_scratch(const zero_comm_t *comm, const zero__coll_args_t *a) {
    const int n = comm->size;
    size_t off[n], len[n];
    zero__coll_blocks(a, n, off, len);
    const int j = comm->node_of[comm->rank];
    size_t bytes = 0;
    for (int b = 0; b < n; b++)
        if (zero__node_member(comm, j, comm->local_of[b]) == comm->rank)
            bytes += len[b] * zero__reduce_acc_size(a->dtype);
    return bytes;
}

/* Block r of every rank's send, reduced in rank order into recv. In place (recv == send +
 * r*count) is safe: only rank r reads or writes block r of rank r's buffer. */
static zero_status_t run_reduce_scatter(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    if (x->hier & ZERO__HIER_RS) {
        size_t off[x->n], len[x->n];
        zero__coll_blocks(a, x->n, off, len);
        return rs_hier(x, off, len, a->recv);
    }
    if (!a->count) return ZERO_OK;
    size_t es = zero_dtype_size(a->dtype);
    for (int k = 0; k < x->n; k++)
        x->tc->in[k] = AT(x->cl->slots[k].args.send, x->me * a->count, es);
    zero__reduce_blocks(a->recv, x->tc->in, x->n, a->count, a->dtype, a->op);
    return ZERO_OK;
}

/* Every peer's send block into recv. In place (send == recv + r*count) our own block is there. */
static zero_status_t run_all_gather(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    if (x->hier & ZERO__HIER_AG) {
        size_t off[x->n], len[x->n];
        zero__coll_blocks(a, x->n, off, len);
        return ag_hier(x, 0, off, len);
    }
    size_t es = zero_dtype_size(a->dtype), bytes = a->count * es;
    if (!bytes) return ZERO_OK;
    for (int k = 0; k < x->n; k++) {
        const void *src = x->cl->slots[k].args.send;
        void *dst = AT(a->recv, (size_t)k * a->count, es);
        if (src != dst) memcpy(dst, src, bytes);
    }
    return ZERO_OK;
}

/* Reduce-scatter over the partition of zero__block_range into our own recv block, barrier, then
 * gather the other blocks from the peers' recv buffers. In place (send == recv): in phase one we
 * write only our block, which no peer reads then; in phase two we overwrite the other blocks,
 * which every peer finished reading before the barrier. */
static zero_status_t run_all_reduce(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    size_t es = zero_dtype_size(a->dtype), off[x->n], len[x->n];
    zero__coll_blocks(a, x->n, off, len);
    const size_t o = off[x->me], l = len[x->me];
    zero_status_t st = ZERO_OK;
    if (x->hier & ZERO__HIER_RS) {
        st = rs_hier(x, off, len, AT(a->recv, o, es));
    } else if (l) {
        for (int k = 0; k < x->n; k++) x->tc->in[k] = AT(x->cl->slots[k].args.send, o, es);
        zero__reduce_blocks(AT(a->recv, o, es), x->tc->in, x->n, l, a->dtype, a->op);
    }
    if (!st) st = sync_phase(x, "reduce-scatter");
    if (st) return st;
    if (x->hier & ZERO__HIER_AG) return ag_hier(x, 1, off, len);
    for (int k = 0; k < x->n; k++) {
        if (k == x->me || !len[k]) continue;
        memcpy(AT(a->recv, off[k], es), AT(x->cl->slots[k].args.recv, off[k], es), len[k] * es);
    }
    return ZERO_OK;
}

static zero_status_t run_all_to_all(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    size_t es = zero_dtype_size(a->dtype), bytes = a->count * es;
    if (!bytes) return ZERO_OK;
    for (int k = 0; k < x->n; k++)
        memcpy(AT(a->recv, (size_t)k * a->count, es),
               AT(x->cl->slots[k].args.send, (size_t)x->me * a->count, es), bytes);
    return ZERO_OK;
}

static zero_status_t run_all_to_allv(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    size_t es = zero_dtype_size(a->dtype);
    for (int k = 0; k < x->n; k++) {
        const zero__coll_args_t *ak = &x->cl->slots[k].args;
        size_t count = a->recv_counts[k]; /* == ak->send_counts[me], checked */
        if (count)
            memcpy(AT(a->recv, a->recv_displs[k], es), AT(ak->send, ak->send_displs[x->me], es),
                   count * es);
    }
    return ZERO_OK;
}

static zero_status_t run_broadcast(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    const void *src = x->cl->slots[a->root].args.send;
    size_t bytes = a->count * zero_dtype_size(a->dtype);
    if (bytes && src != a->recv) memcpy(a->recv, src, bytes);
    return ZERO_OK;
}

/* Whether parent rank j comes before parent rank k in their new group: by key, then rank. */
static int split_before(const slot_t *s, int j, int k) {
    return s[j].args.key < s[k].args.key || (s[j].args.key == s[k].args.key && j < k);
}

/* Split, in three more barriers after the arrival (on every rank, grouped or not):
 *   1. each group's leader (its new rank 0) creates the clique with one reference per member
 *      and publishes it;
 *   2. every member creates its communicator on it and publishes whether it could; after this
 *      barrier the whole group succeeds, or every member undoes its part;
 *   3. the final barrier of threads_run: nobody reuses its slot before all have read the flags.
 * Because barrier 1 completes for all ranks or for none, either every member gets past it and
 * accounts for exactly one reference (kept by its communicator, or dropped on failure), or
 * nobody but the leader ever saw the new clique and the leader frees it. */
static zero_status_t run_split(run_ctx_t *x) {
    const zero__coll_args_t *a = x->a;
    slot_t *s = x->cl->slots;
    int colour = a->colour, m = 0, new_rank = 0, leader = -1;
    if (colour >= 0) {
        for (int k = 0; k < x->n; k++) {
            if (s[k].args.colour != colour) continue;
            m++;
            if (split_before(s, k, x->me)) new_rank++;
            if (leader < 0 || split_before(s, k, leader)) leader = k;
        }
    }

    clique_t *created = NULL;
    if (colour >= 0 && leader == x->me) {
        created = clique_create(m, m);
        s[x->me].split_clique = created;
    }
    zero_status_t st = sync_phase(x, "split clique");
    if (st) {
        if (created) clique_destroy(created);
        return st;
    }

    clique_t *ncl = colour >= 0 ? s[leader].split_clique : NULL;
    threads_comm_t *child = NULL;
    if (ncl) {
        child = comm_create(ncl, new_rank, x->timeout_s, x->mem);
        s[x->me].split_ok = child != NULL;
    }
    st = sync_phase(x, "split create");
    zero_status_t result = st;
    if (!st && colour >= 0) {
        if (!ncl) {
            result = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                 "split: rank %d could not allocate the shared state of colour %d "
                                 "(%d ranks)",
                                 leader, colour, m);
        } else {
            for (int k = 0; k < x->n && !result; k++)
                if (s[k].args.colour == colour && !s[k].split_ok)
                    result = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                         "split: rank %d could not create its communicator of "
                                         "colour %d",
                                         k, colour);
        }
    }
    if (result) {
        if (child) comm_discard(child);
        if (ncl) clique_release(ncl);
        return result;
    }
    if (child) *a->split_out = &child->super;
    return ZERO_OK;
}

/* ------------------------------------------------------------------------------ run */

static zero_status_t threads_run(zero_comm_t *comm, const zero__coll_args_t *args) {
    threads_comm_t *tc = (threads_comm_t *)comm;
    run_ctx_t x = {
        .tc = tc, .cl = tc->clique, .a = args, .me = comm->rank, .n = comm->size, .seq = ++tc->seq};
    pthread_mutex_lock(&comm->lock);
    x.timeout_s = comm->timeout_s;
    x.mem = comm->mem;
    pthread_mutex_unlock(&comm->lock);

    slot_t *mine = &x.cl->slots[x.me];
    mine->args = *args;
    mine->split_clique = NULL;
    mine->split_ok = 0;
    x.hier = zero__coll_hier(comm, args->coll, args->dtype);
    /* The partials' scratch, before arriving: whether every rank has its own is then known to
     * all after the arrival barrier, so they fail together or not at all. */
    mine->scratch_bytes = x.hier & ZERO__HIER_RS ? rs_hier_scratch(comm, args) : 0;
    mine->scratch = mine->scratch_bytes
                        ? zero_mem_alloc(x.mem, ZERO_MEM_COMM, mine->scratch_bytes, CACHE_LINE)
                        : NULL;
    char *scratch = mine->scratch;
    atomic_store_explicit(&mine->seq, x.seq, memory_order_relaxed); /* messages only */

    zero_status_t st = sync_phase(&x, "arrival");
    if (st) {
        zero_mem_free(scratch); /* nobody reads it before the arrival barrier completes */
        return st;
    }
    zero_status_t result = check_agreement(&x);
    for (int k = 0; !result && (x.hier & ZERO__HIER_RS) && k < x.n; k++)
        if (x.cl->slots[k].scratch_bytes && !x.cl->slots[k].scratch)
            result = zero__error(ZERO_ERR_OUT_OF_MEMORY,
                                 "%s: rank %d could not allocate %zu bytes of scratch for the "
                                 "partial sums of its node",
                                 zero_coll_name(args->coll), k, x.cl->slots[k].scratch_bytes);
    if (!result) {
        switch (args->coll) {
        case ZERO_COLL_ALL_REDUCE: result = run_all_reduce(&x); break;
        case ZERO_COLL_REDUCE_SCATTER: result = run_reduce_scatter(&x); break;
        case ZERO_COLL_ALL_GATHER: result = run_all_gather(&x); break;
        case ZERO_COLL_ALL_TO_ALL: result = run_all_to_all(&x); break;
        case ZERO_COLL_ALL_TO_ALLV: result = run_all_to_allv(&x); break;
        case ZERO_COLL_BROADCAST: result = run_broadcast(&x); break;
        case ZERO_COLL_BARRIER: break;
        case ZERO_COLL_SPLIT: result = run_split(&x); break;
        default:
            zero_mem_free(scratch);
            return zero__error(ZERO_ERR_INTERNAL, "threads: unknown collective %d",
                               (int)args->coll);
        }
    }
    /* A failed clique stops here (its message is the one to keep). Agreed failures (mismatch,
     * out of memory in split) still pass the final barrier: peers may read our slot until then.
     * After a failure past the arrival a peer may still be reading our scratch: it is left
     * allocated then (a failed clique is not used again). */
    if (result == ZERO_ERR_TIMEOUT || result == ZERO_ERR_COMM_FAILED) return result;
    st = sync_phase(&x, "final");
    if (!st) zero_mem_free(scratch);
    return st ? st : result;
}
