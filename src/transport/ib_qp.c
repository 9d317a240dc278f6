/* Reliable connections over one RDMA port (ib_qp.h). */
#include "ib_qp.h"

#include "base/auth.h"
#include "base/log.h"

#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>

static atomic_size_t ib_live;

size_t shoal_ib_live_objects(void)
{
    return atomic_load(&ib_live);
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void shoal_ib_addr_pack(const shoal_ib_addr_t *a, uint8_t out[SHOAL_IB_ADDR_BYTES])
{
    put_le(out, a->qpn, 4);
    put_le(out + 4, a->psn, 4);
    put_le(out + 8, a->lid, 2);
    out[10] = a->link;
    out[11] = a->mtu;
    memcpy(out + 12, a->gid, 16);
}

shoal_status_t shoal_ib_addr_unpack(const uint8_t *in, size_t len, shoal_ib_addr_t *a)
{
    if (len != SHOAL_IB_ADDR_BYTES)
        return SHOAL_ERR_PEER;
    a->qpn = (uint32_t)get_le(in, 4);
    a->psn = (uint32_t)get_le(in + 4, 4);
    a->lid = (uint16_t)get_le(in + 8, 2);
    a->link = in[10];
    a->mtu = in[11];
    memcpy(a->gid, in + 12, 16);
    if ((a->link != SHOAL_IB_LINK_IB && a->link != SHOAL_IB_LINK_ETH) || a->mtu < 1 ||
        a->mtu > 5 || a->psn > 0xffffffu || a->qpn > 0xffffffu)
        return SHOAL_ERR_PEER;
    return SHOAL_OK;
}

#if SHOAL_HAVE_IBVERBS
static void live_add(size_t n)
{
    atomic_fetch_add(&ib_live, n);
}

static void live_sub(size_t n)
{
    atomic_fetch_sub(&ib_live, n);
}

shoal_status_t shoal_ib_dev_open(const shoal_ib_port_t *port, shoal_ib_dev_t *dev)
{
    memset(dev, 0, sizeof(*dev));
    const char *why;
    const shoal_ibv_t *v = shoal_ibv(&why);
    if (!v) {
        shoal_info(IBV, "ib unavailable: %s", why);
        return SHOAL_ERR_UNSUPPORTED;
    }
    int n = 0;
    struct ibv_device **list = v->get_device_list(&n);
    struct ibv_context *ctx = NULL;
    for (int i = 0; list && i < n && !ctx; i++) {
        const char *name = v->get_device_name(list[i]);
        if (name && !strcmp(name, port->dev)) {
            ctx = v->open_device(list[i]);
            if (!ctx)
                shoal_error(IBV, "ibv_open_device %s: %s", port->dev, strerror(errno));
        }
    }
    if (list)
        v->free_device_list(list);
    if (!ctx)
        return SHOAL_ERR_UNSUPPORTED;
    struct ibv_device_attr dattr;
    struct ibv_port_attr pattr;
    if (v->query_device(ctx, &dattr) != 0 ||
        shoal_ibv_query_port(v, ctx, (uint8_t)port->port, &pattr) != 0) {
        shoal_error(IBV, "querying %s port %d: %s", port->dev, port->port, strerror(errno));
        v->close_device(ctx);
        return SHOAL_ERR_SYSTEM;
    }
    struct ibv_pd *pd = v->alloc_pd(ctx);
    if (!pd) {
        shoal_error(IBV, "ibv_alloc_pd on %s: %s", port->dev, strerror(errno));
        v->close_device(ctx);
        return SHOAL_ERR_SYSTEM;
    }
    struct ibv_comp_channel *chan = v->create_comp_channel(ctx);
    int fl = chan ? fcntl(chan->fd, F_GETFL) : -1;
    if (!chan || fl < 0 || fcntl(chan->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        shoal_error(IBV, "a completion channel on %s: %s", port->dev, strerror(errno));
        if (chan)
            v->destroy_comp_channel(chan);
        v->dealloc_pd(pd);
        v->close_device(ctx);
        return SHOAL_ERR_SYSTEM;
    }
    live_add(3);
    dev->v = v;
    dev->ctx = ctx;
    dev->pd = pd;
    dev->chan = chan;
    dev->port = *port;
    dev->mtu = pattr.active_mtu;
    dev->max_rd_atomic = dattr.max_qp_rd_atom < 16 ? dattr.max_qp_rd_atom : 16;
    return SHOAL_OK;
}

void shoal_ib_dev_close(shoal_ib_dev_t *dev)
{
    if (dev->pd && dev->v->dealloc_pd(dev->pd) != 0)
        shoal_warn(IBV, "ibv_dealloc_pd on %s: %s", dev->port.dev, strerror(errno));
    if (dev->chan && dev->v->destroy_comp_channel(dev->chan) != 0)
        shoal_warn(IBV, "ibv_destroy_comp_channel on %s: %s", dev->port.dev, strerror(errno));
    if (dev->ctx) {
        dev->v->close_device(dev->ctx);
        live_sub(3);
    }
    memset(dev, 0, sizeof(*dev));
}

shoal_status_t shoal_ib_qp_create(shoal_ib_dev_t *dev, int depth, shoal_ib_qp_t *qp)
{
    const shoal_ibv_t *v = dev->v;
    memset(qp, 0, sizeof(*qp));
    qp->dev = dev;
    qp->cq = v->create_cq(dev->ctx, 2 * depth, NULL, dev->chan, 0);
    if (!qp->cq) {
        shoal_error(IBV, "ibv_create_cq of %d entries on %s: %s", 2 * depth, dev->port.dev,
                    strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    live_add(1);
    struct ibv_qp_init_attr init = {
        .send_cq = qp->cq, .recv_cq = qp->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = (uint32_t)depth, .max_recv_wr = (uint32_t)depth,
                .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64},
    };
    qp->qp = v->create_qp(dev->pd, &init);
    if (!qp->qp) {
        /* A device without inline writes: every write reads memory. */
        init.cap.max_inline_data = 0;
        qp->qp = v->create_qp(dev->pd, &init);
    }
    if (!qp->qp) {
        shoal_error(IBV, "ibv_create_qp on %s: %s", dev->port.dev, strerror(errno));
        shoal_ib_qp_destroy(qp);
        return SHOAL_ERR_SYSTEM;
    }
    live_add(1);
    qp->max_inline = init.cap.max_inline_data;
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)dev->port.port,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ,
    };
    if (v->modify_qp(qp->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS) != 0) {
        shoal_error(IBV, "queue pair to INIT on %s: %s", dev->port.dev, strerror(errno));
        shoal_ib_qp_destroy(qp);
        return SHOAL_ERR_SYSTEM;
    }
    uint32_t psn = 0;
    shoal_status_t s = shoal_auth_random(&psn, sizeof(psn));
    if (s != SHOAL_OK) {
        shoal_ib_qp_destroy(qp);
        return s;
    }
    qp->local.qpn = qp->qp->qp_num;
    qp->local.psn = psn & 0xffffffu;
    qp->local.lid = dev->port.lid;
    qp->local.link = (uint8_t)dev->port.link;
    qp->local.mtu = (uint8_t)dev->mtu;
    memcpy(qp->local.gid, dev->port.gid, 16);
    return SHOAL_OK;
}

shoal_status_t shoal_ib_qp_connect(shoal_ib_qp_t *qp, const shoal_ib_addr_t *remote)
{
    shoal_ib_dev_t *dev = qp->dev;
    const shoal_ibv_t *v = dev->v;
    if (remote->link != qp->local.link) {
        shoal_error(IBV, "%s is %s, the peer's port %s", dev->port.dev,
                    qp->local.link == SHOAL_IB_LINK_ETH ? "RoCE" : "InfiniBand",
                    remote->link == SHOAL_IB_LINK_ETH ? "RoCE" : "InfiniBand");
        return SHOAL_ERR_PEER;
    }
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = (enum ibv_mtu)(remote->mtu < qp->local.mtu ? remote->mtu : qp->local.mtu),
        .dest_qp_num = remote->qpn,
        .rq_psn = remote->psn,
        .max_dest_rd_atomic = (uint8_t)dev->max_rd_atomic,
        .min_rnr_timer = 12,
        .ah_attr = {.port_num = (uint8_t)dev->port.port, .dlid = remote->lid},
    };
    if (remote->link == SHOAL_IB_LINK_ETH) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)dev->port.gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    if (v->modify_qp(qp->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER) != 0) {
        shoal_error(IBV, "queue pair to RTR on %s: %s", dev->port.dev, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;  /* 4.096 us x 2^14: 67 ms a try */
    a.retry_cnt = 7;
    a.rnr_retry = 0; /* a receive not posted is a bug: fail, do not wait */
    a.sq_psn = qp->local.psn;
    a.max_rd_atomic = (uint8_t)dev->max_rd_atomic;
    if (v->modify_qp(qp->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                     IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        shoal_error(IBV, "queue pair to RTS on %s: %s", dev->port.dev, strerror(errno));
        return SHOAL_ERR_SYSTEM;
    }
    return SHOAL_OK;
}

void shoal_ib_qp_drain(shoal_ib_qp_t *qp, uint64_t deadline_ns)
{
    if (!qp->qp)
        return;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (qp->dev->v->modify_qp(qp->qp, &a, IBV_QP_STATE) != 0) {
        shoal_warn(IBV, "queue pair to ERR on %s: %s", qp->dev->port.dev, strerror(errno));
        return;
    }
    /* Flushed work requests complete in error at once; a request the
     * device is still working on completes when it is done with it. Quiet
     * for a while means nothing is left. */
    struct ibv_wc wc[16];
    uint64_t quiet = shoal_deadline_after(2000000);
    while (!shoal_deadline_passed(quiet) && !shoal_deadline_passed(deadline_ns)) {
        int n = ibv_poll_cq(qp->cq, 16, wc);
        if (n < 0)
            break;
        if (n > 0)
            quiet = shoal_deadline_after(2000000);
    }
}

void shoal_ib_qp_destroy(shoal_ib_qp_t *qp)
{
    const shoal_ibv_t *v = qp->dev ? qp->dev->v : NULL;
    if (qp->qp) {
        if (v->destroy_qp(qp->qp) != 0)
            shoal_warn(IBV, "ibv_destroy_qp on %s: %s", qp->dev->port.dev, strerror(errno));
        live_sub(1);
    }
    if (qp->cq) {
        if (v->destroy_cq(qp->cq) != 0)
            shoal_warn(IBV, "ibv_destroy_cq on %s: %s", qp->dev->port.dev, strerror(errno));
        live_sub(1);
    }
    memset(qp, 0, sizeof(*qp));
}

struct ibv_mr *shoal_ib_mr_reg(shoal_ib_dev_t *dev, void *addr, size_t len)
{
    struct ibv_mr *mr = dev->v->reg_mr(dev->pd, addr, len,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                           IBV_ACCESS_REMOTE_READ);
    if (!mr)
        shoal_error(IBV, "ibv_reg_mr of %zu B on %s: %s", len, dev->port.dev, strerror(errno));
    else
        live_add(1);
    return mr;
}

void shoal_ib_mr_dereg(shoal_ib_dev_t *dev, struct ibv_mr *mr)
{
    if (!mr)
        return;
    if (dev->v->dereg_mr(mr) != 0)
        shoal_warn(IBV, "ibv_dereg_mr on %s: %s", dev->port.dev, strerror(errno));
    live_sub(1);
}
#endif
