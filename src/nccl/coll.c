/* Collectives, send/receive, pre-multiplied sums and groups through the
 * door, with NCCL's semantics for each kind of buffer:
 * - Host buffers and a NULL stream: the call is complete when it returns
 *   (inside a group: at ncclGroupEnd); blocking for a blocking
 *   communicator, non-blocking with its request kept for
 *   ncclCommGetAsyncError otherwise.
 * - Device buffers, or a stream in a process that uses the CUDA driver:
 *   the call is stream-ordered (shoal.h's _stream forms): its work is
 *   queued on the stream and the call returns; later work on the stream
 *   sees the result; a group launches once, at ncclGroupEnd.
 * - A buffer that is neither host memory nor device memory, or device
 *   memory without CUDA, is refused with the reason.
 * A stream where the process has no CUDA driver loaded cannot be a real
 * one: it is ignored, as it was before the door knew CUDA.
 *
 * With SHOAL_COMPRESS=int8, the all-reduces that a training program's
 * gradients make (float sums and averages of SHOAL_COMPRESS_MIN bytes or
 * more) go through shoal_allreduce_int8 on host buffers, and through the
 * stream-ordered compressed all-reduce on device buffers (compress.c).
 * SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER do the same
 * for the all-gathers of a sharded program's weights and the
 * reduce-scatters of its gradients (FSDP, ZeRO): on host buffers any
 * kind, on device buffers int8 (the kind with device kernels), through
 * their stream-ordered forms.
 * Every rank reads the same settings and sees the same count, type, op
 * and kind of buffer, so all take the same path; a rank whose settings
 * differ meets a mismatch. */
#include "door.h"

#include "base/config.h"
#include "base/dev.h"
#include "core/exec.h"
#include "base/log.h"

#include <stdint.h>

typedef struct {
    const char *what;
    shoal_coll_kind_t kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root; /* or peer */
    cudaStream_t stream;
    int on_stream; /* set by classify */
    int compress;  /* the compression that takes the call, 0 for none (door_compression) */
} door_call_t;

/* Elements of a buffer: the per-rank count times nranks for the blocks of
 * all-gather/reduce-scatter/all-to-all/gather/scatter, 0 for a buffer the
 * rank does not use. */
static void buffer_elems(const door_call_t *c, int rank, int n, size_t *send_p, size_t *recv_p)
{
    size_t one = c->count, all = c->count * (size_t)n;
    int is_root = rank == c->root;
    switch (c->kind) {
    case SHOAL_COLL_REDUCE_SCATTER: *send_p = all; *recv_p = one; break;
    case SHOAL_COLL_ALLGATHER: *send_p = one; *recv_p = all; break;
    case SHOAL_COLL_ALLTOALL: *send_p = all; *recv_p = all; break;
    case SHOAL_COLL_BROADCAST: *send_p = is_root ? one : 0; *recv_p = one; break;
    case SHOAL_COLL_REDUCE: *send_p = one; *recv_p = is_root ? one : 0; break;
    case SHOAL_COLL_GATHER: *send_p = one; *recv_p = is_root ? all : 0; break;
    case SHOAL_COLL_SCATTER: *send_p = is_root ? all : 0; *recv_p = one; break;
    case SHOAL_COLL_SEND: *send_p = one; *recv_p = 0; break;
    case SHOAL_COLL_RECV: *send_p = 0; *recv_p = one; break;
    default: *send_p = one; *recv_p = one; break;
    }
}

/* Where c's buffers live, which decides its path (see the head of this
 * file): sets c->on_stream, or refuses a buffer the call cannot use.
 * Arguments that shoal itself refuses (unknown dtype, NULL with a count,
 * sizes that overflow) are left to its checks, which say so more
 * precisely. */
static ncclResult_t classify(struct ncclComm *comm, shoal_comm_t sc, door_call_t *c)
{
    /* Only a process that loaded the driver can hold device memory or a
     * stream: nothing is loaded for one that did not. */
    const shoal_dev_ops_t *dev = shoal_dev_if_driver();
    c->on_stream = dev && c->stream;
    size_t es;
    if (shoal_dtype_size((shoal_dtype_t)c->dtype, &es) != SHOAL_OK || c->count == 0)
        return ncclSuccess;
    int n = sc->team.nranks;
    if (c->count > SIZE_MAX / es / (size_t)n)
        return ncclSuccess;
    size_t elems[2];
    buffer_elems(c, sc->team.rank, n, &elems[0], &elems[1]);
    const void *bufs[2] = {c->sendbuf, c->recvbuf};
    static const char *const names[2] = {"sendbuff", "recvbuff"};
    for (int i = 0; i < 2; i++) {
        if (!elems[i] || !bufs[i])
            continue;
        shoal_dev_mem_t kind = dev ? shoal_dev_kind(bufs[i]) : SHOAL_DEV_MEM_HOST;
        if (kind != SHOAL_DEV_MEM_HOST) {
            c->on_stream = 1;
            continue;
        }
        if (shoal_nccl_is_host(bufs[i], elems[i] * es, i == 1))
            continue;
        if (!dev)
            return shoal_nccl_fail(comm, ncclInvalidArgument,
                                   "%s: %s %p (%zu bytes) is not host memory of this process, "
                                   "so it is device memory or not allocated, and device memory "
                                   "needs CUDA: %s", c->what, names[i], bufs[i],
                                   elems[i] * es, shoal_dev_why());
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: %s %p (%zu bytes) is neither host memory of this process "
                               "nor memory the CUDA driver knows", c->what, names[i], bufs[i],
                               elems[i] * es);
    }
    return ncclSuccess;
}

/* Whether SHOAL_COMPRESS takes c: the stateless int8 all-reduce has no
 * error feedback to keep, so it is safe on any call of a supported type
 * and op; what it loses is what the setting accepts. It cannot be recorded
 * in a group, so between ncclGroupStart and ncclGroupEnd the all-reduces go
 * the usual way (every rank is inside the group alike). A stream-ordered
 * call compresses when both its buffers are device memory, which the
 * device's kernels read.
 *
 * SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER follow the
 * all-reduce's rules where they apply: not in groups (a group may hold two
 * calls of one shape, and a compressor takes one call at a time), on host
 * buffers outside stream order (their host calls are blocking), and on
 * device buffers for int8, whose device forms are stream-ordered (int4
 * and sign have none). Their size is
 * the buffer of nranks x count values (the all-gather's output, the
 * reduce-scatter's input), and on one rank, where nothing travels, they
 * stay plain. */
static int device_memory(const void *p)
{
    shoal_dev_mem_t kind = shoal_dev_kind(p);
    return kind == SHOAL_DEV_MEM_DEVICE || kind == SHOAL_DEV_MEM_MANAGED;
}

/* The compression kind that takes c on nranks ranks, or 0. */
static int door_compression(const door_call_t *c, int nranks)
{
    const shoal_compress_config_t *cc = &shoal_config_get()->compress;
    shoal_dtype_t dt = (shoal_dtype_t)c->dtype;
    shoal_op_t op = (shoal_op_t)c->op;
    size_t es, elems = c->count;
    int kind;
    if (c->count == 0 || shoal_nccl_in_group())
        return 0;
    switch (c->kind) {
    case SHOAL_COLL_ALLREDUCE:
        kind = cc->kind == SHOAL_COMPRESS_INT8 ? SHOAL_COMPRESS_INT8 : 0;
        if (c->on_stream && (!device_memory(c->sendbuf) || !device_memory(c->recvbuf)))
            return 0;
        break;
    case SHOAL_COLL_ALLGATHER:
    case SHOAL_COLL_REDUCE_SCATTER:
        kind = c->kind == SHOAL_COLL_ALLGATHER ? cc->allgather : cc->reduce_scatter;
        if (c->kind == SHOAL_COLL_ALLGATHER)
            op = SHOAL_SUM; /* it moves values; the door passes ncclSum */
        /* On device buffers, INT8 alone has device kernels. */
        if (c->on_stream && (kind != SHOAL_COMPRESS_INT8 || !device_memory(c->sendbuf) ||
                             !device_memory(c->recvbuf)))
            return 0;
        if (nranks < 2 || c->count > SIZE_MAX / (size_t)nranks)
            return 0;
        elems = c->count * (size_t)nranks;
        break;
    default:
        return 0;
    }
    if (!kind)
        return 0;
    if (dt != SHOAL_FLOAT32 && dt != SHOAL_FLOAT16 && dt != SHOAL_BFLOAT16)
        return 0;
    if (op != SHOAL_SUM && op != SHOAL_AVG)
        return 0;
    if (shoal_dtype_size(dt, &es) != SHOAL_OK)
        return 0;
    return elems >= cc->min_bytes / es + (cc->min_bytes % es != 0) ? kind : 0;
}

/* c's compressed all-gather or reduce-scatter (c->compress set); *taken
 * = 0 when it was not run (the communicator keeps no more compressors),
 * and the call goes plain. */
static shoal_status_t issue_compressed(struct ncclComm *comm, shoal_comm_t sc,
                                       const door_call_t *c, int *taken)
{
    shoal_compress_coll_t coll = c->kind == SHOAL_COLL_ALLGATHER
                                     ? SHOAL_COMPRESS_COLL_ALLGATHER
                                     : SHOAL_COMPRESS_COLL_REDUCE_SCATTER;
    return shoal_nccl_compress_host(comm, sc, c->what, coll, (shoal_compress_kind_t)c->compress,
                                    c->sendbuf, c->recvbuf, c->count, (shoal_dtype_t)c->dtype,
                                    (shoal_op_t)c->op, taken);
}

/* Run c on sc: blocking when req_p is NULL, else non-blocking. A
 * compressed call (c->compress) is always blocking: door_run passes no
 * req_p for it. */
static shoal_status_t issue(struct ncclComm *comm, shoal_comm_t sc, const door_call_t *c,
                            shoal_request_t *req_p)
{
    shoal_dtype_t dt = (shoal_dtype_t)c->dtype;
    shoal_op_t op = (shoal_op_t)c->op;
    const void *sb = c->sendbuf;
    void *rb = c->recvbuf;
    size_t n = c->count;
    int root = c->root;
    switch (c->kind) {
    case SHOAL_COLL_ALLREDUCE:
        if (c->compress)
            return shoal_allreduce_int8(sb, rb, n, dt, op, sc, NULL);
        return req_p ? shoal_iallreduce(sb, rb, n, dt, op, sc, req_p)
                     : shoal_allreduce(sb, rb, n, dt, op, sc);
    case SHOAL_COLL_REDUCE_SCATTER:
        if (c->compress) {
            int taken;
            shoal_status_t s = issue_compressed(comm, sc, c, &taken);
            if (taken || s != SHOAL_OK)
                return s;
        }
        return req_p ? shoal_ireduce_scatter(sb, rb, n, dt, op, sc, req_p)
                     : shoal_reduce_scatter(sb, rb, n, dt, op, sc);
    case SHOAL_COLL_ALLGATHER:
        if (c->compress) {
            int taken;
            shoal_status_t s = issue_compressed(comm, sc, c, &taken);
            if (taken || s != SHOAL_OK)
                return s;
        }
        return req_p ? shoal_iallgather(sb, rb, n, dt, sc, req_p)
                     : shoal_allgather(sb, rb, n, dt, sc);
    case SHOAL_COLL_ALLTOALL:
        return req_p ? shoal_ialltoall(sb, rb, n, dt, sc, req_p)
                     : shoal_alltoall(sb, rb, n, dt, sc);
    case SHOAL_COLL_BROADCAST:
        return req_p ? shoal_ibroadcast(sb, rb, n, dt, root, sc, req_p)
                     : shoal_broadcast(sb, rb, n, dt, root, sc);
    case SHOAL_COLL_REDUCE:
        return req_p ? shoal_ireduce(sb, rb, n, dt, op, root, sc, req_p)
                     : shoal_reduce(sb, rb, n, dt, op, root, sc);
    case SHOAL_COLL_GATHER:
        return req_p ? shoal_igather(sb, rb, n, dt, root, sc, req_p)
                     : shoal_gather(sb, rb, n, dt, root, sc);
    case SHOAL_COLL_SCATTER:
        return req_p ? shoal_iscatter(sb, rb, n, dt, root, sc, req_p)
                     : shoal_scatter(sb, rb, n, dt, root, sc);
    case SHOAL_COLL_SEND:
        return req_p ? shoal_isend(sb, n, dt, root, sc, req_p) : shoal_send(sb, n, dt, root, sc);
    case SHOAL_COLL_RECV:
        return req_p ? shoal_irecv(rb, n, dt, root, sc, req_p) : shoal_recv(rb, n, dt, root, sc);
    default:
        return SHOAL_ERR_INTERNAL;
    }
}

/* Queue c on its stream. */
static shoal_status_t issue_stream(struct ncclComm *comm, shoal_comm_t sc, const door_call_t *c)
{
    shoal_dtype_t dt = (shoal_dtype_t)c->dtype;
    shoal_op_t op = (shoal_op_t)c->op;
    const void *sb = c->sendbuf;
    void *rb = c->recvbuf, *st = c->stream;
    size_t n = c->count;
    int root = c->root;
    /* door_compression takes only all-reduces, all-gathers and
     * reduce-scatters. */
    if (c->compress) {
        int taken;
        shoal_compress_coll_t coll = c->kind == SHOAL_COLL_ALLGATHER
                                         ? SHOAL_COMPRESS_COLL_ALLGATHER
                                     : c->kind == SHOAL_COLL_REDUCE_SCATTER
                                         ? SHOAL_COMPRESS_COLL_REDUCE_SCATTER
                                         : SHOAL_COMPRESS_COLL_ALLREDUCE;
        shoal_status_t s = shoal_nccl_compress_stream(comm, sc, coll, sb, rb, n, dt, op, st,
                                                      &taken);
        if (taken || s != SHOAL_OK)
            return s;
    }
    switch (c->kind) {
    case SHOAL_COLL_ALLREDUCE: return shoal_allreduce_stream(sb, rb, n, dt, op, sc, st);
    case SHOAL_COLL_REDUCE_SCATTER: return shoal_reduce_scatter_stream(sb, rb, n, dt, op, sc, st);
    case SHOAL_COLL_ALLGATHER: return shoal_allgather_stream(sb, rb, n, dt, sc, st);
    case SHOAL_COLL_ALLTOALL: return shoal_alltoall_stream(sb, rb, n, dt, sc, st);
    case SHOAL_COLL_BROADCAST: return shoal_broadcast_stream(sb, rb, n, dt, root, sc, st);
    case SHOAL_COLL_REDUCE: return shoal_reduce_stream(sb, rb, n, dt, op, root, sc, st);
    case SHOAL_COLL_GATHER: return shoal_gather_stream(sb, rb, n, dt, root, sc, st);
    case SHOAL_COLL_SCATTER: return shoal_scatter_stream(sb, rb, n, dt, root, sc, st);
    case SHOAL_COLL_SEND: return shoal_send_stream(sb, n, dt, root, sc, st);
    case SHOAL_COLL_RECV: return shoal_recv_stream(rb, n, dt, root, sc, st);
    default: return SHOAL_ERR_INTERNAL;
    }
}

static ncclResult_t door_run(struct ncclComm *comm, door_call_t *c)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, c->what, &sc);
    if (res == ncclSuccess)
        res = classify(comm, sc, c);
    if (res != ncclSuccess)
        return res;
    c->compress = door_compression(c, sc->team.nranks);
    if (c->on_stream)
        return shoal_nccl_result(issue_stream(comm, sc, c));
    /* The door's compressed calls are blocking: they complete before they
     * return, which a non-blocking communicator allows (the all-reduce has
     * no non-blocking form; the all-gather's and reduce-scatter's
     * compressor takes one call at a time). */
    if (comm->blocking || shoal_nccl_in_group() || c->compress)
        return shoal_nccl_result(issue(comm, sc, c, NULL));
    shoal_request_t req;
    shoal_status_t s = issue(comm, sc, c, &req);
    if (s != SHOAL_OK)
        return shoal_nccl_result(s);
    return shoal_nccl_track(comm, req);
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclAllReduce", SHOAL_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype,
                     op, 0, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream)
{
    door_call_t c = {"ncclReduceScatter", SHOAL_COLL_REDUCE_SCATTER, sendbuff, recvbuff,
                     recvcount, datatype, op, 0, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclAllGather", SHOAL_COLL_ALLGATHER, sendbuff, recvbuff, sendcount,
                     datatype, ncclSum, 0, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclAlltoAll", SHOAL_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype,
                     ncclSum, 0, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclBroadcast", SHOAL_COLL_BROADCAST, sendbuff, recvbuff, count, datatype,
                     ncclSum, root, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclBcast", SHOAL_COLL_BROADCAST, buff, buff, count, datatype, ncclSum,
                     root, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
         cudaStream_t stream)
{
    door_call_t c = {"ncclReduce", SHOAL_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op,
                     root, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclGather", SHOAL_COLL_GATHER, sendbuff, recvbuff, count, datatype,
                     ncclSum, root, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclScatter", SHOAL_COLL_SCATTER, sendbuff, recvbuff, count, datatype,
                     ncclSum, root, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclSend", SHOAL_COLL_SEND, sendbuff, NULL, count, datatype, ncclSum,
                     peer, .stream = stream};
    return door_run(comm, &c);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream)
{
    door_call_t c = {"ncclRecv", SHOAL_COLL_RECV, NULL, recvbuff, count, datatype, ncclSum,
                     peer, .stream = stream};
    return door_run(comm, &c);
}

/* ---- pre-multiplied sums ------------------------------------------------ */

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
         ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm)
{
    static const char what[] = "ncclRedOpCreatePreMulSum";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown residence %d", what,
                               (int)residence);
    size_t es;
    if (scalar && shoal_dtype_size((shoal_dtype_t)datatype, &es) == SHOAL_OK &&
        !shoal_nccl_is_host(scalar, es, 0))
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: scalar %p is not host memory of this process: shoal "
                               "reads the scalar on the host, so it must be host memory (a "
                               "device scalar is not supported yet)", what, scalar);
    shoal_op_t sop;
    shoal_status_t s = residence == ncclScalarDevice
                           ? shoal_op_create_premul_sum_ref(sc, scalar, (shoal_dtype_t)datatype, &sop)
                           : shoal_op_create_premul_sum(sc, scalar, (shoal_dtype_t)datatype, &sop);
    if (s != SHOAL_OK)
        return shoal_nccl_result(s);
    if (!op) {
        shoal_op_destroy(sop, sc);
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: op is NULL", what);
    }
    *op = (ncclRedOp_t)sop;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclRedOpDestroy", &sc);
    if (res != ncclSuccess)
        return res;
    return shoal_nccl_result(shoal_op_destroy((shoal_op_t)op, sc));
}

/* ---- groups --------------------------------------------------------------- */

NCCL_API(ncclResult_t, ncclGroupStart, void)
{
    shoal_nccl_once();
    return shoal_nccl_result(shoal_group_start());
}

/* The outermost end first forms the communicators whose inits the group
 * deferred (they meet each other on their own threads), then runs the
 * recorded calls. */
static ncclResult_t group_end(const char *what, ncclSimInfo_t *sim)
{
    shoal_nccl_once();
    if (shoal_group_depth() == 0)
        return shoal_nccl_fail(NULL, ncclInvalidUsage, "%s without ncclGroupStart", what);
    ncclResult_t jobs = shoal_group_depth() == 1 ? shoal_nccl_jobs_run_group() : ncclSuccess;
    shoal_status_t s;
    if (sim) {
        double seconds = 0;
        s = shoal_group_simulate_end(&seconds);
        sim->estimatedTime = (float)seconds;
    } else {
        s = shoal_group_end();
    }
    /* A failed call recorded its reason on its communicator. */
    if (s != SHOAL_OK)
        return shoal_nccl_result(s);
    return jobs;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void)
{
    return group_end("ncclGroupEnd", NULL);
}

#define NCCL_SIM_INFO_MAGIC 0x74685283u

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo)
{
    static const char what[] = "ncclGroupSimulateEnd";
    shoal_nccl_once();
    if (!simInfo || simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float) ||
        simInfo->magic != NCCL_SIM_INFO_MAGIC)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "%s: simInfo is NULL or not from NCCL_SIM_INFO_INITIALIZER", what);
    return group_end(what, simInfo);
}
