/* Chain broadcast and chain reduce along the ring order, pipelined in pieces
 * of at most one slot: while rank k forwards piece i, rank k+1 forwards piece
 * i-1, so every link of the chain is busy at once and a long message costs
 * about one pass over the data plus n-1 piece latencies.
 *
 * Positions are those of the cluster's ring order, which keeps a host's
 * ranks together. Broadcast runs root -> next -> ... -> the root's
 * predecessor. Reduce runs from the root's successor round to the root: each rank combines its input with what arrived and
 * passes it on, and the root, last, finishes the result (AVG included) into
 * its recvbuf. A rank's role follows from which of its two endpoints the
 * plan set: no recv_ep starts the chain, no send_ep ends it. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

static double chain_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* The whole message crosses one link once, after n-1 piece latencies to
     * fill the pipe. */
    double n = team->nranks, bw = shoal_algo_bw(team);
    return (n - 1) * (shoal_algo_lat(team) + (double)team->chunk_size / bw) +
           shoal_algo_bytes(args, args->count) / bw;
}

/* Plan a chain along the cluster's ring order whose first rank is at ring
 * position `first`: this rank receives from its predecessor unless it is
 * first, and sends to its successor unless it is last. */
static shoal_status_t chain_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                 int first, shoal_plan_t *plan)
{
    const shoal_cluster_t *c = &team->cluster;
    int n = team->nranks, me = c->ring_pos[team->rank];
    int root = args->root;
    if (root < 0 || root >= n || shoal_plan_init(team, args, 0, plan) != SHOAL_OK)
        return SHOAL_ERR_INTERNAL;
    int pos = (me - first + n) % n;
    shoal_prims_t *p = &plan->prims;
    p->send_ep = pos < n - 1 ? shoal_team_ep(team, c->by_host[(me + 1) % n]) : NULL;
    p->recv_ep = pos > 0 ? shoal_team_ep(team, c->by_host[(me + n - 1) % n]) : NULL;
    if ((pos < n - 1 && !p->send_ep) || (pos > 0 && !p->recv_ep))
        return SHOAL_ERR_INTERNAL;
    return SHOAL_OK;
}

static shoal_status_t bcast_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                 shoal_plan_t *plan)
{
    if (args->root < 0 || args->root >= team->nranks)
        return SHOAL_ERR_INTERNAL;
    return chain_plan(team, args, team->cluster.ring_pos[args->root], plan);
}

static shoal_status_t reduce_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                  shoal_plan_t *plan)
{
    int n = team->nranks;
    if (args->root < 0 || args->root >= n)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = chain_plan(team, args, (team->cluster.ring_pos[args->root] + 1) % n, plan);
    if (s != SHOAL_OK)
        return s;
    shoal_prims_t *p = &plan->prims;
    p->reduce = shoal_reduce_fn(args->dtype, args->op);
    /* Only the root, at the end of the chain, finishes AVG. */
    p->avg_n = args->op == SHOAL_AVG && team->rank == args->root ? n : 0;
    return p->reduce ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

static shoal_status_t bcast_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    int is_root = p->team->rank == plan->args.root;

    if (p->team->nranks == 1) {
        if (dst != src)
            shoal_move(p->team, dst, src, a->count * es);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
        if (is_root) {
            s = shoal_prim_send(p, src + off * es, bytes);
            if (dst != src)
                shoal_move(p->team, dst + off * es, src + off * es, bytes);
        } else if (p->send_ep) {
            s = shoal_prim_recv_copy_send(p, dst + off * es, bytes);
        } else {
            s = shoal_prim_recv(p, dst + off * es, bytes);
        }
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

static shoal_status_t reduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;

    if (p->team->nranks == 1) {
        /* AVG over one rank is the input itself. */
        if (dst != src)
            shoal_move(p->team, dst, src, a->count * es);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
        if (!p->recv_ep)
            s = shoal_prim_send(p, src + off * es, bytes);
        else if (p->send_ep)
            s = shoal_prim_recv_reduce_send(p, src + off * es, bytes);
        else
            s = shoal_prim_recv_reduce_copy_send(p, src + off * es, dst + off * es, bytes);
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

const shoal_algo_ops_t shoal_chain_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "chain",
    .cost = chain_cost,
    .plan = bcast_plan,
    .run = bcast_run,
};

const shoal_algo_ops_t shoal_chain_reduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "chain",
    .cost = chain_cost,
    .plan = reduce_plan,
    .run = reduce_run,
};
