/* Ring all-reduce: reduce-scatter then all-gather around the ring of ranks,
 * over pieces of at most one slot, so every rank works on a different piece
 * at once. Each block is reduced once, by the rank that ends its reduction,
 * and forwarded unchanged: every rank gets the same bits. */
#include "algo.h"

#include "core/clock.h"
#include "core/dtype.h"
#include "core/log.h"

#include <string.h>

/* Blocks are rounded to this many elements so kernels see aligned runs. */
#define RING_ALIGN_ELEMS 16

static double ring_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    /* 2(n-1) steps, each moving 1/n of the data. */
    double n = comm->nranks;
    return 2 * (n - 1) * (shoal_algo_lat(comm) + shoal_algo_bytes(args, args->count) / n /
                                                     shoal_algo_bw(comm));
}

/* Element range [*off_p, *off_p + *len_p) of block b in a loop of real
 * elements split into n blocks of bs (the last ones may be short or empty). */
static void ring_block(size_t real, size_t bs, int b, size_t *off_p, size_t *len_p)
{
    size_t off = (size_t)b * bs;
    *off_p = off < real ? off : real;
    *len_p = off < real ? (real - off < bs ? real - off : bs) : 0;
}

static shoal_status_t ring_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    struct shoal_comm *comm = p->comm;
    int n = comm->nranks, r = comm->rank;
    size_t es = plan->esize;
    const char *src = a->sendbuf;
    char *dst = a->recvbuf;

    if (n == 1) {
        if (dst != src)
            memcpy(dst, src, a->count * es);
        return SHOAL_OK;
    }
    p->deadline_ns = shoal_deadline_after(comm->timeout_ns);
    size_t loop = (size_t)n * plan->piece_elems;
    shoal_status_t s = SHOAL_OK;
    for (size_t base = 0; base < a->count && s == SHOAL_OK; base += loop) {
        size_t real = a->count - base < loop ? a->count - base : loop;
        size_t bs = (real + (size_t)n - 1) / (size_t)n;
        bs = (bs + RING_ALIGN_ELEMS - 1) / RING_ALIGN_ELEMS * RING_ALIGN_ELEMS;
        if (bs > plan->piece_elems)
            bs = plan->piece_elems;
        size_t off, len;
#define AT(buf, o) ((buf) + (base + (o)) * es)
        /* Reduce-scatter: block b starts at rank b and ends, reduced, at b-1. */
        ring_block(real, bs, r, &off, &len);
        s = shoal_prim_send(p, AT(src, off), len * es);
        for (int k = 1; k < n - 1 && s == SHOAL_OK; k++) {
            ring_block(real, bs, (r - k + n) % n, &off, &len);
            s = shoal_prim_recv_reduce_send(p, AT(src, off), len * es);
        }
        if (s != SHOAL_OK)
            break;
        ring_block(real, bs, (r + 1) % n, &off, &len);
        s = shoal_prim_recv_reduce_copy_send(p, AT(src, off), AT(dst, off), len * es);
        /* All-gather: pass each finished block on until it reaches its owner's
         * predecessor. */
        for (int k = 1; k < n - 1 && s == SHOAL_OK; k++) {
            ring_block(real, bs, (r + 1 - k + n) % n, &off, &len);
            s = shoal_prim_recv_copy_send(p, AT(dst, off), len * es);
        }
        if (s != SHOAL_OK)
            break;
        ring_block(real, bs, (r + 2) % n, &off, &len);
        s = shoal_prim_recv(p, AT(dst, off), len * es);
#undef AT
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

const shoal_algo_ops_t shoal_ring_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring",
    .cost = ring_cost,
    .plan = shoal_ring_reduce_plan,
    .run = ring_run,
};
