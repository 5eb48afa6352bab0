/* test_stages_mpi.c — run under mpirun -np N: the tiny GPT of harness.c on every stage and
 * accumulation {1, 3} over the MPI backend; rank 0 also runs the same configuration on N
 * threads-backend ranks in-process. The weights fingerprints must be identical (both backends
 * sum in rank order with one reduction kernel), and identical across stages.
 */
#include "check.h"
#include "harness.h"

#include <string.h>

int main(void) {
    zero_comm_t *comm = NULL;
    zero_status_t st = zero_comm_mpi_init(&comm, NULL);
    if (st) {
        fprintf(stderr, "MPI init: %s\n", zero_last_error());
        return 1;
    }
    const int rank = zero_comm_rank(comm), n = zero_comm_size(comm);
    for (int accum = 1; accum <= 3; accum += 2) {
        uint64_t fp_stage0 = 0;
        for (int stage = 0; stage <= 3; stage++) {
            run_cfg_t cfg = harness_default_cfg(stage, n, accum);
            rank_result_t mine;
            st = harness_gpt_rank(comm, &cfg, &mine);
            CHECK(st == ZERO_OK, "rank %d stage %d accum %d (mpi): %s", rank, stage, accum,
                  mine.error);
            if (st) break;
            if (stage == 0) fp_stage0 = mine.fingerprint;
            CHECK(mine.fingerprint == fp_stage0, "mpi stage %d: %016llx, stage 0 %016llx", stage,
                  (unsigned long long)mine.fingerprint, (unsigned long long)fp_stage0);
            if (rank == 0) {
                rank_result_t th[16];
                st = harness_gpt_threads(&cfg, th);
                CHECK(st == ZERO_OK, "threads run: %s", th[0].error);
                if (!st) {
                    CHECK(th[0].fingerprint == mine.fingerprint,
                          "np %d stage %d accum %d: mpi %016llx, threads %016llx", n, stage, accum,
                          (unsigned long long)mine.fingerprint,
                          (unsigned long long)th[0].fingerprint);
                    printf("np %d stage %d accum %d: mpi %016llx threads %016llx\n", n, stage,
                           accum, (unsigned long long)mine.fingerprint,
                           (unsigned long long)th[0].fingerprint);
                    for (int r = 0; r < n; r++) harness_result_free(&th[r]);
                }
            }
            harness_result_free(&mine);
        }
    }
    zero_comm_free(comm);
    zero_comm_mpi_finalize();
    if (rank != 0) return failed ? 1 : 0;
    return check_report();
}
