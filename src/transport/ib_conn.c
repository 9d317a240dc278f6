/* The ib transport's connections (ib_priv.h): the port a rank uses, its
 * listener, and endpoints made at wireup. The two ends of a pair meet on
 * an authenticated socket (the higher rank dials, as tcp's eager
 * connections do, so the wireup order cannot deadlock), exchange their
 * queue pairs' addresses and slot rings there, move the queue pairs to
 * ready-to-send, and tell each other so before either writes. The socket
 * then stays open and silent for the watch (ib.c). */
#include "ib_priv.h"

#include "base/clock.h"
#include "base/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if SHOAL_HAVE_IBVERBS
/* What each end sends the other once the socket is up. */
typedef struct {
    uint8_t addr[SHOAL_IB_ADDR_BYTES];
    uint32_t rkey;
    uint64_t ring;
    uint64_t credit;
} ib_qp_info_t;

typedef struct {
    uint64_t magic;
    uint32_t nqps;
    uint32_t pad;
    ib_qp_info_t qp[SHOAL_IB_QPS_MAX];
} ib_info_t;

#define IB_READY 0x52 /* the byte that says "my queue pairs are ready to send" */

shoal_status_t shoal_ib_query(const shoal_tl_params_t *par, int peer, shoal_tl_caps_t *caps_p)
{
    caps_p->reachable = shoal_config_get()->ib.enable && peer != par->rank &&
                        par->host_of[peer] != par->host_of[par->rank];
    caps_p->latency_us = 3.0;
    caps_p->bandwidth_gbs = 12.0;
    return SHOAL_OK;
}

/* The port this rank uses: the one on the NIC nearest it, else the first
 * one SHOAL_IB_HCA leaves. */
static const shoal_ib_port_t *pick_port(const shoal_ib_list_t *ports, const char *nic)
{
    for (int i = 0; nic[0] && i < ports->nports; i++) {
        if (!strcmp(ports->ports[i].dev, nic))
            return &ports->ports[i];
    }
    return &ports->ports[0];
}

static void ctx_free(shoal_ib_ctx_t *ctx)
{
    int nranks = ctx->base.params.nranks;
    if (ctx->acc)
        shoal_acceptor_destroy(ctx->acc);
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    for (int i = 0; ctx->stash && i < nranks; i++) {
        if (ctx->stash[i] >= 0)
            close(ctx->stash[i]);
    }
    shoal_ib_rcache_clear(ctx);
    if (ctx->dev.ctx)
        shoal_ib_dev_close(&ctx->dev);
    free(ctx->stash);
    free(ctx->list);
    free(ctx->pfds);
    free(ctx);
}

static int has_remote_peer(const shoal_tl_params_t *par)
{
    for (int r = 0; r < par->nranks; r++) {
        if (par->host_of[r] != par->host_of[par->rank])
            return 1;
    }
    return 0;
}

shoal_status_t shoal_ib_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
{
    const shoal_config_t *cfg = shoal_config_get();
    if (!cfg->ib.enable || par->nranks < 2 || !has_remote_peer(par))
        return SHOAL_ERR_UNSUPPORTED;
    shoal_ib_list_t ports;
    shoal_status_t s = shoal_ib_ports_find(&ports);
    if (s != SHOAL_OK)
        return s;
    if (ports.nports == 0) {
        shoal_info(IBV, "rank %d: ib unavailable: %s", par->rank, ports.why);
        shoal_ib_ports_free(&ports);
        return SHOAL_ERR_UNSUPPORTED;
    }
    shoal_ib_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        shoal_ib_ports_free(&ports);
        return SHOAL_ERR_NO_MEMORY;
    }
    ctx->base.ops = &shoal_ib_ops;
    ctx->base.params = *par;
    ctx->listen_fd = -1;
    ctx->nqps = cfg->ib.qps;
    ctx->nslots = cfg->ib.nslots;
    ctx->chunk = par->chunk_size;
    ctx->timeout_ns = cfg->core.timeout_ns;
    const shoal_ib_port_t *port = pick_port(&ports, par->nic);
    s = shoal_ib_dev_open(port, &ctx->dev);
    shoal_ib_ports_free(&ports);
    if (s != SHOAL_OK) {
        if (s == SHOAL_ERR_SYSTEM) /* logged; the device is there but unusable */
            s = SHOAL_ERR_UNSUPPORTED;
        goto err_free_ctx;
    }
    /* The port's nominal rate: lane speed x lanes, as it reports them. */
    ctx->base.link_Bps = ctx->dev.port.gbps * 1e9 / 8;
    snprintf(ctx->base.dev, sizeof(ctx->base.dev), "%.*s:%d", SHOAL_TL_NIC_MAX - 8,
             ctx->dev.port.dev, ctx->dev.port.port);
    int fl = fcntl(ctx->dev.ctx->async_fd, F_GETFL);
    if (fl < 0 || fcntl(ctx->dev.ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        shoal_error(IBV, "fcntl(O_NONBLOCK) on %s's event fd: %s", ctx->dev.port.dev,
                    strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_free_ctx;
    }
    size_t n = (size_t)par->nranks;
    ctx->stash = malloc(n * sizeof(*ctx->stash));
    ctx->list = calloc(n, sizeof(*ctx->list));
    ctx->pfds = calloc(n + 2, sizeof(*ctx->pfds));
    s = SHOAL_ERR_NO_MEMORY;
    if (!ctx->stash || !ctx->list || !ctx->pfds)
        goto err_free_ctx;
    for (size_t i = 0; i < n; i++)
        ctx->stash[i] = -1;
    ctx->addr = *par->boot.local_addr(par->boot.handle);
    shoal_sock_set_port(&ctx->addr, 0);
    s = shoal_sock_listen(&ctx->addr, &ctx->listen_fd);
    if (s == SHOAL_OK)
        s = shoal_acceptor_create(ctx->listen_fd, par->boot.secret(par->boot.handle),
                                  sizeof(shoal_ib_hello_t), &ctx->acc);
    if (s != SHOAL_OK)
        goto err_free_ctx;
    shoal_info(IBV, "rank %d uses %s port %d (%s%s)", par->rank, ctx->dev.port.dev,
               ctx->dev.port.port, ctx->dev.port.link == SHOAL_IB_LINK_ETH ? "RoCE" : "InfiniBand",
               !strcmp(par->nic, ctx->dev.port.dev) ? ", the NIC nearest it" : "");
    *ctx_p = &ctx->base;
    return SHOAL_OK;

err_free_ctx:
    ctx_free(ctx);
    return s;
}

shoal_status_t shoal_ib_blob_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    shoal_ib_blob_t b;
    if (*len_p < sizeof(b))
        return SHOAL_ERR_INVALID_ARG;
    memset(&b, 0, sizeof(b));
    b.magic = SHOAL_IB_MAGIC;
    b.chunk_size = ctx->chunk;
    b.nslots = ctx->nslots;
    b.nqps = (uint32_t)ctx->nqps;
    b.link = (uint32_t)ctx->dev.port.link;
    b.addr = ctx->addr;
    memcpy(blob, &b, sizeof(b));
    *len_p = sizeof(b);
    return SHOAL_OK;
}

/* The socket to peer: dialed (peer is lower) or accepted (higher), either
 * proving the job's secret. */
static shoal_status_t meet(shoal_ib_ctx_t *ctx, int peer, const shoal_ib_blob_t *b,
                           uint64_t deadline_ns, int *fd_p)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    if (peer < par->rank) {
        shoal_ib_hello_t hello = {.magic = htonl(SHOAL_IB_HELLO_MAGIC),
                                  .rank = htonl((uint32_t)par->rank)};
        shoal_status_t s = shoal_sock_connect(&b->addr, deadline_ns, fd_p);
        if (s == SHOAL_OK) {
            s = shoal_auth_client(*fd_p, par->boot.secret(par->boot.handle), deadline_ns);
            if (s == SHOAL_OK)
                s = shoal_sock_send_all(*fd_p, &hello, sizeof(hello), deadline_ns);
            if (s != SHOAL_OK)
                close(*fd_p);
        }
        if (s != SHOAL_OK) {
            char str[SHOAL_SOCKADDR_STRLEN];
            shoal_error(IBV, "rank %d: connection to rank %d at %s: %s", par->rank, peer,
                        shoal_sock_str(&b->addr, str), shoal_status_string(s));
        }
        return s;
    }
    while (ctx->stash[peer] < 0) {
        shoal_ib_hello_t hello;
        int fd;
        shoal_status_t s = shoal_acceptor_next(ctx->acc, deadline_ns, &hello, &fd);
        if (s != SHOAL_OK) {
            shoal_error(IBV, "rank %d: waiting for the connection of rank %d: %s", par->rank,
                        peer, shoal_status_string(s));
            return s;
        }
        uint32_t rank = ntohl(hello.rank);
        if (ntohl(hello.magic) != SHOAL_IB_HELLO_MAGIC || rank <= (uint32_t)par->rank ||
            rank >= (uint32_t)par->nranks || ctx->stash[rank] >= 0) {
            shoal_warn(IBV, "rank %d: dropping a connection with an unexpected hello (rank %u)",
                       par->rank, rank);
            close(fd);
            continue;
        }
        ctx->stash[rank] = fd;
    }
    *fd_p = ctx->stash[peer];
    ctx->stash[peer] = -1;
    return SHOAL_OK;
}

static void ep_free(shoal_ib_ep_t *ep, uint64_t deadline_ns)
{
    for (int q = 0; q < ep->nqps; q++) {
        if (ep->qp[q].qp)
            shoal_ib_qp_drain(&ep->qp[q], deadline_ns);
        if (ep->fifo[q].qp)
            shoal_ib_fifo_destroy(&ep->fifo[q]);
        shoal_ib_qp_destroy(&ep->qp[q]);
    }
    if (ep->bounce_mr)
        shoal_ib_mr_dereg(&((shoal_ib_ctx_t *)ep->base.ctx)->dev, ep->bounce_mr);
    free(ep->bounce);
    if (ep->fd >= 0)
        close(ep->fd);
    free(ep);
}

/* The queue pairs and FIFOs of a new endpoint, and what the peer needs of
 * them. */
static shoal_status_t ep_create(shoal_ib_ctx_t *ctx, int peer, shoal_ib_ep_t **ep_p,
                                ib_info_t *mine)
{
    shoal_ib_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return SHOAL_ERR_NO_MEMORY;
    ep->base.ops = &shoal_ib_ops;
    ep->base.ctx = &ctx->base;
    ep->base.peer = peer;
    ep->fd = -1;
    ep->nqps = ctx->nqps;
    size_t per = (ctx->nslots + (size_t)ctx->nqps - 1) / (size_t)ctx->nqps;
    memset(mine, 0, sizeof(*mine));
    mine->magic = SHOAL_IB_MAGIC;
    mine->nqps = (uint32_t)ep->nqps;
    for (int q = 0; q < ep->nqps; q++) {
        shoal_ib_fifo_remote_t self;
        shoal_status_t s = shoal_ib_qp_create(&ctx->dev, shoal_ib_fifo_depth(per), &ep->qp[q]);
        if (s == SHOAL_OK)
            s = shoal_ib_fifo_create(&ep->qp[q], per, ctx->chunk, &ep->fifo[q], &self);
        if (s != SHOAL_OK) {
            ep_free(ep, 0);
            return s;
        }
        shoal_ib_addr_pack(&ep->qp[q].local, mine->qp[q].addr);
        mine->qp[q].rkey = self.rkey;
        mine->qp[q].ring = self.ring;
        mine->qp[q].credit = self.credit;
    }
    *ep_p = ep;
    return SHOAL_OK;
}

/* The peer's queue pairs: connect each of ours to its match. */
static shoal_status_t ep_join(shoal_ib_ep_t *ep, const ib_info_t *theirs)
{
    if (theirs->magic != SHOAL_IB_MAGIC || theirs->nqps != (uint32_t)ep->nqps)
        return SHOAL_ERR_PEER;
    for (int q = 0; q < ep->nqps; q++) {
        shoal_ib_addr_t remote;
        shoal_status_t s = shoal_ib_addr_unpack(theirs->qp[q].addr, SHOAL_IB_ADDR_BYTES,
                                                &remote);
        if (s == SHOAL_OK)
            s = shoal_ib_qp_connect(&ep->qp[q], &remote);
        if (s != SHOAL_OK)
            return s;
        shoal_ib_fifo_remote_t peer = {.ring = theirs->qp[q].ring,
                                       .credit = theirs->qp[q].credit,
                                       .rkey = theirs->qp[q].rkey};
        shoal_ib_fifo_attach(&ep->fifo[q], &peer);
    }
    return SHOAL_OK;
}

shoal_status_t shoal_ib_connect(shoal_tl_ctx_t *base, int peer, const void *blob, size_t len,
                                uint64_t deadline_ns, shoal_ep_t **ep_p)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    const shoal_tl_params_t *par = &base->params;
    shoal_ib_blob_t b;
    if (len != sizeof(b)) {
        shoal_error(IBV, "rank %d sent a %zu-byte ib address, expected %zu", peer, len,
                    sizeof(b));
        return SHOAL_ERR_INTERNAL;
    }
    memcpy(&b, blob, sizeof(b));
    if (b.magic != SHOAL_IB_MAGIC) {
        shoal_error(IBV, "rank %d sent a malformed ib address", peer);
        return SHOAL_ERR_INTERNAL;
    }
    if (b.link != (uint32_t)ctx->dev.port.link) {
        shoal_info(IBV, "rank %d: rank %d's RDMA port has another link layer: not over ib",
                   par->rank, peer);
        return SHOAL_ERR_UNSUPPORTED;
    }
    if (b.nqps != (uint32_t)ctx->nqps || b.nslots != ctx->nslots || b.chunk_size != ctx->chunk) {
        shoal_error(IBV, "rank %d uses %u queue pairs, %llu slots and %llu-B chunks, rank %d %d, "
                    "%zu and %zu B: SHOAL_IB_QPS_PER_CONN, SHOAL_IB_NSLOTS and "
                    "SHOAL_CHUNK_SIZE must agree", peer, b.nqps, (unsigned long long)b.nslots,
                    (unsigned long long)b.chunk_size, par->rank, ctx->nqps, ctx->nslots,
                    ctx->chunk);
        return SHOAL_ERR_INVALID_ARG;
    }
    ib_info_t mine, theirs;
    shoal_ib_ep_t *ep;
    shoal_status_t s = ep_create(ctx, peer, &ep, &mine);
    if (s != SHOAL_OK)
        return s;
    s = meet(ctx, peer, &b, deadline_ns, &ep->fd);
    if (s != SHOAL_OK)
        ep->fd = -1;
    if (s == SHOAL_OK)
        s = shoal_sock_send_all(ep->fd, &mine, sizeof(mine), deadline_ns);
    if (s == SHOAL_OK)
        s = shoal_sock_recv_all(ep->fd, &theirs, sizeof(theirs), deadline_ns);
    if (s == SHOAL_OK) {
        s = ep_join(ep, &theirs);
        if (s == SHOAL_ERR_PEER)
            shoal_error(IBV, "rank %d: rank %d's queue pairs cannot be joined", par->rank, peer);
    }
    /* Neither end writes before the other's queue pairs can take it. */
    unsigned char ready = IB_READY;
    if (s == SHOAL_OK)
        s = shoal_sock_send_all(ep->fd, &ready, 1, deadline_ns);
    if (s == SHOAL_OK)
        s = shoal_sock_recv_all(ep->fd, &ready, 1, deadline_ns);
    if (s == SHOAL_OK && ready != IB_READY)
        s = SHOAL_ERR_PEER;
    if (s != SHOAL_OK) {
        shoal_error(IBV, "rank %d: ib connection to rank %d: %s", par->rank, peer,
                    shoal_status_string(s));
        ep_free(ep, deadline_ns);
        return s;
    }
    ep->list_idx = ctx->neps;
    ctx->list[ctx->neps++] = ep;
    shoal_debug(IBV, "rank %d -> %d: %d queue pairs on %s", par->rank, peer, ep->nqps,
                ctx->dev.port.dev);
    *ep_p = &ep->base;
    return SHOAL_OK;
}

/* Everyone is connected: no more connections to take. */
shoal_status_t shoal_ib_ready(shoal_tl_ctx_t *base)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    shoal_acceptor_destroy(ctx->acc);
    ctx->acc = NULL;
    close(ctx->listen_fd);
    ctx->listen_fd = -1;
    return SHOAL_OK;
}

void shoal_ib_disconnect(shoal_ep_t *base)
{
    shoal_ib_ep_t *ep = (shoal_ib_ep_t *)base;
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base->ctx;
    ctx->list[ep->list_idx] = ctx->list[--ctx->neps];
    ctx->list[ep->list_idx]->list_idx = ep->list_idx;
    ep_free(ep, shoal_deadline_after(ctx->timeout_ns));
}

void shoal_ib_close(shoal_tl_ctx_t *base)
{
    shoal_ib_ctx_t *ctx = (shoal_ib_ctx_t *)base;
    /* Endpoints the caller did not disconnect (a failed wireup) go too. */
    while (ctx->neps > 0)
        shoal_ib_disconnect(&ctx->list[ctx->neps - 1]->base);
    ctx_free(ctx);
}
#endif
