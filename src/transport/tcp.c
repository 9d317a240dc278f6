/* TCP transport: ranks on different hosts (or any ranks, when shared memory
 * is off). This file moves the data; tcp_conn.c makes the connections.
 *
 * Each pair of ranks shares SHOAL_TCP_NSOCKS authenticated sockets. A message
 * is a header (length, sequence number) followed by its payload, which is cut
 * into stripes: stripe i always travels on socket i, so every socket is an
 * ordered stream and both ends find each stripe's bounds from the length
 * alone. Messages shorter than two stripes of SHOAL_TCP_STRIPE_MIN stay on
 * socket 0, where the header travels too.
 *
 * Each endpoint owns nslots send slots and nslots receive slots of
 * chunk_size bytes, allocated when it connects (tcp_conn.c says how many).
 * Every socket keeps its own cursor (message number, byte offset inside its
 * part of that message) per direction; a send slot is free again once every
 * socket has sent its part, and a received message is complete once every
 * socket has read its part. Sockets are non-blocking after connect:
 * progress moves what the kernel takes or has, and never waits. An endpoint
 * that is not connected yet (lazy tcp) connects when an operation first
 * asks it for a slot. */
#include "tcp_priv.h"

#include "base/auth.h"
#include "base/clock.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- stripes ---------------------------------------------------------- */

/* Bounds of stripe sock of a len-byte message. Both ends compute it. */
static void shoal_tcp_stripe(size_t len, int nsocks, int sock, size_t *off_p, size_t *len_p)
{
    size_t k = len / SHOAL_TCP_STRIPE_MIN;
    if (k < 1)
        k = 1;
    if (k > (size_t)nsocks)
        k = (size_t)nsocks;
    size_t unit = ((len + k - 1) / k + SHOAL_TCP_STRIPE_ALIGN - 1) &
                  ~(size_t)(SHOAL_TCP_STRIPE_ALIGN - 1);
    size_t b = (size_t)sock < k ? (size_t)sock * unit : len;
    if (b > len)
        b = len;
    size_t e = b + unit < len ? b + unit : len;
    *off_p = b;
    *len_p = e - b;
}

/* Bytes of a len-byte message carried by socket sock: header + stripe on 0. */
static size_t shoal_tcp_part_len(const shoal_tcp_ep_t *ep, size_t len, int sock)
{
    size_t off, n;
    shoal_tcp_stripe(len, ep->nsocks, sock, &off, &n);
    return n + (sock == 0 ? SHOAL_TCP_HDR : 0);
}

/* ---- failures --------------------------------------------------------- */

void shoal_tcp_unwatch(shoal_tcp_ep_t *ep)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)ep->base.ctx;
    if (!ep->watched)
        return;
    for (int i = 0; i < ep->nsocks; i++)
        epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, ep->fds[i], NULL);
    ep->watched = 0;
}

/* Record that the connection to the peer is lost; logged once, here. */
__attribute__((format(printf, 3, 4)))
shoal_status_t shoal_tcp_fail(shoal_tcp_ep_t *ep, shoal_status_t status, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    shoal_error(TCP, "rank %d: connection to rank %d lost: %s", ep->base.ctx->params.rank,
                ep->base.peer, why);
    ep->err = status;
    shoal_tcp_unwatch(ep);
    return status;
}

/* ---- sending ---------------------------------------------------------- */

static int shoal_tcp_tx_iov(const shoal_tcp_ep_t *ep, int sock, struct iovec *iov,
                            size_t *bytes_p)
{
    const shoal_tcp_cursor_t *c = &ep->tx[sock];
    int n = 0;
    size_t bytes = 0, off = c->off;
    for (uint64_t m = c->msg; m < ep->tx_head && n + 2 <= SHOAL_TCP_IOV_MAX; m++) {
        size_t slot = (size_t)(m % ep->nslots);
        size_t so, sl;
        shoal_tcp_stripe(ep->tx_len[slot], ep->nsocks, sock, &so, &sl);
        if (sock == 0) {
            if (off < SHOAL_TCP_HDR) {
                iov[n].iov_base = (unsigned char *)&ep->tx_hdr[slot] + off;
                iov[n].iov_len = SHOAL_TCP_HDR - off;
                bytes += iov[n++].iov_len;
                off = 0;
            } else {
                off -= SHOAL_TCP_HDR;
            }
        }
        if (sl > off) {
            iov[n].iov_base = ep->tx_buf + slot * ep->chunk + so + off;
            iov[n].iov_len = sl - off;
            bytes += iov[n++].iov_len;
        }
        off = 0;
    }
    *bytes_p = bytes;
    return n;
}

/* Move socket sock's send cursor over n sent bytes, and over parts that are
 * empty (stripes a short message does not use). */
static void shoal_tcp_tx_advance(shoal_tcp_ep_t *ep, int sock, size_t n)
{
    shoal_tcp_cursor_t *c = &ep->tx[sock];
    while (c->msg < ep->tx_head) {
        size_t rem = shoal_tcp_part_len(ep, ep->tx_len[c->msg % ep->nslots], sock) - c->off;
        if (n < rem) {
            c->off += n;
            return;
        }
        n -= rem;
        c->msg++;
        c->off = 0;
    }
}

static shoal_status_t shoal_tcp_push_sock(shoal_tcp_ep_t *ep, int sock)
{
    for (;;) {
        shoal_tcp_tx_advance(ep, sock, 0);
        struct iovec iov[SHOAL_TCP_IOV_MAX];
        size_t bytes;
        int n = shoal_tcp_tx_iov(ep, sock, iov, &bytes);
        if (n == 0)
            return SHOAL_OK;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = sendmsg(ep->fds[sock], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return SHOAL_OK;
            return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "send on socket %d: %s", sock,
                                  strerror(errno));
        }
        shoal_tcp_tx_advance(ep, sock, (size_t)r);
        if ((size_t)r < bytes)
            return SHOAL_OK; /* the socket buffer is full */
    }
}

static shoal_status_t shoal_tcp_push(shoal_tcp_ep_t *ep)
{
    if (ep->tx_tail == ep->tx_head)
        return SHOAL_OK;
    if (ep->eof)
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it closed the connection with %llu "
                              "message(s) still to send to it",
                              (unsigned long long)(ep->tx_head - ep->tx_tail));
    uint64_t tail = UINT64_MAX;
    for (int i = 0; i < ep->nsocks; i++) {
        shoal_status_t s = shoal_tcp_push_sock(ep, i);
        if (s != SHOAL_OK)
            return s;
        if (ep->tx[i].msg < tail)
            tail = ep->tx[i].msg;
    }
    ep->tx_tail = tail;
    return SHOAL_OK;
}

/* ---- receiving -------------------------------------------------------- */

static int shoal_tcp_rx_iov(const shoal_tcp_ep_t *ep, int sock, struct iovec *iov,
                            size_t *bytes_p)
{
    const shoal_tcp_cursor_t *c = &ep->rx[sock];
    /* Socket 0 may start a message only into a free slot; the others only
     * once socket 0 has delivered its header (which gives the stripes). */
    uint64_t limit = sock == 0 ? ep->rx_tail + ep->nslots : ep->rx_hdrs;
    int n = 0;
    size_t bytes = 0, off = c->off;
    for (uint64_t m = c->msg; m < limit && n + 2 <= SHOAL_TCP_IOV_MAX; m++) {
        size_t slot = (size_t)(m % ep->nslots);
        if (sock == 0) {
            if (off < SHOAL_TCP_HDR) {
                iov[n].iov_base = (unsigned char *)&ep->rx_hdr[slot] + off;
                iov[n].iov_len = SHOAL_TCP_HDR - off;
                bytes += iov[n++].iov_len;
                break; /* the length it brings is not known yet */
            }
            off -= SHOAL_TCP_HDR;
        }
        size_t so, sl;
        shoal_tcp_stripe(ep->rx_len[slot], ep->nsocks, sock, &so, &sl);
        if (sl > off) {
            iov[n].iov_base = ep->rx_buf + slot * ep->chunk + so + off;
            iov[n].iov_len = sl - off;
            bytes += iov[n++].iov_len;
        }
        off = 0;
    }
    *bytes_p = bytes;
    return n;
}

/* The header of message m has arrived complete in its slot. */
static shoal_status_t shoal_tcp_rx_header(shoal_tcp_ep_t *ep, uint64_t m)
{
    size_t slot = (size_t)(m % ep->nslots);
    uint32_t len = ntohl(ep->rx_hdr[slot].len);
    uint32_t seq = ntohl(ep->rx_hdr[slot].seq);
    if (len > ep->chunk || seq != (uint32_t)m)
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "bad header for message %llu (length %u, "
                              "sequence %u): the stream lost its framing",
                              (unsigned long long)m, len, seq);
    ep->rx_len[slot] = len;
    ep->rx_hdrs++;
    return SHOAL_OK;
}

/* Move socket sock's receive cursor over n received bytes (parsing headers
 * on socket 0), and over empty parts. */
static shoal_status_t shoal_tcp_rx_advance(shoal_tcp_ep_t *ep, int sock, size_t n)
{
    shoal_tcp_cursor_t *c = &ep->rx[sock];
    uint64_t limit = sock == 0 ? ep->rx_tail + ep->nslots : ep->rx_hdrs;
    while (c->msg < limit) {
        if (sock == 0 && c->off < SHOAL_TCP_HDR) {
            size_t take = n < SHOAL_TCP_HDR - c->off ? n : SHOAL_TCP_HDR - c->off;
            c->off += take;
            n -= take;
            if (c->off < SHOAL_TCP_HDR)
                return SHOAL_OK;
            shoal_status_t s = shoal_tcp_rx_header(ep, c->msg);
            if (s != SHOAL_OK)
                return s;
        }
        size_t rem = shoal_tcp_part_len(ep, ep->rx_len[c->msg % ep->nslots], sock) - c->off;
        if (n < rem) {
            c->off += n;
            return SHOAL_OK;
        }
        n -= rem;
        c->msg++;
        c->off = 0;
    }
    return SHOAL_OK;
}

/* recv returned 0. Between two messages on socket 0 that is an orderly
 * close: the peer left (perhaps after finishing everything), which becomes
 * an error only for someone who still waits on it. Inside a part, bytes the
 * peer announced will never come. */
static shoal_status_t shoal_tcp_rx_eof(shoal_tcp_ep_t *ep, int sock)
{
    if (sock == 0 && ep->rx[0].off == 0) {
        shoal_debug(TCP, "rank %d: rank %d closed its connection", ep->base.ctx->params.rank,
                    ep->base.peer);
        ep->eof = 1;
        return SHOAL_OK;
    }
    return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it closed socket %d in the middle of "
                          "message %llu", sock, (unsigned long long)ep->rx[sock].msg);
}

static shoal_status_t shoal_tcp_pull_sock(shoal_tcp_ep_t *ep, int sock)
{
    for (;;) {
        shoal_status_t s = shoal_tcp_rx_advance(ep, sock, 0);
        if (s != SHOAL_OK)
            return s;
        if (sock == 0 && ep->eof)
            return SHOAL_OK;
        struct iovec iov[SHOAL_TCP_IOV_MAX];
        size_t bytes;
        int n = shoal_tcp_rx_iov(ep, sock, iov, &bytes);
        if (n == 0)
            return SHOAL_OK;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = recvmsg(ep->fds[sock], &mh, MSG_DONTWAIT);
        if (r == 0)
            return shoal_tcp_rx_eof(ep, sock);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return SHOAL_OK;
            return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "receive on socket %d: %s", sock,
                                  strerror(errno));
        }
        s = shoal_tcp_rx_advance(ep, sock, (size_t)r);
        if (s != SHOAL_OK || (size_t)r < bytes)
            return s; /* an error, or the socket is drained */
    }
}

static shoal_status_t shoal_tcp_pull(shoal_tcp_ep_t *ep)
{
    uint64_t head = UINT64_MAX;
    /* Socket 0 first: its headers open the other sockets' parts. */
    for (int i = 0; i < ep->nsocks; i++) {
        shoal_status_t s = shoal_tcp_pull_sock(ep, i);
        if (s != SHOAL_OK)
            return s;
        if (ep->rx[i].msg < head)
            head = ep->rx[i].msg;
    }
    ep->rx_head = head;
    /* After an orderly close with nothing in flight, these sockets would
     * only wake epoll again and again. */
    if (ep->eof && ep->rx_head == ep->rx_hdrs)
        shoal_tcp_unwatch(ep);
    return SHOAL_OK;
}

/* ---- data ops --------------------------------------------------------- */

static shoal_status_t shoal_tcp_send_slot(shoal_ep_t *base, void **buf_p, size_t *cap_p)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    if (ep->err)
        return ep->err;
    if (ep->state != SHOAL_TCP_UP) {
        shoal_status_t s = shoal_tcp_ensure(ep);
        if (s != SHOAL_OK)
            return s;
    }
    if (ep->tx_head - ep->tx_tail == ep->nslots) {
        shoal_status_t s = shoal_tcp_push(ep);
        if (s == SHOAL_OK)
            s = shoal_tcp_pull(ep); /* the way to notice a peer that left */
        if (s != SHOAL_OK)
            return s;
        if (ep->tx_head - ep->tx_tail == ep->nslots)
            return ep->eof ? shoal_tcp_push(ep) : SHOAL_INPROGRESS;
    }
    *buf_p = ep->tx_buf + ep->tx_idx * ep->chunk;
    *cap_p = ep->chunk;
    return SHOAL_OK;
}

static shoal_status_t shoal_tcp_send_post(shoal_ep_t *base, size_t len, const void *hdr)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    if (ep->err)
        return ep->err;
    if (len > ep->chunk) {
        shoal_error(TCP, "send_post of %zu B to rank %d exceeds the %zu-B slot", len,
                    base->peer, ep->chunk);
        return SHOAL_ERR_INVALID_ARG;
    }
    if (ep->tx_head - ep->tx_tail >= ep->nslots) {
        shoal_error(TCP, "send_post to rank %d without a free slot", base->peer);
        return SHOAL_ERR_INTERNAL;
    }
    ep->tx_len[ep->tx_idx] = len;
    shoal_tcp_hdr_t *h = &ep->tx_hdr[ep->tx_idx];
    h->len = htonl((uint32_t)len);
    h->seq = htonl((uint32_t)ep->tx_head);
    if (hdr)
        memcpy(h->hdr, hdr, SHOAL_TL_HDR_BYTES);
    else
        memset(h->hdr, 0, SHOAL_TL_HDR_BYTES);
    atomic_store_explicit(&base->tx_bytes, base->tx_bytes + len, memory_order_relaxed);
    ep->tx_head++;
    if (++ep->tx_idx == ep->nslots)
        ep->tx_idx = 0;
    /* Start the bytes moving now rather than at the next progress call. */
    return shoal_tcp_push(ep);
}

static shoal_status_t shoal_tcp_recv_slot(shoal_ep_t *base, const void **buf_p, size_t *len_p,
                                          void *hdr_p)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    if (ep->err)
        return ep->err;
    if (ep->state != SHOAL_TCP_UP) {
        shoal_status_t s = shoal_tcp_ensure(ep);
        if (s != SHOAL_OK)
            return s;
    }
    if (ep->rx_tail == ep->rx_head) {
        shoal_status_t s = shoal_tcp_push(ep);
        if (s == SHOAL_OK)
            s = shoal_tcp_pull(ep);
        if (s != SHOAL_OK)
            return s;
        if (ep->rx_tail == ep->rx_head) {
            if (ep->eof && ep->rx_head == ep->rx_hdrs)
                return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it closed the connection while "
                                      "this rank waits for a message from it");
            return SHOAL_INPROGRESS;
        }
    }
    *buf_p = ep->rx_buf + ep->rx_idx * ep->chunk;
    *len_p = ep->rx_len[ep->rx_idx];
    if (hdr_p)
        memcpy(hdr_p, ep->rx_hdr[ep->rx_idx].hdr, SHOAL_TL_HDR_BYTES);
    return SHOAL_OK;
}

static shoal_status_t shoal_tcp_recv_release(shoal_ep_t *base)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    if (ep->err)
        return ep->err;
    if (ep->rx_tail == ep->rx_head) {
        shoal_error(TCP, "recv_release from rank %d without a received slot", base->peer);
        return SHOAL_ERR_INTERNAL;
    }
    atomic_store_explicit(&base->rx_bytes, base->rx_bytes + ep->rx_len[ep->rx_idx],
                          memory_order_relaxed);
    ep->rx_tail++;
    if (++ep->rx_idx == ep->nslots)
        ep->rx_idx = 0;
    return SHOAL_OK;
}

/* Posted messages are safe once the kernel holds them: it delivers them
 * even after the socket is closed. */
static shoal_status_t shoal_tcp_flush(shoal_ep_t *base)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    if (ep->err)
        return ep->err;
    shoal_status_t s = shoal_tcp_push(ep);
    if (s != SHOAL_OK)
        return s;
    return ep->tx_tail == ep->tx_head ? SHOAL_OK : SHOAL_INPROGRESS;
}

static shoal_status_t shoal_tcp_progress(shoal_tl_ctx_t *base)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    if (ctx->neps == 0 && !ctx->listening)
        return SHOAL_OK; /* shared memory reaches everyone: cost nothing */
    if (ctx->listening) {
        shoal_status_t s = shoal_tcp_lazy_step(ctx, 0);
        if (s != SHOAL_OK)
            return s;
    }
    for (size_t i = 0; i < ctx->neps; i++) {
        shoal_tcp_ep_t *ep = ctx->list[i];
        shoal_status_t s = ep->err ? ep->err : shoal_tcp_push(ep);
        if (s != SHOAL_OK)
            return s;
    }
    int n = epoll_wait(ctx->epfd, ctx->events, ctx->nevents, 0);
    if (n < 0 && errno != EINTR) {
        shoal_error(TCP, "epoll_wait: %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    /* One pull per endpoint, whichever of its sockets woke up: pulling
     * socket 0 first lets the others read the stripes its headers open. */
    ctx->round++;
    for (int e = 0; e < n; e++) {
        shoal_tcp_ep_t *ep = ctx->events[e].data.ptr;
        if (!ep) { /* the listener */
            shoal_status_t s = shoal_tcp_accept_lazy(ctx);
            if (s != SHOAL_OK)
                return s;
            continue;
        }
        if (ep->pulled == ctx->round || ep->err)
            continue;
        ep->pulled = ctx->round;
        shoal_status_t s = shoal_tcp_pull(ep);
        if (s != SHOAL_OK)
            return s;
    }
    return SHOAL_OK;
}

/* Data moves by polling: sends need progress calls to push, so a wait
 * does not sleep (the caller yields the core instead). While connections
 * are in the making, though, the other end's answers come through the
 * listener and the dials' sockets: wait for them in the kernel, so that
 * ranks that outnumber the cores hand the core to the peer whose answer
 * they wait for rather than spin. */
static shoal_status_t shoal_tcp_sleep(shoal_tl_ctx_t *base, uint64_t waited_ns,
                                      uint64_t timeout_ns)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    if (!ctx->listening || (ctx->ndialing == 0 && ctx->nwait_peer == 0 &&
                            shoal_acceptor_pending(ctx->acc) == 0))
        return SHOAL_ERR_UNSUPPORTED;
    if (waited_ns < SHOAL_TCP_SPIN_NS)
        return SHOAL_INPROGRESS;
    struct pollfd pfds[1 + 4 * SHOAL_TCP_NSOCKS_MAX];
    nfds_t n = 0;
    pfds[n++] = (struct pollfd){.fd = ctx->epfd, .events = POLLIN};
    for (size_t i = 0; i < ctx->ndialing && n + (nfds_t)ctx->nsocks <= 1 + 4 * SHOAL_TCP_NSOCKS_MAX;
         i++) {
        for (int k = 0; k < ctx->nsocks; k++)
            pfds[n++] = (struct pollfd){.fd = ctx->dialing[i]->dfds[k], .events = POLLIN};
    }
    uint64_t ms = timeout_ns / 1000000u;
    if (poll(pfds, n, (int)(ms < 1 ? 1 : ms > 1000 ? 1000 : ms)) < 0 && errno != EINTR) {
        shoal_error(TCP, "poll: %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

size_t shoal_tcp_peers_up(const shoal_tl_ctx_t *base)
{
    return ((const shoal_tcp_ctx_t *)base)->neps;
}

size_t shoal_tcp_redials(const shoal_tl_ctx_t *base)
{
    return ((const shoal_tcp_ctx_t *)base)->redials;
}

size_t shoal_tcp_slot_bytes(const shoal_tl_ctx_t *base)
{
    const shoal_tcp_ctx_t *ctx = (const shoal_tcp_ctx_t *)base;
    size_t bytes = 0;
    for (size_t i = 0; i < ctx->neps; i++)
        bytes += 2 * ctx->list[i]->nslots * ctx->chunk;
    return bytes;
}

const shoal_transport_ops_t shoal_tcp_ops = {
    .size = sizeof(shoal_transport_ops_t),
    .name = "tcp",
    .query = shoal_tcp_query,
    .open = shoal_tcp_open,
    .addr_pack = shoal_tcp_addr_pack,
    .connect = shoal_tcp_connect,
    .ready = shoal_tcp_ready,
    .send_slot = shoal_tcp_send_slot,
    .send_post = shoal_tcp_send_post,
    .recv_slot = shoal_tcp_recv_slot,
    .recv_release = shoal_tcp_recv_release,
    .flush = shoal_tcp_flush,
    .progress = shoal_tcp_progress,
    .sleep = shoal_tcp_sleep,
    .mem_reg = shoal_tl_host_mem_reg,
    .mem_dereg = shoal_tl_host_mem_dereg,
    .rkey_pack = shoal_tl_stub_rkey_pack,
    .rkey_attach = shoal_tl_stub_rkey_attach,
    .put_signal = shoal_tl_stub_put_signal,
    .get = shoal_tl_stub_get,
    .disconnect = shoal_tcp_disconnect,
    .close = shoal_tcp_close,
};