/* The tcp transport's private types, shared by tcp.c (moving data) and
 * tcp_conn.c (making connections). Nothing outside src/transport/tcp*.c
 * includes it. */
#ifndef SHOAL_TCP_PRIV_H
#define SHOAL_TCP_PRIV_H

#include "transport.h"

#include "base/auth.h"
#include "base/sock.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

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
/* The bytes with which an acceptor takes a lazy connection's sockets, or
 * refuses them (then closes them) because its own dial wins. */
#define SHOAL_TCP_TAKEN 0x5a
#define SHOAL_TCP_REFUSED 0xa5

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
    uint16_t attempt;       /* our dials so far (their hellos carry it) */
    uint16_t stash_attempt; /* the peer's dial whose sockets the stash holds */
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
    int test_drop;           /* SHOAL_TEST_TCP_DROP: handshakes still to drop */
    int test_drop_last;      /* SHOAL_TEST_TCP_DROP_LAST: sets still to cut */
    size_t redials;          /* dials made again after a dropped handshake */
    size_t nup;              /* connections made so far, for the slot rule */
    shoal_tcp_ep_t **peers;  /* lazy: the endpoint of each rank, or NULL */
    size_t npeers;
    shoal_tcp_ep_t **dialing;/* lazy endpoints with a dial out */
    size_t ndialing;
    size_t nwait_peer;       /* lazy endpoints WAIT_PEER */
    int listening;           /* the listener is in epoll (lazy, after ready) */
    uint64_t timeout_ns;     /* SHOAL_TIMEOUT */
} shoal_tcp_ctx_t;

/* tcp.c */
void shoal_tcp_unwatch(shoal_tcp_ep_t *ep);
/* Record that the connection to the peer is lost; logged once, here. */
__attribute__((format(printf, 3, 4)))
shoal_status_t shoal_tcp_fail(shoal_tcp_ep_t *ep, shoal_status_t status, const char *fmt, ...);

/* tcp_conn.c: lazy connections. */
/* Take every connection whose handshake is complete, without waiting. */
shoal_status_t shoal_tcp_accept_lazy(shoal_tcp_ctx_t *ctx);
/* Step the acceptor (always with all_acc, else when handshakes are
 * pending) and every dial that is out. */
shoal_status_t shoal_tcp_lazy_step(shoal_tcp_ctx_t *ctx, int all_acc);
/* An operation needs ep: SHOAL_OK once it is up, SHOAL_INPROGRESS while
 * its connection is being made, an error naming the peer otherwise. */
shoal_status_t shoal_tcp_ensure(shoal_tcp_ep_t *ep);

/* tcp_conn.c: the wireup's ops. */
shoal_status_t shoal_tcp_query(const shoal_tl_params_t *par, int peer, shoal_tl_caps_t *caps_p);
shoal_status_t shoal_tcp_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p);
shoal_status_t shoal_tcp_addr_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p);
shoal_status_t shoal_tcp_connect(shoal_tl_ctx_t *base, int peer, const void *blob, size_t len,
                                 uint64_t deadline_ns, shoal_ep_t **ep_p);
shoal_status_t shoal_tcp_ready(shoal_tl_ctx_t *base);
void shoal_tcp_disconnect(shoal_ep_t *base);
void shoal_tcp_close(shoal_tl_ctx_t *base);

#endif
