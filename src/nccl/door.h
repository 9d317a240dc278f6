/* The NCCL door: NCCL 2.28's API (include/nccl.h) over shoal's core. This
 * header is shared by the door's files only; nothing below the API layer
 * includes it. */
#ifndef SHOAL_NCCL_DOOR_H
#define SHOAL_NCCL_DOOR_H

#include "nccl.h"

#include "core/comm.h"

#include <pthread.h>
#include <stdatomic.h>

/*
 * Every function of the header is defined as the strong pncclX, and ncclX
 * is a weak alias of it at the same address (as NCCL does), so that a
 * profiler may define ncclX and call on to pncclX.
 */
#define NCCL_API(ret, name, ...)                                              \
    ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));            \
    ret p##name(__VA_ARGS__)

/* Door state of a communicator. The shoal communicator appears when its
 * init completes: at once for a blocking init outside a group, at
 * ncclGroupEnd for one inside a group, and on a thread of its own for a
 * non-blocking one (ncclCommGetAsyncError reports it). */
struct ncclComm {
    /* The handle: door communicators live in a handle pool (core/handle.h),
     * as the core's do, and a handle is valid while its magic is
     * SHOAL_NCCL_COMM_LIVE (from shoal_nccl_comm_add until
     * shoal_nccl_comm_remove). First, and kept when the shell is reused. */
    _Atomic uint64_t magic;
    shoal_comm_t sc;
    int blocking;                 /* config.blocking (default 1) */
    char name[64];                /* config.commName, for messages */
    int cudev;                    /* CUDA device at creation, -1 without CUDA */
    atomic_int revoked;
    atomic_int suspended;         /* ncclCommSuspend until ncclCommResume (suspend.c) */
    int transient;                /* only carries a deferred job; never returned */

    /* A deferred init (group or non-blocking), see shoal_nccl_job_*. */
    struct shoal_nccl_job *job;
    ncclResult_t init_result;     /* ncclInProgress until the init finished */

    /* Operations of a non-blocking communicator not yet seen complete. */
    pthread_mutex_t lock;
    shoal_request_t *reqs;
    size_t nreqs, reqcap;
    ncclResult_t async_error;     /* first failure among them */

    struct ncclWindow_vidmem *windows; /* live windows (mem.c), under lock */
    struct shoal_nccl_comp *comps;     /* the door's compressors (compress.c), under lock */
    size_t ncomps;
    int comps_full_said;               /* logged that no more fit (compress.c), under lock */
};

/* First thing of every entry point: map NCCL_* settings and log the banner,
 * once per process. */
void shoal_nccl_once(void);

/* ncclResult_t for a shoal status. */
ncclResult_t shoal_nccl_result(shoal_status_t s);

/* Record a failure detected by the door: on comm's shoal communicator when
 * it has one, else for this thread; logged once. Returns res. */
ncclResult_t shoal_nccl_fail(struct ncclComm *comm, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The last failure of this thread outside any communicator. */
const char *shoal_nccl_thread_error(void);

#define SHOAL_NCCL_COMM_LIVE 0x73686f616c6e636cull /* "shoalncl" */

/* Live door communicators: made valid when created (add), invalid again
 * when their destroy or abort starts (remove: 1 for the call that did it,
 * 0 if comm was not valid). Valid means a shell of the door's pool whose
 * magic says live; no lock, no table. */
void shoal_nccl_comm_add(struct ncclComm *comm);
int shoal_nccl_comm_remove(struct ncclComm *comm);
int shoal_nccl_comm_valid(const struct ncclComm *comm);

/* A new door communicator (not yet valid) with config's settings, or the
 * parent's when config is NULL; ncclInvalidArgument for a bad config. */
ncclResult_t shoal_nccl_comm_new(const ncclConfig_t *config, const struct ncclComm *parent,
                                 const char *what, struct ncclComm **comm_p);
void shoal_nccl_comm_free(struct ncclComm *comm);

/* Entry check of the calls that take comm in any state (shrink, resume,
 * memory statistics): valid, its init finished (waiting for a deferred
 * one) and successful; revoked or suspended is fine. */
ncclResult_t shoal_nccl_formed(struct ncclComm *comm, const char *what);

/* Entry check of every call that uses comm: valid, its init finished
 * (waiting for a deferred one), not revoked. On ncclSuccess *sc_p is the
 * shoal communicator. */
ncclResult_t shoal_nccl_enter(struct ncclComm *comm, const char *what, shoal_comm_t *sc_p);

/* Deferred work: an init or split that runs on a thread of its own, either
 * at ncclGroupEnd (inside a group) or at once (non-blocking communicator).
 * fn returns the shoal status; the result lands in comm->init_result and
 * comm->sc. */
typedef shoal_status_t (*shoal_nccl_job_fn_t)(void *arg, shoal_comm_t *sc_p);
ncclResult_t shoal_nccl_job_start(struct ncclComm *comm, shoal_nccl_job_fn_t fn, void *arg,
                                  size_t argsize);
/* Wait for comm's job if it has one; returns comm->init_result. */
ncclResult_t shoal_nccl_job_join(struct ncclComm *comm);
/* Whether comm's job has finished (non-blocking poll). */
int shoal_nccl_job_done(struct ncclComm *comm);
/* Group end: start every job this thread deferred, then join them all;
 * returns the first failure. */
ncclResult_t shoal_nccl_jobs_run_group(void);

/* Whether the calling thread is inside ncclGroupStart..End. */
int shoal_nccl_in_group(void);

/* A non-blocking communicator's operation: keep its request for
 * ncclCommGetAsyncError. */
ncclResult_t shoal_nccl_track(struct ncclComm *comm, shoal_request_t req);
/* Wait for every tracked request; returns the first failure. */
ncclResult_t shoal_nccl_drain(struct ncclComm *comm);

/* Whether [p, p + len) is host memory of this process, readable and (when
 * writable) writable. len 0 is always fine. */
int shoal_nccl_is_host(const void *p, size_t len, int writable);

/* Whether [p, p + len) is host memory of this process (as above) or
 * memory the CUDA driver knows (device, managed, pinned), in a process
 * that uses the driver. */
int shoal_nccl_is_memory(const void *p, size_t len, int writable);

/* compress.c: the device memory comm's compressors hold (ncclCommMemStats). */
size_t shoal_nccl_compress_device_bytes(struct ncclComm *comm);

/* mem.c, for the one-sided calls: the shoal window of comm's live window
 * win (ptr NULL), or of comm's symmetric window whose buffer holds [ptr,
 * ptr + len) (win NULL); NULL when there is none. */
shoal_win_t shoal_nccl_window_find(struct ncclComm *comm, ncclWindow_t win, const void *ptr,
                                   size_t len);

/* Free comm's registrations and windows (destroy and abort). */
void shoal_nccl_windows_free(struct ncclComm *comm);

/* compress.c. INT8 on device buffers (SHOAL_COMPRESS=int8 for the
 * all-reduce, coll SHOAL_COMPRESS_COLL_ALLREDUCE; SHOAL_COMPRESS_ALLGATHER
 * and SHOAL_COMPRESS_REDUCESCATTER=int8 for the all-gather and
 * reduce-scatter, count per rank):
 * queue the compressed call on stream through the communicator's
 * compressor for (coll, count, dtype), made on first use. *taken = 0,
 * queueing nothing, when the communicator holds too many already: the
 * call then goes the usual way (every rank alike, as every rank makes the
 * same calls). */
shoal_status_t shoal_nccl_compress_stream(struct ncclComm *comm, shoal_comm_t sc,
                                          shoal_compress_coll_t coll, const void *sendbuf,
                                          void *recvbuf, size_t count, shoal_dtype_t dtype,
                                          shoal_op_t op, void *stream, int *taken);
/* SHOAL_COMPRESS_ALLGATHER and SHOAL_COMPRESS_REDUCESCATTER on host
 * buffers: the compressed all-gather (coll SHOAL_COMPRESS_COLL_ALLGATHER)
 * or reduce-scatter (SHOAL_COMPRESS_COLL_REDUCE_SCATTER, op sum or avg) of
 * kind, blocking, through the communicator's compressor for (coll, kind,
 * count, dtype), made on first use; count is per rank, as the NCCL calls
 * count. what names the call in the log. *taken as for
 * shoal_nccl_compress_stream. */
shoal_status_t shoal_nccl_compress_host(struct ncclComm *comm, shoal_comm_t sc,
                                        const char *what, shoal_compress_coll_t coll,
                                        shoal_compress_kind_t kind, const void *sendbuf,
                                        void *recvbuf, size_t count, shoal_dtype_t dtype,
                                        shoal_op_t op, int *taken);
/* The compressors, after their streams' last calls. */
void shoal_nccl_compress_free(struct ncclComm *comm);

#endif
