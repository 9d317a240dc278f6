/* The MPI door's Fortran entry points: the blocking collectives of
 * Fortran programs reach the door's C functions (coll.c), which take them
 * or pass them to PMPI_* as they do a C program's calls. Which Fortran
 * names need defining depends on how each MPI's own Fortran bindings
 * reach C, read from the installed libraries (nm -D, objdump -d).
 *
 * Open MPI 4.1. mpif.h and `use mpi` (libmpi_mpifh.so) define each
 * routine under the four names a Fortran compiler may give it, MPI_X,
 * mpi_x, mpi_x_ and mpi_x__ (gfortran calls mpi_x_), and call PMPI_X.
 * `use mpi_f08` (libmpi_usempif08.so) calls mpi_x_f08_, which calls
 * ompi_x_f of libmpi_mpifh.so, which calls PMPI_X. A C-only door sees
 * none of them, so the door defines all five names for each of
 *     MPI_ALLREDUCE, MPI_REDUCE, MPI_BCAST, MPI_ALLGATHER,
 *     MPI_REDUCE_SCATTER_BLOCK, MPI_REDUCE_SCATTER, MPI_ALLTOALL,
 *     MPI_ALLTOALLV, MPI_GATHER, MPI_SCATTER, MPI_BARRIER
 * (55 names). Both bindings pass the same arguments: buffers by address
 * (mpi_f08 has no subarray support in this build, so a choice buffer is
 * a plain address, not a descriptor), handles as INTEGERs by reference
 * (TYPE(MPI_Comm) and the others hold just that INTEGER), and ierror by
 * reference, a NULL pointer when mpi_f08's optional ierror is absent; so
 * one function serves the five names. Fortran's MPI_IN_PLACE and
 * MPI_BOTTOM are the addresses of mpi_fortran_in_place_ and
 * mpi_fortran_bottom_ (common blocks of mpif.h and `use mpi`, bind(C)
 * variables of mpi_f08; after dynamic linking every reference, the
 * door's too, finds the same definition). Not defined, because no
 * program's call reaches them in this build: MPI_X_f and MPI_X_f08 (C
 * names Open MPI gives the same code, for an mpi_f08 module that binds
 * to them directly) and ompi_x_f (called by libmpi_usempif08.so only
 * from mpi_x_f08_, which the door already took).
 *
 * MPICH 4.0. Its Fortran bindings (libmpichfort.so) call the C MPI_X, not
 * PMPI_X, for all eleven routines from mpif.h and `use mpi` (MPI_X,
 * mpi_x, mpi_x_, mpi_x__), and for the ten with buffers from `use
 * mpi_f08` too (mpi_x_f08ts_ hands its descriptors to an internal
 * MPIR_X_cdesc, which calls MPI_X); they translate MPICH's own sentinels
 * (MPIR_F_MPI_IN_PLACE, MPIR_F08_MPI_IN_PLACE) first. The door's C
 * functions see those calls with no name here. The one exception is
 * mpi_f08's MPI_BARRIER, mpi_barrier_f08_, which calls PMPI_Barrier: the
 * door defines that name alone (its arguments are the comm's INTEGER by
 * reference and the optional ierror, as above).
 *
 * Not intercepted, under either MPI: the non-blocking collectives
 * (MPI_IALLREDUCE ...: taking them would need the Fortran MPI_WAIT and
 * MPI_TEST family too, so Fortran's requests stay MPI's own), the
 * persistent and large-count forms (MPI_ALLREDUCE_INIT, MPICH's
 * mpi_x_f08ts_large_), the profiling names (PMPI_X, pmpi_x_,
 * pmpi_x_f08_, MPICH's pmpir_x_f08_), and every other routine.
 *
 * The entry points keep no state: they are as thread-safe as the C
 * functions they call. The names assume the MPI the door was built for:
 * preload the door that matches the program's MPI (tests/mpi_env.sh's
 * mpi_run does). */
#include "mpi_priv.h"

/* Fortran's default INTEGER is MPI_Fint; counts, displacements and
 * roots go to the C functions as they are, so they must be C ints. */
_Static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER is not a C int");

/* ierror, when the program passed one. */
static void fortran_ierror(MPI_Fint *ierror, int rc)
{
    if (ierror)
        *ierror = (MPI_Fint)rc;
}

/* Fortran's handles, INTEGERs by reference, as C's. */
#define F_COMM(c) PMPI_Comm_f2c(*(c))
#define F_TYPE(t) PMPI_Type_f2c(*(t))
#define F_OP(o) PMPI_Op_f2c(*(o))

/* Defines NAME as one more symbol of the function TARGET. */
#define F_ALIAS(target, name) __typeof__(target) name __attribute__((alias(#target)));

static void fortran_barrier(const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Barrier(F_COMM(comm)));
}

#ifdef OPEN_MPI

/* Open MPI's Fortran sentinels. Data, so bound when the door is loaded:
 * weak, so that they add no library the door needs to load (absent, their
 * address is NULL, and no Fortran call comes). */
extern int mpi_fortran_in_place_ __attribute__((weak));
extern int mpi_fortran_bottom_ __attribute__((weak));

/* A Fortran buffer argument as C takes it. */
static void *fortran_buf(const void *p)
{
    if (p && p == (const void *)&mpi_fortran_in_place_)
        return MPI_IN_PLACE;
    if (p && p == (const void *)&mpi_fortran_bottom_)
        return MPI_BOTTOM;
    return (void *)p;
}
#define F_BUF(p) fortran_buf(p)

static void fortran_allreduce(const void *sbuf, void *rbuf, const MPI_Fint *count,
                              const MPI_Fint *type, const MPI_Fint *op, const MPI_Fint *comm,
                              MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Allreduce(F_BUF(sbuf), F_BUF(rbuf), *count, F_TYPE(type),
                                         F_OP(op), F_COMM(comm)));
}

static void fortran_reduce(const void *sbuf, void *rbuf, const MPI_Fint *count,
                           const MPI_Fint *type, const MPI_Fint *op, const MPI_Fint *root,
                           const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Reduce(F_BUF(sbuf), F_BUF(rbuf), *count, F_TYPE(type), F_OP(op),
                                      *root, F_COMM(comm)));
}

static void fortran_bcast(void *buf, const MPI_Fint *count, const MPI_Fint *type,
                          const MPI_Fint *root, const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Bcast(F_BUF(buf), *count, F_TYPE(type), *root, F_COMM(comm)));
}

static void fortran_allgather(const void *sbuf, const MPI_Fint *scount, const MPI_Fint *stype,
                              void *rbuf, const MPI_Fint *rcount, const MPI_Fint *rtype,
                              const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Allgather(F_BUF(sbuf), *scount, F_TYPE(stype), F_BUF(rbuf),
                                         *rcount, F_TYPE(rtype), F_COMM(comm)));
}

static void fortran_reduce_scatter_block(const void *sbuf, void *rbuf, const MPI_Fint *rcount,
                                         const MPI_Fint *type, const MPI_Fint *op,
                                         const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Reduce_scatter_block(F_BUF(sbuf), F_BUF(rbuf), *rcount,
                                                    F_TYPE(type), F_OP(op), F_COMM(comm)));
}

static void fortran_reduce_scatter(const void *sbuf, void *rbuf, const MPI_Fint *rcounts,
                                   const MPI_Fint *type, const MPI_Fint *op,
                                   const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Reduce_scatter(F_BUF(sbuf), F_BUF(rbuf), rcounts, F_TYPE(type),
                                              F_OP(op), F_COMM(comm)));
}

static void fortran_alltoall(const void *sbuf, const MPI_Fint *scount, const MPI_Fint *stype,
                             void *rbuf, const MPI_Fint *rcount, const MPI_Fint *rtype,
                             const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Alltoall(F_BUF(sbuf), *scount, F_TYPE(stype), F_BUF(rbuf),
                                        *rcount, F_TYPE(rtype), F_COMM(comm)));
}

static void fortran_alltoallv(const void *sbuf, const MPI_Fint *scounts, const MPI_Fint *sdispls,
                              const MPI_Fint *stype, void *rbuf, const MPI_Fint *rcounts,
                              const MPI_Fint *rdispls, const MPI_Fint *rtype,
                              const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Alltoallv(F_BUF(sbuf), scounts, sdispls, F_TYPE(stype),
                                         F_BUF(rbuf), rcounts, rdispls, F_TYPE(rtype),
                                         F_COMM(comm)));
}

static void fortran_gather(const void *sbuf, const MPI_Fint *scount, const MPI_Fint *stype,
                           void *rbuf, const MPI_Fint *rcount, const MPI_Fint *rtype,
                           const MPI_Fint *root, const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Gather(F_BUF(sbuf), *scount, F_TYPE(stype), F_BUF(rbuf), *rcount,
                                      F_TYPE(rtype), *root, F_COMM(comm)));
}

static void fortran_scatter(const void *sbuf, const MPI_Fint *scount, const MPI_Fint *stype,
                            void *rbuf, const MPI_Fint *rcount, const MPI_Fint *rtype,
                            const MPI_Fint *root, const MPI_Fint *comm, MPI_Fint *ierror)
{
    fortran_ierror(ierror, MPI_Scatter(F_BUF(sbuf), *scount, F_TYPE(stype), F_BUF(rbuf),
                                       *rcount, F_TYPE(rtype), *root, F_COMM(comm)));
}

/* The five names of each routine (the list at the top): MPI_X, mpi_x,
 * mpi_x_, mpi_x__ and mpi_x_f08_. */
#define F_NAMES(lower, upper)                                                  \
    F_ALIAS(fortran_##lower, MPI_##upper)                                      \
    F_ALIAS(fortran_##lower, mpi_##lower)                                      \
    F_ALIAS(fortran_##lower, mpi_##lower##_)                                   \
    F_ALIAS(fortran_##lower, mpi_##lower##__)                                  \
    F_ALIAS(fortran_##lower, mpi_##lower##_f08_)

F_NAMES(allreduce, ALLREDUCE)
F_NAMES(reduce, REDUCE)
F_NAMES(bcast, BCAST)
F_NAMES(allgather, ALLGATHER)
F_NAMES(reduce_scatter_block, REDUCE_SCATTER_BLOCK)
F_NAMES(reduce_scatter, REDUCE_SCATTER)
F_NAMES(alltoall, ALLTOALL)
F_NAMES(alltoallv, ALLTOALLV)
F_NAMES(gather, GATHER)
F_NAMES(scatter, SCATTER)
F_NAMES(barrier, BARRIER)

#else /* MPICH */

F_ALIAS(fortran_barrier, mpi_barrier_f08_)

#endif
