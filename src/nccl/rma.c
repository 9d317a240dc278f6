/* NCCL 2.30's one-sided calls through the door: ncclPutSignal, ncclSignal
 * and ncclWaitSignal on shoal's windows (core/rma.h; device memory staged
 * through the host there), with NCCL's checks
 * (sigIdx, ctx and flags 0; the source inside a symmetric window; opCnt
 * above 0). In a process that uses CUDA, a call with a stream (or a put
 * from device memory) is shoal's stream-ordered form, as the door's
 * collectives are (coll.c); otherwise the blocking form, which inside a
 * group only records the call (a non-blocking communicator allows a call
 * to complete before it returns). The deadline's error of a blocking wait
 * is ncclTimeout. */
#include "door.h"

#include "base/dev.h"
#include "base/dtype.h"

#include <stdlib.h>

/* Enter comm, check NCCL's reserved arguments. */
static ncclResult_t rma_enter(ncclComm_t comm, const char *what, int sigIdx, int ctx,
                              unsigned int flags, shoal_comm_t *sc_p)
{
    ncclResult_t res = shoal_nccl_enter(comm, what, sc_p);
    if (res != ncclSuccess)
        return res;
    if (sigIdx != 0)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: signal index %d is invalid (must "
                               "be 0)", what, sigIdx);
    if (ctx != 0)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: context %d is invalid (must be "
                               "0)", what, ctx);
    if (flags != 0)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: flags %u are invalid (must be "
                               "0)", what, flags);
    return ncclSuccess;
}

/* Whether the call is stream-ordered: only a process that loaded the
 * driver has streams or device memory (buf: a put's source, else NULL). */
static int rma_on_stream(cudaStream_t stream, const void *buf)
{
    if (!shoal_dev_if_driver())
        return 0;
    return stream || (buf && shoal_dev_kind(buf) != SHOAL_DEV_MEM_HOST);
}

static ncclResult_t rma_result(shoal_status_t s)
{
    return s == SHOAL_ERR_TIMEOUT ? ncclTimeout : shoal_nccl_result(s);
}

NCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count,
         ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset,
         int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)
{
    static const char what[] = "ncclPutSignal";
    shoal_comm_t sc;
    ncclResult_t res = rma_enter(comm, what, sigIdx, ctx, flags, &sc);
    if (res != ncclSuccess)
        return res;
    size_t es;
    if (shoal_dtype_size((shoal_dtype_t)datatype, &es) != SHOAL_OK)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown datatype %d", what,
                               (int)datatype);
    if (count > SIZE_MAX / es)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: count %zu overflows", what,
                               count);
    if (!peerWin)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: peerWin is NULL", what);
    if (!localbuff)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: localbuff is NULL", what);
    size_t bytes = count * es;
    shoal_win_t target = shoal_nccl_window_find(comm, peerWin, NULL, 0);
    if (!target)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: peerWin %p is not a live window "
                               "of this communicator", what, (void *)peerWin);
    if (!shoal_nccl_window_find(comm, NULL, localbuff, bytes))
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: localbuff %p (%zu bytes) is not "
                               "in a window this rank registered with NCCL_WIN_COLL_SYMMETRIC",
                               what, localbuff, bytes);
    if (rma_on_stream(stream, localbuff))
        return rma_result(shoal_put_signal_stream(localbuff, bytes, peer, target, peerWinOffset,
                                                  sc, stream));
    return rma_result(shoal_put_signal(localbuff, bytes, peer, target, peerWinOffset, sc));
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
         ncclComm_t comm, cudaStream_t stream)
{
    shoal_comm_t sc;
    ncclResult_t res = rma_enter(comm, "ncclSignal", sigIdx, ctx, flags, &sc);
    if (res != ncclSuccess)
        return res;
    if (rma_on_stream(stream, NULL))
        return rma_result(shoal_signal_stream(peer, sc, stream));
    return rma_result(shoal_signal(peer, sc));
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs,
         ncclComm_t comm, cudaStream_t stream)
{
    static const char what[] = "ncclWaitSignal";
    shoal_comm_t sc;
    ncclResult_t res = rma_enter(comm, what, 0, 0, 0, &sc);
    if (res != ncclSuccess)
        return res;
    if (!signalDescs || nDesc <= 0)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: invalid arguments (%d "
                               "descriptors at %p)", what, nDesc, (void *)signalDescs);
    shoal_signal_wait_t *waits = calloc((size_t)nDesc, sizeof(*waits));
    if (!waits)
        return shoal_nccl_fail(comm, ncclSystemError, "%s: out of memory", what);
    for (int i = 0; i < nDesc && res == ncclSuccess; i++) {
        const ncclWaitSignalDesc_t *d = &signalDescs[i];
        if (d->opCnt <= 0)
            res = shoal_nccl_fail(comm, ncclInvalidArgument, "%s: descriptor %d has invalid "
                                  "opCnt %d", what, i, d->opCnt);
        else if (d->sigIdx != 0)
            res = shoal_nccl_fail(comm, ncclInvalidArgument, "%s: descriptor %d has invalid "
                                  "sigIdx %d (must be 0)", what, i, d->sigIdx);
        else if (d->ctx != 0)
            res = shoal_nccl_fail(comm, ncclInvalidArgument, "%s: descriptor %d has invalid "
                                  "context %d (must be 0)", what, i, d->ctx);
        waits[i] = (shoal_signal_wait_t){.peer = d->peer, .count = (uint32_t)d->opCnt};
    }
    if (res == ncclSuccess)
        res = rma_result(rma_on_stream(stream, NULL)
                             ? shoal_wait_signal_stream(waits, (size_t)nDesc, sc, stream)
                             : shoal_wait_signal(waits, (size_t)nDesc, sc));
    free(waits);
    return res;
}
