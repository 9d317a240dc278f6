/* The CUDA module's ops table (dev_ops.h), its one export, and what every
 * entry leans on: opening the driver once and finding the right context
 * for the calling thread. Memory entries are in mem.c, stream work in
 * stream.c, the codec kernel's entry in codec.c, the matrix product's in
 * gemm.c.
 *
 * Contexts: the module uses each device's primary context, the one the
 * CUDA runtime (and so PyTorch and friends) uses, retained the first time
 * a device is needed and kept for the life of the process, so device
 * memory and streams stay valid however the caller's threads come and go.
 * An entry never leaves a context of its own pushed: what it pushes it
 * pops before returning. */
#include "module.h"
#include "cublas_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    CUdevice dev;
    _Atomic(CUcontext) primary; /* NULL until first retained */
    atomic_int no_memops;       /* 1 once a stream memory operation was refused */
} shoal_cuda_dev_t;

/* Written once by the first successful open, under open_lock, before
 * opened publishes them (release): an entry that sees opened sees them. */
static shoal_cuda_dev_t *devs;
static int ndevs;
static _Atomic(const shoal_cu_t *) opened;

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static int open_done;
static shoal_status_t open_status;
static char open_why[256];

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* The driver and a table of its devices, published to the entries. */
static shoal_status_t cuda_load(const char *path)
{
    const shoal_cu_t *cu;
    shoal_cuda_dev_t *table;
    shoal_status_t st;
    int count = 0;

    st = shoal_cu_load(path, &cu, &count);
    if (st != SHOAL_OK)
        return st;
    table = calloc((size_t)count, sizeof(*table));
    if (!table)
        return shoal_cuda_failf(SHOAL_ERR_NO_MEMORY, "no memory for %d CUDA devices", count);
    for (int i = 0; i < count; i++) {
        CUresult r = cu->cuDeviceGet(&table[i].dev, i);
        if (r != CUDA_SUCCESS) {
            st = shoal_cu_fail("cuDeviceGet", r);
            goto err_free_table;
        }
        atomic_init(&table[i].primary, NULL);
        atomic_init(&table[i].no_memops, 0);
    }
    devs = table;
    ndevs = count;
    atomic_store_explicit(&opened, cu, memory_order_release);
    return SHOAL_OK;

err_free_table:
    free(table);
    return st;
}

/* open may be called from many threads and more than once (each
 * communicator that meets a device pointer asks): the first call decides,
 * and the later ones return its status and, on failure, its message on
 * their own thread. A mutex rather than pthread_once, since the driver
 * path is an argument. cuBLAS is only named here: gemm loads it when it
 * first multiplies, so a process that never does pays nothing for it and
 * needs no cuBLAS installed. */
static shoal_status_t cuda_open(const char *path, const char *cublas)
{
    shoal_status_t st;

    pthread_mutex_lock(&open_lock);
    if (!open_done) {
        shoal_cublas_set_path(cublas);
        open_status = cuda_load(path);
        open_done = 1;
        if (open_status != SHOAL_OK)
            snprintf(open_why, sizeof(open_why), "%s", shoal_cuda_why());
    }
    st = open_status;
    if (st != SHOAL_OK)
        shoal_cuda_failf(st, "%s", open_why);
    pthread_mutex_unlock(&open_lock);
    return st;
}

static int cuda_device_count(void)
{
    return atomic_load_explicit(&opened, memory_order_acquire) ? ndevs : 0;
}

const shoal_cu_t *shoal_cuda_driver(void)
{
    const shoal_cu_t *cu = atomic_load_explicit(&opened, memory_order_acquire);
    if (!cu)
        shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "the CUDA module was not opened");
    return cu;
}

/* The device's primary context, retained on first use. The lock only
 * covers the first retain of each device; later calls read the pointer. */
static shoal_status_t cuda_primary(const shoal_cu_t *cu, int device, CUcontext *ctx_p)
{
    shoal_status_t st = SHOAL_OK;
    if (device < 0 || device >= ndevs)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "CUDA device %d does not exist (%d visible)",
                                device, ndevs);
    CUcontext ctx = atomic_load_explicit(&devs[device].primary, memory_order_acquire);
    if (!ctx) {
        pthread_mutex_lock(&primary_lock);
        ctx = atomic_load_explicit(&devs[device].primary, memory_order_relaxed);
        if (!ctx) {
            CUresult r = cu->cuDevicePrimaryCtxRetain(&ctx, devs[device].dev);
            if (r == CUDA_SUCCESS)
                atomic_store_explicit(&devs[device].primary, ctx, memory_order_release);
            else
                st = shoal_cu_fail("cuDevicePrimaryCtxRetain", r);
        }
        pthread_mutex_unlock(&primary_lock);
        if (st != SHOAL_OK)
            return st;
    }
    *ctx_p = ctx;
    return SHOAL_OK;
}

static shoal_status_t cuda_current(const shoal_cu_t *cu, CUcontext *ctx_p)
{
    CUresult r = cu->cuCtxGetCurrent(ctx_p);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuCtxGetCurrent", r);
}

/* ctx current for the entry: nothing to do when it is already, else
 * pushed on the thread's stack. */
static shoal_status_t cuda_use(const shoal_cu_t *cu, CUcontext ctx, CUcontext current,
                               shoal_cuda_scope_t *s)
{
    s->pushed = 0;
    if (ctx == current)
        return SHOAL_OK;
    CUresult r = cu->cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuCtxPushCurrent", r);
    s->pushed = 1;
    return SHOAL_OK;
}

/* A thread with no context gets the device's primary one for good: what
 * the caller would have after any CUDA runtime call on that device. */
static shoal_status_t cuda_adopt(const shoal_cu_t *cu, CUcontext ctx)
{
    CUresult r = cu->cuCtxSetCurrent(ctx);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuCtxSetCurrent", r);
}

shoal_status_t shoal_cuda_enter_device(int device, shoal_cuda_scope_t *s)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUcontext ctx, current;
    shoal_status_t st;
    s->pushed = 0;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    st = cuda_primary(cu, device, &ctx);
    if (st == SHOAL_OK)
        st = cuda_current(cu, &current);
    if (st != SHOAL_OK)
        return st;
    if (!current)
        return cuda_adopt(cu, ctx);
    return cuda_use(cu, ctx, current, s);
}

shoal_status_t shoal_cuda_enter_any(shoal_cuda_scope_t *s)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUcontext ctx, current;
    shoal_status_t st;
    s->pushed = 0;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    st = cuda_current(cu, &current);
    if (st != SHOAL_OK || current)
        return st;
    st = cuda_primary(cu, 0, &ctx);
    return st == SHOAL_OK ? cuda_adopt(cu, ctx) : st;
}

shoal_status_t shoal_cuda_enter_stream(void *stream, shoal_cuda_scope_t *s, CUcontext *ctx_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUcontext ctx, current;
    shoal_status_t st;
    CUresult r;
    s->pushed = 0;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!stream) {
        st = shoal_cuda_enter_any(s);
        if (st == SHOAL_OK)
            st = cuda_current(cu, ctx_p);
        return st;
    }
    r = cu->cuStreamGetCtx((CUstream)stream, &ctx);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuStreamGetCtx", r);
    st = cuda_current(cu, &current);
    if (st == SHOAL_OK)
        st = cuda_use(cu, ctx, current, s);
    if (st == SHOAL_OK)
        *ctx_p = ctx;
    return st;
}

void shoal_cuda_leave(shoal_cuda_scope_t *s)
{
    const shoal_cu_t *cu = atomic_load_explicit(&opened, memory_order_acquire);
    CUcontext popped;
    /* A failed pop leaves nothing to undo: the push it pairs with is the
     * entry's own, on this thread, so it does not fail. */
    if (cu && s->pushed)
        (void)cu->cuCtxPopCurrent(&popped);
    s->pushed = 0;
}

shoal_status_t shoal_cuda_current_device(int *device_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUdevice dev;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    CUresult r = cu->cuCtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuCtxGetDevice", r);
    /* CUdevice is a handle, which happens to equal the ordinal; the
     * ordinal is what the table speaks, so look it up. */
    for (int i = 0; i < ndevs; i++) {
        if (devs[i].dev == dev) {
            *device_p = i;
            return SHOAL_OK;
        }
    }
    return shoal_cuda_failf(SHOAL_ERR_INTERNAL, "the current context's device %d is not listed",
                            (int)dev);
}

int shoal_cuda_has_memops(int device)
{
    if (device < 0 || device >= ndevs)
        return 1;
    return !atomic_load_explicit(&devs[device].no_memops, memory_order_relaxed);
}

void shoal_cuda_no_memops(int device)
{
    if (device >= 0 && device < ndevs)
        atomic_store_explicit(&devs[device].no_memops, 1, memory_order_relaxed);
}

static const shoal_dev_ops_t cuda_ops = {
    .size = sizeof(shoal_dev_ops_t),
    .abi = SHOAL_DEV_ABI,
    .name = "cuda",
    .why = shoal_cuda_why,
    .open = cuda_open,
    .device_count = cuda_device_count,
    .classify = shoal_cuda_classify,
    .device_of = shoal_cuda_device_of,
    .prepare = shoal_cuda_prepare,
    .extent = shoal_cuda_extent,
    .mem_alloc = shoal_cuda_mem_alloc,
    .mem_free = shoal_cuda_mem_free,
    .host_alloc = shoal_cuda_host_alloc,
    .host_free = shoal_cuda_host_free,
    .copy = shoal_cuda_copy,
    .reduce = shoal_cuda_reduce,
    .avg = shoal_cuda_avg,
    .convert = shoal_cuda_convert,
    .flag_write = shoal_cuda_flag_write,
    .flag_wait = shoal_cuda_flag_wait,
    .stream_create = shoal_cuda_stream_create,
    .stream_destroy = shoal_cuda_stream_destroy,
    .stream_sync = shoal_cuda_stream_sync,
    .ipc_get = shoal_cuda_ipc_get,
    .ipc_put = shoal_cuda_ipc_put,
    .ipc_open = shoal_cuda_ipc_open,
    .ipc_close = shoal_cuda_ipc_close,
    .gemm = shoal_cuda_gemm,
    .codec = shoal_cuda_codec,
    .orthonormalise = shoal_cuda_orthonormalise,
};

/* The module's one export (cuda.map). Callable before open. */
const shoal_dev_ops_t *shoal_cuda_module(void);
const shoal_dev_ops_t *shoal_cuda_module(void)
{
    return &cuda_ops;
}
