/* The plain stage: elements travel as they are, reduced with p->reduce.
 *
 * With p->addend (error feedback's addend, fp32: the local phases of a
 * compressed hierarchical all-reduce), every move that reads src reads
 * src + addend, formed piece by piece where src is read: into the send
 * slot, or into dst before the received piece is added to it. The sum
 * comes first, so the bits are those of a sum of the input and the
 * residual made beforehand. */
#include "stage.h"

/* dst = src + the addend of the piece at first (n elements). */
static void plain_add(shoal_prims_t *p, void *dst, const void *src, size_t first, size_t n)
{
    if (n)
        shoal_combine(p->team, p->reduce, dst, src, p->addend + first, n, p->esize);
}

static size_t plain_piece_elems(const shoal_prims_t *p, size_t slot)
{
    return slot / p->esize;
}

static size_t plain_align(const shoal_prims_t *p, size_t plain)
{
    return plain;
}

static size_t plain_keep_bytes(const shoal_prims_t *p, size_t n)
{
    return 0;
}

static size_t plain_tmp_bytes(const shoal_prims_t *p, size_t n)
{
    return 0;
}

static void plain_alone(shoal_prims_t *p, const void *src, void *dst, size_t first, size_t n)
{
    if (p->addend)
        plain_add(p, dst, src, first, n);
    else if (dst != src)
        shoal_move(p->team, dst, src, n * p->esize);
    if (p->avg_n > 1)
        shoal_finish_avg(p->team, dst, n, p->dtype, p->avg_n);
}

static shoal_status_t plain_send(shoal_prims_t *p, const void *src, size_t first, size_t n)
{
    if (!p->addend)
        return shoal_prim_send(p, src, n * p->esize);
    void *out;
    shoal_status_t s = shoal_prims_wait_send(p, n * p->esize, &out);
    if (s != SHOAL_OK)
        return s;
    plain_add(p, out, src, first, n);
    return shoal_prims_post(p, n * p->esize);
}

static shoal_status_t plain_recv(shoal_prims_t *p, void *dst, size_t first, size_t n)
{
    return shoal_prim_recv(p, dst, n * p->esize);
}

static shoal_status_t plain_recv_reduce_send(shoal_prims_t *p, const void *src, size_t first,
                                             size_t n)
{
    if (!p->addend)
        return shoal_prim_recv_reduce_send(p, src, n * p->esize);
    const void *in;
    void *out;
    shoal_status_t s = shoal_prims_wait_pair(p, n * p->esize, &in, &out);
    if (s != SHOAL_OK)
        return s;
    plain_add(p, out, src, first, n);
    shoal_combine(p->team, p->reduce, out, in, out, n, p->esize);
    return shoal_prims_pass_on(p, n * p->esize, out);
}

/* dst = received op src (+ addend), finishing AVG when final; nothing
 * sent. */
static shoal_status_t plain_reduce_in(shoal_prims_t *p, const void *src, void *dst,
                                      size_t first, size_t n, int final)
{
    const void *in;
    shoal_status_t s = shoal_prims_wait_recv(p, n * p->esize, &in);
    if (s != SHOAL_OK)
        return s;
    if (p->addend) {
        plain_add(p, dst, src, first, n);
        src = dst;
    }
    shoal_combine(p->team, p->reduce, dst, in, src, n, p->esize);
    if (final && p->avg_n > 0)
        shoal_finish_avg(p->team, dst, n, p->dtype, p->avg_n);
    return shoal_prims_release(p);
}

static shoal_status_t plain_recv_reduce_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                                  size_t first, size_t n)
{
    if (!p->addend)
        return shoal_prim_recv_reduce_copy_send(p, src, dst, n * p->esize);
    shoal_status_t s = plain_reduce_in(p, src, dst, first, n, 1);
    if (s != SHOAL_OK || !p->send_ep)
        return s;
    return shoal_prim_send(p, dst, n * p->esize);
}

static shoal_status_t plain_recv_copy_send(shoal_prims_t *p, void *dst, size_t first, size_t n)
{
    return shoal_prim_recv_copy_send(p, dst, n * p->esize);
}

static shoal_status_t plain_recv_reduce(shoal_prims_t *p, const void *src, void *dst,
                                        size_t first, size_t n)
{
    return plain_reduce_in(p, src, dst, first, n, 0);
}

static shoal_status_t plain_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                      size_t first, size_t n)
{
    if (p->addend)
        plain_add(p, dst, src, first, n);
    else if (dst != src)
        shoal_move(p->team, dst, src, n * p->esize);
    if (p->avg_n > 0)
        shoal_finish_avg(p->team, dst, n, p->dtype, p->avg_n);
    return shoal_prim_send(p, dst, n * p->esize);
}

/* The plain stage's wire is the value itself: nothing to keep. */
static shoal_status_t plain_recv_reduce_keep(shoal_prims_t *p, const void *src, void *dst,
                                             void *wire, size_t first, size_t n)
{
    return plain_reduce_in(p, src, dst, first, n, 1);
}

static shoal_status_t plain_recv_copy_keep_send(shoal_prims_t *p, void *dst, void *wire,
                                                size_t first, size_t n)
{
    return shoal_prim_recv_copy_send(p, dst, n * p->esize);
}

static shoal_status_t plain_send_kept(shoal_prims_t *p, const void *dst, const void *wire,
                                      size_t first, size_t n)
{
    return shoal_prim_send(p, dst, n * p->esize);
}

const shoal_stage_ops_t shoal_stage_plain = {
    .size = sizeof(shoal_stage_ops_t),
    .name = "plain",
    .piece_elems = plain_piece_elems,
    .align = plain_align,
    .keep_bytes = plain_keep_bytes,
    .tmp_bytes = plain_tmp_bytes,
    .alone = plain_alone,
    .send = plain_send,
    .recv = plain_recv,
    .recv_reduce_send = plain_recv_reduce_send,
    .recv_reduce_copy_send = plain_recv_reduce_copy_send,
    .recv_copy_send = plain_recv_copy_send,
    .recv_reduce = plain_recv_reduce,
    .copy_send = plain_copy_send,
    .recv_reduce_keep = plain_recv_reduce_keep,
    .recv_copy_keep_send = plain_recv_copy_keep_send,
    .send_kept = plain_send_kept,
};
