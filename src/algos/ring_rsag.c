/* Ring reduce-scatter and ring all-gather: the two halves of the ring
 * all-reduce as collectives of their own, around every rank in the
 * cluster's ring order. Block b is the b-th run of count elements of the
 * n-block buffer, and travels with the ring position of rank b. */
#include "algo.h"
#include "stage.h"

#include "base/clock.h"

static double rsag_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* n-1 steps, each moving one block of count elements over the slowest
     * link. */
    double n = team->nranks, lat = shoal_algo_lat(team);
    double block = shoal_algo_bytes(args, args->count) / shoal_algo_bw(team);
    if (team->nhosts == 1)
        return (n - 1) * (lat + block);
    /* Across hosts the ring order keeps each host's ranks together, so
     * only one hop in a host's worth crosses hosts: a step of a block that
     * takes longer than the link's latency on the wire waits for the wire
     * alone, which hides the latency; a shorter block's step takes about
     * half the latency and most of the wire time besides (fitted to the
     * simulator: 8 x 8 ranks at 32 KiB; 2 to 512 hosts of 8 ranks at 64
     * MiB). */
    return (n - 1) * (block >= lat ? block : lat / 2 + 0.6 * block);
}

/* The part of the plan shared by both: the flat ring and piece size. The
 * all-gather plan is just this; it leaves p->reduce NULL because it only
 * uses the primitives that copy. */
static shoal_status_t rsag_plan_ring(shoal_team_t *team, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    shoal_ring_flat(team, args->count, &plan->ring);
    return s;
}

shoal_status_t shoal_ring_reduce_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, 1, plan);
    shoal_ring_flat(team, args->count, &plan->ring);
    plan->prims.avg_n = args->op == SHOAL_AVG ? team->nranks : 0;
    return s;
}

static shoal_status_t rs_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    return shoal_ring_rs_run(p, &plan->ring, a->sendbuf, a->recvbuf, plan->piece_elems);
}

static shoal_status_t ag_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const char *place = (char *)a->recvbuf + (size_t)team->rank * a->count * plan->esize;
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    return shoal_ring_ag_run(p, &plan->ring, place == a->sendbuf ? NULL : a->sendbuf,
                             a->recvbuf, plan->piece_elems);
}

/* The compressed reduce-scatter (codec_select.c): the same ring with the
 * codec stage (stage_codec.c). A block starts as its first rank's encoded
 * values; each hop decodes it, adds its own values and requantises; the
 * owner decodes the last wire and adds its own values in fp32 (its own
 * block is never quantised), through the stage's working memory. */
static shoal_status_t rs_codec_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                    shoal_plan_t *plan)
{
    shoal_status_t s = shoal_codec_flat_plan(team, args, plan);
    shoal_prims_t *p = &plan->prims;
    if (s == SHOAL_OK)
        shoal_plan_reserve(plan, p->st->tmp_bytes(p, plan->stage_elems));
    return s;
}

static shoal_status_t rs_codec_run(shoal_plan_t *plan)
{
    shoal_prims_t *p = &plan->prims;
    shoal_status_t s = SHOAL_OK;
    size_t tmp_bytes = p->st->tmp_bytes(p, plan->stage_elems);
    if (plan->ring.n > 1 && tmp_bytes)
        s = shoal_plan_scratch(plan, tmp_bytes, &p->tmp);
    if (s != SHOAL_OK)
        return s;
    const shoal_coll_args_t *a = &plan->args;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    return shoal_ring_rs_run(p, &plan->ring, a->sendbuf, a->recvbuf, plan->stage_elems);
}

double shoal_codec_block_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double n = team->nranks;
    double wire = (double)args->codec->ops->wire_bytes(args->codec, args->count);
    return (n - 1) * (shoal_algo_lat(team) + wire / shoal_algo_bw(team));
}

const shoal_algo_ops_t shoal_ring_codec_rs_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring-codec",
    .cost = shoal_codec_block_cost,
    .plan = rs_codec_plan,
    .run = rs_codec_run,
};

const shoal_algo_ops_t shoal_ring_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = rsag_cost,
    .plan = shoal_ring_reduce_plan,
    .run = rs_run,
};

const shoal_algo_ops_t shoal_ring_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = rsag_cost,
    .plan = rsag_plan_ring,
    .run = ag_run,
};

/* The compressed all-gather (compressor_colls.c): the ring all-gather
 * with the codec stage. Each piece of this rank's shard is encoded once
 * into the send slot and decoded from there into its own block
 * (copy_send), so its own block holds what every other rank decodes; the
 * wire goes round unchanged (recv_copy_send, recv at the last hop), each
 * rank decoding it as it passes, piece after piece, so encoding and
 * decoding overlap the wire. The codec indexes a shard's values from its
 * start (first: the offset in the owner's count values): the stochastic
 * stream, the residual and the addend (count values, this rank's) are
 * those of encoding the shard whole. A rank alone copies its shard
 * exactly (the stage's alone). */
static shoal_status_t ag_codec_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                    shoal_plan_t *plan)
{
    if (!args->codec || args->dtype != SHOAL_FLOAT32)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = rsag_plan_ring(team, args, plan);
    return s == SHOAL_OK ? shoal_plan_stage(team, args, plan) : s;
}

static shoal_status_t ag_codec_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    const shoal_stage_ops_t *st = p->st;
    const shoal_ring_t *ring = &plan->ring;
    size_t es = plan->esize, count = a->count, pe = plan->stage_elems;
    int n = ring->n, me = ring->me;
    const char *own = a->sendbuf;
    char *dst = a->recvbuf;
    shoal_status_t s = SHOAL_OK;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    p->avg_n = 0;
    if (n == 1) {
        st->alone(p, own, dst + (size_t)ring->ranks[me] * count * es, 0, count);
        return SHOAL_OK;
    }
    shoal_ring_bind(p, ring);
    for (size_t off = 0; off < count && s == SHOAL_OK; off += pe) {
        size_t len = count - off < pe ? count - off : pe;
        for (int k = 0; k < n && s == SHOAL_OK; k++) {
            /* Move k brings the block of position me - k. */
            char *d = dst + ((size_t)ring->ranks[(me - k + n) % n] * count + off) * es;
            if (k == 0)
                s = st->copy_send(p, own + off * es, d, off, len);
            else if (k < n - 1)
                s = st->recv_copy_send(p, d, off, len);
            else
                s = st->recv(p, d, off, len);
        }
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

const shoal_algo_ops_t shoal_ring_codec_ag_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring-codec",
    .cost = shoal_codec_block_cost,
    .plan = ag_codec_plan,
    .run = ag_codec_run,
};
