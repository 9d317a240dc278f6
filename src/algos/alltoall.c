/* All-to-all and all-to-all-v, two schedules over the message engine.
 *
 * Pairwise: n-1 steps; in step k rank r sends its block for r+k and
 * receives the block of r-k, so each step is a perfect matching (every rank
 * sends to one peer and receives from one) and only one pair of streams per
 * rank is in flight. It pays n-1 latencies but keeps memory and links
 * streaming, which wins for large blocks on many ranks.
 *
 * Direct: every block to and from every peer in one shoal_xfer_run. One
 * latency, but 2(n-1) streams interleave in the FIFOs and caches, which
 * wins for small blocks.
 *
 * Both serve SHOAL_COLL_ALLTOALL and SHOAL_COLL_ALLTOALLV (see
 * shoal_coll_args_t); this rank's own block is copied locally. Empty blocks
 * are not sent at all: the receiver's count says nothing comes, and a rank
 * whose blocks are all empty may then skip the call altogether. */
#include "algo.h"

#include "base/clock.h"
#include "base/dtype.h"
#include "base/log.h"

#include <string.h>

/* Concurrent streams per rank that the direct schedule runs at full speed;
 * each one beyond adds this fraction of a stream's time to every block, a
 * stand-in for FIFO, cache and link contention. */
#define DIRECT_FREE_STREAMS 2
#define DIRECT_CONTENTION (1.0 / 8)

/* Elements that this rank sends to peers other than itself, averaged over
 * the n-1 peers: the block size that the cost model charges per step. */
static double a2a_block_bytes(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    int n = team->nranks;
    if (args->kind == SHOAL_COLL_ALLTOALL || n == 1)
        return shoal_algo_bytes(args, args->count);
    size_t total = 0;
    for (int j = 0; j < n; j++) {
        if (j != team->rank)
            total += args->sendcounts[j];
    }
    return shoal_algo_bytes(args, total) / (n - 1);
}

/* Across hosts, every rank of a host sends at once over the host's link. */
static double a2a_bw(const shoal_team_t *team)
{
    return shoal_algo_bw(team) / shoal_algo_host_share(team);
}

static double pairwise_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double n = team->nranks;
    return (n - 1) * (shoal_algo_lat(team) + a2a_block_bytes(team, args) / a2a_bw(team));
}

static double direct_cost(const shoal_team_t *team, const shoal_coll_args_t *args)
{
    double n = team->nranks;
    double extra = n - 1 > DIRECT_FREE_STREAMS ? n - 1 - DIRECT_FREE_STREAMS : 0;
    return shoal_algo_lat(team) + (n - 1) * a2a_block_bytes(team, args) / a2a_bw(team) *
                                      (1 + DIRECT_CONTENTION * extra);
}

static shoal_status_t a2a_plan(shoal_team_t *team, const shoal_coll_args_t *args,
                               shoal_plan_t *plan)
{
    int n = team->nranks, r = team->rank;
    if (args->kind != SHOAL_COLL_ALLTOALL && args->kind != SHOAL_COLL_ALLTOALLV)
        return SHOAL_ERR_INTERNAL;
    shoal_status_t s = shoal_plan_init(team, args, 0, plan);
    if (s != SHOAL_OK)
        return s;
    if (args->kind == SHOAL_COLL_ALLTOALLV) {
        if (!args->sendcounts || !args->sdispls || !args->recvcounts || !args->rdispls)
            return SHOAL_ERR_INTERNAL;
        /* The own block is a local copy: both sides must agree on it. */
        if (args->sendcounts[r] != args->recvcounts[r]) {
            shoal_error(ALGO, "rank %d: alltoallv sends itself %zu elements but expects %zu",
                        r, args->sendcounts[r], args->recvcounts[r]);
            return SHOAL_ERR_INVALID_ARG;
        }
    }
    for (int j = 0; j < n; j++) {
        if (j != r && !shoal_team_ep(team, j))
            return SHOAL_ERR_INTERNAL;
    }
    /* The direct schedule's messages (a handful of bytes per peer). */
    shoal_plan_reserve(plan, 2 * (size_t)(n - 1) * sizeof(shoal_xfer_t));
    return SHOAL_OK;
}

/* The message of this rank's block for (send) or from (!send) rank j. */
static void a2a_block(const shoal_plan_t *plan, int j, int send, shoal_xfer_t *x)
{
    const shoal_coll_args_t *a = &plan->args;
    size_t off, count;
    if (a->kind == SHOAL_COLL_ALLTOALL) {
        off = (size_t)j * a->count;
        count = a->count;
    } else {
        off = send ? a->sdispls[j] : a->rdispls[j];
        count = send ? a->sendcounts[j] : a->recvcounts[j];
    }
    char *base = send ? (char *)a->sendbuf : (char *)a->recvbuf;
    memset(x, 0, sizeof(*x));
    x->ep = shoal_team_ep(plan->prims.team, j);
    /* A 0-element block may come with a NULL buffer: no byte is touched. */
    x->buf = count ? base + off * plan->esize : base;
    x->bytes = count * plan->esize;
    x->esize = plan->esize;
}

static void a2a_copy_own(const shoal_plan_t *plan)
{
    shoal_xfer_t in, out;
    int r = plan->prims.team->rank;
    a2a_block(plan, r, 1, &in);
    a2a_block(plan, r, 0, &out);
    /* The core stages an in-place call's input, so the blocks never overlap. */
    if (in.bytes)
        shoal_move_out(plan->prims.team, out.buf, in.buf, in.bytes);
}

static shoal_status_t pairwise_run(shoal_plan_t *plan)
{
    shoal_team_t *team = plan->prims.team;
    int n = team->nranks, r = team->rank;
    a2a_copy_own(plan);
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    shoal_status_t s = SHOAL_OK;
    for (int k = 1; k < n && s == SHOAL_OK; k++) {
        shoal_xfer_t out, in;
        a2a_block(plan, (r + k) % n, 1, &out);
        a2a_block(plan, (r - k + n) % n, 0, &in);
        s = shoal_xfer_run(team, &out, out.bytes > 0, &in, in.bytes > 0, deadline);
    }
    return s;
}

static shoal_status_t direct_run(shoal_plan_t *plan)
{
    shoal_team_t *team = plan->prims.team;
    int n = team->nranks, r = team->rank;
    a2a_copy_own(plan);
    if (n == 1)
        return SHOAL_OK;
    uint64_t deadline = shoal_deadline_after(team->timeout_ns);
    /* The message array lives in the plan's working memory. */
    size_t m = (size_t)n - 1;
    void *mem;
    shoal_status_t s = shoal_plan_scratch(plan, 2 * m * sizeof(shoal_xfer_t), &mem);
    if (s != SHOAL_OK)
        return s;
    shoal_xfer_t *x = mem;
    /* Peers in the order of the pairwise steps: r+1 first, so the ranks'
     * first pieces spread over distinct receivers. */
    size_t ns = 0, nr = 0;
    for (int k = 1; k < n; k++) {
        a2a_block(plan, (r + k) % n, 1, &x[ns]);
        ns += x[ns].bytes > 0;
        a2a_block(plan, (r - k + n) % n, 0, &x[m + nr]);
        nr += x[m + nr].bytes > 0;
    }
    return shoal_xfer_run(team, x, ns, x + m, nr, deadline);
}

const shoal_algo_ops_t shoal_pairwise_alltoall_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "pairwise",
    .cost = pairwise_cost,
    .plan = a2a_plan,
    .run = pairwise_run,
};

const shoal_algo_ops_t shoal_direct_alltoall_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "direct",
    .cost = direct_cost,
    .plan = a2a_plan,
    .run = direct_run,
};
