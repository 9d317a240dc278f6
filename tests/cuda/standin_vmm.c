/* The virtual memory API of the CUDA driver stand-in (cuMemCreate,
 * cuMemMap and the rest), as ncclMemAlloc and PyTorch's expandable
 * segments use it.
 *
 * A physical allocation is a memfd of its own, named for its device; an
 * address range reserved by cuMemAddressReserve is an inaccessible
 * anonymous mapping; cuMemMap maps the memfd over part of such a range,
 * still inaccessible until cuMemSetAccess opens it (code that forgets to
 * ask for access faults here, as it does on a GPU) and records the
 * mapping in the table of allocations as device memory of the
 * allocation's device. Access from another device is refused without
 * peer access (SHOAL_STANDIN_NO_P2P=1). An export to a POSIX file
 * descriptor is a new descriptor of the memfd; an import accepts only
 * such a descriptor, and reads the device from its name. */
#include "standin.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The granularity of sizes and offsets: a GPU's large page. */
#define STANDIN_VMM_GRANULE ((size_t)2 << 20)
#define STANDIN_VMM_NAME "shoal-standin-vmm-"

/* What fresh physical memory holds (as cuMemAlloc's, standin_mem.c). */
#define STANDIN_VMM_FRESH 0xcb

struct standin_phys {
    uint32_t tag;
    int fd;
    size_t size;
    int device;
    unsigned handle_types; /* CUmemAllocationHandleType bits it may be exported as */
    atomic_int refs;       /* cuMemCreate's or the import's, one per mapping, retains */
};

/* Reserved ranges, under the lock. */
typedef struct standin_range {
    struct standin_range *next;
    uintptr_t base;
    size_t size;
} standin_range_t;

static pthread_mutex_t standin_vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static standin_range_t *standin_ranges;
static atomic_ulong standin_vmm_imported;

unsigned long shoal_standin_vmm_imports(void)
{
    return atomic_load_explicit(&standin_vmm_imported, memory_order_relaxed);
}

static struct standin_phys *standin_phys_of(CUmemGenericAllocationHandle h)
{
    struct standin_phys *ph = (struct standin_phys *)(uintptr_t)h;
    return ph != NULL && ph->tag == STANDIN_TAG_PHYS ? ph : NULL;
}

static void standin_phys_put(struct standin_phys *ph)
{
    if (atomic_fetch_sub_explicit(&ph->refs, 1, memory_order_acq_rel) != 1)
        return;
    ph->tag = STANDIN_TAG_DEAD;
    close(ph->fd);
    free(ph);
}

static struct standin_phys *standin_phys_new(int fd, size_t size, int device, unsigned types)
{
    struct standin_phys *ph = calloc(1, sizeof(*ph));
    if (ph == NULL)
        return NULL;
    ph->tag = STANDIN_TAG_PHYS;
    ph->fd = fd;
    ph->size = size;
    ph->device = device;
    ph->handle_types = types;
    atomic_init(&ph->refs, 1);
    return ph;
}

static bool standin_granular(size_t v)
{
    return v % STANDIN_VMM_GRANULE == 0;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (granularity == NULL || prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = STANDIN_VMM_GRANULE;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    char name[96];
    void *p;
    int fd;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (handle == NULL || prop == NULL || flags != 0 || size == 0 || !standin_granular(size) ||
        prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->location.id < 0 || prop->location.id >= standin_config.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, sizeof(name), STANDIN_VMM_NAME "%d-%ld-%llu", prop->location.id,
             (long)getpid(), (unsigned long long)standin_mem_next_id());
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        goto err;
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto err;
    memset(p, STANDIN_VMM_FRESH, size);
    munmap(p, size);
    struct standin_phys *ph = standin_phys_new(fd, size, prop->location.id,
                                               (unsigned)prop->requestedHandleTypes);
    if (ph == NULL)
        goto err;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
err:
    if (fd >= 0)
        close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct standin_phys *ph = standin_phys_of(handle);
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    standin_phys_put(ph);
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    struct standin_phys *ph = standin_phys_of(handle);
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ph == NULL || prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = (CUmemAllocationHandleType)ph->handle_types;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = ph->device;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    standin_range_t *r;
    void *p;

    (void)alignment; /* every reservation is granule-aligned enough for the stand-in */
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ptr == NULL || size == 0 || !standin_granular(size) || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        munmap(p, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->size = size;
    pthread_mutex_lock(&standin_vmm_lock);
    r->next = standin_ranges;
    standin_ranges = r;
    pthread_mutex_unlock(&standin_vmm_lock);
    *ptr = (CUdeviceptr)r->base;
    return CUDA_SUCCESS;
}

/* Whether [p, p + size) lies in one reserved range. Caller holds the lock. */
static bool standin_reserved(uintptr_t p, size_t size)
{
    for (standin_range_t *r = standin_ranges; r != NULL; r = r->next) {
        if (p >= r->base && p - r->base <= r->size && size <= r->size - (p - r->base))
            return true;
    }
    return false;
}

/* Whether any mapping of the table overlaps [p, p + size). */
static bool standin_overlaps_mapping(uintptr_t p, size_t size)
{
    standin_alloc_t a;
    for (uintptr_t at = p; at < p + size; at += STANDIN_VMM_GRANULE) {
        if (standin_mem_find(at, &a))
            return true;
    }
    return false;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    standin_range_t **link, *r;
    CUresult res = CUDA_SUCCESS;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&standin_vmm_lock);
    for (link = &standin_ranges; *link != NULL; link = &(*link)->next) {
        if ((*link)->base == (uintptr_t)ptr && (*link)->size == size)
            break;
    }
    r = *link;
    if (r == NULL || standin_overlaps_mapping(r->base, r->size)) {
        res = CUDA_ERROR_INVALID_VALUE; /* unknown, or still mapped */
    } else {
        *link = r->next;
        munmap((void *)r->base, r->size);
        free(r);
    }
    pthread_mutex_unlock(&standin_vmm_lock);
    return res;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct standin_phys *ph = standin_phys_of(handle);
    uintptr_t p = (uintptr_t)ptr;
    standin_alloc_t a = {0};
    CUresult res;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ph == NULL || flags != 0 || size == 0 || !standin_granular(size) ||
        !standin_granular(offset) || offset > ph->size || size > ph->size - offset)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&standin_vmm_lock);
    if (!standin_reserved(p, size) || standin_overlaps_mapping(p, size)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out_unlock;
    }
    if (mmap((void *)p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) ==
        MAP_FAILED) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out_unlock;
    }
    a.base = p;
    a.size = size;
    a.map_size = size;
    a.kind = STANDIN_MEM_DEVICE;
    a.device = ph->device;
    a.ctx = standin_ctx_of_device(ph->device);
    a.fd = -1;
    a.id = standin_mem_next_id();
    a.phys = ph;
    res = standin_mem_insert(&a);
    if (res == CUDA_SUCCESS)
        atomic_fetch_add_explicit(&ph->refs, 1, memory_order_relaxed);
    else
        mmap((void *)p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0);
out_unlock:
    pthread_mutex_unlock(&standin_vmm_lock);
    return res;
}

/* Queued work that names the mapping runs first, as for cuMemFree. */
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    standin_stream_sync_all(NULL);
    pthread_mutex_lock(&standin_vmm_lock);
    if (!standin_mem_find((uintptr_t)ptr, &a) || a.phys == NULL || a.base != (uintptr_t)ptr ||
        a.size != size || !standin_mem_remove(a.base, 1u << STANDIN_MEM_DEVICE, false, &a)) {
        pthread_mutex_unlock(&standin_vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* The range stays reserved. */
    mmap((void *)a.base, a.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
         -1, 0);
    pthread_mutex_unlock(&standin_vmm_lock);
    standin_phys_put(a.phys);
    return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    uintptr_t p = (uintptr_t)ptr;
    int prot = PROT_NONE;
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (desc == NULL || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Every granule of the range must be mapped. */
    for (uintptr_t at = p; at < p + size; at += STANDIN_VMM_GRANULE) {
        if (!standin_mem_find(at, &a) || a.phys == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t i = 0; i < count; i++) {
            if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
                desc[i].location.id < 0 || desc[i].location.id >= standin_config.devices)
                return CUDA_ERROR_INVALID_DEVICE;
            if (!standin_config.p2p && desc[i].location.id != a.device &&
                desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
                return CUDA_ERROR_INVALID_DEVICE;
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE)
            prot = PROT_READ;
    }
    return mprotect((void *)p, size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (handle == NULL || !standin_mem_find((uintptr_t)addr, &a) || a.phys == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_fetch_add_explicit(&a.phys->refs, 1, memory_order_relaxed);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)a.phys;
    return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
    struct standin_phys *ph = standin_phys_of(handle);
    int fd;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ph == NULL || shareableHandle == NULL || flags != 0 ||
        handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(ph->handle_types & (unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_NOT_PERMITTED;
    fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    int fd = (int)(intptr_t)osHandle, device, mine;
    char target[160];
    struct stat st;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (handle == NULL || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_fd_name(fd, target, sizeof(target)) ||
        sscanf(target, "/memfd:" STANDIN_VMM_NAME "%d-", &device) != 1 || device < 0 ||
        device >= standin_config.devices || fstat(fd, &st) != 0 || st.st_size <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (mine < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct standin_phys *ph =
        standin_phys_new(mine, (size_t)st.st_size, device,
                         (unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (ph == NULL) {
        close(mine);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_fetch_add_explicit(&standin_vmm_imported, 1, memory_order_relaxed);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}
