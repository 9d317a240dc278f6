/* Groups: between shoal_group_start and shoal_group_end a thread's calls are
 * recorded per communicator; the outermost end queues each communicator's
 * calls as one task (fused and run by shoal_calls_run) and waits for all.
 * The state is per thread, as a group is a bracket in one thread's code.
 * Its arrays are kept from one group to the next, so that a loop of groups
 * allocates nothing after the first, and freed when the thread exits. */
#include "dev_stage.h"
#include "exec.h"

#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    struct shoal_comm *comm;
    shoal_call_t *calls;
    size_t ncalls, cap;
    shoal_request_t *reqs;
    size_t nreqs, reqcap;
} group_comm_t;

static _Thread_local int group_depth;
static _Thread_local group_comm_t *group_comms;
static _Thread_local size_t group_ncomms, group_cap;

static pthread_key_t group_key;
static pthread_once_t group_key_once = PTHREAD_ONCE_INIT;

/* Thread exit: the arrays of the groups of that thread. */
static void group_free(void *arg)
{
    group_comm_t *comms = arg;
    for (size_t i = 0; i < group_cap; i++) {
        free(comms[i].calls);
        free(comms[i].reqs);
    }
    free(comms);
    group_comms = NULL;
    group_cap = 0;
}

static void group_key_create(void)
{
    pthread_key_create(&group_key, group_free);
}

int shoal_group_active(void)
{
    return group_depth > 0;
}

int shoal_group_depth(void)
{
    return group_depth;
}

shoal_status_t shoal_group_start(void)
{
    group_depth++;
    return SHOAL_OK;
}

/* Grow *arr (of elem bytes each, *cap of them) to hold one more than n. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

shoal_status_t shoal_group_record(struct shoal_comm *comm, const shoal_call_t *call,
                                  shoal_request_t *req_p)
{
    group_comm_t *g = NULL;
    for (size_t i = 0; i < group_ncomms && !g; i++) {
        if (group_comms[i].comm == comm)
            g = &group_comms[i];
    }
    if (!g) {
        size_t old_cap = group_cap;
        if (grow((void **)&group_comms, &group_cap, group_ncomms, sizeof(*group_comms)))
            goto err_nomem;
        if (group_cap != old_cap) {
            memset(group_comms + old_cap, 0, (group_cap - old_cap) * sizeof(*group_comms));
            pthread_once(&group_key_once, group_key_create);
            pthread_setspecific(group_key, group_comms);
        }
        g = &group_comms[group_ncomms++];
        g->comm = comm;
        g->ncalls = g->nreqs = 0;
    }
    if (grow((void **)&g->calls, &g->cap, g->ncalls, sizeof(*g->calls)))
        goto err_nomem;
    if (req_p) {
        if (grow((void **)&g->reqs, &g->reqcap, g->nreqs, sizeof(*g->reqs)) ||
            shoal_request_new(&g->reqs[g->nreqs]) != SHOAL_OK)
            goto err_nomem;
        *req_p = g->reqs[g->nreqs++];
    }
    g->calls[g->ncalls++] = *call;
    return SHOAL_OK;

err_nomem:
    return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory to record it in the group",
                           call->what);
}

shoal_status_t shoal_group_end(void)
{
    if (group_depth == 0) {
        shoal_error(ALGO, "shoal_group_end without shoal_group_start");
        return SHOAL_ERR_INVALID_ARG;
    }
    if (--group_depth > 0)
        return SHOAL_OK;

    /* Queue every communicator's task before waiting for any, so that with
     * progress threads the communicators run at the same time. */
    shoal_status_t first = SHOAL_OK;
    shoal_task_t **tasks = calloc(group_ncomms ? group_ncomms : 1, sizeof(*tasks));
    for (size_t i = 0; i < group_ncomms; i++) {
        group_comm_t *g = &group_comms[i];
        shoal_status_t s = shoal_comm_enter(g->comm, "shoal_group_end");
        if (s == SHOAL_OK) {
            /* A group of stream-ordered calls only is launched here and not
             * waited for: its streams wait instead (dev_stage.h). */
            int streamed = shoal_dev_calls_all(g->calls, g->ncalls);
            if (!tasks)
                s = SHOAL_ERR_NO_MEMORY;
            else if (streamed && !shoal_exec_threaded(g->comm))
                s = shoal_comm_fail(g->comm, SHOAL_ERR_UNSUPPORTED, "shoal_group_end: "
                                    "stream-ordered calls need the progress thread, which "
                                    "SHOAL_PROGRESS=caller turns off");
            else if (streamed && !g->nreqs && shoal_dev_one_rank(g->comm, g->calls, g->ncalls, &s))
                ;
            else if ((s = shoal_dev_stage(g->comm, g->calls, g->ncalls)) != SHOAL_OK)
                ;
            else if ((s = shoal_exec_submit(g->comm, g->calls, g->ncalls, g->reqs, g->nreqs,
                                            streamed ? NULL : &tasks[i])) != SHOAL_OK)
                shoal_dev_task_end(g->calls, g->ncalls);
            shoal_comm_leave(g->comm);
        }
        if (s != SHOAL_OK) {
            shoal_calls_end(g->calls, g->ncalls);
            for (size_t k = 0; k < g->nreqs; k++)
                shoal_request_complete(g->reqs[k], s);
            if (first == SHOAL_OK)
                first = s;
        }
    }
    for (size_t i = 0; tasks && i < group_ncomms; i++) {
        if (tasks[i]) {
            shoal_status_t s = shoal_exec_wait(tasks[i]);
            if (s != SHOAL_OK && first == SHOAL_OK)
                first = s;
        }
    }
    free(tasks);
    group_ncomms = 0;
    return first;
}

shoal_status_t shoal_group_simulate_end(double *seconds_p)
{
    if (group_depth == 0) {
        shoal_error(ALGO, "group simulation without a group start");
        return SHOAL_ERR_INVALID_ARG;
    }
    double worst = 0;
    if (--group_depth == 0) {
        for (size_t i = 0; i < group_ncomms; i++) {
            group_comm_t *g = &group_comms[i];
            double t = 0;
            if (shoal_comm_enter(g->comm, "group simulation") == SHOAL_OK) {
                for (size_t k = 0; k < g->ncalls; k++)
                    t += shoal_call_estimate(g->comm, &g->calls[k]);
                shoal_comm_leave(g->comm);
            }
            for (size_t k = 0; k < g->nreqs; k++)
                shoal_request_complete(g->reqs[k], SHOAL_OK);
            worst = t > worst ? t : worst;
        }
        group_ncomms = 0;
    }
    *seconds_p = worst;
    return SHOAL_OK;
}
