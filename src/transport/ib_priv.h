/* The ib transport's private types, shared by ib.c (moving data, watching
 * peers) and ib_conn.c (making connections). Nothing outside
 * src/transport/ib*.c includes it.
 *
 * An endpoint is nqps RC queue pairs to one peer, each carrying a FIFO of
 * slots (ib_fifo.h) with its share of the slots; message n travels on
 * queue pair n mod nqps, so both ends find every message by counting. The
 * authenticated socket the two ends exchanged their queue pairs' addresses
 * over stays open and silent: its end (EOF or a reset) is how a rank
 * learns that the peer's process is gone, where the device would only say
 * so once a write of its own timed out. */
#ifndef SHOAL_IB_PRIV_H
#define SHOAL_IB_PRIV_H

#include "transport.h"

#include "ib_fifo.h"
#include "ib_qp.h"

#include "base/auth.h"
#include "base/config.h"
#include "base/sock.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_IB_MAGIC 0x73686f616c696276ull /* "shoalibv" */
#define SHOAL_IB_HELLO_MAGIC 0x53494256u     /* "SIBV" */
/* How often progress looks at the peers' sockets and the device's
 * events: a dead peer is noticed within this, at the cost of one poll(2). */
#define SHOAL_IB_WATCH_NS 1000000u
/* Bytes of an endpoint's bounce buffer for reads. */
#define SHOAL_IB_BOUNCE (256u * 1024)
/* How long a wait polls before it sleeps on the completion channel. */
#define SHOAL_IB_SPIN_NS 50000u
/* Remote keys an endpoint keeps attached. */
#define SHOAL_IB_RKEYS 8

/* Address blob of the wireup exchange: what must agree between the two
 * ends and where to dial for the queue pairs' addresses. */
typedef struct {
    uint64_t magic;
    uint64_t chunk_size;
    uint64_t nslots;
    uint32_t nqps;
    uint32_t link;            /* shoal_ib_link_t of the chosen port */
    shoal_sockaddr_t addr;    /* the listener */
} shoal_ib_blob_t;

_Static_assert(sizeof(shoal_ib_blob_t) <= SHOAL_TL_ADDR_MAX, "ib address too big");

/* First bytes of a connection after authentication; network order. */
typedef struct {
    uint32_t magic;
    uint32_t rank;
} shoal_ib_hello_t;

/* A peer's memory attached on an endpoint (rkey_attach). */
typedef struct {
    shoal_rmem_t base;
    uint64_t raddr;
    uint32_t rkey;
    int used;
} shoal_ib_rmem_t;

#if SHOAL_HAVE_IBVERBS
typedef struct shoal_ib_ep {
    shoal_ep_t base;
    int nqps;
    shoal_ib_qp_t qp[SHOAL_IB_QPS_MAX];
    shoal_ib_fifo_t fifo[SHOAL_IB_QPS_MAX];
    uint64_t tx_msgs;       /* messages posted: the next goes on fifo[tx_msgs % nqps] */
    uint64_t rx_msgs;       /* messages released */
    size_t rx_len;          /* the length of the message recv_slot gave last */
    int fd;                 /* the connection socket, watched for the peer's end */
    int gone;               /* that socket ended: the peer's process closed or died */
    shoal_status_t err;     /* sticky: once lost, every call reports it */
    size_t list_idx;        /* place in the context's endpoint list */
    shoal_ib_rmem_t rkeys[SHOAL_IB_RKEYS];
    unsigned rkey_next;
    /* get: the registered buffer reads land in before they are copied
     * out (made on the first get). */
    unsigned char *bounce;
    struct ibv_mr *bounce_mr;
} shoal_ib_ep_t;

/* A registration: a memory region of the device (ib_rcache.c). */
typedef struct shoal_ib_mem {
    shoal_mem_t base;
    struct shoal_ib_reg *reg;
} shoal_ib_mem_t;

typedef struct shoal_ib_reg shoal_ib_reg_t;

typedef struct {
    shoal_tl_ctx_t base;
    shoal_ib_dev_t dev;
    int nqps;
    size_t nslots;           /* per direction and peer, over all its queue pairs */
    size_t chunk;
    int listen_fd;
    shoal_sockaddr_t addr;
    shoal_acceptor_t *acc;
    int *stash;              /* nranks accepted sockets waiting for their turn */
    shoal_ib_ep_t **list;    /* connected endpoints */
    size_t neps;
    struct pollfd *pfds;     /* the endpoints' sockets, the device's event fd and
                              * its completion channel's */
    uint64_t watch_ns;       /* when progress looks at them next */
    uint64_t timeout_ns;     /* SHOAL_TIMEOUT */
    shoal_ib_reg_t *regs;    /* the registration cache (ib_rcache.c) */
    size_t reg_misses;       /* regions it registered so far */
} shoal_ib_ctx_t;

/* ib.c */
/* Record that the peer is lost; logged once, here, naming both ranks. */
__attribute__((format(printf, 3, 4)))
shoal_status_t shoal_ib_fail(shoal_ib_ep_t *ep, shoal_status_t status, const char *fmt, ...);

/* ib_conn.c: the wireup's ops. */
shoal_status_t shoal_ib_query(const shoal_tl_params_t *par, int peer, shoal_tl_caps_t *caps_p);
shoal_status_t shoal_ib_open(const shoal_tl_params_t *par, shoal_tl_ctx_t **ctx_p);
shoal_status_t shoal_ib_blob_pack(shoal_tl_ctx_t *base, void *blob, size_t *len_p);
shoal_status_t shoal_ib_connect(shoal_tl_ctx_t *base, int peer, const void *blob, size_t len,
                                uint64_t deadline_ns, shoal_ep_t **ep_p);
shoal_status_t shoal_ib_ready(shoal_tl_ctx_t *base);
void shoal_ib_disconnect(shoal_ep_t *base);
void shoal_ib_close(shoal_tl_ctx_t *base);

/* ib_rcache.c: memory regions shared by registrations of overlapping
 * ranges, each region kept while a registration holds it. */
shoal_status_t shoal_ib_mem_reg(shoal_tl_ctx_t *base, void *addr, size_t len,
                                shoal_mem_kind_t kind, shoal_mem_t **mem_p);
shoal_status_t shoal_ib_mem_dereg(shoal_tl_ctx_t *base, shoal_mem_t *mem);
/* The region of mem: its local key and remote key. */
struct ibv_mr *shoal_ib_mem_mr(const shoal_mem_t *mem);
/* Regions the cache holds now and the ibv_reg_mr calls it made so far. */
size_t shoal_ib_rcache_regions(const shoal_tl_ctx_t *base);
size_t shoal_ib_rcache_misses(const shoal_tl_ctx_t *base);
/* Deregister every region (the context closes). */
void shoal_ib_rcache_clear(shoal_ib_ctx_t *ctx);
#endif

#endif
