/* Ring gather and ring scatter: blocks travel along the ring order, one
 * piece of at most one slot at a time, so every rank talks to its two
 * neighbours only and the root has one link busy instead of n-1 (the
 * direct schedule's contention at many ranks). Positions count from the
 * root's successor: position p is rank root+1+p, and the root is last.
 *
 * Gather: the rank at position p sends its own block, then forwards the p
 * blocks that reach it from upstream; the root thus receives the blocks of
 * positions n-2, n-3, ..., 0 in that order.
 * Scatter: the root sends the blocks of positions n-2 down to 0; the rank
 * at position p forwards all but the last block it receives and keeps the
 * last, its own. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

static double ring_gs_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    /* n-1 hops to fill the pipe, then the root's one link carries n-1
     * blocks. */
    double n = team->nranks, bw = shoal_algo_bw(team);
    return (n - 1) * (shoal_algo_lat(team) + (double)team->chunk_size / bw) +
           (n - 1) * shoal_algo_bytes(args, args->count) / bw;
}

static shoal_status_t ring_gs_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                   shoal_plan_t *plan)
{
    int n = team->nranks, r = team->rank, root = args->root;
    if (root < 0 || root >= n || shoal_plan_init(team, args, 0, plan) != SHOAL_OK)
        return SHOAL_ERR_INTERNAL;
    int pos = (r - root - 1 + n) % n; /* the root is at n-1 */
    int gather = args->kind == SHOAL_COLL_GATHER;
    shoal_prims_t *p = &plan->prims;
    /* Gather flows towards the root, scatter away from it; the first rank
     * of the flow receives nothing and the last sends nothing. */
    int first = gather ? pos == 0 : r == root;
    int last = gather ? r == root : pos == n - 2;
    p->send_ep = n > 1 && !last ? shoal_team_ep(team, (r + 1) % n) : NULL;
    p->recv_ep = n > 1 && !first ? shoal_team_ep(team, (r + n - 1) % n) : NULL;
    if ((n > 1 && !last && !p->send_ep) ||
        (n > 1 && !first && !p->recv_ep))
        return SHOAL_ERR_INTERNAL;
    /* A rank between the ends passes pieces on through one of its own. */
    if (p->send_ep && p->recv_ep)
        shoal_plan_reserve(plan, plan->piece_elems * plan->esize);
    return SHOAL_OK;
}

/* Block of the rank at position pos in the root's n-block buffer. */
static char *ring_gs_block(const shoal_plan_t *plan, const void *buf, int pos)
{
    int n = plan->prims.team->nranks;
    int rank = (plan->args.root + 1 + pos) % n;
    return (char *)buf + (size_t)rank * plan->args.count * plan->esize;
}

/* Piece k of a block: offset and length in bytes. */
static size_t ring_gs_piece(const shoal_plan_t *plan, size_t k, size_t *off_p)
{
    size_t block = plan->args.count * plan->esize, piece = plan->piece_elems * plan->esize;
    *off_p = k * piece;
    return block - *off_p < piece ? block - *off_p : piece;
}

static size_t ring_gs_npieces(const shoal_plan_t *plan)
{
    return (plan->args.count + plan->piece_elems - 1) / plan->piece_elems;
}

/* Pass nblocks blocks from upstream on downstream, through a piece-sized
 * area of scratch memory. */
static shoal_status_t ring_gs_forward(shoal_plan_t *plan, int nblocks)
{
    shoal_prims_t *p = &plan->prims;
    size_t np = ring_gs_npieces(plan);
    if (nblocks <= 0)
        return SHOAL_OK;
    void *tmp;
    shoal_status_t s = shoal_plan_scratch(plan, plan->piece_elems * plan->esize, &tmp);
    for (int b = 0; b < nblocks && s == SHOAL_OK; b++) {
        for (size_t k = 0; k < np && s == SHOAL_OK; k++) {
            size_t off, len = ring_gs_piece(plan, k, &off);
            s = shoal_prim_recv_copy_send(p, tmp, len);
        }
    }
    return s;
}

static shoal_status_t ring_gather_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    int n = p->team->nranks, r = p->team->rank;
    size_t np = ring_gs_npieces(plan), block = a->count * plan->esize;
    shoal_status_t s = SHOAL_OK;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    if (r == a->root) {
        char *own = (char *)a->recvbuf + (size_t)r * block;
        if (own != a->sendbuf)
            shoal_move(p->team, own, a->sendbuf, block);
        for (int pos = n - 2; pos >= 0 && s == SHOAL_OK; pos--) {
            char *dst = ring_gs_block(plan, a->recvbuf, pos);
            for (size_t k = 0; k < np && s == SHOAL_OK; k++) {
                size_t off, len = ring_gs_piece(plan, k, &off);
                s = shoal_prim_recv(p, dst + off, len);
            }
        }
        return s;
    }
    int pos = (r - a->root - 1 + n) % n;
    for (size_t k = 0; k < np && s == SHOAL_OK; k++) {
        size_t off, len = ring_gs_piece(plan, k, &off);
        s = shoal_prim_send(p, (const char *)a->sendbuf + off, len);
    }
    if (s == SHOAL_OK)
        s = ring_gs_forward(plan, pos);
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

static shoal_status_t ring_scatter_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    int n = p->team->nranks, r = p->team->rank;
    size_t np = ring_gs_npieces(plan), block = a->count * plan->esize;
    shoal_status_t s = SHOAL_OK;
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    if (r == a->root) {
        const char *own = (const char *)a->sendbuf + (size_t)r * block;
        if (own != a->recvbuf)
            shoal_move(p->team, a->recvbuf, own, block);
        for (int pos = n - 2; pos >= 0 && s == SHOAL_OK; pos--) {
            const char *src = ring_gs_block(plan, a->sendbuf, pos);
            for (size_t k = 0; k < np && s == SHOAL_OK; k++) {
                size_t off, len = ring_gs_piece(plan, k, &off);
                s = shoal_prim_send(p, src + off, len);
            }
        }
        return s == SHOAL_OK ? shoal_prim_flush(p) : s;
    }
    int pos = (r - a->root - 1 + n) % n;
    s = ring_gs_forward(plan, n - 2 - pos);
    for (size_t k = 0; k < np && s == SHOAL_OK; k++) {
        size_t off, len = ring_gs_piece(plan, k, &off);
        s = shoal_prim_recv(p, (char *)a->recvbuf + off, len);
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

const shoal_algo_ops_t shoal_ring_gather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = ring_gs_cost,
    .plan = ring_gs_plan,
    .run = ring_gather_run,
};

const shoal_algo_ops_t shoal_ring_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = ring_gs_cost,
    .plan = ring_gs_plan,
    .run = ring_scatter_run,
};
