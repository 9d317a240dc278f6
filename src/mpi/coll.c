/* The MPI door's collectives: taken by shoal when the datatype and op are
 * ones it has, on an intracommunicator with a shoal communicator; passed
 * to PMPI_* otherwise. */
#include "mpi_priv.h"

#include "base/log.h"

#include <stddef.h>

/* The shoal communicator for a call on c with type t (and op, when the
 * call reduces): NULL when the call passes through. */
static shoal_comm_t take(MPI_Comm c, MPI_Datatype t, const MPI_Op *op, int count,
                         shoal_dtype_t *dt_p, shoal_op_t *op_p, const char *what)
{
    shoal_comm_t comm = NULL;
    if (count >= 0 && shoal_mpi_dtype(t, dt_p) && (!op || shoal_mpi_op(*op, *dt_p, op_p)))
        comm = shoal_mpi_comm(c);
    shoal_mpi_count(comm != NULL);
    shoal_debug(INIT, "MPI door: %s %s", what, comm ? "taken" : "passed to MPI");
    return comm;
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm c)
{
    shoal_dtype_t dt;
    shoal_op_t sop;
    shoal_comm_t comm = take(c, datatype, &op, count, &dt, &sop, "MPI_Allreduce");
    if (!comm)
        return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, c);
    if (sendbuf == MPI_IN_PLACE)
        sendbuf = recvbuf;
    shoal_status_t s = shoal_allreduce(sendbuf, recvbuf, (size_t)count, dt, sop, comm);
    return s == SHOAL_OK ? MPI_SUCCESS : shoal_mpi_fail(c, comm, "MPI_Allreduce", s);
}

int MPI_Bcast(void *buf, int count, MPI_Datatype datatype, int root, MPI_Comm c)
{
    shoal_dtype_t dt;
    shoal_comm_t comm = take(c, datatype, NULL, count, &dt, NULL, "MPI_Bcast");
    if (!comm)
        return PMPI_Bcast(buf, count, datatype, root, c);
    shoal_status_t s = shoal_broadcast(buf, buf, (size_t)count, dt, root, comm);
    return s == SHOAL_OK ? MPI_SUCCESS : shoal_mpi_fail(c, comm, "MPI_Bcast", s);
}

int MPI_Barrier(MPI_Comm c)
{
    shoal_comm_t comm = shoal_mpi_comm(c);
    shoal_mpi_count(comm != NULL);
    if (!comm)
        return PMPI_Barrier(c);
    shoal_status_t s = shoal_barrier(comm);
    return s == SHOAL_OK ? MPI_SUCCESS : shoal_mpi_fail(c, comm, "MPI_Barrier", s);
}
