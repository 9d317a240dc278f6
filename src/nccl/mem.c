/* Memory through the door: ncclMemAlloc/Free (device memory in a process
 * that uses CUDA, else shareable host pages), buffer registration and windows, both kept by
 * shoal's communicator's registration cache for the transports. */
#include "door.h"

#include "base/dev.h"
#include "base/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- ncclMemAlloc ---------------------------------------------------------- */

/* Host memory here, as there is no device: shareable blocks of
 * shoal_mem_alloc (whole pages, page-aligned as registration and windows
 * want), which peers of this host write straight into when every rank's
 * buffers come from here. shoal_mem_free tells its own pointers from any
 * other and refuses those. */
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
    const shoal_dev_ops_t *dev = shoal_dev_if_driver();
    int cudev;
    if (dev && dev->device_of(NULL, &cudev) == SHOAL_OK) {
        /* A process that uses CUDA gets device memory of its current
         * device, as from NCCL. */
        if (dev->mem_alloc(cudev, size, ptr) != SHOAL_OK)
            return shoal_nccl_fail(NULL, ncclUnhandledCudaError, "%s: %zu bytes on device %d: "
                                   "%s", what, size, cudev, dev->why());
        return ncclSuccess;
    }
    shoal_status_t s = shoal_mem_alloc(size, ptr);
    if (s == SHOAL_ERR_INVALID_ARG)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: size %zu is too large", what,
                               size);
    if (s != SHOAL_OK)
        return shoal_nccl_fail(NULL, ncclSystemError, "%s: %zu bytes: %s", what, size,
                               shoal_status_string(s));
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
    shoal_nccl_once();
    if (!ptr)
        return ncclSuccess;
    const shoal_dev_ops_t *dev = shoal_dev_if_driver();
    if (dev && shoal_dev_kind(ptr) == SHOAL_DEV_MEM_DEVICE) {
        if (dev->mem_free(ptr) != SHOAL_OK)
            return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclMemFree: %p: %s", ptr,
                                   dev->why());
        return ncclSuccess;
    }
    if (shoal_mem_free(ptr) != SHOAL_OK)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclMemFree: %p was not returned by ncclMemAlloc (or was freed "
                               "already)", ptr);
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
    if (buff && size && !shoal_nccl_is_memory(buff, size, 0))
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: buff %p (%zu bytes) is neither host memory of this process "
                               "nor memory the CUDA driver knows (%s)", what, buff, size,
                               shoal_dev_why());
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
    /* A shoal window (shoal.h): registered for the collectives, and what
     * one-sided calls write into (rma.c). */
    shoal_win_t win;
    void *buff; /* the caller's, for ncclWinGetUserPtr */
    size_t size;
    int flags;
};

/* What every rank tells the others about a window. */
typedef struct {
    uint64_t size;
    int32_t flags;
    int32_t ok; /* its buffer is memory of its process, and win not NULL */
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
    int n = sc->team.nranks;
    win_info_t *all = calloc((size_t)n, sizeof(*all));
    if (!all)
        return shoal_nccl_fail(comm, ncclSystemError, "%s: out of memory", what);
    int ok = win && (!size || (buff && shoal_nccl_is_memory(buff, size, 1)));
    all[sc->team.rank] = (win_info_t){.size = size, .flags = winFlags, .ok = ok};
    shoal_status_t s = shoal_allgather(&all[sc->team.rank], all, sizeof(*all), SHOAL_UINT8, sc);
    if (s != SHOAL_OK) {
        free(all);
        return shoal_nccl_result(s);
    }
    int symmetric_mismatch = -1, flags_mismatch = -1, bad = -1;
    for (int r = 0; r < n; r++) {
        if (!all[r].ok && bad < 0)
            bad = r;
        if (all[r].flags != winFlags)
            flags_mismatch = r;
        else if ((winFlags & NCCL_WIN_COLL_SYMMETRIC) && all[r].size != size)
            symmetric_mismatch = r;
    }
    uint64_t other_size = symmetric_mismatch >= 0 ? all[symmetric_mismatch].size : 0;
    free(all);
    if (!win)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: win is NULL", what);
    if (!ok)
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: buff %p (%zu bytes) is neither host memory of this process "
                               "nor memory the CUDA driver knows (%s)", what, buff, size,
                               shoal_dev_why());
    if (winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING))
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown winFlags 0x%x", what,
                               winFlags);
    if (flags_mismatch >= 0)
        return shoal_nccl_fail(comm, ncclInvalidUsage, "%s: rank %d passed other winFlags",
                               what, flags_mismatch);
    if (symmetric_mismatch >= 0)
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "%s: symmetric window of %zu bytes here but %llu on rank %d",
                               what, size, (unsigned long long)other_size, symmetric_mismatch);
    if (bad >= 0)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: rank %d passed a bad buffer or "
                               "win (its own error says which)", what, bad);
    /* Every rank is here: the shoal window, made together, tells a rank's
     * own failure (memory for w, the registration) to the others. */
    struct ncclWindow_vidmem *w = calloc(1, sizeof(*w));
    shoal_win_t sw = NULL;
    s = shoal_win_create(w ? buff : NULL, w ? size : 1, sc, &sw);
    if (!w)
        return shoal_nccl_fail(comm, ncclSystemError, "%s: out of memory", what);
    if (s != SHOAL_OK) {
        free(w);
        return shoal_nccl_result(s);
    }
    w->win = sw;
    w->flags = winFlags;
    w->buff = buff;
    w->size = size;
    pthread_mutex_lock(&comm->lock);
    w->next = comm->windows;
    comm->windows = w;
    pthread_mutex_unlock(&comm->lock);
    *win = w;
    return ncclSuccess;
}

/* comm's window win, or NULL; under comm->lock. */
static struct ncclWindow_vidmem *window_of(struct ncclComm *comm, ncclWindow_t win)
{
    for (struct ncclWindow_vidmem *w = comm->windows; w; w = w->next) {
        if (w == win)
            return w;
    }
    return NULL;
}

NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void **outUserPtr)
{
    static const char what[] = "ncclWinGetUserPtr";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (!outUserPtr)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: outUserPtr is NULL", what);
    pthread_mutex_lock(&comm->lock);
    struct ncclWindow_vidmem *w = window_of(comm, win);
    if (w)
        *outUserPtr = w->buff;
    pthread_mutex_unlock(&comm->lock);
    if (!w)
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: window %p is not a live window of this communicator", what,
                               (void *)win);
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
    shoal_status_t s = shoal_win_free(found->win, sc);
    free(found);
    return shoal_nccl_result(s);
}

shoal_win_t shoal_nccl_window_find(struct ncclComm *comm, ncclWindow_t win, const void *ptr,
                                   size_t len)
{
    shoal_win_t found = NULL;
    pthread_mutex_lock(&comm->lock);
    for (struct ncclWindow_vidmem *w = comm->windows; w && !found; w = w->next) {
        const char *b = w->buff, *p = ptr;
        int holds = win ? w == win
                        : b && p >= b && p <= b + w->size && len <= w->size - (size_t)(p - b) &&
                              (w->flags & NCCL_WIN_COLL_SYMMETRIC);
        if (holds)
            found = w->win;
    }
    pthread_mutex_unlock(&comm->lock);
    return found;
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
