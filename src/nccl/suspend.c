/* NCCL 2.30's suspend, resume and memory statistics.
 *
 * A suspended communicator refuses every call but resume, the statistics,
 * destroy and abort (shoal_nccl_enter says why). Suspend first lets the
 * calls already made finish: the non-blocking communicator's requests, and
 * the host sides of stream-ordered calls (an empty task behind them on the
 * executor). With NCCL_SUSPEND_MEM it then gives back the staging of
 * stream-ordered calls (pinned slots, the direct path's device scratch
 * and stream), made again by the next such call. A stream that has not
 * yet reached a staged call keeps that call's slot: suspend then fails
 * with ncclInvalidUsage, suspending nothing, until the stream is
 * synchronised. The door's compressors stay: freeing their device memory
 * would wait for the streams of their last calls, which the caller may
 * hold (their number is bounded, SHOAL_NCCL_MAX_COMPS). Windows and
 * registrations are the caller's memory and stay too.
 *
 * The statistics count device memory only, as NCCL's do: what suspend
 * releases (the staging's device scratch), what it keeps (the
 * compressors' device buffers), their total, and whether the
 * communicator is suspended. Host memory (pinned slots, the transports'
 * buffers) is not in them. */
#include "door.h"

#include "core/dev_stage.h"
#include "core/exec.h"

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags)
{
    static const char what[] = "ncclCommSuspend";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (flags & ~NCCL_SUSPEND_MEM)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown flags 0x%x", what,
                               (unsigned)flags);
    res = shoal_nccl_drain(comm);
    if (res != ncclSuccess)
        return res;
    shoal_status_t s = shoal_comm_enter(sc, what);
    if (s == SHOAL_OK) {
        /* Tasks run in order: this one's end is every earlier one's. A
         * staged call's host side waits for its stream, which the caller
         * may hold: that is refused first, rather than waited for. */
        s = shoal_dev_comm_pending(sc) ? SHOAL_INPROGRESS : shoal_exec_run(sc, NULL, 0);
        if (s == SHOAL_OK && (flags & NCCL_SUSPEND_MEM))
            s = shoal_dev_comm_release(sc);
        shoal_comm_leave(sc);
    }
    if (s == SHOAL_INPROGRESS)
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "%s: a stream has not yet passed a stream-ordered call of this "
                               "communicator (synchronise it first); nothing suspended", what);
    if (s != SHOAL_OK)
        return shoal_nccl_result(s);
    atomic_store_explicit(&comm->suspended, 1, memory_order_release);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm)
{
    static const char what[] = "ncclCommResume";
    ncclResult_t res = shoal_nccl_formed(comm, what);
    if (res != ncclSuccess)
        return res;
    int was = 1;
    if (!atomic_compare_exchange_strong(&comm->suspended, &was, 0))
        return shoal_nccl_fail(comm, ncclInvalidUsage, "%s: the communicator is not suspended",
                               what);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat,
         uint64_t *value)
{
    static const char what[] = "ncclCommMemStats";
    ncclResult_t res = shoal_nccl_formed(comm, what);
    if (res != ncclSuccess)
        return res;
    if (!value)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: value is NULL", what);
    uint64_t releasable = 0, kept = shoal_nccl_compress_device_bytes(comm);
    if (comm->sc && shoal_comm_enter(comm->sc, what) == SHOAL_OK) {
        releasable = shoal_dev_comm_device_bytes(comm->sc);
        shoal_comm_leave(comm->sc);
    }
    switch (stat) {
    case ncclStatGpuMemSuspend:
        *value = releasable;
        return ncclSuccess;
    case ncclStatGpuMemSuspended:
        *value = (uint64_t)atomic_load(&comm->suspended);
        return ncclSuccess;
    case ncclStatGpuMemPersist:
        *value = kept;
        return ncclSuccess;
    case ncclStatGpuMemTotal:
        *value = releasable + kept;
        return ncclSuccess;
    default:
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown stat %d", what,
                               (int)stat);
    }
}
