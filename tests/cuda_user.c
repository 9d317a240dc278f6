/* The application's side of the CUDA tests (cuda_user.h). */
#include "cuda_user.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cu_user_testable(int *rc_p)
{
    const char *module = getenv("SHOAL_CUDA_MODULE");
    const char *driver = getenv("SHOAL_CUDA_DRIVER");
    const char *ci = getenv("SHOAL_CI");
    if (module && access(module, R_OK) == 0 && (!driver || access(driver, R_OK) == 0))
        return 1;
    if (ci && strcmp(ci, "1") == 0) {
        printf("1..1\nnot ok 1 - CUDA module or driver stand-in missing: %s, %s\n",
               module ? module : "(SHOAL_CUDA_MODULE unset)", driver ? driver : "-");
        *rc_p = 1;
    } else {
        printf("1..0 # SKIP no CUDA module or driver to test on (built without the CUDA "
               "toolkit?)\n");
        *rc_p = 0;
    }
    return 0;
}

#if __has_include(<cuda.h>)
#include <cuda.h>

/* The names cuda.h's macros give each function (cuMemAlloc_v2...). */
#define CU_NAME_(x) #x
#define CU_NAME(x) CU_NAME_(x)
#define CU_FN(fn) static __typeof__(&fn) p_##fn
CU_FN(cuInit);
CU_FN(cuDeviceGetCount);
CU_FN(cuDeviceGet);
CU_FN(cuDevicePrimaryCtxRetain);
CU_FN(cuCtxSetCurrent);
CU_FN(cuMemAlloc);
CU_FN(cuMemFree);
CU_FN(cuMemHostAlloc);
CU_FN(cuMemFreeHost);
CU_FN(cuMemAllocManaged);
CU_FN(cuMemcpyHtoD);
CU_FN(cuMemcpyDtoH);
CU_FN(cuMemcpyAsync);
CU_FN(cuStreamCreate);
CU_FN(cuStreamDestroy);
CU_FN(cuStreamSynchronize);
CU_FN(cuStreamQuery);
CU_FN(cuStreamWaitValue32);
CU_FN(cuGetErrorString);
CU_FN(cuMemGetAllocationGranularity);
CU_FN(cuMemCreate);
CU_FN(cuMemRelease);
CU_FN(cuMemAddressReserve);
CU_FN(cuMemAddressFree);
CU_FN(cuMemMap);
CU_FN(cuMemUnmap);
CU_FN(cuMemSetAccess);
CU_FN(cuMemGetAddressRange);

static void *lib;
static int lib_dev; /* the device cu_user_open made current */
static unsigned long (*p_launches)(const char *);
static unsigned long (*p_vmm_imports)(void);

static void check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS)
        return;
    const char *s = "?";
    if (p_cuGetErrorString)
        p_cuGetErrorString(r, &s);
    fprintf(stderr, "# test driver call %s failed: %s (%d)\n", what, s, (int)r);
    abort();
}

#define LOAD(fn)                                                                       \
    do {                                                                               \
        if (!(p_##fn = (__typeof__(p_##fn))dlsym(lib, CU_NAME(fn)))) {                  \
            snprintf(why, len, "the driver lacks %s", CU_NAME(fn));                    \
            return -1;                                                                 \
        }                                                                              \
    } while (0)

int cu_user_open(int dev, char *why, size_t len)
{
    const char *path = getenv("SHOAL_CUDA_DRIVER");
    if (!path || !*path)
        path = "libcuda.so.1";
    if (!lib && !(lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL))) {
        snprintf(why, len, "no CUDA driver: %s", dlerror());
        return -1;
    }
    LOAD(cuInit); LOAD(cuDeviceGetCount); LOAD(cuDeviceGet); LOAD(cuDevicePrimaryCtxRetain);
    LOAD(cuCtxSetCurrent); LOAD(cuMemAlloc); LOAD(cuMemFree); LOAD(cuMemHostAlloc);
    LOAD(cuMemFreeHost); LOAD(cuMemAllocManaged); LOAD(cuMemcpyHtoD); LOAD(cuMemcpyDtoH);
    LOAD(cuMemcpyAsync); LOAD(cuStreamCreate); LOAD(cuStreamDestroy); LOAD(cuStreamSynchronize);
    LOAD(cuStreamQuery); LOAD(cuStreamWaitValue32); LOAD(cuGetErrorString);
    LOAD(cuMemGetAllocationGranularity); LOAD(cuMemCreate); LOAD(cuMemRelease);
    LOAD(cuMemAddressReserve); LOAD(cuMemAddressFree); LOAD(cuMemMap); LOAD(cuMemUnmap);
    LOAD(cuMemSetAccess); LOAD(cuMemGetAddressRange);
    p_launches = (unsigned long (*)(const char *))dlsym(lib, "shoal_standin_launches");
    p_vmm_imports = (unsigned long (*)(void))dlsym(lib, "shoal_standin_vmm_imports");
    lib_dev = dev;
    int n = 0;
    CUdevice d;
    CUcontext ctx;
    if (p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= dev) {
        snprintf(why, len, "no CUDA device %d (%d found)", dev, n);
        return -1;
    }
    check(p_cuDeviceGet(&d, dev), "cuDeviceGet");
    check(p_cuDevicePrimaryCtxRetain(&ctx, d), "cuDevicePrimaryCtxRetain");
    check(p_cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    return 0;
}

int cu_user_is_standin(void)
{
    return p_launches != NULL;
}

unsigned long cu_user_launches(const char *name)
{
    return p_launches ? p_launches(name) : 0;
}

unsigned long cu_user_gemms(void)
{
    const char *path = getenv("SHOAL_CUBLAS");
    void *blas = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    void *sym = blas ? dlsym(blas, "shoal_standin_gemms") : NULL;
    unsigned long (*fn)(void) = NULL;
    if (sym)
        memcpy(&fn, &sym, sizeof(fn));
    unsigned long n = fn ? fn() : 0;
    if (blas)
        dlclose(blas);
    return n;
}

void *cu_user_alloc(size_t bytes)
{
    CUdeviceptr p;
    check(p_cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
    return (void *)(uintptr_t)p;
}

void cu_user_free(void *p)
{
    check(p_cuMemFree((CUdeviceptr)(uintptr_t)p), "cuMemFree");
}

/* As PyTorch's expandable segments and ncclMemAlloc make it: a physical
 * allocation that may be exported as a file descriptor, mapped into a
 * range of its own and opened to the current device; the mapping holds
 * the allocation, whose handle goes at once. */
void *cu_user_alloc_vmm(size_t bytes)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = lib_dev}};
    size_t gran;
    check(p_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    size_t size = (bytes + gran - 1) / gran * gran;
    if (size == 0)
        size = gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr p;
    check(p_cuMemCreate(&h, size, &prop, 0), "cuMemCreate");
    check(p_cuMemAddressReserve(&p, size, 0, 0, 0), "cuMemAddressReserve");
    check(p_cuMemMap(p, size, 0, h, 0), "cuMemMap");
    check(p_cuMemRelease(h), "cuMemRelease");
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check(p_cuMemSetAccess(p, size, &access, 1), "cuMemSetAccess");
    return (void *)(uintptr_t)p;
}

void cu_user_free_vmm(void *p)
{
    CUdeviceptr base;
    size_t size;
    check(p_cuStreamSynchronize(NULL), "cuStreamSynchronize");
    check(p_cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)p), "cuMemGetAddressRange");
    check(p_cuMemUnmap(base, size), "cuMemUnmap");
    check(p_cuMemAddressFree(base, size), "cuMemAddressFree");
}

unsigned long cu_user_vmm_imports(void)
{
    return p_vmm_imports ? p_vmm_imports() : 0;
}

void *cu_user_alloc_pinned(size_t bytes)
{
    void *p;
    check(p_cuMemHostAlloc(&p, bytes ? bytes : 1, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
    return p;
}

void cu_user_free_pinned(void *p)
{
    check(p_cuMemFreeHost(p), "cuMemFreeHost");
}

void *cu_user_alloc_managed(size_t bytes)
{
    CUdeviceptr p;
    check(p_cuMemAllocManaged(&p, bytes ? bytes : 1, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    return (void *)(uintptr_t)p;
}

/* From pageable memory the driver may return once it has the bytes, before
 * they reach the device: the legacy stream's sync waits for them, so that
 * work on the caller's (non-blocking) streams sees them. */
void cu_user_htod(void *dst, const void *src, size_t bytes)
{
    if (bytes) {
        check(p_cuMemcpyHtoD((CUdeviceptr)(uintptr_t)dst, src, bytes), "cuMemcpyHtoD");
        check(p_cuStreamSynchronize(NULL), "cuStreamSynchronize");
    }
}

void cu_user_dtoh(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        check(p_cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)src, bytes), "cuMemcpyDtoH");
}

void *cu_user_stream(void)
{
    CUstream s;
    check(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    return s;
}

void cu_user_stream_free(void *stream)
{
    check(p_cuStreamDestroy((CUstream)stream), "cuStreamDestroy");
}

void cu_user_sync(void *stream)
{
    check(p_cuStreamSynchronize((CUstream)stream), "cuStreamSynchronize");
}

int cu_user_idle(void *stream)
{
    CUresult r = p_cuStreamQuery((CUstream)stream);
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    check(r, "cuStreamQuery");
    return 1;
}

void cu_user_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    if (bytes)
        check(p_cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes,
                              (CUstream)stream), "cuMemcpyAsync");
}

void cu_user_gate(void *stream, uint32_t *gate, uint32_t value)
{
    check(p_cuStreamWaitValue32((CUstream)stream, (CUdeviceptr)(uintptr_t)gate, value,
                                CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32");
}

#else /* no CUDA headers: nothing to test on */

int cu_user_open(int dev, char *why, size_t len)
{
    (void)dev;
    snprintf(why, len, "built without the CUDA toolkit's headers");
    return -1;
}
int cu_user_is_standin(void) { return 0; }
unsigned long cu_user_launches(const char *name) { (void)name; return 0; }
unsigned long cu_user_gemms(void) { return 0; }
void *cu_user_alloc(size_t bytes) { (void)bytes; abort(); }
void cu_user_free(void *p) { (void)p; }
void *cu_user_alloc_vmm(size_t bytes) { (void)bytes; abort(); }
void cu_user_free_vmm(void *p) { (void)p; }
unsigned long cu_user_vmm_imports(void) { return 0; }
void *cu_user_alloc_pinned(size_t bytes) { (void)bytes; abort(); }
void cu_user_free_pinned(void *p) { (void)p; }
void *cu_user_alloc_managed(size_t bytes) { (void)bytes; abort(); }
void cu_user_htod(void *dst, const void *src, size_t bytes) { (void)dst; (void)src; (void)bytes; }
void cu_user_dtoh(void *dst, const void *src, size_t bytes) { (void)dst; (void)src; (void)bytes; }
void *cu_user_stream(void) { abort(); }
void cu_user_stream_free(void *stream) { (void)stream; }
void cu_user_sync(void *stream) { (void)stream; }
int cu_user_idle(void *stream) { (void)stream; return 1; }
void cu_user_copy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)dst; (void)src; (void)bytes; (void)stream;
}
void cu_user_gate(void *stream, uint32_t *gate, uint32_t value)
{
    (void)stream; (void)gate; (void)value;
}
#endif
