/* mpi_harness.h — the start and the end of a test binary that mpirun runs on every rank, with the
 * counters of check.h. Include it only in tests built with the MPI backend (it needs <mpi.h>).
 *
 *   zero_comm_t *comm = mpi_harness_init(&params);   // NULL: it printed why; return 1
 *   ... CHECK(...) ...
 *   return mpi_harness_finish(comm);
 *
 * mpi_harness_init starts MPI through zero_comm_mpi_init, records this process's rank and size in
 * MPI_COMM_WORLD (mpi_rank, mpi_size) and labels failure lines "mpi rank r/n".
 * mpi_harness_finish sums every rank's counts with MPI_Allreduce on MPI_COMM_WORLD (raw MPI, so it
 * also works after a test has failed its communicator on purpose), rank 0 prints the job's
 * "N passed, M failed", then it frees comm and finalizes MPI. Every rank returns the job's exit
 * code, so a failed check on any rank fails the test. Should MPI_Finalize not return within 20 s
 * (peers of a failed communicator), a watchdog ends the job with MPI_Abort and that code. */
#ifndef ZERO_TESTS_MPI_HARNESS_H
#define ZERO_TESTS_MPI_HARNESS_H

#include "check.h"
#include "zero/comm.h"

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

static int mpi_rank, mpi_size;

static zero_comm_t *mpi_harness_init(const zero_comm_params_t *params) {
    zero_comm_t *comm = NULL;
    zero_status_t st = zero_comm_mpi_init(&comm, params);
    if (st != ZERO_OK) {
        fprintf(stderr, "FAIL zero_comm_mpi_init: %s: %s\n0 passed, 1 failed\n",
                zero_status_str(st), zero_last_error());
        return NULL;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    static char label[48];
    snprintf(label, sizeof label, "mpi rank %d/%d", mpi_rank, mpi_size);
    check_label = label;
    return comm;
}

static void *mpi_harness_watchdog(void *arg) {
    int code = *(const int *)arg;
    sleep(20);
    fprintf(stderr, "[mpi rank %d] MPI_Finalize did not return within 20 s: MPI_Abort(%d)\n",
            mpi_rank, code);
    MPI_Abort(MPI_COMM_WORLD, code);
    return NULL;
}

static int mpi_harness_finish(zero_comm_t *comm) {
    long local[2] = {atomic_load(&passed), atomic_load(&failed)}, total[2] = {0, 0};
    MPI_Allreduce(local, total, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    static int code;
    code = total[1] ? 1 : 0;
    if (mpi_rank == 0) {
        printf("%ld passed, %ld failed (%d ranks)\n", total[0], total[1], mpi_size);
        fflush(stdout);
    }
    pthread_t wd;
    if (pthread_create(&wd, NULL, mpi_harness_watchdog, &code) == 0) pthread_detach(wd);
    zero_comm_free(comm);
    zero_comm_mpi_finalize();
    return code;
}

#endif /* ZERO_TESTS_MPI_HARNESS_H */
