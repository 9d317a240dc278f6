/* Reliable connections over one RDMA port (ib_qp.c), the ib transport's
 * building blocks: the device opened with its protection domain, an RC
 * queue pair with its completion queue, the address a peer needs to reach
 * it (and its wire form, for the wireup blob), the moves from reset to
 * ready-to-send, and memory regions.
 *
 * Ownership: each object is the caller's, from its create or open to its
 * destroy or close; a queue pair and a region need their device open.
 * Thread-safety: one thread per object at a time. */
#ifndef SHOAL_IB_QP_H
#define SHOAL_IB_QP_H

#include "ib_dev.h"
#include "ib_verbs.h"

#include <stdint.h>

/* What a peer needs to reach a queue pair. */
typedef struct {
    uint32_t qpn;
    uint32_t psn;    /* the first packet sequence number it sends (24 bits) */
    uint16_t lid;    /* InfiniBand */
    uint8_t link;    /* shoal_ib_link_t */
    uint8_t mtu;     /* its port's active MTU, as enum ibv_mtu (1..5) */
    uint8_t gid[16]; /* RoCE */
} shoal_ib_addr_t;

/* The wire form: little-endian fields in the order above. */
#define SHOAL_IB_ADDR_BYTES 28
void shoal_ib_addr_pack(const shoal_ib_addr_t *a, uint8_t out[SHOAL_IB_ADDR_BYTES]);
/* SHOAL_OK, or SHOAL_ERR_PEER for a blob of another length, an unknown link
 * layer, an MTU out of range or a PSN wider than 24 bits. */
shoal_status_t shoal_ib_addr_unpack(const uint8_t *in, size_t len, shoal_ib_addr_t *a);

/* Verbs objects this process holds now (device contexts, protection
 * domains, completion queues, queue pairs, memory regions): what a test of
 * teardown expects to be 0 once every communicator is gone. */
size_t shoal_ib_live_objects(void);

#if SHOAL_HAVE_IBVERBS
typedef struct {
    const shoal_ibv_t *v;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    shoal_ib_port_t port;
    struct ibv_comp_channel *chan; /* every completion queue's, for sleeping */
    int mtu;          /* the port's active MTU, enum ibv_mtu */
    int max_rd_atomic; /* RDMA reads a queue pair may have outstanding */
} shoal_ib_dev_t;

/* Opens port's device (a port of shoal_ib_ports_find). SHOAL_OK, or
 * SHOAL_ERR_UNSUPPORTED (no libibverbs, no such device), SHOAL_ERR_SYSTEM
 * (a verbs call failed: logged with errno and the device's name). */
shoal_status_t shoal_ib_dev_open(const shoal_ib_port_t *port, shoal_ib_dev_t *dev);
void shoal_ib_dev_close(shoal_ib_dev_t *dev);

typedef struct {
    shoal_ib_dev_t *dev;
    struct ibv_cq *cq;    /* sends' and receives' completions */
    struct ibv_qp *qp;
    size_t max_inline;    /* bytes a write may carry inline */
    shoal_ib_addr_t local;
} shoal_ib_qp_t;

/* An RC queue pair in INIT with depth work requests each way and room for
 * all their completions, and its address in qp->local. */
shoal_status_t shoal_ib_qp_create(shoal_ib_dev_t *dev, int depth, shoal_ib_qp_t *qp);
/* To RTR against remote, then RTS. Receiver-not-ready is an error, never
 * a retry: the transport grants its sends with credits. SHOAL_ERR_PEER
 * for an address of another link layer. */
shoal_status_t shoal_ib_qp_connect(shoal_ib_qp_t *qp, const shoal_ib_addr_t *remote);
/* Moves the queue pair to the error state and reaps its completions (the
 * ones flushed in error included) until none is left or deadline_ns:
 * before destroy, so nothing of it is in flight in the device. */
void shoal_ib_qp_drain(shoal_ib_qp_t *qp, uint64_t deadline_ns);
void shoal_ib_qp_destroy(shoal_ib_qp_t *qp);

/* Registers [addr, addr + len) for local access and remote reads and
 * writes; NULL (logged) on failure. */
struct ibv_mr *shoal_ib_mr_reg(shoal_ib_dev_t *dev, void *addr, size_t len);
void shoal_ib_mr_dereg(shoal_ib_dev_t *dev, struct ibv_mr *mr);
#endif

#endif
