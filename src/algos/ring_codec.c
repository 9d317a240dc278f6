/* Compressed ring all-reduce: the schedule of shoal_ring_allreduce_run
 * (ring_team.c) with the primitives' codec stage, for fp32 SUM and AVG.
 *
 * Pieces. A loop covers n * piece_elems values; its n blocks are rounded up
 * to whole codec blocks (not to RING_ALIGN_ELEMS), and piece_elems is the
 * largest multiple of the codec block whose wire fits a slot. Every piece
 * thus starts at a tensor index first + base + off that is a multiple of
 * the block and holds whole blocks, except the one that ends the tensor:
 * it encodes exactly as the whole tensor would (codec.h), whatever the
 * chunk size or rank count. first is 0 for a whole tensor; the
 * hierarchical schedule (hier.c) runs the ring on block-aligned segments
 * of one, whose values keep their place in the tensor for the codec's
 * random stream, shared scales and residual.
 *
 * Reduce-scatter: the first rank of a block encodes its values
 * (send_enc), each next one adds its values to the incoming wire and
 * requantises (recv_addenc_send), and the owner, the last, does the same
 * into its send slot and decodes that wire into its result
 * (recv_addenc_copy_send). The all-gather forwards that wire unchanged
 * (shoal_ring_codec_gather: recv_dec_copy_send, the last hop without
 * sending; the two-shot schedule shares it), and every rank
 * decodes the very same bytes: all ranks end with identical bits. AVG is
 * the decoded sum divided by n, on every rank alike.
 *
 * Error feedback. Each value is quantised exactly once per rank on its
 * way (its first rank encodes, every other rank add_encodes), so one call
 * writes the whole residual array of count floats on each rank. Summed
 * over the ranks, the residuals are the exact sum of the inputs minus the
 * decoded sum (for AVG: minus n times the result), up to the fp32 rounding
 * of each hop's addition and of the residuals' own sum.
 *
 * A rank alone sends nothing and so quantises nothing: it gets its input
 * exactly, and a residual of zeros (the identity above then holds
 * exactly); in a team of one that is part of an AVG over more ranks it
 * also divides. */
#include "algo.h"

#include "base/clock.h"

#include <string.h>

size_t shoal_ring_codec_piece(const shoal_codec_t *codec, size_t slot)
{
    size_t block = codec->block, one = codec->ops->wire_bytes(codec, block);
    if (one == 0 || one > slot)
        return 0;
    /* Wire sizes grow by whole blocks (a scale and block codes for int8):
     * start from the linear estimate, then settle on the exact bound. */
    size_t k = slot / one;
    while (k > 1 && codec->ops->wire_bytes(codec, k * block) > slot)
        k--;
    while (codec->ops->wire_bytes(codec, (k + 1) * block) <= slot)
        k++;
    return k * block;
}

/* A team of one sends nothing and so quantises nothing. */
static void codec_alone(shoal_prims_t *p, const float *src, float *dst, size_t count,
                        size_t first)
{
    if (dst != src)
        shoal_move(p->comm, dst, src, count * sizeof(float));
    if (p->residual) {
        if (p->comm->dry)
            p->comm->dry_bytes += count * sizeof(float);
        else
            memset(p->residual + first, 0, count * sizeof(float));
    }
    if (p->avg_n > 1)
        shoal_finish_avg(p->comm, dst, count, SHOAL_FLOAT32, p->avg_n);
}

shoal_status_t shoal_ring_codec_gather(shoal_prims_t *p, const shoal_ring_t *ring, float *dst,
                                       size_t first, size_t base, size_t real, size_t bs,
                                       int shift)
{
    int n = ring->n, r = ring->me;
    shoal_ep_t *send_ep = p->send_ep;
    shoal_status_t s = SHOAL_OK;
    /* Hop k brings the block that position r - k finished. */
    for (int k = 1; k < n && s == SHOAL_OK; k++) {
        size_t off, len;
        shoal_ring_loop_block(real, bs, (r - k + shift + 2 * n) % n, &off, &len);
        if (k == n - 1)
            p->send_ep = NULL;
        s = shoal_prim_recv_dec_copy_send(p, dst + base + off, first + base + off, len);
    }
    p->send_ep = send_ep;
    return s;
}

shoal_status_t shoal_ring_allreduce_codec_run(shoal_prims_t *p, const shoal_ring_t *ring,
                                              const float *src, float *dst, size_t count,
                                              size_t first, size_t piece_elems)
{
    int n = ring->n, r = ring->me;
    size_t block = p->codec->block;
    if (n == 1) {
        codec_alone(p, src, dst, count, first);
        return SHOAL_OK;
    }
    if (piece_elems == 0 || piece_elems % block || (count && first % block))
        return SHOAL_ERR_INTERNAL;
    shoal_ring_bind(p, ring);
    size_t loop = (size_t)n * piece_elems;
    shoal_status_t s = SHOAL_OK;
    for (size_t base = 0; base < count && s == SHOAL_OK; base += loop) {
        size_t real = count - base < loop ? count - base : loop;
        size_t bs = shoal_ring_loop_bs(real, n, block, piece_elems);
        size_t off, len;
#define PIECE(b) (shoal_ring_loop_block(real, bs, (b), &off, &len), base + off)
        /* Reduce-scatter: block b starts at position b and ends, reduced
         * and decoded, at b-1, whose send slot holds its final wire. */
        size_t at = PIECE(r);
        s = shoal_prim_send_enc(p, src + at, first + at, len);
        for (int k = 1; k < n - 1 && s == SHOAL_OK; k++) {
            at = PIECE((r - k + n) % n);
            s = shoal_prim_recv_addenc_send(p, src + at, first + at, len);
        }
        if (s != SHOAL_OK)
            break;
        at = PIECE((r + 1) % n);
#undef PIECE
        s = shoal_prim_recv_addenc_copy_send(p, src + at, dst + at, first + at, len);
        /* All-gather: each final wire goes round unchanged until it reaches
         * its owner's predecessor. */
        if (s == SHOAL_OK)
            s = shoal_ring_codec_gather(p, ring, dst, first, base, real, bs, 1);
    }
    return s == SHOAL_OK ? shoal_prim_flush(p) : s;
}

double shoal_codec_flat_cost(const struct shoal_comm *comm, const shoal_coll_args_t *args)
{
    /* 2(n-1) steps, each moving 1/n of the wire form. */
    double n = comm->nranks;
    const shoal_codec_t *c = args->codec;
    double bytes = c ? (double)c->ops->wire_bytes(c, args->count) : 0;
    return 2 * (n - 1) * (shoal_algo_lat(comm) + bytes / n / shoal_algo_bw(comm));
}

shoal_status_t shoal_codec_flat_plan(struct shoal_comm *comm, const shoal_coll_args_t *args,
                                     shoal_plan_t *plan)
{
    shoal_status_t s = shoal_ring_reduce_plan(comm, args, plan);
    if (s != SHOAL_OK)
        return s;
    if (!args->codec || args->dtype != SHOAL_FLOAT32)
        return SHOAL_ERR_INTERNAL;
    plan->prims.codec = args->codec;
    plan->prims.residual = args->residual;
    plan->codec_elems = shoal_ring_codec_piece(args->codec, comm->chunk_size);
    return plan->codec_elems ? SHOAL_OK : SHOAL_ERR_INTERNAL;
}

static shoal_status_t codec_run(shoal_plan_t *plan)
{
    const shoal_coll_args_t *a = &plan->args;
    shoal_prims_t *p = &plan->prims;
    p->deadline_ns = shoal_deadline_after(p->comm->timeout_ns);
    return shoal_ring_allreduce_codec_run(p, &plan->ring, a->sendbuf, a->recvbuf, a->count, 0,
                                          plan->codec_elems);
}

const shoal_algo_ops_t shoal_ring_codec_allreduce_ops = {
    .size = sizeof(shoal_algo_ops_t),
    .name = "ring-codec",
    .cost = shoal_codec_flat_cost,
    .plan = shoal_codec_flat_plan,
    .run = codec_run,
};
