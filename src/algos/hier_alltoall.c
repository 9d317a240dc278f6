/* Hierarchical all-to-all: blocks for another host are gathered by one
 * rank of this host, its agent for that host, so each pair of hosts
 * exchanges one message (of every block one host holds for the other)
 * instead of one per pair of ranks; the receiving agent then hands the
 * blocks out to its host's ranks. This trades two passes over shared
 * memory for (n - H) fewer messages across hosts per rank, which wins
 * where those messages are small and the latency between hosts is high.
 *
 * The agent of host h for host g is its rank at local position g mod
 * nlocal(h). Agent buffers hold blocks [i][j]: from local position i of
 * the sending host to local position j of the receiving one.
 *
 * Messages between two ranks must be listed in the same order by both
 * (shoal_xfer_run matches them in array order): each phase below lists a
 * rank's direct blocks first, then agent blocks by host, then position. */
#include "algo.h"

#include "base/clock.h"

#include <string.h>

static int agent_of(const shoal_cluster_t *c, int h, int g)
{
    return shoal_cluster_rank_at(c, h, g % shoal_cluster_nlocal(c, h));
}

static double hier_a2a_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    if (args->kind != SHOAL_COLL_ALLTOALL)
        return -1; /* the agents would need every rank's counts */
    double n = team->nranks, l = team->cluster.max_local, hs = team->nhosts;
    double bytes = shoal_algo_bytes(args, args->count) * n;
    const shoal_link_cost_t *in = shoal_algo_intra(team), *out = shoal_algo_inter(team);
    double local = 2 * (in->lat_s + bytes / in->bw_Bps);
    double cross = hs > 1 ? out->lat_s * (hs - 1) / l + l * bytes * (hs - 1) / hs / out->bw_Bps
                          : 0;
    return local + cross;
}

/* Blocks this rank carries as the agent for other hosts: per host it
 * serves, its own host's ranks times that host's. */
static size_t agent_blocks(const shoal_cluster_t *c, int me)
{
    int h = c->host_of[me], lh = shoal_cluster_nlocal(c, h);
    size_t blocks = 0;
    for (int g = 0; g < c->nhosts; g++) {
        if (g != h && agent_of(c, h, g) == me)
            blocks += (size_t)lh * (size_t)shoal_cluster_nlocal(c, g);
    }
    return blocks;
}

/* Working memory: the message arrays, then the outgoing and incoming
 * agent buffers. */
static size_t hier_a2a_scratch(const shoal_team_t *team, size_t block, size_t *cap_p)
{
    size_t agent = agent_blocks(&team->cluster, team->rank);
    *cap_p = (size_t)team->nranks + agent;
    return 2 * *cap_p * sizeof(shoal_xfer_t) + 2 * agent * block;
}

static shoal_status_t hier_a2a_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                    shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_ALLTOALL)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    size_t cap;
    if (s == SHOAL_OK)
        shoal_plan_reserve(plan, hier_a2a_scratch(team, args->count * plan->esize, &cap));
    return s;
}

/* A phase's messages, collected before they run. */
typedef struct {
    shoal_team_t *team;
    shoal_xfer_t *sends, *recvs;
    size_t ns, nr;
    size_t block;
} a2a_phase_t;

static void phase_add(a2a_phase_t *ph, int send, int peer, char *buf)
{
    shoal_xfer_t *x = send ? &ph->sends[ph->ns++] : &ph->recvs[ph->nr++];
    memset(x, 0, sizeof(*x));
    x->ep = shoal_team_ep(ph->team, peer);
    x->buf = buf;
    x->bytes = ph->block;
}

/* Move buf to peer (or copy it into dst when peer is this rank). */
static void phase_send(a2a_phase_t *ph, int peer, char *buf, char *self_dst)
{
    if (peer == ph->team->rank)
        shoal_move(ph->team, self_dst, buf, ph->block);
    else
        phase_add(ph, 1, peer, buf);
}

static shoal_status_t phase_run(a2a_phase_t *ph, uint64_t deadline)
{
    shoal_status_t s = shoal_xfer_run(ph->team, ph->sends, ph->ns, ph->recvs, ph->nr, deadline);
    ph->ns = ph->nr = 0;
    return s;
}

static shoal_status_t hier_a2a_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    const shoal_cluster_t *c = &team->cluster;
    int n = team->nranks, me = team->rank, h = c->host_of[me], hs = c->nhosts;
    int lh = shoal_cluster_nlocal(c, h);
    size_t block = a->count * plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    if (block == 0)
        return SHOAL_OK;
    shoal_move(team, dst + (size_t)me * block, src + (size_t)me * block, block);

    size_t cap;
    void *mem;
    shoal_status_t s = shoal_plan_scratch(plan, hier_a2a_scratch(team, block, &cap), &mem);
    if (s != SHOAL_OK)
        return s;
    a2a_phase_t ph = {.team = team, .sends = mem, .recvs = (shoal_xfer_t *)mem + cap,
                      .block = block};
    char *agg = (char *)mem + 2 * cap * sizeof(shoal_xfer_t);
    size_t nagent = cap - (size_t)n; /* blocks this rank carries as an agent */
#define OUT(at, i, j, lg) (agg + ((at) + (size_t)(i) * (size_t)(lg) + (size_t)(j)) * block)
#define IN(at, i, j) (agg + (nagent + (at) + (size_t)(i) * (size_t)lh + (size_t)(j)) * block)
#define SBLK(r) ((char *)src + (size_t)(r) * block)
#define RBLK(r) (dst + (size_t)(r) * block)
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);

    /* 1. Inside the host: blocks for local ranks straight to them, blocks
     * for other hosts to this host's agent for each. */
    for (int j = 0; j < lh; j++) {
        int r = shoal_cluster_rank_at(c, h, j);
        if (r != me) {
            phase_add(&ph, 1, r, SBLK(r));
            phase_add(&ph, 0, r, RBLK(r));
        }
    }
    for (int g = 0; g < hs; g++) {
        if (g == h)
            continue;
        int agent = agent_of(c, h, g), lg = shoal_cluster_nlocal(c, g);
        for (int j = 0; j < lg; j++)
            if (agent != me)
                phase_add(&ph, 1, agent, SBLK(shoal_cluster_rank_at(c, g, j)));
    }
    size_t at = 0;
    for (int g = 0; g < hs; g++) {
        if (g == h || agent_of(c, h, g) != me)
            continue;
        int lg = shoal_cluster_nlocal(c, g);
        for (int i = 0; i < lh; i++) {
            int from = shoal_cluster_rank_at(c, h, i);
            for (int j = 0; j < lg; j++) {
                if (from == me)
                    shoal_move(team, OUT(at, i, j, lg), SBLK(shoal_cluster_rank_at(c, g, j)),
                               block);
                else
                    phase_add(&ph, 0, from, OUT(at, i, j, lg));
            }
        }
        at += (size_t)lh * (size_t)lg;
    }
    s = phase_run(&ph, deadline);

    /* 2. Across hosts: one message each way per pair of agents. */
    at = 0;
    for (int g = 0; g < hs && s == SHOAL_OK; g++) {
        if (g == h || agent_of(c, h, g) != me)
            continue;
        int peer = agent_of(c, g, h);
        size_t nb = (size_t)lh * (size_t)shoal_cluster_nlocal(c, g);
        shoal_xfer_t *x = &ph.sends[ph.ns++];
        memset(x, 0, sizeof(*x));
        x->ep = shoal_team_ep(team, peer);
        x->buf = OUT(at, 0, 0, 1);
        x->bytes = nb * block;
        x = &ph.recvs[ph.nr++];
        memset(x, 0, sizeof(*x));
        x->ep = shoal_team_ep(team, peer);
        x->buf = IN(at, 0, 0);
        x->bytes = nb * block;
        at += nb;
    }
    if (s == SHOAL_OK)
        s = phase_run(&ph, deadline);

    /* 3. Inside the host: each agent hands out what it received. */
    at = 0;
    for (int g = 0; g < hs && s == SHOAL_OK; g++) {
        if (g == h || agent_of(c, h, g) != me)
            continue;
        int lg = shoal_cluster_nlocal(c, g);
        for (int j = 0; j < lh; j++)
            for (int i = 0; i < lg; i++)
                phase_send(&ph, shoal_cluster_rank_at(c, h, j), IN(at, i, j),
                           RBLK(shoal_cluster_rank_at(c, g, i)));
        at += (size_t)lh * (size_t)lg;
    }
    for (int g = 0; g < hs && s == SHOAL_OK; g++) {
        int agent = g == h ? me : agent_of(c, h, g);
        if (agent == me)
            continue;
        for (int i = 0; i < shoal_cluster_nlocal(c, g); i++)
            phase_add(&ph, 0, agent, RBLK(shoal_cluster_rank_at(c, g, i)));
    }
    if (s == SHOAL_OK)
        s = phase_run(&ph, deadline);
#undef OUT
#undef IN
#undef SBLK
#undef RBLK
    return s;
}

const shoal_algo_ops_t shoal_hier_alltoall_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_a2a_cost,
    .plan = hier_a2a_plan,
    .run = hier_a2a_run,
};
