/* Memory through the door: ncclMemAlloc/Free (host pages here, as there is
 * no device), buffer registration and windows, both kept by shoal's
 * communicator for the transports that use registered memory. */
#include "door.h"

#include "base/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- ncclMemAlloc ---------------------------------------------------------- */

/* Blocks handed out, so that ncclMemFree can tell its own pointers (and
 * their length) from any other. */
typedef struct mem_block {
    struct mem_block *next;
    void *ptr;
    size_t len;
} mem_block_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_block_t *mem_blocks;

NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
    static const char what[] = "ncclMemAlloc";
    shoal_nccl_once();
    if (!ptr)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: ptr is NULL", what);
    if (size == 0) {
        *ptr = NULL;
        return ncclSuccess;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (size > SIZE_MAX - page)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: size %zu is too large", what,
                               size);
    size_t len = (size + page - 1) / page * page;
    mem_block_t *b = malloc(sizeof(*b));
    if (!b)
        return shoal_nccl_fail(NULL, ncclSystemError, "%s: out of memory", what);
    /* Whole pages of their own: page-aligned (as registration and windows
     * want) and returned to the system at once by ncclMemFree. */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(b);
        return shoal_nccl_fail(NULL, ncclSystemError, "%s: mmap of %zu bytes failed: %s", what,
                               len, strerror(errno));
    }
    b->ptr = p;
    b->len = len;
    pthread_mutex_lock(&mem_lock);
    b->next = mem_blocks;
    mem_blocks = b;
    pthread_mutex_unlock(&mem_lock);
    *ptr = p;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    shoal_nccl_once();
    if (!ptr)
        return ncclSuccess;
    mem_block_t *found = NULL;
    pthread_mutex_lock(&mem_lock);
    for (mem_block_t **pp = &mem_blocks; *pp; pp = &(*pp)->next) {
        if ((*pp)->ptr == ptr) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    if (!found)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclMemFree: %p was not returned by ncclMemAlloc (or was freed "
                               "already)", ptr);
    munmap(found->ptr, found->len);
    free(found);
    return ncclSuccess;
}

/* ---- registration ---------------------------------------------------------- */

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size,
         void **handle)
{
    static const char what[] = "ncclCommRegister";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (buff && size && !shoal_nccl_is_host(buff, size, 0))
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: buff %p (%zu bytes) is not host memory of this process "
                               "(this shoal has no CUDA support)", what, buff, size);
    return shoal_nccl_result(shoal_comm_register(sc, buff, size, handle));
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclCommDeregister", &sc);
    if (res != ncclSuccess)
        return res;
    return shoal_nccl_result(shoal_comm_deregister(sc, handle));
}

/* ---- windows ---------------------------------------------------------------- */

/* A window: a registration made by every rank together. The door keeps its
 * windows on the communicator so that destroy frees those left. */
struct ncclWindow_vidmem {
    struct ncclWindow_vidmem *next;
    void *reg;
    int flags;
};

/* What every rank tells the others about a window. */
typedef struct {
    uint64_t size;
    int64_t flags;
} win_info_t;

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size,
         ncclWindow_t *win, int winFlags)
{
    static const char what[] = "ncclCommWindowRegister";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    /* Arguments are checked after the exchange, so that a rank with a bad
     * one fails with the others instead of leaving them waiting. */
    int n = sc->nranks;
    win_info_t *all = calloc((size_t)n, sizeof(*all));
    if (!all)
        return shoal_nccl_fail(comm, ncclSystemError, "%s: out of memory", what);
    all[sc->rank] = (win_info_t){.size = size, .flags = winFlags};
    shoal_status_t s = shoal_allgather(&all[sc->rank], all, sizeof(*all), SHOAL_UINT8, sc);
    if (s != SHOAL_OK) {
        free(all);
        return shoal_nccl_result(s);
    }
    int symmetric_mismatch = -1, flags_mismatch = -1;
    for (int r = 0; r < n; r++) {
        if (all[r].flags != winFlags)
            flags_mismatch = r;
        else if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) && all[r].size != size)
            symmetric_mismatch = r;
    }
    uint64_t other_size = symmetric_mismatch >= 0 ? all[symmetric_mismatch].size : 0;
    free(all);
    if (!win)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: win is NULL", what);
    if (winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC))
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown winFlags 0x%x", what,
                               winFlags);
    if (flags_mismatch >= 0)
        return shoal_nccl_fail(comm, ncclInvalidUsage, "%s: rank %d passed other winFlags",
                               what, flags_mismatch);
    if (symmetric_mismatch >= 0)
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "%s: symmetric window of %zu bytes here but %llu on rank %d",
                               what, size, (unsigned long long)other_size, symmetric_mismatch);
    if (buff && size && !shoal_nccl_is_host(buff, size, 1))
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: buff %p (%zu bytes) is not host memory of this process "
                               "(this shoal has no CUDA support)", what, buff, size);
    struct ncclWindow_vidmem *w = calloc(1, sizeof(*w));
    if (!w)
        return shoal_nccl_fail(comm, ncclSystemError, "%s: out of memory", what);
    s = shoal_comm_register(sc, buff, size, &w->reg);
    if (s != SHOAL_OK) {
        free(w);
        return shoal_nccl_result(s);
    }
    w->flags = winFlags;
    pthread_mutex_lock(&comm->lock);
    w->next = comm->windows;
    comm->windows = w;
    pthread_mutex_unlock(&comm->lock);
    *win = w;
    return ncclSuccess;
}

/* Local: a rank may release its view of a window without the others. */
NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win)
{
    static const char what[] = "ncclCommWindowDeregister";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    struct ncclWindow_vidmem *found = NULL;
    pthread_mutex_lock(&comm->lock);
    for (struct ncclWindow_vidmem **pp = &comm->windows; win && *pp; pp = &(*pp)->next) {
        if (*pp == win) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&comm->lock);
    if (!found)
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: window %p is not a live window of this communicator", what,
                               (void *)win);
    shoal_status_t s = shoal_comm_deregister(sc, found->reg);
    free(found);
    return shoal_nccl_result(s);
}

void shoal_nccl_windows_free(struct ncclComm *comm)
{
    /* The registrations themselves leave with shoal's communicator. */
    while (comm->windows) {
        struct ncclWindow_vidmem *w = comm->windows;
        comm->windows = w->next;
        free(w);
    }
}
