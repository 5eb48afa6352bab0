/* no_mpi.c — the MPI entry points of a build without MPI: they say so. */
#include "comm_internal.h"

int zero_comm_mpi_available(void) { return 0; }

zero_status_t zero_comm_mpi_init(zero_comm_t **out, const zero_comm_params_t *params) {
    (void)params;
    if (out) *out = NULL;
    return zero__error(ZERO_ERR_UNSUPPORTED,
                       "this build of zero has no MPI backend (MPI was not found at configure "
                       "time); install libopenmpi-dev and rebuild, or use --backend threads");
}

void zero_comm_mpi_finalize(void) {}

void zero_comm_mpi_abort(int code) { (void)code; }
