/* Entry points of reduce-scatter and all-gather: the shared argument checks,
 * then the ring algorithm of each (the only one so far), with the sticky
 * error when a run fails. */
#include "coll.h"

#include "dtype.h"

shoal_status_t shoal_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm)
{
    static const char what[] = "shoal_reduce_scatter";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    /* The check covers nranks * recvcount elements: the whole of sendbuf. */
    s = shoal_coll_check(comm, what, sendbuf, recvbuf, recvcount, dtype, op);
    if (s == SHOAL_OK && recvcount > 0) {
        shoal_coll_args_t args = {
            .sendbuf = sendbuf, .recvbuf = recvbuf, .count = recvcount, .dtype = dtype, .op = op};
        s = shoal_coll_run(comm, &shoal_ring_reduce_scatter_ops, what, &args);
    }
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               shoal_dtype_t dtype, shoal_comm_t comm)
{
    static const char what[] = "shoal_allgather";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    /* All-gather reduces nothing: any valid op passes the check. */
    s = shoal_coll_check(comm, what, sendbuf, recvbuf, sendcount, dtype, SHOAL_SUM);
    if (s == SHOAL_OK && sendcount > 0) {
        shoal_coll_args_t args = {
            .sendbuf = sendbuf, .recvbuf = recvbuf, .count = sendcount, .dtype = dtype, .op = SHOAL_SUM};
        s = shoal_coll_run(comm, &shoal_ring_allgather_ops, what, &args);
    }
    shoal_comm_leave(comm);
    return s;
}
