/* Collective entry points: argument checks that leave the communicator
 * usable, algorithm choice, and the sticky error when a run fails. */
#include "coll.h"

#include "dtype.h"
#include "log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

shoal_status_t shoal_coll_check(struct shoal_comm *comm, const char *name, const void *sendbuf,
                                const void *recvbuf, size_t count, shoal_dtype_t dtype,
                                shoal_op_t op)
{
    size_t es = shoal_dtype_bytes(dtype);
    if (es == 0)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: unknown dtype %d", name,
                               (int)dtype);
    if ((unsigned)op >= SHOAL_OP_COUNT)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: unknown op %d", name, (int)op);
    if (count > SIZE_MAX / es / (size_t)comm->nranks)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: count %zu of %s overflows the address space", name, count,
                               shoal_dtype_name(dtype));
    if (count > 0 && (!sendbuf || !recvbuf))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s is NULL with count %zu",
                               name, sendbuf ? "recvbuf" : "sendbuf", count);
    return SHOAL_OK;
}

shoal_status_t shoal_coll_allreduce(struct shoal_comm *comm, const char *what,
                                    const shoal_coll_args_t *args)
{
    const shoal_algo_ops_t *algo = shoal_algo_select(comm, args);
    if (!algo)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                               "%s: no all-reduce algorithm selected (see SHOAL_ALGO)", what);
    return shoal_coll_run(comm, algo, what, args);
}

shoal_status_t shoal_coll_run(struct shoal_comm *comm, const shoal_algo_ops_t *algo,
                              const char *what, const shoal_coll_args_t *args)
{
    shoal_plan_t plan;
    shoal_status_t s = algo->plan(comm, args, &plan);
    if (s == SHOAL_OK)
        s = algo->run(&plan);
    if (s != SHOAL_OK)
        return shoal_coll_failed(comm, s, "%s: %s of %zu x %s", what, algo->name, args->count,
                                 shoal_dtype_name(args->dtype));
    return SHOAL_OK;
}

shoal_status_t shoal_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm)
{
    shoal_status_t s = shoal_comm_enter(comm, "shoal_allreduce");
    if (s != SHOAL_OK)
        return s;
    s = shoal_coll_check(comm, "shoal_allreduce", sendbuf, recvbuf, count, dtype, op);
    if (s == SHOAL_OK && count > 0) {
        shoal_coll_args_t args = {
            .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count, .dtype = dtype, .op = op};
        s = shoal_coll_allreduce(comm, "shoal_allreduce", &args);
    }
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_coll_failed(struct shoal_comm *comm, shoal_status_t s, const char *fmt, ...)
{
    /* Once aborted, whatever broke next (a peer seeing us go) is the abort's
     * doing: report that. */
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire))
        s = SHOAL_ERR_ABORTED;
    shoal_comm_set_error(comm, s);
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return shoal_comm_fail(comm, s, "%s failed on rank %d", what, comm->rank);
}
