/* The codec stage: fp32 values travel in p->codec's wire form (int8,
 * ternary), with error feedback into p->residual when it is set. Each
 * quantisation writes the residual of the values it quantised; every
 * decode of a final wire finishes AVG, so every rank that decodes the same
 * bytes gets the same bits.
 *
 * Error feedback's addend (p->addend, the last call's residual) joins src
 * inside the move that reads src: the codec's fused kernels encode
 * src + addend and write the new residual in the same loop over the piece
 * (codec.h), and a move that only adds src (recv_reduce, alone) adds the
 * addend to it first, piece by piece, each sum rounded once as a pass of
 * its own over the whole tensor would round it. So the wire starts with
 * the first piece, and the results are bitwise those of adding the
 * residual to the input beforehand.
 *
 * A decode of a wire that this rank sends (the reduction's last hop, the
 * gather's hops, a final copy-send) reads it back from the send slot after
 * the slot is posted: posted bytes are read-only to both ends, and the
 * slot stays this rank's until it asks for one again, so the decode runs
 * while the piece is on its way instead of before it leaves. */
#include "stage.h"

#include "algo.h"

static size_t codec_wire(const shoal_prims_t *p, size_t n)
{
    return p->codec->ops->wire_bytes(p->codec, n);
}

static float *codec_residual(const shoal_prims_t *p, size_t first)
{
    return p->residual ? p->residual + first : NULL;
}

static const float *codec_addend(const shoal_prims_t *p, size_t first)
{
    return p->addend ? p->addend + first : NULL;
}

static void codec_encode(shoal_prims_t *p, void *wire, const float *src, size_t first, size_t n)
{
    shoal_team_t *team = p->team;
    team->kern->encode(team, p->codec, wire, src, codec_addend(p, first),
                       codec_residual(p, first), n, first);
}

static void codec_add_encode(shoal_prims_t *p, void *out, const void *in, const float *src,
                             size_t first, size_t n)
{
    shoal_team_t *team = p->team;
    team->kern->add_encode(team, p->codec, out, in, src, codec_addend(p, first),
                           codec_residual(p, first), n, first);
}

/* dst = decode(wire), AVG finished: the same bits on every rank that
 * decodes the same wire. */
static void codec_decode(shoal_prims_t *p, float *dst, const void *wire, size_t first, size_t n)
{
    shoal_team_t *team = p->team;
    team->kern->decode(team, p->codec, dst, wire, n, first);
    if (p->avg_n > 0 && n)
        shoal_finish_avg(team, dst, n, SHOAL_FLOAT32, p->avg_n);
}

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

static size_t codec_piece_elems(const shoal_prims_t *p, size_t slot)
{
    return shoal_ring_codec_piece(p->codec, slot);
}

static size_t codec_align(const shoal_prims_t *p, size_t plain)
{
    return p->codec->block;
}

static size_t codec_tmp_bytes(const shoal_prims_t *p, size_t n)
{
    return n * sizeof(float);
}

/* A rank alone sends nothing and so quantises nothing: its input (plus
 * the addend) exactly, and a residual of zeros, written after the addend
 * was read (it may be the addend). */
static void codec_alone(shoal_prims_t *p, const void *src, void *dst, size_t first, size_t n)
{
    shoal_team_t *team = p->team;
    if (p->addend && n)
        shoal_combine(team, p->reduce, dst, src, p->addend + first, n, sizeof(float));
    else if (dst != src)
        shoal_move(team, dst, src, n * sizeof(float));
    if (p->residual)
        team->kern->zero(team, p->residual + first, n * sizeof(float));
    if (p->avg_n > 1)
        shoal_finish_avg(team, dst, n, SHOAL_FLOAT32, p->avg_n);
}

/* src encoded into the send slot and sent; with dst, also dst = decode of
 * that wire, read back from the slot after it is posted (see the top). */
static shoal_status_t enc_send(shoal_prims_t *p, const void *src, void *dst, size_t first,
                               size_t n)
{
    size_t bytes = codec_wire(p, n);
    void *out;
    shoal_status_t s = shoal_prims_wait_send(p, bytes, &out);
    if (s != SHOAL_OK)
        return s;
    codec_encode(p, out, src, first, n);
    s = shoal_prims_post(p, bytes);
    if (s == SHOAL_OK && dst)
        codec_decode(p, dst, out, first, n);
    return s;
}

static shoal_status_t codec_send(shoal_prims_t *p, const void *src, size_t first, size_t n)
{
    return enc_send(p, src, NULL, first, n);
}

static shoal_status_t codec_recv(shoal_prims_t *p, void *dst, size_t first, size_t n)
{
    const void *in;
    shoal_status_t s = shoal_prims_wait_recv(p, codec_wire(p, n), &in);
    if (s != SHOAL_OK)
        return s;
    codec_decode(p, dst, in, first, n);
    return shoal_prims_release(p);
}

static shoal_status_t codec_recv_reduce(shoal_prims_t *p, const void *src, void *dst,
                                        size_t first, size_t n);

/* Received (+) src encoded into the send slot and sent on; with dst, also
 * dst = decode of that wire, read back from the slot after it is posted
 * (the gather phase's first send then needs no copy of it).
 *
 * A last hop that sends nothing on (the ring reduce-scatter's, at the
 * block's owner) keeps its sum in full precision: the decoded wire plus
 * src (and the addend) in fp32, AVG finished. The owner's own values were
 * never quantised, so their residual is 0. */
static shoal_status_t recv_addenc(shoal_prims_t *p, const void *src, void *dst, size_t first,
                                  size_t n)
{
    if (!p->send_ep) {
        if (!dst || !p->tmp)
            return SHOAL_ERR_INTERNAL;
        shoal_status_t s = codec_recv_reduce(p, src, dst, first, n);
        if (s == SHOAL_OK && p->residual && n)
            p->team->kern->zero(p->team, p->residual + first, n * sizeof(float));
        if (s == SHOAL_OK && p->avg_n > 1 && n)
            shoal_finish_avg(p->team, dst, n, SHOAL_FLOAT32, p->avg_n);
        return s;
    }
    size_t bytes = codec_wire(p, n);
    const void *in;
    void *out;
    shoal_status_t s = shoal_prims_wait_pair(p, bytes, &in, &out);
    if (s != SHOAL_OK)
        return s;
    codec_add_encode(p, out, in, src, first, n);
    s = shoal_prims_pass_on(p, bytes, out);
    if (s == SHOAL_OK && dst)
        codec_decode(p, dst, out, first, n);
    return s;
}

static shoal_status_t codec_recv_reduce_send(shoal_prims_t *p, const void *src, size_t first,
                                             size_t n)
{
    return recv_addenc(p, src, NULL, first, n);
}

static shoal_status_t codec_recv_reduce_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                                  size_t first, size_t n)
{
    return recv_addenc(p, src, dst, first, n);
}

/* dst = the decoded wire, forwarded unchanged (and kept in wire when it is
 * not NULL); decoded from the copy sent on, after it is posted. */
static shoal_status_t codec_recv_copy_keep_send(shoal_prims_t *p, void *dst, void *wire,
                                                size_t first, size_t n)
{
    size_t bytes = codec_wire(p, n);
    const void *in;
    void *out;
    shoal_status_t s = shoal_prims_wait_pair(p, bytes, &in, &out);
    if (s != SHOAL_OK)
        return s;
    if (!out)
        codec_decode(p, dst, in, first, n);
    else
        shoal_move(p->team, out, in, bytes);
    if (wire)
        shoal_move(p->team, wire, in, bytes);
    s = shoal_prims_pass_on(p, bytes, out);
    if (s == SHOAL_OK && out)
        codec_decode(p, dst, out, first, n);
    return s;
}

static shoal_status_t codec_recv_copy_send(shoal_prims_t *p, void *dst, size_t first, size_t n)
{
    return codec_recv_copy_keep_send(p, dst, NULL, first, n);
}

/* The owner's part of a direct exchange: dst = decode(received) + src in
 * fp32, through p->tmp (no AVG: a partial sum). With the addend,
 * decode(received) + (src + addend): src + addend into dst first, the
 * piece still in cache for the second addition. */
static shoal_status_t codec_recv_reduce(shoal_prims_t *p, const void *src, void *dst,
                                        size_t first, size_t n)
{
    shoal_team_t *team = p->team;
    const void *in;
    shoal_status_t s = shoal_prims_wait_recv(p, codec_wire(p, n), &in);
    if (s != SHOAL_OK)
        return s;
    team->kern->decode(team, p->codec, p->tmp, in, n, first);
    if (p->addend && n) {
        shoal_combine(team, p->reduce, dst, src, p->addend + first, n, sizeof(float));
        src = dst;
    }
    shoal_combine(team, p->reduce, dst, p->tmp, src, n, sizeof(float));
    return shoal_prims_release(p);
}

/* A final value quantised once into the send slot and decoded from it:
 * the same bytes every other rank will decode. */
static shoal_status_t codec_copy_send(shoal_prims_t *p, const void *src, void *dst,
                                      size_t first, size_t n)
{
    return enc_send(p, src, dst, first, n);
}

static shoal_status_t codec_recv_reduce_keep(shoal_prims_t *p, const void *src, void *dst,
                                             void *wire, size_t first, size_t n)
{
    const void *in;
    shoal_status_t s = shoal_prims_wait_recv(p, codec_wire(p, n), &in);
    if (s != SHOAL_OK)
        return s;
    codec_add_encode(p, wire, in, src, first, n);
    codec_decode(p, dst, wire, first, n);
    return shoal_prims_release(p);
}

/* The kept wire goes out again unchanged. */
static shoal_status_t codec_send_kept(shoal_prims_t *p, const void *dst, const void *wire,
                                      size_t first, size_t n)
{
    return shoal_prim_send(p, wire, codec_wire(p, n));
}

const shoal_stage_ops_t shoal_stage_codec = {
    .size = sizeof(shoal_stage_ops_t),
    .name = "codec",
    .piece_elems = codec_piece_elems,
    .align = codec_align,
    .keep_bytes = codec_wire,
    .tmp_bytes = codec_tmp_bytes,
    .alone = codec_alone,
    .send = codec_send,
    .recv = codec_recv,
    .recv_reduce_send = codec_recv_reduce_send,
    .recv_reduce_copy_send = codec_recv_reduce_copy_send,
    .recv_copy_send = codec_recv_copy_send,
    .recv_reduce = codec_recv_reduce,
    .copy_send = codec_copy_send,
    .recv_reduce_keep = codec_recv_reduce_keep,
    .recv_copy_keep_send = codec_recv_copy_keep_send,
    .send_kept = codec_send_kept,
};
