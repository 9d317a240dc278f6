/* Direct gather and scatter: the root exchanges one block with every other
 * rank in a single shoal_xfer_run, so all n-1 transfers overlap and the
 * root's links carry each block once; every other rank sends or receives
 * its one block. The root's own block is a local copy, skipped in place
 * (gather: sendbuf is the root's block of recvbuf; scatter: recvbuf is the
 * root's block of sendbuf). */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

#include <string.h>

static double direct_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* The root's traffic bounds it: n-1 blocks through its links. */
    double n = team->nranks;
    return shoal_algo_lat(team) +
           (n - 1) * shoal_algo_bytes(args, args->count) / shoal_algo_bw(team);
}

static shoal_status_t gs_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                              shoal_plan_t *plan)
{
    int n = team->nranks, r = team->rank;
    if (args->root < 0 || args->root >= n ||
        (args->kind != SHOAL_COLL_GATHER && args->kind != SHOAL_COLL_SCATTER))
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    if (s != SHOAL_OK)
        return s;
    /* The root needs every peer; the others only the root. */
    for (int j = 0; j < n; j++) {
        if (j != r && (r == args->root || j == args->root) && !shoal_team_ep(team, j))
            return SHOAL_ERR_INTERNAL;
    }
    /* The root's messages, one per peer. */
    if (r == args->root)
        shoal_plan_reserve(plan, (size_t)(n - 1) * sizeof(shoal_xfer_t));
    return SHOAL_OK;
}

/* One block of count elements with peer, out of buf (send) or into it. */
static void gs_msg(shoal_plan_t *plan, int peer, void *buf, shoal_xfer_t *x)
{
    memset(x, 0, sizeof(*x));
    x->ep = shoal_team_ep(plan->prims.team, peer);
    x->buf = buf;
    x->bytes = plan->args.count * plan->esize;
    x->esize = plan->esize;
}

/* Block j of the root's n-block buffer. */
static char *gs_block(const shoal_plan_t *plan, const void *buf, int j)
{
    return (char *)buf + (size_t)j * plan->args.count * plan->esize;
}

static shoal_status_t gs_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    int n = team->nranks, r = team->rank, root = a->root;
    int gather = a->kind == SHOAL_COLL_GATHER;
    size_t bytes = a->count * plan->esize;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);

    if (r != root) {
        shoal_xfer_t x;
        gs_msg(plan, root, gather ? (void *)a->sendbuf : a->recvbuf, &x);
        return gather ? shoal_xfer_run(team, &x, 1, NULL, 0, deadline)
                      : shoal_xfer_run(team, NULL, 0, &x, 1, deadline);
    }
    /* The n-block buffer of the root, and its own block's other side. */
    const void *all = gather ? a->recvbuf : a->sendbuf;
    char *mine = gather ? (char *)a->sendbuf : a->recvbuf;
    /* Buffers of 0 elements may be NULL: no address arithmetic on them. */
    char *own = bytes ? gs_block(plan, all, root) : mine;
    if (own != mine) {
        if (gather)
            shoal_move(team, own, mine, bytes);
        else
            shoal_move(team, mine, own, bytes);
    }
    if (n == 1)
        return SHOAL_OK;
    /* The messages live in the plan's working memory. */
    void *mem;
    size_t m = (size_t)n - 1;
    shoal_status_t s = shoal_plan_scratch(plan, m * sizeof(shoal_xfer_t), &mem);
    if (s != SHOAL_OK)
        return s;
    shoal_xfer_t *x = mem;
    for (int k = 1; k < n; k++) {
        int j = (root + k) % n;
        gs_msg(plan, j, bytes ? gs_block(plan, all, j) : (void *)all, &x[k - 1]);
    }
    return gather ? shoal_xfer_run(team, NULL, 0, x, m, deadline)
                  : shoal_xfer_run(team, x, m, NULL, 0, deadline);
}

const shoal_algo_ops_t shoal_direct_gather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "direct",
    .cost = direct_cost,
    .plan = gs_plan,
    .run = gs_run,
};

const shoal_algo_ops_t shoal_direct_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "direct",
    .cost = direct_cost,
    .plan = gs_plan,
    .run = gs_run,
};
