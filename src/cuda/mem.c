/* The CUDA module's memory entries: what a pointer is, device and pinned
 * allocations, and exporting device memory to other processes. */
#include "module.h"

#include <stddef.h>
#include <string.h>

/* shoal_dev_ipc_t's 96 bytes, in the host's byte order (both processes
 * share the host):
 *    0..63  the driver's CUipcMemHandle of the allocation's base
 *   64..71  uint64: offset of the exported pointer from that base
 *   72..79  uint64: bytes of the allocation, from its base
 *   80..83  uint32: SHOAL_CUDA_IPC_MAGIC, which tells a CUDA export from
 *           stray bytes
 *   84..87  uint32: SHOAL_CUDA_IPC_VERSION of this layout
 *   88..95  zero
 * ipc_open returns the base; the opener adds the offset itself, since one
 * mapping of an allocation serves every pointer into it. */
typedef struct {
    CUipcMemHandle handle;
    uint64_t offset;
    uint64_t size;
    uint32_t magic;
    uint32_t version;
    unsigned char zero[8];
} cuda_ipc_t;

#define SHOAL_CUDA_IPC_MAGIC 0x43554441u /* "CUDA" */
#define SHOAL_CUDA_IPC_VERSION 1u

_Static_assert(sizeof(cuda_ipc_t) == SHOAL_DEV_IPC_BYTES, "shoal_dev_ipc_t layout");
_Static_assert(offsetof(cuda_ipc_t, offset) == 64, "shoal_dev_ipc_t layout");
_Static_assert(offsetof(cuda_ipc_t, magic) == 80, "shoal_dev_ipc_t layout");

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
static shoal_status_t mem_enter(const void *p, const char *what, shoal_cuda_scope_t *s,
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
    shoal_status_t st = mem_enter(p, "extent", &s, &kind);
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
    shoal_status_t st = mem_enter(p, "mem_free", &s, &kind);
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

/* The driver exports whole allocations by their base, so the export
 * carries where p sits in it. Managed and pinned memory have no IPC
 * export. */
shoal_status_t shoal_cuda_ipc_get(const void *p, shoal_dev_ipc_t *h_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    shoal_dev_mem_t kind;
    cuda_ipc_t ipc;
    CUdeviceptr base;
    size_t size;
    CUresult r;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = mem_enter(p, "ipc_get", &s, &kind);
    if (st != SHOAL_OK)
        return st;
    if (kind != SHOAL_DEV_MEM_DEVICE) {
        st = shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "ipc_get: %p is %s memory, not device memory",
                              p, kind == SHOAL_DEV_MEM_MANAGED ? "managed" : "pinned host");
        goto out_leave;
    }
    memset(&ipc, 0, sizeof(ipc));
    r = cu->cuMemGetAddressRange(&base, &size, dptr(p));
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuMemGetAddressRange", r);
        goto out_leave;
    }
    r = cu->cuIpcGetMemHandle(&ipc.handle, base);
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuIpcGetMemHandle", r);
        goto out_leave;
    }
    ipc.offset = (uint64_t)(dptr(p) - base);
    ipc.size = (uint64_t)size;
    ipc.magic = SHOAL_CUDA_IPC_MAGIC;
    ipc.version = SHOAL_CUDA_IPC_VERSION;
    memcpy(h_p->bytes, &ipc, sizeof(ipc));
out_leave:
    shoal_cuda_leave(&s);
    return st;
}

/* Opened into the thread's current context (device 0's primary one when
 * it has none); peer access to the exporting device is enabled on demand.
 * The mapping is closed with ipc_close from a thread of the same
 * context. */
shoal_status_t shoal_cuda_ipc_open(const shoal_dev_ipc_t *h, void **p_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    cuda_ipc_t ipc;
    CUdeviceptr base;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    memcpy(&ipc, h->bytes, sizeof(ipc));
    if (ipc.magic != SHOAL_CUDA_IPC_MAGIC || ipc.version != SHOAL_CUDA_IPC_VERSION)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "ipc_open: not a CUDA export of this layout (magic %#x version %u)",
                                ipc.magic, ipc.version);
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuIpcOpenMemHandle(&base, ipc.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    shoal_cuda_leave(&s);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuIpcOpenMemHandle", r);
    *p_p = hptr(base);
    return SHOAL_OK;
}

shoal_status_t shoal_cuda_ipc_close(void *p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    CUresult r = cu->cuIpcCloseMemHandle(dptr(p));
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail("cuIpcCloseMemHandle", r);
}
