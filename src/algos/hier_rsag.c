/* Hierarchical reduce-scatter and all-gather. Rank blocks travel by rail:
 * rail j carries the blocks of the ranks at local position j of every
 * host, and on host h it is owned by the rank at position j mod nlocal(h),
 * so a rank owns its own rail and, on a host with fewer ranks than
 * another, the rails that host lacks.
 *
 * Each host stages the n blocks owner-major (shoal_cluster_stage_off):
 * then the rails a rank owns are one run, and the local ring moves them as
 * that rank's block.
 *
 * Reduce-scatter: stage sendbuf; reduce-scatter the staged runs inside the
 * host (each owner ends with its rails summed over the host); reduce-
 * scatter each owned rail across hosts, which leaves every rank its own
 * block, finished once on its rail. All-gather is the same backwards. */
#include "algo.h"

#include "base/clock.h"

/* Block k (in host order) of rail j on the staging of host h: the rank
 * whose block it is. */
static int rail_block_rank(const shoal_cluster_t *c, int j, int k)
{
    for (int g = 0; g < c->nhosts; g++) {
        if (j < shoal_cluster_nlocal(c, g) && k-- == 0)
            return shoal_cluster_rank_at(c, g, j);
    }
    return -1;
}

/* Copy every rank's block between buf (n blocks by rank) and the staging
 * of this host: to_stage 1 packs buf into stage, 0 unpacks. */
static void hier_stage(shoal_team_t *team, char *stage, char *buf, size_t block,
                       int to_stage)
{
    const shoal_cluster_t *c = &team->cluster;
    int h = c->host_of[team->rank];
    for (int j = 0; j < c->max_local; j++) {
        size_t at = (size_t)shoal_cluster_stage_off(c, h, j);
        for (int k = 0; k < shoal_cluster_rail_size(c, j); k++) {
            char *s = stage + (at + (size_t)k) * block;
            char *b = buf + (size_t)rail_block_rank(c, j, k) * block;
            shoal_move(team, to_stage ? s : b, to_stage ? b : s, block);
        }
    }
}

static shoal_status_t hier_rsag_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, args->kind == SHOAL_COLL_REDUCE_SCATTER, plan);
    shoal_ring_local(team, SHOAL_RING_BY_RAIL, &plan->ring);
    plan->ring.unit = args->count;
    /* The staged runs of every rank's block; a reduce-scatter also keeps
     * one block of results it does not keep. */
    size_t block = args->count * plan->esize;
    shoal_plan_reserve(plan, block * (size_t)team->nranks +
                                 (args->kind == SHOAL_COLL_REDUCE_SCATTER ? block : 0));
    return s;
}

/* The rail ring of rail j, blocks of count by host. */
static void hier_rail_of(shoal_team_t *team, int j, size_t count, shoal_ring_t *rail_p)
{
    shoal_ring_rail(team, team->cluster.rail_mod_ranks, j, rail_p);
    rail_p->unit = count;
}

static double hier_rsag_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    double total = shoal_algo_bytes(args, args->count) * team->nranks;
    const shoal_link_cost_t *in = shoal_algo_intra(team), *out = shoal_algo_inter(team);
    /* Staging (a copy of the whole buffer), the local ring, and each host
     * sending (H-1)/H of the data across over its shared link. */
    double local = (l - 1) * in->lat_s + (l - 1) / l * total / in->bw_Bps + total / in->bw_Bps;
    double cross = hs > 1 ? (hs - 1) * out->lat_s + (hs - 1) / hs * total / out->bw_Bps : 0;
    return local + cross;
}

static shoal_status_t hier_rs_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *local = &plan->ring;
    size_t es = plan->esize, block = a->count * es, off, len;
    char *stage;
    if (block == 0)
        return SHOAL_OK;
    shoal_status_t s = shoal_plan_scratch(plan, block * (size_t)team->nranks + block,
                                          (void **)&stage);
    if (s != SHOAL_OK)
        return s;
    char *spare = stage + block * (size_t)team->nranks; /* results this rank does not keep */
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    hier_stage(team, stage, (char *)a->sendbuf, block, 1);
    p->avg_n = 0;
    shoal_ring_block(local, local->me, &off, &len);
    s = shoal_ring_rs_run(p, local, stage, stage + off * es, plan->piece_elems);
    p->avg_n = a->op == SHOAL_AVG ? team->nranks : 0;
    for (int j = local->me; j < c->max_local && s == SHOAL_OK; j += local->n) {
        shoal_ring_t rail;
        hier_rail_of(team, j, a->count, &rail);
        char *src = stage + (size_t)shoal_cluster_stage_off(c, local->host, j) * block;
        /* This rank's own block is on rail me; other rails hold none of
         * this host's. */
        s = shoal_ring_rs_run(p, &rail, src, j == local->me ? a->recvbuf : spare,
                              plan->piece_elems);
    }
    return s;
}

static shoal_status_t hier_ag_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *local = &plan->ring;
    size_t es = plan->esize, block = a->count * es;
    char *stage;
    if (block == 0)
        return SHOAL_OK;
    shoal_status_t s = shoal_plan_scratch(plan, block * (size_t)team->nranks, (void **)&stage);
    if (s != SHOAL_OK)
        return s;
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    for (int j = local->me; j < c->max_local && s == SHOAL_OK; j += local->n) {
        shoal_ring_t rail;
        hier_rail_of(team, j, a->count, &rail);
        char *buf = stage + (size_t)shoal_cluster_stage_off(c, local->host, j) * block;
        s = shoal_ring_ag_run(p, &rail, j == local->me ? a->sendbuf : NULL, buf,
                              plan->piece_elems);
    }
    if (s == SHOAL_OK)
        s = shoal_ring_ag_run(p, local, NULL, stage, plan->piece_elems);
    if (s == SHOAL_OK)
        hier_stage(team, stage, a->recvbuf, block, 0);
    return s;
}

const shoal_algo_ops_t shoal_hier_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_rsag_cost,
    .plan = hier_rsag_plan,
    .run = hier_rs_run,
};

const shoal_algo_ops_t shoal_hier_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_rsag_cost,
    .plan = hier_rsag_plan,
    .run = hier_ag_run,
};
