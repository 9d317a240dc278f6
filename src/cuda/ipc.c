/* The CUDA module's exports of device memory to other processes of the
 * host, in the two forms the driver has:
 * - cuMemAlloc memory by a CUipcMemHandle (cuIpcGetMemHandle);
 * - memory made with cuMemCreate and mapped with cuMemMap (the virtual
 *   memory API: ncclMemAlloc's kind, PyTorch's expandable segments),
 *   which has no such handle, by a POSIX file descriptor
 *   (cuMemExportToShareableHandle; the allocation must have been created
 *   with that handle type allowed). A descriptor does not travel in
 *   bytes: the export names the exporter's process and descriptor, and
 *   the opener takes a copy of it with pidfd_getfd (which needs the same
 *   permission as reading the exporter's memory, as shm's CMA does). The
 *   exporter keeps its descriptor until ipc_put.
 * CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE tells them apart.
 *
 * shoal_dev_ipc_t's 96 bytes, in the host's byte order (both processes
 * share the host):
 *    0..63  what names the allocation: the driver's CUipcMemHandle; or,
 *           for a descriptor export, int32 pid, int32 0, uint64 the
 *           allocation's CU_POINTER_ATTRIBUTE_BUFFER_ID (never reused in
 *           the process), zeros
 *   64..71  uint64: offset of the exported pointer from the base
 *   72..79  uint64: bytes from the base (a descriptor export: the mapped
 *           range that holds the pointer, which is taken to map its
 *           allocation from the allocation's start, as ncclMemAlloc and
 *           PyTorch map)
 *   80..83  uint32: SHOAL_CUDA_IPC_MAGIC or SHOAL_CUDA_FD_MAGIC, which
 *           tell the forms apart and a CUDA export from stray bytes
 *   84..87  uint32: SHOAL_CUDA_IPC_VERSION of this layout
 *   88..91  int32: a descriptor export's descriptor, in the exporter
 *   92..95  zero
 * ipc_open returns the base; the opener adds the offset itself, since one
 * mapping of an allocation serves every pointer into it. */
#include "module.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct {
    union {
        CUipcMemHandle handle;
        struct {
            int32_t pid;
            int32_t zero;
            uint64_t buffer_id;
        } fd;
    } name;
    uint64_t offset;
    uint64_t size;
    uint32_t magic;
    uint32_t version;
    int32_t fd;
    unsigned char zero[4];
} cuda_ipc_t;

#define SHOAL_CUDA_IPC_MAGIC 0x43554441u /* "CUDA" */
#define SHOAL_CUDA_FD_MAGIC 0x4355464Du  /* "CUFM" */
#define SHOAL_CUDA_IPC_VERSION 1u

_Static_assert(sizeof(cuda_ipc_t) == SHOAL_DEV_IPC_BYTES, "shoal_dev_ipc_t layout");
_Static_assert(offsetof(cuda_ipc_t, offset) == 64, "shoal_dev_ipc_t layout");
_Static_assert(offsetof(cuda_ipc_t, magic) == 80, "shoal_dev_ipc_t layout");
_Static_assert(offsetof(cuda_ipc_t, fd) == 88, "shoal_dev_ipc_t layout");

/* A peer's descriptor export mapped here: what ipc_close undoes. */
typedef struct fd_map {
    struct fd_map *next;
    CUdeviceptr va;
    size_t size;
    CUmemGenericAllocationHandle alloc;
} fd_map_t;

/* fd_maps: those open; fd_dead: those that failed after mapping, left
 * for the next ipc_close to undo. */
static pthread_mutex_t fd_maps_lock = PTHREAD_MUTEX_INITIALIZER;
static fd_map_t *fd_maps, *fd_dead;

/* Undo m's mapping and free m; the first failure, or CUDA_SUCCESS. */
static CUresult fd_unmap(const shoal_cu_t *cu, fd_map_t *m, const char **fn_p)
{
    CUresult r = cu->cuMemUnmap(m->va, m->size);
    CUresult r2 = cu->cuMemAddressFree(m->va, m->size);
    CUresult r3 = cu->cuMemRelease(m->alloc);
    *fn_p = r != CUDA_SUCCESS ? "cuMemUnmap" : r2 != CUDA_SUCCESS ? "cuMemAddressFree"
                                                                  : "cuMemRelease";
    free(m);
    return r != CUDA_SUCCESS ? r : r2 != CUDA_SUCCESS ? r2 : r3;
}

/* Whether the allocation at base can take a CUipcMemHandle, and its
 * process-wide id. A driver that does not know the attribute has only
 * that kind of device memory. */
static void ipc_kind(const shoal_cu_t *cu, CUdeviceptr base, int *legacy_p, uint64_t *id_p)
{
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                    CU_POINTER_ATTRIBUTE_BUFFER_ID};
    uint64_t legacy = 0, id = 0; /* a boolean of unspecified width: zeroed, wide enough */
    void *data[2] = {&legacy, &id};
    if (cu->cuPointerGetAttributes(2, attrs, data, base) != CUDA_SUCCESS)
        legacy = 1;
    *legacy_p = legacy != 0;
    *id_p = id;
}

/* The descriptor of the allocation mapped at base, exported. */
static shoal_status_t fd_export(const shoal_cu_t *cu, CUdeviceptr base, uint64_t id,
                                cuda_ipc_t *ipc)
{
    CUmemGenericAllocationHandle alloc;
    int fd = -1;
    CUresult r = cu->cuMemRetainAllocationHandle(&alloc, (void *)(uintptr_t)base);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuMemRetainAllocationHandle", r);
    r = cu->cuMemExportToShareableHandle(&fd, alloc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    cu->cuMemRelease(alloc); /* the retain's reference */
    if (r != CUDA_SUCCESS)
        return shoal_cuda_failf(shoal_cu_fail("cuMemExportToShareableHandle", r),
                                "ipc_get: %s (was the allocation made with "
                                "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR allowed?)",
                                shoal_cuda_why());
    ipc->name.fd.pid = (int32_t)getpid();
    ipc->name.fd.buffer_id = id;
    ipc->fd = fd;
    ipc->magic = SHOAL_CUDA_FD_MAGIC;
    return SHOAL_OK;
}

/* The driver exports whole allocations by their base, so the export
 * carries where p sits in it. Managed and pinned memory have no export. */
shoal_status_t shoal_cuda_ipc_get(const void *p, shoal_dev_ipc_t *h_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    shoal_dev_mem_t kind;
    cuda_ipc_t ipc;
    CUdeviceptr base, d = (CUdeviceptr)(uintptr_t)p;
    size_t size;
    int legacy;
    uint64_t id;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_mem_enter(p, "ipc_get", &s, &kind);
    if (st != SHOAL_OK)
        return st;
    if (kind != SHOAL_DEV_MEM_DEVICE) {
        st = shoal_cuda_failf(SHOAL_ERR_INVALID_ARG, "ipc_get: %p is %s memory, not device memory",
                              p, kind == SHOAL_DEV_MEM_MANAGED ? "managed" : "pinned host");
        goto out_leave;
    }
    memset(&ipc, 0, sizeof(ipc));
    CUresult r = cu->cuMemGetAddressRange(&base, &size, d);
    if (r != CUDA_SUCCESS) {
        st = shoal_cu_fail("cuMemGetAddressRange", r);
        goto out_leave;
    }
    ipc_kind(cu, base, &legacy, &id);
    if (legacy) {
        r = cu->cuIpcGetMemHandle(&ipc.name.handle, base);
        if (r != CUDA_SUCCESS) {
            st = shoal_cu_fail("cuIpcGetMemHandle", r);
            goto out_leave;
        }
        ipc.magic = SHOAL_CUDA_IPC_MAGIC;
    } else if (id == 0) {
        /* Without its id the cache could take a new allocation at the same
         * place for the old one: no export, the call stages. */
        st = shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "ipc_get: the driver gives no buffer id "
                              "for %p", p);
        goto out_leave;
    } else {
        st = fd_export(cu, base, id, &ipc);
        if (st != SHOAL_OK)
            goto out_leave;
    }
    ipc.offset = (uint64_t)(d - base);
    ipc.size = (uint64_t)size;
    ipc.version = SHOAL_CUDA_IPC_VERSION;
    memcpy(h_p->bytes, &ipc, sizeof(ipc));
out_leave:
    shoal_cuda_leave(&s);
    return st;
}

/* Only this process's own descriptor exports hold anything. */
void shoal_cuda_ipc_put(const shoal_dev_ipc_t *h)
{
    cuda_ipc_t ipc;
    memcpy(&ipc, h->bytes, sizeof(ipc));
    if (ipc.magic == SHOAL_CUDA_FD_MAGIC && ipc.version == SHOAL_CUDA_IPC_VERSION &&
        ipc.name.fd.pid == (int32_t)getpid() && ipc.fd >= 0)
        close(ipc.fd);
}

/* A copy of descriptor fd of process pid, or -1 with the message set. */
static int fd_take(int32_t pid, int32_t fd)
{
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0) {
        shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "ipc_open: pidfd_open of process %d: %s",
                         (int)pid, strerror(errno));
        return -1;
    }
    int mine = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
    int err = errno;
    close(pidfd);
    if (mine < 0)
        shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "ipc_open: pidfd_getfd of descriptor %d of "
                         "process %d: %s%s", (int)fd, (int)pid, strerror(err),
                         err == EPERM ? " (this process may not trace it)" : "");
    return mine;
}

/* Record a mapping on *list (fd_maps or fd_dead). */
static void fd_keep(fd_map_t **list, fd_map_t *m, CUdeviceptr va, size_t size,
                    CUmemGenericAllocationHandle alloc)
{
    m->va = va;
    m->size = size;
    m->alloc = alloc;
    pthread_mutex_lock(&fd_maps_lock);
    m->next = *list;
    *list = m;
    pthread_mutex_unlock(&fd_maps_lock);
}

/* The current context's device, once it is known to reach the device
 * that holds alloc. Asked before anything is mapped: undoing a mapping
 * may wait for the device's streams, one of which waits for this very
 * call. */
static shoal_status_t fd_reachable(const shoal_cu_t *cu, CUmemGenericAllocationHandle alloc,
                                   CUdevice *dev_p)
{
    CUmemAllocationProp prop;
    CUdevice owner;
    int can = 1;
    CUresult r = cu->cuCtxGetDevice(dev_p);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuCtxGetDevice", r);
    r = cu->cuMemGetAllocationPropertiesFromHandle(&prop, alloc);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuMemGetAllocationPropertiesFromHandle", r);
    if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return SHOAL_OK;
    r = cu->cuDeviceGet(&owner, prop.location.id);
    if (r != CUDA_SUCCESS)
        return shoal_cu_fail("cuDeviceGet", r);
    if (owner != *dev_p && (r = cu->cuDeviceCanAccessPeer(&can, *dev_p, owner)) != CUDA_SUCCESS)
        return shoal_cu_fail("cuDeviceCanAccessPeer", r);
    if (!can)
        return shoal_cuda_failf(SHOAL_ERR_UNSUPPORTED, "ipc_open: device %d has no peer access "
                                "to device %d, which holds the allocation", (int)*dev_p,
                                prop.location.id);
    return SHOAL_OK;
}

/* Map a peer's descriptor export into the current context's device. */
static shoal_status_t fd_open(const shoal_cu_t *cu, const cuda_ipc_t *ipc, CUdeviceptr *base_p)
{
    CUmemGenericAllocationHandle alloc;
    CUdeviceptr va = 0;
    CUdevice dev;
    fd_map_t *m = calloc(1, sizeof(*m));
    if (!m)
        return shoal_cuda_failf(SHOAL_ERR_NO_MEMORY, "ipc_open: no memory");
    int fd = fd_take(ipc->name.fd.pid, ipc->fd);
    if (fd < 0) {
        free(m);
        return SHOAL_ERR_UNSUPPORTED;
    }
    CUresult r = cu->cuMemImportFromShareableHandle(&alloc, (void *)(uintptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd); /* the handle holds the allocation now */
    if (r != CUDA_SUCCESS) {
        free(m);
        return shoal_cu_fail("cuMemImportFromShareableHandle", r);
    }
    shoal_status_t st = fd_reachable(cu, alloc, &dev);
    const char *fn = "cuMemAddressReserve";
    if (st == SHOAL_OK && (r = cu->cuMemAddressReserve(&va, ipc->size, 0, 0, 0)) == CUDA_SUCCESS) {
        fn = "cuMemMap";
        r = cu->cuMemMap(va, ipc->size, 0, alloc, 0);
        if (r != CUDA_SUCCESS)
            cu->cuMemAddressFree(va, ipc->size);
    }
    if (st == SHOAL_OK && r != CUDA_SUCCESS)
        st = shoal_cu_fail(fn, r);
    if (st != SHOAL_OK) {
        cu->cuMemRelease(alloc);
        free(m);
        return st;
    }
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = cu->cuMemSetAccess(va, ipc->size, &access, 1);
    if (r != CUDA_SUCCESS) {
        /* Undone by the next ipc_close, when no stream waits. */
        fd_keep(&fd_dead, m, va, ipc->size, alloc);
        return shoal_cu_fail("cuMemSetAccess", r);
    }
    fd_keep(&fd_maps, m, va, ipc->size, alloc);
    *base_p = va;
    return SHOAL_OK;
}

/* Opened into the thread's current context (device 0's primary one when
 * it has none); peer access to the exporting device is enabled on demand
 * (a CUipcMemHandle) or asked for (a descriptor). The mapping is closed
 * with ipc_close from a thread of the same context. */
shoal_status_t shoal_cuda_ipc_open(const shoal_dev_ipc_t *h, void **p_p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    cuda_ipc_t ipc;
    CUdeviceptr base;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    memcpy(&ipc, h->bytes, sizeof(ipc));
    if ((ipc.magic != SHOAL_CUDA_IPC_MAGIC && ipc.magic != SHOAL_CUDA_FD_MAGIC) ||
        ipc.version != SHOAL_CUDA_IPC_VERSION || ipc.size == 0)
        return shoal_cuda_failf(SHOAL_ERR_INVALID_ARG,
                                "ipc_open: not a CUDA export of this layout (magic %#x version %u)",
                                ipc.magic, ipc.version);
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    if (ipc.magic == SHOAL_CUDA_FD_MAGIC) {
        st = fd_open(cu, &ipc, &base);
    } else {
        CUresult r =
            cu->cuIpcOpenMemHandle(&base, ipc.name.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        if (r != CUDA_SUCCESS)
            st = shoal_cu_fail("cuIpcOpenMemHandle", r);
    }
    shoal_cuda_leave(&s);
    if (st == SHOAL_OK)
        *p_p = (void *)(uintptr_t)base;
    return st;
}

shoal_status_t shoal_cuda_ipc_close(void *p)
{
    const shoal_cu_t *cu = shoal_cuda_driver();
    shoal_cuda_scope_t s;
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
    if (!cu)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_status_t st = shoal_cuda_enter_any(&s);
    if (st != SHOAL_OK)
        return st;
    pthread_mutex_lock(&fd_maps_lock);
    fd_map_t **pp = &fd_maps;
    while (*pp && (*pp)->va != d)
        pp = &(*pp)->next;
    fd_map_t *m = *pp, *dead = fd_dead;
    if (m)
        *pp = m->next;
    fd_dead = NULL;
    pthread_mutex_unlock(&fd_maps_lock);
    const char *fn, *ignored;
    while (dead) {
        fd_map_t *next = dead->next;
        fd_unmap(cu, dead, &ignored);
        dead = next;
    }
    CUresult r;
    if (m) {
        r = fd_unmap(cu, m, &fn);
    } else {
        fn = "cuIpcCloseMemHandle";
        r = cu->cuIpcCloseMemHandle(d);
    }
    shoal_cuda_leave(&s);
    return r == CUDA_SUCCESS ? SHOAL_OK : shoal_cu_fail(fn, r);
}
