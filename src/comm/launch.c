/* launch.c — what an MPI launcher tells a process through its environment before MPI_Init
 * (comm_internal.h): whether it was launched, its rank, the job's size and how many of its
 * ranks share this machine.
 *
 * Why before MPI_Init: the trainer shares the machine's cores among the local ranks, and only
 * the first process prints what every process would (usage errors, the set-up lines), before
 * any communicator exists. Each figure is read from the first launcher that gives it: Open MPI's
 * mpirun (OMPI_COMM_WORLD_*), PMI-1/2 (PMI_*), and Slurm's srun, which under --mpi=pmix sets
 * PMIX_RANK and describes the step in SLURM_STEP_* (SLURM_NTASKS alone is also set inside a
 * batch script that is no rank, so Slurm's figures count only with PMIX_RANK or SLURM_PROCID
 * from srun).
 */
#include "comm_internal.h"

#include <stdlib.h>

/* The leading integer of a variable ("4", or Slurm's "2(x3),1"), or -1 when unset or not one. */
static int env_int(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end;
    long n = strtol(v, &end, 10);
    return end == v || n < 0 || n > 1 << 30 ? -1 : (int)n;
}

static int first_of(const char *const *names, int count) {
    for (int i = 0; i < count; i++) {
        int v = env_int(names[i]);
        if (v >= 0) return v;
    }
    return -1;
}

/* srun started this process as a task of a step (not the batch script itself) */
static int srun_task(void) { return getenv("SLURM_STEP_ID") && env_int("SLURM_PROCID") >= 0; }

int zero_comm_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

int zero__launch_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    int r = first_of(names, 3);
    return r < 0 && srun_task() ? env_int("SLURM_PROCID") : r;
}

int zero__launch_size(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    int n = first_of(names, 2);
    if (n <= 0 && srun_task()) n = env_int("SLURM_STEP_NUM_TASKS");
    return n > 0 ? n : 0;
}

/* Entry `node` of Slurm's tasks-per-node list ("2(x3),1": 2, 2, 2, 1), or -1. */
int zero__slurm_tasks_on_node(const char *list, int node) {
    for (const char *p = list; p && *p && node >= 0;) {
        char *end;
        long count = strtol(p, &end, 10), repeat = 1;
        if (end == p || count < 0) return -1;
        p = end;
        if (p[0] == '(' && p[1] == 'x') {
            repeat = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || repeat < 1) return -1;
            p = end + 1;
        }
        if (node < repeat) return (int)count;
        node -= (int)repeat;
        if (*p == ',')
            p++;
        else if (*p)
            return -1;
    }
    return -1;
}

int zero__launch_local_size(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    int n = first_of(names, 2);
    if (n <= 0 && srun_task())
        n = zero__slurm_tasks_on_node(getenv("SLURM_STEP_TASKS_PER_NODE"), env_int("SLURM_NODEID"));
    return n > 0 ? n : 0;
}
