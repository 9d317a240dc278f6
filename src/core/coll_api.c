/* The public collective and point-to-point calls, blocking and not: each
 * builds a call record and hands it to shoal_call_issue(), which checks it, then
 * records it in the thread's group, queues it, or runs it and waits
 * (shoal_calls_issue: the same for several calls that make one task). */
#include "dev_stage.h"
#include "exec.h"

/* Whether every one of calls[0..n) moves nothing. */
static int calls_empty(struct shoal_comm *comm, const shoal_call_t *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!shoal_call_is_empty(comm, &calls[i]))
            return 0;
    }
    return 1;
}

shoal_status_t shoal_calls_issue(shoal_comm_t comm, shoal_call_t *calls, size_t n, int nb,
                                 shoal_request_t *req_p)
{
    const char *what = calls[0].what;
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    int in_group = shoal_group_active();
    if (nb && !req_p)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: req_p is NULL", what);
    for (size_t i = 0; i < n && s == SHOAL_OK; i++)
        s = shoal_call_check(comm, &calls[i], in_group);
    if (s != SHOAL_OK) {
        /* nothing */
    } else if (in_group) {
        /* The request completes with the last of them, at the group's end. */
        for (size_t i = 0; i < n && s == SHOAL_OK; i++)
            s = shoal_group_record(comm, &calls[i], nb && i == n - 1 ? req_p : NULL);
    } else if (calls[0].on_stream) {
        /* Stream-ordered calls queue one by one, in order on their stream. */
        for (size_t i = 0; i < n && s == SHOAL_OK; i++)
            s = shoal_call_enqueue(comm, &calls[i]);
    } else if (!nb) {
        s = calls_empty(comm, calls, n) ? SHOAL_OK : shoal_exec_run(comm, calls, n);
    } else if ((s = shoal_request_new(req_p)) != SHOAL_OK) {
        s = shoal_comm_fail(comm, s, "%s: no memory for a request", what);
    } else if (calls_empty(comm, calls, n)) {
        shoal_request_complete(*req_p, SHOAL_OK);
    } else if ((s = shoal_exec_submit(comm, calls, n, req_p, 1, NULL)) != SHOAL_OK) {
        shoal_request_complete(*req_p, s);
        shoal_wait(req_p);
    }
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_call_issue(shoal_comm_t comm, shoal_call_t *call, int nb,
                                shoal_request_t *req_p)
{
    return shoal_calls_issue(comm, call, 1, nb, req_p);
}

static shoal_call_t call_of(const char *what, shoal_coll_kind_t kind, const void *sendbuf,
                            void *recvbuf, size_t count, shoal_dtype_t dtype, shoal_op_t op,
                            int root)
{
    return (shoal_call_t){
        .what = what,
        .args = {.kind = kind, .sendbuf = sendbuf, .recvbuf = recvbuf, .count = count,
                 .dtype = dtype, .op = op, .root = root},
    };
}

/* Calls that reduce nothing carry SUM, which every check accepts. */

shoal_status_t shoal_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_allreduce", SHOAL_COLL_ALLREDUCE, sendbuf, recvbuf, count,
                             dtype, op, 0);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_iallreduce", SHOAL_COLL_ALLREDUCE, sendbuf, recvbuf, count,
                             dtype, op, 0);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_reduce_scatter", SHOAL_COLL_REDUCE_SCATTER, sendbuf,
                             recvbuf, recvcount, dtype, op, 0);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                     shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                     shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_ireduce_scatter", SHOAL_COLL_REDUCE_SCATTER, sendbuf,
                             recvbuf, recvcount, dtype, op, 0);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                               shoal_dtype_t dtype, shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_allgather", SHOAL_COLL_ALLGATHER, sendbuf, recvbuf,
                             sendcount, dtype, SHOAL_SUM, 0);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                shoal_dtype_t dtype, shoal_comm_t comm, shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_iallgather", SHOAL_COLL_ALLGATHER, sendbuf, recvbuf,
                             sendcount, dtype, SHOAL_SUM, 0);
    return shoal_call_issue(comm, &c, 1, req_p);
}

/* Rooted calls leave the buffers a rank does not use out of the call, so
 * that the checks and algorithms never see them. */
static shoal_call_t rooted_call(const char *what, shoal_coll_kind_t kind, shoal_comm_t comm,
                                const void *sendbuf, void *recvbuf, size_t count,
                                shoal_dtype_t dtype, shoal_op_t op, int root)
{
    shoal_call_t c = call_of(what, kind, sendbuf, recvbuf, count, dtype, op, root);
    int is_root = shoal_comm_valid(comm) && comm->team.rank == root;
    if (!is_root && (kind == SHOAL_COLL_BROADCAST || kind == SHOAL_COLL_SCATTER))
        c.args.sendbuf = NULL;
    if (!is_root && (kind == SHOAL_COLL_REDUCE || kind == SHOAL_COLL_GATHER))
        c.args.recvbuf = NULL;
    return c;
}

shoal_status_t shoal_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, int root, shoal_comm_t comm)
{
    shoal_call_t c = rooted_call("shoal_broadcast", SHOAL_COLL_BROADCAST, comm, sendbuf,
                                 recvbuf, count, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ibroadcast(const void *sendbuf, void *recvbuf, size_t count,
                                shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                shoal_request_t *req_p)
{
    shoal_call_t c = rooted_call("shoal_ibroadcast", SHOAL_COLL_BROADCAST, comm, sendbuf,
                                 recvbuf, count, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_reduce(const void *sendbuf, void *recvbuf, size_t count,
                            shoal_dtype_t dtype, shoal_op_t op, int root, shoal_comm_t comm)
{
    shoal_call_t c = rooted_call("shoal_reduce", SHOAL_COLL_REDUCE, comm, sendbuf, recvbuf,
                                 count, dtype, op, root);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                             shoal_dtype_t dtype, shoal_op_t op, int root, shoal_comm_t comm,
                             shoal_request_t *req_p)
{
    shoal_call_t c = rooted_call("shoal_ireduce", SHOAL_COLL_REDUCE, comm, sendbuf, recvbuf,
                                 count, dtype, op, root);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                            shoal_dtype_t dtype, int root, shoal_comm_t comm)
{
    shoal_call_t c = rooted_call("shoal_gather", SHOAL_COLL_GATHER, comm, sendbuf, recvbuf,
                                 sendcount, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                             shoal_dtype_t dtype, int root, shoal_comm_t comm,
                             shoal_request_t *req_p)
{
    shoal_call_t c = rooted_call("shoal_igather", SHOAL_COLL_GATHER, comm, sendbuf, recvbuf,
                                 sendcount, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                             shoal_dtype_t dtype, int root, shoal_comm_t comm)
{
    shoal_call_t c = rooted_call("shoal_scatter", SHOAL_COLL_SCATTER, comm, sendbuf, recvbuf,
                                 recvcount, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                              shoal_dtype_t dtype, int root, shoal_comm_t comm,
                              shoal_request_t *req_p)
{
    shoal_call_t c = rooted_call("shoal_iscatter", SHOAL_COLL_SCATTER, comm, sendbuf, recvbuf,
                                 recvcount, dtype, SHOAL_SUM, root);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                              shoal_dtype_t dtype, shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_alltoall", SHOAL_COLL_ALLTOALL, sendbuf, recvbuf, count,
                             dtype, SHOAL_SUM, 0);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                               shoal_dtype_t dtype, shoal_comm_t comm, shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_ialltoall", SHOAL_COLL_ALLTOALL, sendbuf, recvbuf, count,
                             dtype, SHOAL_SUM, 0);
    return shoal_call_issue(comm, &c, 1, req_p);
}

static shoal_call_t alltoallv_call(const char *what, const void *sendbuf,
                                   const size_t *sendcounts, const size_t *sdispls,
                                   void *recvbuf, const size_t *recvcounts,
                                   const size_t *rdispls, shoal_dtype_t dtype)
{
    shoal_call_t c = call_of(what, SHOAL_COLL_ALLTOALLV, sendbuf, recvbuf, 0, dtype, SHOAL_SUM, 0);
    c.args.sendcounts = sendcounts;
    c.args.sdispls = sdispls;
    c.args.recvcounts = recvcounts;
    c.args.rdispls = rdispls;
    return c;
}

shoal_status_t shoal_alltoallv(const void *sendbuf, const size_t *sendcounts,
                               const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                               const size_t *rdispls, shoal_dtype_t dtype, shoal_comm_t comm)
{
    shoal_call_t c = alltoallv_call("shoal_alltoallv", sendbuf, sendcounts, sdispls, recvbuf,
                                    recvcounts, rdispls, dtype);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls, shoal_dtype_t dtype, shoal_comm_t comm,
                                shoal_request_t *req_p)
{
    shoal_call_t c = alltoallv_call("shoal_ialltoallv", sendbuf, sendcounts, sdispls, recvbuf,
                                    recvcounts, rdispls, dtype);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_send(const void *sendbuf, size_t count, shoal_dtype_t dtype, int peer,
                          shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_send", SHOAL_COLL_SEND, sendbuf, NULL, count, dtype,
                             SHOAL_SUM, peer);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_isend(const void *sendbuf, size_t count, shoal_dtype_t dtype, int peer,
                           shoal_comm_t comm, shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_isend", SHOAL_COLL_SEND, sendbuf, NULL, count, dtype,
                             SHOAL_SUM, peer);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_recv(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                          shoal_comm_t comm)
{
    shoal_call_t c = call_of("shoal_recv", SHOAL_COLL_RECV, NULL, recvbuf, count, dtype,
                             SHOAL_SUM, peer);
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_irecv(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                           shoal_comm_t comm, shoal_request_t *req_p)
{
    shoal_call_t c = call_of("shoal_irecv", SHOAL_COLL_RECV, NULL, recvbuf, count, dtype,
                             SHOAL_SUM, peer);
    return shoal_call_issue(comm, &c, 1, req_p);
}

shoal_status_t shoal_barrier(shoal_comm_t comm)
{
    shoal_call_t c = {.what = "shoal_barrier", .barrier = 1};
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_ibarrier(shoal_comm_t comm, shoal_request_t *req_p)
{
    shoal_call_t c = {.what = "shoal_ibarrier", .barrier = 1};
    return shoal_call_issue(comm, &c, 1, req_p);
}

/* ---- stream-ordered forms ---- */

static shoal_status_t on_stream(shoal_comm_t comm, shoal_call_t c, void *stream)
{
    c.on_stream = 1;
    c.stream = stream;
    return shoal_call_issue(comm, &c, 0, NULL);
}

shoal_status_t shoal_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      shoal_dtype_t dtype, shoal_op_t op, shoal_comm_t comm,
                                      void *stream)
{
    return on_stream(comm, call_of("shoal_allreduce_stream", SHOAL_COLL_ALLREDUCE, sendbuf,
                                   recvbuf, count, dtype, op, 0), stream);
}

shoal_status_t shoal_reduce_scatter_stream(const void *sendbuf, void *recvbuf,
                                           size_t recvcount, shoal_dtype_t dtype, shoal_op_t op,
                                           shoal_comm_t comm, void *stream)
{
    return on_stream(comm, call_of("shoal_reduce_scatter_stream", SHOAL_COLL_REDUCE_SCATTER,
                                   sendbuf, recvbuf, recvcount, dtype, op, 0), stream);
}

shoal_status_t shoal_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      shoal_dtype_t dtype, shoal_comm_t comm, void *stream)
{
    return on_stream(comm, call_of("shoal_allgather_stream", SHOAL_COLL_ALLGATHER, sendbuf,
                                   recvbuf, sendcount, dtype, SHOAL_SUM, 0), stream);
}

shoal_status_t shoal_broadcast_stream(const void *sendbuf, void *recvbuf, size_t count,
                                      shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                      void *stream)
{
    return on_stream(comm, rooted_call("shoal_broadcast_stream", SHOAL_COLL_BROADCAST, comm,
                                       sendbuf, recvbuf, count, dtype, SHOAL_SUM, root),
                     stream);
}

shoal_status_t shoal_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                   shoal_dtype_t dtype, shoal_op_t op, int root,
                                   shoal_comm_t comm, void *stream)
{
    return on_stream(comm, rooted_call("shoal_reduce_stream", SHOAL_COLL_REDUCE, comm, sendbuf,
                                       recvbuf, count, dtype, op, root), stream);
}

shoal_status_t shoal_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                     shoal_dtype_t dtype, shoal_comm_t comm, void *stream)
{
    return on_stream(comm, call_of("shoal_alltoall_stream", SHOAL_COLL_ALLTOALL, sendbuf,
                                   recvbuf, count, dtype, SHOAL_SUM, 0), stream);
}

shoal_status_t shoal_gather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                   void *stream)
{
    return on_stream(comm, rooted_call("shoal_gather_stream", SHOAL_COLL_GATHER, comm, sendbuf,
                                       recvbuf, sendcount, dtype, SHOAL_SUM, root), stream);
}

shoal_status_t shoal_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                    shoal_dtype_t dtype, int root, shoal_comm_t comm,
                                    void *stream)
{
    return on_stream(comm, rooted_call("shoal_scatter_stream", SHOAL_COLL_SCATTER, comm,
                                       sendbuf, recvbuf, recvcount, dtype, SHOAL_SUM, root),
                     stream);
}

shoal_status_t shoal_send_stream(const void *sendbuf, size_t count, shoal_dtype_t dtype,
                                 int peer, shoal_comm_t comm, void *stream)
{
    return on_stream(comm, call_of("shoal_send_stream", SHOAL_COLL_SEND, sendbuf, NULL, count,
                                   dtype, SHOAL_SUM, peer), stream);
}

shoal_status_t shoal_recv_stream(void *recvbuf, size_t count, shoal_dtype_t dtype, int peer,
                                 shoal_comm_t comm, void *stream)
{
    return on_stream(comm, call_of("shoal_recv_stream", SHOAL_COLL_RECV, NULL, recvbuf, count,
                                   dtype, SHOAL_SUM, peer), stream);
}
