/* One-shot all-reduce for small messages among ranks of one host: every
 * rank sends its whole input (one piece) to every peer, then reduces all n
 * inputs itself, reading the peers' pieces in place from its receive slots.
 * One step of latency, for n-1 times the traffic; over shared memory a
 * slot is the sender's write straight into this rank's memory, so for a
 * message that fits one slot this beats any schedule of several hops.
 *
 * Every rank evaluates the same expression, x[n-1] op (... op (x[1] op
 * x[0])), with the operands in the same order (the kernels compute received
 * op accumulated, and the local input takes the received side), and
 * finishes AVG on the last step, so every rank gets the same bits.
 *
 * No wait cycle: a rank first posts all its sends, which need only a free
 * slot of a FIFO that its peer drains whatever it waits for, then receives. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

static double oneshot_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double bytes = shoal_algo_bytes(args, args->count);
    if (team->nhosts != 1 || bytes > (double)team->chunk_size)
        return -1;
    return shoal_algo_lat(team) + (team->nranks - 1) * bytes / shoal_algo_bw(team);
}

static shoal_status_t oneshot_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                   shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, 1, plan);
    if (s != SHOAL_OK || args->count > plan->piece_elems)
        return SHOAL_ERR_INTERNAL;
    for (int r = 0; r < team->nranks; r++) {
        if (r != team->rank && !shoal_team_ep(team, r))
            return SHOAL_ERR_INTERNAL;
    }
    /* A copy of an in-place input (at most one piece; see the run). */
    if (team->rank > 0)
        shoal_plan_reserve(plan, args->count * plan->esize);
    return SHOAL_OK;
}

static shoal_status_t oneshot_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    int n = team->nranks, r = team->rank;
    size_t count = a->count, bytes = count * plan->esize;
    const char *in = a->sendbuf;
    char *acc = a->recvbuf;
    shoal_status_t s = SHOAL_OK;

    if (n == 1 || count == 0) {
        if (acc != in && count > 0)
            shoal_move(team, acc, in, bytes);
        return SHOAL_OK;
    }
    /* In place, rank 0's input lands on ours before we fold ours in: keep
     * a copy. */
    if (in == acc && r > 0) {
        void *keep;
        s = shoal_plan_scratch(plan, bytes, &keep);
        if (s != SHOAL_OK)
            return s;
        shoal_move(team, keep, in, bytes);
        in = keep;
    }
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    /* Starting after ourselves spreads the first pieces over the peers. */
    for (int k = 1; k < n && s == SHOAL_OK; k++) {
        p->send_ep = shoal_team_ep(team, (r + k) % n);
        s = shoal_prim_send(p, in, bytes);
    }
    p->send_ep = NULL;
    if (s != SHOAL_OK)
        return s;

    int avg_n = a->op == SHOAL_AVG ? n : 0;
    if (r == 0) {
        if (acc != in)
            shoal_move(team, acc, in, bytes);
    } else {
        p->recv_ep = shoal_team_ep(team, 0);
        s = shoal_prim_recv(p, acc, bytes);
    }
    for (int k = 1; k < n && s == SHOAL_OK; k++) {
        p->avg_n = k == n - 1 ? avg_n : 0;
        if (k != r) {
            p->recv_ep = shoal_team_ep(team, k);
            s = shoal_prim_recv_reduce_copy_send(p, acc, acc, bytes);
            continue;
        }
        shoal_combine(team, p->reduce, acc, in, acc, count, p->esize);
        if (p->avg_n > 0)
            shoal_finish_avg(team, acc, count, p->dtype, p->avg_n);
    }
    p->avg_n = 0;
    /* Everything went out before the receives; flush each peer. */
    for (int k = 1; k < n && s == SHOAL_OK; k++) {
        p->send_ep = shoal_team_ep(team, (r + k) % n);
        s = shoal_prim_flush(p);
    }
    p->send_ep = NULL;
    return s;
}

const shoal_algo_ops_t shoal_oneshot_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "oneshot",
    .cost = oneshot_cost,
    .plan = oneshot_plan,
    .run = oneshot_run,
};
