/* A send or a receive outside a group: one message to or from args->root
 * through the message engine, which cuts it into pieces and checks that the
 * peer sent as many bytes as this rank expects. Messages to oneself only
 * make sense in a group, where the core pairs them up by copying. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "base/log.h"

#include <string.h>

static double p2p_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_algo_lat(team) + shoal_algo_bytes(args, args->count) / shoal_algo_bw(team);
}

static shoal_status_t p2p_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_SEND && args->kind != SHOAL_COLL_RECV)
        return SHOAL_ERR_INTERNAL;
    if (args->root < 0 || args->root >= team->nranks || args->root == team->rank ||
        !shoal_team_ep(team, args->root)) {
        shoal_error(ALGO, "rank %d: %s with rank %d, which is not a peer it reaches",
                    team->rank, shoal_coll_kind_name(args->kind), args->root);
        return SHOAL_ERR_INTERNAL;
    }
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    if (s != SHOAL_OK)
        return s;
    plan->nbr[0] = args->root;
    plan->nnbr = 1;
    return SHOAL_OK;
}

static shoal_status_t p2p_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    int send = a->kind == SHOAL_COLL_SEND;
    shoal_xfer_t x = {
        .ep = shoal_team_ep(team, a->root),
        .buf = send ? (void *)a->sendbuf : a->recvbuf,
        .bytes = a->count * plan->esize,
        .esize = plan->esize,
    };
    return send ? shoal_xfer_run(team, &x, 1, NULL, 0, deadline)
                : shoal_xfer_run(team, NULL, 0, &x, 1, deadline);
}

const shoal_algo_ops_t shoal_p2p_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "p2p",
    .cost = p2p_cost,
    .plan = p2p_plan,
    .run = p2p_run,
};
