/* Entry points of the rooted collectives (broadcast, reduce) and of the
 * barrier: argument checks that leave the communicator usable, the chain
 * algorithm of each, and the sticky error when a run fails. */
#include "coll.h"

#include "dtype.h"

/* Stands in for a buffer that this rank never touches in the call, so that
 * shoal_coll_check tests only the buffers that matter here. */
static const char rooted_unused;

static shoal_status_t rooted_check(struct shoal_comm *comm, const char *what, int root,
                                   const void *sendbuf, const void *recvbuf, size_t count,
                                   shoal_dtype_t dtype, shoal_op_t op)
{
    if (root < 0 || root >= comm->nranks)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: root %d is outside 0..%d", what, root, comm->nranks - 1);
    return shoal_coll_check(comm, what, sendbuf, recvbuf, count, dtype, op);
}

shoal_status_t shoal_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, int root, shoal_comm_t comm)
{
    static const char what[] = "shoal_broadcast";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    /* sendbuf is read on root only; broadcast reduces nothing, so any valid
     * op passes the check. */
    int is_root = comm->rank == root;
    s = rooted_check(comm, what, root, is_root ? sendbuf : &rooted_unused, recvbuf, count,
                     dtype, SHOAL_SUM);
    if (s == SHOAL_OK && count > 0) {
        shoal_coll_args_t args = {
            .sendbuf = is_root ? sendbuf : NULL,
            .recvbuf = recvbuf,
            .count = count,
            .dtype = dtype,
            .op = SHOAL_SUM,
            .root = root,
        };
        s = shoal_coll_run(comm, &shoal_chain_broadcast_ops, what, &args);
    }
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_reduce(const void *sendbuf, void *recvbuf, size_t count,
                            shoal_dtype_t dtype, shoal_op_t op, int root, shoal_comm_t comm)
{
    static const char what[] = "shoal_reduce";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    /* recvbuf is written on root only and may be NULL elsewhere. */
    int is_root = comm->rank == root;
    s = rooted_check(comm, what, root, sendbuf, is_root ? recvbuf : &rooted_unused, count,
                     dtype, op);
    if (s == SHOAL_OK && count > 0) {
        shoal_coll_args_t args = {
            .sendbuf = sendbuf,
            .recvbuf = is_root ? recvbuf : NULL,
            .count = count,
            .dtype = dtype,
            .op = op,
            .root = root,
        };
        s = shoal_coll_run(comm, &shoal_chain_reduce_ops, what, &args);
    }
    shoal_comm_leave(comm);
    return s;
}

/* The barrier is a one-element all-reduce through the data path rather than
 * the bootstrap's barrier: a dead or stalled peer then shows up exactly as
 * in any other collective (SHOAL_ERR_PEER or SHOAL_ERR_TIMEOUT naming the
 * rank, sticky on comm), and no rank can leave before every rank has sent
 * its contribution, which is what a barrier promises. */
shoal_status_t shoal_barrier(shoal_comm_t comm)
{
    static const char what[] = "shoal_barrier";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    if (comm->nranks > 1) {
        uint8_t one = 1, all;
        shoal_coll_args_t args = {
            .sendbuf = &one,
            .recvbuf = &all,
            .count = 1,
            .dtype = SHOAL_UINT8,
            .op = SHOAL_MAX,
        };
        s = shoal_coll_allreduce(comm, what, &args);
    }
    shoal_comm_leave(comm);
    return s;
}
