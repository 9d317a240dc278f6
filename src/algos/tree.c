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
 * in windows of SHOAL_TREE_WINDOW. Step s sends window s-1 down, then
 * window s up; a window's pieces go in order, and within one piece the
 * up messages go deepest level first, left to right, and the down messages
 * top level first. Every rank's sends and receives follow that one
 * global order of messages, because a rank's part of a piece (children,
 * then parent; or parent, then children) appears in it in the same
 * order. So no wait cycle can form, whatever the FIFO depth: the first
 * message in the order that has not been delivered has everything before
 * it done on both ends, so its sender is at it and the FIFO to its
 * receiver is empty, and its receiver is at it too; it moves. That holds
 * although both trees, and both directions, share the same endpoints:
 * each FIFO carries its messages in the global order on both ends.
 *
 * A window costs a round trip up and down the tree (the leaves wait for
 * window s-1 to come down before they send window s), which is what the
 * cost model charges; it pays off below the ring's 2(n-1) latencies.
 *
 * plan->nbr[3t], nbr[3t+1], nbr[3t+2] are the parent and the two children
 * of this rank in tree t (0: A, 1: B), -1 where there is none.
 *
 * Stages. The schedule moves each piece through the plan's stage
 * (stage.h): the plain tree with the plain stage, the compressed tree
 * ("tree-codec", int8, fp32 SUM and AVG) with the codec stage. Then half A
 * is rounded up to whole codec blocks and pieces hold the most whole blocks
 * whose wire fits a slot, so every piece encodes exactly as the whole
 * tensor would (codec.h). Up, a leaf encodes its values for its parent; a
 * rank with two children decodes its left child's wire and adds it in fp32
 * to its own values, then adds its right child's wire to that partial and
 * requantises once for its parent; the root does the same into memory of
 * its own and decodes its final wire into its result. Down, the root sends
 * that wire to its children unchanged and each rank decodes it and
 * forwards it unchanged: every rank decodes the very same bytes. A value is
 * requantised once per level of its tree, so at most ceil(log2(n + 1))
 * times, where the ring requantises it n times.
 *
 * The root keeps a window's final wires from the window's way up to its
 * way down, one step later, and a rank with a right child keeps a piece's
 * wire between its two sends: SHOAL_TREE_WINDOW wire slots, indexed by the
 * piece's number, so no two pieces of a window share one.
 *
 * Error feedback (codec stage). Every rank quantises each value of each
 * piece exactly once (a leaf its input, any other rank its subtree's
 * partial sum), so one call writes the whole residual array. The last
 * call's residual (the stage's addend) joins the input in the move that
 * reads it: the leaf's encode, or the first addition of a child's piece. A rank's
 * residual is its children's decoded wires plus its input minus its own
 * wire's decoded value; summed over the ranks these telescope to the exact
 * sum of the inputs minus the decoded sum (for AVG: minus n times the
 * result), up to the fp32 rounding of the additions.
 *
 * Error bound (codec stage). Each rank's quantisation errs by at most
 * f = 1/2 (nearest) or 1 (stochastic) of its block's scale, 1/127 of its
 * partial's largest magnitude; each rank's input lies in the subtrees of
 * at most ceil(log2(n + 1)) ranks, so the result is within
 * f * ceil(log2(n + 1)) * A / 127 of the exact sum, A being the sum over
 * ranks of the block's largest |input|, plus the errors carried into the
 * partials. The ternary codec has no tree schedule (its ring sums are
 * exact; the core refuses the combination). */
#include "algo.h"
#include "stage.h"

#include "base/clock.h"
#include "base/dtype.h"

/* The first half is rounded to this many elements so kernels see aligned
 * runs. */
#define TREE_ALIGN_ELEMS 16
/* Kept wires start on cache lines. */
#define TREE_WIRE_ALIGN 64

/* The stage's working memory of one call. */
typedef struct {
    unsigned char *wires; /* SHOAL_TREE_WINDOW kept wires, stride bytes apart; NULL: none */
    size_t stride;
} tree_work_t;

static void *tree_wire(const tree_work_t *w, size_t q)
{
    return w->wires ? w->wires + (q % SHOAL_TREE_WINDOW) * w->stride : NULL;
}

/* floor(log2 n): the heap's depth. */
static int tree_depth(int n)
{
    int d = 0;
    while ((2L << d) <= n)
        d++;
    return d;
}

static size_t div_up(size_t x, size_t y)
{
    return (x + y - 1) / y;
}

void shoal_tree_layout(size_t count, size_t align, size_t pe, shoal_tree_layout_t *l_p)
{
    size_t a = (count + 1) / 2;
    a = div_up(a, align) * align;
    l_p->count_a = a < count ? a : count;
    l_p->count_b = count - l_p->count_a;
    l_p->pe = pe;
    l_p->pieces_a = div_up(l_p->count_a, pe);
    l_p->pieces_b = div_up(l_p->count_b, pe);
}

double shoal_tree_cost_of(const shoal_team_t *team, const shoal_tree_layout_t *l,
                          double bytes, double piece_bytes)
{
    /* Tree edges join ranks by number, not by host: every rank of a host may
     * cross at once and share its link. */
    double bw = shoal_algo_bw(team) / shoal_algo_host_share(team);
    size_t windows = div_up(l->pieces_a + l->pieces_b, SHOAL_TREE_WINDOW);
    if (windows == 0)
        windows = 1;
    /* Each window: the tree's depth up and down, each level a latency and
     * a piece's time on the link before the next level can pass it on.
     * Data: an interior rank takes in two halves and passes on one going
     * up, and the reverse going down, for its half of the message. */
    double piece = bytes < piece_bytes ? bytes : piece_bytes;
    return (double)windows * 2 * tree_depth(team->nranks) * (shoal_algo_lat(team) + piece / bw) +
           2 * bytes / bw;
}

static double tree_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    size_t es = shoal_dtype_bytes(args->dtype);
    if (es == 0 || team->chunk_size < es)
        return -1;
    shoal_tree_layout_t l;
    shoal_tree_layout(args->count, TREE_ALIGN_ELEMS, team->chunk_size / es, &l);
    return shoal_tree_cost_of(team, &l, shoal_algo_bytes(args, args->count),
                              (double)team->chunk_size);
}

shoal_status_t shoal_tree_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    int n = team->nranks;
    shoal_status_t s = shoal_plan_init(team, args, 1, plan);
    if (s != SHOAL_OK)
        return s;
    for (int t = 0; t < 2; t++) {
        /* Tree B is tree A over mirrored ranks; the mirror is its own
         * inverse, so it maps positions back to ranks too. */
        int pos = t ? n - 1 - team->rank : team->rank;
        long nb[3] = {pos ? (pos - 1) / 2 : -1, 2L * pos + 1, 2L * pos + 2};
        for (int k = 0; k < 3; k++) {
            int r = nb[k] < 0 || nb[k] >= n ? -1 : (int)(t ? n - 1 - nb[k] : nb[k]);
            if (r >= 0 && !shoal_team_ep(team, r))
                return SHOAL_ERR_INTERNAL;
            plan->nbr[3 * t + k] = r;
        }
    }
    plan->nnbr = 6;
    /* Only final values finish AVG: the root's reduction, and a codec
     * stage's decodes of a final wire on the way down. */
    plan->prims.avg_n = args->op == SHOAL_AVG ? n : 0;
    return SHOAL_OK;
}

shoal_ep_t *shoal_tree_ep(const shoal_plan_t *plan, int t, int which)
{
    int r = plan->nbr[3 * t + which];
    return r >= 0 ? shoal_team_ep(plan->prims.team, r) : NULL;
}

/* Piece q of the global order: its tree and element range. Half A is
 * never shorter than half B, so it has at least as many pieces and the
 * pieces past the alternating run are A's. */
static void tree_piece(const shoal_tree_layout_t *l, size_t q, int *t_p, size_t *off_p,
                       size_t *len_p)
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

/* This rank's part of piece [off, off+len) going up tree t: the left
 * child's piece against the input, then the right child's against that.
 * The last reduction goes straight to the parent's slot, or, at the root,
 * into recvbuf, final (its wire kept for the way down). */
static shoal_status_t tree_up(shoal_plan_t *plan, void *ctx, int t, size_t q, size_t off,
                              size_t len)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    const shoal_stage_ops_t *st = p->st;
    const char *in = (const char *)a->sendbuf + off * plan->esize;
    char *acc = (char *)a->recvbuf + off * plan->esize;
    shoal_ep_t *parent = shoal_tree_ep(plan, t, SHOAL_TREE_PARENT);
    shoal_ep_t *left = shoal_tree_ep(plan, t, SHOAL_TREE_LEFT),
                *right = shoal_tree_ep(plan, t, SHOAL_TREE_RIGHT);

    if (!left) {
        p->send_ep = parent;
        return st->send(p, in, off, len);
    }
    /* The addend (error feedback) joins the input where it is read, and
     * not again where the partial sum that holds it is read. */
    const float *addend = p->addend;
    const char *part = in;
    if (right) {
        p->recv_ep = left;
        p->send_ep = NULL;
        shoal_status_t s = st->recv_reduce(p, in, acc, off, len);
        if (s != SHOAL_OK)
            return s;
        part = acc;
        p->addend = NULL;
    }
    p->recv_ep = right ? right : left;
    shoal_status_t s;
    if (parent) {
        p->send_ep = parent;
        s = st->recv_reduce_send(p, part, off, len);
    } else {
        p->send_ep = NULL;
        s = st->recv_reduce_keep(p, part, acc, tree_wire(ctx, q), off, len);
    }
    p->addend = addend;
    return s;
}

/* This rank's part of piece [off, off+len) coming down tree t: the result
 * from the parent (at the root: already in recvbuf, its wire kept) to the
 * children. */
static shoal_status_t tree_down(shoal_plan_t *plan, void *ctx, int t, size_t q, size_t off,
                                size_t len)
{
    shoal_prims_t *p = &plan->prims;
    const shoal_stage_ops_t *st = p->st;
    char *out = (char *)plan->args.recvbuf + off * plan->esize;
    void *wire = tree_wire(ctx, q);
    shoal_ep_t *parent = shoal_tree_ep(plan, t, SHOAL_TREE_PARENT);
    shoal_ep_t *left = shoal_tree_ep(plan, t, SHOAL_TREE_LEFT),
                *right = shoal_tree_ep(plan, t, SHOAL_TREE_RIGHT);
    shoal_status_t s = SHOAL_OK;

    if (parent) {
        p->recv_ep = parent;
        p->send_ep = left;
        s = st->recv_copy_keep_send(p, out, right ? wire : NULL, off, len);
    } else if (left) {
        p->send_ep = left;
        s = st->send_kept(p, out, wire, off, len);
    }
    if (s == SHOAL_OK && right) {
        p->send_ep = right;
        s = st->send_kept(p, out, wire, off, len);
    }
    return s;
}

/* Window w's pieces, in the global order, down the trees or up. */
static shoal_status_t tree_window(shoal_plan_t *plan, const shoal_tree_layout_t *l, size_t w,
                                  shoal_tree_part_fn part, void *ctx)
{
    size_t npieces = l->pieces_a + l->pieces_b, first = w * SHOAL_TREE_WINDOW;
    size_t end = npieces - first < SHOAL_TREE_WINDOW ? npieces : first + SHOAL_TREE_WINDOW;
    shoal_status_t s = SHOAL_OK;
    for (size_t q = first; q < end && s == SHOAL_OK; q++) {
        int t;
        size_t off, len;
        tree_piece(l, q, &t, &off, &len);
        s = part(plan, ctx, t, q, off, len);
    }
    return s;
}

static shoal_status_t tree_flush(shoal_plan_t *plan)
{
    shoal_prims_t *p = &plan->prims;
    shoal_status_t s = SHOAL_OK;
    for (int i = 0; i < plan->nnbr && s == SHOAL_OK; i++) {
        p->send_ep = plan->nbr[i] >= 0 ? shoal_team_ep(p->team, plan->nbr[i]) : NULL;
        s = shoal_prim_flush(p);
    }
    p->send_ep = NULL;
    return s;
}

shoal_status_t shoal_tree_schedule(shoal_plan_t *plan, const shoal_tree_layout_t *l,
                                   shoal_tree_part_fn up, shoal_tree_part_fn down, void *ctx)
{
    size_t nwin = div_up(l->pieces_a + l->pieces_b, SHOAL_TREE_WINDOW);
    /* Step s: window s-1 down, then window s up. */
    shoal_status_t s = SHOAL_OK;
    for (size_t step = 0; step <= nwin && s == SHOAL_OK; step++) {
        if (step > 0)
            s = tree_window(plan, l, step - 1, down, ctx);
        if (s == SHOAL_OK && step < nwin)
            s = tree_window(plan, l, step, up, ctx);
    }
    return s == SHOAL_OK ? tree_flush(plan) : s;
}


static size_t round_up(size_t x, size_t y)
{
    return (x + y - 1) / y * y;
}

/* The stage's working memory of a tree run: a decoded piece (*tmp_p
 * bytes), then the wires kept for the way down, one per window slot
 * (*stride_p bytes apart). */
static size_t tree_work_bytes(const shoal_plan_t *plan, size_t *tmp_p, size_t *stride_p)
{
    const shoal_prims_t *p = &plan->prims;
    *stride_p = round_up(p->st->keep_bytes(p, plan->stage_elems), TREE_WIRE_ALIGN);
    *tmp_p = round_up(p->st->tmp_bytes(p, plan->stage_elems), TREE_WIRE_ALIGN);
    return *tmp_p + SHOAL_TREE_WINDOW * *stride_p;
}

static shoal_status_t tree_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    const shoal_stage_ops_t *st = p->st;
    shoal_team_t *team = p->team;
    size_t pe = plan->stage_elems;

    p->deadline_ns = shoal_deadline_after(team->timeout_ns);
    if (team->nranks == 1 || a->count == 0) {
        st->alone(p, a->sendbuf, a->recvbuf, 0, a->count);
        return SHOAL_OK;
    }
    /* The stage's working memory (kept wires, a decoded piece). */
    tree_work_t w = {NULL, 0};
    size_t tmp_bytes, total = tree_work_bytes(plan, &tmp_bytes, &w.stride);
    if (total) {
        void *mem;
        shoal_status_t s = shoal_plan_scratch(plan, total, &mem);
        if (s != SHOAL_OK)
            return s;
        p->tmp = mem;
        w.wires = w.stride ? (unsigned char *)mem + tmp_bytes : NULL;
    }
    shoal_tree_layout_t l;
    shoal_tree_layout(a->count, st->align(p, TREE_ALIGN_ELEMS), pe, &l);
    return shoal_tree_schedule(plan, &l, tree_up, tree_down, &w);
}

const shoal_algo_ops_t shoal_tree_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "tree",
    .cost = tree_cost,
    .plan = shoal_tree_plan,
    .run = tree_run,
};

static double tree_codec_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    const shoal_codec_t *c = args->codec;
    size_t pe = c ? shoal_ring_codec_piece(c, team->chunk_size) : 0;
    if (pe == 0)
        return -1;
    shoal_tree_layout_t l;
    shoal_tree_layout(args->count, c->block, pe, &l);
    return shoal_tree_cost_of(team, &l, (double)c->ops->wire_bytes(c, args->count),
                              (double)c->ops->wire_bytes(c, pe));
}

static shoal_status_t tree_codec_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    shoal_status_t s = shoal_tree_plan(team, args, plan);
    if (s != SHOAL_OK)
        return s;
    if (!args->codec || args->codec->ops != &shoal_codec_int8)
        return SHOAL_ERR_INTERNAL;
    s = shoal_plan_stage(team, args, plan);
    size_t tmp, stride;
    if (s == SHOAL_OK)
        shoal_plan_reserve(plan, tree_work_bytes(plan, &tmp, &stride));
    return s;
}

const shoal_algo_ops_t shoal_tree_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "tree-codec",
    .cost = tree_codec_cost,
    .plan = tree_codec_plan,
    .run = tree_run,
};
