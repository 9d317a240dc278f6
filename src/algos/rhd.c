/* Recursive halving-doubling (Rabenseifner): reduce-scatter by recursive
 * halving, all-gather by recursive doubling, and all-reduce as the one then
 * the other. The exchanges run over p2 virtual ranks, p2 the largest power
 * of two <= n; each step pairs virtual rank v with v ^ d and swaps half (or
 * doubles) the part of the buffer v is responsible for, so log2(p2) steps
 * each way move (p2-1)/p2 of the buffer in all.
 *
 * With rem = n - p2 > 0, the first 2*rem ranks fold pairwise: even rank r
 * hands its input to r+1, which takes part as virtual rank r/2 for both;
 * the ranks from 2*rem on are virtual rank r - rem. At the end the odd ones
 * hand the even ones their results. Virtual rank v thus stands for real
 * ranks 2v, 2v+1 (v < rem) or v + rem, whose real blocks are contiguous:
 * for reduce-scatter and all-gather, virtual block v is exactly those real
 * blocks, so each result lands on its rank with one copy.
 *
 * After halving, each element of virtual block v has been reduced for the
 * last time by v (AVG finished there, once); doubling and the unfold only
 * copy, so every rank gets the same bits. The exchanges go through
 * shoal_xfer_run, which moves both directions of a pair at once: every step
 * is a perfect matching that both partners enter, so no rank waits on one
 * that waits elsewhere. A message of zero bytes is left out on both ends,
 * which compute every length alike. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"

#include <string.h>

/* All-reduce blocks are rounded to this many elements so kernels see
 * aligned runs. */
#define RHD_ALIGN_ELEMS 16

typedef struct {
    shoal_team_t *team;
    int p2, rem;
    int v;                /* this rank's virtual rank; -1 if it folds away */
    size_t es;
    /* Element offset of virtual block b: real blocks of `unit` elements
     * (reduce-scatter, all-gather), or, when unit is 0, blocks of `bs` of
     * a `count`-element buffer (all-reduce). */
    size_t unit, bs, count;
    shoal_reduce_fn_t reduce;
    uint64_t deadline_ns;
} rhd_t;

static int rhd_p2(int n)
{
    int p2 = 1;
    while (p2 <= n / 2)
        p2 *= 2;
    return p2;
}

static int rhd_log2(int p2)
{
    int l = 0;
    while ((1 << l) < p2)
        l++;
    return l;
}

/* Real rank that does the work of virtual rank v. */
static int rhd_real(const rhd_t *h, int v)
{
    return v < h->rem ? 2 * v + 1 : v + h->rem;
}

static size_t rhd_off(const rhd_t *h, int b)
{
    if (h->unit)
        return (size_t)(b < h->rem ? 2 * b : b + h->rem) * h->unit;
    size_t off = (size_t)b * h->bs;
    return off < h->count ? off : h->count;
}

static void rhd_init(rhd_t *h, const shoal_plan_t *plan, size_t unit)
{
    shoal_team_t *team = plan->prims.team;
    int r = team->rank;
    memset(h, 0, sizeof(*h));
    h->team = team;
    h->p2 = rhd_p2(team->nranks);
    h->rem = team->nranks - h->p2;
    h->v = r < 2 * h->rem ? (r % 2 ? r / 2 : -1) : r - h->rem;
    h->es = plan->esize;
    h->unit = unit;
    h->count = plan->args.count;
    size_t bs = (h->count + (size_t)h->p2 - 1) / (size_t)h->p2;
    h->bs = (bs + RHD_ALIGN_ELEMS - 1) / RHD_ALIGN_ELEMS * RHD_ALIGN_ELEMS;
    h->reduce = plan->prims.reduce;
    h->deadline_ns = shoal_deadline_after(team->timeout_ns);
}

/* Send sbytes from sbuf to real rank peer while receiving rbytes from it
 * into rbuf, combined into rbuf (received op rbuf) when reduce is set. */
static shoal_status_t rhd_exchange(rhd_t *h, int peer, const void *sbuf, size_t sbytes,
                                   void *rbuf, size_t rbytes, int reduce)
{
    shoal_ep_t *ep = shoal_team_ep(h->team, peer);
    shoal_xfer_t snd = {.ep = ep, .buf = (void *)sbuf, .bytes = sbytes};
    shoal_xfer_t rcv = {.ep = ep, .buf = rbuf, .bytes = rbytes,
                        .reduce = reduce ? h->reduce : NULL, .esize = h->es};
    if (sbytes == 0 && rbytes == 0)
        return SHOAL_OK;
    return shoal_xfer_run(h->team, &snd, sbytes > 0, &rcv, rbytes > 0, h->deadline_ns);
}

/* Recursive halving over work, the full-size working buffer: step d keeps
 * the half of the current range on v's side of bit d and hands the other
 * half to v ^ d, which hands back its partial of ours. The first step sends
 * from src and copies the kept half of src into work; later steps work in
 * work only. Ends with virtual block v fully reduced in work. */
static shoal_status_t rhd_halve(rhd_t *h, const char *src, char *work)
{
    size_t es = h->es;
    int lo = 0, hi = h->p2;
    for (int d = h->p2 / 2; d >= 1; d /= 2) {
        int mid = lo + d, upper = (h->v & d) != 0;
        size_t keep = rhd_off(h, upper ? mid : lo), keep_end = rhd_off(h, upper ? hi : mid);
        size_t give = rhd_off(h, upper ? lo : mid), give_end = rhd_off(h, upper ? mid : hi);
        if (src != work)
            shoal_move(h->team, work + keep * es, src + keep * es, (keep_end - keep) * es);
        shoal_status_t s = rhd_exchange(h, rhd_real(h, h->v ^ d), src + give * es,
                                        (give_end - give) * es, work + keep * es,
                                        (keep_end - keep) * es, 1);
        if (s != SHOAL_OK)
            return s;
        src = work;
        lo = upper ? mid : lo;
        hi = upper ? hi : mid;
    }
    return SHOAL_OK;
}

/* Recursive doubling over work: step d swaps v's aligned run of d virtual
 * blocks for its partner's, so after the last step work is whole. */
static shoal_status_t rhd_double(rhd_t *h, char *work)
{
    size_t es = h->es;
    for (int d = 1; d < h->p2; d *= 2) {
        int mine = h->v & ~(d - 1), theirs = mine ^ d;
        size_t m = rhd_off(h, mine), m_end = rhd_off(h, mine + d);
        size_t t = rhd_off(h, theirs), t_end = rhd_off(h, theirs + d);
        shoal_status_t s = rhd_exchange(h, rhd_real(h, h->v ^ d), work + m * es,
                                        (m_end - m) * es, work + t * es, (t_end - t) * es, 0);
        if (s != SHOAL_OK)
            return s;
    }
    return SHOAL_OK;
}

static shoal_status_t rhd_allreduce_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    int r = team->rank;
    size_t bytes = a->count * plan->esize;
    const char *src = a->sendbuf;
    char *work = a->recvbuf;

    if (team->nranks == 1 || a->count == 0) {
        if (work != src && bytes > 0)
            shoal_move(team, work, src, bytes);
        return SHOAL_OK;
    }
    rhd_t h;
    rhd_init(&h, plan, 0);
    shoal_status_t s;
    if (h.v < 0) {
        /* Folded away: hand over the input, take back the result. */
        s = rhd_exchange(&h, r + 1, src, bytes, NULL, 0, 0);
        return s == SHOAL_OK ? rhd_exchange(&h, r + 1, NULL, 0, work, bytes, 0) : s;
    }
    if (r < 2 * h.rem) {
        if (work != src)
            shoal_move(team, work, src, bytes);
        s = rhd_exchange(&h, r - 1, NULL, 0, work, bytes, 1);
        if (s != SHOAL_OK)
            return s;
        src = work;
    }
    s = rhd_halve(&h, src, work);
    if (s != SHOAL_OK)
        return s;
    size_t own = rhd_off(&h, h.v), own_end = rhd_off(&h, h.v + 1);
    if (a->op == SHOAL_AVG && own_end > own)
        shoal_finish_avg(team, work + own * h.es, own_end - own, a->dtype, team->nranks);
    s = rhd_double(&h, work);
    if (s == SHOAL_OK && r < 2 * h.rem)
        s = rhd_exchange(&h, r - 1, work, bytes, NULL, 0, 0);
    return s;
}

static shoal_status_t rhd_reduce_scatter_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    int r = team->rank;
    size_t es = plan->esize, bytes = a->count * es, total = (size_t)team->nranks * bytes;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;

    if (team->nranks == 1 || a->count == 0) {
        /* One rank's AVG is its own value. */
        if (dst != src && bytes > 0)
            shoal_move(team, dst, src, bytes);
        return SHOAL_OK;
    }
    rhd_t h;
    rhd_init(&h, plan, a->count);
    shoal_status_t s;
    if (h.v < 0) {
        s = rhd_exchange(&h, r + 1, src, total, NULL, 0, 0);
        return s == SHOAL_OK ? rhd_exchange(&h, r + 1, NULL, 0, dst, bytes, 0) : s;
    }
    /* Every block is reduced in scratch, so an in-place recvbuf (inside
     * sendbuf) is written only once the input is no longer read. */
    void *scratch;
    s = shoal_plan_scratch(plan, total, &scratch);
    if (s != SHOAL_OK)
        return s;
    char *work = scratch;
    if (r < 2 * h.rem) {
        shoal_move(team, work, src, total);
        s = rhd_exchange(&h, r - 1, NULL, 0, work, total, 1);
        if (s != SHOAL_OK)
            return s;
        src = work;
    }
    s = rhd_halve(&h, src, work);
    if (s != SHOAL_OK)
        return s;
    size_t own = rhd_off(&h, h.v), own_end = rhd_off(&h, h.v + 1);
    if (a->op == SHOAL_AVG)
        shoal_finish_avg(team, work + own * es, own_end - own, a->dtype, team->nranks);
    shoal_move(team, dst, work + (size_t)r * bytes, bytes);
    if (r < 2 * h.rem)
        s = rhd_exchange(&h, r - 1, work + (size_t)(r - 1) * bytes, bytes, NULL, 0, 0);
    return s;
}

static shoal_status_t rhd_allgather_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_team_t *team = plan->prims.team;
    int n = team->nranks, r = team->rank;
    size_t bytes = a->count * plan->esize, total = (size_t)n * bytes;
    char *dst = a->recvbuf;
    char *own = dst + (size_t)r * bytes;

    if (a->count == 0)
        return SHOAL_OK;
    if (own != (const char *)a->sendbuf)
        shoal_move(team, own, a->sendbuf, bytes);
    if (n == 1)
        return SHOAL_OK;
    rhd_t h;
    rhd_init(&h, plan, a->count);
    shoal_status_t s;
    if (h.v < 0) {
        /* Hand over the block; take back everything before and after it. */
        s = rhd_exchange(&h, r + 1, own, bytes, NULL, 0, 0);
        if (s != SHOAL_OK)
            return s;
        shoal_ep_t *ep = shoal_team_ep(team, r + 1);
        shoal_xfer_t rest[2] = {{.ep = ep, .buf = dst, .bytes = (size_t)r * bytes},
                                {.ep = ep, .buf = own + bytes, .bytes = total - (size_t)(r + 1) * bytes}};
        /* Rank r is even and below n-1, so only the first can be empty. */
        return shoal_xfer_run(team, NULL, 0, rest + (r == 0), 2 - (r == 0), h.deadline_ns);
    }
    if (r < 2 * h.rem) {
        s = rhd_exchange(&h, r - 1, NULL, 0, own - bytes, bytes, 0);
        if (s != SHOAL_OK)
            return s;
    }
    s = rhd_double(&h, dst);
    if (s != SHOAL_OK || r >= 2 * h.rem)
        return s;
    shoal_ep_t *ep = shoal_team_ep(team, r - 1);
    shoal_xfer_t rest[2] = {{.ep = ep, .buf = dst, .bytes = (size_t)(r - 1) * bytes},
                            {.ep = ep, .buf = own, .bytes = total - (size_t)r * bytes}};
    return shoal_xfer_run(team, rest + (r == 1), 2 - (r == 1), NULL, 0, h.deadline_ns);
}

/* The exchanges' latency and volume over the virtual ranks: steps of
 * latency, and bytes that cross one rank's link (pbytes: the buffer being
 * halved or doubled). The fold adds a pass of fold_bytes each way. */
/* copy: bytes put into the working buffer before the first exchange, a
 * pass over memory that the ring, which reduces on the fly, does not make. */
static double rhd_cost_of(const shoal_team_t *team, double steps, double pbytes,
                          double fold_in, double fold_out, double copy)
{
    int p2 = rhd_p2(team->nranks);
    /* The largest exchanges pair ranks of different hosts, every rank of a
     * host at once: they share its link. */
    double lat = shoal_algo_lat(team), bw = shoal_algo_bw(team) / shoal_algo_host_share(team);
    double cost = steps * lat + pbytes * (p2 - 1) / p2 / bw + copy / bw;
    if (team->nranks > p2)
        cost += 2 * lat + (fold_in + fold_out) / bw;
    return cost;
}

static double rhd_allreduce_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double bytes = shoal_algo_bytes(args, args->count);
    return rhd_cost_of(team, 2.0 * rhd_log2(rhd_p2(team->nranks)), 2 * bytes, bytes, bytes,
                       bytes);
}

static double rhd_reduce_scatter_cost(const shoal_team_t *team,
                                      const shoal_coll_args_t *args)
{
    double block = shoal_algo_bytes(args, args->count), total = block * team->nranks;
    return rhd_cost_of(team, rhd_log2(rhd_p2(team->nranks)), total, total, block, total);
}

static double rhd_allgather_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double block = shoal_algo_bytes(args, args->count), total = block * team->nranks;
    return rhd_cost_of(team, rhd_log2(rhd_p2(team->nranks)), total, block, total, block);
}

/* Checks that every partner this rank will meet has an endpoint, and sets
 * the op's kernel when the collective reduces. */
static shoal_status_t rhd_plan_common(shoal_team_t *team, const shoal_coll_args_t *args,
                                      int reduces, shoal_plan_t *plan)
{
    shoal_status_t s = shoal_plan_init(team, args, reduces, plan);
    if (s != SHOAL_OK)
        return s;
    if (team->nranks == 1)
        return SHOAL_OK;

    rhd_t h;
    rhd_init(&h, plan, 1);
    int r = team->rank, fold = r < 2 * h.rem ? (r % 2 ? r - 1 : r + 1) : -1;
    if (fold >= 0 && !shoal_team_ep(team, fold))
        return SHOAL_ERR_INTERNAL;
    for (int d = 1; h.v >= 0 && d < h.p2; d *= 2) {
        if (!shoal_team_ep(team, rhd_real(&h, h.v ^ d)))
            return SHOAL_ERR_INTERNAL;
    }
    return SHOAL_OK;
}

static shoal_status_t rhd_reduce_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    shoal_status_t s = rhd_plan_common(team, args, 1, plan);
    /* A reduce-scatter reduces every block in working memory. */
    if (s == SHOAL_OK && team->nranks > 1 && args->kind == SHOAL_COLL_REDUCE_SCATTER)
        shoal_plan_reserve(plan, (size_t)team->nranks * args->count * plan->esize);
    return s;
}

static shoal_status_t rhd_gather_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    return rhd_plan_common(team, args, 0, plan);
}

const shoal_algo_ops_t shoal_rhd_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "rhd",
    .cost = rhd_allreduce_cost,
    .plan = rhd_reduce_plan,
    .run = rhd_allreduce_run,
};

const shoal_algo_ops_t shoal_rhd_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "rhd",
    .cost = rhd_reduce_scatter_cost,
    .plan = rhd_reduce_plan,
    .run = rhd_reduce_scatter_run,
};

const shoal_algo_ops_t shoal_rhd_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "rhd",
    .cost = rhd_allgather_cost,
    .plan = rhd_gather_plan,
    .run = rhd_allgather_run,
};
