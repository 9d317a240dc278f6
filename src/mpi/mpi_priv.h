/* What the MPI door's files share (src/mpi/). */
#ifndef SHOAL_MPI_PRIV_H
#define SHOAL_MPI_PRIV_H

#include "shoal.h"

#include <mpi.h>

/* The MPI the door is built for: "Open MPI" or "MPICH", found in
 * MPI_Get_library_version's text. */
#ifdef OPEN_MPI
#define SHOAL_MPI_NAME "Open MPI"
#else
#define SHOAL_MPI_NAME "MPICH"
#endif

/* door.c */
/* Whether the MPI in the process is SHOAL_MPI_NAME (mpi_types.c). */
int shoal_mpi_is_ours(void);
shoal_comm_t shoal_mpi_comm(MPI_Comm c);
void shoal_mpi_count(int took);
int shoal_mpi_fail(MPI_Comm c, shoal_comm_t comm, const char *what, shoal_status_t s);

/* mpi_types.c: shoal's type and op for MPI's predefined ones; 0 when
 * there is none (the call passes through). */
int shoal_mpi_dtype(MPI_Datatype t, shoal_dtype_t *dt_p);
int shoal_mpi_op(MPI_Op op, shoal_dtype_t dt, shoal_op_t *op_p);

#endif
