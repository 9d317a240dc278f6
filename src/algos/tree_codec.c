/* Compressed double binary tree all-reduce, for int8 (fp32 SUM and AVG):
 * the tree all-reduce's schedule (tree.c: both trees, the halves, the
 * numbering of pieces and the window order, shared through
 * shoal_tree_schedule) with the primitives' codec stage. A value is
 * requantised once per level of its tree on its way up, so at most
 * ceil(log2(n + 1)) times, where the ring requantises it n times.
 *
 * Pieces. Half A is rounded up to whole codec blocks and both halves are
 * cut into pieces of plan->codec_elems values (shoal_ring_codec_piece: a
 * multiple of the block whose wire fits a slot). Every piece thus starts
 * at a tensor index that is a multiple of the block and holds whole
 * blocks, except the one that ends the tensor: it encodes exactly as the
 * whole tensor would (codec.h).
 *
 * Up. A leaf encodes its values for its parent (send_enc). A rank with two
 * children decodes its left child's wire and adds it in fp32 to its own
 * values (recv_dec_reduce, into recvbuf, which holds the partial until the
 * result overwrites it; in place, the input it replaces has been used),
 * then adds its right child's wire to that partial and requantises once
 * for its parent (recv_addenc_send); a rank with one child add_encodes
 * that child's wire with its own values. The root does the same into
 * memory of its own (recv_addenc_keep) and decodes its final wire into its
 * result.
 *
 * Down. The root sends its final wire to its children unchanged, and each
 * rank decodes it into its result and forwards it unchanged
 * (recv_dec_keep_send, keeping a copy for the right child). Every rank
 * decodes the very same bytes, so all ranks end with identical bits. AVG
 * is the decoded sum divided by n, on every rank alike.
 *
 * The root keeps a window's final wires from the window's way up to its
 * way down, one step later, and a rank with a right child keeps a piece's
 * wire between its two sends: SHOAL_TREE_WINDOW wire slots, indexed by the
 * piece's number, so no two pieces of a window share one, and the next
 * window goes up only after this one has come down.
 *
 * Error feedback. Every rank is in both trees and quantises each value of
 * each piece exactly once (a leaf its input, any other rank its subtree's
 * partial sum), so one call writes the whole residual array of count
 * floats on each rank. A rank's residual is its children's decoded wires
 * plus its input minus its own wire's decoded value; summed over the
 * ranks these telescope to the exact sum of the inputs minus the decoded
 * sum (for AVG: minus n times the result), up to the fp32 rounding of the
 * additions.
 *
 * Error bound. Each rank's quantisation errs by at most f = 1/2 (nearest)
 * or 1 (stochastic) of its block's scale, 1/127 of its partial's largest
 * magnitude; a partial is the sum over a subtree, and each rank's input
 * lies in the subtrees of at most ceil(log2(n + 1)) ranks (the heap's
 * levels). So the result is within f * ceil(log2(n + 1)) * A / 127 of the
 * exact sum, A being the sum over ranks of the block's largest |input|,
 * plus the errors carried into the partials (a few per cent of it).
 *
 * The ternary codec has no tree schedule (its ring sums are exact; the
 * core refuses the combination). A rank alone runs the codec ring's
 * single-rank path: its input, exactly, and a residual of zeros. */
#include "algo.h"

#include "base/clock.h"

/* Wire slots start on cache lines. */
#define TREE_CODEC_ALIGN 64

typedef struct {
    float *tmp;           /* a decoded piece before it is added */
    unsigned char *wires; /* SHOAL_TREE_WINDOW kept wires, stride bytes apart */
    size_t stride;
} tree_codec_work_t;

static size_t round_up(size_t x, size_t y)
{
    return (x + y - 1) / y * y;
}

static void *tree_codec_wire(const tree_codec_work_t *w, size_t q)
{
    return w->wires + (q % SHOAL_TREE_WINDOW) * w->stride;
}

static double tree_codec_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    const shoal_codec_t *c = args->codec;
    size_t pe = c ? shoal_ring_codec_piece(c, comm->chunk_size) : 0;
    if (pe == 0)
        return -1;
    shoal_tree_layout_t l;
    shoal_tree_layout(args->count, c->block, pe, &l);
    return shoal_tree_cost_of(comm, &l, (double)c->ops->wire_bytes(c, args->count),
                              (double)c->ops->wire_bytes(c, pe));
}

static shoal_status_t tree_codec_plan(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    shoal_status_t s = shoal_tree_plan(comm, args, plan);
    if (s != SHOAL_OK)
        return s;
    if (!args->codec || args->codec->ops != &shoal_codec_int8 ||
        args->dtype != SHOAL_FLOAT32)
        return SHOAL_ERR_INTERNAL;
    plan->prims.codec = args->codec;
    plan->prims.residual = args->residual;
    /* Only the decodes of a final wire finish AVG: the partial sums going
     * up are decoded by recv_dec_reduce, which never does. */
    plan->prims.avg_n = args->op == SHOAL_AVG ? comm->nranks : 0;
    plan->codec_elems = shoal_ring_codec_piece(args->codec, comm->chunk_size);
    return plan->codec_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

/* This rank's part of piece q, values [off, off + len), going up tree t. */
static shoal_status_t codec_up(shoal_plan_t *plan, void *ctx, int t, size_t q, size_t off,
                               size_t len)
{
    const tree_codec_work_t *w = ctx;
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    const float *in = (const float *)a->sendbuf + off;
    float *acc = (float *)a->recvbuf + off;
    shoal_ep_t *parent = shoal_tree_ep(plan, t, SHOAL_TREE_PARENT);
    shoal_ep_t *left = shoal_tree_ep(plan, t, SHOAL_TREE_LEFT),
               *right = shoal_tree_ep(plan, t, SHOAL_TREE_RIGHT);

    if (!left) {
        p->send_ep = parent;
        return shoal_prim_send_enc(p, in, off, len);
    }
    const float *part = in;
    if (right) {
        p->recv_ep = left;
        shoal_status_t s = shoal_prim_recv_dec_reduce(p, in, acc, w->tmp, off, len);
        if (s != SHOAL_OK)
            return s;
        part = acc;
    }
    p->recv_ep = right ? right : left;
    if (parent) {
        p->send_ep = parent;
        return shoal_prim_recv_addenc_send(p, part, off, len);
    }
    return shoal_prim_recv_addenc_keep(p, part, acc, tree_codec_wire(w, q), off, len);
}

/* This rank's part of piece q coming down tree t: the final wire from the
 * parent (at the root: kept on the way up) to the children. */
static shoal_status_t codec_down(shoal_plan_t *plan, void *ctx, int t, size_t q, size_t off,
                                 size_t len)
{
    const tree_codec_work_t *w = ctx;
    shoal_prims_t *p = &plan->prims;
    float *out = (float *)plan->args.recvbuf + off;
    size_t bytes = p->codec->ops->wire_bytes(p->codec, len);
    void *wire = tree_codec_wire(w, q);
    shoal_ep_t *parent = shoal_tree_ep(plan, t, SHOAL_TREE_PARENT);
    shoal_ep_t *left = shoal_tree_ep(plan, t, SHOAL_TREE_LEFT),
               *right = shoal_tree_ep(plan, t, SHOAL_TREE_RIGHT);
    shoal_status_t s = SHOAL_OK;

    if (parent) {
        p->recv_ep = parent;
        p->send_ep = left;
        s = shoal_prim_recv_dec_keep_send(p, out, right ? wire : NULL, off, len);
    } else if (left) {
        p->send_ep = left;
        s = shoal_prim_send(p, wire, bytes);
    }
    if (s == SHOAL_OK && right) {
        p->send_ep = right;
        s = shoal_prim_send(p, wire, bytes);
    }
    return s;
}

static shoal_status_t tree_codec_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    struct shoal_comm *comm = p->comm;
    size_t pe = plan->codec_elems;
    p->deadline_ns = shoal_deadline_after(comm->timeout_ns);
    if (comm->nranks == 1) {
        shoal_ring_t alone = {.n = 1, .me = 0};
        return shoal_ring_allreduce_codec_run(p, &alone, a->sendbuf, a->recvbuf, a->count, 0,
                                              pe);
    }
    if (a->count == 0)
        return SHOAL_OK;
    /* Working memory that stops growing after the first call. */
    tree_codec_work_t w;
    size_t tmp_bytes = round_up(pe * sizeof(float), TREE_CODEC_ALIGN);
    w.stride = round_up(p->codec->ops->wire_bytes(p->codec, pe), TREE_CODEC_ALIGN);
    void *mem;
    shoal_status_t s = shoal_comm_scratch(comm, tmp_bytes + SHOAL_TREE_WINDOW * w.stride, &mem);
    if (s != SHOAL_OK)
        return s;
    w.tmp = mem;
    w.wires = (unsigned char *)mem + tmp_bytes;
    shoal_tree_layout_t l;
    shoal_tree_layout(a->count, p->codec->block, pe, &l);
    return shoal_tree_schedule(plan, &l, codec_up, codec_down, &w);
}

const shoal_algo_ops_t shoal_tree_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "tree-codec",
    .cost = tree_codec_cost,
    .plan = tree_codec_plan,
    .run = tree_codec_run,
};
