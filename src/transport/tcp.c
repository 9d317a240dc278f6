/* TCP transport: ranks on different hosts (or any ranks, when shared memory
 * is off).
 *
 * Each pair of ranks shares SHOAL_TCP_NSOCKS authenticated sockets. A message
 * is a header (length, sequence number) followed by its payload, which is cut
 * into stripes: stripe i always travels on socket i, so every socket is an
 * ordered stream and both ends find each stripe's bounds from the length
 * alone. Messages shorter than two stripes of SHOAL_TCP_STRIPE_MIN stay on
 * socket 0, where the header travels too.
 *
 * Each endpoint owns nslots send slots and nslots receive slots of
 * chunk_size bytes, allocated at connect. Every socket keeps its own cursor
 * (message number, byte offset inside its part of that message) per
 * direction; a send slot is free again once every socket has sent its part,
 * and a received message is complete once every socket has read its part.
 * Sockets are non-blocking after connect: progress moves what the kernel
 * takes or has, and never waits.
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
 * acceptor answers a complete set of sockets with one byte on socket 0
 * (taken) or closes them (refused); the lower rank refuses the higher
 * one's set while its own dial is out, and the higher rank drops its own
 * dial and takes the lower one's. A dialer sends nothing before that
 * byte, so no message rides on a set that loses, and a refused higher
 * rank waits for the lower one's set, which is on its way.
 *
 * Slot memory (SHOAL_TCP_MEM). The k-th peer a context connects gets
 * min(SHOAL_TCP_NSLOTS, SHOAL_TCP_MEM / (2 x chunk x k)) slots per
 * direction, and at least one (shoal_tcp_slots_rule): the first peers
 * get the full depth, and once many are connected each new one costs one
 * slot each way. One slot is enough for tcp to move: a posted message
 * leaves for the kernel's socket buffer at once, so the slot is free
 * again as soon as the kernel takes it. */
#include "transport.h"

#include "base/auth.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/log.h"
#include "base/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHOAL_TCP_MAGIC 0x73686f616c746370ull /* "shoaltcp" */
#define SHOAL_TCP_HELLO_MAGIC 0x53544350u     /* "STCP" */
#define SHOAL_TCP_NSOCKS_MAX 16
/* Smallest stripe worth a socket of its own: below it the extra system call
 * costs more than the parallel stream gains. */
#define SHOAL_TCP_STRIPE_MIN 1024
#define SHOAL_TCP_STRIPE_ALIGN 64
/* Most iovec entries one sendmsg or recvmsg gathers (two per message). */
#define SHOAL_TCP_IOV_MAX 32
/* How long a lazy listener lets a handshake that started hang: a real
 * peer answers in microseconds while it needs the connection, and dials
 * again should the acceptor drop it; a silent stranger is dropped. */
#define SHOAL_TCP_HANDSHAKE_NS (2ull * 1000000000ull)
/* How long a wait polls before it sleeps while connections are made. */
#define SHOAL_TCP_SPIN_NS 50000u
/* The byte with which an acceptor takes a lazy connection's sockets. */
#define SHOAL_TCP_TAKEN 0x5a

/* States of an endpoint's connection. */
enum {
    SHOAL_TCP_IDLE,     /* lazy, nothing made yet */
    SHOAL_TCP_DIALING,  /* our dial is out */
    SHOAL_TCP_WAIT_PEER,/* refused: the lower peer's own dial is on its way */
    SHOAL_TCP_UP,       /* sockets and slots in place */
};

/* Phases of a dial (shoal_tcp_ep_t.dial_phase; 0: none out). */
enum {
    SHOAL_TCP_DIAL_HANDSHAKE = 1, /* the sockets prove the secret and say hello */
    SHOAL_TCP_DIAL_WAIT_ACK,      /* waiting to be taken or refused */
};

/* Address blob. chunk_size and nsocks must agree on both ends: the receiver
 * sizes its slots by the first and finds stripes with the second. */
typedef struct {
    uint64_t magic;
    uint64_t chunk_size;
    uint32_t nsocks;
    uint32_t lazy;            /* SHOAL_TCP_CONNECT, which must agree too */
    shoal_sockaddr_t addr;
} shoal_tcp_addr_t;

_Static_assert(sizeof(shoal_tcp_addr_t) <= SHOAL_TL_ADDR_MAX, "tcp address too big");

/* First bytes of a data connection after authentication; network order. */
typedef struct {
    uint32_t magic;
    uint32_t rank;
    uint32_t sock;
    uint32_t nsocks;
} shoal_tcp_hello_t;

/* Message header on socket 0. The sequence number catches a stream that
 * lost its framing (network order); the caller's header blob follows as
 * given: it is the layer above's to encode, and ranks of one job share
 * the byte order of their build. */
typedef struct {
    uint32_t len;
    uint32_t seq;
    unsigned char hdr[SHOAL_TL_HDR_BYTES];
} shoal_tcp_hdr_t;

_Static_assert(sizeof(shoal_tcp_hdr_t) == 32, "the header has no padding");

#define SHOAL_TCP_HDR sizeof(shoal_tcp_hdr_t)

/* One socket's position in one direction. */
typedef struct {
    uint64_t msg; /* messages whose part on this socket is done */
    size_t off;   /* bytes done of message msg's part */
} shoal_tcp_cursor_t;

typedef struct shoal_tcp_ep {
    shoal_ep_t base;
    int nsocks;
    size_t nslots;
    size_t chunk;
    shoal_status_t err;     /* sticky: once lost, every call reports it */
    int watched;            /* sockets registered with the context's epoll */
    int eof;                /* the peer closed socket 0 between messages */
    size_t list_idx;        /* place in the context's endpoint list */
    uint64_t pulled;        /* progress round that last pulled it */
    int fds[SHOAL_TCP_NSOCKS_MAX];
    int state;              /* SHOAL_TCP_IDLE... */
    uint64_t deadline_ns;   /* lazy: first use + SHOAL_TIMEOUT, to be up by */
    size_t dial_idx;        /* place in the context's dialing list */
    int dial_phase;         /* SHOAL_TCP_DIAL_...; 0: no dial out */
    int dfds[SHOAL_TCP_NSOCKS_MAX]; /* the dial's sockets */
    shoal_auth_dial_t *dial;/* their nsocks handshakes */
    shoal_sockaddr_t addr;  /* the peer's listener */

    unsigned char *tx_buf;  /* nslots x chunk */
    shoal_tcp_hdr_t *tx_hdr;
    size_t *tx_len;
    shoal_tcp_cursor_t tx[SHOAL_TCP_NSOCKS_MAX];
    uint64_t tx_head;       /* messages posted */
    uint64_t tx_tail;       /* messages sent on every socket */
    size_t tx_idx;          /* tx_head % nslots */

    unsigned char *rx_buf;
    shoal_tcp_hdr_t *rx_hdr;
    size_t *rx_len;
        shoal_tcp_cursor_t rx[SHOAL_TCP_NSOCKS_MAX];
    uint64_t rx_hdrs;       /* headers read */
    uint64_t rx_head;       /* messages read on every socket */
    uint64_t rx_tail;       /* messages released */
    size_t rx_idx;          /* rx_tail % nslots */
} shoal_tcp_ep_t;

typedef struct {
    shoal_tl_ctx_t base;
    int nsocks;
    size_t nslots;
    size_t chunk;
    int listen_fd;
    shoal_sockaddr_t addr;
    shoal_acceptor_t *acc;
    int *stash;              /* nranks x nsocks accepted fds waiting for their turn */
    int epfd;
    struct epoll_event *events;
    int nevents;
    shoal_tcp_ep_t **list;   /* connected endpoints, for progress */
    size_t neps;
    uint64_t round;          /* progress calls, to pull each endpoint once per call */
    int lazy;                /* SHOAL_TCP_CONNECT=lazy */
    size_t mem;              /* SHOAL_TCP_MEM */
    size_t nup;              /* connections made so far, for the slot rule */
    shoal_tcp_ep_t **peers;  /* lazy: the endpoint of each rank, or NULL */
    size_t npeers;
    shoal_tcp_ep_t **dialing;/* lazy endpoints with a dial out */
    size_t ndialing;
    size_t nwait_peer;       /* lazy endpoints WAIT_PEER */
    int listening;           /* the listener is in epoll (lazy, after ready) */
    uint64_t timeout_ns;     /* SHOAL_TIMEOUT */
} shoal_tcp_ctx_t;

size_t shoal_tcp_slots_rule(size_t mem, size_t chunk, size_t nslots, size_t k)
{
    if (mem == 0 || chunk == 0 || k == 0)
        return nslots;
    size_t fit = mem / (2 * chunk) / k;
    size_t n = fit < nslots ? fit : nslots;
    return n < 1 ? 1 : n;
}

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

static void shoal_tcp_unwatch(shoal_tcp_ep_t *ep)
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
static shoal_status_t shoal_tcp_fail(shoal_tcp_ep_t *ep, shoal_status_t status,
                                     const char *fmt, ...)
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
            .sock = htonl((uint32_t)i),
            .nsocks = htonl((uint32_t)ctx->nsocks),
        };
        shoal_auth_dial_start(&ep->dial[i], fd, secret, &hello, sizeof(hello));
    }
    shoal_debug(TCP, "rank %d dials rank %d", par->rank, ep->base.peer);
    return SHOAL_OK;
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
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return SHOAL_OK;
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
    if (r == 1)
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it answered our connection with %#x", b);
    /* Closed: refused. Only a lower rank refuses, and only while its own
     * dial is out, which this rank will take. */
    shoal_tcp_dial_drop(ctx, ep);
    if (ep->base.peer > par->rank)
        return shoal_tcp_fail(ep, SHOAL_ERR_PEER, "it closed our connection before taking "
                              "it (has it exited?)");
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
    shoal_debug(TCP, "rank %d took rank %d's dial", par->rank, peer);
    return SHOAL_OK;
}

/* Take every connection whose handshake is complete, without waiting.
 * A stranger's bytes never get here (the acceptor drops them); a proven
 * connection with a hello that names no peer of this context is dropped
 * and logged. */
static shoal_status_t shoal_tcp_accept_lazy(shoal_tcp_ctx_t *ctx)
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
        uint32_t rank = ntohl(hello.rank), sock = ntohl(hello.sock);
        shoal_tcp_ep_t *ep = rank < (uint32_t)par->nranks ? ctx->peers[rank] : NULL;
        if (ntohl(hello.magic) != SHOAL_TCP_HELLO_MAGIC ||
            ntohl(hello.nsocks) != (uint32_t)ctx->nsocks || !ep ||
            sock >= (uint32_t)ctx->nsocks ||
            ctx->stash[rank * (uint32_t)ctx->nsocks + sock] >= 0) {
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
        int *set = &ctx->stash[rank * (uint32_t)ctx->nsocks];
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
static shoal_status_t shoal_tcp_lazy_step(shoal_tcp_ctx_t *ctx, int all_acc)
{
    if (!ctx->acc)
        return SHOAL_OK;
    if (shoal_acceptor_pending(ctx->acc) > 0)
        shoal_acceptor_expire(ctx->acc, SHOAL_TCP_HANDSHAKE_NS);
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
static shoal_status_t shoal_tcp_ensure(shoal_tcp_ep_t *ep)
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

/* ---- wireup ----------------------------------------------------------- */

static shoal_status_t shoal_tcp_query(const shoal_tl_params_t *par, int peer,
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

static shoal_status_t shoal_tcp_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p)
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

static shoal_status_t shoal_tcp_addr_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p)
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
static shoal_status_t shoal_tcp_connect(shoal_tl_ctx_t *base, int peer, const void *blob,
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
static shoal_status_t shoal_tcp_ready(shoal_tl_ctx_t *base)
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

static void shoal_tcp_disconnect(shoal_ep_t *base)
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

static void shoal_tcp_close(shoal_tl_ctx_t *base)
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
