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
 * block, finished once on its rail. All-gather is the same backwards.
 *
 * The compressed reduce-scatter ("hier-codec", codec_select.c) sums
 * inside the host in fp32 as above, error feedback's addend joining the
 * input as it is staged, and its rails run the two-shot reduce-scatter
 * with the codec stage (shoal_twoshot_rs_step): each host's sum of a
 * block is quantised once, by the rank that owns its rail, straight to
 * the block's owner, which adds the others' to its own host's sum in
 * fp32. Only the links between hosts carry the codec's wire. Residuals
 * keep the indices of the input (block of rank r at r * count): a rank
 * writes those of the values it quantised, and zeros elsewhere.
 *
 * Both run as the hierarchical pipeline (hier_pipe.h): every rank's block
 * is cut into plan->pipe pieces, and piece k of all blocks is staged on
 * its own (n blocks of the piece's length, at n times its start), so that
 * the rails reduce-scatter piece k across hosts while the local lane
 * stages and reduce-scatters piece k+1 (the all-gather: the rails gather
 * piece k+1 while the local lane gathers piece k and copies it out). */
#include "algo.h"
#include "hier_pipe.h"
#include "stage.h"

#include "base/clock.h"

#include <math.h>

/* One move of the copy of piece [qo, qo + ql) of every rank's block
 * (count elements) between buf (n blocks by rank) and the staging of this
 * host, whose blocks are ql elements: to_stage 1 packs buf into stage
 * (plus addend, indexed as buf, when it is set: fp32 sums through the
 * lane's reduce), 0 unpacks. Rail by rail, each rail's blocks in host
 * order, at least SHOAL_HIER_LOCAL_MOVE bytes a move (or all of them when the piece is the
 * whole buffer), so that the rails are not kept waiting long; the lane's
 * stage_ fields are the cursor. Returns 1 once every block is copied. */
static int hier_stage_move(shoal_team_t *team, shoal_hier_lane_t *ln, char *stage, char *buf,
                           const float *addend, size_t count, size_t qo, size_t ql, size_t es,
                           int to_stage)
{
    const shoal_cluster_t *c = &team->cluster;
    int h = c->host_of[team->rank];
    size_t moved = 0, most = ql == count ? (size_t)-1 : SHOAL_HIER_LOCAL_MOVE;
    while (ln->stage_j < c->max_local && moved < most) {
        int j = ln->stage_j, g = ln->stage_g;
        if (g == c->nhosts) {
            ln->stage_j++;
            ln->stage_g = ln->stage_k = 0;
            continue;
        }
        if (j < shoal_cluster_nlocal(c, g)) {
            size_t at = (size_t)shoal_cluster_stage_off(c, h, j) + (size_t)ln->stage_k++;
            char *s = stage + at * ql * es;
            size_t i = (size_t)shoal_cluster_rank_at(c, g, j) * count + qo;
            if (to_stage && addend && ql)
                shoal_combine(team, ln->p.reduce, s, buf + i * es, addend + i, ql, es);
            else
                shoal_move(team, to_stage ? s : buf + i * es, to_stage ? buf + i * es : s,
                           ql * es);
            moved += ql * es;
        }
        ln->stage_g++;
    }
    return ln->stage_j == c->max_local;
}

/* What the cost reads: the bytes of every rank's block together, and what
 * the rails carry of them (the codec's wire, compressed). */
typedef struct {
    double total, wire;
} rsag_shape_t;

/* Time of one pipeline piece in each lane: inside the host the staging
 * (a copy of the piece) and the local ring, in moves of at most
 * SHOAL_HIER_LOCAL_MOVE (a chunk when there is one piece); across hosts
 * H-1 steps of the rails' rings, in which each host sends (H-1)/H of the
 * piece over its shared link. */
static void rsag_piece_cost(const shoal_team_t *team, const void *ctx, int pieces,
                            double *local_p, double *cross_p, double *fill_p)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    const rsag_shape_t *sh = ctx;
    double total = sh->total / pieces, wire = sh->wire / pieces;
    double move = pieces > 1 ? SHOAL_HIER_LOCAL_MOVE : (double)team->chunk_size;
    double loops = total / l > move ? ceil(total / l / move) : 1;
    *local_p = shoal_hier_local_cost(team, (l - 1) * loops, (l - 1) / l * total + total);
    /* Beyond 16 hosts the blocks of a host's rails queue unevenly on its
     * link, which the simulator shows idle about a tenth of the time (at
     * 32 and 128 hosts). */
    double uneven = hs > 16 ? 1.09 : 1;
    *cross_p = hs > 1 ? (hs - 1) * uneven * shoal_hier_rail_step(team, wire) : 0;
    *fill_p = 0;
}

static rsag_shape_t rsag_shape(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double total = shoal_algo_bytes(args, args->count) * team->nranks;
    const shoal_codec_t *c = args->codec;
    return (rsag_shape_t){total, c ? (double)c->ops->wire_bytes(c, args->count) * team->nranks
                                   : total};
}

/* The pipeline pieces: each keeps at least a slot's worth per rail. */
static int rsag_pipe(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    rsag_shape_t sh = rsag_shape(team, args);
    return shoal_hier_pipe_choose(team, rsag_piece_cost, &sh, sh.total,
                                  (double)team->chunk_size * team->cluster.max_local);
}

static double hier_rsag_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    rsag_shape_t sh = rsag_shape(team, args);
    return shoal_hier_pipe_cost(team, rsag_piece_cost, &sh, rsag_pipe(team, args));
}

static shoal_status_t hier_rsag_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, args->kind == SHOAL_COLL_REDUCE_SCATTER, plan);
    shoal_ring_local(team, SHOAL_RING_BY_RAIL, &plan->ring);
    plan->ring.unit = args->count;
    plan->pipe = rsag_pipe(team, args);
    /* The staged runs of every rank's block (piece k's at n times its
     * start, in blocks of its length); a reduce-scatter also keeps one
     * block of results it does not keep. */
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

/* Piece k's staging: n blocks of its length, at n times its start. */
static char *rsag_region(const shoal_hier_pipe_t *pp, int k, size_t *qo_p, size_t *ql_p)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_hier_pipe_piece(pp, k, qo_p, ql_p);
    return pp->stage + *qo_p * (size_t)plan->prims.team->nranks * plan->esize;
}

/* The rail of the rail lane's step: rails me, me + n, ... of this rank
 * (the modulo rule), each piece in turn. */
static int rsag_rail(const shoal_hier_pipe_t *pp, const shoal_hier_lane_t *ln, int *k_p)
{
    *k_p = ln->at / pp->nrails;
    return pp->first + (ln->at % pp->nrails) * pp->plan->ring.n;
}

/* A step of either lane went: at its schedule's end, the next step; a lane
 * that finished its last schedule of piece k has done k + 1 pieces. */
static void rsag_next(shoal_hier_lane_t *ln, int per_piece, int k)
{
    ln->cur = (shoal_ring_cur_t){0};
    ln->begun = ln->stage_j = ln->stage_g = ln->stage_k = 0;
    if (++ln->at % per_piece == 0)
        ln->done = k + 1;
}

/* Reduce-scatter, local lane: stage piece k, then reduce-scatter it inside
 * the host. */
static shoal_status_t rs_local_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                    int other_done)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    size_t es = plan->esize, qo, ql, off, len;
    int k = ln->at;
    char *region = rsag_region(pp, k, &qo, &ql);
    if (!ln->begun) {
        ln->begun = hier_stage_move(team, ln, region, (char *)plan->args.sendbuf, pp->addend,
                                    plan->args.count, qo, ql, es, 1);
        return SHOAL_OK;
    }
    ln->ring = plan->ring;
    ln->ring.unit = ql;
    shoal_ring_block(&ln->ring, ln->ring.me, &off, &len);
    shoal_status_t s = shoal_ring_rs_step(&ln->p, &ln->ring, region, region + off * es,
                                          pp->local_elems, &ln->cur);
    if (s == SHOAL_OK && ln->cur.done)
        rsag_next(ln, 1, k);
    return s;
}

/* A compressed reduce-scatter's piece [qo, qo + ql) starts on the rails
 * (its staging has read the addend): zero the residuals of the values this
 * rank will not quantise, every block but those of the ranks of other
 * hosts on the rails it owns. */
static void rs_codec_residual(const shoal_hier_pipe_t *pp, shoal_prims_t *p, size_t qo,
                             size_t ql)
{
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *lr = &pp->plan->ring;
    size_t count = pp->plan->args.count;
    if (!p->residual || !ql)
        return;
    for (int r = 0; r < team->nranks; r++) {
        if (c->host_of[r] != lr->host && c->local_of[r] % lr->n == lr->me)
            continue;
        team->kern->zero(team, p->residual + (size_t)r * count + qo, ql * sizeof(float));
    }
}

/* Reduce-scatter, rail lane: piece k of each owned rail across hosts, once
 * the local lane has reduced it (staged > k). This rank's own block is on
 * rail me; other rails hold none of this host's. */
static shoal_status_t rs_rail_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                   int staged)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    size_t es = plan->esize, qo, ql;
    int k, j = rsag_rail(pp, ln, &k);
    if (staged <= k)
        return SHOAL_INPROGRESS;
    char *region = rsag_region(pp, k, &qo, &ql);
    hier_rail_of(team, j, ql, &ln->ring);
    char *src = region + (size_t)shoal_cluster_stage_off(c, plan->ring.host, j) * ql * es;
    char *dst = j == plan->ring.me ? (char *)plan->args.recvbuf + qo * es : pp->spare;
    shoal_status_t s;
    if (plan->args.codec) {
        /* Once a piece, at its first rail. */
        if (!ln->begun && ln->at % pp->nrails == 0)
            rs_codec_residual(pp, &ln->p, qo, ql);
        ln->begun = 1;
        s = shoal_twoshot_rs_step(&ln->p, &ln->ring, src, dst, plan->args.count, qo,
                                  plan->stage_elems, &ln->cur);
    } else {
        s = shoal_ring_rs_step(&ln->p, &ln->ring, src, dst, plan->piece_elems, &ln->cur);
    }
    if (s == SHOAL_OK && ln->cur.done)
        rsag_next(ln, pp->nrails, k);
    return s;
}

/* All-gather, rail lane: piece k of each owned rail across hosts, this
 * rank's own piece read from sendbuf. */
static shoal_status_t ag_rail_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                   int other_done)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    size_t es = plan->esize, qo, ql;
    int k, j = rsag_rail(pp, ln, &k);
    char *region = rsag_region(pp, k, &qo, &ql);
    hier_rail_of(team, j, ql, &ln->ring);
    char *buf = region + (size_t)shoal_cluster_stage_off(c, plan->ring.host, j) * ql * es;
    const char *own = j == plan->ring.me ? (const char *)plan->args.sendbuf + qo * es : NULL;
    shoal_status_t s = shoal_ring_ag_step(&ln->p, &ln->ring, own, buf, plan->piece_elems,
                                          &ln->cur);
    if (s == SHOAL_OK && ln->cur.done)
        rsag_next(ln, pp->nrails, k);
    return s;
}

/* All-gather, local lane: piece k inside the host once its rails are done
 * (gathered > k), then unstaged into recvbuf. */
static shoal_status_t ag_local_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                    int gathered)
{
    const shoal_plan_t *plan = pp->plan;
    size_t es = plan->esize, qo, ql;
    int k = ln->at;
    if (gathered <= k)
        return SHOAL_INPROGRESS;
    char *region = rsag_region(pp, k, &qo, &ql);
    if (ln->cur.done) {
        if (hier_stage_move(ln->p.team, ln, region, plan->args.recvbuf, NULL, plan->args.count,
                            qo, ql, es, 0))
            rsag_next(ln, 1, k);
        return SHOAL_OK;
    }
    ln->ring = plan->ring;
    ln->ring.unit = ql;
    return shoal_ring_ag_step(&ln->p, &ln->ring, NULL, region, pp->local_elems, &ln->cur);
}

/* Both: the cut, this rank's rails and the lanes of a run over scratch of
 * bytes (the staging first). */
static shoal_status_t rsag_run(shoal_plan_t *plan, size_t bytes, shoal_hier_move_fn local,
                               shoal_hier_move_fn rail, int avg, const char *what)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_ring_t *lr = &plan->ring;
    size_t block = a->count * plan->esize;
    char *stage;
    if (block == 0)
        return SHOAL_OK;
    shoal_status_t s = shoal_plan_scratch(plan, bytes, (void **)&stage);
    if (s != SHOAL_OK)
        return s;
    /* A codec's pieces start on its blocks. */
    shoal_hier_pipe_t pp;
    shoal_hier_pipe_init(&pp, plan, a->count, a->codec ? a->codec->block : 0);
    pp.stage = stage;
    pp.spare = stage + block * (size_t)team->nranks; /* results this rank does not keep */
    pp.addend = p->addend;
    p->tmp = a->codec ? pp.spare + block : NULL; /* a codec stage's received piece */
    pp.first = lr->me;
    pp.nrails = (team->cluster.max_local - lr->me + lr->n - 1) / lr->n;
    pp.end = pp.first + pp.nrails * lr->n;
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    shoal_hier_lane_t lanes[2];
    shoal_hier_lanes_init(&pp, lanes);
    /* Inside the host the values move as they are; a codec's wire only on
     * the rails, whose addend the staging has taken. */
    lanes[0].p.st = &shoal_stage_plain;
    lanes[0].p.addend = lanes[1].p.addend = NULL;
    lanes[0].p.avg_n = 0;
    lanes[0].move = local;
    lanes[0].steps = pp.pieces;
    lanes[1].p.avg_n = avg && a->op == SHOAL_AVG ? team->nranks : 0;
    lanes[1].move = rail;
    lanes[1].steps = pp.pieces * pp.nrails;
    return shoal_hier_pipe_drive(&pp, lanes, what);
}

/* The staging, a block of results this rank does not keep, and a codec
 * stage's working memory for a received piece. */
static size_t hier_rs_scratch(const shoal_plan_t *plan)
{
    const shoal_prims_t *p = &plan->prims;
    size_t block = plan->args.count * plan->esize;
    size_t tmp = plan->args.codec ? p->st->tmp_bytes(p, plan->stage_elems) : 0;
    return block * (size_t)p->team->nranks + block + tmp;
}

static shoal_status_t hier_rs_run(shoal_plan_t *plan)
{
    return rsag_run(plan, hier_rs_scratch(plan), rs_local_move, rs_rail_move, 1,
                    "reduce-scatter");
}

static shoal_status_t hier_ag_run(shoal_plan_t *plan)
{
    size_t block = plan->args.count * plan->esize;
    return rsag_run(plan, block * (size_t)plan->prims.team->nranks, ag_local_move,
                    ag_rail_move, 0, "all-gather");
}

const shoal_algo_ops_t shoal_hier_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_rsag_cost,
    .plan = hier_rsag_plan,
    .run = hier_rs_run,
};

/* Only between hosts: on one host there is no link to spare. */
static double hier_codec_rs_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return args->codec && team->nhosts > 1 ? hier_rsag_cost(team, args) : -1;
}

static shoal_status_t hier_codec_rs_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                         shoal_plan_t *plan)
{
    if (!args->codec || args->dtype != SHOAL_FLOAT32 || team->nhosts < 2)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = hier_rsag_plan(team, args, plan);
    if (s == SHOAL_OK)
        s = shoal_plan_stage(team, args, plan);
    if (s == SHOAL_OK)
        shoal_plan_reserve(plan, hier_rs_scratch(plan));
    return s;
}

const shoal_algo_ops_t shoal_hier_codec_rs_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier-codec",
    .cost = hier_codec_rs_cost,
    .plan = hier_codec_rs_plan,
    .run = hier_rs_run,
};

const shoal_algo_ops_t shoal_hier_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_rsag_cost,
    .plan = hier_rsag_plan,
    .run = hier_ag_run,
};
