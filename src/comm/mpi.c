/* mpi.c — the MPI backend: one process per rank, collectives over an MPI communicator.
 *
 * Every collective starts with an agreement round: each rank publishes a small signature (call
 * number, collective, count, dtype, op, root) to every peer and checks all of them, so a mismatch
 * fails every rank the same way and a rank that never arrives is named when the deadline passes.
 * Since every rank waits for a signature that every other rank publishes when it enters, the
 * agreement round is also a complete barrier.
 *
 * Two transports. When all ranks of the communicator are on this node (the common case here),
 * they share one POSIX shared-memory object set up with MPI at creation (see "shared memory"):
 * signatures go through it and calls whose per-rank input is at most 16 KiB carry that input with
 * the signature (one synchronisation per call, "eager") — both only while the node's ranks fit
 * its cores, where they measured faster; reduce_scatter and all_reduce's
 * reduce-scatter phase are a single-copy pipeline — each rank copies its send buffer once into
 * a staging slot, a slot at a time, and every rank reduces its own block straight from all slots
 * in rank order 0..N-1. Otherwise (ranks on several nodes, or ZERO_MPI_SHM=0) everything goes
 * over point-to-point: signatures on a reserved tag; reduce_scatter as a direct algorithm (rank r
 * receives block r from everyone into persistent scratch, segment by segment, and reduces it in
 * rank order). Either way the sums are bitwise equal to the threads backend: one kernel
 * (zero__reduce_blocks), one order; an MPI reduction or a ring would sum in another order.
 * all_reduce is the reduce-scatter over zero__block_range followed by a direct point-to-point
 * all-gather of the blocks. all_gather is direct point-to-point too (each rank pulls every block
 * straight from its owner, which is as fast as MPI_Allgather here and lets the deadline name the
 * missing rank); all_to_all(v) and broadcast use MPI's non-blocking collectives (with a
 * point-to-point or chunked path for counts beyond INT_MAX); split uses MPI_Comm_split.
 * fp16/bf16 travel as raw 2-byte data: we reduce, not MPI.
 *
 * Every wait polls (MPI_Testsome, or the shared counters) against one deadline per collective
 * (start + timeout_s) with a spin / yield / nanosleep backoff, because ranks may outnumber cores.
 * After a timeout pending point-to-point requests are cancelled or freed and the
 * communicator is failed; its MPI handle and scratch are then leaked on purpose (freeing them
 * could block, or let a late message land in freed memory).
 *
 * This file holds the vtable, creation and destruction, MPI init/finalize/abort and the
 * dispatch of one collective; mpi_agree.c the waits and the agreement round, mpi_shm.c the
 * shared-memory object, mpi_p2p.c the point-to-point data paths (see mpi_internal.h).
 *
 * Not here: argument checks, queueing and statistics (comm.c); MPI must provide
 * MPI_THREAD_MULTIPLE, since each communicator's progress thread calls MPI concurrently.
 */
#include "mpi_internal.h"

#include <sys/mman.h>
#include <unistd.h>

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int we_initialised; /* guarded by init_lock */

static double deadline_after(double seconds) { return zero_time_now() + seconds; }

static zero_status_t create(MPI_Comm mc, int oversubscribed, double timeout_s, zero_mem_t *mem,
                            int ranks_per_node, int flat, zero_comm_t **out);

static zero_status_t run_split(mpi_comm_t *c, const zero__coll_args_t *a) {
    MPI_Comm sub = MPI_COMM_NULL;
    *a->split_out = NULL;
    /* Every rank passed the agreement, so this blocking call has every rank in it. */
    int rc = MPI_Comm_split(c->mc, a->colour < 0 ? MPI_UNDEFINED : a->colour, a->key, &sub);
    if (rc != MPI_SUCCESS) return zero__mpi_error(c, rc, "split");
    if (sub == MPI_COMM_NULL) return ZERO_OK;
    pthread_mutex_lock(&c->super.lock);
    double timeout_s = c->super.timeout_s;
    zero_mem_t *mem = c->super.mem;
    pthread_mutex_unlock(&c->super.lock);
    /* the parent's simulated nodes, if any, are passed on by zero_comm_split (comm.c) */
    return create(sub, c->oversubscribed, timeout_s, mem, 0, c->super.flat, a->split_out);
}

static zero_status_t mpi_run(zero_comm_t *comm, const zero__coll_args_t *a) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    pthread_mutex_lock(&comm->lock);
    c->timeout_s = comm->timeout_s;
    zero_mem_t *mem = c->mem = comm->mem;
    double deadline = deadline_after(c->timeout_s);
    pthread_mutex_unlock(&comm->lock);

    zero_status_t local = ZERO_OK;
    if (a->coll == ZERO_COLL_ALL_REDUCE || a->coll == ZERO_COLL_REDUCE_SCATTER)
        local = zero__mpi_ensure_scratch(c, mem);
    char message[1024];
    if (local) snprintf(message, sizeof message, "%s", zero_last_error());
    uint64_t seq = c->seq;
    /* Eager calls finish flat through the shared object: not for a hierarchical one (nodes
     * simulated with ranks_per_node can still share one). */
    size_t eager = zero__coll_hier(comm, a->coll, a->dtype) ? 0 : zero__mpi_eager_bytes(c, a);
    if (eager) zero__mpi_eager_publish(c, a, seq, eager);
    zero_status_t st = zero__mpi_agree(c, a, deadline, local);
    if (st) {
        /* The rank that could not allocate keeps its own, more precise message. */
        if (local && st == local) zero__set_error_message(message);
        return st;
    }
    if (eager) return zero__mpi_eager_finish(c, a, seq);
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE: return zero__mpi_all_reduce(c, a, deadline);
    case ZERO_COLL_REDUCE_SCATTER: return zero__mpi_reduce_scatter(c, a, deadline);
    case ZERO_COLL_ALL_GATHER: return zero__mpi_all_gather(c, a, deadline);
    case ZERO_COLL_ALL_TO_ALL: return zero__mpi_all_to_all(c, a, deadline);
    case ZERO_COLL_ALL_TO_ALLV: return zero__mpi_all_to_allv(c, a, deadline);
    case ZERO_COLL_BROADCAST: return zero__mpi_broadcast(c, a, deadline);
    case ZERO_COLL_BARRIER: return ZERO_OK; /* the agreement round is a complete barrier */
    case ZERO_COLL_SPLIT: return run_split(c, a);
    default:
        return zero__error(ZERO_ERR_INTERNAL, "MPI backend: unknown collective %d", (int)a->coll);
    }
}

/* ------------------------------------------------------------------------------ lifetime */

static void release(mpi_comm_t *c) {
    /* Unmapping is local: the peers keep their own mappings of the object. */
    if (c->shm) munmap(c->shm, c->shm_rank_bytes * (size_t)c->super.size);
    zero__mem_untrack(c->shm_mem, ZERO_MEM_COMM, c->shm ? c->shm_rank_bytes : 0);
    c->shm = NULL;
    /* After abandoned requests MPI may still write into these: keep them (see file comment). */
    if (!c->leaked) {
        zero_mem_free(c->scratch);
        free(c->sig_send);
        free(c->sig_recv);
        free(c->reqs);
        free(c->req_peer);
        free(c->req_is_recv);
        free(c->done_idx);
        free(c->block_off);
        free(c->block_len);
        free(c->counts_i);
        free(c);
    }
}

static void mpi_destroy(zero_comm_t *comm) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    /* MPI_Comm_free is local in Open MPI, but a failed communicator may have requests MPI
     * still holds; skip it then, so freeing never blocks. */
    if (!c->leaked && !comm->failure && c->mc != MPI_COMM_NULL) MPI_Comm_free(&c->mc);
    release(c);
}

/* This rank's region of the shared object counts as its comm buffers, in whichever domain the
 * communicator has: moved when the domain changes, so a domain can be detached and freed. */
static void mpi_mem_changed(zero_comm_t *comm, zero_mem_t *old_mem, zero_mem_t *new_mem) {
    mpi_comm_t *c = (mpi_comm_t *)comm;
    (void)old_mem;
    if (!c->shm) return;
    zero__mem_untrack(c->shm_mem, ZERO_MEM_COMM, c->shm_rank_bytes);
    zero__mem_track(new_mem, ZERO_MEM_COMM, c->shm_rank_bytes);
    c->shm_mem = new_mem;
}

static const zero__comm_backend_t mpi_backend = {.kind = ZERO_BACKEND_MPI,
                                                 .run = mpi_run,
                                                 .hierarchical = 1,
                                                 .destroy = mpi_destroy,
                                                 .mem_changed = mpi_mem_changed};

/* Take ownership of mc and wrap it in a communicator with its progress thread. oversubscribed < 0
 * asks to find out (collective over mc). */
static zero_status_t create(MPI_Comm mc, int oversubscribed, double timeout_s, zero_mem_t *mem,
                            int ranks_per_node, int flat, zero_comm_t **out) {
    int rank = 0, size = 1;
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_rank(mc, &rank);
    MPI_Comm_size(mc, &size);
    int32_t *keys = malloc((size_t)size * sizeof *keys);
    if (!keys) {
        MPI_Comm_free(&mc);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "MPI backend: out of memory (rank %d)", rank);
    }
    int local = zero__mpi_node_keys(mc, size, keys);
    if (oversubscribed < 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        oversubscribed = cores > 0 && local > cores;
    }
    size_t sig_bytes = sizeof(signature_t) + 2 * (size_t)size * sizeof(uint64_t);
    shm_mapping_t shm = zero__mpi_shm_map(mc, size, rank, local, sig_bytes);
    mpi_comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (shm.base) munmap(shm.base, shm.total_bytes);
        goto fail_oom;
    }
    c->mc = mc;
    c->shm = shm.base;
    c->shm_rank_bytes = shm.rank_bytes;
    c->shm_sig_bytes = shm.sig_bytes;
    c->shm_eager_offset = shm.eager_offset;
    c->shm_slot_bytes = shm.slot_bytes;
    c->super.size = size; /* release() needs it before the base is initialised */
    c->oversubscribed = oversubscribed;
    c->sig_bytes = sig_bytes;
    c->sig_send = calloc(1, c->sig_bytes);
    c->sig_recv = calloc((size_t)size, c->sig_bytes);
    c->block_off = calloc((size_t)size, sizeof(size_t));
    c->block_len = calloc((size_t)size, sizeof(size_t));
    c->counts_i = calloc(4 * (size_t)size, sizeof(int));
    if (!c->sig_send || !c->sig_recv || !c->block_off || !c->block_len || !c->counts_i)
        goto fail_buffers;
    /* Keep SLOTS * (n-1) segments near SCRATCH_TARGET_BYTES: 1 MiB segments up to 9 ranks. */
    size_t seg = size > 1 ? SCRATCH_TARGET_BYTES / ((size_t)SLOTS * (size_t)(size - 1)) : 0;
    seg = ZERO_MAX(SEGMENT_MIN_BYTES, ZERO_MIN(SEGMENT_MAX_BYTES, seg));
    c->segment_bytes = seg / 4096 * 4096;
    if (zero__mpi_reqs_reserve(c, (SLOTS + SEND_WINDOW) * (size > 1 ? size - 1 : 1) + 2 * size))
        goto fail_buffers;
    zero_status_t st = zero__comm_base_init(&c->super, &mpi_backend, rank, size, timeout_s, mem);
    /* Simulated nodes (tests on one machine): rank r on node r / ranks_per_node. */
    for (int r = 0; ranks_per_node > 0 && r < size; r++) keys[r] = r / ranks_per_node;
    c->super.flat = flat != 0;
    if (!st && (st = zero__comm_set_nodes(&c->super, keys))) zero__comm_base_stop(&c->super);
    free(keys);
    keys = NULL;
    if (st) {
        release(c);
        MPI_Comm_free(&mc);
        return st;
    }
    mpi_mem_changed(&c->super, NULL, mem);
    *out = &c->super;
    return ZERO_OK;

fail_buffers:
    release(c);
fail_oom:
    free(keys);
    MPI_Comm_free(&mc);
    return zero__error(ZERO_ERR_OUT_OF_MEMORY,
                       "MPI backend: out of memory creating a communicator of %d ranks (rank %d)",
                       size, rank);
}

/* ------------------------------------------------------------------------------ public */

int zero_comm_mpi_available(void) { return 1; }

static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
    }
}

zero_status_t zero_comm_mpi_init(zero_comm_t **out, const zero_comm_params_t *params) {
    if (!out) return zero__error(ZERO_ERR_INVALID_ARG, "zero_comm_mpi_init: out is NULL");
    *out = NULL;
    zero_comm_params_t p = params ? *params : zero_comm_params_default();
    if (p.ranks_per_node < 0)
        return zero__error(ZERO_ERR_INVALID_ARG,
                           "zero_comm_mpi_init: ranks_per_node %d is invalid (expected >= 0; 0: "
                           "the MPI library's nodes)",
                           p.ranks_per_node);
    int initialised = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
    pthread_mutex_lock(&init_lock);
    MPI_Finalized(&finalized);
    MPI_Initialized(&initialised);
    if (finalized) {
        pthread_mutex_unlock(&init_lock);
        return zero__error(ZERO_ERR_UNSUPPORTED,
                           "zero_comm_mpi_init: MPI was already finalized in this process and "
                           "cannot be initialised again");
    }
    if (!initialised) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&init_lock);
            return zero__error(ZERO_ERR_COMM_FAILED,
                               "zero_comm_mpi_init: MPI_Init_thread failed (error %d)", rc);
        }
        we_initialised = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    pthread_mutex_unlock(&init_lock);
    if (provided < MPI_THREAD_MULTIPLE)
        return zero__error(ZERO_ERR_UNSUPPORTED,
                           "zero_comm_mpi_init: MPI provides %s but the MPI backend needs "
                           "MPI_THREAD_MULTIPLE (each communicator's progress thread calls MPI); "
                           "%s",
                           thread_level_name(provided),
                           initialised ? "initialise MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)"
                                       : "use an MPI library built with thread support");
    MPI_Comm mc;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &mc);
    if (rc != MPI_SUCCESS)
        return zero__error(ZERO_ERR_COMM_FAILED,
                           "zero_comm_mpi_init: MPI_Comm_dup(MPI_COMM_WORLD) failed (error %d)",
                           rc);
    return create(mc, -1, p.timeout_s, p.mem, p.ranks_per_node, p.flat, out);
}

void zero_comm_mpi_finalize(void) {
    pthread_mutex_lock(&init_lock);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (we_initialised && !finalized) MPI_Finalize();
    we_initialised = 0;
    pthread_mutex_unlock(&init_lock);
}

void zero_comm_mpi_abort(int code) {
    int initialised = 0, finalized = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalized);
    if (!initialised || finalized) return;
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
}
