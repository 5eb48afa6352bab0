/* test_stages_mpi.c — run under mpirun -np N: the tiny GPT of harness.c on every stage and
 * accumulation {1, 3} over the MPI backend; rank 0 also runs the same configuration on N
 * threads-backend ranks in-process. The weights fingerprints must be identical (both backends
 * sum in rank order with one reduction kernel), and identical across stages. The same once more
 * with bf16 compute (accumulation 3): the 16-bit reduce-scatters sum in fp32 in rank order on
 * both backends, so the fp32 master fingerprints agree too. And bf16 with 8-bit Adam states
 * (optimizer_state_dtype int8), whose blocks sit at the same offsets on every stage. And bf16
 * with 1-bit Adam (stage 0 only) after one warm-up step: its compressed all-reduce is the same
 * all-to-all and all-gather on both backends.
 */
#include "harness.h"
#include "mpi_harness.h"

#include <string.h>

int main(void) {
    zero_comm_t *comm = mpi_harness_init(NULL);
    if (!comm) return 1;
    zero_status_t st;
    const int rank = zero_comm_rank(comm), n = zero_comm_size(comm);
    for (int c = 0; c < 5; c++) {
        const int accum = c == 0 ? 1 : 3;
        const zero_dtype_t dt = c >= 2 ? ZERO_DTYPE_BF16 : ZERO_DTYPE_FP32;
        uint64_t fp_stage0 = 0;
        for (int stage = 0; stage <= (c == 4 ? 0 : 3); stage++) {
            run_cfg_t cfg = harness_default_cfg(stage, n, accum);
            cfg.dtype = dt;
            if (c == 3) cfg.state_dtype = ZERO_DTYPE_INT8;
            cfg.onebit = c == 4;
            cfg.freeze_step = 1;
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
                          "np %d %s stage %d accum %d: mpi %016llx, threads %016llx", n,
                          zero_dtype_name(dt), stage, accum, (unsigned long long)mine.fingerprint,
                          (unsigned long long)th[0].fingerprint);
                    printf("np %d %s stage %d accum %d: mpi %016llx threads %016llx\n", n,
                           zero_dtype_name(dt), stage, accum, (unsigned long long)mine.fingerprint,
                           (unsigned long long)th[0].fingerprint);
                    for (int r = 0; r < n; r++) harness_result_free(&th[r]);
                }
            }
            harness_result_free(&mine);
        }
    }
    return mpi_harness_finish(comm);
}
