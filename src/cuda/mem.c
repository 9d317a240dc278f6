/* The CUDA module's memory entries: what a pointer is, device and pinned
 * allocations (ipc.c exports them to other processes). */
#include "module.h"

#include <stddef.h>
#include <string.h>

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

static void *hptr(CUdeviceptr d)
{
    return (void *)(uintptr_t)d;
}

/* The attributes come back through one call; a pointer the driver does
 * not know is not an error for cuPointerGetAttributes (it leaves the
 * defaults), but some drivers still say CUDA_ERROR_INVALID_VALUE, which
 * means the same. No context is needed, so asking about host memory never
 * creates one. */
shoal_status_t shoal_cuda_classify(const void *p, shoal_dev_mem_t *kind_p, int *device_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned int type = 0;
    int ordinal = -1;
    /* A boolean of unspecified width: zeroed and wide enough for any. */
    uint64_t managed = 0;
    void *data[3] = {&type, &ordinal, &managed};
    shoal_dev_mem_t kind = SHOAL_DEV_MEM_HOST;
    int device = -1;

    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    CUresult r = cu->cuPointerGetAttributes(3, attrs, data, dptr(p));
    if (r == CUDA_ERROR_INVALID_VALUE) {
        type = 0;
        managed = 0;
    } else if (r != CUDA_SUCCESS) {
        return shoal_cu_fail("cuPointerGetAttributes", r);
    }
    if (managed) {
        kind = SHOAL_DEV_MEM_MANAGED;
        device = ordinal;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
        kind = SHOAL_DEV_MEM_DEVICE;
        device = ordinal;
    } else if (type == CU_MEMORYTYPE_HOST) {
        kind = SHOAL_DEV_MEM_PINNED;
    }
    *kind_p = kind;
    *device_p = device;
    return SHOAL_OK;
}

/* The context p belongs to (its device's for device and managed memory,
 * any other for pinned memory); *kind_p is p's kind. Memory the driver
 * does not know is the caller's mistake. */
shoal_status_t shoal_cuda_mem_enter(const void *p, const char *what, shoal_cuda_scope_t *s,
                                shoal_dev_mem_t *kind_p)
{
    shoal_dev_mem_t kind;
    int device;
    s->pushed = 0;
    shoal_status_t st = shoal_cuda_classify(p, &kind, &device);
    if (st != SHOAL_OK)
        return st;
    if (kind == SHOAL_DEV_MEM_HOST)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "%s: %p is not memory the CUDA driver knows",
                                what, p);
    if (kind == SHOAL_DEV_MEM_PINNED || device < 0)
        st = shoal_cuda_enter_any(s);
    else
        st = shoal_cuda_enter_device(device, s);
    if (st == SHOAL_OK)
        *kind_p = kind;
    return st;
}

shoal_status_t shoal_cuda_extent(const void *p, size_t *bytes_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    shoal_dev_mem_t kind;
    CUdeviceptr base;
    size_t size;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_mem_enter(p, "extent", &s, &kind);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuMemGetAddressRange(&base, &size, dptr(p));
    shoal_cuda_leave(&s);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuMemGetAddressRange", r);
    *bytes_p = (size_t)(base + size - dptr(p));
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_mem_alloc(int device, size_t bytes, void **p_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUdeviceptr d;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (bytes == 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "mem_alloc: 0 bytes");
    shoal_status_t st = shoal_cuda_enter_device(device, &s);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuMemAlloc(&d, bytes);
    shoal_cuda_leave(&s);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuMemAlloc", r);
    *p_p = hptr(d);
    return SHOAL_OK;
}

/* NULL is nothing to free, as for free(). */
shoal_status_t shoal_cuda_mem_free(void *p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    shoal_dev_mem_t kind;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!p)
        return SHOAL_OK;
    shoal_status_t st = shoal_cuda_mem_enter(p, "mem_free", &s, &kind);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuMemFree(dptr(p));
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuMemFree", r);
}

/* Portable: every context may use it, not only the one current here;
 * mapped: it has a device address, which stream memory operations and
 * the wait kernel need (flag_write, flag_wait). */
shoal_status_t shoal_cuda_host_alloc(size_t bytes, void **p_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    void *p;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (bytes == 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "host_alloc: 0 bytes");
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    CUresult r =
        cu->cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    shoal_cuda_leave(&s);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuMemHostAlloc", r);
    *p_p = p;
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_host_free(void *p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    if (!p)
        return SHOAL_OK;
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuMemFreeHost(p);
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuMemFreeHost", r);
}
