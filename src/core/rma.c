/* One-sided communication: windows, puts with a signal, signals, and waits
 * for them (see rma.h). */
#include "rma.h"

#include "coll.h"
#include "exec.h"
#include "fault.h"
#include "flight.h"
#include "reg.h"
#include "algos/prims.h"
#include "base/clock.h"
#include "base/dev.h"
#include "base/log.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A one-sided message's header is a signature of kind SHOAL_SIG_RMA: its
 * type in dtype, 1 in op when it ends a put or is a signal (it counts one
 * signal at the target), the window's id in root, the byte offset into the
 * target's part in seq and the bytes it places in count. */
enum {
    RMA_SIGNAL = 0, /* no bytes */
    RMA_DATA = 1,   /* the payload: bytes the target copies into its part */
    RMA_PLACED = 2, /* put_signal's: the bytes are in place already */
};

/* The largest piece one put_signal writes (ib's limit is 1 GiB). */
#define RMA_PUT_PIECE ((size_t)1 << 30)
#define RMA_NAME_MAX 8

/* What a rank tells the others about its part of a window. */
typedef struct {
    uint64_t size;
    uint32_t ok;    /* 0: its arguments or registration failed */
    uint32_t nkeys;
    struct {
        char tl[RMA_NAME_MAX]; /* the transport's name */
        uint32_t len;
        unsigned char key[SHOAL_TL_RKEY_MAX];
    } keys[SHOAL_MAX_TRANSPORTS];
} win_info_t;

struct shoal_win {
    struct shoal_win *next; /* the communicator's live windows */
    uint32_t id;            /* the same on every rank: windows are made together */
    void *buf;
    size_t size;
    void *reg;              /* its registration; NULL for an empty part */
    int device;             /* the device whose memory buf is; -1: host memory */
    atomic_int refs;        /* the list's, and one per one-sided call running on it */
    win_info_t *peers;      /* every rank's part */
};

typedef struct shoal_rma {
    pthread_mutex_t lock;   /* the window list: API threads and the executor */
    struct shoal_win *wins;
    uint32_t nwins;         /* windows made so far: the next one's id */
    uint64_t *arrived;      /* signals that came from each rank (executor only) */
    uint64_t *taken;        /* of those, the ones waits consumed (executor only) */
    /* Copies to and from device memory go on a stream of their own, made
     * on the first (executor only). */
    void *stream;
    int stream_dev;
} shoal_rma_t;

shoal_status_t shoal_rma_create(struct shoal_comm *comm)
{
    shoal_rma_t *r = calloc(1, sizeof(*r));
    if (!r)
        return SHOAL_ERR_NO_MEMORY;
    pthread_mutex_init(&r->lock, NULL);
    comm->rma = r; /* shoal_rma_destroy frees what there is */
    size_t n = (size_t)comm->team.nranks;
    r->arrived = calloc(n, sizeof(*r->arrived));
    r->taken = calloc(n, sizeof(*r->taken));
    return r->arrived && r->taken ? SHOAL_OK : SHOAL_ERR_NO_MEMORY;
}

static void win_unref(struct shoal_win *w)
{
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        free(w->peers);
        free(w);
    }
}

void shoal_rma_destroy(struct shoal_comm *comm)
{
    shoal_rma_t *r = comm->rma;
    if (!r)
        return;
    /* Their registrations leave with the communicator's. */
    while (r->wins) {
        struct shoal_win *w = r->wins;
        r->wins = w->next;
        win_unref(w);
    }
    const shoal_dev_ops_t *ops = shoal_dev_loaded();
    if (r->stream && ops)
        ops->stream_destroy(r->stream);
    pthread_mutex_destroy(&r->lock);
    free(r->arrived);
    free(r->taken);
    free(r);
    comm->rma = NULL;
}

/* comm's live window w with a reference taken, or NULL. */
static struct shoal_win *win_get(shoal_rma_t *r, const struct shoal_win *w)
{
    struct shoal_win *found = NULL;
    pthread_mutex_lock(&r->lock);
    for (struct shoal_win *c = r->wins; c && w; c = c->next) {
        if (c == w) {
            found = c;
            atomic_fetch_add(&found->refs, 1);
            break;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

/* ---- device memory ------------------------------------------------------ */

/* The device whose memory [p, ...) is, or -1 for memory the host reaches
 * (host, pinned, managed). Only a process that uses the CUDA driver can
 * hold device memory: a window's creation loads the module where it does
 * (load), and the puts after it ask the module loaded then. */
static int rma_device_of(const void *p, int load)
{
    const shoal_dev_ops_t *ops = !p ? NULL : load ? shoal_dev_if_driver() : shoal_dev_loaded();
    shoal_dev_mem_t kind;
    int dev = -1;
    if (!ops || ops->classify(p, &kind, &dev) != SHOAL_OK || kind != SHOAL_DEV_MEM_DEVICE)
        return -1;
    return dev;
}

/* n bytes from src to dst, either of which may be memory of device dev
 * (-1: both are the host's): a device's through the communicator's
 * one-sided stream, waited for. Executor only. */
static shoal_status_t rma_copy(struct shoal_comm *comm, void *dst, const void *src, size_t n,
                               int dev)
{
    if (dev < 0) {
        memmove(dst, src, n);
        return SHOAL_OK;
    }
    shoal_rma_t *r = comm->rma;
    const shoal_dev_ops_t *ops = shoal_dev_loaded();
    shoal_status_t s = ops ? SHOAL_OK : SHOAL_ERR_UNSUPPORTED;
    if (s == SHOAL_OK && (!r->stream || r->stream_dev != dev)) {
        if (r->stream)
            ops->stream_destroy(r->stream);
        r->stream = NULL;
        if ((s = ops->stream_create(dev, &r->stream)) == SHOAL_OK)
            r->stream_dev = dev;
    }
    if (s == SHOAL_OK && (s = ops->copy(dst, src, n, r->stream)) == SHOAL_OK)
        s = ops->stream_sync(r->stream);
    if (s != SHOAL_OK)
        shoal_fault_cause(comm, "rank %d: a one-sided copy of %zu B with device %d's memory "
                          "failed: %s", comm->team.rank, n, dev,
                          ops ? ops->why() : shoal_dev_why());
    return s;
}

/* ---- windows ------------------------------------------------------------- */

/* This rank's part: registered, and a key for each open transport that lets
 * peers reach it. */
static int win_offer(struct shoal_comm *comm, struct shoal_win *w, win_info_t *me)
{
    if (w->size == 0)
        return 1;
    if (shoal_comm_register(comm, w->buf, w->size, &w->reg) != SHOAL_OK)
        return 0;
    /* No transport reaches device memory: peers send through the slots,
     * and this rank copies what comes onto its device. */
    if (w->device >= 0)
        return 1;
    const shoal_reg_t *reg = w->reg;
    for (int t = 0; t < comm->team.ntl && me->nkeys < SHOAL_MAX_TRANSPORTS; t++) {
        shoal_tl_ctx_t *ctx = comm->team.tl_ctx[t];
        if (!ctx)
            continue;
        size_t klen = SHOAL_TL_RKEY_MAX;
        unsigned char *key = me->keys[me->nkeys].key;
        if (ctx->ops->rkey_pack(ctx, reg->mem[t], w->buf, w->size, key, &klen) != SHOAL_OK)
            continue;
        snprintf(me->keys[me->nkeys].tl, RMA_NAME_MAX, "%s", ctx->ops->name);
        me->keys[me->nkeys].len = (uint32_t)klen;
        me->nkeys++;
    }
    return 1;
}

shoal_status_t shoal_win_create(void *buf, size_t size, shoal_comm_t comm, shoal_win_t *win_p)
{
    static const char what[] = "shoal_win_create";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    int n = comm->team.nranks;
    /* A bad argument is told to the others, so that every rank fails
     * together rather than some waiting for the exchange. */
    const char *bad = !win_p                               ? "win_p is NULL"
                      : size && !buf                       ? "buf is NULL with a size"
                      : size > UINTPTR_MAX - (uintptr_t)buf ? "the range passes the end of "
                                                              "the address space"
                                                            : NULL;
    struct shoal_win *w = calloc(1, sizeof(*w));
    win_info_t *all = calloc((size_t)n, sizeof(*all));
    if (!w || !all) {
        free(w);
        free(all);
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
        shoal_comm_leave(comm);
        return s;
    }
    win_info_t mine = {.size = size};
    w->buf = buf;
    w->size = size;
    w->device = size ? rma_device_of(buf, 1) : -1;
    if (!bad && !win_offer(comm, w, &mine))
        bad = "its registration failed";
    mine.ok = !bad;
    s = shoal_allgather(&mine, all, sizeof(mine), SHOAL_UINT8, comm);
    int first_bad = -1;
    for (int q = 0; s == SHOAL_OK && q < n && first_bad < 0; q++) {
        if (!all[q].ok)
            first_bad = q;
    }
    if (s == SHOAL_OK && bad)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %s", what, bad);
    else if (s == SHOAL_OK && first_bad >= 0)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: rank %d could not offer its part "
                            "(its own error says why)", what, first_bad);
    if (s != SHOAL_OK) {
        if (w->reg)
            shoal_comm_deregister(comm, w->reg);
        free(w);
        free(all);
        shoal_comm_leave(comm);
        return s;
    }
    shoal_rma_t *r = comm->rma;
    w->peers = all;
    atomic_init(&w->refs, 1);
    pthread_mutex_lock(&r->lock);
    w->id = r->nwins++;
    w->next = r->wins;
    r->wins = w;
    pthread_mutex_unlock(&r->lock);
    atomic_store_explicit(&comm->team.rma_on, 1, memory_order_relaxed);
    *win_p = w;
    shoal_comm_leave(comm);
    return SHOAL_OK;
}

shoal_status_t shoal_win_free(shoal_win_t win, shoal_comm_t comm)
{
    static const char what[] = "shoal_win_free";
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    shoal_rma_t *r = comm->rma;
    struct shoal_win *found = NULL;
    pthread_mutex_lock(&r->lock);
    for (struct shoal_win **pp = &r->wins; win && *pp; pp = &(*pp)->next) {
        if (*pp == win) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&r->lock);
    if (!found) {
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG,
                            "%s: %p is not a live window of this communicator", what,
                            (void *)win);
    } else {
        if (found->reg)
            s = shoal_comm_deregister(comm, found->reg);
        win_unref(found);
    }
    shoal_comm_leave(comm);
    return s;
}

/* ---- the target's side ------------------------------------------------- */

shoal_status_t shoal_rma_message(shoal_team_t *team, int peer, const void *hdr, const void *buf,
                                 size_t len)
{
    struct shoal_comm *comm = shoal_team_comm(team);
    shoal_rma_t *r = comm->rma;
    shoal_sig_t h;
    memcpy(&h, hdr, sizeof(h));
    shoal_status_t s = SHOAL_OK;
    if (h.dtype == RMA_DATA && len > 0) {
        pthread_mutex_lock(&r->lock);
        struct shoal_win *w = r->wins;
        while (w && w->id != (uint32_t)h.root)
            w = w->next;
        if (w && h.seq <= w->size && len <= w->size - h.seq)
            s = rma_copy(comm, (char *)w->buf + h.seq, buf, len, w->device);
        pthread_mutex_unlock(&r->lock);
        if (!w)
            shoal_warn(MEM, "rank %d dropped %zu B that rank %d put into window %d, which this "
                       "rank freed", team->rank, len, peer, (int)h.root);
        else if (h.seq > w->size || len > w->size - h.seq)
            shoal_warn(MEM, "rank %d dropped %zu B that rank %d put at offset %llu of window "
                       "%d, past its %zu B", team->rank, len, peer,
                       (unsigned long long)h.seq, (int)h.root, w->size);
    }
    if (s == SHOAL_OK && h.op)
        r->arrived[peer]++;
    return s;
}

/* ---- the executor's side ------------------------------------------------- */

static shoal_sig_t rma_hdr(int type, int counts, uint32_t win, uint64_t off, uint64_t len)
{
    return (shoal_sig_t){.seq = off, .count = len, .kind = SHOAL_SIG_RMA, .dtype = (uint8_t)type,
                         .op = (uint8_t)counts, .root = (int32_t)win};
}

/* Wait, taking other ranks' one-sided messages meanwhile, until the deadline. */
static shoal_status_t rma_idle(struct shoal_comm *comm, uint64_t deadline, shoal_idle_t *w)
{
    return shoal_prims_idle(&comm->team, deadline, w);
}

/* The index of the transport whose context is ctx, or -1. */
static int rma_tl_index(const shoal_team_t *team, const shoal_tl_ctx_t *ctx)
{
    for (int t = 0; t < team->ntl; t++) {
        if (team->tl_ctx[t] == ctx)
            return t;
    }
    return -1;
}

/* The peer's part of w, attached on ep, when the peer offered a key of ep's
 * transport that ep can use; NULL otherwise. */
static const shoal_rmem_t *rma_attach(const struct shoal_win *w, int peer, shoal_ep_t *ep)
{
    const win_info_t *p = &w->peers[peer];
    for (uint32_t k = 0; k < p->nkeys && k < SHOAL_MAX_TRANSPORTS; k++) {
        if (strncmp(p->keys[k].tl, ep->ops->name, RMA_NAME_MAX) != 0)
            continue;
        const shoal_rmem_t *rmem = NULL;
        if (ep->ops->rkey_attach(ep, p->keys[k].key, p->keys[k].len, &rmem) == SHOAL_OK)
            return rmem;
        return NULL;
    }
    return NULL;
}

/* Straight into the peer's memory (len > 0), in pieces the transport
 * takes, each but the last without a count. SHOAL_ERR_UNSUPPORTED before
 * the first piece: the caller sends through slots instead. */
static shoal_status_t rma_put_direct(struct shoal_comm *comm, shoal_ep_t *ep,
                                     const shoal_rmem_t *rmem, const struct shoal_win *w,
                                     const char *src, size_t len, size_t off,
                                     uint64_t deadline)
{
    shoal_team_t *team = &comm->team;
    int t = rma_tl_index(team, ep->ctx);
    shoal_mem_t *local = t >= 0 && len ? team->hooks->mem_of(team, t, src, len) : NULL;
    size_t at = 0;
    shoal_idle_t idle = {0, 0};
    while (at < len) {
        size_t n = len - at < RMA_PUT_PIECE ? len - at : RMA_PUT_PIECE;
        int last = at + n == len;
        shoal_sig_t h = rma_hdr(RMA_PLACED, last, w->id, off + at, n);
        shoal_status_t s = ep->ops->put_signal(ep, src + at, local, rmem, off + at, n, &h);
        if (s == SHOAL_OK) {
            at += n;
            idle = (shoal_idle_t){0, 0};
            continue;
        }
        if (s == SHOAL_ERR_UNSUPPORTED && at == 0)
            return s;
        if (s != SHOAL_INPROGRESS || (s = rma_idle(comm, deadline, &idle)) != SHOAL_OK)
            return s;
    }
    return SHOAL_OK;
}

/* Through ep's slots: pieces of data for the peer to copy, the last one
 * counting (a lone signal where there are no bytes). */
static shoal_status_t rma_put_slots(struct shoal_comm *comm, shoal_ep_t *ep, uint32_t win,
                                    const char *src, int src_dev, size_t len, size_t off,
                                    uint64_t deadline)
{
    size_t at = 0;
    shoal_idle_t idle = {0, 0};
    for (;;) {
        void *slot;
        size_t cap;
        shoal_status_t s = ep->ops->send_slot(ep, &slot, &cap);
        if (s == SHOAL_INPROGRESS) {
            if ((s = rma_idle(comm, deadline, &idle)) != SHOAL_OK)
                return s;
            continue;
        }
        if (s != SHOAL_OK)
            return s;
        size_t n = len - at < cap ? len - at : cap;
        if (n && (s = rma_copy(comm, slot, src + at, n, src_dev)) != SHOAL_OK)
            return s;
        shoal_sig_t h = rma_hdr(len ? RMA_DATA : RMA_SIGNAL, at + n == len, win, off + at, n);
        if ((s = ep->ops->send_post(ep, n, &h)) != SHOAL_OK)
            return s;
        at += n;
        if (at == len)
            return SHOAL_OK; /* the last piece, or the lone signal, is posted */
        idle = (shoal_idle_t){0, 0};
    }
}

/* Until everything posted to ep has left this process. */
static shoal_status_t rma_flush(struct shoal_comm *comm, shoal_ep_t *ep, uint64_t deadline)
{
    shoal_idle_t idle = {0, 0};
    for (;;) {
        shoal_status_t s = ep->ops->flush(ep);
        if (s != SHOAL_INPROGRESS)
            return s;
        if ((s = rma_idle(comm, deadline, &idle)) != SHOAL_OK)
            return s;
    }
}

static shoal_status_t rma_put(struct shoal_comm *comm, const shoal_call_t *call,
                              uint64_t deadline)
{
    const shoal_coll_args_t *a = &call->args;
    shoal_team_t *team = &comm->team;
    int peer = a->root;
    const char *src = a->sendbuf;
    size_t len = a->count, off = call->rma.off;
    shoal_rma_t *r = comm->rma;
    struct shoal_win *w = NULL;
    if (call->rma.kind == SHOAL_RMA_PUT &&
        (!(w = win_get(r, call->rma.win)) || w->id != call->rma.win_id)) {
        if (w)
            win_unref(w);
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: the window was freed before "
                               "the put ran", call->what);
    }
    shoal_status_t s = SHOAL_OK;
    /* A source in device memory is copied to the host piece by piece. */
    int src_dev = len ? rma_device_of(src, 0) : -1;
    if (peer == team->rank) {
        if (len)
            s = rma_copy(comm, (char *)w->buf + off, src, len,
                         src_dev >= 0 ? src_dev : w->device);
        if (s == SHOAL_OK)
            r->arrived[peer]++;
    } else {
        shoal_ep_t *ep = team->eps[peer];
        const shoal_rmem_t *rmem = w && len && src_dev < 0 ? rma_attach(w, peer, ep) : NULL;
        s = rmem ? rma_put_direct(comm, ep, rmem, w, src, len, off, deadline)
                 : SHOAL_ERR_UNSUPPORTED;
        if (s == SHOAL_ERR_UNSUPPORTED)
            s = rma_put_slots(comm, ep, w ? w->id : 0, src, src_dev, len, off, deadline);
        if (s == SHOAL_OK)
            s = rma_flush(comm, ep, deadline);
        if (s == SHOAL_ERR_TIMEOUT)
            shoal_fault_cause(comm, "rank %d waited for rank %d to take its one-sided "
                              "messages until the deadline", team->rank, peer);
    }
    if (w)
        win_unref(w);
    return s;
}

/* The signals peer brought that no wait consumed yet; takes what arrived
 * from it. *head_p: the header of an operation's piece that stands first
 * in its FIFO (kind 0xff where there is none). */
static uint64_t rma_pending(struct shoal_comm *comm, int peer, shoal_sig_t *head_p)
{
    shoal_ep_t *ep = comm->team.eps[peer];
    if (ep) {
        const void *buf;
        size_t len;
        unsigned char hdr[SHOAL_TL_HDR_BYTES];
        if (shoal_team_recv_slot(&comm->team, ep, &buf, &len, hdr) == SHOAL_OK)
            memcpy(head_p, hdr, sizeof(*head_p));
    }
    return comm->rma->arrived[peer] - comm->rma->taken[peer];
}

static shoal_status_t rma_wait(struct shoal_comm *comm, const shoal_call_t *call,
                               uint64_t deadline)
{
    const shoal_rma_call_t *c = &call->rma;
    shoal_rma_t *r = comm->rma;
    shoal_idle_t idle = {0, 0};
    for (;;) {
        int short_peer = -1;
        shoal_sig_t head;
        for (int i = 0; i < c->nwaits && short_peer < 0; i++) {
            head.kind = 0xff;
            if (rma_pending(comm, c->wait_peer[i], &head) < c->wait_count[i])
                short_peer = i;
        }
        if (short_peer < 0)
            break;
        shoal_status_t s = rma_idle(comm, deadline, &idle);
        if (s == SHOAL_ERR_TIMEOUT) {
            int p = c->wait_peer[short_peer];
            char op[SHOAL_SIG_STR_MAX] = "";
            if (head.kind != 0xff)
                shoal_sig_format(&head, op, sizeof(op));
            shoal_fault_cause(comm, "rank %d waited for %llu signal(s) from rank %d until the "
                              "deadline; %llu came%s%s%s", comm->team.rank,
                              (unsigned long long)c->wait_count[short_peer], p,
                              (unsigned long long)(r->arrived[p] - r->taken[p]),
                              op[0] ? " (a piece of " : "", op, op[0] ? " stands before the "
                                                                       "rest)" : "");
        }
        if (s != SHOAL_OK)
            return s;
    }
    for (int i = 0; i < c->nwaits; i++)
        r->taken[c->wait_peer[i]] += c->wait_count[i];
    return SHOAL_OK;
}

shoal_status_t shoal_rma_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    const shoal_coll_args_t *a = &call->args;
    shoal_sig_t sig = {.count = a->count, .kind = SHOAL_SIG_RMA, .dtype = SHOAL_UINT8,
                       .root = call->rma.kind == SHOAL_RMA_WAIT ? -1 : a->root};
    shoal_comm_set_sig(comm, sig);
    shoal_fault_reset(comm);
    shoal_flight_start(comm->flight, comm->flight_cur, "one-sided", &comm->sig);
    uint64_t deadline = shoal_deadline_after(comm->team.timeout_ns);
    shoal_status_t s = call->rma.kind == SHOAL_RMA_WAIT ? rma_wait(comm, call, deadline)
                                                        : rma_put(comm, call, deadline);
    if (s != SHOAL_OK && s != SHOAL_ERR_INVALID_ARG)
        s = shoal_coll_failed(comm, s, "%s", call->what);
    return s;
}

/* ---- issuing ------------------------------------------------------------ */

/* How a one-sided call is issued: blocking, non-blocking (nb, into
 * *req_p) or stream-ordered (on_stream, on stream). */
typedef struct {
    int nb;
    shoal_request_t *req_p;
    int on_stream;
    void *stream;
} rma_how_t;

/* Calls of this rank's one-sided traffic, issued as any other
 * (shoal_calls_issue); from now on its waits take one-sided messages. A
 * stream-ordered put's device source is staged by its stream, as any
 * stream-ordered call's input (dev_stage.c): the put reads the pinned copy
 * the stream made once it reached the call. */
static shoal_status_t rma_issue(shoal_comm_t comm, shoal_call_t *calls, size_t n,
                                const rma_how_t *how)
{
    for (size_t i = 0; i < n; i++) {
        calls[i].on_stream = how->on_stream;
        calls[i].stream = how->stream;
    }
    atomic_store_explicit(&comm->team.rma_on, 1, memory_order_relaxed);
    return shoal_calls_issue(comm, calls, n, how->nb, how->req_p);
}

static shoal_status_t rma_peer_ok(shoal_comm_t comm, const char *what, int peer)
{
    if (peer < 0 || peer >= comm->team.nranks)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: peer %d is outside 0..%d",
                               what, peer, comm->team.nranks - 1);
    return SHOAL_OK;
}

static shoal_status_t put_issue(const char *what, const void *src, size_t size, int peer,
                                shoal_win_t win, size_t offset, shoal_comm_t comm,
                                const rma_how_t *how)
{
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    struct shoal_win *w = NULL;
    if ((s = rma_peer_ok(comm, what, peer)) != SHOAL_OK)
        ;
    else if (!(w = win_get(comm->rma, win)))
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %p is not a live window of this "
                            "communicator", what, (void *)win);
    else if (size && !src)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: src is NULL with %zu bytes", what,
                            size);
    else if (offset > w->peers[peer].size || size > w->peers[peer].size - offset)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: %zu bytes at offset %zu pass the "
                            "end of rank %d's part of the window (%llu bytes)", what, size,
                            offset, peer, (unsigned long long)w->peers[peer].size);
    uint32_t id = w ? w->id : 0;
    if (w)
        win_unref(w);
    if (s == SHOAL_OK) {
        shoal_call_t c = {.what = what, .run = shoal_rma_run,
                          .args = {.kind = SHOAL_COLL_ALLREDUCE, .sendbuf = src, .count = size,
                                   .dtype = SHOAL_UINT8, .root = peer},
                          .rma = {.kind = SHOAL_RMA_PUT, .win = win, .win_id = id,
                                  .off = offset}};
        s = rma_issue(comm, &c, 1, how);
    }
    shoal_comm_leave(comm);
    return s;
}

static shoal_status_t signal_issue(const char *what, int peer, shoal_comm_t comm,
                                   const rma_how_t *how)
{
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    if ((s = rma_peer_ok(comm, what, peer)) == SHOAL_OK) {
        shoal_call_t c = {.what = what, .run = shoal_rma_run,
                          .args = {.kind = SHOAL_COLL_ALLREDUCE, .dtype = SHOAL_UINT8,
                                   .root = peer},
                          .rma = {.kind = SHOAL_RMA_SIGNAL}};
        s = rma_issue(comm, &c, 1, how);
    }
    shoal_comm_leave(comm);
    return s;
}

/* The waits as calls of at most SHOAL_RMA_WAIT_INLINE distinct peers each,
 * a peer's counts summed; *calls_p (malloc'd) and their number. */
static shoal_status_t wait_calls(shoal_comm_t comm, const char *what,
                                 const shoal_signal_wait_t *waits, size_t nwaits,
                                 shoal_call_t **calls_p, size_t *n_p)
{
    int n = comm->team.nranks;
    uint64_t *per = calloc((size_t)n, sizeof(*per));
    if (!per)
        return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
    shoal_status_t s = SHOAL_OK;
    if (!waits || nwaits == 0)
        s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: no waits (%s)", what,
                            waits ? "nwaits is 0" : "waits is NULL");
    for (size_t i = 0; i < nwaits && s == SHOAL_OK; i++) {
        if ((s = rma_peer_ok(comm, what, waits[i].peer)) != SHOAL_OK)
            break;
        if (waits[i].count == 0)
            s = shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: wait %zu asks for 0 signals",
                                what, i);
        else
            per[waits[i].peer] += waits[i].count;
    }
    size_t npeers = 0;
    for (int p = 0; p < n; p++)
        npeers += per[p] > 0;
    size_t ncalls = (npeers + SHOAL_RMA_WAIT_INLINE - 1) / SHOAL_RMA_WAIT_INLINE;
    shoal_call_t *calls = s == SHOAL_OK ? calloc(ncalls, sizeof(*calls)) : NULL;
    if (s == SHOAL_OK && !calls)
        s = shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int p = 0, k = 0; s == SHOAL_OK && p < n; p++) {
        if (!per[p])
            continue;
        shoal_call_t *c = &calls[k / SHOAL_RMA_WAIT_INLINE];
        if (!c->what)
            *c = (shoal_call_t){.what = what, .run = shoal_rma_run,
                                .args = {.kind = SHOAL_COLL_ALLREDUCE, .dtype = SHOAL_UINT8,
                                         .root = -1},
                                .rma = {.kind = SHOAL_RMA_WAIT}};
        c->rma.wait_peer[c->rma.nwaits] = p;
        c->rma.wait_count[c->rma.nwaits++] = per[p];
        k++;
    }
    free(per);
    *calls_p = calls;
    *n_p = ncalls;
    return s;
}

static shoal_status_t wait_issue(const char *what, const shoal_signal_wait_t *waits,
                                 size_t nwaits, shoal_comm_t comm, const rma_how_t *how)
{
    shoal_status_t s = shoal_comm_enter(comm, what);
    if (s != SHOAL_OK)
        return s;
    shoal_call_t *calls = NULL;
    size_t n = 0;
    s = wait_calls(comm, what, waits, nwaits, &calls, &n);
    /* The calls are copied when queued or recorded, and a blocking run
     * uses them before it returns. */
    if (s == SHOAL_OK)
        s = rma_issue(comm, calls, n, how);
    free(calls);
    shoal_comm_leave(comm);
    return s;
}

shoal_status_t shoal_put_signal(const void *src, size_t size, int peer, shoal_win_t win,
                                size_t offset, shoal_comm_t comm)
{
    return put_issue("shoal_put_signal", src, size, peer, win, offset, comm, &(rma_how_t){0});
}

shoal_status_t shoal_iput_signal(const void *src, size_t size, int peer, shoal_win_t win,
                                 size_t offset, shoal_comm_t comm, shoal_request_t *req_p)
{
    return put_issue("shoal_iput_signal", src, size, peer, win, offset, comm,
                     &(rma_how_t){.nb = 1, .req_p = req_p});
}

shoal_status_t shoal_put_signal_stream(const void *src, size_t size, int peer, shoal_win_t win,
                                       size_t offset, shoal_comm_t comm, void *stream)
{
    return put_issue("shoal_put_signal_stream", src, size, peer, win, offset, comm,
                     &(rma_how_t){.on_stream = 1, .stream = stream});
}

shoal_status_t shoal_signal(int peer, shoal_comm_t comm)
{
    return signal_issue("shoal_signal", peer, comm, &(rma_how_t){0});
}

shoal_status_t shoal_isignal(int peer, shoal_comm_t comm, shoal_request_t *req_p)
{
    return signal_issue("shoal_isignal", peer, comm, &(rma_how_t){.nb = 1, .req_p = req_p});
}

shoal_status_t shoal_signal_stream(int peer, shoal_comm_t comm, void *stream)
{
    return signal_issue("shoal_signal_stream", peer, comm,
                        &(rma_how_t){.on_stream = 1, .stream = stream});
}

shoal_status_t shoal_wait_signal(const shoal_signal_wait_t *waits, size_t nwaits,
                                 shoal_comm_t comm)
{
    return wait_issue("shoal_wait_signal", waits, nwaits, comm, &(rma_how_t){0});
}

shoal_status_t shoal_iwait_signal(const shoal_signal_wait_t *waits, size_t nwaits,
                                  shoal_comm_t comm, shoal_request_t *req_p)
{
    return wait_issue("shoal_iwait_signal", waits, nwaits, comm,
                      &(rma_how_t){.nb = 1, .req_p = req_p});
}

shoal_status_t shoal_wait_signal_stream(const shoal_signal_wait_t *waits, size_t nwaits,
                                        shoal_comm_t comm, void *stream)
{
    return wait_issue("shoal_wait_signal_stream", waits, nwaits, comm,
                      &(rma_how_t){.on_stream = 1, .stream = stream});
}
