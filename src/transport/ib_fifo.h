/* A FIFO of slots over one connected RC queue pair (ib_fifo.c): the ib
 * transport's data path, each direction of an endpoint.
 *
 * Each side has a ring of nslots receive slots that the peer RDMA-writes
 * into, and as many send slots, its own, that the messages are built in.
 * A message is one RDMA write with immediate of a slot (a 32-byte head
 * with the length and the transport header, then the payload) into the
 * peer's receive slot of the same index. The receiver's completion of the
 * immediate says the slot is whole (RC delivers in order). Credits: each
 * side sends the count of slots it released as the immediate of an empty
 * RDMA write (at the credit address of the other's region, where nothing
 * lands), and a sender counts a credit when it reaps that immediate's
 * completion, taking a slot only while fewer than nslots are
 * unreleased: a write never finds its slot busy, and a sender that only
 * sends still reaps the credits it lives on. So at most nslots messages
 * and nslots credits (each credit carries a count the sender has not yet
 * used) wait unreaped on a side, which keeps 2 nslots + 2 receives posted:
 * receiver-not-ready never happens.
 *
 * The calls mirror the transport interface's (transport.h): send_slot,
 * send_post, recv_slot, recv_release, flush, and progress, which reaps
 * completions; a completion in error is SHOAL_ERR_PEER, logged with the
 * device and the status. One thread per FIFO. */
#ifndef SHOAL_IB_FIFO_H
#define SHOAL_IB_FIFO_H

#include "ib_qp.h"

#include <stddef.h>
#include <stdint.h>

#define SHOAL_IB_SLOT_HEAD 32

/* What the peer needs to write into this side: its receive ring and the
 * address its credits' empty writes name. */
typedef struct {
    uint64_t ring;
    uint64_t credit;
    uint32_t rkey;
} shoal_ib_fifo_remote_t;

#if SHOAL_HAVE_IBVERBS
typedef struct {
    shoal_ib_qp_t *qp;
    size_t nslots;
    size_t chunk;          /* payload bytes of a slot */
    size_t stride;         /* bytes of a slot: head and payload, 64-aligned */
    unsigned char *mem;    /* send ring, receive ring, credit address */
    struct ibv_mr *mr;
    shoal_ib_fifo_remote_t peer;
    /* Sending. */
    uint64_t tx_head;      /* messages posted */
    uint64_t tx_done;      /* their writes completed */
    uint64_t peer_freed;   /* slots the peer released, as the credits reaped give it */
    /* Receiving. */
    uint64_t rx_arrived;   /* messages whose immediate came */
    uint64_t rx_tail;      /* messages released */
    uint64_t credit_sent;  /* rx_tail as the last credit sent gave it */
    size_t sq_used;        /* send work requests not yet completed */
    size_t sq_depth;
    size_t max_inline;     /* writes up to this many bytes go inline */
    uint64_t reaped;       /* completions reaped: what a sleeper compares */
    uint64_t reads_done;   /* RDMA reads completed */
} shoal_ib_fifo_t;

/* A FIFO on qp (created with depth at least shoal_ib_fifo_depth(nslots)),
 * its receives posted; f's remote description of itself in *self. */
shoal_status_t shoal_ib_fifo_create(shoal_ib_qp_t *qp, size_t nslots, size_t chunk,
                                    shoal_ib_fifo_t *f, shoal_ib_fifo_remote_t *self);
/* The queue depth a FIFO of nslots needs. */
int shoal_ib_fifo_depth(size_t nslots);
/* The peer's description, once its queue pair is connected. */
void shoal_ib_fifo_attach(shoal_ib_fifo_t *f, const shoal_ib_fifo_remote_t *peer);
void shoal_ib_fifo_destroy(shoal_ib_fifo_t *f);

shoal_status_t shoal_ib_fifo_send_slot(shoal_ib_fifo_t *f, void **buf_p, size_t *cap_p);
shoal_status_t shoal_ib_fifo_send_post(shoal_ib_fifo_t *f, size_t len, const void *hdr);
shoal_status_t shoal_ib_fifo_recv_slot(shoal_ib_fifo_t *f, const void **buf_p, size_t *len_p,
                                       void *hdr_p);
shoal_status_t shoal_ib_fifo_recv_release(shoal_ib_fifo_t *f);
/* SHOAL_OK once every posted message's write completed. */
shoal_status_t shoal_ib_fifo_flush(shoal_ib_fifo_t *f);
shoal_status_t shoal_ib_fifo_progress(shoal_ib_fifo_t *f);
/* Zero-copy: an RDMA write of len bytes (at most SHOAL_IB_PUT_MAX) from
 * src, registered with lkey, to remote under rkey, on the FIFO's queue pair,
 * so the next message posted arrives behind it. Only while put_room says
 * the send queue has room for it and its signal. */
#define SHOAL_IB_PUT_MAX ((size_t)1 << 30)
int shoal_ib_fifo_put_room(const shoal_ib_fifo_t *f);
/* An RDMA read of len bytes (at most SHOAL_IB_PUT_MAX) from remote under
 * rkey into dst, registered with lkey; reads_done counts it once it
 * completed. Only while put_room says there is room. */
shoal_status_t shoal_ib_fifo_read(shoal_ib_fifo_t *f, void *dst, uint32_t lkey, uint64_t remote,
                                  uint32_t rkey, size_t len);
shoal_status_t shoal_ib_fifo_put(shoal_ib_fifo_t *f, const void *src, uint32_t lkey,
                                 uint64_t remote, uint32_t rkey, size_t len);
#endif

#endif
