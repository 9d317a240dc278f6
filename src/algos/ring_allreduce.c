/* Ring all-reduce: reduce-scatter then all-gather around every rank in the
 * cluster's ring order (neighbours on one host, and one NUMA node, where
 * they can be), through the ring schedule of ring_team.c.
 *
 * The compressed ring ("ring-codec", fp32 SUM and AVG) is the same
 * schedule with the codec stage (stage_codec.c): loop blocks are whole
 * codec blocks and a piece holds the most whole blocks whose wire fits a
 * slot, so every piece encodes exactly as the whole tensor would
 * (codec.h), whatever the chunk size or rank count. The first rank of a
 * block encodes its values, each next one adds its values to the incoming
 * wire and requantises, and the owner, the last, does the same into its
 * send slot and decodes that wire into its result. The all-gather forwards
 * that wire unchanged and every rank decodes the very same bytes: all
 * ranks end with identical bits. AVG is the decoded sum divided by n, on
 * every rank alike.
 *
 * Error feedback. Each value is quantised exactly once per rank on its
 * way, so one call writes the whole residual array of count floats on each
 * rank. Summed over the ranks, the residuals are the exact sum of the
 * inputs minus the decoded sum (for AVG: minus n times the result), up to
 * the fp32 rounding of each hop's addition and of the residuals' own sum.
 * A rank alone quantises nothing: it gets its input exactly and a residual
 * of zeros. */
#include "algo.h"

#include "base/clock.h"
#include "base/config.h"

static double ring_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* 2(n-1) steps, each moving 1/n of the data. */
    double n = team->nranks;
    return 2 * (n - 1) * (shoal_algo_lat(team) + shoal_algo_bytes(args, args->count) / n /
                                                     shoal_algo_bw(team));
}

/* Loops in flight: across hosts, where a step would otherwise wait for
 * the link's latency once per loop, one fewer than the FIFOs have slots
 * (tcp's and shared memory's alike, since the ring uses both): with every
 * slot of every link full, each rank would wait for a free slot before it
 * takes the piece that frees one. At most SHOAL_RING_DEPTH_MAX; inside a
 * host, where latency is small, one. tcp's 2 slots by default keep one
 * loop in flight; SHOAL_TCP_NSLOTS=4 keeps three. tcp gives a peer fewer
 * slots the later it connects it (SHOAL_TCP_MEM), so the depth counts on
 * the fewest any peer can get, the same on every rank. */
static int ring_depth(const shoal_team_t *team)
{
    const shoal_config_t *c = shoal_config_get();
    size_t tcp = shoal_tcp_slots_rule(c->tcp.mem, team->chunk_size, c->tcp.nslots,
                                      (size_t)team->nranks);
    size_t shm = c->shm.nslots ? c->shm.nslots : SHOAL_SHM_NSLOTS_DEFAULT;
    size_t slots = tcp < shm ? tcp : shm;
    if (team->nhosts < 2 || slots < 2)
        return 1;
    return slots - 1 < SHOAL_RING_DEPTH_MAX ? (int)slots - 1 : SHOAL_RING_DEPTH_MAX;
}

static shoal_status_t ring_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    return shoal_ring_allreduce_run_deep(p, &plan->ring, a->sendbuf, a->recvbuf, a->count, 0,
                                         plan->stage_elems, ring_depth(p->team));
}

const shoal_algo_ops_t shoal_ring_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = ring_cost,
    .plan = shoal_ring_reduce_plan,
    .run = ring_run,
};

double shoal_codec_flat_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* 2(n-1) steps, each moving 1/n of the wire form. */
    double n = team->nranks;
    const shoal_codec_t *c = args->codec;
    double bytes = c ? (double)c->ops->wire_bytes(c, args->count) : 0;
    return 2 * (n - 1) * (shoal_algo_lat(team) + bytes / n / shoal_algo_bw(team));
}

shoal_status_t shoal_codec_flat_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    shoal_status_t s = shoal_ring_reduce_plan(team, args, plan);
    if (s != SHOAL_OK)
        return s;
    if (!args->codec)
        return SHOAL_ERR_INTERNAL;
    return shoal_plan_stage(team, args, plan);
}

const shoal_algo_ops_t shoal_ring_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring-codec",
    .cost = shoal_codec_flat_cost,
    .plan = shoal_codec_flat_plan,
    .run = ring_run,
};
