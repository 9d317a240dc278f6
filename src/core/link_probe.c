/* Link figures of a communicator at init (link_probe.h): the defaults of
 * topo/links.c, the probe's measurements, then the settings that override
 * them. The probe runs transfers over the communicator's endpoints, which
 * is why it lives here rather than beside the link classes in topo/. */
#include "link_probe.h"

#include "bootstrap.h"
#include "comm.h"

#include "algos/prims.h"
#include "base/clock.h"
#include "base/config.h"

#include <stdlib.h>
#include <string.h>

/* The pairs the probe measures, in this order on every rank: two ranks of
 * one host (one NUMA node if any host has two there), two of one host on
 * different NUMA nodes, and the first ranks of hosts 0 and 1. -1 where
 * the cluster has no such pair. */
#define PROBE_PAIRS 3

static void probe_pairs(const shoal_cluster_t *c, int pairs[PROBE_PAIRS][2])
{
    for (int i = 0; i < PROBE_PAIRS; i++)
        pairs[i][0] = pairs[i][1] = -1;
    for (int h = 0; h < c->nhosts; h++) {
        int nl = shoal_cluster_nlocal(c, h);
        for (int j = 1; j < nl; j++) {
            int a = shoal_cluster_rank_at(c, h, j - 1), b = shoal_cluster_rank_at(c, h, j);
            int same = c->place[a].numa == c->place[b].numa;
            int slot = same ? 0 : 1;
            if (pairs[slot][0] < 0) {
                pairs[slot][0] = a;
                pairs[slot][1] = b;
            }
        }
    }
    if (c->nhosts > 1) {
        pairs[2][0] = shoal_cluster_rank_at(c, 0, 0);
        pairs[2][1] = shoal_cluster_rank_at(c, 1, 0);
    }
}

#define PROBE_SMALL_REPS 50
#define PROBE_BIG_BYTES (4u << 20)
#define PROBE_BIG_REPS 4

/* Round trips of `bytes` out and 8 B back between this rank and peer;
 * returns the mean seconds of one. With both set, both ranks send `bytes`
 * at once (from buf, into buf + bytes) and wait for each other's: the
 * mean seconds of one such exchange. */
static shoal_status_t probe_rtt(struct shoal_comm *comm, int peer, int leader, int both,
                                char *buf, size_t bytes, int reps, double *rtt_p)
{
    shoal_ep_t *ep = shoal_comm_ep(comm, peer);
    uint64_t t0 = 0;
    for (int i = -1; i < reps; i++) {
        if (i == 0)
            t0 = shoal_now_ns();
        uint64_t deadline = shoal_deadline_after(comm->team.timeout_ns);
        shoal_status_t s;
        if (both) {
            shoal_xfer_t out = {.ep = ep, .buf = buf, .bytes = bytes};
            shoal_xfer_t in = {.ep = ep, .buf = buf + bytes, .bytes = bytes};
            s = shoal_xfer_run(&comm->team, &out, 1, &in, 1, deadline);
            if (s != SHOAL_OK)
                return s;
            continue;
        }
        shoal_xfer_t out = {.ep = ep, .buf = buf, .bytes = leader ? bytes : 8};
        shoal_xfer_t in = {.ep = ep, .buf = buf, .bytes = leader ? 8 : bytes};
        s = leader ? shoal_xfer_run(&comm->team, &out, 1, NULL, 0, deadline)
                   : shoal_xfer_run(&comm->team, NULL, 0, &in, 1, deadline);
        if (s == SHOAL_OK)
            s = leader ? shoal_xfer_run(&comm->team, NULL, 0, &in, 1, deadline)
                       : shoal_xfer_run(&comm->team, &out, 1, NULL, 0, deadline);
        if (s != SHOAL_OK)
            return s;
    }
    *rtt_p = (double)(shoal_now_ns() - t0) * 1e-9 / reps;
    return SHOAL_OK;
}

/* What each rank measured, gathered so every rank takes the same figures. */
typedef struct {
    double lat_s[SHOAL_LINK_CLASS_COUNT];
    double bw_Bps[SHOAL_LINK_CLASS_COUNT];
    int32_t measured[SHOAL_LINK_CLASS_COUNT];
} probe_card_t;

static shoal_status_t links_probe(struct shoal_comm *comm, shoal_links_t *links)
{
    int pairs[PROBE_PAIRS][2];
    probe_pairs(&comm->team.cluster, pairs);
    probe_card_t *cards = calloc((size_t)comm->team.nranks, sizeof(*cards));
    char *buf = malloc(2 * PROBE_BIG_BYTES);
    shoal_status_t s = cards && buf ? SHOAL_OK : SHOAL_ERR_NO_MEMORY;
    shoal_comm_set_sig(comm, (shoal_sig_t){.count = SHOAL_SIG_COUNT_ANY, .kind = SHOAL_SIG_P2P,
                                            .root = -1});
    probe_card_t *mine = cards ? &cards[comm->team.rank] : NULL;
    for (int i = 0; i < PROBE_PAIRS && s == SHOAL_OK; i++) {
        int a = pairs[i][0], b = pairs[i][1];
        if (a < 0 || (comm->team.rank != a && comm->team.rank != b))
            continue;
        int peer = comm->team.rank == a ? b : a;
        shoal_link_class_t cls = shoal_links_class(links, &comm->team.cluster, a, b);
        /* Between hosts the large transfers go both ways at once: the
         * simulator and the cost model give a host's link in and its link
         * out the class's bandwidth at the same time (sim.h), and a
         * collective loads both; where the two directions share one
         * resource (a software bridge, the kernel's network stack on few
         * cores) that is what each direction gets. Inside a host a
         * transfer is copies, one each way charged apart: one direction. */
        int both = comm->team.cluster.host_of[a] != comm->team.cluster.host_of[b];
        double small, big;
        memset(buf, 0, 2 * PROBE_BIG_BYTES);
        s = probe_rtt(comm, peer, comm->team.rank == a, 0, buf, 8, PROBE_SMALL_REPS, &small);
        if (s == SHOAL_OK)
            s = probe_rtt(comm, peer, comm->team.rank == a, both, buf, PROBE_BIG_BYTES,
                          PROBE_BIG_REPS, &big);
        if (s != SHOAL_OK || comm->team.rank != a)
            continue;
        /* An exchange costs one latency, a round trip two. */
        double lat = small / 2, t = big - (both ? lat : small);
        mine->lat_s[cls] = lat;
        mine->bw_Bps[cls] = PROBE_BIG_BYTES / (t > 1e-9 ? t : 1e-9);
        mine->measured[cls] = 1;
    }
    if (s == SHOAL_OK)
        s = shoal_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
    for (int r = comm->team.nranks - 1; r >= 0 && s == SHOAL_OK; r--) {
        for (int c = 0; c < SHOAL_LINK_CLASS_COUNT; c++) {
            if (cards[r].measured[c]) {
                links->cls[c].lat_s = cards[r].lat_s[c];
                links->cls[c].bw_Bps = cards[r].bw_Bps[c];
                links->measured[c] = 1;
            }
        }
    }
    free(buf);
    free(cards);
    return s;
}

/* What each rank's endpoints to other hosts are: whether it has any, and
 * whether all of them are RDMA (ib) and the slowest port rate they run at. */
typedef struct {
    int32_t remote;
    int32_t rdma;
    double Bps;
    char dev[SHOAL_TL_NIC_MAX];
} inter_card_t;

/* The class between hosts: rdma where every rank reaches the ranks of the
 * other hosts over ib, at the slowest port's rate; tcp otherwise. Every
 * rank takes the same answer from one all-gather. */
static shoal_status_t links_inter(struct shoal_comm *comm, shoal_links_t *l)
{
    l->inter = SHOAL_LINK_TCP;
    if (comm->team.nhosts < 2)
        return SHOAL_OK;
    inter_card_t *cards = calloc((size_t)comm->team.nranks, sizeof(*cards));
    if (!cards)
        return SHOAL_ERR_NO_MEMORY;
    inter_card_t *mine = &cards[comm->team.rank];
    mine->rdma = 1;
    for (int peer = 0; peer < comm->team.nranks; peer++) {
        shoal_ep_t *ep = comm->team.eps[peer];
        if (peer == comm->team.rank ||
            comm->team.cluster.host_of[peer] == comm->team.cluster.host_of[comm->team.rank])
            continue;
        mine->remote = 1;
        if (!ep || ep->ops != &shoal_ib_ops) {
            mine->rdma = 0;
        } else {
            memcpy(mine->dev, ep->ctx->dev, sizeof(mine->dev));
            if (ep->ctx->link_Bps > 0 && (mine->Bps == 0 || ep->ctx->link_Bps < mine->Bps))
                mine->Bps = ep->ctx->link_Bps;
        }
    }
    shoal_status_t s = shoal_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
    comm->rdma_devs = s == SHOAL_OK ? calloc((size_t)comm->team.nranks,
                                             sizeof(*comm->rdma_devs)) : NULL;
    for (int r = 0; comm->rdma_devs && r < comm->team.nranks; r++) {
        memcpy(comm->rdma_devs[r], cards[r].dev, sizeof(cards[r].dev));
        comm->rdma_devs[r][SHOAL_TL_NIC_MAX - 1] = '\0';
    }
    int rdma = s == SHOAL_OK;
    double Bps = 0;
    for (int r = 0; r < comm->team.nranks && rdma; r++) {
        if (!cards[r].remote)
            continue;
        rdma = cards[r].rdma;
        if (cards[r].Bps > 0 && (Bps == 0 || cards[r].Bps < Bps))
            Bps = cards[r].Bps;
    }
    free(cards);
    if (rdma) {
        l->inter = SHOAL_LINK_RDMA;
        if (Bps > 0)
            l->cls[SHOAL_LINK_RDMA].bw_Bps = Bps;
    }
    return s;
}

shoal_status_t shoal_links_setup(struct shoal_comm *comm)
{
    const shoal_config_t *cfg = shoal_config_get();
    shoal_links_t *l = &comm->team.cost.links;
    shoal_links_defaults(l);
    l->intra = comm->team.cluster.cross_numa ? SHOAL_LINK_SHM_CROSS_NUMA : SHOAL_LINK_SHM_SAME_NUMA;
    shoal_status_t s = links_inter(comm, l);
    if (s == SHOAL_OK && cfg->topo.probe)
        s = links_probe(comm, l);
    if (s == SHOAL_OK)
        s = shoal_links_parse(cfg->topo.links, l);
    if (s != SHOAL_OK)
        return s;
    for (int c = 0; c < SHOAL_LINK_CLASS_COUNT; c++) {
        if (cfg->algo.latency_ns)
            l->cls[c].lat_s = (double)cfg->algo.latency_ns * 1e-9;
        if (cfg->algo.bandwidth)
            l->cls[c].bw_Bps = (double)cfg->algo.bandwidth;
    }
    shoal_cost_flat(&comm->team.cost, comm->team.nhosts);
    return SHOAL_OK;
}

