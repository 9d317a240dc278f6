/* Single-copy all-gather and all-to-all (put.h): every rank sends the key
 * of its output buffer to every other, so every rank sees the same n
 * answers; with all of them, each writes its blocks straight into the
 * peers' outputs (put_signal) instead of streaming them through slot
 * FIFOs where the receiver copies them a second time. */
#include "put.h"

#include "base/clock.h"

/* Share of the slot algorithm's time the direct one is charged: one copy
 * per byte instead of two, without the pipeline's hops. */
#define PUT_SPEEDUP 0.5

/* block(j) is this rank's block for rank j (src), placed at off in j's
 * buffer. */
static shoal_status_t put_symmetric(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank;
    size_t bytes = a->count * plan->esize;
    char *out = a->recvbuf;
    const char *in = a->sendbuf;
    int a2a = a->kind == SHOAL_COLL_ALLTOALL;
    if (n > 1 && bytes && shoal_put_skipping(plan))
        return shoal_put_run_fallback(plan, self);
    /* This rank's own block, in place unless an all-gather's input is
     * already there. */
    const char *own = a2a ? in + (size_t)r * bytes : in;
    if (bytes && own != out + (size_t)r * bytes)
        shoal_move_out(team, out + (size_t)r * bytes, own, bytes);
    if (n == 1 || bytes == 0)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    shoal_put_peer_t *peers;
    shoal_put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    shoal_status_t s = shoal_put_mem(plan, &peers, &ctrl, &x);
    if (s != SHOAL_OK)
        return s;
    ctrl[r] = (shoal_put_ctrl_t){.type = SHOAL_PUT_NOKEY};
    ctrl[r].keylen = shoal_put_own_key(team, out, (size_t)n * bytes, ctrl[r].key);
    if (ctrl[r].keylen)
        ctrl[r].type = SHOAL_PUT_KEY;
    s = shoal_put_keys_all(team, ctrl, x, deadline);
    if (s != SHOAL_OK)
        return s;
    for (int j = 0; j < n; j++) {
        if (ctrl[j].type != SHOAL_PUT_KEY)
            return shoal_put_declined(plan, self);
    }
    plan->skip_len = 0;
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        shoal_put_peer_t *p = &peers[k - 1];
        *p = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .bytes = bytes,
                                .off = (size_t)r * bytes, .dst = out + (size_t)j * bytes,
                                .rbytes = bytes};
        p->src = a2a ? in + (size_t)j * bytes : in;
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key, ctrl[j].keylen, &p->rmem) != SHOAL_OK)
            p->rmem = NULL;
    }
    return shoal_put_drive(team, peers, n - 1, deadline, NULL);
}

static shoal_status_t put_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_ALLGATHER && args->kind != SHOAL_COLL_ALLTOALL)
        return SHOAL_ERR_INTERNAL;
    return shoal_put_plan_with(team, args, 0, 0, plan);
}

static double put_allgather_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_put_cost(team, args, &shoal_put_allgather_ops, PUT_SPEEDUP, 0);
}

static double put_alltoall_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    if (args->kind != SHOAL_COLL_ALLTOALL)
        return -1;
    return shoal_put_cost(team, args, &shoal_put_alltoall_ops, PUT_SPEEDUP, 0);
}

static shoal_status_t put_allgather_run(shoal_plan_t *plan)
{
    return put_symmetric(plan, &shoal_put_allgather_ops);
}

static shoal_status_t put_alltoall_run(shoal_plan_t *plan)
{
    return put_symmetric(plan, &shoal_put_alltoall_ops);
}

const shoal_algo_ops_t shoal_put_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_allgather_cost,
    .plan = put_plan,
    .run = put_allgather_run,
};

const shoal_algo_ops_t shoal_put_alltoall_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_alltoall_cost,
    .plan = put_plan,
    .run = put_alltoall_run,
};
