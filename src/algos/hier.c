/* Hierarchical all-reduce and broadcast: the work inside each host runs
 * over shared memory, and only one slice of the data per rank crosses
 * between hosts, on rails (one rank of every host) that run side by side.
 *
 * The buffer is cut into max_local segments, one per rail; on a host with
 * fewer ranks each rank owns a run of consecutive rails
 * (shoal_cluster_owned_rails), so hosts may hold different numbers of
 * ranks. A rank that owns several rails runs them in increasing order, as
 * every rank does, so no two ranks wait on each other in opposite orders.
 *
 * All-reduce: reduce-scatter inside the host (each rank ends with its
 * segments summed over the host), all-reduce of each segment along its
 * rail (ring across hosts), all-gather inside the host. Every segment is
 * finished once, on its rail, and forwarded unchanged: every rank gets the
 * same bits.
 *
 * Compressed all-reduce (a codec in the call; fp32 SUM or AVG): the same
 * three phases, with the rails running the ring with the plan's codec
 * stage (stage.h) on their segments, so that only the links between hosts carry compressed
 * data and each value is quantised once per host. Segments then start on
 * whole codec blocks and keep their place in the tensor for the codec
 * (its random stream, shared scales and residual indices). The last
 * call's residual joins each rank's input in the local reduce-scatter, as
 * the plain stage reads it (its addend). A rank writes
 * the residuals of the values it quantised, those of its own segments, and
 * zeroes the rest: summed over the ranks they are the sum of the host sums
 * (each exact up to fp32 rounding) minus the result. The local phases move
 * fp32 values unchanged, so every rank gets the bits its rail decoded.
 *
 * Broadcast: the root hands each segment to its owner on the root's host,
 * each rail broadcasts its segment across hosts (a chain from the root's
 * host), and every host all-gathers the segments. */
#include "algo.h"
#include "stage.h"

#include "base/clock.h"

#include <string.h>

/* Both need the local ring over this host's ranks in segments of count. */
static shoal_status_t hier_plan_common(shoal_team_t *team, const shoal_coll_args_t *args,
                                       int reduces, shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, reduces, plan);
    shoal_ring_local(team, SHOAL_RING_BY_SEG, &plan->ring);
    plan->ring.total = args->count;
    return s;
}

/* Segment j of count elements cut into max_local segments on multiples
 * of align: [*so_p, *so_p + *sl_p). */
static void hier_seg(const shoal_cluster_t *c, size_t count, int j, size_t align, size_t *so_p,
                     size_t *sl_p)
{
    *so_p = shoal_ring_seg_off(count, c->max_local, j, align);
    *sl_p = shoal_ring_seg_off(count, c->max_local, j + 1, align) - *so_p;
}

/* Cost of the parts inside a host: steps of the local ring, each moving
 * bytes over the slowest link inside it. */
static double hier_local_cost(const shoal_team_t *team, double steps, double bytes)
{
    const shoal_link_cost_t *in = shoal_algo_intra(team);
    return steps * in->lat_s + bytes / in->bw_Bps;
}

/* The all-reduce of bytes whose rails carry wire bytes across hosts. */
static double hier_allreduce_cost_of(const shoal_team_t *team, double bytes, double wire)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    const shoal_link_cost_t *out = shoal_algo_inter(team);
    /* Every host sends 2 (H-1)/H of the data across, its rails sharing its
     * link; the local phases are a ring reduce-scatter and all-gather. */
    double cross = hs > 1 ? 2 * (hs - 1) * out->lat_s + 2 * (hs - 1) / hs * wire / out->bw_Bps
                          : 0;
    return hier_local_cost(team, 2 * (l - 1), 2 * (l - 1) / l * bytes) + cross;
}

static double hier_allreduce_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double bytes = shoal_algo_bytes(args, args->count);
    return hier_allreduce_cost_of(team, bytes, bytes);
}

static shoal_status_t hier_allreduce_plan(shoal_team_t *team,
                                          const shoal_coll_args_t *args, shoal_plan_t *plan)
{
    return hier_plan_common(team, args, 1, plan);
}

/* A compressed run: zero the residuals of the values outside this rank's
 * segments [off, off + len), which it does not quantise. */
static void hier_codec_residual(shoal_prims_t *p, size_t count, size_t off, size_t len)
{
    shoal_team_t *team = p->team;
    if (!p->residual)
        return;
    team->kern->zero(team, p->residual, off * sizeof(float));
    team->kern->zero(team, p->residual + off + len, (count - off - len) * sizeof(float));
}

static shoal_status_t hier_allreduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *local = &plan->ring;
    size_t es = plan->esize, off, len;
    char *dst = a->recvbuf;

    /* The rails run the plan's stage; the phases inside the host move
     * elements as they are. */
    const shoal_stage_ops_t *rail_st = p->st;
    const float *addend = p->addend;
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    /* 1. This rank's segments, summed over its host, land in dst. The
     * addend (error feedback's) joins the input as the local reduction
     * reads it; the host sums hold it from then on. */
    p->avg_n = 0;
    p->st = &shoal_stage_plain;
    shoal_ring_block(local, local->me, &off, &len);
    shoal_status_t s = shoal_ring_rs_run(p, local, a->sendbuf, dst + off * es, plan->piece_elems);
    p->addend = NULL;
    /* 2. Each of them reduced across hosts along its rail (AVG finished),
     * through the codec when the call compresses. */
    p->avg_n = a->op == SHOAL_AVG ? team->nranks : 0;
    p->st = rail_st;
    if (s == SHOAL_OK)
        hier_codec_residual(p, a->count, off, len);
    int first, end;
    shoal_cluster_owned_rails(c, local->host, local->me, &first, &end);
    for (int j = first; j < end && s == SHOAL_OK; j++) {
        shoal_ring_t rail;
        size_t so, sl;
        shoal_ring_rail(team, c->rail_ranks, j, &rail);
        hier_seg(c, a->count, j, local->align, &so, &sl);
        s = shoal_ring_allreduce_run(p, &rail, dst + so * es, dst + so * es, sl, so,
                                     plan->stage_elems);
    }
    /* 3. Every segment to every rank of the host. */
    p->avg_n = 0;
    p->st = &shoal_stage_plain;
    if (s == SHOAL_OK)
        s = shoal_ring_ag_run(p, local, NULL, dst, plan->piece_elems);
    p->st = rail_st;
    p->addend = addend;
    return s;
}

const shoal_algo_ops_t shoal_hier_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_allreduce_cost,
    .plan = hier_allreduce_plan,
    .run = hier_allreduce_run,
};

/* Only between hosts: on one host there is no link to spare. */
static double hier_codec_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    const shoal_codec_t *c = args->codec;
    if (!c || team->nhosts < 2)
        return -1;
    return hier_allreduce_cost_of(team, shoal_algo_bytes(args, args->count),
                                  (double)c->ops->wire_bytes(c, args->count));
}

static shoal_status_t hier_codec_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    if (!args->codec || args->dtype != SHOAL_FLOAT32 || team->nhosts < 2)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = hier_plan_common(team, args, 1, plan);
    if (s != SHOAL_OK)
        return s;
    plan->ring.align = args->codec->block;
    return shoal_plan_stage(team, args, plan);
}

const shoal_algo_ops_t shoal_hier_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier-codec",
    .cost = hier_codec_cost,
    .plan = hier_codec_plan,
    .run = hier_allreduce_run,
};

static double hier_bcast_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    double bytes = shoal_algo_bytes(args, args->count);
    const shoal_link_cost_t *out = shoal_algo_inter(team);
    double piece = bytes / l < (double)team->chunk_size ? bytes / l : (double)team->chunk_size;
    /* Scatter on the root's host, chains of H-1 hops across hosts that
     * together move the whole message once over the root host's link, and
     * a local all-gather. */
    double cross = hs > 1 ? (hs - 1) * (out->lat_s + piece / out->bw_Bps) + bytes / out->bw_Bps
                          : 0;
    return hier_local_cost(team, l, (l - 1) / l * bytes) +
           hier_local_cost(team, l - 1, (l - 1) / l * bytes) + cross;
}

static shoal_status_t hier_bcast_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    if (args->root < 0 || args->root >= team->nranks)
        return SHOAL_ERR_INTERNAL;
    return hier_plan_common(team, args, 0, plan);
}

/* 1. The root sends each segment to its owner on the root's host. */
static shoal_status_t bcast_scatter(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    const shoal_cluster_t *c = &team->cluster;
    int hr = c->host_of[a->root], m = c->max_local;
    size_t es = plan->esize;
    if (c->host_of[team->rank] != hr)
        return SHOAL_OK;
    shoal_xfer_t xs[m];
    size_t nx = 0;
    for (int j = 0; j < m; j++) {
        int owner = c->rail_ranks[(size_t)j * (size_t)c->nhosts + (size_t)hr];
        size_t so, sl;
        hier_seg(c, a->count, j, 0, &so, &sl);
        if (owner == a->root)
            continue;
        if (team->rank == a->root)
            xs[nx++] = (shoal_xfer_t){.ep = shoal_team_ep(team, owner),
                                      .buf = (char *)a->sendbuf + so * es, .bytes = sl * es};
        else if (team->rank == owner)
            xs[nx++] = (shoal_xfer_t){.ep = shoal_team_ep(team, a->root),
                                      .buf = (char *)a->recvbuf + so * es, .bytes = sl * es};
    }
    int is_root = team->rank == a->root;
    return shoal_xfer_run(team, is_root ? xs : NULL, is_root ? nx : 0, is_root ? NULL : xs,
                          is_root ? 0 : nx, plan->prims.deadline_ns);
}

/* 2. Segment [so, so + sl) of dst along the rail from the root's host. */
static shoal_status_t bcast_chain(shoal_plan_t *plan, const shoal_ring_t *rail, int first,
                                  char *buf, size_t sl)
{
    shoal_prims_t *p = &plan->prims;
    int n = rail->n, pos = (rail->me - first + n) % n;
    if (n == 1)
        return SHOAL_OK;
    shoal_ring_bind(p, rail);
    if (pos == 0)
        p->recv_ep = NULL;
    if (pos == n - 1)
        p->send_ep = NULL;
    size_t es = plan->esize;
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < sl && s == SHOAL_OK; off += plan->piece_elems) {
        size_t bytes = (sl - off < plan->piece_elems ? sl - off : plan->piece_elems) * es;
        if (!p->recv_ep)
            s = shoal_prim_send(p, buf + off * es, bytes);
        else
            s = shoal_prim_recv_copy_send(p, buf + off * es, bytes);
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

static shoal_status_t hier_bcast_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *local = &plan->ring;
    size_t es = plan->esize;
    char *dst = a->recvbuf;

    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    if (team->rank == a->root && dst != a->sendbuf)
        shoal_move(team, dst, a->sendbuf, a->count * es);
    shoal_status_t s = bcast_scatter(plan);
    int first, end;
    shoal_cluster_owned_rails(c, local->host, local->me, &first, &end);
    for (int j = first; j < end && s == SHOAL_OK; j++) {
        shoal_ring_t rail;
        size_t so, sl;
        shoal_ring_rail(team, c->rail_ranks, j, &rail);
        hier_seg(c, a->count, j, 0, &so, &sl);
        s = bcast_chain(plan, &rail, c->host_of[a->root], dst + so * es, sl);
    }
    if (s == SHOAL_OK)
        s = shoal_ring_ag_run(p, local, NULL, dst, plan->piece_elems);
    return s;
}

const shoal_algo_ops_t shoal_hier_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_bcast_cost,
    .plan = hier_bcast_plan,
    .run = hier_bcast_run,
};
