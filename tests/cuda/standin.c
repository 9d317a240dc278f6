/* A CPU stand-in of the CUDA driver (libcuda.so.1), for shoal's tests
 * only: never installed, and it runs no GPU code. The CUDA module dlopens
 * it in place of the driver and the tests dlopen it to allocate "device"
 * memory and create streams, so the same test programs run on a real
 * driver where a GPU exists. The functions keep cuda.h's prototypes, and
 * cuda.h's macros give them the driver's versioned names (cuMemAlloc is
 * exported as cuMemAlloc_v2), so a dlsym that works here works there.
 *
 * What it models: devices and their primary contexts, a per-thread
 * context stack, allocations and the pointer queries about them, streams
 * as ordered queues that each have a worker thread, events, stream memory
 * operations, the module's kernels (run as the plain C functions of
 * src/cuda/kern.h that the CUDA kernels also run), interprocess memory
 * handles, and sticky faults: a bad address met by queued work makes the
 * context's later stream calls fail with CUDA_ERROR_ILLEGAL_ADDRESS.
 *
 * What it cannot show:
 * - Warp-level code, the grid-stride loops of kernels.cu and anything
 *   about thread blocks: a kernel here is one call over the whole range.
 * - A real GPU's memory ordering: stream work runs on a CPU thread, so
 *   everything it writes follows the C11 model, stronger than PCIe or
 *   NVLink give. A missing fence that a GPU would expose passes here.
 * - Speed, or anything that depends on it.
 * - Protection of device memory: it is plain host memory, so a host read
 *   of a device pointer works here and faults on a real system. (Fresh
 *   device memory holds 0xcb bytes rather than zeros, so code that reads
 *   memory it never wrote shows it.)
 * - The legacy stream's implicit synchronisation with other blocking
 *   streams; it is one stream shared by every device.
 * - Use after fork in the child of an initialised process: refused with
 *   CUDA_ERROR_NOT_INITIALIZED, as the driver refuses it.
 *
 * Settings come from the environment when cuInit first runs:
 * SHOAL_STANDIN_DEVICES (the device count, default 1, 0 for none),
 * SHOAL_STANDIN_NO_MEMOPS=1 (devices without stream memory operations) and
 * SHOAL_STANDIN_NO_P2P=1 (no peer access between devices: a memory handle
 * opens only on the device that exported it, as on GPUs that share no
 * P2P-capable link).
 *
 * This file: initialisation, devices and their attributes, contexts,
 * error names. Thread-safe throughout, as the driver is. */
#include "standin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

standin_config_t standin_config;
atomic_bool standin_unloading;

static pthread_once_t standin_init_once = PTHREAD_ONCE_INIT;
static atomic_bool standin_ready;
/* The process that initialised: a child forked after cuInit inherits the
 * state but none of the worker threads, so it is refused, as the driver
 * refuses a forked child, instead of queueing work that never runs. */
static pid_t standin_init_pid;
static struct CUctx_st standin_ctx[STANDIN_MAX_DEVICES];

/* The calling thread's context stack; the top is the current context. */
static _Thread_local CUcontext standin_ctx_stack[STANDIN_CTX_DEPTH];
static _Thread_local int standin_ctx_depth;

/* A count of 0 to STANDIN_MAX_DEVICES; anything else keeps the default,
 * so a typo cannot turn into "no device" silently. */
static int standin_parse_devices(const char *s)
{
    char *end;
    long n;

    if (s == NULL || *s == '\0')
        return 1;
    n = strtol(s, &end, 10);
    if (*end != '\0' || n < 0 || n > STANDIN_MAX_DEVICES) {
        fprintf(stderr, "libcuda_standin: SHOAL_STANDIN_DEVICES=%s is not 0..%d; using 1\n", s,
                STANDIN_MAX_DEVICES);
        return 1;
    }
    return (int)n;
}

static void standin_init(void)
{
    const char *memops = getenv("SHOAL_STANDIN_NO_MEMOPS");
    const char *p2p = getenv("SHOAL_STANDIN_NO_P2P");

    standin_init_pid = getpid();
    standin_config.devices = standin_parse_devices(getenv("SHOAL_STANDIN_DEVICES"));
    standin_config.memops = !(memops != NULL && strcmp(memops, "1") == 0);
    standin_config.p2p = !(p2p != NULL && strcmp(p2p, "1") == 0);
    for (int i = 0; i < STANDIN_MAX_DEVICES; i++) {
        standin_ctx[i].device = i;
        atomic_init(&standin_ctx[i].retained, 0);
        atomic_init(&standin_ctx[i].fault, CUDA_SUCCESS);
    }
    atomic_store_explicit(&standin_ready, true, memory_order_release);
}

bool standin_initialized(void)
{
    return atomic_load_explicit(&standin_ready, memory_order_acquire) &&
           standin_init_pid == getpid();
}

CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&standin_init_once, standin_init);
    if (standin_init_pid != getpid()) {
        fprintf(stderr, "libcuda_standin: cuInit in a child forked after the parent's cuInit\n");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    return CUDA_SUCCESS;
}

/* CUDA 13.0, the toolkit the stand-in is built against. Like the
 * driver's, it answers before cuInit. */
CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *count = standin_config.devices;
    return CUDA_SUCCESS;
}

static bool standin_device_valid(CUdevice dev)
{
    return dev >= 0 && dev < standin_config.devices;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* What a Hopper-class device reports for the attributes code tends to
 * ask about; every other attribute below the enum's end is 0, as for a
 * feature the device lacks. The stream memory operation attributes (both
 * the current ones and the deprecated _V1 ones) follow the setting, so
 * the module's fallback wait kernel can be tested. */
static int standin_attribute(CUdevice_attribute attrib, CUdevice dev)
{
    int memops = standin_config.memops ? 1 : 0;

    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: return memops;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1: return memops;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1: return memops;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS: return memops;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return memops;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 4;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 0x7fffffff;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return dev + 1;
    default: return 0;
    }
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (pi == NULL || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = standin_attribute(attrib, dev);
    return CUDA_SUCCESS;
}

/* Peer access as SHOAL_STANDIN_NO_P2P says (a device reaches itself
 * anyway). */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (canAccessPeer == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= standin_config.devices || peerDev < 0 ||
        peerDev >= standin_config.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = standin_config.p2p || dev == peerDev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "shoal CPU stand-in device %d", dev);
    return CUDA_SUCCESS;
}

bool standin_ctx_valid(CUcontext ctx)
{
    return ctx != NULL && ctx >= &standin_ctx[0] && ctx < &standin_ctx[standin_config.devices];
}

CUcontext standin_ctx_of_device(int device)
{
    return device >= 0 && device < standin_config.devices ? &standin_ctx[device] : NULL;
}

CUcontext standin_ctx_current(void)
{
    return standin_ctx_depth > 0 ? standin_ctx_stack[standin_ctx_depth - 1] : NULL;
}

CUresult standin_ctx_fault(CUcontext ctx)
{
    if (ctx == NULL)
        return CUDA_SUCCESS;
    return (CUresult)atomic_load_explicit(&ctx->fault, memory_order_acquire);
}

void standin_ctx_set_fault(CUcontext ctx, CUresult err, const char *what)
{
    int none = CUDA_SUCCESS;

    if (ctx == NULL)
        return;
    /* Only the first fault is reported, as a GPU stops at the first. */
    if (atomic_compare_exchange_strong_explicit(&ctx->fault, &none, (int)err,
                                                memory_order_acq_rel, memory_order_acquire))
        fprintf(stderr, "libcuda_standin: device %d faulted: %s\n", ctx->device, what);
}

/* The primary context lives as long as the library: release only counts
 * down, so a context pointer stays valid, as the driver's does while the
 * process holds it. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add_explicit(&standin_ctx[dev].retained, 1, memory_order_relaxed);
    *pctx = &standin_ctx[dev];
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    int n;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    n = atomic_load_explicit(&standin_ctx[dev].retained, memory_order_relaxed);
    do {
        if (n == 0)
            return CUDA_ERROR_INVALID_CONTEXT;
    } while (!atomic_compare_exchange_weak_explicit(&standin_ctx[dev].retained, &n, n - 1,
                                                    memory_order_relaxed, memory_order_relaxed));
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = standin_ctx_current();
    return CUDA_SUCCESS;
}

/* Replaces the top of the stack; NULL pops it, as cuda.h describes. */
CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL) {
        if (standin_ctx_depth > 0)
            standin_ctx_depth--;
        return CUDA_SUCCESS;
    }
    if (!standin_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (standin_ctx_depth == 0)
        standin_ctx_depth = 1;
    standin_ctx_stack[standin_ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (standin_ctx_depth == STANDIN_CTX_DEPTH)
        return CUDA_ERROR_OUT_OF_MEMORY;
    standin_ctx_stack[standin_ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (standin_ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    standin_ctx_depth--;
    if (pctx != NULL)
        *pctx = standin_ctx_stack[standin_ctx_depth];
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device)
{
    CUcontext ctx;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    ctx = standin_ctx_current();
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    CUcontext ctx;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    ctx = standin_ctx_current();
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    standin_stream_sync_all(ctx);
    return standin_ctx_fault(ctx);
}

/* One list gives both the names and the strings, so they cannot drift
 * apart; it holds the codes the stand-in returns and a few that callers
 * commonly print. The strings are the stand-in's own short words. */
#define STANDIN_ERRORS(X)                                                                      \
    X(CUDA_SUCCESS, "no error")                                                                \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                            \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                               \
    X(CUDA_ERROR_NOT_INITIALIZED, "driver not initialized (cuInit was not called)")           \
    X(CUDA_ERROR_DEINITIALIZED, "driver is shutting down")                                     \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device")                                          \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                     \
    X(CUDA_ERROR_INVALID_IMAGE, "invalid kernel image")                                        \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid or missing context")                                \
    X(CUDA_ERROR_MAP_FAILED, "mapping failed")                                                 \
    X(CUDA_ERROR_UNMAP_FAILED, "unmapping failed")                                             \
    X(CUDA_ERROR_ALREADY_MAPPED, "already mapped")                                             \
    X(CUDA_ERROR_NOT_MAPPED, "not mapped")                                                     \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access unsupported")                           \
    X(CUDA_ERROR_OPERATING_SYSTEM, "operating system call failed")                             \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                    \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                          \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                                \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "illegal memory access")                                     \
    X(CUDA_ERROR_LAUNCH_FAILED, "kernel launch failed")                                        \
    X(CUDA_ERROR_TOO_MANY_PEERS, "too many peers")                                             \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                     \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                     \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

#define STANDIN_ERROR_ENTRY(code, text) {code, #code, text},

static const struct {
    CUresult code;
    const char *name, *text;
} standin_errors[] = {STANDIN_ERRORS(STANDIN_ERROR_ENTRY)};

/* Unknown codes: CUDA_ERROR_INVALID_VALUE with *pStr = NULL, as the
 * driver answers. Both work before cuInit. */
static CUresult standin_error_lookup(CUresult error, const char **pStr, bool name)
{
    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(standin_errors) / sizeof(standin_errors[0]); i++) {
        if (standin_errors[i].code == error) {
            *pStr = name ? standin_errors[i].name : standin_errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return standin_error_lookup(error, pStr, true);
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return standin_error_lookup(error, pStr, false);
}
