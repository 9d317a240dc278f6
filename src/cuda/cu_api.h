/* The CUDA driver as the module reaches it: libcuda.so.1 loaded with
 * dlopen and its functions looked up into a table, so that the module
 * links against nothing of CUDA's and loads where no driver is (open then
 * fails with a message instead). This file and cu_api.c are the only
 * place that names the driver library.
 *
 * The table's members are named as the functions' cuda.h names expand
 * (cuMemAlloc is the member cuMemAlloc_v2), so code calls them by their
 * plain names, cu->cuMemAlloc(...), and always reaches the version of the
 * function whose prototype cuda.h declares. The module never defines
 * CUDA_API_PER_THREAD_DEFAULT_STREAM: a NULL stream is the legacy one.
 *
 * The thread-local failure message (dev_ops.h's why()) lives here too,
 * since most failures are the driver's. */
#ifndef SHOAL_CUDA_CU_API_H
#define SHOAL_CUDA_CU_API_H

#include "shoal.h"

#include <cuda.h>

/* Every driver function the module calls, and nothing else: the CPU
 * stand-in of the driver (tests/cuda/) implements the same list. */
#define SHOAL_CU_FUNCS(X)                                                              \
    X(cuInit)                                                                          \
    X(cuDriverGetVersion)                                                              \
    X(cuDeviceGetCount)                                                                \
    X(cuDeviceGet)                                                                     \
    X(cuDevicePrimaryCtxRetain)                                                        \
    X(cuCtxGetCurrent)                                                                 \
    X(cuCtxSetCurrent)                                                                 \
    X(cuCtxGetDevice)                                                                  \
    X(cuCtxPushCurrent)                                                                \
    X(cuCtxPopCurrent)                                                                 \
    X(cuStreamGetCtx)                                                                  \
    X(cuPointerGetAttributes)                                                          \
    X(cuMemGetAddressRange)                                                            \
    X(cuMemAlloc)                                                                      \
    X(cuMemFree)                                                                       \
    X(cuMemHostAlloc)                                                                  \
    X(cuMemFreeHost)                                                                   \
    X(cuMemHostGetDevicePointer)                                                       \
    X(cuMemcpyAsync)                                                                   \
    X(cuStreamCreate)                                                                  \
    X(cuStreamDestroy)                                                                 \
    X(cuStreamSynchronize)                                                             \
    X(cuStreamWaitValue32)                                                             \
    X(cuStreamWriteValue32)                                                            \
    X(cuModuleLoadData)                                                                \
    X(cuModuleGetFunction)                                                             \
    X(cuModuleUnload)                                                                  \
    X(cuLaunchKernel)                                                                  \
    X(cuIpcGetMemHandle)                                                               \
    X(cuIpcOpenMemHandle)                                                              \
    X(cuIpcCloseMemHandle)                                                             \
    X(cuMemRetainAllocationHandle)                                                     \
    X(cuMemExportToShareableHandle)                                                    \
    X(cuMemImportFromShareableHandle)                                                  \
    X(cuMemAddressReserve)                                                             \
    X(cuMemAddressFree)                                                                \
    X(cuMemMap)                                                                        \
    X(cuMemUnmap)                                                                      \
    X(cuMemSetAccess)                                                                  \
    X(cuMemRelease)                                                                    \
    X(cuMemGetAllocationPropertiesFromHandle)                                          \
    X(cuDeviceCanAccessPeer)                                                           \
    X(cuGetErrorName)                                                                  \
    X(cuGetErrorString)

/* A member per function, of the type of cuda.h's own prototype. */
#define SHOAL_CU_MEMBER_(fn) __typeof__(fn) *fn;
typedef struct {
    SHOAL_CU_FUNCS(SHOAL_CU_MEMBER_)
} shoal_cu_t;
#undef SHOAL_CU_MEMBER_

/* Load the driver (driver: a path or file name; NULL for libcuda.so.1),
 * look up every function, cuInit(0) and count the devices. On success
 * *cu_p is the table (valid for the life of the process; the library is
 * never unloaded) and *count_p the number of devices, at least 1. Fails
 * with SHOAL_ERR_UNSUPPORTED and the cause in the thread's message: no
 * driver library, a function it lacks, a driver older than the toolkit
 * that built the kernels, cuInit's error, or no device. Not thread-safe:
 * module.c calls it once, under its lock. */
shoal_status_t shoal_cu_load(const char *driver, const shoal_cu_t **cu_p, int *count_p);

/* The loaded table, or NULL before a successful shoal_cu_load. Any
 * thread. */
const shoal_cu_t *shoal_cu(void);

/* Record that fn (a driver function's plain name) returned r, as "fn:
 * <the driver's description> (<CUDA_ERROR_NAME>)", and return the status
 * that stands for r: SHOAL_ERR_NO_MEMORY, SHOAL_ERR_INVALID_ARG,
 * SHOAL_ERR_UNSUPPORTED or SHOAL_ERR_SYSTEM. */
shoal_status_t shoal_cu_fail(const char *fn, CUresult r);

/* Record a message of the module's own and return status. The arguments
 * may include shoal_cuda_why(), to wrap the previous message. */
shoal_status_t shoal_cuda_failf(shoal_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The calling thread's last message ("" when none); the buffer belongs to
 * the thread and is overwritten by its next failure. */
const char *shoal_cuda_why(void);

#endif
