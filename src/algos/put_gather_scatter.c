/* Single-copy gather and scatter (put.h). Only the root's buffer needs a
 * key, so only the root sends one, to every other rank, and every rank
 * decides on that one answer alike:
 * - gather: the root's output. Every non-root writes its block straight
 *   into it (put_signal), all side by side, where the slot algorithms have
 *   the root copy every block out of a slot itself.
 * - scatter: the root's input. Every non-root reads its own block from it
 *   (get) and tells the root it is done; the root stays in the call until
 *   every one has. A non-root that cannot attach the key asks for its
 *   block (PUT_NOKEY), which the root sends through slots.
 * Without the key every rank runs the slot algorithm together. */
#include "put.h"

#include "base/clock.h"

/* Share of the slot algorithm's time the direct one is charged: one copy
 * per byte instead of two, made by the non-roots side by side. */
#define PUT_SPEEDUP 0.5

/* The root's ctrl: the key of its buffer [buf, buf + len), or none. */
static void put_root_key(shoal_team_t *team, void *buf, size_t len, shoal_put_ctrl_t *c)
{
    *c = (shoal_put_ctrl_t){.type = SHOAL_PUT_NOKEY};
    c->keylen = shoal_put_own_key(team, buf, len, c->key);
    if (c->keylen)
        c->type = SHOAL_PUT_KEY;
}

static shoal_status_t put_rooted(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank, root = a->root;
    int gather = a->kind == SHOAL_COLL_GATHER;
    size_t bytes = a->count * plan->esize;
    char *out = a->recvbuf;
    const char *in = a->sendbuf;
    if (n > 1 && bytes && shoal_put_skipping(plan))
        return shoal_put_run_fallback(plan, self);
    /* The root's own block, unless the call is in place. */
    if (r == root && bytes) {
        char *to = gather ? out + (size_t)r * bytes : out;
        const char *from = gather ? in : in + (size_t)r * bytes;
        if (to != from)
            shoal_move_out(team, to, from, bytes);
    }
    if (n == 1 || bytes == 0)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    shoal_put_peer_t *peers;
    shoal_put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    shoal_status_t s = shoal_put_mem(plan, &peers, &ctrl, &x);
    if (s != SHOAL_OK)
        return s;
    if (r == root)
        put_root_key(team, gather ? out : (void *)in, (size_t)n * bytes, &ctrl[root]);
    s = shoal_put_keys_root(team, root, ctrl, x, deadline);
    if (s != SHOAL_OK)
        return s;
    if (ctrl[root].type != SHOAL_PUT_KEY)
        return shoal_put_declined(plan, self);
    plan->skip_len = 0;
    if (r == root) {
        for (int k = 1; k < n; k++) {
            int j = (root + k) % n;
            shoal_put_peer_t *p = &peers[k - 1];
            *p = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j),
                                    .send_state = SHOAL_PUT_ST_DONE};
            if (gather) {
                /* A signal, or PUT_DATA and the block through slots. */
                p->dst = out + (size_t)j * bytes;
                p->rbytes = bytes;
            } else {
                /* PUT_DONE, or PUT_NOKEY: then the block through slots. */
                p->role = SHOAL_PUT_ROLE_PULL_ROOT;
                p->src = in + (size_t)j * bytes;
                p->bytes = bytes;
            }
        }
        return shoal_put_drive(team, peers, n - 1, deadline, NULL);
    }
    shoal_put_peer_t *p = &peers[0];
    *p = (shoal_put_peer_t){.peer = root, .ep = shoal_team_ep(team, root)};
    const shoal_rmem_t *rmem = NULL;
    if (p->ep->ops->rkey_attach(p->ep, ctrl[root].key, ctrl[root].keylen, &rmem) != SHOAL_OK)
        rmem = NULL;
    if (gather) {
        p->src = in;
        p->bytes = bytes;
        p->off = (size_t)r * bytes;
        p->rmem = rmem; /* NULL: PUT_DATA and the block through slots */
        p->recv_state = SHOAL_PUT_ST_DONE;
        return shoal_put_drive(team, peers, 1, deadline, NULL);
    }
    s = rmem ? shoal_put_get(team, p->ep, out, rmem, (size_t)r * bytes, bytes)
             : SHOAL_ERR_UNSUPPORTED;
    p->send_state = SHOAL_PUT_ST_CTRL;
    if (s == SHOAL_OK) {
        p->reply = &shoal_put_done_msg;
        p->recv_state = SHOAL_PUT_ST_DONE;
    } else if (s == SHOAL_ERR_UNSUPPORTED) {
        p->reply = &shoal_put_nokey_msg;
        p->dst = out;
        p->rbytes = bytes;
    } else {
        return s;
    }
    return shoal_put_drive(team, peers, 1, deadline, NULL);
}

static shoal_status_t put_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if (args->kind != SHOAL_COLL_GATHER && args->kind != SHOAL_COLL_SCATTER)
        return SHOAL_ERR_INTERNAL;
    return shoal_put_plan_with(team, args, 0, 0, plan);
}

static double put_gather_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_put_cost(team, args, &shoal_put_gather_ops, PUT_SPEEDUP, 0);
}

static double put_scatter_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_put_cost(team, args, &shoal_put_scatter_ops, PUT_SPEEDUP, 1);
}

static shoal_status_t put_gather_run(shoal_plan_t *plan)
{
    return put_rooted(plan, &shoal_put_gather_ops);
}

static shoal_status_t put_scatter_run(shoal_plan_t *plan)
{
    return put_rooted(plan, &shoal_put_scatter_ops);
}

const shoal_algo_ops_t shoal_put_gather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_gather_cost,
    .plan = put_plan,
    .run = put_gather_run,
};

const shoal_algo_ops_t shoal_put_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_scatter_cost,
    .plan = put_plan,
    .run = put_scatter_run,
};
