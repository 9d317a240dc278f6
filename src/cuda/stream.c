/* The CUDA module's stream work: copies, the reduction, conversion and
 * orthonormalisation kernels, the host flags that order a stream against
 * the host, and the streams themselves. Every entry runs in the stream's own context,
 * which the driver requires of the kernels it launches there. */
#include "module.h"
#include "kern.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* A grid of at most this many blocks of this many threads: enough to fill
 * the largest GPUs, and the grid-stride loop covers the rest. */
#define SHOAL_CUDA_THREADS 256u
#define SHOAL_CUDA_MAX_BLOCKS 1024u

enum { K_REDUCE, K_AVG, K_WAIT, K_WRITE, K_CODEC, K_CONVERT, K_ORTHO, K_COUNT };
static const char *const k_names[K_COUNT] = {
    [K_REDUCE] = SHOAL_K_REDUCE,
    [K_AVG] = SHOAL_K_AVG,
    [K_WAIT] = SHOAL_K_WAIT,
    [K_WRITE] = SHOAL_K_WRITE,
    [K_CODEC] = SHOAL_K_CODEC,
    [K_CONVERT] = SHOAL_K_CONVERT,
    [K_ORTHO] = SHOAL_K_ORTHO,
};

/* The kernels loaded into one context. A module belongs to the context it
 * was loaded in, so each context the caller's streams use gets its own;
 * they are loaded on first use and kept, as the primary contexts are. */
typedef struct {
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn[K_COUNT];
} cuda_kernels_t;

/* One entry per context (module.h's SHOAL_CUDA_MAX_CONTEXTS). */
static cuda_kernels_t kernels[SHOAL_CUDA_MAX_CONTEXTS];
static atomic_int nkernels;
static pthread_mutex_t kernels_lock = PTHREAD_MUTEX_INITIALIZER;

static const cuda_kernels_t *kernels_find(CUcontext ctx, int n)
{
    for (int i = 0; i < n; i++)
        if (kernels[i].ctx == ctx)
            return &kernels[i];
    return NULL;
}

/* Load the fat binary into ctx, which the entry made current. */
static shoal_status_t kernels_load(const shoal_cu_t *cu, CUcontext ctx, cuda_kernels_t *k)
{
    CUresult r = cu->cuModuleLoadData(&k->mod, shoal_cuda_fatbin);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuModuleLoadData", r);
    for (int i = 0; i < K_COUNT; i++) {
        r = cu->cuModuleGetFunction(&k->fn[i], k->mod, k_names[i]);
        if (r != CUDA_SUCCESS) {
            /* A fat binary without one of the kernels is a fault of the
             * build: say which kernel, and leave nothing loaded. */
            shoal_status_t st = shoal_cu_fail("cuModuleGetFunction", r);
            shoal_cuda_failf(st, "%s (kernel %s)", shoal_cuda_why(), k_names[i]);
            (void)cu->cuModuleUnload(k->mod);
            return st;
        }
    }
    k->ctx = ctx;
    return SHOAL_OK;
}

static shoal_status_t kernel_get(const shoal_cu_t *cu, CUcontext ctx, int which, CUfunction *fn_p)
{
    const cuda_kernels_t *k =
        kernels_find(ctx, atomic_load_explicit(&nkernels, memory_order_acquire));
    shoal_status_t st = SHOAL_OK;
    if (!k) {
        pthread_mutex_lock(&kernels_lock);
        int n = atomic_load_explicit(&nkernels, memory_order_relaxed);
        k = kernels_find(ctx, n);
        if (!k && n == SHOAL_CUDA_MAX_CONTEXTS) {
            st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "more than %d CUDA contexts",
                                  SHOAL_CUDA_MAX_CONTEXTS);
        } else if (!k) {
            st = kernels_load(cu, ctx, &kernels[n]);
            if (st == SHOAL_OK) {
                k = &kernels[n];
                atomic_store_explicit(&nkernels, n + 1, memory_order_release);
            }
        }
        pthread_mutex_unlock(&kernels_lock);
        if (st != SHOAL_OK)
            return st;
    }
    *fn_p = k->fn[which];
    return SHOAL_OK;
}

/* Load the kernels into ctx (current) now, if they are not yet. Loading a
 * module waits for all of its context's queued work, so it must happen in
 * the caller's thread before shoal queues a wait on the host: the first
 * kernel of a direct call runs on the executor while the caller's stream
 * waits for that very call, and loading there would never return. So
 * prepare (communicator init), device_of (the NCCL door's init) and every
 * flag operation (queued by each stream-ordered call before its wait)
 * load them first. Best effort: where loading fails, the first launch
 * says why, and no later call tries again. */
static atomic_int preload_failed;

static void kernels_preload(const shoal_cu_t *cu, CUcontext ctx)
{
    CUfunction fn;
    if (!atomic_load_explicit(&preload_failed, memory_order_relaxed) &&
        kernel_get(cu, ctx, 0, &fn) != SHOAL_OK)
        atomic_store_explicit(&preload_failed, 1, memory_order_relaxed);
}

void shoal_cuda_prepare(void)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUcontext ctx = NULL;
    if (cu && cu->cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
        kernels_preload(cu, ctx);
}

/* One kernel with its one argument, arg (cuLaunchKernel copies it), on
 * the stream; the entry made the stream's context ctx current. */
static shoal_status_t kernel_launch(const shoal_cu_t *cu, CUcontext ctx, int which,
                                    unsigned blocks, unsigned threads, void *arg, void *stream)
{
    CUfunction fn;
    void *params[1] = {arg};
    shoal_status_t st = kernel_get(cu, ctx, which, &fn);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, (CUstream)stream, params,
                                    NULL);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuLaunchKernel", r);
}

static unsigned grid_blocks(size_t count)
{
    size_t blocks = (count + SHOAL_CUDA_THREADS - 1) / SHOAL_CUDA_THREADS;
    return blocks < SHOAL_CUDA_MAX_BLOCKS ? (unsigned)blocks : SHOAL_CUDA_MAX_BLOCKS;
}

shoal_status_t shoal_cuda_launch_codec(const shoal_cu_t *cu, CUcontext ctx, size_t units,
                                       void *arg, void *stream)
{
    return kernel_launch(cu, ctx, K_CODEC, grid_blocks(units), SHOAL_CUDA_THREADS, arg, stream);
}

shoal_status_t shoal_cuda_device_of(void *stream, int *device_p)
{
    shoal_cuda_scope_t s;
    CUcontext ctx;
    int device;
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    kernels_preload(shoal_cuda_driver(), ctx);
    st = shoal_cuda_current_device(&device);
    shoal_cuda_leave(&s);
    if (st == SHOAL_OK)
        *device_p = device;
    return st;
}

/* Unified addressing lets the driver tell every kind of src and dst
 * apart, so one call serves all the directions. */
shoal_status_t shoal_cuda_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (bytes == 0)
        return SHOAL_OK;
    if (!dst || !src)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "copy: NULL buffer");
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
                                   (CUstream)stream);
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuMemcpyAsync", r);
}

/* The kernels skip a dtype or op they do not know, which would leave dst
 * silently unwritten: such calls stop here instead. */
static shoal_status_t check_dtype(const char *what, shoal_dtype_t dtype)
{
    if ((int)dtype < 0 || dtype >= SHOAL_DTYPE_COUNT)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_reduce(void *dst, const void *a, const void *b, size_t count,
                                 shoal_dtype_t dtype, shoal_op_t op, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = check_dtype("reduce", dtype);
    if (st != SHOAL_OK)
        return st;
    if ((int)op < 0 || op >= SHOAL_OP_COUNT)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "reduce: op %d has no device kernel",
                                (int)op);
    if (count == 0)
        return SHOAL_OK;
    if (!dst || !a || !b)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "reduce: NULL buffer");
    /* AVG reduces as SUM; avg divides once at the end. */
    shoal_k_reduce_t k = {
        .dst = dst,
        .a = a,
        .b = b,
        .count = (uint64_t)count,
        .dtype = (int32_t)dtype,
        .op = (int32_t)(op == SHOAL_AVG ? SHOAL_SUM : op),
    };
    st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = kernel_launch(cu, ctx, K_REDUCE, grid_blocks(count), SHOAL_CUDA_THREADS, &k, stream);
    shoal_cuda_leave(&s);
    return st;
}

shoal_status_t shoal_cuda_avg(void *dst, const void *src, size_t count, shoal_dtype_t dtype,
                              int n, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = check_dtype("avg", dtype);
    if (st != SHOAL_OK)
        return st;
    if (n < 1)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "avg: divisor %d", n);
    if (count == 0)
        return SHOAL_OK;
    if (!dst || !src)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "avg: NULL buffer");
    shoal_k_avg_t k = {
        .dst = dst,
        .src = src,
        .count = (uint64_t)count,
        .dtype = (int32_t)dtype,
        .n = (int32_t)n,
    };
    st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = kernel_launch(cu, ctx, K_AVG, grid_blocks(count), SHOAL_CUDA_THREADS, &k, stream);
    shoal_cuda_leave(&s);
    return st;
}

/* Refusals name the type as shoal.h does: the module does not link
 * libshoal's shoal_dtype_name. */
static shoal_status_t check_convert_dtype(const char *side, shoal_dtype_t dtype)
{
    static const char *const names[SHOAL_DTYPE_COUNT] = {
        [SHOAL_INT8] = "SHOAL_INT8",         [SHOAL_UINT8] = "SHOAL_UINT8",
        [SHOAL_INT32] = "SHOAL_INT32",       [SHOAL_UINT32] = "SHOAL_UINT32",
        [SHOAL_INT64] = "SHOAL_INT64",       [SHOAL_UINT64] = "SHOAL_UINT64",
        [SHOAL_FLOAT16] = "SHOAL_FLOAT16",   [SHOAL_FLOAT32] = "SHOAL_FLOAT32",
        [SHOAL_FLOAT64] = "SHOAL_FLOAT64",   [SHOAL_BFLOAT16] = "SHOAL_BFLOAT16",
        [SHOAL_FP8_E4M3] = "SHOAL_FP8_E4M3", [SHOAL_FP8_E5M2] = "SHOAL_FP8_E5M2",
    };
    shoal_status_t st = check_dtype("convert", dtype);
    if (st != SHOAL_OK)
        return st;
    if (shoal_k_convert_bytes((int32_t)dtype) == 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "convert: %s dtype %s is not float32, float16, bfloat16 or fp8",
                                side, names[dtype]);
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_convert(void *dst, shoal_dtype_t dst_dtype, const void *src,
                                  shoal_dtype_t src_dtype, size_t count, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = check_convert_dtype("dst", dst_dtype);
    if (st == SHOAL_OK)
        st = check_convert_dtype("src", src_dtype);
    if (st != SHOAL_OK)
        return st;
    if (count == 0)
        return SHOAL_OK;
    if (!dst || !src)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "convert: NULL buffer");
    shoal_k_convert_t k = {
        .dst = dst,
        .src = src,
        .count = (uint64_t)count,
        .dst_dtype = (int32_t)dst_dtype,
        .src_dtype = (int32_t)src_dtype,
    };
    st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = kernel_launch(cu, ctx, K_CONVERT, grid_blocks(count), SHOAL_CUDA_THREADS, &k, stream);
    shoal_cuda_leave(&s);
    return st;
}

shoal_status_t shoal_cuda_orthonormalise(float *p, const shoal_dev_psgd_desc_t *desc,
                                         size_t ntensors, double *col, void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (ntensors == 0)
        return SHOAL_OK;
    if (!p || !desc || !col)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "orthonormalise: NULL buffer");
    shoal_k_ortho_t k = {.p = p, .col = col, .desc = desc, .ntensors = (uint64_t)ntensors};
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    st = kernel_launch(cu, ctx, K_ORTHO, grid_blocks(ntensors), SHOAL_CUDA_THREADS, &k, stream);
    shoal_cuda_leave(&s);
    return st;
}

/* The flag's address on the device: host_alloc memory is mapped, and the
 * driver says where (with unified addressing, the same address). */
static shoal_status_t flag_device_ptr(const shoal_cu_t *cu, const char *what, uint32_t *flag,
                                      CUdeviceptr *d_p)
{
    CUresult r = cu->cuMemHostGetDevicePointer(d_p, flag, 0);
    if (r == CUDA_SUCCESS)
        return SHOAL_OK;
    shoal_status_t st = shoal_cu_fail("cuMemHostGetDevicePointer", r);
    return shoal_cuda_failf(st, "%s: the flag is not host_alloc memory (%s)", what,
                            shoal_cuda_why());
}

/* The stream's side of a flag (dev_ops.h): wait stores nothing and holds
 * the stream until (int32_t)(*flag - value) >= 0, which is
 * CU_STREAM_WAIT_VALUE_GEQ's wrap-around comparison; write stores value
 * after a fence (CU_STREAM_WRITE_VALUE_DEFAULT), so the host that reads it
 * also sees what the stream's earlier work wrote.
 *
 * cuda.h has no device attribute for the 32-bit stream memory operations
 * (the ones it keeps are for the 64-bit operations and the NOR wait, which
 * say nothing about these, and the deprecated _V1 ones, which describe the
 * old entry points), so the driver's answer decides: the first
 * CUDA_ERROR_NOT_SUPPORTED on a device is remembered, and from then on a
 * one-thread kernel waits or stores instead (shoal_k_wait, shoal_k_write). */
static shoal_status_t flag_op(uint32_t *flag, uint32_t value, void *stream, int wait)
{
    const char *what = wait ? "flag_wait" : "flag_write";
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    CUdeviceptr d;
    shoal_k_wait_t k;
    int device;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!flag)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "%s: NULL flag", what);
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    kernels_preload(cu, ctx);
    st = flag_device_ptr(cu, what, flag, &d);
    if (st == SHOAL_OK)
        st = shoal_cuda_current_device(&device);
    if (st != SHOAL_OK)
        goto out_leave;
    if (shoal_cuda_has_memops(device)) {
        CUresult r = wait ? cu->cuStreamWaitValue32((CUstream)stream, d, value,
                                                    CU_STREAM_WAIT_VALUE_GEQ)
                          : cu->cuStreamWriteValue32((CUstream)stream, d, value,
                                                     CU_STREAM_WRITE_VALUE_DEFAULT);
        if (r == CUDA_SUCCESS)
            goto out_leave;
        if (r != CUDA_ERROR_NOT_SUPPORTED) {
            st = shoal_cu_fail(wait ? "cuStreamWaitValue32" : "cuStreamWriteValue32", r);
            goto out_leave;
        }
        shoal_cuda_no_memops(device);
    }
    /* Zeroed first: the struct's tail padding travels to the device too. */
    memset(&k, 0, sizeof(k));
    k.flag = (volatile uint32_t *)(uintptr_t)d;
    k.value = value;
    st = kernel_launch(cu, ctx, wait ? K_WAIT : K_WRITE, 1, 1, &k, stream);
out_leave:
    shoal_cuda_leave(&s);
    return st;
}

shoal_status_t shoal_cuda_flag_write(uint32_t *flag, uint32_t value, void *stream)
{
    return flag_op(flag, value, stream, 0);
}

shoal_status_t shoal_cuda_flag_wait(uint32_t *flag, uint32_t value, void *stream)
{
    return flag_op(flag, value, stream, 1);
}

/* Non-blocking: the stream does not wait for the legacy default stream,
 * which the caller's other libraries may keep busy. */
shoal_status_t shoal_cuda_stream_create(int device, void **stream_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUstream stream;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_enter_device(device, &s);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    shoal_cuda_leave(&s);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuStreamCreate", r);
    *stream_p = stream;
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_stream_destroy(void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!stream)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "stream_destroy: the NULL stream");
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuStreamDestroy((CUstream)stream);
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuStreamDestroy", r);
}

shoal_status_t shoal_cuda_stream_sync(void *stream)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUcontext ctx;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_enter_stream(stream, &s, &ctx);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuStreamSynchronize((CUstream)stream);
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuStreamSynchronize", r);
}
