/* Ring schedules over a team: the flat rings run them over every rank in
 * the cluster's ring order, the hierarchical algorithms over the ranks of
 * one host and over one rail. Pieces are at most one slot, so every rank
 * works on a different block at once and loops pipeline through the slot
 * FIFOs. Each block is reduced once, by the rank that ends its reduction,
 * and forwarded unchanged: every rank gets the same bits. */
#include "algo.h"
#include "stage.h"

#include "base/clock.h"

#include <string.h>

/* Blocks are rounded to this many elements so kernels see aligned runs. */
#define RING_ALIGN_ELEMS 16

size_t shoal_ring_seg_off(size_t total, int nseg, int s, size_t align)
{
    size_t bs = (total + (size_t)nseg - 1) / (size_t)nseg;
    align = align ? align : RING_ALIGN_ELEMS;
    bs = (bs + align - 1) / align * align;
    size_t off = (size_t)s * bs;
    return off < total ? off : total;
}

void shoal_ring_block(const shoal_ring_t *ring, int p, size_t *off_p, size_t *len_p)
{
    const shoal_cluster_t *c = ring->cluster;
    int first, end;
    switch (ring->layout) {
    case SHOAL_RING_BY_RANK:
        *off_p = (size_t)ring->ranks[p] * ring->unit;
        *len_p = ring->unit;
        return;
    case SHOAL_RING_BY_SEG:
        shoal_cluster_owned_rails(c, ring->host, p, &first, &end);
        *off_p = shoal_ring_seg_off(ring->total, c->max_local, first, ring->align);
        *len_p = shoal_ring_seg_off(ring->total, c->max_local, end, ring->align) - *off_p;
        return;
    case SHOAL_RING_BY_RAIL: {
        /* Owner-major staging: position p's rails p, p + n, ... in a run. */
        size_t blocks = 0;
        for (int k = p; k < c->max_local; k += ring->n)
            blocks += (size_t)shoal_cluster_rail_size(c, k);
        *off_p = (size_t)shoal_cluster_stage_off(c, ring->host, p) * ring->unit;
        *len_p = blocks * ring->unit;
        return;
    }
    case SHOAL_RING_BY_HOST: {
        /* Hosts holding rail `rail` have a block, in host order. */
        size_t before = 0;
        for (int g = 0; g < p; g++)
            before += ring->rail < shoal_cluster_nlocal(c, g);
        *off_p = before * ring->unit;
        *len_p = ring->rail < shoal_cluster_nlocal(c, p) ? ring->unit : 0;
        return;
    }
    }
    *off_p = *len_p = 0;
}

int shoal_ring_block_rank(const shoal_ring_t *ring, int p)
{
    switch (ring->layout) {
    case SHOAL_RING_BY_RANK:
        return ring->ranks[p];
    case SHOAL_RING_BY_HOST:
        return ring->rail < shoal_cluster_nlocal(ring->cluster, p)
                   ? shoal_cluster_rank_at(ring->cluster, p, ring->rail)
                   : -1;
    }
    return -1;
}

void shoal_ring_bind(shoal_prims_t *p, const shoal_ring_t *ring)
{
    int n = ring->n, me = ring->me;
    p->send_ep = n > 1 ? shoal_team_ep(p->team, ring->ranks[(me + 1) % n]) : NULL;
    p->recv_ep = n > 1 ? shoal_team_ep(p->team, ring->ranks[(me + n - 1) % n]) : NULL;
}

/* Element range [*off_p, *off_p + *len_p) of block b in a loop of real
 * elements split into n blocks of bs (the last ones may be short or empty). */
void shoal_ring_loop_block(size_t real, size_t bs, int b, size_t *off_p, size_t *len_p)
{
    size_t off = (size_t)b * bs;
    *off_p = off < real ? off : real;
    *len_p = off < real ? (real - off < bs ? real - off : bs) : 0;
}

size_t shoal_ring_loop_bs(size_t real, int n, size_t align, size_t piece_elems)
{
    size_t bs = (real + (size_t)n - 1) / (size_t)n;
    bs = (bs + align - 1) / align * align;
    return bs < piece_elems ? bs : piece_elems;
}

/* Hop k (1..n-1) of the all-gather half of a loop: the block that
 * position r - k + shift finished; the last hop sends nothing on. */
static shoal_status_t ring_gather_move(shoal_prims_t *p, const shoal_ring_t *ring, char *dst,
                                       size_t first, size_t base, size_t real, size_t bs,
                                       int shift, int k)
{
    int n = ring->n, r = ring->me;
    size_t es = p->esize, off, len;
    shoal_ring_loop_block(real, bs, (r - k + shift + 2 * n) % n, &off, &len);
    size_t at = base + off;
    return k < n - 1 ? p->st->recv_copy_send(p, dst + at * es, first + at, len)
                     : p->st->recv(p, dst + at * es, first + at, len);
}

shoal_status_t shoal_ring_gather_hops(shoal_prims_t *p, const shoal_ring_t *ring, char *dst,
                                      size_t first, size_t base, size_t real, size_t bs,
                                      int shift, int from, int to)
{
    shoal_status_t s = SHOAL_OK;
    for (int k = from; k < to && s == SHOAL_OK; k++)
        s = ring_gather_move(p, ring, dst, first, base, real, bs, shift, k);
    return s;
}

shoal_status_t shoal_ring_gather_run(shoal_prims_t *p, const shoal_ring_t *ring, char *dst,
                                     size_t first, size_t base, size_t real, size_t bs,
                                     int shift)
{
    return shoal_ring_gather_hops(p, ring, dst, first, base, real, bs, shift, 1, ring->n);
}

/* The end of a stepped schedule: its sends flushed, then done. */
static shoal_status_t ring_cur_flush(shoal_prims_t *p, shoal_ring_cur_t *cur)
{
    shoal_status_t s = shoal_prim_flush(p);
    if (s == SHOAL_OK)
        cur->done = 1;
    return s;
}

/* A move of a stepped schedule went: the next of the piece's moves, or
 * after the last of them (moves), the first of the piece at next. */
static void ring_cur_next(shoal_ring_cur_t *cur, int moves, size_t next)
{
    if (++cur->k == moves) {
        cur->k = 0;
        cur->at = next;
    }
}

/* Run a stepped schedule to its end (p->poll is clear: every step waits). */
#define RING_RUN(step_call)                                                                 \
    do {                                                                                    \
        shoal_ring_cur_t cur_ = {0};                                                        \
        shoal_ring_cur_t *cur = &cur_;                                                      \
        shoal_status_t s_ = SHOAL_OK;                                                       \
        while (s_ == SHOAL_OK && !cur->done)                                                \
            s_ = (step_call);                                                               \
        return s_;                                                                          \
    } while (0)

/* Move k of a loop at cur->at: 0 sends this position's block, 1..n-2
 * reduce and pass on, n-1 finishes block r + 1 and sends it as the
 * all-gather's first hop, and n..2n-2 are the all-gather's other hops. */
shoal_status_t shoal_ring_allreduce_step(shoal_prims_t *p, const shoal_ring_t *ring,
                                         const char *src, char *dst, size_t count,
                                         size_t first, size_t piece_elems,
                                         shoal_ring_cur_t *cur)
{
    const shoal_stage_ops_t *st = p->st;
    int n = ring->n, r = ring->me;
    size_t es = p->esize;
    if (n == 1) {
        st->alone(p, src, dst, first, count);
        cur->done = 1;
        return SHOAL_OK;
    }
    /* Pieces of a stage with blocks (a codec's) start on whole blocks. */
    size_t unit = st->align(p, 1), align = st->align(p, RING_ALIGN_ELEMS);
    if (piece_elems == 0 || piece_elems % unit || (count && first % unit))
        return SHOAL_ERR_INTERNAL;
    shoal_ring_bind(p, ring);
    if (cur->at >= count)
        return ring_cur_flush(p, cur);
    size_t loop = (size_t)n * piece_elems, base = cur->at;
    size_t real = count - base < loop ? count - base : loop;
    size_t bs = shoal_ring_loop_bs(real, n, align, piece_elems);
    size_t off, len, at;
    int k = cur->k;
    shoal_status_t s;
#define PIECE(b) (shoal_ring_loop_block(real, bs, (b), &off, &len), base + off)
    /* Reduce-scatter: block b starts at position b and ends, reduced, at
     * b-1, which sends it on as the all-gather's first hop. */
    if (k == 0) {
        at = PIECE(r);
        s = st->send(p, src + at * es, first + at, len);
    } else if (k < n - 1) {
        at = PIECE((r - k + n) % n);
        s = st->recv_reduce_send(p, src + at * es, first + at, len);
    } else if (k == n - 1) {
        at = PIECE((r + 1) % n);
        s = st->recv_reduce_copy_send(p, src + at * es, dst + at * es, first + at, len);
    } else {
        /* All-gather: each finished block goes round unchanged until it
         * reaches its owner's predecessor. */
        s = ring_gather_move(p, ring, dst, first, base, real, bs, 1, k - (n - 1));
    }
#undef PIECE
    if (s == SHOAL_OK)
        ring_cur_next(cur, 2 * n - 1, base + loop);
    return s;
}

void shoal_ring_allreduce_finished(const shoal_prims_t *p, int n, int me, size_t count,
                                   size_t piece_elems, int k, size_t *off_p, size_t *len_p)
{
    size_t bs = shoal_ring_loop_bs(count, n, p->st->align(p, RING_ALIGN_ELEMS), piece_elems);
    int t = k - (n - 1);
    shoal_ring_loop_block(count, bs, ((me + 1 - t) % n + n) % n, off_p, len_p);
}

shoal_status_t shoal_ring_allreduce_run(shoal_prims_t *p, const shoal_ring_t *ring,
                                        const char *src, char *dst, size_t count, size_t first,
                                        size_t piece_elems)
{
    RING_RUN(shoal_ring_allreduce_step(p, ring, src, dst, count, first, piece_elems, cur));
}

shoal_status_t shoal_ring_allreduce_run_deep(shoal_prims_t *p, const shoal_ring_t *ring,
                                             const char *src, char *dst, size_t count,
                                             size_t first, size_t piece_elems, int depth)
{
    int n = ring->n, moves = 2 * n - 1;
    if (depth > SHOAL_RING_DEPTH_MAX)
        depth = SHOAL_RING_DEPTH_MAX;
    if (depth <= 1 || n == 1 || piece_elems == 0)
        return shoal_ring_allreduce_run(p, ring, src, dst, count, first, piece_elems);
    size_t loop = (size_t)n * piece_elems;
    shoal_status_t s = SHOAL_OK;
    for (size_t base = 0; base < count && s == SHOAL_OK; base += (size_t)depth * loop) {
        shoal_ring_cur_t cur[SHOAL_RING_DEPTH_MAX];
        int loops = 0;
        for (int d = 0; d < depth && base + (size_t)d * loop < count; d++, loops++)
            cur[d] = (shoal_ring_cur_t){.at = base + (size_t)d * loop};
        /* Tick t makes move t - d of loop d: each loop one move behind the
         * one before it, so that every link carries up to `depth` pieces
         * and a step waits for its piece's latency once for all of them.
         * Every rank makes the moves in the same order, so each FIFO's
         * pieces come out in the order they went in. */
        for (int t = 0; t < moves + loops - 1 && s == SHOAL_OK; t++) {
            for (int d = 0; d < loops && s == SHOAL_OK; d++) {
                if (t - d >= 0 && t - d < moves)
                    s = shoal_ring_allreduce_step(p, ring, src, dst, count, first, piece_elems,
                                                  &cur[d]);
            }
        }
    }
    if (s == SHOAL_OK) {
        shoal_ring_bind(p, ring);
        s = shoal_prim_flush(p);
    }
    return s;
}

size_t shoal_ring_max_len(const shoal_ring_t *ring)
{
    size_t most = 0;
    for (int q = 0; q < ring->n; q++) {
        size_t off, len;
        shoal_ring_block(ring, q, &off, &len);
        most = len > most ? len : most;
    }
    return most;
}

size_t shoal_ring_piece(const shoal_ring_t *ring, int q, size_t off, size_t piece_elems,
                         size_t *start_p)
{
    size_t boff, blen;
    shoal_ring_block(ring, q, &boff, &blen);
    size_t len = off < blen ? (blen - off < piece_elems ? blen - off : piece_elems) : 0;
    *start_p = boff + (off < blen ? off : blen);
    return len;
}

/* Move k of the loop at offset cur->at handles the block of position
 * (me - 1 - k) mod n: it is sent first by the next position, gathers one
 * contribution per hop and arrives, reduced by all n, at its own position
 * in move n-1. */
shoal_status_t shoal_ring_rs_step(shoal_prims_t *p, const shoal_ring_t *ring, const char *src,
                                  char *dst, size_t piece_elems, shoal_ring_cur_t *cur)
{
    const shoal_stage_ops_t *st = p->st;
    int n = ring->n, r = ring->me, k = cur->k;
    size_t es = p->esize, at, off = cur->at;
    if (n == 1) {
        size_t boff, blen;
        shoal_ring_block(ring, r, &boff, &blen);
        st->alone(p, src + boff * es, dst, boff, blen);
        cur->done = 1;
        return SHOAL_OK;
    }
    shoal_ring_bind(p, ring);
    if (!cur->end)
        cur->end = shoal_ring_max_len(ring) + 1;
    if (off >= cur->end - 1)
        return ring_cur_flush(p, cur);
    size_t len = shoal_ring_piece(ring, (r - 1 - k + 2 * n) % n, off, piece_elems, &at);
    shoal_status_t s;
    if (k == 0) {
        s = st->send(p, src + at * es, at, len);
    } else if (k < n - 1) {
        s = st->recv_reduce_send(p, src + at * es, at, len);
    } else {
        /* The last hop ends at its owner: reduce into dst (finishing AVG)
         * and send nothing on. In place, src + at is dst itself, which the
         * kernels allow. */
        shoal_ep_t *send_ep = p->send_ep;
        p->send_ep = NULL;
        s = st->recv_reduce_copy_send(p, src + at * es, dst + off * es, at, len);
        p->send_ep = send_ep;
    }
    if (s == SHOAL_OK)
        ring_cur_next(cur, n, off + piece_elems);
    return s;
}

shoal_status_t shoal_ring_rs_run(shoal_prims_t *p, const shoal_ring_t *ring, const char *src,
                                 char *dst, size_t piece_elems)
{
    RING_RUN(shoal_ring_rs_step(p, ring, src, dst, piece_elems, cur));
}

/* Each rank sends its own piece, forwards the n-2 pieces that reach it
 * before they come back round, and keeps the last: move k brings the block
 * of position (me - k) mod n. An own piece read from own is copied into
 * dst right after it went out, while it is still in the cache. */
shoal_status_t shoal_ring_ag_step(shoal_prims_t *p, const shoal_ring_t *ring, const char *own,
                                  char *dst, size_t piece_elems, shoal_ring_cur_t *cur)
{
    const shoal_stage_ops_t *st = p->st;
    int n = ring->n, r = ring->me, k = cur->k;
    size_t es = p->esize, at, own_at, own_len, off = cur->at;
    shoal_ring_block(ring, r, &own_at, &own_len);
    if (n == 1) {
        if (own)
            shoal_move_out(p->team, dst + own_at * es, own, own_len * es);
        cur->done = 1;
        return SHOAL_OK;
    }
    shoal_ring_bind(p, ring);
    if (!cur->end)
        cur->end = shoal_ring_max_len(ring) + 1;
    if (off >= cur->end - 1)
        return ring_cur_flush(p, cur);
    size_t len = shoal_ring_piece(ring, (r - k + n) % n, off, piece_elems, &at);
    shoal_status_t s;
    if (k == 0 && !own) {
        s = st->send(p, dst + at * es, at, len);
    } else if (k == 0) {
        s = st->send(p, own + (at - own_at) * es, at, len);
        if (s == SHOAL_OK && len)
            shoal_move_out(p->team, dst + at * es, own + (at - own_at) * es, len * es);
    } else if (k < n - 1) {
        s = st->recv_copy_send(p, dst + at * es, at, len);
    } else {
        s = st->recv(p, dst + at * es, at, len);
    }
    if (s == SHOAL_OK)
        ring_cur_next(cur, n, off + piece_elems);
    return s;
}

shoal_status_t shoal_ring_ag_run(shoal_prims_t *p, const shoal_ring_t *ring, const char *own,
                                 char *dst, size_t piece_elems)
{
    RING_RUN(shoal_ring_ag_step(p, ring, own, dst, piece_elems, cur));
}

void shoal_ring_local(shoal_team_t *team, int layout, shoal_ring_t *ring_p)
{
    const shoal_cluster_t *c = &team->cluster;
    int h = c->host_of[team->rank];
    memset(ring_p, 0, sizeof(*ring_p));
    ring_p->n = shoal_cluster_nlocal(c, h);
    ring_p->me = c->local_of[team->rank];
    ring_p->ranks = c->by_host + c->host_start[h];
    ring_p->layout = layout;
    ring_p->host = h;
    ring_p->cluster = c;
}

void shoal_ring_rail(shoal_team_t *team, const int *rails, int j, shoal_ring_t *ring_p)
{
    const shoal_cluster_t *c = &team->cluster;
    memset(ring_p, 0, sizeof(*ring_p));
    ring_p->n = c->nhosts;
    ring_p->me = c->host_of[team->rank];
    ring_p->ranks = rails + (size_t)j * (size_t)c->nhosts;
    ring_p->layout = SHOAL_RING_BY_HOST;
    ring_p->rail = j;
    ring_p->cluster = c;
}

void shoal_ring_flat(shoal_team_t *team, size_t unit, shoal_ring_t *ring_p)
{
    const shoal_cluster_t *c = &team->cluster;
    memset(ring_p, 0, sizeof(*ring_p));
    ring_p->n = team->nranks;
    ring_p->me = c->ring_pos[team->rank];
    ring_p->ranks = c->by_host;
    ring_p->layout = SHOAL_RING_BY_RANK;
    ring_p->unit = unit;
    ring_p->cluster = c;
}
