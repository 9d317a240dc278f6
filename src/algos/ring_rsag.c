/* Ring reduce-scatter and ring all-gather: the two halves of the ring
 * all-reduce as collectives of their own. Block b is the b-th run of count
 * elements of the n-block buffer; a loop moves one piece (at most one slot)
 * of every block, so every rank works on a different block at once and
 * several loops pipeline through the slot FIFOs. */
#include "algo.h"

#include "core/clock.h"
#include "core/dtype.h"

#include <string.h>

static double rsag_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    /* n-1 steps, each moving one block of count elements. */
    double n = comm->nranks;
    return (n - 1) * (shoal_algo_lat(comm) + shoal_algo_bytes(args, args->count) /
                                                 shoal_algo_bw(comm));
}

/* The part of the plan shared by both: ring neighbours and piece size. The
 * all-gather plan is just this; it leaves p->reduce NULL because it only
 * uses the primitives that copy. */
static shoal_status_t rsag_plan_ring(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    int n = comm->nranks;
    memset(plan, 0, sizeof(*plan));
    plan->args = *args;
    plan->esize = shoal_dtype_bytes(args->dtype);
    if (plan->esize == 0)
        return SHOAL_ERR_INTERNAL;
    plan->piece_elems = comm->chunk_size / plan->esize;
    shoal_prims_t *p = &plan->prims;
    p->comm = comm;
    p->send_ep = n > 1 ? shoal_comm_ep(comm, (comm->rank + 1) % n) : NULL;
    p->recv_ep = n > 1 ? shoal_comm_ep(comm, (comm->rank + n - 1) % n) : NULL;
    p->dtype = args->dtype;
    p->esize = plan->esize;
    if (plan->piece_elems == 0 || (n > 1 && (!p->send_ep || !p->recv_ep)))
        return SHOAL_ERR_INTERNAL;
    return SHOAL_OK;
}

shoal_status_t shoal_ring_reduce_plan(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                      shoal_plan_t *plan)
{
    shoal_status_t s = rsag_plan_ring(comm, args, plan);
    if (s != SHOAL_OK)
        return s;
    plan->prims.reduce = shoal_reduce_fn(args->dtype, args->op);
    plan->prims.avg_n = args->op == SHOAL_AVG ? comm->nranks : 0;
    return plan->prims.reduce ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

/* Step k of a loop handles block (r - 1 - k) mod n: block b is sent first by
 * rank b+1, gathers one rank's contribution per hop and arrives, reduced by
 * all n ranks, at rank b in step n-1. */
static shoal_status_t rs_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    struct shoal_comm *comm = p->comm;
    int n = comm->nranks, r = comm->rank;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;

    if (n == 1) {
        /* One rank's AVG is its own value: nothing to finish. */
        if (dst != src)
            memcpy(dst, src, a->count * es);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(comm->timeout_ns);
    shoal_ep_t *send_ep = p->send_ep;
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
#define BLOCK(k) (src + ((size_t)((r - 1 - (k) + 2 * n) % n) * a->count + off) * es)
        s = shoal_prim_send(p, BLOCK(0), bytes);
        for (int k = 1; k < n - 1 && s == SHOAL_OK; k++)
            s = shoal_prim_recv_reduce_send(p, BLOCK(k), bytes);
        if (s != SHOAL_OK)
            break;
        /* The last hop ends at its owner: reduce into recvbuf (finishing
         * AVG) and send nothing on. In place, BLOCK(n-1) is dst itself,
         * which the kernels allow. */
        p->send_ep = NULL;
        s = shoal_prim_recv_reduce_copy_send(p, BLOCK(n - 1), dst + off * es, bytes);
        p->send_ep = send_ep;
#undef BLOCK
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

/* Rank r sends its own piece, forwards the n-2 pieces that reach it before
 * they come back round, and keeps the last: step k brings block (r - k)
 * mod n. */
static shoal_status_t ag_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    struct shoal_comm *comm = p->comm;
    int n = comm->nranks, r = comm->rank;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;
    char *own = dst + (size_t)r * a->count * es;

    if (own != src)
        memcpy(own, src, a->count * es);
    if (n == 1)
        return SHOAL_OK;
    p->deadline_ns = shoal_deadline_after(comm->timeout_ns);
    shoal_status_t s = SHOAL_OK;
    for (size_t off = 0; off < a->count && s == SHOAL_OK; off += plan->piece_elems) {
        size_t len = a->count - off < plan->piece_elems ? a->count - off : plan->piece_elems;
        size_t bytes = len * es;
#define BLOCK(k) (dst + ((size_t)((r - (k) + n) % n) * a->count + off) * es)
        s = shoal_prim_send(p, BLOCK(0), bytes);
        for (int k = 1; k < n - 1 && s == SHOAL_OK; k++)
            s = shoal_prim_recv_copy_send(p, BLOCK(k), bytes);
        if (s == SHOAL_OK)
            s = shoal_prim_recv(p, BLOCK(n - 1), bytes);
#undef BLOCK
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

const shoal_algo_ops_t shoal_ring_reduce_scatter_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = rsag_cost,
    .plan = shoal_ring_reduce_plan,
    .run = rs_run,
};

const shoal_algo_ops_t shoal_ring_allgather_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = rsag_cost,
    .plan = rsag_plan_ring,
    .run = ag_run,
};
