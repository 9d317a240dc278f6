/* Binomial-tree broadcast and reduce, pipelined in pieces of at most one
 * slot. Ranks are numbered relative to the root (v = rank - root mod n); the
 * parent of v > 0 is v with its lowest set bit cleared, and the children of
 * v are v + m for every power of two m below v's lowest set bit (below n
 * for the root). The tree is ceil(log2 n) deep, so a small message reaches
 * every rank after that many latencies where the chain needs n-1; a large
 * one pays for the root sending every piece to each of its children, which
 * is why the chain wins there.
 *
 * A rank only ever waits for its parent (broadcast) or its children
 * (reduce), never for a sibling or an ancestor's other subtree, so the waits
 * follow tree edges in one direction and cannot form a cycle.
 *
 * plan->nbr[0] is the parent (-1 at the root) and plan->nbr[1..nnbr) the
 * children, smallest subtree first. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

/* ceil(log2 n): the tree's depth, and the root's number of children. */
static int binomial_depth(int n)
{
    int d = 0;
    while ((1L << d) < n)
        d++;
    return d;
}

static double binomial_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    int depth = binomial_depth(team->nranks);
    if (depth + 1 > SHOAL_PLAN_NBRS)
        return -1;
    /* Every level forwards the whole message once before the next level
     * has all of it, less what pipelining overlaps. */
    return depth * (shoal_algo_lat(team) + shoal_algo_bytes(args, args->count) /
                                                shoal_algo_bw(team));
}

static shoal_status_t binomial_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                    shoal_plan_t *plan)
{
    int n = team->nranks, root = args->root;
    if (root < 0 || root >= n || binomial_depth(n) + 1 > SHOAL_PLAN_NBRS)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    if (s != SHOAL_OK)
        return s;

    int v = (team->rank - root + n) % n;
    /* The root's lowest set bit is "above n": it adopts every power of two. */
    long low = v ? (long)(v & -v) : 2L * n;
    plan->nbr[0] = v ? (v - (int)low + root) % n : -1;
    plan->nnbr = 1;
    for (long m = 1; m < low && v + m < n; m *= 2)
        plan->nbr[plan->nnbr++] = (int)((v + m + root) % n);

    for (int i = 0; i < plan->nnbr; i++) {
        if (plan->nbr[i] >= 0 && !shoal_team_ep(team, plan->nbr[i]))
            return SHOAL_ERR_INTERNAL;
    }
    return SHOAL_OK;
}

static shoal_status_t binomial_reduce_plan(shoal_team_t *team,
                                           const shoal_coll_args_t *args, shoal_plan_t *plan)
{
    shoal_status_t s = binomial_plan(team, args, plan);
    if (s != SHOAL_OK)
        return s;
    plan->prims.reduce = shoal_reduce_fn(args->dtype, args->op);
    /* A non-root with two children or more accumulates in a piece. */
    if (plan->nbr[0] >= 0 && plan->nnbr > 2)
        shoal_plan_reserve(plan, plan->piece_elems * plan->esize);
    return plan->prims.reduce ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

static shoal_ep_t *nbr_ep(const shoal_plan_t *plan, int i)
{
    return plan->nbr[i] >= 0 ? shoal_team_ep(plan->prims.team, plan->nbr[i]) : NULL;
}

/* Flush every endpoint this rank sent to: the children for a broadcast,
 * the parent for a reduce. */
static shoal_status_t binomial_flush(shoal_plan_t *plan, int from, int to)
{
    shoal_prims_t *p = &plan->prims;
    shoal_status_t s = SHOAL_OK;
    for (int i = from; i < to && s == SHOAL_OK; i++) {
        p->send_ep = nbr_ep(plan, i);
        s = shoal_prim_flush(p);
    }
    p->send_ep = NULL;
    return s;
}

/* Per piece: take it from the parent (the root from sendbuf), then pass it
 * to the children, largest subtree first since it has the longest way to
 * go. The first child's copy is written while the piece is read in. */
static shoal_status_t bcast_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    int is_root = plan->nbr[0] < 0, last = plan->nnbr - 1;

    if (p->team->nranks == 1 || a->count == 0) {
        if (dst != src && a->count > 0)
            shoal_move(p->team, dst, src, a->count * es);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(p->team->timeout_ns);
    p->recv_ep = nbr_ep(plan, 0);
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
        char *out = dst + off * es;
        int c = last;
        if (is_root) {
            if (dst != src)
                shoal_move(p->team, out, src + off * es, bytes);
        } else {
            p->send_ep = c >= 1 ? nbr_ep(plan, c--) : NULL;
            s = shoal_prim_recv_copy_send(p, out, bytes);
        }
        for (; c >= 1 && s == SHOAL_OK; c--) {
            p->send_ep = nbr_ep(plan, c);
            s = shoal_prim_send(p, out, bytes);
        }
    }
    return s == SHOAL_OK ? binomial_flush(plan, 1, plan->nnbr) : s;
}

/* Per piece: fold in the children, smallest subtree first (its part is
 * ready first), each as received op accumulator, the first one against
 * this rank's input; then pass the result up. The accumulator is the
 * root's recvbuf, elsewhere one piece of scratch; the last child's
 * reduction goes straight into the parent's slot, so a rank with one child
 * needs no accumulator. The root finishes AVG on its last reduction, the
 * only place the sum is complete. */
static shoal_status_t reduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    shoal_team_t *team = p->team;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    int is_root = plan->nbr[0] < 0, nchild = plan->nnbr - 1;
    int avg_n = a->op == SHOAL_AVG ? team->nranks : 0;

    if (team->nranks == 1 || a->count == 0) {
        /* AVG over one rank is the input itself. */
        if (dst != src && a->count > 0)
            shoal_move(team, dst, src, a->count * es);
        return SHOAL_OK;
    }
    char *acc = NULL;
    if (!is_root && nchild >= 2) {
        void *scratch;
        shoal_status_t s = shoal_plan_scratch(plan, plan->piece_elems * es, &scratch);
        if (s != SHOAL_OK)
            return s;
        acc = scratch;
    }
    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    shoal_ep_t *parent = nbr_ep(plan, 0);
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
        const char *in = src + off * es;
        char *out = is_root ? dst + off * es : acc;
        if (nchild == 0) {
            p->send_ep = parent;
            s = shoal_prim_send(p, in, bytes);
            continue;
        }
        const char *part = in; /* what the next child's piece combines with */
        for (int c = 1; c < nchild && s == SHOAL_OK; c++) {
            p->recv_ep = nbr_ep(plan, c);
            p->send_ep = NULL;
            s = shoal_prim_recv_reduce_copy_send(p, part, out, bytes);
            part = out;
        }
        if (s != SHOAL_OK)
            break;
        p->recv_ep = nbr_ep(plan, nchild);
        if (is_root) {
            p->send_ep = NULL;
            p->avg_n = avg_n;
            s = shoal_prim_recv_reduce_copy_send(p, part, out, bytes);
            p->avg_n = 0;
        } else {
            p->send_ep = parent;
            s = shoal_prim_recv_reduce_send(p, part, bytes);
        }
    }
    return s == SHOAL_OK ? binomial_flush(plan, 0, 1) : s;
}

const shoal_algo_ops_t shoal_binomial_broadcast_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "binomial",
    .cost = binomial_cost,
    .plan = binomial_plan,
    .run = bcast_run,
};

const shoal_algo_ops_t shoal_binomial_reduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "binomial",
    .cost = binomial_cost,
    .plan = binomial_reduce_plan,
    .run = reduce_run,
};
