/* Memory of the CUDA driver stand-in: allocations, the table of them, the
 * pointer queries answered from it, and the synchronous copies.
 *
 * Device memory is an ordinary shared mapping of a memfd of its own, so a
 * peer process can map the same pages by IPC (standin_ipc.c); the host
 * can read and write it, which a real GPU's memory does not allow.
 * Pinned and managed memory are anonymous mappings. One table, under one
 * lock, records every allocation; lookups copy the entry out so no
 * pointer into the table outlives the lock. */
#include "standin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What fresh device memory holds: not zeros, so code that reads device
 * memory before writing it gets visibly wrong numbers. */
#define STANDIN_FRESH_BYTE 0xcb

static pthread_mutex_t standin_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static standin_alloc_t *standin_mem_table;
static size_t standin_mem_count, standin_mem_cap;
static atomic_ulong standin_mem_ids;

uint64_t standin_mem_next_id(void)
{
    return (uint64_t)atomic_fetch_add_explicit(&standin_mem_ids, 1, memory_order_relaxed) + 1;
}

bool standin_fd_name(int fd, char *buf, size_t len)
{
    char link[64];
    ssize_t n;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, buf, len - 1);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* Caller holds standin_mem_lock. */
static standin_alloc_t *standin_mem_lookup(uintptr_t p)
{
    for (size_t i = 0; i < standin_mem_count; i++) {
        standin_alloc_t *a = &standin_mem_table[i];
        if (p >= a->base && p - a->base < a->size)
            return a;
    }
    return NULL;
}

bool standin_mem_find(uintptr_t p, standin_alloc_t *a)
{
    standin_alloc_t *hit;

    pthread_mutex_lock(&standin_mem_lock);
    hit = standin_mem_lookup(p);
    if (hit != NULL)
        *a = *hit;
    pthread_mutex_unlock(&standin_mem_lock);
    return hit != NULL;
}

CUresult standin_mem_insert(const standin_alloc_t *a)
{
    CUresult res = CUDA_SUCCESS;

    pthread_mutex_lock(&standin_mem_lock);
    if (standin_mem_count == standin_mem_cap) {
        size_t cap = standin_mem_cap ? 2 * standin_mem_cap : 64;
        standin_alloc_t *t = realloc(standin_mem_table, cap * sizeof(*t));
        if (t == NULL) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out_unlock;
        }
        standin_mem_table = t;
        standin_mem_cap = cap;
    }
    standin_mem_table[standin_mem_count++] = *a;
out_unlock:
    pthread_mutex_unlock(&standin_mem_lock);
    return res;
}

bool standin_mem_remove(uintptr_t base, unsigned kinds, bool imported, standin_alloc_t *a)
{
    bool found = false;

    pthread_mutex_lock(&standin_mem_lock);
    for (size_t i = 0; i < standin_mem_count; i++) {
        standin_alloc_t *e = &standin_mem_table[i];
        if (e->base != base || !(kinds & (1u << e->kind)) || e->imported != imported)
            continue;
        *a = *e;
        standin_mem_table[i] = standin_mem_table[--standin_mem_count];
        found = true;
        break;
    }
    pthread_mutex_unlock(&standin_mem_lock);
    return found;
}

/* Whether every page of [p, p + bytes) is mapped: mincore fails with
 * ENOMEM on a page that is not. It says nothing of protection, which is
 * enough to catch freed and wild pointers. */
static bool standin_host_mapped(uintptr_t p, size_t bytes)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[64];
    uintptr_t at = p & ~(page - 1), end = p + bytes;

    while (at < end) {
        size_t len = end - at < 64 * page ? end - at : 64 * page;
        if (mincore((void *)at, len, vec) != 0)
            return false;
        at += (len + page - 1) & ~(page - 1);
    }
    return true;
}

bool standin_mem_reachable(const void *p, size_t bytes, bool device_only)
{
    uintptr_t u = (uintptr_t)p;
    standin_alloc_t a;

    if (bytes == 0)
        return true;
    if (p == NULL || u + bytes < u)
        return false;
    if (standin_mem_find(u, &a))
        return bytes <= a.size - (u - a.base);
    return !device_only && standin_host_mapped(u, bytes);
}

static size_t standin_page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

/* Device memory: a memfd per allocation, named for the process and the
 * allocation's id so that an importer can tell a live export from a
 * descriptor number that was reused (standin_ipc.c). */
static CUresult standin_map_device(size_t bytes, standin_alloc_t *a)
{
    char name[64];
    void *p;
    int fd;

    a->id = standin_mem_next_id();
    snprintf(name, sizeof(name), "shoal-standin-%ld-%llu", (long)getpid(),
             (unsigned long long)a->id);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        goto err_log;
    if (ftruncate(fd, (off_t)a->map_size) != 0)
        goto err_close_fd;
    p = mmap(NULL, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto err_close_fd;
    memset(p, STANDIN_FRESH_BYTE, bytes);
    a->base = (uintptr_t)p;
    a->fd = fd;
    return CUDA_SUCCESS;

err_close_fd:
    close(fd);
err_log:
    fprintf(stderr, "libcuda_standin: device allocation of %zu bytes: %s\n", bytes,
            strerror(errno));
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult standin_alloc(standin_mem_kind_t kind, size_t bytes, void **p_p)
{
    CUcontext ctx = standin_ctx_current();
    standin_alloc_t a = {0};
    CUresult res;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (p_p == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    a.size = bytes;
    a.map_size = standin_page_round(bytes);
    a.kind = kind;
    a.device = ctx->device;
    a.ctx = ctx;
    a.fd = -1;
    if (kind == STANDIN_MEM_DEVICE) {
        res = standin_map_device(bytes, &a);
        if (res != CUDA_SUCCESS)
            return res;
    } else {
        void *p = mmap(NULL, a.map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return CUDA_ERROR_OUT_OF_MEMORY;
        a.base = (uintptr_t)p;
        a.id = standin_mem_next_id();
    }
    res = standin_mem_insert(&a);
    if (res != CUDA_SUCCESS)
        goto err_unmap;
    *p_p = (void *)a.base;
    return CUDA_SUCCESS;

err_unmap:
    munmap((void *)a.base, a.map_size);
    if (a.fd >= 0)
        close(a.fd);
    return res;
}

/* Frees the allocation at base if it is of one of kinds. The driver may
 * synchronise here, and the stand-in does, with every stream: queued work
 * that still names the memory then runs before the pages go away instead
 * of crashing the worker. */
static CUresult standin_free(uintptr_t base, unsigned kinds)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (base == 0)
        return CUDA_SUCCESS;
    standin_stream_sync_all(NULL);
    /* cuMemMap's ranges go with cuMemUnmap (standin_vmm.c). */
    if (standin_mem_find(base, &a) && a.phys)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_mem_remove(base, kinds, false, &a))
        return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)a.base, a.map_size);
    if (a.fd >= 0)
        close(a.fd);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    return standin_alloc(STANDIN_MEM_DEVICE, bytesize, (void **)dptr);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return standin_alloc(STANDIN_MEM_MANAGED, bytesize, (void **)dptr);
}

/* Every flag is accepted and none changes anything: the memory is
 * mapped into every device's address space at the same address anyway. */
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return standin_alloc(STANDIN_MEM_PINNED, bytesize, pp);
}

CUresult cuMemFree(CUdeviceptr dptr)
{
    return standin_free((uintptr_t)dptr, 1u << STANDIN_MEM_DEVICE | 1u << STANDIN_MEM_MANAGED);
}

CUresult cuMemFreeHost(void *p)
{
    if (p == NULL)
        return standin_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return standin_free((uintptr_t)p, 1u << STANDIN_MEM_PINNED);
}

/* Unified addressing: the device sees pinned memory at its host address. */
CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pdptr == NULL || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_mem_find((uintptr_t)p, &a) || a.kind != STANDIN_MEM_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!standin_mem_find((uintptr_t)dptr, &a))
        return CUDA_ERROR_NOT_FOUND;
    if (pbase != NULL)
        *pbase = (CUdeviceptr)a.base;
    if (psize != NULL)
        *psize = a.size;
    return CUDA_SUCCESS;
}

/* One attribute of a known allocation (a is NULL for memory the table
 * does not know: cuPointerGetAttributes' default values). Booleans are
 * written as unsigned int, the size callers of the driver pass. Device
 * memory has no host pointer: strict (cuPointerGetAttribute) says
 * CUDA_ERROR_INVALID_VALUE, as the driver does; otherwise NULL. */
static CUresult standin_pointer_attribute(void *data, CUpointer_attribute attr,
                                          const standin_alloc_t *a, uintptr_t p, bool strict)
{
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = a ? a->ctx : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = !a ? 0u
                                : a->kind == STANDIN_MEM_PINNED ? (unsigned)CU_MEMORYTYPE_HOST
                                                                : (unsigned)CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = a ? (CUdeviceptr)p : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (a && a->kind == STANDIN_MEM_DEVICE && strict)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = a && a->kind != STANDIN_MEM_DEVICE ? (void *)p : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned int *)data = a && a->kind == STANDIN_MEM_MANAGED;
        return CUDA_SUCCESS;
    /* Unknown memory names no device: -2, which the runtime also uses for
     * that, since 0 would name device 0. */
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = a ? a->device : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = a ? (CUdeviceptr)a->base : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = a ? a->size : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = a ? a->id : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = a != NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned int *)data = a && a->kind == STANDIN_MEM_DEVICE && !a->imported && !a->phys;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_mem_find((uintptr_t)ptr, &a))
        return CUDA_ERROR_INVALID_VALUE;
    return standin_pointer_attribute(data, attribute, &a, (uintptr_t)ptr, true);
}

/* Unlike cuPointerGetAttribute, memory the driver does not know is no
 * error: every attribute gets its empty value (memory type 0). */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    standin_alloc_t a;
    bool known;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (numAttributes == 0 || attributes == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    known = standin_mem_find((uintptr_t)ptr, &a);
    for (unsigned int i = 0; i < numAttributes; i++) {
        CUresult res;
        if (data[i] == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        res = standin_pointer_attribute(data[i], attributes[i], known ? &a : NULL,
                                        (uintptr_t)ptr, false);
        if (res != CUDA_SUCCESS)
            return res;
    }
    return CUDA_SUCCESS;
}

/* The synchronous copies and memset run at once on the calling thread,
 * after the legacy stream has drained: simpler than queueing them, and
 * the caller cannot tell the difference. A bad address is an invalid
 * argument here, not a fault, since no queued work met it. */
static CUresult standin_sync_prologue(void)
{
    CUcontext ctx;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    ctx = standin_ctx_current();
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    standin_stream_sync_legacy();
    return standin_ctx_fault(ctx);
}

static CUresult standin_sync_copy(void *dst, const void *src, size_t bytes, bool dst_device,
                                  bool src_device)
{
    CUresult res = standin_sync_prologue();

    if (res != CUDA_SUCCESS)
        return res;
    if (!standin_mem_reachable(dst, bytes, dst_device) ||
        !standin_mem_reachable(src, bytes, src_device))
        return CUDA_ERROR_INVALID_VALUE;
    /* memcpy, not memmove: overlapping copies are undefined on a GPU too,
     * and AddressSanitizer reports them. The same buffer is no overlap. */
    if (bytes > 0 && dst != src)
        memcpy(dst, src, bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return standin_sync_copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, ByteCount,
                             false, false);
}

CUresult cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return standin_sync_copy((void *)(uintptr_t)dstDevice, srcHost, ByteCount, true, false);
}

CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return standin_sync_copy(dstHost, (const void *)(uintptr_t)srcDevice, ByteCount, false,
                             true);
}

CUresult cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    CUresult res = standin_sync_prologue();

    if (res != CUDA_SUCCESS)
        return res;
    if (!standin_mem_reachable((void *)(uintptr_t)dstDevice, N, true))
        return CUDA_ERROR_INVALID_VALUE;
    if (N > 0)
        memset((void *)(uintptr_t)dstDevice, uc, N);
    return CUDA_SUCCESS;
}
