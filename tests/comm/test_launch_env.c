/* test_launch_env.c — the launcher's environment before MPI_Init (src/comm/launch.c): rank, size
 * and local size as mpirun, PMI and Slurm's srun give them, and as a Slurm batch script (no rank)
 * must not be read; Slurm's tasks-per-node lists against their expansion by hand.
 */
#include "check.h"
#include "comm/comm_internal.h"

#include <stdlib.h>

static const char *all_vars[] = {"OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "PMI_RANK",
                                 "PMI_SIZE",
                                 "PMIX_RANK",
                                 "MPI_LOCALNRANKS",
                                 "SLURM_STEP_ID",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "SLURM_STEP_NUM_TASKS",
                                 "SLURM_STEP_TASKS_PER_NODE",
                                 "SLURM_NODEID"};

static void clear(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static void expect(const char *what, int launched, int rank, int size, int local) {
    CHECK(!!zero_comm_mpi_launched() == launched, "%s: launched %d", what,
          zero_comm_mpi_launched());
    CHECK(zero__launch_rank() == rank, "%s: rank %d, expected %d", what, zero__launch_rank(), rank);
    CHECK(zero__launch_size() == size, "%s: size %d, expected %d", what, zero__launch_size(), size);
    CHECK(zero__launch_local_size() == local, "%s: local size %d, expected %d", what,
          zero__launch_local_size(), local);
}

int main(void) {
    clear();
    expect("no launcher", 0, -1, 0, 0);

    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    setenv("PMIX_RANK", "3", 1);
    expect("mpirun", 1, 3, 8, 2);

    clear();
    setenv("PMI_RANK", "1", 1);
    setenv("PMI_SIZE", "4", 1);
    setenv("MPI_LOCALNRANKS", "4", 1);
    expect("PMI (MPICH's hydra)", 1, 1, 4, 4);

    /* a batch script of an allocation of 8 tasks: not a rank */
    clear();
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_NODEID", "0", 1);
    expect("sbatch script", 0, -1, 0, 0);

    /* srun --mpi=pmix -n 7 over 3 nodes (3, 2, 2), this task on node 2 */
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_PROCID", "5", 1);
    setenv("PMIX_RANK", "5", 1);
    setenv("SLURM_STEP_NUM_TASKS", "7", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "3,2(x2)", 1);
    setenv("SLURM_NODEID", "2", 1);
    expect("srun", 1, 5, 7, 2);

    const struct {
        const char *list;
        int node, want;
    } lists[] = {{"4", 0, 4},       {"4", 1, -1},       {"2(x3),1", 0, 2},   {"2(x3),1", 2, 2},
                 {"2(x3),1", 3, 1}, {"2(x3),1", 4, -1}, {"1,3(x2),5", 3, 5}, {"2(x", 0, -1},
                 {"x", 0, -1},      {"2(x0)", 0, -1},   {"", 0, -1},         {"3,", 0, 3}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        CHECK(zero__slurm_tasks_on_node(lists[i].list, lists[i].node) == lists[i].want,
              "'%s' node %d: %d, expected %d", lists[i].list, lists[i].node,
              zero__slurm_tasks_on_node(lists[i].list, lists[i].node), lists[i].want);
    CHECK(zero__slurm_tasks_on_node(NULL, 0) == -1, "NULL list");
    clear();
    return check_report();
}
