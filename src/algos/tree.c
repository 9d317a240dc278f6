/* Double binary tree all-reduce. Tree A lays the ranks out as a binary heap
 * (position i has children 2i+1 and 2i+2); tree B does the same over the
 * mirrored ranks, position i being rank n-1-i. Heap positions below n/2 are
 * the interior ones, so for even n every rank is interior in one tree and
 * a leaf in the other, and the two trees together load every rank about
 * equally. The first half of the data goes up tree A and back down, the
 * second half up and down tree B, both halves in pieces of at most one slot.
 *
 * Up, a rank folds its left child's piece into its own input, then its
 * right child's into that, and sends the partial result to its parent; the
 * root's fold is the only place a piece's full reduction forms (AVG is
 * finished there), and the way down only copies it, so every rank gets the
 * same bits. A non-root's partial lives in its recvbuf until the result
 * overwrites it; in place, the input it replaces has already been used.
 *
 * Schedule. Pieces are numbered in one global order that alternates the
 * trees (A0, B0, A1, B1, ..., then the rest of the longer half) and grouped
 * in windows of TREE_WINDOW. Step s sends window s-1 down, then window s
 * up; a window's pieces go in order, and within one piece the up messages
 * go deepest level first, left to right, and the down messages top level
 * first. Every rank's sends and receives follow that one global order of
 * messages, because a rank's part of a piece (children, then parent; or
 * parent, then children) appears in it in the same order. So no wait cycle
 * can form, whatever the FIFO depth: the first message in the order that
 * has not been delivered has everything before it done on both ends, so its
 * sender is at it and the FIFO to its receiver is empty, and its receiver
 * is at it too; it moves. That holds although both trees, and both
 * directions, share the same endpoints: each FIFO carries its messages in
 * the global order on both ends.
 *
 * A window costs a round trip up and down the tree (the leaves wait for
 * window s-1 to come down before they send window s), which is what the
 * cost model charges; it pays off below the ring's 2(n-1) latencies.
 *
 * plan->nbr[3t], nbr[3t+1], nbr[3t+2] are the parent and the two children
 * of this rank in tree t (0: A, 1: B), -1 where there is none. */
#include "algo.h"

#include "core/clock.h"
#include "core/dtype.h"

/* Pieces per window, both trees together. */
#define TREE_WINDOW 8
/* The first half is rounded to this many elements so kernels see aligned
 * runs. */
#define TREE_ALIGN_ELEMS 16

enum { TREE_PARENT = 0, TREE_LEFT = 1, TREE_RIGHT = 2 };

/* floor(log2 n): the heap's depth. */
static int tree_depth(int n)
{
    int d = 0;
    while ((2L << d) <= n)
        d++;
    return d;
}

/* Element counts of the halves. */
static void tree_halves(size_t count, size_t *a_p, size_t *b_p)
{
    size_t a = (count + 1) / 2;
    a = (a + TREE_ALIGN_ELEMS - 1) / TREE_ALIGN_ELEMS * TREE_ALIGN_ELEMS;
    *a_p = a < count ? a : count;
    *b_p = count - *a_p;
}

static size_t div_up(size_t x, size_t y)
{
    return (x + y - 1) / y;
}

static double tree_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    /* Tree edges join ranks by number, not by host: every rank of a host may
     * cross at once and share its link. */
    double bytes = shoal_algo_bytes(args, args->count);
    double bw = shoal_algo_bw(comm) / shoal_algo_host_share(comm);
    size_t es = shoal_dtype_bytes(args->dtype), ca, cb;
    if (es == 0 || comm->chunk_size < es)
        return -1;
    size_t pe = comm->chunk_size / es;
    tree_halves(args->count, &ca, &cb);
    size_t windows = div_up(div_up(ca, pe) + div_up(cb, pe), TREE_WINDOW);
    if (windows == 0)
        windows = 1;
    /* Each window: the tree's depth up and down, each level a latency and
     * a piece's time on the link before the next level can pass it on.
     * Data: an interior rank takes in two halves and passes on one going
     * up, and the reverse going down, for its half of the message. */
    double piece = bytes < (double)comm->chunk_size ? bytes : (double)comm->chunk_size;
    return (double)windows * 2 * tree_depth(comm->nranks) * (shoal_algo_lat(comm) + piece / bw) +
           2 * bytes / bw;
}

static shoal_status_t tree_plan(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                shoal_plan_t *plan)
{
    int n = comm->nranks;
    shoal_status_t s = shoal_plan_init(comm, args, 1, plan);
    if (s != SHOAL_OK)
        return s;
    for (int t = 0; t < 2; t++) {
        /* Tree B is tree A over mirrored ranks; the mirror is its own
         * inverse, so it maps positions back to ranks too. */
        int pos = t ? n - 1 - comm->rank : comm->rank;
        long nb[3] = {pos ? (pos - 1) / 2 : -1, 2L * pos + 1, 2L * pos + 2};
        for (int k = 0; k < 3; k++) {
            int r = nb[k] < 0 || nb[k] >= n ? -1 : (int)(t ? n - 1 - nb[k] : nb[k]);
            if (r >= 0 && !shoal_comm_ep(comm, r))
                return SHOAL_ERR_INTERNAL;
            plan->nbr[3 * t + k] = r;
        }
    }
    plan->nnbr = 6;
    return SHOAL_OK;
}

static shoal_ep_t *tree_ep(const shoal_plan_t *plan, int t, int which)
{
    int r = plan->nbr[3 * t + which];
    return r >= 0 ? shoal_comm_ep(plan->prims.comm, r) : NULL;
}

/* Piece q of the global order: its tree and element range. Half A is
 * never shorter than half B, so it has at least as many pieces and the
 * pieces past the alternating run are A's. */
typedef struct {
    size_t pieces_a, pieces_b, count_a, count_b, pe;
} tree_layout_t;

static void tree_piece(const tree_layout_t *l, size_t q, int *t_p, size_t *off_p, size_t *len_p)
{
    size_t both = l->pieces_b, idx;
    int t;
    if (q < 2 * both) {
        t = (int)(q & 1);
        idx = q / 2;
    } else {
        t = 0;
        idx = q - both;
    }
    size_t base = t ? l->count_a : 0, total = t ? l->count_b : l->count_a;
    size_t off = idx * l->pe;
    *t_p = t;
    *off_p = base + off;
    *len_p = total - off < l->pe ? total - off : l->pe;
}

/* This rank's part of piece [off, off+len) going up tree t. */
static shoal_status_t tree_up(shoal_plan_t *plan, int t, size_t off, size_t len)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    size_t bytes = len * plan->esize;
    const char *in = (const char *)a->sendbuf + off * plan->esize;
    char *acc = (char *)a->recvbuf + off * plan->esize;
    shoal_ep_t *parent = tree_ep(plan, t, TREE_PARENT);
    shoal_ep_t *left = tree_ep(plan, t, TREE_LEFT), *right = tree_ep(plan, t, TREE_RIGHT);
    shoal_status_t s = SHOAL_OK;

    if (!left) {
        p->send_ep = parent;
        return shoal_prim_send(p, in, bytes);
    }
    /* The left child's piece against the input; then the right child's
     * against that. The last reduction goes straight to the parent's slot,
     * or, at the root, into recvbuf with AVG finished. */
    const char *part = in;
    if (right) {
        p->recv_ep = left;
        p->send_ep = NULL;
        s = shoal_prim_recv_reduce_copy_send(p, in, acc, bytes);
        part = acc;
        if (s != SHOAL_OK)
            return s;
    }
    p->recv_ep = right ? right : left;
    if (parent) {
        p->send_ep = parent;
        return shoal_prim_recv_reduce_send(p, part, bytes);
    }
    p->send_ep = NULL;
    p->avg_n = a->op == SHOAL_AVG ? p->comm->nranks : 0;
    s = shoal_prim_recv_reduce_copy_send(p, part, acc, bytes);
    p->avg_n = 0;
    return s;
}

/* This rank's part of piece [off, off+len) coming down tree t: the result
 * from the parent (at the root: already in recvbuf) to the children. */
static shoal_status_t tree_down(shoal_plan_t *plan, int t, size_t off, size_t len)
{
    shoal_prims_t *p = &plan->prims;
    size_t bytes = len * plan->esize;
    char *out = (char *)plan->args.recvbuf + off * plan->esize;
    shoal_ep_t *parent = tree_ep(plan, t, TREE_PARENT);
    shoal_ep_t *left = tree_ep(plan, t, TREE_LEFT), *right = tree_ep(plan, t, TREE_RIGHT);
    shoal_status_t s = SHOAL_OK;

    if (parent) {
        p->recv_ep = parent;
        p->send_ep = left;
        s = shoal_prim_recv_copy_send(p, out, bytes);
    } else if (left) {
        p->send_ep = left;
        s = shoal_prim_send(p, out, bytes);
    }
    if (s == SHOAL_OK && right) {
        p->send_ep = right;
        s = shoal_prim_send(p, out, bytes);
    }
    return s;
}

/* Window w's pieces, in the global order, down the trees or up. */
static shoal_status_t tree_window(shoal_plan_t *plan, const tree_layout_t *l, size_t w,
                                  int down)
{
    size_t npieces = l->pieces_a + l->pieces_b, first = w * TREE_WINDOW;
    size_t end = npieces - first < TREE_WINDOW ? npieces : first + TREE_WINDOW;
    shoal_status_t s = SHOAL_OK;
    for (size_t q = first; q < end && s == SHOAL_OK; q++) {
        int t;
        size_t off, len;
        tree_piece(l, q, &t, &off, &len);
        s = down ? tree_down(plan, t, off, len) : tree_up(plan, t, off, len);
    }
    return s;
}

static shoal_status_t tree_flush(shoal_plan_t *plan)
{
    shoal_prims_t *p = &plan->prims;
    shoal_status_t s = SHOAL_OK;
    for (int i = 0; i < plan->nnbr && s == SHOAL_OK; i++) {
        p->send_ep = plan->nbr[i] >= 0 ? shoal_comm_ep(p->comm, plan->nbr[i]) : NULL;
        s = shoal_prim_flush(p);
    }
    p->send_ep = NULL;
    return s;
}

static shoal_status_t tree_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    struct shoal_comm *comm = p->comm;

    if (comm->nranks == 1 || a->count == 0) {
        if (a->recvbuf != a->sendbuf && a->count > 0)
            shoal_move(comm, a->recvbuf, a->sendbuf, a->count * plan->esize);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(comm->timeout_ns);
    tree_layout_t l = {.pe = plan->piece_elems};
    tree_halves(a->count, &l.count_a, &l.count_b);
    l.pieces_a = div_up(l.count_a, l.pe);
    l.pieces_b = div_up(l.count_b, l.pe);
    size_t nwin = div_up(l.pieces_a + l.pieces_b, TREE_WINDOW);

    /* Step s: window s-1 down, then window s up. */
    shoal_status_t s = SHOAL_OK;
    for (size_t step = 0; step <= nwin && s == SHOAL_OK; step++) {
        if (step > 0)
            s = tree_window(plan, &l, step - 1, 1);
        if (s == SHOAL_OK && step < nwin)
            s = tree_window(plan, &l, step, 0);
    }
    return s == SHOAL_OK ? tree_flush(plan) : s;
}

const shoal_algo_ops_t shoal_tree_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "tree",
    .cost = tree_cost,
    .plan = tree_plan,
    .run = tree_run,
};
