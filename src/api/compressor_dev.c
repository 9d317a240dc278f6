/* Compressed all-reduces of device tensors (shoal_allreduce_compressed_stream):
 * INT8 with its error feedback on the device, through the staged path of
 * stream-ordered calls (core/dev_stage.h) with a stager of its own, so
 * that only the compressed wire crosses between device and host.
 *
 * The schedule is the two-shot one (algos/twoshot.c's), cut into n chunks
 * of whole codec blocks, chunk j belonging to rank j:
 * - on the stream, before the host side: the input (widened to fp32 on
 *   the device for float16 and bfloat16) plus the last residual is
 *   encoded chunk by chunk into the pinned slot, except this rank's own
 *   chunk, which goes there exactly, in fp32; the encode writes the new
 *   residual of those values on the device;
 * - on the host (call->run, on the progress thread): an all-to-all brings
 *   every rank's encoded contribution to the chunk's owner, who adds their
 *   decoded values to its own exact ones in a fixed order (rank me-1
 *   first, as twoshot.c), quantises the sum once (its residual: the sum
 *   minus its decoded value) and all-gathers the encoded sums;
 * - on the stream, after the host side: every chunk decoded into the
 *   result on the device (AVG divides by n there; float16 and bfloat16
 *   narrowed there), and the owner's residual of its chunk copied in.
 * Every rank decodes the same bytes, so all end with the same bits. A rank
 * alone returns its input plus residual exactly (residual 0), as the host
 * path does. On one host the same schedule may run device to device
 * (int8_direct_run): the payload's layout then lives in the compressor's
 * device scratch, which the peers read.
 *
 * TERNARY (its scales shared) is two staged calls, each with a host side:
 * the stream writes each block's largest |input plus residual| (and, to
 * clip, the block's sum and squared deviations) into the first one's
 * slot, the host clips the maxima to k deviations of the whole tensor,
 * rounds them up to bf16 and takes their max over the ranks (as
 * compressor.c does), and the
 * stream copies the shared scales to the device; then it encodes the
 * input plus residual into the second's slot as 8-bit codes (the new
 * residual on the device), the host sums the codes over the ranks (an
 * int8 all-reduce, exact up to 127 ranks), and the stream decodes the
 * sums, which every rank holds alike. A rank alone takes INT8's way: its
 * input, exactly.
 *
 * The residuals and the step a call uses are fixed when it is queued, and
 * the next call's follow at once, so calls on one compressor queue one
 * behind the other on one stream without waiting for each other. A call
 * that fails after its stream side was queued leaves the device residual
 * undefined: the compressor remembers it (dev.lost), and its checkpoint
 * refuses until set_state or reset. */
#include "compressor_priv.h"

#include "base/config.h"
#include "compress/codec.h"
#include "core/coll.h"
#include "core/comm.h"
#include "core/dev_priv.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Where a call's data lies in its slot's payload (bytes). */
typedef struct {
    int n, me;
    size_t cw, cl;                /* wire bytes and values of the largest chunk */
    size_t w_in, w_rx, w_own, w_out; /* n * cw each, but w_own: cw */
    size_t mine, tmp, sum, err;   /* cl floats each */
    size_t need;
} dev_lay_t;

shoal_codec_t shoal_comp_dev_host_codec(const struct shoal_compressor *c, int rank,
                                        uint64_t step)
{
    return (shoal_codec_t){
        .ops = &shoal_codec_int8, .block = c->opt.block,
        .round = c->opt.stochastic ? SHOAL_ROUND_STOCHASTIC : SHOAL_ROUND_NEAREST,
        .seed = shoal_comp_rank_seed(c, rank), .step = step,
    };
}

/* Chunk j: blocks nb j / n .. nb (j + 1) / n of the nb codec blocks. */
static void chunk_of(const struct shoal_compressor *c, int n, int j, size_t *lo, size_t *len)
{
    size_t b = c->opt.block, nb = c->count / b + (c->count % b != 0);
    size_t b0 = nb * (size_t)j / (size_t)n, b1 = nb * ((size_t)j + 1) / (size_t)n;
    size_t hi = b1 * b < c->count ? b1 * b : c->count;
    *lo = b0 * b;
    *len = hi > *lo ? hi - *lo : 0;
}

static void lay_of(const struct shoal_compressor *c, dev_lay_t *l)
{
    shoal_codec_t codec = shoal_comp_dev_host_codec(c, 0, 0);
    memset(l, 0, sizeof(*l));
    l->n = c->nranks;
    l->me = c->comm->team.rank;
    for (int j = 0; j < l->n; j++) {
        size_t lo, len;
        chunk_of(c, l->n, j, &lo, &len);
        if (len > l->cl)
            l->cl = len;
    }
    l->cw = codec.ops->wire_bytes(&codec, l->cl);
    size_t wires = shoal_comp_up64((size_t)l->n * l->cw);
    size_t floats = shoal_comp_up64(l->cl * sizeof(float));
    l->w_in = 0;
    l->w_rx = l->w_in + wires;
    l->w_out = l->w_rx + wires;
    l->w_own = l->w_out + wires;
    l->mine = l->w_own + shoal_comp_up64(l->cw);
    l->tmp = l->mine + floats;
    l->sum = l->tmp + floats;
    l->err = l->sum + floats;
    l->need = l->err + floats;
}

static size_t stage_need(const shoal_call_t *call)
{
    dev_lay_t l;
    lay_of(call->comp, &l);
    return l.need;
}

shoal_dev_codec_args_t shoal_comp_dev_codec(const struct shoal_compressor *c, int rank,
                                            uint64_t step, shoal_dev_codec_op_t op)
{
    shoal_codec_t h = shoal_comp_dev_host_codec(c, rank, step);
    return (shoal_dev_codec_args_t){.op = op, .kind = SHOAL_DEV_CODEC_INT8, .block = h.block,
                                    .round = (int)h.round, .seed = h.seed, .step = h.step};
}


shoal_status_t shoal_comp_dev_encode_part(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                          const float *x, size_t lo, size_t len, void *wire)
{
    const float *res_in = call->args.residual_in;
    float *res = call->args.residual;
    shoal_dev_codec_args_t a = shoal_comp_dev_codec(call->comp, call->comp->comm->team.rank,
                                                    call->comp_step, SHOAL_DEV_CODEC_ENCODE);
    a.wire_out = wire;
    a.src = x + lo;
    a.addend = res_in ? res_in + lo : NULL;
    a.residual = res ? res + lo : NULL;
    a.count = len;
    a.first = lo;
    return ops->codec(&a, call->stream);
}

shoal_status_t shoal_comp_dev_exact_part(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                         const float *x, size_t lo, size_t len, void *dst)
{
    const float *res_in = call->args.residual_in;
    return res_in ? ops->reduce(dst, x + lo, res_in + lo, len, SHOAL_FLOAT32, SHOAL_SUM,
                                call->stream)
                  : ops->copy(dst, x + lo, len * sizeof(float), call->stream);
}

void shoal_comp_dev_owner_sum(const shoal_call_t *call, float *sum, float *tmp,
                              const unsigned char *wires, size_t cw, size_t len, size_t first)
{
    const struct shoal_compressor *c = call->comp;
    int n = c->nranks, me = c->comm->team.rank;
    for (int k = 1; k < n; k++) {
        int from = (me - k + n) % n;
        shoal_codec_t cd = shoal_comp_dev_host_codec(c, from, call->comp_step);
        cd.ops->decode(&cd, tmp, wires + (size_t)from * cw, len, first);
        for (size_t i = 0; i < len; i++)
            sum[i] = sum[i] + tmp[i];
    }
}

/* Before the host side: the contributions to the others' chunks encoded
 * into w_in, this rank's own chunk exact into mine. */
static shoal_status_t stage_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const float *x;
    dev_lay_t l;
    size_t lo, len;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &x);
    lay_of(c, &l);
    for (int j = 0; j < l.n && r == SHOAL_OK; j++) {
        chunk_of(c, l.n, j, &lo, &len);
        if (j != l.me && len > 0)
            r = shoal_comp_dev_encode_part(ops, call, x, lo, len,
                                           pay + l.w_in + (size_t)j * l.cw);
    }
    chunk_of(c, l.n, l.me, &lo, &len);
    if (r == SHOAL_OK && len > 0)
        r = shoal_comp_dev_exact_part(ops, call, x, lo, len, pay + l.mine);
    return r;
}

/* After the host side: the encoded sums decoded into the result, the
 * owner's residual of its chunk, from pay's layout. */
static shoal_status_t decode_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                  const unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    float *res = call->args.residual;
    float *out = c->dtype == SHOAL_FLOAT32 ? call->args.recvbuf : c->dev.x;
    void *st = call->stream;
    dev_lay_t l;
    size_t lo, len;
    shoal_status_t r = SHOAL_OK;
    lay_of(c, &l);
    if (l.n == 1)
        r = ops->copy(out, pay + l.sum, c->count * sizeof(float), st);
    for (int j = 0; l.n > 1 && j < l.n && r == SHOAL_OK; j++) {
        chunk_of(c, l.n, j, &lo, &len);
        if (len == 0)
            continue;
        shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, j, call->comp_step,
                                                        SHOAL_DEV_CODEC_DECODE);
        a.wire_in = pay + l.w_out + (size_t)j * l.cw;
        a.dst = out + lo;
        a.count = len;
        a.first = lo;
        r = ops->codec(&a, st);
    }
    if (r == SHOAL_OK && l.n > 1 && call->args.op == SHOAL_AVG)
        r = ops->avg(out, out, c->count, SHOAL_FLOAT32, l.n, st);
    if (r == SHOAL_OK && c->dtype != SHOAL_FLOAT32)
        r = ops->convert(call->args.recvbuf, c->dtype, out, SHOAL_FLOAT32, c->count, st);
    chunk_of(c, l.n, l.me, &lo, &len);
    if (r == SHOAL_OK && res && len > 0)
        r = ops->copy(res + lo, pay + l.err, len * sizeof(float), st);
    return r;
}

/* The host side finds its data in the payload. */
static shoal_status_t stage_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                 unsigned char *pay)
{
    shoal_status_t r = decode_post(ops, call, pay);
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
    return r;
}

static const shoal_dev_stager_t comp_stager = {
    .need = stage_need,
    .pre = stage_pre,
    .post = stage_post,
};

/* The direct path's: the same layout in the compressor's device scratch
 * (dev.wire), which the peers read; the pinned payload serves the host
 * side only where some rank cannot go direct (int8_direct_run). */
static shoal_status_t direct_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                 unsigned char *pay)
{
    (void)pay;
    return stage_pre(ops, call, call->comp->dev.wire);
}

static shoal_status_t direct_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                  unsigned char *pay)
{
    shoal_status_t r = decode_post(ops, call, call->comp->dev.wire);
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
    return r;
}

static const shoal_dev_stager_t direct_stager = {
    .need = stage_need,
    .pre = direct_pre,
    .post = direct_post,
};

/* ---- TERNARY: the scales' call, then the codes' ---- */

static size_t nblocks_of(const struct shoal_compressor *c)
{
    return c->count / c->opt.block + (c->count % c->opt.block != 0);
}

/* The scales' payload: the block maxima (fp32), the same as bf16 for
 * their all-reduce, the shared scales (fp32), then with clipping the
 * blocks' moments (two doubles each). */
enum { T_AMAX, T_S16, T_SCALES, T_MOMENTS, T_END };

static size_t tscales_off(const struct shoal_compressor *c, int which)
{
    size_t nb = nblocks_of(c);
    size_t offs[T_END + 1] = {0};
    offs[T_S16] = shoal_comp_up64(nb * sizeof(float));
    offs[T_SCALES] = offs[T_S16] + shoal_comp_up64(nb * sizeof(uint16_t));
    offs[T_MOMENTS] = offs[T_SCALES] + shoal_comp_up64(nb * sizeof(float));
    offs[T_END] = offs[T_MOMENTS] + (c->opt.clip_sigma > 0 ? 2 * nb * sizeof(double) : 0);
    return offs[which];
}

static size_t tscales_need(const shoal_call_t *call)
{
    return tscales_off(call->comp, T_END);
}

/* The clipping bound (compress/codec.h's clip bound, k population
 * standard deviations of input plus residual) from the blocks' moments:
 * the mean of the block sums, then the blocks' squared deviations, each
 * moved to that mean (Chan's combination), in the blocks' order. 0 (no
 * clipping) for a constant tensor, non-finite values, or a bound beyond
 * the floats. */
static float clip_bound_of(const double *mom, size_t count, size_t block, float k)
{
    size_t nb = count / block + (count % block != 0);
    double total = 0, m2 = 0;
    if (!(k > 0) || count == 0)
        return 0.0f;
    for (size_t b = 0; b < nb; b++)
        total += mom[2 * b];
    double mean = total / (double)count;
    for (size_t b = 0; b < nb; b++) {
        size_t n = b + 1 < nb || count % block == 0 ? block : count % block;
        double d = mom[2 * b] / (double)n - mean;
        m2 += mom[2 * b + 1] + (double)n * (d * d);
    }
    double bound = (double)k * sqrt(m2 / (double)count);
    return bound > 0 && bound <= FLT_MAX ? (float)bound : 0.0f;
}

static shoal_dev_codec_args_t ternary_args(const struct shoal_compressor *c, uint64_t step,
                                           shoal_dev_codec_op_t op)
{
    return (shoal_dev_codec_args_t){
        .op = op, .kind = SHOAL_DEV_CODEC_TERNARY, .block = c->opt.block,
        .round = SHOAL_ROUND_STOCHASTIC, .seed = shoal_comp_rank_seed(c, c->comm->team.rank),
        .step = step, .scales = c->dev.scales, .count = c->count,
    };
}

/* The fp32 input on the device: sendbuf, or its widened copy. */
static const float *input_of(const struct shoal_compressor *c, const shoal_call_t *call)
{
    return c->dtype == SHOAL_FLOAT32 ? call->args.sendbuf : c->dev.x;
}

static shoal_status_t tscales_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                  unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    const float *x;
    shoal_status_t r = shoal_comp_dev_input(ops, call, &x);
    shoal_dev_codec_args_t a = ternary_args(c, call->comp_step, SHOAL_DEV_CODEC_ABSMAX);
    a.src = x;
    a.addend = call->args.residual_in;
    a.dst = (float *)(pay + tscales_off(c, T_AMAX));
    if (r == SHOAL_OK)
        r = ops->codec(&a, call->stream);
    if (r == SHOAL_OK && c->opt.clip_sigma > 0) {
        a.op = SHOAL_DEV_CODEC_MOMENTS;
        a.dst = NULL;
        a.wire_out = pay + tscales_off(c, T_MOMENTS);
        r = ops->codec(&a, call->stream);
    }
    return r;
}

static shoal_status_t tscales_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                   unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    shoal_status_t r = ops->copy(c->dev.scales, pay + tscales_off(c, T_SCALES),
                                 nblocks_of(c) * sizeof(float), call->stream);
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
    return r;
}

static const shoal_dev_stager_t tscales_stager = {
    .need = tscales_need,
    .pre = tscales_pre,
    .post = tscales_post,
};

static size_t tcodes_need(const shoal_call_t *call)
{
    return shoal_comp_up64(call->comp->count);
}

static shoal_status_t tcodes_pre(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                 unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    shoal_dev_codec_args_t a = ternary_args(c, call->comp_step, SHOAL_DEV_CODEC_ENCODE);
    a.wire_out = pay;
    a.src = input_of(c, call);
    a.addend = call->args.residual_in;
    a.residual = call->args.residual;
    return ops->codec(&a, call->stream);
}

static shoal_status_t tcodes_post(const shoal_dev_ops_t *ops, shoal_call_t *call,
                                  unsigned char *pay)
{
    const struct shoal_compressor *c = call->comp;
    float *out = c->dtype == SHOAL_FLOAT32 ? call->args.recvbuf : c->dev.x;
    shoal_dev_codec_args_t a = ternary_args(c, call->comp_step, SHOAL_DEV_CODEC_DECODE);
    a.wire_in = pay;
    a.dst = out;
    shoal_status_t r = ops->codec(&a, call->stream);
    if (r == SHOAL_OK && call->args.op == SHOAL_AVG)
        r = ops->avg(out, out, c->count, SHOAL_FLOAT32, c->nranks, call->stream);
    if (r == SHOAL_OK && c->dtype != SHOAL_FLOAT32)
        r = ops->convert(call->args.recvbuf, c->dtype, out, SHOAL_FLOAT32, c->count,
                         call->stream);
    call->args.sendbuf = pay;
    call->args.recvbuf = pay;
    return r;
}

static const shoal_dev_stager_t tcodes_stager = {
    .need = tcodes_need,
    .pre = tcodes_pre,
    .post = tcodes_post,
};

shoal_status_t shoal_comp_dev_inner(struct shoal_comm *comm, const shoal_call_t *call,
                                    shoal_coll_kind_t kind, const void *send, void *recv,
                                    size_t count, shoal_dtype_t dtype, shoal_op_t op)
{
    shoal_call_t c = {
        .what = call->what,
        .args = {.kind = kind, .sendbuf = send, .recvbuf = recv, .count = count,
                 .dtype = dtype, .op = op},
        .sig_kind = SHOAL_SIG_COMPRESSOR,
    };
    return shoal_call_run(comm, &c);
}

static shoal_status_t inner_bytes(struct shoal_comm *comm, const shoal_call_t *call,
                                  shoal_coll_kind_t kind, const void *send, void *recv,
                                  size_t bytes)
{
    return shoal_comp_dev_inner(comm, call, kind, send, recv, bytes, SHOAL_UINT8, SHOAL_SUM);
}

/* The scales' host side: each rank's block maxima (clipped to its bound)
 * rounded up to bf16, their max over the ranks, back to fp32 for the
 * stream to copy. */
static shoal_status_t tscales_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    const float *amax = (const float *)(pay + tscales_off(c, T_AMAX));
    uint16_t *s16 = (uint16_t *)(pay + tscales_off(c, T_S16));
    float *scales = (float *)(pay + tscales_off(c, T_SCALES));
    size_t nb = nblocks_of(c);
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    float bound = 0.0f;
    if (c->opt.clip_sigma > 0)
        bound = clip_bound_of((const double *)(pay + tscales_off(c, T_MOMENTS)), c->count,
                              c->opt.block, c->opt.clip_sigma);
    for (size_t b = 0; b < nb; b++)
        s16[b] = shoal_comp_scale_bf16_up(bound > 0 ? fminf(amax[b], bound) : amax[b]);
    shoal_status_t s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLREDUCE, s16, s16, nb,
                                            SHOAL_BFLOAT16, SHOAL_MAX);
    for (size_t b = 0; s == SHOAL_OK && b < nb; b++)
        scales[b] = shoal_bf16_to_f32(s16[b]);
    c->dev.first_tx = comm->team.tx_bytes - tx0;
    c->dev.first_rx = comm->team.rx_bytes - rx0;
    if (s != SHOAL_OK)
        atomic_store(&c->dev.lost, 1);
    return s;
}

/* The codes' host side: their sum over the ranks. */
static shoal_status_t tcodes_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    uint64_t tx0 = comm->team.tx_bytes - c->dev.first_tx;
    uint64_t rx0 = comm->team.rx_bytes - c->dev.first_rx;
    shoal_status_t s = shoal_comp_dev_inner(comm, call, SHOAL_COLL_ALLREDUCE,
                                            call->args.sendbuf, call->args.recvbuf, c->count,
                                            SHOAL_INT8, SHOAL_SUM);
    if (s == SHOAL_OK)
        shoal_comp_info(comm, call, tx0, rx0, call->comp_step);
    else
        atomic_store(&c->dev.lost, 1);
    return s;
}

/* INT8's host side. */
static shoal_status_t int8_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    unsigned char *pay = call->args.recvbuf;
    uint64_t tx0 = comm->team.tx_bytes, rx0 = comm->team.rx_bytes;
    dev_lay_t l;
    size_t lo, len;
    lay_of(c, &l);
    chunk_of(c, l.n, l.me, &lo, &len);
    float *sum = (float *)(pay + l.sum), *err = (float *)(pay + l.err);
    float *tmp = (float *)(pay + l.tmp);
    memcpy(sum, pay + l.mine, len * sizeof(float));
    shoal_status_t s = SHOAL_OK;
    if (l.n == 1) {
        memset(err, 0, len * sizeof(float));
    } else {
        s = inner_bytes(comm, call, SHOAL_COLL_ALLTOALL, pay + l.w_in, pay + l.w_rx, l.cw);
        if (s == SHOAL_OK) {
            shoal_comp_dev_owner_sum(call, sum, tmp, pay + l.w_rx, l.cw, len, lo);
            shoal_codec_t own = shoal_comp_dev_host_codec(c, l.me, call->comp_step);
            own.ops->encode(&own, pay + l.w_own, sum, NULL, err, len, lo);
            s = inner_bytes(comm, call, SHOAL_COLL_ALLGATHER, pay + l.w_own, pay + l.w_out,
                            l.cw);
        }
    }
    if (s == SHOAL_OK)
        shoal_comp_info(comm, call, tx0, rx0, call->comp_step);
    else
        atomic_store(&c->dev.lost, 1);
    return s;
}

/* INT8's host side on the direct path (one host): the same schedule as
 * int8_run's, with the wires in the ranks' device scratch. After the
 * scratch's exchange (core/dev_priv.h), each rank, on the executor's
 * stream, decodes every peer's contribution to its chunk straight from
 * the peer's scratch and adds it to its exact values in int8_run's
 * order, quantises the sum once (its residual beside), and after a
 * barrier copies every owner's encoded sum into its own scratch, where
 * the stream's side after the call decodes them; a last barrier keeps
 * each scratch until no peer reads it. The kernels are the host codec's
 * element math, so the bits are int8_run's. Where some rank cannot open
 * its peers' scratch, every rank runs int8_run on the payload instead:
 * the scratch copied in, the results copied back. */
static shoal_status_t dev_failed(struct shoal_comm *comm, const shoal_call_t *call,
                                 shoal_status_t s)
{
    return shoal_coll_failed(comm, s, "%s: device work failed: %s", call->what,
                             call->comp->dev.ops->why());
}

/* int8_run on the payload, where some rank cannot go direct. */
static shoal_status_t int8_direct_staged(struct shoal_comm *comm, const shoal_call_t *call,
                                         void *st)
{
    const struct shoal_compressor *c = call->comp;
    const shoal_dev_ops_t *ops = c->dev.ops;
    unsigned char *pay = call->args.recvbuf, *w = c->dev.wire;
    dev_lay_t l;
    lay_of(c, &l);
    shoal_status_t s = ops->copy(pay, w, l.need, st);
    if (s == SHOAL_OK)
        s = ops->stream_sync(st);
    if (s != SHOAL_OK)
        return dev_failed(comm, call, s);
    s = int8_run(comm, call);
    if (s != SHOAL_OK)
        return s;
    /* The encoded sums and the owner's residual, which the stream's side
     * after the call reads from the scratch. */
    s = ops->copy(w + l.w_out, pay + l.w_out, l.need - l.w_out, st);
    if (s == SHOAL_OK)
        s = ops->stream_sync(st);
    return s == SHOAL_OK ? s : dev_failed(comm, call, s);
}

/* This rank's chunk: every peer's contribution decoded from the peer's
 * scratch and added to the exact values in int8_run's order, the sum
 * quantised once with its residual. */
static shoal_status_t int8_direct_reduce(const shoal_call_t *call, char **peer, void *st)
{
    const struct shoal_compressor *c = call->comp;
    const shoal_dev_ops_t *ops = c->dev.ops;
    unsigned char *w = c->dev.wire;
    dev_lay_t l;
    size_t lo, len;
    lay_of(c, &l);
    chunk_of(c, l.n, l.me, &lo, &len);
    float *sum = (float *)(w + l.sum), *tmp = (float *)(w + l.tmp);
    if (len == 0)
        return SHOAL_OK;
    shoal_status_t s = ops->copy(sum, w + l.mine, len * sizeof(float), st);
    for (int k = 1; k < l.n && s == SHOAL_OK; k++) {
        int from = (l.me - k + l.n) % l.n;
        shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, from, call->comp_step,
                                                        SHOAL_DEV_CODEC_DECODE);
        a.wire_in = peer[from] + l.w_in + (size_t)l.me * l.cw;
        a.dst = tmp;
        a.count = len;
        a.first = lo;
        s = ops->codec(&a, st);
        if (s == SHOAL_OK)
            s = ops->reduce(sum, sum, tmp, len, SHOAL_FLOAT32, SHOAL_SUM, st);
    }
    if (s == SHOAL_OK) {
        shoal_dev_codec_args_t a = shoal_comp_dev_codec(c, l.me, call->comp_step,
                                                        SHOAL_DEV_CODEC_ENCODE);
        a.wire_out = w + l.w_own;
        a.src = sum;
        a.residual = (float *)(w + l.err);
        a.count = len;
        a.first = lo;
        s = ops->codec(&a, st);
    }
    return s;
}

static shoal_status_t int8_direct_run(struct shoal_comm *comm, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    const shoal_dev_ops_t *ops = c->dev.ops;
    unsigned char *w = c->dev.wire;
    dev_lay_t l;
    lay_of(c, &l);
    char **peer = calloc((size_t)l.n, sizeof(*peer));
    void *st = NULL;
    int all_ok = 0;
    shoal_status_t s = peer ? shoal_dev_direct_stream(comm, call, c->dev.device, &st)
                            : shoal_coll_failed(comm, SHOAL_ERR_NO_MEMORY, "%s: no memory",
                                                call->what);
    if (s == SHOAL_OK)
        s = shoal_dev_direct_share(comm, call, 1, w, l.need, NULL, 0, peer, NULL, &all_ok);
    if (s != SHOAL_OK || !all_ok) {
        if (s == SHOAL_OK)
            s = int8_direct_staged(comm, call, st);
        goto out;
    }
    s = int8_direct_reduce(call, peer, st);
    if (s == SHOAL_OK)
        s = ops->stream_sync(st);
    if (s != SHOAL_OK) {
        s = dev_failed(comm, call, s);
        goto out;
    }
    /* Every chunk's sum encoded before any is read. */
    s = shoal_dev_direct_barrier(comm, call);
    for (int j = 0; j < l.n && s == SHOAL_OK; j++)
        s = ops->copy(w + l.w_out + (size_t)j * l.cw, peer[j] + l.w_own, l.cw, st);
    if (s == SHOAL_OK && (s = ops->stream_sync(st)) != SHOAL_OK)
        s = dev_failed(comm, call, s);
    if (s == SHOAL_OK)
        s = shoal_dev_direct_barrier(comm, call);
    if (s == SHOAL_OK) {
        /* What crossed between the devices: as the staged schedule's
         * all-to-all and all-gather of the wires. */
        uint64_t moved = 2 * (uint64_t)(l.n - 1) * l.cw;
        comm->dev->direct_runs++;
        shoal_comp_info_moved(call, moved, moved, call->comp_step);
    }
out:
    if (s != SHOAL_OK)
        atomic_store(&c->dev.lost, 1);
    free(peer);
    return s;
}

/* Where p lives: its device, or -1 when the device cannot reach it as a
 * compressor's kernels need (host memory). */
static int buffer_device(const shoal_dev_ops_t *ops, const void *p)
{
    shoal_dev_mem_t kind;
    int device;
    if (!p || ops->classify(p, &kind, &device) != SHOAL_OK)
        return -1;
    return kind == SHOAL_DEV_MEM_DEVICE || kind == SHOAL_DEV_MEM_MANAGED ? device : -1;
}

shoal_status_t shoal_comp_dev_alloc(const shoal_dev_ops_t *ops, struct shoal_compressor *c,
                                    int device, size_t bytes, void **p)
{
    shoal_status_t r = ops->mem_alloc(device, bytes, p);
    if (r == SHOAL_OK)
        c->dev.bytes += bytes;
    return r;
}

static void free_buffers(const shoal_dev_ops_t *ops, struct shoal_compressor *c)
{
    shoal_comp_dev_t *d = &c->dev;
    if (c->psgd)
        shoal_comp_psgd_free(ops, c);
    if (d->res)
        ops->mem_free(d->res);
    if (d->res_next)
        ops->mem_free(d->res_next);
    if (d->x)
        ops->mem_free(d->x);
    if (d->host)
        ops->host_free(d->host);
    if (d->scales)
        ops->mem_free(d->scales);
    if (d->wire)
        ops->mem_free(d->wire);
    d->res = d->res_next = d->x = d->host = d->scales = NULL;
    d->wire = NULL;
    d->bytes = 0;
}

/* The state moves to device on the first call: the residual as the host
 * holds it (zero, or what set_state put there), through pinned memory, so
 * that the copy waits for nothing on the host: the stream may be held
 * behind work the caller queued. */
shoal_status_t shoal_comp_dev_upload(const shoal_dev_ops_t *ops, const shoal_call_t *call)
{
    struct shoal_compressor *c = call->comp;
    shoal_comp_dev_t *d = &c->dev;
    shoal_status_t r = SHOAL_OK;
    if (!d->upload)
        return SHOAL_OK;
    d->upload = 0;
    if (c->res)
        r = ops->copy(d->upload_to, d->host, c->nres * sizeof(float), call->stream);
    if (r == SHOAL_OK && c->psgd)
        r = shoal_comp_psgd_upload(ops, c, call->stream);
    return r;
}

shoal_status_t shoal_comp_dev_input(const shoal_dev_ops_t *ops, const shoal_call_t *call,
                                    const float **x_p)
{
    const struct shoal_compressor *c = call->comp;
    shoal_status_t r = shoal_comp_dev_upload(ops, call);
    *x_p = call->args.sendbuf;
    if (r == SHOAL_OK && c->dtype != SHOAL_FLOAT32) {
        r = ops->convert(c->dev.x, SHOAL_FLOAT32, call->args.sendbuf, c->dtype, c->nin,
                         call->stream);
        *x_p = c->dev.x;
    }
    return r;
}

static shoal_status_t state_to_device(struct shoal_compressor *c, const shoal_dev_ops_t *ops,
                                      int device, void *stream)
{
    shoal_comp_dev_t *d = &c->dev;
    /* The residual is the input's shape (nres), dev.x the larger of the
     * input's and the output's (the all-gather's decodes one block). */
    size_t nx = c->nin > c->nout ? c->nin : c->nout;
    size_t bytes = (c->nres ? c->nres : 1) * sizeof(float);
    shoal_status_t r = SHOAL_OK;
    if (c->res) {
        r = shoal_comp_dev_alloc(ops, c, device, bytes, (void **)&d->res);
        if (r == SHOAL_OK)
            r = shoal_comp_dev_alloc(ops, c, device, bytes, (void **)&d->res_next);
        if (r == SHOAL_OK)
            r = ops->host_alloc(bytes, (void **)&d->host);
    }
    if (r == SHOAL_OK && (c->dtype != SHOAL_FLOAT32 || c->psgd))
        r = shoal_comp_dev_alloc(ops, c, device, (nx ? nx : 1) * sizeof(float), (void **)&d->x);
    if (r == SHOAL_OK && c->opt.kind == SHOAL_COMPRESS_TERNARY)
        r = shoal_comp_dev_alloc(ops, c, device, (nblocks_of(c) + 1) * sizeof(float),
                                 (void **)&d->scales);
    if (r == SHOAL_OK && c->psgd)
        r = shoal_comp_psgd_alloc(ops, c, device);
    if (r != SHOAL_OK) {
        free_buffers(ops, c);
        return r;
    }
    /* The first call's stream work copies it in (shoal_comp_dev_upload):
     * inside a group, nothing is queued before the group's end. */
    if (c->res)
        memcpy(d->host, c->res, c->nres * sizeof(float));
    if (c->psgd)
        shoal_comp_psgd_stage_state(c);
    d->upload = 1;
    d->upload_to = d->res;
    d->ops = ops;
    d->device = device;
    d->stream = stream;
    return SHOAL_OK;
}

/* Why c cannot take call on the device, or NULL. */
static const char *dev_problem(const struct shoal_compressor *c)
{
    if (c->opt.coll != SHOAL_COMPRESS_COLL_ALLREDUCE)
        return c->opt.kind == SHOAL_COMPRESS_INT8
                   ? NULL
                   : "the compressed all-gather, reduce-scatter and all-to-all of device "
                     "tensors take INT8 (the device kernels there): other kinds take host "
                     "memory";
    if (c->opt.kind != SHOAL_COMPRESS_INT8 && c->opt.kind != SHOAL_COMPRESS_TERNARY &&
        c->opt.kind != SHOAL_COMPRESS_POWERSGD)
        return "SIGN, MAJORITY, INT4 and ADAPTIVE compressors have no device kernels: their "
               "calls take host memory";
    if (c->opt.kind == SHOAL_COMPRESS_POWERSGD && shoal_group_active())
        return "a POWERSGD compressor's stream-ordered call is two calls, which a group "
               "cannot hold";
    if (c->opt.kind == SHOAL_COMPRESS_TERNARY && c->nranks > 1) {
        if (c->nranks > 127)
            return "a TERNARY compressor takes device tensors up to 127 ranks";
        if (shoal_group_active())
            return "a TERNARY compressor's stream-ordered call is two calls, which a group "
                   "cannot hold";
    }
    return NULL;
}

/* Whether INT8's call goes device to device (int8_direct_run): on one
 * host, unless SHOAL_CUDA_PATH says staged, by the direct path's cost
 * model (auto) for a call that moves the wires (their all-reduce standing
 * for the staged schedule's all-to-all and all-gather), so every rank
 * decides alike. */
static int int8_goes_direct(const struct shoal_comm *comm, const struct shoal_compressor *c,
                            const shoal_call_t *call)
{
    if (c->opt.kind != SHOAL_COMPRESS_INT8 || c->psgd || c->nranks < 2 ||
        comm->team.nhosts != 1 || !strcmp(shoal_config_get()->cuda.path, "staged"))
        return 0;
    dev_lay_t l;
    lay_of(c, &l);
    size_t wires = (size_t)l.n * l.cw;
    shoal_call_t w = {.what = call->what,
                      .args = {.kind = SHOAL_COLL_ALLREDUCE, .count = wires,
                               .dtype = SHOAL_UINT8, .op = SHOAL_SUM},
                      .in_bytes = wires, .out_bytes = wires};
    return shoal_dev_direct_pays(comm, &w);
}

/* Ready call for the staged path: the checks of its buffers, the state
 * moved to their device on the first call, the residuals and step as of
 * the call. Entered comm; fails with the reason on it. */
static shoal_status_t dev_prepare(struct shoal_compressor *c, shoal_call_t *call)
{
    struct shoal_comm *comm = c->comm;
    const char *what = call->what;
    const shoal_dev_ops_t *ops = shoal_dev_get();
    const char *problem = dev_problem(c);
    if (!ops)
        return shoal_comm_fail(comm, SHOAL_ERR_UNSUPPORTED, "%s: a stream-ordered call needs "
                               "CUDA: %s", what, shoal_dev_why());
    if (problem)
        return shoal_comm_fail(comm, SHOAL_ERR_UNSUPPORTED, "%s: %s", what, problem);
    if (atomic_load(&c->busy))
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: a host call on this "
                               "compressor is still in flight", what);
    int sdev = buffer_device(ops, call->args.sendbuf);
    int rdev = buffer_device(ops, call->args.recvbuf);
    if (sdev < 0 || rdev != sdev)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: sendbuf %p and recvbuf %p "
                               "must be device (or managed) memory of one device (here "
                               "devices %d and %d; -1: host memory)", what, call->args.sendbuf,
                               call->args.recvbuf, sdev, rdev);
    if (c->dev.ops && sdev != c->dev.device)
        return shoal_comm_fail(comm, SHOAL_ERR_INVALID_ARG, "%s: the buffers are on device "
                               "%d, and the compressor's state on device %d", what, sdev,
                               c->dev.device);
    if (!c->dev.ops) {
        shoal_status_t r = state_to_device(c, ops, sdev, call->stream);
        if (r != SHOAL_OK)
            return shoal_comm_fail(comm, r, "%s: cannot keep the compressor's state on device "
                                   "%d: %s", what, sdev, ops->why());
    }
    call->stager = &comp_stager;
    call->run = int8_run;
    if (c->opt.coll != SHOAL_COMPRESS_COLL_ALLREDUCE) {
        shoal_comp_dev_colls_pick(c, call);
    } else if (int8_goes_direct(comm, c, call)) {
        dev_lay_t l;
        lay_of(c, &l);
        if (!c->dev.wire &&
            shoal_comp_dev_alloc(ops, c, sdev, l.need, (void **)&c->dev.wire) != SHOAL_OK)
            return shoal_comm_fail(comm, SHOAL_ERR_NO_MEMORY, "%s: no device memory for the "
                                   "direct path's %zu bytes of scratch: %s", what, l.need,
                                   ops->why());
        call->stager = &direct_stager;
        call->run = int8_direct_run;
    }
    call->args.residual_in = c->dev.res;
    call->args.residual = c->dev.res_next;
    call->comp_step = c->step;
    return SHOAL_OK;
}

shoal_status_t shoal_comp_dev_issue(struct shoal_compressor *c, shoal_call_t *call)
{
    struct shoal_comm *comm = c->comm;
    shoal_status_t s = shoal_comm_enter_any(comm, call->what);
    if (s != SHOAL_OK)
        return s;
    s = dev_prepare(c, call);
    shoal_comm_leave(comm);
    if (s != SHOAL_OK)
        return s;
    if (c->psgd) {
        s = shoal_comp_psgd_issue(c, call);
    } else {
        if (c->opt.kind == SHOAL_COMPRESS_TERNARY && c->nranks > 1) {
            shoal_call_t scales = *call;
            scales.stager = &tscales_stager;
            scales.run = tscales_run;
            scales.info = NULL;
            if ((s = shoal_call_issue(comm, &scales, 0, NULL)) != SHOAL_OK)
                return s;
            call->stager = &tcodes_stager;
            call->run = tcodes_run;
        }
        s = shoal_call_issue(comm, call, 0, NULL);
    }
    if (s != SHOAL_OK)
        return s;
    if (c->count == 0 && call->info)
        *call->info = (shoal_compress_info_t){.step = c->step};
    /* The next call's residuals and step. */
    shoal_comp_dev_t *d = &c->dev;
    if (d->res) {
        float *t = d->res;
        d->res = d->res_next;
        d->res_next = t;
    }
    d->stream = call->stream;
    c->step++;
    return SHOAL_OK;
}

/* pull: wait for the stream, then the device residual into the host's
 * (PowerSGD's Q is the host's already: each call's host side keeps it).
 * push: the host's state goes in with the next call's stream work, after
 * whatever the stream still runs. */
static shoal_status_t dev_move(struct shoal_compressor *c, int to_host)
{
    shoal_comp_dev_t *d = &c->dev;
    size_t bytes = c->nres * sizeof(float);
    shoal_status_t r = SHOAL_OK;
    if (!d->ops)
        return SHOAL_OK;
    if (!to_host) {
        if (c->res)
            memcpy(d->host, c->res, bytes);
        if (c->psgd)
            shoal_comp_psgd_stage_state(c);
        d->upload = 1;
        d->upload_to = d->res;
        return SHOAL_OK;
    }
    r = d->ops->stream_sync(d->stream);
    /* Nothing copied in yet: the host's is current. */
    if (r != SHOAL_OK || !c->res || d->upload)
        return r;
    r = d->ops->copy(d->host, d->res, bytes, d->stream);
    if (r == SHOAL_OK)
        r = d->ops->stream_sync(d->stream);
    if (r == SHOAL_OK)
        memcpy(c->res, d->host, bytes);
    return r;
}

shoal_status_t shoal_comp_dev_pull(struct shoal_compressor *c)
{
    return dev_move(c, 1);
}

shoal_status_t shoal_comp_dev_push(struct shoal_compressor *c)
{
    shoal_status_t r = dev_move(c, 0);
    if (r == SHOAL_OK)
        atomic_store(&c->dev.lost, 0);
    return r;
}

void shoal_comp_dev_free(struct shoal_compressor *c)
{
    shoal_comp_dev_t *d = &c->dev;
    if (!d->ops)
        return;
    /* Queued calls may still read them. */
    d->ops->stream_sync(d->stream);
    free_buffers(d->ops, c);
    d->ops = NULL;
    d->stream = NULL;
}
