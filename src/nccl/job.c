/* Deferred communicator inits and splits. NCCL lets one thread form several
 * ranks inside a group (they meet at ncclGroupEnd) and lets a non-blocking
 * communicator form in the background; both need the init on a thread of
 * its own, since the ranks of one communicator wait for each other. */
#include "door.h"

#include "core/exec.h"
#include "base/log.h"

#include <stdlib.h>
#include <string.h>

struct shoal_nccl_job {
    struct ncclComm *comm;
    shoal_nccl_job_fn_t fn;
    void *arg;
    pthread_t thread;
    int started;
    atomic_int done;
    struct shoal_nccl_job *next; /* this thread's deferred jobs */
};

/* Jobs deferred by this thread's open group, in call order. */
static _Thread_local struct shoal_nccl_job *deferred_head, *deferred_tail;

int shoal_nccl_in_group(void)
{
    return shoal_group_active();
}

static void *job_main(void *arg)
{
    struct shoal_nccl_job *job = arg;
    struct ncclComm *comm = job->comm;
    shoal_comm_t sc = NULL;
    shoal_status_t s = job->fn(job->arg, &sc);
    comm->sc = sc;
    comm->init_result = shoal_nccl_result(s);
    if (s != SHOAL_OK)
        shoal_warn(INIT, "communicator init failed: %s", shoal_comm_last_error(NULL));
    /* Publishes sc and init_result to whoever sees done. */
    atomic_store_explicit(&job->done, 1, memory_order_release);
    return NULL;
}

static ncclResult_t job_launch(struct shoal_nccl_job *job)
{
    int e = pthread_create(&job->thread, NULL, job_main, job);
    if (e) {
        job->comm->init_result = ncclSystemError;
        atomic_store_explicit(&job->done, 1, memory_order_release);
        return shoal_nccl_fail(NULL, ncclSystemError, "cannot start a thread to form a "
                               "communicator: %s", strerror(e));
    }
    job->started = 1;
    return ncclSuccess;
}

ncclResult_t shoal_nccl_job_start(struct ncclComm *comm, shoal_nccl_job_fn_t fn, void *arg,
                                  size_t argsize)
{
    struct shoal_nccl_job *job = calloc(1, sizeof(*job));
    void *copy = malloc(argsize);
    if (!job || !copy) {
        free(job);
        free(copy);
        return shoal_nccl_fail(NULL, ncclSystemError, "out of memory for a deferred init");
    }
    memcpy(copy, arg, argsize);
    job->comm = comm;
    job->fn = fn;
    job->arg = copy;
    comm->job = job;
    comm->init_result = ncclInProgress;
    if (shoal_nccl_in_group()) {
        if (deferred_tail)
            deferred_tail->next = job;
        else
            deferred_head = job;
        deferred_tail = job;
        return ncclSuccess;
    }
    ncclResult_t res = job_launch(job);
    return res == ncclSuccess ? ncclInProgress : res;
}

int shoal_nccl_job_done(struct ncclComm *comm)
{
    pthread_mutex_lock(&comm->lock);
    const struct shoal_nccl_job *job = comm->job;
    int done = !job || (job->started && atomic_load_explicit(&job->done, memory_order_acquire));
    pthread_mutex_unlock(&comm->lock);
    return done;
}

ncclResult_t shoal_nccl_job_join(struct ncclComm *comm)
{
    pthread_mutex_lock(&comm->lock);
    struct shoal_nccl_job *job = comm->job;
    if (job && job->started) {
        /* Bounded by the job: an init or split, whose every wait has the
         * SHOAL_TIMEOUT deadline (and a split's, the parent's abort too). */
        pthread_join(job->thread, NULL);
        comm->job = NULL;
        free(job->arg);
        free(job);
    } else if (job && atomic_load_explicit(&job->done, memory_order_acquire)) {
        /* Its thread never started. */
        comm->job = NULL;
        free(job->arg);
        free(job);
    }
    ncclResult_t res = comm->init_result;
    pthread_mutex_unlock(&comm->lock);
    return res;
}

ncclResult_t shoal_nccl_jobs_run_group(void)
{
    struct shoal_nccl_job *head = deferred_head;
    deferred_head = deferred_tail = NULL;
    ncclResult_t first = ncclSuccess;
    for (struct shoal_nccl_job *j = head; j; j = j->next) {
        ncclResult_t res = job_launch(j);
        if (res != ncclSuccess && first == ncclSuccess)
            first = res;
    }
    /* Join in order; a job's comm may be joined here or by a later call,
     * whichever comes first, so read the next link before. */
    for (struct shoal_nccl_job *j = head, *next; j; j = next) {
        next = j->next;
        struct ncclComm *comm = j->comm;
        ncclResult_t res = shoal_nccl_job_join(comm);
        if (res != ncclSuccess && first == ncclSuccess)
            first = res;
        if (comm->transient)
            shoal_nccl_comm_free(comm);
    }
    return first;
}
