/* Door communicators: the init family (blocking, grouped, non-blocking,
 * several ranks in one process), split, shrink, teardown and queries. */
#include "door.h"

#include "base/dev.h"

#include "base/config.h"
#include "core/fault.h"
#include "core/handle.h"
#include "core/launch.h"
#include "base/log.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_CONFIG_MAGIC 0xcafebeefu

/* Whether the caller's config (of config->size bytes) holds member. */
#define CONFIG_HAS(config, member)                                            \
    ((config)->size >= offsetof(ncclConfig_t, member) + sizeof((config)->member))

/* ---- door communicator handles ------------------------------------------ */

/* The door keeps no table of its communicators: like the core's
 * communicators and requests, they live in a handle pool (core/handle.h),
 * whose memory is never given back, and a handle is checked by its magic,
 * without a lock or a scan. */
static shoal_handle_pool_t door_pool = SHOAL_HANDLE_POOL_INIT(struct ncclComm,
                                                              "NCCL communicator");

_Static_assert(offsetof(struct ncclComm, magic) == 0, "magic must come first in ncclComm");

static struct ncclComm *comm_shell_new(void)
{
    struct ncclComm *comm = shoal_handle_alloc(&door_pool);
    if (!comm)
        return NULL;
    /* A stale handle may be reading magic: the rest is reset. */
    size_t keep = sizeof(comm->magic);
    memset((char *)comm + keep, 0, sizeof(*comm) - keep);
    return comm;
}

static void comm_shell_free(struct ncclComm *comm)
{
    atomic_store(&comm->magic, 0);
    shoal_handle_free(&door_pool, comm);
}

void shoal_nccl_comm_add(struct ncclComm *comm)
{
    atomic_store(&comm->magic, SHOAL_NCCL_COMM_LIVE);
}

int shoal_nccl_comm_remove(struct ncclComm *comm)
{
    uint64_t live = SHOAL_NCCL_COMM_LIVE;
    return shoal_handle_owns(&door_pool, comm) &&
           atomic_compare_exchange_strong(&comm->magic, &live, 0);
}

int shoal_nccl_comm_valid(const struct ncclComm *comm)
{
    return shoal_handle_owns(&door_pool, comm) &&
           atomic_load_explicit(&((struct ncclComm *)comm)->magic, memory_order_acquire) ==
               SHOAL_NCCL_COMM_LIVE;
}

ncclResult_t shoal_nccl_comm_new(const ncclConfig_t *config, const struct ncclComm *parent,
                                 const char *what, struct ncclComm **comm_p)
{
    int blocking = parent ? parent->blocking : 1;
    const char *name = parent ? parent->name : "";
    if (config) {
        /* size first: a program built with an older, shorter struct must
         * never have fields past its end read. */
        if (config->size < offsetof(ncclConfig_t, magic) + sizeof(config->magic) + sizeof(config->version))
            return shoal_nccl_fail(NULL, ncclInvalidArgument,
                                   "%s: config->size %zu is too small for an ncclConfig_t", what,
                                   config->size);
        if (config->magic != NCCL_CONFIG_MAGIC)
            return shoal_nccl_fail(NULL, ncclInvalidArgument,
                                   "%s: config->magic 0x%x is not NCCL_CONFIG_INITIALIZER's "
                                   "(start from NCCL_CONFIG_INITIALIZER)", what, config->magic);
        if (CONFIG_HAS(config, blocking) && config->blocking != NCCL_CONFIG_UNDEF_INT)
            blocking = config->blocking != 0;
        if (CONFIG_HAS(config, commName) && config->commName)
            name = config->commName;
    }
    struct ncclComm *comm = comm_shell_new();
    if (!comm)
        return shoal_nccl_fail(NULL, ncclSystemError, "%s: out of memory", what);
    comm->blocking = blocking;
    snprintf(comm->name, sizeof(comm->name), "%s", name);
    /* As NCCL, the device current on the creating thread, in a process
     * that uses the CUDA driver. */
    const shoal_dev_ops_t *dev = shoal_dev_if_driver();
    if (!dev || dev->device_of(NULL, &comm->cudev) != SHOAL_OK)
        comm->cudev = -1;
    comm->init_result = ncclSuccess;
    comm->async_error = ncclSuccess;
    pthread_mutex_init(&comm->lock, NULL);
    *comm_p = comm;
    return ncclSuccess;
}

void shoal_nccl_comm_free(struct ncclComm *comm)
{
    shoal_nccl_windows_free(comm);
    shoal_nccl_compress_free(comm);
    pthread_mutex_destroy(&comm->lock);
    free(comm->reqs);
    comm_shell_free(comm);
}

ncclResult_t shoal_nccl_formed(struct ncclComm *comm, const char *what)
{
    shoal_nccl_once();
    if (!shoal_nccl_comm_valid(comm))
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: communicator %p is not valid",
                               what, (void *)comm);
    if (shoal_nccl_job_join(comm) != ncclSuccess)
        return shoal_nccl_fail(NULL, ncclInvalidUsage, "%s: the communicator's init failed",
                               what);
    return ncclSuccess;
}

ncclResult_t shoal_nccl_enter(struct ncclComm *comm, const char *what, shoal_comm_t *sc_p)
{
    shoal_nccl_once();
    if (!comm)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", what);
    if (!shoal_nccl_comm_valid(comm))
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "%s: communicator %p is not valid (destroyed or never created)",
                               what, (void *)comm);
    ncclResult_t res = shoal_nccl_job_join(comm);
    if (res == ncclInProgress)
        return shoal_nccl_fail(NULL, ncclInvalidUsage,
                               "%s: the communicator's init is deferred to ncclGroupEnd", what);
    if (res != ncclSuccess)
        return shoal_nccl_fail(NULL, ncclInvalidUsage,
                               "%s: the communicator's init failed (%s); destroy or abort it",
                               what, pncclGetErrorString(res));
    if (atomic_load_explicit(&comm->revoked, memory_order_acquire))
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "%s: communicator was revoked; only shrink, destroy and abort "
                               "remain", what);
    if (atomic_load_explicit(&comm->suspended, memory_order_acquire))
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "%s: communicator is suspended (ncclCommResume first)", what);
    *sc_p = comm->sc;
    return ncclSuccess;
}

/* ---- init ----------------------------------------------------------------- */

typedef struct {
    int nranks;
    int rank;
    ncclUniqueId id;
} init_args_t;

static shoal_status_t init_job(void *arg, shoal_comm_t *sc_p)
{
    const init_args_t *a = arg;
    shoal_unique_id_t id;
    memcpy(id.bytes, a->id.internal, sizeof(id.bytes));
    return shoal_comm_init(a->nranks, &id, a->rank, sc_p);
}

/* Create and register a door communicator, then run job now (blocking,
 * outside a group) or defer it; *newcomm is written unless a blocking run
 * failed. */
static ncclResult_t comm_start(ncclComm_t *newcomm, const ncclConfig_t *config,
                               const struct ncclComm *parent, const char *what,
                               shoal_nccl_job_fn_t fn, void *arg, size_t argsize)
{
    struct ncclComm *comm;
    ncclResult_t res = shoal_nccl_comm_new(config, parent, what, &comm);
    if (res != ncclSuccess)
        return res;
    shoal_nccl_comm_add(comm);
    if (shoal_nccl_in_group() || !comm->blocking) {
        res = shoal_nccl_job_start(comm, fn, arg, argsize);
        if (res != ncclSuccess && res != ncclInProgress)
            goto err_remove;
        *newcomm = comm;
        return res;
    }
    shoal_status_t s = fn(arg, &comm->sc);
    if (s != SHOAL_OK) {
        res = shoal_nccl_fail(NULL, shoal_nccl_result(s), "%s: %s", what,
                              shoal_comm_last_error(NULL));
        goto err_remove;
    }
    *newcomm = comm;
    return ncclSuccess;

err_remove:
    shoal_nccl_comm_remove(comm);
    shoal_nccl_comm_free(comm);
    return res;
}

static ncclResult_t init_rank(const char *what, ncclComm_t *newcomm, int nranks,
                              const ncclUniqueId *id, int rank, ncclConfig_t *config)
{
    shoal_nccl_once();
    if (!newcomm || !id)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: %s is NULL", what,
                               newcomm ? "commId" : "newcomm");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "%s: rank %d of %d ranks is out of range", what, rank, nranks);
    init_args_t a = {.nranks = nranks, .rank = rank, .id = *id};
    return comm_start(newcomm, config, NULL, what, init_job, &a, sizeof(a));
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
    shoal_nccl_once();
    if (!uniqueId)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    shoal_unique_id_t id;
    const char *fixed = shoal_config_get()->boot.comm_id;
    shoal_status_t s = fixed[0] ? shoal_launch_id_for(fixed, &id) : shoal_get_unique_id(&id);
    if (s != SHOAL_OK)
        return shoal_nccl_fail(NULL, shoal_nccl_result(s), "ncclGetUniqueId: %s",
                               shoal_comm_last_error(NULL));
    _Static_assert(sizeof(id.bytes) == sizeof(uniqueId->internal), "unique id sizes differ");
    memcpy(uniqueId->internal, id.bytes, sizeof(uniqueId->internal));
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks,
         ncclUniqueId commId, int rank, ncclConfig_t *config)
{
    return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank)
{
    return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
}

/* Several ids spread the rendezvous of a large job in NCCL; shoal's root
 * is one process, so the ranks meet on the first id (made by rank 0). */
NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
         int nId, ncclUniqueId *commIds, ncclConfig_t *config)
{
    shoal_nccl_once();
    if (nId < 1 || !commIds)
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclCommInitRankScalable: %s", commIds ? "nId < 1" : "commIds is NULL");
    return init_rank("ncclCommInitRankScalable", newcomm, nranks, commIds, myrank, config);
}

/* ndev ranks in this process: each forms on a thread of its own, as they
 * must meet each other. */
NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist)
{
    static const char what[] = "ncclCommInitAll";
    shoal_nccl_once();
    if (!comms || ndev < 1)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: %s", what,
                               comms ? "ndev < 1" : "comms is NULL");
    for (int i = 0; devlist && i < ndev; i++) {
        if (devlist[i] < 0)
            return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: devlist[%d] = %d is negative",
                                   what, i, devlist[i]);
        for (int j = 0; j < i; j++) {
            if (devlist[j] == devlist[i])
                return shoal_nccl_fail(NULL, ncclInvalidArgument,
                                       "%s: device %d appears twice in devlist", what, devlist[i]);
        }
    }
    shoal_unique_id_t sid;
    shoal_status_t s = shoal_get_unique_id(&sid);
    if (s != SHOAL_OK)
        return shoal_nccl_fail(NULL, shoal_nccl_result(s), "%s: %s", what,
                               shoal_comm_last_error(NULL));
    ncclUniqueId id;
    memcpy(id.internal, sid.bytes, sizeof(id.internal));

    /* Inside a group of our own, every init is deferred; its end runs them
     * together. */
    struct ncclComm **made = calloc((size_t)ndev, sizeof(*made));
    if (!made)
        return shoal_nccl_fail(NULL, ncclSystemError, "%s: out of memory", what);
    ncclResult_t res = pncclGroupStart();
    for (int i = 0; i < ndev && res == ncclSuccess; i++)
        res = init_rank(what, &made[i], ndev, &id, i, NULL);
    ncclResult_t end = pncclGroupEnd();
    if (res == ncclSuccess)
        res = end;
    for (int i = 0; i < ndev; i++) {
        if (res == ncclSuccess)
            comms[i] = made[i];
        else if (made[i])
            pncclCommAbort(made[i]);
    }
    free(made);
    return res;
}

/* ---- queries ------------------------------------------------------------ */

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclCommCount", &sc);
    if (res != ncclSuccess)
        return res;
    if (!count)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "ncclCommCount: count is NULL");
    return shoal_nccl_result(shoal_comm_size(sc, count));
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclCommUserRank", &sc);
    if (res != ncclSuccess)
        return res;
    if (!rank)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    return shoal_nccl_result(shoal_comm_rank(sc, rank));
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclCommCuDevice", &sc);
    if (res != ncclSuccess)
        return res;
    if (!device)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    if (comm->cudev < 0)
        return shoal_nccl_fail(comm, ncclInvalidUsage,
                               "ncclCommCuDevice: this communicator has no CUDA device: it "
                               "was created in a process without CUDA (%s)", shoal_dev_why());
    *device = comm->cudev;
    return ncclSuccess;
}

/* A failure that broke the communicator, then the first failure of its
 * non-blocking operations; ncclInProgress while its init or any of them
 * is under way. */
NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
    static const char what[] = "ncclCommGetAsyncError";
    shoal_nccl_once();
    if (!asyncError)
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: asyncError is NULL", what);
    if (!shoal_nccl_comm_valid(comm))
        return shoal_nccl_fail(NULL, ncclInvalidArgument, "%s: communicator %p is not valid",
                               what, (void *)comm);
    if (!shoal_nccl_job_done(comm)) {
        *asyncError = ncclInProgress;
        return ncclSuccess;
    }
    ncclResult_t res = shoal_nccl_job_join(comm);
    if (res != ncclSuccess) {
        *asyncError = res;
        return ncclSuccess;
    }
    pthread_mutex_lock(&comm->lock);
    size_t keep = 0;
    for (size_t i = 0; i < comm->nreqs; i++) {
        int done = 0;
        shoal_status_t s = shoal_test(&comm->reqs[i], &done);
        if (!done)
            comm->reqs[keep++] = comm->reqs[i];
        else if (s != SHOAL_OK && comm->async_error == ncclSuccess)
            comm->async_error = shoal_nccl_result(s);
    }
    comm->nreqs = keep;
    res = comm->async_error;
    pthread_mutex_unlock(&comm->lock);
    /* Between calls, news of a dead or failed peer waits on the bootstrap
     * connection: look (at most every 200 us) rather than wait for the
     * progress thread's heartbeat. */
    shoal_fault_watch(comm->sc, 0);
    int broken = atomic_load_explicit(&comm->sc->error, memory_order_acquire);
    if (res == ncclSuccess && broken != SHOAL_OK)
        res = shoal_nccl_result((shoal_status_t)broken);
    if (res == ncclSuccess && keep > 0)
        res = ncclInProgress;
    *asyncError = res;
    return ncclSuccess;
}

ncclResult_t shoal_nccl_track(struct ncclComm *comm, shoal_request_t req)
{
    ncclResult_t res = ncclInProgress;
    pthread_mutex_lock(&comm->lock);
    if (comm->nreqs == comm->reqcap) {
        size_t cap = comm->reqcap ? 2 * comm->reqcap : 16;
        shoal_request_t *r = realloc(comm->reqs, cap * sizeof(*r));
        if (r) {
            comm->reqs = r;
            comm->reqcap = cap;
        }
    }
    if (comm->nreqs < comm->reqcap)
        comm->reqs[comm->nreqs++] = req;
    else
        res = ncclSystemError;
    pthread_mutex_unlock(&comm->lock);
    if (res != ncclInProgress) {
        /* Nowhere to keep it: wait for it here instead. */
        res = shoal_nccl_result(shoal_wait(&req));
    }
    return res;
}

ncclResult_t shoal_nccl_drain(struct ncclComm *comm)
{
    pthread_mutex_lock(&comm->lock);
    shoal_status_t s = comm->nreqs ? shoal_wait_all(comm->nreqs, comm->reqs) : SHOAL_OK;
    comm->nreqs = 0;
    if (s != SHOAL_OK && comm->async_error == ncclSuccess)
        comm->async_error = shoal_nccl_result(s);
    ncclResult_t res = comm->async_error;
    pthread_mutex_unlock(&comm->lock);
    return res;
}

/* ---- split and shrink ------------------------------------------------------ */

typedef struct {
    shoal_comm_t parent;
    int color, key;
} split_args_t;

static shoal_status_t split_job(void *arg, shoal_comm_t *sc_p)
{
    const split_args_t *a = arg;
    return shoal_comm_split(a->parent, a->color, a->key, sc_p);
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config)
{
    static const char what[] = "ncclCommSplit";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (!newcomm)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", what);
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: color %d is negative (only NCCL_SPLIT_NOCOLOR is)", what,
                               color);
    split_args_t a = {.parent = sc, .color = color, .key = key};
    if (color == NCCL_SPLIT_NOCOLOR && shoal_nccl_in_group()) {
        /* This rank takes part in the exchange and joins nothing; inside a
         * group it must wait for ncclGroupEnd like the others, since one
         * thread may hold several ranks of comm. A door communicator of
         * its own carries the deferred exchange and is freed after it. */
        struct ncclComm *holder;
        res = shoal_nccl_comm_new(NULL, comm, what, &holder);
        if (res != ncclSuccess)
            return res;
        holder->transient = 1;
        res = shoal_nccl_job_start(holder, split_job, &a, sizeof(a));
        if (res != ncclSuccess) {
            shoal_nccl_comm_free(holder);
            return res;
        }
        *newcomm = NULL;
        return ncclSuccess;
    }
    if (color == NCCL_SPLIT_NOCOLOR) {
        shoal_comm_t none = NULL;
        shoal_status_t s = split_job(&a, &none);
        if (s != SHOAL_OK)
            return shoal_nccl_result(s);
        *newcomm = NULL;
        return ncclSuccess;
    }
    return comm_start(newcomm, config, comm, what, split_job, &a, sizeof(a));
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
         int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    static const char what[] = "ncclCommShrink";
    /* A revoked or broken parent is what shrink is for: no enter check. */
    ncclResult_t res = shoal_nccl_formed(comm, what);
    if (res != ncclSuccess)
        return res;
    if (!newcomm)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", what);
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: unknown shrinkFlags %d", what,
                               shrinkFlags);
    struct ncclComm *nc;
    res = shoal_nccl_comm_new(config, comm, what, &nc);
    if (res != ncclSuccess)
        return res;
    shoal_status_t s = shoal_comm_shrink(comm->sc, excludeRanksList, excludeRanksCount,
                                         shrinkFlags == NCCL_SHRINK_ABORT ? SHOAL_SHRINK_ABORT
                                                                          : SHOAL_SHRINK_DEFAULT,
                                         &nc->sc);
    if (s != SHOAL_OK) {
        shoal_nccl_comm_free(nc);
        return shoal_nccl_result(s);
    }
    shoal_nccl_comm_add(nc);
    *newcomm = nc;
    return ncclSuccess;
}

/* ---- grow (2.30) ----------------------------------------------------------- */

NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId *uniqueId)
{
    static const char what[] = "ncclCommGetUniqueId";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (!uniqueId)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: uniqueId is NULL", what);
    shoal_unique_id_t id;
    shoal_status_t s = shoal_comm_grow_id(sc, &id);
    if (s != SHOAL_OK)
        return shoal_nccl_result(s);
    memcpy(uniqueId->internal, id.bytes, sizeof(uniqueId->internal));
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId,
         int rank, ncclComm_t *newcomm, ncclConfig_t *config)
{
    static const char what[] = "ncclCommGrow";
    shoal_comm_t sc = NULL;
    shoal_nccl_once();
    if (comm) {
        ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
        if (res != ncclSuccess)
            return res;
    }
    if (!newcomm)
        return shoal_nccl_fail(comm, ncclInvalidArgument, "%s: newcomm is NULL", what);
    struct ncclComm *nc;
    ncclResult_t res = shoal_nccl_comm_new(config, comm, what, &nc);
    if (res != ncclSuccess)
        return res;
    shoal_unique_id_t id;
    if (uniqueId)
        memcpy(id.bytes, uniqueId->internal, sizeof(id.bytes));
    shoal_status_t s = shoal_comm_grow(sc, nRanks, uniqueId ? &id : NULL, rank, &nc->sc);
    if (s != SHOAL_OK) {
        shoal_nccl_comm_free(nc);
        return shoal_nccl_fail(comm, shoal_nccl_result(s), "%s: %s", what,
                               shoal_comm_last_error(sc));
    }
    shoal_nccl_comm_add(nc);
    *newcomm = nc;
    return ncclSuccess;
}

/* ---- teardown ----------------------------------------------------------- */

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, "ncclCommFinalize", &sc);
    if (res != ncclSuccess)
        return res;
    return shoal_nccl_drain(comm);
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
    shoal_nccl_once();
    if (!comm)
        return ncclSuccess; /* NCCL accepts NULL here */
    if (!shoal_nccl_comm_remove(comm))
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclCommDestroy: communicator %p is not valid (destroyed twice?)",
                               (void *)comm);
    /* An init that failed, or was deferred to a group that never ended,
     * formed nothing: there is nothing more to free. */
    shoal_nccl_job_join(comm);
    ncclResult_t res = ncclSuccess;
    if (comm->sc) {
        shoal_nccl_drain(comm);
        res = shoal_nccl_result(shoal_comm_release(comm->sc));
    }
    shoal_nccl_comm_free(comm);
    return res;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
    shoal_nccl_once();
    if (!comm)
        return ncclSuccess;
    if (!shoal_nccl_comm_remove(comm))
        return shoal_nccl_fail(NULL, ncclInvalidArgument,
                               "ncclCommAbort: communicator %p is not valid", (void *)comm);
    shoal_nccl_job_join(comm);
    if (comm->sc)
        shoal_comm_abort(comm->sc);
    /* Requests of an aborted communicator complete with an error; free them. */
    if (comm->nreqs)
        shoal_wait_all(comm->nreqs, comm->reqs);
    shoal_nccl_comm_free(comm);
    return ncclSuccess;
}

/* Stop the communicator's operations; it stays registered so that shrink,
 * destroy and abort still work. */
NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
{
    static const char what[] = "ncclCommRevoke";
    shoal_comm_t sc;
    ncclResult_t res = shoal_nccl_enter(comm, what, &sc);
    if (res != ncclSuccess)
        return res;
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
        return shoal_nccl_fail(comm, ncclInvalidArgument,
                               "%s: revokeFlags %d (only NCCL_REVOKE_DEFAULT is defined)", what,
                               revokeFlags);
    atomic_store_explicit(&comm->revoked, 1, memory_order_release);
    return shoal_nccl_result(shoal_comm_stop(sc));
}
