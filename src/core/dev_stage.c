/* The staged path of stream-ordered calls (dev_stage.h).
 *
 * A slot is one pinned host allocation: three flags, each on a cache line
 * of its own (the stream writes ready and free, the host writes done), then
 * the payload. Each use of a slot has a sequence number of the
 * communicator's; a flag holds the number of the last use that reached
 * it, so the host and the stream compare numbers and never reset a flag.
 * A slot is busy from its staging until its free flag shows its number:
 * the stream has copied the result out and will not touch it again. */
#include "dev_stage.h"
#include "dev_priv.h"

#include "base/clock.h"
#include "base/config.h"
#include "base/dev.h"
#include "base/log.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FLAG_READY = 0, FLAG_DONE = 16, FLAG_FREE = 32 }; /* uint32_t index, 64 B apart */
#define SLOT_HEAD 256                                      /* bytes before the payload */
#define SLOT_ALIGN 64

static pthread_mutex_t dev_create_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t flag_load(const struct shoal_dev_slot *s, int which)
{
    return atomic_load_explicit((_Atomic uint32_t *)&s->flags[which], memory_order_acquire);
}

static int flag_reached(uint32_t flag, uint32_t seq)
{
    return (int32_t)(flag - seq) >= 0;
}

static unsigned char *slot_payload(const struct shoal_dev_slot *s)
{
    return (unsigned char *)s->flags + SLOT_HEAD;
}

static struct shoal_dev_comm *dev_comm(struct shoal_comm *comm, const shoal_dev_ops_t *ops)
{
    pthread_mutex_lock(&dev_create_lock);
    if (!comm->dev) {
        struct shoal_dev_comm *d = calloc(1, sizeof(*d));
        if (d) {
            pthread_mutex_init(&d->lock, NULL);
            d->ops = ops;
            comm->dev = d;
        }
    }
    pthread_mutex_unlock(&dev_create_lock);
    return comm->dev;
}

/* Lock held. The slots whose streams are past them become free; a free
 * slot beyond what SHOAL_CUDA_STAGE_MAX keeps is given back. */
static void slots_reap(struct shoal_dev_comm *d)
{
    size_t max = shoal_config_get()->cuda.stage_max;
    for (struct shoal_dev_slot **sp = &d->slots; *sp;) {
        struct shoal_dev_slot *s = *sp;
        if (s->busy && flag_reached(flag_load(s, FLAG_FREE), s->seq))
            s->busy = 0;
        if (!s->busy && d->kept > max) {
            *sp = s->next;
            d->kept -= s->cap;
            d->ops->host_free(s->flags);
            free(s);
            continue;
        }
        sp = &s->next;
    }
}

/* Lock held. A free slot of at least bytes (the smallest such), else a new
 * one; NULL when out of pinned memory (the module says why). */
static struct shoal_dev_slot *slot_take(struct shoal_dev_comm *d, size_t bytes)
{
    slots_reap(d);
    struct shoal_dev_slot *best = NULL;
    for (struct shoal_dev_slot *s = d->slots; s; s = s->next) {
        if (!s->busy && s->cap >= bytes && (!best || s->cap < best->cap))
            best = s;
    }
    if (!best) {
        best = calloc(1, sizeof(*best));
        void *mem = NULL;
        /* Whole 64 KiB units, so that sizes that vary a little reuse slots. */
        size_t cap = (bytes + 65535) & ~(size_t)65535;
        if (!best || d->ops->host_alloc(SLOT_HEAD + cap, &mem) != SHOAL_OK) {
            free(best);
            return NULL;
        }
        memset(mem, 0, SLOT_HEAD);
        best->flags = mem;
        best->cap = cap;
        best->next = d->slots;
        d->slots = best;
        d->kept += cap;
    }
    best->busy = 1;
    best->seq = ++d->seq;
    /* Flags hold the last use's number, one below this one, so nothing
     * reads as reached before the stream or the host writes it. */
    return best;
}

static int spans_overlap(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen && blen && a < b + blen && b < a + alen;
}

void shoal_dev_stage_layout(const shoal_call_t *c, shoal_dev_layout_t *l)
{
    const char *sp = c->args.sendbuf, *rp = c->args.recvbuf;
    size_t in = c->in_bytes, out = c->out_bytes;
    memset(l, 0, sizeof(*l));
    l->dev_in = in && shoal_dev_kind(sp) == SHOAL_DEV_MEM_DEVICE;
    l->dev_out = out && shoal_dev_kind(rp) == SHOAL_DEV_MEM_DEVICE;
    /* In place: one region of the slot holds both, as they lie. */
    l->together = (l->dev_in || l->dev_out) && spans_overlap(sp, in, rp, out);
    if (l->together) {
        const char *base = sp < rp ? sp : rp;
        const char *end = sp + in > rp + out ? sp + in : rp + out;
        l->need = (size_t)(end - base);
        l->in_off = (size_t)(sp - base);
        l->out_off = (size_t)(rp - base);
    } else {
        size_t in_room = l->dev_in ? (in + SLOT_ALIGN - 1) & ~(size_t)(SLOT_ALIGN - 1) : 0;
        l->out_off = in_room;
        l->need = in_room + (l->dev_out ? out : 0);
    }
}

/* The stream side before the host's: the device input into the slot, then
 * the ready flag. */
static shoal_status_t stage_pre(const shoal_dev_ops_t *ops, const shoal_call_t *c,
                                const shoal_dev_layout_t *l)
{
    struct shoal_dev_slot *s = c->slot;
    shoal_status_t r = SHOAL_OK;
    if (c->stager)
        r = c->stager->pre(ops, c, slot_payload(s));
    else if (l->dev_in)
        r = ops->copy(slot_payload(s) + l->in_off, c->args.sendbuf, c->in_bytes, c->stream);
    if (r == SHOAL_OK)
        r = ops->flag_write(&s->flags[FLAG_READY], c->seq, c->stream);
    return r;
}

/* After the host's: wait for the done flag, the result out of the slot,
 * the free flag. Then c's args point at the host side's memory. */
static shoal_status_t stage_post(const shoal_dev_ops_t *ops, shoal_call_t *c,
                                 const shoal_dev_layout_t *l)
{
    struct shoal_dev_slot *s = c->slot;
    unsigned char *pay = slot_payload(s);
    shoal_status_t r = ops->flag_wait(&s->flags[FLAG_DONE], c->seq, c->stream);
    if (r == SHOAL_OK && c->stager)
        r = c->stager->post(ops, c, pay);
    else if (r == SHOAL_OK && l->dev_out)
        r = ops->copy(c->args.recvbuf, pay + l->out_off, c->out_bytes, c->stream);
    if (r == SHOAL_OK)
        r = ops->flag_write(&s->flags[FLAG_FREE], c->seq, c->stream);
    if (c->stager)
        return r;
    if (l->dev_in || l->together)
        c->args.sendbuf = pay + l->in_off;
    if (l->dev_out || l->together)
        c->args.recvbuf = pay + l->out_off;
    return r;
}

shoal_status_t shoal_dev_stage(struct shoal_comm *comm, shoal_call_t *calls, size_t ncalls)
{
    const shoal_dev_ops_t *ops = NULL;
    for (size_t i = 0; i < ncalls && !ops; i++) {
        if (calls[i].on_stream && !(ops = shoal_dev_get()))
            return shoal_comm_fail(comm, SHOAL_ERR_UNSUPPORTED, "%s: a stream-ordered call "
                                   "needs CUDA: %s", calls[i].what, shoal_dev_why());
    }
    if (!ops)
        return SHOAL_OK;
    struct shoal_dev_comm *d = dev_comm(comm, ops);
    shoal_dev_layout_t *lay = calloc(ncalls, sizeof(*lay));
    if (!d || !lay) {
        free(lay);
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory", calls[0].what);
    }
    /* Every call's input first, then every call's wait: the host side
     * runs the task's calls together, so a stream that held at one call's
     * done flag before raising a later call's ready flag would wait for
     * itself. */
    shoal_status_t s = SHOAL_OK;
    const char *what = calls[0].what;
    pthread_mutex_lock(&d->lock);
    for (size_t i = 0; i < ncalls && s == SHOAL_OK; i++) {
        shoal_call_t *c = &calls[i];
        if (!c->on_stream)
            continue;
        what = c->what;
        /* The direct path moves the data itself: the stream only orders.
         * A call with a stager of its own stages in its own layout. */
        if (c->stager)
            lay[i].need = c->stager->need(c);
        else if (shoal_dev_direct_takes(comm, c))
            c->run = shoal_dev_direct_run;
        else
            shoal_dev_stage_layout(c, &lay[i]);
        c->slot = slot_take(d, lay[i].need);
        if (!c->slot) {
            s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no pinned memory for %zu bytes "
                                "of staging: %s", c->what, lay[i].need, ops->why());
            break;
        }
        c->seq = c->slot->seq;
        s = stage_pre(ops, c, &lay[i]);
    }
    for (size_t i = 0; i < ncalls && s == SHOAL_OK; i++) {
        if (calls[i].on_stream) {
            what = calls[i].what;
            s = stage_post(ops, &calls[i], &lay[i]);
        }
    }
    pthread_mutex_unlock(&d->lock);
    free(lay);
    if (s != SHOAL_OK && s != SHOAL_ERR_NO_MEMORY)
        s = shoal_comm_fail(comm, s, "%s: cannot queue its work on its stream: %s", what,
                            ops->why());
    if (s != SHOAL_OK) {
        /* The calls will not run: their done flags rise now, so the
         * streams that got their waits go on. A slot whose free flag
         * never comes stays busy. */
        shoal_dev_task_end(calls, ncalls);
    }
    return s;
}

/* One rank: the result is the input, so one copy on the stream is the
 * whole call, with no staging and no host side (the direct path's kinds,
 * with a plain op). Pageable host buffers keep the staged path: a copy
 * from or to them may wait for the stream. */
static int one_rank_takes(const struct shoal_comm *comm, const shoal_call_t *call)
{
    const shoal_coll_args_t *a = &call->args;
    if (comm->team.nranks != 1 || !call->on_stream || call->barrier || call->stager ||
        call->comp || call->run || call->premul || a->codec || call->in_bytes != call->out_bytes ||
        !shoal_dev_direct_takes_kind(a->kind))
        return 0;
    return shoal_dev_kind(a->sendbuf) != SHOAL_DEV_MEM_HOST &&
           shoal_dev_kind(a->recvbuf) != SHOAL_DEV_MEM_HOST;
}

int shoal_dev_one_rank(struct shoal_comm *comm, const shoal_call_t *calls, size_t ncalls,
                       shoal_status_t *s_p)
{
    for (size_t i = 0; i < ncalls; i++) {
        if (!one_rank_takes(comm, &calls[i]))
            return 0;
    }
    const shoal_dev_ops_t *ops = shoal_dev_get();
    shoal_status_t s = ops ? SHOAL_OK : SHOAL_ERR_UNSUPPORTED;
    for (size_t i = 0; i < ncalls && s == SHOAL_OK; i++) {
        const shoal_call_t *c = &calls[i];
        if (c->args.sendbuf != c->args.recvbuf &&
            (s = ops->copy(c->args.recvbuf, c->args.sendbuf, c->out_bytes, c->stream)) != SHOAL_OK)
            s = shoal_comm_fail(comm, s, "%s: cannot queue its copy on its stream: %s", c->what,
                                ops->why());
    }
    *s_p = s;
    return 1;
}

/* A stream-ordered call outside a group: its stream side queued, its host
 * side queued for the progress thread, nothing waited for. A call that
 * moves nothing is left out altogether: its stream has nothing to wait
 * for. */
shoal_status_t shoal_call_enqueue(struct shoal_comm *comm, shoal_call_t *call)
{
    if (shoal_call_is_empty(comm, call))
        return SHOAL_OK;
    if (!shoal_exec_threaded(comm))
        return shoal_comm_fail(comm, SHOAL_ERR_UNSUPPORTED, "%s: stream-ordered calls need "
                               "the progress thread, which SHOAL_PROGRESS=caller turns off",
                               call->what);
    shoal_status_t s;
    if (shoal_dev_one_rank(comm, call, 1, &s))
        return s;
    s = shoal_dev_stage(comm, call, 1);
    if (s == SHOAL_OK && (s = shoal_exec_submit(comm, call, 1, NULL, 0, NULL)) != SHOAL_OK)
        shoal_dev_task_end(call, 1);
    return s;
}

int shoal_dev_calls_all(const shoal_call_t *calls, size_t ncalls)
{
    for (size_t i = 0; i < ncalls; i++) {
        if (!calls[i].on_stream)
            return 0;
    }
    return ncalls > 0;
}

shoal_status_t shoal_dev_task_start(struct shoal_comm *comm, const shoal_call_t *calls,
                                    size_t ncalls)
{
    for (size_t i = 0; i < ncalls; i++) {
        const struct shoal_dev_slot *s = calls[i].slot;
        if (!s)
            continue;
        /* The stream may be behind long kernels: no deadline, only the
         * abort flag. Polls back off to 50 us. */
        unsigned spins = 0;
        while (!flag_reached(flag_load(s, FLAG_READY), calls[i].seq)) {
            if (atomic_load_explicit(&comm->team.aborted, memory_order_acquire))
                return SHOAL_ERR_ABORTED;
            if (++spins < 64) {
                sched_yield();
            } else {
                struct timespec ts = {0, 50000};
                nanosleep(&ts, NULL);
            }
        }
    }
    return SHOAL_OK;
}

void shoal_dev_task_end(const shoal_call_t *calls, size_t ncalls)
{
    for (size_t i = 0; i < ncalls; i++) {
        struct shoal_dev_slot *s = calls[i].slot;
        if (s)
            atomic_store_explicit((_Atomic uint32_t *)&s->flags[FLAG_DONE], calls[i].seq,
                                  memory_order_release);
    }
}

int shoal_dev_comm_pending(struct shoal_comm *comm)
{
    struct shoal_dev_comm *d = comm->dev;
    int pending = 0;
    if (!d)
        return 0;
    pthread_mutex_lock(&d->lock);
    for (struct shoal_dev_slot *s = d->slots; s; s = s->next)
        pending |= s->busy && !flag_reached(flag_load(s, FLAG_FREE), s->seq);
    pthread_mutex_unlock(&d->lock);
    return pending;
}

shoal_status_t shoal_dev_comm_release(struct shoal_comm *comm)
{
    if (shoal_dev_comm_pending(comm))
        return SHOAL_INPROGRESS;
    shoal_dev_comm_destroy(comm);
    return SHOAL_OK;
}

size_t shoal_dev_comm_device_bytes(struct shoal_comm *comm)
{
    struct shoal_dev_comm *d = comm->dev;
    if (!d)
        return 0;
    pthread_mutex_lock(&d->lock);
    size_t bytes = d->scratch ? d->scratch_bytes : 0;
    for (shoal_dev_peer_mem_t *m = d->peer_stale; m; m = m->next)
        bytes += m->peer == -1 ? (size_t)m->size : 0;
    pthread_mutex_unlock(&d->lock);
    return bytes;
}

void shoal_dev_comm_destroy(struct shoal_comm *comm)
{
    struct shoal_dev_comm *d = comm->dev;
    if (!d)
        return;
    uint64_t deadline = shoal_deadline_after(comm->team.timeout_ns);
    pthread_mutex_lock(&d->lock);
    for (struct shoal_dev_slot *s = d->slots, *next; s; s = next) {
        next = s->next;
        while (s->busy && !flag_reached(flag_load(s, FLAG_FREE), s->seq) &&
               shoal_coarse_now_ns() < deadline) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        if (s->busy && !flag_reached(flag_load(s, FLAG_FREE), s->seq)) {
            shoal_warn(CUDA, "rank %d: a stream has not passed its staging slot of %zu bytes "
                       "by the timeout; the slot is left allocated", comm->team.rank, s->cap);
        } else {
            d->ops->host_free(s->flags);
        }
        free(s);
    }
    shoal_dev_direct_release(d);
    pthread_mutex_unlock(&d->lock);
    pthread_mutex_destroy(&d->lock);
    free(d);
    comm->dev = NULL;
}
