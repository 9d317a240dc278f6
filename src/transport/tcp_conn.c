/* TCP transport: making the connections (wireup's ops, and the lazy
 * connections made on first use), and each connection's slots.
 *
 * Connections (SHOAL_TCP_CONNECT). Eager: wireup's connect makes every
 * pair's sockets at init, the higher rank dialing the lower, and ready
 * closes the listener. Lazy (the default): connect only records the
 * peer's address; the sockets of a pair are made the first time an
 * operation asks that endpoint for a slot, and the listener stays open,
 * served by progress, while the communicator lives. Either end may dial,
 * without blocking (base/auth.c's client state machine, stepped by
 * progress), and the accepting end proves the dialer exactly as at init.
 * When both ends dial at once, the lower rank's connection wins: an
 * acceptor answers a complete set of sockets with one byte on socket 0,
 * taken or refused (then closes them); the lower rank refuses the higher
 * one's set while its own dial is out, and the higher rank takes the
 * lower one's, its own dial running on to its refusal. A dialer sends
 * nothing before that byte, so no message rides on a set that loses, and
 * a refused higher rank waits for the lower one's set, which is on its
 * way. A set closed without a byte was dropped by the peer's acceptor
 * (a handshake it could not serve in time) or lost to a connection
 * already up: its dialer dials again until the endpoint's deadline, and
 * a peer that exited refuses the new dial.
 *
 * Slot memory (SHOAL_TCP_MEM). The k-th peer a context connects gets
 * min(SHOAL_TCP_NSLOTS, SHOAL_TCP_MEM / (2 x chunk x k)) slots per
 * direction, and at least one (shoal_tcp_slots_rule): the first peers
 * get the full depth, and once many are connected each new one costs one
 * slot each way. One slot is enough for tcp to move: a posted message
 * leaves for the kernel's socket buffer at once, so the slot is free
 * again as soon as the kernel takes it. */
#include "tcp_priv.h"

#include "base/auth.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

size_t shoal_tcp_slots_rule(size_t mem, size_t chunk, size_t nslots, size_t k)
{
    if (mem == 0 || chunk == 0 || k == 0)
        return nslots;
    size_t fit = mem / (2 * chunk) / k;
    size_t n = fit < nslots ? fit : nslots;
    return n < 1 ? 1 : n;
}

/* ---- lazy connections ------------------------------------------------- */

static shoal_status_t shoal_tcp_up(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep, const int *fds);

static void shoal_tcp_close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

/* Give up our dial (its sockets and handshakes) and take ep out of the
 * dialing list. */
static void shoal_tcp_dial_drop(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep)
{
    if (ep->dial_phase == 0)
        return;
    shoal_tcp_close_fds(ep->dfds, ep->nsocks);
    for (int i = 0; ep->dial && i < ep->nsocks; i++)
        shoal_auth_dial_clear(&ep->dial[i]);
    free(ep->dial);
    ep->dial = NULL;
    ep->dial_phase = 0;
    ctx->dialing[ep->dial_idx] = ctx->dialing[--ctx->ndialing];
    ctx->dialing[ep->dial_idx]->dial_idx = ep->dial_idx;
    if (ep->state == SHOAL_TCP_DIALING)
        ep->state = SHOAL_TCP_IDLE;
}

/* Close the sockets of the peer waiting in the stash. */
static void shoal_tcp_stash_clear(shoal_tcp_ctx_t *ctx, int peer)
{
    shoal_tcp_close_fds(&ctx->stash[(size_t)peer * (size_t)ctx->nsocks], ctx->nsocks);
}

/* Start nsocks non-blocking connections to the peer's listener, each
 * proving the secret and then saying who it is and which socket. */
static shoal_status_t shoal_tcp_dial_start(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    const uint8_t *secret = par->boot.secret(par->boot.handle);
    ep->dial = calloc((size_t)ep->nsocks, sizeof(*ep->dial));
    if (!ep->dial)
        return shoal_tcp_fail(ep, SHOAL_ERR_NO_MEMORY, "no memory to dial it");
    for (int i = 0; i < ep->nsocks; i++)
        ep->dfds[i] = -1;
    ep->dial_idx = ctx->ndialing;
    ctx->dialing[ctx->ndialing++] = ep;
    ep->dial_phase = SHOAL_TCP_DIAL_HANDSHAKE;
    ep->state = SHOAL_TCP_DIALING;
    ep->attempt++;
    for (int i = 0; i < ep->nsocks; i++) {
        socklen_t alen = ep->addr.u.sa.sa_family == AF_INET6 ? sizeof(ep->addr.u.sin6)
                                                             : sizeof(ep->addr.u.sin);
        int fd = socket(ep->addr.u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return shoal_tcp_fail(ep, SHOAL_ERR_SYSTEM, "socket: %s", strerror(errno));
        ep->dfds[i] = fd;
        if (connect(fd, &ep->addr.u.sa, alen) != 0 && errno != EINPROGRESS)
            return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "connecting socket %d: %s (has it "
                                  "exited?)", i, strerror(errno));
        shoal_tcp_hello_t hello = {
            .magic = htonl(SHOAL_TCP_HELLO_MAGIC),
            .rank = htonl((uint32_t)par->rank),
            .sock = htonl((uint32_t)i | (uint32_t)ep->attempt << 16),
            .nsocks = htonl((uint32_t)ctx->nsocks),
        };
        shoal_auth_dial_start(&ep->dial[i], fd, secret, &hello, sizeof(hello));
    }
    shoal_debug(TCP, "rank %d dials rank %d", par->rank, ep->base.peer);
    return SHOAL_OK;
}

/* Whether the peer closed a socket of our dial other than socket 0 while
 * we wait for its answer on socket 0. The peer's acceptor may drop a
 * handshake after we sent our last byte of it; the set then never
 * completes there, and no answer comes: the dial must be made again.
 * A set that was taken may already carry data on these sockets; a peek
 * leaves it for the connection. */
static int shoal_tcp_dial_cut(const shoal_tcp_ep_t *ep)
{
    for (int i = 1; i < ep->nsocks; i++) {
        unsigned char b;
        ssize_t r = recv(ep->dfds[i], &b, 1, MSG_DONTWAIT | MSG_PEEK);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 1;
    }
    return 0;
}

/* Step our dial of ep as far as its sockets allow. A dial that lost (the
 * peer's was taken meanwhile: ep is up) still runs to its end, so that
 * the peer's acceptor sees a whole handshake and closes it quietly. */
static shoal_status_t shoal_tcp_dial_advance(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    int lost = ep->state == SHOAL_TCP_UP;
    if (ep->dial_phase == SHOAL_TCP_DIAL_HANDSHAKE) {
        int done = 1;
        for (int i = 0; i < ep->nsocks; i++) {
            shoal_status_t s = shoal_auth_dial_step(&ep->dial[i]);
            if (s == SHOAL_INPROGRESS) {
                done = 0;
            } else if (s != SHOAL_OK && lost) {
                shoal_tcp_dial_drop(ctx, ep);
                return SHOAL_OK;
            } else if (s == SHOAL_ERR_PEER && errno != ECONNREFUSED) {
                /* Closed during the handshake: the peer's acceptor dropped
                 * it (it was away too long); dial again until the
                 * endpoint's deadline. An exited peer refuses instead. */
                shoal_debug(TCP, "rank %d: the handshake of socket %d with rank %d was "
                            "dropped (%s); dialing again", par->rank, i, ep->base.peer,
                            errno ? strerror(errno) : "closed");
                shoal_tcp_dial_drop(ctx, ep);
                ctx->redials++;
                return shoal_tcp_dial_start(ctx, ep);
            } else if (s == SHOAL_ERR_PEER) {
                return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "connecting socket %d: %s (has "
                                      "it exited?)", i, strerror(errno));
            } else if (s != SHOAL_OK) {
                return shoal_tcp_fail(ep, s, "the handshake of socket %d failed", i);
            }
        }
        if (!done)
            return SHOAL_OK;
        ep->dial_phase = SHOAL_TCP_DIAL_WAIT_ACK;
    }
    unsigned char b;
    ssize_t r = recv(ep->dfds[0], &b, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (lost || !shoal_tcp_dial_cut(ep))
            return SHOAL_OK;
        r = 0; /* a socket of the set was dropped: the answer never comes */
    }
    if (lost) {
        shoal_tcp_dial_drop(ctx, ep);
        return SHOAL_OK;
    }
    if (r == 1 && b == SHOAL_TCP_TAKEN) {
        int fds[SHOAL_TCP_NSOCKS_MAX];
        memcpy(fds, ep->dfds, sizeof(fds));
        for (int i = 0; i < ep->nsocks; i++)
            ep->dfds[i] = -1; /* the drop must not close them */
        shoal_tcp_dial_drop(ctx, ep);
        shoal_tcp_stash_clear(ctx, ep->base.peer);
        shoal_status_t s = shoal_tcp_up(ctx, ep, fds);
        if (s != SHOAL_OK) {
            shoal_tcp_close_fds(fds, ep->nsocks);
            return shoal_tcp_fail(ep, s, "setting up the connection it took");
        }
        return SHOAL_OK;
    }
    if (r == 1 && (b != SHOAL_TCP_REFUSED || ep->base.peer > par->rank))
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it answered our connection with %#x", b);
    shoal_tcp_dial_drop(ctx, ep);
    if (r != 1) {
        /* Closed without an answer: dropped (see the top). */
        shoal_debug(TCP, "rank %d: rank %d closed our dial unanswered; dialing again",
                    par->rank, ep->base.peer);
        ctx->redials++;
        return shoal_tcp_dial_start(ctx, ep);
    }
    /* Refused: only a lower rank refuses, and only while its own dial is
     * out, which this rank will take. */
    shoal_debug(TCP, "rank %d: rank %d refused our dial; its own comes", par->rank,
                ep->base.peer);
    ep->state = SHOAL_TCP_WAIT_PEER;
    ctx->nwait_peer++;
    return SHOAL_OK;
}

/* The same; a dial that failed is dropped (the failure is logged and
 * sticks to ep). */
static shoal_status_t shoal_tcp_dial_step(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep)
{
    shoal_status_t s = shoal_tcp_dial_advance(ctx, ep);
    if (s != SHOAL_OK)
        shoal_tcp_dial_drop(ctx, ep);
    return s;
}

/* A complete set of the peer's sockets is in the stash: take it (answer
 * with SHOAL_TCP_TAKEN) unless our own dial of a higher peer is out. */
static shoal_status_t shoal_tcp_decide(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    int peer = ep->base.peer;
    int *set = &ctx->stash[(size_t)peer * (size_t)ctx->nsocks];
    if (ep->dial_phase != 0 && peer > par->rank) {
        shoal_debug(TCP, "rank %d: refusing rank %d's dial, ours is out", par->rank, peer);
        /* One byte into an empty socket; should it not go, the dialer
         * reads a bare close and dials again, to be refused again. */
        unsigned char no = SHOAL_TCP_REFUSED;
        (void)!send(set[0], &no, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        shoal_tcp_stash_clear(ctx, peer);
        return SHOAL_OK;
    }
    unsigned char b = SHOAL_TCP_TAKEN;
    shoal_status_t s = shoal_sock_send_all(set[0], &b, 1, shoal_deadline_after(ctx->timeout_ns));
    if (s != SHOAL_OK) {
        shoal_tcp_stash_clear(ctx, peer);
        shoal_tcp_dial_drop(ctx, ep);
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "taking its connection: %s",
                              shoal_status_string(s));
    }
    int fds[SHOAL_TCP_NSOCKS_MAX];
    memcpy(fds, set, (size_t)ctx->nsocks * sizeof(int));
    for (int i = 0; i < ctx->nsocks; i++)
        set[i] = -1;
    if (ep->state == SHOAL_TCP_WAIT_PEER)
        ctx->nwait_peer--;
    s = shoal_tcp_up(ctx, ep, fds);
    if (s != SHOAL_OK) {
        shoal_tcp_close_fds(fds, ctx->nsocks);
        shoal_tcp_dial_drop(ctx, ep);
        return shoal_tcp_fail(ep, s, "setting up the connection it dialed");
    }
    /* Our own dial lost. Past its handshake, the peer's acceptor has all
     * it sends and closes it quietly whatever we do: close it now. Inside
     * it, it runs on (shoal_tcp_dial_advance) so that the peer's acceptor
     * sees a whole handshake rather than a connection cut short. */
    if (ep->dial_phase == SHOAL_TCP_DIAL_WAIT_ACK)
        shoal_tcp_dial_drop(ctx, ep);
    shoal_debug(TCP, "rank %d took rank %d's dial", par->rank, peer);
    return SHOAL_OK;
}

/* Take every connection whose handshake is complete, without waiting.
 * A stranger's bytes never get here (the acceptor drops them); a proven
 * connection with a hello that names no peer of this context is dropped
 * and logged. */
shoal_status_t shoal_tcp_accept_lazy(shoal_tcp_ctx_t *ctx)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    for (;;) {
        shoal_tcp_hello_t hello;
        int fd;
        shoal_status_t s = shoal_acceptor_next(ctx->acc, 0, &hello, &fd);
        if (s == SHOAL_ERR_TIMEOUT)
            return SHOAL_OK;
        if (s != SHOAL_OK)
            return s;
        /* A lazy hello's socket field carries the dial's number above
         * the socket's: a dial again after a dropped handshake must not
         * mix its sockets with the first one's. */
        uint32_t rank = ntohl(hello.rank), sock = ntohl(hello.sock) & 0xffffu;
        uint16_t attempt = (uint16_t)(ntohl(hello.sock) >> 16);
        shoal_tcp_ep_t *ep = rank < (uint32_t)par->nranks ? ctx->peers[rank] : NULL;
        int *set = ep ? &ctx->stash[rank * (uint32_t)ctx->nsocks] : NULL;
        if (ep && ep->state != SHOAL_TCP_UP && !ep->err && ep->stash_attempt != attempt &&
            sock < (uint32_t)ctx->nsocks) {
            if ((int16_t)(attempt - ep->stash_attempt) < 0) {
                close(fd); /* a socket of a dial the peer gave up */
                continue;
            }
            shoal_tcp_stash_clear(ctx, (int)rank);
            ep->stash_attempt = attempt;
        }
        if (ntohl(hello.magic) != SHOAL_TCP_HELLO_MAGIC ||
            ntohl(hello.nsocks) != (uint32_t)ctx->nsocks || !ep ||
            sock >= (uint32_t)ctx->nsocks || set[sock] >= 0) {
            shoal_warn(TCP, "rank %d: dropping a data connection with an unexpected hello "
                       "(rank %u, socket %u of %u)", par->rank, rank, sock,
                       ntohl(hello.nsocks));
            close(fd);
            continue;
        }
        if (ep->state == SHOAL_TCP_UP || ep->err) {
            /* A dial that lost to ours: the peer reads the close as refusal. */
            close(fd);
            continue;
        }
        if (ctx->test_drop > 0) {
            /* The tests' drop of a handshake that was whole before the
             * acceptor first looked at it (shoal_tcp_lazy_step drops the
             * ones still under way): the dialer reads a bare close. */
            ctx->test_drop--;
            shoal_debug(TCP, "rank %d: test drop of rank %u's socket %u", par->rank, rank, sock);
            close(fd);
            continue;
        }
        if (ctx->test_drop_last > 0 && ctx->nsocks > 1 && sock == (uint32_t)ctx->nsocks - 1) {
            ctx->test_drop_last--; /* the tests' late drop: the set stays incomplete */
            close(fd);
            continue;
        }
        set[sock] = fd;
        int have = 0;
        while (have < ctx->nsocks && set[have] >= 0)
            have++;
        if (have == ctx->nsocks) {
            s = shoal_tcp_decide(ctx, ep);
            if (s != SHOAL_OK)
                return s;
        }
    }
}

/* Step what connections are in the making: the acceptor, when the
 * listener woke or handshakes are pending (all_acc: always), and every
 * dial that is out. */
shoal_status_t shoal_tcp_lazy_step(shoal_tcp_ctx_t *ctx, int all_acc)
{
    if (!ctx->acc)
        return SHOAL_OK;
    size_t pending = shoal_acceptor_pending(ctx->acc);
    if (pending > 0 && ctx->test_drop > 0) {
        /* The tests' drops: handshakes under way are too old at once. */
        shoal_acceptor_expire(ctx->acc, 0);
        size_t dropped = pending - shoal_acceptor_pending(ctx->acc);
        ctx->test_drop = dropped >= (size_t)ctx->test_drop ? 0 : ctx->test_drop - (int)dropped;
    } else if (pending > 0) {
        shoal_acceptor_expire(ctx->acc, SHOAL_TCP_HANDSHAKE_NS);
    }
    if (all_acc || shoal_acceptor_pending(ctx->acc) > 0) {
        shoal_status_t s = shoal_tcp_accept_lazy(ctx);
        if (s != SHOAL_OK)
            return s;
    }
    for (size_t i = 0; i < ctx->ndialing;) {
        shoal_tcp_ep_t *ep = ctx->dialing[i];
        shoal_status_t s = shoal_tcp_dial_step(ctx, ep);
        if (s != SHOAL_OK)
            return s;
        if (i < ctx->ndialing && ctx->dialing[i] == ep)
            i++;
    }
    return SHOAL_OK;
}

/* An operation needs ep: SHOAL_OK once it is up, SHOAL_INPROGRESS while
 * its connection is being made (this call dials if nobody has), an error
 * naming the peer when it cannot be made or the deadline passed. */
shoal_status_t shoal_tcp_ensure(shoal_tcp_ep_t *ep)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)ep->base.ctx;
    if (ep->deadline_ns == 0)
        ep->deadline_ns = shoal_deadline_after(ctx->timeout_ns);
    shoal_status_t s = shoal_tcp_lazy_step(ctx, 1);
    if (s == SHOAL_OK && ep->state == SHOAL_TCP_IDLE) {
        s = shoal_tcp_dial_start(ctx, ep);
        if (s == SHOAL_OK)
            s = shoal_tcp_dial_step(ctx, ep);
        else
            shoal_tcp_dial_drop(ctx, ep);
    }
    if (ep->err)
        return ep->err;
    if (s != SHOAL_OK)
        return s;
    if (ep->state == SHOAL_TCP_UP)
        return SHOAL_OK;
    if (shoal_deadline_passed(ep->deadline_ns)) {
        shoal_tcp_dial_drop(ctx, ep);
        return shoal_tcp_fail(ep, SHOAL_ERR_TIMEOUT, "no connection within SHOAL_TIMEOUT "
                              "(%s)", ep->state == SHOAL_TCP_WAIT_PEER ? "waiting for its dial"
                                                                       : "dialing it");
    }
    return SHOAL_INPROGRESS;
}

/* ---- wireup ----------------------------------------------------------- */

shoal_status_t shoal_tcp_query(const shoal_tl_params_t *par, int peer,
                                      shoal_tl_caps_t *caps_p)
{
    caps_p->reachable = shoal_config_get()->tcp.enable && peer != par->rank;
    caps_p->latency_us = 30.0;
    caps_p->bandwidth_gbs = 1.2;
    return SHOAL_OK;
}

static void shoal_tcp_ctx_free(shoal_tcp_ctx_t *ctx)
{
    int nranks = ctx->base.params.nranks;
    if (ctx->acc)
        shoal_acceptor_destroy(ctx->acc);
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    for (int i = 0; ctx->stash && i < nranks * ctx->nsocks; i++) {
        if (ctx->stash[i] >= 0)
            close(ctx->stash[i]);
    }
    if (ctx->epfd >= 0)
        close(ctx->epfd);
    free(ctx->stash);
    free(ctx->events);
    free(ctx->list);
    free(ctx->peers);
    free(ctx->dialing);
    free(ctx);
}

shoal_status_t shoal_tcp_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
{
    const shoal_config_t *cfg = shoal_config_get();
    if (!cfg->tcp.enable || par->nranks < 2)
        return SHOAL_ERR_UNSUPPORTED;
    shoal_tcp_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        shoal_error(TCP, "tcp open: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    ctx->base.ops = &shoal_tcp_ops;
    ctx->base.params = *par;
    ctx->listen_fd = -1;
    ctx->epfd = -1;
    ctx->nsocks = cfg->tcp.nsocks;
    ctx->nslots = cfg->tcp.nslots;
    ctx->lazy = cfg->tcp.lazy;
    ctx->mem = cfg->tcp.mem;
    ctx->test_drop = cfg->tcp.test_drop;
    ctx->test_drop_last = cfg->tcp.test_drop_last;
    ctx->timeout_ns = cfg->core.timeout_ns;
    shoal_status_t s = SHOAL_ERR_INVALID_ARG;
    if (ctx->nsocks < 1 || ctx->nsocks > SHOAL_TCP_NSOCKS_MAX) {
        shoal_error(TCP, "SHOAL_TCP_NSOCKS=%d is outside 1..%d", ctx->nsocks,
                    SHOAL_TCP_NSOCKS_MAX);
        goto err_free_ctx;
    }
    ctx->chunk = par->chunk_size;
    size_t bytes;
    if (ctx->chunk > UINT32_MAX ||
        __builtin_mul_overflow(ctx->nslots, ctx->chunk, &bytes)) {
        shoal_error(TCP, "SHOAL_TCP_NSLOTS=%zu x SHOAL_CHUNK_SIZE=%zu is too large",
                    ctx->nslots, ctx->chunk);
        goto err_free_ctx;
    }
    size_t nfds = (size_t)par->nranks * (size_t)ctx->nsocks;
    ctx->nevents = (int)nfds + 1; /* and the listener, when lazy */
    ctx->stash = malloc(nfds * sizeof(*ctx->stash));
    ctx->events = calloc(nfds + 1, sizeof(*ctx->events));
    ctx->list = calloc((size_t)par->nranks, sizeof(*ctx->list));
    ctx->peers = calloc((size_t)par->nranks, sizeof(*ctx->peers));
    ctx->dialing = calloc((size_t)par->nranks, sizeof(*ctx->dialing));
    s = SHOAL_ERR_NO_MEMORY;
    if (!ctx->stash || !ctx->events || !ctx->list || !ctx->peers || !ctx->dialing) {
        shoal_error(TCP, "tcp open: out of memory");
        goto err_free_ctx;
    }
    for (size_t i = 0; i < nfds; i++)
        ctx->stash[i] = -1;
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epfd < 0) {
        shoal_error(TCP, "epoll_create1: %s", strerror(errno));
        s = SHOAL_ERR_SYSTEM;
        goto err_free_ctx;
    }
    /* The interface the bootstrap chose is one every peer could reach. */
    ctx->addr = *par->boot.local_addr(par->boot.handle);
    shoal_sock_set_port(&ctx->addr, 0);
    s = shoal_sock_listen(&ctx->addr, &ctx->listen_fd);
    if (s != SHOAL_OK)
        goto err_free_ctx;
    s = shoal_acceptor_create(ctx->listen_fd, par->boot.secret(par->boot.handle),
                              sizeof(shoal_tcp_hello_t), &ctx->acc);
    if (s != SHOAL_OK)
        goto err_free_ctx;
    char str[SHOAL_SOCKADDR_STRLEN];
    shoal_debug(TCP, "rank %d listens on %s", par->rank, shoal_sock_str(&ctx->addr, str));
    *ctx_p = &ctx->base;
    return SHOAL_OK;

err_free_ctx:
    shoal_tcp_ctx_free(ctx);
    return s;
}

shoal_status_t shoal_tcp_addr_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    shoal_tcp_addr_t addr;
    if (*len_p < sizeof(addr))
        return SHOAL_ERR_INVALID_ARG;
    memset(&addr, 0, sizeof(addr));
    addr.magic = SHOAL_TCP_MAGIC;
    addr.chunk_size = ctx->chunk;
    addr.nsocks = (uint32_t)ctx->nsocks;
    addr.lazy = (uint32_t)ctx->lazy;
    addr.addr = ctx->addr;
    memcpy(blob, &addr, sizeof(addr));
    *len_p = sizeof(addr);
    return SHOAL_OK;
}

/* Connect side (this rank is the higher one): nsocks connections, each
 * proving the secret and then saying who it is and which socket it is. */
static shoal_status_t shoal_tcp_dial(shoal_tcp_ctx_t *ctx, int peer,
                                     const shoal_tcp_addr_t *addr, uint64_t deadline_ns,
                                     int *fds)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    const uint8_t *secret = par->boot.secret(par->boot.handle);
    for (int i = 0; i < ctx->nsocks; i++) {
        shoal_tcp_hello_t hello = {
            .magic = htonl(SHOAL_TCP_HELLO_MAGIC),
            .rank = htonl((uint32_t)par->rank),
            .sock = htonl((uint32_t)i),
            .nsocks = htonl((uint32_t)ctx->nsocks),
        };
        shoal_status_t s = shoal_sock_connect(&addr->addr, deadline_ns, &fds[i]);
        if (s == SHOAL_OK) {
            s = shoal_auth_client(fds[i], secret, deadline_ns);
            if (s == SHOAL_OK)
                s = shoal_sock_send_all(fds[i], &hello, sizeof(hello), deadline_ns);
            if (s != SHOAL_OK)
                close(fds[i]);
        }
        if (s != SHOAL_OK) {
            char str[SHOAL_SOCKADDR_STRLEN];
            shoal_error(TCP, "rank %d: socket %d to rank %d at %s: %s", par->rank, i, peer,
                        shoal_sock_str(&addr->addr, str), shoal_status_string(s));
            while (i-- > 0)
                close(fds[i]);
            return s;
        }
    }
    return SHOAL_OK;
}

/* Accept side (this rank is the lower one): take the peer's nsocks
 * connections, keeping any other rank's that come first for its turn. */
static shoal_status_t shoal_tcp_accept(shoal_tcp_ctx_t *ctx, int peer, uint64_t deadline_ns,
                                       int *fds)
{
    const shoal_tl_params_t *par = &ctx->base.params;
    int *mine = &ctx->stash[(size_t)peer * (size_t)ctx->nsocks];
    for (;;) {
        int have = 0;
        while (have < ctx->nsocks && mine[have] >= 0)
            have++;
        if (have == ctx->nsocks)
            break;
        shoal_tcp_hello_t hello;
        int fd;
        shoal_status_t s = shoal_acceptor_next(ctx->acc, deadline_ns, &hello, &fd);
        if (s != SHOAL_OK) {
            shoal_error(TCP, "rank %d: waiting for the connections of rank %d: %s",
                        par->rank, peer, shoal_status_string(s));
            return s;
        }
        uint32_t rank = ntohl(hello.rank), sock = ntohl(hello.sock);
        if (ntohl(hello.magic) != SHOAL_TCP_HELLO_MAGIC ||
            ntohl(hello.nsocks) != (uint32_t)ctx->nsocks || rank <= (uint32_t)par->rank ||
            rank >= (uint32_t)par->nranks || sock >= (uint32_t)ctx->nsocks ||
            ctx->stash[rank * (uint32_t)ctx->nsocks + sock] >= 0) {
            shoal_warn(TCP, "rank %d: dropping a data connection with an unexpected hello "
                       "(rank %u, socket %u of %u)", par->rank, rank, sock,
                       ntohl(hello.nsocks));
            close(fd);
            continue;
        }
        ctx->stash[rank * (uint32_t)ctx->nsocks + sock] = fd;
    }
    for (int i = 0; i < ctx->nsocks; i++) {
        fds[i] = mine[i];
        mine[i] = -1;
    }
    return SHOAL_OK;
}

static shoal_status_t shoal_tcp_sock_setup(int fd)
{
    int one = 1;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        shoal_error(TCP, "fcntl(O_NONBLOCK): %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        shoal_error(TCP, "setsockopt(TCP_NODELAY): %s", strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

static void shoal_tcp_ep_free_slots(shoal_tcp_ep_t *ep);

static void shoal_tcp_ep_free(shoal_tcp_ep_t *ep)
{
    shoal_tcp_ep_free_slots(ep);
    free(ep);
}

static void shoal_tcp_ep_free_slots(shoal_tcp_ep_t *ep)
{
    free(ep->tx_buf);
    free(ep->rx_buf);
    free(ep->tx_hdr);
    free(ep->rx_hdr);
    free(ep->tx_len);
    free(ep->rx_len);
    ep->tx_buf = ep->rx_buf = NULL;
    ep->tx_hdr = ep->rx_hdr = NULL;
    ep->tx_len = ep->rx_len = NULL;
}

/* An endpoint to peer without sockets or slots yet. */
static shoal_status_t shoal_tcp_ep_alloc(shoal_tcp_ctx_t *ctx, int peer, shoal_tcp_ep_t **ep_p)
{
    shoal_tcp_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep) {
        shoal_error(TCP, "tcp connect: out of memory");
        return SHOAL_ERR_NO_MEMORY;
    }
    ep->base.ops = &shoal_tcp_ops;
    ep->base.ctx = &ctx->base;
    ep->base.peer = peer;
    ep->nsocks = ctx->nsocks;
    ep->chunk = ctx->chunk;
    ep->state = SHOAL_TCP_IDLE;
    ep->base.offline = 1;
    for (int i = 0; i < SHOAL_TCP_NSOCKS_MAX; i++)
        ep->fds[i] = ep->dfds[i] = -1;
    *ep_p = ep;
    return SHOAL_OK;
}

/* Give ep its slots (by the slot rule, as the next connection of ctx) and
 * the connected sockets fds, which it takes over on success, and list it
 * for progress. */
static shoal_status_t shoal_tcp_up(shoal_tcp_ctx_t *ctx, shoal_tcp_ep_t *ep, const int *fds)
{
    size_t nslots = shoal_tcp_slots_rule(ctx->mem, ctx->chunk, ctx->nslots, ctx->nup + 1);
    size_t bytes = nslots * ctx->chunk; /* a multiple of the 4096 alignment */
    ep->nslots = nslots;
    ep->tx_buf = aligned_alloc(4096, bytes);
    ep->rx_buf = aligned_alloc(4096, bytes);
    ep->tx_hdr = calloc(nslots, sizeof(*ep->tx_hdr));
    ep->rx_hdr = calloc(nslots, sizeof(*ep->rx_hdr));
    ep->tx_len = calloc(nslots, sizeof(*ep->tx_len));
    ep->rx_len = calloc(nslots, sizeof(*ep->rx_len));
    shoal_status_t s = SHOAL_ERR_NO_MEMORY;
    if (!ep->tx_buf || !ep->rx_buf || !ep->tx_hdr || !ep->rx_hdr || !ep->tx_len ||
        !ep->rx_len) {
        shoal_error(TCP, "tcp connect: no memory for 2 x %zu slots of %zu B", nslots,
                    ctx->chunk);
        goto err_free_slots;
    }
    for (int i = 0; i < ep->nsocks; i++) {
        s = shoal_tcp_sock_setup(fds[i]);
        if (s != SHOAL_OK)
            goto err_free_slots;
    }
    for (int i = 0; i < ep->nsocks; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ep};
        if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            shoal_error(TCP, "epoll_ctl(ADD): %s", strerror(errno));
            while (i-- > 0)
                epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fds[i], NULL);
            s = SHOAL_ERR_SYSTEM;
            goto err_free_slots;
        }
    }
    for (int i = 0; i < ep->nsocks; i++)
        ep->fds[i] = fds[i];
    ep->watched = 1;
    ep->state = SHOAL_TCP_UP;
    ep->base.offline = 0;
    ep->list_idx = ctx->neps;
    ctx->list[ctx->neps++] = ep;
    ctx->nup++;
    shoal_debug(TCP, "rank %d: rank %d connected, %zu slot(s) of %zu B each way",
                ctx->base.params.rank, ep->base.peer, nslots, ctx->chunk);
    return SHOAL_OK;

err_free_slots:
    shoal_tcp_ep_free_slots(ep);
    return s;
}

/* Why this cannot deadlock: every rank calls connect for its peers in
 * increasing order, dialing the lower ones and accepting the higher ones.
 * Dialing rank p from rank r > p only needs p to be inside shoal_tcp_accept
 * for some peer, because its acceptor completes the handshakes of every
 * pending connection and stashes those for later peers. By induction on
 * the rank: rank 0 dials nobody, so it reaches its accept loop at once and
 * stays there until every higher rank has connected; rank r dials only
 * lower ranks, each of which reaches and keeps accepting by the same
 * argument, so r finishes dialing and then accepts until every higher rank
 * has connected to it. Until then a dialer may wait, but only for a rank
 * that is making progress, never in a cycle. */
shoal_status_t shoal_tcp_connect(shoal_tl_ctx_t *base, int peer, const void *blob,
                                        size_t len, uint64_t deadline_ns, shoal_ep_t **ep_p)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    const shoal_tl_params_t *par = &base->params;
    shoal_tcp_addr_t addr;
    if (len != sizeof(addr)) {
        shoal_error(TCP, "rank %d sent a %zu-byte tcp address, expected %zu", peer, len,
                    sizeof(addr));
        return SHOAL_ERR_INTERNAL;
    }
    memcpy(&addr, blob, sizeof(addr));
    if (addr.magic != SHOAL_TCP_MAGIC) {
        shoal_error(TCP, "rank %d sent a malformed tcp address", peer);
        return SHOAL_ERR_INTERNAL;
    }
    if (addr.nsocks != (uint32_t)ctx->nsocks || addr.chunk_size != ctx->chunk) {
        shoal_error(TCP, "rank %d uses %u sockets and %llu-B chunks, rank %d %d and %zu B: "
                    "SHOAL_TCP_NSOCKS and SHOAL_CHUNK_SIZE must agree", peer, addr.nsocks,
                    (unsigned long long)addr.chunk_size, par->rank, ctx->nsocks, ctx->chunk);
        return SHOAL_ERR_INVALID_ARG;
    }
    if (addr.lazy != (uint32_t)ctx->lazy) {
        shoal_error(TCP, "rank %d connects tcp %s, rank %d %s: SHOAL_TCP_CONNECT must agree",
                    peer, addr.lazy ? "lazy" : "eager", par->rank,
                    ctx->lazy ? "lazy" : "eager");
        return SHOAL_ERR_INVALID_ARG;
    }
    shoal_tcp_ep_t *ep;
    shoal_status_t s = shoal_tcp_ep_alloc(ctx, peer, &ep);
    if (s != SHOAL_OK)
        return s;
    ep->addr = addr.addr;
    if (ctx->lazy) {
        /* Nothing moves until an operation needs the peer. */
        ctx->peers[peer] = ep;
        ctx->npeers++;
        *ep_p = &ep->base;
        return SHOAL_OK;
    }
    int fds[SHOAL_TCP_NSOCKS_MAX];
    s = peer < par->rank ? shoal_tcp_dial(ctx, peer, &addr, deadline_ns, fds)
                         : shoal_tcp_accept(ctx, peer, deadline_ns, fds);
    if (s != SHOAL_OK)
        goto err_free_ep;
    s = shoal_tcp_up(ctx, ep, fds);
    if (s != SHOAL_OK)
        goto err_close_fds;
    *ep_p = &ep->base;
    return SHOAL_OK;

err_close_fds:
    for (int i = 0; i < ctx->nsocks; i++)
        close(fds[i]);
err_free_ep:
    free(ep);
    return s;
}

/* Eager: everyone is connected, no more connections to take, so stop
 * listening. Lazy: keep listening, served by progress, while some peer
 * may still dial; a context that reaches no peer (shared memory took them
 * all) stops as the eager one does. */
shoal_status_t shoal_tcp_ready(shoal_tl_ctx_t *base)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    if (ctx->lazy && ctx->npeers > 0) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
        if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) != 0) {
            shoal_error(TCP, "epoll_ctl(ADD) of the listener: %s", strerror(errno));
            return SHOAL_ERR_SYSTEM;
        }
        ctx->listening = 1;
        return SHOAL_OK;
    }
    shoal_acceptor_destroy(ctx->acc);
    ctx->acc = NULL;
    close(ctx->listen_fd);
    ctx->listen_fd = -1;
    return SHOAL_OK;
}

/* Closing a socket with unread bytes makes the kernel reset the
 * connection and drop what it still had to send, messages that flush
 * already counted as delivered. So read what has arrived, and discard it. */
static void shoal_tcp_drain(shoal_tcp_ep_t *ep)
{
    size_t budget = ep->nslots * ep->chunk;
    for (int i = 0; i < ep->nsocks && !ep->err; i++) {
        while (budget > 0) {
            ssize_t r = recv(ep->fds[i], ep->rx_buf, ep->nslots * ep->chunk, MSG_DONTWAIT);
            if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
            budget -= (size_t)r < budget ? (size_t)r : budget;
        }
    }
}

void shoal_tcp_disconnect(shoal_ep_t *base)
{
    shoal_tcp_ep_t *ep = (shoal_tcp_ep_t *)base;
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base->ctx;
    if (ctx->peers[base->peer] == ep) {
        ctx->peers[base->peer] = NULL;
        ctx->npeers--;
    }
    shoal_tcp_dial_drop(ctx, ep);
    if (ep->state == SHOAL_TCP_WAIT_PEER)
        ctx->nwait_peer--;
    if (ep->state != SHOAL_TCP_UP) {
        shoal_tcp_ep_free(ep);
        return;
    }
    shoal_tcp_unwatch(ep);
    shoal_tcp_drain(ep);
    for (int i = 0; i < ep->nsocks; i++)
        close(ep->fds[i]);
    ctx->list[ep->list_idx] = ctx->list[--ctx->neps];
    ctx->list[ep->list_idx]->list_idx = ep->list_idx;
    shoal_tcp_ep_free(ep);
}

void shoal_tcp_close(shoal_tl_ctx_t *base)
{
    shoal_tcp_ctx_t *ctx = (shoal_tcp_ctx_t *)base;
    /* Endpoints the caller did not disconnect (a failed wireup) go too. */
    while (ctx->neps > 0)
        shoal_tcp_disconnect(&ctx->list[ctx->neps - 1]->base);
    for (int r = 0; r < ctx->base.params.nranks; r++) {
        if (ctx->peers[r])
            shoal_tcp_disconnect(&ctx->peers[r]->base);
    }
    shoal_tcp_ctx_free(ctx);
}
