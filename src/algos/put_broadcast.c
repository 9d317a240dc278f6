/* Single-copy broadcast (put.h): the non-roots send their output's keys
 * to the root. When the root's own input has a key, the root sends it to
 * every peer ("pull"), each peer reads the data itself, all side by side,
 * and tells the root it is done (the root keeps its input until then); a
 * peer that cannot attach it asks for the data, which the root sends
 * through slots. Otherwise the root tells each peer "fall back" when any
 * key is missing, or writes and signals. */
#include "put.h"

#include "base/clock.h"

static shoal_status_t put_broadcast(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank, root = a->root;
    size_t bytes = a->count * plan->esize;
    if (n > 1 && bytes && shoal_put_skipping(plan))
        return shoal_put_run_fallback(plan, self);
    if (r == root && bytes && a->sendbuf != a->recvbuf)
        shoal_move_out(team, a->recvbuf, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    shoal_put_peer_t *peers;
    shoal_put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    shoal_status_t s = shoal_put_mem(plan, &peers, &ctrl, &x);
    if (s != SHOAL_OK)
        return s;
    if (r != root) {
        ctrl[r] = (shoal_put_ctrl_t){.type = SHOAL_PUT_NOKEY};
        ctrl[r].keylen = shoal_put_own_key(team, a->recvbuf, bytes, ctrl[r].key);
        if (ctrl[r].keylen)
            ctrl[r].type = SHOAL_PUT_KEY;
        x[0] = (shoal_xfer_t){.ep = shoal_team_ep(team, root), .buf = &ctrl[r],
                              .bytes = sizeof(shoal_put_ctrl_t)};
        s = shoal_xfer_run(team, x, 1, NULL, 0, deadline);
        if (s != SHOAL_OK)
            return s;
        int fallback = 0;
        peers[0] = (shoal_put_peer_t){.peer = root, .ep = shoal_team_ep(team, root),
                                      .role = SHOAL_PUT_ROLE_BCAST_PEER,
                                      .send_state = SHOAL_PUT_ST_DONE, .dst = a->recvbuf,
                                      .rbytes = bytes};
        s = shoal_put_drive(team, peers, 1, deadline, &fallback);
        if (s == SHOAL_OK && !fallback)
            plan->skip_len = 0;
        return s == SHOAL_OK && fallback ? shoal_put_declined(plan, self) : s;
    }
    size_t m = (size_t)n - 1;
    int all_keys = 1;
    for (int k = 1; k < n; k++) {
        int j = (root + k) % n;
        x[k - 1] = (shoal_xfer_t){.ep = shoal_team_ep(team, j), .buf = &ctrl[j],
                                  .bytes = sizeof(shoal_put_ctrl_t)};
    }
    s = shoal_xfer_run(team, NULL, 0, x, m, deadline);
    if (s != SHOAL_OK)
        return s;
    /* The peers read the input side by side, where the root would write
     * every copy itself one after another. */
    const void *input = a->sendbuf ? a->sendbuf : a->recvbuf;
    ctrl[r] = (shoal_put_ctrl_t){.type = SHOAL_PUT_PULL};
    ctrl[r].keylen = shoal_put_own_key(team, (void *)input, bytes, ctrl[r].key);
    if (ctrl[r].keylen) {
        for (int k = 1; k < n; k++) {
            int j = (root + k) % n;
            peers[k - 1] = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j),
                                              .src = input, .bytes = bytes,
                                              .role = SHOAL_PUT_ROLE_PULL_ROOT,
                                              .send_state = SHOAL_PUT_ST_CTRL,
                                              .reply = &ctrl[r]};
        }
        plan->skip_len = 0;
        return shoal_put_drive(team, peers, n - 1, deadline, NULL);
    }
    for (int k = 1; k < n; k++)
        all_keys &= ctrl[(root + k) % n].type == SHOAL_PUT_KEY;
    for (int k = 1; k < n; k++) {
        int j = (root + k) % n;
        shoal_put_peer_t *p = &peers[k - 1];
        *p = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .src = a->recvbuf,
                                .bytes = bytes, .recv_state = SHOAL_PUT_ST_DONE};
        if (!all_keys)
            continue;
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key, ctrl[j].keylen, &p->rmem) != SHOAL_OK)
            p->rmem = NULL;
    }
    if (!all_keys) {
        /* Every peer hears "fall back" before the slot algorithm starts. */
        shoal_idle_t w = {0};
        for (int k = 1; k < n && s == SHOAL_OK;) {
            s = shoal_put_post_ctrl(team, peers[k - 1].ep, SHOAL_PUT_FALLBACK);
            if (s == SHOAL_OK)
                k++;
            else if (s == SHOAL_INPROGRESS)
                s = shoal_prims_idle(team, deadline, &w);
        }
        return s == SHOAL_OK ? shoal_put_declined(plan, self) : s;
    }
    plan->skip_len = 0;
    return shoal_put_drive(team, peers, n - 1, deadline, NULL);
}

static shoal_status_t put_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_BROADCAST)
        return SHOAL_ERR_INTERNAL;
    return shoal_put_plan_with(team, args, 0, 0, plan);
}

/* The peers now read the root's input side by side (the root wrote every
 * copy itself before). On the 2-core machine of the README's figures the
 * pull from shareable memory beat the chain at 16 MiB on 2 and 4 ranks
 * but not at 128 MiB on 4 ranks (medians of 5 on a loaded machine), and
 * from private memory cross-memory reads lose to the slots there: not
 * faster everywhere, so the model still leaves it to SHOAL_ALGO. */
static double put_broadcast_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double c = shoal_put_cost(team, args, &shoal_put_broadcast_ops, 1, 1);
    return c < 0 ? c : SHOAL_PUT_UNPICKED;
}

static shoal_status_t put_broadcast_run(shoal_plan_t *plan)
{
    return put_broadcast(plan, &shoal_put_broadcast_ops);
}

const shoal_algo_ops_t shoal_put_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_broadcast_cost,
    .plan = put_plan,
    .run = put_broadcast_run,
};
