/* The hierarchical collectives' software pipeline (hier_pipe.h): the cut
 * into pieces, the driver of the two lanes and the cost of a run in
 * pieces. */
#include "hier_pipe.h"

#include "base/config.h"

void shoal_hier_pipe_init(shoal_hier_pipe_t *pp, const shoal_plan_t *plan, size_t count,
                          size_t align)
{
    int pieces = plan->pipe > 0 ? plan->pipe : 1;
    align = align ? align : 16;
    size_t pe = (count + (size_t)pieces - 1) / (size_t)pieces;
    pe = (pe + align - 1) / align * align;
    if (pe == 0)
        pe = align;
    size_t le = plan->piece_elems;
    if (pieces > 1 && le > SHOAL_HIER_LOCAL_MOVE / plan->esize)
        le = SHOAL_HIER_LOCAL_MOVE / plan->esize;
    *pp = (shoal_hier_pipe_t){.plan = plan, .count = count, .pipe_elems = pe,
                              .local_elems = le, .pieces = (int)((count + pe - 1) / pe)};
    if (pp->pieces == 0)
        pp->pieces = 1;
}

void shoal_hier_pipe_piece(const shoal_hier_pipe_t *pp, int k, size_t *qo_p, size_t *ql_p)
{
    size_t qo = (size_t)k * pp->pipe_elems;
    *qo_p = qo < pp->count ? qo : pp->count;
    *ql_p = pp->count - *qo_p < pp->pipe_elems ? pp->count - *qo_p : pp->pipe_elems;
}

int shoal_hier_local_order(int pieces, int i, int *k_p)
{
    if (i == 0 || (i < 2 * pieces - 1 && i % 2)) {
        *k_p = (i + 1) / 2;
        return 1;
    }
    *k_p = i == 2 * pieces - 1 ? pieces - 1 : i / 2 - 1;
    return 0;
}

void shoal_hier_lanes_init(const shoal_hier_pipe_t *pp, shoal_hier_lane_t lanes[2])
{
    for (int i = 0; i < 2; i++) {
        lanes[i] = (shoal_hier_lane_t){.p = pp->plan->prims};
        lanes[i].p.poll = 1;
    }
}

shoal_status_t shoal_hier_pipe_drive(const shoal_hier_pipe_t *pp, shoal_hier_lane_t lanes[2],
                                     const char *what)
{
    shoal_team_t *team = pp->plan->prims.team;
    uint64_t deadline = pp->plan->prims.deadline_ns;
    shoal_idle_t wait = {0, 0};
    shoal_status_t s = SHOAL_OK;
    while (lanes[0].at < lanes[0].steps || lanes[1].at < lanes[1].steps) {
        int moved = 0;
        /* One move of each lane in turn, so neither starves the other;
         * the rail lane sees what the local lane has just finished. */
        for (int i = 0; i < 2; i++) {
            shoal_hier_lane_t *ln = &lanes[i];
            if (ln->at >= ln->steps)
                continue;
            s = ln->move(pp, ln, lanes[1 - i].done);
            if (s != SHOAL_OK && s != SHOAL_INPROGRESS)
                return s;
            moved |= s == SHOAL_OK;
        }
        s = SHOAL_OK;
        if (moved) {
            wait = (shoal_idle_t){0, 0};
        } else if ((s = shoal_prims_idle(team, deadline, &wait)) != SHOAL_OK) {
            if (s == SHOAL_ERR_TIMEOUT)
                shoal_team_cause(team, "rank %d: the hierarchical %s waited for its peers "
                                 "until the deadline", team->rank, what);
            break;
        }
    }
    return s;
}

double shoal_hier_pipe_cost(const shoal_team_t *team, shoal_hier_piece_cost_fn fn,
                            const void *ctx, int pieces)
{
    double local, cross, fill;
    fn(team, ctx, pieces, &local, &cross, &fill);
    double slow = local > cross ? local : cross;
    return (pieces - 1) * slow + local + cross + fill;
}

int shoal_hier_pipe_choose(const shoal_team_t *team, shoal_hier_piece_cost_fn fn,
                           const void *ctx, double bytes, double piece_min)
{
    int forced = shoal_config_get()->algo.hier_pipe;
    if (forced > 0)
        return forced;
    double least = 0;
    int best = 1;
    for (int k = 1; k <= SHOAL_HIER_PIPE_MAX && (k == 1 || bytes / k >= piece_min); k++) {
        double t = shoal_hier_pipe_cost(team, fn, ctx, k);
        if (k == 1 || t < least) {
            least = t;
            best = k;
        }
    }
    return best;
}

double shoal_hier_local_cost(const shoal_team_t *team, double steps, double bytes)
{
    const shoal_link_cost_t *in = shoal_algo_intra(team);
    return steps * in->lat_s + bytes / in->bw_Bps;
}

/* The link keeps the rails waiting only while it needs half as long again
 * as a ring's hop, since near the edge the blocks queue behind each other
 * (fitted to the simulator at 64 and 128 hosts). */
double shoal_hier_rail_step(const shoal_team_t *team, double wire)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    const shoal_link_cost_t *out = shoal_algo_inter(team);
    double link = wire / hs / out->bw_Bps, ring = out->lat_s + link / l;
    return link > 1.5 * ring ? link : 1.5 * ring;
}
