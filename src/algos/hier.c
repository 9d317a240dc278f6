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
 * The three phases run as a software pipeline over pipeline pieces (the
 * buffer cut into plan->pipe pieces, each cut into segments as above):
 * the rail lane runs piece k's all-reduces across hosts while the local
 * lane runs piece k+1's reduce-scatter and then piece k-1's all-gather
 * (local order RS0, RS1, AG0, RS2, AG1, ..., AG(P-1)). Each lane is the
 * ring schedules driven one move at a time (shoal_ring_*_step) with
 * polling waits, so one thread keeps both kinds of link busy; a lane
 * whose next move waits for data, a slot or the other lane gives the turn
 * to the other, and when neither can move the rank idles. The two lanes
 * use different endpoints (inside the host, across hosts) and each keeps
 * one order of pieces on its own, the same on every rank, so every FIFO
 * carries its pieces in one order. The number of pieces is what the cost
 * model finds fastest (hier_pipe): one where the rings across hosts would
 * pay their latency once per piece for too little data.
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
#include "base/config.h"

#include <math.h>
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

/* The most pipeline pieces the all-reduce cuts its buffer into. */
#define HIER_PIPE_MAX 16

/* A move of the local lane when the all-reduce is pipelined: it holds the
 * rank while pieces of the rails arrive, so it is kept short. */
#define HIER_LOCAL_MOVE (64u << 10)

/* Time of one pipeline piece of bytes (wire bytes across hosts) in each
 * lane: the local reduce-scatter and all-gather, in moves of at most move
 * bytes, and the all-reduces along the rails. A step of a rail's ring
 * waits for its block from the previous host (the link's latency plus
 * the block's wire time), and the rails of a host share its link, which
 * carries all their blocks of the step: wire / H. The step takes the
 * longer of the two; the link keeps the rails waiting only while it needs
 * half as long again as a ring's hop, since near the edge the blocks
 * queue behind each other (fitted to the simulator at 64 and 128 hosts). */
static void hier_piece_cost(const shoal_team_t *team, double bytes, double wire, double move,
                            double *local_p, double *cross_p)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    const shoal_link_cost_t *out = shoal_algo_inter(team);
    double loops = bytes / l > move ? ceil(bytes / l / move) : 1;
    double link = wire / hs / out->bw_Bps, ring = out->lat_s + link / l;
    *local_p = hier_local_cost(team, 2 * (l - 1) * loops, 2 * (l - 1) / l * bytes);
    double step = link > 1.5 * ring ? link : 1.5 * ring;
    *cross_p = hs > 1 ? 2 * (hs - 1) * step : 0;
}

/* The all-reduce of bytes whose rails carry wire bytes across hosts, in
 * pieces pipeline pieces: the slowest lane's time for every piece but
 * one, plus the pipeline's fill and drain (one piece through both). */
static double hier_pipe_cost(const shoal_team_t *team, double bytes, double wire, int pieces)
{
    double local, cross;
    double move = pieces > 1 ? HIER_LOCAL_MOVE : (double)team->chunk_size;
    hier_piece_cost(team, bytes / pieces, wire / pieces, move, &local, &cross);
    double slow = local > cross ? local : cross;
    return (pieces - 1) * slow + local + cross;
}

/* The number of pipeline pieces that costs least: the same on every rank,
 * from figures every rank holds alike. Each piece keeps at least a slot's
 * worth per rail. SHOAL_HIER_PIPE forces a number. */
static int hier_pipe(const shoal_team_t *team, double bytes, double wire)
{
    int forced = shoal_config_get()->algo.hier_pipe;
    if (forced > 0)
        return forced;
    double least = 0, piece_min = (double)team->chunk_size * team->cluster.max_local;
    int best = 1;
    for (int k = 1; k <= HIER_PIPE_MAX && (k == 1 || bytes / k >= piece_min); k++) {
        double t = hier_pipe_cost(team, bytes, wire, k);
        if (k == 1 || t < least) {
            least = t;
            best = k;
        }
    }
    return best;
}

/* The all-reduce of bytes whose rails carry wire bytes across hosts. */
static double hier_allreduce_cost_of(const shoal_team_t *team, double bytes, double wire)
{
    return hier_pipe_cost(team, bytes, wire, hier_pipe(team, bytes, wire));
}

static double hier_allreduce_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double bytes = shoal_algo_bytes(args, args->count);
    return hier_allreduce_cost_of(team, bytes, bytes);
}

static shoal_status_t hier_allreduce_plan(shoal_team_t *team,
                                          const shoal_coll_args_t *args, shoal_plan_t *plan)
{
    double bytes = shoal_algo_bytes(args, args->count);
    shoal_status_t s = hier_plan_common(team, args, 1, plan);
    plan->pipe = hier_pipe(team, bytes, bytes);
    return s;
}

/* A compressed run: zero the residuals of the values of piece [qo, qo +
 * ql) outside this rank's segments of it [qo + off, + len), which it does
 * not quantise. */
static void hier_codec_residual(shoal_prims_t *p, size_t qo, size_t ql, size_t off, size_t len)
{
    shoal_team_t *team = p->team;
    if (!p->residual)
        return;
    team->kern->zero(team, p->residual + qo, off * sizeof(float));
    team->kern->zero(team, p->residual + qo + off + len, (ql - off - len) * sizeof(float));
}

/* One lane of the pipelined all-reduce: its moves (stage, endpoints,
 * AVG), where its current ring schedule stands, the step of the lane's
 * order it is at, and the ring of that step. */
typedef struct {
    shoal_prims_t p;
    shoal_ring_cur_t cur;
    int at;
    shoal_ring_t ring;
} hier_lane_t;

/* What the all-reduce's pieces have in common: the call, the local ring,
 * the pipeline's cut and this rank's rails. */
typedef struct {
    const shoal_plan_t *plan;
    size_t pipe_elems; /* elements per pipeline piece, the last may be short */
    size_t local_elems; /* elements per move of the local lane */
    int pieces, first, end;
    const float *addend; /* error feedback's, of the whole tensor, or NULL */
} hier_pipe_t;

/* Pipeline piece k: [*qo_p, *qo_p + *ql_p). */
static void pipe_piece(const hier_pipe_t *pp, int k, size_t *qo_p, size_t *ql_p)
{
    size_t count = pp->plan->args.count, qo = (size_t)k * pp->pipe_elems;
    *qo_p = qo < count ? qo : count;
    *ql_p = count - *qo_p < pp->pipe_elems ? count - *qo_p : pp->pipe_elems;
}

/* The local lane's step i: piece *k_p's reduce-scatter (1) or all-gather
 * (0), in the order RS0, RS1, AG0, RS2, AG1, ..., RS(P-1), AG(P-2), AG(P-1). */
static int local_order(int pieces, int i, int *k_p)
{
    if (i == 0 || (i < 2 * pieces - 1 && i % 2)) {
        *k_p = (i + 1) / 2;
        return 1;
    }
    *k_p = i == 2 * pieces - 1 ? pieces - 1 : i / 2 - 1;
    return 0;
}

/* One move of the local lane; *done_p: the pieces whose reduce-scatter it
 * has finished. SHOAL_INPROGRESS when it cannot move now (an all-gather
 * waits for its piece's rails in *rails_done). */
static shoal_status_t local_move(const hier_pipe_t *pp, hier_lane_t *ln, int rails_done,
                                 int *done_p)
{
    const shoal_plan_t *plan = pp->plan;
    const shoal_coll_args_t *a = &plan->args;
    size_t es = plan->esize, qo, ql, off, len;
    int k, rs = local_order(pp->pieces, ln->at, &k);
    if (!rs && rails_done <= k)
        return SHOAL_INPROGRESS;
    pipe_piece(pp, k, &qo, &ql);
    ln->ring = plan->ring;
    ln->ring.total = ql;
    char *dst = (char *)a->recvbuf + qo * es;
    shoal_status_t s;
    /* Error feedback's addend joins the input as its reduce-scatter reads
     * it (the piece's moves count from the piece); the host sums hold it
     * from then on. */
    ln->p.addend = rs && pp->addend ? pp->addend + qo : NULL;
    if (rs) {
        shoal_ring_block(&ln->ring, ln->ring.me, &off, &len);
        s = shoal_ring_rs_step(&ln->p, &ln->ring, (const char *)a->sendbuf + qo * es,
                               dst + off * es, pp->local_elems, &ln->cur);
    } else {
        s = shoal_ring_ag_step(&ln->p, &ln->ring, NULL, dst, pp->local_elems, &ln->cur);
    }
    if (s == SHOAL_OK && ln->cur.done) {
        if (rs)
            *done_p = k + 1;
        ln->cur = (shoal_ring_cur_t){0};
        ln->at++;
    }
    return s;
}

/* One move of the rail lane (step i: piece i / nrails, its rail first +
 * i % nrails); *done_p: the pieces whose rails it has finished. It waits
 * (SHOAL_INPROGRESS) for the local lane's reduce-scatter of the piece. */
static shoal_status_t rail_move(const hier_pipe_t *pp, hier_lane_t *ln, int rs_done,
                                int *done_p)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    size_t es = plan->esize, qo, ql, so, sl;
    int nrails = pp->end - pp->first, k = ln->at / nrails, j = pp->first + ln->at % nrails;
    if (rs_done <= k)
        return SHOAL_INPROGRESS;
    pipe_piece(pp, k, &qo, &ql);
    if (ln->cur.k == 0 && ln->cur.at == 0 && !ln->cur.done && j == pp->first) {
        /* A piece starts: the values of it this rank quantises are its
         * segments'. */
        shoal_ring_t piece = plan->ring;
        size_t off, len;
        piece.total = ql;
        shoal_ring_block(&piece, piece.me, &off, &len);
        hier_codec_residual(&ln->p, qo, ql, off, len);
    }
    shoal_ring_rail(team, c->rail_ranks, j, &ln->ring);
    hier_seg(c, ql, j, plan->ring.align, &so, &sl);
    char *seg = (char *)plan->args.recvbuf + (qo + so) * es;
    shoal_status_t s = shoal_ring_allreduce_step(&ln->p, &ln->ring, seg, seg, sl, qo + so,
                                                 plan->stage_elems, &ln->cur);
    if (s == SHOAL_OK && ln->cur.done) {
        ln->cur = (shoal_ring_cur_t){0};
        if (++ln->at % nrails == 0)
            *done_p = k + 1;
    }
    return s;
}

static shoal_status_t hier_allreduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_cluster_t *c = &team->cluster;
    const shoal_ring_t *local = &plan->ring;
    /* Pieces start on the segments' alignment, so that a codec's blocks
     * stay where the whole tensor has them. */
    size_t align = local->align ? local->align : 16;
    int pieces = plan->pipe > 0 ? plan->pipe : 1;
    size_t pipe_elems = (a->count + (size_t)pieces - 1) / (size_t)pieces;
    pipe_elems = (pipe_elems + align - 1) / align * align;
    if (pipe_elems == 0)
        pipe_elems = align;
    size_t le = plan->piece_elems;
    if (pieces > 1 && le > HIER_LOCAL_MOVE / plan->esize)
        le = HIER_LOCAL_MOVE / plan->esize;
    hier_pipe_t pp = {.plan = plan, .pipe_elems = pipe_elems, .local_elems = le,
                      .pieces = (int)((a->count + pipe_elems - 1) / pipe_elems)};
    if (pp.pieces == 0)
        pp.pieces = 1;
    shoal_cluster_owned_rails(c, local->host, local->me, &pp.first, &pp.end);

    /* The rails run the plan's stage (AVG finished there); the phases
     * inside the host move elements as they are. */
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    hier_lane_t lanes[2] = {{.p = *p}, {.p = *p}};
    hier_lane_t *loc = &lanes[0], *rail = &lanes[1];
    loc->p.st = &shoal_stage_plain;
    loc->p.avg_n = 0;
    rail->p.avg_n = a->op == SHOAL_AVG ? team->nranks : 0;
    loc->p.poll = rail->p.poll = 1;
    pp.addend = p->addend;
    rail->p.addend = NULL;
    int rs_done = 0, rails_done = 0, nrails = pp.end - pp.first;
    int local_steps = 2 * pp.pieces, rail_steps = pp.pieces * nrails;
    shoal_idle_t wait = {0, 0};
    shoal_status_t s = SHOAL_OK;
    while (loc->at < local_steps || rail->at < rail_steps) {
        int moved = 0;
        /* One move of each lane in turn, so neither starves the other. */
        if (loc->at < local_steps) {
            s = local_move(&pp, loc, rails_done, &rs_done);
            if (s != SHOAL_OK && s != SHOAL_INPROGRESS)
                break;
            moved |= s == SHOAL_OK;
        }
        if (rail->at < rail_steps) {
            s = rail_move(&pp, rail, rs_done, &rails_done);
            if (s != SHOAL_OK && s != SHOAL_INPROGRESS)
                break;
            moved |= s == SHOAL_OK;
        }
        s = SHOAL_OK;
        if (moved) {
            wait = (shoal_idle_t){0, 0};
        } else if ((s = shoal_prims_idle(team, p->deadline_ns, &wait)) != SHOAL_OK) {
            if (s == SHOAL_ERR_TIMEOUT)
                shoal_team_cause(team, "rank %d: the hierarchical all-reduce waited for "
                                 "its peers until the deadline", team->rank);
            break;
        }
    }
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
    plan->pipe = hier_pipe(team, shoal_algo_bytes(args, args->count),
                           (double)args->codec->ops->wire_bytes(args->codec, args->count));
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
