/* Single-copy reduce-scatter and all-reduce (put.h).
 *
 * Reduce-scatter: every rank sends the key of its input to every other,
 * so every rank sees the same n answers. With all of them, each rank
 * computes its own block of the sum by itself: piece by piece, it reads
 * the piece of its block from every peer's input (get, into one piece of
 * working memory that stays in the cache) and adds it into its output,
 * its own input's piece first and then the peers' in rank order. Every
 * input byte crosses memory once and every output byte is written once,
 * where the ring moves each partial sum through a slot at each of n-1
 * steps (two copies and an addition per step). A rank that reads a peer
 * tells it PUT_DONE when it has finished; no rank leaves before every
 * peer has, as they read its input. One that cannot attach a peer's key
 * asks for its block instead (PUT_NOKEY), which that peer sends through
 * slots and the asker adds in as it arrives, after the others.
 *
 * All-reduce, the two-shot way: the same reduce-scatter into this rank's
 * block of the output (blocks of about count / n elements), then the
 * all-gather half writes that block straight into every peer's output
 * (put_signal), which the peers' keys of their outputs, sent with those of
 * their inputs in the same control message, allow. In place this is safe
 * without further messages: block j of a rank's buffer is read only by
 * rank j, in the first half, and written only by rank j, after it. */
#include "put.h"

#include "base/clock.h"
#include "base/dtype.h"

/* Share of the slot algorithm's time the direct one is charged: each byte
 * read once from its owner's memory instead of passing through n-1 slots
 * (the reduce-scatter measured 2-4x the ring's busbw at 16 MiB on 2 ranks
 * of the 2-core machine); the all-reduce, whose ring already writes its
 * second half only once per hop, measured 1.1-1.5x the ring there. */
#define PUT_SPEEDUP 0.5
#define PUT_AR_SPEEDUP 0.75

/* Block j of the call, in bytes of every rank's input: the reduce-scatter
 * has count elements per rank, the all-reduce cuts count into n blocks of
 * a share rounded up to 16 elements (the last ones short or empty). */
static void put_block(const shoal_plan_t *plan, int n, int j, size_t *off_p, size_t *len_p)
{
    const shoal_coll_args_t *a = &plan->args;
    size_t es = plan->esize;
    if (a->kind == SHOAL_COLL_REDUCE_SCATTER) {
        *off_p = (size_t)j * a->count * es;
        *len_p = a->count * es;
        return;
    }
    size_t bs = (a->count + (size_t)n - 1) / (size_t)n;
    bs = (bs + 15) & ~(size_t)15;
    size_t off = (size_t)j * bs < a->count ? (size_t)j * bs : a->count;
    size_t len = a->count - off < bs ? a->count - off : bs;
    *off_p = off * es;
    *len_p = len * es;
}

/* The reads go through pieces of at most this many bytes: the piece read
 * and the output's piece it is added into then stay near the core (on the
 * 2-core machine of the README, 32 KiB pieces gave the 2-rank 16 MiB
 * reduce-scatter about a tenth more busbw than 128 KiB ones). */
#define PUT_READ_PIECE (32u * 1024)

static size_t put_piece_elems(const shoal_team_t *team, size_t esize)
{
    size_t pe = team->chunk_size / esize, cap = PUT_READ_PIECE / esize;
    pe = pe < cap ? pe : cap;
    return pe ? pe : 1;
}

static size_t put_piece_bytes(const shoal_plan_t *plan)
{
    return put_piece_elems(plan->prims.team, plan->esize) * plan->esize;
}

/* dst (len bytes) = this rank's block, at off of every input: own's first,
 * then each readable peer's in rank order, a piece at a time through tmp;
 * AVG finished piece by piece when finish. */
static shoal_status_t put_sum_block(shoal_plan_t *plan, shoal_put_peer_t *peers,
                                    const char *own, char *dst, size_t off, size_t len,
                                    void *tmp, int finish)
{
    shoal_team_t *team = plan->prims.team;
    int n = team->nranks, r = team->rank;
    size_t es = plan->esize, pb = put_piece_bytes(plan);
    for (size_t at = 0; at < len; at += pb) {
        size_t b = len - at < pb ? len - at : pb;
        const char *acc = own + at;
        for (int j = 0; j < n; j++) {
            if (j == r)
                continue;
            shoal_put_peer_t *p = &peers[(j - r + n) % n - 1];
            if (p->need_data)
                continue;
            shoal_status_t s = shoal_put_get(team, p->ep, tmp, p->rmem, off + at, b);
            if (s != SHOAL_OK)
                return s;
            shoal_combine(team, plan->prims.reduce, dst + at, acc, tmp, b / es, es);
            acc = dst + at;
        }
        if (acc != dst + at)
            shoal_move(team, dst + at, acc, b);
        if (finish)
            shoal_finish_avg(team, dst + at, b / es, plan->args.dtype, n);
    }
    return SHOAL_OK;
}

static shoal_status_t put_reduce(shoal_plan_t *plan, const shoal_algo_ops_t *self)
{
    shoal_team_t *team = plan->prims.team;
    const shoal_coll_args_t *a = &plan->args;
    int n = team->nranks, r = team->rank;
    int ar = a->kind == SHOAL_COLL_ALLREDUCE, avg = a->op == SHOAL_AVG;
    size_t es = plan->esize;
    size_t total = ar ? a->count * es : (size_t)n * a->count * es;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    size_t off_r, len_r;
    put_block(plan, n, r, &off_r, &len_r);
    char *dst = ar ? out + off_r : out;
    if (n > 1 && a->count && shoal_put_skipping(plan))
        return shoal_put_run_fallback(plan, self);
    if (a->count == 0)
        return SHOAL_OK;
    if (n == 1) {
        if (dst != in + off_r)
            shoal_move_out(team, dst, in + off_r, len_r);
        if (avg)
            shoal_finish_avg(team, dst, len_r / es, a->dtype, 1);
        return SHOAL_OK;
    }
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    shoal_put_peer_t *peers;
    shoal_put_ctrl_t *ctrl;
    shoal_xfer_t *x;
    void *tmp;
    shoal_status_t s = shoal_put_mem(plan, &peers, &ctrl, &x);
    if (s == SHOAL_OK)
        s = shoal_put_extra(plan, put_piece_bytes(plan), &tmp);
    if (s != SHOAL_OK)
        return s;
    shoal_put_ctrl_t *c = &ctrl[r];
    *c = (shoal_put_ctrl_t){.type = SHOAL_PUT_NOKEY};
    c->keylen_in = shoal_put_own_key(team, (void *)in, total, c->key_in);
    if (ar)
        c->keylen = shoal_put_own_key(team, out, total, c->key);
    if (c->keylen_in && (!ar || c->keylen))
        c->type = SHOAL_PUT_KEY;
    s = shoal_put_keys_all(team, ctrl, x, deadline);
    if (s != SHOAL_OK)
        return s;
    for (int j = 0; j < n; j++) {
        if (ctrl[j].type != SHOAL_PUT_KEY)
            return shoal_put_declined(plan, self);
    }
    plan->skip_len = 0;
    int asked = 0;
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        shoal_put_peer_t *p = &peers[k - 1];
        size_t off_j, len_j;
        put_block(plan, n, j, &off_j, &len_j);
        *p = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .src = in + off_j,
                                .bytes = len_j, .role = SHOAL_PUT_ROLE_READER,
                                .send_state = SHOAL_PUT_ST_CTRL, .reply = &shoal_put_done_msg,
                                .dst = dst, .rbytes = len_r, .need_done = 1,
                                .reduce = plan->prims.reduce, .esize = es};
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key_in, ctrl[j].keylen_in, &p->rmem) !=
            SHOAL_OK) {
            p->rmem = NULL;
            p->reply = &shoal_put_nokey_msg;
            p->need_data = 1;
            asked = 1;
        }
    }
    s = put_sum_block(plan, peers, in + off_r, dst, off_r, len_r, tmp, avg && !asked);
    if (s == SHOAL_OK)
        s = shoal_put_drive(team, peers, n - 1, deadline, NULL);
    if (s != SHOAL_OK)
        return s;
    if (avg && asked)
        shoal_finish_avg(team, dst, len_r / es, a->dtype, n);
    if (!ar)
        return SHOAL_OK;
    /* The all-gather half: this rank's block into every peer's output. */
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        shoal_put_peer_t *p = &peers[k - 1];
        size_t off_j, len_j;
        put_block(plan, n, j, &off_j, &len_j);
        *p = (shoal_put_peer_t){.peer = j, .ep = shoal_team_ep(team, j), .src = dst,
                                .bytes = len_r, .off = off_r, .dst = out + off_j,
                                .rbytes = len_j};
        if (p->ep->ops->rkey_attach(p->ep, ctrl[j].key, ctrl[j].keylen, &p->rmem) != SHOAL_OK)
            p->rmem = NULL;
    }
    return shoal_put_drive(team, peers, n - 1, deadline, NULL);
}

static shoal_status_t put_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    if ((args->kind != SHOAL_COLL_REDUCE_SCATTER && args->kind != SHOAL_COLL_ALLREDUCE) ||
        args->codec)
        return SHOAL_ERR_INTERNAL;
    /* The piece of working memory the reads go through. */
    size_t es = shoal_dtype_bytes(args->dtype);
    return shoal_put_plan_with(team, args, 1, es ? put_piece_elems(team, es) * es : 0, plan);
}

static double put_reduce_scatter_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_put_cost(team, args, &shoal_put_reduce_scatter_ops, PUT_SPEEDUP, 1);
}

static double put_allreduce_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    return shoal_put_cost(team, args, &shoal_put_allreduce_ops, PUT_AR_SPEEDUP, 1);
}

static shoal_status_t put_reduce_scatter_run(shoal_plan_t *plan)
{
    return put_reduce(plan, &shoal_put_reduce_scatter_ops);
}

static shoal_status_t put_allreduce_run(shoal_plan_t *plan)
{
    return put_reduce(plan, &shoal_put_allreduce_ops);
}

const shoal_algo_ops_t shoal_put_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_reduce_scatter_cost,
    .plan = put_plan,
    .run = put_reduce_scatter_run,
};

const shoal_algo_ops_t shoal_put_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "put",
    .cost = put_allreduce_cost,
    .plan = put_plan,
    .run = put_allreduce_run,
};
