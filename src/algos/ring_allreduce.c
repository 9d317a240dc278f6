/* Ring all-reduce: reduce-scatter then all-gather around every rank in the
 * cluster's ring order (neighbours on one host, and one NUMA node, where
 * they can be), through the ring schedule of ring_team.c. */
#include "algo.h"

#include "base/clock.h"

static double ring_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    /* 2(n-1) steps, each moving 1/n of the data. */
    double n = comm->nranks;
    return 2 * (n - 1) * (shoal_algo_lat(comm) + shoal_algo_bytes(args, args->count) / n /
                                                     shoal_algo_bw(comm));
}

static shoal_status_t ring_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    p->deadline_ns = shoal_deadline_after(p->comm->timeout_ns);
    return shoal_ring_allreduce_run(p, &plan->ring, a->sendbuf, a->recvbuf, a->count,
                                    plan->piece_elems);
}

const shoal_algo_ops_t shoal_ring_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = ring_cost,
    .plan = shoal_ring_reduce_plan,
    .run = ring_run,
};
