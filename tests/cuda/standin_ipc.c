/* Interprocess memory handles of the CUDA driver stand-in.
 *
 * Device memory is a memfd per allocation (standin_mem.c), so a handle
 * names the exporting process, the descriptor number there, and the
 * allocation's id; the importer opens /proc/<pid>/fd/<fd>, which gives it
 * the same file, and maps it shared: both processes then see the same
 * pages, as two processes see the same GPU memory. Opening the descriptor
 * needs the same access as reading the exporter's /proc entries, which a
 * process of the same user has.
 *
 * The memfd's name carries the exporter's pid and the allocation's id,
 * and the importer checks it after opening: a descriptor number that was
 * freed and reused for other memory, or a pid reused by another process,
 * is refused instead of mapped. */
#include "standin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define STANDIN_IPC_MAGIC 0x53484950u /* "SHIP" */

/* The handle's bytes, in CUipcMemHandle's 64. */
typedef struct {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    int32_t device; /* the exporter's */
    uint64_t size;
    uint64_t offset; /* of the exported range in the file; 0 while every
                      * allocation has a memfd of its own */
    uint64_t id;
} standin_ipc_handle_t;

_Static_assert(sizeof(standin_ipc_handle_t) <= CU_IPC_HANDLE_SIZE,
               "the handle fits in CUipcMemHandle");

/* A peer's allocation mapped here. Opening the same handle again in the
 * process returns the same mapping and counts a reference, as the
 * driver does; the last close unmaps it. */
typedef struct standin_import {
    struct standin_import *next;
    pid_t pid;
    uint64_t id;
    uintptr_t base;
    int refs;
} standin_import_t;

/* Lock order: standin_ipc_lock, then the table's lock (standin_mem.c). */
static pthread_mutex_t standin_ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static standin_import_t *standin_imports;

unsigned long shoal_standin_ipc_open_count(void)
{
    unsigned long n = 0;

    pthread_mutex_lock(&standin_ipc_lock);
    for (standin_import_t *im = standin_imports; im != NULL; im = im->next)
        n++;
    pthread_mutex_unlock(&standin_ipc_lock);
    return n;
}

/* The handle describes the whole allocation that holds dptr, so an
 * interior pointer exports its allocation, and the importer adds the
 * offset it learned from cuMemGetAddressRange. Only cuMemAlloc memory
 * can be exported, and not memory that was itself imported (nor
 * cuMemMap's: standin_vmm.c). */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    standin_ipc_handle_t h = {0};
    standin_alloc_t a;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (pHandle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!standin_mem_find((uintptr_t)dptr, &a) || a.kind != STANDIN_MEM_DEVICE || a.imported ||
        a.phys)
        return CUDA_ERROR_INVALID_VALUE;
    h.magic = STANDIN_IPC_MAGIC;
    h.pid = (int32_t)getpid();
    h.fd = a.fd;
    h.device = a.device;
    h.size = a.size;
    h.offset = 0;
    h.id = a.id;
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &h, sizeof(h));
    return CUDA_SUCCESS;
}

/* Whether fd (ours) is the exporter's memfd for h: its name, as
 * standin_mem.c gives it, ends up in the link of /proc/self/fd. */
static bool standin_ipc_same_file(int fd, const standin_ipc_handle_t *h)
{
    char target[128], want[96];

    if (!standin_fd_name(fd, target, sizeof(target)))
        return false;
    snprintf(want, sizeof(want), "/memfd:shoal-standin-%ld-%llu ", (long)h->pid,
             (unsigned long long)h->id);
    return strncmp(target, want, strlen(want)) == 0;
}

/* Maps the peer's allocation and records it in the table as device memory
 * of the current context's device. */
static CUresult standin_ipc_map(const standin_ipc_handle_t *h, CUcontext ctx,
                                standin_import_t **im_p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    standin_alloc_t a = {0};
    standin_import_t *im;
    char path[64];
    struct stat st;
    CUresult res;
    void *p;
    int fd;

    snprintf(path, sizeof(path), "/proc/%ld/fd/%d", (long)h->pid, (int)h->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        /* Gone: the process exited or closed the memory. Refused: not
         * ours to open (another user, or /proc mounted without access). */
        res = errno == ENOENT || errno == ESRCH ? CUDA_ERROR_INVALID_HANDLE
                                                 : CUDA_ERROR_OPERATING_SYSTEM;
        fprintf(stderr, "libcuda_standin: cuIpcOpenMemHandle: open %s: %s\n", path,
                strerror(errno));
        return res;
    }
    if (!standin_ipc_same_file(fd, h)) {
        res = CUDA_ERROR_INVALID_HANDLE;
        goto err_close_fd;
    }
    a.size = h->size;
    a.map_size = (h->size + page - 1) / page * page;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < h->offset + a.map_size ||
        h->offset % page != 0) {
        res = CUDA_ERROR_INVALID_HANDLE;
        goto err_close_fd;
    }
    p = mmap(NULL, a.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)h->offset);
    if (p == MAP_FAILED) {
        res = CUDA_ERROR_MAP_FAILED;
        goto err_close_fd;
    }
    /* The mapping keeps the file; the descriptor is no longer needed. */
    close(fd);
    im = calloc(1, sizeof(*im));
    if (im == NULL) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto err_unmap;
    }
    a.base = (uintptr_t)p;
    a.kind = STANDIN_MEM_DEVICE;
    a.imported = true;
    a.device = ctx->device;
    a.ctx = ctx;
    a.fd = -1;
    a.id = standin_mem_next_id();
    res = standin_mem_insert(&a);
    if (res != CUDA_SUCCESS)
        goto err_free_import;
    im->pid = (pid_t)h->pid;
    im->id = h->id;
    im->base = a.base;
    im->refs = 1;
    *im_p = im;
    return CUDA_SUCCESS;

err_free_import:
    free(im);
err_unmap:
    munmap(p, a.map_size);
    return res;
err_close_fd:
    close(fd);
    return res;
}

CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUcontext ctx = standin_ctx_current();
    standin_ipc_handle_t h;
    standin_import_t *im;
    CUresult res = CUDA_SUCCESS;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (pdptr == NULL || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&h, handle.reserved, sizeof(h));
    if (h.magic != STANDIN_IPC_MAGIC || h.size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The driver refuses a process's own handle. */
    if (h.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT;
    /* Another device's memory needs peer access to it. */
    if (!standin_config.p2p && h.device != ctx->device)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    pthread_mutex_lock(&standin_ipc_lock);
    for (im = standin_imports; im != NULL; im = im->next) {
        if (im->pid == (pid_t)h.pid && im->id == h.id)
            break;
    }
    if (im != NULL) {
        im->refs++;
    } else {
        res = standin_ipc_map(&h, ctx, &im);
        if (res == CUDA_SUCCESS) {
            im->next = standin_imports;
            standin_imports = im;
        }
    }
    if (res == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)im->base;
    pthread_mutex_unlock(&standin_ipc_lock);
    return res;
}

/* Like cuMemFree, closing first lets queued work that names the mapping
 * finish, so no worker touches pages that are gone. */
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    standin_import_t **link, *im;
    standin_alloc_t a;
    CUresult res = CUDA_SUCCESS;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    standin_stream_sync_all(NULL);
    pthread_mutex_lock(&standin_ipc_lock);
    for (link = &standin_imports; *link != NULL; link = &(*link)->next) {
        if ((*link)->base == (uintptr_t)dptr)
            break;
    }
    im = *link;
    if (im == NULL) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out_unlock;
    }
    if (--im->refs > 0)
        goto out_unlock;
    *link = im->next;
    if (standin_mem_remove(im->base, 1u << STANDIN_MEM_DEVICE, true, &a))
        munmap((void *)a.base, a.map_size);
    free(im);
out_unlock:
    pthread_mutex_unlock(&standin_ipc_lock);
    return res;
}
