/* The door's common parts: settings, result codes and their strings, the
 * error record, and the calls that take no communicator (version, error
 * strings). */
#include "door.h"

#include "base/config.h"
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t door_once = PTHREAD_ONCE_INIT;

static void door_setup(void)
{
    shoal_config_use_nccl_env();
    shoal_info(INIT, "NCCL version %d.%d.%d API served by shoal %d.%d.%d (host and device "
               "memory; ncclGetVersion answers %d; programs built against 2.28.9 run "
               "unchanged)", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, SHOAL_VERSION_MAJOR,
               SHOAL_VERSION_MINOR, SHOAL_VERSION_PATCH, NCCL_VERSION_CODE);
    const shoal_compress_config_t *cc = &shoal_config_get()->compress;
    if (cc->kind == SHOAL_COMPRESS_INT8)
        shoal_info(INIT, "SHOAL_COMPRESS=int8: float sum and average all-reduces of %zu bytes "
                   "or more are compressed to int8", cc->min_bytes);
    const shoal_compress_config_t *colls = cc;
    static const char *const kinds[] = {
        [SHOAL_COMPRESS_INT8] = "int8", [SHOAL_COMPRESS_INT4] = "int4",
        [SHOAL_COMPRESS_SIGN] = "sign",
    };
    if (colls->allgather)
        shoal_info(INIT, "SHOAL_COMPRESS_ALLGATHER=%s: float all-gathers on host memory whose "
                   "output is %zu bytes or more are compressed to %s", kinds[colls->allgather],
                   cc->min_bytes, kinds[colls->allgather]);
    if (colls->reduce_scatter)
        shoal_info(INIT, "SHOAL_COMPRESS_REDUCESCATTER=%s: float sum and average "
                   "reduce-scatters on host memory whose input is %zu bytes or more are "
                   "compressed to %s", kinds[colls->reduce_scatter], cc->min_bytes,
                   kinds[colls->reduce_scatter]);
}

void shoal_nccl_once(void)
{
    pthread_once(&door_once, door_setup);
}

ncclResult_t shoal_nccl_result(shoal_status_t s)
{
    switch (s) {
    case SHOAL_OK:
        return ncclSuccess;
    case SHOAL_INPROGRESS:
        return ncclInProgress;
    case SHOAL_ERR_INVALID_ARG:
        return ncclInvalidArgument;
    case SHOAL_ERR_NO_MEMORY:
    case SHOAL_ERR_SYSTEM:
    case SHOAL_ERR_AUTH:
        return ncclSystemError;
    case SHOAL_ERR_TIMEOUT:
    case SHOAL_ERR_PEER:
        return ncclRemoteError;
    case SHOAL_ERR_UNSUPPORTED:
    case SHOAL_ERR_ABORTED:
    case SHOAL_ERR_MISMATCH:
        return ncclInvalidUsage;
    case SHOAL_ERR_INTERNAL:
    default:
        return ncclInternalError;
    }
}

static shoal_status_t status_of(ncclResult_t res)
{
    switch (res) {
    case ncclSuccess:
        return SHOAL_OK;
    case ncclInProgress:
        return SHOAL_INPROGRESS;
    case ncclInvalidArgument:
        return SHOAL_ERR_INVALID_ARG;
    case ncclRemoteError:
        return SHOAL_ERR_PEER;
    case ncclInvalidUsage:
        return SHOAL_ERR_UNSUPPORTED;
    case ncclSystemError:
        return SHOAL_ERR_SYSTEM;
    default:
        return SHOAL_ERR_INTERNAL;
    }
}

static _Thread_local char thread_error[SHOAL_ERROR_MAX];

ncclResult_t shoal_nccl_fail(struct ncclComm *comm, ncclResult_t res, const char *fmt, ...)
{
    char text[SHOAL_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (comm && shoal_nccl_comm_valid(comm) && comm->sc) {
        shoal_comm_fail(comm->sc, status_of(res), "%s", text);
    } else {
        snprintf(thread_error, sizeof(thread_error), "%s", text);
        shoal_warn(INIT, "%s (%s)", text, pncclGetErrorString(res));
    }
    return res;
}

const char *shoal_nccl_thread_error(void)
{
    return thread_error;
}

/* ---- calls without a communicator ---------------------------------------- */

NCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
    shoal_nccl_once();
    if (!version)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    case ncclTimeout:
        return "timeout";
    default:
        return "unknown result code";
    }
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
    shoal_nccl_once();
    if (shoal_nccl_comm_valid(comm) && comm->sc) {
        const char *s = shoal_comm_last_error(comm->sc);
        if (s[0])
            return s;
    }
    if (thread_error[0])
        return thread_error;
    return shoal_comm_last_error(NULL);
}

/* Settings are read once per process, before the first communicator, and
 * other threads may be reading them: this deprecated call changes nothing. */
NCCL_API(void, ncclResetDebugInit, void)
{
    shoal_nccl_once();
    shoal_info(INIT, "ncclResetDebugInit: settings are read once per process; unchanged");
}

/* The same under the name NCCL's own tools call (exported, not an API
 * function: no pncclX twin). */
void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void)
{
    shoal_nccl_once();
    shoal_info(INIT, "ncclResetDebugInitInternal: settings are read once per process; "
               "unchanged");
}
