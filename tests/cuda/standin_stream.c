/* Streams and events of the CUDA driver stand-in.
 *
 * A stream is an ordered queue that a worker thread of its own runs, one
 * op at a time, so work on one stream is ordered and work on different
 * streams overlaps, as on a GPU. The legacy stream (NULL, CU_STREAM_LEGACY
 * and CU_STREAM_PER_THREAD alike) is one more such queue, shared by every
 * thread and device; unlike the driver's, it does not order itself
 * against the other streams.
 *
 * Synchronisation uses mutexes and condition variables, and stream memory
 * operations use acquire loads and release stores on the flag word, so a
 * host thread that synchronises with the stream in any of the documented
 * ways sees the stream's writes, and ThreadSanitizer sees the same
 * happens-before edges.
 *
 * An op that meets a bad address records a fault in its context
 * (standin_ctx_set_fault); from then on the context's queued work is
 * skipped and its stream calls return the fault. */
#include "standin.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Live streams created by cuStreamCreate, for cuCtxSynchronize and the
 * implicit synchronisation of cuMemFree. */
static pthread_mutex_t standin_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *standin_streams;

static struct CUstream_st standin_legacy;
static pthread_once_t standin_legacy_once = PTHREAD_ONCE_INIT;
/* Set once the legacy worker runs; read by threads that never went
 * through the once (cuMemFree's synchronisation), hence atomic. */
static atomic_bool standin_legacy_ok;
static pid_t standin_legacy_pid;

/* How long a wait sleeps between looks at what it waits for, after a few
 * rounds of yielding: long enough not to burn a core, short enough that
 * tests do not slow down. */
#define STANDIN_POLL_NS 20000L
#define STANDIN_POLL_SPINS 64
/* Condition waits that must also notice a fault or the unload wake up at
 * this interval. */
#define STANDIN_RECHECK_NS 10000000L

standin_op_t *standin_op_new(standin_op_kind_t kind, CUcontext ctx)
{
    standin_op_t *op = calloc(1, sizeof(*op));

    if (op != NULL) {
        op->kind = kind;
        op->ctx = ctx;
    }
    return op;
}

static void standin_poll_pause(unsigned spins)
{
    if (spins < STANDIN_POLL_SPINS) {
        sched_yield();
    } else {
        struct timespec ts = {0, STANDIN_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

static bool standin_giving_up(CUcontext ctx)
{
    return standin_ctx_fault(ctx) != CUDA_SUCCESS ||
           atomic_load_explicit(&standin_unloading, memory_order_acquire);
}

/* The conditions of cuda.h's CUstreamWaitValue_flags. */
static bool standin_wait_holds(uint32_t v, uint32_t value, unsigned cond)
{
    switch (cond) {
    case CU_STREAM_WAIT_VALUE_EQ: return v == value;
    case CU_STREAM_WAIT_VALUE_AND: return (v & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR: return ~(v | value) != 0;
    default: return (int32_t)(v - value) >= 0; /* GEQ, with wrap-around */
    }
}

/* The flag belongs to the caller, who writes it with plain C atomics or
 * from another process, so it is read with the compiler's atomic builtins
 * rather than as an _Atomic object. Acquire: what the writer stored before
 * its release store is visible to the work after the wait. */
void standin_wait_value(const volatile uint32_t *addr, uint32_t value, unsigned cond,
                        CUcontext ctx)
{
    for (unsigned spins = 0;; spins++) {
        uint32_t v = __atomic_load_n(addr, __ATOMIC_ACQUIRE);
        if (standin_wait_holds(v, value, cond) || standin_giving_up(ctx))
            return;
        standin_poll_pause(spins);
    }
}

static void standin_deadline(struct timespec *ts)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += STANDIN_RECHECK_NS;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits until the event's generation gen is done, ctx faults or the
 * library unloads. */
static void standin_event_wait(CUevent ev, uint64_t gen, CUcontext ctx)
{
    pthread_mutex_lock(&ev->lock);
    while (ev->done < gen && !standin_giving_up(ctx)) {
        struct timespec ts;
        standin_deadline(&ts);
        pthread_cond_timedwait(&ev->cond, &ev->lock, &ts);
    }
    pthread_mutex_unlock(&ev->lock);
}

static void standin_event_complete(CUevent ev, uint64_t gen)
{
    pthread_mutex_lock(&ev->lock);
    if (ev->done < gen)
        ev->done = gen;
    pthread_cond_broadcast(&ev->cond);
    pthread_mutex_unlock(&ev->lock);
}

static void standin_event_ref(CUevent ev)
{
    pthread_mutex_lock(&ev->lock);
    ev->refs++;
    pthread_mutex_unlock(&ev->lock);
}

static void standin_event_unref(CUevent ev)
{
    int refs;

    pthread_mutex_lock(&ev->lock);
    refs = --ev->refs;
    pthread_mutex_unlock(&ev->lock);
    if (refs > 0)
        return;
    ev->tag = STANDIN_TAG_DEAD;
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}

/* Runs one op on its stream's worker. Event records complete even in a
 * faulted context, so that nothing waits for them forever; all other
 * work of a faulted context is skipped, as a dead GPU context runs none. */
static void standin_op_run(standin_op_t *op)
{
    bool faulted = standin_ctx_fault(op->ctx) != CUDA_SUCCESS;
    char what[128];

    switch (op->kind) {
    case STANDIN_OP_EVENT_RECORD:
        standin_event_complete(op->u.event.event, op->u.event.gen);
        standin_event_unref(op->u.event.event);
        return;
    case STANDIN_OP_EVENT_WAIT:
        if (!faulted)
            standin_event_wait(op->u.event.event, op->u.event.gen, op->ctx);
        standin_event_unref(op->u.event.event);
        return;
    default: break;
    }
    if (faulted)
        return;
    switch (op->kind) {
    case STANDIN_OP_COPY:
        if (!standin_mem_reachable(op->u.copy.dst, op->u.copy.bytes, false) ||
            !standin_mem_reachable(op->u.copy.src, op->u.copy.bytes, false)) {
            snprintf(what, sizeof(what), "copy of %zu bytes from %p to %p", op->u.copy.bytes,
                     op->u.copy.src, op->u.copy.dst);
            standin_ctx_set_fault(op->ctx, CUDA_ERROR_ILLEGAL_ADDRESS, what);
        } else if (op->u.copy.bytes > 0 && op->u.copy.dst != op->u.copy.src) {
            memcpy(op->u.copy.dst, op->u.copy.src, op->u.copy.bytes);
        }
        break;
    case STANDIN_OP_MEMSET:
        if (!standin_mem_reachable(op->u.memset.dst, op->u.memset.bytes, true)) {
            snprintf(what, sizeof(what), "memset of %zu bytes at %p", op->u.memset.bytes,
                     op->u.memset.dst);
            standin_ctx_set_fault(op->ctx, CUDA_ERROR_ILLEGAL_ADDRESS, what);
        } else if (op->u.memset.bytes > 0) {
            memset(op->u.memset.dst, op->u.memset.value, op->u.memset.bytes);
        }
        break;
    case STANDIN_OP_KERNEL: standin_kernel_run(op); break;
    case STANDIN_OP_HOST_FN: op->u.host.fn(op->u.host.data); break;
    case STANDIN_OP_WRITE32:
        /* Release: the stream's earlier work, done on this same thread, is
         * visible to whoever reads the value with acquire. */
        if (!standin_mem_reachable(op->u.mem32.addr, sizeof(uint32_t), true)) {
            snprintf(what, sizeof(what), "write value at %p", (void *)op->u.mem32.addr);
            standin_ctx_set_fault(op->ctx, CUDA_ERROR_ILLEGAL_ADDRESS, what);
        } else {
            __atomic_store_n(op->u.mem32.addr, op->u.mem32.value, __ATOMIC_RELEASE);
        }
        break;
    case STANDIN_OP_WAIT32:
        if (!standin_mem_reachable(op->u.mem32.addr, sizeof(uint32_t), true)) {
            snprintf(what, sizeof(what), "wait value at %p", (void *)op->u.mem32.addr);
            standin_ctx_set_fault(op->ctx, CUDA_ERROR_ILLEGAL_ADDRESS, what);
        } else {
            standin_wait_value(op->u.mem32.addr, op->u.mem32.value, op->u.mem32.flags & 0x3u,
                               op->ctx);
        }
        break;
    default: break;
    }
}

/* The op stays at the head while it runs: pending counts it, so a query
 * or a synchronize sees the stream busy until it is complete. */
static void *standin_worker(void *arg)
{
    CUstream s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        standin_op_t *op;
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->work, &s->lock);
        op = s->head;
        if (op == NULL)
            break;
        pthread_mutex_unlock(&s->lock);
        standin_op_run(op);
        pthread_mutex_lock(&s->lock);
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        if (--s->pending == 0)
            pthread_cond_broadcast(&s->idle);
        free(op);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static CUresult standin_stream_start(CUstream s, CUcontext ctx)
{
    int err;

    s->tag = STANDIN_TAG_STREAM;
    s->ctx = ctx;
    s->head = s->tail = NULL;
    s->pending = 0;
    s->stop = false;
    s->next = NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->idle, NULL);
    err = pthread_create(&s->thread, NULL, standin_worker, s);
    if (err != 0) {
        fprintf(stderr, "libcuda_standin: stream worker: %s\n", strerror(err));
        goto err_destroy_sync;
    }
    return CUDA_SUCCESS;

err_destroy_sync:
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Lets the worker drain the queue, then joins it. */
static void standin_stream_stop(CUstream s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    s->tag = STANDIN_TAG_DEAD;
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
}

static void standin_legacy_start(void)
{
    standin_legacy_pid = getpid();
    atomic_store_explicit(&standin_legacy_ok,
                          standin_stream_start(&standin_legacy, NULL) == CUDA_SUCCESS,
                          memory_order_release);
}

/* The worker of the legacy stream would outlive an unload (dlclose) and
 * run code that is gone: it drains and is joined here. Waits give up
 * first, so a wait nobody will release cannot hang the unload. Only the
 * process that started the worker has it to join. */
__attribute__((destructor)) static void standin_stream_fini(void)
{
    atomic_store_explicit(&standin_unloading, true, memory_order_release);
    if (atomic_load_explicit(&standin_legacy_ok, memory_order_acquire) &&
        standin_legacy_pid == getpid()) {
        atomic_store_explicit(&standin_legacy_ok, false, memory_order_release);
        standin_stream_stop(&standin_legacy);
    }
}

static bool standin_is_legacy(CUstream s)
{
    return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult standin_stream_resolve(CUstream s, CUstream *q, CUcontext *ctx)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (standin_is_legacy(s)) {
        *ctx = standin_ctx_current();
        if (*ctx == NULL)
            return CUDA_ERROR_INVALID_CONTEXT;
        pthread_once(&standin_legacy_once, standin_legacy_start);
        if (!atomic_load_explicit(&standin_legacy_ok, memory_order_acquire))
            return CUDA_ERROR_OUT_OF_MEMORY;
        *q = &standin_legacy;
        return CUDA_SUCCESS;
    }
    if (s->tag != STANDIN_TAG_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    *q = s;
    *ctx = s->ctx;
    return CUDA_SUCCESS;
}

CUresult standin_stream_push(CUstream q, standin_op_t *op)
{
    CUresult fault = standin_ctx_fault(op->ctx);

    if (fault != CUDA_SUCCESS)
        return fault;
    op->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->tail != NULL)
        q->tail->next = op;
    else
        q->head = op;
    q->tail = op;
    q->pending++;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->lock);
    return CUDA_SUCCESS;
}

static void standin_stream_wait_idle(CUstream s)
{
    pthread_mutex_lock(&s->lock);
    while (s->pending > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

void standin_stream_sync_legacy(void)
{
    if (atomic_load_explicit(&standin_legacy_ok, memory_order_acquire))
        standin_stream_wait_idle(&standin_legacy);
}

void standin_stream_sync_all(CUcontext ctx)
{
    standin_stream_sync_legacy();
    pthread_mutex_lock(&standin_streams_lock);
    for (CUstream s = standin_streams; s != NULL; s = s->next) {
        if (ctx == NULL || s->ctx == ctx)
            standin_stream_wait_idle(s);
    }
    pthread_mutex_unlock(&standin_streams_lock);
}

/* Both flags are accepted; the stand-in has no implicit synchronisation
 * with the legacy stream for CU_STREAM_NON_BLOCKING to turn off. */
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUcontext ctx = standin_ctx_current();
    CUstream s;
    CUresult res;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (phStream == NULL || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    res = standin_stream_start(s, ctx);
    if (res != CUDA_SUCCESS)
        goto err_free;
    pthread_mutex_lock(&standin_streams_lock);
    s->next = standin_streams;
    standin_streams = s;
    pthread_mutex_unlock(&standin_streams_lock);
    *phStream = s;
    return CUDA_SUCCESS;

err_free:
    free(s);
    return res;
}

/* The driver returns at once and frees the stream when its work is done;
 * the stand-in drains it and joins the worker before returning, which a
 * caller cannot tell apart except by the time it takes. */
CUresult cuStreamDestroy(CUstream hStream)
{
    CUstream *link;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (standin_is_legacy(hStream) || hStream->tag != STANDIN_TAG_STREAM)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&standin_streams_lock);
    for (link = &standin_streams; *link != NULL && *link != hStream; link = &(*link)->next)
        ;
    if (*link != NULL)
        *link = hStream->next;
    pthread_mutex_unlock(&standin_streams_lock);
    standin_stream_stop(hStream);
    free(hStream);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);

    if (res != CUDA_SUCCESS)
        return res;
    standin_stream_wait_idle(q);
    return standin_ctx_fault(ctx);
}

CUresult cuStreamQuery(CUstream hStream)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);
    bool busy;

    if (res != CUDA_SUCCESS)
        return res;
    res = standin_ctx_fault(ctx);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&q->lock);
    busy = q->pending > 0;
    pthread_mutex_unlock(&q->lock);
    return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    CUstream q;
    CUcontext ctx;
    CUresult res;

    if (pctx == NULL)
        return standin_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    res = standin_stream_resolve(hStream, &q, &ctx);
    if (res != CUDA_SUCCESS)
        return res;
    *pctx = ctx;
    return CUDA_SUCCESS;
}

/* Queues an op built by the caller, freeing it if the queue refused it. */
static CUresult standin_enqueue(CUstream q, standin_op_t *op)
{
    CUresult res = standin_stream_push(q, op);

    if (res != CUDA_SUCCESS)
        free(op);
    return res;
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);
    standin_op_t *op;

    if (res != CUDA_SUCCESS)
        return res;
    op = standin_op_new(STANDIN_OP_COPY, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = (void *)(uintptr_t)dst;
    op->u.copy.src = (const void *)(uintptr_t)src;
    op->u.copy.bytes = ByteCount;
    return standin_enqueue(q, op);
}

/* The driver rejects a memset of memory it does not know at the call;
 * a range that runs past the allocation's end faults when it runs. */
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);
    standin_alloc_t a;
    standin_op_t *op;

    if (res != CUDA_SUCCESS)
        return res;
    if (N > 0 && !standin_mem_find((uintptr_t)dstDevice, &a))
        return CUDA_ERROR_INVALID_VALUE;
    op = standin_op_new(STANDIN_OP_MEMSET, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.memset.dst = (void *)(uintptr_t)dstDevice;
    op->u.memset.value = uc;
    op->u.memset.bytes = N;
    return standin_enqueue(q, op);
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);
    standin_op_t *op;

    if (res != CUDA_SUCCESS)
        return res;
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    op = standin_op_new(STANDIN_OP_HOST_FN, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn;
    op->u.host.data = userData;
    return standin_enqueue(q, op);
}

/* Shared by both memory operations: the setting, the word's alignment,
 * and memory the device can reach (device, managed, pinned or opened by
 * IPC); pageable host memory is refused at the call. */
static CUresult standin_mem32(CUstream hStream, CUdeviceptr addr, cuuint32_t value,
                              unsigned flags, standin_op_kind_t kind)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_stream_resolve(hStream, &q, &ctx);
    standin_alloc_t a;
    standin_op_t *op;

    if (res != CUDA_SUCCESS)
        return res;
    if (!standin_config.memops)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((addr & 3u) != 0 || !standin_mem_find((uintptr_t)addr, &a))
        return CUDA_ERROR_INVALID_VALUE;
    op = standin_op_new(kind, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.mem32.addr = (uint32_t *)(uintptr_t)addr;
    op->u.mem32.value = value;
    op->u.mem32.flags = flags;
    return standin_enqueue(q, op);
}

CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                             unsigned int flags)
{
    if (flags & ~(0x3u | (unsigned)CU_STREAM_WAIT_VALUE_FLUSH))
        return standin_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return standin_mem32(stream, addr, value, flags, STANDIN_OP_WAIT32);
}

CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                              unsigned int flags)
{
    if (flags & ~(unsigned)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)
        return standin_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return standin_mem32(stream, addr, value, flags, STANDIN_OP_WRITE32);
}

/* Timing and blocking sync change nothing here; interprocess events are
 * not modelled. */
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    CUcontext ctx = standin_ctx_current();
    CUevent ev;

    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (phEvent == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (Flags & CU_EVENT_INTERPROCESS)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->tag = STANDIN_TAG_EVENT;
    ev->ctx = ctx;
    ev->refs = 1;
    pthread_mutex_init(&ev->lock, NULL);
    pthread_cond_init(&ev->cond, NULL);
    *phEvent = ev;
    return CUDA_SUCCESS;
}

static CUresult standin_event_check(CUevent ev)
{
    if (!standin_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ev == NULL || ev->tag != STANDIN_TAG_EVENT)
        return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

/* A record takes the next generation; the op holds a reference until it
 * has run. If the queue refuses it, the generation is marked done at
 * once, so that nothing waits for a record that will never run. */
CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_event_check(hEvent);
    standin_op_t *op;
    uint64_t gen;

    if (res == CUDA_SUCCESS)
        res = standin_stream_resolve(hStream, &q, &ctx);
    if (res != CUDA_SUCCESS)
        return res;
    op = standin_op_new(STANDIN_OP_EVENT_RECORD, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&hEvent->lock);
    gen = ++hEvent->recorded;
    hEvent->refs++;
    pthread_mutex_unlock(&hEvent->lock);
    op->u.event.event = hEvent;
    op->u.event.gen = gen;
    res = standin_stream_push(q, op);
    if (res != CUDA_SUCCESS) {
        standin_event_complete(hEvent, gen);
        standin_event_unref(hEvent);
        free(op);
    }
    return res;
}

/* Waits for the record most recently made before this call; an event
 * never recorded is complete, so the wait is a no-op. */
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    CUstream q;
    CUcontext ctx;
    CUresult res = standin_event_check(hEvent);
    standin_op_t *op;
    uint64_t gen;

    if (res == CUDA_SUCCESS)
        res = standin_stream_resolve(hStream, &q, &ctx);
    if (res != CUDA_SUCCESS)
        return res;
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&hEvent->lock);
    gen = hEvent->recorded;
    pthread_mutex_unlock(&hEvent->lock);
    if (gen == 0)
        return standin_ctx_fault(ctx);
    op = standin_op_new(STANDIN_OP_EVENT_WAIT, ctx);
    if (op == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    standin_event_ref(hEvent);
    op->u.event.event = hEvent;
    op->u.event.gen = gen;
    res = standin_stream_push(q, op);
    if (res != CUDA_SUCCESS) {
        standin_event_unref(hEvent);
        free(op);
    }
    return res;
}

CUresult cuEventSynchronize(CUevent hEvent)
{
    CUresult res = standin_event_check(hEvent);
    uint64_t gen;

    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&hEvent->lock);
    gen = hEvent->recorded;
    pthread_mutex_unlock(&hEvent->lock);
    standin_event_wait(hEvent, gen, hEvent->ctx);
    return standin_ctx_fault(hEvent->ctx);
}

CUresult cuEventQuery(CUevent hEvent)
{
    CUresult res = standin_event_check(hEvent);
    bool done;

    if (res != CUDA_SUCCESS)
        return res;
    res = standin_ctx_fault(hEvent->ctx);
    if (res != CUDA_SUCCESS)
        return res;
    pthread_mutex_lock(&hEvent->lock);
    done = hEvent->done >= hEvent->recorded;
    pthread_mutex_unlock(&hEvent->lock);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Queued records and waits keep their references, so the event lives on
 * until they have run, as the driver allows. */
CUresult cuEventDestroy(CUevent hEvent)
{
    CUresult res = standin_event_check(hEvent);

    if (res != CUDA_SUCCESS)
        return res;
    /* A destroyed handle must not pass the tag check while queued work
     * keeps the memory alive. */
    pthread_mutex_lock(&hEvent->lock);
    hEvent->tag = STANDIN_TAG_DEAD;
    pthread_mutex_unlock(&hEvent->lock);
    standin_event_unref(hEvent);
    return CUDA_SUCCESS;
}
