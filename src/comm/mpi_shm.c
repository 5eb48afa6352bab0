/* mpi_shm.c — the MPI backend's on-node shared memory: one POSIX shared-memory object shared by
 * the ranks of a communicator that all run on this node.
 *
 * It carries the agreement round's signatures, the input of calls small enough to ride with the
 * signature (eager: one synchronisation per call), and the single-copy reduce phase of
 * reduce_scatter and all_reduce, which reduces in rank order with the same kernel as the
 * point-to-point path, so the sums are bitwise the same.
 *
 * Not here: the point-to-point paths (mpi_p2p.c), the signature checks (mpi_agree.c). The
 * memory ordering of the counters is argued below; they must be lock-free atomics, since they
 * live in memory shared between processes.
 */
#include "mpi_internal.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* When every rank of the communicator is on this node, the ranks share one POSIX shared-memory
 * object (created by rank 0, opened by the others, unlinked as soon as all have mapped it, and
 * unmapped locally on destroy, so nothing collective happens at free time — a peer that never
 * arrives cannot hang us there). Rank r's region holds:
 *   - three counters, each on its own cache line, written only by rank r and read by all:
 *     arrived  = the call number + 1 of the last signature rank r published,
 *     staged   = the last staging round whose data rank r has copied into its slot,
 *     consumed = the last staging round rank r has finished reading from everyone's slots;
 *   - two signature slots and two eager-data slots (call number parity);
 *   - a ring of SHM_SLOTS staging slots (round number modulo SHM_SLOTS).
 * Ordering: a writer fills a slot, then stores its counter with release; a reader loads the
 * counter with acquire before it reads the slot, so it sees the slot's contents. A slot is
 * refilled only after every reader's counter says it is done with the previous use: round x
 * reuses the staging slot of round x - SHM_SLOTS once every rank has consumed that round; call
 * k + 2 reuses the signature and eager slots of call k, which every rank has read before it
 * could publish call k + 1, the condition for our reaching call k + 2. The counters live in memory
 * shared between processes, so they must be lock-free atomics. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared-memory counters need lock-free 64-bit atomics");

typedef struct shm_header {
    _Alignas(64) _Atomic uint64_t arrived;
    _Alignas(64) _Atomic uint64_t staged;
    _Alignas(64) _Atomic uint64_t consumed;
} shm_header_t;

enum { SHM_ARRIVED, SHM_STAGED, SHM_CONSUMED };
#define SHM_SIG_OFFSET ((size_t)4096)
/* A collective whose per-rank input fits in an eager slot carries it with the signature: one
 * synchronisation for the whole call instead of an agreement round plus a data exchange. */
#define SHM_EAGER_BYTES ((size_t)16 << 10) /* 64 KiB was slower than the CMA path (2 ranks) */
/* Staging ring: SHM_SLOTS slots of SHM_SLOT_BYTES per rank (8 MiB). A round moves a slot's worth
 * of each rank's send buffer; a slot is usually read by its peers soon after it is written, so
 * mostly from the 32 MiB L3 for small n. Eight slots let a rank run ahead of a descheduled peer:
 * with two slots (lockstep) 2 ranks under heavy foreign load fell to 0.4x of Open MPI at 256 MiB.
 */
enum { SHM_SLOTS = 8 };
#define SHM_SLOT_BYTES ((size_t)1 << 20)

static shm_header_t *shm_header(const mpi_comm_t *c, int r) {
    return (shm_header_t *)(c->shm + (size_t)r * c->shm_rank_bytes);
}

static char *shm_sig_slot(const mpi_comm_t *c, int r, uint64_t seq) {
    return c->shm + (size_t)r * c->shm_rank_bytes + SHM_SIG_OFFSET + (seq & 1) * c->shm_sig_bytes;
}

static char *shm_stage_slot(const mpi_comm_t *c, int r, uint64_t round) {
    size_t stage_offset = c->shm_rank_bytes - SHM_SLOTS * c->shm_slot_bytes;
    return c->shm + (size_t)r * c->shm_rank_bytes + stage_offset +
           (size_t)(round % SHM_SLOTS) * c->shm_slot_bytes;
}

static char *shm_eager_slot(const mpi_comm_t *c, int r, uint64_t seq) {
    return c->shm + (size_t)r * c->shm_rank_bytes + c->shm_eager_offset +
           (seq & 1) * SHM_EAGER_BYTES;
}

static _Atomic uint64_t *shm_counter(const mpi_comm_t *c, int r, int which) {
    shm_header_t *h = shm_header(c, r);
    return which == SHM_ARRIVED ? &h->arrived : which == SHM_STAGED ? &h->staged : &h->consumed;
}

static void shm_publish(const mpi_comm_t *c, int which, uint64_t value) {
    atomic_store_explicit(shm_counter(c, c->super.rank, which), value, memory_order_release);
}

/* Wait until every rank's counter `which` reaches target; on timeout name the ranks short of it. */
static zero_status_t shm_wait(mpi_comm_t *c, const zero__coll_args_t *a, double deadline, int which,
                              uint64_t target) {
    int n = c->super.size;
    unsigned idle = 0;
    int r = 0;
    for (;;) {
        while (r < n &&
               atomic_load_explicit(shm_counter(c, r, which), memory_order_acquire) >= target)
            r++;
        if (r == n) return ZERO_OK;
        if (zero_time_now() > deadline) break;
        zero__mpi_backoff(&idle);
    }
    unsigned char flag[n];
    for (int q = 0; q < n; q++)
        flag[q] = atomic_load_explicit(shm_counter(c, q, which), memory_order_acquire) < target;
    char what[160];
    zero__mpi_describe_args(what, sizeof what, a);
    if (which == SHM_ARRIVED)
        return zero__error(ZERO_ERR_TIMEOUT,
                           "%s timed out after %.1f s on rank %d: rank(s) %s did not arrive", what,
                           c->timeout_s, c->super.rank, zero__mpi_format_ranks(c, flag));
    return zero__error(ZERO_ERR_TIMEOUT,
                       "%s timed out after %.1f s on rank %d: the data exchange with rank(s) %s "
                       "did not complete",
                       what, c->timeout_s, c->super.rank, zero__mpi_format_ranks(c, flag));
}

/* The agreement round through shared memory: publish this rank's signature (already in
 * sig_at(c, me)), wait for every rank's, and copy them into sig_recv. */
zero_status_t zero__mpi_shm_exchange_signatures(mpi_comm_t *c, const zero__coll_args_t *a,
                                                double deadline, uint64_t seq) {
    int n = c->super.size, me = c->super.rank;
    memcpy(shm_sig_slot(c, me, seq), sig_at(c, me), c->sig_bytes);
    shm_publish(c, SHM_ARRIVED, seq + 1);
    zero_status_t st = shm_wait(c, a, deadline, SHM_ARRIVED, seq + 1);
    if (st) return st;
    for (int r = 0; r < n; r++)
        if (r != me) memcpy(sig_at(c, r), shm_sig_slot(c, r, seq), c->sig_bytes);
    return ZERO_OK;
}

/* Copy this rank's part of round x (elements [base, base + w) of every other rank's block) into
 * its slot for round x and publish it. The caller has checked that the slot is free. */
static void shm_stage(mpi_comm_t *c, const zero__coll_args_t *a, const char *send, uint64_t x,
                      size_t base, size_t w) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    char *slot = shm_stage_slot(c, me, x);
    for (int j = 0; j < n; j++)
        if (j != me && base < c->block_len[j])
            memcpy(slot + (size_t)j * w * es, send + (c->block_off[j] + base) * es,
                   ZERO_MIN(w, c->block_len[j] - base) * es);
    shm_publish(c, SHM_STAGED, x);
}

/* Whether every rank's counter `which` has reached target. */
static int shm_all_reached(const mpi_comm_t *c, int which, uint64_t target) {
    for (int r = 0; r < c->super.size; r++)
        if (atomic_load_explicit(shm_counter(c, r, which), memory_order_acquire) < target) return 0;
    return 1;
}

/* The reduce phase through shared memory (single copy of each input byte into a staging slot
 * that the owner of its block reads, often from cache). Round t covers elements [t*w, (t+1)*w)
 * of every block, w = slot / n: each rank copies its part of the other ranks' blocks into its
 * slot for the round and publishes it; once every rank has published round t, each reduces its
 * own block's part from every rank's slot (its own contribution straight from send) in rank
 * order 0..n-1 — the same order and kernel as the point-to-point path, so the result is bitwise
 * the same. Slots form a ring of SHM_SLOTS per rank: round x reuses the slot of x - SHM_SLOTS once
 * every rank has consumed that round. A rank stages ahead while it waits, so ranks are not held
 * in lockstep: with more ranks than cores (or foreign load) a descheduled peer costs the others
 * nothing until they have run SHM_SLOTS rounds ahead of it. */
zero_status_t zero__mpi_shm_reduce_phase(mpi_comm_t *c, const zero__coll_args_t *a,
                                         const char *send, char *out, double deadline) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype);
    const size_t *off = c->block_off, *len = c->block_len;
    size_t w = c->shm_slot_bytes / ((size_t)n * es), longest = 0;
    for (int j = 0; j < n; j++) longest = ZERO_MAX(longest, len[j]);
    size_t rounds = (longest + w - 1) / w;
    uint64_t first = c->round + 1, last = c->round + rounds, next = first; /* next to stage */
    c->round = last;
    const void *in[n];
    for (uint64_t x = first; x <= last; x++) {
        unsigned idle = 0;
        for (;;) {
            int progressed = 0;
            while (next <= last &&
                   (next <= SHM_SLOTS || shm_all_reached(c, SHM_CONSUMED, next - SHM_SLOTS))) {
                shm_stage(c, a, send, next, (size_t)(next - first) * w, w);
                next++;
                progressed = 1;
            }
            if (next > x && shm_all_reached(c, SHM_STAGED, x)) break;
            if (progressed) {
                idle = 0;
                continue;
            }
            if (zero_time_now() > deadline) {
                /* Late: whoever has not staged round x, or (if our own slot is not free) not
                 * consumed the round it last held. */
                int which = next > x ? SHM_STAGED : SHM_CONSUMED;
                zero_status_t st = shm_wait(c, a, deadline, which, next > x ? x : next - SHM_SLOTS);
                if (st) return st;
                continue; /* it arrived just now */
            }
            zero__mpi_backoff(&idle);
        }
        size_t base = (size_t)(x - first) * w;
        if (base < len[me]) {
            for (int j = 0; j < n; j++)
                in[j] = j == me ? (const void *)(send + (off[me] + base) * es)
                                : (const void *)(shm_stage_slot(c, j, x) + (size_t)me * w * es);
            zero__reduce_blocks(out + base * es, in, n, ZERO_MIN(w, len[me] - base), a->dtype,
                                a->op);
        }
        shm_publish(c, SHM_CONSUMED, x);
    }
    return ZERO_OK;
}

/* Bytes this rank publishes with its signature for an eager call, or 0 when the call takes the
 * ordinary path. Depends only on the signature's fields, so ranks that agree decide alike. */
size_t zero__mpi_eager_bytes(const mpi_comm_t *c, const zero__coll_args_t *a) {
    size_t es = zero_dtype_size(a->dtype), n = (size_t)c->super.size, bytes;
    /* Eager data rides on the shared-memory agreement, which is not used with more ranks than
     * cores (see zero__mpi_agree). */
    if (!c->shm || c->oversubscribed) return 0;
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE:
    case ZERO_COLL_ALL_GATHER:
    case ZERO_COLL_BROADCAST: bytes = a->count * es; break;
    case ZERO_COLL_REDUCE_SCATTER:
    case ZERO_COLL_ALL_TO_ALL:
        bytes = a->count > SHM_EAGER_BYTES ? SIZE_MAX : n * a->count * es;
        break;
    default: return 0;
    }
    return bytes > 0 && bytes <= SHM_EAGER_BYTES && a->count <= SHM_EAGER_BYTES ? bytes : 0;
}

/* Copy this rank's input of call `seq` into its eager slot (before the signature is published).
 * The slot of call seq was last read in call seq - 2, which every peer finished before it could
 * publish call seq - 1 — the agreement this rank has already passed. */
void zero__mpi_eager_publish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq,
                             size_t bytes) {
    if (a->coll == ZERO_COLL_BROADCAST && c->super.rank != a->root) return;
    memcpy(shm_eager_slot(c, c->super.rank, seq), a->send, bytes);
}

/* Finish an eager call after the agreement: every rank's input is in its eager slot. */
zero_status_t zero__mpi_eager_finish(mpi_comm_t *c, const zero__coll_args_t *a, uint64_t seq) {
    int n = c->super.size, me = c->super.rank;
    size_t es = zero_dtype_size(a->dtype), block = a->count * es;
    const char *src[n];
    for (int r = 0; r < n; r++)
        src[r] = r == me ? (const char *)a->send : shm_eager_slot(c, r, seq);
    char *recv = a->recv;
    switch (a->coll) {
    case ZERO_COLL_ALL_REDUCE:
        zero__reduce_blocks(recv, (const void *const *)src, n, a->count, a->dtype, a->op);
        break;
    case ZERO_COLL_REDUCE_SCATTER: {
        const void *in[n];
        for (int r = 0; r < n; r++) in[r] = src[r] + (size_t)me * block;
        zero__reduce_blocks(recv, in, n, a->count, a->dtype, a->op);
        break;
    }
    case ZERO_COLL_ALL_GATHER:
        for (int r = 0; r < n; r++)
            if (recv + (size_t)r * block != src[r]) memcpy(recv + (size_t)r * block, src[r], block);
        break;
    case ZERO_COLL_ALL_TO_ALL:
        for (int r = 0; r < n; r++) {
            const char *from = src[r] + (size_t)me * block;
            if (recv + (size_t)r * block != from) memcpy(recv + (size_t)r * block, from, block);
        }
        break;
    case ZERO_COLL_BROADCAST:
        if (recv != src[a->root]) memcpy(recv, src[a->root], block);
        break;
    default: ZERO_ASSERT(!"eager_bytes admits only the collectives above");
    }
    return ZERO_OK;
}

int zero__mpi_node_keys(MPI_Comm mc, int size, int32_t *keys) {
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0, key;
    MPI_Comm_rank(mc, &rank);
    key = rank;
    if (MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
        MPI_Allreduce(&rank, &key, 1, MPI_INT, MPI_MIN, node);
        MPI_Comm_free(&node);
    }
    int32_t mine = key;
    if (MPI_Allgather(&mine, 1, MPI_INT32_T, keys, 1, MPI_INT32_T, mc) != MPI_SUCCESS) {
        for (int r = 0; r < size; r++) keys[r] = r; /* unknown: nobody counts as on-node */
        keys[rank] = mine;
    }
    int local = 0;
    for (int r = 0; r < size; r++) local += keys[r] == mine;
    return local;
}

/* Map the shared object when all n > 1 ranks of mc are on this node (collective over mc, called
 * before anything that could fail locally). On any failure every rank gets base == NULL and stays
 * on the point-to-point paths. */
shm_mapping_t zero__mpi_shm_map(MPI_Comm mc, int n, int me, int local, size_t sig_bytes) {
    static _Atomic unsigned serial;
    shm_mapping_t m = {0};
    /* ZERO_MPI_SHM=0 keeps a node-local communicator on the point-to-point paths (the ones used
     * across nodes), so they can be tested and compared on one machine. Ranks might see
     * different environments: take the switch only if all agree. */
    const char *env = getenv("ZERO_MPI_SHM");
    int want = local == n && !(env && strcmp(env, "0") == 0), all_want = 0;
    if (n < 2 || MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, mc) != MPI_SUCCESS ||
        !all_want)
        return m;
    size_t sig = (sig_bytes + 63) / 64 * 64;
    size_t eager_offset = (SHM_SIG_OFFSET + 2 * sig + 4095) / 4096 * 4096;
    size_t stage_offset = eager_offset + 2 * SHM_EAGER_BYTES;
    size_t slot_bytes = SHM_SLOT_BYTES;
    size_t rank_bytes = stage_offset + SHM_SLOTS * slot_bytes, total = rank_bytes * (size_t)n;
    char name[64] = "";
    int fd = -1;
    if (me == 0) {
        snprintf(name, sizeof name, "/zero-comm-%ld-%u", (long)getpid(),
                 atomic_fetch_add(&serial, 1u));
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0 && ftruncate(fd, (off_t)total) != 0) {
            close(fd);
            shm_unlink(name);
            fd = -1;
        }
        if (fd < 0) name[0] = '\0';
    }
    MPI_Bcast(name, (int)sizeof name, MPI_CHAR, 0, mc);
    if (me != 0 && name[0]) fd = shm_open(name, O_RDWR, 0);
    void *map = MAP_FAILED;
    if (fd >= 0) {
        map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
    }
    int ok = map != MAP_FAILED, all_ok = 0;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mc) != MPI_SUCCESS) all_ok = 0;
    if (me == 0 && name[0]) shm_unlink(name); /* every rank has it open or mapped by now */
    if (!all_ok) {
        if (ok) munmap(map, total);
        return m;
    }
    /* A new object is zero-filled: all counters start at 0. */
    m.base = map;
    m.rank_bytes = rank_bytes;
    m.sig_bytes = sig;
    m.eager_offset = eager_offset;
    m.total_bytes = total;
    m.slot_bytes = slot_bytes;
    return m;
}
