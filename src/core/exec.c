/* Task queues, the progress thread and requests (see exec.h).
 *
 * Whoever finds a communicator's queue non-empty and nobody running it may
 * take the head and run it: the progress thread, a blocking call waiting for
 * its own task, or shoal_wait. Running the waiter's own task on the waiter's
 * thread spares a blocking call the hand-off to another thread, and the
 * single "running" token keeps tasks strictly in issue order.
 *
 * Sends and receives issued one by one (not in a group) join the queue's
 * p2p session instead of running alone: every message in the session moves
 * a piece at a time, in steps that never wait, and each task completes when
 * its message has. A send therefore never waits for a receive that its own
 * rank issues later, whatever the order. A collective or a group waits until
 * the session is empty, since it shares the endpoints' FIFOs with it.
 *
 * Locks. Each communicator's executor has its own lock and its own
 * condition variable: a completion wakes only the threads waiting on that
 * communicator, and calls on different communicators never take the same
 * lock. A wait is always on one task, so it sleeps on that task's executor
 * (a wait on several requests waits for each in turn, shoal_wait_all); it
 * sleeps in slices (100 ms; SHOAL_TEST_EXEC_NAP) and looks again after
 * each, so that even a wake-up that no path sends would cost a slice,
 * never the wait (the
 * operations themselves carry the deadlines). An executor outlives its
 * communicator while tasks refer to it: requests stay valid after destroy
 * and abort, and their waits take its lock.
 *
 * Requests live in a handle pool (handle.h) and are checked by their magic.
 * A request recorded in a group is bound to its task only at the group's
 * end; a wait on it before that (from another thread) sleeps on a
 * process-wide condition that binding and completion signal only when such
 * a waiter exists (unbound_*), so that the common path takes no shared lock. */
#include "exec.h"

#include "base/clock.h"
#include "coll.h"
#include "base/dtype.h"
#include "fault.h"
#include "flight.h"
#include "dev_stage.h"
#include "handle.h"
#include "base/log.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <time.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct shoal_task {
    struct shoal_comm *comm;
    struct shoal_exec *ex;    /* comm's executor, which the task keeps alive */
    shoal_task_t *next;       /* queue link */
    uint64_t deadline_ns;     /* p2p session: when its message is overdue */
    shoal_call_t *calls;
    size_t ncalls;
    atomic_int refs;          /* queue + waiter + bound requests */
    int on_stack;             /* a blocking call's own: never freed */
    int borrowed;             /* calls belong to the submitter (a group) */
    uint64_t flight;          /* its flight recorder record */
    atomic_int done;          /* set, under the executor's lock, after status */
    shoal_status_t status;
    shoal_call_t one;         /* storage for a single call; stays last (shoal_exec_run) */
};

#define REQ_LIVE 0x73686f616c726571ull /* "shoalreq" */

struct shoal_request {
    _Atomic uint64_t magic;   /* REQ_LIVE from new until freed */
    shoal_task_t *_Atomic task; /* NULL until bound, or when completed alone */
    atomic_int done;          /* completed alone, with status */
    shoal_status_t status;
};

/* The messages of a p2p session, one per task, in issue order. */
typedef struct {
    shoal_xfer_t *x;
    shoal_task_t **task;
    size_t n, cap;
} xfer_list_t;

struct shoal_exec {
    pthread_mutex_t lock;     /* everything below but refs, and the tasks' completion */
    pthread_cond_t done;      /* a task completed, or work was left with nobody running it */
    pthread_cond_t work;      /* wakes the progress thread; both on CLOCK_MONOTONIC */
    atomic_int refs;          /* the communicator's, and one per heap task */
    shoal_task_t *head, *tail;
    xfer_list_t sends, recvs; /* the p2p session */
    /* A thread is running a task of this queue: set under the lock, and
     * cleared under it too except by a blocking call's fast path
     * (shoal_exec_run), which then wakes the nappers, if any. */
    atomic_int running;
    atomic_int nappers;       /* threads asleep (or about to be) until running clears */
    /* SHOAL_PROGRESS=thread; set under the lock before the first task
     * (shoal_comm_set_progress), read without it. */
    atomic_int thread_mode;
    int has_thread;
    int stop;
    pthread_t thread;
    struct shoal_comm *comm;
};

static shoal_handle_pool_t req_pool = SHOAL_HANDLE_POOL_INIT(struct shoal_request, "request");

/* Waits on requests not yet bound to a task (see the top of this file). */
static pthread_mutex_t unbound_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unbound_cond; /* on CLOCK_MONOTONIC: unbound_once */
static pthread_once_t unbound_once = PTHREAD_ONCE_INIT;
static atomic_int unbound_waiters;

/* Every timed wait here is on CLOCK_MONOTONIC, which a change of the
 * wall clock cannot stretch. */
static struct timespec nap_until(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* The longest a waiter sleeps before it looks at its task again. */
    uint64_t ns = (uint64_t)ts.tv_nsec + shoal_config_get()->core.test_exec_nap_ns;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    return ts;
}

static void cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

static void unbound_init(void)
{
    cond_init_monotonic(&unbound_cond);
}

/* Lock held, and the caller saw ex running: sleep until woken, or a nap
 * passed. A fast path clears running without the lock: it stores, then
 * looks for nappers; a napper counts itself, then looks at running (all
 * seq_cst), so either the napper sees it clear and does not sleep, or the
 * fast path sees the napper and wakes it. */
static void exec_nap(struct shoal_exec *ex)
{
    atomic_fetch_add(&ex->nappers, 1);
    if (atomic_load(&ex->running)) {
        struct timespec ts = nap_until();
        pthread_cond_timedwait(&ex->done, &ex->lock, &ts);
    }
    atomic_fetch_sub(&ex->nappers, 1);
}

/* Drop a reference to ex; the last frees it. The last is never dropped
 * with ex's lock held: while the communicator lives its reference outlasts
 * every holder of the lock, and after shoal_exec_destroy only the tasks of
 * requests hold references, which their waiters drop after unlocking. */
static void exec_unref(struct shoal_exec *ex)
{
    if (atomic_fetch_sub_explicit(&ex->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_cond_destroy(&ex->work);
    pthread_cond_destroy(&ex->done);
    pthread_mutex_destroy(&ex->lock);
    free(ex->sends.x);
    free(ex->sends.task);
    free(ex->recvs.x);
    free(ex->recvs.task);
    free(ex);
}

/* A lone send or receive, which joins the p2p session; not a staged one,
 * which must wait for its stream first (task_exec). */
static int task_is_p2p(const shoal_task_t *t)
{
    return t->ncalls == 1 && shoal_call_is_p2p(&t->calls[0]) && !t->calls[0].slot;
}

static int session_active(const struct shoal_exec *ex)
{
    return ex->sends.n + ex->recvs.n > 0;
}

/* Drop a reference to t; the last frees a heap task and its reference to
 * the executor. May run with the executor's lock held: the last reference
 * to the executor is not the task's then (see exec_unref). */
static void task_release(shoal_task_t *t)
{
    if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1 || t->on_stack)
        return;
    struct shoal_exec *ex = t->ex;
    if (t->calls != &t->one && !t->borrowed)
        free(t->calls);
    free(t);
    exec_unref(ex);
}

void shoal_calls_end(const shoal_call_t *calls, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (calls[i].end)
            calls[i].end(&calls[i]);
    }
}

/* Lock held. The calls' ends come first: a stream that passes the done
 * flags lets its host free what the ends touch (a compressor). */
static void task_complete(shoal_task_t *t, shoal_status_t status)
{
    shoal_calls_end(t->calls, t->ncalls);
    shoal_dev_task_end(t->calls, t->ncalls);
    shoal_flight_finish(t->comm->flight, t->flight, status);
    t->status = status;
    atomic_store_explicit(&t->done, 1, memory_order_release);
    task_release(t); /* the queue's reference */
}

static int task_done(const shoal_task_t *t)
{
    return atomic_load_explicit(&((shoal_task_t *)t)->done, memory_order_acquire);
}

static shoal_status_t task_exec(struct shoal_comm *comm, shoal_task_t *t)
{
    if (atomic_load_explicit(&comm->team.aborted, memory_order_acquire))
        return SHOAL_ERR_ABORTED;
    int err = atomic_load_explicit(&comm->error, memory_order_acquire);
    if (err != SHOAL_OK)
        return (shoal_status_t)err;
    shoal_status_t s = shoal_dev_task_start(comm, t->calls, t->ncalls);
    return s != SHOAL_OK ? s : shoal_calls_run(comm, t->calls, t->ncalls);
}

/* Lock held, t the head of ex: take t and the running token, then run t
 * with the lock released; returns t's status, the lock still released. */
static shoal_status_t exec_take_run(struct shoal_exec *ex, shoal_task_t *t)
{
    ex->head = t->next;
    if (!ex->head)
        ex->tail = NULL;
    atomic_store_explicit(&ex->running, 1, memory_order_relaxed);
    pthread_mutex_unlock(&ex->lock);
    t->comm->flight_cur = t->flight;
    return task_exec(t->comm, t);
}

/* Lock held; returns with it held. Runs the head task of ex, which is not a
 * lone send or receive, with the p2p session empty. */
static void exec_run_head(struct shoal_exec *ex)
{
    shoal_task_t *t = ex->head;
    shoal_status_t s = exec_take_run(ex, t);
    pthread_mutex_lock(&ex->lock);
    atomic_store_explicit(&ex->running, 0, memory_order_relaxed);
    task_complete(t, s);
    pthread_cond_broadcast(&ex->done);
    if (ex->head && ex->has_thread)
        pthread_cond_signal(&ex->work);
}

static int list_push(xfer_list_t *l, const shoal_xfer_t *x, shoal_task_t *t)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        shoal_xfer_t *nx = realloc(l->x, cap * sizeof(*nx));
        if (!nx)
            return -1;
        l->x = nx;
        shoal_task_t **nt = realloc(l->task, cap * sizeof(*nt));
        if (!nt)
            return -1;
        l->task = nt;
        l->cap = cap;
    }
    l->x[l->n] = *x;
    l->task[l->n++] = t;
    return 0;
}

/* Lock held. Complete the tasks whose messages are done (sends: flushed
 * too), or every task with status when it is not SHOAL_OK; keeps the rest
 * in order. */
static void list_reap(xfer_list_t *l, int sends, shoal_status_t status)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        shoal_xfer_t *x = &l->x[i];
        int done = status != SHOAL_OK ||
                   (shoal_xfer_complete(x) && (!sends || x->ep->ops->flush(x->ep) == SHOAL_OK));
        if (done) {
            task_complete(l->task[i], status);
        } else {
            l->x[k] = *x;
            l->task[k++] = l->task[i];
        }
    }
    l->n = k;
}

/* Whether a message of l is past its task's deadline (logged). Each message
 * has its own, from when it joined the session, and it is looked at in
 * every step, whatever the others moved: a message that never matches
 * fails at its deadline even while others flow past it. */
static int list_overdue(const xfer_list_t *l, int sends, uint64_t now,
                        struct shoal_comm *comm)
{
    for (size_t i = 0; i < l->n; i++) {
        if (now > l->task[i]->deadline_ns) {
            shoal_fault_cause(comm, "rank %d waited until the deadline for its %s of %zu B "
                              "%s rank %d (%zu B moved)", comm->team.rank,
                              sends ? "send" : "receive", l->x[i].bytes, sends ? "to" : "from",
                              l->x[i].ep->peer, l->x[i].done);
            return 1;
        }
    }
    return 0;
}

/* Lock held: the lone sends and receives at the head of the queue join the
 * session. */
static shoal_status_t session_absorb(struct shoal_exec *ex)
{
    while (ex->head && task_is_p2p(ex->head)) {
        shoal_task_t *t = ex->head;
        int send = t->calls[0].args.kind == SHOAL_COLL_SEND;
        shoal_xfer_t x;
        shoal_call_xfer(t->comm, &t->calls[0], &x);
        if (list_push(send ? &ex->sends : &ex->recvs, &x, t))
            return SHOAL_ERR_NO_MEMORY;
        t->deadline_ns = shoal_deadline_after(t->comm->team.timeout_ns);
        shoal_flight_start(t->comm->flight, t->flight, "p2p", NULL);
        ex->head = t->next;
        if (!ex->head)
            ex->tail = NULL;
    }
    return SHOAL_OK;
}

/* Lock held; returns with it held. One step of the p2p session: take in
 * newly queued sends and receives, move what can move, complete what is
 * done, then look at the deadline of every message left. A failure (or a
 * message past its deadline) fails the whole session: the FIFOs it shares
 * are in an unknown state. */
static void session_step(struct shoal_exec *ex)
{
    struct shoal_comm *comm = ex->comm;
    shoal_status_t s = session_absorb(ex);
    atomic_store_explicit(&ex->running, 1, memory_order_relaxed);
    pthread_mutex_unlock(&ex->lock);
    int moved = 0;
    shoal_coll_begin_p2p(comm);
    if (s == SHOAL_OK)
        s = shoal_xfer_step(&comm->team, ex->sends.x, ex->sends.n, ex->recvs.x, ex->recvs.n, &moved);
    if (s == SHOAL_OK && !moved)
        s = shoal_fault_watch(comm, 0);
    if (s == SHOAL_OK && atomic_load_explicit(&comm->team.aborted, memory_order_acquire))
        s = SHOAL_ERR_ABORTED;
    pthread_mutex_lock(&ex->lock);
    size_t before = ex->sends.n + ex->recvs.n;
    if (s == SHOAL_OK) {
        /* What finished in this step completes whatever comes next; the
         * deadlines are those of the messages left. */
        list_reap(&ex->sends, 1, SHOAL_OK);
        list_reap(&ex->recvs, 0, SHOAL_OK);
        uint64_t now = shoal_coarse_now_ns();
        if (list_overdue(&ex->sends, 1, now, comm) || list_overdue(&ex->recvs, 0, now, comm))
            s = SHOAL_ERR_TIMEOUT;
    }
    if (s != SHOAL_OK && s != SHOAL_ERR_ABORTED) {
        pthread_mutex_unlock(&ex->lock);
        s = shoal_coll_failed(comm, s, "%zu sends and %zu receives", ex->sends.n, ex->recvs.n);
        pthread_mutex_lock(&ex->lock);
    }
    atomic_store_explicit(&ex->running, 0, memory_order_relaxed);
    if (s != SHOAL_OK) {
        list_reap(&ex->sends, 1, s);
        list_reap(&ex->recvs, 0, s);
    }
    if (ex->sends.n + ex->recvs.n < before || s != SHOAL_OK)
        pthread_cond_broadcast(&ex->done);
    if (!moved && s == SHOAL_OK && session_active(ex)) {
        /* Nothing arrived: let the peers' processes run (ranks may share
         * cores) before polling again. */
        pthread_mutex_unlock(&ex->lock);
        sched_yield();
        pthread_mutex_lock(&ex->lock);
    }
}

/* Lock held; returns with it held. Whether ex has work that this thread
 * may do now. */
static int exec_ready(const struct shoal_exec *ex)
{
    /* Acquire: a fast path gives the token back without the lock, and
     * whoever takes it next must see what that run wrote. */
    return !atomic_load_explicit(&ex->running, memory_order_acquire) &&
           (ex->head || session_active(ex));
}

/* Lock held, exec_ready(ex): do the next piece of work of ex (a whole task,
 * or one step of the p2p session). */
static void exec_step(struct shoal_exec *ex)
{
    if (session_active(ex) || task_is_p2p(ex->head))
        session_step(ex);
    else
        exec_run_head(ex);
}

static void *exec_thread(void *arg)
{
    struct shoal_exec *ex = arg;
    pthread_mutex_lock(&ex->lock);
    uint64_t beat = shoal_config_get()->core.heartbeat_ns;
    while (!ex->stop) {
        if (exec_ready(ex)) {
            exec_step(ex);
            continue;
        }
        /* Idle: look for news of dead or failed peers every heartbeat, so
         * that the next call (or ncclCommGetAsyncError) reports it. */
        uint64_t until = shoal_now_ns() + beat;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                              .tv_nsec = (long)(until % 1000000000ull)};
        /* Work left while another thread runs: counted as a napper, as in
         * exec_nap, so that a fast path that ends wakes this thread. */
        int blocked = ex->head || session_active(ex);
        int timed_out = 0;
        if (blocked)
            atomic_fetch_add(&ex->nappers, 1);
        if (!blocked || atomic_load(&ex->running))
            timed_out = pthread_cond_timedwait(&ex->work, &ex->lock, &ts) == ETIMEDOUT;
        if (blocked)
            atomic_fetch_sub(&ex->nappers, 1);
        if (timed_out && !ex->stop && !exec_ready(ex)) {
            pthread_mutex_unlock(&ex->lock);
            shoal_fault_watch(ex->comm, 1);
            pthread_mutex_lock(&ex->lock);
        }
    }
    pthread_mutex_unlock(&ex->lock);
    return NULL;
}


shoal_status_t shoal_exec_create(struct shoal_comm *comm)
{
    struct shoal_exec *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "no memory for the operation queue");
    atomic_init(&ex->thread_mode, shoal_config_get()->algo.progress_thread);
    ex->comm = comm;
    atomic_init(&ex->refs, 1);
    pthread_mutex_init(&ex->lock, NULL);
    cond_init_monotonic(&ex->done);
    cond_init_monotonic(&ex->work);
    comm->exec = ex;
    return SHOAL_OK;
}

int shoal_exec_threaded(const struct shoal_comm *comm)
{
    return atomic_load_explicit(&comm->exec->thread_mode, memory_order_relaxed);
}

int shoal_exec_set_threaded(struct shoal_comm *comm, int threaded)
{
    struct shoal_exec *ex = comm->exec;
    pthread_mutex_lock(&ex->lock);
    int busy = ex->has_thread || ex->head || session_active(ex) || atomic_load(&ex->running);
    if (!busy)
        atomic_store_explicit(&ex->thread_mode, threaded, memory_order_relaxed);
    pthread_mutex_unlock(&ex->lock);
    return busy ? -1 : 0;
}

shoal_status_t shoal_exec_destroy(struct shoal_comm *comm, int drain)
{
    struct shoal_exec *ex = comm->exec;
    if (!ex)
        return SHOAL_OK;
    shoal_status_t first = SHOAL_OK;
    pthread_mutex_lock(&ex->lock);
    if (drain) {
        /* Run what is queued, here if nobody else does. */
        while (ex->head || session_active(ex) || atomic_load(&ex->running)) {
            if (exec_ready(ex)) {
                shoal_task_t *t = ex->head;
                if (t)
                    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
                exec_step(ex);
                if (t && task_done(t) && t->status != SHOAL_OK && first == SHOAL_OK)
                    first = t->status;
                if (t)
                    task_release(t);
            } else {
                exec_nap(ex);
            }
        }
    }
    /* The thread running a task ends it by the task's deadline, or at its
     * next poll of the abort flag when comm was aborted; the naps are
     * bounded, the loop by that thread. */
    while (atomic_load(&ex->running))
        exec_nap(ex);
    list_reap(&ex->sends, 1, SHOAL_ERR_ABORTED);
    list_reap(&ex->recvs, 0, SHOAL_ERR_ABORTED);
    while (ex->head) {
        shoal_task_t *t = ex->head;
        ex->head = t->next;
        task_complete(t, SHOAL_ERR_ABORTED);
    }
    ex->tail = NULL;
    ex->stop = 1;
    pthread_cond_signal(&ex->work);
    pthread_cond_broadcast(&ex->done);
    /* An aborted run notices the flag at its next poll; wait for it so that
     * nobody touches comm once this returns. */
    while (atomic_load(&ex->running))
        exec_nap(ex);
    int joined = ex->has_thread;
    pthread_mutex_unlock(&ex->lock);
    /* Bounded by the progress thread: nothing is running and stop is set,
     * which it reads after every step and every timed wait (a heartbeat
     * at most), and its idle look at the bootstrap never blocks. */
    if (joined)
        pthread_join(ex->thread, NULL);
    comm->exec = NULL;
    /* Requests may still hold tasks of ex: it goes with the last of them. */
    exec_unref(ex);
    return first;
}

void shoal_exec_stop(struct shoal_comm *comm)
{
    struct shoal_exec *ex = comm->exec;
    if (!ex)
        return;
    pthread_mutex_lock(&ex->lock);
    /* Queued tasks have not started: they fail here rather than one by one
     * at the head of the queue. The session's messages belong to whoever
     * runs it, if anyone: its next step sees the flag. */
    while (ex->head) {
        shoal_task_t *t = ex->head;
        ex->head = t->next;
        task_complete(t, SHOAL_ERR_ABORTED);
    }
    ex->tail = NULL;
    if (!atomic_load(&ex->running)) {
        list_reap(&ex->sends, 1, SHOAL_ERR_ABORTED);
        list_reap(&ex->recvs, 0, SHOAL_ERR_ABORTED);
    }
    pthread_cond_broadcast(&ex->done);
    if (ex->has_thread)
        pthread_cond_signal(&ex->work);
    pthread_mutex_unlock(&ex->lock);
}

/* Bytes a call moves out of this rank, roughly: for the flight recorder. */
static size_t call_bytes(const struct shoal_comm *comm, const shoal_call_t *c)
{
    const shoal_coll_args_t *a = &c->args;
    if (c->barrier)
        return 0;
    size_t n = a->count;
    if (a->kind == SHOAL_COLL_ALLTOALLV) {
        n = 0;
        for (int j = 0; j < comm->team.nranks; j++)
            n += a->sendcounts[j];
    } else if (a->kind == SHOAL_COLL_REDUCE_SCATTER || a->kind == SHOAL_COLL_ALLTOALL) {
        n *= (size_t)comm->team.nranks;
    }
    return n * shoal_dtype_bytes(a->dtype);
}

/* Lock held. Append t to its communicator's queue. */
static void exec_append(struct shoal_exec *ex, shoal_task_t *t)
{
    struct shoal_comm *comm = t->comm;
    size_t bytes = 0;
    for (size_t i = 0; i < t->ncalls; i++)
        bytes += call_bytes(comm, &t->calls[i]);
    t->flight = shoal_flight_queue(comm->flight, t->ncalls == 1 ? t->calls[0].what : "a group",
                                   bytes);
    if (ex->tail)
        ex->tail->next = t;
    else
        ex->head = t;
    ex->tail = t;
}

/* Lock held. Queue a task of calls; refs as given. */
static shoal_status_t exec_queue(struct shoal_comm *comm, const shoal_call_t *calls,
                                 size_t ncalls, int refs, int borrow, shoal_task_t **task_p)
{
    struct shoal_exec *ex = comm->exec;
    shoal_task_t *t = calloc(1, sizeof(*t));
    if (!t)
        return SHOAL_ERR_NO_MEMORY;
    if (borrow) {
        t->calls = (shoal_call_t *)calls;
        t->borrowed = 1;
    } else if (ncalls == 1) {
        t->one = calls[0];
        t->calls = &t->one;
    } else {
        t->calls = malloc(ncalls * sizeof(*calls));
        if (!t->calls) {
            free(t);
            return SHOAL_ERR_NO_MEMORY;
        }
        memcpy(t->calls, calls, ncalls * sizeof(*calls));
    }
    t->ncalls = ncalls;
    t->comm = comm;
    t->ex = ex;
    atomic_init(&t->refs, refs);
    atomic_init(&t->done, 0);
    atomic_fetch_add_explicit(&ex->refs, 1, memory_order_relaxed);
    exec_append(ex, t);
    *task_p = t;
    return SHOAL_OK;
}

/* Lock held: wake the progress thread, starting it on first use. */
static shoal_status_t exec_kick(struct shoal_exec *ex)
{
    if (!atomic_load_explicit(&ex->thread_mode, memory_order_relaxed))
        return SHOAL_OK;
    if (!ex->has_thread) {
        int e = pthread_create(&ex->thread, NULL, exec_thread, ex);
        if (e) {
            shoal_error(INIT, "rank %d: cannot start the progress thread: %s",
                        ex->comm->team.rank, strerror(e));
            return SHOAL_ERR_SYSTEM;
        }
        ex->has_thread = 1;
        /* Named for ps, top and debuggers (15 characters at most). */
        pthread_setname_np(ex->thread, "shoal progress");
    }
    pthread_cond_signal(&ex->work);
    return SHOAL_OK;
}

/* t's executor's lock held: wait for t, running queued tasks of its queue
 * when nobody else does (only up to t's completion). Each nap is bounded;
 * the loop ends by t's own deadline, or, once comm is aborted, at the
 * runner's next poll of the flag (or at once, for a queued t: shoal_exec_stop). */
static void exec_wait_locked(shoal_task_t *t)
{
    struct shoal_exec *ex = t->ex;
    while (!task_done(t)) {
        if (exec_ready(ex))
            exec_step(ex);
        else
            exec_nap(ex);
    }
}

shoal_status_t shoal_exec_run(struct shoal_comm *comm, const shoal_call_t *calls, size_t ncalls)
{
    /* A blocking call's task lives on its stack: the hot path allocates
     * nothing. The call outlives the task, so calls need no copy; the only
     * reference is the queue's, dropped when the task completes. The caller
     * has comm entered, so its executor lives throughout: the task takes no
     * reference to it. */
    struct shoal_exec *ex = comm->exec;
    shoal_task_t t;
    /* Not the whole task: its storage for a copied call is large and
     * unused here. */
    memset(&t, 0, offsetof(shoal_task_t, one));
    t.comm = comm;
    t.ex = ex;
    t.calls = (shoal_call_t *)calls;
    t.ncalls = ncalls;
    t.on_stack = 1;
    atomic_init(&t.refs, 1);
    atomic_init(&t.done, 0);
    pthread_mutex_lock(&ex->lock);
    exec_append(ex, &t);
    if (ex->head != &t || !exec_ready(ex) || task_is_p2p(&t)) {
        exec_wait_locked(&t);
        pthread_mutex_unlock(&ex->lock);
        return t.status;
    }
    /* The fast path: nothing queued before it and nobody running. It takes
     * the token and runs here, and since nobody else knows of the task,
     * gives the token back without the lock, waking only the threads that
     * came to wait meanwhile (exec_nap). */
    shoal_status_t s = exec_take_run(ex, &t);
    shoal_calls_end(t.calls, t.ncalls);
    shoal_flight_finish(comm->flight, t.flight, s);
    atomic_store(&ex->running, 0);
    if (atomic_load(&ex->nappers) > 0) {
        pthread_mutex_lock(&ex->lock);
        pthread_cond_broadcast(&ex->done);
        if (ex->has_thread)
            pthread_cond_signal(&ex->work);
        pthread_mutex_unlock(&ex->lock);
    }
    return s;
}

/* A request was bound or completed alone: wake the threads waiting for
 * requests not yet bound, if there are any. Its store and this load are
 * seq_cst, as are the waiter's count and look (unbound_wait), so either the
 * waiter sees the change or this sees the waiter. */
static void unbound_notify(void)
{
    if (atomic_load(&unbound_waiters) == 0)
        return;
    /* A waiter initialised the condition before it counted itself. */
    pthread_mutex_lock(&unbound_lock);
    pthread_cond_broadcast(&unbound_cond);
    pthread_mutex_unlock(&unbound_lock);
}

/* Sleep until req is bound or completed, or a nap passed. */
static void unbound_wait(struct shoal_request *req)
{
    pthread_once(&unbound_once, unbound_init);
    atomic_fetch_add(&unbound_waiters, 1);
    pthread_mutex_lock(&unbound_lock);
    if (!atomic_load(&req->done) && !atomic_load(&req->task)) {
        struct timespec ts = nap_until();
        pthread_cond_timedwait(&unbound_cond, &unbound_lock, &ts);
    }
    pthread_mutex_unlock(&unbound_lock);
    atomic_fetch_sub(&unbound_waiters, 1);
}

shoal_status_t shoal_exec_submit(struct shoal_comm *comm, const shoal_call_t *calls,
                                 size_t ncalls, shoal_request_t *reqs, size_t nreqs,
                                 shoal_task_t **task_p)
{
    struct shoal_exec *ex = comm->exec;
    shoal_task_t *t;
    pthread_mutex_lock(&ex->lock);
    /* A submitter that waits for the task keeps its calls alive until then:
     * no copy. */
    shoal_status_t s = exec_queue(comm, calls, ncalls, 1 + (int)nreqs + (task_p != NULL),
                                  task_p != NULL, &t);
    if (s == SHOAL_OK) {
        for (size_t i = 0; i < nreqs; i++)
            atomic_store(&reqs[i]->task, t);
        s = exec_kick(ex);
        /* The task stays queued: a caller-mode wait or destroy runs it. */
        if (task_p)
            *task_p = t;
        s = SHOAL_OK;
    }
    pthread_mutex_unlock(&ex->lock);
    if (s != SHOAL_OK)
        shoal_comm_fail(comm, s, "%s: no memory to queue the operation", calls[0].what);
    else if (nreqs)
        unbound_notify();
    return s;
}

shoal_status_t shoal_exec_wait(shoal_task_t *t)
{
    struct shoal_exec *ex = t->ex;
    pthread_mutex_lock(&ex->lock);
    exec_wait_locked(t);
    shoal_status_t s = t->status;
    pthread_mutex_unlock(&ex->lock);
    task_release(t);
    return s;
}

shoal_status_t shoal_request_new(shoal_request_t *req_p)
{
    struct shoal_request *r = shoal_handle_alloc(&req_pool);
    if (!r)
        return SHOAL_ERR_NO_MEMORY;
    /* A stale handle of the shell's last request may be reading magic
     * (only): the other fields are reset before it says live again. */
    atomic_store_explicit(&r->task, NULL, memory_order_relaxed);
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    r->status = SHOAL_OK;
    atomic_store_explicit(&r->magic, REQ_LIVE, memory_order_release);
    *req_p = r;
    return SHOAL_OK;
}

void shoal_request_complete(shoal_request_t req, shoal_status_t status)
{
    req->status = status;
    atomic_store(&req->done, 1);
    unbound_notify();
}

/* Whether req is a live request of this process: a shell of the request
 * pool with its magic set. */
static int req_live(const struct shoal_request *req)
{
    return shoal_handle_owns(&req_pool, req) &&
           atomic_load_explicit(&((struct shoal_request *)req)->magic, memory_order_acquire) ==
               REQ_LIVE;
}

/* Whether req completed, with its status in *status_p. */
static int req_state(const struct shoal_request *req, shoal_status_t *status_p)
{
    struct shoal_request *r = (struct shoal_request *)req;
    if (atomic_load_explicit(&r->done, memory_order_acquire)) {
        *status_p = r->status;
        return 1;
    }
    shoal_task_t *t = atomic_load_explicit(&r->task, memory_order_acquire);
    if (t && task_done(t)) {
        *status_p = t->status;
        return 1;
    }
    return 0;
}

/* Free a completed req, unless another thread freed it first (a misuse:
 * requests belong to one thread); 0 on success. */
static int req_free(struct shoal_request *req)
{
    uint64_t live = REQ_LIVE;
    if (!atomic_compare_exchange_strong(&req->magic, &live, 0))
        return -1;
    shoal_task_t *t = atomic_load_explicit(&req->task, memory_order_relaxed);
    shoal_handle_free(&req_pool, req);
    if (t)
        task_release(t);
    return 0;
}

static shoal_status_t req_bad(const char *caller, const void *req)
{
    shoal_error(ALGO, "%s: request %p is %s", caller, req,
                req ? "not a pending request (completed and freed already?)"
                    : "NULL (already completed?)");
    return SHOAL_ERR_INVALID_ARG;
}

shoal_status_t shoal_test(shoal_request_t *reqp, int *done_p)
{
    if (!reqp || !done_p)
        return req_bad("shoal_test", NULL);
    struct shoal_request *req = *reqp;
    if (!req || !req_live(req))
        return req_bad("shoal_test", req);
    shoal_status_t s = SHOAL_OK;
    int done = req_state(req, &s);
    shoal_task_t *t = atomic_load_explicit(&req->task, memory_order_acquire);
    /* Caller-driven progress: run what precedes and includes this request,
     * unless another thread is already running the queue. The request's
     * reference to its task keeps the executor. */
    if (!done && t && !atomic_load_explicit(&t->ex->thread_mode, memory_order_relaxed)) {
        struct shoal_exec *ex = t->ex;
        pthread_mutex_lock(&ex->lock);
        while (!done && exec_ready(ex)) {
            /* A step of the p2p session never waits; stop after one so that
             * test stays a poll when the message needs the peer's progress. */
            int p2p = session_active(ex) || task_is_p2p(ex->head);
            exec_step(ex);
            done = req_state(req, &s);
            if (p2p)
                break;
        }
        /* This poll stops driving the queue with work left and nobody
         * running it: a waiter asleep on it since it found the token taken
         * would not otherwise hear of that before a completion. */
        if (exec_ready(ex))
            pthread_cond_broadcast(&ex->done);
        pthread_mutex_unlock(&ex->lock);
    }
    if (done) {
        if (req_free(req))
            return req_bad("shoal_test", req);
        *reqp = NULL;
    }
    *done_p = done;
    return done ? s : SHOAL_OK;
}

shoal_status_t shoal_wait(shoal_request_t *reqp)
{
    if (!reqp)
        return req_bad("shoal_wait", NULL);
    struct shoal_request *req = *reqp;
    if (!req || !req_live(req))
        return req_bad("shoal_wait", req);
    shoal_status_t s = SHOAL_OK;
    /* A request still unbound while this thread's group is open was
     * recorded in that group (requests belong to one thread): it can only
     * run at the group's end, which this wait would never reach. */
    if (!req_state(req, &s) && !atomic_load_explicit(&req->task, memory_order_acquire) &&
        shoal_group_active()) {
        shoal_error(ALGO, "shoal_wait: request %p belongs to this thread's open group, which "
                    "runs it at shoal_group_end; wait for it after that", (void *)req);
        return SHOAL_ERR_INVALID_ARG;
    }
    while (!req_state(req, &s)) {
        shoal_task_t *t = atomic_load_explicit(&req->task, memory_order_acquire);
        if (t) {
            pthread_mutex_lock(&t->ex->lock);
            exec_wait_locked(t);
            pthread_mutex_unlock(&t->ex->lock);
        } else {
            unbound_wait(req);
        }
    }
    if (req_free(req))
        return req_bad("shoal_wait", req);
    *reqp = NULL;
    return s;
}

shoal_status_t shoal_wait_all(size_t n, shoal_request_t *reqs)
{
    if (n > 0 && !reqs)
        return req_bad("shoal_wait_all", NULL);
    shoal_status_t first = SHOAL_OK;
    for (size_t i = 0; i < n; i++) {
        shoal_status_t s = shoal_wait(&reqs[i]);
        if (s != SHOAL_OK && first == SHOAL_OK)
            first = s;
    }
    return first;
}
