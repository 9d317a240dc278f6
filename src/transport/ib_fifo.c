/* A FIFO of slots over one RC queue pair (ib_fifo.h). */
#include "ib_fifo.h"

#include "base/log.h"
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SHOAL_IB_SLOT_HEAD == 8 + SHOAL_TL_HDR_BYTES,
               "a slot's head is its length and the transport header");

#if SHOAL_HAVE_IBVERBS
enum { WR_DATA = 1, WR_CREDIT = 2, WR_RECV = 3, WR_PUT = 4, WR_READ = 5 };
/* The immediate of a credit write: this bit, and the released count's low
 * 31 bits; a message's carries its number's low 31 bits. */
#define IB_IMM_CREDIT 0x80000000u
#define IB_IMM_COUNT 0x7fffffffu

/* The credit address: after both rings. */
static size_t credit_off(const shoal_ib_fifo_t *f)
{
    return 2 * f->nslots * f->stride;
}

static unsigned char *tx_slot(const shoal_ib_fifo_t *f, uint64_t n)
{
    return f->mem + (size_t)(n % f->nslots) * f->stride;
}

static unsigned char *rx_slot(const shoal_ib_fifo_t *f, uint64_t n)
{
    return f->mem + (f->nslots + (size_t)(n % f->nslots)) * f->stride;
}

int shoal_ib_fifo_depth(size_t nslots)
{
    /* nslots data writes and as many credit writes in flight, at most,
     * and room for a put beside its signal; as many receives. */
    return (int)(2 * nslots + 4);
}

static shoal_status_t post_recv(shoal_ib_fifo_t *f)
{
    struct ibv_recv_wr wr = {.wr_id = WR_RECV}, *bad;
    if (ibv_post_recv(f->qp->qp, &wr, &bad) != 0) {
        shoal_error(IBV, "ibv_post_recv on %s: %s", f->qp->dev->port.dev, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

shoal_status_t shoal_ib_fifo_create(shoal_ib_qp_t *qp, size_t nslots, size_t chunk,
                                    shoal_ib_fifo_t *f, shoal_ib_fifo_remote_t *self)
{
    memset(f, 0, sizeof(*f));
    f->qp = qp;
    f->nslots = nslots;
    f->chunk = chunk;
    f->stride = (SHOAL_IB_SLOT_HEAD + chunk + 63) & ~(size_t)63;
    f->sq_depth = (size_t)shoal_ib_fifo_depth(nslots);
    f->max_inline = qp->max_inline;
    size_t bytes = credit_off(f) + 64;
    if (posix_memalign((void **)&f->mem, 4096, bytes) != 0) {
        f->mem = NULL;
        return SHOAL_ERR_NO_MEMORY;
    }
    memset(f->mem, 0, bytes);
    f->mr = shoal_ib_mr_reg(qp->dev, f->mem, bytes);
    if (!f->mr) {
        shoal_ib_fifo_destroy(f);
        return SHOAL_ERR_SYSTEM;
    }
    /* A receive for every write with immediate that may be in flight:
     * nslots messages and as many credits. */
    for (size_t i = 0; i < 2 * nslots + 2; i++) {
        shoal_status_t s = post_recv(f);
        if (s != SHOAL_OK) {
            shoal_ib_fifo_destroy(f);
            return s;
        }
    }
    self->ring = (uintptr_t)rx_slot(f, 0);
    self->credit = (uintptr_t)(f->mem + credit_off(f));
    self->rkey = f->mr->rkey;
    return SHOAL_OK;
}

void shoal_ib_fifo_attach(shoal_ib_fifo_t *f, const shoal_ib_fifo_remote_t *peer)
{
    f->peer = *peer;
}

void shoal_ib_fifo_destroy(shoal_ib_fifo_t *f)
{
    if (f->mr)
        shoal_ib_mr_dereg(f->qp->dev, f->mr);
    free(f->mem);
    memset(f, 0, sizeof(*f));
}

static shoal_status_t post_write_key(shoal_ib_fifo_t *f, uint64_t kind, const void *src,
                                     uint32_t lkey, size_t len, uint64_t remote, uint32_t rkey,
                                     int imm, uint32_t imm_data)
{
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = kind, .sg_list = len ? &sge : NULL, .num_sge = len ? 1 : 0,
        .opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm_data),
        .wr = {.rdma = {.remote_addr = remote, .rkey = rkey}},
    }, *bad;
    /* Small writes go inline: the device copies them at post time. */
    if (len <= f->max_inline)
        wr.send_flags |= IBV_SEND_INLINE;
    if (ibv_post_send(f->qp->qp, &wr, &bad) != 0) {
        shoal_error(IBV, "ibv_post_send on %s: %s", f->qp->dev->port.dev, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    f->sq_used++;
    return SHOAL_OK;
}

static shoal_status_t post_write(shoal_ib_fifo_t *f, uint64_t kind, void *src, size_t len,
                                 uint64_t remote, int imm, uint32_t imm_data)
{
    return post_write_key(f, kind, src, f->mr->lkey, len, remote, f->peer.rkey, imm, imm_data);
}

int shoal_ib_fifo_put_room(const shoal_ib_fifo_t *f)
{
    return f->sq_used + 2 <= f->sq_depth;
}

shoal_status_t shoal_ib_fifo_read(shoal_ib_fifo_t *f, void *dst, uint32_t lkey, uint64_t remote,
                                  uint32_t rkey, size_t len)
{
    if (len > SHOAL_IB_PUT_MAX || !shoal_ib_fifo_put_room(f))
        return SHOAL_ERR_INTERNAL;
    struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr = {
        .wr_id = WR_READ, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr = {.rdma = {.remote_addr = remote, .rkey = rkey}},
    }, *bad;
    if (ibv_post_send(f->qp->qp, &wr, &bad) != 0) {
        shoal_error(IBV, "ibv_post_send (read) on %s: %s", f->qp->dev->port.dev,
                    strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    f->sq_used++;
    return SHOAL_OK;
}

shoal_status_t shoal_ib_fifo_put(shoal_ib_fifo_t *f, const void *src, uint32_t lkey,
                                 uint64_t remote, uint32_t rkey, size_t len)
{
    if (len > SHOAL_IB_PUT_MAX || !shoal_ib_fifo_put_room(f))
        return SHOAL_ERR_INTERNAL;
    return post_write_key(f, WR_PUT, src, lkey, len, remote, rkey, 0, 0);
}

/* Tells the peer how many of its slots this side released, when the send
 * queue has room (else the next progress does). */
static shoal_status_t send_credit(shoal_ib_fifo_t *f)
{
    if (f->credit_sent == f->rx_tail || f->sq_used >= f->sq_depth)
        return SHOAL_OK;
    f->credit_sent = f->rx_tail;
    /* A completion on the peer, so that a sender asleep on its completion
     * channel for want of credit wakes. */
    return post_write(f, WR_CREDIT, NULL, 0, f->peer.credit, 1,
                      IB_IMM_CREDIT | ((uint32_t)f->rx_tail & IB_IMM_COUNT));
}

shoal_status_t shoal_ib_fifo_progress(shoal_ib_fifo_t *f)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(f->qp->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                shoal_error(IBV, "a %s on %s completed in error: status %d (vendor error %u)",
                            wc[i].wr_id == WR_RECV ? "receive" : "write", f->qp->dev->port.dev,
                            (int)wc[i].status, wc[i].vendor_err);
                return SHOAL_ERR_PEER;
            }
            f->reaped++;
            if (wc[i].wr_id == WR_RECV) {
                uint32_t imm = ntohl(wc[i].imm_data);
                if (imm & IB_IMM_CREDIT)
                    f->peer_freed += ((imm & IB_IMM_COUNT) - (uint32_t)f->peer_freed) &
                                     IB_IMM_COUNT;
                else
                    f->rx_arrived++;
                shoal_status_t s = post_recv(f);
                if (s != SHOAL_OK)
                    return s;
            } else {
                f->sq_used--;
                f->tx_done += wc[i].wr_id == WR_DATA;
                f->reads_done += wc[i].wr_id == WR_READ;
            }
        }
    }
    if (n < 0) {
        shoal_error(IBV, "ibv_poll_cq on %s failed", f->qp->dev->port.dev);
        return SHOAL_ERR_SYSTEM;
    }
    return send_credit(f);
}

/* The peer's slot is free, and ours: its last write completed. */
static int slot_free(const shoal_ib_fifo_t *f)
{
    return f->tx_head - f->peer_freed < f->nslots && f->tx_head - f->tx_done < f->nslots &&
           f->sq_used < f->sq_depth;
}

shoal_status_t shoal_ib_fifo_send_slot(shoal_ib_fifo_t *f, void **buf_p, size_t *cap_p)
{
    if (!slot_free(f)) {
        shoal_status_t s = shoal_ib_fifo_progress(f);
        if (s != SHOAL_OK)
            return s;
        if (!slot_free(f))
            return SHOAL_INPROGRESS;
    }
    *buf_p = tx_slot(f, f->tx_head) + SHOAL_IB_SLOT_HEAD;
    *cap_p = f->chunk;
    return SHOAL_OK;
}

shoal_status_t shoal_ib_fifo_send_post(shoal_ib_fifo_t *f, size_t len, const void *hdr)
{
    if (len > f->chunk) {
        shoal_error(IBV, "a %zu-B message into %zu-B slots on %s", len, f->chunk,
                    f->qp->dev->port.dev);
        return SHOAL_ERR_INVALID_ARG;
    }
    unsigned char *slot = tx_slot(f, f->tx_head);
    uint64_t len64 = len;
    memcpy(slot, &len64, sizeof(len64));
    if (hdr)
        memcpy(slot + 8, hdr, SHOAL_IB_SLOT_HEAD - 8);
    else
        memset(slot + 8, 0, SHOAL_IB_SLOT_HEAD - 8);
    uint64_t remote = f->peer.ring + (uint64_t)(f->tx_head % f->nslots) * f->stride;
    shoal_status_t s = post_write(f, WR_DATA, slot, SHOAL_IB_SLOT_HEAD + len, remote, 1,
                                  (uint32_t)f->tx_head & IB_IMM_COUNT);
    if (s == SHOAL_OK)
        f->tx_head++;
    return s;
}

shoal_status_t shoal_ib_fifo_recv_slot(shoal_ib_fifo_t *f, const void **buf_p, size_t *len_p,
                                       void *hdr_p)
{
    if (f->rx_tail == f->rx_arrived) {
        shoal_status_t s = shoal_ib_fifo_progress(f);
        if (s != SHOAL_OK)
            return s;
        if (f->rx_tail == f->rx_arrived)
            return SHOAL_INPROGRESS;
    }
    const unsigned char *slot = rx_slot(f, f->rx_tail);
    uint64_t len;
    memcpy(&len, slot, sizeof(len));
    if (len > f->chunk) {
        shoal_error(IBV, "the peer wrote a %llu-B message into a %zu-B slot on %s",
                    (unsigned long long)len, f->chunk, f->qp->dev->port.dev);
        return SHOAL_ERR_PEER;
    }
    if (hdr_p)
        memcpy(hdr_p, slot + 8, SHOAL_IB_SLOT_HEAD - 8);
    *buf_p = slot + SHOAL_IB_SLOT_HEAD;
    *len_p = (size_t)len;
    return SHOAL_OK;
}

shoal_status_t shoal_ib_fifo_recv_release(shoal_ib_fifo_t *f)
{
    if (f->rx_tail == f->rx_arrived) {
        shoal_error(IBV, "recv_release without a received message on %s", f->qp->dev->port.dev);
        return SHOAL_ERR_INTERNAL;
    }
    f->rx_tail++;
    return send_credit(f);
}

shoal_status_t shoal_ib_fifo_flush(shoal_ib_fifo_t *f)
{
    shoal_status_t s = shoal_ib_fifo_progress(f);
    if (s != SHOAL_OK)
        return s;
    return f->tx_done == f->tx_head ? SHOAL_OK : SHOAL_INPROGRESS;
}
#endif
