/* Two-shot all-reduce over a stage (stage.h): a direct exchange that
 * brings every block to its owner, then the ring's all-gather. With the
 * codec stage ("twoshot-codec", int8, fp32 SUM and AVG) each contribution
 * is quantised once on its way to the value's owner, and the owner's sum
 * once more; the ring requantises a partial sum at every hop instead, so
 * its error grows with the number of ranks and this one's does not.
 *
 * Pieces and owners. The tensor is walked in the loops of the ring
 * all-reduce (ring_team.c): a loop covers n * piece_elems values cut into
 * n blocks of whole codec blocks, and block b of every loop belongs to ring
 * position b. Every piece starts at a multiple of the codec block and
 * holds whole blocks except at the tensor's end, so it encodes exactly as
 * the whole tensor would (codec.h).
 *
 * Reduce (direct exchange, one piece per step): in step k = 1 .. n-1 of a
 * loop, position r encodes its block r+k (send_enc, this rank's residual
 * of those values written) and sends it straight to position r+k, and
 * receives block r from position r-k, decodes it and adds it in fp32 to
 * its own exact values (recv_dec_reduce). Each step is a perfect matching,
 * so the sends never wait on a receive of the same step, and the owner
 * adds the n-1 contributions in a fixed order, r-1 first: the sum does
 * not depend on which piece arrived first. From the second loop on, the
 * sends went out during the loop before (twoshot_run_loops), so that
 * encoding them overlaps the wire.
 *
 * All-gather: the owner quantises its sum once into the send slot to its
 * ring successor and decodes that wire into its result (enc_copy_send; its
 * residual there is sum - decode, its own contribution having travelled
 * exactly), and the wire goes round unchanged (shoal_ring_gather_run,
 * shared with the ring): every rank decodes the very same bytes, so
 * all end with identical bits. AVG is the decoded sum divided by n.
 *
 * Error feedback. Every rank quantises every value exactly once (others'
 * blocks on the way out, its own block as a sum), so one call writes the
 * whole residual array of count floats on each rank. The last call's
 * residual (the stage's addend) joins the input where it is read: in the
 * encode of others' blocks, and in the first addition to its own block. Summed over the
 * ranks, the residuals are the exact sum minus the decoded sum (for AVG:
 * minus n times the result), up to the fp32 rounding of the owner's sum.
 *
 * Shared-scale codecs (ternary) have no two-shot: their integer sums are
 * exact in the ring already (the core refuses the combination). A rank
 * alone runs the codec ring's single-rank path: its input, exactly. */
#include "algo.h"
#include "stage.h"

#include "base/clock.h"

/* Every peer this rank sent to: nothing it posted may stay behind. */
static shoal_status_t twoshot_flush(shoal_prims_t *p, const shoal_ring_t *ring)
{
    shoal_status_t s = SHOAL_OK;
    for (int k = 1; k < ring->n && s == SHOAL_OK; k++) {
        p->send_ep = shoal_team_ep(p->team, ring->ranks[(ring->me + k) % ring->n]);
        s = shoal_prim_flush(p);
    }
    return s;
}

/* The loop at base: its real values and their block size. */
static size_t twoshot_loop(const shoal_prims_t *p, const shoal_ring_t *ring, size_t base,
                           size_t count, size_t piece_elems, size_t *bs_p)
{
    size_t loop = (size_t)ring->n * piece_elems;
    size_t real = count - base < loop ? count - base : loop;
    *bs_p = shoal_ring_loop_bs(real, ring->n, p->st->align(p, 1), piece_elems);
    return real;
}

/* The loop at base's piece of position r + k, encoded (error feedback's
 * addend with it) and sent there. */
static shoal_status_t twoshot_send(shoal_prims_t *p, const shoal_ring_t *ring, const char *src,
                                   size_t base, size_t count, size_t piece_elems, int k,
                                   const float *addend)
{
    int n = ring->n, q = (ring->me + k) % n;
    size_t bs, off, len, real = twoshot_loop(p, ring, base, count, piece_elems, &bs);
    shoal_ring_loop_block(real, bs, q, &off, &len);
    p->send_ep = shoal_team_ep(p->team, ring->ranks[q]);
    p->addend = addend;
    shoal_status_t s = p->st->send(p, src + (base + off) * p->esize, base + off, len);
    p->addend = NULL;
    return s;
}

/* The loops one after the other; each loop's pieces for the other ranks
 * go out during the loop before it: to r+2 .. r+n-1 (whose links carry
 * nothing else) once its sum has gone out, to r+1 after the gather's last
 * forward on that link, so each link carries its pieces in the order its
 * receiver takes them. Their encoding runs while the gather's wire is on
 * its way, and their bytes follow it without a gap. */
static shoal_status_t twoshot_run_loops(shoal_prims_t *p, const shoal_ring_t *ring,
                                        const char *src, char *dst, size_t count,
                                        size_t piece_elems)
{
    const shoal_stage_ops_t *st = p->st;
    const float *addend = p->addend;
    int n = ring->n, r = ring->me;
    size_t es = p->esize, loop = (size_t)n * piece_elems;
    shoal_status_t s = SHOAL_OK;
    for (size_t base = 0; base < count && s == SHOAL_OK; base += loop) {
        size_t bs, off, len, at, next = base + loop;
        size_t real = twoshot_loop(p, ring, base, count, piece_elems, &bs);
        int more = next < count;
#define PIECE(b) (shoal_ring_loop_block(real, bs, (b), &off, &len), base + off)
        for (int k = 1; k < n && s == SHOAL_OK; k++) {
            if (base == 0)
                s = twoshot_send(p, ring, src, base, count, piece_elems, k, addend);
            if (s != SHOAL_OK)
                break;
            /* The first contribution joins this rank's input (and the
             * addend, error feedback's, with it); the others the partial
             * sum in dst, which holds them already. */
            p->recv_ep = shoal_team_ep(p->team, ring->ranks[(r - k + n) % n]);
            at = PIECE(r);
            p->addend = k == 1 ? addend : NULL;
            s = st->recv_reduce(p, k == 1 ? src + at * es : dst + at * es, dst + at * es, at,
                                len);
        }
        p->addend = NULL;
        if (s != SHOAL_OK)
            break;
        shoal_ring_bind(p, ring);
        at = PIECE(r);
#undef PIECE
        s = st->copy_send(p, dst + at * es, dst + at * es, at, len);
        for (int k = 2; more && k < n && s == SHOAL_OK; k++)
            s = twoshot_send(p, ring, src, next, count, piece_elems, k, addend);
        shoal_ring_bind(p, ring);
        if (s == SHOAL_OK)
            s = shoal_ring_gather_hops(p, ring, dst, 0, base, real, bs, 0, 1, n - 1);
        if (s == SHOAL_OK && more)
            s = twoshot_send(p, ring, src, next, count, piece_elems, 1, addend);
        shoal_ring_bind(p, ring);
        if (s == SHOAL_OK)
            s = shoal_ring_gather_hops(p, ring, dst, 0, base, real, bs, 0, n - 1, n);
    }
    p->addend = addend;
    return s;
}

static shoal_status_t twoshot_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    const shoal_ring_t *ring = &plan->ring;
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    if (ring->n == 1) {
        p->st->alone(p, a->sendbuf, a->recvbuf, 0, a->count);
        return SHOAL_OK;
    }
    /* The stage's working memory for a received piece before it is added. */
    size_t tmp_bytes = p->st->tmp_bytes(p, plan->stage_elems);
    shoal_status_t s = SHOAL_OK;
    if (tmp_bytes)
        s = shoal_plan_scratch(plan, tmp_bytes, &p->tmp);
    if (s == SHOAL_OK)
        s = twoshot_run_loops(p, ring, a->sendbuf, a->recvbuf, a->count, plan->stage_elems);
    return s == SHOAL_OK ? twoshot_flush(p, ring) : s;
}

static shoal_status_t twoshot_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                   shoal_plan_t *plan)
{
    shoal_status_t s = shoal_codec_flat_plan(team, args, plan);
    shoal_prims_t *p = &plan->prims;
    if (s == SHOAL_OK)
        shoal_plan_reserve(plan, p->st->tmp_bytes(p, plan->stage_elems));
    return s;
}

/* The compressed reduce-scatter's two-shot (codec_select.c): the direct
 * exchange above on the blocks of the reduce-scatter, without the
 * all-gather, as a stepped schedule (algo.h) that the hierarchical
 * reduce-scatter's rails also run. In step k of a piece, position r
 * encodes its piece of block r+k (writing those values' residual) and
 * sends it to position r+k (move 2k-2), and receives its own block's piece
 * from position r-k, decodes it and adds it in fp32 to its own exact
 * values (move 2k-1; the addend joins them at the first), r-1's first: a
 * fixed order, whatever arrived first. Its own values were not quantised:
 * their residual is 0. AVG divides the sum once it is complete. */
static size_t twoshot_index(const shoal_ring_t *ring, int q, size_t stride, size_t first,
                            size_t off)
{
    int rank = shoal_ring_block_rank(ring, q);
    return (rank < 0 ? 0 : (size_t)rank * stride) + first + off;
}

shoal_status_t shoal_twoshot_rs_step(shoal_prims_t *p, const shoal_ring_t *ring,
                                     const char *src, char *dst, size_t stride, size_t first,
                                     size_t piece_elems, shoal_ring_cur_t *cur)
{
    const shoal_stage_ops_t *st = p->st;
    shoal_team_t *team = p->team;
    const float *addend = p->addend;
    int n = ring->n, me = ring->me, k = cur->k / 2 + 1;
    size_t es = p->esize, off = cur->at, at, len;
    shoal_status_t s = SHOAL_OK;
    if (n == 1) {
        len = shoal_ring_piece(ring, me, 0, (size_t)-1, &at);
        st->alone(p, src + at * es, dst, twoshot_index(ring, me, stride, first, 0), len);
        cur->done = 1;
        return SHOAL_OK;
    }
    if (!cur->end)
        cur->end = shoal_ring_max_len(ring) + 1;
    if (off >= cur->end - 1) {
        /* Every peer this rank sent to: nothing it posted may stay behind. */
        for (int q = 1; q < n && s == SHOAL_OK; q++) {
            p->send_ep = shoal_team_ep(team, ring->ranks[(me + q) % n]);
            s = shoal_prim_flush(p);
        }
        cur->done = s == SHOAL_OK;
        return s;
    }
    if (cur->k % 2 == 0) {
        int to = (me + k) % n;
        p->send_ep = shoal_team_ep(team, ring->ranks[to]);
        len = shoal_ring_piece(ring, to, off, piece_elems, &at);
        s = st->send(p, src + at * es, twoshot_index(ring, to, stride, first, off), len);
    } else {
        size_t own = twoshot_index(ring, me, stride, first, off);
        p->recv_ep = shoal_team_ep(team, ring->ranks[(me - k + n) % n]);
        len = shoal_ring_piece(ring, me, off, piece_elems, &at);
        /* The first contribution joins this rank's input (and error
         * feedback's addend with it); the others the partial sum in dst,
         * which holds them already. */
        p->addend = k == 1 ? addend : NULL;
        s = st->recv_reduce(p, k == 1 ? src + at * es : dst + off * es, dst + off * es, own,
                            len);
        p->addend = addend;
        if (s == SHOAL_OK && k == n - 1 && p->residual && len)
            team->kern->zero(team, p->residual + own, len * sizeof(float));
        if (s == SHOAL_OK && k == n - 1 && p->avg_n > 1 && len)
            shoal_finish_avg(team, dst + off * es, len, SHOAL_FLOAT32, p->avg_n);
    }
    if (s == SHOAL_OK && ++cur->k == 2 * (n - 1)) {
        cur->k = 0;
        cur->at = off + piece_elems;
    }
    return s;
}

static shoal_status_t twoshot_rs_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    size_t tmp_bytes = p->st->tmp_bytes(p, plan->stage_elems);
    shoal_status_t s = SHOAL_OK;
    if (plan->ring.n > 1 && tmp_bytes)
        s = shoal_plan_scratch(plan, tmp_bytes, &p->tmp);
    shoal_ring_cur_t cur = {0};
    while (s == SHOAL_OK && !cur.done)
        s = shoal_twoshot_rs_step(p, &plan->ring, a->sendbuf, a->recvbuf, a->count, 0,
                                  plan->stage_elems, &cur);
    return s;
}

const shoal_algo_ops_t shoal_twoshot_codec_rs_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "twoshot-codec",
    .cost = shoal_codec_block_cost,
    .plan = twoshot_plan,
    .run = twoshot_rs_run,
};

const shoal_algo_ops_t shoal_twoshot_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "twoshot-codec",
    .cost = shoal_codec_flat_cost,
    .plan = twoshot_plan,
    .run = twoshot_run,
};
