/* test_comm_mpi.c — the MPI backend, run under mpirun by CTest.
 *
 * Modes:
 *   (default)  the collective matrix of coll_cases.c on zero_comm_mpi_init's communicator,
 *              checked against the naive reference on every rank; then every rank's result
 *              hashes are gathered to rank 0, which runs the same cases on a threads clique of
 *              the same size inside its process and requires bitwise-equal results per case and
 *              rank (the two backends must agree bit for bit).
 *   --quick    the big count only for two cases (sanitizer builds).
 *   --ranks-per-node K  simulated nodes of K ranks (zero_comm_params_t.ranks_per_node): the
 *              hierarchical collectives on one machine, checked the same way (the reference,
 *              the walk of their transfers for the statistics, the threads backend's hashes).
 *   --flat     zero_comm_params_t.flat.
 *   --timeout  the last rank never calls all_reduce; the others must get ZERO_ERR_TIMEOUT naming
 *              the operation, the count and that rank, then ZERO_ERR_COMM_FAILED; the job then
 *              ends through MPI_Finalize (or, if that hangs, MPI_Abort from the watchdog of
 *              mpi_harness.h with the test's exit code).
 *   --crash    rank 2 calls abort() while a large all_reduce is in flight; used by
 *              mpi_crash.sh, which checks that mpirun ends, fails, and names the dead rank.
 * Raw MPI calls here (gathers, agreements) run on MPI_COMM_WORLD while no collective of ours is
 * in flight; the backend requires MPI_THREAD_MULTIPLE anyway.
 */
#include "comm/coll_cases.h"
#include "thread_ranks.h"
#include "mpi_harness.h"
#include "zero/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wait for the other ranks without spinning a core (ranks outnumber cores here). */
static void sleepy_barrier(void) {
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    int done = 0;
    while (!done) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
}

/* ------------------------------------------------------------------------------ matrix */

typedef struct threads_run {
    coll_opts_t opts[64];
    coll_tally_t tally[64];
} threads_run_t;

static void threads_rank(zero_comm_t *comm, int rank, void *arg) {
    threads_run_t *tr = arg;
    coll_run_matrix(comm, &tr->opts[rank], &tr->tally[rank]);
}

static int run_matrix(zero_comm_t *comm, int quick, int flat) {
    int n = mpi_size, r = mpi_rank;
    char label[32];
    snprintf(label, sizeof label, "mpi n=%d", n);
    coll_opts_t o = {.quick = quick, .big = 1, .label = label, .flat = flat};
    size_t ncases = coll_case_count(n, &o);
    uint64_t *hashes = calloc(ncases, sizeof *hashes);
    o.hashes = hashes;
    coll_tally_t t = {0};
    double t0 = zero_time_now();
    coll_run_matrix(comm, &o, &t);
    double t_mpi = zero_time_now() - t0;
    check_add(t.passed, t.failed);

    /* Every rank's hashes to rank 0. */
    uint64_t *all = r == 0 ? calloc(ncases * (size_t)n, sizeof *all) : NULL;
    MPI_Gather(hashes, (int)ncases, MPI_UINT64_T, all, (int)ncases, MPI_UINT64_T, 0,
               MPI_COMM_WORLD);
    if (r == 0) {
        printf("mpi n=%d: %zu cases per rank, rank 0: %ld checks passed, %ld failed (%.2f s)\n", n,
               ncases, t.passed, t.failed, t_mpi);
        fflush(stdout);
        /* The same cases on a threads clique of n ranks in this process. */
        threads_run_t *tr = calloc(1, sizeof *tr);
        atomic_int arrivals = 0;
        uint64_t *th = calloc(ncases * (size_t)n, sizeof *th);
        for (int k = 0; k < n; k++) {
            tr->opts[k] = o;
            tr->opts[k].flat = 0; /* one node */
            tr->opts[k].label = "threads (mpi comparison)";
            tr->opts[k].barrier_arrivals = &arrivals;
            tr->opts[k].hashes = th + (size_t)k * ncases;
        }
        t0 = zero_time_now();
        CHECK(thread_ranks_clique(n, 60.0, threads_rank, tr) == ZERO_OK, "threads clique of %d", n);
        long tp = 0, tf = 0;
        for (int k = 0; k < n; k++) tp += tr->tally[k].passed, tf += tr->tally[k].failed;
        check_add(tp, tf);
        size_t differ = 0, shown = 0;
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < ncases; i++) {
                uint64_t hm = all[(size_t)k * ncases + i], ht = th[(size_t)k * ncases + i];
                if (hm != 0 && hm == ht) continue;
                differ++;
                if (shown++ < 10)
                    fprintf(stderr,
                            "FAIL [mpi n=%d] case %zu rank %d: mpi result hash %016llx, threads "
                            "%016llx (0 = the case failed to run)\n",
                            n, i, k, (unsigned long long)hm, (unsigned long long)ht);
            }
        CHECK(differ == 0, "%zu of %zu (case, rank) results differ between mpi and threads", differ,
              ncases * (size_t)n);
        printf("threads n=%d comparison: %ld checks passed, %ld failed, %zu results differ from "
               "mpi (%.2f s)\n",
               n, tp, tf, differ, zero_time_now() - t0);
        fflush(stdout);
        free(th);
        free(tr);
        free(all);
    }
    sleepy_barrier();
    free(hashes);
    return 0;
}

/* ------------------------------------------------------------------------------ timeout */

#define TIMEOUT_S 1.5
#define TIMEOUT_COUNT 1009

static void run_timeout(zero_comm_t *comm) {
    int n = mpi_size, r = mpi_rank, missing = n - 1;
    zero_comm_set_timeout(comm, TIMEOUT_S);
    if (r != missing) {
        float *send = calloc(TIMEOUT_COUNT, sizeof(float)), *recv = calloc(TIMEOUT_COUNT, 4);
        double t0 = zero_time_now();
        zero_status_t st =
            zero_comm_all_reduce(send, recv, TIMEOUT_COUNT, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
        double dt = zero_time_now() - t0;
        const char *msg = zero_last_error();
        CHECK(st == ZERO_ERR_TIMEOUT, "all_reduce returned %s, expected timeout: %s",
              zero_status_str(st), msg);
        CHECK(dt >= TIMEOUT_S * 0.9 && dt < TIMEOUT_S + 4.0, "the timeout came after %.2f s", dt);
        if (st == ZERO_ERR_TIMEOUT) {
            CHECK(strstr(msg, "all_reduce") != NULL, "message '%s' does not name all_reduce", msg);
            CHECK(coll_has_number(msg, TIMEOUT_COUNT), "message '%s' does not give the count", msg);
            CHECK(strstr(msg, "rank") && coll_has_number(msg, missing),
                  "message '%s' does not name the missing rank %d", msg, missing);
            if (r == 0) printf("timeout message: %s\n", msg);
        }
        st = zero_comm_all_reduce(send, recv, 4, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
        CHECK(st == ZERO_ERR_COMM_FAILED, "all_reduce after the timeout returned %s",
              zero_status_str(st));
        free(send);
        free(recv);
    }
}

/* ------------------------------------------------------------------------------ crash */

static void run_crash(zero_comm_t *comm) {
    /* 128 MiB per rank: the all_reduce takes far longer than the 20 ms before the abort. */
    const size_t count = (size_t)32 << 20;
    float *send = calloc(count, sizeof(float)), *recv = calloc(count, sizeof(float));
    zero_comm_set_timeout(comm, 20);
    if (mpi_rank == 2) {
        zero_comm_request_t *req = NULL;
        zero_comm_all_reduce_post(send, recv, count, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm, &req);
        nanosleep(&(struct timespec){0, 20000000}, NULL); /* the collective is under way */
        fprintf(stderr, "[mpi rank 2] calling abort() in the middle of all_reduce\n");
        abort();
    }
    zero_status_t st = zero_comm_all_reduce(send, recv, count, ZERO_DTYPE_FP32, ZERO_OP_SUM, comm);
    /* mpirun normally ends the job first. If not, report and stay alive: ending the job is
     * mpirun's duty, and exiting here would hide whether it noticed rank 2. */
    fprintf(stderr, "[mpi rank %d] all_reduce with a dead peer returned %s: %s\n", mpi_rank,
            zero_status_str(st), zero_last_error());
    sleep(120);
    free(send);
    free(recv);
}

/* ------------------------------------------------------------------------------ main */

/* The communicator's nodes against an independent reference: the processor names of the ranks,
 * numbered in the order of their lowest rank. On one node no byte crosses between nodes. */
static void check_nodes(zero_comm_t *comm, int ranks_per_node) {
    if (ranks_per_node) {
        for (int r = 0; r < mpi_size; r++)
            CHECK(zero_comm_node_of(comm, r) == r / ranks_per_node,
                  "simulated nodes of %d: rank %d on node %d", ranks_per_node, r,
                  zero_comm_node_of(comm, r));
        return;
    }
    char *names = calloc((size_t)mpi_size, MPI_MAX_PROCESSOR_NAME);
    char mine[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    if (!names) abort();
    MPI_Get_processor_name(mine, &len);
    MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                  MPI_COMM_WORLD);
    int nodes = 0, *node = calloc((size_t)mpi_size, sizeof *node);
    if (!node) abort();
    for (int r = 0; r < mpi_size; r++) {
        int j = 0;
        while (j < r && strcmp(names + (size_t)j * MPI_MAX_PROCESSOR_NAME,
                               names + (size_t)r * MPI_MAX_PROCESSOR_NAME))
            j++;
        node[r] = j < r ? node[j] : nodes++;
        CHECK(zero_comm_node_of(comm, r) == node[r], "rank %d ('%s') on node %d, expected %d", r,
              names + (size_t)r * MPI_MAX_PROCESSOR_NAME, zero_comm_node_of(comm, r), node[r]);
    }
    CHECK(zero_comm_node_count(comm) == nodes, "%d nodes, the processor names say %d",
          zero_comm_node_count(comm), nodes);
    zero_comm_stats_t st;
    zero_comm_get_stats(comm, &st);
    for (int c = 0; nodes == 1 && c < ZERO_COLL_COUNT; c++)
        CHECK(st.inter_node_sent_bytes[c] == 0 && st.inter_node_recv_bytes[c] == 0,
              "one node, yet %s counted %llu bytes across nodes", zero_coll_name((zero_coll_t)c),
              (unsigned long long)st.inter_node_sent_bytes[c]);
    free(node);
    free(names);
}

int main(int argc, char **argv) {
    int quick = 0, mode = 0, ranks_per_node = 0, flat = 0; /* mode 0 matrix, 1 timeout, 2 crash */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--ranks-per-node") == 0 && i + 1 < argc)
            ranks_per_node = atoi(argv[++i]);
        else if (strcmp(argv[i], "--flat") == 0)
            flat = 1;
        else if (strcmp(argv[i], "--timeout") == 0)
            mode = 1;
        else if (strcmp(argv[i], "--crash") == 0)
            mode = 2;
        else {
            fprintf(stderr,
                    "usage: %s [--quick] [--ranks-per-node K] [--flat] [--timeout | --crash]\n",
                    argv[0]);
            return 2;
        }
    }
    zero_comm_params_t params = zero_comm_params_default();
    params.timeout_s = 60;
    params.ranks_per_node = ranks_per_node;
    params.flat = flat;
    zero_mem_t *mem = NULL;
    zero_mem_init(&mem, NULL);
    params.mem = mem; /* scratch buffers are accounted under ZERO_MEM_COMM */
    zero_comm_t *comm = mpi_harness_init(&params);
    if (!comm) return 1;
    /* mpi_rank and mpi_size: MPI_Comm_rank and MPI_Comm_size of MPI_COMM_WORLD */
    CHECK(zero_comm_rank(comm) == mpi_rank && zero_comm_size(comm) == mpi_size,
          "communicator rank %d/%d, MPI says %d/%d", zero_comm_rank(comm), zero_comm_size(comm),
          mpi_rank, mpi_size);
    CHECK(zero_comm_backend(comm) == ZERO_BACKEND_MPI, "backend is %s",
          zero_backend_name(zero_comm_backend(comm)));
    CHECK(zero_comm_mpi_available() && zero_comm_mpi_launched(), "mpi available and launched");

    if (mode == 2) {
        if (mpi_size < 3) {
            fprintf(stderr, "--crash needs 3 ranks\n");
            return 2;
        }
        run_crash(comm);
        return 1; /* reaching here means nobody stopped the job: mpi_crash.sh checks */
    }
    if (mode == 1) {
        if (mpi_size < 2) {
            fprintf(stderr, "--timeout needs at least 2 ranks\n");
            return 2;
        }
        run_timeout(comm);
    } else {
        run_matrix(comm, quick, flat);
        check_nodes(comm, ranks_per_node);
    }

    if (mode == 0) {
        /* A healthy communicator returns all its scratch when freed (a failed one may leak it
         * on purpose, so not after --timeout). */
        zero_comm_free(comm);
        comm = NULL;
        zero_mem_stats_t ms;
        zero_mem_get_stats(mem, &ms);
        size_t other = ms.peak_total_bytes - ms.peak_bytes[ZERO_MEM_COMM];
        CHECK(ms.live_total_bytes == 0 && ms.peak_bytes[ZERO_MEM_COMM] >= ms.peak_total_bytes,
              "memory: %zu bytes live after free, %zu peak bytes outside comm_buffers",
              ms.live_total_bytes, other);
        if (mpi_rank == 0)
            printf("mpi comm scratch peak on rank 0: %zu bytes\n", ms.peak_bytes[ZERO_MEM_COMM]);
    }
    /* Agree on the result; every rank exits with it. */
    int code = mpi_harness_finish(comm);
    if (mode == 0)
        zero_mem_free_domain(mem); /* after --timeout, leaked scratch still points here */
    return code;
}
