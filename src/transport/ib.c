/* The RDMA verbs transport: its data path over the endpoints' FIFOs, the
 * watch on peers and on the device, and its ops table (ib_priv.h says how
 * an endpoint is made; ib_conn.c makes it). Without rdma-core's headers
 * the transport is built as one that is never open. */
#include "ib_priv.h"

#include "base/clock.h"
#include "base/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#if SHOAL_HAVE_IBVERBS
/* ---- failures --------------------------------------------------------- */

shoal_status_t shoal_ib_fail(shoal_ib_ep_t *ep, shoal_status_t status, const char *fmt, ...)
{
    if (ep->err)
        return ep->err;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    shoal_error(IBV, "rank %d: connection to rank %d lost: %s", ep->base.ctx->params.rank,
                ep->base.peer, why);
    ep->err = status;
    return status;
}

static shoal_status_t ep_fifos_progress(shoal_ib_ep_t *ep)
{
    for (int i = 0; i < ep->nqps && !ep->err; i++) {
        if (shoal_ib_fifo_progress(&ep->fifo[i]) != SHOAL_OK)
            return shoal_ib_fail(ep, SHOAL_ERR_PEER, "a work request on %s failed",
                                 ep->qp[i].dev->port.dev);
    }
    return ep->err;
}

/* An operation found nothing to do on ep: an error when it can never
 * come, because the peer's process is gone (what it wrote before it went
 * is reaped first). */
static shoal_status_t ep_waiting(shoal_ib_ep_t *ep)
{
    if (!ep->gone)
        return SHOAL_INPROGRESS;
    return shoal_ib_fail(ep, SHOAL_ERR_PEER, "its process closed the connection (it ended or "
                         "was killed) while this rank waits on it");
}

static shoal_status_t ep_result(shoal_ib_ep_t *ep, shoal_status_t s, int qp)
{
    if (s == SHOAL_OK)
        return SHOAL_OK;
    if (s == SHOAL_INPROGRESS)
        return ep_waiting(ep);
    if (s == SHOAL_ERR_INVALID_ARG || s == SHOAL_ERR_INTERNAL)
        return s;
    return shoal_ib_fail(ep, SHOAL_ERR_PEER, "queue pair %d on %s: %s", qp,
                         ep->qp[qp].dev->port.dev, shoal_status_string(s));
}

/* ---- data ------------------------------------------------------------- */

static shoal_status_t shoal_ib_send_slot(shoal_ep_t *base, void **buf_p, size_t *cap_p)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    if (ep->err)
        return ep->err;
    int q = (int)(ep->tx_msgs % (uint64_t)ep->nqps);
    return ep_result(ep, shoal_ib_fifo_send_slot(&ep->fifo[q], buf_p, cap_p), q);
}

static shoal_status_t shoal_ib_send_post(shoal_ep_t *base, size_t len, const void *hdr)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    if (ep->err)
        return ep->err;
    int q = (int)(ep->tx_msgs % (uint64_t)ep->nqps);
    shoal_status_t s = ep_result(ep, shoal_ib_fifo_send_post(&ep->fifo[q], len, hdr), q);
    if (s == SHOAL_OK) {
        ep->tx_msgs++;
        atomic_fetch_add_explicit(&base->tx_bytes, len, memory_order_relaxed);
    }
    return s;
}

static shoal_status_t shoal_ib_recv_slot(shoal_ep_t *base, const void **buf_p, size_t *len_p,
                                         void *hdr_p)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    if (ep->err)
        return ep->err;
    int q = (int)(ep->rx_msgs % (uint64_t)ep->nqps);
    shoal_status_t s = ep_result(ep, shoal_ib_fifo_recv_slot(&ep->fifo[q], buf_p, len_p, hdr_p),
                                 q);
    if (s == SHOAL_OK)
        ep->rx_len = *len_p;
    return s;
}

static shoal_status_t shoal_ib_recv_release(shoal_ep_t *base)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    if (ep->err)
        return ep->err;
    int q = (int)(ep->rx_msgs % (uint64_t)ep->nqps);
    shoal_status_t s = ep_result(ep, shoal_ib_fifo_recv_release(&ep->fifo[q]), q);
    if (s == SHOAL_OK) {
        ep->rx_msgs++;
        atomic_fetch_add_explicit(&base->rx_bytes, ep->rx_len, memory_order_relaxed);
    }
    return s;
}

static shoal_status_t shoal_ib_flush(shoal_ep_t *base)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    if (ep->err)
        return ep->err;
    shoal_status_t out = SHOAL_OK;
    for (int q = 0; q < ep->nqps; q++) {
        shoal_status_t s = shoal_ib_fifo_flush(&ep->fifo[q]);
        if (s == SHOAL_INPROGRESS)
            out = SHOAL_INPROGRESS;
        else if (s != SHOAL_OK)
            return ep_result(ep, s, q);
    }
    return out == SHOAL_OK ? SHOAL_OK : ep_waiting(ep);
}

/* ---- the watch -------------------------------------------------------- */

static shoal_ib_ep_t *ep_of_qp(shoal_ib_ctx_t *ctx, const struct ibv_qp *qp)
{
    for (size_t i = 0; i < ctx->neps; i++) {
        for (int q = 0; q < ctx->list[i]->nqps; q++) {
            if (ctx->list[i]->qp[q].qp == qp)
                return ctx->list[i];
        }
    }
    return NULL;
}

/* The device's asynchronous events: a port or the device in error fails
 * every endpoint, a queue pair in error its own. */
static void watch_events(shoal_ib_ctx_t *ctx)
{
    const shoal_ibv_t *v = ctx->dev.v;
    struct ibv_async_event ev;
    while (v->get_async_event(ctx->dev.ctx, &ev) == 0) {
        const char *what = v->event_type_str(ev.event_type);
        shoal_ib_ep_t *ep = NULL;
        int all = 0;
        switch (ev.event_type) {
        case IBV_EVENT_PORT_ERR:
            all = ev.element.port_num == ctx->dev.port.port;
            break;
        case IBV_EVENT_DEVICE_FATAL:
            all = 1;
            break;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR:
            ep = ep_of_qp(ctx, ev.element.qp);
            break;
        default:
            shoal_debug(IBV, "%s: event %s", ctx->dev.port.dev, what);
            break;
        }
        for (size_t i = 0; i < ctx->neps; i++) {
            if (all || ctx->list[i] == ep)
                shoal_ib_fail(ctx->list[i], SHOAL_ERR_PEER, "%s port %d: %s",
                              ctx->dev.port.dev, ctx->dev.port.port, what);
        }
        v->ack_async_event(&ev);
    }
}

/* The peers' sockets: the end of one says its process is gone. Nothing
 * is ever sent on them after the connection is made. */
static void watch_peers(shoal_ib_ctx_t *ctx)
{
    size_t n = ctx->neps;
    for (size_t i = 0; i < n; i++) {
        ctx->pfds[i] = (struct pollfd){.fd = ctx->list[i]->gone ? -1 : ctx->list[i]->fd,
                                       .events = POLLIN};
    }
    ctx->pfds[n] = (struct pollfd){.fd = ctx->dev.ctx->async_fd, .events = POLLIN};
    if (poll(ctx->pfds, n + 1, 0) <= 0)
        return;
    for (size_t i = 0; i < n; i++) {
        shoal_ib_ep_t *ep = ctx->list[i];
        if (!ctx->pfds[i].revents)
            continue;
        char c;
        ssize_t r = recv(ep->fd, &c, 1, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            shoal_debug(IBV, "rank %d: rank %d closed its connection", ctx->base.params.rank,
                        ep->base.peer);
            ep->gone = 1;
        } else if (r > 0) {
            shoal_ib_fail(ep, SHOAL_ERR_PEER, "it sent bytes on its idle connection");
        }
    }
    if (ctx->pfds[n].revents)
        watch_events(ctx);
}

static shoal_status_t shoal_ib_progress(shoal_tl_ctx_t *base)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    shoal_status_t out = SHOAL_OK;
    for (size_t i = 0; i < ctx->neps; i++) {
        shoal_ib_ep_t *ep = ctx->list[i];
        if (!ep->err && ep_fifos_progress(ep) != SHOAL_OK && out == SHOAL_OK)
            out = ep->err;
    }
    uint64_t now = shoal_now_ns();
    if (now >= ctx->watch_ns) {
        ctx->watch_ns = now + SHOAL_IB_WATCH_NS;
        watch_peers(ctx);
    }
    return out;
}

/* Completions reaped on every endpoint so far. */
static uint64_t reaped(const shoal_ib_ctx_t *ctx)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ctx->neps; i++) {
        for (int q = 0; q < ctx->list[i]->nqps; q++)
            n += ctx->list[i]->fifo[q].reaped;
    }
    return n;
}

/* Sleep on the completion channel (every queue's completions, armed
 * first), the peers' sockets and the device's events, after a wait has
 * polled for SHOAL_IB_SPIN_NS. */
static shoal_status_t shoal_ib_sleep(shoal_tl_ctx_t *base, uint64_t waited_ns,
                                     uint64_t timeout_ns)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    if (waited_ns < SHOAL_IB_SPIN_NS)
        return SHOAL_INPROGRESS;
    for (size_t i = 0; i < ctx->neps; i++) {
        for (int q = 0; q < ctx->list[i]->nqps; q++) {
            if (ibv_req_notify_cq(ctx->list[i]->qp[q].cq, 0) != 0)
                return SHOAL_ERR_UNSUPPORTED;
        }
    }
    /* What completed before the queues were armed raises no event. */
    uint64_t before = reaped(ctx);
    shoal_ib_progress(base);
    if (reaped(ctx) != before)
        return SHOAL_OK;
    size_t n = ctx->neps;
    for (size_t i = 0; i < n; i++)
        ctx->pfds[i] = (struct pollfd){.fd = ctx->list[i]->gone ? -1 : ctx->list[i]->fd,
                                       .events = POLLIN};
    ctx->pfds[n] = (struct pollfd){.fd = ctx->dev.ctx->async_fd, .events = POLLIN};
    ctx->pfds[n + 1] = (struct pollfd){.fd = ctx->dev.chan->fd, .events = POLLIN};
    int ms = (int)((timeout_ns + 999999) / 1000000);
    if (poll(ctx->pfds, n + 2, ms) > 0 && ctx->pfds[n + 1].revents) {
        struct ibv_cq *cq;
        void *cq_ctx;
        while (ctx->dev.v->get_cq_event(ctx->dev.chan, &cq, &cq_ctx) == 0)
            ctx->dev.v->ack_cq_events(cq, 1);
    }
    /* The next progress looks at the sockets and the events. */
    ctx->watch_ns = 0;
    return SHOAL_OK;
}

/* ---- memory ----------------------------------------------------------- */

/* The key names the region's remote key and the range inside it. */
typedef struct {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey;
    uint32_t magic;
} ib_rkey_t;

#define IB_RKEY_MAGIC 0x49424b59u /* "IBKY" */

static shoal_status_t shoal_ib_rkey_pack(shoal_tl_ctx_t *base, const shoal_mem_t *mem,
                                         const void *addr, size_t len, void *blob,
                                         size_t *len_p)
{
    struct ibv_mr *mr = mem ? shoal_ib_mem_mr(mem) : NULL;
    if (!mr || *len_p < sizeof(ib_rkey_t) || (const char *)addr < (const char *)mem->addr ||
        (const char *)addr + len > (const char *)mem->addr + mem->len)
        return SHOAL_ERR_UNSUPPORTED;
    ib_rkey_t k = {.addr = (uintptr_t)addr, .len = len, .rkey = mr->rkey, .magic = IB_RKEY_MAGIC};
    memcpy(blob, &k, sizeof(k));
    *len_p = sizeof(k);
    return SHOAL_OK;
}

static shoal_status_t shoal_ib_rkey_attach(shoal_ep_t *base, const void *blob, size_t len,
                                           const shoal_rmem_t **rmem_p)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    ib_rkey_t k;
    if (len != sizeof(k))
        return SHOAL_ERR_UNSUPPORTED;
    memcpy(&k, blob, sizeof(k));
    if (k.magic != IB_RKEY_MAGIC)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_ib_rmem_t *r = NULL;
    for (int i = 0; i < SHOAL_IB_RKEYS && !r; i++) {
        shoal_ib_rmem_t *c = &ep->rkeys[i];
        if (c->used && c->raddr == k.addr && c->base.len == k.len && c->rkey == k.rkey)
            r = c;
    }
    if (!r) {
        r = &ep->rkeys[ep->rkey_next++ % SHOAL_IB_RKEYS];
        *r = (shoal_ib_rmem_t){.base = {.addr = NULL, .len = (size_t)k.len},
                               .raddr = k.addr, .rkey = k.rkey, .used = 1};
    }
    *rmem_p = &r->base;
    return SHOAL_OK;
}

static shoal_status_t shoal_ib_put_signal(shoal_ep_t *base, const void *src,
                                          const shoal_mem_t *local, const shoal_rmem_t *remote,
                                          size_t remote_off, size_t len, const void *hdr)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    struct ibv_mr *mr = local ? shoal_ib_mem_mr(local) : NULL;
    if (ep->err)
        return ep->err;
    if (!mr || !remote || remote_off > remote->len || len > remote->len - remote_off ||
        len > SHOAL_IB_PUT_MAX || (const char *)src < (const char *)local->addr ||
        (const char *)src + len > (const char *)local->addr + local->len)
        return SHOAL_ERR_UNSUPPORTED;
    const shoal_ib_rmem_t *r = (const shoal_ib_rmem_t *)remote;
    /* The write and its signal go on one queue pair, which delivers them
     * in order: the signal's arrival means the bytes are in place. */
    int q = (int)(ep->tx_msgs % (uint64_t)ep->nqps);
    shoal_ib_fifo_t *f = &ep->fifo[q];
    void *slot;
    size_t cap;
    shoal_status_t s = shoal_ib_fifo_send_slot(f, &slot, &cap);
    if (s == SHOAL_OK && !shoal_ib_fifo_put_room(f))
        s = SHOAL_INPROGRESS;
    if (s != SHOAL_OK)
        return ep_result(ep, s, q);
    s = shoal_ib_fifo_put(f, src, mr->lkey, r->raddr + remote_off, r->rkey, len);
    if (s == SHOAL_OK)
        s = shoal_ib_fifo_send_post(f, 0, hdr);
    s = ep_result(ep, s, q);
    if (s == SHOAL_OK) {
        ep->tx_msgs++;
        atomic_fetch_add_explicit(&base->puts, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&base->put_bytes, len, memory_order_relaxed);
    }
    return s;
}

/* RDMA reads into the endpoint's bounce buffer, a piece at a time, each
 * copied out once it completed; the wait polls the endpoint's queues (what
 * else completes meanwhile is taken as progress would) until SHOAL_TIMEOUT. */
static shoal_status_t shoal_ib_get(shoal_ep_t *base, void *dst, const shoal_rmem_t *remote,
                                   size_t remote_off, size_t len)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base->ctx;
    if (ep->err)
        return ep->err;
    if (!remote || remote_off > remote->len || len > remote->len - remote_off)
        return SHOAL_ERR_UNSUPPORTED;
    if (!ep->bounce) {
        if (posix_memalign((void **)&ep->bounce, 4096, SHOAL_IB_BOUNCE) != 0) {
            ep->bounce = NULL;
            return SHOAL_ERR_NO_MEMORY;
        }
        ep->bounce_mr = shoal_ib_mr_reg(&ctx->dev, ep->bounce, SHOAL_IB_BOUNCE);
        if (!ep->bounce_mr) {
            free(ep->bounce);
            ep->bounce = NULL;
            return SHOAL_ERR_SYSTEM;
        }
    }
    const shoal_ib_rmem_t *r = (const shoal_ib_rmem_t *)remote;
    int q = (int)(ep->tx_msgs % (uint64_t)ep->nqps);
    shoal_ib_fifo_t *f = &ep->fifo[q];
    uint64_t deadline = shoal_deadline_after(ctx->timeout_ns);
    for (size_t at = 0; at < len; at += SHOAL_IB_BOUNCE) {
        size_t n = len - at < SHOAL_IB_BOUNCE ? len - at : SHOAL_IB_BOUNCE;
        while (!shoal_ib_fifo_put_room(f)) {
            shoal_status_t s = ep_fifos_progress(ep);
            if (s != SHOAL_OK)
                return s;
            if (shoal_deadline_passed(deadline))
                return shoal_ib_fail(ep, SHOAL_ERR_TIMEOUT, "no room for a read");
        }
        uint64_t want = f->reads_done + 1;
        shoal_status_t s = shoal_ib_fifo_read(f, ep->bounce, ep->bounce_mr->lkey,
                                              r->raddr + remote_off + at, r->rkey, n);
        if (s != SHOAL_OK)
            return ep_result(ep, s, q);
        while (f->reads_done < want) {
            s = ep_fifos_progress(ep);
            if (s != SHOAL_OK)
                return s;
            if (shoal_deadline_passed(deadline))
                return shoal_ib_fail(ep, SHOAL_ERR_TIMEOUT, "a read of %zu B did not complete "
                                     "within SHOAL_TIMEOUT", n);
        }
        memcpy((char *)dst + at, ep->bounce, n);
    }
    atomic_fetch_add_explicit(&base->gets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&base->get_bytes, len, memory_order_relaxed);
    return SHOAL_OK;
}

const shoal_transport_ops_t shoal_ib_ops = {
    .size = sizeof(shoal_transport_ops_t),
    .name = "ib",
    .query = shoal_ib_query,
    .open = shoal_ib_open,
    .addr_pack = shoal_ib_blob_pack,
    .connect = shoal_ib_connect,
    .ready = shoal_ib_ready,
    .send_slot = shoal_ib_send_slot,
    .send_post = shoal_ib_send_post,
    .recv_slot = shoal_ib_recv_slot,
    .recv_release = shoal_ib_recv_release,
    .flush = shoal_ib_flush,
    .progress = shoal_ib_progress,
    .sleep = shoal_ib_sleep,
    .mem_reg = shoal_ib_mem_reg,
    .mem_dereg = shoal_ib_mem_dereg,
    .rkey_pack = shoal_ib_rkey_pack,
    .rkey_attach = shoal_ib_rkey_attach,
    .put_signal = shoal_ib_put_signal,
    .get = shoal_ib_get,
    .disconnect = shoal_ib_disconnect,
    .close = shoal_ib_close,
};
#else
/* Built without rdma-core's headers: never open, and says so. */
static shoal_status_t shoal_ib_query(const shoal_tl_params_t *par, int peer,
                                     shoal_tl_caps_t *caps_p)
{
    *caps_p = (shoal_tl_caps_t){0};
    return SHOAL_OK;
}

static shoal_status_t shoal_ib_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
{
    shoal_info(IBV, "ib unavailable: built without rdma-core's headers (libibverbs-dev)");
    return SHOAL_ERR_UNSUPPORTED;
}

/* Never called: open fails first. */
static shoal_status_t ib_no_addr(shoal_tl_ctx_t *ctx, void *blob, size_t *len_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t ib_no_connect(shoal_tl_ctx_t *ctx, int peer, const void *blob, size_t len,
                                    uint64_t deadline_ns, shoal_ep_t **ep_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t ib_no_send_slot(shoal_ep_t *ep, void **buf_p, size_t *cap_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t ib_no_send_post(shoal_ep_t *ep, size_t len, const void *hdr)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t ib_no_recv_slot(shoal_ep_t *ep, const void **buf_p, size_t *len_p,
                                      void *hdr_p)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static shoal_status_t ib_no_ep(shoal_ep_t *ep)
{
    return SHOAL_ERR_UNSUPPORTED;
}

static void ib_no_disconnect(shoal_ep_t *ep)
{
}

static void ib_no_close(shoal_tl_ctx_t *ctx)
{
}

const shoal_transport_ops_t shoal_ib_ops = {
    .size = sizeof(shoal_transport_ops_t),
    .name = "ib",
    .query = shoal_ib_query,
    .open = shoal_ib_open,
    .addr_pack = ib_no_addr,
    .connect = ib_no_connect,
    .ready = shoal_tl_stub_ready,
    .send_slot = ib_no_send_slot,
    .send_post = ib_no_send_post,
    .recv_slot = ib_no_recv_slot,
    .recv_release = ib_no_ep,
    .flush = ib_no_ep,
    .progress = shoal_tl_stub_progress,
    .sleep = shoal_tl_stub_sleep,
    .mem_reg = shoal_tl_stub_mem_reg,
    .mem_dereg = shoal_tl_stub_mem_dereg,
    .rkey_pack = shoal_tl_stub_rkey_pack,
    .rkey_attach = shoal_tl_stub_rkey_attach,
    .put_signal = shoal_tl_stub_put_signal,
    .get = shoal_tl_stub_get,
    .disconnect = ib_no_disconnect,
    .close = ib_no_close,
};
#endif
