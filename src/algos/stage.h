/* Stages: what one hop of a schedule does with a piece, bound at plan time
 * (p->st). A schedule (ring, two-shot, tree, ...) is written once over
 * these moves; the plain stage moves elements as they are, the codec stage
 * moves fp32 values in a codec's wire form with error feedback, and a
 * device stage will run them as GPU kernels. Every move takes n, a count
 * of elements, and first, the index in the whole tensor of the piece's
 * first element (the codec's blocks, random stream and residual are
 * indexed by it; the plain stage ignores it); src and dst point at the
 * piece itself. A piece travels in the stage's wire form (the elements
 * themselves, or a codec's), which must fit a slot: piece_elems says how
 * many elements that allows.
 *
 * "Final" moves (recv_reduce_copy_send, copy_send, recv_reduce_keep and the
 * codec stage's decodes of a final wire) finish AVG over p->avg_n ranks
 * when it is > 0; partial sums never do.
 *
 * Error feedback's addend (p->addend, fp32): every move that reads src
 * (alone, send, recv_reduce_send, recv_reduce_copy_send, recv_reduce,
 * copy_send, recv_reduce_keep) reads src + addend[first..first + n) in its
 * place, formed in the pass that reads src (the codec stage's encode
 * kernels take it as an addend; additions take it into dst first), so no
 * pass over the tensor comes before the wire. The schedule sets it only
 * while src is this rank's input, and clears it where src is a partial sum
 * that holds it already. */
#ifndef SHOAL_STAGE_H
#define SHOAL_STAGE_H

#include "prims.h"

typedef struct shoal_stage_ops {
    size_t size; /* sizeof(shoal_stage_ops_t) */
    const char *name;

    /* The most elements per piece whose wire fits slot bytes (0: none). */
    size_t (*piece_elems)(const shoal_prims_t *p, size_t slot);
    /* Loop blocks and tree halves start on multiples of this, given the
     * schedule's own alignment for plain data. */
    size_t (*align)(const shoal_prims_t *p, size_t plain);
    /* Bytes a kept wire of n elements needs (recv_reduce_keep,
     * recv_copy_keep_send); 0 when the stage keeps none because it sends
     * the value itself again (plain). */
    size_t (*keep_bytes)(const shoal_prims_t *p, size_t n);
    /* Bytes of p->tmp that recv_reduce needs for a piece of n elements. */
    size_t (*tmp_bytes)(const shoal_prims_t *p, size_t n);
    /* A team of one: dst = src (finishing AVG when avg_n > 1); the codec
     * stage quantises nothing and zeroes the residual. */
    void (*alone)(shoal_prims_t *p, const void *src, void *dst, size_t first, size_t n);

    /* src out to send_ep. */
    shoal_status_t (*send)(shoal_prims_t *p, const void *src, size_t first, size_t n);
    /* The received piece, final, into dst; nothing sent on. */
    shoal_status_t (*recv)(shoal_prims_t *p, void *dst, size_t first, size_t n);
    /* received op src, sent on (a partial sum). */
    shoal_status_t (*recv_reduce_send)(shoal_prims_t *p, const void *src, size_t first,
                                       size_t n);
    /* The last hop of a reduction: dst = received op src, final, and sent
     * on when send_ep is set (the codec stage's wire: the same bytes every
     * other rank decodes). */
    shoal_status_t (*recv_reduce_copy_send)(shoal_prims_t *p, const void *src, void *dst,
                                            size_t first, size_t n);
    /* dst = the received final piece; forwarded unchanged when send_ep is
     * set. */
    shoal_status_t (*recv_copy_send)(shoal_prims_t *p, void *dst, size_t first, size_t n);
    /* dst = received op src, a partial sum (p->tmp holds tmp_bytes);
     * nothing sent on. dst may equal src. */
    shoal_status_t (*recv_reduce)(shoal_prims_t *p, const void *src, void *dst, size_t first,
                                  size_t n);
    /* A final value from src: dst = it (the codec stage quantises src once
     * into the send slot and decodes that), sent on. dst may equal src. */
    shoal_status_t (*copy_send)(shoal_prims_t *p, const void *src, void *dst, size_t first,
                                size_t n);
    /* The root of a tree: dst = received op src, final; the wire of it is
     * kept in wire (keep_bytes(n) of the caller's memory) for send_kept.
     * Nothing sent. dst may equal src. */
    shoal_status_t (*recv_reduce_keep)(shoal_prims_t *p, const void *src, void *dst,
                                       void *wire, size_t first, size_t n);
    /* recv_copy_send that also keeps the wire in wire when it is not NULL. */
    shoal_status_t (*recv_copy_keep_send)(shoal_prims_t *p, void *dst, void *wire,
                                          size_t first, size_t n);
    /* Send again a final piece this rank holds: dst (its value) and wire
     * (what recv_reduce_keep or recv_copy_keep_send kept). */
    shoal_status_t (*send_kept)(shoal_prims_t *p, const void *dst, const void *wire,
                                size_t first, size_t n);
} shoal_stage_ops_t;

/* Elements as they are, with p->reduce and p->esize. */
extern const shoal_stage_ops_t shoal_stage_plain;
/* fp32 values in p->codec's wire form, error feedback into p->residual
 * (value i at residual[i]) when it is set. */
extern const shoal_stage_ops_t shoal_stage_codec;

#endif
