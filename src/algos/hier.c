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
 * The three phases run as a software pipeline over pipeline pieces
 * (hier_pipe.h; the buffer cut into plan->pipe pieces, each cut into
 * segments as above): the rail lane runs piece k's all-reduces across
 * hosts while the local lane runs piece k+1's reduce-scatter and then
 * piece k-1's all-gather (local order RS0, RS1, AG0, RS2, AG1, ...,
 * AG(P-1)). Each lane is the ring schedules driven one move at a time
 * (shoal_ring_*_step) with polling waits, so one thread keeps both kinds
 * of link busy. The number of pieces is what the cost model finds fastest
 * (hier_pipe): one where the rings across hosts would pay their latency
 * once per piece for too little data. The last piece's all-gather inside
 * the host follows its rails block by block where it can (hier_push_ok),
 * so the run does not end with a whole piece's all-gather after the last
 * byte has crossed hosts.
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
 * host), and every host all-gathers the segments; pipelined the same way,
 * the rails' chains of piece k run while the local lane scatters piece
 * k+1 (on the root's host) and all-gathers piece k-1. */
#include "algo.h"
#include "hier_pipe.h"
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

/* Every host holds max_local ranks: each rank owns one rail. */
static int hier_hosts_even(const shoal_cluster_t *c)
{
    for (int h = 0; h < c->nhosts; h++) {
        if (shoal_cluster_nlocal(c, h) != c->max_local)
            return 0;
    }
    return 1;
}

/* What the all-reduce's cost reads: the tensor's bytes and the bytes
 * its rails carry across hosts (the wire of a codec). */
typedef struct {
    double bytes, wire;
} hier_ar_shape_t;

/* Time of one pipeline piece in each lane when the all-reduce is cut into
 * pieces: the local reduce-scatter and all-gather, in moves of at most
 * SHOAL_HIER_LOCAL_MOVE (a chunk when there is one piece), and the
 * all-reduces along the rails, 2 (H-1) steps of their ring. */
static void hier_ar_piece_cost(const shoal_team_t *team, const void *ctx, int pieces,
                               double *local_p, double *cross_p, double *fill_p)
{
    const hier_ar_shape_t *sh = ctx;
    double l = team->cluster.max_local, hs = team->nhosts;
    double bytes = sh->bytes / pieces, wire = sh->wire / pieces;
    double move = pieces > 1 ? SHOAL_HIER_LOCAL_MOVE : (double)team->chunk_size;
    double loops = bytes / l > move ? ceil(bytes / l / move) : 1;
    *local_p = shoal_hier_local_cost(team, 2 * (l - 1) * loops, 2 * (l - 1) / l * bytes);
    *cross_p = hs > 1 ? 2 * (hs - 1) * shoal_hier_rail_step(team, wire) : 0;
    *fill_p = 0;
}

/* The number of pipeline pieces of the all-reduce: each keeps at least a
 * slot's worth per rail. */
static int hier_pipe(const shoal_team_t *team, double bytes, double wire)
{
    hier_ar_shape_t sh = {bytes, wire};
    return shoal_hier_pipe_choose(team, hier_ar_piece_cost, &sh, bytes,
                                  (double)team->chunk_size * team->cluster.max_local);
}

/* The all-reduce of bytes whose rails carry wire bytes across hosts. */
static double hier_allreduce_cost_of(const shoal_team_t *team, double bytes, double wire)
{
    hier_ar_shape_t sh = {bytes, wire};
    return shoal_hier_pipe_cost(team, hier_ar_piece_cost, &sh, hier_pipe(team, bytes, wire));
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

/* The last piece's gather inside the host follows its rails (pp->push)
 * where every rank owns one rail (hosts of equal size), the run is plain
 * and the last piece's rails run their ring in one loop: a rank whose rail
 * finishes a block of its segment sends it to every other rank of the
 * host, which takes it straight into its output. Without this the
 * all-gather of the last piece waits for its rails' last hop and then
 * copies the whole piece around the host while the links between hosts
 * stand idle; with it, only the last block's copies are left. All ranks
 * of a host sit at one position of every rail, so their rails finish the
 * blocks in one order, which every sender and receiver follows. A rank
 * sends once its local lane has sent the all-gather before (its ring
 * successor takes that from the same FIFO first). */
static int hier_push_ok(const shoal_hier_pipe_t *pp, const shoal_coll_args_t *a)
{
    const shoal_cluster_t *c = &pp->plan->prims.team->cluster;
    size_t qo, ql, so, sl;
    if (a->codec || c->nhosts < 2 || c->max_local < 2 || !hier_hosts_even(c))
        return 0;
    /* Segment 0 is the longest: its ring over the hosts, one loop. */
    shoal_hier_pipe_piece(pp, pp->pieces - 1, &qo, &ql);
    hier_seg(c, ql, 0, pp->plan->ring.align, &so, &sl);
    return sl <= (size_t)c->nhosts * pp->plan->stage_elems;
}

/* Block t, in the order the rails finish them, of rail j's segment of the
 * last piece: elements [*at_p, *at_p + *len_p) of the output. */
static void hier_push_block(const shoal_hier_pipe_t *pp, const shoal_prims_t *p, int j, int t,
                            size_t *at_p, size_t *len_p)
{
    const shoal_plan_t *plan = pp->plan;
    const shoal_cluster_t *c = &p->team->cluster;
    size_t qo, ql, so, sl, off;
    shoal_hier_pipe_piece(pp, pp->pieces - 1, &qo, &ql);
    hier_seg(c, ql, j, plan->ring.align, &so, &sl);
    shoal_ring_allreduce_finished(p, c->nhosts, c->host_of[p->team->rank], sl,
                                  plan->stage_elems, c->nhosts - 1 + t, &off, len_p);
    *at_p = qo + so + off;
}

/* The local lane's last step with pp->push: block after block, in the
 * rails' order, each other rank's block of its segment taken into the
 * output; cur.done once all are in. */
static shoal_status_t ar_push_recv(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln)
{
    const shoal_ring_t *local = &pp->plan->ring;
    const shoal_cluster_t *c = local->cluster;
    char *dst = pp->plan->args.recvbuf;
    size_t es = pp->plan->esize, at, len;
    int first, end;
    while (ln->push_t < c->nhosts) {
        int q = ln->push_q;
        if (q >= local->n) {
            ln->push_t++;
            ln->push_q = 0;
            continue;
        }
        shoal_cluster_owned_rails(c, local->host, q, &first, &end);
        hier_push_block(pp, &ln->p, first, ln->push_t, &at, &len);
        if (q == local->me || len == 0) {
            ln->push_q++;
            continue;
        }
        ln->p.send_ep = NULL;
        ln->p.recv_ep = shoal_team_ep(ln->p.team, local->ranks[q]);
        shoal_status_t s = shoal_prim_recv(&ln->p, dst + at * es, len * es);
        if (s == SHOAL_OK)
            ln->push_q++;
        return s;
    }
    ln->cur.done = 1;
    return SHOAL_OK;
}

/* The rail lane's sends of the last piece with pp->push: the next of the
 * finished blocks (the rail has finished that many) to the next rank of
 * the host; after the last block, each of them flushed (*all_p then).
 * SHOAL_INPROGRESS when no block is ready or a slot is not free. */
static shoal_status_t ar_push_send(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                   int finished, int *all_p)
{
    const shoal_ring_t *local = &pp->plan->ring;
    const shoal_cluster_t *c = local->cluster;
    const char *src = pp->plan->args.recvbuf;
    size_t es = pp->plan->esize, at, len;
    *all_p = 0;
    while (ln->push_t <= c->nhosts) {
        int q = ln->push_q;
        if (q >= local->n) {
            ln->push_t++;
            ln->push_q = 0;
            continue;
        }
        if (q == local->me) {
            ln->push_q++;
            continue;
        }
        ln->p.recv_ep = NULL;
        ln->p.send_ep = shoal_team_ep(ln->p.team, local->ranks[q]);
        shoal_status_t s;
        if (ln->push_t == c->nhosts) {
            s = shoal_prim_flush(&ln->p);
        } else {
            if (ln->push_t >= finished)
                return SHOAL_INPROGRESS;
            hier_push_block(pp, &ln->p, pp->first, ln->push_t, &at, &len);
            s = len ? shoal_prim_send(&ln->p, src + at * es, len * es) : SHOAL_OK;
        }
        if (s == SHOAL_OK)
            ln->push_q++;
        return s;
    }
    *all_p = 1;
    return SHOAL_OK;
}

/* One move of the all-reduce's local lane: piece k's reduce-scatter
 * (the first part of shoal_hier_local_order) or all-gather (the second,
 * once its rails are done: rails_done > k). */
static shoal_status_t ar_local_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                    int rails_done)
{
    const shoal_plan_t *plan = pp->plan;
    const shoal_coll_args_t *a = &plan->args;
    size_t es = plan->esize, qo, ql, off, len;
    int k, rs = shoal_hier_local_order(pp->pieces, ln->at, &k);
    int pushed = pp->push && !rs && k == pp->pieces - 1;
    if (!rs && !pushed && rails_done <= k)
        return SHOAL_INPROGRESS;
    shoal_hier_pipe_piece(pp, k, &qo, &ql);
    ln->ring = plan->ring;
    ln->ring.total = ql;
    char *dst = (char *)a->recvbuf + qo * es;
    shoal_status_t s;
    /* Error feedback's addend joins the input as its reduce-scatter reads
     * it (the piece's moves count from the piece); the host sums hold it
     * from then on. */
    ln->p.addend = rs && pp->addend ? pp->addend + qo : NULL;
    if (pushed) {
        s = ar_push_recv(pp, ln);
    } else if (rs) {
        shoal_ring_block(&ln->ring, ln->ring.me, &off, &len);
        s = shoal_ring_rs_step(&ln->p, &ln->ring, (const char *)a->sendbuf + qo * es,
                               dst + off * es, pp->local_elems, &ln->cur);
    } else {
        s = shoal_ring_ag_step(&ln->p, &ln->ring, NULL, dst, pp->local_elems, &ln->cur);
    }
    if (s == SHOAL_OK && ln->cur.done) {
        if (rs)
            ln->done = k + 1;
        ln->cur = (shoal_ring_cur_t){0};
        /* With pp->push the rail lane's sends wait for every step but
         * the last: done past the pieces says so. */
        if (++ln->at == 2 * pp->pieces - 1 && pp->push)
            ln->done = pp->pieces + 1;
    }
    return s;
}

/* One step of the all-reduce's rails (step i: piece i / nrails, its
 * rail first + i % nrails), once the piece's local reduce-scatter is done
 * (rs_done > k). */
static shoal_status_t ar_rail_step(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                   int rs_done)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    size_t es = plan->esize, qo, ql, so, sl;
    int k = ln->at / pp->nrails, j = pp->first + ln->at % pp->nrails;
    if (rs_done <= k)
        return SHOAL_INPROGRESS;
    shoal_hier_pipe_piece(pp, k, &qo, &ql);
    if (!ln->begun) {
        /* A piece starts: the values of it this rank quantises are its
         * segments'. */
        shoal_ring_t piece = plan->ring;
        size_t off, len;
        piece.total = ql;
        shoal_ring_block(&piece, piece.me, &off, &len);
        hier_codec_residual(&ln->p, qo, ql, off, len);
        ln->begun = 1;
    }
    shoal_ring_rail(team, c->rail_ranks, j, &ln->ring);
    hier_seg(c, ql, j, plan->ring.align, &so, &sl);
    char *seg = (char *)plan->args.recvbuf + (qo + so) * es;
    shoal_status_t s = shoal_ring_allreduce_step(&ln->p, &ln->ring, seg, seg, sl, qo + so,
                                                 plan->stage_elems, &ln->cur);
    if (s == SHOAL_OK && ln->cur.done) {
        ln->cur = (shoal_ring_cur_t){0};
        if (++ln->at % pp->nrails == 0) {
            ln->done = k + 1;
            ln->begun = 0;
        }
    }
    return s;
}

/* One move of the all-reduce's rail lane: a step of its rails and, with
 * pp->push, once the local lane allows (rs_done past the pieces), the
 * sends of the last piece's finished blocks when the rails cannot move,
 * then those left after them (one step more). */
static shoal_status_t ar_rail_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                   int rs_done)
{
    int n = pp->plan->prims.team->cluster.nhosts, last = pp->pieces - 1, all = 0;
    if (!pp->push)
        return ar_rail_step(pp, ln, rs_done);
    if (ln->at > last) {
        shoal_status_t s = rs_done > pp->pieces ? ar_push_send(pp, ln, n, &all)
                                                : SHOAL_INPROGRESS;
        if (s == SHOAL_OK && all)
            ln->at++;
        return s;
    }
    shoal_status_t s = ar_rail_step(pp, ln, rs_done);
    if (s != SHOAL_INPROGRESS || ln->at != last || rs_done <= pp->pieces)
        return s;
    /* The ring's move k >= n-1 finishes one block each (one loop). */
    int finished = ln->cur.at ? n : ln->cur.k >= n ? ln->cur.k - n + 1 : 0;
    return ar_push_send(pp, ln, finished, &all);
}

static shoal_status_t hier_allreduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_ring_t *local = &plan->ring;
    /* Pieces start on the segments' alignment, so that a codec's blocks
     * stay where the whole tensor has them. */
    shoal_hier_pipe_t pp;
    shoal_hier_pipe_init(&pp, plan, a->count, local->align);
    shoal_cluster_owned_rails(&team->cluster, local->host, local->me, &pp.first, &pp.end);
    pp.nrails = pp.end - pp.first;
    pp.addend = p->addend;
    pp.push = hier_push_ok(&pp, a);

    /* The rails run the plan's stage (AVG finished there); the phases
     * inside the host move elements as they are. */
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    shoal_hier_lane_t lanes[2];
    shoal_hier_lanes_init(&pp, lanes);
    shoal_hier_lane_t *loc = &lanes[0], *rail = &lanes[1];
    loc->p.st = &shoal_stage_plain;
    loc->p.avg_n = 0;
    loc->move = ar_local_move;
    loc->steps = 2 * pp.pieces;
    rail->p.avg_n = a->op == SHOAL_AVG ? team->nranks : 0;
    rail->p.addend = NULL;
    rail->move = ar_rail_move;
    rail->steps = pp.pieces * pp.nrails + pp.push;
    return shoal_hier_pipe_drive(&pp, lanes, "all-reduce");
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

/* Time of one pipeline piece of the broadcast in each lane: the scatter
 * on the root's host and the local all-gather, in moves of at most
 * SHOAL_HIER_LOCAL_MOVE (a chunk when there is one piece), and the chains
 * along the rails, which together move the piece once over each host's
 * link; the chains fill once, H-1 hops of a slot's piece. */
static void hier_bcast_piece_cost(const shoal_team_t *team, const void *ctx, int pieces,
                                  double *local_p, double *cross_p, double *fill_p)
{
    double l = team->cluster.max_local, hs = team->nhosts;
    double bytes = *(const double *)ctx / pieces;
    const shoal_link_cost_t *out = shoal_algo_inter(team);
    double move = pieces > 1 ? SHOAL_HIER_LOCAL_MOVE : (double)team->chunk_size;
    double loops = bytes / l > move ? ceil(bytes / l / move) : 1;
    double hop = bytes / l < (double)team->chunk_size ? bytes / l : (double)team->chunk_size;
    *local_p = shoal_hier_local_cost(team, 2 * (l - 1) * loops, 2 * (l - 1) / l * bytes);
    *cross_p = hs > 1 ? bytes / out->bw_Bps : 0;
    *fill_p = hs > 1 ? (hs - 1) * (out->lat_s + hop / out->bw_Bps) : 0;
}

/* The broadcast's pipeline pieces: each keeps at least a slot's worth per
 * rail. */
static int hier_bcast_pipe(const shoal_team_t *team, double bytes)
{
    return shoal_hier_pipe_choose(team, hier_bcast_piece_cost, &bytes, bytes,
                                  (double)team->chunk_size * team->cluster.max_local);
}

static double hier_bcast_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double bytes = shoal_algo_bytes(args, args->count);
    return shoal_hier_pipe_cost(team, hier_bcast_piece_cost, &bytes,
                                hier_bcast_pipe(team, bytes));
}

static shoal_status_t hier_bcast_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    if (args->root < 0 || args->root >= team->nranks)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = hier_plan_common(team, args, 0, plan);
    plan->pipe = hier_bcast_pipe(team, shoal_algo_bytes(args, args->count));
    return s;
}

/* The broadcast's scatter of piece [qo, qo + ql) on the root's host, one
 * slot's piece per move: the root sends each segment that another rank
 * owns to it, in segment order, and that rank receives its own (cur.k:
 * the segment, cur.at: the offset in it). The root first copies the piece
 * into its output. SHOAL_OK with cur.done once it is over. */
static shoal_status_t bcast_scatter_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                         size_t qo, size_t ql)
{
    const shoal_plan_t *plan = pp->plan;
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    int hr = c->host_of[a->root], me = team->rank, root = me == a->root;
    size_t es = plan->esize;
    char *dst = (char *)a->recvbuf + qo * es;
    if (!ln->begun) {
        if (root && a->recvbuf != a->sendbuf)
            shoal_move(team, dst, (const char *)a->sendbuf + qo * es, ql * es);
        ln->begun = 1;
    }
    if (c->host_of[me] != hr) {
        ln->cur.done = 1;
        return SHOAL_OK;
    }
    while (ln->cur.k < c->max_local) {
        int j = ln->cur.k;
        int owner = c->rail_ranks[(size_t)j * (size_t)c->nhosts + (size_t)hr];
        size_t so, sl;
        hier_seg(c, ql, j, 0, &so, &sl);
        if (owner == a->root || (!root && owner != me) || ln->cur.at >= sl) {
            ln->cur.k++;
            ln->cur.at = 0;
            continue;
        }
        size_t at = so + ln->cur.at;
        size_t len = sl - ln->cur.at < plan->piece_elems ? sl - ln->cur.at : plan->piece_elems;
        shoal_status_t s;
        if (root) {
            ln->p.send_ep = shoal_team_ep(team, owner);
            ln->p.recv_ep = NULL;
            s = shoal_prim_send(&ln->p, dst + at * es, len * es);
        } else {
            ln->p.send_ep = NULL;
            ln->p.recv_ep = shoal_team_ep(team, a->root);
            s = shoal_prim_recv(&ln->p, dst + at * es, len * es);
        }
        if (s == SHOAL_OK)
            ln->cur.at += len;
        return s;
    }
    ln->cur.done = 1;
    return SHOAL_OK;
}

/* One move of the broadcast's local lane: piece k's scatter (the first
 * part of shoal_hier_local_order) or its all-gather inside the host (the
 * second, once its chains are done: rails_done > k). */
static shoal_status_t bcast_local_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                       int rails_done)
{
    const shoal_plan_t *plan = pp->plan;
    size_t es = plan->esize, qo, ql;
    int k, sc = shoal_hier_local_order(pp->pieces, ln->at, &k);
    if (!sc && rails_done <= k)
        return SHOAL_INPROGRESS;
    shoal_hier_pipe_piece(pp, k, &qo, &ql);
    shoal_status_t s;
    if (sc) {
        s = bcast_scatter_move(pp, ln, qo, ql);
    } else {
        ln->ring = plan->ring;
        ln->ring.total = ql;
        s = shoal_ring_ag_step(&ln->p, &ln->ring, NULL, (char *)plan->args.recvbuf + qo * es,
                               pp->local_elems, &ln->cur);
    }
    if (s == SHOAL_OK && ln->cur.done) {
        if (sc)
            ln->done = k + 1;
        ln->cur = (shoal_ring_cur_t){0};
        ln->begun = 0;
        ln->at++;
    }
    return s;
}

/* One move of the broadcast's rail lane (step i: piece i / nrails, its
 * rail first + i % nrails): the piece's segment of the rail along a chain
 * from the root's host, one slot's piece per move (cur.at: the offset in
 * the segment), then its sends flushed. On the root's host it waits for
 * the piece's scatter (scattered > k). */
static shoal_status_t bcast_rail_move(const shoal_hier_pipe_t *pp, shoal_hier_lane_t *ln,
                                      int scattered)
{
    const shoal_plan_t *plan = pp->plan;
    shoal_team_t *team = ln->p.team;
    const shoal_cluster_t *c = &team->cluster;
    size_t es = plan->esize, qo, ql, so, sl;
    int k = ln->at / pp->nrails, j = pp->first + ln->at % pp->nrails;
    if (scattered <= k)
        return SHOAL_INPROGRESS;
    shoal_hier_pipe_piece(pp, k, &qo, &ql);
    hier_seg(c, ql, j, 0, &so, &sl);
    shoal_ring_rail(team, c->rail_ranks, j, &ln->ring);
    int n = ln->ring.n, pos = (ln->ring.me - c->host_of[plan->args.root] + n) % n;
    shoal_ring_bind(&ln->p, &ln->ring);
    if (pos == 0)
        ln->p.recv_ep = NULL;
    if (pos == n - 1)
        ln->p.send_ep = NULL;
    char *buf = (char *)plan->args.recvbuf + (qo + so) * es;
    shoal_status_t s;
    size_t off = ln->cur.at;
    if (n == 1) {
        ln->cur.done = 1;
        s = SHOAL_OK;
    } else if (off >= sl) {
        s = shoal_prim_flush(&ln->p);
        ln->cur.done = s == SHOAL_OK;
    } else {
        size_t len = sl - off < plan->piece_elems ? sl - off : plan->piece_elems;
        if (!ln->p.recv_ep)
            s = shoal_prim_send(&ln->p, buf + off * es, len * es);
        else if (ln->p.send_ep)
            s = shoal_prim_recv_copy_send(&ln->p, buf + off * es, len * es);
        else
            s = shoal_prim_recv(&ln->p, buf + off * es, len * es);
        if (s == SHOAL_OK)
            ln->cur.at += len;
    }
    if (s == SHOAL_OK && ln->cur.done) {
        ln->cur = (shoal_ring_cur_t){0};
        if (++ln->at % pp->nrails == 0)
            ln->done = k + 1;
    }
    return s;
}

/* The root's sends of the scatter, flushed before the call returns. */
static shoal_status_t bcast_flush_scatter(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t p = plan->prims;
    const shoal_cluster_t *c = &p.team->cluster;
    int hr = c->host_of[a->root];
    shoal_status_t s = SHOAL_OK;
    if (p.team->rank != a->root)
        return SHOAL_OK;
    p.recv_ep = NULL;
    for (int j = 0; j < c->max_local && s == SHOAL_OK; j++) {
        int owner = c->rail_ranks[(size_t)j * (size_t)c->nhosts + (size_t)hr];
        p.send_ep = owner == a->root ? NULL : shoal_team_ep(p.team, owner);
        s = shoal_prim_flush(&p);
    }
    return s;
}

static shoal_status_t hier_bcast_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_ring_t *local = &plan->ring;
    shoal_hier_pipe_t pp;
    shoal_hier_pipe_init(&pp, plan, a->count, 0);
    shoal_cluster_owned_rails(&team->cluster, local->host, local->me, &pp.first, &pp.end);
    pp.nrails = pp.end - pp.first;

    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    shoal_hier_lane_t lanes[2];
    shoal_hier_lanes_init(&pp, lanes);
    lanes[0].move = bcast_local_move;
    lanes[0].steps = 2 * pp.pieces;
    lanes[1].move = bcast_rail_move;
    lanes[1].steps = pp.pieces * pp.nrails;
    shoal_status_t s = shoal_hier_pipe_drive(&pp, lanes, "broadcast");
    return s == SHOAL_OK ? bcast_flush_scatter(plan) : s;
}

const shoal_algo_ops_t shoal_hier_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "hier",
    .cost = hier_bcast_cost,
    .plan = hier_bcast_plan,
    .run = hier_bcast_run,
};
